"""`privrl train dp-apvi` and `privrl train apvi`: offline RL in tabular MDPs (Qiao & Wang).

The commands are generated from the configs in `privrl.systems.tabular` (flags, help,
validation, the run itself); `privrl run CONFIG.toml` with system "dp-apvi" or "apvi" is the
same run. Every run writes the run-directory contract: config.json, metrics.json,
metrics.csv (per-step diagnostics), privacy.json, plots/*.png and policy.npz.
"""

from __future__ import annotations

from pathlib import Path

import typer

from privrl.runs.cli import add_command

DATA_HELP = "Dataset file (.h5) of tabular episodes."


def register(app: typer.Typer) -> None:
    """Add this module's commands to `privrl train` (their help: `privrl.systems.tabular`)."""
    for name in ("dp-apvi", "apvi"):
        add_command(app, name, data_help=DATA_HELP, out_default=Path("runs") / name)
