"""The committed expert-level reproductions' cells rebuilt from the files they wrote
(metrics.json: each cell's configuration and per-seed results; metrics.csv: each run's key
and wall time; config.json: the scale), for rendering their reports again."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from reproductions.expert.configs import RunConfig, _Context
from reproductions.expert.paper import Scale
from reproductions.expert.report import Cell
from tests.reproductions.committed import ROOT, committed, committed_json

REPORTS = ("expert-table2a", "expert-table2b", "expert-fig3", "expert-fig4", "expert-fig3/regime")


def scale(rid: str) -> Scale:
    """The scale of a committed run (checked against the one its config.json records)."""
    s = Scale.regime() if rid.endswith("/regime") else Scale.full()
    recorded = committed_json(rid, "config.json")["scale"]
    mine = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(s).items()}
    assert {k: mine[k] for k in recorded} == recorded
    return s


def context(rid: str, out: Path | None = None) -> _Context:
    """The invocation as the committed run records it: its scale, no missing dataset or failed
    run, whether it trained anything and its wall time (metrics.json). `out`: a copy of the
    reports' folder with the regime's metrics.json (the equal-steps reports read it)."""
    if out is not None:
        regime = out.parent / "expert-fig3" / "regime"
        regime.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "expert-fig3" / "regime" / "metrics.json", regime / "metrics.json")
        out.mkdir(parents=True, exist_ok=True)
    ctx = _Context(out or ROOT / rid, scale(rid), None)
    m = committed_json(rid, "metrics.json")
    ctx.missing, ctx.failed = dict(m["missing_datasets"]), dict(m["failed_runs"])
    ctx.n_run = 0 if "this invocation trained nothing" in committed(rid) else 1
    ctx.started = 0.0  # with `frozen_clock`, the report's clock reads the recorded wall time
    return ctx


def frozen_clock(monkeypatch: Any, rid: str) -> None:
    """The reports' clock stopped at the committed run's wall time (a context's `started` is
    0), so the time they print is the recorded one, not this machine's."""
    wall = float(committed_json(rid, "metrics.json")["wall_time_s"])
    monkeypatch.setattr(
        "reproductions.expert.report.time", SimpleNamespace(perf_counter=lambda: wall)
    )


def seeds(rid: str) -> list[int]:
    line = next(x for x in committed(rid).split("\n") if x.startswith("Seeds "))
    return [int(s) for s in line[len("Seeds ") :].split(";")[0].split(", ")]


def _runs(rid: str) -> dict[str, list[dict[str, str]]]:
    runs: dict[str, list[dict[str, str]]] = {}
    with open(ROOT / rid / "metrics.csv", newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            runs.setdefault(r["cell"], []).append(r)
    return runs


def cells(rid: str) -> dict[str, Cell]:
    """Every committed cell: its configurations (one per seed), its finished runs and scores."""
    runs, out = _runs(rid), {}
    for key, c in committed_json(rid, "metrics.json")["cells"].items():
        config = {**c["config"], "hidden": tuple(c["config"]["hidden"])}
        cfgs = [RunConfig(**config, seed=s) for s in seeds(rid)]
        finished = [_run(c, i, r) for i, r in enumerate(runs.get(key, []))]
        cell = Cell(c["label"], cfgs, finished)
        cell.score = (float(c["normalised_mean"]), float(c["normalised_ci95"]))
        cell.raw = (float(c["return_mean"]), float(c["return_ci95"]))
        cell.scores = [float(x) for x in c["normalised_per_seed"]]
        out[key] = cell
    return out


def _run(c: dict[str, Any], i: int, row: dict[str, str]) -> dict[str, Any]:
    eps = c["epsilon_reported"][i]
    return {
        "key": row["key"],
        "seed": int(row["seed"]),
        "return_mean": c["return_per_seed"][i],
        "stable_size": c["stable_size_per_seed"][i],
        "private_steps": c["private_steps_per_seed"][i],
        "steps": c["steps_per_seed"][i],
        "epsilon": eps,
        "wall_s": float(row["wall_s"]),
    }


def refs(rid: str) -> dict[str, dict[str, Any]]:
    return committed_json(rid, "metrics.json")["references"]
