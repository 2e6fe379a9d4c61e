"""`privrl reproduce sdp-pe-fig4`: the quick version runs end to end in the default suite; the
full reproduction is `slow`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privrl.experiments.sdp_pe import fig4


def check_outputs(out: Path) -> dict:
    report = out / "report.md"
    assert report.is_file()
    text = report.read_text()
    for fragment in ("Figure 4", "UCBVI-LDP", "tight", "theory", "expectations"):
        assert fragment in text
    for name in (
        "config.json",
        "metrics.json",
        "metrics.csv",
        "privacy.json",
        "privacy_reports.json",
        "plots/fig4.png",
    ):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["expectations"]) == 8
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["model"] == "shuffle"
    return metrics


def test_quick_fig4(tmp_path: Path) -> None:
    metrics = check_outputs(Path(fig4(tmp_path / "q", seeds=None, seed=0, quick=True)).parent)
    finals = metrics["final_regret"]
    assert {
        "main|UCB-VI|-",
        "main|PE|-",
        "main|SDP-PE|1",
        "main|UCBVI-JDP|10",
        "main|UCBVI-LDP|1",
    } <= set(finals)
    assert all(len(f["per_seed"]) == 2 for k, f in finals.items() if k.startswith("main"))
    assert all(r["variance_ratio"] > 1 for r in metrics["calibration"])


@pytest.mark.slow
def test_full_fig4(tmp_path: Path) -> None:
    check_outputs(Path(fig4(tmp_path / "full", seeds=None, seed=0, quick=False, workers=2)).parent)
