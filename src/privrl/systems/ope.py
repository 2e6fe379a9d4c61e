"""Off-policy evaluation with linear features on the run layer: GPOPE (Xie et al. 2019), the
output-perturbation baselines DP-LSW and DP-LSL (Balle et al. 2016) and non-private LSTD.

    privrl ope gpope  --env chain --trajectories 1000 --epsilon 0.1 --out runs/gp
    privrl ope dp-lsw --data data.h5 --features onehot --epsilon 1 --reward-range 1 --out runs/v1

A run takes `--data FILE` or `--env chain|mountain-car|hiv` (the episodes are then sampled from
a built-in domain, and the MSPBE of the output is reported). It writes config.json,
metrics.json (`mspbe` when the model is known, i.e. with --env; the value v = E_{d₀}[φ(s₀)]ᵀθ
over a public start distribution with its interval for the privacy noise, `privrl.ope.value`),
metrics.csv (GPOPE's MSPBE curve with --env, else θ), privacy.json, theta.npy and plots/*.png.

With --data, a declared horizon (`--max-horizon`, else the metadata's) truncates every episode
to its first H steps and bounds DP-LSW/DP-LSL's returns over H steps (`privrl.ope.horizon`),
which is what makes γ = 1 possible. Target policies the user supplies (.npy, a saved
policy.npz, module:function) go through `privrl.ope.targets`, shared with ips, snips and dr.

Order of work (the privacy rules of docs/privacy.md): `plan` sees the config and, with --data, the
file's header only (metadata and the number of trajectories m). Every quantity that sets the
noise — ε, δ, m, N, h, the step size, the reward range, γ — is resolved from public sources
(`privrl.privacy.public.PublicParameters`) and listed in privacy.json; GPOPE's h and step size,
when not given, are tuned on a PUBLIC sample (an independent dataset, or the simulator with an
independent seed). The dataset's ledger checks the planned report before `load` reads (or
samples) the episodes.

Privacy unit and relation: one trajectory under REPLACE-ONE neighbours, so the number of
trajectories m is the same for every neighbour, hence public, and read from the header.

`gpope --mode minibatch` (beyond the paper, `privrl.ope.minibatch`): Poisson-sampled minibatch
GTD2 with Polyak averaging, under ADD/REMOVE neighbours (the relation Poisson sampling is
analysed under; the replace-one ε of the same run is listed beside it). Neighbours then differ
in m, so the header's count is neither used nor published: the declared m̄ (--trajectories with
--env; --declared-trajectories or the metadata's n_trajectories with --data) sets the default
q = min(1, 20/m̄) and the step normaliser, and σ is calibrated by the PLD accountant for
(ε, δ, q, T) in the plan. h and η come from flags or a public tuning sample.

Seeds: the episodes are sampled with SeedSequence([seed, 1]) and GPOPE's public tuning sample
with [seed, 2]; GPOPE's public replica runs for the value's interval use [seed, 7]. The privacy
noise and GPOPE's secret trajectory draws never come from the seed: they come from the run's
secure `NoiseSource`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from privrl.config import ConfigError, RunConfig, check, option
from privrl.ope.targets import USER_CODE_HELP
from privrl.privacy.noise import NoiseSource
from privrl.runs.system import Plan, PlotSpec, Result, RunContext, Series, System
from privrl.systems.tabular import header_trajectories

ENVS = ("chain", "mountain-car", "hiv")
_UNSET: Any = object()
GPOPE_VALUE_REPLICAS = 32  # public GPOPE runs that measure the spread of its noise on v
# Their cost, from public sizes only: R·n² numbers gathered per iteration (memory) and
# N·R·n² in all (time, about a minute at this bound); fewer than 8 replicas: no interval.
MAX_REPLICA_GATHER = 2**21
MAX_REPLICA_WORK = 2 * 10**10
MIN_VALUE_REPLICAS = 8


def value_replicas(iterations: int, n: int) -> int:
    """How many public GPOPE replicas the value's interval uses (0: too costly)."""
    r = min(
        GPOPE_VALUE_REPLICAS,
        MAX_REPLICA_GATHER // (n * n),
        MAX_REPLICA_WORK // (int(iterations) * n * n),
    )
    return r if r >= MIN_VALUE_REPLICAS else 0


# --mode minibatch gathers about q·m_pub trajectories' n × n statistics per replica and step;
# its public tuning runs all (h, η) pairs in lock step, refused above this many numbers a step.
MAX_TUNING_GATHER = 2**25


def minibatch_batch(q: float, public_size: int) -> int:
    """The expected batch q·m of a public sample of `public_size` trajectories (at least 1)."""
    return max(1, math.ceil(float(q) * int(public_size)))


def minibatch_value_replicas(iterations: int, n: int, batch: int) -> int:
    """How many public minibatch replicas the value's interval uses (0: too costly): the
    paper mode's rule with each step gathering `batch` trajectories instead of one."""
    per = int(batch) * n * n
    r = min(
        GPOPE_VALUE_REPLICAS, MAX_REPLICA_GATHER // per, MAX_REPLICA_WORK // (int(iterations) * per)
    )
    return r if r >= MIN_VALUE_REPLICAS else 0


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


@dataclass(frozen=True)
class GpopeConfig(PrivateOpeConfig):
    """GPOPE (Xie et al. 2019, Algorithm 1): N steps of saddle-point GTD2, each on one
    trajectory drawn without replacement, its gradient B_i clipped to h and noised with
    N(0, (σh)² I); σ is calibrated for (ε, δ), m and N."""

    system: ClassVar[str] = "gpope"

    iterations: int | None = option(
        None,
        "--iterations",
        "-N",
        help=f"GPOPE iterations N (default 10·m; at most {MAX_ITERATIONS:,}).",
    )
    clip: float | None = option(
        None, allow_nan=True, help="Clip bound h (default: tuned on a public sample)."
    )
    step_size: float | None = option(
        None, allow_nan=True, help="Step size η (default: tuned on a public sample)."
    )
    schedule: Literal["constant", "diminishing"] = option(
        "constant", help="constant (β = η/N^k) or diminishing (β_i = η/(λ_min i))."
    )
    k: float = option(0.0, allow_nan=True, help="Exponent k of the constant step β = η/N^k.")
    lambda_min: float | None = option(
        None, allow_nan=True, help="λ_min(Q) for the diminishing step (public knowledge)."
    )
    accounting: Literal["rigorous", "paper"] = option(
        "rigorous",
        help="rigorous (dp-accounting RDP; the valid guarantee) or paper (Lemma 1; comparison).",
    )
    public_data: Path | None = option(  # noqa: RUF009 (a field specifier, not a shared default)
        None, help="An independent PUBLIC dataset to tune h and the step on."
    )
    clip_quantile: float = option(
        0.95, allow_nan=True, help="Quantile of ‖B_i‖ on the public run used as h."
    )
    mode: Literal["paper", "minibatch"] = option(
        "paper",
        help="paper (Algorithm 1: one trajectory per step, last iterate, replace-one) or "
        "minibatch (beyond the paper: Poisson-sampled minibatch GTD2, PLD accountant, Polyak "
        "average, add/remove neighbours).",
    )
    sampling_rate: float | None = option(
        None,
        allow_nan=True,
        help="minibatch: Poisson sampling rate q in (0, 1] (default min(1, 20/m̄), m̄ the "
        "declared number of trajectories).",
    )
    steps: int | None = option(
        None,
        help=f"minibatch: iterations T (default 2000; at most {MAX_ITERATIONS:,}).",
    )
    declared_trajectories: int | None = option(
        None,
        help="minibatch with --data: the declared (public) number of trajectories m̄ that sets "
        "q's default and the step normaliser (default: the metadata's n_trajectories; never "
        "counted from the data).",
    )

    def validate(self) -> None:
        super().validate()
        if self.mode == "paper":
            for key in ("sampling_rate", "steps", "declared_trajectories"):
                check(getattr(self, key) is None, key, "applies to --mode minibatch only")
        else:
            for key, default in PAPER_ONLY.items():
                check(
                    getattr(self, key) == default,
                    key,
                    "applies to --mode paper only (minibatch takes --steps T, a fixed "
                    "β_t = η(1 + t/t₀)^−½ schedule, the PLD accountant and a public tuning grid)",
                )
        check(
            self.sampling_rate is None or 0.0 < self.sampling_rate <= 1.0,
            "sampling_rate",
            f"must be in (0, 1], got {self.sampling_rate}",
        )
        check(
            self.steps is None or 1 <= self.steps <= MAX_ITERATIONS,
            "steps",
            f"must be at least 1 and at most {MAX_ITERATIONS:,}, got {self.steps}",
        )
        check_declared_trajectories(self)
        check(
            0.5 <= self.clip_quantile < 1,
            "clip_quantile",
            f"must be in [0.5, 1), got {self.clip_quantile}",
        )
        check(
            self.iterations is None or 1 <= self.iterations <= MAX_ITERATIONS,
            "iterations",
            f"must be at least 1 and at most {MAX_ITERATIONS:,} (one Python-level step each), "
            f"got {self.iterations}",
        )
        _positive(self.clip, "clip")
        _positive(self.step_size, "step_size")
        _positive(self.lambda_min, "lambda_min")
        check(
            self.schedule != "constant" or 0.0 <= self.k < 1.0,
            "k",
            f"must be in [0, 1) for the constant step β = η/N^k, got {self.k}",
        )
        check(
            self.public_data is None or self.public_data.is_file(),
            "public_data",
            f"{self.public_data} is not a file; give a privrl HDF5 dataset",
        )


# Paper-mode settings and their defaults: --mode minibatch refuses any other value.
PAPER_ONLY: dict[str, Any] = {
    "iterations": None,
    "schedule": "constant",
    "k": 0.0,
    "lambda_min": None,
    "accounting": "rigorous",
    "clip_quantile": 0.95,
}


@dataclass(frozen=True)
class BaselineConfig(PrivateOpeConfig):
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
        check_on_policy(self, "Balle et al. 2016")
        check(
            self.aggregation >= 1,
            "aggregation",
            f"must be >= 1 (bins per dimension), got {self.aggregation}",
        )
        _positive(self.reward_range, "reward_range")
        check(
            self.reward_min is None or math.isfinite(self.reward_min),
            "reward_min",
            f"must be a finite number, got {self.reward_min}",
        )


@dataclass(frozen=True)
class DpLswConfig(BaselineConfig):
    """DP-LSW (Balle et al. 2016, "V1"): θ_X + N(0, σ_X² I), σ_X = α·S_β(X)."""

    system: ClassVar[str] = "dp-lsw"


@dataclass(frozen=True)
class DpLslConfig(BaselineConfig):
    """DP-LSL (Balle et al. 2016, "V2"): the ridge version, λ = c·m^0.4."""

    system: ClassVar[str] = "dp-lsl"

    c: float | None = option(
        None, "--c", allow_nan=True, help="Ridge λ = c·m^0.4 (c > 0; default 1)."
    )

    def validate(self) -> None:
        super().validate()
        _positive(self.c, "c")


@dataclass(frozen=True)
class LstdConfig(OpeConfig):
    """Non-private LSTD(0), off-policy with per-step importance ratios ρ."""

    system: ClassVar[str] = "lstd"

    weighting: Literal["pooled", "trajectory"] = option(
        "pooled",
        help="pooled (Bradtke & Barto) or trajectory (per-trajectory averages, GPOPE's target).",
    )


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


# ------------------------------------------------------------------------ gpope


class Gpope(OpeSystem):
    name = "gpope"
    Config = GpopeConfig
    epsilon_label = "ε (target)"
    summary = (
        "GPOPE (Xie et al. 2019): saddle-point GTD2 with per-trajectory clipped, noised gradients."
    )

    def plan(self, config: GpopeConfig, header: Any | None, *, seed: int = 0) -> Plan:
        from privrl.ope.gpope import StepSize, calibrated_sigma, gpope_report, tune_on_public
        from privrl.privacy.public import Source

        _refuse_data_as_public(config, header)
        if config.mode == "minibatch":
            return plan_minibatch(self, config, header, seed)
        params, problem = self.start(config, header, seed)
        m = problem.m
        if config.iterations is not None:
            n_iter = params.given(
                "iterations N", int(config.iterations), Source.FLAG, "--iterations"
            )
        else:
            n_iter = params.derive("iterations N", 10 * m, "10·m")
            if n_iter > MAX_ITERATIONS:
                raise ValueError(
                    f"the default N = 10·m = {n_iter:,} iterations exceeds the limit of "
                    f"{MAX_ITERATIONS:,}; pass --iterations N"
                )
        n, needs_tuning = _check_gpope_inputs(config, problem, m, "m = {m:,} trajectories")
        accounting = config.accounting
        params.given("accounting", accounting, _source(accounting, "rigorous"), "--accounting")
        sigma = calibrated_sigma(config.epsilon, config.delta, m, n_iter, accounting)
        params.derive("noise σ (std / h)", sigma, f"calibrated for (ε, δ), m, N ({accounting})")
        public: list[str] = []
        notes: list[str] = []
        tuned = None
        pub_stats, pub_source = None, ""
        if needs_tuning:  # public data or a simulator (`_check_gpope_inputs`)
            pub_stats, pub_source = _public_sample(
                config, problem, m, seed, " with an independent seed"
            )
            tuned = tune_on_public(
                pub_stats,
                problem.system(),
                m=m,
                epsilon=config.epsilon,
                delta=config.delta,
                iterations=n_iter,
                accounting=accounting,
                schedule=config.schedule,
                k=config.k,
                clip_quantile=config.clip_quantile,
                seed=seed,
                source=pub_source,
            )
            public.append(tuned.report_line())
        tuned_h = (
            None
            if tuned is None
            else (
                tuned.clip,
                f"{tuned.clip_quantile:.0%} quantile of ‖B_i‖ on a non-private run, {tuned.source}",
            )
        )
        h = flag_or_tuned(params, "clip bound h", config.clip, "--clip", tuned_h)
        if config.step_size is not None:
            lam = config.lambda_min
            if config.schedule == "diminishing" and lam is None:
                system = problem.system()
                if system is None:
                    raise ConfigError("schedule", "diminishing with --data needs --lambda-min")
                lam = system.lambda_min_q()
                notes.append(f"λ_min(Q) = {lam:.4g} from the public model")
            step = StepSize(config.schedule, config.step_size, config.k, lam)
            params.given("step size", step.describe(), Source.FLAG, "--step-size, --schedule, --k")
        else:
            assert tuned is not None
            step = tuned.step
            params.given(
                "step size",
                step.describe(),
                Source.PUBLIC_SPLIT,
                f"best mean MSPBE on {tuned.source}",
            )
        planned = gpope_report(
            sigma=sigma,
            clip=h,
            m=m,
            iterations=n_iter,
            n=n,
            delta=config.delta,
            epsilon=config.epsilon,
            accounting=accounting,
            public=public,
            notes=notes,
        ).with_public_parameters(params)
        # config.json: the settings `gpope` itself reports (GpopeResult.config), all public:
        # functions of (ε, δ), m, N, h, the step and the feature dimension.
        algorithm = {
            "algorithm": "gpope",
            "iterations": int(n_iter),
            "clip": h,
            "sigma": sigma,
            "noise_std": h * sigma,
            "step": step.to_dict(),
            "accounting": accounting,
            "epsilon_target": config.epsilon,
            "delta": config.delta,
            "m": m,
            "n_features": n,
            "normalisation": "length",
        }
        facts = dict(params=params, n_iter=n_iter, h=h, step=step, public=public, notes=notes)
        facts.update(pub_stats=pub_stats, pub_source=pub_source)
        return self.finish(problem, planned, algorithm, tuned=tuned, **facts)

    def run(
        self, config: GpopeConfig, data: Any, rng: np.random.Generator, ctx: RunContext
    ) -> Result:
        from privrl.ope.gpope import gpope

        if config.mode == "minibatch":
            return run_minibatch(config, data, ctx)
        f, problem = _facts(ctx)
        stats = problem.stats(data)
        result = gpope(
            stats,
            epsilon=config.epsilon,
            delta=config.delta,
            iterations=f["n_iter"],
            clip=f["h"],
            step=f["step"],
            accounting=config.accounting,
            noise=ctx.noise,
            public=f["public"],
            notes=f["notes"],
        )
        report = result.report.with_public_parameters(f["params"])
        curve = None
        system = problem.system()
        if system is not None:
            values = np.asarray(system.mspbe(result.theta_history))
            curve = [
                {"iteration": int(i), "mspbe": float(v)}
                for i, v in zip(result.record_at, values, strict=True)
            ]
        metrics: dict[str, Any] = {
            "sigma": result.sigma,  # public: a function of (ε, δ, m, N)
            "noise_std": result.noise_std,
            "clip": f["h"],
            "iterations": f["n_iter"],
        }
        metrics.update(public_clipping(f["tuned"], "steps on the PUBLIC tuning run"))
        n_rep = value_replicas(f["n_iter"], int(problem.features.dim))
        pub_stats, pub_source = (
            self.public_stats(config, problem, f, ctx.seed) if n_rep else (None, "")
        )

        def replicas(w: np.ndarray) -> np.ndarray | None:
            """v on R runs of the same mechanism (h, σ, N, step) on PUBLIC data."""
            from privrl.ope.gpope import gpope_replicas

            if pub_stats is None:
                return None
            theta_r, *_ = gpope_replicas(
                [pub_stats],
                iterations=f["n_iter"],
                clip=f["h"],
                step=[f["step"]] * n_rep,
                sigma=result.sigma,
                delta=config.delta,
                noise=NoiseSource.insecure([ctx.seed, 7]),  # PUBLIC data: repeatable
            )
            return np.asarray(theta_r) @ w

        if pub_stats is not None:
            covers = measured_on_public(n_rep, pub_source)
        elif not n_rep:
            covers = (
                "nothing: measuring GPOPE's noise on public replica runs would cost more than "
                f"{MAX_REPLICA_WORK:.0e} operations for N = {f['n_iter']:,} iterations and "
                f"n = {problem.features.dim} features; use fewer iterations or features"
            )
        else:
            covers = needs_public_data("GPOPE's noise")
        metrics.update(
            value_metrics(
                problem,
                result.theta,
                problem.features,
                config.confidence,
                replicas=replicas,
                covers=covers,
            )
        )
        return ope_result(problem, result.theta, report, metrics=metrics, curve=curve)

    @staticmethod
    def public_stats(
        config: GpopeConfig, problem: Problem, facts: dict[str, Any], seed: int
    ) -> tuple[Any | None, str]:
        """GPOPE statistics of PUBLIC data (the tuning sample, --public-data, or a simulator
        sample from the tuning stream), for the value's interval; None without public data."""
        if facts.get("pub_stats") is not None:
            return facts["pub_stats"], facts["pub_source"]
        return _public_sample(config, problem, problem.m, seed)


def flag_or_tuned(
    params: Any, name: str, flag: float | None, flag_name: str, tuned: tuple[float, str] | None
) -> float:
    """A tuning setting (GPOPE's h, η): its flag, else `tuned` = (the value tuned on public
    data, how), recorded in `params`."""
    from privrl.privacy.public import Source

    if flag is not None:
        return params.given(name, float(flag), Source.FLAG, flag_name)
    assert tuned is not None  # `_check_gpope_inputs` asked for tuning
    return params.given(name, tuned[0], Source.PUBLIC_SPLIT, tuned[1])


def public_clipping(tuned: Any, where: str) -> dict[str, Any]:
    """metrics.json's clipped fraction of the PUBLIC tuning run(s) (`where`: of what, where),
    never of the private run (it is not noised); nothing without tuning."""
    if tuned is None:
        return {}
    return {
        "public_clipped_fraction": tuned.clipped_fraction,
        "public_clipped_fraction_note": f"fraction of clipped {where}, not on the private data",
    }


def measured_on_public(n_rep: int, pub_source: str) -> str:
    """What the value's interval covers when the noise is measured on public replica runs."""
    return (
        f"privacy noise only, approximately: its spread measured on {n_rep} runs of the "
        f"same mechanism on public data ({pub_source}); not sampling error"
    )


def needs_public_data(noise: str) -> str:
    """What the interval covers without public data: nothing (`noise` passes through the
    private data's dynamics, so only public replicas could measure it)."""
    return (
        f"nothing: {noise} passes through data-dependent dynamics, so its spread is measured "
        "on public data; give --public-data FILE for an interval"
    )


def _refuse_data_as_public(config: GpopeConfig, header: Any | None) -> None:
    """--public-data must be public: not the --data file or a copy of its episodes, and no
    ledgered (private) file."""
    from privrl.data.public import not_public_because

    if config.public_data is None:
        return
    why = not_public_because(config.public_data, None if header is None else header.path)
    if why is not None:
        raise ConfigError(
            "public_data",
            f"{config.public_data}: {why}; tuning must use an independent PUBLIC dataset (or "
            "give --clip and --step-size)",
        )


# ------------------------------------------------------------------------ gpope --mode minibatch


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


def _public_sample(
    config: GpopeConfig, problem: Problem, size: int, seed: int, seed_words: str = ""
) -> tuple[Any, str]:
    """GPOPE statistics of PUBLIC data and their source: --public-data, else a simulator sample
    of `size` trajectories from the tuning stream [seed, 2] (the source ends in `seed_words`);
    (None, "") without either."""
    if config.public_data is not None:
        from privrl.data.io import load_hdf5

        pub = load_hdf5(config.public_data)
        return problem.stats(pub), f"public dataset {Path(config.public_data).name}"
    if problem.domain is not None:
        pub = problem.domain.sample(
            problem.domain.behaviour_policy, size, seed=np.random.SeedSequence([seed, 2])
        )
        return problem.stats(pub), f"sampled from the {problem.env} simulator{seed_words}"
    return None, ""


def plan_minibatch(system: Gpope, config: GpopeConfig, header: Any | None, seed: int) -> Plan:
    """The public plan of `--mode minibatch` (`privrl.ope.minibatch`): m̄, q, T, h, η and σ from
    public sources only, σ calibrated by the PLD accountant for the target (ε, δ) under
    add/remove, before any private byte is read."""
    from privrl.ope import minibatch as mb
    from privrl.ope.mspbe import LinearSystem
    from privrl.privacy.public import Source

    params, problem = system.start(config, header, seed, count_is_public=False)
    m_bar = declared_trajectories(
        config, problem, header, params, detail="sets q's default and the step normaliser 1/(q·m̄)"
    )
    if config.sampling_rate is not None:
        q = params.given(
            "sampling rate q", float(config.sampling_rate), Source.FLAG, "--sampling-rate"
        )
    else:
        q = params.derive(
            "sampling rate q", mb.default_sampling_rate(m_bar), f"min(1, {mb.DEFAULT_BATCH}/m̄)"
        )
    if config.steps is not None:
        T = params.given("iterations T", int(config.steps), Source.FLAG, "--steps")
    else:
        T = params.given("iterations T", mb.DEFAULT_STEPS, Source.DEFAULT, "privrl.ope.minibatch")
    n, needs_tuning = _check_gpope_inputs(config, problem, m_bar, "m̄ = {m:,} declared trajectories")
    params.given("accountant", "pld", Source.DEFAULT, "dp-accounting PLD, add/remove")
    sigma = mb.minibatch_sigma(config.epsilon, config.delta, q, T)
    params.derive(
        "noise σ (std / h)",
        sigma,
        "smallest σ with T × PoissonSampled(q, Gaussian(σ)) (ε, δ)-DP, PLD, add/remove",
    )
    base = mb.MinibatchConfig(
        q=q,
        iterations=T,
        clip=config.clip or 1.0,
        eta=config.step_size or 1.0,
        public_m=m_bar,
    )
    public: list[str] = []
    tuned = None
    pub_stats, pub_source = None, ""
    if needs_tuning:
        pub_stats, pub_source = _public_sample(config, problem, m_bar, seed, " with its own seed")
        n_etas = len(mb.TUNING_ETAS) if config.step_size is None else 1
        n_clips = len(mb.TUNING_CLIP_MULTIPLIERS) if config.clip is None else 1
        gather = n_etas * n_clips * mb.TUNING_REPEATS * minibatch_batch(q, pub_stats.m) * n * n
        if gather > MAX_TUNING_GATHER:  # public sizes only: q, the public sample's m, n
            raise ValueError(
                f"tuning h and η on the public sample would gather {gather:,} numbers a step "
                f"(above {MAX_TUNING_GATHER:,}); give --clip and --step-size, a smaller "
                "--sampling-rate or fewer features"
            )
        model = problem.system()
        if model is None:
            model = LinearSystem(*pub_stats.mean(), info={"source": "public sample"})
        tuned = mb.tune_minibatch_on_public(
            pub_stats,
            model,
            base,
            epsilon_target=config.epsilon,
            delta=config.delta,
            etas=mb.TUNING_ETAS if config.step_size is None else (float(config.step_size),),
            clip_multipliers=mb.TUNING_CLIP_MULTIPLIERS,
            clips=None if config.clip is None else (float(config.clip),),
            repeats=mb.TUNING_REPEATS,
            seed=np.random.SeedSequence([seed, 2, 1]),
            source=pub_source,
        )
        public.append(tuned.report_line())
    tuned_h = tuned_eta = None
    if tuned is not None:
        tuned_h = (
            tuned.config.clip,
            f"best of {mb.TUNING_CLIP_MULTIPLIERS} × the median ‖B_i‖ of a noiseless run, "
            f"{tuned.source}",
        )
        tuned_eta = (tuned.config.eta, f"best mean MSPBE of {mb.TUNING_ETAS}, {tuned.source}")
    h = flag_or_tuned(params, "clip bound h", config.clip, "--clip", tuned_h)
    eta = flag_or_tuned(params, "step size η", config.step_size, "--step-size", tuned_eta)
    cfg = base.with_(clip=h, eta=eta)
    eps_ro = mb.replace_one_epsilon(sigma, q, T, config.delta)
    planned = mb.minibatch_report(
        cfg,
        sigma=sigma,
        n=n,
        delta=config.delta,
        epsilon_target=config.epsilon,
        public=public,
        epsilon_replace_one=eps_ro,
    ).with_public_parameters(params)
    # config.json: public settings only (m̄ replaces the header's count, which add/remove
    # neighbours change).
    algorithm = {
        "algorithm": "gpope",
        "mode": "minibatch",
        "trajectories": m_bar,
        "sampling_rate": q,
        "steps": T,
        "clip": h,
        "step_size": eta,
        "step_schedule": (
            f"β_t = η(1 + t/t₀)^−{cfg.kappa:g}, t₀ = {cfg.t0_fraction:g}·T, steps divided by "
            f"q·m̄; Polyak average of θ over t ≥ {cfg.average_from:g}·T"
        ),
        "sigma": sigma,
        "noise_std": h * sigma,
        "accountant": "pld",
        "relation": mb.MINIBATCH_RELATION.value,
        "epsilon_target": config.epsilon,
        "epsilon_replace_one": eps_ro,
        "delta": config.delta,
        "n_features": n,
    }
    return system.finish(
        problem,
        planned,
        algorithm,
        relation=mb.MINIBATCH_RELATION,
        params=params,
        mb_config=cfg,
        sigma=sigma,
        tuned=tuned,
        pub_stats=pub_stats,
        pub_source=pub_source,
        epsilon_replace_one=eps_ro,
    )


def run_minibatch(config: GpopeConfig, data: Any, ctx: RunContext) -> Result:
    """`--mode minibatch` on the private episodes: minibatch GTD2 with the planned (q, T, h, η,
    σ), noise from the stream [seed, 3]; θ̄ (Polyak) and its value with an interval from
    replica runs of the same mechanism on PUBLIC data."""
    from privrl.ope.minibatch import minibatch_gtd2

    f, problem = _facts(ctx)
    cfg, sigma = f["mb_config"], f["sigma"]
    trace = minibatch_gtd2([problem.stats(data)], cfg, sigma=sigma, noise=ctx.noise)
    theta = trace.theta_avg[0]
    # the clipped fraction of the private run is not published (it is not noised)
    metrics: dict[str, Any] = {
        "mode": "minibatch",
        "sigma": sigma,  # public: a function of (ε, δ, q, T)
        "noise_std": cfg.clip * sigma,
        "clip": cfg.clip,
        "step_size": cfg.eta,
        "sampling_rate": cfg.q,
        "steps": cfg.iterations,
        "epsilon_replace_one": f["epsilon_replace_one"],
    }
    metrics.update(public_clipping(f["tuned"], "gradients on the PUBLIC tuning runs"))
    pub_stats, pub_source = f["pub_stats"], f["pub_source"]
    if pub_stats is None:
        pub_stats, pub_source = _public_sample(config, problem, cfg.public_m, ctx.seed)
    n_rep = 0  # public sizes only: T, n and the public sample's expected batch
    if pub_stats is not None:
        batch = minibatch_batch(cfg.q, pub_stats.m)
        n_rep = minibatch_value_replicas(cfg.iterations, int(problem.features.dim), batch)

    def replicas(w: np.ndarray) -> np.ndarray | None:
        """v on R runs of the same mechanism (q, T, h, η, σ) on PUBLIC data."""
        if pub_stats is None:
            return None
        runs = minibatch_gtd2(
            [pub_stats] * n_rep,
            cfg,
            sigma=sigma,
            noise=NoiseSource.insecure([ctx.seed, 7]),  # PUBLIC data: repeatable
        )
        return runs.theta_avg @ w

    if pub_stats is None:
        covers = needs_public_data("the noise")
    elif n_rep:
        covers = measured_on_public(n_rep, pub_source)
    else:
        covers = (
            "nothing: measuring the noise on public replica runs would cost too much for "
            f"T = {cfg.iterations:,} iterations, n = {problem.features.dim} features and an "
            f"expected batch of {batch:,}; use fewer steps, features or a smaller --sampling-rate"
        )
    metrics.update(
        value_metrics(
            problem,
            theta,
            problem.features,
            config.confidence,
            replicas=replicas if n_rep else None,
            covers=covers,
        )
    )
    return ope_result(problem, theta, ctx.plan.report, metrics=metrics)


# ------------------------------------------------------------------------ baselines


def _check_states(S: int, aggregation: int | None) -> None:
    if S > MAX_TABULAR_STATES:
        problem = (
            f"gives {S:,} tabular states, above the limit of {MAX_TABULAR_STATES:,} "
            "for DP-LSW/DP-LSL; use fewer --aggregation bins"
        )
        if aggregation is None:
            raise ValueError(f"the observation space {problem}")
        raise ConfigError("aggregation", f"{aggregation} {problem}")


def tabular_view(problem: Problem, aggregation: int) -> tuple[Any, np.ndarray, Any, str]:
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
    dim = _spec_dim(f"aggregation:{aggregation}", space)
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


def resolve_reward_scale(
    params: Any, problem: Problem, name: str, flag: float | None, **where: str
) -> float:
    """A public reward bound or range: flag > metadata (`where`: key, fix, detail for
    `PublicParameters.resolve`) > the built-in domain's largest reward."""
    domain_r = getattr(problem.domain, "r_max", None)
    default_r: dict[str, Any] = {} if domain_r is None else {"default": float(domain_r)}
    return float(params.resolve(name, flag=flag, metadata=problem.metadata, **where, **default_r))


def _reward_bounds(config: BaselineConfig, problem: Problem, params: Any) -> tuple[float, float]:
    """The public interval [L, L + R] every reward is clipped into, R and L resolved publicly."""
    fix = (
        "pass --reward-range R (the width of the public interval [--reward-min, "
        "--reward-min + R] that holds every reward)"
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
            fix="pass --reward-min",
            detail="rewards are clipped into [lower bound, lower bound + R]",
        )
    )
    if not math.isfinite(lo):
        raise ValueError(f"the reward lower bound must be finite, got {lo}; pass --reward-min")
    if problem.gamma >= 1.0 and problem.horizon is None:
        raise ValueError(
            f"{config.system} bounds a first-visit return by R/(1−γ), which needs γ < 1, but "
            f"γ = {problem.gamma:g} and no horizon is declared; pass --max-horizon H (the "
            "steps of an episode that count: returns are then bounded by R·H) or --gamma below 1"
        )
    bounds = (lo, lo + R)
    if not (math.isfinite(bounds[1]) and bounds[1] > lo):
        raise ValueError(
            f"the reward interval [{lo:g}, {lo:g} + {R:g}] is not representable; use a smaller "
            "--reward-range or --reward-min"
        )
    return bounds


class _Baseline(OpeSystem):
    """DP-LSW and DP-LSL: the same plan and run; the estimator differs (`which`)."""

    def plan(self, config: BaselineConfig, header: Any | None, *, seed: int = 0) -> Plan:
        from privrl.ope.baselines import plan_dp_lsl, plan_dp_lsw, return_range
        from privrl.privacy.public import Source

        params, problem = self.start(config, header, seed)
        bounds = _reward_bounds(config, problem, params)
        try:
            W = return_range(bounds, problem.gamma, problem.horizon)
        except ValueError as exc:
            raise ValueError(f"{exc}; use a smaller --reward-range or --reward-min") from exc
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
        if isinstance(config, DpLslConfig):
            c = config.c
            c_val = params.given(
                "c (λ = c·m^0.4)",
                1.0 if c is None else float(c),
                Source.DEFAULT if c is None else Source.FLAG,
                "--c",
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
        return self.finish(problem, planned, algorithm, **view, **facts)

    def run(
        self, config: BaselineConfig, data: Any, rng: np.random.Generator, ctx: RunContext
    ) -> Result:
        from privrl.ope.baselines import dp_lsl, dp_lsw, first_visit_returns
        from privrl.ope.mspbe import LinearSystem, model_system

        f, problem = _facts(ctx)
        Phi, rho = f["Phi"], f["rho"]
        fv = first_visit_returns(
            data, f["state_index"], Phi.shape[0], problem.gamma, reward_bounds=f["bounds"]
        )
        common = dict(
            epsilon=config.epsilon,
            delta=config.delta,
            return_range=f["W"],
            rng=ctx.noise.generator("dp-lsw"),
            notes=f["notes"],
        )
        if isinstance(config, DpLslConfig):
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
        from privrl.ope.horizon import return_bounds

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
        return ope_result(problem, res.theta, report, metrics=metrics)


class DpLsw(_Baseline):
    name = "dp-lsw"
    Config = DpLswConfig
    summary = (
        'DP-LSW (Balle et al. 2016, "V1"): on-policy first-visit MC least squares + smooth-'
        "sensitivity Gaussian noise."
    )


class DpLsl(_Baseline):
    name = "dp-lsl"
    Config = DpLslConfig
    summary = (
        'DP-LSL (Balle et al. 2016, "V2"): ridge version of DP-LSW with data-dependent weights.'
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


def _check_gpope_inputs(config: Any, problem: Any, m: int, what: str) -> tuple[int, bool]:
    """Before the data: the per-trajectory statistics fit in memory for the public count `m`
    (`what` names it, formatted with m), and (clip, step size) are given or tunable on public
    data (never on the private data). Returns n (features) and whether tuning is needed."""
    n = int(problem.features.dim)
    check_statistics_fit("GPOPE", m, n, what.format(m=m))
    needs_tuning = config.clip is None or config.step_size is None
    if needs_tuning and config.public_data is None and problem.domain is None:
        raise ValueError(
            "with --data, give --clip and --step-size, or --public-data FILE to tune them "
            "on (they must not be tuned on the private data)"
        )
    return n, needs_tuning
