"""`privrl reproduce audit`: the report's rows and verdicts from a sweep's results rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reproductions.audit.report import (
    ONE_RUN,
    ONE_RUNS,
    PRIVATE,
    TWINS,
    Scale,
    cells,
    claims,
    one_run_settings,
    summarise,
    write_report,
)
from reproductions.reproduce import REPRODUCTIONS


def _rows(bound_of=lambda system, eps: 0.6 * eps) -> list[dict]:
    rows = []
    for _, system, flag, budgets in PRIVATE:
        for b in budgets:
            rows.append(
                {"system": system, flag: b, "mode": None, "trials": 1000, "seconds": 2.0,
                 "status": "ok", "epsilon_claimed": b, "epsilon_lower_bound": bound_of(system, b),
                 "auc": 0.7}
            )  # fmt: skip
    for _, system, settings in TWINS:
        rows.append(
            {"system": system, **settings, "trials": 2000, "seconds": 1.0, "status": "ok",
             "epsilon_claimed": "inf", "epsilon_lower_bound": 5.4, "auc": 1.0}
        )  # fmt: skip
    _, system, eps = ONE_RUN
    rows.append(
        {"system": system, "epsilon": eps, "mode": "one-run", "trials": 2, "seconds": 3.0,
         "status": "ok", "epsilon_claimed": eps, "epsilon_lower_bound": 1.3, "correct": 86,
         "guesses": 100}
    )  # fmt: skip
    for _, kind, one_system, settings in ONE_RUNS:
        claimed = "inf" if kind == "twin" else settings["epsilon"]
        rows.append(
            {"system": one_system, **one_run_settings(one_system, settings), "trials": 1,
             "seconds": 9.0, "status": "ok", "epsilon_claimed": claimed,
             "epsilon_lower_bound": 3.4 if kind == "twin" else 1.0, "correct": 90,
             "guesses": 100, "auc": 0.8}
        )  # fmt: skip
    return rows


def test_cells_cover_two_budgets_per_private_system_and_every_twin() -> None:
    cs = cells(Scale(tight=10, trials=5))
    assert len(cs) == 2 * len(PRIVATE) + len(TWINS) + 1 + len(ONE_RUNS)
    systems = {c["system"] for c in cs}
    assert systems == {s for _, s, _, _ in PRIVATE} | {"audit-primorl", "audit-expert-dp-sgd"}
    assert sum(c.get("mode") == "one-run" for c in cs) == 1


def test_summary_and_verdicts() -> None:
    summary = summarise(_rows())
    assert [s["kind"] for s in summary].count("private") == 2 * len(PRIVATE)
    assert all("bound" in s for s in summary)
    found = claims(summary, quick=False)
    assert [c.verdict for c in found] == ["holds", "holds", "holds"]
    # one violated private row: the first claim no longer holds
    bad = claims(
        summarise(_rows(lambda s, e: 1.1 * e if s == "audit-sdp-pe" else e / 2)), quick=False
    )
    assert bad[0].verdict == "partly" and bad[2].verdict == "holds"
    assert all(c.verdict == "inconclusive" for c in claims(summary, quick=True))


def test_report_files(tmp_path: Path) -> None:
    path = write_report(tmp_path, _rows(), Scale(), wall=1.0)
    text = path.read_text(encoding="utf-8")
    assert "| DP-SGD, one run (1000 canaries) | ε = 4 | 4.00 | 1.30 |" in text
    assert "86/100 guesses right" in text
    claims_file = json.loads((tmp_path / "claims.json").read_text(encoding="utf-8"))
    assert len(claims_file) == 3 and (tmp_path / "plots" / "bounds.png").stat().st_size > 0


def test_audit_is_a_registered_sweep_reproduction() -> None:
    entry = REPRODUCTIONS["audit"]
    assert entry.sweep and entry.load().__name__ == "run"


@pytest.mark.slow
def test_quick_reproduction_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reproductions.reproduce import reproduce

    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    path = reproduce("audit", tmp_path / "out", quick=True)
    assert "Quick mode" in Path(str(path)).read_text(encoding="utf-8")


def test_metrics_named_like_an_axis_are_read_from_their_prefixed_column() -> None:
    """The sweep writes `metric.guesses` when a cell sets `guesses` (the one-run audits'): the
    DP-SGD one-run row, which does not set it, still reports its guesses and correct count."""
    rows = [
        {**r, "guesses": "", "metric.guesses": 100, "correct": "", "metric.correct": 86}
        if r.get("mode") == "one-run"
        else r
        for r in _rows()
    ]
    one = [s for s in summarise(rows) if s["system"] == ONE_RUN[1] and s["kind"] == "one-run"]
    assert one[0]["guesses"] == 100 and one[0]["correct"] == 86


COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "reproductions" / "audit"
GOLDEN = Path(__file__).resolve().parent / "golden"


def _render_committed(tmp_path: Path, scale: Scale) -> str:
    """report.md of the committed sweep's results.csv (the committed invocation took 0.6 min)."""
    from reproductions.audit.report import read_rows

    rows = read_rows(COMMITTED / "results.csv")
    return write_report(tmp_path, rows, scale, wall=36.0).read_text(encoding="utf-8")


def test_report_regenerates_the_committed_report_byte_for_byte(tmp_path: Path) -> None:
    text = _render_committed(tmp_path, Scale())
    assert text == (COMMITTED / "report.md").read_text(encoding="utf-8")


def test_quick_rendering_of_the_committed_rows_is_the_stored_one(tmp_path: Path) -> None:
    """The same rows rendered as a quick run: the quick-mode line and withheld verdicts."""
    text = _render_committed(tmp_path, Scale(tight=20_000, trials=20_000, quick=True))
    assert "Quick mode" in text
    assert text == (GOLDEN / "audit-quick.md").read_text(encoding="utf-8")


def test_a_cell_that_did_not_run_is_a_not_run_row(tmp_path: Path) -> None:
    rows = [r for r in _rows() if r["system"] != "audit-sdp-pe"]
    text = write_report(tmp_path, rows, Scale(), wall=1.0).read_text(encoding="utf-8")
    assert "| SDP-PE counters | ε = 1 | not run | | | | | |\n" in text
