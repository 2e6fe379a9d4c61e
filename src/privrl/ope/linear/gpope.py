"""GPOPE from Python: `GPOPEConfig` and `GPOPE(config).estimate(dataset, policy)`.

    from privrl.ope import GPOPE

    result = GPOPE(epsilon=1.0, features="onehot", clip=1.0, step_size=0.1).estimate(ds, "uniform")
    result.value, result.interval, result.report

`plan(header, policy)` resolves every quantity that sets the noise — ε, δ, m, N, h, the step
size, γ — from public sources only (`privrl.privacy.public.PublicParameters`): a setting, the
header's metadata, or a public sample. h and the step size, when not set, are tuned on PUBLIC
data (`public=` a dataset declared public, or `simulator=` a public simulator sampled with an
independent seed; `privrl.ope.gpope.tune_on_public`), never on the private episodes.

Privacy unit and relation: one trajectory under REPLACE-ONE neighbours (mode `paper`, the
paper's Algorithm 1): the number of trajectories m is the same for every neighbour, hence
public, and read from the header. Mode `minibatch` (`privrl.ope.linear.minibatch`) is under
ADD/REMOVE neighbours.

Seeds (`seed=`) govern only public randomness: the simulator's tuning sample ([seed, 2]) and
the public replica runs that measure the spread of the noise on the value ([seed, 7]). The
privacy noise and the secret trajectory draws come from the `NoiseSource` (secure by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from privrl.algorithm import Plan
from privrl.config import ConfigError, check, option
from privrl.ope.linear.common import (
    MAX_ITERATIONS,
    LinearProblem,
    PrivateLinearOpeConfig,
    check_declared_trajectories,
    check_statistics_fit,
    positive,
    source_of,
    value_metrics,
)
from privrl.ope.linear.estimator import LinearEstimate, LinearEstimator, public_plan
from privrl.privacy.noise import NoiseSource

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset
    from privrl.privacy.public import PublicParameters

GPOPE_VALUE_REPLICAS = 32  # public GPOPE runs that measure the spread of its noise on v
# Their cost, from public sizes only: R·n² numbers gathered per iteration (memory) and
# N·R·n² in all (time); fewer than 8 replicas: no interval.
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


@dataclass(frozen=True)
class GPOPEConfig(PrivateLinearOpeConfig):
    """GPOPE (Xie, Thomas & Miklau 2019, Algorithm 1): N steps of saddle-point GTD2, each on
    one trajectory drawn without replacement, its gradient B_i clipped to h and noised with
    N(0, (σh)² I); σ is calibrated for (ε, δ), m and N. The step is β = η/N^k (constant) or
    β_i = η/(λ_min(Q)·i) (diminishing). Mode `minibatch` (beyond the paper): Poisson-sampled
    minibatches at rate q for T steps, the PLD accountant and a Polyak average."""

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
                check(getattr(self, key) is None, key, "applies to `mode=minibatch` only")
        else:
            for key, default in PAPER_ONLY.items():
                check(
                    getattr(self, key) == default,
                    key,
                    "applies to `mode=paper` only (minibatch takes `steps` T, a fixed "
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
        positive(self.clip, "clip")
        positive(self.step_size, "step_size")
        positive(self.lambda_min, "lambda_min")
        check(
            self.schedule != "constant" or 0.0 <= self.k < 1.0,
            "k",
            f"must be in [0, 1) for the constant step β = η/N^k, got {self.k}",
        )


# Paper-mode settings and their defaults: mode minibatch refuses any other value.
PAPER_ONLY: dict[str, Any] = {
    "iterations": None,
    "schedule": "constant",
    "k": 0.0,
    "lambda_min": None,
    "accounting": "rigorous",
    "clip_quantile": 0.95,
}


@dataclass(frozen=True)
class PublicSource:
    """Public data to tune on and to measure the noise with: a dataset declared public
    (`data`, named `name` in the report) and/or a public simulator (the problem's domain)."""

    data: TrajectoryDataset | None = None
    name: str = "public dataset"


class GPOPE(LinearEstimator[GPOPEConfig]):
    """GPOPE's private estimate of a target policy's linear value function θ (and its value
    v over a public start distribution, with an interval for the privacy noise)."""

    Config = GPOPEConfig
    epsilon_label = "ε (target)"

    def count_is_public(self) -> bool:
        return self.config.mode == "paper"

    def plan_problem(
        self, problem: LinearProblem, params: PublicParameters, header: Any | None
    ) -> Plan:
        return plan_gpope(self.config, problem, params, header, self.public_source(), self.seed)

    def compute(self, plan: Plan, data: TrajectoryDataset, noise: NoiseSource) -> LinearEstimate:
        return run_gpope(self.config, plan, data, noise, self.seed)


def plan_gpope(
    config: GPOPEConfig,
    problem: LinearProblem,
    params: PublicParameters,
    header: Any | None,
    public: PublicSource,
    seed: int,
) -> Plan:
    """GPOPE's plan in either mode, from the public problem and public data only."""
    refuse_same_episodes(public, header)
    if config.mode == "minibatch":
        from privrl.ope.linear.minibatch import plan_minibatch

        return plan_minibatch(config, problem, params, header, public, seed)
    return plan_paper(config, problem, params, public, seed)


def run_gpope(
    config: GPOPEConfig, plan: Plan, data: TrajectoryDataset, noise: NoiseSource, seed: int
) -> LinearEstimate:
    """GPOPE on the private episodes with the planned public settings."""
    if config.mode == "minibatch":
        from privrl.ope.linear.minibatch import run_minibatch

        return run_minibatch(config, plan, data, noise, seed)
    return run_paper(config, plan, data, noise, seed)


def refuse_same_episodes(public: PublicSource, header: Any | None) -> None:
    """Public data must be public: not the private episodes themselves (same content)."""
    if public.data is None or header is None:
        return
    from privrl.data.io import header_of

    if header_of(public.data).content_sha256 == header.content_sha256:
        raise ConfigError(
            "public",
            "holds the same episodes as the private dataset; tuning must use an independent "
            "PUBLIC dataset (or give `clip` and `step_size`)",
        )


def plan_paper(
    config: GPOPEConfig,
    problem: LinearProblem,
    params: PublicParameters,
    public_source: PublicSource,
    seed: int,
) -> Plan:
    """Mode paper: N, σ (calibrated for (ε, δ), m, N), h and the step from public sources."""
    from privrl.ope.gpope import (
        PublicTuningConfig,
        StepSize,
        calibrated_sigma,
        gpope_report,
        tune_on_public,
    )
    from privrl.privacy.public import Source

    m = problem.m
    if config.iterations is not None:
        n_iter = params.given("iterations N", int(config.iterations), Source.FLAG, "iterations")
    else:
        n_iter = params.derive("iterations N", 10 * m, "10·m")
        if n_iter > MAX_ITERATIONS:
            raise ValueError(
                f"the default N = 10·m = {n_iter:,} iterations exceeds the limit of "
                f"{MAX_ITERATIONS:,}; pass `iterations=N`"
            )
    n, needs_tuning = check_gpope_inputs(
        config, problem, public_source, m, "m = {m:,} trajectories"
    )
    accounting = config.accounting
    params.given("accounting", accounting, source_of(accounting, "rigorous"), "accounting")
    sigma = calibrated_sigma(config.epsilon, config.delta, m, n_iter, accounting)
    params.derive("noise σ (std / h)", sigma, f"calibrated for (ε, δ), m, N ({accounting})")
    public: list[str] = []
    notes: list[str] = []
    tuned = None
    pub_stats, pub_source = None, ""
    if needs_tuning:  # public data or a simulator (`check_gpope_inputs`)
        pub_stats, pub_source = public_sample(
            public_source, problem, m, seed, " with an independent seed"
        )
        tuning = PublicTuningConfig(
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
        tuned = tune_on_public(pub_stats, problem.system(), tuning)
        public.append(tuned.report_line())
    tuned_h = (
        None
        if tuned is None
        else (
            tuned.clip,
            f"{tuned.clip_quantile:.0%} quantile of ‖B_i‖ on a non-private run, {tuned.source}",
        )
    )
    h = flag_or_tuned(params, "clip bound h", config.clip, "clip", tuned_h)
    if config.step_size is not None:
        lam = config.lambda_min
        if config.schedule == "diminishing" and lam is None:
            system = problem.system()
            if system is None:
                raise ConfigError("schedule", "diminishing on a dataset needs `lambda_min`")
            lam = system.lambda_min_q()
            notes.append(f"λ_min(Q) = {lam:.4g} from the public model")
        step = StepSize(config.schedule, config.step_size, config.k, lam)
        params.given("step size", step.describe(), Source.FLAG, "step_size, schedule, k")
    else:
        assert tuned is not None
        step = tuned.step
        params.given(
            "step size", step.describe(), Source.PUBLIC_SPLIT, f"best mean MSPBE on {tuned.source}"
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
    # the settings `gpope` itself reports (GpopeResult.config), all public: functions of
    # (ε, δ), m, N, h, the step and the feature dimension.
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
    facts.update(pub_stats=pub_stats, pub_source=pub_source, public_source=public_source)
    return public_plan(problem, planned, algorithm, tuned=tuned, **facts)


def run_paper(
    config: GPOPEConfig, plan: Plan, data: TrajectoryDataset, noise: NoiseSource, seed: int
) -> LinearEstimate:
    """Algorithm 1 on the private episodes; the value's interval from replica runs of the same
    mechanism on PUBLIC data."""
    from privrl.ope.gpope import gpope, gpope_replicas

    f = plan.facts
    problem: LinearProblem = f["problem"]
    stats = problem.stats(data)
    result = gpope(
        stats,
        epsilon=config.epsilon,
        delta=config.delta,
        iterations=f["n_iter"],
        clip=f["h"],
        step=f["step"],
        accounting=config.accounting,
        noise=noise,
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
    pub_stats, pub_source = f["pub_stats"], f["pub_source"]
    if n_rep and pub_stats is None:
        pub_stats, pub_source = public_sample(f["public_source"], problem, problem.m, seed)
    if not n_rep:
        pub_stats = None

    def replicas(w: np.ndarray) -> np.ndarray | None:
        """v on R runs of the same mechanism (h, σ, N, step) on PUBLIC data."""
        if pub_stats is None:
            return None
        theta_r, *_ = gpope_replicas(
            [pub_stats],
            iterations=f["n_iter"],
            clip=f["h"],
            step=[f["step"]] * n_rep,
            sigma=result.sigma,
            delta=config.delta,
            noise=NoiseSource.insecure([seed, 7]),  # PUBLIC data: repeatable
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
            problem, result.theta, problem.features, config.confidence, replicas=replicas,
            covers=covers,
        )
    )  # fmt: skip
    return LinearEstimate(result.theta, report, metrics, curve, details=result)


def flag_or_tuned(
    params: Any, name: str, flag: float | None, flag_name: str, tuned: tuple[float, str] | None
) -> float:
    """A tuning setting (GPOPE's h, η): its setting (`flag_name` names it), else `tuned` =
    (the value tuned on public data, how), recorded in `params`."""
    from privrl.privacy.public import Source

    if flag is not None:
        return params.given(name, float(flag), Source.FLAG, flag_name)
    assert tuned is not None  # `check_gpope_inputs` asked for tuning
    return params.given(name, tuned[0], Source.PUBLIC_SPLIT, tuned[1])


def public_clipping(tuned: Any, where: str) -> dict[str, Any]:
    """The clipped fraction of the PUBLIC tuning run(s) (`where`: of what, where), never of
    the private run (it is not noised); nothing without tuning."""
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
        "on public data; give a public dataset (`public=`) for an interval"
    )


def public_sample(
    public: PublicSource, problem: LinearProblem, size: int, seed: int, seed_words: str = ""
) -> tuple[Any, str]:
    """GPOPE statistics of PUBLIC data and their source: the public dataset, else a simulator
    sample of `size` trajectories from the tuning stream [seed, 2] (the source ends in
    `seed_words`); (None, "") without either."""
    if public.data is not None:
        return problem.stats(public.data), public.name
    if problem.domain is not None:
        pub = problem.domain.sample(
            problem.domain.behaviour_policy, size, seed=np.random.SeedSequence([seed, 2])
        )
        return problem.stats(pub), f"sampled from the {problem.env} simulator{seed_words}"
    return None, ""


def check_gpope_inputs(
    config: GPOPEConfig, problem: LinearProblem, public: PublicSource, m: int, what: str
) -> tuple[int, bool]:
    """Before the data: the per-trajectory statistics fit in memory for the public count `m`
    (`what` names it, formatted with m), and (clip, step size) are set or tunable on public
    data (never on the private data). Returns n (features) and whether tuning is needed."""
    n = int(problem.features.dim)
    check_statistics_fit("GPOPE", m, n, what.format(m=m))
    needs_tuning = config.clip is None or config.step_size is None
    if needs_tuning and public.data is None and problem.domain is None:
        raise ValueError(
            "on a dataset, give `clip` and `step_size`, or give a public dataset (`public=`) to "
            "tune them on (they must not be tuned on the private data)"
        )
    return n, needs_tuning
