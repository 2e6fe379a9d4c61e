"""LSTD-OP from Python: output-perturbed ridge LSTD (`privrl.ope.lstd_op`), one Gaussian release
of (A_D + λI)⁻¹ b_D at a public worst-case sensitivity (a baseline for GPOPE).

    from privrl.ope import LSTDOP

    result = LSTDOP(epsilon=1.0, features="onehot", reward_bound=1.0,
                    declared_trajectories=1000).estimate(dataset)

`plan(header)`: ε, δ, the feature bound Φ̄, the reward bound R̄, γ, the ridge λ and the
declared number of trajectories m̄ are resolved as public parameters (a setting > public
metadata > default; refused when missing), the sensitivity Δ₂ (eq. 4 of `privrl.ope.lstd_op`)
and the noise multiplier are derived from them, and the report is complete before any episode
is read. The estimate: statistics with Φ̄ and R̄ enforced by clipping, the ridge solution, one
Gaussian release. On-policy only (the positivity (S1) that bounds ‖A_D⁻¹‖ needs ρ_t = 1).
Privacy unit and relation: one trajectory under ADD/REMOVE neighbours (the header's count is
not public; m̄ is declared).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privrl.algorithm import Plan
from privrl.config import check, option
from privrl.ope.linear.baselines import refuse_off_policy
from privrl.ope.linear.common import (
    LinearProblem,
    PolicyLike,
    PrivateLinearOpeConfig,
    check_declared_trajectories,
    check_statistics_fit,
    declared_trajectories,
    resolve_reward_scale,
    value_metrics,
)
from privrl.ope.linear.estimator import LinearEstimate, LinearEstimator, public_plan
from privrl.privacy.noise import NoiseSource

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset
    from privrl.data.io import DatasetHeader
    from privrl.ope.lstd_op import LstdOpParameters
    from privrl.privacy.public import PublicParameters
    from privrl.privacy.report import PrivacyReport


@dataclass(frozen=True)
class LSTDOPConfig(PrivateLinearOpeConfig):
    """LSTD-OP: θ̃ = (A_D + λI)⁻¹ b_D + N(0, σ²I), σ = z·Δ₂, Δ₂ = R̄Φ̄(2 + α/λ)/(λ m̄)."""

    system: ClassVar[str] = "lstd-op"

    ridge: float = option(
        1.0,
        "--ridge",
        allow_nan=True,
        help="Ridge λ > 0 on A (sets the sensitivity: Δ₂ ∝ 1/λ²; choose it on public data).",
    )
    feature_bound: float | None = option(
        None,
        allow_nan=True,
        help="Public bound Φ̄ on ‖φ(s)‖₂; longer feature vectors are scaled down to it "
        "(default 1: one-hot and normalised features).",
    )
    reward_bound: float | None = option(
        None,
        allow_nan=True,
        help="Public bound R̄ on |reward|; rewards are clipped to [−R̄, R̄] (default: the "
        "dataset metadata's extra reward_bound, or the domain's largest reward).",
    )
    declared_trajectories: int | None = option(
        None,
        help="With --data: the declared (public) number of trajectories m̄ (default: the "
        "metadata's n_trajectories). With --env it is --trajectories.",
    )

    def validate(self) -> None:
        super().validate()
        for key in ("ridge", "feature_bound", "reward_bound"):
            v = getattr(self, key)
            check(
                v is None or (math.isfinite(v) and v > 0),
                key,
                f"must be a finite number > 0, got {v}",
            )
        check_declared_trajectories(self)


class LSTDOP(LinearEstimator[LSTDOPConfig]):
    """LSTD-OP's private estimate of the behaviour policy's linear value function."""

    Config = LSTDOPConfig

    def count_is_public(self) -> bool:
        return False  # add/remove neighbours

    def plan(self, header: DatasetHeader, policy: PolicyLike = None) -> Plan:
        refuse_off_policy(self.config.system, policy)
        return super().plan(header, policy)

    def plan_problem(
        self, problem: LinearProblem, params: PublicParameters, header: Any | None
    ) -> Plan:
        return plan_lstd_op(self.config, problem, params, header)

    def compute(self, plan: Plan, data: TrajectoryDataset, noise: NoiseSource) -> LinearEstimate:
        return run_lstd_op(self.config, plan, data, noise)


def plan_lstd_op(
    config: LSTDOPConfig, problem: LinearProblem, params: PublicParameters, header: Any | None
) -> Plan:
    """Φ̄, R̄, λ, m̄ and z from public sources, and the report of the one release."""
    from privrl.ope.lstd_op import LSTD_OP_RELATION, LstdOpParameters, lstd_op_noise_multiplier
    from privrl.privacy.public import Source

    if problem.gamma >= 1.0:
        raise ValueError(
            f"lstd-op needs γ < 1 (its sensitivity has 1 + 3γ/2 and a ridge), got "
            f"γ = {problem.gamma:g}; pass `gamma` below 1"
        )
    phi = float(
        params.resolve(
            "feature bound Φ̄",
            flag=config.feature_bound,
            metadata=problem.metadata,
            key="feature_bound",
            default=1.0,
            fix="pass `feature_bound`",
            detail="‖φ(s)‖₂ ≤ Φ̄ enforced by scaling longer vectors down",
        )
    )
    rbar = resolve_reward_scale(
        params,
        problem,
        "reward bound R̄",
        config.reward_bound,
        key="reward_bound",
        fix="pass `reward_bound=R` (every reward is clipped to [−R, R])",
        detail="rewards clipped to [−R̄, R̄]",
    )
    if not (math.isfinite(rbar) and rbar > 0 and math.isfinite(phi) and phi > 0):
        raise ValueError(
            f"the feature and reward bounds must be finite numbers > 0, got Φ̄ = {phi}, "
            f"R̄ = {rbar}; pass `feature_bound` / `reward_bound`"
        )
    lam = params.given(
        "ridge λ",
        float(config.ridge),
        Source.FLAG if config.ridge != 1.0 else Source.DEFAULT,
        "ridge",
    )
    m_bar = declared_trajectories(
        config, problem, header, params, detail="normalises A and b by max(m, m̄)"
    )
    n = int(problem.features.dim)
    check_statistics_fit("lstd-op", m_bar, n, f"m̄ = {m_bar:,} declared trajectories")
    core = LstdOpParameters(
        feature_bound=phi,
        reward_bound=rbar,
        gamma=float(problem.gamma),
        ridge=float(lam),
        public_m=m_bar,
    )
    z = params.derive(
        "noise multiplier z = σ/Δ₂",
        lstd_op_noise_multiplier(config.epsilon, config.delta),
        "one Gaussian release at (ε, δ), PLD accountant",
    )
    # the report, from public inputs only: a zero vector stands in for θ (never released)
    planned = _planned_report(core, z, config.delta, params, n)
    # config.json: public settings only (m̄ replaces the header's count, which add/remove
    # neighbours change)
    algorithm = {
        "algorithm": "lstd-op",
        "trajectories": m_bar,
        "ridge": core.ridge,
        "feature_bound": phi,
        "reward_bound": rbar,
        "declared_trajectories": m_bar,
    }
    return public_plan(
        problem, planned, algorithm, relation=LSTD_OP_RELATION, params=params, core=core, z=z
    )


def run_lstd_op(
    config: LSTDOPConfig, plan: Plan, data: TrajectoryDataset, noise: NoiseSource
) -> LinearEstimate:
    """The ridge solution on the private episodes and its one Gaussian release."""
    from privrl.ope.lstd_op import lstd_op_release, lstd_op_report, lstd_op_statistics

    f = plan.facts
    problem: LinearProblem = f["problem"]
    core = f["core"]
    theta = lstd_op_statistics(data, problem.features, core).solve(core)
    noisy, release = lstd_op_release(
        theta, core, noise_multiplier=f["z"], rng=noise.generator("lstd-op")
    )
    # θ (before the noise) is private: only `noisy` and the public facts are published
    report = lstd_op_report(release, core, delta=config.delta, params=f["params"])
    sigma = f["z"] * core.sensitivity()
    metrics = value_metrics(
        problem,
        noisy,
        problem.features,
        config.confidence,
        noise_sd=lambda w: sigma * float(np.linalg.norm(w)),
        covers="privacy noise only (σ = z·Δ₂, public); not sampling error",
    )
    return LinearEstimate(noisy, report, metrics)


def _planned_report(
    core: LstdOpParameters, z: float, delta: float, params: PublicParameters, n: int
) -> PrivacyReport:
    """The report of the one release, from public inputs only (θ itself is not needed)."""
    from privrl.ope.lstd_op import lstd_op_report
    from privrl.privacy.mechanisms import gaussian_mechanism

    _, release = gaussian_mechanism(
        np.zeros(n),
        sensitivity=core.sensitivity(),
        noise_multiplier=z,
        rng=NoiseSource.secure().generator("planning"),  # the draw is discarded
        name="LSTD-OP θ = (A_D + λI)⁻¹ b_D",
    )
    return lstd_op_report(release, core, delta=delta, params=params)
