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
from privrl.runs import demo as lib
from tests.primorl.test_primorl import pendulum_data

TINY = {
    "rounds": 4,
    "sampling_rate": 0.2,
    "eval_every": 2,
    "epochs": 2,
    "steps_per_epoch": 10,
    "rollout_batch_size": 20,
    "rollout_length": 5,
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


def test_the_demo_recipe_comes_from_the_recipe_package_and_declares_k() -> None:
    """The demo's recipe is importable (it named a module that a package split had removed,
    so `privrl demo --system primorl` stopped with an internal error) and declares the K that
    its name carries: the cached build of the earlier 1,000-episode demo set, kept under the
    old name, can never be read as this one."""
    from privrl.runs.recipes.primorl import RecipeSpec

    spec = lib.demo_recipe()
    assert isinstance(spec, RecipeSpec) and spec.task == "pendulum"
    assert spec.n_episodes == lib.DEMO_EPISODES == 10_000
    assert spec.name == "primorl-pendulum-demo-10k"


def test_a_cached_demo_set_that_declares_another_k_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached file under the demo recipe's name whose declared K differs from the recipe's
    (an older build) is refused from its public header with one `error:` line naming the fix,
    before it is copied or a ledger is bound; a file declaring the recipe's K is used."""
    from privrl.runs.recipes import primorl as recipes

    stale = tmp_path / "stale.h5"
    save_hdf5(pendulum_data(30, seed=0, extra={"n_trajectories": 1000}), stale)
    monkeypatch.setattr(recipes, "build_recipe", lambda *a, **k: stale)
    monkeypatch.setenv("PRIVRL_LEDGER_REGISTRY", str(tmp_path / "registry"))
    code = main(["demo", "--system", "primorl", "--out", str(tmp_path / "o")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), lines
    assert "declares K = 1000" in lines[0] and "delete it" in lines[0]
    assert not (tmp_path / "o" / "data.h5").exists()

    fresh = tmp_path / "fresh.h5"
    save_hdf5(pendulum_data(30, seed=0, extra={"n_trajectories": lib.DEMO_EPISODES}), fresh)
    monkeypatch.setattr(recipes, "build_recipe", lambda *a, **k: fresh)
    assert lib.demo_dataset(tmp_path) == fresh


@pytest.mark.parametrize(("ret", "learned"), [(185.7, True), (130.0, False)])
def test_the_summary_states_the_return_and_the_full_scale(ret: float, learned: bool) -> None:
    """The closing message states the return reached (and its normalised score) beside what
    the full scale reaches; it says plainly when the policy did not learn (below a quarter of
    the way from random to expert) and only then."""
    from types import SimpleNamespace

    report = SimpleNamespace(epsilon=4.9999)  # the verdict reads only the report's ε
    norm = 100 * (ret - 122.2) / (187.9 - 122.2)
    metrics = {
        "return_mean": ret,
        "normalised_score": norm,
        "final_epochs": 10,
        "reference_returns": {"random": 122.2, "expert": 187.9},
    }
    text = lib._primorl_verdict(metrics, report)
    assert f"return is {ret:.1f}, normalised {norm:.0f}" in text and "ε = 5" in text
    assert "At full scale" in text and lib.FULL_SCALE in text
    assert ("did not learn" in text) is (not learned)
    assert "barely beats random" not in text
