"""`privrl data collect`: a dataset rolled out in a Gymnasium environment (`collect_dataset`) or
built by a paper's recipe (`collect_recipe`, `privrl.runs.recipes`).

Each checks its public input (sizes, the machine's memory, the output path) before it steps an
environment or writes a byte, and raises an `InputError` whose message names the problem and
the command-line flag that carries the value.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from gymnasium import spaces

from privrl.data.dataset import TrajectoryDataset
from privrl.data.files import check_output_file
from privrl.privacy.limits import InputError, check_int, check_memory, format_bytes, machine_memory
from privrl.runs.progress import progress_bars

# Collection keeps every transition in memory until the dataset is written: per transition
# two observations (recorded and next), the action, reward, flags, episode and time indices
# (~50 bytes), twice over while the lists are concatenated and sorted.
_COLLECT_OVERHEAD_BYTES = 50
MAX_NUM_ENVS = 1024  # each sub-environment is a Python object stepped in one process


def _space_bytes(space: spaces.Space) -> int:
    """Bytes of one element of `space` as collected (flattened, at least 8 per scalar)."""
    try:
        size = int(spaces.flatdim(space))
    except (NotImplementedError, TypeError, ValueError):
        size = 1
    itemsize = max(8, np.dtype(space.dtype).itemsize if space.dtype is not None else 8)
    return size * itemsize


def _probe_env(env: str) -> tuple[spaces.Space, int | None, int]:
    """The action space, the episode step limit and the bytes per collected step of `env`."""
    import gymnasium as gym

    from privrl.envs import register_envs

    register_envs()
    try:
        spec_env = gym.make(env)
    except gym.error.Error as exc:
        raise InputError(f"unknown environment {env!r} ({exc})") from None
    try:
        limit = spec_env.spec.max_episode_steps if spec_env.spec is not None else None
        per_step = 2 * (
            2 * _space_bytes(spec_env.observation_space)
            + _space_bytes(spec_env.action_space)
            + _COLLECT_OVERHEAD_BYTES
        )
        return spec_env.action_space, limit, per_step
    finally:
        spec_env.close()


def collect_dataset(
    env: str,
    out: Path,
    *,
    policy: str = "uniform",
    episodes: int = 100,
    seed: int = 0,
    num_envs: int = 8,
    max_steps: int | None = None,
) -> TrajectoryDataset:
    """Roll out `policy` in the Gymnasium environment `env` for `episodes` episodes and write
    the dataset to `out`; the sizes are checked against this machine's memory first."""
    from privrl.data.collect import collect
    from privrl.data.io import save_hdf5
    from privrl.policies import UniformRandomPolicy

    check_int(episodes, "--episodes", minimum=1)
    check_int(num_envs, "--num-envs", minimum=1, maximum=MAX_NUM_ENVS)
    if max_steps is not None:
        check_int(max_steps, "--max-steps", minimum=1)
    if policy != "uniform":
        raise InputError(f"unknown --policy {policy!r}; available: uniform")
    check_output_file(out, "--out")
    action_space, limit, per_step = _probe_env(env)
    # Every episode has at least one transition: refuse what cannot fit even then.
    check_memory("--episodes", episodes, per_step, what="episode of one step")
    caps = [h for h in (max_steps, limit) if h is not None]
    horizon = min(caps) if caps else None
    if horizon is not None and episodes * horizon * per_step > machine_memory():
        warnings.warn(
            f"{episodes} episodes of up to {horizon} steps may need up to "
            f"{format_bytes(episodes * horizon * per_step)} of memory, more than this "
            f"machine's {format_bytes(machine_memory())}, if the episodes run long",
            stacklevel=1,
        )
    with progress_bars() as progress:
        ds = collect(
            env,
            UniformRandomPolicy(action_space),
            n_episodes=episodes,
            seed=seed,
            num_envs=num_envs,
            max_steps=max_steps,
            progress=progress,
        )
    save_hdf5(ds, out)
    return ds


RECIPE_FIXED = ("--env", "--policy", "--episodes", "--num-envs", "--max-steps")


def collect_recipe(
    name: str,
    given: set[str],
    data_dir: Path | None,
    *,
    seed: int,
    quick: bool,
    out: Path | None,
) -> list[str]:
    """Build the named paper dataset (`name == "list"`: list the recipes) and return the lines
    to print. `given` are the flags the user typed: a recipe fixes the environment, policy,
    episodes and environments, so those flags are refused with it."""
    import time

    from privrl.runs.recipes import RECIPES, build_recipe

    fixed = [f for f in RECIPE_FIXED if f in given]
    if fixed and name != "list":
        raise InputError(
            f"--recipe {name} fixes its environment, policy, episodes and environments; "
            f"remove {', '.join(fixed)} (only --data-dir, --quick, --seed and --out apply)"
        )
    if out is not None:
        check_output_file(out, "--out")
    if name == "list":
        return [f"{r.name:22s} {r.what}" for r in RECIPES.values()]
    start = time.perf_counter()
    path = build_recipe(name, data_dir, seed=seed, quick=quick, out=out)
    elapsed = time.perf_counter() - start
    return [f"wrote {path} (recipe {name}, {elapsed:.0f} s this invocation)"]


def check_env_collect(given: set[str], env: str | None, out: Path | None) -> None:
    """Refuse recipe-only flags and missing --env/--out when collecting from an environment."""
    for flag in ("--data-dir", "--quick"):
        if flag in given:
            raise InputError(
                f"{flag} applies to --recipe only; remove it when collecting with --env"
            )
    if env is None:
        raise InputError("--env or --recipe is required (e.g. --env CartPole-v1)")
    if out is None:
        raise InputError("--out is required with --env (the dataset file to write, e.g. data.h5)")
