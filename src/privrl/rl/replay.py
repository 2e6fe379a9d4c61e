"""Replay buffer and the online training loop for the off-policy agents (SAC, TD3, DDPG).

:class:`ReplayBuffer` keeps transitions in **one** float32 torch tensor ``[capacity, D]``
(columns obs | act | rew | next_obs | done), so a minibatch is a single ``index_select`` and the
agent receives column views: no numpy↔torch copy per update, only one per environment step.
The tensor lives on the buffer's ``device`` (the agent's), so batches are sampled there; the
sampling generator stays on the CPU (its indices are moved) and a state dict is on the CPU.

Mixing two buffers (MOPO's real-data ratio) is :meth:`ReplayBuffer.sample_mixed`: a fraction
``ratio`` of the batch comes from the other buffer, the rest from this one.

:func:`train_online` runs an agent against a ``BatchedControlEnv`` (``n`` synchronised
fixed-horizon environments): uniform random actions for the first ``start_steps``
transitions, then the agent's exploratory actions; ``updates_per_step`` gradient updates per
collected transition (1 by default), done in blocks of ``update_every``; a callback every
``checkpoint_every`` transitions (to save policy checkpoints or evaluate).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from privrl.progress import Progress, no_progress

__all__ = ["OnlineAgent", "OnlineResult", "OnlineTrainingSettings", "ReplayBuffer", "train_online"]


class ReplayBuffer:
    """Ring buffer of transitions ``(obs, act, rew, next_obs, done)`` with seeded sampling."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        capacity: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.obs_dim, self.act_dim, self.capacity = int(obs_dim), int(act_dim), int(capacity)
        o, a = self.obs_dim, self.act_dim
        # Column layout of the one storage tensor.
        self._cols = {
            "obs": slice(0, o),
            "act": slice(o, o + a),
            "rew": slice(o + a, o + a + 1),
            "next_obs": slice(o + a + 1, 2 * o + a + 1),
            "done": slice(2 * o + a + 1, 2 * o + a + 2),
        }
        self.width = 2 * o + a + 2
        self.device = torch.device(device)  # the storage; batches are sampled onto it
        self._data = torch.zeros(self.capacity, self.width, dtype=torch.float32, device=device)
        self.ptr = 0
        self.size = 0
        self.generator = torch.Generator().manual_seed(int(seed))

    def __len__(self) -> int:
        return self.size

    def add_batch(
        self,
        obs: np.ndarray,
        act: np.ndarray,
        rew: np.ndarray,
        next_obs: np.ndarray,
        done: np.ndarray,
    ) -> None:
        """Append ``n`` transitions (rows); the oldest are overwritten once full."""
        n = len(obs)
        rows = np.empty((n, self.width), dtype=np.float32)
        c = self._cols
        rows[:, c["obs"]] = np.asarray(obs).reshape(n, self.obs_dim)
        rows[:, c["act"]] = np.asarray(act).reshape(n, self.act_dim)
        rows[:, c["rew"]] = np.asarray(rew).reshape(n, 1)
        rows[:, c["next_obs"]] = np.asarray(next_obs).reshape(n, self.obs_dim)
        rows[:, c["done"]] = np.asarray(done, dtype=np.float32).reshape(n, 1)
        if n > self.capacity:  # only the newest `capacity` rows survive
            rows = rows[-self.capacity :]
            n = self.capacity
        t = torch.from_numpy(rows).to(self.device)
        first = min(n, self.capacity - self.ptr)
        self._data[self.ptr : self.ptr + first] = t[:first]
        if first < n:
            self._data[: n - first] = t[first:]
        self.ptr = (self.ptr + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def _split(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        c = self._cols
        return {
            "obs": rows[:, c["obs"]],
            "act": rows[:, c["act"]],
            "rew": rows[:, c["rew"]].reshape(-1),
            "next_obs": rows[:, c["next_obs"]],
            "done": rows[:, c["done"]].reshape(-1),
        }

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn uniformly with replacement (float32 tensors;
        ``rew`` and ``done`` are ``[batch]``)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = torch.randint(0, self.size, (batch_size,), generator=self.generator)
        return self._split(self._data.index_select(0, idx.to(self.device)))

    def sample_mixed(
        self, other: ReplayBuffer, batch_size: int, ratio: float
    ) -> dict[str, torch.Tensor]:
        """A batch with ``round(ratio · batch_size)`` rows from ``other`` and the rest from this
        buffer (e.g. MOPO: this = model rollouts, other = real data, ratio = 0.05)."""
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"ratio must be in [0, 1], got {ratio}")
        n_other = round(ratio * batch_size)
        parts = []
        if batch_size - n_other > 0:
            idx = torch.randint(0, self.size, (batch_size - n_other,), generator=self.generator)
            parts.append(self._data.index_select(0, idx.to(self.device)))
        if n_other > 0:
            idx = torch.randint(0, other.size, (n_other,), generator=other.generator)
            parts.append(other._data.index_select(0, idx.to(other.device)).to(self.device))
        return self._split(torch.cat(parts) if len(parts) > 1 else parts[0])

    def arrays(self) -> dict[str, np.ndarray]:
        """The stored transitions in insertion order (oldest first), as numpy copies."""
        if self.size < self.capacity:
            rows = self._data[: self.size]
        else:
            rows = torch.cat([self._data[self.ptr :], self._data[: self.ptr]])
        return {k: v.cpu().numpy().copy() for k, v in self._split(rows).items()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "capacity": self.capacity,
            "data": self._data[: self.size].cpu().clone(),  # device-free
            "ptr": self.ptr,
            "size": self.size,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if (d["obs_dim"], d["act_dim"], d["capacity"]) != (
            self.obs_dim,
            self.act_dim,
            self.capacity,
        ):
            raise ValueError("replay state has a different shape or capacity")
        self._data.zero_()
        self._data[: d["size"]] = d["data"]
        self.ptr, self.size = int(d["ptr"]), int(d["size"])
        self.generator.set_state(d["generator"])


class OnlineAgent(Protocol):
    """What :func:`train_online` needs from an agent (SAC, TD3 and DDPG all qualify)."""

    config: Any

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray: ...

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]: ...


@dataclass
class OnlineResult:
    """Training history: mean return of each finished batch of episodes, at its step."""

    steps: int = 0
    updates: int = 0
    episode_steps: list[int] = field(default_factory=list)
    episode_returns: list[float] = field(default_factory=list)
    wall_time: float = 0.0
    last_stats: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class OnlineTrainingSettings:
    """The settings of :func:`train_online`.

    Attributes:
        total_steps: transitions to collect (summed over the ``env.num_envs`` copies).
        start_steps: transitions with uniform random actions before the agent acts.
        update_after: stored transitions before the first update (default
            ``max(1000, batch_size)``).
        update_every: updates run in blocks once this many are due.
        updates_per_step: updates per collected transition (update-to-data ratio).
        checkpoint_every: transitions between calls of the callback (None: only at the end).
        buffer_capacity: the replay buffer's capacity (when the caller gives no buffer).
        description: the progress label.
        snapshot_every: transitions between snapshots (default ``checkpoint_every``).
        snapshot_tag: a snapshot resumes only a run of the same tag.
    """

    total_steps: int
    start_steps: int = 5000
    update_after: int | None = None
    update_every: int = 50
    updates_per_step: float = 1.0
    checkpoint_every: int | None = None
    buffer_capacity: int = 1_000_000
    description: str = "training"
    snapshot_every: int | None = None
    snapshot_tag: str = ""


def train_online(
    settings: OnlineTrainingSettings,
    agent: OnlineAgent,
    env: Any,
    *,
    seed: int = 0,
    buffer: ReplayBuffer | None = None,
    callback: Callable[[int, OnlineAgent, OnlineResult], None] | None = None,
    progress: Progress | None = None,
    snapshot_path: str | Path | None = None,
    extra_state: dict[str, Any] | None = None,
) -> OnlineResult:
    """Train ``agent`` online on a batched fixed-horizon environment for ``total_steps``
    transitions (summed over the ``env.num_envs`` parallel copies), with the settings of
    `OnlineTrainingSettings`.

    * Actions: uniform in the box for the first ``start_steps`` transitions (drawn from
      ``seed``), then ``agent.act(obs)`` (exploratory).
    * Updates: ``updates_per_step`` per collected transition (update-to-data ratio, 1 by
      default), run in blocks once ``update_every`` are due and ``update_after`` transitions
      are stored (default ``max(1000, batch_size)``).
    * Episodes: all copies reset together after ``env.horizon`` steps; a copy that terminates
      early stops contributing transitions until that reset (``done = 1`` on its last one).
    * ``callback(steps, agent, result)`` every ``checkpoint_every`` transitions and at the end.
    * Resumable: with ``snapshot_path``, the whole loop state (agent, buffer, generators,
      history and the caller's ``extra_state`` dict) is saved atomically at the first episode
      boundary after every ``snapshot_every`` transitions (default ``checkpoint_every``), and
      a run started with an existing snapshot of the same ``snapshot_tag`` continues from it.
      Snapshots are taken between episodes, where the environment's state is a function of
      the loop's generator alone, so a resumed run equals an uninterrupted one. The caller
      deletes the snapshot when it no longer needs it.
    """
    s = settings
    total_steps, start_steps, update_after = s.total_steps, s.start_steps, s.update_after
    update_every, updates_per_step = s.update_every, s.updates_per_step
    checkpoint_every, snapshot_tag = s.checkpoint_every, s.snapshot_tag
    rng = np.random.default_rng(seed)
    n = int(env.num_envs)
    horizon = int(env.horizon)
    act_dim = int(env.task.act_dim)
    low = np.broadcast_to(np.asarray(env.task.action_low, dtype=np.float64), (act_dim,))
    high = np.broadcast_to(np.asarray(env.task.action_high, dtype=np.float64), (act_dim,))
    batch_size = int(agent.config.batch_size)
    if update_after is None:
        update_after = max(1000, batch_size)
    if buffer is None:
        buffer = ReplayBuffer(
            env.task.obs_dim, act_dim, s.buffer_capacity, seed=int(rng.integers(2**31))
        )
    result = OnlineResult()
    due = 0.0
    next_ckpt = checkpoint_every if checkpoint_every else None
    snap_path = Path(snapshot_path) if snapshot_path is not None else None
    snap_every = s.snapshot_every or checkpoint_every or max(total_steps // 10, 1)
    next_snap = snap_every
    elapsed_before = 0.0
    if snap_path is not None and snap_path.is_file():
        snap = torch.load(snap_path, map_location="cpu", weights_only=True)
        if snap.get("tag") == snapshot_tag:
            agent.load_state_dict(snap["agent"])  # type: ignore[attr-defined]
            buffer.load_state_dict(snap["buffer"])
            rng.bit_generator.state = snap["rng"]
            result = OnlineResult(**snap["result"])
            due, next_ckpt, next_snap = snap["due"], snap["next_ckpt"], snap["next_snap"]
            elapsed_before = result.wall_time
            if extra_state is not None:
                extra_state.clear()
                extra_state.update(snap["extra_state"])
    start = time.perf_counter() - elapsed_before

    obs = env.reset(seed=int(rng.integers(2**31)))
    alive = np.ones(n, dtype=bool)
    ep_ret = np.zeros(n)
    t_ep = 0
    report = progress or no_progress
    while result.steps < total_steps:
        if result.steps < start_steps:
            act = low + rng.random((n, act_dim)) * (high - low)
        else:
            act = agent.act(obs)
        next_obs, rew, term = env.step(act)
        term = np.asarray(term, dtype=bool)
        t_ep += 1
        keep = alive
        n_new = int(keep.sum())
        if n_new == n:
            buffer.add_batch(obs, act, rew, next_obs, term)
        elif n_new > 0:
            buffer.add_batch(obs[keep], act[keep], rew[keep], next_obs[keep], term[keep])
        ep_ret += np.where(alive, rew, 0.0)
        alive = alive & ~term
        result.steps += n_new
        if len(buffer) >= update_after:
            due += n_new * updates_per_step
        if due >= update_every:
            k = int(due)
            for _ in range(k):
                result.last_stats = agent.update(buffer.sample(batch_size))
            result.updates += k
            due -= k
        obs = next_obs
        boundary = t_ep >= horizon or not alive.any()
        if boundary:
            result.episode_steps.append(result.steps)
            result.episode_returns.append(float(ep_ret.mean()))
        if next_ckpt is not None and result.steps >= next_ckpt:
            result.wall_time = time.perf_counter() - start
            if callback is not None:
                callback(result.steps, agent, result)
            while next_ckpt <= result.steps:
                next_ckpt += checkpoint_every  # type: ignore[operator]
        if boundary:
            if snap_path is not None and result.steps >= next_snap:
                while next_snap <= result.steps:
                    next_snap += snap_every
                result.wall_time = time.perf_counter() - start
                _save_snapshot(
                    snap_path,
                    {
                        "tag": snapshot_tag,
                        "agent": agent.state_dict(),  # type: ignore[attr-defined]
                        "buffer": buffer.state_dict(),
                        "rng": rng.bit_generator.state,
                        "result": dataclasses.asdict(result),
                        "due": due,
                        "next_ckpt": next_ckpt,
                        "next_snap": next_snap,
                        "extra_state": dict(extra_state or {}),
                    },
                )
            obs = env.reset(seed=int(rng.integers(2**31)))
            alive[:] = True
            ep_ret[:] = 0.0
            t_ep = 0
        report(s.description, result.steps, total_steps)
    result.wall_time = time.perf_counter() - start
    if callback is not None and (checkpoint_every is None or result.steps % checkpoint_every):
        callback(result.steps, agent, result)
    return result


def _save_snapshot(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
