"""`privrl online sdp-pe | pe | ucbvi | dp-ucbvi`: online episodic RL with a privacy model.

Each episode is one user. SDP-PE is (ε, δ)-DP in the shuffle model (no trusted server);
DP-UCBVI is ε-JDP with `--privatizer central` (trusted server, binary-tree counts) or ε-LDP with
`--privatizer local`; PE and UCB-VI are the non-private versions. Regret is exact (backward
induction on the true MDP). Every run writes the run-directory contract: config.json,
metrics.json (final cumulative `regret`), metrics.csv (the regret curve), privacy.json and
plots/regret.png.

The commands are generated from the systems' configs (`privrl.systems.online`); the same runs
are `privrl run CONFIG.toml` with `system = "sdp-pe"` (or "pe", "ucbvi", "dp-ucbvi").
"""

from __future__ import annotations

import typer

from privrl.runs.cli import add_command

online_app = typer.Typer(
    name="online",
    help=(
        "Online RL with privacy, one user per episode.\n\n"
        "SDP-PE (shuffle model), PE, UCB-VI and "
        "DP-UCBVI (central / local model). Exact regret; run directory with privacy.json."
    ),
    no_args_is_help=True,
    add_completion=False,
)

add_command(
    online_app,
    "sdp-pe",
    help=(
        "SDP-PE: policy elimination with shuffle-private counts, (ε, δ)-DP in the shuffle "
        "model.\n\nExample: privrl online sdp-pe --env riverswim --episodes 1000000 --epsilon 10 "
        "--out runs/s"
    ),
)
add_command(online_app, "pe")
add_command(online_app, "ucbvi")
add_command(
    online_app,
    "dp-ucbvi",
    help=(
        "DP-UCBVI (Qiao & Wang 2023): UCB-VI on private running counts (pure ε-DP).\n\n"
        "Example: privrl online dp-ucbvi --privatizer local --epsilon 1 --episodes 100000 "
        "--out runs/l"
    ),
)
