"""`privrl ledger`: bind a total privacy budget to a dataset and show what has been spent."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from privrl.cli.errors import CliError, check_delta, check_epsilon
from privrl.privacy.ledger import LEDGER_SUFFIX, BudgetLedger, open_ledger, registry_dir
from privrl.privacy.units import parse_relation, parse_unit
from privrl.runs.rundir import settle_reservation

ledger_app = typer.Typer(
    help=(
        "Privacy budget ledgers: one total budget for a dataset's episodes.\n\n"
        "A ledger belongs to a dataset's episodes (their content "
        "fingerprint), so copies, renames and re-exports of the same episodes share one budget. "
        "It records every private run on them and refuses a run that would exceed the total "
        "budget. Spends compose through the accountant, not by adding epsilons. A run "
        "reserves its spend before it reads the data; `settle` settles a reservation whose "
        "run died."
    ),
    no_args_is_help=True,
)


@ledger_app.command("init")
def init(
    dataset: Path = typer.Argument(..., help="Dataset file (.h5) the budget belongs to."),
    *,
    epsilon: float = typer.Option(
        ..., "--epsilon", "-e", help="Total epsilon for this dataset (1e-6 to 100)."
    ),
    delta: float = typer.Option(
        ..., "--delta", "-d", help="Total delta for this dataset, in (0, 1)."
    ),
    unit: str = typer.Option(
        "trajectory", "--unit", help="Privacy unit: transition, trajectory, user or expert."
    ),
    relation: str = typer.Option(
        "add_remove", "--relation", help="Neighbouring relation: add_remove or replace_one."
    ),
    backend: str = typer.Option("rdp", "--backend", help="Accountant for composition: rdp or pld."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace the existing ledger of these episodes (forgets every recorded spend).",
    ),
) -> None:
    """Create the ledger `DATASET.ledger.json` with a total (epsilon, delta) budget.

    The ledger is registered under the episodes' fingerprint (in $PRIVRL_LEDGER_REGISTRY,
    default ~/.local/share/privrl/ledgers) and the dataset file is marked as ledgered (root
    attribute `privrl_ledger`), so copies of it are covered too.
    """
    if not dataset.is_file():
        raise CliError(f"dataset file not found: {dataset}")
    check_epsilon(epsilon)
    check_delta(delta)
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
        f"ledger created: {ledger.path} (ε = {epsilon:g}, δ = {delta:g}, {unit}, {relation}; "
        f"id {(ledger.ledger_id or '')[:12]}…), registered in {registry_dir()}"
    )


@ledger_app.command("show")
def show(
    dataset: Path = typer.Argument(..., help="Dataset file (or its .ledger.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print the ledger as JSON."),
) -> None:
    """Show a dataset's budget, every recorded spend, what remains, and the files known to
    hold the same episodes."""
    ledger = open_ledger(dataset)
    if as_json:
        typer.echo(json.dumps(ledger.to_dict(), indent=2, default=str))
        return
    Console().print(ledger.to_table())


@ledger_app.command("verify")
def verify(
    dataset: Path = typer.Argument(..., help="Dataset file (.h5)."),
) -> None:
    """Check a dataset against its ledger in full: the ledger's hash chain and registry entry,
    and the episodes, re-hashed from the arrays (reads the whole file; a run only checks the
    fingerprint stored in the file)."""
    if dataset.name.endswith(LEDGER_SUFFIX):
        raise CliError(f"pass the dataset file, not its ledger: {dataset}")
    ledger = open_ledger(dataset)
    ledger.verify(dataset)
    typer.echo(
        f"ok: {dataset} holds the episodes of ledger {ledger.path} "
        f"({len(ledger.entries)} recorded run(s), hash chain intact)"
    )


@ledger_app.command("settle")
def settle(
    dataset: Path = typer.Argument(..., help="Dataset file (or its .ledger.json)."),
    run_id: str = typer.Argument(..., help="The reserved run's id (see `privrl ledger show`)."),
    *,
    complete: bool = typer.Option(False, "--complete", help="Keep the spend (always safe)."),
    release: bool = typer.Option(
        False, "--release", help="Give the spend back: nothing of the run was ever published."
    ),
    reason: str = typer.Option("", "--reason", help="Why nothing was published (--release)."),
) -> None:
    """Settle a reservation whose run died ("reserved, outcome unknown" in `ledger show`).

    A run reserves its spend before it reads the data and completes it once its run directory
    is published; a run killed in between keeps counting in full, since the ledger cannot know
    what left the process. --complete keeps the spend: choose it whenever the run directory
    exists, may have been copied, or you are unsure. --release --reason TEXT gives it back,
    which is right only if nothing the run derived from the data was ever seen (no run
    directory, no copy, no log of results); it is refused while the run directory (non-empty)
    or a staging folder beside it exists. Never settle a run that is still running.
    """
    if complete == release:
        raise CliError("give exactly one of --complete (keep the spend) or --release")
    entry = settle_reservation(open_ledger(dataset), run_id, complete=complete, reason=reason)
    typer.echo(f"settled {run_id}: {entry.kind} ({'counts' if complete else 'no longer counts'})")
