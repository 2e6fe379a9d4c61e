"""Privacy units and neighbouring relations.

Every private configuration in privrl names *what* is protected (the unit) and *how*
neighbouring datasets differ (the relation). Both appear in every `PrivacyReport`.
"""

from __future__ import annotations

from enum import StrEnum

from dp_accounting import NeighboringRelation


class PrivacyUnit(StrEnum):
    """The granularity of protection: what one individual contributes."""

    TRANSITION = "transition"  # one (s, a, r, s') tuple
    TRAJECTORY = "trajectory"  # one whole episode
    USER = "user"  # all episodes of one user (one episode per user in online RL)
    EXPERT = "expert"  # all trajectories of one demonstrating expert

    def describe(self) -> str:
        return {
            PrivacyUnit.TRANSITION: "one transition (s, a, r, s')",
            PrivacyUnit.TRAJECTORY: "one whole trajectory",
            PrivacyUnit.USER: "all data of one user",
            PrivacyUnit.EXPERT: "one expert with all of their trajectories",
        }[self]


class NeighbourRelation(StrEnum):
    """How two neighbouring datasets differ by one unit."""

    ADD_REMOVE = "add_remove"  # one dataset has one more unit than the other
    REPLACE_ONE = "replace_one"  # one unit's data is replaced by arbitrary other data

    def to_dp_accounting(self) -> NeighboringRelation:
        if self is NeighbourRelation.ADD_REMOVE:
            return NeighboringRelation.ADD_OR_REMOVE_ONE
        return NeighboringRelation.REPLACE_ONE

    def describe(self) -> str:
        if self is NeighbourRelation.ADD_REMOVE:
            return "add or remove one unit"
        return "replace one unit"


def parse_unit(value: str | PrivacyUnit) -> PrivacyUnit:
    """Parse a unit name, with an error listing the valid names."""
    try:
        return PrivacyUnit(value)
    except ValueError:
        valid = ", ".join(u.value for u in PrivacyUnit)
        raise ValueError(f"unknown privacy unit {value!r}; expected one of: {valid}") from None


def parse_relation(value: str | NeighbourRelation) -> NeighbourRelation:
    """Parse a relation name (`add_remove`/`add-remove`, `replace_one`/`replace-one`)."""
    if isinstance(value, NeighbourRelation):
        return value
    try:
        return NeighbourRelation(str(value).replace("-", "_"))
    except ValueError:
        valid = ", ".join(r.value for r in NeighbourRelation)
        raise ValueError(
            f"unknown neighbouring relation {value!r}; expected one of: {valid}"
        ) from None
