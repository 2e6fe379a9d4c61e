"""`privrl train mopo`: MOPO (Yu et al. 2020), PRIMORL's non-private baseline, on a
continuous-control dataset (``privrl data collect --recipe primorl-pendulum`` and friends).

Pipeline: split by episode (public holdout) → Gaussian ensemble dynamics model → SAC in the
pessimistic model r̃ = r̂ − λu with 5% real data per batch. Per-task defaults (penalty, λ,
rollout length, epochs) come from the spec; every option below overrides one of them.

The run directory gets config.json, metrics.json (``return_mean``, ``return_std``,
``normalised_score``), metrics.csv (one row per SAC epoch), plots/learning_curve.png,
privacy.json (ε = ∞: MOPO is not private), policy.pt (the SAC agent; reload with
``privrl.rl.sac.SAC.from_state_dict(torch.load(...))``) and the checkpoints (dynamics.pt,
checkpoint.pt). A rerun with the same configuration and ``--out`` resumes automatically;
``--resume`` insists on it. A dataset with a budget ledger is refused (a non-private run would
void its budget) before a single record is read: the command reads the dataset's header
(metadata and sizes) and builds its configuration from it, then ``ledger_guard`` validates
``--out`` and checks the ledger; the episodes are read, and the run directory written, inside
the guard. Options beyond the limits below are refused up front (they would exhaust memory or
never finish).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import typer

from privrl.cli.errors import CliError

__all__ = ["parse_target_entropy", "register", "train_mopo"]

CHECKPOINTS = ("checkpoint.pt", "dynamics.pt")
# Config keys a resumed run may change: extending a finished run is allowed.
RESUMABLE_CHANGES = ("epochs", "checkpoint_every")

# Limits of the options (checked before anything is read or allocated).
MAX_EPOCHS = 100_000
MAX_STEPS_PER_EPOCH = 1_000_000
MAX_ROLLOUT_LENGTH = 10_000
MAX_ROLLOUT_BATCH = 10_000_000
MAX_LAM = 1e6
MAX_MODEL_BUFFER = 10_000_000  # transitions kept from the model's rollouts (memory)
MAX_SEED = 2**63 - 1


def register(app: typer.Typer) -> None:
    """Add ``mopo`` to `privrl train`."""
    app.command("mopo", no_args_is_help=True)(train_mopo)


def parse_target_entropy(value: str) -> float | None:
    """`--target-entropy`: a number, or 'action-dim' for SAC's default −|A| (None)."""
    if value.strip().lower() in ("action-dim", "-|a|", "auto"):
        return None
    try:
        x = float(value)
    except ValueError:
        raise CliError(
            f"--target-entropy must be a number or 'action-dim' (−|A|), got {value!r}"
        ) from None
    if not math.isfinite(x):
        raise CliError(f"--target-entropy must be finite, got {value!r}")
    return x


def _check_options(
    real_ratio: float,
    epochs: int | None,
    penalty: str | None,
    lam: float | None,
    rollout_length: int | None,
    rollout_batch_size: int | None,
    starts: str,
    init_fraction: float,
    checkpoint_every: int,
) -> None:
    from privrl.primorl.pessimism import PENALTIES
    from privrl.primorl.policy_stage import START_MODES

    if not (math.isfinite(real_ratio) and 0.0 <= real_ratio <= 1.0):
        raise CliError(f"--real-ratio must be in [0, 1] (MOPO: 0.05, none: 0), got {real_ratio}")
    if epochs is not None and not 1 <= epochs <= MAX_EPOCHS:
        raise CliError(f"--epochs must be in [1, {MAX_EPOCHS}], got {epochs}")
    if penalty is not None and penalty not in PENALTIES:
        raise CliError(f"--penalty must be one of {', '.join(PENALTIES)}, got {penalty!r}")
    if lam is not None and not (math.isfinite(lam) and 0 <= lam <= MAX_LAM):
        raise CliError(f"--lam must be in [0, {MAX_LAM:g}], got {lam}")
    if rollout_length is not None and not 1 <= rollout_length <= MAX_ROLLOUT_LENGTH:
        raise CliError(
            f"--rollout-length must be in [1, {MAX_ROLLOUT_LENGTH}], got {rollout_length}"
        )
    if rollout_batch_size is not None and not 1 <= rollout_batch_size <= MAX_ROLLOUT_BATCH:
        raise CliError(
            f"--rollout-batch-size must be in [1, {MAX_ROLLOUT_BATCH}], got {rollout_batch_size}"
        )
    if starts not in START_MODES:
        raise CliError(f"--starts must be one of {', '.join(START_MODES)}, got {starts!r}")
    if not (math.isfinite(init_fraction) and 0.0 < init_fraction <= 1.0):
        raise CliError(f"--init-fraction must be in (0, 1], got {init_fraction}")
    if checkpoint_every < 1:
        raise CliError(f"--checkpoint-every must be >= 1, got {checkpoint_every}")


def _resume_check(out: Path, config: dict[str, Any], resume: bool) -> int:
    """Decide between a fresh run and a resume; returns the epochs already done (0 if none).

    A checkpoint of the same configuration is resumed automatically; one of a different
    configuration is an error (never overwritten silently)."""
    has_ckpt = any((out / name).exists() for name in CHECKPOINTS)
    if not has_ckpt:
        if resume:
            raise CliError(
                f"--resume: no checkpoint in {out}/ (run once without --resume to start)"
            )
        return 0
    from privrl.privacy.report import json_safe

    config = json.loads(json.dumps(json_safe(config)))
    previous: dict[str, Any] = {}
    if (out / "config.json").is_file():
        try:
            previous = json.loads((out / "config.json").read_text())
        except json.JSONDecodeError:
            previous = {}
    keys = sorted(set(previous) | set(config))
    differ = [
        k
        for k in keys
        if k not in RESUMABLE_CHANGES and k != "data" and previous.get(k) != config.get(k)
    ]
    if differ:
        raise CliError(
            f"{out}/ holds a checkpoint of a different run (differs in: {', '.join(differ)}); "
            f"use a new --out, or delete {out}/checkpoint.pt and {out}/dynamics.pt to restart"
        )
    if (out / "checkpoint.pt").exists():
        from privrl.primorl.policy_stage import load_checkpoint

        try:
            return int(load_checkpoint(out / "checkpoint.pt")["epoch"])
        except (ValueError, OSError, RuntimeError, KeyError) as exc:
            raise CliError(
                f"{out}/checkpoint.pt cannot be read ({exc}); delete it to restart the policy stage"
            ) from None
    return 0


def train_mopo(
    data: Path = typer.Option(..., "--data", help="Dataset file (privrl HDF5) of a control task."),
    out: Path = typer.Option(Path("runs") / "mopo", "--out", "-o", help="Run directory."),
    real_ratio: float = typer.Option(
        0.05, "--real-ratio", help="Share of real transitions in each SAC batch (0 = none)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the split, the model and the policy."),
    epochs: int = typer.Option(
        None, "--epochs", help="SAC epochs of 1000 steps (default: per task)."
    ),
    penalty: str = typer.Option(
        None, "--penalty", help="Uncertainty u: ma | ma-frobenius | mpd (default: per task)."
    ),
    lam: float = typer.Option(
        None, "--lam", "--lambda", help="Penalty coefficient λ in r̃ = r̂ − λu (default: per task)."
    ),
    rollout_length: int = typer.Option(
        None, "--rollout-length", "-H", help="Model rollout length h (default: per task)."
    ),
    rollout_batch_size: int = typer.Option(
        None, "--rollout-batch-size", help="Rollouts started per epoch (default: per task)."
    ),
    starts: str = typer.Option(
        "dataset",
        "--starts",
        help="Rollout start states: dataset (MOPO) | initial (env's initial distribution, "
        "chained) | public-split (the holdout's states).",
    ),
    init_fraction: float = typer.Option(
        0.2, "--init-fraction", help="With --starts initial: share of fresh initial states."
    ),
    mpd_reward: bool = typer.Option(
        False, "--mpd-reward", help="Include the reward output in u_MPD (default: states only)."
    ),
    target_entropy: str = typer.Option(
        "-3", "--target-entropy", help="SAC's target entropy: a number, or 'action-dim' (−|A|)."
    ),
    model_epochs: int = typer.Option(
        None, "--model-epochs", help="Most epochs of dynamics training (default: per task)."
    ),
    steps_per_epoch: int = typer.Option(
        1000, "--steps-per-epoch", help="SAC updates per epoch (spec: 1000)."
    ),
    checkpoint_every: int = typer.Option(
        1, "--checkpoint-every", help="Save a checkpoint every this many epochs."
    ),
    threads: int = typer.Option(
        1,
        "--threads",
        help="torch threads (1 is fastest for SAC's 256-row batches, and on a shared machine).",
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the checkpoint in --out (an error if there is none)."
    ),
) -> None:
    """MOPO (Yu et al. 2020): model-based offline RL with an uncertainty-penalised model.
    NOT private (PRIMORL's baseline): the report says ε = ∞."""
    from privrl.data.io import load_hdf5, read_header
    from privrl.envs.control import task_for_env_id
    from privrl.experiments.mopo import write_mopo_run
    from privrl.experiments.rundir import RunDir, ledger_guard
    from privrl.primorl.mopo import RELATION, UNIT, MOPOConfig, check_dataset
    from privrl.privacy.report import PrivacyReport

    # 1. the options, before anything is read
    _check_options(
        real_ratio,
        epochs,
        penalty,
        lam,
        rollout_length,
        rollout_batch_size,
        starts,
        init_fraction,
        checkpoint_every,
    )
    if model_epochs is not None and not 1 <= model_epochs <= MAX_EPOCHS:
        raise CliError(f"--model-epochs must be in [1, {MAX_EPOCHS}], got {model_epochs}")
    if not 1 <= steps_per_epoch <= MAX_STEPS_PER_EPOCH:
        raise CliError(
            f"--steps-per-epoch must be in [1, {MAX_STEPS_PER_EPOCH}], got {steps_per_epoch}"
        )
    cores = os.cpu_count() or 1
    if not 1 <= threads <= cores:
        raise CliError(f"--threads must be in [1, {cores}] (this machine's cores), got {threads}")
    if not 0 <= seed <= MAX_SEED:
        raise CliError(f"--seed must be in [0, {MAX_SEED}], got {seed}")
    entropy = parse_target_entropy(target_entropy)

    # 2. the header (metadata and sizes; no episode is read) and the run's configuration
    if not data.is_file():
        raise CliError(f"--data: file not found: {data}")
    header = read_header(data)
    env_id = header.metadata.env_id
    if not env_id:
        raise CliError(
            f"--data {data}: the dataset records no env id; MOPO needs one of the privrl "
            "control tasks (collect with `privrl data collect --recipe primorl-pendulum`)"
        )
    try:
        task = task_for_env_id(env_id)
    except ValueError as exc:
        raise CliError(f"--data {data}: {exc}") from None
    overrides: dict[str, Any] = {
        "real_ratio": real_ratio,
        "starts": starts,
        "init_fraction": init_fraction,
        "mpd_include_reward": mpd_reward,
        "target_entropy": entropy,
        "checkpoint_every": checkpoint_every,
        "steps_per_epoch": steps_per_epoch,
    }
    if model_epochs is not None:
        overrides["dynamics_overrides"] = {"max_epochs": model_epochs}
    for key, value in (
        ("epochs", epochs),
        ("penalty", penalty),
        ("lam", lam),
        ("rollout_length", rollout_length),
        ("rollout_batch_size", rollout_batch_size),
    ):
        if value is not None:
            overrides[key] = value
    try:
        config = MOPOConfig.for_task(task.name, **overrides)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    buffer = (
        config.rollout_batch_size
        * config.rollout_length
        * math.ceil(config.steps_per_epoch / config.rollout_every)
        * config.retain_epochs
    )
    if buffer > MAX_MODEL_BUFFER:
        raise CliError(
            f"the model buffer would hold {buffer} transitions (rollout batch × length × "
            f"rollouts per epoch × {config.retain_epochs} epochs), more than {MAX_MODEL_BUFFER}; "
            "lower --rollout-batch-size, --rollout-length or --steps-per-epoch"
        )
    run_config = {
        "command": "privrl train mopo",
        "algorithm": "mopo",
        "data": str(data),
        "env_id": task.env_id,
        "seed": seed,
        **config.to_dict(),
    }
    import torch

    torch.set_num_threads(threads)

    # 3. the ledger (a non-private run is refused by any ledger, before the data are read),
    # then the data, the run and its directory
    planned = PrivacyReport.non_private(UNIT, RELATION, system="mopo")
    with ledger_guard(data, planned, label="privrl train mopo", out=out):
        done = _resume_check(out, run_config, resume)
        dataset = load_hdf5(data)
        try:
            check_dataset(dataset)
        except ValueError as exc:
            raise CliError(f"--data {data}: {exc}") from None
        run = RunDir(out)
        run.write_config(run_config)
        if done:
            typer.echo(f"resuming {out}/ from epoch {done} of {config.epochs}", err=True)
        try:
            result = _run_with_progress(dataset, config, seed, out, done)
        except ValueError as exc:  # a checkpoint of another run, bad parameters
            raise CliError(str(exc)) from None
        metrics = write_mopo_run(run, config, result, task)
    _summary(out, metrics, result)


def _run_with_progress(dataset: Any, config: Any, seed: int, out: Path, done: int) -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from privrl.primorl.mopo import mopo

    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        tasks: dict[str, Any] = {}

        def progress(phase: str, record: dict[str, Any]) -> None:
            if phase == "dynamics":
                if phase not in tasks:
                    tasks[phase] = bar.add_task(
                        "dynamics model", total=config.dynamics.max_epochs, info=""
                    )
                mse = record.get("holdout_mse")
                info = "" if mse is None else f"holdout MSE {float(np.mean(mse)):.3g}"
                bar.update(tasks[phase], completed=record["epoch"], info=info)
            else:
                if phase not in tasks:
                    if "dynamics" in tasks:
                        bar.update(tasks["dynamics"], visible=False)
                    tasks[phase] = bar.add_task(
                        "SAC in the model", total=record["epochs"], completed=done, info=""
                    )
                bar.update(
                    tasks[phase],
                    completed=record["epoch"],
                    info=f"return {record['return_mean']:.1f}",
                )

        return mopo(dataset, config, seed=seed, workdir=out, progress=progress)


def _summary(out: Path, metrics: dict[str, Any], result: Any) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    console.print(Text(result.report.summary()))
    table = Table(title=f"MOPO on {metrics['task']}")
    for col in ("return (last 10 epochs)", "normalised", "start states", "epochs", "time"):
        table.add_column(col)
    score = metrics["normalised_score"]
    table.add_row(
        f"{metrics['return_mean']:.1f} ± {metrics['return_std']:.1f}",
        "n/a" if score is None else f"{score:.1f}",
        metrics["start_mode"],
        str(metrics["epochs"]),
        f"{metrics['seconds'] / 60:.1f} min",
    )
    console.print(table)
    typer.echo(
        f"wrote {out}/ (config.json, metrics.json, metrics.csv, privacy.json, policy.pt, "
        "plots/learning_curve.png)"
    )
