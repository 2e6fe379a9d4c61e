"""The 40-state chain: exact model, exact (A, b, C) under both weightings, sampling, env."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from privrl.envs.chain import ENV_ID, ChainDomain, ChainMDP, _mean_inverse_length
from privrl.ope.stats import mean_system


@pytest.fixture(scope="module")
def chain() -> ChainMDP:
    return ChainMDP()


def test_model_and_true_values(chain: ChainMDP) -> None:
    """P is stochastic, the start is uniform over the 39 non-absorbing states, and V solves the
    Bellman equation V = r + γPV with V(absorbing) = 0; V(38) = 0.5/(1 − 0.5γ)."""
    P = chain.transition_matrix
    assert np.allclose(P.sum(axis=1), 1.0)
    d0 = chain.start_distribution
    assert d0[-1] == 0 and np.allclose(d0[:-1], 1 / 39)
    V = chain.true_values()
    bellman = chain.expected_reward + chain.gamma * P @ V
    assert np.allclose(V[:-1], bellman[:-1], atol=1e-12) and V[-1] == 0
    assert V[38] == pytest.approx(0.5 / (1 - 0.5 * chain.gamma), rel=1e-12)


def test_mean_inverse_length_exact() -> None:
    """E[1/G] = ln 2 for G ~ Geometric(1/2) (L = 1); E[1/τ] ≥ 1/E[τ] (Jensen)."""
    assert _mean_inverse_length(1, 0.5) == pytest.approx(math.log(2), rel=1e-12)
    for L in (2, 10, 39):
        assert _mean_inverse_length(L, 0.5) > 1 / (2 * L)


def test_sampling_structure(chain: ChainMDP) -> None:
    """Every episode starts in a non-absorbing state, moves by 0 or +1, terminates on entering
    the absorbing state with reward 1 there and 0 elsewhere; behaviour_probs are 1."""
    data = chain.sample(2000, seed=3)
    lengths = data.episode_lengths
    obs = np.asarray(data.observations)
    starts = obs[data.episode_offsets[:-1] + np.arange(data.n_episodes)]
    assert starts.min() >= 0 and starts.max() <= 38
    assert abs(starts.mean() - 19) < 0.8  # uniform start: mean 19, sd 11.3/√2000 = 0.25
    rows = np.arange(data.n_transitions) + data.transition_episode_index
    steps = obs[rows + 1] - obs[rows]
    assert set(np.unique(steps)) <= {0, 1}
    last = data.episode_offsets[1:] - 1
    assert np.all(data.terminated[last]) and not np.any(data.truncated)
    assert np.all(data.rewards[last] == 1) and data.rewards.sum() == data.n_episodes
    assert np.all(data.behaviour_probs == 1)
    # mean length: E[τ] = 2·E[L] = 2·20 = 40
    assert abs(lengths.mean() - 40) < 1.5


@pytest.mark.parametrize("normalisation", ["length", "sum"])
def test_exact_system_matches_monte_carlo(chain: ChainMDP, normalisation: str) -> None:
    """The exact (A, b, C) equals the average of the per-trajectory statistics (2.2) over
    10,000 sampled trajectories (max entry error < 6% of the largest; MC error ~1-2%)."""
    data = chain.sample(10_000, seed=11)
    A, b, C = mean_system(data, chain.features(), chain.gamma, normalisation=normalisation)
    Ae, be, Ce = chain.linear_system(normalisation=normalisation)
    for est, exact in ((A, Ae), (b, be), (C, Ce)):
        assert np.max(np.abs(est - exact)) < 0.06 * np.max(np.abs(exact))


def test_fixed_points(chain: ChainMDP) -> None:
    """Un-normalised per-trajectory sums have the true V as fixed point (exactly); the
    paper's per-trajectory averages (1/τ) do not: θ* = A⁻¹b differs from V by ~0.01."""
    V = chain.true_values()[:-1]
    A, b, _ = chain.linear_system(normalisation="sum")
    assert np.allclose(np.linalg.solve(A, b), V, atol=1e-12)
    A, b, _ = chain.linear_system(normalisation="length")
    gap = np.max(np.abs(np.linalg.solve(A, b) - V))
    assert 1e-3 < gap < 0.05


def test_gymnasium_env() -> None:
    """privrl/Chain-v0 is registered; an episode terminates on absorption with reward 1."""
    env = gym.make(ENV_ID)
    obs, _ = env.reset(seed=0)
    assert 0 <= obs <= 38
    total, done, steps = 0.0, False, 0
    while not done:
        obs, r, term, trunc, _ = env.step(0)
        total += r
        done = term or trunc
        steps += 1
    assert obs == 39 and total == 1.0 and term and not trunc


def test_domain_interface() -> None:
    """ChainDomain offers the OPE domain attributes and samples with its only policy."""
    dom = ChainDomain()
    data = dom.sample(dom.behaviour_policy, 10, seed=0)
    assert data.n_episodes == 10 and dom.features.dim == 39 and dom.n_actions == 1
    assert np.allclose(dom.target_policy.action_probs(np.zeros(3)), 1.0)
    with pytest.raises(ValueError):
        dom.sample(object(), 3, seed=0)
