"""How many trajectories PRIMORL needs for a useful dynamics model, at ε = 1, 5, 10.

Pendulum-v1 episodes (raw rewards, 200 steps) from a behaviour policy that mixes uniform random
actions with an energy-pumping swing-up controller (the mixing share ε_b ~ U(0, 1) is drawn per
episode: a replay-like mix of poor to good episodes). For each K in {1,000, 3,000, 10,000,
30,000} private episodes (and 100, 300):

- PRIMORL (DP-FedAvg, the library's defaults for Pendulum: 3 members of 2×64, per-layer
  clipping at C = 0.02, q = min(1, 30/K)), z calibrated for the target ε at T rounds;
- MOPO's non-private ensemble (same architecture, ordinary minibatch training) on the same K
  episodes, the reference a private model is compared with.

Every model is scored on one fixed test set of episodes that no model trained on (the MSE of
the elites' mean prediction of [s' − s, r], in data units, split into the state part and the
reward part), beside the MSE of predicting no change and the mean reward (a model that learned
nothing). PRIMORL's public split (the normaliser, early stopping, elites) is 1% of K further
episodes, declared public; MOPO holds out 1% of its own episodes, as it does by default.

The policy stage is kept to one SAC update (the cells measure the model; a real policy stage
costs tens of minutes per cell). Below the grid, K = 100 and 300 (``--k 100 300``) show where
the noise starts to cost model error.

Each finished cell is one small JSON record in ``benchmarks/results/primorl_data_size/``; a
rerun skips the cells already there (same configuration), so the measurement resumes where
it stopped. The noise is drawn from a seeded (insecure) source so that a cell can be
recomputed exactly: the numbers are a simulation of the private runs, not private releases.

    python benchmarks/primorl_data_size.py                    # every missing cell
    python benchmarks/primorl_data_size.py --k 1000 --eps 5   # one cell
    python benchmarks/primorl_data_size.py --summary          # the table from the records
    python benchmarks/primorl_data_size.py --plot             # and the guide's plot
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).resolve().parent / "results" / "primorl_data_size"
KS = (1_000, 3_000, 10_000, 30_000)
SMALL_KS = (100, 300)  # below the grid: where the noise starts to cost model error
EPSILONS = (1.0, 5.0, 10.0)
M = 30  # expected units per round: the library's default q = min(1, M/K)
SETTINGS: dict[str, Any] = {
    "rounds": 1000,  # T_max (the paper's Pendulum rows: 7000)
    "eval_every": 50,
    "patience": 10,
    "test_episodes": 100,
    "public_share": 0.01,
    "min_public": 10,
    "mopo_steps_per_epoch": 500,
    "mopo_max_epochs": 40,
    "reward_transform": "privrl",  # r' = 1 + r/c_max ∈ [0, 1], the scale C = 0.02 was set in
    "seed": 0,
}


# ---------------------------------------------------------------------------------------------
# data: Pendulum-v1 episodes of a mixed behaviour policy
# ---------------------------------------------------------------------------------------------


def swing_up(obs: np.ndarray) -> np.ndarray:
    """Energy pumping far from upright, PD control near it."""
    c, s, w = obs[:, 0], obs[:, 1], obs[:, 2]
    th = np.arctan2(s, c)
    energy = 0.5 * w**2 + 15.0 * c  # θ̈ = 15 sin θ + 3u ⇒ E = ½θ̇² + 15 cos θ, 15 upright
    pump = 2.0 * np.sign(w * (15.0 - energy) + 1e-6)
    pd = np.clip(-(12.0 * th + 3.0 * w) / 3.0, -2.0, 2.0)
    return np.where(c > 0.85, pd, pump)[:, None]


def episodes(n: int, seed: int, *, n_trajectories: int | None = None) -> Any:
    """`n` Pendulum-v1 episodes (raw rewards) as a TrajectoryDataset with the env's spaces,
    its id and (when given) the declared number of trajectories in the metadata."""
    import gymnasium as gym

    from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
    from privrl.envs.batched import make_batched
    from privrl.envs.control import RAW_TASKS

    task = RAW_TASKS["Pendulum-v1"]
    rng = np.random.default_rng(seed)
    env = make_batched(task, n, seed)
    share = rng.uniform(0.0, 1.0, size=(n, 1))
    obs = env.reset(seed)
    observations, actions, rewards = [obs], [], []
    for _ in range(task.horizon):
        a = np.where(rng.random((n, 1)) < share, rng.uniform(-2.0, 2.0, (n, 1)), swing_up(obs))
        obs, r, _ = env.step(a)
        observations.append(obs)
        actions.append(a)
        rewards.append(r)
    o = np.stack(observations, 1).astype(np.float32)  # [n, H + 1, 3]
    act = np.stack(actions, 1).astype(np.float32)
    rew = np.stack(rewards, 1).astype(np.float32)
    h = task.horizon
    offsets = h * np.arange(n + 1)
    truncated = np.zeros((n, h), bool)
    truncated[:, -1] = True
    spec = gym.make("Pendulum-v1")
    extra = {} if n_trajectories is None else {"n_trajectories": int(n_trajectories)}
    meta = DatasetMetadata(
        observation_space=spec.observation_space,
        action_space=spec.action_space,
        env_id="Pendulum-v1",
        discount=0.99,
        horizon=h,
        extra=extra,
    )
    spec.close()
    return TrajectoryDataset(
        observations=o.reshape(-1, 3),
        actions=act.reshape(-1, 1),
        rewards=rew.reshape(-1),
        terminated=np.zeros(n * h, bool),
        truncated=truncated.reshape(-1),
        episode_offsets=offsets,
        metadata=meta,
    )


# ---------------------------------------------------------------------------------------------
# scoring
# ---------------------------------------------------------------------------------------------


def scores(model: Any, test: Any) -> dict[str, float]:
    """MSE of the elites' mean prediction of [s' − s, r] on `test` (data units): overall,
    state part and reward part."""
    import torch

    tr = test.transitions()
    x = model.inputs(tr.observations, tr.actions)
    y = model.raw_targets(tr.observations, tr.rewards, tr.next_observations)
    elites = list(model.elites) if model.elites else list(range(model.members))
    with torch.no_grad():
        mean, _ = model.ensemble(x)
        pred = model.target_normalizer.inverse(mean[0])[elites].mean(0)
    err = (pred - y).double().square().numpy()
    return {
        "mse": float(err.mean()),
        "mse_state": float(err[:, :-1].mean()),
        "mse_reward": float(err[:, -1].mean()),
    }


def trivial_scores(test: Any, train: Any) -> dict[str, float]:
    """The same MSEs for a model that learned nothing: no state change, the mean reward."""
    tr, fit = test.transitions(), train.transitions()
    dy = np.asarray(tr.next_observations, np.float64) - np.asarray(tr.observations, np.float64)
    r = np.asarray(tr.rewards, np.float64) - float(np.mean(fit.rewards))
    err = np.concatenate([dy**2, r[:, None] ** 2], axis=1)
    return {
        "mse": float(err.mean()),
        "mse_state": float(err[:, :-1].mean()),
        "mse_reward": float(err[:, -1].mean()),
    }


# ---------------------------------------------------------------------------------------------
# cells
# ---------------------------------------------------------------------------------------------


def fingerprint(cell: dict[str, Any]) -> str:
    text = json.dumps({**SETTINGS, **cell}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stage_settings() -> dict[str, Any]:
    """A policy stage too small to matter (the cells measure the model)."""
    return {
        "epochs": 1,
        "steps_per_epoch": 1,
        "rollout_batch_size": 1,
        "sac_hidden": (8, 8),
        "eval_episodes": 1,
        "final_epochs": 1,
    }


def data_for(k: int) -> tuple[Any, Any, Any]:
    """(K private episodes, the declared-public split, the test set) for K."""
    seed = SETTINGS["seed"]
    n_public = max(SETTINGS["min_public"], round(SETTINGS["public_share"] * k))
    private = episodes(k, seed * 1000 + k, n_trajectories=k)
    public = episodes(n_public, seed * 1000 + k + 1)
    test = episodes(SETTINGS["test_episodes"], 999_983 + seed)
    return private, public, in_scale(test)


def in_scale(data: Any) -> Any:
    """The test episodes in the reward scale the models learn (`SETTINGS["reward_transform"]`)."""
    from privrl.envs.control import RAW_TASKS, with_reward_transform
    from privrl.primorl.tasks import in_reward_scale

    raw = RAW_TASKS["Pendulum-v1"]
    return in_reward_scale(data, raw, with_reward_transform(raw, SETTINGS["reward_transform"]))


def primorl_cell(k: int, eps: float | None) -> dict[str, Any]:
    """PRIMORL's released model at target ε (None: z = 0 with the clip kept, the paper's NO
    PRIVACY row: what DP-FedAvg's T rounds reach without noise)."""
    from privrl.primorl import PRIMORL, PrimorlConfig
    from privrl.privacy.noise import NoiseSource

    private, public, test = data_for(k)
    config = PrimorlConfig(
        task="Pendulum-v1",
        epsilon=eps,
        variant=None if eps is not None else "no-privacy",
        steps=SETTINGS["rounds"],
        sampling_rate=min(1.0, M / k),
        eval_every=SETTINGS["eval_every"],
        patience=SETTINGS["patience"],
        start_states="initial",
        reward_transform=SETTINGS["reward_transform"],
        **stage_settings(),
    )
    t0 = time.perf_counter()
    fitted = PRIMORL(config).fit(
        private, public=public, noise=NoiseSource.insecure(SETTINGS["seed"]), seed=0
    )
    seconds = time.perf_counter() - t0
    result = fitted.details
    params = {p["name"]: p["value"] for p in fitted.report.to_dict()["public_parameters"]}
    return {
        "method": "primorl",
        "K": k,
        "epsilon_target": eps,
        "epsilon_max": fitted.metrics["epsilon_max"],  # ε at T_max (planned; noise simulated)
        "z": params.get("z (noise multiplier)"),
        "q": params.get("q (sampling rate)"),
        "C": params.get("C (clip norm, joint over the ensemble)"),
        "noise_std": params.get("noise std on θ"),
        "rounds": fitted.metrics["rounds"],
        "stopped_early": fitted.metrics["stopped_early"],
        **scores(result.released.model, test),
        "trivial": trivial_scores(test, in_scale(public)),
        "seconds": seconds,
    }


def mopo_cell(k: int) -> dict[str, Any]:
    from privrl.primorl import MOPO, MOPOConfig

    private, _, test = data_for(k)
    config = MOPOConfig.for_task(
        "Pendulum-v1",
        holdout_fraction=0.01,
        reward_transform=SETTINGS["reward_transform"],
        dynamics_overrides={
            "steps_per_epoch": SETTINGS["mopo_steps_per_epoch"],
            "max_epochs": SETTINGS["mopo_max_epochs"],
        },
        **stage_settings(),
    )
    t0 = time.perf_counter()
    fitted = MOPO(config).fit(private, seed=0)
    seconds = time.perf_counter() - t0
    result = fitted.details
    return {
        "method": "mopo",
        "K": k,
        "epsilon": math.inf,
        "model_epochs": result.dynamics.get("epochs"),
        **scores(result.model, test),
        "trivial": trivial_scores(test, in_scale(private)),
        "seconds": seconds,
    }


def cell_path(cell: dict[str, Any]) -> Path:
    if cell["method"] == "mopo":
        return OUT / f"mopo_K{cell['K']}.json"
    eps = cell["epsilon"]
    return OUT / f"primorl_K{cell['K']}_{'nonoise' if eps is None else f'eps{eps:g}'}.json"


def run_cell(cell: dict[str, Any]) -> None:
    path = cell_path(cell)
    key = fingerprint(cell)
    if path.exists() and json.loads(path.read_text()).get("fingerprint") == key:
        print(f"done already: {path.name}")
        return
    print(f"running {path.name} ...", flush=True)
    if cell["method"] == "mopo":
        record = mopo_cell(cell["K"])
    else:
        record = primorl_cell(cell["K"], cell["epsilon"])
    record = {"fingerprint": key, "settings": SETTINGS, **record}
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, allow_nan=True) + "\n")
    tmp.replace(path)
    print(f"  {path.name}: MSE {record['mse']:.4g} in {record['seconds']:.0f} s", flush=True)


def cells(ks: list[int], epsilons: list[float], methods: list[str]) -> list[dict[str, Any]]:
    """The cells in the order they run: MOPO at every K (the cheap reference), then PRIMORL
    one ε at a time over every K (so a sitting cut short leaves whole columns), then z = 0."""
    out: list[dict[str, Any]] = []
    if "mopo" in methods:
        out += [{"method": "mopo", "K": k} for k in ks]
    if "primorl" in methods:
        out += [{"method": "primorl", "K": k, "epsilon": e} for e in epsilons for k in ks]
        out += [{"method": "primorl", "K": k, "epsilon": None} for k in ks]
    return out


def records() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(OUT.glob("*.json"))]


def summary() -> None:
    """The table of test-set MSEs (markdown), "pending" where a cell has no record yet."""
    rows = records()
    by = {(r["method"], r["K"], r.get("epsilon_target")): r for r in rows}
    eps_cols = " | ".join(f"PRIMORL ε = {e:g}" for e in EPSILONS)
    print(f"| K | MOPO (ε = ∞) | PRIMORL z = 0 | {eps_cols} | no model |")
    print("|---|---|---|" + "---|" * len(EPSILONS) + "---|")
    for k in sorted({*KS, *(r["K"] for r in rows)}):
        ref = by.get(("mopo", k, None))
        cols = [f"{ref['mse']:.3g}" if ref else "pending"]
        for e in (None, *EPSILONS):
            r = by.get(("primorl", k, e))
            if r is None:
                cols.append("pending")
            else:
                cols.append(f"{r['mse']:.3g}" + ("" if e is None else f" (z = {r['z']:.2f})"))
        any_row = ref or next((r for r in rows if r["K"] == k), None)
        cols.append(f"{any_row['trivial']['mse']:.3g}" if any_row else "")
        print(f"| {k:,} | " + " | ".join(cols) + " |")


PLOT = Path(__file__).resolve().parents[1] / "docs" / "own-data-learning" / "primorl-data-size.png"


def plot(path: Path = PLOT) -> None:
    """Test-set MSE against K (log-log): PRIMORL per ε and at z = 0, MOPO, no model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = records()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    series = [("mopo", None, "MOPO (not private)", "k", "-")]
    series += [("primorl", None, "PRIMORL, z = 0 (clip kept)", "grey", "--")]
    series += [
        ("primorl", e, f"PRIMORL ε = {e:g}", c, "-") for e, c in zip(EPSILONS, "rbg", strict=True)
    ]
    for method, eps, label, colour, style in series:
        pts = sorted(
            (r["K"], r["mse"])
            for r in rows
            if r["method"] == method and r.get("epsilon_target") == eps
        )
        if pts:
            ax.plot(*zip(*pts, strict=True), style, marker="o", color=colour, label=label)
    trivial = sorted({(r["K"], r["trivial"]["mse"]) for r in rows if r["method"] == "mopo"})
    if trivial:
        ax.plot(
            *zip(*trivial, strict=True), ":", color="purple", label="no model (s' = s, mean reward)"
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("K, private trajectories (Pendulum-v1, 200 steps each)")
    ax.set_ylabel("test MSE of [s' − s, r]")
    ax.set_title(f"PRIMORL's dynamics model vs data size ({SETTINGS['rounds']} rounds)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="*", default=list(KS))
    parser.add_argument("--eps", type=float, nargs="*", default=[5.0, 1.0, 10.0])
    parser.add_argument("--methods", nargs="*", default=["mopo", "primorl"])
    parser.add_argument("--summary", action="store_true", help="print the table and stop")
    parser.add_argument("--plot", action="store_true", help="draw the plot and stop")
    args = parser.parse_args()
    if args.summary or args.plot:
        summary()
        if args.plot:
            plot()
        return
    import torch

    torch.set_num_threads(1)
    for cell in cells(args.k, args.eps, args.methods):
        run_cell(cell)
    summary()


if __name__ == "__main__":
    main()
