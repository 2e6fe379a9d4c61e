"""`privrl train primorl`: PRIMORL (paper 000) — a dynamics ensemble trained with
trajectory-level (or user-level) DP by DP-FedAvg, a pessimistic model, and SAC inside it with
zero access to the data. A thin command: flags → `PrimorlConfig` → `privrl.primorl.primorl.run`.

Before a byte of episode data is read, the command resolves every public parameter from the
flags and the file's header (`read_header`), and checks the dataset's ledger with the planned
report (T_max rounds); the run directory is written inside the ledger guard, which records the
report for the rounds actually run. ``--model DIR/model.pt`` runs the policy stage only, on the
released model: post-processing, no data, no spend.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import typer

from privrl.cli.errors import CliError
from privrl.systems.mopo import parse_target_entropy

__all__ = ["register", "train_primorl"]

# Config keys a resumed run may change (extending the policy stage).
RESUMABLE_CHANGES = ("epochs", "checkpoint_every")
PENDING = "released.pending.pt"  # the release while the run is unfinished (not recorded)
CHECKPOINTS = (PENDING, "fedavg_state.pt", "checkpoint.pt")


def register(app: typer.Typer) -> None:
    """Add ``primorl`` to `privrl train`."""
    app.command("primorl", no_args_is_help=True)(train_primorl)


def _header_task(data: Path) -> tuple[Any, Any]:
    """(header, task) from the file's header only — a public schema check."""
    from privrl.data.io import read_header
    from privrl.envs.control import task_for_env_id

    header = read_header(data)
    meta = header.metadata
    if not meta.env_id:
        raise CliError(
            f"--data {data}: the dataset records no env id; PRIMORL needs a privrl control task "
            "(build one with `privrl data collect --recipe primorl-pendulum`)"
        )
    task = task_for_env_id(meta.env_id)
    for name, space, dim in (
        ("observation", meta.observation_space, task.obs_dim),
        ("action", meta.action_space, task.act_dim),
    ):
        shape = getattr(space, "shape", None)
        if shape is not None and tuple(shape) != (dim,):
            raise CliError(
                f"--data {data}: the declared {name} space has shape {tuple(shape)} but "
                f"{task.env_id} has ({dim},); re-import it with the task's spaces"
            )
    return header, task


def _has_unit_ids(data: Path) -> bool:
    """Whether the file stores a unit id per episode (structure only, no array is read)."""
    import h5py

    with h5py.File(data, "r") as f:
        return "unit_ids" in f


def _resume_check(out: Path, config: dict[str, Any]) -> bool:
    """True when ``out`` holds a checkpoint of this same run (resume); CliError if of another."""
    if not any((out / n).exists() for n in CHECKPOINTS):
        return False
    from privrl.privacy.report import json_safe

    now = json.loads(json.dumps(json_safe(config)))
    try:
        before = json.loads((out / "run.json").read_text())
    except (OSError, ValueError):
        before = {}
    differ = sorted(
        k
        for k in set(before) | set(now)
        if k not in RESUMABLE_CHANGES and before.get(k) != now.get(k)
    )
    if differ:
        raise CliError(
            f"{out}/ holds the checkpoint of a different run (differs in: {', '.join(differ)}); "
            f"use a new --out, or delete {', '.join(CHECKPOINTS)} in it to restart"
        )
    return True


def train_primorl(
    data: Path = typer.Option(
        None, "--data", help="Dataset (privrl HDF5) of a control task; not with --model."
    ),
    out: Path = typer.Option(Path("runs") / "primorl", "--out", "-o", help="Run directory."),
    seed: int = typer.Option(0, "--seed", help="Seed of the model, the noise and the policy."),
    epsilon: float = typer.Option(
        None, "--epsilon", help="Target ε: z is calibrated for T_max rounds (PLD by default)."
    ),
    delta: float = typer.Option(None, "--delta", help="δ (default 1e-5)."),
    noise_multiplier: float = typer.Option(
        None, "--noise-multiplier", "-z", help="Noise multiplier z (instead of --epsilon)."
    ),
    steps: int = typer.Option(
        None, "--steps", help="T_max, DP-FedAvg rounds fixed in advance (default: task preset)."
    ),
    variant: str = typer.Option(
        None,
        "--variant",
        help="A paper row: no-clip | no-privacy (z = 0; not private) | low | high (the "
        "paper's z and T for the task).",
    ),
    clip: float = typer.Option(
        None, "--clip", help="C, L2 bound on one unit's update of the whole ensemble."
    ),
    clip_mode: str = typer.Option(
        None, "--clip-mode", help="flat | per-layer (default: task preset)."
    ),
    sampling_rate: float = typer.Option(
        None, "--sampling-rate", "-q", help="Poisson sampling rate q of units per round."
    ),
    local_batch: int = typer.Option(None, "--local-batch", help="Local batch size B (16)."),
    local_lr: float = typer.Option(None, "--local-lr", help="Local SGD step η (1e-3)."),
    trajectories: int = typer.Option(
        None,
        "--trajectories",
        "--users",
        "-K",
        help="Declared number K of units (public; default: the dataset's declared "
        "n_trajectories / n_users, never counted from the data).",
    ),
    unit: str = typer.Option(
        "trajectory", "--unit", help="Privacy unit: trajectory | user (all of one user's)."
    ),
    user_column: str = typer.Option(
        None,
        "--user-column",
        help="With --unit user: the table column `privrl data import -c …,unit=COL` mapped "
        "to the dataset's unit ids (checked against the file's record).",
    ),
    accountant: str = typer.Option("pld", "--accountant", help="pld | rdp (other beside it)."),
    penalty: str = typer.Option(
        None, "--penalty", help="Uncertainty u: ma | ma-frobenius | mpd (default: per task)."
    ),
    lam: float = typer.Option(
        None, "--lambda", "--lam", help="λ in r̃ = r̂ − λu (default: per task)."
    ),
    rollout_length: int = typer.Option(
        None, "--rollout-length", "-H", help="Model rollout length h (default: per task)."
    ),
    start_states: str = typer.Option(
        "initial",
        "--start-states",
        help="Rollout starts: initial (simulator's initial states, chained) | public-split.",
    ),
    epochs: int = typer.Option(None, "--epochs", help="SAC epochs (default: per task)."),
    steps_per_epoch: int = typer.Option(1000, "--steps-per-epoch", help="SAC updates/epoch."),
    rollout_batch_size: int = typer.Option(
        None, "--rollout-batch-size", help="Rollouts started per epoch (default: per task)."
    ),
    holdout_fraction: float = typer.Option(
        None, "--holdout-fraction", help="Share of units declared public (default: per task)."
    ),
    eval_every: int = typer.Option(50, "--eval-every", help="Rounds between public-split evals."),
    patience: int = typer.Option(10, "--patience", help="Early stopping patience (evals)."),
    target_entropy: str = typer.Option("-3", "--target-entropy", help="SAC target entropy."),
    model: Path = typer.Option(
        None,
        "--model",
        help="A released model (DIR/model.pt): run only the policy stage — no data, no spend.",
    ),
    threads: int = typer.Option(1, "--threads", help="torch threads."),
) -> None:
    """PRIMORL: trajectory-level private model-based offline RL (paper 000). DP-FedAvg trains
    the dynamics ensemble (the one release); SAC then learns in the pessimistic model without
    touching the data.

    Examples:
      privrl train primorl --data primorl-pendulum.h5 --variant high --out runs/primorl-high
      privrl train primorl --data D.h5 --epsilon 5 --out runs/eps5          # z calibrated
      privrl train primorl --data D.h5 -z 0.52 --steps 7000 --clip 0.02 --trajectories 30000
      privrl train primorl --data users.h5 --unit user --users 500 --epsilon 8
      privrl train primorl --model runs/primorl-high/model.pt --epochs 50 --out runs/again

    Writes config.json, metrics.json (return_mean, return_std, normalised_score, epsilon,
    delta), metrics.csv (per SAC epoch), model_holdout.csv, privacy.json (one release),
    model.pt, policy.pt and plots/. A rerun with the same flags and --out resumes.
    """
    import torch

    from privrl.primorl.dp_fedavg import DpFedAvgConfig
    from privrl.primorl.primorl import PrimorlConfig

    if threads < 1:
        raise CliError(f"--threads must be >= 1, got {threads}")
    if unit not in ("trajectory", "user"):
        raise CliError(f"--unit must be trajectory or user, got {unit!r}")
    if accountant not in ("pld", "rdp"):
        raise CliError(f"--accountant must be pld or rdp, got {accountant!r}")
    if user_column is not None and unit != "user":
        raise CliError("--user-column goes with --unit user")
    entropy = parse_target_entropy(target_entropy)
    torch.set_num_threads(threads)
    stage_kw: dict[str, Any] = {
        "starts": start_states,
        "target_entropy": entropy,
        "steps_per_epoch": steps_per_epoch,
    }
    for key, value in (
        ("penalty", penalty),
        ("lam", lam),
        ("rollout_length", rollout_length),
        ("epochs", epochs),
        ("rollout_batch_size", rollout_batch_size),
    ):
        if value is not None:
            stage_kw[key] = value

    if model is not None:
        if data is not None:
            raise CliError(
                "--model runs only the policy stage and reads no data; drop --data (or drop "
                "--model to train a new model)"
            )
        given = [
            name
            for name, v in (
                ("--epsilon", epsilon),
                ("--noise-multiplier", noise_multiplier),
                ("--steps", steps),
                ("--variant", variant),
                ("--clip", clip),
                ("--sampling-rate", sampling_rate),
                ("--trajectories", trajectories),
                ("--holdout-fraction", holdout_fraction),
            )
            if v is not None
        ]
        if given:
            raise CliError(
                f"{', '.join(given)} set(s) the private training, which --model reuses as "
                "released; drop it"
            )
        _policy_only(model, out, seed, stage_kw)
        return

    if data is None:
        raise CliError("give --data D.h5 (train a private model) or --model DIR/model.pt")
    if not data.is_file():
        raise CliError(f"--data: file not found: {data}")
    header, task = _header_task(data)
    if unit == "user" and not _has_unit_ids(data):
        raise CliError(
            f"--unit user: {data} has no unit ids; import the table with a user column "
            "(`privrl data import T.csv -c episode=…,obs=…,action=…,reward=…,unit=user_id`)"
        )
    if user_column is not None:
        recorded = header.metadata.extra.get("unit_column")
        if recorded is not None and recorded != user_column:
            raise CliError(
                f"--user-column {user_column}: the dataset's unit ids came from column "
                f"{recorded!r}; pass --user-column {recorded}"
            )
    fedavg = DpFedAvgConfig(
        noise_multiplier=noise_multiplier,
        target_epsilon=epsilon,
        delta=delta,
        sampling_rate=sampling_rate,
        clip_norm=clip,
        clip_mode=clip_mode,
        max_rounds=steps,
        n_units=trajectories,
        local_batch=local_batch,
        local_lr=local_lr,
        unit=unit,  # type: ignore[arg-type]
        accountant=accountant,  # type: ignore[arg-type]
        eval_every=eval_every,
        patience=patience,
    )
    extra: dict[str, Any] = {}
    if holdout_fraction is not None:
        extra["holdout_fraction"] = holdout_fraction
    config = PrimorlConfig(task=task.name, fedavg=fedavg, variant=variant, **stage_kw, **extra)
    _train(data, header, task, config, out, seed)


def _train(data: Path, header: Any, task: Any, config: Any, out: Path, seed: int) -> None:
    from privrl.data.io import load_hdf5
    from privrl.experiments.rundir import RunDir, check_out_dir, ledger_guard
    from privrl.primorl import primorl as P

    the_plan = P.plan(config, header.metadata)  # public: flags, header metadata, preset
    planned = P.planned_report(config, the_plan)
    run_config = {
        "command": "privrl train primorl",
        "algorithm": "primorl",
        "data": data.name,
        "env_id": task.env_id,
        "seed": seed,
        **config.to_dict(),
        "public_parameters": the_plan.params.to_list(),
    }
    check_out_dir(out)
    resuming = _resume_check(out, run_config)
    if resuming and (out / "model.pt").exists():
        raise CliError(
            f"{out}/ holds a finished run; to train the policy stage longer on its released "
            f"model (no new spend) use --model {out}/model.pt --out NEW_DIR"
        )
    with ledger_guard(data, planned, label="privrl train primorl", out=out) as reports:
        run = RunDir(out)
        (out / "run.json").write_text(json.dumps(_plain(run_config)) + "\n")
        dataset = load_hdf5(data)
        _check_arrays(dataset, task, data)
        private, public = P.split_public(
            dataset, config.holdout_fraction, salt=config.split_salt, unit=config.fedavg.unit
        )
        del dataset
        if resuming:
            typer.echo(f"resuming {out}/ from its checkpoint", err=True)
        result = _with_progress(
            lambda progress: P.run(
                config, private, seed, public_split=public, progress=progress, workdir=out
            ),
            config,
            the_plan.T_max,
        )
        run.write_config(run_config)
        metrics = _write(run, config, task, result, public.n_episodes)
        P.save_released_model(result.released, out / "model.pt")
        reports.append(result.report)
    (out / PENDING).unlink(missing_ok=True)
    (out / "fedavg_state.pt").unlink(missing_ok=True)
    _summary(out, metrics, result.report)


def _plain(obj: Any) -> Any:
    from privrl.privacy.report import json_safe

    return json_safe(obj)


def _check_arrays(dataset: Any, task: Any, data: Path) -> None:
    """Schema checks a public schema would make (array shapes), never value checks."""
    obs, act = np.asarray(dataset.observations), np.asarray(dataset.actions)
    if obs.ndim != 2 or obs.shape[1] != task.obs_dim:
        raise CliError(f"--data {data}: observations do not have shape [n, {task.obs_dim}]")
    if act.ndim != 2 or act.shape[1] != task.act_dim:
        raise CliError(f"--data {data}: actions do not have shape [n, {task.act_dim}]")


def _policy_only(model_path: Path, out: Path, seed: int, stage_kw: dict[str, Any]) -> None:
    from privrl.experiments.rundir import RunDir, check_out_dir
    from privrl.primorl import primorl as P

    if not model_path.is_file():
        raise CliError(f"--model: file not found: {model_path}")
    released = P.load_released_model(model_path)
    config = P.PrimorlConfig(task=released.task, **stage_kw)
    if config.starts == "public-split" and released.public_states is None:
        raise CliError("--start-states public-split: the released model carries no public split")
    check_out_dir(out)
    run = RunDir(out)
    run_config = {
        "command": "privrl train primorl --model",
        "algorithm": "primorl (policy stage only)",
        "model": str(model_path),
        "seed": seed,
        **config.stage_dict(),
        "task": released.task,
    }
    run.write_config(run_config)
    seeds = P._seeds(seed)
    stage = _with_progress(
        lambda progress: P.policy_from_model(
            released,
            config,
            seed=seeds["stage"],
            checkpoint=out / "checkpoint.pt",
            progress=(lambda r: progress("policy", r)),
        ),
        config,
        None,
    )
    result = P.PrimorlResult(
        released=released,
        fedavg=released.fedavg,
        stage=stage,
        report=P.stage_report(released.report, config, stage.start_mode),
        return_mean=stage.return_mean,
        return_std=stage.return_std,
        normalised_score=P.normalised_score(stage.return_mean, released.reference_returns),
    )
    from privrl.envs.control import control_task

    metrics = _write(run, config, control_task(released.task), result, None, reused=True)
    _summary(out, metrics, result.report)


def _write(
    run: Any, config: Any, task: Any, result: Any, n_public: int | None, *, reused: bool = False
) -> dict[str, Any]:
    """metrics.json, metrics.csv, model_holdout.csv, privacy.json, policy.pt and plots."""
    import torch

    from privrl.experiments.mopo import plot_learning_curve

    stage, fed, report = result.stage, result.fedavg, result.report
    metrics: dict[str, Any] = {
        "algorithm": "primorl",
        "task": task.name,
        "env_id": task.env_id,
        "variant": getattr(config, "variant", None),
        "return_mean": result.return_mean,
        "return_std": result.return_std,
        "normalised_score": result.normalised_score,
        "reference_returns": result.released.reference_returns,
        "epsilon": float(report.epsilon),
        "delta": float(report.delta),
        "private": bool(report.private),
        "unit": report.unit.value,
        "epsilon_max": fed.get("epsilon_max"),
        "rounds": fed.get("rounds"),
        "max_rounds": fed.get("max_rounds"),
        "stopped_early": fed.get("stopped_early"),
        "best_holdout_mse": fed.get("best_holdout_mse"),
        "elites": fed.get("elites"),
        "start_mode": stage.start_mode,
        "penalty": config.penalty,
        "lambda": config.lam,
        "rollout_length": config.rollout_length,
        "epochs": len(stage.curve),
        "final_epochs": min(config.final_epochs, len(stage.curve)),
        "policy_stage_seconds": stage.seconds,
        "model_reused": reused,
    }
    if n_public is not None:
        metrics["public_split_units"] = int(n_public)
    run.write_metrics(metrics)
    run.write_curve(stage.curve)
    rows = [
        {"round": int(r), **{f"mse_member{i}": float(v) for i, v in enumerate(m)}}
        for r, m in zip(fed.get("eval_rounds", []), fed.get("holdout_mse", []), strict=True)
    ]
    if rows:
        import csv

        with open(run.artifact("model_holdout.csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    run.write_privacy(report)
    torch.save(stage.agent.state_dict(), run.artifact("policy.pt"))
    plot_learning_curve(
        run.plot_path("learning_curve"),
        {"PRIMORL": stage.eval_returns},
        reference=result.released.reference_returns,
        title=f"PRIMORL on {task.name} (ε = {report.epsilon:.3g}): real-environment return",
        steps_per_epoch=config.steps_per_epoch,
    )
    if rows:
        _plot_holdout(run.plot_path("model_holdout"), fed)
    return metrics


def _plot_holdout(path: Path, fed: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    r = np.asarray(fed["eval_rounds"])
    m = np.asarray(fed["holdout_mse"], dtype=np.float64)
    for i in range(m.shape[1]):
        ax.plot(r, m[:, i], label=f"member {i}")
    ax.set_yscale("log")
    ax.set_xlabel("DP-FedAvg round")
    ax.set_ylabel("MSE on the public split")
    ax.set_title("released model: public-split error over rounds", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _with_progress(body: Any, config: Any, rounds: int | None) -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        tasks: dict[str, Any] = {}

        def progress(phase: str, record: dict[str, Any]) -> None:
            if phase == "fedavg":
                if phase not in tasks:
                    tasks[phase] = bar.add_task("DP-FedAvg rounds", total=rounds, info="")
                mse = float(np.mean(record["holdout_mse"]))
                bar.update(tasks[phase], completed=record["round"], info=f"public MSE {mse:.3g}")
            else:
                if phase not in tasks:
                    if "fedavg" in tasks:
                        bar.update(tasks["fedavg"], visible=False)
                    tasks[phase] = bar.add_task("SAC in the model", total=record["epochs"], info="")
                bar.update(
                    tasks[phase],
                    completed=record["epoch"],
                    info=f"return {record['return_mean']:.1f}",
                )

        return body(progress)


def _summary(out: Path, metrics: dict[str, Any], report: Any) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    console.print(Text(report.summary()))
    table = Table(title=f"PRIMORL on {metrics['task']}")
    for col in ("return (last epochs)", "normalised", "ε", "rounds", "start states"):
        table.add_column(col)
    score = metrics["normalised_score"]
    table.add_row(
        f"{metrics['return_mean']:.1f} ± {metrics['return_std']:.1f}",
        "n/a" if score is None else f"{score:.1f}",
        f"{metrics['epsilon']:.3g}",
        f"{metrics['rounds']} / {metrics['max_rounds']}",
        metrics["start_mode"],
    )
    console.print(table)
    model = "" if metrics.get("model_reused") else "model.pt, "
    typer.echo(
        f"wrote {out}/ (config.json, metrics.json, metrics.csv, privacy.json, {model}"
        "policy.pt, plots/)"
    )
