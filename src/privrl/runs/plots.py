"""The standard plots of a run directory, drawn from declarative `PlotSpec`s."""

from __future__ import annotations

import math
from pathlib import Path

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
