"""The continuous-action agents and the replay buffer on a chosen device: an explicit ``cpu``
trains exactly like the default, batches are sampled onto the buffer's device, states are
device-free and load on the CPU, and (with a GPU) one SAC or TD3 update from the same weights
and batch agrees on CPU and CUDA to float32 tolerance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privrl.nn.device import resolve_device
from privrl.rl.replay import ReplayBuffer
from privrl.rl.sac import SAC, SACConfig
from privrl.rl.td3 import TD3, TD3Config
from tests.primorl.test_device import all_on_cpu
from tests.rl.test_sac import _batch

torch.set_num_threads(1)

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")
AUTO = resolve_device("auto")


def _sac(device: torch.device | str | None = None) -> SAC:
    kwargs = {} if device is None else {"device": device}
    return SAC(3, 1, [-2.0], [2.0], SACConfig(hidden=(16, 16)), seed=0, **kwargs)


def _td3(device: torch.device | str = "cpu") -> TD3:
    return TD3(3, 1, [-2.0], [2.0], TD3Config(hidden=(16, 16), policy_delay=1), device=device)


def _on(batch: dict[str, torch.Tensor], device: torch.device | str) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def _params(agent: SAC | TD3) -> dict[str, torch.Tensor]:
    state = agent.state_dict()
    return {f"{part}.{k}": v for part in ("actor", "q") for k, v in state[part].items()}


def test_explicit_cpu_updates_exactly_like_the_default() -> None:
    default, cpu = _sac(), _sac("cpu")
    for _ in range(3):
        a, b = default.update(_batch(64)), cpu.update(_batch(64))
        assert a == b
    for k, v in _params(default).items():
        assert torch.equal(v, _params(cpu)[k]), k
    obs = np.zeros((2, 3))
    assert np.array_equal(default.act(obs), cpu.act(obs))  # the same act_gen draws


def test_the_sac_state_is_device_free_and_loads_on_the_cpu() -> None:
    agent = _sac(AUTO)
    agent.update(_on(_batch(32), AUTO))
    state = agent.state_dict()
    assert all_on_cpu(state) and agent.log_alpha.device.type == AUTO.type
    again = SAC.from_state_dict(state, device="cpu")
    obs = np.random.default_rng(0).normal(size=(5, 3))
    np.testing.assert_allclose(again.act(obs, True), agent.act(obs, True), rtol=1e-5, atol=1e-6)
    policy = agent.policy(deterministic=False)
    a = policy.act(obs, np.random.default_rng(1))
    assert a.shape == (5, 1) and np.all(np.abs(a) <= 2.0)


def test_the_buffer_samples_onto_its_device_and_saves_on_the_cpu() -> None:
    buf = ReplayBuffer(3, 1, 50, seed=4, device=AUTO)
    rng = np.random.default_rng(0)
    n = 30
    obs, act, rew = rng.normal(size=(n, 3)), rng.normal(size=(n, 1)), rng.normal(size=n)
    buf.add_batch(obs, act, rew, rng.normal(size=(n, 3)), np.zeros(n))
    state = buf.state_dict()
    assert all_on_cpu(state["data"])
    batch = buf.sample(8)
    assert all(v.device.type == AUTO.type for v in batch.values())
    cpu = ReplayBuffer(3, 1, 50, seed=0, device="cpu")
    cpu.load_state_dict(state)
    assert torch.equal(cpu.sample(8)["obs"], batch["obs"].cpu())  # the same generator state
    other = ReplayBuffer(3, 1, 50, seed=5)
    other.add_batch(*(v.cpu().numpy() for v in batch.values()))
    mixed = buf.sample_mixed(other, 10, 0.3)
    assert mixed["obs"].shape == (10, 3) and mixed["obs"].device.type == AUTO.type


@CUDA
def test_one_sac_update_agrees_on_cpu_and_cuda() -> None:
    cpu, gpu = _sac("cpu"), _sac("cuda")
    for k, v in _params(cpu).items():
        assert torch.equal(v, _params(gpu)[k]), k  # the same initial weights
    batch = _batch(128)
    a, b = cpu.update(batch), gpu.update(_on(batch, "cuda"))
    for key in a:
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-5), key
    for k, v in _params(cpu).items():
        torch.testing.assert_close(_params(gpu)[k], v, rtol=1e-4, atol=1e-5)
    obs = np.random.default_rng(0).normal(size=(4, 3))
    np.testing.assert_allclose(gpu.act(obs), cpu.act(obs), rtol=1e-4, atol=1e-5)


@CUDA
def test_one_td3_update_agrees_on_cpu_and_cuda() -> None:
    cpu, gpu = _td3("cpu"), _td3("cuda")
    batch = _batch(128)
    cpu.update(batch)
    gpu.update(_on(batch, "cuda"))
    for k, v in _params(cpu).items():
        torch.testing.assert_close(_params(gpu)[k], v, rtol=1e-4, atol=1e-5)
