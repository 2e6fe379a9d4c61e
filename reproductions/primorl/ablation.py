"""Reproduction ``primorl-ablation``: PRIMORL's Table 10 (penalty u_MA vs u_MPD × flat vs
per-layer clipping) at the paper's two z per task, as a sweep.

Cells: for each task whose recipe dataset is present (Pendulum always; cartpole Balance once
`privrl data collect --recipe primorl-balance` has built it — quick mode runs Pendulum only),
`privrl train mopo` (the reference for shares) and `privrl train primorl --variant low|high`
(the paper's z for the task, q = 1e-3, T = 7000, C from the task preset) with `--penalty ma|mpd`
and `--clip-mode flat|per-layer`, over seeds. The task preset's own combination (Pendulum:
MPD + per-layer; Balance: MPD + flat) is given without these flags, so its cells are exactly
those of ``primorl-table1`` and are reused from its finished sweep; the MOPO cells too.

"MA" is MOPO's u_MA(s,a) = max_i ‖σ_i(s,a)‖ (`--penalty ma`); the paper writes ‖Σ_i‖_F, which
`--penalty ma-frobenius` implements (docs/primorl.md). The paper's returns are on its own reward
scale (our Pendulum reward is r' = 1 + r/16.27 ∈ [0, 1]), so the report compares the share of
MOPO's return: the paper's against its MOPO (Table 1), ours against ours.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from privrl.runs.plots import draw
from privrl.runs.sweep import budget_deadline
from privrl.runs.system import PlotSpec, Series
from reproductions.primorl import sweeps as shared
from reproductions.primorl.sweeps import Scale
from reproductions.primorl.table1_report import MOPO_MINUTES, run_costs
from reproductions.templates import beside
from reproductions.templates import table as table_text

__all__ = ["ablation", "claims", "summarise", "sweep_doc", "write_report"]

ID = "primorl-ablation"
TEXT = beside(__file__, "ablation.md.tmpl")
TASKS = ("pendulum", "balance")
TASK_LABELS = {"pendulum": "Pendulum", "balance": "Balance"}
COMBOS = (("ma", "per_layer"), ("mpd", "per_layer"), ("ma", "flat"), ("mpd", "flat"))
COMBO_LABELS = {
    ("ma", "per_layer"): "MA + LC",
    ("mpd", "per_layer"): "MPD + LC",
    ("ma", "flat"): "MA + FC",
    ("mpd", "flat"): "MPD + FC",
}
VARIANTS = ("low", "high")
# Paper, Table 10 (return at the LOW z, at the HIGH z; the paper's reward scale) and Table 1
# (MOPO's return, the reference of the shares).
PAPER: dict[str, dict[tuple[str, str], tuple[float, float]]] = {
    "pendulum": {
        ("ma", "per_layer"): (734.5, 750.1),
        ("mpd", "per_layer"): (817.4, 778.9),
        ("ma", "flat"): (638.9, 612.4),
        ("mpd", "flat"): (757.9, 723.0),
    },
    "balance": {
        ("ma", "per_layer"): (785.4, 749.0),
        ("mpd", "per_layer"): (792.0, 738.5),
        ("ma", "flat"): (819.9, 722.7),
        ("mpd", "flat"): (815.8, 758.2),
    },
}
PAPER_MOPO = {"pendulum": 795.9, "balance": 976.3}
PAPER_Z = {"pendulum": (0.35, 0.52), "balance": (0.25, 0.45)}
CEILING = 95.0  # normalised score at which a row is at the task's ceiling
MOPO_LEARNED = 50.0  # MOPO's normalised score below which shares of it are not evidence


def preset_combo(task: str) -> tuple[str, str]:
    """The task preset's (penalty, clip mode): the paper's choice (Table 8)."""
    from privrl.primorl.primorl import PRESETS

    p = PRESETS[task]
    return p.penalty, p.clip_mode


def cell_entries(task: str, data: Path, scale: Scale) -> list[dict[str, Any]]:
    """The [[cells]] of one task: MOPO, then PRIMORL for each z × combination. The preset's
    combination sets neither flag, and a cartpole's cells its preset's SAC epochs, as
    primorl-table1 does (the same runs as its MOPO and LOW/HIGH cells, with its rollout starts)."""
    from reproductions.primorl.table1 import primorl_base, task_base

    entries: list[dict[str, Any]] = [{"system": "mopo", **task_base(task, data, scale)}]
    preset = preset_combo(task)
    for variant in VARIANTS:
        for penalty, clip in COMBOS:
            entry: dict[str, Any] = {
                "system": "primorl",
                **primorl_base(task, data, scale),
                "variant": variant,
            }
            if penalty != preset[0]:
                entry["penalty"] = penalty
            if clip != preset[1]:
                entry["clip_mode"] = clip
            entries.append(entry)
    return entries


def sweep_doc(
    datasets: Mapping[str, Path], out: Path, scale: Scale, *, backend: str, workers: int | None
) -> dict:
    """The grid: per task, MOPO and the eight PRIMORL cells, × seeds; cells under `out`. The
    per-system settings are primorl-table1's, so identical cells have identical keys."""
    return shared.sweep_doc(
        scale,
        out,
        {"seed": scale.seed_list()},
        primorl={},
        backend=backend,
        workers=workers,
        cells=[e for task, data in datasets.items() for e in cell_entries(task, data, scale)],
    )


def ablation(out: Path, **options: Any) -> Path:
    """`privrl reproduce primorl-ablation`: run (or resume) the sweep, write the report.
    `options`: seeds, seed, quick, backend, workers, epochs (`shared.Request.of`; no `data`:
    each task runs on its recipe dataset)."""
    if "data" in options:
        raise TypeError("ablation() got an unexpected keyword argument 'data'")
    req = shared.Request.of(out, **options)
    scale, out, quick = req.scale, req.out, req.scale.quick
    backend, workers = req.backend, req.workers
    datasets = {"pendulum": req.dataset(ID)}
    missing = {}
    for task in TASKS[1:]:
        path = shared.recipe_path(task, quick=False)
        if not quick and path.is_file():
            datasets[task] = path
        else:
            missing[task] = (
                "quick mode runs Pendulum only"
                if quick
                else f"dataset missing (build it with `privrl data collect --recipe "
                f"primorl-{task}`, then rerun)"
            )
    t0 = time.perf_counter()
    doc = sweep_doc(datasets, shared.sweep_dir(ID, scale), scale, backend=backend, workers=workers)
    rows = shared.run_cells(
        doc,
        out,
        reuse=[shared.sweep_dir("primorl-table1", scale)],
        deadline=budget_deadline(),  # $PRIVRL_REPRO_BUDGET_S: no cell starts after it
    )
    return write_report(
        out, rows, scale, datasets=datasets, missing=missing, wall=time.perf_counter() - t0
    )


# --------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------


def row_key(row: Mapping[str, Any]) -> tuple[str, str] | tuple[str, str, str]:
    """("mopo",) or (variant, penalty, clip mode) of a results-table row (a flag left out is
    the task preset's)."""
    if row["system"] == "mopo":
        return ("mopo", "", "")
    preset = preset_combo(str(row["task"]))
    return (
        str(row["variant"]),
        str(row.get("penalty") or preset[0]),
        str(row.get("clip_mode") or preset[1]),
    )


def summarise(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[tuple, dict[str, Any]]]:
    """Per task and row (MOPO, or z × combination): seeds, return ± CI, normalised score, ε,
    share of our MOPO."""
    groups: dict[str, dict[tuple, list[Mapping[str, Any]]]] = {}
    for r in rows:
        if r.get("status") == "ok":
            groups.setdefault(str(r["task"]), {}).setdefault(row_key(r), []).append(r)
    out: dict[str, dict[tuple, dict[str, Any]]] = {}
    for task, by_row in groups.items():
        table: dict[tuple, dict[str, Any]] = {}
        for key, cells in by_row.items():
            table[key] = shared.cell_stats(cells)
        shared.add_shares(table, ("mopo", "", ""), ci=True)
        out[task] = table
    return out


def claims(
    summary: Mapping[str, Mapping[tuple, Mapping[str, Any]]],
    *,
    quick: bool = False,
    missing: Mapping[str, str] | None = None,
) -> list[dict[str, str]]:
    """Per task: (1) the paper's choice for the task is as good as the best combination at
    both z (within the two rows' 95% intervals); (2) the choice matters (the paper: the worst
    combination loses ≥ 10 points of MOPO's return on every task).

    Inconclusive in quick mode, with fewer than 2 seeds, when MOPO did not learn, and — for
    (2) — when every row is at the task's ceiling (no difference can show)."""
    found = []
    for task in TASKS:
        stated = _paper_claims(task)
        table = summary.get(task)
        rows = None if table is None else [table.get((v, *c)) for v in VARIANTS for c in COMBOS]
        if table is None or rows is None or None in rows or "share" not in rows[0]:
            why = (missing or {}).get(task)  # none: the dataset is there, the runs pending
            ours = f"not run: {why}" if why else "pending"
            found += [_claim(c, p, ours, "inconclusive", "inconclusive at our scale")
                      for c, p in stated]  # fmt: skip
            continue
        found += _task_claims(task, table, rows, stated, quick=quick)
    return found


def _claim(claim: str, paper: str, ours: str, verdict: str, kind: str) -> dict[str, str]:
    return {"claim": claim, "paper": paper, "ours": ours, "verdict": verdict,
            "plot": "plots/ablation.png", "kind": kind}  # fmt: skip


def _paper_claims(task: str) -> list[tuple[str, str]]:
    """The two claims for `task` with the paper's side of each: (1) its choice against the best
    combination at each z, (2) its worst combination's share of MOPO."""
    label = TASK_LABELS[task]
    preset = preset_combo(task)
    paper = PAPER[task]
    p_shares = {
        (v, *c): 100.0 * paper[c][i] / PAPER_MOPO[task]
        for c in COMBOS
        for i, v in enumerate(VARIANTS)
    }
    p_best = [max(p_shares[(v, *c)] for c in COMBOS) for v in VARIANTS]
    p_pre = [p_shares[(v, *preset)] for v in VARIANTS]
    c1 = f"{COMBO_LABELS[preset]} (the paper's {label} choice) is as good as the best combination"
    c2 = f"The penalty × clipping choice matters on {label} (worst combination < 90% of MOPO)"
    p1 = "; ".join(
        f"z = {PAPER_Z[task][i]}: {p_pre[i]:.1f}% vs best {p_best[i]:.1f}% of MOPO"
        for i in range(2)
    )
    return [(c1, p1), (c2, f"worst {min(p_shares.values()):.1f}% of MOPO")]


def _task_claims(
    task: str,
    table: Mapping[tuple, Mapping[str, Any]],
    rows: Sequence[Mapping[str, Any]],
    stated: Sequence[tuple[str, str]],
    *,
    quick: bool,
) -> list[dict[str, str]]:
    """The two claims of a task whose every cell finished (`rows`)."""
    preset = preset_combo(task)
    seeds = min(s["seeds"] for s in rows)
    mopo = table[("mopo", "", "")]
    learned = (mopo.get("normalised") or -math.inf) >= MOPO_LEARNED
    weak = quick or seeds < 2 or not learned
    ties, parts = [], []
    for i, v in enumerate(VARIANTS):
        best = max(COMBOS, key=lambda c: table[(v, *c)]["share"])
        b, p = table[(v, *best)], table[(v, *preset)]
        ties.append(b["share"] - p["share"] <= b["ci_share"] + p["ci_share"])
        parts.append(
            f"z = {PAPER_Z[task][i]} (ε = {p['epsilon']:.2f}): {p['share']:.1f}% vs best "
            f"{b['share']:.1f}% ({COMBO_LABELS[best]})"
        )
    v1 = k1 = "holds" if all(ties) else "does not hold"
    worst = min(s["share"] for s in rows)
    v2 = k2 = "holds" if worst < 90.0 else "does not hold"
    # too small a run (or every row at the ceiling) cannot tell; shares of a MOPO that did
    # not learn are vacuous
    small = "inconclusive at our scale" if quick or seeds < 2 else "vacuous"
    if weak:
        v1, k1 = "inconclusive", small
    if weak or (v2 == "does not hold" and shared.at_ceiling(table, CEILING)):
        v2, k2 = "inconclusive", small if weak else "inconclusive at our scale"
    suffix = f" ({seeds} seeds)"
    (c1, p1), (c2, p2) = stated
    return [
        _claim(c1, p1, "; ".join(parts) + suffix, v1, k1),
        _claim(c2, p2, f"worst {worst:.1f}% of MOPO{suffix}", v2, k2),
    ]


def write_report(
    out: Path,
    rows: Sequence[Mapping[str, Any]],
    scale: Scale,
    *,
    datasets: Mapping[str, Path],
    missing: Mapping[str, str],
    wall: float,
) -> Path:
    """report.md, claims.json, config.json, metrics.json and plots/ from the sweep's rows."""
    summary = summarise(rows)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    _plot(summary, out / "plots" / "ablation.png")
    found = claims(summary, quick=scale.quick, missing=missing)
    return shared.write_outputs(
        out,
        found,
        {
            "reproduction": ID,
            "data": {task: path.name for task, path in datasets.items()},
            **dataclasses.asdict(scale),
        },
        {task: {_key_name(k): s for k, s in table.items()} for task, table in summary.items()},
        _markdown(
            summary,
            found,
            scale,
            datasets=datasets,
            missing=missing,
            wall=wall,
            cell_seconds=shared.cell_seconds(rows),
            cost=run_costs(rows),
        ),
    )


def _cost_text(task: str, scale: Scale, cost: Mapping[str, Any]) -> str:
    """What the task's half of the table would cost on one thread (primorl-table1's measured
    ratio of its DP round to Pendulum's × Pendulum's DP stage in this sweep's cells); "" in
    quick mode or unmeasured."""
    entry = (cost.get("tasks") or {}).get(task)
    if scale.quick or not entry or "run_hours" not in entry:
        return ""
    runs = len(COMBOS) * len(VARIANTS)
    hours = scale.seeds * (runs * entry["run_hours"] + MOPO_MINUTES[task] / 60)
    per_round = cost["pendulum_dp_seconds_per_round"]
    return TEXT.fill(
        "cost",
        label=TASK_LABELS[task],
        ratio=f"{entry['ratio_to_pendulum']:.1f}",
        median=f"{per_round['median']:.3f}",
        cells=per_round["cells"],
        run_hours=f"{entry['run_hours']:.1f}",
        runs=runs,
        hours=f"{hours:.0f}",
        seeds=scale.seeds,
    )


def _key_name(key: tuple) -> str:
    if key[0] == "mopo":
        return "mopo"
    return f"{key[0]}/{COMBO_LABELS[(key[1], key[2])]}"


def _plot(summary: Mapping[str, Mapping[tuple, Mapping[str, Any]]], path: Path) -> None:
    """Share of MOPO per combination at each z, ours (with 95% CI) beside the paper's."""
    series = []
    x = list(range(1, len(COMBOS) + 1))
    for task, table in summary.items():
        for i, v in enumerate(VARIANTS):
            stats = [table.get((v, *c)) for c in COMBOS]
            if None in stats or "share" not in stats[0]:
                continue
            ys = [s["share"] for s in stats]  # type: ignore[index]
            hs = [s["ci_share"] for s in stats]  # type: ignore[index]
            z = PAPER_Z[task][i]
            series.append(
                Series(
                    f"{TASK_LABELS[task]} z = {z}: ours",
                    x,
                    ys,
                    low=[y - h for y, h in zip(ys, hs, strict=True)],
                    high=[y + h for y, h in zip(ys, hs, strict=True)],
                    style="o-",
                )
            )
            paper = [100.0 * PAPER[task][c][i] / PAPER_MOPO[task] for c in COMBOS]
            series.append(Series(f"{TASK_LABELS[task]} z = {z}: paper", x, paper, style="x--"))
    draw(
        PlotSpec(
            "ablation",
            "PRIMORL Table 10: share of MOPO's return, ours and the paper's",
            "penalty + clipping (LC: per-layer, FC: flat)",
            "% of MOPO's return",
            series,
            hlines=[("MOPO (100%)", 100.0)],
            xticks=[(i, COMBO_LABELS[c]) for i, c in zip(x, COMBOS, strict=True)],
        ),
        path,
    )


def _markdown(
    summary: Mapping[str, Mapping[tuple, Mapping[str, Any]]],
    found: Sequence[Mapping[str, str]],
    scale: Scale,
    *,
    datasets: Mapping[str, Path],
    missing: Mapping[str, str],
    wall: float,
    cell_seconds: float,
    cost: Mapping[str, Any],
) -> str:
    sections = []
    for task in TASKS:
        table = summary.get(task)
        if table is None:
            sections.append(_absent_section(task, scale, missing, cost))
        else:
            sections.append(_task_section(task, table, missing))
    smoke = "\n".join(shared.smoke_lines(scale))
    fields = {
        "id": ID,
        "seeds": scale.seeds,
        "quick_flag": " --quick" if scale.quick else "",
        "names": ", ".join(f"`{p.name}`" for p in datasets.values()),
        "epochs": scale.epochs,
        "steps": scale.settings().get("steps_per_epoch", 1000),
        "final_epochs": min(10, scale.epochs),
        "cell_minutes": f"{cell_seconds / 60:.1f}",
        "wall_minutes": f"{wall / 60:.1f}",
        "smoke": smoke,
        "tasks": "\n\n".join(sections),
        "verdicts": "\n".join(shared.verdict_lines(found)),
        "raw_scale": "\n".join(shared.raw_scale_notes()).rstrip("\n"),
    }
    return TEXT.fill("report", fields) + "\n"


def _absent_section(
    task: str, scale: Scale, missing: Mapping[str, str], cost: Mapping[str, Any]
) -> str:
    """A task without a finished run: why (not run, or pending) and what it would cost."""
    why = TEXT.fill("not_run", why=missing[task]) if task in missing else TEXT.fill("pending")
    spent = _cost_text(task, scale, cost)
    return TEXT.fill(
        "task_absent", label=TASK_LABELS[task], why=why, cost="\n" + spent if spent else ""
    )


def _task_section(
    task: str, table: Mapping[tuple, Mapping[str, Any]], missing: Mapping[str, str]
) -> str:
    """A task's MOPO line, its table of combinations × z, and its ceiling and MOPO notes."""
    mopo = table.get(("mopo", "", ""))
    mopo_line = ""
    if mopo is not None:
        mopo_line = TEXT.fill(
            "mopo",
            ret=f"{mopo['return']:.1f}",
            ci=f"{mopo['ci']:.1f}",
            raw=shared.raw_text(mopo),
            normalised=shared.num_text(mopo["normalised"]),
            paper=PAPER_MOPO[task],
        )
    ceiling = ""
    if shared.at_ceiling(table, CEILING):
        ceiling = "\n" + TEXT.fill("ceiling", ceiling=f"{CEILING:g}")
    warning = "\n".join(shared.mopo_not_learned(mopo, MOPO_LEARNED))
    return TEXT.fill(
        "task",
        label=TASK_LABELS[task],
        mopo=mopo_line + "\n" if mopo_line else "",
        rows_table=_rows_table(task, table, missing),
        ceiling=ceiling,
        warning="\n" + warning if warning else "",
    )


def _rows_table(
    task: str, table: Mapping[tuple, Mapping[str, Any]], missing: Mapping[str, str]
) -> str:
    header = ["combination", "z", "paper return (% of MOPO)", "our ε (PLD)",
              "our return ± 95% CI", "raw-scale return ± 95% CI", "normalised",
              "% of our MOPO", "per seed"]  # fmt: skip
    preset = preset_combo(task)
    rows = []
    for combo in COMBOS:
        for i, v in enumerate(VARIANTS):
            p_ret = PAPER[task][combo][i]
            p = f"{p_ret} ({100.0 * p_ret / PAPER_MOPO[task]:.1f}%)"
            name = COMBO_LABELS[combo] + (" (preset)" if combo == preset else "")
            z = PAPER_Z[task][i]
            s = table.get((v, *combo))
            if s is None:
                absent = "not run" if task in missing else "pending"
                rows.append([name, z, p, "—", absent, "—", "—", "—", "—"])
                continue
            share, per_seed = shared.share_texts(s)
            rows.append(
                [name, z, p, shared.eps_text(s["epsilon"]), shared.return_text(s),
                 shared.raw_text(s), shared.num_text(s["normalised"]), share, per_seed]
            )  # fmt: skip
    return table_text(header, rows)
