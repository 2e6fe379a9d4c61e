"""The public facts of a Gymnasium task without a preset: declared settings > the dataset's
metadata > the simulator; what nothing public gives is refused naming the field."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from privrl.config import ConfigError
from privrl.data.dataset import DatasetMetadata
from privrl.primorl import PrimorlConfig
from privrl.primorl.tasks import TaskFacts, gym_task, resolve_task

CAR = "MountainCarContinuous-v0"


def test_settings_beat_the_metadata_which_beats_the_simulator() -> None:
    sim = gym_task(CAR)
    assert (sim.horizon, sim.action_low, sim.action_high, sim.reward_range) == (
        999, -1.0, 1.0, None
    )  # fmt: skip
    meta = DatasetMetadata(
        action_space=spaces.Box(-0.5, 0.5, (1,), np.float32),
        horizon=50,
        extra={"reward_range": [-0.1, 100.0]},
    )
    declared = gym_task(CAR, meta)
    assert (declared.horizon, declared.action_low, declared.reward_range) == (
        50, -0.5, (-0.1, 100.0)
    )  # fmt: skip
    facts = TaskFacts(horizon=30, action_bounds=(-0.25, 0.25), reward_range=(-1.0, 1.0))
    given = gym_task(CAR, meta, facts=facts)
    assert (given.horizon, given.action_high, given.reward_range) == (30, 0.25, (-1.0, 1.0))


def test_a_config_carries_the_facts_to_the_task() -> None:
    config = PrimorlConfig(horizon=40, action_bounds=(-1.0, 1.0), reward_range=(-2.0, 2.0))
    _, task = resolve_task(CAR, None, None, config.task_facts())
    assert (task.horizon, task.reward_range) == (40, (-2.0, 2.0))


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"horizon": 0}, "horizon"),
        ({"action_bounds": (1.0, -1.0)}, "action_bounds"),
        ({"reward_range": (0.0, float("inf"))}, "reward_range"),
    ],
)
def test_bad_facts_are_refused_by_the_config(kw: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        PrimorlConfig(**kw)
    assert err.value.key == key


def test_a_preset_tasks_facts_must_agree_with_privrls() -> None:
    """Pendulum-v1's facts are privrl's; a declared horizon that differs is refused (naming the
    field), an equal one is harmless."""
    with pytest.raises(ConfigError) as err:
        resolve_task("Pendulum-v1", None, None, TaskFacts(horizon=100))
    assert err.value.key == "horizon" and "200" in err.value.problem
    assert resolve_task("Pendulum-v1", None, None, TaskFacts(horizon=200))[1].horizon == 200


def test_a_discrete_action_space_is_not_a_control_task() -> None:
    with pytest.raises(ConfigError) as err:
        resolve_task("CartPole-v1", None)
    assert err.value.key == "task" and "Discrete action space" in err.value.problem
