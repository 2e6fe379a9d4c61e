"""APVI and DP-APVI (Qiao & Wang, Algorithm 1).

Privacy tests state the property they check: the replace-one sensitivity of every released
family (on constructed neighbouring datasets), the noise scale of every release (empirical std
vs formula), the events and the accountant's ρ / ε, the error bound E. Utility tests: P̃ is a
distribution, the noise-free limit equals APVI exactly, suboptimality decreases with n.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import NeighboringRelation, dp_event
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st

from privrl.data.dataset import DatasetError, TrajectoryDataset
from privrl.envs.tabular import Episodes, TabularMDP, behaviour_policy_full_support
from privrl.offline.apvi import (
    C1,
    C2,
    APVIConfig,
    Counts,
    FiniteHorizonPolicy,
    NoisePlan,
    PrivacyConfig,
    PrivateModel,
    apvi,
    dp_apvi,
    dp_apvi_from_counts,
    empirical_counts,
    noise_plan,
    pessimistic_value_iteration,
    private_counts,
)
from privrl.privacy.accounting import DENSE_RDP_ORDERS, AccountingError, zcdp_rho, zcdp_to_dp
from privrl.privacy.discrete import discrete_gaussian_pmf, discrete_laplace_pmf
from privrl.privacy.events import PureDpEvent
from privrl.privacy.report import PrivacyReport
from tests.noise import noise_rng

H, S, A = 5, 6, 3


@pytest.fixture(scope="module")
def mdp() -> TabularMDP:
    return TabularMDP.random(S, A, H, seed=11)


@pytest.fixture(scope="module")
def episodes(mdp: TabularMDP) -> Episodes:
    mu = behaviour_policy_full_support(12, H, S, A, 0.1)
    return mdp.sample_arrays(mu, 3000, rng=13)


def random_episodes(rng: np.random.Generator, n: int, H: int, S: int, A: int) -> Episodes:
    return Episodes(
        states=rng.integers(0, S, (n, H + 1)),
        actions=rng.integers(0, A, (n, H)),
        rewards=rng.uniform(-0.5, 1.5, (n, H)),  # outside [0, 1]: clipping must bound them
        behaviour_probs=None,
    )


def family_arrays(c: Counts) -> dict[str, np.ndarray]:
    assert c.r_sum is not None
    return {"n_sa": c.n_sa, "n_sas": c.n_sas, "r_sum": c.r_sum}


# ---------------------------------------------------------------------------------------------
# sensitivity (replace-one)
# ---------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 30), h=st.integers(1, 6))
def test_replace_one_changes_at_most_2H_entries_per_family(seed: int, n: int, h: int) -> None:
    """Property: replacing one trajectory changes each released family in ≤ 2H entries, each by
    ≤ 1 — so Δ₁ ≤ 2H and Δ₂² ≤ 2H, the sensitivities the releases claim."""
    rng = noise_rng(seed)
    S_, A_ = 4, 3
    ep = random_episodes(rng, n, h, S_, A_)
    other = random_episodes(rng, 1, h, S_, A_)
    i = int(rng.integers(n))
    neighbour = Episodes(
        states=np.concatenate([ep.states[:i], other.states, ep.states[i + 1 :]]),
        actions=np.concatenate([ep.actions[:i], other.actions, ep.actions[i + 1 :]]),
        rewards=np.concatenate([ep.rewards[:i], other.rewards, ep.rewards[i + 1 :]]),
        behaviour_probs=None,
    )
    kw = {"horizon": h, "n_states": S_, "n_actions": A_, "reward_sums": True}
    a = family_arrays(empirical_counts(ep, **kw))
    b = family_arrays(empirical_counts(neighbour, **kw))
    for fam in a:
        diff = (a[fam] - b[fam]).ravel()
        assert np.count_nonzero(diff) <= 2 * h, fam
        assert np.abs(diff).max() <= 1.0 + 1e-12, fam
        assert np.abs(diff).sum() <= 2 * h + 1e-9, fam
        assert diff @ diff <= 2 * h + 1e-9, fam


def test_sensitivity_bound_is_attained() -> None:
    """The bound is tight: two trajectories that differ at every step change 2H entries by 1,
    so a smaller claimed sensitivity would be wrong."""
    h = 4
    ep = Episodes(np.zeros((1, h + 1), int), np.zeros((1, h), int), np.ones((1, h)), None)
    other = Episodes(np.ones((1, h + 1), int), np.ones((1, h), int), np.zeros((1, h)), None)
    kw = {"horizon": h, "n_states": 2, "n_actions": 2, "reward_sums": True}
    a, b = family_arrays(empirical_counts(ep, **kw)), family_arrays(empirical_counts(other, **kw))
    for fam in ("n_sa", "n_sas"):
        d = (a[fam] - b[fam]).ravel()
        assert d @ d == 2 * h and np.abs(d).sum() == 2 * h
    d = (a["r_sum"] - b["r_sum"]).ravel()
    assert np.abs(d).sum() == h  # rewards 1 → 0: each of the H changed (h,s,a) entries


def test_counts_match_a_direct_count() -> None:
    rng = noise_rng(3)
    ep = random_episodes(rng, 40, 3, 4, 2)
    c = empirical_counts(ep, horizon=3, n_states=4, n_actions=2, reward_sums=True)
    n_sa = np.zeros((3, 4, 2))
    n_sas = np.zeros((3, 4, 2, 4))
    r = np.zeros((3, 4, 2))
    for k in range(40):
        for h in range(3):
            s, a, s2 = ep.states[k, h], ep.actions[k, h], ep.states[k, h + 1]
            n_sa[h, s, a] += 1
            n_sas[h, s, a, s2] += 1
            r[h, s, a] += min(1.0, max(0.0, ep.rewards[k, h]))
    assert np.array_equal(c.n_sa, n_sa) and np.array_equal(c.n_sas, n_sas)
    np.testing.assert_allclose(c.r_sum, r)
    assert c.n_episodes == 40


# ---------------------------------------------------------------------------------------------
# noise scale, events, accounting
# ---------------------------------------------------------------------------------------------


def big_counts(H_: int, S_: int, A_: int) -> Counts:
    """Counts far from 0, so the clipping at 0 never acts and n' − n is the raw noise (the
    counts are int64, as `empirical_counts` gives them; the reward sums real)."""
    return Counts(
        n_sa=np.full((H_, S_, A_), 10**6, dtype=np.int64),
        n_sas=np.full((H_, S_, A_, S_), 10**6, dtype=np.int64),
        r_sum=np.full((H_, S_, A_), 1e6),
        n_episodes=1,
    )


def discrete_gaussian_variance(sigma2: float) -> float:
    """Var of N_Z(0, σ²), summed from its pmf (slightly below σ² for small σ)."""
    k = np.arange(-math.ceil(40 * math.sqrt(sigma2)) - 10, math.ceil(40 * math.sqrt(sigma2)) + 11)
    return float(np.sum(k.astype(float) ** 2 * discrete_gaussian_pmf(k, sigma2)))


def discrete_laplace_variance(scale: float) -> float:
    """Var of DLap(b), P(x) ∝ e^{-|x|/b}: 2q/(1 − q)², q = e^{-1/b} (below 2b²)."""
    q = math.exp(-1.0 / scale)
    return 2.0 * q / (1.0 - q) ** 2


@pytest.mark.parametrize(
    ("privacy", "count_var", "reward_var"),
    [
        # σ² = 2H/ρ on the counts (eq. 2), N_Z(0, σ²)
        (PrivacyConfig.gaussian(0.5), discrete_gaussian_variance(2 * 4 / 0.5), None),
        (
            PrivacyConfig.gaussian(2.0, privatize_rewards=True),
            discrete_gaussian_variance(3 * 4 / 2.0),
            3 * 4 / 2.0,
        ),
        # Lap(4H/ε) on the counts: DLap(4H/ε)
        (PrivacyConfig.laplace(3.0), discrete_laplace_variance(4 * 4 / 3.0), None),
        (
            PrivacyConfig.laplace(3.0, privatize_rewards=True),
            discrete_laplace_variance(6 * 4 / 3.0),
            2 * (6 * 4 / 3.0) ** 2,
        ),
    ],
)
def test_noise_scale_of_every_release(
    privacy: PrivacyConfig, count_var: float, reward_var: float | None
) -> None:
    """Property: n' − n of every released family has the variance of its noise law within 5%:
    the counts the discrete Gaussian's (Σ k² pmf) or the discrete Laplace's (2q/(1 − q)²),
    m = number of families sharing the budget; the reward sums the continuous Gaussian σ² or
    Laplace 2b². ≥ 40,000 draws per family (standard error of the variance < 1.2%). The
    released counts are int64; the reward sums float64."""
    H_, S_, A_ = 4, 20, 50
    c = big_counts(H_, S_, A_)
    plan = noise_plan(H_, S_, A_, privacy, 0.1)
    draws: dict[str, list[np.ndarray]] = {fam: [] for fam in plan.families}
    for seed in range(10):
        noisy, releases = private_counts(c, plan, noise_rng(seed))
        for fam in plan.families:
            arr = getattr(noisy, fam)
            assert arr.dtype == (np.float64 if fam == "r_sum" else np.int64), fam
            draws[fam].append((arr - getattr(c, fam)).ravel())
    assert [r.name.split()[0] for r in releases] == (
        ["visit", "transition", "reward"] if privacy.privatize_rewards else ["visit", "transition"]
    )
    for fam, noise in draws.items():
        expected = reward_var if fam == "r_sum" else count_var
        assert float(np.var(np.concatenate(noise))) == pytest.approx(expected, rel=0.05), fam


def test_released_counts_are_integers_with_the_discrete_mechanisms() -> None:
    """Structural: the counts go through the discrete mechanisms (integer outputs, clipped at
    0), the reward sums through the continuous ones; non-integral counts are refused."""
    H_, S_, A_ = 3, 4, 2
    c = Counts(
        np.zeros((H_, S_, A_), np.int64),
        np.zeros((H_, S_, A_, S_), np.int64),
        np.zeros((H_, S_, A_)),
        1,
    )
    for privacy, kinds in (
        (PrivacyConfig.gaussian(0.1, privatize_rewards=True), ("discrete_gaussian", "gaussian")),
        (PrivacyConfig.laplace(0.5, privatize_rewards=True), ("discrete_laplace", "laplace")),
    ):
        plan = noise_plan(H_, S_, A_, privacy, 0.1)
        noisy, releases = private_counts(c, plan, noise_rng(1))
        assert [r.mechanism for r in releases] == [kinds[0], kinds[0], kinds[1]]
        for arr in (noisy.n_sa, noisy.n_sas):
            assert arr.dtype == np.int64 and arr.min() == 0 and arr.max() > 0
        assert noisy.r_sum is not None and noisy.r_sum.dtype == np.float64
        assert noisy.r_sum.min() == 0.0 and np.any(noisy.r_sum != np.round(noisy.r_sum))
        with pytest.raises(ValueError, match="integers"):
            private_counts(c._replace(n_sas=c.n_sas + 0.5), plan, noise_rng(1))


def test_discrete_laplace_needs_an_integer_l1_sensitivity() -> None:
    """Δ₁ = 2H is an integer in every mode (per step, pooled, with reward sums); a plan with a
    fractional Δ₁ for the counts is refused rather than rounded."""
    for stationary in (False, True):
        for rewards in (False, True):
            privacy = PrivacyConfig.laplace(1.0, privatize_rewards=rewards)
            plan = noise_plan(7, 3, 2, privacy, 0.1, stationary=stationary)
            assert plan.sensitivity == 14.0
            assert all(r.sensitivity == 14.0 for r in plan.releases_planned(7, 3, 2))
    bad = NoisePlan("laplace", ("n_sa", "n_sas"), 2.0, 2.5, 1.0, 1.0, 2.0, 1.0)
    c = Counts(np.zeros((1, 2, 2), np.int64), np.zeros((1, 2, 2, 2), np.int64), None, 1)
    with pytest.raises(ValueError, match="integer L1 sensitivity"):
        private_counts(c, bad, noise_rng(0))


def test_gaussian_events_and_report() -> None:
    """Property: two discrete Gaussian releases with Δ₂ = √(2H) and σ = √(2H/ρ) (ρ/2-zCDP
    each, ZCDpEvent) compose to exactly ρ-zCDP; the accountant's ε at δ is at most the
    Bun–Steinke closed form, which the notes state."""
    rho, delta = 0.7, 1e-6
    plan = noise_plan(H, S, A, PrivacyConfig.gaussian(rho, report_delta=delta), 0.1)
    _, releases = private_counts(
        Counts(np.zeros((H, S, A), int), np.zeros((H, S, A, S), int), None, 0), plan, noise_rng(0)
    )
    for r in releases:
        assert r.mechanism == "discrete_gaussian" and r.norm == "l2"
        assert r.sensitivity == pytest.approx(math.sqrt(2 * H))
        assert r.noise["sigma"] == pytest.approx(math.sqrt(2 * H / rho))
        assert r.event == dp_event.ZCDpEvent(rho=pytest.approx(rho / 2, rel=1e-12))
        assert zcdp_rho(r.event) == pytest.approx(rho / 2, rel=1e-12)
    c = Counts(np.ones((H, S, A), int), np.ones((H, S, A, S), int), None, 1)
    res = dp_apvi_from_counts(
        c,
        privacy=PrivacyConfig.gaussian(rho, report_delta=delta),
        reward=np.zeros((H, S, A)),
        rng=noise_rng(0),
    )
    rep = res.report
    assert rep.unit.value == "trajectory" and rep.relation.value == "replace_one"
    assert rep.rho == pytest.approx(rho)
    assert rep.delta == delta
    closed = zcdp_to_dp(rho, delta)
    assert 0 < rep.epsilon <= closed + 1e-9
    assert any(f"{closed:.6g}" in note for note in rep.notes)
    assert [r.name for r in rep.releases] == [
        "visit counts n_h(s,a)",
        "transition counts n_h(s,a,s')",
    ]
    assert [r.size for r in rep.releases] == [H * S * A, H * S * A * S]


def test_laplace_is_pure_dp_with_the_right_scale() -> None:
    """Property: DLap(4H/ε) on both families (integer Δ₁ = 2H each, ε/2 each) is ε-DP:
    PureDpEvent(ε/2) twice, and the report states ε at δ = 0 exactly."""
    eps = 1.3
    c = Counts(np.ones((H, S, A), int), np.ones((H, S, A, S), int), None, 1)
    res = dp_apvi_from_counts(
        c, privacy=PrivacyConfig.laplace(eps), reward=np.zeros((H, S, A)), rng=noise_rng(0)
    )
    for r in res.report.releases:
        assert r.mechanism == "discrete_laplace" and r.norm == "l1"
        assert r.sensitivity == 2 * H
        assert r.noise["scale"] == pytest.approx(4 * H / eps)
        assert r.event == PureDpEvent(epsilon=pytest.approx(eps / 2))
    assert res.report.delta == 0.0
    assert res.report.epsilon == pytest.approx(eps, rel=1e-12)
    assert res.report.rho is None


def test_privatized_rewards_split_the_budget_in_three() -> None:
    rho = 1.0
    c = Counts(np.ones((H, S, A), int), np.ones((H, S, A, S), int), np.ones((H, S, A)), 1)
    res = dp_apvi_from_counts(
        c, privacy=PrivacyConfig.gaussian(rho, privatize_rewards=True), rng=noise_rng(0)
    )
    assert len(res.report.releases) == 3
    assert res.report.rho == pytest.approx(rho)
    for r in res.report.releases:
        assert zcdp_rho(r.event) == pytest.approx(rho / 3)


def test_planned_releases_have_the_real_events() -> None:
    """The ledger is checked with releases planned before the data are read: their events must
    be exactly those of the real releases."""
    for privacy in (
        PrivacyConfig.gaussian(0.3),
        PrivacyConfig.laplace(2.0, privatize_rewards=True),
    ):
        plan = noise_plan(H, S, A, privacy, 0.1)
        c = Counts(np.ones((H, S, A), int), np.ones((H, S, A, S), int), np.ones((H, S, A)), 1)
        _, real = private_counts(c, plan, noise_rng(0))
        planned = noise_plan(H, 1, 1, privacy, 0.1).releases_planned(H)
        assert [r.event for r in planned] == [r.event for r in real]
        assert [r.sensitivity for r in planned] == [r.sensitivity for r in real]
        assert [r.mechanism for r in planned] == [r.mechanism for r in real]
        assert [r.noise for r in planned] == [r.noise for r in real]


def _apvi_report(privacy: PrivacyConfig, stationary: bool = False):
    """DP-APVI's report from its real releases (the mechanisms' own events)."""
    T = 1 if stationary else H
    c = Counts(
        np.ones((T, S, A), int),
        np.ones((T, S, A, S), int),
        np.ones((T, S, A)),
        1,
        horizon=H if stationary else None,
    )
    reward = None if privacy.privatize_rewards else np.zeros((H, S, A))
    return dp_apvi_from_counts(c, privacy=privacy, reward=reward, rng=noise_rng(0)).report


@pytest.mark.parametrize("stationary", [False, True])
@pytest.mark.parametrize("rewards", [False, True])
@pytest.mark.parametrize("rho", [0.01, 0.3, 1.0, 5.0, 25.0])
def test_discrete_gaussian_report_keeps_the_continuous_rho_and_epsilon(
    rho: float, rewards: bool, stationary: bool
) -> None:
    """Accounting end to end: with the counts on the discrete Gaussian (ZCDpEvent), the
    report's ρ is the budget (closed form: m families of ρ/m) and its ε is what dp-accounting's
    RDP accountant gives, computed here directly, for the continuous Gaussian of the same σ
    (GaussianDpEvent(σ/Δ₂) per family: the events before the discrete samplers), at the same
    orders — equal to float rounding — and below the Bun–Steinke closed form."""
    delta = 1e-6
    privacy = PrivacyConfig.gaussian(rho, privatize_rewards=rewards, report_delta=delta)
    report = _apvi_report(privacy, stationary)
    plan = noise_plan(H, S, A, privacy, 0.1, stationary=stationary)
    m = 3 if rewards else 2
    assert [r.mechanism for r in report.releases] == ["discrete_gaussian"] * 2 + (
        ["gaussian"] if rewards else []
    )
    assert report.rho == pytest.approx(rho, rel=1e-12)
    assert report.delta == delta and report.backend == "rdp"
    old = rdp_privacy_accountant.RdpAccountant(
        list(DENSE_RDP_ORDERS), NeighboringRelation.REPLACE_ONE
    )
    old.compose(dp_event.GaussianDpEvent(plan.scale / plan.sensitivity), m)
    assert report.epsilon == pytest.approx(old.get_epsilon(delta), rel=1e-12)
    assert report.epsilon <= zcdp_to_dp(rho, delta)


@pytest.mark.parametrize("rewards", [False, True])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0, 8.0])
def test_discrete_laplace_report_keeps_the_continuous_epsilon(
    epsilon: float, rewards: bool
) -> None:
    """Accounting end to end: with the counts on the discrete Laplace, the report is ε-DP at
    δ = 0 for exactly the budget (m PureDpEvent(ε/m), as the continuous vector Laplace)."""
    report = _apvi_report(PrivacyConfig.laplace(epsilon, privatize_rewards=rewards))
    m = 3 if rewards else 2
    assert [r.event for r in report.releases] == [
        PureDpEvent(epsilon=pytest.approx(epsilon / m))
    ] * m
    assert report.delta == 0.0 and report.rho is None
    assert report.epsilon == pytest.approx(epsilon, rel=1e-12)


def test_a_single_count_is_accounted_as_pure_dp() -> None:
    """H = S = A = 1: each family is one count; its discrete Laplace release is still
    PureDpEvent(ε/2) (RDP has no DiscreteLaplaceDpEvent), as planned, and the report is ε-DP."""
    c = Counts(np.ones((1, 1, 1), int), np.ones((1, 1, 1, 1), int), None, 1)
    privacy = PrivacyConfig.laplace(1.0)
    res = dp_apvi_from_counts(c, privacy=privacy, reward=np.zeros((1, 1, 1)), rng=noise_rng(0))
    assert [r.event for r in res.report.releases] == [PureDpEvent(epsilon=0.5)] * 2
    assert [r.event for r in noise_plan(1, 1, 1, privacy, 0.1).releases_planned(1, 1, 1)] == [
        r.event for r in res.report.releases
    ]
    assert res.report.epsilon == pytest.approx(1.0, rel=1e-12)


def test_the_pld_backend_cannot_account_the_discrete_gaussian() -> None:
    """Backend choice: dp-accounting's PLD accountant has no ZCDpEvent, so DP-APVI's Gaussian
    report is accounted by RDP (its only backend); asking PLD fails loudly rather than guess."""
    report = _apvi_report(PrivacyConfig.gaussian(1.0))
    with pytest.raises(AccountingError, match="ZCDpEvent"):
        PrivacyReport.build(
            report.unit, report.relation, report.releases, 1e-6, backend="pld", system="dp-apvi"
        )


def test_error_bounds_match_the_spec() -> None:
    """E_ρ = 4√(H log(4HS²A/δ)/ρ) (the discrete Gaussian is σ²-subgaussian, so the continuous
    bound holds); E_ε = (8H/ε)(log(2HS²A/δ) + log(2/(1 + e^{-1/b}))), the spec's bound plus the
    discrete Laplace's heavier tail P(|X| > t) < 2e^{-t/b}/(1 + e^{-1/b}) (less than one
    count more); ι = log(HSA/δ)."""
    d = 0.05
    g = noise_plan(H, S, A, PrivacyConfig.gaussian(2.0), d)
    assert g.E == pytest.approx(4 * math.sqrt(H * math.log(4 * H * S * S * A / d) / 2.0))
    lap = noise_plan(H, S, A, PrivacyConfig.laplace(3.0), d)
    b = 4 * H / 3.0
    spec = 8 * H / 3.0 * math.log(2 * H * S * S * A / d)
    assert lap.E == pytest.approx(spec + 2 * b * math.log(2 / (1 + math.exp(-1 / b))))
    assert spec < lap.E < spec + 1.0
    assert g.iota == pytest.approx(math.log(H * S * A / d))
    assert noise_plan(H, S, A, None, d).E == 0.0


@pytest.mark.parametrize("epsilon", [0.05, 1.0, 3.0, 40.0])
def test_discrete_laplace_tail_bound_is_valid_and_needed(epsilon: float) -> None:
    """Property (utility event): for X ~ DLap(b), P(|X| > tail) summed from the pmf is at most
    δ/N, N = m·HS²A counters, so the union bound behind E holds. The continuous Laplace's
    b log(N/δ) alone is not enough for the larger b (b ≥ 1 here); for b < 1 the integer
    support can make it enough by luck."""
    d = 0.1
    plan = noise_plan(H, S, A, PrivacyConfig.laplace(epsilon), d)
    n_counters = 2 * H * S * S * A
    k = np.arange(math.floor(plan.tail) + 1, math.ceil(plan.tail + 60 * plan.scale) + 2)
    beyond = 2.0 * float(np.sum(discrete_laplace_pmf(k, plan.scale)))  # P(|X| > tail)
    assert beyond <= d / n_counters * (1 + 1e-9)
    t_cont = plan.scale * math.log(n_counters / d)
    k_cont = np.arange(math.floor(t_cont) + 1, math.ceil(t_cont + 60 * plan.scale) + 2)
    if plan.scale >= 1.0:
        assert 2.0 * float(np.sum(discrete_laplace_pmf(k_cont, plan.scale))) > d / n_counters


@pytest.mark.parametrize("privacy", [PrivacyConfig.gaussian(1.0), PrivacyConfig.laplace(1.0)])
def test_error_bound_holds_empirically(privacy: PrivacyConfig) -> None:
    """Property (utility event): a run has some noise draw beyond tail = E/2 with probability
    ≤ δ = 0.1 (union bound; loose). Over 200 runs at most 20 may fail (expected from the
    pmfs: 2.2 for the discrete Gaussian, 11 for the discrete Laplace); a tail too small by
    enough to double δ (failure rate 0.2) would pass with probability ≈ 1e-4."""
    c = big_counts(3, 4, 2)
    plan = noise_plan(3, 4, 2, privacy, 0.1)
    rng = noise_rng(5)
    failures = 0
    for _ in range(200):
        noisy, _ = private_counts(c, plan, rng)
        worst = max(np.abs(noisy.n_sas - 10**6).max(), np.abs(noisy.n_sa - 10**6).max())
        failures += int(worst > plan.tail)
    assert failures <= 20


def test_spec_zcdp_conversion_table() -> None:
    """The spec's Bun–Steinke checks: ρ=25 → 40.2 (δ=0.1), 51.3 (δ=1e-3); ρ=1 → 4.0 / 6.26."""
    assert zcdp_to_dp(25, 0.1) == pytest.approx(40.2, abs=0.05)
    assert zcdp_to_dp(25, 1e-3) == pytest.approx(51.3, abs=0.05)
    assert zcdp_to_dp(5, 0.1) == pytest.approx(11.8, abs=0.05)
    assert zcdp_to_dp(1, 1e-3) == pytest.approx(6.26, abs=0.01)
    assert zcdp_to_dp(0.1, 1e-3) == pytest.approx(1.8, abs=0.05)


# ---------------------------------------------------------------------------------------------
# the model and the planner
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("privacy", [None, PrivacyConfig.gaussian(0.5), PrivacyConfig.laplace(2.0)])
def test_private_transition_rows_are_distributions(
    privacy: PrivacyConfig | None, episodes: Episodes, mdp: TabularMDP
) -> None:
    """Property: every row of P̃ is a probability distribution (≥ 0, sums to 1), uniform where
    ñ ≤ E."""
    res = dp_apvi(
        episodes,
        horizon=H,
        n_states=S,
        n_actions=A,
        privacy=privacy,
        reward=mdp.R,
        rng=noise_rng(1),
    )
    P = res.model.P
    assert np.all(P >= 0)
    np.testing.assert_allclose(P.sum(-1), 1.0, atol=1e-12)
    unknown = ~res.model.known
    assert np.all(P[unknown] == 1.0 / S)
    assert np.all(res.model.n_sa[res.model.known] > res.plan.E)


def test_noise_off_equals_apvi_exactly(episodes: Episodes, mdp: TabularMDP) -> None:
    """Property: DP-APVI's code path with ρ = ∞ (no noise, E = 0) is APVI, bit for bit; as ρ
    grows the Q-values approach APVI's (the gap ∝ E ∝ 1/√ρ)."""
    kw = {"horizon": H, "n_states": S, "n_actions": A, "reward": mdp.R}
    base = apvi(episodes, **kw)
    off = dp_apvi(episodes, privacy=PrivacyConfig.gaussian(math.inf), rng=noise_rng(7), **kw)
    assert np.array_equal(off.values.Q, base.values.Q)
    assert np.array_equal(off.policy.actions, base.policy.actions)
    assert not off.report.private and off.report.epsilon == math.inf
    gaps = [
        np.abs(
            dp_apvi(episodes, privacy=PrivacyConfig.gaussian(r), rng=noise_rng(7), **kw).values.Q
            - base.values.Q
        ).max()
        for r in (1e8, 1e12, 1e16)
    ]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-3


def test_apvi_report_is_non_private(episodes: Episodes) -> None:
    res = apvi(episodes, horizon=H, n_states=S, n_actions=A)  # empirical rewards
    assert not res.report.private and res.report.epsilon == math.inf
    assert res.report.system == "apvi"
    assert all(r.extra.get("non_private") for r in res.report.releases)
    assert len(res.report.releases) == 3  # counts and the reward sums it learned from


def test_bernstein_and_hoeffding_bonus_formulas() -> None:
    """Γ on a hand-made two-step model equals the formulas of Algorithm 1 line 5 (and the
    Hoeffding variant), times bonus_scale, with C·H where ñ ≤ E."""
    H_, S_, A_ = 2, 2, 1
    E, iota, scale = 3.0, 2.0, 0.5
    n = np.array([[[10.0], [2.0]], [[8.0], [20.0]]])  # [H, S, A]; (h=0, s=1) is unknown
    P = np.zeros((H_, S_, A_, S_))
    P[:, :, :, 0] = 0.25
    P[:, :, :, 1] = 0.75
    model = PrivateModel(n_sa=n, P=P, t=np.zeros_like(n), reward=None, known=n > E)
    plan = NoisePlan("gaussian", ("n_sa", "n_sas"), 1.0, 1.0, 1.0, E / 2, E, iota)
    r = np.full((H_, S_, A_), 0.6)
    r[1, 1, 0] = 0.2
    for bonus in ("bernstein", "hoeffding"):
        cfg = APVIConfig(bonus=bonus, bonus_scale=scale, unknown_penalty=3.0)
        vi = pessimistic_value_iteration(model, r, plan, cfg)
        low = C2 * S_ * H_ * E * iota / n
        # last step: V_{H} = 0 ⇒ Var = 0
        stat_last = 0.0 if bonus == "bernstein" else C1 * H_ * np.sqrt(iota / (n[1] - E))
        np.testing.assert_allclose(vi.bonus[1], scale * (stat_last + low[1]))
        v1 = vi.V[1]
        var = 0.25 * v1[0] ** 2 + 0.75 * v1[1] ** 2 - (0.25 * v1[0] + 0.75 * v1[1]) ** 2
        stat = (
            C1 * np.sqrt(var * iota / (n[0, 0, 0] - E))
            if bonus == "bernstein"
            else C1 * H_ * np.sqrt(iota / (n[0, 0, 0] - E))
        )
        assert vi.bonus[0, 0, 0] == pytest.approx(scale * (stat + low[0, 0, 0]))
        assert vi.bonus[0, 1, 0] == 3.0 * H_  # unknown pair: C·H
        assert vi.Q[0, 1, 0] == 0.0
        assert np.all(vi.Q[1] <= 1.0) and np.all(vi.Q[0] <= 2.0) and np.all(vi.Q >= 0)


def test_suboptimality_decreases_with_n(mdp: TabularMDP) -> None:
    """Property: on a fixed instance, the mean suboptimality over 4 seeds of APVI and of
    DP-APVI (ρ = 1, bonus_scale = 1e-4) does not increase along n = 300, 3,000, 30,000 and is
    strictly smaller at 30,000 than at 300."""
    mu = behaviour_policy_full_support(21, H, S, A, 0.1)
    ns = (300, 3000, 30_000)
    means: dict[str, list[float]] = {"apvi": [], "dp": []}
    subs: dict[tuple[str, int], list[float]] = {}
    for seed in range(4):
        ep = mdp.sample_arrays(mu, max(ns), rng=100 + seed, record_probs=False)
        for n in ns:
            c = empirical_counts(
                Episodes(ep.states[:n], ep.actions[:n], ep.rewards[:n], None),
                horizon=H,
                n_states=S,
                n_actions=A,
            )
            cfg = APVIConfig(bonus_scale=1e-4)
            for key, privacy in (("apvi", None), ("dp", PrivacyConfig.gaussian(1.0))):
                res = dp_apvi_from_counts(
                    c, privacy=privacy, config=cfg, reward=mdp.R, rng=noise_rng(seed)
                )
                subs.setdefault((key, n), []).append(float(mdp.suboptimality(res.policy.actions)))
    for key in means:
        means[key] = [float(np.mean(subs[(key, n)])) for n in ns]
        m = means[key]
        # non-increasing (APVI may already have found the optimal policy at 3,000) and
        # strictly lower at the largest n
        assert m[0] >= m[1] - 1e-12 and m[1] >= m[2] - 1e-12 and m[0] > m[2], (key, m)
    assert means["dp"][0] > means["apvi"][0]  # privacy costs something at small n
    assert means["dp"][2] < 0.5 * means["dp"][0], means["dp"]  # and DP-APVI does learn


def test_same_seed_same_result(episodes: Episodes, mdp: TabularMDP) -> None:
    kw = {
        "horizon": H,
        "n_states": S,
        "n_actions": A,
        "reward": mdp.R,
        "privacy": PrivacyConfig.gaussian(1.0),
    }
    a, b = dp_apvi(episodes, rng=noise_rng(4), **kw), dp_apvi(episodes, rng=noise_rng(4), **kw)
    c = dp_apvi(episodes, rng=noise_rng(5), **kw)
    assert np.array_equal(a.model.P, b.model.P) and np.array_equal(a.values.Q, b.values.Q)
    assert not np.array_equal(a.model.n_sa, c.model.n_sa)


def test_private_rewards_are_estimated(episodes: Episodes, mdp: TabularMDP) -> None:
    """With noisy reward sums, r̃ is near the true mean reward where the pair is known."""
    res = dp_apvi(
        episodes,
        horizon=H,
        n_states=S,
        n_actions=A,
        privacy=PrivacyConfig.gaussian(100.0, privatize_rewards=True),
        rng=noise_rng(0),
    )
    known = res.model.known
    assert known.mean() > 0.5
    assert res.model.reward is not None
    err = np.abs(res.model.reward - mdp.R)[known]
    assert np.median(err) < 0.1


# ---------------------------------------------------------------------------------------------
# input validation and the saved policy
# ---------------------------------------------------------------------------------------------


def test_private_run_needs_a_reward_source(episodes: Episodes) -> None:
    with pytest.raises(ValueError, match="private"):
        dp_apvi(episodes, horizon=H, n_states=S, n_actions=A, privacy=PrivacyConfig.gaussian(1.0))
    with pytest.raises(ValueError, match="not both"):
        dp_apvi(
            episodes,
            horizon=H,
            n_states=S,
            n_actions=A,
            reward=np.zeros((H, S, A)),
            privacy=PrivacyConfig.gaussian(1.0, privatize_rewards=True),
        )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mechanism": "gaussian", "rho": 0.0},
        {"mechanism": "gaussian", "rho": -1.0},
        {"mechanism": "gaussian", "rho": 1.0, "epsilon": 1.0},
        {"mechanism": "laplace"},
        {"mechanism": "laplace", "epsilon": 0.0},
    ],
)
def test_privacy_config_rejects_bad_budgets(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        PrivacyConfig(**kwargs)


def test_data_outside_the_declared_bounds_are_fitted_not_refused(mdp: TabularMDP) -> None:
    """Property (no data-dependent error): a non-integral state, an out-of-range index, or an
    episode longer than H is not refused — the step is not counted, the episode is truncated
    to H — so a run cannot fail on one dataset and succeed on its neighbour."""
    ds = mdp.sample(behaviour_policy_full_support(0, H, S, A, 0.1), 5, rng=0)
    half = TrajectoryDataset(
        observations=ds.observations.astype(np.float64) + 0.5,
        actions=ds.actions,
        rewards=ds.rewards,
        terminated=ds.terminated,
        truncated=ds.truncated,
        episode_offsets=ds.episode_offsets,
        metadata=ds.metadata.replace(observation_space=None),
    )
    c = empirical_counts(half, horizon=H, n_states=S, n_actions=A)
    assert c.n_sa.sum() == 0 and c.n_sas.sum() == 0 and c.n_episodes == 5
    # A horizon shorter than the episodes truncates them: the counts of the first H - 1 steps.
    short = empirical_counts(ds, horizon=H - 1, n_states=S, n_actions=A)
    full = empirical_counts(ds, horizon=H, n_states=S, n_actions=A)
    assert np.array_equal(short.n_sas, full.n_sas[: H - 1])
    # A horizon longer than the episodes leaves the missing steps empty.
    long = empirical_counts(ds, horizon=H + 2, n_states=S, n_actions=A)
    assert np.array_equal(long.n_sas[:H], full.n_sas) and long.n_sa[H:].sum() == 0
    # Integral floats (e.g. from a CSV import) are accepted and give the same counts.
    as_float = TrajectoryDataset(
        observations=ds.observations.astype(np.float64),
        actions=ds.actions.astype(np.float64),
        rewards=ds.rewards,
        terminated=ds.terminated,
        truncated=ds.truncated,
        episode_offsets=ds.episode_offsets,
        metadata=ds.metadata.replace(observation_space=None, action_space=None),
    )
    kw = {"horizon": H, "n_states": S, "n_actions": A}
    a, b = empirical_counts(as_float, **kw), empirical_counts(ds, **kw)
    assert np.array_equal(a.n_sas, b.n_sas) and np.array_equal(a.n_sa, b.n_sa)


def test_schema_errors_are_refused(mdp: TabularMDP) -> None:
    """Only the schema (shared by neighbours) is refused: vector observations."""
    ds = mdp.sample(behaviour_policy_full_support(0, H, S, A, 0.1), 3, rng=0)
    vec = TrajectoryDataset(
        observations=np.stack([ds.observations, ds.observations], axis=1),
        actions=ds.actions,
        rewards=ds.rewards,
        terminated=ds.terminated,
        truncated=ds.truncated,
        episode_offsets=ds.episode_offsets,
        metadata=ds.metadata.replace(observation_space=None),
    )
    with pytest.raises(DatasetError, match="non-scalar states"):
        dp_apvi(vec, horizon=H, n_states=S, n_actions=A, privacy=None)


def random_episode(rng: np.random.Generator, length: int, S_: int, A_: int) -> tuple:
    """One episode whose indices may fall outside [0, S_) / [0, A_) and whose rewards may fall
    outside [0, 1]."""
    return (
        rng.integers(-1, S_ + 2, length + 1),
        rng.integers(0, A_ + 1, length),
        rng.uniform(-0.5, 1.5, length),
    )


def ragged_dataset(episodes: list[tuple]) -> TrajectoryDataset:
    """A dataset of the given episodes (no metadata spaces, so nothing is validated away)."""
    lengths = [len(a) for _, a, _ in episodes]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_t = int(offsets[-1])
    trunc = np.zeros(n_t, bool)
    trunc[offsets[1:] - 1] = True
    return TrajectoryDataset(
        observations=np.concatenate([o for o, _, _ in episodes]),
        actions=np.concatenate([a for _, a, _ in episodes]),
        rewards=np.concatenate([r for _, _, r in episodes]),
        terminated=np.zeros(n_t, bool),
        truncated=trunc,
        episode_offsets=offsets,
    )


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 12), h=st.integers(1, 5))
def test_replace_one_sensitivity_holds_for_any_episode_lengths_and_indices(
    seed: int, n: int, h: int
) -> None:
    """Property: with the public horizon h, replacing one trajectory — by one of any length,
    with any indices — changes each family in ≤ 2h entries by ≤ 1, and never raises: the bound
    the releases claim is enforced on the data, not assumed of it."""
    rng = noise_rng(seed)
    S_, A_ = 3, 2
    episodes = [random_episode(rng, int(rng.integers(1, 2 * h + 2)), S_, A_) for _ in range(n)]
    neighbour = list(episodes)
    neighbour[int(rng.integers(n))] = random_episode(rng, int(rng.integers(1, 3 * h + 2)), S_, A_)
    kw = {"horizon": h, "n_states": S_, "n_actions": A_, "reward_sums": True}
    a = family_arrays(empirical_counts(ragged_dataset(episodes), **kw))
    b = family_arrays(empirical_counts(ragged_dataset(neighbour), **kw))
    for fam in a:
        diff = (a[fam] - b[fam]).ravel()
        assert np.count_nonzero(diff) <= 2 * h, fam
        assert np.abs(diff).max() <= 1.0 + 1e-12, fam
        assert diff @ diff <= 2 * h + 1e-9, fam


@pytest.mark.parametrize("units", [[0, 1, 2, 3, 4], [0, 0, 1, 1, 1]])
def test_private_run_refuses_declared_units_by_schema(mdp: TabularMDP, units: list[int]) -> None:
    """Structural rule: a dataset with a unit_ids field is refused by a private run whether or
    not ids repeat (the decision cannot differ between neighbours); APVI accepts it."""
    ds = mdp.sample(behaviour_policy_full_support(0, H, S, A, 0.1), 5, rng=0)
    with_units = TrajectoryDataset(
        observations=ds.observations,
        actions=ds.actions,
        rewards=ds.rewards,
        terminated=ds.terminated,
        truncated=ds.truncated,
        episode_offsets=ds.episode_offsets,
        unit_ids=np.asarray(units),
        metadata=ds.metadata,
    )
    kw = {"horizon": H, "n_states": S, "n_actions": A, "reward": mdp.R}
    with pytest.raises(DatasetError, match="unit_ids field"):
        dp_apvi(with_units, privacy=PrivacyConfig.gaussian(1.0), rng=noise_rng(0), **kw)
    assert apvi(with_units, **kw).policy.actions.shape == (H, S)


def test_policy_save_load_roundtrip(tmp_path: Path, episodes: Episodes, mdp: TabularMDP) -> None:
    res = dp_apvi(
        episodes,
        horizon=H,
        n_states=S,
        n_actions=A,
        reward=mdp.R,
        privacy=PrivacyConfig.gaussian(1.0),
        rng=noise_rng(0),
    )
    path = res.policy.save(tmp_path / "policy.npz")
    loaded = FiniteHorizonPolicy.load(path)
    assert np.array_equal(loaded.actions, res.policy.actions)
    assert loaded.n_actions == A and loaded.info["system"] == "dp-apvi"
    assert loaded.act(np.array([0, 1]), h=2).tolist() == res.policy.actions[2, [0, 1]].tolist()
    np.testing.assert_allclose(loaded.action_probs(np.arange(S), h=0).sum(1), 1.0)
    np.savez(tmp_path / "other.npz", kind=np.array("something else"))
    with pytest.raises(ValueError, match="not a finite-horizon"):
        FiniteHorizonPolicy.load(tmp_path / "other.npz")
