"""Consensus counting speed: ln count of every prefix of 60,000 trajectories (length 200)
against 3000 experts (the scale of Sharma et al.'s datasets).

New: `privrl.expert.consensus.prefix_log_counts`. It makes one batched `greedy_actions` call
per block of states for all experts, then runs a time-step loop that is vectorised over
experts × trajectories and finishes with a log-sum-exp over experts.
Baseline: a per-expert Python loop. For each expert it computes that expert's greedy actions
on all states, vectorised over states, adds up log π_i(a_j|s_j) along each trajectory, and
accumulates into the running log count with `np.logaddexp`.

Experts: a synthetic linear ExpertSet with 2 actions and 4-dim observations (CartPole's
sizes), where the greedy action of expert i is [w_i·s + b_i > 0]. Observations and weights
are multiples of 1/8, so every dot product is exact in float32 and both methods see the same
greedy actions. Most experts are perturbations of one policy, so the counts cover a wide range.

Both methods run in this one run on the same inputs. The figure to quote is
`speedup_same_subset`: the median ratio of --repeats interleaved timings of both methods on
the same subset of trajectories, with all experts. The loop is far too slow for the full
data, so `loop_seconds_extrapolated` scales its subset time linearly in the number of states,
since the per-expert work is linear in states. By default the batched method then runs on
all the data. `--batched-trajectories N` times it on the first N trajectories only and
extrapolates, for a busy machine where the full run would take too long. The JSON says which
figures are extrapolated and reports the peak memory.

    python benchmarks/bench_consensus.py [--quick] [--trajectories N] [--experts M]
        [--length L] [--loop-trajectories N] [--batched-trajectories N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import time
from pathlib import Path

import numpy as np

from privrl.expert.consensus import prefix_log_counts

RESULTS = Path(__file__).parent / "results" / "consensus.json"


class LinearExperts:
    """m linear-threshold experts over 2 actions: greedy_i(s) = [w_i·s + b_i > 0]."""

    def __init__(self, w: np.ndarray, b: np.ndarray) -> None:
        self.w = np.ascontiguousarray(w, dtype=np.float32)  # [m, d]
        self.b = np.ascontiguousarray(b, dtype=np.float32)  # [m]
        self.seconds = 0.0  # time spent inside greedy_actions (the experts' own cost)

    @property
    def n_experts(self) -> int:
        return int(self.w.shape[0])

    @property
    def n_actions(self) -> int:
        return 2

    @property
    def obs_dim(self) -> int:
        return int(self.w.shape[1])

    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        t = time.perf_counter()
        z = np.empty((self.w.shape[0], obs.shape[0]), dtype=np.float32)
        np.matmul(self.w, np.asarray(obs, dtype=np.float32).T, out=z)
        out = np.empty(z.shape, dtype=np.int64)
        np.greater(z, -self.b[:, None], out=out, casting="unsafe")
        self.seconds += time.perf_counter() - t
        return out

    def greedy_one(self, i: int, obs: np.ndarray) -> np.ndarray:
        """Expert i alone (the baseline's per-expert call)."""
        return (obs @ self.w[i] > -self.b[i]).astype(np.int64)


def make_problem(
    n_traj: int, length: int, m: int, d: int, seed: int
) -> tuple[LinearExperts, np.ndarray, np.ndarray, np.ndarray]:
    """(experts, states [n, d], actions [n], offsets). Trajectories follow expert policies
    (a random expert per trajectory, 5% random actions) on random states."""
    rng = np.random.default_rng(seed)

    def eighths(x: np.ndarray) -> np.ndarray:
        return (np.round(x * 8.0) / 8.0).astype(np.float32)

    base = rng.standard_normal(d)
    w = eighths(base + 0.4 * rng.standard_normal((m, d)))
    b = eighths(0.25 * rng.standard_normal(m))
    experts = LinearExperts(w, b)
    n = n_traj * length
    states = eighths(rng.standard_normal((n, d)))
    who = np.repeat(rng.integers(0, m, n_traj), length)
    actions = (np.einsum("nd,nd->n", states, w[who]) > -b[who]).astype(np.int64)
    flip = rng.random(n) < 0.05
    actions[flip] = 1 - actions[flip]
    offsets = np.arange(n_traj + 1, dtype=np.int64) * length
    return experts, states, actions, offsets


def loop_log_counts(
    experts: LinearExperts, states: np.ndarray, actions: np.ndarray, offsets: np.ndarray, p_min
) -> np.ndarray:
    """Baseline: Python loop over experts, vectorised over states."""
    g = 1.0 - p_min  # |A| = 2
    log_g, log_p = np.log(g), np.log(p_min)
    starts = np.repeat(offsets[:-1], np.diff(offsets))
    acc = np.full(actions.shape[0], -np.inf)
    for i in range(experts.n_experts):
        logp = np.where(experts.greedy_one(i, states) == actions, log_g, log_p)
        cs = np.cumsum(logp)
        before = np.concatenate(([0.0], cs))[starts]  # cumulative sum before each episode
        np.logaddexp(acc, cs - before, out=acc)
    return acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trajectories", type=int, default=60_000)
    parser.add_argument("--length", type=int, default=200)
    parser.add_argument("--experts", type=int, default=3000)
    parser.add_argument("--obs-dim", type=int, default=4)
    parser.add_argument("--loop-trajectories", type=int, default=500)
    parser.add_argument("--batched-trajectories", type=int, default=None, help="default: all")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved subset timings")
    parser.add_argument("--p-min", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3,000 trajectories, 100 in loop")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.trajectories, args.loop_trajectories = 3000, 100
        args.batched_trajectories = None
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass

    experts, states, actions, offsets = make_problem(
        args.trajectories, args.length, args.experts, args.obs_dim, args.seed
    )
    n = int(offsets[-1])
    pairs = n * args.experts

    # Same-input comparison on the loop subset, interleaved `--repeats` times (the machine is
    # shared: interleaving exposes both methods to the same load; medians are reported).
    k = min(args.loop_trajectories, args.trajectories)
    n_sub = int(offsets[k])
    sub = (states[:n_sub], actions[:n_sub], offsets[: k + 1])
    batched_times, loop_times, ratios = [], [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        batched_sub = prefix_log_counts(sub, experts, args.p_min).values
        batched_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        loop_sub = loop_log_counts(experts, *sub, args.p_min)
        loop_times.append(time.perf_counter() - t)
        ratios.append(loop_times[-1] / batched_times[-1])
    batched_sub_s, loop_sub_s = statistics.median(batched_times), statistics.median(loop_times)
    max_diff = float(np.max(np.abs(batched_sub - loop_sub)))

    # The full data (or its first --batched-trajectories trajectories), batched only.
    kb = args.trajectories
    if args.batched_trajectories is not None:
        kb = max(1, min(args.batched_trajectories, args.trajectories))
    n_b = int(offsets[kb])
    experts.seconds = 0.0
    t = time.perf_counter()
    full = prefix_log_counts((states[:n_b], actions[:n_b], offsets[: kb + 1]), experts, args.p_min)
    batched_run_s = time.perf_counter() - t
    batched_s = batched_run_s * n / n_b
    greedy_s = experts.seconds * n / n_b
    loop_extrapolated_s = loop_sub_s * n / n_sub
    counts = np.exp(full.values)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    result = {
        "benchmark": "consensus_prefix_log_counts",
        "trajectories": args.trajectories,
        "length": args.length,
        "experts": args.experts,
        "obs_dim": args.obs_dim,
        "n_actions": 2,
        "p_min": args.p_min,
        "states": n,
        "expert_state_pairs": pairs,
        "batched_seconds": batched_s,
        "batched_extrapolated": kb < args.trajectories,
        "batched_run_trajectories": kb,
        "batched_run_seconds": batched_run_s,
        "batched_ns_per_pair": batched_s / pairs * 1e9,
        "batched_greedy_actions_seconds": greedy_s,
        "batched_counting_seconds": batched_s - greedy_s,
        "subset_trajectories": k,
        "subset_repeats": args.repeats,
        "subset_batched_seconds": batched_sub_s,
        "subset_loop_seconds": loop_sub_s,
        "speedup_same_subset": statistics.median(ratios),
        "speedup_same_subset_each_repeat": ratios,
        "loop_seconds_extrapolated": loop_extrapolated_s,
        "loop_extrapolated": k < args.trajectories,
        "loop_extrapolation": f"linear in states from {k} of {args.trajectories} trajectories"
        if k < args.trajectories
        else "none (loop ran on all trajectories)",
        "max_abs_log_count_difference_subset": max_diff,
        "peak_rss_mb": peak_rss_mb,
        "input_arrays_mb": (states.nbytes + actions.nbytes + offsets.nbytes) / 2**20,
        "count_quantiles_batched_run": {
            q: float(np.quantile(counts, float(q))) for q in ("0.5", "0.9", "0.99", "1.0")
        },
        "machine": {
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "load_average": list(os.getloadavg()),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
