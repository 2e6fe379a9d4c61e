"""examples/frozenlake_dp_apvi.py at a small size: FrozenLake logs → DP-APVI with a ledger →
the policy's return in the game; a second run on the same logs spends on the same ledger."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from privrl.privacy.ledger import BudgetLedger

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ex():
    path = ROOT / "examples" / "frozenlake_dp_apvi.py"
    spec = importlib.util.spec_from_file_location("frozenlake_dp_apvi", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["frozenlake_dp_apvi"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("frozenlake_dp_apvi", None)


def test_the_example_learns_privately_and_spends_on_the_ledger(ex, tmp_path: Path, capsys) -> None:
    argv = ["--episodes", "300", "--horizon", "10", "--rho", "1", "--out", str(tmp_path)]
    value = ex.main(argv)
    out = capsys.readouterr().out
    assert 0.0 <= value <= 1.0
    assert "ρ=1-zCDP" in out and "replace-one" in out and "DP-APVI return" in out
    ledger = BudgetLedger.for_dataset(tmp_path / "frozenlake.h5")
    (entry,) = ledger.entries
    assert entry.status == "complete" and entry.label == "dp-apvi"
    ex.main(argv)  # the same logs: a second spend on the same budget
    ledger = BudgetLedger.for_dataset(tmp_path / "frozenlake.h5")
    assert [e.status for e in ledger.entries] == ["complete", "complete"]
    assert ledger.spent() > entry.privacy_report().epsilon * 1.2
