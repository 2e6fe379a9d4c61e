"""Privacy audits on the run layer: `privrl audit NAME` for every audit of `privrl.audit`
(docs/audit.md).

An audit is a config and an object of the library (`privrl.audit.base.Audit`: `plan` resolves
the public parameters and states the audited system's claimed report; `play` runs the trials
and bounds ε from below). This module only adapts them to the run layer, one `AuditSystem` per
audit:

- `plan` is the audit's plan (its public parameters published in config.json);
- `run` plays the trials from the run's generator and returns metrics.json (the claimed ε, the
  lower bound and its interval, the attack's AUC), privacy.json (the claimed report with its
  public parameters) and plots/roc.png;
- `failure`: a bound above the claimed ε fails the audit (exit code 1 on the command line,
  after the run directory is written).

The audits read no private data (D₀ and the canary are synthetic, drawn from the run's seed,
or the auditor's canary file), so these systems take no `--data` and no ledger is involved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privrl.audit.base import (
    SYNTHETIC_NOTE,
    Audit,
    AuditConfig,
    AuditResult,
    OneRunSize,
    one_run_canaries,
    one_run_outcome,
    resolve_noise_multiplier,
)
from privrl.audit.statistic_audits import (
    AuditDpApviConfig,
    AuditGpopeConfig,
    DpApviAudit,
    GpopeAudit,
)
from privrl.config import Config
from privrl.runs.system import Plan, Result, RunContext, System
from privrl.runs.wording import in_command_words

if TYPE_CHECKING:
    from privrl.audit.dpsgd import OneRunAudit
    from privrl.data.io import DatasetHeader
    from privrl.privacy.report import PrivacyReport

__all__ = [
    "SYNTHETIC_NOTE",
    "AuditConfig",
    "AuditDpApvi",
    "AuditDpApviConfig",
    "AuditGpope",
    "AuditGpopeConfig",
    "AuditSystem",
    "OneRunSize",
    "one_run_canaries",
    "one_run_result",
    "resolve_noise_multiplier",
]


def result_of(outcome: AuditResult) -> Result:
    """The run layer's `Result` of an audit: metrics.json, privacy.json (the claimed report),
    plots/roc.png (when the attack has scores to plot) and the console line."""
    plots = {} if outcome.metrics.get("auc") is None else {"roc": outcome.roc_plot}
    return Result(
        metrics=outcome.metrics, privacy=outcome.report, plots=plots, summary=[outcome.summary]
    )


def one_run_result(
    audit: OneRunAudit, report: PrivacyReport, confidence: float, statistic: str | None = None
) -> Result:
    """The `Result` of a one-run audit (`privrl.audit.base.one_run_outcome`)."""
    return result_of(one_run_outcome(audit, report, confidence, statistic))


class AuditSystem(System):
    """An audit of `privrl.audit` on the run layer: plan, play, verdict."""

    data = "none"
    audit: ClassVar[type[Audit[Any]]]

    def plan(self, config: Config, header: DatasetHeader | None) -> Plan:
        with in_command_words(type(config)):
            return self.audit(config).plan()

    def run(self, config: Config, data: None, rng: np.random.Generator, ctx: RunContext) -> Result:
        assert ctx.plan is not None
        with in_command_words(type(config)):
            return result_of(self.audit(config).play(ctx.plan, rng, ctx.progress))

    def failure(self, config: Config, result: Result) -> str | None:
        metrics = result.metrics
        if not metrics["violated"]:
            return None
        return (
            f"audit failed: the empirical lower bound ε ≥ {metrics['epsilon_lower_bound']:.4g} "
            f"exceeds the claimed ε = {metrics['epsilon_claimed']:.4g}; the mechanism leaks "
            "more than its privacy report states — check its noise scale and sensitivity"
        )


class AuditDpApvi(AuditSystem):
    name = DpApviAudit.name
    Config = AuditDpApviConfig
    summary = DpApviAudit.summary
    audit = DpApviAudit


class AuditGpope(AuditSystem):
    name = GpopeAudit.name
    Config = AuditGpopeConfig
    summary = GpopeAudit.summary
    audit = GpopeAudit
