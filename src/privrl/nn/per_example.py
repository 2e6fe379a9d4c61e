"""Per-example gradients of a per-example loss, and their clipped sum (DP-SGD's core).

A *functional model* here is a dict of parameter tensors plus a loss function
``loss_fn(params, batch) -> Tensor[B]`` that returns one loss per example, with no reduction;
``batch`` is a tensor, a tuple/NamedTuple/list or a dict of tensors whose leading dimension is
the example axis. Example i's loss must depend on row i of the batch only (no batch norm, no
cross-example terms), which is what makes "per-example gradient" well defined.

Three implementations:

* ``"vmap"``: ``torch.func.vmap(torch.func.grad(...))`` over examples. Works for any loss.
* ``"batched"`` (hand-batched): one forward and one backward of the summed loss with a *tape*
  on every call of :func:`linear`; the per-example gradient of a linear layer is the outer
  product of the gradient w.r.t. its output and its input, Σ_uses g_i x_iᵀ (Goodfellow 2015),
  the bias gradient Σ_uses g_i. Every trainable parameter must enter the loss only through
  :func:`linear` (checked: an unrecorded parameter is an error; ``check=True`` also compares
  the summed per-example gradients with autograd's batch gradient, which catches a parameter
  used both through :func:`linear` and elsewhere).
* ``"ghost"`` (clipped sums only): the same tape, but the per-example gradients are never
  materialised. Per-example norms come from Gram matrices, ‖Σ_t g_t x_tᵀ‖²_F =
  Σ_{t,t'} (g_t·g_t')(x_t·x_t') (Li et al. 2022, "ghost clipping"), and the clipped sum is one
  matmul Σ_i s_i g_i x_iᵀ. Memory O(B·width) instead of O(B·params).

Defaults, from `benchmarks/bench_expert_dpsgd.py` (its numbers in
`benchmarks/results/expert_dpsgd.json`): per-example gradients are ``"batched"`` (tied with
vmap on CQL, faster on BCQ, both several times faster than a loop; their cost is writing the
[B, width, width] per-example weight gradients, not the arithmetic), and DP-SGD's clipped sum
is ``"ghost"`` (an order of magnitude faster than vmap, so a whole expert-level DP-SGD step
costs well under twice an ordinary minibatch step of the same size).

Every norm computed here is of private data: it is returned for tests and diagnostics only and
must not be published.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F

from privrl.privacy.clipping import clip_rows

__all__ = [
    "DEFAULT_CLIP_METHOD",
    "DEFAULT_METHOD",
    "ClippedGradSum",
    "clipped_grad_sum",
    "linear",
    "per_example_grads",
    "per_example_grads_loop",
]

Params = Mapping[str, torch.Tensor]
LossFn = Callable[[dict[str, torch.Tensor], Any], torch.Tensor]
Method = Literal["vmap", "batched"]
ClipMethod = Literal["vmap", "batched", "ghost"]

DEFAULT_METHOD: Method = "batched"  # faster than vmap here (see the module docstring)
DEFAULT_CLIP_METHOD: ClipMethod = "ghost"


# ---------------------------------------------------------------------------------------------
# batch helpers (a tiny pytree: tensors, tuples, NamedTuples, lists, dicts)
# ---------------------------------------------------------------------------------------------


def _map(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        return {k: _map(v, fn) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # NamedTuple
        return type(batch)(*(_map(v, fn) for v in batch))
    if isinstance(batch, tuple | list):
        return type(batch)(_map(v, fn) for v in batch)
    return batch  # non-tensor leaves (constants) pass through


def _leaves(batch: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    _map(batch, lambda t: out.append(t) or t)
    return out


def batch_size(batch: Any) -> int:
    """Leading dimension shared by every tensor of ``batch``."""
    sizes = {int(t.shape[0]) for t in _leaves(batch)}
    if len(sizes) != 1:
        raise ValueError(f"every tensor of the batch must share its leading dimension, got {sizes}")
    return sizes.pop()


def _check_losses(losses: torch.Tensor, n: int) -> None:
    if not isinstance(losses, torch.Tensor) or losses.shape != (n,):
        shape = getattr(losses, "shape", None)
        raise ValueError(
            f"loss_fn must return one loss per example (shape ({n},)), got shape {shape}"
        )


# ---------------------------------------------------------------------------------------------
# the tape
# ---------------------------------------------------------------------------------------------


@dataclass
class _Use:
    weight: str
    bias: str | None
    x: torch.Tensor  # [B, ..., in], detached
    out: torch.Tensor  # [B, ..., out], in the graph


@dataclass
class _Tape:
    names: dict[int, str]  # id(leaf tensor) -> parameter name
    uses: list[_Use] = field(default_factory=list)


_TAPE: contextvars.ContextVar[_Tape | None] = contextvars.ContextVar("privrl_tape", default=None)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weightᵀ + bias`` (as ``torch.nn.functional.linear``), recorded for the
    hand-batched per-example gradients when a tape is active. Models whose per-example
    gradients use ``method="batched"`` or ``"ghost"`` must apply every parameter through here."""
    out = F.linear(x, weight, bias)
    tape = _TAPE.get()
    if tape is not None and out.requires_grad:
        w_name = tape.names.get(id(weight))
        if w_name is not None:
            b_name = None if bias is None else tape.names.get(id(bias))
            if bias is not None and b_name is None:
                raise ValueError(f"bias of {w_name!r} is not a tracked parameter")
            tape.uses.append(_Use(w_name, b_name, x.detach(), out))
    return out


def _taped_forward(
    loss_fn: LossFn, params: Params, batch: Any
) -> tuple[torch.Tensor, dict[str, torch.Tensor], _Tape]:
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    tape = _Tape({id(v): k for k, v in leaves.items()})
    token = _TAPE.set(tape)
    try:
        losses = loss_fn(leaves, batch)
    finally:
        _TAPE.reset(token)
    return losses, leaves, tape


def _tape_grads(
    losses: torch.Tensor, leaves: dict[str, torch.Tensor], tape: _Tape, n: int, check: bool
) -> tuple[list[tuple[_Use, torch.Tensor]], list[torch.Tensor | None]]:
    """Gradients of Σ losses w.r.t. every recorded layer output, and (if ``check``) w.r.t.
    every parameter (the batch gradient, for `_check_sum`), in one backward pass."""
    used = {u.weight for u in tape.uses} | {u.bias for u in tape.uses if u.bias is not None}
    missing = [k for k, v in leaves.items() if k not in used and v.numel() > 0]
    if missing:
        raise ValueError(
            f"parameter(s) {missing} did not enter the loss through privrl.nn.per_example."
            "linear; the hand-batched per-example gradients cannot see them (use method='vmap')"
        )
    outs = [u.out for u in tape.uses]
    targets = outs + (list(leaves.values()) if check else [])
    if not targets:
        return [], []
    all_grads = torch.autograd.grad(losses.sum(), targets, allow_unused=True)
    grads, leaf_grads = all_grads[: len(outs)], list(all_grads[len(outs) :])
    pairs = []
    for use, g in zip(tape.uses, grads, strict=True):
        if g is None:
            continue
        if use.x.shape[0] != n or g.shape[0] != n:
            raise ValueError(
                f"layer {use.weight!r} was applied to a tensor whose leading dimension is not "
                "the example axis"
            )
        pairs.append((use, g))
    return pairs, leaf_grads


def _as_btd(t: torch.Tensor, n: int) -> torch.Tensor:
    """[B, ..., d] → [B, T, d] (T = number of uses per example)."""
    return t.reshape(n, -1, t.shape[-1])


def _check_sum(
    ref: Sequence[torch.Tensor | None],
    leaves: dict[str, torch.Tensor],
    sums: Mapping[str, torch.Tensor],
) -> None:
    """Σ_i per-example gradient must equal autograd's gradient ``ref`` of Σ_i loss_i."""
    for (name, leaf), r in zip(leaves.items(), ref, strict=True):
        r = torch.zeros_like(leaf) if r is None else r
        tol = 1e-4 if leaf.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-9
        scale = max(1.0, float(r.abs().max()))
        if not torch.allclose(sums[name], r, rtol=tol, atol=tol * scale):
            raise ValueError(
                f"per-example gradients of {name!r} do not add up to the batch gradient: the "
                "parameter is used outside privrl.nn.per_example.linear (use method='vmap')"
            )


# ---------------------------------------------------------------------------------------------
# per-example gradients
# ---------------------------------------------------------------------------------------------


def per_example_grads_loop(loss_fn: LossFn, params: Params, batch: Any) -> dict[str, torch.Tensor]:
    """Reference: one backward pass per example (slow; for tests and benchmarks)."""
    n = batch_size(batch)
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    out = {k: v.new_zeros((n, *v.shape)) for k, v in leaves.items()}
    for i in range(n):
        one = _map(batch, lambda t, i=i: t[i : i + 1])
        losses = loss_fn(leaves, one)
        _check_losses(losses, 1)
        gs = torch.autograd.grad(losses.sum(), list(leaves.values()), allow_unused=True)
        for (k, _), g in zip(leaves.items(), gs, strict=True):
            if g is not None:
                out[k][i] = g
    return out


def _vmap_grads(loss_fn: LossFn, params: Params, batch: Any) -> dict[str, torch.Tensor]:
    from torch.func import grad, vmap

    detached = {k: v.detach() for k, v in params.items()}

    def one(p: dict[str, torch.Tensor], example: Any) -> torch.Tensor:
        losses = loss_fn(p, _map(example, lambda t: t.unsqueeze(0)))
        return losses.sum()

    return vmap(grad(one), in_dims=(None, 0), randomness="error")(detached, batch)


def _batched_grads(
    loss_fn: LossFn, params: Params, batch: Any, check: bool
) -> dict[str, torch.Tensor]:
    n = batch_size(batch)
    losses, leaves, tape = _taped_forward(loss_fn, params, batch)
    _check_losses(losses, n)
    pairs, ref = _tape_grads(losses, leaves, tape, n, check)
    out: dict[str, torch.Tensor] = {}

    def add(name: str, value: torch.Tensor) -> None:  # no zero-fill for single-use layers
        out[name] = value if name not in out else out[name] + value

    for use, g in pairs:
        g3, x3 = _as_btd(g, n), _as_btd(use.x, n)
        add(use.weight, torch.bmm(g3.transpose(1, 2), x3))  # Σ_t g_t x_tᵀ, [B, out, in]
        if use.bias is not None:
            add(use.bias, g3.sum(dim=1))
    for k, v in leaves.items():
        if k not in out:  # recorded but without gradient (e.g. an unused head)
            out[k] = v.new_zeros((n, *v.shape))
    out = {k: out[k] for k in leaves}
    if check:
        _check_sum(ref, leaves, {k: v.sum(0) for k, v in out.items()})
    return out


def per_example_grads(
    loss_fn: LossFn,
    params: Params,
    batch: Any,
    *,
    method: Method = DEFAULT_METHOD,
    check: bool = False,
) -> dict[str, torch.Tensor]:
    """Gradient of every example's loss w.r.t. every parameter: ``{name: [B, *shape]}``.

    ``loss_fn(params, batch)`` returns ``[B]`` losses. ``method="vmap"`` works for any loss;
    ``"batched"`` needs every parameter applied through :func:`linear` (``check=True`` also
    verifies that the per-example gradients add up to the batch gradient).
    """
    n = batch_size(batch)
    if n == 0:
        return {k: v.new_zeros((0, *v.shape)) for k, v in params.items()}
    if method == "vmap":
        return _vmap_grads(loss_fn, params, batch)
    if method == "batched":
        return _batched_grads(loss_fn, params, batch, check)
    raise ValueError(f"method must be 'vmap' or 'batched', got {method!r}")


# ---------------------------------------------------------------------------------------------
# clipped sums
# ---------------------------------------------------------------------------------------------


class ClippedGradSum(NamedTuple):
    """Σ_i clip(∇ℓ_i, C) per parameter, and the per-example norms (PRIVATE: do not publish)."""

    sums: dict[str, torch.Tensor]
    norms: torch.Tensor  # [B] float64, joint L2 norm of each example's unclipped gradient
    scales: torch.Tensor  # [B] float64, min(1, C / norm)


def _clip_scales(sq_norms: torch.Tensor, clip_norm: float) -> torch.Tensor:
    # privacy.clipping's rule min(1, C/‖x‖) on a one-column array of the norms.
    return clip_rows(sq_norms.clamp_min(0.0).sqrt().unsqueeze(1), clip_norm).scales


_BLOCK = 512


def _row_sq_norms(x: torch.Tensor) -> torch.Tensor:
    """Squared L2 norm of each row as float64: float32 norms of 512-entry blocks, squared and
    added in float64 (accurate to ~1e-8 relative, like privacy.clipping; 20× faster than an
    upcast to float64 of every entry)."""
    if x.dtype == torch.float64:
        return torch.linalg.vecdot(x, x, dim=-1)
    k = x.shape[1] // _BLOCK
    sq = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    if k:
        blocks = x[:, : k * _BLOCK].unflatten(-1, (k, _BLOCK))
        sq += torch.linalg.vector_norm(blocks, dim=-1).double().square().sum(-1)
    if x.shape[1] > k * _BLOCK:
        sq += torch.linalg.vector_norm(x[:, k * _BLOCK :], dim=-1).double().square()
    return sq


def _materialised_clip(
    grads: dict[str, torch.Tensor], clip_norm: float
) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """Joint per-example norms (accumulated in float64), privacy.clipping's scale rule, and
    the scaled sum as one matrix-vector product per parameter."""
    first = next(iter(grads.values()))
    n = first.shape[0]
    sq = torch.zeros(n, dtype=torch.float64, device=first.device)
    for g in grads.values():
        sq += _row_sq_norms(g.reshape(n, -1))
    scales = _clip_scales(sq, clip_norm)
    sums = {
        k: torch.tensordot(scales.to(g.dtype), g, dims=1) for k, g in grads.items()
    }  # Σ_i s_i g_i
    return sums, sq.sqrt(), scales


def _ghost_clip(
    loss_fn: LossFn, params: Params, batch: Any, clip_norm: float, check: bool
) -> ClippedGradSum:
    n = batch_size(batch)
    losses, leaves, tape = _taped_forward(loss_fn, params, batch)
    _check_losses(losses, n)
    pairs, ref = _tape_grads(losses, leaves, tape, n, check)
    # Group the uses of each parameter: [B, T, out] grads and [B, T, in] inputs, T = all uses.
    w_uses: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    b_uses: dict[str, list[torch.Tensor]] = {}
    for use, g in pairs:
        g3, x3 = _as_btd(g, n), _as_btd(use.x, n)
        w_uses.setdefault(use.weight, []).append((g3, x3))
        if use.bias is not None:
            b_uses.setdefault(use.bias, []).append(g3)
    device = next(iter(leaves.values())).device
    sq = torch.zeros(n, dtype=torch.float64, device=device)
    for items in w_uses.values():
        g3 = torch.cat([g for g, _ in items], dim=1).double()
        x3 = torch.cat([x for _, x in items], dim=1).double()
        if g3.shape[1] == 1:  # one use per example: ‖g xᵀ‖ = ‖g‖·‖x‖
            sq += g3.pow(2).sum((1, 2)) * x3.pow(2).sum((1, 2))
        else:  # Σ_{t,t'} (g_t·g_t')(x_t·x_t')
            sq += (g3 @ g3.transpose(1, 2) * (x3 @ x3.transpose(1, 2))).sum((1, 2))
    bias_sums = {k: sum(g.sum(1) for g in gs) for k, gs in b_uses.items()}  # [B, out]
    for bsum in bias_sums.values():
        sq += bsum.double().pow(2).sum(1)
    scales = _clip_scales(sq, clip_norm)
    s = scales.to(next(iter(leaves.values())).dtype)
    sums = {k: torch.zeros_like(v) for k, v in leaves.items()}
    for name, items in w_uses.items():
        for g3, x3 in items:
            sums[name] += torch.einsum("bto,bti->oi", g3 * s[:, None, None], x3)
    for name, bsum in bias_sums.items():
        sums[name] += (bsum * s[:, None]).sum(0)
    if check:  # the unclipped sums (scale 1) must match autograd's batch gradient
        raw = {k: torch.zeros_like(v) for k, v in leaves.items()}
        for name, items in w_uses.items():
            for g3, x3 in items:
                raw[name] += torch.einsum("bto,bti->oi", g3, x3)
        for name, bsum in bias_sums.items():
            raw[name] += bsum.sum(0)
        _check_sum(ref, leaves, raw)
    return ClippedGradSum(sums, sq.sqrt(), scales)


def clipped_grad_sum(
    loss_fn: LossFn,
    params: Params,
    batch: Any,
    clip_norm: float,
    *,
    method: ClipMethod = DEFAULT_CLIP_METHOD,
    check: bool = False,
) -> ClippedGradSum:
    """Σ_i ∇ℓ_i · min(1, C/‖∇ℓ_i‖), each example's gradient clipped *jointly* over all
    parameters, so the sum has L2 sensitivity C under add/remove of one example (one unit, when
    each unit contributes one example).

    ``method``: ``"ghost"`` (default; no per-example gradients materialised), ``"batched"`` or
    ``"vmap"`` (materialised, clipped with ``privrl.privacy.clipping.ensemble_clip``).
    ``check=True`` verifies the tape against autograd's batch gradient (use it on a model's
    first step). An empty batch gives zero sums.
    """
    c = float(clip_norm)
    if not (c > 0 and c < float("inf")):
        raise ValueError(f"clip_norm must be finite and > 0, got {clip_norm!r}")
    n = batch_size(batch)
    if n == 0:
        device = next(iter(params.values())).device
        empty = torch.zeros(0, dtype=torch.float64, device=device)
        return ClippedGradSum({k: torch.zeros_like(v) for k, v in params.items()}, empty, empty)
    if method == "ghost":
        return _ghost_clip(loss_fn, params, batch, c, check)
    if method in ("vmap", "batched"):
        grads = per_example_grads(loss_fn, params, batch, method=method, check=check)
        sums, norms, scales = _materialised_clip(grads, c)
        return ClippedGradSum(sums, norms, scales)
    raise ValueError(f"method must be 'ghost', 'batched' or 'vmap', got {method!r}")


def flat_norms(grads: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Joint L2 norm over all parameters of each example's gradient ``{name: [B, ...]}``."""
    tensors: Sequence[torch.Tensor] = list(grads.values())
    n = tensors[0].shape[0]
    return sum(g.reshape(n, -1).double().pow(2).sum(1) for g in tensors).sqrt()
