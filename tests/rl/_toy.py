"""A tiny batched continuous-control task for fast learning checks of SAC/TD3/DDPG.

Observation s ~ U[-1, 1]^2 (fresh each step, independent of the action); reward
1 − (a − a*(s))² with a*(s) = 0.8·s_0 in an action box [-2, 2]; horizon 10. The optimal
policy is known, the random policy is far from it, and a few hundred updates suffice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ToyTask:
    name: str = "toy"
    env_id: str = "toy"
    obs_dim: int = 2
    act_dim: int = 1
    horizon: int = 10
    action_low: float = -2.0
    action_high: float = 2.0


class ToyBatchedEnv:
    def __init__(self, num_envs: int, seed: int = 0) -> None:
        self.task = ToyTask()
        self.num_envs = num_envs
        self.horizon = self.task.horizon
        self._rng = np.random.default_rng(seed)
        self._obs = np.zeros((num_envs, 2))

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._obs = self._rng.uniform(-1, 1, (self.num_envs, 2))
        return self._obs.copy()

    @staticmethod
    def best_action(obs: np.ndarray) -> np.ndarray:
        return 0.8 * obs[:, :1]

    def step(self, actions: np.ndarray):
        a = np.clip(actions, -2.0, 2.0)
        reward = 1.0 - ((a - self.best_action(self._obs)) ** 2).sum(axis=1)
        self._obs = self._rng.uniform(-1, 1, (self.num_envs, 2))
        return self._obs.copy(), reward, np.zeros(self.num_envs, dtype=bool)


def mean_squared_action_error(agent, n: int = 512, seed: int = 1) -> float:
    """E[(π_det(s) − a*(s))²] on fresh states."""
    obs = np.random.default_rng(seed).uniform(-1, 1, (n, 2))
    a = agent.act(obs, deterministic=True)
    return float(((a - ToyBatchedEnv.best_action(obs)) ** 2).mean())
