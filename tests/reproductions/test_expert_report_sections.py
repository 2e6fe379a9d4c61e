"""The expert-level reports' shared sections (header, raw returns, references, protocol,
status) rendered from the committed runs' files (config.json, metrics.json, metrics.csv) are,
byte for byte, the sections of each committed report.md. The protocol of the equal-steps
reports was reworded after they were written (the regime report is the newer one): at the full
and quick scales it is compared with a stored rendering."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reproductions.expert.configs import _Context
from reproductions.expert.paper import Scale
from reproductions.expert.report import (
    Cell,
    _header,
    _protocol,
    _refs_section,
    _tail,
    raw_return_section,
)
from tests.reproductions import expert_committed as E
from tests.reproductions.committed import committed, committed_json

REPORTS = E.REPORTS
_context, _refs = E.context, E.refs


def _cells(rid: str) -> dict[str, Cell]:
    return E.cells(rid)


def _in_report(rid: str, lines: list[str]) -> None:
    block = "\n".join(lines)
    assert block and block in committed(rid), block[:200]


@pytest.mark.parametrize("rid", REPORTS)
def test_header_is_the_committed_one(rid: str) -> None:
    text = committed(rid)
    title = text.split("\n", 1)[0][2:].replace(" (the paper's noise regime)", "")
    name = rid.split("/")[0]
    lines = _header(title, name, _context(rid), E.seeds(rid))
    assert text.startswith("\n".join(lines))


@pytest.mark.parametrize("rid", REPORTS)
def test_references_and_status_are_the_committed_ones(
    rid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    E.frozen_clock(monkeypatch, rid)
    ctx, cells = _context(rid), _cells(rid)
    _in_report(rid, _refs_section(ctx, _refs(rid), cells))
    name = rid.split("/")[0]
    n_total = len(set(committed_json(rid, "config.json")["runs"]))
    n_done = len({r["key"] for cell in cells.values() for r in cell.runs})
    tail = _tail(ctx, name, n_done, n_total, cells)
    assert committed(rid).endswith("\n".join(tail) + "\n")


@pytest.mark.parametrize("rid", ("expert-fig3", "expert-fig3/regime"))
def test_raw_return_section_is_the_committed_one(rid: str) -> None:
    m = committed_json(rid, "metrics.json")
    random = {k.split("/")[0]: float(r["random"]) for k, r in m["references"].items()}
    lines = raw_return_section(m["cells"], random)
    assert lines and "\n".join(lines) in committed(rid)


def test_regime_protocol_is_the_committed_one() -> None:
    _in_report("expert-fig3/regime", _protocol(_context("expert-fig3/regime")))


@pytest.mark.parametrize("scale", ("full", "quick", "quick_regime"))
def test_protocol_at_each_scale_is_the_stored_rendering(scale: str, tmp_path: Path) -> None:
    ctx = _Context(tmp_path, getattr(Scale, scale)(), None)
    text = "\n".join(_protocol(ctx))
    assert "## Protocol and deviations from the paper" in text
    golden = Path(__file__).resolve().parent / "golden" / f"expert-protocol-{scale}.md"
    assert text == golden.read_text(encoding="utf-8")


def _unfinished(tmp_path: Path) -> _Context:
    """A quick invocation stopped by its time budget, with a missing dataset and a failed run."""
    ctx = _Context(tmp_path, Scale.quick(), None)
    ctx.stopped, ctx.n_run = True, 3
    ctx.missing = {"lunarlander": "privrl data collect --recipe experts-lunarlander --quick"}
    ctx.failed = {"cartpole-cql-ours-eps10-seed1": "RuntimeError: diverged"}
    ctx.started = time.perf_counter() - 90.0
    return ctx


def test_unfinished_quick_header_and_status_are_the_stored_rendering(tmp_path: Path) -> None:
    ctx = _unfinished(tmp_path)
    cells = {"cartpole/cql/p1/main": Cell("CartPole CQL p = 1", [], [{"key": "a", "wall_s": 60}])}
    header = _header("Table 2a — p ablation at ε = 10 (expert-level DP)", "expert-table2a", ctx,
                     [0, 1])  # fmt: skip
    text = "\n".join([*header, *_tail(ctx, "expert-table2a", 1, 4, cells)])
    assert "**Quick mode**" in text and "hit its time budget" in text and "To finish" in text
    golden = Path(__file__).resolve().parent / "golden" / "expert-sections-unfinished.md"
    assert text.replace(str(tmp_path), "OUT") == golden.read_text(encoding="utf-8")
