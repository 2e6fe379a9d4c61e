"""The audit's statistics against closed forms, scipy and dp-accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld
from scipy import stats

from privrl.audit.bounds import (
    auc,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
    one_run_epsilon,
    one_run_p_value,
    roc_curve,
)


@pytest.mark.parametrize("n", [1, 10, 1000])
def test_clopper_pearson_zero_and_all_successes_closed_form(n: int) -> None:
    # P[Bin(n, p) = 0] = (1 − p)^n = α  ⇒  upper = 1 − α^{1/n}; symmetric for the lower bound.
    assert clopper_pearson_upper(0, n, 0.95) == pytest.approx(1 - 0.05 ** (1 / n), rel=1e-9)
    assert clopper_pearson_lower(n, n, 0.95) == pytest.approx(0.05 ** (1 / n), rel=1e-9)
    assert clopper_pearson_upper(n, n) == 1.0
    assert clopper_pearson_lower(0, n) == 0.0


@pytest.mark.parametrize(("k", "n"), [(1, 10), (37, 200), (499, 1000)])
def test_clopper_pearson_is_the_exact_binomial_tail(k: int, n: int) -> None:
    """The upper bound p solves P[Bin(n, p) ≤ k] = α, the lower P[Bin(n, p) ≥ k] = α."""
    up = float(clopper_pearson_upper(k, n, 0.95))
    low = float(clopper_pearson_lower(k, n, 0.95))
    assert stats.binom.cdf(k, n, up) == pytest.approx(0.05, rel=1e-6)
    assert stats.binom.sf(k - 1, n, low) == pytest.approx(0.05, rel=1e-6)
    assert low < k / n < up


def test_clopper_pearson_refuses_bad_counts() -> None:
    with pytest.raises(ValueError, match="0 <= k <= n"):
        clopper_pearson_upper(5, 4)
    with pytest.raises(ValueError, match="confidence"):
        clopper_pearson_upper(1, 4, 1.0)


@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0])
def test_randomised_response_rates_give_exactly_epsilon(eps: float) -> None:
    """ε-randomised response has FPR = FNR = 1/(1 + e^ε), and the bound recovers ε (δ = 0)."""
    r = 1.0 / (1.0 + math.exp(eps))
    assert float(epsilon_from_rates(r, r, 0.0)) == pytest.approx(eps, rel=1e-12)


def test_epsilon_from_rates_edge_cases() -> None:
    assert float(epsilon_from_rates(0.5, 0.5, 0.0)) == 0.0  # a coin flip shows nothing
    assert float(epsilon_from_rates(0.9, 0.9, 0.0)) == 0.0  # worse than chance: no bound
    assert math.isinf(float(epsilon_from_rates(0.0, 0.3, 1e-6)))
    # δ ≥ 1 − FNR: the test's power is within δ, so no ε is shown
    assert float(epsilon_from_rates(0.0, 1.0 - 1e-7, 1e-6)) == 0.0


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
def test_gaussian_optimal_test_matches_dp_accounting(mu: float) -> None:
    """For N(0, 1) vs N(μ, 1) the Neyman–Pearson test has FNR = Φ(Φ⁻¹(1 − FPR) − μ); maximised
    over FPR, the bound equals the exact ε(δ) of GaussianDpEvent(1/μ) (dp-accounting PLD): the
    relation is tight for the Gaussian, and never exceeds it."""
    delta = 1e-5
    acc = pld.PLDAccountant()
    acc.compose(dp_event.GaussianDpEvent(noise_multiplier=1.0 / mu))
    exact = acc.get_epsilon(delta)
    a = np.geomspace(1e-14, 0.5, 20_000)
    a = np.r_[a, 1.0 - a]
    fnr = stats.norm.cdf(stats.norm.ppf(1.0 - a) - mu)
    best = float(epsilon_from_rates(a, fnr, delta).max())
    assert best <= exact + 1e-6
    assert best == pytest.approx(exact, rel=1e-4)


def test_roc_and_auc_match_mann_whitney() -> None:
    rng = np.random.default_rng(1)
    s0, s1 = rng.normal(0, 1, 700), rng.normal(0.8, 1, 500)
    s1[:50] = s0[:50]  # ties
    scores, labels = np.r_[s0, s1], np.r_[np.zeros(700), np.ones(500)]
    u = stats.mannwhitneyu(s1, s0).statistic
    assert auc(scores, labels) == pytest.approx(u / (700 * 500), rel=1e-12)
    fpr, tpr, thr = roc_curve(scores, labels)
    assert fpr[0] == tpr[0] == 0.0 and fpr[-1] == tpr[-1] == 1.0
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    assert np.all(np.diff(thr) < 0)


def test_auc_of_separable_scores_is_one_and_of_equal_scores_half() -> None:
    labels = np.r_[np.zeros(5), np.ones(5)]
    assert auc(np.arange(10.0), labels) == 1.0
    assert auc(np.zeros(10), labels) == 0.5


def test_lower_bound_of_sampled_gaussian_is_valid_and_not_vacuous() -> None:
    """Scores of the exact Gaussian test (μ = 2; ε(1e-5) ≈ 10): the 95% bound stays below the
    true ε and, with 400k trials, reaches a good part of it; the point estimate is larger."""
    rng = np.random.default_rng(7)
    n = 400_000
    labels = rng.integers(0, 2, n)
    scores = rng.normal(0.0, 1.0, n) + 2.0 * labels
    acc = pld.PLDAccountant()
    acc.compose(dp_event.GaussianDpEvent(noise_multiplier=0.5))
    exact = acc.get_epsilon(1e-5)
    b = epsilon_lower_bound(scores, labels, 1e-5)
    assert 0.3 * exact < b.epsilon < exact
    assert b.point >= b.epsilon
    assert b.confidence == pytest.approx(0.95)


def test_lower_bound_is_zero_for_an_attack_with_no_signal() -> None:
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 50_000)
    b = epsilon_lower_bound(rng.normal(size=50_000), labels, 1e-6)
    assert b.epsilon < 0.05


def test_lower_bound_refuses_one_class() -> None:
    with pytest.raises(ValueError, match="both b = 0 and b = 1"):
        epsilon_lower_bound([1.0, 2.0], [1, 1], 1e-5)


def _p_value_loop(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Steinke, Nasr & Jagielski 2023, Algorithm 2, written as a plain loop."""
    q = 1 / (1 + math.exp(-eps))
    beta = stats.binom.sf(v - 1, r, q)
    alpha, total = 0.0, 0.0
    for i in range(1, v + 1):
        total += stats.binom.pmf(v - i, r, q)
        alpha = max(alpha, total / i)
    return min(beta + alpha * delta * 2 * m, 1.0)


@pytest.mark.parametrize(
    ("m", "r", "v", "eps", "delta"),
    [(1000, 100, 80, 1.0, 1e-5), (10_000, 500, 400, 2.0, 1e-6), (100, 100, 60, 0.3, 0.0)],
)
def test_one_run_p_value_matches_the_paper_loop(m, r, v, eps, delta) -> None:
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(
        _p_value_loop(m, r, v, eps, delta), rel=1e-10
    )


def test_one_run_pure_dp_bound_solves_the_binomial_tail() -> None:
    """δ = 0: the bound is the ε with P[Bin(r, e^ε/(1+e^ε)) ≥ v] = 0.05 exactly."""
    r, v = 1000, 900
    eps = one_run_epsilon(5000, r, v, 0.0, 0.95, tol=1e-10)
    q = 1 / (1 + math.exp(-eps))
    assert stats.binom.sf(v - 1, r, q) == pytest.approx(0.05, rel=1e-5)
    # more correct guesses, a larger bound; δ > 0 can only lower it
    assert one_run_epsilon(5000, r, 950, 0.0) > eps
    assert one_run_epsilon(5000, r, v, 1e-5) <= eps + 1e-9


def test_one_run_bound_is_zero_at_chance() -> None:
    assert one_run_epsilon(1000, 200, 100, 1e-5) == 0.0
    with pytest.raises(ValueError, match="v <= r <= m"):
        one_run_p_value(10, 20, 5, 1.0, 0.0)


def test_one_run_audit_of_a_gaussian_mechanism_is_valid() -> None:
    """One run, m canaries each included with probability ½, released through N(μ·b_i, 1)
    (a Gaussian mechanism per canary, μ = 2: ε(1e-5) ≈ 10 by dp-accounting). Guessing on the
    r most confident scores gives a positive one-run bound that stays below the true ε."""
    rng = np.random.default_rng(11)
    m, r, delta = 10_000, 400, 1e-5
    included = rng.integers(0, 2, m)
    scores = rng.normal(0.0, 1.0, m) + 2.0 * included
    order = np.argsort(scores)
    pos, neg = order[-r // 2 :], order[: r // 2]  # guess "in" on the top, "out" on the bottom
    v = int(included[pos].sum() + (1 - included[neg]).sum())
    eps = one_run_epsilon(m, r, v, delta)
    acc = pld.PLDAccountant()
    acc.compose(dp_event.GaussianDpEvent(noise_multiplier=0.5))
    assert 0.5 < eps < acc.get_epsilon(delta)
