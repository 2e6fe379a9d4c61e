"""Per-trajectory statistics (2.2), MSPBE, and the LSTD references."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from privrl.data.dataset import DatasetError, DatasetMetadata, TrajectoryDataset
from privrl.envs.chain import ChainMDP
from privrl.ope import stats as stats_mod
from privrl.ope.lstd import lstd
from privrl.ope.mspbe import LinearSystem, large_sample_system
from privrl.ope.stats import importance_ratios, mean_system, trajectory_stats
from privrl.rl.features import OneHot


class Probs:
    """A fixed stochastic policy over 2 actions depending on the observation."""

    def action_probs(self, obs: np.ndarray) -> np.ndarray:
        p = 1 / (1 + np.exp(-np.asarray(obs, float)[:, 0]))
        return np.stack([p, 1 - p], axis=1)


def feats(obs: np.ndarray) -> np.ndarray:
    x = np.asarray(obs, dtype=np.float64)
    return np.stack([np.ones(len(x)), x[:, 0], np.sin(x[:, 1]), x[:, 0] * x[:, 1]], axis=1)


def synthetic(seed: int = 0, m: int = 30) -> TrajectoryDataset:
    """Episodes of random lengths; some terminated, some truncated, one cut (no flag)."""
    rng = np.random.default_rng(seed)
    eps = []
    for i in range(m):
        T = int(rng.integers(1, 9))
        term = np.zeros(T, bool)
        trunc = np.zeros(T, bool)
        if i % 3 == 0:
            term[-1] = True
        elif i % 3 == 1:
            trunc[-1] = True
        eps.append(
            {
                "observations": rng.normal(size=(T + 1, 2)),
                "actions": rng.integers(0, 2, size=T),
                "rewards": rng.normal(size=T),
                "terminated": term,
                "truncated": trunc,
                "behaviour_probs": rng.uniform(0.2, 0.9, size=T),
            }
        )
    meta = DatasetMetadata(
        observation_space=spaces.Box(-np.inf, np.inf, (2,)), action_space=spaces.Discrete(2)
    )
    return TrajectoryDataset.from_episodes(eps, metadata=meta)


def naive_stats(data: TrajectoryDataset, gamma: float, policy: Probs | None):
    """(2.2) written out episode by episode (the reference implementation)."""
    A, b, C = [], [], []
    for ep in data.iter_episodes():
        T = ep.length
        phi = feats(ep.observations)
        Ai, bi, Ci = np.zeros((4, 4)), np.zeros(4), np.zeros((4, 4))
        for t in range(T):
            rho = 1.0
            if policy is not None:
                rho = policy.action_probs(ep.observations[t : t + 1])[0, ep.actions[t]]
                rho /= ep.behaviour_probs[t]
            nxt = np.zeros(4) if ep.terminated[t] else phi[t + 1]  # φ(terminal) = 0
            Ai += rho * np.outer(phi[t], phi[t] - gamma * nxt) / T
            bi += rho * phi[t] * ep.rewards[t] / T
            Ci += np.outer(phi[t], phi[t]) / T
        A.append(Ai)
        b.append(bi)
        C.append(Ci)
    return np.array(A), np.array(b), np.array(C)


@pytest.mark.parametrize("policy", [None, Probs()])
def test_trajectory_stats_match_definition(policy, monkeypatch) -> None:
    """Batched Â_i, b̂_i, Ĉ_i equal (2.2) per episode: per-step ρ, divide by τ_i,
    φ(terminal) = 0, truncated/cut episodes bootstrap from the final observation. Small
    chunks force the chunked path."""
    monkeypatch.setattr(stats_mod, "_CHUNK_ROWS", 7)
    monkeypatch.setattr(stats_mod, "_GROUP", 2)
    data = synthetic()
    s = trajectory_stats(data, feats, 0.9, target_policy=policy)
    A, b, C = naive_stats(data, 0.9, policy)
    assert np.allclose(s.A, A, atol=1e-13) and np.allclose(s.b, b) and np.allclose(s.C, C)
    monkeypatch.setattr(stats_mod, "_MEAN_CHUNK_ROWS", 11)
    mA, mb, mC = mean_system(data, feats, 0.9, target_policy=policy)
    assert np.allclose(mA, A.mean(0)) and np.allclose(mb, b.mean(0)) and np.allclose(mC, C.mean(0))
    cA, _, _ = mean_system(data, feats, 0.9, target_policy=policy, value_features=feats)
    assert np.allclose(cA, mA)


def test_missing_behaviour_probs_names_the_field() -> None:
    data = synthetic()
    bare = TrajectoryDataset(
        observations=data.observations,
        actions=data.actions,
        rewards=data.rewards,
        terminated=data.terminated,
        truncated=data.truncated,
        episode_offsets=data.episode_offsets,
        metadata=data.metadata,
    )
    with pytest.raises(DatasetError, match="behaviour_probs") as err:
        importance_ratios(bare, Probs())
    assert err.value.field == "behaviour_probs"
    assert np.all(importance_ratios(bare, None) == 1)  # on-policy needs no probabilities


def test_mspbe_definition_and_minimiser() -> None:
    """MSPBE(θ) = (b − Aθ)ᵀC⁻¹(b − Aθ); 0 at θ* = A⁻¹b, positive elsewhere; batched."""
    c = ChainMDP()
    A, b, C = c.linear_system()
    sys = LinearSystem(A, b, C)
    theta = np.random.default_rng(0).normal(size=39)
    r = b - A @ theta
    assert sys.mspbe(theta) == pytest.approx(r @ np.linalg.solve(C, r), rel=1e-10)
    assert sys.mspbe(sys.theta_star()) < 1e-20
    assert np.allclose(sys.theta_star(), np.linalg.solve(A, b))
    batch = np.stack([theta, 2 * theta])
    assert np.allclose(sys.mspbe(batch), [sys.mspbe(theta), sys.mspbe(2 * theta)])


def test_mspbe_uses_pinv_for_singular_c() -> None:
    """40 one-hot features on the chain: the absorbing state's feature never occurs, so C is
    singular; MSPBE (pseudo-inverse) equals the 39-feature MSPBE whatever θ_39 is."""
    c = ChainMDP()
    sys40 = LinearSystem(*c.linear_system(OneHot(40)))
    sys39 = LinearSystem(*c.linear_system())
    theta = np.random.default_rng(1).normal(size=39)
    for extra in (0.0, 5.0):
        assert sys40.mspbe(np.append(theta, extra)) == pytest.approx(sys39.mspbe(theta), rel=1e-9)


def empirical_model_values(data: TrajectoryDataset, n_states: int, gamma: float) -> np.ndarray:
    """Certainty equivalence: V of the empirical MDP (counts), terminal value 0."""
    rows = np.arange(data.n_transitions) + data.transition_episode_index
    obs = np.asarray(data.observations)
    s, s2 = obs[rows], obs[rows + 1]
    S = n_states - 1
    N = np.zeros((S, n_states))
    np.add.at(N, (s, s2), 1.0)
    R = np.bincount(s, weights=data.rewards, minlength=S)[:S]
    visits = N.sum(axis=1)
    P = N[:, :S] / visits[:, None]
    return np.linalg.solve(np.eye(S) - gamma * P, R / visits)


def test_lstd_on_the_chain_equals_the_true_v() -> None:
    """Pooled (Bradtke–Barto) LSTD with the chain's exact expected statistics is the true V;
    on data it is exactly the empirical model's V (tabular certainty equivalence) and within
    0.02 of the true V at m = 3000."""
    c = ChainMDP()
    A, b, _ = c.linear_system(normalisation="sum")
    assert np.allclose(np.linalg.solve(A, b), c.true_values()[:-1], atol=1e-12)
    data = c.sample(3000, seed=4)
    theta = lstd(data, c.features(), c.gamma)
    assert np.allclose(theta, empirical_model_values(data, 40, c.gamma), atol=1e-10)
    assert np.max(np.abs(theta - c.true_values()[:-1])) < 0.02


def test_lstd_trajectory_weighting_is_gpope_target() -> None:
    """weighting='trajectory' solves the dataset's per-trajectory-averaged system."""
    c = ChainMDP()
    data = c.sample(500, seed=2)
    s = trajectory_stats(data, c.features(), c.gamma)
    A, b, _ = s.mean()
    assert np.allclose(
        lstd(data, c.features(), c.gamma, weighting="trajectory"), np.linalg.solve(A, b)
    )


def test_off_policy_lstd_runs_with_ratios() -> None:
    data = synthetic(1, m=200)
    th = lstd(data, feats, 0.9, target_policy=Probs())
    A, b, _ = mean_system(data, feats, 0.9, target_policy=Probs(), normalisation="sum")
    assert np.allclose(A @ th, b)


def test_large_sample_system_is_cached(tmp_path) -> None:
    calls = []

    def build() -> LinearSystem:
        calls.append(1)
        return LinearSystem(np.eye(2), np.ones(2), np.eye(2))

    key = {"domain": "x", "n": 3}
    a = large_sample_system(key, build, cache_dir=tmp_path)
    b = large_sample_system(key, build, cache_dir=tmp_path)
    assert len(calls) == 1 and np.allclose(a.A, b.A)
    large_sample_system({"domain": "y"}, build, cache_dir=tmp_path)
    assert len(calls) == 2
