"""Which private trainer makes PRIMORL's HalfCheetah dynamics model learn within a CPU budget.

For each named configuration (`CONFIGS`) the private dynamics ensemble is trained on the
HalfCheetah recipe dataset (``privrl data collect --recipe primorl-halfcheetah``) until T_max
rounds or a core-time budget per configuration, recording the public-split MSE (mean over
members) against rounds and core-seconds, and ε for the rounds run. One JSON record per
configuration in ``results/primorl_halfcheetah_dynamics/`` and a plot of MSE vs core-seconds
with MOPO's MSE as a line. Resumable: a small checkpoint per configuration (θ, the server
optimizer's state, the early-stopping record) continues in the next sitting; it never holds
the client-sampling or noise generator's state — a resumed run draws fresh secure generators,
so every round's sample and noise stay secret and independent. Records and checkpoints are
checked against the dataset's ``content_sha256`` before resuming.

    python benchmarks/primorl_halfcheetah_dynamics.py [--budget-core-hours 4] [--only NAME]
    python benchmarks/primorl_halfcheetah_dynamics.py --quick      # the quick recipe (tests)
    python benchmarks/primorl_halfcheetah_dynamics.py --screen     # public values only, no data

``--screen`` reads no data and trains nothing: from public values alone (ε, δ, q, T, C, the
declared K and the ensemble's size d) it calibrates z for each (q, T) of a grid and reports the
noise-to-signal bound of one round, z·√d/(qK) (the norm of the noise on the averaged update,
zC√d/(qK), over the largest norm C that the averaged clipped updates can have), beside the same
bound for the Table 1 rows of Pendulum and Balance, whose outcome is measured. It picks which
configurations are worth core-hours before any are spent.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privrl.data.io import load_hdf5, read_header
from privrl.data.public import declared_public, split_declared
from privrl.primorl import primorl as P
from privrl.primorl.dp_fedavg import EnsembleLayout, train_dp_fedavg
from privrl.primorl.dynamics import DynamicsModel, dynamics_config, holdout_mse
from privrl.privacy.noise import NoiseSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).parent / "results" / "primorl_halfcheetah_dynamics"
# MOPO's public-split MSE on the dataset Table 11 ran on (docs/reproductions/primorl-table11);
# `--mopo` measures it on the dataset at hand (mopo.json), which the plot and the verdict use
MOPO_MSE = 0.23
MOPO_MODEL_EPOCHS = 20  # Table 11's MOPO: 20 dynamics epochs of 2000 minibatches
ADAM = {"server_optimizer": "adam", "server_momentum": 0.9, "server_lr": 1e-2}
# name → PrimorlConfig settings beside the task preset and the target ε
CONFIGS: dict[str, dict[str, Any]] = {
    "paper-dp-fedavg": {},
    "dp-fedavg-momentum": {"server_momentum": 0.9},
    "dp-fedavg-adam": ADAM,
    "dp-fedsgd-adam": {**ADAM, "private_trainer": "dp-fedsgd"},
    "dp-fedavg-adam-q0.05": {**ADAM, "sampling_rate": 0.05},
    "dp-fedavg-adam-long-rounds": {**ADAM, "local_epochs": 4, "steps_divisor": 4},
    # from the noise screen (--screen): a Balance-LOW-sized noise-to-signal bound at ε = 10
    # needs q ≥ 0.25 and T ≈ 50 (2.2 core-hours with local Adam, which trains this ensemble)
    "local-adam-q0.25-T50": {"local_optimizer": "adam", "sampling_rate": 0.25, "rounds": 50},
    # the screen's cheaper candidate: a Balance-HIGH-sized bound (4.1) in 0.9 core-hours
    "local-adam-q0.1-T50": {"local_optimizer": "adam", "sampling_rate": 0.1, "rounds": 50},
    # a diagnostic, not private (ε = ∞): the same rounds with z = 0 (clipping kept) separate
    # what the noise costs from what 50 rounds of this trainer can reach at all
    "no-noise-q0.1-T50": {
        "local_optimizer": "adam",
        "sampling_rate": 0.1,
        "rounds": 50,
        "noise_multiplier": 0.0,
    },
    # a smaller ensemble (7 members of 2 × 128, the cartpole presets' width, against the
    # paper's 4 × 200): d falls 5.5-fold, so the bound z·√d/(qK) falls 2.3-fold at the same
    # q and T (1.1 at q = 0.25, T = 50: Pendulum LOW's), and a round costs less
    "small-local-adam-q0.25-T50": {
        "local_optimizer": "adam",
        "sampling_rate": 0.25,
        "rounds": 50,
        "hidden": [128, 128],
    },
    "small-no-noise-q0.25-T50": {
        "local_optimizer": "adam",
        "sampling_rate": 0.25,
        "rounds": 50,
        "noise_multiplier": 0.0,
        "hidden": [128, 128],
    },
    # the same with the released model the moving average of the server's iterates (γ = 0.9,
    # about the last 10 rounds): post-processing that averages the rounds' noise, where the
    # small ensemble's private MSE stops falling (about round 30)
    "small-ema0.9-q0.25-T50": {
        "local_optimizer": "adam",
        "sampling_rate": 0.25,
        "rounds": 50,
        "hidden": [128, 128],
        "server_ema": 0.9,
    },
    # smaller still (7 members of 2 × 64, d = 56,504): whether the floor keeps falling with d
    # or the width starts to limit the model
    "tiny-ema0.9-q0.25-T50": {
        "local_optimizer": "adam",
        "sampling_rate": 0.25,
        "rounds": 50,
        "hidden": [64, 64],
        "server_ema": 0.9,
    },
    "local-adam-fedadam-q0.25-T50": {
        **ADAM,
        "local_optimizer": "adam",
        "sampling_rate": 0.25,
        "rounds": 50,
    },
}
_SECRET = ("sample_rng", "noise_gen")  # never written: the secret generators' states


# the (q, T) grid of --screen, and the Table 1 rows it is compared with (task, row, z; their
# q, K and T are the task preset's)
SCREEN_Q = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0)
SCREEN_T = (50, 100, 250, 1000, 10_000)
SCREEN_REFERENCE = (
    ("pendulum", "LOW"),
    ("pendulum", "HIGH"),
    ("balance", "LOW"),
    ("balance", "HIGH"),
)
# one trajectory's local training at HalfCheetah sizes, measured for the Table 11 report
# (6.9 s per round of qK = 20 trajectories, local Adam, one thread): the screen's cost unit
SECONDS_PER_TRAJECTORY = 6.9 / 20


class BudgetSpent(Exception):
    """The configuration's core-time budget is spent (its checkpoint is saved)."""


def dataset_path(quick: bool) -> Path:
    from reproductions.primorl.sweeps import recipe_dataset

    return recipe_dataset("halfcheetah", quick, "primorl-table11")


def config_for(name: str, epsilon: float, quick: bool, steps: int | None) -> P.PrimorlConfig:
    kw = dict(CONFIGS[name])
    divisor = kw.pop("steps_divisor", 1)
    rounds = kw.pop("rounds", None)  # the configuration's own T_max
    if "hidden" in kw:  # another architecture than the paper's (Table 8) ensemble
        kw["dynamics"] = dynamics_config("halfcheetah", hidden=tuple(kw.pop("hidden")))
    t_max = steps or (4 if quick else rounds or P.preset_of("halfcheetah").max_rounds or 250)
    return P.PrimorlConfig(
        task="halfcheetah",
        epsilon=None if "noise_multiplier" in kw else epsilon,
        steps=max(1, t_max // divisor),
        eval_every=1 if quick else 5,
        patience=10**6,  # the curve, not early stopping, is measured
        **kw,
    )


def build_dir(sha: str, quick: bool) -> Path:
    """The records of one dataset build (named by its ``content_sha256``): a recipe rebuilt on
    another CPU vendor's machine is another dataset (docs/primorl-data.md), whose
    configurations and MOPO reference are measured beside, never mixed with, this one's."""
    return RESULTS / f"{'quick' if quick else 'full'}-{sha[:12]}"


def splits(data: Path) -> tuple[Any, Any]:
    """The dataset's private episodes and its declared public split."""
    dataset = load_hdf5(data)
    return split_declared(dataset, declared_public(dataset.metadata, dataset.n_episodes))


def run_config(name: str, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Train one configuration until T_max or its budget; returns (and writes) its record."""
    header = read_header(data)
    sha = header.content_sha256
    out = build_dir(sha, args.quick) / f"{name}.json"
    ckpt = build_dir(sha, args.quick) / "checkpoints" / f"{name}.pt"
    record: dict[str, Any] = {"configuration": name, "dataset_sha256": sha, "curve": []}
    resume = None
    if out.exists() and ckpt.exists():
        old = json.loads(out.read_text())
        if old.get("dataset_sha256") != sha:
            raise SystemExit(f"{out} was measured on another dataset; move it away")
        record, state = old, torch.load(ckpt, map_location="cpu", weights_only=False)
        if state.get("dataset_sha256") != sha:
            raise SystemExit(f"{ckpt} belongs to another dataset; move it away")
        fresh = NoiseSource.secure()  # new secret streams: nothing secret was stored
        state["sample_rng"] = fresh.generator("dp-fedavg client sampling").bit_generator.state
        state["noise_gen"] = fresh.generator("dp-fedavg noise").bit_generator.state
        resume = state
    if record.get("finished"):
        return record
    private, public = splits(data)
    config = config_for(name, args.epsilon, args.quick, args.steps)
    plan = P.plan(config, private.metadata)
    task = P.task_of(config, private.metadata)
    assert config.for_task(task).dynamics is not None
    model = DynamicsModel(task.obs_dim, task.act_dim, config.for_task(task).dynamics, seed=0)
    budget = args.budget_core_hours * 3600.0
    spent0 = float(record.get("core_seconds", 0.0))
    t0 = time.process_time()

    def spent() -> float:
        return spent0 + time.process_time() - t0

    def progress(r: dict[str, Any]) -> None:
        mse = float(np.mean(r["holdout_mse"]))
        record["curve"].append({"round": r["round"], "core_seconds": spent(), "mse": mse})

    def checkpoint(state: dict[str, Any]) -> None:
        safe = {k: v for k, v in state.items() if k not in _SECRET}
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        torch.save({**safe, "dataset_sha256": sha}, ckpt.with_suffix(".tmp"))
        ckpt.with_suffix(".tmp").replace(ckpt)
        _write(out, record, plan, int(state["rounds"]), spent())
        if spent() >= budget and int(state["rounds"]) < plan.T_max:
            raise BudgetSpent

    layout = EnsembleLayout(model.ensemble)
    record.update(settings=CONFIGS[name], T_max=plan.T_max, z=plan.z, q=plan.q, C=plan.C)
    record.update(d=layout.members * layout.size, noise_std=plan.noise_std)
    try:
        res = train_dp_fedavg(
            model,
            private,
            plan,
            public_split=public.transitions(),
            seed=0,
            progress=progress,
            resume=resume,
            on_checkpoint=checkpoint,
            checkpoint_every=config.eval_every,
        )
        record["finished"] = True
        record["best_mse_elites"] = float(np.mean(res.best_holdout_mse[list(res.elites)]))
        _write(out, record, plan, res.rounds, spent())
    except BudgetSpent:
        pass
    return record


def run_mopo(data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """MOPO's non-private ensemble (Table 11's: `MOPO_MODEL_EPOCHS` epochs) trained on the
    private split, its MSE on the declared public split after each epoch: the reference the
    private configurations are measured against, on the same dataset and by the same measure.
    Writes ``mopo.json``; a record of the same dataset is returned as it is."""
    from privrl.primorl.dynamics import train_dynamics
    from privrl.primorl.mopo import MOPOConfig

    sha = read_header(data).content_sha256
    out = build_dir(sha, args.quick) / "mopo.json"
    if out.exists() and json.loads(out.read_text()).get("dataset_sha256") == sha:
        return json.loads(out.read_text())
    private, public = splits(data)
    epochs = 1 if args.quick else MOPO_MODEL_EPOCHS
    task = P.task_of(P.PrimorlConfig(task="halfcheetah"), private.metadata)
    dyn = MOPOConfig(task="halfcheetah", model_epochs=epochs).mopo_config(task).dynamics
    assert dyn is not None
    if args.quick:  # a smoke test: one short epoch
        dyn = dyn.replace(steps_per_epoch=20)
    record: dict[str, Any] = {"configuration": "mopo", "dataset_sha256": sha, "curve": []}
    t0 = time.process_time()

    def progress(r: dict[str, Any]) -> None:
        mse = float(np.mean(r["holdout_mse"]))
        point = {"epoch": r["epoch"], "core_seconds": time.process_time() - t0, "mse": mse}
        record["curve"].append(point)

    model = DynamicsModel(task.obs_dim, task.act_dim, dyn, seed=0)
    train_tr = private.transitions()
    res = train_dynamics(
        model,
        train_tr,
        public.transitions(),
        dyn,
        seed=0,
        progress=progress,
        fit_normalizer_on=train_tr,
        normalizer_source="training episodes (MOPO, non-private)",
    )
    record.update(
        epochs=res.epochs,
        core_seconds=time.process_time() - t0,
        best_mse=float(np.mean(res.best_holdout_mse)),
        best_mse_elites=float(np.mean(res.best_holdout_mse[list(res.elites)])),
        finished=True,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    return record


def run_references(data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """What "not learned" looks like on the declared public split (public data only): the MSE
    of the freshly initialised ensemble (seed 0, the public-split input normaliser, as every
    configuration starts) for each architecture measured, and of predicting the public split's
    own mean target. Writes ``references.json``."""
    from privrl.nn.normalizer import Normalizer

    sha = read_header(data).content_sha256
    out = build_dir(sha, args.quick) / "references.json"
    if out.exists() and json.loads(out.read_text()).get("dataset_sha256") == sha:
        return json.loads(out.read_text())
    _, public = splits(data)
    tr = public.transitions()
    n = len(tr.observations)
    x = np.concatenate([tr.observations.reshape(n, -1), tr.actions.reshape(n, -1)], axis=1)
    task = P.task_of(P.PrimorlConfig(task="halfcheetah"), public.metadata)
    record: dict[str, Any] = {"dataset_sha256": sha, "initial_mse": {}}
    hiddens = {tuple(c["hidden"]) for c in CONFIGS.values() if "hidden" in c}
    for hidden in [dynamics_config("halfcheetah").hidden, *sorted(hiddens)]:
        dyn = dynamics_config("halfcheetah", hidden=hidden)
        model = DynamicsModel(task.obs_dim, task.act_dim, dyn, seed=0)
        model.input_normalizer = Normalizer.fit(x.astype(np.float64), source="public split")
        key = "x".join(str(h) for h in hidden)
        record["initial_mse"][key] = float(np.mean(holdout_mse(model, tr)))
    y = model.raw_targets(tr.observations, tr.rewards, tr.next_observations)
    record["mean_predictor_mse"] = float(((y - y.mean(dim=0)) ** 2).mean())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    return record


def _write(out: Path, record: dict[str, Any], plan: Any, rounds: int, seconds: float) -> None:
    eps = plan.epsilon(rounds)
    record.update(rounds=rounds, core_seconds=seconds, epsilon=eps if eps < math.inf else "inf")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")


def build_records(build: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The configurations' records of one dataset build, and its MOPO record (None if absent)."""
    records = [json.loads(f.read_text()) for f in sorted(build.glob("*.json"))]
    records = [r for r in records if "configuration" in r]  # not references.json
    mopo = next((r for r in records if r["configuration"] == "mopo"), None)
    return [r for r in records if r["configuration"] != "mopo"], mopo


def plot(build: Path) -> Path:
    """Public-split MSE against rounds and against core-seconds, for every configuration
    measured on this build, with MOPO's curve (by core-seconds) and its best MSE as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records, mopo = build_records(build)
    mopo_mse = MOPO_MSE if mopo is None else float(mopo["best_mse"])
    fig, (by_round, by_cost) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for r in records:
        c = r["curve"]
        label = f"{r['configuration']} (z = {r['z']:.3g}, q = {r['q']:g})"
        by_round.plot([p["round"] for p in c], [p["mse"] for p in c], marker=".", label=label)
        by_cost.plot([p["core_seconds"] / 3600 for p in c], [p["mse"] for p in c], marker=".")
    if mopo is not None:
        c = mopo["curve"]
        by_cost.plot(
            [p["core_seconds"] / 3600 for p in c], [p["mse"] for p in c], "k:", label="MOPO"
        )
        by_cost.legend(fontsize=7)
    refs = build / "references.json"
    initial = json.loads(refs.read_text())["initial_mse"] if refs.exists() else {}
    for ax in (by_round, by_cost):
        ax.axhline(mopo_mse, color="k", ls="--", lw=0.8)
        ax.axhline(2 * mopo_mse, color="grey", ls="--", lw=0.8)
        if initial:  # the architectures' initial MSEs agree to 0.1%: one line
            ax.axhline(max(initial.values()), color="tab:red", ls=":", lw=0.8)
    by_round.set(xlabel="DP-FedAvg rounds", ylabel="public-split MSE (mean over members)")
    by_round.set_yscale("log")
    by_cost.set(xlabel="core-hours (one thread)")
    by_round.legend(
        fontsize=7, title="dashed: MOPO, 2 × MOPO; dotted: initial model", title_fontsize=7
    )
    fig.suptitle(f"HalfCheetah private dynamics models at ε ≤ 10 (dataset {build.name})")
    fig.tight_layout()
    path = build / "mse_vs_core_seconds.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ensemble_size(task: str) -> int:
    """d, the parameters of the task's dynamics ensemble that DP-FedAvg noises (all members;
    the count privacy.json reports)."""
    from privrl.envs.control import CONTROL_TASKS

    spec = CONTROL_TASKS[task]
    return P._n_params(P.PrimorlConfig(task=task).for_task(spec), spec)


def declared_units(task: str) -> int:
    """K, the private trajectories of the task's recipe build: its episodes less the ones the
    recipe declares public (both fixed by the recipe and its seed, never counted from data)."""
    from privrl.runs.recipes.primorl import _public_episodes, recipe_spec

    spec = recipe_spec(task)
    return spec.n_episodes - len(_public_episodes(task, spec.n_episodes, 0))


def noise_to_signal(z: float, d: int, q: float, k: int) -> float:
    """z·√d/(qK): the noise norm on one round's averaged update over C, the largest norm the
    averaged clipped updates can reach (Σ_k ‖Δ_k‖ ≤ qK·C at the expected sample size)."""
    return z * d**0.5 / (q * k)


def screen(epsilon: float, delta: float) -> dict[str, Any]:
    """z and the noise-to-signal bound for each (q, T) of the grid on HalfCheetah at the target
    (ε, δ), and for the Table 1 reference rows at their own z. Public values only."""
    from privrl.privacy.accounting import calibrate_noise_multiplier

    rows = []
    d, k = ensemble_size("halfcheetah"), declared_units("halfcheetah")
    for q in SCREEN_Q:
        for t in SCREEN_T:
            z = calibrate_noise_multiplier(epsilon, delta, t, sampling_probability=q, backend="rdp")
            rows.append(
                {
                    "q": q,
                    "T": t,
                    "z": z,
                    "noise_to_signal": noise_to_signal(z, d, q, k),
                    "trajectory_passes": q * k * t,
                    "core_hours": q * k * t * SECONDS_PER_TRAJECTORY / 3600,
                }
            )
    reference = []
    for task, row in SCREEN_REFERENCE:
        pre = P.preset_of(task)
        z = pre.low if row == "LOW" else pre.high
        kr = declared_units(task)
        assert z is not None
        reference.append(
            {
                "task": task,
                "row": row,
                "z": z,
                "q": pre.sampling_rate,
                "T": pre.max_rounds,
                "K": kr,
                "d": ensemble_size(task),
                "noise_to_signal": noise_to_signal(z, ensemble_size(task), pre.sampling_rate, kr),
            }
        )
    return {
        "epsilon": epsilon,
        "delta": delta,
        "accountant": "rdp",
        "halfcheetah": {"d": d, "K": k, "C": P.preset_of("halfcheetah").clip_norm},
        "seconds_per_trajectory": SECONDS_PER_TRAJECTORY,
        "grid": rows,
        "reference": reference,
    }


def screen_table(result: dict[str, Any]) -> str:
    """The screen as a markdown table: rows q, columns T, cells z and z·√d/(qK)."""
    ts = sorted({r["T"] for r in result["grid"]})
    lines = ["| q | " + " | ".join(f"T = {t:,}" for t in ts) + " |", "|---|" + "---|" * len(ts)]
    for q in sorted({r["q"] for r in result["grid"]}):
        cells = {r["T"]: r for r in result["grid"] if r["q"] == q}
        lines.append(
            f"| {q:g} | "
            + " | ".join(
                f"z = {cells[t]['z']:.3g}: **{cells[t]['noise_to_signal']:.3g}** "
                f"({cells[t]['core_hours']:.2g} h)"
                for t in ts
            )
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-core-hours", type=float, default=4.0)
    ap.add_argument("--epsilon", type=float, default=10.0, help="target ε at T_max (≤ 10)")
    ap.add_argument("--steps", type=int, default=None, help="T_max (default: the preset's)")
    ap.add_argument("--only", action="append", choices=sorted(CONFIGS), default=None)
    ap.add_argument("--quick", action="store_true", help="the quick recipe (tests)")
    ap.add_argument(
        "--mopo", action="store_true", help="first measure MOPO's MSE on this dataset (mopo.json)"
    )
    ap.add_argument("--screen", action="store_true", help="the noise screen (public values)")
    ap.add_argument(
        "--plot", action="store_true", help="only redraw this dataset build's plot from its records"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # core-seconds = process CPU seconds
    if args.screen:
        result = screen(args.epsilon, 1e-5)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "noise_screen.json").write_text(json.dumps(result, indent=1) + "\n")
        print(screen_table(result))
        for r in result["reference"]:
            print(f"{r['task']} {r['row']} (z = {r['z']}): {r['noise_to_signal']:.3g}")
        return
    data = dataset_path(args.quick)
    build = build_dir(read_header(data).content_sha256, args.quick)
    if args.plot:
        print(plot(build))
        return
    refs = run_references(data, args)
    print(f"initial MSE {refs['initial_mse']}, mean target {refs['mean_predictor_mse']:.4g}")
    if args.mopo:
        mopo = run_mopo(data, args)
        print(f"mopo: {mopo['epochs']} epochs, MSE = {mopo['best_mse']:.4g}")
    records = [run_config(n, data, args) for n in (args.only or CONFIGS)]
    plot(build)
    for r in records:
        print(
            f"{r['configuration']}: T = {r['rounds']}, ε = {float(r['epsilon']):.3g}, MSE = "
            f"{r['curve'][-1]['mse'] if r['curve'] else float('nan'):.4g}"
        )


if __name__ == "__main__":
    main()
