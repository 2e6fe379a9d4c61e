"""The progress of a sweep on stderr (`run_sweep`'s `on_start` / `on_cell` callbacks): a rich
bar (cells done/total, failures) on a terminal, else one line per cell."""

from __future__ import annotations

import sys
from typing import Any

import typer


class SweepProgress:
    """A rich bar (cells done/total, failures) on a terminal, else one line per cell."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.done = 0
        self.failed = 0
        self.total = 0
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> SweepProgress:
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
