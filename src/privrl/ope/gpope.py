"""GPOPE: gradient-perturbed off-policy evaluation (Xie, Thomas & Miklau 2019, Algorithm 1).

Saddle-point GTD2 (Liu et al. 2015) on per-trajectory statistics (2.2), privatised per step:

    for i = 1..N:
        j ~ Uniform(1..m)                              # one trajectory per iteration (line 2)
        B = B_j(θ_i, w_i) = [−Â_jᵀ w ; Â_j θ + Ĉ_j w − b̂_j]                 (4.1, lines 3-4)
        B̄ = B / max(1, ‖B‖₂/h)                         # clip (line 5)
        B̃ = B̄ + h·N(0, σ² I_{2n})                      # noise, drawn by privrl.privacy (line 6)
        [θ; w] ← [θ; w] − β_i B̃                        # (line 7)
    return θ_{N+1}                                     # last iterate; θ₁ = w₁ = 0

Without clipping and noise the update is exactly GTD2 (2.3): θ ← θ + βÂᵀw,
w ← w + β(b̂ − Âθ − Ĉw). Step sizes: constant β = η/N^k (Theorem 2) or diminishing
β_i = η/(λ_min(Q)·i) (Theorem 3), λ_min(Q) estimated on public data.

Privacy. The release record describes exactly what is released: N noisy clipped gradients,
each from one trajectory sampled uniformly (1 of m, without replacement within the step),
Gaussian noise of std hσ on a statistic of replace-one sensitivity 2h (noise multiplier σ/2);
see `privrl.ope.accounting`. Every noise draw goes through
`privrl.privacy.gaussian_mechanism`. The trajectory index and the noise come from the run's
`NoiseSource` (secret in a private run).
The iterates θ_i are post-processing of the released noisy gradients, so the recorded
θ-history (for MSPBE curves) is covered by the same guarantee; the final θ is the output.

Tuning. h and the step size must not be chosen on the private data (that would leak
information the accounting does not cover): `tune_on_public` (`privrl.ope.tuning`) chooses
them on an independent public sample from the same simulator and returns a report line saying
so. The fraction of clipped steps is computed on that public run only; the private run never
reports it.

This is the paper's mode, kept for comparison. Its per-step noise is as large as the clipped
gradient and it returns the last iterate, so at small ε it stays near θ = 0;
`privrl.ope.minibatch` is the mode that learns (Poisson-sampled minibatches, PLD accounting,
a step schedule and Polyak averaging).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from privrl.ope.accounting import (
    PAPER_MODE_WARNING,
    RELATION,
    SENSITIVITY_FACTOR,
    AccountingMode,
    calibrate_sigma,
    gpope_event,
    paper_epsilon,
)
from privrl.ope.stats import TrajectoryStats
from privrl.privacy.accounting import describe_backend
from privrl.privacy.accounting import epsilon as accounting_epsilon
from privrl.privacy.mechanisms import gaussian_mechanism
from privrl.privacy.noise import NoiseSource
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import PrivacyUnit

__all__ = [
    "GpopeResult",
    "NoiseGroup",
    "PublicTuning",
    "PublicTuningConfig",
    "StepSize",
    "calibrated_sigma",
    "gpope",
    "gpope_release",
    "gpope_replicas",
    "gpope_report",
    "gtd2_saddle_point",
    "record_points",
    "tune_on_public",
]

UNIT = PrivacyUnit.TRAJECTORY
SeedLike = int | np.random.Generator | np.random.SeedSequence | None


# ------------------------------------------------------------------------ step sizes


@dataclass(frozen=True)
class StepSize:
    """β_i: ``constant`` β = η/N^k (k ∈ [0, 1)), or ``diminishing`` β_i = η/(λ_min(Q)·i).

    k = 0 makes η the step itself. For ``diminishing``, λ_min(Q) must come from public data
    (or the known model), and the paper's Theorem 3 asks η > 1.
    """

    schedule: Literal["constant", "diminishing"] = "constant"
    eta: float = 1.0
    k: float = 0.0
    lambda_min: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.eta) and self.eta > 0):
            raise ValueError(f"step size η must be finite and > 0, got {self.eta}")
        if self.schedule == "constant":
            if not 0.0 <= self.k < 1.0:
                raise ValueError(f"k must be in [0, 1) for β = η/N^k, got {self.k}")
        elif self.schedule == "diminishing":
            lm = self.lambda_min
            if lm is None or not (math.isfinite(lm) and lm > 0):
                raise ValueError(
                    "a diminishing step β_i = η/(λ_min(Q)·i) needs λ_min(Q) > 0 estimated on "
                    f"public data, got {lm}"
                )
        else:
            raise ValueError(f"schedule must be 'constant' or 'diminishing', got {self.schedule!r}")

    def betas(self, iterations: int) -> np.ndarray:
        if self.schedule == "constant":
            return np.full(iterations, self.eta / float(iterations) ** self.k)
        assert self.lambda_min is not None
        return self.eta / (self.lambda_min * np.arange(1, iterations + 1, dtype=np.float64))

    def scaled(self, factor: float) -> StepSize:
        return StepSize(self.schedule, self.eta * factor, self.k, self.lambda_min)

    def describe(self) -> str:
        if self.schedule == "constant":
            if self.k == 0:
                return f"constant β = {self.eta:.4g}"
            return f"constant β = η/N^k, η = {self.eta:.4g}, k = {self.k:g}"
        return (
            f"diminishing β_i = η/(λ_min(Q)·i), η = {self.eta:.4g}, λ_min = {self.lambda_min:.4g}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------ the iteration


def record_points(iterations: int, n_points: int = 60) -> np.ndarray:
    """Iteration counts (1..N, log-spaced, N included) at which θ is recorded."""
    if n_points <= 0:
        return np.zeros(0, dtype=np.int64)
    pts = np.unique(np.geomspace(1, iterations, n_points).round().astype(np.int64))
    return pts


def _streams(noise: NoiseSource) -> tuple[np.random.Generator, np.random.Generator]:
    """The (trajectory sampling, noise) generators of one run. Both are secret in a private
    run: the rigorous accountant amplifies by the sampling, which assumes the drawn index is
    hidden."""
    return noise.generator("gpope trajectory index"), noise.generator("gpope noise")


@dataclass
class _Trace:
    x: np.ndarray  # [R, 2n] final (θ, w)
    history: np.ndarray  # [K, R, n] θ at the record points
    clipped: np.ndarray  # [R] number of clipped steps (diagnostic; private unless public data)
    norms: np.ndarray | None  # [N, R] ‖B_i‖ if requested


NOISE_BLOCK_BYTES = 4_000_000  # noise of up to this many bytes is drawn per mechanism call


@dataclass(frozen=True)
class NoiseGroup:
    """A block of `size` consecutive replicas that draw their noise from one generator with
    one noise std and clip bound (several groups: independent runs batched in lock step, each
    with its own stream, exactly as if each had been run alone)."""

    size: int
    rng: np.random.Generator | None
    noise_std: float
    clip: float


def _noise_block(groups: Sequence[NoiseGroup], k: int, width: int, name: str) -> np.ndarray | None:
    """The Gaussian noise of the next `k` iterations [k, R, width], every group's block drawn
    by one `gaussian_mechanism` call on its own generator (a block draw of k·size·width values
    equals k successive draws of size·width, so the values are those of a per-step draw)."""
    if all(g.noise_std <= 0 for g in groups):
        return None
    parts = []
    for g in groups:
        if g.noise_std <= 0:
            parts.append(np.zeros((k, g.size, width)))
            continue
        noise, _ = gaussian_mechanism(
            np.zeros((k, g.size, width)),
            sensitivity=SENSITIVITY_FACTOR * g.clip,
            sigma=g.noise_std,
            rng=g.rng,  # type: ignore[arg-type]
            name=name,
        )
        parts.append(np.asarray(noise))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)


def gtd2_saddle_point(
    A: np.ndarray,
    b: np.ndarray,
    C: np.ndarray,
    index: np.ndarray,
    betas: np.ndarray,
    *,
    clip: float,
    noise_std: float,
    rng: np.random.Generator | None,
    record: np.ndarray | None = None,
    keep_norms: bool = False,
    name: str = "GTD2 gradient",
    groups: Sequence[NoiseGroup] | None = None,
) -> _Trace:
    """Algorithm 1's loop for R lock-step replicas (internal; use `gpope` / `gpope_replicas`).

    A, C [M, n, n], b [M, n]: per-trajectory statistics of all replicas' datasets stacked;
    index [N, R]: row of (A, b, C) used by replica r at iteration i; betas [N] (or [N, R], a
    step-size sequence per replica). clip = ∞ and
    noise_std = 0 give plain (non-private) GTD2. Noise: `gaussian_mechanism` on the clipped
    [R, 2n] gradients with sensitivity 2h and std `noise_std` (the per-step records are
    discarded: the caller builds the run's record, which includes the subsampling). The noise
    is drawn in blocks of iterations (the same values as one draw per step).
    `groups` (instead of clip / noise_std / rng): consecutive replica blocks with their own
    clip bound, noise std and generator, for independent runs batched in one array loop.
    """
    N, R = index.shape
    n = A.shape[1]
    betas = np.asarray(betas, dtype=np.float64)
    if betas.shape not in ((N,), (N, R)):
        raise ValueError(f"betas must have shape ({N},) or ({N}, {R}), got {betas.shape}")
    betas = betas[:, None] if betas.ndim == 1 else betas
    if groups is None:
        groups = [NoiseGroup(R, rng, float(noise_std), float(clip))]
    elif sum(g.size for g in groups) != R:
        raise ValueError(f"the groups cover {sum(g.size for g in groups)} replicas, not {R}")
    for g in groups:
        if g.noise_std > 0 and not math.isfinite(g.clip):
            raise ValueError("noise without a finite clip bound has unbounded sensitivity")
        if g.noise_std > 0 and g.rng is None:
            raise ValueError("a private run needs a noise generator")
    finite = [math.isfinite(g.clip) for g in groups]
    if any(finite) and not all(finite):
        raise ValueError("clipped and unclipped replicas cannot share one loop")
    finite_clip = all(finite)
    clips: float | np.ndarray = (
        groups[0].clip
        if len(groups) == 1
        else np.concatenate([np.full(g.size, g.clip) for g in groups])
    )
    rec = np.zeros(0, dtype=np.int64) if record is None else np.asarray(record, dtype=np.int64)
    history = np.full((rec.size, R, n), np.nan)
    norms = np.zeros((N, R)) if keep_norms else None
    x = np.zeros((R, 2 * n))
    clipped = np.zeros(R, dtype=np.int64)
    k = 0
    single = R == 1
    idx1 = index[:, 0] if single else None
    beta1 = betas[:, 0] if single else None
    block = max(1, int(NOISE_BLOCK_BYTES // (R * 2 * n * 8)))
    noise: np.ndarray | None = None
    start = 0
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(N):
            if i - start == block or i == 0:
                start = i
                noise = _noise_block(groups, min(block, N - i), 2 * n, name)
            if single:  # fast path: views, 2-D products (most of the cost is Python overhead)
                assert idx1 is not None and beta1 is not None
                j1 = int(idx1[i])
                A1 = A[j1]
                th, w1 = x[0, :n], x[0, n:]
                g = np.concatenate((-(w1 @ A1), A1 @ th + C[j1] @ w1 - b[j1]))[None, :]
                norm = np.sqrt(g @ g[0])  # shape [1]
            else:
                j = index[i]
                Aj = A[j]
                theta = x[:, :n, None]
                w = x[:, n:, None]
                g = np.empty((R, 2 * n))
                g[:, :n] = -(Aj.transpose(0, 2, 1) @ w)[..., 0]  # −Âᵀw
                g[:, n:] = (Aj @ theta + C[j] @ w)[..., 0] - b[j]  # Âθ + Ĉw − b̂
                norm = np.sqrt(np.einsum("ri,ri->r", g, g))
            if norms is not None:
                norms[i] = norm
            if finite_clip:
                bad = ~np.isfinite(norm)
                if bad.any():
                    # A gradient that overflowed (extreme rewards or ratios) cannot be scaled
                    # into the h-ball; replace it by 0, which is inside it: the clipped
                    # gradient stays a function into the ball (sensitivity 2h) and the run
                    # never fails or turns NaN because of one trajectory's values.
                    g = np.where(bad[:, None], 0.0, g)
                    norm = np.where(bad, 0.0, norm)
                    clipped += bad
                over = norm > clips
                if over.any():
                    clipped += over
                    g = g * np.where(over, clips / np.where(over, norm, 1.0), 1.0)[:, None]
            if noise is not None:
                g = g + noise[i - start]
            if single:
                x -= beta1[i] * g  # type: ignore[index]
            else:
                x -= betas[i][:, None] * g
            while k < rec.size and rec[k] == i + 1:
                history[k] = x[:, :n]
                k += 1
            if not finite_clip and not np.isfinite(norm).all():
                x[~np.isfinite(x).all(axis=1)] = np.nan  # diverged (non-private run)
                if np.isnan(x).all():
                    break
    if k < rec.size:
        history[k:] = x[None, :, :n]
    return _Trace(x=x, history=history, clipped=clipped, norms=norms)


# ------------------------------------------------------------------------ privacy record


@functools.lru_cache(maxsize=256)
def _cached_sigma(
    eps: float, delta: float, m: int, n_iter: int, mode: str, orders: tuple | None = None
) -> float:
    return calibrate_sigma(eps, delta, m, n_iter, mode, orders=orders)  # type: ignore[arg-type]


def calibrated_sigma(
    epsilon: float, delta: float, m: int, iterations: int, accounting: AccountingMode
) -> float:
    """σ (noise std / h) of a GPOPE run for a target (ε, δ), from public inputs only: (ε, δ),
    m (public under replace-one), N and the accounting mode. Cached per process."""
    return _resolve_sigma(epsilon, None, delta, m, iterations, accounting)[0]


def gpope_release(
    *, sigma: float, clip: float, m: int, iterations: int, dim: int, extra: dict[str, Any]
) -> Release:
    """The record of a GPOPE run: N noisy clipped gradients, 1 of m sampled per step,
    replace-one sensitivity 2h, noise std hσ (noise multiplier σ/2)."""
    return Release(
        name="GPOPE primal-dual gradients B̃_i = clip_h(B_j(θ_i, w_i)) + h·N(0, σ²I), "
        "one trajectory per iteration",
        mechanism="gaussian",
        sensitivity=SENSITIVITY_FACTOR * clip,
        norm="l2",
        noise={"sigma": clip * sigma, "noise_multiplier": sigma / SENSITIVITY_FACTOR},
        count=int(iterations),
        size=int(dim),
        event=gpope_event(sigma, m, iterations),
        extra={
            "sampling": "without_replacement",
            "dataset_size": int(m),
            "sample_size": 1,
            "clip_bound_h": float(clip),
            "sigma_over_h": float(sigma),
            "sensitivity_derivation": "replace-one: ‖B̄(x) − B̄(x')‖₂ ≤ 2h",
            **extra,
        },
    )


@dataclass
class GpopeResult:
    """A GPOPE run: final θ (the output), iterate history, noise and the privacy report."""

    theta: np.ndarray
    w: np.ndarray
    sigma: float  # noise std / h (the paper's σ); 0 for a non-private run
    clip: float
    iterations: int
    m: int
    step: StepSize
    report: PrivacyReport
    record_at: np.ndarray
    theta_history: np.ndarray  # [K, n] θ after record_at[k] iterations
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def noise_std(self) -> float:
        return self.clip * self.sigma


def _resolve_sigma(
    epsilon: float | None,
    sigma: float | None,
    delta: float,
    m: int,
    iterations: int,
    accounting: AccountingMode,
    *,
    orders: tuple[float, ...] | None = None,
) -> tuple[float, str | None]:
    if (epsilon is None) == (sigma is None):
        raise ValueError("give exactly one of epsilon (σ is calibrated) or sigma (explicit noise)")
    if accounting not in ("rigorous", "paper"):
        raise ValueError(f"accounting must be 'rigorous' or 'paper', got {accounting!r}")
    if epsilon is not None:
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
        args = (float(epsilon), float(delta), int(m), int(iterations), accounting)
        return (_cached_sigma(*args, orders) if orders else _cached_sigma(*args)), None
    assert sigma is not None
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma}")
    return float(sigma), None


def gpope_report(
    *,
    sigma: float,
    clip: float,
    m: int,
    iterations: int,
    n: int,
    delta: float,
    epsilon: float | None,
    accounting: AccountingMode,
    public: Sequence[str],
    notes: Sequence[str],
    orders: tuple[float, ...] | None = None,
) -> PrivacyReport:
    """The run's report, from public inputs only (so a command can check it against a ledger
    before reading the data). ε comes from the rigorous accountant on the release's event
    (dense RDP orders; `orders` substitutes a coarser grid — an upper bound, for quick runs)."""
    notes = list(notes)
    if sigma == 0:
        return PrivacyReport.non_private(
            UNIT,
            RELATION,
            [
                Release(
                    name="GTD2 gradients without noise (non-private baseline)",
                    mechanism="none",
                    sensitivity=SENSITIVITY_FACTOR * clip,
                    norm="l2",
                    noise={},
                    count=iterations,
                    size=2 * n,
                    extra={"non_private": True},
                )
            ],
            system="gpope",
            delta=delta,
            public=public,
            notes=notes,
        )
    extra: dict[str, Any] = {"accounting_mode": accounting}
    if epsilon is not None:
        extra["target_epsilon"] = float(epsilon)
    if accounting == "paper":
        extra["paper_lemma1_epsilon"] = paper_epsilon(sigma, m, iterations, delta)
        notes.append(PAPER_MODE_WARNING)
    else:
        notes.append(
            "σ calibrated by the rigorous accountant: N-fold subsampled (1 of m, without "
            "replacement) Gaussian, replace-one sensitivity 2h, dp-accounting RDP"
        )
    release = gpope_release(
        sigma=sigma, clip=clip, m=m, iterations=iterations, dim=2 * n, extra=extra
    )
    if orders is not None:
        eps = accounting_epsilon(release.event, delta, relation=RELATION, orders=orders)
        return PrivacyReport(
            unit=UNIT,
            relation=RELATION,
            releases=[release],
            delta=float(delta),
            epsilon=float(eps),
            rho=None,
            accountant=describe_backend("rdp", orders) + " (coarse grid: an upper bound)",
            backend="rdp",
            public=list(public),
            notes=notes,
            system="gpope",
        )
    return PrivacyReport.build(
        UNIT,
        RELATION,
        [release],
        delta,
        backend="rdp",
        system="gpope",
        public=public,
        notes=notes,
    )


_report = gpope_report  # the reproductions' name


def _check_common(clip: float, iterations: int, delta: float) -> None:
    if not (clip > 0) or math.isnan(clip):
        raise ValueError(f"clip bound h must be > 0, got {clip}")
    if int(iterations) < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def gpope(
    stats: TrajectoryStats,
    *,
    epsilon: float | None = None,
    delta: float = 1e-5,
    iterations: int,
    clip: float,
    step: StepSize,
    sigma: float | None = None,
    accounting: AccountingMode = "rigorous",
    noise: NoiseSource | None = None,
    n_record: int = 60,
    public: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> GpopeResult:
    """Algorithm 1 on one dataset's per-trajectory statistics.

    Give `epsilon` (σ calibrated for (ε, δ) by `accounting`) or an explicit `sigma`
    (σ = 0 with clip = ∞: non-private GTD2, reported as not private). `public` names the
    public information used (e.g. the tuning sample), for the report. The trajectory draws
    and the noise come from `noise` (default: a secure `NoiseSource`).
    """
    noise = noise or NoiseSource.secure()
    _check_common(clip, iterations, delta)
    m, n = stats.m, stats.n
    sig, _ = _resolve_sigma(epsilon, sigma, delta, m, iterations, accounting)
    report = gpope_report(
        sigma=sig,
        clip=clip,
        m=m,
        iterations=iterations,
        n=n,
        delta=delta,
        epsilon=epsilon,
        accounting=accounting,
        public=public,
        notes=notes,
    )
    report = noise.certify(report)
    sample_rng, noise_rng = _streams(noise)
    index = sample_rng.integers(0, m, size=(iterations, 1))
    rec = record_points(iterations, n_record)
    trace = gtd2_saddle_point(
        stats.A,
        stats.b,
        stats.C,
        index,
        step.betas(iterations),
        clip=clip,
        noise_std=clip * sig if sig > 0 else 0.0,
        rng=noise_rng,
        record=rec,
    )
    config = {
        "algorithm": "gpope",
        "iterations": int(iterations),
        "clip": clip,
        "sigma": sig,
        "noise_std": clip * sig,
        "step": step.to_dict(),
        "accounting": accounting,
        "epsilon_target": epsilon,
        "delta": delta,
        "m": m,
        "n_features": n,
        "normalisation": stats.normalisation,
    }
    return GpopeResult(
        theta=trace.x[0, :n].copy(),
        w=trace.x[0, n:].copy(),
        sigma=sig,
        clip=clip,
        iterations=int(iterations),
        m=m,
        step=step,
        report=report,
        record_at=rec,
        theta_history=trace.history[:, 0, :],
        config=config,
    )


def gpope_replicas(
    stats: Sequence[TrajectoryStats],
    *,
    epsilon: float | None = None,
    delta: float = 1e-5,
    iterations: int,
    clip: float,
    step: StepSize | Sequence[StepSize],
    sigma: float | None = None,
    accounting: AccountingMode = "rigorous",
    noise: NoiseSource,
    n_record: int = 0,
    keep_norms: bool = False,
    orders: tuple[float, ...] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, _Trace]:
    """Independent GPOPE runs in lock step, for experiments: one per (dataset, step size).

    Replica r = d·V + v runs on dataset d with step size v (V = number of step sizes; all
    datasets of the same m). Returns (θ [R, n], record points, θ history [K, R, n], σ, trace).
    Each replica is exactly Algorithm 1 on its own dataset with its own trajectory draws and
    noise; the noise of all replicas is drawn by one `gaussian_mechanism` call per iteration.
    Each replica's guarantee is that of `gpope`.
    """
    if not stats:
        raise ValueError("no datasets")
    _check_common(clip, iterations, delta)
    m, n = stats[0].m, stats[0].n
    if any(s.m != m or s.n != n for s in stats):
        raise ValueError("all replicas need datasets of the same size m and feature dimension")
    steps = [step] if isinstance(step, StepSize) else list(step)
    sig, _ = _resolve_sigma(epsilon, sigma, delta, m, iterations, accounting, orders=orders)
    D, V = len(stats), len(steps)
    if D == 1:
        A, b, C = stats[0].A, stats[0].b, stats[0].C
    else:
        A = np.concatenate([s.A for s in stats])
        b = np.concatenate([s.b for s in stats])
        C = np.concatenate([s.C for s in stats])
    sample_rng, noise_rng = _streams(noise)
    offset = np.repeat(m * np.arange(D), V)
    index = sample_rng.integers(0, m, size=(iterations, D * V)) + offset[None, :]
    betas = np.stack([st.betas(iterations) for st in steps], axis=1)  # [N, V]
    betas = np.tile(betas, (1, D))  # replica d·V + v uses step v
    rec = record_points(iterations, n_record)
    trace = gtd2_saddle_point(
        A,
        b,
        C,
        index,
        betas,
        clip=clip,
        noise_std=clip * sig if sig > 0 else 0.0,
        rng=noise_rng,
        record=rec,
        keep_norms=keep_norms,
    )
    return trace.x[:, :n], rec, trace.history, sig, trace


# Public tuning (`privrl.ope.tuning`) is re-exported here, its historical home.
from privrl.ope.tuning import (  # noqa: E402 (tuning runs GPOPE, so it imports this module)
    PublicTuning,
    PublicTuningConfig,
    tune_on_public,
)
