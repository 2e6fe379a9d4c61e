"""Finite-horizon tabular MDPs: exact planning, vectorised policy evaluation and sampling.

The model is episodic with horizon ``H``, non-stationary transitions ``P_h(s'|s,a)``, mean
rewards ``r_h(s,a) ∈ [0, 1]`` and an initial distribution ``d1``. Steps are indexed
``h = 0..H-1`` in code (``h = 1..H`` in the papers); ``V[H] = 0``.

Everything is float64 and vectorised over states, actions and *stacks of policies*: a
deterministic policy is an integer array ``[..., H, S]`` (``π_h(s)``), a stochastic policy a
float array ``[..., H, S, A]`` (``π_h(a|s)``), and any number of leading batch dimensions is
allowed. The array dtype decides the kind. Large stacks are processed in chunks so that the
temporary memory stays bounded (the outputs themselves are not chunked); BLAS may round the
same policy's value differently in the last bit depending on the chunk it falls in.

Exact values (``backward_induction``, ``evaluate``, ``occupancy``) let the offline and online
systems report suboptimality and regret with no Monte-Carlo error. The module-level engines
(:func:`backward_induction`, :func:`policy_evaluation`, :func:`occupancy_measure`) take raw
arrays and do not check stochasticity, so they also serve estimated models (P̃, r̂).

Sampled episodes go into a :class:`privrl.data.dataset.TrajectoryDataset`. **Decision**: every
episode has exactly ``H`` steps; the last step is marked ``truncated=True``,
``terminated=False``. The horizon is a time limit in Gymnasium semantics (the MDP itself has no
terminal states), and the horizon is recorded in the dataset metadata.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from privrl.arrays import FloatArray, IntArray

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset

__all__ = [
    "ENV_ID",
    "Episodes",
    "PolicyEvaluation",
    "TabularMDP",
    "TabularMDPEnv",
    "backward_induction",
    "behaviour_policy_full_support",
    "counts",
    "enumerate_deterministic_policies",
    "episodes_from_dataset",
    "epsilon_greedy_policy",
    "greedy_policy",
    "make_random_tabular_env",
    "occupancy_measure",
    "policy_evaluation",
    "register_envs",
    "softmax_policy",
    "start_state",
    "to_stochastic",
    "uniform_policy",
]

RewardKind = Literal["deterministic", "bernoulli"]
RngLike = np.random.Generator | int | None
StartLike = int | npt.ArrayLike | None

ENV_ID = "privrl/RandomTabular-v0"
DEFAULT_CHUNK_BYTES = 256 * 2**20  # bound on temporaries when evaluating policy stacks
_MODEL_ATOL = 1e-8  # tolerance on row sums of P and d1
_POLICY_ATOL = 1e-6  # tolerance on row sums of stochastic policies (float32-friendly)
_REWARD_KINDS = ("deterministic", "bernoulli")


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _as_rng(rng: RngLike) -> np.random.Generator:
    """A Generator from a Generator, a seed or None (fresh entropy; never global state)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, int | np.integer):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be a numpy Generator, an int seed or None, got {type(rng)!r}")


def _first_index(mask: npt.NDArray[np.bool_]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _check_distribution_rows(
    x: FloatArray,
    name: str,
    axes: tuple[str, ...],
    atol: float,
    *,
    offset: int = 0,
    batch_shape: tuple[int, ...] | None = None,
) -> None:
    """Raise if ``x`` has negative/non-finite entries or last-axis sums away from 1.

    Two passes in the common (valid) case: the row sums (NaN/inf make a sum fail the
    tolerance test) and the minimum; the location is searched only on failure.
    """
    sums = x.sum(axis=-1)
    sums_ok = np.abs(sums - 1.0) <= atol  # False for NaN
    if np.all(sums_ok) and x.min(initial=0.0) >= 0:
        return
    if not np.all(np.isfinite(x)):
        idx = _first_index(~np.isfinite(x))
        raise ValueError(
            f"{name} has a non-finite entry at {_fmt_index(axes, idx, offset, batch_shape)}"
        )
    if np.any(x < 0):
        idx = _first_index(x < 0)
        where = _fmt_index(axes, idx, offset, batch_shape)
        raise ValueError(f"{name} has a negative probability {x[idx]:.3g} at {where}")
    if x.ndim == 1:
        raise ValueError(f"{name} sums to {float(sums):.12g}, expected 1 (tolerance {atol:g})")
    idx = _first_index(~sums_ok)
    where = _fmt_index(axes[:-1], idx, offset, batch_shape)
    raise ValueError(
        f"{name} row {where} sums to {float(sums[idx]):.12g}, expected 1 (tolerance {atol:g})"
    )


def _fmt_index(
    axes: tuple[str, ...],
    idx: tuple[int, ...],
    offset: int = 0,
    batch_shape: tuple[int, ...] | None = None,
) -> str:
    """Format an index as ``[h=1, s=2, a=0]``; ``axes`` names the trailing axes. A leading
    flattened batch index is shifted by ``offset`` (the chunk start) and unravelled into
    ``batch_shape`` so that it names the policy in the caller's array."""
    lead = len(idx) - len(axes)
    parts = [str(i) for i in idx[:lead]]
    if lead == 1:
        flat = idx[0] + offset
        if batch_shape is not None and len(batch_shape) != 1:
            parts = (
                [str(int(i)) for i in np.unravel_index(flat, batch_shape)] if batch_shape else []
            )
        else:
            parts = [str(flat)]
    parts += [f"{n}={i}" for n, i in zip(axes, idx[lead:], strict=True)]
    return "[" + ", ".join(parts) + "]"


def _start_distribution(start: StartLike, d1: FloatArray | None, S: int) -> FloatArray:
    """Resolve ``start``: None → ``d1``; an int → that state; an array → a distribution."""
    if start is None:
        if d1 is None:
            raise ValueError("a start distribution is required")
        return d1
    if isinstance(start, int | np.integer):
        if not 0 <= int(start) < S:
            raise ValueError(f"start state {start} is not in [0, {S})")
        out = np.zeros(S)
        out[int(start)] = 1.0
        return out
    dist = np.asarray(start, dtype=np.float64)
    if dist.shape != (S,):
        raise ValueError(f"start distribution must have shape ({S},), got {dist.shape}")
    _check_distribution_rows(dist, "start distribution", ("s",), _MODEL_ATOL)
    return dist


def _cdf(p: FloatArray) -> FloatArray:
    """Normalised cumulative sums along the last axis, with the last entry exactly 1.

    Zero-probability outcomes keep a flat CDF step, so inverse-CDF sampling never returns them.
    """
    c = np.cumsum(p, axis=-1)
    c /= c[..., -1:]
    c[..., -1] = 1.0
    return c


def _inverse_cdf(cdf: FloatArray, rows: IntArray, u: FloatArray) -> IntArray:
    """Smallest ``j`` with ``cdf[rows, j] > u``, by a vectorised binary search.

    ``cdf`` is ``[n_rows, K]`` (monotone rows ending in 1), ``u ∈ [0, 1)``. Exact (compares
    against the stored CDF values) and O(n log K) time, O(n) memory.
    """
    K = cdf.shape[1]
    flat = cdf.reshape(-1)
    base = rows.astype(np.int64) * K
    lo = np.zeros(u.shape, dtype=np.int64)
    hi = np.full(u.shape, K - 1, dtype=np.int64)
    for _ in range(math.ceil(math.log2(K)) if K > 1 else 0):
        mid = (lo + hi) >> 1
        above = flat[base + mid] > u
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid + 1)
    return lo


class _PolicyStack(NamedTuple):
    """A policy stack flattened to one batch axis: ``[B, H, S]`` or ``[B, H, S, A]``."""

    flat: np.ndarray
    deterministic: bool
    batch_shape: tuple[int, ...]


def _as_policy_stack(policies: npt.ArrayLike, H: int, S: int, A: int) -> _PolicyStack:
    """Classify (by dtype) and flatten a policy stack; shape checks only (values per chunk)."""
    pol = np.asarray(policies)
    if np.issubdtype(pol.dtype, np.integer):
        if pol.ndim < 2 or pol.shape[-2:] != (H, S):
            raise ValueError(
                f"an integer policy array is a deterministic policy stack [..., H, S] = "
                f"[..., {H}, {S}], got shape {pol.shape} (pass action probabilities as floats)"
            )
        batch = pol.shape[:-2]
        return _PolicyStack(pol.reshape(-1, H, S), True, batch)
    if np.issubdtype(pol.dtype, np.floating):
        if pol.ndim < 3 or pol.shape[-3:] != (H, S, A):
            raise ValueError(
                f"a float policy array is a stochastic policy stack [..., H, S, A] = "
                f"[..., {H}, {S}, {A}], got shape {pol.shape} (pass actions as integers)"
            )
        batch = pol.shape[:-3]
        return _PolicyStack(pol.reshape(-1, H, S, A), False, batch)
    raise TypeError(
        f"policies must be an integer array [..., H, S] or a float array [..., H, S, A], "
        f"got dtype {pol.dtype}"
    )


def _policy_chunks(
    stack: _PolicyStack, S: int, A: int, per_policy: int, chunk_bytes: int | None
) -> Iterator[tuple[int, int, np.ndarray, IntArray | None]]:
    """``(c0, c1, policies, row_base)`` for chunks of ``stack.flat`` that fit ``chunk_bytes``
    given ``per_policy`` bytes of temporaries; each chunk validated, a stochastic one as
    float64 (its copy counted here), and for deterministic policies ``row_base[b, s]`` the flat
    index of ``(b, s, a=0)`` in a ``[b, S, A]`` array."""
    B = stack.flat.shape[0]
    if not stack.deterministic and stack.flat.dtype != np.float64:
        per_policy += 8 * int(np.prod(stack.flat.shape[1:]))
    chunk = _chunk_size(per_policy, chunk_bytes)
    for c0 in range(0, B, chunk):
        c1 = min(B, c0 + chunk)
        pol = stack.flat[c0:c1]
        _check_policy_chunk(pol, stack, A, c0)
        row_base = None
        if stack.deterministic:
            row_base = (np.arange(c1 - c0)[:, None] * (S * A) + np.arange(S) * A).astype(np.int64)
        else:
            pol = pol.astype(np.float64, copy=False)
        yield c0, c1, pol, row_base


def _check_policy_chunk(chunk: np.ndarray, stack: _PolicyStack, A: int, offset: int) -> None:
    """Validate the values of one chunk ``stack.flat[offset:offset+len(chunk)]``."""
    if stack.deterministic:
        bad = (chunk < 0) | (chunk >= A)
        if np.any(bad):
            idx = _first_index(bad)
            where = _fmt_index(("h", "s"), idx, offset, stack.batch_shape)
            raise ValueError(f"deterministic policy{where} = {chunk[idx]} is not in [0, {A})")
    else:
        _check_distribution_rows(
            chunk,
            "stochastic policy",
            ("h", "s", "a"),
            _POLICY_ATOL,
            offset=offset,
            batch_shape=stack.batch_shape,
        )


def _chunk_size(per_policy_bytes: int, chunk_bytes: int | None) -> int:
    budget = DEFAULT_CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)
    return max(1, budget // max(1, per_policy_bytes))


def _model_shape(P: FloatArray, R: FloatArray) -> tuple[int, int, int]:
    if P.ndim != 4 or P.shape[1] != P.shape[3]:
        raise ValueError(f"P must have shape [H, S, A, S], got {P.shape}")
    H, S, A, _ = P.shape
    if R.shape != (H, S, A):
        raise ValueError(f"R must have shape [H, S, A] = [{H}, {S}, {A}], got {R.shape}")
    return H, S, A


# --------------------------------------------------------------------------------------------
# exact engines on raw arrays
# --------------------------------------------------------------------------------------------


def backward_induction(
    P: npt.ArrayLike, R: npt.ArrayLike
) -> tuple[FloatArray, FloatArray, IntArray]:
    """Optimal ``(Q* [H,S,A], V* [H+1,S], π* [H,S])`` of a finite-horizon model, exactly.

    ``Q*_h = r_h + P_h V*_{h+1}``, ``V*_h = max_a Q*_h``, ``V*_H = 0`` (Bellman optimality).
    Ties are broken towards the smallest action index.
    """
    P = np.asarray(P, dtype=np.float64)
    R = np.asarray(R, dtype=np.float64)
    H, S, A = _model_shape(P, R)
    Q = np.empty((H, S, A))
    V = np.zeros((H + 1, S))
    pi = np.empty((H, S), dtype=np.int64)
    for h in range(H - 1, -1, -1):
        Q[h] = R[h] + P[h] @ V[h + 1]  # Q_h(s,a) = r_h(s,a) + Σ_s' P_h(s'|s,a) V_{h+1}(s')
        pi[h] = np.argmax(Q[h], axis=-1)
        V[h] = np.take_along_axis(Q[h], pi[h][:, None], axis=-1)[:, 0]
    return Q, V, pi


class PolicyEvaluation(NamedTuple):
    """Exact values of a policy stack: ``V [..., H+1, S]``, ``Q [..., H, S, A]`` (or None when
    not requested) and ``value [...] = start · V_0``."""

    V: FloatArray
    Q: FloatArray | None
    value: FloatArray


def policy_evaluation(
    P: npt.ArrayLike,
    R: npt.ArrayLike,
    policies: npt.ArrayLike,
    *,
    start: npt.ArrayLike | None = None,
    return_q: bool = True,
    return_v: bool = True,
    chunk_bytes: int | None = None,
) -> PolicyEvaluation:
    """Exact ``V^π``, ``Q^π`` of every policy in a stack, by vectorised backward recursion.

    ``Q^π_h = r_h + P_h V^π_{h+1}``, ``V^π_h(s) = Σ_a π_h(a|s) Q^π_h(s,a)``. ``start`` is a
    distribution over states (default uniform) used for ``value``. With ``return_v=False`` only
    ``value`` is computed and ``V`` is returned empty (``[..., 0, S]``), which keeps memory at
    one step per policy. P and R are used as given (no stochasticity check).
    """
    P = np.asarray(P, dtype=np.float64)
    R = np.asarray(R, dtype=np.float64)
    H, S, A = _model_shape(P, R)
    stack = _as_policy_stack(policies, H, S, A)
    start_d = np.full(S, 1.0 / S) if start is None else np.asarray(start, dtype=np.float64)
    if start_d.shape != (S,):
        raise ValueError(f"start must have shape ({S},), got {start_d.shape}")
    B = stack.flat.shape[0]
    # Per-policy temporaries: Q_h and a product of the same size, V_h (plus the policy's
    # float64 copy, counted by _policy_chunks).
    chunks = _policy_chunks(stack, S, A, 8 * (2 * S * A + 3 * S), chunk_bytes)
    # Contiguous P_h^T [S, S*A]: numpy's matmul is far slower on a transposed view for thin
    # shapes (measured 12 ms vs 0.03 ms for [16384, 4] @ [4, 8]).
    P_sa_T = np.ascontiguousarray(P.reshape(H, S * A, S).transpose(0, 2, 1))

    V_out = np.zeros((B, H + 1 if return_v else 0, S))
    Q_out = np.empty((B, H, S, A)) if return_q else None
    value = np.empty(B)
    for c0, c1, pol, row_base in chunks:
        b = c1 - c0
        v = np.zeros((b, S))  # V_H = 0
        for h in range(H - 1, -1, -1):
            q = (v @ P_sa_T[h]).reshape(b, S, A)  # Σ_s' P_h(s'|s,a) V_{h+1}(s')
            q += R[h]
            if stack.deterministic:
                v = q.reshape(-1)[row_base + pol[:, h]]  # V_h(s) = Q_h(s, π_h(s))
            else:
                v = np.einsum("bsa,bsa->bs", pol[:, h], q)  # V_h(s) = Σ_a π_h(a|s) Q_h(s,a)
            if return_v:
                V_out[c0:c1, h] = v
            if Q_out is not None:
                Q_out[c0:c1, h] = q
        value[c0:c1] = v @ start_d
    shape = stack.batch_shape
    return PolicyEvaluation(
        V=V_out.reshape(*shape, V_out.shape[1], S),
        Q=None if Q_out is None else Q_out.reshape(*shape, H, S, A),
        value=value.reshape(shape)[()],
    )


def occupancy_measure(
    P: npt.ArrayLike,
    start: npt.ArrayLike,
    policies: npt.ArrayLike,
    *,
    chunk_bytes: int | None = None,
) -> FloatArray:
    """State-action occupancy ``d_h(s,a) = Pr^π(s_h = s, a_h = a)`` ``[..., H, S, A]``.

    Forward recursion: ``d_0(s,a) = start(s) π_0(a|s)``,
    ``d_{h+1}(s',a') = π_{h+1}(a'|s') Σ_{s,a} d_h(s,a) P_h(s'|s,a)``. With the mean rewards,
    ``Σ_{h,s,a} d_h(s,a) r_h(s,a) = value``; ``d_h`` is also ``V^π(1_{h,s,a})``.
    """
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 4 or P.shape[1] != P.shape[3]:
        raise ValueError(f"P must have shape [H, S, A, S], got {P.shape}")
    H, S, A, _ = P.shape
    start_d = np.asarray(start, dtype=np.float64)
    if start_d.shape != (S,):
        raise ValueError(f"start must have shape ({S},), got {start_d.shape}")
    stack = _as_policy_stack(policies, H, S, A)
    B = stack.flat.shape[0]
    P_sa = P.reshape(H, S * A, S)
    out = np.empty((B, H, S, A))
    for c0, c1, pol, row_base in _policy_chunks(stack, S, A, 8 * (2 * S * A + 2 * S), chunk_bytes):
        b = c1 - c0
        rho = np.broadcast_to(start_d, (b, S))  # state distribution at step h
        for h in range(H):
            if stack.deterministic:
                d = np.zeros((b, S, A))
                d.reshape(-1)[row_base + pol[:, h]] = rho  # d_h(s, π_h(s)) = ρ_h(s)
            else:
                d = rho[..., None] * pol[:, h]  # d_h(s,a) = ρ_h(s) π_h(a|s)
            out[c0:c1, h] = d
            if h + 1 < H:
                rho = d.reshape(b, S * A) @ P_sa[h]  # ρ_{h+1}(s') = Σ_{s,a} d_h(s,a) P_h(s'|s,a)
    return out.reshape(*stack.batch_shape, H, S, A)


def counts(
    states: npt.ArrayLike,
    actions: npt.ArrayLike,
    next_states: npt.ArrayLike | None = None,
    *,
    S: int,
    A: int,
) -> tuple[IntArray, IntArray]:
    """Visit counts ``n_h(s,a) [H,S,A]`` and ``n_h(s,a,s') [H,S,A,S]`` of equal-length episodes.

    ``states``, ``actions``, ``next_states`` are ``[n, H]``; alternatively pass ``states`` as
    ``[n, H+1]`` (with the final state) and ``next_states=None``. One ``np.bincount`` each.
    """
    s = np.asarray(states)
    a = np.asarray(actions)
    if a.ndim != 2:
        raise ValueError(f"actions must have shape [n, H], got {a.shape}")
    n, H = a.shape
    if next_states is None:
        if s.shape != (n, H + 1):
            raise ValueError(
                f"with next_states=None, states must have shape [n, H+1] = [{n}, {H + 1}], "
                f"got {s.shape}"
            )
        s, s2 = s[:, :-1], s[:, 1:]
    else:
        s2 = np.asarray(next_states)
        if s.shape != (n, H) or s2.shape != (n, H):
            raise ValueError(
                f"states, actions and next_states must all have shape [n, H] = [{n}, {H}], "
                f"got {s.shape}, {a.shape}, {s2.shape}"
            )
    for name, x, hi in (("states", s, S), ("actions", a, A), ("next_states", s2, S)):
        if not np.issubdtype(x.dtype, np.integer):
            raise TypeError(f"{name} must be integers, got dtype {x.dtype}")
        if x.size and (x.min() < 0 or x.max() >= hi):
            idx = _first_index((x < 0) | (x >= hi))
            raise ValueError(f"{name}[episode={idx[0]}, h={idx[1]}] = {x[idx]} not in [0, {hi})")
    h = np.broadcast_to(np.arange(H, dtype=np.int64), (n, H))
    sa = (h * S + s.astype(np.int64)) * A + a.astype(np.int64)  # flat (h, s, a) index
    n_sa = np.bincount(sa.ravel(), minlength=H * S * A).reshape(H, S, A)
    sas = sa * S + s2.astype(np.int64)
    n_sas = np.bincount(sas.ravel(), minlength=H * S * A * S).reshape(H, S, A, S)
    return n_sa, n_sas


def episodes_from_dataset(dataset: TrajectoryDataset, *, horizon: int | None = None) -> Episodes:
    """``[n, H]`` arrays (states ``[n, H+1]``) from a dataset of equal-length tabular episodes.

    The inverse of :meth:`TabularMDP.to_dataset`, for systems (e.g. DP-APVI counts) that work
    on finite-horizon episodes. Every episode must have exactly ``horizon`` steps (default
    ``metadata.horizon``) and observations must be scalar state indices.
    """
    H = dataset.metadata.horizon if horizon is None else horizon
    if H is None:
        raise ValueError("the dataset has no horizon in its metadata; pass horizon=")
    H = int(H)
    lengths = np.asarray(dataset.episode_lengths)
    if lengths.size and np.any(lengths != H):
        i = int(np.argmax(lengths != H))
        raise ValueError(f"episode {i} has {lengths[i]} steps; every episode must have H = {H}")
    n = int(lengths.size)
    obs = np.asarray(dataset.observations)
    act = np.asarray(dataset.actions)
    if obs.ndim != 1 or not np.issubdtype(obs.dtype, np.integer):
        raise ValueError(f"observations must be state indices [N], got {obs.shape} {obs.dtype}")
    if act.ndim != 1 or not np.issubdtype(act.dtype, np.integer):
        raise ValueError(f"actions must be action indices [N], got {act.shape} {act.dtype}")
    probs = dataset.behaviour_probs
    return Episodes(
        states=obs.astype(np.int64, copy=False).reshape(n, H + 1),
        actions=act.astype(np.int64, copy=False).reshape(n, H),
        rewards=np.asarray(dataset.rewards, dtype=np.float64).reshape(n, H),
        behaviour_probs=None if probs is None else np.asarray(probs, np.float64).reshape(n, H),
    )


# --------------------------------------------------------------------------------------------
# the MDP
# --------------------------------------------------------------------------------------------


class Episodes(NamedTuple):
    """Raw arrays of ``n`` equal-length episodes (no dataset wrapper).

    ``states [n, H+1]`` (the final state included), ``actions [n, H]``, ``rewards [n, H]``,
    ``behaviour_probs [n, H]`` = ``π_h(a_h|s_h)`` of the taken action (or None).
    """

    states: IntArray
    actions: IntArray
    rewards: FloatArray
    behaviour_probs: FloatArray | None

    @property
    def returns(self) -> FloatArray:
        """Undiscounted return of each episode ``[n]``."""
        return self.rewards.sum(axis=1)


class TabularMDP:
    """A finite-horizon, non-stationary tabular MDP with exact planning and evaluation.

    ``P [H, S, A, S]`` with rows summing to 1, mean rewards ``R [H, S, A]`` in [0, 1] and the
    initial distribution ``d1 [S]``. ``reward_kind`` only affects sampling: "deterministic"
    returns the mean ``R``, "bernoulli" draws ``Bernoulli(R)``; values always use the mean.
    The arrays are copied and made read-only, so results can be cached.
    """

    def __init__(
        self,
        P: npt.ArrayLike,
        R: npt.ArrayLike,
        d1: npt.ArrayLike,
        *,
        reward_kind: RewardKind = "deterministic",
    ) -> None:
        P = np.array(P, dtype=np.float64)
        R = np.array(R, dtype=np.float64)
        d1 = np.array(d1, dtype=np.float64)
        if P.ndim != 4 or P.shape[1] != P.shape[3]:
            raise ValueError(f"P must have shape [H, S, A, S], got {P.shape}")
        H, S, A, _ = P.shape
        if min(H, S, A) < 1:
            raise ValueError(f"H, S and A must be at least 1, got P.shape = {P.shape}")
        _check_distribution_rows(P, "P", ("h", "s", "a", "s'"), _MODEL_ATOL)
        if R.shape != (H, S, A):
            raise ValueError(f"R must have shape [H, S, A] = [{H}, {S}, {A}], got {R.shape}")
        bad = ~np.isfinite(R) | (R < 0) | (R > 1)
        if np.any(bad):
            idx = _first_index(bad)
            raise ValueError(f"R{_fmt_index(('h', 's', 'a'), idx)} = {R[idx]:.6g} is not in [0, 1]")
        if d1.shape != (S,):
            raise ValueError(f"d1 must have shape [S] = [{S}], got {d1.shape}")
        _check_distribution_rows(d1, "d1", ("s",), _MODEL_ATOL)
        if reward_kind not in _REWARD_KINDS:
            raise ValueError(f"reward_kind must be one of {_REWARD_KINDS}, got {reward_kind!r}")
        for x in (P, R, d1):
            x.flags.writeable = False
        self._P, self._R, self._d1 = P, R, d1
        self.reward_kind: RewardKind = reward_kind
        self._optimal: tuple[FloatArray, FloatArray, IntArray] | None = None
        self._P_cdf: FloatArray | None = None

    # ---- construction ------------------------------------------------------------------

    @classmethod
    def random(
        cls,
        S: int,
        A: int,
        H: int,
        *,
        rng: RngLike = None,
        seed: int | None = None,
        dirichlet_alpha: float = 1.0,
        reward: Literal["uniform", "binary"] = "uniform",
        reward_kind: RewardKind = "deterministic",
        stationary: bool = False,
        initial: Literal["uniform", "dirichlet"] = "uniform",
    ) -> TabularMDP:
        """A random MDP: ``P_h(·|s,a) ~ Dirichlet(α·1)`` (one draw per h unless stationary).

        ``reward="uniform"``: mean rewards ``~ U[0, 1]``; ``"binary"``: means in {0, 1} with
        probability 1/2 each. ``stationary=True`` shares P and R across steps.
        ``initial``: ``d1`` uniform or ``~ Dirichlet(1)``. Pass ``rng`` or ``seed``, not both.
        """
        if rng is not None and seed is not None:
            raise ValueError("pass either rng or seed, not both")
        gen = _as_rng(seed if rng is None else rng)
        if min(S, A, H) < 1:
            raise ValueError(f"S, A and H must be at least 1, got S={S}, A={A}, H={H}")
        if not dirichlet_alpha > 0:
            raise ValueError(f"dirichlet_alpha must be positive, got {dirichlet_alpha}")
        n_steps = 1 if stationary else H
        P = gen.dirichlet(np.full(S, float(dirichlet_alpha)), size=(n_steps, S, A))
        if reward == "uniform":
            R = gen.random((n_steps, S, A))
        elif reward == "binary":
            R = (gen.random((n_steps, S, A)) < 0.5).astype(np.float64)
        else:
            raise ValueError(f"reward must be 'uniform' or 'binary', got {reward!r}")
        if stationary:
            P = np.broadcast_to(P, (H, S, A, S))
            R = np.broadcast_to(R, (H, S, A))
        if initial == "uniform":
            d1 = np.full(S, 1.0 / S)
        elif initial == "dirichlet":
            d1 = gen.dirichlet(np.ones(S))
        else:
            raise ValueError(f"initial must be 'uniform' or 'dirichlet', got {initial!r}")
        return cls(P, R, d1, reward_kind=reward_kind)

    # ---- properties --------------------------------------------------------------------

    @property
    def P(self) -> FloatArray:
        """Transition probabilities ``[H, S, A, S]`` (read-only)."""
        return self._P

    @property
    def R(self) -> FloatArray:
        """Mean rewards ``[H, S, A]`` (read-only)."""
        return self._R

    @property
    def d1(self) -> FloatArray:
        """Initial state distribution ``[S]`` (read-only)."""
        return self._d1

    @property
    def H(self) -> int:
        return int(self._P.shape[0])

    @property
    def S(self) -> int:
        return int(self._P.shape[1])

    @property
    def A(self) -> int:
        return int(self._P.shape[2])

    def __repr__(self) -> str:
        return f"TabularMDP(H={self.H}, S={self.S}, A={self.A}, reward_kind={self.reward_kind!r})"

    # ---- exact planning and evaluation -------------------------------------------------

    def backward_induction(self) -> tuple[FloatArray, FloatArray, IntArray]:
        """Optimal ``(Q* [H,S,A], V* [H+1,S], π* [H,S])`` (cached; returned arrays read-only)."""
        if self._optimal is None:
            Q, V, pi = backward_induction(self._P, self._R)
            for x in (Q, V, pi):
                x.flags.writeable = False
            self._optimal = (Q, V, pi)
        return self._optimal

    def optimal_value(self, start: StartLike = None) -> float:
        """``v* = start · V*_0`` (``start`` defaults to ``d1``; an int means that state)."""
        _, V, _ = self.backward_induction()
        return float(_start_distribution(start, self._d1, self.S) @ V[0])

    def evaluate(
        self,
        policies: npt.ArrayLike,
        *,
        start: StartLike = None,
        return_q: bool = True,
        chunk_bytes: int | None = None,
    ) -> PolicyEvaluation:
        """Exact ``(V [..., H+1, S], Q [..., H, S, A], value [...])`` of a policy stack.

        ``value = start · V_0`` with ``start`` = ``d1`` by default, a state index, or a
        distribution. ``return_q=False`` skips the (possibly large) Q array.
        """
        d = _start_distribution(start, self._d1, self.S)
        return policy_evaluation(
            self._P, self._R, policies, start=d, return_q=return_q, chunk_bytes=chunk_bytes
        )

    def value(
        self, policies: npt.ArrayLike, *, start: StartLike = None, chunk_bytes: int | None = None
    ) -> FloatArray:
        """``v^π = start · V^π_0`` per policy, shape ``[...]`` (the batch shape).

        The fast path for large policy sets: only one step of values per policy is kept.
        """
        d = _start_distribution(start, self._d1, self.S)
        ev = policy_evaluation(
            self._P,
            self._R,
            policies,
            start=d,
            return_q=False,
            return_v=False,
            chunk_bytes=chunk_bytes,
        )
        return ev.value

    def suboptimality(
        self, policies: npt.ArrayLike, *, start: StartLike = None, chunk_bytes: int | None = None
    ) -> FloatArray:
        """``v* − v^π`` per policy (exact, ≥ 0 up to rounding), shape ``[...]``."""
        return self.optimal_value(start) - self.value(
            policies, start=start, chunk_bytes=chunk_bytes
        )

    def occupancy(
        self, policies: npt.ArrayLike, *, start: StartLike = None, chunk_bytes: int | None = None
    ) -> FloatArray:
        """State-action occupancy ``d_h(s,a)`` ``[..., H, S, A]`` (sums to 1 per h)."""
        d = _start_distribution(start, self._d1, self.S)
        return occupancy_measure(self._P, d, policies, chunk_bytes=chunk_bytes)

    # ---- sampling ----------------------------------------------------------------------

    def _transition_cdf(self) -> FloatArray:
        if self._P_cdf is None:
            self._P_cdf = _cdf(self._P).reshape(-1, self.S)  # rows indexed by (h, s, a)
        return self._P_cdf

    def sample_arrays(
        self,
        policy: npt.ArrayLike,
        n_episodes: int,
        *,
        rng: RngLike,
        start: StartLike = None,
        record_probs: bool = True,
    ) -> Episodes:
        """Roll out ``n_episodes`` episodes of length H, vectorised over episodes.

        ``policy`` is one policy (``[H, S]`` ints or ``[H, S, A]`` floats) shared by all
        episodes, or one per episode (``[n_episodes, H, S]`` / ``[n_episodes, H, S, A]``; e.g.
        a mixture sampled once per episode). Initial states come from ``start`` (default
        ``d1``). Every categorical draw is inverse-CDF sampling with one uniform per episode.
        """
        gen = _as_rng(rng)
        n = int(n_episodes)
        if n < 0:
            raise ValueError(f"n_episodes must be non-negative, got {n_episodes}")
        H, S, A = self.H, self.S, self.A
        pol = np.asarray(policy)
        deterministic = np.issubdtype(pol.dtype, np.integer)
        core_ndim = 2 if deterministic else 3
        if pol.ndim == core_ndim:
            per_episode = False
        elif pol.ndim == core_ndim + 1 and pol.shape[0] == n:
            per_episode = True
        else:
            raise ValueError(
                f"policy must be [H, S] / [H, S, A] or one per episode [n_episodes, ...]; got "
                f"shape {pol.shape} with n_episodes={n}"
            )
        stack = _as_policy_stack(pol, H, S, A)
        _check_policy_chunk(stack.flat, stack, A, 0)
        if not deterministic:
            pol = pol.astype(np.float64, copy=False)

        d = _start_distribution(start, self._d1, S)
        P_cdf = self._transition_cdf()
        pi_cdf = None if deterministic or per_episode else _cdf(pol).reshape(H * S, A)
        episodes = np.arange(n)

        states = np.empty((n, H + 1), dtype=np.int64)
        actions = np.empty((n, H), dtype=np.int64)
        rewards = np.empty((n, H))
        probs = np.empty((n, H)) if record_probs else None
        states[:, 0] = _inverse_cdf(_cdf(d)[None], np.zeros(n, dtype=np.int64), gen.random(n))
        for h in range(H):
            s = states[:, h]
            if deterministic:
                a = pol[episodes, h, s] if per_episode else pol[h, s]
                p = np.ones(n)
            elif per_episode:
                row_probs = pol[episodes, h, s]  # [n, A]
                a = _inverse_cdf(_cdf(row_probs), episodes, gen.random(n))
                p = row_probs[episodes, a]
            else:
                assert pi_cdf is not None
                a = _inverse_cdf(pi_cdf, h * S + s, gen.random(n))
                p = pol[h, s, a]
            actions[:, h] = a
            if probs is not None:
                probs[:, h] = p
            mean_r = self._R[h, s, a]
            if self.reward_kind == "bernoulli":
                rewards[:, h] = (gen.random(n) < mean_r).astype(np.float64)  # r ~ Ber(r_h(s,a))
            else:
                rewards[:, h] = mean_r
            states[:, h + 1] = _inverse_cdf(P_cdf, (h * S + s) * A + a, gen.random(n))
        return Episodes(states, actions, rewards, probs)

    def to_dataset(
        self,
        episodes: Episodes,
        *,
        env_id: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> TrajectoryDataset:
        """Pack equal-length episodes into a flat ``TrajectoryDataset``.

        Episode ``i`` owns transitions ``i·H .. (i+1)·H − 1`` and observations
        ``i·(H+1) .. i·(H+1) + H``. The last step of each episode is ``truncated`` (time limit),
        never ``terminated``. Metadata: ``Discrete(S)``/``Discrete(A)`` spaces, ``env_id`` (None
        unless given: an arbitrary MDP has no registered id), discount 1, horizon H, and
        ``extra`` (JSON-serialisable) merged over ``reward_kind``, ``n_states``, ``n_actions`` and
        the public ``reward_range`` [0, 1].
        """
        from privrl.data.dataset import DatasetMetadata, TrajectoryDataset

        n, H = episodes.actions.shape
        if H != self.H or episodes.states.shape != (n, H + 1):
            raise ValueError(
                f"episodes must have states [n, {self.H + 1}] and actions [n, {self.H}], got "
                f"{episodes.states.shape} and {episodes.actions.shape}"
            )
        terminated = np.zeros((n, H), dtype=bool)
        truncated = np.zeros((n, H), dtype=bool)
        truncated[:, -1] = True  # the horizon is a time limit, not a terminal state
        meta_extra: dict[str, Any] = {
            "reward_kind": self.reward_kind,
            "n_states": self.S,
            "n_actions": self.A,
            "reward_range": [0.0, 1.0],  # R and its samples lie in [0, 1] by construction
        }
        meta_extra.update(extra or {})
        metadata = DatasetMetadata(
            observation_space=gym.spaces.Discrete(self.S),
            action_space=gym.spaces.Discrete(self.A),
            env_id=env_id,
            discount=1.0,
            horizon=self.H,
            extra=meta_extra,
        )
        return TrajectoryDataset(
            observations=episodes.states.reshape(-1),
            actions=episodes.actions.reshape(-1),
            rewards=episodes.rewards.reshape(-1),
            terminated=terminated.reshape(-1),
            truncated=truncated.reshape(-1),
            episode_offsets=np.arange(n + 1, dtype=np.int64) * H,
            behaviour_probs=(
                None if episodes.behaviour_probs is None else episodes.behaviour_probs.reshape(-1)
            ),
            metadata=metadata,
        )

    def sample(
        self,
        policy: npt.ArrayLike,
        n_episodes: int,
        *,
        rng: RngLike,
        start: StartLike = None,
        record_probs: bool = True,
        env_id: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> TrajectoryDataset:
        """Sample episodes (see :meth:`sample_arrays`) into a ``TrajectoryDataset``.

        ``behaviour_probs`` holds ``π_h(a|s)`` of each taken action when ``record_probs``.
        """
        eps = self.sample_arrays(
            policy, n_episodes, rng=rng, start=start, record_probs=record_probs
        )
        return self.to_dataset(eps, env_id=env_id, extra=extra)

    def counts(
        self,
        states: npt.ArrayLike,
        actions: npt.ArrayLike,
        next_states: npt.ArrayLike | None = None,
    ) -> tuple[IntArray, IntArray]:
        """``n_h(s,a) [H,S,A]`` and ``n_h(s,a,s') [H,S,A,S]``; see :func:`counts`."""
        n_sa, n_sas = counts(states, actions, next_states, S=self.S, A=self.A)
        if n_sa.shape[0] != self.H:
            raise ValueError(f"episodes have {n_sa.shape[0]} steps, the MDP horizon is {self.H}")
        return n_sa, n_sas


# --------------------------------------------------------------------------------------------
# policies
# --------------------------------------------------------------------------------------------


def uniform_policy(H: int, S: int, A: int) -> FloatArray:
    """The uniformly random policy ``[H, S, A]``."""
    return np.full((H, S, A), 1.0 / A)


def greedy_policy(q_values: npt.ArrayLike) -> IntArray:
    """Deterministic ``argmax_a Q_h(s,a)`` ``[..., H, S]`` (ties → smallest action)."""
    return np.argmax(np.asarray(q_values, dtype=np.float64), axis=-1).astype(np.int64)


def to_stochastic(policy: npt.ArrayLike, A: int) -> FloatArray:
    """One-hot probabilities ``[..., H, S, A]`` of a deterministic policy ``[..., H, S]``."""
    pol = np.asarray(policy)
    if not np.issubdtype(pol.dtype, np.integer):
        raise TypeError(f"a deterministic policy must be integers, got dtype {pol.dtype}")
    if pol.size and (pol.min() < 0 or pol.max() >= A):
        raise ValueError(f"actions must be in [0, {A})")
    return (pol[..., None] == np.arange(A)).astype(np.float64)


def softmax_policy(q_values: npt.ArrayLike, temperature: float = 1.0) -> FloatArray:
    """Boltzmann policy ``π(a|s) ∝ exp(Q(s,a)/τ)`` ``[..., H, S, A]`` (numerically stable)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    z = np.asarray(q_values, dtype=np.float64) / temperature
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def epsilon_greedy_policy(q_values: npt.ArrayLike, epsilon: float) -> FloatArray:
    """``(1 − ε)·greedy + ε·uniform`` from scores ``[..., H, S, A]`` (e.g. Q or a one-hot)."""
    if not 0 <= epsilon <= 1:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    q = np.asarray(q_values, dtype=np.float64)
    A = q.shape[-1]
    return (1.0 - epsilon) * to_stochastic(greedy_policy(q), A) + epsilon / A


def behaviour_policy_full_support(
    rng: RngLike, H: int, S: int, A: int, min_prob: float
) -> FloatArray:
    """A random stochastic policy ``[H, S, A]`` with every ``π_h(a|s) ≥ min_prob``.

    ``π = min_prob + (1 − A·min_prob)·Dirichlet(1)``, so offline data covers every action (the
    coverage assumption of APVI-type methods). Requires ``0 < min_prob ≤ 1/A``.
    """
    if not 0 < min_prob <= 1.0 / A:
        raise ValueError(f"min_prob must be in (0, 1/A] = (0, {1.0 / A:g}], got {min_prob}")
    gen = _as_rng(rng)
    return min_prob + (1.0 - A * min_prob) * gen.dirichlet(np.ones(A), size=(H, S))


def enumerate_deterministic_policies(
    H: int, S: int, A: int, *, max_policies: int = 2**22
) -> IntArray:
    """All ``A^(H·S)`` deterministic policies ``[A^(HS), H, S]`` (for brute force on tiny MDPs)."""
    n = A ** (H * S)
    if n > max_policies:
        raise ValueError(f"A^(H·S) = {n} policies exceeds max_policies = {max_policies}")
    idx = np.arange(n, dtype=np.int64)
    digits = (idx[:, None] // A ** np.arange(H * S, dtype=np.int64)) % A  # base-A digits
    return digits.reshape(n, H, S)


# --------------------------------------------------------------------------------------------
# Gymnasium wrapper
# --------------------------------------------------------------------------------------------


class TabularMDPEnv(gym.Env):
    """Gymnasium view of a :class:`TabularMDP`: observation = state index, truncation at H.

    The step index is not part of the observation (the MDP is non-stationary; callers that
    need it read ``info["h"]``, the index of the next action, or count steps). Rewards are the
    mean or a Bernoulli draw per ``mdp.reward_kind``. ``reset(options={"state": s})`` starts in
    state ``s`` instead of sampling from ``d1``.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium convention)

    def __init__(self, mdp: TabularMDP, render_mode: str | None = None) -> None:
        if render_mode is not None:
            raise ValueError("TabularMDPEnv does not render")
        self.mdp = mdp
        self.observation_space = gym.spaces.Discrete(mdp.S)
        self.action_space = gym.spaces.Discrete(mdp.A)
        self.render_mode = None
        self._d1_cdf = _cdf(mdp.d1)[None]
        self._P_cdf = _cdf(mdp.P).reshape(-1, mdp.S)
        self._h: int | None = None
        self._s = 0

    def _draw(self, cdf: FloatArray, row: int) -> int:
        u = np.array([self.np_random.random()])
        return int(_inverse_cdf(cdf, np.array([row]), u)[0])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        s = start_state(options, self.mdp.S, f"is not in [0, {self.mdp.S})")
        self._s = self._draw(self._d1_cdf, 0) if s is None else s
        self._h = 0
        return self._s, {"h": 0}

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict[str, Any]]:
        if self._h is None:
            raise RuntimeError("call reset() before step()")
        if self._h >= self.mdp.H:
            raise RuntimeError("the episode reached the horizon; call reset()")
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        h, s, a = self._h, self._s, int(action)
        mean_r = float(self.mdp.R[h, s, a])
        if self.mdp.reward_kind == "bernoulli":
            reward = float(self.np_random.random() < mean_r)
        else:
            reward = mean_r
        self._s = self._draw(self._P_cdf, (h * self.mdp.S + s) * self.mdp.A + a)
        self._h = h + 1
        truncated = self._h == self.mdp.H
        return self._s, reward, False, truncated, {"h": self._h}


def make_random_tabular_env(
    S: int = 10,
    A: int = 5,
    H: int = 10,
    seed: int = 0,
    *,
    dirichlet_alpha: float = 1.0,
    reward: Literal["uniform", "binary"] = "uniform",
    reward_kind: RewardKind = "deterministic",
    stationary: bool = False,
    render_mode: str | None = None,
) -> TabularMDPEnv:
    """Entry point of ``privrl/RandomTabular-v0``: a fixed random MDP per ``seed``.

    ``seed`` picks the MDP instance (same kwargs, same MDP); ``reset(seed=...)`` seeds the
    dynamics.
    """
    mdp = TabularMDP.random(
        S,
        A,
        H,
        seed=seed,
        dirichlet_alpha=dirichlet_alpha,
        reward=reward,
        reward_kind=reward_kind,
        stationary=stationary,
    )
    return TabularMDPEnv(mdp, render_mode=render_mode)


def register_envs() -> None:
    """Register ``privrl/RandomTabular-v0`` with Gymnasium (idempotent)."""
    if ENV_ID in gym.registry:
        return
    gym.register(id=ENV_ID, entry_point=f"{__name__}:make_random_tabular_env")


def start_state(options: dict[str, Any] | None, n: int, outside: str) -> int | None:
    """The start state a reset's `options["state"]` asks for (None without one); refuses one
    outside [0, n), the error ending with `outside`."""
    if not (options and "state" in options):
        return None
    s = int(options["state"])
    if not 0 <= s < n:
        raise ValueError(f"options['state'] = {s} {outside}")
    return s
