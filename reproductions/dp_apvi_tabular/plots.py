"""The DP-APVI tabular study's plots: suboptimality and privacy gap against n, bonus tuning."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privrl.runs.rundir import RunDir
from reproductions.dp_apvi_tabular.study import StudyConfig, Variant


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _style(v: Variant) -> dict[str, Any]:
    if v.mechanism == "none":
        return {"color": "black", "marker": "o", "ls": "-", "lw": 2}
    colors = {0.1: "tab:red", 1.0: "tab:blue", 10.0: "tab:green"}
    rho = v.rho if v.rho is not None else None
    if rho is None:  # Laplace: colour of the matched ρ, from the name
        rho = float(v.name.split("ρ=")[1].rstrip(")"))
    return {
        "color": colors.get(rho, "tab:purple"),
        "marker": "s" if v.mechanism == "gaussian" else "^",
        "ls": "-" if v.mechanism == "gaussian" else "--",
        "lw": 1.3,
    }


def _plot_curves(
    rundir: RunDir, cfg: StudyConfig, agg: list[dict[str, Any]], variants: list[Variant]
) -> None:
    plt = _plt()
    fig, axes = plt.subplots(
        len(cfg.bonuses), 2, figsize=(12, 4.2 * len(cfg.bonuses)), squeeze=False, sharey=True
    )
    for i, b in enumerate(cfg.bonuses):
        for j, kind in enumerate(("theory", "tuned")):
            ax = axes[i][j]
            for v in variants:
                pts = sorted(
                    (
                        r
                        for r in agg
                        if (r["variant"], r["bonus"], r["scale_kind"]) == (v.name, b, kind)
                    ),
                    key=lambda r: r["n"],
                )
                ax.errorbar(
                    [r["n"] for r in pts],
                    [r["suboptimality_mean"] for r in pts],
                    yerr=[r["suboptimality_se"] for r in pts],
                    label=v.name,
                    capsize=2,
                    ms=4,
                    **_style(v),
                )
            scale = pts[0]["bonus_scale"] if pts else float("nan")
            ax.set_xscale("log")
            ax.set_xlabel("trajectories n")
            ax.set_ylabel("suboptimality v* − v^π̂")
            ax.set_title(f"{b} bonus, {kind} scale ({scale:g})")
            ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        f"APVI vs DP-APVI on random MDPs (S={cfg.states}, A={cfg.actions}, H={cfg.horizon}); "
        f"mean ± SE over {cfg.seeds} seeds"
    )
    fig.tight_layout()
    fig.savefig(rundir.plot_path("suboptimality_vs_n"), dpi=120)
    plt.close(fig)


def _plot_gaps(
    rundir: RunDir,
    cfg: StudyConfig,
    agg: list[dict[str, Any]],
    variants: list[Variant],
    slopes: list[dict[str, Any]],
) -> None:
    plt = _plt()
    fig, axes = plt.subplots(
        1, len(cfg.bonuses), figsize=(6.2 * len(cfg.bonuses), 4.4), squeeze=False
    )
    for j, b in enumerate(cfg.bonuses):
        ax = axes[0][j]
        for v in variants:
            if v.mechanism == "none":
                continue
            pts = sorted(
                (
                    r
                    for r in agg
                    if (r["variant"], r["bonus"], r["scale_kind"]) == (v.name, b, "tuned")
                    and r["gap_mean"] > 0
                ),
                key=lambda r: r["n"],
            )
            if not pts:
                continue
            fit = next(
                s
                for s in slopes
                if (s["variant"], s["bonus"], s["scale_kind"]) == (v.name, b, "tuned")
            )
            label = v.name
            if math.isfinite(fit.get("slope", float("nan"))):
                label += f" (slope {fit['slope']:.2f})"
            ax.errorbar(
                [r["n"] for r in pts],
                [r["gap_mean"] for r in pts],
                yerr=[r["gap_se"] for r in pts],
                label=label,
                capsize=2,
                ms=4,
                **_style(v),
            )
        n = np.array(cfg.n_grid, dtype=float)
        ax.plot(n, 1e3 / n, ":", color="gray", label="∝ 1/n (reference)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("trajectories n")
        ax.set_ylabel("gap: subopt(DP-APVI) − subopt(APVI)")
        ax.set_title(f"privacy cost, {b} bonus, tuned scale (points with gap > 0)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(rundir.plot_path("privacy_gap_loglog"), dpi=120)
    plt.close(fig)


def _plot_tuning(
    rundir: RunDir, cfg: StudyConfig, table: list[dict[str, Any]], tuned: dict[str, float]
) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for b in cfg.bonuses:
        pts = [r for r in table if r["bonus"] == b]
        xs = [max(r["bonus_scale"], 1e-7) for r in pts]
        ax.plot(xs, [r["mean_suboptimality"] for r in pts], "o-", label=f"{b} (chose {tuned[b]:g})")
    ax.set_xscale("log")
    ax.set_xlabel("bonus_scale (0 plotted at 1e-7)")
    ax.set_ylabel("mean suboptimality (tuning instances)")
    ax.set_title("bonus-scale tuning on separate MDP instances")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(rundir.plot_path("bonus_scale_tuning"), dpi=120)
    plt.close(fig)
