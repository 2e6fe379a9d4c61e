"""MOPO (Yu et al. 2020), PRIMORL's non-private baseline, on the run layer (`privrl train mopo`).

The system adapts `privrl.primorl.MOPO` (its config `MOPOConfig` is the command's: every flag
is one of its fields): `plan` checks that the header names a known control task and calls the
library's plan (ε = ∞, so any dataset ledger refuses the run from the file's header, before a
record is read); `load` reads the episodes and checks their shapes; `run` calls the library's
computation with the checkpoints ``dynamics.pt`` and ``checkpoint.pt`` kept in the run
directory itself, and returns metrics, the per-epoch curve, policy.pt and the learning curve.

This module also holds what PRIMORL's system shares with MOPO (the task from the header, the
resume check and the learning-curve plot): `privrl.systems.primorl` imports them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privrl.config import ConfigError
from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import DatasetHeader
from privrl.envs.control import ControlTask
from privrl.primorl.mopo import MOPOConfig
from privrl.primorl.options import (
    MAX_EPOCHS,
    MAX_LAM,
    MAX_MODEL_BUFFER,
    StageOptions,
    parse_target_entropy,
)
from privrl.primorl.policy_stage import PolicyStageResult
from privrl.primorl.tasks import in_reward_scale
from privrl.privacy.report import PrivacyReport
from privrl.runs.system import Plan, Result, RunContext, System

__all__ = [
    "MAX_EPOCHS",
    "MAX_LAM",
    "MAX_MODEL_BUFFER",
    "MopoRunConfig",
    "MopoSystem",
    "StageOptions",
    "in_reward_scale",
    "parse_target_entropy",
]

# Settings a resumed run may change: extending a finished policy stage is allowed.
RESUMABLE_CHANGES = ("epochs", "checkpoint_every")
# Settings recorded only since the reward-scale option: a checkpoint recorded without them was
# trained in the dataset's own scale, i.e. with data_env_id == env_id.
ADDED_SETTINGS = ("data_env_id", "reward_transform")
RECORD = "run.json"  # the settings of the run a checkpoint belongs to (written before training)

MopoRunConfig = MOPOConfig
"""`privrl train mopo`'s config: the library's (every flag is one of its fields)."""


# ---------------------------------------------------------------------------------------------
# shared by the MOPO and PRIMORL systems
# ---------------------------------------------------------------------------------------------


def header_task(
    header: DatasetHeader | None, needs: str, config: StageOptions
) -> tuple[ControlTask, ControlTask]:
    """(the dataset's task, the task to run): the control task named by the header's env id —
    a privrl id, a standard id privrl declares facts for, or any Gymnasium continuous-control
    id, its facts from the config's settings, the header's metadata or the simulator
    (`privrl.primorl.tasks.resolve_task`); `needs` says what the system needs and how to build
    a dataset for it — and the same task in the config's reward scale. Public facts only."""
    from privrl.primorl.tasks import resolve_task

    if header is None:
        raise ConfigError("data", "is required: give a dataset file of a control task")
    if not header.metadata.env_id:
        raise ConfigError("data", f"{header.path}: the dataset records no env id; {needs}")
    try:
        return resolve_task(None, header.metadata, config.reward_transform, config.task_facts())
    except ConfigError as exc:
        if exc.key != "data":
            raise
        raise ConfigError("data", f"{header.path}: {exc.problem}") from None


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


def stage_result(
    metrics: dict[str, Any],
    report: PrivacyReport,
    stage: PolicyStageResult,
    *,
    label: str,
    reference: Mapping[str, float] | None,
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

MOPO_CHECKPOINTS = ("checkpoint.pt", "dynamics.pt")
NEEDS_TASK = (
    "MOPO needs a control task: a privrl id or a Gymnasium continuous-control id (collect "
    "with `privrl data collect --env Pendulum-v1`, or import with --env-id)"
)


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
    checkpoint_subdir = ""  # dynamics.pt and checkpoint.pt beside config.json
    auto_resume = True

    def plan(self, config: MOPOConfig, header: DatasetHeader | None) -> Plan:
        from privrl.primorl.learners import MOPO

        source, _ = header_task(header, NEEDS_TASK, config)
        assert header is not None
        planned = MOPO(config.mopo_config(source)).plan(header)
        return Plan(
            report=planned.report,
            public={"command": "privrl train mopo", **planned.public},
            facts=planned.facts,
        )

    def load(
        self, config: MOPOConfig, source: Path | None, plan: Plan, rng: np.random.Generator
    ) -> TrajectoryDataset:
        from privrl.primorl.learners import mopo_data

        dataset = super().load(config, source, plan, rng)
        try:
            return mopo_data(dataset, plan)
        except ConfigError as exc:
            raise ConfigError("data", f"{source}: {exc.problem}") from None

    def run(
        self, config: MOPOConfig, data: TrajectoryDataset, rng: np.random.Generator, ctx: RunContext
    ) -> Result:
        import torch

        from privrl.primorl.learners import MOPO
        from privrl.primorl.metrics import mopo_metrics

        assert ctx.plan is not None and ctx.checkpoint_dir is not None
        task, cfg = ctx.plan.facts["task"], ctx.plan.facts["mopo"]
        torch.set_num_threads(config.threads)
        work = ctx.checkpoint_dir
        now = {**ctx.plan.public, "seed": ctx.seed}
        if check_resume(work, now, MOPO_CHECKPOINTS, insist=ctx.resume):
            done = _epochs_done(work)
            if done:
                ctx.notice(f"resuming {work}/ from epoch {done} of {cfg.epochs}")
        result = MOPO(cfg).compute(
            ctx.plan, data, seed=ctx.seed, progress=ctx.progress, workdir=work
        )
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
