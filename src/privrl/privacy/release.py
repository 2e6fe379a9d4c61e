"""The release record: what one mechanism invocation put out, and how it was protected."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dp_accounting import dp_event

from privrl.privacy.serialize import event_to_dict


@dataclass(frozen=True)
class Release:
    """Record of one privatised output (or `count` identical invocations of a mechanism).

    Attributes:
        name: what was released, in the paper's words (e.g. "transition counts n_h(s,a,s')").
        mechanism: mechanism identifier ("gaussian", "laplace", "discrete_gaussian",
            "discrete_laplace", "binomial", "gaussian_symmetric_matrix", ...).
        sensitivity: sensitivity of the released statistic under the stated relation. NaN
            when it is data-dependent (smooth sensitivity) and therefore withheld: `extra`
            then says how it is computed, never its value (it would tell neighbouring
            datasets apart).
        norm: the norm the sensitivity is measured in ("l1", "l2", "frobenius", or "linf" for
            a per-coordinate shift such as the binomial mechanism's).
        noise: noise parameters, e.g. {"sigma": 2.0, "noise_multiplier": 1.0}.
        count: number of mechanism invocations this record stands for (self-composition).
        size: number of distinct released scalars per invocation (d(d+1)/2 for a symmetric
            d×d matrix).
        event: the dp-accounting `DpEvent` describing exactly the mathematics of this release
            (including `count`), or None for a release that is not private (post-processing
            of public data, a non-private baseline).
        extra: further JSON-serialisable facts that are PUBLIC (calibration mode, sampler used,
            the derivation of an event). Never put a statistic of the private data here (e.g.
            the fraction of clipped gradients): a report is published.
    """

    name: str
    mechanism: str
    sensitivity: float
    norm: str
    noise: dict[str, float]
    count: int = 1
    size: int = 1
    event: dp_event.DpEvent | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mechanism": self.mechanism,
            "sensitivity": float(self.sensitivity),
            "norm": self.norm,
            "noise": {k: float(v) for k, v in self.noise.items()},
            "count": int(self.count),
            "size": int(self.size),
            "event": None if self.event is None else event_to_dict(self.event),
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Release:
        from privrl.privacy.serialize import event_from_dict

        event = data.get("event")
        return cls(
            name=data["name"],
            mechanism=data["mechanism"],
            sensitivity=float(data["sensitivity"]),
            norm=data["norm"],
            noise={k: float(v) for k, v in data.get("noise", {}).items()},
            count=int(data.get("count", 1)),
            size=int(data.get("size", 1)),
            event=None if event is None else event_from_dict(event),
            extra=dict(data.get("extra", {})),
        )
