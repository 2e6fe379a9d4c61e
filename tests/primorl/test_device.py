"""PRIMORL and MOPO on a chosen device: the ``device`` option is validated (a misspelt name and
an absent GPU are refused naming the field, before any data is read), its default stays out of
a config's identity and out of the published plan (cell keys and resume records unchanged), an
explicit ``cpu`` runs exactly like the default on a machine without a GPU, checkpoints are
device-free, and (with a GPU) one DP-FedAvg round and one model step agree on CPU and CUDA to
float32 tolerance for the same noise draw."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from privrl.config import ConfigError
from privrl.data.io import header_of
from privrl.primorl import MOPO, PRIMORL, MOPOConfig, PrimorlConfig
from privrl.primorl import dp_fedavg as fed
from privrl.primorl.dynamics import DynamicsConfig, DynamicsModel, dynamics_config, holdout_mse
from privrl.privacy.noise import NoiseSource
from tests.noise import noise_rng
from tests.primorl.test_api import TINY, declared, release_of
from tests.primorl.test_dp_fedavg import _dataset, _plan

torch.set_num_threads(1)

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")
SMALL = DynamicsConfig(hidden=(16, 16), members=3)
MOPO_TINY: dict[str, Any] = dict(
    epochs=1,
    steps_per_epoch=10,
    rollout_batch_size=20,
    rollout_length=5,
    sac_hidden=(8, 8),
    sac_batch_size=16,
    eval_episodes=2,
    final_epochs=1,
    dynamics=dynamics_config("pendulum", hidden=(8, 8), members=2, max_epochs=2),
)


def tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor in nested dicts, lists and tuples."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in tensors(v)]
    if isinstance(obj, list | tuple):
        return [t for v in obj for t in tensors(v)]
    return []


def all_on_cpu(obj: Any) -> bool:
    found = tensors(obj)
    return bool(found) and all(t.device.type == "cpu" for t in found)


# ----------------------------------------------------------------------------- the option


@pytest.mark.parametrize("cls", [PrimorlConfig, MOPOConfig])
def test_a_misspelt_device_is_refused_naming_the_field(cls) -> None:
    assert cls().device == "auto"
    assert cls(device="cuda:1").device == "cuda:1"  # spelling only: presence is the plan's
    with pytest.raises(ConfigError) as err:
        cls(device="gpu")
    assert err.value.key == "device" and "cpu, cuda, cuda:N or auto" in str(err.value)


@pytest.mark.parametrize("cls", [PrimorlConfig, MOPOConfig])
def test_the_default_device_leaves_the_identity_unchanged(cls) -> None:
    assert "device" not in cls().identity()
    assert cls(device="auto").fingerprint() == cls().fingerprint()
    assert cls(device="cpu").identity()["device"] == "cpu"


def test_the_published_plan_names_no_device() -> None:
    """The resume record and config.json's settings come from the plan's public part: a run
    started on one device resumes on another (its checkpoints are device-free)."""
    header = header_of(declared())
    cpu, default = PRIMORL(**TINY, device="cpu").plan(header), PRIMORL(**TINY).plan(header)
    assert cpu.public == default.public and "device" not in cpu.public
    assert cpu.facts["device"] == torch.device("cpu")
    mopo = MOPO(**MOPO_TINY, device="cpu").plan(header)
    assert mopo.public == MOPO(**MOPO_TINY).plan(header).public and "device" not in mopo.public


@NO_GPU
def test_an_absent_gpu_is_refused_by_the_plan_before_any_data() -> None:
    header = header_of(declared())
    for algorithm in (PRIMORL(**TINY, device="cuda"), MOPO(**MOPO_TINY, device="cuda:0")):
        with pytest.raises(ConfigError) as err:
            algorithm.plan(header)
        assert err.value.key == "device" and "needs a CUDA GPU" in str(err.value)


# ----------------------------------------------------------------------------- CPU runs


@NO_GPU
def test_explicit_cpu_equals_the_default_for_primorl() -> None:
    data = declared(seed=3)
    default, cpu = (
        PRIMORL(**TINY, **kw).fit(data, noise=NoiseSource.insecure(7), seed=1)
        for kw in ({}, {"device": "cpu"})
    )
    for key, value in release_of(default).items():
        assert torch.equal(value, release_of(cpu)[key]), key
    assert default.metrics["return_mean"] == cpu.metrics["return_mean"]
    assert default.metrics["device"] == cpu.metrics["device"] == "cpu"


@NO_GPU
def test_explicit_cpu_equals_the_default_for_mopo() -> None:
    data = declared(seed=2)
    default, cpu = (MOPO(**MOPO_TINY, **kw).fit(data, seed=1) for kw in ({}, {"device": "cpu"}))
    a, b = default.details.stage.agent.state_dict(), cpu.details.stage.agent.state_dict()
    for key in ("actor", "q"):
        for name, value in a[key].items():
            assert torch.equal(value, b[key][name]), (key, name)
    assert default.metrics["return_mean"] == cpu.metrics["return_mean"]
    assert default.metrics["device"] == cpu.metrics["device"] == "cpu"


def test_checkpoints_and_the_release_are_device_free() -> None:
    """Every saved state is on the CPU whatever the device (here: auto), so a checkpoint
    written on a GPU loads on a machine without one."""
    states: list[dict] = []
    model = DynamicsModel(
        3, 1, SMALL, seed=0, device="cuda" if torch.cuda.is_available() else "cpu"
    )
    plan = _plan(max_rounds=2, sampling_rate=0.3, noise_multiplier=2.0, accountant="rdp")
    fed.train_dp_fedavg(
        model,
        _dataset(),
        plan,
        normalizer="model",
        noise=NoiseSource.insecure(0),
        on_checkpoint=states.append,
        checkpoint_every=1,
    )
    assert len(states) == 2 and all(all_on_cpu(s) for s in states)
    assert all_on_cpu(model.state_dict())
    again = DynamicsModel.from_state_dict(model.state_dict(), device="cpu")
    obs, act = np.zeros((4, 3), np.float32), np.zeros((4, 1), np.float32)
    np.testing.assert_allclose(
        again.predict(obs, act, deterministic=True)[0],
        model.predict(obs, act, deterministic=True)[0],
        rtol=1e-5,
        atol=1e-6,
    )


# ----------------------------------------------------------------------------- CPU and CUDA


def _round(device: str) -> torch.Tensor:
    """One DP-FedAvg round on ``device`` from the same θ(0), clients, Poisson sample, batch
    order and noise draw (the noise drawn on the CPU from the same generator and moved)."""
    model = DynamicsModel(3, 1, SMALL, seed=0, device=device)
    clients = fed.Clients.from_dataset(model, _dataset())
    layout = fed.EnsembleLayout(model.ensemble)
    start = layout.flatten(model.ensemble.parameters_dict())
    theta = fed.dp_fedavg_round(
        model.ensemble,
        start,
        clients,
        _plan(sampling_rate=0.5, clip_mode="per_layer"),
        sample_rng=noise_rng(0),
        batch_rng=np.random.default_rng(1),
        generator=noise_rng(4),
    )
    assert theta.device.type == torch.device(device).type
    return theta.cpu()


@CUDA
def test_one_dp_fedavg_round_agrees_on_cpu_and_cuda() -> None:
    torch.testing.assert_close(_round("cuda"), _round("cpu"), rtol=1e-4, atol=1e-5)


@CUDA
def test_the_model_step_and_public_split_mse_agree_on_cpu_and_cuda() -> None:
    data = _dataset().transitions()
    cpu, gpu = (DynamicsModel(3, 1, SMALL, seed=2, device=d) for d in ("cpu", "cuda"))
    obs, act = np.asarray(data.observations[:50]), np.asarray(data.actions[:50])
    for a, b in zip(cpu.predict(obs, act, 5), gpu.predict(obs, act, 5), strict=True):
        if isinstance(a, dict):
            np.testing.assert_allclose(a["means"], b["means"], rtol=1e-4, atol=1e-5)
            np.testing.assert_array_equal(a["members"], b["members"])  # the same CPU draws
        else:
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(holdout_mse(gpu, data), holdout_mse(cpu, data), rtol=1e-4)


@CUDA
def test_a_tiny_primorl_run_on_cuda_records_the_gpu_and_releases_a_cpu_model() -> None:
    result = PRIMORL(**TINY, device="cuda").fit(declared(), noise=NoiseSource.insecure(7))
    assert result.metrics["device"].startswith("cuda:")
    assert all_on_cpu(result.details.released.state_dict()["model"])
