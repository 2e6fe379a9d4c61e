"""The expert learners and discrete learners on a chosen device: an explicit ``cpu`` trains
exactly like the default on a machine without a GPU for a fixed noise draw, a misspelt device is
refused naming the field, checkpoints are device-free, and (with a GPU) CPU and CUDA agree to
float32 tolerance for the same noise."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privrl.config import ConfigError
from privrl.expert.config import DPSGDConfig, ExpertDPConfig
from privrl.expert.dpsgd import DPSGDSettings, expert_dp_sgd
from privrl.nn.device import resolve_device
from privrl.privacy.noise import NoiseSource
from privrl.rl.bcq import DiscreteBCQ
from privrl.rl.cql import DiscreteCQL
from privrl.rl.discrete_common import TransitionTable
from tests.expert.test_dpsgd import expert_dataset

torch.set_num_threads(1)

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")
SETTINGS = DPSGDSettings(
    epsilon=None, delta=1e-3, n_units=10, batch_size=5, noise_multiplier=5.0, steps=12
)


def _dp_sgd(device: str | None, seed: int = 3) -> dict[str, torch.Tensor]:
    """A tiny expert-level DP-SGD run (12 private steps) on ``device`` (None: the default),
    its noise and sampling from ``NoiseSource.insecure(seed)``; the final weights on the CPU."""
    kwargs = {} if device is None else {"device": resolve_device(device)}
    learner = DiscreteCQL(2, 3, hidden=(8,), seed=0, **kwargs)
    res = expert_dp_sgd(
        SETTINGS,
        learner,
        expert_dataset(n_experts=10),
        rng=np.random.default_rng(0),
        noise=NoiseSource.insecure(seed),
    )
    assert res.private_steps == 12
    return {k: v.detach().cpu() for k, v in learner.params.items()}


def _bcq(device: str | None, steps: int = 8) -> dict[str, torch.Tensor]:
    """A tiny ordinary (non-private) discrete BCQ run on ``device``."""
    kwargs = {} if device is None else {"device": resolve_device(device)}
    learner = DiscreteBCQ(2, 3, hidden=(8,), seed=1, **kwargs)
    table = TransitionTable(expert_dataset(), learner.obs_transform, learner.device)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        learner.update(table.sample(16, rng))
    return {k: v.detach().cpu() for k, v in learner.params.items()}


@NO_GPU
def test_explicit_cpu_equals_the_default_for_dp_sgd() -> None:
    default, cpu = _dp_sgd(None), _dp_sgd("cpu")
    for k in default:
        assert torch.equal(default[k], cpu[k]), k
    # the test can fail: another noise draw moves the weights
    other = _dp_sgd("cpu", seed=4)
    assert any(not torch.equal(default[k], other[k]) for k in default)


@NO_GPU
def test_explicit_cpu_equals_the_default_for_a_discrete_learner() -> None:
    default, cpu, auto = _bcq(None), _bcq("cpu"), _bcq("auto")
    for k in default:
        assert torch.equal(default[k], cpu[k]) and torch.equal(default[k], auto[k]), k
    assert any(not torch.equal(default[k], v) for k, v in _bcq(None, steps=9).items())


@pytest.mark.parametrize("cls", [DPSGDConfig, ExpertDPConfig])
def test_bad_device_is_refused_naming_the_field(cls) -> None:
    assert cls(epsilon=1.0).device == "auto"
    assert cls(epsilon=1.0, device="cuda:1").device == "cuda:1"  # spelling only, not presence
    with pytest.raises(ConfigError) as err:
        cls(epsilon=1.0, device="gpu")
    assert err.value.key == "device" and "cpu, cuda, cuda:N or auto" in str(err.value)


def test_checkpoint_is_device_free_and_loads_on_the_cpu(tmp_path) -> None:
    learner = DiscreteCQL(2, 3, hidden=(8,), seed=0, device=resolve_device("auto"))
    table = TransitionTable(expert_dataset(), learner.obs_transform, learner.device)
    learner.update(table.sample(8, np.random.default_rng(0)))
    learner.save(tmp_path / "l.pt")
    state = torch.load(tmp_path / "l.pt", map_location="cpu")
    tensors = [*state["params"].values(), *state["target_params"].values()]
    tensors += [t for s in state["optimizer"]["state"].values() for t in s.values()]
    assert all(t.device.type == "cpu" for t in tensors if isinstance(t, torch.Tensor))
    again = DiscreteCQL(2, 3, hidden=(8,), seed=5, device="cpu")
    again.load_state_dict(state)
    obs = np.random.default_rng(1).normal(size=(4, 2))
    np.testing.assert_allclose(again.q_values(obs), learner.q_values(obs), rtol=1e-6)


@CUDA
def test_cpu_and_cuda_agree_for_a_fixed_noise_draw() -> None:
    cpu, gpu = _dp_sgd("cpu"), _dp_sgd("cuda")
    for k in cpu:
        torch.testing.assert_close(gpu[k], cpu[k], rtol=1e-4, atol=1e-5)
    cpu, gpu = _bcq("cpu"), _bcq("cuda")
    for k in cpu:
        torch.testing.assert_close(gpu[k], cpu[k], rtol=1e-4, atol=1e-5)


@NO_GPU
def test_the_expert_dp_sgd_audit_trains_on_the_chosen_device() -> None:
    """The one-run audit trains the real learner: explicit cpu equals the default draw for
    draw; its config refuses a misspelt device naming the field."""
    from privrl.audit.expert import ExpertDPSGDAuditSettings, audit_expert_dp_sgd_one_run
    from privrl.audit.training_audits import AuditExpertDpSgdConfig

    def scores(**device: str) -> float:
        audit = audit_expert_dp_sgd_one_run(
            ExpertDPSGDAuditSettings(noise_multiplier=3.0, steps=2, background=10, **device),
            canaries=100,
            guesses=10,
            rng=np.random.default_rng(0),
        )
        return audit.epsilon_lower_bound, audit.correct

    assert scores() == scores(device="cpu") == scores(device="auto")
    assert AuditExpertDpSgdConfig(noise_multiplier=1.0).device == "auto"
    with pytest.raises(ConfigError) as err:
        AuditExpertDpSgdConfig(noise_multiplier=1.0, device="tpu")
    assert err.value.key == "device"
