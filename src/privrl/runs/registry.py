"""Every system the run layer knows, by name; imported lazily (torch only when needed)."""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

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


def systems_table() -> Any:
    """A rich table of the systems and their summaries (`privrl run --list`): the names stay
    whole, the summaries wrap at words to the terminal."""
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(no_wrap=True, style="bold")
    table.add_column(ratio=1)
    for name in names():
        table.add_row(Text(name), Text(get(name).summary))
    return table


def _load_catalog() -> None:
    from privrl.runs import catalog

    catalog.load()
