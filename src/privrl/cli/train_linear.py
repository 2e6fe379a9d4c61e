"""`privrl train dp-vapvi | vapvi | pevi`: offline RL on linear MDPs (Qiao & Wang; Jin et al.).

Data come either from a user's dataset (``--data FILE --features SPEC``) or are sampled from
the built-in linear MDP (``--env linear-mdp --episodes K [--instance I]``), in which case the
run also reports the exact suboptimality of the learned policy.

``--features SPEC`` is

* a ``.npy`` file holding a float array ``[S, A, d]``: φ(s, a) for integer states
  ``0..S-1`` and actions ``0..A-1`` (rescaled by its max norm if that exceeds 1 — public
  post-processing that the guarantee's ``‖φ‖ ≤ 1`` needs); or
* ``module:function``: an importable function taking no arguments that returns such an array
  (features computed in code).

States must be integer indices: continuous observations are refused (discretise them and
build a table). Without ``--features``, a dataset sampled from the built-in linear MDP
(``privrl.envs.linear``) rebuilds its table from the recipe in its metadata.

Public parameters. H sets ρ/(5H), the sensitivities and the number of releases, so it is
``--horizon`` or the dataset's metadata (the environment's with ``--env``) — never the longest
episode; without one the run is refused. The feature table fixes S, A and d; ρ, δ and the
reward range complete the list, which privacy.json gives with each source
(`privrl.privacy.public.PublicParameters`). The number of episodes K comes from the file's
header (public under replace-one neighbours). The data are fitted to these by fixed rules
(`privrl.offline.common`: longer episodes truncated to H, steps outside the table masked,
rewards clipped to [0, 1]), never refused by a value of the data; DP-VAPVI refuses a dataset
with a unit_ids field (a schema decision: it protects one trajectory).

Every run writes the run directory contract (config.json, metrics.json, metrics.csv,
privacy.json, plots/values.png) and ``policy.npz`` (reload with
``privrl.offline.vapvi.load_policy``). Only the dataset file's header is read before its
ledger is checked (``--out`` is validated first); the episodes are read and the whole run
directory written inside the guard, which records the private run's report only then.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import typer
from gymnasium import spaces

from privrl.cli.errors import CliError, check_int

ENV_NAMES = ("linear-mdp",)


def register(app: typer.Typer) -> None:
    """Add this module's commands to `privrl train`."""
    app.command("dp-vapvi")(train_dp_vapvi)
    app.command("vapvi")(train_vapvi)
    app.command("pevi")(train_pevi)


# --------------------------------------------------------------------------------------------
# options shared by the three commands
# --------------------------------------------------------------------------------------------

_DATA = typer.Option(None, "--data", help="Dataset file (privrl HDF5) with integer states.")
_FEATURES = typer.Option(
    None,
    "--features",
    help="Feature table: a .npy array [S, A, d], or module:function returning one. Optional "
    "for data sampled from the built-in linear MDP.",
)
_ENV = typer.Option(
    None, "--env", help="Sample the data from a built-in environment instead: linear-mdp."
)
_EPISODES = typer.Option(None, "--episodes", "-K", help="Episodes to sample (with --env).")
_INSTANCE = typer.Option(0, "--instance", help="Instance of the built-in linear MDP (--env).")
_SEED = typer.Option(0, "--seed", help="Seed for sampling (--env), the split and the noise.")
_BONUS = typer.Option(
    1.0, "--bonus-scale", "-C", help="Multiplier C of the pessimism bonus (1 = theory)."
)
_LAMBDA = typer.Option(1.0, "--lambda", help="Ridge parameter λ.")
_HORIZON = typer.Option(
    None,
    "--horizon",
    help="Horizon H (default: the dataset's metadata, or the environment's; never taken from "
    "the data). Longer episodes are truncated to H.",
)

# Largest array a run builds (the [K, H] episode arrays, Q̂ [H, S, A], Λ̃ [H, d, d]).
MAX_ENTRIES = 50_000_000
# ρ outside this range makes the noise numerically meaningless (or absent: use `vapvi`).
BUDGET_RANGE = (1e-6, 1e6)
# A ridge λ below this can leave Λ numerically singular (a Cholesky failure on some data).
LAMBDA_RANGE = (1e-6, 1e6)
DEFAULT_DELTA = 1e-5
DEFAULT_FAILURE_PROB = 0.05
DEFAULT_MATRIX_NOISE = "strict"


def _out_option(name: str) -> Any:
    return typer.Option(Path("runs") / name, "--out", "-o", help="Run directory to write.")


@dataclass
class _Inputs:
    """What a command needs once the options are checked (the data are read in `_load`)."""

    data_path: Path | None
    features: str | None
    env: str | None
    episodes: int | None
    instance: int
    seed: int
    horizon: int | None


def _check_source(inputs: _Inputs) -> None:
    if (inputs.data_path is None) == (inputs.env is None):
        raise CliError(
            "give exactly one data source: --data FILE [--features SPEC], or --env linear-mdp "
            "--episodes K"
        )
    if inputs.env is not None:
        if inputs.env not in ENV_NAMES:
            raise CliError(f"unknown --env {inputs.env!r}; available: {', '.join(ENV_NAMES)}")
        if inputs.episodes is None or inputs.episodes < 1:
            raise CliError("--env needs --episodes K with K >= 1")
        if inputs.features is not None:
            raise CliError("--features is for --data; the environment brings its own features")
    else:
        assert inputs.data_path is not None
        if inputs.data_path.is_dir():
            raise CliError(f"--data {inputs.data_path} is a directory; give the dataset file")
        if not inputs.data_path.is_file():
            raise CliError(f"--data: file not found: {inputs.data_path}")
        if inputs.episodes is not None:
            raise CliError("--episodes is for --env; with --data all episodes of the file are used")
    if inputs.horizon is not None and inputs.horizon < 1:
        raise CliError(f"--horizon must be >= 1, got {inputs.horizon}")


def _check_common(bonus_scale: float, lam: float) -> None:
    if not (math.isfinite(bonus_scale) and bonus_scale >= 0):
        raise CliError(f"--bonus-scale must be finite and >= 0, got {bonus_scale}")
    lo, hi = LAMBDA_RANGE
    if not lo <= lam <= hi:
        raise CliError(
            f"--lambda must be in [{lo:g}, {hi:g}], got {lam:g} (a smaller ridge can leave Λ "
            "numerically singular)"
        )


def _load_feature_spec(spec: str) -> np.ndarray:
    """A feature table from ``path.npy`` or ``module:function``."""
    path = Path(spec)
    if spec.endswith(".npy") or path.is_file():
        if not path.is_file():
            raise CliError(f"--features: file not found: {spec}")
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CliError(f"--features: cannot read {spec} as a .npy array ({exc})") from None
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise CliError(f"--features: cannot import {spec!r} ({exc})") from None
        if not callable(fn):
            raise CliError(f"--features: {spec!r} is not a function")
        try:
            return np.asarray(fn())
        except Exception as exc:  # the user's code: any failure is bad input here
            raise CliError(
                f"--features: calling {spec}() failed ({type(exc).__name__}: {exc}); it must take "
                "no arguments and return an array [S, A, d]"
            ) from None
    raise CliError(
        f"--features: {spec!r} is neither a .npy file nor module:function (a zero-argument "
        "function returning an array [S, A, d])"
    )


@dataclass
class _Public:
    """What is known before the ledger check: all public (flags, header, feature table)."""

    features: Any  # FeatureTable
    mdp: Any  # LinearMDP | None: the true model when known (exact suboptimality)
    H: int
    K: int
    source: str


@dataclass
class _Loaded:
    episodes: Any  # LinearEpisodes
    features: Any  # FeatureTable
    mdp: Any  # LinearMDP | None
    source: str
    dataset: Any  # TrajectoryDataset


def _prepare(inputs: _Inputs, params: Any) -> _Public:
    """The features, H and K from flags, the file's header and the feature table only (the
    episodes are not read), each recorded as a public parameter."""
    from privrl.data.io import read_header
    from privrl.envs.linear import LinearMDP, linear_mdp_from_metadata
    from privrl.offline.vapvi import FeatureTable
    from privrl.privacy.public import Source

    if inputs.env is not None:
        mdp = LinearMDP.qiao_wang(inputs.instance)
        # φ is already divided by its max norm (mdp.scale = √7); record that factor.
        table = FeatureTable(phi=mdp.phi, scale=mdp.scale, source=f"{inputs.env}:{inputs.instance}")
        where = (Source.DEFAULT, f"the built-in {inputs.env} instance {inputs.instance}")
        H = params.resolve(
            "horizon H", flag=inputs.horizon, default=mdp.H, fix="", detail="the environment's"
        )
        K = params.resolve("number of trajectories K", flag=inputs.episodes, fix="pass --episodes")
        source = f"{K} episodes sampled from {inputs.env} instance {inputs.instance}"
        _check_sizes(max(H, mdp.H), table, K, h_flag="--horizon", k_flag="--episodes")
    else:
        assert inputs.data_path is not None
        header = read_header(inputs.data_path)
        meta = header.metadata
        recorded = meta.extra.get("linear_mdp")
        mdp = linear_mdp_from_metadata(meta.extra)
        if inputs.features is not None:
            try:
                table = FeatureTable.from_array(
                    _load_feature_spec(inputs.features), source=inputs.features
                )
            except ValueError as exc:
                raise CliError(f"--features: {exc}") from None
            if isinstance(recorded, dict) and recorded.get("dim") not in (None, table.d):
                raise CliError(
                    f"--features: feature dimension mismatch: the table has d = {table.d} but "
                    f"the dataset was sampled with d = {recorded['dim']} features"
                )
            if mdp is not None and (
                mdp.phi.shape != table.phi.shape or not np.allclose(mdp.phi, table.phi)
            ):
                mdp = None  # user features differ from the generating model: no exact metric
            where = (Source.FLAG, f"--features {inputs.features}")
        elif mdp is not None:
            table = FeatureTable(
                phi=mdp.phi,
                scale=mdp.scale,
                source=f"linear-mdp:{mdp.recipe.get('instance')} (from metadata)",
            )
            where = (Source.METADATA, "the linear-MDP recipe in metadata field 'linear_mdp'")
        else:
            raise CliError(
                "--features SPEC is required: the dataset records no built-in feature map "
                "(give a .npy array [S, A, d] or module:function)"
            )
        _check_spaces(meta, table)
        H = params.resolve(
            "horizon H",
            flag=inputs.horizon,
            metadata=meta,
            key="horizon",
            fix="pass --horizon H (the steps of an episode; longer episodes are truncated to H)",
        )
        K = params.given(
            "number of trajectories K",
            int(header.n_episodes),
            Source.METADATA,
            "the file's header; fixed under replace-one neighbours",
        )
        if K < 1:
            raise CliError(f"the dataset {inputs.data_path} has no episodes")
        source = str(inputs.data_path)
        h_flag = "--horizon" if inputs.horizon is not None else "the metadata's horizon H"
        _check_sizes(H, table, K, h_flag=h_flag, k_flag="the dataset's episode count K")
    params.given("feature table [S, A, d]", [table.S, table.A, table.d], *where)
    params.derive(
        "feature scale", table.scale, "the table's max norm if above 1, which it is divided by"
    )
    params.given("reward range", [0.0, 1.0], Source.DEFAULT, "rewards are clipped to [0, 1]")
    params.derive("value range", [0.0, float(H)], "[0, H]; values are clipped to it")
    return _Public(table, mdp, int(H), int(K), source)


def _check_sizes(H: int, table: Any, K: int, *, h_flag: str, k_flag: str) -> None:
    """Refuse, before any work, sizes whose arrays cannot fit (all public), naming the flag
    (or the source) of the size at fault and the largest value that fits."""
    per_step = max(table.S * table.A, table.d * table.d)
    check_int(
        H,
        h_flag,
        minimum=None,
        maximum=MAX_ENTRIES // per_step,
        why=f"H·S·A and H·d² with S={table.S}, A={table.A}, d={table.d} must stay within "
        f"the limit of {MAX_ENTRIES:.0e} entries (memory)",
    )
    check_int(
        K,
        k_flag,
        minimum=None,
        maximum=MAX_ENTRIES // max(H, 1),
        why=f"K·H with H={H} must stay within the limit of {MAX_ENTRIES:.0e} entries (memory); "
        "or use a shorter horizon",
    )


def _load(inputs: _Inputs, public: _Public, rng: np.random.Generator) -> _Loaded:
    """Read (or sample) the episodes — inside the ledger guard; bad input → CliError."""
    from privrl.data.io import load_hdf5
    from privrl.offline.vapvi import LinearEpisodes

    table = public.features
    if inputs.env is not None:
        dataset = public.mdp.sample(public.K, rng=rng)
    else:
        assert inputs.data_path is not None
        dataset = load_hdf5(inputs.data_path)
    try:
        episodes = LinearEpisodes.from_dataset(
            dataset, n_states=table.S, n_actions=table.A, horizon=public.H
        )
    except ValueError as exc:
        raise CliError(f"{exc}") from None
    return _Loaded(episodes, table, public.mdp, public.source, dataset)


def _check_spaces(meta: Any, table: Any) -> None:
    """The metadata's declared spaces against the feature table (public: spaces marked as
    inferred from the data are not compared — the data are fitted to the table instead)."""
    from privrl.privacy.public import inferred_fields

    inferred = set(inferred_fields(meta))
    obs_space = None if "observation_space" in inferred else meta.observation_space
    act_space = None if "action_space" in inferred else meta.action_space
    if obs_space is not None and not isinstance(obs_space, spaces.Discrete):
        raise CliError(
            f"non-integer states: the observation space is {obs_space}, but a feature table "
            "needs integer states (Discrete); discretise the observations first"
        )
    if act_space is not None and not isinstance(act_space, spaces.Discrete):
        raise CliError(
            f"non-integer actions: the action space is {act_space}, but a feature table needs "
            "integer actions (Discrete)"
        )
    for space in (obs_space, act_space):
        if isinstance(space, spaces.Discrete) and int(space.start) != 0:
            raise CliError(
                f"the dataset's metadata declares {space}, which does not start at 0; a feature "
                "table indexes states and actions from 0 (re-index them)"
            )
    if isinstance(obs_space, spaces.Discrete) and int(obs_space.n) > table.S:
        raise CliError(
            f"--features: feature dimension mismatch: the table has S = {table.S} states but "
            f"the dataset's observation space has {int(obs_space.n)}"
        )
    if isinstance(act_space, spaces.Discrete) and int(act_space.n) != table.A:
        raise CliError(
            f"--features: feature dimension mismatch: the table has A = {table.A} actions but "
            f"the dataset's action space has {int(act_space.n)}"
        )


# --------------------------------------------------------------------------------------------
# outputs
# --------------------------------------------------------------------------------------------


def _write_run(
    out: Path,
    *,
    algorithm: str,
    config: dict[str, Any],
    loaded: _Loaded,
    result: Any,
) -> dict[str, Any]:
    """Run directory: config.json, metrics.json, metrics.csv, privacy.json, plots, policy.npz."""
    from privrl.experiments.rundir import RunDir

    run = RunDir(out)
    run.write_config(config)
    H = loaded.episodes.H
    metrics: dict[str, Any] = {
        "algorithm": algorithm,
        "K": loaded.episodes.K,
        "H": H,
        "d": loaded.features.d,
        "epsilon": result.report.epsilon,
        "delta": result.report.delta,
        "rho": result.report.rho,
        # Post-processing of the releases: the pessimistic value Ṽ_1 per state.
        "pessimistic_value_per_state": result.v[0].tolist(),
    }
    policy_curve = None
    mdp = loaded.mdp
    if mdp is not None and mdp.H == H:
        evaluation = mdp.tabular().evaluate(result.policy.actions, return_q=False)
        _, v_star, _ = mdp.tabular().backward_induction()
        v_pi = float(evaluation.value)
        metrics.update(
            {
                "suboptimality": mdp.optimal_value() - v_pi,
                "v_star": mdp.optimal_value(),
                "policy_value": v_pi,
                "pessimistic_value": float(mdp.d1 @ result.v[0]),
            }
        )
        policy_curve = (np.asarray(evaluation.V), np.asarray(v_star))
    run.write_metrics(metrics)
    rows = []
    for h in range(H):
        row: dict[str, Any] = {
            "h": h + 1,
            "pessimistic_value_mean": float(result.v[h].mean()),
            "bonus_mean": float(result.bonus[h].mean()),
            "q_zero_fraction": float(np.mean(result.q[h] == 0.0)),
        }
        if policy_curve is not None:
            row["policy_value_mean"] = float(policy_curve[0][h].mean())
            row["optimal_value_mean"] = float(policy_curve[1][h].mean())
        rows.append(row)
    run.write_curve(rows)
    run.write_privacy(result.report)
    result.policy.save(run.artifact("policy.npz"))
    _plot_values(run.plot_path("values"), result, policy_curve, algorithm)
    return metrics


def _plot_values(path: Path, result: Any, curve: Any, algorithm: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    H = result.q.shape[0]
    steps = np.arange(1, H + 1)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for s in range(result.v.shape[1]):
        ax.plot(steps, result.v[:H, s], "o-", ms=3, label=f"pessimistic Ṽ_h(s={s})")
        if curve is not None:
            ax.plot(steps, curve[0][:H, s], "--", label=f"true V^π̂_h(s={s})")
            ax.plot(steps, curve[1][:H, s], ":", color="gray", label=f"V*_h(s={s})")
        if s >= 4:  # keep the legend readable for larger state sets
            break
    ax.set_xlabel("step h")
    ax.set_ylabel("value")
    ax.set_title(f"{algorithm}: values by step")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _summary(out: Path, metrics: dict[str, Any], report: Any) -> None:
    """Print the guarantee, one row per kind of release (the 5H rows are in privacy.json),
    the report's notes and the headline metrics."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    console.print(Text(report.summary()))
    if report.releases:
        kinds: dict[str, list[Any]] = {}
        for r in report.releases:
            kinds.setdefault(r.name.split(", step")[0], []).append(r)
        table = Table()
        for col in ("release (every step h)", "mechanism", "sensitivity", "noise", "count"):
            table.add_column(col)
        for name, rs in kinds.items():
            r = rs[0]
            noise = ", ".join(f"{k}={v:.4g}" for k, v in r.noise.items())
            table.add_row(
                Text(name), r.mechanism, f"{r.sensitivity:.4g} ({r.norm})", noise, str(len(rs))
            )
        console.print(table)
    for note in report.notes:
        console.print(Text(f"note: {note}"))
    line = f"K = {metrics['K']}, H = {metrics['H']}, d = {metrics['d']}"
    if "suboptimality" in metrics:
        line += (
            f"; suboptimality v* − v^π̂ = {metrics['suboptimality']:.4f} "
            f"(v* = {metrics['v_star']:.4f})"
        )
    console.print(Text(line))
    typer.echo(
        f"wrote {out}/ (config.json, metrics.json, metrics.csv, privacy.json, policy.npz, "
        "plots/values.png)"
    )


def _base_config(algorithm: str, inputs: _Inputs, loaded: _Loaded, **extra: Any) -> dict[str, Any]:
    if "lam" in extra:
        extra["lambda"] = extra.pop("lam")
    return {
        "command": f"privrl train {algorithm}",
        "algorithm": algorithm,
        "data": None if inputs.data_path is None else str(inputs.data_path),
        "env": inputs.env,
        "episodes": inputs.episodes,
        "instance": inputs.instance if inputs.env is not None else None,
        "features": loaded.features.source,
        "feature_scale": loaded.features.scale,
        "horizon": loaded.episodes.H,
        "seed": inputs.seed,
        **extra,
    }


def _rngs(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """(sampling, algorithm) generators from one seed."""
    data_ss, algo_ss = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(data_ss), np.random.default_rng(algo_ss)


# --------------------------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------------------------


def _check_budget(rho: float) -> None:
    lo, hi = BUDGET_RANGE
    if not lo <= rho <= hi:  # also refuses NaN
        hint = " (for no privacy use `vapvi`)" if rho > hi else ""
        raise CliError(
            f"--rho must be in [{lo:g}, {hi:g}], got {rho:g}: outside it the noise is "
            f"numerically meaningless{hint}"
        )


def train_dp_vapvi(
    rho: float = typer.Option(..., "--rho", help="zCDP budget ρ of the whole run, in [1e-6, 1e6]."),
    data: Path = _DATA,
    features: str = _FEATURES,
    env: str = _ENV,
    episodes: int = _EPISODES,
    instance: int = _INSTANCE,
    out: Path = _out_option("dp-vapvi"),
    seed: int = _SEED,
    bonus_scale: float = _BONUS,
    matrix_noise: str = typer.Option(
        None,
        "--matrix-noise",
        help="Gram-matrix noise: strict (default; ρ-zCDP under replace-one) or paper_exact "
        "(Algorithm 2's s² = 1/(4ρ0); the report then states 7ρ/5).",
    ),
    delta: float = typer.Option(None, "--delta", help="δ at which ε is reported (default 1e-5)."),
    failure_prob: float = typer.Option(
        None, "--failure-prob", help="Utility failure probability in the PD shift E (default 0.05)."
    ),
    lam: float = _LAMBDA,
    additive_bonus: float = typer.Option(
        0.0, "--additive-bonus", help="Numerator D of the additive D/K bonus (0 = off)."
    ),
    split: bool = typer.Option(False, "--split", help="Split the data into halves (D', D)."),
    horizon: int = _HORIZON,
) -> None:
    """DP-VAPVI (Qiao & Wang, Algorithm 2): ρ-zCDP for one trajectory under replace-one.

    The 5H statistics of variance-aware pessimistic value iteration are released with
    Gaussian noise (ρ/(5H) each); the privacy report lists every release. H, the feature
    table, ρ and δ are public (privacy.json lists each with its source); only the file's
    header is read before the dataset's ledger is checked.
    """
    from privrl.experiments.rundir import ledger_guard
    from privrl.offline.common import refuse_declared_units
    from privrl.offline.vapvi import (
        GRAM_SENSITIVITY,
        MATRIX_NOISE_MODES,
        N_RELEASES_PER_STEP,
        dp_vapvi,
        dp_vapvi_planned_report,
        gram_shift,
    )
    from privrl.privacy.public import PublicParameters

    _check_budget(rho)
    if matrix_noise is not None and matrix_noise not in MATRIX_NOISE_MODES:
        raise CliError(f"--matrix-noise must be strict or paper_exact, got {matrix_noise!r}")
    if delta is not None and not 0 < delta < 1:
        raise CliError(f"--delta must be in (0, 1), got {delta}")
    if failure_prob is not None and not 0 < failure_prob < 1:
        raise CliError(f"--failure-prob must be in (0, 1), got {failure_prob}")
    if not (math.isfinite(additive_bonus) and additive_bonus >= 0):
        raise CliError(f"--additive-bonus must be finite and >= 0, got {additive_bonus}")
    _check_common(bonus_scale, lam)
    inputs = _Inputs(data, features, env, episodes, instance, seed, horizon)
    _check_source(inputs)
    params = PublicParameters()
    rho = params.resolve("zCDP budget ρ", flag=rho, fix="pass --rho")
    matrix_noise = params.resolve(
        "Gram-matrix noise", flag=matrix_noise, default=DEFAULT_MATRIX_NOISE, fix=""
    )
    delta = params.resolve(
        "privacy δ",
        flag=delta,
        default=DEFAULT_DELTA,
        fix="",
        detail="the δ at which ρ-zCDP is stated as (ε, δ)",
    )
    failure_prob = params.resolve(
        "utility failure probability",
        flag=failure_prob,
        default=DEFAULT_FAILURE_PROB,
        fix="",
        detail="in the PD shift E; not a privacy parameter",
    )
    public = _prepare(inputs, params)
    H, d = public.H, public.features.d
    params.derive("number of releases", N_RELEASES_PER_STEP * H, "5H (5 statistics per step)")
    params.derive("ρ0 per release", rho / (N_RELEASES_PER_STEP * H), "ρ/(5H)")
    params.derive("ℓ2 sensitivity of Σφ̄Ṽ²", 2.0 * H**2, "2H²")
    params.derive("ℓ2 sensitivity of Σφ̄Ṽ and Σφ(r+Ṽ)/σ̃²", 2.0 * H, "2H")
    params.derive("Frobenius sensitivity of the Gram matrices", GRAM_SENSITIVITY, "√2")
    params.derive(
        "PD shift E",
        gram_shift(H, d, rho, failure_prob, matrix_noise),  # type: ignore[arg-type]
        "2√2·s·(2√d + √(2 log(2H/failure probability)))",
    )
    planned = dp_vapvi_planned_report(rho, matrix_noise, delta)  # type: ignore[arg-type]
    data_rng, algo_rng = _rngs(seed)
    with ledger_guard(data, planned, label="privrl train dp-vapvi", out=out) as reports:
        loaded = _load(inputs, public, data_rng)
        refuse_declared_units(loaded.dataset, "DP-VAPVI")
        result = dp_vapvi(
            loaded.episodes,
            loaded.features,
            rho=rho,
            rng=algo_rng,
            delta=delta,
            failure_prob=failure_prob,
            matrix_noise=matrix_noise,  # type: ignore[arg-type]
            bonus_scale=bonus_scale,
            lam=lam,
            additive_bonus=additive_bonus,
            split=split,
        )
        result.report.with_public_parameters(params)
        config = _base_config(
            "dp-vapvi",
            inputs,
            loaded,
            rho=rho,
            matrix_noise=matrix_noise,
            delta=delta,
            failure_prob=failure_prob,
            bonus_scale=bonus_scale,
            lam=lam,
            additive_bonus=additive_bonus,
            split=split,
            E=result.diagnostics["E"],
        )
        metrics = _write_run(out, algorithm="dp-vapvi", config=config, loaded=loaded, result=result)
        reports.append(result.report)
    _summary(out, metrics, result.report)


def train_vapvi(
    data: Path = _DATA,
    features: str = _FEATURES,
    env: str = _ENV,
    episodes: int = _EPISODES,
    instance: int = _INSTANCE,
    out: Path = _out_option("vapvi"),
    seed: int = _SEED,
    bonus_scale: float = _BONUS,
    lam: float = _LAMBDA,
    additive_bonus: float = typer.Option(
        0.0, "--additive-bonus", help="Numerator of the additive ·/K bonus (theory: 2H³√d)."
    ),
    split: bool = typer.Option(False, "--split", help="Split the data into halves (D', D)."),
    horizon: int = _HORIZON,
) -> None:
    """VAPVI (Yin et al. 2022): DP-VAPVI's code with the noise off. NOT private.

    Refused on a dataset with a budget ledger (a non-private run would void its budget).
    """
    from privrl.experiments.rundir import ledger_guard
    from privrl.offline.vapvi import RELATION, UNIT, vapvi
    from privrl.privacy.public import PublicParameters
    from privrl.privacy.report import PrivacyReport

    if not (math.isfinite(additive_bonus) and additive_bonus >= 0):
        raise CliError(f"--additive-bonus must be finite and >= 0, got {additive_bonus}")
    _check_common(bonus_scale, lam)
    inputs = _Inputs(data, features, env, episodes, instance, seed, horizon)
    _check_source(inputs)
    params = PublicParameters()
    public = _prepare(inputs, params)
    planned = PrivacyReport.non_private(UNIT, RELATION, system="vapvi")
    data_rng, algo_rng = _rngs(seed)
    with ledger_guard(data, planned, label="privrl train vapvi", out=out):
        loaded = _load(inputs, public, data_rng)
        result = vapvi(
            loaded.episodes,
            loaded.features,
            bonus_scale=bonus_scale,
            lam=lam,
            additive_bonus=additive_bonus,
            split=split,
            rng=algo_rng,
        )
        result.report.with_public_parameters(params)
        config = _base_config(
            "vapvi",
            inputs,
            loaded,
            bonus_scale=bonus_scale,
            lam=lam,
            additive_bonus=additive_bonus,
            split=split,
        )
        metrics = _write_run(out, algorithm="vapvi", config=config, loaded=loaded, result=result)
    _summary(out, metrics, result.report)


def train_pevi(
    data: Path = _DATA,
    features: str = _FEATURES,
    env: str = _ENV,
    episodes: int = _EPISODES,
    instance: int = _INSTANCE,
    out: Path = _out_option("pevi"),
    seed: int = _SEED,
    bonus_scale: float = _BONUS,
    lam: float = _LAMBDA,
    xi: float = typer.Option(0.05, "--xi", help="Failure probability ξ in β = c·dH√log(2dHK/ξ)."),
    horizon: int = _HORIZON,
) -> None:
    """PEVI (Jin et al. 2021): pessimistic least-squares value iteration. NOT private.

    Refused on a dataset with a budget ledger (a non-private run would void its budget).
    """
    from privrl.experiments.rundir import ledger_guard
    from privrl.offline.pevi import pevi
    from privrl.offline.vapvi import RELATION, UNIT
    from privrl.privacy.public import PublicParameters
    from privrl.privacy.report import PrivacyReport

    if not 0 < xi < 1:
        raise CliError(f"--xi must be in (0, 1), got {xi}")
    _check_common(bonus_scale, lam)
    inputs = _Inputs(data, features, env, episodes, instance, seed, horizon)
    _check_source(inputs)
    params = PublicParameters()
    public = _prepare(inputs, params)
    planned = PrivacyReport.non_private(UNIT, RELATION, system="pevi")
    data_rng, _ = _rngs(seed)
    with ledger_guard(data, planned, label="privrl train pevi", out=out):
        loaded = _load(inputs, public, data_rng)
        result = pevi(loaded.episodes, loaded.features, bonus_scale=bonus_scale, lam=lam, xi=xi)
        result.report.with_public_parameters(params)
        config = _base_config("pevi", inputs, loaded, bonus_scale=bonus_scale, lam=lam, xi=xi)
        metrics = _write_run(out, algorithm="pevi", config=config, loaded=loaded, result=result)
    _summary(out, metrics, result.report)
