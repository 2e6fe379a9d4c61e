"""`privrl ledger`: bind a total privacy budget to a dataset and show what has been spent."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from privrl.cli.errors import CliError
from privrl.privacy.ledger import BudgetLedger
from privrl.privacy.units import parse_relation, parse_unit

ledger_app = typer.Typer(
    help=(
        "Privacy budget ledgers. A ledger bound to a dataset file records every private run on "
        "it and refuses a run that would exceed the dataset's total budget. Spends compose "
        "through the accountant, not by adding epsilons."
    ),
    no_args_is_help=True,
)


@ledger_app.command("init")
def init(
    dataset: Path = typer.Argument(..., help="Dataset file the budget belongs to."),
    epsilon: float = typer.Option(..., "--epsilon", "-e", help="Total epsilon for this dataset."),
    delta: float = typer.Option(..., "--delta", "-d", help="Total delta for this dataset."),
    unit: str = typer.Option(
        "trajectory", "--unit", help="Privacy unit: transition, trajectory, user or expert."
    ),
    relation: str = typer.Option(
        "add_remove", "--relation", help="Neighbouring relation: add_remove or replace_one."
    ),
    backend: str = typer.Option("rdp", "--backend", help="Accountant for composition: rdp or pld."),
    force: bool = typer.Option(
        False, "--force", help="Replace an existing ledger (loses history)."
    ),
) -> None:
    """Create the ledger `DATASET.ledger.json` with a total (epsilon, delta) budget."""
    if not dataset.is_file():
        raise CliError(f"dataset file not found: {dataset}")
    if epsilon <= 0:
        raise CliError(f"--epsilon must be > 0, got {epsilon}")
    if not 0 < delta < 1:
        raise CliError(f"--delta must be in (0, 1), got {delta}")
    if backend not in ("rdp", "pld"):
        raise CliError(f"--backend must be rdp or pld, got {backend!r}")
    ledger = BudgetLedger.init(
        dataset,
        epsilon=epsilon,
        delta=delta,
        unit=parse_unit(unit),
        relation=parse_relation(relation),
        backend=backend,
        overwrite=force,
    )
    typer.echo(
        f"ledger created: {ledger.path} (ε = {epsilon:g}, δ = {delta:g}, {unit}, {relation})"
    )


@ledger_app.command("show")
def show(
    dataset: Path = typer.Argument(..., help="Dataset file (or its .ledger.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print the ledger as JSON."),
) -> None:
    """Show a dataset's budget, every recorded spend, and what remains."""
    if dataset.name.endswith(".ledger.json"):
        ledger = BudgetLedger.load(dataset)
    else:
        if not dataset.exists():
            raise CliError(f"dataset file not found: {dataset}")
        ledger = BudgetLedger.for_dataset(dataset)
        if ledger is None:
            raise CliError(
                f"no ledger for {dataset}; create one with "
                f"'privrl ledger init {dataset} --epsilon E --delta D'"
            )
    if as_json:
        typer.echo(json.dumps(ledger.to_dict(), indent=2, default=str))
        return
    Console().print(ledger.to_table())
