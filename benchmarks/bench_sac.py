"""SAC update speed (batch 256, 2×256 MLPs, cartpole dimensions 5 → 1) and where it goes.

Reports, all measured in this one run:

* SAC updates/s with 1 and 2 torch threads (and TD3 / DDPG at 1 thread, for the recipes);
* the cost split of one SAC update: critic step, actor step, α step, target update;
* ratios new / baseline on the same inputs, measured interleaved (A, B, A, B, … rounds, median
  per round) so that load drift on a shared machine hits both sides alike:
    - twin critics as one batched network (``VectorizedQ``, ``baddbmm``) vs two ``nn.Sequential``
      critics (whole SAC update);
    - fused Polyak update (``torch._foreach_lerp_``) vs a per-tensor loop;
    - hand-written scalar Adam for log α vs a ``torch.optim.Adam`` step on a 0-d tensor;
    - replay minibatch as one ``index_select`` on a packed float32 tensor vs a numpy buffer
      gathered per field and converted with ``torch.as_tensor``.

    python benchmarks/bench_sac.py [--updates 300] [--rounds 5]
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
from torch import nn

from privrl.rl import sac as sac_module
from privrl.rl.mlp import mlp, polyak_update
from privrl.rl.replay import ReplayBuffer
from privrl.rl.sac import SAC
from privrl.rl.td3 import TD3, TD3Config

RESULTS = Path(__file__).parent / "results" / "bench_sac.json"
OBS, ACT, BATCH = 5, 1, 256


def batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(BATCH, OBS, generator=g),
        "act": torch.rand(BATCH, ACT, generator=g) * 2 - 1,
        "rew": torch.rand(BATCH, generator=g),
        "next_obs": torch.randn(BATCH, OBS, generator=g),
        "done": torch.zeros(BATCH),
    }


def per_call(fn: Callable[[], object], n: int, warmup: int = 10) -> float:
    """Seconds per call of ``fn`` (mean over ``n`` calls after ``warmup``)."""
    for _ in range(warmup):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def interleaved(a: Callable[[], object], b: Callable[[], object], n: int, rounds: int):
    """Median seconds per call of ``a`` and ``b`` over alternating rounds, and b / a."""
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(per_call(a, n, warmup=3))
        tb.append(per_call(b, n, warmup=3))
    ma, mb = statistics.median(ta), statistics.median(tb)
    return ma, mb, mb / ma


class ListQ(nn.Module):
    """Baseline critic: ``n`` separate ``nn.Sequential`` MLPs (same sizes, same interface)."""

    def __init__(self, obs_dim, act_dim, hidden=(256, 256), n_critics=2, generator=None):
        super().__init__()
        self.n_critics = n_critics
        self.qs = nn.ModuleList([mlp([obs_dim + act_dim, *hidden, 1]) for _ in range(n_critics)])

    def forward(self, obs, act, detach=False, only=None):
        x = torch.cat([obs, act], dim=-1)
        out = []
        for i, q in enumerate(self.qs):
            if only is not None and i != only:
                continue
            h = x
            for layer in q:
                if isinstance(layer, nn.Linear):
                    w, b = layer.weight, layer.bias
                    if detach:
                        w, b = w.detach(), b.detach()
                    h = nn.functional.linear(h, w, b)
                else:
                    h = torch.relu(h)
            out.append(h.squeeze(-1))
        return torch.stack(out)


def sac_agent(list_critics: bool = False) -> SAC:
    original = sac_module.VectorizedQ
    if list_critics:
        sac_module.VectorizedQ = ListQ  # type: ignore[misc]
    try:
        return SAC(OBS, ACT, [-1.0], [1.0], seed=0)
    finally:
        sac_module.VectorizedQ = original  # type: ignore[misc]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--updates", type=int, default=300, help="updates per timing")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds for ratios")
    args = ap.parse_args()
    n, rounds = args.updates, args.rounds
    torch.set_num_threads(1)
    b = batch()
    out: dict[str, object] = {
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "loadavg_start": os.getloadavg(),
        },
        "setup": {"obs_dim": OBS, "act_dim": ACT, "batch": BATCH, "hidden": [256, 256]},
    }

    # ---- throughput
    agent = sac_agent()
    thr = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        thr[f"sac_{threads}_thread"] = 1.0 / per_call(lambda: agent.update(b), n)
    torch.set_num_threads(1)
    td3 = TD3(OBS, ACT, [-1.0], [1.0], seed=0)
    ddpg = TD3(OBS, ACT, [-1.0], [1.0], TD3Config.ddpg(), seed=0)
    thr["td3_1_thread"] = 1.0 / per_call(lambda: td3.update(b), n)
    thr["ddpg_1_thread"] = 1.0 / per_call(lambda: ddpg.update(b), n)
    out["updates_per_s"] = {k: round(v, 1) for k, v in thr.items()}
    out["speedup_2_threads"] = round(thr["sac_2_thread"] / thr["sac_1_thread"], 3)

    # ---- cost split of one SAC update (1 thread)
    alpha = agent.log_alpha.exp()
    parts = {
        "critic": per_call(lambda: agent._critic_step(b, alpha), n),
        "actor": per_call(lambda: agent._actor_step(b["obs"], alpha), n),
        "alpha": per_call(lambda: agent._alpha_step(0.1), n),
        "target": per_call(
            lambda: polyak_update(agent._q_targ_params, agent._q_params, agent.config.tau), n
        ),
    }
    total = sum(parts.values())
    out["sac_split_ms"] = {k: round(v * 1e3, 4) for k, v in parts.items()}
    out["sac_split_share"] = {k: round(v / total, 4) for k, v in parts.items()}

    # ---- ratios, interleaved
    ratios = {}
    vec, lst = sac_agent(False), sac_agent(True)
    ta, tb, r = interleaved(lambda: vec.update(b), lambda: lst.update(b), n // 2, rounds)
    ratios["twin_q_vectorized_vs_two_mlps"] = {
        "new_ms": ta * 1e3,
        "baseline_ms": tb * 1e3,
        "speedup": r,
    }

    targ, src = agent._q_targ_params, agent._q_params

    def loop_polyak() -> None:
        with torch.no_grad():
            for p_t, p in zip(targ, src, strict=True):
                p_t.mul_(1 - 0.005).add_(p, alpha=0.005)

    ta, tb, r = interleaved(lambda: polyak_update(targ, src, 0.005), loop_polyak, 2000, rounds)
    ratios["polyak_foreach_lerp_vs_loop"] = {
        "new_ms": ta * 1e3,
        "baseline_ms": tb * 1e3,
        "speedup": r,
    }

    log_alpha = torch.tensor(0.0, requires_grad=True)
    opt = torch.optim.Adam([log_alpha], lr=3e-4)
    logp = torch.randn(BATCH)

    def torch_alpha() -> None:
        loss = -(log_alpha * (logp.mean() - 1.0))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def hand_alpha() -> None:
        agent._alpha_step(-(float(logp.mean()) - 1.0))

    ta, tb, r = interleaved(hand_alpha, torch_alpha, 2000, rounds)
    ratios["alpha_hand_adam_vs_torch_adam"] = {
        "new_ms": ta * 1e3,
        "baseline_ms": tb * 1e3,
        "speedup": r,
    }

    rng = np.random.default_rng(0)
    cap = 100_000
    buf = ReplayBuffer(OBS, ACT, cap, seed=0)
    fields = {
        "obs": rng.normal(size=(cap, OBS)).astype(np.float32),
        "act": rng.uniform(-1, 1, (cap, ACT)).astype(np.float32),
        "rew": rng.normal(size=cap).astype(np.float32),
        "next_obs": rng.normal(size=(cap, OBS)).astype(np.float32),
        "done": np.zeros(cap, np.float32),
    }
    buf.add_batch(fields["obs"], fields["act"], fields["rew"], fields["next_obs"], fields["done"])

    def numpy_sample() -> dict[str, torch.Tensor]:
        idx = rng.integers(0, cap, BATCH)
        return {k: torch.as_tensor(v[idx]) for k, v in fields.items()}

    ta, tb, r = interleaved(lambda: buf.sample(BATCH), numpy_sample, 2000, rounds)
    ratios["replay_packed_index_select_vs_numpy_per_field"] = {
        "new_ms": ta * 1e3,
        "baseline_ms": tb * 1e3,
        "speedup": r,
    }
    out["ratios"] = {k: {kk: round(vv, 4) for kk, vv in v.items()} for k, v in ratios.items()}
    out["machine"]["loadavg_end"] = os.getloadavg()  # type: ignore[index]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
