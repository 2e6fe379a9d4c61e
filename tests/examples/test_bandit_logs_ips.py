"""examples/bandit_logs_ips.py: own bandit arrays → private IPS and SNIPS from Python. At
ε = 5 on its 20,000-row synthetic log the private intervals hold the known value, the private
values sit next to the non-private ones, and each report spends at most ε."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "bandit_logs_ips.py"


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("bandit_logs_ips", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bandit_logs_ips"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("bandit_logs_ips", None)


def test_example_is_short() -> None:
    assert len(EXAMPLE.read_text().splitlines()) <= 60


def test_private_estimates_cover_the_known_value(ex, capsys) -> None:
    truth = float(ex.TARGET @ ex.CLICK)
    results = ex.main(["--rows", "20000", "--epsilon", "5"])
    out = capsys.readouterr().out
    assert f"true value of the target policy: {truth:.4f}" in out
    assert set(results) == {"ips", "snips"}
    for name, r in results.items():
        assert r["low"] <= truth <= r["high"], (name, r)
        assert abs(r["value"] - r["non_private"]) < 0.005, (name, r)
        assert r["epsilon"] <= 5.0 + 1e-9
        assert f"{name:5s} private" in out


def test_the_log_has_obp_shapes(ex) -> None:
    log = ex.make_log(100)
    assert log["action_dist"].shape == (100, len(ex.CLICK), 1)
    np.testing.assert_allclose(log["action_dist"].sum(axis=1), 1.0)
    assert log["reward"].shape == log["action"].shape == log["pscore"].shape == (100,)
