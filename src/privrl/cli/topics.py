"""`privrl help TOPIC`: the grammars too long for an option's one-line help (the texts are
`privrl.runs.import_help`)."""

from __future__ import annotations

import typer

from privrl.cli.errors import CliError
from privrl.runs.import_help import COLUMNS, SPACES

TOPICS: dict[str, tuple[str, str]] = {
    "columns": ("the --columns mapping of `data import` (tables)", COLUMNS),
    "spaces": ("declared observation and action spaces", SPACES),
}


def help_topic(
    topic: str = typer.Argument(None, help="A topic (omit to list them)."),
) -> None:
    """Explain a grammar in full: `privrl help columns`, `privrl help spaces`."""
    if topic is None:
        for name, (summary, _) in TOPICS.items():
            typer.echo(f"{name:10s} {summary}")
        return
    if topic not in TOPICS:
        raise CliError(f"unknown help topic {topic!r}; topics: {', '.join(TOPICS)}")
    typer.echo(TOPICS[topic][1], nl=False)
