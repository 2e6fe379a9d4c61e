"""The systems privrl ships, registered with the run layer (imported lazily by name)."""

from __future__ import annotations

from privrl.runs import registry

# One line per system: name -> "module:SystemClass".
SHIPPED: dict[str, str] = {}


def load() -> None:
    """Register every shipped system (idempotent)."""
    for name, target in SHIPPED.items():
        registry.SYSTEMS.setdefault(name, target)
