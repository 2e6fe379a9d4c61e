"""The committed state of ``primorl-table1``: the table continues wherever it stands.

A cartpole table is many sittings of hours-long cells, on machines that may start with an empty
cache. The report's directory (by default the checkout's ``docs/reproductions/primorl-table1``)
holds what a later sitting needs, beside the report:

- ``cells/``: the cells' committed state (`reproductions.primorl.cells`: records, secret-free
  DP-FedAvg checkpoints, small models, the datasets' ``fingerprints.json``). Before the sweep
  runs, the committed cells made on a dataset present here are restored into the sweep's
  directory in the cache (a cell already there is left alone; a rebuilt dataset whose
  ``content_sha256`` differs is refused, `cells.FingerprintMismatch`). While the sweep runs
  (every ``$PRIVRL_REPRO_SYNC_S`` seconds, default `SYNC_DEFAULT`; 0: never in between), after
  each cell, and when it stops (finished, out of budget, Ctrl-C), the state of this run's cells
  is exported back, so that ``git add docs/reproductions/primorl-table1 && git commit`` saves
  it.
- ``results.csv``: every finished row of the table, each with its learning curve (``curve``)
  and its z (``noise_multiplier``). A task this invocation did not run (not asked for with
  ``--tasks``, or its dataset absent) keeps its rows from there (`earlier_rows`, `merge`), and
  the report says which tasks' numbers come from earlier runs.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from reproductions.primorl import cells
from reproductions.primorl import sweeps as shared
from reproductions.primorl.sweeps import Scale

__all__ = [
    "SYNC_ENV",
    "Export",
    "earlier_rows",
    "merge",
    "restore",
    "sync_seconds",
    "write_results",
]

CELLS = "cells"  # the committed cells, beside the report
RESULTS = "results.csv"
SYNC_ENV = "PRIVRL_REPRO_SYNC_S"  # seconds between exports of the committed state while running
SYNC_DEFAULT = 1800.0


def sync_seconds() -> float | None:
    """The seconds between two exports while the sweep runs (``$PRIVRL_REPRO_SYNC_S``, default
    `SYNC_DEFAULT`); None for 0 (export after each cell and at the end only)."""
    raw = os.environ.get(SYNC_ENV, "").strip()
    if not raw:
        return SYNC_DEFAULT
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"${SYNC_ENV} must be a number of seconds, not {raw!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"${SYNC_ENV} must be a finite number ≥ 0 of seconds, not {raw!r}")
    return value or None


def restore(out: Path, sweep: Path, datasets: Mapping[str, Path]) -> list[str]:
    """Restore the committed cells ``out/cells`` made on one of `datasets` into the sweep
    directory `sweep` (`cells.restore`); the cells restored."""
    committed = out / CELLS
    if not committed.is_dir():
        return []
    return cells.restore(committed, sweep, datasets)


def warn_unused(restored: Collection[str], names: Collection[str]) -> None:
    """Say so (stderr) when restored cells are not cells of this sweep: a cell's name is its
    fingerprint, which holds its dataset's path, so cells committed with the cache elsewhere
    (another ``$PRIVRL_CACHE``) or at another scale (``--seeds``) are not continued here."""
    unused = sorted(set(restored) - set(names))
    if unused:
        print(
            f"warning: {len(unused)} committed cell(s) restored are not cells of this run "
            f"({', '.join(unused[:3])}{', …' if len(unused) > 3 else ''}): made with another "
            "--seeds, or with the cache ($PRIVRL_CACHE) at another path; they are not continued",
            file=sys.stderr,
        )


class Export:
    """Exports the state of the sweep's cells `names` into ``out/cells`` every `every` seconds
    (a background thread; None: never), on `now` (e.g. as a cell ends) and when the block
    ends. A failed export in between is a warning (the next one retries); the last one raises
    unless the block is already raising."""

    def __init__(self, sweep: Path, out: Path, names: Collection[str], every: float | None):
        self.sweep, self.dest, self.names, self.every = sweep, out / CELLS, set(names), every
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def export(self) -> list[str]:
        with self._lock:
            return cells.export(self.sweep, self.dest, self.names)

    def now(self, *_: Any) -> None:
        """Export, warning instead of raising (the sweep goes on)."""
        try:
            self.export()
        except Exception as exc:
            print(f"warning: exporting {self.dest} failed ({exc}); retried later", file=sys.stderr)

    def _loop(self) -> None:
        assert self.every is not None
        while not self._stop.wait(self.every):
            self.now()

    def __enter__(self) -> Export:
        if self.every is not None:
            self._thread = threading.Thread(target=self._loop, name="export-cells", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if kind is None:
            self.export()
        else:
            self.now()  # cut short: commit what the cells reached, keep the error


def _curve_of(row: Mapping[str, Any], cell_dir: Path | None) -> list[float]:
    """A row's learning curve: its ``curve`` column, else its committed cell's metrics.csv."""
    value = row.get("curve")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    if isinstance(value, str) and value.strip():
        return [float(x) for x in value.split()]
    return shared.curve(cell_dir) if cell_dir is not None else []


def earlier_rows(out: Path, scale: Scale) -> list[dict[str, Any]]:
    """The finished rows of the committed results table ``out/results.csv`` on the scale's
    seeds of their task, each with its curve and, where its cell is committed
    (``out/cells/NAME``), that directory (`dir`: the report reads z from it)."""
    from reproductions.primorl.table1 import task_of, task_seeds

    rows = []
    for r in shared.read_results(out / RESULTS):
        if r.get("status") != "ok" or r.get("seed") not in task_seeds(task_of(r), scale):
            continue
        cell = out / CELLS / str(r["cell"])
        where = cell if (cell / "cell.json").is_file() else None
        row = {**r, "curve": _curve_of(r, where), "dir": where}
        if row.get("noise_multiplier") is None:  # a table of before it stored z
            row["noise_multiplier"] = _published_z(out, row)
        rows.append(row)
    return rows


def _published_z(out: Path, row: Mapping[str, Any]) -> float | None:
    """The z of `row`'s Table 1 row as the committed report published it (metrics.json:
    Pendulum's rows at the top, the other tasks' under their names), None if it has none."""
    from reproductions.primorl.table1 import row_of, task_of

    try:
        metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    task = task_of(row)
    table = metrics if task == "pendulum" else metrics.get(task) or {}
    z = (table.get(row_of(row)) or {}).get("noise_multiplier")
    return float(z) if isinstance(z, (int, float)) else None


def merge(
    rows: Sequence[Mapping[str, Any]],
    earlier: Sequence[Mapping[str, Any]],
    ran: Collection[str],
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """This run's rows (of the tasks `ran`) and the earlier finished rows of every other task;
    a cell of this run not finished here but finished earlier (the same cell: its name is its
    fingerprint) keeps its earlier row. Returns the rows and, per task, how many of them are
    earlier rows."""
    from reproductions.primorl.table1 import task_of

    old = {str(e["cell"]): e for e in earlier}
    mine = {str(r["cell"]) for r in rows}
    merged: list[dict[str, Any]] = []
    counts: dict[str, int] = {}

    def take(row: Mapping[str, Any], is_old: bool) -> None:
        merged.append(dict(row))
        if is_old:
            counts[task_of(row)] = counts.get(task_of(row), 0) + 1

    for r in rows:
        kept = r.get("status") != "ok" and str(r["cell"]) in old
        take(old[str(r["cell"])] if kept else r, kept)
    for e in earlier:
        if task_of(e) not in ran and str(e["cell"]) not in mine:
            take(e, True)
    return merged, counts


def write_results(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """The results table beside the report: every row with its curve (space-separated) and
    z (its cell's privacy.json, else the row's own), the dataset reduced to its file name."""
    out = []
    for r in rows:
        row = {k: v for k, v in r.items() if k not in ("dir", "curve")}
        if row.get("data"):
            row["data"] = Path(str(row["data"])).name
        z = shared.noise_multiplier(r.get("dir"))
        row["noise_multiplier"] = z if z is not None else r.get("noise_multiplier")
        row["curve"] = " ".join(repr(float(x)) for x in r.get("curve") or [])
        out.append(row)
    fields: list[str] = []
    for row in out:
        fields += [k for k in row if k not in fields and k not in ("noise_multiplier", "curve")]
    fields += ["noise_multiplier", "curve"]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in out)
    os.replace(tmp, path)
