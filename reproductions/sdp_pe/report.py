"""Figure 4's report.md."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from privrl.online.common import make_env
from privrl.online.sdp_pe import stage_schedule
from privrl.privacy.shuffle import binary_sum_error_bound, calibrate_binary_sum
from reproductions.sdp_pe.jobs import Fig4Config


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _report(
    cfg: Fig4Config,
    merged: dict,
    finals: dict,
    expectations: list[dict[str, Any]],
    calib: list[dict[str, Any]],
    wall: float,
    *,
    quick: bool,
    sens: list[dict[str, Any]] | None = None,
    reused: bool = False,
) -> str:
    K = cfg.episodes
    lines = [
        "# SDP-PE — Figure 4 (RiverSwim regret), reproduction",
        "",
        "Paper: *Secure Reinforcement Learning via Shuffle Privacy Model* (Bai et al., arXiv "
        "2411.11647). The paper's text available to us has no formula or number of the experiment; "
        "the method is rebuilt from the paper's theory (the constants below). Regenerate with "
        "`PRIVRL_WORKERS=2 privrl reproduce sdp-pe-fig4` (the full scale below: 20 seeds × "
        f"10⁶ episodes, SDP-PE for {cfg.long_seeds} seeds × {cfg.long_episodes:.3g} episodes "
        "and the sensitivity runs; `--quick` for a smoke test).",
        "",
    ]
    if quick:
        lines += ["**QUICK RUN — smoke-test scale, numbers are not final.**", ""]
    lines += [
        "## Setup",
        "",
        f"- RiverSwim S = {cfg.states}, A = 2, H = {cfg.horizon}, start state 0, Bernoulli "
        "rewards (0.005 at (0, left), 1 at (S−1, right)). Regret is exact: "
        "V*₁(s₁) − V^{π_k}₁(s₁) per episode by backward induction on the true MDP.",
        f"- K = {K:,} episodes (one user each), {cfg.seeds} seeds (seed i = "
        f"`--seed {cfg.base_seed}+i`), ε ∈ {{{', '.join(f'{e:g}' for e in cfg.epsilons)}}}, "
        f"δ = {cfg.delta:g} (SDP-PE). Mean ± std over seeds.",
        "- SDP-PE: shuffle Privatizer, ε' = ε/(6H), δ' = δ/(6H) per counter, `tight` "
        "calibration (dashed: `theory`); stages T = B·2^(k−1), B = H·S·A (dotted lines: "
        f"stage ends); forgetting; {_n_policies(cfg):,} policies (deduplicated on unreachable "
        "(h, s)). PE: the same code, identity privatizer.",
        "- UCB-VI: the DP-UCBVI code with the identity privatizer. UCBVI-JDP: binary-tree "
        "counts (ε-DP stream ⇒ ε-JDP). UCBVI-LDP: every user adds Laplace(6H/ε) to each "
        "indicator (ε-LDP). Both pure ε-DP.",
        "- **Constants: all defaults, constant 1 in every theory-shaped term** (F threshold "
        "H²ι + H·E, width c = c1 = c2 = 1, bonus C = 1, β = 0.1). Nothing was tuned. These "
        "constants were rebuilt (the paper's formulas were lost); the verdict's sensitivity to "
        "them is measured below.",
        "",
        "## Results",
        "",
        "![Figure 4](plots/fig4.png)",
        "",
        f"Final cumulative regret at K = {K:,} (mean ± std over seeds) and regret per "
        "episode over the last 10% of episodes (slope; 0 = learned). For scale: the all-left "
        f"policy costs {_all_left_gap(cfg):.4f} per episode, the worst policy "
        f"{_worst_gap(cfg):.4f}.",
        "",
        "| algorithm | " + " | ".join(f"ε = {e:g}: regret | slope" for e in cfg.epsilons) + " |",
        "|---|" + "---|---|" * len(cfg.epsilons),
    ]
    for algo in ("UCB-VI", "PE", "SDP-PE", "SDP-PE (theory calibration)", "UCBVI-JDP", "UCBVI-LDP"):
        cells = []
        for eps in cfg.epsilons:
            e_key = None if algo in ("UCB-VI", "PE") else eps
            key = f"main|{algo}|{'-' if e_key is None else f'{eps:g}'}"
            m = merged.get(("main", algo, e_key))
            if key in finals and m is not None:
                f = finals[key]
                cells.append(f"{_fmt(f['mean'])} ± {_fmt(f['std'])} | {_slope(m):.4f}")
            else:
                cells.append("— | —")
        lines.append(f"| {algo} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "### The paper's expectations",
        "",
        "| ε | K | claim | criterion | measured | holds | kind of verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for ex in expectations:
        lines.append(
            f"| {ex['epsilon']:g} | {ex.get('episodes', K):.3g} | {ex['claim']} | "
            f"{ex['criterion']} | {ex['numbers']} | {'yes' if ex['holds'] else '**no**'}"
            f"{' (both still in burn-in: not evidence)' if ex['burn_in'] else ''} | "
            f"{ex.get('kind', '')} |"
        )
    lines += [
        "",
        "### SDP-PE stages (seed 0)",
        "",
        "| stage | T | size of F | E (fine batch) | active policies after | π* active |",
        "|---|---|---|---|---|---|",
    ]
    for eps in cfg.epsilons:
        m = merged.get(("main", "SDP-PE", eps))
        if not m or not m["logs"]:
            continue
        for e in m["logs"][0]:
            if "active_after" in e:
                lines.append(
                    f"| ε={eps:g} · {e['stage']} | {e['T']:,} | {e['infrequent']} | "
                    f"{e['E']:.1f} | {e['active_after']:,} | {e['optimal_active']} |"
                )
    lines += ["", "### Reading the result", ""]
    lines += _discussion(cfg, merged, finals)
    lines += ["", "### Why the private runs are (or are not) still exploring", ""]
    lines += _burn_in_lines(cfg)
    lines += [
        "",
        "## Calibration: `tight` vs `theory`",
        "",
        "Per-counter noise of the shuffle binary summation at the fine batch (2T users) of "
        "a few stages; E is the Assumption's bound (4 × the Bernstein bound on the raw "
        "noise, β = 0.1 over all counters and batches). Every row meets δ' exactly "
        "(column δ_exact, hockey-stick divergence at e^{ε'}).",
        "",
        "| ε | stage | batch n | tight N, p | tight Var | theory N, p | theory Var | "
        "Var ratio | E tight | E theory | δ_exact tight | δ_exact theory |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in calib:
        lines.append(
            f"| {r['epsilon']:g} | {r['stage']} | {r['batch']:,} | {r['tight_trials']:,}, "
            f"{r['tight_p']:.4f} | {r['tight_variance']:,.0f} | {r['theory_trials']:,}, "
            f"{r['theory_p']:.3g} | {r['theory_variance']:,.0f} | {r['variance_ratio']:.1f}× | "
            f"{r['E_tight']:,.0f} | {r['E_theory']:,.0f} | {r['delta_exact_tight']:.3g} | "
            f"{r['delta_exact_theory']:.3g} |"
        )
    lines += _scale_lines(cfg, merged, expectations, sens or [])
    lines += [
        "",
        "## Cost",
        "",
        (
            ""
            if reused
            else f"Wall time {wall / 60:.1f} min with {cfg.workers} worker process(es) on a "
            "shared 2-core machine; "
        )
        + ("Worker" if reused else "worker")
        + " seconds per algorithm (all seeds; UCB-VI-type runs are "
        "vectorised over seeds, SDP-PE/PE run one seed at a time):",
        "",
    ]
    for key, f in sorted(finals.items()):
        if not f.get("derived"):
            lines.append(f"- {key}: {f['cpu_seconds']:.0f} s")
    if reused:
        lines += [
            "",
            f"The main group ({cfg.seeds} seeds × {K:,} episodes) was read back from this "
            "directory's previous run (same code, same seeds; its cost is the one listed); "
            "the long and sensitivity groups ran for this version. The main group's PE/SDP-PE "
            "batches were simulated with `rollout_counts` (every episode as array work), the "
            "new runs draw a batch's counts from their law (`sample_counts`); the two are equal "
            "in law (tests/online/test_rollout_law.py), so the groups are comparable but a "
            "rerun of the main group would not repeat its exact numbers.",
        ]
    lines.append("")
    return "\n".join(lines)


def _discussion(cfg: Fig4Config, merged: dict, finals: dict) -> list[str]:
    """Data-driven remarks: who learned within K, and what the private runs were doing."""
    gap = _all_left_gap(cfg)
    out = []
    learned, burn = [], []
    for (g, a, e), m in sorted(merged.items(), key=lambda kv: str(kv[0])):
        if g != "main":
            continue
        name = a if e is None else f"{a} (ε = {e:g})"
        (burn if _slope(m) >= 0.8 * gap else learned).append(f"{name}: {_slope(m):.3f}")
    out.append(
        f"- Learning within K = {cfg.episodes:,} (final slope < 0.8 × the all-left cost "
        f"{gap:.3f}/episode): " + ("; ".join(learned) or "none") + "."
    )
    out.append(
        "- Still in burn-in (slope ≥ 0.8 × all-left cost): " + ("; ".join(burn) or "none") + "."
    )
    pe_first = finals.get("main|PE|-", {}).get("first_elimination_stage")
    if pe_first:
        out.append(
            f"- PE first eliminates at stage {pe_first[0]} (seed 0; all seeds: "
            f"{sorted(set(x for x in pe_first if x is not None))}); stage k ends after "
            "3·B·(2^k − 1) episodes, so with the theory-shaped F threshold (H²ι visits in a "
            "crude batch) PE spends most of K = 10⁶ exploring; UCB-VI's per-episode updates "
            "learn long before."
        )
    out.append(
        "- An algorithm in burn-in runs whatever its rule gives with no usable data: DP-UCBVI's "
        "bonus caps every Q̃ at H − h and the tie goes to action 0 (all-left, the cheapest "
        "uninformed policy on RiverSwim, hence zero variance across seeds); SDP-PE's "
        "explorations target (h, s, a) through a model whose tuples are all still in F, which "
        "also reduces to mostly all-left. The ordering among private methods at this K is "
        "therefore a tie-breaking artefact, not a privacy–regret comparison."
    )
    return out


def _slope(m: dict[str, Any]) -> float:
    """Mean regret per episode over the last 10% of the run (from the checkpoint grid)."""
    grid, mean = m["grid"], m["mean"]
    i = int(np.searchsorted(grid, 0.9 * grid[-1]))
    i = min(i, grid.size - 2)
    return float((mean[-1] - mean[i]) / (grid[-1] - grid[i]))


def _first_time(need: Callable[[int], float], limit: int) -> int | None:
    """Smallest t ≤ limit with need(t) < t (need non-decreasing in the cases used), by
    doubling then bisection on integers."""
    if need(limit) >= limit:
        return None
    lo, hi = 0, 1
    while need(hi) >= hi:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid) < mid:
            hi = mid
        else:
            lo = mid
    return hi


def ldp_burn_in_end(
    H: int,
    S: int,
    A: int,
    episodes: int,
    epsilon: float,
    *,
    bonus_scale: float = 1.0,
    beta: float = 0.1,
) -> int | None:
    """Earliest episode t at which a DP-UCBVI-LDP run of ``episodes`` episodes can use any row,
    on the event (probability ≥ 1 − β) that every raw noisy count is within E/4 of the truth;
    None if not before 10¹³.

    A row (h, s, a) changes the plan only if C·(H·S·E·ι + H²·S·ι) < H·ñ⁺ with
    ñ⁺ = max(n̂, 0) + 3E/4 ≤ n + E (`unusable_rows`), and n ≤ t; E = 4·(the Laplace-sum bound of
    t users at Laplace(6H/ε), β over every counter of every release), ι = ln(2HSAK/β). Before
    t, Q̃ = H − h everywhere and the greedy plan is action 0 everywhere (all-left)."""
    from privrl.privacy.tree import laplace_sum_bound

    K = int(episodes)
    iota = math.log(2 * H * S * A * K / beta)
    d = 2 * H * S * A + H * S * A * S
    beta_c = beta / (K * d)
    b = 6 * H / epsilon
    C = float(bonus_scale)

    def need(t: int) -> float:
        E = 4 * laplace_sum_bound(b, t, beta_c)
        return C * (H * S * E * iota + H * H * S * iota) / H - E

    return _first_time(need, 10**13)


def _burn_in_lines(cfg: Fig4Config) -> list[str]:
    """Public-parameter analysis: when can each private algorithm start using its data?"""
    from privrl.privacy.tree import laplace_sum_bound, tree_levels

    H, S, A, K, beta = cfg.horizon, cfg.states, 2, cfg.episodes, 0.1
    iota_ucb = math.log(2 * H * S * A * K / beta)
    d = 2 * H * S * A + H * S * A * S
    beta_c = beta / (K * d)
    lines = [
        "DP-UCBVI (C = 1) can use a row (h, s, a) only once its bonus can fall below H, i.e. "
        "H·ñ > H·S·E·ι + H²·S·ι with ñ ≤ n + E; until then Q̃ = H − h everywhere and the "
        "greedy policy is 'action 0 everywhere' (all-left on RiverSwim). Earliest episode "
        f"t at which this is possible for any row (n ≤ t, ι = {iota_ucb:.1f}):",
        "",
    ]
    for eps in cfg.epsilons:
        L = tree_levels(K)
        b_tree = L * 6 * H / eps  # smallest E over the run: a prefix of one node (popcount 1)
        E_min = 4 * laplace_sum_bound(b_tree, 1, beta_c)
        t_jdp = _first_time(
            lambda t, E=E_min: (H * S * E * iota_ucb + H * H * S * iota_ucb) / H - E, 10**13
        )
        t_ldp = ldp_burn_in_end(H, S, A, K, eps, beta=beta)
        lines.append(
            f"- ε = {eps:g}: UCBVI-JDP (tree, E ≥ {E_min:,.0f}) — t ≥ "
            f"{_fmt_t(t_jdp)}; UCBVI-LDP (E grows like √t) — t ≥ {_fmt_t(t_ldp)}."
        )
    sched = stage_schedule(max(cfg.episodes, cfg.long_episodes), H * S * A)
    iota_pe = math.log(2 * H * S * S * A * len(stage_schedule(K, H * S * A)) / beta)
    n_rel = len(stage_schedule(K, H * S * A)) * (H + 1)
    lines += [
        "",
        "SDP-PE / PE can remove a tuple from the infrequent set F (and so estimate anything "
        "beyond the first step) only if its count in the crude batch of T/H users exceeds "
        f"H²ι + H·E_crude (ι = {iota_pe:.1f}); a targeted (s, a) gets about T/(H·S·A) of "
        "those users. First stage where T/(H·S·A) exceeds the threshold (and the episodes "
        "used up to the end of that stage):",
        "",
    ]
    for label, eps, mode in [("PE", None, None)] + [
        (f"SDP-PE ε = {e:g} ({m})", e, m)
        for e in sorted({*cfg.epsilons, *cfg.long_epsilons})
        for m in ("tight", "theory")
    ]:
        first = None
        for k, T in enumerate(sched, start=1):
            n_c = T // H
            E = 0.0
            if eps is not None:
                cal = calibrate_binary_sum(eps / (6 * H), cfg.delta / (6 * H), n_c, mode)
                E = 4 * binary_sum_error_bound(cal, beta / n_rel / (H * S * A * (S + 1)))
            if n_c / (S * A) > H * H * iota_pe + H * E:
                first = (k, 3 * H * S * A * (2**k - 1), E)
                break
        if first is None:
            lines.append(f"- {label}: not within {len(sched)} stages")
        else:
            lines.append(
                f"- {label}: stage {first[0]} (after {first[1]:,} episodes; "
                f"E_crude = {first[2]:,.0f})"
            )
    return lines


def _fmt_t(t: int | None) -> str:
    return "never below 10¹³" if t is None else f"{t:,}"


def _all_left_gap(cfg: Fig4Config) -> float:
    mdp = make_env("riverswim", states=cfg.states, horizon=cfg.horizon)
    left = np.zeros((cfg.horizon, cfg.states), dtype=np.int64)
    return float(mdp.optimal_value() - mdp.value(left))


def _n_policies(cfg: Fig4Config) -> int:
    from privrl.online.common import policy_set

    return int(policy_set(make_env("riverswim", states=cfg.states, horizon=cfg.horizon)).shape[0])


def _worst_gap(cfg: Fig4Config) -> float:
    from privrl.online.common import policy_set

    mdp = make_env("riverswim", states=cfg.states, horizon=cfg.horizon)
    return float(mdp.optimal_value() - mdp.value(policy_set(mdp)).min())


def _jdp_lines(cfg: Fig4Config, merged: dict, expectations: list[dict[str, Any]]) -> list[str]:
    """UCBVI-JDP measured at K = ``jdp_long_episodes`` beside SDP-PE's long runs."""
    from reproductions.sdp_pe.analysis import _slope_at

    rows = [ex for ex in expectations if ex.get("jdp")]
    if not rows:
        return []
    skipped = [e for e in Fig4Config().jdp_long_epsilons if e not in cfg.jdp_long_epsilons]
    lines = [
        "",
        f"**UCBVI-JDP measured at K = {cfg.jdp_long_episodes:,}** ({cfg.jdp_long_seeds} "
        "seed(s), one run per ε vectorised over the seeds; solid green in the plot). 'Plan "
        "left all-left at' is, per seed, the first episode whose regret differs from the "
        "all-left cost (None: all-left throughout).",
        "",
        "| ε | UCBVI-JDP regret (mean ± std) | JDP regret/episode (last 10%) | plan left "
        "all-left at (per seed) | SDP-PE regret at K | SDP-PE / JDP | JDP < SDP-PE ≤ 1.5 × JDP "
        "| kind |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for ex in rows:
        m = merged[("jdp-long", "UCBVI-JDP", ex["epsilon"])]
        sd = float(np.interp(ex["episodes"], m["grid"], m["std"]))
        lines.append(
            f"| {ex['epsilon']:g} | {_fmt(ex['jdp_measured'])} ± {_fmt(sd)} | "
            f"{_slope_at(m, ex['episodes']):.4f} | {m.get('burn_in_measured')} | "
            f"{_fmt(ex['sdp_pe'])} | {ex['ratio']:.3g} | {'yes' if ex['holds'] else 'no'} | "
            f"{ex['kind']} |"
        )
    if skipped:
        eps = ", ".join(f"{e:g}" for e in skipped)
        lines += ["", f"Not measured at this K in this run: ε = {eps} (no row above)."]
    return lines


def _scale_lines(
    cfg: Fig4Config, merged: dict, expectations: list[dict[str, Any]], sens: list[dict[str, Any]]
) -> list[str]:
    """The long runs (where SDP-PE's stages act), the rebuilt constants and the sensitivity."""
    gap = _all_left_gap(cfg)
    KL = cfg.long_episodes
    lines: list[str] = []
    longs = {e: merged.get(("long", "SDP-PE", e)) for e in cfg.long_epsilons}
    if any(m is not None for m in longs.values()):
        lines += [
            "",
            f"## At the scale where the stages act: {KL:,} episodes",
            "",
            "![long run](plots/fig4_long.png)",
            "",
            f"SDP-PE (tight calibration, default constants) for {cfg.long_seeds} seed(s) × "
            f"{KL:,} episodes ({len(stage_schedule(KL, 2 * cfg.states * cfg.horizon))} complete "
            f"stages), each ε, and for {cfg.longer_seeds} seed(s) × {cfg.longer_episodes:,} "
            f"episodes at ε ∈ {{{', '.join(f'{e:g}' for e in cfg.longer_epsilons)}}} (one "
            "stage more, dash-dotted). **UCBVI-LDP is not measured at this scale; its cost is "
            "derived** "
            "(dotted in the plot): until the episode t in the table (computed from public "
            "quantities only: H, S, A, K, ε, β, C) no row's bonus can fall below H on the "
            "event of probability ≥ 1 − β that every noisy count is within its bound, so its "
            "greedy plan is all-left in every episode and, RiverSwim starting in state 0, its "
            "cumulative regret after k episodes is exactly k × the all-left gap "
            f"{gap:.4f}. {_ldp_measured(cfg, merged, gap)} Measuring it with its per-episode "
            "loop at this K would take hours of CPU per seed (the loop's per-episode cost is "
            "in benchmarks/results/sdp_pe_scale.json), beyond this reproduction's budget.",
            "",
            "| ε | K | SDP-PE regret (mean ± std) | SDP-PE regret/episode (last 10%) | "
            "first stage that eliminates (per seed) | UCBVI-LDP derived | "
            "LDP all-left (w.p. ≥ 1 − β) to t ≥ | SDP-PE / LDP |",
            "|---|---|---|---|---|---|---|---|",
        ]
        from reproductions.sdp_pe.analysis import (
            LDP_DERIVED,
            _first_elimination,
            _slope_at,
            _value_at,
        )

        runs = [
            ("long", e, m, sorted({min(cfg.sens_episodes, KL), KL})) for e, m in longs.items()
        ] + [
            ("longer", e, merged.get(("longer", "SDP-PE", e)), [cfg.longer_episodes])
            for e in cfg.longer_epsilons
        ]
        for group, eps, m, Ks in runs:
            if m is None:
                continue
            ldp = merged.get((group, LDP_DERIVED, eps))
            end = None if ldp is None else ldp["burn_in_end"]
            first = _first_elimination(m["logs"]) if m["logs"] else []
            for K in Ks:
                v = _value_at(m, K)
                sd = float(np.interp(K, m["grid"], m["std"]))
                ok = end is None or end > K
                lcell = f"{_fmt(gap * K)}" if ok else "not derived"
                ratio = f"{v / (gap * K):.3g}" if ok else "—"
                lines.append(
                    f"| {eps:g} | {K:,} | {_fmt(v)} ± {_fmt(sd)} | {_slope_at(m, K):.4f} | "
                    f"{first} | {lcell} | {_fmt_t(end)} | {ratio} |"
                )
        lines += ["", "Reading (per ε, the largest K run):", ""]
        for eps in sorted({ex["epsilon"] for ex in expectations if ex.get("long")}):
            rows = [ex for ex in expectations if ex.get("long") and ex["epsilon"] == eps]
            last = max(rows, key=lambda ex: ex["episodes"])
            state = (
                "still in burn-in (regret/episode ≥ 0.8 × the all-left cost)"
                if last["burn_in"]
                else "past its burn-in"
            )
            lines.append(
                f"- ε = {eps:g}, K = {last['episodes']:,}: SDP-PE is {state}; SDP-PE / "
                f"UCBVI-LDP = {last['ratio']:.3g} (ordering SDP-PE < UCBVI-LDP: "
                f"{'yes' if last['ratio'] < 1 else 'no'}; 'far below', ≤ ½: "
                f"{'yes' if last['holds'] else 'no'}) — {last['kind']}. Over the runs the ratio "
                "goes "
                + " → ".join(
                    f"{ex['ratio']:.3g}" for ex in sorted(rows, key=lambda ex: ex["episodes"])
                )
                + " while UCBVI-LDP stays in burn-in."
            )
        lines += _jdp_lines(cfg, merged, expectations)
        lines += ["", "SDP-PE stages at this scale (seed 0):", ""]
        lines += [
            "| ε | run of K | stage | T | size of F | E (fine batch) | active policies after | "
            "π* active | max gap of an active policy |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for group, eps, m, _ in runs:
            if m is None or not m["logs"]:
                continue
            first_stage = 10 if group == "long" else 18
            for e in m["logs"][0]:
                if "active_after" in e and e["stage"] >= first_stage:
                    lines.append(
                        f"| {eps:g} | {int(m['grid'][-1]):.3g} | {e['stage']} | {e['T']:,} | "
                        f"{e['infrequent']} | "
                        f"{e['E']:,.1f} | {e['active_after']:,} | {e['optimal_active']} | "
                        f"{e['max_gap_active']:.4f} |"
                    )
    lines += [
        "",
        "## Rebuilt constants and the verdict's sensitivity to them",
        "",
        "The paper's formulas are not in the text available to us; this reproduction rebuilds them "
        "from the theory with constant 1 wherever the paper's constant is unknown:",
        "",
        "- SDP-PE's infrequent-set threshold c1·H²·ι + c2·H·E (c1 = c2 = 1);",
        "- SDP-PE's elimination width c·Σ d̂·min(H − h, c1·√(S·Var·ι/ñ) + c2·(S·H·ι + H·S·E)/ñ) "
        "(c = c1 = c2 = 1; `width_scale` c scales the whole width) and the absorbing-state "
        "deficit b(π) (a decision of ours, without a constant);",
        "- DP-UCBVI's bonus constant C = 1 (both Γ and γ);",
        "- β = 0.1 in ι and E, and E = 4 × the raw noise bound (the post-processing's slack).",
        "",
    ]
    if sens:
        Ks = cfg.sens_episodes
        lines += [
            f"Each of SDP-PE's constants ×{' and ×'.join(f'{f:g}' for f in cfg.sens_factors)}, "
            f"one at a time (SDP-PE measured, {cfg.sens_seeds} seed, K = {Ks:,}); DP-UCBVI's "
            "C ×the same factors (its burn-in end and cost derived as above; when its burn-in "
            "ends before K its regret is known only from below, ≥ (t − 1) × gap, and the "
            "verdict is 'undetermined' unless SDP-PE is below half of that bound).",
            "",
            "| ε | constant | factor | SDP-PE regret | SDP-PE first eliminating stage | "
            "UCBVI-LDP (derived) | LDP burn-in to t ≥ | SDP-PE / LDP | SDP-PE < LDP | "
            "SDP-PE ≤ ½ × LDP |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sens:
            ldp = _fmt(r["ldp"]) + ("" if r["ldp_exact"] else " (lower bound)")
            order = "yes" if r["ordering_holds"] else ("no" if r["ldp_exact"] else "undetermined")
            lines.append(
                f"| {r['epsilon']:g} | {r['constant']} | {r['factor']:g} | {_fmt(r['sdp_pe'])} | "
                f"{r['sdp_pe_first_elimination']} | {ldp} | {_fmt_t(r['ldp_burn_in_end'])} | "
                f"{r['ratio']:.3g} | {order} | {r['verdict']} |"
            )
        lines += ["", *_sensitivity_summary(sens)]
        lines.append(
            f"- The constants were varied at K = {Ks:,} only (one seed); at K = "
            f"{cfg.long_episodes:,} only the defaults ran."
        )
    return lines


def _ldp_measured(cfg: Fig4Config, merged: dict, gap: float) -> str:
    """What the measured UCBVI-LDP runs (K = ``episodes``) say about the derivation."""
    parts = []
    for eps in cfg.epsilons:
        m = merged.get(("main", "UCBVI-LDP", eps))
        if m is None:
            continue
        finals = np.asarray(m["finals"], dtype=float)
        same = bool(np.allclose(finals, gap * cfg.episodes, rtol=1e-9, atol=1e-6))
        parts.append(
            f"ε = {eps:g}: {len(finals)} seeds, regret "
            + (
                f"exactly {cfg.episodes:,} × {gap:.4f} in every seed (all-left throughout)"
                if same
                else f"{finals.mean():,.1f} against the derived {gap * cfg.episodes:,.1f}"
            )
        )
    if not parts:
        return ""
    return f"Measured with the episode loop up to K = {cfg.episodes:,}: " + "; ".join(parts) + "."


def _sensitivity_summary(sens: list[dict[str, Any]]) -> list[str]:
    """One sentence per ε: how many variants keep the ordering and the '½' verdict."""
    out = []
    for eps in sorted({r["epsilon"] for r in sens}):
        rows = [r for r in sens if r["epsilon"] == eps]
        order = sum(r["ordering_holds"] for r in rows)
        half = sum(r["verdict"] == "holds" for r in rows)
        und = [f"{r['constant']} ×{r['factor']:g}" for r in rows if r["verdict"] == "undetermined"]
        out.append(
            f"- ε = {eps:g}: SDP-PE < UCBVI-LDP in {order} of {len(rows)} variants, "
            f"SDP-PE ≤ ½ × UCBVI-LDP in {half} of {len(rows)}"
            + (f"; undetermined: {', '.join(und)}" if und else "")
            + "."
        )
    return out
