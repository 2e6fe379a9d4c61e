"""`privrl train primorl`: PRIMORL — a dynamics ensemble trained with
trajectory-level (or user-level) DP by DP-FedAvg, a pessimistic model, and SAC inside it with
zero access to the data.

The command is generated from `privrl.systems.primorl.PrimorlRunConfig` and runs on the run
layer: every public parameter is resolved from the flags and the file's header before the
dataset's ledger reserves the planned report (T_max rounds); the run directory is written inside
the ledger transaction, which completes the reservation with the rounds actually run. Public
data is declared (``--public-data`` or the file's metadata), never selected from the private
episodes. ``--model DIR/model.pt`` runs the policy stage only, on the released model:
post-processing, no data, no spend. ``privrl run`` with ``system = "primorl"`` is the same run.
"""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``primorl`` to `privrl train` (its help: `privrl.systems.primorl`)."""
    from privrl.runs.cli import add_command

    add_command(
        app,
        "primorl",
        data_help="Dataset (privrl HDF5) of a control task; not with --model.",
        out_default=Path("runs") / "primorl",
    )
