"""The Bhatia–Davis (score) interval of privrl.ope.importance (`interval="bhatia-davis"`):
it is Wilson's interval for a plain proportion, it lies inside the Popoviciu interval, it
covers the truth for rare rewards under privacy noise, and it is post-processing only (the
releases are the same as with the default interval)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gymnasium import spaces
from scipy import stats

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.ope import importance as imp
from tests.noise import noise_rng

A = 4


def log(m: int, p_click: np.ndarray, mu: np.ndarray, rng: np.random.Generator):
    """A context-free bandit log: actions from μ, clicks with probability p_click[a]."""
    actions = rng.choice(A, size=m, p=mu)
    rewards = (rng.random(m) < p_click[actions]).astype(np.float64)
    return TrajectoryDataset(
        observations=np.zeros(2 * m, dtype=np.int64),
        actions=actions,
        rewards=rewards,
        terminated=np.zeros(m, bool),
        truncated=np.ones(m, bool),
        episode_offsets=np.arange(m + 1),
        behaviour_probs=mu[actions],
        metadata=DatasetMetadata(
            observation_space=spaces.Discrete(1), action_space=spaces.Discrete(A)
        ),
    )


def uniform():
    return imp.load_target_policy("uniform", spaces.Discrete(A), spaces.Discrete(1))


def test_non_private_ips_on_a_proportion_is_wilsons_interval() -> None:
    """Target = behaviour (ρ = 1), rewards in {0, 1}: the summand's support is [0, 1] and the
    score interval with no noise is Wilson's, centre (p̂ + z²/2m)/(1 + z²/m)."""
    rng = noise_rng(0)
    mu = np.full(A, 1.0 / A)
    data = log(500, np.full(A, 0.03), mu, rng)
    b = imp.Bounds(1.0, (0.0, 1.0), 1, 1.0)
    t = imp.terms(data, uniform(), b)
    est = imp.ips(t, b, interval="bhatia-davis")
    p, m, z = float(t.returns.mean()), t.m, float(stats.norm.ppf(0.975))
    centre = (p + z * z / (2 * m)) / (1 + z * z / m)
    half = z / (1 + z * z / m) * math.sqrt(p * (1 - p) / m + z * z / (4 * m * m))
    assert est.ci_low == pytest.approx(centre - half, rel=1e-9)
    assert est.ci_high == pytest.approx(centre + half, rel=1e-9)


@pytest.mark.parametrize("estimator", ["ips", "snips", "dr"])
def test_inside_popoviciu_and_the_same_releases(estimator: str) -> None:
    """Post-processing only: with the same noise draw the value and the releases are the
    same as with the default interval, and the interval lies inside the Popoviciu one."""
    rng = noise_rng(1)
    mu = np.array([0.7, 0.1, 0.1, 0.1])
    data = log(3000, np.array([0.01, 0.02, 0.005, 0.01]), mu, rng)
    b = imp.Bounds(10.0, (0.0, 1.0), 1, 1.0)
    q = imp.load_reward_model("constant:0.01", b, spaces.Discrete(A), spaces.Discrete(1))
    t = imp.terms(data, uniform(), b, q)
    noise = imp.noise_spec(estimator, "gaussian", 1.0, 1e-5)
    out = {}
    for interval in imp.INTERVALS:
        kw = dict(noise=noise, rng=noise_rng(7), interval=interval)
        if estimator == "dr":
            out[interval] = imp.dr(t, b, q.q_range, **kw)
        else:
            out[interval] = getattr(imp, estimator)(t, b, **kw)
    pop, bd = out["popoviciu"], out["bhatia-davis"]
    assert bd.value == pop.value
    assert [r.to_dict() for r in bd.releases] == [r.to_dict() for r in pop.releases]
    assert pop.ci_low <= bd.ci_low <= bd.ci_high <= pop.ci_high
    assert bd.ci_high - bd.ci_low < 0.5 * (pop.ci_high - pop.ci_low)


@pytest.mark.parametrize("estimator", ["ips", "snips", "dr"])
def test_covers_rare_rewards_under_noise(estimator: str) -> None:
    """Coverage: click rates near 1%, W = 10, m = 4000, ε = 5; over 60 independent logs and
    noise draws the 95% score interval holds the uniform policy's true value (the mean click
    rate) at least 54 times (≥ 90%)."""
    p_click = np.array([0.005, 0.01, 0.015, 0.02])
    mu = np.array([0.55, 0.25, 0.15, 0.05])
    truth = float(p_click.mean())
    b = imp.Bounds(10.0, (0.0, 1.0), 1, 1.0)  # max weight (1/4)/0.05 = 5: nothing clipped
    q = imp.load_reward_model("constant:0.0125", b, spaces.Discrete(A), spaces.Discrete(1))
    noise = imp.noise_spec(estimator, "gaussian", 5.0, 1e-5)
    rng = noise_rng(11)
    covered = 0
    for _ in range(60):
        t = imp.terms(log(4000, p_click, mu, rng), uniform(), b, q)
        kw = dict(noise=noise, rng=rng, interval="bhatia-davis")
        if estimator == "dr":
            est = imp.dr(t, b, q.q_range, **kw)
        else:
            est = getattr(imp, estimator)(t, b, **kw)
        covered += est.ci_low <= truth <= est.ci_high
    assert covered >= 54, covered


def test_an_unknown_interval_is_refused() -> None:
    b = imp.Bounds(1.0, (0.0, 1.0), 1, 1.0)
    t = imp.Terms(np.ones(3), np.zeros(3))
    with pytest.raises(ValueError, match="interval must be one of"):
        imp.ips(t, b, interval="wald")  # type: ignore[arg-type]


# ------------------------------------------------------------------------ interval="auto"


def test_auto_picks_bhatia_davis_when_the_public_bounds_guarantee_a_gain() -> None:
    """Rewards in [0, 1]: the IPS summand lies in [0, W] with its mean in [0, 1], so the
    largest Bhatia–Davis bound is (W − 1)·1 against Popoviciu's W²/4: G = W²/(4(W − 1)) > 1
    iff W > 2. W = 20 → bhatia-davis with G = 100/19 for both SNIPS sums; W = 2 → popoviciu."""
    b20 = imp.Bounds(20.0, (0.0, 1.0), 1, 1.0)
    plan = imp.interval_plan("auto", "ips", b20)
    assert plan.method == "bhatia-davis" and plan.gains == pytest.approx((100 / 19,))
    assert "5.26" in plan.reason and plan.reason.startswith("auto")
    assert imp.interval_plan("auto", "snips", b20).gains == pytest.approx((100 / 19, 100 / 19))
    assert imp.interval_plan("auto", "ips", imp.Bounds(2.0, (0.0, 1.0), 1, 1.0)).method == (
        "popoviciu"
    )
    assert imp.interval_plan("auto", "ips", imp.Bounds(2.5, (0.0, 1.0), 1, 1.0)).method == (
        "bhatia-davis"
    )


def test_auto_keeps_popoviciu_when_a_mean_may_sit_at_the_centre() -> None:
    """A return range symmetric about 0, or DR with q̂ declared over the whole return range
    (its summand's support is then nearly symmetric about the possible means): no gain is
    guaranteed, auto keeps Popoviciu; a constant public q̂ makes DR one-sided again."""
    sym = imp.Bounds(10.0, (-1.0, 1.0), 1, 1.0)
    assert imp.interval_plan("auto", "ips", sym).method == "popoviciu"
    assert imp.interval_plan("auto", "ips", sym).gains == (1.0,)
    b = imp.Bounds(20.0, (0.0, 1.0), 1, 1.0)
    assert imp.interval_plan("auto", "dr", b, (0.0, 1.0)).method == "popoviciu"
    assert imp.interval_plan("auto", "dr", b, (0.005, 0.005)).method == "bhatia-davis"


def test_an_explicit_choice_is_kept_and_auto_is_the_chosen_method() -> None:
    """interval="popoviciu" stays Popoviciu where auto would pick Bhatia–Davis; the auto
    estimate equals the explicit Bhatia–Davis one (same draw) and names its method."""
    b = imp.Bounds(10.0, (0.0, 1.0), 1, 1.0)
    assert imp.interval_plan("popoviciu", "ips", b).method == "popoviciu"
    mu = np.array([0.7, 0.1, 0.1, 0.1])
    t = imp.terms(log(3000, np.full(A, 0.01), mu, noise_rng(2)), uniform(), b)
    noise = imp.noise_spec("snips", "gaussian", 1.0, 1e-5)
    auto = imp.snips(t, b, noise=noise, rng=noise_rng(3), interval="auto")
    bd = imp.snips(t, b, noise=noise, rng=noise_rng(3), interval="bhatia-davis")
    assert (auto.value, auto.ci_low, auto.ci_high) == (bd.value, bd.ci_low, bd.ci_high)
    assert auto.interval_method == "bhatia-davis" and bd.interval_reason.endswith("explicitly")
    with pytest.raises(ValueError, match="interval must be one of auto"):
        imp.interval_plan("wald", "ips", b)  # type: ignore[arg-type]


def _coverage(estimator: str, runs: int, m: int, epsilon: float, seed: int) -> int:
    """How often the auto interval holds the uniform policy's value on rare-click logs
    (rates 0.2%-1.4%, μ skewed, W = 20 above every weight: nothing clipped)."""
    p_click = np.array([0.002, 0.006, 0.010, 0.014])
    mu = np.array([0.55, 0.25, 0.15, 0.05])
    truth = float(p_click.mean())
    b = imp.Bounds(20.0, (0.0, 1.0), 1, 1.0)
    q = imp.load_reward_model("constant:0.008", b, spaces.Discrete(A), spaces.Discrete(1))
    noise = imp.noise_spec(estimator, "gaussian", epsilon, 1e-5)
    rng = noise_rng(seed)
    covered = 0
    for _ in range(runs):
        t = imp.terms(log(m, p_click, mu, rng), uniform(), b, q)
        kw = dict(noise=noise, rng=rng, interval="auto")
        if estimator == "dr":
            est = imp.dr(t, b, q.q_range, **kw)
        else:
            est = getattr(imp, estimator)(t, b, **kw)
        assert est.interval_method == "bhatia-davis"
        covered += est.ci_low <= truth <= est.ci_high
    return covered


@pytest.mark.parametrize("estimator", ["ips", "snips", "dr"])
def test_auto_covers_rare_rewards_at_epsilon_one(estimator: str) -> None:
    """Quick coverage of the default interval at ε = 1: 40 logs of 5000 rows, the 95%
    interval holds the truth at least 36 times (≥ 90%)."""
    assert _coverage(estimator, 40, 5000, 1.0, 21) >= 36


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["ips", "snips", "dr"])
def test_auto_covers_at_its_nominal_level(estimator: str) -> None:
    """Statistical: 600 logs of 5000 rows at ε = 1; the 95% auto interval's coverage is at
    least 93% (the standard error of a 95% coverage over 600 runs is 0.9%)."""
    assert _coverage(estimator, 600, 5000, 1.0, 31) >= 0.93 * 600
