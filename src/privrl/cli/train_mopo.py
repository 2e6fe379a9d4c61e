"""`privrl train mopo`: MOPO (Yu et al. 2020), PRIMORL's non-private baseline, on a
continuous-control dataset (``privrl data collect --recipe primorl-pendulum`` and friends).

The command is generated from `privrl.systems.mopo.MopoRunConfig` (flags, help, validation)
and runs on the run layer (`privrl.runs.layer.execute`): the dataset's header → the run's
configuration → the ledger (any ledger refuses a non-private run, before a record is read) →
the episodes → MOPO → the run directory: config.json, metrics.json (``return_mean``,
``return_std``, ``normalised_score``), metrics.csv (one row per SAC epoch),
plots/learning_curve.png, privacy.json (ε = ∞), policy.pt (reload with
``privrl.rl.sac.SAC.from_state_dict(torch.load(...))``) and the checkpoints (dynamics.pt,
checkpoint.pt, run.json). A rerun with the same configuration and ``--out`` resumes
automatically; ``--resume`` insists on it. ``privrl run`` with ``system = "mopo"`` is the same
run.
"""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``mopo`` to `privrl train`."""
    from privrl.runs.cli import add_command

    add_command(
        app,
        "mopo",
        data_help="Dataset file (privrl HDF5) of a control task.",
        out_default=Path("runs") / "mopo",
    )
