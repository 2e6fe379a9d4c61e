"""`privrl online sdp-pe | pe | ucbvi | dp-ucbvi`: online episodic RL with a privacy model.

Each episode is one user. SDP-PE is (ε, δ)-DP in the shuffle model (no trusted server);
DP-UCBVI is ε-JDP with `--privatizer central` (trusted server, binary-tree counts) or ε-LDP with
`--privatizer local`; PE and UCB-VI are the non-private versions. Regret is exact (backward
induction on the true MDP). Every run writes the run-directory contract: config.json,
metrics.json (final cumulative `regret`), metrics.csv (the regret curve), privacy.json and
plots/regret.png.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
from rich.table import Table

from privrl.cli.errors import (
    CliError,
    check_delta,
    check_epsilon,
    check_int,
    check_memory,
    check_number,
    check_out_dir,
    format_bytes,
    machine_memory,
)

if TYPE_CHECKING:
    from privrl.envs.tabular import TabularMDP
    from privrl.online.common import OnlineResult

online_app = typer.Typer(
    name="online",
    help=(
        "Online RL with privacy, one user per episode: SDP-PE (shuffle model), PE, UCB-VI and "
        "DP-UCBVI (central / local model). Exact regret; run directory with privacy.json."
    ),
    no_args_is_help=True,
    add_completion=False,
)

_ENV = typer.Option("riverswim", "--env", help="Environment: riverswim or random-tabular.")
_EPISODES = typer.Option(
    100_000, "--episodes", "-K", help="Number of episodes (users) K (must fit in memory)."
)
_STATES = typer.Option(None, "--states", "-S", help="States (riverswim 4, random-tabular 3).")
_ACTIONS = typer.Option(None, "--actions", "-A", help="Actions (random-tabular only; default 2).")
_HORIZON = typer.Option(None, "--horizon", "-H", help="Horizon H (riverswim 5, random-tabular 4).")
_OUT = typer.Option(..., "--out", "-o", help="Run directory.")
_SEED = typer.Option(0, "--seed", help="Seed (environment instance, episodes and noise).")
_BETA = typer.Option(
    0.1, "--beta", help="Utility failure probability β in ι and E (not a privacy parameter)."
)
_EPS = typer.Option(..., "--epsilon", help="Privacy budget ε (1e-6 to 100).")


# Memory model (measured: `online pe` holds ~16 bytes per episode at K = 10^7): the per-episode
# regret, its cumulative sum and the start states, plus the counts and models of the MDP, whose
# size is one "model" H·S·A·(S + 2) of float64. Copies of a model held at once: the MDP, its
# CDFs, counts, released counts and temporaries (16); the central privatizer adds two per tree
# level; the local privatizer pre-draws its noise for 512 users at a time.
_BYTES_PER_EPISODE = 32
_MODEL_COPIES = 16
_LOCAL_CHUNK = 512

# SDP-PE's tight calibration is exact over Bin(N, p) with N ≈ λ = 50·ln(2/δ')/ε'² trials per
# counter (ε' = ε/(6H), δ' = δ/(6H)); its cost grows with N (measured: λ ≈ 7e9, i.e. ε = 0.01
# at H = 5, takes minutes and 0.2 GB; λ ≈ 7e11 does not finish and takes GBs). Refused above:
_MAX_SHUFFLE_TRIALS = 1e10


def _check_common(env: str, episodes: int, seed: int, beta: float) -> None:
    from privrl.online.common import ENVS

    if env not in ENVS:
        raise CliError(f"unknown environment {env!r}; use one of: {', '.join(ENVS)}")
    check_int(episodes, "--episodes", minimum=1)
    check_int(seed, "--seed", minimum=0)
    check_number(beta, "--beta", gt=0, lt=1)


def _check_epsilon(epsilon: float) -> None:
    check_epsilon(epsilon)


def _check_delta(delta: float) -> None:
    check_delta(delta)


def _check_sizes(
    env: str,
    episodes: int,
    states: int | None,
    actions: int | None,
    horizon: int | None,
    privatizer: str,
) -> None:
    """Refuse up front what cannot fit in memory: the per-episode arrays and the model copies."""
    from privrl.privacy.tree import tree_levels

    for value, flag in ((states, "--states"), (actions, "--actions"), (horizon, "--horizon")):
        if value is not None:
            check_int(value, flag, minimum=1)
    if env == "riverswim" and actions not in (None, 2):
        raise CliError("riverswim has exactly 2 actions; remove --actions")
    S = states if states is not None else (4 if env == "riverswim" else 3)
    A = actions if actions is not None else 2
    H = horizon if horizon is not None else (5 if env == "riverswim" else 4)
    copies = _MODEL_COPIES
    if privatizer == "central":
        copies += 2 * tree_levels(episodes)
    elif privatizer == "local":
        copies += _LOCAL_CHUNK
    per_entry = 8.0 * copies  # bytes per model entry, all copies
    model_bytes = per_entry * H * S * A * (S + 2)
    episode_bytes = float(episodes) * _BYTES_PER_EPISODE
    if episode_bytes >= model_bytes:
        check_memory(
            "--episodes", episodes, _BYTES_PER_EPISODE, fixed_bytes=model_bytes, what="episode"
        )
        return
    available = machine_memory()
    if model_bytes + episode_bytes <= available:
        return
    room = max(available - episode_bytes, 0.0) / per_entry  # model entries that fit
    h_max = int(room // (S * A * (S + 2)))
    a_max = int(room // (H * S * (S + 2)))
    s_max = max(0, math.isqrt(int(room // (H * A)) + 1) - 1)  # S·(S+2) <= room / (H·A)
    limits = [f"{flag} {v}" for flag, v in (("--horizon", h_max), ("--states", s_max)) if v >= 1]
    if env != "riverswim" and a_max >= 1:
        limits.append(f"--actions {a_max}")
    fix = f"use at most {' or '.join(limits)}" if limits else "reduce --episodes"
    raise CliError(
        f"--states {S} --actions {A} --horizon {H} need about "
        f"{format_bytes(model_bytes + episode_bytes)} of memory (a model of H·S·A·(S+2) "
        f"entries, {copies} copies of 8 bytes), more than this machine's "
        f"{format_bytes(available)}; {fix} (with the others unchanged)"
    )


def _check_shuffle_noise(epsilon: float, delta: float, horizon: int) -> None:
    from privrl.privacy.shuffle import theory_lambda

    eps_c, delta_c = epsilon / (6 * horizon), delta / (6 * horizon)
    lam = theory_lambda(eps_c, delta_c)
    if lam <= _MAX_SHUFFLE_TRIALS:
        return
    # smallest ε with λ ≤ the cap: ε' = sqrt(50·ln(2/δ')/cap), ε = 6H·ε'
    least = 6 * horizon * math.sqrt(50.0 * math.log(2.0 / delta_c) / _MAX_SHUFFLE_TRIALS)
    raise CliError(
        f"--epsilon {epsilon:g} is too small for SDP-PE at H = {horizon}: each counter's "
        f"binomial noise would need ~{lam:.2g} trials (λ = 50·ln(2/δ')/ε'², ε' = ε/(6H)), more "
        f"than the {_MAX_SHUFFLE_TRIALS:.0e} its calibration can handle; use --epsilon >= "
        f"{least:.3g}"
    )


def _make_env(
    env: str, states: int | None, actions: int | None, horizon: int | None, seed: int
) -> TabularMDP:
    from privrl.online.common import make_env

    if env == "riverswim" and states is not None and states < 2:
        raise CliError("riverswim needs --states >= 2")
    try:
        return make_env(env, states=states, actions=actions, horizon=horizon, seed=seed)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _progress(console: Console, total: int, label: str) -> Progress:
    return Progress(
        f"[bold]{label}[/]",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


# ---------------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------------


@online_app.command("sdp-pe", no_args_is_help=True)
def sdp_pe_command(
    out: Path = _OUT,
    env: str = _ENV,
    episodes: int = _EPISODES,
    epsilon: float = _EPS,
    delta: float = typer.Option(1e-5, "--delta", help="Privacy δ in (0, 1)."),
    calibration: str = typer.Option(
        "tight", "--calibration", help="Binomial noise: tight (exact, default) or theory."
    ),
    states: int = _STATES,
    actions: int = _ACTIONS,
    horizon: int = _HORIZON,
    width_scale: float = typer.Option(1.0, "--width-scale", help="Elimination width scale c."),
    threshold_c1: float = typer.Option(1.0, "--threshold-c1", help="F threshold: c1·H²·ι."),
    threshold_c2: float = typer.Option(1.0, "--threshold-c2", help="F threshold: c2·H·E."),
    beta: float = _BETA,
    seed: int = _SEED,
) -> None:
    """SDP-PE: policy elimination with shuffle-private counts, (ε, δ)-DP in the shuffle model.

    Example: privrl online sdp-pe --env riverswim --episodes 1000000 --epsilon 10 --out runs/s
    """
    _check_epsilon(epsilon)
    _check_delta(delta)
    if calibration not in ("tight", "theory"):
        raise CliError(f"--calibration must be tight or theory, got {calibration!r}")
    if horizon is None or horizon >= 1:
        _check_shuffle_noise(epsilon, delta, horizon or (5 if env == "riverswim" else 4))
    _run_pe(
        out,
        env,
        episodes,
        states,
        actions,
        horizon,
        width_scale,
        threshold_c1,
        threshold_c2,
        beta,
        seed,
        epsilon=epsilon,
        delta=delta,
        calibration=calibration,
    )


@online_app.command("pe", no_args_is_help=True)
def pe_command(
    out: Path = _OUT,
    env: str = _ENV,
    episodes: int = _EPISODES,
    states: int = _STATES,
    actions: int = _ACTIONS,
    horizon: int = _HORIZON,
    width_scale: float = typer.Option(1.0, "--width-scale", help="Elimination width scale c."),
    threshold_c1: float = typer.Option(1.0, "--threshold-c1", help="F threshold: c1·H²·ι."),
    threshold_c2: float = typer.Option(1.0, "--threshold-c2", help="F threshold: c2·H·E."),
    beta: float = _BETA,
    seed: int = _SEED,
) -> None:
    """PE: SDP-PE's code with no privacy (raw counts) — the NON-PRIVATE baseline."""
    _run_pe(
        out,
        env,
        episodes,
        states,
        actions,
        horizon,
        width_scale,
        threshold_c1,
        threshold_c2,
        beta,
        seed,
    )


@online_app.command("ucbvi", no_args_is_help=True)
def ucbvi_command(
    out: Path = _OUT,
    env: str = _ENV,
    episodes: int = _EPISODES,
    states: int = _STATES,
    actions: int = _ACTIONS,
    horizon: int = _HORIZON,
    bonus_scale: float = typer.Option(1.0, "--bonus-scale", help="Bonus constant C."),
    beta: float = _BETA,
    seed: int = _SEED,
) -> None:
    """UCB-VI (Azar et al. 2017): optimistic value iteration every episode — NON-PRIVATE."""
    _run_ucbvi(out, env, episodes, states, actions, horizon, bonus_scale, beta, seed, "none", None)


@online_app.command("dp-ucbvi", no_args_is_help=True)
def dp_ucbvi_command(
    out: Path = _OUT,
    env: str = _ENV,
    episodes: int = _EPISODES,
    epsilon: float = _EPS,
    privatizer: str = typer.Option(
        "central", "--privatizer", help="central (ε-JDP, trusted server) or local (ε-LDP)."
    ),
    states: int = _STATES,
    actions: int = _ACTIONS,
    horizon: int = _HORIZON,
    bonus_scale: float = typer.Option(1.0, "--bonus-scale", help="Bonus constant C."),
    beta: float = _BETA,
    seed: int = _SEED,
) -> None:
    """DP-UCBVI (Qiao & Wang 2023): UCB-VI on private running counts (pure ε-DP).

    Example: privrl online dp-ucbvi --privatizer local --epsilon 1 --episodes 100000 --out runs/l
    """
    _check_epsilon(epsilon)
    if privatizer not in ("central", "local"):
        raise CliError(f"--privatizer must be central or local, got {privatizer!r}")
    _run_ucbvi(
        out, env, episodes, states, actions, horizon, bonus_scale, beta, seed, privatizer, epsilon
    )


# ---------------------------------------------------------------------------------------------
# implementation
# ---------------------------------------------------------------------------------------------


def _run_pe(
    out: Path,
    env: str,
    episodes: int,
    states: int | None,
    actions: int | None,
    horizon: int | None,
    width_scale: float,
    threshold_c1: float,
    threshold_c2: float,
    beta: float,
    seed: int,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    calibration: str = "tight",
) -> None:
    from privrl.online.privatizers import IdentityPrivatizer
    from privrl.online.sdp_pe import SDPPEConfig, make_shuffle_privatizer, sdp_pe

    _check_common(env, episodes, seed, beta)
    for value, flag in (
        (width_scale, "--width-scale"),
        (threshold_c1, "--threshold-c1"),
        (threshold_c2, "--threshold-c2"),
    ):
        check_number(value, flag, ge=0)
    _check_sizes(env, episodes, states, actions, horizon, "shuffle" if epsilon else "none")
    check_out_dir(out)
    mdp = _make_env(env, states, actions, horizon, seed)
    cfg = SDPPEConfig(
        beta=beta, width_scale=width_scale, threshold_c1=threshold_c1, threshold_c2=threshold_c2
    )
    env_ss, noise_ss = np.random.SeedSequence(seed).spawn(2)
    private = epsilon is not None
    algo = "sdp-pe" if private else "pe"
    if private:
        priv = make_shuffle_privatizer(
            mdp,
            episodes,
            epsilon=epsilon,
            delta=delta,  # type: ignore[arg-type]
            rng=np.random.default_rng(noise_ss),
            calibration=calibration,  # type: ignore[arg-type]
            config=cfg,
        )
    else:
        priv = IdentityPrivatizer()
    console = Console(stderr=True)
    t0 = time.perf_counter()
    with _progress(console, episodes, algo) as bar:
        task = bar.add_task(algo, total=episodes)
        try:
            result = sdp_pe(
                mdp,
                episodes,
                priv,
                rng=np.random.default_rng(env_ss),
                config=cfg,
                progress=lambda n: bar.advance(task, n),
                system=algo,
            )
        except ValueError as exc:
            raise CliError(str(exc)) from None
    config = {
        "algorithm": algo,
        "env": env,
        "S": mdp.S,
        "A": mdp.A,
        "H": mdp.H,
        "episodes": episodes,
        "seed": seed,
        "epsilon": epsilon,
        "delta": delta,
        "calibration": calibration if private else None,
        **result.info,
    }
    extra = {"stages": result.log, "policies": result.info["policies"]}
    if private:
        given = {"S": states, "A": actions, "H": horizon}
        result.report.with_public_parameters(
            _public_parameters(
                env, given, mdp, episodes, epsilon=epsilon, delta=delta, calibration=calibration
            )
        )
    _write(out, algo, config, result, extra, time.perf_counter() - t0, mdp)


def _run_ucbvi(
    out: Path,
    env: str,
    episodes: int,
    states: int | None,
    actions: int | None,
    horizon: int | None,
    bonus_scale: float,
    beta: float,
    seed: int,
    privatizer: str,
    epsilon: float | None,
) -> None:
    from privrl.online.ucbvi import UCBVIConfig, ucbvi

    _check_common(env, episodes, seed, beta)
    check_number(bonus_scale, "--bonus-scale", ge=0)
    _check_sizes(env, episodes, states, actions, horizon, privatizer)
    check_out_dir(out)
    mdp = _make_env(env, states, actions, horizon, seed)
    algo = "ucbvi" if privatizer == "none" else f"dp-ucbvi-{privatizer}"
    console = Console(stderr=True)
    t0 = time.perf_counter()
    with _progress(console, episodes, algo) as bar:
        task = bar.add_task(algo, total=episodes)
        result = ucbvi(
            mdp,
            episodes,
            seeds=[seed],
            privatizer=privatizer,
            epsilon=epsilon,
            config=UCBVIConfig(bonus_scale=bonus_scale, beta=beta),
            progress=lambda n: bar.advance(task, n),
        )[0]
    config = {
        "algorithm": algo,
        "env": env,
        "S": mdp.S,
        "A": mdp.A,
        "H": mdp.H,
        "episodes": episodes,
        "seed": seed,
        "epsilon": epsilon,
        **result.info,
    }
    if privatizer != "none":
        given = {"S": states, "A": actions, "H": horizon}
        result.report.with_public_parameters(
            _public_parameters(env, given, mdp, episodes, epsilon=epsilon, privatizer=privatizer)
        )
    _write(out, algo, config, result, {}, time.perf_counter() - t0, mdp)


def _public_parameters(
    env: str,
    given: dict[str, int | None],
    mdp: TabularMDP,
    episodes: int,
    **privacy: Any,
) -> Any:
    """What sets the noise of the private online runs — the environment's S, A, H, the number
    of users K and the privacy flags — with its public source (the users are simulated from a
    public environment; nothing here is read off their data)."""
    from privrl.privacy.public import PublicParameters, Source

    params = PublicParameters()
    for name, value in (("S", mdp.S), ("A", mdp.A), ("H", mdp.H)):
        flag = given.get(name)
        if flag is not None:
            params.given(f"{name}", int(flag), Source.FLAG)
        else:
            params.given(f"{name}", int(value), Source.DEFAULT, f"the {env} environment")
    params.given("episodes (users) K", int(episodes), Source.FLAG, "--episodes")
    for name, value in privacy.items():
        if value is not None:
            params.given(name, value, Source.FLAG, f"--{name.replace('_', '-')}")
    return params


def _write(
    out: Path,
    algo: str,
    config: dict[str, Any],
    result: OnlineResult,
    extra: dict[str, Any],
    seconds: float,
    mdp: TabularMDP,
) -> None:
    from privrl.experiments.rundir import RunDir
    from privrl.online.common import checkpoints

    run = RunDir(out)
    run.write_config(config)
    cum = result.cumulative_regret
    K = result.episodes
    tail = max(1, K // 10)
    metrics = {
        "regret": float(cum[-1]),
        "episodes": K,
        "regret_per_episode_last_10pct": float(result.regret[-tail:].mean()),
        "optimal_value": float(mdp.optimal_value()),
        "epsilon": result.report.epsilon,
        "delta": result.report.delta,
        "model": result.report.model,
        "wall_time_s": seconds,
        **extra,
    }
    run.write_metrics(metrics)
    grid = checkpoints(K)
    run.write_curve([{"episode": int(k), "regret": float(cum[k - 1])} for k in grid])
    run.write_privacy(result.report)
    _plot(run.plot_path("regret"), grid, cum[grid - 1], algo, result)
    console = Console()
    table = Table(title=f"privrl online {algo}: {K} episodes")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("cumulative regret", f"{cum[-1]:.4g}")
    table.add_row("regret / episode (last 10%)", f"{metrics['regret_per_episode_last_10pct']:.4g}")
    table.add_row("V*(s1)", f"{metrics['optimal_value']:.4g}")
    table.add_row("wall time", f"{seconds:.1f} s")
    console.print(table)
    result.report.print(console)
    console.print(f"run directory: {out}")


def _plot(path: Path, grid: np.ndarray, curve: np.ndarray, algo: str, result: OnlineResult) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(grid, curve, label=algo)
    ends = np.cumsum([3 * e["T"] for e in result.log])
    for end in ends[ends < grid[-1]]:
        ax.axvline(end, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("episode")
    ax.set_ylabel("cumulative regret")
    ax.set_title(f"{algo}: {result.report.summary()[:60]}", fontsize=8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
