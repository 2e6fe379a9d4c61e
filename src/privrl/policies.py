"""The policy protocol shared by data collection, evaluation and learners.

A policy maps a *batch* of observations to a batch of actions, drawing any randomness from the
``numpy.random.Generator`` it is given (never from global state), so that rollouts are
reproducible from one seed. Policies over discrete actions may also expose
``action_probs(obs) -> [batch, n_actions]``; data collection then records the probability of
each taken action (the behaviour propensity needed by off-policy evaluation). A policy that
has ``action_probs`` must draw its actions from exactly those probabilities; the built-in ones
do so through :func:`sample_from_probs`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
from gymnasium import spaces

__all__ = [
    "EpsilonGreedy",
    "Policy",
    "StochasticPolicy",
    "TabularPolicy",
    "UniformRandomPolicy",
    "sample_from_probs",
]


@runtime_checkable
class Policy(Protocol):
    """Anything with ``act(obs, rng)``: batched observations in, batched actions out."""

    def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...


@runtime_checkable
class StochasticPolicy(Policy, Protocol):
    """A discrete-action policy that can report its action distribution."""

    def action_probs(self, obs: np.ndarray) -> np.ndarray: ...


def sample_from_probs(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One categorical draw per row of ``probs`` [batch, n_actions] (inverse CDF, vectorised)."""
    probs = np.asarray(probs, dtype=np.float64)
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(probs.shape[0]) * cdf[:, -1]
    actions = (u[:, None] >= cdf).sum(axis=1)
    # Guard against rounding at the top end and never return a zero-probability action.
    return np.minimum(actions, probs.shape[1] - 1).astype(np.int64)


class UniformRandomPolicy:
    """Uniform over a Discrete, MultiDiscrete, MultiBinary or bounded Box action space."""

    def __init__(self, action_space: spaces.Space) -> None:
        if isinstance(action_space, spaces.Box) and not (
            np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))
        ):
            raise ValueError("UniformRandomPolicy needs a Box action space with finite bounds")
        if not isinstance(
            action_space, spaces.Discrete | spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary
        ):
            raise ValueError(f"unsupported action space {action_space!r}")
        self.action_space = action_space

    def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n = len(obs)
        sp = self.action_space
        if isinstance(sp, spaces.Discrete):
            return rng.integers(sp.start, sp.start + sp.n, size=n, dtype=np.int64)
        if isinstance(sp, spaces.Box):
            u = rng.random((n, *sp.shape))
            low = sp.low.astype(np.float64)
            high = sp.high.astype(np.float64)
            return np.clip(low + u * (high - low), low, high).astype(sp.dtype)
        if isinstance(sp, spaces.MultiDiscrete):
            return (sp.start + rng.integers(0, sp.nvec, size=(n, *sp.nvec.shape))).astype(sp.dtype)
        return rng.integers(0, 2, size=(n, *sp.shape), dtype=sp.dtype)

    def action_probs(self, obs: np.ndarray) -> np.ndarray:
        """Uniform probabilities; Discrete action spaces only."""
        if not isinstance(self.action_space, spaces.Discrete):
            raise TypeError("action_probs is defined for Discrete action spaces only")
        n = int(self.action_space.n)
        return np.full((len(obs), n), 1.0 / n)


class TabularPolicy:
    """A stationary policy over a Discrete state space.

    ``table`` is either ``[S]`` (a deterministic action per state) or ``[S, A]`` (action
    probabilities per state). Time-dependent ``[H, S(, A)]`` policies belong to the tabular
    systems, which know the step index.
    """

    def __init__(self, table: np.ndarray, n_actions: int | None = None) -> None:
        table = np.asarray(table)
        if table.ndim == 1:
            if not np.issubdtype(table.dtype, np.integer):
                raise ValueError("a deterministic [S] table must hold integer actions")
            n_actions = int(table.max()) + 1 if n_actions is None else n_actions
            probs = np.zeros((table.shape[0], n_actions))
            probs[np.arange(table.shape[0]), table] = 1.0
        elif table.ndim == 2:
            probs = table.astype(np.float64)
            if np.any(probs < 0) or not np.allclose(probs.sum(axis=1), 1.0):
                raise ValueError("each row of an [S, A] table must be a probability vector")
        else:
            raise ValueError(f"expected a [S] or [S, A] table, got shape {table.shape}")
        self.probs = probs

    def action_probs(self, obs: np.ndarray) -> np.ndarray:
        return self.probs[np.asarray(obs, dtype=np.int64)]

    def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return sample_from_probs(self.action_probs(obs), rng)


class EpsilonGreedy:
    """With probability ``epsilon`` a uniform action, else ``greedy``'s (deterministic) action."""

    def __init__(self, greedy: Policy, n_actions: int, epsilon: float) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.greedy = greedy
        self.n_actions = int(n_actions)
        self.epsilon = float(epsilon)
        self._greedy_rng = np.random.default_rng(0)  # greedy policies must ignore it

    def action_probs(self, obs: np.ndarray) -> np.ndarray:
        greedy = np.asarray(self.greedy.act(obs, self._greedy_rng), dtype=np.int64)
        probs = np.full((len(obs), self.n_actions), self.epsilon / self.n_actions)
        probs[np.arange(len(obs)), greedy] += 1.0 - self.epsilon
        return probs

    def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return sample_from_probs(self.action_probs(obs), rng)
