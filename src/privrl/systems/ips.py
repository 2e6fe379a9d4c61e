"""Private importance-sampling off-policy evaluation on the run layer: IPS, SNIPS, DR, PDIS
and WPDIS on logs with propensities (contextual-bandit logs are one-step episodes).

    privrl ope ips   --data logs.h5 --target-policy uniform --reward-range 0,1 \\
                     --weight-clip 20 --max-horizon 1 --epsilon 1 --out runs/ips
    privrl ope snips --data logs.h5 --target-policy pi.npy ...
    privrl ope dr    --data logs.h5 --target-policy mymod:probs --reward-model q.npy ...
    privrl ope pdis  --data episodes.h5 --target-policy pi.npy --max-horizon 30 ...
    privrl ope ips   --data logs.h5 ... --non-private --out runs/ips-reference

A run writes config.json, metrics.json (`value`, `value_ci_low`, `value_ci_high`,
`interval_method` and `interval_reason`, `private`, ε, δ), privacy.json and prints the value
with its interval and which interval was used. `--non-private` runs the non-private reference
(no noise, ε = ∞, refused by a dataset's ledger).

A thin adapter: the configs are the library's (`privrl.ope.IPSConfig`, ...) plus the target
policy's spec; `plan` and `run` call the library's `plan` and `compute`
(`privrl.ope.is_estimators`), which resolve every public parameter from the header and
draw the noise from the run's secure `NoiseSource`, never from the seed. This module keeps
the file (`load`), the ledger's unit check and the console lines. The planned report is
checked by the dataset's ledger before `load` reads the episodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from privrl.config import Config, ConfigError, option
from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import DatasetHeader
from privrl.ope.is_estimators import (
    DR,
    IPS,
    PDIS,
    SNIPS,
    WPDIS,
    DRConfig,
    ImportanceConfig,
    ImportanceEstimator,
    IPSConfig,
    PDISConfig,
    SNIPSConfig,
    WPDISConfig,
)
from privrl.ope.targets import USER_CODE_HELP
from privrl.privacy.report import PrivacyReport
from privrl.runs.system import Plan, Result, RunContext, System
from privrl.runs.wording import command_detail

__all__ = [
    "Dr",
    "DrConfig",
    "ImportanceConfig",
    "Ips",
    "IpsConfig",
    "Pdis",
    "PdisConfig",
    "Snips",
    "SnipsConfig",
    "Wpdis",
    "WpdisConfig",
]


def target_policy_option() -> Any:
    """--target-policy: the spec the adapter hands to the library's `plan` / `compute`."""
    return option(
        ...,
        help="Policy to evaluate: uniform, FILE.npy (π(a|s) as [S, A], [H, S, A] or [A] "
        "context-free), a saved privrl policy.npz or learner.pt[:epsilon=E], module:function "
        "(returns n × A action probabilities for a batch of n observations), or column:NAME "
        f"({USER_CODE_HELP}).",
    )


@dataclass(frozen=True)
class TargetPolicySpec(Config):
    """--target-policy: the spec the adapter hands to the library's `plan`. A base listed
    after the library's config, so that its field comes first (in --help and config.json)."""

    target_policy: str = target_policy_option()


@dataclass(frozen=True)
class IpsConfig(IPSConfig, TargetPolicySpec):
    """`privrl ope ips`: the library's `IPSConfig` and the target policy's spec."""


@dataclass(frozen=True)
class SnipsConfig(SNIPSConfig, TargetPolicySpec):
    """`privrl ope snips`: the library's `SNIPSConfig` and the target policy's spec."""


@dataclass(frozen=True)
class DrConfig(DRConfig, TargetPolicySpec):
    """`privrl ope dr`: the library's `DRConfig` and the target policy's spec."""


@dataclass(frozen=True)
class PdisConfig(PDISConfig, TargetPolicySpec):
    """`privrl ope pdis`: the library's `PDISConfig` and the target policy's spec."""


@dataclass(frozen=True)
class WpdisConfig(WPDISConfig, TargetPolicySpec):
    """`privrl ope wpdis`: the library's `WPDISConfig` and the target policy's spec."""


ImportanceRunConfig = IpsConfig | SnipsConfig | DrConfig | PdisConfig | WpdisConfig


def _check_ledger(path: Path) -> None:
    """A ledger kept for another unit or relation would refuse these estimators; say so
    plainly (reads the ledger only)."""
    from privrl.ope.importance import RELATION, UNIT
    from privrl.privacy.ledger import BudgetLedger

    ledger = BudgetLedger.for_dataset(path)
    if ledger is None or (ledger.unit is UNIT and ledger.relation is RELATION):
        return
    raise ValueError(
        f"the ledger of {path} accounts {ledger.unit.value} under {ledger.relation.value}, "
        f"but these estimators protect one {UNIT.value} under {RELATION.value} only; use a "
        "dataset whose ledger was created with --unit trajectory --relation replace_one"
    )


class ImportanceSystem(System):
    """IPS, SNIPS and DR on the run layer: the library's plan and computation
    (`privrl.ope.is_estimators`), the file, the ledger check and the console lines here."""

    data = "required"
    Estimator: ClassVar[type[ImportanceEstimator[Any]]]

    def plan(self, config: ImportanceRunConfig, header: DatasetHeader | None) -> Plan:
        assert header is not None and header.path is not None
        try:
            plan = self.Estimator(config).plan(header, config.target_policy)
        except ConfigError as exc:
            if exc.key == "policy":  # the library's argument is this command's --target-policy
                raise ConfigError("target_policy", exc.problem) from None
            raise
        _check_ledger(header.path)
        _details_as_flags(plan.report, type(config))
        return plan

    def load(
        self, config: ImportanceRunConfig, source: Path | None, plan: Plan, rng: np.random.Generator
    ) -> TrajectoryDataset:
        from privrl.data.dataset import DatasetError
        from privrl.data.io import load_hdf5

        assert source is not None
        data = load_hdf5(source)
        m = plan.public["trajectories"]
        if data.n_episodes != m:  # a format error: the header disagrees with the arrays
            raise DatasetError(
                f"{source}: the header says {m} episodes but the arrays hold "
                f"{data.n_episodes}; the file is corrupt (re-export it)"
            )
        if data.behaviour_probs is None:  # a schema error, not a property of the values
            raise DatasetError(
                f"{source} has no 'behaviour_probs' field: importance sampling needs the logged "
                "propensities (import them with --columns ...,behaviour_prob=COLUMN)",
                field="behaviour_probs",
            )
        return data

    def run(
        self,
        config: ImportanceRunConfig,
        data: TrajectoryDataset,
        rng: np.random.Generator,
        ctx: RunContext,
    ) -> Result:
        assert ctx.plan is not None
        est = self.Estimator(config).compute(ctx.plan, data, ctx.noise)
        low, high = est.interval or (est.value, est.value)
        pct = f"{est.metrics['confidence']:.0%}"
        private = bool(est.metrics["private"])
        noise = "privacy noise included" if private else "NOT private: no noise, ε = ∞"
        summary = [
            f"{self.name.upper()} value of {config.target_policy}: {est.value:.4g} "
            f"({pct} CI [{low:.4g}, {high:.4g}], {noise})",
            f"interval: {est.metrics['interval_method']} ({est.metrics['interval_reason']})",
        ]
        if not low <= est.value <= high:
            summary.append(
                "the value is the unbiased noisy release, left unclipped; every policy's value "
                "lies in the public return range, so the interval is cut to it"
            )
        _details_as_flags(est.report, type(config))
        return Result(metrics=dict(est.metrics), privacy=est.report, summary=summary)


class Ips(ImportanceSystem):
    name = "ips"
    Config = IpsConfig
    Estimator = IPS
    summary = (
        "Private IPS: trajectory-wise importance sampling with clipped weights, one noisy sum."
    )


class Snips(ImportanceSystem):
    name = "snips"
    Config = SnipsConfig
    Estimator = SNIPS
    summary = "Private self-normalised IPS: the ratio of two noisy sums."


class Pdis(ImportanceSystem):
    name = "pdis"
    Config = PdisConfig
    Estimator = PDIS
    summary = "Private per-decision IS: rewards weighted by clipped cumulative weights."


class Wpdis(ImportanceSystem):
    name = "wpdis"
    Config = WpdisConfig
    Estimator = WPDIS
    summary = "Private weighted per-decision IS: the ratio of two noisy sums."


class Dr(ImportanceSystem):
    name = "dr"
    Config = DrConfig
    Estimator = DR
    summary = "Private doubly robust OPE with a public reward model q̂ (first-step control variate)."


def _details_as_flags(report: PrivacyReport, config_cls: type[Config]) -> None:
    """The report's public parameters with the fields their details name (`epsilon`,
    `weight_clip`, ...) written as this command's flags, as privacy.json lists them."""
    for p in report.public_parameters:
        if p.get("detail"):
            p["detail"] = command_detail(str(p["detail"]), config_cls)
