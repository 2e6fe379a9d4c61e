"""``expert-table2a`` (p ablation at ε = 10) and ``expert-table2b`` (ε1 split at low ε)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reproductions.expert.configs import _Context
from reproductions.expert.paper import (
    ENVS,
    METHOD_LABEL,
    PAPER_TABLE1_P,
    PAPER_TABLE2A,
    PAPER_TABLE2B,
    TABLE2B_P,
    _fmt,
)
from reproductions.expert.report import (
    Cell,
    _header,
    _plt,
    _private_steps_text,
    _save_plot,
    _scores,
    _stable_text,
    _write_outputs,
    _z_text,
    closing,
    private_cells,
    reproduction,
    run_cells,
    z_by_method,
)
from reproductions.expert.runs import lr_method_of, prefetch
from reproductions.expert.verdicts import (
    gallery_claims_table2a,
    gallery_claims_table2b,
    scale_note,
)
from reproductions.templates import beside, table

TABLE2A = beside(__file__, "table2a.md.tmpl")
TABLE2B = beside(__file__, "table2b.md.tmpl")

# ---------------------------------------------------------------------------------------------
# Table 2a: p ablation at ε = 10
# ---------------------------------------------------------------------------------------------


@reproduction
def table2a(
    ctx: _Context,
    seed_list: list[int],
    *,
    envs: Sequence[str] = ("cartpole", "lunarlander"),
) -> Path:
    """Table 2 (top): normalised score at ε = 10 for p ∈ {0, Table-1 p, 1} (CQL: 0.8, BCQ:
    0.5), CartPole then LunarLander; plus, on CartPole CQL p = 0.8, the tight filter
    calibration and the paper's (not certified) accounting, and the PLD filter calibration at
    the Table-1 p (CartPole CQL and BCQ, LunarLander CQL), alone and with the joint DP-SGD
    budget."""
    eps = 10.0
    cells: dict[str, Cell] = {}
    plan: list[tuple[str, str, float, str, dict[str, Any]]] = []
    for env in envs:
        for algo in ("cql", "bcq"):
            for p in PAPER_TABLE2A[(env, algo)]:
                plan.append((env, algo, p, "main", {}))
    plan.append(("cartpole", "cql", 0.8, "tight", {"calibration": "tight"}))
    plan.append(("cartpole", "cql", 0.8, "paper-accounting", {"accounting": "paper"}))
    for env, algo in (("cartpole", "cql"), ("cartpole", "bcq"), ("lunarlander", "cql")):
        p_ours = PAPER_TABLE1_P[(env, algo)][eps]
        plan.append((env, algo, p_ours, "pld", {"calibration": "pld"}))
        plan.append(
            (env, algo, p_ours, "pld-joint", {"calibration": "pld", "dpsgd_budget": "joint"})
        )
    needs: dict[tuple[str, str], list[str]] = {}
    for env, algo, p, _, _ in plan:
        if env in envs and ctx.load(env) is not None:
            needs.setdefault((env, algo), []).append(lr_method_of(p))
    refs = prefetch(ctx, needs, seed_list)
    for env, algo, p, variant, kw in plan:
        if env not in envs or ctx.load(env) is None:
            continue
        cfgs = private_cells(ctx, env, algo, seed_list, epsilon=eps, p=p, **kw)
        label = f"{ENVS[env].label} {algo.upper()} p = {p:g}" + (
            "" if variant == "main" else f" ({variant})"
        )
        cells[f"{env}/{algo}/p{p:g}/{variant}"] = Cell(label, cfgs)
    run_cells(ctx, cells, refs)
    lines = _table2a_lines(ctx, cells, refs, envs, seed_list)
    claims_2a = gallery_claims_table2a(_scores(cells), envs, eps, regime=ctx.scale.is_regime)
    return _write_outputs(ctx, "expert-table2a", cells, refs, lines, {}, claims=claims_2a)


_VARIANT = {
    "main": "",
    "tight": " (tight filter calibration)",
    "pld": " (PLD filter calibration)",
    "pld-joint": " (PLD filter calibration, joint DP-SGD budget)",
    "paper-accounting": " (paper accounting, NOT certified)",
}  # Table 2a's rows beside the paper's: what each adds to the method's label


def _table2a_lines(
    ctx: _Context,
    cells: dict[str, Cell],
    refs: dict[str, dict[str, Any]],
    envs: Sequence[str],
    seed_list: Sequence[int],
) -> list[str]:
    """Table 2a's report (its lines)."""
    eps = 10.0
    lines = _header(
        "Table 2a — p ablation at ε = 10 (expert-level DP)", "expert-table2a", ctx, seed_list
    )
    header = ["env", "algo", "p", "method", "paper", "ours (normalised)", "return",
              "stable set (transitions; mean (per seed))", "private / all steps", "z",
              "ε (reported)"]  # fmt: skip
    rows = [_table2a_row(key, cell) for key, cell in cells.items()]
    claims = _table2a_claims(cells, envs, eps)
    claim_check = "\n" + TABLE2A.fill("claim_check", claims="\n".join(claims)) if claims else ""
    note = ""
    if not ctx.scale.is_regime:
        main = {k: c for k, c in cells.items() if k.endswith("/main")}
        note = "\n" + "\n".join(scale_note(ctx.out, *z_by_method(main))[:-1])
    text = TABLE2A.fill(
        "report", results_table=table(header, rows), claim_check=claim_check, scale_note=note
    )
    lines += [*text.split("\n"), ""]
    lines += _plot_table2a(ctx, cells)
    return lines + closing(ctx, "expert-table2a", cells, refs, envs)


def _table2a_row(key: str, cell: Cell) -> list[str]:
    """One row of Table 2a: the cell beside the paper's number (its main rows only)."""
    env, algo, pk, variant = key.split("/")
    p = float(pk[1:])
    paper_txt = "—"
    if variant == "main":
        paper = PAPER_TABLE2A[(env, algo)][p]
        paper_txt = "inf" if paper is None else f"{paper:.2f}"
    c0 = cell.cfgs[0]
    score = _fmt(*cell.score)
    if c0.method == "ours" and p == 0.0 and cell.runs and max(cell.stable_sizes()) == 0:
        score += TABLE2A.fill("infeasible")
    eps_rep = [r["epsilon"] for r in cell.runs if r.get("epsilon") is not None]
    eps_txt = f"{max(eps_rep):.3g}" if eps_rep else "—"
    method = METHOD_LABEL[c0.method] + _VARIANT[variant]
    return [ENVS[env].label, algo.upper(), f"{p:g}", method, paper_txt, score,
            _fmt(*cell.raw, 1), _stable_text(cell), _private_steps_text(cell), _z_text(cell),
            eps_txt]  # fmt: skip


def _table2a_claims(cells: dict[str, Cell], envs: Sequence[str], eps: float) -> list[str]:
    """The claim check per (env, algo): ours at the paper's Table 1 p against DP-SGD."""
    claims = []
    for env in envs:
        for algo in ("cql", "bcq"):
            p_ours = PAPER_TABLE1_P[(env, algo)][eps]
            o = cells.get(f"{env}/{algo}/p{p_ours:g}/main")
            d = cells.get(f"{env}/{algo}/p1/main")
            if o is None or d is None or not (o.runs and d.runs):
                continue
            diff = o.score[0] - d.score[0]
            claims.append(
                TABLE2A.fill(
                    "claim_2a",
                    env=ENVS[env].label,
                    algo=algo.upper(),
                    p=f"{p_ours:g}",
                    ours=f"{o.score[0]:.2f}",
                    dp_sgd=f"{d.score[0]:.2f}",
                    diff=f"{diff:+.2f}",
                    outcome="holds" if diff >= 0 else "fails",
                )
            )
    return claims


def _plot_table2a(ctx: _Context, cells: dict[str, Cell]) -> list[str]:
    groups: dict[str, list[tuple[str, Cell]]] = {}
    for key, cell in cells.items():
        env, algo, pk, variant = key.split("/")
        groups.setdefault(f"{env}/{algo}", []).append(
            (f"{pk}" + ("" if variant == "main" else f"\n{variant}"), cell)
        )
    if not groups:
        return []
    plt = _plt()
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.6), squeeze=False)
    for ax, (g, items) in zip(axes[0], groups.items(), strict=True):
        env, algo = g.split("/")
        x = np.arange(len(items))
        means = [c.score[0] for _, c in items]
        errs = [0.0 if not math.isfinite(c.score[1]) else c.score[1] for _, c in items]
        ax.bar(x, np.nan_to_num(means), yerr=errs, capsize=3, color="tab:blue", alpha=0.8)
        for i, (_, c) in enumerate(items):
            pk = next(k for k, v in cells.items() if v is c).split("/")
            paper = PAPER_TABLE2A.get((env, algo), {}).get(float(pk[2][1:]))
            if paper is not None and pk[3] == "main":
                ax.plot([i - 0.4, i + 0.4], [paper, paper], "r--", lw=1.5)
        ax.set_xticks(x, [lab for lab, _ in items], fontsize=7)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_title(f"{ENVS[env].label} {algo.upper()}, ε = 10", fontsize=9)
        ax.set_ylabel("normalised score")
    fig.suptitle("Table 2a: ours (bars, 95% CI) vs paper (red dashes)", fontsize=9)
    return _save_plot(ctx, fig, "table2a", "Table 2a")


# ---------------------------------------------------------------------------------------------
# Table 2b: ε1 = 3ε/4 vs ε1 = 0 at low ε (BCQ)
# ---------------------------------------------------------------------------------------------


@reproduction
def table2b(ctx: _Context, seed_list: list[int]) -> Path:
    """Table 2 (bottom), BCQ: the filter with ε1 = 3ε/4 (p = 0.5) vs no filter (ε1 = 0, plain
    DP-SGD) at Acrobot ε = 2.5 and CartPole ε ∈ {2.5, 5}."""
    cells: dict[str, Cell] = {}
    loaded = [env for env, _ in PAPER_TABLE2B if ctx.load(env) is not None]
    refs = prefetch(ctx, {(env, "bcq"): ["ours", "dp-sgd"] for env in loaded}, seed_list)
    for (env, eps), _paper in PAPER_TABLE2B.items():
        if ctx.load(env) is None:
            continue
        for col, frac in (("filter", 0.75), ("nofilter", 0.0)):
            if frac == 0.0:  # plain DP-SGD
                cfgs = private_cells(ctx, env, "bcq", seed_list, epsilon=eps, p=1.0)
            else:
                forced = {"eps1_fraction": frac}  # the filter runs below ε = 5
                cfgs = private_cells(ctx, env, "bcq", seed_list, epsilon=eps, p=TABLE2B_P, **forced)
            label = f"{ENVS[env].label} BCQ ε = {eps:g}, " + ("ε1 = 3ε/4" if frac else "ε1 = 0")
            cells[f"{env}/bcq/eps{eps:g}/{col}"] = Cell(label, cfgs)
    run_cells(ctx, cells, refs)
    lines = _table2b_lines(ctx, cells, refs, seed_list)
    claims = gallery_claims_table2b(_scores(cells))
    return _write_outputs(ctx, "expert-table2b", cells, refs, lines, {}, claims=claims)


def _table2b_lines(
    ctx: _Context, cells: dict[str, Cell], refs: dict[str, dict[str, Any]], seed_list: Sequence[int]
) -> list[str]:
    """Table 2b's report (its lines)."""
    lines = _header("Table 2b — splitting ε at low ε (BCQ)", "expert-table2b", ctx, seed_list)
    rows = []
    for (env, eps), (p_f, p_n) in PAPER_TABLE2B.items():
        f = cells.get(f"{env}/bcq/eps{eps:g}/filter")
        n = cells.get(f"{env}/bcq/eps{eps:g}/nofilter")
        label, paper_f, paper_n = ENVS[env].label, f"{p_f:.2f}", f"{p_n:.2f}"
        if f is None or n is None:
            rows.append([label, f"{eps:g}", paper_f, "(not run)", "—", paper_n, "(not run)", "—"])
            continue
        rows.append(
            [label, f"{eps:g}", paper_f, _fmt(*f.score), _stable_text(f), paper_n,
             _fmt(*n.score), f"{_z_text(f)}; {_z_text(n)}"]
        )  # fmt: skip
    header = ["env", "ε", "paper ε1 = 3ε/4", "ours ε1 = 3ε/4 (p = 0.5)", "stable set",
              "paper ε1 = 0", "ours ε1 = 0 (DP-SGD)", "z (3ε/4; 0)"]  # fmt: skip
    lines += [*TABLE2B.fill("report", results_table=table(header, rows)).split("\n"), ""]
    lines += _plot_pairs(ctx, cells, "table2b", "Table 2b: ε1 = 3ε/4 vs ε1 = 0 (BCQ)")
    return lines + closing(
        ctx, "expert-table2b", cells, refs, [e for e, _ in PAPER_TABLE2B], ("bcq",)
    )


def _plot_pairs(ctx: _Context, cells: dict[str, Cell], name: str, title: str) -> list[str]:
    if not cells:
        return []
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    labels = [c.label for c in cells.values()]
    x = np.arange(len(labels))
    means = np.nan_to_num([c.score[0] for c in cells.values()])
    errs = [0.0 if not math.isfinite(c.score[1]) else c.score[1] for c in cells.values()]
    colors = ["tab:blue" if "3ε/4" in lab else "tab:orange" for lab in labels]
    ax.bar(x, means, yerr=errs, capsize=3, color=colors)
    for i, key in enumerate(cells):  # the paper's value of the bar (Table 2b), red dashes
        env, _, ek, col = key.split("/")
        paper = PAPER_TABLE2B.get((env, float(ek[3:])))
        if paper is not None:
            v = paper[0] if col == "filter" else paper[1]
            ax.plot([i - 0.4, i + 0.4], [v, v], "r--", lw=1.5, label="paper" if i == 0 else None)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=7)
    ax.set_ylabel("normalised score")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_title(title, fontsize=9)
    return _save_plot(ctx, fig, name, title)
