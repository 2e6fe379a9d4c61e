"""The θ-estimators (gpope, dp-lsw, dp-lsl, lstd) on a user's own log: a declared horizon
(γ = 1 for finite horizons, no 1/(1−γ) for a one-step log), target policies the user supplies
(.npy [S, A] / [H, S, A], a saved privrl policy.npz, module:function), and one `error:` line
with exit code 2 for each bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.cli.main import main
from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.io import save_hdf5
from privrl.offline.apvi import FiniteHorizonPolicy
from privrl.ope import gpope as gpope_mod

S, A, M, N = 4, 3, 100, 200
EPS, DELTA = 1.0, 1e-5
SIGMA_REF = 2.84  # meets (EPS, DELTA) for (M, N): checked in tests/ope/test_gpope.py


@pytest.fixture(autouse=True)
def fast_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the slow calibration for the one GPOPE configuration used here (as in
    tests/systems/test_ope.py); every report's ε is still computed by the accountant."""
    real = gpope_mod._cached_sigma

    def cached(eps: float, delta: float, m: int, n: int, mode: str) -> float:
        if (eps, delta, m, n, mode) == (EPS, DELTA, M, N, "rigorous"):
            return SIGMA_REF
        return real(eps, delta, m, n, mode)

    monkeypatch.setattr(gpope_mod, "_cached_sigma", cached)


def log(
    path: Path, *, lengths: list[int] | None = None, horizon: int | None = None, **extra: object
) -> Path:
    """A log of M episodes over S states and A actions with uniform propensities (one step
    each unless `lengths`), rewards in [0, 1], discount 1 in its metadata."""
    rng = np.random.default_rng(0)
    lengths_a = np.asarray(lengths if lengths is not None else [1] * M)
    n = int(lengths_a.sum())
    term = np.zeros(n, bool)
    term[np.cumsum(lengths_a) - 1] = True
    a = rng.integers(0, A, n)
    meta = DatasetMetadata(
        observation_space=spaces.Discrete(S),
        action_space=spaces.Discrete(A),
        discount=1.0,
        horizon=horizon,
        extra=dict(extra),
    )
    save_hdf5(
        TrajectoryDataset(
            observations=rng.integers(0, S, n + len(lengths_a)),
            actions=a,
            rewards=(rng.random(n) < 0.2 + 0.3 * a).astype(float),
            terminated=term,
            truncated=np.zeros(n, bool),
            episode_offsets=np.concatenate(([0], np.cumsum(lengths_a))),
            behaviour_probs=np.full(n, 1.0 / A),
            metadata=meta,
        ),
        path,
    )
    return path


@pytest.fixture(scope="module")
def bandit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return log(tmp_path_factory.mktemp("data") / "bandit.h5")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


def params(out: Path) -> dict[str, dict]:
    report = json.loads((out / "privacy.json").read_text())
    return {p["name"]: p for p in report["public_parameters"]}


LSW = ["ope", "dp-lsw", "--features", "onehot", "--epsilon", "1", "--reward-range", "1"]
LSL = ["ope", "dp-lsl", "--features", "onehot", "--epsilon", "1", "--reward-range", "1"]
GPOPE = ["ope", "gpope", "--features", "onehot", "--epsilon", "1", "--iterations", str(N)]
GPOPE += ["--clip", "1", "--step-size", "0.1"]
LSTD = ["ope", "lstd", "--features", "onehot"]


# ------------------------------------------------------------------------ declared horizon


@pytest.mark.parametrize("cmd", [LSW, LSL], ids=["dp-lsw", "dp-lsl"])
def test_gamma_one_without_a_horizon_is_one_error_line(cmd, bandit: Path, tmp_path, capsys):
    """γ = 1 leaves R/(1−γ) infinite: refused before the data, naming --max-horizon."""
    code, err = run([*cmd, "--data", str(bandit), "--gamma", "1", "--out", str(tmp_path)], capsys)
    assert code == 2
    assert "--max-horizon" in error_line(err)


@pytest.mark.parametrize("cmd", [LSW, LSL], ids=["dp-lsw", "dp-lsl"])
@pytest.mark.parametrize("gamma", ["1", "0.99"])
def test_a_one_step_log_pays_the_reward_range_only(cmd, gamma, bandit, tmp_path, capsys):
    """Sensitivity input: with --max-horizon 1 the return range is R = 1 (not R/(1−γ) = 100 at
    γ = 0.99, not ∞ at γ = 1), and privacy.json lists H with its source."""
    out = tmp_path / "run"
    argv = [*cmd, "--data", str(bandit), "--gamma", gamma, "--max-horizon", "1", "--out", str(out)]
    code, err = run(argv, capsys)
    assert code == 0, err
    p = params(out)
    assert p["horizon H"]["value"] == 1 and p["horizon H"]["source"] == "flag"
    assert p["return range"]["value"] == 1.0
    release = json.loads((out / "privacy.json").read_text())["releases"][0]
    assert release["extra"]["return_range"] == 1.0
    assert json.loads((out / "config.json").read_text())["max_horizon"] == 1


def test_the_metadata_horizon_is_used_and_an_inferred_one_is_not(tmp_path, capsys):
    declared = log(tmp_path / "declared.h5", lengths=[3] * M, horizon=2)
    out = tmp_path / "a"
    code, err = run([*LSW, "--data", str(declared), "--gamma", "1", "--out", str(out)], capsys)
    assert code == 0, err
    p = params(out)
    assert p["horizon H"]["source"] == "public metadata" and p["return range"]["value"] == 2.0
    inferred = log(
        tmp_path / "inferred.h5", lengths=[3] * M, horizon=3, inferred_from_data=["horizon"]
    )
    argv = [*LSW, "--data", str(inferred), "--gamma", "1", "--out", str(tmp_path / "b")]
    code, err = run(argv, capsys)
    assert code == 2 and "--max-horizon" in error_line(err)


def test_gpope_sensitivity_is_2h_whatever_the_horizon(bandit: Path, tmp_path, capsys) -> None:
    """GPOPE clips each per-trajectory gradient to h: the release's replace-one sensitivity is
    2h at γ = 1 with a horizon, as at any γ (the horizon bounds no GPOPE sensitivity)."""
    out = tmp_path / "gp"
    argv = [*GPOPE, "--data", str(bandit), "--gamma", "1", "--max-horizon", "1"]
    code, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    release = json.loads((out / "privacy.json").read_text())["releases"][0]
    assert release["sensitivity"] == pytest.approx(2.0)
    assert params(out)["horizon H"]["value"] == 1


def test_steps_past_the_horizon_do_not_count(tmp_path, capsys) -> None:
    """LSTD at γ = 1 on 3-step episodes cut to H = 1 equals LSTD on their first steps alone."""
    long = log(tmp_path / "long.h5", lengths=[3] * M)
    out = tmp_path / "l"
    argv = [*LSTD, "--data", str(long), "--gamma", "1", "--max-horizon", "1", "--out", str(out)]
    code, err = run(argv, capsys)
    assert code == 0, err
    theta = np.load(out / "theta.npy")
    from privrl.data.io import load_hdf5

    data = load_hdf5(long)
    first = data.episode_offsets[:-1]
    s0 = np.asarray(data.observations)[data.observation_offsets[:-1]]
    r0 = np.asarray(data.rewards)[first]
    np.testing.assert_allclose(theta, [r0[s0 == s].mean() for s in range(S)])


# ------------------------------------------------------------------------ target policies


def _table(tmp_path: Path, shape: tuple[int, ...], fill: float | None = None) -> str:
    rng = np.random.default_rng(1)
    table = rng.dirichlet(np.ones(shape[-1]), size=shape[:-1]) if fill is None else None
    path = tmp_path / f"pi{'x'.join(map(str, shape))}{'' if fill is None else fill}.npy"
    np.save(path, table if table is not None else np.full(shape, fill))
    return str(path)


def _apvi_policy(tmp_path: Path) -> str:
    actions = np.random.default_rng(2).integers(0, A, (1, S))
    return str(FiniteHorizonPolicy(actions, A).save(tmp_path / "policy.npz"))


GOOD = [
    ("[S, A]", lambda p: _table(p, (S, A)), []),
    ("[H, S, A]", lambda p: _table(p, (1, S, A)), ["--max-horizon", "1"]),
    ("[A]", lambda p: _table(p, (A,)), []),
    ("policy.npz", _apvi_policy, ["--max-horizon", "1"]),
    ("uniform", lambda p: "uniform", []),
]


@pytest.mark.parametrize("cmd", [GPOPE, LSTD], ids=["gpope", "lstd"])
@pytest.mark.parametrize("make, extra", [g[1:] for g in GOOD], ids=[g[0] for g in GOOD])
def test_user_target_policies_run(cmd, make, extra, bandit: Path, tmp_path: Path, capsys) -> None:
    spec = make(tmp_path)
    out = tmp_path / "run"
    argv = [*cmd, "--data", str(bandit), "--gamma", "0.5", "--target-policy", spec, *extra]
    code, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["target_policy"] == spec
    assert np.all(np.isfinite(np.load(out / "theta.npy")))


def test_lstd_off_policy_with_a_table_matches_the_reweighted_means(bandit, tmp_path, capsys):
    """On a one-step log, off-policy LSTD with π [S, A] gives θ_s = Σ_t ρ_t r_t / Σ_t ρ_t over
    the steps in s (pooled per-state weighted importance sampling)."""
    spec = _table(tmp_path, (S, A))
    out = tmp_path / "w"
    argv = [*LSTD, "--data", str(bandit), "--gamma", "0.5", "--target-policy", spec]
    assert run([*argv, "--out", str(out)], capsys)[0] == 0
    from privrl.data.io import load_hdf5

    data = load_hdf5(bandit)
    pi = np.load(spec)
    s = np.asarray(data.observations)[data.observation_offsets[:-1]]
    rho = pi[s, np.asarray(data.actions)] * A
    want = [np.sum((rho * data.rewards)[s == k]) / np.sum(rho[s == k]) for k in range(S)]
    np.testing.assert_allclose(np.load(out / "theta.npy"), want)


BAD = [
    ("wrong S", lambda p: _table(p, (S + 1, A)), [], "declared spaces"),
    ("wrong A", lambda p: _table(p, (S, A + 1)), [], "declared spaces"),
    ("rows not summing to 1", lambda p: _table(p, (S, A), 0.5), [], "distribution"),
    ("[H, S, A] without a horizon", lambda p: _table(p, (2, S, A)), [], "--max-horizon 2"),
    ("[H, S, A] other horizon", lambda p: _table(p, (2, S, A)), ["--max-horizon", "1"], "H = 2"),
    ("npz without a horizon", _apvi_policy, [], "--max-horizon 1"),
    ("missing file", lambda p: str(p / "none.npy"), [], "no such file"),
    ("unknown module", lambda p: "no_such_mod_q:f", [], "cannot import"),
]


@pytest.mark.parametrize("cmd", [GPOPE, LSTD], ids=["gpope", "lstd"])
@pytest.mark.parametrize("make, extra, needle", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_target_policies_are_one_error_line(cmd, make, extra, needle, bandit, tmp_path, capsys):
    argv = [*cmd, "--data", str(bandit), "--target-policy", make(tmp_path), *extra]
    code, err = run([*argv, "--gamma", "0.5", "--out", str(tmp_path / "bad")], capsys)
    assert code == 2
    assert needle in error_line(err)
    assert not (tmp_path / "bad" / "metrics.json").exists()


# ------------------------------------------------------------------------ the value


VALUE_KEYS = {"value", "value_unprojected", "value_ci_low", "value_ci_high"}


def test_dp_lsw_reports_the_value_over_public_start_states(bandit, tmp_path, capsys) -> None:
    out = tmp_path / "v"
    argv = [*LSW, "--data", str(bandit), "--gamma", "1", "--max-horizon", "1"]
    code, _ = run(
        [*argv, "--start-states", "uniform", "--confidence", "0.9", "--out", str(out)], capsys
    )
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    theta = np.load(out / "theta.npy")
    assert metrics["value_unprojected"] == pytest.approx(theta.mean())  # w = uniform d₀ᵀI
    assert metrics["value"] == min(max(theta.mean(), 0.0), 1.0)
    assert 0.0 <= metrics["value_ci_low"] <= metrics["value_ci_high"] <= 1.0
    assert metrics["confidence"] == 0.9
    assert metrics["value_ci_covers"].startswith("privacy noise only")
    assert "not sampling error" in metrics["value_ci_covers"]
    assert "uniform (flag)" == metrics["value_start_states"]


def test_lstd_and_gpope_report_the_value(bandit, tmp_path, capsys) -> None:
    start = tmp_path / "d0.npy"
    np.save(start, np.array([1.0, 0.0, 0.0, 0.0]))
    out = tmp_path / "l"
    argv = [*LSTD, "--data", str(bandit), "--gamma", "0.5", "--start-states", str(start)]
    assert run([*argv, "--out", str(out)], capsys)[0] == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["value"] == pytest.approx(np.load(out / "theta.npy")[0])
    assert metrics["value_ci_low"] is None and "non-private" in metrics["value_ci_covers"]
    # GPOPE with --data and no public data: a value, no interval, and how to get one
    out = tmp_path / "g"
    argv = [*GPOPE, "--data", str(bandit), "--gamma", "0.5", "--start-states", str(start)]
    assert run([*argv, "--out", str(out)], capsys)[0] == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["value"] == pytest.approx(np.load(out / "theta.npy")[0])
    assert metrics["value_ci_low"] is None and "--public-data" in metrics["value_ci_covers"]


def test_gpope_interval_comes_from_public_replicas(tmp_path, capsys) -> None:
    out = tmp_path / "g"
    argv = ["ope", "gpope", "--env", "chain", "--trajectories", str(M), "--iterations", str(N)]
    argv += ["--clip", "1", "--step-size", "0.5", "--epsilon", "1", "--out", str(out)]
    code, _ = run(argv, capsys)
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["value_ci_low"] < metrics["value"] < metrics["value_ci_high"]
    assert metrics["value_replicas"] == 32 and "public data" in metrics["value_ci_covers"]
    assert metrics["value_start_states"] == "chain (default)"


def test_without_public_start_states_there_is_no_value(bandit, tmp_path, capsys) -> None:
    out = tmp_path / "n"
    assert run([*LSTD, "--data", str(bandit), "--gamma", "0.5", "--out", str(out)], capsys)[0] == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["value"] is None and "--start-states" in metrics["value_note"]


@pytest.mark.parametrize("cmd", [LSW, GPOPE, LSTD], ids=["dp-lsw", "gpope", "lstd"])
def test_bad_start_states_are_one_error_line(cmd, bandit, tmp_path, capsys) -> None:
    bad = tmp_path / "bad.npy"
    np.save(bad, np.full(S, 0.5))
    argv = [*cmd, "--data", str(bandit), "--gamma", "0.5", "--start-states", str(bad)]
    code, err = run([*argv, "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "sum to 1" in error_line(err)
    argv = [*cmd, "--data", str(bandit), "--gamma", "0.5", "--start-states", str(bandit)]
    code, err = run([*argv, "--out", str(tmp_path / "o2")], capsys)
    assert code == 2 and "private dataset itself" in error_line(err)


def neighbour(path: Path, out: Path) -> Path:
    """`path` with its last trajectory replaced by another of the same length (other states,
    actions and rewards): a replace-one neighbour."""
    from privrl.data.io import load_hdf5

    a = load_hdf5(path)
    t0, o0 = int(a.episode_offsets[-2]), int(a.observation_offsets[-2])
    obs, act, rew = (np.array(x) for x in (a.observations, a.actions, a.rewards))
    obs[o0:] = (obs[o0:] + 1) % S
    act[t0:] = (act[t0:] + 1) % A
    rew[t0:] = 1.0 - rew[t0:]
    save_hdf5(
        TrajectoryDataset(
            observations=obs,
            actions=act,
            rewards=rew,
            terminated=a.terminated,
            truncated=a.truncated,
            episode_offsets=a.episode_offsets,
            behaviour_probs=a.behaviour_probs,
            metadata=a.metadata,
        ),
        out,
    )
    return out


def published(out: Path, data: Path) -> tuple[dict, dict, dict]:
    """metrics.json, config.json and privacy.json with the data path and the time removed."""
    metrics = json.loads((out / "metrics.json").read_text())
    config = json.loads((out / "config.json").read_text().replace(str(data), "DATA"))
    privacy = json.loads((out / "privacy.json").read_text().replace(str(data), "DATA"))
    privacy.pop("created", None)
    return metrics, config, privacy


def test_neighbours_publish_the_same_except_the_released_value(tmp_path, capsys) -> None:
    """Property (DESIGN.md, "Public parameters"): on D and a replace-one neighbour D′,
    everything published besides θ and its post-processing (the value and its interval) is
    identical: the interval's noise bound, the start states, GPOPE's spread measured on
    public data, config.json and privacy.json."""
    d = log(tmp_path / "d.h5", lengths=[2] * M, horizon=2)
    d2 = neighbour(d, tmp_path / "d2.h5")
    # public data of the same shape, other episodes than either neighbour (a copy of the
    # private episodes would be refused as public data)
    public = neighbour(d2, tmp_path / "public.h5")
    common = ["--gamma", "1", "--start-states", "uniform", "--seed", "3"]
    for cmd in (LSW, [*GPOPE, "--public-data", str(public)]):
        results = []
        for data in (d, d2):
            out = tmp_path / f"{cmd[1]}-{data.stem}"
            code, err = run([*cmd, "--data", str(data), *common, "--out", str(out)], capsys)
            assert code == 0, err
            results.append(published(out, data))
        (m1, c1, p1), (m2, c2, p2) = results
        same = set(m1) - VALUE_KEYS
        assert {k: m1[k] for k in same} == {k: m2[k] for k in same}
        key = "value_unprojected" if "value_unprojected" in m1 else "value"
        assert m1[key] != m2[key]  # the released value did change
        assert c1 == c2 and p1 == p2


IPS = ["--reward-range", "0,1", "--weight-clip", "5", "--epsilon", "1", "--gamma", "1"]


@pytest.mark.parametrize("estimator", ["ips", "snips", "dr"])
@pytest.mark.parametrize("make, extra", [g[1:] for g in GOOD[1:4]], ids=[g[0] for g in GOOD[1:4]])
def test_the_importance_estimators_share_the_resolver(
    estimator, make, extra, bandit, tmp_path, capsys
) -> None:
    """ips, snips and dr take the same target policies as the θ-estimators (time-indexed
    tables and saved policies included), checked against the same declared horizon."""
    spec = make(tmp_path)
    out = tmp_path / estimator
    argv = ["ope", estimator, "--data", str(bandit), "--target-policy", spec, *IPS]
    argv += extra or ["--max-horizon", "1"]
    code, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["value_ci_low"] <= metrics["value_ci_high"]
    bad = ["ope", estimator, "--data", str(bandit), "--target-policy", _table(tmp_path, (2, S, A))]
    code, err = run([*bad, *IPS, "--max-horizon", "1", "--out", str(tmp_path / "x")], capsys)
    assert code == 2 and "H = 2" in error_line(err)


def test_max_horizon_is_for_data_only(tmp_path, capsys) -> None:
    argv = ["ope", "lstd", "--env", "chain", "--max-horizon", "5", "--out", str(tmp_path)]
    code, err = run(argv, capsys)
    assert code == 2 and "--data only" in error_line(err)


def test_the_replica_count_follows_public_sizes_only() -> None:
    """GPOPE's interval uses 32 public replicas, fewer when N·n² is large, none below 8."""
    from privrl.systems.ope import value_replicas

    assert value_replicas(2000, 16) == 32
    assert 8 <= value_replicas(10**6, 40) < 32
    assert value_replicas(10**8, 40) == 0
    assert value_replicas(100, 4096) == 0


@pytest.mark.parametrize("cmd", [GPOPE, ["ope", "ips", *IPS]], ids=["gpope", "ips"])
def test_a_target_policy_refusal_names_the_flag_and_the_spec(cmd, bandit, tmp_path, capsys):
    """The library names the field (`target_policy`); the command's error line gives the flag
    back, followed by what the user typed, and a field the fix names (`max_horizon=H`) as its
    flag too."""
    spec = _table(tmp_path, (2, S, A))
    argv = [*cmd, "--data", str(bandit), "--target-policy", spec, "--gamma", "0.5"]
    code, err = run([*argv, "--max-horizon", "1", "--out", str(tmp_path / "bad")], capsys)
    line = error_line(err)
    assert code == 2 and line.startswith(f"error: --target-policy {spec} has H = 2 steps")
    assert line.endswith("or --max-horizon 2") and "`" not in line
