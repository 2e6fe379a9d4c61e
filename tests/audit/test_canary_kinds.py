"""`--canary worst|random|FILE` for every audit: a FILE canary is used (the audit's statistic
moves with it), a file that does not fit the audited problem is refused with one `error:`
line before anything is written, `random` runs, and audits that cannot express a file canary
refuse one rather than ignoring it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from privrl.audit.canary import load_expert_canary, load_gradient_canary, load_lsw_canary
from privrl.audit.dpsgd import CANARY_NORM, DPSGDAuditSettings, audit_dp_sgd
from privrl.cli.main import main
from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.io import save_hdf5
from tests.noise import noise_rng


def _save(
    path: Path,
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    obs_space: spaces.Space,
    act_space: spaces.Space,
    offsets: list[int] | None = None,
) -> Path:
    """A dataset of episodes; `obs` has one more row per episode than `actions`."""
    n = int(actions.shape[0])
    offsets = offsets or [0, n]
    ends = np.zeros(n, bool)
    ends[np.asarray(offsets[1:]) - 1] = True
    ds = TrajectoryDataset(
        observations=obs,
        actions=actions,
        rewards=rewards.astype(np.float64),
        terminated=ends,
        truncated=np.zeros(n, bool),
        episode_offsets=np.asarray(offsets, np.int64),
        metadata=DatasetMetadata(observation_space=obs_space, action_space=act_space),
    )
    return save_hdf5(ds, path)


def _box_episode(path: Path, rows: list[list[float]], dim: int) -> Path:
    obs = np.asarray(rows, np.float32)
    box = spaces.Box(-np.inf, np.inf, shape=(dim,), dtype=np.float32)
    n = obs.shape[0] - 1
    return _save(path, obs, np.zeros(n, np.int64), np.ones(n), box, spaces.Discrete(2))


def _tabular(path: Path, states: list[int], actions: list[int], rewards: list[float], S: int,
             A: int = 2) -> Path:  # fmt: skip
    return _save(
        path,
        np.asarray(states, np.int64),
        np.asarray(actions, np.int64),
        np.asarray(rewards, np.float64),
        spaces.Discrete(S),
        spaces.Discrete(A),
    )


def _auc(argv: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> float:
    assert main([*argv, "--out", str(out)]) == 0, capsys.readouterr().err
    return float(json.loads((out / "metrics.json").read_text())["auc"])


def _err(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    return lines[0]


# --------------------------------------------------------------------------------------------
# FILE canaries that the audit uses
# --------------------------------------------------------------------------------------------

CASES = {
    # command, its flags, a fitting file, a mismatched file and the words of the refusal
    "dp-lsw": (
        ["--epsilon", "8", "--states", "2", "--trials", "4000"],
        lambda p: _tabular(p, [0, 1, 1], [0, 0], [0.2, 0.2], S=2),  # returns 0.4, 0.2
        lambda p: _tabular(p, [0, 0, 0], [0, 0], [1.0, 0.0], S=2),
        "never visits state(s) [1]",
    ),
    "dp-vapvi": (
        ["--epsilon", "4", "--features", "3", "--trials", "4000"],
        lambda p: _box_episode(p, [[0.0, 0.6, 0.0], [0.0, 0.0, 0.0]], 3),
        lambda p: _box_episode(p, [[1.0, 0.0], [0.0, 0.0]], 2),
        "the audit's feature map φ is Box(shape=(3,))",
    ),
    "dp-sgd": (
        ["--noise-multiplier", "1", "--trials", "2000"],
        lambda p: _box_episode(p, [[0.3, 0.0, 0.0], [0.0, 0.0, 0.0]], 3),
        lambda p: _box_episode(p, [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], 4),
        "the audit's model input is Box(shape=(3,))",
    ),
    "expert-dp": (
        ["--epsilon", "8", "--max-len", "5", "--trials", "4000"],
        lambda p: _tabular(p, [0, 1, 2, 3], [1, 1, 1], [0, 0, 0], S=5),
        lambda p: _tabular(p, [0, 1, 2, 3], [1, 1, 1], [0, 0, 0], S=5, A=3),
        "its action space is Discrete(3), the audit's is Discrete(2)",
    ),
}


@pytest.mark.parametrize("command", sorted(CASES))
def test_file_canary_is_used_and_checked(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fitting file runs the audit with that unit as the canary (the statistic moves: the
    AUC differs from worst's at the same seed, and stays below the claim); a mismatched file
    is refused with one `error:` line naming the mismatch, before any run directory exists;
    `random` runs."""
    flags, good, bad, words = CASES[command]
    base = ["audit", command, *flags, "--seed", "3"]
    worst = _auc(base, tmp_path / "worst", capsys)
    path = good(tmp_path / "good.h5")
    out = tmp_path / "file"
    used = _auc([*base, "--canary", str(path)], out, capsys)
    assert used != worst
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epsilon_lower_bound"] <= metrics["epsilon_claimed"]
    assert 0.0 <= _auc([*base, "--canary", "random"], tmp_path / "random", capsys) <= 1.0
    wrong = bad(tmp_path / "bad.h5")
    line = _err([*base, "--canary", str(wrong), "--out", str(tmp_path / "no")], capsys)
    assert words in line and str(wrong) in line
    assert not (tmp_path / "no").exists()


def test_dp_sgd_file_canary_holding_worst_unit_reproduces_worst(tmp_path: Path) -> None:
    """The file is mapped to the model's input exactly: a file whose unit is the worst-case
    canary's (`CANARY_NORM`·C·e₀) gives worst's scores draw for draw; another unit gives
    others."""
    path = _box_episode(tmp_path / "w.h5", [[CANARY_NORM, 0.0, 0.0], [0.0, 0.0, 0.0]], 3)
    unit = load_gradient_canary(path, p=3)
    np.testing.assert_array_equal(unit, [CANARY_NORM, 0.0, 0.0])
    settings = DPSGDAuditSettings(noise_multiplier=1.0)
    kw = {"trials": 500}
    worst = audit_dp_sgd(settings, **kw, rng=noise_rng(0))
    same = audit_dp_sgd(settings, **kw, canary="file", unit=unit, rng=noise_rng(0))
    np.testing.assert_array_equal(worst.scores, same.scores)
    other = audit_dp_sgd(settings, **kw, canary="file", unit=np.r_[0.0, 0.5, 0.0], rng=noise_rng(0))
    assert not np.array_equal(other.scores, worst.scores)


def test_file_canaries_map_to_the_units_statistics(tmp_path: Path) -> None:
    """DP-LSW: first-visit returns-to-go, clipped to the declared range; expert-dp: the most
    frequent action per state, −1 (random) where the expert never goes."""
    lsw = _tabular(tmp_path / "l.h5", [1, 0, 1, 0], [0, 0, 0], [3.0, 0.5, 0.25], S=2)
    np.testing.assert_allclose(load_lsw_canary(lsw, S=2, return_range=1.0), [0.75, 1.0])
    ex = _save(
        tmp_path / "e.h5",
        np.array([0, 1, 1, 0, 1, 2], np.int64),
        np.array([1, 0, 1, 1], np.int64),
        np.zeros(4),
        spaces.Discrete(4),
        spaces.Discrete(2),
        offsets=[0, 2, 4],
    )
    np.testing.assert_array_equal(load_expert_canary(ex, L=4, A=2), [1, 0, -1, -1])


# --------------------------------------------------------------------------------------------
# audits that cannot express a FILE canary refuse one
# --------------------------------------------------------------------------------------------


def _units_file(path: Path, units: list[list[float]]) -> Path:
    """One one-step episode per unit, its observation the unit (the mean of its first one)."""
    rows = np.repeat(np.asarray(units, np.float32), 2, axis=0)
    box = spaces.Box(-np.inf, np.inf, shape=(rows.shape[1],), dtype=np.float32)
    m = len(units)
    return _save(
        path,
        rows,
        np.zeros(m, np.int64),
        np.ones(m),
        box,
        spaces.Discrete(2),
        offsets=list(range(m + 1)),
    )


def test_dp_sgd_one_run_file_canaries_own_their_coordinates(tmp_path: Path) -> None:
    """`--mode one-run --canary FILE`: m units of 1 + 2 inputs, unit j's first input placed on
    its own coordinate j. A file of m units `CANARY_NORM`·C·e₀ reproduces worst's canaries
    exactly (same scores under the same seed); a file of other units gives other scores."""
    from privrl.audit.canary import load_gradient_canaries
    from privrl.audit.dpsgd import DPSGDAuditSettings, audit_dp_sgd_one_run

    m = 40
    worst_units = [[CANARY_NORM, 0, 0]] * m
    same = load_gradient_canaries(_units_file(tmp_path / "w.h5", worst_units), p=3, m=m)
    other = load_gradient_canaries(_units_file(tmp_path / "o.h5", [[0.3, 0.4, 0]] * m), p=3, m=m)
    settings = DPSGDAuditSettings(noise_multiplier=1.0, background=10)
    kw = {"canaries": m, "guesses": 20}
    worst = audit_dp_sgd_one_run(settings, **kw, rng=noise_rng(3))
    as_worst = audit_dp_sgd_one_run(settings, **kw, units=same, rng=noise_rng(3))
    mine = audit_dp_sgd_one_run(settings, **kw, units=other, rng=noise_rng(3))
    assert np.allclose(as_worst.scores, worst.scores) and as_worst.params["canary"] == "file"
    assert not np.allclose(mine.scores, worst.scores)
    assert mine.epsilon_lower_bound <= mine.epsilon_claimed


def test_dp_sgd_one_run_file_canary_cli_and_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["audit", "dp-sgd", "--epsilon", "1", "--mode", "one-run", "--canaries", "4"]
    base += ["--guesses", "2"]
    good = _units_file(tmp_path / "g.h5", [[2.0, 0, 0], [1.0, 0, 0], [2.0, 1, 0], [0.5, 0, 0]])
    assert main([*base, "--canary", str(good), "--out", str(tmp_path / "run")]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["canaries"] == 4 and metrics["mode"] == "one-run"
    capsys.readouterr()
    bad = tmp_path / "bad"
    three = _units_file(tmp_path / "3.h5", [[2.0, 0, 0]] * 3)
    assert "holds 3 episodes, the audit inserts --canaries 4" in _err(
        [*base, "--canary", str(three), "--out", str(bad)], capsys
    )
    wide = _units_file(tmp_path / "wide.h5", [[2.0, 0, 0, 0]] * 4)
    assert "Box(shape=(3,))" in _err([*base, "--canary", str(wide), "--out", str(bad)], capsys)
    zero = _units_file(tmp_path / "z.h5", [[2.0, 0, 0]] * 3 + [[0.0, 0, 0]])
    assert "canary unit(s) [3] are 0" in _err(
        [*base, "--canary", str(zero), "--out", str(bad)], capsys
    )
    assert not bad.exists()


# --------------------------------------------------------------------------------------------
# one-run audits of experts and trajectories: worst | random | FILE
# --------------------------------------------------------------------------------------------

ONE_RUN = {
    "expert-dp-sgd": ["--non-private", "--canaries", "40", "--background", "10", "--guesses",
                      "20", "--steps", "2"],
    "primorl": ["--non-private", "--canaries", "40", "--background", "10", "--guesses", "20"],
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(ONE_RUN))
def test_one_run_random_canary_runs_and_differs_from_worst(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--canary random` draws the canaries like the background: the audit runs, and on the
    non-private twin its typical canaries are told apart less often (lower AUC of the scores
    against the inclusion bits) than worst's, which each own an input coordinate."""
    base = ["audit", command, *ONE_RUN[command], "--seed", "1"]
    worst = _auc(base, tmp_path / "worst", capsys)
    out = tmp_path / "random"
    random = _auc([*base, "--canary", "random"], out, capsys)
    assert random < worst
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epsilon_lower_bound"] >= 0.0 and metrics["guesses"] == 20


def _one_run_file(path: Path, m: int, first: float, reward: float, *, box_action: bool) -> Path:
    """m one-step canary episodes with observation [first, 0, 0] (1 + 2 inputs), action 0."""
    obs = np.tile(np.asarray([[first, 0.0, 0.0]], np.float32), (2 * m, 1))
    if box_action:
        act, act_space = np.zeros((m, 1), np.float32), spaces.Box(-1.0, 1.0, shape=(1,))
    else:
        act, act_space = np.zeros(m, np.int64), spaces.Discrete(2)
    box = spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
    return _save(path, obs, act, np.full(m, reward), box, act_space, offsets=list(range(m + 1)))


def _one_run_audit(command: str, units: Any, seed: int) -> Any:
    from privrl.audit.expert import ExpertDPSGDAuditSettings, audit_expert_dp_sgd_one_run
    from privrl.audit.primorl import PrimorlAuditSetup, audit_primorl_one_run, primorl_plan

    rng = noise_rng(seed)
    if command == "expert-dp-sgd":
        settings = ExpertDPSGDAuditSettings(noise_multiplier=None, background=10, steps=2)
        return audit_expert_dp_sgd_one_run(
            settings, canaries=40, guesses=20, rng=rng, units=units
        )  # fmt: skip
    setup = PrimorlAuditSetup(
        canaries=40, background=10, canary="worst" if units is None else "file", file=units
    )
    plan = primorl_plan(
        noise_multiplier=0.0, target_epsilon=None, delta=1e-5, rate=1.0, clip=1.0, rounds=1,
        units=setup.units, local_lr=1.0,
    )  # fmt: skip
    return audit_primorl_one_run(plan=plan, setup=setup, guesses=20, rng=rng)


# what worst's canary j is, written as a file unit: (first input, reward)
WORST_UNIT = {"expert-dp-sgd": (10.0, 1.0), "primorl": (100.0, 5.0)}


@pytest.mark.parametrize("command", sorted(ONE_RUN))
def test_one_run_file_canaries_own_their_coordinates(command: str, tmp_path: Path) -> None:
    """A one-run FILE of m canary units, each placed on its own input coordinate j: m copies
    of worst's unit reproduce worst's scores exactly (same seed), other units give other
    scores (the statistic is computed on the file's canaries, not worst's)."""
    from privrl.audit.canary import load_one_run_canaries

    box = command == "primorl"
    kw = {"m": 40, "inputs": 3, "actions": 1 if box else 2, "continuous": box}
    unit = "trajectory" if box else "expert"
    first, reward = WORST_UNIT[command]
    same = _one_run_file(tmp_path / "w.h5", 40, first, reward, box_action=box)
    other = _one_run_file(tmp_path / "o.h5", 40, 0.5 * first, -reward, box_action=box)
    worst = _one_run_audit(command, None, 5)
    as_worst = _one_run_audit(command, load_one_run_canaries(same, unit=unit, **kw), 5)
    mine = _one_run_audit(command, load_one_run_canaries(other, unit=unit, **kw), 5)
    assert as_worst.params["canary"] == "file"
    assert np.allclose(as_worst.scores, worst.scores)
    assert not np.allclose(mine.scores, worst.scores)


def test_expert_file_canaries_group_episodes_by_unit_id(tmp_path: Path) -> None:
    """With unit ids, a canary expert is all the episodes of one id (2 ids → 2 experts)."""
    from privrl.audit.canary import load_one_run_canaries
    from privrl.data.io import load_hdf5

    path = _one_run_file(tmp_path / "c.h5", 4, 1.0, 0.0, box_action=False)
    ds = load_hdf5(path)
    with_ids = TrajectoryDataset(
        observations=ds.observations, actions=ds.actions, rewards=ds.rewards,
        terminated=ds.terminated, truncated=ds.truncated, episode_offsets=ds.episode_offsets,
        metadata=ds.metadata, unit_ids=np.asarray([7, 3, 7, 3]),
    )  # fmt: skip
    save_hdf5(with_ids, tmp_path / "ids.h5")
    units = load_one_run_canaries(tmp_path / "ids.h5", m=2, inputs=3, actions=2, unit="expert")
    assert [len(u) for u in units] == [2, 2]
    with pytest.raises(ValueError, match="holds 2 experts"):
        load_one_run_canaries(tmp_path / "ids.h5", m=4, inputs=3, actions=2, unit="expert")


@pytest.mark.parametrize("command", sorted(ONE_RUN))
def test_one_run_file_canary_cli_and_mismatch(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    box = command == "primorl"
    base = ["audit", command, *ONE_RUN[command]]
    good = _one_run_file(tmp_path / "g.h5", 40, 10.0, 1.0, box_action=box)
    out = tmp_path / "run"
    assert main([*base, "--canary", str(good), "--out", str(out)]) == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["canaries"] == 40 and metrics["guesses"] == 20
    capsys.readouterr()
    bad = tmp_path / "bad"
    few = _one_run_file(tmp_path / "few.h5", 39, 10.0, 1.0, box_action=box)
    line = _err([*base, "--canary", str(few), "--out", str(bad)], capsys)
    assert "the audit inserts --canaries 40" in line
    wrong_action = _one_run_file(tmp_path / "a.h5", 40, 10.0, 1.0, box_action=not box)
    line = _err([*base, "--canary", str(wrong_action), "--out", str(bad)], capsys)
    assert "action space" in line
    wide = _box_episode(tmp_path / "wide.h5", [[1.0, 0.0], [0.0, 0.0]], 2)
    assert "Box(shape=(3,))" in _err([*base, "--canary", str(wide), "--out", str(bad)], capsys)
    assert not bad.exists()


def test_primorl_gradient_statistic_refuses_file_canaries_without_their_own_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--statistic gradient reads canary j's own row of w0; a file canary whose own input is
    0 never moves it, so the audit refuses it with the reason (loss still runs)."""
    blind = _one_run_file(tmp_path / "b.h5", 40, 0.0, 1.0, box_action=True)
    argv = ["audit", "primorl", *ONE_RUN["primorl"], "--canary", str(blind)]
    line = _err([*argv, "--statistic", "gradient", "--out", str(tmp_path / "o")], capsys)
    assert "never move their own row" in line and "--statistic loss" in line
    assert not (tmp_path / "o").exists()


def test_primorl_gradient_statistic_needs_worst_canaries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["audit", "primorl", *ONE_RUN["primorl"], "--canary", "random", "--statistic"]
    line = _err([*argv, "gradient", "--out", str(tmp_path / "o")], capsys)
    assert "--statistic loss with --canary random" in line


def test_synthetic_episodes_end_as_declared_and_background_walks_leave_canaries_alone() -> None:
    """Structural rule of the one-run audits' synthetic data: an episode's last step is
    terminated or truncated (never both), its unit id is kept, and a background unit's
    observations are 0 on the m canaries' own coordinates (no canary's data is touched)."""
    from privrl.audit.canary import background_walk, synthetic_episode

    rng = noise_rng(0)
    obs = background_walk(8, 5, 2, rng)
    assert obs.shape == (9, 7) and obs.dtype == np.float32
    assert not obs[:, :5].any() and obs[:, 5:].any()
    ep = synthetic_episode(obs, np.zeros(8, np.int64), 0.5, unit=3)
    assert ep["unit_id"] == 3 and ep["rewards"].tolist() == [0.5] * 8
    assert ep["truncated"].tolist() == [False] * 7 + [True] and not ep["terminated"].any()
    end = synthetic_episode(obs[:2], np.zeros(1, np.int64), np.array([1.0]), terminal=True)
    assert end["terminated"].tolist() == [True] and not end["truncated"].any()
    assert "unit_id" not in end
