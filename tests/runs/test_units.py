"""Function cells (`privrl.runs.units.run_units`): skip finished units, recompute a unit cut off
mid-write, capture a failed unit while the others finish, keep the order of results, and give
the same results serially, on a 2-worker local pool and on Ray."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from privrl.runs.sweep import SweepError
from privrl.runs.units import Unit, UnitsFailed, keyed_unit, pending, run_units
from tests.runs import unit_toys

DRAW = "tests.runs.unit_toys:draw"


def _units(root: Path, seeds: list[int]) -> list[Unit]:
    return [Unit(root / f"draw-{s}.json", DRAW, {"seed": s}) for s in seeds]


def test_results_in_order_and_finished_units_are_not_recomputed(tmp_path: Path) -> None:
    units = _units(tmp_path, [3, 1, 2])
    seen: list[str] = []
    results = run_units(units, workers=1, progress=lambda u, r: seen.append(u.name))
    assert [r["seed"] for r in results] == [3, 1, 2]
    assert results == [unit_toys.draw(s) for s in (3, 1, 2)]
    assert json.loads((tmp_path / "draw-1.json").read_text()) == results[1]
    assert sorted(seen) == ["draw-1", "draw-2", "draw-3"]
    # a stored result is returned as stored: the function is not called again
    (tmp_path / "draw-2.json").write_text(json.dumps({"seed": 2, "stored": True}))
    seen.clear()
    again = run_units(units, workers=1, progress=lambda u, r: seen.append(u.name))
    assert seen == [] and pending(units) == []
    assert again[2] == {"seed": 2, "stored": True} and again[0] == results[0]


def test_a_unit_cut_off_mid_write_is_recomputed(tmp_path: Path) -> None:
    units = _units(tmp_path, [0, 1])
    first = run_units(units, workers=1)
    (tmp_path / "draw-1.json").write_text('{"seed": 1, "val')  # truncated JSON
    assert pending(units) == [units[1]]
    assert run_units(units, workers=1) == first
    assert json.loads((tmp_path / "draw-1.json").read_text()) == first[1]
    assert not list(tmp_path.glob("*.tmp*"))  # written through tmp + rename


def test_a_failed_unit_is_one_line_and_the_others_finish(tmp_path: Path) -> None:
    units = [
        *_units(tmp_path, [0]),
        Unit(tmp_path / "bad.json", "tests.runs.unit_toys:fail", {"message": "no\nway"}),
        *_units(tmp_path, [1]),
    ]
    with pytest.raises(UnitsFailed, match=r"1 unit\(s\) failed, e.g. bad .*ValueError: no way"):
        run_units(units, workers=2)
    assert (tmp_path / "draw-0.json").is_file() and (tmp_path / "draw-1.json").is_file()
    assert not (tmp_path / "bad.json").exists()
    assert pending(units) == [units[1]]  # a rerun retries only the failed unit


def test_two_workers_give_the_serial_results_with_one_blas_thread(tmp_path: Path) -> None:
    serial = run_units(_units(tmp_path / "serial", [0, 1, 2, 3]), workers=1)
    pooled = run_units(_units(tmp_path / "pool", [0, 1, 2, 3]), workers=2)
    assert pooled == serial
    probes = [Unit(tmp_path / f"t{i}.json", "tests.runs.unit_toys:threads") for i in range(2)]
    assert {r["omp"] for r in run_units(probes, workers=2)} == {"1"}


def test_bad_calls_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SweepError, match="backend must be one of local, ray"):
        run_units(_units(tmp_path, [0]), backend="slurm")
    with pytest.raises(SweepError, match="own result path"):
        run_units(_units(tmp_path, [0, 0]))
    with pytest.raises(UnitsFailed, match="module:function"):
        run_units([Unit(tmp_path / "x.json", "no_colon")], workers=1)


def test_ray_backend_gives_the_same_results(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    local = run_units(_units(tmp_path / "local", [5, 6]), workers=1)
    ray = run_units(_units(tmp_path / "ray", [5, 6]), backend="ray", workers=2)
    assert ray == local
    assert json.loads((tmp_path / "ray" / "draw-6.json").read_text()) == local[1]


def test_keyed_units_are_named_by_their_arguments(tmp_path: Path) -> None:
    a = keyed_unit(tmp_path, "draw", DRAW, {"seed": 1})
    assert a == keyed_unit(tmp_path, "draw", DRAW, {"seed": 1})  # stable: reused on a rerun
    b = keyed_unit(tmp_path, "draw", DRAW, {"seed": 2})
    assert a.path != b.path and a.path.name.startswith("draw-") and a.path.suffix == ".json"
    assert run_units([a, b], workers=1) == [unit_toys.draw(1), unit_toys.draw(2)]


def test_a_keyed_unit_that_moved_keeps_its_result_file_by_its_key(tmp_path: Path) -> None:
    """`key` is hashed in the target's place: the unit of a function that moved to another
    module, keyed by its former name, has the former unit's file; without it the file differs."""
    old = keyed_unit(tmp_path, "draw", "old.module:draw", {"seed": 1})
    moved = keyed_unit(tmp_path, "draw", DRAW, {"seed": 1}, key="old.module:draw")
    assert moved.path == old.path and moved.target == DRAW
    assert keyed_unit(tmp_path, "draw", DRAW, {"seed": 1}).path != old.path
    assert run_units([moved], workers=1) == [unit_toys.draw(1)]


def test_sigterm_stops_the_workers_too(tmp_path: Path) -> None:
    """SIGTERM to a process running units (e.g. `pkill` on a reproduction) stops its pool's
    workers as well: without the handler the parent alone dies and a worker keeps computing."""
    import signal
    import subprocess
    import sys
    import time

    marker = tmp_path / "worker.pid"
    script = (
        "from privrl.runs.units import Unit, run_units\n"
        "if __name__ == '__main__':\n"
        f"    run_units([Unit({str(tmp_path / 'r.json')!r}, 'tests.runs.unit_toys:sleep_forever',"
        f" {{'marker': {str(marker)!r}}})], workers=1)\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=root, env=env)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), "the unit never started"
        worker = int(marker.read_text())
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), "the worker outlived its terminated parent"
    finally:
        proc.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"  # a zombie has exited
    except OSError:
        return False


def _pid(path: Path) -> int:
    return run_units([Unit(path, "tests.runs.unit_toys:threads", {})], workers=1)[0]["pid"]


def test_the_pool_is_reused_while_nothing_a_worker_inherits_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second stage reuses the first stage's worker (no new interpreter, no new imports); a
    changed environment gets a new pool, so a reused worker never sees stale settings; and
    PRIVRL_POOL_REUSE=0 gives every call a fresh pool."""
    first = _pid(tmp_path / "a.json")
    assert _pid(tmp_path / "b.json") == first
    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    changed = _pid(tmp_path / "c.json")
    assert changed != first and _pid(tmp_path / "d.json") == changed
    monkeypatch.setenv("PRIVRL_POOL_REUSE", "0")
    assert len({_pid(tmp_path / f"e{i}.json") for i in range(2)} | {changed}) == 3


def test_a_pool_whose_worker_died_is_not_reused(tmp_path: Path) -> None:
    died = Unit(tmp_path / "died.json", "tests.runs.unit_toys:die", {})
    with pytest.raises(UnitsFailed, match="the worker died"):
        run_units([died], workers=1)
    assert run_units(_units(tmp_path, [4]), workers=1) == [unit_toys.draw(4)]
