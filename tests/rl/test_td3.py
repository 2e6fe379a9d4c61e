"""TD3 and DDPG: flags, exploration noise, target smoothing, persistence, learning."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privrl.policies import Policy
from privrl.rl.replay import OnlineTrainingSettings, train_online
from privrl.rl.td3 import TD3, TD3Config
from tests.rl._toy import ToyBatchedEnv, mean_squared_action_error

torch.set_num_threads(1)


def _batch(n: int = 128, seed: int = 0, done: float = 0.0):
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(n, 3, generator=g),
        "act": torch.rand(n, 1, generator=g) * 4 - 2,
        "rew": torch.randn(n, generator=g) + 3,
        "next_obs": torch.randn(n, 3, generator=g),
        "done": torch.full((n,), done),
    }


def test_ddpg_flags():
    ddpg = TD3Config.ddpg()
    assert (ddpg.twin, ddpg.policy_delay, ddpg.target_noise) == (False, 1, 0.0)
    assert ddpg.algorithm == "ddpg" and TD3Config().algorithm == "td3"
    assert TD3Config.ddpg(actor_lr=1e-3).actor_lr == 1e-3
    assert TD3(3, 1, [-2.0], [2.0], ddpg).q.n_critics == 1
    assert TD3(3, 1, [-2.0], [2.0]).q.n_critics == 2


def test_policy_delay_updates_actor_and_targets_every_other_step():
    agent = TD3(3, 1, [-2.0], [2.0], TD3Config(policy_delay=2), seed=0)
    actor0 = [p.clone() for p in agent.actor.parameters()]
    targ0 = [p.clone() for p in agent.q_targ.parameters()]
    agent.update(_batch(seed=1))
    assert all(torch.equal(a, b) for a, b in zip(actor0, agent.actor.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(targ0, agent.q_targ.parameters(), strict=True))
    agent.update(_batch(seed=2))
    assert not all(torch.equal(a, b) for a, b in zip(actor0, agent.actor.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(targ0, agent.q_targ.parameters(), strict=True))
    # DDPG moves the actor at every step.
    ddpg = TD3(3, 1, [-2.0], [2.0], TD3Config.ddpg(), seed=0)
    before = [p.clone() for p in ddpg.actor.parameters()]
    ddpg.update(_batch(seed=1))
    assert not all(torch.equal(a, b) for a, b in zip(before, ddpg.actor.parameters(), strict=True))


def test_one_update_decreases_the_critic_loss():
    for cfg in (TD3Config(), TD3Config.ddpg()):
        agent = TD3(3, 1, [-2.0], [2.0], cfg, seed=0)
        batch = _batch(done=1.0)  # target = r exactly

        def loss(agent=agent, batch=batch) -> float:
            with torch.no_grad():
                q = agent.q(batch["obs"], agent.scaler.to_unit(batch["act"]))
                return float((q - batch["rew"]).pow(2).mean(1).sum())

        before = loss()
        assert agent.update(batch)["loss_q"] == pytest.approx(before, rel=1e-5)
        assert loss() < before


def test_exploration_noise_and_deterministic_actions():
    agent = TD3(3, 1, [-2.0], [2.0], TD3Config(expl_noise=0.3), seed=0)
    obs = np.random.default_rng(0).normal(size=(2000, 3))
    det = agent.act(obs, deterministic=True)
    noisy = agent.act(obs)
    assert np.all(np.abs(noisy) <= 2.0)
    inside = np.abs(det) < 1.0  # away from the clip: noise std 0.3 · half-width 2 = 0.6
    assert np.std((noisy - det)[inside]) == pytest.approx(0.6, rel=0.1)
    np.testing.assert_array_equal(agent.act(obs, deterministic=True), det)
    quiet = TD3(3, 1, [-2.0], [2.0], TD3Config(expl_noise=0.0), seed=0)
    np.testing.assert_array_equal(quiet.act(obs), quiet.act(obs, deterministic=True))


def test_state_dict_round_trip_and_policy_snapshot():
    agent = TD3(3, 1, [-2.0], [2.0], seed=0)
    for i in range(3):
        agent.update(_batch(seed=i))
    clone = TD3.from_state_dict(agent.state_dict())
    obs = np.random.default_rng(1).normal(size=(10, 3))
    np.testing.assert_array_equal(clone.act(obs), agent.act(obs))
    b = _batch(seed=9)
    assert clone.update(b) == agent.update(b)
    np.testing.assert_array_equal(clone.act(obs, True), agent.act(obs, True))
    pol = agent.policy(deterministic=False, noise=0.2)
    assert isinstance(pol, Policy)
    a1 = pol.act(obs, np.random.default_rng(3))
    np.testing.assert_array_equal(a1, pol.act(obs, np.random.default_rng(3)))
    np.testing.assert_array_equal(agent.policy().act(obs), agent.act(obs, deterministic=True))
    with pytest.raises(ValueError):
        TD3(3, 1, [-2.0], [2.0], TD3Config.ddpg()).load_state_dict(agent.state_dict())


@pytest.mark.parametrize("algo", ["td3", "ddpg"])
def test_learns_a_toy_task(algo):
    kw = {"hidden": (32, 32), "actor_lr": 3e-3, "critic_lr": 3e-3, "gamma": 0.5, "batch_size": 64}
    cfg = TD3Config(**kw) if algo == "td3" else TD3Config.ddpg(**kw)
    agent = TD3(2, 1, [-2.0], [2.0], cfg, seed=0)
    before = mean_squared_action_error(agent)
    train_online(
        OnlineTrainingSettings(total_steps=600, start_steps=200, update_after=200),
        agent,
        ToyBatchedEnv(4, seed=0),
    )
    after = mean_squared_action_error(agent)
    assert before > 0.2 and after < 0.03, (before, after)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["td3", "ddpg"])
def test_learns_pendulum(algo):
    from privrl.envs.batched import make_batched

    env = make_batched("pendulum", 1, seed=0)
    cfg = TD3Config() if algo == "td3" else TD3Config.ddpg(actor_lr=1e-3, critic_lr=1e-3)
    agent = TD3(3, 1, [-2.0], [2.0], cfg, seed=0)
    train_online(OnlineTrainingSettings(total_steps=9000, start_steps=1000), agent, env, seed=0)
    ev = make_batched("pendulum", 20)
    obs, ret = ev.reset(seed=1), np.zeros(20)
    for _ in range(ev.horizon):
        obs, r, _ = ev.step(agent.act(obs, deterministic=True))
        ret += r
    assert ret.mean() > 170, ret.mean()
