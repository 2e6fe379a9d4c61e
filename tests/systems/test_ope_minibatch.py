"""`privrl ope gpope --mode minibatch`: Poisson-subsampled minibatch GTD2 (`privrl.ope.minibatch`)
on the run layer. The plan's σ is calibrated (PLD, add/remove) from public inputs before the
data are read; a neighbour under add/remove publishes the same config.json and privacy.json;
bad values are one `error:` line; `privrl run CONFIG.toml` is the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.privacy_accountant import NeighboringRelation

from privrl.cli.main import main
from privrl.data.io import load_hdf5, save_hdf5
from privrl.envs.chain import ChainMDP
from privrl.systems.ope import GpopeConfig

M, EPS, Q, T = 100, 1.0, 0.2, 100  # one (ε, q, T): the PLD calibration runs once (cached)
MB = ["ope", "gpope", "--mode", "minibatch", "--epsilon", str(EPS)]
MB += ["--sampling-rate", str(Q), "--steps", str(T)]
FIXED = ["--clip", "0.01", "--step-size", "3"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


def read(out: Path, name: str, data: Path | None = None) -> dict:
    text = (out / name).read_text()
    if data is not None:
        text = text.replace(str(data), "DATA")
    out_ = json.loads(text)
    out_.pop("created", None)
    return out_


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """D (M chain episodes), D′ = D without its last episode (an add/remove neighbour), and an
    independent public sample to tune on."""
    root = tmp_path_factory.mktemp("data")
    d = ChainMDP().sample(M, seed=0)
    paths = {
        "d": save_hdf5(d, root / "d.h5"),
        "d2": save_hdf5(d.subset(np.arange(M - 1)), root / "d2.h5"),
        "public": save_hdf5(ChainMDP().sample(M, seed=99), root / "public.h5"),
    }
    assert load_hdf5(paths["d2"]).n_episodes == M - 1
    return paths


# ------------------------------------------------------------------------ accounting


def test_the_plans_epsilon_is_dp_accountings_pld(tmp_path: Path, capsys) -> None:
    """Privacy (accounting): privacy.json states add/remove and an ε that equals
    dp-accounting's PLDAccountant (add/remove, discretisation 1e-4) on T × PoissonSampled(q,
    Gaussian(σ)) for the (q, σ, T) it lists, to a relative 1e-6 (the same computation); that
    ε meets the target and is within 1% of it (σ is the smallest that meets it, up to the
    calibration's tolerance). The replace-one ε beside it is PLD's for noise multiplier σ/2."""
    out = tmp_path / "a"
    argv = [*MB, *FIXED, "--env", "chain", "--trajectories", str(M), "--out", str(out)]
    code, err = run(argv, capsys)
    assert code == 0, err
    report = read(out, "privacy.json")
    (release,) = report["releases"]
    sigma = release["noise"]["noise_multiplier"]
    q, count = release["extra"]["sampling_probability"], release["count"]
    assert (q, count, report["relation"]) == (Q, T, "add_remove")

    def pld(noise: float, relation: NeighboringRelation) -> float:
        acc = pld_privacy_accountant.PLDAccountant(relation, 1e-4)
        acc.compose(
            dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(noise)), count
            )
        )
        return acc.get_epsilon(report["delta"])

    assert report["epsilon"] == pytest.approx(pld(sigma, NeighboringRelation.ADD_OR_REMOVE_ONE))
    assert 0.99 * EPS <= report["epsilon"] <= EPS
    ro = release["extra"]["epsilon_replace_one"]
    assert ro == pytest.approx(pld(sigma / 2, NeighboringRelation.REPLACE_ONE), rel=1e-6)
    assert ro > report["epsilon"] and any("replace-one" in n for n in report["notes"])
    params = {p["name"]: p for p in report["public_parameters"]}
    assert params["sampling rate q"]["source"] == "flag"
    assert params["noise σ (std / h)"]["value"] == pytest.approx(sigma)
    metrics = read(out, "metrics.json")
    assert metrics["mspbe"] < 0.0367  # the chain's θ = 0 MSPBE: it learns something
    assert metrics["epsilon"] == report["epsilon"]
    assert metrics["value_ci_low"] < metrics["value"] < metrics["value_ci_high"]


def test_the_default_q_follows_the_declared_size(files, tmp_path: Path, capsys) -> None:
    """q = min(1, 20/m̄) with m̄ the DECLARED number of trajectories (--declared-trajectories,
    here M for a file holding M − 1), listed as derived; the header's count is not listed."""
    out = tmp_path / "q"
    argv = ["ope", "gpope", "--mode", "minibatch", "--epsilon", "1", "--steps", str(T)]
    argv += [*FIXED, "--data", str(files["d2"]), "--features", "onehot"]
    code, err = run([*argv, "--declared-trajectories", str(M), "--out", str(out)], capsys)
    assert code == 0, err
    params = {p["name"]: p for p in read(out, "privacy.json")["public_parameters"]}
    assert params["sampling rate q"]["value"] == 20 / M
    assert params["sampling rate q"]["source"] == "derived"
    assert params["declared trajectories m̄"]["value"] == M
    assert "trajectories m" not in params
    assert read(out, "config.json")["trajectories"] == M


def test_the_plan_needs_only_the_header_and_a_spent_ledger_refuses(tmp_path: Path, capsys):
    """Structural rule: σ, h, η and the report come from the header and flags; a spent
    add/remove ledger refuses the run before the episode arrays are read (they are deleted
    here, so reading them would fail differently), and a replace-one ledger is refused with a
    line naming the relation the minibatch mode needs."""
    import h5py

    from privrl.privacy.ledger import BudgetLedger

    base = [*MB, *FIXED, "--features", "onehot", "--declared-trajectories", str(M)]
    for relation, needle in (("add_remove", "budget"), ("replace_one", "--relation add_remove")):
        seed = 1 if relation == "add_remove" else 2  # a ledger belongs to the content
        path = save_hdf5(ChainMDP().sample(M, seed=seed), tmp_path / f"{relation}.h5")
        BudgetLedger.init(path, epsilon=0.01, delta=1e-3, unit="trajectory", relation=relation)
        with h5py.File(path, "r+") as f:
            del f["observations"]
        out = tmp_path / f"o-{relation}"
        code, err = run([*base, "--data", str(path), "--out", str(out)], capsys)
        assert code == 2 and needle in error_line(err)
        assert not (out / "config.json").exists()


# ------------------------------------------------------------------------ neighbours

VALUE_KEYS = {"value", "value_ci_low", "value_ci_high"}


def test_an_add_remove_neighbour_publishes_the_same_files(files, tmp_path: Path, capsys):
    """Property (DESIGN.md, "Public parameters"), under the mode's own relation: on D and
    D′ = D minus one trajectory, config.json and privacy.json are identical (m̄ is declared,
    never the header's count; h and η are tuned on the public file), and so is metrics.json
    apart from the released θ̄'s value and its interval bounds."""
    argv = [*MB, "--features", "onehot", "--declared-trajectories", str(M)]
    argv += ["--public-data", str(files["public"]), "--start-states", "uniform", "--seed", "3"]
    results = []
    for key in ("d", "d2"):
        out = tmp_path / key
        code, err = run([*argv, "--data", str(files[key]), "--out", str(out)], capsys)
        assert code == 0, err
        results.append([read(out, n, files[key]) for n in ("config.json", "privacy.json")])
        results[-1].append(read(out, "metrics.json"))
    (c1, p1, m1), (c2, p2, m2) = results
    assert c1 == c2 and p1 == p2
    same = set(m1) - VALUE_KEYS
    assert {k: m1[k] for k in same} == {k: m2[k] for k in same}
    assert m1["value"] != m2["value"]  # the released estimate did change
    assert "clipped_fraction" not in m1  # the private run's clip count is never published
    names = {p["name"] for p in p1["public_parameters"]}
    assert {"clip bound h", "step size η"} <= names and "trajectories m" not in names


# ------------------------------------------------------------------------ bad values

BAD = [
    (["--sampling-rate", "0"], "--sampling-rate", "must be in (0, 1]"),
    (["--sampling-rate", "1.5"], "--sampling-rate", "must be in (0, 1]"),
    (["--steps", "0"], "--steps", "at least 1"),
    (["--iterations", "10"], "--iterations", "--mode paper only"),
    (["--accounting", "paper"], "--accounting", "--mode paper only"),
    (["--declared-trajectories", "0"], "--declared-trajectories", ">= 1"),
    (["--mode", "paper", "--steps", "10"], "--steps", "--mode minibatch only"),
    (["--mode", "batch"], "--mode", "one of"),
]


@pytest.mark.parametrize("extra, flag, problem", BAD, ids=lambda v: str(v))
def test_bad_values_are_one_error_line(extra, flag, problem, tmp_path: Path, capsys) -> None:
    argv = ["ope", "gpope", "--mode", "minibatch", "--env", "chain", "--epsilon", "1", *extra]
    code, err = run([*argv, "--out", str(tmp_path / "o")], capsys)
    assert code == 2
    line = error_line(err)
    assert flag in line and problem in line, line
    assert not (tmp_path / "o" / "config.json").exists()


def test_with_data_the_declared_size_is_required(files, tmp_path: Path, capsys) -> None:
    """No flag and no declared metadata: refused (the header's count is not public under
    add/remove); a count the metadata marks as inferred from the data is refused too; with
    --env the declared size is --trajectories, so --declared-trajectories is refused."""
    argv = [*MB, *FIXED, "--features", "onehot", "--out", str(tmp_path / "o")]
    code, err = run([*argv, "--data", str(files["d"])], capsys)
    assert code == 2 and "--declared-trajectories" in error_line(err)
    d = load_hdf5(files["d"])
    meta = d.metadata.with_extra(n_trajectories=M, inferred_from_data=["n_trajectories"])
    inferred = save_hdf5(d.with_metadata(meta), tmp_path / "inferred.h5")
    code, err = run([*argv, "--data", str(inferred)], capsys)
    assert code == 2 and "inferred" in error_line(err)
    declared = save_hdf5(
        d.with_metadata(d.metadata.with_extra(n_trajectories=M)), tmp_path / "ok.h5"
    )
    code, err = run([*argv, "--data", str(declared)], capsys)
    assert code == 0, err
    code, err = run([*argv, "--env", "chain", "--declared-trajectories", "5"], capsys)
    assert code == 2 and "--data only" in error_line(err)
    argv = [*MB, "--features", "onehot", "--declared-trajectories", str(M)]
    code, err = run([*argv, "--data", str(files["d"]), "--out", str(tmp_path / "p")], capsys)
    assert code == 2 and "--public-data" in error_line(err)


# ------------------------------------------------------------------------ run = command line


def test_run_config_file_is_the_command_line(files, tmp_path: Path, capsys) -> None:
    """`privrl run CONFIG.toml` and the command line with the same seed write the same
    metrics.json, privacy.json (but its timestamp), config.json and θ."""
    values = {
        "data": str(files["d"]),
        "features": "onehot",
        "mode": "minibatch",
        "epsilon": EPS,
        "sampling_rate": Q,
        "steps": T,
        "clip": 0.01,
        "step_size": 3.0,
        "declared_trajectories": M,
    }
    argv = ["ope", "gpope"]
    for key, value in values.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    out_cli, out_file = tmp_path / "cli", tmp_path / "file"
    same = "--insecure-reproducible-noise"  # the same (insecure, repeatable) noise on both paths
    code, err = run([*argv, "--seed", "7", same, "--out", str(out_cli)], capsys)
    assert code == 0, err
    cfg = tmp_path / "run.toml"
    lines = {"system": "gpope", "out": str(out_file), "seed": 7, **values}
    lines["insecure_reproducible_noise"] = True
    cfg.write_text(
        "".join(
            f"{k} = {json.dumps(v)}\n"
            if isinstance(v, bool) or not isinstance(v, (int, float))
            else f"{k} = {v!r}\n"
            for k, v in lines.items()
        )
    )
    code, err = run(["run", str(cfg)], capsys)
    assert code == 0, err
    for name in ("metrics.json", "privacy.json", "config.json"):
        assert read(out_cli, name) == read(out_file, name)
    assert (out_cli / "theta.npy").read_bytes() == (out_file / "theta.npy").read_bytes()


def test_the_default_mode_is_the_paper() -> None:
    config = GpopeConfig(epsilon=1.0)
    assert config.mode == "paper" and config.sampling_rate is None and config.steps is None
    assert GpopeConfig.from_dict(config.to_dict()) == config
    mb = GpopeConfig(epsilon=1.0, mode="minibatch", sampling_rate=0.1, steps=50)
    assert GpopeConfig.from_dict(json.loads(json.dumps(mb.to_dict()))) == mb
    # the --steps help states the module's default
    from dataclasses import fields

    from privrl.ope.minibatch import DEFAULT_STEPS

    (steps,) = [f for f in fields(GpopeConfig) if f.name == "steps"]
    assert f"default {DEFAULT_STEPS}" in steps.metadata["help"]


def test_a_given_clip_is_kept_and_only_the_step_is_tuned(tmp_path: Path, capsys) -> None:
    """--clip without --step-size: h is the flag's, η is chosen on the public simulator sample
    from the module's public grid (listed as a public split)."""
    from privrl.ope.minibatch import TUNING_ETAS

    out = tmp_path / "t"
    argv = [*MB, "--clip", "0.01", "--env", "chain", "--trajectories", str(M), "--out", str(out)]
    code, err = run(argv, capsys)
    assert code == 0, err
    params = {p["name"]: p for p in read(out, "privacy.json")["public_parameters"]}
    assert params["clip bound h"]["value"] == 0.01 and params["clip bound h"]["source"] == "flag"
    assert params["step size η"]["source"] == "public split"
    assert params["step size η"]["value"] in TUNING_ETAS


def test_the_public_runs_follow_public_sizes_only(tmp_path: Path, capsys) -> None:
    """The value's replica count and the tuning's size come from T, n, q and the PUBLIC
    sample's size: 32 replicas at the defaults, fewer for a large batch, none when too costly;
    a tuning grid that would gather too much is refused with one line naming the fix."""
    from privrl.systems.ope import minibatch_value_replicas

    assert minibatch_value_replicas(2000, 39, 20) == 32
    assert 8 <= minibatch_value_replicas(2000, 39, 100) < 32
    assert minibatch_value_replicas(2000, 39, 5000) == 0
    argv = ["ope", "gpope", "--mode", "minibatch", "--env", "chain", "--trajectories", "1000"]
    argv += ["--epsilon", "1", "--sampling-rate", "1", "--steps", "10"]
    code, err = run([*argv, "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "give --clip and --step-size" in error_line(err)
