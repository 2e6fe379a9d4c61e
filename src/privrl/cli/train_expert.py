"""`privrl train expert-dp` and `privrl train dp-sgd`: offline RL with expert-level privacy
(Sharma et al.), generated from their configs on the run layer.

The settings and their privacy rules are the library's (`privrl.expert.ExpertDPConfig`,
`privrl.expert.DPSGDConfig`); the run layer reaches them through `privrl.systems.expert`
(`ExpertDpConfig`, `DpSgdConfig` add the files a command reads). `privrl run CONFIG.toml` with
``system = "expert-dp"`` or ``"dp-sgd"`` runs the same thing from a file. ``--out`` defaults to
``runs/<command>``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from privrl.runs.cli import add_command

_DATA_HELP = "Dataset file (.h5) with the expert id of every episode."


def register(app: typer.Typer) -> None:
    """Add this module's commands to `privrl train`."""
    from privrl.systems.expert import DpSgd, ExpertDp

    for system in (ExpertDp, DpSgd):
        add_command(
            app,
            system.name,
            help=system.__doc__,
            data_help=_DATA_HELP,
            out_default=Path("runs") / system.name,
        )
