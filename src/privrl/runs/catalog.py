"""The systems privrl ships, registered with the run layer (imported lazily by name)."""

from __future__ import annotations

from privrl.runs import registry

# One line per system: name -> "module:SystemClass". One block per family.
SHIPPED: dict[str, str] = {}

# offline RL, tabular and linear MDPs (privrl train dp-apvi | apvi | dp-vapvi | vapvi | pevi)
SHIPPED["dp-apvi"] = "privrl.systems.tabular:DpApviSystem"
SHIPPED["apvi"] = "privrl.systems.tabular:ApviSystem"
SHIPPED["dp-vapvi"] = "privrl.systems.linear:DpVapviSystem"
SHIPPED["vapvi"] = "privrl.systems.linear:VapviSystem"
SHIPPED["pevi"] = "privrl.systems.linear:PeviSystem"

# online episodic RL, one user per episode (privrl online sdp-pe | pe | ucbvi | dp-ucbvi)
SHIPPED["sdp-pe"] = "privrl.systems.online:SdpPeSystem"
SHIPPED["pe"] = "privrl.systems.online:PeSystem"
SHIPPED["ucbvi"] = "privrl.systems.online:UcbviSystem"
SHIPPED["dp-ucbvi"] = "privrl.systems.online:DpUcbviSystem"

# model-based offline RL on control tasks (privrl train mopo | primorl; MOPO is non-private)
SHIPPED["mopo"] = "privrl.systems.mopo:MopoSystem"
SHIPPED["primorl"] = "privrl.systems.primorl:PrimorlSystem"

# off-policy evaluation with linear features (privrl ope gpope | dp-lsw | dp-lsl | lstd)
SHIPPED["gpope"] = "privrl.systems.ope:Gpope"
SHIPPED["dp-lsw"] = "privrl.systems.ope:DpLsw"
SHIPPED["dp-lsl"] = "privrl.systems.ope:DpLsl"
SHIPPED["lstd"] = "privrl.systems.ope:Lstd"
SHIPPED["lstd-op"] = "privrl.systems.lstd_op:LstdOp"

# importance-sampling off-policy evaluation on logs with propensities
# (privrl ope ips | snips | dr | pdis | wpdis)
SHIPPED["ips"] = "privrl.systems.ips:Ips"
SHIPPED["snips"] = "privrl.systems.ips:Snips"
SHIPPED["dr"] = "privrl.systems.ips:Dr"
SHIPPED["pdis"] = "privrl.systems.ips:Pdis"
SHIPPED["wpdis"] = "privrl.systems.ips:Wpdis"

# expert-level offline RL, Sharma et al. (privrl train expert-dp | dp-sgd)
SHIPPED["expert-dp"] = "privrl.systems.expert:ExpertDp"
SHIPPED["dp-sgd"] = "privrl.systems.expert:DpSgd"

# evaluation of a saved policy in a Gymnasium environment (privrl eval; post-processing)
SHIPPED["eval"] = "privrl.systems.evaluate:EvalSystem"

# privacy audits: attack a system's own release, bound ε from below
# (privrl audit dp-apvi | gpope | dp-vapvi | dp-lsw | sdp-pe | dp-sgd | expert-dp |
# expert-dp-sgd | primorl)
SHIPPED["audit-dp-apvi"] = "privrl.systems.audit:AuditDpApvi"
SHIPPED["audit-gpope"] = "privrl.systems.audit:AuditGpope"
SHIPPED["audit-dp-vapvi"] = "privrl.systems.audit_more:AuditDpVapvi"
SHIPPED["audit-dp-lsw"] = "privrl.systems.audit_more:AuditDpLsw"
SHIPPED["audit-sdp-pe"] = "privrl.systems.audit_more:AuditSdpPe"
SHIPPED["audit-dp-sgd"] = "privrl.systems.audit_more:AuditDpSgd"
SHIPPED["audit-expert-dp"] = "privrl.systems.audit_deep:AuditExpertDp"
SHIPPED["audit-expert-dp-sgd"] = "privrl.systems.audit_deep:AuditExpertDpSgd"
SHIPPED["audit-primorl"] = "privrl.systems.audit_deep:AuditPrimorl"


def load() -> None:
    """Register every shipped system (idempotent)."""
    for name, target in SHIPPED.items():
        registry.SYSTEMS.setdefault(name, target)
