"""`privrl demo`."""

from __future__ import annotations

from pathlib import Path

import typer

from privrl.cli.errors import CliError

SYSTEMS = ("apvi", "primorl")


def demo(
    out: Path = typer.Option(
        None, "--out", "-o", help="Run directory to write (default runs/demo[-primorl])."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed for the MDP, the data and the noise."),
    system: str = typer.Option(
        "apvi",
        "--system",
        help="apvi: private counts of a random tabular MDP (seconds) | primorl: a short "
        "private PRIMORL run on Pendulum (minutes).",
    ),
    episodes: int = typer.Option(
        None,
        "--episodes",
        "-n",
        help="apvi: trajectories to sample (default 20000; must fit in memory).",
    ),
    epsilon: float = typer.Option(
        None, "--epsilon", help="primorl: target ε of the run (default 5; δ = 1e-5)."
    ),
    total_epsilon: float = typer.Option(
        6.0, "--total-epsilon", help="Total budget bound to the demo dataset's ledger."
    ),
) -> None:
    """A private run end to end, with its privacy report and its ledger.

    --system apvi (default): samples trajectories from a random tabular MDP, binds a budget
    ledger to the dataset, releases the counts n_h(s,a,s') with the Gaussian mechanism (one
    trajectory, replace-one) at several ε, and reports the private model's error and the
    suboptimality of the policy planned in it. Writes config.json, metrics.json, metrics.csv,
    privacy.json and plots/demo.png to --out.

    --system primorl: builds (once, then cached in $PRIVRL_CACHE/data) a small Pendulum
    dataset with the PRIMORL recipe, copies it to --out/data.h5 with a fresh ledger, runs
    `privrl train primorl` on it at target ε (trajectory-level, add/remove) into --out/run/
    (an earlier demo's run there is replaced), and prints what was released, its ε, the
    ledger and the policy's return beside the dataset's references. A few minutes on 2 cores.
    """
    if system not in SYSTEMS:
        raise CliError(f"--system must be one of {', '.join(SYSTEMS)}, got {system!r}")
    from privrl.runs import demo as lib

    if system == "primorl":
        if episodes is not None:
            raise CliError(
                "--episodes goes with --system apvi; the primorl demo's dataset is fixed "
                "(10,000 Pendulum trajectories)"
            )
        out = out or Path("runs/demo-primorl")
        cfg = lib.primorl_demo_config(out, seed=seed, epsilon=epsilon, total_epsilon=total_epsilon)
        lib.run_primorl_demo(cfg, out)
        typer.echo(f"wrote {out}/ (data.h5 and its ledger; run/ with the run directory)")
        return
    if epsilon is not None:
        raise CliError(
            "--epsilon goes with --system primorl; the apvi demo releases at ε = 0.25 … 4 "
            "(bound them with --total-epsilon)"
        )
    out = out or Path("runs/demo")
    episodes = 20_000 if episodes is None else episodes
    config = lib.demo_config(out, episodes=episodes, seed=seed, total_epsilon=total_epsilon)
    lib.run_demo(config, out)
    typer.echo(
        f"wrote {out}/ (config.json, metrics.json, metrics.csv, privacy.json, plots/demo.png)"
    )
