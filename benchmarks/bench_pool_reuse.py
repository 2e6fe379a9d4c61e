"""Benchmark: one kept process pool across a reproduction's stages vs a fresh pool per stage.

A quick reproduction runs its function units in several stages (one `run_local` call each);
with a fresh "spawn" pool per stage every stage pays interpreter start-up and the torch import
in each worker. `privrl.runs.pool` keeps the pool between stages when nothing a worker inherits
changed. This benchmark runs the same quick reproductions end to end as `privrl reproduce ID
--quick` in subprocesses, with `PRIVRL_POOL_REUSE=1` (the default) and `=0`, alternating, each
run in its own empty cache (nothing reused from disk), and reports the wall time of each and
the ratio of the medians, measured side by side in one run (the machine is shared; the load
average at the start and end is in the JSON). Both settings must write the same claims.json.

Usage: python benchmarks/bench_pool_reuse.py [--ids qiao-wang-fig1a,gpope-fig1b] [--repeats 2]
           [--workers 2] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_IDS = ("qiao-wang-fig1a", "gpope-fig1b")


def one_run(rid: str, reuse: bool, workers: int) -> dict[str, Any]:
    """`privrl reproduce RID --quick` in a fresh process and an empty cache; its wall time."""
    with tempfile.TemporaryDirectory(prefix="privrl-pool-") as tmp:
        env = {**os.environ, "PRIVRL_CACHE": str(Path(tmp) / "cache")}
        env["PRIVRL_POOL_REUSE"] = "1" if reuse else "0"
        out = Path(tmp) / "out"
        privrl = Path(sys.executable).with_name("privrl")  # the console script of this venv
        cmd = [str(privrl), "reproduce", rid, "--quick", "--out", str(out)]
        cmd += ["--workers", str(workers)]
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
        claims = json.loads((out / "claims.json").read_text())
    return {"wall_s": round(wall, 2), "claims": [c.get("ours") for c in claims]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", default=",".join(DEFAULT_IDS))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/bench_pool_reuse.json")
    args = ap.parse_args()
    result: dict[str, Any] = {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_average_start": os.getloadavg()[0],
        "workers": args.workers,
        "repeats": args.repeats,
        "reproductions": {},
    }
    for rid in args.ids.split(","):
        runs: dict[str, list[dict[str, Any]]] = {"reuse": [], "fresh": []}
        for _ in range(args.repeats):  # alternate, so a load change hits both settings
            for name, reuse in (("fresh", False), ("reuse", True)):
                runs[name].append(one_run(rid, reuse, args.workers))
                print(rid, name, runs[name][-1]["wall_s"], "s", flush=True)
        same = all(r["claims"] == runs["fresh"][0]["claims"] for v in runs.values() for r in v)
        med = {k: statistics.median(r["wall_s"] for r in v) for k, v in runs.items()}
        result["reproductions"][rid] = {
            "wall_s": {k: [r["wall_s"] for r in v] for k, v in runs.items()},
            "median_s": med,
            "speedup_fresh_over_reuse": round(med["fresh"] / med["reuse"], 3),
            "same_claims": same,
        }
        if not same:
            raise SystemExit(f"{rid}: the two settings wrote different claims")
    result["load_average_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    ratios = {k: v["speedup_fresh_over_reuse"] for k, v in result["reproductions"].items()}
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
