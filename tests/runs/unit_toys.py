"""Top-level unit functions for tests/runs/test_units.py (workers import them by name)."""

from __future__ import annotations

import os

import numpy as np


def draw(seed: int, n: int = 5) -> dict:
    """A seeded Monte-Carlo unit: n standard normals and their mean."""
    values = np.random.default_rng(seed).standard_normal(n)
    return {"seed": seed, "values": [float(v) for v in values], "mean": float(values.mean())}


def threads() -> dict:
    """The worker's BLAS thread limit and process id."""
    return {"omp": os.environ.get("OMP_NUM_THREADS"), "pid": os.getpid()}


def fail(message: str) -> None:
    raise ValueError(message)


def sleep_forever(marker: str) -> None:
    """Write this worker's pid to ``marker``, then sleep (a unit to be interrupted)."""
    import time
    from pathlib import Path

    Path(marker).write_text(str(os.getpid()))
    time.sleep(600)


def die(code: int = 3) -> None:
    """Kill this worker process outright (a worker lost mid-unit, as on out-of-memory)."""
    os._exit(code)
