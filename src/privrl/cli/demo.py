"""`privrl demo`."""

from __future__ import annotations

from pathlib import Path

import typer


def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", "-o", help="Run directory to write."),
    seed: int = typer.Option(0, "--seed", help="Seed for the MDP, the data and the noise."),
    episodes: int = typer.Option(
        20_000, "--episodes", "-n", help="Trajectories to sample (must fit in memory)."
    ),
    total_epsilon: float = typer.Option(
        6.0, "--total-epsilon", help="Total budget bound to the demo dataset's ledger."
    ),
) -> None:
    """Release a random MDP's transition counts privately at several ε and see what it costs.

    Samples trajectories from a random tabular MDP, binds a budget ledger to the dataset,
    releases the counts n_h(s,a,s') with the Gaussian mechanism (one trajectory, replace-one),
    and reports the private model's error and the suboptimality of the policy planned in it.
    Writes config.json, metrics.json, metrics.csv, privacy.json and plots/demo.png to --out.
    """
    from privrl.experiments import demo as lib

    config = lib.demo_config(out, episodes=episodes, seed=seed, total_epsilon=total_epsilon)
    lib.run_demo(config, out)
    typer.echo(
        f"wrote {out}/ (config.json, metrics.json, metrics.csv, privacy.json, plots/demo.png)"
    )
