"""Finding the paper reproductions of a privrl checkout, for `privrl reproduce`.

The reproductions live in the repository's top-level `reproductions/` package, which is not
installed with privrl (a wheel holds the library only). `privrl reproduce` therefore runs from
a checkout: the first directory, from the working directory upwards, that holds
``reproductions/reproduce.py`` beside a ``pyproject.toml``; failing that, the checkout the
running privrl was imported from (an editable install, or ``PYTHONPATH=src``). The package is
imported by path when the command runs, so nothing installed imports it.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

from privrl.runs.console import CliError

MARKER = Path("reproductions") / "reproduce.py"
NOT_A_CHECKOUT = (
    "privrl reproduce runs from a checkout of the privrl repository (the reproductions are not "
    "installed with the package): clone the repository and run the command from inside it"
)


def is_checkout(path: Path) -> bool:
    """Whether `path` is the root of a privrl checkout with its reproductions."""
    return (path / MARKER).is_file() and (path / "pyproject.toml").is_file()


def find_checkout(start: Path, source: Path | None = None) -> Path | None:
    """The checkout holding `start` (or one of its parents), else the one holding `source`
    (the imported privrl's file), else None."""
    for path in (start, *start.parents):
        if is_checkout(path):
            return path
    if source is not None:
        for path in source.parents:
            if is_checkout(path):
                return path
    return None


def _on_path(root: Path) -> None:
    """Make `root`'s packages importable here and in worker processes (the sweep's pool and
    local Ray workers import the reproductions' cell functions too)."""
    text = str(root)
    if text not in sys.path:
        sys.path.insert(0, text)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if text not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([text, *parts])


def load_reproductions(start: Path | None = None) -> ModuleType:
    """The registry module (`reproductions.reproduce`) of the checkout found from `start`
    (default the working directory); a CliError saying what to do when there is none."""
    import privrl

    root = find_checkout((start or Path.cwd()).resolve(), Path(privrl.__file__).resolve())
    if root is None:
        raise CliError(NOT_A_CHECKOUT)
    _on_path(root)
    module = importlib.import_module("reproductions.reproduce")
    found = Path(module.__file__ or "").resolve()
    if not found.is_relative_to(root):
        raise CliError(
            f"the reproductions already imported are {found.parent}, not those of the checkout "
            f"{root}; run the command from one checkout"
        )
    return module
