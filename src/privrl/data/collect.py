"""Roll out a policy in a Gymnasium vector environment and record a ``TrajectoryDataset``.

Exactly ``n_episodes`` are recorded, without a bias towards short episodes: episode ``j`` is
assigned up front to sub-environment ``j % num_envs``, and each sub-environment records only
its own quota. (Stopping "when n episodes have finished" would over-sample short episodes,
because those finish first.) Sub-environments that have met their quota keep stepping with
the others until all are done, but nothing more is recorded from them.

Autoreset: the vector env runs in Gymnasium 1.x's ``NEXT_STEP`` mode, where the step after an
episode ends only resets that sub-environment (its action is ignored and the returned
observation is the first of the next episode). Such steps are recognised and not recorded as
transitions, and the observation returned with ``terminated``/``truncated`` is kept as the
episode's final observation.

Randomness: one ``numpy.random.SeedSequence(seed)`` is split into the environment seeds (one
per sub-environment, passed to the first reset; later autoresets continue each
sub-environment's own generator) and the policy's ``Generator``. Same seed, same ``num_envs``,
same dataset.

Public facts of the environment: for the Gymnasium toy-text environments whose per-step
rewards are bounded by their definition (`KNOWN_REWARD_RANGES`), the metadata records
``extra["reward_range"]``, the public range the learners clip and map rewards with. Taken from
the environment's id, never from the rewards recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from privrl.data.dataset import DatasetError, DatasetMetadata, TrajectoryDataset
from privrl.policies import Policy
from privrl.progress import Progress, no_progress

__all__ = ["KNOWN_REWARD_RANGES", "collect", "collection_seeds", "known_reward_range"]

# Per-step reward bounds of environments, by name without the version (from their
# definitions, public). CliffWalking's rewards are -1 and -100 and Taxi's -10, -1 and 20; each
# range holds 0, the worth of a step after termination (absorbing padding needs it).
KNOWN_REWARD_RANGES: dict[str, tuple[float, float]] = {
    "FrozenLake": (0.0, 1.0),
    "FrozenLake8x8": (0.0, 1.0),
    "CliffWalking": (-100.0, 0.0),
    "CliffWalkingSlippery": (-100.0, 0.0),
    "Taxi": (-10.0, 20.0),
}


def known_reward_range(env_id: str | None) -> tuple[float, float] | None:
    """The public per-step reward range of a Gymnasium id (``"Taxi-v4"``), if known."""
    if not env_id:
        return None
    name = env_id.rsplit("/", 1)[-1].rsplit("-v", 1)[0]
    return KNOWN_REWARD_RANGES.get(name)


def _env_factory(
    env: str | Callable[[], gym.Env], max_steps: int | None, env_kwargs: dict[str, Any]
) -> Callable[[], gym.Env]:
    def make() -> gym.Env:
        e = gym.make(env, **env_kwargs) if isinstance(env, str) else env()
        if max_steps is not None:
            e = gym.wrappers.TimeLimit(e, max_episode_steps=int(max_steps))
        return e

    return make


def _reward_range_extra(env_id: str | None) -> dict[str, list[float]]:
    bounds = known_reward_range(env_id)
    return {} if bounds is None else {"reward_range": list(bounds)}


def collection_seeds(seed: int, num_envs: int) -> tuple[list[int], np.random.Generator]:
    """The sub-environment reset seeds and the policy generator that ``collect`` uses."""
    env_ss, policy_ss = np.random.SeedSequence(seed).spawn(2)
    env_seeds = [int(s) for s in env_ss.generate_state(num_envs, dtype=np.uint32)]
    return env_seeds, np.random.default_rng(policy_ss)


def collect(
    env: str | Callable[[], gym.Env],
    policy: Policy,
    *,
    n_episodes: int,
    seed: int,
    num_envs: int = 8,
    max_steps: int | None = None,
    progress: Progress | None = None,
    unit_ids: Sequence[int] | np.ndarray | None = None,
    discount: float = 1.0,
    vectorization: Literal["sync", "async"] = "sync",
    env_kwargs: dict[str, Any] | None = None,
) -> TrajectoryDataset:
    """Record ``n_episodes`` episodes of ``policy`` in ``env`` (an env id or a factory).

    ``max_steps`` adds a ``TimeLimit`` (episodes then end with ``truncated``). When the
    policy has ``action_probs`` and the action space is Discrete, the probability of every
    taken action is recorded as ``behaviour_probs`` (an action with probability zero under
    ``action_probs`` is an error: the policy's ``act`` and ``action_probs`` disagree).
    ``unit_ids`` (one per episode) are stored as given.
    """
    if n_episodes <= 0:
        raise ValueError(f"n_episodes must be positive, got {n_episodes}")
    if int(num_envs) < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if max_steps is not None and int(max_steps) < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    num_envs = min(int(num_envs), int(n_episodes))  # more environments than episodes idle
    if unit_ids is not None and len(unit_ids) != n_episodes:
        raise DatasetError(
            f"field 'unit_ids': {len(unit_ids)} ids for {n_episodes} episodes (one per episode)"
        )
    make = _env_factory(env, max_steps, env_kwargs or {})
    fns = [make for _ in range(num_envs)]
    if vectorization == "sync":
        venv: gym.vector.VectorEnv = gym.vector.SyncVectorEnv(
            fns, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP
        )
    elif vectorization == "async":
        venv = gym.vector.AsyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    else:
        raise ValueError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")

    env_seeds, rng = collection_seeds(seed, num_envs)

    obs_space = venv.single_observation_space
    act_space = venv.single_action_space
    record_probs = isinstance(act_space, spaces.Discrete) and callable(
        getattr(policy, "action_probs", None)
    )
    env_ids = np.arange(num_envs)
    quota = np.array([len(range(i, n_episodes, num_envs)) for i in range(num_envs)])
    done_count = np.zeros(num_envs, dtype=np.int64)  # finished episodes per sub-env
    resetting = np.zeros(num_envs, dtype=np.bool_)  # next step is an autoreset step

    # Event logs, concatenated and sorted by (episode, time) at the end (no per-row loop).
    t_ep, t_time, t_obs, t_act, t_rew, t_term, t_trunc, t_prob = ([] for _ in range(8))
    o_ep, o_time, o_obs = [], [], []

    spec = None
    try:
        obs, _ = venv.reset(seed=env_seeds)
        spec = venv.get_attr("spec")[0]
        o_ep.append(env_ids.copy())  # first episode of sub-env i is episode i
        o_time.append(np.full(num_envs, -1))
        o_obs.append(np.asarray(obs).copy())
        report = progress or no_progress
        label = f"collecting {env if isinstance(env, str) else getattr(env, '__name__', 'env')}"
        step = 0
        while np.any(done_count < quota):
            actions = np.asarray(policy.act(obs, rng))
            if actions.shape[0] != num_envs:
                raise DatasetError(
                    f"policy.act returned {actions.shape[0]} actions for a batch of "
                    f"{num_envs} observations"
                )
            probs = None
            if record_probs:
                table = np.asarray(policy.action_probs(obs))  # type: ignore[attr-defined]
                idx = actions.astype(np.int64) - int(act_space.start)
                probs = table[env_ids, idx]
            next_obs, rew, term, trunc, _ = venv.step(actions)
            next_obs = np.asarray(next_obs)
            episode = done_count * num_envs + env_ids
            active = (~resetting) & (done_count < quota)
            if active.any():
                if probs is not None and np.any(probs[active] <= 0):
                    bad = int(np.flatnonzero(active & (probs <= 0))[0])
                    raise DatasetError(
                        f"episode {int(episode[bad])}: the policy took action "
                        f"{actions[bad]!r} to which its action_probs gives probability "
                        f"{probs[bad]}; act must sample from action_probs"
                    )
                t_ep.append(episode[active])
                t_time.append(np.full(int(active.sum()), step))
                t_obs.append(np.asarray(obs)[active].copy())
                t_act.append(actions[active].copy())
                t_rew.append(np.asarray(rew)[active].copy())
                t_term.append(np.asarray(term)[active].copy())
                # A terminal reached at the time limit is terminal (Gymnasium sets both).
                t_trunc.append((np.asarray(trunc) & ~np.asarray(term))[active])
                if probs is not None:
                    t_prob.append(probs[active].astype(np.float64))
                o_ep.append(episode[active])
                o_time.append(np.full(int(active.sum()), step))
                o_obs.append(next_obs[active].copy())
            # After an autoreset step, next_obs is the first observation of the next episode.
            starting = resetting & (done_count < quota)
            if starting.any():
                o_ep.append(episode[starting])
                o_time.append(np.full(int(starting.sum()), step))
                o_obs.append(next_obs[starting].copy())
            ended = active & (np.asarray(term) | np.asarray(trunc))
            done_count += ended
            if ended.any():
                report(label, int(done_count.sum()), n_episodes)
            resetting = np.asarray(term) | np.asarray(trunc)
            obs = next_obs
            step += 1
    finally:
        venv.close()

    tr_ep = np.concatenate(t_ep)
    order = np.lexsort((np.concatenate(t_time), tr_ep))
    lengths = np.bincount(tr_ep, minlength=n_episodes).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    ob_ep = np.concatenate(o_ep)
    ob_order = np.lexsort((np.concatenate(o_time), ob_ep))
    observations = np.concatenate(o_obs, axis=0)[ob_order]
    assert observations.shape[0] == offsets[-1] + n_episodes

    env_id = env if isinstance(env, str) else (spec.id if spec is not None else None)
    horizon = max_steps
    if horizon is None and spec is not None and spec.max_episode_steps is not None:
        horizon = int(spec.max_episode_steps)
    meta = DatasetMetadata(
        observation_space=obs_space,
        action_space=act_space,
        env_id=env_id,
        discount=discount,
        horizon=horizon,
        extra={
            "source": "collect",
            "seed": int(seed),
            "num_envs": num_envs,
            "policy": type(policy).__name__,
            "max_steps": max_steps,
            **_reward_range_extra(env_id),
        },
    )
    actions_arr = np.concatenate(t_act, axis=0)[order]
    if isinstance(act_space, spaces.Discrete):
        actions_arr = actions_arr.astype(np.int64)
    elif isinstance(act_space, spaces.Box):
        actions_arr = actions_arr.astype(act_space.dtype)
    return TrajectoryDataset(
        observations=observations,
        actions=actions_arr,
        rewards=np.concatenate(t_rew)[order].astype(np.float64),
        terminated=np.concatenate(t_term)[order],
        truncated=np.concatenate(t_trunc)[order],
        episode_offsets=offsets,
        behaviour_probs=np.concatenate(t_prob)[order] if record_probs else None,
        unit_ids=None if unit_ids is None else np.asarray(unit_ids, dtype=np.int64),
        metadata=meta,
    )
