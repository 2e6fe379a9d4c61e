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

from pathlib import Path

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
    from privrl.runs import sweep as sweeps
    from privrl.runs.console import note_output
    from privrl.runs.sweep_progress import SweepProgress

    try:
        spec = sweeps.load_sweep(grid, out=out)
        spec = sweeps.with_options(spec, backend=backend, workers=workers, address=address)
        note_output(spec.out)
    except sweeps.SweepError as exc:  # (a problem of the file itself already names it)
        text = str(exc)
        raise CliError(text if text.startswith(f"{grid} ") else f"{grid}: {text}") from None
    if dry_run:
        for cell in spec.cells:
            state = "done" if sweeps.finished(cell) else "todo"
            typer.echo(f"{cell.name}  {state}  {cell.label()}")
        return
    with SweepProgress() as progress:
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
