"""Shared pieces of the discrete-action offline learners (CQL, BCQ): functional MLPs, the
transition batch, the learner base class (optimizer, target network, greedy acting,
checkpoints), transition tables, and the evaluation protocol of Sharma et al.

Networks are *functional*: parameters live in a flat ``dict[str, Tensor]`` (float32) and every
layer is applied through :func:`privrl.nn.per_example.linear`, so a private trainer can take
per-example gradients of the learner's loss (vmap or hand-batched) and clip them jointly over
all parameters. A learner exposes ``per_example_loss(params, batch) -> [B]`` (no reduction);
its ordinary step ``update(batch)`` minimises the mean of the same losses — the non-private
baseline is the same code with the mechanism switched off.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from privrl.nn.device import to_cpu
from privrl.nn.per_example import linear

__all__ = [
    "DiscreteLearner",
    "ObsTransform",
    "TransitionBatch",
    "TransitionTable",
    "eval_schedule",
    "evaluate_greedy",
    "init_mlp",
    "mlp",
    "normalised_score",
]


# ---------------------------------------------------------------------------------------------
# functional MLPs
# ---------------------------------------------------------------------------------------------


def init_mlp(
    prefix: str,
    sizes: Sequence[int],
    generator: torch.Generator,
    dtype: torch.dtype = torch.float32,
) -> dict[str, torch.Tensor]:
    """Parameters ``{prefix}{i}.weight [out, in]`` / ``.bias [out]`` of an MLP with layer sizes
    ``sizes`` (input first), initialised like ``torch.nn.Linear``: U(−1/√in, 1/√in)."""
    params: dict[str, torch.Tensor] = {}
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        bound = 1.0 / math.sqrt(n_in)
        w = (torch.rand((n_out, n_in), generator=generator, dtype=dtype) * 2 - 1) * bound
        b = (torch.rand((n_out,), generator=generator, dtype=dtype) * 2 - 1) * bound
        params[f"{prefix}{i}.weight"] = w
        params[f"{prefix}{i}.bias"] = b
    return params


def mlp(
    params: Mapping[str, torch.Tensor],
    prefix: str,
    n_layers: int,
    x: torch.Tensor,
    *,
    final_relu: bool = False,
) -> torch.Tensor:
    """ReLU MLP over ``params[prefix{i}.*]``, i < n_layers (linear output unless final_relu)."""
    for i in range(n_layers):
        x = linear(x, params[f"{prefix}{i}.weight"], params[f"{prefix}{i}.bias"])
        if i < n_layers - 1 or final_relu:
            x = torch.relu(x)
    return x


def huber(x: torch.Tensor) -> torch.Tensor:
    """Elementwise Huber loss with threshold 1 (``smooth_l1_loss``, no reduction)."""
    a = x.abs()
    return torch.where(a < 1.0, 0.5 * x * x, a - 0.5)


# ---------------------------------------------------------------------------------------------
# observations and batches
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObsTransform:
    """Public, fixed observation preprocessing: optional log10, then (x − loc) / scale.

    Must be derived from public information only (an environment's known bounds, statistics of
    a public simulator such as ``privrl.envs.hiv.log_state_statistics``), never from the
    private data: it is not accounted.
    """

    log10: bool = False
    loc: tuple[float, ...] | None = None
    scale: tuple[float, ...] | None = None
    source: str = "identity"

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float64)
        if self.log10:
            x = np.log10(np.maximum(x, 1e-12))
        if self.loc is not None:
            x = x - np.asarray(self.loc)
        if self.scale is not None:
            x = x / np.asarray(self.scale)
        return x.astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {"log10": self.log10, "loc": self.loc, "scale": self.scale, "source": self.source}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> ObsTransform:
        if not d:
            return cls()
        loc, scale = d.get("loc"), d.get("scale")
        return cls(
            log10=bool(d.get("log10", False)),
            loc=None if loc is None else tuple(float(v) for v in loc),
            scale=None if scale is None else tuple(float(v) for v in scale),
            source=str(d.get("source", "")),
        )


class TransitionBatch(NamedTuple):
    """A batch of transitions as tensors (row i = one transition).

    ``terminated`` is 1.0 where s' is terminal (no bootstrapping); truncated transitions and
    transitions cut at collection end bootstrap from s'.
    """

    obs: torch.Tensor  # [B, obs_dim] float32
    actions: torch.Tensor  # [B] int64
    rewards: torch.Tensor  # [B] float32
    next_obs: torch.Tensor  # [B, obs_dim] float32
    terminated: torch.Tensor  # [B] float32 in {0, 1}


class TransitionTable:
    """All transitions of a dataset as tensors, gathered by index (one copy, no loops).

    ``unit`` holds each transition's unit (expert) id. Observations pass through ``transform``
    once, here.
    """

    def __init__(
        self,
        dataset: Any,
        transform: ObsTransform | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        t = dataset.transitions()
        tf = transform or ObsTransform()
        obs = tf(np.asarray(t.observations).reshape(dataset.n_transitions, -1))
        nxt = tf(np.asarray(t.next_observations).reshape(dataset.n_transitions, -1))
        self.device = torch.device(device)
        on = self.device
        self.obs = torch.from_numpy(obs).to(on)
        self.next_obs = torch.from_numpy(nxt).to(on)
        self.actions = torch.from_numpy(np.array(t.actions, dtype=np.int64).reshape(-1)).to(on)
        self.rewards = torch.from_numpy(np.array(t.rewards, dtype=np.float32)).to(on)
        self.terminated = torch.from_numpy(np.array(t.terminated, dtype=np.float32)).to(on)
        self.unit = np.repeat(dataset.episode_unit_ids, dataset.episode_lengths)

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def gather(self, idx: np.ndarray | torch.Tensor) -> TransitionBatch:
        i = torch.as_tensor(np.asarray(idx, dtype=np.int64)).to(self.device)
        return TransitionBatch(
            self.obs[i], self.actions[i], self.rewards[i], self.next_obs[i], self.terminated[i]
        )

    def sample(self, batch_size: int, rng: np.random.Generator) -> TransitionBatch:
        """``batch_size`` transitions uniformly with replacement (ordinary minibatches)."""
        if len(self) == 0:
            raise ValueError("cannot sample from an empty transition table")
        return self.gather(rng.integers(0, len(self), size=int(batch_size)))


# ---------------------------------------------------------------------------------------------
# learner base
# ---------------------------------------------------------------------------------------------


class DiscreteLearner(ABC):
    """Base of the discrete-action offline learners (functional parameters, Adam, target net).

    Subclasses define ``_init_params``, ``per_example_loss``, ``_greedy`` and the names of the
    parameters that have a target copy (``_target_keys``).
    """

    algorithm = "base"

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        *,
        hidden: Sequence[int] = (256, 256),
        gamma: float = 0.99,
        lr: float = 3e-4,
        tau: float | None = None,
        target_update_interval: int = 1,
        seed: int = 0,
        obs_transform: ObsTransform | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if obs_dim < 1 or n_actions < 2:
            raise ValueError(f"need obs_dim >= 1 and n_actions >= 2, got {obs_dim}, {n_actions}")
        if not hidden or any(int(h) < 1 for h in hidden):
            raise ValueError(f"hidden must be a non-empty list of positive sizes, got {hidden}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if not (lr > 0 and math.isfinite(lr)):
            raise ValueError(f"lr must be > 0, got {lr}")
        if tau is not None and not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
        if target_update_interval < 1:
            raise ValueError(f"target_update_interval must be >= 1, got {target_update_interval}")
        self.obs_dim, self.n_actions = int(obs_dim), int(n_actions)
        self.hidden = tuple(int(h) for h in hidden)
        self.gamma, self.lr = float(gamma), float(lr)
        self.tau, self.target_update_interval = tau, int(target_update_interval)
        self.seed = int(seed)
        self.obs_transform = obs_transform or ObsTransform()
        self._n_layers = len(self.hidden) + 1
        self.device = torch.device(device)
        # Initialised on the CPU from the seed, then moved: the same weights on every device.
        gen = torch.Generator().manual_seed(self.seed)
        self.params: dict[str, torch.Tensor] = {
            k: v.to(self.device).requires_grad_(True) for k, v in self._init_params(gen).items()
        }
        self.target_params = {k: self.params[k].detach().clone() for k in self._target_keys()}
        self.optimizer = torch.optim.Adam(list(self.params.values()), lr=self.lr)
        self.steps = 0

    # -- to define ------------------------------------------------------------------------

    @abstractmethod
    def _init_params(self, gen: torch.Generator) -> dict[str, torch.Tensor]: ...

    @abstractmethod
    def _target_keys(self) -> list[str]: ...

    @abstractmethod
    def per_example_loss(
        self, params: Mapping[str, torch.Tensor], batch: TransitionBatch
    ) -> torch.Tensor:
        """One loss per transition ``[B]`` (no reduction); targets are constants."""

    def _q(self, params: Mapping[str, torch.Tensor], obs: torch.Tensor) -> torch.Tensor:
        """The Q head (parameters ``q{i}.*``): ``Q(s, ·)`` ``[B, n_actions]``."""
        return mlp(params, "q", self._n_layers, obs)

    @abstractmethod
    def _greedy(self, obs: torch.Tensor) -> torch.Tensor: ...

    def config(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "obs_dim": self.obs_dim,
            "n_actions": self.n_actions,
            "hidden": list(self.hidden),
            "gamma": self.gamma,
            "lr": self.lr,
            "tau": self.tau,
            "target_update_interval": self.target_update_interval,
            "seed": self.seed,
            "obs_transform": self.obs_transform.to_dict(),
        }

    # -- parameters -------------------------------------------------------------------------

    def parameters(self) -> list[torch.Tensor]:
        return list(self.params.values())

    @property
    def n_parameters(self) -> int:
        return int(sum(p.numel() for p in self.params.values()))

    # -- training ---------------------------------------------------------------------------

    def loss(self, batch: TransitionBatch) -> torch.Tensor:
        """Mean of the per-example losses (the ordinary minibatch objective)."""
        return self.per_example_loss(self.params, batch).mean()

    def update(self, batch: TransitionBatch) -> float:
        """One ordinary (non-private) gradient step on the mean loss; returns the loss."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(batch)
        loss.backward()
        self.optimizer.step()
        self._after_step()
        return float(loss.detach())

    def apply_gradients(self, grads: Mapping[str, torch.Tensor]) -> None:
        """One optimizer step with externally computed gradients (e.g. privatised ones)."""
        for name, p in self.params.items():
            p.grad = grads[name].detach().to(p.dtype).reshape(p.shape).clone()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._after_step()

    def _after_step(self) -> None:
        self.steps += 1
        with torch.no_grad():
            if self.tau is not None:  # Polyak averaging every step
                for k, t in self.target_params.items():
                    t.lerp_(self.params[k].detach(), self.tau)
            elif self.steps % self.target_update_interval == 0:  # hard copy every N steps
                for k, t in self.target_params.items():
                    t.copy_(self.params[k].detach())

    # -- acting -----------------------------------------------------------------------------

    def _obs_tensor(self, obs: np.ndarray) -> torch.Tensor:
        x = np.asarray(obs)
        single = x.ndim == 1
        x = self.obs_transform(x.reshape(1, -1) if single else x.reshape(x.shape[0], -1))
        return torch.from_numpy(x).to(self.device)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Q(s, ·) for a batch of raw observations ``[n, obs_dim]`` → ``[n, n_actions]``."""
        with torch.no_grad():
            q = self._q(self.params, self._obs_tensor(obs))
            return q.cpu().numpy().astype(np.float64)

    def act(self, obs: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        """Greedy actions ``[n]`` (the ``Policy`` protocol; ``rng`` is unused)."""
        with torch.no_grad():
            return self._greedy(self._obs_tensor(obs)).cpu().numpy().astype(np.int64)

    # -- checkpoints ------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The learner's state on the CPU (a checkpoint loads on any device)."""
        return {
            "config": self.config(),
            "params": {k: v.detach().cpu().clone() for k, v in self.params.items()},
            "target_params": {k: v.cpu().clone() for k, v in self.target_params.items()},
            "optimizer": to_cpu(self.optimizer.state_dict()),
            "steps": self.steps,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        params = state["params"]
        if set(params) != set(self.params):
            raise ValueError(
                f"state has parameters {sorted(params)}, this learner {sorted(self.params)}"
            )
        with torch.no_grad():
            for k, p in self.params.items():
                if tuple(params[k].shape) != tuple(p.shape):
                    raise ValueError(
                        f"parameter {k!r}: shape {tuple(params[k].shape)} != {p.shape}"
                    )
                p.copy_(params[k].to(self.device))
            for k, t in self.target_params.items():
                t.copy_(state["target_params"][k].to(self.device))
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state.get("steps", 0))
        tf = state.get("config", {}).get("obs_transform")
        if tf is not None:
            self.obs_transform = ObsTransform.from_dict(tf)

    def save(self, path: Any) -> None:
        torch.save(self.state_dict(), path)


# ---------------------------------------------------------------------------------------------
# evaluation (Sharma et al.: mean return of 10 evaluations over the last 10,000 steps)
# ---------------------------------------------------------------------------------------------


def eval_schedule(total_steps: int, n_evals: int = 10, window: int = 10_000) -> np.ndarray:
    """Steps (1-based, after that many updates) at which to evaluate: ``n_evals`` points evenly
    spaced over the last ``window`` steps, the last one at ``total_steps``; a run shorter than
    the window spreads them over the whole run (duplicates removed)."""
    if total_steps < 1:
        return np.zeros(0, dtype=np.int64)
    w = min(int(window), int(total_steps))
    k = max(1, int(n_evals))
    pts = total_steps - w + np.ceil(np.arange(1, k + 1) * w / k).astype(np.int64)
    return np.unique(np.clip(pts, 1, total_steps)).astype(np.int64)


def evaluate_greedy(
    policy: Any,
    make_env: Callable[[], Any],
    *,
    episodes: int,
    seed: int,
    max_steps: int | None = None,
) -> np.ndarray:
    """Undiscounted returns of ``episodes`` episodes of ``policy.act`` (greedy), stepped in
    lockstep with one batched policy call per time step. ``max_steps`` caps each episode (on
    top of the env's own time limit, e.g. CartPole evaluated for 1000 steps: make the env with
    ``max_episode_steps=1000``)."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    envs = [make_env() for _ in range(episodes)]
    seeds = np.random.SeedSequence(seed).generate_state(episodes, dtype=np.uint32)
    obs = np.stack([np.asarray(e.reset(seed=int(s))[0]) for e, s in zip(envs, seeds, strict=True)])
    returns = np.zeros(episodes)
    active = np.ones(episodes, dtype=bool)
    t = 0
    try:
        while active.any() and (max_steps is None or t < max_steps):
            idx = np.flatnonzero(active)
            actions = policy.act(obs[idx])
            for j, a in zip(idx, actions, strict=True):
                o, r, term, trunc, _ = envs[j].step(int(a))
                returns[j] += float(r)
                obs[j] = o
                if term or trunc:
                    active[j] = False
            t += 1
    finally:
        for e in envs:
            e.close()
    return returns


def normalised_score(ret: float, random_return: float, nonprivate_return: float) -> float:
    """(R − R_random) / (R_nonprivate − R_random): 0 = random policy, 1 = non-private."""
    gap = float(nonprivate_return) - float(random_return)
    if gap == 0:
        raise ValueError("reference returns are equal: the normalised score is undefined")
    return (float(ret) - float(random_return)) / gap
