"""Discrete CQL: the per-example loss is TD(Huber) + α(logsumexp Q − Q(s,a)), it learns a small
offline bandit, its penalty lowers the Q-values of actions absent from the data, and its
target network and checkpoints behave."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privrl.rl.cql import DiscreteCQL
from privrl.rl.discrete_common import TransitionBatch, eval_schedule, normalised_score

torch.set_num_threads(1)


def bandit_data(n: int = 2000, seed: int = 0) -> TransitionBatch:
    """One-step episodes: obs ∈ R², actions 0/1 uniformly (action 2 never logged), reward 1 for
    the right action (0 if obs[0] > 0 else 1)."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 2)).astype(np.float32)
    actions = rng.integers(0, 2, size=n)
    best = np.where(obs[:, 0] > 0, 0, 1)
    rewards = (actions == best).astype(np.float32)
    return TransitionBatch(
        torch.from_numpy(obs),
        torch.from_numpy(actions),
        torch.from_numpy(rewards),
        torch.from_numpy(obs.copy()),
        torch.ones(n),
    )


def train(learner, data: TransitionBatch, steps: int, batch: int = 128, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    n = data.obs.shape[0]
    for _ in range(steps):
        idx = torch.from_numpy(rng.integers(0, n, size=batch))
        learner.update(TransitionBatch(*(t[idx] for t in data)))


def test_per_example_loss_formula() -> None:
    learner = DiscreteCQL(2, 3, hidden=(8,), seed=0, alpha=0.7, gamma=0.9)
    g = torch.Generator().manual_seed(1)
    batch = TransitionBatch(
        torch.randn(5, 2, generator=g),
        torch.tensor([0, 1, 2, 1, 0]),
        torch.randn(5, generator=g),
        torch.randn(5, 2, generator=g),
        torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0]),
    )
    losses = learner.per_example_loss(learner.params, batch)
    assert losses.shape == (5,)
    with torch.no_grad():
        q = learner._q(learner.params, batch.obs)
        q_next = learner._q(learner.target_params, batch.next_obs).max(1).values
        y = batch.rewards + 0.9 * (1 - batch.terminated) * q_next
        q_a = q[torch.arange(5), batch.actions]
        td = torch.nn.functional.smooth_l1_loss(q_a, y, reduction="none")
        expected = td + 0.7 * (torch.logsumexp(q, 1) - q_a)
    assert torch.allclose(losses.detach(), expected, atol=1e-6)
    assert torch.allclose(learner.loss(batch).detach(), expected.mean(), atol=1e-6)


def test_learns_offline_bandit_and_penalises_unseen_action() -> None:
    data = bandit_data()
    cql = DiscreteCQL(2, 3, hidden=(32, 32), lr=3e-3, seed=0)
    dqn = DiscreteCQL(2, 3, hidden=(32, 32), lr=3e-3, seed=0, alpha=0.0)  # same net, no penalty
    train(cql, data, 400)
    train(dqn, data, 400)
    test_obs = np.random.default_rng(5).normal(size=(500, 2))
    best = np.where(test_obs[:, 0] > 0, 0, 1)
    assert np.mean(cql.act(test_obs) == best) > 0.9
    q = cql.q_values(test_obs)
    # the unseen action's value sits below both logged actions' values
    assert np.mean(q[:, 2] < q[:, :2].min(axis=1)) > 0.95
    # and far below what plain DQN (α = 0) leaves there
    q_dqn = dqn.q_values(test_obs)
    assert q[:, 2].mean() < q_dqn[:, 2].mean() - 0.5


def test_update_reduces_loss() -> None:
    data = bandit_data(512)
    learner = DiscreteCQL(2, 3, hidden=(16, 16), lr=1e-2, seed=1)
    before = float(learner.loss(data).detach())
    train(learner, data, 100)
    assert float(learner.loss(data).detach()) < before


def test_hard_target_update_every_interval() -> None:
    data = bandit_data(64)
    learner = DiscreteCQL(2, 3, hidden=(8,), lr=1e-2, seed=0, target_update_interval=3)
    start = {k: v.clone() for k, v in learner.target_params.items()}
    for _ in range(2):
        learner.update(data)
    assert all(torch.equal(learner.target_params[k], start[k]) for k in start)
    learner.update(data)  # third step: copy
    assert all(torch.equal(learner.target_params[k], learner.params[k].detach()) for k in start)


def test_polyak_option() -> None:
    data = bandit_data(64)
    learner = DiscreteCQL(2, 3, hidden=(8,), lr=1e-2, seed=0, tau=0.1)
    start = {k: v.clone() for k, v in learner.target_params.items()}
    learner.update(data)
    for k, t in learner.target_params.items():
        expected = 0.9 * start[k] + 0.1 * learner.params[k].detach()
        assert torch.allclose(t, expected, atol=1e-6)


def test_state_dict_round_trip(tmp_path) -> None:
    data = bandit_data(256)
    a = DiscreteCQL(2, 3, hidden=(16,), lr=1e-2, seed=0)
    train(a, data, 20)
    a.save(tmp_path / "cql.pt")
    b = DiscreteCQL(2, 3, hidden=(16,), lr=1e-2, seed=99)
    b.load_state_dict(torch.load(tmp_path / "cql.pt"))
    obs = np.random.default_rng(0).normal(size=(10, 2))
    assert np.allclose(a.q_values(obs), b.q_values(obs))
    assert b.steps == 20
    a.update(data)
    b.update(data)  # the optimizer state came along: identical next step
    assert np.allclose(a.q_values(obs), b.q_values(obs), atol=1e-6)
    with pytest.raises(ValueError, match="parameters"):
        DiscreteCQL(2, 3, hidden=(16, 16)).load_state_dict(a.state_dict())


def test_act_shapes_and_validation() -> None:
    learner = DiscreteCQL(2, 4, hidden=(8,))
    assert learner.act(np.zeros((3, 2))).shape == (3,)
    assert learner.act(np.zeros(2)).shape == (1,)
    assert learner.q_values(np.zeros((3, 2))).shape == (3, 4)
    assert learner.params["q0.weight"].dtype == torch.float32
    with pytest.raises(ValueError):
        DiscreteCQL(2, 1)
    with pytest.raises(ValueError):
        DiscreteCQL(2, 3, alpha=-1.0)
    with pytest.raises(ValueError):
        DiscreteCQL(2, 3, gamma=1.5)


def test_hiv_network_shape() -> None:
    learner = DiscreteCQL(6, 4, hidden=(512,))
    assert learner.params["q0.weight"].shape == (512, 6)
    assert learner.params["q1.weight"].shape == (4, 512)
    assert learner.gamma == 0.99 and learner.alpha == 1.0


def test_eval_schedule_and_normalised_score() -> None:
    s = eval_schedule(50_000)
    assert s.tolist() == list(range(41_000, 50_001, 1000))
    short = eval_schedule(500)
    assert short[-1] == 500 and len(short) == 10 and short[0] == 50
    assert eval_schedule(3).tolist() == [1, 2, 3]
    assert normalised_score(60.0, 10.0, 110.0) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        normalised_score(1.0, 2.0, 2.0)
