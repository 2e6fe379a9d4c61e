"""`privrl train dp-vapvi | vapvi | pevi`: offline RL on linear MDPs (Qiao & Wang; Jin et al.).

The commands are generated from the configs in `privrl.systems.linear` (flags, help,
validation, the run itself); `privrl run CONFIG.toml` with system "dp-vapvi", "vapvi" or
"pevi" is the same run. Data come from ``--data FILE --features SPEC`` or are sampled from the
built-in linear MDP (``--env linear-mdp --episodes K [--instance I]``).
"""

from __future__ import annotations

from pathlib import Path

import typer

from privrl.runs.cli import add_command

DATA_HELP = "Dataset file (privrl HDF5) with integer states."


def register(app: typer.Typer) -> None:
    """Add this module's commands to `privrl train` (their help: `privrl.systems.linear`)."""
    for name in ("dp-vapvi", "vapvi", "pevi"):
        add_command(app, name, data_help=DATA_HELP, out_default=Path("runs") / name)
