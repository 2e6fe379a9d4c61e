"""`privrl train ALGO`: learn a policy from a dataset (or from data sampled from a built-in
environment), following the run-directory contract."""

from __future__ import annotations

import typer

from privrl.cli import train_expert, train_linear, train_mopo, train_primorl, train_tabular

train_app = typer.Typer(
    help=(
        "Learn a policy offline: tabular, linear, model-based or expert-level.\n\n"
        "Every command writes a run directory (--out): config.json, "
        "metrics.json, metrics.csv, privacy.json, plots/, and the learned policy. A private run "
        "on a dataset with a ledger checks the ledger before reading the data."
    ),
    no_args_is_help=True,
)

train_tabular.register(train_app)
train_linear.register(train_app)
train_mopo.register(train_app)
train_primorl.register(train_app)
train_expert.register(train_app)
