"""Where privrl keeps data it creates on this machine (collected datasets, caches)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "data_dir", "portable_path"]


def cache_dir() -> Path:
    """``$PRIVRL_CACHE`` if set, else ``~/.cache/privrl``; created on first use."""
    env = os.environ.get("PRIVRL_CACHE")
    path = Path(env).expanduser() if env else Path.home() / ".cache" / "privrl"
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """``cache_dir()/data``, the default home of datasets written by ``privrl data``."""
    path = cache_dir() / "data"
    path.mkdir(parents=True, exist_ok=True)
    return path


def portable_path(path: str | os.PathLike[str]) -> str:
    """``path`` as written into reports that may be shared: under the cache it becomes
    ``$PRIVRL_CACHE/…``, under the home directory ``~/…``; any other path is kept as given.
    Reports then name the dataset without naming the machine that made them."""
    p = Path(path).expanduser()
    env = os.environ.get("PRIVRL_CACHE")
    cache = Path(env).expanduser() if env else Path.home() / ".cache" / "privrl"
    for root, label in ((cache, "$PRIVRL_CACHE"), (Path.home(), "~")):
        try:
            return f"{label}/{p.resolve().relative_to(root.resolve()).as_posix()}"
        except ValueError:
            continue
    return str(path)
