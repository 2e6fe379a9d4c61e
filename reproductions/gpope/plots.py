"""The GPOPE figures' plot style: MSPBE on log axes from the best curve to θ = 0.

One figure = one or more `Panel`s side by side, sharing a y label. In every panel:

* the y range runs from half the best (lowest) mean of the drawn series and reference lines to
  a little above θ = 0 (or above the highest drawn mean within `ceiling` × θ = 0), so the
  differences that matter fill the axis;
* θ = 0 (the trivial estimator) is a dotted black horizontal line and each reference (LSTD,
  …) a dashed grey line — horizontal when it has one value, else through its value at each x;
* a series in `off_scale` (V1/V2, orders of magnitude above θ = 0) is not drawn: an arrow at
  the top edge carries its name and range of values;
* a drawn point above the range is marked by a triangle at the top edge with its value;
* the legend sits outside the axes, right of the last panel, never on the data.

Series are lists of `{mean, std}` dicts (`common._Acc.stats`); error bars are ± one std,
the lower bar clipped to stay positive on the log axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Panel", "mspbe_panels"]

_REF_STYLES = ("--", "-.", (0, (5, 2, 1, 2)), (0, (1, 1)))


@dataclass(frozen=True)
class Panel:
    """One axes: x values, series (name → stats per x), θ = 0's MSPBE and reference lines.

    references: name → one value (a horizontal line) or one value per x. off_scale: series
    names drawn only as an arrow with their range (at `arrow_at`, fractions of the log x
    range; default evenly spread). marks: vertical lines (x, label).
    """

    x: Sequence[float]
    series: dict[str, Sequence[dict[str, float]]]
    zero: float
    title: str
    xlabel: str
    references: dict[str, float | Sequence[float]] = field(default_factory=dict)
    off_scale: Sequence[str] = ()
    marks: Sequence[tuple[float, str]] = ()
    ceiling: float = 30.0
    arrow_at: Sequence[float] = ()  # where the off-scale arrows stand (fraction of the x range)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ref_values(value: float | Sequence[float], n: int) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(value, dtype=np.float64))
    return np.full(n, float(arr[0])) if arr.size == 1 else arr


def y_range(panel: Panel) -> tuple[float, float]:
    """(lo, hi): half the best drawn mean or reference, to 2× the highest drawn mean that is
    within `ceiling` × θ = 0 (at least 2× θ = 0); 6× when off-scale arrows need a band."""
    vals = [s["mean"] for k, st in panel.series.items() if k not in panel.off_scale for s in st]
    for ref in panel.references.values():
        vals.extend(_ref_values(ref, len(panel.x)).tolist())
    finite = [v for v in vals if math.isfinite(v) and v > 0]
    lo = min([*finite, panel.zero]) / 2.0
    top = max([panel.zero, *(v for v in finite if v <= panel.ceiling * panel.zero)])
    # a band above the curves for the off-scale arrows and their labels
    return lo, top * (6.0 if panel.off_scale else 2.0)


def _draw(ax: Any, panel: Panel, colours: dict[str, Any]) -> None:
    lo, hi = y_range(panel)
    x = np.asarray(panel.x, dtype=np.float64)
    arrows = [k for k in panel.series if k in panel.off_scale]
    for k, st in panel.series.items():
        if k in panel.off_scale:
            i = arrows.index(k)
            frac = panel.arrow_at[i] if i < len(panel.arrow_at) else (i + 1) / (len(arrows) + 1)
            at = float(np.exp(np.log(x[0]) + (np.log(x[-1]) - np.log(x[0])) * frac))
            means = [s["mean"] for s in st]
            lo_v, hi_v = min(means), max(means)
            value = f"{lo_v:.2g}" if hi_v <= 1.05 * lo_v else f"{lo_v:.2g}–{hi_v:.2g}"
            ax.annotate(
                "",
                xy=(at, hi),
                xytext=(at, hi / 3.0),
                arrowprops={"arrowstyle": "->", "color": "tab:red", "lw": 1.5},
            )
            ax.annotate(
                f"{k}: {value}",
                xy=(at, hi / 2.2),
                xytext=(4, 0),
                textcoords="offset points",
                ha="left",
                va="center",
                fontsize=7,
                color="tab:red",
                bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 0.5},
            )
            continue
        mean = np.array([s["mean"] for s in st])
        std = np.array([s["std"] for s in st])
        lower = np.minimum(std, mean * 0.999)
        c = colours[k]
        inside = mean <= hi
        ax.errorbar(
            x[inside],
            mean[inside],
            yerr=[lower[inside], std[inside]],
            capsize=3,
            marker="o",
            ms=4,
            color=c,
            label=k,
        )
        for xv, v in zip(x[~inside], mean[~inside], strict=True):
            ax.plot([xv], [hi / 1.25], marker="^", color=c, ms=6, clip_on=False)
            ax.annotate(
                f"{v:.2g}",
                xy=(xv, hi / 1.25),
                xytext=(0, -11),
                textcoords="offset points",
                ha="center",
                fontsize=6,
                color=c,
            )
    for j, (name, ref) in enumerate(panel.references.items()):
        vals = _ref_values(ref, len(x))
        ax.plot(x, vals, ls=_REF_STYLES[j % len(_REF_STYLES)], c="grey", lw=1.2, label=name)
    ax.axhline(panel.zero, ls=":", c="k", lw=1.4, label=f"θ = 0 (trivial): {panel.zero:.3g}")
    for xv, label in panel.marks:
        ax.axvline(xv, ls="--", c="tab:olive", lw=0.9, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ax.set_title(panel.title, fontsize=8.5)
    ax.set_xlabel(panel.xlabel)


def mspbe_panels(
    path: Path, panels: Sequence[Panel], *, suptitle: str = "", ylabel: str = "MSPBE"
) -> None:
    """Draw `panels` side by side into `path` (PNG) in the style of the module docstring; a
    series keeps its colour across panels and appears once in the shared legend."""
    plt = _plt()
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names: list[str] = []
    for p in panels:
        names.extend(k for k in p.series if k not in p.off_scale and k not in names)
    colours = {k: cycle[i % len(cycle)] for i, k in enumerate(names)}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels) + 2.6, 4.2), squeeze=False)
    for ax, p in zip(axes[0], panels, strict=True):
        _draw(ax, p, colours)
    axes[0][0].set_ylabel(ylabel)
    handles: dict[str, Any] = {}
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    axes[0][-1].legend(
        list(handles.values()),
        list(handles.keys()),
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
    )
    if suptitle:
        fig.suptitle(suptitle, fontsize=9)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
