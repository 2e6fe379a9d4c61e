"""`privrl ope ALGO`: (private) off-policy evaluation with linear features.

    privrl ope gpope  --env chain --trajectories 1000 --epsilon 0.1 --out runs/gp
    privrl ope gpope  --data data.h5 --target-policy uniform --features fourier:5 \\
                      --epsilon 1 --clip 0.5 --step-size 0.01 --out runs/gp
    privrl ope dp-lsw --env chain --trajectories 1000 --epsilon 0.1 --out runs/v1
    privrl ope lstd   --env mountain-car --trajectories 200 --out runs/lstd

Each command writes a run directory: config.json, metrics.json (with `mspbe` when the model
is known, i.e. with --env), metrics.csv (the iterate's MSPBE curve for GPOPE with --env),
privacy.json, theta.npy and plots/*.png. A run on a dataset file with a ledger checks the
ledger before it reads the data and records its spend afterwards.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console

from privrl.cli.errors import CliError

ope_app = typer.Typer(
    help=(
        "Off-policy evaluation of a target policy with linear features, with differential "
        "privacy for one whole trajectory (GPOPE; the output-perturbation baselines DP-LSW and "
        "DP-LSL; non-private LSTD for reference). Use --data FILE for your own dataset or "
        "--env chain|mountain-car|hiv to sample one from a built-in domain (then the MSPBE is "
        "reported)."
    ),
    no_args_is_help=True,
)

ENVS = ("chain", "mountain-car", "hiv")
DEFAULT_FEATURES = {"chain": "onehot", "mountain-car": "fourier:5", "hiv": "hiv-log"}

# ------------------------------------------------------------------------ shared options

DATA = typer.Option(None, "--data", help="Dataset file (privrl HDF5) to evaluate on.")
ENV = typer.Option(None, "--env", help="Sample the data from a built-in domain: " + "|".join(ENVS))
TRAJ = typer.Option(1000, "--trajectories", "-m", help="Trajectories to sample with --env.")
TARGET = typer.Option(
    "behaviour",
    "--target-policy",
    help="Policy to evaluate: 'behaviour' (on-policy), 'uniform', or a domain's policy spec.",
)
FEATURES = typer.Option(
    None, "--features", help="Feature spec: onehot, fourier:ORDER, aggregation:BINS, hiv-log."
)
EPS = typer.Option(..., "--epsilon", "-e", help="Target ε (> 0).")
DELTA = typer.Option(1e-5, "--delta", "-d", help="Target δ in (0, 1).")
OUT = typer.Option(..., "--out", "-o", help="Run directory to write.")
SEED = typer.Option(0, "--seed", help="Seed (data sampling with --env, noise, tuning).")
GAMMA = typer.Option(None, "--gamma", help="Discount (default: the dataset's or domain's).")


class _Problem:
    """Data, features, policies and (with --env) the model the run is scored with."""

    def __init__(
        self,
        *,
        data: Any,
        data_path: Path | None,
        features: Any,
        gamma: float,
        target_policy: Any | None,
        domain: Any | None,
        env: str | None,
        target_spec: str,
    ) -> None:
        self.data = data
        self.data_path = data_path
        self.features = features
        self.gamma = gamma
        self.target_policy = target_policy
        self.domain = domain
        self.env = env
        self.target_spec = target_spec
        self.model_trajectories = 100_000
        self._system: Any = None

    @property
    def m(self) -> int:
        return int(self.data.n_episodes)

    def system(self) -> Any:
        """The MSPBE model (exact for the chain, large public sample otherwise)."""
        if self.domain is None:
            return None
        if self._system is None:
            from privrl.ope.mspbe import model_system

            self._system = model_system(
                self.domain,
                target_policy=self.target_policy,
                features=self.features,
                n_trajectories=self.model_trajectories,
            )
        return self._system


def _check_ledger_relation(path: Path | None) -> None:
    """Refuse early if the dataset's ledger accounts another unit or relation."""
    if path is None:
        return
    from privrl.ope.gpope import RELATION, UNIT
    from privrl.privacy.ledger import BudgetLedger

    ledger = BudgetLedger.for_dataset(path)
    if ledger is not None and (ledger.unit is not UNIT or ledger.relation is not RELATION):
        raise CliError(
            f"the ledger of {path} accounts {ledger.unit.value} under {ledger.relation.value}, "
            f"but these estimators protect one {UNIT.value} under {RELATION.value}; create the "
            "ledger with --unit trajectory --relation replace_one"
        )


def _check_privacy_args(epsilon: float, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise CliError(f"--epsilon must be a finite number > 0, got {epsilon}")
    if not 0.0 < delta < 1.0:
        raise CliError(f"--delta must be in (0, 1), got {delta}")


def get_domain(env: str, seed: int) -> Any:
    """A built-in OPE domain by name."""
    if env == "chain":
        from privrl.envs.chain import ChainDomain

        return ChainDomain()
    if env in ("mountain-car", "hiv"):
        try:
            from privrl.ope.domains import get_domain as _get
        except ImportError as exc:  # pragma: no cover - the domains module ships with privrl
            raise CliError(f"domain {env!r} is not available in this installation: {exc}") from exc
        return _get(env, seed=0)  # the learned policies are fixed public objects (seed 0)
    raise CliError(f"unknown --env {env!r}; choose one of: {', '.join(ENVS)}")


def _policy(domain: Any, spec: str, data: Any) -> Any | None:
    """None = on-policy (ρ = 1); otherwise an object with action_probs."""
    if spec in ("behaviour", "behavior", "on-policy"):
        return None
    if domain is not None:
        try:
            from privrl.ope.domains import policy_from_spec
        except ImportError:
            policy_from_spec = None
        if spec == "target":
            return domain.target_policy
        if policy_from_spec is not None and getattr(domain, "name", "") != "chain":
            try:
                return policy_from_spec(domain, spec)
            except ValueError as exc:
                raise CliError(f"--target-policy {spec!r}: {exc}") from exc
    if spec == "uniform":
        from gymnasium import spaces

        from privrl.policies import UniformRandomPolicy

        space = data.metadata.action_space if data is not None else None
        if not isinstance(space, spaces.Discrete):
            raise CliError(
                "--target-policy uniform needs a Discrete action space in the dataset metadata"
            )
        return UniformRandomPolicy(space)
    raise CliError(
        f"unknown --target-policy {spec!r}; use 'behaviour' (on-policy), 'uniform'"
        + (", 'target' or a domain policy spec" if domain is not None else "")
    )


def _features(spec: str | None, env: str | None, domain: Any, data: Any) -> Any:
    from privrl.rl.features import make_features

    if spec is None:
        if env is not None:
            return domain.features
        raise CliError("--features is required with --data (e.g. onehot, fourier:5)")
    if env == "chain" and spec == "onehot":
        return domain.features  # one-hot over the non-absorbing states (φ(absorbing) = 0)
    space = data.metadata.observation_space if data is not None else domain.observation_space
    if space is None:
        raise CliError(
            "the dataset has no observation space in its metadata; cannot build "
            "features from a spec"
        )
    try:
        return make_features(spec, space)
    except ValueError as exc:
        raise CliError(f"--features: {exc}") from exc


def _problem(
    *,
    data_path: Path | None,
    env: str | None,
    trajectories: int,
    target_spec: str,
    features_spec: str | None,
    gamma: float | None,
    seed: int,
) -> _Problem:
    if (data_path is None) == (env is None):
        raise CliError("give exactly one of --data FILE or --env " + "|".join(ENVS))
    if env is not None:
        if env not in ENVS:
            raise CliError(f"unknown --env {env!r}; choose one of: {', '.join(ENVS)}")
        if trajectories < 2:
            raise CliError(f"--trajectories must be >= 2, got {trajectories}")
        domain = get_domain(env, seed)
        policy = _policy(domain, target_spec, None)
        feats = _features(features_spec, env, domain, None)
        data = domain.sample(
            domain.behaviour_policy, trajectories, seed=np.random.SeedSequence([seed, 1])
        )
        g = float(domain.gamma if gamma is None else gamma)
        return _Problem(
            data=data,
            data_path=None,
            features=feats,
            gamma=g,
            target_policy=policy,
            domain=domain,
            env=env,
            target_spec=target_spec,
        )
    assert data_path is not None
    from privrl.data.io import load_hdf5

    if not data_path.is_file():
        raise CliError(f"dataset file not found: {data_path}")
    data = load_hdf5(data_path)
    policy = _policy(None, target_spec, data)
    feats = _features(features_spec, None, None, data)
    g = float(data.metadata.discount if gamma is None else gamma)
    if policy is not None and data.behaviour_probs is None:
        from privrl.data.dataset import DatasetError

        raise DatasetError(
            f"{data_path} has no 'behaviour_probs' field: off-policy evaluation of "
            f"--target-policy {target_spec} needs the behaviour policy's action probabilities "
            "(record them when collecting, or evaluate on-policy with --target-policy behaviour)",
            field="behaviour_probs",
        )
    return _Problem(
        data=data,
        data_path=data_path,
        features=feats,
        gamma=g,
        target_policy=policy,
        domain=None,
        env=None,
        target_spec=target_spec,
    )


def _write_common(
    out: Path,
    problem: _Problem,
    theta: np.ndarray,
    report: Any,
    config: dict[str, Any],
    metrics: dict[str, Any],
    curve: list[dict[str, Any]] | None,
) -> None:
    from privrl.experiments.rundir import RunDir

    run = RunDir(out)
    base = {
        "data": None if problem.data_path is None else str(problem.data_path),
        "env": problem.env,
        "trajectories": problem.m,
        "target_policy": problem.target_spec,
        "features": getattr(problem.features, "spec", str(problem.features)),
        "gamma": problem.gamma,
    }
    run.write_config({**base, **config})
    system = problem.system()
    if system is not None:
        metrics = {"mspbe": float(system.mspbe(theta)), **metrics}
        metrics["mspbe_source"] = system.info.get("source", "")
    metrics["epsilon"] = report.epsilon
    metrics["delta"] = report.delta
    run.write_metrics(metrics)
    rows = curve if curve else [{"feature": i, "theta": float(t)} for i, t in enumerate(theta)]
    run.write_curve(rows)
    run.write_privacy(report)
    np.save(run.artifact("theta.npy"), theta)
    _plot(run, theta, curve)
    console = Console()
    report.print(console)
    if "mspbe" in metrics:
        console.print(f"MSPBE = {metrics['mspbe']:.4g} ({metrics['mspbe_source']})")
    console.print(f"wrote {out}")


def _plot(run: Any, theta: np.ndarray, curve: list[dict[str, Any]] | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    if curve and "mspbe" in curve[0]:
        it = [r["iteration"] for r in curve]
        ax.loglog(it, [r["mspbe"] for r in curve])
        ax.set_xlabel("iteration")
        ax.set_ylabel("MSPBE of θ_i")
        name = "mspbe"
    else:
        ax.bar(np.arange(theta.size), theta)
        ax.set_xlabel("feature")
        ax.set_ylabel("θ")
        name = "theta"
    fig.tight_layout()
    fig.savefig(run.plot_path(name), dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------ gpope


@ope_app.command("gpope")
def gpope_cmd(
    data: Path = DATA,
    env: str = ENV,
    trajectories: int = TRAJ,
    target_policy: str = TARGET,
    features: str = FEATURES,
    epsilon: float = EPS,
    delta: float = DELTA,
    out: Path = OUT,
    seed: int = SEED,
    gamma: float = GAMMA,
    iterations: int = typer.Option(
        None, "--iterations", "-N", help="GPOPE iterations N (default 10·m)."
    ),
    clip: float = typer.Option(
        None, "--clip", help="Clip bound h (default: tuned on a public sample)."
    ),
    step_size: float = typer.Option(
        None, "--step-size", help="Step size η (default: tuned on a public sample)."
    ),
    schedule: str = typer.Option(
        "constant", "--schedule", help="constant (β = η/N^k) or diminishing (β_i = η/(λ_min i))."
    ),
    k: float = typer.Option(0.0, "--k", help="Exponent k of the constant step β = η/N^k."),
    lambda_min: float = typer.Option(
        None, "--lambda-min", help="λ_min(Q) for the diminishing step (public knowledge)."
    ),
    accounting: str = typer.Option(
        "rigorous",
        "--accounting",
        help="rigorous (dp-accounting RDP; the valid guarantee) or paper (Lemma 1; comparison).",
    ),
    public_data: Path = typer.Option(
        None, "--public-data", help="An independent PUBLIC dataset to tune h and the step on."
    ),
    clip_quantile: float = typer.Option(
        0.95, "--clip-quantile", help="Quantile of ‖B_i‖ on the public run used as h."
    ),
) -> None:
    """GPOPE (Xie et al. 2019): saddle-point GTD2 with per-trajectory clipped, noised gradients."""
    from privrl.experiments.rundir import ledger_guard
    from privrl.ope.accounting import gpope_event
    from privrl.ope.gpope import StepSize, _cached_sigma, gpope, tune_on_public
    from privrl.ope.stats import trajectory_stats

    _check_privacy_args(epsilon, delta)
    if accounting not in ("rigorous", "paper"):
        raise CliError(f"--accounting must be rigorous or paper, got {accounting!r}")
    if schedule not in ("constant", "diminishing"):
        raise CliError(f"--schedule must be constant or diminishing, got {schedule!r}")
    if not 0.5 <= clip_quantile < 1:
        raise CliError(f"--clip-quantile must be in [0.5, 1), got {clip_quantile}")
    problem = _problem(
        data_path=data,
        env=env,
        trajectories=trajectories,
        target_spec=target_policy,
        features_spec=features,
        gamma=gamma,
        seed=seed,
    )
    m = problem.m
    n_iter = int(iterations) if iterations is not None else 10 * m
    if n_iter < 1:
        raise CliError(f"--iterations must be >= 1, got {iterations}")
    if clip is not None and not clip > 0:
        raise CliError(f"--clip must be > 0, got {clip}")
    if step_size is not None and not step_size > 0:
        raise CliError(f"--step-size must be > 0, got {step_size}")
    needs_tuning = clip is None or step_size is None
    if needs_tuning and public_data is None and problem.domain is None:
        raise CliError(
            "with --data, give --clip and --step-size, or --public-data FILE to tune them "
            "on (they must not be tuned on the private data)"
        )
    sigma = _cached_sigma(epsilon, delta, m, n_iter, accounting)
    public: list[str] = []
    notes: list[str] = []
    tuned = None
    if needs_tuning:
        if public_data is not None:
            from privrl.data.io import load_hdf5

            pub = load_hdf5(public_data)
            source = f"public dataset {public_data.name}"
        else:
            pub = problem.domain.sample(
                problem.domain.behaviour_policy, m, seed=np.random.SeedSequence([seed, 2])
            )
            source = f"sampled from the {problem.env} simulator with an independent seed"
        pub_stats = trajectory_stats(
            pub, problem.features, problem.gamma, target_policy=problem.target_policy
        )
        tuned = tune_on_public(
            pub_stats,
            problem.system(),
            m=m,
            epsilon=epsilon,
            delta=delta,
            iterations=n_iter,
            accounting=accounting,  # type: ignore[arg-type]
            schedule=schedule,
            k=k,
            clip_quantile=clip_quantile,
            seed=seed,
            source=source,  # type: ignore[arg-type]
        )
        public.append(tuned.report_line())
    h = float(clip) if clip is not None else tuned.clip  # type: ignore[union-attr]
    if step_size is not None:
        lam = lambda_min
        if schedule == "diminishing" and lam is None:
            system = problem.system()
            if system is None:
                raise CliError("--schedule diminishing with --data needs --lambda-min")
            lam = system.lambda_min_q()
            notes.append(f"λ_min(Q) = {lam:.4g} from the public model")
        step = StepSize(schedule, step_size, k, lam)  # type: ignore[arg-type]
    else:
        step = tuned.step  # type: ignore[union-attr]
    _check_ledger_relation(problem.data_path)
    with ledger_guard(problem.data_path, gpope_event(sigma, m, n_iter), label="gpope") as spent:
        stats = trajectory_stats(
            problem.data, problem.features, problem.gamma, target_policy=problem.target_policy
        )
        result = gpope(
            stats,
            epsilon=epsilon,
            delta=delta,
            iterations=n_iter,
            clip=h,
            step=step,
            accounting=accounting,
            seed=np.random.default_rng([seed, 3]),  # type: ignore[arg-type]
            public=public,
            notes=notes,
        )
        spent.append(result.report)
    curve = None
    system = problem.system()
    if system is not None:
        values = np.asarray(system.mspbe(result.theta_history))
        curve = [
            {"iteration": int(i), "mspbe": float(v)}
            for i, v in zip(result.record_at, values, strict=True)
        ]
    metrics: dict[str, Any] = {
        "sigma": result.sigma,
        "noise_std": result.noise_std,
        "clip": h,
        "iterations": n_iter,
    }
    if tuned is not None:
        metrics["public_clipped_fraction"] = tuned.clipped_fraction
    _write_common(out, problem, result.theta, result.report, result.config, metrics, curve)


# ------------------------------------------------------------------------ baselines


def _tabular_view(problem: _Problem, aggregation: int) -> tuple[Any, np.ndarray, Any, str]:
    """(state_index, Φ, value-feature map, note) for the output-perturbation baselines."""
    from gymnasium import spaces

    from privrl.rl.features import StateAggregation, make_features

    space = problem.data.metadata.observation_space
    if problem.env == "chain":
        S = problem.domain.mdp.n_states
        Phi = np.eye(S)[:, : S - 1]  # one-hot over the non-absorbing states
        return (lambda o: np.asarray(o).reshape(-1).astype(np.int64)), Phi, problem.features, ""
    if isinstance(space, spaces.Discrete):
        S = int(space.n)
        return (
            (lambda o: np.asarray(o).reshape(-1).astype(np.int64)),
            np.eye(S),
            make_features("onehot", space),
            "",
        )
    agg = make_features(f"aggregation:{aggregation}", space)
    assert isinstance(agg, StateAggregation)
    note = (
        f"APPROXIMATE: tabular first-visit MC on a {aggregation}-bin state aggregation of a "
        "continuous state (not Markov); MSPBE scored in the run's features"
    )
    return agg.cell, np.eye(agg.dim), agg, note


def _baseline(
    which: str,
    data: Path | None,
    env: str | None,
    trajectories: int,
    target_policy: str,
    features: str | None,
    epsilon: float,
    delta: float,
    out: Path,
    seed: int,
    gamma: float | None,
    aggregation: int,
    reward_range: float | None,
    c: float,
) -> None:
    from privrl.experiments.rundir import ledger_guard
    from privrl.ope.baselines import dp_lsl, dp_lsw, first_visit_returns
    from privrl.ope.mspbe import LinearSystem, model_system
    from privrl.privacy.events import ApproxDpEvent

    _check_privacy_args(epsilon, delta)
    if target_policy not in ("behaviour", "behavior", "on-policy"):
        raise CliError(
            f"{which} is on-policy only (Balle et al. 2016): use --target-policy "
            "behaviour, or gpope for off-policy evaluation"
        )
    problem = _problem(
        data_path=data,
        env=env,
        trajectories=trajectories,
        target_spec=target_policy,
        features_spec=features,
        gamma=gamma,
        seed=seed,
    )
    if reward_range is None:
        r_max = getattr(problem.domain, "r_max", None)
        if r_max is None:
            raise CliError(f"{which} needs --reward-range (the range of one reward; public)")
        reward_range = float(r_max)
    if not reward_range > 0:
        raise CliError(f"--reward-range must be > 0, got {reward_range}")
    return_range = reward_range / (1.0 - problem.gamma)
    state_index, Phi, value_features, note = _tabular_view(problem, aggregation)
    S = Phi.shape[0]
    rho = np.full(S, 1.0 / S)
    if problem.env == "chain":
        rho = problem.domain.mdp.start_distribution
    notes = tuple(
        x for x in (note, "ρ: start distribution (chain) or uniform over the states") if x
    )
    _check_ledger_relation(problem.data_path)
    with ledger_guard(problem.data_path, ApproxDpEvent(epsilon, delta), label=which) as spent:
        fv = first_visit_returns(problem.data, state_index, S, problem.gamma)
        rng = np.random.default_rng([seed, 4])
        if which == "dp-lsw":
            res = dp_lsw(
                fv,
                Phi,
                rho,
                epsilon=epsilon,
                delta=delta,
                return_range=return_range,
                rng=rng,
                notes=notes,
            )
        else:
            res = dp_lsl(
                fv,
                Phi,
                rho,
                epsilon=epsilon,
                delta=delta,
                return_range=return_range,
                rng=rng,
                c=c,
                notes=notes,
            )
        spent.append(res.report)
    metrics: dict[str, Any] = {"sigma": res.sigma}
    if problem.domain is not None and value_features is not problem.features:
        cross = model_system(
            problem.domain,
            target_policy=None,
            features=problem.features,
            value_features=value_features,
        )
        metrics["mspbe"] = float(LinearSystem(cross.A, cross.b, cross.C).mspbe(res.theta))
        metrics["mspbe_note"] = "value function in aggregation features, MSPBE in run features"
        problem._system = None
        problem.domain = None  # MSPBE already computed in the cross system
    _write_common(
        out, problem, res.theta, res.report, {"algorithm": which, **res.config}, metrics, None
    )


_AGG = typer.Option(10, "--aggregation", help="Bins per dimension for continuous states.")
_RR = typer.Option(None, "--reward-range", help="Range of one reward (public; default domain's).")


@ope_app.command("dp-lsw")
def dp_lsw_cmd(
    data: Path = DATA,
    env: str = ENV,
    trajectories: int = TRAJ,
    target_policy: str = TARGET,
    features: str = FEATURES,
    epsilon: float = EPS,
    delta: float = DELTA,
    out: Path = OUT,
    seed: int = SEED,
    gamma: float = GAMMA,
    aggregation: int = _AGG,
    reward_range: float = _RR,
) -> None:
    """DP-LSW (Balle et al. 2016, "V1"): on-policy first-visit MC least squares + smooth-
    sensitivity Gaussian noise."""
    _baseline(
        "dp-lsw",
        data,
        env,
        trajectories,
        target_policy,
        features,
        epsilon,
        delta,
        out,
        seed,
        gamma,
        aggregation,
        reward_range,
        1.0,
    )


@ope_app.command("dp-lsl")
def dp_lsl_cmd(
    data: Path = DATA,
    env: str = ENV,
    trajectories: int = TRAJ,
    target_policy: str = TARGET,
    features: str = FEATURES,
    epsilon: float = EPS,
    delta: float = DELTA,
    out: Path = OUT,
    seed: int = SEED,
    gamma: float = GAMMA,
    aggregation: int = _AGG,
    reward_range: float = _RR,
    c: float = typer.Option(1.0, "--c", help="Ridge λ = c·m^0.4."),
) -> None:
    """DP-LSL (Balle et al. 2016, "V2"): ridge version of DP-LSW with data-dependent weights."""
    _baseline(
        "dp-lsl",
        data,
        env,
        trajectories,
        target_policy,
        features,
        epsilon,
        delta,
        out,
        seed,
        gamma,
        aggregation,
        reward_range,
        c,
    )


@ope_app.command("lstd")
def lstd_cmd(
    data: Path = DATA,
    env: str = ENV,
    trajectories: int = TRAJ,
    target_policy: str = TARGET,
    features: str = FEATURES,
    out: Path = OUT,
    seed: int = SEED,
    gamma: float = GAMMA,
    weighting: str = typer.Option(
        "pooled",
        "--weighting",
        help="pooled (Bradtke & Barto) or trajectory (per-trajectory averages, GPOPE's target).",
    ),
) -> None:
    """Non-private LSTD(0) (off-policy with per-step ρ) — a reference, NOT private."""
    from privrl.experiments.rundir import ledger_guard
    from privrl.ope.gpope import RELATION, UNIT
    from privrl.ope.lstd import lstd
    from privrl.privacy.report import PrivacyReport

    if weighting not in ("pooled", "trajectory"):
        raise CliError(f"--weighting must be pooled or trajectory, got {weighting!r}")
    problem = _problem(
        data_path=data,
        env=env,
        trajectories=trajectories,
        target_spec=target_policy,
        features_spec=features,
        gamma=gamma,
        seed=seed,
    )
    report = PrivacyReport.non_private(
        UNIT, RELATION, system="lstd", notes=["non-private reference (LSTD(0))"]
    )
    with ledger_guard(problem.data_path, report, label="lstd"):
        theta = lstd(
            problem.data,
            problem.features,
            problem.gamma,
            target_policy=problem.target_policy,
            weighting=weighting,
        )  # type: ignore[arg-type]
    _write_common(
        out, problem, theta, report, {"algorithm": "lstd", "weighting": weighting}, {}, None
    )
