"""Registry of dataset recipes for `privrl data collect --recipe NAME`.

A recipe builds one dataset (and whatever it needs first: trained agents, checkpoints, experts)
into a data directory, resumably: every stage writes its output atomically and a rerun skips the
stages whose output exists. The recipe's name and parameters are stored in the dataset's
metadata (`extra["recipe"]`). Modules are imported lazily so `privrl --help` stays fast.

A recipe function has the signature
``build(data_dir: Path, *, seed: int, quick: bool, progress: bool) -> Path`` and returns the
path of the dataset file it wrote. ``quick`` builds a small version (for tests and smoke runs)
into a separate file so it never overwrites the full one.

A build holds an exclusive lock on its stage directory (`build_lock`), so two builds of the
same recipe never interleave. Under the lock, every hidden temporary that an atomic writer of
the recipe left behind (a build killed by SIGKILL or a power cut never reaches its cleanup) is
stale, and `remove_stale_temps` deletes them when a build starts (resumes) and when it ends:
a killed build once left a 105 MB ``.primorl-pendulum.h5.*.tmp`` next to the finished dataset.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from privrl.runs.recipes.common import (
    RecipeBusyError,
    build_lock,
    check_data_dir,
    copy_atomically,
    remove_stale_temps,
)

__all__ = [
    "RECIPES",
    "Recipe",
    "RecipeBusyError",
    "build_lock",
    "build_recipe",
    "check_data_dir",
    "default_data_dir",
    "register",
    "remove_stale_temps",
]


@dataclass(frozen=True)
class Recipe:
    name: str
    what: str
    target: str  # "module:function"

    def load(self) -> Callable[..., Path]:
        module, func = self.target.split(":")
        return getattr(importlib.import_module(module), func)


RECIPES: dict[str, Recipe] = {}


def register(recipe: Recipe) -> None:
    RECIPES[recipe.name] = recipe


for _r in (
    Recipe(
        "primorl-pendulum",
        "PRIMORL Pendulum: 30,000 replay-style trajectories (random to expert) of 200 steps",
        "privrl.runs.recipes.primorl:pendulum",
    ),
    Recipe(
        "primorl-balance",
        "PRIMORL cartpole balance (dm_control): 30,000 replay-style trajectories of 1000 steps",
        "privrl.runs.recipes.primorl:balance",
    ),
    Recipe(
        "primorl-swingup",
        "PRIMORL cartpole swingup (dm_control): 30,000 replay-style trajectories of 1000 steps",
        "privrl.runs.recipes.primorl:swingup",
    ),
    Recipe(
        "primorl-halfcheetah",
        "PRIMORL HalfCheetah: ~2,000 medium-expert-style trajectories of 1000 steps",
        "privrl.runs.recipes.primorl:halfcheetah",
    ),
    Recipe(
        "experts-cartpole",
        "Expert-level DP: 3000 CartPole experts (perturbed physics) x 20 trajectories",
        "privrl.runs.recipes.expert:cartpole",
    ),
    Recipe(
        "experts-acrobot",
        "Expert-level DP: 3000 Acrobot experts (perturbed physics) x 20 trajectories",
        "privrl.runs.recipes.expert:acrobot",
    ),
    Recipe(
        "experts-lunarlander",
        "Expert-level DP: 3000 LunarLander experts (perturbed physics) x 20 trajectories",
        "privrl.runs.recipes.expert:lunarlander",
    ),
    Recipe(
        "experts-hiv",
        "Expert-level DP: 3000 HIV-treatment experts (perturbed model) x 20 trajectories",
        "privrl.runs.recipes.expert:hiv",
    ),
):
    register(_r)


def default_data_dir() -> Path:
    """`$PRIVRL_CACHE/data` (default `~/.cache/privrl/data`)."""
    from privrl.data.paths import data_dir

    return data_dir()


def build_recipe(
    name: str,
    data_dir: Path | None = None,
    *,
    seed: int = 0,
    quick: bool = False,
    out: Path | None = None,
    progress: bool = True,
    pinned: bool | None = None,
) -> Path:
    """Build (or resume) the dataset of recipe `name` in `data_dir` (default
    `default_data_dir()`), copied to `out` if given; returns the dataset's path.

    ``pinned`` (default: a full build, not a quick one) runs the build in a child process with
    machine-independent numerics (`privrl.runs.recipes.numerics`), so any machine rebuilds the
    same dataset."""
    from privrl.privacy.limits import InputError

    if name not in RECIPES:
        raise InputError(f"unknown recipe {name!r}; available: {', '.join(RECIPES)}")
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    check_data_dir(root)
    from privrl.runs.recipes import numerics

    if (not quick if pinned is None else pinned) and not numerics.is_pinned():
        path = numerics.run_pinned(name, root, seed=seed, quick=quick, progress=progress)
    else:
        path = RECIPES[name].load()(root, seed=seed, quick=quick, progress=progress)
    if out is not None and Path(out).resolve() != Path(path).resolve():
        copy_atomically(path, Path(out))
        path = Path(out)
    return path
