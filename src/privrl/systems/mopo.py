"""MOPO (Yu et al. 2020), PRIMORL's non-private baseline, on the run layer (`privrl train mopo`).

Pipeline (`privrl.primorl.mopo.mopo`): split by episode (a seeded holdout of the same data,
not public: MOPO is not private) → Gaussian ensemble dynamics model → SAC in the pessimistic
model r̃ = r̂ − λu with 5% real data per batch. Per-task defaults (penalty, λ, rollout length,
epochs) come from the spec; every option overrides one.

Not private: the planned report says ε = ∞, so any dataset ledger refuses the run from the
file's header, before a record is read. `plan` resolves the run's `MOPOConfig` from the options
and the header's env id; `load` reads and schema-checks the episodes; `run` trains (resuming the
checkpoints ``dynamics.pt`` and ``checkpoint.pt`` kept in the run directory itself, as before
the run layer) and returns metrics, the per-epoch curve, policy.pt and the learning curve.

This module also holds what PRIMORL's system shares with MOPO (the policy-stage options, the
resume check, progress and the learning-curve plot): `privrl.systems.primorl` imports them.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.config import ConfigError, RunConfig, check, option
from privrl.runs.system import Plan, Result, RunContext, System

__all__ = ["MopoRunConfig", "MopoSystem", "StageOptions", "parse_target_entropy"]

# Limits of the options (checked before anything is read or allocated).
MAX_EPOCHS = 100_000
MAX_STEPS_PER_EPOCH = 1_000_000
MAX_ROLLOUT_LENGTH = 10_000
MAX_ROLLOUT_BATCH = 10_000_000
MAX_LAM = 1e6
MAX_MODEL_BUFFER = 10_000_000  # transitions kept from the model's rollouts (memory)

# Settings a resumed run may change: extending a finished policy stage is allowed.
RESUMABLE_CHANGES = ("epochs", "checkpoint_every")
# Settings recorded only since the reward-scale option: a checkpoint recorded without them was
# trained in the dataset's own scale, i.e. with data_env_id == env_id.
ADDED_SETTINGS = ("data_env_id", "reward_transform")
RECORD = "run.json"  # the settings of the run a checkpoint belongs to (written before training)


def parse_target_entropy(value: float | str) -> float | None:
    """`--target-entropy`: a number, or 'action-dim' for SAC's default −|A| (None)."""
    if isinstance(value, str) and value.strip().lower() in ("action-dim", "-|a|", "auto"):
        return None
    try:
        x = float(value)
    except ValueError:
        raise ConfigError(
            "target_entropy", f"must be a number or 'action-dim' (−|A|), got {value!r}"
        ) from None
    if not math.isfinite(x):
        raise ConfigError("target_entropy", f"must be finite, got {value!r}")
    return x


def _within(value: float | None, low: float, high: float) -> bool:
    return value is None or (math.isfinite(value) and low <= value <= high)


@dataclass(frozen=True)
class StageOptions(RunConfig):
    """The options of a policy stage (SAC in a pessimistic model), shared by MOPO and PRIMORL.
    `None`: the task's default (its preset in `privrl.primorl.primorl`)."""

    penalty: str | None = option(
        None, "--penalty", help="Uncertainty u: ma | ma-frobenius | mpd (default: per task)."
    )
    lam: float | None = option(
        None, "--lam", "--lambda", help="Penalty coefficient λ in r̃ = r̂ − λu (default: per task)."
    )
    rollout_length: int | None = option(
        None, "--rollout-length", "-H", help="Model rollout length h (default: per task)."
    )
    rollout_batch_size: int | None = option(
        None, "--rollout-batch-size", help="Rollouts started per epoch (default: per task)."
    )
    epochs: int | None = option(
        None, "--epochs", help="SAC epochs of --steps-per-epoch updates (default: per task)."
    )
    steps_per_epoch: int = option(1000, "--steps-per-epoch", help="SAC updates per epoch.")
    target_entropy: float | str = option(
        -3.0, "--target-entropy", help="SAC's target entropy: a number, or 'action-dim' (−|A|)."
    )
    threads: int = option(
        1,
        "--threads",
        help="torch threads (1 is fastest for SAC's 256-row batches, and on a shared machine).",
    )
    reward_transform: str | None = option(
        None,
        "--reward-transform",
        help="Reward scale to learn and evaluate in: none (the raw rewards of the standard "
        "Gymnasium id, e.g. Pendulum-v1's −cost) | privrl (the task's privrl id, e.g. "
        "privrl/Pendulum-v0's r' = 1 + r/c_max ∈ [0, 1]). Default: the dataset's own scale.",
        keyless_default=True,  # None: the dataset's own scale, as before the option existed
    )

    def validate(self) -> None:
        from privrl.envs.control import REWARD_TRANSFORMS
        from privrl.primorl.pessimism import PENALTIES

        check(
            self.reward_transform is None or self.reward_transform in REWARD_TRANSFORMS,
            "reward_transform",
            f"must be one of {', '.join(REWARD_TRANSFORMS)}, got {self.reward_transform!r}",
        )

        check(
            self.penalty is None or self.penalty in PENALTIES,
            "penalty",
            f"must be one of {', '.join(PENALTIES)}, got {self.penalty!r}",
        )
        check(_within(self.lam, 0, MAX_LAM), "lam", f"must be in [0, {MAX_LAM:g}], got {self.lam}")
        for key, high in (
            ("epochs", MAX_EPOCHS),
            ("rollout_length", MAX_ROLLOUT_LENGTH),
            ("rollout_batch_size", MAX_ROLLOUT_BATCH),
            ("steps_per_epoch", MAX_STEPS_PER_EPOCH),
        ):
            value = getattr(self, key)
            check(_within(value, 1, high), key, f"must be in [1, {high}], got {value}")
        cores = os.cpu_count() or 1
        check(
            1 <= self.threads <= cores,
            "threads",
            f"must be in [1, {cores}] (this machine's cores), got {self.threads}",
        )
        parse_target_entropy(self.target_entropy)

    def stage_overrides(self) -> dict[str, Any]:
        """The policy-stage settings the user gave, by the library configs' names."""
        given = {
            "penalty": self.penalty,
            "lam": self.lam,
            "rollout_length": self.rollout_length,
            "rollout_batch_size": self.rollout_batch_size,
            "epochs": self.epochs,
        }
        return {
            **{k: v for k, v in given.items() if v is not None},
            "steps_per_epoch": self.steps_per_epoch,
            "target_entropy": parse_target_entropy(self.target_entropy),
        }


# ---------------------------------------------------------------------------------------------
# shared by the MOPO and PRIMORL systems
# ---------------------------------------------------------------------------------------------


def header_task(header: Any, needs: str, transform: str | None = None) -> tuple[Any, Any]:
    """(the dataset's task, the task to run): the control task named by the header's env id
    (a public schema check; `needs` says what the system needs and how to build a dataset for
    it) and the same task in the reward scale `transform` (None: the dataset's own)."""
    from privrl.envs.control import task_for_env_id, with_reward_transform

    if header is None:
        raise ConfigError("data", "is required: give a dataset file of a control task")
    if not header.metadata.env_id:
        raise ConfigError("data", f"{header.path}: the dataset records no env id; {needs}")
    try:
        source = task_for_env_id(header.metadata.env_id)
    except ValueError as exc:
        raise ConfigError("data", f"{header.path}: {exc}") from None
    try:
        return source, with_reward_transform(source, transform)
    except ValueError as exc:
        raise ConfigError("reward_transform", f"{transform}: {exc}") from None


def in_reward_scale(dataset: Any, source: Any, target: Any) -> Any:
    """`dataset` (recorded on `source`) with its rewards in `target`'s scale: the public affine
    map r' = a + b·r of `privrl.envs.control.reward_map` applied to every reward and to the
    metadata's reference returns (returns of `horizon`-step episodes: R' = H·a + b·R; the
    control tasks never terminate), the env id set to `target`'s. The map is fixed by the
    simulator's declared cost, so it reads nothing about the data."""
    from privrl.data.dataset import TrajectoryDataset
    from privrl.envs.control import reward_map

    if source == target:
        return dataset
    a, b = reward_map(source, target)
    meta = dataset.metadata
    extra = dict(meta.extra)
    reference = extra.get("reference_returns")
    if isinstance(reference, dict):
        h = target.horizon
        extra["reference_returns"] = {k: h * a + b * float(v) for k, v in reference.items()}
    extra["reward_transform"] = {"from": source.env_id, "to": target.env_id, "a": a, "b": b}
    rewards = a + b * np.asarray(dataset.rewards, dtype=np.float64)
    return TrajectoryDataset(
        observations=dataset.observations,
        actions=dataset.actions,
        rewards=rewards.astype(np.asarray(dataset.rewards).dtype),
        terminated=dataset.terminated,
        truncated=dataset.truncated,
        episode_offsets=dataset.episode_offsets,
        behaviour_probs=dataset.behaviour_probs,
        unit_ids=dataset.unit_ids,
        extra_columns=dataset.extra_columns,
        metadata=meta.replace(env_id=target.env_id, extra=extra),
    )


def check_resume(
    work: Path, now: Mapping[str, Any], checkpoints: Sequence[str], *, insist: bool
) -> bool:
    """True when `work` holds a checkpoint (any of the files `checkpoints`) of the run described
    by `now` (resume); False for a fresh run (an error if `insist`: `--resume`). A checkpoint
    of another run is refused, never overwritten; the record of `now` is (re)written before
    any training so that an interrupted run is recognised."""
    from privrl.privacy.report import json_safe

    now = json.loads(json.dumps(json_safe(dict(now))))
    found = any((work / n).exists() for n in checkpoints)
    if not found and insist:
        raise ValueError(f"--resume: no checkpoint in {work}/ (run once without --resume to start)")
    if found:
        before: dict[str, Any] = {}
        for name in (RECORD, "config.json"):  # config.json: a run from before the run layer
            try:
                before = json.loads((work / name).read_text())
                break
            except (OSError, ValueError):
                continue
        same_scale = now.get("data_env_id", now.get("env_id")) == now.get("env_id")
        unrecorded = {k for k in ADDED_SETTINGS if k not in before} if same_scale else set()
        differ = sorted(
            k
            for k in now
            if k not in RESUMABLE_CHANGES and k not in unrecorded and before.get(k) != now[k]
        )
        if differ:
            files = ", ".join(checkpoints)
            raise ValueError(
                f"{work}/ holds a checkpoint of a different run (differs in: "
                f"{', '.join(differ)}); use a new --out, or delete {files} in it to restart"
            )
    work.mkdir(parents=True, exist_ok=True)
    (work / RECORD).write_text(json.dumps(now, indent=2) + "\n")
    return found


def stage_progress(
    ctx: RunContext, model_phase: tuple[str, str, str, int | None] | None = None
) -> Callable[[str, dict[str, Any]], None]:
    """The library's `progress(phase, record)` as `ctx.progress` bars: `model_phase` is (phase,
    label, counter key, total) of the model's training; "policy" records are SAC epochs."""

    def progress(name: str, record: dict[str, Any]) -> None:
        if model_phase is not None and name == model_phase[0]:
            _, label, key, total = model_phase
            ctx.progress(label, int(record[key]), int(total or record[key]))
        else:
            ctx.progress("SAC in the model", int(record["epoch"]), int(record["epochs"]))

    return progress


def stage_result(
    metrics: dict[str, Any],
    report: Any,
    stage: Any,
    *,
    label: str,
    reference: Any,
    title: str,
    steps_per_epoch: int,
    summary: list[str],
) -> Result:
    """The `Result` of a run ending in a policy stage: metrics.csv (one row per SAC epoch),
    policy.pt and plots/learning_curve.png (real-environment return per epoch, mean ± std).
    Without a normalised score, metrics.json says why (`normalised_score_note`)."""
    from privrl.runs.plots import plot_learning_curve

    if metrics.get("normalised_score") is None:
        metrics["normalised_score_note"] = NO_SCORE

    def write_policy(path: Path) -> None:
        import torch

        torch.save(stage.agent.state_dict(), path)

    def draw(path: Path) -> None:
        curves = {label: stage.eval_returns}
        plot_learning_curve(
            path, curves, reference=reference, title=title, steps_per_epoch=steps_per_epoch
        )

    return Result(
        metrics=metrics,
        privacy=report,
        curve=stage.curve,
        artifacts={"policy.pt": write_policy},
        plots={"learning_curve": draw},
        summary=summary,
    )


NO_SCORE = (
    "no normalised score: the dataset's metadata has no reference returns (random < expert); "
    "return_mean is the raw return in the task's reward scale"
)


def return_line(metrics: Mapping[str, Any], *rest: str) -> str:
    """The console line of the released figures: 'R ± s return, normalised N, …' (the return
    first, so the neighbour test recognises the line as the release it prints)."""
    score = metrics["normalised_score"]
    parts = [
        f"{metrics['return_mean']:.1f} ± {metrics['return_std']:.1f} return (last epochs)",
        f"normalised {'n/a (no reference returns)' if score is None else f'{score:.1f}'}",
        *rest,
    ]
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# MOPO
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MopoRunConfig(StageOptions):
    """`privrl train mopo`: the options of a MOPO run (`None`: the task's default)."""

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

    def validate(self) -> None:
        from privrl.primorl.policy_stage import START_MODES

        check(
            math.isfinite(self.real_ratio) and 0.0 <= self.real_ratio <= 1.0,
            "real_ratio",
            f"must be in [0, 1] (MOPO: 0.05, none: 0), got {self.real_ratio}",
        )
        super().validate()
        check(
            self.starts in START_MODES,
            "starts",
            f"must be one of {', '.join(START_MODES)}, got {self.starts!r}",
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
            _within(self.model_epochs, 1, MAX_EPOCHS),
            "model_epochs",
            f"must be in [1, {MAX_EPOCHS}], got {self.model_epochs}",
        )

    def mopo_config(self, task: str) -> Any:
        """The library's `MOPOConfig`: the task's defaults with the options given."""
        from privrl.primorl.mopo import MOPOConfig

        overrides: dict[str, Any] = {
            **self.stage_overrides(),
            "real_ratio": self.real_ratio,
            "starts": self.starts,
            "init_fraction": self.init_fraction,
            "mpd_include_reward": self.mpd_reward,
            "checkpoint_every": self.checkpoint_every,
        }
        if self.model_epochs is not None:
            overrides["dynamics_overrides"] = {"max_epochs": self.model_epochs}
        return MOPOConfig.for_task(task, **overrides)


MOPO_CHECKPOINTS = ("checkpoint.pt", "dynamics.pt")


class MopoSystem(System):
    """MOPO on a control-task dataset; NOT private (ε = ∞)."""

    name = "mopo"
    Config = MopoRunConfig
    data = "required"
    summary = (
        "MOPO (Yu et al. 2020): model-based offline RL with an uncertainty-penalised model. "
        "NOT private (PRIMORL's baseline): the report says ε = ∞."
    )
    resumable = True
    checkpoint_subdir = ""  # dynamics.pt and checkpoint.pt beside config.json, as before
    auto_resume = True

    def plan(self, config: Any, header: Any) -> Plan:
        from privrl.primorl.mopo import RELATION, UNIT
        from privrl.privacy.report import PrivacyReport

        source, task = header_task(
            header,
            "MOPO needs a control task: a privrl id or a standard Gymnasium id with declared "
            "facts (collect with `privrl data collect --env Pendulum-v1` or "
            "`--recipe primorl-pendulum`)",
            config.reward_transform,
        )
        mopo = config.mopo_config(task.name)
        buffer = (
            mopo.rollout_batch_size
            * mopo.rollout_length
            * math.ceil(mopo.steps_per_epoch / mopo.rollout_every)
            * mopo.retain_epochs
        )
        if buffer > MAX_MODEL_BUFFER:
            raise ValueError(
                f"the model buffer would hold {buffer} transitions (rollout batch × length × "
                f"rollouts per epoch × {mopo.retain_epochs} epochs), more than "
                f"{MAX_MODEL_BUFFER}; lower --rollout-batch-size, --rollout-length or "
                "--steps-per-epoch"
            )
        public = {
            "command": "privrl train mopo",
            "algorithm": "mopo",
            "env_id": task.env_id,
            "data_env_id": source.env_id,
            "reward_transform": task.reward_transform,
            **mopo.to_dict(),
        }
        # a non-private run: any ledger refuses it (before the data are read)
        planned = PrivacyReport.non_private(UNIT, RELATION, system="mopo")
        facts = {"task": task, "source": source, "mopo": mopo}
        return Plan(report=planned, public=public, facts=facts)

    def load(self, config: Any, source: Path | None, plan: Plan, rng: np.random.Generator) -> Any:
        from privrl.primorl.mopo import check_dataset

        dataset = super().load(config, source, plan, rng)
        dataset = in_reward_scale(dataset, plan.facts["source"], plan.facts["task"])
        try:
            check_dataset(dataset)
        except ValueError as exc:
            raise ConfigError("data", f"{source}: {exc}") from None
        return dataset

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        import torch

        from privrl.primorl.metrics import mopo_metrics
        from privrl.primorl.mopo import mopo

        assert ctx.plan is not None and ctx.checkpoint_dir is not None
        task, cfg = ctx.plan.facts["task"], ctx.plan.facts["mopo"]
        torch.set_num_threads(config.threads)
        work = ctx.checkpoint_dir
        now = {**ctx.plan.public, "seed": ctx.seed}
        if check_resume(work, now, MOPO_CHECKPOINTS, insist=ctx.resume):
            done = _epochs_done(work)
            if done:
                ctx.notice(f"resuming {work}/ from epoch {done} of {cfg.epochs}")
        progress = stage_progress(ctx, ("dynamics", "dynamics model", "epoch", None))
        result = mopo(data, cfg, seed=ctx.seed, workdir=work, progress=progress)
        metrics = mopo_metrics(cfg, result, task)
        metrics["reward_transform"] = task.reward_transform
        return stage_result(
            metrics,
            result.report,
            result.stage,
            label="MOPO",
            reference=result.reference_returns,
            title=f"MOPO on {task.name}: real-environment return per epoch",
            steps_per_epoch=cfg.steps_per_epoch,
            summary=[
                f"MOPO on {task.name}",
                return_line(
                    metrics,
                    f"start states {metrics['start_mode']}",
                    f"{metrics['epochs']} epochs",
                    f"{metrics['seconds'] / 60:.1f} min",
                ),
            ],
        )


def _epochs_done(work: Path) -> int:
    """SAC epochs in the policy-stage checkpoint (0 with only a trained model)."""
    if not (work / "checkpoint.pt").exists():
        return 0
    from privrl.primorl.policy_stage import load_checkpoint

    try:
        return int(load_checkpoint(work / "checkpoint.pt")["epoch"])
    except (ValueError, OSError, RuntimeError, KeyError) as exc:
        raise ValueError(
            f"{work}/checkpoint.pt cannot be read ({exc}); delete it to restart the policy stage"
        ) from None
