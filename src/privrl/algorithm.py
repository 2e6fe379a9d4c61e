"""The shape every algorithm of privrl has from Python: a frozen config and an object.

    from privrl.offline import DPAPVI, DPAPVIConfig

    result = DPAPVI(DPAPVIConfig(horizon=10, rho=1.0)).fit(dataset, ledger=ledger)
    result.policy, result.report, result.metrics

A learner has `fit(dataset)`, an evaluator `estimate(dataset, policy)`. Both follow one order
of work, the privacy rule made structural:

1. `plan(header)` sees the config and the dataset's header only (metadata, sizes, content
   fingerprint: `privrl.data.io.header_of`). It resolves every public parameter, each with its
   source (`privrl.privacy.public.PublicParameters`), and states the planned `PrivacyReport`.
   Nothing it returns can depend on the episodes: it never sees them.
2. With a `ledger=`, the planned report is reserved on the dataset's ledger before the
   episodes are read (`privrl.privacy.ledger.BudgetLedger.spend`); the final report completes
   the reservation. A call that fails keeps the reservation counting (fail closed).
3. The algorithm computes, drawing its privacy noise from a `NoiseSource` (secure unless the
   caller passes `NoiseSource.insecure(seed)` for a simulation, which leaves the report
   uncertified).

The command line and `privrl run` reach the same objects through thin adapters in
`privrl.systems`; this module knows nothing of files, flags or consoles. Progress is reported
through a `Progress` callback, never drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from privrl.config import Config
from privrl.privacy.noise import NoiseSource
from privrl.privacy.report import PrivacyReport
from privrl.progress import Progress, no_progress

__all__ = [
    "Algorithm",
    "Estimated",
    "Fitted",
    "Plan",
    "Progress",
    "header_and_plan",
    "no_progress",
    "noise_or_secure",
    "spending",
]

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset
    from privrl.data.io import DatasetHeader
    from privrl.privacy.ledger import BudgetLedger

C = TypeVar("C", bound=Config)
P = TypeVar("P")


@dataclass(frozen=True)
class Plan:
    """The public side of a call, fixed before any private data is read.

    Attributes:
        report: the planned privacy report (what a ledger reserves).
        public: resolved public parameters and sizes from the header, as published beside the
            config (config.json on the command line); computed before the data is read.
        facts: anything else the algorithm carries from `plan` to the computation (not
            published).
    """

    report: PrivacyReport
    public: Mapping[str, Any] = field(default_factory=dict)
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fitted(Generic[P]):
    """What a learner's `fit` returns.

    Attributes:
        policy: the learned policy (`privrl.policies.Policy`, or a table for tabular MDPs).
        report: the final privacy report: every release, its unit and relation, ε at δ.
        metrics: final figures (standard keys where they apply: `suboptimality`,
            `return_mean`, ...); nothing in them is computed from the private data unless it
            went through a mechanism.
        curve: per-step or per-round rows (a learning curve), if any.
        details: the algorithm's own full result (models, values, bonuses), for inspection.
    """

    policy: P
    report: PrivacyReport
    metrics: Mapping[str, Any] = field(default_factory=dict)
    curve: Sequence[Mapping[str, Any]] = ()
    details: Any = None


@dataclass(frozen=True)
class Estimated:
    """What an evaluator's `estimate` returns.

    Attributes:
        value: the (private) value estimate of the target policy.
        interval: a confidence interval (low, high) when the estimator gives one.
        report: the final privacy report.
        metrics: final figures (interval level, bounds used, ...).
        details: the estimator's own full result.
    """

    value: float
    report: PrivacyReport
    interval: tuple[float, float] | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    details: Any = None


class Algorithm(Generic[C]):
    """Base of the learners and evaluators: holds a validated config, plans from a header.

    Subclasses set `Config` and implement `plan`; a learner adds `fit`, an evaluator
    `estimate`, each through `_spending` so that a ledger sees the planned report first.
    """

    Config: ClassVar[type[Config]]

    def __init__(self, config: C | None = None, **settings: Any) -> None:
        if config is None:
            config = self.Config(**settings)  # type: ignore[assignment]
        elif settings:
            config = config.replace(**settings)
        if not isinstance(config, self.Config):
            raise TypeError(
                f"{type(self).__name__} takes a {self.Config.__name__}, "
                f"not a {type(config).__name__}"
            )
        self.config: C = config  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"

    def plan(self, header: DatasetHeader) -> Plan:
        """Resolve the public parameters and state the planned report from `header` alone."""
        raise NotImplementedError


def header_and_plan(algorithm: Algorithm[Any], dataset: TrajectoryDataset) -> tuple[Any, Plan]:
    """The header of `dataset` in memory and the algorithm's plan from it."""
    from privrl.data.io import header_of

    header = header_of(dataset)
    return header, algorithm.plan(header)


def spending(
    ledger: BudgetLedger | None,
    plan: Plan,
    header: DatasetHeader,
    compute: Callable[[], Any],
    *,
    label: str = "",
    report_of: Callable[[Any], PrivacyReport] = lambda result: result.report,
) -> Any:
    """Run `compute()` as a ledger transaction when a ledger is given: reserve `plan.report`
    before it reads the data, complete with the result's report after (see
    `BudgetLedger.spend`). Without a ledger, just `compute()`."""
    if ledger is None:
        return compute()
    fingerprint = header.attrs.get("content_sha256")
    with ledger.spend(plan.report, content_sha256=str(fingerprint), label=label) as spend:
        result = compute()
        spend.complete(report_of(result))
    return result


def noise_or_secure(noise: NoiseSource | None) -> NoiseSource:
    """The caller's noise source, or a fresh secure one."""
    return NoiseSource.secure() if noise is None else noise
