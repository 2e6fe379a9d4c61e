"""GTD2 tuning grid: one run at a time against one batched array loop, side by side.

`tune_on_public` runs non-private GTD2 for every step size η, then GPOPE for every
(clip bound h, η) with `repeats` noise draws, all at the N the private run will use. At the
N where GTD2 converges on Mountain Car (N = 200·m) that grid dominates a reproduction's cost,
and each run's per-iteration time is mostly Python overhead. `batched=True` runs the whole
grid as one lock-step array loop (`gtd2_saddle_point` with one `NoiseGroup` per run, each
with its own index and noise streams, noise drawn in blocks of iterations): the same draws,
the same choice. This script times both on the same public Mountain Car sample and checks
that they choose the same (h, η) and report the same grid.

    python benchmarks/bench_gtd2_batched.py [--m 200] [--iterations 10000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from privrl.ope.domains import get_domain
from privrl.ope.gpope import tune_on_public
from privrl.ope.mspbe import LinearSystem
from privrl.ope.stats import trajectory_stats

RESULTS = Path(__file__).parent / "results" / "gtd2_batched.json"
ORDERS = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 32.0, 64.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=200)
    ap.add_argument("--iterations", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=1, help="timings per path (the minimum kept)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    dom = get_domain("mountain-car", seed=0, progress=False)
    data = dom.sample(dom.behaviour_policy, args.m, seed=np.random.SeedSequence([5, args.m]))
    public = trajectory_stats(data, dom.features, float(dom.gamma))
    system = LinearSystem(*public.mean(), info={"source": "public sample"})
    kw = dict(
        m=args.m,
        epsilon=1.0,
        delta=1e-5,
        iterations=args.iterations,
        etas=(0.01, 0.03, 0.1, 0.3),
        repeats=2,
        seed=0,
        orders=ORDERS,
        clip_multipliers=(1.0, 10.0),
    )
    tune_on_public(public, system, **kw)  # type: ignore[arg-type]  # σ calibration cached
    times: dict[str, float] = {}
    cpu: dict[str, float] = {}
    results = {}
    for batched in (False, True):
        best, best_cpu = float("inf"), float("inf")
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            res = tune_on_public(public, system, batched=batched, **kw)  # type: ignore[arg-type]
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        name = "batched" if batched else "one_run_at_a_time"
        times[name] = best
        cpu[name] = best_cpu
        results[name] = res
    seq, bat = results["one_run_at_a_time"], results["batched"]
    same = (
        seq.step == bat.step
        and seq.clip_multiplier == bat.clip_multiplier
        and bool(np.isclose(seq.clip, bat.clip, rtol=1e-9))
        and bool(
            np.allclose([g["mspbe"] for g in seq.grid], [g["mspbe"] for g in bat.grid], rtol=1e-8)
        )
    )
    runs = len(kw["etas"]) * (1 + len(kw["clip_multipliers"]))  # type: ignore[arg-type]
    out = {
        "benchmark": "tune_on_public: one GTD2 run at a time vs one batched array loop",
        "domain": "mountain-car (fourier:5, 36 features), public sample",
        "m": args.m,
        "iterations": args.iterations,
        "grid": {
            "etas": list(kw["etas"]),  # type: ignore[call-overload]
            "clip_multipliers": list(kw["clip_multipliers"]),  # type: ignore[call-overload]
            "repeats": kw["repeats"],
            "runs": runs,
        },
        "seconds": times,
        "cpu_seconds": cpu,
        "speedup": times["one_run_at_a_time"] / times["batched"],
        "cpu_speedup": cpu["one_run_at_a_time"] / cpu["batched"],
        "same_choice_and_grid": same,
        "chosen": {"eta": bat.step.eta, "clip": bat.clip, "multiplier": bat.clip_multiplier},
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_1min": os.getloadavg()[0],
        },
        "note": "wall-clock and CPU seconds of one process on a shared machine (CPU time is "
        "the steadier measure under load); both paths on the same inputs, back to back",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
