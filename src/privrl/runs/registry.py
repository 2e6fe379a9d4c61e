"""Every system the run layer knows, by name; imported lazily (torch only when needed)."""

from __future__ import annotations

import importlib
from functools import cache

from privrl.runs.system import System

# name -> "module:Class". A system's module holds its config and its `System` subclass.
SYSTEMS: dict[str, str] = {}


def register(name: str, target: str) -> None:
    """Add a system (`target` is "package.module:ClassName")."""
    SYSTEMS[name] = target


@cache
def get(name: str) -> System:
    """The system called `name`; a ValueError lists the known ones."""
    _load_catalog()
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; known: {', '.join(sorted(SYSTEMS))}")
    module, cls = SYSTEMS[name].split(":")
    system = getattr(importlib.import_module(module), cls)()
    if system.name != name:
        raise RuntimeError(
            f"{SYSTEMS[name]} is registered as {name!r} but names itself {system.name!r}"
        )
    return system


def names() -> list[str]:
    _load_catalog()
    return sorted(SYSTEMS)


def _load_catalog() -> None:
    from privrl.runs import catalog

    catalog.load()
