"""privrl's own DpEvents, for mechanisms dp-accounting cannot describe.

Same discipline as dp-accounting: an event documents the mathematics completely, is an
immutable attrs class, and its meaning never changes once released.
"""

from __future__ import annotations

import attr
from dp_accounting import dp_event


@attr.define(frozen=True)
class PureDpEvent(dp_event.DpEvent):
    """A mechanism that is epsilon-DP (pure) under the report's relation, with no further
    structure known to the accountant (e.g. a Laplace release on a vector given by its L1
    sensitivity bound, a pure-DP local randomizer)."""

    epsilon: float


@attr.define(frozen=True)
class ApproxDpEvent(dp_event.DpEvent):
    """A mechanism that is (epsilon, delta)-DP under the report's relation, known only through
    that pair (e.g. one sparse-vector round, a shuffle-model binary summation). Composed by
    advanced composition (RDP backend) or by the dominating-pair PLD (PLD backend)."""

    epsilon: float
    delta: float
