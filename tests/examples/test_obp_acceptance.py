"""examples/obp_acceptance.py on synthetic logs with the Open Bandit Dataset's columns (no
network, no obp): the estimates' intervals hold a value known by construction, and every
bound the example uses (W, reward range, horizon, noise, sensitivities) is the same for two
logs that differ in every click and propensity — so none is read from the data."""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location(
        "obp_acceptance", ROOT / "examples" / "obp_acceptance.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["obp_acceptance"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("obp_acceptance", None)


K = 10  # items of the synthetic design (OBD has 80)
P_CLICK = np.linspace(0.1, 0.5, K)  # true click rate of each item, at every position


def obd_csv(path: Path, m: int, seed: int, propensity: str = "uniform") -> Path:
    """A log with OBD's column layout (an unnamed index, timestamp, item_id, position 1..3,
    click, propensity_score, user features): items drawn uniformly at random (so the logged
    propensity 1/K is exact) or, with propensity="noisy", logged propensities that vary
    wildly from row to row (as a time-varying logging policy's would)."""
    rng = np.random.default_rng(seed)
    item = rng.integers(0, K, size=m)
    pos = rng.integers(1, 4, size=m)
    click = (rng.random(m) < P_CLICK[item]).astype(int)
    prop = np.full(m, 1.0 / K) if propensity == "uniform" else rng.uniform(1e-4, 0.9, size=m)
    lines = [",timestamp,item_id,position,click,propensity_score,user_feature_0"]
    lines += [
        f"{i},2019-11-24 00:00:{i % 60:02d}+00:00,{item[i]},{pos[i]},{click[i]},"
        f"{float(prop[i])!r},abc"
        for i in range(m)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def prior(ex, tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A prior file in obp's prior_bts.yaml layout whose means are the true click rates."""
    alpha, beta = 20 * P_CLICK, 20 * (1 - P_CLICK)
    text = "all:\n  alpha:\n" + "".join(f"    - {a}\n" for a in alpha)
    text += "  beta:\n" + "".join(f"    - {b}\n" for b in beta) + "men:\n  alpha:\n    - 1.0\n"
    (tmp_path / "prior_bts.yaml").write_text(text)
    a, b = ex.read_prior(tmp_path / "prior_bts.yaml")
    np.testing.assert_allclose(a, alpha)
    np.testing.assert_allclose(b, beta)
    return a, b


def setup(ex, tmp_path: Path, log: Path, name: str):
    alpha, beta = prior(ex, tmp_path)
    design = ex.public_design(alpha, beta, n_sim=4000, seed=1)
    out = tmp_path / name
    out.mkdir()
    files = {"bts": tmp_path / "bts.npy", "q": tmp_path / "q.npy"}  # shared by every log
    np.save(files["bts"], design["bts"])
    np.save(files["q"], design["q"])
    h5 = ex.import_log(log, out / "log.h5", n_actions=K)
    return design, files, h5, out


def test_bts_table_is_a_ranking_distribution(ex):
    """Each position holds exactly one item and each item at most one position."""
    alpha, beta = 20 * P_CLICK, 20 * (1 - P_CLICK)
    table = ex.bts_action_dist(alpha, beta, len_list=3, n_sim=5000, seed=0)
    assert table.shape == (3, K)
    np.testing.assert_allclose(table.sum(axis=1), 1.0)
    assert np.all(table.sum(axis=0) <= 1.0 + 1e-12)
    assert table[0].argmax() == K - 1  # the item with the highest prior mean leads


def test_estimates_cover_the_known_value(ex, tmp_path):
    """From a uniform-random log with known click rates: the uniform policy's value is
    mean(p) and the BTS table's value Σ_pos (1/3) Σ_a π(a|pos) p_a; the non-private and the
    private (ε = 5) intervals of IPS, SNIPS and DR hold it, and the point estimates are close."""
    log = obd_csv(tmp_path / "random.csv", 3000, seed=0)
    design, files, h5, out = setup(ex, tmp_path, log, "a")
    questions = design["questions"]
    uniform_q = ex.Question("uniform from random", "random", "uniform", "-", 1.0)
    bts_q = questions[1]
    assert (bts_q.target, bts_q.log) == ("bts", "random")
    truths = {
        uniform_q.name: float(P_CLICK.mean()),
        bts_q.name: float(np.mean(design["bts"] @ P_CLICK)),
    }
    for q, estimators in ((uniform_q, ("ips", "snips", "dr")), (bts_q, ("ips", "dr"))):
        rows = ex.evaluate_question(
            q,
            h5,
            truths[q.name],
            files,
            out / q.target,
            epsilons=(5.0,),
            estimators=estimators,
            n_noise=20,
            n_resample=40,
            seed=0,
        )
        assert len(rows) == 2 * len(estimators)  # non-private and ε = 5
        for r in rows:
            assert r["ci_low"] <= r["truth"] <= r["ci_high"], r  # the score interval
            assert r["ci_low_pop"] <= r["ci_low"] <= r["ci_high"] <= r["ci_high_pop"], r
            assert abs(r["value"] - r["truth"]) < 0.06, r
            assert r["coverage_resample_bd"] >= 0.8, r  # 40 resamples of a 95% interval
            if r["epsilon"] is not None:
                assert r["coverage_noise_bd"] >= 0.9, r
                assert r["epsilon_reported"] <= 5.0 + 1e-9
                privacy = json.loads((out / q.target / r["run_dir"] / "privacy.json").read_text())
                assert privacy["epsilon"] <= 5.0 + 1e-9


def test_bounds_are_not_read_from_the_logs(ex, tmp_path):
    """Structural: the design that sets W takes no log. Behavioural: two logs of the same size
    that differ in every click and propensity give identical public parameters (W, reward
    range, H, γ, noise multiplier, sensitivities) in privacy.json, W with source "flag"."""
    assert list(inspect.signature(ex.public_design).parameters) == [
        "alpha",
        "beta",
        "n_sim",
        "seed",
    ]
    published = []
    for name, propensity, seed in (("a", "uniform", 0), ("b", "noisy", 7)):
        log = obd_csv(tmp_path / f"{name}.csv", 400, seed=seed, propensity=propensity)
        design, files, h5, out = setup(ex, tmp_path, log, name)
        q = design["questions"][0]  # the uniform target evaluated from a (BTS-like) log
        rows = ex.evaluate_question(
            q,
            h5,
            0.3,
            files,
            out / "runs",
            epsilons=(1.0,),
            estimators=("ips", "dr"),
            n_noise=2,
            n_resample=2,
            seed=0,
        )
        params = {}
        for r in (r for r in rows if r["epsilon"] is not None):
            privacy = json.loads((out / "runs" / r["run_dir"] / "privacy.json").read_text())
            params[r["estimator"]] = privacy["public_parameters"]
        published.append((q.weight_clip, params))
    assert published[0] == published[1]
    for plist in published[0][1].values():
        by_name = {p["name"]: p for p in plist}
        assert by_name["weight clip W"]["source"] == "flag"
        assert by_name["horizon H"]["value"] == 1
        assert by_name["reward range"]["value"] == [0.0, 1.0]


def test_peer_not_run_says_why(ex, tmp_path):
    """Without --obp-python the output says the peer was not run, and why."""
    peer = ex.run_peer(None, None, [], tmp_path / "bts.npy", 0)
    assert peer["run"] is False
    assert "pandas" in peer["why"] and "--obp-python" in peer["why"]


def test_the_import_reads_obd_positions_as_published(ex, tmp_path):
    """OBD's 1-based positions enter as they are (``discrete:3:1``, no shift by hand); a
    position outside 1..3 is refused by the import with its column, never clipped."""
    from privrl.data import load_hdf5

    log = obd_csv(tmp_path / "log.csv", 200, seed=3)
    data = load_hdf5(ex.import_log(log, tmp_path / "log.h5", n_actions=K))
    assert data.n_episodes == 200
    assert set(np.unique(data.observations).tolist()) == {1, 2, 3}
    lines = log.read_text().splitlines()
    fields = lines[1].split(",")
    fields[3] = "4"  # the position column of the first impression
    lines[1] = ",".join(fields)
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="position"):
        ex.import_log(log, tmp_path / "bad.h5", n_actions=K)
