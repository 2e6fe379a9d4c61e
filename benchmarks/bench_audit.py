"""Audit trial throughput: vectorised trials vs a per-trial loop, side by side (issue 17).

New: the audits (`privrl.audit.attacks.audit_dp_apvi` / `audit_gpope`,
`privrl.audit.releases.audit_dp_vapvi` / `audit_dp_lsw` / `audit_sdp_pe`,
`privrl.audit.dpsgd.audit_dp_sgd`) with their default batching — one call of the system's own
release code for a whole batch of trials, noise drawn for all of them at once.
Baseline: the same functions with ``batch=1`` — one mechanism call per trial, i.e. what
running the release once per trial costs (same code path, same scores).

Both run in this one process on the same settings; the figure to quote is `speedup` (the
ratio of the two trials/s measured in this run, robust to machine load). The loop runs fewer
trials (it is slow); trials/s is per method.

    python benchmarks/bench_audit.py [--quick] [--out benchmarks/results/bench_audit.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from privrl.audit.attacks import (
    GPOPEAuditSettings,
    audit_dp_apvi,
    audit_gpope,
    calibrate_apvi_rho,
)
from privrl.audit.dpsgd import DPSGDAuditSettings, audit_dp_sgd
from privrl.audit.releases import audit_dp_lsw, audit_dp_vapvi, audit_sdp_pe
from privrl.offline.apvi import PrivacyConfig


def _rate(fn, trials: int, batch: int | None) -> float:
    t = time.perf_counter()
    fn(trials, batch)
    return trials / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer trials (smoke test)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_audit.json"))
    args = ap.parse_args()
    vec_trials, loop_trials = (20_000, 500) if args.quick else (500_000, 5_000)
    H, S, A, delta = 3, 3, 2, 1e-6
    rho = calibrate_apvi_rho(2.0, delta, H, S, A)
    privacy = PrivacyConfig.gaussian(rho, report_delta=delta)

    def apvi(trials: int, batch: int | None) -> None:
        audit_dp_apvi(
            H=H, S=S, A=A, privacy=privacy, trials=trials, rng=np.random.default_rng(0), batch=batch
        )

    def gpope(trials: int, batch: int | None) -> None:
        audit_gpope(
            GPOPEAuditSettings(sigma=3.0), trials=trials, rng=np.random.default_rng(0), batch=batch
        )

    def vapvi(trials: int, batch: int | None) -> None:
        audit_dp_vapvi(rho=1.0, trials=trials, rng=np.random.default_rng(0), batch=batch)

    def lsw(trials: int, batch: int | None) -> None:
        audit_dp_lsw(epsilon=2.0, trials=trials, rng=np.random.default_rng(0), batch=batch)

    def sdp_pe(trials: int, batch: int | None) -> None:
        audit_sdp_pe(epsilon=2.0, trials=trials, rng=np.random.default_rng(0), batch=batch)

    def dp_sgd(trials: int, batch: int | None) -> None:
        audit_dp_sgd(
            DPSGDAuditSettings(noise_multiplier=2.0),
            trials=trials,
            rng=np.random.default_rng(0),
            batch=batch,
        )

    results = {}
    for name, fn in (
        ("dp-apvi counts (H=3, S=3, A=2)", apvi),
        ("gpope (m=1, N=1, n=2)", gpope),
        ("dp-vapvi vectors (H=3, d=3)", vapvi),
        ("dp-lsw θ (S=1, m=1)", lsw),
        ("sdp-pe counters (H=1, S=2, A=2, 100 users)", sdp_pe),
        ("dp-sgd (q=1, N=1, 10 background units)", dp_sgd),
    ):
        fn(100, None)  # warm-up (imports, caches)
        vec = _rate(fn, vec_trials, None)
        loop = _rate(fn, loop_trials, 1)
        results[name] = {
            "vectorised_trials_per_s": vec,
            "per_trial_loop_trials_per_s": loop,
            "speedup": vec / loop,
            "vectorised_trials": vec_trials,
            "loop_trials": loop_trials,
        }
        print(
            f"{name}: vectorised {vec:,.0f} trials/s, loop {loop:,.0f} trials/s, "
            f"speedup {vec / loop:.0f}×"
        )
    out = {"benchmark": "audit trials", "machine": platform.machine(), "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
