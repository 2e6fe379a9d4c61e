"""Figure 1's claims, plots, tables and the report's shared lines."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privrl.envs.linear import LinearMDP
from privrl.offline import FeatureTable
from privrl.offline.vapvi import dp_vapvi, gram_shift
from privrl.privacy import zcdp_to_dp
from reproductions.claims import Claim, count_verdict
from reproductions.qiao_wang.grid import (
    DELTA,
    DK_ON,
    FAILURE_PROB,
    INSTANCES,
    PEVI_XI,
    _fmt,
    _mean,
    _Setup,
)
from reproductions.templates import beside, row

TEXT = beside(__file__, "report.md.tmpl")


def numeric_table(
    header: Sequence[Any],
    rows: Sequence[Sequence[Any]],
    *,
    left: int = 0,
    right: int | None = None,
) -> str:
    """A markdown table: the first `left` columns left-aligned, the next `right` (default: all
    the others) right-aligned (``---:``), any after them left-aligned."""
    right = len(header) - left if right is None else right
    rule = "|" + "---|" * left + "---:|" * right + "---|" * (len(header) - left - right)
    return "\n".join([row(header), rule, *(row(r) for r in rows)])


def _convergence(
    agg: dict, alg: str, inst: int, c: float, ks: Sequence[int], vstar: float
) -> dict[str, Any]:
    """Claim 2's criterion for one DP-VAPVI variant: the gap to VAPVI at the largest K is at
    most half the largest gap and at most 5% of v*."""
    gaps = [_mean(agg, alg, inst, c, k) - _mean(agg, "VAPVI", inst, c, k) for k in ks]
    gmax, last = max(gaps), gaps[-1]
    ok = last <= 0.5 * max(gmax, 0.0) and last <= 0.05 * vstar
    return {"gap_at_kmax": last, "gap_max": gmax, "rel": last / vstar, "holds": bool(ok)}


def _claims_a(agg: dict, setup: _Setup, vstar: dict[int, float]) -> list[dict[str, Any]]:
    """Per (C, instance): DP-VAPVI worse than VAPVI and both beating PEVI (over the paper's K,
    DP-VAPVI as the paper ran it, D/K off); DP-VAPVI converging to VAPVI by the largest K run
    (K_extended included) with the D/K term on (``converges_holds``, ``gap_at_kmax``) and off
    (``*_off``)."""
    out = []
    ks = setup.ks
    k_all = tuple(sorted({*ks, *setup.k_extended}))
    for c in setup.scales:
        for inst in INSTANCES:
            gaps = [
                _mean(agg, "DP-VAPVI", inst, c, k) - _mean(agg, "VAPVI", inst, c, k) for k in ks
            ]
            worse = sum(g > 0 for g in gaps)
            on = _convergence(agg, DK_ON, inst, c, k_all, vstar[inst])
            off = _convergence(agg, "DP-VAPVI", inst, c, k_all, vstar[inst])
            beat_v = sum(
                _mean(agg, "VAPVI", inst, c, k) < _mean(agg, "PEVI", inst, c, k) for k in ks
            )
            beat_dp = sum(
                _mean(agg, "DP-VAPVI", inst, c, k) < _mean(agg, "PEVI", inst, c, k) for k in ks
            )
            out.append(
                {
                    "C": c,
                    "instance": inst,
                    "gaps": gaps,
                    "dp_worse_count": worse,
                    "dp_worse_holds": worse >= math.ceil(0.75 * len(ks)),
                    "k_max": k_all[-1],
                    "gap_at_kmax": on["gap_at_kmax"],
                    "gap_max": on["gap_max"],
                    "gap_at_kmax_rel_vstar": on["rel"],
                    "converges_holds": on["holds"],
                    "gap_at_kmax_off": off["gap_at_kmax"],
                    "gap_max_off": off["gap_max"],
                    "gap_at_kmax_rel_vstar_off": off["rel"],
                    "converges_off_holds": off["holds"],
                    "vapvi_beats_pevi": beat_v,
                    "dp_beats_pevi": beat_dp,
                    "beat_pevi_holds": beat_v > len(ks) / 2 and beat_dp > len(ks) / 2,
                }
            )
    return out


def _claims_b(agg: dict, setup: _Setup, rhos: Sequence[float]) -> list[dict[str, Any]]:
    """Per (C, instance): mean over K of |DP-VAPVI(ρ) − VAPVI| decreasing in ρ."""
    out = []
    for c in setup.scales:
        for inst in INSTANCES:
            dist = [
                float(
                    np.mean(
                        [
                            abs(
                                _mean(agg, _rho_name(r), inst, c, k)
                                - _mean(agg, "VAPVI", inst, c, k)
                            )
                            for k in setup.ks
                        ]
                    )
                )
                for r in rhos
            ]
            monotone = all(b < a for a, b in itertools.pairwise(dist))
            pairs = sum(b < a for a, b in itertools.pairwise(dist))
            out.append(
                {
                    "C": c,
                    "instance": inst,
                    "mean_abs_gap_by_rho": dist,
                    "decreasing_pairs": pairs,
                    "holds": bool(monotone),
                }
            )
    return out


PAPER_FIGURE_ONLY = "Section 5, figure only (no numbers)"


def gallery_claims_a(claims: Sequence[dict[str, Any]], plot: str) -> list[Claim]:
    """The gallery rows of Figure 1(a): the paper's three claims, from `_claims_a`'s cases
    (per (C, instance)) as the report's verdict table states them."""
    total = len(claims)
    n = len(claims[0]["gaps"])
    cases = "(C, instance) cases"

    def counts(key: str) -> str:
        return ", ".join(f"{c[key]}/{n}" for c in claims)

    held = [sum(bool(c[k]) for c in claims) for k in _CLAIM_KEYS]
    gap = [c["gap_at_kmax"] for c in claims]
    rel = [100 * c["gap_at_kmax_rel_vstar"] for c in claims]
    kmax = claims[0].get("k_max", "K_max")
    off = ""
    if "gap_at_kmax_off" in claims[0]:
        g_off = [c["gap_at_kmax_off"] for c in claims]
        held_off = sum(bool(c["converges_off_holds"]) for c in claims)
        off = f"; D/K off: {held_off} of {total}, gap {min(g_off):+.3f} to {max(g_off):+.3f}"
    return [
        Claim(
            "DP-VAPVI performs slightly worse than VAPVI",
            PAPER_FIGURE_ONLY,
            f"{held[0]} of {total} {cases}; DP worse at {counts('dp_worse_count')} K",
            count_verdict(held[0], total),
            plot,
        ),
        Claim(
            "as K grows, DP-VAPVI converges to VAPVI",
            PAPER_FIGURE_ONLY,
            f"with the D/K term on (constant tuned on separate instances): {held[1]} of "
            f"{total} {cases}; gap at K = {kmax} {min(gap):+.3f} to {max(gap):+.3f} "
            f"({min(rel):.1f}%–{max(rel):.1f}% of v*)" + off,
            count_verdict(held[1], total),
            plot,
        ),
        Claim(
            "DP-VAPVI (and VAPVI) outperform PEVI in most cases",
            PAPER_FIGURE_ONLY,
            f"{held[2]} of {total} {cases}; VAPVI<PEVI at {counts('vapvi_beats_pevi')} K, "
            f"DP<PEVI at {counts('dp_beats_pevi')} K",
            count_verdict(held[2], total),
            plot,
        ),
    ]


_CLAIM_KEYS = ("dp_worse_holds", "converges_holds", "beat_pevi_holds")


def gallery_claims_b(
    claims: Sequence[dict[str, Any]], rhos: Sequence[float], plot: str
) -> list[Claim]:
    """The gallery row of Figure 1(b), from `_claims_b`'s cases as the report states them."""
    held = sum(bool(c["holds"]) for c in claims)
    first = claims[0]
    d = first["mean_abs_gap_by_rho"]
    return [
        Claim(
            "a larger ρ brings DP-VAPVI closer to VAPVI",
            PAPER_FIGURE_ONLY,
            f"mean |gap| strictly decreasing along ρ = {rhos[0]:g} … {rhos[-1]:g} in {held} of "
            f"{len(claims)} (C, instance) cases (e.g. C = {first['C']:g}, instance "
            f"{first['instance']}: {d[0]:.3f} → {d[-1]:.3f})",
            count_verdict(held, len(claims)),
            plot,
        )
    ]


def _rho_name(rho: float) -> str:
    return f"DP-VAPVI ρ={rho:g}"


# --------------------------------------------------------------------------------------------
# plots and files
# --------------------------------------------------------------------------------------------


def _plot(
    path: Path,
    agg: dict,
    setup: _Setup,
    c: float,
    lines: Sequence[tuple[str, str, dict[str, Any]]],
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(INSTANCES), figsize=(5.2 * len(INSTANCES), 3.8), sharey=False)
    for ax, inst in zip(np.atleast_1d(axes), INSTANCES, strict=True):
        for alg, label, style in lines:
            ks = sorted(k for (a, i, cc, k) in agg if (a, i, cc) == (alg, inst, c))
            if not ks:
                continue
            mean = np.array([agg[(alg, inst, c, k)]["mean"] for k in ks])
            se = np.nan_to_num(np.array([agg[(alg, inst, c, k)]["se"] for k in ks]))
            ax.errorbar(ks, mean, yerr=se, capsize=3, label=label, **style)
        ax.set_xscale("log")
        if setup.k_extended:  # the paper's range ends at its largest K; beyond it is ours
            ax.axvline(setup.ks[-1], color="grey", lw=0.8, ls=":")
            ax.annotate(
                "paper's range ends", (setup.ks[-1], 0.78), xycoords=("data", "axes fraction"),
                xytext=(3, 0), textcoords="offset points", fontsize=7, color="grey",
            )  # fmt: skip
        ax.set_xlabel("number of episodes K")
        ax.set_ylabel("suboptimality v* − v^π̂")
        ax.set_title(f"instance {inst}, H = 20")
        ax.grid(alpha=0.3)
    handles, labels = np.atleast_1d(axes)[0].get_legend_handles_labels()
    # one legend for both panels, below them: never on the data
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8)
    fig.suptitle(title, fontsize=10)
    rows = -(-len(labels) // 4)
    fig.tight_layout(rect=(0, 0.06 * rows + 0.02, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _table(agg: dict, setup: _Setup, c: float, inst: int, algs: Sequence[str]) -> list[str]:
    head = "| K | " + " | ".join(algs) + " |"
    sep = "|---:|" + "---:|" * len(algs)
    lines = [head, sep]
    for k in sorted({k for (a, i, cc, k) in agg if i == inst and cc == c and a in algs}):
        lines.append(f"| {k} | " + " | ".join(_fmt(agg, a, inst, c, k) for a in algs) + " |")
    return lines


def _tables(
    agg: dict, setup: _Setup, algs: Sequence[str], scales: Sequence[float], *, titled: bool = False
) -> list[str]:
    """One `_table` per (C, instance), each under its heading ("### C = c, instance i" when
    `titled`, else "Instance i, C = c:")."""
    md: list[str] = []
    for c in scales:
        for inst in INSTANCES:
            md += [
                f"### C = {c:g}, instance {inst}" if titled else f"Instance {inst}, C = {c:g}:",
                "",
            ]
            md += _table(agg, setup, c, inst, algs)
            md.append("")
    return md


def _curve_rows(agg: dict, extra: dict[tuple, dict] | None = None) -> list[dict[str, Any]]:
    rows = []
    for (alg, inst, c, k), cell in sorted(agg.items(), key=lambda kv: (kv[0][0], *kv[0][1:])):
        row = {"algorithm": alg, "instance": inst, "C": c, "K": k, **cell}
        if extra is not None and (alg, inst, c, k) in extra:
            row["zero_q_fraction"] = extra[(alg, inst, c, k)]["mean"]
        rows.append(row)
    return rows


def _agg_json(agg: dict) -> list[dict[str, Any]]:
    return [
        {"algorithm": a, "instance": i, "C": c, "K": k, **cell}
        for (a, i, c, k), cell in sorted(agg.items(), key=lambda kv: (kv[0][0], *kv[0][1:]))
    ]


def _privacy_facts(rhos: Sequence[float]) -> list[dict[str, float]]:
    facts = []
    for r in rhos:
        facts.append(
            {
                "rho": r,
                "epsilon_bun_steinke": zcdp_to_dp(r, DELTA),
                "delta": DELTA,
                "E_strict": gram_shift(20, 10, r, FAILURE_PROB, "strict"),
            }
        )
    return facts


def _representative_report(rho: float) -> Any:
    """The privacy report every DP-VAPVI run at this ρ has (it depends on ρ, H, d only)."""
    mdp = LinearMDP.qiao_wang(0)
    data = mdp.sample(5, rng=0)
    return dp_vapvi(
        data, FeatureTable(phi=mdp.phi, scale=mdp.scale), rho=rho, rng=0, delta=DELTA,
        failure_prob=FAILURE_PROB,
    ).report  # fmt: skip


def _vstar() -> dict[int, float]:
    return {i: LinearMDP.qiao_wang(i).optimal_value() for i in INSTANCES}


def _run_config(
    setup: _Setup,
    reproduction: str,
    *,
    budget: dict[str, Any],
    extra: dict[str, Any] | None = None,
    extended: bool = True,
) -> dict[str, Any]:
    """config.json of a Figure 1 reproduction: the grid, the budget(s) and the fixed choices."""
    config: dict[str, Any] = {"reproduction": reproduction, "K": list(setup.ks)}
    if extended:
        config["K_extended"] = list(setup.k_extended)
    return {
        **config,
        "instances": list(INSTANCES),
        "seeds": setup.seeds,
        "base_seed": setup.base_seed,
        "bonus_scales": list(setup.scales),
        **budget,
        "matrix_noise": "strict",
        "delta": DELTA,
        "failure_prob": FAILURE_PROB,
        "lambda": 1.0,
        "additive_bonus": 0.0,
        "split": False,
        **(extra or {}),
        "quick": setup.quick,
    }


def _setup_lines(
    setup: _Setup, seconds: float, vstar: dict[int, float], extra: Sequence[str] = ()
) -> str:
    """The report's Setup section (`extra`: more bullets before the wall time)."""
    k_ext = ""
    if setup.k_extended:
        k_ext = TEXT.fill("k_extended", ks=", ".join(map(str, setup.k_extended)))
    return TEXT.fill(
        "setup",
        vstar0=f"{vstar[0]:.4f}",
        vstar1=f"{vstar[1]:.4f}",
        ks=", ".join(map(str, setup.ks)),
        k_extended=k_ext,
        seeds=setup.seeds,
        base_seed=setup.base_seed,
        scales=", ".join(f"{c:g}" for c in setup.scales),
        xi=PEVI_XI,
        failure_prob=FAILURE_PROB,
        delta=f"{DELTA:g}",
        extra="\n".join(extra),
        seconds=f"{seconds:.0f}",
        quick_note=" (quick mode: numbers are not final)." if setup.quick else ".",
    )
