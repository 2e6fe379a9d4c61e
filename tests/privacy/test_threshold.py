"""Noisy-threshold primitives of the consensus filter (privrl.privacy.threshold).

Properties checked: the calibration fixtures of Sharma et al. (spec expert_consensus.md); the
per-round event and the exact advanced-composition check; the Laplace scales of the threshold
(2/ε') and query (4/ε') noise; Lemma 5.2 (a prefix with count < θ passes with probability
< δ') by Monte Carlo; the vectorised first-⊥ search against a sequential one; the trajectory
sampler (distinct trajectories, expert drawn uniformly, resampling on exhaustion); the "tight"
calibration (its ε0 meets the exact advanced-composition bound and is maximal; "paper" stays
the default and keeps the fixtures); the "pld" calibration (the PLD accountant's composition
of the rounds matches the closed-form optimal composition of Kairouz, Oh & Viswanath /
Murtagh & Vadhan, and ε0 is the largest certified at (ε1, δ1)).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from scipy import integrate, stats

from privrl.privacy.accounting import epsilon as accountant_epsilon
from privrl.privacy.events import ApproxDpEvent
from privrl.privacy.release import Release
from privrl.privacy.threshold import (
    DataReleaseCalibration,
    composition_bound,
    first_failing_prefix,
    noisy_threshold,
    pld_composition_epsilon,
    pld_round_epsilon,
    prefix_query_noise,
    sample_release_trajectories,
    tight_round_epsilon,
)
from tests.noise import noise_rng

DELTA = 1 / 3000

# (name, epsilon1, delta1, T, L, expected {field: (value, abs tolerance)}): the spec's values,
# tolerances at the precision the paper prints them.
FIXTURES = [
    (
        "acrobot",
        10.0,
        DELTA,
        25,
        200,
        {
            "epsilon_prime": (0.1199, 5e-5),
            "delta_prime": (3.33e-8, 5e-11),
            "c_min": (8.85, 5e-3),
            "theta": (442.6, 5e-2),
        },
    ),
    (
        "cartpole",
        7.5,
        0.9 * DELTA,
        25,
        200,
        {"epsilon_prime": (0.0894, 5e-5), "c_min": (11.70, 5e-3), "theta": (585.0, 0.5)},
    ),
    (
        "hiv",
        10.0,
        DELTA,
        50,
        50,
        {"epsilon_prime": (0.0848, 5e-5), "c_min": (12.3, 5e-2), "theta": (615.0, 0.5)},
    ),
]


@pytest.mark.parametrize(("name", "eps1", "delta1", "t", "length", "expected"), FIXTURES)
def test_calibration_fixtures(name, eps1, delta1, t, length, expected):
    cal = DataReleaseCalibration.from_budget(eps1, delta1, t, length, 0.02)
    for key, (value, tol) in expected.items():
        assert getattr(cal, key) == pytest.approx(value, abs=tol), (name, key)
    # Internal consistency of Algorithm 2 lines 3-4 and 8.
    assert cal.delta_prime == pytest.approx(delta1 / (2 * t * length), rel=1e-12)
    assert cal.theta == pytest.approx(cal.c_min / 0.02, rel=1e-12)
    assert cal.c_min == pytest.approx(
        math.exp(cal.epsilon_prime) / (math.exp(cal.epsilon_prime) - 1), rel=1e-12
    )
    shift = 4 / cal.epsilon_prime * math.log(1 / cal.delta_prime)
    assert cal.theta_shifted == pytest.approx(cal.theta + shift, rel=1e-12)
    assert cal.threshold_scale == pytest.approx(2 / cal.epsilon_prime, rel=1e-12)
    assert cal.query_scale == pytest.approx(4 / cal.epsilon_prime, rel=1e-12)


@pytest.mark.parametrize(("name", "eps1", "delta1", "t", "length", "expected"), FIXTURES)
def test_round_event_and_exact_composition(name, eps1, delta1, t, length, expected):
    cal = DataReleaseCalibration.from_budget(eps1, delta1, t, length, 0.02)
    # One round: (2ε', δ1/(2T)) (Theorem 5.3); T of them self-composed.
    assert cal.round_event() == ApproxDpEvent(epsilon=2 * cal.epsilon_prime, delta=delta1 / (2 * t))
    event = cal.event()
    assert isinstance(event, dp_event.SelfComposedDpEvent) and event.count == t
    # The exact advanced-composition bound, written out independently.
    e0 = 2 * cal.epsilon_prime
    exact = math.sqrt(2 * t * math.log(2 / delta1)) * e0 + t * e0 * math.expm1(e0)
    assert cal.composition_epsilon == pytest.approx(exact, rel=1e-12)
    assert cal.composition_epsilon <= eps1
    assert cal.composition_delta == pytest.approx(delta1, rel=1e-12)
    # With ε' = ε1/sqrt(32 T ln(2/δ1)) the first-order term is exactly ε1/2.
    assert math.sqrt(2 * t * math.log(2 / delta1)) * e0 == pytest.approx(eps1 / 2, rel=1e-12)
    # The accountant (min of basic and advanced composition) can only be tighter.
    acc = accountant_epsilon(event, delta1)
    assert acc <= cal.composition_epsilon * (1 + 1e-9)
    assert acc == pytest.approx(cal.accountant_epsilon(), rel=1e-12)
    assert acc == pytest.approx(min(exact, t * e0), rel=1e-9)


def test_composition_check_raises_when_bound_exceeds_budget():
    # At δ1 = 1/3000, T = 25 the bound crosses ε1 near ε1 = 25 (24.80 at 25, 33.9 at 30): the
    # second-order term T·ε0(e^ε0 − 1) outgrows ε1/2.
    with pytest.raises(ValueError, match="advanced-composition bound"):
        DataReleaseCalibration.from_budget(30.0, DELTA, 25, 200, 0.02)
    cal = DataReleaseCalibration.from_budget(25.0, DELTA, 25, 200, 0.02)
    assert 24.0 < cal.composition_epsilon <= 25.0


def _bound(e0: float, t: int, delta1: float) -> float:
    """sqrt(2T ln(2/δ1))·ε0 + T·ε0(e^ε0 − 1), written out independently."""
    return math.sqrt(2 * t * math.log(2 / delta1)) * e0 + t * e0 * math.expm1(e0)


@pytest.mark.parametrize(("name", "eps1", "delta1", "t", "length", "expected"), FIXTURES)
def test_paper_calibration_is_the_default_and_keeps_the_fixtures(
    name, eps1, delta1, t, length, expected
):
    default = DataReleaseCalibration.from_budget(eps1, delta1, t, length, 0.02)
    paper = DataReleaseCalibration.from_budget(eps1, delta1, t, length, 0.02, calibration="paper")
    assert default == paper and default.calibration == "paper"
    for key, (value, tol) in expected.items():
        assert getattr(paper, key) == pytest.approx(value, abs=tol), (name, key)


@pytest.mark.parametrize(
    ("eps1", "delta1", "t"),
    [
        (10.0, DELTA, 25),
        (7.5, 0.9 * DELTA, 25),
        (10.0, DELTA, 50),
        (7.5, 0.9 * DELTA, 100),
        (0.5, 1e-6, 1),
        (30.0, DELTA, 25),
        (100.0, 1e-3, 3),
    ],
)
def test_tight_round_epsilon_meets_the_bound_and_is_maximal(eps1, delta1, t):
    e0 = tight_round_epsilon(eps1, delta1, t)
    assert composition_bound(e0, t, delta1) == pytest.approx(_bound(e0, t, delta1), rel=1e-12)
    # Satisfies the exact bound (never above ε1), and is tight to 1e-9.
    assert _bound(e0, t, delta1) <= eps1 * (1 + 1e-12)
    assert _bound(e0, t, delta1) == pytest.approx(eps1, abs=1e-9)
    # Maximal: any larger ε0 (by 1e-9 relative) breaks the bound.
    assert _bound(e0 * (1 + 1e-9), t, delta1) > eps1
    # At least the paper's ε0 = ε1/sqrt(8 T ln(2/δ1)) whenever that one is admissible (at
    # ε1 = 30, T = 25 it is not: its bound is above ε1 and the paper's calibration is refused).
    paper_e0 = eps1 / math.sqrt(8 * t * math.log(2 / delta1))
    if _bound(paper_e0, t, delta1) <= eps1:
        assert e0 > paper_e0


@pytest.mark.parametrize(("name", "eps1", "delta1", "t", "length", "expected"), FIXTURES)
def test_tight_calibration_lowers_theta_with_the_same_delta_accounting(
    name, eps1, delta1, t, length, expected
):
    paper = DataReleaseCalibration.from_budget(eps1, delta1, t, length, 0.02)
    tight = DataReleaseCalibration.from_budget(eps1, delta1, t, length, 0.02, calibration="tight")
    assert tight.calibration == "tight"
    assert tight.epsilon_prime == pytest.approx(tight_round_epsilon(eps1, delta1, t) / 2, rel=0)
    assert tight.epsilon_prime > 1.3 * paper.epsilon_prime
    # Same δ accounting: δ' = δ1/(2TL), rounds of δ1/(2T), slack δ1/2, total δ1.
    assert tight.delta_prime == paper.delta_prime
    assert tight.round_delta == paper.round_delta == pytest.approx(delta1 / (2 * t))
    assert tight.composition_delta == pytest.approx(delta1, rel=1e-12)
    # The runtime check holds with equality (to 1e-9) and the rest follows from ε'.
    assert tight.composition_epsilon <= eps1 and tight.composition_epsilon == pytest.approx(eps1)
    assert tight.theta_shifted < paper.theta_shifted and tight.theta < paper.theta
    assert tight.c_min == pytest.approx(1 / -math.expm1(-tight.epsilon_prime), rel=1e-12)
    assert tight.query_scale == pytest.approx(4 / tight.epsilon_prime, rel=1e-12)
    assert tight.round_event() == ApproxDpEvent(
        epsilon=2 * tight.epsilon_prime, delta=delta1 / (2 * t)
    )
    assert tight.accountant_epsilon() <= eps1 * (1 + 1e-9)
    rel = tight.release("filter")
    assert rel.extra["calibration"]["calibration"] == "tight"
    assert Release.from_dict(rel.to_dict()).event == rel.event


def test_tight_calibration_never_fails_the_runtime_check():
    # Where the paper's calibration is refused (ε1 = 30, T = 25), the tight one still exists.
    cal = DataReleaseCalibration.from_budget(30.0, DELTA, 25, 200, 0.02, calibration="tight")
    assert cal.composition_epsilon <= 30.0
    with pytest.raises(ValueError, match="calibration must be one of"):
        DataReleaseCalibration.from_budget(10.0, DELTA, 25, 200, 0.02, calibration="loose")


def _optimal_composition_delta(eps0: float, delta0: float, k: int, eps: float) -> float:
    """Closed form of the optimal k-fold composition of (ε0, δ0)-DP mechanisms at ε
    (Kairouz, Oh & Viswanath 2015, Thm 3.3; Murtagh & Vadhan 2016, Thm 1.5):
    δ = 1 − (1 − δ0)^k (1 − Σ_l C(k,l) max(0, e^{(k−l)ε0} − e^{ε} e^{lε0}) / (1 + e^{ε0})^k)."""
    log_norm = k * math.log1p(math.exp(eps0))
    pure = 0.0
    for ell in range(k + 1):
        a = (k - ell) * eps0
        b = eps + ell * eps0
        if a > b:
            pure += math.comb(k, ell) * (math.exp(a - log_norm) - math.exp(b - log_norm))
    return 1.0 - (1.0 - delta0) ** k * (1.0 - pure)


@pytest.mark.parametrize(("eps0", "t", "delta1"), [(0.38, 25, 0.9 * DELTA), (0.2, 50, DELTA)])
def test_pld_composition_matches_the_closed_form_optimal_composition(eps0, t, delta1):
    """The PLD accountant's ε for T rounds of (ε0, δ1/(2T))-DP is a valid bound (the closed
    form's δ at it is ≤ δ1) and tight to 0.01 (at ε − 0.01 the closed form exceeds δ1)."""
    eps = pld_composition_epsilon(eps0, t, delta1)
    d0 = delta1 / (2 * t)
    assert _optimal_composition_delta(eps0, d0, t, eps) <= delta1 * (1 + 1e-9)
    assert _optimal_composition_delta(eps0, d0, t, eps - 0.01) > delta1
    # and far below advanced composition of the same rounds
    assert eps < composition_bound(eps0, t, delta1)


@pytest.mark.parametrize(("eps1", "delta1", "t"), [(7.5, 0.9 * DELTA, 25), (10.0, DELTA, 25)])
def test_pld_calibration_is_certified_maximal_and_looser_than_tight(eps1, delta1, t):
    tight = DataReleaseCalibration.from_budget(eps1, delta1, t, 200, 0.02, calibration="tight")
    pld = DataReleaseCalibration.from_budget(eps1, delta1, t, 200, 0.02, calibration="pld")
    e0 = pld_round_epsilon(eps1, delta1, t)
    assert pld.calibration == "pld" and pld.epsilon_prime == pytest.approx(e0 / 2, rel=0)
    # Certified at (ε1, δ1) by the accountant and by the closed form, and nearly all spent.
    assert pld.composition_epsilon <= eps1 and pld.composition_delta == delta1
    assert pld.composition_epsilon == pytest.approx(eps1, rel=2e-3)
    assert pld.accountant_epsilon() == pld.composition_epsilon
    assert _optimal_composition_delta(2 * pld.epsilon_prime, pld.round_delta, t, eps1) <= delta1
    # Maximal to the bisection's precision: 0.3% more per round is not certified.
    assert pld_composition_epsilon(e0 * 1.003, t, delta1) > eps1
    # Same per-round δ and event shape as the other calibrations, a larger ε' (lower θ).
    assert pld.round_delta == tight.round_delta and pld.delta_prime == tight.delta_prime
    assert pld.epsilon_prime > 1.2 * tight.epsilon_prime
    assert pld.theta_shifted < tight.theta_shifted
    rel = pld.release("filter")
    assert rel.extra["calibration"]["calibration"] == "pld"
    assert "PLD" in rel.extra["composition"] and rel.extra["accountant_epsilon"] <= eps1


@pytest.mark.parametrize(
    "args",
    [
        (0.0, DELTA, 25, 200, 0.02),
        (10.0, 0.0, 25, 200, 0.02),
        (10.0, 1.0, 25, 200, 0.02),
        (10.0, DELTA, 0, 200, 0.02),
        (10.0, DELTA, 25, 0, 0.02),
        (10.0, DELTA, 25, 200, 0.0),
        (10.0, DELTA, 2.5, 200, 0.02),
    ],
)
def test_calibration_rejects_bad_budget(args):
    with pytest.raises(ValueError):
        DataReleaseCalibration.from_budget(*args)


def test_release_record_serialises():
    cal = DataReleaseCalibration.from_budget(10.0, DELTA, 25, 200, 0.02)
    rel = cal.release("filter", extra={"p_min": 0.02})
    assert rel.count == 25 and rel.sensitivity == 1.0 and rel.event == cal.event()
    assert rel.noise["query_scale"] == pytest.approx(4 / cal.epsilon_prime)
    assert rel.noise["threshold_scale"] == pytest.approx(2 / cal.epsilon_prime)
    back = Release.from_dict(rel.to_dict())
    assert back.event == rel.event and back.noise == rel.noise


# --------------------------------------------------------------------------- noise scales


def _check_laplace(x: np.ndarray, scale: float) -> None:
    """Draws x are Laplace(0, scale): KS test, and E|x| = scale within 1.5%; a 10% wrong scale
    is rejected by the same test (power check on fresh data of the same size)."""
    assert stats.kstest(x, stats.laplace(scale=scale).cdf).pvalue > 1e-4
    assert np.mean(np.abs(x)) == pytest.approx(scale, rel=0.015)
    assert stats.kstest(x, stats.laplace(scale=1.1 * scale).cdf).pvalue < 1e-6


def test_threshold_noise_scale_is_2_over_eps_prime():
    cal = DataReleaseCalibration.from_budget(10.0, DELTA, 25, 200, 0.02)
    rng = noise_rng(1)
    draws = noisy_threshold(cal.theta_shifted, cal.threshold_scale, rng, size=100_000)
    _check_laplace(draws - cal.theta_shifted, 2 / cal.epsilon_prime)
    one = noisy_threshold(cal.theta_shifted, cal.threshold_scale, rng)
    assert isinstance(one, float)


def test_query_noise_scale_is_4_over_eps_prime():
    cal = DataReleaseCalibration.from_budget(10.0, DELTA, 25, 200, 0.02)
    draws = prefix_query_noise(100_000, cal.query_scale, noise_rng(2))
    _check_laplace(draws, 4 / cal.epsilon_prime)


def test_noise_rejects_bad_arguments():
    rng = noise_rng(0)
    with pytest.raises(ValueError):
        noisy_threshold(1.0, 0.0, rng)
    with pytest.raises(ValueError):
        prefix_query_noise(-1, 1.0, rng)
    with pytest.raises(TypeError):
        prefix_query_noise(3, 1.0, 7)
    with pytest.raises(ValueError):
        first_failing_prefix(np.array([np.nan]), 1.0, 1.0, rng)


# --------------------------------------------------------------------------- Lemma 5.2


def _pass_probability_at_theta(delta_prime: float) -> float:
    """P[Lap(4) > 4 ln(1/δ') + Lap(2)]: the chance that a prefix with count exactly θ passes
    (scale-free: ε' cancels)."""
    b, c = 4.0, 2.0
    t = b * math.log(1 / delta_prime)

    def integrand(v: float) -> float:
        x = t + v
        tail = 0.5 * math.exp(-x / b) if x >= 0 else 1 - 0.5 * math.exp(x / b)
        return tail * math.exp(-abs(v) / c) / (2 * c)

    pieces = [(-np.inf, -t), (-t, 0.0), (0.0, np.inf)]
    return sum(integrate.quad(integrand, lo, hi, limit=200)[0] for lo, hi in pieces)


def test_lemma_5_2_prefix_below_theta_passes_with_probability_below_delta_prime():
    # Loose setting so that δ' = δ1/(2TL) = 0.02 is measurable.
    cal = DataReleaseCalibration.from_budget(2.0, 0.08, 1, 2, 0.02)
    assert cal.delta_prime == pytest.approx(0.02)
    n = 400_000
    rng = noise_rng(3)
    count = cal.theta * (1 - 1e-12)  # just below θ: the worst case of the lemma
    theta_hat = noisy_threshold(cal.theta_shifted, cal.threshold_scale, rng, size=n)
    passed = count + prefix_query_noise(n, cal.query_scale, rng) > theta_hat
    p_hat = passed.mean()
    exact = _pass_probability_at_theta(cal.delta_prime)
    sigma = math.sqrt(exact * (1 - exact) / n)
    assert exact < cal.delta_prime  # Lemma 5.2 itself (≈ 2δ'/3 here)
    assert abs(p_hat - exact) < 5 * sigma
    assert p_hat + 5 * sigma < cal.delta_prime
    # Power: without the (4/ε')·ln(1/δ') shift the same prefix passes about half the time.
    no_shift = count + prefix_query_noise(n, cal.query_scale, rng) > noisy_threshold(
        cal.theta, cal.threshold_scale, rng, size=n
    )
    assert no_shift.mean() > 0.4


def test_lemma_5_2_through_first_failing_prefix():
    cal = DataReleaseCalibration.from_budget(2.0, 0.08, 1, 2, 0.02)
    rng = noise_rng(4)
    log_count = np.array([math.log(cal.theta * (1 - 1e-12))])
    n = 20_000
    passes = sum(
        first_failing_prefix(
            log_count,
            noisy_threshold(cal.theta_shifted, cal.threshold_scale, rng),
            cal.query_scale,
            rng,
        )
        for _ in range(n)
    )
    exact = _pass_probability_at_theta(cal.delta_prime)
    assert abs(passes / n - exact) < 5 * math.sqrt(exact / n)


# --------------------------------------------------------------------------- first ⊥


def test_first_failing_prefix_deterministic_cases():
    rng = noise_rng(5)
    big, small = math.log(1e9), math.log(1e-9)
    assert first_failing_prefix(np.full(6, big), 1e3, 1.0, rng) == 6
    assert first_failing_prefix(np.array([big, big, small, big]), 1e3, 1.0, rng) == 2
    assert first_failing_prefix(np.array([small, big]), 1e3, 1.0, rng) == 0
    assert first_failing_prefix(np.array([-np.inf]), 1e3, 1.0, rng) == 0
    assert first_failing_prefix(np.zeros(0), 1e3, 1.0, rng) == 0


def test_vectorised_first_failure_equals_sequential_queries():
    """Drawing all query noises at once and taking the first ⊥ gives the same answer as
    querying one prefix at a time and stopping at the first ⊥ (same generator stream)."""
    counts = np.linspace(400.0, 300.0, 40)
    for seed in range(200):
        vec = first_failing_prefix(np.log(counts), 350.0, 25.0, noise_rng(seed))
        rng = noise_rng(seed)
        seq = len(counts)
        for i, c in enumerate(counts):
            if not c + rng.laplace(0.0, 25.0) > 350.0:
                seq = i
                break
        assert vec == seq


# --------------------------------------------------------------------------- sampler


def test_sampler_draws_distinct_trajectories_of_the_drawn_experts():
    units = np.repeat(np.arange(50), 4)
    eps, resampled = sample_release_trajectories(units, 120, noise_rng(6))
    assert eps.shape == (120,) and np.unique(eps).size == 120
    assert np.all(np.bincount(units[eps]) <= 4)
    # Exhausting all trajectories exactly: every episode used once.
    eps, resampled = sample_release_trajectories(units, 200, noise_rng(7))
    assert np.array_equal(np.sort(eps), np.arange(200))
    assert resampled.any()


def test_sampler_expert_is_uniform_and_trajectory_uniform_within_expert():
    # Expert 0 has 1 trajectory, expert 1 has 9: the expert is drawn uniformly (not in
    # proportion to its data), and expert 1's trajectory uniformly among its 9.
    units = np.array([0] + [1] * 9)
    firsts = np.array(
        [sample_release_trajectories(units, 1, noise_rng(s))[0][0] for s in range(4000)]
    )
    assert abs(np.mean(firsts == 0) - 0.5) < 0.03
    counts = np.bincount(firsts[firsts > 0], minlength=10)[1:]
    assert stats.chisquare(counts).pvalue > 1e-4


def test_sampler_resamples_when_expert_exhausted():
    units = np.array([0, 1, 1, 1, 1, 1])
    seen_resample = False
    for s in range(50):
        eps, res = sample_release_trajectories(units, 4, noise_rng(s))
        assert np.unique(eps).size == 4
        first_zero = np.flatnonzero(units[eps] == 0)
        assert first_zero.size <= 1  # expert 0's one trajectory is never reused
        seen_resample |= bool(res.any())
    assert seen_resample


def test_sampler_is_deterministic_and_validates():
    units = np.repeat(np.arange(10), 3)
    a = sample_release_trajectories(units, 12, noise_rng(8))
    b = sample_release_trajectories(units, 12, noise_rng(8))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    with pytest.raises(ValueError, match="exceeds the number of trajectories"):
        sample_release_trajectories(units, 31, noise_rng(0))
    with pytest.raises(ValueError):
        sample_release_trajectories(units.astype(float), 3, noise_rng(0))
    with pytest.raises(ValueError):
        sample_release_trajectories(units, 0, noise_rng(0))
