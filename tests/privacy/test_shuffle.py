"""Shuffle binary summation: exact privacy of the analyzer's view, calibration (tight and
theory), message-level vs aggregate sampler, error bound, and the local Laplace randomizer.

The privacy checks compute the analyzer's view for neighbouring inputs independently of
`binomial_delta`: the law of the number of 1-messages is the convolution of every user's
message law (its bit + Bin(m, p)), and δ is the hockey-stick divergence summed over the full
support.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privrl.privacy.events import ApproxDpEvent
from privrl.privacy.mechanisms import binomial_delta
from privrl.privacy.shuffle import (
    LaplaceRandomizer,
    aggregate_binary_sum,
    binary_sum_error_bound,
    calibrate_binary_sum,
    local_randomizer,
    shuffle_protocol,
    shuffler,
    theory_lambda,
)
from tests.noise import noise_rng


def view_pmf(bits: np.ndarray, m: int, p: float) -> np.ndarray:
    """Exact law of the number of 1-messages the analyzer receives (convolution over users)."""
    user_noise = stats.binom.pmf(np.arange(m + 1), m, p)
    pmf = np.array([1.0])
    for x in bits:
        user = np.concatenate([np.zeros(int(x)), user_noise])  # x_i + Bin(m, p)
        pmf = np.convolve(pmf, user)
    return pmf


def hockey_stick(P: np.ndarray, Q: np.ndarray, eps: float) -> float:
    """max over both directions of Σ max(0, P − e^ε Q), on a common support."""
    n = max(P.size, Q.size)
    P = np.pad(P, (0, n - P.size))
    Q = np.pad(Q, (0, n - Q.size))
    return max(
        float(np.maximum(P - math.exp(eps) * Q, 0.0).sum()),
        float(np.maximum(Q - math.exp(eps) * P, 0.0).sum()),
    )


CASES = [(1.0, 1e-3, 5), (0.5, 1e-4, 40), (1.0, 1e-6, 200), (2.0, 1e-5, 3)]


@pytest.mark.parametrize("mode", ["tight", "theory"])
@pytest.mark.parametrize(("eps", "delta", "n"), CASES)
def test_exact_privacy_of_the_protocol_view(mode: str, eps: float, delta: float, n: int) -> None:
    """Property: for neighbouring batches (one user's bit replaced) the analyzer's view is
    (ε', δ')-indistinguishable; the view law is computed from the users' messages."""
    cal = calibrate_binary_sum(eps, delta, n, mode)
    rng = noise_rng(0)
    x = rng.integers(0, 2, size=n)
    x[0] = 0
    x_neighbour = x.copy()
    x_neighbour[0] = 1  # the replaced user's bit
    P = view_pmf(x, cal.bits_per_user, cal.p)
    Q = view_pmf(x_neighbour, cal.bits_per_user, cal.p)
    d = hockey_stick(P, Q, eps)
    assert d <= delta
    assert d <= cal.delta_exact * (1 + 1e-6) + 1e-300  # the accounted δ is exact (or above)
    assert cal.event() == ApproxDpEvent(epsilon=eps, delta=cal.delta_exact)


@pytest.mark.parametrize(("eps", "delta", "n"), CASES)
def test_tight_is_smallest_fair_coin_count_and_theory_is_noisier(
    eps: float, delta: float, n: int
) -> None:
    """Tight: N* fair coins meet δ' and N* − 1 do not (minimality); theory meets δ' too and
    has a larger variance."""
    tight = calibrate_binary_sum(eps, delta, n, "tight")
    theory = calibrate_binary_sum(eps, delta, n, "theory")
    assert binomial_delta(tight.trials, tight.p, eps) < delta
    assert theory.delta_exact <= delta
    assert theory.variance > tight.variance
    # minimality of the fair-coin count the tight search starts from
    lo = max(1, tight.trials - n + 1)  # m = ⌈N*/n⌉ puts N* in (n(m − 1), n·m]
    n_star = next(N for N in range(lo, tight.trials + 1) if binomial_delta(N, 0.5, eps) < delta)
    assert n_star == 1 or binomial_delta(n_star - 1, 0.5, eps) >= delta
    lam = theory_lambda(eps, delta)
    if n >= 2 * lam:
        assert theory.bits_per_user == 1 and theory.p == pytest.approx(lam / n)
    else:
        assert theory.bits_per_user == math.ceil(2 * lam / n) and theory.p == 0.5


def test_spec_example_needs_about_47k_fair_coins() -> None:
    """(ε', δ') = (1/30, 1e-5/30) (ε = 1, δ = 1e-5, H = 5): N ≈ 47,300 at p = ½ (spec); the
    theory variance is ~30× larger at ordinary batch sizes."""
    cal = calibrate_binary_sum(1 / 30, 1e-5 / 30, 47_300, "tight")
    assert 46_000 < cal.variance * 4 < 48_500
    theory = calibrate_binary_sum(1 / 30, 1e-5 / 30, 1_000, "theory")
    assert 25 < theory.variance / calibrate_binary_sum(1 / 30, 1e-5 / 30, 1_000).variance < 35


def test_message_level_and_aggregate_agree_in_distribution() -> None:
    """Two-sample chi-square test (fixed seeds) between the full protocol (randomizers →
    shuffler → analyzer) and the aggregate sampler Σx + Bin(N, p) − Np."""
    cal = calibrate_binary_sum(1.0, 1e-3, 12, "tight")
    x = np.array([1, 0, 1, 1, 0, 0, 1, 0, 0, 0, 1, 1])
    reps = 4000
    rng = noise_rng(1)
    protocol = np.array([shuffle_protocol(x, cal, rng)[0] for _ in range(reps)])
    agg, _ = aggregate_binary_sum(
        np.full(reps, x.sum()), cal, noise_rng(2), name="c", coordinates_changed=1
    )
    both = np.concatenate([protocol, agg])
    edges = np.quantile(both, np.linspace(0, 1, 11))
    edges[-1] += 1
    table = np.array([np.histogram(protocol, edges)[0], np.histogram(agg, edges)[0]])
    table = table[:, table.sum(axis=0) > 0]
    p_value = stats.chi2_contingency(table)[1]
    assert p_value > 1e-3
    assert abs(protocol.mean() - x.sum()) < 5 * math.sqrt(cal.variance / reps)


def test_messages_shuffler_and_analyzer() -> None:
    """Every user sends 1 + m messages per counter whatever its data; the shuffler keeps the
    multiset and drops the sender; the analyzer is unbiased."""
    cal = calibrate_binary_sum(1.0, 1e-3, 6, "tight")
    bits = np.array([[1, 0], [0, 0], [1, 1], [0, 1], [1, 0], [0, 0]])
    rng = noise_rng(3)
    msgs = local_randomizer(bits, cal, rng)
    per_user = np.bincount(msgs[:, 0], minlength=6)
    assert np.all(per_user == 2 * (1 + cal.bits_per_user))
    out = shuffler(msgs, rng)
    assert out.shape == (msgs.shape[0], 2)
    assert sorted(map(tuple, out)) == sorted(map(tuple, msgs[:, 1:]))
    with pytest.raises(ValueError, match="0/1"):
        local_randomizer(bits * 2, cal, rng)
    with pytest.raises(ValueError, match="users"):
        local_randomizer(bits[:3], cal, rng)


def test_error_bound_holds_empirically() -> None:
    """Property: P(|released − true| > e(β)) ≤ β (Bernstein, sub-gamma form)."""
    cal = calibrate_binary_sum(0.1, 1e-6, 500, "tight")
    noisy, _ = aggregate_binary_sum(
        np.full(200_000, 7), cal, noise_rng(4), name="c", coordinates_changed=1
    )
    for beta in (0.1, 0.01):
        e = binary_sum_error_bound(cal, beta)
        assert np.mean(np.abs(noisy - 7) > e) <= beta
    assert np.mean(noisy) == pytest.approx(7, abs=5 * math.sqrt(cal.variance / 200_000))


def test_calibration_input_validation() -> None:
    for bad in [(0.0, 1e-5, 10), (1.0, 0.0, 10), (1.0, 1.0, 10), (1.0, 1e-5, 0)]:
        with pytest.raises(ValueError):
            calibrate_binary_sum(*bad)
    with pytest.raises(ValueError, match="calibration"):
        calibrate_binary_sum(1.0, 1e-5, 10, "loose")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="beta"):
        binary_sum_error_bound(calibrate_binary_sum(1.0, 1e-5, 10), 0.0)


def test_laplace_randomizer_scale_and_epsilon() -> None:
    """LDP: scale = Δ₁/ε, the release is PureDpEvent(ε), and the noise variance is 2b²."""
    lr = LaplaceRandomizer.for_epsilon(0.5, 10.0)
    assert lr.scale == pytest.approx(20.0) and lr.epsilon == pytest.approx(0.5)
    rel = lr.release("x", size=3, users=7)
    assert rel.event.epsilon == pytest.approx(0.5)  # type: ignore[union-attr]
    z = lr.randomize(np.zeros(200_000), noise_rng(5))
    # Var = 2b² = 800; sd of the sample variance ≈ √(Var²·(κ−1)/n) with κ = 6 for Laplace
    assert np.var(z) == pytest.approx(800.0, abs=6 * 800 * math.sqrt(5 / 200_000))
    with pytest.raises(ValueError):
        LaplaceRandomizer.for_epsilon(0.0, 1.0)
