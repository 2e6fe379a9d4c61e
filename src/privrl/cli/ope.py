"""`privrl ope ALGO`: (private) off-policy evaluation with linear features.

    privrl ope gpope  --env chain --trajectories 1000 --epsilon 0.1 --out runs/gp
    privrl ope gpope  --data data.h5 --target-policy uniform --features fourier:5 \\
                      --epsilon 1 --clip 0.5 --step-size 0.01 --out runs/gp
    privrl ope dp-lsw --env chain --trajectories 1000 --epsilon 0.1 --out runs/v1
    privrl ope lstd   --env mountain-car --trajectories 200 --out runs/lstd
    privrl ope ips    --data logs.h5 --target-policy uniform --reward-range 0,1 \\
                      --weight-clip 20 --max-horizon 1 --epsilon 1 --out runs/ips
    privrl ope ips    --data logs.h5 --target-policy uniform --reward-range 0,1 \\
                      --weight-clip 20 --max-horizon 1 --non-private --out runs/ref
    privrl ope pdis   --data episodes.h5 --target-policy pi.npy --reward-range 0,1 \\
                      --weight-clip 50 --max-horizon 30 --epsilon 1 --out runs/pdis

The commands are generated from the systems' configs (`privrl.systems.ope`, which documents
the run directory, the order of work and the privacy unit); `privrl run CONFIG.toml` runs the
same systems from a file.
"""

from __future__ import annotations

import typer

from privrl.cli.suggest_clip import suggest_clip
from privrl.runs.cli import add_command

ope_app = typer.Typer(
    help=(
        "Off-policy evaluation of a target policy, private for one whole trajectory.\n\n"
        "With linear features: GPOPE and the output-perturbation baselines DP-LSW and DP-LSL "
        "(non-private LSTD for reference). Use --data FILE for your own dataset or "
        "--env chain|mountain-car|hiv to sample one from a built-in domain (then the MSPBE is "
        "reported). For logs with propensities (bandit logs, short episodes): private IPS, "
        "SNIPS and DR, and per-decision PDIS and WPDIS for longer episodes, which report the "
        "policy's value with a confidence interval (--non-private: the non-private reference)."
    ),
    no_args_is_help=True,
)

DATA_HELP = "Dataset file (privrl HDF5) to evaluate on (or --env to sample one)."

for _name in ("gpope", "dp-lsw", "dp-lsl", "lstd"):
    add_command(ope_app, _name, data_help=DATA_HELP)
add_command(ope_app, "lstd-op", data_help=DATA_HELP)
add_command(ope_app, "ips", data_help="Dataset file (privrl HDF5) with logged propensities.")
add_command(ope_app, "snips", data_help="Dataset file (privrl HDF5) with logged propensities.")
add_command(ope_app, "dr", data_help="Dataset file (privrl HDF5) with logged propensities.")
ope_app.command("suggest-clip")(suggest_clip)
add_command(ope_app, "pdis", data_help="Dataset file (privrl HDF5) with logged propensities.")
add_command(ope_app, "wpdis", data_help="Dataset file (privrl HDF5) with logged propensities.")
