"""`privrl reproduce ID`: regenerate a paper's figure or table and write a markdown report.

The reproductions are not installed with privrl: the command loads them from the checkout it
runs in (`privrl.runs.checkout`) and writes to that checkout's docs/reproductions/ID."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from privrl.runs.checkout import load_reproductions

MAX_SEEDS = 1000  # the reports use 2-50; a thousand full runs is beyond any documented scale


def reproduce(
    target: str = typer.Argument(
        None, help="Reproduction id (see --list), or 'all' (every report, then the gallery)."
    ),
    *,
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="Output directory (default: the checkout's docs/reproductions/ID).",
    ),
    seeds: int = typer.Option(
        None, "--seeds", help=f"Number of seeds (default: the report's; at most {MAX_SEEDS})."
    ),
    seed: int = typer.Option(0, "--seed", help="Base seed; seed i uses base + i."),
    quick: bool = typer.Option(
        False, "--quick", help="A small, fast version (for smoke tests; numbers are not final)."
    ),
    backend: str = typer.Option(
        "local",
        "--backend",
        help="local | ray: where the reproduction runs its cells (every reproduction runs on "
        "the sweep runner; `reproduce all --backend ray` regenerates every report on Ray).",
    ),
    workers: int = typer.Option(
        None, "--workers", "-j", help="Parallel cells (default: the CPU count)."
    ),
    address: str = typer.Option(
        None,
        "--address",
        help="With --backend ray: the Ray cluster to send the cells to (HOST:PORT, as `ray "
        "start --head` prints), instead of a local instance.",
    ),
    tasks: str = typer.Option(
        None, "--tasks", help="primorl-table1: only these tasks (e.g. balance, pendulum,balance)."
    ),
    list_: bool = typer.Option(False, "--list", help="List the available reproductions."),
    index: bool = typer.Option(
        False,
        "--index",
        help="Regenerate the gallery docs/reproductions/index.md (under --out if given) from "
        "every reproduction's claims.json.",
    ),
) -> None:
    """Regenerate one figure or table of a paper at a documented scale.

    Writes a markdown report (our numbers beside the paper's), its PNG plots, and the run
    directory files (config.json, metrics.json, metrics.csv) to --out, and the report's claims
    (claims.json) that `privrl reproduce --index` collects into the gallery. Runs from a
    checkout of the privrl repository (the reproductions are not installed with the package).
    """
    registry = load_reproductions()
    if index:
        if target is not None:
            raise ValueError(
                f"--index takes no reproduction id (got {target!r}); run "
                "`privrl reproduce --index` alone"
            )
        typer.echo(f"wrote {registry.write_index(out)}")
        return
    if list_ or target is None:
        Console().print(registry.reproductions_table())
        return
    report = registry.reproduce(
        target,
        out,
        seeds=seeds,
        seed=seed,
        quick=quick,
        backend=backend,
        workers=workers,
        address=address,
        tasks=tasks,
    )
    typer.echo(f"wrote {report}")
