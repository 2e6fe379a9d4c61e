"""Noise calibration for GPOPE: `rigorous` (default) and `paper` (for comparison ONLY).

What one GPOPE run releases: N noisy clipped gradients B̃_i = B̄_i + h·N(0, σ² I_{2n}), each
computed from ONE trajectory drawn uniformly from the m private trajectories (a sample of size
1 without replacement, fresh each step). Under replace-one neighbours (the paper's Definition
1: datasets differ in one trajectory) the clipped gradient moves by at most ‖B̄ − B̄'‖ ≤ 2h,
so each step is a Gaussian mechanism with noise multiplier z = hσ/(2h) = σ/2, subsampled
without replacement 1 of m.

* ``rigorous`` — that event exactly: SelfComposed(SampledWithoutReplacement(m, 1,
  Gaussian(σ/2)), N), accounted by dp-accounting's RDP accountant under REPLACE_ONE on a dense
  grid of fractional orders (`privrl.privacy.accounting.DENSE_RDP_ORDERS`).
* ``paper`` — the paper's Lemma 1 closed form, composed N times (Theorem 4 of Abadi et al.):

      α(λ) ≤ λ(λ+1)/(2m²) · min{4(e^{1/σ²} − 1), 2e^{1/σ²}},
      ε = min_λ (N α(λ) + log(1/δ)) / λ.

  Lemma 1 keeps only the second-order term of the subsampled-Gaussian RDP bound (Wang et al.
  2018, Thm 9, "ignoring higher-order terms since m ≫ 1") and treats the sensitivity as h, so
  it underestimates the noise needed (≈ 20× at m = N = 100; see the spec's table). It is NOT a
  valid guarantee; it exists so the paper's numbers can be compared with ours. The two
  regimes of the min: σ² ≥ 1/ln 2 gives 4(e^{1/σ²} − 1) (≤ 8/σ²), σ² < 1/ln 2 gives 2e^{1/σ²}.
  The minimum over λ is taken over real λ ≥ 1 in closed form: with k = N·M/(2m²),
  (Nα(λ) + L)/λ = k(λ + 1) + L/λ is minimised at λ* = √(L/k), giving k + 2√(kL).

A run's `PrivacyReport` is always computed by the rigorous accountant from the release record,
whichever mode calibrated σ: in paper mode the report shows the true (larger) ε next to the
paper's nominal one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from dp_accounting import dp_event

from privrl.privacy.accounting import (
    AccountingError,
    calibrate_noise_multiplier,
    epsilon,
    sampled_gaussian_event,
)
from privrl.privacy.units import NeighbourRelation

# A coarse RDP order grid: ~20× faster calibration than the dense default; valid (it can
# only ask for more noise). For smoke runs; the reproductions use the dense default.
COARSE_ORDERS: tuple[float, ...] = (1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)

__all__ = [
    "COARSE_ORDERS",
    "PAPER_MODE_WARNING",
    "AccountingMode",
    "calibrate_sigma",
    "gpope_epsilon",
    "gpope_event",
    "lemma1_log_moment",
    "paper_epsilon",
    "paper_sigma",
    "rigorous_epsilon",
    "rigorous_sigma",
]

AccountingMode = Literal["rigorous", "paper"]

RELATION = NeighbourRelation.REPLACE_ONE
SENSITIVITY_FACTOR = 2.0  # replace-one: ‖B̄(x) − B̄(x')‖ ≤ 2h

PAPER_MODE_WARNING = (
    "accounting mode 'paper' calibrates σ with the paper's Lemma 1, which drops higher-order "
    "terms and is NOT a valid privacy guarantee; it is for comparison with the paper only — "
    "the ε reported by the rigorous accountant is the true guarantee of this run"
)


def _check(m: int, iterations: int, delta: float) -> None:
    if int(m) < 1:
        raise AccountingError(f"the dataset must have m >= 1 trajectories, got {m}")
    if int(iterations) < 1:
        raise AccountingError(f"iterations N must be >= 1, got {iterations}")
    if not 0.0 < float(delta) < 1.0:
        raise AccountingError(f"delta must be in (0, 1), got {delta}")


# ------------------------------------------------------------------------ rigorous


def gpope_event(sigma: float, m: int, iterations: int) -> dp_event.DpEvent:
    """The DpEvent of a GPOPE run: N × (1-of-m without replacement, Gaussian z = σ/2)."""
    return sampled_gaussian_event(
        sigma / SENSITIVITY_FACTOR,
        int(iterations),
        sampling="without_replacement",
        dataset_size=int(m),
        sample_size=1,
    )


def rigorous_epsilon(
    sigma: float,
    m: int,
    iterations: int,
    delta: float,
    *,
    orders: Sequence[float] | None = None,
) -> float:
    """ε of a GPOPE run (dp-accounting RDP, replace-one; dense orders unless `orders`)."""
    _check(m, iterations, delta)
    return float(
        epsilon(gpope_event(sigma, m, iterations), delta, relation=RELATION, orders=orders)
    )


def rigorous_sigma(
    target_epsilon: float,
    delta: float,
    m: int,
    iterations: int,
    *,
    tolerance: float = 1e-4,
    orders: Sequence[float] | None = None,
) -> float:
    """Smallest σ (noise std / h) whose GPOPE run meets (ε, δ) under the rigorous accountant
    (dense RDP orders unless `orders`; a coarser grid is valid but gives more noise)."""
    _check(m, iterations, delta)
    z = calibrate_noise_multiplier(
        target_epsilon,
        delta,
        int(iterations),
        sampling="without_replacement",
        dataset_size=int(m),
        sample_size=1,
        relation=RELATION,
        tolerance=tolerance,
        orders=orders,
    )
    return SENSITIVITY_FACTOR * z


# ------------------------------------------------------------------------ paper (Lemma 1)


def lemma1_factor(sigma: float) -> float:
    """min{4(e^{1/σ²} − 1), 2e^{1/σ²}} of Lemma 1 (+∞ for σ = 0)."""
    if sigma <= 0:
        return math.inf
    x = 1.0 / (sigma * sigma)
    if x > 700:
        return math.inf
    return min(4.0 * math.expm1(x), 2.0 * math.exp(x))


def lemma1_log_moment(lam: float, sigma: float, m: int) -> float:
    """α(λ) ≤ λ(λ+1)/(2m²) · min{4(e^{1/σ²} − 1), 2e^{1/σ²}}  (Lemma 1, one iteration)."""
    return lam * (lam + 1.0) / (2.0 * m * m) * lemma1_factor(sigma)


def paper_epsilon(sigma: float, m: int, iterations: int, delta: float) -> float:
    """ε = min_{λ ≥ 1} (N α(λ) + log(1/δ))/λ with Lemma 1's α — for comparison only."""
    _check(m, iterations, delta)
    k = iterations * lemma1_factor(sigma) / (2.0 * m * m)
    if math.isinf(k):
        return math.inf
    log_inv = math.log(1.0 / delta)
    lam = max(1.0, math.sqrt(log_inv / k))
    return k * (lam + 1.0) + log_inv / lam


def paper_sigma(
    target_epsilon: float, delta: float, m: int, iterations: int, *, tolerance: float = 1e-6
) -> float:
    """Smallest σ meeting the target under `paper_epsilon` (bisection; ε falls with σ)."""
    _check(m, iterations, delta)
    if not (math.isfinite(target_epsilon) and target_epsilon > 0):
        raise AccountingError(f"target epsilon must be finite and > 0, got {target_epsilon}")
    lo, hi = 1e-3, 1.0
    while paper_epsilon(hi, m, iterations, delta) > target_epsilon:
        lo, hi = hi, hi * 2.0
        if hi > 1e8:
            raise AccountingError("the target epsilon is unreachable in paper mode")
    if paper_epsilon(lo, m, iterations, delta) <= target_epsilon:
        return lo
    while hi / lo > 1.0 + tolerance:
        mid = math.sqrt(lo * hi)
        if paper_epsilon(mid, m, iterations, delta) > target_epsilon:
            lo = mid
        else:
            hi = mid
    return hi


# ------------------------------------------------------------------------ dispatch


def calibrate_sigma(
    target_epsilon: float,
    delta: float,
    m: int,
    iterations: int,
    mode: AccountingMode = "rigorous",
    *,
    orders: Sequence[float] | None = None,
) -> float:
    """σ for a target (ε, δ) under `mode` ("rigorous" — the default and the only valid one —
    or "paper"). `orders` (rigorous only): a coarser RDP grid is faster and still valid (it
    can only ask for more noise)."""
    if mode == "rigorous":
        return rigorous_sigma(target_epsilon, delta, m, iterations, orders=orders)
    if mode == "paper":
        return paper_sigma(target_epsilon, delta, m, iterations)
    raise ValueError(f"accounting mode must be 'rigorous' or 'paper', got {mode!r}")


def gpope_epsilon(
    sigma: float, m: int, iterations: int, delta: float, mode: AccountingMode = "rigorous"
) -> float:
    """ε of a GPOPE run with noise σ under `mode`."""
    if mode == "rigorous":
        return rigorous_epsilon(sigma, m, iterations, delta)
    if mode == "paper":
        return paper_epsilon(sigma, m, iterations, delta)
    raise ValueError(f"accounting mode must be 'rigorous' or 'paper', got {mode!r}")
