"""Linear Q-learning (Sarsa(λ)) on Mountain Car, fitted Q iteration, Q-policies and rollouts."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from privrl.envs.mountain_car import MountainCarBatch
from privrl.rl.features import FourierBasis, make_features
from privrl.rl.linear_q import (
    MLPQ,
    FQIConfig,
    GreedyQPolicy,
    LinearQ,
    SarsaLambdaConfig,
    SoftmaxQPolicy,
    discounted_returns,
    epsilon_greedy_q,
    fitted_q_iteration,
    q_from_arrays,
    sarsa_lambda,
    simulate,
    simulate_dataset,
)


class Line:
    """Toy batch simulator: x ∈ [0, 1], action 1 moves right by 0.1, action 0 left; r = x'.

    The optimal policy always moves right.
    """

    n_actions = 2
    horizon = 15
    observation_space = spaces.Box(np.array([0.0]), np.array([1.0]), dtype=np.float64)
    action_space = spaces.Discrete(2)

    def reset(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(0.0, 1.0, size=(n, 1))

    def step(self, obs: np.ndarray, actions: np.ndarray):
        x = np.clip(obs[:, 0] + np.where(actions == 1, 0.1, -0.1), 0.0, 1.0)
        return x[:, None], x.copy(), np.zeros(len(x), dtype=bool)


class TableQ:
    """Fixed Q-values per observation row (for policy tests)."""

    def __init__(self, values: np.ndarray) -> None:
        self.v = np.asarray(values, dtype=np.float64)
        self.n_actions = self.v.shape[1]

    def values(self, obs: np.ndarray) -> np.ndarray:
        return self.v[np.asarray(obs, dtype=np.int64)[:, 0]]


def test_sarsa_lambda_learns_to_reach_the_mountain_car_goal() -> None:
    """Small budget (40 episodes, ~1 s): the greedy policy reaches the goal from every start,
    in well under the 300 steps the paper's 'decent policy' needs on average."""
    sim = MountainCarBatch(horizon=1000)
    feats = make_features("fourier:5", sim.observation_space)
    q, lengths = sarsa_lambda(
        sim, feats, config=SarsaLambdaConfig(episodes=40, alpha=0.005), seed=0
    )
    assert isinstance(q, LinearQ) and q.weights.shape == (3, 36) and len(lengths) == 40
    ro = simulate(sim, GreedyQPolicy(q), 200, np.random.default_rng(1))
    assert ro.terminated.all()
    assert ro.lengths.mean() < 300
    assert lengths[:3].mean() > ro.lengths.mean()  # it learned something


def test_sarsa_lambda_is_seeded() -> None:
    sim = MountainCarBatch(horizon=200)
    feats = make_features("fourier:3", sim.observation_space)
    cfg = SarsaLambdaConfig(episodes=2, max_steps=200, epsilon=0.1)
    q1, _ = sarsa_lambda(sim, feats, config=cfg, seed=5)
    q2, _ = sarsa_lambda(sim, feats, config=cfg, seed=5)
    q3, _ = sarsa_lambda(sim, feats, config=cfg, seed=6)
    np.testing.assert_array_equal(q1.weights, q2.weights)
    assert not np.array_equal(q1.weights, q3.weights)


def test_fitted_q_iteration_learns_the_toy_optimal_policy_and_is_seeded() -> None:
    sim = Line()
    feats = FourierBasis([0.0], [1.0], 3)
    cfg = FQIConfig(
        rounds=2,
        episodes_per_round=20,
        iterations=8,
        gradient_steps=60,
        hidden=(16,),
        lr=1e-2,
        gamma=0.9,
        unit=1.0,
    )
    q, info = fitted_q_iteration(sim, feats, config=cfg, seed=0)
    assert isinstance(q, MLPQ) and len(info.greedy_returns) == 2
    grid = np.linspace(0.0, 0.85, 30)[:, None]
    assert np.mean(GreedyQPolicy(q).act(grid) == 1) >= 0.9
    tiny = FQIConfig(rounds=1, episodes_per_round=4, iterations=2, gradient_steps=5, hidden=(8,))
    q1, _ = fitted_q_iteration(sim, feats, config=tiny, seed=3)
    q2, _ = fitted_q_iteration(sim, feats, config=tiny, seed=3)
    q3, _ = fitted_q_iteration(sim, feats, config=tiny, seed=4)
    np.testing.assert_array_equal(q1.values(grid), q2.values(grid))
    assert not np.array_equal(q1.values(grid), q3.values(grid))


def test_q_functions_round_trip_through_arrays() -> None:
    feats = FourierBasis([0.0], [1.0], 2)
    rng = np.random.default_rng(0)
    lin = LinearQ(feats, rng.normal(size=(2, 3)))
    mlp = MLPQ(
        feats,
        [(rng.normal(size=(4, 3)), rng.normal(size=4)), (rng.normal(size=(2, 4)), np.zeros(2))],
        np.zeros(3),
        np.ones(3),
        unit=10.0,
    )
    x = rng.uniform(size=(5, 1))
    for q in (lin, mlp):
        arrays = {k: np.asarray(v) for k, v in q.to_arrays().items()}
        np.testing.assert_array_equal(q_from_arrays(arrays, feats).values(x), q.values(x))
    # MLPQ: values = unit · symexp(raw)
    raw = mlp.raw(x)
    np.testing.assert_allclose(mlp.values(x), 10.0 * np.sign(raw) * np.expm1(np.abs(raw)))


def test_policies_from_q() -> None:
    q = TableQ([[1.0, 2.0, 0.0], [5.0, 5.0, -1.0]])
    obs = np.array([[0], [1]])
    g = GreedyQPolicy(q)
    np.testing.assert_array_equal(g.act(obs), [1, 0])  # ties go to the lowest index
    np.testing.assert_array_equal(g.action_probs(obs), [[0, 1, 0], [1, 0, 0]])
    s = SoftmaxQPolicy(q, 1.0)
    p = s.action_probs(obs)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    e = np.exp([1.0, 2.0, 0.0])
    np.testing.assert_allclose(p[0], e / e.sum())
    cold = SoftmaxQPolicy(q, 1e-3).action_probs(obs)
    np.testing.assert_allclose(cold[0], [0, 1, 0], atol=1e-12)
    # log scale: preferences are symlog(Q), so the temperature is a relative gap
    lg = SoftmaxQPolicy(TableQ([[1e6, 1.01e6]]), 0.01, scale="log").action_probs(np.array([[0]]))
    ratio = lg[0, 1] / lg[0, 0]
    assert ratio == pytest.approx(np.exp((np.log1p(1.01e6) - np.log1p(1e6)) / 0.01))
    eg = epsilon_greedy_q(q, 0.3).action_probs(obs)
    np.testing.assert_allclose(eg, [[0.1, 0.8, 0.1], [0.8, 0.1, 0.1]])
    with pytest.raises(ValueError):
        SoftmaxQPolicy(q, 0.0)
    with pytest.raises(ValueError):
        SoftmaxQPolicy(q, 1.0, scale="bogus")


def test_simulate_records_consistent_episodes() -> None:
    sim = MountainCarBatch(horizon=400)
    q = LinearQ(make_features("fourier:3", sim.observation_space), np.zeros((3, 16)))
    pol = epsilon_greedy_q(q, 0.5)
    ro = simulate(sim, pol, 50, np.random.default_rng(0))
    T, n = ro.actions.shape
    assert T == ro.lengths.max() and n == 50
    # alive is a prefix of length `lengths` per episode; episodes shorter than T terminated
    np.testing.assert_array_equal(ro.alive.sum(axis=0), ro.lengths)
    np.testing.assert_array_equal(ro.terminated, ro.lengths < T)
    # the recorded probability is the policy's probability of the taken action
    t, i = np.nonzero(ro.alive)
    p = pol.action_probs(ro.observations[t, i])[np.arange(t.size), ro.actions[t, i]]
    np.testing.assert_allclose(ro.probs[t, i], p)
    # each recorded transition is the simulator's step
    nxt, _, _ = sim.step(ro.observations[t, i], ro.actions[t, i])
    np.testing.assert_array_equal(nxt, ro.observations[t + 1, i])
    assert discounted_returns(ro, 1.0) == pytest.approx(-ro.lengths.astype(float))


def test_simulate_dataset_matches_simulate() -> None:
    """Same seed, same episodes: the flat dataset is the time-major rollout, episode by episode."""
    sim = MountainCarBatch(horizon=120)
    q = LinearQ(make_features("fourier:3", sim.observation_space), np.zeros((3, 16)))
    pol = epsilon_greedy_q(q, 0.9)
    ro = simulate(sim, pol, 12, np.random.default_rng(4))
    ds = simulate_dataset(sim, pol, 12, np.random.default_rng(4))
    np.testing.assert_array_equal(ds.episode_lengths, ro.lengths)
    for i in range(12):
        ep = ds.episode(i)
        L = ro.lengths[i]
        np.testing.assert_array_equal(ep.observations, ro.observations[: L + 1, i])
        np.testing.assert_array_equal(ep.actions, ro.actions[:L, i])
        np.testing.assert_array_equal(ep.behaviour_probs, ro.probs[:L, i])
        assert ep.terminated[-1] == ro.terminated[i] and ep.truncated[-1] != ro.terminated[i]
