"""Policy optimisation inside the pessimistic model M̃ (PRIMORL Algorithm 4; MOPO Algorithm 2).

SAC learns from short branched rollouts of the penalised model (r̃ = r̂ − λu, see
:mod:`privrl.primorl.pessimism`):

    for epoch = 1..E:
        every ``rollout_every`` SAC steps (default: once per epoch):
            draw ``rollout_batch_size`` start states from the start-state sampler
            roll them ``rollout_length`` steps through M̃ with the current stochastic policy
            (all rollouts stepped together; never terminal; truncated at the task horizon)
            → model buffer (keeps the last ``retain_epochs`` epochs of rollouts)
        ``steps_per_epoch`` SAC updates on batches of model data (MOPO: a fraction
        ``real_ratio`` of each batch from the real data; PRIMORL: none)
        evaluate the deterministic policy in the real simulator (``eval_episodes`` at once)

**Privacy structure.** This stage receives the released model, the task's public description
(dimensions, action box, horizon, simulator) and a start-state sampler — never the dataset.
Start-state modes (docs/primorl.md, "Start-state modes"):

* ``initial`` (PRIMORL default): states from the environment's initial distribution (public
  simulator knowledge), extended with states reached in earlier model rollouts (chained,
  truncated rollouts: a reached state keeps its time index and rollouts stop at the horizon).
* ``public-split``: states of data declared public (PRIMORL: a public dataset or episodes
  declared public in the metadata; MOPO, which is not private: its holdout).
* ``dataset`` (MOPO's original): states of the training data. Only the non-private MOPO can
  build this sampler (it needs the data's states); ``require_public=True`` refuses it and
  refuses real data, which is what PRIMORL passes.

**Resumable.** With a checkpoint path, the full state (SAC incl. optimisers and α, the model
buffer, the start-state pool, every generator, the curve so far, the dynamics model) is saved
atomically every ``checkpoint_every`` epochs and at the end; a later call with the same
configuration continues from it and ends with the same result as an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from privrl.envs.control import ControlTask
from privrl.primorl.pessimism import ModelStep, PenalizedModel
from privrl.primorl.tasks import simulator
from privrl.rl.replay import ReplayBuffer
from privrl.rl.sac import SAC, SACConfig

__all__ = [
    "START_MODES",
    "DatasetStartStates",
    "InitialStartStates",
    "ModelDiverged",
    "PolicyStageConfig",
    "PolicyStageResult",
    "PublicSplitStartStates",
    "Rollouts",
    "StartStateSampler",
    "evaluate_policy",
    "load_checkpoint",
    "make_start_states",
    "model_rollout",
    "named_seeds",
    "run_policy_stage",
    "save_atomic",
]

START_MODES: tuple[str, ...] = ("initial", "public-split", "dataset")
CHECKPOINT_FORMAT = "privrl.primorl.policy_stage/1"
# A policy whose parameters became non-finite while training in the (pessimistic) model, e.g.
# on a release the noise drowned: a result of the run (no policy), stated as such.
POLICY_DIVERGED = "the policy diverged in the model"


class ModelDiverged(RuntimeError):
    """The policy stage cannot go on in this model: every rollout diverged, or the policy
    trained in it became non-finite (`POLICY_DIVERGED`). A result of the run, typically of a
    release the noise drowned, not a bug: the command line says so in one line."""


# --------------------------------------------------------------------------------------------
# start states
# --------------------------------------------------------------------------------------------


class StartStateSampler(Protocol):
    """Where model rollouts begin. ``public`` is False when the states come from private data."""

    mode: str
    public: bool

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` start states ``[n, obs_dim]`` and their time indices ``[n]``."""
        ...

    def extend(self, obs: np.ndarray, steps: np.ndarray) -> None:
        """Offer states reached in a model rollout (and their time indices)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def describe(self) -> dict[str, Any]: ...


class InitialStartStates:
    """``initial`` mode: a fraction ``init_fraction`` of each batch from the environment's
    initial-state distribution, the rest uniformly from states reached in earlier model
    rollouts (a ring pool of ``capacity`` states with their time indices; states at or past
    the horizon are never pooled, so chained rollouts are truncated at the time limit)."""

    mode = "initial"
    public = True

    def __init__(
        self,
        sample_initial: Callable[[int, np.random.Generator], np.ndarray],
        obs_dim: int,
        horizon: int,
        capacity: int,
        init_fraction: float = 0.2,
    ) -> None:
        if not 0.0 < init_fraction <= 1.0:
            raise ValueError(f"init_fraction must be in (0, 1], got {init_fraction}")
        if capacity < 1 or horizon < 1:
            raise ValueError("capacity and horizon must be >= 1")
        self.sample_initial = sample_initial
        self.obs_dim, self.horizon = int(obs_dim), int(horizon)
        self.capacity, self.init_fraction = int(capacity), float(init_fraction)
        self._obs = np.zeros((self.capacity, self.obs_dim), dtype=np.float32)
        self._steps = np.zeros(self.capacity, dtype=np.int64)
        self.ptr = self.size = 0

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        n_init = n if self.size == 0 else round(self.init_fraction * n)
        init = np.asarray(self.sample_initial(n_init, rng), dtype=np.float64)
        if n_init == n:
            return init, np.zeros(n, dtype=np.int64)
        idx = rng.integers(0, self.size, size=n - n_init)
        obs = np.concatenate([init, self._obs[idx].astype(np.float64)])
        steps = np.concatenate([np.zeros(n_init, dtype=np.int64), self._steps[idx]])
        return obs, steps

    def extend(self, obs: np.ndarray, steps: np.ndarray) -> None:
        keep = np.asarray(steps) < self.horizon
        obs, steps = np.asarray(obs)[keep], np.asarray(steps)[keep]
        n = obs.shape[0]
        if n == 0:
            return
        if n > self.capacity:
            obs, steps, n = obs[-self.capacity :], steps[-self.capacity :], self.capacity
        first = min(n, self.capacity - self.ptr)
        self._obs[self.ptr : self.ptr + first] = obs[:first]
        self._steps[self.ptr : self.ptr + first] = steps[:first]
        if first < n:
            self._obs[: n - first] = obs[first:]
            self._steps[: n - first] = steps[first:]
        self.ptr = (self.ptr + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def state_dict(self) -> dict[str, Any]:
        return {
            "obs": torch.from_numpy(self._obs[: self.size].copy()),
            "steps": torch.from_numpy(self._steps[: self.size].copy()),
            "ptr": self.ptr,
            "size": self.size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        size = int(state["size"])
        if size > self.capacity:
            raise ValueError("start-state pool in the checkpoint exceeds this pool's capacity")
        self._obs[:size] = state["obs"].numpy()
        self._steps[:size] = state["steps"].numpy()
        self.ptr, self.size = int(state["ptr"]), size

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "public": self.public,
            "source": "environment initial-state distribution (public simulator) + states "
            "reached in earlier model rollouts (chained, truncated at the horizon)",
            "init_fraction": self.init_fraction,
            "pool_capacity": self.capacity,
        }


class _FixedStartStates:
    """Uniform draws from a fixed array of states (with their time indices in the episode)."""

    mode = ""
    public = True
    source = ""

    def __init__(self, observations: np.ndarray, steps: np.ndarray | None = None) -> None:
        obs = np.asarray(observations, dtype=np.float32)
        if obs.ndim != 2 or obs.shape[0] == 0:
            raise ValueError(f"{self.mode} start states: need a non-empty [n, obs_dim] array")
        self._obs = obs
        self._steps = (
            np.zeros(obs.shape[0], dtype=np.int64)
            if steps is None
            else np.asarray(steps, dtype=np.int64).reshape(-1)
        )
        if self._steps.shape[0] != obs.shape[0]:
            raise ValueError(f"{self.mode} start states: one time index per state expected")

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        idx = rng.integers(0, self._obs.shape[0], size=n)
        return self._obs[idx].astype(np.float64), self._steps[idx]

    def extend(self, obs: np.ndarray, steps: np.ndarray) -> None:
        """Fixed pools do not grow."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore."""

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "public": self.public,
            "source": self.source,
            "states": int(self._obs.shape[0]),
        }


class PublicSplitStartStates(_FixedStartStates):
    """``public-split`` mode: states of the data declared public (MOPO: its holdout)."""

    mode = "public-split"
    public = True
    source = "states of the public split (data declared public)"


class DatasetStartStates(_FixedStartStates):
    """``dataset`` mode (MOPO's original): states of the private training data. Not public."""

    mode = "dataset"
    public = False
    source = "states of the training data (private; non-private MOPO only)"


def make_start_states(
    mode: str,
    task: ControlTask,
    *,
    pool_capacity: int,
    init_fraction: float = 0.2,
    public_states: tuple[np.ndarray, np.ndarray] | None = None,
    dataset_states: tuple[np.ndarray, np.ndarray] | None = None,
) -> StartStateSampler:
    """The sampler for ``mode``; ``*_states`` are ``(observations, time indices)``.

    ``dataset`` cannot be selected without ``dataset_states`` (which only the non-private
    MOPO pipeline has), and ``public-split`` needs ``public_states``.
    """
    if mode == "initial":
        sim = simulator(task, 1)
        return InitialStartStates(
            sim.sample_initial_observations,
            task.obs_dim,
            task.horizon,
            capacity=pool_capacity,
            init_fraction=init_fraction,
        )
    if mode == "public-split":
        if public_states is None:
            raise ValueError("start mode 'public-split' needs the public split's states")
        return PublicSplitStartStates(*public_states)
    if mode == "dataset":
        if dataset_states is None:
            raise ValueError(
                "start mode 'dataset' needs the training data's states, which a private "
                "pipeline never has; use 'initial' or 'public-split'"
            )
        return DatasetStartStates(*dataset_states)
    raise ValueError(f"unknown start mode {mode!r}; choose one of {', '.join(START_MODES)}")


# --------------------------------------------------------------------------------------------
# configuration and result
# --------------------------------------------------------------------------------------------


@dataclass
class PolicyStageConfig:
    """Settings of the SAC-in-the-model stage (defaults: MOPO's and PRIMORL's)."""

    epochs: int = 100
    steps_per_epoch: int = 1000
    rollout_length: int = 5
    rollout_batch_size: int = 10_000
    rollout_every: int = 1000  # SAC steps between rollout batches (start-pool refresh)
    retain_epochs: int = 5  # model buffer keeps this many epochs of rollouts
    real_ratio: float = 0.0  # MOPO 0.05; PRIMORL 0 (no real data)
    eval_episodes: int = 10
    final_epochs: int = 10  # final return = mean over this many last epochs (paper protocol)
    checkpoint_every: int = 1
    # hold model rollouts inside the simulator's public observation box and reward range
    bounded_rollouts: bool = False
    sac: SACConfig = field(default_factory=lambda: SACConfig(target_entropy=-3.0))

    def __post_init__(self) -> None:
        for name in (
            "epochs",
            "steps_per_epoch",
            "rollout_length",
            "rollout_batch_size",
            "rollout_every",
            "retain_epochs",
            "eval_episodes",
            "final_epochs",
            "checkpoint_every",
        ):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not (math.isfinite(self.real_ratio) and 0.0 <= self.real_ratio <= 1.0):
            raise ValueError(f"real_ratio must be in [0, 1], got {self.real_ratio}")

    @classmethod
    def of(cls, run: Any, *, sac: SACConfig, **fixed: Any) -> PolicyStageConfig:
        """The stage settings of a MOPO or PRIMORL run config: every field ``run`` names alike
        (``epochs``, ``rollout_length``, ...), then ``sac`` and the ``fixed`` values."""
        names = [f.name for f in dataclasses.fields(cls) if f.name != "sac"]
        given = {name: getattr(run, name) for name in names if hasattr(run, name)}
        return cls(**{**given, **fixed}, sac=sac)

    @property
    def model_buffer_capacity(self) -> int:
        """Transitions of ``retain_epochs`` epochs of rollouts."""
        per_epoch = math.ceil(self.steps_per_epoch / self.rollout_every)
        return self.rollout_batch_size * self.rollout_length * per_epoch * self.retain_epochs

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "sac"}
        d["sac"] = self.sac.to_dict()
        return d

    def fingerprint(self) -> dict[str, Any]:
        """What a resumed run must share with the checkpoint: everything except the epoch
        count and the checkpoint period (a finished run can be extended)."""
        d = self.to_dict()
        d.pop("epochs")
        d.pop("checkpoint_every")
        if not d["bounded_rollouts"]:
            d.pop("bounded_rollouts")  # off: the fingerprint of checkpoints without it
        return d


@dataclass
class PolicyStageResult:
    """The trained agent, the per-epoch curve and the final figures."""

    agent: SAC
    curve: list[dict[str, Any]]
    eval_returns: np.ndarray  # [epochs, eval_episodes]
    return_mean: float  # mean over the last ``final_epochs`` epochs' evaluations
    return_std: float  # std of those epochs' episode returns
    start_mode: str
    seconds: float  # wall time summed over all (resumed) calls
    resumed_from: int  # epochs already done when this call started (0 = fresh)


# --------------------------------------------------------------------------------------------
# rollouts and evaluation
# --------------------------------------------------------------------------------------------


@dataclass
class Rollouts:
    """Transitions of one batch of branched model rollouts (step-major order)."""

    obs: np.ndarray
    act: np.ndarray
    rew: np.ndarray  # r̃
    next_obs: np.ndarray
    model_reward: np.ndarray  # r̂
    uncertainty: np.ndarray  # u
    reached_obs: np.ndarray  # next states still inside the horizon (for chaining)
    reached_steps: np.ndarray
    dropped: int  # rollouts stopped because the model produced a non-finite value

    @property
    def done(self) -> np.ndarray:
        """Model rollouts are never terminal: done = 0 (the tasks only truncate)."""
        return np.zeros(self.rew.shape[0], dtype=np.float32)


@dataclass(frozen=True)
class RolloutBounds:
    """What the simulator can produce, as public facts: its observation box and per-step reward
    range. Model rollouts are held inside them (a state or reward outside cannot occur in the
    real task, so the model's value there is extrapolation)."""

    obs_low: np.ndarray
    obs_high: np.ndarray
    reward_range: tuple[float, float] | None

    @classmethod
    def of_task(cls, task: ControlTask) -> RolloutBounds:
        import gymnasium as gym

        from privrl.envs.control import register_envs

        register_envs()
        env = gym.make(task.env_id)
        space = env.observation_space
        env.close()
        return cls(
            np.asarray(space.low, dtype=np.float64),
            np.asarray(space.high, dtype=np.float64),
            task.reward_range,
        )

    def hold(self, step: ModelStep) -> ModelStep:
        """The step with s' clipped to the box and r̂ to the reward range (r̃ moved with r̂)."""
        next_obs = np.clip(step.next_obs, self.obs_low, self.obs_high)
        if self.reward_range is None:
            return ModelStep(next_obs, step.reward, step.model_reward, step.uncertainty)
        r_hat = np.clip(step.model_reward, *self.reward_range)
        return ModelStep(
            next_obs, step.reward + (r_hat - step.model_reward), r_hat, step.uncertainty
        )


def model_rollout(
    pmodel: PenalizedModel,
    act: Callable[[np.ndarray], np.ndarray],
    start_obs: np.ndarray,
    start_steps: np.ndarray,
    length: int,
    horizon: int,
    *,
    generator: torch.Generator,
    bounds: RolloutBounds | None = None,
) -> Rollouts:
    """Roll all start states ``length`` steps through M̃ together with the policy ``act``.

    A rollout stops early when its time index reaches ``horizon`` (time-limit truncation) or
    the model returns a non-finite value; no transition is terminal. With ``bounds``, every
    model step is held inside the simulator's public observation box and reward range.
    """
    obs = np.asarray(start_obs, dtype=np.float64)
    steps = np.asarray(start_steps, dtype=np.int64)
    live = steps < horizon
    obs, steps = obs[live], steps[live]
    parts: dict[str, list[np.ndarray]] = {
        k: [] for k in ("obs", "act", "rew", "next_obs", "r_hat", "u", "reached", "reached_t")
    }
    dropped = 0
    for _ in range(length):
        if obs.shape[0] == 0:
            break
        a = act(obs)
        st = pmodel.step(obs, a, generator)
        if bounds is not None:
            st = bounds.hold(st)
        ok = np.isfinite(st.next_obs).all(axis=1) & np.isfinite(st.reward)
        dropped += int((~ok).sum())
        parts["obs"].append(obs[ok])
        parts["act"].append(a[ok])
        parts["rew"].append(st.reward[ok])
        parts["next_obs"].append(st.next_obs[ok])
        parts["r_hat"].append(st.model_reward[ok])
        parts["u"].append(st.uncertainty[ok])
        steps = steps + 1
        cont = ok & (steps < horizon)
        obs, steps = st.next_obs[cont], steps[cont]
        parts["reached"].append(obs)
        parts["reached_t"].append(steps)
    d = pmodel.obs_dim

    def cat(key: str, width: int | None = None, dtype: Any = np.float64) -> np.ndarray:
        if parts[key]:
            return np.concatenate(parts[key])
        return np.zeros((0,) if width is None else (0, width), dtype=dtype)

    return Rollouts(
        obs=cat("obs", d),
        act=cat("act", pmodel.act_dim),
        rew=cat("rew"),
        next_obs=cat("next_obs", d),
        model_reward=cat("r_hat"),
        uncertainty=cat("u"),
        reached_obs=cat("reached", d),
        reached_steps=cat("reached_t", dtype=np.int64),
        dropped=dropped,
    )


def check_finite_policy(actor: torch.nn.Module, epoch: int) -> None:
    """Refuse to go on with a policy whose parameters are no longer finite (`POLICY_DIVERGED`),
    before its NaN actions reach the simulator."""
    if not all(bool(torch.isfinite(p).all()) for p in actor.parameters()):
        raise ModelDiverged(
            f"{POLICY_DIVERGED}: the actor's parameters are not finite after SAC epoch {epoch} "
            "(the model's transitions drove it there; a release drowned by the noise does this)"
        )


def evaluate_policy(act: Callable[[np.ndarray], np.ndarray], env: Any, seed: int) -> np.ndarray:
    """Undiscounted returns ``[num_envs]`` of one batched episode per copy of ``env`` (reset
    with ``seed``) until the horizon; a copy that terminates stops accumulating."""
    obs = env.reset(seed=int(seed))
    returns = np.zeros(env.num_envs)
    alive = np.ones(env.num_envs, dtype=bool)
    for _ in range(int(env.horizon)):
        obs, reward, terminated = env.step(act(obs))
        returns += np.where(alive, reward, 0.0)
        alive &= ~np.asarray(terminated, dtype=bool)
        if not alive.any():
            break
    return returns


# --------------------------------------------------------------------------------------------
# the stage
# --------------------------------------------------------------------------------------------


def _model_digest(model: Any) -> str:
    """SHA-256 of the dynamics model's tensors (a resumed run must use the same model)."""
    h = hashlib.sha256()
    state = model.state_dict() if hasattr(model, "state_dict") else {}

    def feed(prefix: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            h.update(prefix.encode())
            h.update(value.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(value, np.ndarray):
            h.update(prefix.encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, dict):
            for k in sorted(value, key=str):
                feed(f"{prefix}/{k}", value[k])
        elif isinstance(value, list | tuple):
            for i, v in enumerate(value):
                feed(f"{prefix}/{i}", v)
        else:
            h.update(f"{prefix}={value!r}".encode())

    feed("", state)
    return h.hexdigest()


def named_seeds(seed: int, names: tuple[str, ...]) -> dict[str, int]:
    """One integer seed per name, from independent children of ``SeedSequence(seed)``."""
    children = np.random.SeedSequence(int(seed)).spawn(len(names))
    return {n: int(c.generate_state(1, np.uint32)[0]) for n, c in zip(names, children, strict=True)}


def save_atomic(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file, then rename: a crash never leaves half a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _seeds(seed: int) -> dict[str, int]:
    return named_seeds(seed, ("sac", "starts", "model", "eval", "model_buffer"))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a policy-stage checkpoint written by :func:`run_policy_stage`."""
    ckpt = torch.load(Path(path), map_location="cpu", weights_only=False)
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a policy-stage checkpoint")
    return ckpt


def _final(eval_returns: np.ndarray, k: int) -> tuple[float, float]:
    last = eval_returns[-k:]
    return float(last.mean()), float(last.std())


def run_policy_stage(
    pmodel: PenalizedModel,
    starts: StartStateSampler,
    task: ControlTask,
    config: PolicyStageConfig,
    *,
    seed: int,
    real_buffer: ReplayBuffer | None = None,
    require_public: bool = False,
    checkpoint: str | Path | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    device: torch.device | str = "cpu",
) -> PolicyStageResult:
    """Train SAC in the pessimistic model and evaluate it in the real simulator.

    Inputs are the released model (``pmodel``), the task's public description, a start-state
    sampler and, for MOPO only, a buffer of real transitions mixed in at ``real_ratio``.
    ``require_public=True`` (PRIMORL) refuses real data and non-public start states.
    ``checkpoint``: file to resume from (if it exists; same configuration required) and to
    save to every ``config.checkpoint_every`` epochs and at the end. ``progress`` receives each
    epoch's record (with ``epochs`` = the total); an exception it raises interrupts the run.
    ``device``: where SAC and the model buffer live (batches are sampled there; the model
    runs on its own device, its rollouts handed over as arrays). The checkpoint is
    device-free: it resumes on any device.
    """
    t_start = time.perf_counter()
    if config.real_ratio > 0 and real_buffer is None:
        raise ValueError("real_ratio > 0 needs a real-data buffer (MOPO); use 0 for PRIMORL")
    if require_public:
        if real_buffer is not None or config.real_ratio > 0:
            raise ValueError("a private policy stage receives no real data (real_ratio must be 0)")
        if not starts.public:
            raise ValueError(
                f"start mode {starts.mode!r} reads private data; a private policy stage needs "
                "'initial' or 'public-split'"
            )
    if real_buffer is not None and len(real_buffer) == 0:
        raise ValueError("the real-data buffer is empty")
    if (pmodel.obs_dim, pmodel.act_dim) != (task.obs_dim, task.act_dim):
        raise ValueError(
            f"model dimensions (obs {pmodel.obs_dim}, act {pmodel.act_dim}) do not match task "
            f"{task.name!r} (obs {task.obs_dim}, act {task.act_dim})"
        )

    seeds = _seeds(seed)
    agent = SAC(
        task.obs_dim,
        task.act_dim,
        np.full(task.act_dim, task.action_low),
        np.full(task.act_dim, task.action_high),
        config.sac,
        seed=seeds["sac"],
        device=device,
    )
    model_buffer = ReplayBuffer(
        task.obs_dim,
        task.act_dim,
        config.model_buffer_capacity,
        seed=seeds["model_buffer"],
        device=device,
    )
    rng = np.random.default_rng(seeds["starts"])
    model_gen = torch.Generator().manual_seed(seeds["model"])
    eval_env = simulator(task, config.eval_episodes, seed=seeds["eval"])
    use_real = real_buffer is not None and config.real_ratio > 0
    bounds = RolloutBounds.of_task(task) if config.bounded_rollouts else None
    fingerprint = {
        "config": config.fingerprint(),
        "seed": int(seed),
        "task": task.name,
        "pessimism": pmodel.describe(),
        "starts": starts.describe(),
        "model_digest": _model_digest(pmodel.model),
        "real_data": None if real_buffer is None else len(real_buffer),
    }

    curve: list[dict[str, Any]] = []
    returns: list[np.ndarray] = []
    done_epochs, seconds_before = 0, 0.0
    ckpt_path = None if checkpoint is None else Path(checkpoint)
    if ckpt_path is not None and ckpt_path.exists():
        ckpt = load_checkpoint(ckpt_path)
        if ckpt["fingerprint"] != fingerprint:
            diff = sorted(
                k for k in fingerprint if ckpt["fingerprint"].get(k) != fingerprint.get(k)
            )
            raise ValueError(
                f"checkpoint {ckpt_path} belongs to a different run (differs in: "
                f"{', '.join(diff)}); use a new output directory or delete the checkpoint"
            )
        agent.load_state_dict(ckpt["sac"])
        model_buffer.load_state_dict(ckpt["model_buffer"])
        starts.load_state_dict(ckpt["starts"])
        rng.bit_generator.state = ckpt["rng"]
        model_gen.set_state(ckpt["model_gen"])
        if real_buffer is not None and ckpt["real_generator"] is not None:
            real_buffer.generator.set_state(ckpt["real_generator"])
        if int(ckpt["epoch"]) > config.epochs:
            raise ValueError(
                f"checkpoint {ckpt_path} already has {ckpt['epoch']} epochs, more than the "
                f"{config.epochs} asked for; ask for at least {ckpt['epoch']} or use a new "
                "output directory"
            )
        curve = list(ckpt["curve"])
        returns = [np.asarray(r) for r in ckpt["returns"]]
        done_epochs, seconds_before = int(ckpt["epoch"]), float(ckpt["seconds"])

    def save(epoch: int) -> None:
        if ckpt_path is None:
            return
        save_atomic(
            {
                "format": CHECKPOINT_FORMAT,
                "fingerprint": fingerprint,
                "epoch": epoch,
                "sac": agent.state_dict(),
                "model_buffer": model_buffer.state_dict(),
                "starts": starts.state_dict(),
                "rng": rng.bit_generator.state,
                "model_gen": model_gen.get_state(),
                "real_generator": None
                if real_buffer is None
                else real_buffer.generator.get_state(),
                "curve": curve,
                "returns": [r.tolist() for r in returns],
                "seconds": seconds_before + time.perf_counter() - t_start,
                "dynamics_model": pmodel.model.state_dict()
                if hasattr(pmodel.model, "state_dict")
                else None,
            },
            ckpt_path,
        )

    def rollout_policy(obs: np.ndarray) -> np.ndarray:
        return agent.act(obs, deterministic=False)

    def eval_policy(obs: np.ndarray) -> np.ndarray:
        return agent.act(obs, deterministic=True)

    bs = int(config.sac.batch_size)
    resumed_from = done_epochs
    for epoch in range(done_epochs + 1, config.epochs + 1):
        t0 = time.perf_counter()
        stats_sum: dict[str, float] = {}
        roll_stats = {"rollout_transitions": 0, "dropped": 0}
        r_hat_sum = u_sum = r_sum = 0.0
        for step in range(config.steps_per_epoch):
            if step % config.rollout_every == 0:
                obs0, t0_idx = starts.sample(config.rollout_batch_size, rng)
                ro = model_rollout(
                    pmodel,
                    rollout_policy,
                    obs0,
                    t0_idx,
                    config.rollout_length,
                    task.horizon,
                    generator=model_gen,
                    bounds=bounds,
                )
                if ro.rew.shape[0]:
                    model_buffer.add_batch(ro.obs, ro.act, ro.rew, ro.next_obs, ro.done)
                starts.extend(ro.reached_obs, ro.reached_steps)
                roll_stats["rollout_transitions"] += int(ro.rew.shape[0])
                roll_stats["dropped"] += ro.dropped
                r_hat_sum += float(ro.model_reward.sum())
                u_sum += float(ro.uncertainty.sum())
                r_sum += float(ro.rew.sum())
            if len(model_buffer) == 0:
                raise ModelDiverged("no model transitions: every rollout diverged")
            if use_real:
                assert real_buffer is not None
                batch = model_buffer.sample_mixed(real_buffer, bs, config.real_ratio)
            else:
                batch = model_buffer.sample(bs)
            for k, v in agent.update(batch).items():
                stats_sum[k] = stats_sum.get(k, 0.0) + v
        train_seconds = time.perf_counter() - t0
        check_finite_policy(agent.actor, epoch)
        ep_returns = evaluate_policy(eval_policy, eval_env, seed=seeds["eval"] + epoch)
        returns.append(ep_returns)
        n_roll = max(roll_stats["rollout_transitions"], 1)
        record: dict[str, Any] = {
            "epoch": epoch,
            "sac_steps": epoch * config.steps_per_epoch,
            "return_mean": float(ep_returns.mean()),
            "return_std": float(ep_returns.std()),
            "model_reward_mean": r_hat_sum / n_roll,
            "penalty_mean": u_sum / n_roll,
            "penalized_reward_mean": r_sum / n_roll,
            **roll_stats,
            "model_buffer": len(model_buffer),
            **{k: v / config.steps_per_epoch for k, v in stats_sum.items()},
            "start_mode": starts.mode,
            "train_seconds": train_seconds,
            "seconds": time.perf_counter() - t0,
        }
        curve.append(record)
        if epoch % config.checkpoint_every == 0 or epoch == config.epochs:
            save(epoch)
        if progress is not None:
            progress({**record, "epochs": config.epochs})

    eval_returns = np.stack(returns) if returns else np.zeros((0, config.eval_episodes))
    mean, std = _final(eval_returns, config.final_epochs) if returns else (math.nan, math.nan)
    return PolicyStageResult(
        agent=agent,
        curve=curve,
        eval_returns=eval_returns,
        return_mean=mean,
        return_std=std,
        start_mode=starts.mode,
        seconds=seconds_before + time.perf_counter() - t_start,
        resumed_from=resumed_from,
    )
