"""The audits of expert-dp's consensus filter, expert-level DP-SGD and PRIMORL on the run layer
(docs/audit.md): thin `AuditSystem`s over `privrl.audit.training_audits`, as in
`privrl.systems.audit`. The two one-run audits (expert-dp-sgd, primorl) train once with many
canaries (Steinke, Nasr & Jagielski 2023).
"""

from __future__ import annotations

from privrl.audit.training_audits import (
    AuditExpertDpConfig,
    AuditExpertDpSgdConfig,
    AuditPrimorlConfig,
    ExpertDpAudit,
    ExpertDpSgdAudit,
    PrimorlAudit,
)
from privrl.systems.audit import AuditSystem

__all__ = [
    "AuditExpertDp",
    "AuditExpertDpConfig",
    "AuditExpertDpSgd",
    "AuditExpertDpSgdConfig",
    "AuditPrimorl",
    "AuditPrimorlConfig",
]


class AuditExpertDp(AuditSystem):
    name = ExpertDpAudit.name
    Config = AuditExpertDpConfig
    summary = ExpertDpAudit.summary
    audit = ExpertDpAudit


class AuditExpertDpSgd(AuditSystem):
    name = ExpertDpSgdAudit.name
    Config = AuditExpertDpSgdConfig
    summary = ExpertDpSgdAudit.summary
    audit = ExpertDpSgdAudit


class AuditPrimorl(AuditSystem):
    name = PrimorlAudit.name
    Config = AuditPrimorlConfig
    summary = PrimorlAudit.summary
    audit = PrimorlAudit
