"""MOPO and PRIMORL on data collected with a standard Gymnasium id (Pendulum-v1, raw rewards):
the task comes from the id, the reward scale is an option (`--reward-transform none|privrl`,
default: the dataset's own), and everything the scale touches agrees with it (the simulator
that evaluates the policy, the reward range holding model rollouts, the reference returns).
Any other Gymnasium continuous-control id is a task too (its facts from flags, the dataset's
metadata or the simulator); what cannot be one is refused with one `error:` line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from privrl.cli.main import main
from privrl.envs.control import CONTROL_TASKS, PENDULUM_MAX_COST, RAW_TASKS
from privrl.primorl.mopo import normalised_score
from privrl.systems.mopo import NO_SCORE, in_reward_scale
from tests.primorl.test_mopo import small_pendulum_dataset

torch.set_num_threads(1)

RAW, OURS = RAW_TASKS["Pendulum-v1"], CONTROL_TASKS["pendulum"]
H = RAW.horizon  # evaluation episodes run the task's full horizon
STAGE = ["--epochs", "1", "--steps-per-epoch", "5", "--rollout-batch-size", "10",
         "--rollout-length", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny datasets written by `privrl data collect --env ID` (uniform behaviour policy)."""
    root = tmp_path_factory.mktemp("raw")
    files = {"Pendulum-v1": root / "pendulum.h5", "MountainCarContinuous-v0": root / "car.h5"}
    for env_id, path in files.items():
        argv = ["data", "collect", "--env", env_id, "--episodes", "6", "--max-steps", "20"]
        assert main([*argv, "--seed", "1", "--num-envs", "2", "--out", str(path)]) == 0
    return files


@pytest.fixture
def small_dynamics(monkeypatch: pytest.MonkeyPatch) -> None:
    """MOPO's Pendulum preset with 20 model minibatches per epoch instead of 1000 (speed)."""
    from privrl.primorl import mopo

    d = mopo.MOPO_DEFAULTS["pendulum"]
    small = replace(d, dynamics={**d.dynamics, "steps_per_epoch": 20})
    monkeypatch.setitem(mopo.MOPO_DEFAULTS, "pendulum", small)


def _read(out: Path, name: str) -> dict[str, Any]:
    return json.loads((out / name).read_text())


@pytest.mark.parametrize(
    ("transform", "env_id", "low", "high"),
    [(None, "Pendulum-v1", -H * PENDULUM_MAX_COST, 0.0), ("privrl", "privrl/Pendulum-v0", 0, H)],
)
def test_mopo_trains_on_raw_pendulum(
    transform: str | None,
    env_id: str,
    low: float,
    high: float,
    collected: dict[str, Path],
    tmp_path: Path,
    small_dynamics: None,
) -> None:
    """Default: the raw scale (evaluated in Pendulum-v1, returns in [−H·c_max, 0]); with
    --reward-transform privrl the rewards are mapped and the policy evaluated in
    privrl/Pendulum-v0 (returns in [0, H]). No reference returns: no normalised score, and
    metrics.json says why."""
    out = tmp_path / "run"
    flags = [] if transform is None else ["--reward-transform", transform]
    argv = ["train", "mopo", "--data", str(collected["Pendulum-v1"]), "--out", str(out)]
    assert main([*argv, *STAGE, "--model-epochs", "1", *flags]) == 0
    metrics = _read(out, "metrics.json")
    assert metrics["env_id"] == env_id
    assert metrics["reward_transform"] == (transform or "none")
    assert low <= metrics["return_mean"] <= high
    assert metrics["normalised_score"] is None and metrics["normalised_score_note"] == NO_SCORE
    config = _read(out, "config.json")
    assert (config["data_env_id"], config["env_id"]) == ("Pendulum-v1", env_id)


def test_primorl_trains_on_raw_pendulum(collected: dict[str, Path], tmp_path: Path) -> None:
    """PRIMORL on the raw data: the released model records the raw id, so its policy stage
    (now and when reused with --model) evaluates in Pendulum-v1; the public parameters keep
    their sources (K from the flag, never counted)."""
    from privrl.primorl.primorl import load_released_model

    out = tmp_path / "run"
    argv = ["train", "primorl", "--data", str(collected["Pendulum-v1"]), "--out", str(out)]
    private = ["-z", "1", "--steps", "2", "-q", "0.2", "--eval-every", "1", "--trajectories", "6"]
    assert main([*argv, *private, *STAGE]) == 0
    metrics = _read(out, "metrics.json")
    assert (metrics["env_id"], metrics["reward_transform"]) == ("Pendulum-v1", "none")
    assert -H * PENDULUM_MAX_COST <= metrics["return_mean"] <= 0.0
    assert metrics["normalised_score"] is None and metrics["private"]
    params = {p["name"]: p for p in _read(out, "privacy.json")["public_parameters"]}
    assert params["K (declared number of units)"]["source"] == "flag"
    assert load_released_model(out / "model.pt").control is RAW


@pytest.mark.parametrize("system", ["mopo", "primorl"])
def test_any_gymnasium_continuous_control_id_trains(
    system: str, collected: dict[str, Path], tmp_path: Path
) -> None:
    """A Gymnasium id privrl has no preset for (MountainCarContinuous-v0): the dimensions and
    action box come from the simulator's spaces, the horizon from the dataset's declared one
    (the collection's 20 steps, not the env's 999), the reward range from --reward-range;
    config.json publishes these facts (all public), and the release carries them."""
    from privrl.primorl.primorl import load_released_model

    out = tmp_path / "run"
    data = collected["MountainCarContinuous-v0"]
    argv = ["train", system, "--data", str(data), "--out", str(out), *STAGE]
    argv += ["--reward-range=-1,1"]
    if system == "primorl":
        argv += ["--clip", "0.1", "--steps", "2", "-z", "1", "--trajectories", "6"]
    else:
        argv += ["--model-epochs", "1"]
    assert main(argv) == 0
    facts = _read(out, "config.json")["task_facts"]
    assert (facts["env_id"], facts["obs_dim"], facts["act_dim"]) == (
        "MountainCarContinuous-v0",
        2,
        1,
    )
    assert (facts["horizon"], facts["action_low"], facts["action_high"]) == (20, -1.0, 1.0)
    assert facts["reward_range"] == [-1.0, 1.0]
    metrics = _read(out, "metrics.json")
    assert -20.0 <= metrics["return_mean"] <= 20.0  # 20 steps of a reward held in [−1, 1]
    if system == "primorl":
        control = load_released_model(out / "model.pt").control
        assert (control.horizon, control.reward_range) == (20, (-1.0, 1.0))


class _Unbounded(gym.Env):
    """A continuous-control env whose action box has no finite bounds."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)


class _NoLimit(gym.Env):
    """A continuous-control env with a finite action box and no time limit."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


@pytest.fixture(scope="module")
def unusable(collected: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Pendulum's episodes re-labelled with env ids PRIMORL and MOPO cannot run: a Discrete
    action space, an unbounded action box, no horizon at all (none declared either)."""
    from privrl.data.io import load_hdf5, save_hdf5

    gym.register(id="privrl-test/Unbounded-v0", entry_point=_Unbounded, max_episode_steps=20)
    gym.register(id="privrl-test/NoLimit-v0", entry_point=_NoLimit)
    data = load_hdf5(collected["Pendulum-v1"])
    root = tmp_path_factory.mktemp("unusable")
    cases = {
        "CartPole-v1": "Discrete action space",
        "privrl-test/Unbounded-v0": "--action-bounds is required",
        "privrl-test/NoLimit-v0": "--horizon is required",
    }
    files = {}
    for env_id, why in cases.items():
        path = root / f"{env_id.replace('/', '_')}.h5"
        meta = data.metadata.replace(env_id=env_id, horizon=None)
        if env_id == "privrl-test/Unbounded-v0":  # declared as unbounded as the simulator's
            meta = meta.replace(action_space=_Unbounded.action_space)
        save_hdf5(_relabelled(data, meta), path)
        files[env_id] = (path, why)
    return files


def _relabelled(data: Any, meta: Any) -> Any:
    """`data` with the metadata `meta`."""
    from privrl.data.dataset import TrajectoryDataset

    return TrajectoryDataset(
        observations=data.observations,
        actions=data.actions,
        rewards=data.rewards,
        terminated=data.terminated,
        truncated=data.truncated,
        episode_offsets=data.episode_offsets,
        metadata=meta,
    )


@pytest.mark.parametrize("system", ["mopo", "primorl"])
@pytest.mark.parametrize(
    "env_id", ["CartPole-v1", "privrl-test/Unbounded-v0", "privrl-test/NoLimit-v0"]
)
def test_what_cannot_be_a_control_task_is_refused(
    system: str,
    env_id: str,
    unusable: dict,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 2, one `error:` line naming the problem (or the flag that declares the missing
    fact), no run directory: a Discrete action space, an action box without finite bounds,
    an env with no time limit on a dataset that declares no horizon."""
    path, why = unusable[env_id]
    out = tmp_path / "run"
    argv = ["train", system, "--data", str(path), "--out", str(out), "--clip", "0.1"]
    if system == "primorl":
        argv += ["--steps", "2", "-z", "1", "--trajectories", "6"]
    else:
        argv = [a for a in argv if a not in ("--clip", "0.1")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert why in err[0], err
    assert not (out / "config.json").exists()


def test_unknown_reward_transform_is_one_error_line(
    collected: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "mopo", "--data", str(collected["Pendulum-v1"]), "--out", str(tmp_path)]
    assert main([*argv, "--reward-transform", "scaled"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --reward-transform must be one of none, privrl, got 'scaled'"]


def test_reward_scale_maps_rewards_and_references_consistently() -> None:
    """privrl/Pendulum-v0 data in the raw scale: r = (r' − 1)·c_max per step, reference
    returns R = H·(−c_max) + c_max·R', so an H-step return's normalised score is unchanged
    (the map is affine); mapping back restores the data."""
    data = small_pendulum_dataset(4, seed=0)
    ref = data.metadata.extra["reference_returns"]
    raw = in_reward_scale(data, OURS, RAW)
    assert raw.metadata.env_id == "Pendulum-v1"
    np.testing.assert_allclose(
        raw.rewards, (np.asarray(data.rewards, np.float64) - 1) * PENDULUM_MAX_COST, rtol=1e-6
    )
    assert np.all(raw.rewards <= 0.0) and np.all(raw.rewards >= -PENDULUM_MAX_COST)
    ref_raw = raw.metadata.extra["reference_returns"]
    for key in ref:
        assert ref_raw[key] == pytest.approx(-H * PENDULUM_MAX_COST + PENDULUM_MAX_COST * ref[key])
    ret = float(np.sum(data.episode(0).rewards))  # one H-step episode
    ret_raw = float(np.sum(raw.episode(0).rewards, dtype=np.float64))
    assert len(data.episode(0).rewards) == H
    assert normalised_score(ret_raw, ref_raw) == pytest.approx(normalised_score(ret, ref), 1e-4)
    back = in_reward_scale(raw, RAW, OURS)
    np.testing.assert_allclose(back.rewards, data.rewards, atol=1e-5)
    assert back.metadata.env_id == "privrl/Pendulum-v0"
    assert in_reward_scale(data, OURS, OURS) is data
