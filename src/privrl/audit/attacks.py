"""Membership attacks on privrl's systems, with vectorised trials.

Each audit plays the DP distinguishing game under the system's own relation. Both systems
here use replace-one on trajectories: D = D₀ ∪ {x₀} and D' = D₀ ∪ {x₁}, where x₁ is the
canary and x₀ the trajectory it replaces. A trial draws b ~ Ber(½), runs the system's release
step on D (b = 0) or D' (b = 1) and scores the output; `privrl.audit.bounds` turns the scores
into ε lower bounds. All trials of a batch go through ONE call of the system's own mechanism
code on stacked inputs (the noise is drawn by `privrl.privacy`, never re-implemented here).

* DP-APVI (`audit_dp_apvi`): the released noisy counts of eq. (2) (`privrl.offline.apvi`:
  `empirical_counts` → `noise_plan` → `private_counts`). The planning that follows is
  post-processing and is not re-run per trial (its cost would limit the audit to a few
  hundred trials); the counts are what the accountant accounts. Score: the log-likelihood
  ratio of the released counts at the cells where D and D' differ — for Gaussian noise the
  projection Σ d·ñ on the difference d = n(D') − n(D) (the Neyman–Pearson test when no count
  is clipped at 0), for Laplace Σ (|ñ − n(D)| − |ñ − n(D')|).
* GPOPE (`audit_gpope`): Algorithm 1 itself (`privrl.ope.gpope.gpope_replicas`, one replica
  per trial, lock step), scored by the projection of the final iterates [θ; w] on the
  difference of the two trajectories' clipped first-step gradients. With m = 1 and N = 1 the
  run is a single Gaussian release of sensitivity 2h — the closed-form worst case.

Canaries: ``worst`` makes x₀ and x₁ differ in every released coordinate by as much as the
sensitivity allows (DP-APVI: disjoint cells at every step; GPOPE: b̂ = ±c·u with ‖c·u‖ > h,
so the clipped gradients are h·u and −h·u); ``random`` draws both at random from the same
distribution as D₀ (a typical member, a much weaker attack).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from privrl.config import ConfigError
from privrl.privacy.noise import NoiseSource
from privrl.privacy.report import PrivacyReport

__all__ = [
    "AuditTrials",
    "Canary",
    "GPOPEAuditSettings",
    "apvi_claimed",
    "audit_dp_apvi",
    "audit_gpope",
    "calibrate",
    "calibrate_apvi_rho",
    "gpope_claimed",
    "gpope_report",
]

Canary = Literal["worst", "random", "file"]
GPOPE_AUDIT_GAMMA = 0.9  # γ of the gpope audit's per-trajectory statistics
_BATCH_FLOATS = 2_000_000  # noise drawn per mechanism call (memory bound of one batch)


@dataclass
class AuditTrials:
    """The scored trials of one audit.

    scores, labels: one per trial (labels = b). epsilon_claimed: the system's own report's
    ε at `delta` (∞ for a non-private twin). params: the public set-up of the audit.
    """

    system: str
    scores: np.ndarray
    labels: np.ndarray
    epsilon_claimed: float
    delta: float
    report: PrivacyReport
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def trials(self) -> int:
        return int(self.labels.size)

    @classmethod
    def from_report(
        cls,
        system: str,
        report: PrivacyReport,
        scores: np.ndarray,
        labels: np.ndarray,
        *,
        delta: float,
        params: dict[str, Any],
    ) -> AuditTrials:
        """Trials whose claimed ε is `report`'s own ε (at `delta`)."""
        return cls(
            system=system,
            scores=scores,
            labels=labels,
            epsilon_claimed=float(report.epsilon),
            delta=float(delta),
            report=report,
            params=params,
        )


def _check_trials(trials: int, canary: str, *, file: bool = False) -> int:
    if int(trials) < 2:
        raise ConfigError("trials", f"must be >= 2, got {trials}")
    if canary not in ("worst", "random") and not (file and canary == "file"):
        raise ConfigError("canary", f"must be 'worst' or 'random', got {canary!r}")
    return int(trials)


def _batches(trials: int, per_trial: int, batch: int | None = None) -> list[int]:
    """Trials per mechanism call: `batch` if given (1 = one call per trial, the per-trial
    baseline of benchmarks/bench_audit.py), else as many as fit in `_BATCH_FLOATS`."""
    if batch is not None and int(batch) < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    size = int(batch) if batch is not None else max(1, _BATCH_FLOATS // max(per_trial, 1))
    return [min(size, trials - i) for i in range(0, trials, size)]


def _trial_batches(
    trials: int,
    per_trial: int,
    batch: int | None,
    progress: Callable[[int, int], None] | None,
) -> Iterator[tuple[int, int]]:
    """(first trial, size) of each mechanism call (`_batches`), in order; once a call's
    trials are scored, `progress(done, trials)`."""
    done = 0
    for size in _batches(trials, per_trial, batch):
        yield done, size
        done += size
        if progress is not None:
            progress(done, trials)


# ---------------------------------------------------------------------------------------------
# DP-APVI: Gaussian (or Laplace) counts
# ---------------------------------------------------------------------------------------------


def apvi_claimed(H: int, S: int, A: int, privacy: Any) -> PrivacyReport:
    """DP-APVI's planned report (the releases its noise plan states, the run's accountant),
    computed from the public sizes only — what privacy.json of a run would say."""
    from privrl.offline.apvi import RELATION, UNIT, noise_plan

    plan = noise_plan(H, S, A, privacy, 0.1)
    releases = plan.releases_planned(H, S, A)
    if privacy is None or plan.mechanism == "none":
        return PrivacyReport.non_private(UNIT, RELATION, releases, system="apvi")
    delta = privacy.report_delta if privacy.mechanism == "gaussian" else 0.0
    return PrivacyReport.build(UNIT, RELATION, releases, delta, system="dp-apvi")


def calibrate_apvi_rho(epsilon: float, delta: float, H: int, S: int, A: int) -> float:
    """The largest ρ (to 0.1%) whose DP-APVI report states ε ≤ `epsilon` at `delta`."""
    from privrl.offline.apvi import PrivacyConfig

    def eps_of(rho: float) -> float:
        cfg = PrivacyConfig.gaussian(rho, report_delta=delta)
        return float(apvi_claimed(H, S, A, cfg).epsilon)

    return calibrate(eps_of, epsilon)


def calibrate(eps_of: Callable[[float], float], epsilon: float) -> float:
    """The largest budget b (to 0.1%) with eps_of(b) ≤ `epsilon` (eps_of increasing in b)."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ConfigError("epsilon", f"must be finite and > 0, got {epsilon}")
    lo, hi = 1e-8, max(epsilon, 1e-6)
    while eps_of(hi) <= epsilon:
        lo, hi = hi, hi * 4.0
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if eps_of(mid) <= epsilon else (lo, mid)
    return lo


def _apvi_trajectories(
    H: int,
    S: int,
    A: int,
    *,
    n_background: int,
    canary: Canary,
    copies: int,
    rng: np.random.Generator,
    episode: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """States [n, H+1] and actions [n, H] of D = D₀ ∪ {x₀} and D' = D₀ ∪ {x₁}."""
    bg_s = rng.integers(0, S, size=(n_background, H + 1))
    bg_a = rng.integers(0, A, size=(n_background, H))
    if canary == "file":
        # x₁ is the given canary; x₀ a random trajectory it replaces. Copies of both in D₀
        # keep their cells away from eq. (2)'s {·}⁺, as for ``worst``.
        x0_s, x0_a = rng.integers(0, S, size=H + 1), rng.integers(0, A, size=H)
        x1_s, x1_a = episode.states, episode.actions
        bg_s = np.concatenate([bg_s, np.tile(x0_s, (copies, 1)), np.tile(x1_s, (copies, 1))])
        bg_a = np.concatenate([bg_a, np.tile(x0_a, (copies, 1)), np.tile(x1_a, (copies, 1))])
    elif canary == "worst":
        # x₀ stays in state 0 taking action 0, x₁ in state 1 taking action min(1, A−1): no
        # (h, s, a) or (h, s, a, s') cell is shared, so each family changes in 2H cells by 1.
        x0_s, x0_a = np.zeros(H + 1, np.int64), np.zeros(H, np.int64)
        x1_s, x1_a = np.ones(H + 1, np.int64), np.full(H, min(1, A - 1), np.int64)
        # `copies` of each in D₀ keep their cells' counts far from 0, where eq. (2)'s {·}⁺
        # would discard part of the signal.
        bg_s = np.concatenate([bg_s, np.tile(x0_s, (copies, 1)), np.tile(x1_s, (copies, 1))])
        bg_a = np.concatenate([bg_a, np.tile(x0_a, (copies, 1)), np.tile(x1_a, (copies, 1))])
    else:
        x0_s, x1_s = rng.integers(0, S, size=(2, H + 1))
        x0_a, x1_a = rng.integers(0, A, size=(2, H))
    d_s = np.concatenate([bg_s, x0_s[None]])
    d1_s = np.concatenate([bg_s, x1_s[None]])
    d_a = np.concatenate([bg_a, x0_a[None]])
    d1_a = np.concatenate([bg_a, x1_a[None]])
    return d_s, d_a, d1_s, d1_a


def audit_dp_apvi(
    *,
    H: int,
    S: int,
    A: int,
    privacy: Any,
    trials: int,
    canary: Canary = "worst",
    n_background: int = 20,
    rng: np.random.Generator,
    progress: Callable[[int, int], None] | None = None,
    batch: int | None = None,
    episode: Any = None,
) -> AuditTrials:
    """Score `trials` releases of DP-APVI's noisy counts on D or D' (b ~ Ber(½) each).

    `privacy` is an `apvi.PrivacyConfig` (None, or ρ = ∞, for non-private APVI: its counts are
    released as they are). Every noise draw is `apvi.private_counts` on the stacked counts.
    `episode` (a `privrl.audit.canary.TabularCanary`, with ``canary="file"``) is the canary x₁.
    """
    from privrl.envs.tabular import Episodes
    from privrl.offline.apvi import Counts, empirical_counts, noise_plan, private_counts

    trials = _check_trials(trials, canary, file=episode is not None)
    H, S, A = int(H), int(S), int(A)
    if min(H, S, A) < 1 or S < 2:
        raise ValueError(f"need H >= 1, S >= 2, A >= 1, got H={H}, S={S}, A={A}")
    if n_background < 0:
        raise ValueError(f"n_background must be >= 0, got {n_background}")
    report = apvi_claimed(H, S, A, privacy)
    plan = noise_plan(H, S, A, privacy, 0.1)
    if plan.families != ("n_sa", "n_sas"):
        raise ValueError("the audit covers the count families only (privatize_rewards must be off)")
    copies = math.ceil(6.0 * plan.scale) + 1 if canary in ("worst", "file") else 0
    d_s, d_a, d1_s, d1_a = _apvi_trajectories(
        H, S, A, n_background=n_background, canary=canary, copies=copies, rng=rng, episode=episode
    )

    def counts(st: np.ndarray, ac: np.ndarray) -> np.ndarray:
        ep = Episodes(st, ac, np.zeros(ac.shape), None)
        c = empirical_counts(ep, horizon=H, n_states=S, n_actions=A)
        return np.concatenate([c.n_sa.ravel(), c.n_sas.ravel()]).astype(np.float64)

    c0, c1 = counts(d_s, d_a), counts(d1_s, d1_a)
    support = np.flatnonzero(c0 != c1)
    n_sa_size = H * S * A
    n = int(d_s.shape[0])
    labels = rng.integers(0, 2, size=trials)
    scores = np.empty(trials)
    for done, size in _trial_batches(trials, c0.size, batch, progress):
        b = labels[done : done + size]
        stacked = np.where(b[:, None] == 1, c1, c0)
        base = Counts(
            n_sa=stacked[:, :n_sa_size].reshape(size, H, S, A),
            n_sas=stacked[:, n_sa_size:].reshape(size, H, S, A, S),
            r_sum=None,
            n_episodes=n,
        )
        noisy, _ = private_counts(base, plan, rng)  # the system's own eq. (2)
        y = np.concatenate(
            [np.asarray(noisy.n_sa).reshape(size, -1), np.asarray(noisy.n_sas).reshape(size, -1)],
            axis=1,
        )[:, support]
        lo, hi = c0[support], c1[support]
        if plan.mechanism == "laplace":
            scores[done : done + size] = (np.abs(y - lo) - np.abs(y - hi)).sum(axis=1)
        else:
            scores[done : done + size] = y @ (hi - lo)
    return AuditTrials.from_report(
        "dp-apvi" if report.private else "apvi",
        report,
        scores,
        labels,
        delta=report.delta,
        params={
            "H": H,
            "S": S,
            "A": A,
            "mechanism": plan.mechanism,
            "noise_scale_per_count": plan.scale,
            "rho": None if privacy is None else privacy.rho,
            "canary": canary,
            "background_trajectories": n - 1,
            "changed_cells": int(support.size),
            "audited_release": "the noisy counts n_h(s,a), n_h(s,a,s') of eq. (2)",
        },
    )


# ---------------------------------------------------------------------------------------------
# GPOPE: the per-step Gaussian of Algorithm 1
# ---------------------------------------------------------------------------------------------


def gpope_claimed(sigma: float, m: int, iterations: int, delta: float) -> float:
    """GPOPE's own accountant: ε of N × (1 of m, Gaussian z = σ/2) at δ (∞ when σ = 0)."""
    from privrl.ope.accounting import rigorous_epsilon

    if sigma == 0:
        return math.inf
    return float(rigorous_epsilon(sigma, m, iterations, delta))


def gpope_report(
    *, sigma: float, clip: float, m: int, iterations: int, features: int, delta: float
) -> PrivacyReport:
    """GPOPE's claimed report (its release of N noisy steps on [θ; w] of dimension 2n), from
    the public set-up only; non-private when σ = 0."""
    if sigma == 0:
        return PrivacyReport.non_private("trajectory", "replace-one", system="gpope")
    from privrl.ope.accounting import RELATION
    from privrl.ope.gpope import gpope_release

    rel = gpope_release(
        sigma=sigma, clip=clip, m=m, iterations=iterations, dim=2 * features, extra={}
    )
    return PrivacyReport.build("trajectory", RELATION, [rel], delta, system="gpope")


@dataclass(frozen=True)
class GPOPEAuditSettings:
    """The audited GPOPE run (`audit_gpope`).

    Attributes:
        epsilon: the budget σ is calibrated for by GPOPE's rigorous accountant (with
            `delta`, `m`, `iterations`); give it or `sigma`, not both.
        sigma: the noise scale σ itself (0: the non-private twin, plain GTD2 with clipping).
        delta: the δ of the claimed ε.
        clip: the clip norm of the per-trajectory gradients.
        m: the number of trajectories.
        iterations: N, the number of noisy steps.
        features: n, the number of features.
    """

    epsilon: float | None = None
    sigma: float | None = None
    delta: float = 1e-5
    clip: float = 1.0
    m: int = 1
    iterations: int = 1
    features: int = 2


def audit_gpope(
    settings: GPOPEAuditSettings,
    *,
    trials: int,
    canary: Canary = "worst",
    rng: np.random.Generator,
    progress: Callable[[int, int], None] | None = None,
    batch: int | None = None,
    statistic: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> AuditTrials:
    """Score `trials` runs of GPOPE (Algorithm 1, `gpope_replicas`) on D or D'.

    Give `epsilon` (σ calibrated by GPOPE's rigorous accountant for (ε, δ, m, N)) or `sigma`
    (σ = 0 is the non-private twin: plain GTD2 with clipping). D₀ holds m − 1 trajectories;
    with ``worst`` their statistics are 0 (they add no gradient), with ``random`` all
    statistics are Gaussian. Trajectories' Â, Ĉ are 0 under ``worst`` so the first-step
    gradient is [0; −b̂_j] for every iterate, which makes every step's gradient the canary's
    own statistic when the canary is sampled.

    `statistic`: a canary trajectory's own (Â, b̂, Ĉ) [n, n], [n], [n, n] (``--canary FILE``,
    `privrl.audit.canary.load_gpope_canary`): D₀ is ``worst``'s (statistics 0), x₀ the
    trajectory that adds no gradient (statistics 0) and x₁ the canary; the score is the
    projection on the canary's clipped first-step gradient, as for ``worst``. The settings are
    those of `GPOPEAuditSettings`.
    """
    from privrl.ope.gpope import StepSize, calibrated_sigma, gpope_replicas
    from privrl.ope.stats import TrajectoryStats

    st = settings
    epsilon, sigma, delta, clip = st.epsilon, st.sigma, st.delta, st.clip
    m, iterations, features = st.m, st.iterations, st.features
    if statistic is not None:
        canary = "file"  # type: ignore[assignment]
    trials = _check_trials(trials, canary, file=statistic is not None)
    m, iterations, n = int(m), int(iterations), int(features)
    if m < 1 or iterations < 1 or n < 1:
        raise ValueError(
            f"need m >= 1, iterations >= 1, features >= 1 (m={m}, N={iterations}, n={n})"
        )
    if not (math.isfinite(clip) and clip > 0):
        raise ConfigError("clip", f"must be finite and > 0, got {clip}")
    if (epsilon is None) == (sigma is None):
        raise ValueError("give exactly one of epsilon (σ calibrated) or sigma")
    sig = calibrated_sigma(epsilon, delta, m, iterations, "rigorous") if sigma is None else sigma
    if not (math.isfinite(sig) and sig >= 0):
        raise ConfigError("sigma", f"must be finite and >= 0, got {sig}")
    claimed = gpope_claimed(sig, m, iterations, delta)

    A_ = np.zeros((m, n, n))
    C_ = np.zeros((m, n, n))
    b_ = np.zeros((m, n))
    A1 = C1 = None
    if statistic is not None:
        sA, sb, sC = (np.asarray(x, dtype=np.float64) for x in statistic)
        if sA.shape != (n, n) or sb.shape != (n,) or sC.shape != (n, n):
            raise ValueError(
                f"the canary's statistics have {sb.shape[0]} features, the audit's n = {n}; "
                "set features"
            )
        x0_b, x1_b = np.zeros(n), sb
        A1, C1 = A_.copy(), C_.copy()
        A1[-1], C1[-1] = sA, sC
    elif canary == "worst":
        u = np.zeros(n)
        u[0] = 1.0
        x0_b, x1_b = -2.0 * clip * u, 2.0 * clip * u  # clipped to −h·u and h·u
    else:
        A_ = rng.normal(0.0, 0.3 * clip, size=(m, n, n))
        C_ = -np.abs(rng.normal(0.0, 0.3 * clip, size=(m, n, n)))
        b_ = rng.normal(0.0, clip / math.sqrt(n), size=(m, n))
        x0_b, x1_b = rng.normal(0.0, clip / math.sqrt(n), size=(2, n))
    A0, C0 = A_.copy(), C_.copy()  # the replaced slot keeps D₀'s Â, Ĉ in both datasets
    if A1 is None or C1 is None:
        A1, C1 = A0, C0
    b0, b1 = b_.copy(), b_.copy()
    b0[-1], b1[-1] = x0_b, x1_b

    def clipped(v: np.ndarray) -> np.ndarray:
        norm = float(np.linalg.norm(v))
        return v * min(1.0, clip / norm) if norm > 0 else v

    direction = np.concatenate([np.zeros(n), -(clipped(-x1_b) - clipped(-x0_b))])
    step = StepSize("constant", eta=1.0, k=0.0)
    labels = rng.integers(0, 2, size=trials)
    scores = np.empty(trials)
    for done, size in _trial_batches(
        trials, m * (2 * n * n + n) + 2 * n * iterations, batch, progress
    ):
        b = labels[done : done + size]
        stats = [
            TrajectoryStats(A1, b1, C1, np.ones(m), GPOPE_AUDIT_GAMMA)
            if bit
            else TrajectoryStats(A0, b0, C0, np.ones(m), GPOPE_AUDIT_GAMMA)
            for bit in b.tolist()
        ]
        _, _, _, _, trace = gpope_replicas(
            stats,
            iterations=iterations,
            clip=clip,
            step=step,
            sigma=sig,
            delta=delta,
            noise=NoiseSource.insecure(rng),  # synthetic canaries: repeatable from the seed
        )
        scores[done : done + size] = trace.x @ direction
    report = gpope_report(sigma=sig, clip=clip, m=m, iterations=iterations, features=n, delta=delta)
    return AuditTrials(
        system="gpope" if sig > 0 else "gtd2",
        scores=scores,
        labels=labels,
        epsilon_claimed=claimed,
        delta=float(delta),
        report=report,
        params={
            "sigma": sig,
            "clip": clip,
            "m": m,
            "iterations": iterations,
            "features": n,
            "canary": canary,
            "audited_release": "GPOPE's final iterates [θ; w] (Algorithm 1, all N noisy steps)",
        },
    )
