"""Tests of the finite-horizon tabular MDP: exact planning, vectorised evaluation, sampling."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from privrl.envs.tabular import (
    ENV_ID,
    TabularMDP,
    TabularMDPEnv,
    _inverse_cdf,
    backward_induction,
    behaviour_policy_full_support,
    counts,
    enumerate_deterministic_policies,
    episodes_from_dataset,
    epsilon_greedy_policy,
    greedy_policy,
    occupancy_measure,
    policy_evaluation,
    register_envs,
    softmax_policy,
    to_stochastic,
    uniform_policy,
)

# --------------------------------------------------------------------------------------------
# references: plain loops, written to be obviously correct rather than fast
# --------------------------------------------------------------------------------------------


def loop_evaluate(P: np.ndarray, R: np.ndarray, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """V [H+1, S] and Q [H, S, A] of one stochastic policy by explicit loops."""
    H, S, A, _ = P.shape
    V = np.zeros((H + 1, S))
    Q = np.zeros((H, S, A))
    for h in reversed(range(H)):
        for s in range(S):
            for a in range(A):
                Q[h, s, a] = R[h, s, a] + sum(P[h, s, a, t] * V[h + 1, t] for t in range(S))
            V[h, s] = sum(pi[h, s, a] * Q[h, s, a] for a in range(A))
    return V, Q


def loop_counts(states, actions, S, A):
    n, H = actions.shape
    n_sa = np.zeros((H, S, A), dtype=np.int64)
    n_sas = np.zeros((H, S, A, S), dtype=np.int64)
    for i in range(n):
        for h in range(H):
            n_sa[h, states[i, h], actions[i, h]] += 1
            n_sas[h, states[i, h], actions[i, h], states[i, h + 1]] += 1
    return n_sa, n_sas


def random_stochastic(rng, shape, A):
    return rng.dirichlet(np.ones(A), size=shape)


@pytest.fixture
def tiny() -> TabularMDP:
    return TabularMDP.random(3, 2, 3, seed=11)


@pytest.fixture
def small() -> TabularMDP:
    return TabularMDP.random(4, 3, 5, seed=3, initial="dirichlet")


# --------------------------------------------------------------------------------------------
# exact planning and evaluation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_backward_induction_equals_brute_force_over_all_deterministic_policies(seed):
    """v(π*) = max over all A^(HS) deterministic policies, and V* dominates every V^π."""
    mdp = TabularMDP.random(3, 2, 3, seed=seed, dirichlet_alpha=0.5)
    Q, V, pi = mdp.backward_induction()
    everything = enumerate_deterministic_policies(mdp.H, mdp.S, mdp.A)
    assert everything.shape == (2**9, 3, 3)
    assert len({p.tobytes() for p in everything}) == 2**9  # all distinct
    ev = mdp.evaluate(everything)
    np.testing.assert_allclose(mdp.optimal_value(), ev.value.max(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(mdp.value(pi), mdp.optimal_value(), rtol=0, atol=1e-12)
    # statewise optimality at every step (the brute force maximum per (h, s))
    np.testing.assert_allclose(V, ev.V.max(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(Q, ev.Q.max(axis=0), rtol=0, atol=1e-12)
    assert pi.dtype == np.int64 and pi.shape == (3, 3)
    np.testing.assert_array_equal(V[-1], 0.0)


def test_stochastic_evaluation_matches_loop_reference(small):
    rng = np.random.default_rng(0)
    pis = random_stochastic(rng, (4, small.H, small.S), small.A)
    ev = small.evaluate(pis)
    for i in range(len(pis)):
        V_ref, Q_ref = loop_evaluate(small.P, small.R, pis[i])
        np.testing.assert_allclose(ev.V[i], V_ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ev.Q[i], Q_ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ev.value[i], small.d1 @ V_ref[0], rtol=1e-12)
    np.testing.assert_allclose(small.value(pis), ev.value, rtol=1e-13)


@settings(max_examples=25, deadline=None)
@given(
    S=st.integers(1, 4),
    A=st.integers(1, 3),
    H=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
)
def test_evaluation_matches_loop_reference_property(S, A, H, seed):
    """Any shape (including S=1, A=1, H=1), sparse Dirichlet rows: vectorised == loops."""
    mdp = TabularMDP.random(S, A, H, seed=seed, dirichlet_alpha=0.3, initial="dirichlet")
    rng = np.random.default_rng(seed)
    pi = random_stochastic(rng, (H, S), A)
    V_ref, Q_ref = loop_evaluate(mdp.P, mdp.R, pi)
    V, Q, value = mdp.evaluate(pi)
    np.testing.assert_allclose(V, V_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Q, Q_ref, rtol=1e-12, atol=1e-12)
    d = mdp.occupancy(pi)
    np.testing.assert_allclose((d * mdp.R).sum(), value, rtol=1e-12, atol=1e-12)


def test_deterministic_policy_equals_its_one_hot_stochastic_form(small):
    rng = np.random.default_rng(1)
    det = rng.integers(0, small.A, size=(5, small.H, small.S))
    a = small.evaluate(det)
    b = small.evaluate(to_stochastic(det, small.A))
    np.testing.assert_allclose(a.V, b.V, rtol=1e-13)
    np.testing.assert_allclose(a.Q, b.Q, rtol=1e-13)
    np.testing.assert_allclose(small.occupancy(det), small.occupancy(to_stochastic(det, small.A)))


def test_occupancy_sums_to_one_and_recovers_the_value(small):
    rng = np.random.default_rng(2)
    pis = random_stochastic(rng, (6, small.H, small.S), small.A)
    d = small.occupancy(pis)
    assert d.shape == (6, small.H, small.S, small.A)
    assert np.all(d >= 0)
    np.testing.assert_allclose(d.sum(axis=(-2, -1)), 1.0, rtol=0, atol=1e-12)  # per policy, h
    # Σ_{h,s,a} d_h(s,a) r_h(s,a) = v^π
    np.testing.assert_allclose((d * small.R).sum(axis=(1, 2, 3)), small.value(pis), rtol=1e-12)
    # flow conservation: Σ_a d_{h+1}(s',a) = Σ_{s,a} d_h(s,a) P_h(s'|s,a); d_0 = d1 ⊗ π_0
    inflow = np.einsum("bhsa,hsat->bht", d[:, :-1], small.P[:-1])
    np.testing.assert_allclose(d[:, 1:].sum(-1), inflow, atol=1e-12)
    np.testing.assert_allclose(d[:, 0], small.d1[:, None] * pis[:, 0], atol=1e-15)


def test_start_state_and_start_distribution(small):
    rng = np.random.default_rng(3)
    pi = random_stochastic(rng, (small.H, small.S), small.A)
    V = small.evaluate(pi).V
    for s in range(small.S):
        assert small.value(pi, start=s) == pytest.approx(V[0, s], abs=1e-13)
        one_hot = np.eye(small.S)[s]
        np.testing.assert_allclose(small.occupancy(pi, start=s), small.occupancy(pi, start=one_hot))
        assert small.optimal_value(start=s) == pytest.approx(small.backward_induction()[1][0, s])
    mix = np.array([0.5, 0.0, 0.25, 0.25])
    assert small.evaluate(pi, start=mix).value == pytest.approx(mix @ V[0], abs=1e-13)


def test_batch_dimensions_and_chunking(small):
    """[2, 3, H, S] stacks give [2, 3, ...] outputs equal to one-at-a-time evaluation, and
    tiny chunks (one policy at a time) change nothing."""
    rng = np.random.default_rng(4)
    H, S, A = small.H, small.S, small.A
    det = rng.integers(0, A, size=(2, 3, H, S))
    sto = random_stochastic(rng, (2, 3, H, S), A)
    for pols in (det, sto):
        ev = small.evaluate(pols)
        assert ev.V.shape == (2, 3, H + 1, S)
        assert ev.Q.shape == (2, 3, H, S, A)
        assert ev.value.shape == (2, 3)
        assert small.value(pols).shape == (2, 3)
        assert small.suboptimality(pols).shape == (2, 3)
        occ = small.occupancy(pols)
        assert occ.shape == (2, 3, H, S, A)
        tiny_chunks = small.evaluate(pols, chunk_bytes=1)  # BLAS may round differently
        np.testing.assert_allclose(tiny_chunks.V, ev.V, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(tiny_chunks.Q, ev.Q, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(small.occupancy(pols, chunk_bytes=1), occ, atol=1e-15)
        for i in range(2):
            for j in range(3):
                one = small.evaluate(pols[i, j])
                assert one.V.shape == (H + 1, S) and np.ndim(one.value) == 0
                np.testing.assert_allclose(one.V, ev.V[i, j], rtol=1e-14)
                np.testing.assert_allclose(small.occupancy(pols[i, j]), occ[i, j], rtol=1e-14)
    # float32 stochastic policies are accepted (and evaluated in float64)
    np.testing.assert_allclose(
        small.value(sto.astype(np.float32)), small.value(sto), rtol=1e-6, atol=1e-6
    )
    ev = small.evaluate(det, return_q=False)
    assert ev.Q is None


def test_suboptimality_is_nonnegative_and_zero_for_the_optimal_policy(small):
    rng = np.random.default_rng(5)
    pols = rng.integers(0, small.A, size=(200, small.H, small.S))
    gap = small.suboptimality(pols)
    assert np.all(gap >= -1e-12)
    assert small.suboptimality(small.backward_induction()[2]) == pytest.approx(0.0, abs=1e-12)
    assert small.suboptimality(uniform_policy(small.H, small.S, small.A)) > 0


def test_module_level_engines_accept_estimated_models():
    """The raw-array engines work on any (P, R), e.g. a sub-stochastic estimate or an
    indicator reward, without the model checks of TabularMDP."""
    rng = np.random.default_rng(6)
    H, S, A = 3, 3, 2
    P = rng.dirichlet(np.ones(S), size=(H, S, A)) * 0.9  # sub-stochastic
    R = rng.normal(size=(H, S, A))  # outside [0, 1]
    start = np.array([0.2, 0.3, 0.5])
    pi = random_stochastic(rng, (H, S), A)
    V_ref, _ = loop_evaluate(P, R, pi)
    ev = policy_evaluation(P, R, pi, start=start)
    np.testing.assert_allclose(ev.V, V_ref, atol=1e-12)
    np.testing.assert_allclose(ev.value, start @ V_ref[0], atol=1e-12)
    d = occupancy_measure(P, start, pi)
    np.testing.assert_allclose((d * R).sum(), ev.value, atol=1e-12)
    # V^π(1_{h,s,a}) = d_h(s,a): evaluation with an indicator reward
    ind = np.zeros((H, S, A))
    ind[2, 1, 0] = 1.0
    assert policy_evaluation(P, ind, pi, start=start).value == pytest.approx(d[2, 1, 0])
    Q, V, _ = backward_induction(P, R)
    np.testing.assert_allclose(V[0], Q[0].max(-1))


# --------------------------------------------------------------------------------------------
# sampling and counts
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reward_kind", ["deterministic", "bernoulli"])
def test_monte_carlo_return_matches_exact_value(reward_kind):
    """Mean sampled return is within 4 standard errors of the exact value (two-sided
    probability of a false failure ≈ 6e-5 for a correct sampler; seeds are fixed)."""
    mdp = TabularMDP.random(5, 3, 6, seed=21, reward_kind=reward_kind, initial="dirichlet")
    rng = np.random.default_rng(22)
    n = 40_000
    policies = [
        behaviour_policy_full_support(rng, mdp.H, mdp.S, mdp.A, 0.05),
        mdp.backward_induction()[2],
    ]
    for pi in policies:
        ep = mdp.sample_arrays(pi, n, rng=rng)
        returns = ep.returns
        se = returns.std(ddof=1) / np.sqrt(n)
        assert abs(returns.mean() - mdp.value(pi)) <= 4 * se + 1e-12


def test_sampling_from_a_start_state_matches_exact_value(small):
    rng = np.random.default_rng(23)
    pi = uniform_policy(small.H, small.S, small.A)
    ep = small.sample_arrays(pi, 40_000, rng=rng, start=2)
    assert np.all(ep.states[:, 0] == 2)
    se = ep.returns.std(ddof=1) / np.sqrt(40_000)
    assert abs(ep.returns.mean() - small.value(pi, start=2)) <= 4 * se


def test_empirical_transition_frequencies_converge_to_P(small):
    """With full-support data, every estimated P̂_h(s'|s,a) is within 5 binomial standard
    errors of P (plus 1/n for rounding), and the error shrinks as n grows."""
    rng = np.random.default_rng(24)
    mu = behaviour_policy_full_support(rng, small.H, small.S, small.A, 0.1)
    errs = []
    for n in (2_000, 200_000):
        ep = small.sample_arrays(mu, n, rng=rng)
        n_sa, n_sas = small.counts(ep.states[:, :-1], ep.actions, ep.states[:, 1:])
        assert n_sa.sum() == n * small.H
        np.testing.assert_array_equal(n_sa, n_sas.sum(-1))
        np.testing.assert_array_equal(n_sa.sum(axis=(1, 2)), n)
        visited = n_sa > 0
        p_hat = n_sas[visited] / n_sa[visited][:, None]
        p = small.P[visited]
        errs.append(np.abs(p_hat - p).max())
        if n == 200_000:
            assert visited.all()
            bound = 5 * np.sqrt(p * (1 - p) / n_sa[visited][:, None]) + 1 / n_sa[visited][:, None]
            assert np.all(np.abs(p_hat - p) <= bound)
    assert errs[1] < errs[0] / 3


def test_counts_match_a_loop_and_accept_final_states(small):
    rng = np.random.default_rng(25)
    ep = small.sample_arrays(uniform_policy(small.H, small.S, small.A), 300, rng=rng)
    ref = loop_counts(ep.states, ep.actions, small.S, small.A)
    for got in (
        counts(ep.states, ep.actions, S=small.S, A=small.A),
        small.counts(ep.states[:, :-1], ep.actions, ep.states[:, 1:]),
    ):
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
        assert got[0].dtype == np.int64
    with pytest.raises(ValueError, match="not in"):
        counts(ep.states, ep.actions + small.A, S=small.S, A=small.A)
    with pytest.raises(ValueError, match="shape"):
        counts(ep.states[:, :-1], ep.actions, S=small.S, A=small.A)
    with pytest.raises(ValueError, match="horizon"):
        small.counts(ep.states[:, :3], ep.actions[:, :2])


def test_bernoulli_rewards_are_binary_with_mean_R():
    mdp = TabularMDP.random(2, 2, 2, seed=31, reward_kind="bernoulli")
    rng = np.random.default_rng(32)
    mu = uniform_policy(mdp.H, mdp.S, mdp.A)
    ep = mdp.sample_arrays(mu, 100_000, rng=rng)
    assert set(np.unique(ep.rewards)) <= {0.0, 1.0}
    s, a = ep.states[:, :-1], ep.actions
    for h in range(mdp.H):
        for si in range(mdp.S):
            for ai in range(mdp.A):
                r = ep.rewards[:, h][(s[:, h] == si) & (a[:, h] == ai)]
                p = mdp.R[h, si, ai]
                assert abs(r.mean() - p) <= 5 * np.sqrt(p * (1 - p) / len(r)) + 1e-12


def test_deterministic_rewards_are_the_means(small):
    ep = small.sample_arrays(uniform_policy(small.H, small.S, small.A), 100, rng=0)
    h = np.arange(small.H)
    np.testing.assert_array_equal(ep.rewards, small.R[h, ep.states[:, :-1], ep.actions])


def test_sampler_follows_policy_and_never_takes_zero_probability_outcomes():
    """Zero-probability actions and transitions are never sampled (exact inverse CDF), a
    deterministic policy is followed exactly, and behaviour_probs are π_h(a|s)."""
    rng = np.random.default_rng(33)
    H, S, A = 4, 5, 4
    P = rng.dirichlet(np.ones(S), size=(H, S, A))
    P[..., 0] = 0.0  # state 0 is never reached after the start
    P[..., -1] = 0.0  # nor the last state (a zero at the end of each CDF row)
    P /= P.sum(-1, keepdims=True)
    mdp = TabularMDP(P, rng.random((H, S, A)), np.eye(S)[0])
    pi = random_stochastic(rng, (H, S), A)
    pi[..., 0] = 0.0
    pi[..., -1] = 0.0
    pi /= pi.sum(-1, keepdims=True)
    ep = mdp.sample_arrays(pi, 20_000, rng=rng)
    assert np.all(ep.states[:, 0] == 0)
    assert np.all((ep.states[:, 1:] != 0) & (ep.states[:, 1:] != S - 1))
    assert np.all((ep.actions != 0) & (ep.actions != A - 1))
    h = np.arange(H)
    np.testing.assert_array_equal(ep.behaviour_probs, pi[h, ep.states[:, :-1], ep.actions])
    det = rng.integers(0, A, size=(H, S))
    ep = mdp.sample_arrays(det, 500, rng=rng)
    np.testing.assert_array_equal(ep.actions, det[h, ep.states[:, :-1]])
    np.testing.assert_array_equal(ep.behaviour_probs, 1.0)
    assert mdp.sample_arrays(det, 10, rng=rng, record_probs=False).behaviour_probs is None


def test_per_episode_policies(small):
    """A stack with one policy per episode: episode i follows policy i."""
    rng = np.random.default_rng(34)
    H, S, A = small.H, small.S, small.A
    n = 300
    det = rng.integers(0, A, size=(n, H, S))
    ep = small.sample_arrays(det, n, rng=rng)
    h = np.arange(H)
    np.testing.assert_array_equal(ep.actions, det[np.arange(n)[:, None], h, ep.states[:, :-1]])
    sto = random_stochastic(rng, (n, H, S), A)
    ep = small.sample_arrays(sto, n, rng=rng)
    expected = sto[np.arange(n)[:, None], h, ep.states[:, :-1], ep.actions]
    np.testing.assert_array_equal(ep.behaviour_probs, expected)
    with pytest.raises(ValueError, match="one per episode"):
        small.sample_arrays(sto[:10], n, rng=rng)


def test_same_seed_same_episodes(small):
    mu = uniform_policy(small.H, small.S, small.A)
    a = small.sample_arrays(mu, 50, rng=7)
    b = small.sample_arrays(mu, 50, rng=np.random.default_rng(7))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    c = small.sample_arrays(mu, 50, rng=8)
    assert not np.array_equal(a.states, c.states)


def test_inverse_cdf_matches_searchsorted():
    rng = np.random.default_rng(35)
    for K in (1, 2, 3, 7, 64, 200):
        p = rng.dirichlet(np.ones(K), size=10)
        cdf = np.cumsum(p, -1)
        cdf /= cdf[:, -1:]
        cdf[:, -1] = 1.0
        rows = rng.integers(0, 10, size=5000)
        u = rng.random(5000)
        expected = np.array(
            [np.searchsorted(cdf[r], x, side="right") for r, x in zip(rows, u, strict=True)]
        )
        np.testing.assert_array_equal(_inverse_cdf(cdf, rows, u), expected)


# --------------------------------------------------------------------------------------------
# dataset
# --------------------------------------------------------------------------------------------


def test_sample_builds_a_valid_dataset_with_time_limit_flags(small):
    from privrl.data import dataset as dataset_mod

    rng = np.random.default_rng(41)
    mu = behaviour_policy_full_support(rng, small.H, small.S, small.A, 0.05)
    n, H = 25, small.H
    ds = small.sample(mu, n, rng=np.random.default_rng(42))
    ep = small.sample_arrays(mu, n, rng=np.random.default_rng(42))
    assert isinstance(ds, dataset_mod.TrajectoryDataset)
    offsets = np.asarray(ds.episode_offsets)
    np.testing.assert_array_equal(offsets, np.arange(n + 1) * H)
    assert offsets.dtype == np.int64
    obs = np.asarray(ds.observations)
    assert obs.shape[0] == n * H + n  # final observation of every episode included
    for i in (0, 7, n - 1):
        np.testing.assert_array_equal(obs[offsets[i] + i : offsets[i + 1] + i + 1], ep.states[i])
    np.testing.assert_array_equal(np.asarray(ds.actions), ep.actions.ravel())
    np.testing.assert_array_equal(np.asarray(ds.rewards), ep.rewards.ravel())
    np.testing.assert_array_equal(np.asarray(ds.behaviour_probs), ep.behaviour_probs.ravel())
    term = np.asarray(ds.terminated).reshape(n, H)
    trunc = np.asarray(ds.truncated).reshape(n, H)
    assert not term.any()
    assert trunc[:, -1].all() and not trunc[:, :-1].any()
    meta = ds.metadata
    assert meta.horizon == H and meta.discount == 1.0
    assert meta.observation_space == gym.spaces.Discrete(small.S)
    assert meta.action_space == gym.spaces.Discrete(small.A)
    assert meta.extra["reward_kind"] == "deterministic"
    no_probs = small.sample(mu, 3, rng=0, record_probs=False)
    assert no_probs.behaviour_probs is None
    back = episodes_from_dataset(ds)  # round trip to [n, H] arrays
    for x, y in zip(back, ep, strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(episodes_from_dataset(no_probs).behaviour_probs is None, True)
    with pytest.raises(ValueError, match="must have H = 4"):
        episodes_from_dataset(ds, horizon=4)


# --------------------------------------------------------------------------------------------
# Gymnasium wrapper
# --------------------------------------------------------------------------------------------


def test_env_passes_gymnasium_checker():
    for kind in ("deterministic", "bernoulli"):
        env = TabularMDPEnv(TabularMDP.random(4, 3, 5, seed=51, reward_kind=kind))
        check_env(env, skip_render_check=True)


def test_env_episode_truncates_at_horizon_and_matches_exact_value():
    mdp = TabularMDP.random(3, 2, 4, seed=52, reward_kind="bernoulli", initial="dirichlet")
    env = TabularMDPEnv(mdp)
    pi = mdp.backward_induction()[2]
    returns = []
    obs, info = env.reset(seed=53)
    for _ in range(4000):
        obs, info = env.reset()
        total, h = 0.0, 0
        while True:
            assert info["h"] == h
            obs, r, terminated, truncated, info = env.step(int(pi[h, obs]))
            total += r
            h += 1
            assert not terminated
            if truncated:
                break
        assert h == mdp.H
        returns.append(total)
    with pytest.raises(RuntimeError, match="horizon"):
        env.step(0)
    returns = np.array(returns)
    se = returns.std(ddof=1) / np.sqrt(len(returns))
    assert abs(returns.mean() - mdp.optimal_value()) <= 4 * se
    obs, _ = env.reset(options={"state": 2})
    assert obs == 2


def test_register_envs_is_idempotent_and_makes_the_env():
    register_envs()
    register_envs()
    assert ENV_ID in gym.registry
    env = gym.make(ENV_ID, S=4, A=2, H=3, seed=5)
    env.reset(seed=0)
    assert env.observation_space == gym.spaces.Discrete(4)
    assert env.action_space == gym.spaces.Discrete(2)
    steps = 0
    truncated = False
    while not truncated:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        assert not terminated
        steps += 1
    assert steps == 3
    same = gym.make(ENV_ID, S=4, A=2, H=3, seed=5).unwrapped.mdp
    np.testing.assert_array_equal(same.P, env.unwrapped.mdp.P)  # seed fixes the instance
    env.close()


# --------------------------------------------------------------------------------------------
# policies and construction
# --------------------------------------------------------------------------------------------


def test_policy_helpers():
    rng = np.random.default_rng(61)
    H, S, A = 3, 4, 5
    q = rng.normal(size=(H, S, A))
    np.testing.assert_allclose(uniform_policy(H, S, A).sum(-1), 1.0)
    g = greedy_policy(q)
    assert g.dtype == np.int64 and g.shape == (H, S)
    np.testing.assert_array_equal(to_stochastic(g, A).argmax(-1), g)
    eg = epsilon_greedy_policy(q, 0.2)
    np.testing.assert_allclose(eg.sum(-1), 1.0)
    np.testing.assert_allclose(eg.min(-1), 0.2 / A)
    np.testing.assert_allclose(eg.max(-1), 0.8 + 0.2 / A)
    sm = softmax_policy(q, temperature=0.5)
    np.testing.assert_allclose(sm.sum(-1), 1.0)
    np.testing.assert_array_equal(sm.argmax(-1), g)
    np.testing.assert_allclose(softmax_policy(1e6 * q, 1.0).argmax(-1), g)  # stable
    cold = softmax_policy(q, temperature=1e-4)
    np.testing.assert_allclose(cold, to_stochastic(g, A), atol=1e-12)
    mu = behaviour_policy_full_support(rng, H, S, A, 0.1)
    assert mu.shape == (H, S, A) and np.all(mu >= 0.1 - 1e-15)
    np.testing.assert_allclose(mu.sum(-1), 1.0)
    np.testing.assert_allclose(behaviour_policy_full_support(0, H, S, A, 1 / A), 1 / A)
    with pytest.raises(ValueError, match="min_prob"):
        behaviour_policy_full_support(rng, H, S, A, 0.3)
    with pytest.raises(ValueError, match="epsilon"):
        epsilon_greedy_policy(q, 1.5)
    with pytest.raises(ValueError, match="max_policies"):
        enumerate_deterministic_policies(10, 10, 2)


def test_random_mdp_options():
    a = TabularMDP.random(3, 2, 4, seed=71)
    b = TabularMDP.random(3, 2, 4, rng=np.random.default_rng(71))
    np.testing.assert_array_equal(a.P, b.P)
    np.testing.assert_array_equal(a.R, b.R)
    assert (a.H, a.S, a.A) == (4, 3, 2)
    assert not np.allclose(a.P[0], a.P[1])  # non-stationary by default
    np.testing.assert_allclose(a.d1, 1 / 3)
    st_ = TabularMDP.random(3, 2, 4, seed=71, stationary=True, reward="binary")
    for h in range(1, 4):
        np.testing.assert_array_equal(st_.P[h], st_.P[0])
        np.testing.assert_array_equal(st_.R[h], st_.R[0])
    assert set(np.unique(st_.R)) <= {0.0, 1.0}
    with pytest.raises(ValueError, match="not both"):
        TabularMDP.random(3, 2, 4, seed=1, rng=np.random.default_rng(1))
    assert not a.P.flags.writeable  # cached results stay valid
    with pytest.raises(ValueError):
        a.P[0, 0, 0, 0] = 1.0


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------


def _bad_models():
    rng = np.random.default_rng(81)
    H, S, A = 2, 3, 2
    P = rng.dirichlet(np.ones(S), size=(H, S, A))
    R = rng.random((H, S, A))
    d1 = np.full(S, 1 / S)
    P_sum = P.copy()
    P_sum[1, 2, 0] *= 1.1
    P_neg = P.copy()
    P_neg[0, 1, 1] = [1.5, -0.5, 0.0]
    P_nan = P.copy()
    P_nan[0, 0, 0, 0] = np.nan
    R_hi = R.copy()
    R_hi[1, 0, 1] = 1.2
    return [
        ((P_sum, R, d1), {}, r"P row \[h=1, s=2, a=0\] sums to"),
        ((P_neg, R, d1), {}, r"negative probability -0.5 at \[h=0, s=1, a=1, s'=1\]"),
        ((P_nan, R, d1), {}, r"non-finite entry at \[h=0, s=0, a=0, s'=0\]"),
        ((P[..., :2], R, d1), {}, r"P must have shape \[H, S, A, S\]"),
        ((P, R[0], d1), {}, r"R must have shape"),
        ((P, R_hi, d1), {}, r"R\[h=1, s=0, a=1\] = 1.2 is not in \[0, 1\]"),
        ((P, R, np.ones(S)), {}, "d1 sums to 3"),
        ((P, R, np.ones(S + 1) / (S + 1)), {}, r"d1 must have shape"),
        ((P, R, d1), {"reward_kind": "gaussian"}, "reward_kind must be one of"),
    ]


@pytest.mark.parametrize(("args", "kwargs", "match"), _bad_models())
def test_invalid_models_are_rejected_with_the_location(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        TabularMDP(*args, **kwargs)


def test_invalid_policies_are_rejected_with_the_location(small):
    H, S, A = small.H, small.S, small.A
    det = np.zeros((2, 3, H, S), dtype=np.int64)
    det[1, 2, 3, 1] = A
    with pytest.raises(ValueError, match=r"deterministic policy\[1, 2, h=3, s=1\] = 3"):
        small.value(det)
    sto = np.full((2, H, S, A), 1 / A)
    sto[1, 4, 0] = 0.5
    with pytest.raises(ValueError, match=r"stochastic policy row \[1, h=4, s=0\] sums to"):
        small.evaluate(sto)
    with pytest.raises(ValueError, match=r"\[\.\.\., H, S, A\]"):
        small.value(np.full((H, S, A + 1), 1 / (A + 1)))
    with pytest.raises(ValueError, match=r"\[\.\.\., H, S\]"):
        small.occupancy(np.zeros((H + 1, S), dtype=int))
    with pytest.raises(TypeError, match="dtype bool"):
        small.value(np.ones((H, S), dtype=bool))
    with pytest.raises(ValueError, match="start state 9"):
        small.value(det[0, 0], start=9)
    with pytest.raises(ValueError, match="start distribution"):
        small.value(det[0, 0], start=np.ones(S))
    with pytest.raises(ValueError, match=r"not in \[0, 3\)"):
        small.sample_arrays(np.full((H, S), A), 5, rng=0)
