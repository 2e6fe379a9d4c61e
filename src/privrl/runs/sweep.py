"""Sweeps: a grid of runs (systems × budgets × seeds × datasets) on a process pool or Ray.

    # sweep.toml
    system = "toy-mean"
    data = "data/riverswim.h5"
    out = "sweeps/budgets"
    delta = 1e-5
    [grid]
    epsilon = [0.5, 1.0, 2.0]
    seeds = 5

`load_sweep` expands and validates every cell (its config is built) before anything runs;
`run_sweep` executes the cells that are not finished yet, on a local process pool or on Ray,
through one top-level function, `run_cell`, which calls the run layer's `execute` (so a cell is
exactly the run `privrl run` would make, under the same privacy rules: ledger before data,
spend recorded under the ledger's file lock once the run directory is complete). Then it
writes the results table, the summary plots and `sweep.json`. The grid format is documented in
docs/sweeps.md.

What a sweep publishes: the grid (public choices), each cell's run directory (written by the
run layer), its status and one-line error, and the results table and plots, which are built
only from the cells' metrics.json and privacy.json (already published by the runs). A cell is
identified by its system, config, seed and data *path*, not by the data's content hash: a hash
of the private episodes distinguishes neighbouring datasets with certainty, so it must not
appear in a published directory name or file.

This module imports nothing heavy at import time (worker processes import it first and must
see the thread limits before numpy or torch load their thread pools).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import itertools
import json
import math
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privrl.config import ConfigError, fingerprint

SECTIONS = ("grid", "sweep", "cells", "systems")
# The Ray cluster a reproduction's cells go to (`privrl reproduce --backend ray --address A`
# sets it, so every reproduction's sweeps and units reach the same cluster).
RAY_ADDRESS_ENV = "PRIVRL_RAY_ADDRESS"
SWEEP_KEYS = ("backend", "workers", "address", "x", "metrics", "imports")
BACKENDS = ("local", "ray")
# The most cells one sweep may have (documented in docs/sweeps.md). Every cell is validated and
# gets a directory before anything runs, so a grid far beyond this (`seeds = 100000000`) would
# spend minutes and gigabytes before its first run; split such a study into several sweeps.
MAX_CELLS = 100_000
# How long `--address` may take to answer a TCP connection before the sweep gives up on it.
RAY_CONNECT_TIMEOUT = 10.0
# One BLAS/OpenMP/torch thread per worker, so that N workers use N cores.
THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}
RUN_FILES = ("config.json", "metrics.json", "privacy.json")
# a cell seeded from a finished one records which: continued to more epochs, or its release
SEEDED_FROM = ("continues", "release_of")


class SweepError(ValueError):
    """A grid file or a cell is invalid; the message names the cell and key and the fix."""


@dataclass(frozen=True)
class SweepOptions:
    """Execution defaults (`[sweep]` table; command-line flags override them)."""

    backend: str = "local"
    workers: int | None = None
    address: str | None = None
    x: str | None = None
    metrics: tuple[str, ...] = ()
    imports: tuple[str, ...] = ()

    def n_workers(self) -> int:
        return self.workers or os.cpu_count() or 1


@dataclass(frozen=True)
class Cell:
    """One run of the sweep.

    Attributes:
        index: position in the expanded grid (1-based, as in error messages).
        values: the flat mapping given to `RunSpec.from_mapping` (without `out`).
        axes: the cell's value of every grid axis (None where a system has no such axis).
        key: the cell's fingerprint (system, config, seed, data path).
        dir: `OUT/cells/<system>-<key[:12]>`.
    """

    index: int
    values: dict[str, Any]
    axes: dict[str, Any]
    key: str
    dir: Path

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def run_dir(self) -> Path:
        return self.dir / "run"

    def label(self) -> str:
        shown = {"system": self.values.get("system"), **self.axes}
        shown.setdefault("seed", self.values.get("seed", 0))
        return ", ".join(f"{k}={_short(v)}" for k, v in shown.items())

    def task(self, imports: Sequence[str]) -> dict[str, Any]:
        """What a worker needs (plain values: it is pickled to a process or a Ray node)."""
        # absolute paths: a worker (a Ray worker above all) may not share the driver's cwd
        values = {**self.values, "out": os.path.abspath(self.run_dir)}
        if values.get("data") is not None:
            values["data"] = os.path.abspath(values["data"])
        return {
            "values": values,
            "dir": os.path.abspath(self.dir),
            "key": self.key,
            "cell": {"index": self.index, "values": self.values, "axes": self.axes},
            "imports": list(imports),
        }


@dataclass(frozen=True)
class Sweep:
    """An expanded, validated grid."""

    out: Path
    cells: list[Cell]
    axes: list[str]
    options: SweepOptions
    source: str = ""


@dataclass
class SweepOutcome:
    """What `run_sweep` did."""

    total: int = 0
    skipped: int = 0
    ran: int = 0
    failed: list[tuple[Cell, str]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    summary: list[dict[str, Any]] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)

    def raise_failed(self, what: str = "cell(s)") -> None:
        """Stop a caller that needs every cell (a reproduction) at the first failed one,
        naming it and its log; rerunning the sweep retries the failed cells."""
        if self.failed:
            cell, error = self.failed[0]
            raise RuntimeError(
                f"{len(self.failed)} {what} failed, e.g. {cell.label()}: {error} "
                f"(logs in {cell.dir}/log.txt); rerun to retry them"
            )


# ============================================================================ grid


def load_sweep(path: str | Path, *, out: str | Path | None = None) -> Sweep:
    """Read a grid file and expand it (see `expand`)."""
    from privrl.runs.layer import load_toml

    try:
        doc = load_toml(path)
    except ConfigError as exc:
        raise SweepError(str(exc)) from None
    return expand(doc, out=out, source=str(path))


def expand(doc: Mapping[str, Any], *, out: str | Path | None = None, source: str = "") -> Sweep:
    """Expand a grid document into validated cells.

    Top-level keys are base values; `[grid]` maps keys to lists (cartesian product; `seeds = N`
    is `seed = [0, ..., N-1]`); `[[cells]]` entries add explicit cells; `[systems.NAME]` holds
    values (and a `grid` sub-table of axes) for one system only; `[sweep]` holds execution
    defaults. Every cell's config is built here, so a bad cell is refused before any runs.
    """
    doc = dict(doc)
    grid = _table(doc.pop("grid", {}), "[grid]")
    options = _options(_table(doc.pop("sweep", {}), "[sweep]"))
    entries = doc.pop("cells", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SweepError("cells must be an array of tables ([[cells]] entries)")
    systems = _table(doc.pop("systems", {}), "[systems]")
    target = out if out is not None else doc.pop("out", None)
    doc.pop("out", None)
    if target is None:
        raise SweepError("out is required: the sweep's output directory (or give --out)")
    base = doc

    axes_values = _axes(grid, "grid")
    seeds = axes_values.pop("seed", None)
    per_system: dict[str, tuple[dict[str, Any], dict[str, list[Any]]]] = {}
    for name, table in systems.items():
        table = dict(_table(table, f"[systems.{name}]"))
        sys_grid = _axes(_table(table.pop("grid", {}), f"[systems.{name}.grid]"), name)
        for key in ("system", "out", "seed", "seeds"):
            if key in table or key in sys_grid:
                raise SweepError(
                    f"[systems.{name}] cannot set {key}; set it at the top or in [grid]"
                )
        per_system[name] = (table, sys_grid)
    for i, entry in enumerate(entries, 1):
        if "out" in entry:
            raise SweepError(f"cells entry {i}: out is set by the sweep (OUT/cells/...); remove it")
    if "out" in axes_values:
        raise SweepError("grid.out: the sweep sets each cell's out (OUT/cells/...); remove it")

    axes = [k for k in grid if k != "seeds"]
    if seeds is not None and "seed" not in axes:
        axes.append("seed")
    for entry in entries:  # what an explicit cell sets distinguishes it: an axis too
        axes += [k for k in entry if k not in axes]
    for _, sys_grid in per_system.values():
        axes += [k for k in sys_grid if k not in axes]

    n_cells = count_cells(base, axes_values, seeds, entries, per_system)
    if n_cells > MAX_CELLS:
        raise SweepError(_too_many(n_cells, "the grid has"))
    configs: list[dict[str, Any]] = []
    if axes_values or not entries:
        keys = list(axes_values)
        configs += [
            dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*axes_values.values())
        ]
    configs += [dict(e) for e in entries]

    from privrl.runs import registry

    import_modules(options.imports)
    for name in per_system:
        if name not in registry.names():
            raise SweepError(
                f"[systems.{name}]: unknown system; known: {', '.join(registry.names())}"
            )

    cells: list[Cell] = []
    out_path = Path(target)
    seen: dict[str, int] = {}
    headers: dict[str, str] = {}
    for conf in configs:
        system = conf.get("system", base.get("system"))
        sys_base, sys_grid = per_system.get(str(system), ({}, {}))
        seed_list = [conf["seed"]] if "seed" in conf else seeds or [base.get("seed", 0)]
        for combo in itertools.product(*sys_grid.values()):
            for seed in seed_list:
                values = {
                    **base,
                    **sys_base,
                    **conf,
                    **dict(zip(sys_grid, combo, strict=True)),
                    "seed": seed,
                }
                index = len(cells) + 1
                cell = _cell(index, values, axes, out_path, headers)
                if cell.key in seen:
                    raise SweepError(
                        f"cells {seen[cell.key]} and {index} are the same run ({cell.label()}); "
                        "remove the duplicate"
                    )
                seen[cell.key] = index
                cells.append(cell)
    if not cells:
        raise SweepError("the grid has no cells; give [grid] lists or [[cells]] entries")
    if options.x is not None and options.x not in axes:
        raise SweepError(
            f"[sweep] x = {options.x!r} is not an axis of the grid ({', '.join(axes)})"
        )
    return Sweep(out_path, cells, axes, options, source)


def count_cells(
    base: Mapping[str, Any],
    axes: Mapping[str, list[Any]],
    seeds: list[Any] | None,
    entries: Sequence[Mapping[str, Any]],
    per_system: Mapping[str, tuple[dict[str, Any], dict[str, list[Any]]]],
) -> int:
    """The number of cells `expand` builds, computed from the axes' lengths (no cell is
    built): each configuration of the product and each entry, times its system's own axes,
    times the seeds (an entry with its own seed counts once)."""
    n_seeds = len(seeds) if seeds else 1

    def own_axes(system: Any) -> int:
        return math.prod(len(v) for v in per_system.get(str(system), ({}, {}))[1].values())

    total = 0
    if axes or not entries:
        others = math.prod(len(v) for k, v in axes.items() if k != "system")
        systems = axes.get("system", [base.get("system")])
        total += sum(others * own_axes(s) * n_seeds for s in systems)
    for entry in entries:
        system = entry.get("system", base.get("system"))
        total += own_axes(system) * (1 if "seed" in entry else n_seeds)
    return total


def _too_many(n: int, what: str) -> str:
    return (
        f"{what} {n:,} cells, more than a sweep may have ({MAX_CELLS:,}); use fewer seeds "
        "or values, or split the study into several sweeps"
    )


def _cell(
    index: int, values: dict[str, Any], axes: list[str], out: Path, headers: dict[str, str]
) -> Cell:
    """Build the cell's RunSpec (validating its config) and its fingerprint."""
    from privrl.runs.layer import RunSpec, _check_data_use
    from privrl.runs.registry import get

    axis_values = {k: values.get(k) for k in axes}
    where = f"cell {index} ({', '.join(f'{k}={_short(v)}' for k, v in axis_values.items())})"
    if not axes:
        where = f"cell {index}"
    try:
        spec = RunSpec.from_mapping(values, out=out / "cells" / "pending")
        _check_data_use(get(spec.system), spec.data)
    except ConfigError as exc:
        raise SweepError(f"{where}: {exc}") from None
    if spec.data is not None:
        if not spec.data.is_file():
            raise SweepError(f"{where}: data {spec.data} is not a file; give an existing dataset")
        key = str(spec.data)
        if key not in headers:  # one header read per file and expansion
            headers[key] = _header_problem(key)
        problem = headers[key]
        if problem:
            raise SweepError(f"{where}: data {problem}")
    # Public identity: the data *path*, never a hash of its content (see the module docstring).
    key = fingerprint(spec.identity())
    return Cell(index, dict(values), axis_values, key, out / "cells" / f"{spec.system}-{key[:12]}")


def _header_problem(path: str) -> str:
    """Why the file at `path` is not a privrl dataset ("" when its header reads). Only the
    header (public metadata and sizes) is read, as before any private run."""
    from privrl.data.dataset import DatasetError
    from privrl.data.io import read_header

    try:
        read_header(path)
    except DatasetError as exc:
        return str(exc)
    return ""


def _table(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SweepError(f"{what} must be a table, not {value!r}")
    return value


def _axes(grid: Mapping[str, Any], where: str) -> dict[str, list[Any]]:
    """The axes of a `[grid]` table (key -> non-empty list), with `seeds = N` expanded."""
    axes: dict[str, list[Any]] = {}
    for key, values in grid.items():
        if key == "seeds":
            if "seed" in grid:
                raise SweepError(f"{where}: give either seed = [...] or seeds = N, not both")
            if isinstance(values, bool) or not isinstance(values, int) or values < 1:
                raise SweepError(f"{where}.seeds must be an integer >= 1 (seeds 0..N-1)")
            if values > MAX_CELLS:  # refused before the seed list is built
                raise SweepError(_too_many(values, f"{where}.seeds = {values} alone gives"))
            axes["seed"] = list(range(values))
            continue
        if not isinstance(values, list) or not values:
            raise SweepError(
                f"{where}.{key} must be a non-empty list of values (e.g. {key} = [1, 2]), "
                f"not {values!r}"
            )
        axes[key] = list(values)
    return axes


def _options(table: Mapping[str, Any]) -> SweepOptions:
    unknown = sorted(set(table) - set(SWEEP_KEYS))
    if unknown:
        raise SweepError(
            f"[sweep] {unknown[0]} is not a sweep option (known: {', '.join(SWEEP_KEYS)})"
        )
    metrics = table.get("metrics", ())
    imports = table.get("imports", ())
    for key, value in (("metrics", metrics), ("imports", imports)):
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise SweepError(f"[sweep] {key} must be a list of strings")
    return check_options(
        SweepOptions(
            backend=table.get("backend", "local"),
            workers=table.get("workers"),
            address=table.get("address"),
            x=table.get("x"),
            metrics=tuple(metrics),
            imports=tuple(imports),
        )
    )


def check_options(options: SweepOptions) -> SweepOptions:
    """Refuse an unknown backend, a worker count < 1 and an address without Ray."""
    if options.backend not in BACKENDS:
        raise SweepError(f"backend must be one of {', '.join(BACKENDS)}, not {options.backend!r}")
    w = options.workers
    if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
        raise SweepError(f"workers must be an integer >= 1, not {w!r}")
    if options.address is not None and options.backend != "ray":
        raise SweepError("address is for the Ray backend; add --backend ray (or drop --address)")
    return options


def with_options(spec: Sweep, **given: Any) -> Sweep:
    """`spec` with the options given (the command line's; None keeps the file's), checked."""
    changes = {key: value for key, value in given.items() if value is not None}
    options = check_options(dataclasses.replace(spec.options, **changes))
    return dataclasses.replace(spec, options=options)


def import_modules(names: Sequence[str]) -> None:
    """Import the modules of `[sweep] imports` (they register systems); a clear error if not."""
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise SweepError(
                f"[sweep] imports: cannot import {name!r} ({exc}); put it on PYTHONPATH"
            ) from None


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ============================================================================ cells


def read_record(cell_dir: str | Path, key: str | None = None) -> dict[str, Any] | None:
    """The record (``cell.json``: status, seconds, error) of the last attempt of the cell in
    `cell_dir`; None when there is none, it is unreadable, or it is of a fingerprint other
    than `key` (given)."""
    record = _read_json(Path(cell_dir) / "cell.json")
    if not isinstance(record, dict) or (key is not None and record.get("key") != key):
        return None
    return record


def finished(cell: Cell) -> bool:
    """True when the cell's directory holds a finished run with the same fingerprint."""
    record = read_record(cell.dir, cell.key) or {}
    complete = all((cell.run_dir / n).is_file() for n in RUN_FILES)
    return record.get("status") == "ok" and complete


def settled(cell: Cell, outcomes: Sequence[str]) -> bool:
    """True when the cell's last attempt, of the same fingerprint, failed with an error that
    contains one of `outcomes`: a result its report states (e.g. a model the noise drowned),
    which a rerun of the same seeded run would only repeat. Delete the cell's directory to
    run it again."""
    record = read_record(cell.dir, cell.key) or {}
    error = str(record.get("error") or "")
    return record.get("status") == "failed" and any(o in error for o in outcomes)


def run_cell(task: Mapping[str, Any]) -> dict[str, Any]:
    """Run one cell in this process (the function both backends call).

    Writes `cell.json` (values, fingerprint, status, seconds, error) and `log.txt` (the
    cell's stdout and stderr; on failure the error line, and the traceback with
    PRIVRL_DEBUG=1) in the cell's directory; the run itself
    goes to `run/` through `privrl.runs.layer.execute`. A failure is returned, not raised, so
    one bad cell does not stop the others. A cell cut off while running (its record says
    "running" under the same fingerprint) continues from its run's checkpoint when its system
    resumes by itself (`System.auto_resume`: MOPO, PRIMORL); otherwise `run/` starts clean.
    """
    limit_threads()
    cell_dir = Path(task["dir"])
    cell_dir.mkdir(parents=True, exist_ok=True)
    run_dir = Path(task["values"]["out"])
    # cut off while running (killed, or its machine stopped) rather than finished or failed
    before = read_record(cell_dir, task["key"]) or {}
    interrupted = before.get("status") == "running"
    record: dict[str, Any] = {
        **task["cell"],
        "name": cell_dir.name,
        "key": task["key"],
        "status": "running",
        "seconds": None,
        "error": None,
        # where a seeded cell's checkpoints came from (a finished cell's name), kept
        **{k: before[k] for k in SEEDED_FROM if interrupted and k in before},
    }
    _write_json(cell_dir / "cell.json", record)
    start = time.perf_counter()
    with _captured(cell_dir / "log.txt"):
        try:
            import_modules(task.get("imports", ()))
            from privrl.runs.layer import RunSpec, execute

            spec = RunSpec.from_mapping(task["values"])
            record["resumed"] = run_dir.exists() and interrupted and _continues(spec.system)
            if run_dir.exists() and not record["resumed"]:
                shutil.rmtree(run_dir)  # an earlier attempt: start clean (our own directory)
            execute(spec, quiet=True)
            record.update(status="ok")
        except Exception as exc:
            # the same line `privrl run` would print; a traceback (which may quote chained
            # errors that the command line never shows) only with PRIVRL_DEBUG=1, as there
            if os.environ.get("PRIVRL_DEBUG"):
                traceback.print_exc()
            print(f"error: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
            record.update(status="failed", error=_one_line(exc))
    record["seconds"] = round(time.perf_counter() - start, 3)
    _write_json(cell_dir / "cell.json", record)
    return record


def _continues(system: str) -> bool:
    """Whether runs of `system` continue their own checkpoint in the run directory (and refuse
    one of another run): an interrupted cell of it resumes; other systems' start over. A
    resumed attempt that fails is started clean on the next try."""
    from privrl.runs import registry

    found = registry.get(system)
    return bool(found.resumable and found.auto_resume)


def limit_threads() -> None:
    """One BLAS/OpenMP/torch thread in this process (a worker: N workers use N cores)."""
    os.environ.update(THREAD_ENV)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def _worker_init(imports: Sequence[str]) -> None:
    import signal

    # Ctrl-C is the parent's to handle: it stops the pool (the cells left stay unfinished)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit_threads()
    with contextlib.suppress(SweepError):
        import_modules(imports)


@contextlib.contextmanager
def _captured(path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (Python and C level) to `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    with open(path, "a") as log:
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            log.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:500]


# ============================================================================ backends

Report = Callable[[dict[str, Any]], None]


class Terminated(KeyboardInterrupt):
    """SIGTERM received while a pool ran: raised in the main thread so the workers are stopped
    (the default SIGTERM action kills the parent alone and leaves its workers running)."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the block runs (main thread only), SIGTERM raises `Terminated`."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _thread_env() -> Iterator[None]:
    """Set the thread limits in os.environ while workers start (they inherit it), then restore."""
    saved = {k: os.environ.get(k) for k in THREAD_ENV}
    os.environ.update(THREAD_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_local(
    tasks: list[dict[str, Any]],
    workers: int,
    imports: Sequence[str],
    report: Report,
    *,
    fn: Callable[[Any], dict[str, Any]] | None = None,
    lost: Callable[[Any, BaseException], dict[str, Any]] | None = None,
    deadline: float | None = None,
) -> None:
    """Run the tasks on a process pool ("spawn": torch and fork do not mix), the one the
    previous call used when nothing a worker inherits changed (`privrl.runs.pool`).

    `fn` (default `run_cell`, a top-level function) runs one task and returns its record;
    `lost(task, exc)` (default `_lost`) is the record of a task whose worker died. A task is
    handed to a worker only when one is free, and none after `deadline` (a `time.monotonic()`
    value): the tasks left are not run (their cells stay unfinished)."""
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    from privrl.runs import pool as pools

    if not tasks or _past(deadline):
        return
    with _thread_env(), _sigterm_raises():
        pool = pools.get_pool(workers, imports, _worker_init)
        broken = False
        queue = list(reversed(tasks))
        pending: dict[Any, Any] = {}

        def hand_out() -> None:
            while queue and len(pending) < workers and not _past(deadline):
                task = queue.pop()
                try:
                    pending[pool.submit(fn or run_cell, task)] = task
                except BrokenProcessPool as exc:  # a worker died earlier: no task can run
                    report((lost or _lost)(task, exc))

        try:
            hand_out()
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    task = pending.pop(future)
                    try:
                        record = future.result()
                    except Exception as exc:  # the worker died (killed, out of memory)
                        record = (lost or _lost)(task, exc)
                        broken = True
                    report(record)
                hand_out()
        except BaseException:  # Ctrl-C or SIGTERM: stop the workers, keep what finished
            pools.abort(pool)
            raise
        pools.release(pool, broken=broken)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


BUDGET_ENV = "PRIVRL_REPRO_BUDGET_S"  # a reproduction's time budget: no new cell after it


def budget_deadline(seconds: float | None = None) -> float | None:
    """The `time.monotonic()` after which a reproduction starts no new cell: `seconds` from
    now, else ``$PRIVRL_REPRO_BUDGET_S`` (0 reports the finished cells and starts nothing),
    else None (run every cell). A budget that is not a number ≥ 0 is refused."""
    raw = str(seconds) if seconds is not None else os.environ.get(BUDGET_ENV, "").strip()
    if not raw:
        return None
    where = "the time budget" if seconds is not None else f"${BUDGET_ENV}"
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{where} must be a number of seconds, not {raw!r}") from None
    if not value >= 0:
        raise ValueError(f"{where} must be ≥ 0 seconds, not {raw!r}")
    return time.monotonic() + value


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SweepError(
            "the Ray backend needs ray: pip install 'privrl[ray]' (or use --backend local)"
        ) from None
    return ray


def ray_init(workers: int, address: str | None = None) -> None:
    """Connect to the Ray cluster at `address` (else `$PRIVRL_RAY_ADDRESS`, which
    `privrl reproduce --address` sets), or start a local instance with `workers` CPUs
    (dashboard off, quiet). Workers get one BLAS/OpenMP thread each; a local instance's
    workers also get this interpreter's import path (for the systems and `imports`)."""
    address = address or os.environ.get(RAY_ADDRESS_ENV) or None
    ray = _import_ray()
    env = {"env_vars": dict(THREAD_ENV)}
    with _thread_env():
        if address:
            check_reachable(address)
            ray.init(address=address, runtime_env=env, log_to_driver=False, logging_level="ERROR")
            return
        path = [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)]
        env["env_vars"]["PYTHONPATH"] = os.pathsep.join(path)
        ray.init(
            num_cpus=workers,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
            runtime_env=env,
        )


def check_reachable(address: str, timeout: float = RAY_CONNECT_TIMEOUT) -> None:
    """Refuse a cluster address nothing answers at within `timeout` seconds (a TCP connection
    to its host and port), before `ray.init`: Ray itself retries an unreachable address for
    minutes, printing its own log lines. `auto` and an address without a port are left to
    Ray."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return
    except OSError as exc:
        timed_out = isinstance(exc, TimeoutError)
        reason = f"no answer within {timeout:g} s" if timed_out else exc.strerror or str(exc)
        raise SweepError(
            f"cannot reach the Ray cluster at {address} ({reason}); start "
            "it (`ray start --head`), check --address, or use --backend local"
        ) from None


def run_ray(
    tasks: list[dict[str, Any]],
    workers: int,
    address: str | None,
    report: Report,
    *,
    fn: Callable[[Any], dict[str, Any]] | None = None,
    lost: Callable[[Any, BaseException], dict[str, Any]] | None = None,
) -> None:
    """Run the tasks as Ray tasks (one CPU each), gathered as they finish (`ray.wait`);
    `fn` and `lost` as in `run_local`.

    Uses the Ray session of this process if there is one (then leaves it running), else
    starts one with `ray_init` and shuts it down at the end."""
    ray = _import_ray()
    if not tasks:
        return
    started = not ray.is_initialized()
    if started:
        ray_init(workers, address)
    pending: dict[Any, dict[str, Any]] = {}
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(fn or run_cell)
        pending = {remote.remote(t): t for t in tasks}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                task = pending.pop(ref)
                try:
                    record = ray.get(ref)
                except Exception as exc:  # the worker died
                    record = (lost or _lost)(task, exc)
                report(record)
    except BaseException:
        for ref in pending:  # Ctrl-C: stop the running cells (they stay unfinished)
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()


def _lost(task: Mapping[str, Any], exc: BaseException) -> dict[str, Any]:
    """The record of a cell whose worker died before it could write one."""
    record = {
        **task["cell"],
        "name": Path(task["dir"]).name,
        "key": task["key"],
        "status": "failed",
        "seconds": None,
        "error": f"the worker died ({_one_line(exc)[:200]})",
    }
    with contextlib.suppress(OSError):
        _write_json(Path(task["dir"]) / "cell.json", record)
    return record


# ============================================================================ sweep


def run_sweep(
    sweep: Sweep,
    *,
    on_start: Callable[[int, int], None] | None = None,
    on_cell: Report | None = None,
    deadline: float | None = None,
    outcomes: Sequence[str] = (),
) -> SweepOutcome:
    """Run the unfinished cells of `sweep`, then write results.csv/.parquet, plots and
    sweep.json. `on_start(total, to_run)` and `on_cell(record)` report progress. No cell
    starts after `deadline` (a `time.monotonic()` value; on Ray it is checked once, before
    the cells are sent: Ray queues them all at once); the cells left stay unfinished. A cell
    that failed with one of `outcomes` is `settled`: kept as it is, not run again."""
    from privrl.runs.rundir import check_out_dir

    options = sweep.options
    import_modules(options.imports)
    address = options.address or os.environ.get(RAY_ADDRESS_ENV)
    if options.backend == "ray" and address:
        check_reachable(address)  # before anything is written (again in `ray_init`)
    try:
        check_out_dir(sweep.out)
    except ValueError as exc:
        raise SweepError(str(exc).replace("--out", "out", 1)) from None
    todo = [c for c in sweep.cells if not finished(c) and not settled(c, outcomes)]
    outcome = SweepOutcome(total=len(sweep.cells), skipped=len(sweep.cells) - len(todo))
    if on_start is not None:
        on_start(outcome.total, len(todo))
    _write_sweep_json(sweep, outcome, state="running")
    by_name = {c.name: c for c in sweep.cells}

    def report(record: dict[str, Any]) -> None:
        outcome.ran += 1
        if record["status"] != "ok":
            outcome.failed.append((by_name[record["name"]], record.get("error") or "failed"))
        if on_cell is not None:
            on_cell(record)

    tasks = [c.task(options.imports) for c in todo]
    if options.backend == "ray":
        run_ray([] if _past(deadline) else tasks, options.n_workers(), options.address, report)
    else:
        run_local(tasks, options.n_workers(), options.imports, report, deadline=deadline)
    outcome.rows = collect_rows(sweep)
    write_table(outcome.rows, sweep.out)
    metrics = list(options.metrics) or numeric_metrics(outcome.rows, sweep)
    outcome.summary = summarise(outcome.rows, sweep, metrics)
    outcome.plots = draw_plots(outcome.rows, sweep, metrics)
    _write_sweep_json(sweep, outcome, state="done")
    return outcome


# ============================================================================ results

FIXED = ("cell", "system", "seed", "status", "seconds", "error")


def collect_rows(sweep: Sweep) -> list[dict[str, Any]]:
    """One row per cell: grid axes, system, seed, status, seconds, every scalar of
    metrics.json and ε, δ from privacy.json (prefixed `metric.` where a name collides)."""
    rows = []
    for cell in sweep.cells:
        record = _read_json(cell.dir / "cell.json") or {}
        ok = record.get("status") == "ok" and record.get("key") == cell.key
        row: dict[str, Any] = {
            "cell": cell.name,
            "system": cell.values.get("system"),
            "seed": cell.values.get("seed", 0),
        }
        for k in sweep.axes:
            if k not in row:
                row[k] = _scalar(cell.axes.get(k))
        row.update(
            status=record.get("status", "missing") if record.get("key") == cell.key else "missing",
            seconds=record.get("seconds"),
            error=record.get("error"),
        )
        if ok:
            metrics = _read_json(cell.run_dir / "metrics.json") or {}
            for k, v in metrics.items():
                if isinstance(v, (int, float, str, bool)) or v is None:
                    row[k if k not in row else f"metric.{k}"] = v
            privacy = _read_json(cell.run_dir / "privacy.json") or {}
            row["privacy_epsilon"] = privacy.get("epsilon")
            row["privacy_delta"] = privacy.get("delta")
            if privacy.get("nominal_epsilon") is not None:  # insecure noise: ε = ∞, and this
                row["privacy_nominal_epsilon"] = privacy["nominal_epsilon"]
        rows.append(row)
    return rows


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    return json.dumps(value)


def write_table(rows: list[dict[str, Any]], out: Path) -> None:
    """OUT/results.csv and OUT/results.parquet (columns: the union of the rows' keys)."""
    import csv

    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    tmp = out / "results.csv.tmp"
    with open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in columns})
    tmp.replace(out / "results.csv")

    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = {}
    for k in columns:
        values = [row.get(k) for row in rows]
        try:
            arrays[k] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types: keep them as text
            arrays[k] = pa.array([None if v is None else str(v) for v in values])
    tmp = out / "results.parquet.tmp"
    pq.write_table(pa.table(arrays), tmp)
    tmp.replace(out / "results.parquet")


def numeric_metrics(rows: list[dict[str, Any]], sweep: Sweep) -> list[str]:
    """The numeric metric columns (default `[sweep] metrics`)."""
    fixed = set(FIXED) | set(sweep.axes) | {"privacy_delta"}
    names: list[str] = []
    for row in rows:
        for k, v in row.items():
            if k in fixed or k in names or isinstance(v, bool):
                continue
            if isinstance(v, (int, float)):
                names.append(k)
    return names


def x_axis(sweep: Sweep) -> str | None:
    """The plotting axis: `[sweep] x`, else the first numeric grid axis other than seed."""
    if sweep.options.x is not None:
        return sweep.options.x
    for k in sweep.axes:
        if k == "seed":
            continue
        values = [c.axes.get(k) for c in sweep.cells if c.axes.get(k) is not None]
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return k
    return None


def _groups(rows: list[dict[str, Any]], sweep: Sweep, skip: Sequence[str]) -> dict[tuple, list]:
    keys = [k for k in sweep.axes if k not in skip and k != "seed"]
    if "system" not in keys and len({r["system"] for r in rows}) > 1:
        keys.insert(0, "system")
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple((k, row.get(k)) for k in keys), []).append(row)
    return groups


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and its 95% Student-t interval (the interval is the mean itself for one value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, mean, mean
    from scipy import stats

    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _finite(rows: list[dict[str, Any]], metric: str) -> list[float]:
    out = []
    for r in rows:
        v = r.get(metric)
        if r.get("status") == "ok" and isinstance(v, (int, float)) and not isinstance(v, bool):
            if math.isfinite(v):
                out.append(float(v))
    return out


def summarise(rows: list[dict[str, Any]], sweep: Sweep, metrics: Sequence[str]) -> list[dict]:
    """Per combination of the non-seed axes: cells, ok, and each metric's mean and 95% CI."""
    summary = []
    for group, members in _groups(rows, sweep, ()).items():
        entry: dict[str, Any] = dict(group)
        entry["cells"] = len(members)
        entry["ok"] = sum(r["status"] == "ok" for r in members)
        for m in metrics:
            values = _finite(members, m)
            if values:
                mean, low, high = mean_ci(values)
                entry[m] = {"mean": mean, "low": low, "high": high, "n": len(values)}
        summary.append(entry)
    return summary


def draw_plots(rows: list[dict[str, Any]], sweep: Sweep, metrics: Sequence[str]) -> list[Path]:
    """OUT/plots/<metric>.png: mean over seeds with a 95% t band against the x axis, one
    line per combination of the other axes (log x when x spans more than 2 decades)."""
    from privrl.runs.plots import draw
    from privrl.runs.system import PlotSpec, Series

    x = x_axis(sweep)
    if x is None:
        return []
    xs = sorted({r.get(x) for r in rows if isinstance(r.get(x), (int, float))})
    logx = bool(xs) and xs[0] > 0 and xs[-1] / xs[0] > 100
    paths = []
    for metric in metrics:
        series = []
        for group, members in _groups(rows, sweep, (x,)).items():
            points = []
            for xv in xs:
                values = _finite([r for r in members if r.get(x) == xv], metric)
                if values:
                    points.append((xv, *mean_ci(values)))
            if points:
                label = ", ".join(f"{k}={_short(v)}" for k, v in group) or metric
                series.append(
                    Series(
                        label,
                        [p[0] for p in points],
                        [p[1] for p in points],
                        low=[p[2] for p in points],
                        high=[p[3] for p in points],
                        style="o-",
                    )
                )
        if series:
            name = metric.replace("/", "_")
            spec = PlotSpec(
                name, f"{metric} (mean, 95% t-interval over seeds)", x, metric, series, logx=logx
            )
            paths.append(draw(spec, sweep.out / "plots" / f"{name}.png"))
    return paths


def _write_sweep_json(sweep: Sweep, outcome: SweepOutcome, *, state: str) -> None:
    data = {
        "source": sweep.source,
        "state": state,
        "axes": sweep.axes,
        "options": {
            "backend": sweep.options.backend,
            "workers": sweep.options.n_workers(),
            "address": sweep.options.address,
            "x": x_axis(sweep),
            "metrics": list(sweep.options.metrics),
            "imports": list(sweep.options.imports),
        },
        "cells": [
            {"name": c.name, "key": c.key, "values": c.values, "axes": c.axes} for c in sweep.cells
        ],
        "total": outcome.total,
        "skipped": outcome.skipped,
        "ran": outcome.ran,
        "failed": [{"name": c.name, "error": e} for c, e in outcome.failed],
        "summary": outcome.summary,
    }
    sweep.out.mkdir(parents=True, exist_ok=True)
    _write_json(sweep.out / "sweep.json", data)


def _write_json(path: Path, data: Any) -> None:
    from privrl.config import _plain

    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(_plain(data), indent=2, allow_nan=True, default=str) + "\n")
    tmp.replace(path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ============================================================================ console


def summary_table(spec: Sweep, outcome: SweepOutcome, width: int = 80) -> Any:
    """A rich table of the summary that fits `width` columns: one row per combination of the
    non-seed axes (scalars only), then each metric as mean [95% interval], the standard metrics
    and ε first, as many as fit (at most four unless `[sweep] metrics` names them); the caption
    names the metrics left out, which results.csv and sweep.json hold."""
    from rich.console import Console
    from rich.measure import Measurement

    names = _metric_names(outcome.summary)
    wanted = list(spec.options.metrics) or _shown(names)
    console = Console(width=10_000)
    shown: list[str] = []
    for m in wanted:
        table = _summary_table(spec, outcome, [*shown, m])
        if shown and Measurement.get(console, console.options, table).maximum > width:
            break
        shown.append(m)
    table = _summary_table(spec, outcome, shown)
    rest = [m for m in names if m not in shown]
    if rest:
        table.caption = f"{len(rest)} more in {spec.out}/results.csv: {', '.join(rest)}"
        table.caption_justify = "left"
    return table


def _summary_table(spec: Sweep, outcome: SweepOutcome, metrics: list[str]) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"sweep {spec.out}: {outcome.total} cells, mean [95% CI] over seeds")
    first = outcome.summary[0] if outcome.summary else {}
    keys = [k for k, v in first.items() if k not in ("cells", "ok") and not isinstance(v, dict)]
    for k in keys:
        table.add_column(k)
    table.add_column("ok", justify="right")
    for m in metrics:
        table.add_column(m, justify="right")
    for entry in outcome.summary:
        cells = [Text(_cell_text(entry.get(k))) for k in keys]
        cells.append(Text(f"{entry.get('ok')}/{entry.get('cells')}"))
        for m in metrics:
            s = entry.get(m)
            cells.append(Text(f"{s['mean']:.4g} [{s['low']:.3g}, {s['high']:.3g}]" if s else "-"))
        table.add_row(*cells)
    return table


def _cell_text(value: Any) -> str:
    """An axis value as the table shows it: numbers short, lists joined, never a dict."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell_text(v) for v in value)
    if isinstance(value, dict):
        return ";".join(f"{k}={_cell_text(v)}" for k, v in value.items())
    return str(value)


def summary_line(spec: Sweep, outcome: SweepOutcome) -> str:
    return (
        f"ran {outcome.ran}, skipped {outcome.skipped}, failed {len(outcome.failed)}; "
        f"results: {spec.out}/results.csv, {spec.out}/results.parquet, {spec.out}/plots/"
    )


def _shown(names: list[str], limit: int = 4) -> list[str]:
    """The metrics the console table shows by default: the standard ones first, then ε spent,
    then the others, at most `limit` (sweep.json and the plots have them all)."""
    from privrl.runs.rundir import STANDARD_METRICS

    first = [m for m in STANDARD_METRICS if m in names]
    first += [m for m in ("privacy_epsilon",) if m in names]
    return (first + [m for m in names if m not in first])[:limit]


def _metric_names(summary: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for entry in summary:
        names += [k for k, v in entry.items() if isinstance(v, dict) and k not in names]
    return names
