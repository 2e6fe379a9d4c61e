"""`privrl demo`: private release of a tabular MDP's transition counts, end to end.

What it does, as a user would with their own data:
1. samples a dataset of trajectories from a random finite-horizon tabular MDP (the "private"
   data) and saves it as a native HDF5 file;
2. binds a total privacy budget to that file with a `BudgetLedger`;
3. at several target epsilons, releases the transition counts n_h(s, a, s') with the Gaussian
   mechanism (unit: one trajectory, replace-one neighbours), checking the ledger before touching
   the data and recording each spend after;
4. builds the private model P̃ from the released counts only (post-processing), and measures its
   error against the true P and the suboptimality of the policy planned in it;
5. shows that one more release is refused once the budget would be exceeded;
6. writes a run directory: config.json, metrics.json, metrics.csv, privacy.json, plots/demo.png.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from dp_accounting import dp_event
from rich.console import Console
from rich.table import Table

from privrl.data.dataset import TrajectoryDataset
from privrl.envs.tabular import TabularMDP, behaviour_policy_full_support, episodes_from_dataset
from privrl.privacy.accounting import calibrate_noise_multiplier
from privrl.privacy.ledger import BudgetExceededError, BudgetLedger
from privrl.privacy.mechanisms import gaussian_mechanism
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit

UNIT = PrivacyUnit.TRAJECTORY
RELATION = NeighbourRelation.REPLACE_ONE


@dataclass
class DemoConfig:
    states: int = 10
    actions: int = 4
    horizon: int = 10
    episodes: int = 20_000
    epsilons: list[float] = field(default_factory=lambda: [0.25, 0.5, 1.0, 2.0, 4.0])
    delta: float = 1e-5
    total_epsilon: float = 6.0
    seed: int = 0


@dataclass
class DemoPoint:
    epsilon: float
    noise_multiplier: float
    sigma: float
    model_error: float
    suboptimality: float


def transition_counts(data: TrajectoryDataset, mdp: TabularMDP) -> np.ndarray:
    """n_h(s, a, s') of a fixed-horizon dataset, [H, S, A, S] (the private statistic)."""
    episodes = episodes_from_dataset(data, horizon=mdp.H)
    _, n_sas = mdp.counts(episodes.states[:, :-1], episodes.actions, episodes.states[:, 1:])
    return n_sas


def private_model(noisy_counts: np.ndarray) -> np.ndarray:
    """P̃ from released counts: clip at 0 and normalise; rows with no mass become uniform."""
    clipped = np.maximum(noisy_counts, 0.0)
    totals = clipped.sum(axis=-1, keepdims=True)
    uniform = np.full_like(clipped, 1.0 / clipped.shape[-1])
    return np.where(totals > 0, clipped / np.where(totals > 0, totals, 1.0), uniform)


def model_error(p_hat: np.ndarray, mdp: TabularMDP, behaviour: np.ndarray) -> float:
    """Occupancy-weighted L1 error: Σ_h Σ_{s,a} d^μ_h(s,a) ‖P̃_h(·|s,a) − P_h(·|s,a)‖₁ / H."""
    occ = mdp.occupancy(behaviour)  # [H, S, A]
    l1 = np.abs(p_hat - mdp.P).sum(axis=-1)
    return float((occ * l1).sum() / mdp.H)


def plan_and_score(p_hat: np.ndarray, mdp: TabularMDP) -> float:
    """Suboptimality v* − v^π̂ in the true MDP of the policy that is optimal in P̃."""
    model = TabularMDP(p_hat, mdp.R, mdp.d1)
    _, _, pi_hat = model.backward_induction()
    return float(mdp.optimal_value() - mdp.value(pi_hat))


def _release_counts(
    counts: np.ndarray, eps: float, cfg: DemoConfig, rng: np.random.Generator
) -> tuple[np.ndarray, Release]:
    # Replacing one trajectory changes at most 2H of the counts n_h(s,a,s') by 1 each
    # (H removed, H added), so the L2 sensitivity is √(2H).
    sensitivity = float(np.sqrt(2 * cfg.horizon))
    z = calibrate_noise_multiplier(eps, cfg.delta, 1, sampling="none", relation=RELATION)
    noisy, release = gaussian_mechanism(
        counts.astype(np.float64),
        sensitivity=sensitivity,
        noise_multiplier=z,
        rng=rng,
        name=f"transition counts n_h(s,a,s') at target ε={eps:g}",
    )
    return noisy, release


# Sampling, the dataset and the counts hold ~40 bytes per step (measured: 200,000 episodes of
# H = 10 add 82 MB); 100 bytes per step is a safe estimate.
_BYTES_PER_STEP = 100


def demo_config(out: Path, *, episodes: int, seed: int, total_epsilon: float) -> DemoConfig:
    """The demo's config from its public inputs, checked (sizes against this machine's memory,
    `out` writable) before any work."""
    from privrl.experiments.checks import check_epsilon, check_int, check_memory, check_out_dir

    check_int(episodes, "--episodes", minimum=1)
    check_int(seed, "--seed", minimum=0)
    check_epsilon(total_epsilon, "--total-epsilon")
    check_memory("--episodes", episodes, _BYTES_PER_STEP * DemoConfig.horizon, what="episode")
    check_out_dir(out)
    return DemoConfig(episodes=episodes, total_epsilon=total_epsilon, seed=seed)


def run_demo(cfg: DemoConfig, out: Path, console: Console | None = None) -> dict[str, object]:
    """Run the demo and write its run directory; returns the metrics dictionary."""
    console = console or Console()
    out.mkdir(parents=True, exist_ok=True)
    (out / "plots").mkdir(exist_ok=True)
    seeds = np.random.SeedSequence(cfg.seed).spawn(3)
    env_rng, data_rng, noise_rng = (np.random.default_rng(s) for s in seeds)

    mdp = TabularMDP.random(cfg.states, cfg.actions, cfg.horizon, rng=env_rng)
    behaviour = behaviour_policy_full_support(env_rng, cfg.horizon, cfg.states, cfg.actions, 0.05)
    with console.status(f"sampling {cfg.episodes} trajectories"):
        data = mdp.sample(behaviour, cfg.episodes, rng=data_rng)
    data_path = out / "data.h5"
    data.save(data_path)
    ledger = BudgetLedger.init(
        data_path,
        epsilon=cfg.total_epsilon,
        delta=cfg.delta,
        unit=UNIT,
        relation=RELATION,
        overwrite=True,
    )
    console.print(
        f"[bold]data[/]: {data.n_episodes} trajectories × H={cfg.horizon} from a random MDP "
        f"(S={cfg.states}, A={cfg.actions}) → {data_path}\n"
        f"[bold]ledger[/]: total budget ε={cfg.total_epsilon:g}, δ={cfg.delta:g} per "
        f"{UNIT.describe()}"
    )

    counts = transition_counts(data, mdp)
    baseline_model = private_model(counts)  # non-private plug-in model, for reference only
    baseline = DemoPoint(
        epsilon=float("inf"),
        noise_multiplier=0.0,
        sigma=0.0,
        model_error=model_error(baseline_model, mdp, behaviour),
        suboptimality=plan_and_score(baseline_model, mdp),
    )

    points: list[DemoPoint] = []
    releases: list[Release] = []
    for eps in cfg.epsilons:
        z = calibrate_noise_multiplier(eps, cfg.delta, 1, sampling="none", relation=RELATION)
        ledger.check(dp_event.GaussianDpEvent(z))  # before the data are touched
        noisy, release = _release_counts(counts, eps, cfg, noise_rng)
        report = PrivacyReport.build(
            UNIT, RELATION, [release], cfg.delta, system="demo", public=["the MDP's rewards R"]
        )
        ledger.record(report, label=f"demo release at ε={eps:g}")
        p_hat = private_model(noisy)
        points.append(
            DemoPoint(
                epsilon=report.epsilon,
                noise_multiplier=release.noise["noise_multiplier"],
                sigma=release.noise["sigma"],
                model_error=model_error(p_hat, mdp, behaviour),
                suboptimality=plan_and_score(p_hat, mdp),
            )
        )
        releases.append(release)

    refused = _try_overspend(ledger, cfg)
    total_report = PrivacyReport.build(
        UNIT,
        RELATION,
        releases,
        cfg.delta,
        system="demo",
        public=["the MDP's rewards R", "the MDP's state and action spaces and horizon"],
        notes=["all releases composed by the accountant (RDP)"],
    )
    total_report.to_json(out / "privacy.json")
    metrics = _write_outputs(out, cfg, points, baseline, total_report, refused)
    _print_summary(console, points, baseline, total_report, ledger, refused)
    return metrics


def _try_overspend(ledger: BudgetLedger, cfg: DemoConfig) -> str | None:
    eps = max(cfg.epsilons)
    z = calibrate_noise_multiplier(eps, cfg.delta, 1, sampling="none", relation=RELATION)
    try:
        ledger.check(dp_event.GaussianDpEvent(z))
    except BudgetExceededError as exc:
        return str(exc)
    return None


def _write_outputs(
    out: Path,
    cfg: DemoConfig,
    points: list[DemoPoint],
    baseline: DemoPoint,
    report: PrivacyReport,
    refused: str | None,
) -> dict[str, object]:
    (out / "config.json").write_text(json.dumps(asdict(cfg), indent=2))
    with open(out / "metrics.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(asdict(points[0]).keys()))
        writer.writeheader()
        for p in [*points, baseline]:
            writer.writerow(asdict(p))
    best = points[-1]
    metrics: dict[str, object] = {
        "suboptimality": best.suboptimality,
        "suboptimality_non_private": baseline.suboptimality,
        "model_error": best.model_error,
        "model_error_non_private": baseline.model_error,
        "epsilon_total": report.epsilon,
        "delta": cfg.delta,
        "points": [asdict(p) for p in points],
        "overspend_refused": refused is not None,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    _plot(out / "plots" / "demo.png", points, baseline)
    return metrics


def _plot(path: Path, points: list[DemoPoint], baseline: DemoPoint) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = [p.epsilon for p in points]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, key, label in (
        (axes[0], "model_error", "model error (occupancy-weighted L1)"),
        (axes[1], "suboptimality", "suboptimality v* − v^π̂"),
    ):
        ax.plot(eps, [getattr(p, key) for p in points], "o-", label="private (Gaussian counts)")
        ax.axhline(getattr(baseline, key), ls="--", color="gray", label="non-private")
        ax.set_xscale("log")
        ax.set_xticks(eps, [f"{e:.2g}" for e in eps])
        ax.minorticks_off()
        ax.set_xlabel("ε of the release (δ = 1e-5)")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle("Private transition counts of a random tabular MDP (one release per ε)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _print_summary(
    console: Console,
    points: list[DemoPoint],
    baseline: DemoPoint,
    report: PrivacyReport,
    ledger: BudgetLedger,
    refused: str | None,
) -> None:
    table = Table(title="Private model vs the true MDP")
    for col in ("ε", "noise σ", "model error", "suboptimality"):
        table.add_column(col, justify="right")
    for p in [*points, baseline]:
        table.add_row(
            "∞ (non-private)" if np.isinf(p.epsilon) else f"{p.epsilon:.3g}",
            f"{p.sigma:.3g}",
            f"{p.model_error:.4f}",
            f"{p.suboptimality:.4f}",
        )
    console.print(table)
    report.print(console)
    console.print(ledger.to_table())
    if refused:
        console.print(
            f"[yellow]one more release at ε={max(p.epsilon for p in points):.3g} "
            f"was refused by the ledger:[/] {refused}"
        )
