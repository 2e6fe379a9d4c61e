"""Reproduction ``primorl-table1``: PRIMORL's Table 1 on Pendulum, as a sweep.

The rows of the paper's Table 1 for one task — MOPO (non-private), NO PRIVACY (z = 0, clipping
kept), LOW and HIGH (the paper's z and T) — each for several seeds, run by the sweep runner
(`privrl.runs.sweep`) as ordinary `privrl train mopo` / `privrl train primorl` runs on the
recipe dataset. The sweep's directory (in the cache: ``$PRIVRL_CACHE/reproduce/primorl-table1/``;
its cells hold checkpoints and models, too big for docs/) keeps every cell's run directory, so
an interrupted reproduction resumes with the cells left; `--backend ray` runs the cells on Ray.
The results table is copied beside the report.

The report (``OUT/report.md``, ``OUT/claims.json``, ``OUT/plots/``) sets each row beside the
paper's: ε (our PLD accountant for the paper's z, q and T), the return (mean ± 95% t-interval
over seeds, the mean of the last 10 SAC epochs' evaluations, as in the paper), and the share of
our MOPO's return, which is what can be compared (the paper's Pendulum reward scale differs:
our reward is r' = 1 + r/16.27 ∈ [0, 1]), and the return on Gymnasium Pendulum-v1's raw scale,
R = c_max·(R' − 200) (the public inverse transform, `primorl_sweeps.raw_map`).

Beyond the paper, one more row: HIGH at the paper's ε (5.1) with z calibrated under our PLD
accountant for the same q and T (`train primorl --epsilon 5.1`), which shows what the tighter
accounting buys: less noise for the same guarantee. It runs on the first `PLD_SEEDS` seeds.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from privrl.experiments import primorl_sweeps as shared
from privrl.experiments.primorl_sweeps import Scale, mean_ci
from privrl.runs.plots import draw
from privrl.runs.system import PlotSpec

__all__ = ["Scale", "claims", "mean_ci", "summarise", "sweep_doc", "table1", "write_report"]

ID = "primorl-table1"

# Table 1, Pendulum: ε (∞ = not private), return, share of MOPO (%).
PAPER = {
    "mopo": (math.inf, 795.9, 100.0),
    "no-privacy": (math.inf, 810.4, 101.8),
    "low": (22.3, 817.4, 102.7),
    "high": (5.1, 778.9, 97.9),
    "high-pld": (5.1, 778.9, 97.9),  # beyond the paper: the paper's HIGH ε, our accountant
}
ROWS = ("mopo", "no-privacy", "low", "high", "high-pld")
VARIANT_ROWS = ("no-privacy", "low", "high")
LABELS = {
    "mopo": "MOPO",
    "no-privacy": "NO PRIVACY (z = 0)",
    "low": "LOW",
    "high": "HIGH",
    "high-pld": "HIGH at the paper's ε, calibrated under PLD (ours)",
}
PLD_SEEDS = 3  # seeds of the high-pld row (the first of the scale's seeds)
# A row reproduces the paper's when its share of our MOPO is at least this (the paper's
# claim: little loss under privacy; HIGH keeps 97.9%).
SHARE_TARGET = 90.0
CEILING = 95.0  # normalised score at which a row is at the task's ceiling
MOPO_LEARNED = 50.0  # MOPO's normalised score below which shares of it are not evidence


def sweep_dir(scale: Scale) -> Path:
    """Where the cells live (the cache: their checkpoints and models do not belong in docs/)."""
    return shared.sweep_dir("primorl-table1", scale)


def sweep_doc(data: Path, out: Path, scale: Scale, *, backend: str, workers: int | None) -> dict:
    """The grid: MOPO and PRIMORL's three rows × seeds, and the high-pld row (a target ε, z
    calibrated for the preset's T) on its seeds, on one dataset; cells under `out`. The cells
    are explicit entries, so each paper row's cell keeps the key it had as a grid cell."""
    seeds = scale.seed_list()
    entries: list[dict[str, Any]] = [{"system": "mopo", "seed": s} for s in seeds]
    entries += [{"system": "primorl", "variant": v, "seed": s} for v in VARIANT_ROWS for s in seeds]
    paper_eps = PAPER["high-pld"][0]
    entries += [{"system": "primorl", "epsilon": paper_eps, "seed": s} for s in seeds[:PLD_SEEDS]]
    return shared.sweep_doc(
        scale,
        out,
        {},
        primorl={},
        backend=backend,
        workers=workers,
        data=data,
        cells=entries,
        x="variant",
    )


def table1(out: Path, **options: Any) -> Path:
    """`privrl reproduce primorl-table1`: run (or resume) the sweep, write the report.
    `options`: seeds, seed, quick, backend, workers, data, epochs (`shared.Request.of`)."""
    req = shared.Request.of(out, **options)
    data = req.dataset(ID)
    t0 = time.perf_counter()
    doc = sweep_doc(data, sweep_dir(req.scale), req.scale, backend=req.backend, workers=req.workers)
    rows = shared.run_cells(doc, req.out)
    return write_report(req.out, rows, req.scale, data=data, wall=time.perf_counter() - t0)


# --------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------


def row_of(cell: Mapping[str, Any]) -> str:
    """The Table 1 row of a results-table row."""
    if cell["system"] == "mopo":
        return "mopo"
    variant = cell.get("variant")
    return str(variant) if isinstance(variant, str) and variant else "high-pld"


def summarise(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per Table 1 row: seeds, return mean ± CI, normalised score, ε, share of our MOPO."""
    by_row: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("status") == "ok":
            by_row.setdefault(row_of(r), []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for name in ROWS:
        cells = by_row.get(name, [])
        if not cells:
            continue
        out[name] = {**shared.cell_stats(cells), "curves": [c.get("curve") or [] for c in cells]}
    shared.add_shares(out, "mopo")
    return out


def claims(
    summary: Mapping[str, Mapping[str, Any]], *, quick: bool = False
) -> list[dict[str, str]]:
    """One claim per private/ablation row: its share of MOPO against the paper's.

    A share of MOPO says nothing when MOPO itself did not learn (normalised score below
    `MOPO_LEARNED`: a row "close to" a random-level MOPO would be vacuous, kind "vacuous"), nor
    in quick mode or with one seed (kind "inconclusive at our scale").
    """
    found = []
    mopo = summary.get("mopo", {})
    learned = (mopo.get("normalised") or -math.inf) >= MOPO_LEARNED
    for name in VARIANT_ROWS:
        s = summary.get(name)
        paper_eps, _, paper_share = PAPER[name]
        paper = f"{paper_share:.1f}% of MOPO" + (
            "" if math.isinf(paper_eps) else f" at ε = {paper_eps:g}"
        )
        if s is None or "share" not in s:
            found.append(
                {
                    "claim": f"{LABELS[name]} is close to MOPO (Pendulum)",
                    "paper": paper,
                    "ours": "not run",
                    "verdict": "inconclusive",
                    "plot": "plots/returns.png",
                    "kind": "inconclusive at our scale",
                }
            )
            continue
        eps = "" if math.isinf(s["epsilon"]) else f" at ε = {s['epsilon']:.2f}"
        verdict = kind = "holds" if s["share"] >= SHARE_TARGET else "does not hold"
        if s["seeds"] < 2 or quick or not learned:
            verdict = "inconclusive"
            # a share of a MOPO that did not learn is met or missed trivially: vacuous
            kind = "inconclusive at our scale" if s["seeds"] < 2 or quick else "vacuous"
        found.append(
            {
                "claim": f"{LABELS[name]} is close to MOPO (Pendulum, ≥ {SHARE_TARGET:g}%)",
                "paper": paper,
                "ours": f"{s['share']:.1f}% of MOPO{eps} ({s['seeds']} seeds)",
                "verdict": verdict,
                "plot": "plots/returns.png",
                "kind": kind,
            }
        )
    return found


def write_report(
    out: Path, rows: Sequence[Mapping[str, Any]], scale: Scale, *, data: Path, wall: float
) -> Path:
    """report.md, claims.json and plots/ from the sweep's results."""
    summary = summarise(rows)
    _add_run_facts(summary, rows)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    _plot(summary, out / "plots" / "returns.png")
    found = claims(summary, quick=scale.quick)
    return shared.write_outputs(
        out,
        found,
        {"reproduction": "primorl-table1", "data": data.name, **dataclasses.asdict(scale)},
        {name: {k: v for k, v in s.items() if k != "curves"} for name, s in summary.items()},
        _markdown(shared.Report(summary, found, scale, data, wall, shared.cell_seconds(rows))),
    )


def _add_run_facts(summary: dict[str, dict[str, Any]], rows: Sequence[Mapping[str, Any]]) -> None:
    """Each row's z (from its cells' privacy.json: public) and its cells' run times."""
    for name, s in summary.items():
        cells = [r for r in rows if r.get("status") == "ok" and row_of(r) == name]
        zs = {shared.noise_multiplier(r.get("dir")) for r in cells} - {None}
        s["noise_multiplier"] = zs.pop() if len(zs) == 1 else None
        s["minutes"] = [float(r.get("seconds") or 0.0) / 60 for r in cells]


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


def _plot(summary: Mapping[str, Mapping[str, Any]], path: Path) -> None:
    series = [shared.curve_series(LABELS[name], s["curves"]) for name, s in summary.items()]
    draw(
        PlotSpec(
            "returns",
            "PRIMORL Table 1, Pendulum: return in the real simulator",
            "SAC epoch",
            "return (10 episodes)",
            [s for s in series if s is not None],
        ),
        path,
    )


def _markdown(report: shared.Report) -> str:
    summary, found, scale = report.summary, report.found, report.scale
    lines = [
        "# PRIMORL Table 1 (Pendulum)",
        "",
        f"Regenerated by `privrl reproduce primorl-table1 --seeds {scale.seeds}`: a sweep of "
        "`privrl train mopo` and "
        "`privrl train primorl --variant no-privacy|low|high` runs on the recipe dataset "
        f"`{report.data.name}`, {scale.seeds} seeds each, {scale.epochs} SAC epochs of "
        f"{scale.settings().get('steps_per_epoch', 1000)} updates (the return is the mean of "
        f"the last {min(10, scale.epochs)} epochs' evaluations, 10 episodes each); "
        f"DP-FedAvg with the paper's z, q and T for the row. The cells ran for "
        f"{report.cell_seconds / 60:.1f} min in all (one thread each); this invocation took "
        f"{report.wall / 60:.1f} min (finished cells are skipped).",
        "",
    ]
    if scale.quick:
        lines += [
            "**Quick mode (smoke test)**: tiny dataset, 3 DP-FedAvg rounds, "
            f"{scale.epochs} × 20 SAC steps — the numbers mean nothing.",
            "",
        ]
    lines += [
        "| method | paper ε | our ε (PLD) | paper return (% of MOPO) | our return ± 95% CI | "
        "raw Pendulum-v1 return ± 95% CI | normalised | % of our MOPO | per seed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ROWS:
        p_eps, p_ret, p_share = PAPER[name]
        s = summary.get(name)
        if s is None:
            lines.append(
                f"| {LABELS[name]} | {_eps(p_eps)} | — | {p_ret} ({p_share}%) | "
                "not run | — | — | — | — |"
            )
            continue
        share, per_seed = shared.share_texts(s)
        lines.append(
            f"| {LABELS[name]} | {_eps(p_eps)} | {_eps(s['epsilon'])} | {p_ret} ({p_share}%) | "
            f"{s['return']:.1f} ± {s['ci']:.1f} | {shared.raw_text(s)} | "
            f"{shared.num_text(s['normalised'])} | {share} | {per_seed} |"
        )
    lines += shared.verdict_section(
        summary,
        found,
        ceiling=CEILING,
        ceiling_note=f"Every row's normalised score is ≥ {CEILING:g}: all reach the task's "
        "ceiling (the dataset's expert reference return), so at these budgets this "
        "task shows no cost of privacy at all — it cannot resolve a loss as small as "
        "the paper's (2.1% for HIGH). Harder tasks (Balance, Swingup) or smaller ε "
        "are where the rows can differ.",
        learned=MOPO_LEARNED,
    )
    lines += [
        "",
        "![returns](plots/returns.png)",
        "",
        "## Notes",
        "",
        "- Our ε is the PLD accountant's for the row's z, q = 1e-3 and T = 7000 rounds, "
        "trajectory-level add/remove neighbours; the paper's ε is its own accountant's.",
        "- Model rollouts start from the simulator's initial states (chained) and are held "
        "inside the simulator's public observation box and reward range (docs/primorl.md).",
        "- The paper's Pendulum returns are on its own reward scale; compare the share of "
        "MOPO's return.",
        *_run_time_notes(summary),
        "",
        *shared.raw_scale_notes(),
    ]
    return "\n".join(lines)


_eps = shared.eps_text
