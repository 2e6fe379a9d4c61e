"""MOPO (Yu et al. 2020), PRIMORL's non-private baseline: split → dynamics model → policy stage.

1. Split the dataset by episode into train and holdout (1% Pendulum and cartpole, 10%
   HalfCheetah) with the run's seed. The holdout drives early stopping and
   elite selection. It is part of the private data, not public data (MOPO is not private);
   PRIMORL uses only data declared public for these (:mod:`privrl.data.public`).
2. Train the Gaussian ensemble (:mod:`privrl.primorl.dynamics`) on the training episodes,
   input normaliser fitted on them (MOPO; PRIMORL may not do this).
3. Run the policy stage (:mod:`privrl.primorl.policy_stage`) in the pessimistic model
   r̃ = r̂ − λu with a fraction ``real_ratio`` (0.05) of every SAC batch from the training data,
   rollouts starting from training states (MOPO's original) unless another mode is chosen.

The result's ``return_mean``/``return_std`` are the mean/std of the real-environment evaluation
returns of the last 10 epochs (paper protocol); the normalised score is
100·(R − R_rand)/(R_exp − R_rand) with the dataset's reference returns.

MOPO reads the private data in every stage: its privacy report says ε = ∞.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import numpy as np

from privrl.config import ConfigError, check, option
from privrl.data.dataset import TrajectoryDataset
from privrl.envs.control import ControlTask, task_for_env_id
from privrl.primorl.dynamics import (
    DYNAMICS_PRESETS,
    DynamicsConfig,
    DynamicsModel,
    dynamics_config,
    split_episode_indices,
    train_dynamics,
)
from privrl.primorl.options import (
    MAX_EPOCHS,
    StageOptions,
    parse_target_entropy,
    plain,
    settle,
    within,
)
from privrl.primorl.pessimism import PenalizedModel
from privrl.primorl.policy_stage import (
    START_MODES,
    PolicyStageConfig,
    PolicyStageResult,
    make_start_states,
    named_seeds,
    run_policy_stage,
    save_atomic,
)
from privrl.primorl.primorl import GENERIC_DYNAMICS, check_same_task
from privrl.primorl.tasks import task_name
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.rl.replay import ReplayBuffer
from privrl.rl.sac import SACConfig

__all__ = [
    "MOPO_DEFAULTS",
    "MOPOConfig",
    "MOPOResult",
    "check_dataset",
    "mopo",
    "mopo_privacy_report",
    "normalised_score",
]

UNIT, RELATION = "trajectory", "add_remove"  # what PRIMORL protects; MOPO protects nothing


@dataclass(frozen=True)
class _TaskDefaults:
    penalty: str
    lam: float
    rollout_length: int
    epochs: int
    rollout_batch_size: int
    dynamics: dict[str, Any] = field(default_factory=dict)  # MOPO training overrides


# Pessimism and rollout length: the PRIMORL paper's Table 8. Epochs: not reported by the paper;
# chosen so that a full run stays short (docs/primorl.md, "Measured run time").
# Dynamics: the spec's architecture presets; an "epoch" of model training is capped at
# `steps_per_epoch` minibatches (the datasets have 6–30 M transitions), holdout evaluations at
# 50k rows.
_DYN: dict[str, Any] = {
    "steps_per_epoch": 1000,
    "max_epochs": 60,
    "patience": 5,
    "max_holdout": 50_000,
}
MOPO_DEFAULTS: dict[str, _TaskDefaults] = {
    "pendulum": _TaskDefaults("mpd", 2.0, 30, 30, 5_000, _DYN),
    "balance": _TaskDefaults("mpd", 2.0, 20, 40, 5_000, _DYN),
    "swingup": _TaskDefaults("ma", 2.0, 20, 80, 5_000, _DYN),
    "halfcheetah": _TaskDefaults(
        "ma", 1.0, 5, 200, 50_000, {**_DYN, "steps_per_epoch": 2000, "max_epochs": 100}
    ),
}


# A task without MOPO defaults (any other Gymnasium task): short rollouts, MA pessimism.
GENERIC_MOPO = _TaskDefaults("ma", 1.0, 5, 30, 5_000, _DYN)


@dataclass(frozen=True)
class MOPOConfig(StageOptions):
    """Every setting of MOPO besides the data and the seed.

    MOPO (Yu et al. 2020): SAC in the model M̃ with r̃ = r̂ − λ·u (u ``penalty``, λ ``lam``),
    rollouts of h = ``rollout_length`` steps from ``starts``, a share ``real_ratio`` of real
    transitions in every SAC batch, the dynamics ensemble trained on all but a seeded
    ``holdout_fraction`` of the episodes. ``task``: a preset name, a Gymnasium id or a
    `ControlTask` (None: the dataset's env id). `None` elsewhere means the task's default; once
    the task is known (``task`` given) the defaults are filled in.
    """

    system = "mopo"

    real_ratio: float = option(
        0.05, "--real-ratio", help="Share of real transitions in each SAC batch (0 = none)."
    )
    starts: str = option(
        "dataset",
        "--starts",
        help="Rollout start states: dataset (MOPO) | initial (env's initial distribution, "
        "chained) | public-split (the holdout's states: part of the data, not public; MOPO is "
        "not private).",
    )
    init_fraction: float = option(
        0.2, "--init-fraction", help="With --starts initial: share of fresh initial states."
    )
    mpd_reward: bool = option(
        False, "--mpd-reward", help="Include the reward output in u_MPD (default: states only)."
    )
    model_epochs: int | None = option(
        None, "--model-epochs", help="Most epochs of dynamics training (default: per task)."
    )
    checkpoint_every: int = option(
        1, "--checkpoint-every", help="Save a checkpoint every this many epochs."
    )
    # -- settings of the Python API and config files only (their defaults are what runs ran)
    task: str | ControlTask | None = option(  # noqa: RUF009 - option() is a dataclasses.field
        None,
        cli=False,
        keyless_default=True,
        help="The control task: a preset name, a Gymnasium id or a ControlTask (None: the "
        "dataset's env id).",
    )
    sac_hidden: tuple[int, ...] = option(
        (256, 256), cli=False, keyless_default=True, help="SAC's hidden layer widths."
    )
    sac_batch_size: int = option(256, cli=False, keyless_default=True, help="SAC batch size.")
    sac_init_alpha: float = option(
        1.0, cli=False, keyless_default=True, help="SAC's initial temperature α."
    )
    holdout_fraction: float | None = option(
        None,
        cli=False,
        keyless_default=True,
        help="Share of episodes held out (early stopping, elites); None: the task's.",
    )
    rollout_every: int = option(
        1000, cli=False, keyless_default=True, help="SAC updates between rollout batches."
    )
    retain_epochs: int = option(
        5, cli=False, keyless_default=True, help="Epochs of rollouts the model buffer keeps."
    )
    eval_episodes: int = option(
        10, cli=False, keyless_default=True, help="Simulator episodes per evaluation."
    )
    final_epochs: int = option(
        10, cli=False, keyless_default=True, help="Last epochs averaged into the return."
    )
    dynamics: DynamicsConfig | None = option(  # noqa: RUF009 - option() is a dataclasses.field
        None,
        cli=False,
        keyless_default=True,
        help="The dynamics ensemble and its training (None: the task's preset).",
    )

    def __post_init__(self) -> None:
        settle(self)
        name = task_name(self.task)
        if name is not None:
            d = MOPO_DEFAULTS.get(name, GENERIC_MOPO)
            if self.dynamics is None:
                base = DYNAMICS_PRESETS.get(name, GENERIC_DYNAMICS)
                object.__setattr__(self, "dynamics", base.replace(**d.dynamics))
            self.fill(
                {
                    "penalty": d.penalty,
                    "lam": d.lam,
                    "rollout_length": d.rollout_length,
                    "epochs": d.epochs,
                    "rollout_batch_size": d.rollout_batch_size,
                }
            )
        dyn = self.dynamics
        if dyn is not None and self.model_epochs is not None:
            object.__setattr__(self, "dynamics", dyn.replace(max_epochs=self.model_epochs))
        if self.holdout_fraction is None and self.dynamics is not None:
            object.__setattr__(self, "holdout_fraction", self.dynamics.holdout_fraction)
        super().__post_init__()

    def validate(self) -> None:
        check(
            math.isfinite(self.real_ratio) and 0.0 <= self.real_ratio <= 1.0,
            "real_ratio",
            f"must be in [0, 1] (the real ratio; MOPO: 0.05, none: 0), got {self.real_ratio}",
        )
        super().validate()
        check(
            self.starts in START_MODES,
            "starts",
            f"must be one of {', '.join(START_MODES)} (the start mode of rollouts), got "
            f"{self.starts!r}",
        )
        check(
            math.isfinite(self.init_fraction) and 0.0 < self.init_fraction <= 1.0,
            "init_fraction",
            f"must be in (0, 1], got {self.init_fraction}",
        )
        check(
            self.checkpoint_every >= 1,
            "checkpoint_every",
            f"must be >= 1, got {self.checkpoint_every}",
        )
        check(
            within(self.model_epochs, 1, MAX_EPOCHS),
            "model_epochs",
            f"must be in [1, {MAX_EPOCHS}], got {self.model_epochs}",
        )
        h = self.holdout_fraction
        check(h is None or 0.0 <= h < 1.0, "holdout_fraction", f"must be in [0, 1), got {h}")
        for key in ("rollout_every", "retain_epochs", "eval_episodes", "final_epochs"):
            check(getattr(self, key) >= 1, key, f"must be >= 1, got {getattr(self, key)}")

    @classmethod
    def for_task(cls, task: str | ControlTask, **overrides: Any) -> MOPOConfig:
        """A preset task's defaults (the paper's Table 8) with ``overrides``;
        ``dynamics_overrides`` (a dict) changes single fields of the dynamics preset."""
        name = task_name(task)
        if name not in MOPO_DEFAULTS:
            raise ConfigError(
                "task",
                f"{task!r}: no MOPO defaults for task {task!r}; known: {sorted(MOPO_DEFAULTS)} "
                "(for another Gymnasium task give MOPOConfig(task=ENV_ID))",
            )
        if "mpd_include_reward" in overrides:
            overrides["mpd_reward"] = overrides.pop("mpd_include_reward")
        if "target_entropy" in overrides and overrides["target_entropy"] is None:
            overrides["target_entropy"] = "action-dim"
        dyn_over = {**MOPO_DEFAULTS[name].dynamics, **overrides.pop("dynamics_overrides", {})}
        if "dynamics" not in overrides:
            overrides["dynamics"] = dynamics_config(name, **dyn_over)
        return cls(task=task, **overrides)

    def mopo_config(self, task: str | ControlTask) -> Self:
        """This config for `task`, its defaults filled in (ConfigError for a config already
        filled in for another task)."""
        check_same_task(self.task, task)
        return self.replace(task=task)

    def stage_config(self) -> PolicyStageConfig:
        sac = SACConfig(
            hidden=tuple(self.sac_hidden),
            batch_size=self.sac_batch_size,
            init_alpha=self.sac_init_alpha,
            target_entropy=parse_target_entropy(self.target_entropy),
        )
        return PolicyStageConfig.of(self, sac=sac)

    @property
    def mpd_include_reward(self) -> bool:
        """u_MPD over the reward output as well (`mpd_reward`)."""
        return self.mpd_reward

    def settings(self) -> dict[str, Any]:
        """What a run with the task known runs, as published (config.json)."""
        assert self.dynamics is not None, "settings() needs the task (mopo_config)"
        keys = (
            "penalty",
            "lam",
            "rollout_length",
            "epochs",
            "rollout_batch_size",
            "real_ratio",
            "starts",
            "init_fraction",
            "mpd_include_reward",
        )
        d: dict[str, Any] = {"task": task_name(self.task), **{k: getattr(self, k) for k in keys}}
        d["target_entropy"] = parse_target_entropy(self.target_entropy)
        d["sac_hidden"] = list(self.sac_hidden)
        for k in ("sac_batch_size", "sac_init_alpha", "holdout_fraction", "steps_per_epoch"):
            d[k] = getattr(self, k)
        for k in ("rollout_every", "retain_epochs", "eval_episodes", "final_epochs"):
            d[k] = getattr(self, k)
        d["checkpoint_every"] = self.checkpoint_every
        d["dynamics"] = self.dynamics.to_dict()
        return d

    def to_dict(self) -> dict[str, Any]:
        return plain(self, super().to_dict())


@dataclass
class MOPOResult:
    """A finished MOPO run."""

    return_mean: float
    return_std: float
    normalised_score: float | None
    reference_returns: dict[str, float] | None
    stage: PolicyStageResult
    model: DynamicsModel
    dynamics: dict[str, Any]  # train_dynamics summary (epochs, holdout MSE, elites, seconds)
    split: dict[str, int]
    report: PrivacyReport
    seconds: float  # model training + policy stage (+ set-up), summed over resumed calls

    @property
    def curve(self) -> list[dict[str, Any]]:
        return self.stage.curve


# --------------------------------------------------------------------------------------------


def check_dataset(dataset: TrajectoryDataset, task: ControlTask | None = None) -> ControlTask:
    """The control task of ``dataset`` (``task``, else the known task of its env id);
    ValueError naming the problem if the env is unknown or the observation/action shapes do
    not match it."""
    env_id = dataset.metadata.env_id
    if task is None and not env_id:
        raise ValueError(
            "the dataset records no env id; give MOPO its task (a Gymnasium id or a ControlTask)"
        )
    task = task_for_env_id(env_id) if task is None else task
    env_id = env_id or task.env_id
    obs = np.asarray(dataset.observations)
    act = np.asarray(dataset.actions)
    if obs.ndim != 2 or obs.shape[1] != task.obs_dim:
        raise ValueError(
            f"observation shape mismatch: the dataset's observations have shape "
            f"{obs.shape[1:]} but {env_id} has ({task.obs_dim},)"
        )
    if act.ndim != 2 or act.shape[1] != task.act_dim:
        raise ValueError(
            f"action shape mismatch: the dataset's actions have shape {act.shape[1:]} but "
            f"{env_id} has ({task.act_dim},)"
        )
    if dataset.n_transitions == 0:
        raise ValueError("the dataset has no transitions")
    return task


def normalised_score(ret: float, reference: dict[str, float] | None) -> float | None:
    """100·(R − R_rand)/(R_exp − R_rand), or None without reference returns."""
    if not reference or "random" not in reference or "expert" not in reference:
        return None
    lo, hi = float(reference["random"]), float(reference["expert"])
    if not hi > lo:
        return None
    return 100.0 * (ret - lo) / (hi - lo)


def _unprotected(name: str) -> Release:
    """A use of the private data without any mechanism (infinite sensitivity, no noise)."""
    return Release(
        name=name,
        mechanism="none",
        sensitivity=math.inf,
        norm="l2",
        noise={},
        extra={"non_private": True},
    )


def mopo_privacy_report(config: MOPOConfig) -> PrivacyReport:
    """MOPO is not private: ε = ∞; the report lists where it reads the data unprotected."""
    releases = [
        _unprotected("dynamics ensemble trained on the training episodes (no clipping, no noise)")
    ]
    if config.real_ratio > 0:
        releases.append(
            _unprotected(f"real transitions in {config.real_ratio:g} of every SAC batch")
        )
    if config.starts == "dataset":
        releases.append(_unprotected("model rollouts start from training-data states"))
    # MOPO's holdout is a seeded split of the same (private) data, not public data: it is one
    # more unprotected use, never listed as public
    hold = f"holdout episodes ({config.holdout_fraction:.0%} of the data, a seeded split, not "
    hold += "public): early stopping, elite selection"
    hold += ", rollout starts" if config.starts == "public-split" else ""
    releases.append(_unprotected(hold))
    sim = "task simulator: evaluation episodes"
    if config.starts == "initial":
        sim += ", initial-state distribution for rollout starts"
    return PrivacyReport.non_private(
        UNIT,
        RELATION,
        releases,
        system="mopo",
        public=[sim],
        notes=[
            "MOPO (Yu et al. 2020) is PRIMORL's non-private baseline: it reads the data "
            "without any mechanism, so there is no privacy guarantee (ε = ∞).",
            f"rollout start states: {config.starts}",
        ],
    )


def _dataset_digest(dataset: TrajectoryDataset) -> str:
    h = hashlib.sha256()
    for arr in (dataset.episode_offsets, dataset.rewards, dataset.actions):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(np.ascontiguousarray(dataset.observations[:: max(1, dataset.n_transitions // 4096)]))
    return h.hexdigest()


def _seeds(seed: int) -> dict[str, int]:
    return named_seeds(seed, ("split", "dynamics_init", "dynamics_train", "real_buffer", "stage"))


ProgressFn = Callable[[str, dict[str, Any]], None]


def mopo(
    dataset: TrajectoryDataset,
    config: MOPOConfig,
    *,
    seed: int = 0,
    workdir: str | Path | None = None,
    progress: ProgressFn | None = None,
    task: ControlTask | None = None,
    device: Any = None,
) -> MOPOResult:
    """Run MOPO on ``dataset``. With ``workdir`` the trained model (``dynamics.pt``) and the
    policy stage (``checkpoint.pt``) are checkpointed there, and a rerun with the same data,
    configuration and seed resumes (ValueError if the directory holds a different run).
    ``progress(phase, record)``: phase "dynamics" per model epoch, "policy" per SAC epoch.
    ``task``: the resolved task (default: the config's `ControlTask`, else the dataset's).
    ``device``: a `torch.device` for the ensemble, the real-data buffer and SAC (default: the
    config's ``device``); the checkpoints are device-free."""
    t_start = time.perf_counter()
    device = config.torch_device() if device is None else device
    if task is None and isinstance(config.task, ControlTask):
        task = config.task
    task = check_dataset(dataset, task)
    if config.task is None:
        config = config.mopo_config(task)
    elif task_name(config.task) != task.name:
        raise ValueError(
            f"the dataset is for task {task.name!r} but the config is for "
            f"{task_name(config.task)!r}"
        )
    seeds = _seeds(seed)
    train_idx, hold_idx = split_episode_indices(dataset, config.holdout_fraction, seeds["split"])
    train_ds, hold_ds = dataset.subset(train_idx), dataset.subset(hold_idx)
    train_tr = train_ds.transitions()
    hold_tr = hold_ds.transitions() if hold_ds.n_transitions else None
    split = {
        "train_episodes": int(train_ds.n_episodes),
        "holdout_episodes": int(hold_ds.n_episodes),
        "train_transitions": int(train_ds.n_transitions),
        "holdout_transitions": int(hold_ds.n_transitions),
    }
    work = None if workdir is None else Path(workdir)

    # -- dynamics model (cached in workdir/dynamics.pt) --------------------------------------
    dyn_fp = {
        "data": _dataset_digest(dataset),
        "seed": int(seed),
        "holdout_fraction": config.holdout_fraction,
        "dynamics": config.dynamics.to_dict(),
    }
    dyn_path = None if work is None else work / "dynamics.pt"
    model: DynamicsModel | None = None
    dyn_summary: dict[str, Any] = {}
    trained_seconds = 0.0
    if dyn_path is not None and dyn_path.exists():
        from privrl.data.files import read_torch

        saved = read_torch(dyn_path, "checkpoint", weights_only=False)  # (its own format)
        if saved.get("fingerprint") != dyn_fp:
            raise ValueError(
                f"{dyn_path} holds a model of a different run (data, seed or dynamics "
                "settings differ); use a new output directory or delete it"
            )
        model = DynamicsModel.from_state_dict(saved["model"], device=device)
        dyn_summary = dict(saved["summary"])
    if model is None:
        model = DynamicsModel(
            task.obs_dim, task.act_dim, config.dynamics, seed=seeds["dynamics_init"], device=device
        )
        res = train_dynamics(
            model,
            train_tr,
            hold_tr,
            config.dynamics,
            seed=seeds["dynamics_train"],
            progress=(lambda r: progress("dynamics", r)) if progress is not None else None,
            fit_normalizer_on=train_tr,
            normalizer_source="training episodes (MOPO, non-private)",
        )
        dyn_summary = {
            "epochs": res.epochs,
            "steps": res.steps,
            "max_epochs": config.dynamics.max_epochs,
            "stopped_early": res.stopped_early,
            "best_holdout_mse": res.best_holdout_mse.tolist(),
            "final_train_loss": float(res.train_loss[-1]),
            "elites": list(res.elites),
            "seconds": res.seconds,
        }
        trained_seconds = res.seconds
        if dyn_path is not None:
            save_atomic(
                {"fingerprint": dyn_fp, "model": model.state_dict(), "summary": dyn_summary},
                dyn_path,
            )

    # -- policy stage ------------------------------------------------------------------------
    stage_cfg = config.stage_config()
    real_buffer = None
    if config.real_ratio > 0:
        real_buffer = ReplayBuffer(
            task.obs_dim,
            task.act_dim,
            train_ds.n_transitions,
            seed=seeds["real_buffer"],
            device=device,
        )
        real_buffer.add_batch(
            train_tr.observations,
            train_tr.actions,
            train_tr.rewards,
            train_tr.next_observations,
            train_tr.terminated,
        )
    starts = make_start_states(
        config.starts,
        task,
        pool_capacity=stage_cfg.model_buffer_capacity,
        init_fraction=config.init_fraction,
        public_states=None if hold_tr is None else (hold_tr.observations, hold_ds.transition_steps),
        dataset_states=(train_tr.observations, train_ds.transition_steps),
    )
    pmodel = PenalizedModel(model, config.penalty, config.lam, config.mpd_reward)
    # set-up time of this call (split, buffers), excluding model training counted above
    setup_seconds = time.perf_counter() - t_start - trained_seconds
    stage = run_policy_stage(
        pmodel,
        starts,
        task,
        stage_cfg,
        seed=seeds["stage"],
        real_buffer=real_buffer,
        checkpoint=None if work is None else work / "checkpoint.pt",
        progress=(lambda r: progress("policy", r)) if progress is not None else None,
        device=device,
    )
    reference = dataset.metadata.extra.get("reference_returns")
    reference = {k: float(v) for k, v in reference.items()} if isinstance(reference, dict) else None
    return MOPOResult(
        return_mean=stage.return_mean,
        return_std=stage.return_std,
        normalised_score=normalised_score(stage.return_mean, reference),
        reference_returns=reference,
        stage=stage,
        model=model,
        dynamics=dyn_summary,
        split=split,
        report=mopo_privacy_report(config),
        seconds=float(dyn_summary.get("seconds", 0.0)) + stage.seconds + setup_seconds,
    )
