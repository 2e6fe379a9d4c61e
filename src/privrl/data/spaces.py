"""Gymnasium space (de)serialisation to plain JSON-compatible dicts.

Spaces travel with every stored dataset (HDF5 attributes, Parquet schema metadata, Minari
metadata) so that a loaded dataset is validated against exactly the spaces it was written with.
Only the flat spaces privrl datasets support are handled: ``Discrete``, ``Box``,
``MultiDiscrete`` and ``MultiBinary``. Infinite bounds are written as the strings ``"inf"`` /
``"-inf"`` so that the output is strict JSON (no ``Infinity`` tokens).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = [
    "SpaceSerialisationError",
    "space_from_dict",
    "space_from_json",
    "space_to_dict",
    "space_to_json",
    "spaces_equal",
]


class SpaceSerialisationError(ValueError):
    """A space cannot be written to or read from JSON."""


def _encode_number(x: float) -> float | str:
    if np.isposinf(x):
        return "inf"
    if np.isneginf(x):
        return "-inf"
    if np.isnan(x):
        raise SpaceSerialisationError("Box bounds must not be NaN")
    return float(x)


def _encode_bound(arr: np.ndarray) -> Any:
    """A scalar when all entries are equal (the common case), else a nested list."""
    flat = np.asarray(arr, dtype=np.float64).ravel()
    if flat.size > 0 and np.all(flat == flat[0]):
        return _encode_number(flat[0])
    return np.vectorize(_encode_number, otypes=[object])(np.asarray(arr, np.float64)).tolist()


def _decode_bound(value: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    def conv(v: Any) -> Any:
        if isinstance(v, list):
            return [conv(u) for u in v]
        if v == "inf":
            return np.inf
        if v == "-inf":
            return -np.inf
        return float(v)

    arr = np.asarray(conv(value), dtype=np.float64)
    arr = np.broadcast_to(arr, shape) if arr.ndim == 0 else arr.reshape(shape)
    return arr.astype(dtype)


def space_to_dict(space: spaces.Space) -> dict[str, Any]:
    """Serialise a supported space to a JSON-compatible dict."""
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "shape": [int(s) for s in space.shape],
            "dtype": np.dtype(space.dtype).name,
            "low": _encode_bound(space.low),
            "high": _encode_bound(space.high),
        }
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": np.asarray(space.nvec).tolist(),
            "start": np.asarray(space.start).tolist(),
            "dtype": np.dtype(space.dtype).name,
        }
    if isinstance(space, spaces.MultiBinary):
        n = space.n
        return {"type": "MultiBinary", "n": [int(v) for v in n] if np.ndim(n) else int(n)}
    raise SpaceSerialisationError(
        f"unsupported space {space!r}: privrl datasets support Discrete, Box, MultiDiscrete "
        "and MultiBinary"
    )


def space_from_dict(d: dict[str, Any]) -> spaces.Space:
    """Inverse of :func:`space_to_dict`."""
    try:
        kind = d["type"]
        if kind == "Discrete":
            return spaces.Discrete(int(d["n"]), start=int(d.get("start", 0)))
        if kind == "Box":
            shape = tuple(int(s) for s in d["shape"])
            dtype = np.dtype(d["dtype"])
            low = _decode_bound(d["low"], shape, dtype)
            high = _decode_bound(d["high"], shape, dtype)
            return spaces.Box(low=low, high=high, shape=shape, dtype=dtype)
        if kind == "MultiDiscrete":
            dtype = np.dtype(d.get("dtype", "int64"))
            return spaces.MultiDiscrete(
                np.asarray(d["nvec"], dtype=dtype),
                dtype=dtype,
                start=np.asarray(d.get("start", 0), dtype=dtype),
            )
        if kind == "MultiBinary":
            return spaces.MultiBinary(d["n"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SpaceSerialisationError(f"malformed space description {d!r}: {exc}") from exc
    raise SpaceSerialisationError(f"unknown space type {kind!r} in {d!r}")


def space_to_json(space: spaces.Space | None) -> str:
    """JSON string for a space; ``"null"`` for None."""
    return json.dumps(None if space is None else space_to_dict(space))


def space_from_json(text: str) -> spaces.Space | None:
    """Inverse of :func:`space_to_json`."""
    d = json.loads(text)
    return None if d is None else space_from_dict(d)


def spaces_equal(a: spaces.Space | None, b: spaces.Space | None) -> bool:
    """Exact equality through the serialised form (gymnasium's Box ``==`` uses a tolerance)."""
    if a is None or b is None:
        return a is None and b is None
    try:
        return space_to_dict(a) == space_to_dict(b)
    except SpaceSerialisationError:
        return a == b
