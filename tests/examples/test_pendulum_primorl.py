"""examples/pendulum_primorl.py at a tiny size: Pendulum-v1 logs of a behaviour policy, PRIMORL
fitted from Python with a ledger, its report and return printed."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ex():
    path = ROOT / "examples" / "pendulum_primorl.py"
    spec = importlib.util.spec_from_file_location("pendulum_primorl", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pendulum_primorl"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("pendulum_primorl", None)


def test_the_example_fits_a_private_policy_and_prints_it(ex, capsys) -> None:
    metrics = ex.main(episodes=10, rounds=2, epochs=1, updates=5, z=2.0)  # z: no calibration
    out = capsys.readouterr().out
    assert "-DP for one whole trajectory" in out and "return" in out and "left" in out
    assert metrics["private"] and 0 < metrics["epsilon"] < 10.0
    assert metrics["env_id"] == "Pendulum-v1" and metrics["rounds"] == 2
    assert math.isfinite(metrics["return_mean"]) and metrics["return_mean"] <= 0  # −cost
