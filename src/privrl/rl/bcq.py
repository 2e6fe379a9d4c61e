"""Discrete Batch-Constrained deep Q-learning (Fujimoto et al. 2019, "Benchmarking Batch Deep
Reinforcement Learning Algorithms"), the non-Atari version of their ``discrete_BCQ``.

Two separate MLPs on the state (their ``FC_Q``: no shared trunk outside the Atari conv net):
a Q head ``q{i}.*`` and an imitation head ``i{i}.*``. Their code puts a ReLU on the imitation
logits before the log-softmax; with two actions that ReLU can leave an output unit dead from
initialisation (its logit stuck at 0, so π_imit never separates the actions), so the default
here is *linear* logits and ``imitation_logits="relu"`` restores theirs. Per transition
(s, a, r, s', d):

    G(a'|s')  = π_imit(a'|s') / max_b π_imit(b|s')        allowed: G > τ = 0.3
    a*        = argmax_{allowed a'} Q(s', a')                (online net, constant)
    y         = r + γ (1 − d) Q_target(s', a*)
    ℓ         = Huber(Q(s, a) − y) − log π_imit(a|s) + 0.01 · mean_a' logits(s, a')²

Acting: argmax of Q over the actions with G(a|s) > τ. Target network: Polyak τ_target = 0.005
every step; Adam, lr 3e-4; γ = 0.99; MLPs 256-256 (HIV: ``hidden=(512,)``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import torch

from privrl.rl.discrete_common import (
    DiscreteLearner,
    TransitionBatch,
    huber,
    init_mlp,
    mlp,
)

__all__ = ["DiscreteBCQ"]

_MASKED = -1e8  # Fujimoto's large negative value for disallowed actions
ImitationLogits = Literal["linear", "relu"]


class DiscreteBCQ(DiscreteLearner):
    """Discrete BCQ: Q head, imitation head, Polyak-averaged target Q head."""

    algorithm = "bcq"

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        *,
        threshold: float = 0.3,
        tau: float | None = 0.005,
        logit_penalty: float = 1e-2,
        imitation_logits: ImitationLogits = "linear",
        **common: Any,
    ) -> None:
        """``common``: the other keywords of :class:`DiscreteLearner` (``hidden``, ``gamma``,
        ``lr``, ``target_update_interval``, ``seed``, ``obs_transform``)."""
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"threshold must be in [0, 1), got {threshold}")
        if imitation_logits not in ("linear", "relu"):
            raise ValueError(
                f"imitation_logits must be 'linear' or 'relu', got {imitation_logits!r}"
            )
        self.imitation_logits = imitation_logits
        self.threshold = float(threshold)
        self.logit_penalty = float(logit_penalty)
        super().__init__(obs_dim, n_actions, tau=tau, **common)

    def _init_params(self, gen: torch.Generator) -> dict[str, torch.Tensor]:
        sizes = [self.obs_dim, *self.hidden, self.n_actions]
        return {**init_mlp("q", sizes, gen), **init_mlp("i", sizes, gen)}

    def _target_keys(self) -> list[str]:
        return [k for k in self.params if k.startswith("q")]

    def config(self) -> dict:
        return {
            **super().config(),
            "threshold": self.threshold,
            "logit_penalty": self.logit_penalty,
            "imitation_logits": self.imitation_logits,
        }

    def _imitation_logits(
        self, params: Mapping[str, torch.Tensor], obs: torch.Tensor
    ) -> torch.Tensor:
        final_relu = self.imitation_logits == "relu"  # Fujimoto's code: ReLU on the logits
        return mlp(params, "i", self._n_layers, obs, final_relu=final_relu)

    def _allowed(self, log_probs: torch.Tensor) -> torch.Tensor:
        """G(a|s) = π(a|s)/max_b π(b|s) > τ, in log space."""
        log_ratio = log_probs - log_probs.max(dim=1, keepdim=True).values
        log_tau = math.log(self.threshold) if self.threshold > 0 else -math.inf
        return log_ratio > log_tau

    def _constrained_argmax(self, q: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
        return torch.where(self._allowed(log_probs), q, torch.full_like(q, _MASKED)).argmax(dim=1)

    def per_example_loss(
        self, params: Mapping[str, torch.Tensor], batch: TransitionBatch
    ) -> torch.Tensor:
        with torch.no_grad():
            q_next = self._q(params, batch.next_obs)
            logp_next = torch.log_softmax(self._imitation_logits(params, batch.next_obs), dim=1)
            a_next = self._constrained_argmax(q_next, logp_next).reshape(-1, 1)
            q_tgt = self._q(self.target_params, batch.next_obs).gather(1, a_next).squeeze(1)
            y = batch.rewards + self.gamma * (1.0 - batch.terminated) * q_tgt
        a = batch.actions.reshape(-1, 1)
        q_a = self._q(params, batch.obs).gather(1, a).squeeze(1)
        logits = self._imitation_logits(params, batch.obs)
        nll = -torch.log_softmax(logits, dim=1).gather(1, a).squeeze(1)
        return huber(q_a - y) + nll + self.logit_penalty * logits.pow(2).mean(dim=1)

    def imitation_probs(self, obs: np.ndarray) -> np.ndarray:
        """π_imit(·|s) for raw observations ``[n, obs_dim]`` → ``[n, n_actions]``."""
        with torch.no_grad():
            logits = self._imitation_logits(self.params, self._obs_tensor(obs))
            return torch.softmax(logits, dim=1).cpu().numpy().astype(np.float64)

    def _greedy(self, obs: torch.Tensor) -> torch.Tensor:
        q = self._q(self.params, obs)
        logp = torch.log_softmax(self._imitation_logits(self.params, obs), dim=1)
        return self._constrained_argmax(q, logp)
