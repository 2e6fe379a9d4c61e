"""One local process pool per process, reused by every stage that asks for the same one.

A reproduction runs its function units and sweep cells in stages (one `run_local` call per
stage), and a "spawn" worker pays an interpreter start and the torch import before its first
task: seconds per stage on a busy machine, which dominated the quick reproductions. The pool
is therefore kept between calls and reused by the next call that would create the same one:
same worker count, same imports, and the same environment, working directory and import path
(what a spawned worker inherits), so a reused worker is indistinguishable from a fresh one.
Anything else (a test that changes ``PRIVRL_CACHE``, another worker count) gets a new pool and
the old one is shut down. A pool whose worker died, or that a Ctrl-C or SIGTERM interrupted, is
dropped. ``PRIVRL_POOL_REUSE=0`` turns reuse off (a fresh pool per call, as before; the
benchmark ``benchmarks/bench_pool_reuse.py`` compares the two).
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

REUSE_ENV = "PRIVRL_POOL_REUSE"

_kept: tuple[tuple[Any, ...], ProcessPoolExecutor] | None = None


def reuse_enabled() -> bool:
    """Whether pools are kept between calls (``$PRIVRL_POOL_REUSE``, default on)."""
    return os.environ.get(REUSE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _identity(workers: int, imports: Sequence[str]) -> tuple[Any, ...]:
    """What a spawned worker depends on: its count, its imports and what it inherits."""
    env = tuple(sorted(os.environ.items()))
    return (workers, tuple(imports), os.getcwd(), tuple(sys.path), env)


def get_pool(
    workers: int, imports: Sequence[str], initializer: Callable[..., None]
) -> ProcessPoolExecutor:
    """A "spawn" pool of `workers` processes that run `initializer(imports)` first: the kept
    one when it was made for the same identity, else a new one (kept, the old one shut down).
    Workers start on demand, so a stage of one task starts one process."""
    import multiprocessing

    global _kept
    key = _identity(workers, imports)
    if _kept is not None and _kept[0] == key and reuse_enabled():
        return _kept[1]
    drop()
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),  # torch and fork do not mix
        initializer=initializer,
        initargs=(list(imports),),
    )
    if reuse_enabled():
        _kept = (key, pool)
    return pool


def release(pool: ProcessPoolExecutor, *, broken: bool = False) -> None:
    """The end of a call's use of `pool`: kept for the next call, unless reuse is off or the
    pool is `broken` (a worker died), then shut down."""
    kept = _kept is not None and _kept[1] is pool
    if kept and not broken:
        return
    if kept:
        drop()
    else:
        pool.shutdown(wait=True)


def abort(pool: ProcessPoolExecutor) -> None:
    """Stop `pool` now (Ctrl-C, SIGTERM): terminate its workers, cancel what is queued, and
    forget it."""
    global _kept
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    if _kept is not None and _kept[1] is pool:
        _kept = None


def drop() -> None:
    """Shut the kept pool down (its idle workers exit), if there is one."""
    global _kept
    if _kept is not None:
        pool, _kept = _kept[1], None
        pool.shutdown(wait=True)


atexit.register(drop)
