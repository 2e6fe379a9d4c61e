"""Variable-length episodes in the tabular learners: absorbing-state padding to a declared H,
truncation at H, and the stationary (pooled over h) counts.

Privacy properties checked: padding and truncation keep a trajectory's contribution at ≤ 1
entry per step (so replace-one sensitivity is unchanged, whatever the episodes' lengths); the
counts pooled over h have replace-one sensitivity Δ₂ = √2·H and Δ₁ = 2H (bound respected on
random neighbours, attained by a constructed pair), and the Gaussian noise added to them has
the planned σ = H·√(m/ρ).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privrl.data.dataset import TrajectoryDataset
from privrl.data.padding import pad_absorbing
from privrl.offline.apvi import (
    Counts,
    PrivacyConfig,
    apvi,
    dp_apvi,
    empirical_counts,
    noise_plan,
    private_counts,
)
from tests.noise import noise_rng


def episode(states: list[int], actions: list[int], rewards: list[float], *, terminated: bool):
    T = len(actions)
    return {
        "observations": np.array(states, dtype=np.int64),
        "actions": np.array(actions, dtype=np.int64),
        "rewards": np.array(rewards, dtype=np.float64),
        "terminated": np.array([False] * (T - 1) + [terminated]),
        "truncated": np.array([False] * (T - 1) + [not terminated]),
    }


def random_dataset(rng: np.random.Generator, n: int, S: int, A: int, max_len: int):
    eps = []
    for _ in range(n):
        T = int(rng.integers(1, max_len + 1))
        eps.append(
            episode(
                list(rng.integers(0, S, T + 1)),
                list(rng.integers(0, A, T)),
                list(rng.uniform(0, 1, T)),
                terminated=bool(rng.integers(2)),
            )
        )
    return TrajectoryDataset.from_episodes(eps)


# ---------------------------------------------------------------------------------------------
# padding and truncation
# ---------------------------------------------------------------------------------------------


def test_terminated_short_episode_is_padded_with_the_absorbing_state() -> None:
    """A terminated episode of L < H steps: the step into the terminal state goes to z = S,
    steps L..H-1 are (z, 0) → z with reward 0, and every step is counted."""
    S, A, H = 3, 2, 5
    data = TrajectoryDataset.from_episodes(
        [episode([0, 1, 2], [1, 0], [0.0, 1.0], terminated=True)]
    )
    c = empirical_counts(
        data, horizon=H, n_states=S, n_actions=A, reward_sums=True, padding="absorbing"
    )
    z = S
    assert c.n_sa.shape == (H, S + 1, A)
    assert c.n_sas[0, 0, 1, 1] == 1
    assert c.n_sas[1, 1, 0, z] == 1  # into the terminal state: the absorbing one
    assert c.r_sum[1, 1, 0] == 1.0
    for h in range(2, H):
        assert c.n_sas[h, z, 0, z] == 1
        assert c.r_sum[h, z, 0] == 0.0
    assert c.n_sa.sum() == H  # one entry per step, never more


def test_cut_episode_is_not_padded_and_none_padding_keeps_old_counts() -> None:
    """An episode cut without termination (a time limit, the end of a log) keeps only its
    steps; padding='none' never adds the absorbing state."""
    S, A, H = 3, 2, 5
    data = TrajectoryDataset.from_episodes(
        [episode([0, 1, 2], [1, 0], [0.0, 1.0], terminated=False)]
    )
    c = empirical_counts(data, horizon=H, n_states=S, n_actions=A, padding="absorbing")
    assert c.n_sa.sum() == 2 and c.n_sas[1, 1, 0, 2] == 1
    assert c.n_sa[:, S].sum() == 0
    term = TrajectoryDataset.from_episodes(
        [episode([0, 1, 2], [1, 0], [0.0, 1.0], terminated=True)]
    )
    plain = empirical_counts(term, horizon=H, n_states=S, n_actions=A)
    assert plain.n_sa.shape == (H, S, A) and plain.n_sa.sum() == 2


def test_episode_longer_than_H_is_truncated_not_refused() -> None:
    """An episode longer than the declared H contributes its first H steps (no error: an error
    would depend on the private data), and its termination after H is ignored."""
    S, A, H = 2, 2, 3
    long = episode([0, 1, 0, 1, 0, 1, 0], [0, 1, 0, 1, 0, 1], [1.0] * 6, terminated=True)
    data = TrajectoryDataset.from_episodes([long])
    c = empirical_counts(data, horizon=H, n_states=S, n_actions=A, padding="absorbing")
    assert c.n_sa.sum() == H
    assert c.n_sas[H - 1, 0, 0, 1] == 1  # step H-1 goes to the observed state, not z
    assert c.n_sa[:, S].sum() == 0


def test_terminal_observation_outside_the_spaces_is_absorbed() -> None:
    """The terminal observation's own index does not matter: it becomes the absorbing state,
    so the step into it is counted even if that index is outside the declared states."""
    S, A, H = 2, 2, 3
    data = TrajectoryDataset.from_episodes([episode([0, 7], [1], [1.0], terminated=True)])
    c = empirical_counts(data, horizon=H, n_states=S, n_actions=A, padding="absorbing")
    assert c.n_sas[0, 0, 1, S] == 1 and c.n_sa.sum() == H


def test_pad_absorbing_does_not_modify_its_inputs() -> None:
    st_ = np.array([[0, 1, 0, 0]])
    ac = np.array([[1, 1, 0]])
    rw = np.array([[0.5, 1.0, 0.0]])
    ok = np.array([[True, True, False]])
    before = [x.copy() for x in (st_, ac, rw, ok)]
    out = pad_absorbing(st_, ac, rw, ok, ok.copy(), lengths=[2], terminated=[True], absorbing=9)
    assert all(np.array_equal(a, b) for a, b in zip(before, (st_, ac, rw, ok), strict=True))
    assert out.states.tolist() == [[0, 1, 9, 9]]
    assert out.valid.tolist() == [[True, True, True]]
    assert out.padded.tolist() == [[False, False, True]]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 12), H=st.integers(1, 5))
def test_padded_counts_keep_one_entry_per_step(seed: int, n: int, H: int) -> None:
    """Property: whatever the lengths (shorter or longer than H, terminated or cut), each
    trajectory adds at most one entry per step h, so a replace-one neighbour changes each
    family in ≤ 2H entries by ≤ 1 (Δ₂² ≤ 2H, Δ₁ ≤ 2H: the per-step sensitivity holds)."""
    rng = noise_rng(seed)
    S, A = 3, 2
    data = random_dataset(rng, n, S, A, 2 * H)
    per_traj = empirical_counts(data, horizon=H, n_states=S, n_actions=A, padding="absorbing")
    assert (per_traj.n_sa.sum(axis=(1, 2)) <= n).all()
    eps = [data.episode(i) for i in range(n)]
    other = random_dataset(rng, 1, S, A, 2 * H).episode(0)
    i = int(rng.integers(n))

    def as_dict(e):
        return {
            k: getattr(e, k)
            for k in ("observations", "actions", "rewards", "terminated", "truncated")
        }

    swapped = [as_dict(e) for e in eps]
    swapped[i] = as_dict(other)
    neighbour = TrajectoryDataset.from_episodes(swapped)
    kw = {"horizon": H, "n_states": S, "n_actions": A, "reward_sums": True, "padding": "absorbing"}
    a, b = empirical_counts(data, **kw), empirical_counts(neighbour, **kw)
    for fam in ("n_sa", "n_sas", "r_sum"):
        d = (getattr(a, fam) - getattr(b, fam)).ravel()
        assert np.abs(d).sum() <= 2 * H + 1e-9 and d @ d <= 2 * H + 1e-9, fam


def test_learner_on_padded_episodes_reports_the_policy_on_the_original_states() -> None:
    """A 2-state chain where action 1 reaches a rewarding terminal state: APVI on padded
    episodes learns action 1 and returns a policy [H, S] (the absorbing state dropped)."""
    S, A, H = 2, 2, 4
    eps = []
    for _ in range(30):
        eps.append(episode([0, 1], [1], [1.0], terminated=True))
        eps.append(episode([0, 0, 1], [0, 1], [0.0, 1.0], terminated=True))
    data = TrajectoryDataset.from_episodes(eps)
    result = apvi(data, horizon=H, n_states=S, n_actions=A, padding="absorbing")
    assert result.policy.actions.shape == (H, S)
    assert result.policy.actions[0, 0] == 1
    assert result.values.V.shape == (H + 1, S + 1)
    assert np.all(result.values.V[:, S] == 0.0)  # the absorbing state is worth 0


def test_public_reward_table_is_padded_with_zero_for_the_absorbing_state() -> None:
    S, A, H = 2, 2, 3
    data = TrajectoryDataset.from_episodes([episode([0, 1], [1], [1.0], terminated=True)] * 5)
    reward = np.full((H, S, A), 0.5)
    result = dp_apvi(
        data,
        horizon=H,
        n_states=S,
        n_actions=A,
        privacy=PrivacyConfig.gaussian(math.inf),
        reward=reward,
        padding="absorbing",
    )
    assert result.policy.actions.shape == (H, S)


# ---------------------------------------------------------------------------------------------
# stationary counts: sensitivity and noise scale
# ---------------------------------------------------------------------------------------------


def pooled(data, H: int, S: int, A: int) -> Counts:
    return empirical_counts(
        data, horizon=H, n_states=S, n_actions=A, reward_sums=True, stationary=True
    )


def test_pooled_counts_are_the_per_step_counts_summed_over_h() -> None:
    rng = noise_rng(0)
    data = random_dataset(rng, 20, 3, 2, 6)
    per_h = empirical_counts(data, horizon=4, n_states=3, n_actions=2, reward_sums=True)
    c = pooled(data, 4, 3, 2)
    assert c.n_sa.shape == (1, 3, 2) and c.shape == (4, 3, 2) and c.stationary
    assert np.array_equal(c.n_sa[0], per_h.n_sa.sum(axis=0))
    assert np.array_equal(c.n_sas[0], per_h.n_sas.sum(axis=0))
    assert np.allclose(c.r_sum[0], per_h.r_sum.sum(axis=0))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 12), H=st.integers(1, 6))
def test_pooled_counts_replace_one_sensitivity(seed: int, n: int, H: int) -> None:
    """Property: replacing one trajectory changes each pooled family by ‖Δ‖₂² ≤ 2H² and
    ‖Δ‖₁ ≤ 2H — the sensitivities the stationary plan claims (Δ₂ = √2·H, Δ₁ = 2H)."""
    rng = noise_rng(seed)
    S, A = 3, 2
    states = rng.integers(0, S, (n, H + 1))
    actions = rng.integers(0, A, (n, H))
    rewards = rng.uniform(-0.5, 1.5, (n, H))
    from privrl.envs.tabular import Episodes

    ep = Episodes(states, actions, rewards, None)
    i = int(rng.integers(n))
    nb = Episodes(states.copy(), actions.copy(), rewards.copy(), None)
    nb.states[i] = rng.integers(0, S, H + 1)
    nb.actions[i] = rng.integers(0, A, H)
    nb.rewards[i] = rng.uniform(-0.5, 1.5, H)
    a, b = pooled(ep, H, S, A), pooled(nb, H, S, A)
    plan = noise_plan(H, S, A, PrivacyConfig.gaussian(1.0), 0.1, stationary=True)
    assert plan.sensitivity == pytest.approx(math.sqrt(2) * H)
    for fam in ("n_sa", "n_sas", "r_sum"):
        d = (getattr(a, fam) - getattr(b, fam)).ravel()
        assert d @ d <= 2 * H * H + 1e-9, fam
        assert np.abs(d).sum() <= 2 * H + 1e-9, fam


def test_pooled_sensitivity_is_attained_and_exceeds_the_per_step_one() -> None:
    """Tightness: a trajectory staying in (0, 0) vs one staying in (1, 1) changes the pooled
    n(s,a) by H in two cells: ‖Δ‖₂² = 2H² > 2H (the per-step bound would under-noise)."""
    from privrl.envs.tabular import Episodes

    H = 5
    a = Episodes(np.zeros((1, H + 1), int), np.zeros((1, H), int), np.ones((1, H)), None)
    b = Episodes(np.ones((1, H + 1), int), np.ones((1, H), int), np.ones((1, H)), None)
    d = (pooled(a, H, 2, 2).n_sa - pooled(b, H, 2, 2).n_sa).ravel()
    assert d @ d == 2 * H * H and np.abs(d).sum() == 2 * H
    per_step = noise_plan(H, 2, 2, PrivacyConfig.gaussian(1.0), 0.1)
    assert per_step.sensitivity**2 < d @ d


def test_pooled_noise_scale_matches_the_plan() -> None:
    """Noise scale: with m = 2 families at ρ, the pooled counts get σ = Δ₂/√(2ρ/m) = H√(m/ρ)
    (empirical std over the released entries), and Laplace b = m·2H/ε as per step."""
    H, S, A, rho = 6, 5, 3, 0.5
    zero = Counts(
        n_sa=np.zeros((1, S, A), np.int64),
        n_sas=np.zeros((1, S, A, S), np.int64),
        r_sum=None,
        n_episodes=10,
        horizon=H,
    )
    plan = noise_plan(H, S, A, PrivacyConfig.gaussian(rho), 0.1, stationary=True)
    assert plan.scale == pytest.approx(H * math.sqrt(2 / rho))
    # No clipping at 0 would hide the spread: use a large offset.
    shifted = zero._replace(n_sas=zero.n_sas + 10_000, n_sa=zero.n_sa + 10_000)
    draws = np.concatenate(
        [private_counts(shifted, plan, noise_rng(s))[0].n_sas.ravel() - 10_000 for s in range(40)]
    )
    assert np.std(draws) == pytest.approx(plan.scale, rel=0.05)
    noisy, releases = private_counts(shifted, plan, noise_rng(0))
    assert noisy.n_sas.shape == (1, S, A, S) and noisy.horizon == H
    assert releases[0].sensitivity == pytest.approx(math.sqrt(2) * H)
    assert releases[0].size == S * A
    lap = noise_plan(H, S, A, PrivacyConfig.laplace(1.0), 0.1, stationary=True)
    assert lap.sensitivity == 2 * H and lap.scale == pytest.approx(2 * 2 * H / 1.0)


def test_stationary_learner_runs_and_plans_over_H_steps() -> None:
    rng = noise_rng(1)
    data = random_dataset(rng, 200, 3, 2, 4)
    result = dp_apvi(
        data,
        horizon=4,
        n_states=3,
        n_actions=2,
        privacy=PrivacyConfig.gaussian(5.0),
        reward=np.full((4, 3, 2), 0.5),
        rng=noise_rng(0),
        padding="absorbing",
        stationary=True,
    )
    assert result.policy.actions.shape == (4, 3)
    assert result.values.V.shape == (5, 4)
    assert result.model.n_sa.shape == (1, 4, 2)
    assert len(result.per_step) == 4
    assert [r.size for r in result.report.releases] == [4 * 2, 4 * 2 * 4]
