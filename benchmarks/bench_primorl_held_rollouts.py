"""PRIMORL's policy stage on one released model: free vs held model rollouts, side by side.

Held rollouts (``PolicyStageConfig.bounded_rollouts``) clip every model step to the simulator's
public observation box and per-step reward range; free rollouts do not. Both stages run at the
same time (two processes, one thread each) from the same released model, seed and settings, so
the comparison does not depend on the shared machine's load. Post-processing of a release: no
data is read and no privacy is spent.

    python benchmarks/bench_primorl_held_rollouts.py --model RUN/model.pt [--epochs 15]
        [--starts initial] [--seed 0] [--out benchmarks/results/primorl_held_rollouts.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def stage(model: str, starts: str, epochs: int, seed: int, held: bool) -> dict:
    """One policy stage (run in a child process); its curve and final return."""
    import torch

    from privrl.envs.control import control_task
    from privrl.primorl.pessimism import PenalizedModel
    from privrl.primorl.policy_stage import make_start_states, run_policy_stage
    from privrl.primorl.primorl import PrimorlConfig, load_released_model

    torch.set_num_threads(1)
    released = load_released_model(model)
    config = PrimorlConfig(task=released.task, epochs=epochs, starts=starts)
    stage_config = dataclasses.replace(config.stage_config(), bounded_rollouts=held)
    task = control_task(released.task)
    sampler = make_start_states(
        starts,
        task,
        pool_capacity=stage_config.model_buffer_capacity,
        init_fraction=config.init_fraction,
        public_states=released.public_states,
    )
    pmodel = PenalizedModel(released.model, config.penalty, config.lam, config.mpd_include_reward)
    t0 = time.perf_counter()
    result = run_policy_stage(pmodel, sampler, task, stage_config, seed=seed, require_public=True)
    keys = ("epoch", "return_mean", "model_reward_mean", "penalty_mean")
    return {
        "held": held,
        "return_mean": result.return_mean,
        "return_std": result.return_std,
        "curve": [{k: row[k] for k in keys} for row in result.curve],
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model.pt of a PRIMORL run")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--starts", default="initial", choices=("initial", "public-split"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/primorl_held_rollouts.json")
    parser.add_argument("--child", choices=("held", "free"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        res = stage(args.model, args.starts, args.epochs, args.seed, args.child == "held")
        print(json.dumps(res))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    base = [
        sys.executable,
        __file__,
        "--model",
        args.model,
        "--epochs",
        str(args.epochs),
        "--starts",
        args.starts,
        "--seed",
        str(args.seed),
    ]
    procs = {
        mode: subprocess.Popen([*base, "--child", mode], stdout=subprocess.PIPE, env=env, text=True)
        for mode in ("held", "free")
    }
    results = {}
    for mode, proc in procs.items():
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"{mode} stage failed (exit {proc.returncode})")
        results[mode] = json.loads(out.strip().splitlines()[-1])
    summary = {
        "model": args.model,
        "epochs": args.epochs,
        "starts": args.starts,
        "seed": args.seed,
        "load_average": os.getloadavg(),
        "held": results["held"],
        "free": results["free"],
        "return_ratio_held_over_free": results["held"]["return_mean"]
        / results["free"]["return_mean"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    for mode in ("held", "free"):
        r = results[mode]
        print(
            f"{mode}: return {r['return_mean']:.1f} ± {r['return_std']:.1f} ({r['seconds']:.0f} s)"
        )
    print(f"held / free: {summary['return_ratio_held_over_free']:.2f}; wrote {args.out}")


if __name__ == "__main__":
    main()
