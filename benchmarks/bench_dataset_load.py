"""Benchmark: load + validate a 1M-transition dataset from the native HDF5 format.

Builds a D4RL-sized dataset (default 5,000 episodes x 200 steps, 17-dim float32 observations,
6-dim float32 actions, behaviour probabilities), saves it once per compression, then reports
(median of several runs, all in this one run):

* load + validate time for lzf, gzip and uncompressed files, and the file sizes;
* vectorised validation vs a naive per-episode Python loop doing the same checks on the same
  arrays (the ratio is the figure to quote; absolute times drift between machines).

Usage: python benchmarks/bench_dataset_load.py [--episodes N] [--length T] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from gymnasium import spaces

from privrl.data import DatasetError, DatasetMetadata, TrajectoryDataset, load_hdf5, save_hdf5


def build(n_episodes: int, length: int, seed: int = 0) -> TrajectoryDataset:
    rng = np.random.default_rng(seed)
    n_t = n_episodes * length
    offsets = np.arange(n_episodes + 1, dtype=np.int64) * length
    terminated = np.zeros(n_t, bool)
    truncated = np.zeros(n_t, bool)
    ends = offsets[1:] - 1
    term_eps = rng.random(n_episodes) < 0.3
    terminated[ends[term_eps]] = True
    truncated[ends[~term_eps]] = True
    # smooth-ish observations compress like real sensor data, unlike white noise
    obs = np.cumsum(rng.standard_normal((n_t + n_episodes, 17), dtype=np.float32) * 0.05, axis=0)
    return TrajectoryDataset(
        observations=obs.astype(np.float32),
        actions=rng.uniform(-1, 1, (n_t, 6)).astype(np.float32),
        rewards=rng.standard_normal(n_t),
        terminated=terminated,
        truncated=truncated,
        episode_offsets=offsets,
        behaviour_probs=rng.uniform(0.05, 1.0, n_t),
        unit_ids=rng.integers(0, n_episodes // 4 + 1, n_episodes),
        metadata=DatasetMetadata(
            spaces.Box(-np.inf, np.inf, (17,), np.float32),
            spaces.Box(-1.0, 1.0, (6,), np.float32),
            env_id="bench",
            extra={"benchmark": "dataset_load"},
        ),
    )


def naive_validate(ds: TrajectoryDataset) -> None:
    """The same checks, written as a loop over episodes (the baseline a vectorised check beats)."""
    md = ds.metadata
    low, high = md.action_space.low, md.action_space.high
    off = ds.episode_offsets
    for i in range(ds.n_episodes):
        s, e = int(off[i]), int(off[i + 1])
        if e <= s:
            raise DatasetError(f"episode {i}: empty")
        obs = ds.observations[s + i : e + i + 1]
        act = ds.actions[s:e]
        for name, arr in (("observations", obs), ("actions", act), ("rewards", ds.rewards[s:e])):
            bad = ~np.isfinite(arr)
            if bad.any():
                raise DatasetError(f"episode {i}: non-finite {name}")
        if np.any((act < low) | (act > high)):
            raise DatasetError(f"episode {i}: action out of bounds")
        p = ds.behaviour_probs[s:e]
        if np.any(~np.isfinite(p) | (p <= 0) | (p > 1)):
            raise DatasetError(f"episode {i}: bad probability")
        term, trunc = ds.terminated[s:e], ds.truncated[s:e]
        if np.any(term & trunc) or term[:-1].any() or trunc[:-1].any():
            raise DatasetError(f"episode {i}: bad flags")


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=5000)
    parser.add_argument("--length", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "dataset_load.json"
    )
    args = parser.parse_args()

    ds = build(args.episodes, args.length)
    result: dict = {
        "n_episodes": ds.n_episodes,
        "n_transitions": ds.n_transitions,
        "obs_dim": 17,
        "action_dim": 6,
        "repeats": args.repeats,
        "formats": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for compression in ("lzf", "gzip", None):
            path = Path(tmp) / f"bench_{compression}.h5"
            t0 = time.perf_counter()
            save_hdf5(ds, path, compression=compression)
            save_s = time.perf_counter() - t0
            loaded = load_hdf5(path)
            assert loaded.equals(ds)
            result["formats"][str(compression)] = {
                "file_mb": round(path.stat().st_size / 1e6, 2),
                "save_s": round(save_s, 4),
                "load_only_s": round(
                    median_time(lambda p=path: load_hdf5(p, validate=False), args.repeats), 4
                ),
                "load_and_validate_s": round(
                    median_time(lambda p=path: load_hdf5(p), args.repeats), 4
                ),
            }

    vec = median_time(ds.validate, args.repeats)
    naive = median_time(lambda: naive_validate(ds), max(1, args.repeats // 2))
    lzf, gz = result["formats"]["lzf"], result["formats"]["gzip"]
    result["validate_vectorised_s"] = round(vec, 4)
    result["validate_naive_loop_s"] = round(naive, 4)
    result["speedup_vectorised_vs_loop"] = round(naive / vec, 2)
    result["load_speedup_lzf_vs_gzip"] = round(
        gz["load_and_validate_s"] / lzf["load_and_validate_s"], 2
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
