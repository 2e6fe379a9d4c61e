"""L2 clipping that bounds one privacy unit's contribution (numpy and torch).

Clipping is what turns "any data" into "sensitivity ≤ C": a row (or a group of rows that
belong to one unit, or one trajectory's update of a whole ensemble) is scaled by
min(1, C/‖x‖), which keeps its direction and leaves it unchanged when already inside the ball.

Every function accepts numpy arrays or torch tensors and returns the same kind. Squared norms
are accumulated in float64. For float32 (and half) tensors, a plain float32 norm of a long row
is not accurate enough: torch's float32 `vector_norm` is off by 1e-5 relative at 1e6 entries
and 4e-4 at 1e7 (measured), which would let a "clipped" row exceed C by that much. We take
float32 norms of blocks of `_BLOCK` entries (error ~1e-8) and add their squares in float64 —
a few times the cost of the plain float32 norm, several times cheaper than upcasting every
entry. torch is never imported by this module: a tensor is
recognised only if torch is already loaded.

The fraction clipped returned for diagnostics is computed from private data: it must not be
published unless it is itself privatised.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

__all__ = [
    "NORM_FLOOR",
    "ClipResult",
    "GroupClipResult",
    "clip_groups",
    "clip_rows",
    "ensemble_clip",
    "ensemble_clip_",
    "group_sum",
]

NORM_FLOOR = 1e-12  # norms below this are treated as this (avoids 0/0; such rows are inside)

Array = Any  # numpy.ndarray or torch.Tensor


class ClipResult(NamedTuple):
    clipped: Array  # same kind, shape and (float) dtype as the input
    scales: Array  # per-row factor min(1, C/‖x_i‖) ∈ (0, 1], shape [n]
    fraction_clipped: float  # share of rows with scale < 1 (private: do not publish raw)


class GroupClipResult(NamedTuple):
    sums: Array  # per-group clipped sums, shape [n_groups, ...], rows ordered as `ids`
    ids: Array  # sorted unique group ids


def _is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _check_max_norm(max_norm: float) -> float:
    if isinstance(max_norm, bool) or not isinstance(max_norm, int | float | np.number):
        raise TypeError(f"max_norm must be a real number, got {type(max_norm).__name__}")
    c = float(max_norm)
    if not math.isfinite(c) or c <= 0:
        raise ValueError(f"max_norm must be finite and > 0, got {max_norm}")
    return c


def _as_float(x: Array) -> Array:
    if _is_torch(x):
        return x if x.is_floating_point() else x.double()
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"expected real numbers, got dtype {arr.dtype}")
    return arr if arr.dtype.kind == "f" else arr.astype(np.float64)


_BLOCK = 512  # entries per float32 partial norm (see module docstring)


def _sq_norms(x: Array, lead: int) -> Array:
    """Squared L2 norms over all axes after the first `lead`, as float64."""
    if _is_torch(x):
        import torch

        flat = x.reshape(*x.shape[:lead], -1)
        if flat.dtype == torch.float64:
            # Σx² directly: squaring vector_norm's sqrt would move exact boundary norms by an ulp
            return torch.linalg.vecdot(flat, flat, dim=-1)
        m = flat.shape[-1]
        k = m // _BLOCK
        sq = torch.zeros(flat.shape[:-1], dtype=torch.float64, device=flat.device)
        if k:  # [..., k, B] is a view (the last axis stays contiguous)
            blocks = flat[..., : k * _BLOCK].unflatten(-1, (k, _BLOCK))
            part = torch.linalg.vector_norm(blocks, dim=-1, dtype=torch.float32)
            sq = sq + part.double().square().sum(-1)
        if m > k * _BLOCK:
            rest = torch.linalg.vector_norm(flat[..., k * _BLOCK :], dim=-1, dtype=torch.float32)
            sq = sq + rest.double().square()
        return sq
    flat = x.reshape(*x.shape[:lead], -1).astype(np.float64, copy=False)
    return np.einsum("...j,...j->...", flat, flat)


def _scales_from_sq(sq: Array, bound: float) -> Array:
    """min(1, bound / max(‖x‖, floor)) from squared norms (float64)."""
    if _is_torch(sq):
        import torch

        if not bool(torch.isfinite(sq).all()):
            raise ValueError("input contains NaN or infinite entries")
        return torch.clamp(bound / torch.sqrt(sq).clamp_min(NORM_FLOOR), max=1.0)
    if not np.all(np.isfinite(sq)):
        raise ValueError("input contains NaN or infinite entries")
    return np.minimum(1.0, bound / np.maximum(np.sqrt(sq), NORM_FLOOR))


def _apply(x: Array, scales: Array, lead: int) -> Array:
    """x * scales broadcast over the trailing axes, in x's dtype."""
    shape = tuple(scales.shape) + (1,) * (x.ndim - lead)
    if _is_torch(x):
        return x * scales.to(dtype=x.dtype).reshape(shape)
    return x * scales.astype(x.dtype).reshape(shape)


def clip_rows(x: Array, max_norm: float) -> ClipResult:
    """Scale each row x[i] (all axes after the first) to L2 norm ≤ max_norm."""
    c = _check_max_norm(max_norm)
    x = _as_float(x)
    if x.ndim < 2:
        raise ValueError(
            f"x must be [rows, ...] with ndim >= 2 (use x[None] for one vector), "
            f"got shape {tuple(x.shape)}"
        )
    scales = _scales_from_sq(_sq_norms(x, 1), c)
    n = x.shape[0]
    frac = float((scales < 1.0).sum()) / n if n else 0.0
    return ClipResult(_apply(x, scales, 1), scales, frac)


def group_sum(x: Array, group_ids: Array) -> tuple[Array, Array]:
    """Per-group sums of the rows of x: (sums [n_groups, ...], sorted unique ids).

    Vectorised with np.add.at / torch.index_add_ (no loop over groups).
    """
    x = _as_float(x)
    if x.ndim < 1:
        raise ValueError("x must have a leading row axis")
    if _is_torch(x):
        import torch

        ids_t = group_ids if _is_torch(group_ids) else torch.as_tensor(np.asarray(group_ids))
        ids_t = ids_t.to(device=x.device)
        if ids_t.ndim != 1 or ids_t.shape[0] != x.shape[0]:
            raise ValueError(
                f"group_ids must be 1-D with one id per row ({x.shape[0]}), "
                f"got shape {tuple(ids_t.shape)}"
            )
        ids, inverse = torch.unique(ids_t, sorted=True, return_inverse=True)
        sums = torch.zeros((ids.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
        sums.index_add_(0, inverse, x)
        return sums, ids
    g = np.asarray(group_ids)
    if g.ndim != 1 or g.shape[0] != x.shape[0]:
        raise ValueError(
            f"group_ids must be 1-D with one id per row ({x.shape[0]}), got shape {g.shape}"
        )
    ids, inverse = np.unique(g, return_inverse=True)
    sums = np.zeros((ids.shape[0], *x.shape[1:]), dtype=x.dtype)
    np.add.at(sums, inverse.reshape(-1), x)
    return sums, ids


def clip_groups(x: Array, group_ids: Array, max_norm: float) -> GroupClipResult:
    """Sum the rows of each unit (group id), then clip each unit's sum to L2 norm ≤ max_norm.

    This bounds a whole unit's contribution (a trajectory's transitions, an expert's
    trajectories): adding or removing one unit changes Σ_groups by at most max_norm.
    """
    c = _check_max_norm(max_norm)
    sums, ids = group_sum(x, group_ids)
    if sums.ndim < 2:
        return GroupClipResult(clip_rows(sums.reshape(-1, 1), c).clipped.reshape(-1), ids)
    return GroupClipResult(clip_rows(sums, c).clipped, ids)


def ensemble_clip(
    tensors: Sequence[Array],
    max_norm: float,
    mode: Literal["flat", "per_layer"] = "flat",
    *,
    nonfinite: Literal["raise", "zero"] = "raise",
) -> list[Array]:
    """Clip an ensemble update so that each copy's joint norm over the ensemble is ≤ max_norm.

    `tensors` are an ensemble's parameters (or displacements), each shaped
    [copies, members, ...] — copies = trajectories being processed in parallel, N = members.
    PRIMORL's EnsembleClip (Rio et al. 2024, trajectory-level DP ensemble training):
      flat       member i of copy c, all its tensors jointly, clipped to C/√N;
      per_layer  member i, tensor ℓ of copy c clipped to C/√(N·L), L = len(tensors).
    Either way Σ_i Σ_ℓ ‖·‖² ≤ C² per copy, so ε does not grow with N. Batched: one norm
    reduction per tensor, no loop over copies or members.

    `nonfinite`: "raise" refuses NaN/infinite entries; "zero" maps every copy that has one
    (in any member or tensor, or whose squared norm overflows) to zero — the whole copy, so
    the bound still holds. Use "zero" on updates computed from private data: an error raised
    only when some unit's local training diverges would itself reveal that unit.
    """
    c, ts = _check_ensemble(tensors, max_norm, mode, nonfinite)
    sqs = [_sq_norms(t, 2) for t in ts]  # [copies, members] each, float64
    if nonfinite == "zero":
        ts, sqs = _zero_nonfinite_copies(ts, sqs)
    scales = _ensemble_scales(sqs, c, mode, int(ts[0].shape[1]))
    return [_apply(t, s, 2) for t, s in zip(ts, scales, strict=True)]


def ensemble_clip_(
    tensors: Sequence[Array],
    max_norm: float,
    mode: Literal["flat", "per_layer"] = "flat",
    *,
    nonfinite: Literal["raise", "zero"] = "raise",
) -> None:
    """`ensemble_clip` in place, for floating-point torch tensors (views allowed, e.g. the
    per-tensor views of one flat ``[copies, members, P]`` buffer): the same scales and the same
    bound, without allocating clipped copies. A copy mapped to zero by ``nonfinite="zero"``
    is zero-filled in place. Used in PRIMORL's local steps, where the clipped displacement
    is the state and a full-size copy per step was a measurable share of the step.
    """
    c, ts = _check_ensemble(tensors, max_norm, mode, nonfinite)
    if not (_is_torch(ts[0]) and all(t is u for t, u in zip(ts, tensors, strict=True))):
        raise ValueError("ensemble_clip_ needs floating-point torch tensors (it writes in place)")
    sqs = [_sq_norms(t, 2) for t in ts]
    if nonfinite == "zero":
        import torch

        bad = ~torch.isfinite(torch.stack(sqs)).all(dim=(0, 2))  # [copies]
        if bool(bad.any()):
            for t in ts:
                t.masked_fill_(bad.reshape(-1, *([1] * (t.ndim - 1))), 0.0)
            sqs = [torch.where(bad[:, None], 0.0, sq) for sq in sqs]
    for t, s in zip(ts, _ensemble_scales(sqs, c, mode, int(ts[0].shape[1])), strict=True):
        t.mul_(s.to(dtype=t.dtype).reshape(*s.shape, *([1] * (t.ndim - 2))))


def _check_ensemble(
    tensors: Sequence[Array], max_norm: float, mode: str, nonfinite: str
) -> tuple[float, list[Array]]:
    c = _check_max_norm(max_norm)
    if mode not in ("flat", "per_layer"):
        raise ValueError(f"mode must be 'flat' or 'per_layer', got {mode!r}")
    if nonfinite not in ("raise", "zero"):
        raise ValueError(f"nonfinite must be 'raise' or 'zero', got {nonfinite!r}")
    ts = [_as_float(t) for t in tensors]
    if not ts:
        raise ValueError("tensors is empty")
    lead = tuple(ts[0].shape[:2])
    for i, t in enumerate(ts):
        if t.ndim < 2 or tuple(t.shape[:2]) != lead:
            raise ValueError(
                f"every tensor must be [copies, members, ...] with the same leading dims "
                f"{lead}; tensor {i} has shape {tuple(t.shape)}"
            )
    if len({_is_torch(t) for t in ts}) != 1:
        raise ValueError("tensors must be all numpy arrays or all torch tensors")
    return c, ts


def _ensemble_scales(sqs: list[Array], c: float, mode: str, n_members: int) -> list[Array]:
    """Per-tensor scales [copies, members]: flat shares one joint scale, bound C/√N per
    member; per-layer scales each tensor to C/√(N·L). Non-finite norms raise here."""
    if mode == "flat":
        scale = _scales_from_sq(sum(sqs), c / math.sqrt(n_members))
        return [scale] * len(sqs)
    bound = c / math.sqrt(n_members * len(sqs))
    return [_scales_from_sq(sq, bound) for sq in sqs]


def _zero_nonfinite_copies(ts: list[Array], sqs: list[Array]) -> tuple[list[Array], list[Array]]:
    """Replace every copy with a non-finite squared norm (any member, any tensor) by zeros."""
    if _is_torch(sqs[0]):
        import torch

        bad = ~torch.isfinite(torch.stack(sqs)).all(dim=(0, 2))  # [copies]
        if not bool(bad.any()):
            return ts, sqs
        out = []
        for t in ts:
            mask = bad.reshape(-1, *([1] * (t.ndim - 1)))
            out.append(torch.where(mask, torch.zeros((), dtype=t.dtype, device=t.device), t))
        return out, [torch.where(bad[:, None], 0.0, sq) for sq in sqs]
    bad_np = ~np.all(np.isfinite(np.stack(sqs)), axis=(0, 2))
    if not bad_np.any():
        return ts, sqs
    out_np = [
        np.where(bad_np.reshape(-1, *([1] * (t.ndim - 1))), 0.0, t).astype(t.dtype) for t in ts
    ]
    return out_np, [np.where(bad_np[:, None], 0.0, sq) for sq in sqs]
