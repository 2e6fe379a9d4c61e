"""The shared side of the linear OPE systems (`privrl.systems.ope`): the configs every
estimator shares, the public problem and the run-layer helpers."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from privrl.config import ConfigError, RunConfig, check, option
from privrl.ope.targets import USER_CODE_HELP
from privrl.runs.system import Plan, PlotSpec, Result, RunContext, Series, System
from privrl.systems.tabular import header_trajectories

ENVS = ("chain", "mountain-car", "hiv")
_UNSET: Any = object()

ON_POLICY = ("behaviour", "behavior", "on-policy")
DEFAULT_DELTA = 1e-5
HEADER_COUNT_DETAIL = (
    "the dataset header's episode count; replace-one neighbours have the same m, so it is public"
)
DEFAULT_TRAJECTORIES = 1000

# Sizes refused up front (they cannot fit in memory or finish in reasonable time).
MAX_TRAJECTORIES = 1_000_000  # --trajectories sampled from a built-in domain
MAX_ITERATIONS = 100_000_000  # GPOPE iterations N (one Python-level step each)
MAX_FEATURES = 4096  # feature dimension n (LSTD and GPOPE work with n × n matrices)
MAX_TABULAR_STATES = 4096  # S of the baselines' tabular view (Φ is S × n, pinv of it)
MAX_STATS_BYTES = 8 * 2**30  # GPOPE's per-trajectory statistics, m · (2n² + n) float64
MAX_SAMPLED_TRANSITIONS = 50_000_000  # m × the domain's horizon, sampled with --env


# ------------------------------------------------------------------------------ configs


# Float settings take `allow_nan=True`: a NaN reaches `validate` and is refused there with the
# setting's own range message, as the commands refused it before the run layer.


def target_epsilon() -> Any:
    """The --epsilon flag of an (ε, δ)-DP estimator."""
    return option(..., "--epsilon", "-e", allow_nan=True, help="Target ε in [1e-6, 100].")


def target_delta() -> Any:
    """The --delta flag of an (ε, δ)-DP estimator."""
    return option(DEFAULT_DELTA, "--delta", "-d", allow_nan=True, help="Target δ in (0, 1).")


def target_parameters(config: Any, epsilon_label: str = "ε") -> Any:
    """`PublicParameters` holding the target ε (its flag) and δ (its flag, or the default)."""
    from privrl.privacy.public import PublicParameters, Source

    params = PublicParameters()
    params.given(epsilon_label, float(config.epsilon), Source.FLAG, "--epsilon")
    params.given("δ", float(config.delta), _source(config.delta, DEFAULT_DELTA), "--delta")
    return params


def check_target(epsilon: float, delta: float) -> None:
    """The target (ε, δ): δ in (0, 1); ε's range is checked by `RunConfig` for every system
    (`privrl.privacy.limits`)."""
    check(0.0 < delta < 1.0, "delta", f"must be in (0, 1), got {delta}")


def check_gamma_confidence(gamma: float | None, confidence: float) -> None:
    """γ in [0, 1] (None: from the data's metadata) and the interval's level in (0, 1)."""
    check(gamma is None or 0.0 <= gamma <= 1.0, "gamma", f"must be in [0, 1], got {gamma}")
    check(0.0 < confidence < 1.0, "confidence", f"must be in (0, 1), got {confidence}")


def check_on_policy(config: Any, why: str) -> None:
    """An on-policy estimator refuses any target policy but the behaviour (`why` says why)."""
    check(
        config.target_policy in ON_POLICY,
        "target_policy",
        f"must be behaviour: {config.system} is on-policy only ({why}); use gpope for "
        "off-policy evaluation",
    )


def check_declared_trajectories(config: Any) -> None:
    """--declared-trajectories, where given, is at least 1."""
    check(
        config.declared_trajectories is None or config.declared_trajectories >= 1,
        "declared_trajectories",
        f"must be >= 1, got {config.declared_trajectories}",
    )


def _positive(value: float | None, key: str) -> None:
    check(
        value is None or (math.isfinite(value) and value > 0),
        key,
        f"must be a finite number > 0, got {value}",
    )


@dataclass(frozen=True)
class OpeConfig(RunConfig):
    """What every OPE run shares: the data source (with --env), the target policy, the
    features φ and the discount γ."""

    env: Literal["chain", "mountain-car", "hiv"] | None = option(
        None, help="Sample the data from a built-in domain (instead of --data)."
    )
    trajectories: int = option(
        DEFAULT_TRAJECTORIES,
        "--trajectories",
        "-m",
        help=f"Trajectories m to sample with --env (2 to {MAX_TRAJECTORIES:,}).",
    )
    target_policy: str = option(
        "behaviour",
        help="Policy to evaluate: 'behaviour' (on-policy), 'uniform', FILE.npy (π(a|s) as "
        "[S, A], [H, S, A] or [A]), a saved privrl policy.npz or learner.pt[:epsilon=E], "
        f"module:function, or a domain's policy spec ({USER_CODE_HELP}).",
    )
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
        check_gamma_confidence(self.gamma, self.confidence)
        check(
            self.max_horizon is None or self.max_horizon >= 1,
            "max_horizon",
            f"must be >= 1 (steps of an episode that count), got {self.max_horizon}",
        )
        check(
            self.env is None or 2 <= self.trajectories <= MAX_TRAJECTORIES,
            "trajectories",
            f"must be at least 2 and at most {MAX_TRAJECTORIES:,} (sampled from a built-in "
            f"domain), got {self.trajectories}",
        )


@dataclass(frozen=True)
class PrivateOpeConfig(OpeConfig):
    """An (ε, δ)-DP estimator's target budget."""

    epsilon: float = target_epsilon()
    delta: float = target_delta()

    def validate(self) -> None:
        super().validate()
        check_target(self.epsilon, self.delta)


# ------------------------------------------------------------------------ the public side


class Problem:
    """Everything public about a run (features, policies, γ, m, the model with --env); the
    episodes themselves are read by `load`, inside the ledger transaction."""

    model_trajectories = 100_000

    def __init__(
        self,
        *,
        header: Any | None,
        features: Any,
        gamma: float,
        target_policy: Any | None,
        domain: Any | None,
        config: OpeConfig,
        m: int,
        seed: int,
        horizon: int | None = None,
    ) -> None:
        self.data_path = None if header is None else Path(header.path)
        self.metadata = None if header is None else header.metadata
        self.features = features
        self.gamma = gamma
        self.horizon = horizon  # public (flag or metadata); None = no truncation
        self.start_spec = config.start_states
        self._start: Any = _UNSET
        self.target_policy = target_policy
        self.domain = domain
        self.env = config.env
        self.target_spec = config.target_policy
        self.m = m
        self.seed = seed
        self._data: Any = None
        self._system: Any = None

    @property
    def observation_space(self) -> Any:
        if self.domain is not None:
            return self.domain.observation_space
        return None if self.metadata is None else self.metadata.observation_space

    def public_config(self) -> dict[str, Any]:
        """config.json's description of the data and the features (all public)."""
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

    def load(self) -> Any:
        """The private episodes: sampled (--env) or read from --data. Call inside the guard."""
        if self._data is not None:
            return self._data
        if self.domain is not None:
            self._data = self.truncate(
                self.domain.sample(
                    self.domain.behaviour_policy,
                    self.m,
                    seed=np.random.SeedSequence([self.seed, 1]),
                )
            )
            return self._data
        from privrl.data.dataset import DatasetError
        from privrl.data.io import load_hdf5

        assert self.data_path is not None
        data = load_hdf5(self.data_path)
        if data.n_episodes != self.m:  # a format error: the header disagrees with the arrays
            raise DatasetError(
                f"{self.data_path}: the header says {self.m} episodes but the arrays hold "
                f"{data.n_episodes}; the file is corrupt (re-export it)"
            )
        if self.target_policy is not None and data.behaviour_probs is None:
            raise DatasetError(
                f"{self.data_path} has no 'behaviour_probs' field: off-policy evaluation of "
                f"--target-policy {self.target_spec} needs the behaviour policy's action "
                "probabilities (record them when collecting, or evaluate on-policy with "
                "--target-policy behaviour)",
                field="behaviour_probs",
            )
        self._data = self.truncate(data)
        return self._data

    def start_states(self) -> Any | None:
        """The public start distribution d₀ (`privrl.ope.value`), or None: never the logged
        starts. A flag or metadata value is resolved in the plan (its errors come before the
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

    def truncate(self, data: Any) -> Any:
        """`data` cut to the declared horizon (a fixed rule, never a check of the data)."""
        if self.horizon is None:
            return data
        from privrl.ope.horizon import truncate

        return truncate(data, self.horizon)

    def stats(self, data: Any) -> Any:
        """GPOPE's per-trajectory statistics of `data` in the run's features, γ and ρ."""
        from privrl.ope.stats import trajectory_stats

        return trajectory_stats(
            self.truncate(data), self.features, self.gamma, target_policy=self.target_policy
        )

    def system(self) -> Any:
        """The MSPBE model (exact for the chain, large public sample otherwise)."""
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


def get_domain(env: str) -> Any:
    """A built-in OPE domain by name (its policies are fixed public objects)."""
    if env == "chain":
        from privrl.envs.chain import ChainDomain

        return ChainDomain()
    if env in ("mountain-car", "hiv"):
        try:
            from privrl.ope.domains import get_domain as _get
        except ImportError as exc:  # pragma: no cover - the domains module ships with privrl
            raise ValueError(
                f"domain {env!r} is not available in this installation: {exc}"
            ) from exc
        return _get(env, seed=0)  # the learned policies are fixed public objects (seed 0)
    raise ConfigError("env", f"{env!r} is unknown; choose one of: {', '.join(ENVS)}")


def _policy(
    domain: Any, spec: str, action_space: Any, observation_space: Any, horizon: int | None
) -> Any | None:
    """None = on-policy (ρ = 1); otherwise an object with action_probs. A user's policy (a
    .npy/.npz file, module:function) goes through the shared resolver of `privrl.ope.targets`
    (the same one as ips, snips and dr), checked against the public spaces and horizon."""
    from privrl.ope.targets import is_user_spec, load_target_policy

    if spec in ON_POLICY:
        return None
    if is_user_spec(spec):
        policy = load_target_policy(spec, action_space, observation_space, horizon=horizon)
        if domain is not None and policy.time_indexed:
            raise ConfigError(
                "target_policy",
                f"{spec} is time-indexed [H, S, A]; the built-in domains' MSPBE models are "
                "stationary, so evaluate it on a dataset (--data) instead",
            )
        return policy
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


def _fallback_parameter(params: Any, spec: str, policy: Any) -> None:
    """A user's code as the target policy: the report's public parameters name it and its
    public fallback (`privrl.ope.targets.FALLBACK_NOTE`)."""
    from privrl.privacy.public import Source

    fallback = getattr(policy, "fallback", None)
    if fallback is not None:
        params.given("target policy π", spec, Source.FLAG, f"--target-policy; {fallback}")


def _spec_dim(spec: str, space: Any) -> int | None:
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


def _features(spec: str | None, env: str | None, domain: Any, space: Any) -> Any:
    from privrl.rl.features import make_features

    if spec is None:
        if env is not None:
            return _check_dim(domain.features, None)
        raise ConfigError("features", "is required with --data (e.g. onehot, fourier:5)")
    if env == "chain" and spec == "onehot":
        return domain.features  # one-hot over the non-absorbing states (φ(absorbing) = 0)
    if space is None:
        raise ValueError(
            "the dataset has no observation space in its metadata; cannot build "
            "features from a spec"
        )
    dim = _spec_dim(spec, space)
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


def refuse_inferred_spaces(meta: Any, data_path: Path, use: str) -> None:
    """The estimator's public side is built from the dataset's spaces (`use`: what they would
    do), so they must be public: a space `privrl data import` guessed from the data (max
    index + 1, observed bounds) is not."""
    from privrl.privacy.public import inferred_fields

    inferred = [f for f in ("observation_space", "action_space") if f in inferred_fields(meta)]
    if inferred:
        raise ValueError(
            f"{data_path}: the {' and '.join(inferred)} in its metadata were inferred from the "
            f"private data at import, so they cannot {use}; re-import it with "
            "--observation-space and --action-space (public values)"
        )


def _source(value: Any, default: Any) -> Any:
    """FLAG when the user's value differs from the option's default, else DEFAULT."""
    from privrl.privacy.public import Source

    return Source.DEFAULT if value == default else Source.FLAG


def _horizon(config: OpeConfig, meta: Any | None, params: Any) -> int | None:
    """The public horizon H (flag > metadata), or None when none is declared (a horizon the
    metadata marks as inferred from the data is not declared)."""
    from privrl.privacy.public import PublicParameterError

    try:
        value = params.resolve(
            "horizon H",
            flag=config.max_horizon,
            metadata=meta,
            key="horizon",
            fix="pass --max-horizon H",
            detail="steps after the first H of an episode are dropped",
        )
    except PublicParameterError:
        return None
    return int(value)


def public_problem(
    config: OpeConfig, header: Any | None, params: Any, seed: int, *, count_is_public: bool = True
) -> Problem:
    """The run's public side, from the config and (with --data) the file's header only.

    `count_is_public=False` (add/remove neighbours, whose counts differ): the header's episode
    count is kept for the format check of `load` but not listed as a public parameter."""
    from privrl.privacy.public import Source

    if (header is None) == (config.env is None):
        raise ValueError("give exactly one of --data FILE or --env " + "|".join(ENVS))
    problem = dict(header=header, config=config, seed=seed)
    if config.env is not None:
        env = config.env
        domain = get_domain(env)
        horizon = getattr(domain, "horizon", None)
        if horizon is not None and config.trajectories * int(horizon) > MAX_SAMPLED_TRANSITIONS:
            raise ConfigError(
                "trajectories",
                f"{config.trajectories} × the {env} horizon {horizon} could sample more than "
                f"{MAX_SAMPLED_TRANSITIONS:,} transitions; use at most "
                f"{MAX_SAMPLED_TRANSITIONS // int(horizon):,} trajectories",
            )
        action_space = getattr(domain, "action_space", None)
        if action_space is None and getattr(domain, "n_actions", None):
            from gymnasium import spaces

            action_space = spaces.Discrete(int(domain.n_actions))
        if config.max_horizon is not None:
            # the MSPBE models and the domains' γ < 1 bounds are for whole episodes
            raise ConfigError(
                "max_horizon",
                f"applies to --data only; the {env} domain's episodes and model are its own",
            )
        H = None
        policy = _policy(domain, config.target_policy, action_space, domain.observation_space, H)
        _fallback_parameter(params, config.target_policy, policy)
        feats = _features(config.features, env, domain, domain.observation_space)
        if config.gamma is None:
            g = params.given("discount γ", float(domain.gamma), Source.DEFAULT, f"the {env} domain")
        else:
            g = params.given("discount γ", float(config.gamma), Source.FLAG, "--gamma")
        m = params.given(
            "trajectories m",
            int(config.trajectories),
            _source(config.trajectories, DEFAULT_TRAJECTORIES),
            "--trajectories: sampled from the simulator",
        )
        out = Problem(
            features=feats, gamma=g, target_policy=policy, domain=domain, m=m, horizon=H, **problem
        )
        if config.start_states is not None:  # a bad flag is refused before the data
            out.start_states()
        return out
    from privrl.data.dataset import DatasetError

    meta = header.metadata
    # the features (hence the size of θ and of every release) and the target policy
    refuse_inferred_spaces(meta, header.path, "size the features or the releases")
    H = _horizon(config, meta, params)
    policy = _policy(None, config.target_policy, meta.action_space, meta.observation_space, H)
    _fallback_parameter(params, config.target_policy, policy)
    feats = _features(config.features, None, None, meta.observation_space)
    g = float(
        params.resolve(
            "discount γ",
            flag=config.gamma,
            metadata=meta,
            key="discount",
            fix="pass --gamma G (the discount of the evaluation)",
        )
    )
    if header.n_episodes < 1:
        raise DatasetError(f"{header.path} has no episodes")
    m = int(header.n_episodes)
    if count_is_public:
        header_trajectories(params, "trajectories m", header, HEADER_COUNT_DETAIL)
    out = Problem(
        features=feats, gamma=g, target_policy=policy, domain=None, m=m, horizon=H, **problem
    )
    out.start_states()  # flag or metadata: public; a bad one is refused before the data
    return out


def check_ledger_relation(problem: Problem, relation: Any = None) -> None:
    """A ledger kept for another unit or relation refuses these estimators (the guard would);
    say how to make a ledger they can use. Reads the ledger only, not the episodes.
    `relation`: the run's (default: replace-one, the relation of every mode but gpope's
    minibatch mode)."""
    from privrl.ope.baselines import RELATION, UNIT
    from privrl.privacy.ledger import BudgetLedger

    relation = RELATION if relation is None else relation
    if problem.data_path is None:
        return
    ledger = BudgetLedger.for_dataset(problem.data_path)
    if ledger is None or (ledger.unit is UNIT and ledger.relation is relation):
        return
    hint = "" if relation is RELATION else " (or run gpope --mode paper, which is replace-one)"
    raise ValueError(
        f"the ledger of {problem.data_path} accounts {ledger.unit.value} under "
        f"{ledger.relation.value}, but this estimator protects one {UNIT.value} "
        f"under {relation.value} only; evaluate on a dataset whose ledger was created "
        f"with --unit trajectory --relation {relation.value}{hint}"
    )


# ------------------------------------------------------------------------ shared run logic


def _plot_theta(theta: np.ndarray) -> Callable[[Path], None]:
    def draw(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.bar(np.arange(theta.size), theta)
        ax.set_xlabel("feature")
        ax.set_ylabel("θ")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)

    return draw


def value_metrics(
    problem: Problem,
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
            "value_note": "no public start distribution: pass --start-states (uniform, FILE.npy "
            "or a public FILE.h5) to get the value v = E[φ(s₀)]ᵀθ",
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


def ope_result(
    problem: Problem,
    theta: np.ndarray,
    report: Any,
    *,
    metrics: dict[str, Any],
    curve: list[dict[str, Any]] | None = None,
) -> Result:
    """The run's `Result`: metrics (the MSPBE when the model is known, ε, δ; the value and its
    interval), the curve (else θ), theta.npy and the plot. Only the report and post-processing
    of the released θ."""
    metrics = dict(metrics)
    system = problem.system()
    if system is not None and "mspbe" not in metrics:
        metrics = {"mspbe": float(system.mspbe(theta)), **metrics}
        metrics["mspbe_source"] = system.info.get("source", "")
    metrics["epsilon"] = report.epsilon
    metrics["delta"] = report.delta
    rows = curve if curve else [{"feature": i, "theta": float(t)} for i, t in enumerate(theta)]
    plots: dict[str, Any]
    if curve:
        series = Series("gpope", [r["iteration"] for r in curve], [r["mspbe"] for r in curve])
        plots = {
            "mspbe": PlotSpec(
                "mspbe", "GPOPE", "iteration", "MSPBE of θ_i", [series], logx=True, logy=True
            )
        }
    else:
        plots = {"theta": _plot_theta(theta)}
    summary = []
    if "mspbe" in metrics:
        summary.append(f"MSPBE = {metrics['mspbe']:.4g} ({metrics.get('mspbe_source', '')})")
    if metrics.get("value") is not None:
        line = f"value of {problem.target_spec}: {metrics['value']:.4g}"
        if metrics.get("value_ci_low") is not None:
            line += (
                f" ({metrics['confidence']:.0%} interval [{metrics['value_ci_low']:.4g}, "
                f"{metrics['value_ci_high']:.4g}]: {metrics['value_ci_covers']})"
            )
        else:
            why = str(metrics["value_ci_covers"]).removeprefix("nothing: ")
            line += f" (no interval: {why})"
        summary.append(line + f"; start states: {metrics['value_start_states']}")
    elif "value_note" in metrics:
        summary.append(metrics["value_note"])
    return Result(
        metrics=metrics,
        privacy=report,
        curve=rows,
        artifacts={"theta.npy": np.asarray(theta)},
        plots=plots,
        summary=summary,
    )


def _facts(ctx: RunContext) -> tuple[Any, Problem]:
    """The plan's facts and its public problem, as `run` sees them."""
    assert ctx.plan is not None
    return ctx.plan.facts, ctx.plan.facts["problem"]


class OpeSystem(System):
    """The shared side of the four estimators: optional data, a seeded plan (the episodes are
    sampled with --env from the run's seed) and `load`."""

    data = "optional"
    plan_uses_seed = True

    def load(self, config: Any, source: Path | None, plan: Plan, rng: np.random.Generator) -> Any:
        return plan.facts["problem"].load()

    @staticmethod
    def finish(
        problem: Problem,
        report: Any,
        algorithm: dict[str, Any],
        *,
        relation: Any = None,
        **facts: Any,
    ) -> Plan:
        """The plan: the ledger's unit and relation checked, config.json = the problem's
        public description + the estimator's public settings, `facts` for `run`."""
        check_ledger_relation(problem, relation)
        public = {**problem.public_config(), **algorithm}
        return Plan(report=report, public=public, facts={"problem": problem, **facts})

    epsilon_label: ClassVar[str] = "ε"

    def start(
        self,
        config: PrivateOpeConfig,
        header: Any | None,
        seed: int,
        *,
        count_is_public: bool = True,
    ) -> tuple[Any, Problem]:
        """PublicParameters with ε and δ, and the public problem (`count_is_public`: as in
        `public_problem`)."""
        params = target_parameters(config, self.epsilon_label)
        problem = public_problem(config, header, params, seed, count_is_public=count_is_public)
        return params, problem


def declared_trajectories(
    config: Any, problem: Problem, header: Any | None, params: Any, *, detail: str
) -> int:
    """m̄: the declared (public) number of trajectories. With --env it is --trajectories (the
    sample size asked for); with --data a flag or the metadata's declared n_trajectories,
    never the header's count (add/remove neighbours differ in it). `detail`: what m̄ sets,
    for privacy.json."""
    if problem.domain is not None:
        if config.declared_trajectories is not None:
            raise ConfigError(
                "declared_trajectories",
                "applies to --data only; with --env, --trajectories is the declared size",
            )
        return int(problem.m)  # recorded as "trajectories m" by public_problem
    value = params.resolve(
        "declared trajectories m̄",
        flag=config.declared_trajectories,
        metadata=header.metadata if header is not None else None,
        key="n_trajectories",
        fix="pass --declared-trajectories M (the number of trajectories the data were to "
        "have, fixed before seeing them), or import the data with --unit episode --units M",
        detail=detail,
    )
    try:
        m_bar = int(value)
    except (TypeError, ValueError):
        m_bar = 0
    if m_bar < 1:
        raise ValueError(
            f"the declared number of trajectories must be an integer >= 1, got {value!r}; pass "
            "--declared-trajectories M"
        )
    return m_bar


def resolve_reward_scale(
    params: Any, problem: Problem, name: str, flag: float | None, **where: str
) -> float:
    """A public reward bound or range: flag > metadata (`where`: key, fix, detail for
    `PublicParameters.resolve`) > the built-in domain's largest reward."""
    domain_r = getattr(problem.domain, "r_max", None)
    default_r: dict[str, Any] = {} if domain_r is None else {"default": float(domain_r)}
    return float(params.resolve(name, flag=flag, metadata=problem.metadata, **where, **default_r))


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
