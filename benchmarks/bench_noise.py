"""The cost of secret noise: ChaCha20 (`NoiseSource.secure()`) against numpy's PCG64, side by side.

Draws the same number of Gaussians, Laplaces and uniform integers from a secure generator and
from `numpy.random.default_rng` in this one process, alternating repeats so that machine load
hits both alike; the figure to quote is `slowdown` (secure time / PCG64 time). Also times one
DP-FedAvg-sized torch draw (`privacy.noise.torch_normal`, float64 cast to float32).

    python benchmarks/bench_noise.py [--n 10000000] [--out benchmarks/results/bench_noise.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from privrl.privacy.noise import NoiseSource, torch_normal

DRAWS = {
    "gaussian": lambda g, n: g.standard_normal(n),
    "laplace": lambda g, n: g.laplace(0.0, 1.0, n),
    "integers": lambda g, n: g.integers(0, 1 << 62, n),
}


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="draws per timing")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_noise.json"))
    args = ap.parse_args()
    secure, plain = NoiseSource.secure().generator("bench"), np.random.default_rng(0)
    rows = {}
    for name, draw in DRAWS.items():
        t_secure = t_plain = np.inf
        for _ in range(args.repeats):  # alternate, so that load hits both alike
            t_secure = min(t_secure, _best(lambda d=draw: d(secure, args.n), 1))
            t_plain = min(t_plain, _best(lambda d=draw: d(plain, args.n), 1))
        rows[name] = {
            "secure_per_s": args.n / t_secure,
            "pcg64_per_s": args.n / t_plain,
            "slowdown": t_secure / t_plain,
        }
        print(f"{name:9s} secure {args.n / t_secure / 1e6:6.1f} M/s, PCG64 "
              f"{args.n / t_plain / 1e6:6.1f} M/s, slowdown {t_secure / t_plain:.2f}×")  # fmt: skip
    like = torch.zeros(1, dtype=torch.float32)
    size = 1_000_000  # about one DP-FedAvg round of a cartpole ensemble
    t_torch = _best(lambda: torch_normal((size,), std=1.0, like=like, rng=secure), args.repeats)
    rows["torch_round"] = {"params": size, "seconds": t_torch}
    print(f"one torch draw of {size:,} float32 noise values: {t_torch * 1e3:.1f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"n": args.n, "machine": platform.platform(), "results": rows}
    args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
