"""Function cells: Monte-Carlo units of a reproduction, run by the sweep runner's backends.

A sweep cell (`privrl.runs.sweep`) is a system run through the run layer; a *unit* is a plain
computation: a top-level function named "module:function", JSON-able keyword arguments, and a
result path chosen by the caller (so a reproduction keeps its cache layout). `run_units`
computes the units whose result file is missing or unreadable (a unit cut off mid-write is
computed again), on the same local process pool or Ray dispatch as the system cells (one
BLAS/OpenMP thread per worker; a failed unit is captured with its one-line error while the
others finish), writes each result as JSON (tmp + rename) and returns every result in order:

    units = [Unit(root / f"trials-eps{e:g}.json", "pkg.mod:trials", {"eps": e}) for e in grid]
    results = run_units(units, backend="local", workers=2)

What a unit may compute: the reproductions' simulations on public simulators (no private
dataset is read here: these are not runs under a ledger). The result files are the same JSON
the reproductions cached before, so finished units are found and reused unchanged.

This module imports nothing heavy at import time (worker processes import it first).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privrl.runs.sweep import (
    BACKENDS,
    SweepError,
    _one_line,
    limit_threads,
    run_local,
    run_ray,
)


@dataclass(frozen=True)
class Unit:
    """One function cell: `target(**kwargs)` whose JSON result lives at `path`."""

    path: Path
    target: str  # "module:function", a top-level (picklable) function
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return Path(self.path).stem


class UnitsFailed(RuntimeError):
    """Some units failed (the others finished and were written); rerunning retries them."""

    def __init__(self, failed: list[tuple[Unit, str]]) -> None:
        self.failed = failed
        unit, error = failed[0]
        super().__init__(
            f"{len(failed)} unit(s) failed, e.g. {unit.name} ({unit.target}): {error}; "
            "rerun to retry them (finished units are kept)"
        )


_MISSING = object()


def read_result(path: str | Path) -> Any:
    """The unit's stored result, or `_MISSING` when the file is absent or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return _MISSING


def pending(units: Sequence[Unit]) -> list[Unit]:
    """The units `run_units` would compute (their result is missing or unreadable)."""
    return [u for u in units if read_result(u.path) is _MISSING]


def write_result(path: str | Path, text: str) -> None:
    """Write a result's JSON text atomically (tmp + rename: a reader never sees half)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def resolve(target: str) -> Callable[..., Any]:
    """The function named "module:function"."""
    module, _, name = target.partition(":")
    if not module or not name:
        raise SweepError(f"unit target {target!r} must be 'module:function'")
    return getattr(importlib.import_module(module), name)


def run_unit(task: Mapping[str, Any]) -> dict[str, Any]:
    """Run one unit in this worker (local pool or Ray) with one BLAS/OpenMP/torch thread; its
    record carries the result as JSON text. A failure is returned (status "failed", one-line
    error), not raised."""
    limit_threads()
    record: dict[str, Any] = {"index": task["index"], "status": "ok", "error": None}
    start = time.perf_counter()
    try:
        value = resolve(task["target"])(**task["kwargs"])
        record["json"] = json.dumps(value)
    except Exception as exc:
        if os.environ.get("PRIVRL_DEBUG"):
            traceback.print_exc()
        record.update(status="failed", error=f"{type(exc).__name__}: {_one_line(exc)}")
    record["seconds"] = round(time.perf_counter() - start, 3)
    return record


def _lost(task: Mapping[str, Any], exc: BaseException) -> dict[str, Any]:
    return {
        "index": task["index"],
        "status": "failed",
        "error": f"the worker died ({_one_line(exc)[:200]})",
        "seconds": None,
    }


def run_units(
    units: Sequence[Unit],
    *,
    backend: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: Callable[[Unit, dict[str, Any]], None] | None = None,
) -> list[Any]:
    """Compute the units whose result is missing or unreadable, write each result, and return
    all results in the order of `units` (a stored result is read back, a new one is returned
    as it reads back from its file).

    backend "local": a process pool of `workers` (default: the CPU count), also for one worker,
    so that every unit runs with one BLAS thread and its result does not depend on the number
    of workers (a multi-threaded BLAS rounds differently). backend "ray": Ray tasks
    (`address`: a cluster, else a local instance). `progress(unit, record)` is called as each
    unit finishes (record: status, error, seconds). Raises `UnitsFailed` once every unit has
    finished if any failed."""
    if backend not in BACKENDS:
        raise SweepError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    paths = [os.path.abspath(u.path) for u in units]
    if len(set(paths)) != len(paths):
        dup = next(p for p in paths if paths.count(p) > 1)
        raise SweepError(f"two units write {dup}; give each unit its own result path")
    results = [read_result(u.path) for u in units]
    todo = [i for i, r in enumerate(results) if r is _MISSING]
    tasks = [{"index": i, "target": units[i].target, "kwargs": dict(units[i].kwargs)} for i in todo]
    failed: dict[int, str] = {}

    def report(record: dict[str, Any]) -> None:
        i = record["index"]
        if record["status"] == "ok":
            write_result(units[i].path, record["json"])
            results[i] = json.loads(record["json"])
        else:
            failed[i] = record.get("error") or "failed"
        if progress is not None:
            progress(units[i], {k: v for k, v in record.items() if k != "json"})

    n = workers or os.cpu_count() or 1
    if backend == "ray":
        run_ray(tasks, n, address, report, fn=run_unit, lost=_lost)
    else:
        run_local(tasks, n, [], report, fn=run_unit, lost=_lost)
    if failed:
        raise UnitsFailed([(units[i], failed[i]) for i in sorted(failed)])
    return results


def keyed_unit(
    root: str | Path, name: str, target: str, kwargs: Mapping[str, Any], *, key: str | None = None
) -> Unit:
    """A unit whose result file is `root/NAME-HASH.json`, HASH a digest of its target and
    arguments: a changed unit never reads another's result, an unchanged one is reused.
    `key` (default `target`) is the name hashed in the target's place: a function that moved
    to another module keeps its cached results by passing the name they were cached under."""
    plain = json.loads(json.dumps(kwargs))
    text = json.dumps([target if key is None else key, plain], sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return Unit(Path(root) / f"{name}-{digest}.json", target, plain)


def log_progress(prefix: str) -> Callable[[Unit, dict[str, Any]], None]:
    """A `progress` callback printing one line per finished unit on stderr."""

    def show(unit: Unit, record: dict[str, Any]) -> None:
        what = "done" if record["status"] == "ok" else f"FAILED: {record['error']}"
        seconds = record.get("seconds")
        took = f" in {seconds:.1f}s" if isinstance(seconds, (int, float)) else ""
        stamp = time.strftime("%H:%M:%S")
        print(f"[{prefix} {stamp}] unit {unit.name} {what}{took}", file=sys.stderr, flush=True)

    return show
