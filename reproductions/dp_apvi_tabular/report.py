"""The DP-APVI tabular study's report.md: the prose is `report.md.tmpl`, filled here."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from reproductions.dp_apvi_tabular.study import (
    TARGET_SUBOPTIMALITY,
    TUNING_SEED_OFFSET,
    Findings,
    Variant,
    _get,
)
from reproductions.dp_apvi_tabular.summary import _fmt, _fmt_n, _nearest
from reproductions.templates import beside, table

TEXT = beside(__file__, "report.md.tmpl")
KINDS = ("tuned", "theory")


def _table(
    agg: list[dict[str, Any]], variants: list[Variant], bonus: str, kind: str, ns: list[int]
) -> str:
    rows = [
        [v.name]
        + [
            _fmt(r["suboptimality_mean"], r["suboptimality_se"])
            for r in (_get(agg, v.name, bonus, kind, n) for n in ns)
        ]
        for v in variants
    ]
    return table(["algorithm", *(f"n = {n:,}" for n in ns)], rows)


def _blocks(*blocks: str) -> str:
    """Paragraphs or tables, each followed by a blank line (a ``$field`` line's value)."""
    return "".join(f"{b}\n\n" for b in blocks)[:-1] if blocks else ""


def _render(found: Findings, summary: dict[str, Any], *, quick: bool) -> str:
    """report.md of the study (`summary` is `_summary(found)`)."""
    cfg = found.cfg
    n_max = summary["n_max"]
    ns = _nearest(cfg.n_grid, [100, 1000, 10_000, 100_000])
    reach = {(r["variant"], r["bonus"], r["scale_kind"]): r["n"] for r in summary["n_to_reach"]}
    fields = {
        "quick_note": _blocks(TEXT.fill("quick_note")) if quick else "",
        "n_max": f"{n_max:,}",
        "target": f"{TARGET_SUBOPTIMALITY:g}",
        "bonus0": cfg.bonuses[0],
        **_setup(found),
        "suboptimality_tables": _suboptimality_tables(found, ns),
        "reach_table": _reach_table(found, reach),
        "convergence": _convergence(summary["convergence"], n_max),
        **_slopes(found, summary),
        **_ablation(found, ns),
        **_theory(found, summary, reach),
        **_observations(found, reach, ns),
    }
    return TEXT.fill("report", fields) + "\n"


def _setup(found: Findings) -> dict[str, str]:
    cfg, tuned = found.cfg, found.tuned
    private = [v for v in found.variants if v.mechanism == "laplace"]
    tuning_rows = [
        [f"{b} (tuning instances)"]
        + [f"{r['mean_suboptimality']:.3f}" for r in found.tuning_table if r["bonus"] == b]
        for b in cfg.bonuses
    ]
    return {
        "elapsed": f"{found.elapsed:.0f}",
        "states": str(cfg.states),
        "actions": str(cfg.actions),
        "horizon": str(cfg.horizon),
        "min_prob": f"{cfg.min_prob:g}",
        "n_grid": ", ".join(f"{n:,}" for n in cfg.n_grid),
        "rhos": ", ".join(f"{r:g}" for r in cfg.rhos),
        "utility_delta": f"{cfg.utility_delta:g}",
        "report_delta": f"{cfg.report_delta:g}",
        "matched_epsilons": ", ".join(
            f"ρ = {v.name.split('ρ=')[1].rstrip(')')} → ε = {v.epsilon:.3f}" for v in private
        ),
        "seeds": str(cfg.seeds),
        "scale_grid": ", ".join(f"{s:g}" for s in cfg.scale_grid),
        "tuning_seeds": str(cfg.tuning_seeds),
        "tuning_offset": str(TUNING_SEED_OFFSET),
        "tuned": ", ".join(f"{b} {tuned[b]:g}" for b in cfg.bonuses),
        "tuning_table": table(["bonus", *(f"scale {s:g}" for s in cfg.scale_grid)], tuning_rows),
    }


def _suboptimality_tables(found: Findings, ns: list[int]) -> str:
    cfg, agg, variants = found.cfg, found.agg, found.variants
    blocks: list[str] = []
    for b in cfg.bonuses:
        blocks += [TEXT.fill("tuned_title", bonus=b, scale=f"{found.tuned[b]:g}")]
        blocks += [_table(agg, variants, b, "tuned", ns)]
    for b in cfg.bonuses:
        blocks += [TEXT.fill("theory_title", bonus=b), _table(agg, variants, b, "theory", ns)]
    return _blocks(*blocks)


def _reach_table(found: Findings, reach: dict[tuple[str, str, str], Any]) -> str:
    bonuses = found.cfg.bonuses
    rows = []
    for v in found.variants:
        cells = [v.name]
        for b in bonuses:
            for k in KINDS:
                n, base = reach[(v.name, b, k)], reach[("APVI", b, k)]
                ratio = f" ({n / base:.0f}× APVI)" if (n and base and v.mechanism != "none") else ""
                cells.append(_fmt_n(n) + ratio)
        rows.append(cells)
    return table(["algorithm", *(f"{b}, {k}" for b in bonuses for k in KINDS)], rows)


def _convergence(conv: list[dict[str, Any]], n_max: int) -> str:
    blocks: list[str] = []
    for kind in KINDS:
        rows = [c for c in conv if c["scale_kind"] == kind]
        ok = [c for c in rows if c["converged_by_n_max"]]
        cells = [
            [
                c["variant"],
                c["bonus"],
                _fmt(c["gap_at_n_max"], c["gap_se_at_n_max"]),
                f"{c['max_gap']:.3f} ({c['n_of_max_gap']:,})",
                "yes" if c["converged_by_n_max"] else "no",
            ]
            for c in rows
        ]
        header = ["algorithm", "bonus", "gap at n max", "largest gap (at n)", "converged"]
        counts = {"ok": len(ok), "total": len(rows), "n_max": f"{n_max:,}"}
        if kind == "tuned" and len(ok) == len(rows):
            verdict = TEXT.fill("tuned_all_converge", counts)
        elif kind == "tuned":
            lag = sorted({c["variant"] for c in rows if not c["converged_by_n_max"]})
            verdict = TEXT.fill("tuned_some_converge", counts, lagging=", ".join(lag))
        else:
            verdict = TEXT.fill("theory_some_converge" if ok else "theory_none_converge", counts)
        title = TEXT.fill("convergence_title", kind=kind.capitalize(), n_max=f"{n_max:,}")
        blocks += [title, table(header, cells), verdict]
    return _blocks(*blocks)


def _slopes(found: Findings, summary: dict[str, Any]) -> dict[str, str]:
    tuned_slopes = [s for s in found.slopes if s["scale_kind"] == "tuned"]
    rows = []
    for s in tuned_slopes:
        if math.isfinite(s.get("slope", float("nan"))):
            past = f"{s['slope']:.2f} ± {s['slope_se']:.2f}"
            rng = f"{s['slope_n_range'][0]:,}–{s['slope_n_range'][1]:,} ({s['slope_points']})"
        else:
            past, rng = "— (< 3 points)", f"({s['slope_points']})"
        allp = (
            f"{s['slope_all_positive']:.2f} ± {s['slope_all_positive_se']:.2f}"
            if math.isfinite(s.get("slope_all_positive", float("nan")))
            else "—"
        )
        rows.append([s["variant"], s["bonus"], past, rng, allp])
    header = ["algorithm", "bonus", "slope past threshold", "n range (points)"]
    apvi_sl = {(a["bonus"], a["scale_kind"]): a["slope"] for a in summary["apvi_slopes"]}
    return {
        "slope_table": table([*header, "slope, all points"], rows),
        "slope_verdict": _slope_verdict(tuned_slopes),
        "apvi_slope": f"{apvi_sl.get((found.cfg.bonuses[0], 'tuned'), float('nan')):.2f}",
    }


def _slope_verdict(tuned_slopes: list[dict[str, Any]]) -> str:
    finite = [s for s in tuned_slopes if math.isfinite(s.get("slope", float("nan")))]
    if not finite:
        return ""
    faster = [s for s in finite if s["slope"] + 2 * s["slope_se"] < -1.0]
    like = [s for s in finite if -1.5 <= s["slope"] <= -0.5]
    slower = [s for s in finite if s["slope"] - 2 * s["slope_se"] > -1.0]
    measured = TEXT.fill(
        "slope_summary",
        lo=f"{min(s['slope'] for s in finite):.2f}",
        hi=f"{max(s['slope'] for s in finite):.2f}",
        faster=len(faster),
        finite=len(finite),
        like=len(like),
        slower=len(slower),
    )
    if len(faster) > len(finite) / 2:
        verdict = "slope_faster"
    elif len(like) >= len(finite) / 2:
        verdict = "slope_like"
    else:
        verdict = "slope_not"
    return _blocks(measured, TEXT.fill(verdict))


def _ablation(found: Findings, ns: list[int]) -> dict[str, str]:
    cfg = found.cfg
    shares: list[float] = []
    rows = []
    shown = set(ns) | set(_nearest(cfg.n_grid, [3000, 30_000]))
    for r in found.ablation:
        significant = r["dp_gap"] > 0 and r["dp_gap"] > 2 * r["dp_gap_se"]
        if significant:
            shares.append(r["threshold_only_gap"] / r["dp_gap"])
        if r["n"] not in shown:
            continue
        share = (
            f"{r['threshold_only_gap'] / r['dp_gap']:.0%}" if significant else "— (within noise)"
        )
        rows.append(
            [
                f"{r['rho']:g}",
                f"{r['n']:,}",
                _fmt(r["dp_gap"], r["dp_gap_se"]),
                f"{r['threshold_only_gap']:.4f}",
                share,
            ]
        )
    header = ["ρ", "n", "DP-APVI gap", "threshold-only gap", "threshold share of the gap"]
    return {
        "ablation_table": table(header, rows),
        "ablation_verdict": _ablation_verdict(found, shares),
    }


def _ablation_verdict(found: Findings, shares: list[float]) -> str:
    if not shares:
        return ""
    cfg = found.cfg
    median = float(np.median(shares))
    summary = TEXT.fill(
        "ablation_shares", lo=f"{min(shares):.0%}", hi=f"{max(shares):.0%}", median=f"{median:.0%}"
    )
    if median <= 0.5:
        return _blocks(summary, TEXT.fill("ablation_noise"))
    g1 = next(
        (v for v in found.variants if v.mechanism == "gaussian" and v.rho == 1.0),
        None,
    )
    bias = ""
    if g1 is not None:
        mid = _nearest(cfg.n_grid, [3000])[0]
        row = _get(found.agg, g1.name, cfg.bonuses[0], "tuned", mid)
        bias = TEXT.fill(
            "ablation_bias",
            n=f"{mid:,}",
            bias=f"{row['n_tilde_bias_mean']:.1f}",
            E=f"{row['E']:.1f}",
        )
    return _blocks(summary, TEXT.fill("ablation_threshold", bias=bias))


def _theory(
    found: Findings, summary: dict[str, Any], reach: dict[tuple[str, str, str], Any]
) -> dict[str, str]:
    n_max = summary["n_max"]
    thresholds = summary["theory_threshold"]
    ratios = [t["n_needed_avg_pair"] / n_max for t in thresholds]
    rows = [
        [
            f"{t['rho']:g}",
            f"{t['E']:.1f}",
            f"{t['iota']:.2f}",
            f"{t['n_tilde_needed']:,.0f}",
            f"{t['n_needed_avg_pair']:,.0f}",
        ]
        for t in thresholds
    ]
    header = ["ρ", "E_ρ", "ι", "ñ needed per pair", "n needed (average pair)"]
    reached = [
        TEXT.fill("apvi_reaches", n=f"{reach[('APVI', b, 'theory')]:,.0f}", bonus=b)
        if reach[("APVI", b, "theory")] is not None
        else TEXT.fill("apvi_not_reached", n_max=f"{n_max:,}", bonus=b)
        for b in found.cfg.bonuses
    ]
    return {
        "theory_table": table(header, rows),
        "ratio_lo": f"{min(ratios):.0f}",
        "ratio_hi": f"{max(ratios):.0f}",
        "apvi_theory_reach": "; ".join(reached),
    }


def _observations(
    found: Findings, reach: dict[tuple[str, str, str], Any], ns: list[int]
) -> dict[str, str]:
    cfg, tuned = found.cfg, found.tuned
    b0 = cfg.bonuses[0]
    gauss = sorted(
        (v for v in found.variants if v.mechanism == "gaussian"), key=lambda v: v.rho or 0
    )
    return {
        "gauss_vs_laplace": _gauss_vs_laplace(found, reach),
        "rho_monotone": _rho_monotone([reach[(g.name, b0, "tuned")] for g in gauss], gauss),
        "bernstein_vs_hoeffding": _bernstein_vs_hoeffding(found, ns),
        "tuned_picks": ", ".join(f"{tuned[b]:g} ({b})" for b in cfg.bonuses),
        "smallest_scale": f"{min(x for x in cfg.scale_grid if x > 0):g}",
    }


def _gauss_vs_laplace(found: Findings, reach: dict[tuple[str, str, str], Any]) -> str:
    b0 = found.cfg.bonuses[0]
    gauss = [v for v in found.variants if v.mechanism == "gaussian"]
    lap = [v for v in found.variants if v.mechanism == "laplace"]
    comp = [
        TEXT.fill(
            "gauss_vs_laplace_pair",
            rho=f"{g.rho:g}",
            gaussian=_fmt_n(reach[(g.name, b0, "tuned")]),
            laplace=_fmt_n(reach[(lp.name, b0, "tuned")]),
        )
        for g, lp in zip(gauss, lap, strict=False)
    ]
    if not comp:
        return ""
    return TEXT.fill(
        "gauss_vs_laplace",
        target=f"{TARGET_SUBOPTIMALITY:g}",
        bonus0=b0,
        comparisons="; ".join(comp),
    )


def _rho_monotone(ordered: list[Any], gauss: list[Variant]) -> str:
    if not (all(x is not None for x in ordered) and len(ordered) > 1):
        return ""
    mono = all(a >= b for a, b in itertools.pairwise(ordered))
    return TEXT.fill(
        "rho_monotone",
        monotone="yes" if mono else "not monotone",
        reached=", ".join(
            f"{_fmt_n(x)} at ρ = {g.rho:g}" for x, g in zip(ordered, gauss, strict=False)
        ),
        ratios=", ".join(f"{a / b:.1f}" for a, b in itertools.pairwise(ordered)),
    )


def _bernstein_vs_hoeffding(found: Findings, ns: list[int]) -> str:
    cfg = found.cfg
    if len(cfg.bonuses) <= 1:
        return ""
    n = ns[1] if len(ns) > 1 else ns[0]
    a_b = _get(found.agg, "APVI", cfg.bonuses[0], "theory", n)
    a_h = _get(found.agg, "APVI", cfg.bonuses[1], "theory", n)
    return TEXT.fill(
        "bernstein_vs_hoeffding",
        n=f"{a_b['n']:,}",
        bernstein=_fmt(a_b["suboptimality_mean"], a_b["suboptimality_se"]),
        hoeffding=_fmt(a_h["suboptimality_mean"], a_h["suboptimality_se"]),
    )
