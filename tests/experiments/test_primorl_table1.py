"""`privrl reproduce primorl-table1`: the sweep it runs, the summary and the verdicts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from privrl.experiments.primorl_table1 import (
    MOPO_LEARNED,
    Scale,
    claims,
    summarise,
    sweep_doc,
    write_report,
)


def _row(system: str, variant: str | None, ret: float, score: float, eps: float | None) -> dict:
    return {
        "system": system,
        "variant": variant,
        "status": "ok",
        "return_mean": ret,
        "normalised_score": score,
        "privacy_epsilon": eps,
        "curve": [ret - 5, ret],
    }


def test_the_sweep_is_mopo_the_three_primorl_rows_and_the_pld_row(tmp_path: Path) -> None:
    from privrl.runs.sweep import SweepError, expand

    doc = sweep_doc(Path("d.h5"), tmp_path, Scale(seeds=4, base_seed=5), backend="local", workers=1)
    cells = doc["cells"]
    assert [c for c in cells if c["system"] == "mopo"] == [
        {"system": "mopo", "seed": s} for s in (5, 6, 7, 8)
    ]
    for v in ("no-privacy", "low", "high"):
        assert [c["seed"] for c in cells if c.get("variant") == v] == [5, 6, 7, 8]
    # beyond the paper: HIGH's ε as a target (z calibrated under PLD), on the first seeds
    pld = [c for c in cells if "epsilon" in c]
    assert pld == [{"system": "primorl", "epsilon": 5.1, "seed": s} for s in (5, 6, 7)]
    assert len(cells) == 4 * 4 + 3
    assert doc["epochs"] == 20 and doc["out"] == str(tmp_path)
    with pytest.raises(SweepError, match=r"d\.h5"):  # every cell is validated, data included
        expand(doc)


def test_summary_shares_and_verdicts() -> None:
    rows = [
        *(_row("mopo", None, r, 100.0, None) for r in (190.0, 192.0)),
        *(_row("primorl", "no-privacy", r, 95.0, None) for r in (188.0, 190.0)),
        *(_row("primorl", "low", r, 90.0, 30.0) for r in (185.0, 187.0)),
        *(_row("primorl", "high", r, 40.0, 4.07) for r in (150.0, 160.0)),
    ]
    s = summarise(rows)
    assert s["mopo"]["share"] == pytest.approx(100.0)
    assert s["high"]["share"] == pytest.approx(100 * 155 / 191)
    assert s["high"]["epsilon"] == pytest.approx(4.07) and math.isinf(s["mopo"]["epsilon"])
    verdicts = {c["claim"].split(" is")[0]: c["verdict"] for c in claims(s)}
    assert verdicts == {"NO PRIVACY (z = 0)": "holds", "LOW": "holds", "HIGH": "does not hold"}
    assert all(c["verdict"] == "inconclusive" for c in claims(s, quick=True))
    # the kind of verdict: its own where decided, "inconclusive at our scale" in quick mode
    assert [c["kind"] for c in claims(s)] == ["holds", "holds", "does not hold"]
    assert {c["kind"] for c in claims(s, quick=True)} == {"inconclusive at our scale"}


def test_no_verdict_when_mopo_did_not_learn(tmp_path: Path) -> None:
    rows = [
        *(_row("mopo", None, r, MOPO_LEARNED - 1, None) for r in (120.0, 121.0)),
        *(_row("primorl", "high", r, 0.0, 4.0) for r in (119.0, 120.0)),
    ]
    found = claims(summarise(rows))
    assert {c["verdict"] for c in found} == {"inconclusive"}
    # HIGH "close to" a MOPO at random level says nothing: vacuous; the rows not run are open
    assert [c["kind"] for c in found] == ["inconclusive at our scale"] * 2 + ["vacuous"]
    report = write_report(tmp_path, rows, Scale(seeds=2), data=Path("d.h5"), wall=60.0)
    text = report.read_text()
    assert "did not learn" in text and "| HIGH |" in text
    assert json.loads((tmp_path / "claims.json").read_text())[2]["verdict"] == "inconclusive"
    assert (tmp_path / "plots" / "returns.png").stat().st_size > 1000
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["high"]["seeds"] == 2 and metrics["mopo"]["share"] == 100.0
    assert json.loads((tmp_path / "config.json").read_text())["seeds"] == 2


@pytest.mark.slow
def test_quick_reproduction_runs_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from privrl.experiments.primorl_table1 import table1

    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))  # the quick dataset, the cells
    report = table1(tmp_path / "report", quick=True, workers=2)
    assert (tmp_path / "cache" / "reproduce" / "primorl-table1" / "quick" / "cells").is_dir()
    rows = (tmp_path / "report" / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 8  # mopo × 2 seeds + 3 PRIMORL rows × 2 seeds
    assert "Quick mode" in report.read_text()


def test_reproduce_checks_backend_and_all_before_any_work(tmp_path: Path) -> None:
    from privrl.experiments.checks import InputError
    from privrl.experiments.reproduce import REPRODUCTIONS, reproduce

    assert REPRODUCTIONS["primorl-table1"].sweep and not REPRODUCTIONS["gpope-fig1a"].sweep
    with pytest.raises(InputError, match="--backend must be local or ray"):
        reproduce("primorl-table1", tmp_path, backend="slurm")
    with pytest.raises(InputError, match="drop --out"):
        reproduce("all", tmp_path)
    with pytest.raises(InputError, match="available: all, "):
        reproduce("nope", tmp_path)
    assert not any(tmp_path.iterdir())


def test_rows_at_the_ceiling_are_called_out(tmp_path: Path) -> None:
    """When every row reaches the task's ceiling, the report says the task cannot show a cost."""
    rows = [
        *(_row("mopo", None, r, 99.0, None) for r in (190.0, 191.0)),
        *(_row("primorl", "high", r, 99.5, 4.07) for r in (190.5, 191.0)),
    ]
    text = write_report(tmp_path, rows, Scale(seeds=2), data=Path("d.h5"), wall=1.0).read_text()
    assert "ceiling" in text and "no cost of privacy" in text
    rows[-1] = _row("primorl", "high", 150.0, 40.0, 4.07)
    text = write_report(tmp_path, rows, Scale(seeds=2), data=Path("d.h5"), wall=1.0).read_text()
    assert "ceiling" not in text


def test_the_pld_row_and_the_run_time_are_reported(tmp_path: Path) -> None:
    """The high-pld cells (no variant, a target ε) form their own row; the report states its
    z against HIGH's and the time of one HIGH run; no paper claim is made for it."""
    from privrl.experiments.primorl_table1 import row_of, write_report

    def cell(variant: str | None, z: float, eps: float, seconds: float, i: int) -> dict:
        run = tmp_path / f"c{variant}{i}" / "run"
        run.mkdir(parents=True)
        release = {"noise": {"noise_multiplier": z}}
        (run / "privacy.json").write_text(json.dumps({"releases": [release]}))
        return {
            **_row("primorl", variant, 190.0 + i, 99.0, eps),
            "dir": str(run.parent),
            "seconds": seconds,
        }

    rows = [
        *(_row("mopo", None, r, 100.0, None) for r in (190.0, 192.0)),
        *(cell("high", 0.52, 4.07, 600.0 + 60 * i, i) for i in range(2)),
        *(cell(None, 0.45, 5.1, 500.0, i) for i in range(2)),
    ]
    assert row_of({"system": "primorl", "variant": None}) == "high-pld"
    assert row_of({"system": "primorl", "variant": float("nan")}) == "high-pld"
    write_report(tmp_path, rows, Scale(seeds=2), data=Path("d.h5"), wall=1.0)
    report = (tmp_path / "report.md").read_text()
    assert "HIGH at the paper's ε, calibrated under PLD" in report
    assert "z = 0.450 for ε = 5.10 against the paper's z = 0.52" in report
    assert "1.16× less noise" in report
    assert "took 10.0–11.0 min of wall time" in report
    claimed = {c["claim"] for c in json.loads((tmp_path / "claims.json").read_text())}
    assert not any("PLD" in c for c in claimed)
