"""Tests of the accounting facade (privrl.privacy.accounting).

Every test names the property it checks and its tolerance. Reference tables come from the
specs: primorl.md (Poisson-subsampled Gaussian, RDP and PLD), qiao_wang.md (zCDP -> DP),
gpope.md (sampling without replacement under replace-one), expert_consensus.md (advanced
composition). Slow reproductions live in test_accounting_slow.py.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from dp_accounting import dp_event as de
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution
from dp_accounting.pld.common import DifferentialPrivacyParameters
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize, stats

from privrl.privacy import accounting as acc
from privrl.privacy.accounting import (
    DENSE_RDP_ORDERS,
    Accountant,
    AccountingError,
    advanced_composition,
    calibrate_noise_multiplier,
    describe_backend,
    epsilon,
    max_steps,
    sampled_gaussian_event,
    zcdp_rho,
    zcdp_to_dp,
)
from privrl.privacy.events import ApproxDpEvent, PureDpEvent
from privrl.privacy.units import NeighbourRelation

ADD = NeighbourRelation.ADD_REMOVE
REPLACE = NeighbourRelation.REPLACE_ONE
DEFAULT_ORDERS = tuple(float(a) for a in rdp_privacy_accountant.DEFAULT_RDP_ORDERS)

# primorl.md: (z, T, RDP column, PLD column) at q = 1e-3, delta = 1e-5.
PRIMORL_ROWS = [
    (0.35, 7000, 22.94, 19.51),
    (0.52, 7000, 5.13, 4.07),
    (0.25, 7000, 82.03, 69.60),
    (0.45, 7000, 8.76, 7.20),
    (0.25, 10000, 95.31, 83.16),
    (0.38, 10000, 18.86, 16.01),
]
PRIMORL_Q = 1e-3
DELTA = 1e-5

# gpope.md: (m, N, default-orders sigma, dense-orders sigma, 2h dense sigma) at eps = 0.1.
GPOPE_ROWS = [
    (1000, 1000, 3.04, 2.54, 5.07),
    (1000, 10**4, 6.87, 6.87, 13.74),
    (10**4, 10**5, 2.64, 2.34, 4.68),
    (100, 1000, 21.8, 21.8, 43.6),
]


def primorl_event(z: float, steps: int) -> de.DpEvent:
    return sampled_gaussian_event(z, steps, sampling_probability=PRIMORL_Q)


def gpope_event(m: int, n_steps: int, z: float) -> de.DpEvent:
    return sampled_gaussian_event(
        z, n_steps, sampling="without_replacement", dataset_size=m, sample_size=1
    )


def kov_optimal_epsilon(eps0: float, delta0: float, k: int, delta: float) -> float:
    """Exact optimal k-fold composition of (eps0, delta0)-DP (Kairouz, Oh & Viswanath 2015,
    Thm 3.3): the hockey-stick divergence of k independent randomized-response pairs, with
    delta(eps) = 1 - (1 - delta0)^k (1 - HS_eps), inverted by root finding."""
    j = np.arange(k + 1)
    losses = (2 * j - k) * eps0
    p_mass = stats.binom.pmf(j, k, math.exp(eps0) / (1 + math.exp(eps0)))

    def total_delta(e: float) -> float:
        hs = float(np.sum(p_mass * np.clip(-np.expm1(e - losses), 0.0, None)))
        return 1 - (1 - delta0) ** k * (1 - hs)

    if total_delta(0.0) <= delta:
        return 0.0
    return optimize.brentq(lambda e: total_delta(e) - delta, 0.0, k * eps0, xtol=1e-13)


# --------------------------------------------------------------------------- orders grid


def test_dense_orders_grid_shape():
    """The dense grid is sorted, unique, spans 1.01..1024, is fine below 2 (>= 40 orders,
    spacing <= 0.02) and contains dp-accounting's default orders (so it is never looser)."""
    grid = np.array(DENSE_RDP_ORDERS)
    assert np.all(np.diff(grid) > 0)
    assert grid[0] == pytest.approx(1.01) and grid[-1] == 1024.0
    below_two = grid[grid < 2]
    assert len(below_two) >= 40 and np.max(np.diff(below_two)) <= 0.02 + 1e-12
    assert set(DEFAULT_ORDERS) <= set(DENSE_RDP_ORDERS)
    assert 200 <= len(grid) <= 400
    # Integer orders are exact floats (dp-accounting's integer formulas key on is_integer()).
    assert all(float(a).is_integer() for a in grid if abs(a - round(a)) < 1e-9)


def test_dense_is_never_looser_than_default_orders():
    """Superset of orders => epsilon(dense) <= epsilon(default) exactly, on the spec rows."""
    for z, steps, _, _ in PRIMORL_ROWS:
        ev = primorl_event(z, steps)
        assert epsilon(ev, DELTA) <= epsilon(ev, DELTA, orders=DEFAULT_ORDERS)


def test_fractional_order_rdp_is_conservative_against_quadrature():
    """The dense grid relies on dp-accounting's fractional-order RDP of the Poisson-sampled
    Gaussian. Check it against direct numerical integration of
    D_alpha(mixture || N(0, z^2)) = log E_{N(0,z^2)}[(1 - q + q e^{(2x-1)/(2z^2)})^alpha]/(alpha-1):
    never below (safe side, to 1e-9 relative) and within 1% above."""
    for q, z, alpha in [(1e-3, 0.25, 1.26), (1e-3, 0.5, 2.5), (1e-2, 1.0, 3.3)]:

        def integrand(x: float, q=q, z=z, alpha=alpha) -> float:
            inner = math.log1p(q * math.expm1((2 * x - 1) / (2 * z * z)))
            density = math.exp(-x * x / (2 * z * z)) / (z * math.sqrt(2 * math.pi))
            return math.expm1(alpha * inner) * density

        excess, _ = integrate.quad(
            integrand,
            -12 * z,
            12 * z + alpha + 2,
            points=[0, 0.5, 1, alpha],
            epsabs=0,
            epsrel=1e-11,
            limit=500,
        )
        exact = math.log1p(excess) / (alpha - 1)
        ours = (
            rdp_privacy_accountant.RdpAccountant([alpha])
            .compose(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(z)))
            .rdp[0]
        )
        assert ours >= exact * (1 - 1e-9)
        assert ours <= exact * 1.01


# --------------------------------------------------------------------------- primorl table


@pytest.mark.parametrize(("z", "steps", "rdp_ref", "pld_ref"), PRIMORL_ROWS)
def test_primorl_rdp_column_with_default_orders(z, steps, rdp_ref, pld_ref):
    """The spec's RDP column was computed with dp-accounting's default orders: reproduce it
    to +-2% (measured: within 0.02%)."""
    assert epsilon(primorl_event(z, steps), DELTA, orders=DEFAULT_ORDERS) == pytest.approx(
        rdp_ref, rel=0.02
    )


# Our dense-grid values (measured). They match the spec's RDP column to +-2% except the two
# z = 0.25 rows, where the optimal order (~1.25) falls between the default orders 1.2 and 1.3
# and the dense grid is tighter by 3.3% and 1.4%.
PRIMORL_DENSE = {
    (0.35, 7000): 22.94,
    (0.52, 7000): 5.133,
    (0.25, 7000): 79.30,
    (0.45, 7000): 8.760,
    (0.25, 10000): 93.99,
    (0.38, 10000): 18.80,
}


@pytest.mark.parametrize(("z", "steps", "rdp_ref", "pld_ref"), PRIMORL_ROWS)
def test_primorl_rdp_column_dense(z, steps, rdp_ref, pld_ref):
    """Dense-grid RDP: equal to our pinned value (+-0.2%); within +-2% of the spec for
    z >= 0.35 and tighter than the spec (by < 4%) at z = 0.25; and above the (near exact)
    PLD column, as any RDP bound must be."""
    value = epsilon(primorl_event(z, steps), DELTA)
    assert value == pytest.approx(PRIMORL_DENSE[(z, steps)], rel=2e-3)
    if z >= 0.35:
        assert value == pytest.approx(rdp_ref, rel=0.02)
    else:
        assert rdp_ref * 0.96 <= value < rdp_ref
    assert value > pld_ref


@pytest.mark.parametrize(("z", "steps", "rdp_ref", "pld_ref"), PRIMORL_ROWS)
def test_primorl_pld_column_coarse(z, steps, rdp_ref, pld_ref):
    """PLD column to +-2% at discretisation 1e-3 (fast); the 1e-4 run of every row is in the
    slow suite, one row is below."""
    value = epsilon(primorl_event(z, steps), DELTA, backend="pld", pld_discretization=1e-3)
    assert value == pytest.approx(pld_ref, rel=0.02)


def test_primorl_pld_column_fine_one_row():
    """Pendulum HIGH (z = 0.52, T = 7000) at the default discretisation 1e-4: 4.07 +-2%."""
    assert epsilon(primorl_event(0.52, 7000), DELTA, backend="pld") == pytest.approx(4.07, rel=0.02)


@pytest.mark.parametrize(("target", "expected"), [(5.0, 0.524), (10.0, 0.435)])
def test_primorl_calibration(target, expected):
    """q = 1e-3, T = 7000: eps = 5 => z ~ 0.524, eps = 10 => z ~ 0.435 (+-1%); the returned z
    meets its target, and z / (1 + tolerance) does not (minimal within tolerance)."""
    tol = 1e-4
    z = calibrate_noise_multiplier(
        target, DELTA, 7000, sampling_probability=PRIMORL_Q, tolerance=tol
    )
    assert z == pytest.approx(expected, rel=0.01)
    assert epsilon(primorl_event(z, 7000), DELTA) <= target
    assert epsilon(primorl_event(z / (1 + tol), 7000), DELTA) > target


def test_calibration_agrees_with_plain_bisection():
    """The secant-accelerated search returns the same z as textbook bisection (to the
    tolerance 1e-4 relative), so the acceleration changes speed only."""
    target, steps, q = 2.0, 3000, 0.01

    def eps_at(z: float) -> float:
        return epsilon(sampled_gaussian_event(z, steps, sampling_probability=q), DELTA)

    lo, hi = 0.1, 20.0
    assert eps_at(lo) > target >= eps_at(hi)
    while hi / lo > 1 + 1e-5:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps_at(mid) <= target else (mid, hi)
    ours = calibrate_noise_multiplier(target, DELTA, steps, sampling_probability=q)
    assert ours == pytest.approx(hi, rel=1.1e-4)
    assert ours >= hi * (1 - 1e-5)  # never below the true threshold (safe side)


def test_calibration_pld_backend_meets_target():
    """PLD calibration (coarse discretisation) meets its target and is below the RDP z."""
    kw = dict(sampling_probability=PRIMORL_Q, tolerance=1e-3)
    z_pld = calibrate_noise_multiplier(
        5.0, DELTA, 7000, backend="pld", pld_discretization=1e-3, **kw
    )
    z_rdp = calibrate_noise_multiplier(5.0, DELTA, 7000, **kw)
    assert epsilon(primorl_event(z_pld, 7000), DELTA, backend="pld", pld_discretization=1e-3) <= 5.0
    assert z_pld < z_rdp


# --------------------------------------------------------------------------- qiao_wang table

# qiao_wang.md: rho -> (eps at delta 0.1, eps at delta 1e-3), as printed (digits matter).
ZCDP_TABLE = [(25, "40.2", "51.3"), (5, "11.8", "16.8"), (1, "4.0", "6.26"), (0.1, "1.1", "1.8")]


@pytest.mark.parametrize(("rho", "at_01", "at_1e3"), ZCDP_TABLE)
def test_zcdp_to_dp_table(rho, at_01, at_1e3):
    """Bun & Steinke Prop 1.3 reproduces the spec table to the digits printed."""
    for delta, printed in [(0.1, at_01), (1e-3, at_1e3)]:
        digits = len(printed.split(".")[1])
        assert f"{zcdp_to_dp(rho, delta):.{digits}f}" == printed


def test_zcdp_event_rdp_is_tighter_than_prop_1_3():
    """A ZCDpEvent accounted by RDP (optimised conversion) is within (0, Prop 1.3]."""
    for rho in [0.1, 1.0, 5.0]:
        value = epsilon(de.ZCDpEvent(rho), 1e-3)
        assert 0 < value <= zcdp_to_dp(rho, 1e-3) + 1e-12


def test_zcdp_to_dp_errors():
    """rho < 0 and delta outside (0, 1) are rejected."""
    with pytest.raises(AccountingError):
        zcdp_to_dp(-1.0, 1e-5)
    for bad in [0.0, 1.0, -0.1, math.nan]:
        with pytest.raises(AccountingError):
            zcdp_to_dp(1.0, bad)
    assert zcdp_to_dp(0.0, 1e-5) == 0.0


def test_zcdp_rho():
    """rho = count / (2 z^2) for Gaussians, additive over composition; ZCDp rho is exact;
    approximate zCDP (xi > 0) and non-Gaussian events give None."""
    g = de.GaussianDpEvent(2.0)
    assert zcdp_rho(g) == pytest.approx(1 / 8)
    assert zcdp_rho(de.SelfComposedDpEvent(g, 10)) == pytest.approx(10 / 8)
    composed = de.ComposedDpEvent([de.SelfComposedDpEvent(g, 4), de.ZCDpEvent(0.3)])
    assert zcdp_rho(composed) == pytest.approx(4 / 8 + 0.3)
    assert zcdp_rho(de.NoOpDpEvent()) == 0.0
    assert zcdp_rho(de.ZCDpEvent(0.3, xi=0.1)) is None
    assert zcdp_rho(de.ComposedDpEvent([g, de.LaplaceDpEvent(1.0)])) is None
    assert zcdp_rho(PureDpEvent(1.0)) is None
    assert zcdp_rho(primorl_event(1.0, 10)) is None  # subsampled: not exact zCDP
    assert zcdp_rho(de.GaussianDpEvent(0.0)) == math.inf


# --------------------------------------------------------------------------- gpope table


@pytest.mark.parametrize(("m", "n_steps", "sigma_default", "sigma_dense", "sigma_2h"), GPOPE_ROWS)
def test_gpope_table_sigma_brackets(m, n_steps, sigma_default, sigma_dense, sigma_2h):
    """SampledWithoutReplacement(m, 1, Gaussian) under replace-one, eps = 0.1: the spec's sigma
    is the calibrated one to +-2%, i.e. eps(1.02 sigma) <= 0.1 < eps(0.98 sigma) (eps is
    non-increasing in sigma), for the dense column (our grid) and the default-orders column.
    (The default-orders curve has a cliff: at the order 128 the bound explodes for
    alpha > ~2 sigma^2 ln(1/q), so eps(3.04) = 0.117 but eps(3.045) < 0.1; a bracket, not a
    point check, is the right test.) The 2h column is the dense one doubled (sensitivity 2h
    => noise multiplier sigma / 2), to the spec's rounding."""
    for sigma, orders in [(sigma_dense, None), (sigma_default, DEFAULT_ORDERS)]:
        above = epsilon(
            gpope_event(m, n_steps, sigma * 1.02), DELTA, relation=REPLACE, orders=orders
        )
        below = epsilon(
            gpope_event(m, n_steps, sigma * 0.98), DELTA, relation=REPLACE, orders=orders
        )
        assert above <= 0.1 < below
    assert sigma_2h == pytest.approx(2 * sigma_dense, rel=0.01)


def test_gpope_calibration_one_row():
    """Calibrated by our search: m = 1000, N = 10^4 => sigma = 6.87 +-2% (dense), meeting
    eps <= 0.1. (All four rows: slow suite.)"""
    z = calibrate_noise_multiplier(
        0.1,
        DELTA,
        10**4,
        sampling="without_replacement",
        dataset_size=1000,
        sample_size=1,
        relation=REPLACE,
        tolerance=1e-3,
    )
    assert z == pytest.approx(6.87, rel=0.02)
    assert epsilon(gpope_event(1000, 10**4, z), DELTA, relation=REPLACE) <= 0.1


# --------------------------------------------------------------------------- cross-checks


def test_opacus_cross_check():
    """q = 256/1e5, sigma = 1, 10,000 steps, delta = 1e-5: Opacus's RDP accountant gives
    1.498; ours with Opacus's orders agrees to 1e-6 relative, dense orders to +-2%; PLD 1.33
    +-2%."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis import rdp as opacus_rdp

    q = 256 / 1e5
    alphas = RDPAccountant.DEFAULT_ALPHAS
    curve = opacus_rdp.compute_rdp(q=q, noise_multiplier=1.0, steps=10_000, orders=alphas)
    op_eps, _ = opacus_rdp.get_privacy_spent(orders=alphas, rdp=curve, delta=DELTA)
    assert op_eps == pytest.approx(1.498, rel=1e-3)
    ev = sampled_gaussian_event(1.0, 10_000, sampling_probability=q)
    assert epsilon(ev, DELTA, orders=alphas) == pytest.approx(op_eps, rel=1e-6)
    assert epsilon(ev, DELTA) == pytest.approx(op_eps, rel=0.02)
    assert epsilon(ev, DELTA, backend="pld") == pytest.approx(1.33, rel=0.02)


NATIVE_EVENTS = [
    (primorl_event(0.7, 500), ADD, ("rdp", "pld")),
    (de.SelfComposedDpEvent(de.GaussianDpEvent(3.0), 20), ADD, ("rdp", "pld")),
    (de.SelfComposedDpEvent(de.GaussianDpEvent(3.0), 20), REPLACE, ("rdp", "pld")),
    (de.SelfComposedDpEvent(de.LaplaceDpEvent(5.0), 7), ADD, ("rdp", "pld")),
    (de.ZCDpEvent(0.4), ADD, ("rdp",)),
    (
        de.SelfComposedDpEvent(de.PoissonSampledDpEvent(0.05, de.LaplaceDpEvent(2.0)), 30),
        ADD,
        ("pld",),
    ),
    (de.SelfComposedDpEvent(de.DiscreteLaplaceDpEvent(0.5, 1), 5), ADD, ("pld",)),
    (gpope_event(200, 50, 3.0), REPLACE, ("rdp",)),
    (
        de.ComposedDpEvent(
            [
                primorl_event(0.9, 200),
                de.SelfComposedDpEvent(de.GaussianDpEvent(10.0), 3),
                de.NoOpDpEvent(),
                de.ComposedDpEvent(
                    [
                        de.LaplaceDpEvent(20.0),
                        de.SelfComposedDpEvent(
                            de.PoissonSampledDpEvent(0.2, de.GaussianDpEvent(4.0)), 4
                        ),
                    ]
                ),
            ]
        ),
        ADD,
        ("rdp", "pld"),
    ),
]


@pytest.mark.parametrize(("event", "relation", "backends"), NATIVE_EVENTS)
def test_equals_dp_accounting_directly(event, relation, backends):
    """For dp-accounting's own events our epsilon is dp-accounting's: RdpAccountant with the
    same orders and PLDAccountant with the same discretisation, to 1e-9 relative."""
    rel = relation.to_dp_accounting()
    if "rdp" in backends:
        direct = rdp_privacy_accountant.RdpAccountant(list(DEFAULT_ORDERS), rel)
        expected = direct.compose(event).get_epsilon(DELTA)
        ours = epsilon(event, DELTA, relation=relation, orders=DEFAULT_ORDERS)
        assert ours == pytest.approx(expected, rel=1e-9, abs=1e-12)
        dense = rdp_privacy_accountant.RdpAccountant(list(DENSE_RDP_ORDERS), rel)
        assert epsilon(event, DELTA, relation=relation) == pytest.approx(
            dense.compose(event).get_epsilon(DELTA), rel=1e-9, abs=1e-12
        )
    if "pld" in backends:
        direct_pld = pld_privacy_accountant.PLDAccountant(rel, 1e-3)
        expected = direct_pld.compose(event).get_epsilon(DELTA)
        ours = epsilon(event, DELTA, relation=relation, backend="pld", pld_discretization=1e-3)
        assert ours == pytest.approx(expected, rel=1e-9, abs=1e-12)


# --------------------------------------------------------------------------- internal hooks


def test_guard_rdp_public_api_we_rely_on():
    """We sum per-leaf `RdpAccountant.rdp` curves and convert with `compute_epsilon`. Guard:
    the curve is linear in the count, and compute_epsilon on it equals get_epsilon."""
    orders = list(DEFAULT_ORDERS)
    leaf = de.PoissonSampledDpEvent(0.01, de.GaussianDpEvent(1.1))
    one = rdp_privacy_accountant.RdpAccountant(orders).compose(leaf)
    many = rdp_privacy_accountant.RdpAccountant(orders).compose(leaf, 37)
    np.testing.assert_allclose(many.rdp, 37 * one.rdp, rtol=1e-12)
    assert rdp_privacy_accountant.compute_epsilon(orders, many.rdp, DELTA)[0] == pytest.approx(
        many.get_epsilon(DELTA), rel=1e-12
    )


def test_guard_pld_internal_hook():
    """PLD accounting of our events composes with PLDAccountant's internal `_pld`. Guard: it
    exists, is a PrivacyLossDistribution, and is exactly what get_epsilon reads; and
    from_privacy_parameters still builds the (eps, delta) dominating PLD."""
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    accountant.compose(primorl_event(1.0, 100))
    internal = accountant._pld
    assert isinstance(internal, privacy_loss_distribution.PrivacyLossDistribution)
    assert internal.get_epsilon_for_delta(DELTA) == accountant.get_epsilon(DELTA)
    assert acc._internal_pld(accountant) is internal
    rr = privacy_loss_distribution.from_privacy_parameters(
        DifferentialPrivacyParameters(1.0, 1e-3), value_discretization_interval=1e-4
    )
    assert rr.get_epsilon_for_delta(1e-3) == pytest.approx(1.0, abs=2e-4)
    assert rr.get_delta_for_epsilon(1.0) == pytest.approx(1e-3, rel=1e-6)


# --------------------------------------------------------------------------- pure / approx DP


@pytest.mark.parametrize(("eps0", "k"), [(0.1, 50), (0.5, 20), (1.0, 5)])
def test_pure_dp_composition(eps0, k):
    """k-fold eps0-DP. PLD equals the Kairouz-Oh-Viswanath optimal composition up to the
    pessimistic discretisation: exact <= PLD <= exact + k * 1e-4. RDP is a valid bound:
    exact <= RDP <= k eps0 (basic composition)."""
    ev = de.SelfComposedDpEvent(PureDpEvent(eps0), k)
    exact = kov_optimal_epsilon(eps0, 0.0, k, DELTA)
    pld = epsilon(ev, DELTA, backend="pld")
    assert exact - 1e-9 <= pld <= exact + k * 1e-4 + 1e-9
    rdp = epsilon(ev, DELTA)
    assert exact - 1e-9 <= rdp <= k * eps0 + 1e-12


def test_pure_dp_at_delta_zero_is_basic_composition():
    """At delta = 0 only pure DP composes: RDP backend gives sum eps exactly."""
    ev = de.ComposedDpEvent([de.SelfComposedDpEvent(PureDpEvent(0.3), 4), PureDpEvent(0.1)])
    assert epsilon(ev, 0.0) == pytest.approx(1.3, rel=1e-12)
    assert epsilon(primorl_event(1.0, 10), 0.0) == math.inf


def test_approx_dp_composition_rdp_is_advanced_composition():
    """k-fold (eps0, delta0)-DP alone, RDP backend: exactly DRV advanced composition with
    slack delta - k delta0 (when below k eps0). PLD (optimal composition) is <= it and >= the
    KOV optimum."""
    eps0, delta0, k = 0.05, 1e-8, 100
    ev = de.SelfComposedDpEvent(ApproxDpEvent(eps0, delta0), k)
    adv, adv_delta = advanced_composition(eps0, delta0, k, DELTA - k * delta0)
    assert adv < k * eps0 and adv_delta == pytest.approx(DELTA)
    assert epsilon(ev, DELTA) == pytest.approx(adv, rel=1e-12)
    pld = epsilon(ev, DELTA, backend="pld")
    assert pld <= adv
    assert pld >= kov_optimal_epsilon(eps0, delta0, k, DELTA) - 1e-9


def test_approx_dp_delta_budget_exhausted():
    """Sum of ApproxDpEvent deltas >= target delta: AccountingError saying so, both backends."""
    ev = de.ComposedDpEvent(
        [primorl_event(1.0, 10), de.SelfComposedDpEvent(ApproxDpEvent(0.1, 1e-6), 11)]
    )
    for backend in ("rdp", "pld"):
        for delta in [1e-5, 1.05e-5]:
            with pytest.raises(AccountingError, match="spend delta"):
                epsilon(ev, delta, backend=backend)
        assert epsilon(ev, 1.2e-5, backend=backend) < math.inf


def test_mixed_native_and_pure():
    """Native + pure events: epsilon(native) <= epsilon(both) <= epsilon(native) + eps_pure
    (basic composition is always available), for both backends (PLD with 1e-3 slack for
    discretisation)."""
    native = primorl_event(0.8, 2000)
    both = de.ComposedDpEvent([native, de.SelfComposedDpEvent(PureDpEvent(0.05), 10)])
    for backend in ("rdp", "pld"):
        e_native = epsilon(native, DELTA, backend=backend, pld_discretization=1e-3)
        e_both = epsilon(both, DELTA, backend=backend, pld_discretization=1e-3)
        assert e_native < e_both <= e_native + 0.5 + 1e-3


def test_mixed_native_and_approx_split():
    """Native + approx events (RDP): the result is a basic composition at some split, so it
    is >= epsilon(native at delta - sum delta_i) and <= the split that gives half the
    remaining delta to the slack (a point of our grid), computed here from public
    functions."""
    native = primorl_event(0.8, 2000)
    eps0, delta0, k = 0.02, 1e-8, 200
    approx = de.SelfComposedDpEvent(ApproxDpEvent(eps0, delta0), k)
    both = de.ComposedDpEvent([native, approx])
    remaining = DELTA - k * delta0
    value = epsilon(both, DELTA)
    assert value >= epsilon(native, remaining)
    half = epsilon(native, remaining / 2) + min(
        k * eps0, advanced_composition(eps0, delta0, k, remaining / 2)[0]
    )
    assert value <= half + 1e-12
    pld_value = epsilon(both, DELTA, backend="pld", pld_discretization=1e-3)
    assert pld_value <= value


@settings(max_examples=25, deadline=None)
@given(
    eps0=st.floats(0.01, 2.0),
    k=st.integers(1, 60),
    log_delta=st.floats(-9, -2),
)
def test_pure_dp_bounds_property(eps0, k, log_delta):
    """For any eps0, k, delta: KOV optimum <= RDP <= k eps0 and KOV <= PLD <= KOV + k disc."""
    delta = 10.0**log_delta
    ev = de.SelfComposedDpEvent(PureDpEvent(eps0), k)
    exact = kov_optimal_epsilon(eps0, 0.0, k, delta)
    assert exact - 1e-8 <= epsilon(ev, delta) <= k * eps0 + 1e-9
    pld = epsilon(ev, delta, backend="pld", pld_discretization=1e-3)
    assert exact - 1e-8 <= pld <= exact + k * 1e-3 + 1e-8


# --------------------------------------------------------------------------- advanced composition


def test_advanced_composition_formula_and_expert_fixture():
    """The exact DRV formula; with delta_slack = delta1 / 2 it reproduces the expert spec's
    sqrt(2T ln(2/delta1)) eps0 + T eps0 (e^eps0 - 1) (Acrobot: eps1 = 10, delta1 = 1/3000,
    T = 25, eps' = 0.1199, eps0 = 2 eps') and stays within eps1."""
    eps1, delta1, rounds = 10.0, 1 / 3000, 25
    eps_prime = eps1 / math.sqrt(32 * rounds * math.log(2 / delta1))
    assert eps_prime == pytest.approx(0.1199, abs=5e-5)
    eps0 = 2 * eps_prime
    d_round = delta1 / (2 * rounds)
    value, total_delta = advanced_composition(eps0, d_round, rounds, delta1 / 2)
    expected = math.sqrt(2 * rounds * math.log(2 / delta1)) * eps0 + rounds * eps0 * math.expm1(
        eps0
    )
    assert value == pytest.approx(expected, rel=1e-12)
    assert total_delta == pytest.approx(delta1, rel=1e-12)
    assert value <= eps1
    assert advanced_composition(0.0, 0.0, 10, 1e-5) == (0.0, 1e-5)


def test_advanced_composition_errors():
    """Invalid arguments are AccountingErrors (a ValueError)."""
    for args in [
        (-0.1, 0, 1, 1e-5),
        (0.1, 1.5, 1, 1e-5),
        (0.1, 0, -1, 1e-5),
        (0.1, 0, 1, 0.0),
        (0.1, 0, 1, 1.0),
        (math.inf, 0, 1, 1e-5),
        (0.1, 0, 1.5, 1e-5),
    ]:
        with pytest.raises(AccountingError):
            advanced_composition(*args)
    assert issubclass(AccountingError, ValueError)


# --------------------------------------------------------------------------- events and errors


def test_sampled_gaussian_event_shapes():
    """The event documents exactly the sampling that was asked for."""
    assert sampled_gaussian_event(1.5, 10, sampling_probability=0.1) == de.SelfComposedDpEvent(
        de.PoissonSampledDpEvent(0.1, de.GaussianDpEvent(1.5)), 10
    )
    # Poisson sampling at rate 1 selects every unit: the plain Gaussian.
    assert sampled_gaussian_event(1.5, 3) == de.SelfComposedDpEvent(de.GaussianDpEvent(1.5), 3)
    assert sampled_gaussian_event(1.5, 3, sampling="none") == de.SelfComposedDpEvent(
        de.GaussianDpEvent(1.5), 3
    )
    wor = sampled_gaussian_event(
        2.0, 5, sampling="without_replacement", dataset_size=100, sample_size=4
    )
    assert wor == de.SelfComposedDpEvent(
        de.SampledWithoutReplacementDpEvent(100, 4, de.GaussianDpEvent(2.0)), 5
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(sampling_probability=0.0),
        dict(sampling_probability=1.5),
        dict(sampling_probability=math.nan),
        dict(sampling="without_replacement", dataset_size=10),
        dict(sampling="without_replacement", dataset_size=10, sample_size=11),
        dict(sampling="without_replacement", dataset_size=10, sample_size=0),
        dict(
            sampling="without_replacement", dataset_size=10, sample_size=2, sampling_probability=0.2
        ),
        dict(sampling="none", sampling_probability=0.5),
        dict(sampling="poisson", sampling_probability=0.5, dataset_size=10),
        dict(sampling="bootstrap"),
    ],
)
def test_sampled_gaussian_event_errors(kwargs):
    """Invalid sampling descriptions are rejected with AccountingError."""
    with pytest.raises(AccountingError):
        sampled_gaussian_event(1.0, 10, **kwargs)


def test_sampled_gaussian_event_noise_and_steps_errors():
    """Negative / NaN noise and negative or fractional steps are rejected."""
    for z in [-1.0, math.nan, math.inf]:
        with pytest.raises(AccountingError):
            sampled_gaussian_event(z, 10)
    for steps in [-1, 2.5, True]:
        with pytest.raises(AccountingError):
            sampled_gaussian_event(1.0, steps)


def test_unsupported_events_name_event_and_suggest_backend():
    """ZCDp and sampling-without-replacement under PLD, DiscreteLaplace under RDP and
    SampledWithoutReplacement under add/remove raise AccountingError naming the event and the
    way out."""
    cases = [
        (de.ZCDpEvent(1.0), ADD, "pld", "ZCDpEvent", "backend='rdp'"),
        (
            gpope_event(100, 10, 1.0),
            REPLACE,
            "pld",
            "SampledWithoutReplacementDpEvent",
            "backend='rdp'",
        ),
        (de.DiscreteLaplaceDpEvent(0.5, 1), ADD, "rdp", "DiscreteLaplaceDpEvent", "backend='pld'"),
        (gpope_event(100, 10, 1.0), ADD, "rdp", "SampledWithoutReplacementDpEvent", "replace_one"),
        (
            de.SampledWithReplacementDpEvent(10, 1, de.GaussianDpEvent(1.0)),
            ADD,
            "rdp",
            "SampledWithReplacementDpEvent",
            "no backend",
        ),
        (
            de.PoissonSampledDpEvent(0.1, PureDpEvent(1.0)),
            ADD,
            "rdp",
            "PoissonSampledDpEvent",
            "no backend",
        ),
    ]
    for event, relation, backend, name, hint in cases:
        with pytest.raises(AccountingError, match=name) as info:
            epsilon(event, DELTA, relation=relation, backend=backend)
        assert hint in str(info.value)


def test_special_events():
    """NoOp costs nothing, NonPrivate is infinite, Unsupported is an error, count 0 is free."""
    assert epsilon(de.NoOpDpEvent(), DELTA) == 0.0
    assert epsilon(de.NoOpDpEvent(), DELTA, backend="pld") == 0.0
    for backend in ("rdp", "pld"):
        non_private = de.ComposedDpEvent([primorl_event(1.0, 10), de.NonPrivateDpEvent()])
        assert epsilon(non_private, DELTA, backend=backend) == math.inf
        with pytest.raises(AccountingError, match="UnsupportedDpEvent"):
            epsilon(de.UnsupportedDpEvent(), DELTA, backend=backend)
    assert epsilon(de.SelfComposedDpEvent(de.GaussianDpEvent(0.1), 0), DELTA) == 0.0
    # Zero noise is non-private; dp-accounting's PLD accountant flags it instead of composing
    # it, so it must stay infinite when our events are composed on top.
    for zero_noise in [
        de.GaussianDpEvent(0.0),
        de.PoissonSampledDpEvent(0.1, de.GaussianDpEvent(0.0)),
    ]:
        mixed = de.ComposedDpEvent([zero_noise, PureDpEvent(0.1), ApproxDpEvent(0.1, 1e-7)])
        for backend in ("rdp", "pld"):
            assert epsilon(mixed, DELTA, backend=backend) == math.inf


def test_invalid_arguments_to_epsilon():
    """delta outside [0, 1), unknown backend/relation, bad orders, bad custom events."""
    ev = primorl_event(1.0, 10)
    for delta in [-1e-5, 1.0, math.nan]:
        with pytest.raises(AccountingError):
            epsilon(ev, delta)
    with pytest.raises(AccountingError):
        epsilon(ev, DELTA, backend="moments")  # type: ignore[arg-type]
    with pytest.raises(AccountingError):
        epsilon(ev, DELTA, relation="swap")  # type: ignore[arg-type]
    for orders in [[], [0.5, 2.0], [2.0, math.inf]]:
        with pytest.raises(AccountingError):
            epsilon(ev, DELTA, orders=orders)
    with pytest.raises(AccountingError):
        epsilon(ev, DELTA, backend="pld", pld_discretization=0.0)
    for bad in [
        PureDpEvent(-1.0),
        PureDpEvent(math.inf),
        ApproxDpEvent(1.0, 1.0),
        ApproxDpEvent(1.0, -1e-9),
    ]:
        with pytest.raises(AccountingError):
            epsilon(bad, DELTA)
    with pytest.raises(AccountingError):
        epsilon("not an event", DELTA)  # type: ignore[arg-type]
    # Relation names are parsed.
    assert epsilon(ev, DELTA, relation="add-remove") == epsilon(ev, DELTA)  # type: ignore[arg-type]


def test_epsilon_of_a_repeated_event_reuses_the_cached_rdp_curve():
    """A repeat of epsilon() for 10,000 Poisson-sampled steps computes no new RDP curve: it is
    served from the cache (which is what makes it cheap; speed itself belongs in benchmarks),
    and gives the same ε."""
    acc._leaf_rdp_cached.cache_clear()
    ev = sampled_gaussian_event(0.9, 10_000, sampling_probability=0.004)
    first = epsilon(ev, DELTA)
    after_first = acc._leaf_rdp_cached.cache_info()
    assert after_first.misses >= 1
    again = epsilon(ev, DELTA)
    after_again = acc._leaf_rdp_cached.cache_info()
    assert after_again.misses == after_first.misses  # nothing recomputed
    assert after_again.hits > after_first.hits
    assert again == first


# --------------------------------------------------------------------------- calibration errors


def test_calibration_errors():
    """Impossible or invalid calibration requests raise AccountingError."""
    kw = dict(sampling_probability=0.01)
    with pytest.raises(AccountingError):
        calibrate_noise_multiplier(0.0, DELTA, 100, **kw)
    with pytest.raises(AccountingError):
        calibrate_noise_multiplier(math.inf, DELTA, 100, **kw)
    for delta in [0.0, 1.0, 2.0]:
        with pytest.raises(AccountingError):
            calibrate_noise_multiplier(1.0, delta, 100, **kw)
    with pytest.raises(AccountingError):
        calibrate_noise_multiplier(1.0, DELTA, 0, **kw)
    with pytest.raises(AccountingError):
        calibrate_noise_multiplier(1.0, DELTA, 100, sampling_probability=1.5)
    with pytest.raises(AccountingError):
        calibrate_noise_multiplier(1.0, DELTA, 100, tolerance=0.0, **kw)
    with pytest.raises(AccountingError, match="replace_one"):
        calibrate_noise_multiplier(
            1.0, DELTA, 100, sampling="without_replacement", dataset_size=100, sample_size=1
        )
    with pytest.raises(AccountingError, match="backend='rdp'"):
        calibrate_noise_multiplier(
            1.0,
            DELTA,
            100,
            sampling="without_replacement",
            dataset_size=100,
            sample_size=1,
            relation=REPLACE,
            backend="pld",
        )


def test_calibration_unreachable_target():
    """A target that needs absurd noise (eps = 1e-9 over 10^6 full-batch steps) is reported as
    unreachable, not looped on forever."""
    with pytest.raises(AccountingError, match="unreachable"):
        calibrate_noise_multiplier(1e-9, 1e-10, 10**6, sampling="none")


def test_calibration_vacuous_target():
    """A huge target is met with (almost) no noise: the result still meets it. The PLD
    search stops at its floor 0.2 (small-noise PLDs are huge) and returns it."""
    z = calibrate_noise_multiplier(1e6, DELTA, 1, sampling="none")
    assert 0 < z <= 1e-3
    assert epsilon(sampled_gaussian_event(z, 1, sampling="none"), DELTA) <= 1e6
    z_pld = calibrate_noise_multiplier(
        1e6, DELTA, 1, sampling="none", backend="pld", pld_discretization=1e-3
    )
    assert z_pld == 0.2


# --------------------------------------------------------------------------- max_steps


def test_max_steps_consistent_with_epsilon():
    """T = max_steps satisfies eps(T) <= target < eps(T + 1) (RDP and coarse PLD)."""
    z, q, target = 1.0, 0.01, 2.0
    for backend, disc in [("rdp", 1e-4), ("pld", 1e-3)]:
        steps = max_steps(
            z, target, DELTA, sampling_probability=q, backend=backend, pld_discretization=disc
        )
        kw = dict(backend=backend, pld_discretization=disc)
        ev = sampled_gaussian_event
        assert epsilon(ev(z, steps, sampling_probability=q), DELTA, **kw) <= target
        assert epsilon(ev(z, steps + 1, sampling_probability=q), DELTA, **kw) > target
        assert steps > 100


def test_max_steps_monotone():
    """More budget or more noise never allows fewer steps."""
    kw = dict(sampling_probability=0.02)
    by_target = [max_steps(1.2, t, DELTA, **kw) for t in [0.5, 1.0, 2.0, 4.0]]
    assert by_target == sorted(by_target) and by_target[0] < by_target[-1]
    by_noise = [max_steps(z, 1.0, DELTA, **kw) for z in [0.8, 1.0, 1.5, 3.0]]
    assert by_noise == sorted(by_noise) and by_noise[0] < by_noise[-1]


def test_max_steps_edges_and_errors():
    """0 when one step already exceeds the target; the cap when it is never exceeded;
    invalid arguments are AccountingErrors."""
    assert max_steps(0.3, 0.01, DELTA, sampling="none") == 0
    assert max_steps(1000.0, 10.0, DELTA, sampling="none", upper=50) == 50
    for kwargs in [dict(upper=0), dict(sampling_probability=0.0)]:
        with pytest.raises(AccountingError):
            max_steps(1.0, 1.0, DELTA, **kwargs)
    with pytest.raises(AccountingError):
        max_steps(1.0, -1.0, DELTA)
    with pytest.raises(AccountingError):
        max_steps(1.0, 1.0, 0.0)
    with pytest.raises(AccountingError):
        max_steps(1.0, 1.0, DELTA, sampling="without_replacement", dataset_size=10, sample_size=1)


@settings(max_examples=10, deadline=None)
@given(z=st.floats(0.6, 5.0), log_q=st.floats(-3, -1), target=st.floats(0.3, 8.0))
def test_max_steps_property(z, log_q, target):
    """For random parameters, max_steps is the exact threshold of epsilon() in T."""
    q = 10.0**log_q
    steps = max_steps(z, target, DELTA, sampling_probability=q, upper=10**6)
    if 0 < steps < 10**6:
        ev = sampled_gaussian_event
        assert epsilon(ev(z, steps, sampling_probability=q), DELTA) <= target
        assert epsilon(ev(z, steps + 1, sampling_probability=q), DELTA) > target


# --------------------------------------------------------------------------- Accountant


def test_accountant_wraps_functions():
    """compose/event/epsilon/rho agree with the functions on the composed event."""
    a = Accountant()
    a.compose(de.GaussianDpEvent(4.0), 3).compose(de.GaussianDpEvent(4.0), 2)
    assert a.event == de.SelfComposedDpEvent(de.GaussianDpEvent(4.0), 5)
    assert a.rho == pytest.approx(5 / 32)
    a.compose(primorl_event(1.0, 100))
    a.compose(PureDpEvent(0.1), 0)  # count 0: nothing happens
    assert isinstance(a.event, de.ComposedDpEvent) and len(a.event.events) == 2
    assert a.rho is None
    assert a.epsilon(DELTA) == epsilon(a.event, DELTA)
    assert a.describe() == describe_backend("rdp")


def test_accountant_pld_and_replace_one():
    """Backend and relation are carried through; unsupported events fail at compose time."""
    a = Accountant(REPLACE, "pld", pld_discretization=1e-3)
    a.compose(de.GaussianDpEvent(2.0), 10).compose(ApproxDpEvent(0.1, 1e-7), 3)
    assert a.epsilon(DELTA) == epsilon(
        a.event, DELTA, relation=REPLACE, backend="pld", pld_discretization=1e-3
    )
    with pytest.raises(AccountingError, match="ZCDpEvent"):
        a.compose(de.ZCDpEvent(0.5))
    with pytest.raises(AccountingError):
        a.compose(de.GaussianDpEvent(1.0), -1)
    assert Accountant().event == de.NoOpDpEvent()
    assert Accountant().epsilon(DELTA) == 0.0


def test_describe_backend():
    """The report line names the backend, the dp-accounting version and the grid."""
    text = describe_backend("rdp")
    assert text.startswith("RDP (dp-accounting ")
    assert f"{len(DENSE_RDP_ORDERS)} orders 1.01–1024" in text
    assert describe_backend("rdp", DEFAULT_ORDERS).endswith(
        f"{len(DEFAULT_ORDERS)} orders 1.1–1024)"
    )
    assert "discretisation 0.0001" in describe_backend("pld")
    with pytest.raises(AccountingError):
        describe_backend("gdp")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- prior events


def _analytic_gaussian_sigma(eps: float, delta: float) -> float:
    """Balle & Wang (2018) exact calibration of the Gaussian mechanism (sensitivity 1): the
    σ with Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ) = δ."""

    def gap(sigma: float) -> float:
        return (
            stats.norm.cdf(0.5 / sigma - eps * sigma)
            - math.exp(eps) * stats.norm.cdf(-0.5 / sigma - eps * sigma)
            - delta
        )

    return optimize.brentq(gap, 1e-3, 1e3, xtol=1e-12)


@pytest.mark.parametrize("backend", ["pld", "rdp"])
def test_calibration_with_a_gaussian_prior_matches_closed_form(backend):
    # Two Gaussian releases compose exactly into one of 1/σ² = 1/z1² + 1/z2² (PLD and RDP
    # alike), so the steps' z after a Gaussian(z1) prior is (1/z*² − 1/z1²)^(-1/2), z* the
    # single-release calibration. Tolerance: 2e-3 relative (calibration tolerance 1e-4 plus
    # PLD discretisation).
    eps, delta, z1 = 2.0, 1e-5, 4.0
    z_star = calibrate_noise_multiplier(
        eps, delta, 1, sampling_probability=1.0, backend=backend, tolerance=1e-4
    )
    z_joint = calibrate_noise_multiplier(
        eps,
        delta,
        1,
        sampling_probability=1.0,
        backend=backend,
        tolerance=1e-4,
        prior=de.GaussianDpEvent(z1),
    )
    expected = (1.0 / z_star**2 - 1.0 / z1**2) ** -0.5
    assert z_joint == pytest.approx(expected, rel=2e-3)
    if backend == "pld":  # the single release itself against Balle–Wang's exact σ
        assert z_star == pytest.approx(_analytic_gaussian_sigma(eps, delta), rel=2e-3)


def test_pld_calibration_of_many_full_batch_steps_fits_in_memory():
    # T Gaussian releases of noise z compose exactly into one of noise z/√T, so at q = 1 the
    # calibrated z is √T times Balle–Wang's σ. A PLD search from z = 1 needs a loss grid of
    # ε(z = 1, T = 10⁴) in the thousands (a MemoryError in tens of GB); it starts from RDP's
    # z instead and evaluates PLDs near the target only.
    eps, delta, steps = 10.0, 1e-5, 10_000
    z = calibrate_noise_multiplier(eps, delta, steps, sampling_probability=1.0, backend="pld")
    assert z == pytest.approx(math.sqrt(steps) * _analytic_gaussian_sigma(eps, delta), rel=2e-3)
    full = functools.partial(sampled_gaussian_event, sampling_probability=1.0)
    assert epsilon(full(z, steps), delta, backend="pld") <= eps
    assert epsilon(full(z / (1 + 2e-4), steps), delta, backend="pld") > eps


def test_calibration_with_a_prior_meets_the_total_and_is_minimal():
    prior = de.SelfComposedDpEvent(ApproxDpEvent(epsilon=0.2, delta=1e-6), 10)
    eps, delta, steps, q, tol, disc = 6.0, 1e-4, 20, 0.2, 1e-3, 1e-3
    kw = {"sampling_probability": q, "backend": "pld", "pld_discretization": disc}
    z = calibrate_noise_multiplier(eps, delta, steps, tolerance=tol, prior=prior, **kw)

    def total(zz: float) -> float:
        ev = de.ComposedDpEvent([prior, sampled_gaussian_event(zz, steps, sampling_probability=q)])
        return acc.epsilon(ev, delta, backend="pld", pld_discretization=disc)

    assert total(z) <= eps < total(z / (1 + tol))
    alone = calibrate_noise_multiplier(eps, delta, steps, tolerance=tol, **kw)
    assert z > alone  # the prior costs something


def test_max_steps_with_a_prior():
    prior = de.GaussianDpEvent(3.0)
    z, eps, delta, q, disc = 2.0, 3.0, 1e-5, 0.2, 1e-3
    kw = {"sampling_probability": q, "backend": "pld", "pld_discretization": disc}
    t = max_steps(z, eps, delta, prior=prior, **kw)
    alone = max_steps(z, eps, delta, **kw)

    def total(n: int) -> float:
        ev = de.ComposedDpEvent([prior, sampled_gaussian_event(z, n, sampling_probability=q)])
        return acc.epsilon(ev, delta, backend="pld", pld_discretization=disc)

    assert 0 < t < alone
    assert total(t) <= eps < total(t + 1)


def test_a_prior_that_spends_the_target_is_refused():
    with pytest.raises(AccountingError, match="prior event alone"):
        calibrate_noise_multiplier(
            1.0, 1e-5, 10, sampling_probability=0.1, prior=PureDpEvent(epsilon=1.5)
        )
    assert max_steps(1.0, 1.0, 1e-5, sampling_probability=0.1, prior=PureDpEvent(1.5)) == 0
