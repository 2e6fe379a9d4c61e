"""The DP-APVI tabular study's report.md."""

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


def _table(
    agg: list[dict[str, Any]], variants: list[Variant], bonus: str, kind: str, ns: list[int]
) -> list[str]:
    lines = ["| algorithm | " + " | ".join(f"n = {n:,}" for n in ns) + " |"]
    lines.append("|---|" + "---|" * len(ns))
    for v in variants:
        cells = [
            _fmt(r["suboptimality_mean"], r["suboptimality_se"])
            for r in (_get(agg, v.name, bonus, kind, n) for n in ns)
        ]
        lines.append(f"| {v.name} | " + " | ".join(cells) + " |")
    return lines


def _render(found: Findings, summary: dict[str, Any], *, quick: bool) -> str:
    """report.md of the study (`summary` is `_summary(found)`)."""
    cfg, agg, slopes, variants = found.cfg, found.agg, found.slopes, found.variants
    tuned, tuning_table, ablation, elapsed = (
        found.tuned,
        found.tuning_table,
        found.ablation,
        found.elapsed,
    )
    n_max = summary["n_max"]
    ns = _nearest(cfg.n_grid, [100, 1000, 10_000, 100_000])
    private = [v for v in variants if v.mechanism != "none"]
    L: list[str] = []
    add = L.append
    add("# DP-APVI on random tabular MDPs (our study)")
    add("")
    if quick:
        add(
            "> **Quick smoke-test run**: a reduced grid and few seeds. The numbers below are not "
            "the study's; run `privrl reproduce dp-apvi-tabular` for the full version."
        )
        add("")
    add(
        "Qiao & Wang (*Offline Reinforcement Learning with Differential Privacy*) prove that "
        "DP-APVI's privacy cost is a lower-order term, Õ(S·H²·E_ρ/(n·d̄_m)), but run no "
        "tabular experiment, so there are no paper numbers to put beside ours. This study "
        "measures (1) whether DP-APVI converges to non-private APVI as "
        "the number of trajectories n grows and (2) whether the privacy cost — the gap "
        "between their suboptimalities — shrinks roughly like 1/n."
    )
    add("")
    add(
        f"Regenerate: `privrl reproduce dp-apvi-tabular` ({elapsed:.0f} s on this machine; "
        "`--quick` for a smoke test). Every number below is computed by that command."
    )
    add("")
    add("## Setup")
    add("")
    add(
        f"- **MDPs**: random, S = {cfg.states}, A = {cfg.actions}, H = {cfg.horizon}; "
        "P_h(·|s,a) ~ Dirichlet(1) per step, mean rewards ~ U[0,1] (public, as in the paper), "
        "uniform d1. Each seed draws its own instance."
    )
    add(
        f"- **Data**: behaviour policy with full support, π_h(a|s) = {cfg.min_prob:g} + "
        f"(1 − A·{cfg.min_prob:g})·Dirichlet(1); per seed one dataset of {n_max:,} "
        "trajectories, the size-n dataset is its first n (nested), n on a log grid "
        f"{', '.join(f'{n:,}' for n in cfg.n_grid)}."
    )
    add(
        "- **Algorithms**: APVI; DP-APVI Gaussian at ρ ∈ {"
        + ", ".join(f"{r:g}" for r in cfg.rhos)
        + "} "
        "(ρ-zCDP, σ² = 2H/ρ on n_h(s,a) and n_h(s,a,s')); DP-APVI Laplace (pure ε-DP, "
        "Lap(4H/ε)). Unit: one trajectory; relation: replace-one. Utility failure probability "
        f"δ = {cfg.utility_delta:g} in E and ι."
    )
    add(
        f"- **Laplace ε matched to ρ**: ε is what the accountant (dp-accounting RDP) states for "
        f"the Gaussian run at δ = {cfg.report_delta:g}, so both runs carry the same headline "
        f"(ε, δ = {cfg.report_delta:g}) guarantee — the Laplace run is in fact ε-DP with δ = 0: "
        + ", ".join(
            f"ρ = {v.name.split('ρ=')[1].rstrip(')')} → ε = {v.epsilon:.3f}"
            for v in private
            if v.mechanism == "laplace"
        )
        + "."
    )
    add(
        f"- **Seeds**: {cfg.seeds} evaluation seeds, common random numbers (same data for every "
        "algorithm at (seed, n); the same noise draws for every ρ and bonus at (seed, n, "
        "mechanism)). Mean ± standard error over seeds; the gap to APVI is paired per seed."
    )
    add("- **Metric**: suboptimality v* − v^π̂, exact (backward induction on the true model).")
    add(
        "- **Bonus scale**: theory (bonus_scale = 1: C1 = √2, C2 = 16) and tuned. The tuned "
        "scale is one value per bonus type, shared by APVI and every DP-APVI variant, chosen "
        "from the grid {" + ", ".join(f"{s:g}" for s in cfg.scale_grid) + "} by the mean "
        f"suboptimality over the n grid and all variants on {cfg.tuning_seeds} *separate* MDP "
        f"instances (seeds {TUNING_SEED_OFFSET}+j with their own data) — never on the "
        "evaluation instances or the data being privatised. Chosen: "
        + ", ".join(f"{b} {tuned[b]:g}" for b in cfg.bonuses)
        + "."
    )
    add("")
    add("| bonus | " + " | ".join(f"scale {s:g}" for s in cfg.scale_grid) + " |")
    add("|---|" + "---|" * len(cfg.scale_grid))
    for b in cfg.bonuses:
        row = [f"{r['mean_suboptimality']:.3f}" for r in tuning_table if r["bonus"] == b]
        add(f"| {b} (tuning instances) | " + " | ".join(row) + " |")
    add("")
    add("## Results")
    add("")
    add("![suboptimality vs n](plots/suboptimality_vs_n.png)")
    add("")
    for b in cfg.bonuses:
        add(f"**Suboptimality, {b} bonus, tuned scale ({tuned[b]:g})** (mean ± SE):")
        add("")
        L.extend(_table(agg, variants, b, "tuned", ns))
        add("")
    for b in cfg.bonuses:
        add(f"**Suboptimality, {b} bonus, theory scale (1)**:")
        add("")
        L.extend(_table(agg, variants, b, "theory", ns))
        add("")
    add(
        f"**Trajectories needed to reach mean suboptimality ≤ {TARGET_SUBOPTIMALITY:g}** "
        "(log-linear interpolation on the grid; from that n on it stays below):"
    )
    add("")
    add(
        "| algorithm | "
        + " | ".join(f"{b}, {k}" for b in cfg.bonuses for k in ("tuned", "theory"))
        + " |"
    )
    add("|---|" + "---|" * (2 * len(cfg.bonuses)))
    reach = {(r["variant"], r["bonus"], r["scale_kind"]): r["n"] for r in summary["n_to_reach"]}
    for v in variants:
        cells = []
        for b in cfg.bonuses:
            for k in ("tuned", "theory"):
                n = reach[(v.name, b, k)]
                base = reach[("APVI", b, k)]
                ratio = f" ({n / base:.0f}× APVI)" if (n and base and v.mechanism != "none") else ""
                cells.append(_fmt_n(n) + ratio)
        add(f"| {v.name} | " + " | ".join(cells) + " |")
    add("")

    # -- verdict 1: convergence
    add("### Does DP-APVI converge to APVI as n grows?")
    add("")
    conv = summary["convergence"]
    for kind in ("tuned", "theory"):
        rows = [c for c in conv if c["scale_kind"] == kind]
        ok = [c for c in rows if c["converged_by_n_max"]]
        add(
            f"**{kind.capitalize()} scale.** Gap to APVI at n = {n_max:,} (paired mean ± SE; "
            "'converged' = within max(2 SE, 0.01)):"
        )
        add("")
        add("| algorithm | bonus | gap at n max | largest gap (at n) | converged |")
        add("|---|---|---|---|---|")
        for c in rows:
            add(
                f"| {c['variant']} | {c['bonus']} | {_fmt(c['gap_at_n_max'], c['gap_se_at_n_max'])}"
                f" | {c['max_gap']:.3f} ({c['n_of_max_gap']:,}) | "
                f"{'yes' if c['converged_by_n_max'] else 'no'} |"
            )
        add("")
        if kind == "tuned":
            if len(ok) == len(rows):
                add(
                    f"**Yes** at the tuned scale: every DP-APVI variant is within noise of APVI "
                    f"by n = {n_max:,}."
                )
            else:
                lag = sorted({c["variant"] for c in rows if not c["converged_by_n_max"]})
                add(
                    f"**Yes for {len(ok)} of {len(rows)} configurations** at the tuned scale: "
                    "the gap falls from its maximum (where DP-APVI cannot yet use any pair) by "
                    "orders of magnitude. Not yet within noise at n = "
                    f"{n_max:,}: {', '.join(lag)} — these are still closing (see the table), "
                    "they need more data because their E is largest."
                )
        else:
            if not ok:
                add(
                    f"**No, not within n ≤ {n_max:,}** at the theory constants: DP-APVI's policy "
                    "stays at the value of a policy learned from nothing (every Q̃ clipped to "
                    "0), for every ρ and both mechanisms. This is not a bug but the size of the "
                    "theory bonus: see the investigation below."
                )
            else:
                add(f"{len(ok)} of {len(rows)} configurations converge at the theory scale.")
        add("")

    # -- verdict 2: 1/n
    add("### Does the privacy cost shrink like 1/n?")
    add("")
    add("![privacy gap, log-log](plots/privacy_gap_loglog.png)")
    add("")
    add(
        "Least-squares slope of log(mean gap) on log n, tuned scale, over the grid points past "
        "the E-threshold (mean fraction of (h,s,a) with ñ > E ≥ 95%) whose gap is significantly "
        "positive (mean > 2 SE); 'all' uses every significantly positive point. A slope of −1 "
        "is 1/n."
    )
    add("")
    add("| algorithm | bonus | slope past threshold | n range (points) | slope, all points |")
    add("|---|---|---|---|---|")
    tuned_slopes = [s for s in slopes if s["scale_kind"] == "tuned"]
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
        add(f"| {s['variant']} | {s['bonus']} | {past} | {rng} | {allp} |")
    add("")
    finite = [s for s in tuned_slopes if math.isfinite(s.get("slope", float("nan")))]
    if finite:
        lo = min(s["slope"] for s in finite)
        hi = max(s["slope"] for s in finite)
        faster = [s for s in finite if s["slope"] + 2 * s["slope_se"] < -1.0]
        like = [s for s in finite if -1.5 <= s["slope"] <= -0.5]
        slower = [s for s in finite if s["slope"] - 2 * s["slope_se"] > -1.0]
        add(
            f"Measured slopes past the threshold: {lo:.2f} to {hi:.2f}. "
            f"{len(faster)} of {len(finite)} are significantly steeper than −1, "
            f"{len(like)} lie in [−1.5, −0.5], {len(slower)} are significantly shallower."
        )
        add("")
        if len(faster) > len(finite) / 2:
            add(
                "**The gap shrinks, but faster than 1/n in this range** — so the claim "
                "'roughly 1/n' does not hold as stated; what holds is the bound's direction "
                "(the cost is at most a lower-order term and vanishes relative to APVI's "
                "error). The 1/n term of Theorem 3.3 is an *upper bound*, and it is not the "
                "dominant effect at these n."
            )
        elif len(like) >= len(finite) / 2:
            add("**Yes, roughly 1/n** past the threshold.")
        else:
            add("**Not like 1/n**: see the slopes above.")
        add("")
    apvi_sl = {(a["bonus"], a["scale_kind"]): a["slope"] for a in summary["apvi_slopes"]}
    add("**Investigation.** Two effects could make the slope steeper than −1:")
    add("")
    add(
        "1. *Coverage threshold.* DP-APVI treats a pair (h,s,a) as unknown while ñ ≤ E (Q̃ is "
        "zeroed by the C·H penalty, independent of bonus_scale). A pair with behaviour "
        "occupancy d becomes usable at n ≈ E/d, so the fraction of unusable pairs — and "
        "with it most of the gap — falls off like the lower tail of the occupancy "
        "distribution, much faster than 1/n, right after the threshold (the curves drop "
        "from the null-policy value to near APVI within about one decade of n; the mean "
        "known fraction is in `metrics.csv`)."
    )
    bern = apvi_sl.get((cfg.bonuses[0], "tuned"), float("nan"))
    add(
        f"2. *Fast rates of the greedy policy.* APVI's own suboptimality falls with slope "
        f"{bern:.2f} on log-log (tuned scale, {cfg.bonuses[0]}), not −0.5: with strictly "
        "positive action gaps, a policy's suboptimality is roughly quadratic in the "
        "value-estimation error (and zero once the error is below the smallest gap). The "
        "noise adds an error ∝ E/ñ ∝ 1/n to an error ∝ 1/√n, so the suboptimality "
        "difference scales like their product, ∝ n^−1.5, or faster when action gaps are "
        "resolved."
    )
    add("")
    add(
        "To separate the two, we ran DP-APVI *without its noise*: APVI on the exact counts but "
        "with DP-APVI's rule 'ñ ≤ E ⇒ unknown' at the E of each ρ (same bonus and scale). Its "
        "gap to APVI is the cost of the coverage threshold alone; the rest of DP-APVI's gap is "
        f"the noise in P̃ ({cfg.bonuses[0]}, tuned scale; mean over seeds):"
    )
    add("")
    add("| ρ | n | DP-APVI gap | threshold-only gap | threshold share of the gap |")
    add("|---|---|---|---|---|")
    shares = []
    shown = set(ns) | set(_nearest(cfg.n_grid, [3000, 30_000]))
    for r in ablation:
        significant = r["dp_gap"] > 0 and r["dp_gap"] > 2 * r["dp_gap_se"]
        if significant:
            shares.append(r["threshold_only_gap"] / r["dp_gap"])
        if r["n"] not in shown:
            continue
        share = (
            f"{r['threshold_only_gap'] / r['dp_gap']:.0%}" if significant else "— (within noise)"
        )
        add(
            f"| {r['rho']:g} | {r['n']:,} | {_fmt(r['dp_gap'], r['dp_gap_se'])} | "
            f"{r['threshold_only_gap']:.4f} | {share} |"
        )
    add("")
    if shares:
        add(
            "Over every grid point where the DP gap is significant, the threshold alone "
            f"accounts for {min(shares):.0%}–{max(shares):.0%} of it (median "
            f"{float(np.median(shares)):.0%}); the full table is `threshold_ablation` in "
            "`metrics.json`."
        )
        add("")
        g1 = next((v for v in private if v.mechanism == "gaussian" and v.rho == 1.0), None)
        if g1 is not None:
            mid = _nearest(cfg.n_grid, [3000])[0]
            row = _get(agg, g1.name, cfg.bonuses[0], "tuned", mid)
            bias, e_val = row["n_tilde_bias_mean"], row["E"]
        if float(np.median(shares)) > 0.5:
            add(
                "**The ablation settles it: the privacy cost here is mostly the coverage "
                "threshold (effect 1), not the noise in P̃ (effect 2).** Shares above 100% are "
                "real: the noisy ñ is biased upwards (n' is "
                "clipped at 0, which adds positive noise to the many zero next-state counts, and "
                "the projection lets Σx exceed n'_{s,a} by up to E/2)"
                + (
                    f" — for ρ = 1 at n = {mid:,} the mean of ñ − n over (h,s,a) is "
                    f"{bias:.1f} (E = {e_val:.1f})"
                    if g1 is not None
                    else ""
                )
                + " — so with noise a pair crosses ñ > E at a smaller true n than without."
            )
        else:
            add(
                "**The ablation points to the noise in P̃ (effect 2)**: the threshold alone "
                "explains less than half of the gap."
            )
        add("")
    add(
        "So the privacy cost is indeed a lower-order term here, and larger budgets close the "
        "gap sooner, but the log-log slope of the gap is not a clean −1 at these sample sizes."
    )
    add("")

    # -- theory scale
    ratios = [t["n_needed_avg_pair"] / n_max for t in summary["theory_threshold"]]
    add("### The theory-scale bonus at these n")
    add("")
    add(
        "At bonus_scale = 1 the privacy term of the bonus, C2·S·H·E·ι/ñ, exceeds H (so "
        "Q̃ = min(Q^p, H−h+1)⁺ = 0) unless ñ > C2·S·E·ι. With the average pair visited "
        "n/(S·A) times per step, that needs n ≳ C2·S²·A·E·ι:"
    )
    add("")
    add("| ρ | E_ρ | ι | ñ needed per pair | n needed (average pair) |")
    add("|---|---|---|---|---|")
    for t in summary["theory_threshold"]:
        add(
            f"| {t['rho']:g} | {t['E']:.1f} | {t['iota']:.2f} | {t['n_tilde_needed']:,.0f} | "
            f"{t['n_needed_avg_pair']:,.0f} |"
        )
    add("")
    add(
        f"— {min(ratios):.0f}× to {max(ratios):.0f}× beyond n = {n_max:,}. The paper's "
        "Theorem 3.3 "
        "requires n > c1·max{H², E_ρ}/d̄_m·ι with an unspecified constant; these numbers show "
        "what the stated constants (C1 = √2, C2 = 16) imply. This is why the spec exposes "
        "`bonus_scale`. APVI's theory-scale bonus has no E term, so it does learn: it reaches "
        f"mean suboptimality ≤ {TARGET_SUBOPTIMALITY:g} "
        + "; ".join(
            f"at n ≈ {reach[('APVI', b, 'theory')]:,.0f} with the {b} bonus"
            if reach[("APVI", b, "theory")] is not None
            else f"not by n = {n_max:,} with the {b} bonus"
            for b in cfg.bonuses
        )
        + ". The theory-scale gap is DP-APVI's privacy term."
    )
    add("")

    # -- other observations
    add("### Other observations")
    add("")
    b0 = cfg.bonuses[0]
    gauss = [v for v in private if v.mechanism == "gaussian"]
    lap = [v for v in private if v.mechanism == "laplace"]
    pairs = list(zip(gauss, lap, strict=False))
    comp = []
    for g, lp in pairs:
        ng, nl = reach[(g.name, b0, "tuned")], reach[(lp.name, b0, "tuned")]
        comp.append(f"ρ = {g.rho:g}: Gaussian {_fmt_n(ng)} vs Laplace {_fmt_n(nl)}")
    if comp:
        add(
            "- **Gaussian vs Laplace at matched (ε, δ)** (n to reach ≤ "
            f"{TARGET_SUBOPTIMALITY:g}, {b0}, tuned): " + "; ".join(comp) + ". The Laplace "
            "variant pays for pure DP: its per-count noise scales with the L1 sensitivity 2H "
            "(the Gaussian's with the L2 sensitivity √(2H)), and its uniform bound E_ε has a "
            "log(1/δ) where E_ρ has a √log, so E_ε is 2–3× E_ρ here."
        )
    ordered = [reach[(g.name, b0, "tuned")] for g in sorted(gauss, key=lambda v: v.rho or 0)]
    if all(x is not None for x in ordered) and len(ordered) > 1:
        mono = all(a >= b for a, b in itertools.pairwise(ordered))
        add(
            f"- **Larger ρ is closer to APVI**: {'yes' if mono else 'not monotone'} — n to "
            "reach the target "
            + ", ".join(
                f"{_fmt_n(x)} at ρ = {g.rho:g}"
                for x, g in zip(ordered, sorted(gauss, key=lambda v: v.rho or 0), strict=False)
            )
            + ". E_ρ ∝ 1/√ρ, so 10× the budget should need about √10 ≈ 3.2× fewer "
            "trajectories; measured ratios: "
            + ", ".join(f"{a / b:.1f}" for a, b in itertools.pairwise(ordered))
            + "."
        )
    if len(cfg.bonuses) > 1:
        a_b = _get(agg, "APVI", cfg.bonuses[0], "theory", ns[1] if len(ns) > 1 else ns[0])
        a_h = _get(agg, "APVI", cfg.bonuses[1], "theory", ns[1] if len(ns) > 1 else ns[0])
        add(
            f"- **Bernstein vs Hoeffding**: at the theory scale the Bernstein bonus is much "
            f"smaller, e.g. APVI at n = {a_b['n']:,}: "
            f"{_fmt(a_b['suboptimality_mean'], a_b['suboptimality_se'])} "
            f"(Bernstein) vs {_fmt(a_h['suboptimality_mean'], a_h['suboptimality_se'])} "
            "(Hoeffding). At the tuned scale the bonuses are negligible and the two coincide."
        )
    add(
        "- **Pessimism does not pay off on these instances**: the tuning picks "
        f"{', '.join(f'{tuned[b]:g} ({b})' for b in cfg.bonuses)} from the grid (scale "
        f"{min(x for x in cfg.scale_grid if x > 0):g} is its smallest positive value), "
        "essentially the plug-in greedy policy on P̃ restricted to known pairs. With a "
        "full-support behaviour "
        "policy every pair is covered, which is the regime where pessimism has least to add; "
        "the DP-specific part that remains in force is the ñ > E rule."
    )
    add("")
    add("## Files")
    add("")
    add(
        "- `metrics.csv`: mean ± SE of suboptimality and of the paired gap per (algorithm, "
        "bonus, scale, n), with the mean fraction of known pairs and E."
    )
    add("- `results_per_seed.csv`: every run.")
    add(
        "- `metrics.json`: tuning table and choice, slopes, convergence table, n to reach the "
        "target, theory thresholds."
    )
    add(
        "- `privacy.json`: the privacy report of DP-APVI Gaussian ρ = 1 (identical for every "
        "seed and n); `privacy_reports.json`: the report of every private variant."
    )
    add("- `plots/`: `suboptimality_vs_n.png`, `privacy_gap_loglog.png`, `bonus_scale_tuning.png`.")
    add("")
    return "\n".join(L)
