"""The report of reproduction ``mopo-table1`` (`reproductions.primorl.mopo`): per task the return
and normalised score over seeds (mean ± 95% t-interval) beside the paper's MOPO row, the return
on the raw Gymnasium scale, the learning curves, the gallery claims, and the section on the
rollout batch (ours, 5,000 per epoch, against the paper's 50,000, with the measured cost of an
epoch at each: `ROLLOUT_BATCH_COST`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privrl.runs.plots import plot_learning_curve
from privrl.runs.rundir import RunDir
from reproductions.claims import Claim, holds, write_claims
from reproductions.primorl.mopo import (
    PAPER_MOPO,
    TABLE1_TASKS,
    TARGETS,
    TASK_SEEDS,
    task_config,
)
from reproductions.templates import beside, table

__all__ = [
    "PAPER_ROLLOUT_BATCH",
    "ROLLOUT_BATCH_COST",
    "gallery_claims",
    "paper_scale",
    "raw_return_map",
]

TEXT = beside(__file__, "mopo_report.md.tmpl")
PAPER_ROLLOUT_BATCH = 50_000
# MOPO on primorl-pendulum with the trained dynamics model reused, `privrl train mopo --epochs 2
# --rollout-batch-size B --seed 0`, at our batch and the paper's, side by side on the same shared
# 2-core machine: the model transitions of an epoch, the process CPU seconds of its second SAC
# epoch (1,000 updates, the rollouts, the evaluation) and of the whole run, its peak memory.
ROLLOUT_BATCH_COST: dict[int, dict[str, float]] = {
    5_000: {"transitions": 138_954, "cpu_epoch": 15.1, "cpu_total": 34.7, "peak_mb": 1160},
    50_000: {"transitions": 1_390_889, "cpu_epoch": 22.7, "cpu_total": 52.4, "peak_mb": 1820},
}


def _ci95(x: np.ndarray) -> float:
    """Half-width of the 95% confidence interval of the mean (Student t; NaN for one value)."""
    from privrl.runs.sweep import mean_ci

    if x.size < 2:
        return math.nan
    mean, _, high = mean_ci([float(v) for v in x])
    return high - mean


def _write_table1(
    out: Path,
    runs: list[dict[str, Any]],
    datasets: dict[str, dict[str, Any]],
    tasks: tuple[str, ...],
    base_seed: int,
    *,
    quick: bool,
    wall: float,
    note: Sequence[str] = (),
) -> Path:
    from privrl.primorl.mopo import MOPOConfig, mopo_privacy_report

    run = RunDir(out)
    by_task: dict[str, list[dict[str, Any]]] = {t: [] for t in tasks}
    for r in runs:
        by_task[r["task"]].append(r)
    by_task = {t: sorted(rs, key=lambda r: r["seed"]) for t, rs in by_task.items()}
    summary = {t: _task_summary(t, rs, datasets[t]) for t, rs in by_task.items()}
    _plot_curves(by_task, datasets, run.plot_path("learning_curves"))
    run.write_config(
        {
            "reproduction": "mopo-table1",
            "seeds": {t: len(summary[t]["seeds"]) for t in tasks},
            "base_seed": base_seed,
            "quick": quick,
            "tasks": list(tasks),
        }
    )
    first = summary[tasks[0]]
    run.write_metrics(
        {
            "return_mean": first["return_mean"],
            "normalised_score": first["normalised_mean"],
            "tasks": summary,
            "wall_time_s": wall,
        }
    )
    run.write_curve(
        [
            {"task": task, "seed": r["seed"], "epoch": e, "return_mean": v}
            for task, rs in by_task.items()
            for r in rs
            for e, v in enumerate(r["curve"], start=1)
        ]
    )
    run.write_privacy(mopo_privacy_report(MOPOConfig.for_task("pendulum")))
    report = run.artifact("report.md")
    report.write_text(_report(summary, quick, wall, note))
    write_claims(run.path, gallery_claims(summary, quick=quick))
    return report


def _task_summary(
    task: str, rs: Sequence[Mapping[str, Any]], dataset: Mapping[str, Any]
) -> dict[str, Any]:
    """A task's row: return and normalised score over its seeds (mean ± 95% CI), the raw
    return, the per-seed values and minutes, the targets and the dataset's facts."""
    ret = np.array([r["return_mean"] for r in rs])
    norm = np.array(
        [np.nan if r["normalised_score"] is None else r["normalised_score"] for r in rs]
    )
    a, b = raw_return_map(task, rs)
    return {
        "seeds": [r["seed"] for r in rs],
        "return_mean": float(ret.mean()),
        "return_ci95": _ci95(ret),
        "raw_return_mean": a + b * float(ret.mean()),
        "raw_return_ci95": abs(b) * _ci95(ret),
        "normalised_mean": float(np.nanmean(norm)) if np.isfinite(norm).any() else None,
        "normalised_ci95": _ci95(norm[np.isfinite(norm)]),
        "per_seed_return": ret.tolist(),
        "per_seed_normalised": norm.tolist(),
        "target": TARGETS[task],
        "paper_mopo": PAPER_MOPO[task],
        "minutes_per_run": [r["seconds"] / 60 for r in rs],
        "dataset": dataset,
    }


def _plot_curves(
    by_task: Mapping[str, Sequence[Mapping[str, Any]]],
    datasets: Mapping[str, Mapping[str, Any]],
    path: Path,
) -> None:
    """One panel per task: the real return per epoch, mean ± std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(by_task), figsize=(5.0 * len(by_task), 3.8), squeeze=False)
    for ax, (task, rs) in zip(axes[0], by_task.items(), strict=True):
        n_ep = min(len(r["curve"]) for r in rs)
        stack = np.array([r["curve"][:n_ep] for r in rs]).T  # [epochs, seeds]
        plot_learning_curve(
            Path(),
            {f"MOPO ({len(rs)} seeds)": stack},
            reference=datasets[task]["reference_returns"],
            title=task,
            ax=ax,
        )
    fig.suptitle("MOPO: real return per epoch (mean ± std over seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def raw_return_map(task: str, runs: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """(A, B) with R_raw = A + B·R for the task's returns (the runs' env id, else the task's
    privrl id): the public inverse of privrl's reward transform over the horizon
    (`reproductions.primorl.sweeps.raw_map`)."""
    from privrl.envs.control import control_task
    from reproductions.primorl.sweeps import raw_map

    env_id = next((str(r["env_id"]) for r in runs if r.get("env_id")), None)
    return raw_map(env_id or control_task(task).env_id)


def paper_scale(task: str) -> str:
    """The scale of the paper's number for `task` (Table 1 gives no unit)."""
    if task == "pendulum":
        return "paper's own Pendulum scale, not mappable to ours"
    return "dm_control scale, as ours"


def gallery_claims(summary: dict[str, dict[str, Any]], *, quick: bool = False) -> list[Claim]:
    """The gallery rows: one per task, the report's 'met' column as the verdict (the target is
    ours: the paper's Pendulum returns are on a scale that cannot be mapped to ours, so the
    comparison is of normalised scores). Quick mode decides nothing."""
    out = []
    for task, s in summary.items():
        norm = s["normalised_mean"]
        ours = f"return {_fmt(s['return_mean'], s['return_ci95'])}"
        if task == "pendulum" and s.get("raw_return_mean") is not None:
            raw = _fmt(s["raw_return_mean"], s.get("raw_return_ci95", math.nan))
            ours += f" (raw Pendulum-v1 {raw})"
        ours += f"; normalised {_fmt(norm, s['normalised_ci95'])} ({len(s['seeds'])} seeds)"
        if quick or norm is None:
            verdict, kind = "inconclusive", "inconclusive at our scale"
        else:
            verdict = kind = holds(norm >= s["target"])
        out.append(
            Claim(
                f"MOPO reaches the expert level on {task} (normalised ≥ {s['target']:.0f})",
                f"MOPO {s['paper_mopo'][0]} ± {s['paper_mopo'][1]} ({paper_scale(task)})",
                ours,
                verdict,
                "plots/learning_curves.png",
                kind,
            )
        )
    return out


def _fmt(mean: float | None, ci: float) -> str:
    if mean is None:
        return "n/a"
    return f"{mean:.1f}" + ("" if not math.isfinite(ci) else f" ± {ci:.1f}")


def _rollout_batch_notes(summary: Mapping[str, Mapping[str, Any]]) -> str:
    """The report section on the rollout batch: ours (5,000) against the paper's (50,000),
    with the measured cost of an epoch at each (`ROLLOUT_BATCH_COST`)."""
    ours = task_config("pendulum", quick=False).rollout_batch_size
    cost = ROLLOUT_BATCH_COST
    if ours not in cost or PAPER_ROLLOUT_BATCH not in cost:
        body = TEXT.fill("rollout_unmeasured")
    else:
        body = _rollout_cost(summary, ours, cost)
    return TEXT.fill("rollout", ours=f"{ours:,}", paper=f"{PAPER_ROLLOUT_BATCH:,}", body=body)


def _rollout_cost(
    summary: Mapping[str, Mapping[str, Any]], ours: int, cost: Mapping[int, Mapping[str, float]]
) -> str:
    """The measured cost of an epoch at our batch and the paper's, and why we keep ours."""
    rows = []
    for batch in (ours, PAPER_ROLLOUT_BATCH):
        c = cost[batch]
        rows.append(
            [f"{batch:,}", f"{c['transitions']:,.0f}", f"{5 * c['transitions']:,.0f}",
             f"{c['cpu_epoch']:.1f}", f"{c['cpu_total']:.0f}", f"{c['peak_mb']:,.0f}"]
        )  # fmt: skip
    header = ["rollouts per epoch", "model transitions per epoch", "model buffer (5 epochs)",
              "CPU s, one epoch", "CPU s, whole run (2 epochs)", "peak memory (MB)"]  # fmt: skip
    met = [s["normalised_mean"] is not None and s["normalised_mean"] >= s["target"]
           for s in summary.values()]  # fmt: skip
    kept = TEXT.fill("kept_met" if met and all(met) else "kept_cost", ours=f"{ours:,}")
    ratio = cost[PAPER_ROLLOUT_BATCH]["cpu_epoch"] / cost[ours]["cpu_epoch"]
    return TEXT.fill(
        "rollout_measured",
        cost_table=table(header, rows),
        ratio=f"{ratio:.1f}",
        runs=sum(TASK_SEEDS.values()),
        kept=kept,
    )


def _report(summary: dict[str, Any], quick: bool, wall: float, note: Sequence[str] = ()) -> str:
    from reproductions.primorl.sweeps import raw_scale_notes

    seeds = "; ".join(
        f"{task} {s['seeds'][0]}…{s['seeds'][-1]} ({len(s['seeds'])})"
        for task, s in summary.items()
    )
    absent = [t for t in TABLE1_TASKS if t not in summary]
    if wall > 0:
        timing = TEXT.fill("timing_wall", minutes=f"{wall / 60:.1f}")
    else:
        timing = TEXT.fill("timing_regenerated")
    fields = {
        "quick": TEXT.fill("quick") + "\n" if quick else "",
        "seeds": seeds,
        "results_table": _results_table(summary),
        "absent": "\n" + TEXT.fill("absent", tasks=", ".join(absent)) if absent else "",
        "raw_scale": "\n".join(raw_scale_notes()).rstrip("\n"),
        "rollout": _rollout_batch_notes(summary),
        "datasets_table": _datasets_table(summary),
        "settings_table": _settings_table(summary, quick),
        "note": "\n" + TEXT.fill("note", paragraphs="\n\n".join(note)) if note else "",
        "timing": timing,
    }
    return TEXT.fill("report", fields) + "\n"


def _results_table(summary: Mapping[str, Mapping[str, Any]]) -> str:
    header = ["task", "seeds", "paper MOPO (paper's scale)", "our return",
              "our return, raw scale", "our normalised", "target", "met",
              "per-seed normalised", "min/run"]  # fmt: skip
    return table(header, [_result_row(task, s) for task, s in summary.items()])


def _result_row(task: str, s: Mapping[str, Any]) -> list[Any]:
    if s["normalised_mean"] is None:
        met = "—"
    else:
        met = "yes" if s["normalised_mean"] >= s["target"] else "no"
    per_seed = ", ".join(
        "n/a" if not math.isfinite(v) else f"{v:.1f}" for v in s["per_seed_normalised"]
    )
    return [
        task,
        len(s["seeds"]),
        f"{s['paper_mopo'][0]} ± {s['paper_mopo'][1]}",
        _fmt(s["return_mean"], s["return_ci95"]),
        _fmt(s.get("raw_return_mean"), s.get("raw_return_ci95", math.nan)),
        _fmt(s["normalised_mean"], s["normalised_ci95"]),
        f"≥ {s['target']:.0f}",
        met,
        per_seed,
        f"{np.mean(s['minutes_per_run']):.1f}",
    ]


def _datasets_table(summary: Mapping[str, Mapping[str, Any]]) -> str:
    rows = []
    for task, s in summary.items():
        d = s["dataset"]
        ref = d["reference_returns"] or {}
        rows.append(
            [task, f"`{Path(d['path']).name}` ({d['recipe']})", f"{d['episodes']:,}",
             f"{d['transitions']:,}", f"{ref.get('random', math.nan):.1f}",
             f"{ref.get('expert', math.nan):.1f}"]
        )  # fmt: skip
    return table(["task", "file", "episodes", "transitions", "R_rand", "R_exp"], rows)


def _settings_table(summary: Mapping[str, Any], quick: bool) -> str:
    rows = []
    for task in summary:
        c = task_config(task, quick)
        hidden = "×".join(str(h) for h in c.dynamics.hidden)
        rows.append(
            [task, c.penalty, f"{c.lam:g}", c.rollout_length, c.epochs,
             f"{c.rollout_batch_size:,}", f"{c.real_ratio:g}", c.starts,
             f"{c.dynamics.members} × {hidden}"]
        )  # fmt: skip
    header = ["task", "penalty", "λ", "h", "epochs", "rollouts/epoch", "real ratio", "starts",
              "model (N × hidden)"]  # fmt: skip
    return table(header, rows)
