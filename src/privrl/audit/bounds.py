"""Statistics of a privacy audit: turn an attack's success into an empirical lower bound on ε.

An audit plays the distinguishing game of differential privacy many times: draw b ~ Ber(½),
run the mechanism on D (b = 0) or on its neighbour D' (b = 1), score the output, guess b. A
mechanism that is (ε, δ)-DP constrains every test's false-positive rate FPR and false-negative
rate FNR (Kairouz, Oh & Viswanath 2015, Thm. 2.1):

    FPR + e^ε FNR ≥ 1 − δ   and   FNR + e^ε FPR ≥ 1 − δ,

so ε ≥ max(log((1 − δ − FNR)/FPR), log((1 − δ − FPR)/FNR)) (Jagielski, Ullman & Oprea 2020,
§3; Nasr et al. 2021, eq. 1). The audit replaces FPR and FNR by one-sided Clopper–Pearson
upper bounds, so the resulting ε is a lower bound with the stated confidence.

Functions:

* `clopper_pearson_upper` / `clopper_pearson_lower` — one-sided exact binomial bounds.
* `epsilon_from_rates` — the bound above for given (FPR, FNR) and δ.
* `epsilon_lower_bound` — the bound maximised over thresholds of a score, with a Bonferroni
  correction over the thresholds tried (so the stated confidence holds for the maximum).
* `roc_curve`, `auc` — the attack's ROC curve and its area.
* `one_run_p_value` / `one_run_epsilon` — Steinke, Nasr & Jagielski 2023 ("Privacy auditing
  with one (1) training run"), Theorem 3.3 / Algorithm 2 (their appendix code): m canaries
  included independently with probability ½, r guesses of which v are correct.
* `one_run_ceiling` / `one_run_size` — the most a one-run audit can show (all r guesses right)
  and the canary count that puts that ceiling above a claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

__all__ = [
    "EpsilonBound",
    "auc",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "one_run_ceiling",
    "one_run_epsilon",
    "one_run_p_value",
    "one_run_size",
    "roc_curve",
]

ArrayLike = npt.ArrayLike


def _check_alpha(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return 1.0 - confidence


def _binomial(
    k: ArrayLike, n: ArrayLike, confidence: float
) -> tuple[float, np.ndarray, np.ndarray]:
    """α = 1 − confidence and the checked counts (0 ≤ k ≤ n, n > 0) as float arrays."""
    alpha = _check_alpha(confidence)
    k_ = np.asarray(k, dtype=np.float64)
    n_ = np.asarray(n, dtype=np.float64)
    if np.any(k_ < 0) or np.any(k_ > n_) or np.any(n_ <= 0):
        raise ValueError("need 0 <= k <= n and n > 0")
    return alpha, k_, n_


def clopper_pearson_upper(k: ArrayLike, n: ArrayLike, confidence: float = 0.95) -> np.ndarray:
    """One-sided upper Clopper–Pearson bound on a binomial rate: the p with
    P[Bin(n, p) ≤ k] = 1 − confidence, i.e. Beta(1 − α; k + 1, n − k) (1 when k = n).

    Clopper & Pearson 1934; P[true rate ≤ bound] ≥ confidence for every true rate.
    """
    alpha, k_, n_ = _binomial(k, n, confidence)
    with np.errstate(invalid="ignore"):
        up = stats.beta.ppf(1.0 - alpha, k_ + 1.0, np.maximum(n_ - k_, 1e-300))
    return np.where(k_ >= n_, 1.0, up)


def clopper_pearson_lower(k: ArrayLike, n: ArrayLike, confidence: float = 0.95) -> np.ndarray:
    """One-sided lower Clopper–Pearson bound: Beta(α; k, n − k + 1) (0 when k = 0)."""
    alpha, k_, n_ = _binomial(k, n, confidence)
    with np.errstate(invalid="ignore"):
        low = stats.beta.ppf(alpha, np.maximum(k_, 1e-300), n_ - k_ + 1.0)
    return np.where(k_ <= 0, 0.0, low)


def epsilon_from_rates(fpr: ArrayLike, fnr: ArrayLike, delta: float) -> np.ndarray:
    """ε ≥ max(log((1 − δ − FNR)/FPR), log((1 − δ − FPR)/FNR)), clipped below at 0.

    Jagielski et al. 2020 §3 / Nasr et al. 2021 eq. (1), from the (ε, δ)-DP hypothesis-testing
    region (Kairouz et al. 2015, Thm. 2.1). A rate of 0 with a positive numerator gives ∞.
    """
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    a = np.asarray(fpr, dtype=np.float64)
    b = np.asarray(fnr, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        e1 = np.log(np.maximum(1.0 - delta - b, 0.0)) - np.log(a)
        e2 = np.log(np.maximum(1.0 - delta - a, 0.0)) - np.log(b)
    e = np.fmax(e1, e2)
    return np.where(np.isnan(e), 0.0, np.maximum(e, 0.0))


def roc_curve(scores: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(FPR, TPR, thresholds) of the test "guess b = 1 when score ≥ t", for every distinct t
    (descending), starting at (0, 0) with t = +∞."""
    s, y = _scores_labels(scores, labels)
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s) != 0), s.size - 1]  # end of each tie group
    tp = np.cumsum(y)[last]
    fp = (last + 1) - tp
    n1, n0 = int(y.sum()), int(y.size - y.sum())
    fpr = np.r_[0.0, fp / n0]
    tpr = np.r_[0.0, tp / n1]
    return fpr, tpr, np.r_[np.inf, s[last]]


def auc(scores: ArrayLike, labels: ArrayLike) -> float:
    """Area under the ROC curve (trapezoids; equals the Mann–Whitney P[s₁ > s₀] + ½P[tie])."""
    fpr, tpr, _ = roc_curve(scores, labels)
    return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2.0))


def _scores_labels(scores: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).ravel()
    if s.shape != y.shape:
        raise ValueError(f"scores and labels differ in length ({s.size} vs {y.size})")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0 or 1")
    y = y.astype(np.int64)
    if y.sum() == 0 or y.sum() == y.size:
        raise ValueError("need trials with both b = 0 and b = 1")
    return s, y


@dataclass(frozen=True)
class EpsilonBound:
    """An empirical ε lower bound and how it was reached.

    epsilon: the bound, valid with probability ≥ `confidence` (CP bounds, Bonferroni over
    `n_thresholds` thresholds). point: the same formula on the raw rates at that threshold
    (an estimate, not a bound). threshold, fpr, fnr: the chosen test and its raw rates.
    """

    epsilon: float
    point: float
    confidence: float
    threshold: float
    fpr: float
    fnr: float
    n_thresholds: int


def epsilon_lower_bound(
    scores: ArrayLike,
    labels: ArrayLike,
    delta: float,
    *,
    confidence: float = 0.95,
    max_thresholds: int = 200,
) -> EpsilonBound:
    """The largest `epsilon_from_rates` over thresholds t of "guess b = 1 iff score ≥ t", with
    FPR and FNR replaced by one-sided Clopper–Pearson upper bounds.

    Thresholds: at most `max_thresholds` quantiles of the pooled scores (label-blind),
    spaced geometrically towards both tails. The
    bound at each threshold uses both rates at level α/(2K) (K thresholds), so by a union bound
    the maximum holds with probability ≥ 1 − α (Jagielski et al. 2020 use one threshold;
    maximising without this correction would overstate the confidence).
    """
    s, y = _scores_labels(scores, labels)
    if max_thresholds < 1:
        raise ValueError(f"max_thresholds must be >= 1, got {max_thresholds}")
    alpha = _check_alpha(confidence)
    # Geometric in both tails: the best tests of a tight audit sit at extreme quantiles.
    tail = np.geomspace(1.0 / s.size, 0.5, max(max_thresholds // 2, 1))
    thresholds = np.unique(np.quantile(s, np.r_[tail, 1.0 - tail]))
    K = thresholds.size
    s0, s1 = np.sort(s[y == 0]), np.sort(s[y == 1])
    n0, n1 = s0.size, s1.size
    fp = n0 - np.searchsorted(s0, thresholds, side="left")  # b = 0 with score ≥ t
    fn = np.searchsorted(s1, thresholds, side="left")  # b = 1 with score < t
    level = 1.0 - alpha / (2.0 * K)
    fpr_hi = clopper_pearson_upper(fp, n0, level)
    fnr_hi = clopper_pearson_upper(fn, n1, level)
    eps = epsilon_from_rates(fpr_hi, fnr_hi, delta)
    i = int(np.argmax(eps))
    point = epsilon_from_rates(fp[i] / n0, fn[i] / n1, delta)
    return EpsilonBound(
        epsilon=float(eps[i]),
        point=float(point),
        confidence=1.0 - alpha,
        threshold=float(thresholds[i]),
        fpr=float(fp[i] / n0),
        fnr=float(fn[i] / n1),
        n_thresholds=int(K),
    )


# ---------------------------------------------------------------------------------------------
# one-run auditing (Steinke, Nasr & Jagielski 2023)
# ---------------------------------------------------------------------------------------------


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[≥ v correct of r guesses] under the null "the mechanism is (ε, δ)-DP".

    Steinke, Nasr & Jagielski 2023, Theorem 3.3 (with δ, their Proposition 5.7 / Algorithm 2):
    with q = e^ε/(1 + e^ε), the p-value is
        P[Bin(r, q) ≥ v] + 2mδ · max_{1≤i≤v} P[v − i ≤ Bin(r, q) < v] / i,
    computed exactly (binomial pmf and survival function, no normal approximation).
    m: canaries, each included independently with probability ½; r ≤ m guesses; v ≤ r correct.
    """
    m, r, v = int(m), int(r), int(v)
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got m={m}, r={r}, v={v}")
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must be in [0, 1], got {delta}")
    q = 1.0 / (1.0 + math.exp(-epsilon))  # accuracy of ε-DP randomised response
    beta = float(stats.binom.sf(v - 1, r, q))  # P[Bin(r, q) ≥ v]
    alpha = 0.0
    if v > 0 and delta > 0:
        i = np.arange(1, v + 1)
        partial = np.cumsum(stats.binom.pmf(v - i, r, q))  # P[v − i ≤ Bin < v]
        alpha = float(np.max(partial / i))
    return min(beta + alpha * delta * 2.0 * m, 1.0)


def one_run_epsilon(
    m: int, r: int, v: int, delta: float, confidence: float = 0.95, *, tol: float = 1e-6
) -> float:
    """The largest ε rejected at level 1 − confidence: sup{ε : p(ε) < 1 − confidence}, by
    bisection (p increases with ε). Steinke et al. 2023, Algorithm 2 ("get_eps_audit")."""
    p = _check_alpha(confidence)
    if one_run_p_value(m, r, v, 0.0, delta) >= p:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e4:
            return math.inf
    while hi - lo > tol:
        mid = (lo + hi) / 2.0
        if one_run_p_value(m, r, v, mid, delta) < p:
            lo = mid
        else:
            hi = mid
    return lo


def one_run_ceiling(m: int, r: int, delta: float, confidence: float = 0.95) -> float:
    """The largest bound a one-run audit of m canaries and r guesses can give: the bound when
    every guess is right. A claim at or above it cannot be tested by that audit, whatever the
    mechanism does (3.47 for r = 100 of m = 1000 at δ = 10⁻⁵)."""
    return one_run_epsilon(m, r, r, delta, confidence)


CEILING_FACTOR = 2.0  # the canary count aims at a ceiling of twice the claim


def one_run_size(
    claim: float,
    delta: float,
    confidence: float = 0.95,
    *,
    canaries: int,
    guesses: int,
    cap: int,
) -> tuple[int, int]:
    """(m, r) for a one-run audit of a mechanism claiming ε = `claim`: starting at `canaries`
    canaries and `guesses` guesses, double m (keeping r/m) until the ceiling
    (`one_run_ceiling`) reaches `CEILING_FACTOR`·claim — so a mechanism that leaks twice its
    claim could be shown; at `cap` canaries, double r instead (up to r = m). r is even (half
    "in", half "out"). An infinite claim (a non-private twin) keeps the start."""
    m, r = int(canaries), int(guesses)
    if not math.isfinite(claim):
        return m, r
    ratio = r / m
    while one_run_ceiling(m, r, delta, confidence) < CEILING_FACTOR * claim:
        if m < cap:
            m = min(2 * m, int(cap))
            r = max(2, 2 * round(m * ratio / 2))
        elif r < m - m % 2:
            r = min(2 * r, m - m % 2)
        else:
            break
    return m, r
