"""`privrl demo --system primorl`, at a tiny scale: the run directory, the ledger bound to the
demo's copy and its recorded spend, what the console says was released, a rerun into the same
--out, and bad input refused before any work."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from privrl.cli.main import main
from privrl.data.io import save_hdf5
from privrl.experiments import demo as lib
from tests.primorl.test_primorl import pendulum_data

TINY = {
    "rounds": 4,
    "sampling_rate": 0.2,
    "eval_every": 2,
    "epochs": 2,
    "steps_per_epoch": 10,
    "rollout_batch_size": 20,
    "rollout_length": 5,
    "holdout_fraction": 0.2,
    # an explicit, large z: no calibration, and PLD accounting of a few seconds (calibrating
    # for the target ε takes minutes of PLD evaluations at this q)
    "noise_multiplier": 3.0,
}


@pytest.fixture
def tiny_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo on a 30-trajectory Pendulum-like set with a few rounds and SAC steps."""
    source = tmp_path / "source.h5"
    save_hdf5(pendulum_data(30, seed=0, extra={"n_trajectories": 30}), source)
    monkeypatch.setenv("PRIVRL_LEDGER_REGISTRY", str(tmp_path / "registry"))
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setattr(lib, "demo_dataset", lambda *a, **k: source)
    original = lib.primorl_demo_config

    def small(*args, **kwargs):
        return dataclasses.replace(original(*args, **kwargs), **TINY)

    monkeypatch.setattr(lib, "primorl_demo_config", small)
    return source


def _demo(out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, dict]:
    """One demo into `out`: its console text and privacy.json, after the common checks."""
    from privrl.privacy.ledger import BudgetLedger

    code = main(["demo", "--system", "primorl", "--epsilon", "5", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    for name in ("config.json", "metrics.json", "metrics.csv", "privacy.json", "model.pt"):
        assert (out / "run" / name).is_file(), name
    privacy = json.loads((out / "run" / "privacy.json").read_text())
    ledger = BudgetLedger.for_dataset(out / "data.h5")
    assert ledger is not None and len(ledger.entries) == 1
    assert ledger.spent() == pytest.approx(privacy["epsilon"], rel=1e-6)
    return text, privacy


def test_demo_runs_a_private_primorl_run_and_records_it(
    tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run directory contract under OUT/run/; its one release (trajectory-level,
    add/remove, T_max rounds) recorded in the ledger of OUT/data.h5, the spend equal to the
    report's ε; the console naming the release and that ε."""
    text, privacy = _demo(tmp_path / "demo", capsys)
    assert privacy["unit"] == "trajectory" and privacy["relation"] == "add_remove"
    assert 0 < privacy["epsilon"] <= 6.0 and len(privacy["releases"]) == 1
    assert privacy["releases"][0]["count"] == TINY["rounds"]
    assert privacy["releases"][0]["noise"]["noise_multiplier"] == 3.0
    assert "What was released" in text and "dynamics ensemble" in text
    assert f"{privacy['epsilon']:.3g} at δ = 1e-05" in text


@pytest.mark.slow
def test_a_second_demo_replaces_the_first(
    tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rerun into the same --out replaces the earlier run and starts a fresh budget (one
    ledger entry, not two)."""
    _demo(tmp_path / "demo", capsys)
    _demo(tmp_path / "demo", capsys)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--system", "nope"], "--system"),
        (["--system", "primorl", "--episodes", "10"], "--episodes"),
        (["--epsilon", "1"], "--epsilon"),
        (["--system", "primorl", "--epsilon", "7"], "--total-epsilon"),
        (["--system", "primorl", "--epsilon", "nan"], "--epsilon"),
        (["--system", "primorl", "--seed", "-1"], "--seed"),
    ],
)
def test_bad_input_is_refused_before_any_work(
    argv: list[str],
    fragment: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def boom(*a, **k):
        raise AssertionError("the demo started")

    monkeypatch.setattr(lib, "run_primorl_demo", boom)
    monkeypatch.setattr(lib, "run_demo", boom)
    code = main(["demo", *argv, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert fragment in lines[0]


def test_a_foreign_run_directory_is_not_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lib, "run_primorl_demo", lambda *a, **k: None)
    (tmp_path / "o" / "run").mkdir(parents=True)
    (tmp_path / "o" / "run" / "notes.txt").write_text("mine")
    code = main(["demo", "--system", "primorl", "--out", str(tmp_path / "o")])
    assert code == 2 and "not an earlier demo run" in capsys.readouterr().err
    assert (tmp_path / "o" / "run" / "notes.txt").read_text() == "mine"
