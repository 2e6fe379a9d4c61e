"""Discrete Conservative Q-Learning (Kumar et al. 2020) on a DQN backbone.

Per transition (s, a, r, s', d):

    y      = r + γ (1 − d) max_a' Q_target(s', a')                    (DQN target, constant)
    ℓ_TD   = Huber(Q(s, a) − y)                                        (threshold 1)
    ℓ_CQL  = logsumexp_a' Q(s, a') − Q(s, a)                           (CQL(H), Kumar eq. 4)
    ℓ      = ℓ_TD + α ℓ_CQL,   α = 1

The conservative term pushes down the Q-values of actions the data do not support (the
logsumexp is a soft maximum over all actions) and up the value of the logged action.

Decisions: Huber TD loss (as DQN and d3rlpy's DiscreteCQL); plain DQN max target (the paper's
"DQN version of CQL"); hard target-network copy every ``target_update_interval`` = 1000 steps
by default (DQN style; pass ``tau`` for Polyak averaging instead). MLP 256-256 (HIV: one
hidden layer of 512, ``hidden=(512,)``), γ = 0.99, Adam.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from privrl.rl.discrete_common import (
    DiscreteLearner,
    TransitionBatch,
    huber,
    init_mlp,
)

__all__ = ["DiscreteCQL"]


class DiscreteCQL(DiscreteLearner):
    """Discrete CQL: Q-network ``q{i}.*`` and its target copy."""

    algorithm = "cql"

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        *,
        alpha: float = 1.0,
        target_update_interval: int = 1000,
        **common: Any,
    ) -> None:
        """``common``: the other keywords of :class:`DiscreteLearner` (``hidden``, ``gamma``,
        ``lr``, ``tau``, ``seed``, ``obs_transform``)."""
        if not alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = float(alpha)
        super().__init__(
            obs_dim, n_actions, target_update_interval=target_update_interval, **common
        )

    def _init_params(self, gen: torch.Generator) -> dict[str, torch.Tensor]:
        return init_mlp("q", [self.obs_dim, *self.hidden, self.n_actions], gen)

    def _target_keys(self) -> list[str]:
        return list(self.params)

    def config(self) -> dict:
        return {**super().config(), "alpha": self.alpha, "td_loss": "huber", "target": "dqn_max"}

    def per_example_loss(
        self, params: Mapping[str, torch.Tensor], batch: TransitionBatch
    ) -> torch.Tensor:
        with torch.no_grad():
            q_next = self._q(self.target_params, batch.next_obs).max(dim=1).values
            y = batch.rewards + self.gamma * (1.0 - batch.terminated) * q_next
        q = self._q(params, batch.obs)  # [B, A]
        q_a = q.gather(1, batch.actions.reshape(-1, 1)).squeeze(1)
        td = huber(q_a - y)
        conservative = torch.logsumexp(q, dim=1) - q_a
        return td + self.alpha * conservative

    def _greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return self._q(self.params, obs).argmax(dim=1)
