"""TD3 (Fujimoto et al. 2018) and DDPG (Lillicrap et al. 2016) as one agent with flags.

* Deterministic actor μ(s) = tanh(MLP(s)) scaled to the action box; target actor and critics.
* Critic target y = r + γ(1 − d)·Q̄(s', clip(μ̄(s') + ε, −1, 1)), ε = clip(N(0, σ̃²), −c, c).
* TD3: twin critics with ``min`` in the target, target smoothing ε, actor and targets
  updated every ``policy_delay`` critic steps.
* DDPG (``TD3Config.ddpg()``): one critic, no smoothing, no delay — the "our DDPG" variant of the
  TD3 paper (same network sizes and Adam), with Gaussian exploration noise rather than
  Ornstein–Uhlenbeck (the TD3 paper found no benefit from OU noise).

Exploration: ``act(obs)`` adds Gaussian noise N(0, (expl_noise)²) in ``[-1, 1]`` action units,
drawn from the agent's own generator, then clips to the box.
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
    DeterministicActor,
    VectorizedQ,
    cpu_randn,
    init_linear_,
    polyak_update,
)

__all__ = ["TD3", "DeterministicPolicy", "TD3Config"]


@dataclass
class TD3Config:
    """TD3 hyper-parameters (paper defaults, 2×256 networks); see :meth:`ddpg`."""

    hidden: Sequence[int] = (256, 256)
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    batch_size: int = 256
    twin: bool = True
    policy_delay: int = 2
    target_noise: float = 0.2  # σ̃ (0 disables target policy smoothing)
    target_noise_clip: float = 0.5  # c
    expl_noise: float = 0.1  # exploration σ in [-1, 1] units

    @classmethod
    def ddpg(cls, **overrides: Any) -> TD3Config:
        """DDPG: single critic, no target smoothing, actor updated every step."""
        base = {"twin": False, "policy_delay": 1, "target_noise": 0.0}
        return cls(**{**base, **overrides})

    @property
    def algorithm(self) -> str:
        is_ddpg = not self.twin and self.policy_delay == 1 and self.target_noise == 0.0
        return "ddpg" if is_ddpg else "td3"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["hidden"] = list(self.hidden)
        return d


class DeterministicPolicy:
    """A frozen deterministic actor behind the privrl ``Policy`` protocol, with optional
    Gaussian action noise ``noise`` (in ``[-1, 1]`` units) drawn from the ``rng`` given."""

    def __init__(self, actor: DeterministicActor, scaler: ActionScaler, noise: float = 0.0):
        self.actor = actor
        self.scaler = scaler
        self.noise = float(noise)

    @torch.no_grad()
    def act(self, obs: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        o, single = obs_batch(obs, module_device(self.actor))
        a = self.actor(o).cpu().numpy().astype(np.float64)
        if self.noise > 0.0:
            if rng is None:
                raise ValueError("a noisy policy needs a numpy Generator")
            a = np.clip(a + self.noise * rng.standard_normal(a.shape), -1.0, 1.0)
        out = self.scaler.to_env_np(a)
        return out[0] if single else out


class TD3(BoxAgent):
    """TD3 / DDPG agent with the same ``act`` / ``update`` / ``state_dict`` API as SAC."""

    kind = "td3"
    config_class = TD3Config
    config: TD3Config
    _parts = ("actor", "actor_targ", "q", "q_targ", "pi_opt", "q_opt")

    def _build(self, init_gen: torch.Generator) -> None:
        config = self.config
        self.actor = init_linear_(
            DeterministicActor(self.obs_dim, self.act_dim, config.hidden), init_gen
        ).to(self.device)
        n_critics = 2 if config.twin else 1
        q = VectorizedQ(self.obs_dim, self.act_dim, config.hidden, n_critics, init_gen)
        self.q = q.to(self.device)
        self.actor_targ = copy.deepcopy(self.actor).requires_grad_(False)
        self.q_targ = copy.deepcopy(self.q).requires_grad_(False)
        self.pi_opt = torch.optim.Adam(self.actor.parameters(), lr=config.actor_lr, fused=True)
        self.q_opt = torch.optim.Adam(self.q.parameters(), lr=config.critic_lr, fused=True)
        self._src = list(self.q.parameters()) + list(self.actor.parameters())
        self._targ = list(self.q_targ.parameters()) + list(self.actor_targ.parameters())
        self._last_loss_pi = float("nan")

    @property
    def algorithm(self) -> str:
        return self.config.algorithm

    def _act_unit(self, o: torch.Tensor, deterministic: bool) -> torch.Tensor:
        a = self.actor(o)
        if not deterministic and self.config.expl_noise > 0:
            noise = cpu_randn(a.shape, self.act_gen, like=a) * self.config.expl_noise
            a = (a + noise).clamp(-1.0, 1.0)
        return a

    def policy(self, deterministic: bool = True, noise: float = 0.0) -> DeterministicPolicy:
        """A frozen snapshot of the actor (``noise`` > 0 adds Gaussian action noise)."""
        actor = copy.deepcopy(self.actor).requires_grad_(False)
        return DeterministicPolicy(actor, self.scaler, 0.0 if deterministic else noise)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One critic step; every ``policy_delay`` steps also an actor and target step."""
        cfg = self.config
        obs, next_obs = batch["obs"], batch["next_obs"]
        act = self.scaler.to_unit(batch["act"])
        rew, done = batch["rew"].reshape(-1), batch["done"].reshape(-1)

        with torch.no_grad():
            a2 = self.actor_targ(next_obs)
            if cfg.target_noise > 0:  # target policy smoothing (TD3 §5.3)
                eps = cpu_randn(a2.shape, self.update_gen, like=a2) * cfg.target_noise
                a2 = (a2 + eps.clamp(-cfg.target_noise_clip, cfg.target_noise_clip)).clamp(-1, 1)
            q_targ = self.q_targ(next_obs, a2).min(0).values
            y = rew + cfg.gamma * (1.0 - done) * q_targ
        q = self.q(obs, act)
        loss_q = (q - y).pow(2).mean(1).sum()
        self.q_opt.zero_grad(set_to_none=True)
        loss_q.backward()
        self.q_opt.step()
        self.n_updates += 1

        if self.n_updates % cfg.policy_delay == 0:
            # Actor: maximise Q_1(s, μ(s)) (TD3 uses the first critic only).
            q_pi = self.q(obs, self.actor(obs), detach=True, only=0)[0]
            loss_pi = -q_pi.mean()
            self.pi_opt.zero_grad(set_to_none=True)
            loss_pi.backward()
            self.pi_opt.step()
            polyak_update(self._targ, self._src, cfg.tau)
            self._last_loss_pi = float(loss_pi.detach())
        loss_q_f, q_mean = torch.stack([loss_q.detach(), q.detach().mean()]).tolist()
        return {"loss_q": loss_q_f, "loss_pi": self._last_loss_pi, "q_mean": q_mean}

    def _state_refs(self) -> dict[str, Any]:
        return {**super()._state_refs(), "last_loss_pi": self._last_loss_pi}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        shape = (d.get("obs_dim"), d.get("act_dim"), d.get("config", {}).get("twin"))
        if d.get("kind") != "td3" or shape != (self.obs_dim, self.act_dim, self.config.twin):
            raise ValueError(
                "state dict is not from a TD3/DDPG agent of the same shape (dims, twin critics)"
            )
        super().load_state_dict(d)
        self._last_loss_pi = float(d["last_loss_pi"])
