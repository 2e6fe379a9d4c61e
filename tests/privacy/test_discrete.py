"""Discrete Laplace / discrete Gaussian samplers (CKS 2020): distribution and structure tests.

Every goodness-of-fit test uses a fixed seed, bins with expected count ≥ 5 (tails pooled) and
requires scipy's chi-square p-value > 1e-3, so a correct sampler fails with probability 1e-3
per seed and an off-by-a-constant sampler fails reliably at these sample sizes.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privrl.privacy.discrete import (
    NumpyUniform,
    bernoulli_exp,
    discrete_gaussian_pmf,
    discrete_laplace_pmf,
    sample_discrete_gaussian,
    sample_discrete_gaussian_exact,
    sample_discrete_gaussian_fast,
    sample_discrete_laplace,
    sample_discrete_laplace_exact,
    sample_discrete_laplace_fast,
)

P_MIN = 1e-3


def pooled_chisquare(samples: np.ndarray, pmf) -> float:
    """p-value of Pearson's chi-square of integer samples against `pmf`, adjacent bins pooled
    left to right until each expects ≥ 5; the mass beyond the observed range goes to the two
    end bins."""
    samples = np.asarray(samples).ravel()
    n = samples.size
    m = int(np.max(np.abs(samples))) + 1
    ks = np.arange(-m, m + 1)
    expected = n * pmf(ks)
    tail = n - expected.sum()
    expected[0] += tail / 2
    expected[-1] += tail / 2
    observed = np.bincount(samples + m, minlength=ks.size).astype(float)
    obs_b, exp_b = [], []
    acc_o = acc_e = 0.0
    for o, e in zip(observed, expected, strict=True):
        acc_o += o
        acc_e += e
        if acc_e >= 5:
            obs_b.append(acc_o)
            exp_b.append(acc_e)
            acc_o = acc_e = 0.0
    obs_b[-1] += acc_o
    exp_b[-1] += acc_e
    assert len(obs_b) >= 3, "too few bins for a meaningful test"
    return float(stats.chisquare(obs_b, exp_b).pvalue)


# --- exact path (Fraction / integer arithmetic) -----------------------------------------------


@pytest.mark.parametrize(
    ("sigma2", "seed"),
    [(Fraction(9, 4), 1), (Fraction(1, 3), 2), (2.3**2, 3), (Fraction(40), 4)],
)
def test_exact_discrete_gaussian_matches_pmf(sigma2, seed):
    """Property: the exact CKS sampler's law is N_Z(0, σ²) (10k draws, chi-square p > 1e-3)."""
    x = sample_discrete_gaussian_exact(sigma2, 10_000, NumpyUniform(np.random.default_rng(seed)))
    assert x.dtype == np.int64
    assert pooled_chisquare(x, lambda k: discrete_gaussian_pmf(k, sigma2)) > P_MIN


@pytest.mark.parametrize(
    ("scale", "seed"), [(Fraction(3, 2), 5), (Fraction(1, 4), 6), (2.7, 7), (10, 8)]
)
def test_exact_discrete_laplace_matches_pmf(scale, seed):
    """Property: the exact CKS sampler's law is DLap(scale) ∝ exp(-|x|/scale) (10k draws)."""
    x = sample_discrete_laplace_exact(scale, 10_000, NumpyUniform(np.random.default_rng(seed)))
    assert x.dtype == np.int64
    assert pooled_chisquare(x, lambda k: discrete_laplace_pmf(k, scale)) > P_MIN


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_mean(gamma):
    """Property: CKS Alg. 1 returns 1 with probability exp(-γ) (20k draws, within 4.5 SE)."""
    rand = NumpyUniform(np.random.default_rng(11))
    n = 20_000
    mean = sum(bernoulli_exp(gamma, rand) for _ in range(n)) / n
    p = math.exp(-gamma)
    se = math.sqrt(p * (1 - p) / n)
    assert abs(mean - p) <= 4.5 * se + 1e-12


def test_bernoulli_exp_rejects_negative():
    with pytest.raises(ValueError, match="gamma"):
        bernoulli_exp(Fraction(-1, 2), random.Random(0))


def test_numpy_uniform_is_uniform_and_handles_big_ranges():
    """Property: randrange(n) is uniform on {0..n-1} (chi-square) and correct for n ≫ 2^64."""
    rand = NumpyUniform(np.random.default_rng(3))
    draws = np.array([rand.randrange(7) for _ in range(14_000)])
    assert draws.min() == 0 and draws.max() == 6
    assert stats.chisquare(np.bincount(draws, minlength=7)).pvalue > P_MIN
    big = 2**130 + 12345
    vals = [rand.randrange(big) for _ in range(2_000)]
    assert all(0 <= v < big for v in vals)
    # the top bit is set about (big - 2^129)/big ≈ 1/2 of the time: bits past 64 are random
    top = sum(v >= 2**129 for v in vals) / len(vals)
    assert 0.45 < top < 0.55
    with pytest.raises(ValueError):
        rand.randrange(0)


def test_numpy_uniform_requires_generator():
    with pytest.raises(TypeError):
        NumpyUniform(np.random.RandomState(0))  # legacy global-style RNG is refused


def test_exact_path_is_deterministic_given_seed():
    """Structural rule: same seed, same result (no hidden global randomness)."""
    a = sample_discrete_gaussian(2.0, 500, rng=np.random.default_rng(5), exact=True)
    b = sample_discrete_gaussian(2.0, 500, rng=np.random.default_rng(5), exact=True)
    np.testing.assert_array_equal(a, b)


def test_secure_path_runs_and_returns_ints():
    """secure=True draws from OS entropy (no rng needed) and returns int64 arrays."""
    g = sample_discrete_gaussian(Fraction(5, 2), (3, 4), secure=True)
    lap = sample_discrete_laplace(1.5, 7, secure=True)
    assert g.shape == (3, 4) and g.dtype == np.int64
    assert lap.shape == (7,) and lap.dtype == np.int64


# --- fast vectorised path --------------------------------------------------------------------


@pytest.mark.parametrize(("sigma2", "seed"), [(0.3, 1), (2.25, 2), (50.0, 3)])
def test_fast_discrete_gaussian_matches_pmf(sigma2, seed):
    """Property: the vectorised rejection sampler's law is N_Z(0, σ²) (200k draws)."""
    x = sample_discrete_gaussian_fast(sigma2, 200_000, np.random.default_rng(seed))
    assert x.dtype == np.int64 and x.shape == (200_000,)
    assert pooled_chisquare(x, lambda k: discrete_gaussian_pmf(k, sigma2)) > P_MIN


@pytest.mark.parametrize(("scale", "seed"), [(0.5, 4), (3.0, 5), (25.0, 6)])
def test_fast_discrete_laplace_matches_pmf(scale, seed):
    """Property: difference of geometrics has law DLap(scale) (200k draws)."""
    x = sample_discrete_laplace_fast(scale, 200_000, np.random.default_rng(seed))
    assert x.dtype == np.int64
    assert pooled_chisquare(x, lambda k: discrete_laplace_pmf(k, scale)) > P_MIN


@pytest.mark.parametrize("sigma", [1.0, 3.0, 10.0])
def test_discrete_gaussian_variance_close_to_sigma2(sigma):
    """Property: for σ ≥ 1, Var N_Z(0, σ²) ≈ σ² — exactly (pmf) to 1e-6 relative, and the
    sample variance of 200k fast draws within 2% (≈ 6 standard errors)."""
    k = np.arange(-int(40 * sigma) - 5, int(40 * sigma) + 6)
    exact_var = float(np.sum(k**2 * discrete_gaussian_pmf(k, sigma**2)))
    assert abs(exact_var / sigma**2 - 1) < 1e-6
    x = sample_discrete_gaussian_fast(sigma**2, 200_000, np.random.default_rng(int(sigma * 10)))
    assert abs(x.var() / sigma**2 - 1) < 0.02
    assert abs(x.mean()) < 5 * sigma / math.sqrt(x.size)


def test_fast_path_shapes_and_determinism():
    a = sample_discrete_gaussian(4.0, (2, 3, 5), rng=np.random.default_rng(9))
    b = sample_discrete_gaussian(4.0, (2, 3, 5), rng=np.random.default_rng(9))
    assert a.shape == (2, 3, 5)
    np.testing.assert_array_equal(a, b)
    assert sample_discrete_laplace(2.0, 0, rng=np.random.default_rng(0)).shape == (0,)


# --- pmfs and validation -------------------------------------------------------------------------


@pytest.mark.parametrize("sigma2", [0.05, 0.5, 1.0, 2.25, 100.0, 1e6])
def test_discrete_gaussian_pmf_normalised(sigma2):
    """Property: the pmf sums to 1 (to 1e-12) on both branches of the normaliser."""
    m = math.ceil(40 * math.sqrt(sigma2)) + 5
    assert abs(discrete_gaussian_pmf(np.arange(-m, m + 1), sigma2).sum() - 1) < 1e-12


def test_discrete_gaussian_normaliser_branches_agree():
    """The Poisson-summation normaliser (σ² ≥ 1) equals the direct sum at the boundary."""
    k = np.arange(-200, 201)
    direct = np.exp(-(k**2) / 2.0).sum()
    assert discrete_gaussian_pmf(0, 1.0) == pytest.approx(1.0 / direct, rel=1e-15)


@pytest.mark.parametrize("scale", [0.2, 1.0, 7.5])
def test_discrete_laplace_pmf_normalised(scale):
    k = np.arange(-int(60 * scale) - 5, int(60 * scale) + 6)
    assert abs(discrete_laplace_pmf(k, scale).sum() - 1) < 1e-12


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_bad_parameters_rejected(bad):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        sample_discrete_gaussian(bad, 3, rng=rng)
    with pytest.raises(ValueError):
        sample_discrete_laplace(bad, 3, rng=rng, exact=True)


def test_rng_required_unless_secure():
    with pytest.raises(ValueError, match="rng"):
        sample_discrete_gaussian(1.0, 3)
    with pytest.raises(ValueError, match="rng"):
        sample_discrete_laplace(1.0, 3, exact=True)
