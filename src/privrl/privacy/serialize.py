"""JSON (de)serialisation of `DpEvent`s, dp-accounting's and privrl's own.

An event is stored as {"type": ClassName, field: value, ...}; nested events recurse. Only
classes from `dp_accounting.dp_event` and `privrl.privacy.events` are accepted on load, so a
ledger or report file cannot make us import arbitrary code.
"""

from __future__ import annotations

from typing import Any

import attr
from dp_accounting import dp_event


def _registry() -> dict[str, type]:
    from privrl.privacy import events as ours

    classes: dict[str, type] = {}
    for module in (dp_event, ours):
        for name in dir(module):
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, dp_event.DpEvent):
                classes[name] = obj
    return classes


def _encode(value: Any) -> Any:
    if isinstance(value, dp_event.DpEvent):
        return event_to_dict(value)
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    raise TypeError(f"cannot serialise event field of type {type(value).__name__}")


def event_to_dict(event: dp_event.DpEvent) -> dict[str, Any]:
    """Serialise a DpEvent (recursively) into plain JSON types."""
    if not attr.has(type(event)):
        raise TypeError(f"{type(event).__name__} is not an attrs DpEvent")
    out: dict[str, Any] = {"type": type(event).__name__}
    for f in attr.fields(type(event)):
        out[f.name] = _encode(getattr(event, f.name))
    return out


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "type" in value:
        return event_from_dict(value)
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def event_from_dict(data: dict[str, Any]) -> dp_event.DpEvent:
    """Inverse of `event_to_dict`; rejects unknown event classes."""
    registry = _registry()
    name = data.get("type")
    if name not in registry:
        raise ValueError(f"unknown privacy event type {name!r} in serialised report")
    cls = registry[name]
    kwargs = {k: _decode(v) for k, v in data.items() if k != "type"}
    return cls(**kwargs)
