"""Classic Mountain Car (Sutton & Barto 1998, §10.1 of the 2nd ed.) as the GPOPE paper uses it.

    v' = clip(v + 0.001·a − 0.0025·cos(3x), −0.07, 0.07)
    x' = clip(x + v', −1.2, 0.5);  v' = 0 if x' hits the left wall (x' = −1.2)
    terminate when x' ≥ 0.5; reward −1 per step; actions {0, 1, 2} ↦ a ∈ {−1, 0, +1}
    start: x ~ U[−0.6, −0.4], v = 0; truncated at ``horizon`` steps (default 1000)

Two faces over one step function: :class:`MountainCarEnv` (Gymnasium, id
``privrl/MountainCar-v0``) and :class:`MountainCarBatch` (numpy, many episodes stepped
together, used for fast sampling). Both are float64 and agree step by step (tested).
Gymnasium's own ``MountainCar-v0`` differs (x up to 0.6, horizon 200, float32).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from privrl.arrays import FloatArray

__all__ = [
    "ENV_ID",
    "GOAL_POSITION",
    "MAX_POSITION",
    "MAX_SPEED",
    "MIN_POSITION",
    "MountainCarBatch",
    "MountainCarEnv",
    "mountain_car_step",
    "register_envs",
]

ENV_ID = "privrl/MountainCar-v0"
MIN_POSITION = -1.2
MAX_POSITION = 0.5
GOAL_POSITION = 0.5
MAX_SPEED = 0.07
FORCE = 0.001
GRAVITY = 0.0025
START_LOW, START_HIGH = -0.6, -0.4
DEFAULT_HORIZON = 1000


def observation_space() -> spaces.Box:
    """Box over (position, velocity), float64."""
    return spaces.Box(
        low=np.array([MIN_POSITION, -MAX_SPEED]),
        high=np.array([MAX_POSITION, MAX_SPEED]),
        dtype=np.float64,
    )


def mountain_car_step(
    obs: np.ndarray, actions: np.ndarray
) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """One step for a batch: ``obs`` [n, 2], ``actions`` [n] in {0,1,2} → (obs', reward, done)."""
    obs = np.asarray(obs, dtype=np.float64)
    a = np.asarray(actions, dtype=np.int64)
    if obs.ndim != 2 or obs.shape[1] != 2 or a.shape != obs.shape[:1]:
        raise ValueError(f"expected obs [n, 2] and actions [n], got {obs.shape}, {a.shape}")
    if a.size and (a.min() < 0 or a.max() > 2):
        raise ValueError("Mountain Car actions must be in {0, 1, 2}")
    x, v = obs[:, 0], obs[:, 1]
    v_new = np.clip(v + FORCE * (a - 1) - GRAVITY * np.cos(3.0 * x), -MAX_SPEED, MAX_SPEED)
    x_new = np.clip(x + v_new, MIN_POSITION, MAX_POSITION)
    v_new = np.where(x_new <= MIN_POSITION, 0.0, v_new)  # inelastic left wall
    terminated = x_new >= GOAL_POSITION
    return np.stack([x_new, v_new], axis=1), np.full(obs.shape[0], -1.0), terminated


def reset_states(n: int, rng: np.random.Generator) -> FloatArray:
    """``n`` start states: x ~ U[−0.6, −0.4], v = 0."""
    x = rng.uniform(START_LOW, START_HIGH, size=n)
    return np.stack([x, np.zeros(n)], axis=1)


class MountainCarBatch:
    """Vectorised simulator: many Mountain Car episodes stepped together (numpy, float64).

    ``reset(n, rng)`` returns start observations; ``step(obs, actions)`` is the pure dynamics
    (episodes that have ended must be masked by the caller). ``horizon`` is the time limit.
    """

    n_actions = 3

    def __init__(self, horizon: int = DEFAULT_HORIZON) -> None:
        if int(horizon) < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.horizon = int(horizon)
        self.observation_space = observation_space()
        self.action_space = spaces.Discrete(3)

    def reset(self, n: int, rng: np.random.Generator) -> FloatArray:
        return reset_states(n, rng)

    def step(
        self, obs: np.ndarray, actions: np.ndarray
    ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
        return mountain_car_step(obs, actions)


class MountainCarEnv(gym.Env[np.ndarray, np.int64]):
    """Gymnasium face of the same dynamics; truncates at ``horizon`` steps."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(self, horizon: int = DEFAULT_HORIZON, render_mode: str | None = None) -> None:
        if render_mode is not None:
            raise ValueError("MountainCarEnv does not render")
        if int(horizon) < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.horizon = int(horizon)
        self.observation_space = observation_space()
        self.action_space = spaces.Discrete(3)
        self._state = np.zeros(2)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._state = reset_states(1, self.np_random)[0]
        self._t = 0
        return self._state.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"invalid action {action!r} (expected 0, 1 or 2)")
        obs, r, done = mountain_car_step(self._state[None], np.array([int(action)]))
        self._state = obs[0]
        self._t += 1
        terminated = bool(done[0])
        truncated = (not terminated) and self._t >= self.horizon
        return self._state.copy(), float(r[0]), terminated, truncated, {}


def register_envs() -> None:
    """Register ``privrl/MountainCar-v0`` with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=MountainCarEnv)
