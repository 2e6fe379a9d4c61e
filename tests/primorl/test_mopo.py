"""MOPO (split → dynamics → policy stage): per-task defaults, dataset checks, the normalised
score, the non-private report, start modes, resume from the work directory, and a tiny
end-to-end run on a small Pendulum dataset that beats the random policy."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.envs.batched import make_batched
from privrl.primorl import mopo as mopo_mod
from privrl.primorl.mopo import (
    MOPOConfig,
    check_dataset,
    mopo,
    mopo_privacy_report,
    normalised_score,
)
from privrl.privacy.report import PrivacyReport

torch.set_num_threads(1)


# --------------------------------------------------------------------------------------------
# a small Pendulum dataset (also used by tests/cli/test_train_mopo.py)
# --------------------------------------------------------------------------------------------


def pendulum_controller(obs: np.ndarray) -> np.ndarray:
    """Energy pumping far from upright, PD control near it (returns ≈ 177 of 200)."""
    c, s, w = obs[:, 0], obs[:, 1], obs[:, 2]
    th = np.arctan2(s, c)
    energy = 0.5 * w**2 + 15.0 * c  # θ̈ = 15 sin θ + 3u ⇒ E = ½θ̇² + 15 cos θ, 15 upright
    pump = 2.0 * np.sign(w * (15.0 - energy) + 1e-6)
    pd = np.clip(-(12.0 * th + 3.0 * w) / 3.0, -2.0, 2.0)
    return np.where(c > 0.85, pd, pump)[:, None]


def small_pendulum_dataset(
    episodes: int = 100,
    seed: int = 0,
    obs_dim: int = 3,
    act_dim: int = 1,
    env_id: str | None = None,
) -> TrajectoryDataset:
    """Episodes of an ε-greedy controller, ε ~ U(0, 1) per episode (a replay-like mix of random
    to expert behaviour), with random and expert reference returns. ``obs_dim``/``act_dim``
    other than 3/1 pad or cut the arrays (for shape-mismatch tests)."""
    rng = np.random.default_rng(seed)
    env = make_batched("pendulum", episodes, seed)
    eps = rng.uniform(0.0, 1.0, size=(episodes, 1))
    obs = env.reset(seed)
    observations, actions, rewards = [obs], [], []
    for _ in range(env.horizon):
        a = np.where(
            rng.random((episodes, 1)) < eps,
            rng.uniform(-2.0, 2.0, (episodes, 1)),
            pendulum_controller(obs),
        )
        obs, r, _ = env.step(a)
        observations.append(obs)
        actions.append(a)
        rewards.append(r)
    o = np.stack(observations, 1).astype(np.float32)
    a = np.stack(actions, 1).astype(np.float32)
    r = np.stack(rewards, 1)
    o = np.concatenate([o, np.zeros((*o.shape[:2], max(0, obs_dim - 3)), np.float32)], 2)
    a = np.concatenate([a, np.zeros((*a.shape[:2], max(0, act_dim - 1)), np.float32)], 2)
    o, a = o[..., :obs_dim], a[..., :act_dim]
    horizon = env.horizon
    last = np.zeros(horizon, bool)
    last[-1] = True
    eps_list = [
        {
            "observations": o[i],
            "actions": a[i],
            "rewards": r[i],
            "terminated": np.zeros(horizon, bool),
            "truncated": last,
        }
        for i in range(episodes)
    ]
    ref = {}
    for name, policy in (
        ("random", lambda x: rng.uniform(-2.0, 2.0, (len(x), 1))),
        ("expert", pendulum_controller),
    ):
        e = make_batched("pendulum", 50, seed + 1)
        x = e.reset(seed + 1)
        ret = np.zeros(50)
        for _ in range(horizon):
            x, rew, _ = e.step(policy(x))
            ret += rew
        ref[name] = float(ret.mean())
    meta = DatasetMetadata(
        observation_space=spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        action_space=spaces.Box(-2.0, 2.0, (act_dim,), np.float32),
        env_id=env_id or "privrl/Pendulum-v0",
        discount=0.99,
        horizon=horizon,
        extra={"reference_returns": ref},
    )
    return TrajectoryDataset.from_episodes(eps_list, metadata=meta)


def tiny_mopo_config(**kw: Any) -> MOPOConfig:
    base: dict[str, Any] = {
        "epochs": 2,
        "steps_per_epoch": 30,
        "rollout_batch_size": 64,
        "rollout_length": 5,
        "sac_hidden": (16, 16),
        "sac_batch_size": 32,
        "eval_episodes": 2,
        "final_epochs": 2,
        "checkpoint_every": 1,
        "dynamics_overrides": {"hidden": (16, 16), "steps_per_epoch": 20, "max_epochs": 2},
    }
    base.update(kw)
    return MOPOConfig.for_task("pendulum", **base)


@pytest.fixture(scope="module")
def dataset() -> TrajectoryDataset:
    return small_pendulum_dataset(100, seed=0)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "penalty", "lam", "h", "holdout"),
    [
        ("pendulum", "mpd", 2.0, 30, 0.01),
        ("balance", "mpd", 2.0, 20, 0.01),
        ("swingup", "ma", 2.0, 20, 0.01),
        ("halfcheetah", "ma", 1.0, 5, 0.1),
    ],
)
def test_task_defaults_follow_the_spec(
    task: str, penalty: str, lam: float, h: int, holdout: float
) -> None:
    cfg = MOPOConfig.for_task(task)
    assert (cfg.penalty, cfg.lam, cfg.rollout_length) == (penalty, lam, h)
    assert cfg.holdout_fraction == holdout == cfg.dynamics.holdout_fraction
    assert cfg.real_ratio == 0.05 and cfg.starts == "dataset"
    assert cfg.target_entropy == -3.0 and cfg.steps_per_epoch == 1000
    stage = cfg.stage_config()
    assert stage.sac.target_entropy == -3.0 and stage.sac.hidden == (256, 256)
    assert stage.sac.lr == 3e-4 and stage.sac.gamma == 0.99 and stage.sac.tau == 0.005
    assert stage.eval_episodes == 10 and stage.final_epochs == 10 and stage.retain_epochs == 5
    assert MOPOConfig.for_task(task, target_entropy=None).stage_config().sac.target_entropy is None


def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match="real ratio"):
        MOPOConfig.for_task("pendulum", real_ratio=-0.1)
    with pytest.raises(ValueError, match="penalty"):
        MOPOConfig.for_task("pendulum", penalty="var")
    with pytest.raises(ValueError, match="start mode"):
        MOPOConfig.for_task("pendulum", starts="everywhere")
    with pytest.raises(ValueError, match="no MOPO defaults"):
        MOPOConfig.for_task("acrobot")


def test_check_dataset_names_env_and_shape_problems() -> None:
    assert check_dataset(small_pendulum_dataset(3)).name == "pendulum"
    with pytest.raises(ValueError, match="unknown control env id 'Acrobot-v1'"):
        check_dataset(small_pendulum_dataset(3, env_id="Acrobot-v1"))
    with pytest.raises(ValueError, match=r"observation shape mismatch.*\(4,\).*\(3,\)"):
        check_dataset(small_pendulum_dataset(3, obs_dim=4))
    with pytest.raises(ValueError, match=r"action shape mismatch.*\(2,\).*\(1,\)"):
        check_dataset(small_pendulum_dataset(3, act_dim=2))
    ds = small_pendulum_dataset(3)
    with pytest.raises(ValueError, match="no env id"):
        check_dataset(ds.with_metadata(ds.metadata.replace(env_id=None)))


def test_normalised_score() -> None:
    ref = {"random": 100.0, "expert": 180.0}
    assert normalised_score(180.0, ref) == pytest.approx(100.0)
    assert normalised_score(100.0, ref) == pytest.approx(0.0)
    assert normalised_score(160.0, ref) == pytest.approx(75.0)
    assert normalised_score(160.0, None) is None
    assert normalised_score(160.0, {"random": 1.0}) is None


def test_privacy_report_says_not_private() -> None:
    cfg = MOPOConfig.for_task("pendulum")
    report = mopo_privacy_report(cfg)
    assert not report.private and math.isinf(report.epsilon)
    assert report.system == "mopo" and report.unit.value == "trajectory"
    names = " | ".join(r.name for r in report.releases)
    assert "dynamics" in names and "real transitions" in names and "training-data states" in names
    assert all(r.extra.get("non_private") for r in report.releases)
    again = PrivacyReport.from_dict(report.to_dict())
    assert math.isinf(again.epsilon) and not again.private
    initial = mopo_privacy_report(MOPOConfig.for_task("pendulum", real_ratio=0, starts="initial"))
    # the model and its holdout read the data; the holdout is never named public
    assert [r.name.split(" ")[0] for r in initial.releases] == ["dynamics", "holdout"]
    assert any("initial-state distribution" in p for p in initial.public)
    assert not any("holdout" in p for p in initial.public)


def test_mopo_pipeline_outputs(dataset: TrajectoryDataset) -> None:
    res = mopo(dataset, tiny_mopo_config(), seed=0)
    assert res.split == {
        "train_episodes": 99,
        "holdout_episodes": 1,  # 1% of 100 episodes (a seeded split; MOPO is not private)
        "train_transitions": 99 * 200,
        "holdout_transitions": 200,
    }
    assert len(res.curve) == 2 and res.stage.eval_returns.shape == (2, 2)
    assert res.return_mean == pytest.approx(res.stage.eval_returns.mean())
    assert res.normalised_score == pytest.approx(
        normalised_score(res.return_mean, dataset.metadata.extra["reference_returns"])
    )
    assert res.dynamics["epochs"] <= 2 and len(res.dynamics["elites"]) == 3
    assert res.stage.start_mode == "dataset" and not res.report.private
    assert res.seconds > 0


@pytest.mark.parametrize("mode", ["initial", "public-split"])
def test_other_start_modes_run_and_are_named(dataset: TrajectoryDataset, mode: str) -> None:
    res = mopo(dataset, tiny_mopo_config(epochs=1, starts=mode, real_ratio=0.0), seed=0)
    assert res.stage.start_mode == mode and res.curve[0]["start_mode"] == mode
    assert res.report.notes[-1] == f"rollout start states: {mode}"


def test_zero_real_ratio_uses_no_real_buffer(
    dataset: TrajectoryDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    real_run = mopo_mod.run_policy_stage

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["real_buffer"])
        return real_run(*args, **kwargs)

    monkeypatch.setattr(mopo_mod, "run_policy_stage", spy)
    mopo(dataset, tiny_mopo_config(epochs=1, real_ratio=0.0), seed=0)
    mopo(dataset, tiny_mopo_config(epochs=1, real_ratio=0.05), seed=0)
    assert seen[0] is None and len(seen[1]) == 99 * 200


def test_workdir_resume_skips_model_training(
    dataset: TrajectoryDataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = mopo(dataset, tiny_mopo_config(epochs=2), seed=3, workdir=tmp_path)
    assert (tmp_path / "dynamics.pt").is_file() and (tmp_path / "checkpoint.pt").is_file()

    def no_training(*a: Any, **k: Any) -> Any:
        raise AssertionError("the dynamics model was retrained")

    monkeypatch.setattr(mopo_mod, "train_dynamics", no_training)
    longer = mopo(dataset, tiny_mopo_config(epochs=3), seed=3, workdir=tmp_path)
    assert longer.stage.resumed_from == 2 and len(longer.curve) == 3
    strip = [{k: v for k, v in r.items() if "seconds" not in k} for r in longer.curve[:2]]
    assert strip == [{k: v for k, v in r.items() if "seconds" not in k} for r in first.curve]
    with pytest.raises(ValueError, match="different run"):
        mopo(dataset, tiny_mopo_config(epochs=2), seed=4, workdir=tmp_path)


@pytest.mark.slow  # a learning check (12 s): MOPO's pipeline is covered fast by the tests above
def test_tiny_mopo_improves_over_the_random_policy(dataset: TrajectoryDataset) -> None:
    """100 episodes, a small SAC (64×64, α₀ = 0.05) for 5 × 500 steps: the mean of the last
    two epochs' real returns must clearly beat the random policy (normalised score > 25)."""
    cfg = MOPOConfig.for_task(
        "pendulum",
        epochs=5,
        steps_per_epoch=500,
        rollout_batch_size=1000,
        sac_hidden=(64, 64),
        sac_init_alpha=0.05,
        final_epochs=2,
        holdout_fraction=0.05,
        dynamics_overrides={"steps_per_epoch": 200, "max_epochs": 6},
    )
    res = mopo(dataset, cfg, seed=2)
    ref = dataset.metadata.extra["reference_returns"]
    assert res.return_mean > ref["random"] + 10.0, (res.return_mean, ref)
    assert res.normalised_score is not None and res.normalised_score > 25.0
