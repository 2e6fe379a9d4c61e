"""Progress bars: the one place that draws them (rich, on stderr).

Library code reports progress through a `privrl.progress.Progress` callback,
`progress(label, done, total)`, and never draws; the application layer turns the callback into
bars here: `progress_bars()` for any library call, `rich_progress` for a bar with extra
columns (the dataset recipes).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from privrl.progress import Progress, no_progress

__all__ = ["progress_bars", "rich_progress"]


def rich_progress(
    description: str, *fields: str, remaining: bool = True, transient: bool = True
) -> Any:
    """A `rich.progress.Progress`: the task's `description` column, the bar, n/N, one text
    column per `fields` template, the elapsed time and (with `remaining`) the time left."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns: list[Any] = [TextColumn(description), BarColumn(), MofNCompleteColumn()]
    columns += [TextColumn(f) for f in fields]
    columns.append(TimeElapsedColumn())
    if remaining:
        columns.append(TimeRemainingColumn())
    return Progress(*columns, transient=transient, console=Console(stderr=True))


@contextmanager
def progress_bars(enabled: bool = True, *, transient: bool = True) -> Iterator[Progress]:
    """A `Progress` callback that draws one bar per label while the block runs (a no-op when
    not `enabled` or when stderr is not a terminal)."""
    if not enabled or not sys.stderr.isatty():
        yield no_progress
        return
    bars = rich_progress("[progress.description]{task.description}", transient=transient)
    tasks: dict[str, Any] = {}

    def update(label: str, done: int, total: int) -> None:
        if label not in tasks:
            tasks[label] = bars.add_task(label, total=total)
        bars.update(tasks[label], completed=done, total=total)

    with bars:
        yield update
