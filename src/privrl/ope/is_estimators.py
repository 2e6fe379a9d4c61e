"""Private IPS, SNIPS, DR, PDIS and WPDIS as objects: a frozen config and
`estimate(dataset, policy)`.

    from privrl.ope import IPS, IPSConfig

    result = IPS(IPSConfig(weight_clip=20, reward_range=(0, 1), epsilon=1)).estimate(
        dataset, policy, ledger=ledger
    )
    result.value, result.interval, result.report, result.metrics

Names: `ImportanceConfig` (what they share), `IPSConfig`, `SNIPSConfig`, `DRConfig`,
`PDISConfig`, `WPDISConfig`, and the estimators `IPS`, `SNIPS`, `DR`, `PDIS`, `WPDIS`;
`PolicyLike` is what `policy` may be. The estimators, their sensitivities, the noise and the
intervals are in `privrl.ope.importance` (per-decision ones: `privrl.ope.pdis`); this module
is the order of work around them.

Non-private reference: `IPSConfig(..., non_private=True)` (no ε) computes the same estimate
with the same public bounds and no noise, and reports ε = ∞ (`PrivacyReport.non_private`),
`metrics["private"]` False and the public-bound interval with noise variance 0. It spends no
budget; a dataset's ledger refuses it (a non-private run would void the budget), as for
every non-private run.

Interval: `interval="auto"` (the default) picks Popoviciu or Bhatia–Davis from the public
bounds (`privrl.ope.importance.interval_plan`); the choice and its reason are in the report's
notes and in `metrics["interval_method"]` / `metrics["interval_reason"]`.

`plan(header, policy)` sees the config, the dataset's header and the target policy only. Every
quantity that sets a sensitivity or the noise — ε, δ, the weight clip W, the reward range, the
horizon H, γ, the reward model's range, m — is resolved through `PublicParameters` (the
config > the dataset's public metadata > a default, else refused) and listed in the report.
With a `ledger=`, the planned report is reserved before the episodes are read. Privacy unit and
relation: one trajectory (a row of a bandit log) under REPLACE-ONE neighbours; m is then the
same for every neighbour, hence public.

`policy` is a spec string (``uniform``, ``FILE.npy``, ``policy.npz``, ``DIR/learner.pt``,
``module:function``, ``column:NAME``: see `privrl.ope.targets`), a table π(a|s) as an array
([A], [S, A] or [H, S, A]), an object with `action_probs(obs)` (the `Policy` protocol), a
callable `fn(obs) -> [n, A]`, or a `TargetPolicy`. Code is checked on public points of the
declared observation space before the data are read and falls back to the uniform
distribution on a private observation it fails on.

Noise: drawn from the caller's `NoiseSource` (a fresh secure one by default).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias, TypeVar

import numpy as np

from privrl.algorithm import Algorithm, Estimated, Plan, noise_or_secure, spending
from privrl.config import Config, ConfigError, check, option
from privrl.ope import importance as imp
from privrl.ope import pdis
from privrl.ope.targets import (
    IMPORT_ACTION_SPACE,
    IMPORT_OBSERVATION_SPACE,
    TargetPolicy,
    as_target_policy,
    describe,
)
from privrl.policies import StochasticPolicy
from privrl.privacy.noise import NoiseSource
from privrl.privacy.public import PublicParameterError, PublicParameters, Source

if TYPE_CHECKING:
    from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
    from privrl.data.io import DatasetHeader
    from privrl.privacy.ledger import BudgetLedger
    from privrl.privacy.release import Release
    from privrl.privacy.report import PrivacyReport

__all__ = [
    "DR",
    "IPS",
    "PDIS",
    "SNIPS",
    "WPDIS",
    "DRConfig",
    "IPSConfig",
    "ImportanceConfig",
    "ImportanceEstimator",
    "PDISConfig",
    "PolicyLike",
    "RewardModelLike",
    "SNIPSConfig",
    "WPDISConfig",
]

PolicyLike: TypeAlias = (
    str | np.ndarray | TargetPolicy | StochasticPolicy | Callable[[np.ndarray], Any]
)
"""A target policy: a spec string, a table array, a `Policy` object, a callable or a
`TargetPolicy` (see the module docstring)."""
RewardModelLike: TypeAlias = str | float | np.ndarray | imp.RewardModel
"""DR's public q̂: a spec (``midpoint``, ``constant:C``, ``FILE.npy``), a constant, a table
[S, A] / [A], or a `RewardModel`."""

DEFAULT_DELTA = 1e-5
HEADER_COUNT_DETAIL = (
    "the dataset header's episode count; replace-one neighbours have the same m, so it is public"
)


# ------------------------------------------------------------------------ configs


@dataclass(frozen=True)
class ImportanceConfig(Config):
    """What the importance estimators share: the public bounds (W, the reward range [r_min,
    r_max], H, γ), the (ε, δ) budget or `non_private`, the noise and the interval (symbols
    of `privrl.ope.importance`)."""

    weight_clip: float = option(
        ...,
        "--weight-clip",
        "-W",
        allow_nan=True,
        help="Public bound W on a trajectory's importance weight Π π/μ (weights above are "
        "clipped to W). `privrl ope suggest-clip --target-policy … --min-propensity P` gives "
        "the W that clips no weight.",
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
    epsilon: float | None = option(
        None,
        "--epsilon",
        "-e",
        allow_nan=True,
        help="Target ε in [1e-6, 100] (required unless --non-private).",
    )
    non_private: bool = option(
        False,
        "--non-private/",
        help="The non-private reference: the same estimate and bounds with no noise (ε = ∞, "
        "no budget spent; not with --epsilon, refused by a dataset's ledger).",
        keyless_default=True,
    )
    delta: float = option(
        DEFAULT_DELTA, "--delta", "-d", allow_nan=True, help="Target δ in (0, 1)."
    )
    mechanism: Literal["gaussian", "laplace"] = option(
        "gaussian", help="Noise for each released sum (laplace: pure ε-DP, δ unused)."
    )
    confidence: float = option(
        0.95, allow_nan=True, help="Level of the confidence interval, in (0, 1)."
    )
    interval: Literal["auto", "popoviciu", "bhatia-davis"] = option(
        "auto",
        help="How the interval bounds the sampling variance, from public bounds only: "
        "popoviciu (Δ²/4, the widest), bhatia-davis ((b − μ)(μ − a), a score interval; "
        "much narrower for rare rewards such as clicks) or auto (bhatia-davis when the "
        "weight clip and reward range guarantee it is narrower, e.g. W > 2 for rewards in "
        "[0, 1]; the choice and why are in the output).",
    )

    def validate(self) -> None:
        if self.non_private:
            check(
                self.epsilon is None,
                "non_private",
                "takes no `epsilon`: the non-private reference adds no noise and spends no "
                "budget; give one of them",
            )
        else:
            check(
                self.epsilon is not None,
                "epsilon",
                "is required: a target ε in [1e-6, 100] (or `non_private=True` for the "
                "non-private reference: no noise, ε = ∞)",
            )
        check(0.0 < self.delta < 1.0, "delta", f"must be in (0, 1), got {self.delta}")
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
        g = self.gamma
        check(g is None or 0.0 <= g <= 1.0, "gamma", f"must be in [0, 1], got {g}")
        c = self.confidence
        check(0.0 < c < 1.0, "confidence", f"must be in (0, 1), got {c}")


@dataclass(frozen=True)
class IPSConfig(ImportanceConfig):
    """Private IPS (3): (1/m)(Σ_i min(Π_t π/μ, W) Σ_t γ^t r_it + noise)."""

    system: ClassVar[str] = "ips"


@dataclass(frozen=True)
class SNIPSConfig(ImportanceConfig):
    """Private self-normalised IPS (4): the ratio of two noisy sums, Σ ρ̄_i R_i / Σ ρ̄_i."""

    system: ClassVar[str] = "snips"


@dataclass(frozen=True)
class DRConfig(ImportanceConfig):
    """Private doubly robust IPS (5) with a public model q̂ of the return after the first
    (state, action)."""

    system: ClassVar[str] = "dr"

    reward_model: str = option(
        "midpoint",
        help="Public model q̂(s, a): midpoint (the middle of the return range), constant:C, or "
        "FILE.npy ([S, A], or [A] context-free).",
    )


@dataclass(frozen=True)
class PDISConfig(ImportanceConfig):
    """Private per-decision IS (`privrl.ope.pdis` (8)): (1/m)(Σ_i Σ_t γ^t min(Π_{k≤t} π/μ,
    W) r_it + noise)."""

    system: ClassVar[str] = "pdis"


@dataclass(frozen=True)
class WPDISConfig(ImportanceConfig):
    """Private weighted per-decision IS (`privrl.ope.pdis` (9)): the per-decision sum over
    the sum of the trajectories' clipped weights, two noisy sums."""

    system: ClassVar[str] = "wpdis"


# ------------------------------------------------------------------------ the public side


def _resolve(params: PublicParameters, field: str, name: str, **kwargs: Any) -> Any:
    """`params.resolve`, a refusal naming the config field that supplies the value."""
    try:
        return params.resolve(name, **kwargs)
    except PublicParameterError as exc:
        raise ConfigError(field, f"is required: {exc}") from None


def budget_parameters(config: ImportanceConfig) -> PublicParameters:
    """`PublicParameters` holding the target ε and δ (the config's, δ's default marked);
    none for the non-private reference."""
    params = PublicParameters()
    if config.non_private or config.epsilon is None:
        return params
    params.given("ε", float(config.epsilon), Source.FLAG, "epsilon")
    delta_source = Source.DEFAULT if config.delta == DEFAULT_DELTA else Source.FLAG
    params.given("δ", float(config.delta), delta_source, "delta")
    return params


def _reward_range(
    config: ImportanceConfig, meta: DatasetMetadata, params: PublicParameters
) -> tuple[float, float]:
    fix = "give LOW,HIGH, a public interval holding every reward (rewards are clipped into it)"
    given = None if config.reward_range is None else list(config.reward_range)
    value = _resolve(
        params,
        "reward_range",
        "reward range",
        flag=given,
        metadata=meta,
        key="reward_range",
        fix=fix,
    )
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
    else:
        width = float(value[0] if isinstance(value, (list, tuple)) else value)
        lo = float(
            _resolve(
                params,
                "reward_range",
                "reward lower bound",
                metadata=meta,
                key="reward_min",
                default=0.0,
                fix="give LOW,HIGH",
                detail="the reward range is [lower bound, lower bound + R]",
            )
        )
        hi = lo + width
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ConfigError("reward_range", f"[{lo:g}, {hi:g}] is not an interval; {fix}")
    return lo, hi


def _refuse_inferred_spaces(meta: DatasetMetadata, where: str) -> None:
    """π, q̂ and the action index are read in the dataset's spaces; a space inferred from the
    data (max index + 1, observed bounds) would make every trajectory's weight depend on all
    the others, so it cannot index the policies."""
    from privrl.privacy.public import inferred_fields

    inferred = [f for f in ("observation_space", "action_space") if f in inferred_fields(meta)]
    if inferred:
        raise ValueError(
            f"{where}: the {' and '.join(inferred)} in its metadata were inferred from the "
            "private data at import, so they cannot index the policies; re-import it with "
            f"public values ({IMPORT_OBSERVATION_SPACE} and {IMPORT_ACTION_SPACE})"
        )


def _target(policy: PolicyLike, meta: DatasetMetadata, horizon: int, columns: Any) -> TargetPolicy:
    """The target policy checked against the public spaces; a refusal names `policy` (the
    argument that holds it here)."""
    try:
        return as_target_policy(
            policy, meta.action_space, meta.observation_space, horizon=horizon, columns=columns
        )
    except ConfigError as exc:
        if exc.key == "target_policy":
            raise ConfigError("policy", exc.problem) from None
        raise


def _reward_model(
    model: RewardModelLike, bounds: imp.Bounds, meta: DatasetMetadata
) -> tuple[imp.RewardModel, str]:
    """q̂ and what the report calls it, from a spec, a constant, a table or a model."""
    if isinstance(model, imp.RewardModel):
        return model, model.spec
    if isinstance(model, (int, float)) and not isinstance(model, bool):
        model = f"constant:{float(model)!r}"
    try:
        if isinstance(model, str):
            spec = model.strip()
            return imp.load_reward_model(
                spec, bounds, meta.action_space, meta.observation_space
            ), spec
        spec = describe(model)
        q = imp.table_reward_model(
            model, bounds, meta.action_space, meta.observation_space, spec=spec
        )
        return q, spec
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError("reward_model", str(exc).removeprefix("`reward_model` ")) from None


def _interval_note(chosen: imp.IntervalPlan, *, private: bool) -> str:
    """The report's note on the interval: which variance bound and why (public)."""
    name = "Popoviciu" if chosen.method == "popoviciu" else "Bhatia–Davis, score interval"
    noise = "plus the known noise variance" if private else "with no noise (non-private)"
    return (
        f"confidence interval: sampling variance bounded publicly ({name}) {noise}; {chosen.reason}"
    )


# ------------------------------------------------------------------------ the estimators

C = TypeVar("C", bound=ImportanceConfig)


class ImportanceEstimator(Algorithm[C]):
    """IPS, SNIPS, DR, PDIS and WPDIS: the same plan and computation; the estimator
    differs."""

    estimator: ClassVar[imp.Estimator]

    def plan(
        self,
        header: DatasetHeader,
        policy: PolicyLike | None = None,
        *,
        reward_model: RewardModelLike | None = None,
    ) -> Plan:
        """Resolve every public parameter from the config, `header` and `policy` (never the
        episodes) and state the planned report. `reward_model` (DR only) replaces the
        config's q̂."""
        from privrl.data.dataset import DatasetError

        if policy is None:
            raise ConfigError("policy", "is required: the target policy to evaluate")
        c, meta = self.config, header.metadata
        where = "the dataset" if header.path is None else str(header.path)
        _refuse_inferred_spaces(meta, where)
        if header.n_episodes < 1:
            raise DatasetError(f"{where} has no episodes")
        params = budget_parameters(c)
        m = params.given(
            "trajectories m", int(header.n_episodes), Source.METADATA, HEADER_COUNT_DETAIL
        )
        W = params.given("weight clip W", float(c.weight_clip), Source.FLAG, "weight_clip")
        r_lo, r_hi = _reward_range(c, meta, params)
        H = int(
            _resolve(
                params,
                "max_horizon",
                "horizon H",
                flag=c.max_horizon,
                metadata=meta,
                key="horizon",
                fix="give the number of steps of an episode that count (1 for a bandit log)",
                detail="longer episodes are truncated to their first H steps",
            )
        )
        gamma = float(
            _resolve(
                params, "gamma", "discount γ", flag=c.gamma, metadata=meta, key="discount",
                fix="give γ in [0, 1]",
            )
        )  # fmt: skip
        bounds = imp.Bounds(W, (r_lo, r_hi), H, gamma)
        params.derive("return range", list(bounds.return_range), "[min(r_min,0), max(r_max,0)]·B_H")
        # column:NAME (π of the logged action per row) suits IPS and SNIPS, not DR's q̂ term
        columns = None if self.estimator == "dr" else meta.extra.get("extra_columns", [])
        target = _target(policy, meta, H, columns)
        params.given(
            "target policy π",
            target.spec,
            Source.FLAG,
            "; ".join(filter(None, ["target_policy", target.fallback])),
        )
        model = self._model(reward_model, bounds, meta, params)
        q_range = None if model is None else model.q_range
        noise, releases = self._noise(bounds, q_range, params)
        chosen = imp.interval_plan(c.interval, self.estimator, bounds, q_range)
        weights = "cumulative weights" if self.estimator in ("pdis", "wpdis") else "weights"
        notes = [
            f"rewards clipped to [{r_lo:g}, {r_hi:g}]; episodes truncated to H = {H} steps; "
            f"trajectory {weights} clipped at W = {W:g}",
            _interval_note(chosen, private=noise is not None),
        ]
        report = self._report(releases, notes).with_public_parameters(params)
        public = {"trajectories": m, "return_range": list(bounds.return_range)}
        facts = dict(bounds=bounds, policy=target, reward_model=model, noise=noise, params=params)
        return Plan(report=report, public=public, facts=facts)

    def _noise(
        self,
        bounds: imp.Bounds,
        q_range: tuple[float, float] | None,
        params: PublicParameters,
    ) -> tuple[imp.NoiseSpec | None, list[Release]]:
        """The noise calibrated for (ε, δ) and the planned releases (none for the
        non-private reference), recorded in `params`."""
        c = self.config
        if c.non_private:
            return None, []
        assert c.epsilon is not None  # validated
        noise = imp.noise_spec(self.estimator, c.mechanism, c.epsilon, c.delta)
        if noise.noise_multiplier is not None:
            params.derive(
                "noise multiplier z",
                noise.noise_multiplier,
                f"calibrated for (ε, δ) over {noise.releases} Gaussian release(s), replace-one",
            )
        else:
            params.derive("ε per release", noise.epsilon_each, f"ε/{noise.releases}")
        releases = imp.planned_releases(self.estimator, bounds, noise, q_range)
        for release in releases:
            params.derive(f"sensitivity of {release.name}", release.sensitivity, "module docstring")
        return noise, releases

    def _report(self, releases: list[Release], notes: list[str]) -> PrivacyReport:
        """The report of `releases`: ε = ∞ and labelled non-private for the reference."""
        from privrl.privacy.report import PrivacyReport as Report

        if self.config.non_private:
            why = "non-private reference: the same estimate and public bounds, no noise"
            return Report.non_private(
                imp.UNIT, imp.RELATION, system=self.estimator, notes=[why, *notes]
            )
        return Report.build(
            imp.UNIT, imp.RELATION, releases, self.config.delta, system=self.estimator,
            notes=notes,
        )  # fmt: skip

    def _model(
        self,
        reward_model: RewardModelLike | None,
        bounds: imp.Bounds,
        meta: DatasetMetadata,
        params: PublicParameters,
    ) -> imp.RewardModel | None:
        """DR's q̂ (IPS and SNIPS take none)."""
        if reward_model is not None:
            raise ConfigError("reward_model", f"is used by DR only, not by {self.estimator}")
        return None

    def estimate(
        self,
        dataset: TrajectoryDataset,
        policy: PolicyLike,
        *,
        ledger: BudgetLedger | None = None,
        noise: NoiseSource | None = None,
        reward_model: RewardModelLike | None = None,
    ) -> Estimated:
        """The private value of `policy` on `dataset`, its interval and report. With a
        `ledger`, the planned report is reserved before the episodes are read."""
        from privrl.data.io import header_of

        header = header_of(dataset)
        plan = self.plan(header, policy, reward_model=reward_model)
        _require_propensities(dataset)
        source = noise_or_secure(noise)
        return spending(
            ledger, plan, header, lambda: self.compute(plan, dataset, source), label=self.estimator
        )

    def compute(self, plan: Plan, dataset: TrajectoryDataset, noise: NoiseSource) -> Estimated:
        """The estimate on `dataset` under a plan made by `plan` (the run layer calls this
        after its ledger check): terms, the noisy release(s), the interval, the report. The
        non-private reference draws nothing from `noise`."""
        c, f = self.config, plan.facts
        rng = None if f["noise"] is None else noise.generator(self.estimator)
        est = self._estimate(plan, dataset, noise=f["noise"], rng=rng)
        notes = [n for n in plan.report.notes if not n.startswith("non-private reference")]
        report = self._report(est.releases, notes).with_public_parameters(f["params"])
        metrics = {
            "value": est.value,
            "value_ci_low": est.ci_low,
            "value_ci_high": est.ci_high,
            "confidence": est.level,
            "interval": c.interval,
            "interval_method": est.interval_method,  # public: from the bounds (interval_plan)
            "interval_reason": est.interval_reason,
            "private": report.private,
            "noise_std": est.noise_std,  # public: functions of (ε, δ) and the sensitivities
            "sensitivity": est.sensitivities,
            "epsilon": report.epsilon,
            "delta": report.delta,
        }
        return Estimated(
            value=est.value,
            report=report,
            interval=(est.ci_low, est.ci_high),
            metrics=metrics,
            details=est,
        )

    def non_private(
        self,
        dataset: TrajectoryDataset,
        policy: PolicyLike,
        *,
        reward_model: RewardModelLike | None = None,
    ) -> imp.Estimate:
        """The same estimator with privacy off (the same bounds, no noise, no report): NOT
        private, for simulations and for data you may look at. (`non_private=True` in the
        config gives the same value as an `Estimated` with an ε = ∞ report.)"""
        from privrl.data.io import header_of

        plan = self.plan(header_of(dataset), policy, reward_model=reward_model)
        _require_propensities(dataset)
        return self._estimate(plan, dataset, noise=None, rng=None)

    def _estimate(
        self,
        plan: Plan,
        dataset: TrajectoryDataset,
        *,
        noise: imp.NoiseSpec | None,
        rng: np.random.Generator | None,
    ) -> imp.Estimate:
        c, f = self.config, plan.facts
        bounds, model = f["bounds"], f["reward_model"]
        common: dict[str, Any] = dict(noise=noise, rng=rng, level=c.confidence, interval=c.interval)
        if self.estimator in ("pdis", "wpdis"):
            t = pdis.terms(dataset, f["policy"], bounds)
            return (pdis.pdis if self.estimator == "pdis" else pdis.wpdis)(t, bounds, **common)
        t = imp.terms(dataset, f["policy"], bounds, model)
        if self.estimator == "ips":
            return imp.ips(t, bounds, **common)
        if self.estimator == "snips":
            return imp.snips(t, bounds, **common)
        return imp.dr(t, bounds, model.q_range, **common)


def _require_propensities(dataset: TrajectoryDataset) -> None:
    """A schema check (the field's presence, not its values), before any ledger entry."""
    from privrl.data.dataset import DatasetError

    if dataset.behaviour_probs is None:
        raise DatasetError(
            "the dataset has no 'behaviour_probs' field: importance sampling needs the logged "
            "propensities μ(a|s)",
            field="behaviour_probs",
        )


class IPS(ImportanceEstimator[IPSConfig]):
    """Private IPS: trajectory-wise importance sampling with clipped weights, one noisy sum."""

    Config = IPSConfig
    estimator = "ips"


class SNIPS(ImportanceEstimator[SNIPSConfig]):
    """Private self-normalised IPS: the ratio of two noisy sums."""

    Config = SNIPSConfig
    estimator = "snips"


class PDIS(ImportanceEstimator[PDISConfig]):
    """Private per-decision importance sampling: each reward weighted by the clipped
    cumulative weight of the decisions before it, one noisy sum (`privrl.ope.pdis`)."""

    Config = PDISConfig
    estimator = "pdis"


class WPDIS(ImportanceEstimator[WPDISConfig]):
    """Private weighted per-decision importance sampling: the PDIS sum over the sum of the
    trajectories' clipped weights, two noisy sums (`privrl.ope.pdis`)."""

    Config = WPDISConfig
    estimator = "wpdis"


class DR(ImportanceEstimator[DRConfig]):
    """Private doubly robust OPE with a public reward model q̂ (first-step control variate).
    `reward_model=` in `plan`/`estimate` replaces the config's spec with a constant, a table
    [S, A] / [A] or a `RewardModel`."""

    Config = DRConfig
    estimator = "dr"

    def _model(
        self,
        reward_model: RewardModelLike | None,
        bounds: imp.Bounds,
        meta: DatasetMetadata,
        params: PublicParameters,
    ) -> imp.RewardModel:
        given = self.config.reward_model if reward_model is None else reward_model
        model, spec = _reward_model(given, bounds, meta)
        source = Source.DEFAULT if spec == "midpoint" else Source.FLAG
        params.given("reward model q̂", spec, source, "reward_model")
        declared = isinstance(given, imp.RewardModel)
        how = "the range the model declares" if declared else "range of the public q̂, clipped"
        params.derive("q̂ range", list(model.q_range), how)
        return model
