"""Benchmark: sweep scale-out — 32 CPU-bound cells with 1 and 2 workers, on Ray (a local
instance) and on the local process pool, side by side in one run.

Each cell is a real run of a registered system through `privrl.runs.sweep.run_sweep` (the code
`privrl sweep` runs): the same settings, 32 seeds. Reported per configuration: wall time of the
sweep, throughput (cells/s), mean seconds per cell; and the 2-vs-1-worker throughput ratios
(the target of issue 18: ≥ 1.7× for Ray with 2 workers). For Ray, the local instance is started
before the timed sweep (`ray_init`, its time reported as `ray_init_s`; `cells_per_s_with_init`
counts it); the local pool's process start-up is inside the timed sweep.

The system is a parameter: `--system sdp-pe` (default when it is registered; settings
`env = "riverswim"`, `episodes`, `epsilon`) or, until it is, `toy-work` from
tests/runs/sweep_toys.py (pure-Python CPU work calibrated to `--seconds` per cell).
`--settings FILE.toml` gives the system's settings instead of the defaults.

The machine is shared (2 cores, other jobs running): the load average at start and end is in
the JSON, with a probe of the parallelism the machine offers at the start and the end (the same
pure-Python work in one process, then in two at once: its 2-vs-1 ratio is the ceiling for the
sweep's ratios measured beside it). Compare the ratios, measured in one run.

Usage: python benchmarks/bench_sweep_scaleout.py [--system NAME] [--settings FILE.toml]
           [--cells 32] [--seconds 1.5] [--backends ray,local] [--out PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests.runs.sweep_toys (the stand-in system) lives there
    sys.path.insert(0, str(ROOT))

from privrl.runs import registry  # noqa: E402
from privrl.runs.sweep import expand, ray_init, run_sweep  # noqa: E402

TOY_MODULE = "tests.runs.sweep_toys"
# ~1-3 s per cell on this machine (SDP-PE on RiverSwim runs ~4e5 episodes/s, one core)
SDP_PE_DEFAULTS = {"env": "riverswim", "episodes": 500_000, "epsilon": 10.0}


def toy_work_for(seconds: float) -> int:
    """Iterations of toy-work's loop that take `seconds` on one core of this machine."""
    n = 2_000_000
    x = 1
    t = time.perf_counter()
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    rate = n / (time.perf_counter() - t)
    return int(rate * seconds)


def _spin(n: int) -> float:
    t = time.perf_counter()
    x = 1
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return time.perf_counter() - t


def machine_probe(seconds: float = 3.0) -> dict[str, Any]:
    """The parallelism this shared machine offers right now: the same pure-Python work in one
    process, then in two processes at once (no privrl, no sweep). Its 2-vs-1 throughput ratio
    is the ceiling for a sweep's ratio measured beside it."""
    import multiprocessing

    n = toy_work_for(seconds)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        pool.map(_spin, [1000, 1000])  # start-up outside the timing
        t = time.perf_counter()
        pool.map(_spin, [n], chunksize=1)
        one = time.perf_counter() - t
        t = time.perf_counter()
        pool.map(_spin, [n, n], chunksize=1)
        two = time.perf_counter() - t
    result = {"one_s": round(one, 3), "two_s": round(two, 3), "ratio": round(2 * one / two, 3)}
    print(json.dumps({"machine_probe": result}), flush=True)
    return result


def settings_for(system: str, path: Path | None, seconds: float) -> dict[str, Any]:
    if path is not None:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    if system == "sdp-pe":
        return dict(SDP_PE_DEFAULTS)
    if system == "toy-work":
        return {"work": toy_work_for(seconds), "epsilon": 1.0}
    raise SystemExit(f"give --settings FILE.toml for the system {system!r}")


def one(doc: dict[str, Any], backend: str, workers: int) -> dict[str, Any]:
    """Run the grid from scratch with `workers` workers on `backend`; time it."""
    sweep = expand(doc)
    sweep = dataclasses.replace(
        sweep, options=dataclasses.replace(sweep.options, backend=backend, workers=workers)
    )
    shutil.rmtree(sweep.out, ignore_errors=True)
    init_s = 0.0
    if backend == "ray":
        import ray

        t = time.perf_counter()
        ray_init(workers)
        init_s = time.perf_counter() - t
    try:
        t = time.perf_counter()
        outcome = run_sweep(sweep)
        wall = time.perf_counter() - t
    finally:
        if backend == "ray":
            ray.shutdown()
    seconds = [r["seconds"] for r in outcome.rows if isinstance(r.get("seconds"), (int, float))]
    cells = len(sweep.cells)
    result = {
        "backend": backend,
        "workers": workers,
        "cells": cells,
        "failed": len(outcome.failed),
        "wall_s": round(wall, 3),
        "cells_per_s": round(cells / wall, 4),
        "mean_cell_s": round(sum(seconds) / max(len(seconds), 1), 3),
    }
    if backend == "ray":
        result["ray_init_s"] = round(init_s, 3)
        result["cells_per_s_with_init"] = round(cells / (wall + init_s), 4)
    if outcome.failed:
        result["first_error"] = outcome.failed[0][1]
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--system", default=None, help="default: sdp-pe if registered")
    parser.add_argument("--settings", type=Path, default=None, help="the system's settings")
    parser.add_argument("--cells", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=1.5, help="toy-work: seconds per cell")
    parser.add_argument("--backends", default="ray,local")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "sweep_scaleout.json"
    )
    args = parser.parse_args()
    import importlib

    importlib.import_module(TOY_MODULE)
    system = args.system or ("sdp-pe" if "sdp-pe" in registry.names() else "toy-work")
    settings = settings_for(system, args.settings, args.seconds)
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    doc = {
        "system": system,
        "out": str(work / "sweep"),
        **settings,
        "grid": {"seeds": args.cells},
        "sweep": {"imports": [TOY_MODULE]},
    }
    runs = []
    probes = [machine_probe()]
    try:
        for backend in args.backends.split(","):
            for workers in (1, 2):
                runs.append(one(doc, backend, workers))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    probes.append(machine_probe())
    ratios = {}
    for backend in args.backends.split(","):
        by = {r["workers"]: r for r in runs if r["backend"] == backend}
        ratios[f"{backend}_2_vs_1"] = round(by[2]["cells_per_s"] / by[1]["cells_per_s"], 3)
        if backend == "ray":
            ratios["ray_2_vs_1_with_init"] = round(
                by[2]["cells_per_s_with_init"] / by[1]["cells_per_s_with_init"], 3
            )
    ratios["machine_2_vs_1_before_after"] = [p["ratio"] for p in probes]
    result = {
        "benchmark": "sweep_scaleout",
        "system": system,
        "settings": settings,
        "target": "ray_2_vs_1 >= 1.7 (issue 18)",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "shared": "yes: other jobs may run on the same 2 cores; compare the ratios",
            "load_average_at_start": [round(x, 2) for x in load_start],
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "machine_probes": probes,
        "runs": runs,
        "ratios": ratios,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
