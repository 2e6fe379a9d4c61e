"""`privrl ope gpope`: GPOPE (Xie et al. 2019) on the run layer."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from privrl.config import ConfigError, check, option
from privrl.privacy.noise import NoiseSource
from privrl.runs.system import Plan, Result, RunContext
from privrl.systems.ope.common import (
    MAX_ITERATIONS,
    OpeSystem,
    PrivateOpeConfig,
    Problem,
    _facts,
    _positive,
    _source,
    check_declared_trajectories,
    check_statistics_fit,
    ope_result,
    value_metrics,
)

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
            from privrl.systems.ope.minibatch import plan_minibatch

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
            from privrl.systems.ope.minibatch import run_minibatch

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
