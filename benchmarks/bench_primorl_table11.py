"""What one run of PRIMORL's Table 11 (HalfCheetah) costs on this machine, measured.

Three numbers, each on one thread (``reproductions.primorl.table11`` chooses its full
scale from them; its report states them):

* one DP-FedAvg round at HalfCheetah sizes (7 members × 4×200, in 23 → out 18, per-layer
  clipping; q·K = 1e-2 × 2000 = 20 sampled trajectories of 1000 steps, 63 local steps each),
  timed interleaved with Pendulum's round (`bench_primorl_step.task_rounds`' setup; the ratio
  is robust to the machine's load, the seconds are not);
* one policy-stage epoch at HalfCheetah sizes (1000 SAC updates of 2×256, 50,000 model
  rollouts of 5 steps in the 7 × 4×200 ensemble, 10 evaluation episodes of 1000 steps):
  `privrl train primorl --variant no-privacy --steps 2 --epochs 2` on the quick recipe
  dataset (same model and simulator sizes; 2 rounds of a 20-trajectory set cost nothing), its
  ``policy_stage_seconds`` / 2;
* one MOPO dynamics epoch (2000 minibatches of 256 on the 7 × 4×200 ensemble) and one MOPO
  policy epoch: `privrl train mopo --model-epochs 2 --epochs 1` on the same data, (its
  ``seconds`` − ``policy_stage_seconds``) / 2 and ``policy_stage_seconds``.

    python benchmarks/bench_primorl_table11.py [--rounds N] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import bench_primorl_step as step

RESULTS = Path(__file__).parent / "results" / "bench_primorl_table11.json"


def dp_rounds(rounds: int) -> dict:
    """Seconds of one DP round, Pendulum and HalfCheetah, timed interleaved."""
    fns, facts = {}, {}
    for name in ("pendulum", "halfcheetah"):
        run = step.TASK_RUNS[name]
        sizes = {k: v for k, v in step.SCENARIOS[name].items() if k not in ("stacked", "length")}
        ens, start, clients, plan, _ = step._setup(
            **sizes,
            clients_n=run["clients_n"],
            length=run["length"],
            sampling_rate=run["sampling_rate"],
            n_units=run["n_units"],
            seed=0,
        )
        fns[name] = step._dp_round(ens, start, clients, plan, None)
        facts[name] = {"sampled_clients": run["clients_n"], "transitions": run["length"]}
    for fn in fns.values():
        fn(0)
    times = step._time_interleaved(fns, rounds)
    for name, f in facts.items():
        f["seconds_per_round"] = times[name]
    facts["halfcheetah"]["ratio_to_pendulum"] = times["halfcheetah"] / times["pendulum"]
    return facts


def _train(system: str, data: Path, out: Path, *args: str) -> dict:
    cmd = [sys.executable, "-m", "privrl.cli.main", "train", system, "--data", str(data)]
    subprocess.run([*cmd, "--out", str(out), *args], check=True, capture_output=True)
    return json.loads((out / "metrics.json").read_text())


def stages() -> dict:
    """A policy-stage epoch (PRIMORL, MOPO) and a MOPO dynamics epoch at HalfCheetah sizes."""
    from reproductions.primorl.sweeps import recipe_dataset

    data = recipe_dataset("halfcheetah", True, "bench")
    with tempfile.TemporaryDirectory() as tmp:
        p = _train(
            "primorl",
            data,
            Path(tmp) / "primorl",
            *("--variant", "no-privacy", "--steps", "2", "--epochs", "2"),
        )
        m = _train("mopo", data, Path(tmp) / "mopo", "--model-epochs", "2", "--epochs", "1")
    return {
        "primorl_policy_epoch_seconds": p["policy_stage_seconds"] / 2,
        "mopo_policy_epoch_seconds": m["policy_stage_seconds"],
        "mopo_dynamics_epoch_seconds": (m["seconds"] - m["policy_stage_seconds"]) / 2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = list(os.getloadavg())
    t0 = time.perf_counter()
    results = {
        "benchmark": "primorl_table11",
        "torch_threads": 1,
        "rounds_timed": args.rounds,
        "load_average_at_start": load,
        "dp_round": dp_rounds(args.rounds),
        **stages(),
        "load_average_at_end": list(os.getloadavg()),
        "wall_seconds": time.perf_counter() - t0,
        "machine": {"cpu_count": os.cpu_count(), "torch": torch.__version__},
    }
    print(json.dumps(results, indent=1), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
