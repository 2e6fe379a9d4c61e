"""`privrl ope lstd`: non-private LSTD(0), a reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from privrl.config import option
from privrl.runs.system import Plan, Result, RunContext
from privrl.systems.ope.common import (
    OpeConfig,
    OpeSystem,
    Problem,
    ope_result,
    public_problem,
    value_metrics,
)


@dataclass(frozen=True)
class LstdConfig(OpeConfig):
    """Non-private LSTD(0), off-policy with per-step importance ratios ρ."""

    system: ClassVar[str] = "lstd"

    weighting: Literal["pooled", "trajectory"] = option(
        "pooled",
        help="pooled (Bradtke & Barto) or trajectory (per-trajectory averages, GPOPE's target).",
    )


# ------------------------------------------------------------------------ lstd


class Lstd(OpeSystem):
    name = "lstd"
    Config = LstdConfig
    summary = "Non-private LSTD(0) (off-policy with per-step ρ) — a reference, NOT private."

    def plan(self, config: LstdConfig, header: Any | None, *, seed: int = 0) -> Plan:
        from privrl.ope.baselines import RELATION, UNIT
        from privrl.privacy.public import PublicParameters
        from privrl.privacy.report import PrivacyReport

        params = PublicParameters()
        problem = public_problem(config, header, params, seed)
        report = PrivacyReport.non_private(
            UNIT, RELATION, system="lstd", notes=["non-private reference (LSTD(0))"]
        ).with_public_parameters(params)
        # A dataset with a ledger refuses a non-private run, before its episodes are read.
        return self.finish(problem, report, {"algorithm": "lstd", "weighting": config.weighting})

    def run(
        self, config: LstdConfig, data: Any, rng: np.random.Generator, ctx: RunContext
    ) -> Result:
        from privrl.ope.lstd import lstd

        assert ctx.plan is not None
        problem: Problem = ctx.plan.facts["problem"]
        theta = lstd(
            data,
            problem.features,
            problem.gamma,
            target_policy=problem.target_policy,
            weighting=config.weighting,
        )
        metrics = value_metrics(
            problem,
            theta,
            problem.features,
            config.confidence,
            covers="nothing: lstd is non-private (no privacy noise); not sampling error",
        )
        return ope_result(problem, theta, ctx.plan.report, metrics=metrics)
