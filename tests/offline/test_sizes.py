"""The memory check of the tabular learners counts what a run allocates: T·S²·A transition
counts with T = H per step but T = 1 when they are pooled over h (`stationary`), H·S·A values,
n·(H+1) steps. Taxi-sized logs (S = 500, A = 6) at H = 50 with `--stationary` fit; the same
per step (H·S²·A = 7.5e7) and a genuinely too large pooled table are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.data import save_hdf5
from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.io import header_of
from privrl.offline import APVI, DPAPVI
from privrl.offline.tabular import MAX_ENTRIES, check_sizes

S_TAXI, A_TAXI, H = 500, 6, 50


def taxi_sized(n: int = 20, seed: int = 0) -> TrajectoryDataset:
    """`n` random episodes of H steps in Taxi's spaces (rewards in its range [-10, 20])."""
    rng = np.random.default_rng(seed)
    n_t = n * H
    truncated = np.zeros(n_t, bool)
    truncated[H - 1 :: H] = True
    return TrajectoryDataset(
        observations=rng.integers(0, S_TAXI, n_t + n),
        actions=rng.integers(0, A_TAXI, n_t),
        rewards=rng.choice([-1.0, -10.0, 20.0], n_t),
        terminated=np.zeros(n_t, bool),
        truncated=truncated,
        episode_offsets=np.arange(n + 1, dtype=np.int64) * H,
        metadata=DatasetMetadata(
            spaces.Discrete(S_TAXI),
            spaces.Discrete(A_TAXI),
            horizon=H,
            extra={"reward_range": [-10.0, 20.0]},
        ),
    )


def test_the_pooled_table_is_counted_once() -> None:
    S = S_TAXI + 1  # with the absorbing state
    assert S * S * A_TAXI <= MAX_ENTRIES < H * S * S * A_TAXI
    check_sizes(H, S, A_TAXI, 10_000, stationary=True)  # 1.5e6 pooled counts: fits
    with pytest.raises(ValueError, match=r"H·S²·A transition counts.*stationary"):
        check_sizes(H, S, A_TAXI, 10_000)  # 7.5e7 per-step counts
    with pytest.raises(ValueError, match=r"S²·A pooled transition counts"):
        check_sizes(H, 3_000, A_TAXI, 10, stationary=True)  # 5.4e7 pooled counts
    with pytest.raises(ValueError, match=r"n·\(H\+1\) steps"):
        check_sizes(H, 10, 2, MAX_ENTRIES // H, stationary=True)


def test_taxi_sized_stationary_horizon_50_plans_and_runs() -> None:
    data = taxi_sized()
    plan = DPAPVI(rho=1.0, privatize_rewards=True, stationary=True).plan(header_of(data))
    assert plan.facts["sizes"] == (H, S_TAXI, A_TAXI)
    with pytest.raises(ValueError, match="H·S²·A transition counts"):
        DPAPVI(rho=1.0, privatize_rewards=True).plan(header_of(data))
    fit = APVI(stationary=True).fit(data)
    assert fit.policy.actions.shape == (H, S_TAXI)
    assert fit.details.model.n_sa.shape == (1, S_TAXI + 1, A_TAXI)  # one pooled table


def test_the_command_line_takes_taxi_sized_stationary_h50(tmp_path: Path, capsys) -> None:
    from privrl.cli.main import main

    path = save_hdf5(taxi_sized(), tmp_path / "taxi.h5")
    argv = ["train", "apvi", "--data", str(path), "--horizon", str(H)]
    assert main([*argv, "--stationary", "--out", str(tmp_path / "pooled")]) == 0
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "per-step")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error:") and "stationary" in err[0], err
