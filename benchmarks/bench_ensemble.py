"""Ensemble training throughput: one batched step for all networks vs one network at a time.

New: `privrl.nn.GaussianEnsemble` — parameters stacked ``[copies, members, ...]``, every layer
one ``torch.baddbmm`` over the whole stack, one backward and one optimiser step per training
step. Baseline: the same networks as separate small MLPs (``nn.Linear`` + SiLU, same soft
log-variance bounds, same loss), stepped in a Python loop, one network at a time (forward,
backward, optimiser step each). Both start from the same weights and see the same batches;
after the timed steps their parameters are compared (they must agree to float32 rounding),
and the ratio of wall times is measured in this one run, timing rounds interleaved.

Scenarios:
* ``mopo_halfcheetah``: N = 7 members, 4×200, in 23 → out 18, batch 256, Adam (MOPO).
* ``mopo_pendulum``: N = 3, 2×64, in 4 → out 4, batch 256, Adam.
* ``dp_copies``: C = 30 copies × N = 3 members, 2×64, in 4 → out 4, a batch of 16 per copy
  (PRIMORL's per-trajectory local SGD step), plain SGD η = 1e-3. Two baselines: a loop over
  all C·N = 90 member networks, and a loop over the 30 copies with each copy a batched
  3-member ensemble (what a loop over trajectories would do).

    python benchmarks/bench_ensemble.py [--quick] [--steps N] [--out PATH]
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

import torch
import torch.nn.functional as F
from torch import nn

from privrl.nn.ensemble import GaussianEnsemble

RESULTS = Path(__file__).parent / "results" / "bench_ensemble.json"


class MemberMLP(nn.Module):
    """One Gaussian MLP, written the ordinary way (the baseline's unit of work)."""

    def __init__(self, ens: GaussianEnsemble, c: int, n: int) -> None:
        super().__init__()
        p = {k: v.detach()[c, n] for k, v in ens.parameters_dict().items()}
        self.layers = nn.ModuleList()
        for i in range(ens.n_layers):
            w = p[f"w{i}"]
            lin = nn.Linear(w.shape[0], w.shape[1])
            with torch.no_grad():
                lin.weight.copy_(w.T)
                lin.bias.copy_(p[f"b{i}"][0])
            self.layers.append(lin)
        self.max_logvar = nn.Parameter(p["max_logvar"].clone())
        self.min_logvar = nn.Parameter(p["min_logvar"].clone())
        self.decays, self.coef, self.out_dim = ens.weight_decays, ens.logvar_bound_coef, ens.out_dim

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = x
        for i, lin in enumerate(self.layers):
            h = lin(h)
            if i < len(self.layers) - 1:
                h = F.silu(h)
        mean, lv = h[:, : self.out_dim], h[:, self.out_dim :]
        lv = self.max_logvar - F.softplus(self.max_logvar - lv)
        lv = self.min_logvar + F.softplus(lv - self.min_logvar)
        nll = ((mean - y).square() * torch.exp(-lv) + lv).mean()
        bound = self.coef * (self.max_logvar.sum() - self.min_logvar.sum())
        wd = sum(
            d * 0.5 * lin.weight.square().sum()
            for d, lin in zip(self.decays, self.layers, strict=True)
        )
        return nll + bound + wd


def _optimizer(params: list[torch.Tensor], kind: str, lr: float) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, foreach=True)
    return torch.optim.SGD(params, lr=lr, foreach=True)


def _time_interleaved(
    fns: dict[str, Callable[[int], None]], steps: int, rounds: int
) -> dict[str, float]:
    """Median seconds per step of each function, timing rounds interleaved (drift-robust)."""
    per: dict[str, list[float]] = {k: [] for k in fns}
    k = 0
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            for i in range(steps):
                fn(k + i)
            per[name].append((time.perf_counter() - t) / steps)
        k += steps
    return {name: statistics.median(v) for name, v in per.items()}


def scenario(
    name: str,
    *,
    copies: int,
    members: int,
    hidden: tuple[int, ...],
    in_dim: int,
    out_dim: int,
    batch: int,
    opt: str,
    lr: float,
    steps: int,
    rounds: int,
    copy_loop: bool,
    seed: int = 0,
) -> dict:
    g = torch.Generator().manual_seed(seed)
    ens = GaussianEnsemble(in_dim, out_dim, hidden, members, copies, seed=seed)
    with torch.no_grad():  # copies of a DP step start equal; perturb so a mix-up would show
        for p in ens.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))
    n_batches = 64
    # per-copy batches [C, 1, B, in] (shared by the members of a copy), cycled
    xs = torch.randn(n_batches, copies, 1, batch, in_dim, generator=g)
    ys = torch.randn(n_batches, copies, 1, batch, out_dim, generator=g)

    nets = [MemberMLP(ens, c, n) for c in range(copies) for n in range(members)]
    net_opts = [_optimizer(list(m.parameters()), opt, lr) for m in nets]
    per_copy = [ens.select_copies(c) for c in range(copies)] if copy_loop else []
    copy_opts = [_optimizer(list(e.parameters()), opt, lr) for e in per_copy]
    ens_opt = _optimizer(list(ens.parameters()), opt, lr)

    def batched(i: int) -> None:
        loss = ens.loss(xs[i % n_batches], ys[i % n_batches]).sum()
        ens_opt.zero_grad(set_to_none=True)
        loss.backward()
        ens_opt.step()

    def loop_members(i: int) -> None:
        x, y = xs[i % n_batches], ys[i % n_batches]
        for j, (m, o) in enumerate(zip(nets, net_opts, strict=True)):
            c = j // members
            loss = m.loss(x[c, 0], y[c, 0])
            o.zero_grad(set_to_none=True)
            loss.backward()
            o.step()

    def loop_copies(i: int) -> None:
        x, y = xs[i % n_batches], ys[i % n_batches]
        for c, (e, o) in enumerate(zip(per_copy, copy_opts, strict=True)):
            loss = e.loss(x[c], y[c]).sum()
            o.zero_grad(set_to_none=True)
            loss.backward()
            o.step()

    fns: dict[str, Callable[[int], None]] = {"batched": batched, "loop_members": loop_members}
    if copy_loop:
        fns["loop_copies"] = loop_copies
    for fn in fns.values():  # warm-up (and the parameters keep moving in lock-step)
        for i in range(3):
            fn(i)
    times = _time_interleaved(fns, steps, rounds)

    # same weights, same batches, same number of steps ⇒ same parameters
    diff = 0.0
    for j, m in enumerate(nets):
        c, n = divmod(j, members)
        for i, lin in enumerate(m.layers):
            diff = max(
                diff,
                float(
                    (lin.weight.detach().T - ens.parameters_dict()[f"w{i}"][c, n].detach())
                    .abs()
                    .max()
                ),
            )
    for c, e in enumerate(per_copy):
        for k, v in e.parameters_dict().items():
            diff = max(
                diff, float((v.detach()[0] - ens.parameters_dict()[k][c].detach()).abs().max())
            )
    out = {
        "copies": copies,
        "members": members,
        "networks": copies * members,
        "hidden": list(hidden),
        "in_dim": in_dim,
        "out_dim": out_dim,
        "batch_per_network": batch,
        "optimizer": opt,
        "steps_timed": steps * rounds,
        "batched_ms_per_step": times["batched"] * 1e3,
        "loop_members_ms_per_step": times["loop_members"] * 1e3,
        "speedup_vs_loop_members": times["loop_members"] / times["batched"],
        "max_abs_param_diff_after_training": diff,
    }
    if copy_loop:
        out["loop_copies_ms_per_step"] = times["loop_copies"] * 1e3
        out["speedup_vs_loop_copies"] = times["loop_copies"] / times["batched"]
    print(name, json.dumps(out))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="few steps (a smoke run)")
    ap.add_argument("--steps", type=int, default=20, help="steps per timing round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    steps, rounds = (3, 2) if args.quick else (args.steps, args.rounds)
    common = {"steps": steps, "rounds": rounds}
    results = {
        "mopo_halfcheetah": scenario(
            "mopo_halfcheetah",
            copies=1,
            members=7,
            hidden=(200,) * 4,
            in_dim=23,
            out_dim=18,
            batch=256,
            opt="adam",
            lr=1e-3,
            copy_loop=False,
            **common,
        ),
        "mopo_pendulum": scenario(
            "mopo_pendulum",
            copies=1,
            members=3,
            hidden=(64, 64),
            in_dim=4,
            out_dim=4,
            batch=256,
            opt="adam",
            lr=1e-3,
            copy_loop=False,
            **common,
        ),
        "dp_copies": scenario(
            "dp_copies",
            copies=30,
            members=3,
            hidden=(64, 64),
            in_dim=4,
            out_dim=4,
            batch=16,
            opt="sgd",
            lr=1e-3,
            copy_loop=True,
            **common,
        ),
    }
    out = {
        "benchmark": "ensemble",
        "quick": bool(args.quick),
        "torch_threads": torch.get_num_threads(),
        "scenarios": results,
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
