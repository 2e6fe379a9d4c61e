"""The run layer's side of the linear OPE systems: the data source (`--data FILE` or `--env`
with `--trajectories`, and `--target-policy`), loading the episodes, the run directory's
result (plots, summary) and the command line's names for the library's fields.

The estimators themselves (configs, public-parameter resolution, computation) are
`privrl.ope.linear`; the run configs here are those configs plus the data-source fields.
Library messages name config fields in backquotes; `cli_text` turns them into flags (the
run layer's one translator, `privrl.runs.wording`, with the phrases of these commands).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import numpy as np

from privrl.algorithm import Plan
from privrl.config import Config, ConfigError, check, option
from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import DatasetHeader
from privrl.ope.linear import common as lib
from privrl.ope.linear.common import (
    DEFAULT_DELTA,
    HEADER_COUNT_DETAIL,
    MAX_FEATURES,
    MAX_ITERATIONS,
    MAX_STATS_BYTES,
    MAX_TABULAR_STATES,
    ON_POLICY,
    LinearOpeConfig,
    LinearProblem,
    PrivateLinearOpeConfig,
    check_declared_trajectories,
    check_gamma_confidence,
    check_statistics_fit,
    check_target,
    declared_trajectories,
    refuse_inferred_spaces,
    resolve_reward_scale,
    target_delta,
    target_epsilon,
    value_metrics,
)
from privrl.ope.linear.estimator import LinearEstimate, prepare
from privrl.ope.targets import USER_CODE_HELP
from privrl.privacy.public import PublicParameters
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation
from privrl.runs import wording
from privrl.runs.system import PlotSpec, Result, Series, System

if TYPE_CHECKING:
    from privrl.envs.chain import ChainDomain
    from privrl.ope.domains import OpeDomain

__all__ = [
    "DEFAULT_DELTA",
    "DEFAULT_TRAJECTORIES",
    "ENVS",
    "HEADER_COUNT_DETAIL",
    "MAX_FEATURES",
    "MAX_ITERATIONS",
    "MAX_SAMPLED_TRANSITIONS",
    "MAX_STATS_BYTES",
    "MAX_TABULAR_STATES",
    "MAX_TRAJECTORIES",
    "ON_POLICY",
    "OpeConfig",
    "OpeSource",
    "OpeSystem",
    "PrivateOpeConfig",
    "Problem",
    "TargetBudget",
    "check_declared_trajectories",
    "check_gamma_confidence",
    "check_ledger_relation",
    "check_on_policy",
    "check_statistics_fit",
    "check_target",
    "cli_errors",
    "cli_parameters",
    "cli_text",
    "declared_trajectories",
    "get_domain",
    "load_episodes",
    "ope_result",
    "public_problem",
    "refuse_inferred_spaces",
    "resolve_reward_scale",
    "target_delta",
    "target_epsilon",
    "target_parameters",
    "value_metrics",
]

ENVS = ("chain", "mountain-car", "hiv")
DEFAULT_TRAJECTORIES = 1000
MAX_TRAJECTORIES = 1_000_000  # --trajectories sampled from a built-in domain
MAX_SAMPLED_TRANSITIONS = 50_000_000  # m × the domain's horizon, sampled with --env

Problem = LinearProblem
"""The public side of a run (`privrl.ope.linear.common.LinearProblem`)."""


# ------------------------------------------------------------------------ field → flag


# Library phrases that name an argument of the Python API or the dataset (the command line's
# --data), as the command line says them.
_PHRASES = (
    ("or give a public dataset (`public=`)", "or --public-data FILE"),
    ("a public dataset (`public=`)", "--public-data FILE"),
    ("on a dataset, give", "with --data, give"),
    ("diminishing on a dataset", "diminishing with --data"),
    ("evaluate it on a dataset instead", "evaluate it on a dataset (--data) instead"),
    ("is required with a dataset", "is required with --data"),
)


def cli_text(text: str, config_type: type[Config] | None = None) -> str:
    """A library message with its field references (`` `field` ``, `` `field=VALUE` ``) named
    as the command line's flags (`--field`, `--field VALUE`) and the OPE phrases above in the
    commands' words (`privrl.runs.wording.command_words`)."""
    if config_type is None:
        return text
    return wording.command_words(text, config_type, phrases=_PHRASES)


def cli_parameters(params: PublicParameters, config_type: type[Config]) -> PublicParameters:
    """`params` with each detail naming flags, as privacy.json lists them
    (`privrl.runs.wording.command_parameters`)."""
    return wording.command_parameters(params, config_type)


def cli_errors(config: Config | type[Config]) -> AbstractContextManager[None]:
    """Library errors raised inside, with their field references named as flags
    (`privrl.runs.wording.in_command_words`, with the OPE phrases)."""
    config_type = config if isinstance(config, type) else type(config)
    return wording.in_command_words(config_type, phrases=_PHRASES)


# ------------------------------------------------------------------------ configs


@dataclass(frozen=True)
class OpeSource(Config):
    """The data source of a run: `--data FILE` (the layer's), or episodes sampled from a
    built-in domain (`--env`, `--trajectories`), and the target policy's spec."""

    env: Literal["chain", "mountain-car", "hiv"] | None = option(
        None, help="Sample the data from a built-in domain (instead of --data)."
    )
    trajectories: int = option(
        DEFAULT_TRAJECTORIES,
        "--trajectories",
        "-m",
        help=f"Trajectories m to sample with --env (2 to {MAX_TRAJECTORIES:,}).",
    )
    target_policy: str = option(
        "behaviour",
        help="Policy to evaluate: 'behaviour' (on-policy), 'uniform', FILE.npy (π(a|s) as "
        "[S, A], [H, S, A] or [A]), a saved privrl policy.npz or learner.pt[:epsilon=E], "
        f"module:function, or a domain's policy spec ({USER_CODE_HELP}).",
    )

    def __post_init__(self) -> None:
        with cli_errors(self):
            super().__post_init__()

    def validate(self) -> None:
        super().validate()
        check(
            self.env is None or 2 <= self.trajectories <= MAX_TRAJECTORIES,
            "trajectories",
            f"must be at least 2 and at most {MAX_TRAJECTORIES:,} (sampled from a built-in "
            f"domain), got {self.trajectories}",
        )


@dataclass(frozen=True)
class OpeConfig(LinearOpeConfig, OpeSource):
    """What every OPE run shares: the data source, the target policy, the features φ and the
    discount γ."""


@dataclass(frozen=True)
class PrivateOpeConfig(PrivateLinearOpeConfig, OpeConfig):
    """An (ε, δ)-DP estimator's run: the data source and the target budget."""


def check_on_policy(config: OpeConfig, why: str) -> None:
    """An on-policy estimator refuses any target policy but the behaviour (`why` says why)."""
    check(
        config.target_policy in ON_POLICY,
        "target_policy",
        f"must be behaviour: {config.system} is on-policy only ({why}); use gpope for "
        "off-policy evaluation",
    )


class TargetBudget(Protocol):
    """A config with a target (ε, δ) (the OPE systems', and ips, snips and dr)."""

    epsilon: float
    delta: float


def target_parameters(config: TargetBudget, epsilon_label: str = "ε") -> PublicParameters:
    """`PublicParameters` holding the target ε (its flag) and δ (its flag, or the default)."""
    return cli_parameters(lib.target_parameters(config, epsilon_label), type(config))


# ------------------------------------------------------------------------ the public side


def get_domain(env: str) -> ChainDomain | OpeDomain:
    """A built-in OPE domain by name (its policies are fixed public objects)."""
    if env == "chain":
        from privrl.envs.chain import ChainDomain

        return ChainDomain()
    if env in ("mountain-car", "hiv"):
        try:
            from privrl.ope.domains import get_domain as _get
        except ImportError as exc:  # pragma: no cover - the domains module ships with privrl
            raise ValueError(
                f"domain {env!r} is not available in this installation: {exc}"
            ) from exc
        from privrl.runs.progress import progress_bars

        with progress_bars() as progress:  # training the domain's policies (once, then cached)
            # the learned policies are fixed public objects (seed 0)
            return _get(env, seed=0, progress=progress)
    raise ConfigError("env", f"{env!r} is unknown; choose one of: {', '.join(ENVS)}")


def public_problem(
    config: OpeConfig,
    header: DatasetHeader | None,
    params: PublicParameters,
    seed: int,
    *,
    count_is_public: bool = True,
) -> LinearProblem:
    """The run's public side, from the config and (with --data) the file's header only
    (`privrl.ope.linear.common.problem_from_header`), or a built-in domain (`--env`).

    `count_is_public=False` (add/remove neighbours, whose counts differ): the header's episode
    count is kept for the format check of `load` but not listed as a public parameter."""
    from privrl.ope.linear.common import problem_from_header, problem_from_simulator

    if (header is None) == (config.env is None):
        raise ValueError("give exactly one of --data FILE or --env " + "|".join(ENVS))
    if header is not None:
        return problem_from_header(
            config,
            header,
            params,
            policy=config.target_policy,
            seed=seed,
            count_is_public=count_is_public,
        )
    env = config.env
    domain = get_domain(env)
    horizon = getattr(domain, "horizon", None)
    if horizon is not None and config.trajectories * int(horizon) > MAX_SAMPLED_TRANSITIONS:
        raise ConfigError(
            "trajectories",
            f"{config.trajectories} × the {env} horizon {horizon} could sample more than "
            f"{MAX_SAMPLED_TRANSITIONS:,} transitions; use at most "
            f"{MAX_SAMPLED_TRANSITIONS // int(horizon):,} trajectories",
        )
    if config.max_horizon is not None:
        # the MSPBE models and the domains' γ < 1 bounds are for whole episodes
        raise ConfigError(
            "max_horizon",
            f"applies to --data only; the {env} domain's episodes and model are its own",
        )
    if getattr(config, "declared_trajectories", None) is not None:
        raise ConfigError(
            "declared_trajectories",
            "applies to --data only; with --env, --trajectories is the declared size",
        )
    return problem_from_simulator(
        config,
        domain,
        params,
        policy=config.target_policy,
        m=config.trajectories,
        m_source=lib.source_of(config.trajectories, DEFAULT_TRAJECTORIES),
        m_detail="--trajectories: sampled from the simulator",
        seed=seed,
        env=env,
    )


def load_episodes(problem: LinearProblem) -> TrajectoryDataset:
    """The private episodes: sampled (--env, stream [seed, 1]) or read from --data, checked
    and cut to the declared horizon. Called inside the ledger transaction."""
    if problem.domain is not None:
        data = problem.domain.sample(
            problem.domain.behaviour_policy,
            problem.m,
            seed=np.random.SeedSequence([problem.seed, 1]),
        )
        return problem.truncate(data)
    from privrl.data.io import load_hdf5

    assert problem.data_path is not None
    return prepare(problem, load_hdf5(problem.data_path))


def check_ledger_relation(
    problem: LinearProblem, relation: NeighbourRelation | None = None
) -> None:
    """A ledger kept for another unit or relation refuses these estimators (the guard would);
    say how to make a ledger they can use. Reads the ledger only, not the episodes.
    `relation`: the run's (default: replace-one, the relation of every mode but gpope's
    minibatch mode)."""
    from privrl.ope.baselines import RELATION, UNIT
    from privrl.privacy.ledger import BudgetLedger

    relation = RELATION if relation is None else relation
    if problem.data_path is None:
        return
    ledger = BudgetLedger.for_dataset(problem.data_path)
    if ledger is None or (ledger.unit is UNIT and ledger.relation is relation):
        return
    hint = "" if relation is RELATION else " (or run gpope --mode paper, which is replace-one)"
    raise ValueError(
        f"the ledger of {problem.data_path} accounts {ledger.unit.value} under "
        f"{ledger.relation.value}, but this estimator protects one {UNIT.value} "
        f"under {relation.value} only; evaluate on a dataset whose ledger was created "
        f"with --unit trajectory --relation {relation.value}{hint}"
    )


# ------------------------------------------------------------------------ the run's result


def _plot_theta(theta: np.ndarray) -> Callable[[Path], None]:
    def draw(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.bar(np.arange(theta.size), theta)
        ax.set_xlabel("feature")
        ax.set_ylabel("θ")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)

    return draw


def ope_result(
    problem: LinearProblem,
    theta: np.ndarray,
    report: PrivacyReport,
    *,
    metrics: dict[str, Any],
    curve: list[dict[str, Any]] | None = None,
    config_type: type[Config] | None = None,
) -> Result:
    """The run's `Result`: metrics (the MSPBE when the model is known, ε, δ; the value and its
    interval), the curve (else θ), theta.npy and the plot. Only the report and post-processing
    of the released θ."""
    metrics = {
        k: cli_text(v, config_type) if isinstance(v, str) else v
        for k, v in lib.final_metrics(problem, theta, report, metrics).items()
    }
    rows = curve if curve else [{"feature": i, "theta": float(t)} for i, t in enumerate(theta)]
    plots: dict[str, Any]
    if curve:
        series = Series("gpope", [r["iteration"] for r in curve], [r["mspbe"] for r in curve])
        plots = {
            "mspbe": PlotSpec(
                "mspbe", "GPOPE", "iteration", "MSPBE of θ_i", [series], logx=True, logy=True
            )
        }
    else:
        plots = {"theta": _plot_theta(theta)}
    return Result(
        metrics=metrics,
        privacy=report,
        curve=rows,
        artifacts={"theta.npy": np.asarray(theta)},
        plots=plots,
        summary=_summary(problem, metrics),
    )


def estimate_result(
    problem: LinearProblem, estimate: LinearEstimate, config_type: type[Config]
) -> Result:
    """The run's `Result` of a library estimate."""
    return ope_result(
        problem,
        estimate.theta,
        estimate.report,
        metrics=estimate.metrics,
        curve=estimate.curve,
        config_type=config_type,
    )


def _summary(problem: LinearProblem, metrics: dict[str, Any]) -> list[str]:
    summary = []
    if "mspbe" in metrics:
        summary.append(f"MSPBE = {metrics['mspbe']:.4g} ({metrics.get('mspbe_source', '')})")
    if metrics.get("value") is not None:
        line = f"value of {problem.target_spec}: {metrics['value']:.4g}"
        if metrics.get("value_ci_low") is not None:
            line += (
                f" ({metrics['confidence']:.0%} interval [{metrics['value_ci_low']:.4g}, "
                f"{metrics['value_ci_high']:.4g}]: {metrics['value_ci_covers']})"
            )
        else:
            why = str(metrics["value_ci_covers"]).removeprefix("nothing: ")
            line += f" (no interval: {why})"
        summary.append(line + f"; start states: {metrics['value_start_states']}")
    elif "value_note" in metrics:
        summary.append(metrics["value_note"])
    return summary


class OpeSystem(System):
    """The shared side of the estimators: optional data, a seeded plan (the episodes are
    sampled with --env from the run's seed) and `load`."""

    data = "optional"
    plan_uses_seed = True
    epsilon_label: ClassVar[str] = "ε"

    def load(
        self, config: OpeConfig, source: Path | None, plan: Plan, rng: np.random.Generator
    ) -> TrajectoryDataset:
        with cli_errors(type(config)):
            return load_episodes(plan.facts["problem"])

    @staticmethod
    def adapt(plan: Plan, config_type: type[Config]) -> Plan:
        """A library plan on the run layer: the ledger's unit and relation checked, the
        public parameters' details naming flags (the planned and the final report's)."""
        problem: LinearProblem = plan.facts["problem"]
        check_ledger_relation(problem, plan.facts.get("relation"))
        facts = dict(plan.facts)
        if "params" in facts:
            facts["params"] = cli_parameters(facts["params"], config_type)
            plan.report.with_public_parameters(facts["params"])
        return Plan(report=plan.report, public=plan.public, facts=facts)

    def start(
        self,
        config: OpeConfig,
        header: DatasetHeader | None,
        seed: int,
        *,
        count_is_public: bool = True,
    ) -> tuple[PublicParameters, LinearProblem]:
        """PublicParameters with ε and δ, and the public problem (`count_is_public`: as in
        `public_problem`)."""
        params = lib.target_parameters(config, self.epsilon_label)
        problem = public_problem(config, header, params, seed, count_is_public=count_is_public)
        return params, problem
