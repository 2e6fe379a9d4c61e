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
compared — per-layer clipping), where all 30 copies stacked at once are also timed; Balance
and Swingup (the cartpoles: 5 × 2×128, in 6 → out 6 — obs 5 + action 1 from the env, as
`privrl.primorl.dynamics.DYNAMICS_PRESETS` sizes both; 30 trajectories of 1000 steps → 63 local
steps; flat clipping, the task presets').

``--device cpu|cuda|auto`` (default cpu): where the rounds run. On a GPU (``cuda``, or ``auto``
with one present) every round is also timed on the CPU from the same inputs, interleaved in
the same run, and the JSON reports ``cpu_over_device`` (CPU seconds / GPU seconds: the GPU's
speed-up); ``--device cuda`` without a GPU exits with a one-line error. The noise is drawn on
the CPU and moved, as in a run (`privrl.privacy.noise.torch_normal`).

``--mode tasks``: what one run of each task costs, side by side. One DP round (the new code,
chunked automatically) at each task's sizes — Pendulum, Balance, Swingup (the sampled
trajectories q·K = 1e-3 × 30,000 = 30 of their horizon) and HalfCheetah (q·K = 1e-2 × 2000 =
20 trajectories of 1000 steps) — timed interleaved in one run on one thread; the result is each
task's seconds per round and its ratio to Pendulum's (robust to the machine's load; absolute
seconds are not), in ``results/bench_primorl_step_tasks.json``. A run's DP stage costs about
ratio × Pendulum's measured DP stage × T/7000 (``reproductions.primorl.table1``).

    python benchmarks/bench_primorl_step.py [--quick] [--rounds N] [--device D] [--out PATH]
    python benchmarks/bench_primorl_step.py --mode tasks [--rounds N] [--device D] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from privrl.nn.device import describe_device, resolve_device
from privrl.nn.ensemble import GaussianEnsemble
from privrl.primorl import dp_fedavg as fed
from privrl.privacy.noise import NoiseSource

RESULTS = Path(__file__).parent / "results" / "bench_primorl_step.json"
TASK_RESULTS = Path(__file__).parent / "results" / "bench_primorl_step_tasks.json"


def _sync() -> None:
    """Wait for queued GPU work, so a timing covers it (nothing to wait for on the CPU)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time_interleaved(fns: dict[str, Callable[[int], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each function, timing rounds interleaved (drift-robust)."""
    per: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):
        for name, fn in fns.items():
            _sync()
            t = time.perf_counter()
            fn(r)
            _sync()
            per[name].append(time.perf_counter() - t)
    return {name: statistics.median(v) for name, v in per.items()}


def _noise(r: int) -> object:
    """Round r's noise generator (insecure, seeded: a benchmark publishes nothing)."""
    return NoiseSource.insecure(r).generator("bench dp-fedavg noise")


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
    rows = rows.to(clients.x.device)
    x, y = clients.x[rows], clients.y[rows]  # every client has the same full batches here
    for j in range(int(steps.max())):
        loss = local.loss(x[:, j, None], y[:, j, None]).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def _setup(
    *,
    members: int,
    hidden: tuple[int, ...],
    in_dim: int,
    out_dim: int,
    clients_n: int,
    length: int,
    clip_mode: str = "per-layer",
    sampling_rate: float = 1e-3,
    n_units: int = 30_000,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> tuple[GaussianEnsemble, torch.Tensor, fed.Clients, fed.DpFedAvgPlan, fed.EnsembleLayout]:
    """A random ensemble of the given sizes, `clients_n` trajectories of `length` transitions
    and a DP-FedAvg plan (z = 0.52, T = 7000, K = `n_units`, rate q), drawn on the CPU and
    moved to `device` (the same inputs on every device)."""
    g = torch.Generator().manual_seed(seed)
    ens = GaussianEnsemble(in_dim, out_dim, hidden, members, 1, seed=seed).to(device)
    x = torch.randn(clients_n * length, in_dim, generator=g)
    y = 0.1 * torch.randn(clients_n * length, out_dim, generator=g)
    clients = fed.Clients(x.to(device), y.to(device), np.full(clients_n, length))
    plan = fed.plan_dp_fedavg(
        fed.DpFedAvgConfig(
            noise_multiplier=0.52,
            sampling_rate=sampling_rate,
            clip_norm=0.002,  # of the order of a client's update: the clip binds for some
            clip_mode=clip_mode,
            max_rounds=7000,
            n_units=n_units,
        )
    )
    layout = fed.EnsembleLayout(ens)
    return ens, layout.flatten(ens.parameters_dict()), clients, plan, layout


def _dp_round(
    ens: GaussianEnsemble,
    start: torch.Tensor,
    clients: fed.Clients,
    plan: fed.DpFedAvgPlan,
    chunk: int | None,
) -> Callable[[int], object]:
    """One DP round over all of `clients` (local steps, clip, sum, one noise draw)."""
    sampled = np.arange(len(clients.counts))

    def run(r: int) -> object:
        summed = fed.local_displacements(
            ens, start, clients, sampled, plan, np.random.default_rng(r), chunk_copies=chunk
        )
        return fed.aggregate(start, summed, plan, _noise(r))

    return run


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
    clip_mode: str = "per-layer",
    chunk_sweep: tuple[int, ...] = (),
    seed: int = 0,
    device: torch.device = torch.device("cpu"),
) -> dict:
    sizes = dict(
        members=members,
        hidden=hidden,
        in_dim=in_dim,
        out_dim=out_dim,
        clients_n=clients_n,
        length=length,
        clip_mode=clip_mode,
        seed=seed,
    )
    ens, start, clients, plan, layout = _setup(**sizes, device=device)
    sampled = np.arange(clients_n)
    auto = fed.auto_chunk_copies(layout, clients_n)

    def dp_round(chunk: int | None) -> Callable[[int], object]:
        return _dp_round(ens, start, clients, plan, chunk)

    def loop(r: int) -> object:
        disp = fed.local_displacements_loop(
            ens, start, clients, sampled, plan, np.random.default_rng(r)
        )
        return fed.aggregate(start, disp.sum(0, keepdim=True), plan, _noise(r))

    fns: dict[str, Callable[[int], object]] = {"dp_round": dp_round(None)}
    if device.type != "cpu":  # the same round on the CPU, side by side
        fns["dp_round_cpu"] = _dp_round(*_setup(**sizes)[:4], None)
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
    if "dp_round_cpu" in times:
        out["cpu_over_device"] = times["dp_round_cpu"] / t_new
    if "stacked_all_copies" in times:
        out["stacked_vs_loop_members_batched"] = (
            times["stacked_all_copies"] / times["loop_members_batched"]
        )
    return out


# the cartpoles (Balance and Swingup share their sizes): obs 5 + action 1 in, Δobs 5 + reward 1
# out (CONTROL_TASKS); flat clipping
CARTPOLE = dict(
    members=5, hidden=(128, 128), in_dim=6, out_dim=6, stacked=False, length=1000, clip_mode="flat"
)
SCENARIOS = {
    "pendulum": dict(members=3, hidden=(64, 64), in_dim=4, out_dim=4, stacked=False, length=200),
    "balance": dict(CARTPOLE),
    "swingup": dict(CARTPOLE),
    "halfcheetah": dict(
        members=7, hidden=(200, 200, 200, 200), in_dim=23, out_dim=18, stacked=True, length=200
    ),
}

# One run of each task at the paper's settings (--mode tasks): the scenario's model sizes and
# clip mode, q·K sampled trajectories of the task's horizon, and T (None: not reported).
TASK_RUNS = {
    "pendulum": dict(clients_n=30, length=200, sampling_rate=1e-3, n_units=30_000, rounds=7000),
    "balance": dict(clients_n=30, length=1000, sampling_rate=1e-3, n_units=30_000, rounds=7000),
    "swingup": dict(clients_n=30, length=1000, sampling_rate=1e-3, n_units=30_000, rounds=10_000),
    "halfcheetah": dict(clients_n=20, length=1000, sampling_rate=1e-2, n_units=2000, rounds=None),
}


def task_rounds(rounds: int, seed: int = 0, device: torch.device | None = None) -> dict:
    """One DP round per task (:data:`TASK_RUNS`), timed interleaved; seconds per round and the
    ratio of each to Pendulum's (on `device`; on a GPU, each also on the CPU beside it)."""
    device = torch.device("cpu") if device is None else device
    fns: dict[str, Callable[[int], object]] = {}
    facts: dict[str, dict] = {}
    for name, run in TASK_RUNS.items():
        sizes = {k: v for k, v in SCENARIOS[name].items() if k not in ("stacked", "length")}
        given = dict(
            **sizes,
            clients_n=run["clients_n"],
            length=run["length"],
            sampling_rate=run["sampling_rate"],
            n_units=run["n_units"],
            seed=seed,
        )
        ens, start, clients, plan, layout = _setup(**given, device=device)
        fns[name] = _dp_round(ens, start, clients, plan, None)
        if device.type != "cpu":
            fns[f"{name}_cpu"] = _dp_round(*_setup(**given)[:4], None)
        steps = int(
            fed.client_batches(clients.counts[:1], plan.B, plan.E, np.random.default_rng(0))[1][0]
        )
        facts[name] = {
            "members": sizes["members"],
            "hidden": list(sizes["hidden"]),
            "in_dim": sizes["in_dim"],
            "out_dim": sizes["out_dim"],
            "clip_mode": plan.clip_mode,
            "sampling_rate": run["sampling_rate"],
            "n_units": run["n_units"],
            "sampled_clients": run["clients_n"],
            "transitions_per_client": run["length"],
            "local_steps": steps,
            "params_per_copy": layout.members * layout.size,
            "auto_chunk_copies": fed.auto_chunk_copies(layout, run["clients_n"]),
            "paper_rounds": run["rounds"],
        }
    for fn in fns.values():  # warm-up (allocator, lazy init)
        fn(0)
    times = _time_interleaved(fns, rounds)
    for name, f in facts.items():
        f["seconds_per_round"] = times[name]
        f["ratio_to_pendulum"] = times[name] / times["pendulum"]
        if f"{name}_cpu" in times:
            f["cpu_seconds_per_round"] = times[f"{name}_cpu"]
            f["cpu_over_device"] = times[f"{name}_cpu"] / times[name]
        if f["paper_rounds"]:
            f["dp_stage_seconds_at_this_load"] = times[name] * f["paper_rounds"]
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds (smoke run)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--scenario", choices=("all", *SCENARIOS), default="all")
    parser.add_argument(
        "--mode",
        choices=("step", "tasks"),
        default="step",
        help="step: the new round vs its baselines per scenario; tasks: one DP round per task "
        "side by side, ratios to Pendulum",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda", "auto"),
        default="cpu",
        help="where the rounds run; on a GPU each round is also timed on the CPU beside it "
        "(cpu_over_device in the JSON)",
    )
    args = parser.parse_args()
    try:
        device = resolve_device(args.device)
    except ValueError as err:
        sys.exit(f"error: --device {args.device}: {str(err).removeprefix('device ')}")
    torch.set_num_threads(1)
    if args.mode == "tasks":
        rounds = args.rounds or (2 if args.quick else 4)
        main_tasks(rounds, args.out, quick=args.quick, device=device)
        return
    rounds = args.rounds or (2 if args.quick else 7)
    results: dict = {
        "benchmark": "primorl_step",
        "quick": bool(args.quick),
        "torch_threads": torch.get_num_threads(),
        "device": describe_device(device),
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
            **{k: v for k, v in SCENARIOS[name].items() if k != "length"},
            clients_n=30,
            rounds=max(2, rounds // 2) if hc else rounds,
            naive_loop=True,
            length=SCENARIOS[name].get("length", 200),
            chunk_sweep=(4, 8) if hc and not args.quick else (),
            device=device,
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


def main_tasks(rounds: int, out: Path, *, quick: bool, device: torch.device) -> None:
    """--mode tasks: one DP round per task, interleaved; the JSON in `out` (default
    results/bench_primorl_step_tasks.json)."""
    if out == RESULTS:
        out = TASK_RESULTS
    load = list(os.getloadavg())
    t0 = time.perf_counter()
    tasks = task_rounds(rounds, device=device)
    results = {
        "benchmark": "primorl_step_tasks",
        "quick": quick,
        "torch_threads": torch.get_num_threads(),
        "device": describe_device(device),
        "rounds_timed": rounds,
        "what": "median seconds of one DP-FedAvg round (local steps, clip, sum, one noise "
        "draw) at each task's sizes, timed interleaved; ratio_to_pendulum is robust to the "
        "machine's load, seconds are not",
        "load_average_at_start": load,
        "tasks": tasks,
        "ratio_to_pendulum": {k: v["ratio_to_pendulum"] for k, v in tasks.items()},
        "wall_seconds": time.perf_counter() - t0,
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpu_count": os.cpu_count(),
            "load_average": list(os.getloadavg()),
            "note": "2-core machine shared with other jobs; ratios are from interleaved timings",
        },
    }
    print(json.dumps(results, indent=1), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
