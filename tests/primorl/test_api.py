"""PRIMORL and MOPO from Python (`privrl.primorl.PRIMORL`, `MOPO`): the objects on a small
dataset, the same plan as the command line, the ledger transaction, reproducible insecure
noise, errors that name fields, and tasks beyond the four presets."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from privrl.config import ConfigError
from privrl.data.io import header_of, load_hdf5, read_header, save_hdf5
from privrl.primorl import MOPO, PRIMORL, ControlTask, MOPOConfig, PrimorlConfig, learners
from privrl.primorl.dynamics import dynamics_config
from privrl.primorl.tasks import gym_task, resolve_task
from privrl.privacy.ledger import BudgetLedger, LedgerError
from privrl.privacy.noise import NoiseSource
from privrl.systems.primorl import PrimorlRunConfig, PrimorlSystem
from tests.primorl.test_primorl import declared_split, pendulum_data

torch.set_num_threads(1)

TINY = dict(
    noise_multiplier=2.0,
    steps=4,
    sampling_rate=0.2,
    eval_every=2,
    epochs=2,
    steps_per_epoch=10,
    rollout_every=10,
    rollout_batch_size=20,
    rollout_length=5,
    eval_episodes=2,
    final_epochs=1,
    sac_hidden=(8, 8),
    sac_batch_size=16,
    dynamics=dynamics_config("pendulum", hidden=(8, 8), members=2),
)


def declared(n: int = 30, seed: int = 0):
    """Pendulum episodes with K and 20% public episodes declared in the metadata."""
    data = pendulum_data(n, T=20, seed=seed, extra={"n_trajectories": n})
    ids = list(range(0, n, 5))
    return data.with_metadata(data.metadata.with_extra(public_episodes=ids))


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    return save_hdf5(declared(), tmp_path / "d.h5")


def _timeless(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "created"}


def release_of(result) -> dict[str, torch.Tensor]:
    return result.details.released.model.state_dict()["ensemble"]


def test_fit_from_python_returns_a_policy_and_its_report() -> None:
    seen: list[tuple[str, int, int]] = []
    result = PRIMORL(**TINY).fit(
        declared(), noise=NoiseSource.insecure(0), progress=lambda *a: seen.append(a)
    )
    obs = np.zeros((3, 3))
    action = result.policy.act(obs, np.random.default_rng(0))
    assert action.shape == (3, 1) and np.all(np.abs(action) <= 2.0)
    assert result.report.system == "primorl" and result.report.unit.value == "trajectory"
    assert math.isfinite(result.metrics["return_mean"]) and len(result.curve) == 2
    assert result.metrics["public_split_units"] == 6
    assert any(p["name"] == "z (noise multiplier)" for p in result.report.public_parameters)
    assert ("DP-FedAvg rounds", 4, 4) in seen and ("SAC in the model", 2, 2) in seen


def test_the_command_line_and_python_plan_the_same(stored: Path) -> None:
    """One config, two paths: `privrl train primorl` (the system's plan from the file's header)
    and `PRIMORL(config).plan(header_of(dataset))` resolve the same public parameters, the same
    settings and the same planned report."""
    settings = {
        k: v for k, v in TINY.items() if k in ("noise_multiplier", "steps", "sampling_rate")
    }
    cli = PrimorlSystem().plan(PrimorlRunConfig(**settings), read_header(stored))
    lib = PRIMORL(PrimorlConfig(**settings)).plan(header_of(load_hdf5(stored)))
    assert cli.public["public_parameters"] == lib.public["public_parameters"]
    assert _timeless(cli.report.to_dict()) == _timeless(lib.report.to_dict())
    assert cli.public["fedavg"] == lib.public["fedavg"] and cli.public["task"] == "pendulum"
    assert cli.public["public_data"] == lib.public["public_data"]


def test_fit_with_a_ledger_records_one_completed_spend(stored: Path) -> None:
    ledger = BudgetLedger.init(
        stored, epsilon=50.0, delta=1e-5, unit="trajectory", relation="add_remove", backend="pld"
    )
    result = PRIMORL(**TINY).fit(load_hdf5(stored), ledger=ledger)
    (entry,) = ledger.entries
    assert entry.status == "complete" and entry.label == "primorl"
    assert entry.report["epsilon"] == pytest.approx(result.report.epsilon)
    assert ledger.spent() == pytest.approx(result.report.epsilon, rel=1e-3)  # both PLD


def test_an_overspend_is_refused_before_the_episodes_are_read(
    stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = BudgetLedger.init(
        stored, epsilon=0.01, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    reads: list[object] = []
    monkeypatch.setattr(learners, "in_task_scale", lambda *a: reads.append(a))
    with pytest.raises(LedgerError):
        PRIMORL(**TINY).fit(load_hdf5(stored), ledger=ledger)
    assert reads == [] and ledger.entries == ()


def test_insecure_noise_makes_two_fits_identical() -> None:
    data = declared(seed=3)
    a, b = (PRIMORL(**TINY).fit(data, noise=NoiseSource.insecure(7), seed=1) for _ in range(2))
    for key, value in release_of(a).items():
        assert torch.equal(value, release_of(b)[key]), key
    assert a.metrics["return_mean"] == b.metrics["return_mean"]
    assert not a.report.certified and a.report.nominal_epsilon is not None


def test_insecure_noise_is_refused_by_a_ledger(stored: Path) -> None:
    ledger = BudgetLedger.init(
        stored, epsilon=50.0, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    with pytest.raises(LedgerError):
        PRIMORL(**TINY).fit(load_hdf5(stored), ledger=ledger, noise=NoiseSource.insecure(0))
    assert ledger.entries == ()


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"variant": "medium"}, "variant"),
        ({"variant": "high", "noise_multiplier": 1.0}, "variant"),
        ({"lam": -1.0}, "lam"),
        ({"start_states": "dataset"}, "start_states"),
        ({"unit": "users"}, "unit"),
    ],
)
def test_config_errors_name_the_field(settings: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        PRIMORL(**settings)
    assert err.value.key == key and "--" not in str(err.value)


def test_plan_errors_name_fields_not_flags() -> None:
    data = pendulum_data(10, extra={"n_trajectories": 10})
    with pytest.raises(ConfigError) as err:
        PRIMORL(noise_multiplier=1.0, start_states="public-split").plan(header_of(data))
    assert err.value.key == "start_states" and "--" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        PRIMORL(task="Acrobot-v1").plan(header_of(data))
    assert err.value.key == "task" and "Discrete action space" in str(err.value)
    with pytest.raises(ConfigError) as err:
        MOPO(rollout_batch_size=5_000_000, rollout_length=100).plan(header_of(data))
    assert err.value.key == "rollout_batch_size" and "model buffer" in str(err.value)


def test_a_public_dataset_in_memory_is_declared_not_chosen() -> None:
    priv, pub = declared_split(pendulum_data(30, seed=4, extra={"n_trajectories": 30}))
    plan = PRIMORL(**TINY).plan(header_of(priv), public=header_of(pub))
    assert plan.public["public_data"]["episodes"] == pub.n_episodes
    with pytest.raises(ConfigError, match="same episodes") as err:
        PRIMORL(**TINY).plan(header_of(priv), public=header_of(priv))
    assert err.value.key == "public"


def test_mopo_from_python_and_its_refusal_by_a_ledger(tmp_path: Path) -> None:
    mopo = MOPO(
        MOPOConfig(
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
    )
    data = pendulum_data(20, seed=5)
    result = mopo.fit(data)
    assert math.isinf(result.report.epsilon) and not result.report.private
    assert result.policy.act(np.zeros((1, 3)), np.random.default_rng(0)).shape == (1, 1)
    path = save_hdf5(data, tmp_path / "m.h5")
    ledger = BudgetLedger.init(
        path, epsilon=5.0, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    with pytest.raises(LedgerError, match="not differentially private"):
        mopo.fit(load_hdf5(path), ledger=ledger)
    assert ledger.entries == ()


# ----------------------------------------------------------------------------- other tasks


def random_logs(env_id: str, n: int, horizon: int):
    """`n` episodes of `horizon` steps of a uniformly random behaviour policy."""
    import gymnasium as gym

    from privrl.data import collect
    from privrl.policies import UniformRandomPolicy

    policy = UniformRandomPolicy(gym.make(env_id).action_space)
    return collect(env_id, policy, n_episodes=n, seed=0, max_steps=horizon, progress=False)


def test_a_gymnasium_id_without_a_preset_is_a_task() -> None:
    task = gym_task("MountainCarContinuous-v0")
    assert (task.obs_dim, task.act_dim, task.horizon) == (2, 1, 999)
    assert (task.action_low, task.action_high, task.reward_range) == (-1.0, 1.0, None)
    source, target = resolve_task("MountainCarContinuous-v0", None)
    assert source == target == task
    mine = ControlTask("toy", "MountainCarContinuous-v0", 2, 1, 50, -1.0, 1.0, None)
    assert resolve_task(mine, None) == (mine, mine)
    assert PrimorlConfig(task=mine).preset == learners.PrimorlConfig(task="x-v0").preset


def test_primorl_learns_on_a_gymnasium_task_without_a_preset() -> None:
    """MountainCarContinuous-v0 has no preset: its facts come from the simulator and the
    dataset's declared horizon; C and T_max must be given (no preset to default to)."""
    data = random_logs("MountainCarContinuous-v0", 12, 15)
    small = {k: v for k, v in TINY.items() if k != "dynamics"}
    small["dynamics"] = dynamics_config("pendulum", hidden=(8, 8), members=2)
    with pytest.raises(ValueError, match="C"):
        PRIMORL(**{**small, "trajectories": 12}).plan(header_of(data))
    primorl = PRIMORL(**small, clip=0.1, trajectories=12)
    facts = primorl.plan(header_of(data)).public["task_facts"]  # published: public facts
    assert (facts["obs_dim"], facts["horizon"], facts["action_high"]) == (2, 15, 1.0)
    result = primorl.fit(data, noise=NoiseSource.insecure(1))
    assert result.metrics["task"] == "MountainCarContinuous-v0"
    assert result.metrics["rounds"] == 4 and len(result.curve) == 2
    assert result.policy.act(np.zeros((2, 2)), np.random.default_rng(0)).shape == (2, 1)
    control = result.details.released.control  # the facts travel with the release
    assert control.horizon == 15 and control.env_id == "MountainCarContinuous-v0"


def test_mopo_takes_a_gymnasium_task_and_names_fields_in_errors() -> None:
    data = random_logs("MountainCarContinuous-v0", 8, 15)
    tiny = dict(epochs=1, steps_per_epoch=5, rollout_batch_size=10, rollout_length=3)
    tiny.update(sac_hidden=(8, 8), sac_batch_size=8, eval_episodes=1, final_epochs=1)
    tiny["dynamics"] = dynamics_config("pendulum", hidden=(8, 8), members=2, max_epochs=1)
    result = MOPO(**tiny).fit(data)
    assert result.details.stage.curve[0]["epoch"] == 1 and not result.report.private
    assert result.metrics["penalty"] == "ma"  # the generic defaults: no preset for the task
    for settings, key in (({"real_ratio": 2.0}, "real_ratio"), ({"starts": "x"}, "starts")):
        with pytest.raises(ConfigError) as err:
            MOPO(**settings)
        assert err.value.key == key and "--" not in str(err.value)


def test_a_config_filled_in_for_one_task_is_not_reused_for_another() -> None:
    pendulum = PrimorlConfig(task="pendulum")
    assert pendulum.for_task("Pendulum-v1").penalty == "mpd"  # the same task, raw rewards
    with pytest.raises(ConfigError) as err:
        pendulum.for_task("swingup")
    assert err.value.key == "task"
    with pytest.raises(ConfigError):
        MOPOConfig.for_task("pendulum").mopo_config("halfcheetah")
