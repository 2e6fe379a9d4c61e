"""The PRIMORL reproductions' reports (primorl-table1, primorl-table11, primorl-ablation,
primorl-fig3, mopo-table1) rendered from the committed runs' own results are the committed
report.md byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reproductions.primorl.sweeps import Scale
from tests.reproductions.committed import committed, committed_json, sweep_rows, with_cell_files

PENDULUM = Path("primorl-pendulum.h5")


def _wall(rid: str) -> float:
    return _minutes(committed(rid))


def _minutes(text: str) -> float:
    head = text.split("this invocation took ", 1)[1]
    return 60.0 * float(head.split(" ", 1)[0])


def _table1_rows(
    where: Path, keep: Any = lambda row: True, results: Path | None = None
) -> list[dict[str, Any]]:
    """The committed primorl-table1 rows (or those of `results`) that `keep` keeps, each
    cell's z in its privacy.json."""
    from reproductions.primorl.sweeps import read_results
    from reproductions.primorl.table1 import row_of, task_of

    metrics = committed_json("primorl-table1", "metrics.json")

    def privacy(row: dict[str, Any]) -> dict[str, Any]:
        task = task_of(row)
        table = metrics if task == "pendulum" else metrics.get(task, {})
        return _privacy((table.get(row_of(row)) or {}).get("noise_multiplier"))

    table = sweep_rows("primorl-table1") if results is None else read_results(results)
    rows = [{**r, "curve": []} for r in table if keep(r)]
    return with_cell_files(rows, where, privacy)


def test_table1_report_regenerates_the_committed_report(tmp_path: Path) -> None:
    from reproductions.primorl.table1_report import write_report

    rows = _table1_rows(tmp_path / "cells")
    inputs = committed_json("primorl-table1", "config.json")["inputs"]  # what that run was given
    report = write_report(
        tmp_path / "out",
        rows,
        Scale(seeds=5, epochs=20),
        data={t: Path(name) for t, name in inputs["run_here"].items()},
        missing=inputs["not_run"],
        earlier=inputs["earlier_rows"],
        wall=_wall("primorl-table1"),
    )
    assert report.read_text(encoding="utf-8") == committed("primorl-table1")


def test_table11_report_regenerates_the_committed_report(tmp_path: Path) -> None:
    from reproductions.primorl.table11 import row_of
    from reproductions.primorl.table11_report import write_report

    by_row = committed_json("primorl-table11", "metrics.json")["rows"]

    def model(row: dict[str, Any]) -> dict[str, Any]:
        mse = (by_row.get(row_of(row)) or {}).get("model_mse")
        return {} if mse is None else {"run/metrics.json": {"best_holdout_mse": [mse]}}

    import shutil

    from tests.reproductions.committed import ROOT

    rows = with_cell_files(sweep_rows("primorl-table11"), tmp_path / "cells", model)
    earlier = ROOT / "primorl-table11" / "paper-configuration" / "metrics.json"
    (tmp_path / "out" / "paper-configuration").mkdir(parents=True)
    shutil.copyfile(earlier, tmp_path / "out" / "paper-configuration" / "metrics.json")
    report = write_report(
        tmp_path / "out",
        rows,
        Scale(seeds=1, epochs=60),
        data=Path("primorl-halfcheetah.h5"),
        wall=_wall("primorl-table11"),
    )
    assert report.read_text(encoding="utf-8") == committed("primorl-table11")


def test_ablation_report_regenerates_the_committed_report(tmp_path: Path) -> None:
    from reproductions.primorl.ablation import write_report

    missing = {
        "balance": "dataset missing (build it with `privrl data collect --recipe "
        "primorl-balance`, then rerun)"
    }
    report = write_report(
        tmp_path,
        sweep_rows("primorl-ablation"),
        Scale(seeds=2, epochs=20),
        datasets={"pendulum": PENDULUM},
        missing=missing,
        wall=_wall("primorl-ablation"),
    )
    assert report.read_text(encoding="utf-8") == committed("primorl-ablation")
    for name in ("claims.json", "metrics.json", "config.json"):
        assert (tmp_path / name).read_text(encoding="utf-8") == committed("primorl-ablation", name)


def _privacy(z: float | None) -> dict[str, Any]:
    """A cell's privacy.json as far as the reports read it (its z), none for MOPO."""
    if z is None:
        return {}
    return {"run/privacy.json": {"releases": [{"noise": {"noise_multiplier": z}}]}}


def test_fig3_report_regenerates_the_committed_report(tmp_path: Path) -> None:
    from reproductions.primorl.fig3 import write_report
    from reproductions.primorl.sweeps import noise_multiplier

    by_key = committed_json("primorl-fig3", "metrics.json")

    def privacy(row: dict[str, Any]) -> dict[str, Any]:
        key = "mopo" if row["system"] == "mopo" else f"{float(row['epsilon']):g}"
        return _privacy(by_key[key].get("noise_multiplier"))

    rows = with_cell_files(sweep_rows("primorl-fig3"), tmp_path / "cells", privacy)
    for r in rows:  # as `fig3` does before its report
        r["noise_multiplier"] = noise_multiplier(r["dir"])
    report = write_report(
        tmp_path / "out",
        rows,
        Scale(seeds=2, epochs=20),
        data=PENDULUM,
        wall=_wall("primorl-fig3"),
    )
    assert report.read_text(encoding="utf-8") == committed("primorl-fig3")


def _mopo_note(text: str) -> list[str]:
    """The paragraphs on how the added runs were made, which `regenerate` was given (`note`)."""
    section = text.split("## How these runs were obtained\n\n", 1)[1]
    return section.split("\n\n![learning curves]", 1)[0].split("\n\n")


def test_mopo_table1_report_regenerates_the_committed_report(tmp_path: Path) -> None:
    from reproductions.primorl.mopo import recorded_runs
    from reproductions.primorl.mopo_report import _write_table1

    root = Path(__file__).resolve().parents[2] / "docs" / "reproductions" / "mopo-table1"
    runs, datasets = recorded_runs(root)
    text = committed("mopo-table1")
    wall = committed_json("mopo-table1", "metrics.json")["wall_time_s"]
    tasks = ("pendulum", "balance", "swingup")
    report = _write_table1(
        tmp_path, runs, datasets, tasks, 0, quick=False, wall=wall, note=_mopo_note(text)
    )
    assert report.read_text(encoding="utf-8") == text
    for name in ("metrics.json", "metrics.csv", "claims.json", "config.json"):
        assert (tmp_path / name).read_text(encoding="utf-8") == committed("mopo-table1", name)


def test_mopo_table1_quick_report_of_one_task_is_the_stored_rendering(tmp_path: Path) -> None:
    """Pendulum's recorded runs rendered as a quick invocation of 1.5 min: the quick-mode
    line, the absent tasks, the wall time and no note."""
    from reproductions.primorl.mopo import recorded_runs
    from reproductions.primorl.mopo_report import _write_table1

    root = Path(__file__).resolve().parents[2] / "docs" / "reproductions" / "mopo-table1"
    runs, datasets = recorded_runs(root)
    runs = [r for r in runs if r["task"] == "pendulum"]
    report = _write_table1(
        tmp_path, runs, {"pendulum": datasets["pendulum"]}, ("pendulum",), 0, quick=True, wall=90.0
    )
    text = report.read_text(encoding="utf-8")
    assert "**Quick mode**" in text and "Not in this report: balance, swingup" in text
    golden = Path(__file__).resolve().parent / "golden" / "mopo-table1-quick-pendulum.md"
    assert text == golden.read_text(encoding="utf-8")


def test_ablation_quick_report_with_pending_cells_is_the_stored_rendering(tmp_path: Path) -> None:
    """The committed rows without the HIGH cells and with a MOPO that did not learn, rendered
    as a quick run with Balance pending: the smoke line, pending rows and section, MOPO's
    warning in place of the ceiling note."""
    from reproductions.primorl.ablation import write_report

    rows = [r for r in sweep_rows("primorl-ablation") if r.get("variant") != "high"]
    for r in rows:
        if r["system"] == "mopo":
            r["normalised_score"] = 10.0
    report = write_report(
        tmp_path,
        rows,
        Scale(seeds=2, epochs=20, quick=True),
        datasets={"pendulum": PENDULUM},
        missing={},
        wall=30.0,
    )
    text = report.read_text(encoding="utf-8")
    assert "| pending |" in text and "did not learn" in text and "Every row's" not in text
    golden = Path(__file__).resolve().parent / "golden" / "primorl-ablation-quick-variant.md"
    assert text == golden.read_text(encoding="utf-8")


GOLDEN = Path(__file__).resolve().parent / "golden"


def test_table11_report_without_its_dataset_is_the_stored_rendering(tmp_path: Path) -> None:
    from reproductions.primorl.table11_report import write_report

    why = "its recipe dataset primorl-halfcheetah.h5 is not built on this machine"
    report = write_report(tmp_path, [], Scale(seeds=1, epochs=60), data=None, wall=0.0, missing=why)
    text = report.read_text(encoding="utf-8")
    assert "## Not run: the dataset is absent" in text and "![returns]" not in text
    assert text == (GOLDEN / "primorl-table11-absent.md").read_text(encoding="utf-8")


def test_table11_report_with_a_pending_cell_is_the_stored_rendering(tmp_path: Path) -> None:
    """The rows of the earlier run (the paper's configuration) rendered as this table's, with
    the z = 1e-3 cell unfinished and a MOPO that did not learn."""
    from reproductions.primorl.table11 import row_of
    from reproductions.primorl.table11_report import write_report

    rows = sweep_rows("primorl-table11/paper-configuration")
    for r in rows:
        if row_of(r) == "z-1e-3":
            r["status"], r["error"] = "pending", None
        if r["system"] == "mopo":
            r["normalised_score"] = 10.0
    data = Path("primorl-halfcheetah.h5")
    report = write_report(tmp_path, rows, Scale(seeds=1, epochs=60), data=data, wall=60.0)
    text = report.read_text(encoding="utf-8")
    assert "**Incomplete**: 1 of 6 cells" in text and "`$PRIVRL_REPRO_BUDGET_S`" in text
    assert text == (GOLDEN / "primorl-table11-pending.md").read_text(encoding="utf-8")


def test_table1_quick_report_with_pending_balance_runs_is_the_stored_rendering(
    tmp_path: Path,
) -> None:
    """The committed rows without Balance's HIGH cells, rendered as a quick run with Swingup
    not run: the quick line, Balance's progress note and pending rows, an absent section."""
    from reproductions.primorl.table1 import row_of, task_of
    from reproductions.primorl.table1_report import write_report

    rows = _table1_rows(
        tmp_path / "cells",
        lambda r: not (task_of(r) == "balance" and row_of(r) == "high"),
        # a table with Balance's MOPO seed 0 finished: a frozen copy, so that the rendering
        # does not change with the committed table's progress
        GOLDEN / "primorl-table1-results-balance-mopo.csv",
    )
    data = {"pendulum": PENDULUM, "balance": Path("primorl-balance.h5")}
    scale = Scale(seeds=5, epochs=20, quick=True)
    report = write_report(tmp_path / "out", rows, scale, data=data, wall=120.0)
    text = report.read_text(encoding="utf-8")
    assert "**Quick mode (smoke test)**" in text and "runs has finished**" in text
    assert text == (GOLDEN / "primorl-table1-quick-pending.md").read_text(encoding="utf-8")
