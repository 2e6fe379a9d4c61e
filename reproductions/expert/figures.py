"""``expert-fig3`` (ours vs DP-SGD over ε) and ``expert-fig4`` (number of experts)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reproductions.expert.configs import _Context
from reproductions.expert.paper import (
    ENVS,
    METHOD_LABEL,
    OURS_PLD,
    PAPER_FIG3_POINTS,
    PAPER_TABLE1_P,
    REGIME_ENVS,
    _fmt,
    _nearest,
)
from reproductions.expert.report import (
    Cell,
    _cell_info,
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
    raw_return_section,
    reproduction,
    run_cells,
    z_by_method,
)
from reproductions.expert.runs import lr_method_of, prefetch
from reproductions.expert.verdicts import (
    gallery_claims_fig3,
    gallery_claims_fig4,
    scale_note,
)
from reproductions.templates import beside, table

FIG3 = beside(__file__, "fig3.md.tmpl")
FIG4 = beside(__file__, "fig4.md.tmpl")

# ---------------------------------------------------------------------------------------------
# Figure 3: ours vs DP-SGD over ε
# ---------------------------------------------------------------------------------------------


@reproduction
def fig3(
    ctx: _Context,
    seed_list: list[int],
    *,
    envs: Sequence[str] = ("cartpole", "acrobot", "hiv", "lunarlander"),
    algos: Sequence[str] = ("cql", "bcq"),
) -> Path:
    """Figure 3: normalised score vs ε ∈ {5, 7.5, 10} of ours (paper Table 1 p and splits)
    and expert-level DP-SGD, per environment and algorithm. ``envs`` and ``algos`` restrict
    the runs (and the report) to a part of the figure, e.g. to split the work between
    processes; a final full invocation then skips the finished runs and writes the whole
    report."""
    cells: dict[str, Cell] = {}
    eps_list = ctx.scale.fig3_epsilons
    loaded = [env for env in envs if ctx.load(env) is not None]
    refs = prefetch(
        ctx,
        {
            (env, algo): [
                "dp-sgd",
                *(lr_method_of(PAPER_TABLE1_P[(env, algo)][_nearest(e)]) for e in eps_list),
            ]
            for env in loaded
            for algo in algos
        },
        seed_list,
    )
    for env in loaded:
        for algo in algos:
            for eps in ctx.scale.fig3_epsilons:
                p_ours = PAPER_TABLE1_P[(env, algo)][_nearest(eps)]
                series: list[tuple[str, float, dict[str, Any]]] = [
                    ("ours", p_ours, {}),
                    ("dp-sgd", 1.0, {}),
                ]
                if p_ours < 1.0:  # at p = 1 the filter is skipped: the same runs as DP-SGD
                    series.append(("ours-pld", p_ours, OURS_PLD))
                for method, p, kw in series:
                    cfgs = private_cells(ctx, env, algo, seed_list, epsilon=eps, p=p, **kw)
                    label = f"{ENVS[env].label} {algo.upper()} ε = {eps:g} {METHOD_LABEL[method]}"
                    cells[f"{env}/{algo}/eps{eps:g}/{method}"] = Cell(label, cfgs)
    run_cells(ctx, cells, refs)
    lines, claims = _fig3_lines(ctx, cells, refs, envs, algos, seed_list)
    gallery = gallery_claims_fig3(
        _scores(cells), envs, algos, ctx.scale.fig3_epsilons, regime=ctx.scale.is_regime
    )
    return _write_outputs(
        ctx,
        "expert-fig3",
        cells,
        refs,
        lines,
        {"claims_hold": claims},
        claims=gallery,
    )


def _fig3_lines(
    ctx: _Context,
    cells: dict[str, Cell],
    refs: dict[str, dict[str, Any]],
    envs: Sequence[str],
    algos: Sequence[str],
    seed_list: Sequence[int],
) -> tuple[list[str], list[bool]]:
    """Figure 3's report (its lines) and the claim's outcome per comparison of distinct runs."""
    lines = _header("Figure 3 — ours vs expert-level DP-SGD over ε", "expert-fig3", ctx, seed_list)
    rows, claims = _fig3_rows(ctx, cells, envs, algos)
    header = ["env", "algo", "ε", "p (ours)", "paper (ours; DP-SGD)", "ours", "DP-SGD",
              "ours − DP-SGD", "claim", "return (ours; DP-SGD)", "stable set (ours)",
              "z (ours; DP-SGD)"]  # fmt: skip
    text = FIG3.fill(
        "report", results_table=table(header, rows), held=sum(claims), total=len(claims)
    )
    lines += [*text.split("\n"), ""]
    if not ctx.scale.is_regime:
        lines += scale_note(ctx.out, *z_by_method(cells))
    lines += _fig3_pld_section(ctx, cells, envs, algos)
    if ctx.scale.is_regime:
        lines += _spent_section(cells)
        skipped = [ENVS[e].label for e in ENVS if e not in envs]
        if skipped:
            lines += [FIG3.fill("not_in_regime", envs=", ".join(skipped)), ""]
    lines += _plot_fig3(ctx, cells, envs)
    lines += raw_return_section(
        {k: _cell_info(c) for k, c in cells.items() if c.runs},
        {k.split("/")[0]: r["random"] for k, r in refs.items()},
    )
    lines += closing(ctx, "expert-fig3", cells, refs, envs)
    return lines, claims


def _fig3_rows(
    ctx: _Context, cells: dict[str, Cell], envs: Sequence[str], algos: Sequence[str]
) -> tuple[list[list[str]], list[bool]]:
    """Figure 3's rows (ours beside DP-SGD per env, algo and ε) and the claim's outcome per
    comparison of distinct runs."""
    rows, claims = [], []
    for env in envs:
        for algo in algos:
            for eps in ctx.scale.fig3_epsilons:
                o = cells.get(f"{env}/{algo}/eps{eps:g}/ours")
                d = cells.get(f"{env}/{algo}/eps{eps:g}/dp-sgd")
                if o is None or d is None:
                    continue
                diff = o.score[0] - d.score[0]
                if not (math.isfinite(diff)):
                    claim = "pending"
                elif o.cfgs[0].key() == d.cfgs[0].key():
                    claim = "= (same runs)"
                else:
                    claim = "holds" if diff >= 0 else "fails"
                    claims.append(diff >= 0)
                rows.append(
                    [ENVS[env].label, algo.upper(), f"{eps:g}",
                     f"{PAPER_TABLE1_P[(env, algo)][_nearest(eps)]:g}", _paper_pair(env, algo, eps),
                     _fmt(*o.score), _fmt(*d.score), f"{diff:+.2f}", claim,
                     f"{_fmt(*o.raw, 1)}; {_fmt(*d.raw, 1)}", _stable_text(o),
                     f"{_z_text(o)}; {_z_text(d)}"]
                )  # fmt: skip
    return rows, claims


def fig3_regime(out: Path, **options: Any) -> Path:
    """``expert-fig3/regime``: Figure 3 at ε = 10 in the paper's noise regime (`Scale.regime`:
    z fixed, steps from the budget up to a cap) on the environments of ``REGIME_ENVS``;
    ``options``: `fig3`'s (seeds, seed, quick, backend, workers, envs, algos, ...)."""
    options.setdefault("envs", REGIME_ENVS)
    return fig3(out, regime=True, **options)


def _spent_section(cells: dict[str, Cell]) -> list[str]:
    """In the paper's protocol (z fixed, steps from the budget, capped): each cell's private
    and total steps and the ε its runs' reports certify (below the budget when capped)."""
    rows = []
    for cell in cells.values():
        if not cell.runs:
            continue
        eps = [r["epsilon"] for r in cell.runs if r.get("epsilon") is not None]
        c0 = cell.cfgs[0]
        rows.append(
            [cell.label, _z_text(cell), _private_steps_text(cell),
             f"{(max(eps) if eps else math.nan):.3g}", f"{c0.epsilon:g}"]
        )  # fmt: skip
    if not rows:
        return []
    header = ["cell", "z", "private / all steps (mean)", "ε certified (max over seeds)",
              "budget ε"]  # fmt: skip
    return [*FIG3.fill("spent", table=table(header, rows)).split("\n"), ""]


def _paper_pair(env: str, algo: str, eps: float) -> str:
    """The paper's printed values of a Figure 3 point (ours; DP-SGD), "—" where it prints none."""
    vals = [PAPER_FIG3_POINTS.get((env, algo, eps, m)) for m in ("ours", "dp-sgd")]
    if all(v is None for v in vals):
        return "—"
    if PAPER_TABLE1_P[(env, algo)][_nearest(eps)] >= 1.0:  # ours is DP-SGD there
        vals[0] = vals[0] if vals[0] is not None else vals[1]
    return "; ".join("—" if v is None else f"{v:.2f}" for v in vals)


def _fig3_pld_section(
    ctx: _Context, cells: dict[str, Cell], envs: Sequence[str], algos: Sequence[str]
) -> list[str]:
    """Figure 3's extra series: ours with the PLD filter calibration and the joint DP-SGD
    budget (our accounting, not the paper's), against the same DP-SGD runs."""
    rows, wins = [], []
    for env in envs:
        for algo in algos:
            for eps in ctx.scale.fig3_epsilons:
                x = cells.get(f"{env}/{algo}/eps{eps:g}/ours-pld")
                o = cells.get(f"{env}/{algo}/eps{eps:g}/ours")
                d = cells.get(f"{env}/{algo}/eps{eps:g}/dp-sgd")
                if x is None or o is None or d is None:
                    continue
                diff = x.score[0] - d.score[0]
                if math.isfinite(diff):
                    wins.append(diff >= 0)
                rows.append(
                    [ENVS[env].label, algo.upper(), f"{eps:g}", f"{x.cfgs[0].p:g}",
                     _fmt(*o.score), _fmt(*x.score), _fmt(*d.score), f"{diff:+.2f}",
                     _stable_text(x), _z_text(x)]
                )  # fmt: skip
    if not rows:
        return []
    header = ["env", "algo", "ε", "p", "ours (paper calibration)", "ours, PLD + joint", "DP-SGD",
              "PLD + joint − DP-SGD", "stable set (PLD)", "z (PLD + joint)"]  # fmt: skip
    text = FIG3.fill("fig3_pld", table=table(header, rows), wins=sum(wins), total=len(wins))
    return [*text.split("\n"), ""]


def _score_line(ax: Any, at: Mapping[float, Cell | None], color: str, label: str) -> None:
    """The normalised score (mean ± 95% CI) of the cells ``at`` each x that have one."""
    points = [(x, c.score) for x, c in at.items() if c is not None and math.isfinite(c.score[0])]
    if points:
        xs, ys = [x for x, _ in points], [s[0] for _, s in points]
        es = [s[1] if math.isfinite(s[1]) else 0.0 for _, s in points]
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, color=color, label=label)


def _plot_fig3(ctx: _Context, cells: dict[str, Cell], envs: Sequence[str]) -> list[str]:
    present = [e for e in envs if any(k.startswith(f"{e}/") for k in cells)]
    if not present:
        return []
    plt = _plt()
    fig, axes = plt.subplots(
        2, len(present), figsize=(max(4.4, 3.6 * len(present)), 6.4), squeeze=False, sharex=True
    )
    for j, env in enumerate(present):
        for i, algo in enumerate(("cql", "bcq")):
            ax = axes[i][j]
            for method, color, dx in (
                ("ours", "tab:blue", -0.15),
                ("dp-sgd", "tab:orange", 0.0),
                ("ours-pld", "tab:green", 0.15),
            ):  # dx: the series side by side at each ε
                at = {
                    e + dx: cells.get(f"{env}/{algo}/eps{e:g}/{method}")
                    for e in ctx.scale.fig3_epsilons
                }
                _score_line(ax, at, color, METHOD_LABEL[method])
                paper = [
                    (e + dx, PAPER_FIG3_POINTS[(env, algo, e, method)])
                    for e in ctx.scale.fig3_epsilons
                    if (env, algo, e, method) in PAPER_FIG3_POINTS
                ]
                if paper:
                    ax.plot(
                        [e for e, _ in paper],
                        [v for _, v in paper],
                        linestyle="none",
                        marker="*",
                        markersize=11,
                        markeredgecolor="black",
                        color=color,
                        label=f"paper: {METHOD_LABEL[method]}",
                    )
            ax.axhline(1.0, color="gray", lw=0.8)
            eps_list = list(ctx.scale.fig3_epsilons)
            ax.set_xticks(eps_list)
            ax.set_xlim(min(eps_list) - 0.6, max(eps_list) + 0.6)
            ax.set_title(f"{ENVS[env].label} {algo.upper()}", fontsize=9)
            if j == 0:
                ax.set_ylabel("normalised score")
            if i == 1:
                ax.set_xlabel("ε")
    legend: dict[str, Any] = {}  # one legend below the panels, off the data
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=3, fontsize=7,
               frameon=False)  # fmt: skip
    fig.suptitle(
        "Figure 3: ours vs expert-level DP-SGD\n(mean ± 95% CI over seeds; stars: the paper's "
        "printed values, Tables 2a/2b)",
        fontsize=8,
    )
    return _save_plot(ctx, fig, "fig3", "Figure 3", rect=(0, 0.08, 1, 1))


# ---------------------------------------------------------------------------------------------
# Figure 4: number of experts
# ---------------------------------------------------------------------------------------------


@reproduction
def fig4(ctx: _Context, seed_list: list[int]) -> Path:
    """Figure 4: Acrobot, ε = 10, CQL; ours (p = 0, T = 25) vs DP-SGD with m of the experts
    (a public, seeded subset; the data restricted to their trajectories; δ = 1/m)."""
    env, algo, eps = "acrobot", "cql", 10.0
    cells: dict[str, Cell] = {}
    refs: dict[str, dict[str, Any]] = {}
    ms = ctx.scale.fig4_ms
    data = ctx.load(env)
    if data is not None:
        p_ours = PAPER_TABLE1_P[(env, algo)][eps]
        refs = prefetch(ctx, {(env, algo): [lr_method_of(p_ours), "dp-sgd"]}, seed_list)
        for m in ms:
            for method, p in (("ours", p_ours), ("dp-sgd", 1.0)):
                cfgs = private_cells(ctx, env, algo, seed_list, epsilon=eps, p=p, m=m)
                cells[f"m{m}/{method}"] = Cell(f"m = {m} {METHOD_LABEL[method]}", cfgs)
    run_cells(ctx, cells, refs)
    lines, gaps, grows = _fig4_lines(ctx, cells, refs, ms, seed_list)
    return _write_outputs(
        ctx,
        "expert-fig4",
        cells,
        refs,
        lines,
        {"gaps": gaps, "gap_grows_with_m": grows},
        claims=gallery_claims_fig4(_scores(cells), ms),
    )


def _fig4_lines(
    ctx: _Context,
    cells: dict[str, Cell],
    refs: dict[str, dict[str, Any]],
    ms: Sequence[int],
    seed_list: Sequence[int],
) -> tuple[list[str], list[float], bool]:
    """Figure 4's report (its lines), the gap of ours over DP-SGD per m and whether it grows."""
    lines = _header(
        "Figure 4 — number of experts (Acrobot, ε = 10, CQL)", "expert-fig4", ctx, seed_list
    )
    rows, gaps = [], []
    for m in ms:
        o, d = cells.get(f"m{m}/ours"), cells.get(f"m{m}/dp-sgd")
        if o is None or d is None:
            rows.append([m, "(not run)", "(not run)", "—", "—", "—"])
            continue
        gap = o.score[0] - d.score[0]
        gaps.append(gap)
        rows.append([m, _fmt(*o.score), _fmt(*d.score), f"{gap:+.2f}", _stable_text(o), _z_text(d)])
    finite = [g for g in gaps if math.isfinite(g)]
    grows = len(finite) == len(ms) and all(b >= a for a, b in itertools.pairwise(finite))
    ahead = [m for m, g in zip(ms, gaps, strict=False) if math.isfinite(g) and g >= 0]
    header = ["m", "ours (p = 0, T = 25)", "DP-SGD", "gap", "stable set (ours)", "z (DP-SGD)"]
    text = FIG4.fill(
        "report",
        results_table=table(header, rows),
        grows="yes" if grows else "no",
        incomplete="" if len(finite) == len(ms) else " (incomplete)",
        ahead=FIG4.fill("ahead", ms=", ".join(str(m) for m in ahead))
        if ahead
        else FIG4.fill("ahead_none"),
    )
    lines += [*text.split("\n"), ""]
    lines += _plot_fig4(ctx, cells, ms)
    lines += closing(ctx, "expert-fig4", cells, refs, ["acrobot"], ("cql",), above_notes=False)
    return lines, gaps, grows


def _plot_fig4(ctx: _Context, cells: dict[str, Cell], ms: Sequence[int]) -> list[str]:
    if not cells:
        return []
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    for method, color in (("ours", "tab:blue"), ("dp-sgd", "tab:orange")):
        _score_line(ax, {m: cells.get(f"m{m}/{method}") for m in ms}, color, METHOD_LABEL[method])
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("number of experts m")
    ax.set_ylabel("normalised score")
    ax.set_title(
        "Figure 4: Acrobot, ε = 10, CQL (mean ± 95% CI)\npaper: figure only, no printed values",
        fontsize=9,
    )
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return _save_plot(ctx, fig, "fig4", "Figure 4")
