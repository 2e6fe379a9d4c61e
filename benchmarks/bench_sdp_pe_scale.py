"""Benchmark: per-episode cost of the Figure 4 algorithms, and what it takes to reach the scale
where SDP-PE's stages act (≥ 3·10⁷ episodes).

1. Batch simulation, side by side on the same batch (RiverSwim S = 4, H = 5, each episode one of
   the 16,384 policies): the stepping loop (`TabularMDPEnv`, one episode at a time, on a
   subsample), `rollout_counts` (all episodes of a block as one array computation) and
   `sample_counts` (the batch's counts drawn from their exact law: multinomial layer counts per
   policy; what SDP-PE runs). CPU seconds per episode and speed-ups.
2. SDP-PE end to end (shuffle, ε = 10, tight, one seed) with `sample_counts` and with
   `rollout_counts` (same seed; equal in law, not the same draws), at two K.
3. DP-UCBVI-LDP's per-episode loop (planning + privatizer every episode): 1 seed, and 20 seeds
   vectorised.
4. Projected CPU time of one seed at K = 125,829,000 episodes (the long runs) for each.

Usage: python benchmarks/bench_sdp_pe_scale.py [--loop-episodes N] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

import privrl.online.sdp_pe as sdp_module
from privrl.envs.tabular import TabularMDPEnv
from privrl.online.common import make_env, policy_set, rollout_counts, sample_counts
from privrl.online.sdp_pe import make_shuffle_privatizer, sdp_pe
from privrl.online.ucbvi import ucbvi

LONG_K = 125_829_000


def _cpu(fn) -> tuple[float, object]:
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def batch_simulation(episodes: int, loop_episodes: int) -> dict:
    mdp = make_env("riverswim")
    policies = policy_set(mdp)
    index = np.random.default_rng(0).integers(0, policies.shape[0], size=episodes)
    t_sample, _ = _cpu(lambda: sample_counts(mdp, policies, index, np.random.default_rng(1)))
    t_rollout, _ = _cpu(lambda: rollout_counts(mdp, policies, index, np.random.default_rng(1)))

    def loop() -> None:
        env = TabularMDPEnv(mdp)
        env.reset(seed=1)
        for i in index[:loop_episodes]:
            pol = policies[i]
            s, _ = env.reset()
            for h in range(mdp.H):
                s, _, _, _, _ = env.step(int(pol[h, s]))

    t_loop, _ = _cpu(loop)
    per = {
        "stepping_loop": t_loop / loop_episodes,
        "rollout_counts": t_rollout / episodes,
        "sample_counts": t_sample / episodes,
    }
    return {
        "episodes": episodes,
        "loop_episodes": loop_episodes,
        "distinct_policies_in_batch": int(np.unique(index).size),
        "cpu_seconds_per_episode": per,
        "speedup_rollout_over_loop": per["stepping_loop"] / per["rollout_counts"],
        "speedup_sample_over_rollout": per["rollout_counts"] / per["sample_counts"],
        "speedup_sample_over_loop": per["stepping_loop"] / per["sample_counts"],
    }


def _sdp_pe_cpu(episodes: int, sim) -> tuple[float, float]:
    mdp = make_env("riverswim")
    env_ss, noise_ss = np.random.SeedSequence(0).spawn(2)
    priv = make_shuffle_privatizer(
        mdp, episodes, epsilon=10.0, delta=1e-5, rng=np.random.default_rng(noise_ss)
    )
    original = sdp_module.sample_counts
    sdp_module.sample_counts = sim
    try:
        t, res = _cpu(lambda: sdp_pe(mdp, episodes, priv, rng=np.random.default_rng(env_ss)))
    finally:
        sdp_module.sample_counts = original
    return t, res.total_regret


def sdp_pe_end_to_end(small: int, large: int) -> dict:
    """CPU of whole runs at two K; the per-stage work (policy evaluation of the active set,
    Frank–Wolfe) does not grow with T, so the long-K projection is t(large) plus the marginal
    per-episode cost between the two times the episodes left."""
    out: dict = {"episodes": [small, large]}
    for name, sim in (
        ("sample_counts", sdp_module.sample_counts),
        ("rollout_counts", rollout_counts),
    ):
        t1, _ = _sdp_pe_cpu(small, sim)
        t2, regret = _sdp_pe_cpu(large, sim)
        marginal = max(t2 - t1, 0.0) / (large - small)
        out[name] = {
            "cpu_s": [t1, t2],
            "regret_at_large": regret,
            "marginal_cpu_us_per_episode": 1e6 * marginal,
            "projected_cpu_s_at_long_K": t2 + marginal * (LONG_K - large),
        }
    out["speedup_at_large"] = out["rollout_counts"]["cpu_s"][1] / out["sample_counts"]["cpu_s"][1]
    return out


def ucbvi_ldp(episodes: int) -> dict:
    mdp = make_env("riverswim")
    out = {"episodes": episodes}
    for seeds in (1, 20):
        t, _ = _cpu(
            lambda n=seeds: ucbvi(
                mdp, episodes, seeds=list(range(n)), privatizer="local", epsilon=10.0
            )
        )
        per = t / (episodes * seeds)
        out[f"{seeds}_seeds"] = {
            "cpu_s": t,
            "cpu_us_per_seed_episode": 1e6 * per,
            "projected_cpu_hours_per_seed_at_long_K": per * LONG_K / 3600,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-episodes", type=int, default=1_000_000)
    parser.add_argument("--loop-episodes", type=int, default=20_000)
    parser.add_argument("--sdp-small", type=int, default=491_400)  # 12 complete stages
    parser.add_argument("--sdp-large", type=int, default=3_932_040)  # 15 complete stages
    parser.add_argument("--ucbvi-episodes", type=int, default=2_000)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "sdp_pe_scale.json"
    )
    args = parser.parse_args()
    result = {
        "benchmark": "sdp_pe_scale",
        "clock": "CPU seconds of this process (time.process_time), robust to a shared machine",
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "batch_simulation": batch_simulation(args.batch_episodes, args.loop_episodes),
        "sdp_pe": sdp_pe_end_to_end(args.sdp_small, args.sdp_large),
        "ucbvi_ldp": ucbvi_ldp(args.ucbvi_episodes),
        "long_K": LONG_K,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
