"""Reproduction ``mopo-table1``: the MOPO row of PRIMORL's Table 1 (Pendulum, cartpole Balance
and Swingup) on our recipe datasets, 5 seeds for Pendulum and 3 for the cartpoles (`TASK_SEEDS`),
beside the paper's numbers, with our return also on the raw Gymnasium scale.

A sweep (`privrl.runs.sweep`) of the registered `mopo` system: every (task, seed) cell is
exactly ``privrl train mopo --data <recipe dataset> --seed <base + i>`` with the per-task
defaults (quick mode: a few epochs and steps, `QUICK_OPTIONS`). The cells live in the cache
(``$PRIVRL_CACHE/reproduce/mopo-table1/{full,quick}/cells/``, each a run directory with its
checkpoints), so a finished cell is skipped when the reproduction is rerun;
``PRIVRL_WORKERS=2`` (or `--workers`) runs two cells at a time (one torch thread each). The
results table is written beside the report. `regenerate` rewrites the report from the runs it
already records plus finished cells, running nothing.

Departure: 5,000 model rollouts per epoch, not the paper's (and MOPO's) 50,000 — one epoch
costs several times more at 50,000 (measured side by side, `mopo_report.ROLLOUT_BATCH_COST`)
while 5,000 already reaches the data's best return on every task.

Datasets: ``privrl data collect --recipe primorl-{pendulum,balance,swingup}`` (the quick
variants with ``--quick``; quick mode builds them itself, they are tiny). Scores are normalised
with each dataset's reference returns: 100·(R − R_rand)/(R_exp − R_rand).

This module holds the grid and its cells; the report (tables, plot, claims, the rollout-batch
section) is written by `mopo_report`. The metrics of a MOPO run are `privrl.primorl.metrics`'s
and its learning-curve plot is `privrl.runs.plots.plot_learning_curve`, both shared with
``privrl train mopo``.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from privrl.primorl import MOPOConfig

__all__ = [
    "PAPER_MOPO",
    "TABLE1_TASKS",
    "TARGETS",
    "TASK_SEEDS",
    "regenerate",
    "run_options",
    "sweep_doc",
    "table1",
]

TABLE1_TASKS = ("pendulum", "balance", "swingup")
# Table 1, MOPO row: mean ± 95% CI over ≥ 5 seeds (Pendulum on the paper's own reward scale).
PAPER_MOPO = {"pendulum": (795.9, 6.5), "balance": (976.3, 26.8), "swingup": (804.9, 89.6)}
TARGETS = {"pendulum": 90.0, "balance": 90.0, "swingup": 85.0}  # normalised score
# Seeds per task of the full reproduction: Pendulum at the paper's ≥ 5 (≈ 12 min of one core
# per run), the cartpoles (≈ 11–25 min per run) at 3.
TASK_SEEDS = {"pendulum": 5, "balance": 3, "swingup": 3}
QUICK_SEEDS = 2


# --------------------------------------------------------------------------------------------
# the reproduction: a sweep of `privrl train mopo` runs
# --------------------------------------------------------------------------------------------

# Smoke-test scale (`--quick`): 2 epochs × 50 SAC steps, short rollouts, 1 model epoch.
QUICK_OPTIONS = {
    "epochs": 2,
    "steps_per_epoch": 50,
    "rollout_batch_size": 100,
    "rollout_length": 5,
    "model_epochs": 1,
}


def run_options(quick: bool) -> dict[str, Any]:
    """The `privrl train mopo` options every cell shares (none: the per-task defaults)."""
    return dict(QUICK_OPTIONS) if quick else {}


def task_config(task: str, quick: bool) -> MOPOConfig:
    """The library `MOPOConfig` a cell of `task` runs (what the report's settings list)."""
    from privrl.primorl import MOPOConfig

    return MOPOConfig(**run_options(quick)).mopo_config(task)


def sweep_dir(quick: bool) -> Path:
    """Where the cells live (the cache: their checkpoints and policies do not belong in docs/)."""
    from privrl.data import cache_dir

    return cache_dir() / "reproduce" / "mopo-table1" / ("quick" if quick else "full")


def sweep_doc(
    paths: Mapping[str, Path],
    out: Path,
    seeds: Sequence[int] | Mapping[str, Sequence[int]],
    *,
    quick: bool,
    backend: str = "local",
    workers: int | None = None,
) -> dict[str, Any]:
    """The grid: the `mopo` system on every task's dataset × its seeds (one list for every
    task, or a list per task); cells under `out`. A cell's key is its run (system, config,
    seed, data path), so the same run keeps its cell whatever the other tasks' seeds."""
    per_task = {t: list(seeds[t] if isinstance(seeds, Mapping) else seeds) for t in paths}
    doc: dict[str, Any] = {
        "out": str(out),
        "system": "mopo",
        **run_options(quick),
        "cells": [{"data": str(paths[t]), "seed": s} for t in paths for s in per_task[t]],
        "sweep": {"backend": backend, "metrics": ["return_mean", "normalised_score"]},
    }
    if workers is not None:
        doc["sweep"]["workers"] = workers
    return doc


def _dataset_path(task: str, quick: bool) -> Path:
    from privrl.data import data_dir

    return data_dir() / f"primorl-{task}{'-quick' if quick else ''}.h5"


def _datasets(tasks: tuple[str, ...], quick: bool) -> dict[str, Path]:
    """The recipe datasets; quick mode builds the (tiny) quick ones if missing, full mode
    names the exact command for every missing one."""
    paths = {t: _dataset_path(t, quick) for t in tasks}
    missing = [t for t, p in paths.items() if not p.is_file()]
    if missing and quick:
        from privrl.data import data_dir
        from privrl.runs.recipes import RECIPES

        for t in missing:
            RECIPES[f"primorl-{t}"].load()(data_dir(), seed=0, quick=True, progress=False)
    elif missing:
        cmds = "; ".join(f"privrl data collect --recipe primorl-{t}" for t in missing)
        raise ValueError(
            f"dataset(s) missing for {', '.join(missing)}: build them with `{cmds}` "
            "(resumable), then rerun `privrl reproduce mopo-table1`"
        )
    return paths


def _dataset_facts(task: str, path: Path) -> dict[str, Any]:
    """What the report says of a dataset: its header's public metadata and sizes."""
    from privrl.data import read_header
    from privrl.data.paths import portable_path

    header = read_header(path)
    extra = header.metadata.extra
    return {
        "path": portable_path(path),
        "episodes": header.n_episodes,
        "transitions": header.n_transitions,
        "reference_returns": extra.get("reference_returns"),
        "recipe": (extra.get("recipe") or {}).get("name", f"primorl-{task}"),
    }


def _seed_lists(
    tasks: Sequence[str], seeds: int | None, seed: int, quick: bool
) -> dict[str, list[int]]:
    """Each task's seeds: `seeds` per task when given, else `TASK_SEEDS` (quick: 2)."""
    if seeds is not None and int(seeds) < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    count = {
        t: int(seeds) if seeds is not None else (QUICK_SEEDS if quick else TASK_SEEDS[t])
        for t in tasks
    }
    return {t: list(range(seed, seed + count[t])) for t in tasks}


def table1(
    out: Path,
    *,
    seeds: int | None = None,
    seed: int = 0,
    quick: bool = False,
    workers: int | None = None,
    backend: str = "local",
    tasks: tuple[str, ...] = TABLE1_TASKS,
) -> Path:
    """`privrl reproduce mopo-table1`: run (or resume) the sweep of every (task, seed), write
    report.md. Finished cells are skipped; ``tasks`` restricts the report to some tasks;
    ``seeds`` sets every task's seed count (default `TASK_SEEDS`)."""
    from privrl.runs.sweep import expand, run_sweep
    from reproductions.primorl.mopo_report import _write_table1  # it imports this module

    out = Path(out)
    workers = int(workers or os.environ.get("PRIVRL_WORKERS", "1"))
    t0 = time.perf_counter()
    unknown = [t for t in tasks if t not in TABLE1_TASKS]
    if unknown or not tasks:
        raise ValueError(f"tasks must be among {', '.join(TABLE1_TASKS)}, got {tasks}")
    tasks = tuple(t for t in TABLE1_TASKS if t in tasks)
    seed_lists = _seed_lists(tasks, seeds, seed, quick)
    paths = _datasets(tasks, quick)
    cells = sweep_dir(quick)
    doc = sweep_doc(paths, cells, seed_lists, quick=quick, backend=backend, workers=workers)
    outcome = run_sweep(expand(doc))
    outcome.raise_failed("run(s)")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cells / "results.csv", out / "results.csv")
    runs = [_run_of(row, cells / "cells" / row["cell"]) for row in outcome.rows]
    datasets = {t: _dataset_facts(t, paths[t]) for t in tasks}
    wall = time.perf_counter() - t0
    return _write_table1(out, runs, datasets, tasks, seed, quick=quick, wall=wall)


def recorded_runs(out: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The runs an earlier report in `out` records (its metrics.json's per-seed returns, scores
    and minutes, its metrics.csv's curves) and its datasets; ([], {}) without one."""
    import csv
    import json

    path = Path(out) / "metrics.json"
    if not path.is_file():
        return [], {}
    tasks = json.loads(path.read_text(encoding="utf-8"))["tasks"]
    curves: dict[tuple[str, int], list[float]] = {}
    with open(Path(out) / "metrics.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            curves.setdefault((r["task"], int(r["seed"])), []).append(float(r["return_mean"]))
    runs = []
    for task, t in tasks.items():
        for i, sd in enumerate(t["seeds"]):
            norm = t["per_seed_normalised"][i]
            runs.append(
                {
                    "task": task,
                    "seed": int(sd),
                    "return_mean": float(t["per_seed_return"][i]),
                    "normalised_score": None if norm is None or math.isnan(norm) else norm,
                    "seconds": 60.0 * float(t["minutes_per_run"][i]),
                    "curve": curves[(task, int(sd))],
                }
            )
    return runs, {task: t["dataset"] for task, t in tasks.items()}


def regenerate(out: Path, *, quick: bool = False, seed: int = 0, note: Sequence[str] = ()) -> Path:
    """Rewrite the report in `out` from the runs it records (`recorded_runs`) and every
    finished cell of the default grid in the cache (a cell replaces the recorded run of the
    same task and seed); nothing is run. `note`: paragraphs on how the added runs were made."""
    from privrl.runs.sweep import expand, finished
    from reproductions.primorl.mopo_report import _write_table1  # it imports this module

    out = Path(out)
    runs, datasets = recorded_runs(out)
    by_key = {(r["task"], r["seed"]): r for r in runs}
    have = [t for t in TABLE1_TASKS if _dataset_path(t, quick).is_file()]
    if have:
        paths = {t: _dataset_path(t, quick) for t in have}
        seed_lists = _seed_lists(have, None, seed, quick)
        for cell in expand(sweep_doc(paths, sweep_dir(quick), seed_lists, quick=quick)).cells:
            if finished(cell):
                row = _cell_row(cell.run_dir)
                by_key[(row["task"], row["seed"])] = _run_of(row, cell.dir)
                datasets[row["task"]] = _dataset_facts(row["task"], paths[row["task"]])
    if not by_key:
        raise ValueError(
            f"no runs to report: {out} records none and no cell has finished; run "
            "`privrl reproduce mopo-table1`"
        )
    tasks = tuple(t for t in TABLE1_TASKS if any(k[0] == t for k in by_key))
    runs = sorted(by_key.values(), key=lambda r: (TABLE1_TASKS.index(r["task"]), r["seed"]))
    return _write_table1(out, runs, datasets, tasks, seed, quick=quick, wall=0.0, note=note)


def _cell_row(run_dir: Path) -> dict[str, Any]:
    """A finished cell's row, as the sweep's results table has it (metrics.json's scalars)."""
    import json

    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    return {**metrics, "seed": int(config["seed"])}


def _run_of(row: Mapping[str, Any], cell_dir: Path) -> dict[str, Any]:
    """One finished cell: its results-table row (metrics.json's scalars) and its curve (the
    real-environment return per SAC epoch, from its metrics.csv)."""
    import csv

    with open(cell_dir / "run" / "metrics.csv", newline="") as fh:
        curve = [float(r["return_mean"]) for r in csv.DictReader(fh)]
    # metrics.json's `seconds` (the run's compute) shows as `metric.seconds` beside the cell's
    seconds = row.get("metric.seconds", row.get("seconds"))
    return {**row, "seconds": float(seconds or 0.0), "curve": curve}
