"""Seeding a PRIMORL reproduction's unstarted sweep cells from its finished ones, so that they
continue instead of starting over: a cell asked for at more SAC epochs continues the finished
run's checkpoints (`extend_finished`), and a cell that differs only in its policy stage takes
the finished run's release (`reuse_releases`). Both give what a fresh cell gives (tested)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

__all__ = ["POLICY_STAGE", "extend_finished", "reuse_releases"]

EXTENDED = "epochs"  # the setting a finished cell's checkpoints can be continued in (SAC epochs)


def extend_finished(sweep: Any) -> int:
    """Seed every cell of `sweep` not yet started that differs from a finished cell (in the
    same sweep directory) only in more SAC epochs with that cell's checkpoints, marked as cut
    off while running, so that `run_cell` continues them instead of starting over; returns how
    many were seeded. MOPO continues its run directory (dynamics and policy checkpoints);
    PRIMORL its released model, as the pending release (no second DP-FedAvg), and its policy
    checkpoint. Both resume exactly (tested), so the result is the run a fresh cell would
    make from the same seed; its `seconds` count only the continuation. On a ledgered dataset
    the continued run records its release's spend again (conservative)."""
    from privrl.runs.sweep import RUN_FILES, read_record

    done: list[tuple[Path, dict[str, Any]]] = []
    for record_path in sorted((sweep.out / "cells").glob("*/cell.json")):
        record = read_record(record_path.parent) or {}
        source = record_path.parent / "run"
        if record.get("status") == "ok":
            if all((source / n).is_file() for n in RUN_FILES):
                done.append((source, record.get("values") or {}))
    seeded = 0
    for cell in sweep.cells:
        if cell.dir.exists() or not isinstance(cell.values.get(EXTENDED), int):
            continue
        rest = {k: v for k, v in cell.values.items() if k != EXTENDED}
        shorter = [
            (int(v[EXTENDED]), source)
            for source, v in done
            if isinstance(v.get(EXTENDED), int)
            and v[EXTENDED] < cell.values[EXTENDED]
            and {k: x for k, x in v.items() if k != EXTENDED} == rest
        ]
        if not shorter:
            continue
        _, source = max(shorter, key=lambda pair: pair[0])
        _seed_run(str(cell.values.get("system")), source, cell.run_dir)
        record = {
            "index": cell.index,
            "values": cell.values,
            "axes": cell.axes,
            "name": cell.name,
            "key": cell.key,
            "status": "running",  # cut off while running: `run_cell` continues it
            "seconds": None,
            "error": None,
            "continues": source.parent.name,
        }
        (cell.dir / "cell.json").write_text(json.dumps(record, indent=2))
        seeded += 1
    return seeded


# the PRIMORL settings that change only the policy stage: cell value → (its key in the run's
# record run.json, its default when a cell does not set it)
POLICY_STAGE = {"start_states": ("starts", "initial")}


def reuse_releases(sweep: Any) -> int:
    """Seed every PRIMORL cell of `sweep` not yet started that differs from a finished PRIMORL
    cell (in the same sweep directory) only in policy-stage settings (`POLICY_STAGE`) with that
    cell's released model, as the pending release: the new cell runs no DP-FedAvg (the release
    is the same output of the same mechanism) and trains its own policy stage from its seed;
    returns how many were seeded. Its `seconds` count only the policy stage; on a ledgered
    dataset the new run records its release's spend again (conservative)."""
    from privrl.runs.sweep import RUN_FILES, read_record
    from privrl.systems.primorl import PENDING

    def model_stage(values: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in values.items() if k not in POLICY_STAGE}

    done = []
    for record_path in sorted((sweep.out / "cells").glob("*/cell.json")):
        record = read_record(record_path.parent) or {}
        source, values = record_path.parent / "run", record.get("values") or {}
        if record.get("status") == "ok" and values.get("system") == "primorl":
            if all((source / n).is_file() for n in (*RUN_FILES, "model.pt", "run.json")):
                done.append((source, values))
    seeded = 0
    for cell in sweep.cells:
        if cell.dir.exists() or cell.values.get("system") != "primorl":
            continue
        stage = {k: cell.values.get(k, default) for k, (_, default) in POLICY_STAGE.items()}
        sources = [
            s
            for s, v in done
            if model_stage(v) == model_stage(cell.values)
            and any(v.get(k, d) != stage[k] for k, (_, d) in POLICY_STAGE.items())
        ]
        if not sources:
            continue
        source = sources[0]
        cell.run_dir.mkdir(parents=True)
        shutil.copyfile(source / "model.pt", cell.run_dir / PENDING)
        run = json.loads((source / "run.json").read_text())
        run.update({key: stage[k] for k, (key, _) in POLICY_STAGE.items()})
        (cell.run_dir / "run.json").write_text(json.dumps(run, indent=2) + "\n")
        record = {
            "index": cell.index,
            "values": cell.values,
            "axes": cell.axes,
            "name": cell.name,
            "key": cell.key,
            "status": "running",  # cut off while running: `run_cell` continues it
            "seconds": None,
            "error": None,
            "release_of": source.parent.name,
        }
        (cell.dir / "cell.json").write_text(json.dumps(record, indent=2))
        seeded += 1
    return seeded


def _seed_run(system: str, source: Path, target: Path) -> None:
    """Copy what continuing the finished run `source` needs into `target` (see
    `extend_finished`)."""
    if system == "primorl":
        from privrl.systems.primorl import PENDING

        target.mkdir(parents=True)
        shutil.copyfile(source / "model.pt", target / PENDING)
        for name in ("checkpoint.pt", "run.json"):
            shutil.copyfile(source / name, target / name)
    else:
        shutil.copytree(source, target)
