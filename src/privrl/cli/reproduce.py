"""`privrl reproduce ID`: regenerate a paper's figure or table and write a markdown report."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from privrl.cli.errors import CliError, check_int, check_out_dir
from privrl.experiments.reproduce import REPRODUCTIONS

MAX_SEEDS = 1000  # the reports use 2-50; a thousand full runs is beyond any documented scale


def reproduce(
    target: str = typer.Argument(None, help="Reproduction id (see --list)."),
    out: Path = typer.Option(
        None, "--out", "-o", help="Output directory (default: docs/reproductions/ID)."
    ),
    seeds: int = typer.Option(
        None, "--seeds", help=f"Number of seeds (default: the report's; at most {MAX_SEEDS})."
    ),
    seed: int = typer.Option(0, "--seed", help="Base seed; seed i uses base + i."),
    quick: bool = typer.Option(
        False, "--quick", help="A small, fast version (for smoke tests; numbers are not final)."
    ),
    list_: bool = typer.Option(False, "--list", help="List the available reproductions."),
) -> None:
    """Regenerate one figure or table of a paper at a documented scale.

    Writes a markdown report (our numbers beside the paper's), its PNG plots, and the run
    directory files (config.json, metrics.json, metrics.csv) to --out.
    """
    if list_ or target is None:
        table = Table(title="privrl reproduce ID")
        for col in ("id", "paper", "what"):
            table.add_column(col)
        for r in REPRODUCTIONS.values():
            table.add_row(r.id, r.paper, r.what)
        Console().print(table)
        return
    if target not in REPRODUCTIONS:
        known = ", ".join(REPRODUCTIONS)
        raise CliError(f"unknown reproduction {target!r}; available: {known}")
    if seeds is not None:
        check_int(seeds, "--seeds", minimum=1, maximum=MAX_SEEDS, why="every seed is a full run")
    check_int(seed, "--seed", minimum=0)
    out = check_out_dir(out or Path("docs") / "reproductions" / target)
    fn = REPRODUCTIONS[target].load()
    report = fn(out, seeds=seeds, seed=seed, quick=quick)
    typer.echo(f"wrote {report}")
