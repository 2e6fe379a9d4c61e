"""Output-perturbed ridge LSTD (`privrl.ope.lstd_op`): the sensitivity (4) bounds every
add/remove neighbour's change of θ, the noise has the stated scale, bounds are enforced."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event

from privrl.data.dataset import TrajectoryDataset
from privrl.envs.chain import ChainDomain
from privrl.ope.lstd_op import (
    LstdOpConfig,
    lstd_op,
    lstd_op_noise_multiplier,
    lstd_op_release,
    lstd_op_statistics,
)
from privrl.privacy.accounting import epsilon as account_epsilon
from tests.noise import noise_rng


def _random_dataset(rng: np.random.Generator, m: int, n: int) -> TrajectoryDataset:
    """Episodes of 1–6 steps with features of norm up to 3 (beyond Φ̄ = 1), rewards in
    [−3, 3] (beyond R̄ = 1), about half ending truncated (bootstrapped final state)."""
    lengths = rng.integers(1, 7, size=m)
    obs, rew, term, trunc = [], [], [], []
    for tau in lengths:
        o = rng.normal(size=(tau + 1, n)) * rng.uniform(0.1, 3.0 / math.sqrt(n))
        obs.append(o)
        rew.append(rng.uniform(-3, 3, size=tau))
        end = rng.random() < 0.5
        t = np.zeros(tau, bool)
        u = np.zeros(tau, bool)
        (t if end else u)[-1] = True
        term.append(t)
        trunc.append(u)
    return TrajectoryDataset(
        observations=np.concatenate(obs),
        actions=np.zeros(int(lengths.sum()), np.int64),
        rewards=np.concatenate(rew),
        terminated=np.concatenate(term),
        truncated=np.concatenate(trunc),
        episode_offsets=np.concatenate(([0], np.cumsum(lengths))),
    )


def _identity(obs: np.ndarray) -> np.ndarray:
    return np.asarray(obs, dtype=np.float64)


@pytest.mark.parametrize("ridge", [0.05, 0.3, 2.0])
@pytest.mark.parametrize("m,public_m", [(3, 8), (7, 8), (8, 8), (12, 5)])
def test_neighbours_never_move_theta_more_than_the_sensitivity(m, public_m, ridge):
    # property: for D' = D minus one trajectory (add/remove), ‖θ_D − θ_D'‖₂ ≤ Δ₂ of eq. (4),
    # on both sides of m̄ (m + 1 ≤ m̄ and m ≥ m̄), with truncated episodes and clipped bounds
    rng = noise_rng([m, public_m, int(ridge * 100)])
    cfg = LstdOpConfig(
        feature_bound=1.0, reward_bound=1.0, gamma=0.95, ridge=ridge, public_m=public_m
    )
    delta2 = cfg.sensitivity()
    worst = 0.0
    for _ in range(25):
        data = _random_dataset(rng, m, 3)
        theta = lstd_op_statistics(data, _identity, cfg).solve(cfg)
        for i in range(m):
            rest = data.subset([j for j in range(m) if j != i])
            theta_i = lstd_op_statistics(rest, _identity, cfg).solve(cfg)
            worst = max(worst, float(np.linalg.norm(theta - theta_i)))
    assert worst <= delta2
    assert worst > 0.0


def test_symmetric_part_of_the_statistic_is_positive_semidefinite():
    # (S1): the truncation correction makes sym(Σ Ã_i) ⪰ 0, hence ‖A_D⁻¹‖ ≤ 1/λ (S2)
    rng = noise_rng(7)
    cfg = LstdOpConfig(feature_bound=1.0, reward_bound=1.0, gamma=0.99, ridge=0.1, public_m=5)
    for _ in range(50):
        data = _random_dataset(rng, 1, 2)
        A = lstd_op_statistics(data, _identity, cfg).A_sum
        assert np.linalg.eigvalsh(0.5 * (A + A.T)).min() >= -1e-12


def test_bounds_are_enforced_by_clipping_not_refused():
    rng = noise_rng(3)
    data = _random_dataset(rng, 4, 3)
    cfg = LstdOpConfig(feature_bound=1.0, reward_bound=1.0, gamma=0.9, ridge=0.5, public_m=4)
    st = lstd_op_statistics(data, lambda o: 100.0 * np.asarray(o), cfg)
    # each b̂_i has norm ≤ R̄Φ̄, so the sum has norm ≤ m·R̄Φ̄ whatever the raw data
    assert np.linalg.norm(st.b_sum) <= 4 * cfg.beta + 1e-12


def test_noise_scale_is_the_calibrated_multiple_of_the_sensitivity():
    # the release adds N(0, (zΔ₂)²) per coordinate, with z the PLD-calibrated multiplier of
    # one Gaussian release at (ε, δ); the report states that ε
    chain = ChainDomain()
    data = chain.mdp.sample(50, seed=0)
    cfg = LstdOpConfig(
        feature_bound=1.0, reward_bound=1.0, gamma=chain.mdp.gamma, ridge=0.5, public_m=50
    )
    z = lstd_op_noise_multiplier(1.0, 1e-5)
    eps = account_epsilon(dp_event.GaussianDpEvent(z), 1e-5, backend="pld")
    assert eps == pytest.approx(1.0, rel=2e-3)
    theta = lstd_op_statistics(data, chain.features, cfg).solve(cfg)
    rng = noise_rng(0)
    draws = np.stack(
        [lstd_op_release(theta, cfg, noise_multiplier=z, rng=rng)[0] for _ in range(200)]
    )
    noise = (draws - theta).ravel()
    sigma = z * cfg.sensitivity()
    assert np.std(noise) == pytest.approx(sigma, rel=0.05)
    assert abs(np.mean(noise)) < 4 * sigma / math.sqrt(noise.size)
    res = lstd_op(data, chain.features, cfg, epsilon=1.0, delta=1e-5, rng=rng, noise_multiplier=z)
    assert res.report.epsilon == pytest.approx(1.0, rel=5e-3)
    assert res.sigma == pytest.approx(sigma, rel=1e-3)
    names = [p["name"] for p in res.report.public_parameters]
    assert "LSTD-OP sensitivity Δ₂" in names


def test_config_refuses_a_non_positive_ridge():
    with pytest.raises(ValueError, match="ridge"):
        LstdOpConfig(feature_bound=1.0, reward_bound=1.0, gamma=0.9, ridge=0.0, public_m=3)
