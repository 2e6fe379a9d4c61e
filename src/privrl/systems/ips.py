"""Private importance-sampling off-policy evaluation on the run layer: IPS, SNIPS and DR on
logs with propensities (contextual-bandit logs are one-step episodes).

    privrl ope ips   --data logs.h5 --target-policy uniform --reward-range 0,1 \\
                     --weight-clip 20 --max-horizon 1 --epsilon 1 --out runs/ips
    privrl ope snips --data logs.h5 --target-policy pi.npy ...
    privrl ope dr    --data logs.h5 --target-policy mymod:probs --reward-model q.npy ...

A run writes config.json, metrics.json (`value`, `value_ci_low`, `value_ci_high`, ε, δ),
privacy.json and prints the value with its interval. The estimators, their sensitivities,
the noise and the interval are in `privrl.ope.importance`.

Order of work (the privacy rules of docs/privacy.md): `plan` sees the config and the file's header
only. Every quantity that sets a sensitivity or the noise — ε, δ, the weight clip W, the
reward range, the horizon H, γ, the reward model's range, m — is resolved through
`PublicParameters` (flag > public metadata > default, else refused) and listed in
privacy.json. The planned report is checked by the dataset's ledger before `load` reads the
episodes. Privacy unit and relation: one trajectory (a row of a bandit log) under
REPLACE-ONE neighbours; m is then the same for every neighbour, hence public.

Noise: drawn from the run's secure `NoiseSource`, never from the seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from privrl.config import RunConfig, check, option
from privrl.ope.targets import USER_CODE_HELP
from privrl.runs.system import Plan, Result, RunContext, System
from privrl.systems.ope import (
    HEADER_COUNT_DETAIL,
    check_gamma_confidence,
    check_target,
    refuse_inferred_spaces,
    target_delta,
    target_epsilon,
    target_parameters,
)
from privrl.systems.tabular import header_trajectories


@dataclass(frozen=True)
class ImportanceConfig(RunConfig):
    """What IPS, SNIPS and DR share: the target policy π, the public bounds (W, the reward
    range, H, γ) and the (ε, δ) budget."""

    target_policy: str = option(
        ...,
        help="Policy to evaluate: uniform, FILE.npy (π(a|s) as [S, A], [H, S, A] or [A] "
        "context-free), a saved privrl policy.npz or learner.pt[:epsilon=E], module:function "
        "(returns n × A action probabilities for a batch of n observations), or column:NAME "
        f"({USER_CODE_HELP}).",
    )
    weight_clip: float = option(
        ...,
        "--weight-clip",
        "-W",
        allow_nan=True,
        help="Public bound W on a trajectory's importance weight Π π/μ (weights above are "
        "clipped to W).",
    )
    reward_range: tuple[float, ...] | None = option(
        None,
        help="Public reward range: LOW,HIGH, or one number R for [L, L+R] with L the metadata's "
        "reward_min (else 0). Rewards are clipped into it. Default: the dataset metadata's "
        "extra reward_range.",
    )
    max_horizon: int | None = option(
        None,
        help="Public horizon H: steps after the first H of an episode are dropped (default: "
        "the dataset metadata's horizon).",
    )
    gamma: float | None = option(
        None, allow_nan=True, help="Discount γ in [0, 1] (default: the dataset's metadata)."
    )
    epsilon: float = target_epsilon()
    delta: float = target_delta()
    mechanism: Literal["gaussian", "laplace"] = option(
        "gaussian", help="Noise for each released sum (laplace: pure ε-DP, δ unused)."
    )
    confidence: float = option(
        0.95, allow_nan=True, help="Level of the confidence interval, in (0, 1)."
    )
    interval: Literal["popoviciu", "bhatia-davis"] = option(
        "popoviciu",
        help="How the interval bounds the sampling variance, from public bounds only: "
        "popoviciu (Δ²/4, the widest) or bhatia-davis ((b − μ)(μ − a), a score interval; "
        "much narrower for rare rewards such as clicks).",
    )

    def validate(self) -> None:
        check_target(self.epsilon, self.delta)
        check(
            math.isfinite(self.weight_clip) and self.weight_clip > 0,
            "weight_clip",
            f"must be a finite number > 0, got {self.weight_clip}",
        )
        r = self.reward_range
        check(
            r is None
            or (len(r) == 1 and math.isfinite(r[0]) and r[0] > 0)
            or (len(r) == 2 and all(map(math.isfinite, r)) and r[0] < r[1]),
            "reward_range",
            f"must be LOW,HIGH with LOW < HIGH (finite), or one width R > 0, got {r}",
        )
        check(
            self.max_horizon is None or self.max_horizon >= 1,
            "max_horizon",
            f"must be >= 1, got {self.max_horizon}",
        )
        check_gamma_confidence(self.gamma, self.confidence)


@dataclass(frozen=True)
class IpsConfig(ImportanceConfig):
    """Private IPS: (1/m)(Σ_i min(Π_t π/μ, W) Σ_t γ^t r_it + noise)."""

    system: ClassVar[str] = "ips"


@dataclass(frozen=True)
class SnipsConfig(ImportanceConfig):
    """Private self-normalised IPS: the ratio of two noisy sums, Σ ρ̄_i R_i / Σ ρ̄_i."""

    system: ClassVar[str] = "snips"


@dataclass(frozen=True)
class DrConfig(ImportanceConfig):
    """Private doubly robust IPS with a public model q̂ of the return after the first
    (state, action)."""

    system: ClassVar[str] = "dr"

    reward_model: str = option(
        "midpoint",
        help="Public model q̂(s, a): midpoint (the middle of the return range), constant:C, or "
        "FILE.npy ([S, A], or [A] context-free).",
    )


# ------------------------------------------------------------------------ the public side


def _reward_range(config: ImportanceConfig, meta: Any, params: Any) -> tuple[float, float]:
    fix = (
        "pass --reward-range LOW,HIGH (a public interval holding every reward; rewards are "
        "clipped into it)"
    )
    flag = None if config.reward_range is None else list(config.reward_range)
    value = params.resolve("reward range", flag=flag, metadata=meta, key="reward_range", fix=fix)
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
    else:
        width = float(value[0] if isinstance(value, (list, tuple)) else value)
        lo = float(
            params.resolve(
                "reward lower bound",
                metadata=meta,
                key="reward_min",
                default=0.0,
                fix="pass --reward-range LOW,HIGH",
                detail="the reward range is [lower bound, lower bound + R]",
            )
        )
        hi = lo + width
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"the reward range [{lo:g}, {hi:g}] is not an interval; {fix}")
    return lo, hi


def _check_ledger(path: Path) -> None:
    """A ledger kept for another unit or relation would refuse these estimators; say so
    plainly (reads the ledger only)."""
    from privrl.ope.importance import RELATION, UNIT
    from privrl.privacy.ledger import BudgetLedger

    ledger = BudgetLedger.for_dataset(path)
    if ledger is None or (ledger.unit is UNIT and ledger.relation is RELATION):
        return
    raise ValueError(
        f"the ledger of {path} accounts {ledger.unit.value} under {ledger.relation.value}, "
        f"but these estimators protect one {UNIT.value} under {RELATION.value} only; use a "
        "dataset whose ledger was created with --unit trajectory --relation replace_one"
    )


class ImportanceSystem(System):
    """IPS, SNIPS and DR: the same plan and run; the estimator differs (`name`)."""

    data = "required"

    def plan(self, config: ImportanceConfig, header: Any | None) -> Plan:
        from privrl.data.dataset import DatasetError
        from privrl.ope import importance as imp
        from privrl.privacy.public import Source
        from privrl.privacy.report import PrivacyReport

        assert header is not None
        meta = header.metadata
        # π, q̂ and the action index are read in the dataset's spaces; a space inferred from
        # the data would make every trajectory's weight depend on all the others
        refuse_inferred_spaces(meta, header.path, "index the policies")
        if header.n_episodes < 1:
            raise DatasetError(f"{header.path} has no episodes")
        params = target_parameters(config)
        m = header_trajectories(params, "trajectories m", header, HEADER_COUNT_DETAIL)
        W = params.given("weight clip W", float(config.weight_clip), Source.FLAG, "--weight-clip")
        r_lo, r_hi = _reward_range(config, meta, params)
        H = int(
            params.resolve(
                "horizon H",
                flag=config.max_horizon,
                metadata=meta,
                key="horizon",
                fix="pass --max-horizon H (the number of steps of an episode that count; 1 for "
                "a bandit log)",
                detail="longer episodes are truncated to their first H steps",
            )
        )
        gamma = float(
            params.resolve(
                "discount γ",
                flag=config.gamma,
                metadata=meta,
                key="discount",
                fix="pass --gamma G",
            )
        )
        bounds = imp.Bounds(W, (r_lo, r_hi), H, gamma)
        params.derive("return range", list(bounds.return_range), "[min(r_min,0), max(r_max,0)]·B_H")
        policy = imp.load_target_policy(
            config.target_policy,
            meta.action_space,
            meta.observation_space,
            horizon=H,
            # column:NAME (π of the logged action per row) suits IPS and SNIPS, not DR's q̂ term
            columns=None if isinstance(config, DrConfig) else meta.extra.get("extra_columns", []),
        )
        params.given(
            "target policy π",
            config.target_policy,
            Source.FLAG,
            "; ".join(filter(None, ["--target-policy", policy.fallback])),
        )
        reward_model = None
        q_range = None
        if isinstance(config, DrConfig):
            reward_model = imp.load_reward_model(
                config.reward_model, bounds, meta.action_space, meta.observation_space
            )
            q_range = reward_model.q_range
            source = Source.DEFAULT if config.reward_model == "midpoint" else Source.FLAG
            params.given("reward model q̂", config.reward_model, source, "--reward-model")
            params.derive("q̂ range", list(q_range), "range of the public q̂, clipped")
        estimator = self.name
        noise = imp.noise_spec(estimator, config.mechanism, config.epsilon, config.delta)
        if noise.noise_multiplier is not None:
            params.derive(
                "noise multiplier z",
                noise.noise_multiplier,
                f"calibrated for (ε, δ) over {noise.releases} Gaussian release(s), replace-one",
            )
        else:
            params.derive("ε per release", noise.epsilon_each, f"ε/{noise.releases}")
        releases = imp.planned_releases(estimator, bounds, noise, q_range)
        for release in releases:
            params.derive(f"sensitivity of {release.name}", release.sensitivity, "module docstring")
        notes = [
            f"rewards clipped to [{r_lo:g}, {r_hi:g}]; episodes truncated to H = {H} steps; "
            f"trajectory weights clipped at W = {W:g}",
            "confidence interval: sampling variance bounded publicly ("
            + ("Popoviciu" if config.interval == "popoviciu" else "Bhatia–Davis, score interval")
            + ") plus the known noise variance",
        ]
        report = PrivacyReport.build(
            imp.UNIT,
            imp.RELATION,
            releases,
            config.delta,
            system=estimator,
            notes=notes,
        ).with_public_parameters(params)
        _check_ledger(header.path)
        public = {"trajectories": m, "return_range": list(bounds.return_range)}
        facts = dict(
            bounds=bounds, policy=policy, reward_model=reward_model, noise=noise, params=params
        )
        return Plan(report=report, public=public, facts=facts)

    def load(self, config: Any, source: Path | None, plan: Plan, rng: np.random.Generator) -> Any:
        from privrl.data.dataset import DatasetError
        from privrl.data.io import load_hdf5

        assert source is not None
        data = load_hdf5(source)
        m = plan.public["trajectories"]
        if data.n_episodes != m:  # a format error: the header disagrees with the arrays
            raise DatasetError(
                f"{source}: the header says {m} episodes but the arrays hold "
                f"{data.n_episodes}; the file is corrupt (re-export it)"
            )
        if data.behaviour_probs is None:  # a schema error, not a property of the values
            raise DatasetError(
                f"{source} has no 'behaviour_probs' field: importance sampling needs the logged "
                "propensities (import them with --columns ...,behaviour_prob=COLUMN)",
                field="behaviour_probs",
            )
        return data

    def run(
        self, config: ImportanceConfig, data: Any, rng: np.random.Generator, ctx: RunContext
    ) -> Result:
        from privrl.ope import importance as imp
        from privrl.privacy.report import PrivacyReport

        assert ctx.plan is not None
        f = ctx.plan.facts
        bounds = f["bounds"]
        t = imp.terms(data, f["policy"], bounds, f["reward_model"])
        noise_rng = ctx.noise.generator(self.name)
        common = dict(
            noise=f["noise"], rng=noise_rng, level=config.confidence, interval=config.interval
        )
        if self.name == "ips":
            est = imp.ips(t, bounds, **common)
        elif self.name == "snips":
            est = imp.snips(t, bounds, **common)
        else:
            est = imp.dr(t, bounds, f["reward_model"].q_range, **common)
        report = PrivacyReport.build(
            imp.UNIT,
            imp.RELATION,
            est.releases,
            config.delta,
            system=self.name,
            notes=ctx.plan.report.notes,
        ).with_public_parameters(f["params"])
        metrics = {
            "value": est.value,
            "value_ci_low": est.ci_low,
            "value_ci_high": est.ci_high,
            "confidence": est.level,
            "interval": config.interval,
            "noise_std": est.noise_std,  # public: functions of (ε, δ) and the sensitivities
            "sensitivity": est.sensitivities,
            "epsilon": report.epsilon,
            "delta": report.delta,
        }
        pct = f"{est.level:.0%}"
        summary = [
            f"{self.name.upper()} value of {config.target_policy}: {est.value:.4g} "
            f"({pct} CI [{est.ci_low:.4g}, {est.ci_high:.4g}], privacy noise included)"
        ]
        if not est.ci_low <= est.value <= est.ci_high:
            summary.append(
                "the value is the unbiased noisy release, left unclipped; every policy's value "
                "lies in the public return range, so the interval is cut to it"
            )
        return Result(metrics=metrics, privacy=report, summary=summary)


class Ips(ImportanceSystem):
    name = "ips"
    Config = IpsConfig
    summary = (
        "Private IPS: trajectory-wise importance sampling with clipped weights, one noisy sum."
    )


class Snips(ImportanceSystem):
    name = "snips"
    Config = SnipsConfig
    summary = "Private self-normalised IPS: the ratio of two noisy sums."


class Dr(ImportanceSystem):
    name = "dr"
    Config = DrConfig
    summary = "Private doubly robust OPE with a public reward model q̂ (first-step control variate)."
