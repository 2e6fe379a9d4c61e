"""Binary-tree mechanism for continual counting (Dwork, Naor, Pitassi & Rothblum 2010; Chan,
Shi & Song 2011, "binary mechanism"), vectorised over any shape of counters.

A stream x_1, x_2, ..., x_T of vectors (one per time step, e.g. one user's episode counts) is
summed over the dyadic intervals of [1, T]: node (j, i) holds Σ_{t ∈ (i·2^j, (i+1)·2^j]} x_t and
is released, once complete, with Laplace(b) noise on every coordinate. The prefix Σ_{s≤t} x_s
is the sum of the popcount(t) complete nodes of t's binary expansion — for bit j of t, the
node that ends at time ``t`` with its bits below j cleared.

Privacy. Each x_t lies in exactly one node per level, and at most L = ⌊log₂ T⌋ + 1 levels
exist up to T. If ‖x_t − x'_t‖₁ ≤ Δ₁ for one replaced time step (user), the vector of all node
values moves by ≤ L·Δ₁ in L1, so releasing every node with Laplace(b) is (L·Δ₁/b)-DP, and
every prefix output is post-processing (`BinaryTreeMechanism.release`: PureDpEvent).

Noise draws happen here: at time t exactly one node completes (level = trailing zeros of t),
so one Laplace vector is drawn per step, in blocks of ``chunk`` steps. The output is computed
as exact prefix + Σ (noise of the popcount(t) nodes), which equals the sum of the noisy node
values (up to float rounding of the summation order).

Error: the noise of a prefix is a sum of m = popcount(t) ≤ L Laplace(b) variables;
`laplace_sum_bound` gives t with P(|Σ| > t) ≤ β.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from privrl.privacy.events import PureDpEvent
from privrl.privacy.noise import require_noise_generator
from privrl.privacy.release import Release

__all__ = ["BinaryTreeMechanism", "laplace_sum_bound", "tree_levels"]


def tree_levels(horizon: int) -> int:
    """L = ⌊log₂ T⌋ + 1: the number of tree levels that complete nodes within T steps."""
    if isinstance(horizon, bool) or not isinstance(horizon, int | np.integer) or horizon < 1:
        raise ValueError(f"horizon must be an integer >= 1, got {horizon!r}")
    return int(horizon).bit_length()


def laplace_sum_bound(scale: float, count: int, beta: float) -> float:
    """t with P(|Σ_{i≤count} Lap(scale)| > t) ≤ β, the smaller of two valid bounds:

    * Chan, Shi & Song 2011, Cor. 2.9 (with ν = b√m): P(|Σ| > λ) ≤ 2·exp(−λ²/(8ν²)) for
      λ < 2√2·ν²/b, i.e. λ = b·√(8m·ln(2/β)), valid when ln(2/β) < m;
    * a union bound over the m terms, each |Lap(b)| ≤ b·ln(m/β) w.p. ≥ 1 − β/m (exact for m=1).
    """
    b = float(scale)
    if not (math.isfinite(b) and b > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale}")
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta}")
    m = int(count)
    if m < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if m == 0:
        return 0.0
    union = m * b * math.log(m / beta)
    log_term = math.log(2.0 / beta)
    if log_term < m:
        return min(union, b * math.sqrt(8.0 * m * log_term))
    return union


class BinaryTreeMechanism:
    """Continual release of prefix sums of a vector stream, each complete node + Laplace(b).

    ``shape`` is the shape of one step's vector (any leading axes, e.g. independent runs
    [R, d] — the guarantee is per run). Give ``scale`` b, or ``epsilon`` (then b = L·Δ₁/ε).
    ``rngs``: one Generator, or one per leading index (so that run r draws from its own
    stream and gives the same result whichever runs it is batched with).
    """

    def __init__(
        self,
        shape: Sequence[int],
        horizon: int,
        *,
        l1_sensitivity: float,
        rngs: np.random.Generator | Sequence[np.random.Generator],
        epsilon: float | None = None,
        scale: float | None = None,
        chunk: int = 512,
    ) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.horizon = int(horizon)
        self.levels = tree_levels(self.horizon)
        self.l1_sensitivity = float(l1_sensitivity)
        if not (math.isfinite(self.l1_sensitivity) and self.l1_sensitivity > 0):
            raise ValueError(f"l1_sensitivity must be finite and > 0, got {l1_sensitivity}")
        if (epsilon is None) == (scale is None):
            raise ValueError("give exactly one of epsilon / scale")
        if scale is None:
            eps = float(epsilon)  # type: ignore[arg-type]
            if not (math.isfinite(eps) and eps > 0):
                raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
            scale = self.levels * self.l1_sensitivity / eps
        self.scale = float(scale)
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale must be finite and > 0, got {scale}")
        if isinstance(rngs, np.random.Generator):
            self._rngs: list[np.random.Generator] | None = None
            self._rng: np.random.Generator | None = require_noise_generator(rngs)
        else:
            self._rngs = [require_noise_generator(g) for g in rngs]
            self._rng = None
            if not self.shape or len(self._rngs) != self.shape[0]:
                raise ValueError("give one Generator per leading index of shape")
        self.chunk = int(chunk)
        self.t = 0
        self._exact = np.zeros(self.shape)
        self._live = np.zeros((self.levels, *self.shape))  # noise of the latest node per level
        self._buffer = np.empty(0)
        self._pos = 0

    @property
    def epsilon(self) -> float:
        """ε = L·Δ₁/b of the whole stream of outputs."""
        return self.levels * self.l1_sensitivity / self.scale

    def _draw(self) -> np.ndarray:
        """The next ``chunk`` steps' node noise, laid out [lead, chunk, ...] (run r's block is
        one contiguous draw from its own generator)."""
        n = self.chunk
        if self._rng is not None:
            return self._rng.laplace(0.0, self.scale, size=(n, *self.shape))
        assert self._rngs is not None
        out = np.empty((self.shape[0], n, *self.shape[1:]))
        for r, g in enumerate(self._rngs):
            out[r] = g.laplace(0.0, self.scale, size=(n, *self.shape[1:]))
        return out

    def _next_noise(self) -> np.ndarray:
        if self._pos >= self.chunk or self._buffer.size == 0:
            self._buffer = self._draw()
            self._pos = 0
        z = self._buffer[self._pos] if self._rng is not None else self._buffer[:, self._pos]
        self._pos += 1
        return z

    def step(self, x: npt.ArrayLike) -> np.ndarray:
        """Add x_t (shape ``shape``) and return the noisy prefix sum Σ_{s≤t} x_s."""
        if self.t >= self.horizon:
            raise RuntimeError(f"the tree was sized for {self.horizon} steps")
        self.t += 1
        self._exact += np.asarray(x, dtype=np.float64)
        level = (self.t & -self.t).bit_length() - 1  # trailing zeros: the completing node
        self._live[level] = self._next_noise()
        bits = [j for j in range(self.levels) if (self.t >> j) & 1]
        return self._exact + self._live[bits].sum(axis=0)

    def noise_terms(self, t: int | None = None) -> int:
        """Number of Laplace node noises in the output at time t (= popcount(t))."""
        return int(self.t if t is None else t).bit_count()

    def error_bound(self, beta: float, t: int | None = None) -> float:
        """Per-coordinate bound on |output − exact prefix| at time t, w.p. ≥ 1 − β."""
        return laplace_sum_bound(self.scale, self.noise_terms(t), beta)

    def max_error_bound(self, beta: float) -> float:
        """Bound valid at every t ≤ horizon (L terms at most)."""
        return laplace_sum_bound(self.scale, self.levels, beta)

    def release(self, name: str, *, size: int, l1_sensitivity: float | None = None) -> Release:
        """Record of the stream (all nodes) for a coordinate block of L1 sensitivity Δ₁
        (default: the whole vector): PureDpEvent(L·Δ₁/b)."""
        d1 = self.l1_sensitivity if l1_sensitivity is None else float(l1_sensitivity)
        eps = self.levels * d1 / self.scale
        return Release(
            name=name,
            mechanism="binary_tree_laplace",
            sensitivity=d1,
            norm="l1",
            noise={"scale": self.scale, "levels": float(self.levels), "epsilon": eps},
            count=1,
            size=int(size),
            event=PureDpEvent(epsilon=eps),
            extra={
                "horizon": self.horizon,
                "derivation": "each step is in one node per level: node-vector L1 "
                "sensitivity = levels × per-step sensitivity (Chan, Shi & Song 2011)",
            },
        )
