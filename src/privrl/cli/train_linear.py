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
NOT_PRIVATE = "Refused on a dataset with a budget ledger (a non-private run would void its budget)."

HELP = {
    "dp-vapvi": """DP-VAPVI (Qiao & Wang, Algorithm 2): ρ-zCDP for one trajectory under replace-one.

    The 5H statistics of variance-aware pessimistic value iteration are released with
    Gaussian noise (ρ/(5H) each); the privacy report lists every release. H, the feature
    table, ρ and δ are public (privacy.json lists each with its source); only the file's
    header is read before the dataset's ledger is checked.
    """,
    "vapvi": f"""VAPVI (Yin et al. 2022): DP-VAPVI's code with the noise off. NOT private.

    {NOT_PRIVATE}
    """,
    "pevi": f"""PEVI (Jin et al. 2021): pessimistic least-squares value iteration. NOT private.

    {NOT_PRIVATE}
    """,
}


def register(app: typer.Typer) -> None:
    """Add this module's commands to `privrl train`."""
    for name, text in HELP.items():
        add_command(app, name, help=text, data_help=DATA_HELP, out_default=Path("runs") / name)
