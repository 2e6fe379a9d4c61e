"""A declared horizon H (privrl.ope.horizon): truncation enforces it on the data, and the
return and sensitivity bounds of each estimator use it, so a one-step log does not pay
1/(1−γ) and γ = 1 is bounded."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gymnasium import spaces

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.ope.baselines import (
    first_visit_returns,
    lsw_sigma_bounds,
    plan_dp_lsl,
    plan_dp_lsw,
    return_range,
)
from privrl.ope.horizon import discount_mass, return_bounds, truncate
from privrl.ope.lstd import lstd
from privrl.rl.features import make_features

S, A = 4, 3


def episodes(
    lengths: list[int], seed: int = 0, seeds: list[int] | None = None
) -> TrajectoryDataset:
    """Random episodes over S states, episode i drawn from its own stream (so two datasets
    that differ in one seed differ in one trajectory); rewards in [-2, 3], outside the bounds
    used, so the clipping is exercised."""
    seeds = seeds if seeds is not None else [seed * 1000 + i for i in range(len(lengths))]
    parts = []
    for n_i, s_i in zip(lengths, seeds, strict=True):
        rng = np.random.default_rng(s_i)
        parts.append(
            (rng.integers(0, S, n_i + 1), rng.integers(0, A, n_i), rng.uniform(-2.0, 3.0, n_i))
        )
    lengths_a = np.asarray(lengths)
    n = int(lengths_a.sum())
    term = np.zeros(n, bool)
    term[np.cumsum(lengths_a) - 1] = True
    return TrajectoryDataset(
        observations=np.concatenate([p[0] for p in parts]),
        actions=np.concatenate([p[1] for p in parts]),
        rewards=np.concatenate([p[2] for p in parts]),
        terminated=term,
        truncated=np.zeros(n, bool),
        episode_offsets=np.concatenate(([0], np.cumsum(lengths_a))),
        behaviour_probs=np.full(n, 1.0 / A),
        metadata=DatasetMetadata(
            observation_space=spaces.Discrete(S), action_space=spaces.Discrete(A), discount=1.0
        ),
    )


def test_truncate_keeps_the_first_h_steps_and_marks_the_cut() -> None:
    data = episodes([1, 3, 5, 2])
    cut = truncate(data, 2)
    assert list(cut.episode_lengths) == [1, 2, 2, 2]
    cut.validate()  # a well-formed dataset
    for i, keep in enumerate([1, 2, 2, 2]):
        full, short = data.episode(i), cut.episode(i)
        np.testing.assert_array_equal(short.observations, full.observations[: keep + 1])
        np.testing.assert_array_equal(short.rewards, full.rewards[:keep])
        np.testing.assert_array_equal(short.actions, full.actions[:keep])
    # episodes 1 and 2 were cut: the horizon ends them (no bootstrapping past H)
    ends = np.cumsum(cut.episode_lengths) - 1
    assert list(cut.terminated[ends]) == [True, True, True, True]
    assert not np.any(cut.truncated)
    assert truncate(data, 5) is data  # nothing longer than H: unchanged


def test_discount_mass_and_return_bounds() -> None:
    """B_H = Σ_{t<H} γ^t: 1 for one step at every γ, H at γ = 1, 1/(1−γ) without H."""
    for g in (0.0, 0.5, 0.99, 1.0):
        assert discount_mass(g, 1) == 1.0
        assert return_bounds((0.0, 1.0), g, 1) == (0.0, 1.0)
    assert discount_mass(1.0, 7) == 7.0
    assert discount_mass(0.9, 3) == pytest.approx(1 + 0.9 + 0.81)
    assert discount_mass(0.9, None) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="pass `max_horizon=H`"):
        discount_mass(1.0, None)
    assert return_bounds((-1.0, 2.0), 1.0, 4) == (-4.0, 8.0)
    assert return_bounds((0.5, 2.0), 1.0, 4) == (0.5, 8.0)  # 0 outside: one step at least


@pytest.mark.parametrize("gamma", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("H", [1, 2, 5])
def test_first_visit_returns_lie_in_the_horizon_bound(gamma: float, H: int) -> None:
    """Sensitivity input of DP-LSW/DP-LSL: every first-visit return of data truncated to H,
    rewards clipped to [a, b], lies in an interval of width return_range((a, b), γ, H);
    replacing one trajectory therefore moves F̄_s by at most that width / max(m_s, 1)."""
    bounds = (-0.5, 1.0)
    W = return_range(bounds, gamma, H)
    lo, hi = return_bounds(bounds, gamma, H)
    assert hi - lo == pytest.approx(W)
    rng = np.random.default_rng(H)
    index = lambda o: np.asarray(o).reshape(-1)  # noqa: E731
    for seed in range(5):
        lengths = list(rng.integers(1, 9, size=12))
        data = truncate(episodes(lengths, seed), H)
        fv = first_visit_returns(data, index, S, gamma, reward_bounds=bounds)
        seen = fv.counts > 0
        assert np.all(fv.mean_returns[seen] >= lo - 1e-12)
        assert np.all(fv.mean_returns[seen] <= hi + 1e-12)
        # neighbour: trajectory 0 replaced by another one (replace-one, m fixed)
        seeds = [seed * 1000 + i for i in range(len(lengths))]
        new_len = [int(rng.integers(1, 9)), *lengths[1:]]
        mixed = episodes(new_len, seeds=[seeds[0] + 777, *seeds[1:]])
        fv2 = first_visit_returns(truncate(mixed, H), index, S, gamma, reward_bounds=bounds)
        both = (fv.counts > 0) & (fv2.counts > 0) & (fv.counts == fv2.counts)
        diff = np.abs(fv.mean_returns - fv2.mean_returns)[both]
        assert np.all(diff <= W / np.maximum(fv.counts[both], 1) + 1e-9)


def test_one_step_log_does_not_pay_one_over_one_minus_gamma() -> None:
    """DP-LSW's and DP-LSL's public noise bounds are linear in the return range: with H = 1
    they are (1 − γ) times those of the unbounded-horizon R/(1−γ)."""
    gamma, eps, delta, m = 0.99, 1.0, 1e-5, 50
    Phi, rho = np.eye(S), np.full(S, 1.0 / S)
    W1 = return_range((0.0, 1.0), gamma, 1)
    Winf = return_range((0.0, 1.0), gamma)
    assert W1 == 1.0 and Winf == pytest.approx(100.0)
    lo1, hi1 = lsw_sigma_bounds(Phi, rho, m, epsilon=eps, delta=delta, return_range=W1)
    lo, hi = lsw_sigma_bounds(Phi, rho, m, epsilon=eps, delta=delta, return_range=Winf)
    assert hi1 == pytest.approx(hi * (1 - gamma)) and lo1 == pytest.approx(lo * (1 - gamma))
    for plan in (plan_dp_lsw, plan_dp_lsl):
        kw = dict(epsilon=eps, delta=delta)
        if plan is plan_dp_lsl:
            kw["c"] = 10.0
        p1 = plan(Phi, rho, m, return_range=W1, **kw)
        p = plan(Phi, rho, m, return_range=Winf, **kw)
        assert p1.sigma_bounds[1] == pytest.approx(p.sigma_bounds[1] * (1 - gamma))
        assert p1.release().extra["return_range"] == 1.0


def test_gamma_one_needs_a_horizon_for_the_return_range() -> None:
    with pytest.raises(ValueError, match="declared horizon"):
        return_range((0.0, 1.0), 1.0)
    assert return_range((0.0, 1.0), 1.0, 3) == 3.0


def test_lstd_at_gamma_one_on_a_one_step_log_is_the_mean_reward() -> None:
    """LSTD (non-private, no sensitivity) with γ = 1, H = 1 and one-hot features: θ_s is the
    mean reward of the steps taken in s (the one-step value), with no 1/(1−γ) anywhere."""
    data = truncate(episodes([1] * 60 + [4] * 20, seed=3), 1)
    feats = make_features("onehot", spaces.Discrete(S))
    theta = lstd(data, feats, 1.0)
    s0 = np.asarray(data.observations)[data.observation_offsets[:-1]]
    for s in range(S):
        r = np.asarray(data.rewards)[s0 == s]
        assert math.isclose(theta[s], r.mean(), rel_tol=1e-9)
