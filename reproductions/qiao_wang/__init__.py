"""Reproduction of Qiao & Wang's Figure 1: PEVI, VAPVI and DP-VAPVI on the linear MDP.

* ``fig1a``: suboptimality ``v* − v^π̂`` vs K ∈ {5, …, 1000} (and beyond, to 20,000) of PEVI,
  VAPVI and DP-VAPVI (ρ = 1), DP-VAPVI with its additive D/K term off (the paper's figure) and
  on at a constant chosen on separate public instances (`tuning`);
* ``fig1b``: DP-VAPVI at ρ ∈ {0.5, 1, 5, 10, 50} vs K, with VAPVI as the reference.

Protocol: two instances of the linear MDP (`LinearMDP.qiao_wang(0)`,
`(1)`); per (instance, seed) one dataset of K_max episodes from μ, and the dataset for K is its
first K episodes, shared by every algorithm (common random numbers); DP-VAPVI's noise for
(instance, seed, K) comes from one seed shared by every ρ and C. Suboptimality is exact
(backward induction on the equivalent tabular MDP). The common bonus multiplier
C ∈ {0.1, 0.5, 1} is applied to all three algorithms alike (VAPVI/DP-VAPVI: C·√d; PEVI: C·dH√ζ,
its theory coefficient); every C is reported, none is tuned. Matrix noise is ``strict``; λ = 1;
no additive D/K bonus except in the D/K-on variant; no data split. Mean ± standard error over
seeds. Each (instance, seed) of a grid is a function cell (`privrl.runs.units`) run on the
sweep runner's local pool or Ray (``--backend``, ``--workers``); full runs cache each in
``$PRIVRL_CACHE/reproduce/qiao-wang/`` and resume after an interruption.

Besides the paper's curves, ``fig1a`` runs pre-registered diagnostics that explain the
results: DP-VAPVI with only its PD shift E/2 (no noise) and with only its noise (no shift);
PEVI with VAPVI's coefficient C√d (separates the variance weighting from the bonus size);
and K beyond the paper's range (to 20,000), to see whether DP-VAPVI converges to VAPVI with
the D/K term off and on.

Why the grid is not a sweep of the `pevi`/`vapvi`/`dp-vapvi` systems: (a) is 14,400
evaluations (30 seeds × 480 (algorithm, instance, C, K) cells, diagnostics included) and (b)
8,640, each milliseconds of regression on a prefix of one dataset shared by every algorithm
(common random numbers, with DP-VAPVI's noise shared across ρ and C), and several diagnostics
are not systems at all (they run DP-VAPVI with only its shift or only its noise). The quick
figure runs its 96 evaluations in about 1.3 s (~14 ms each); a sweep cell of the tabular
`dp-apvi` system, which has the same run-directory overhead, measured 6.8 s, so as cells the
figure would take a day.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from privrl.offline.vapvi import gram_shift
from privrl.privacy import zcdp_to_dp
from privrl.runs.rundir import RunDir
from reproductions.claims import write_claims
from reproductions.qiao_wang.grid import (
    DELTA,
    DK_ON,
    EXTENDED_ALGORITHMS,
    FAILURE_PROB,
    INSTANCES,
    PEVI_XI,
    RHO_A,
    RHOS_B,
    _aggregate,
    _mean,
    _run_grid,
    _Setup,
    _setup,
    cell_cpu_seconds,
    dk_spec,
    grid_cache,
)
from reproductions.qiao_wang.investigation import _investigation_a
from reproductions.qiao_wang.report import (
    TEXT,
    _agg_json,
    _claims_a,
    _claims_b,
    _curve_rows,
    _plot,
    _privacy_facts,
    _representative_report,
    _rho_name,
    _run_config,
    _setup_lines,
    _tables,
    _vstar,
    gallery_claims_a,
    gallery_claims_b,
    numeric_table,
)
from reproductions.qiao_wang.tuning import Tuning, tune, tuning_lines

__all__ = ["fig1a", "fig1b"]


def fig1a(
    out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False, **where: Any
) -> Path:
    """Figure 1(a): PEVI, VAPVI and DP-VAPVI (ρ = 1) vs K; writes report.md and returns it.
    Each (instance, seed) of its grids is a function cell on the sweep runner (`where`:
    backend=, workers=)."""
    run = RunDir(out)
    setup = _setup(seeds, seed, quick, extended=True)
    algorithms: dict[str, list[Any]] = {
        "PEVI": ["pevi"],
        "VAPVI": ["vapvi"],
        "DP-VAPVI": ["dp", RHO_A],
        "diag: DP-VAPVI shift only": ["diag", "shift", RHO_A],
        "diag: DP-VAPVI noise only": ["diag", "noise", RHO_A],
        "diag: PEVI β=C√d": ["pevi-matched"],
        "diag: VAPVI unscaled φ": ["vapvi-unscaled"],
        "diag: DP-VAPVI unscaled φ": ["dp-unscaled", RHO_A],
    }
    extended = tuple(a for a in EXTENDED_ALGORITHMS if a != DK_ON)
    t0 = time.perf_counter()
    # Full runs are cached per (instance, seed) and resume: the grid without the D/K term, the
    # D/K constant on its own public instances, then DP-VAPVI + D/K at that constant (same
    # data and noise seeds as DP-VAPVI).
    cache = None if setup.quick else grid_cache("fig1a", setup, [*algorithms, "|", *extended])
    rows = _run_grid(
        setup, algorithms, extended_algorithms=extended, cache=cache, label="qiao-wang-fig1a",
        **where,
    )  # fmt: skip
    tuning = tune(setup.quick, setup.scales, cache=not setup.quick, **where)
    dk = {DK_ON: dk_spec(RHO_A, tuning.chosen)}
    cache = None if setup.quick else grid_cache("fig1a-dk", setup, [DK_ON], dk=tuning.chosen)
    dk_rows = _run_grid(
        setup, dk, extended_algorithms=(DK_ON,), cache=cache, label="qiao-wang-fig1a: D/K on",
        **where,
    )  # fmt: skip
    cell_cpu = cell_cpu_seconds(rows) + cell_cpu_seconds(dk_rows)
    rows += dk_rows
    seconds = time.perf_counter() - t0
    agg = _aggregate(rows)
    zero = _aggregate(rows, "zero_q")
    extras = {
        "zero_q": zero,
        "cap_q": _aggregate(rows, "cap_q"),
        "v_hat": _aggregate(rows, "v_hat"),
    }
    vstar = _vstar()
    claims = _claims_a(agg, setup, vstar)
    report_priv = _representative_report(RHO_A)

    run.write_config(_fig1a_config(setup, tuning))
    run.write_metrics(_fig1a_metrics(setup, agg, extras, claims, vstar, tuning, seconds, cell_cpu))
    run.write_curve(_curve_rows(agg, zero))
    run.write_privacy(report_priv)
    plots = _fig1a_plots(run, agg, setup)

    md = _report_a(
        setup, agg, extras, claims, vstar, seconds, plots=plots, root=run.path, priv=report_priv,
        tuning=tuning, cell_cpu=cell_cpu,
    )  # fmt: skip
    target = run.artifact("report.md")
    target.write_text(md)
    write_claims(run.path, gallery_claims_a(claims, f"plots/fig1a_C{setup.scales[0]:g}.png"))
    return target


def _fig1a_config(setup: _Setup, tuning: Tuning) -> dict[str, Any]:
    """config.json of Figure 1(a): the grid, ρ, PEVI's ξ and the D/K constant's tuning."""
    return _run_config(
        setup,
        "qiao-wang-fig1a",
        budget={"rho": RHO_A},
        extra={
            "pevi_xi": PEVI_XI,
            "dk_on": {
                "numerator": "D = c * 2 H^3 sqrt(d)",
                "c_by_C": {f"{c:g}": m for c, m in tuning.chosen.items()},
                "tuning": {
                    k: v
                    for k, v in tuning.as_json().items()
                    if k not in ("score", "wall_seconds", "cell_cpu_seconds")
                },
            },
        },
    )


def _fig1a_metrics(
    setup: _Setup,
    agg: dict,
    extras: dict[str, dict],
    claims: list[dict[str, Any]],
    vstar: dict[int, float],
    tuning: Tuning,
    seconds: float,
    cell_cpu: float,
) -> dict[str, Any]:
    """metrics.json of Figure 1(a): the headline cells, every cell and the diagnostics."""
    main_c = setup.scales[-1]
    kmax = setup.ks[-1]
    return {
        "suboptimality": {
            alg: {str(i): _mean(agg, alg, i, main_c, kmax) for i in INSTANCES}
            for alg in ("PEVI", "VAPVI", "DP-VAPVI", DK_ON)
        },
        "suboptimality_note": f"at K = {kmax}, C = {main_c:g}; all cells in 'cells'",
        "dk_tuning": tuning.as_json(),
        "v_star": {str(i): v for i, v in vstar.items()},
        "claims": claims,
        "cells": _agg_json(agg),
        "zero_q_fraction": _agg_json(extras["zero_q"]),
        "cap_q_fraction": _agg_json(extras["cap_q"]),
        "pessimistic_value_estimate": _agg_json(extras["v_hat"]),
        "privacy": _privacy_facts([RHO_A]),
        "wall_seconds": seconds,
        "cell_cpu_seconds": cell_cpu,
    }


def _fig1a_plots(run: RunDir, agg: dict, setup: _Setup) -> list[Path]:
    """One Figure 1(a) plot per C, then the diagnostics at the largest C (the last path)."""
    lines = [("PEVI", "PEVI", {"marker": "s"}), ("VAPVI", "VAPVI", {"marker": "o"}),
             ("DP-VAPVI", f"DP-VAPVI (ρ={RHO_A:g}), D/K off", {"marker": "^"})]  # fmt: skip
    dk_label = f"DP-VAPVI (ρ={RHO_A:g}), D/K on"
    lines.append((DK_ON, dk_label, {"marker": "v", "ls": "--"}))
    plots = []
    for c in setup.scales:
        p = run.plot_path(f"fig1a_C{c:g}")
        _plot(p, agg, setup, c, lines, f"Figure 1(a) reproduction, C = {c:g}")
        plots.append(p)
    diag_lines = [
        ("VAPVI", "VAPVI", {"marker": "o"}),
        ("DP-VAPVI", "DP-VAPVI (ρ=1), D/K off", {"marker": "^"}),
        (DK_ON, "DP-VAPVI (ρ=1), D/K on", {"marker": "v"}),
        ("diag: DP-VAPVI shift only", "shift E/2 only, no noise", {"ls": "--"}),
        ("diag: DP-VAPVI noise only", "noise only, no shift", {"ls": ":"}),
        ("diag: PEVI β=C√d", "PEVI with β = C√d", {"ls": "-."}),
    ]
    main_c = setup.scales[-1]
    diag_plot = run.plot_path(f"fig1a_diagnostics_C{main_c:g}")
    _plot(diag_plot, agg, setup, main_c, diag_lines, f"Diagnostics, C = {main_c:g}")
    return [*plots, diag_plot]


def _report_a(
    setup: _Setup,
    agg: dict,
    extras: dict[str, dict],
    claims: list[dict[str, Any]],
    vstar: dict[int, float],
    seconds: float,
    *,
    plots: list[Path],
    root: Path,
    priv: Any,
    tuning: Tuning,
    cell_cpu: float,
) -> str:
    main = ("PEVI", "VAPVI", "DP-VAPVI", DK_ON)
    kall = tuple(sorted({*setup.ks, *setup.k_extended}))
    figures = [f"![Figure 1(a), C = {c:g}]({p.relative_to(root).as_posix()})" for c, p in
               zip(setup.scales, plots, strict=False)]  # fmt: skip
    fields = {
        "quick_flag": " --quick" if setup.quick else "",
        "setup": _setup_lines(setup, seconds, vstar, _dk_setup_lines(setup, tuning, cell_cpu)),
        "privacy": priv.summary(),
        "epsilon": f"{zcdp_to_dp(RHO_A, DELTA):.3f}",
        "delta": f"{DELTA:g}",
        "k_paper": setup.ks[-1],
        "k_all": kall[-1],
        "claims_table": _claims_table_a(claims, len(setup.ks), kall[-1]),
        "claim1": _held(claims, "dp_worse_holds"),
        "claim2": _held(claims, "converges_holds"),
        "claim2_off": _held(claims, "converges_off_holds"),
        "claim3": _held(claims, "beat_pevi_holds"),
        "dk_section": _dk_section(setup, agg, claims, tuning, kall),
        "tables": "\n".join(_tables(agg, setup, main, setup.scales, titled=True)),
        "plots": "\n".join(figures),
        "investigation": "\n".join(_investigation_a(setup, agg, extras, vstar, plots[-1], root)),
    }
    return TEXT.fill("fig1a", fields) + "\n"


def _claims_table_a(claims: list[dict[str, Any]], n: int, kmax: int) -> str:
    """Figure 1(a)'s verdicts per (C, instance): the three claims' criteria and results."""
    header = ["C", "instance", "1: DP worse (K count)", f"2: gap at K = {kmax}, D/K on (max gap)",
              "holds?", "2: gap, D/K off", "holds?", "3: VAPVI<PEVI, DP<PEVI (K count)",
              "holds?"]  # fmt: skip
    rows = [
        [f"{c['C']:g}", c["instance"],
         f"{c['dp_worse_count']}/{n} ({'holds' if c['dp_worse_holds'] else 'does not hold'})",
         f"{c['gap_at_kmax']:+.3f} ({c['gap_max']:+.3f}; "
         f"{100 * c['gap_at_kmax_rel_vstar']:.1f}% of v*)",
         _yes(c["converges_holds"]),
         f"{c['gap_at_kmax_off']:+.3f} ({100 * c['gap_at_kmax_rel_vstar_off']:.1f}% of v*)",
         _yes(c["converges_off_holds"]),
         f"{c['vapvi_beats_pevi']}/{n}, {c['dp_beats_pevi']}/{n}",
         _yes(c["beat_pevi_holds"])]
        for c in claims
    ]  # fmt: skip
    return numeric_table(header, rows, right=2)


def _yes(holds: bool) -> str:
    return "yes" if holds else "no"


def _held(claims: list[dict[str, Any]], key: str) -> str:
    """In how many (C, instance) cases the claim `key` holds, and which (when not all)."""
    held = [f"C = {c['C']:g}/instance {c['instance']}" for c in claims if c[key]]
    which = f" ({', '.join(held)})" if held and len(held) < len(claims) else ""
    return TEXT.fill("held", held=len(held), total=len(claims), which=which)


def _dk_setup_lines(setup: _Setup, tuning: Tuning, cell_cpu: float) -> list[str]:
    n_cells = len(INSTANCES) * setup.seeds
    text = TEXT.fill(
        "dk_setup",
        chosen=", ".join(f"C = {c:g}: c = {m:g}" for c, m in tuning.chosen.items()),
        cell_cpu=f"{cell_cpu:.1f}",
        seeds=setup.seeds,
        instances=len(INSTANCES),
        cells=n_cells,
        cpu_minutes=f"{n_cells * cell_cpu / 60:.0f}",
        tuning_cells=len(tuning.setup.instances) * tuning.setup.seeds,
        tuning_cpu=f"{tuning.cell_cpu:.1f}",
    )
    return text.split("\n")


def _dk_section(
    setup: _Setup, agg: dict, claims: list[dict[str, Any]], tuning: Tuning, kall: tuple[int, ...]
) -> str:
    """The D/K term on: the tuning, and DP-VAPVI's gap to VAPVI with the term on and off."""
    kmax = kall[-1]
    shown = [k for k in (setup.ks[-1], *setup.k_extended) if k in kall]
    rows = []
    for c in setup.scales:
        for inst in INSTANCES:
            cells = []
            for k in shown:
                v = _mean(agg, "VAPVI", inst, c, k)
                on, off = _mean(agg, DK_ON, inst, c, k) - v, _mean(agg, "DP-VAPVI", inst, c, k) - v
                cells.append(f"{on:+.3f} ({off:+.3f})")
            rows.append([f"{c:g}", inst, *cells])
    held = sum(bool(c["converges_holds"]) for c in claims)
    gaps = [c["gap_at_kmax"] for c in claims]
    gaps_off = [c["gap_at_kmax_off"] for c in claims]
    return TEXT.fill(
        "dk_section",
        tuning=tuning_lines(tuning),
        gap_table=numeric_table(["C", "instance", *(f"K = {k}" for k in shown)], rows),
        kmax=kmax,
        held=held,
        total=len(claims),
        gap_lo=f"{min(gaps):+.3f}",
        gap_hi=f"{max(gaps):+.3f}",
        off_lo=f"{min(gaps_off):+.3f}",
        off_hi=f"{max(gaps_off):+.3f}",
        why=_dk_why(tuning) if held < len(claims) else TEXT.fill("dk_closed"),
    )


def _dk_why(tuning: Tuning) -> str:
    """Why the D/K term does not close the gap (and, when so, that larger constants are worse)."""
    larger_worse = all(
        score > row[tuning.chosen[c]]
        for c, row in tuning.score.items()
        for m, score in row.items()
        if m > tuning.chosen[c]
    )
    more = TEXT.fill("dk_larger_worse") if larger_worse else ""
    return TEXT.fill("dk_open", larger_worse=more)


def fig1b(
    out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False, **where: Any
) -> Path:
    """Figure 1(b): DP-VAPVI at ρ ∈ {0.5, 1, 5, 10, 50} vs K (VAPVI as reference)."""
    run = RunDir(out)
    setup = _setup(seeds, seed, quick, extended=False)
    rhos = RHOS_B
    algorithms: dict[str, list[Any]] = {"VAPVI": ["vapvi"]}
    for r in rhos:
        algorithms[_rho_name(r)] = ["dp", r]
    t0 = time.perf_counter()
    rows = _run_grid(setup, algorithms, label="qiao-wang-fig1b", **where)
    seconds = time.perf_counter() - t0
    agg = _aggregate(rows)
    zero = _aggregate(rows, "zero_q")
    vstar = _vstar()
    claims = _claims_b(agg, setup, rhos)
    priv = _representative_report(rhos[0])
    run.write_config(
        _run_config(setup, "qiao-wang-fig1b", budget={"rhos": list(rhos)}, extended=False)
    )
    main_c = setup.scales[-1]
    kmax = setup.ks[-1]
    run.write_metrics(
        {
            "suboptimality": {
                alg: {str(i): _mean(agg, alg, i, main_c, kmax) for i in INSTANCES}
                for alg in algorithms
            },
            "suboptimality_note": f"at K = {kmax}, C = {main_c:g}; all cells in 'cells'",
            "v_star": {str(i): v for i, v in vstar.items()},
            "claims": claims,
            "cells": _agg_json(agg),
            "zero_q_fraction": _agg_json(zero),
            "privacy": _privacy_facts(rhos),
            "privacy_json_note": f"privacy.json is the report of a DP-VAPVI run at ρ = {rhos[0]:g}",
            "wall_seconds": seconds,
        }
    )
    run.write_curve(_curve_rows(agg, zero))
    run.write_privacy(priv)
    lines = [("VAPVI", "VAPVI (non-private)", {"marker": "o", "color": "black", "ls": "--"})]
    lines += [(_rho_name(r), f"DP-VAPVI ρ={r:g}", {"marker": "^"}) for r in rhos]
    plots = []
    for c in setup.scales:
        p = run.plot_path(f"fig1b_C{c:g}")
        _plot(p, agg, setup, c, lines, f"Figure 1(b) reproduction, C = {c:g}")
        plots.append(p)

    md = _report_b(setup, agg, claims, vstar, seconds, plots=plots, root=run.path)
    target = run.artifact("report.md")
    target.write_text(md)
    write_claims(run.path, gallery_claims_b(claims, rhos, f"plots/fig1b_C{setup.scales[0]:g}.png"))
    return target


def _report_b(
    setup: _Setup,
    agg: dict,
    claims: list[dict[str, Any]],
    vstar: dict[int, float],
    seconds: float,
    *,
    plots: list[Path],
    root: Path,
) -> str:
    rhos = RHOS_B
    privacy = []
    for r in rhos:
        rep = _representative_report(r)
        privacy.append(
            [f"{r:g}", f"{rep.epsilon:.3f}", f"{zcdp_to_dp(r, DELTA):.3f}",
             f"{gram_shift(20, 10, r, FAILURE_PROB):.1f}"]
        )  # fmt: skip
    n_pairs = len(rhos) - 1
    verdicts = [
        [f"{c['C']:g}", c["instance"], ", ".join(f"{x:.3f}" for x in c["mean_abs_gap_by_rho"]),
         f"{c['decreasing_pairs']}/{n_pairs}", _yes(c["holds"])]
        for c in claims
    ]  # fmt: skip
    header = ["C", "instance", "mean |gap| per ρ", "decreasing steps", "holds?"]
    algs = ("VAPVI", *(_rho_name(r) for r in rhos))
    figures = [f"![Figure 1(b), C = {c:g}]({p.relative_to(root).as_posix()})" for c, p in
               zip(setup.scales, plots, strict=True)]  # fmt: skip
    text = TEXT.fill(
        "fig1b",
        quick_flag=" --quick" if setup.quick else "",
        setup=_setup_lines(setup, seconds, vstar),
        delta=f"{DELTA:g}",
        privacy_table=numeric_table(["ρ", "ε (RDP accountant)", "ε (Bun–Steinke)", "E"], privacy),
        rhos=", ".join(f"{r:g}" for r in rhos),
        claims_table=numeric_table(header, verdicts, right=2),
        held=sum(c["holds"] for c in claims),
        total=len(claims),
        tables="\n".join(_tables(agg, setup, algs, setup.scales, titled=True)),
        plots="\n".join(figures),
    )
    return text + "\n\n"
