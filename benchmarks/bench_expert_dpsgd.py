"""Expert-level DP-SGD speed (Sharma et al., Algorithm 4) on discrete CQL, MLP 256-256.

(a) Per-example gradients of the CQL loss for B examples: a Python loop (one backward per
    example), ``torch.func.vmap(grad)``, and the hand-batched tape (activation × backprop outer
    products); then the clipped sum Σ_i clip(g_i, C) by vmap, batched (materialised) and ghost
    (norms from Gram matrices, no per-example gradients). All on the same batch; the vectorised
    results are checked against the loop.
(b) One expert-level DP-SGD step (Poisson sampling of m = 3000 experts at rate b/m, one
    transition each, clipped sum, Gaussian noise, Adam) vs one ordinary minibatch step of b
    uniform transitions, at b = 256 — the overhead factor of privacy.

Ratios are measured in one run on the same inputs (1 torch thread).

    python benchmarks/bench_expert_dpsgd.py [--batch 256] [--experts 3000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from gymnasium import spaces

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.expert.dpsgd import ExpertTransitions, _Private, _private_step
from privrl.nn.per_example import (
    clipped_grad_sum,
    per_example_grads,
    per_example_grads_loop,
)
from privrl.privacy.sampling import poisson_sample
from privrl.rl.bcq import DiscreteBCQ
from privrl.rl.cql import DiscreteCQL
from privrl.rl.discrete_common import TransitionTable

RESULTS = Path(__file__).parent / "results" / "expert_dpsgd.json"


def expert_data(m: int, episodes: int, length: int, seed: int) -> TrajectoryDataset:
    """CartPole-shaped synthetic data: m experts × `episodes` episodes of `length` steps."""
    rng = np.random.default_rng(seed)
    n_ep = m * episodes
    n_t = n_ep * length
    truncated = np.zeros(n_t, dtype=bool)
    truncated[length - 1 :: length] = True
    return TrajectoryDataset(
        observations=rng.normal(size=(n_t + n_ep, 4)).astype(np.float32),
        actions=rng.integers(0, 2, n_t),
        rewards=np.ones(n_t),
        terminated=np.zeros(n_t, dtype=bool),
        truncated=truncated,
        episode_offsets=np.arange(n_ep + 1) * length,
        unit_ids=np.repeat(np.arange(m), episodes),
        metadata=DatasetMetadata(
            observation_space=spaces.Box(-np.inf, np.inf, (4,), np.float32),
            action_space=spaces.Discrete(2),
        ),
        validate=False,
    )


def timed(fns: dict[str, Callable[[], object]], repeats: int, inner: int = 1) -> dict[str, float]:
    """Median seconds per call of each function: `repeats` rounds, each timing `inner` calls
    of every function in turn (interleaved, so load changes hit all alike), after a warm-up."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times[name].append((time.perf_counter() - t0) / inner)
    return {k: float(np.median(v)) for k, v in times.items()}


def per_example_part(learner, table: TransitionTable, b: int, repeats: int) -> dict:
    batch = table.sample(b, np.random.default_rng(1))
    loss, params = learner.per_example_loss, learner.params
    ref = per_example_grads_loop(loss, params, batch)
    out: dict = {}
    for method in ("vmap", "batched"):
        got = per_example_grads(loss, params, batch, method=method)
        err = max(float((got[k] - ref[k]).abs().max()) for k in ref)
        out[f"{method}_max_abs_diff_vs_loop"] = err
    out["loop_ms"] = (
        1e3 * timed({"loop": lambda: per_example_grads_loop(loss, params, batch)}, 2)["loop"]
    )
    fns: dict[str, Callable[[], object]] = {}
    for method in ("vmap", "batched"):
        fns[f"{method}_ms"] = lambda m=method: per_example_grads(loss, params, batch, method=m)
    for method in ("vmap", "batched", "ghost"):
        fns[f"clipped_sum_{method}_ms"] = lambda m=method: clipped_grad_sum(
            loss, params, batch, 1.0, method=m
        )
    out.update({k: 1e3 * v for k, v in timed(fns, repeats).items()})
    out["speedup_batched_vs_vmap"] = out["vmap_ms"] / out["batched_ms"]
    out["speedup_batched_vs_loop"] = out["loop_ms"] / out["batched_ms"]
    out["speedup_ghost_vs_vmap_clipped"] = out["clipped_sum_vmap_ms"] / out["clipped_sum_ghost_ms"]
    return out


def step_part(make, ds: TrajectoryDataset, m: int, b: int, repeats: int, inner: int) -> dict:
    private_learner, plain_learner = make(), make()
    table = TransitionTable(ds)
    ids = np.unique(ds.unit_ids)
    source = ExpertTransitions(ds, ids, m, TransitionTable(ds))
    rng = np.random.default_rng(0)
    noise = torch.Generator().manual_seed(0)
    fns: dict[str, Callable[[], object]] = {}
    for method in ("ghost", "batched", "vmap"):
        cfg = _Private(source, b / m, b, 20.0, 1.0, "poisson", method)

        def private_step(cfg: _Private = cfg) -> None:
            units = poisson_sample(m, cfg.rate, rng)
            _private_step(private_learner, cfg, units, rng, noise, check=False)

        fns[f"dp_step_{method}_ms"] = private_step

    def plain_step() -> None:
        plain_learner.update(table.sample(b, rng))

    fns["nonprivate_step_ms"] = plain_step
    results = {k: 1e3 * v for k, v in timed(fns, repeats, inner).items()}
    for method in ("ghost", "batched", "vmap"):
        results[f"overhead_{method}"] = (
            results[f"dp_step_{method}_ms"] / results["nonprivate_step_ms"]
        )
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--experts", type=int, default=3000)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--length", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--inner", type=int, default=10)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(1)

    ds = expert_data(args.experts, args.episodes, args.length, seed=0)
    table = TransitionTable(ds)
    cql = DiscreteCQL(4, 2, hidden=(256, 256), seed=0)
    bcq = DiscreteBCQ(4, 2, hidden=(256, 256), seed=0)
    print("per-example gradients (CQL) ...", flush=True)
    pe_cql = per_example_part(cql, table, args.batch, args.repeats)
    print(json.dumps(pe_cql, indent=1), flush=True)
    print("per-example gradients (BCQ) ...", flush=True)
    pe_bcq = per_example_part(bcq, table, args.batch, args.repeats)
    print(json.dumps(pe_bcq, indent=1), flush=True)
    print("DP-SGD step vs non-private step (CQL) ...", flush=True)
    step_cql = step_part(
        lambda: DiscreteCQL(4, 2, hidden=(256, 256), seed=0),
        ds,
        args.experts,
        args.batch,
        args.repeats,
        args.inner,
    )
    print(json.dumps(step_cql, indent=1), flush=True)
    print("DP-SGD step vs non-private step (BCQ) ...", flush=True)
    step_bcq = step_part(
        lambda: DiscreteBCQ(4, 2, hidden=(256, 256), seed=0),
        ds,
        args.experts,
        args.batch,
        args.repeats,
        args.inner,
    )
    print(json.dumps(step_bcq, indent=1), flush=True)
    result = {
        "benchmark": "expert_dpsgd",
        "network": "MLP 4-256-256-2 (CQL: Q; BCQ: Q + imitation)",
        "batch_size": args.batch,
        "experts": args.experts,
        "transitions": ds.n_transitions,
        "torch_threads": 1,
        "per_example_cql": pe_cql,
        "per_example_bcq": pe_bcq,
        "step_cql": step_cql,
        "step_bcq": step_bcq,
        "default_per_example_method": "batched",
        "default_clip_method": "ghost",
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpu_count": os.cpu_count(),
            "load_average": list(os.getloadavg()),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
