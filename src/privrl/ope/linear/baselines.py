"""DP-LSW and DP-LSL from Python (Balle, Gomrokchi & Precup 2016; `privrl.ope.baselines`):
on-policy first-visit Monte Carlo least squares on a tabular view of the states, released once
with Gaussian noise at a smooth-sensitivity bound.

    from privrl.ope import DPLSW

    result = DPLSW(epsilon=1.0, features="onehot", reward_range=1.0).estimate(dataset)

`plan(header)` resolves the public reward interval [L, L + R] (a setting, else the metadata,
else the simulator's largest reward), the return range over the declared horizon, the tabular
view (the observation space, or an aggregation of a continuous one) and the smooth-sensitivity
constants. On-policy only: the target policy is the behaviour policy. Privacy unit and
relation: one trajectory under REPLACE-ONE neighbours (m is public, from the header).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privrl.algorithm import Plan
from privrl.config import ConfigError, check, option
from privrl.ope.linear.common import (
    MAX_TABULAR_STATES,
    ON_POLICY,
    LinearProblem,
    PolicyLike,
    PrivateLinearOpeConfig,
    positive,
    resolve_reward_scale,
    spec_dim,
    value_metrics,
)
from privrl.ope.linear.estimator import LinearEstimate, LinearEstimator, public_plan

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset
    from privrl.data.io import DatasetHeader
    from privrl.privacy.noise import NoiseSource
    from privrl.privacy.public import PublicParameters


@dataclass(frozen=True)
class OutputPerturbationConfig(PrivateLinearOpeConfig):
    """DP-LSW / DP-LSL: on-policy first-visit Monte Carlo least squares on a tabular view of
    the states, released with Gaussian noise at a smooth-sensitivity bound. The rewards are
    clipped into the public interval [L, L + R]."""

    aggregation: int = option(10, help="Bins per dimension for continuous states (>= 1).")
    reward_range: float | None = option(
        None,
        allow_nan=True,
        help="Width R of the public interval holding one reward (default: the dataset "
        "metadata's extra reward_range, or the domain's).",
    )
    reward_min: float | None = option(
        None,
        allow_nan=True,
        help="Lower end L of the public reward interval: every reward is clipped to lie between "
        "L and L + R (default: the dataset metadata's extra reward_min, else 0).",
    )

    def validate(self) -> None:
        super().validate()
        check(
            self.aggregation >= 1,
            "aggregation",
            f"must be >= 1 (bins per dimension), got {self.aggregation}",
        )
        positive(self.reward_range, "reward_range")
        check(
            self.reward_min is None or math.isfinite(self.reward_min),
            "reward_min",
            f"must be a finite number, got {self.reward_min}",
        )


@dataclass(frozen=True)
class DPLSWConfig(OutputPerturbationConfig):
    """DP-LSW (Balle et al. 2016, "V1"): θ_X + N(0, σ_X² I), σ_X = α·S_β(X)."""

    system: ClassVar[str] = "dp-lsw"


@dataclass(frozen=True)
class DPLSLConfig(OutputPerturbationConfig):
    """DP-LSL (Balle et al. 2016, "V2"): the ridge version, λ = c·m^0.4."""

    system: ClassVar[str] = "dp-lsl"

    c: float | None = option(
        None, "--c", allow_nan=True, help="Ridge λ = c·m^0.4 (c > 0; default 1)."
    )

    def validate(self) -> None:
        super().validate()
        positive(self.c, "c")


def _check_states(S: int, aggregation: int | None) -> None:
    if S > MAX_TABULAR_STATES:
        problem = (
            f"gives {S:,} tabular states, above the limit of {MAX_TABULAR_STATES:,} "
            "for DP-LSW/DP-LSL; use fewer `aggregation` bins"
        )
        if aggregation is None:
            raise ValueError(f"the observation space {problem}")
        raise ConfigError("aggregation", f"{aggregation} {problem}")


def tabular_view(problem: LinearProblem, aggregation: int) -> tuple[Any, np.ndarray, Any, str]:
    """(state_index, Φ, value-feature map, note) for the output-perturbation baselines,
    built from public information only (the observation space, the domain)."""
    from gymnasium import spaces

    from privrl.rl.features import StateAggregation, make_features

    space = problem.observation_space
    if problem.env == "chain":
        S = problem.domain.mdp.n_states
        Phi = np.eye(S)[:, : S - 1]  # one-hot over the non-absorbing states
        return (lambda o: np.asarray(o).reshape(-1).astype(np.int64)), Phi, problem.features, ""
    if isinstance(space, spaces.Discrete):
        S, start = int(space.n), int(space.start)
        _check_states(S, None)
        return (
            (lambda o: np.asarray(o).reshape(-1).astype(np.int64) - start),
            np.eye(S),
            make_features("onehot", spaces.Discrete(S)),
            "",
        )
    if space is None:
        raise ValueError("the dataset has no observation space in its metadata")
    dim = spec_dim(f"aggregation:{aggregation}", space)
    if dim is not None:
        _check_states(dim, aggregation)
    try:
        agg = make_features(f"aggregation:{aggregation}", space)
    except ValueError as exc:
        raise ConfigError("aggregation", f"is invalid here: {exc}") from exc
    assert isinstance(agg, StateAggregation)
    _check_states(agg.dim, aggregation)
    note = (
        f"APPROXIMATE: tabular first-visit MC on a {aggregation}-bin state aggregation of a "
        "continuous state (not Markov); MSPBE scored in the run's features"
    )
    return agg.cell, np.eye(agg.dim), agg, note


def reward_bounds(
    config: OutputPerturbationConfig, problem: LinearProblem, params: Any
) -> tuple[float, float]:
    """The public interval [L, L + R] every reward is clipped into, R and L resolved publicly."""
    fix = (
        "pass `reward_range=R` (the width of the public interval [`reward_min`, "
        "`reward_min` + R] that holds every reward)"
    )
    R = resolve_reward_scale(
        params, problem, "reward range R", config.reward_range, key="reward_range", fix=fix
    )
    if not (math.isfinite(R) and R > 0):
        raise ValueError(f"the reward range must be a finite number > 0, got {R}; {fix}")
    lo = float(
        params.resolve(
            "reward lower bound",
            flag=config.reward_min,
            metadata=problem.metadata,
            key="reward_min",
            default=0.0,
            fix="pass `reward_min`",
            detail="rewards are clipped into [lower bound, lower bound + R]",
        )
    )
    if not math.isfinite(lo):
        raise ValueError(f"the reward lower bound must be finite, got {lo}; pass `reward_min`")
    if problem.gamma >= 1.0 and problem.horizon is None:
        raise ValueError(
            f"{config.system} bounds a first-visit return by R/(1−γ), which needs γ < 1, but "
            f"γ = {problem.gamma:g} and no horizon is declared; pass `max_horizon=H` (the "
            "steps of an episode that count: returns are then bounded by R·H) or `gamma` below 1"
        )
    bounds = (lo, lo + R)
    if not (math.isfinite(bounds[1]) and bounds[1] > lo):
        raise ValueError(
            f"the reward interval [{lo:g}, {lo:g} + {R:g}] is not representable; use a smaller "
            "`reward_range` or `reward_min`"
        )
    return bounds


class _OutputPerturbation(LinearEstimator[Any]):
    """DP-LSW and DP-LSL: the same plan and computation; the estimator differs by config."""

    def plan(self, header: DatasetHeader, policy: PolicyLike = None) -> Plan:
        refuse_off_policy(self.config.system, policy)
        return super().plan(header, policy)

    def plan_problem(
        self, problem: LinearProblem, params: PublicParameters, header: Any | None
    ) -> Plan:
        return plan_baseline(self.config, problem, params)

    def compute(self, plan: Plan, data: TrajectoryDataset, noise: NoiseSource) -> LinearEstimate:
        return run_baseline(self.config, plan, data, noise)


class DPLSW(_OutputPerturbation):
    """DP-LSW's private estimate of the behaviour policy's linear value function."""

    Config = DPLSWConfig


class DPLSL(_OutputPerturbation):
    """DP-LSL's private estimate of the behaviour policy's linear value function."""

    Config = DPLSLConfig


def refuse_off_policy(system: str, policy: PolicyLike) -> None:
    """The baselines are on-policy only (Balle et al. 2016): the policy is the behaviour's."""
    if policy is None or (isinstance(policy, str) and policy in ON_POLICY):
        return
    raise ConfigError(
        "target_policy",
        f"must be behaviour: {system} is on-policy only (Balle et al. 2016); use gpope for "
        "off-policy evaluation",
    )


def plan_baseline(
    config: OutputPerturbationConfig, problem: LinearProblem, params: PublicParameters
) -> Plan:
    """The public plan: reward interval, return range, tabular view and smooth-sensitivity
    constants, from public sources only."""
    from privrl.ope.baselines import plan_dp_lsl, plan_dp_lsw, return_range
    from privrl.privacy.public import Source

    bounds = reward_bounds(config, problem, params)
    try:
        W = return_range(bounds, problem.gamma, problem.horizon)
    except ValueError as exc:
        raise ValueError(f"{exc}; use a smaller `reward_range` or `reward_min`") from exc
    over = "at γ" if problem.horizon is None else "over at most H steps at γ"
    params.derive(
        "return range",
        W,
        "width of the interval holding every return-to-go of rewards in "
        f"[{bounds[0]:g}, {bounds[1]:g}] {over}",
    )
    state_index, Phi, value_features, note = tabular_view(problem, config.aggregation)
    S = Phi.shape[0]
    rho = np.full(S, 1.0 / S)
    rho_source = "uniform over the states"
    if problem.env == "chain":
        rho = problem.domain.mdp.start_distribution
        rho_source = "the chain's start distribution"
    params.given("state weights ρ", rho_source, Source.DEFAULT, "data-independent (Γ = diag ρ)")
    notes = tuple(
        x
        for x in (
            note,
            f"ρ: {rho_source}",
            f"rewards clipped to the public interval [{bounds[0]:g}, {bounds[1]:g}] before "
            "the first-visit returns are computed",
        )
        if x
    )
    budget = dict(epsilon=config.epsilon, delta=config.delta, return_range=W)
    if isinstance(config, DPLSLConfig):
        c = config.c
        c_val = params.given(
            "c (λ = c·m^0.4)",
            1.0 if c is None else float(c),
            Source.DEFAULT if c is None else Source.FLAG,
            "c",
        )
        sens = plan_dp_lsl(Phi, rho, problem.m, c=c_val, **budget)
        params.derive("ridge λ", sens.lam, "c·m^0.4")
    else:
        sens = plan_dp_lsw(Phi, rho, problem.m, **budget)
    params.derive("smooth-sensitivity α", sens.alpha, "5√(2 ln(2/δ))/ε")
    params.derive("smooth-sensitivity β", sens.beta, "ε/(4(n + ln(2/δ)))")
    planned = sens.report(notes).with_public_parameters(params)
    algorithm = {**sens.config(), "reward_bounds": list(bounds)}
    if note:
        algorithm["aggregation"] = config.aggregation
    view = dict(state_index=state_index, Phi=Phi, rho=rho, value_features=value_features)
    facts = dict(params=params, bounds=bounds, W=W, notes=notes, lam=sens.lam)
    facts["sigma_hi"] = sens.sigma_bounds[1]  # public: the clamp's upper end
    return public_plan(problem, planned, algorithm, **view, **facts)


def run_baseline(
    config: OutputPerturbationConfig, plan: Plan, data: TrajectoryDataset, noise: NoiseSource
) -> LinearEstimate:
    """First-visit returns on the private episodes, the estimate and its one release."""
    from privrl.ope.baselines import dp_lsl, dp_lsw, first_visit_returns
    from privrl.ope.horizon import return_bounds
    from privrl.ope.mspbe import LinearSystem, model_system

    f = plan.facts
    problem: LinearProblem = f["problem"]
    Phi, rho = f["Phi"], f["rho"]
    fv = first_visit_returns(
        data, f["state_index"], Phi.shape[0], problem.gamma, reward_bounds=f["bounds"]
    )
    common = dict(
        epsilon=config.epsilon,
        delta=config.delta,
        return_range=f["W"],
        rng=noise.generator("dp-lsw"),
        notes=f["notes"],
    )
    if isinstance(config, DPLSLConfig):
        res = dp_lsl(fv, Phi, rho, lam=f["lam"], **common)
    else:
        res = dp_lsw(fv, Phi, rho, **common)
    # res.private_sigma and res.theta_nonprivate are data-dependent: never published.
    report = res.report.with_public_parameters(f["params"])
    metrics: dict[str, Any] = {}
    value_features = f["value_features"]
    if problem.domain is not None and value_features is not problem.features:
        cross = model_system(
            problem.domain,
            target_policy=None,
            features=problem.features,
            value_features=value_features,
        )
        metrics["mspbe"] = float(LinearSystem(cross.A, cross.b, cross.C).mspbe(res.theta))
        metrics["mspbe_source"] = cross.info.get("source", "")
        metrics["mspbe_note"] = "value function in aggregation features, MSPBE in run features"

    index, sigma_hi = f["state_index"], f["sigma_hi"]
    # every component of θ_X is a weighted mean of first-visit returns (DP-LSL: shrunk
    # towards 0) and w = d₀ᵀΦ a sub-distribution, so wᵀθ_X lies in this public range
    lo, hi = return_bounds(f["bounds"], problem.gamma, problem.horizon)
    metrics.update(
        value_metrics(
            problem,
            res.theta,
            lambda obs: Phi[index(obs)],
            config.confidence,
            noise_sd=lambda w: sigma_hi * float(np.linalg.norm(w)),
            value_range=(min(lo, 0.0), max(hi, 0.0)),
            covers="privacy noise only, conservatively: at σ_hi, the public upper bound on "
            "the withheld noise scale σ_X, and within the public return range; not "
            "sampling error",
        )
    )
    return LinearEstimate(res.theta, report, metrics, details=res)
