"""GPOPE with Poisson-subsampled minibatches, PLD accounting and Polyak averaging (beyond the
paper).

The paper's Algorithm 1 (`privrl.ope.gpope`) takes one trajectory per step and returns the
last iterate. Its per-step noise h·σ is as large as the clipped gradient itself, so the last
iterate mostly reflects the last few noise draws, and at small ε it never leaves θ = 0. This
mode is the standard DP-SGD recipe applied to the same saddle point (4.1):

    for t = 1..T:
        S_t ⊆ {1..m}: each trajectory joins independently with probability q   (Poisson)
        G_t = Σ_{j ∈ S_t} clip_h(B_j(θ_t, w_t)) + N(0, h²σ² I_{2n})               (noisy sum)
        [θ; w] ← [θ; w] − β_t G_t / (q·m̄)                                        (m̄ public)
        β_t = η (1 + t/t₀)^{−κ}                                                (step schedule)
    return θ̄ = mean of θ_t over the last half of the iterations                  (Polyak)

Privacy. Unit: one trajectory. Relation: add/remove (the relation Poisson sampling is analysed
under): adding or removing one trajectory changes the clipped sum by at most h, so each step
is a Poisson-sampled Gaussian mechanism with noise multiplier σ = (noise std)/h. The run's
event is SelfComposed(PoissonSampled(q, Gaussian(σ)), T), accounted by dp-accounting's PLD
accountant (tight up to its pessimistic discretisation). Replace-one neighbours move the sum
by at most 2h; `replace_one_epsilon` accounts the same event under that relation (noise
multiplier σ/2), for the reports' relation table. θ̄ and every iterate are post-processing of
the noisy sums. All noise is drawn by `privrl.privacy.gaussian_mechanism`.

Public inputs only. q, T, h, η, κ, t₀ and the normaliser m̄ set the noise scale, the sampling
rate or the number of releases, so they come from the caller, never from the data: the
reproductions choose (h, η) on an independent public sample of the same simulator
(`tune_minibatch_on_public`), fix q and T by a documented rule on the public design size m̄,
and a wrong m̄ only rescales the step (it does not move the saddle point). The clipped-step
fraction is measured on the public run only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from dp_accounting import dp_event

from privrl.ope.mspbe import LinearSystem
from privrl.ope.stats import TrajectoryStats
from privrl.privacy.accounting import (
    calibrate_noise_multiplier,
    epsilon,
    sampled_gaussian_event,
)
from privrl.privacy.mechanisms import gaussian_mechanism
from privrl.privacy.noise import NoiseSource
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.sampling import poisson_subset
from privrl.privacy.units import NeighbourRelation, PrivacyUnit

__all__ = [
    "MINIBATCH_RELATION",
    "MinibatchConfig",
    "MinibatchTuning",
    "default_sampling_rate",
    "minibatch_event",
    "minibatch_gtd2",
    "minibatch_report",
    "minibatch_sigma",
    "replace_one_epsilon",
    "tune_minibatch_on_public",
]

UNIT = PrivacyUnit.TRAJECTORY
MINIBATCH_RELATION = NeighbourRelation.ADD_REMOVE
SeedLike = int | np.random.Generator | np.random.SeedSequence | None
PLD_DISCRETIZATION = 1e-4

# The public defaults of the command line and of the chain reproduction (fixed before any
# trial was run, on simulator samples only): an expected batch of B̄ = 20 trajectories,
# q = min(1, B̄/m̄), T = 2000 iterations, and the (h, η) grid `tune_minibatch_on_public` searches.
DEFAULT_BATCH = 20
DEFAULT_STEPS = 2000
TUNING_ETAS = (3.0, 10.0, 30.0, 100.0)
TUNING_CLIP_MULTIPLIERS = (0.1, 0.25, 0.5, 1.0)  # × the median ‖B_i‖ of a noiseless public run
TUNING_REPEATS = 2


def default_sampling_rate(public_m: int, batch: int = DEFAULT_BATCH) -> float:
    """q = min(1, B̄/m̄): an expected batch of B̄ trajectories out of the DECLARED size m̄ (a
    public number; never the count of the private dataset, which add/remove neighbours change)."""
    if int(public_m) < 1:
        raise ValueError(f"the declared number of trajectories m̄ must be >= 1, got {public_m}")
    return min(1.0, float(batch) / float(public_m))


@dataclass(frozen=True)
class MinibatchConfig:
    """Public hyper-parameters of minibatch GPOPE.

    q: Poisson sampling rate; iterations: T; clip: h (bound on each trajectory's gradient
    norm); eta, kappa, t0_fraction: β_t = η (1 + t/t₀)^{−κ} with t₀ = t0_fraction·T;
    average_from: Polyak average over iterations t > average_from·T; public_m: m̄, the
    declared (public) dataset size that turns the noisy sum into a mean.
    """

    q: float
    iterations: int
    clip: float
    eta: float
    public_m: int
    kappa: float = 0.5
    t0_fraction: float = 0.1
    average_from: float = 0.5

    def __post_init__(self) -> None:
        if not (0.0 < self.q <= 1.0):
            raise ValueError(f"sampling rate q must be in (0, 1], got {self.q}")
        if int(self.iterations) < 1:
            raise ValueError(f"iterations T must be >= 1, got {self.iterations}")
        if not (self.clip > 0 and math.isfinite(self.clip)):
            raise ValueError(f"clip bound h must be finite and > 0, got {self.clip}")
        if not (self.eta > 0 and math.isfinite(self.eta)):
            raise ValueError(f"step size η must be finite and > 0, got {self.eta}")
        if int(self.public_m) < 1:
            raise ValueError(f"public dataset size m̄ must be >= 1, got {self.public_m}")
        if not 0.0 <= self.kappa <= 1.0:
            raise ValueError(f"step decay κ must be in [0, 1], got {self.kappa}")
        if not self.t0_fraction > 0:
            raise ValueError(f"t0_fraction must be > 0, got {self.t0_fraction}")
        if not 0.0 <= self.average_from < 1.0:
            raise ValueError(f"average_from must be in [0, 1), got {self.average_from}")

    def betas(self) -> np.ndarray:
        """β_t = η (1 + t/t₀)^{−κ}, t = 0..T−1."""
        t = np.arange(self.iterations, dtype=np.float64)
        t0 = max(1.0, self.t0_fraction * self.iterations)
        return self.eta * (1.0 + t / t0) ** (-self.kappa)

    def with_(self, **changes: Any) -> MinibatchConfig:
        return MinibatchConfig(**{**asdict(self), **changes})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------ accounting


def minibatch_event(sigma: float, q: float, iterations: int) -> dp_event.DpEvent:
    """T × PoissonSampled(q, Gaussian(σ)): the event of a minibatch run (add/remove, Δ = h)."""
    return sampled_gaussian_event(
        sigma, int(iterations), sampling="poisson", sampling_probability=float(q)
    )


@functools.lru_cache(maxsize=256)
def minibatch_sigma(target_epsilon: float, delta: float, q: float, iterations: int) -> float:
    """Smallest σ (noise std / h) meeting (ε, δ) under add/remove, PLD accountant."""
    return float(
        calibrate_noise_multiplier(
            float(target_epsilon),
            float(delta),
            int(iterations),
            sampling="poisson",
            sampling_probability=float(q),
            relation=MINIBATCH_RELATION,
            backend="pld",
            tolerance=1e-3,
            pld_discretization=PLD_DISCRETIZATION,
        )
    )


def replace_one_epsilon(sigma: float, q: float, iterations: int, delta: float) -> float:
    """ε of the same run under replace-one neighbours: the clipped sum moves by ≤ 2h, so the
    noise multiplier is σ/2 (PLD accountant, REPLACE_ONE)."""
    return float(
        epsilon(
            minibatch_event(sigma / 2.0, q, iterations),
            delta,
            relation=NeighbourRelation.REPLACE_ONE,
            backend="pld",
            pld_discretization=PLD_DISCRETIZATION,
        )
    )


def minibatch_report(
    config: MinibatchConfig,
    *,
    sigma: float,
    n: int,
    delta: float,
    epsilon_target: float | None,
    public: Sequence[str] = (),
    notes: Sequence[str] = (),
    epsilon_replace_one: float | None = None,
) -> PrivacyReport:
    """The run's report, from public inputs only (checkable against a ledger before data).

    `epsilon_replace_one` (from `replace_one_epsilon`): the same run's ε under replace-one
    neighbours, listed beside the add/remove guarantee (in the release and the notes).
    """
    beside: list[str] = []
    if epsilon_replace_one is not None:
        beside.append(
            f"under replace-one neighbours (sensitivity 2h, noise multiplier σ/2) the same run "
            f"is ({float(epsilon_replace_one):.4g}, {float(delta):g})-DP (PLD)"
        )
    release = Release(
        name="minibatch GPOPE noisy gradient sums G_t = Σ_{j∈S_t} clip_h(B_j) + h·N(0, σ²I), "
        "Poisson-sampled trajectories",
        mechanism="gaussian",
        sensitivity=float(config.clip),
        norm="l2",
        noise={"sigma": config.clip * sigma, "noise_multiplier": float(sigma)},
        count=int(config.iterations),
        size=2 * int(n),
        event=minibatch_event(sigma, config.q, config.iterations),
        extra={
            "sampling": "poisson",
            "sampling_probability": float(config.q),
            "clip_bound_h": float(config.clip),
            "sigma_over_h": float(sigma),
            "sensitivity_derivation": "add/remove: ‖ΣS clip_h(B) − ΣS' clip_h(B)‖₂ ≤ h",
            "public_m": int(config.public_m),
            **({"target_epsilon": float(epsilon_target)} if epsilon_target else {}),
            **(
                {"epsilon_replace_one": float(epsilon_replace_one)}
                if epsilon_replace_one is not None
                else {}
            ),
        },
    )
    return PrivacyReport.build(
        UNIT,
        MINIBATCH_RELATION,
        [release],
        delta,
        backend="pld",
        system="gpope-minibatch",
        public=public,
        notes=[
            *notes,
            "σ calibrated by dp-accounting's PLD accountant: T-fold Poisson-sampled Gaussian, "
            "add/remove sensitivity h; θ̄ (Polyak average) is post-processing",
            *beside,
        ],
    )


# ------------------------------------------------------------------------ the iteration


@dataclass
class MinibatchTrace:
    theta_avg: np.ndarray  # [R, n] Polyak average (the output)
    x: np.ndarray  # [R, 2n] last (θ, w)
    clipped_fraction: np.ndarray  # [R] (diagnostic; private unless the data are public)
    norms: list[np.ndarray]  # per-step gradient norms if requested (public runs only)


def minibatch_gtd2(
    stats: Sequence[TrajectoryStats],
    config: MinibatchConfig,
    *,
    sigma: float,
    noise: NoiseSource | None = None,
    keep_norms: bool = False,
    clips: Sequence[float] | None = None,
    etas: Sequence[float] | None = None,
) -> MinibatchTrace:
    """Minibatch GTD2 for R independent replicas in lock step (replica r on `stats[r]`).

    The Poisson subsample and the noise are drawn from `noise` (default: a secure
    `NoiseSource`; runs on public data may pass `NoiseSource.insecure(seed)`), through
    `privrl.privacy.sampling.poisson_subset` and `privrl.privacy.gaussian_mechanism`.

    σ = 0 runs without noise (the clip still applies; give a huge h for plain GTD2).
    `clips` / `etas` ([R], public tuning grids only) override h and η per replica; replica
    r is then exactly the run of `config.with_(clip=clips[r], eta=etas[r])`.
    """
    if not stats:
        raise ValueError("no datasets")
    n = stats[0].n
    if any(s.n != n for s in stats):
        raise ValueError("all replicas need the same feature dimension")
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma}")
    R = len(stats)
    # replicas that share a dataset (public tuning) share its arrays: no copies
    unique: dict[int, int] = {}
    for s in stats:
        unique.setdefault(id(s), len(unique))
    datasets = list({id(s): s for s in stats}.values())
    first_row = np.cumsum([0] + [d.m for d in datasets])[:-1]
    A = np.concatenate([d.A for d in datasets]) if len(datasets) > 1 else datasets[0].A
    b = np.concatenate([d.b for d in datasets]) if len(datasets) > 1 else datasets[0].b
    C = np.concatenate([d.C for d in datasets]) if len(datasets) > 1 else datasets[0].C
    sizes = np.array([s.m for s in stats])
    owner = np.repeat(np.arange(R), sizes)  # replica of each (replica, trajectory) slot
    local = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    source = np.repeat(first_row[[unique[id(s)] for s in stats]], sizes) + local
    noise = noise or NoiseSource.secure()
    sample_rng = noise.generator("minibatch GTD2 Poisson sampling")
    noise_rng = noise.generator("minibatch GTD2 noise")
    T = int(config.iterations)
    h = np.full(R, float(config.clip)) if clips is None else np.asarray(clips, dtype=np.float64)
    eta = np.full(R, config.eta) if etas is None else np.asarray(etas, dtype=np.float64)
    if h.shape != (R,) or eta.shape != (R,) or not (np.all(h > 0) and np.all(eta > 0)):
        raise ValueError(f"clips and etas need {R} positive values (one per replica)")
    # β_t / η per step, times η_r / (q·m̄) per replica
    shape = config.with_(eta=1.0).betas()
    step = eta / (config.q * config.public_m)
    start = int(config.average_from * T)
    x = np.zeros((R, 2 * n))
    avg = np.zeros((R, n))
    clipped = np.zeros(R)
    sampled = np.zeros(R)
    norms: list[np.ndarray] = []
    total = owner.size
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(T):
            # Poisson sampling of the (replica, trajectory) slots, each with probability q
            slots = poisson_subset(total, config.q, sample_rng)
            r, rows = owner[slots], source[slots]
            Aj, Cj = A[rows], C[rows]
            th, w = x[r, :n], x[r, n:]
            g = np.empty((rows.size, 2 * n))
            g[:, :n] = -(w[:, None, :] @ Aj)[:, 0]  # −Âᵀw
            g[:, n:] = (Aj @ th[:, :, None] + Cj @ w[:, :, None])[..., 0] - b[rows]
            norm = np.sqrt(np.einsum("pi,pi->p", g, g))
            bad = ~np.isfinite(norm)
            if bad.any():  # an overflowed gradient is replaced by 0, inside the h-ball
                g[bad], norm[bad] = 0.0, 0.0
            hr = h[r]
            over = norm > hr
            factor = np.where(over, hr / np.where(over, norm, 1.0), 1.0)
            if keep_norms:
                norms.append(norm)
            np.add.at(clipped, r, over)
            np.add.at(sampled, r, 1.0)
            G = np.zeros((R, 2 * n))
            np.add.at(G, r, g * factor[:, None])
            if sigma > 0:
                # h_r·N(0, σ²I) on a sum of sensitivity h_r, drawn as N(0, σ²I) on G/h_r
                G, _ = gaussian_mechanism(
                    G / h[:, None],
                    sensitivity=1.0,
                    sigma=sigma,
                    rng=noise_rng,
                    name="minibatch GTD2 sum",
                )
                G = G * h[:, None]
            x -= (shape[t] * step)[:, None] * G
            if t >= start:
                avg += x[:, :n]
    avg /= T - start
    frac = np.divide(clipped, sampled, out=np.zeros(R), where=sampled > 0)
    return MinibatchTrace(theta_avg=avg, x=x, clipped_fraction=frac, norms=norms)


# ------------------------------------------------------------------------ public tuning


@dataclass
class MinibatchTuning:
    """(h, η) chosen on an independent public sample, with q and T fixed by the caller."""

    config: MinibatchConfig
    sigma: float
    clip_quantile: float
    clipped_fraction: float
    public_m: int
    grid: list[dict[str, float]]
    source: str

    def report_line(self) -> str:
        c = self.config
        return (
            f"minibatch mode: q = {c.q:.3g}, T = {c.iterations}, h = {c.clip:.3g} (× of the "
            f"{self.clip_quantile:.0%} quantile of ‖B_i‖ on a public run), η = {c.eta:.3g}, "
            f"β_t = η(1 + t/t₀)^−{c.kappa:g}, Polyak average of the last "
            f"{1 - c.average_from:.0%}; chosen on an independent PUBLIC sample of "
            f"{self.public_m} trajectories ({self.source}); public clipped fraction "
            f"{self.clipped_fraction:.3f}"
        )


def tune_minibatch_on_public(
    public: TrajectoryStats,
    system: LinearSystem,
    base: MinibatchConfig,
    *,
    epsilon_target: float | None,
    delta: float,
    etas: Sequence[float],
    clip_multipliers: Sequence[float] = (0.25, 0.5, 1.0, 2.0),
    clip_quantile: float = 0.5,
    repeats: int = 4,
    seed: SeedLike = 0,
    source: str = "sampled from the simulator",
    clips: Sequence[float] | None = None,
) -> MinibatchTuning:
    """Choose h and η on PUBLIC data for a private run with `base`'s q, T and m̄.

    1. Non-private minibatch GTD2 (no noise, no clip) on the public sample at base.eta; h₀ =
       the `clip_quantile` of the per-trajectory gradient norms along that run.
    2. For h ∈ h₀ × `clip_multipliers` and η ∈ `etas`: `repeats` runs with the σ the private
       run will use, on the public sample; keep the pair of smallest mean MSPBE (`system`).

    `clips` (public, e.g. a user's fixed h) replaces the grid h₀ × `clip_multipliers`; a
    single-value `etas` fixes η the same way, so a flag the user gives is tuned around, not over.
    """
    # Everything here runs on PUBLIC data, so its draws are repeatable from the seed.
    if isinstance(seed, np.random.Generator):
        s_np, s_priv = seed.spawn(2)
    else:  # an int or a SeedSequence seeds the tuning (never a fresh OS entropy draw)
        ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        s_np, s_priv = ss.spawn(2)
    free = minibatch_gtd2(
        [public],
        base.with_(clip=1e300),
        sigma=0.0,
        noise=NoiseSource.insecure(s_np),
        keep_norms=True,
    )
    allnorms = np.concatenate(free.norms) if free.norms else np.ones(1)
    allnorms = allnorms[np.isfinite(allnorms) & (allnorms > 0)]
    h0 = float(np.quantile(allnorms, clip_quantile)) if allnorms.size else 1.0
    sig = (
        0.0
        if epsilon_target is None
        else minibatch_sigma(epsilon_target, delta, base.q, base.iterations)
    )
    grid: list[dict[str, float]] = []
    best: tuple[float, MinibatchConfig, float] | None = None
    grid_h = [h0 * float(c) for c in clip_multipliers] if clips is None else list(clips)
    pairs = [(float(h), float(e)) for h in grid_h for e in etas]
    clips = np.repeat([p[0] for p in pairs], repeats)
    steps = np.repeat([p[1] for p in pairs], repeats)
    tr = minibatch_gtd2(
        [public] * len(clips),
        base,
        sigma=sig,
        noise=NoiseSource.insecure(s_priv),
        clips=clips,
        etas=steps,
    )
    vals = np.asarray(system.mspbe(tr.theta_avg), dtype=np.float64).reshape(len(pairs), repeats)
    fracs = tr.clipped_fraction.reshape(len(pairs), repeats).mean(axis=1)
    for (h, eta), v, frac in zip(pairs, vals, fracs, strict=True):
        mean = float(np.mean(v)) if np.all(np.isfinite(v)) else math.inf
        grid.append({"clip": h, "eta": eta, "mspbe": mean, "clipped_fraction": float(frac)})
        if best is None or mean < best[0]:
            best = (mean, base.with_(clip=h, eta=eta), float(frac))
    assert best is not None
    return MinibatchTuning(
        config=best[1],
        sigma=sig,
        clip_quantile=clip_quantile,
        clipped_fraction=best[2],
        public_m=public.m,
        grid=grid,
        source=source,
    )
