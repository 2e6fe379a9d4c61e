"""Membership attacks on DP-VAPVI, DP-LSW and SDP-PE, with vectorised trials.

Same game as `privrl.audit.attacks`: replace-one (trajectory for DP-VAPVI and DP-LSW, user for
SDP-PE), D = D₀ ∪ {x₀} and D' = D₀ ∪ {x₁}, b ~ Ber(½) per trial, one call of the system's own
release code for a whole batch of trials (the noise is drawn by `privrl.privacy` through the
system's module, never re-implemented here), a membership score per trial.

* DP-VAPVI (`audit_dp_vapvi`): the 3H released vectors of Algorithm 2 (lines 5, 6, 10) through
  `vapvi.GaussianReleaser.vector`, on statistics computed by `vapvi.variance_statistics` and
  `vapvi.weighted_statistics`. Canary ``worst``: x₀ and x₁ have features −e₀ and +e₀, next
  value H and σ̃² = 1, so every released vector moves by exactly its sensitivity (2H², 2H,
  2H) along e₀, while the Gram matrices (lines 4, 9) do not move (φφᵀ is the same for ±e₀): the
  audit can reach the 3H vector releases' share of ρ (3/5 of it), not the whole claim. Score:
  the Gaussian likelihood ratio Σ_releases (Δ/σ²)·ỹ.
* DP-LSW (`audit_dp_lsw`): `baselines.dp_lsw` itself (θ_X + N(0, σ_X² I), smooth
  sensitivity) on first-visit summaries stacked over trials; tabular Φ = I. Canary ``worst``:
  x₀ and x₁ visit every state, with returns 0 and the declared return range, so F̄ moves by
  range/m at every state (the derivation's worst case; with S = 1 its Frobenius-norm bound is
  exact). Score: the projection of the released θ on θ(D') − θ(D), the canary's own statistic.
* SDP-PE (`audit_sdp_pe`): one batch's private counters, each a shuffle binary sum
  (`privatizers.aggregate_binary_sum` with the `ShufflePrivatizer`'s own calibration, 2H
  counters changed per family, exactly as `ShufflePrivatizer.release` calls it; the
  projection that follows is post-processing). Canary ``worst``: x₀ stays in state 0 with
  action 0, x₁ in state 1 with action 1, both with reward 1: 2H counters of each family move by
  1. Score: Σ d·ñ on the changed counters.

``random`` canaries draw x₀, x₁ like D₀ (a typical member: a much weaker attack).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from privrl.audit.attacks import AuditTrials, Canary, _check_trials, _trial_batches, calibrate
from privrl.privacy.report import PrivacyReport

__all__ = [
    "audit_dp_lsw",
    "audit_dp_vapvi",
    "audit_sdp_pe",
    "calibrate",
    "lsw_claimed",
    "sdp_pe_claimed",
    "vapvi_claimed",
]

Progress = Callable[[int, int], None] | None


def _labels(trials: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 2, size=trials)


# ---------------------------------------------------------------------------------------------
# DP-VAPVI: the Gaussian vector releases of Algorithm 2
# ---------------------------------------------------------------------------------------------


def vapvi_claimed(rho: float | None, delta: float) -> PrivacyReport:
    """DP-VAPVI's planned report (all 5H releases composed, strict matrix noise); non-private
    (VAPVI) when ρ is None."""
    from privrl.offline.vapvi import RELATION, UNIT, dp_vapvi_planned_report

    if rho is None:
        return PrivacyReport.non_private(UNIT, RELATION, system="vapvi")
    return dp_vapvi_planned_report(rho, "strict", delta)


def audit_dp_vapvi(
    *,
    rho: float | None,
    H: int = 3,
    d: int = 3,
    delta: float = 1e-5,
    background: int = 20,
    trials: int,
    canary: Canary = "worst",
    rng: np.random.Generator,
    progress: Progress = None,
    batch: int | None = None,
    feature: tuple[np.ndarray, float] | None = None,
) -> AuditTrials:
    """Score `trials` runs of DP-VAPVI's 3H vector releases on D or D' (ρ None: VAPVI).
    `feature` (φ, V) (with ``canary="file"``, `privrl.audit.canary.load_feature_canary`) is the
    canary x₁; x₀ is drawn like ``random``'s."""
    from privrl.offline.vapvi import (
        GaussianReleaser,
        NonPrivateReleaser,
        variance_statistics,
        weighted_statistics,
    )

    trials = _check_trials(trials, canary, file=feature is not None)
    H, d = int(H), int(d)
    if H < 1 or d < 1 or background < 0:
        raise ValueError(f"need H >= 1, d >= 1, background >= 0 (H={H}, d={d})")
    phi = rng.normal(size=(background, d))
    phi /= np.maximum(np.linalg.norm(phi, axis=1, keepdims=True), 1.0)  # ‖φ‖ ≤ 1
    v_next = rng.uniform(0.0, H, size=background)
    if canary == "worst":
        e0 = np.zeros(d)
        e0[0] = 1.0
        x0, x1, v0, v1 = -e0, e0, float(H), float(H)
    else:
        x = rng.normal(size=(2, d))
        x0, x1 = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1.0)
        v0, v1 = rng.uniform(0.0, H, size=2)
        if canary == "file":
            assert feature is not None
            x1, v1 = np.asarray(feature[0], np.float64), float(feature[1])

    def stats(x: np.ndarray, v: float) -> dict[str, np.ndarray]:
        P = np.vstack([phi, x[None]])
        V = np.r_[v_next, v]
        mask = np.ones(P.shape[0], bool)
        _, v2, v1_ = variance_statistics(P, V, mask)
        # σ̃² ≥ 1 and r + Ṽ ≤ H: the weights of line 9–10 at their worst (σ̃² = 1, r = 0)
        _, target = weighted_statistics(P, np.ones(P.shape[0]), np.zeros(P.shape[0]), V, mask)
        return {"v2": v2, "v1": v1_, "target": target}

    s0, s1 = stats(x0, v0), stats(x1, v1)
    releaser: Any = (
        NonPrivateReleaser() if rho is None else GaussianReleaser(rho=rho, H=H, d=d, rng=rng)
    )
    labels = _labels(trials, rng)
    scores = np.zeros(trials)
    for done, size in _trial_batches(trials, 3 * H * d, batch, progress):
        b = labels[done : done + size, None] == 1
        for h in range(H):
            for kind in ("v2", "v1", "target"):
                diff = s1[kind] - s0[kind]
                noisy = releaser.vector(np.where(b, s1[kind], s0[kind]), kind=kind, h=h)
                weight = 1.0 if rho is None else releaser.sigma(kind) ** 2
                scores[done : done + size] += (noisy - s0[kind]) @ diff / weight
    report = vapvi_claimed(rho, delta)
    return AuditTrials.from_report(
        "dp-vapvi" if rho is not None else "vapvi",
        report,
        scores,
        labels,
        delta=delta,
        params={
            "H": H,
            "d": d,
            "rho": rho,
            "canary": canary,
            "background_trajectories": int(background),
            "audited_release": "the 3H Gaussian vectors of Algorithm 2 (lines 5, 6, 10); the "
            "2H Gram matrices are released but unchanged by the canary",
        },
    )


# ---------------------------------------------------------------------------------------------
# DP-LSW: output perturbation at a smooth sensitivity
# ---------------------------------------------------------------------------------------------


LSL_C = 2.0  # DP-LSL's λ = c·m^0.4 in the audit (λ > ‖ρ‖_∞‖Φ‖_F² = 1 needs c > m^−0.4)


def lsw_claimed(
    *,
    epsilon: float | None,
    delta: float,
    states: int,
    trajectories: int,
    return_range: float,
    algorithm: str = "dp-lsw",
    c: float = LSL_C,
) -> PrivacyReport:
    """DP-LSW's (or, with ``algorithm="dp-lsl"``, DP-LSL's) report (ε, δ) from its public plan;
    non-private (LSW / LSL) when ε is None."""
    from privrl.ope.baselines import RELATION, UNIT, plan_dp_lsl, plan_dp_lsw

    if epsilon is None:
        return PrivacyReport.non_private(UNIT, RELATION, system=algorithm.removeprefix("dp-"))
    Phi, w = np.eye(states), np.full(states, 1.0 / states)
    kw = {"epsilon": epsilon, "delta": delta, "return_range": return_range}
    if algorithm == "dp-lsl":
        return plan_dp_lsl(Phi, w, trajectories, c=c, **kw).report()
    return plan_dp_lsw(Phi, w, trajectories, **kw).report()


def lsw_neighbours(
    S: int, m: int, R: float, canary: Canary, rng: np.random.Generator, returns: Any = None
) -> tuple[Any, Any]:
    """The first-visit summaries (`FirstVisit`) of D = D₀ ∪ {x₀} and D' = D₀ ∪ {x₁}, m
    trajectories each, tabular Φ = I.

    ``worst`` (S ≥ 2) exercises the data-dependent sensitivity: state 0 is rare — no
    trajectory of D₀ visits it — and x₁ is the one trajectory that does (first-visit return R),
    while D₀'s m − 1 trajectories and x₀ visit every other state (returns R and 0). So m₀ goes
    from 0 to 1 (F̄₀ moves by the whole range R, the largest local sensitivity there is), and
    every other count drops from m to m − 1, which raises the smooth bound of D' above D's.
    With S = 1 every trajectory visits the only state (counts m in both): x₀ returns 0, x₁
    returns R. ``random`` / ``file``: every trajectory visits every state (counts m), D₀'s
    returns and x₀'s uniform on [0, R], x₁'s drawn the same way or the file's `returns`."""
    from privrl.ope.baselines import FirstVisit

    full = np.full(S, float(m))
    if canary == "worst" and S >= 2:
        common = np.r_[0.0, np.ones(S - 1)]  # states 1..S−1
        mean0 = common * R * (m - 1) / m  # D₀ returns R, x₀ returns 0; state 0 unvisited
        counts1 = np.r_[1.0, np.full(S - 1, m - 1.0)]
        mean1 = np.r_[R, np.full(S - 1, R if m > 1 else 0.0)]
        return FirstVisit(common * m, mean0, m), FirstVisit(counts1, mean1, m)
    bg = rng.uniform(0.0, R, size=(m - 1, S))  # first-visit returns of D₀
    if canary == "worst":
        f0, f1 = np.zeros(S), np.full(S, R)
    else:
        f0, f1 = rng.uniform(0.0, R, size=(2, S))
        if canary == "file":
            assert returns is not None
            f1 = np.clip(np.asarray(returns, np.float64).reshape(S), 0.0, R)
    return (
        FirstVisit(full, (bg.sum(axis=0) + f0) / m, m),
        FirstVisit(full, (bg.sum(axis=0) + f1) / m, m),
    )


def _gaussian_llr(theta: np.ndarray, mu: tuple[np.ndarray, np.ndarray], sd: tuple[float, float]):
    """log N(θ; μ₁, σ₁²I) − log N(θ; μ₀, σ₀²I) for each column of θ [n, trials]: the
    Neyman–Pearson statistic of D' against D (the most powerful test at every threshold)."""
    (m0, m1), (s0, s1) = mu, sd
    q0 = ((theta - m0[:, None]) ** 2).sum(axis=0) / (2.0 * s0**2)
    q1 = ((theta - m1[:, None]) ** 2).sum(axis=0) / (2.0 * s1**2)
    return q0 - q1 - theta.shape[0] * math.log(s1 / s0)


def audit_dp_lsw(
    *,
    epsilon: float | None,
    delta: float = 1e-5,
    states: int = 1,
    trajectories: int = 1,
    return_range: float = 1.0,
    trials: int,
    canary: Canary = "worst",
    rng: np.random.Generator,
    progress: Progress = None,
    batch: int | None = None,
    returns: np.ndarray | None = None,
    algorithm: str = "dp-lsw",
    c: float = LSL_C,
) -> AuditTrials:
    """Score `trials` releases of DP-LSW (`baselines.dp_lsw`, the system's own release: θ_X +
    N(0, σ_X² I) at its smooth bound σ_X) on D or D' (`lsw_neighbours`; ε None: LSW, the same
    estimate without noise), uniform weights ρ. The score is the likelihood ratio of the two
    Gaussians the auditor knows (it built D and D'): their means θ_X and their noise scales,
    which differ when the canary changes the visit counts (`private_sigma` of each, read from
    the system's own runs on D and D'); without noise, the projection on θ_{X'} − θ_X.
    `returns` [S] (with ``canary="file"``, `privrl.audit.canary.load_lsw_canary`) are the
    canary x₁'s first-visit returns. ``algorithm="dp-lsl"`` audits DP-LSL (`baselines.dp_lsl`,
    ridge weights Γ_X = diag(ρ_s m_s/m) that move with the counts too, λ = `c`·m^0.4) the same
    way."""
    from privrl.ope import baselines

    if algorithm not in ("dp-lsw", "dp-lsl"):
        raise ValueError(f"algorithm must be 'dp-lsw' or 'dp-lsl', got {algorithm!r}")
    lsl = algorithm == "dp-lsl"
    trials = _check_trials(trials, canary, file=returns is not None)
    S, m, R = int(states), int(trajectories), float(return_range)
    if S < 1 or m < 1 or not (math.isfinite(R) and R > 0):
        raise ValueError(f"need states >= 1, trajectories >= 1, return range > 0 (S={S}, m={m})")
    Phi, w = np.eye(S), np.full(S, 1.0 / S)
    fvs = lsw_neighbours(S, m, R, canary, rng, returns)
    lam = float(c) * m**0.4
    if lsl:
        means = tuple(baselines.lsl_estimate(Phi, w, fv, lam) for fv in fvs)
    else:
        means = tuple(baselines.lsw_estimate(Phi, w, fv) for fv in fvs)

    def release(fv: Any, k: int) -> Any:  # k releases of D or D' (FirstVisit columns)
        stacked = type(fv)(fv.counts, np.repeat(fv.mean_returns[:, None], k, axis=1), m)
        kw = {"epsilon": epsilon, "delta": delta, "return_range": R, "rng": rng}
        if lsl:
            return baselines.dp_lsl(stacked, Phi, w, lam=lam, **kw)
        return baselines.dp_lsw(stacked, Phi, w, **kw)

    sds = None
    if epsilon is not None:  # σ_X of D and of D', as the system computes them
        sds = tuple(float(release(fv, 1).private_sigma) for fv in fvs)
    labels = _labels(trials, rng)
    scores = np.empty(trials)
    for done, size in _trial_batches(trials, S, batch, progress):
        b = labels[done : done + size] == 1
        theta = np.empty((S, size))
        for bit, fv in enumerate(fvs):
            k = int((b == bit).sum())
            if k == 0:
                continue
            if epsilon is None:
                theta[:, b == bit] = means[bit][:, None]
            else:
                theta[:, b == bit] = release(fv, k).theta
        if sds is None:
            scores[done : done + size] = (means[1] - means[0]) @ theta
        else:
            scores[done : done + size] = _gaussian_llr(theta, means, sds)
    report = lsw_claimed(
        epsilon=epsilon,
        delta=delta,
        states=S,
        trajectories=m,
        return_range=R,
        algorithm=algorithm,
        c=c,
    )
    return AuditTrials.from_report(
        algorithm if epsilon is not None else algorithm.removeprefix("dp-"),
        report,
        scores,
        labels,
        delta=delta,
        params={
            "states": S,
            "trajectories": m,
            "return_range": R,
            "canary": canary,
            "visit_counts": {"D": fvs[0].counts.tolist(), "D'": fvs[1].counts.tolist()},
            **({"lambda": lam} if lsl else {}),
            "audited_release": f"{algorithm.upper()}'s released θ (output perturbation, "
            "smooth sensitivity)",
        },
    )


# ---------------------------------------------------------------------------------------------
# SDP-PE: one batch's shuffle binary-sum counters
# ---------------------------------------------------------------------------------------------


def sdp_pe_claimed(privatizer: Any, counts: Any, users: int) -> PrivacyReport:
    """SDP-PE's report for one batch of `users` users: the privatizer's own report after its
    own release of `counts` (the report needs the batch's calibration)."""
    privatizer.release(counts, n_users=users)
    return privatizer.report(system="sdp-pe")


def _user_counts(
    states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, H: int, S: int, A: int
) -> Any:
    """Counts (`online.common.Counts`) of users' episodes: states [n, H+1], actions and
    rewards [n, H]."""
    from privrl.online.common import Counts

    c = Counts.zeros(H, S, A)
    h = np.broadcast_to(np.arange(H), actions.shape)
    np.add.at(c.n_sa, (h, states[:, :-1], actions), 1.0)
    np.add.at(c.n_sas, (h, states[:, :-1], actions, states[:, 1:]), 1.0)
    np.add.at(c.r_sum, (h, states[:, :-1], actions), rewards)
    return c


def audit_sdp_pe(
    *,
    epsilon: float | None,
    delta: float = 1e-5,
    H: int = 1,
    S: int = 2,
    A: int = 2,
    users: int = 100,
    calibration: str = "tight",
    trials: int,
    canary: Canary = "worst",
    rng: np.random.Generator,
    progress: Progress = None,
    batch: int | None = None,
    episode: Any = None,
) -> AuditTrials:
    """Score `trials` releases of one SDP-PE batch of `users` users on D or D' (ε None: the
    non-private counts of PE). `episode` (a `privrl.audit.canary.TabularCanary`, with
    ``canary="file"``) is the canary user x₁, replacing a random user x₀."""
    from privrl.online import privatizers
    from privrl.online.privatizers import IdentityPrivatizer, ShufflePrivatizer

    trials = _check_trials(trials, canary, file=episode is not None)
    H, S, A, n = int(H), int(S), int(A), int(users)
    if H < 1 or S < 2 or A < 1 or n < 1:
        raise ValueError(f"need H >= 1, S >= 2, A >= 1, users >= 1 (H={H}, S={S}, A={A})")
    st = rng.integers(0, S, size=(n - 1, H + 1))
    ac = rng.integers(0, A, size=(n - 1, H))
    rw = rng.integers(0, 2, size=(n - 1, H)).astype(np.float64)
    if canary == "worst":
        s0, a0 = np.zeros(H + 1, np.int64), np.zeros(H, np.int64)
        s1, a1 = np.ones(H + 1, np.int64), np.full(H, min(1, A - 1), np.int64)
        r0 = r1 = np.ones(H)
    elif canary == "file":
        s0, a0 = rng.integers(0, S, size=H + 1), rng.integers(0, A, size=H)
        r0 = rng.integers(0, 2, size=H).astype(np.float64)
        s1, a1, r1 = episode.states, episode.actions, episode.rewards
    else:
        s0, s1 = rng.integers(0, S, size=(2, H + 1))
        a0, a1 = rng.integers(0, A, size=(2, H))
        r0, r1 = rng.integers(0, 2, size=(2, H)).astype(np.float64)
    c0 = _user_counts(np.vstack([st, s0]), np.vstack([ac, a0]), np.vstack([rw, r0]), H, S, A)
    c1 = _user_counts(np.vstack([st, s1]), np.vstack([ac, a1]), np.vstack([rw, r1]), H, S, A)
    fams = ("n_sa", "n_sas", "r_sum")
    if epsilon is None:
        report = IdentityPrivatizer().report(system="pe")
        cal = None
    else:
        priv = ShufflePrivatizer(
            H,
            S,
            A,
            epsilon=epsilon,
            delta=delta,
            rng=rng,
            calibration=calibration,  # type: ignore[arg-type]
        )
        report = sdp_pe_claimed(priv, c0, n)
        cal = priv.calibration(n)
    labels = _labels(trials, rng)
    scores = np.zeros(trials)
    per_trial = sum(getattr(c0, f).size for f in fams)
    for done, size in _trial_batches(trials, per_trial, batch, progress):
        b = labels[done : done + size] == 1
        for fam in fams:
            lo, hi = getattr(c0, fam), getattr(c1, fam)
            diff = (hi - lo).ravel()
            where = np.flatnonzero(diff)
            if where.size == 0:
                continue
            stacked = np.where(b.reshape(-1, *([1] * lo.ndim)), hi, lo)
            if cal is None:
                noisy = stacked
            else:  # the privatizer's own draw: Σx + Bin(N, p) − Np per counter
                noisy, _ = privatizers.aggregate_binary_sum(
                    stacked, cal, rng, name=fam, coordinates_changed=2 * H
                )
            y = np.asarray(noisy).reshape(size, -1)[:, where]
            scores[done : done + size] += (y - lo.ravel()[where]) @ diff[where]
    return AuditTrials.from_report(
        "sdp-pe" if epsilon is not None else "pe",
        report,
        scores,
        labels,
        delta=delta,
        params={
            "H": H,
            "S": S,
            "A": A,
            "users": n,
            "calibration": calibration,
            "canary": canary,
            "audited_release": "one batch's shuffle binary-sum counters n_h(s,a), "
            "n_h(s,a,s'), r_h(s,a) (before the projection)",
        },
    )
