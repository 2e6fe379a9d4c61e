"""`privrl sweep`: grid expansion and validation, skip/resume, failures, both backends, and a
ledgered dataset shared by concurrent cells."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import pytest

import tests.runs.sweep_toys  # registers toy-work
import tests.runs.toy  # noqa: F401 - registers toy-mean
from privrl.cli.main import main
from privrl.data.io import save_hdf5
from privrl.privacy.ledger import BudgetLedger
from privrl.runs.layer import RunSpec, execute
from privrl.runs.sweep import SweepError, expand, load_sweep, read_record, run_sweep
from tests.neighbours import dataset, random_tabular_episodes, tabular_metadata

IMPORTS = '[sweep]\nimports = ["tests.runs.toy", "tests.runs.sweep_toys"]\n'


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    meta = tabular_metadata(3, 2, horizon=4)
    path = tmp_path / "d.h5"
    save_hdf5(dataset(random_tabular_episodes(20, 4, 3, 2, seed=0), meta), path)
    return path


def _grid(tmp_path: Path, text: str, name: str = "grid.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "results.csv", newline="") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------------- expansion


def test_grid_expands_to_the_product_seeds_and_explicit_cells(tmp_path: Path) -> None:
    sweep = expand(
        {
            "system": "toy-work",
            "out": str(tmp_path / "o"),
            "work": 10,
            "grid": {"epsilon": [0.5, 1.0], "seeds": 3},
            "cells": [{"epsilon": 4.0, "work": 20}],
        }
    )
    assert sweep.axes == ["epsilon", "seed", "work"]  # an explicit cell's keys are axes too
    # 2 budgets x 3 seeds, plus the explicit cell once per seed
    assert len(sweep.cells) == 2 * 3 + 3
    values = [(c.values["epsilon"], c.values["seed"], c.values["work"]) for c in sweep.cells]
    assert values[:6] == [(e, s, 10) for e in (0.5, 1.0) for s in range(3)]
    assert values[6:] == [(4.0, s, 20) for s in range(3)]
    names = [c.name for c in sweep.cells]
    assert len(set(names)) == len(names) and all(n.startswith("toy-work-") for n in names)
    assert all(len(n.removeprefix("toy-work-")) == 12 for n in names)
    # the same cell in another sweep directory has the same fingerprint
    again = expand({"system": "toy-work", "out": "elsewhere", "work": 10, "epsilon": 0.5})
    assert again.cells[0].key == sweep.cells[0].key


def test_cell_identity_uses_the_data_path_not_its_content(data_file: Path, tmp_path: Path) -> None:
    """Structural privacy rule: a sweep publishes cell names and keys (directory names,
    sweep.json); they must not be a function of the private episodes. Two datasets with
    different episodes at the same path give the same key."""
    doc = {"system": "toy-mean", "data": str(data_file), "epsilon": 1.0, "out": str(tmp_path)}
    before = expand(doc).cells[0].key
    meta = tabular_metadata(3, 2, horizon=4)
    save_hdf5(dataset(random_tabular_episodes(20, 4, 3, 2, seed=1), meta), data_file)
    assert expand(doc).cells[0].key == before
    from privrl.data.io import content_sha256

    assert content_sha256(data_file)[:12] not in expand(doc).cells[0].name


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"grid": {"epsilon": 1.0}}, "grid.epsilon must be a non-empty list"),
        ({"grid": {"seed": [0], "seeds": 2}}, "either seed"),
        ({"grid": {"seeds": 0}}, "seeds must be an integer >= 1"),
        (
            {"grid": {"epsilon": [1.0, 1000.0]}},
            r"cell 2 \(epsilon=1000.0\): epsilon must be at most 100",
        ),
        ({"grid": {"epsilonn": [1.0]}}, r"cell 1 \(epsilonn=1.0\): epsilonn is not a setting"),
        ({"grid": {"epsilon": [1.0, 1.0]}}, "cells 1 and 2 are the same run"),
        ({"sweep": {"backend": "slurm"}}, "backend must be one of local, ray"),
        ({"sweep": {"workerz": 2}}, "workerz is not a sweep option"),
        ({"sweep": {"workers": 0}}, "workers must be an integer >= 1"),
        ({"sweep": {"x": "epsilonn"}, "grid": {"epsilon": [1.0]}}, "x = 'epsilonn' is not an axis"),
        ({"data": "x.h5"}, "data is not used by toy-work"),
        ({"grid": {"out": ["a"]}}, "grid.out"),
        ({"system": "toy-mean", "epsilon": 1.0, "data": "{tmp}"}, "is a directory"),
        ({"system": "toy-mean", "epsilon": 1.0, "data": "{tmp}/none.h5"}, "file not found"),
        ({"system": "toy-mean", "epsilon": 1.0, "data": "{tmp}/g.toml"}, "not an HDF5 file"),
    ],
)
def test_bad_grids_are_refused_naming_the_cell_and_key(
    tmp_path: Path, doc: dict, message: str
) -> None:
    (tmp_path / "g.toml").write_text("not a dataset")
    if "data" in doc:
        doc = {**doc, "data": doc["data"].format(tmp=tmp_path)}
    with pytest.raises(SweepError, match=message):
        expand({"system": "toy-work", "out": str(tmp_path / "o"), **doc})


def test_system_specific_keys_go_in_a_systems_table(data_file: Path, tmp_path: Path) -> None:
    base = {
        "out": str(tmp_path / "o"),
        "epsilon": 1.0,
        "grid": {"system": ["toy-mean", "toy-work"]},
    }
    # `only_work` is a setting of toy-work only: at the top level, toy-mean's cell refuses it
    with pytest.raises(SweepError, match=r"cell 1 \(system=toy-mean\): only_work is not a setting"):
        expand({**base, "data": str(data_file), "only_work": 3})
    # toy-mean needs data, toy-work refuses it: both go in [systems.NAME]
    sweep = expand(
        {
            **base,
            "systems": {
                "toy-mean": {"data": str(data_file)},
                "toy-work": {"only_work": 3, "grid": {"work": [1, 2]}},
            },
        }
    )
    got = [
        (c.values["system"], c.values.get("only_work"), c.values.get("work")) for c in sweep.cells
    ]
    assert got == [("toy-mean", None, None), ("toy-work", 3, 1), ("toy-work", 3, 2)]
    assert sweep.axes == ["system", "work"]
    with pytest.raises(SweepError, match=r"\[systems.nope\]: unknown system"):
        expand({**base, "systems": {"nope": {}}})


def test_a_bad_cell_is_one_error_line_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    grid = _grid(
        tmp_path,
        f'system = "toy-work"\nout = "{out}"\n[grid]\nepsilon = [1.0, 0.0]\nseeds = 2\n' + IMPORTS,
    )
    assert main(["sweep", str(grid)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "cell 3 (epsilon=0.0, seed=0): epsilon must be a finite number > 0" in err[0]
    assert not out.exists()  # nothing ran
    grid.write_text(f'system = "toy-work"\nout = "{out}"\n' + IMPORTS)
    assert main(["sweep", str(grid), "--address", "x:1"]) == 2
    assert "--backend ray" in capsys.readouterr().err
    assert main(["sweep", str(grid), "--workers", "0"]) == 2
    assert "workers must be an integer >= 1" in capsys.readouterr().err
    assert not out.exists()


# ---------------------------------------------------------------------------- running


def test_local_pool_runs_skips_finished_and_survives_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    grid = _grid(
        tmp_path,
        f'system = "toy-work"\nout = "{out}"\nwork = 100\ninsecure_reproducible_noise = true\n'
        f"[grid]\nepsilon = [0.5, 4.0]\nseeds = 2\n[[cells]]\ncrash = true\n{IMPORTS}workers = 2\n",
    )
    sweep = load_sweep(grid)
    parent_threads = os.environ.get("OMP_NUM_THREADS")
    assert main(["sweep", str(grid)]) == 1  # two cells crash; the other four finish
    assert os.environ.get("OMP_NUM_THREADS") == parent_threads  # set for the workers only
    err = capsys.readouterr().err
    assert "6 cells: 6 to run, 0 skipped" in err and "error: 2 of 6 cells failed" in err
    rows = _rows(out)
    assert [r["status"] for r in rows] == ["ok"] * 4 + ["failed"] * 2
    assert "crashed as asked" in rows[4]["error"]
    log = (sweep.cells[4].dir / "log.txt").read_text()
    assert "error: RuntimeError: toy-work crashed" in log and "Traceback" not in log
    for cell in sweep.cells[:4]:
        record = json.loads((cell.dir / "cell.json").read_text())
        assert record["status"] == "ok" and record["key"] == cell.key
        assert record["values"]["epsilon"] == cell.values["epsilon"]
        assert (cell.dir / "log.txt").exists() and (cell.run_dir / "privacy.json").exists()
    assert {"epsilon", "seed", "value", "privacy_epsilon", "seconds"} <= set(rows[0])
    assert [r["omp_threads"] for r in rows[:4]] == ["1"] * 4  # one BLAS thread per worker
    # insecure reproducible noise: uncertified (ε = ∞), the ε of secret noise kept beside it
    assert float(rows[3]["privacy_epsilon"]) == math.inf
    assert float(rows[3]["privacy_nominal_epsilon"]) == pytest.approx(4.0, rel=1e-3)
    assert (out / "plots" / "value.png").stat().st_size > 1000
    summary = json.loads((out / "sweep.json").read_text())["summary"]
    assert [s["epsilon"] for s in summary] == [0.5, 4.0, None] and summary[0]["value"]["n"] == 2

    # a cell is the run `privrl run` makes: same system, config and seed, same metrics
    cell = sweep.cells[3]
    run_toml = _grid(
        tmp_path, "".join(f"{k} = {json.dumps(v)}\n" for k, v in cell.values.items()), "run.toml"
    )
    assert main(["run", str(run_toml), "--out", str(tmp_path / "direct")]) == 0
    direct = json.loads((tmp_path / "direct" / "metrics.json").read_text())
    swept = json.loads((cell.run_dir / "metrics.json").read_text())
    assert swept.pop("omp_threads") == 1
    direct.pop("omp_threads")  # this process: whatever its environment says
    assert swept == direct
    assert float(rows[3]["value"]) == direct["value"]

    # after a fix (here: none) and an interruption (a cell left "running"), a second run
    # runs only the unfinished cells and keeps the finished ones' results
    interrupted = sweep.cells[1].dir / "cell.json"
    interrupted.write_text(interrupted.read_text().replace('"ok"', '"running"'))
    assert main(["sweep", str(grid)]) == 1
    assert "6 cells: 3 to run, 3 skipped" in capsys.readouterr().err
    again = _rows(out)
    assert [(r["cell"], r["value"]) for r in again] == [(r["cell"], r["value"]) for r in rows]

    # the same grid without the crash cells: everything is finished, nothing runs
    ok_grid = _grid(
        tmp_path,
        f'system = "toy-work"\nout = "{out}"\nwork = 100\ninsecure_reproducible_noise = true\n'
        f"[grid]\nepsilon = [0.5, 4.0]\nseeds = 2\n{IMPORTS}",
        "ok.toml",
    )
    nothing = run_sweep(load_sweep(ok_grid))
    assert (nothing.ran, nothing.skipped) == (0, 4)
    keep = ("cell", "epsilon", "seed", "status", "seconds", "value", "privacy_epsilon")
    assert [[r[k] for k in keep] for r in _rows(out)] == [[r[k] for k in keep] for r in again[:4]]


def test_no_cell_starts_after_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A deadline already past starts nothing; one that passes while the first cell runs lets
    that cell finish and starts no other (cells go to a worker only when one is free); a
    later call without a deadline runs the cells left."""
    import time

    from privrl.runs import sweep as sweep_module

    out = tmp_path / "o"
    text = f'system = "toy-work"\nout = "{out}"\nwork = 100\n[grid]\nseeds = 3\n{IMPORTS}'
    sweep = load_sweep(_grid(tmp_path, text + "workers = 1\n"))
    outcome = run_sweep(sweep, deadline=time.monotonic() - 1.0)
    assert outcome.ran == 0 and [r["status"] for r in outcome.rows] == ["missing"] * 3
    # the deadline passes when the first cell reports (whatever the machine's speed)
    passed = {"now": False}
    monkeypatch.setattr(sweep_module, "_past", lambda d: d is not None and passed["now"])
    outcome = run_sweep(sweep, deadline=0.0, on_cell=lambda record: passed.update(now=True))
    assert outcome.ran == 1 and [r["status"] for r in outcome.rows] == ["ok"] + ["missing"] * 2
    outcome = run_sweep(sweep)
    assert outcome.ran == 2 and [r["status"] for r in outcome.rows] == ["ok"] * 3


def test_ray_backend_runs_the_same_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    monkeypatch.chdir(tmp_path)  # a relative out: Ray workers need not share the driver's cwd
    out = Path("ray")
    grid = _grid(
        tmp_path,
        'system = "toy-work"\nout = "ray"\nwork = 100\ninsecure_reproducible_noise = true\n'
        f"[grid]\nepsilon = [0.5, 2.0]\n{IMPORTS}",
    )
    assert main(["sweep", str(grid), "--backend", "ray", "--workers", "2"]) == 0
    rows = _rows(out)
    assert [r["status"] for r in rows] == ["ok"] * 2
    assert [r["omp_threads"] for r in rows] == ["1"] * 2  # one BLAS thread per Ray worker
    for cell, row in zip(load_sweep(grid).cells, rows, strict=True):
        direct = execute(
            RunSpec.from_mapping({**cell.values, "out": tmp_path / cell.name}), quiet=True
        )
        assert float(row["value"]) == direct.metrics["value"]
        assert float(row["privacy_epsilon"]) == pytest.approx(direct.privacy.epsilon)


def test_ray_missing_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    grid = _grid(tmp_path, f'system = "toy-work"\nout = "{tmp_path / "o"}"\n{IMPORTS}')
    assert main(["sweep", str(grid), "--backend", "ray"]) == 2
    assert "pip install 'privrl[ray]'" in capsys.readouterr().err


def test_concurrent_cells_on_a_ledgered_dataset_never_overspend(
    data_file: Path, tmp_path: Path
) -> None:
    """Ledger rule: cells share one dataset budget; each checks before reading the data and
    records under the ledger's file lock, so a grid that asks for more than the budget gets
    some cells refused and the composed spend never exceeds ε_total."""
    total = 2.5
    BudgetLedger.init(
        data_file, epsilon=total, delta=1e-5, unit="trajectory", relation="replace-one"
    )
    out = tmp_path / "o"
    grid = _grid(
        tmp_path,
        f'system = "toy-mean"\ndata = "{data_file}"\nout = "{out}"\nepsilon = 1.0\n'
        f"[grid]\nseeds = 6\n{IMPORTS}workers = 2\n",
    )
    outcome = run_sweep(load_sweep(grid))
    ok = [r for r in outcome.rows if r["status"] == "ok"]
    assert 0 < len(ok) < 6 and len(outcome.failed) == 6 - len(ok)
    assert all("budget" in error for _, error in outcome.failed)
    ledger = BudgetLedger.for_dataset(data_file)
    assert len(ledger.entries) == len(ok)
    assert ledger.spent() <= total + 1e-9
    for cell, _ in outcome.failed:  # a refused cell publishes no run directory
        assert not (cell.run_dir / "metrics.json").exists()


def test_raise_failed_names_the_first_failed_cell_and_its_log(tmp_path: Path) -> None:
    """A reproduction stops at its sweep's first failed cell with one message naming how many
    failed, that cell, its error and its log; an outcome without failures passes."""
    from types import SimpleNamespace

    from privrl.runs.sweep import SweepOutcome

    SweepOutcome().raise_failed()  # nothing failed: no error
    cell = SimpleNamespace(label=lambda: "toy seed=1", dir=tmp_path / "c1")
    outcome = SweepOutcome(failed=[(cell, "boom"), (cell, "again")])  # type: ignore[list-item]
    with pytest.raises(RuntimeError) as err:
        outcome.raise_failed("audit cell(s)")
    assert str(err.value) == (
        f"2 audit cell(s) failed, e.g. toy seed=1: boom (logs in {tmp_path / 'c1'}/log.txt); "
        "rerun to retry them"
    )


def test_reproduce_address_goes_to_ray_init(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`privrl reproduce --address` needs --backend ray, and every Ray start of the run
    connects to that cluster (through $PRIVRL_RAY_ADDRESS) instead of starting a local one."""
    from privrl.runs import sweep

    monkeypatch.delenv(sweep.RAY_ADDRESS_ENV, raising=False)
    assert main(["reproduce", "primorl-table1", "--address", "h:1", "--quick"]) == 2
    assert "--backend ray" in capsys.readouterr().err
    assert sweep.RAY_ADDRESS_ENV not in os.environ  # refused before anything was set

    calls: list[dict] = []

    class FakeRay:
        def init(self, **kw: object) -> None:
            calls.append(kw)

    probed: list[str] = []  # (the reachability probe, stubbed: no cluster here)
    monkeypatch.setattr(sweep, "_import_ray", lambda: FakeRay())
    monkeypatch.setattr(sweep, "check_reachable", probed.append)
    monkeypatch.setenv(sweep.RAY_ADDRESS_ENV, "head:6379")
    sweep.ray_init(2)
    assert calls[-1]["address"] == "head:6379" and "num_cpus" not in calls[-1]
    assert probed == ["head:6379"]
    monkeypatch.delenv(sweep.RAY_ADDRESS_ENV)
    sweep.ray_init(2)
    assert "address" not in calls[-1] and calls[-1]["num_cpus"] == 2


def test_a_reproductions_time_budget_is_given_or_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`budget_deadline`: the given seconds, else $PRIVRL_REPRO_BUDGET_S (the expert
    reproductions and Table 11 alike), else no deadline; a bad budget is one error naming it."""
    import time

    from privrl.runs.sweep import BUDGET_ENV, budget_deadline

    monkeypatch.setattr(time, "monotonic", lambda: 1000.0)  # a frozen clock: exact deadlines
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    assert budget_deadline() is None
    monkeypatch.setenv(BUDGET_ENV, "0")
    assert budget_deadline() == 1000.0
    monkeypatch.setenv(BUDGET_ENV, "3600")
    assert budget_deadline() == 4600.0
    assert budget_deadline(10) == 1010.0  # the given budget first
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(BUDGET_ENV, bad)
        with pytest.raises(ValueError, match=BUDGET_ENV):
            budget_deadline()
    with pytest.raises(ValueError, match="time budget"):
        budget_deadline(-5)


def test_an_interrupted_cell_continues_its_checkpoint_when_its_system_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell cut off while running (its record left "running": killed, or the machine
    stopped) continues from its run's checkpoint when the system resumes by itself (MOPO,
    PRIMORL; here `toy-steps`); a failed attempt starts clean on the next try."""
    from privrl.runs.sweep import run_cell
    from tests.runs.sweep_toys import STOP_AT, Killed

    (cell,) = expand({"system": "toy-steps", "out": str(tmp_path / "o"), "steps": 5}).cells
    task = cell.task(["tests.runs.sweep_toys"])
    monkeypatch.setenv(STOP_AT, "3")
    with pytest.raises(Killed):
        run_cell(task)
    assert json.loads((cell.dir / "cell.json").read_text())["status"] == "running"
    monkeypatch.delenv(STOP_AT)
    assert run_cell(task)["resumed"]
    metrics = json.loads((cell.run_dir / "metrics.json").read_text())
    assert (metrics["done"], metrics["resumed_from"]) == (5, 3)

    record = json.loads((cell.dir / "cell.json").read_text())
    (cell.dir / "cell.json").write_text(json.dumps({**record, "status": "failed"}))
    assert not run_cell(task)["resumed"]
    assert json.loads((cell.run_dir / "metrics.json").read_text())["resumed_from"] == 0


def test_a_failure_named_as_an_outcome_is_settled_and_not_run_again(tmp_path: Path) -> None:
    """A cell that failed with an error its report states as a result (`outcomes`) is kept:
    a rerun does not run it again; another error, or another fingerprint, runs."""
    doc = {
        "system": "toy-work",
        "out": str(tmp_path / "o"),
        "work": 10,
        "cells": [{"seed": 0}, {"seed": 1, "crash": True}],
        "sweep": {"imports": ["tests.runs.sweep_toys"], "workers": 1},
    }
    outcome = run_sweep(expand(doc))
    assert (outcome.ran, len(outcome.failed)) == (2, 1)
    settled = ("crashed as asked",)
    again = run_sweep(expand(doc), outcomes=settled)
    assert (again.ran, again.skipped) == (0, 2)  # the finished and the settled cell
    assert [r["status"] for r in again.rows] == ["ok", "failed"]  # still reported as failed
    assert run_sweep(expand(doc), outcomes=("another error",)).ran == 1  # not named: retried
    doc["cells"][1]["work"] = 11  # another run: another fingerprint
    assert run_sweep(expand(doc), outcomes=settled).ran == 1


def test_a_cell_record_is_read_for_its_own_fingerprint_only(tmp_path: Path) -> None:
    """`read_record`: the last attempt's record; None for another fingerprint, no record or an
    unreadable one (a cell cut off mid-write)."""
    doc = {
        "system": "toy-work",
        "out": str(tmp_path / "o"),
        "work": 10,
        "cells": [{"seed": 0}],
        "sweep": {"imports": ["tests.runs.sweep_toys"], "workers": 1},
    }
    (cell,) = expand(doc).cells
    assert read_record(cell.dir, cell.key) is None  # never run
    run_sweep(expand(doc))
    record = read_record(cell.dir, cell.key)
    assert record is not None and record["status"] == "ok" and record["key"] == cell.key
    assert read_record(cell.dir) == record  # any fingerprint
    assert read_record(cell.dir, "another key") is None
    (cell.dir / "cell.json").write_text('{"status": "ok", "ke')
    assert read_record(cell.dir) is None
