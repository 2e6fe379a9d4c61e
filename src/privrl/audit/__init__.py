"""`privrl.audit`: measure, by attack, how much a private system really leaks.

Each audit is a config and an object (`privrl.audit.base.Audit`) whose `run(seed=...)` returns
an `AuditResult` with the verdict, the metrics and the claimed report:

    from privrl.audit import AuditGpopeConfig, GpopeAudit

    result = GpopeAudit(AuditGpopeConfig(epsilon=2.0, iterations=2, trials=5000)).run(seed=0)
    print(result.verdict, result.metrics["epsilon_lower_bound"])

The audits of released statistics are in `privrl.audit.statistic_audits` (DP-APVI, GPOPE,
DP-VAPVI, DP-LSW, SDP-PE), those of training in `privrl.audit.training_audits` (DP-SGD,
expert-dp's filter and DP-SGD steps, PRIMORL); `privrl audit NAME` is generated from the same
configs. Underneath, `privrl.audit.bounds` turns an attack's scores into an empirical ε lower
bound (Clopper–Pearson 95%, Jagielski et al. 2020; Nasr et al. 2021) or a one-run bound
(Steinke, Nasr & Jagielski 2023); `privrl.audit.attacks`, `releases`, `dpsgd`, `expert` and
`primorl` run vectorised trials of each audited system's own mechanism; `privrl.audit.run`
summarises and plots. See docs/audit.md.
"""

from privrl.audit.attacks import AuditTrials, GPOPEAuditSettings, audit_dp_apvi, audit_gpope
from privrl.audit.base import Audit, AuditConfig, AuditResult
from privrl.audit.bounds import EpsilonBound, auc, epsilon_lower_bound, roc_curve
from privrl.audit.run import roc_plot, summarise
from privrl.audit.statistic_audits import (
    AuditDpApviConfig,
    AuditDpLswConfig,
    AuditDpVapviConfig,
    AuditGpopeConfig,
    AuditSdpPeConfig,
    DpApviAudit,
    DpLswAudit,
    DpVapviAudit,
    GpopeAudit,
    SdpPeAudit,
)
from privrl.audit.training_audits import (
    AuditDpSgdConfig,
    AuditExpertDpConfig,
    AuditExpertDpSgdConfig,
    AuditPrimorlConfig,
    DpSgdAudit,
    ExpertDpAudit,
    ExpertDpSgdAudit,
    PrimorlAudit,
)

AUDITS: dict[str, type[Audit]] = {
    audit.name: audit
    for audit in (
        DpApviAudit,
        GpopeAudit,
        DpVapviAudit,
        DpLswAudit,
        SdpPeAudit,
        DpSgdAudit,
        ExpertDpAudit,
        ExpertDpSgdAudit,
        PrimorlAudit,
    )
}
"""Every audit by its name (the `system` of its config, e.g. "audit-gpope")."""

__all__ = [
    "AUDITS",
    "Audit",
    "AuditConfig",
    "AuditDpApviConfig",
    "AuditDpLswConfig",
    "AuditDpSgdConfig",
    "AuditDpVapviConfig",
    "AuditExpertDpConfig",
    "AuditExpertDpSgdConfig",
    "AuditGpopeConfig",
    "AuditPrimorlConfig",
    "AuditResult",
    "AuditSdpPeConfig",
    "AuditTrials",
    "DpApviAudit",
    "DpLswAudit",
    "DpSgdAudit",
    "DpVapviAudit",
    "EpsilonBound",
    "ExpertDpAudit",
    "ExpertDpSgdAudit",
    "GPOPEAuditSettings",
    "GpopeAudit",
    "PrimorlAudit",
    "SdpPeAudit",
    "auc",
    "audit_dp_apvi",
    "audit_gpope",
    "epsilon_lower_bound",
    "roc_curve",
    "roc_plot",
    "summarise",
]
