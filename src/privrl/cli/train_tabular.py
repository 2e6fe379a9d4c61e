"""`privrl train dp-apvi` and `privrl train apvi`: offline RL in tabular MDPs (Qiao & Wang).

Data come from a native HDF5 dataset (`--data FILE --horizon H`) or are sampled from a random
tabular MDP (`--env random-tabular --episodes N`), in which case the exact suboptimality of the
learned policy is reported. Every run writes the run-directory contract: config.json,
metrics.json, metrics.csv (per-step diagnostics), privacy.json, plots/*.png and policy.npz.

Two δ's, kept apart on purpose: `--delta` is the paper's *utility* failure probability (it
sets the error bound E and ι, hence how pessimistic the learner is), `--privacy-delta` is the δ
at which the zCDP guarantee is stated as (ε, δ). Tying them would invite a large privacy δ
to shrink the bonuses.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from privrl.cli.errors import CliError

ENVS = ("random-tabular",)


def register(app: typer.Typer) -> None:
    """Add this module's commands to `privrl train`."""
    app.command("dp-apvi", no_args_is_help=True)(dp_apvi_command)
    app.command("apvi", no_args_is_help=True)(apvi_command)


# ---------------------------------------------------------------------------------------------
# options shared by both commands
# ---------------------------------------------------------------------------------------------

_DATA = typer.Option(None, "--data", help="Dataset file (.h5) of equal-length tabular episodes.")
_ENV = typer.Option(None, "--env", help="Sample the data instead: 'random-tabular'.")
_EPISODES = typer.Option(None, "--episodes", "-n", help="Trajectories to sample (with --env).")
_HORIZON = typer.Option(
    None, "--horizon", "-H", help="Horizon H (required with --data; default 10 with --env)."
)
_STATES = typer.Option(
    None, "--states", "-S", help="Number of states (default: 10 with --env; metadata with --data)."
)
_ACTIONS = typer.Option(
    None, "--actions", "-A", help="Number of actions (default: 5 with --env; metadata with --data)."
)
_BONUS = typer.Option("bernstein", "--bonus", help="Pessimism bonus: bernstein or hoeffding.")
_SCALE = typer.Option(
    1.0, "--bonus-scale", help="Multiplier of the bonus (1 = theory constants C1=√2, C2=16)."
)
_DELTA = typer.Option(
    0.1, "--delta", help="Utility failure probability δ in E and ι (not a privacy parameter)."
)
_REWARD_TABLE = typer.Option(
    None, "--reward-table", help="Public mean reward r_h(s,a): a .npy array [H, S, A] in [0, 1]."
)
_SEED = typer.Option(0, "--seed", help="Seed of the noise (and of the MDP and data with --env).")


def dp_apvi_command(
    out: Path = typer.Option(Path("runs/dp-apvi"), "--out", "-o", help="Run directory."),
    data: Path = _DATA,
    env: str = _ENV,
    episodes: int = _EPISODES,
    horizon: int = _HORIZON,
    states: int = _STATES,
    actions: int = _ACTIONS,
    rho: float = typer.Option(None, "--rho", help="zCDP budget ρ (Gaussian noise)."),
    epsilon: float = typer.Option(None, "--epsilon", help="Pure-DP budget ε (Laplace noise)."),
    bonus: str = _BONUS,
    bonus_scale: float = _SCALE,
    delta: float = _DELTA,
    privacy_delta: float = typer.Option(
        1e-6, "--privacy-delta", help="δ at which the zCDP guarantee is stated as (ε, δ)."
    ),
    privatize_rewards: bool = typer.Option(
        False,
        "--privatize-rewards",
        help="Release noisy reward sums too (the budget is split over 3 count families).",
    ),
    reward_table: Path = _REWARD_TABLE,
    seed: int = _SEED,
) -> None:
    """DP-APVI (Qiao & Wang, Algorithm 1): pessimistic value iteration on private counts.

    Protects one whole trajectory under replace-one neighbours: ρ-zCDP with --rho (Gaussian
    noise σ² = 2H/ρ on the counts), or ε-DP with --epsilon (Laplace(4H/ε)). With --data the
    rewards are private: pass --reward-table (a public reward function) or --privatize-rewards.

    Examples:

      privrl train dp-apvi --env random-tabular --episodes 20000 --rho 1 --out runs/a

      privrl train dp-apvi --data trips.h5 --horizon 10 --rho 1 --privatize-rewards --out runs/b
    """
    from privrl.offline.apvi import PrivacyConfig

    if (rho is None) == (epsilon is None):
        raise CliError(
            "give exactly one of --rho (zCDP, Gaussian noise) or --epsilon (pure DP, Laplace "
            "noise)" + ("" if rho is None else ", not both")
        )
    if rho is not None and not (math.isfinite(rho) and rho > 0):
        raise CliError(f"--rho must be finite and > 0, got {rho} (for no privacy use `apvi`)")
    if epsilon is not None and not (math.isfinite(epsilon) and epsilon > 0):
        raise CliError(f"--epsilon must be finite and > 0, got {epsilon}")
    if not 0 < privacy_delta < 1:
        raise CliError(f"--privacy-delta must be in (0, 1), got {privacy_delta}")
    if rho is not None:
        privacy = PrivacyConfig.gaussian(
            rho, privatize_rewards=privatize_rewards, report_delta=privacy_delta
        )
    else:
        privacy = PrivacyConfig.laplace(
            epsilon, privatize_rewards=privatize_rewards, report_delta=privacy_delta
        )
    _run(
        "dp-apvi",
        out,
        data,
        env,
        episodes,
        horizon,
        states,
        actions,
        bonus,
        bonus_scale,
        delta,
        reward_table,
        seed,
        privacy,
    )


def apvi_command(
    out: Path = typer.Option(Path("runs/apvi"), "--out", "-o", help="Run directory."),
    data: Path = _DATA,
    env: str = _ENV,
    episodes: int = _EPISODES,
    horizon: int = _HORIZON,
    states: int = _STATES,
    actions: int = _ACTIONS,
    bonus: str = _BONUS,
    bonus_scale: float = _SCALE,
    delta: float = _DELTA,
    reward_table: Path = _REWARD_TABLE,
    seed: int = _SEED,
) -> None:
    """APVI (Yin & Wang 2021): the NON-PRIVATE baseline — DP-APVI's code with no noise.

    Its privacy.json says it is not private (ε = ∞). A dataset with a ledger refuses it.
    Without --reward-table the rewards are the empirical means of the data.
    """
    _run(
        "apvi",
        out,
        data,
        env,
        episodes,
        horizon,
        states,
        actions,
        bonus,
        bonus_scale,
        delta,
        reward_table,
        seed,
        None,
    )


# ---------------------------------------------------------------------------------------------
# implementation
# ---------------------------------------------------------------------------------------------


def _positive_int(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise CliError(f"{flag} must be >= 1, got {value}")


def _run(
    algo: str,
    out: Path,
    data: Path | None,
    env: str | None,
    episodes: int | None,
    horizon: int | None,
    states: int | None,
    actions: int | None,
    bonus: str,
    bonus_scale: float,
    delta: float,
    reward_table: Path | None,
    seed: int,
    privacy: Any,
) -> None:
    from privrl.offline.apvi import APVIConfig

    if (data is None) == (env is None):
        raise CliError("give exactly one data source: --data FILE or --env random-tabular")
    if bonus not in ("bernstein", "hoeffding"):
        raise CliError(f"--bonus must be bernstein or hoeffding, got {bonus!r}")
    if not (math.isfinite(bonus_scale) and bonus_scale >= 0):
        raise CliError(f"--bonus-scale must be finite and >= 0, got {bonus_scale}")
    if not 0 < delta < 1:
        raise CliError(f"--delta (utility failure probability) must be in (0, 1), got {delta}")
    for value, flag in (
        (episodes, "--episodes"),
        (horizon, "--horizon"),
        (states, "--states"),
        (actions, "--actions"),
    ):
        _positive_int(value, flag)
    if seed < 0:
        raise CliError(f"--seed must be >= 0, got {seed}")
    config = APVIConfig(bonus=bonus, bonus_scale=bonus_scale, delta=delta)  # type: ignore[arg-type]
    console = Console()
    if env is not None:
        _run_env(
            algo,
            out,
            env,
            episodes,
            horizon,
            states,
            actions,
            reward_table,
            seed,
            config,
            privacy,
            console,
        )
    else:
        assert data is not None
        if episodes is not None:
            raise CliError("--episodes is for --env (a dataset has its own episodes)")
        _run_data(
            algo, out, data, horizon, states, actions, reward_table, seed, config, privacy, console
        )


def _load_reward(path: Path | None, H: int, S: int, A: int) -> np.ndarray | None:
    if path is None:
        return None
    if not path.is_file():
        raise CliError(f"reward table not found: {path}")
    try:
        r = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read --reward-table {path} as a .npy array ({exc})") from None
    if r.shape != (H, S, A):
        raise CliError(f"--reward-table must have shape [H, S, A] = [{H}, {S}, {A}], got {r.shape}")
    if not np.all(np.isfinite(r)) or r.min() < 0 or r.max() > 1:
        raise CliError("--reward-table values must be in [0, 1]")
    return r.astype(np.float64)


def _run_env(
    algo: str,
    out: Path,
    env: str,
    episodes: int | None,
    horizon: int | None,
    states: int | None,
    actions: int | None,
    reward_table: Path | None,
    seed: int,
    config: Any,
    privacy: Any,
    console: Console,
) -> None:
    from privrl.envs.tabular import TabularMDP, behaviour_policy_full_support
    from privrl.offline.apvi import dp_apvi

    if env not in ENVS:
        raise CliError(f"unknown --env {env!r}; available: {', '.join(ENVS)}")
    if episodes is None:
        raise CliError("--env needs --episodes N (how many trajectories to sample)")
    if reward_table is not None:
        raise CliError("--reward-table is for --data (the environment's reward is known)")
    H, S, A = horizon or 10, states or 10, actions or 5
    min_prob = 0.25 / A
    mdp_seed, behaviour_seed, data_seed, noise_seed = np.random.SeedSequence(seed).spawn(4)
    mdp = TabularMDP.random(S, A, H, rng=np.random.default_rng(mdp_seed))
    behaviour = behaviour_policy_full_support(
        np.random.default_rng(behaviour_seed), H, S, A, min_prob
    )
    privatize = privacy is not None and privacy.privatize_rewards
    with console.status(f"sampling {episodes} trajectories from a random MDP"):
        ep = mdp.sample_arrays(behaviour, episodes, rng=np.random.default_rng(data_seed))
    with console.status(f"running {algo}"):
        result = dp_apvi(
            ep,
            horizon=H,
            n_states=S,
            n_actions=A,
            privacy=privacy,
            config=config,
            reward=None if privatize else mdp.R,
            rng=np.random.default_rng(noise_seed),
        )
    v_star = mdp.optimal_value()
    v_pi = float(mdp.value(result.policy.actions))
    source = {
        "env": env,
        "episodes": episodes,
        "behaviour": f"full support, π_h(a|s) ≥ {min_prob:g} (0.25/A)",
        "reward": "private (noisy sums)" if privatize else "public (the MDP's mean reward)",
    }
    extra_metrics = {
        "suboptimality": v_star - v_pi,
        "optimal_value": v_star,
        "policy_value": v_pi,
        "pessimistic_value": float(mdp.d1 @ result.values.V[0]),
    }
    _write_run(algo, out, source, H, S, A, seed, config, privacy, result, extra_metrics, console)


def _run_data(
    algo: str,
    out: Path,
    data: Path,
    horizon: int | None,
    states: int | None,
    actions: int | None,
    reward_table: Path | None,
    seed: int,
    config: Any,
    privacy: Any,
    console: Console,
) -> None:
    from privrl.data.io import load_hdf5
    from privrl.experiments.rundir import ledger_guard
    from privrl.offline.apvi import RELATION, UNIT, dp_apvi, noise_plan
    from privrl.privacy.report import PrivacyReport

    if not data.is_file():
        raise CliError(f"dataset file not found: {data}")
    if horizon is None:
        raise CliError("--data needs --horizon H (the number of steps of every episode)")
    privatize = privacy is not None and privacy.privatize_rewards
    if privacy is not None and reward_table is None and not privatize:
        raise CliError(
            "the rewards in --data are private: pass --reward-table FILE.npy (a public mean "
            "reward r_h(s,a)) or --privatize-rewards (spends part of the budget on reward sums)"
        )
    if privatize and reward_table is not None:
        raise CliError("give --reward-table or --privatize-rewards, not both")
    H = horizon
    # The planned report has the run's exact events; it is checked against the dataset's
    # ledger before the file is read (sizes of the releases are filled in later).
    plan = noise_plan(H, 1, 1, privacy, config.delta, reward_sums=reward_table is None)
    if privacy is None:
        planned = PrivacyReport.non_private(UNIT, RELATION, plan.releases_planned(H), system=algo)
    else:
        planned = PrivacyReport.build(
            UNIT,
            RELATION,
            plan.releases_planned(H),
            privacy.report_delta if privacy.mechanism == "gaussian" else 0.0,
            system=algo,
        )
    with ledger_guard(data, planned, label=algo) as reports:
        with console.status(f"reading {data}"):
            ds = load_hdf5(data)
        S = states or _space_size(ds.metadata.observation_space, "states", "--states")
        A = actions or _space_size(ds.metadata.action_space, "actions", "--actions")
        if privacy is not None and (states is None or actions is None):
            # S and A enter E, ι and the output shapes, so they must be public; a table import
            # may have inferred the spaces from the data (max index + 1).
            console.print(
                f"note: S = {S}, A = {A} are taken from the dataset's metadata and treated as "
                "public; if they were inferred from the data, pass --states/--actions."
            )
        meta_h = ds.metadata.horizon
        if meta_h is not None and int(meta_h) != H:
            raise CliError(
                f"wrong horizon: the dataset's metadata says H = {meta_h}, --horizon is {H}"
            )
        if privacy is not None and ds.unit_ids is not None:
            if np.unique(ds.unit_ids).size != ds.n_episodes:
                raise CliError(
                    "the dataset groups several episodes per unit (unit_ids): DP-APVI protects "
                    "one trajectory, which would not protect a whole unit; use one episode per "
                    "unit"
                )
        reward = _load_reward(reward_table, H, S, A)
        with console.status(f"running {algo} on {ds.n_episodes} trajectories"):
            result = dp_apvi(
                ds,
                horizon=H,
                n_states=S,
                n_actions=A,
                privacy=privacy,
                config=config,
                reward=reward,
                rng=np.random.default_rng(np.random.SeedSequence(seed)),
            )
        reports.append(result.report)
    source = {
        "data": str(data),
        "episodes": int(ds.n_episodes),
        "reward": (
            f"public table {reward_table}"
            if reward_table is not None
            else "private (noisy sums)"
            if privatize
            else "empirical mean (non-private)"
        ),
    }
    _write_run(algo, out, source, H, S, A, seed, config, privacy, result, {}, console)


def _space_size(space: Any, what: str, flag: str) -> int:
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete) and int(space.start) == 0:
        return int(space.n)
    raise CliError(
        f"the dataset's metadata does not declare a Discrete({what}) space starting at 0; "
        f"pass {flag} N"
    )


def _write_run(
    algo: str,
    out: Path,
    source: dict[str, Any],
    H: int,
    S: int,
    A: int,
    seed: int,
    config: Any,
    privacy: Any,
    result: Any,
    extra_metrics: dict[str, float],
    console: Console,
) -> None:
    from privrl.experiments.rundir import RunDir
    from privrl.offline.apvi import config_dict

    run = RunDir(out)
    run.write_config(
        {
            "command": f"privrl train {algo}",
            "algorithm": algo,
            "source": source,
            "horizon": H,
            "states": S,
            "actions": A,
            "seed": seed,
            **config_dict(config, privacy),
        }
    )
    report = result.report
    per_step = result.per_step
    known = float(result.model.known.mean())
    metrics: dict[str, Any] = {
        **extra_metrics,
        "epsilon": report.epsilon,
        "delta": report.delta,
        "rho": report.rho,
        "E": result.plan.E,
        "iota": result.plan.iota,
        "noise_scale": result.plan.scale,
        "known_fraction": known,
        "all_values_zero": bool(float(result.values.V[0].max()) == 0.0),
        "pessimistic_value_mean_V1": float(result.values.V[0].mean()),
        "timings_seconds": result.diagnostics["timings"],
    }
    run.write_metrics(metrics)
    run.write_curve(per_step)
    run.write_privacy(report)
    result.policy.save(run.artifact("policy.npz"))
    _plot_values(run.plot_path("value_per_step"), per_step, algo)
    _plot_bonus(run.plot_path("bonus_heatmap"), result.values.bonus, result.model.known, algo)

    table = Table(title=f"{algo}: H={H}, S={S}, A={A}, {source['episodes']} trajectories")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in ("suboptimality", "policy_value", "optimal_value"):
        if key in metrics:
            table.add_row(key, f"{metrics[key]:.4f}")
    table.add_row("known (h,s,a) (ñ > E)", f"{known:.1%}")
    table.add_row("E", f"{result.plan.E:.4g}")
    table.add_row("mean Ṽ_1 (pessimistic)", f"{metrics['pessimistic_value_mean_V1']:.4f}")
    console.print(table)
    if float(result.values.V[0].max()) == 0.0:
        console.print(
            "[yellow]warning:[/] every pessimistic value is 0, so the policy carries no "
            "information: the bonus exceeds the value range at this n (at --bonus-scale 1 the "
            "privacy term C2·S·H·E·ι/ñ needs ñ > C2·S·E·ι per pair). More data, a larger budget "
            "or a smaller --bonus-scale (chosen on other data, never on this dataset) would help."
        )
    report.print(console)
    console.print(
        f"wrote {out}/ (config.json, metrics.json, metrics.csv, privacy.json, policy.npz, plots/)"
    )


def _plot_values(path: Path, per_step: list[dict[str, float]], algo: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = [r["h"] for r in per_step]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    axes[0].plot(h, [r["V_mean"] for r in per_step], "o-", label="mean over s")
    axes[0].plot(h, [r["V_max"] for r in per_step], "s--", label="max over s")
    axes[0].plot(h, [len(h) - x + 1 for x in h], ":", color="gray", label="H − h + 1 (cap)")
    axes[0].set_xlabel("step h")
    axes[0].set_ylabel("pessimistic value Ṽ_h(s)")
    axes[0].legend(fontsize=8)
    axes[1].bar(h, [r["known_fraction"] for r in per_step], color="tab:green")
    axes[1].set_ylim(0, 1)
    axes[1].set_xlabel("step h")
    axes[1].set_ylabel("fraction of (s,a) with ñ > E")
    fig.suptitle(f"{algo}: value estimates and coverage per step")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_bonus(path: Path, bonus: np.ndarray, known: np.ndarray, algo: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Mean bonus over actions per (h, s); unknown pairs (bonus C·H) shown as the cap.
    mean_bonus = bonus.mean(axis=2)  # [H, S]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    im = ax.imshow(
        np.log10(np.maximum(mean_bonus.T, 1e-6)),
        aspect="auto",
        origin="lower",
        cmap="viridis",
        extent=(0.5, bonus.shape[0] + 0.5, -0.5, bonus.shape[1] - 0.5),
    )
    fig.colorbar(im, ax=ax, label="log10 mean_a Γ_h(s,a)")
    ax.set_xlabel("step h")
    ax.set_ylabel("state s")
    ax.set_title(f"{algo}: pessimism bonus ({known.mean():.0%} of (h,s,a) known)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
