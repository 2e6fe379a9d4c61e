"""The `mopo-table1` reproduction: the MOPO row of PRIMORL's Table 1 as a sweep of `privrl train
mopo` runs, its report and its regeneration from recorded runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from privrl.primorl.mopo import MOPOConfig
from tests.primorl.test_mopo import small_pendulum_dataset

# --------------------------------------------------------------------------------------------
# reproduction mopo-table1
# --------------------------------------------------------------------------------------------


def test_table1_names_the_command_for_missing_datasets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reproductions.primorl.mopo import table1

    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError) as info:
        table1(tmp_path / "out", seeds=3)
    msg = str(info.value)
    for task in ("pendulum", "balance", "swingup"):
        assert f"privrl data collect --recipe primorl-{task}" in msg
    assert not (tmp_path / "out" / "report.md").exists()


def test_table1_cells_are_train_mopo_runs_with_the_task_defaults() -> None:
    """The full reproduction's cells are `privrl train mopo` with no option: their library
    config is exactly `MOPOConfig.for_task` (the configuration the published report ran), and
    the grid is every task's dataset × the seeds."""
    from reproductions.primorl import mopo as exp

    for task in exp.TABLE1_TASKS:
        assert exp.task_config(task, False).to_dict() == MOPOConfig.for_task(task).to_dict()
        quick = exp.task_config(task, True)
        assert (quick.epochs, quick.steps_per_epoch) == (2, 50)
    paths = {t: Path(f"{t}.h5") for t in exp.TABLE1_TASKS}
    doc = exp.sweep_doc(paths, Path("cells"), [0, 1, 2], quick=False)
    assert doc["system"] == "mopo"
    assert doc["cells"] == [{"data": f"{t}.h5", "seed": s} for t in paths for s in (0, 1, 2)]
    assert not set(doc) & set(exp.QUICK_OPTIONS)
    assert exp.QUICK_OPTIONS.items() <= exp.sweep_doc(paths, Path("c"), [0], quick=True).items()


def test_table1_runs_five_pendulum_seeds_and_three_per_cartpole(tmp_path: Path) -> None:
    """The paper's ≥ 5 seeds for Pendulum; a cell's key is its run only, so Pendulum's cells
    are the same whatever the cartpoles' seeds (finished ones are found again)."""
    from privrl.runs.sweep import expand
    from reproductions.primorl import mopo as exp

    lists = exp._seed_lists(exp.TABLE1_TASKS, None, 0, quick=False)
    assert lists == {"pendulum": [0, 1, 2, 3, 4], "balance": [0, 1, 2], "swingup": [0, 1, 2]}
    assert exp._seed_lists(("pendulum",), 2, 3, quick=False) == {"pendulum": [3, 4]}
    assert exp._seed_lists(exp.TABLE1_TASKS, None, 0, quick=True)["pendulum"] == [0, 1]
    with pytest.raises(ValueError, match="seeds must be >= 1"):
        exp._seed_lists(("pendulum",), 0, 0, quick=False)
    data = _toy_dataset(tmp_path)
    paths = {"pendulum": data}
    per_task = expand(exp.sweep_doc(paths, tmp_path / "c", {"pendulum": [3, 4]}, quick=True))
    uniform = expand(exp.sweep_doc(paths, tmp_path / "c", [0, 1, 2, 3, 4], quick=True))
    keys = {c.values["seed"]: c.key for c in uniform.cells}
    assert [c.key for c in per_task.cells] == [keys[3], keys[4]]


@pytest.mark.slow
def test_table1_quick_runs_resumes_and_skips_finished_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quick mode builds the tiny recipe datasets, runs 3 tasks × 2 seeds as a sweep of the
    `mopo` system and writes the report; a rerun skips every finished cell."""
    import json

    from privrl.runs import sweep
    from reproductions.primorl import mopo as exp

    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    report = exp.table1(out, quick=True)  # 6 runs of the system at its quick options
    text = report.read_text()
    assert "Quick mode" in text and "795.9 ± 6.5" in text and "976.3 ± 26.8" in text
    cells = exp.sweep_dir(quick=True) / "cells"
    finished = sorted(cells.glob("mopo-*/run/metrics.json"))
    assert len(finished) == 6
    seen = {
        (
            json.loads(p.read_text())["task"],
            json.loads(p.parent.joinpath("config.json").read_text()).get("seed"),
        )
        for p in finished
    }
    assert {t for t, _ in seen} == {"pendulum", "balance", "swingup"}
    assert (out / "plots" / "learning_curves.png").is_file()
    assert (out / "results.csv").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["tasks"]) == {"pendulum", "balance", "swingup"}
    assert all(len(t["seeds"]) == 2 for t in metrics["tasks"].values())

    def no_rerun(tasks: list[Any], *args: Any, **kwargs: Any) -> None:
        assert not tasks, f"finished cells were rerun: {[t['cell'] for t in tasks]}"

    monkeypatch.setattr(sweep, "run_local", no_rerun)
    exp.table1(out, quick=True)


def _toy_dataset(tmp_path: Path) -> Path:
    from privrl.data.io import save_hdf5

    return save_hdf5(small_pendulum_dataset(2, seed=1), tmp_path / "primorl-pendulum.h5")


def _summary(task: str, rets: tuple[float, ...], norm: float | None = 99.0) -> dict[str, Any]:
    return {
        "seeds": list(range(len(rets))),
        "return_mean": float(np.mean(rets)),
        "return_ci95": 1.0,
        "raw_return_mean": -140.0 if task == "pendulum" else float(np.mean(rets)),
        "raw_return_ci95": 16.3 if task == "pendulum" else 1.0,
        "normalised_mean": norm,
        "normalised_ci95": 1.5,
        "target": 90.0,
        "paper_mopo": (795.9, 6.5) if task == "pendulum" else (976.3, 26.8),
    }


def test_table1_claims_name_the_papers_scale_and_our_raw_return() -> None:
    """The paper's Pendulum number is on its own scale (not 'raw': a raw Pendulum-v1 return is
    ≤ 0); ours is given on both scales with its seed count; quick mode decides nothing."""
    from reproductions.primorl import mopo_report as rep

    summary = {"pendulum": _summary("pendulum", (191.0,) * 5), "balance": _summary("b", (950.0,))}
    pend, bal = rep.gallery_claims(summary)
    assert "(raw)" not in pend.paper and "paper's own Pendulum scale" in pend.paper
    assert "raw Pendulum-v1 -140.0 ± 16.3" in pend.ours and "(5 seeds)" in pend.ours
    assert "dm_control scale" in bal.paper and "raw" not in bal.ours
    assert (pend.verdict, pend.kind) == ("holds", "holds")
    low = rep.gallery_claims({"pendulum": _summary("pendulum", (150.0,) * 5, norm=40.0)})[0]
    assert (low.verdict, low.kind) == ("does not hold", "does not hold")
    quick = rep.gallery_claims(summary, quick=True)
    assert {(c.verdict, c.kind) for c in quick} == {("inconclusive", "inconclusive at our scale")}


def _recorded_report(out: Path) -> None:
    """A report as `table1` writes it: pendulum and balance, 2 seeds each."""
    from reproductions.primorl import mopo_report as rep

    runs = [
        {"task": t, "env_id": e, "seed": s, "return_mean": r + s, "normalised_score": 95.0,
         "seconds": 60.0, "curve": [r - 1, r + s]}
        for t, e, r in (("pendulum", "privrl/Pendulum-v0", 190.0),
                        ("balance", "privrl/CartpoleBalance-v0", 950.0))
        for s in (0, 1)
    ]  # fmt: skip
    datasets = {
        t: {"path": f"{t}.h5", "recipe": f"primorl-{t}", "episodes": 10, "transitions": 2000,
            "reference_returns": {"random": 10.0, "expert": 200.0}}
        for t in ("pendulum", "balance")
    }  # fmt: skip
    rep._write_table1(out, runs, datasets, ("pendulum", "balance"), 0, quick=False, wall=60.0)


def test_regenerate_rebuilds_the_report_from_its_runs_and_adds_finished_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`regenerate` runs nothing: the recorded runs give the same numbers again, and a finished
    cell of the default grid (here Pendulum seed 2) joins them."""
    import json

    from privrl.runs import sweep
    from reproductions.primorl import mopo as exp

    out = tmp_path / "out"
    _recorded_report(out)
    before = json.loads((out / "metrics.json").read_text())["tasks"]
    monkeypatch.setattr(exp, "_dataset_path", lambda task, quick: tmp_path / f"no-{task}.h5")
    monkeypatch.setattr(sweep, "run_local", lambda *a, **k: pytest.fail("regenerate ran a cell"))
    exp.regenerate(out)
    again = json.loads((out / "metrics.json").read_text())["tasks"]
    for task in ("pendulum", "balance"):
        for key in ("seeds", "per_seed_return", "per_seed_normalised", "raw_return_mean"):
            assert again[task][key] == pytest.approx(before[task][key]), (task, key)

    # a finished cell: Pendulum seed 2 (its run directory as the run layer leaves it)
    run = tmp_path / "cell" / "run"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps(
        {"task": "pendulum", "env_id": "privrl/Pendulum-v0", "return_mean": 196.0,
         "normalised_score": 97.0, "seconds": 120.0}))  # fmt: skip
    (run / "config.json").write_text(json.dumps({"seed": 2}))
    (run / "metrics.csv").write_text("epoch,return_mean\n1,150.0\n2,196.0\n")
    cell = type("C", (), {"dir": tmp_path / "cell", "run_dir": run})()
    data = _toy_dataset(tmp_path)
    monkeypatch.setattr(exp, "_dataset_path", lambda task, quick: data)
    monkeypatch.setattr(sweep, "expand", lambda doc: type("S", (), {"cells": [cell]})())
    monkeypatch.setattr(sweep, "finished", lambda c: True)
    note = "Seed 2 of Pendulum: a test cell."
    text = exp.regenerate(out, note=[note]).read_text()
    pend = json.loads((out / "metrics.json").read_text())["tasks"]["pendulum"]
    assert pend["seeds"] == [0, 1, 2] and pend["per_seed_return"] == [190.0, 191.0, 196.0]
    assert "| pendulum | 3 |" in text and "| balance | 2 |" in text
    assert "## How these runs were obtained" in text and note in text
    assert "Regenerated from finished runs (the regeneration ran nothing)" in text
    assert json.loads((out / "config.json").read_text())["seeds"] == {"pendulum": 3, "balance": 2}


def test_report_states_the_rollout_batch_and_its_measured_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reproductions.primorl import mopo_report as rep

    out = tmp_path / "out"
    cost = {
        5000: {"transitions": 150_000, "cpu_total": 40.0, "cpu_epoch": 20.0, "peak_mb": 900.0},
        50000: {"transitions": 1_500_000, "cpu_total": 160.0, "cpu_epoch": 140.0,
                "peak_mb": 1900.0},
    }  # fmt: skip
    monkeypatch.setattr(rep, "ROLLOUT_BATCH_COST", cost)
    _recorded_report(out)
    text = (out / "report.md").read_text()
    assert "not the paper's 50,000" in text
    assert "| 50,000 | 1,500,000 | 7,500,000 | 140.0 | 160 | 1,900 |" in text
    assert "An epoch costs 7.0× as much at the paper's batch" in text
    assert "The paper's batch itself is not run" in text


def test_the_task_defaults_the_cells_rely_on_are_pinned() -> None:
    """A full-scale cell sets no MOPO option: it runs the task defaults, and its key (the
    config's identity) does not change when a default does. The settings it ran are pinned
    here (golden/mopo-table1-settings.json), so that a changed library default shows as a
    failing test instead of cached cells that no longer mean what a rerun would compute."""
    import json

    from reproductions.primorl.mopo import TABLE1_TASKS, run_options, task_config

    golden = Path(__file__).resolve().parent / "golden" / "mopo-table1-settings.json"
    pinned = json.loads(golden.read_text(encoding="utf-8"))
    assert run_options(quick=False) == {}
    assert set(pinned) == set(TABLE1_TASKS)
    for task in TABLE1_TASKS:
        assert task_config(task, quick=False).settings() == pinned[task], task
