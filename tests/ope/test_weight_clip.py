"""`privrl.ope.weight_clip`: the suggested W is Π_h max π_h / p_min^H from public inputs only
(the target, the declared spaces and horizon, the declared minimum propensity); no logged
weight exceeds it, so IPS at that W equals IPS unclipped; it never reads a dataset; the noise
std it reports is the one a run releases with."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.cli.main import main
from privrl.data import DatasetMetadata, TrajectoryDataset, save_hdf5
from privrl.data.io import header_of
from privrl.ope import bandit
from privrl.ope.weight_clip import (
    ips_noise_std,
    largest_weight,
    suggest_for_header,
    suggest_weight_clip,
)

A = 4
TABLE = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.25] * 4])


def suggest(policy, p_min: float, obs=spaces.Discrete(3), horizon: int = 1):
    return suggest_weight_clip(
        policy, p_min, action_space=spaces.Discrete(A), observation_space=obs, horizon=horizon
    )


def test_the_formula_for_tables_uniform_and_time_indexed_targets() -> None:
    s = suggest(TABLE, 0.125)
    assert s.weight_clip == pytest.approx(0.7 / 0.125) and s.exact
    assert s.max_probability == (0.7,)
    assert suggest("uniform", 0.2).weight_clip == pytest.approx(0.25 / 0.2)
    assert suggest(np.array([0.1, 0.6, 0.2, 0.1]), 0.1).weight_clip == pytest.approx(6.0)
    timed = np.stack([TABLE, np.full((3, A), 0.25)])  # [H=2, S, A]
    s = suggest(timed, 0.2, horizon=2)
    assert s.max_probability == (0.7, 0.25)
    assert s.weight_clip == pytest.approx((0.7 / 0.2) * (0.25 / 0.2))
    # a stationary target over H steps: the per-step ratio to the power H
    assert suggest(TABLE, 0.5, horizon=3).weight_clip == pytest.approx((0.7 / 0.5) ** 3)
    assert largest_weight([0.5, 1.0], 0.5, horizon=2) == pytest.approx(2.0)


def test_code_is_enumerated_on_a_discrete_space_and_bounded_by_one_on_a_box() -> None:
    def policy(obs: np.ndarray) -> np.ndarray:
        return TABLE[np.asarray(obs, dtype=np.int64) % 3]

    s = suggest(policy, 0.1)
    assert s.exact and s.weight_clip == pytest.approx(7.0)
    box = suggest(lambda o: np.full((len(o), A), 0.25), 0.1, obs=spaces.Box(-1.0, 1.0, (2,)))
    assert not box.exact and box.weight_clip == pytest.approx(10.0)  # π ≤ 1: 1 / 0.1
    assert "cannot be enumerated" in box.explain()


def test_a_column_target_is_bounded_by_one_not_read() -> None:
    """`column:NAME` holds private per-row probabilities: the suggestion uses π ≤ 1."""
    s = suggest_weight_clip(
        "column:pi", 0.2, action_space=spaces.Discrete(A), observation_space=spaces.Discrete(3),
        columns=["pi"],
    )  # fmt: skip
    assert not s.exact and s.weight_clip == pytest.approx(5.0)
    ds = _dataset(np.zeros(4))
    kept = ds.with_metadata(ds.metadata.with_extra(extra_columns=["pi"]), validate=False)
    assert suggest_for_header(header_of(kept), "column:pi", 0.2).weight_clip == pytest.approx(5.0)
    with pytest.raises(ValueError, match="keeps no column 'other'"):
        suggest_for_header(header_of(kept), "column:other", 0.2)


def test_bad_propensity_bounds_are_refused() -> None:
    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="minimum propensity"):
            suggest("uniform", bad)


def test_no_logged_weight_exceeds_the_suggestion() -> None:
    """On a log whose propensities are at least p_min, IPS clipped at the suggested W equals
    IPS clipped far above it, and a W below it changes the estimate (so W is the smallest
    clip-free value for this log's weights up to the design's floor)."""
    rng = np.random.default_rng(0)
    n, mu = 4000, np.array([0.4, 0.3, 0.2, 0.1])  # p_min = 0.1 by design
    action = rng.choice(A, size=n, p=mu)
    target = np.array([0.1, 0.1, 0.1, 0.7])  # context-free: 0.7 on the rarest action
    log = {
        "reward": (rng.random(n) < 0.3).astype(float),
        "action": action,
        "pscore": mu[action],
        "action_dist": np.broadcast_to(target[None, :, None], (n, A, 1)),
    }
    W = suggest(target, 0.1, obs=spaces.Discrete(1)).weight_clip
    assert W == pytest.approx(7.0)
    at = bandit.non_private("ips", **log, weight_clip=W, reward_range=(0, 1)).value
    far = bandit.non_private("ips", **log, weight_clip=100 * W, reward_range=(0, 1)).value
    below = bandit.non_private("ips", **log, weight_clip=W / 4, reward_range=(0, 1)).value
    assert at == pytest.approx(far) and below < at - 1e-3


def _dataset(rewards: np.ndarray) -> TrajectoryDataset:
    n = len(rewards)
    return TrajectoryDataset(
        observations=np.zeros(2 * n, np.int64),
        actions=np.arange(n) % A,
        rewards=rewards,
        terminated=np.ones(n, bool),
        truncated=np.zeros(n, bool),
        episode_offsets=np.arange(n + 1),
        behaviour_probs=np.full(n, 0.25),
        metadata=DatasetMetadata(
            observation_space=spaces.Discrete(1),
            action_space=spaces.Discrete(A),
            horizon=1,
            discount=1.0,
        ),
    )


def test_the_suggestion_never_reads_the_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two logs that differ in every reward give the same suggestion, and the command gives
    it with the episode loaders disabled (only the header is read)."""
    one, two = _dataset(np.zeros(50)), _dataset(np.ones(50))
    target = np.array([0.1, 0.2, 0.3, 0.4])
    assert suggest_for_header(header_of(one), target, 0.25) == suggest_for_header(
        header_of(two), target, 0.25
    )
    path = tmp_path / "log.h5"
    save_hdf5(one, path)
    np.save(tmp_path / "pi.npy", target)

    def no_episodes(*_: object, **__: object) -> None:
        raise AssertionError("the suggestion read the episodes")

    monkeypatch.setattr("privrl.data.io.load_hdf5", no_episodes)
    monkeypatch.setattr("privrl.data.tools.load_file", no_episodes)
    argv = ["ope", "suggest-clip", "--data", str(path), "--target-policy",
            str(tmp_path / "pi.npy"), "--min-propensity", "0.25", "-e", "1", "--json"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weight_clip"] == pytest.approx(1.6) and out["horizon"] == 1
    assert out["noise_std"] == pytest.approx(ips_noise_std(1.6, (0.0, 1.0), 50, 1.0, 1e-5))


def test_inferred_spaces_are_refused() -> None:
    ds = _dataset(np.zeros(5))
    meta = ds.metadata.with_extra(inferred_from_data=["observation_space"])
    ds = ds.with_metadata(meta, validate=False)
    with pytest.raises(ValueError, match="inferred from the data"):
        suggest_for_header(header_of(ds), "uniform", 0.25)


def test_the_noise_std_is_the_one_a_run_releases_with() -> None:
    rng = np.random.default_rng(1)
    n = 1000
    action = rng.integers(0, A, n)
    log = {
        "reward": rng.random(n),
        "action": action,
        "pscore": np.full(n, 0.25),
        "action_dist": np.full((n, A, 1), 0.25),
    }
    est = bandit.ips(**log, epsilon=1.0, weight_clip=2.5, reward_range=(0.0, 1.0))
    got = ips_noise_std(2.5, (0.0, 1.0), n, 1.0, 1e-5)
    assert got == pytest.approx(est.metrics["noise_std"][0] / n, rel=1e-9)
