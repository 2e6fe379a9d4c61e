"""Soft Actor-Critic (Haarnoja et al. 2018), SpinningUp style, with automatic temperature.

* Actor: squashed Gaussian ``a = tanh(μ + σ·ξ)`` scaled to the environment's box.
* Critic: twin Q-networks evaluated as one batched network (:class:`~privrl.rl.mlp.VectorizedQ`),
  target copies updated by Polyak averaging τ.
* Temperature: ``α = exp(log α)`` learned to keep the policy entropy near a target
  (``target_entropy``; ``None`` ⇒ −|A|, PRIMORL/MOPO use −3).

Updates (one gradient step each, SpinningUp order):

* critic  L_Q = Σ_i E[(Q_i(s,a) − y)²],  y = r + γ(1 − d)(min_j Q̄_j(s',a') − α log π(a'|s')),
  a' ~ π(·|s')
* actor   L_π = E[α log π(ã|s) − min_j Q_j(s,ã)],  ã ~ π(·|s) (reparameterised)
* α       L_α = −E[log α · (log π(ã|s) + H̄)]
* target  Q̄ ← (1 − τ)Q̄ + τQ (one fused ``_foreach_lerp_``)

Batches carry environment-scale actions; the agent maps them to ``[-1, 1]`` internally. ``done``
is 1 only for true terminal states (a time-limit truncation is not a terminal).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privrl.rl.agent import BoxAgent, module_device, obs_batch
from privrl.rl.mlp import (
    ActionScaler,
    SquashedGaussianActor,
    VectorizedQ,
    init_linear_,
    polyak_update,
)

__all__ = ["SAC", "SACConfig", "SACPolicy"]


@dataclass
class SACConfig:
    """SAC hyper-parameters (SpinningUp defaults; PRIMORL's values)."""

    hidden: Sequence[int] = (256, 256)
    lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    batch_size: int = 256
    init_alpha: float = 1.0
    auto_alpha: bool = True
    target_entropy: float | None = None  # None ⇒ −|A|

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["hidden"] = list(self.hidden)
        return d


class SACPolicy:
    """A frozen copy of a SAC actor behind the privrl ``Policy`` protocol.

    ``act(obs, rng)`` returns environment-scale actions ``[n, |A|]``; stochastic policies draw
    their Gaussian noise from ``rng`` (numpy), so rollouts are reproducible from one seed.
    """

    def __init__(self, actor: SquashedGaussianActor, scaler: ActionScaler, deterministic: bool):
        self.actor = actor
        self.scaler = scaler
        self.deterministic = deterministic

    @torch.no_grad()
    def act(self, obs: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        device = module_device(self.actor)
        o, single = obs_batch(obs, device)
        noise = None
        if not self.deterministic:
            if rng is None:
                raise ValueError("a stochastic SAC policy needs a numpy Generator")
            noise = torch.as_tensor(
                rng.standard_normal((o.shape[0], self.actor.act_dim)),
                dtype=torch.float32,
                device=device,
            )
        a, _ = self.actor(o, self.deterministic, with_logprob=False, noise=noise)
        out = self.scaler.to_env_np(a.cpu().numpy().astype(np.float64))
        return out[0] if single else out


class SAC(BoxAgent):
    """Soft Actor-Critic agent: ``act``, ``update`` on a batch, ``state_dict`` round-trip."""

    kind = "sac"
    config_class = SACConfig
    config: SACConfig
    _parts = ("actor", "q", "q_targ", "pi_opt", "q_opt")

    def _build(self, init_gen: torch.Generator) -> None:
        config = self.config
        self.target_entropy = (
            float(-self.act_dim) if config.target_entropy is None else float(config.target_entropy)
        )
        on = self.device
        self.actor = init_linear_(
            SquashedGaussianActor(self.obs_dim, self.act_dim, config.hidden), init_gen
        ).to(on)
        self.q = VectorizedQ(self.obs_dim, self.act_dim, config.hidden, 2, generator=init_gen)
        self.q = self.q.to(on)
        self.q_targ = copy.deepcopy(self.q).requires_grad_(False)
        self.log_alpha = torch.tensor(float(np.log(config.init_alpha)), device=on)
        self.pi_opt = torch.optim.Adam(self.actor.parameters(), lr=config.lr, fused=True)
        self.q_opt = torch.optim.Adam(self.q.parameters(), lr=config.lr, fused=True)
        # Adam on the scalar log α, by hand (a torch optimiser step costs more than the maths).
        self.alpha_adam = {"m": 0.0, "v": 0.0, "t": 0}
        self._q_params = list(self.q.parameters())
        self._q_targ_params = list(self.q_targ.parameters())

    # ------------------------------------------------------------------ acting
    @property
    def alpha(self) -> float:
        return float(self.log_alpha.exp())

    def _act_unit(self, o: torch.Tensor, deterministic: bool) -> torch.Tensor:
        a, _ = self.actor(o, deterministic, with_logprob=False, generator=self.act_gen)
        return a

    def policy(self, deterministic: bool = True) -> SACPolicy:
        """A frozen snapshot of the current actor as a privrl ``Policy``."""
        actor = copy.deepcopy(self.actor).requires_grad_(False)
        return SACPolicy(actor, self.scaler, deterministic)

    # ------------------------------------------------------------------ learning
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One SAC step (critic, actor, α, target) on ``batch``; returns losses and α."""
        alpha = self.log_alpha.exp()
        loss_q, q = self._critic_step(batch, alpha)
        loss_pi, logp = self._actor_step(batch["obs"], alpha)
        polyak_update(self._q_targ_params, self._q_params, self.config.tau)
        self.n_updates += 1
        loss_q_f, loss_pi_f, alpha_f, logp_mean, q_mean = torch.stack(
            [loss_q, loss_pi, alpha, logp.mean(), q.mean()]
        ).tolist()
        # Temperature: dL_α/d log α = −(E[log π] + H̄); one Adam step on the scalar.
        if self.config.auto_alpha:
            self._alpha_step(-(logp_mean + self.target_entropy))
        return {
            "loss_q": loss_q_f,
            "loss_pi": loss_pi_f,
            "alpha": alpha_f,
            "entropy": -logp_mean,
            "q_mean": q_mean,
        }

    def _critic_step(
        self, batch: dict[str, torch.Tensor], alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Bellman backup with the entropy bonus and twin-min target; one Adam step on Q."""
        obs, next_obs = batch["obs"], batch["next_obs"]
        act = self.scaler.to_unit(batch["act"])
        rew, done = batch["rew"].reshape(-1), batch["done"].reshape(-1)
        with torch.no_grad():
            a2, logp2 = self.actor(next_obs, generator=self.update_gen)
            q_targ = self.q_targ(next_obs, a2).min(0).values
            backup = rew + self.config.gamma * (1.0 - done) * (q_targ - alpha * logp2)
        q = self.q(obs, act)
        loss_q = (q - backup).pow(2).mean(1).sum()
        self.q_opt.zero_grad(set_to_none=True)
        loss_q.backward()
        self.q_opt.step()
        return loss_q.detach(), q.detach()

    def _actor_step(
        self, obs: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised actor step; gradients flow through ã into frozen critic weights."""
        pi, logp = self.actor(obs, generator=self.update_gen)
        q_pi = self.q(obs, pi, detach=True).min(0).values
        loss_pi = (alpha * logp - q_pi).mean()
        self.pi_opt.zero_grad(set_to_none=True)
        loss_pi.backward()
        self.pi_opt.step()
        return loss_pi.detach(), logp.detach()

    def _alpha_step(self, grad: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        """``torch.optim.Adam``'s update on the scalar log α (same formula, in floats)."""
        st = self.alpha_adam
        st["t"] += 1
        st["m"] = b1 * st["m"] + (1.0 - b1) * grad
        st["v"] = b2 * st["v"] + (1.0 - b2) * grad * grad
        m_hat = st["m"] / (1.0 - b1 ** st["t"])
        v_hat = st["v"] / (1.0 - b2 ** st["t"])
        self.log_alpha.sub_(self.config.lr * m_hat / (v_hat**0.5 + eps))

    # ------------------------------------------------------------------ persistence
    def _state_refs(self) -> dict[str, Any]:
        return {
            **super()._state_refs(),
            "log_alpha": self.log_alpha.clone(),
            "alpha_adam": dict(self.alpha_adam),
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if d.get("kind", "sac") != "sac" or (d["obs_dim"], d["act_dim"]) != (
            self.obs_dim,
            self.act_dim,
        ):
            raise ValueError("state dict is not from a SAC agent of the same shape")
        super().load_state_dict(d)
        self.log_alpha.copy_(d["log_alpha"])
        self.alpha_adam = dict(d["alpha_adam"])
