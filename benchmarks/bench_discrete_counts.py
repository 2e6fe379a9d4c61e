"""DP-APVI's count release: continuous noise against the discrete samplers, side by side.

Releases the two count families n_h(s,a), n_h(s,a,s') of DP-APVI at one size (default H = 20,
S = 30, A = 5: 93,000 counts) with the noise DP-APVI plans (Gaussian at ρ, Laplace at ε), in
this one process, three ways: the continuous mechanism (what the counts got before), the
vectorised discrete sampler on the run's noise generator (what they get now), and the exact
discrete sampler on OS entropy (`secure=True`, a Python loop per draw). The figures to quote are
the ratios to the continuous release (`slowdown`); the exact path runs once (it is slow).

    python benchmarks/bench_discrete_counts.py [--H 20 --S 30 --A 5] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from privrl.offline.apvi import PrivacyConfig, noise_plan
from privrl.privacy.mechanisms import (
    discrete_gaussian_mechanism,
    discrete_laplace_mechanism,
    gaussian_mechanism,
    laplace_mechanism,
)
from privrl.privacy.noise import NoiseSource


def _seconds(fn: Callable[[], object], repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return float(best)


def _release(kind: str, families: list[np.ndarray], plan, rng) -> None:
    for counts in families:
        if plan.mechanism == "gaussian":
            s, sig = plan.sensitivity, plan.scale
            if kind == "continuous":
                gaussian_mechanism(counts, sensitivity=s, sigma=sig, rng=rng, name="c")
            else:
                secure = kind == "exact"
                discrete_gaussian_mechanism(
                    counts, sensitivity=s, sigma=sig, rng=rng, secure=secure, name="c"
                )
        elif kind == "continuous":
            b = plan.scale
            laplace_mechanism(counts, sensitivity=plan.sensitivity, scale=b, rng=rng, name="c")
        else:
            discrete_laplace_mechanism(
                counts,
                sensitivity=round(plan.sensitivity),
                scale=plan.scale,
                rng=rng,
                secure=kind == "exact",
                name="c",
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--H", type=int, default=20)
    ap.add_argument("--S", type=int, default=30)
    ap.add_argument("--A", type=int, default=5)
    ap.add_argument("--rho", type=float, default=1.0)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/discrete_counts.json"))
    args = ap.parse_args()
    H, S, A = args.H, args.S, args.A
    families = [np.full((H, S, A), 50, np.int64), np.full((H, S, A, S), 10, np.int64)]
    rng = NoiseSource.secure().generator("bench")
    rows = {}
    for privacy in (PrivacyConfig.gaussian(args.rho), PrivacyConfig.laplace(args.epsilon)):
        plan = noise_plan(H, S, A, privacy, 0.1)
        t = {
            kind: _seconds(lambda k=kind, p=plan: _release(k, families, p, rng), reps)
            for kind, reps in (("continuous", args.repeats), ("fast", args.repeats), ("exact", 1))
        }
        rows[plan.mechanism] = {
            "noise_scale": plan.scale,
            "seconds": t,
            "slowdown": {k: t[k] / t["continuous"] for k in ("fast", "exact")},
        }
        print(f"{plan.mechanism:8s} continuous {t['continuous'] * 1e3:8.1f} ms  fast "
              f"{t['fast'] * 1e3:8.1f} ms ({t['fast'] / t['continuous']:.1f}×)  exact "
              f"{t['exact']:8.2f} s ({t['exact'] / t['continuous']:.0f}×)")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "H": H,
        "S": S,
        "A": A,
        "counts": int(sum(f.size for f in families)),
        "machine": platform.platform(),
        "results": rows,
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
