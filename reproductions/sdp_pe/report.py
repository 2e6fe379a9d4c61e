"""Figure 4's report.md."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privrl.online.common import make_env
from privrl.online.sdp_pe import stage_schedule
from privrl.privacy.shuffle import binary_sum_error_bound, calibrate_binary_sum
from reproductions.sdp_pe.burn_in import first_time, ldp_burn_in_end
from reproductions.sdp_pe.jobs import Fig4Config
from reproductions.templates import beside, table

TEXT = beside(__file__, "report.md.tmpl")


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


@dataclass(frozen=True)
class Fig4ReportInputs:
    """What report.md is written from: the config, the merged groups and their finals, the
    expectations, the calibration table, the wall time (seconds), whether this is a quick run,
    the sensitivity rows and whether the main group was read back from a previous run."""

    cfg: Fig4Config
    merged: dict
    finals: dict
    expectations: list[dict[str, Any]]
    calib: list[dict[str, Any]]
    wall: float
    quick: bool
    sens: list[dict[str, Any]] = field(default_factory=list)
    reused: bool = False


ALGORITHMS = ("UCB-VI", "PE", "SDP-PE", "SDP-PE (theory calibration)", "UCBVI-JDP", "UCBVI-LDP")


def _report(inputs: Fig4ReportInputs) -> str:
    """report.md (prose: report.md.tmpl)."""
    cfg, merged, finals = inputs.cfg, inputs.merged, inputs.finals
    main = {
        "seeds": str(cfg.seeds),
        "K": f"{cfg.episodes:,}",
    }
    cost = (
        TEXT.fill("cost_reused")
        if inputs.reused
        else TEXT.fill("cost_fresh", minutes=f"{inputs.wall / 60:.1f}", workers=cfg.workers)
    )
    fields = {
        **main,
        "long_seeds": str(cfg.long_seeds),
        "long_episodes": f"{cfg.long_episodes:.3g}",
        "quick_note": TEXT.fill("quick_note") + "\n" if inputs.quick else "",
        "states": str(cfg.states),
        "horizon": str(cfg.horizon),
        "base_seed": str(cfg.base_seed),
        "epsilons": ", ".join(f"{e:g}" for e in cfg.epsilons),
        "delta": f"{cfg.delta:g}",
        "n_policies": f"{_n_policies(cfg):,}",
        "all_left_gap": f"{_all_left_gap(cfg):.4f}",
        "worst_gap": f"{_worst_gap(cfg):.4f}",
        "regret_table": _regret_table(cfg, merged, finals),
        "expectations_table": _expectations_table(inputs.expectations, cfg.episodes),
        "stages_table": _stages_table(cfg, merged),
        "discussion": "\n".join(_discussion(cfg, merged, finals)),
        "burn_in": "\n".join(_burn_in_lines(cfg)),
        "calibration_table": _calibration_markdown(inputs.calib),
        "scale": "\n".join(_scale_lines(cfg, merged, inputs.expectations, inputs.sens)),
        "cost": cost,
        "cpu_seconds": "\n".join(
            f"- {key}: {f['cpu_seconds']:.0f} s"
            for key, f in sorted(finals.items())
            if not f.get("derived")
        ),
        "reused_note": TEXT.fill("reused_note", main) if inputs.reused else "",
    }
    return TEXT.fill("report", fields) + "\n"


def _regret_table(cfg: Fig4Config, merged: dict, finals: dict) -> str:
    rows = []
    for algo in ALGORITHMS:
        cells = [algo]
        for eps in cfg.epsilons:
            e_key = None if algo in ("UCB-VI", "PE") else eps
            key = f"main|{algo}|{'-' if e_key is None else f'{eps:g}'}"
            m = merged.get(("main", algo, e_key))
            if key in finals and m is not None:
                f = finals[key]
                cells.append(f"{_fmt(f['mean'])} ± {_fmt(f['std'])} | {_slope(m):.4f}")
            else:
                cells.append("— | —")
        rows.append(cells)
    header = ["algorithm"] + [c for e in cfg.epsilons for c in (f"ε = {e:g}: regret", "slope")]
    return table(header, rows)


def _expectations_table(expectations: list[dict[str, Any]], K: int) -> str:
    header = ["ε", "K", "claim", "criterion", "measured", "holds", "kind of verdict"]
    rows = [
        [
            f"{ex['epsilon']:g}",
            f"{ex.get('episodes', K):.3g}",
            ex["claim"],
            ex["criterion"],
            ex["numbers"],
            ("yes" if ex["holds"] else "**no**")
            + (" (both still in burn-in: not evidence)" if ex["burn_in"] else ""),
            ex.get("kind", ""),
        ]
        for ex in expectations
    ]
    return table(header, rows)


def _stages_table(cfg: Fig4Config, merged: dict) -> str:
    rows = []
    for eps in cfg.epsilons:
        m = merged.get(("main", "SDP-PE", eps))
        if not m or not m["logs"]:
            continue
        rows += [
            [
                f"ε={eps:g} · {e['stage']}",
                f"{e['T']:,}",
                e["infrequent"],
                f"{e['E']:.1f}",
                f"{e['active_after']:,}",
                e["optimal_active"],
            ]
            for e in m["logs"][0]
            if "active_after" in e
        ]
    header = ["stage", "T", "size of F", "E (fine batch)", "active policies after", "π* active"]
    return table(header, rows)


def _calibration_markdown(calib: list[dict[str, Any]]) -> str:
    header = [
        "ε",
        "stage",
        "batch n",
        "tight N, p",
        "tight Var",
        "theory N, p",
        "theory Var",
        "Var ratio",
        "E tight",
        "E theory",
        "δ_exact tight",
        "δ_exact theory",
    ]
    rows = [
        [
            f"{r['epsilon']:g}",
            r["stage"],
            f"{r['batch']:,}",
            f"{r['tight_trials']:,}, {r['tight_p']:.4f}",
            f"{r['tight_variance']:,.0f}",
            f"{r['theory_trials']:,}, {r['theory_p']:.3g}",
            f"{r['theory_variance']:,.0f}",
            f"{r['variance_ratio']:.1f}×",
            f"{r['E_tight']:,.0f}",
            f"{r['E_theory']:,.0f}",
            f"{r['delta_exact_tight']:.3g}",
            f"{r['delta_exact_theory']:.3g}",
        ]
        for r in calib
    ]
    return table(header, rows)


def _discussion(cfg: Fig4Config, merged: dict, finals: dict) -> list[str]:
    """Data-driven remarks: who learned within K, and what the private runs were doing."""
    gap = _all_left_gap(cfg)
    learned, burn = [], []
    for (g, a, e), m in sorted(merged.items(), key=lambda kv: str(kv[0])):
        if g != "main":
            continue
        name = a if e is None else f"{a} (ε = {e:g})"
        (burn if _slope(m) >= 0.8 * gap else learned).append(f"{name}: {_slope(m):.3f}")
    pe_first = finals.get("main|PE|-", {}).get("first_elimination_stage")
    text = TEXT.fill(
        "discussion",
        K=f"{cfg.episodes:,}",
        gap=f"{gap:.3f}",
        learned="; ".join(learned) or "none",
        burn="; ".join(burn) or "none",
        pe_first=TEXT.fill(
            "pe_first",
            stage=pe_first[0],
            stages=sorted(set(x for x in pe_first if x is not None)),
        )
        if pe_first
        else "",
    )
    return text.split("\n")


def _slope(m: dict[str, Any]) -> float:
    """Mean regret per episode over the last 10% of the run (from the checkpoint grid)."""
    grid, mean = m["grid"], m["mean"]
    i = int(np.searchsorted(grid, 0.9 * grid[-1]))
    i = min(i, grid.size - 2)
    return float((mean[-1] - mean[i]) / (grid[-1] - grid[i]))


def _burn_in_lines(cfg: Fig4Config) -> list[str]:
    """Public-parameter analysis: when can each private algorithm start using its data?"""
    H, S, A, K, beta = cfg.horizon, cfg.states, 2, cfg.episodes, 0.1
    iota_ucb = math.log(2 * H * S * A * K / beta)
    iota_pe = math.log(2 * H * S * S * A * len(stage_schedule(K, H * S * A)) / beta)
    text = TEXT.fill(
        "burn_in",
        iota_ucb=f"{iota_ucb:.1f}",
        ucbvi="\n".join(_ucbvi_burn_in(cfg, iota_ucb, beta)),
        iota_pe=f"{iota_pe:.1f}",
        pe="\n".join(_pe_burn_in(cfg, iota_pe, beta)),
    )
    return text.split("\n")


def _ucbvi_burn_in(cfg: Fig4Config, iota_ucb: float, beta: float) -> list[str]:
    """Per ε, the earliest episode at which UCBVI-JDP / UCBVI-LDP can use any row."""
    from privrl.privacy.tree import laplace_sum_bound, tree_levels

    H, S, A, K = cfg.horizon, cfg.states, 2, cfg.episodes
    d = 2 * H * S * A + H * S * A * S
    beta_c = beta / (K * d)
    out = []
    for eps in cfg.epsilons:
        L = tree_levels(K)
        b_tree = L * 6 * H / eps  # smallest E over the run: a prefix of one node (popcount 1)
        E_min = 4 * laplace_sum_bound(b_tree, 1, beta_c)
        t_jdp = first_time(
            lambda t, E=E_min: (H * S * E * iota_ucb + H * H * S * iota_ucb) / H - E, 10**13
        )
        t_ldp = ldp_burn_in_end(H, S, A, K, eps, beta=beta)
        out.append(
            TEXT.fill(
                "burn_in_ucbvi",
                epsilon=f"{eps:g}",
                E_min=f"{E_min:,.0f}",
                t_jdp=_fmt_t(t_jdp),
                t_ldp=_fmt_t(t_ldp),
            )
        )
    return out


def _pe_burn_in(cfg: Fig4Config, iota_pe: float, beta: float) -> list[str]:
    """Per PE / SDP-PE variant, the first stage whose crude batch can leave F."""
    H, S, A, K = cfg.horizon, cfg.states, 2, cfg.episodes
    sched = stage_schedule(max(cfg.episodes, cfg.long_episodes), H * S * A)
    n_rel = len(stage_schedule(K, H * S * A)) * (H + 1)
    out = []
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
            out.append(TEXT.fill("burn_in_pe_never", label=label, stages=len(sched)))
        else:
            out.append(
                TEXT.fill(
                    "burn_in_pe",
                    label=label,
                    stage=first[0],
                    episodes=f"{first[1]:,}",
                    E=f"{first[2]:,.0f}",
                )
            )
    return out


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
    lines: list[str] = []
    longs = {e: merged.get(("long", "SDP-PE", e)) for e in cfg.long_epsilons}
    if any(m is not None for m in longs.values()):
        lines += ["", *_long_runs(cfg, merged, expectations, longs).split("\n")]
    lines += ["", *TEXT.fill("rebuilt_constants").split("\n"), ""]
    if sens:
        lines += _sensitivity_section(cfg, sens).split("\n")
    return lines


def _long_runs(
    cfg: Fig4Config,
    merged: dict,
    expectations: list[dict[str, Any]],
    longs: dict[float, dict[str, Any] | None],
) -> str:
    """The section on the runs of ``long_episodes`` (and ``longer_episodes``) episodes."""
    gap = _all_left_gap(cfg)
    KL = cfg.long_episodes
    runs = [("long", e, m, sorted({min(cfg.sens_episodes, KL), KL})) for e, m in longs.items()]
    runs += [
        ("longer", e, merged.get(("longer", "SDP-PE", e)), [cfg.longer_episodes])
        for e in cfg.longer_epsilons
    ]
    return TEXT.fill(
        "long_runs",
        KL=f"{KL:,}",
        long_seeds=cfg.long_seeds,
        stages=len(stage_schedule(KL, 2 * cfg.states * cfg.horizon)),
        longer_seeds=cfg.longer_seeds,
        longer_episodes=f"{cfg.longer_episodes:,}",
        longer_epsilons=", ".join(f"{e:g}" for e in cfg.longer_epsilons),
        gap=f"{gap:.4f}",
        ldp_measured=_ldp_measured(cfg, merged, gap),
        long_table=_long_table(merged, runs, gap),
        readings="\n".join(_readings(expectations)),
        jdp="\n".join(_jdp_lines(cfg, merged, expectations)),
        long_stages_table=_long_stages_table(runs),
    )


def _long_table(merged: dict, runs: list[tuple], gap: float) -> str:
    from reproductions.sdp_pe.analysis import LDP_DERIVED, _first_elimination, _slope_at, _value_at

    rows = []
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
            rows.append(
                [
                    f"{eps:g}",
                    f"{K:,}",
                    f"{_fmt(v)} ± {_fmt(sd)}",
                    f"{_slope_at(m, K):.4f}",
                    first,
                    f"{_fmt(gap * K)}" if ok else "not derived",
                    _fmt_t(end),
                    f"{v / (gap * K):.3g}" if ok else "—",
                ]
            )
    header = [
        "ε",
        "K",
        "SDP-PE regret (mean ± std)",
        "SDP-PE regret/episode (last 10%)",
        "first stage that eliminates (per seed)",
        "UCBVI-LDP derived",
        "LDP all-left (w.p. ≥ 1 − β) to t ≥",
        "SDP-PE / LDP",
    ]
    return table(header, rows)


def _readings(expectations: list[dict[str, Any]]) -> list[str]:
    """Per ε, the verdict at the largest K of the long runs."""
    out = []
    for eps in sorted({ex["epsilon"] for ex in expectations if ex.get("long")}):
        rows = [ex for ex in expectations if ex.get("long") and ex["epsilon"] == eps]
        last = max(rows, key=lambda ex: ex["episodes"])
        out.append(
            TEXT.fill(
                "reading",
                epsilon=f"{eps:g}",
                K=f"{last['episodes']:,}",
                state=TEXT.fill("in_burn_in" if last["burn_in"] else "past_burn_in"),
                ratio=f"{last['ratio']:.3g}",
                ordering="yes" if last["ratio"] < 1 else "no",
                holds="yes" if last["holds"] else "no",
                kind=last["kind"],
                ratios=" → ".join(
                    f"{ex['ratio']:.3g}" for ex in sorted(rows, key=lambda ex: ex["episodes"])
                ),
            )
        )
    return out


def _long_stages_table(runs: list[tuple]) -> str:
    rows = []
    for group, eps, m, _ in runs:
        if m is None or not m["logs"]:
            continue
        first_stage = 10 if group == "long" else 18
        rows += [
            [
                f"{eps:g}",
                f"{int(m['grid'][-1]):.3g}",
                e["stage"],
                f"{e['T']:,}",
                e["infrequent"],
                f"{e['E']:,.1f}",
                f"{e['active_after']:,}",
                e["optimal_active"],
                f"{e['max_gap_active']:.4f}",
            ]
            for e in m["logs"][0]
            if "active_after" in e and e["stage"] >= first_stage
        ]
    header = ["ε", "run of K", "stage", "T", "size of F", "E (fine batch)"]
    header += ["active policies after", "π* active", "max gap of an active policy"]
    return table(header, rows)


def _sensitivity_section(cfg: Fig4Config, sens: list[dict[str, Any]]) -> str:
    rows = []
    for r in sens:
        order = "yes" if r["ordering_holds"] else ("no" if r["ldp_exact"] else "undetermined")
        rows.append(
            [
                f"{r['epsilon']:g}",
                r["constant"],
                f"{r['factor']:g}",
                _fmt(r["sdp_pe"]),
                r["sdp_pe_first_elimination"],
                _fmt(r["ldp"]) + ("" if r["ldp_exact"] else " (lower bound)"),
                _fmt_t(r["ldp_burn_in_end"]),
                f"{r['ratio']:.3g}",
                order,
                r["verdict"],
            ]
        )
    header = ["ε", "constant", "factor", "SDP-PE regret", "SDP-PE first eliminating stage"]
    header += ["UCBVI-LDP (derived)", "LDP burn-in to t ≥", "SDP-PE / LDP", "SDP-PE < LDP"]
    return TEXT.fill(
        "sensitivity",
        factors=" and ×".join(f"{f:g}" for f in cfg.sens_factors),
        sens_seeds=cfg.sens_seeds,
        Ks=f"{cfg.sens_episodes:,}",
        sens_table=table([*header, "SDP-PE ≤ ½ × LDP"], rows),
        summary="\n".join(_sensitivity_summary(sens)),
        long_episodes=f"{cfg.long_episodes:,}",
    )


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
