"""`privrl reproduce primorl-table1` continues from the committed state beside its report
(`reproductions.primorl.table1_state`): restore before, export while and after, `--tasks`,
and a report that keeps the tasks not run from the committed results table."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from reproductions.primorl import cells
from reproductions.primorl import sweeps as shared
from reproductions.primorl import table1_state as state
from reproductions.primorl.sweeps import Scale
from reproductions.primorl.table1_report import write_report
from tests.reproductions.test_primorl_table1 import _recipes, _task_row


def _cell(sweep: Path, name: str, data: Path, status: str = "ok", **run: bytes) -> Path:
    """A fake cell record in `sweep`/cells (a run directory with the files `run`)."""
    cell = sweep / "cells" / name
    (cell / "run").mkdir(parents=True)
    record = {"name": name, "status": status, "values": {"system": "mopo", "data": str(data)}}
    (cell / "cell.json").write_text(json.dumps(record))
    (cell / "run" / "metrics.csv").write_text("epoch,return_mean\n1,10.0\n2,12.5\n")
    for f, content in run.items():
        (cell / "run" / f.replace("_pt", ".pt")).write_bytes(content)
    return cell


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "data").mkdir(parents=True)
    monkeypatch.setattr(cells, "secret_dir_of", lambda d, record=None: None)
    monkeypatch.setattr(cells, "_fingerprint", lambda p: "f" * 64)
    return tmp_path / "cache"


# ------------------------------------------------------------------------------ --tasks


def test_tasks_runs_only_the_tasks_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--tasks balance neither needs nor builds Pendulum's dataset (absent here); a task asked
    for that cannot run, or an unknown one, is refused before any work."""
    from reproductions.primorl.table1 import available_datasets

    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    made = _recipes(tmp_path, monkeypatch, "balance")  # Pendulum's is not built
    req = shared.Request.of(tmp_path / "out", tasks="balance")
    assert req.tasks == ("balance",)
    datasets, missing = available_datasets(req)
    assert datasets == {"balance": made["balance"]}
    assert missing == dict.fromkeys(("pendulum", "swingup"), "not asked for (--tasks balance)")
    with pytest.raises(ValueError, match=r"swingup: its recipe dataset primorl-swingup\.h5"):
        available_datasets(shared.Request.of(tmp_path, tasks="balance,swingup"))
    with pytest.raises(ValueError, match="Table 1's tasks are pendulum, balance, swingup"):
        available_datasets(shared.Request.of(tmp_path, tasks="cheetah"))
    with pytest.raises(ValueError, match="quick mode runs Pendulum only"):
        available_datasets(shared.Request.of(tmp_path, tasks="balance", quick=True))


def test_tasks_is_refused_for_other_reproductions(tmp_path: Path) -> None:
    from privrl.privacy.limits import InputError
    from reproductions.reproduce import reproduce

    with pytest.raises(InputError, match=r"--tasks is for .*\(primorl-table1\)"):
        reproduce("primorl-ablation", tmp_path, tasks="balance")
    with pytest.raises(InputError, match="--tasks is for"):
        reproduce("all", tasks="balance")
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------------------ restore, export


def test_restore_takes_only_the_cells_of_datasets_present_and_overwrites_none(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    balance, swingup = cache / "data" / "primorl-balance.h5", cache / "data" / "primorl-swingup.h5"
    balance.write_bytes(b"b")
    made = tmp_path / "made"
    _cell(made, "mopo-b", balance)
    _cell(made, "mopo-s", swingup)
    _cell(made, "mopo-here", balance)
    out = tmp_path / "report"
    assert cells.export(made, out / "cells") == ["mopo-b", "mopo-here", "mopo-s"]
    sweep = tmp_path / "sweep"
    here = _cell(sweep, "mopo-here", balance, status="running")  # this machine's, newer
    assert state.restore(out, sweep, {"balance": balance}) == ["mopo-b"]
    assert json.loads((here / "cell.json").read_text())["status"] == "running"  # kept
    assert not (sweep / "cells" / "mopo-s").exists()  # its dataset is not present
    restored = json.loads((sweep / "cells" / "mopo-b" / "cell.json").read_text())
    assert restored["values"]["data"] == str(balance)
    assert state.restore(tmp_path / "nothing", sweep, {"balance": balance}) == []
    state.warn_unused(["mopo-b", "mopo-here"], {"mopo-here"})
    assert "1 committed cell(s) restored are not cells of this run (mopo-b)" in (
        capsys.readouterr().err
    )


def test_a_rebuilt_dataset_that_differs_is_refused_with_both_hashes(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    balance = cache / "data" / "primorl-balance.h5"
    balance.write_bytes(b"b")
    _cell(tmp_path / "made", "mopo-b", balance)
    out = tmp_path / "report"
    cells.export(tmp_path / "made", out / "cells")  # fingerprint "f" * 64
    monkeypatch.setattr(cells, "_fingerprint", lambda p: "0" * 64)
    with pytest.raises(ValueError) as err:  # a ValueError: the CLI's one `error:` line
        state.restore(out, tmp_path / "sweep", {"balance": balance})
    assert isinstance(err.value, cells.FingerprintMismatch)
    text = str(err.value)
    assert "primorl-balance.h5" in text and "0" * 64 in text and "f" * 64 in text
    assert "privrl data collect --recipe primorl-balance" in text
    assert not (tmp_path / "sweep").exists()  # refused before anything is copied


def test_export_of_a_running_sweep_skips_what_it_cannot_read(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint being replaced or removed by its run is skipped (the committed one is
    kept); a finished cell's policy checkpoint is not committed; only the cells named."""
    data = cache / "data" / "d.h5"
    data.write_bytes(b"d")
    sweep = tmp_path / "sweep"
    _cell(sweep, "mopo-done", data, model_pt=b"m", checkpoint_pt=b"c")
    _cell(sweep, "primorl-run", data, status="running", checkpoint_pt=b"c")
    _cell(sweep, "mopo-other", data)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / cells.STATE).write_bytes(b"half a file")
    monkeypatch.setattr(
        cells, "secret_dir_of", lambda d, record=None: secret if d.name == "primorl-run" else None
    )
    dest = tmp_path / "committed"
    (dest / "primorl-run").mkdir(parents=True)
    torch.save({"rounds": 100}, dest / "primorl-run" / cells.PUBLIC_STATE)  # an earlier export
    names = {"mopo-done", "primorl-run"}
    assert cells.export(sweep, dest, names) == ["mopo-done", "primorl-run"]
    assert torch.load(dest / "primorl-run" / cells.PUBLIC_STATE)["rounds"] == 100
    assert (dest / "mopo-done" / "run" / "model.pt").is_file()
    assert not (dest / "mopo-done" / "run" / "checkpoint.pt").exists()  # finished
    assert (dest / "primorl-run" / "run" / "checkpoint.pt").is_file()  # resumes from it
    assert not (dest / "mopo-other").exists()
    assert not list(dest.rglob("*.tmp"))
    # the running cell finishes: what it committed to resume from goes, its record stays
    (sweep / "cells" / "primorl-run" / "cell.json").write_text(
        json.dumps({"name": "primorl-run", "status": "ok", "values": {"data": str(data)}})
    )
    cells.export(sweep, dest, names)
    assert not (dest / "primorl-run" / cells.PUBLIC_STATE).exists()
    assert not (dest / "primorl-run" / "run" / "checkpoint.pt").exists()
    assert (dest / "primorl-run" / "run" / "metrics.csv").is_file()


def test_the_export_runs_in_between_after_each_cell_and_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[set[str]] = []
    twice = threading.Event()

    def export(sweep: Path, dest: Path, names: Any = None) -> list[str]:
        calls.append(set(names))
        if len(calls) >= 2:
            twice.set()
        return []

    monkeypatch.setattr(cells, "export", export)
    with state.Export(tmp_path, tmp_path / "out", {"a"}, every=0.01) as sync:
        assert twice.wait(10)  # the background thread, every `every` seconds
        n = len(calls)
        sync.now({"name": "a"})  # as a cell ends
        assert len(calls) == n + 1
    assert calls[-1] == {"a"}  # and at the end
    calls.clear()

    def broken(*args: Any) -> list[str]:
        raise OSError("disk full")

    monkeypatch.setattr(cells, "export", broken)
    with pytest.raises(KeyboardInterrupt):  # cut short: the export still runs, the error stays
        with state.Export(tmp_path, tmp_path / "out", {"a"}, every=None):
            raise KeyboardInterrupt
    assert "disk full" in capsys.readouterr().err
    with pytest.raises(OSError, match="disk full"), state.Export(tmp_path, tmp_path, (), None):
        pass  # a finished run whose last export fails says so


def test_sync_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(state.SYNC_ENV, raising=False)
    assert state.sync_seconds() == state.SYNC_DEFAULT
    monkeypatch.setenv(state.SYNC_ENV, "0")
    assert state.sync_seconds() is None
    monkeypatch.setenv(state.SYNC_ENV, "60")
    assert state.sync_seconds() == 60.0
    for bad in ("soon", "-1", "inf"):
        monkeypatch.setenv(state.SYNC_ENV, bad)
        with pytest.raises(ValueError, match=state.SYNC_ENV):
            state.sync_seconds()


# ------------------------------------------------------------------------------ the report


def _pendulum(cell: str, system: str, variant: str | None, seed: int, ret: float) -> dict:
    eps = None if variant in (None, "no-privacy") else 4.07
    return {
        **_task_row("pendulum", system, variant, ret, None if system == "mopo" else eps),
        "cell": cell,
        "seed": seed,
        "data": "primorl-pendulum.h5",
        "noise_multiplier": 0.52 if variant == "high" else None,
    }


def _committed_results(out: Path) -> list[dict]:
    """A committed results.csv holding Pendulum's finished rows (2 seeds) and a pending row."""
    rows = [_pendulum(f"mopo-p{s}", "mopo", None, s, 190.0 + s) for s in (0, 1)] + [
        _pendulum(f"primorl-h{s}", "primorl", "high", s, 180.0 + s) for s in (0, 1)
    ]
    out.mkdir(parents=True, exist_ok=True)
    state.write_results([*rows, {"cell": "primorl-x", "status": "missing"}], out / "results.csv")
    return rows


def test_results_round_trip_with_curves_and_z(tmp_path: Path) -> None:
    rows = _committed_results(tmp_path)
    back = state.earlier_rows(tmp_path, Scale(seeds=2))
    assert [r["cell"] for r in back] == [r["cell"] for r in rows]  # finished rows only
    assert back[0]["curve"] == rows[0]["curve"] and back[2]["noise_multiplier"] == 0.52
    assert back[0]["dir"] is None  # no committed cell record
    assert [r["cell"] for r in state.earlier_rows(tmp_path, Scale(seeds=1))] == [
        "mopo-p0",
        "primorl-h0",
    ]  # the scale's seeds only
    (tmp_path / "cells" / "mopo-p0" / "run").mkdir(parents=True)
    (tmp_path / "cells" / "mopo-p0" / "cell.json").write_text("{}")
    assert state.earlier_rows(tmp_path, Scale(seeds=2))[0]["dir"] == tmp_path / "cells" / "mopo-p0"


def test_merge_keeps_the_tasks_not_run_and_the_cells_finished_earlier(tmp_path: Path) -> None:
    _committed_results(tmp_path)
    earlier = state.earlier_rows(tmp_path, Scale(seeds=2))
    balance = [
        {**_task_row("balance", "mopo", None, 900.0, None), "cell": "mopo-b0"},
        {"cell": "mopo-p1", "status": "running", "task": "pendulum"},
    ]
    merged, counts = state.merge(balance, earlier, ["balance"])
    assert [r["cell"] for r in merged] == [
        "mopo-b0",
        "mopo-p1",
        "mopo-p0",
        "primorl-h0",
        "primorl-h1",
    ]
    assert counts == {"pendulum": 4}
    assert merged[1]["status"] == "ok"  # the same cell, finished earlier
    data = {"pendulum": Path("p.h5"), "balance": Path("b.h5")}
    both, counts = state.merge(balance, earlier, ["balance", "pendulum"])
    assert counts == {"pendulum": 1}  # Pendulum ran: its own rows, and the one finished earlier
    write_report(tmp_path, both, Scale(seeds=2), data=data, wall=1.0, earlier=counts)
    text = (tmp_path / "report.md").read_text()
    assert "**1 of its finished runs is from earlier runs**" in text
    assert "Run here: Pendulum, Balance." in text
    merged, counts = state.merge(balance[:1], earlier, ["balance", "pendulum"])
    assert counts == {} and len(merged) == 1  # Pendulum ran: its own rows only


def test_a_balance_only_report_keeps_pendulums_committed_numbers(tmp_path: Path) -> None:
    """Only Balance ran here; Pendulum's section comes from the committed results table, and
    the report says so."""
    out = tmp_path / "report"
    _committed_results(out)
    earlier = state.earlier_rows(out, Scale(seeds=2))
    ran = [
        {**_task_row("balance", "mopo", None, r, None), "cell": f"mopo-b{i}", "seed": i}
        for i, r in enumerate((900.0, 1000.0))
    ]
    rows, counts = state.merge(ran, earlier, ["balance"])
    missing = {"pendulum": "not asked for (--tasks balance)", "swingup": "not asked for"}
    write_report(
        out,
        rows,
        Scale(seeds=2),
        data={"balance": Path("b.h5")},
        missing=missing,
        wall=1.0,
        earlier=counts,
    )
    text = (out / "report.md").read_text()
    assert "Run here: Balance (numbers of Pendulum from earlier runs" in text
    pendulum = text.split("## Pendulum\n")[1].split("## Balance")[0]
    assert "**From earlier runs**: this invocation did not run Pendulum — not asked for" in pendulum
    assert "Its 4 finished runs are those of the committed results table" in pendulum
    assert "| HIGH | 5.10 | 4.07 | 778.9 (97.9%) | 180.5 ± " in pendulum
    assert "**From earlier runs**" not in text.split("## Balance")[1]
    assert "## Swingup: not run" in text
    found = {c["claim"]: c for c in json.loads((out / "claims.json").read_text())}
    high = found["HIGH is close to MOPO (Pendulum, ≥ 90%)"]
    assert high["verdict"] == "holds" and high["ours"].endswith("(2 seeds)")  # not "not run"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["earlier_rows"] == {"pendulum": 4}
    assert metrics["high"]["noise_multiplier"] == 0.52  # z from the committed table
    assert metrics["not_run"] == {"swingup": "not asked for"}
    assert (out / "plots" / "returns.png").stat().st_size > 1000  # Pendulum's curves kept
    state.write_results(rows, out / "results.csv")  # the table beside the report: both tasks
    again = state.earlier_rows(out, Scale(seeds=2))
    assert {r["task"] for r in again} == {"pendulum", "balance"} and len(again) == 6


def test_table1_restores_runs_exports_and_merges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path
) -> None:
    """The wiring of `table1` at full scale, with the sweep faked: the committed cells are
    restored into the sweep's directory before it runs, exported after each cell and at the
    end, and results.csv beside the report keeps Pendulum's rows."""
    from privrl.runs import sweep as runner
    from reproductions.primorl import table1 as T

    monkeypatch.setenv(state.SYNC_ENV, "0")
    balance = cache / "data" / "primorl-balance.h5"
    balance.write_bytes(b"b")
    monkeypatch.setattr(
        shared, "recipe_path", lambda task, quick: cache / "data" / f"primorl-{task}.h5"
    )
    out = tmp_path / "report"
    _committed_results(out)
    _cell(tmp_path / "made", "mopo-b0", balance)
    cells.export(tmp_path / "made", out / "cells")
    seen: dict[str, Any] = {}

    fake = SimpleNamespace(cells=[SimpleNamespace(name="mopo-b0")])

    def run_cells(doc: dict, where: Path, *, deadline: Any, on_cell: Any) -> list[dict]:
        seen["restored"] = (T.sweep_dir(Scale()) / "cells" / "mopo-b0" / "cell.json").is_file()
        on_cell({"name": "mopo-b0"})
        return [{**_task_row("balance", "mopo", None, 950.0, None), "cell": "mopo-b0", "seed": 0}]

    exports: list[Any] = []
    monkeypatch.setattr(runner, "expand", lambda doc: fake)
    monkeypatch.setattr(shared, "run_cells", run_cells)
    monkeypatch.setattr(
        cells, "export", lambda sweep, dest, names=None: exports.append((dest, set(names))) or []
    )
    report = T.table1(out, seeds=2, tasks="balance")
    assert seen["restored"]
    assert exports == [(out / "cells", {"mopo-b0"})] * 2  # after the cell, and at the end
    rows = shared.read_results(out / "results.csv")
    assert [r["cell"] for r in rows] == [
        "mopo-b0",
        "mopo-p0",
        "mopo-p1",
        "primorl-h0",
        "primorl-h1",
    ]
    assert "**From earlier runs**" in report.read_text()


def test_a_task_whose_rows_have_no_curve_keeps_its_plot(tmp_path: Path) -> None:
    """Rows from a results.csv of before it stored curves: the task's plot already there is
    kept, not replaced by an empty one; rows with curves redraw it."""
    rows = [{**r, "curve": []} for r in _committed_results(tmp_path)]
    plot = tmp_path / "plots" / "returns.png"
    plot.parent.mkdir(parents=True)
    plot.write_bytes(b"the earlier plot")
    data = {"pendulum": Path("p.h5")}
    write_report(tmp_path, rows, Scale(seeds=2), data=data, wall=1.0)
    assert plot.read_bytes() == b"the earlier plot"
    write_report(tmp_path, _committed_results(tmp_path), Scale(seeds=2), data=data, wall=1.0)
    assert plot.read_bytes() != b"the earlier plot" and plot.stat().st_size > 1000
