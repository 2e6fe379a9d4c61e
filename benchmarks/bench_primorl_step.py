"""One PRIMORL DP-FedAvg round: vectorised over (clients × members) vs loops, and vs non-private.

New: ``privrl.primorl.dp_fedavg.local_displacements`` + ``aggregate`` — the sampled clients
stacked as copies of the ensemble (flat parameter buffer, clients sorted by local steps,
clipped displacement as state, copies chunked by model size), one noise draw. Baselines, on
the same inputs, timed interleaved in this one run (ratios, not absolute times, are the
result: the machine is shared):

* ``loop``: ``local_displacements_loop`` — a Python loop over trajectories, each a one-copy
  ``GaussianEnsemble`` (its members batched) trained with its ordinary ``loss`` and autograd,
  clipped with ``ensemble_clip`` after every step: the per-trajectory loop written the
  ordinary way;
* ``loop_members_batched``: the new code with one trajectory per chunk — a loop over
  trajectories, members batched, with every optimisation of the new code except stacking
  clients (flat buffer, in-place clip, preallocated buffers): the strictest baseline;
* ``nonprivate``: the local steps without privacy — the same transitions and batches, a
  ``GaussianEnsemble`` with one copy per client, ``loss().sum().backward()`` and
  ``torch.optim.SGD``; no clipping, no noise, no masking.

Scenarios: Pendulum (3 members × 2×64, in 4 → out 4; 30 sampled trajectories of 200 steps,
B = 16 → 13 local steps; per-layer clipping, the spec's choice) and HalfCheetah sizes (7 × 4×200,
in 23 → out 18; 30 trajectories of 200 steps — D4RL's have 1000; the per-step cost is what is
compared — per-layer clipping), where all 30 copies stacked at once are also timed.

    python benchmarks/bench_primorl_step.py [--quick] [--rounds N] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from privrl.nn.ensemble import GaussianEnsemble
from privrl.primorl import dp_fedavg as fed

RESULTS = Path(__file__).parent / "results" / "bench_primorl_step.json"


def _time_interleaved(fns: dict[str, Callable[[int], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each function, timing rounds interleaved (drift-robust)."""
    per: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn(r)
            per[name].append(time.perf_counter() - t)
    return {name: statistics.median(v) for name, v in per.items()}


def _nonprivate_steps(
    ens: GaussianEnsemble, clients: fed.Clients, n: int, plan: fed.DpFedAvgPlan, seed: int
) -> None:
    """The local steps without privacy: n copies, ordinary loss/backward/SGD, same batches."""
    positions, steps = fed.client_batches(
        clients.counts[:n], plan.B, plan.E, np.random.default_rng(seed)
    )
    local = ens.expand_copies(n)
    opt = torch.optim.SGD(list(local.parameters()), lr=plan.lr, foreach=True)
    rows = torch.from_numpy(clients.starts[:n, None, None] + np.maximum(positions, 0))
    x, y = clients.x[rows], clients.y[rows]  # every client has the same full batches here
    for j in range(int(steps.max())):
        loss = local.loss(x[:, j, None], y[:, j, None]).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def scenario(
    name: str,
    *,
    members: int,
    hidden: tuple[int, ...],
    in_dim: int,
    out_dim: int,
    clients_n: int,
    length: int,
    rounds: int,
    stacked: bool,
    naive_loop: bool,
    chunk_sweep: tuple[int, ...] = (),
    seed: int = 0,
) -> dict:
    g = torch.Generator().manual_seed(seed)
    ens = GaussianEnsemble(in_dim, out_dim, hidden, members, 1, seed=seed)
    x = torch.randn(clients_n * length, in_dim, generator=g)
    y = 0.1 * torch.randn(clients_n * length, out_dim, generator=g)
    clients = fed.Clients(x, y, np.full(clients_n, length))
    plan = fed.plan_dp_fedavg(
        fed.DpFedAvgConfig(
            noise_multiplier=0.52,
            clip_norm=0.002,  # of the order of a client's update: the clip binds for some
            clip_mode="per-layer",
            max_rounds=7000,
            n_units=30_000,
        )
    )
    layout = fed.EnsembleLayout(ens)
    start = layout.flatten(ens.parameters_dict())
    sampled = np.arange(clients_n)
    auto = fed.auto_chunk_copies(layout, clients_n)

    def dp_round(chunk: int | None) -> Callable[[int], object]:
        def run(r: int) -> object:
            summed = fed.local_displacements(
                ens, start, clients, sampled, plan, np.random.default_rng(r), chunk_copies=chunk
            )
            return fed.aggregate(start, summed, plan, torch.Generator().manual_seed(r))

        return run

    def loop(r: int) -> object:
        disp = fed.local_displacements_loop(
            ens, start, clients, sampled, plan, np.random.default_rng(r)
        )
        return fed.aggregate(
            start, disp.sum(0, keepdim=True), plan, torch.Generator().manual_seed(r)
        )

    fns: dict[str, Callable[[int], object]] = {"dp_round": dp_round(None)}
    if naive_loop:
        fns["loop"] = loop
    fns["loop_members_batched"] = dp_round(1)
    if stacked and auto < clients_n:
        fns["stacked_all_copies"] = dp_round(clients_n)
    fns["nonprivate"] = lambda r: _nonprivate_steps(ens, clients, clients_n, plan, r)
    for c in chunk_sweep:
        if c not in (1, auto, clients_n):
            fns[f"chunk_{c}"] = dp_round(c)
    for fn in fns.values():  # warm-up (allocator, lazy init)
        fn(0)
    times = _time_interleaved(fns, rounds)

    new = fed.local_displacements(
        ens, start, clients, sampled, plan, np.random.default_rng(7), reduce="none"
    )
    ref = fed.local_displacements_loop(ens, start, clients, sampled, plan, np.random.default_rng(7))
    steps = int(
        fed.client_batches(clients.counts[:1], plan.B, plan.E, np.random.default_rng(0))[1][0]
    )
    out: dict = {
        "members": members,
        "hidden": list(hidden),
        "in_dim": in_dim,
        "out_dim": out_dim,
        "sampled_clients": clients_n,
        "transitions_per_client": length,
        "local_steps": steps,
        "local_batch": plan.B,
        "clip_mode": plan.clip_mode,
        "params_per_copy": layout.members * layout.size,
        "auto_chunk_copies": auto,
        "rounds_timed": rounds,
        "ms_per_round": {k: 1e3 * v for k, v in times.items()},
        "max_abs_diff_vs_loop": float((new - ref).abs().max()),
        "max_client_norm_over_C": float(new.flatten(1).norm(dim=1).max() / plan.C),
    }
    t_new = times["dp_round"]
    if "loop" in times:
        out["speedup_vs_loop"] = times["loop"] / t_new
    out["speedup_vs_loop_members_batched"] = times["loop_members_batched"] / t_new
    out["cost_vs_nonprivate"] = t_new / times["nonprivate"]
    if "stacked_all_copies" in times:
        out["stacked_vs_loop_members_batched"] = (
            times["stacked_all_copies"] / times["loop_members_batched"]
        )
    return out


SCENARIOS = {
    "pendulum": dict(members=3, hidden=(64, 64), in_dim=4, out_dim=4, stacked=False),
    "halfcheetah": dict(
        members=7, hidden=(200, 200, 200, 200), in_dim=23, out_dim=18, stacked=True
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds (smoke run)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--scenario", choices=("all", *SCENARIOS), default="all")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rounds = args.rounds or (2 if args.quick else 7)
    results: dict = {
        "benchmark": "primorl_step",
        "quick": bool(args.quick),
        "torch_threads": torch.get_num_threads(),
        "targets": {
            "pendulum speedup_vs_loop": ">= 8",
            "pendulum cost_vs_nonprivate": "<= 2",
            "halfcheetah speedup over a loop over trajectories with members batched": ">= 1.5",
        },
        "load_average_at_start": list(os.getloadavg()),
        "scenarios": {},
    }
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    for name in names:
        hc = name == "halfcheetah"
        results["scenarios"][name] = scenario(
            name,
            **SCENARIOS[name],
            clients_n=30,
            length=200,
            rounds=max(2, rounds // 2) if hc else rounds,
            naive_loop=True,
            chunk_sweep=(4, 8) if hc and not args.quick else (),
        )
        print(name, json.dumps(results["scenarios"][name], indent=1), flush=True)
    results["machine"] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "note": "2-core machine shared with other jobs; ratios are from interleaved timings",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
