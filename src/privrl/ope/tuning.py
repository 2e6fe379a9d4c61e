"""GPOPE's public tuning (Xie, Thomas & Miklau 2019, section 5): h and the step size chosen on an
independent PUBLIC sample, never on the private data (that would leak information the
accounting does not cover).

`tune_on_public(public_stats, system, PublicTuningConfig(...))` runs non-private GTD2 for each
step size η and sets h to a quantile of ‖B_i‖ along the best run, then runs GPOPE with the σ
the private run will use and keeps the η of smallest mean MSPBE. Everything here runs on
public data, so its draws may be repeatable from the seed; the fraction of clipped steps it
reports is of the public runs only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from privrl.ope.accounting import AccountingMode
from privrl.ope.gpope import (
    NoiseGroup,
    SeedLike,
    StepSize,
    _resolve_sigma,
    _streams,
    gpope_replicas,
    gtd2_saddle_point,
)
from privrl.ope.mspbe import LinearSystem
from privrl.ope.stats import TrajectoryStats
from privrl.privacy.noise import NoiseSource

__all__ = ["DEFAULT_ETAS", "PublicTuning", "PublicTuningConfig", "tune_on_public"]


# ------------------------------------------------------------------------ public tuning


@dataclass
class PublicTuning:
    """Clip bound and step size chosen on an independent public sample."""

    clip: float
    step: StepSize
    clip_quantile: float
    clipped_fraction: float  # on the public private-noise run with the chosen settings
    public_m: int
    sigma: float
    iterations: int
    grid: list[dict[str, float]]
    source: str
    clip_multiplier: float = 1.0  # h = multiplier × the quantile
    nonprivate_step: StepSize | None = None  # best step of the non-private sweep (if run)

    def report_line(self) -> str:
        times = "" if self.clip_multiplier == 1 else f"{self.clip_multiplier:g} × the "
        return (
            f"clip bound h = {self.clip:.4g} ({times}{self.clip_quantile:.0%} quantile of ‖B_i‖ "
            f"along a non-private GTD2 run) and step size ({self.step.describe()}) were chosen "
            f"on an independent PUBLIC sample of {self.public_m} trajectories ({self.source}), "
            f"not on the private data; fraction of clipped steps on the public run: "
            f"{self.clipped_fraction:.3f}"
        )


DEFAULT_ETAS: tuple[float, ...] = tuple(float(x) for x in np.geomspace(1e-3, 10.0, 13))


@dataclass(frozen=True)
class PublicTuningConfig:
    """How `tune_on_public` chooses h and the step size on public data.

    Attributes:
        m: the PRIVATE dataset's number of trajectories (public under replace-one); with
            `epsilon`, `delta`, `iterations` and `accounting` it sets the σ the tuning runs
            use, which is the σ of the private run.
        epsilon: the private run's target ε (None: tune without noise, σ = 0).
        delta: its δ.
        iterations: N, the private run's number of iterations.
        accounting: how σ is calibrated (`privrl.ope.accounting`).
        etas: the step sizes η tried.
        schedule, k: the step schedule (`StepSize`); `diminishing` uses λ_min(Q) of the
            public system.
        clip_quantile: h is this quantile of ‖B_i‖ along the best non-private run.
        repeats: private-noise runs per η (their mean MSPBE ranks η).
        seed: the seed of the tuning runs' draws (public data: repeatable).
        source: how the public sample was obtained, for the report line.
        orders: RDP orders for σ (None: the dense default; a coarse grid is an upper bound).
        clip: a given h (skips step 1, e.g. an h chosen on the same public sample for
            another ε).
        clip_multipliers: step 2 also tries h × each multiplier.
        batched: run every (h, η) of a step as one lock-step array loop, each run keeping its
            own index and noise streams (the same draws as one run at a time; the same
            choice, the MSPBEs equal up to floating-point rounding), faster at large N.
    """

    m: int
    epsilon: float | None
    iterations: int
    delta: float = 1e-5
    accounting: AccountingMode = "rigorous"
    etas: Sequence[float] = DEFAULT_ETAS
    schedule: Literal["constant", "diminishing"] = "constant"
    k: float = 0.0
    clip_quantile: float = 0.95
    repeats: int = 4
    seed: SeedLike = 0
    source: str = "sampled from the simulator"
    orders: tuple[float, ...] | None = None
    clip: float | None = None
    clip_multipliers: Sequence[float] = (1.0,)
    batched: bool = False

    def __post_init__(self) -> None:
        if int(self.m) < 1 or int(self.iterations) < 1:
            raise ValueError(f"m and iterations must be >= 1, got {self.m}, {self.iterations}")
        if not self.etas:
            raise ValueError("etas must name at least one step size")
        if int(self.repeats) < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if not 0.0 < self.clip_quantile <= 1.0:
            raise ValueError(f"clip_quantile must be in (0, 1], got {self.clip_quantile}")

    def replace(self, **changes: Any) -> PublicTuningConfig:
        return replace(self, **changes)


def tune_on_public(
    public: TrajectoryStats,
    system: LinearSystem | None,
    config: PublicTuningConfig | None = None,
    **settings: Any,
) -> PublicTuning:
    """Choose h and the step size on PUBLIC data (never on the private data).

    1. Non-private GTD2 (σ = 0, h = ∞) on the public sample for each η; keep the best by MSPBE
       and set h to the `clip_quantile` of ‖B_i‖ along that run (skipped when `clip` is given).
       `clip_multipliers` (default (1,)) also tries h × each multiplier in step 2.
    2. With that h and the σ the private run will use (ε, δ, the private m, N), run GPOPE on
       the public sample `repeats` times per η; pick the η of smallest mean MSPBE.
    MSPBE is measured with `system` (the known model, or a public large sample); without one,
    with the public sample's own empirical (A, b, C).

    The settings are a `PublicTuningConfig`; keywords build one (or change the one given).
    """
    if config is None:
        config = PublicTuningConfig(**settings)
    elif settings:
        config = config.replace(**settings)
    return _tune(public, system, config)


def _tune(
    public: TrajectoryStats, system: LinearSystem | None, config: PublicTuningConfig
) -> PublicTuning:
    m, epsilon, delta, iterations = config.m, config.epsilon, config.delta, config.iterations
    accounting, etas, schedule, k = config.accounting, config.etas, config.schedule, config.k
    clip_quantile, repeats, seed = config.clip_quantile, config.repeats, config.seed
    source, orders, clip = config.source, config.orders, config.clip
    clip_multipliers, batched = config.clip_multipliers, config.batched
    if system is None:
        system = LinearSystem(*public.mean(), info={"source": "public sample"})
    lam = system.lambda_min_q() if schedule == "diminishing" else None
    if schedule == "diminishing" and (lam is None or lam <= 0):
        raise ValueError("λ_min(Q) of the public system is not positive; use a constant step")

    def make(eta: float) -> StepSize:
        return StepSize(schedule, eta, k, lam)

    # Everything here runs on PUBLIC data, so its draws may be repeatable from the seed.
    ss = np.random.SeedSequence(seed if isinstance(seed, int) else None)
    s_np, s_priv = ss.spawn(2)
    # 1. non-private runs (one replica per η, all on the public data)
    np_rng = np.random.default_rng(s_np)
    public_noise = NoiseSource.insecure(s_priv)
    nonprivate_eta: float | None = None
    if clip is None and batched:
        # the index streams the one-at-a-time path below draws, in the same order
        runs = [(eta, _streams(NoiseSource.insecure(np_rng))[0]) for eta in etas]
        index = np.concatenate([r.integers(0, public.m, size=(iterations, 1)) for _, r in runs], 1)
        trace = gtd2_saddle_point(
            public.A,
            public.b,
            public.C,
            index,
            np.stack([make(eta).betas(iterations) for eta in etas], axis=1),
            clip=math.inf,
            noise_std=0.0,
            rng=None,
            keep_norms=True,
        )
        vals = np.asarray(system.mspbe(trace.x[:, : public.n]), dtype=np.float64)
        ok = [v for v in range(len(etas)) if math.isfinite(vals[v])]
        if not ok:
            raise ValueError("every step size diverged on the public data; give smaller step sizes")
        best = min(ok, key=lambda v: (vals[v], v))
        nonprivate_eta = float(etas[best])
        assert trace.norms is not None
        col = trace.norms[:, best]
        clip = float(np.quantile(col[np.isfinite(col)], clip_quantile))
        if not clip > 0:
            clip = 1.0
    elif clip is None:
        best_val, best_norms = math.inf, None
        for eta in etas:
            _, _, _, _, trace = gpope_replicas(
                [public],
                delta=delta,
                iterations=iterations,
                clip=math.inf,
                step=make(eta),
                sigma=0.0,
                noise=NoiseSource.insecure(np_rng),
                keep_norms=True,
            )
            val = float(system.mspbe(trace.x[0, : public.n]))
            if math.isfinite(val) and val < best_val:
                best_val, best_norms, nonprivate_eta = val, trace.norms, float(eta)
        if best_norms is None:
            raise ValueError("every step size diverged on the public data; give smaller step sizes")
        clip = float(np.quantile(best_norms[np.isfinite(best_norms)], clip_quantile))
        if not clip > 0:
            clip = 1.0
    # 2. private-noise runs at the σ the private run will use
    if epsilon is None:
        sig = 0.0
    else:
        sig, _ = _resolve_sigma(epsilon, None, delta, m, iterations, accounting, orders=orders)
    grid: list[dict[str, float]] = []
    choice: tuple[float, float, float, float] | None = None
    base_clip = clip
    if batched:
        cells = [(base_clip * float(mult), float(eta)) for mult in clip_multipliers for eta in etas]
        streams = [_streams(public_noise) for _ in cells]
        index = np.concatenate(
            [a.integers(0, public.m, size=(iterations, repeats)) for a, _ in streams], axis=1
        )
        betas = np.concatenate(
            [np.tile(make(eta).betas(iterations)[:, None], (1, repeats)) for _, eta in cells], 1
        )
        trace = gtd2_saddle_point(
            public.A,
            public.b,
            public.C,
            index,
            betas,
            clip=math.inf,
            noise_std=0.0,
            rng=None,
            groups=[
                NoiseGroup(repeats, nz, h * sig, h)
                for (h, _), (_, nz) in zip(cells, streams, strict=True)
            ],
        )
        vals_all = np.asarray(system.mspbe(trace.x[:, : public.n]), dtype=np.float64)
        for c, (h, eta) in enumerate(cells):
            vals = vals_all[c * repeats : (c + 1) * repeats]
            mean = float(np.mean(vals)) if np.all(np.isfinite(vals)) else math.inf
            frac = float(
                trace.clipped[c * repeats : (c + 1) * repeats].sum() / (iterations * repeats)
            )
            grid.append({"clip": h, "eta": eta, "mspbe": mean, "clipped_fraction": frac})
            if choice is None or mean < choice[1]:
                choice = (eta, mean, frac, h)
    for mult in clip_multipliers if not batched else ():
        h = base_clip * float(mult)
        for eta in etas:
            _, _, _, _, trace = gpope_replicas(
                [public] * repeats,
                delta=delta,
                iterations=iterations,
                clip=h,
                step=make(eta),
                sigma=sig,
                noise=public_noise,
            )
            vals = np.asarray(system.mspbe(trace.x[:, : public.n]), dtype=np.float64)
            mean = float(np.mean(vals)) if np.all(np.isfinite(vals)) else math.inf
            frac = float(trace.clipped.sum() / (iterations * repeats))
            grid.append({"clip": h, "eta": float(eta), "mspbe": mean, "clipped_fraction": frac})
            if choice is None or mean < choice[1]:
                choice = (float(eta), mean, frac, h)
    assert choice is not None
    return PublicTuning(
        clip=choice[3],
        step=make(choice[0]),
        clip_quantile=clip_quantile,
        clipped_fraction=choice[2],
        public_m=public.m,
        sigma=sig,
        iterations=int(iterations),
        grid=grid,
        source=source,
        clip_multiplier=choice[3] / base_clip,
        nonprivate_step=None if nonprivate_eta is None else make(nonprivate_eta),
    )
