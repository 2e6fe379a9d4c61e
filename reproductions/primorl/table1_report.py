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
    INITIAL_STARTS,
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
from reproductions.templates import beside, table

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
TEXT = beside(__file__, "table1_report.md.tmpl")
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
    earlier: Mapping[str, int] | None = None,
) -> Path:
    """report.md, claims.json and plots/ from the sweep's results. `data`: the dataset of each
    task that ran (a bare path: Pendulum's); `missing`: why each other task did not run (a
    task in neither is "not run"); `earlier`: per task, how many of its rows in `rows` are
    earlier runs' (the committed results table, `table1_state.merge`). A task that did not run
    but has earlier rows gets its section from them, saying so."""
    datasets = {"pendulum": data} if isinstance(data, Path) else dict(data)
    missing = dict(missing or {})
    earlier = {t: n for t, n in (earlier or {}).items() if n}
    inputs = {  # this invocation's own arguments, so that the report can be rendered again
        "run_here": {t: p.name for t, p in datasets.items()},
        "not_run": dict(missing),
        "earlier_rows": dict(earlier),
    }
    ran = [t for t in TASKS if t in datasets]
    why_not: dict[str, str] = {}  # the tasks shown from earlier rows only, and why not run
    for task in TASKS:
        if task in earlier and task not in datasets:
            why_not[task] = missing.pop(task, "not run")
            names = {
                str(r["data"])
                for r in rows
                if r.get("status") == "ok" and task_of(r) == task and r.get("data")
            }  # an unfinished row names no task: finished rows only
            datasets[task] = Path(Path(min(names)).name if names else f"primorl-{task}.h5")
    datasets = {t: datasets[t] for t in TASKS if t in datasets}
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
    if earlier:
        metrics["earlier_rows"] = {t: earlier[t] for t in TASKS if t in earlier}
    metrics["cost"] = cost
    config = {
        "reproduction": "primorl-table1",
        "data": datasets["pendulum"].name if "pendulum" in datasets else None,
        "datasets": {t: p.name for t, p in datasets.items()},
        **dataclasses.asdict(scale),
        "dmc_seeds": DMC_SEEDS,
        "inputs": inputs,
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
        Earlier(ran, earlier, why_not),
    )
    return shared.write_outputs(out, found, config, metrics, report)


@dataclasses.dataclass(frozen=True)
class Earlier:
    """What of the report is earlier runs': the tasks this invocation ran, per task the
    number of its rows from earlier runs, and why each task shown from them alone did not
    run."""

    ran: Sequence[str] = ()
    rows: Mapping[str, int] = dataclasses.field(default_factory=dict)
    why_not: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def note(self, task: str) -> str:
        """The line of a task's section saying which of its numbers are earlier runs'."""
        n = self.rows.get(task, 0)
        if not n:
            return ""
        if task in self.why_not:
            why, label = self.why_not[task], TASK_LABELS[task]
            return TEXT.fill("earlier_all", n=n, why=why, label=label, task=task) + "\n"
        return TEXT.fill("earlier_some", n=n, are="is" if n == 1 else "are") + "\n"


def _plot_path(task: str) -> str:
    """A task's learning-curve plot (Pendulum's is the report's first, `PLOT`)."""
    return PLOT if task == "pendulum" else f"plots/returns-{task}.png"


def _public(stats: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if k != "curves"}


def _add_run_facts(summary: dict[str, dict[str, Any]], rows: Sequence[Mapping[str, Any]]) -> None:
    """Each row's z (from its cells' privacy.json: public) and its cells' run times."""
    for name, s in summary.items():
        cells = [r for r in rows if r.get("status") == "ok" and row_of(r) == name]
        zs = {_z(r) for r in cells} - {None}
        s["noise_multiplier"] = zs.pop() if len(zs) == 1 else None
        s["minutes"] = [float(r.get("seconds") or 0.0) / 60 for r in cells]
        pairs = [r for r in cells if r.get(INITIAL_STARTS) not in (None, "")]
        if pairs:  # the same release's policy stage with the simulator's initial starts
            s["initial_starts"] = [
                [int(r["seed"]), float(r[INITIAL_STARTS]), float(r["return_mean"])] for r in pairs
            ]


def _z(row: Mapping[str, Any]) -> float | None:
    """A row's z: its cell's privacy.json, else the results table's (an earlier run's row)."""
    z = shared.noise_multiplier(row.get("dir"))
    return z if z is not None else _number(row.get("noise_multiplier"))


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


_SHAPES = {
    "pendulum": ("3 × 64×64", "30 × 200"),
    "balance": ("5 × 128×128", "30 × 1000"),
    "swingup": ("5 × 128×128", "30 × 1000"),
    "halfcheetah": ("7 × 200×200×200×200", "20 × 1000 (q = 1e-2, K = 2000)"),
}  # (members × hidden, sampled trajectories × steps) per task


def _cost_text(cost: Mapping[str, Any], missing: Mapping[str, str]) -> str:
    """The report's "What did not fit" section."""
    if not cost:
        return TEXT.fill("cost", body=TEXT.fill("cost_unmeasured"))
    pr = cost["pendulum_dp_seconds_per_round"]
    tasks = cost["tasks"]
    unbuilt = [t for t in ("balance", "swingup") if "not built" in missing.get(t, "")]
    builds = " and ".join(TEXT.fill("build", task=t, minutes=BUILD_MINUTES[t]) for t in unbuilt)
    cheetah = tasks.get("halfcheetah")
    halfcheetah = ""
    if cheetah:
        per_k = cheetah["dp_stage_hours_per_1000_rounds"]
        halfcheetah = TEXT.fill("halfcheetah", per_k=f"{per_k:.1f}", t5000=f"{5 * per_k:.0f}")
    body = TEXT.fill(
        "cost_measured",
        load=f"{ROUND_LOAD:.1f}",
        cells=pr["cells"],
        median=f"{pr['median']:.3f}",
        min=f"{pr['min']:.3f}",
        max=f"{pr['max']:.3f}",
        policy_minutes=f"{cost['pendulum_policy_stage_seconds_median'] / 60:.1f}",
        cost_table=_cost_table(tasks),
        not_built=TEXT.fill("not_built", builds=builds) if unbuilt else "",
        halfcheetah=halfcheetah,
    )
    return TEXT.fill("cost", body=body)


def _cost_table(tasks: Mapping[str, Mapping[str, Any]]) -> str:
    """Per task: its model and round, the round's cost against Pendulum's, T, the DP stage
    of a run and the table's core-hours."""
    header = ["task", "model (members × hidden)", "sampled trajectories × steps",
              "round vs Pendulum", "s/round (benchmark; from Pendulum's cells)", "rounds T",
              "DP stage / run", "runs (PRIMORL + MOPO, 3 seeds)", "core-hours"]  # fmt: skip
    rows = []
    for task, e in tasks.items():
        model, clients = _SHAPES[task]
        s_round = f"{e['benchmark_seconds_per_round']:.3f}; {e['seconds_per_round']:.3f}"
        if e["rounds"]:
            stage, rounds = f"{e['dp_stage_hours']:.1f} h", f"{e['rounds']:,}"
        else:
            stage = f"{e['dp_stage_hours_per_1000_rounds']:.2f} h per 1000 rounds"
            rounds = "not reported"
        runs = hours = "—"
        if "table_runs" in e:
            runs = f"{e['table_runs']['primorl']} + {e['table_runs']['mopo']}"
            hours = f"≈ {e['table_core_hours']:.0f}"
        label = TASK_LABELS.get(task, "HalfCheetah (Table 11)")
        ratio = f"{e['ratio_to_pendulum']:.1f}×"
        rows.append([label, model, clients, ratio, s_round, rounds, stage, runs, hours])
    return table(header, rows)


# --------------------------------------------------------------------------------------------
# the markdown
# --------------------------------------------------------------------------------------------


def _run_time_notes(summary: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The time of one HIGH run end to end and what the PLD row buys ("" each when unknown)."""
    notes = {"high_run": "", "pld_row": ""}
    minutes = summary.get("high", {}).get("minutes") or []
    if minutes:
        notes["high_run"] = TEXT.fill(
            "high_run",
            low=f"{min(minutes):.1f}",
            high=f"{max(minutes):.1f}",
            median=f"{sorted(minutes)[len(minutes) // 2]:.1f}",
        )
    pld, high = summary.get("high-pld"), summary.get("high")
    if pld and high and pld.get("noise_multiplier") and high.get("noise_multiplier"):
        notes["pld_row"] = TEXT.fill(
            "pld_row",
            z=f"{pld['noise_multiplier']:.3f}",
            epsilon=f"{pld['epsilon']:.2f}",
            paper_z=f"{high['noise_multiplier']:.2f}",
            paper_epsilon=f"{high['epsilon']:.2f}",
            less=f"{high['noise_multiplier'] / pld['noise_multiplier']:.2f}",
            seeds=pld["seeds"],
        )
    return notes


def _plot(task: str, summary: Mapping[str, Mapping[str, Any]], path: Path) -> None:
    """The task's learning curves; a plot already there is kept when no row has a curve (rows
    kept from an earlier run's results.csv of before it stored curves)."""
    series = [shared.curve_series(LABELS[name], s["curves"]) for name, s in summary.items()]
    if summary and path.is_file() and all(s is None for s in series):
        return
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


def _rows_table(
    task: str, summary: Mapping[str, Mapping[str, Any]], absent: str = "not run"
) -> str:
    """A task's rows beside the paper's (every paper row; `absent` where we have none)."""
    raw = "raw Pendulum-v1 return" if task == "pendulum" else "raw dm_control return"
    header = ["method", "paper ε", "our ε (PLD)", "paper return (% of MOPO)",
              "our return ± 95% CI", f"{raw} ± 95% CI", "normalised", "% of our MOPO",
              "per seed"]  # fmt: skip
    rows = []
    for name in ROWS:
        if name not in PAPER[task]:
            continue
        p_eps, p_ret, p_share = PAPER[task][name]
        paper = f"{p_ret} ({p_share}%)"
        s = summary.get(name)
        if s is None:
            ours = _paper_eps_ours(task, name)
            rows.append([LABELS[name], _eps(p_eps), ours, paper, absent, "—", "—", "—", "—"])
            continue
        share, per_seed = shared.share_texts(s)
        rows.append(
            [LABELS[name], _eps(p_eps), _eps(s["epsilon"]), paper, shared.return_text(s),
             shared.raw_text(s), shared.num_text(s["normalised"]), share, per_seed]
        )  # fmt: skip
    return table(header, rows)


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
    earlier: str = "",
) -> str:
    """The section of a task that ran (or has earlier runs' rows): its table, verdicts and
    notes; `earlier`: the line saying which of its numbers are earlier runs'."""
    from privrl.primorl.primorl import PRESETS

    p = PRESETS[task]
    label = TASK_LABELS[task]
    planned = len(task_entries(task, data, scale))
    done = sum(int(s.get("seeds") or 0) for s in summary.values())
    progress = ""
    if done < planned:
        have = "has" if done == 1 else "have"
        progress = TEXT.fill("progress", done=done, planned=planned, have=have) + "\n"
    ceiling = TEXT.fill(
        "ceiling", ceiling=f"{CEILING:g}", loss=f"{100 - PAPER[task]['high'][2]:.1f}"
    )
    verdicts = shared.verdict_section(
        summary, found, ceiling=CEILING, ceiling_note=ceiling, learned=MOPO_LEARNED
    )
    # the verdicts are a subsection of the task's
    verdicts = [f"### Verdicts ({label})" if v == "## Verdicts" else v for v in verdicts]
    has_plot = summary or task == "pendulum"  # a task with no finished run has no plot yet
    if task == "pendulum":
        notes = TEXT.fill("pendulum_notes", _run_time_notes(summary), label=label)
    else:
        notes = TEXT.fill("cartpole_notes", label=label, starts=_starts_table(summary))
    text = TEXT.fill(
        "task",
        label=label,
        data=data.name,
        seeds=len(task_seeds(task, scale)),
        low=p.low,
        high=p.high,
        q=f"{p.sampling_rate:g}",
        rounds=f"{p.max_rounds:,}",
        progress=progress,
        earlier=earlier,
        rows_table=_rows_table(task, summary, "pending" if done < planned else "not run"),
        verdicts="\n".join(verdicts),
        plot=f"\n![returns]({_plot_path(task)})" if has_plot else "",
        notes=notes,
    )
    return text.rstrip("\n")


def _starts_table(summary: Mapping[str, Mapping[str, Any]]) -> str:
    """The rows whose release also trained a policy from the simulator's initial states: both
    real-task returns, seed by seed (empty when there is none)."""
    lines = [
        f"| {LABELS[name]} | {seed} | {initial:.1f} | {public:.1f} |"
        for name in ROWS
        for seed, initial, public in (summary.get(name) or {}).get("initial_starts", [])
    ]
    if not lines:
        return ""
    head = "| row | seed | initial starts | public-split starts |\n|---|---|---|---|"
    return TEXT.fill("starts_table", table="\n".join([head, *lines]))


def _absent_section(task: str, why: str, cost: Mapping[str, Any]) -> str:
    """The section of a task that did not run: why, and what its table would cost."""
    from privrl.primorl.primorl import PRESETS

    p = PRESETS[task]
    e = (cost.get("tasks") or {}).get(task)
    spent = ""
    if e:
        spent = TEXT.fill(
            "absent_cost",
            ratio=f"{e['ratio_to_pendulum']:.1f}",
            seconds=f"{e['seconds_per_round']:.2f}",
            hours=f"{e['dp_stage_hours']:.1f}",
            core_hours=f"{e['table_core_hours']:.0f}",
            primorl=e["table_runs"]["primorl"],
            mopo=e["table_runs"]["mopo"],
        )
    targets = ", ".join(
        f"{LABELS[r]} ≥ {share_target(task, r):g}% (paper {PAPER[task][r][2]:g}%)"
        for r in VARIANT_ROWS
    )
    return TEXT.fill(
        "absent",
        label=TASK_LABELS[task],
        why=why,
        task=task,
        build_minutes=BUILD_MINUTES[task],
        low=p.low,
        high=p.high,
        q=f"{p.sampling_rate:g}",
        rounds=f"{p.max_rounds:,}",
        seeds=DMC_SEEDS,
        cost=spent,
        rows_table=_rows_table(task, {}),
        targets=targets,
    )


def _markdown(
    report: shared.Report,
    datasets: Mapping[str, Path],
    missing: Mapping[str, str],
    cost: Mapping[str, Any],
    earlier: Earlier | None = None,
) -> str:
    summaries, found, scale = report.summary, report.found, report.scale
    earlier = earlier or Earlier([t for t in TASKS if t in datasets])
    ran = [TASK_LABELS[t] for t in earlier.ran]
    sections = []
    for task in TASKS:
        if task in datasets:
            mine = [c for c in found if f"({TASK_LABELS[task]}," in c["claim"]]
            sections.append(
                _task_section(
                    task, summaries[task], mine, scale, datasets[task], earlier.note(task)
                )
            )
        else:
            sections.append(_absent_section(task, missing.get(task, "not run"), cost))
    fields = {
        "seeds": scale.seeds,
        "dmc_seeds": DMC_SEEDS,
        "epochs": scale.epochs,
        "steps": scale.settings().get("steps_per_epoch", 1000),
        "final_epochs": min(10, scale.epochs),
        "ran": (", ".join(ran) or "none") + _from_earlier(earlier),
        "cell_minutes": f"{report.cell_seconds / 60:.1f}",
        "wall_minutes": f"{report.wall / 60:.1f}",
        "quick": TEXT.fill("quick", epochs=scale.epochs) + "\n" if scale.quick else "",
        "sections": "\n\n".join(sections),
        "cost": _cost_text(cost, missing),
        "raw_scale": "\n".join(shared.raw_scale_notes()).rstrip("\n"),
    }
    return TEXT.fill("report", fields) + "\n"


def _from_earlier(earlier: Earlier) -> str:
    """The tasks of the report from earlier runs alone ("" when none)."""
    tasks = [TASK_LABELS[t] for t in TASKS if t in earlier.why_not]
    if not tasks:
        return ""
    return TEXT.fill("earlier_ran", tasks=" and ".join(tasks))


_eps = shared.eps_text
