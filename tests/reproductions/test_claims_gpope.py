"""GPOPE's claim builders give the committed claims.json from the committed per-trial results,
so the next `privrl reproduce gpope-*` writes the same gallery rows from the same numbers."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from reproductions import gpope

ROOT = Path(__file__).resolve().parents[2] / "docs" / "reproductions"
EPS = (0.1, 0.5, 1.0, 5.0)


def _acc(rid: str) -> gpope._Acc:
    acc = gpope._Acc([])
    with open(ROOT / rid / "results_per_trial.csv", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            acc.add(m=int(r["m"]), method=r["method"], mspbe=float(r["mspbe"]))
    return acc


def _committed(rid: str) -> list[dict]:
    return json.loads((ROOT / rid / "claims.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("fig", ["fig2a", "fig3b", "fig4"])
def test_ratio_claims_reproduce_the_committed_claims(fig):
    """The committed claims.json (each entry with its kind) is what the claim builder gives
    from the committed per-trial results and the report's θ = 0 line."""
    from reproductions.gpope.continuous_report import claims_from_results

    claims = claims_from_results(fig, ROOT / f"gpope-{fig}")
    committed = _committed(f"gpope-{fig}")
    assert [c.to_dict() for c in claims.items] == committed
    assert all("kind" in c for c in committed)
    # the report's table carries the same verdicts
    assert len(claims.rows) == 2 + len(claims.items)
    text = (ROOT / f"gpope-{fig}" / "report.md").read_text(encoding="utf-8")
    assert all(row in text for row in claims.rows)


def test_accounting_claims_reproduce_the_committed_claims():
    # σ and true-ε columns of the committed report (the accountant is not re-run here)
    ref_rows = [
        (1000, 1000, 3.12, 3.12, 5.11, 5.07, 0.255),
        (1000, 10000, 9.64, 9.64, 13.7, 13.74, 0.148),
        (10000, 100000, 3.12, 3.12, 4.69, 4.68, 0.202),
        (100, 1000, 30.4, 30.4, 43.7, 43.6, 0.148),
    ]
    grid = {
        (100, 100): [
            (9.64, 14.2, 0.153),
            (2.06, 3.61, 1.35),
            (1.17, 2.42, 6.01),
            (0.513, 1.29, 681),
        ],
        (100, 1000): [
            (30.4, 43.7, 0.148),
            (6.18, 9.97, 0.858),
            (3.18, 5.42, 1.96),
            (0.816, 1.66, 88.7),
        ],
        (1000, 10000): [
            (9.64, 13.7, 0.148),
            (2.06, 3.39, 1.01),
            (1.17, 2.06, 4.31),
            (0.513, 1.14, 2.22e4),
        ],
    }
    grid_rows = [
        (m, n, eps, p, r, te)
        for (m, n), rows in grid.items()
        for eps, (p, r, te) in zip(EPS, rows, strict=True)
    ]
    sig_rows = [
        {"epsilon": 1.0, "m": 5000, "mode": "paper", "true_epsilon": 57.1},
        {"epsilon": 1.0, "m": 5000, "mode": "rigorous", "true_epsilon": 1.0},
    ]
    claims = gpope._accounting_claims(
        ref_rows, grid_rows, sig_rows, _acc("gpope-accounting"), _relation_rows()
    )
    assert [c.to_dict() for c in claims.items] == _committed("gpope-accounting")


def _relation_rows() -> list[dict]:
    """The committed report's table of ε by neighbouring relation (3 significant digits, as
    the claims print them)."""
    text = (ROOT / "gpope-accounting" / "report.md").read_text(encoding="utf-8")
    table = text.split("## The verdict by neighbouring relation", 1)[1].split("\n\n")[2]
    keys = ("m", "N", "claimed", "sigma", "replace_one_2h", "add_remove_h_poisson")
    rows = []
    for line in table.splitlines()[2:]:
        cells = [float(c) for c in line.strip("|").split("|")]
        rows.append({**dict(zip(keys, cells, strict=False)), "paper_union_h": cells[6]})
        rows[-1]["m"], rows[-1]["N"] = int(cells[0]), int(cells[1])
    return rows
