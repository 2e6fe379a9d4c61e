"""`privrl eval POLICY --env ID`: the run layer's adapter over `privrl.rl.evaluation.Evaluate`.

Pure post-processing (no dataset, no ledger, nothing spent): the plan is `Evaluate.plan` (the
policy loaded in any form and checked against the environment, the inherited privacy report),
the run its `estimate`; this module adds the run directory's rows (one per episode), the plot
and the console lines. What the evaluation reads and reports is described in
`privrl.rl.evaluation` and docs/data.md ("Saved policies and `privrl eval`").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from privrl.rl.evaluation import EvalConfig, Evaluate, Returns, evaluate_policy, policy_report
from privrl.rl.policy_files import LoadedPolicy, load_any_policy, load_policy
from privrl.runs.system import Plan, PlotSpec, Result, RunContext, Series, System

if TYPE_CHECKING:
    from privrl.data.io import DatasetHeader

__all__ = [
    "EvalConfig",
    "EvalSystem",
    "LoadedPolicy",
    "evaluate_policy",
    "load_any_policy",
    "load_policy",
    "policy_report",
]


class EvalSystem(System):
    name = "eval"
    Config = EvalConfig
    data = "none"
    summary = "Evaluate a policy in a Gymnasium environment (post-processing)."

    def plan(self, config: EvalConfig, header: DatasetHeader | None) -> Plan:
        return Evaluate(config).plan()

    def run(
        self, config: EvalConfig, data: None, rng: np.random.Generator, ctx: RunContext
    ) -> Result:
        assert ctx.plan is not None
        result = Evaluate(config).estimate(seed=ctx.seed, plan=ctx.plan, progress=ctx.progress)
        out: Returns = result.details
        kind = str(result.metrics["policy_kind"])
        n = out.episodes
        curve = [
            {"episode": i + 1, "return": float(r), "length": int(k)}
            for i, (r, k) in enumerate(zip(out.returns, out.lengths, strict=True))
        ]
        running = np.cumsum(out.returns) / np.arange(1, n + 1)
        plot = PlotSpec(
            name="returns",
            title=f"{config.env}: {kind} policy",
            xlabel="episode",
            ylabel="return",
            series=[
                Series("return", list(range(1, n + 1)), out.returns.tolist(), style="."),
                Series("running mean", list(range(1, n + 1)), running.tolist()),
            ],
        )
        summary = [
            f"{config.env}: {kind} policy"
            + ("" if str(config.policy).strip() == kind else f" {config.policy}"),
            *out.notes,
            f"return: {out.mean:.4f} ± {out.std:.4f} (std) over {n} episodes "
            f"(± {out.stderr:.4f} standard error); mean length "
            f"{float(out.lengths.mean()):.1f} of at most {out.max_steps} steps",
            *(note for note in result.report.notes if note.startswith("not certified")),
        ]
        return Result(
            metrics=dict(result.metrics),
            privacy=result.report,
            curve=curve,
            plots={"returns": plot},
            summary=summary,
        )


def evaluate_command(config: EvalConfig, seed: int, out: Path | None) -> None:
    """`privrl eval`: with `out`, the run layer writes the run directory; without it, the
    summary and the carried-over privacy line are printed and nothing is written."""
    if out is not None:
        from privrl.runs.layer import RunSpec, execute

        execute(RunSpec(system="eval", config=config, out=out, seed=seed))
        return
    from rich.console import Console

    from privrl.runs.progress import progress_bars

    system = EvalSystem()
    plan = system.plan(config, None)
    with progress_bars() as progress:
        ctx = RunContext(seed=seed, plan=plan, progress=progress)
        result = system.run(config, None, np.random.default_rng(seed), ctx)
    console = Console()
    for line in result.summary:
        console.print(line, highlight=False)
    console.print(
        f"privacy (the policy's own, carried over): {result.privacy.summary()}", highlight=False
    )
