"""GPOPE's mode minibatch from Python (`privrl.ope.minibatch`, beyond the paper): Poisson-sampled
minibatch GTD2 with Polyak averaging, under ADD/REMOVE neighbours (the relation Poisson sampling
is analysed under; the replace-one ε of the same run is listed beside it).

Neighbours differ in m, so the header's count is neither used nor published: the declared m̄
(`declared_trajectories`, or the metadata's n_trajectories; on a simulator the sample size)
sets the default q = min(1, 20/m̄) and the step normaliser, and σ is calibrated by the PLD
accountant for (ε, δ, q, T) in the plan. h and η come from the config or a public tuning sample.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.algorithm import Plan
from privrl.ope.linear.common import LinearProblem, declared_trajectories, value_metrics
from privrl.ope.linear.estimator import LinearEstimate, public_plan
from privrl.ope.linear.gpope import (
    GPOPE_VALUE_REPLICAS,
    MAX_REPLICA_GATHER,
    MAX_REPLICA_WORK,
    MIN_VALUE_REPLICAS,
    GPOPEConfig,
    PublicSource,
    check_gpope_inputs,
    flag_or_tuned,
    measured_on_public,
    needs_public_data,
    public_clipping,
    public_sample,
)
from privrl.privacy.noise import NoiseSource

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset
    from privrl.privacy.public import PublicParameters

# mode minibatch gathers about q·m_pub trajectories' n × n statistics per replica and step;
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


def plan_minibatch(
    config: GPOPEConfig,
    problem: LinearProblem,
    params: PublicParameters,
    header: Any | None,
    public_source: PublicSource,
    seed: int,
) -> Plan:
    """The public plan of mode minibatch (`privrl.ope.minibatch`): m̄, q, T, h, η and σ from
    public sources only, σ calibrated by the PLD accountant for the target (ε, δ) under
    add/remove, before any private byte is read."""
    from privrl.ope import minibatch as mb
    from privrl.ope.mspbe import LinearSystem
    from privrl.privacy.public import Source

    m_bar = declared_trajectories(
        config, problem, header, params, detail="sets q's default and the step normaliser 1/(q·m̄)"
    )
    if config.sampling_rate is not None:
        q = params.given(
            "sampling rate q", float(config.sampling_rate), Source.FLAG, "sampling_rate"
        )
    else:
        q = params.derive(
            "sampling rate q", mb.default_sampling_rate(m_bar), f"min(1, {mb.DEFAULT_BATCH}/m̄)"
        )
    if config.steps is not None:
        T = params.given("iterations T", int(config.steps), Source.FLAG, "steps")
    else:
        T = params.given("iterations T", mb.DEFAULT_STEPS, Source.DEFAULT, "privrl.ope.minibatch")
    n, needs_tuning = check_gpope_inputs(
        config, problem, public_source, m_bar, "m̄ = {m:,} declared trajectories"
    )
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
        pub_stats, pub_source = public_sample(
            public_source, problem, m_bar, seed, " with its own seed"
        )
        n_etas = len(mb.TUNING_ETAS) if config.step_size is None else 1
        n_clips = len(mb.TUNING_CLIP_MULTIPLIERS) if config.clip is None else 1
        gather = n_etas * n_clips * mb.TUNING_REPEATS * minibatch_batch(q, pub_stats.m) * n * n
        if gather > MAX_TUNING_GATHER:  # public sizes only: q, the public sample's m, n
            raise ValueError(
                f"tuning h and η on the public sample would gather {gather:,} numbers a step "
                f"(above {MAX_TUNING_GATHER:,}); give `clip` and `step_size`, a smaller "
                "`sampling_rate` or fewer features"
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
    h = flag_or_tuned(params, "clip bound h", config.clip, "clip", tuned_h)
    eta = flag_or_tuned(params, "step size η", config.step_size, "step_size", tuned_eta)
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
    return public_plan(
        problem,
        planned,
        algorithm,
        relation=mb.MINIBATCH_RELATION,
        public_source=public_source,
        params=params,
        mb_config=cfg,
        sigma=sigma,
        tuned=tuned,
        pub_stats=pub_stats,
        pub_source=pub_source,
        epsilon_replace_one=eps_ro,
    )


def run_minibatch(
    config: GPOPEConfig, plan: Plan, data: TrajectoryDataset, noise: NoiseSource, seed: int
) -> LinearEstimate:
    """Mode minibatch on the private episodes: minibatch GTD2 with the planned (q, T, h, η,
    σ), noise from the stream [seed, 3]; θ̄ (Polyak) and its value with an interval from
    replica runs of the same mechanism on PUBLIC data."""
    from privrl.ope.minibatch import minibatch_gtd2

    f = plan.facts
    problem: LinearProblem = f["problem"]
    cfg, sigma = f["mb_config"], f["sigma"]
    trace = minibatch_gtd2([problem.stats(data)], cfg, sigma=sigma, noise=noise)
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
        pub_stats, pub_source = public_sample(f["public_source"], problem, cfg.public_m, seed)
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
            noise=NoiseSource.insecure([seed, 7]),  # PUBLIC data: repeatable
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
            f"expected batch of {batch:,}; use fewer steps, features or a smaller `sampling_rate`"
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
    return LinearEstimate(theta, plan.report, metrics, details=trace)
