"""`privrl audit`: measure, by attack, how much a private system really leaks (issue 17).

`privrl.audit.bounds` turns an attack's scores into an empirical ε lower bound (Clopper–Pearson
95%, Jagielski et al. 2020; Nasr et al. 2021) or a one-run bound (Steinke, Nasr & Jagielski
2023); `privrl.audit.attacks` runs vectorised trials of each audited system's own mechanism;
`privrl.audit.run` summarises and plots; `privrl.systems.audit` puts both audits on the run
layer. See docs/audit.md.
"""

from privrl.audit.attacks import AuditTrials, GPOPEAuditSettings, audit_dp_apvi, audit_gpope
from privrl.audit.bounds import EpsilonBound, auc, epsilon_lower_bound, roc_curve
from privrl.audit.run import roc_plot, summarise

__all__ = [
    "AuditTrials",
    "EpsilonBound",
    "GPOPEAuditSettings",
    "auc",
    "audit_dp_apvi",
    "audit_gpope",
    "epsilon_lower_bound",
    "roc_curve",
    "roc_plot",
    "summarise",
]
