"""GPOPE speed: 10⁵ iterations on Mountain Car (order-5 Fourier basis, 36 features).

New: per-trajectory statistics Â_i, b̂_i, Ĉ_i computed ONCE per dataset (batched), so an
iteration is a gather and three small matrix-vector products (`privrl.ope.gpope`).
Baseline: Algorithm 1 read literally — every iteration recomputes the sampled trajectory's
features and statistics (2.2) from its transitions (line 3) before the same update.
Both runs use the same trajectory indices and the same noise stream (privrl.privacy), so their
iterates agree (checked); the ratio is measured in one run on the same inputs.

Data: Mountain Car trajectories from `privrl.ope.domains` (the reproduction's behaviour
policy) when that module is available, else from the same simulator with an energy-pumping
policy (10% random actions).

    python benchmarks/bench_gpope.py [--iterations 100000] [--baseline-iterations N] [--m 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.ope.gpope import StepSize, _spawn, gpope, gtd2_saddle_point
from privrl.ope.stats import trajectory_stats
from privrl.privacy.mechanisms import gaussian_mechanism
from privrl.rl.features import make_features

RESULTS = Path(__file__).parent / "results" / "gpope.json"


def mountain_car_data(m: int, seed: int) -> tuple[TrajectoryDataset, float, str]:
    """(dataset, γ, source description)."""
    try:
        from privrl.ope.domains import get_domain

        dom = get_domain("mountain-car", seed=seed)
        return dom.sample(dom.behaviour_policy, m, seed=seed), float(dom.gamma), "domain"
    except ImportError:
        pass
    from privrl.envs.mountain_car import MountainCarBatch

    sim, rng, horizon = MountainCarBatch(), np.random.default_rng(seed), 1000
    obs = sim.reset(m, rng)
    alive = np.ones(m, bool)
    traj_obs, traj_act, traj_rew, traj_done = [obs], [], [], []
    for _ in range(horizon):
        act = np.where(obs[:, 1] >= 0, 2, 0)
        explore = rng.random(m) < 0.1
        act = np.where(explore, rng.integers(0, 3, m), act)
        nxt, rew, done = sim.step(obs, act)
        nxt = np.where(alive[:, None], nxt, obs)
        traj_act.append(np.where(alive, act, -1))
        traj_rew.append(rew)
        traj_done.append(done & alive)
        alive &= ~done
        traj_obs.append(nxt)
        obs = nxt
        if not alive.any():
            break
    A = np.stack(traj_act, 1)
    episodes = []
    for i in range(m):  # assembling the dataset (not a hot path)
        T = int((A[i] >= 0).sum())
        term = np.zeros(T, bool)
        term[-1] = bool(traj_done[T - 1][i])
        trunc = np.zeros(T, bool)
        trunc[-1] = not term[-1]
        episodes.append(
            {
                "observations": np.stack([o[i] for o in traj_obs[: T + 1]]),
                "actions": A[i, :T],
                "rewards": np.full(T, -1.0),
                "terminated": term,
                "truncated": trunc,
            }
        )
    meta = DatasetMetadata(
        observation_space=sim.observation_space, action_space=sim.action_space, discount=0.99
    )
    return TrajectoryDataset.from_episodes(episodes, metadata=meta), 0.99, "simulator"


def baseline_gpope(data, features, gamma, index, beta, clip, noise_std, rng, n_iter):
    """Algorithm 1 with line 3 done literally: recompute (2.2) for the sampled trajectory."""
    obs = np.asarray(data.observations)
    offsets = np.asarray(data.episode_offsets)
    term = np.asarray(data.terminated)
    rew = np.asarray(data.rewards)
    n = features.dim
    x = np.zeros(2 * n)
    for i in range(n_iter):
        j = int(index[i, 0])
        t0, t1 = offsets[j], offsets[j + 1]
        phi = features(obs[t0 + j : t1 + j + 1])  # the episode's observations, final included
        nxt = phi[1:].copy()
        nxt[term[t0:t1]] = 0.0
        tau = t1 - t0
        A = phi[:-1].T @ (phi[:-1] - gamma * nxt) / tau
        b = phi[:-1].T @ rew[t0:t1] / tau
        C = phi[:-1].T @ phi[:-1] / tau
        theta, w = x[:n], x[n:]
        g = np.concatenate((-A.T @ w, A @ theta + C @ w - b))
        norm = np.linalg.norm(g)
        if norm > clip:
            g *= clip / norm
        g, _ = gaussian_mechanism(
            g[None], sensitivity=2 * clip, sigma=noise_std, rng=rng, name="baseline"
        )
        x = x - beta * g[0]
    return x[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=100_000)
    ap.add_argument(
        "--baseline-iterations",
        type=int,
        default=None,
        help="iterations timed for the baseline (default: same as --iterations)",
    )
    ap.add_argument("--m", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n_iter = args.iterations
    n_base = args.baseline_iterations or n_iter

    data, gamma, source = mountain_car_data(args.m, args.seed)
    features = make_features("fourier:5", data.metadata.observation_space)
    t = time.perf_counter()
    stats = trajectory_stats(data, features, gamma)
    t_stats = time.perf_counter() - t

    clip, sigma, step = 1.0, 4.0, StepSize(eta=1e-3)
    # The one-time privacy accounting of a run (not part of the iteration cost):
    t = time.perf_counter()
    gpope(stats, sigma=sigma, clip=clip, iterations=1, step=step, seed=0, n_record=0)
    t_report = time.perf_counter() - t
    # Same index and noise streams for both (`_spawn` is what gpope uses).
    sample_rng, noise_rng = _spawn(args.seed)
    index = sample_rng.integers(0, stats.m, size=(n_iter, 1))
    t = time.perf_counter()
    trace = gtd2_saddle_point(
        stats.A,
        stats.b,
        stats.C,
        index,
        step.betas(n_iter),
        clip=clip,
        noise_std=clip * sigma,
        rng=noise_rng,
    )
    t_new = time.perf_counter() - t

    _, noise_rng = _spawn(args.seed)
    t = time.perf_counter()
    theta_base = baseline_gpope(
        data, features, gamma, index, step.eta, clip, clip * sigma, noise_rng, n_base
    )
    t_base = time.perf_counter() - t
    if n_base == n_iter:
        check = trace.x[0, : stats.n]
    else:
        _, noise_rng = _spawn(args.seed)
        check = gtd2_saddle_point(
            stats.A,
            stats.b,
            stats.C,
            index[:n_base],
            step.betas(n_base),
            clip=clip,
            noise_std=clip * sigma,
            rng=noise_rng,
        ).x[0, : stats.n]
    max_diff = float(np.max(np.abs(check - theta_base)))

    per_new = t_new / n_iter
    per_base = t_base / n_base
    out = {
        "benchmark": "gpope_mountain_car",
        "data_source": source,
        "m": stats.m,
        "transitions": int(data.n_transitions),
        "mean_length": float(np.mean(stats.lengths)),
        "features": features.spec,
        "n_features": stats.n,
        "iterations": n_iter,
        "stats_once_seconds": t_stats,
        "privacy_accounting_once_seconds": t_report,
        "gpope_seconds": t_new,
        "gpope_us_per_iteration": per_new * 1e6,
        "baseline_iterations": n_base,
        "baseline_seconds": t_base,
        "baseline_us_per_iteration": per_base * 1e6,
        "speedup_per_iteration": per_base / per_new,
        "speedup_including_stats": (per_base * n_iter) / (t_new + t_stats),
        "max_abs_theta_difference": max_diff,
        "machine": {
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
