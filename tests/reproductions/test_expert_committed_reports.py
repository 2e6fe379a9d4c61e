"""The expert-level reports rendered from the committed runs' cells (`expert_committed`): the
regime report is the committed report.md byte for byte; the equal-steps reports were written
by an earlier layout of the report (their committed text predates the scale note's place, the
verdicts' kind and the protocol's wording), so their renderings from the same cells are stored
(without the learning-rate search table, which reads the datasets' caches)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reproductions.expert.paper import REGIME_ENVS
from tests.reproductions import expert_committed as E
from tests.reproductions.committed import committed

GOLDEN = Path(__file__).resolve().parent / "golden"
FIG3_ENVS = ("cartpole", "acrobot", "hiv", "lunarlander")


def render(rid: str, where: Path) -> str:
    """The report of the committed run `rid`, rendered in a copy of the reports' folder."""
    from reproductions.expert.figures import _fig3_lines, _fig4_lines
    from reproductions.expert.tables import _table2a_lines, _table2b_lines

    ctx = E.context(rid, where / rid)
    cells, refs, seeds = E.cells(rid), E.refs(rid), E.seeds(rid)
    if rid == "expert-fig3/regime":
        lines, _ = _fig3_lines(ctx, cells, refs, REGIME_ENVS, ("cql", "bcq"), seeds)
    elif rid == "expert-fig3":
        lines, _ = _fig3_lines(ctx, cells, refs, FIG3_ENVS, ("cql", "bcq"), seeds)
    elif rid == "expert-fig4":
        lines, _, _ = _fig4_lines(ctx, cells, refs, ctx.scale.fig4_ms, seeds)
    elif rid == "expert-table2a":
        lines = _table2a_lines(ctx, cells, refs, ("cartpole", "lunarlander"), seeds)
    else:
        lines = _table2b_lines(ctx, cells, refs, seeds)
    return "\n".join(lines) + "\n"


def test_the_cells_are_the_committed_runs() -> None:
    from tests.reproductions.committed import committed_json

    for rid in E.REPORTS:
        keys = {c.key() for cell in E.cells(rid).values() for c in cell.cfgs}
        assert keys == set(committed_json(rid, "config.json")["runs"]), rid


def test_regime_report_regenerates_the_committed_report(tmp_path: Path, monkeypatch) -> None:
    E.frozen_clock(monkeypatch, "expert-fig3/regime")
    assert render("expert-fig3/regime", tmp_path) == committed("expert-fig3/regime")


@pytest.mark.parametrize("rid", ("expert-table2a", "expert-table2b", "expert-fig3", "expert-fig4"))
def test_equal_steps_report_of_the_committed_cells_is_the_stored_rendering(
    rid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    E.frozen_clock(monkeypatch, rid)
    text = render(rid, tmp_path)
    assert "## Results" in text and "## Protocol and deviations from the paper" in text
    assert text == (GOLDEN / f"{rid}-rendered.md").read_text(encoding="utf-8")
