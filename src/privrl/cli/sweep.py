"""`privrl sweep GRID.toml`: a grid of runs on a local process pool or Ray.

    # sweeps/budgets.toml
    system = "toy-mean"
    data = "data/riverswim.h5"
    out = "sweeps/budgets"
    [grid]
    epsilon = [0.5, 1.0, 2.0]
    seeds = 5

Every cell is validated before anything runs; finished cells (same fingerprint) are skipped,
so re-running the command after Ctrl-C or a failure runs only the missing cells. See
docs/sweeps.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from privrl.cli.errors import CliError


def sweep(
    grid: Path = typer.Argument(..., help="TOML grid file (see docs/sweeps.md)."),
    backend: str = typer.Option(None, "--backend", help="local (process pool) | ray."),
    workers: int = typer.Option(
        None,
        "--workers",
        "-j",
        help="Parallel cells (default: the file's sweep.workers, else the CPU count).",
    ),
    address: str = typer.Option(
        None, "--address", help="Ray cluster address (default: a local Ray instance)."
    ),
    out: Path = typer.Option(None, "--out", "-o", help="Output directory (overrides the file's)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and list the cells; run none."),
) -> None:
    """Run a grid of runs (systems × budgets × seeds × datasets), skipping finished cells."""
    import dataclasses

    from privrl.runs import sweep as sweeps
    from privrl.runs.console import note_output

    try:
        spec = sweeps.load_sweep(grid, out=out)
        changes: dict[str, Any] = {}
        if backend is not None:
            changes["backend"] = backend
        if workers is not None:
            changes["workers"] = workers
        if address is not None:
            changes["address"] = address
        options = sweeps.check_options(dataclasses.replace(spec.options, **changes))
        spec = dataclasses.replace(spec, options=options)
        note_output(spec.out)
    except sweeps.SweepError as exc:  # (a problem of the file itself already names it)
        text = str(exc)
        raise CliError(text if text.startswith(f"{grid} ") else f"{grid}: {text}") from None
    if dry_run:
        for cell in spec.cells:
            state = "done" if sweeps.finished(cell) else "todo"
            typer.echo(f"{cell.name}  {state}  {cell.label()}")
        return
    with _Progress() as progress:
        try:
            outcome = sweeps.run_sweep(spec, on_start=progress.start, on_cell=progress.cell)
        except sweeps.SweepError as exc:
            raise CliError(str(exc)) from None
    from rich.console import Console

    console = Console()
    console.print(sweeps.summary_table(spec, outcome, console.width))
    console.print(sweeps.summary_line(spec, outcome), highlight=False)
    if outcome.failed:
        typer.echo(
            f"error: {len(outcome.failed)} of {outcome.total} cells failed (see "
            f"{spec.out}/cells/<cell>/log.txt); fix the cause and run the same command again "
            "to run only the cells that are not finished",
            err=True,
        )
        raise typer.Exit(1)


class _Progress:
    """A rich bar (cells done/total, failures) on a terminal, else one line per cell."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.done = 0
        self.failed = 0
        self.total = 0
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def start(self, total: int, to_run: int) -> None:
        self.total = to_run
        skipped = total - to_run
        typer.echo(
            f"{total} cells: {to_run} to run, {skipped} skipped (already finished)", err=True
        )
        if self.tty and to_run:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress(
                "cells",
                BarColumn(),
                MofNCompleteColumn(),
                "[red]{task.fields[failed]} failed",
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("cells", total=to_run, failed=0)

    def cell(self, record: dict[str, Any]) -> None:
        self.done += 1
        ok = record["status"] == "ok"
        self.failed += not ok
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, failed=self.failed)
            if not ok:
                self.bar.console.print(f"failed {record['name']}: {record.get('error')}")
            return
        seconds = record.get("seconds")
        took = f" {seconds:.1f}s" if isinstance(seconds, (int, float)) else ""
        tail = "" if ok else f": {record.get('error')}"
        typer.echo(
            f"[{self.done}/{self.total}] {record['name']} {record['status']}{took}{tail}", err=True
        )
