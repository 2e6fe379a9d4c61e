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
    """Add this module's commands to `privrl train`."""
    add_command(
        app,
        "dp-apvi",
        data_help=DATA_HELP,
        out_default=Path("runs/dp-apvi"),
        help="""DP-APVI (Qiao & Wang, Algorithm 1): pessimistic value iteration on private counts.

    Protects one whole trajectory under replace-one neighbours: ρ-zCDP with --rho (Gaussian
    noise σ² = 2H/ρ on the counts), or ε-DP with --epsilon (Laplace(4H/ε)). With --data the
    rewards are private: pass --reward-table (a public reward function) or --privatize-rewards.

    Examples:

      privrl train dp-apvi --env random-tabular --episodes 20000 --rho 1

      privrl train dp-apvi --data trips.h5 -H 10 --rho 1 --privatize-rewards
    """,
    )
    add_command(
        app,
        "apvi",
        data_help=DATA_HELP,
        out_default=Path("runs/apvi"),
        help="""APVI (Yin & Wang 2021): the NON-PRIVATE baseline — DP-APVI's code with no noise.

    Its privacy.json says it is not private (ε = ∞). A dataset with a ledger refuses it.
    Without --reward-table the rewards are the empirical means of the data.
    """,
    )
