"""Choosing the weight clip W of private IPS: bias, noise and interval width against W.

A synthetic context-free bandit with 10 arms, a logging policy with an exploration floor
(smallest propensity p_min = 0.02) and a target that puts half its mass on the rarest arm, so
the largest weight is W_max = 0.5 / 0.02 = 25 (`privrl.ope.weight_clip.suggest_weight_clip`).
For each log size n and clip W, at ε = 1 and δ = 1e-5:

* bias — exact: E_μ[min(ρ, W) R] − V (clipping cuts the high weights);
* noise std — exact: z(ε, δ) · W · (r_max − r_min) / n, the Gaussian noise on the value;
* sampling std — exact: the standard deviation of the clipped IPS mean over logs;
* RMSE — sqrt(bias² + sampling variance + noise variance);
* interval width and coverage — measured: the mean width of the 95% interval of private
  IPS (Bhatia–Davis score interval and the default Popoviciu interval) over `--reps` fresh
  logs, and how often it holds the true value V (the interval ignores the clipping bias).

    python benchmarks/bench_weight_clip.py [--reps 20] [--out FILE]

writes benchmarks/results/bench_weight_clip.json by default.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from gymnasium import spaces

from privrl.ope import bandit
from privrl.ope.weight_clip import ips_noise_std, suggest_weight_clip
from privrl.privacy.noise import NoiseSource

MU = np.array([0.02, 0.03, 0.05, 0.08, 0.1, 0.12, 0.12, 0.13, 0.15, 0.2])  # logging policy
PI = np.array([0.5, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.04, 0.03, 0.03])  # target
CLICK = np.array([0.2, 0.15, 0.1, 0.08, 0.06, 0.05, 0.05, 0.04, 0.03, 0.02])  # click rates
P_MIN, EPSILON, DELTA = float(MU.min()), 1.0, 1e-5
SIZES = (1_000, 10_000, 100_000)


def exact(W: float, n: int) -> dict[str, float]:
    """Bias, sampling std, noise std and RMSE of private IPS at clip W (closed forms)."""
    rho = np.minimum(PI / MU, W)
    mean = float(np.sum(MU * rho * CLICK))  # E[ρ̄ R], R ~ Bernoulli(CLICK[a])
    second = float(np.sum(MU * rho**2 * CLICK))  # E[(ρ̄ R)²]
    bias = mean - float(PI @ CLICK)
    sampling = math.sqrt((second - mean**2) / n)
    noise = ips_noise_std(W, (0.0, 1.0), n, EPSILON, DELTA)
    rmse = math.sqrt(bias**2 + sampling**2 + noise**2)
    return {"bias": bias, "sampling_std": sampling, "noise_std": noise, "rmse": rmse}


def measured(W: float, n: int, reps: int) -> dict[str, float]:
    """Mean interval widths and coverage of V over `reps` logs and noise draws."""
    truth = float(PI @ CLICK)
    widths: dict[str, list[float]] = {"bhatia-davis": [], "popoviciu": []}
    covered: dict[str, int] = {"bhatia-davis": 0, "popoviciu": 0}
    dist = np.broadcast_to(PI[None, :, None], (n, len(PI), 1))
    for rep in range(reps):
        rng = np.random.default_rng(rep)
        action = rng.choice(len(MU), size=n, p=MU)
        log = {
            "reward": (rng.random(n) < CLICK[action]).astype(float),
            "action": action,
            "pscore": MU[action],
            "action_dist": dist,
        }
        for kind in widths:
            est = bandit.ips(
                **log, epsilon=EPSILON, delta=DELTA, weight_clip=W, reward_range=(0.0, 1.0),
                interval=kind, noise=NoiseSource.insecure(10_000 + rep),
            )  # fmt: skip
            lo, hi = est.interval
            widths[kind].append(hi - lo)
            covered[kind] += int(lo <= truth <= hi)
    return {
        **{f"width_{k.replace('-', '_')}": float(np.mean(v)) for k, v in widths.items()},
        **{f"coverage_{k.replace('-', '_')}": covered[k] / reps for k in covered},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/bench_weight_clip.json")
    )
    args = parser.parse_args()
    suggestion = suggest_weight_clip(
        PI, P_MIN, action_space=spaces.Discrete(len(PI)), observation_space=spaces.Discrete(1)
    )
    w_max = suggestion.weight_clip
    clips = sorted({1.0, 2.0, 5.0, 10.0, 15.0, 20.0, round(w_max, 6)})
    rows = []
    for n in SIZES:
        for W in clips:
            row = {"n": n, "weight_clip": W, **exact(W, n), **measured(W, n, args.reps)}
            rows.append(row)
            print(
                f"n={n:>6} W={W:>5g} bias={row['bias']:+.4f} noise={row['noise_std']:.4f} "
                f"sampling={row['sampling_std']:.4f} rmse={row['rmse']:.4f} "
                f"width(score)={row['width_bhatia_davis']:.4f} "
                f"cover(score)={row['coverage_bhatia_davis']:.2f}"
            )
    result = {
        "benchmark": "weight clip W of private IPS: bias, noise, interval width",
        "setting": {
            "logging_policy": MU.tolist(),
            "target_policy": PI.tolist(),
            "click_rates": CLICK.tolist(),
            "true_value": float(PI @ CLICK),
            "min_propensity": P_MIN,
            "suggested_weight_clip": w_max,
            "epsilon": EPSILON,
            "delta": DELTA,
            "reward_range": [0.0, 1.0],
            "reps": args.reps,
        },
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
