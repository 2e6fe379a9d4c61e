"""The rich progress bar the data collectors, recipes and trainers show (on stderr's console)."""

from __future__ import annotations

from typing import Any

__all__ = ["rich_progress"]


def rich_progress(
    description: str, *fields: str, remaining: bool = True, transient: bool = True
) -> Any:
    """A `rich.progress.Progress`: the task's `description` column, the bar, n/N, one text
    column per `fields` template, the elapsed time and (with `remaining`) the time left."""
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
    return Progress(*columns, transient=transient)
