"""ReplayBuffer: storage, ring wrap-around, seeded sampling, mixing, state round-trip; and the
online loop's bookkeeping on a tiny batched environment."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privrl.rl.replay import OnlineTrainingSettings, ReplayBuffer, train_online

torch.set_num_threads(1)


def _rows(n: int, start: int, obs_dim: int = 3, act_dim: int = 2):
    i = np.arange(start, start + n, dtype=np.float64)
    obs = np.repeat(i[:, None], obs_dim, axis=1)
    act = np.repeat(-i[:, None], act_dim, axis=1)
    return obs, act, 10 * i, obs + 0.5, (i % 2 == 0)


def test_add_and_arrays_keep_order_and_fields():
    buf = ReplayBuffer(3, 2, capacity=10, seed=0)
    buf.add_batch(*_rows(4, 0))
    assert len(buf) == 4
    a = buf.arrays()
    np.testing.assert_array_equal(a["obs"][:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(a["act"][:, 1], [0, -1, -2, -3])
    np.testing.assert_array_equal(a["rew"], [0, 10, 20, 30])
    np.testing.assert_array_equal(a["next_obs"][:, 2], [0.5, 1.5, 2.5, 3.5])
    np.testing.assert_array_equal(a["done"], [1, 0, 1, 0])


def test_ring_buffer_overwrites_oldest():
    buf = ReplayBuffer(3, 2, capacity=5, seed=0)
    buf.add_batch(*_rows(4, 0))
    buf.add_batch(*_rows(3, 4))  # wraps: 0 and 1 are overwritten
    assert len(buf) == 5
    np.testing.assert_array_equal(buf.arrays()["obs"][:, 0], [2, 3, 4, 5, 6])
    buf.add_batch(*_rows(12, 7))  # more than capacity at once: newest 5 survive
    np.testing.assert_array_equal(buf.arrays()["obs"][:, 0], [14, 15, 16, 17, 18])


def test_sampling_is_seeded_and_consistent_across_fields():
    def draw(seed: int) -> dict[str, torch.Tensor]:
        buf = ReplayBuffer(3, 2, capacity=100, seed=seed)
        buf.add_batch(*_rows(50, 0))
        return buf.sample(64)

    a, b, c = draw(1), draw(1), draw(2)
    for k in a:
        assert a[k].dtype == torch.float32
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    assert not torch.equal(a["obs"], c["obs"])
    # Fields of a row belong to the same transition.
    i = a["obs"][:, 0]
    torch.testing.assert_close(a["act"][:, 0], -i)
    torch.testing.assert_close(a["rew"], 10 * i)
    torch.testing.assert_close(a["done"], (i % 2 == 0).float())
    assert a["rew"].shape == (64,) and a["done"].shape == (64,)


def test_sample_mixed_takes_the_requested_share():
    model = ReplayBuffer(3, 2, capacity=100, seed=0)
    real = ReplayBuffer(3, 2, capacity=100, seed=1)
    model.add_batch(*_rows(50, 0))
    real.add_batch(*_rows(50, 1000))
    batch = model.sample_mixed(real, 200, ratio=0.05)
    from_real = (batch["obs"][:, 0] >= 1000).sum().item()
    assert from_real == 10
    assert batch["obs"].shape == (200, 3)
    with pytest.raises(ValueError):
        model.sample_mixed(real, 10, ratio=1.5)


def test_state_dict_round_trip_continues_identically():
    buf = ReplayBuffer(3, 2, capacity=20, seed=3)
    buf.add_batch(*_rows(25, 0))
    buf.sample(8)
    state = buf.state_dict()
    other = ReplayBuffer(3, 2, capacity=20, seed=99)
    other.load_state_dict(state)
    np.testing.assert_array_equal(other.arrays()["obs"], buf.arrays()["obs"])
    torch.testing.assert_close(other.sample(16), buf.sample(16), rtol=0, atol=0)
    buf.add_batch(*_rows(3, 100))
    other.add_batch(*_rows(3, 100))
    np.testing.assert_array_equal(other.arrays()["obs"], buf.arrays()["obs"])
    with pytest.raises(ValueError):
        ReplayBuffer(3, 2, capacity=21).load_state_dict(state)


def test_empty_buffer_refuses_to_sample():
    with pytest.raises(ValueError):
        ReplayBuffer(1, 1, capacity=4).sample(2)


class _CountingEnv:
    """Batched env whose reward is the step index; horizon 5; obs = step count."""

    class task:
        obs_dim, act_dim, action_low, action_high = 1, 1, -1.0, 1.0

    def __init__(self, n: int) -> None:
        self.num_envs, self.horizon, self.t = n, 5, 0

    def reset(self, seed=None):
        self.t = 0
        return np.zeros((self.num_envs, 1))

    def step(self, a):
        assert a.shape == (self.num_envs, 1) and np.all(np.abs(a) <= 1)
        self.t += 1
        return (
            np.full((self.num_envs, 1), float(self.t)),
            np.full(self.num_envs, float(self.t)),
            np.zeros(self.num_envs, dtype=bool),
        )


class _RecordingAgent:
    class config:
        batch_size = 4

    def __init__(self) -> None:
        self.n_updates = 0

    def act(self, obs, deterministic=False):
        return np.zeros((len(obs), 1))

    def update(self, batch):
        assert batch["obs"].shape == (4, 1)
        self.n_updates += 1
        return {"n": float(self.n_updates)}


def test_train_online_counts_steps_updates_episodes_and_checkpoints():
    env = _CountingEnv(n=3)
    agent = _RecordingAgent()
    seen = []
    res = train_online(
        OnlineTrainingSettings(
            total_steps=60, start_steps=15, update_after=6, update_every=1, checkpoint_every=30
        ),
        agent,
        env,
        callback=lambda step, ag, r: seen.append(step),
        seed=0,
    )
    assert res.steps == 60
    # Update-to-data ratio 1 once `update_after` transitions are stored.
    assert res.updates == agent.n_updates == 60 - 3
    assert res.episode_returns == [15.0] * 4  # 1+2+3+4+5 per episode, 60/(3·5) episodes
    assert seen == [30, 60]


def test_train_online_resumes_from_a_snapshot_exactly(tmp_path):
    from privrl.rl.sac import SAC, SACConfig
    from tests.rl._toy import ToyBatchedEnv

    def agent() -> SAC:
        cfg = SACConfig(hidden=(16, 16), batch_size=32)
        return SAC(2, 1, [-2.0], [2.0], cfg, seed=0)

    def run(total: int, snap, kept: dict) -> tuple[SAC, object]:
        ag = agent()

        def cb(step, a, r):
            kept.setdefault("ckpts", []).append(step)

        res = train_online(
            OnlineTrainingSettings(
                total_steps=total,
                start_steps=40,
                update_after=40,
                update_every=10,
                checkpoint_every=40,
                snapshot_every=40,
                snapshot_tag="t",
            ),
            ag,
            ToyBatchedEnv(2, seed=0),
            callback=cb,
            seed=5,
            snapshot_path=snap,
            extra_state=kept,
        )
        return ag, res

    straight_kept: dict = {}
    straight, res_a = run(200, None, straight_kept)
    snap = tmp_path / "snap.pt"
    first_kept: dict = {}
    run(120, snap, first_kept)  # "interrupted" after 120 transitions
    assert snap.is_file()
    resumed_kept: dict = {}
    resumed, res_b = run(200, snap, resumed_kept)
    for p, q in zip(straight.actor.parameters(), resumed.actor.parameters(), strict=True):
        assert torch.equal(p, q)
    assert res_a.episode_returns == res_b.episode_returns
    assert res_a.updates == res_b.updates
    assert resumed_kept["ckpts"] == straight_kept["ckpts"] == [40, 80, 120, 160, 200]
    # A snapshot with another tag is ignored (fresh start).
    other, _ = run(40, None, {})
    fresh = agent()
    train_online(
        OnlineTrainingSettings(
            total_steps=40, start_steps=40, update_after=40, snapshot_tag="other"
        ),
        fresh,
        ToyBatchedEnv(2, seed=0),
        seed=5,
        snapshot_path=snap,
    )
    for p, q in zip(other.actor.parameters(), fresh.actor.parameters(), strict=True):
        assert torch.equal(p, q)
