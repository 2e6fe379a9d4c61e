"""The accounting verdict by neighbouring relation, and the θ = 0-first verdicts."""

from __future__ import annotations

import pytest

from privrl.ope.accounting import COARSE_ORDERS, paper_sigma
from reproductions.gpope import _Claims
from reproductions.gpope.accounting_study import relation_epsilons


def _check(claimed: float, union: float, replace: float) -> None:
    sigma = paper_sigma(claimed, 1e-5, 100, 100)
    row = relation_epsilons(sigma, 100, 100, claimed, orders=COARSE_ORDERS)
    assert row["paper_union_h"] == pytest.approx(union, rel=0.05)
    assert row["replace_one_2h"] == pytest.approx(replace, rel=0.05)
    assert row["add_remove_h_poisson"] < row["paper_union_h"] < row["replace_one_2h"]


def test_lemma1_sigma_under_each_relation():
    """Privacy (accountant values): Lemma 1's σ for a claimed ε = 1 at m = N = 100 delivers
    ε ≈ 1.06 under the paper's own d ∪ {x} relation (sensitivity h), ≈ 6.0 under replace-one
    (sensitivity 2h, our default) and less than either under add/remove with Poisson
    sampling at rate 1/m. (A coarse RDP order grid keeps the test fast: its ε are upper
    bounds within 5% of the dense grid's here.)"""
    _check(1.0, 1.056, 6.01)


@pytest.mark.slow
def test_lemma1_sigma_under_each_relation_at_claimed_5():
    """As above for a claimed ε = 5 (σ ≈ 0.51): ≈ 11 under d ∪ {x}, ≈ 681 under replace-one."""
    _check(5.0, 11.0, 681.0)


def test_vacuous_comparison_is_inconclusive_in_the_gallery():
    """A claim that holds only because GP is no better than θ = 0 is reported as vacuous."""
    claims = _Claims("plots/x.png")
    claims.add("GP beats V1", True, "ratio 1e9", vacuous=True)
    claims.add("GP beats θ = 0", False, "ratio 1.0")
    assert claims.items[0].verdict == "inconclusive"
    assert "**vacuous**" in claims.rows[2] and "vacuous:" in claims.rows[2]
    assert claims.items[1].verdict == "does not hold"


def test_quick_report_is_the_stored_rendering(tmp_path, monkeypatch) -> None:
    """A quick run's report.md (deterministic but for its wall-time line) is byte for byte the
    stored one: the report's prose and tables do not drift when its code is reorganised."""
    from pathlib import Path

    from reproductions.gpope import accounting

    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    text = accounting(tmp_path / "out", seeds=1, seed=0, quick=True).read_text(encoding="utf-8")
    lines = text.split("\n")
    assert sum(x.startswith("- wall time: ") for x in lines) == 1
    golden = Path(__file__).resolve().parent / "golden" / "gpope-accounting-quick.md"
    kept = "\n".join(x for x in lines if not x.startswith("- wall time: "))
    assert kept == golden.read_text(encoding="utf-8")
