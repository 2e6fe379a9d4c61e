"""TrajectoryDataset structure: views, gathers, splits, returns and the d3rlpy layout."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from privrl.data import DatasetError, DatasetMetadata, MDPArrays, TrajectoryDataset


def random_dataset(
    seed: int = 0,
    n_ep: int = 12,
    max_len: int = 7,
    units: bool = True,
    probs: bool = True,
    discrete_obs: bool = False,
) -> TrajectoryDataset:
    """Random valid dataset with every kind of episode end (terminated, truncated, cut)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, n_ep)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    n_t = int(offsets[-1])
    ends = rng.integers(0, 3, n_ep)  # 0 terminated, 1 truncated, 2 neither
    term = np.zeros(n_t, bool)
    trunc = np.zeros(n_t, bool)
    term[offsets[1:] - 1] = ends == 0
    trunc[offsets[1:] - 1] = ends == 1
    if discrete_obs:
        obs = rng.integers(0, 6, n_t + n_ep)
        obs_space: spaces.Space = spaces.Discrete(6)
    else:
        obs = rng.normal(size=(n_t + n_ep, 3)).astype(np.float32)
        obs_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
    return TrajectoryDataset(
        observations=obs,
        actions=rng.integers(0, 4, n_t),
        rewards=rng.normal(size=n_t),
        terminated=term,
        truncated=trunc,
        episode_offsets=offsets,
        behaviour_probs=rng.uniform(0.05, 1.0, n_t) if probs else None,
        unit_ids=rng.integers(100, 105, n_ep) if units else None,
        metadata=DatasetMetadata(
            obs_space, spaces.Discrete(4), env_id="Toy-v0", discount=0.9, extra={"seed": seed}
        ),
    )


def test_counts_and_lengths() -> None:
    ds = random_dataset()
    assert ds.n_episodes == 12
    assert ds.episode_lengths.sum() == ds.n_transitions
    assert ds.observations.shape[0] == ds.n_transitions + ds.n_episodes
    assert len(ds) == 12


def test_episode_views_are_views_of_the_right_rows() -> None:
    ds = random_dataset()
    for i, ep in enumerate(ds.iter_episodes()):
        s, e = ds.episode_offsets[i], ds.episode_offsets[i + 1]
        assert ep.length == e - s
        assert np.shares_memory(ep.observations, ds.observations)
        assert np.shares_memory(ep.actions, ds.actions)
        np.testing.assert_array_equal(ep.observations, ds.observations[s + i : e + i + 1])
        np.testing.assert_array_equal(ep.rewards, ds.rewards[s:e])
        assert ep.unit_id == ds.unit_ids[i]
    assert ds.episode(-1).index == ds.n_episodes - 1
    with pytest.raises(IndexError):
        ds.episode(ds.n_episodes)


def test_arrays_are_read_only_and_inputs_not_frozen() -> None:
    rewards = np.zeros(3)
    ds = TrajectoryDataset(
        observations=np.zeros((4, 1)),
        actions=np.zeros((3, 1)),
        rewards=rewards,
        terminated=np.array([False, False, True]),
        truncated=np.zeros(3, bool),
        episode_offsets=np.array([0, 3]),
    )
    with pytest.raises(ValueError):
        ds.rewards[0] = 1.0
    with pytest.raises(ValueError):
        ds.episode(0).observations[0] = 1.0
    rewards[0] = 5.0  # the caller's own array stays writable (we took a view, not a copy)


def test_transitions_match_episode_loop() -> None:
    ds = random_dataset()
    tr = ds.transitions()
    obs, nxt = [], []
    for ep in ds.iter_episodes():
        obs.append(ep.observations[:-1])
        nxt.append(ep.next_observations)
    np.testing.assert_array_equal(tr.observations, np.concatenate(obs))
    np.testing.assert_array_equal(tr.next_observations, np.concatenate(nxt))
    np.testing.assert_array_equal(tr.actions, ds.actions)
    np.testing.assert_array_equal(
        ds.transition_episode_index, np.repeat(np.arange(12), ds.episode_lengths)
    )
    np.testing.assert_array_equal(
        ds.transition_steps, np.concatenate([np.arange(n) for n in ds.episode_lengths])
    )


def test_sample_transitions_consistent_and_reproducible() -> None:
    ds = random_dataset()
    a = ds.sample_transitions(64, np.random.default_rng(5))
    b = ds.sample_transitions(64, 5)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    tr = ds.transitions()
    # every sampled row is a real transition: find it by (obs, next_obs, reward)
    key = {
        (o.tobytes(), n.tobytes(), r)
        for o, n, r in zip(tr.observations, tr.next_observations, tr.rewards, strict=True)
    }
    for o, n, r in zip(a.observations, a.next_observations, a.rewards, strict=True):
        assert (o.tobytes(), n.tobytes(), r) in key


def test_subset_matches_episodes_and_keeps_metadata() -> None:
    ds = random_dataset()
    idx = [7, 2, 2, 11, 0]
    sub = ds.subset(idx)
    assert sub.n_episodes == 5
    assert sub.metadata is ds.metadata
    for j, i in enumerate(idx):
        a, b = sub.episode(j), ds.episode(i)
        for name in (
            "observations",
            "actions",
            "rewards",
            "terminated",
            "truncated",
            "behaviour_probs",
        ):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert a.unit_id == b.unit_id
    sub.validate()  # a subset of valid episodes is valid


def test_contiguous_subset_uses_slices() -> None:
    ds = random_dataset()
    sub = ds.subset(np.arange(3, 8))
    assert np.shares_memory(sub.observations, ds.observations)
    assert sub.equals(ds.subset([3, 4, 5, 6, 7]))
    empty = ds.subset([])
    assert empty.n_episodes == 0 and empty.n_transitions == 0
    assert empty.returns().shape == (0,)


def test_sample_episodes_reproducible() -> None:
    ds = random_dataset()
    assert ds.sample_episodes(5, 3).equals(ds.sample_episodes(5, np.random.default_rng(3)))
    assert not ds.sample_episodes(5, 3).equals(ds.sample_episodes(5, 4))
    assert ds.sample_episodes(30, 0, replace=True).n_episodes == 30


@pytest.mark.parametrize("by", ["episode", "unit"])
def test_split_disjoint_complete_reproducible(by: str) -> None:
    ds = random_dataset(n_ep=40)
    a, b = ds.split(0.25, 11, by=by)
    a2, b2 = ds.split(0.25, np.random.default_rng(11), by=by)
    assert a.equals(a2) and b.equals(b2)
    assert a.n_episodes + b.n_episodes == ds.n_episodes
    assert a.n_transitions + b.n_transitions == ds.n_transitions
    # rewards identify episodes here (continuous random): sides are disjoint
    ra, rb = set(a.returns().tolist()), set(b.returns().tolist())
    assert not ra & rb and ra | rb == set(ds.returns().tolist())
    if by == "unit":
        assert not set(a.units().tolist()) & set(b.units().tolist())
        assert a.units().shape[0] == round(0.25 * ds.units().shape[0])
    else:
        assert a.n_episodes == 10


def test_split_by_unit_without_unit_ids_is_by_episode() -> None:
    ds = random_dataset(units=False)
    a, b = ds.split(0.5, 1, by="unit")
    assert a.n_episodes == 6 and b.n_episodes == 6


def test_concat_round_trip_and_rules() -> None:
    ds = random_dataset()
    a, b = ds.subset(range(5)), ds.subset(range(5, 12))
    assert TrajectoryDataset.concat([a, b]).equals(ds)
    with pytest.raises(DatasetError, match="unit_ids"):
        TrajectoryDataset.concat([a, random_dataset(units=False)])
    with pytest.raises(DatasetError, match="behaviour_probs"):
        TrajectoryDataset.concat([a, random_dataset(probs=False)])
    with pytest.raises(DatasetError, match="observation space"):
        TrajectoryDataset.concat([a, random_dataset(discrete_obs=True)])
    mixed = TrajectoryDataset.concat([a, random_dataset(seed=1)])
    assert mixed.metadata.extra == {"concat_of": [{"seed": 0}, {"seed": 1}]}


def test_units() -> None:
    ds = random_dataset(n_ep=30)
    groups = ds.by_unit()
    assert sorted(groups) == ds.units().tolist()
    for uid, idx in groups.items():
        np.testing.assert_array_equal(idx, ds.unit_episodes(uid))
        assert np.all(ds.unit_ids[idx] == uid)
    assert sum(len(v) for v in groups.values()) == 30
    plain = random_dataset(units=False)
    np.testing.assert_array_equal(plain.units(), np.arange(12))
    assert plain.n_units == 12


def test_returns_match_episode_loop() -> None:
    ds = random_dataset()
    for gamma in (None, 1.0, 0.5):
        g = ds.metadata.discount if gamma is None else gamma
        expected = [ep.discounted_return(g) for ep in ds.iter_episodes()]
        np.testing.assert_allclose(ds.returns(gamma), expected, rtol=1e-12)


def test_from_episodes_round_trip() -> None:
    ds = random_dataset()
    episodes = [
        {
            "observations": e.observations,
            "actions": e.actions,
            "rewards": e.rewards,
            "terminated": e.terminated,
            "truncated": e.truncated,
            "behaviour_probs": e.behaviour_probs,
            "unit_id": e.unit_id,
        }
        for e in ds.iter_episodes()
    ]
    assert TrajectoryDataset.from_episodes(episodes, metadata=ds.metadata).equals(ds)
    bad = [dict(episodes[0]), dict(episodes[1])]
    bad[1]["observations"] = bad[1]["observations"][:-1]
    with pytest.raises(DatasetError, match=r"episode 1.*observations.*T \+ 1"):
        TrajectoryDataset.from_episodes(bad)
    bad = [dict(episodes[0]), {k: v for k, v in episodes[1].items() if k != "behaviour_probs"}]
    with pytest.raises(DatasetError, match=r"episode 1.*behaviour_probs"):
        TrajectoryDataset.from_episodes(bad)


def test_mdp_arrays_layout() -> None:
    """Terminated: T rows, terminal on the last. Others: T + 1 rows, timeout on the final obs."""
    ds = random_dataset(n_ep=30)
    m = ds.to_mdp_arrays()
    assert isinstance(m, MDPArrays)
    last = ds.episode_offsets[1:] - 1
    ep_term = ds.terminated[last]
    assert m.observations.shape[0] == ds.n_transitions + int((~ep_term).sum())
    assert m.terminals.sum() == ep_term.sum() and m.timeouts.sum() == (~ep_term).sum()
    assert not np.any((m.terminals > 0) & (m.timeouts > 0))
    assert m.terminals[-1] + m.timeouts[-1] == 1  # d3rlpy drops rows after the last flag
    row = 0
    for ep in ds.iter_episodes():
        t = ep.length
        np.testing.assert_array_equal(m.observations[row : row + t], ep.observations[:-1])
        np.testing.assert_array_equal(m.actions[row : row + t], ep.actions)
        np.testing.assert_array_equal(m.rewards[row : row + t], ep.rewards)
        if ep.terminated[-1]:
            assert m.terminals[row + t - 1] == 1
            row += t
        else:
            np.testing.assert_array_equal(m.observations[row + t], ep.final_observation)
            assert m.timeouts[row + t] == 1 and m.rewards[row + t] == 0
            row += t + 1
    assert set(m.d3rlpy_kwargs()) == {"observations", "actions", "rewards", "terminals", "timeouts"}


def test_mdp_arrays_round_trip() -> None:
    """Lossless except that an unflagged (cut) end comes back as a truncation."""
    ds = random_dataset(probs=False, units=False)
    back = TrajectoryDataset.from_mdp_arrays(*ds.to_mdp_arrays(), metadata=ds.metadata)
    last = ds.episode_offsets[1:] - 1
    trunc = ds.truncated.copy()
    trunc[last] = ~ds.terminated[last]
    expected = TrajectoryDataset(
        observations=ds.observations,
        actions=ds.actions,
        rewards=ds.rewards,
        terminated=ds.terminated,
        truncated=trunc,
        episode_offsets=ds.episode_offsets,
        metadata=ds.metadata,
    )
    assert back.equals(expected)


def test_from_mdp_arrays_zero_fills_terminal_observations_and_says_so() -> None:
    m = random_dataset(probs=False).to_mdp_arrays()
    back = TrajectoryDataset.from_mdp_arrays(*m.d3rlpy_kwargs().values())
    final = back.observations[back.observation_offsets[1:] - 1]
    assert np.all(final[back.terminated[back.episode_offsets[1:] - 1]] == 0)
    assert "terminal_observations" in back.metadata.extra


def test_from_mdp_arrays_rejects_trailing_rows() -> None:
    m = random_dataset(probs=False).to_mdp_arrays()
    kw = {k: np.concatenate([v, v[:1]]) for k, v in m.d3rlpy_kwargs().items()}
    kw["terminals"][-1] = 0
    kw["timeouts"][-1] = 0
    with pytest.raises(DatasetError, match="last row must end an episode"):
        TrajectoryDataset.from_mdp_arrays(**kw)


def test_pickle_round_trip_keeps_arrays_read_only() -> None:
    import pickle

    ds = random_dataset()
    back = pickle.loads(pickle.dumps(ds))
    assert back.equals(ds)
    assert not back.observations.flags.writeable and not back.rewards.flags.writeable


def test_summary_and_equals() -> None:
    ds = random_dataset()
    s = ds.summary()
    assert s["n_episodes"] == 12 and s["n_transitions"] == ds.n_transitions
    assert s["n_terminated"] + s["n_truncated"] + s["n_unflagged_ends"] == 12
    assert s["behaviour_probs"] is True
    assert ds.equals(random_dataset())
    assert not ds.equals(random_dataset(seed=1))
    other = ds.with_metadata(ds.metadata.replace(discount=0.5))
    assert not ds.equals(other) and ds.equals(other, check_metadata=False)
    # returns are undiscounted; a discounted dataset also shows its discounted returns
    assert "discounted_return" not in s or ds.metadata.discount != 1.0
    s_half = other.summary()
    assert s_half["return"]["mean"] == pytest.approx(ds.returns(1.0).mean())
    assert s_half["discounted_return"]["mean"] == pytest.approx(ds.returns(0.5).mean())
    assert s_half["discounted_return"]["mean"] != pytest.approx(s_half["return"]["mean"])


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=10),
    picks=st.lists(st.integers(0, 9), max_size=12),
    seed=st.integers(0, 2**16),
)
def test_property_subset_concat_transitions(
    lengths: list[int], picks: list[int], seed: int
) -> None:
    """For any layout: subset == concat of single-episode subsets; transitions are consistent."""
    rng = np.random.default_rng(seed)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    n_t, n_ep = int(offsets[-1]), len(lengths)
    term = np.zeros(n_t, bool)
    term[offsets[1:] - 1] = rng.random(n_ep) < 0.5
    ds = TrajectoryDataset(
        observations=rng.normal(size=(n_t + n_ep, 2)),
        actions=rng.normal(size=(n_t, 1)),
        rewards=rng.normal(size=n_t),
        terminated=term,
        truncated=np.zeros(n_t, bool),
        episode_offsets=offsets,
    )
    idx = [p % n_ep for p in picks]
    sub = ds.subset(idx)
    if idx:
        assert sub.equals(TrajectoryDataset.concat([ds.subset([i]) for i in idx]))
    tr = sub.transitions()
    if sub.n_transitions:
        cont = sub.transition_steps[1:] > 0
        np.testing.assert_array_equal(tr.next_observations[:-1][cont], tr.observations[1:][cont])
    np.testing.assert_allclose(sub.returns(1.0), [ds.episode(i).rewards.sum() for i in idx])
