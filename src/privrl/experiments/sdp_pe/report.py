"""Figure 4's report.md."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from privrl.experiments.sdp_pe.jobs import Fig4Config
from privrl.online.common import make_env
from privrl.online.sdp_pe import stage_schedule
from privrl.privacy.shuffle import binary_sum_error_bound, calibrate_binary_sum


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
) -> str:
    K = cfg.episodes
    lines = [
        "# SDP-PE — Figure 4 (RiverSwim regret), reproduction",
        "",
        "Paper: *Secure Reinforcement Learning via Shuffle Privacy Model* (Bai et al., arXiv "
        "2411.11647). The extraction lost every formula and number of the experiment; the "
        "method is rebuilt in `specs/sdp_pe.md`. Regenerate with "
        "`PRIVRL_WORKERS=2 privrl reproduce sdp-pe-fig4` (the full scale below: 20 seeds × "
        "10⁶ episodes and the 3.1·10⁷-episode supplement; `--quick` for a smoke test).",
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
        "H²ι + H·E, width c = c1 = c2 = 1, bonus C = 1, β = 0.1). Nothing was tuned.",
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
        "| ε | claim | criterion | measured | holds |",
        "|---|---|---|---|---|",
    ]
    for ex in expectations:
        lines.append(
            f"| {ex['epsilon']:g} | {ex['claim']} | {ex['criterion']} | "
            f"{ex['numbers']} | {'yes' if ex['holds'] else '**no**'}"
            f"{' (both still in burn-in: not evidence)' if ex['burn_in'] else ''} |"
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
    long_keys = [k for k in merged if k[0] == "long"]
    if long_keys:
        KL = cfg.long_episodes
        lines += [
            "",
            f"### Supplement: {KL:,} episodes ({cfg.long_seeds} seeds), ε = {cfg.long_epsilon:g}",
            "",
            "![long run](plots/fig4_long.png)",
            "",
            "| algorithm | final regret | first stage that eliminates (per seed) |",
            "|---|---|---|",
        ]
        for key in sorted(long_keys, key=str):
            f = finals[f"long|{key[1]}|{'-' if key[2] is None else f'{key[2]:g}'}"]
            lines.append(
                f"| {key[1]} | {_fmt(f['mean'])} ± {_fmt(f['std'])} | "
                f"{f.get('first_elimination_stage')} |"
            )
        e = f"{cfg.long_epsilon:g}"
        tight = finals.get(f"long|SDP-PE|{e}")
        theory = finals.get(f"long|SDP-PE (theory calibration)|{e}")
        if tight and theory:
            lines += [
                "",
                f"Effect of the calibration on regret (ε = {e}): the `tight` binomial has "
                "~20–55× less variance per counter (table above), hence ~4–6× smaller E and F "
                "threshold, so SDP-PE's stages start eliminating earlier: "
                f"{_fmt(tight['mean'])} vs {_fmt(theory['mean'])} cumulative regret "
                f"({100 * (1 - tight['mean'] / theory['mean']):.0f}% less) after "
                f"{KL:,} episodes. At K = {cfg.episodes:,} both are still in burn-in and "
                "their regrets differ by < 1%.",
            ]
    lines += [
        "",
        "## Cost",
        "",
        f"Wall time {wall / 60:.1f} min with {cfg.workers} worker process(es) on a shared "
        "2-core machine; worker seconds per algorithm (all seeds; UCB-VI-type runs are "
        "vectorised over seeds, SDP-PE/PE run one seed at a time):",
        "",
    ]
    for key, f in sorted(finals.items()):
        lines.append(f"- {key}: {f['cpu_seconds']:.0f} s")
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
    grid, mean = m["grid"], m["curves"].mean(axis=0)
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
        b_loc = 6 * H / eps
        t_ldp = _first_time(
            lambda t, b=b_loc: (
                (H * S * 4 * laplace_sum_bound(b, t, beta_c) * iota_ucb + H * H * S * iota_ucb) / H
                - 4 * laplace_sum_bound(b, t, beta_c)
            ),
            10**13,
        )
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
        for e in sorted({*cfg.epsilons, cfg.long_epsilon})
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
