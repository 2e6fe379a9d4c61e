"""Where privrl keeps data it creates on this machine (collected datasets, caches)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "data_dir"]


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
