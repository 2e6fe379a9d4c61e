"""Control tasks: registry, ids, Pendulum reward transform, dm_control cartpole wrapper."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from privrl.envs.control import (
    CONTROL_TASKS,
    PENDULUM_MAX_COST,
    RAW_TASKS,
    ControlTask,
    DMCartpoleEnv,
    control_task,
    import_dm_cartpole,
    make_env,
    register_envs,
    reward_map,
    task_for_env_id,
    with_reward_transform,
)

EXPECTED = {  # name: (env_id, obs_dim, act_dim, horizon, action_low, action_high)
    "pendulum": ("privrl/Pendulum-v0", 3, 1, 200, -2.0, 2.0),
    "balance": ("privrl/CartpoleBalance-v0", 5, 1, 1000, -1.0, 1.0),
    "swingup": ("privrl/CartpoleSwingup-v0", 5, 1, 1000, -1.0, 1.0),
    "halfcheetah": ("privrl/HalfCheetah-v0", 17, 6, 1000, -1.0, 1.0),
}


def test_registry_lists_the_four_tasks() -> None:
    assert set(CONTROL_TASKS) == set(EXPECTED)
    for name, task in CONTROL_TASKS.items():
        assert task.name == name
        assert (
            task.env_id,
            task.obs_dim,
            task.act_dim,
            task.horizon,
            task.action_low,
            task.action_high,
        ) == EXPECTED[name]
    with pytest.raises(dataclasses.FrozenInstanceError):
        CONTROL_TASKS["pendulum"].horizon = 5  # type: ignore[misc]


def test_task_lookup_by_id_and_name() -> None:
    for task in CONTROL_TASKS.values():
        assert task_for_env_id(task.env_id) is task
        assert control_task(task.name) is task
        assert control_task(task.env_id) is task
        assert control_task(task) is task
    with pytest.raises(ValueError, match=r"known id: privrl/Pendulum-v0, .*HalfCheetah-v0"):
        task_for_env_id("MountainCarContinuous-v0")
    with pytest.raises(ValueError, match="known names: pendulum, balance"):
        control_task("cheetah")


def test_ids_register_idempotently_with_their_time_limits() -> None:
    register_envs()
    register_envs()  # a second call must not raise
    for task in CONTROL_TASKS.values():
        spec = gym.spec(task.env_id)
        assert spec.max_episode_steps == task.horizon
    env = make_env("halfcheetah")
    assert env.observation_space.shape == (17,) and env.action_space.shape == (6,)
    env.close()


@pytest.mark.parametrize("name", ["pendulum", "balance", "swingup", "halfcheetah"])
def test_spaces_match_the_task(name: str) -> None:
    task: ControlTask = CONTROL_TASKS[name]
    env = make_env(name)
    assert env.observation_space.shape == (task.obs_dim,)
    assert env.action_space.shape == (task.act_dim,)
    np.testing.assert_array_equal(env.action_space.low, task.action_low)
    np.testing.assert_array_equal(env.action_space.high, task.action_high)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (task.obs_dim,)
    env.close()


# -- Pendulum -----------------------------------------------------------------------------------


def test_pendulum_max_cost_is_the_documented_constant() -> None:
    assert PENDULUM_MAX_COST == pytest.approx(16.2736044, abs=1e-7)


def test_pendulum_reward_is_gymnasium_reward_rescaled() -> None:
    ours, theirs = make_env("pendulum"), gym.make("Pendulum-v1")
    rng = np.random.default_rng(0)
    o1, _ = ours.reset(seed=7)
    o2, _ = theirs.reset(seed=7)
    np.testing.assert_array_equal(o1, o2)
    rewards = []
    for _ in range(200):
        a = rng.uniform(-2.5, 2.5, size=1)  # includes out-of-box actions (clipped by both)
        o1, r1, term1, trunc1, _ = ours.step(a)
        o2, r2, term2, trunc2, _ = theirs.step(a)
        np.testing.assert_array_equal(o1, o2)
        assert r1 == pytest.approx(1.0 + r2 / 16.2736044, abs=1e-9)
        assert (term1, trunc1) == (term2, trunc2)
        rewards.append(r1)
    assert trunc1 and not term1  # 200 steps
    assert 0.0 <= min(rewards) and max(rewards) <= 1.0


def test_pendulum_reward_bounds_are_attained() -> None:
    env = make_env("pendulum").unwrapped
    env.reset(seed=0)
    env.state = np.array([np.pi, 8.0])  # worst: angle ±π, |θ̇| = 8, |u| = 2
    _, r, _, _, _ = env.step(np.array([2.0]))
    assert r == pytest.approx(0.0, abs=1e-12)
    env.state = np.array([0.0, 0.0])  # best: upright, at rest, no torque
    _, r, _, _, _ = env.step(np.array([0.0]))
    assert r == 1.0


# -- standard ids, raw rewards ------------------------------------------------------------------


def test_raw_ids_resolve_to_their_declared_facts() -> None:
    raw = task_for_env_id("Pendulum-v1")
    assert raw is RAW_TASKS["Pendulum-v1"] and control_task("Pendulum-v1") is raw
    assert (raw.name, raw.horizon, raw.reward_transform) == ("pendulum", 200, "none")
    assert raw.reward_range == (-PENDULUM_MAX_COST, 0.0)
    assert control_task("pendulum") is CONTROL_TASKS["pendulum"]  # a name stays privrl's id
    assert task_for_env_id("HalfCheetah-v5").reward_range is None  # unbounded, declared so
    for task in RAW_TASKS.values():  # the declared dimensions are the env's
        env = gym.make(task.env_id)
        assert env.observation_space.shape == (task.obs_dim,)
        assert env.action_space.shape == (task.act_dim,)
        assert env.spec is not None and env.spec.max_episode_steps == task.horizon
        env.close()


def test_unknown_raw_id_names_the_facts_to_declare() -> None:
    with pytest.raises(ValueError) as info:
        task_for_env_id("MountainCarContinuous-v0")
    message = str(info.value)
    for fact in ("observation and action dimensions", "horizon", "per-step reward range"):
        assert fact in message
    assert "RAW_TASKS" in message and "Pendulum-v1" in message


def test_raw_pendulum_reward_range_is_attained_by_gymnasium() -> None:
    """The declared range [−c_max, 0] is Pendulum-v1's own: both ends are attained."""
    env = gym.make("Pendulum-v1").unwrapped
    env.reset(seed=0)
    env.state = np.array([np.pi, 8.0])
    _, r, _, _, _ = env.step(np.array([2.0]))
    assert r == pytest.approx(-PENDULUM_MAX_COST, abs=1e-12)
    env.state = np.array([0.0, 0.0])
    _, r, _, _, _ = env.step(np.array([0.0]))
    assert r == 0.0


def test_reward_transform_picks_the_twin_and_maps_rewards() -> None:
    raw, ours = RAW_TASKS["Pendulum-v1"], CONTROL_TASKS["pendulum"]
    assert with_reward_transform(raw, "privrl") is ours
    assert with_reward_transform(ours, "none") is raw
    assert with_reward_transform(raw, None) is raw
    a, b = reward_map(raw, ours)
    lo, hi = raw.reward_range  # type: ignore[misc]
    assert (a + b * lo, a + b * hi) == pytest.approx(ours.reward_range)
    a2, b2 = reward_map(ours, raw)
    r = np.array([-PENDULUM_MAX_COST, -3.0, 0.0])
    np.testing.assert_allclose(a2 + b2 * (a + b * r), r, atol=1e-12)
    assert reward_map(ours, ours) == (0.0, 1.0)
    # tasks privrl does not transform: identity, and "none" keeps a privrl-only id
    cheetah = CONTROL_TASKS["halfcheetah"]
    assert reward_map(RAW_TASKS["HalfCheetah-v5"], cheetah) == (0.0, 1.0)
    assert with_reward_transform(CONTROL_TASKS["balance"], "none") is CONTROL_TASKS["balance"]
    with pytest.raises(ValueError, match="choose one of none, privrl"):
        with_reward_transform(raw, "scaled")


def test_batched_raw_pendulum_gives_gymnasium_rewards() -> None:
    from privrl.envs.batched import make_batched

    sim = make_batched("Pendulum-v1", 1)
    env = gym.make("Pendulum-v1")
    env.reset(seed=3)
    sim.set_state(np.array([env.unwrapped.state], dtype=np.float64))
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.uniform(-2, 2, size=1)
        _, r_gym, _, _, _ = env.step(a)
        _, r_sim, _ = sim.step(a[None, :])
        assert r_sim[0] == pytest.approx(r_gym, abs=1e-9)


def test_held_rollouts_use_the_raw_reward_range() -> None:
    from privrl.primorl.policy_stage import RolloutBounds

    bounds = RolloutBounds.of_task(task_for_env_id("Pendulum-v1"))
    assert bounds.reward_range == (-PENDULUM_MAX_COST, 0.0)
    assert RolloutBounds.of_task(CONTROL_TASKS["pendulum"]).reward_range == (0.0, 1.0)


# -- dm_control cartpole ------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["balance", "swingup"])
def test_cartpole_passes_gymnasium_env_checker(task: str) -> None:
    benign = ("infinity", "not having a spec")  # unbounded Box (as dm_control's spec); no spec
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(DMCartpoleEnv(task))
        check_env(make_env(task).unwrapped)
    unexpected = [str(w.message) for w in caught if not any(b in str(w.message) for b in benign)]
    assert not unexpected


@pytest.mark.parametrize("task", ["balance", "swingup"])
def test_cartpole_wrapper_equals_dm_control(task: str) -> None:
    """Same initial state and actions ⇒ the wrapper returns dm_control's obs and reward."""
    cartpole = import_dm_cartpole()
    ours = DMCartpoleEnv(task)
    obs, _ = ours.reset(seed=3)
    theirs = getattr(cartpole, task)()
    theirs.reset()
    with theirs.physics.reset_context():
        theirs.physics.data.qpos[:] = ours.physics.data.qpos
        theirs.physics.data.qvel[:] = ours.physics.data.qvel
    rng = np.random.default_rng(1)
    for _ in range(60):
        a = rng.uniform(-1, 1, size=1)
        obs, r, terminated, truncated, _ = ours.step(a.astype(np.float32))
        ts = theirs.step(a.astype(np.float32))
        flat = np.concatenate([ts.observation["position"], ts.observation["velocity"]])
        assert obs.dtype == np.float32 and obs.shape == (5,)
        np.testing.assert_allclose(obs, flat, rtol=1e-6, atol=1e-6)
        assert r == pytest.approx(ts.reward, abs=1e-12)
        assert not terminated and not truncated
    # layout: (x, cos θ, sin θ, ẋ, θ̇)
    q, v = ours.physics.data.qpos, ours.physics.data.qvel
    expected = [q[0], np.cos(q[1]), np.sin(q[1]), v[0], v[1]]
    np.testing.assert_allclose(obs, expected, rtol=1e-6, atol=1e-6)


def test_cartpole_initial_states_follow_the_task() -> None:
    balance, swingup = DMCartpoleEnv("balance"), DMCartpoleEnv("swingup")
    b = np.array([balance.reset(seed=s)[0] for s in range(30)])
    w = np.array([swingup.reset(seed=s)[0] for s in range(30)])
    assert np.all(np.abs(b[:, 0]) <= 0.1) and np.all(b[:, 1] >= np.cos(0.034) - 1e-6)
    assert np.all(np.abs(w[:, 0]) < 0.05) and np.all(w[:, 1] < -0.99)  # hanging down
    assert np.std(b[:, 0]) > 0.02  # actually random


def test_cartpole_seeding_is_deterministic() -> None:
    env = DMCartpoleEnv("swingup")
    o1, _ = env.reset(seed=11)
    o2, _ = env.reset(seed=11)
    o3, _ = env.reset(seed=12)
    np.testing.assert_array_equal(o1, o2)
    assert not np.array_equal(o1, o3)
    other = DMCartpoleEnv("swingup")
    other.reset(seed=11)
    a, b = env.reset(seed=11)[0], other.reset()[0]  # unseeded reset continues the stream
    assert not np.array_equal(a, b)


def test_cartpole_truncates_at_1000_and_never_terminates() -> None:
    env = DMCartpoleEnv("balance")
    env.reset(seed=0)
    flags = [env.step(np.zeros(1, dtype=np.float32))[2:4] for _ in range(1000)]
    assert not any(term for term, _ in flags)
    assert [t for _, t in flags].index(True) == 999
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(1, dtype=np.float32))


def test_cartpole_clips_actions_and_rejects_bad_ones() -> None:
    e1, e2 = DMCartpoleEnv("swingup"), DMCartpoleEnv("swingup")
    e1.reset(seed=5)
    e2.reset(seed=5)
    for _ in range(5):
        o1, r1, *_ = e1.step(np.array([7.0], dtype=np.float32))
        o2, r2, *_ = e2.step(np.array([1.0], dtype=np.float32))
        np.testing.assert_array_equal(o1, o2)
        assert r1 == r2
    with pytest.raises(ValueError, match=r"shape \(1,\)"):
        e1.step(np.zeros(2, dtype=np.float32))
    with pytest.raises(ValueError, match="finite"):
        e1.step(np.array([np.nan], dtype=np.float32))
    with pytest.raises(ValueError, match="balance"):
        DMCartpoleEnv("walk")
    with pytest.raises(ValueError, match="render"):
        DMCartpoleEnv("balance", render_mode="rgb_array")


def test_cartpole_dense_reward_in_unit_interval() -> None:
    env = DMCartpoleEnv("swingup")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    rs = [env.step(rng.uniform(-1, 1, 1).astype(np.float32))[1] for _ in range(100)]
    assert all(0.0 <= r <= 1.0 for r in rs)
    assert max(rs) < 0.5  # hanging down: upright ≈ 0


def test_dm_control_import_restores_mujoco_gl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    import_dm_cartpole()
    assert "MUJOCO_GL" not in os.environ
    monkeypatch.setenv("MUJOCO_GL", "egl")
    import_dm_cartpole()
    assert os.environ["MUJOCO_GL"] == "egl"


def test_cartpole_runs_without_any_opengl_import() -> None:
    code = (
        "import sys, numpy as np\n"
        "from privrl.envs.control import DMCartpoleEnv\n"
        "e = DMCartpoleEnv('swingup'); e.reset(seed=0); e.step(np.zeros(1, np.float32))\n"
        "keys = ('glfw', 'OpenGL', 'pyopengl', 'mujoco.egl', 'mujoco.osmesa')\n"
        "bad = [m for m in sys.modules if any(k in m for k in keys)]\n"
        "assert not bad, bad\n"
        "import os; assert 'MUJOCO_GL' not in os.environ\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr


def test_register_envs_is_wired_into_the_package() -> None:
    from privrl.envs import register_envs as register_all

    for task in CONTROL_TASKS.values():
        gym.registry.pop(task.env_id, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        register_all()
    for task in CONTROL_TASKS.values():
        assert task.env_id in gym.registry
