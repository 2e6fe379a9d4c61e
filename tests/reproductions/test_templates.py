"""`reproductions.templates`: named fragments, `$field` filling, vanishing empty field lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from reproductions.templates import Fragments, table

TEXT = """%% report
# $title

$optional
Body with ${count}× and $$5.

%% note
> a note
  with two lines


%% other
x"""


def test_fragments_are_split_at_markers_and_lose_trailing_blank_lines() -> None:
    frags = Fragments(TEXT)
    assert frags.names() == ["report", "note", "other"]
    assert frags.fill("note") == "> a note\n  with two lines"
    assert frags.fill("other") == "x"


def test_a_lone_empty_field_line_vanishes_and_others_are_filled() -> None:
    frags = Fragments(TEXT)
    assert frags.fill("report", title="T", optional="", count=3) == ("# T\n\nBody with 3× and $5.")
    assert frags.fill("report", {"title": "T", "count": 3}, optional="O\n") == (
        "# T\n\nO\n\nBody with 3× and $5."
    )


def test_a_missing_field_is_an_error() -> None:
    with pytest.raises(KeyError):
        Fragments(TEXT).fill("report", title="T", optional="")


def test_a_fragment_defined_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="twice"):
        Fragments("%% a\nx\n%% a\ny")


def test_table() -> None:
    assert table(["a", "b"], [[1, "x"], [2.5, "y"]]) == (
        "| a | b |\n|---|---|\n| 1 | x |\n| 2.5 | y |"
    )


def test_report_templates_are_self_contained() -> None:
    """The report templates hold the prose that the reproductions' code used to hold: the same
    self-containment check applies to them (no design document, specification file, internal
    paper number or machine path)."""
    from tests.test_self_contained import offending_lines

    root = Path(__file__).resolve().parents[2] / "reproductions"
    templates = sorted(root.rglob("*.md.tmpl"))
    assert root / "dp_apvi_tabular" / "report.md.tmpl" in templates
    bad = {str(p): offending_lines(p.read_text(encoding="utf-8")) for p in templates}
    assert {p: lines for p, lines in bad.items() if lines} == {}


def test_every_report_template_parses() -> None:
    """Each template file splits into named fragments, none defined twice."""
    from reproductions.templates import fragments

    root = Path(__file__).resolve().parents[2] / "reproductions"
    for path in sorted(root.rglob("*.md.tmpl")):
        assert "report" in fragments(path).names() or "fig1a" in fragments(path).names(), path
