"""The shape every linear-feature estimator has from Python: `X(config, public=..., simulator=...,
seed=...)`, `plan(header, policy)` from public facts only, `estimate(dataset, policy)` as a
ledger transaction (`privrl.algorithm.spending`) returning an `Estimated`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from privrl.algorithm import Algorithm, Estimated, Plan, noise_or_secure, spending
from privrl.config import ConfigError
from privrl.ope.linear.common import (
    HEADER_COUNT_DETAIL,
    LinearOpeConfig,
    LinearProblem,
    PolicyLike,
    final_metrics,
    problem_from_header,
    problem_from_simulator,
    target_parameters,
)

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset
    from privrl.data.io import DatasetHeader
    from privrl.ope.linear.gpope import PublicSource
    from privrl.privacy.ledger import BudgetLedger
    from privrl.privacy.noise import NoiseSource
    from privrl.privacy.public import PublicParameters
    from privrl.privacy.report import PrivacyReport

C = TypeVar("C", bound=LinearOpeConfig)


@dataclass
class LinearEstimate:
    """What an estimator computed: the released θ, the final report, the metrics (value,
    interval, MSPBE with a known model, ε, δ), a curve (GPOPE's MSPBE, with a model) and the
    algorithm's own result."""

    theta: np.ndarray
    report: PrivacyReport
    metrics: dict[str, Any]
    curve: list[dict[str, Any]] | None = None
    details: Any = None


def public_plan(
    problem: LinearProblem, report: PrivacyReport, algorithm: dict[str, Any], **facts: Any
) -> Plan:
    """The plan: the problem's public description + the estimator's public settings, and
    `facts` (with the problem) for the computation."""
    public = {**problem.public_config(), **algorithm}
    return Plan(report=report, public=public, facts={"problem": problem, **facts})


def prepare(problem: LinearProblem, data: TrajectoryDataset) -> TrajectoryDataset:
    """The private episodes as the estimator reads them: checked against the plan (a format
    check, not a statistic) and cut to the declared horizon."""
    from privrl.data.dataset import DatasetError

    where = "the dataset" if problem.data_path is None else str(problem.data_path)
    if problem.domain is None and data.n_episodes != problem.m:
        raise DatasetError(
            f"{where}: the header says {problem.m} episodes but the arrays hold "
            f"{data.n_episodes}; the file is corrupt (re-export it)"
        )
    if problem.target_policy is not None and data.behaviour_probs is None:
        raise DatasetError(
            f"{where} has no 'behaviour_probs' field: off-policy evaluation of `target_policy` "
            f"{problem.target_spec} needs the behaviour policy's action probabilities (record "
            "them when collecting, or evaluate on-policy with `target_policy=behaviour`)",
            field="behaviour_probs",
        )
    return problem.truncate(data)


class LinearEstimator(Algorithm[C]):
    """Base of GPOPE, DP-LSW, DP-LSL, LSTD and LSTD-OP from Python.

    Args:
        config: the estimator's config (or its fields as keywords).
        public: a dataset declared PUBLIC (independent of the private one) to tune on and to
            measure the noise with, where the estimator uses one.
        simulator: a public simulator of the private data's domain (`privrl.envs.chain.
            ChainDomain`, `privrl.ope.domains.get_domain`): its features, γ, start
            distribution and MSPBE model are public; it is sampled only with its own seeds.
        seed: the seed of public randomness (simulator samples, public replica runs); never
            of the privacy noise.
    """

    epsilon_label: ClassVar[str] = "ε"
    label: ClassVar[str] = ""

    def __init__(
        self,
        config: C | None = None,
        *,
        public: TrajectoryDataset | None = None,
        public_name: str = "public dataset",
        simulator: Any = None,
        seed: int = 0,
        **settings: Any,
    ) -> None:
        super().__init__(config, **settings)
        self.public = public
        self.public_name = public_name
        self.simulator = simulator
        self.seed = int(seed)

    def public_source(self) -> PublicSource:
        from privrl.ope.linear.gpope import PublicSource

        return PublicSource(self.public, self.public_name)

    def count_is_public(self) -> bool:
        """Whether neighbours have the same number of trajectories (replace-one)."""
        return True

    def parameters(self) -> PublicParameters:
        """The public parameters the plan starts from (ε and δ for a private estimator)."""
        return target_parameters(self.config, self.epsilon_label)

    def problem(
        self, header: DatasetHeader, params: PublicParameters, policy: PolicyLike
    ) -> LinearProblem:
        """The public problem of an estimate on the dataset with this header."""
        from privrl.privacy.public import Source

        if self.simulator is None:
            return problem_from_header(
                self.config,
                header,
                params,
                policy=policy,
                seed=self.seed,
                count_is_public=self.count_is_public(),
            )
        if not self.count_is_public():
            raise ConfigError(
                "simulator",
                f"is not supported by {self.config.system} under add/remove neighbours (their "
                "counts differ); evaluate the dataset without a simulator, with a declared "
                "`declared_trajectories`",
            )
        return problem_from_simulator(
            self.config,
            self.simulator,
            params,
            policy=policy,
            m=int(header.n_episodes),
            m_source=Source.METADATA,
            m_detail=HEADER_COUNT_DETAIL,
            seed=self.seed,
            header=header,
        )

    def plan(self, header: DatasetHeader, policy: PolicyLike = None) -> Plan:
        """Every public parameter and the planned report, from `header` and `policy` only."""
        params = self.parameters()
        problem = self.problem(header, params, policy)
        return self.plan_problem(problem, params, header)

    def plan_problem(
        self, problem: LinearProblem, params: PublicParameters, header: Any | None
    ) -> Plan:
        """The plan from a public problem (a dataset's, or a simulator's sample that the
        command line's `--env` draws) and the parameters resolved so far; `header`: the
        dataset's, or None for a simulator's sample."""
        raise NotImplementedError

    def compute(self, plan: Plan, data: TrajectoryDataset, noise: NoiseSource) -> LinearEstimate:
        """The estimate on the private episodes (as `prepare` returns them) with the planned
        public settings; every release's noise from `noise`."""
        raise NotImplementedError

    def estimate(
        self,
        dataset: TrajectoryDataset,
        policy: PolicyLike = None,
        *,
        ledger: BudgetLedger | None = None,
        noise: NoiseSource | None = None,
    ) -> Estimated:
        """The private estimate of `policy`'s value on `dataset` (None: the behaviour policy).

        With a `ledger`, the planned report is reserved before the episodes are read and the
        final one recorded after. `noise=None` draws the privacy noise from a fresh secure
        source (`NoiseSource.insecure(seed)` makes a repeatable, uncertified simulation)."""
        from privrl.data.io import header_of

        header = header_of(dataset)
        plan = self.plan(header, policy)
        source = noise_or_secure(noise)
        if not source.certified:  # uncertified (ε = ∞): a ledger refuses it before the data
            plan = replace(plan, report=source.certify(plan.report))

        def compute() -> Estimated:
            problem: LinearProblem = plan.facts["problem"]
            result = self.compute(plan, prepare(problem, dataset), source)
            result.report = source.certify(result.report)
            return estimated(problem, result)

        return spending(ledger, plan, header, compute, label=self.label or self.config.system)


def estimated(problem: LinearProblem, result: LinearEstimate) -> Estimated:
    """The `Estimated` of a computed estimate: v, its interval, the final metrics."""
    metrics = final_metrics(problem, result.theta, result.report, result.metrics)
    result.metrics = metrics
    low, high = metrics.get("value_ci_low"), metrics.get("value_ci_high")
    value = metrics.get("value")
    return Estimated(
        value=float("nan") if value is None else float(value),
        report=result.report,
        interval=None if low is None or high is None else (float(low), float(high)),
        metrics=metrics,
        details=result,
    )
