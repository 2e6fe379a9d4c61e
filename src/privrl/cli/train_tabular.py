"""`privrl train dp-apvi` and `privrl train apvi`: offline RL in tabular MDPs (Qiao & Wang).

Data come from a native HDF5 dataset (`--data FILE`) or are sampled from a random tabular MDP
(`--env random-tabular --episodes N`), in which case the exact suboptimality of the learned
policy is reported. Every run writes the run-directory contract: config.json, metrics.json,
metrics.csv (per-step diagnostics), privacy.json, plots/*.png and policy.npz.

Public parameters. H, S, A, the budget, δ and the reward range set the noise, so they are
public (`privrl.privacy.public.PublicParameters`): a flag, the dataset's metadata (unless it
marks them as inferred from the data, as `privrl data import` does when it guessed the
spaces) or a default — never the data. privacy.json lists each with its source. The number of
trajectories n comes from the file's header: it is public under replace-one neighbours.

Order of work with `--data`: the file's header only (metadata and sizes) → public parameters
and the planned report → the dataset's ledger and `--out` (`ledger_guard`) → the episodes are
read, the mechanism runs and the whole run directory is written inside the guard, which
records the spend only then.

Data are fitted to the public H, S, A by fixed rules (`privrl.offline.common`: longer
episodes truncated to H, steps outside the spaces not counted, rewards clipped to [0, 1]),
never refused by a value of the data. A private run refuses a dataset with a unit_ids field
(a schema decision: these systems protect one trajectory, not a unit of several).

Two δ's, kept apart on purpose: `--delta` is the paper's *utility* failure probability (it
sets the error bound E and ι, hence how pessimistic the learner is), `--privacy-delta` is the δ
at which the zCDP guarantee is stated as (ε, δ). Tying them would invite a large privacy δ
to shrink the bonuses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from privrl.cli.errors import CliError

ENVS = ("random-tabular",)
# Largest array the command builds (H·S²·A transition counts, n·(H+1) sampled steps): 5e7
# float64 entries are 400 MB, and the pipeline holds a few such arrays at once.
MAX_ENTRIES = 50_000_000
# ρ and ε outside this range make the run numerically meaningless (σ or b overflow, or no
# noise at all); a budget above it is no privacy (use `apvi`).
BUDGET_RANGE = (1e-6, 1e6)
DEFAULT_PRIVACY_DELTA = 1e-6
DEFAULT_UTILITY_DELTA = 0.1
ENV_DEFAULTS = {"horizon": 10, "states": 10, "actions": 5}


def register(app: typer.Typer) -> None:
    """Add this module's commands to `privrl train`."""
    app.command("dp-apvi", no_args_is_help=True)(dp_apvi_command)
    app.command("apvi", no_args_is_help=True)(apvi_command)


# ---------------------------------------------------------------------------------------------
# options shared by both commands
# ---------------------------------------------------------------------------------------------

_DATA = typer.Option(None, "--data", help="Dataset file (.h5) of tabular episodes.")
_ENV = typer.Option(None, "--env", help="Sample the data instead: 'random-tabular'.")
_EPISODES = typer.Option(None, "--episodes", "-n", help="Trajectories to sample (with --env).")
_HORIZON = typer.Option(
    None,
    "--horizon",
    "-H",
    help="Horizon H (with --data: this flag or the dataset's metadata; longer episodes are "
    "truncated to H. Default 10 with --env).",
)
_STATES = typer.Option(
    None,
    "--states",
    "-S",
    help="Number of states (default: 10 with --env; with --data the metadata's Discrete space, "
    "unless it was inferred from the data).",
)
_ACTIONS = typer.Option(
    None,
    "--actions",
    "-A",
    help="Number of actions (default: 5 with --env; with --data the metadata's Discrete space, "
    "unless it was inferred from the data).",
)
_BONUS = typer.Option("bernstein", "--bonus", help="Pessimism bonus: bernstein or hoeffding.")
_SCALE = typer.Option(
    1.0, "--bonus-scale", help="Multiplier of the bonus (1 = theory constants C1=√2, C2=16)."
)
_DELTA = typer.Option(
    None,
    "--delta",
    help="Utility failure probability δ in E and ι, default 0.1 (not a privacy parameter).",
)
_REWARD_TABLE = typer.Option(
    None, "--reward-table", help="Public mean reward r_h(s,a): a .npy array [H, S, A] in [0, 1]."
)
_SEED = typer.Option(0, "--seed", help="Seed of the noise (and of the MDP and data with --env).")


@dataclass(frozen=True)
class _Settings:
    """A command's checked options (the data are not read yet)."""

    algo: str
    out: Path
    data: Path | None
    env: str | None
    episodes: int | None
    horizon: int | None
    states: int | None
    actions: int | None
    bonus: str
    bonus_scale: float
    delta: float | None
    reward_table: Path | None
    seed: int
    privacy: Any  # PrivacyConfig | None (None: the non-private baseline)


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
        None,
        "--privacy-delta",
        help="δ at which the zCDP guarantee is stated as (ε, δ), default 1e-6 (--rho only).",
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
    from privrl.privacy.public import PublicParameters

    params = PublicParameters()
    privacy = _privacy_config(params, rho, epsilon, privacy_delta, privatize_rewards)
    settings = _Settings(
        algo="dp-apvi",
        out=out,
        data=data,
        env=env,
        episodes=episodes,
        horizon=horizon,
        states=states,
        actions=actions,
        bonus=bonus,
        bonus_scale=bonus_scale,
        delta=delta,
        reward_table=reward_table,
        seed=seed,
        privacy=privacy,
    )
    _run(settings, params)


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
    from privrl.privacy.public import PublicParameters

    settings = _Settings(
        algo="apvi",
        out=out,
        data=data,
        env=env,
        episodes=episodes,
        horizon=horizon,
        states=states,
        actions=actions,
        bonus=bonus,
        bonus_scale=bonus_scale,
        delta=delta,
        reward_table=reward_table,
        seed=seed,
        privacy=None,
    )
    _run(settings, PublicParameters())


# ---------------------------------------------------------------------------------------------
# implementation
# ---------------------------------------------------------------------------------------------


def _check_budget(value: float, flag: str) -> None:
    lo, hi = BUDGET_RANGE
    if not lo <= value <= hi:  # also refuses NaN
        hint = " (for no privacy use `apvi`)" if value > hi else ""
        raise CliError(
            f"{flag} must be in [{lo:g}, {hi:g}], got {value:g}: outside it the noise is "
            f"numerically meaningless{hint}"
        )


def _privacy_config(
    params: Any,
    rho: float | None,
    epsilon: float | None,
    privacy_delta: float | None,
    privatize_rewards: bool,
) -> Any:
    """The PrivacyConfig of `dp-apvi`, its budget and δ recorded as public parameters."""
    from privrl.offline.apvi import PrivacyConfig
    from privrl.privacy.public import Source

    if (rho is None) == (epsilon is None):
        raise CliError(
            "give exactly one of --rho (zCDP, Gaussian noise) or --epsilon (pure DP, Laplace "
            "noise)" + ("" if rho is None else ", not both")
        )
    if rho is not None:
        _check_budget(rho, "--rho")
        if privacy_delta is not None and not 0 < privacy_delta < 1:
            raise CliError(f"--privacy-delta must be in (0, 1), got {privacy_delta}")
        rho = params.resolve("zCDP budget ρ", flag=rho, fix="pass --rho")
        report_delta = params.resolve(
            "privacy δ",
            flag=privacy_delta,
            default=DEFAULT_PRIVACY_DELTA,
            fix="pass --privacy-delta",
            detail="the δ at which ρ-zCDP is stated as (ε, δ)",
        )
        return PrivacyConfig.gaussian(
            rho, privatize_rewards=privatize_rewards, report_delta=report_delta
        )
    assert epsilon is not None
    _check_budget(epsilon, "--epsilon")
    if privacy_delta is not None:
        raise CliError("--privacy-delta is for --rho; --epsilon is pure ε-DP (δ = 0)")
    epsilon = params.resolve("pure-DP budget ε", flag=epsilon, fix="pass --epsilon")
    params.given("privacy δ", 0.0, Source.DEFAULT, "pure ε-DP (Laplace noise)")
    return PrivacyConfig.laplace(epsilon, privatize_rewards=privatize_rewards)


def _positive_int(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise CliError(f"{flag} must be >= 1, got {value}")


def _run(settings: _Settings, params: Any) -> None:
    from privrl.offline.apvi import APVIConfig
    from privrl.privacy.public import Source

    s = settings
    if (s.data is None) == (s.env is None):
        raise CliError("give exactly one data source: --data FILE or --env random-tabular")
    if s.bonus not in ("bernstein", "hoeffding"):
        raise CliError(f"--bonus must be bernstein or hoeffding, got {s.bonus!r}")
    if not (math.isfinite(s.bonus_scale) and s.bonus_scale >= 0):
        raise CliError(f"--bonus-scale must be finite and >= 0, got {s.bonus_scale}")
    if s.delta is not None and not 0 < s.delta < 1:
        raise CliError(f"--delta (utility failure probability) must be in (0, 1), got {s.delta}")
    for value, flag in (
        (s.episodes, "--episodes"),
        (s.horizon, "--horizon"),
        (s.states, "--states"),
        (s.actions, "--actions"),
    ):
        _positive_int(value, flag)
    if s.seed < 0:
        raise CliError(f"--seed must be >= 0, got {s.seed}")
    delta = params.resolve(
        "utility failure probability δ_u",
        flag=s.delta,
        default=DEFAULT_UTILITY_DELTA,
        fix="pass --delta",
        detail="in E and ι = log(HSA/δ_u); not a privacy parameter",
    )
    params.given("reward range", [0.0, 1.0], Source.DEFAULT, "rewards are clipped to [0, 1]")
    config = APVIConfig(bonus=s.bonus, bonus_scale=s.bonus_scale, delta=delta)  # type: ignore[arg-type]
    if s.env is not None:
        _run_env(s, config, params)
    else:
        _run_data(s, config, params)


def _check_sizes(H: int, S: int, A: int, n: int) -> None:
    """Refuse, before any work, sizes whose arrays cannot fit (all public)."""
    if H * S * S * A > MAX_ENTRIES:
        raise CliError(
            f"H·S²·A transition counts (H={H}, S={S}, A={A}) exceed the limit of "
            f"{MAX_ENTRIES:.0e} entries (memory); use fewer states, actions or steps"
        )
    if n * (H + 1) > MAX_ENTRIES:
        raise CliError(
            f"n·(H+1) steps (n={n} trajectories, H={H}) exceed the limit of {MAX_ENTRIES:.0e} "
            "entries (memory); use fewer trajectories or a shorter horizon"
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
    if r.dtype.kind not in "biuf" or not np.all(np.isfinite(r)) or r.min() < 0 or r.max() > 1:
        raise CliError("--reward-table values must be numbers in [0, 1]")
    return r.astype(np.float64)


def _planned_report(
    algo: str, H: int, S: int, A: int, privacy: Any, config: Any, reward_given: bool, params: Any
) -> Any:
    """The run's releases (same events, sizes) from public parameters only, for the ledger;
    the noise they imply is recorded as derived public parameters."""
    from privrl.offline.apvi import RELATION, UNIT, noise_plan
    from privrl.privacy.report import PrivacyReport

    plan = noise_plan(H, S, A, privacy, config.delta, reward_sums=not reward_given)
    m = len(plan.families)
    params.derive("released count families m", m, " + ".join(plan.families))
    if plan.mechanism == "gaussian":
        params.derive("ℓ2 sensitivity per family Δ₂", plan.sensitivity, "√(2H)")
        params.derive("Gaussian σ per count", plan.scale, f"√({m}H/ρ)")
    elif plan.mechanism == "laplace":
        params.derive("ℓ1 sensitivity per family Δ₁", plan.sensitivity, "2H")
        params.derive("Laplace scale b per count", plan.scale, f"{m}·2H/ε")
    params.derive("error bound E", plan.E, "2 × the noise's tail bound at δ_u (0 with no noise)")
    params.derive("ι", plan.iota, "log(HSA/δ_u)")
    releases = plan.releases_planned(H, S, A)
    if privacy is None:
        return PrivacyReport.non_private(UNIT, RELATION, releases, system=algo)
    delta = privacy.report_delta if privacy.mechanism == "gaussian" else 0.0
    return PrivacyReport.build(UNIT, RELATION, releases, delta, system=algo)


def _run_env(s: _Settings, config: Any, params: Any) -> None:
    from privrl.envs.tabular import TabularMDP, behaviour_policy_full_support
    from privrl.experiments.rundir import ledger_guard
    from privrl.offline.apvi import dp_apvi

    if s.env not in ENVS:
        raise CliError(f"unknown --env {s.env!r}; available: {', '.join(ENVS)}")
    if s.episodes is None:
        raise CliError("--env needs --episodes N (how many trajectories to sample)")
    if s.reward_table is not None:
        raise CliError("--reward-table is for --data (the environment's reward is known)")
    why = "the simulated MDP's size (a public choice)"
    H, S, A = (
        params.resolve(name, flag=flag, default=ENV_DEFAULTS[key], fix="", detail=why)
        for name, flag, key in (
            ("horizon H", s.horizon, "horizon"),
            ("number of states S", s.states, "states"),
            ("number of actions A", s.actions, "actions"),
        )
    )
    n = params.resolve("number of trajectories n", flag=s.episodes, fix="pass --episodes N")
    _check_sizes(H, S, A, n)
    privatize = s.privacy is not None and s.privacy.privatize_rewards
    planned = _planned_report(s.algo, H, S, A, s.privacy, config, not privatize, params)
    min_prob = 0.25 / A
    mdp_seed, behaviour_seed, data_seed, noise_seed = np.random.SeedSequence(s.seed).spawn(4)
    console = Console()
    # No dataset, so no ledger; the guard still validates --out before any work.
    with ledger_guard(None, planned, label=s.algo, out=s.out):
        mdp = TabularMDP.random(S, A, H, rng=np.random.default_rng(mdp_seed))
        behaviour = behaviour_policy_full_support(
            np.random.default_rng(behaviour_seed), H, S, A, min_prob
        )
        with console.status(f"sampling {n} trajectories from a random MDP"):
            ep = mdp.sample_arrays(behaviour, n, rng=np.random.default_rng(data_seed))
        with console.status(f"running {s.algo}"):
            result = dp_apvi(
                ep,
                horizon=H,
                n_states=S,
                n_actions=A,
                privacy=s.privacy,
                config=config,
                reward=None if privatize else mdp.R,
                rng=np.random.default_rng(noise_seed),
            )
        result.report.with_public_parameters(params)
        v_star = mdp.optimal_value()
        v_pi = float(mdp.value(result.policy.actions))
        source = {
            "env": s.env,
            "episodes": n,
            "behaviour": f"full support, π_h(a|s) ≥ {min_prob:g} (0.25/A)",
            "reward": "private (noisy sums)" if privatize else "public (the MDP's mean reward)",
        }
        extra_metrics = {
            "suboptimality": v_star - v_pi,
            "optimal_value": v_star,
            "policy_value": v_pi,
            "pessimistic_value": float(mdp.d1 @ result.values.V[0]),
        }
        metrics = _write_run(s, source, H, S, A, config, result, extra_metrics)
    _print_summary(s, source, H, S, A, result, metrics, console)


def _discrete_n(space: Any) -> int | None:
    """n of a Discrete(n) space starting at 0 (what S or A can be read from), else None."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete) and int(space.start) == 0:
        return int(space.n)
    return None


def _public_sizes(s: _Settings, header: Any, params: Any) -> tuple[int, int, int, int]:
    """H, S, A and n from flags and the file's header only (never from the episodes)."""
    from gymnasium import spaces

    from privrl.privacy.public import Source, inferred_fields

    meta = header.metadata
    inferred = set(inferred_fields(meta))
    view = {
        "horizon": meta.horizon,
        "observation_space": _discrete_n(meta.observation_space),
        "action_space": _discrete_n(meta.action_space),
        "extra": meta.extra,
    }
    H = params.resolve(
        "horizon H",
        flag=s.horizon,
        metadata=view,
        key="horizon",
        fix="pass --horizon H (the steps of an episode; longer episodes are truncated to H)",
    )
    if s.horizon is not None and meta.horizon is not None and "horizon" not in inferred:
        if int(meta.horizon) != s.horizon:
            raise CliError(
                f"wrong horizon: the dataset's metadata says H = {meta.horizon}, --horizon is "
                f"{s.horizon}; drop --horizon or fix it"
            )
    sizes = []
    for key, flag, value, what in (
        ("observation_space", "--states", s.states, "states S"),
        ("action_space", "--actions", s.actions, "actions A"),
    ):
        space = getattr(meta, key)
        if key not in inferred and space is not None and not isinstance(space, spaces.Discrete):
            raise CliError(
                f"non-integer {what.split()[0]}: the dataset's metadata declares {space}; "
                f"DP-APVI is tabular and needs a Discrete {key.replace('_', ' ')}"
            )
        if key not in inferred and isinstance(space, spaces.Discrete) and int(space.start) != 0:
            raise CliError(
                f"the dataset's metadata declares {space}, which does not start at 0; DP-APVI "
                f"needs {what.split()[0]} as indices 0..n-1 (re-index them)"
            )
        declared = view[key] if key not in inferred else None
        if value is not None and declared is not None and value != declared:
            raise CliError(
                f"{flag} {value} contradicts the dataset's metadata ({space}); drop {flag} "
                "or fix it"
            )
        sizes.append(
            params.resolve(
                f"number of {what}",
                flag=value,
                metadata=view,
                key=key,
                fix=f"pass {flag} N (the size of the {key.replace('_', ' ')})",
            )
        )
    n = params.given(
        "number of trajectories n",
        int(header.n_episodes),
        Source.METADATA,
        "the file's header; fixed under replace-one neighbours",
    )
    return int(H), int(sizes[0]), int(sizes[1]), n


def _run_data(s: _Settings, config: Any, params: Any) -> None:
    from privrl.data.io import load_hdf5, read_header
    from privrl.experiments.rundir import ledger_guard
    from privrl.offline.apvi import dp_apvi

    assert s.data is not None
    if s.episodes is not None:
        raise CliError("--episodes is for --env (a dataset has its own episodes)")
    if s.data.is_dir():
        raise CliError(f"--data {s.data} is a directory; give the dataset file (.h5)")
    # Only the header (metadata, sizes) is read before the ledger check.
    header = read_header(s.data)
    privatize = s.privacy is not None and s.privacy.privatize_rewards
    if s.privacy is not None and s.reward_table is None and not privatize:
        raise CliError(
            "the rewards in --data are private: pass --reward-table FILE.npy (a public mean "
            "reward r_h(s,a)) or --privatize-rewards (spends part of the budget on reward sums)"
        )
    if privatize and s.reward_table is not None:
        raise CliError("give --reward-table or --privatize-rewards, not both")
    H, S, A, n = _public_sizes(s, header, params)
    if n < 1:
        raise CliError(f"the dataset {s.data} has no episodes")
    _check_sizes(H, S, A, n)
    reward = _load_reward(s.reward_table, H, S, A)
    planned = _planned_report(s.algo, H, S, A, s.privacy, config, reward is not None, params)
    console = Console()
    with ledger_guard(s.data, planned, label=s.algo, out=s.out) as reports:
        with console.status(f"reading {s.data}"):
            ds = load_hdf5(s.data)
        with console.status(f"running {s.algo} on {n} trajectories"):
            result = dp_apvi(
                ds,
                horizon=H,
                n_states=S,
                n_actions=A,
                privacy=s.privacy,
                config=config,
                reward=reward,
                rng=np.random.default_rng(np.random.SeedSequence(s.seed)),
            )
        result.report.with_public_parameters(params)
        source = {
            "data": str(s.data),
            "episodes": n,
            "reward": (
                f"public table {s.reward_table}"
                if s.reward_table is not None
                else "private (noisy sums)"
                if privatize
                else "empirical mean (non-private)"
            ),
        }
        metrics = _write_run(s, source, H, S, A, config, result, {})
        reports.append(result.report)
    _print_summary(s, source, H, S, A, result, metrics, console)


def _write_run(
    s: _Settings,
    source: dict[str, Any],
    H: int,
    S: int,
    A: int,
    config: Any,
    result: Any,
    extra_metrics: dict[str, float],
) -> dict[str, Any]:
    """The run directory; everything in it is public or post-processing of the releases."""
    from privrl.experiments.rundir import RunDir
    from privrl.offline.apvi import config_dict

    run = RunDir(s.out)
    run.write_config(
        {
            "command": f"privrl train {s.algo}",
            "algorithm": s.algo,
            "source": source,
            "horizon": H,
            "states": S,
            "actions": A,
            "seed": s.seed,
            **config_dict(config, s.privacy),
        }
    )
    report = result.report
    timings = dict(result.diagnostics["timings"])
    if s.privacy is not None:
        timings.pop("counting", None)  # time spent on the raw private data is not published
    metrics: dict[str, Any] = {
        **extra_metrics,
        "epsilon": report.epsilon,
        "delta": report.delta,
        "rho": report.rho,
        "E": result.plan.E,
        "iota": result.plan.iota,
        "noise_scale": result.plan.scale,
        "known_fraction": float(result.model.known.mean()),
        "all_values_zero": bool(float(result.values.V[0].max()) == 0.0),
        "pessimistic_value_mean_V1": float(result.values.V[0].mean()),
        "timings_seconds": timings,
    }
    run.write_metrics(metrics)
    run.write_curve(result.per_step)
    result.policy.save(run.artifact("policy.npz"))
    _plot_values(run.plot_path("value_per_step"), result.per_step, s.algo)
    _plot_bonus(run.plot_path("bonus_heatmap"), result.values.bonus, result.model.known, s.algo)
    run.write_privacy(report)
    return metrics


def _print_summary(
    s: _Settings,
    source: dict[str, Any],
    H: int,
    S: int,
    A: int,
    result: Any,
    metrics: dict[str, Any],
    console: Console,
) -> None:
    table = Table(title=f"{s.algo}: H={H}, S={S}, A={A}, {source['episodes']} trajectories")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in ("suboptimality", "policy_value", "optimal_value"):
        if key in metrics:
            table.add_row(key, f"{metrics[key]:.4f}")
    table.add_row("known (h,s,a) (ñ > E)", f"{metrics['known_fraction']:.1%}")
    table.add_row("E", f"{result.plan.E:.4g}")
    table.add_row("mean Ṽ_1 (pessimistic)", f"{metrics['pessimistic_value_mean_V1']:.4f}")
    console.print(table)
    if metrics["all_values_zero"]:
        console.print(
            "[yellow]warning:[/] every pessimistic value is 0, so the policy carries no "
            "information: the bonus exceeds the value range at this n (at --bonus-scale 1 the "
            "privacy term C2·S·H·E·ι/ñ needs ñ > C2·S·E·ι per pair). More data, a larger budget "
            "or a smaller --bonus-scale (chosen on other data, never on this dataset) would help."
        )
    result.report.print(console)
    console.print(
        f"wrote {s.out}/ (config.json, metrics.json, metrics.csv, privacy.json, policy.npz, plots/)"
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
    # One filled step curve, not one bar per step: a bar per step took ~40 s at H = 10⁴.
    axes[1].fill_between(
        h, [r["known_fraction"] for r in per_step], step="mid", color="tab:green", alpha=0.8
    )
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
