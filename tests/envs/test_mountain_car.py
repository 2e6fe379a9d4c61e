"""Mountain Car: the step is the spec's formula; the batch simulator and the Gymnasium env agree."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from privrl.envs.mountain_car import (
    ENV_ID,
    MountainCarBatch,
    MountainCarEnv,
    mountain_car_step,
    register_envs,
)


def step1(x: float, v: float, a: int) -> tuple[float, float, float, bool]:
    obs, r, done = mountain_car_step(np.array([[x, v]]), np.array([a]))
    return float(obs[0, 0]), float(obs[0, 1]), float(r[0]), bool(done[0])


def test_step_matches_hand_computed_values() -> None:
    # v' = v + 0.001 a − 0.0025 cos(3x); at x = −0.5: cos(−1.5) = 0.0707372016677029
    x, v, r, done = step1(-0.5, 0.0, 2)  # push right, a = +1
    assert v == pytest.approx(0.001 - 0.0025 * 0.0707372016677029, abs=1e-15)
    assert x == pytest.approx(-0.5 + v, abs=1e-15)
    assert r == -1.0 and not done
    x, v, _, _ = step1(-0.5, 0.0, 0)  # push left, a = −1
    assert v == pytest.approx(-0.0011768430041692573, abs=1e-15)
    x, v, _, _ = step1(-0.5, 0.0, 1)  # no push: gravity only
    assert v == pytest.approx(-0.0025 * 0.0707372016677029, abs=1e-15)


def test_velocity_is_clipped() -> None:
    _, v, _, _ = step1(-0.5236, 0.0695, 2)  # unclipped v' = 0.07050...
    assert v == 0.07
    _, v, _, _ = step1(-0.5236, -0.0695, 0)
    assert v == -0.07


def test_left_wall_stops_the_car() -> None:
    x, v, _, done = step1(-1.19, -0.05, 0)
    assert x == -1.2 and v == 0.0 and not done


def test_goal_terminates_and_position_is_clipped() -> None:
    x, _, r, done = step1(0.49, 0.05, 2)
    assert done and x == 0.5 and r == -1.0
    _, _, _, done = step1(0.3, 0.01, 2)
    assert not done


def test_batch_equals_gymnasium_env_step_by_step() -> None:
    rng = np.random.default_rng(0)
    sim = MountainCarBatch(horizon=300)
    for seed in range(3):
        env = MountainCarEnv(horizon=300)
        obs, _ = env.reset(seed=seed)
        state = obs[None].copy()
        for _ in range(300):
            a = int(rng.integers(3))
            obs, r, term, trunc, _ = env.step(a)
            state, rb, tb = sim.step(state, np.array([a]))
            np.testing.assert_array_equal(obs, state[0])
            assert r == rb[0] and term == tb[0]
            if term or trunc:
                break


def test_start_distribution() -> None:
    s = MountainCarBatch().reset(1000, np.random.default_rng(0))
    assert np.all((s[:, 0] >= -0.6) & (s[:, 0] <= -0.4)) and np.all(s[:, 1] == 0)
    assert s[:, 0].std() > 0.05  # actually spread over the interval


def test_env_passes_gymnasium_checker() -> None:
    check_env(MountainCarEnv(), skip_render_check=True)


def test_truncated_at_horizon_and_registered_idempotently() -> None:
    register_envs()
    register_envs()
    env = gym.make(ENV_ID, horizon=5)
    env.reset(seed=0)
    flags = [env.step(1)[2:4] for _ in range(5)]
    assert flags[-1] == (False, True) and all(f == (False, False) for f in flags[:-1])


def test_bad_actions_rejected() -> None:
    with pytest.raises(ValueError):
        mountain_car_step(np.zeros((1, 2)), np.array([3]))
    with pytest.raises(ValueError):
        MountainCarEnv().step(5)
