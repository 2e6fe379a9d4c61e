"""The audits of DP-VAPVI, DP-LSW, SDP-PE and DP-SGD on the run layer (docs/audit.md): thin
`AuditSystem`s over `privrl.audit.statistic_audits` and `privrl.audit.training_audits`, as in
`privrl.systems.audit`. `audit-dp-sgd --mode one-run` audits ONE training run with many
canaries (Steinke, Nasr & Jagielski 2023) instead of many runs.
"""

from __future__ import annotations

from privrl.audit.statistic_audits import (
    AuditDpLswConfig,
    AuditDpVapviConfig,
    AuditSdpPeConfig,
    DpLswAudit,
    DpVapviAudit,
    SdpPeAudit,
)
from privrl.audit.training_audits import AuditDpSgdConfig, DpSgdAudit
from privrl.systems.audit import AuditSystem

__all__ = [
    "AuditDpLsw",
    "AuditDpLswConfig",
    "AuditDpSgd",
    "AuditDpSgdConfig",
    "AuditDpVapvi",
    "AuditDpVapviConfig",
    "AuditSdpPe",
    "AuditSdpPeConfig",
]


class AuditDpVapvi(AuditSystem):
    name = DpVapviAudit.name
    Config = AuditDpVapviConfig
    summary = DpVapviAudit.summary
    audit = DpVapviAudit


class AuditDpLsw(AuditSystem):
    name = DpLswAudit.name
    Config = AuditDpLswConfig
    summary = DpLswAudit.summary
    audit = DpLswAudit


class AuditSdpPe(AuditSystem):
    name = SdpPeAudit.name
    Config = AuditSdpPeConfig
    summary = SdpPeAudit.summary
    audit = SdpPeAudit


class AuditDpSgd(AuditSystem):
    name = DpSgdAudit.name
    Config = AuditDpSgdConfig
    summary = DpSgdAudit.summary
    audit = DpSgdAudit
