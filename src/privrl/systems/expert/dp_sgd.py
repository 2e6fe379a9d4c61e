"""`privrl train dp-sgd`: expert-level DP-SGD (`privrl.expert.DPSGD`, the paper's baseline) on
the run layer; ``--non-private`` runs its non-private twin, the reference of the normalised
score.

- `plan` (header only): the twin's run directory (``--reference``), then the library's plan
  (`privrl.expert.planning.plan_dp_sgd`: public parameters, step count, planned spend).
- `load` (inside the ledger transaction): the episodes, checked against the public schema.
- `run`: the library's training (`privrl.expert.api.fit_dp_sgd`), evaluated in the recipe's
  environment; learner.pt (+ learner.json) and plots/learning_curve.png.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from privrl.algorithm import Plan
from privrl.expert.config import DPSGDConfig
from privrl.runs.system import Result, RunContext, System
from privrl.systems.expert.common import (
    Loaded,
    check_one_reference,
    in_command_words,
    load_episodes,
    reference_option,
    run_result,
)
from privrl.systems.expert_public import evaluator, twin_reference

if TYPE_CHECKING:
    import numpy as np

    from privrl.data.io import DatasetHeader


@dataclass(frozen=True)
class DpSgdConfig(DPSGDConfig):
    """`privrl train dp-sgd`: `privrl.expert.DPSGDConfig` and the twin's run directory."""

    reference: Path | None = reference_option()  # noqa: RUF009 - returns a field

    def validate(self) -> None:
        with in_command_words(type(self)):
            super().validate()
        check_one_reference(self.reference, self.reference_return)


class DpSgd(System):
    """Expert-level DP-SGD (Sharma et al., Algorithm 4), the paper's baseline.

    Each step Poisson-samples experts (rate b/m), takes one transition of each, clips the
    per-example gradients to C, adds N(0, σ²C²) and divides by b; steps until ε is spent.
    """

    name = "dp-sgd"
    Config = DpSgdConfig
    data = "required"
    summary = "Expert-level DP-SGD (Sharma et al., Algorithm 4), the paper's baseline."

    def plan(self, config: DpSgdConfig, header: DatasetHeader) -> Plan:
        from privrl.expert.planning import plan_dp_sgd

        with in_command_words(DpSgdConfig):
            twin = twin_reference(config, config.reference, header)
            planned = plan_dp_sgd(config, header, twin)
        public = {"command": "privrl train dp-sgd", **planned.public}
        return Plan(planned.report, public, planned.facts)

    def load(
        self, config: DpSgdConfig, source: Path | None, plan: Plan, rng: np.random.Generator
    ) -> Loaded:
        # the non-private twin needs no expert ids: it trains on all transitions
        n_actions = plan.facts["resolved"].n_actions
        return load_episodes(source, n_actions, DpSgdConfig, units=not config.non_private)

    def run(
        self, config: DpSgdConfig, data: Loaded, rng: np.random.Generator, ctx: RunContext
    ) -> Result:
        from privrl.expert.api import fit_dp_sgd

        assert ctx.plan is not None
        r = ctx.plan.facts["resolved"]
        first = ctx.seed if config.eval_seed is None else config.eval_seed
        with in_command_words(DpSgdConfig):
            fitted = fit_dp_sgd(
                config,
                ctx.plan,
                data.dataset,
                seed=ctx.seed,
                noise=ctx.noise,
                evaluate=evaluator(r.meta, r.eval_info, first, step=config.eval_seed_step),
                progress=ctx.progress,
            )
        title = f"{'non-private' if config.non_private else 'DP-SGD'} {config.algo}"
        if not config.non_private:
            title += f" (ε = {ctx.plan.public['epsilon']:g})"
        return run_result(fitted, title=title)
