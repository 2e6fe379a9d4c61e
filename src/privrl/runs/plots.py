"""The standard plots of a run directory, drawn from declarative `PlotSpec`s, and the
learning-curve plot of a run that ends in a policy stage (MOPO, PRIMORL)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from privrl.runs.system import PlotSpec


def draw(spec: PlotSpec, path: Path) -> Path:
    """Draw `spec` as a line plot at `path` (bands where a series has them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    try:
        for s in spec.series:
            (line,) = ax.plot(list(s.x), list(s.y), s.style, label=s.label, lw=1.6)
            if s.low is not None and s.high is not None:
                ax.fill_between(
                    list(s.x), list(s.low), list(s.high), alpha=0.2, color=line.get_color(), lw=0
                )
        for label, y in spec.hlines:
            if math.isfinite(y):
                ax.axhline(y, ls="--", lw=1.0, color="0.4", label=label)
        if spec.logx:
            ax.set_xscale("log")
        if spec.logy:
            ax.set_yscale("log")
        ax.set_title(spec.title)
        ax.set_xlabel(spec.xlabel)
        if spec.xticks:
            ax.set_xticks([x for x, _ in spec.xticks], [label for _, label in spec.xticks])
        ax.set_ylabel(spec.ylabel)
        ax.grid(alpha=0.3)
        if len(spec.series) + len(spec.hlines) > 1:
            ax.legend(loc="best", fontsize=8, framealpha=0.8)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path


def plot_learning_curve(
    path: Path,
    curves: dict[str, np.ndarray],
    *,
    reference: dict[str, float] | None = None,
    title: str = "",
    steps_per_epoch: int = 1000,
    ax: Any = None,
) -> Path:
    """Real-environment return per epoch: mean ± std over the columns of each ``[epochs, k]``
    array (episodes of one run, or per-seed means), with the random/expert reference returns
    as grey lines. With ``ax`` the curve is drawn there and nothing is saved."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, arr in curves.items():
        a = np.asarray(arr, dtype=np.float64)
        if a.ndim == 1:
            a = a[:, None]
        mean, std = a.mean(axis=1), a.std(axis=1)
        x = np.arange(1, a.shape[0] + 1)
        (line,) = ax.plot(x, mean, label=label)
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    if reference:
        for name, style in (("random", ":"), ("expert", "--")):
            if name in reference:
                ax.axhline(reference[name], color="gray", ls=style, lw=1, label=f"{name} policy")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"SAC epoch ({steps_per_epoch} steps)")
    ax.set_ylabel("return (real environment)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    if own:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return path
