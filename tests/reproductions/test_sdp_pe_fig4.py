"""`privrl reproduce sdp-pe-fig4`: the quick version runs end to end in the default suite; the
full reproduction is `slow`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reproductions.sdp_pe import fig4


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
    # the paper's four claims per ε at K, and 'SDP-PE far below UCBVI-LDP' at the long scale
    assert len(metrics["expectations"]) >= 8
    assert {e["kind"] for e in metrics["expectations"]} <= {
        "holds",
        "does not hold",
        "inconclusive at our scale",
    }
    assert (out / "plots" / "fig4_long.png").is_file()
    claims = json.loads((out / "claims.json").read_text())
    assert all("kind" in c for c in claims)
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["model"] == "shuffle"
    return metrics


@pytest.mark.slow  # ~11 s; tests/reproductions/test_sdp_pe_scale.py covers the report by default
def test_quick_fig4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Quick mode end to end; PE and SDP-PE run as a sweep of the online systems (one cell
    per seed, in the cache), and a rerun skips every finished cell."""
    from privrl.runs import sweep
    from reproductions import sdp_pe

    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
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
    # UCBVI-JDP at the long scale: one cached vectorised run per ε, where its plan left all-left
    assert finals["jdp-long|UCBVI-JDP|10"]["burn_in_measured"] == [None]
    assert (sdp_pe.sweep_dir(quick=True) / "jdp-long").is_dir()
    assert all(r["variance_ratio"] > 1 for r in metrics["calibration"])
    # main: 2 seeds × (PE + SDP-PE tight/theory at ε = 1, 10); long: 1 seed × 2 ε; longer:
    # 1 seed × ε = 1; sensitivity: 2 ε × (defaults + width scale × ¼, × 4)
    cells = sorted((sdp_pe.sweep_dir(quick=True) / "cells").glob("*/run/metrics.json"))
    assert len(cells) == 2 * 5 + 2 + 1 + 2 * 3
    assert len(metrics["sensitivity"]) == 2 * (3 + 2)
    assert (tmp_path / "q" / "results.csv").is_file()

    def no_rerun(tasks: list, *args: object, **kwargs: object) -> None:
        assert not tasks, f"finished cells were rerun: {[t['cell'] for t in tasks]}"

    monkeypatch.setattr(sweep, "run_local", no_rerun)
    again = json.loads(
        (
            Path(fig4(tmp_path / "q2", seeds=None, seed=0, quick=True)).parent / "metrics.json"
        ).read_text()
    )
    assert again["final_regret"]["main|SDP-PE|1"] == finals["main|SDP-PE|1"]


@pytest.mark.slow
def test_full_fig4(tmp_path: Path) -> None:
    check_outputs(Path(fig4(tmp_path / "full", seeds=None, seed=0, quick=False, workers=2)).parent)
