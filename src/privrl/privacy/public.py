"""Public parameters: the one place a sensitivity, noise scale, sampling rate, δ or number of
releases gets its inputs from, with where each came from.

A differential-privacy guarantee holds only if every quantity that shapes the mechanism — a
horizon H, a maximum trajectory length L, a reward range, the number of experts m, a space's
size — is fixed *before* the private data are seen. A value read off the data (the longest
episode, the number of distinct ids, the largest index) makes the noise itself depend on the
data, and publishing it (in config.json, privacy.json or a log) tells neighbouring datasets
apart. So every such quantity is obtained here, tagged with its source:

* ``flag`` — given by the user on the command line or in a config;
* ``public metadata`` — declared in the dataset's metadata, and not marked there as inferred
  from the data (``metadata.extra["inferred_from_data"]``);
* ``public split`` — computed from a dataset declared public;
* ``default`` — a constant of privrl or of a published domain;
* ``derived`` — a function of other public parameters (named in ``detail``).

A value with no public source is refused with `PublicParameterError` (a `ValueError`, so the
command line prints one ``error:`` line naming the flag that supplies it). The resolved
parameters are listed in privacy.json under ``public_parameters``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "PublicParameter",
    "PublicParameterError",
    "PublicParameters",
    "Source",
]


class PublicParameterError(ValueError):
    """A parameter that sets a sensitivity, noise, sampling rate, δ or count has no public
    source."""


class Source(StrEnum):
    """Where a public parameter came from (never the private data)."""

    FLAG = "flag"
    METADATA = "public metadata"
    PUBLIC_SPLIT = "public split"
    DEFAULT = "default"
    DERIVED = "derived"


_MISSING: Any = object()


@dataclass(frozen=True)
class PublicParameter:
    """One resolved public parameter: its name, value, source and a short provenance note."""

    name: str
    value: Any
    source: Source
    detail: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.source, Source):
            object.__setattr__(self, "source", Source(self.source))
        if isinstance(self.value, float) and math.isnan(self.value):
            raise PublicParameterError(f"public parameter {self.name!r} is NaN")

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "value": _plain(self.value), "source": self.source.value}
        if self.detail:
            out["detail"] = self.detail
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PublicParameter:
        return cls(
            name=str(data["name"]),
            value=data.get("value"),
            source=Source(data["source"]),
            detail=str(data.get("detail", "")),
        )


def _plain(value: Any) -> Any:
    """JSON-friendly value (numpy scalars and tuples become Python numbers and lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


class PublicParameters:
    """The public parameters of one run, resolved one by one and listed in its report.

    Example:
        params = PublicParameters()
        H = params.resolve("horizon H", flag=horizon, metadata=meta, key="horizon",
                           fix="pass `horizon=H` (the longest possible episode)")
        rho_h = params.derive("per-step ρ", rho / (5 * H), "ρ/(5H)")
    """

    def __init__(self) -> None:
        self._params: dict[str, PublicParameter] = {}

    def add(self, param: PublicParameter) -> Any:
        """Record a parameter (a name may be resolved once) and return its value."""
        previous = self._params.get(param.name)
        if previous is not None and previous != param:
            raise PublicParameterError(
                f"public parameter {param.name!r} resolved twice with different values "
                f"({previous.value!r} from {previous.source.value}, {param.value!r} from "
                f"{param.source.value})"
            )
        self._params[param.name] = param
        return param.value

    def resolve(
        self,
        name: str,
        *,
        flag: Any = None,
        metadata: Mapping[str, Any] | Any = None,
        key: str | None = None,
        public_split: Any = None,
        default: Any = _MISSING,
        fix: str,
        detail: str = "",
    ) -> Any:
        """The value of `name` from the first public source that has it, in the order flag >
        public metadata > public split > default; refuse when none has it.

        `metadata` is a `DatasetMetadata` (or a mapping of its fields); `key` names the field
        (a metadata attribute, or a key of ``metadata.extra``). A field the metadata marks as
        inferred from the data is not public and is skipped. `fix` says how the user supplies
        the value (e.g. "pass `horizon=H`"), naming the config field.
        """
        if flag is not None:
            return self.add(PublicParameter(name, flag, Source.FLAG, detail))
        value, inferred = _from_metadata(metadata, key)
        if value is not None and not inferred:
            where = f"metadata field {key!r}" + (f"; {detail}" if detail else "")
            return self.add(PublicParameter(name, value, Source.METADATA, where))
        if public_split is not None:
            return self.add(PublicParameter(name, public_split, Source.PUBLIC_SPLIT, detail))
        if default is not _MISSING:
            return self.add(PublicParameter(name, default, Source.DEFAULT, detail))
        why = (
            f"the dataset's metadata marks {key!r} as inferred from the data"
            if inferred
            else "neither a flag nor the dataset's public metadata gives it"
        )
        raise PublicParameterError(
            f"{name} sets the privacy noise, so it must be public, but {why}; {fix} "
            "(it is never taken from the private data)"
        )

    def given(self, name: str, value: Any, source: Source | str, detail: str = "") -> Any:
        """Record a value whose public source the caller established itself."""
        return self.add(PublicParameter(name, value, Source(source), detail))

    def derive(self, name: str, value: Any, formula: str) -> Any:
        """Record a value computed only from other public parameters (`formula` says how)."""
        return self.add(PublicParameter(name, value, Source.DERIVED, formula))

    def __contains__(self, name: object) -> bool:
        return name in self._params

    def __getitem__(self, name: str) -> Any:
        return self._params[name].value

    def __iter__(self) -> Iterator[PublicParameter]:
        return iter(self._params.values())

    def __len__(self) -> int:
        return len(self._params)

    def to_list(self) -> list[dict[str, Any]]:
        """The parameters as privacy.json lists them: name, value, source (and detail)."""
        return [p.to_dict() for p in self._params.values()]


def inferred_fields(metadata: Any) -> Collection[str]:
    """The metadata fields a dataset marks as inferred from its (private) data."""
    extra = _field(metadata, "extra") or {}
    inferred = extra.get("inferred_from_data", ()) if isinstance(extra, Mapping) else ()
    return tuple(str(x) for x in inferred)


def _field(metadata: Any, key: str) -> Any:
    if metadata is None:
        return None
    if isinstance(metadata, Mapping):
        return metadata.get(key)
    return getattr(metadata, key, None)


def _from_metadata(metadata: Any, key: str | None) -> tuple[Any, bool]:
    """(value, inferred) of a metadata field or of a key of its ``extra``."""
    if metadata is None or key is None:
        return None, False
    value = _field(metadata, key)
    if value is None:
        extra = _field(metadata, "extra")
        if isinstance(extra, Mapping):
            value = extra.get(key)
    return value, key in inferred_fields(metadata)
