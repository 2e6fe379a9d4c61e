"""`privrl ope ALGO`: (private) off-policy evaluation with linear features.

    privrl ope gpope  --env chain --trajectories 1000 --epsilon 0.1 --out runs/gp
    privrl ope gpope  --data data.h5 --target-policy uniform --features fourier:5 \\
                      --epsilon 1 --clip 0.5 --step-size 0.01 --out runs/gp
    privrl ope dp-lsw --env chain --trajectories 1000 --epsilon 0.1 --out runs/v1
    privrl ope lstd   --env mountain-car --trajectories 200 --out runs/lstd

Each command writes a run directory: config.json, metrics.json (with `mspbe` when the model
is known, i.e. with --env), metrics.csv (the iterate's MSPBE curve for GPOPE with --env),
privacy.json, theta.npy and plots/*.png.

Order of work (the privacy rules of DESIGN.md): the flags are checked, `--out` is validated,
and with --data only the file's header is read (metadata and the number of trajectories m).
Every quantity that sets the noise — ε, δ, m, N, h, the step size, the reward range, γ — is
resolved from public sources (`privrl.privacy.public.PublicParameters`) and listed in
privacy.json; the run's report is built from them, and the dataset's ledger checks it
(`ledger_guard`) before the episodes are read. The run directory is written inside the guard,
which records the spend once it is complete; the console summary is printed last.

These estimators protect one trajectory under REPLACE-ONE neighbours: the number of
trajectories m is the same for every neighbour, hence public, and read from the header.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console

from privrl.cli.errors import CliError, check_epsilon

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
DEFAULT_DELTA = 1e-5
DEFAULT_TRAJECTORIES = 1000

# Sizes refused up front (they cannot fit in memory or finish in reasonable time).
MAX_TRAJECTORIES = 1_000_000  # --trajectories sampled from a built-in domain
MAX_ITERATIONS = 100_000_000  # GPOPE iterations N (one Python-level step each)
MAX_FEATURES = 4096  # feature dimension n (LSTD and GPOPE work with n × n matrices)
MAX_TABULAR_STATES = 4096  # S of the baselines' tabular view (Φ is S × n, pinv of it)
MAX_STATS_BYTES = 8 * 2**30  # GPOPE's per-trajectory statistics, m · (2n² + n) float64
MAX_SAMPLED_TRANSITIONS = 50_000_000  # m × the domain's horizon, sampled with --env

# ------------------------------------------------------------------------ shared options

DATA = typer.Option(None, "--data", help="Dataset file (privrl HDF5) to evaluate on.")
ENV = typer.Option(None, "--env", help="Sample the data from a built-in domain: " + "|".join(ENVS))
TRAJ = typer.Option(
    DEFAULT_TRAJECTORIES,
    "--trajectories",
    "-m",
    help=f"Trajectories to sample with --env (2 to {MAX_TRAJECTORIES:,}).",
)
TARGET = typer.Option(
    "behaviour",
    "--target-policy",
    help="Policy to evaluate: 'behaviour' (on-policy), 'uniform', or a domain's policy spec.",
)
FEATURES = typer.Option(
    None, "--features", help="Feature spec: onehot, fourier:ORDER, aggregation:BINS, hiv-log."
)
EPS = typer.Option(..., "--epsilon", "-e", help="Target ε in [1e-6, 100].")
DELTA = typer.Option(DEFAULT_DELTA, "--delta", "-d", help="Target δ in (0, 1).")
OUT = typer.Option(..., "--out", "-o", help="Run directory to write.")
SEED = typer.Option(0, "--seed", help="Seed (data sampling with --env, noise, tuning); >= 0.")
GAMMA = typer.Option(
    None, "--gamma", help="Discount in [0, 1] (default: the dataset's metadata or the domain's)."
)


def _source(value: Any, default: Any) -> Any:
    """FLAG when the user's value differs from the option's default, else DEFAULT."""
    from privrl.privacy.public import Source

    return Source.DEFAULT if value == default else Source.FLAG


class _Problem:
    """Everything public about the run (features, policies, γ, m, the model with --env); the
    episodes themselves are read by `load`, inside the ledger guard."""

    def __init__(
        self,
        *,
        data_path: Path | None,
        metadata: Any | None,
        features: Any,
        gamma: float,
        target_policy: Any | None,
        domain: Any | None,
        env: str | None,
        target_spec: str,
        m: int,
        seed: int,
    ) -> None:
        self.data_path = data_path
        self.metadata = metadata
        self.features = features
        self.gamma = gamma
        self.target_policy = target_policy
        self.domain = domain
        self.env = env
        self.target_spec = target_spec
        self.m = m
        self.seed = seed
        self.model_trajectories = 100_000
        self._data: Any = None
        self._system: Any = None

    @property
    def observation_space(self) -> Any:
        if self.domain is not None:
            return self.domain.observation_space
        return None if self.metadata is None else self.metadata.observation_space

    def load(self) -> Any:
        """The private episodes: sampled (--env) or read from --data. Call inside the guard."""
        if self._data is not None:
            return self._data
        if self.domain is not None:
            self._data = self.domain.sample(
                self.domain.behaviour_policy, self.m, seed=np.random.SeedSequence([self.seed, 1])
            )
            return self._data
        from privrl.data.dataset import DatasetError
        from privrl.data.io import load_hdf5

        assert self.data_path is not None
        data = load_hdf5(self.data_path)
        if data.n_episodes != self.m:  # a format error: the header disagrees with the arrays
            raise DatasetError(
                f"{self.data_path}: the header says {self.m} episodes but the arrays hold "
                f"{data.n_episodes}; the file is corrupt (re-export it)"
            )
        if self.target_policy is not None and data.behaviour_probs is None:
            raise DatasetError(
                f"{self.data_path} has no 'behaviour_probs' field: off-policy evaluation of "
                f"--target-policy {self.target_spec} needs the behaviour policy's action "
                "probabilities (record them when collecting, or evaluate on-policy with "
                "--target-policy behaviour)",
                field="behaviour_probs",
            )
        self._data = data
        return data

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


def _check_privacy_args(epsilon: float, delta: float) -> None:
    check_epsilon(epsilon)
    if not 0.0 < delta < 1.0:
        raise CliError(f"--delta must be in (0, 1), got {delta}")


def _check_common_args(seed: int, gamma: float | None) -> None:
    if seed < 0:
        raise CliError(f"--seed must be >= 0, got {seed}")
    if gamma is not None and not 0.0 <= gamma <= 1.0:
        raise CliError(f"--gamma must be in [0, 1], got {gamma}")


def _check_out(out: Path) -> None:
    """Validate --out before any other work (the ledger guard checks it again)."""
    from privrl.experiments.rundir import check_out_dir

    check_out_dir(out)


def _positive(name: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise CliError(f"{name} must be a finite number > 0, got {value}")


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


def _policy(domain: Any, spec: str, action_space: Any) -> Any | None:
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

        if not isinstance(action_space, spaces.Discrete):
            raise CliError(
                "--target-policy uniform needs a Discrete action space in the dataset metadata"
            )
        return UniformRandomPolicy(action_space)
    raise CliError(
        f"unknown --target-policy {spec!r}; use 'behaviour' (on-policy), 'uniform'"
        + (", 'target' or a domain policy spec" if domain is not None else "")
    )


def _spec_dim(spec: str, space: Any) -> int | None:
    """The dimension a fourier/aggregation spec would build (before building it), else None."""
    from gymnasium import spaces

    name, _, arg = spec.strip().partition(":")
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        return None
    k = int(space.shape[0])
    try:
        values = [int(a) for a in arg.split(",")] if arg else []
    except ValueError:
        return None
    if name.lower() == "fourier" and len(values) == 1 and values[0] >= 0:
        return (values[0] + 1) ** k
    if name.lower() == "aggregation" and values and all(v >= 1 for v in values):
        return math.prod(values) if len(values) > 1 else values[0] ** k
    return None


def _features(spec: str | None, env: str | None, domain: Any, space: Any) -> Any:
    from privrl.rl.features import make_features

    if spec is None:
        if env is not None:
            return _check_dim(domain.features, "the domain's features")
        raise CliError("--features is required with --data (e.g. onehot, fourier:5)")
    if env == "chain" and spec == "onehot":
        return domain.features  # one-hot over the non-absorbing states (φ(absorbing) = 0)
    if space is None:
        raise CliError(
            "the dataset has no observation space in its metadata; cannot build "
            "features from a spec"
        )
    dim = _spec_dim(spec, space)
    if dim is not None and dim > MAX_FEATURES:
        raise CliError(
            f"--features {spec} would build {dim:,} features, above the limit of "
            f"{MAX_FEATURES:,}; use a lower order or fewer bins"
        )
    try:
        feats = make_features(spec, space)
    except ValueError as exc:
        raise CliError(f"--features: {exc}") from exc
    return _check_dim(feats, f"--features {spec}")


def _refuse_inferred_spaces(meta: Any, data_path: Path) -> None:
    """The features (hence the size of θ and of every release) and the target policy are built
    from the dataset's spaces, so they must be public: a space `privrl data import` guessed
    from the data (max index + 1, observed bounds) is not."""
    from privrl.privacy.public import inferred_fields

    inferred = [f for f in ("observation_space", "action_space") if f in inferred_fields(meta)]
    if inferred:
        raise CliError(
            f"{data_path}: the {' and '.join(inferred)} in its metadata were inferred from the "
            "private data at import, so they cannot size the features or the releases; "
            "re-import it with --observation-space and --action-space (public values)"
        )


def _check_dim(features: Any, what: str) -> Any:
    dim = int(getattr(features, "dim", 0) or 0)
    if dim > MAX_FEATURES:
        raise CliError(
            f"{what} has {dim:,} features, above the limit of {MAX_FEATURES:,}; choose a "
            "smaller feature spec"
        )
    return features


def _problem(
    *,
    params: Any,
    data_path: Path | None,
    env: str | None,
    trajectories: int,
    target_spec: str,
    features_spec: str | None,
    gamma: float | None,
    seed: int,
) -> _Problem:
    """The run's public side. With --data, only the file's header is read here."""
    from privrl.privacy.public import Source

    if (data_path is None) == (env is None):
        raise CliError("give exactly one of --data FILE or --env " + "|".join(ENVS))
    if env is not None:
        if env not in ENVS:
            raise CliError(f"unknown --env {env!r}; choose one of: {', '.join(ENVS)}")
        if not 2 <= trajectories <= MAX_TRAJECTORIES:
            raise CliError(
                f"--trajectories must be at least 2 and at most {MAX_TRAJECTORIES:,} (sampled "
                f"from a built-in domain), got {trajectories}"
            )
        domain = get_domain(env, seed)
        horizon = getattr(domain, "horizon", None)
        if horizon is not None and trajectories * int(horizon) > MAX_SAMPLED_TRANSITIONS:
            raise CliError(
                f"--trajectories {trajectories} × the {env} horizon {horizon} could sample "
                f"more than {MAX_SAMPLED_TRANSITIONS:,} transitions; use at most "
                f"{MAX_SAMPLED_TRANSITIONS // int(horizon):,} trajectories"
            )
        action_space = getattr(domain, "action_space", None)
        if action_space is None and getattr(domain, "n_actions", None):
            from gymnasium import spaces

            action_space = spaces.Discrete(int(domain.n_actions))
        policy = _policy(domain, target_spec, action_space)
        feats = _features(features_spec, env, domain, domain.observation_space)
        if gamma is None:
            g = params.given("discount γ", float(domain.gamma), Source.DEFAULT, f"the {env} domain")
        else:
            g = params.given("discount γ", float(gamma), Source.FLAG, "--gamma")
        m = params.given(
            "trajectories m",
            int(trajectories),
            _source(trajectories, DEFAULT_TRAJECTORIES),
            "--trajectories: sampled from the simulator",
        )
        return _Problem(
            data_path=None,
            metadata=None,
            features=feats,
            gamma=g,
            target_policy=policy,
            domain=domain,
            env=env,
            target_spec=target_spec,
            m=m,
            seed=seed,
        )
    assert data_path is not None
    from privrl.data.dataset import DatasetError
    from privrl.data.io import read_header

    if data_path.is_dir():
        raise CliError(f"--data {data_path} is a directory; give a privrl HDF5 dataset file")
    header = read_header(data_path)  # metadata and sizes only: no episode is read here
    meta = header.metadata
    _refuse_inferred_spaces(meta, data_path)
    policy = _policy(None, target_spec, meta.action_space)
    feats = _features(features_spec, None, None, meta.observation_space)
    g = float(
        params.resolve(
            "discount γ",
            flag=gamma,
            metadata=meta,
            key="discount",
            fix="pass --gamma G (the discount of the evaluation)",
        )
    )
    if header.n_episodes < 1:
        raise DatasetError(f"{data_path} has no episodes")
    m = params.given(
        "trajectories m",
        int(header.n_episodes),
        Source.METADATA,
        "the dataset header's episode count; replace-one neighbours have the same m, so it is "
        "public",
    )
    return _Problem(
        data_path=data_path,
        metadata=meta,
        features=feats,
        gamma=g,
        target_policy=policy,
        domain=None,
        env=None,
        target_spec=target_spec,
        m=m,
        seed=seed,
    )


@contextmanager
def _guard(data_path: Path | None, planned: Any, *, label: str, out: Path) -> Iterator[list[Any]]:
    """`ledger_guard` (--out, then the dataset's ledger against the planned report, before any
    episode is read; the spend recorded once the run directory is complete). A ledger kept
    for another unit or relation is refused by the guard's check; the message then says how
    to make a ledger these estimators can use."""
    from privrl.experiments.rundir import ledger_guard
    from privrl.ope.baselines import RELATION, UNIT
    from privrl.privacy.ledger import BudgetExceededError, BudgetLedger, LedgerError

    with ExitStack() as stack:
        try:
            spent = stack.enter_context(ledger_guard(data_path, planned, label=label, out=out))
        except LedgerError as exc:
            if data_path is None or isinstance(exc, BudgetExceededError):
                raise
            ledger = BudgetLedger.for_dataset(data_path)
            if ledger is None or (ledger.unit is UNIT and ledger.relation is RELATION):
                raise
            raise CliError(
                f"the ledger of {data_path} accounts {ledger.unit.value} under "
                f"{ledger.relation.value}, but these estimators protect one {UNIT.value} "
                f"under {RELATION.value} only; evaluate on a dataset whose ledger was created "
                "with --unit trajectory --relation replace_one"
            ) from exc
        yield spent


def _write_run(
    out: Path,
    problem: _Problem,
    theta: np.ndarray,
    report: Any,
    config: dict[str, Any],
    metrics: dict[str, Any],
    curve: list[dict[str, Any]] | None,
) -> list[str]:
    """Write the run directory (inside the ledger guard); returns the console lines to print
    once the spend is recorded. Only public settings, the report and post-processing of the
    released θ are written."""
    from privrl.experiments.rundir import RunDir

    run = RunDir(out)
    base = {
        "data": None if problem.data_path is None else str(problem.data_path),
        "env": problem.env,
        "trajectories": problem.m,  # public under replace-one
        "target_policy": problem.target_spec,
        "features": getattr(problem.features, "spec", str(problem.features)),
        "gamma": problem.gamma,
    }
    run.write_config({**base, **config})
    metrics = dict(metrics)
    system = problem.system()
    if system is not None and "mspbe" not in metrics:
        metrics = {"mspbe": float(system.mspbe(theta)), **metrics}
        metrics["mspbe_source"] = system.info.get("source", "")
    metrics["epsilon"] = report.epsilon
    metrics["delta"] = report.delta
    rows = curve if curve else [{"feature": i, "theta": float(t)} for i, t in enumerate(theta)]
    run.write_curve(rows)
    np.save(run.artifact("theta.npy"), theta)
    _plot(run, theta, curve)
    run.write_privacy(report)
    run.write_metrics(metrics)
    lines = []
    if "mspbe" in metrics:
        lines.append(f"MSPBE = {metrics['mspbe']:.4g} ({metrics.get('mspbe_source', '')})")
    lines.append(f"wrote {out}")
    return lines


def _print(report: Any, lines: list[str]) -> None:
    console = Console()
    report.print(console)
    for line in lines:
        console.print(line)


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
        None,
        "--iterations",
        "-N",
        help=f"GPOPE iterations N (default 10·m; at most {MAX_ITERATIONS:,}).",
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
    from privrl.ope.gpope import StepSize, calibrated_sigma, gpope, gpope_report, tune_on_public
    from privrl.ope.stats import trajectory_stats
    from privrl.privacy.public import PublicParameters, Source

    # 1. flags (public checks only)
    _check_common_args(seed, gamma)
    _check_privacy_args(epsilon, delta)
    if accounting not in ("rigorous", "paper"):
        raise CliError(f"--accounting must be rigorous or paper, got {accounting!r}")
    if schedule not in ("constant", "diminishing"):
        raise CliError(f"--schedule must be constant or diminishing, got {schedule!r}")
    if not 0.5 <= clip_quantile < 1:
        raise CliError(f"--clip-quantile must be in [0.5, 1), got {clip_quantile}")
    if iterations is not None and not 1 <= iterations <= MAX_ITERATIONS:
        raise CliError(
            f"--iterations must be at least 1 and at most {MAX_ITERATIONS:,} (one Python-level "
            f"step each), got {iterations}"
        )
    _positive("--clip", clip)
    _positive("--step-size", step_size)
    _positive("--lambda-min", lambda_min)
    if schedule == "constant" and not 0.0 <= k < 1.0:
        raise CliError(f"--k must be in [0, 1) for the constant step β = η/N^k, got {k}")
    if public_data is not None:
        if not public_data.is_file():
            raise CliError(f"--public-data {public_data} is not a file; give a privrl HDF5 dataset")
        if data is not None and data.is_file() and public_data.samefile(data):
            raise CliError(
                "--public-data is the --data file itself; tuning must use an independent "
                "PUBLIC dataset (or give --clip and --step-size)"
            )
    _check_out(out)

    # 2. the public side of the run: header only, every noise-setting quantity resolved
    params = PublicParameters()
    params.given("ε (target)", float(epsilon), Source.FLAG, "--epsilon")
    params.given("δ", float(delta), _source(delta, DEFAULT_DELTA), "--delta")
    problem = _problem(
        params=params,
        data_path=data,
        env=env,
        trajectories=trajectories,
        target_spec=target_policy,
        features_spec=features,
        gamma=gamma,
        seed=seed,
    )
    m = problem.m
    if iterations is not None:
        n_iter = params.given("iterations N", int(iterations), Source.FLAG, "--iterations")
    else:
        n_iter = params.derive("iterations N", 10 * m, "10·m")
        if n_iter > MAX_ITERATIONS:
            raise CliError(
                f"the default N = 10·m = {n_iter:,} iterations exceeds the limit of "
                f"{MAX_ITERATIONS:,}; pass --iterations N"
            )
    n = int(problem.features.dim)
    need = m * (2 * n * n + n) * 8
    if need > MAX_STATS_BYTES:
        raise CliError(
            f"GPOPE's per-trajectory statistics would need {need / 2**30:.1f} GiB "
            f"(m·(2n²+n) numbers for m = {m:,} trajectories and n = {n} features), above the "
            f"limit of {MAX_STATS_BYTES / 2**30:.0f} GiB; use fewer features"
        )
    needs_tuning = clip is None or step_size is None
    if needs_tuning and public_data is None and problem.domain is None:
        raise CliError(
            "with --data, give --clip and --step-size, or --public-data FILE to tune them "
            "on (they must not be tuned on the private data)"
        )
    params.given("accounting", accounting, _source(accounting, "rigorous"), "--accounting")
    sigma = calibrated_sigma(epsilon, delta, m, n_iter, accounting)  # type: ignore[arg-type]
    params.derive("noise σ (std / h)", sigma, f"calibrated for (ε, δ), m, N ({accounting})")
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
            schedule=schedule,  # type: ignore[arg-type]
            k=k,
            clip_quantile=clip_quantile,
            seed=seed,
            source=source,
        )
        public.append(tuned.report_line())
    if clip is not None:
        h = params.given("clip bound h", float(clip), Source.FLAG, "--clip")
    else:
        assert tuned is not None
        h = params.given(
            "clip bound h",
            tuned.clip,
            Source.PUBLIC_SPLIT,
            f"{tuned.clip_quantile:.0%} quantile of ‖B_i‖ on a non-private run, {tuned.source}",
        )
    if step_size is not None:
        lam = lambda_min
        if schedule == "diminishing" and lam is None:
            system = problem.system()
            if system is None:
                raise CliError("--schedule diminishing with --data needs --lambda-min")
            lam = system.lambda_min_q()
            notes.append(f"λ_min(Q) = {lam:.4g} from the public model")
        step = StepSize(schedule, step_size, k, lam)  # type: ignore[arg-type]
        params.given("step size", step.describe(), Source.FLAG, "--step-size, --schedule, --k")
    else:
        assert tuned is not None
        step = tuned.step
        params.given(
            "step size",
            step.describe(),
            Source.PUBLIC_SPLIT,
            f"best mean MSPBE on {tuned.source}",
        )
    planned = gpope_report(
        sigma=sigma,
        clip=h,
        m=m,
        iterations=n_iter,
        n=n,
        delta=delta,
        epsilon=epsilon,
        accounting=accounting,  # type: ignore[arg-type]
        public=public,
        notes=notes,
    ).with_public_parameters(params)

    # 3. ledger check, then the private data
    with _guard(problem.data_path, planned, label="gpope", out=out) as spent:
        data_set = problem.load()
        stats = trajectory_stats(
            data_set, problem.features, problem.gamma, target_policy=problem.target_policy
        )
        result = gpope(
            stats,
            epsilon=epsilon,
            delta=delta,
            iterations=n_iter,
            clip=h,
            step=step,
            accounting=accounting,  # type: ignore[arg-type]
            seed=np.random.default_rng([seed, 3]),  # type: ignore[arg-type]
            public=public,
            notes=notes,
        )
        report = result.report.with_public_parameters(params)
        curve = None
        system = problem.system()
        if system is not None:
            values = np.asarray(system.mspbe(result.theta_history))
            curve = [
                {"iteration": int(i), "mspbe": float(v)}
                for i, v in zip(result.record_at, values, strict=True)
            ]
        metrics: dict[str, Any] = {
            "sigma": result.sigma,  # public: a function of (ε, δ, m, N)
            "noise_std": result.noise_std,
            "clip": h,
            "iterations": n_iter,
        }
        if tuned is not None:
            metrics["public_clipped_fraction"] = tuned.clipped_fraction
            metrics["public_clipped_fraction_note"] = (
                "fraction of clipped steps on the PUBLIC tuning run, not on the private data"
            )
        lines = _write_run(out, problem, result.theta, report, result.config, metrics, curve)
        spent.append(report)
    _print(report, lines)


# ------------------------------------------------------------------------ baselines


def _tabular_view(problem: _Problem, aggregation: int) -> tuple[Any, np.ndarray, Any, str]:
    """(state_index, Φ, value-feature map, note) for the output-perturbation baselines,
    built from public information only (the observation space, the domain)."""
    from gymnasium import spaces

    from privrl.rl.features import StateAggregation, make_features

    space = problem.observation_space
    if problem.env == "chain":
        S = problem.domain.mdp.n_states
        Phi = np.eye(S)[:, : S - 1]  # one-hot over the non-absorbing states
        return (lambda o: np.asarray(o).reshape(-1).astype(np.int64)), Phi, problem.features, ""
    if isinstance(space, spaces.Discrete):
        S, start = int(space.n), int(space.start)
        _check_states(S, "the observation space")
        return (
            (lambda o: np.asarray(o).reshape(-1).astype(np.int64) - start),
            np.eye(S),
            make_features("onehot", spaces.Discrete(S)),
            "",
        )
    if space is None:
        raise CliError("the dataset has no observation space in its metadata")
    dim = _spec_dim(f"aggregation:{aggregation}", space)
    if dim is not None:
        _check_states(dim, f"--aggregation {aggregation}")
    try:
        agg = make_features(f"aggregation:{aggregation}", space)
    except ValueError as exc:
        raise CliError(f"--aggregation: {exc}") from exc
    assert isinstance(agg, StateAggregation)
    _check_states(agg.dim, f"--aggregation {aggregation}")
    note = (
        f"APPROXIMATE: tabular first-visit MC on a {aggregation}-bin state aggregation of a "
        "continuous state (not Markov); MSPBE scored in the run's features"
    )
    return agg.cell, np.eye(agg.dim), agg, note


def _check_states(S: int, what: str) -> None:
    if S > MAX_TABULAR_STATES:
        raise CliError(
            f"{what} gives {S:,} tabular states, above the limit of {MAX_TABULAR_STATES:,} "
            "for DP-LSW/DP-LSL; use fewer --aggregation bins"
        )


def _baseline(
    which: str,
    *,
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
    reward_min: float | None,
    c: float | None,
) -> None:
    from privrl.ope.baselines import (
        dp_lsl,
        dp_lsw,
        first_visit_returns,
        plan_dp_lsl,
        plan_dp_lsw,
        return_range,
    )
    from privrl.ope.mspbe import LinearSystem, model_system
    from privrl.privacy.public import PublicParameters, Source

    # 1. flags (public checks only)
    _check_common_args(seed, gamma)
    _check_privacy_args(epsilon, delta)
    if target_policy not in ("behaviour", "behavior", "on-policy"):
        raise CliError(
            f"{which} is on-policy only (Balle et al. 2016): use --target-policy "
            "behaviour, or gpope for off-policy evaluation"
        )
    if aggregation < 1:
        raise CliError(f"--aggregation must be >= 1 (bins per dimension), got {aggregation}")
    if reward_range is not None and not (math.isfinite(reward_range) and reward_range > 0):
        raise CliError(f"--reward-range must be a finite number > 0, got {reward_range}")
    if reward_min is not None and not math.isfinite(reward_min):
        raise CliError(f"--reward-min must be a finite number, got {reward_min}")
    _positive("--c", c)
    _check_out(out)

    # 2. the public side of the run
    params = PublicParameters()
    params.given("ε", float(epsilon), Source.FLAG, "--epsilon")
    params.given("δ", float(delta), _source(delta, DEFAULT_DELTA), "--delta")
    problem = _problem(
        params=params,
        data_path=data,
        env=env,
        trajectories=trajectories,
        target_spec=target_policy,
        features_spec=features,
        gamma=gamma,
        seed=seed,
    )
    fix = (
        "pass --reward-range R (the width of the public interval [--reward-min, "
        "--reward-min + R] that holds every reward)"
    )
    domain_r = getattr(problem.domain, "r_max", None)
    default_r: dict[str, Any] = {} if domain_r is None else {"default": float(domain_r)}
    R = float(
        params.resolve(
            "reward range R",
            flag=reward_range,
            metadata=problem.metadata,
            key="reward_range",
            fix=fix,
            **default_r,
        )
    )
    if not (math.isfinite(R) and R > 0):
        raise CliError(f"the reward range must be a finite number > 0, got {R}; {fix}")
    lo = float(
        params.resolve(
            "reward lower bound",
            flag=reward_min,
            metadata=problem.metadata,
            key="reward_min",
            default=0.0,
            fix="pass --reward-min",
            detail="rewards are clipped into [lower bound, lower bound + R]",
        )
    )
    if not math.isfinite(lo):
        raise CliError(f"the reward lower bound must be finite, got {lo}; pass --reward-min")
    if problem.gamma >= 1.0:
        raise CliError(
            f"{which} bounds a first-visit return by R/(1−γ), which needs γ < 1, but γ = "
            f"{problem.gamma:g}; pass --gamma below 1 (γ = 1 with a public horizon is not "
            "supported yet)"
        )
    bounds = (lo, lo + R)
    if not (math.isfinite(bounds[1]) and bounds[1] > lo):
        raise CliError(
            f"the reward interval [{lo:g}, {lo:g} + {R:g}] is not representable; use a smaller "
            "--reward-range or --reward-min"
        )
    try:
        W = return_range(bounds, problem.gamma)
    except ValueError as exc:
        raise CliError(f"{exc}; use a smaller --reward-range or --reward-min") from exc
    params.derive(
        "return range",
        W,
        "width of the interval holding every return-to-go of rewards in "
        f"[{bounds[0]:g}, {bounds[1]:g}] at γ",
    )
    state_index, Phi, value_features, note = _tabular_view(problem, aggregation)
    S = Phi.shape[0]
    rho = np.full(S, 1.0 / S)
    rho_source = "uniform over the states"
    if problem.env == "chain":
        rho = problem.domain.mdp.start_distribution
        rho_source = "the chain's start distribution"
    params.given("state weights ρ", rho_source, Source.DEFAULT, "data-independent (Γ = diag ρ)")
    notes = tuple(
        x
        for x in (
            note,
            f"ρ: {rho_source}",
            f"rewards clipped to the public interval [{bounds[0]:g}, {bounds[1]:g}] before "
            "the first-visit returns are computed",
        )
        if x
    )
    if which == "dp-lsw":
        plan = plan_dp_lsw(Phi, rho, problem.m, epsilon=epsilon, delta=delta, return_range=W)
    else:
        c_val = params.given(
            "c (λ = c·m^0.4)",
            1.0 if c is None else float(c),
            Source.DEFAULT if c is None else Source.FLAG,
            "--c",
        )
        plan = plan_dp_lsl(
            Phi, rho, problem.m, epsilon=epsilon, delta=delta, return_range=W, c=c_val
        )
        params.derive("ridge λ", plan.lam, "c·m^0.4")
    params.derive("smooth-sensitivity α", plan.alpha, "5√(2 ln(2/δ))/ε")
    params.derive("smooth-sensitivity β", plan.beta, "ε/(4(n + ln(2/δ)))")
    planned = plan.report(notes).with_public_parameters(params)

    # 3. ledger check, then the private data
    with _guard(problem.data_path, planned, label=which, out=out) as spent:
        data_set = problem.load()
        fv = first_visit_returns(data_set, state_index, S, problem.gamma, reward_bounds=bounds)
        rng = np.random.default_rng([seed, 4])
        if which == "dp-lsw":
            res = dp_lsw(
                fv, Phi, rho, epsilon=epsilon, delta=delta, return_range=W, rng=rng, notes=notes
            )
        else:
            res = dp_lsl(
                fv,
                Phi,
                rho,
                epsilon=epsilon,
                delta=delta,
                return_range=W,
                rng=rng,
                lam=plan.lam,
                notes=notes,
            )
        # res.private_sigma and res.theta_nonprivate are data-dependent: never written.
        report = res.report.with_public_parameters(params)
        metrics: dict[str, Any] = {}
        if problem.domain is not None and value_features is not problem.features:
            cross = model_system(
                problem.domain,
                target_policy=None,
                features=problem.features,
                value_features=value_features,
            )
            metrics["mspbe"] = float(LinearSystem(cross.A, cross.b, cross.C).mspbe(res.theta))
            metrics["mspbe_source"] = cross.info.get("source", "")
            metrics["mspbe_note"] = "value function in aggregation features, MSPBE in run features"
        config = {**res.config, "reward_bounds": list(bounds)}
        if note:
            config["aggregation"] = aggregation
        lines = _write_run(out, problem, res.theta, report, config, metrics, None)
        spent.append(report)
    _print(report, lines)


_AGG = typer.Option(10, "--aggregation", help="Bins per dimension for continuous states (>= 1).")
_RR = typer.Option(
    None,
    "--reward-range",
    help="Width R of the public interval holding one reward (default: the dataset metadata's "
    "extra reward_range, or the domain's).",
)
_RMIN = typer.Option(
    None,
    "--reward-min",
    help="Lower end L of the public reward interval: every reward is clipped to lie between L "
    "and L + R (default: the dataset metadata's extra reward_min, else 0).",
)


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
    reward_min: float = _RMIN,
) -> None:
    """DP-LSW (Balle et al. 2016, "V1"): on-policy first-visit MC least squares + smooth-
    sensitivity Gaussian noise."""
    _baseline(
        "dp-lsw",
        data=data,
        env=env,
        trajectories=trajectories,
        target_policy=target_policy,
        features=features,
        epsilon=epsilon,
        delta=delta,
        out=out,
        seed=seed,
        gamma=gamma,
        aggregation=aggregation,
        reward_range=reward_range,
        reward_min=reward_min,
        c=None,
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
    reward_min: float = _RMIN,
    c: float = typer.Option(None, "--c", help="Ridge λ = c·m^0.4 (c > 0; default 1)."),
) -> None:
    """DP-LSL (Balle et al. 2016, "V2"): ridge version of DP-LSW with data-dependent weights."""
    _baseline(
        "dp-lsl",
        data=data,
        env=env,
        trajectories=trajectories,
        target_policy=target_policy,
        features=features,
        epsilon=epsilon,
        delta=delta,
        out=out,
        seed=seed,
        gamma=gamma,
        aggregation=aggregation,
        reward_range=reward_range,
        reward_min=reward_min,
        c=c,
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
    from privrl.ope.baselines import RELATION, UNIT
    from privrl.ope.lstd import lstd
    from privrl.privacy.public import PublicParameters
    from privrl.privacy.report import PrivacyReport

    _check_common_args(seed, gamma)
    if weighting not in ("pooled", "trajectory"):
        raise CliError(f"--weighting must be pooled or trajectory, got {weighting!r}")
    _check_out(out)
    params = PublicParameters()
    problem = _problem(
        params=params,
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
    ).with_public_parameters(params)
    # A dataset with a ledger refuses a non-private run here, before its episodes are read.
    with _guard(problem.data_path, report, label="lstd", out=out):
        theta = lstd(
            problem.load(),
            problem.features,
            problem.gamma,
            target_policy=problem.target_policy,
            weighting=weighting,  # type: ignore[arg-type]
        )
        lines = _write_run(
            out, problem, theta, report, {"algorithm": "lstd", "weighting": weighting}, {}, None
        )
    _print(report, lines)
