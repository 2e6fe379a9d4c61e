"""The layer's standard line plot (`privrl.runs.plots.draw`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from privrl.runs import plots
from privrl.runs.system import PlotSpec, Series


def test_labelled_x_positions_name_the_categories(tmp_path: Path, monkeypatch) -> None:
    """`xticks` puts each label at its position (a categorical axis), nothing else."""
    seen: dict[str, list] = {}
    real_subplots = plt.subplots

    def spy(*a, **k):
        fig, ax = real_subplots(*a, **k)
        real = ax.set_xticks

        def set_xticks(ticks, labels=None, **kw):
            seen["ticks"], seen["labels"] = list(ticks), list(labels or [])
            return real(ticks, labels, **kw)

        ax.set_xticks = set_xticks
        return fig, ax

    monkeypatch.setattr(plt, "subplots", spy)
    spec = PlotSpec(
        "p", "t", "combination", "y", [Series("a", [1, 2, 3], [1.0, 2.0, 1.5])],
        xticks=[(1, "MA + LC"), (2, "MPD + LC"), (3, "MA + FC")],
    )  # fmt: skip
    plots.draw(spec, tmp_path / "p.png")
    assert seen == {"ticks": [1, 2, 3], "labels": ["MA + LC", "MPD + LC", "MA + FC"]}
    assert (tmp_path / "p.png").stat().st_size > 1000
