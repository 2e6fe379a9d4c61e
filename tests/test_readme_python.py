"""The README's Python quickstart runs as printed, in a fresh directory, and does what it says:
a DP-APVI fit from a table in memory whose spend the dataset's ledger records, and a private
IPS estimate on bandit arrays."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def test_the_quickstart_runs_and_spends_what_it_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 2, "the README has a quickstart and a privacy-core block"
    monkeypatch.chdir(tmp_path)  # the quickstart writes patients.h5 where it runs
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    fit, ledger, est = namespace["fit"], namespace["ledger"], namespace["est"]
    assert fit.report.certified and fit.report.epsilon < 5.0
    (entry,) = ledger.entries
    assert entry.status == "complete"
    assert ledger.spent() == pytest.approx(fit.report.epsilon)
    low, high = est.interval
    assert est.report.certified and est.report.epsilon == pytest.approx(1.0)
    assert low <= high
    out = capsys.readouterr().out
    assert "spent ε" in out and "IPS" in out


def test_the_privacy_core_block_runs(capsys: pytest.CaptureFixture[str]) -> None:
    block = python_blocks(README.read_text(encoding="utf-8"))[1]
    namespace: dict[str, object] = {}
    exec(compile(block, str(README), "exec"), namespace)
    assert namespace["report"].epsilon == pytest.approx(1.0, rel=1e-3)
