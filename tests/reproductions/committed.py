"""Inputs of the committed reproductions' reports, rebuilt from the files each committed run
wrote (docs/reproductions/<id>/): a report rendered from them must be the committed report.md
byte for byte."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2] / "docs" / "reproductions"


def committed(rid: str, name: str = "report.md") -> str:
    """The text of a committed reproduction's file."""
    return (ROOT / rid / name).read_text(encoding="utf-8")


def committed_json(rid: str, name: str) -> Any:
    return json.loads(committed(rid, name))


def sweep_rows(rid: str) -> list[dict[str, Any]]:
    """The committed results.csv of a sweep reproduction, typed, each row without a curve."""
    from reproductions.primorl.sweeps import read_results

    return [{**r, "curve": []} for r in read_results(ROOT / rid / "results.csv")]


def with_cell_files(
    rows: list[dict[str, Any]],
    where: Path,
    files: Callable[[Mapping[str, Any]], Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Give each row a cell directory under `where` (its `dir`) holding the JSON files
    `files(row)` names (path under the cell: document), the run facts the report reads from
    a cell rather than from the results table."""
    for r in rows:
        cell = where / str(r["cell"])
        for name, doc in files(r).items():
            (cell / name).parent.mkdir(parents=True, exist_ok=True)
            (cell / name).write_text(json.dumps(doc), encoding="utf-8")
        r["dir"] = cell
    return rows
