"""The systems privrl ships, registered with the run layer (imported lazily by name)."""

from __future__ import annotations

from privrl.runs import registry

# One line per system: name -> "module:SystemClass". One block per family.
SHIPPED: dict[str, str] = {}

# off-policy evaluation with linear features (privrl ope gpope | dp-lsw | dp-lsl | lstd)
SHIPPED["gpope"] = "privrl.systems.ope:Gpope"
SHIPPED["dp-lsw"] = "privrl.systems.ope:DpLsw"
SHIPPED["dp-lsl"] = "privrl.systems.ope:DpLsl"
SHIPPED["lstd"] = "privrl.systems.ope:Lstd"


def load() -> None:
    """Register every shipped system (idempotent)."""
    for name, target in SHIPPED.items():
        registry.SYSTEMS.setdefault(name, target)
