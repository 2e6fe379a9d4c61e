"""`privrl train primorl`: PRIMORL (paper 000) — a dynamics ensemble trained with
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

HELP = """PRIMORL: trajectory-level private model-based offline RL (paper 000). DP-FedAvg trains
the dynamics ensemble (the one release); SAC then learns in the pessimistic model without
touching the data.

Examples:
  privrl train primorl --data primorl-pendulum.h5 --variant high --out runs/hi
  privrl train primorl --data D.h5 --epsilon 5 --out runs/e5   # z calibrated
  privrl train primorl --data D.h5 --public-data P.h5 --epsilon 5 --out runs/p
  privrl train primorl --data D.h5 -z 0.52 --steps 7000 --clip 0.02 \\
      --trajectories 30000
  privrl train primorl --data users.h5 --unit user --users 500 --epsilon 8
  privrl train primorl --model runs/hi/model.pt --epochs 50 --out runs/again

Public data is declared, never chosen from the private episodes: --public-data FILE (same
task and spaces, no ledger), else the episodes D.h5's metadata declares public
(`privrl data declare-public`; the primorl recipes declare 1% / 10%), else none:
the input normaliser comes from the declared observation/action bounds (an unbounded space is
refused), all --steps rounds run and every ensemble member is an elite. The guarantee covers
every trajectory (user) of --data except the public data, which is not protected.

Writes config.json, metrics.json (return_mean, return_std, normalised_score, epsilon,
delta), metrics.csv (per SAC epoch), model_holdout.csv, privacy.json (one release),
model.pt, policy.pt and plots/. A rerun with the same flags and --out resumes.
"""


def register(app: typer.Typer) -> None:
    """Add ``primorl`` to `privrl train`."""
    from privrl.runs.cli import add_command

    add_command(
        app,
        "primorl",
        help=HELP,
        data_help="Dataset (privrl HDF5) of a control task; not with --model.",
        out_default=Path("runs") / "primorl",
    )
