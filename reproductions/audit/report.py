"""Reproduction ``audit``: how much do privrl's private systems really leak? (issue 17)

A sweep (`privrl.runs.sweep`) of `privrl audit` runs — every audited system at two budgets, its
non-private twin, and DP-SGD, expert-dp's DP-SGD steps and PRIMORL audited in one run
(Steinke, Nasr & Jagielski 2023; 1000 canaries, 100 guesses) — each an
ordinary run directory in the cache (``$PRIVRL_CACHE/reproduce/audit/``; an interrupted
reproduction resumes with the cells left). The report (``OUT/report.md``, ``OUT/claims.json``,
``OUT/plots/``) tabulates, per row: the system, its budget, the ε its report claims, the
empirical lower bound (Clopper–Pearson 95%), the attack's AUC, the trials and the trials per
second of the cell (plan, trials, bound and ROC plot together, one thread).

Claims checked: no private system's lower bound exceeds its claimed ε; every non-private twin
leaks (bound > 3 at 2000 trials, or in one run); for the mechanisms with a closed-form
worst case (DP-APVI's Gaussian counts, GPOPE's per-step Gaussian, DP-SGD with a gradient
canary) the bound reaches at least half the claimed ε. No data is read: every audit's D₀ and
canary are synthetic.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privrl.runs.rundir import RunDir
from reproductions.claims import Claim, count_verdict, with_kinds, write_claims
from reproductions.templates import beside, row, table

TEXT = beside(__file__, "report.md.tmpl")

# (label, system, budget flag, budgets) of the private rows; twins: (label, system, settings)
PRIVATE: tuple[tuple[str, str, str, tuple[float, ...]], ...] = (
    ("DP-APVI counts", "audit-dp-apvi", "epsilon", (1.0, 4.0)),
    ("GPOPE (m = 1, N = 1)", "audit-gpope", "epsilon", (1.0, 4.0)),
    ("DP-SGD (q = 1, N = 1)", "audit-dp-sgd", "epsilon", (1.0, 4.0)),
    ("DP-VAPVI vectors", "audit-dp-vapvi", "epsilon", (1.0, 4.0)),
    ("DP-LSW θ", "audit-dp-lsw", "epsilon", (1.0, 8.0)),
    ("SDP-PE counters", "audit-sdp-pe", "epsilon", (1.0, 8.0)),
    ("expert-dp consensus filter (1 round)", "audit-expert-dp", "epsilon", (1.0, 4.0)),
)
TWINS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("APVI (twin)", "audit-dp-apvi", {"non_private": True}),
    ("GTD2 (twin)", "audit-gpope", {"sigma": 0.0}),
    ("SGD (twin)", "audit-dp-sgd", {"non_private": True}),
    ("VAPVI (twin)", "audit-dp-vapvi", {"non_private": True}),
    ("LSW (twin)", "audit-dp-lsw", {"non_private": True}),
    ("PE (twin)", "audit-sdp-pe", {"non_private": True}),
    ("consensus filter, no noise (twin)", "audit-expert-dp", {"epsilon": 2.0, "non_private": True}),
)
ONE_RUN = ("DP-SGD, one run (1000 canaries)", "audit-dp-sgd", 4.0)
# Audits in ONE training run with m canaries (expert-dp's DP-SGD steps: canary experts;
# PRIMORL's DP-FedAvg: canary trajectories): (label, kind, system, settings); every cell also
# gets the scale of `one_run_scale` (m, background units, guesses).
ONE_RUNS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("expert-dp DP-SGD steps, one run, N = 10", "one-run", "audit-expert-dp-sgd", {"epsilon": 4.0}),
    ("expert-dp DP-SGD steps, one run, N = 10", "one-run", "audit-expert-dp-sgd", {"epsilon": 8.0}),
    ("expert-level SGD, no noise (twin, one run)", "twin", "audit-expert-dp-sgd",
     {"non_private": True}),
    ("PRIMORL, one run, q = 1, T = 1", "one-run", "audit-primorl", {"epsilon": 4.0}),
    ("PRIMORL, one run, q = 1, T = 1", "one-run", "audit-primorl", {"epsilon": 8.0}),
    ("PRIMORL, one run, q = 1, T = 1, gradient score", "one-run", "audit-primorl",
     {"epsilon": 8.0, "statistic": "gradient"}),
    ("PRIMORL, one run, q = ½, T = 10", "one-run", "audit-primorl",
     {"epsilon": 8.0, "rate": 0.5, "rounds": 10}),
    ("PRIMORL, no noise (twin, one run)", "twin", "audit-primorl", {"non_private": True}),
)  # fmt: skip
TIGHT = ("audit-dp-apvi", "audit-gpope", "audit-dp-sgd")  # closed-form worst cases
TWIN_LEAK = 3.0  # a twin "leaks" when its bound exceeds this (2000 trials show at most ≈ 5.4)
TWIN_TRIALS = 2000
_ONE_RUN_AXES = {
    "audit-primorl": {"rate": 1.0, "rounds": 1, "statistic": "loss"},
    "audit-expert-dp-sgd": {"steps": 10},
}


def one_run_settings(system: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """A one-run cell's settings with every axis the report matches on made explicit."""
    return {**_ONE_RUN_AXES[system], **settings}


def one_run_scale(quick: bool) -> dict[str, int]:
    """m canaries, background units and guesses of the one-run cells (seconds to half a
    minute each on one thread at full scale)."""
    if quick:
        return {"canaries": 200, "background": 20, "guesses": 40}
    return {"canaries": 1000, "background": 100, "guesses": 100}


@dataclass(frozen=True)
class Scale:
    """Trials per private cell: `tight` for the closed-form worst cases, `trials` for the rest."""

    tight: int = 1_000_000
    trials: int = 200_000
    seed: int = 0
    quick: bool = False


def cells(scale: Scale) -> list[dict[str, Any]]:
    """The sweep's explicit cells (one per report row)."""
    out: list[dict[str, Any]] = []
    for _, system, flag, budgets in PRIVATE:
        for b in budgets:
            trials = scale.tight if system in TIGHT else scale.trials
            out.append({"system": system, flag: b, "trials": trials})
    for _, system, settings in TWINS:
        out.append({"system": system, **settings, "trials": TWIN_TRIALS})
    _, system, eps = ONE_RUN
    out.append({"system": system, "epsilon": eps, "mode": "one-run", "trials": 2, "canaries": 1000})
    for _, _, system, settings in ONE_RUNS:
        out.append(
            {"system": system, **one_run_settings(system, settings), **one_run_scale(scale.quick)}
        )
    return out


def sweep_dir(scale: Scale) -> Path:
    from privrl.data.paths import cache_dir

    return cache_dir() / "reproduce" / "audit" / ("quick" if scale.quick else "full")


def run(
    out: Path,
    *,
    seeds: int | None = None,
    seed: int = 0,
    quick: bool = False,
    backend: str = "local",
    workers: int | None = None,
) -> Path:
    """`privrl reproduce audit`: run (or resume) the audits' sweep and write the report.
    `seeds` is not used (each audit's trials are its repetitions)."""
    from privrl.runs.sweep import expand, run_sweep

    scale = Scale(tight=20_000, trials=20_000, seed=seed, quick=True) if quick else Scale(seed=seed)
    t0 = time.perf_counter()
    where = sweep_dir(scale)
    doc: dict[str, Any] = {
        "out": str(where),
        "seed": scale.seed,
        "cells": cells(scale),
        "sweep": {"backend": backend, "metrics": ["epsilon_lower_bound", "auc"]},
    }
    if workers is not None:
        doc["sweep"]["workers"] = workers
    outcome = run_sweep(expand(doc))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(where / "results.csv", out / "results.csv")
    outcome.raise_failed("audit cell(s)")
    return write_report(out, outcome.rows, scale, wall=time.perf_counter() - t0)


# --------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------


def _float(value: Any) -> float:
    """A metrics.json number (∞ may be stored as the string "inf")."""
    if value is None:
        return math.nan
    return float(value)


def summarise(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per report row, in the report's order, from the sweep's results rows."""
    ok = [r for r in rows if r.get("status") == "ok"]

    def find(system: str, **want: Any) -> Mapping[str, Any] | None:
        for r in ok:
            if r.get("system") != system:
                continue
            if all(_same(r.get(k), v) for k, v in want.items()):
                return r
        return None

    out: list[dict[str, Any]] = []

    def add(label: str, kind: str, system: str, r: Mapping[str, Any] | None, budget: str) -> None:
        if r is None:
            out.append({"label": label, "kind": kind, "system": system, "budget": budget})
            return
        seconds = _float(r.get("seconds"))
        trials = int(float(_metric(r, "trials") or 0))
        out.append(
            {
                "label": label,
                "kind": kind,
                "system": system,
                "budget": budget,
                "claimed": _float(r.get("epsilon_claimed")),
                "bound": _float(r.get("epsilon_lower_bound")),
                "auc": _float(r.get("auc")),
                "trials": trials,
                "per_s": trials / seconds if seconds > 0 else math.nan,
                "correct": _int(_metric(r, "correct")),
                "guesses": _int(_metric(r, "guesses")),
            }
        )

    for label, system, flag, budgets in PRIVATE:
        for b in budgets:
            add(label, "private", system, find(system, **{flag: b, "mode": None}), f"ε = {b:g}")
    for label, system, settings in TWINS:
        add(label, "twin", system, find(system, **settings), "none")
    label, system, eps = ONE_RUN
    add(label, "one-run", system, find(system, epsilon=eps, mode="one-run"), f"ε = {eps:g}")
    for label, kind, system, settings in ONE_RUNS:
        budget = f"ε = {settings['epsilon']:g}" if "epsilon" in settings else "none"
        row = find(system, **one_run_settings(system, settings))
        add(label, kind, system, row, budget)
    return out


def _metric(row: Mapping[str, Any], key: str) -> Any:
    """A metric of a results row: the sweep prefixes a metric named like one of its axes
    (`metric.trials` when some cell sets `trials`); the axis column is empty for the cells
    that do not set it."""
    value = row.get(f"metric.{key}")
    return row.get(key) if value in (None, "") else value


def _int(value: Any) -> int | None:
    return None if value in (None, "") else int(float(value))


def _same(have: Any, want: Any) -> bool:
    if want is None:  # the axis is unset or holds the default
        return have in (None, "", "two-run") or (isinstance(have, float) and math.isnan(have))
    if isinstance(want, bool):
        return str(have).lower() == str(want).lower()
    try:
        return float(have) == float(want)
    except (TypeError, ValueError):
        return have == want


def claims(summary: Sequence[Mapping[str, Any]], *, quick: bool) -> list[Claim]:
    """The report's verdicts (in quick mode every verdict is inconclusive)."""
    private = [s for s in summary if s["kind"] in ("private", "one-run") and "bound" in s]
    twins = [s for s in summary if s["kind"] == "twin" and "bound" in s]
    tight = [s for s in private if s["kind"] == "private" and s["system"] in TIGHT]
    below = sum(s["bound"] <= s["claimed"] for s in private)
    leaks = sum(s["bound"] > TWIN_LEAK for s in twins)
    halves = sum(s["bound"] >= 0.5 * s["claimed"] for s in tight)
    ratios = ", ".join(f"{s['bound'] / s['claimed']:.2f}" for s in tight)
    found = [
        Claim(
            "no private system's ε lower bound (CP 95%) exceeds its claimed ε",
            "(ε, δ)-DP as each report states",
            f"{below} of {len(private)} rows below their claim",
            count_verdict(below, len(private)),
            "plots/bounds.png",
        ),
        Claim(
            f"every non-private twin leaks (bound > {TWIN_LEAK:g}; {TWIN_TRIALS} trials, "
            "expert-dp-sgd's and PRIMORL's in one run)",
            "ε = ∞",
            f"{leaks} of {len(twins)} twins; bounds "
            + ", ".join(f"{s['bound']:.2f}" for s in twins),
            count_verdict(leaks, len(twins)),
            "plots/bounds.png",
        ),
        Claim(
            "tightness: bound ≥ ½ claimed ε for DP-APVI, GPOPE, DP-SGD at ε = 1, 4",
            "closed-form worst case (a single Gaussian)",
            f"{halves} of {len(tight)} rows; bound / claim = {ratios}",
            count_verdict(halves, len(tight)),
            "plots/bounds.png",
        ),
    ]
    if quick:
        found = [dataclasses.replace(c, verdict="inconclusive") for c in found]
    # each kind follows from its verdict (quick mode: inconclusive at our scale)
    return with_kinds(found)


def write_report(
    out: Path, rows: Sequence[Mapping[str, Any]], scale: Scale, *, wall: float
) -> Path:
    """report.md, claims.json, metrics.json, config.json and plots/bounds.png."""
    summary = summarise(rows)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    _plot(summary, out / "plots" / "bounds.png")
    found = claims(summary, quick=scale.quick)
    write_claims(out, found)
    run_dir = RunDir(out)
    run_dir.write_config({"reproduction": "audit", **dataclasses.asdict(scale)})
    run_dir.write_metrics({"rows": [_jsonable(s) for s in summary]})
    path = out / "report.md"
    cell_seconds = sum(_float(r.get("seconds")) for r in rows if r.get("status") == "ok")
    path.write_text(
        _markdown(summary, found, scale, wall=wall, cell_seconds=cell_seconds), encoding="utf-8"
    )
    return path


def _jsonable(s: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in s.items()
    }


def _plot(summary: Sequence[Mapping[str, Any]], path: Path) -> None:
    from privrl.runs.plots import draw
    from privrl.runs.system import PlotSpec, Series

    series = []
    for label, system, _, _ in PRIVATE:
        pts = [
            (s["claimed"], s["bound"])
            for s in summary
            if s["system"] == system and s["kind"] == "private" and "bound" in s
        ]
        if pts:
            pts.sort()
            series.append(Series(label, [p[0] for p in pts], [p[1] for p in pts], style="o-"))
    top = max([s["claimed"] for s in summary if s["kind"] == "private" and "claimed" in s] or [1])
    series.append(Series("claimed ε (no bound may exceed it)", [0, top], [0, top], style="k--"))
    series.append(Series("½ claimed ε", [0, top], [0, top / 2], style=":"))
    draw(
        PlotSpec(
            "bounds",
            "privrl audit: empirical ε lower bound (CP 95%) vs claimed ε",
            "claimed ε",
            "empirical lower bound",
            series,
        ),
        path,
    )


def _fmt(v: Any, spec: str = ".2f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float) and math.isinf(v):
        return "∞"
    return format(v, spec)


def _markdown(
    summary: Sequence[Mapping[str, Any]],
    found: Sequence[Claim],
    scale: Scale,
    *,
    wall: float,
    cell_seconds: float = math.nan,
) -> str:
    quick = TEXT.fill("quick") + "\n" if scale.quick else ""
    header = ["system", "budget", "claimed ε", "lower bound (CP 95%)", "bound / claim", "AUC"]
    head = table([*header, "trials", "trials/s"], [])
    rows_table = "\n".join([head, *(_table_row(s) for s in summary)])
    verdicts = table(
        ["claim", "expected", "ours", "verdict"],
        [[c.claim, c.paper, c.ours, _verdict(c.verdict)] for c in found],
    )
    fields = {
        "seed": scale.seed,
        "tight": f"{scale.tight:,}",
        "trials": f"{scale.trials:,}",
        "twin_trials": f"{TWIN_TRIALS:,}",
        "cell_minutes": f"{cell_seconds / 60:.1f}",
        "wall_minutes": f"{wall / 60:.1f}",
    }
    return (
        TEXT.fill("report", fields, quick=quick, rows_table=rows_table, verdicts_table=verdicts)
        + "\n"
    )


def _table_row(s: Mapping[str, Any]) -> str:
    """One row of the report's table (a cell that did not run: "not run" and empty cells)."""
    if "bound" not in s:
        return f"| {s['label']} | {s['budget']} | not run | | | | | |"
    ratio = s["bound"] / s["claimed"] if math.isfinite(s["claimed"]) else math.nan
    per_s = _fmt(s["per_s"], ",.0f")
    if s["kind"] == "one-run" or s["system"] in _ONE_RUN_AXES:
        auc_txt = f"{s['correct']}/{s['guesses']} guesses right"
        trials, per_s = "1 run", "—"
    else:
        auc_txt = _fmt(s["auc"], ".3f")
        trials = f"{s['trials']:,}"
    claimed, bound = _fmt(s["claimed"]), _fmt(s["bound"])
    return row([s["label"], s["budget"], claimed, bound, _fmt(ratio), auc_txt, trials, per_s])


def _verdict(verdict: str) -> str:
    return f"**{verdict}**" if verdict == "does not hold" else verdict


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The results rows of a finished sweep (results.csv), for re-rendering a report."""
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        return [dict(r) for r in csv.DictReader(fh)]


__all__ = ["Scale", "cells", "claims", "read_rows", "run", "summarise", "write_report"]
