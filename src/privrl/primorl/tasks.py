"""The control task a PRIMORL or MOPO run learns: its public facts and its simulator.

A task is a `privrl.envs.control.ControlTask` (a small frozen dataclass: Gymnasium id,
observation and action dimensions, horizon, action box, per-step reward range, reward scale).
It is given as

- a preset name (``pendulum``, ``balance``, ``swingup``, ``halfcheetah``) or one of their ids
  (``privrl/Pendulum-v0``, ``Pendulum-v1``, ...): the tuned presets of the papers apply;
- any Gymnasium id with Box observation and action spaces (``MountainCarContinuous-v0``,
  ``InvertedPendulum-v5``, ...): the dimensions come from the simulator's spaces; the action
  box, the horizon and the per-step reward range from the settings (``action_bounds``,
  ``horizon``, ``reward_range``: `TaskFacts`), else the dataset's declared metadata (its
  action space, ``horizon``, ``extra["reward_range"]``), else the simulator (its action space,
  its time limit; no reward range: unbounded). All of these are public facts, never read from
  the episodes; generic defaults replace the presets. Refused: a non-Box (e.g. Discrete)
  space, an action box without finite bounds that nothing declares, no horizon at all;
- a `ControlTask` you build yourself (its ``env_id`` names the simulator that evaluates the
  policy and samples initial states);
- nothing: the dataset's recorded env id.

The four presets run on the vectorised simulators of `privrl.envs.batched`; any other task on
`GymSimulator`, copies of its Gymnasium env stepped side by side.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from privrl.config import ConfigError
from privrl.data.dataset import TrajectoryDataset
from privrl.envs.control import (
    CONTROL_TASKS,
    ControlTask,
    register_envs,
    reward_map,
    task_for_env_id,
    with_reward_transform,
)

__all__ = [
    "ControlTask",
    "GymSimulator",
    "TaskFacts",
    "gym_task",
    "in_reward_scale",
    "is_preset",
    "resolve_task",
    "simulator",
    "task_name",
]

TaskLike = str | ControlTask | None


@dataclass(frozen=True)
class TaskFacts:
    """The public facts of a task without a preset that a run declares (None: not declared;
    the dataset's metadata or the simulator gives it). Each is named by its config field."""

    horizon: int | None = None
    action_bounds: tuple[float, float] | None = None
    reward_range: tuple[float, float] | None = None

    def given(self) -> dict[str, Any]:
        """The declared facts, by field."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def is_preset(task: ControlTask) -> bool:
    """Whether `task` is one of the four tasks with tuned presets (and a batched simulator)."""
    return task.name in CONTROL_TASKS


def task_name(task: TaskLike) -> str | None:
    """The name the presets are keyed by, without building a simulator: a preset's name, or
    the Gymnasium id of any other task (None: not known before the dataset is seen)."""
    if task is None:
        return None
    if isinstance(task, ControlTask):
        return task.name
    if task in CONTROL_TASKS:
        return task
    try:
        return task_for_env_id(task).name
    except ValueError:
        return task


def gym_task(
    env_id: str, metadata: Any = None, *, horizon: int | None = None, facts: TaskFacts | None = None
) -> ControlTask:
    """The `ControlTask` of a Gymnasium id with Box spaces: the dimensions from the simulator's
    spaces; the action box, horizon and reward range from `facts` (declared settings), else the
    dataset's declared metadata (action space, ``horizon``, ``extra["reward_range"]``), else
    the simulator (action space, time limit; no reward range). ``horizon`` is `facts`'
    horizon, kept as a keyword. ValueError for an id that cannot be made or a space that is not
    a 1-D Box; `ConfigError` naming the field (``horizon``, ``action_bounds``) for a fact
    nothing public gives."""
    import gymnasium as gym
    from gymnasium import spaces

    facts = facts or TaskFacts()
    if horizon is not None:
        facts = dataclasses.replace(facts, horizon=horizon)
    register_envs()
    try:
        env = gym.make(env_id)
    except Exception as exc:  # gymnasium raises several error types for an unknown id
        raise ValueError(f"cannot make the Gymnasium env {env_id!r}: {exc}") from None
    try:
        obs_space, act_space = env.observation_space, env.action_space
        limit = env.spec.max_episode_steps if env.spec is not None else None
    finally:
        env.close()
    for what, space in (("observation", obs_space), ("action", act_space)):
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise ValueError(
                f"{env_id} has a {type(space).__name__} {what} space; PRIMORL and MOPO need "
                "continuous control (1-D Box observation and action spaces)"
            )
    low, high = _action_box(env_id, act_space, metadata, facts)
    steps = facts.horizon or getattr(metadata, "horizon", None) or limit
    if not steps:
        raise ConfigError(
            "horizon",
            f"is required: {env_id} has no time limit and the dataset's metadata declares no "
            "horizon; set horizon H (the episode length the policy is evaluated on)",
        )
    extra = getattr(metadata, "extra", None) or {}
    bounds = facts.reward_range or extra.get("reward_range")
    reward_range = None if bounds is None else (float(bounds[0]), float(bounds[1]))
    return ControlTask(
        name=env_id,
        env_id=env_id,
        obs_dim=int(obs_space.shape[0]),
        act_dim=int(act_space.shape[0]),
        horizon=int(steps),
        action_low=low,
        action_high=high,
        reward_range=reward_range,
        reward_transform="none",
    )


def _action_box(
    env_id: str, act_space: Any, metadata: Any, facts: TaskFacts
) -> tuple[float, float]:
    """(low, high) of the action box, one for every dimension: declared (`facts`), else the
    dataset's declared action space (a Box of the simulator's shape), else the simulator's."""
    from gymnasium import spaces

    if facts.action_bounds is not None:
        return float(facts.action_bounds[0]), float(facts.action_bounds[1])
    declared = getattr(metadata, "action_space", None)
    box = act_space
    if isinstance(declared, spaces.Box) and declared.shape == act_space.shape:
        box = declared
    low, high = np.asarray(box.low, float), np.asarray(box.high, float)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ConfigError(
            "action_bounds",
            f"is required: {env_id}'s action box is unbounded and nothing declares bounds; "
            "set action_bounds LOW,HIGH (SAC squashes its actions into them)",
        )
    if np.ptp(low) > 0 or np.ptp(high) > 0:
        raise ConfigError(
            "action_bounds",
            f"is required: {env_id}'s action bounds differ between dimensions; set "
            "action_bounds LOW,HIGH for all of them (or give a ControlTask)",
        )
    return float(low[0]), float(high[0])


def _known(env_id: str, metadata: Any, facts: TaskFacts) -> ControlTask:
    try:
        task = task_for_env_id(env_id)
    except ValueError:
        return gym_task(env_id, metadata, facts=facts)
    _check_facts(task, facts)
    return task


def _check_facts(task: ControlTask, facts: TaskFacts) -> None:
    """Declared facts of a task privrl declares itself must agree with its own."""
    own = {
        "horizon": task.horizon,
        "action_bounds": (task.action_low, task.action_high),
        "reward_range": task.reward_range,
    }
    for key, value in facts.given().items():
        mine = own[key]
        if mine is None or tuple(np.ravel(value)) != tuple(np.ravel(mine)):
            raise ConfigError(
                key,
                f"{value}: privrl declares {task.env_id}'s {key.replace('_', ' ')} as {mine}; "
                "drop the setting (it is for tasks without a preset)",
            )


def resolve_task(
    task: TaskLike,
    metadata: Any,
    transform: str | None = None,
    facts: TaskFacts | None = None,
) -> tuple[ControlTask, ControlTask]:
    """(the dataset's task, the task to run): `task` as given, else the metadata's env id,
    and the same task in the reward scale `transform` (None: the dataset's own). `facts`: the
    declared facts of a task without a preset (`gym_task`). Only the public metadata is read.
    ConfigError naming the field: ``task``, or ``data`` when the dataset names no usable task,
    ``reward_transform``, or the fact nothing public gives (``horizon``, ``action_bounds``)."""
    env_id = getattr(metadata, "env_id", None)
    facts = facts or TaskFacts()
    if isinstance(task, ControlTask):
        source = task
    else:
        key, name = ("task", task) if task is not None else ("data", env_id)
        if not name:
            raise ConfigError(
                "data", "records no env id; give the task (a Gymnasium id or a ControlTask)"
            )
        try:
            if name in CONTROL_TASKS:
                source = CONTROL_TASKS[name]
                _check_facts(source, facts)
            else:
                source = _known(name, metadata, facts)
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(key, f"{name}: {exc}") from None
        if task is not None and env_id and env_id != source.env_id and is_preset(source):
            try:  # the dataset's own id of the same task keeps its reward scale
                recorded = task_for_env_id(env_id)
            except ValueError:
                recorded = None
            if recorded is not None and recorded.name == source.name:
                source = recorded
    if not is_preset(source):
        if transform not in (None, "none"):
            raise ConfigError(
                "reward_transform", f"{transform}: {source.env_id} has no privrl reward scale"
            )
        return source, source
    try:
        return source, with_reward_transform(source, transform)
    except ValueError as exc:
        raise ConfigError("reward_transform", f"{transform}: {exc}") from None


def in_reward_scale(
    dataset: TrajectoryDataset, source: ControlTask, target: ControlTask
) -> TrajectoryDataset:
    """`dataset` (recorded on `source`) with its rewards in `target`'s scale: the public affine
    map r' = a + b·r of `privrl.envs.control.reward_map` applied to every reward and to the
    metadata's reference returns (returns of `horizon`-step episodes: R' = H·a + b·R; the
    control tasks never terminate), the env id set to `target`'s. The map is fixed by the
    simulator's declared cost, so it reads nothing about the data."""
    if source == target:
        return dataset
    a, b = reward_map(source, target)
    meta = dataset.metadata
    extra = dict(meta.extra)
    reference = extra.get("reference_returns")
    if isinstance(reference, dict):
        h = target.horizon
        extra["reference_returns"] = {k: h * a + b * float(v) for k, v in reference.items()}
    extra["reward_transform"] = {"from": source.env_id, "to": target.env_id, "a": a, "b": b}
    rewards = a + b * np.asarray(dataset.rewards, dtype=np.float64)
    return TrajectoryDataset(
        observations=dataset.observations,
        actions=dataset.actions,
        rewards=rewards.astype(np.asarray(dataset.rewards).dtype),
        terminated=dataset.terminated,
        truncated=dataset.truncated,
        episode_offsets=dataset.episode_offsets,
        behaviour_probs=dataset.behaviour_probs,
        unit_ids=dataset.unit_ids,
        extra_columns=dataset.extra_columns,
        metadata=meta.replace(env_id=target.env_id, extra=extra),
    )


class GymSimulator:
    """``num_envs`` copies of a Gymnasium env stepped side by side, with the interface of
    `privrl.envs.batched.BatchedControlEnv` the policy stage uses (``reset``, ``step``,
    ``sample_initial_observations``, ``num_envs``, ``horizon``). A copy that terminates or is
    truncated stays done (reward 0, reported as terminated) until the next ``reset``."""

    def __init__(self, task: ControlTask, num_envs: int, seed: int | None = None) -> None:
        import gymnasium as gym

        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        register_envs()
        self.task, self.num_envs, self.horizon = task, int(num_envs), int(task.horizon)
        self._envs = [gym.make(task.env_id) for _ in range(self.num_envs)]
        self._rng = np.random.default_rng(seed)
        self._obs = np.zeros((self.num_envs, task.obs_dim))
        self._done = np.ones(self.num_envs, dtype=bool)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start one episode per copy; observations ``[num_envs, obs_dim]``."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        seeds = self._rng.integers(0, 2**31 - 1, size=self.num_envs)
        pairs = zip(self._envs, seeds, strict=True)
        self._obs = np.stack([np.asarray(env.reset(seed=int(s))[0], float) for env, s in pairs])
        self._done[:] = False
        return self._obs.copy()

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(next observations, rewards, done) for actions ``[num_envs, act_dim]`` (clipped to
        the action box)."""
        a = np.clip(np.asarray(actions, float), self.task.action_low, self.task.action_high)
        reward = np.zeros(self.num_envs)
        for i, env in enumerate(self._envs):
            if self._done[i]:
                continue
            obs, r, terminated, truncated, _ = env.step(a[i].astype(np.float32))
            self._obs[i], reward[i] = np.asarray(obs, float), float(r)
            self._done[i] = bool(terminated or truncated)
        return self._obs.copy(), reward, self._done.copy()

    def sample_initial_observations(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` observations from the env's initial-state distribution (public simulator)."""
        env = self._envs[0]
        seeds = rng.integers(0, 2**31 - 1, size=int(n))
        if int(n) == 0:
            return np.zeros((0, self.task.obs_dim))
        obs = np.stack([np.asarray(env.reset(seed=int(s))[0], float) for s in seeds])
        self._done[0] = True  # its episode was interrupted: reset before stepping again
        return obs


def simulator(task: ControlTask, num_envs: int, seed: int | None = None) -> Any:
    """The task's simulator for ``num_envs`` episodes at once: the vectorised one of a preset
    task, else `GymSimulator`."""
    if is_preset(task):
        from privrl.envs.batched import make_batched

        return make_batched(task, num_envs, seed)
    return GymSimulator(task, num_envs, seed)


def task_facts(task: ControlTask) -> dict[str, Any]:
    """The task as plain values (for a released model's file)."""
    import dataclasses

    facts = dataclasses.asdict(task)
    if facts["reward_range"] is not None:
        facts["reward_range"] = list(facts["reward_range"])
    return facts


def task_from_facts(facts: Mapping[str, Any]) -> ControlTask:
    """`task_facts` read back."""
    d = dict(facts)
    if d.get("reward_range") is not None:
        d["reward_range"] = tuple(float(x) for x in d["reward_range"])
    return ControlTask(**d)
