"""What the continuous-action agents (SAC, TD3/DDPG) share: the action box, acting on one or
many observations, the random streams, and a state dict that resumes a run exactly.

An agent subclass names its ``kind`` and ``config_class``, builds its networks in ``_build``,
maps a batch of observations to ``[-1, 1]`` actions in ``_act_unit``, and lists in ``_parts``
the attributes (networks, optimisers) whose ``state_dict`` makes up its own.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, ClassVar, Self

import numpy as np
import torch

from privrl.nn.device import to_cpu
from privrl.rl.mlp import ActionScaler

__all__ = ["BoxAgent", "module_device", "obs_batch"]


def obs_batch(
    obs: np.ndarray, device: torch.device | str | None = None
) -> tuple[torch.Tensor, bool]:
    """Observations as a float32 batch ``[n, obs_dim]`` (on ``device``, if given), and whether
    a single one was given."""
    o = torch.as_tensor(np.asarray(obs), dtype=torch.float32, device=device)
    single = o.ndim == 1
    return (o.unsqueeze(0) if single else o), single


def module_device(module: torch.nn.Module) -> torch.device:
    """Where a network's parameters are."""
    return next(module.parameters()).device


class BoxAgent:
    """An off-policy agent acting in the box ``[action_low, action_high]^act_dim``."""

    kind: ClassVar[str]
    config_class: ClassVar[type]
    _parts: ClassVar[tuple[str, ...]]

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        action_low: np.ndarray | Sequence[float],
        action_high: np.ndarray | Sequence[float],
        config: Any = None,
        seed: int = 0,
        *,
        device: torch.device | str = "cpu",
    ) -> None:
        self.config = config if config is not None else self.config_class()
        self.device = torch.device(device)
        self.obs_dim, self.act_dim = int(obs_dim), int(act_dim)
        self.scaler = ActionScaler(
            np.broadcast_to(np.asarray(action_low, dtype=np.float64), (self.act_dim,)),
            np.broadcast_to(np.asarray(action_high, dtype=np.float64), (self.act_dim,)),
        ).to(self.device)
        self._build(torch.Generator().manual_seed(int(seed)))
        # Separate streams: evaluating or acting never shifts the updates' randomness.
        self.update_gen = torch.Generator().manual_seed(int(seed) + 1)
        self.act_gen = torch.Generator().manual_seed(int(seed) + 2)
        self.n_updates = 0

    def _build(self, init_gen: torch.Generator) -> None:
        """Networks (initialised on the CPU from ``init_gen``, then moved to ``self.device``:
        the same weights on every device), targets and optimisers. The random streams stay
        CPU generators; their draws are moved (`privrl.rl.mlp.cpu_randn`)."""
        raise NotImplementedError

    def _act_unit(self, o: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """Actions in ``[-1, 1]^|A|`` for the batch ``o``; random draws use ``act_gen``."""
        raise NotImplementedError

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """Environment-scale actions ``[n, |A|]`` for observations ``[n, obs_dim]`` (a single
        observation gives a single action); exploratory unless ``deterministic``."""
        o, single = obs_batch(obs, self.device)
        a = self._act_unit(o, deterministic).cpu().numpy().astype(np.float64)
        out = self.scaler.to_env_np(a)
        return out[0] if single else out

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """A deep copy (optimiser states included) on the CPU, safe to load into another agent
        on any device."""
        return copy.deepcopy(to_cpu(self._state_refs()))

    def _state_refs(self) -> dict[str, Any]:
        # Everything needed to resume exactly: networks, optimisers, generators, counters.
        return {
            "kind": self.kind,
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "action_low": self.scaler.low.tolist(),
            "action_high": self.scaler.high.tolist(),
            "config": self.config.to_dict(),
            **{name: getattr(self, name).state_dict() for name in self._parts},
            "update_gen": self.update_gen.get_state(),
            "act_gen": self.act_gen.get_state(),
            "n_updates": self.n_updates,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        for name in self._parts:
            getattr(self, name).load_state_dict(d[name])
        self.update_gen.set_state(d["update_gen"])
        self.act_gen.set_state(d["act_gen"])
        self.n_updates = int(d["n_updates"])

    @classmethod
    def from_state_dict(cls, d: dict[str, Any], device: torch.device | str = "cpu") -> Self:
        """Rebuild an agent (same shape and config) from :meth:`state_dict`, on ``device``."""
        config = cls.config_class(**{**d["config"], "hidden": tuple(d["config"]["hidden"])})
        low, high = d["action_low"], d["action_high"]
        agent = cls(d["obs_dim"], d["act_dim"], low, high, config, device=device)
        agent.load_state_dict(d)
        return agent
