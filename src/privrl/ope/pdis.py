"""Private per-decision importance sampling (PDIS) and its weighted form (WPDIS), for logs
of multi-step episodes with propensities (Precup, Sutton & Singh 2000, "Eligibility traces
for off-policy policy evaluation").

Estimators (notation of `privrl.ope.importance`: ρ_it = π(a_it|s_it)/μ_it, r̄ = clip(r,
r_min, r_max), W the PUBLIC weight clip, steps t < H of each episode):

* clipped cumulative weight       w̄_it = min(Π_{k≤t} ρ_ik, W)                          (6)
* per-decision weighted return    P_i = Σ_{t<H} γ^t w̄_it r̄_it                          (7)
* PDIS:                           V_PD = (1/m) Σ_i P_i                                   (8)
* WPDIS (the weighted form):      V_WPD = Σ_i P_i / Σ_i w̄_i,H−1                          (9)

A step's reward depends only on the steps before it, so E_μ[ρ_{i,0:H−1} r_it] =
E_μ[ρ_{i,0:t} r_it]: with no weight clipped, (8) is unbiased for the target's value, like
trajectory IPS (3), but each reward is weighted by the ratios of the decisions that led to it
only, not by those of the decisions after it — far less variance on long horizons, and at
the same W far less clipping (w̄_it is clipped only where the cumulative ratio up to t
exceeds W, while trajectory IPS clips ρ̄_i whenever the whole product does). (9) divides by
the sum of the whole trajectories' clipped weights, Σ_i ρ̄_i (the SNIPS denominator): with
no weight clipped, both sums over m converge to (V, 1), so it is consistent. An episode
shorter than H contributes its steps; its absent steps have no reward, and its weight in (9)
is its last cumulative weight (the absent decisions' ratio is 1). The per-step-normalised
variant (one denominator per step) would need H releases and is not offered.

How the clip applies: to each CUMULATIVE weight (6), not to each per-step ratio. Clipping
each ratio at c bounds w_it only by c^{t+1}, a sensitivity exponential in H; clipping the
cumulative weight at W keeps the sensitivity of trajectory IPS at the same W (below), so
PDIS costs no more noise than IPS.

Privacy unit and relation: one trajectory under REPLACE-ONE neighbours (m is public), as
for IPS.

Sensitivity of the PDIS sum Σ_i P_i (and the WPDIS numerator). Claim: Δ = W (R_hi − R_lo),
with B_H = Σ_{t<H} γ^t and [R_lo, R_hi] = [min(r_min, 0)·B_H, max(r_max, 0)·B_H] as in
`privrl.ope.importance` — public quantities only (W, the reward range, H, γ).
Proof. Fix a trajectory i and a step t < H. By (6), w̄_it ∈ [0, W] whatever the logged
propensities and the target policy (a ratio is ≥ 0; the clip caps it), and r̄_it ∈ [r_min,
r_max]. The product of x ∈ [0, W] and y ∈ [r_min, r_max] lies in [W·min(r_min, 0),
W·max(r_max, 0)] (it is bilinear, so its extremes are at the corners (0, ·) and (W, r_min),
(W, r_max)). Multiplying by γ^t ≥ 0 and summing over the at most H kept steps (an absent step
contributes 0, which lies in each step's interval) gives P_i ∈ [W·min(r_min, 0)·B_H,
W·max(r_max, 0)·B_H] = [W·R_lo, W·R_hi]. Steps t ≥ H are dropped before anything is computed
and rewards are clipped, so this holds for any replacement trajectory (any length, any
rewards, any propensities). Replacing trajectory i by i′ changes the sum by P_i′ − P_i, of
absolute value at most W·R_hi − W·R_lo = W (R_hi − R_lo). ∎ The bound is attained (a
trajectory whose every cumulative weight is ≥ W with rewards r_max against one with rewards
r_min), so it cannot be lowered with these public facts.
Sensitivity of the WPDIS denominator Σ_i w̄_i,H−1: each summand is a clipped cumulative
weight in [0, W], so Δ = W (the SNIPS denominator's).

Each sum is released once with the noise of `privrl.ope.importance` (Gaussian with the noise
multiplier calibrated over the estimator's releases, or Laplace with ε split), drawn from
the caller's `NoiseSource`; (9) is post-processing of the two noisy sums, clipped into the
return range, as SNIPS is.

Intervals: those of `privrl.ope.importance` (Popoviciu, Bhatia–Davis, or ``auto``) with the
same public supports as IPS ([W·R_lo, W·R_hi] for P_i, [0, W] for the denominator) and the
same public mean ranges (E w̄_it ≤ 1 for every t, so E P_i ∈ [R_lo, R_hi]). A bound from
public facts only cannot tell PDIS from IPS — a worst-case log puts all its reward on the
last step, where the two coincide — so at the same W the public-bound interval of PDIS is
that of IPS up to where the released value falls; PDIS's gain is in its error (variance and
clipping bias), and the Bhatia–Davis interval, centred on a better value, follows it.

Memory: the cumulative weights are computed for at most `CHUNK_CELLS // H` trajectories at a
time (an H-column table per chunk; H is public).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privrl.ope import importance as imp

__all__ = ["CHUNK_CELLS", "pdis", "terms", "wpdis"]

CHUNK_CELLS = 1 << 22  # trajectories × H cells per chunk of the cumulative-weight table


def _per_decision(
    st: imp.Steps, lo: int, hi: int, H: int, log_clip: float
) -> tuple[np.ndarray, np.ndarray]:
    """(P_i, w̄_i,H−1) of trajectories lo..hi−1 from their kept steps (chunk of `terms`)."""
    sel = slice(*np.searchsorted(st.episode, [lo, hi]))
    rows = st.episode[sel] - lo
    log_r = np.zeros((hi - lo, H))
    log_r[rows, st.step[sel]] = st.log_ratio[sel]
    w = np.exp(np.minimum(np.cumsum(log_r, axis=1), log_clip))  # (6); −∞ stays −∞ → 0
    rewards = np.zeros((hi - lo, H))
    rewards[rows, st.step[sel]] = st.discounted_reward[sel]
    return np.sum(w * rewards, axis=1), w[:, -1]


def terms(data: Any, policy: imp.TargetPolicy, bounds: imp.Bounds) -> imp.Terms:
    """Per-trajectory terms of PDIS and WPDIS: `per_decision` = P_i (7), `weights` =
    w̄_i,H−1 (the whole trajectory's clipped weight, ρ̄_i of IPS), `returns` = R_i."""
    st = imp.steps(data, policy, bounds)
    m, H = st.m, int(bounds.horizon)
    log_clip = math.log(float(bounds.weight_clip))
    per_decision, weights = np.zeros(m), np.zeros(m)
    step = max(1, CHUNK_CELLS // H)
    for lo in range(0, m, step):
        hi = min(m, lo + step)
        per_decision[lo:hi], weights[lo:hi] = _per_decision(st, lo, hi, H, log_clip)
    returns = np.bincount(st.episode, weights=st.discounted_reward, minlength=m)
    return imp.Terms(weights=weights, returns=returns, per_decision=per_decision)


def _require(t: imp.Terms) -> np.ndarray:
    if t.per_decision is None:
        raise ValueError("PDIS and WPDIS need terms computed by privrl.ope.pdis.terms")
    return t.per_decision


def pdis(
    t: imp.Terms,
    bounds: imp.Bounds,
    *,
    noise: imp.NoiseSpec | None = None,
    rng: np.random.Generator | None = None,
    level: float = 0.95,
    interval: imp.IntervalChoice = "popoviciu",
) -> imp.Estimate:
    """(Private) PDIS (8): one release of Σ_i P_i (sensitivity W (R_hi − R_lo)) over m."""
    common: dict[str, Any] = dict(noise=noise, rng=rng, level=level, interval=interval)
    return imp.mean_estimate("pdis", t, bounds, _require(t), **common)


def wpdis(
    t: imp.Terms,
    bounds: imp.Bounds,
    *,
    noise: imp.NoiseSpec | None = None,
    rng: np.random.Generator | None = None,
    level: float = 0.95,
    interval: imp.IntervalChoice = "popoviciu",
) -> imp.Estimate:
    """(Private) WPDIS (9): Σ_i P_i / Σ_i w̄_i,H−1 from two releases (sensitivities
    W (R_hi − R_lo) and W), with SNIPS's ratio interval."""
    common: dict[str, Any] = dict(noise=noise, rng=rng, level=level, interval=interval)
    return imp.ratio_estimate("wpdis", t, bounds, _require(t), **common)
