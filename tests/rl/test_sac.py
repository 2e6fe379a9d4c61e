"""SAC: critic step, temperature adaptation, hand-written α Adam, persistence, policies,
learning on a toy task (fast) and on Pendulum (slow)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privrl.policies import Policy
from privrl.rl.replay import OnlineTrainingSettings, ReplayBuffer, train_online
from privrl.rl.sac import SAC, SACConfig
from tests.rl._toy import ToyBatchedEnv, mean_squared_action_error

torch.set_num_threads(1)


def _batch(n: int = 256, seed: int = 0, obs_dim: int = 3, done: float = 0.0):
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(n, obs_dim, generator=g),
        "act": torch.rand(n, 1, generator=g) * 4 - 2,
        "rew": torch.randn(n, generator=g) * 3 + 5,
        "next_obs": torch.randn(n, obs_dim, generator=g),
        "done": torch.full((n,), done),
    }


def _agent(**cfg) -> SAC:
    return SAC(3, 1, [-2.0], [2.0], SACConfig(**cfg), seed=0)


def test_one_update_decreases_the_critic_loss_on_a_fixed_batch():
    # With done = 1 the Bellman target is r exactly, so the loss is a fixed function of Q.
    agent = _agent()
    batch = _batch(done=1.0)

    def critic_loss() -> float:
        with torch.no_grad():
            q = agent.q(batch["obs"], agent.scaler.to_unit(batch["act"]))
            return float((q - batch["rew"]).pow(2).mean(1).sum())

    before = critic_loss()
    stats = agent.update(batch)
    assert stats["loss_q"] == pytest.approx(before, rel=1e-5)
    assert critic_loss() < before
    assert set(stats) == {"loss_q", "loss_pi", "alpha", "entropy", "q_mean"}


def test_alpha_moves_toward_the_target_entropy():
    batch = _batch()
    # Initial entropy (≈ 0.9 nats for a 1-D tanh-Gaussian with σ ≈ 1) is above −1: α falls.
    low = _agent(target_entropy=-1.0)
    for _ in range(30):
        stats = low.update(batch)
    assert stats["entropy"] > -1.0
    # Adam moves log α by ≈ lr per step while the sign of the gradient holds.
    step = low.config.lr
    assert low.alpha < np.exp(-20 * step)
    # An unattainable target (a density on [-2, 2] has entropy ≤ log 4 ≈ 1.39): α rises.
    high = _agent(target_entropy=3.0)
    for _ in range(30):
        high.update(batch)
    assert high.alpha > np.exp(20 * step)
    # Fixed α never moves; the default target is −|A|.
    fixed = _agent(auto_alpha=False, init_alpha=0.2)
    fixed.update(batch)
    assert fixed.alpha == pytest.approx(0.2)
    assert _agent().target_entropy == -1.0
    assert SAC(3, 2, [-1, -1], [1, 1]).target_entropy == -2.0


def test_hand_written_alpha_adam_matches_torch_adam():
    agent = _agent(init_alpha=0.7)
    ref = torch.tensor(float(np.log(0.7)), requires_grad=True)
    opt = torch.optim.Adam([ref], lr=agent.config.lr)
    for g in [0.5, -1.2, 3.0, 0.01, -0.3, 2.0]:
        agent._alpha_step(g)
        opt.zero_grad()
        ref.grad = torch.tensor(g)
        opt.step()
        assert float(agent.log_alpha) == pytest.approx(float(ref.detach()), abs=1e-6)


def test_state_dict_round_trip_gives_identical_actions_and_updates():
    agent = _agent()
    for i in range(5):
        agent.update(_batch(seed=i))
    obs = np.random.default_rng(0).normal(size=(16, 3))
    clone = SAC.from_state_dict(agent.state_dict())
    np.testing.assert_array_equal(
        clone.act(obs, deterministic=True), agent.act(obs, deterministic=True)
    )
    np.testing.assert_array_equal(clone.act(obs), agent.act(obs))  # same sampling stream
    batch = _batch(seed=42)
    s1, s2 = agent.update(batch), clone.update(batch)
    assert s1 == s2
    np.testing.assert_array_equal(clone.act(obs), agent.act(obs))
    assert clone.alpha == agent.alpha and clone.n_updates == agent.n_updates == 6
    # A fresh agent with another seed acts differently until loaded.
    other = SAC(3, 1, [-2.0], [2.0], seed=7)
    assert not np.array_equal(other.act(obs, True), agent.act(obs, True))
    other.load_state_dict(agent.state_dict())
    np.testing.assert_array_equal(other.act(obs, True), agent.act(obs, True))
    with pytest.raises(ValueError):
        SAC(4, 1, [-2.0], [2.0]).load_state_dict(agent.state_dict())


def test_actions_are_scaled_to_the_box_and_seeded():
    agent = SAC(3, 2, [-2.0, 0.0], [2.0, 10.0], seed=0)
    obs = np.random.default_rng(0).normal(size=(500, 3)) * 10
    a = agent.act(obs)
    assert a.shape == (500, 2)
    assert np.all(a[:, 0] >= -2) and np.all(a[:, 0] <= 2)
    assert np.all(a[:, 1] >= 0) and np.all(a[:, 1] <= 10)
    assert a[:, 1].std() > 1.0  # spread over the box, not stuck at the centre
    assert agent.act(obs[0]).shape == (2,)
    np.testing.assert_array_equal(
        SAC(3, 2, [-2.0, 0.0], [2.0, 10.0], seed=0).act(obs), a
    )  # same seed, same draws


def test_policy_snapshot_follows_the_policy_protocol():
    agent = _agent()
    obs = np.random.default_rng(0).normal(size=(8, 3))
    det = agent.policy(deterministic=True)
    assert isinstance(det, Policy)
    np.testing.assert_array_equal(
        det.act(obs, np.random.default_rng(0)), agent.act(obs, deterministic=True)
    )
    sto = agent.policy(deterministic=False)
    a1 = sto.act(obs, np.random.default_rng(5))
    np.testing.assert_array_equal(a1, sto.act(obs, np.random.default_rng(5)))
    assert not np.array_equal(a1, sto.act(obs, np.random.default_rng(6)))
    # A snapshot does not follow later training.
    for i in range(3):
        agent.update(_batch(seed=i))
    assert not np.array_equal(det.act(obs, None), agent.act(obs, deterministic=True))


def test_sac_learns_a_toy_task_fast():
    env = ToyBatchedEnv(num_envs=4, seed=0)
    cfg = SACConfig(hidden=(32, 32), lr=3e-3, gamma=0.5, batch_size=64)
    agent = SAC(2, 1, [-2.0], [2.0], cfg, seed=0)
    before = mean_squared_action_error(agent)
    res = train_online(
        OnlineTrainingSettings(total_steps=600, start_steps=200, update_after=200),
        agent,
        env,
        seed=0,
    )
    after = mean_squared_action_error(agent)
    assert before > 0.2
    assert after < 0.03, (before, after)
    assert res.episode_returns[-1] > res.episode_returns[0]


@pytest.mark.slow
def test_sac_learns_pendulum_online():
    from privrl.envs.batched import make_batched

    env = make_batched("pendulum", 1, seed=0)
    t = env.task
    agent = SAC(t.obs_dim, t.act_dim, [t.action_low], [t.action_high], seed=0)
    train_online(OnlineTrainingSettings(total_steps=7000, start_steps=1000), agent, env, seed=0)
    ev = make_batched("pendulum", 20, seed=1)
    obs, ret = ev.reset(seed=1), np.zeros(20)
    for _ in range(ev.horizon):
        obs, r, _ = ev.step(agent.act(obs, deterministic=True))
        ret += r
    # Uniform random actions score ≈ 125 on this scale (r' = 1 + r/16.27, 200 steps).
    assert ret.mean() > 170, ret.mean()


def test_replay_buffer_feeds_sac():
    buf = ReplayBuffer(3, 1, 100, seed=0)
    rng = np.random.default_rng(0)
    buf.add_batch(
        rng.normal(size=(50, 3)),
        rng.uniform(-2, 2, (50, 1)),
        rng.normal(size=50),
        rng.normal(size=(50, 3)),
        np.zeros(50, dtype=bool),
    )
    stats = _agent(batch_size=32).update(buf.sample(32))
    assert np.isfinite(list(stats.values())).all()
