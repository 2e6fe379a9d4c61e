"""`privrl eval POLICY --env ID`: evaluate a saved privrl policy in a Gymnasium environment.

A thin command over `privrl.systems.evaluate` (pure post-processing: no dataset, no ledger).
With `--out DIR` the run layer writes the run directory (config.json, metrics.json with
`return_mean` / `return_std`, metrics.csv with one row per episode, privacy.json carrying the
policy's own report over, plots/returns.png); without it the summary is printed and nothing is
written.
"""

from __future__ import annotations

from pathlib import Path

import typer

from privrl.systems.evaluate import EvalConfig, EvalSystem


def eval_cmd(
    policy: Path = typer.Argument(
        ...,
        help="policy.npz (train apvi | dp-apvi), policy.pt (mopo | primorl) or learner.pt "
        "(expert-dp | dp-sgd).",
    ),
    env: str = typer.Option(..., "--env", help="Gymnasium environment id, e.g. FrozenLake-v1."),
    episodes: int = typer.Option(100, "--episodes", "-n", help="Episodes to roll out."),
    max_steps: int = typer.Option(
        None,
        "--max-steps",
        help="Step limit per episode (default: a tabular policy's horizon H, else the "
        "environment's time limit).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the environment (and the policy)."),
    out: Path = typer.Option(None, "--out", "-o", help="Run directory to write (optional)."),
) -> None:
    """Evaluate a saved privrl policy in a Gymnasium environment: mean and std of the return.

    Post-processing: the evaluation spends nothing and carries over the policy's own privacy
    report (the privacy.json of the run directory it sits in); a policy without one is not
    certified (ε = ∞).

    Example: privrl eval runs/fl/policy.npz --env FrozenLake-v1 --episodes 1000
    """
    config = EvalConfig(policy=policy, env=env, episodes=episodes, max_steps=max_steps)
    if seed < 0:
        raise ValueError(f"--seed must be >= 0, got {seed}")
    if out is not None:
        from privrl.runs.layer import RunSpec, execute

        execute(RunSpec(system="eval", config=config, out=out, seed=seed))
        return
    import numpy as np
    from rich.console import Console

    from privrl.runs.system import RunContext

    system = EvalSystem()
    plan = system.plan(config, None)
    ctx = RunContext(seed=seed, plan=plan)
    result = system.run(config, None, np.random.default_rng(seed), ctx)
    console = Console()
    for line in result.summary:
        console.print(line, highlight=False)
    console.print(
        f"privacy (the policy's own, carried over): {result.privacy.summary()}", highlight=False
    )
