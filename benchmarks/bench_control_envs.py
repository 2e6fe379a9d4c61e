"""Benchmark: environment steps per second of the Gymnasium control tasks (one env via
`gym.make`) against `BatchedControlEnv` (n episodes in lockstep), same actions, one run.

The batched simulators are the ones the PRIMORL recipes use to collect 30,000-trajectory
datasets and that MOPO uses for evaluation; they are tested to match the Gymnasium envs exactly
(tests/envs/test_batched.py). The ratio batched/gym is the speed-up.

Usage: python benchmarks/bench_control_envs.py [--seconds S] [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np

from privrl.envs import control
from privrl.envs.batched import make_batched


def steps_per_second(step_block: Callable[[], int], seconds: float) -> float:
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        steps += step_block()
    return steps / (time.perf_counter() - t0)


def measure(name: str, sizes: tuple[int, ...], seconds: float, seed: int = 0) -> dict:
    task = control.CONTROL_TASKS[name]
    rng = np.random.default_rng(seed)
    env = gym.make(task.env_id)
    env.reset(seed=seed)
    block = 50
    actions = rng.uniform(task.action_low, task.action_high, (block, task.act_dim))

    def gym_block() -> int:
        env.reset()
        for a in actions:
            env.step(a)
        return block

    result = {"gym_steps_per_s": steps_per_second(gym_block, seconds)}
    for n in sizes:
        batched = make_batched(name, n, seed=seed)
        acts = rng.uniform(task.action_low, task.action_high, (block, n, task.act_dim))

        def batched_block(batched=batched, acts=acts, n=n) -> int:
            batched.reset()
            for a in acts:
                batched.step(a)
            return block * n

        rate = steps_per_second(batched_block, seconds)
        result[f"batched_{n}_steps_per_s"] = rate
        result[f"batched_{n}_speedup"] = rate / result["gym_steps_per_s"]
    env.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    parser.add_argument("--quick", action="store_true", help="0.5 s per measurement")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "bench_control_envs.json"
    )
    args = parser.parse_args()
    seconds = 0.5 if args.quick else args.seconds
    control.register_envs()
    results = {}
    for name in control.CONTROL_TASKS:
        results[name] = measure(name, (64, 256), seconds)
        row = ", ".join(f"{k} {v:,.1f}" for k, v in results[name].items())
        print(f"{name}: {row}", flush=True)
    payload = {
        "benchmark": "control_envs",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "seconds_per_measurement": seconds,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
