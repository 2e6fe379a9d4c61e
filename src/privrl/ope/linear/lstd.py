"""Non-private LSTD(0) from Python (`privrl.ope.lstd`), off-policy with per-step importance
ratios ρ: a reference for the private estimators, reported as NOT private (a dataset's ledger
refuses it before its episodes are read)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from privrl.algorithm import Plan
from privrl.config import option
from privrl.ope.linear.common import LinearOpeConfig, LinearProblem, value_metrics
from privrl.ope.linear.estimator import LinearEstimate, LinearEstimator, public_plan

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset
    from privrl.privacy.noise import NoiseSource
    from privrl.privacy.public import PublicParameters


@dataclass(frozen=True)
class LSTDConfig(LinearOpeConfig):
    """Non-private LSTD(0): θ = A⁻¹b with A = Σ ρ_t φ_t (φ_t − γφ_{t+1})ᵀ, b = Σ ρ_t φ_t R_t,
    pooled over transitions (Bradtke & Barto 1996) or averaged per trajectory."""

    system: ClassVar[str] = "lstd"

    weighting: Literal["pooled", "trajectory"] = option(
        "pooled",
        help="pooled (Bradtke & Barto) or trajectory (per-trajectory averages, GPOPE's target).",
    )


class LSTD(LinearEstimator[LSTDConfig]):
    """LSTD(0)'s (non-private) estimate of a target policy's linear value function."""

    Config = LSTDConfig

    def parameters(self) -> PublicParameters:
        from privrl.privacy.public import PublicParameters

        return PublicParameters()

    def plan_problem(
        self, problem: LinearProblem, params: PublicParameters, header: Any | None
    ) -> Plan:
        return plan_lstd(self.config, problem, params)

    def compute(self, plan: Plan, data: TrajectoryDataset, noise: NoiseSource) -> LinearEstimate:
        return run_lstd(self.config, plan, data)


def plan_lstd(config: LSTDConfig, problem: LinearProblem, params: PublicParameters) -> Plan:
    """The plan of a non-private reference: a report that says so."""
    from privrl.ope.baselines import RELATION, UNIT
    from privrl.privacy.report import PrivacyReport

    report = PrivacyReport.non_private(
        UNIT, RELATION, system="lstd", notes=["non-private reference (LSTD(0))"]
    ).with_public_parameters(params)
    return public_plan(
        problem, report, {"algorithm": "lstd", "weighting": config.weighting}, params=params
    )


def run_lstd(config: LSTDConfig, plan: Plan, data: TrajectoryDataset) -> LinearEstimate:
    """θ by LSTD(0) on the episodes, and its value (no interval: there is no privacy noise)."""
    from privrl.ope.lstd import lstd

    problem: LinearProblem = plan.facts["problem"]
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
    return LinearEstimate(theta, plan.report, metrics)
