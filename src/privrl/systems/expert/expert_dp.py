"""`privrl train expert-dp`: the consensus filter + Selective DP-SGD (`privrl.expert.ExpertDP`)
on the run layer.

- `plan` (header only): the expert set's directory (``--experts`` or the metadata's
  ``extra["experts_dir"]``), the twin's run directory (``--reference``), then the library's
  plan (`privrl.expert.planning.plan_expert_dp`: public parameters, budget split, filter
  calibration, step count, planned spend).
- `load` (inside the ledger transaction): the episodes and the expert set, checked against the
  public schema.
- `run`: the library's training (`privrl.expert.api.fit_expert_dp`), evaluated in the recipe's
  environment; learner.pt (+ learner.json) and plots/learning_curve.png.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from privrl.algorithm import Plan
from privrl.config import ConfigError, option
from privrl.expert.config import ExpertDPConfig
from privrl.runs.system import Result, RunContext, System
from privrl.systems.expert.common import (
    Loaded,
    check_one_reference,
    in_command_words,
    load_episodes,
    reference_option,
    run_result,
)
from privrl.systems.expert_public import evaluator, expert_set_path, twin_reference

if TYPE_CHECKING:
    import numpy as np

    from privrl.data.io import DatasetHeader


@dataclass(frozen=True)
class ExpertDpConfig(ExpertDPConfig):
    """`privrl train expert-dp`: `privrl.expert.ExpertDPConfig` and the files a command reads
    (the expert set's directory, the twin's run directory)."""

    experts: Path | None = option(  # noqa: RUF009 - option() returns a field
        None,
        "--experts",
        help="Expert set (directory) of the data (default: the dataset's extra['experts_dir']).",
    )
    reference: Path | None = reference_option()  # noqa: RUF009 - returns a field

    def validate(self) -> None:
        with in_command_words(type(self)):
            super().validate()
        check_one_reference(self.reference, self.reference_return)


class ExpertDp(System):
    """Consensus filter + Selective DP-SGD (Sharma et al.): expert-level (ε, δ)-DP.

    The filter (Algorithm 2, budget ε1, δ1) releases stable trajectory prefixes; training
    (Algorithm 3) takes a private DP-SGD step on the rest with probability p (budget ε2, δ2),
    else an ordinary step on the stable prefixes. Protects one expert with all their
    trajectories (add/remove).
    """

    name = "expert-dp"
    Config = ExpertDpConfig
    data = "required"
    summary = "Consensus filter + Selective DP-SGD (Sharma et al.): expert-level (ε, δ)-DP."

    def plan(self, config: ExpertDpConfig, header: DatasetHeader) -> Plan:
        from privrl.expert.planning import plan_expert_dp

        assert header.path is not None  # --data is required
        experts = expert_set_path(config.experts, Path(header.path), header.metadata)
        with in_command_words(ExpertDpConfig):
            planned = plan_expert_dp(
                config, header, twin_reference(config, config.reference, header)
            )
        public = {
            "command": "privrl train expert-dp",
            **planned.public,
            "experts": str(experts),
        }
        return Plan(planned.report, public, {**planned.facts, "experts": experts})

    def load(
        self, config: ExpertDpConfig, source: Path | None, plan: Plan, rng: np.random.Generator
    ) -> Loaded:
        from privrl.expert.experts import load_experts

        n_actions = plan.facts["resolved"].n_actions
        loaded = load_episodes(source, n_actions, ExpertDpConfig)
        expert_set = load_experts(plan.facts["experts"])  # the experts' policies are private
        if int(expert_set.n_actions) != n_actions:
            raise ConfigError(
                "experts",
                f"hold experts with {expert_set.n_actions} actions but the data have "
                f"{n_actions}; use the expert set that produced this dataset",
            )
        if int(expert_set.obs_dim) != loaded.obs_dim:
            raise ConfigError(
                "experts",
                f"hold experts taking observations of dimension {expert_set.obs_dim} but the "
                f"data have {loaded.obs_dim}; use the expert set that produced this dataset",
            )
        loaded.experts = expert_set
        return loaded

    def run(
        self, config: ExpertDpConfig, data: Loaded, rng: np.random.Generator, ctx: RunContext
    ) -> Result:
        from privrl.expert.api import fit_expert_dp

        assert ctx.plan is not None and data.experts is not None
        r = ctx.plan.facts["resolved"]
        first = ctx.seed if config.eval_seed is None else config.eval_seed
        with in_command_words(ExpertDpConfig):
            fitted = fit_expert_dp(
                config,
                ctx.plan,
                data.dataset,
                data.experts,
                seed=ctx.seed,
                noise=ctx.noise,
                evaluate=evaluator(r.meta, r.eval_info, first, step=config.eval_seed_step),
                progress=ctx.progress,
            )
        title = f"expert-dp {config.algo} (ε = {ctx.plan.public['epsilon']:g})"
        return run_result(fitted, title=title)
