"""Small network pieces shared by the off-policy learners (SAC, TD3/DDPG).

* :func:`mlp` — a plain ReLU MLP.
* :class:`VectorizedQ` — ``n`` independent Q-networks evaluated as one batched matmul per layer
  (``torch.baddbmm`` over a leading critic axis), so SAC/TD3's twin critics cost one kernel
  per layer instead of two.
* :class:`SquashedGaussianActor` / :class:`DeterministicActor` — actors in ``[-1, 1]^|A|``;
  :class:`ActionScaler` maps to and from the environment's box.
* :func:`polyak_update` — fused target-network update (``torch._foreach_lerp_``).

Everything is float32. Randomness comes only from an explicit ``torch.Generator`` on the CPU
(:func:`cpu_randn`: drawn there and moved, so a network on any device sees the same draws).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

__all__ = [
    "ActionScaler",
    "DeterministicActor",
    "SquashedGaussianActor",
    "VectorizedQ",
    "cpu_randn",
    "init_linear_",
    "mlp",
    "polyak_update",
]

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SpinningUp's clamp of the actor's log σ
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG2 = math.log(2.0)


def mlp(sizes: Sequence[int], activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """Linear layers of ``sizes`` with ``activation`` between them (none after the last)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


@torch.no_grad()
def init_linear_(module: nn.Module, generator: torch.Generator) -> nn.Module:
    """Re-draw every ``nn.Linear`` in ``module`` with ``nn.Linear``'s default law
    (uniform ±1/√fan_in for weights and biases) from ``generator``, so that network
    initialisation depends on the given seed only, never on torch's global RNG."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            bound = 1.0 / math.sqrt(m.in_features)
            m.weight.uniform_(-bound, bound, generator=generator)
            if m.bias is not None:
                m.bias.uniform_(-bound, bound, generator=generator)
    return module


class VectorizedQ(nn.Module):
    """``n_critics`` Q-networks ``Q_i(s, a)`` with stacked weights ``[n, in, out]``.

    Initialised like ``nn.Linear`` (uniform ±1/√fan_in) per critic, so each critic is an
    independent draw. ``forward`` returns ``[n_critics, batch]``.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int] = (256, 256),
        n_critics: int = 2,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        sizes = [obs_dim + act_dim, *hidden, 1]
        self.n_critics = n_critics
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(fan_in)
            w = torch.empty(n_critics, fan_in, fan_out).uniform_(-bound, bound, generator=generator)
            b = torch.empty(n_critics, 1, fan_out).uniform_(-bound, bound, generator=generator)
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))

    def forward(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        detach: bool = False,
        only: int | None = None,
    ) -> torch.Tensor:
        """Q-values ``[n_critics, batch]`` (``[1, batch]`` for critic ``only``).

        ``detach=True`` stops gradients to the weights (but not to ``act``), which is what
        the actor loss needs.
        """
        x = torch.cat([obs, act], dim=-1)
        n = self.n_critics if only is None else 1
        h = x.unsqueeze(0).expand(n, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            if only is not None:
                w, b = w[only : only + 1], b[only : only + 1]
            if detach:
                w, b = w.detach(), b.detach()
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = torch.relu(h)
        return h.squeeze(-1)


class SquashedGaussianActor(nn.Module):
    """π(a|s) = tanh(μ(s) + σ(s)·ξ), ξ ~ N(0, I), in ``[-1, 1]^|A|`` (SpinningUp's actor)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int] = (256, 256)) -> None:
        super().__init__()
        self.trunk = nn.Sequential(mlp([obs_dim, *hidden]), nn.ReLU())
        self.head = nn.Linear(hidden[-1], 2 * act_dim)
        self.act_dim = act_dim

    def forward(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        with_logprob: bool = True,
        noise: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Action in ``[-1, 1]`` and its log-density (with the tanh correction) or ``None``.

        The Gaussian draw is ``noise`` if given, else ``torch.randn`` from ``generator``.
        """
        mu, log_std = self.head(self.trunk(obs)).chunk(2, dim=-1)
        if deterministic:
            u = mu
            xi = None
        else:
            log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
            xi = noise if noise is not None else cpu_randn(mu.shape, generator, like=mu)
            u = mu + log_std.exp() * xi
        logp = None
        if with_logprob:
            if xi is None:  # deterministic: density of the mode
                log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
                xi = torch.zeros_like(mu)
            logp = (-0.5 * xi.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)
            # log|d tanh(u)/du| = 2(log 2 − u − softplus(−2u)), numerically stable (SpinningUp)
            logp = logp - (2.0 * (_LOG2 - u - nn.functional.softplus(-2.0 * u))).sum(-1)
        return torch.tanh(u), logp


class DeterministicActor(nn.Module):
    """μ(s) = tanh(MLP(s)) in ``[-1, 1]^|A|`` (TD3/DDPG)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int] = (256, 256)) -> None:
        super().__init__()
        self.net = mlp([obs_dim, *hidden, act_dim])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))


class ActionScaler:
    """Affine map between ``[-1, 1]^|A|`` and the environment's box ``[low, high]``."""

    def __init__(self, low: np.ndarray | Sequence[float], high: np.ndarray | Sequence[float]):
        low = np.asarray(low, dtype=np.float64).reshape(-1)
        high = np.asarray(high, dtype=np.float64).reshape(-1)
        if low.shape != high.shape or not np.all(np.isfinite(low) & np.isfinite(high)):
            raise ValueError("action bounds must be finite arrays of the same shape")
        if np.any(high <= low):
            raise ValueError("action bounds need high > low")
        self.low, self.high = low, high
        self.center_np = (high + low) / 2.0
        self.half_np = (high - low) / 2.0
        self.center = torch.as_tensor(self.center_np, dtype=torch.float32)
        self.half = torch.as_tensor(self.half_np, dtype=torch.float32)

    def to(self, device: torch.device | str) -> ActionScaler:
        """Keep the tensor forms on ``device`` (in place), beside the agent's networks."""
        self.center = self.center.to(device)
        self.half = self.half.to(device)
        return self

    def to_env(self, a: torch.Tensor) -> torch.Tensor:
        return self.center + self.half * a

    def to_unit(self, a: torch.Tensor) -> torch.Tensor:
        return (a - self.center) / self.half

    def to_env_np(self, a: np.ndarray) -> np.ndarray:
        """``[-1, 1]`` → box, clipped to the box (guards against float rounding)."""
        return np.clip(self.center_np + self.half_np * a, self.low, self.high)


def cpu_randn(
    shape: Sequence[int], generator: torch.Generator | None, *, like: torch.Tensor
) -> torch.Tensor:
    """N(0, I) of ``shape`` drawn on the CPU from ``generator`` and moved to ``like``'s device
    and dtype: the same draws on every device, and a generator state a checkpoint can hold."""
    draw = torch.randn(tuple(shape), generator=generator, dtype=like.dtype)
    return draw.to(like.device)


@torch.no_grad()
def polyak_update(target: Sequence[torch.Tensor], source: Sequence[torch.Tensor], tau: float):
    """θ_targ ← (1 − τ)·θ_targ + τ·θ, all tensors in one fused call."""
    torch._foreach_lerp_(list(target), list(source), tau)
