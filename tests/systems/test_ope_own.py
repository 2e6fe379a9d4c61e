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
