"""Discrete BCQ (Fujimoto et al. 2019, benchmarking version): separate Q and imitation heads,
the joint per-example loss, learning an offline bandit, the threshold rule (never an action
whose imitation ratio is below τ), Polyak target updates and checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privrl.rl.bcq import DiscreteBCQ
from privrl.rl.discrete_common import TransitionBatch

from .test_cql import bandit_data, train

torch.set_num_threads(1)


def test_heads_are_separate_networks() -> None:
    learner = DiscreteBCQ(4, 3, hidden=(16, 16))
    assert {k.split(".")[0] for k in learner.params} == {"q0", "q1", "q2", "i0", "i1", "i2"}
    assert set(learner.target_params) == {k for k in learner.params if k.startswith("q")}
    assert learner.threshold == 0.3 and learner.tau == 0.005 and learner.lr == 3e-4
    assert learner.gamma == 0.99


@pytest.mark.parametrize("head", ["linear", "relu"])
def test_per_example_loss_formula(head: str) -> None:
    learner = DiscreteBCQ(2, 3, hidden=(8,), seed=2, gamma=0.9, imitation_logits=head)
    g = torch.Generator().manual_seed(0)
    batch = TransitionBatch(
        torch.randn(6, 2, generator=g),
        torch.tensor([0, 1, 2, 0, 1, 2]),
        torch.randn(6, generator=g),
        torch.randn(6, 2, generator=g),
        torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 0.0]),
    )
    losses = learner.per_example_loss(learner.params, batch)
    assert losses.shape == (6,)
    with torch.no_grad():
        p = learner.params
        q_next = learner._q(p, batch.next_obs)
        probs = torch.softmax(learner._imitation_logits(p, batch.next_obs), 1)
        allowed = probs / probs.max(1, keepdim=True).values > 0.3
        a_next = torch.where(allowed, q_next, torch.full_like(q_next, -1e8)).argmax(1)
        q_t = learner._q(learner.target_params, batch.next_obs)[torch.arange(6), a_next]
        y = batch.rewards + 0.9 * (1 - batch.terminated) * q_t
        q_a = learner._q(p, batch.obs)[torch.arange(6), batch.actions]
        logits = learner._imitation_logits(p, batch.obs)
        if head == "relu":  # ReLU on the imitation logits, as in their code
            assert float(logits.min()) >= 0.0
        else:
            assert float(logits.min()) < 0.0
        nll = torch.nn.functional.nll_loss(
            torch.log_softmax(logits, 1), batch.actions, reduction="none"
        )
        expected = (
            torch.nn.functional.smooth_l1_loss(q_a, y, reduction="none")
            + nll
            + 1e-2 * logits.pow(2).mean(1)
        )
    assert torch.allclose(losses.detach(), expected, atol=1e-6)


def test_imitation_logits_option_is_validated_and_reported() -> None:
    assert DiscreteBCQ(4, 2).config()["imitation_logits"] == "linear"
    assert DiscreteBCQ(4, 2, imitation_logits="relu").config()["imitation_logits"] == "relu"
    with pytest.raises(ValueError, match="imitation_logits"):
        DiscreteBCQ(4, 2, imitation_logits="tanh")  # type: ignore[arg-type]


def test_learns_offline_bandit() -> None:
    data = bandit_data()
    learner = DiscreteBCQ(2, 3, hidden=(32, 32), lr=3e-3, seed=0)
    train(learner, data, 400)
    obs = np.random.default_rng(5).normal(size=(500, 2))
    best = np.where(obs[:, 0] > 0, 0, 1)
    assert np.mean(learner.act(obs) == best) > 0.9
    # the imitation head learned that action 2 is never logged
    assert (
        learner.imitation_probs(obs)[:, 2].max() < 0.3 * learner.imitation_probs(obs).max(1).min()
    )


def test_never_picks_actions_below_threshold() -> None:
    data = bandit_data(1000)
    learner = DiscreteBCQ(2, 3, hidden=(32, 32), lr=1e-2, seed=1)
    train(learner, data, 300)
    with torch.no_grad():  # make the unseen action the Q-argmax everywhere
        learner.params["q2.bias"][2] += 100.0
    obs = np.random.default_rng(7).normal(size=(2000, 2)) * 2
    probs = learner.imitation_probs(obs)
    ratio = probs / probs.max(axis=1, keepdims=True)
    chosen = learner.act(obs)
    assert np.all(ratio[np.arange(len(obs)), chosen] > 0.3)
    allowed2 = ratio[:, 2] > 0.3
    assert np.array_equal(chosen == 2, allowed2)  # action 2 exactly where it is allowed
    assert np.mean(allowed2) < 0.05


def test_threshold_zero_is_plain_argmax() -> None:
    learner = DiscreteBCQ(2, 3, hidden=(8,), threshold=0.0, seed=0)
    obs = np.random.default_rng(0).normal(size=(50, 2))
    assert np.array_equal(learner.act(obs), learner.q_values(obs).argmax(1))


def test_polyak_target() -> None:
    data = bandit_data(64)
    learner = DiscreteBCQ(2, 3, hidden=(8,), lr=1e-2, seed=0)
    start = {k: v.clone() for k, v in learner.target_params.items()}
    learner.update(data)
    for k, t in learner.target_params.items():
        expected = 0.995 * start[k] + 0.005 * learner.params[k].detach()
        assert torch.allclose(t, expected, atol=1e-7)


def test_state_dict_round_trip() -> None:
    data = bandit_data(256)
    a = DiscreteBCQ(2, 3, hidden=(16,), seed=0)
    train(a, data, 10)
    b = DiscreteBCQ(2, 3, hidden=(16,), seed=5)
    b.load_state_dict(a.state_dict())
    obs = np.random.default_rng(1).normal(size=(20, 2))
    assert np.array_equal(a.act(obs), b.act(obs))
    assert np.allclose(a.imitation_probs(obs), b.imitation_probs(obs))
    with pytest.raises(ValueError):
        DiscreteBCQ(2, 3, threshold=1.0)
