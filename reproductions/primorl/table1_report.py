"""The report of ``primorl-table1`` (`reproductions.primorl.table1` runs the sweep): per
task, the rows beside the paper's, the claims, learning-curve plots, and what did not fit on this
machine, stated from a measurement — the ratio of one DP-FedAvg round at each task's sizes to
Pendulum's (``benchmarks/bench_primorl_step.py --mode tasks``, `ROUND_RATIO`) times Pendulum's DP
stage measured in its finished cells (run time minus ``policy_stage_seconds``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from privrl.runs.plots import draw
from privrl.runs.system import PlotSpec
from reproductions.primorl import sweeps as shared
from reproductions.primorl.sweeps import Scale
from reproductions.primorl.table1 import (
    CEILING,
    DMC_SEEDS,
    LABELS,
    MOPO_LEARNED,
    PAPER,
    PLD_EPSILON,
    PLOT,
    ROWS,
    TASK_LABELS,
    TASKS,
    VARIANT_ROWS,
    claims,
    row_of,
    share_target,
    summarise,
    task_entries,
    task_of,
    task_seeds,
)

__all__ = ["ROUND_RATIO", "run_costs", "write_report"]

# One DP-FedAvg round at each task's sizes relative to Pendulum's, and its seconds at that
# run's load: `python benchmarks/bench_primorl_step.py --mode tasks` (one thread, rounds timed
# interleaved; benchmarks/results/bench_primorl_step_tasks.json). The ratios are robust to the
# machine's load, the seconds are not.
ROUND_RATIO = {
    "pendulum": 1.00,
    "balance": 18.52,
    "swingup": 17.44,
    "halfcheetah": 123.72,
}
ROUND_SECONDS = {
    "pendulum": 0.122,
    "balance": 2.255,
    "swingup": 2.123,
    "halfcheetah": 15.058,
}
ROUND_LOAD = 2.9  # the 1-minute load average when the benchmark started

PENDULUM_EPOCHS = 20  # SAC epochs of the Pendulum cells (the scale's)
# Full runs of MOPO on the cartpoles (minutes per run, docs/reproductions/mopo-table1/report.md).
MOPO_MINUTES = {"balance": 13.1, "swingup": 23.8}
# The cartpole datasets: how to build them and how long (docs/primorl-data.md, idle core;
# × 2–3 on a busy machine).
BUILD_MINUTES = {"balance": 15, "swingup": 35, "halfcheetah": 75}


def write_report(
    out: Path,
    rows: Sequence[Mapping[str, Any]],
    scale: Scale,
    *,
    data: Mapping[str, Path] | Path,
    wall: float,
    missing: Mapping[str, str] | None = None,
) -> Path:
    """report.md, claims.json and plots/ from the sweep's results. `data`: the dataset of each
    task that ran (a bare path: Pendulum's); `missing`: why each other task did not run (a
    task in neither is "not run")."""
    datasets = {"pendulum": data} if isinstance(data, Path) else dict(data)
    missing = dict(missing or {})
    for task in TASKS:
        if task not in datasets and task not in missing:
            missing[task] = "not run"
    summaries = {t: summarise(rows, t) for t in TASKS}
    for task, summary in summaries.items():
        _add_run_facts(summary, [r for r in rows if task_of(r) == task])
    (out / "plots").mkdir(parents=True, exist_ok=True)
    for task in TASKS:
        if task == "pendulum" or summaries[task]:
            _plot(task, summaries[task], out / _plot_path(task))
    found = [
        c
        for t in TASKS
        for c in claims(
            summaries[t], quick=scale.quick or t in missing, task=t, pending=t in datasets
        )
    ]
    cost = run_costs(rows)
    metrics: dict[str, Any] = {
        name: _public(s) for name, s in summaries["pendulum"].items()
    }  # Pendulum's rows at the top, as before the other tasks
    for task in TASKS[1:]:
        if task in datasets:
            metrics[task] = {name: _public(s) for name, s in summaries[task].items()}
    metrics["not_run"] = {t: missing[t] for t in TASKS if t in missing}
    metrics["cost"] = cost
    config = {
        "reproduction": "primorl-table1",
        "data": datasets["pendulum"].name if "pendulum" in datasets else None,
        "datasets": {t: p.name for t, p in datasets.items()},
        **dataclasses.asdict(scale),
        "dmc_seeds": DMC_SEEDS,
    }
    report = _markdown(
        shared.Report(
            summaries,
            found,
            scale,
            datasets.get("pendulum", Path("—")),
            wall,
            shared.cell_seconds(rows),
        ),
        datasets,
        missing,
        cost,
    )
    return shared.write_outputs(out, found, config, metrics, report)


def _plot_path(task: str) -> str:
    """A task's learning-curve plot (Pendulum's is the report's first, `PLOT`)."""
    return PLOT if task == "pendulum" else f"plots/returns-{task}.png"


def _public(stats: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if k != "curves"}


def _add_run_facts(summary: dict[str, dict[str, Any]], rows: Sequence[Mapping[str, Any]]) -> None:
    """Each row's z (from its cells' privacy.json: public) and its cells' run times."""
    for name, s in summary.items():
        cells = [r for r in rows if r.get("status") == "ok" and row_of(r) == name]
        zs = {shared.noise_multiplier(r.get("dir")) for r in cells} - {None}
        s["noise_multiplier"] = zs.pop() if len(zs) == 1 else None
        s["minutes"] = [float(r.get("seconds") or 0.0) / 60 for r in cells]


# --------------------------------------------------------------------------------------------
# what does not fit: measured cost per task
# --------------------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def dp_stage_seconds_per_round(rows: Sequence[Mapping[str, Any]]) -> list[float]:
    """Pendulum's DP stage per round in each finished PRIMORL cell: (the cell's run time −
    its policy stage) / its rounds (the stage includes loading the data and the plan)."""
    out = []
    for r in rows:
        if r.get("status") != "ok" or r.get("system") != "primorl" or task_of(r) != "pendulum":
            continue
        total, policy = _number(r.get("seconds")), _number(r.get("policy_stage_seconds"))
        rounds = _number(r.get("rounds"))
        if total is None or policy is None or not rounds:
            continue
        out.append((total - policy) / rounds)
    return out


def run_costs(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What one run of each task costs on one thread, from the measured ratio of its DP round
    to Pendulum's (`ROUND_RATIO`) and Pendulum's DP stage and policy stage in its finished
    cells (medians; their range is the shared machine's load). Empty without Pendulum cells."""
    per_round = dp_stage_seconds_per_round(rows)
    policy = [
        p
        for r in rows
        if r.get("status") == "ok" and r.get("system") == "primorl" and task_of(r) == "pendulum"
        if (p := _number(r.get("policy_stage_seconds"))) is not None
    ]
    if not per_round or not policy:
        return {}
    from privrl.primorl.primorl import PRESETS

    pendulum = statistics.median(per_round)
    policy_s = statistics.median(policy)
    tasks: dict[str, Any] = {}
    for task, ratio in ROUND_RATIO.items():
        rounds = PRESETS[task].max_rounds
        s_round = ratio * pendulum
        entry: dict[str, Any] = {
            "ratio_to_pendulum": ratio,
            "seconds_per_round": s_round,
            "benchmark_seconds_per_round": ROUND_SECONDS[task],
            "rounds": rounds,
            "sampling_rate": PRESETS[task].sampling_rate,
        }
        if rounds:
            # the policy stage: Pendulum's 20 epochs' median, scaled to the task's epochs
            epochs = PENDULUM_EPOCHS if task == "pendulum" else PRESETS[task].epochs
            entry["policy_stage_hours"] = policy_s * epochs / PENDULUM_EPOCHS / 3600
            entry["dp_stage_hours"] = s_round * rounds / 3600
            entry["run_hours"] = entry["dp_stage_hours"] + entry["policy_stage_hours"]
        else:
            entry["dp_stage_hours_per_1000_rounds"] = s_round * 1000 / 3600
        if task in MOPO_MINUTES:
            primorl_runs, mopo_runs = len(VARIANT_ROWS) * DMC_SEEDS, DMC_SEEDS
            entry["table_runs"] = {"primorl": primorl_runs, "mopo": mopo_runs}
            entry["table_core_hours"] = (
                primorl_runs * entry["run_hours"] + mopo_runs * MOPO_MINUTES[task] / 60
            )
        tasks[task] = entry
    return {
        "pendulum_dp_seconds_per_round": {
            "median": pendulum,
            "min": min(per_round),
            "max": max(per_round),
            "cells": len(per_round),
        },
        "pendulum_policy_stage_seconds_median": policy_s,
        "tasks": tasks,
    }


def _cost_lines(cost: Mapping[str, Any], missing: Mapping[str, str]) -> list[str]:
    """The report's "What did not fit" section."""
    lines = ["## What did not fit", ""]
    if not cost:
        return [*lines, "No finished Pendulum PRIMORL cell to measure the DP stage from.", ""]
    pr = cost["pendulum_dp_seconds_per_round"]
    tasks = cost["tasks"]
    lines += [
        "One DP-FedAvg round at each task's sizes, timed side by side on one thread "
        "(`python benchmarks/bench_primorl_step.py --mode tasks`, "
        "benchmarks/results/bench_primorl_step_tasks.json; the ratio to Pendulum's round is "
        "robust to the machine's load, the seconds are not — that run's load average was "
        f"{ROUND_LOAD:.1f} on 2 cores). A run's DP stage is the ratio × Pendulum's DP stage "
        f"per round measured in its {pr['cells']} finished PRIMORL cells (run time minus "
        f"`policy_stage_seconds`, over its rounds: median {pr['median']:.3f} s, "
        f"{pr['min']:.3f}–{pr['max']:.3f} s with the machine's load) × the task's T. The "
        "policy stage is Pendulum's median for its 20 SAC epochs of 1000 updates "
        f"({cost['pendulum_policy_stage_seconds_median'] / 60:.1f} min) scaled to the task's "
        "epochs (Balance 40, Swingup 80; the cartpole model's rollouts cost somewhat more, "
        "so this is a lower estimate); a MOPO run is "
        "mopo-table1's measured time.",
        "",
        "| task | model (members × hidden) | sampled trajectories × steps | round vs Pendulum "
        "| s/round (benchmark; from Pendulum's cells) | rounds T | DP stage / run | runs "
        "(PRIMORL + MOPO, 3 seeds) | core-hours |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    shapes = {
        "pendulum": ("3 × 64×64", "30 × 200"),
        "balance": ("5 × 128×128", "30 × 1000"),
        "swingup": ("5 × 128×128", "30 × 1000"),
        "halfcheetah": ("7 × 200×200×200×200", "20 × 1000 (q = 1e-2, K = 2000)"),
    }
    for task, e in tasks.items():
        model, clients = shapes[task]
        ratio = e["ratio_to_pendulum"]
        s_round = f"{e['benchmark_seconds_per_round']:.3f}; {e['seconds_per_round']:.3f}"
        if e["rounds"]:
            stage = f"{e['dp_stage_hours']:.1f} h"
            rounds = f"{e['rounds']:,}"
        else:
            stage = f"{e['dp_stage_hours_per_1000_rounds']:.2f} h per 1000 rounds"
            rounds = "not reported"
        if "table_runs" in e:
            runs = f"{e['table_runs']['primorl']} + {e['table_runs']['mopo']}"
            hours = f"≈ {e['table_core_hours']:.0f}"
        else:
            runs = hours = "—"
        label = TASK_LABELS.get(task, "HalfCheetah (Table 11)")
        lines.append(
            f"| {label} | {model} | {clients} | {ratio:.1f}× | {s_round} | {rounds} | "
            f"{stage} | {runs} | {hours} |"
        )
    unbuilt = [t for t in ("balance", "swingup") if "not built" in missing.get(t, "")]
    builds = " and ".join(
        f"`privrl data collect --recipe primorl-{t}` (≈ {BUILD_MINUTES[t]} min on an idle core)"
        for t in unbuilt
    )
    lines += [""]
    if unbuilt:
        lines.append(
            f"- Not built on this machine: {builds}; × 2–3 on a busy machine "
            "(docs/primorl-data.md). With a dataset present, `privrl reproduce primorl-table1` "
            "runs its task's cells and fills its section; the finished cells are skipped."
        )
    lines += [
        "- The cells are independent runs: on 2 shared cores a cartpole table is days of "
        "wall time. `privrl reproduce primorl-table1 --backend ray` runs them on a local Ray "
        "instance, and `privrl reproduce primorl-table1 --backend ray --address HOST:PORT` "
        "spreads them over a Ray cluster's machines (docs/sweeps.md); a rerun skips the "
        "finished cells and writes the report.",
    ]
    cheetah = tasks.get("halfcheetah")
    if cheetah:
        per_k = cheetah["dp_stage_hours_per_1000_rounds"]
        lines.append(
            "- HalfCheetah (Table 11): the paper does not report its T and the preset has "
            "none (`--steps` is required); at q = 1e-2 (20 sampled trajectories of 1000 steps "
            f"per round) its DP stage costs ≈ {per_k:.1f} h per 1000 rounds on one thread, "
            f"e.g. ≈ {5 * per_k:.0f} h for T = 5000, before its policy stage (200 SAC epochs "
            "in its preset)."
        )
    return [*lines, ""]


# --------------------------------------------------------------------------------------------
# the markdown
# --------------------------------------------------------------------------------------------


def _run_time_notes(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The time of one HIGH run end to end and what the PLD row buys."""
    lines = []
    minutes = summary.get("high", {}).get("minutes") or []
    if minutes:
        lines.append(
            f"- One HIGH run end to end (dataset given: 7000 DP-FedAvg rounds, then the policy "
            f"stage) took {min(minutes):.1f}–{max(minutes):.1f} min of wall time on one thread "
            f"(median {sorted(minutes)[len(minutes) // 2]:.1f}; the spread is the shared "
            "machine's load); the target is ≤ 30 min."
        )
    pld, high = summary.get("high-pld"), summary.get("high")
    if pld and high and pld.get("noise_multiplier") and high.get("noise_multiplier"):
        lines.append(
            f"- HIGH at the paper's ε, calibrated under PLD: z = {pld['noise_multiplier']:.3f} "
            f"for ε = {pld['epsilon']:.2f} against the paper's z = {high['noise_multiplier']:.2f} "
            f"(ε = {high['epsilon']:.2f} under PLD): "
            f"{high['noise_multiplier'] / pld['noise_multiplier']:.2f}× less noise for the "
            "guarantee the paper states. Its verdict is not in the gallery (no paper claim); "
            f"it ran on {pld['seeds']} seeds."
        )
    return lines


def _plot(task: str, summary: Mapping[str, Mapping[str, Any]], path: Path) -> None:
    series = [shared.curve_series(LABELS[name], s["curves"]) for name, s in summary.items()]
    draw(
        PlotSpec(
            "returns",
            f"PRIMORL Table 1, {TASK_LABELS[task]}: return in the real simulator",
            "SAC epoch",
            "return (10 episodes)",
            [s for s in series if s is not None],
        ),
        path,
    )


def _table_lines(
    task: str, summary: Mapping[str, Mapping[str, Any]], absent: str = "not run"
) -> list[str]:
    """A task's rows beside the paper's (every paper row; `absent` where we have none)."""
    raw = "raw Pendulum-v1 return" if task == "pendulum" else "raw dm_control return"
    lines = [
        f"| method | paper ε | our ε (PLD) | paper return (% of MOPO) | our return ± 95% CI | "
        f"{raw} ± 95% CI | normalised | % of our MOPO | per seed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ROWS:
        if name not in PAPER[task]:
            continue
        p_eps, p_ret, p_share = PAPER[task][name]
        s = summary.get(name)
        if s is None:
            lines.append(
                f"| {LABELS[name]} | {_eps(p_eps)} | {_paper_eps_ours(task, name)} | "
                f"{p_ret} ({p_share}%) | {absent} | — | — | — | — |"
            )
            continue
        share, per_seed = shared.share_texts(s)
        lines.append(
            f"| {LABELS[name]} | {_eps(p_eps)} | {_eps(s['epsilon'])} | {p_ret} ({p_share}%) | "
            f"{shared.return_text(s)} | {shared.raw_text(s)} | "
            f"{shared.num_text(s['normalised'])} | {share} | {per_seed} |"
        )
    return lines


def _paper_eps_ours(task: str, row: str) -> str:
    """Our PLD ε for a row not run (`PLD_EPSILON`: public, from the preset's z, q and T)."""
    if row in ("mopo", "no-privacy"):
        return "∞"
    eps = PLD_EPSILON.get((task, row))
    return "—" if eps is None else f"{eps:.2f}"


def _task_section(
    task: str,
    summary: Mapping[str, Mapping[str, Any]],
    found: Sequence[Mapping[str, str]],
    scale: Scale,
    data: Path,
) -> list[str]:
    """The section of a task that ran: its table, verdicts and notes."""
    from privrl.primorl.primorl import PRESETS

    p = PRESETS[task]
    label = TASK_LABELS[task]
    seeds = len(task_seeds(task, scale))
    lines = [
        f"## {label}",
        "",
        f"On the recipe dataset `{data.name}`, {seeds} seeds; DP-FedAvg with the paper's z "
        f"(LOW {p.low}, HIGH {p.high}), q = {p.sampling_rate:g} and T = {p.max_rounds:,} "
        "rounds (the task preset).",
        "",
    ]
    planned = len(task_entries(task, data, scale))
    done = sum(int(s.get("seeds") or 0) for s in summary.values())
    if done < planned:
        lines += [
            f"**{done} of its {planned} runs {'has' if done == 1 else 'have'} finished**; the "
            "others are pending. "
            "`privrl reproduce primorl-table1` continues them, seed by seed (a run cut off "
            "resumes from its last checkpoint), and rewrites this section. Rows and verdicts "
            "below are over the finished runs only.",
            "",
        ]
    lines += _table_lines(task, summary, "pending" if done < planned else "not run")
    verdicts = shared.verdict_section(
        summary,
        found,
        ceiling=CEILING,
        ceiling_note=f"Every row's normalised score is ≥ {CEILING:g}: all reach the task's "
        "ceiling (the dataset's expert reference return), so at these budgets this "
        "task shows no cost of privacy at all — it cannot resolve a loss as small as "
        f"the paper's ({100 - PAPER[task]['high'][2]:.1f}% for HIGH). Harder tasks or "
        "smaller ε are where the rows can differ.",
        learned=MOPO_LEARNED,
    )
    # the verdicts are a subsection of the task's
    lines += [f"### Verdicts ({label})" if v == "## Verdicts" else v for v in verdicts]
    if summary or task == "pendulum":  # a task with no finished run has no plot yet
        lines += ["", f"![returns]({_plot_path(task)})"]
    lines += [""]
    if task == "pendulum":
        lines += [
            f"### Notes ({label})",
            "",
            "- Our ε is the PLD accountant's for the row's z, q = 1e-3 and T = 7000 rounds, "
            "trajectory-level add/remove neighbours; the paper's ε is its own accountant's.",
            "- Model rollouts start from the simulator's initial states (chained) and are held "
            "inside the simulator's public observation box and reward range (docs/primorl.md).",
            "- The paper's Pendulum returns are on its own reward scale; compare the share of "
            "MOPO's return.",
            *_run_time_notes(summary),
            "",
        ]
    return lines


def _absent_section(task: str, why: str, cost: Mapping[str, Any]) -> list[str]:
    """The section of a task that did not run: why, and what its table would cost."""
    from privrl.primorl.primorl import PRESETS

    p = PRESETS[task]
    label = TASK_LABELS[task]
    lines = [
        f"## {label}: not run",
        "",
        f"Not run: {why}. Build it with `privrl data collect --recipe primorl-{task}` "
        f"(≈ {BUILD_MINUTES[task]} min on an idle core, × 2–3 on a busy machine; "
        "docs/primorl-data.md). Its cells would be MOPO and NO PRIVACY / LOW "
        f"(z = {p.low}) / HIGH (z = {p.high}) at q = {p.sampling_rate:g}, "
        f"T = {p.max_rounds:,} rounds, on {DMC_SEEDS} seeds.",
    ]
    e = (cost.get("tasks") or {}).get(task)
    if e:
        lines.append(
            f"One DP round at its sizes costs {e['ratio_to_pendulum']:.1f}× Pendulum's "
            f"(measured side by side), ≈ {e['seconds_per_round']:.2f} s at the load of "
            f"Pendulum's cells: a run's DP stage is ≈ {e['dp_stage_hours']:.1f} h on one "
            f"thread, ≈ {e['table_core_hours']:.0f} core-hours for the table "
            f"({e['table_runs']['primorl']} PRIMORL + {e['table_runs']['mopo']} MOPO runs; "
            "What did not fit, below)."
        )
    lines += [
        "",
        *_table_lines(task, {}),
        "",
        "Its claims are inconclusive (not run). The paper's shares set the targets "
        "(≥ 90%, or the paper's own share rounded down where it is lower): "
        + ", ".join(
            f"{LABELS[r]} ≥ {share_target(task, r):g}% (paper {PAPER[task][r][2]:g}%)"
            for r in VARIANT_ROWS
        )
        + ".",
        "",
    ]
    return lines


def _markdown(
    report: shared.Report,
    datasets: Mapping[str, Path],
    missing: Mapping[str, str],
    cost: Mapping[str, Any],
) -> str:
    summaries, found, scale = report.summary, report.found, report.scale
    ran = [TASK_LABELS[t] for t in TASKS if t in datasets]
    lines = [
        "# PRIMORL Table 1 (Pendulum, Balance, Swingup)",
        "",
        f"Regenerated by `privrl reproduce primorl-table1 --seeds {scale.seeds}`: a sweep of "
        "`privrl train mopo` and "
        "`privrl train primorl --variant no-privacy|low|high` runs on each task's recipe "
        f"dataset, {scale.seeds} seeds on Pendulum (at most {DMC_SEEDS} on the cartpoles), "
        f"{scale.epochs} SAC epochs of "
        f"{scale.settings().get('steps_per_epoch', 1000)} updates on Pendulum (on the "
        "cartpoles their presets' 40 and 80, as in mopo-table1; the return is the mean of "
        f"the last {min(10, scale.epochs)} epochs' evaluations, 10 episodes each); "
        "DP-FedAvg with the paper's z, q and T for the task and row (the task preset). "
        f"Run here: {', '.join(ran) or 'none'}. The cells ran for "
        f"{report.cell_seconds / 60:.1f} min in all (one thread each); this invocation took "
        f"{report.wall / 60:.1f} min (finished cells are skipped).",
        "",
        "A row is *close to MOPO* when its share of our MOPO's return is ≥ 90%, or ≥ the "
        "paper's own share for the row rounded down to a whole percent where that is lower "
        "(Balance LOW 83%, HIGH 77%; Swingup HIGH 86%): the paper claims no more than its "
        "share, and the issue's target is HIGH ≥ the paper's % of MOPO on every task.",
        "",
    ]
    if scale.quick:
        lines += [
            "**Quick mode (smoke test)**: tiny dataset, 3 DP-FedAvg rounds, "
            f"{scale.epochs} × 20 SAC steps — the numbers mean nothing.",
            "",
        ]
    for task in TASKS:
        if task in datasets:
            mine = [c for c in found if f"({TASK_LABELS[task]}," in c["claim"]]
            lines += _task_section(task, summaries[task], mine, scale, datasets[task])
        else:
            lines += _absent_section(task, missing.get(task, "not run"), cost)
    lines += _cost_lines(cost, missing)
    lines += shared.raw_scale_notes()
    return "\n".join(lines)


_eps = shared.eps_text
