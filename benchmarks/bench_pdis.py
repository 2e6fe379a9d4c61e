"""Where per-decision importance sampling beats trajectory IPS: private IPS, SNIPS, PDIS and
WPDIS on 30-step logs, at ε = 1 and 5, for a few numbers of episodes n.

Data: a Taxi-sized random tabular MDP (25 states, 6 actions, H = 30 steps, stationary,
mean rewards in [0, 1], deterministic rewards) from `privrl.envs.tabular`; the target policy
puts 0.9 on the optimal action of each (step, state) (0.02 on each other), the logging
policy is 0.7·π + 0.3·uniform, and its propensities are logged. The true value of π is
computed exactly (backward evaluation): 25.3, against 22.1 for the logging policy and 14.9
for the uniform one. Every estimator gets the same public bounds: the weight clip W (20 and
200: weights above are clipped; PDIS clips each cumulative weight), rewards in [0, 1],
H = 30, γ = 1, so the return range is [0, 30], each released sum has sensitivity 30·W (the
SNIPS/WPDIS denominators W), and the interval is the default (auto: Bhatia–Davis here).

For each n, `--logs` independent logs are drawn; on each, every estimator is run at each ε
with fresh noise. Reported per (estimator, W, ε, n): the RMSE and the mean (signed) bias of the
value against the truth, the mean interval width, and the interval's coverage of the truth.

    python benchmarks/bench_pdis.py [--logs 20] [--n 1000 10000 100000] [--clips 20 200]
                                    [--out benchmarks/results/bench_pdis.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
from gymnasium import spaces

from privrl.envs.tabular import TabularMDP
from privrl.ope import importance as imp
from privrl.ope import pdis
from privrl.ope.targets import as_target_policy
from privrl.privacy.noise import NoiseSource

RESULTS = Path(__file__).parent / "results" / "bench_pdis.json"
S, A, H = 25, 6, 30
CLIPS = (20.0, 200.0)
EPSILONS = (1.0, 5.0)
ESTIMATORS = ("ips", "snips", "pdis", "wpdis")


def problem(seed: int = 0) -> tuple[TabularMDP, np.ndarray, np.ndarray, float]:
    """(MDP, target π [H, S, A], logging μ [H, S, A], the exact value of π)."""
    mdp = TabularMDP.random(S, A, H, seed=seed, stationary=True)
    _, _, best = mdp.backward_induction()  # the optimal action per (h, s)
    pi = np.full((H, S, A), 0.1 / (A - 1))
    pi[np.arange(H)[:, None], np.arange(S)[None, :], best] = 0.9
    mu = 0.7 * pi + 0.3 / A
    return mdp, pi, mu, float(mdp.value(pi))


def estimate(name: str, data, policy, b: imp.Bounds, eps: float, noise: NoiseSource):
    spec = imp.noise_spec(name, "gaussian", eps, 1e-5)  # type: ignore[arg-type]
    kw = dict(noise=spec, rng=noise.generator(name), interval="auto")
    if name in ("pdis", "wpdis"):
        return getattr(pdis, name)(data["pd"], b, **kw)
    return getattr(imp, name)(data["traj"], b, **kw)


def run(n_values: list[int], logs: int, seed: int, clips: list[float]) -> dict:
    mdp, pi, mu, truth = problem(seed)
    policy = as_target_policy(pi, spaces.Discrete(A), spaces.Discrete(S), horizon=H)
    behaviour = mu
    noise = NoiseSource.insecure(seed)  # a simulation study: reproducible noise
    rows, clipped_share = [], {}
    for n in n_values:
        acc: dict[tuple[str, float, float], list[tuple[float, float, float]]] = {}
        clipped: dict[float, list[float]] = {W: [] for W in clips}
        t0 = time.perf_counter()
        for k in range(logs):
            log = mdp.sample(behaviour, n, rng=np.random.default_rng([seed, n, k]))
            for W in clips:
                b = imp.Bounds(W, (0.0, 1.0), H, 1.0)
                data = {"traj": imp.terms(log, policy, b), "pd": pdis.terms(log, policy, b)}
                clipped[W].append(float(np.mean(data["traj"].weights >= W * (1 - 1e-9))))
                for name in ESTIMATORS:
                    for eps in EPSILONS:
                        e = estimate(name, data, policy, b, eps, noise)
                        acc.setdefault((name, W, eps), []).append((e.value, e.ci_low, e.ci_high))
        seconds = time.perf_counter() - t0
        shares = {W: float(np.mean(c)) for W, c in clipped.items()}
        clipped_share[n] = shares
        for (name, W, eps), got in acc.items():
            v = np.array(got)
            rows.append(
                {
                    "estimator": name,
                    "W": W,
                    "epsilon": eps,
                    "n": n,
                    "rmse": float(np.sqrt(np.mean((v[:, 0] - truth) ** 2))),
                    "bias": float(np.mean(v[:, 0]) - truth),
                    "width": float(np.mean(v[:, 2] - v[:, 1])),
                    "coverage": float(np.mean((v[:, 1] <= truth) & (truth <= v[:, 2]))),
                }
            )
        shown = ", ".join(f"W = {W:g}: {s:.1%}" for W, s in shares.items())
        print(f"n = {n}: {logs} logs in {seconds:.1f} s; trajectory weights clipped ({shown})")
    return {
        "problem": {
            "S": S, "A": A, "H": H, "clips": list(clips), "truth": truth,
            "return_range": [0.0, float(H)],
            "target": "0.9 on the optimal action per (h, s)", "logging": "0.7·π + 0.3·uniform",
        },
        "logs": logs,
        "clipped_share": {
            str(n): {str(W): share for W, share in v.items()} for n, v in clipped_share.items()
        },
        "seed": seed,
        "machine": platform.platform(),
        "rows": rows,
    }  # fmt: skip


def table(result: dict) -> str:
    """The rows as a Markdown table (as in the OPE docs page)."""
    lines = [
        "| W | n | ε | estimator | RMSE | bias | interval width | coverage |",
        "|---:|---:|---:|:---|---:|---:|---:|---:|",
    ]
    for r in sorted(result["rows"], key=lambda r: (r["W"], r["n"], r["epsilon"])):
        lines.append(
            f"| {r['W']:g} | {r['n']:,} | {r['epsilon']:g} | {r['estimator'].upper()} | "
            f"{r['rmse']:.2f} | "
            f"{r['bias']:+.2f} | {r['width']:.2f} | {r['coverage']:.0%} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=int, default=20)
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--clips", type=float, nargs="+", default=list(CLIPS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = run(args.n, args.logs, args.seed, args.clips)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"truth {result['problem']['truth']:.3f}")
    print(table(result))


if __name__ == "__main__":
    main()
