"""SDP-PE's batch simulations have the law of stepping every episode through the Gymnasium
wrapper one at a time: `rollout_counts` (all episodes of a block as one array computation) and
`sample_counts` (a batch's counts drawn from their law: per-episode starts, then per policy and
layer multinomial next-state counts and binomial reward counts), which SDP-PE runs.

Property checked, for each: for a fixed list of per-episode policies, (1) the law of one episode's
statistics (its trajectory and rewards, read off the counts of a one-episode batch) and (2) the
law of a batch's total reward (sensitive to dependence between the episodes of a block) are the
same under both simulations: two-sample chi-square tests do not reject at level 1e-3. A
negative control (the loop on an MDP with one transition moved by 0.3) is rejected at the same
sample size, so the tests can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from privrl.envs.tabular import TabularMDP, TabularMDPEnv
from privrl.online.common import rollout_counts, sample_counts

SIMULATORS = [rollout_counts, sample_counts]

LEVEL = 1e-3


def _mdp() -> TabularMDP:
    # stochastic transitions from every (h, s, a) and Bernoulli rewards: S = 2, A = 2, H = 3
    return TabularMDP.random(2, 2, 3, seed=3, reward_kind="bernoulli")


def _policies() -> np.ndarray:
    return np.array([[[0, 1], [1, 0], [0, 0]], [[1, 1], [0, 1], [1, 0]]], dtype=np.int64)


def _loop_episode(env: TabularMDPEnv, policy: np.ndarray) -> tuple:
    s, _ = env.reset()
    states, rewards = [int(s)], []
    for h in range(policy.shape[0]):
        s, r, _, _, _ = env.step(int(policy[h, s]))
        states.append(int(s))
        rewards.append(int(r))
    return (*states, *rewards)


def _vector_episode(simulate, mdp: TabularMDP, policies: np.ndarray, i: int, rng) -> tuple:
    """One episode through a batch simulator (a batch of one), decoded from its counts."""
    counts, starts = simulate(mdp, policies, np.array([i]), rng)
    states, rewards = [int(starts[0])], []
    for h in range(mdp.H):
        s = states[-1]
        (a,) = np.flatnonzero(counts.n_sa[h, s])
        (s2,) = np.flatnonzero(counts.n_sas[h, s, a])
        states.append(int(s2))
        rewards.append(round(float(counts.r_sum[h, s, a])))
    return (*states, *rewards)


def _p_value(a: list, b: list) -> float:
    cats = sorted(set(a) | set(b))
    index = {c: j for j, c in enumerate(cats)}
    table = np.zeros((2, len(cats)))
    for row, sample in enumerate((a, b)):
        for c in sample:
            table[row, index[c]] += 1
    keep = table.sum(axis=0) >= 10  # pool rare categories into one column
    pooled = np.column_stack([table[:, keep], table[:, ~keep].sum(axis=1)])
    pooled = pooled[:, pooled.sum(axis=0) > 0]
    return float(chi2_contingency(pooled)[1])


@pytest.mark.parametrize("simulate", SIMULATORS, ids=lambda f: f.__name__)
def test_one_episode_has_the_law_of_the_stepping_loop(simulate) -> None:
    mdp, policies = _mdp(), _policies()
    n = 3000
    which = np.random.default_rng(0).integers(2, size=n)
    rng = np.random.default_rng(1)
    vec = [(int(i), *_vector_episode(simulate, mdp, policies, int(i), rng)) for i in which]
    env = TabularMDPEnv(mdp)
    env.reset(seed=2)
    loop = [(int(i), *_loop_episode(env, policies[i])) for i in which]
    assert _p_value(vec, loop) > LEVEL
    # negative control: the same loop on a perturbed MDP is told apart at this n
    P = mdp.P.copy()
    P[1, 0, 1] = np.clip(P[1, 0, 1] + np.array([0.3, -0.3]), 0.01, 0.99)
    P[1, 0, 1] /= P[1, 0, 1].sum()
    other = TabularMDP(P, mdp.R, mdp.d1, reward_kind="bernoulli")
    env2 = TabularMDPEnv(other)
    env2.reset(seed=2)
    wrong = [(int(i), *_loop_episode(env2, policies[i])) for i in which]
    assert _p_value(vec, wrong) < LEVEL


@pytest.mark.parametrize("simulate", SIMULATORS, ids=lambda f: f.__name__)
def test_batch_totals_have_the_law_of_the_stepping_loop(simulate) -> None:
    """Episodes of one block are independent: the total reward of 8-episode batches."""
    mdp, policies = _mdp(), _policies()
    batches, m = 800, 8
    index = np.array([0, 1] * (m // 2))
    rng = np.random.default_rng(4)
    vec = [round(float(simulate(mdp, policies, index, rng)[0].r_sum.sum())) for _ in range(batches)]
    env = TabularMDPEnv(mdp)
    env.reset(seed=5)
    loop = [
        sum(sum(_loop_episode(env, policies[i])[mdp.H + 1 :]) for i in index)
        for _ in range(batches)
    ]
    assert _p_value(vec, loop) > LEVEL
    # the variance of the totals matches too (dependence would change it)
    assert 0.8 < np.var(vec) / np.var(loop) < 1.25
