"""Consensus filter (privrl.expert.consensus): counts, PrefixQuery and DataRelease.

Properties checked: log-space batched counts equal direct products of the modified experts'
probabilities; count sensitivity ≤ 1 when one expert is removed or added; chunking does not
change the counts; DataRelease draws its noise with the calibrated scales (2/ε', 4/ε') and
threshold θ + (4/ε')·ln(1/δ'); released prefixes never contain the failing action and end in a
timeout; stable ∪ unstable partitions the data (every transition exactly once, expert ids
kept); same seed, same result; bad inputs raise ValueError naming the problem.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from gymnasium import spaces
from scipy.special import logsumexp

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.expert import consensus
from privrl.expert.base import ExpertSet, modified_probs
from privrl.expert.consensus import (
    DataReleaseResult,
    data_release,
    prefix_log_counts,
    prefix_query,
)
from privrl.privacy.events import ApproxDpEvent
from tests.noise import noise_rng


class LinearExperts:
    """m linear experts: greedy_i(s) = argmax_a (W[i, a]·s + b[i, a])."""

    def __init__(self, w: np.ndarray, b: np.ndarray | None = None) -> None:
        self.w = np.asarray(w, dtype=np.float64)
        self.b = np.zeros(self.w.shape[:2]) if b is None else np.asarray(b, dtype=np.float64)

    @property
    def n_experts(self) -> int:
        return self.w.shape[0]

    @property
    def n_actions(self) -> int:
        return self.w.shape[1]

    @property
    def obs_dim(self) -> int:
        return self.w.shape[2]

    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        logits = np.einsum("mad,nd->man", self.w, np.asarray(obs, dtype=np.float64))
        return np.argmax(logits + self.b[:, :, None], axis=1).astype(np.int64)

    def subset(self, idx) -> LinearExperts:
        return LinearExperts(self.w[idx], self.b[idx])


def random_experts(m: int, n_actions: int, d: int, seed: int, spread: float = 1.0):
    rng = noise_rng(seed)
    base = rng.standard_normal((1, n_actions, d))
    return LinearExperts(base + spread * rng.standard_normal((m, n_actions, d)))


def make_dataset(
    experts: LinearExperts,
    per_expert: int,
    lengths: tuple[int, int],
    seed: int,
    flip: float = 0.05,
    probs: bool = True,
    flip_at: np.ndarray | None = None,
) -> TrajectoryDataset:
    """Each expert logs `per_expert` trajectories of its greedy actions on random states,
    with a fraction `flip` of actions replaced at random (or, with `flip_at`, one action
    changed at the given step of each trajectory). Rewards are the global transition index,
    so every transition can be identified after the split. The metadata declare the public
    horizon ``lengths[1]`` (the longest trajectory the generator can produce), the filter's L."""
    rng = noise_rng(seed)
    m, n_act, d = experts.n_experts, experts.n_actions, experts.obs_dim
    n_ep = m * per_expert
    lens = rng.integers(lengths[0], lengths[1] + 1, n_ep)
    off = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    n = int(off[-1])
    units = np.repeat(np.arange(m), per_expert)
    obs = rng.standard_normal((n + n_ep, d)).astype(np.float32)
    ep = np.repeat(np.arange(n_ep), lens)
    step = np.arange(n) - off[ep]
    states = obs[off[ep] + ep + step]
    acts = experts.greedy_actions(states)[units[ep], np.arange(n)]
    if flip_at is None:
        change = rng.random(n) < flip
    else:
        change = step == flip_at[ep]
    if n_act > 1:
        acts[change] = (acts[change] + rng.integers(1, n_act, int(change.sum()))) % n_act
    ends = off[1:] - 1
    term = np.zeros(n, bool)
    trunc = np.zeros(n, bool)
    kind = rng.integers(0, 3, n_ep)  # terminated, truncated, or neither
    term[ends[kind == 0]] = True
    trunc[ends[kind == 1]] = True
    return TrajectoryDataset(
        observations=obs,
        actions=acts,
        rewards=np.arange(n, dtype=np.float64),
        terminated=term,
        truncated=trunc,
        episode_offsets=off,
        behaviour_probs=rng.uniform(0.1, 1.0, n) if probs else None,
        unit_ids=units,
        metadata=DatasetMetadata(
            spaces.Box(-np.inf, np.inf, (d,), np.float32),
            spaces.Discrete(n_act),
            env_id="synth",
            horizon=lengths[1],
        ),
    )


def direct_log_counts(ds: TrajectoryDataset, experts, p_min: float) -> list[np.ndarray]:
    """ln Σ_i Π_j π_i(a_j|s_j) per prefix, straight from modified_probs (products)."""
    out = []
    for ep in ds.iter_episodes():
        probs = modified_probs(
            experts.greedy_actions(ep.observations[:-1]), experts.n_actions, p_min
        )  # [m, T, A]
        taken = probs[:, np.arange(ep.length), ep.actions]  # [m, T]
        out.append(np.log(np.cumprod(taken, axis=1).sum(axis=0)))
    return out


# --------------------------------------------------------------------------- counts


def test_linear_experts_satisfy_protocol():
    assert isinstance(random_experts(3, 2, 2, 0), ExpertSet)


@pytest.mark.parametrize(("n_actions", "p_min"), [(2, 0.02), (3, 0.05), (4, 0.25), (1, 0.3)])
def test_log_space_counts_equal_direct_products(n_actions, p_min):
    ex = random_experts(23, n_actions, 3, seed=n_actions)
    ds = make_dataset(ex, 2, (1, 9), seed=1, flip=0.2)
    got = prefix_log_counts(ds, ex, p_min)
    want = direct_log_counts(ds, ex, p_min)
    assert len(got) == ds.n_episodes
    assert np.array_equal(got.lengths, ds.episode_lengths)
    for j in range(ds.n_episodes):
        np.testing.assert_allclose(got[j], want[j], rtol=1e-12, atol=1e-12)


def test_long_trajectories_match_float64_logsumexp():
    # Lengths > 255 (wider running counters) and experts far behind the best one: expert 1
    # is the opposite of expert 0, so while the data follow expert 0 it falls 190 mismatches
    # behind (past the e^-700 clamping point, 179 mismatches at p_min = 0.02); the data then
    # follow expert 1, which must get back its exact weight (running counts stay exact).
    rng = noise_rng(2)
    v = rng.standard_normal(3)
    w = np.zeros((6, 2, 3))
    w[0, 1], w[1, 1] = v, -v
    w[2:, 1] = rng.standard_normal((4, 3))
    ex = LinearExperts(w)
    states = rng.standard_normal((500, 3))
    greedy = ex.greedy_actions(states)
    actions = np.concatenate([greedy[0, :190], greedy[1, 190:]])
    got = prefix_log_counts((states, actions, np.array([0, 500])), ex, 0.02)[0]
    logp = np.where(greedy == actions[None, :], math.log(0.98), math.log(0.02))
    cum = np.cumsum(logp, axis=1)
    np.testing.assert_allclose(got, logsumexp(cum, axis=0), rtol=1e-12, atol=1e-9)
    assert (cum[0] - cum[1]).max() > 700  # the clamped range was reached ...
    assert cum[1, -1] - cum[0, -1] > 400  # ... and left again: expert 1 is far ahead at the end
    # Every expert far from the data: log count = k·ln 0.02 (≈ -1956 at k = 500), where a
    # product in linear space would underflow to 0.
    alone = prefix_log_counts((states, greedy[1], np.array([0, 500])), ex.subset([0]), 0.02)
    np.testing.assert_allclose(alone.values, np.arange(1, 501) * math.log(0.02), rtol=1e-12)


def test_arrays_input_and_episode_selection_and_chunking_agree():
    ex = random_experts(31, 3, 4, seed=4)
    ds = make_dataset(ex, 2, (1, 30), seed=5)
    full = prefix_log_counts(ds, ex, 0.05)
    pick = np.array([7, 2, 2, 40, 0])
    sel = prefix_log_counts(ds, ex, 0.05, episodes=pick, max_chunk_bytes=1)  # 1 step a call
    for j, e in enumerate(pick):
        np.testing.assert_array_equal(sel[j], full[int(e)])
    t = ds.transitions()
    arr = prefix_log_counts((t.observations, ds.actions, ds.episode_offsets), ex, 0.05)
    np.testing.assert_array_equal(arr.values, full.values)
    assert np.allclose(full.counts(), np.exp(full.values))


def test_count_sensitivity_at_most_one():
    """Removing (or adding) one expert changes every prefix count by at most 1."""
    rng = noise_rng(6)
    ex = random_experts(30, 2, 3, seed=7, spread=0.5)
    ds = make_dataset(ex, 3, (1, 25), seed=8, flip=0.05)
    counts = np.exp(prefix_log_counts(ds, ex, 0.02).values)
    for removed in rng.choice(30, size=8, replace=False):
        keep = np.delete(np.arange(30), removed)
        fewer = np.exp(prefix_log_counts(ds, ex.subset(keep), 0.02).values)
        diff = counts - fewer  # the removed expert's own probability of the prefix
        assert np.all(diff >= -1e-9) and np.all(diff <= 1 + 1e-9)
    # Adding a copy of the best-matching expert moves counts by at most 1 too.
    more = np.exp(prefix_log_counts(ds, ex.subset(np.r_[np.arange(30), 0]), 0.02).values)
    assert np.all(more - counts <= 1 + 1e-9) and np.all(more - counts >= -1e-9)
    assert (more - counts).max() > 0.5  # the bound is nearly attained on short prefixes


def test_count_inputs_validated():
    ex = random_experts(5, 2, 3, seed=9)
    ds = make_dataset(ex, 1, (2, 4), seed=10)
    with pytest.raises(ValueError, match="not admissible"):
        prefix_log_counts(ds, ex, 0.6)
    with pytest.raises(ValueError, match="obs_dim"):
        prefix_log_counts(ds, random_experts(5, 2, 4, seed=0), 0.02)
    with pytest.raises(ValueError, match="n_actions"):
        prefix_log_counts(ds, random_experts(5, 3, 3, seed=0), 0.02)
    with pytest.raises(ValueError, match="ExpertSet"):
        prefix_log_counts(ds, object(), 0.02)
    t = ds.transitions()
    with pytest.raises(ValueError, match="discrete"):
        prefix_log_counts((t.observations, t.actions.astype(float), ds.episode_offsets), ex, 0.02)
    with pytest.raises(ValueError, match="episode_offsets"):
        prefix_log_counts((t.observations, t.actions, ds.episode_offsets[:-1]), ex, 0.02)
    with pytest.raises(ValueError, match="out of range"):
        prefix_log_counts(ds, ex, 0.02, episodes=[5])

    class Broken(LinearExperts):
        def greedy_actions(self, obs):
            return super().greedy_actions(obs)[:, :-1]

    with pytest.raises(ValueError, match="greedy_actions returned"):
        prefix_log_counts(ds, Broken(ex.w), 0.02)


# --------------------------------------------------------------------------- PrefixQuery


def test_prefix_query():
    ex = random_experts(500, 2, 3, seed=11, spread=0.0)  # 500 identical experts
    ds = make_dataset(ex, 1, (5, 5), seed=12, flip=0.0)
    ep = ds.episode(0)
    s, a = ep.observations[:3], ep.actions[:3]
    rng = noise_rng(0)
    # count = 500·0.98³ ≈ 470.6
    assert prefix_query(ex, s, a, 300.0, 1.0, rng=rng)
    assert not prefix_query(ex, s, a, 700.0, 1.0, rng=rng)
    wrong = (a + 1) % 2
    assert not prefix_query(ex, s, wrong, 100.0, 1.0, rng=rng)


def test_prefix_query_noise_scale(monkeypatch):
    seen = []
    real = consensus.prefix_query_noise

    def spy(n, scale, rng):
        seen.append(scale)
        return real(n, scale, rng)

    monkeypatch.setattr(consensus, "prefix_query_noise", spy)
    ex = random_experts(4, 2, 3, seed=13)
    prefix_query(ex, np.zeros((2, 3)), np.array([0, 1]), 1.0, 0.25, rng=noise_rng(0))
    assert seen == [pytest.approx(16.0)]  # 4/ε'


# --------------------------------------------------------------------------- DataRelease

# A loose budget so that a few hundred experts can reach the threshold:
# ε' = 8/sqrt(32·5·ln 20) ≈ 0.365, θ + (4/ε') ln(1/δ') ≈ 247 at L = 20.
BUDGET = {"epsilon1": 8.0, "delta1": 0.1, "rounds": 5}


@pytest.fixture(scope="module")
def consensus_data():
    rng = noise_rng(14)
    m = 400
    base = rng.standard_normal((1, 2, 3))
    w = base + 0.05 * rng.standard_normal((m, 2, 3))
    w[:40] = rng.standard_normal((40, 2, 3))  # a minority of dissenting experts
    ex = LinearExperts(w)
    return ex, make_dataset(ex, 3, (4, 20), seed=15, flip=0.03)


def transition_ids(ds: TrajectoryDataset | None) -> np.ndarray:
    return np.zeros(0, np.int64) if ds is None else ds.rewards.astype(np.int64)


def check_partition(ds: TrajectoryDataset, res: DataReleaseResult) -> None:
    """stable ∪ unstable = the data, every transition exactly once, with its state, action,
    next state, behaviour probability and expert id."""
    ids = np.concatenate([transition_ids(res.stable), transition_ids(res.unstable)])
    assert np.array_equal(np.sort(ids), np.arange(ds.n_transitions))
    orig = ds.transitions()
    ep_of = ds.transition_episode_index
    for part in (res.stable, res.unstable):
        if part is None:
            continue
        part.validate()
        t = part.transitions()
        i = part.rewards.astype(np.int64)
        np.testing.assert_array_equal(t.observations, orig.observations[i])
        np.testing.assert_array_equal(t.next_observations, orig.next_observations[i])
        np.testing.assert_array_equal(t.actions, orig.actions[i])
        np.testing.assert_array_equal(part.behaviour_probs, ds.behaviour_probs[i])
        np.testing.assert_array_equal(
            part.unit_ids[part.transition_episode_index], ds.unit_ids[ep_of[i]]
        )


def test_data_release_partitions_the_data(consensus_data):
    ex, ds = consensus_data
    n_released = 0
    for seed in range(6):
        res = data_release(ds, ex, **BUDGET, rng=noise_rng(seed))
        check_partition(ds, res)
        n_released += res.summary["released_transitions"]
        assert res.summary["released_transitions"] + res.summary["unstable_transitions"] == (
            ds.n_transitions
        )
    assert n_released > 0  # the test exercises real releases


def test_data_release_prefixes_and_flags(consensus_data):
    ex, ds = consensus_data
    cut_seen = full_seen = 0
    for seed in range(6):
        res = data_release(ds, ex, **BUDGET, rng=noise_rng(seed))
        k = res.stable_lengths
        assert res.stable is None or res.stable.n_episodes == int((k > 0).sum())
        if res.stable is None:
            continue
        j = 0
        for e, kk in zip(res.selected, k, strict=True):
            if kk == 0:
                continue
            ep, got = ds.episode(int(e)), res.stable.episode(j)
            j += 1
            assert got.length == kk
            np.testing.assert_array_equal(got.actions, ep.actions[:kk])
            np.testing.assert_array_equal(got.observations, ep.observations[: kk + 1])
            assert got.unit_id == ep.unit_id
            if kk < ep.length:  # cut prefix: a timeout, not a terminal
                cut_seen += 1
                assert got.truncated[-1] and not got.terminated[-1]
            else:  # the whole trajectory: its own end flags
                full_seen += 1
                assert got.truncated[-1] == ep.truncated[-1]
                assert got.terminated[-1] == ep.terminated[-1]
            assert not got.truncated[:-1].any() and not got.terminated[:-1].any()
    assert cut_seen > 0 and full_seen > 0


def test_released_prefixes_never_contain_the_failing_action():
    # 1000 identical experts; every trajectory follows them except one flipped action at a
    # known step j. Before j the count is 1000·0.98^k (well above θ̂ ≈ 480); the prefix that
    # includes the flipped action has count ≈ 1000·0.98^j/49 ≈ 20, which fails.
    rng = noise_rng(16)
    m = 1000
    ex = LinearExperts(np.repeat(rng.standard_normal((1, 2, 3)), m, axis=0))
    flip_at = rng.integers(1, 10, m)
    ds = make_dataset(ex, 1, (12, 12), seed=17, flip_at=flip_at)
    released_before_flip = 0
    for seed in range(5):
        res = data_release(ds, ex, epsilon1=8.0, delta1=0.1, rounds=20, rng=noise_rng(seed))
        k, j = res.stable_lengths, flip_at[res.selected]
        assert np.all(k <= j)  # never a_{j+1} (0-based index j) or anything after it
        released_before_flip += int(np.sum(k == j))
        if res.stable is not None:
            ids = res.stable.rewards.astype(np.int64)
            flipped = ds.episode_offsets[:-1] + flip_at  # global index of each flipped step
            assert not np.isin(flipped, ids).any()
    assert released_before_flip > 50  # most rounds stop exactly at the failing action


def test_data_release_uses_calibrated_noise(monkeypatch, consensus_data):
    ex, ds = consensus_data
    thresholds, queries = [], []
    real_threshold, real_first = consensus.noisy_threshold, consensus.first_failing_prefix

    def spy_threshold(theta, scale, rng, size=None):
        thresholds.append((theta, scale))
        return real_threshold(theta, scale, rng, size)

    def spy_first(log_counts, theta_hat, scale, rng):
        queries.append((len(log_counts), scale))
        return real_first(log_counts, theta_hat, scale, rng)

    monkeypatch.setattr(consensus, "noisy_threshold", spy_threshold)
    monkeypatch.setattr(consensus, "first_failing_prefix", spy_first)
    res = data_release(ds, ex, **BUDGET, rng=noise_rng(0))
    eps_p = BUDGET["epsilon1"] / math.sqrt(32 * 5 * math.log(2 / 0.1))
    delta_p = 0.1 / (2 * 5 * 20)
    theta = 1 / -math.expm1(-eps_p) / 0.02
    assert len(thresholds) == len(queries) == 5  # θ̂ once per trajectory
    for theta_used, scale in thresholds:
        assert theta_used == pytest.approx(theta + 4 / eps_p * math.log(1 / delta_p))
        assert scale == pytest.approx(2 / eps_p)
    for (n_queries, scale), e in zip(queries, res.selected, strict=True):
        assert n_queries == ds.episode_lengths[e]  # prefixes τ_{1:i}, i = 1..|τ|
        assert scale == pytest.approx(4 / eps_p)


def test_data_release_report(consensus_data):
    ex, ds = consensus_data
    res = data_release(ds, ex, **BUDGET, rng=noise_rng(1))
    s = res.summary
    assert s["rounds"] == 5 and s["experts"] == 400 and s["max_len"] == 20
    assert s["composition_epsilon"] <= BUDGET["epsilon1"]
    assert s["accountant_epsilon"] <= s["composition_epsilon"] + 1e-9
    assert s["released_trajectories"] == (0 if res.stable is None else res.stable.n_episodes)
    assert len(res.releases) == 1
    rel = res.releases[0]
    assert rel.event == res.event and rel.count == 5
    assert res.event.event == ApproxDpEvent(2 * s["epsilon_prime"], 0.1 / 10)
    assert rel.to_dict()["extra"]["max_len_source"] == "metadata.horizon"
    # An explicit L wins over the declared horizon.
    res3 = data_release(ds, ex, **BUDGET, rng=noise_rng(1), max_len=30)
    assert res3.calibration.delta_prime == pytest.approx(0.1 / (2 * 5 * 30))
    assert res3.summary["max_len_source"] == "given"


def test_max_len_must_be_public(consensus_data):
    """Property: L (it sets δ' = δ1/(2TL) and the threshold shift) is never the longest
    trajectory of the private data: without a declared horizon or max_len the filter refuses,
    and a horizon the metadata mark as inferred from the data is not public."""
    ex, ds = consensus_data
    with pytest.raises(ValueError, match="pass `max_len=L`"):
        data_release(
            ds.with_metadata(ds.metadata.replace(horizon=None)), ex, **BUDGET, rng=noise_rng(1)
        )
    inferred = ds.metadata.replace(extra={"inferred_from_data": ["horizon"]})
    with pytest.raises(ValueError, match="inferred from the data"):
        data_release(ds.with_metadata(inferred), ex, **BUDGET, rng=noise_rng(1))
    res = data_release(ds.with_metadata(inferred), ex, **BUDGET, rng=noise_rng(1), max_len=20)
    assert res.summary["max_len"] == 20 and res.summary["max_len_source"] == "given"


def test_trajectories_longer_than_max_len_are_truncated_for_the_filter(consensus_data, monkeypatch):
    """Property: L is enforced, not checked. A trajectory longer than L gets at most L prefix
    queries (δ' = δ1/(2TL) covers them), so at most τ_{1:L} is released (as a cut prefix
    ending in a timeout) and its remaining steps stay in D_unst; no error depends on the
    data's lengths."""
    from privrl.expert import consensus

    ex, ds = consensus_data
    queries = []
    real_first = consensus.first_failing_prefix

    def spy_first(log_counts, theta_hat, scale, rng):
        queries.append(len(log_counts))
        return real_first(log_counts, theta_hat, scale, rng)

    monkeypatch.setattr(consensus, "first_failing_prefix", spy_first)
    length = 6
    assert int(ds.episode_lengths.max()) > length
    res = data_release(
        ds,
        ex,
        epsilon1=20.0,
        delta1=0.1,
        rounds=10,
        rng=noise_rng(2),
        max_len=length,
        calibration="pld",
    )
    assert res.calibration.delta_prime == pytest.approx(0.1 / (2 * 10 * length))
    assert queries and max(queries) <= length
    assert np.all(res.stable_lengths <= length)
    long_sel = ds.episode_lengths[res.selected] > length
    assert np.any(res.stable_lengths[long_sel] == length)  # a full-L prefix of a longer one
    # the release partitions the data: every reward (transition id) exactly once
    parts = [res.unstable.rewards] + ([] if res.stable is None else [res.stable.rewards])
    assert np.array_equal(np.sort(np.concatenate(parts)), np.sort(ds.rewards))
    stable = res.stable
    ends = stable.episode_offsets[1:] - 1
    full = stable.episode_lengths == length
    assert np.all(stable.truncated[ends[full]] | stable.terminated[ends[full]])


def test_data_release_is_deterministic(consensus_data):
    ex, ds = consensus_data
    a = data_release(ds, ex, **BUDGET, rng=noise_rng(3))
    b = data_release(ds, ex, **BUDGET, rng=noise_rng(3))
    assert np.array_equal(a.selected, b.selected)
    assert np.array_equal(a.stable_lengths, b.stable_lengths)
    assert a.unstable.equals(b.unstable)
    assert (a.stable is None and b.stable is None) or a.stable.equals(b.stable)
    runs = {tuple(data_release(ds, ex, **BUDGET, rng=noise_rng(s)).selected) for s in range(4)}
    assert len(runs) > 1


def test_data_release_without_any_release():
    # One dissenting action at step 0 everywhere: no prefix is stable, all data stays private.
    ex = random_experts(50, 2, 3, seed=18, spread=0.0)
    ds = make_dataset(ex, 2, (3, 6), seed=19, flip_at=np.zeros(100, np.int64))
    res = data_release(ds, ex, **BUDGET, rng=noise_rng(0))
    assert res.stable is None and res.summary["released_trajectories"] == 0
    assert res.unstable.equals(ds, check_metadata=False)


def test_data_release_rejects_bad_inputs(consensus_data):
    ex, ds = consensus_data
    no_units = TrajectoryDataset(
        observations=ds.observations,
        actions=ds.actions,
        rewards=ds.rewards,
        terminated=ds.terminated,
        truncated=ds.truncated,
        episode_offsets=ds.episode_offsets,
        metadata=ds.metadata,
    )
    with pytest.raises(ValueError, match="unit_ids"):
        data_release(no_units, ex, **BUDGET, rng=noise_rng(0))
    with pytest.raises(ValueError, match="n_actions"):
        data_release(ds, LinearExperts(np.zeros((400, 3, 3))), **BUDGET, rng=noise_rng(0))
    with pytest.raises(ValueError, match="obs_dim"):
        data_release(ds, LinearExperts(np.zeros((400, 2, 5))), **BUDGET, rng=noise_rng(0))
    with pytest.raises(ValueError, match="n_experts"):
        data_release(ds, ex.subset(np.arange(399)), **BUDGET, rng=noise_rng(0))
    box = TrajectoryDataset(
        observations=ds.observations,
        actions=ds.actions.astype(np.float32)[:, None],
        rewards=ds.rewards,
        terminated=ds.terminated,
        truncated=ds.truncated,
        episode_offsets=ds.episode_offsets,
        unit_ids=ds.unit_ids,
        metadata=ds.metadata.replace(action_space=spaces.Box(0.0, 1.0, (1,), np.float32)),
    )
    with pytest.raises(ValueError, match="not Discrete"):
        data_release(box, ex, **BUDGET, rng=noise_rng(0))
    with pytest.raises(ValueError, match="discrete"):
        data_release(
            box.with_metadata(ds.metadata.replace(action_space=None)),
            ex,
            **BUDGET,
            rng=noise_rng(0),
        )
    # T above the number of trajectories: no data-dependent error, only that many rounds run
    # (the T-round event, reported, bounds them)
    small_ex = random_experts(5, 2, 3, seed=20)
    small = make_dataset(small_ex, 1, (2, 4), seed=21)
    n_ep = small.n_episodes
    res = data_release(small, small_ex, epsilon1=8.0, delta1=0.1, rounds=n_ep + 1, rng=noise_rng(0))
    assert res.summary["rounds"] == res.releases[0].count == n_ep + 1
    assert res.summary["rounds_run"] == n_ep
    with pytest.raises(ValueError, match="not admissible"):
        data_release(ds, ex, **BUDGET, p_min=0.7, rng=noise_rng(0))
