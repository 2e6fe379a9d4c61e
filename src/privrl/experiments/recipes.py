"""Registry of dataset recipes for `privrl data collect --recipe NAME`.

A recipe builds one dataset (and whatever it needs first: trained agents, checkpoints, experts)
into a data directory, resumably: every stage writes its output atomically and a rerun skips the
stages whose output exists. The recipe's name and parameters are stored in the dataset's
metadata (`extra["recipe"]`). Modules are imported lazily so `privrl --help` stays fast.

A recipe function has the signature
``build(data_dir: Path, *, seed: int, quick: bool, progress: bool) -> Path`` and returns the
path of the dataset file it wrote. ``quick`` builds a small version (for tests and smoke runs)
into a separate file so it never overwrites the full one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


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
        "privrl.experiments.recipes_primorl:pendulum",
    ),
    Recipe(
        "primorl-balance",
        "PRIMORL cartpole balance (dm_control): 30,000 replay-style trajectories of 1000 steps",
        "privrl.experiments.recipes_primorl:balance",
    ),
    Recipe(
        "primorl-swingup",
        "PRIMORL cartpole swingup (dm_control): 30,000 replay-style trajectories of 1000 steps",
        "privrl.experiments.recipes_primorl:swingup",
    ),
    Recipe(
        "primorl-halfcheetah",
        "PRIMORL HalfCheetah: ~2,000 medium-expert-style trajectories of 1000 steps",
        "privrl.experiments.recipes_primorl:halfcheetah",
    ),
    Recipe(
        "experts-cartpole",
        "Expert-level DP: 3000 CartPole experts (perturbed physics) x 20 trajectories",
        "privrl.experiments.recipes_expert:cartpole",
    ),
    Recipe(
        "experts-acrobot",
        "Expert-level DP: 3000 Acrobot experts (perturbed physics) x 20 trajectories",
        "privrl.experiments.recipes_expert:acrobot",
    ),
    Recipe(
        "experts-lunarlander",
        "Expert-level DP: 3000 LunarLander experts (perturbed physics) x 20 trajectories",
        "privrl.experiments.recipes_expert:lunarlander",
    ),
    Recipe(
        "experts-hiv",
        "Expert-level DP: 3000 HIV-treatment experts (perturbed model) x 20 trajectories",
        "privrl.experiments.recipes_expert:hiv",
    ),
):
    register(_r)


def default_data_dir() -> Path:
    """`$PRIVRL_CACHE/data` (default `~/.cache/privrl/data`)."""
    from privrl.data.paths import data_dir

    return data_dir()
