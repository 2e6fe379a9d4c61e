"""Collection: exact episode counts, correct autoreset handling, reproducibility, propensities."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from privrl.data import DatasetError, collect
from privrl.data.collect import collection_seeds
from privrl.policies import EpsilonGreedy, TabularPolicy, UniformRandomPolicy, sample_from_probs


def cartpole(n_episodes: int = 13, seed: int = 0, num_envs: int = 4, **kw):
    policy = UniformRandomPolicy(gym.spaces.Discrete(2))
    return collect(
        "CartPole-v1",
        policy,
        n_episodes=n_episodes,
        seed=seed,
        num_envs=num_envs,
        progress=False,
        **kw,
    )


def test_cartpole_counts_flags_and_probabilities() -> None:
    ds = cartpole()
    assert ds.n_episodes == 13
    assert ds.observations.shape[0] == ds.n_transitions + ds.n_episodes
    last = ds.episode_offsets[1:] - 1
    # every CartPole episode ends with exactly one flag (fall: terminated, 500 steps: truncated)
    assert np.all(ds.terminated[last] ^ ds.truncated[last])
    assert ds.behaviour_probs is not None
    np.testing.assert_array_equal(ds.behaviour_probs, 0.5)
    assert ds.metadata.env_id == "CartPole-v1" and ds.metadata.horizon == 500
    assert ds.metadata.extra["seed"] == 0


def test_seed_reproducibility() -> None:
    assert cartpole(seed=5).equals(cartpole(seed=5))
    assert not cartpole(seed=5).equals(cartpole(seed=6), check_metadata=False)


@pytest.mark.parametrize("num_envs", [1, 3])
def test_episodes_replay_exactly_in_a_plain_env(num_envs: int) -> None:
    """Sub-env i records episodes i, i + k, ...; replaying their actions in a fresh env seeded
    the same way (first reset seeded, later resets unseeded as in autoreset) reproduces every
    observation, reward and flag: no autoreset step leaked in and no final obs was lost."""
    ds = cartpole(n_episodes=7, seed=2, num_envs=num_envs)
    env_seeds, _ = collection_seeds(2, num_envs)
    for i in range(num_envs):
        env = gym.make("CartPole-v1")
        for k, j in enumerate(range(i, ds.n_episodes, num_envs)):
            ep = ds.episode(j)
            obs, _ = env.reset(seed=env_seeds[i]) if k == 0 else env.reset()
            observations, rewards, terms, truncs = [obs], [], [], []
            for a in ep.actions:
                obs, r, term, trunc, _ = env.step(int(a))
                observations.append(obs)
                rewards.append(r)
                terms.append(term)
                truncs.append(trunc)
            np.testing.assert_array_equal(ep.observations, np.array(observations))
            np.testing.assert_array_equal(ep.rewards, rewards)
            np.testing.assert_array_equal(ep.terminated, terms)
            np.testing.assert_array_equal(ep.truncated, truncs)
        env.close()


def test_pendulum_box_actions_with_max_steps() -> None:
    env = gym.make("Pendulum-v1")
    ds = collect(
        "Pendulum-v1",
        UniformRandomPolicy(env.action_space),
        n_episodes=5,
        seed=1,
        num_envs=2,
        max_steps=12,
        progress=False,
    )
    assert ds.n_episodes == 5 and ds.n_transitions == 60
    np.testing.assert_array_equal(ds.episode_lengths, 12)
    assert ds.truncated.sum() == 5 and not ds.terminated.any()
    assert ds.actions.shape == (60, 1) and ds.actions.dtype == np.float32
    assert ds.observations.shape == (65, 3)
    assert ds.behaviour_probs is None  # continuous actions: no propensities
    assert ds.metadata.horizon == 12


def test_env_factory_unit_ids_and_progress_callback() -> None:
    """Progress goes to the caller's callback (the library draws nothing): one call per
    batch of finished episodes, counting up to the total."""
    calls: list[tuple[str, int, int]] = []
    ds = collect(
        lambda: gym.make("CartPole-v1"),
        UniformRandomPolicy(gym.spaces.Discrete(2)),
        n_episodes=4,
        seed=0,
        num_envs=2,
        unit_ids=[10, 11, 10, 12],
        progress=lambda label, done, total: calls.append((label, done, total)),
    )
    np.testing.assert_array_equal(ds.unit_ids, [10, 11, 10, 12])
    assert calls and calls[-1][1:] == (4, 4)
    assert [done for _, done, _ in calls] == sorted(done for _, done, _ in calls)
    assert all(label.startswith("collecting") and total == 4 for label, _, total in calls)
    assert ds.metadata.env_id == "CartPole-v1"
    with pytest.raises(DatasetError, match="unit_ids"):
        cartpole(n_episodes=3, unit_ids=[1, 2])


def test_tabular_behaviour_probabilities_recorded() -> None:
    """FrozenLake (Discrete obs): recorded propensity = action_probs(obs)[action]."""
    rng = np.random.default_rng(0)
    table = rng.dirichlet(np.ones(4), size=16)
    policy = TabularPolicy(table)
    ds = collect(
        "FrozenLake-v1",
        policy,
        n_episodes=20,
        seed=3,
        num_envs=4,
        progress=False,
        env_kwargs={"is_slippery": True},
    )
    tr = ds.transitions()
    assert ds.observations.dtype == np.int64 and ds.observations.ndim == 1
    np.testing.assert_allclose(ds.behaviour_probs, table[tr.observations, tr.actions])


def test_inconsistent_policy_is_rejected() -> None:
    class Liar:
        def act(self, obs, rng):
            return np.ones(len(obs), dtype=np.int64)

        def action_probs(self, obs):
            return np.tile([1.0, 0.0], (len(obs), 1))

    with pytest.raises(DatasetError, match="act must sample from action_probs"):
        collect("CartPole-v1", Liar(), n_episodes=2, seed=0, num_envs=2, progress=False)


def test_policy_helpers() -> None:
    rng = np.random.default_rng(0)
    probs = np.array([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    draws = np.stack([sample_from_probs(probs, rng) for _ in range(2000)])
    assert np.all(draws[:, 0] == 1) and set(np.unique(draws[:, 1])) == {0, 2}
    assert abs((draws[:, 1] == 0).mean() - 0.5) < 0.05
    greedy = TabularPolicy(np.array([2, 0, 1]))
    eps = EpsilonGreedy(greedy, n_actions=3, epsilon=0.3)
    np.testing.assert_allclose(eps.action_probs(np.array([0]))[0], [0.1, 0.1, 0.8])


def test_terminal_at_the_time_limit_is_terminal() -> None:
    # FrozenLake with a 2-step limit: an episode that falls in a hole at step 2 gets both
    # flags from Gymnasium; the dataset records it as terminated only (else it is refused).
    policy = UniformRandomPolicy(gym.spaces.Discrete(4))
    ds = collect("FrozenLake-v1", policy, n_episodes=200, seed=0, max_steps=2, progress=False)
    last = ds.episode_offsets[1:] - 1
    assert np.all(ds.terminated[last] ^ ds.truncated[last])
    assert not np.any(ds.terminated & ds.truncated)
    assert ds.terminated[last][ds.episode_lengths == 2].any()
