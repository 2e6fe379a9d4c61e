"""What the linear-feature estimators share: their config fields, the public problem (features
φ, the target policy π, γ, the horizon, m, the start distribution) and the value metrics.

Every quantity here comes from the config, the dataset's header (metadata, sizes) or a public
simulator, never from the episodes: `plan` builds the problem before any episode is read.
Messages name config fields in backquotes (`` `max_horizon=H` ``), so the command line can
name its flags instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.config import Config, ConfigError, check, option

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset
    from privrl.data.io import DatasetHeader
    from privrl.ope.mspbe import LinearSystem
    from privrl.ope.stats import TrajectoryStats
    from privrl.privacy.public import PublicParameters

_UNSET: Any = object()

ON_POLICY = ("behaviour", "behavior", "on-policy")
DEFAULT_DELTA = 1e-5
HEADER_COUNT_DETAIL = (
    "the dataset header's episode count; replace-one neighbours have the same m, so it is public"
)

# Sizes refused up front (they cannot fit in memory or finish in reasonable time).
MAX_ITERATIONS = 100_000_000  # GPOPE iterations N (one Python-level step each)
MAX_FEATURES = 4096  # feature dimension n (LSTD and GPOPE work with n × n matrices)
MAX_TABULAR_STATES = 4096  # S of the baselines' tabular view (Φ is S × n, pinv of it)
MAX_STATS_BYTES = 8 * 2**30  # GPOPE's per-trajectory statistics, m · (2n² + n) float64

PolicyLike = Any
"""A target policy: None or 'behaviour' (on-policy, ρ = 1), a spec string ('uniform',
FILE.npy, a saved policy.npz, module:function, a domain's policy spec) or an object with
`action_probs(obs)` (`privrl.policies.Policy`)."""


# ------------------------------------------------------------------------------ configs


# Float settings take `allow_nan=True`: a NaN reaches `validate` and is refused there with the
# setting's own range message.


def target_epsilon() -> Any:
    """The target ε of an (ε, δ)-DP estimator."""
    return option(..., "--epsilon", "-e", allow_nan=True, help="Target ε in [1e-6, 100].")


def target_delta() -> Any:
    """The target δ of an (ε, δ)-DP estimator."""
    return option(DEFAULT_DELTA, "--delta", "-d", allow_nan=True, help="Target δ in (0, 1).")


def source_of(value: Any, default: Any) -> Any:
    """FLAG (the user's setting) when `value` differs from the setting's default, else
    DEFAULT."""
    from privrl.privacy.public import Source

    return Source.DEFAULT if value == default else Source.FLAG


def target_parameters(config: Any, epsilon_label: str = "ε") -> PublicParameters:
    """`PublicParameters` holding the target ε (a setting) and δ (a setting, or the default);
    each detail names its config field."""
    from privrl.privacy.public import PublicParameters, Source

    params = PublicParameters()
    params.given(epsilon_label, float(config.epsilon), Source.FLAG, "epsilon")
    params.given("δ", float(config.delta), source_of(config.delta, DEFAULT_DELTA), "delta")
    return params


def check_target(epsilon: float, delta: float) -> None:
    """The target (ε, δ): δ in (0, 1); ε's range is checked by `Config` for every algorithm
    (`privrl.privacy.limits`)."""
    check(0.0 < delta < 1.0, "delta", f"must be in (0, 1), got {delta}")


def check_gamma_confidence(gamma: float | None, confidence: float) -> None:
    """γ in [0, 1] (None: from the data's metadata) and the interval's level in (0, 1)."""
    check(gamma is None or 0.0 <= gamma <= 1.0, "gamma", f"must be in [0, 1], got {gamma}")
    check(0.0 < confidence < 1.0, "confidence", f"must be in (0, 1), got {confidence}")


def check_declared_trajectories(config: Any) -> None:
    """`declared_trajectories`, where given, is at least 1."""
    check(
        config.declared_trajectories is None or config.declared_trajectories >= 1,
        "declared_trajectories",
        f"must be >= 1, got {config.declared_trajectories}",
    )


def positive(value: float | None, key: str) -> None:
    """`value` (the field `key`) is None or a finite number > 0."""
    check(
        value is None or (math.isfinite(value) and value > 0),
        key,
        f"must be a finite number > 0, got {value}",
    )


@dataclass(frozen=True)
class LinearOpeConfig(Config):
    """What every linear-feature estimator shares: the features φ, the discount γ, the public
    horizon H, the public start distribution d₀ of the value v = E_{d₀}[φ(s₀)]ᵀθ and the
    level of its interval."""

    features: str | None = option(
        None, help="Feature spec: onehot, fourier:ORDER, aggregation:BINS, hiv-log."
    )
    gamma: float | None = option(
        None,
        allow_nan=True,
        help="Discount γ in [0, 1] (default: the dataset's metadata or the domain's).",
    )
    max_horizon: int | None = option(
        None,
        help="Public horizon H (with --data): steps after the first H of an episode are "
        "dropped, and returns are bounded over H steps (default: the dataset metadata's "
        "horizon). Needed for γ = 1 with dp-lsw and dp-lsl.",
    )
    start_states: str | None = option(
        None,
        help="PUBLIC start distribution of the value v = E[φ(s₀)]ᵀθ: uniform, FILE.npy (a "
        "distribution over the S states, or start observations [k, ...]) or FILE.h5 (a public "
        "dataset's first observations). Default: the metadata's start_distribution, or the "
        "domain's with --env.",
    )
    confidence: float = option(
        0.95, allow_nan=True, help="Level of the value's interval for the privacy noise, in (0, 1)."
    )

    def validate(self) -> None:
        super().validate()
        check_gamma_confidence(self.gamma, self.confidence)
        check(
            self.max_horizon is None or self.max_horizon >= 1,
            "max_horizon",
            f"must be >= 1 (steps of an episode that count), got {self.max_horizon}",
        )


@dataclass(frozen=True)
class PrivateLinearOpeConfig(LinearOpeConfig):
    """An (ε, δ)-DP estimator's target budget."""

    epsilon: float = target_epsilon()
    delta: float = target_delta()

    def validate(self) -> None:
        super().validate()
        check_target(self.epsilon, self.delta)


# ------------------------------------------------------------------------ the public problem


class LinearProblem:
    """Everything public about one estimate: the features, the target policy, γ, m, the
    declared horizon, the start distribution and, with a public simulator, its model. The
    episodes are not part of it."""

    model_trajectories = 100_000

    def __init__(
        self,
        *,
        header: DatasetHeader | None,
        config: LinearOpeConfig,
        features: Any,
        gamma: float,
        target_policy: Any | None,
        target_spec: str,
        domain: Any | None,
        env: str | None,
        m: int,
        seed: int,
        horizon: int | None = None,
    ) -> None:
        path = None if header is None else header.path
        self.data_path = None if path is None else Path(path)
        self.metadata = None if header is None else header.metadata
        self.features = features
        self.gamma = gamma
        self.horizon = horizon  # public (a setting or metadata); None = no truncation
        self.start_spec = config.start_states
        self._start: Any = _UNSET
        self.target_policy = target_policy
        self.target_spec = target_spec
        self.domain = domain
        self.env = env
        self.m = m
        self.seed = seed
        self._system: Any = None

    @property
    def observation_space(self) -> Any:
        if self.domain is not None:
            return self.domain.observation_space
        return None if self.metadata is None else self.metadata.observation_space

    def public_config(self) -> dict[str, Any]:
        """The public description of the data and the features (config.json's)."""
        return {
            "data": None if self.data_path is None else str(self.data_path),
            "env": self.env,
            "trajectories": self.m,  # public under replace-one
            "target_policy": self.target_spec,
            "features": getattr(self.features, "spec", str(self.features)),
            "gamma": self.gamma,
            "max_horizon": self.horizon,
            "start_states": self.start_spec,
        }

    def start_states(self) -> Any | None:
        """The public start distribution d₀ (`privrl.ope.value`), or None: never the logged
        starts. A setting or metadata value is resolved in the plan (its errors come before the
        data are read); a domain's simulator draws lazily, from an independent seed."""
        if self._start is _UNSET:
            from privrl.ope.value import resolve_start_states

            self._start = resolve_start_states(
                self.start_spec,
                observation_space=self.observation_space,
                metadata=self.metadata,
                domain=self.domain,
                data_path=self.data_path,
                seed=self.seed,
            )
        return self._start

    def truncate(self, data: TrajectoryDataset) -> TrajectoryDataset:
        """`data` cut to the declared horizon (a fixed rule, never a check of the data)."""
        if self.horizon is None:
            return data
        from privrl.ope.horizon import truncate

        return truncate(data, self.horizon)

    def stats(self, data: TrajectoryDataset) -> TrajectoryStats:
        """GPOPE's per-trajectory statistics of `data` in the problem's features, γ and ρ."""
        from privrl.ope.stats import trajectory_stats

        return trajectory_stats(
            self.truncate(data), self.features, self.gamma, target_policy=self.target_policy
        )

    def system(self) -> LinearSystem | None:
        """The MSPBE model (exact for the chain, a large public sample otherwise); None
        without a simulator."""
        if self.domain is None:
            return None
        if self._system is None:
            from privrl.ope.mspbe import model_system

            self._system = model_system(
                self.domain,
                target_policy=self.target_policy,
                features=self.features,
                n_trajectories=self.model_trajectories,
            )
        return self._system


def spec_of(policy: PolicyLike) -> str:
    """How a target policy is named in the public description."""
    if policy is None:
        return "behaviour"
    if isinstance(policy, str):
        return policy
    return getattr(policy, "spec", None) or type(policy).__name__


def resolve_policy(
    domain: Any, policy: PolicyLike, action_space: Any, observation_space: Any, horizon: int | None
) -> Any | None:
    """None = on-policy (ρ = 1); otherwise an object with `action_probs`. A spec string goes
    through the shared resolver of `privrl.ope.targets` (the same one as ips, snips and dr),
    checked against the public spaces and horizon; an object is used as it is."""
    from privrl.ope.targets import is_user_spec, load_target_policy

    if policy is None or (isinstance(policy, str) and policy in ON_POLICY):
        return None
    if not isinstance(policy, str):
        if not callable(getattr(policy, "action_probs", None)):
            raise ConfigError(
                "target_policy",
                f"{type(policy).__name__} has no action_probs(obs); give a privrl Policy, "
                "'behaviour' or a policy spec",
            )
        _refuse_time_indexed(domain, policy, type(policy).__name__)
        return policy
    spec = policy
    if is_user_spec(spec):
        loaded = load_target_policy(spec, action_space, observation_space, horizon=horizon)
        _refuse_time_indexed(domain, loaded, spec)
        return loaded
    if domain is not None:
        try:
            from privrl.ope.domains import policy_from_spec
        except ImportError:
            policy_from_spec = None
        if spec == "target":
            return domain.target_policy
        if policy_from_spec is not None and getattr(domain, "name", "") != "chain":
            try:
                return policy_from_spec(domain, spec)
            except ValueError as exc:
                raise ConfigError("target_policy", f"{spec!r}: {exc}") from exc
    if spec == "uniform":
        from gymnasium import spaces

        from privrl.policies import UniformRandomPolicy

        if not isinstance(action_space, spaces.Discrete):
            raise ConfigError(
                "target_policy", "uniform needs a Discrete action space in the dataset metadata"
            )
        return UniformRandomPolicy(action_space)
    raise ConfigError(
        "target_policy",
        f"{spec!r} is unknown; use 'behaviour' (on-policy), 'uniform', FILE.npy, a saved "
        "policy.npz or module:function"
        + (", 'target' or a domain policy spec" if domain is not None else ""),
    )


def _refuse_time_indexed(domain: Any, policy: Any, name: str) -> None:
    if domain is not None and getattr(policy, "time_indexed", False):
        raise ConfigError(
            "target_policy",
            f"{name} is time-indexed [H, S, A]; the built-in domains' MSPBE models are "
            "stationary, so evaluate it on a dataset instead",
        )


def fallback_parameter(params: PublicParameters, spec: str, policy: Any) -> None:
    """A user's code as the target policy: the report's public parameters name it and its
    public fallback (`privrl.ope.targets.FALLBACK_NOTE`)."""
    from privrl.privacy.public import Source

    fallback = getattr(policy, "fallback", None)
    if fallback is not None:
        params.given("target policy π", spec, Source.FLAG, f"target_policy; {fallback}")


def spec_dim(spec: str, space: Any) -> int | None:
    """The dimension a fourier/aggregation spec would build (before building it), else None."""
    from gymnasium import spaces

    name, _, arg = spec.strip().partition(":")
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        return None
    k = int(space.shape[0])
    try:
        values = [int(a) for a in arg.split(",")] if arg else []
    except ValueError:
        return None
    if name.lower() == "fourier" and len(values) == 1 and values[0] >= 0:
        return (values[0] + 1) ** k
    if name.lower() == "aggregation" and values and all(v >= 1 for v in values):
        return math.prod(values) if len(values) > 1 else values[0] ** k
    return None


def _check_dim(features: Any, spec: str | None) -> Any:
    dim = int(getattr(features, "dim", 0) or 0)
    if dim > MAX_FEATURES:
        problem = f"has {dim:,} features, above the limit of {MAX_FEATURES:,}; choose a smaller "
        if spec is None:
            raise ValueError(f"the domain's features {problem}feature spec")
        raise ConfigError("features", f"{spec} {problem}feature spec")
    return features


def make_problem_features(spec: str | None, domain: Any, space: Any) -> Any:
    """The features φ: the spec built on the public observation space, or the domain's own."""
    from privrl.rl.features import make_features

    if spec is None:
        if domain is not None:
            return _check_dim(domain.features, None)
        raise ConfigError("features", "is required with a dataset (e.g. onehot, fourier:5)")
    if getattr(domain, "name", None) == "chain" and spec == "onehot":
        return domain.features  # one-hot over the non-absorbing states (φ(absorbing) = 0)
    if space is None:
        raise ValueError(
            "the dataset has no observation space in its metadata; cannot build "
            "features from a spec"
        )
    dim = spec_dim(spec, space)
    if dim is not None and dim > MAX_FEATURES:
        raise ConfigError(
            "features",
            f"{spec} would build {dim:,} features, above the limit of {MAX_FEATURES:,}; use a "
            "lower order or fewer bins",
        )
    try:
        feats = make_features(spec, space)
    except ValueError as exc:
        raise ConfigError("features", f"is invalid: {exc}") from exc
    return _check_dim(feats, spec)


def refuse_inferred_spaces(meta: Any, data_path: Path | None, use: str) -> None:
    """The estimator's public side is built from the dataset's spaces (`use`: what they would
    do), so they must be public: a space `privrl data import` guessed from the data (max
    index + 1, observed bounds) is not."""
    from privrl.privacy.public import inferred_fields

    inferred = [f for f in ("observation_space", "action_space") if f in inferred_fields(meta)]
    if inferred:
        where = "the dataset" if data_path is None else str(data_path)
        raise ValueError(
            f"{where}: the {' and '.join(inferred)} in its metadata were inferred from the "
            f"private data at import, so they cannot {use}; re-import it with its "
            "observation and action spaces declared (public values)"
        )


def declared_horizon(config: LinearOpeConfig, meta: Any | None, params: Any) -> int | None:
    """The public horizon H (a setting > metadata), or None when none is declared (a horizon
    the metadata marks as inferred from the data is not declared)."""
    from privrl.privacy.public import PublicParameterError

    try:
        value = params.resolve(
            "horizon H",
            flag=config.max_horizon,
            metadata=meta,
            key="horizon",
            fix="pass `max_horizon=H`",
            detail="steps after the first H of an episode are dropped",
        )
    except PublicParameterError:
        return None
    return int(value)


def problem_from_simulator(
    config: LinearOpeConfig,
    domain: Any,
    params: PublicParameters,
    *,
    policy: PolicyLike,
    m: int,
    m_source: Any,
    m_detail: str,
    seed: int,
    env: str | None = None,
    header: DatasetHeader | None = None,
) -> LinearProblem:
    """The public side of an estimate on episodes of a public simulator `domain` (its
    features, γ, start distribution and MSPBE model): `m` trajectories, recorded with
    `m_source` and `m_detail`."""
    from privrl.privacy.public import Source

    env = env or getattr(domain, "name", None)
    action_space = getattr(domain, "action_space", None)
    if action_space is None and getattr(domain, "n_actions", None):
        from gymnasium import spaces

        action_space = spaces.Discrete(int(domain.n_actions))
    if config.max_horizon is not None:
        # the MSPBE models and the domains' γ < 1 bounds are for whole episodes
        raise ConfigError(
            "max_horizon",
            f"applies to a dataset only; the {env} domain's episodes and model are its own",
        )
    target = resolve_policy(domain, policy, action_space, domain.observation_space, None)
    fallback_parameter(params, spec_of(policy), target)
    feats = make_problem_features(config.features, domain, domain.observation_space)
    if config.gamma is None:
        g = params.given("discount γ", float(domain.gamma), Source.DEFAULT, f"the {env} domain")
    else:
        g = params.given("discount γ", float(config.gamma), Source.FLAG, "gamma")
    m = params.given("trajectories m", int(m), m_source, m_detail)
    out = LinearProblem(
        header=header,
        config=config,
        features=feats,
        gamma=g,
        target_policy=target,
        target_spec=spec_of(policy),
        domain=domain,
        env=env,
        m=m,
        seed=seed,
        horizon=None,
    )
    if config.start_states is not None:  # a bad setting is refused before the data
        out.start_states()
    return out


def problem_from_header(
    config: LinearOpeConfig,
    header: DatasetHeader,
    params: PublicParameters,
    *,
    policy: PolicyLike,
    seed: int,
    count_is_public: bool = True,
) -> LinearProblem:
    """The public side of an estimate on a dataset, from the config and its header only.

    `count_is_public=False` (add/remove neighbours, whose counts differ): the header's episode
    count is kept for a format check but not listed as a public parameter."""
    from privrl.data.dataset import DatasetError
    from privrl.privacy.public import Source

    meta = header.metadata
    where = "the dataset" if header.path is None else str(header.path)
    # the features (hence the size of θ and of every release) and the target policy
    refuse_inferred_spaces(meta, header.path, "size the features or the releases")
    H = declared_horizon(config, meta, params)
    target = resolve_policy(None, policy, meta.action_space, meta.observation_space, H)
    fallback_parameter(params, spec_of(policy), target)
    feats = make_problem_features(config.features, None, meta.observation_space)
    g = float(
        params.resolve(
            "discount γ",
            flag=config.gamma,
            metadata=meta,
            key="discount",
            fix="pass `gamma=G` (the discount of the evaluation)",
        )
    )
    if header.n_episodes < 1:
        raise DatasetError(f"{where} has no episodes")
    m = int(header.n_episodes)
    if count_is_public:  # replace-one neighbours have the same count
        params.given("trajectories m", m, Source.METADATA, HEADER_COUNT_DETAIL)
    out = LinearProblem(
        header=header,
        config=config,
        features=feats,
        gamma=g,
        target_policy=target,
        target_spec=spec_of(policy),
        domain=None,
        env=None,
        m=m,
        seed=seed,
        horizon=H,
    )
    out.start_states()  # a setting or metadata: public; a bad one is refused before the data
    return out


def check_statistics_fit(estimator: str, m: int, n: int, what: str) -> None:
    """Before the data: m per-trajectory statistics (Â, b̂, Ĉ: 2n² + n numbers each) fit in
    memory; `m` is a public count, which `what` names."""
    need = m * (2 * n * n + n) * 8
    if need > MAX_STATS_BYTES:
        raise ValueError(
            f"{estimator}'s per-trajectory statistics would need {need / 2**30:.1f} GiB "
            f"(m·(2n²+n) numbers for {what} and n = {n} features), above the "
            f"limit of {MAX_STATS_BYTES / 2**30:.0f} GiB; use fewer features"
        )


def declared_trajectories(
    config: Any,
    problem: LinearProblem,
    header: DatasetHeader | None,
    params: PublicParameters,
    *,
    detail: str,
) -> int:
    """m̄: the declared (public) number of trajectories. On a simulator it is the sample size
    asked for; on a dataset a setting or the metadata's declared n_trajectories, never the
    header's count (add/remove neighbours differ in it). `detail`: what m̄ sets, for the
    report."""
    if problem.domain is not None:
        if config.declared_trajectories is not None:
            raise ConfigError(
                "declared_trajectories",
                "applies to a dataset only; on a simulator the number of trajectories sampled "
                "is the declared size",
            )
        return int(problem.m)  # recorded as "trajectories m" by problem_from_simulator
    value = params.resolve(
        "declared trajectories m̄",
        flag=config.declared_trajectories,
        metadata=header.metadata if header is not None else None,
        key="n_trajectories",
        fix="pass `declared_trajectories=M` (the number of trajectories the data were to "
        "have, fixed before seeing them), or import the data with unit 'episode' and their "
        "declared count M (units=M)",
        detail=detail,
    )
    try:
        m_bar = int(value)
    except (TypeError, ValueError):
        m_bar = 0
    if m_bar < 1:
        raise ValueError(
            f"the declared number of trajectories must be an integer >= 1, got {value!r}; pass "
            "`declared_trajectories=M`"
        )
    return m_bar


def resolve_reward_scale(
    params: PublicParameters,
    problem: LinearProblem,
    name: str,
    setting: float | None,
    **where: str,
) -> float:
    """A public reward bound or range: a setting > metadata (`where`: key, fix, detail for
    `PublicParameters.resolve`) > the built-in domain's largest reward."""
    domain_r = getattr(problem.domain, "r_max", None)
    default_r: dict[str, Any] = {} if domain_r is None else {"default": float(domain_r)}
    return float(
        params.resolve(name, flag=setting, metadata=problem.metadata, **where, **default_r)
    )


# ------------------------------------------------------------------------ the value


def value_metrics(
    problem: LinearProblem,
    theta: np.ndarray,
    value_features: Callable[[np.ndarray], np.ndarray],
    level: float,
    *,
    noise_sd: Callable[[np.ndarray], float] | None = None,
    replicas: Callable[[np.ndarray], np.ndarray | None] | None = None,
    value_range: tuple[float, float] | None = None,
    covers: str,
) -> dict[str, Any]:
    """v = wᵀθ over the public start distribution (`privrl.ope.value`) with its interval for
    the privacy noise: `noise_sd(w)` (a public bound on v's Gaussian noise) or `replicas(w)`
    (v on public replica runs of the same mechanism); neither = non-private. Post-processing
    of the released θ and public quantities only. `value_range`: a public interval that holds
    the noise-free value; the value is projected onto it (which can only bring it closer) and
    the interval intersected with it (coverage is kept)."""
    from privrl.ope.value import gaussian_interval, t_interval

    start = problem.start_states()
    if start is None:
        return {
            "value": None,
            "value_note": "no public start distribution: pass `start_states` (uniform, "
            "FILE.npy or a public FILE.h5) to get the value v = E[φ(s₀)]ᵀθ",
        }
    w = start.mean_features(value_features)
    v = float(w @ np.asarray(theta, dtype=np.float64))
    out: dict[str, Any] = {"value": v}
    low = high = None
    if noise_sd is not None:
        sd = float(noise_sd(w))
        low, high = gaussian_interval(v, sd, level)
        out["value_noise_sd_bound"] = sd
    elif replicas is not None:
        values = replicas(w)
        if values is not None:
            sd = float(np.std(values, ddof=1))
            low, high = t_interval(v, sd, len(values), level)
            out["value_noise_sd_public_estimate"] = sd
            out["value_replicas"] = len(values)
    if value_range is not None:
        out["value"] = min(max(v, value_range[0]), value_range[1])
        out["value_unprojected"] = v
        if low is not None:
            low, high = max(low, value_range[0]), min(high, value_range[1])
    out.update(
        value_ci_low=low,
        value_ci_high=high,
        confidence=level,
        value_ci_covers=covers,
        value_start_states=f"{start.spec} ({start.source})",
    )
    return out


def final_metrics(
    problem: LinearProblem, theta: np.ndarray, report: Any, metrics: dict[str, Any]
) -> dict[str, Any]:
    """The estimate's metrics: the MSPBE when the model is known, then `metrics`, ε and δ.
    Only the report and post-processing of the released θ."""
    metrics = dict(metrics)
    system = problem.system()
    if system is not None and "mspbe" not in metrics:
        metrics = {"mspbe": float(system.mspbe(theta)), **metrics}
        metrics["mspbe_source"] = system.info.get("source", "")
    metrics["epsilon"] = report.epsilon
    metrics["delta"] = report.delta
    return metrics
