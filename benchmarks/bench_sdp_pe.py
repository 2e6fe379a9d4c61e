"""Benchmark: SDP-PE for 10⁶ RiverSwim episodes, and the vectorised batch simulation vs
stepping episodes one at a time.

1. SDP-PE (shuffle, ε = 10, δ = 1e-5, tight calibration) on RiverSwim S = 4, H = 5 for 10⁶
   episodes, one seed: wall time and the share spent simulating episodes (`sample_counts`).
2. Simulation of one SDP-PE batch (each episode runs its own policy of the 2^14-policy set,
   counts and reward sums collected): `rollout_counts` (all episodes of a block at once) vs a
   loop stepping each episode through the Gymnasium wrapper `TabularMDPEnv`, on the same
   subsample of episodes (default 20,000), measured in this one run. Both give statistics of
   the same law; the ratio of wall times is the speed-up (target ≥ 30×).

Usage: python benchmarks/bench_sdp_pe.py [--episodes K] [--subsample N] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

import privrl.online.sdp_pe as sdp_module
from privrl.envs.tabular import TabularMDP, TabularMDPEnv
from privrl.online.common import Counts, make_env, policy_set, rollout_counts
from privrl.online.sdp_pe import make_shuffle_privatizer, sdp_pe


def end_to_end(episodes: int, seed: int = 0) -> dict:
    mdp = make_env("riverswim")
    env_ss, noise_ss = np.random.SeedSequence(seed).spawn(2)
    priv = make_shuffle_privatizer(
        mdp, episodes, epsilon=10.0, delta=1e-5, rng=np.random.default_rng(noise_ss)
    )
    spent = {"rollout": 0.0}
    original = sdp_module.sample_counts

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = original(*args, **kwargs)
        spent["rollout"] += time.perf_counter() - t
        return out

    sdp_module.sample_counts = timed
    try:
        t0 = time.perf_counter()
        res = sdp_pe(mdp, episodes, priv, rng=np.random.default_rng(env_ss))
        wall = time.perf_counter() - t0
    finally:
        sdp_module.sample_counts = original
    return {
        "episodes": episodes,
        "wall_s": wall,
        "simulation_s": spent["rollout"],
        "episodes_per_s": episodes / wall,
        "stages": len(res.log),
        "regret": res.total_regret,
        "final_active_policies": res.log[-2].get("active_after") if len(res.log) > 1 else None,
    }


def step_one_at_a_time(
    mdp: TabularMDP, policies: np.ndarray, index: np.ndarray, seed: int
) -> Counts:
    """The baseline: every episode stepped through the Gymnasium wrapper, counted in Python."""
    H, S, A = mdp.H, mdp.S, mdp.A
    env = TabularMDPEnv(mdp)
    env.reset(seed=seed)
    n_sa, n_sas, r_sum = np.zeros((H, S, A)), np.zeros((H, S, A, S)), np.zeros((H, S, A))
    for i in index:
        pol = policies[i]
        s, _ = env.reset()
        for h in range(H):
            a = int(pol[h, s])
            s2, r, _, _, _ = env.step(a)
            n_sa[h, s, a] += 1
            n_sas[h, s, a, s2] += 1
            r_sum[h, s, a] += r
            s = s2
    return Counts(n_sa, n_sas, r_sum)


def simulation(subsample: int, seed: int = 1) -> dict:
    mdp = make_env("riverswim")
    policies = policy_set(mdp)
    rng = np.random.default_rng(seed)
    index = rng.integers(0, policies.shape[0], size=subsample)
    t0 = time.perf_counter()
    vec, _ = rollout_counts(mdp, policies, index, np.random.default_rng(seed))
    t_vec = time.perf_counter() - t0
    t0 = time.perf_counter()
    loop = step_one_at_a_time(mdp, policies, index, seed)
    t_loop = time.perf_counter() - t0
    # same law: visit frequencies agree up to sampling noise
    diff = np.abs(vec.n_sa - loop.n_sa).max() / subsample
    return {
        "subsample_episodes": subsample,
        "vectorised_s": t_vec,
        "one_at_a_time_s": t_loop,
        "speedup": t_loop / t_vec,
        "max_visit_frequency_difference": float(diff),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--subsample", type=int, default=20_000)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "sdp_pe.json"
    )
    args = parser.parse_args()
    load = os.getloadavg()
    result = {
        "benchmark": "sdp_pe",
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in load],
        },
        "end_to_end": end_to_end(args.episodes),
        "simulation": simulation(args.subsample),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
