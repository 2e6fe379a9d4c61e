"""Continuous-control tasks of PRIMORL/MOPO behind the Gymnasium API.

=============== =========================== === === ======= =============================
task            id                          obs act horizon source
=============== =========================== === === ======= =============================
pendulum        privrl/Pendulum-v0          3   1   200     gymnasium Pendulum-v1
balance         privrl/CartpoleBalance-v0   5   1   1000    dm_control cartpole/balance
swingup         privrl/CartpoleSwingup-v0   5   1   1000    dm_control cartpole/swingup
halfcheetah     privrl/HalfCheetah-v0       17  6   1000    gymnasium HalfCheetah-v5
=============== =========================== === === ======= =============================

Pendulum's reward is rescaled to r' = 1 + r / c_max with c_max = π² + 0.1·8² + 0.001·2²
≈ 16.2736044, the largest per-step cost, so that r' ∈ [0, 1] and a 200-step return lies in
[0, 200]. The paper reports Pendulum returns near 800 on a scale it does not define; we compare
results as a percentage of our own MOPO (or expert) return instead.

Standard Gymnasium ids with raw rewards (:data:`RAW_TASKS`) are tasks too, with their own
declared facts: ``Pendulum-v1`` (per-step reward in [−c_max, 0], the reward transform "none")
and ``HalfCheetah-v5`` (the same env as privrl/HalfCheetah-v0; reward unbounded). A raw task
shares its privrl twin's name, and so its presets. The reward transform is a choice of scale,
not a requirement: :func:`with_reward_transform` gives the twin in the other scale and
:func:`reward_map` the public affine map r_target = a + b·r_source between the two (identity
where privrl does not transform, as for HalfCheetah and the cartpoles).

The cartpole tasks are dm_control's, seen through :class:`DMCartpoleEnv`: a flat float32
observation (cart x, cos θ, sin θ, cart ẋ, θ̇) in dm_control's order, a 1-dim action in [−1, 1]
(clipped), truncation at 1000 steps (10 s at 0.01 s per step), never termination. dm_control
is imported render-free: if ``MUJOCO_GL`` is unset it is set to ``disable`` for the duration of
the import only (dm_control picks its OpenGL backend at import time and would otherwise load
GLFW/EGL/OSMesa), and the process environment is restored afterwards.

:data:`CONTROL_TASKS` describes each task; :mod:`privrl.envs.batched` has fast vectorised
simulators with identical dynamics.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.pendulum import PendulumEnv

__all__ = [
    "CARTPOLE_TIME_LIMIT",
    "CONTROL_TASKS",
    "PENDULUM_MAX_COST",
    "RAW_TASKS",
    "REWARD_TRANSFORMS",
    "ControlTask",
    "DMCartpoleEnv",
    "ScaledPendulumEnv",
    "control_task",
    "import_dm_cartpole",
    "make_env",
    "pendulum_reward_transform",
    "register_envs",
    "reward_map",
    "task_for_env_id",
    "with_reward_transform",
]

# Largest per-step Pendulum-v1 cost: angle_normalize(θ)² ≤ π², θ̇ ∈ [−8, 8], u ∈ [−2, 2].
PENDULUM_MAX_COST = float(np.pi**2 + 0.1 * 8.0**2 + 0.001 * 2.0**2)  # 16.27360440...
CARTPOLE_TIME_LIMIT = 10.0  # seconds (dm_control's default); 1000 steps of 0.01 s


@dataclass(frozen=True)
class ControlTask:
    """A continuous-control task: its Gymnasium id, dimensions, horizon and action box.

    ``reward_range`` is the per-step reward's range where the simulator bounds it (public
    simulator knowledge; None where it is unbounded). ``reward_transform`` names the map the
    env applies to its source env's reward: "privrl" (privrl/Pendulum-v0's rescaling) or
    "none" (the source's reward as is)."""

    name: str
    env_id: str
    obs_dim: int
    act_dim: int
    horizon: int
    action_low: float
    action_high: float
    reward_range: tuple[float, float] | None = (0.0, 1.0)
    reward_transform: str = "none"


REWARD_TRANSFORMS = ("none", "privrl")

CONTROL_TASKS: dict[str, ControlTask] = {
    "pendulum": ControlTask(
        "pendulum", "privrl/Pendulum-v0", 3, 1, 200, -2.0, 2.0, reward_transform="privrl"
    ),
    "balance": ControlTask("balance", "privrl/CartpoleBalance-v0", 5, 1, 1000, -1.0, 1.0),
    "swingup": ControlTask("swingup", "privrl/CartpoleSwingup-v0", 5, 1, 1000, -1.0, 1.0),
    "halfcheetah": ControlTask(
        "halfcheetah", "privrl/HalfCheetah-v0", 17, 6, 1000, -1.0, 1.0, reward_range=None
    ),
}


# Standard Gymnasium ids, raw rewards. Each fact is public simulator knowledge: Pendulum-v1's
# cost angle_normalize(θ)² + 0.1·θ̇² + 0.001·u² is at most c_max (|θ| ≤ π, |θ̇| ≤ 8, |u| ≤ 2)
# and at least 0; its episodes are truncated at 200 steps, never terminated.
RAW_TASKS: dict[str, ControlTask] = {
    "Pendulum-v1": ControlTask(
        "pendulum", "Pendulum-v1", 3, 1, 200, -2.0, 2.0, reward_range=(-PENDULUM_MAX_COST, 0.0)
    ),
    "HalfCheetah-v5": ControlTask(
        "halfcheetah", "HalfCheetah-v5", 17, 6, 1000, -1.0, 1.0, reward_range=None
    ),
}

# privrl's reward = a + b · the source env's reward, per task name (identity where absent).
_PRIVRL_REWARD: dict[str, tuple[float, float]] = {"pendulum": (1.0, 1.0 / PENDULUM_MAX_COST)}

_UNDECLARED = (
    "privrl declares no control-task facts for it (observation and action dimensions, "
    "horizon, action box, per-step reward range, reward transform) and MOPO/PRIMORL have no "
    "presets for it"
)


def _known_ids() -> str:
    return ", ".join([t.env_id for t in CONTROL_TASKS.values()] + list(RAW_TASKS))


def task_for_env_id(env_id: str) -> ControlTask:
    """The :class:`ControlTask` registered under ``env_id``: a privrl id, or a standard
    Gymnasium id with declared facts (:data:`RAW_TASKS`)."""
    for task in CONTROL_TASKS.values():
        if task.env_id == env_id:
            return task
    if env_id in RAW_TASKS:
        return RAW_TASKS[env_id]
    raise ValueError(
        f"unknown control env id {env_id!r}: {_UNDECLARED}; declare them as a ControlTask in "
        f"privrl.envs.control.RAW_TASKS (under a task name with presets), or collect on a known "
        f"id: {_known_ids()}"
    )


def with_reward_transform(task: ControlTask, transform: str | None) -> ControlTask:
    """``task`` in the reward scale ``transform`` ("privrl": privrl's id for the task; "none":
    the raw rewards' id); ``None`` keeps ``task``. ValueError if no id has that scale."""
    if transform is None:
        return task
    if transform not in REWARD_TRANSFORMS:
        raise ValueError(
            f"unknown reward transform {transform!r}; choose one of {', '.join(REWARD_TRANSFORMS)}"
        )
    twin = CONTROL_TASKS[task.name]
    if transform == "privrl":
        return twin
    for raw in RAW_TASKS.values():
        if raw.name == task.name:
            return raw
    if twin.reward_transform == "none":
        return twin  # privrl leaves this task's reward as its source computes it
    raise ValueError(f"task {task.name!r} has no raw-reward id; use the reward transform privrl")


def reward_map(source: ControlTask, target: ControlTask) -> tuple[float, float]:
    """(a, b) with r_target = a + b·r_source per step, for two ids of one task (public: the
    transforms are fixed functions of the simulator's declared cost)."""
    if source.name != target.name:
        raise ValueError(f"tasks {source.name!r} and {target.name!r} differ: no reward map")
    a, b = _PRIVRL_REWARD.get(source.name, (0.0, 1.0))
    to_privrl = {"privrl": (0.0, 1.0), "none": (a, b)}  # a + b·r for each scale
    (sa, sb), (ta, tb) = to_privrl[source.reward_transform], to_privrl[target.reward_transform]
    # r_privrl = sa + sb·r_source = ta + tb·r_target  ⇒  r_target = (sa − ta)/tb + (sb/tb)·r
    return (sa - ta) / tb, sb / tb


def control_task(task: str | ControlTask) -> ControlTask:
    """Resolve a task given as a :class:`ControlTask`, a task name (privrl's id) or a Gymnasium
    id (privrl's or a standard one in :data:`RAW_TASKS`)."""
    if isinstance(task, ControlTask):
        return task
    if task in CONTROL_TASKS:
        return CONTROL_TASKS[task]
    for t in [*CONTROL_TASKS.values(), *RAW_TASKS.values()]:
        if t.env_id == task:
            return t
    names = ", ".join(CONTROL_TASKS)
    raise ValueError(
        f"unknown control task {task!r}; known names: {names}; known ids: {_known_ids()}"
    )


def pendulum_reward_transform(reward: Any) -> Any:
    """r' = 1 + r / c_max: Pendulum-v1's reward r ∈ [−c_max, 0] mapped to [0, 1]."""
    return 1.0 + reward / PENDULUM_MAX_COST


class ScaledPendulumEnv(PendulumEnv):
    """Gymnasium's Pendulum-v1 with the reward rescaled to [0, 1] per step."""

    def step(self, u: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(u)
        return obs, float(pendulum_reward_transform(reward)), terminated, truncated, info


def import_dm_cartpole() -> ModuleType:
    """Import ``dm_control.suite.cartpole`` without loading an OpenGL backend."""
    unset = "MUJOCO_GL" not in os.environ
    if unset:
        os.environ["MUJOCO_GL"] = "disable"
    try:
        from dm_control.suite import cartpole
    finally:
        if unset:
            os.environ.pop("MUJOCO_GL", None)
    return cartpole


class DMCartpoleEnv(gym.Env[np.ndarray, np.ndarray]):
    """dm_control's cartpole ``balance`` / ``swingup`` (dense reward) as a Gymnasium env.

    Observation: float32 [x, cos θ, sin θ, ẋ, θ̇] (dm_control's ``position`` then ``velocity``).
    Action: float32 [u], clipped to [−1, 1] before it reaches dm_control (dm_control does not
    clip, and its control reward would see the raw value). Truncated after 1000 steps.
    ``reset(seed=s)`` reseeds the task's ``RandomState`` from Gymnasium's ``np_random``, so the
    initial state is a deterministic function of ``s``; later unseeded resets continue that
    stream.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(self, task: str = "balance", render_mode: str | None = None) -> None:
        if task not in ("balance", "swingup"):
            raise ValueError(f"cartpole task must be 'balance' or 'swingup', got {task!r}")
        if render_mode is not None:
            raise ValueError("DMCartpoleEnv does not render")
        cartpole = import_dm_cartpole()
        self.task_name = task
        self._dm_random = np.random.RandomState(0)  # reseeded at every reset
        make = cartpole.balance if task == "balance" else cartpole.swingup
        self._env = make(time_limit=CARTPOLE_TIME_LIMIT, random=self._dm_random)
        self.horizon = CONTROL_TASKS[task].horizon
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(5,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._t = 0
        self._needs_reset = True

    @property
    def physics(self) -> Any:
        """The dm_control ``Physics`` (its ``data`` holds qpos, qvel, qacc_warmstart)."""
        return self._env.physics

    @staticmethod
    def _flat(observation: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([observation["position"], observation["velocity"]]).astype(np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._dm_random.seed(int(self.np_random.integers(2**32)))
        self._t = 0
        self._needs_reset = False
        return self._flat(self._env.reset().observation), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("call reset() before step() (and after the episode ends)")
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (1,) or not np.all(np.isfinite(a)):
            raise ValueError(f"expected a finite action of shape (1,), got {action!r}")
        ts = self._env.step(np.clip(a, -1.0, 1.0))
        self._t += 1
        truncated = bool(ts.last()) or self._t >= self.horizon
        self._needs_reset = truncated
        return self._flat(ts.observation), float(ts.reward), False, truncated, {}


def make_env(task: str | ControlTask, **kwargs: Any) -> gym.Env:
    """``gym.make`` for a control task (registers the ids first)."""
    register_envs()
    return gym.make(control_task(task).env_id, **kwargs)


def register_envs() -> None:
    """Register the four control ids with Gymnasium (idempotent)."""
    entries = {
        "pendulum": (ScaledPendulumEnv, {}),
        "balance": (DMCartpoleEnv, {"task": "balance"}),
        "swingup": (DMCartpoleEnv, {"task": "swingup"}),
        "halfcheetah": ("gymnasium.envs.mujoco.half_cheetah_v5:HalfCheetahEnv", {}),
    }
    for name, (entry_point, kwargs) in entries.items():
        task = CONTROL_TASKS[name]
        if task.env_id not in gym.registry:
            gym.register(
                id=task.env_id,
                entry_point=entry_point,
                max_episode_steps=task.horizon,
                kwargs=kwargs,
            )
