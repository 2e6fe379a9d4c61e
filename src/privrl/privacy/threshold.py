"""Noisy-threshold primitives of the consensus filter (Sharma et al., Algorithms 1–2).

The filter is a sparse-vector technique (SVT) run once per sampled trajectory: a noisy
threshold θ̂ is drawn once, then the prefixes τ_{1:1}, τ_{1:2}, … are queried with fresh noise
until the first ⊥ (PrefixQuery, A_PQ: ⊤ iff count + Lap(4/ε') > θ̂). Every random draw of the
filter happens here: the trajectory sampler (A_1 of the analysis), the threshold noise and the
query noise. `privrl.expert.consensus` computes the counts and calls these functions.

Calibration (Algorithm 2, lines 2–4), `DataReleaseCalibration.from_budget`:

    ε' = ε1 / sqrt(32·T·ln(2/δ1)),   δ' = δ1 / (2·T·L),
    c_min = e^{ε'} / (e^{ε'} − 1),   θ = c_min / p_min,
    θ̂ = θ + (4/ε')·ln(1/δ') + Lap(2/ε')   (once per trajectory; line 8).

The deterministic shift (4/ε')·ln(1/δ') is part of the calibration (`threshold_shift`,
`theta_shifted`); `noisy_threshold` only adds the Laplace draw to the value it is given, so the
caller passes `theta_shifted`. With it, a prefix whose count is below θ passes a query with
probability < δ' (Lemma 5.2), whatever ε'.

Guarantee (Theorem 5.3, 5.5): one round (one trajectory) is (2ε', δ1/(2T))-DP under adding or
removing one expert; T rounds compose by advanced composition (Dwork, Rothblum & Vadhan 2010,
with slack δ1/2) to (ε1, δ1). `from_budget` evaluates the exact bound
sqrt(2T·ln(2/δ1))·ε0 + T·ε0·(e^{ε0} − 1), ε0 = 2ε', and refuses a calibration whose bound
exceeds ε1. That happens when the second-order term T·ε0·(e^{ε0} − 1) exceeds ε1/2 (the
first-order term is exactly ε1/2), e.g. for ε1 > 25 at δ1 = 1/3000, T = 25.
The event of a run is `SelfComposedDpEvent(ApproxDpEvent(2ε', δ1/(2T)), T)`; the privrl
accountant composes it by min(basic, advanced composition) at δ1, which can only be smaller.

Tight calibration (``calibration="tight"``). The paper's ε' makes the first-order term of the
bound exactly ε1/2, so at the paper's settings about half of ε1 is left unused (CartPole,
ε1 = 7.5, T = 25: bound 4.62). Theorem 5.3 holds for every ε' > 0 (Lemma 5.1 needs
count ≥ c_min(ε'), Lemma 5.2 does not involve ε', one SVT round is ε'-DP for fixed queries),
and Theorem 5.5 only needs T rounds of (ε0, δ1/(2T))-DP to compose to (ε1, δ1) under
advanced composition with slack δ̃ = δ1/2 (total δ: T·δ1/(2T) + δ1/2 = δ1). So any ε0 with

    B(ε0) = sqrt(2T·ln(2/δ1))·ε0 + T·ε0·(e^{ε0} − 1) ≤ ε1          (ln(1/δ̃) = ln(2/δ1))

is admissible, and "tight" takes the largest: B is continuous and strictly increasing with
B(0) = 0, so bisection on [0, ε1/sqrt(2T·ln(2/δ1))] (B > ε1 at the right end) finds it;
ε' = ε0/2 and everything else (δ', c_min, θ, shift, Laplace scales, the event) follows from
ε' by the same formulas. ε' roughly doubles, so θ and the shift roughly halve and longer
prefixes are released. "paper" stays the default (the paper's numbers, which the tests pin).

PLD calibration (``calibration="pld"``). Advanced composition is itself loose: the optimal
composition of T mechanisms that are each (ε0, δ0)-DP (Kairouz, Oh & Viswanath 2015; Murtagh &
Vadhan 2016) is the privacy-loss distribution of T copies of the dominating pair of an
(ε0, δ0)-DP mechanism, which dp-accounting builds exactly
(`privacy_loss_distribution.from_privacy_parameters`, pessimistic discretisation). "pld"
takes the largest ε0 whose T rounds of (ε0, δ1/(2T))-DP the PLD accountant certifies at
(ε1, δ1) — the same event and the same Theorem 5.3 per round, composed optimally instead of by
advanced composition. At CartPole's ε1 = 7.5, T = 25 this roughly triples ε' over "paper".
The bisection keeps the lower end of the bracket, so the certified ε never exceeds ε1.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from dp_accounting import dp_event

from privrl.privacy.accounting import advanced_composition
from privrl.privacy.accounting import epsilon as accountant_epsilon
from privrl.privacy.events import ApproxDpEvent
from privrl.privacy.mechanisms import _check_rng
from privrl.privacy.release import Release

__all__ = [
    "CALIBRATIONS",
    "DataReleaseCalibration",
    "composition_bound",
    "first_failing_prefix",
    "noisy_threshold",
    "pld_composition_epsilon",
    "pld_round_epsilon",
    "prefix_query_noise",
    "sample_release_trajectories",
    "tight_round_epsilon",
]


def _positive(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float | np.integer | np.floating):
        raise TypeError(f"{what} must be a real number, got {type(x).__name__}")
    v = float(x)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{what} must be finite and > 0, got {x!r}")
    return v


Calibration = Literal["paper", "tight", "pld"]
CALIBRATIONS: tuple[str, ...] = ("paper", "tight", "pld")
PLD_DISCRETIZATION = 1e-4  # loss discretisation of the "pld" calibration (pessimistic)


def _count(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int | np.integer) or x < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {x!r}")
    return int(x)


# ---------------------------------------------------------------------------------------------
# Noise draws
# ---------------------------------------------------------------------------------------------


def noisy_threshold(
    theta: float, scale: float, rng: np.random.Generator, size: int | None = None
) -> float | np.ndarray:
    """θ̂ = theta + Lap(scale): the filter's noisy threshold (Algorithm 2, line 8).

    Drawn once per trajectory with ``scale = 2/ε'``. ``theta`` is used as given: pass the
    shifted threshold θ + (4/ε')·ln(1/δ') (`DataReleaseCalibration.theta_shifted`).
    ``size`` draws that many independent thresholds (tests, vectorised rounds).
    """
    t = float(theta)
    if not math.isfinite(t):
        raise ValueError(f"theta must be finite, got {theta!r}")
    b = _positive(scale, "scale")
    rng = _check_rng(rng)
    if size is None:
        return t + float(rng.laplace(0.0, b))
    return t + rng.laplace(0.0, b, size=int(size))


def prefix_query_noise(n: int, scale: float, rng: np.random.Generator) -> np.ndarray:
    """n independent Lap(scale) draws, one per PrefixQuery call (scale = 4/ε')."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    b = _positive(scale, "scale")
    return _check_rng(rng).laplace(0.0, b, size=int(n))


def first_failing_prefix(
    log_counts: np.ndarray, theta_hat: float, scale: float, rng: np.random.Generator
) -> int:
    """Run A_PQ on the prefixes τ_{1:1}, …, τ_{1:n} of one trajectory (Algorithm 2, lines
    9–14) and return k, the number of leading ⊤ answers: the 0-based index of the first ⊥, or
    n if every query returns ⊤. The stable prefix to release is τ_{1:k} (nothing if k = 0).

    ``log_counts[i]`` is ln count(τ_{1:i+1}); query i answers ⊤ iff
    exp(log_counts[i]) + Lap(scale) > theta_hat, with fresh noise per query (scale = 4/ε').

    Vectorised: all n query noises are drawn at once and the first ⊥ is taken. This has the
    same output distribution as the sequential algorithm, which stops at the first ⊥: the
    output is a function of the draws ν_1..ν_{k+1} up to the first ⊥ only, and the draws after
    it are independent of those and of the data and are never used, so drawing and discarding
    them changes nothing (only how far the generator advances).
    """
    lc = np.asarray(log_counts, dtype=np.float64).reshape(-1)
    if np.any(np.isnan(lc)):
        raise ValueError("log_counts contains NaN")
    th = float(theta_hat)
    if not math.isfinite(th):
        raise ValueError(f"theta_hat must be finite, got {theta_hat!r}")
    noise = prefix_query_noise(lc.shape[0], scale, rng)
    passed = np.exp(lc) + noise > th  # A_PQ, Algorithm 1 line 3
    fails = np.flatnonzero(~passed)
    return int(fails[0]) if fails.size else int(lc.shape[0])


# ---------------------------------------------------------------------------------------------
# Trajectory sampling (A_1 of the analysis)
# ---------------------------------------------------------------------------------------------


def sample_release_trajectories(
    unit_ids: np.ndarray, rounds: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The T trajectories of DataRelease: each round draws an expert uniformly at random and an
    unused trajectory of theirs uniformly at random (A_1 of the analysis).

    Returns ``(episodes, resampled)``: episode indices into ``unit_ids`` (one per round, all
    distinct) and a boolean flag per round. If the drawn expert has no unused trajectory left
    (possible only once an expert has been drawn more often than they have trajectories), the
    round draws again uniformly among the experts that still have one, and is flagged.

    Why this matches the analysis: the analysis draws π ~ Unif(Π) and a trajectory of π, i.e.
    a rollout of π (the data are the experts' rollouts). A trajectory not used before is a
    rollout independent of everything earlier rounds released, which a reused one would not
    be. The choices depend only on the unit ids and the generator, never on the counts, so all
    T trajectories can be drawn before any query. A resampled round behaves as if the exhausted
    experts were absent from Π for that round, which is the neighbouring side of the relation,
    but Lemma 5.1 is proved only for uniform draws over all of Π. The rounds match the
    analysed mechanism exactly while no expert is exhausted. If every expert has at least N
    trajectories, exhaustion needs some expert to be drawn more than N times in T rounds. That
    has probability ≤ m·C(T, N+1)·m^-(N+1), which is below 1e-40 at m = 3000, N = 20, T = 100.
    """
    ids = np.asarray(unit_ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"unit_ids must be a 1-D integer array, got {ids.dtype} {ids.shape}")
    t = _count(rounds, "rounds")
    if t > ids.shape[0]:
        raise ValueError(
            f"rounds = {t} exceeds the number of trajectories ({ids.shape[0]}); Algorithm 2 "
            "needs T <= N·m"
        )
    rng = _check_rng(rng)
    # Each expert's episodes in a uniformly random order: taking the next one each time the
    # expert is drawn is drawing an unused trajectory uniformly at random.
    order = np.lexsort((rng.random(ids.shape[0]), ids))
    experts, starts, sizes = np.unique(ids[order], return_index=True, return_counts=True)
    used = np.zeros(experts.shape[0], dtype=np.int64)
    episodes = np.empty(t, dtype=np.int64)
    resampled = np.zeros(t, dtype=bool)
    m = experts.shape[0]
    for c in range(t):  # T rounds (tens to hundreds), O(1) each unless an expert is exhausted
        e = int(rng.integers(m))
        if used[e] >= sizes[e]:
            e = int(rng.choice(np.flatnonzero(used < sizes)))
            resampled[c] = True
        episodes[c] = order[starts[e] + used[e]]
        used[e] += 1
    return episodes, resampled


# ---------------------------------------------------------------------------------------------
# Calibration and event
# ---------------------------------------------------------------------------------------------


def composition_bound(epsilon0: float, rounds: int, delta1: float) -> float:
    """B(ε0) = sqrt(2T·ln(2/δ1))·ε0 + T·ε0·(e^{ε0} − 1): advanced composition of T rounds of
    ε0-DP at slack δ1/2 (the check of Theorem 5.5; the same function `from_budget` checks)."""
    return advanced_composition(epsilon0, 0.0, rounds, delta1 / 2.0)[0]


def tight_round_epsilon(epsilon1: float, delta1: float, rounds: int) -> float:
    """The largest ε0 with B(ε0) ≤ ε1 (`composition_bound`), by bisection to the last float.

    B is continuous and strictly increasing with B(0) = 0 < ε1, and B(hi) > ε1 at
    hi = ε1/sqrt(2T·ln(2/δ1)) (its first term alone is ε1), so the root lies in (0, hi).
    The returned value always satisfies B(ε0) ≤ ε1 (it is the lower end of the bracket).
    """
    eps1 = _positive(epsilon1, "epsilon1")
    t = _count(rounds, "rounds")
    lo, hi = 0.0, eps1 / math.sqrt(2.0 * t * math.log(2.0 / delta1))
    for _ in range(200):  # the bracket halves each time: ~60 iterations reach adjacent floats
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if composition_bound(mid, t, delta1) <= eps1:
            lo = mid
        else:
            hi = mid
    return lo


_CALIBRATION_RULES = {
    "paper": "epsilon' = epsilon1 / sqrt(32 T ln(2/delta1)) (Algorithm 2, line 3)",
    "tight": "tight: largest epsilon' with exact advanced composition <= epsilon1",
    "pld": "pld: largest epsilon' whose PLD (optimal) composition is <= epsilon1 at delta1",
}


def _rounds_event(epsilon0: float, delta0: float, rounds: int) -> dp_event.DpEvent:
    return dp_event.SelfComposedDpEvent(ApproxDpEvent(epsilon=epsilon0, delta=delta0), rounds)


def pld_composition_epsilon(epsilon0: float, rounds: int, delta1: float) -> float:
    """ε at δ1 of T rounds of (ε0, δ1/(2T))-DP composed by the PLD accountant (optimal
    composition of the dominating pairs; an upper bound through pessimistic discretisation)."""
    event = _rounds_event(epsilon0, delta1 / (2.0 * rounds), rounds)
    return accountant_epsilon(event, delta1, backend="pld", pld_discretization=PLD_DISCRETIZATION)


def pld_round_epsilon(epsilon1: float, delta1: float, rounds: int, *, rtol: float = 1e-3) -> float:
    """The largest ε0 (to relative precision ``rtol``) whose T rounds of (ε0, δ1/(2T))-DP the
    PLD accountant certifies at (ε1, δ1).

    Bisection on [ε0_tight, ε1]: the advanced-composition root ε0_tight is certified (optimal
    composition is never looser), and ε0 = ε1 is returned at once if it is certified (T = 1).
    The PLD ε grows with ε0, and the returned value is the certified lower end of the bracket.
    """
    eps1 = _positive(epsilon1, "epsilon1")
    t = _count(rounds, "rounds")
    lo = tight_round_epsilon(eps1, delta1, t)
    hi = eps1
    if pld_composition_epsilon(hi, t, delta1) <= eps1:
        return hi  # one round (T = 1) or degenerate budgets: ε0 = ε1 already fits
    while hi - lo > rtol * lo:
        mid = 0.5 * (lo + hi)
        if pld_composition_epsilon(mid, t, delta1) <= eps1:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class DataReleaseCalibration:
    """The constants of DataRelease (Algorithm 2, lines 2–4 and 8) and its privacy event.

    Attributes: the budget (``epsilon1``, ``delta1``, ``rounds`` T, ``max_len`` L, ``p_min``);
    ``epsilon_prime`` ε', ``delta_prime`` δ', ``c_min``, ``theta`` θ = c_min/p_min;
    ``threshold_shift`` (4/ε')·ln(1/δ') and ``theta_shifted`` θ + shift (the centre of θ̂);
    ``threshold_scale`` 2/ε' and ``query_scale`` 4/ε' (Laplace scales); ``round_epsilon``
    2ε' and ``round_delta`` δ1/(2T) (one round, Theorem 5.3); ``composition_epsilon`` the exact
    advanced-composition bound of T rounds at slack δ1/2 and ``composition_delta`` its δ;
    ``calibration`` "paper" (ε' = ε1/sqrt(32·T·ln(2/δ1))), "tight" (the largest ε' whose
    exact bound is ≤ ε1) or "pld" (the largest ε' whose PLD composition is ≤ ε1; then
    ``composition_epsilon`` is that PLD value at ``composition_delta`` = δ1); see the module
    docstring.
    """

    epsilon1: float
    delta1: float
    rounds: int
    max_len: int
    p_min: float
    epsilon_prime: float
    delta_prime: float
    c_min: float
    theta: float
    threshold_shift: float
    theta_shifted: float
    threshold_scale: float
    query_scale: float
    round_epsilon: float
    round_delta: float
    composition_epsilon: float
    composition_delta: float
    calibration: str = "paper"

    @classmethod
    def from_budget(
        cls,
        epsilon1: float,
        delta1: float,
        rounds: int,
        max_len: int,
        p_min: float,
        calibration: Calibration = "paper",
    ) -> DataReleaseCalibration:
        """Calibrate Algorithm 2 for (ε1, δ1) over T = ``rounds`` trajectories of length at
        most L = ``max_len``. ``calibration="paper"`` (default) uses line 3's
        ε' = ε1/sqrt(32·T·ln(2/δ1)); ``"tight"`` the largest ε' = ε0/2 whose exact
        advanced-composition bound is ≤ ε1. Raises ValueError if the exact bound of the T
        rounds exceeds ε1 (possible in paper mode only)."""
        eps1 = _positive(epsilon1, "epsilon1")
        d1 = float(delta1)
        if not (0.0 < d1 < 1.0):
            raise ValueError(f"delta1 must be in (0, 1), got {delta1!r}")
        t = _count(rounds, "rounds")
        length = _count(max_len, "max_len")
        pm = float(p_min)
        if not (0.0 < pm < 1.0):
            raise ValueError(f"p_min must be in (0, 1), got {p_min!r}")
        if calibration == "paper":
            eps_p = eps1 / math.sqrt(32.0 * t * math.log(2.0 / d1))  # line 3
        elif calibration == "tight":
            eps_p = 0.5 * tight_round_epsilon(eps1, d1, t)  # ε0 = 2ε', B(ε0) ≤ ε1
        elif calibration == "pld":
            eps_p = 0.5 * pld_round_epsilon(eps1, d1, t)  # ε0 = 2ε', PLD(ε0) ≤ ε1
        else:
            raise ValueError(
                f"calibration must be one of {', '.join(CALIBRATIONS)}, got {calibration!r}"
            )
        delta_p = d1 / (2.0 * t * length)
        c_min = 1.0 / -math.expm1(-eps_p)  # e^ε'/(e^ε' − 1), line 4
        theta = c_min / pm
        shift = (4.0 / eps_p) * math.log(1.0 / delta_p)  # line 8
        round_eps, round_delta = 2.0 * eps_p, d1 / (2.0 * t)  # Theorem 5.3
        if calibration == "pld":  # certified by optimal (PLD) composition at δ1
            comp_eps, comp_delta = pld_composition_epsilon(round_eps, t, d1), d1
        else:
            comp_eps, comp_delta = advanced_composition(round_eps, round_delta, t, d1 / 2.0)
        if comp_eps > eps1 * (1.0 + 1e-12):
            raise ValueError(
                f"the exact advanced-composition bound of T = {t} rounds of "
                f"({round_eps:.4g}, {round_delta:.3g})-DP is epsilon = {comp_eps:.4g} > "
                f"epsilon1 = {eps1:g}: Algorithm 2's calibration does not give (epsilon1, "
                f"delta1) here (its second-order term T*eps0*(e^eps0 - 1) exceeds "
                f"epsilon1/2); use a smaller epsilon1"
            )
        return cls(
            epsilon1=eps1,
            delta1=d1,
            rounds=t,
            max_len=length,
            p_min=pm,
            epsilon_prime=eps_p,
            delta_prime=delta_p,
            c_min=c_min,
            theta=theta,
            threshold_shift=shift,
            theta_shifted=theta + shift,
            threshold_scale=2.0 / eps_p,
            query_scale=4.0 / eps_p,
            round_epsilon=round_eps,
            round_delta=round_delta,
            composition_epsilon=comp_eps,
            composition_delta=comp_delta,
            calibration=calibration,
        )

    def round_event(self) -> ApproxDpEvent:
        """One round (one trajectory through the filter): (2ε', δ1/(2T))-DP, Theorem 5.3."""
        return ApproxDpEvent(epsilon=self.round_epsilon, delta=self.round_delta)

    def event(self) -> dp_event.DpEvent:
        """All T rounds: ``SelfComposedDpEvent(round_event, T)``."""
        return dp_event.SelfComposedDpEvent(self.round_event(), self.rounds)

    def accountant_epsilon(self) -> float:
        """ε of `event()` at δ1 by privrl's accountant: min(basic, advanced composition) (RDP
        backend), or the PLD accountant for the "pld" calibration."""
        if self.calibration == "pld":
            return pld_composition_epsilon(self.round_epsilon, self.rounds, self.delta1)
        return accountant_epsilon(self.event(), self.delta1)

    def to_dict(self) -> dict[str, Any]:
        return {
            k: v if isinstance(v, str) else int(v) if isinstance(v, int) else float(v)
            for k, v in asdict(self).items()
        }

    def release(self, name: str, extra: dict[str, Any] | None = None) -> Release:
        """The `Release` record of a DataRelease run with this calibration. ``extra`` must hold
        only public facts."""
        return Release(
            name=name,
            mechanism="consensus_filter_svt",
            sensitivity=1.0,  # count_τ changes by ≤ 1 when one expert is added or removed
            norm="l1",
            noise={
                "threshold_scale": self.threshold_scale,
                "query_scale": self.query_scale,
                "threshold_shift": self.threshold_shift,
                "theta": self.theta,
                "epsilon_prime": self.epsilon_prime,
                "delta_prime": self.delta_prime,
            },
            count=self.rounds,
            size=1,
            event=self.event(),
            extra={
                "calibration": self.to_dict(),
                "composition": (
                    "optimal: PLD of T dominating (2 epsilon', delta1/(2T)) pairs at delta1"
                    if self.calibration == "pld"
                    else "advanced (Dwork, Rothblum & Vadhan 2010), slack delta1/2"
                ),
                "calibration_rule": _CALIBRATION_RULES[self.calibration],
                "accountant_epsilon": self.accountant_epsilon(),
                **(extra or {}),
            },
        )
