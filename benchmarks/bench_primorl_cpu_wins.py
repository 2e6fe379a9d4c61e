"""PRIMORL's local client update: the fast paths of `privrl.primorl.fast_local` vs the reference.

One DP-FedAvg round's local work (`privrl.primorl.dp_fedavg.local_displacements`: every
sampled client's local steps, the clip after each, the sum) timed for each variant on the
same inputs, interleaved in this one run, median over repeats; the result is each variant's
ratio to the reference (robust to the machine's load; absolute seconds are not). Variants:

* ``reference``: the _foreach Adam step over the L per-tensor views, clients stacked by the
  model-size rule (`dp_fedavg.auto_chunk_copies`);
* ``fused_adam``: the local Adam step as one ``torch._fused_adam_`` over flat buffers
  (Adam only);
* ``stack_4``: 4 clients per batched forward/backward (``chunk_copies=4``; only where the
  model-size rule stacks fewer: HalfCheetah's 2);
* ``fused_adam+stack_4``: both (Adam, where stacking applies).

Every variant's per-client updates Δ_k are compared with the reference's (same batches):
``max_abs_diff`` and ``max_rel_diff`` (over max |Δ|). Sizes as bench_primorl_step.py:
Pendulum (3 × 2×64, in 4 → out 4, per-layer clip), Balance (5 × 2×128, in 6 → out 6, flat
clip) and HalfCheetah (7 × 4×200, in 23 → out 18, per-layer clip); SGD and Adam (reset per
client) local optimisers. One thread.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bench_primorl_cpu_wins.py [--quick]
        [--repeats N] [--out PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from privrl.primorl import dp_fedavg as fed
from privrl.primorl import fast_local

sys.path.insert(0, str(Path(__file__).parent))
import bench_primorl_step as step

RESULTS = Path(__file__).parent / "results" / "bench_primorl_cpu_wins.json"

# model sizes and clip mode (bench_primorl_step.SCENARIOS), sampled clients × transitions
SIZES = {
    "pendulum": dict(members=3, hidden=(64, 64), in_dim=4, out_dim=4, clip_mode="per-layer"),
    "balance": dict(members=5, hidden=(128, 128), in_dim=6, out_dim=6, clip_mode="flat"),
    "halfcheetah": dict(
        members=7, hidden=(200, 200, 200, 200), in_dim=23, out_dim=18, clip_mode="per-layer"
    ),
}
CLIENTS = {"pendulum": (30, 200), "balance": (30, 1000), "halfcheetah": (20, 200)}
QUICK_CLIENTS = {"pendulum": (6, 40), "balance": (6, 40), "halfcheetah": (5, 32)}
STACK = 4  # clients per batched chunk of the stacking variant
# variant: (fused Adam step, clients per chunk; None: the model-size rule)
VARIANTS: dict[str, tuple[bool, int | None]] = {
    "reference": (False, None),
    "fused_adam": (True, None),
    f"stack_{STACK}": (False, STACK),
    f"fused_adam+stack_{STACK}": (True, STACK),
}


def _variants(optimizer: str, stacking_applies: bool) -> list[str]:
    names = ["reference"]
    if optimizer == "adam":
        names.append("fused_adam")
    if stacking_applies:
        names.append(f"stack_{STACK}")
        if optimizer == "adam":
            names.append(f"fused_adam+stack_{STACK}")
    return names


def case(name: str, optimizer: str, repeats: int, *, quick: bool) -> dict:
    clients_n, length = (QUICK_CLIENTS if quick else CLIENTS)[name]
    ens, start, clients, plan, layout = step._setup(
        **SIZES[name], clients_n=clients_n, length=length
    )
    plan = dataclasses.replace(plan, local_optimizer=optimizer)  # type: ignore[arg-type]
    sampled = np.arange(clients_n)
    auto = fed.auto_chunk_copies(layout, clients_n)
    names = _variants(optimizer, auto < min(STACK, clients_n))

    def run(variant: str, seed: int, reduce: str = "sum") -> torch.Tensor:
        fused, chunk = VARIANTS[variant]
        with fast_local.using(fused_adam=fused):
            return fed.local_displacements(
                ens,
                start,
                clients,
                sampled,
                plan,
                np.random.default_rng(seed),
                reduce=reduce,  # type: ignore[arg-type]
                chunk_copies=chunk,
            )

    ref = run("reference", 7, "none")
    scale = float(ref.abs().max())
    diffs = {}
    for v in names[1:]:
        d = float((run(v, 7, "none") - ref).abs().max())
        diffs[v] = {"max_abs_diff": d, "max_rel_diff": d / scale if scale else d}
    fns: dict[str, Callable[[int], object]] = {v: (lambda r, v=v: run(v, r)) for v in names}
    for fn in fns.values():  # warm-up (allocator, lazy init)
        fn(0)
    per: dict[str, list[float]] = {v: [] for v in names}
    for r in range(repeats):  # interleaved: drift hits every variant alike
        for v, fn in fns.items():
            t = time.perf_counter()
            fn(r)
            per[v].append(time.perf_counter() - t)
    med = {v: statistics.median(ts) for v, ts in per.items()}
    return {
        "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in SIZES[name].items()},
        "optimizer": optimizer,
        "sampled_clients": clients_n,
        "transitions_per_client": length,
        "params_per_copy": layout.members * layout.size,
        "auto_chunk_copies": auto,
        "repeats": repeats,
        "median_seconds": med,
        "speedup_vs_reference": {v: med["reference"] / med[v] for v in names[1:]},
        # the ratio within each repeat (reference and variant timed back to back)
        "paired_speedup_range": {
            v: [min(ratios), max(ratios)]
            for v in names[1:]
            for ratios in [[a / b for a, b in zip(per["reference"], per[v], strict=True)]]
        },
        **(
            {"stacked_vs_fused_alone": med["fused_adam"] / med[f"fused_adam+stack_{STACK}"]}
            if f"fused_adam+stack_{STACK}" in med
            else {}
        ),
        "equality": diffs,
        "max_abs_update": scale,
    }


def meets_rule(cases: dict[str, dict], ratio: float = 1.1, rel: float = 1e-4) -> dict[str, bool]:
    """Per variant: ≥ ``ratio`` × the reference with outputs equal (``max_rel_diff`` ≤ ``rel``)
    in every case where it was timed."""
    out: dict[str, bool] = {}
    for c in cases.values():
        for v, r in c["speedup_vs_reference"].items():
            ok = r >= ratio and c["equality"][v]["max_rel_diff"] <= rel
            out[v] = out.get(v, True) and ok
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 repeats (smoke)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--sizes", nargs="+", choices=tuple(SIZES), default=list(SIZES))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    repeats = args.repeats or (2 if args.quick else 5)
    load = list(os.getloadavg())
    t0 = time.perf_counter()
    cases: dict[str, dict] = {}
    for name in args.sizes:
        for opt in ("sgd", "adam"):
            cases[f"{name}/{opt}"] = case(name, opt, repeats, quick=args.quick)
            print(name, opt, json.dumps(cases[f"{name}/{opt}"]["speedup_vs_reference"]), flush=True)
    results = {
        "benchmark": "primorl_cpu_wins",
        "meets_adopt_rule": meets_rule(cases),
        "quick": bool(args.quick),
        "what": "median seconds of one round's local work (local steps, clip, sum) per variant "
        "of privrl.primorl.fast_local, timed interleaved on the same inputs; the ratios "
        "(speedup_vs_reference) are robust to the machine's load, the seconds are not",
        "adopt_rule": "a fast path is on by default only where speedup >= 1.1 with equal outputs",
        "fused_adam_supported": fast_local.fused_adam_supported("cpu"),
        "cases": cases,
        "wall_seconds": time.perf_counter() - t0,
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "cpu_count": os.cpu_count(),
            "load_average_at_start": load,
            "load_average_at_end": list(os.getloadavg()),
            "note": "2-core machine shared with other jobs; ratios are from interleaved timings",
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
