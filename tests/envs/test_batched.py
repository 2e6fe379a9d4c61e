"""Batched control simulators: step-by-step equivalence with the Gymnasium envs, initial-state
distributions, determinism, shapes and input errors.

Equivalence tolerance: the physical state (Pendulum θ, θ̇; MuJoCo qpos, qvel) and the reward
must agree to 1e-9 absolute (we observe exact equality: same float64 formulas, and MuJoCo is
deterministic given qpos, qvel, warm start and ctrl). Observations are compared to 1e-6
(absolute + relative) because Pendulum and the cartpole wrapper return float32 observations.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from privrl.envs.batched import (
    BatchedCartpole,
    BatchedHalfCheetah,
    BatchedPendulum,
    make_batched,
)
from privrl.envs.control import CONTROL_TASKS, make_env

STATE_TOL = 1e-9
OBS_TOL = 1e-6
TASKS = ["pendulum", "balance", "swingup", "halfcheetah"]


def _actions(name: str, t: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Random actions, partly out of the box (Pendulum/cartpole: both faces clip), and for the
    cartpole a first phase of hard pushes so the cart hits the rail (joint-limit constraint
    active: exercises the solver warm start)."""
    task = CONTROL_TASKS[name]
    if name == "halfcheetah":  # Gymnasium's HalfCheetah charges ctrl cost on unclipped actions
        return rng.uniform(-1.0, 1.0, (n, 6))
    a = rng.uniform(1.25 * task.action_low, 1.25 * task.action_high, (n, 1))
    if name in ("balance", "swingup") and t < 90:
        a = np.abs(a)
    return a


@pytest.mark.parametrize("name", TASKS)
def test_batched_equals_gymnasium_step_by_step(name: str) -> None:
    n, steps = 3, 120 if name != "halfcheetah" else 60
    envs = [make_env(name) for _ in range(n)]
    first = np.stack([env.reset(seed=10 + i)[0] for i, env in enumerate(envs)])
    sim = make_batched(name, n)
    obs = sim.set_state_from_gym(envs)
    np.testing.assert_allclose(obs, first, rtol=OBS_TOL, atol=OBS_TOL)
    rng = np.random.default_rng(0)
    max_x = 0.0
    for t in range(steps):
        a = _actions(name, t, n, rng)
        results = [env.step(a[i]) for i, env in enumerate(envs)]
        obs, reward, terminated = sim.step(a)
        gym_state = np.stack([sim.gym_state(env)[0] for env in envs])
        np.testing.assert_allclose(sim.get_state(), gym_state, rtol=0, atol=STATE_TOL)
        np.testing.assert_allclose(
            obs, np.stack([r[0] for r in results]), rtol=OBS_TOL, atol=OBS_TOL
        )
        np.testing.assert_allclose(reward, [r[1] for r in results], rtol=0, atol=STATE_TOL)
        assert not terminated.any() and not any(r[2] for r in results)
        if name in ("balance", "swingup"):
            max_x = max(max_x, float(np.abs(gym_state[:, 0]).max()))
    if name in ("balance", "swingup"):
        assert max_x > 1.75  # the cart reached the rail limit (±1.8) during the check


def test_warm_start_is_carried_between_steps() -> None:
    """Without the solver warm start the trajectories drift apart once constraints act."""
    name, n = "halfcheetah", 2
    envs = [make_env(name) for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    exact, cold = make_batched(name, n), make_batched(name, n)
    exact.set_state_from_gym(envs)
    cold.set_state_from_gym(envs)
    rng = np.random.default_rng(3)
    drift = 0.0
    for _ in range(40):
        a = rng.uniform(-1, 1, (n, 6))
        exact.step(a)
        cold.set_state(cold.get_state())  # drops the warm start every step
        cold.step(a)
        drift = max(drift, float(np.abs(exact.get_state() - cold.get_state()).max()))
    assert drift > 0.0
    # a freshly reset Gymnasium env has a zero warm start, which set_state assumes by default
    warm = np.stack([exact.gym_state(env)[1] for env in envs])
    assert np.abs(warm).max() == 0.0


@pytest.mark.parametrize("name", TASKS)
def test_initial_distribution_matches_gymnasium(name: str) -> None:
    task = CONTROL_TASKS[name]
    env = make_env(name)
    m = 300
    gym_obs = np.stack([env.reset(seed=s)[0] for s in range(m)]).astype(np.float64)
    sim = make_batched(name, 2)
    ours = sim.sample_initial_observations(20_000, np.random.default_rng(0))
    assert ours.shape == (20_000, task.obs_dim) and ours.dtype == np.float64
    sd_g, sd_o = gym_obs.std(axis=0), ours.std(axis=0)
    # means agree within 5 standard errors (+ a floor for degenerate coordinates)
    np.testing.assert_array_less(
        np.abs(gym_obs.mean(axis=0) - ours.mean(axis=0)), 5 * sd_g / np.sqrt(m) + 1e-4
    )
    # spreads agree within 25% (+ floor for near-constant coordinates such as cos θ ≈ ±1)
    np.testing.assert_array_less(np.abs(sd_g - sd_o), 0.25 * sd_g + 1e-4)
    # and the batched reset draws from the same distribution as sample_initial_observations
    big = make_batched(name, 5000, seed=1).reset()
    np.testing.assert_allclose(big.mean(axis=0), ours.mean(axis=0), atol=4 * sd_o.max() / 50)


def test_initial_distribution_exact_moments() -> None:
    rng = np.random.default_rng(0)
    pend = make_batched("pendulum", 1).sample_initial_observations(40_000, rng)
    assert np.std(pend[:, 2]) == pytest.approx(1 / np.sqrt(3), rel=0.02)  # θ̇ ~ U(−1, 1)
    bal = make_batched("balance", 1).sample_initial_observations(40_000, rng)
    assert np.abs(bal[:, 0]).max() <= 0.1 and np.std(bal[:, 0]) == pytest.approx(
        0.2 / np.sqrt(12), rel=0.02
    )
    swing = make_batched("swingup", 1).sample_initial_observations(40_000, rng)
    assert np.std(swing[:, 3]) == pytest.approx(0.01, rel=0.03)
    assert np.all(swing[:, 1] < -0.99)  # hanging down
    np.testing.assert_allclose(swing[:, 1] ** 2 + swing[:, 2] ** 2, 1.0, atol=1e-12)


@pytest.mark.parametrize("name", TASKS)
def test_seeded_runs_are_deterministic(name: str) -> None:
    task = CONTROL_TASKS[name]
    a = np.random.default_rng(0).uniform(task.action_low, task.action_high, (5, 4, task.act_dim))

    def run(seed: int) -> tuple[np.ndarray, np.ndarray]:
        sim = make_batched(name, 4, seed=seed)
        obs = [sim.reset()]
        rewards = []
        for at in a:
            o, r, _ = sim.step(at)
            obs.append(o)
            rewards.append(r)
        return np.stack(obs), np.stack(rewards)

    o1, r1 = run(5)
    o2, r2 = run(5)
    o3, _ = run(6)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(r1, r2)
    assert not np.array_equal(o1[0], o3[0])
    sim = make_batched(name, 4)
    first = sim.reset(seed=9)
    np.testing.assert_array_equal(sim.reset(seed=9), first)
    assert not np.array_equal(sim.reset(), first)  # unseeded reset continues the stream
    # the episodes of one batch start from different states
    assert len({tuple(row) for row in first}) == 4


@pytest.mark.parametrize("name", TASKS)
def test_shapes_dtypes_and_flags(name: str) -> None:
    task = CONTROL_TASKS[name]
    sim = make_batched(task, 7, seed=0)
    assert (sim.task, sim.num_envs, sim.horizon) == (task, 7, task.horizon)
    obs = sim.reset()
    assert obs.shape == (7, task.obs_dim) and obs.dtype == np.float64
    nxt, reward, terminated = sim.step(np.zeros((7, task.act_dim)))
    assert nxt.shape == (7, task.obs_dim) and nxt.dtype == np.float64
    assert reward.shape == (7,) and reward.dtype == np.float64
    assert terminated.shape == (7,) and terminated.dtype == np.bool_ and not terminated.any()
    assert sim.elapsed_steps == 1
    assert sim.get_state().shape == (7, sim.state_dim)
    empty = sim.sample_initial_observations(0, np.random.default_rng(0))
    assert empty.shape == (0, task.obs_dim)
    assert make_batched(task.env_id, 2).task is task


@pytest.mark.parametrize("name", ["pendulum", "balance", "swingup"])
def test_rewards_lie_in_unit_interval(name: str) -> None:
    sim = make_batched(name, 64, seed=0)
    sim.reset()
    rng = np.random.default_rng(0)
    task = CONTROL_TASKS[name]
    rs = np.stack(
        [sim.step(rng.uniform(task.action_low, task.action_high, (64, 1)))[1] for _ in range(50)]
    )
    assert rs.min() >= 0.0 and rs.max() <= 1.0 and rs.std() > 0


def test_actions_are_clipped_to_the_box() -> None:
    for name in TASKS:
        task = CONTROL_TASKS[name]
        s1, s2 = make_batched(name, 3, seed=0), make_batched(name, 3, seed=0)
        s1.reset()
        s2.reset()
        big = np.full((3, task.act_dim), 10.0)
        o1, r1, _ = s1.step(big)
        o2, r2, _ = s2.step(np.full((3, task.act_dim), task.action_high))
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(r1, r2)


def test_bad_inputs_raise_clear_errors() -> None:
    sim = make_batched("balance", 4, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        sim.step(np.zeros((4, 1)))
    sim.reset()
    with pytest.raises(ValueError, match=r"expected actions of shape \(4, 1\), got \(4,\)"):
        sim.step(np.zeros(4))
    with pytest.raises(ValueError, match=r"\(4, 1\)"):
        sim.step(np.zeros((3, 1)))
    with pytest.raises(ValueError, match="NaN"):
        sim.step(np.full((4, 1), np.nan))
    with pytest.raises(ValueError, match=r"expected state of shape \(4, 4\)"):
        sim.set_state(np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"warmstart of shape \(4, 2\)"):
        sim.set_state(np.zeros((4, 4)), warmstart=np.zeros((4, 3)))
    with pytest.raises(ValueError, match="expected 4 Gymnasium envs"):
        sim.set_state_from_gym([make_env("balance")])
    with pytest.raises(ValueError, match="num_envs"):
        make_batched("pendulum", 0)
    with pytest.raises(ValueError, match="known names"):
        make_batched("acrobot", 2)
    with pytest.raises(ValueError, match=r"\(2, 18\)"):
        make_batched("halfcheetah", 2, seed=0).set_state(np.zeros((2, 6)))


def test_unstable_physics_is_reported() -> None:
    sim = make_batched("halfcheetah", 2, seed=0)
    sim.reset()
    state = sim.get_state()
    state[0, 9:] = 1e12  # absurd velocities: MuJoCo flags the state as unstable
    sim.set_state(state)
    with pytest.raises(RuntimeError, match="invalid physics state"):
        sim.step(np.zeros((2, 6)))
    with pytest.raises(RuntimeError, match="reset"):
        sim.step(np.zeros((2, 6)))


def test_classes_and_physics_constants() -> None:
    assert isinstance(make_batched("pendulum", 1), BatchedPendulum)
    cart = make_batched("swingup", 1)
    assert isinstance(cart, BatchedCartpole) and cart.swing_up
    assert cart.model.opt.timestep == 0.01 and cart.n_sub_steps == 1  # dm_control: 1 substep
    cheetah = make_batched("halfcheetah", 1)
    assert isinstance(cheetah, BatchedHalfCheetah)
    assert cheetah.dt == pytest.approx(0.05) and cheetah.model.nq == 9
    # Gymnasium's env agrees on the control timestep
    env = gym.make("HalfCheetah-v5").unwrapped
    assert env.dt == cheetah.dt
