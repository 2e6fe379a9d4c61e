"""Privacy sampling of units (DP-SGD minibatches): the randomness that privacy amplification by
subsampling relies on is drawn here, and only here.

* :func:`poisson_sample` — each unit joins independently with probability ``rate``; what the
  Poisson-subsampled Gaussian accountant (``PoissonSampledDpEvent``) assumes.
* :func:`step_coins` — Selective DP-SGD's per-step coin (private step or stable step).
* :func:`one_per_unit` — one uniformly drawn row (transition) of each sampled unit, so each
  unit contributes at most one example to a batch.
* :func:`shuffled_batches` — shuffle-and-partition batches (each unit at most once per batch),
  as in Sharma et al.'s implementation. **It does not match the Poisson accountant**: a run
  using it must say so in its report (`SHUFFLE_MATCHES_POISSON_ACCOUNTANT` is False).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from privrl.privacy.noise import require_noise_generator

__all__ = [
    "SHUFFLE_MATCHES_POISSON_ACCOUNTANT",
    "one_per_unit",
    "poisson_sample",
    "poisson_subset",
    "shuffled_batches",
    "step_coins",
]

# Shuffling (a random permutation cut into batches) is not Poisson subsampling; the accountant's
# PoissonSampledDpEvent does not describe it (amplification by shuffling needs its own bound).
SHUFFLE_MATCHES_POISSON_ACCOUNTANT = False


def _check_rng(rng: Any) -> np.random.Generator:
    # Which units a secret sampling step picks is as secret as noise (amplification by
    # subsampling assumes it): its coins come from a NoiseSource's generator only.
    return require_noise_generator(rng)


def _check_n(n_units: Any) -> int:
    if isinstance(n_units, bool) or not isinstance(n_units, int | np.integer) or n_units < 0:
        raise ValueError(f"n_units must be a non-negative integer, got {n_units!r}")
    return int(n_units)


def _check_probability(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float | np.integer | np.floating):
        raise TypeError(f"{what} must be a real number, got {type(x).__name__}")
    v = float(x)
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise ValueError(f"{what} must be in [0, 1], got {x!r}")
    return v


def poisson_sample(n_units: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of the units that join this step; each joins independently with
    probability ``rate``. The result may be empty (the accountant assumes that too)."""
    n = _check_n(n_units)
    q = _check_probability(rate, "rate")
    gen = _check_rng(rng)
    return np.flatnonzero(gen.random(n) < q).astype(np.int64)


def poisson_subset(n_units: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """The same law as `poisson_sample` (each unit joins independently with probability
    ``rate``), drawn as a Binomial(n, rate) count and then a uniform subset of that size, so
    that a step costs O(count) rather than O(n) draws. Sorted indices; may be empty."""
    n = _check_n(n_units)
    q = _check_probability(rate, "rate")
    gen = _check_rng(rng)
    k = int(gen.binomial(n, q))
    return np.sort(gen.choice(n, size=k, replace=False)).astype(np.int64)


def step_coins(
    p: float,
    rng: np.random.Generator,
    *,
    steps: int | None = None,
    private_steps: int | None = None,
    max_steps: int | None = None,
) -> np.ndarray:
    """Selective DP-SGD's step coins (Sharma et al., Algorithm 3, line 4): ``True`` = a private
    step on D_unst (probability ``p``), ``False`` = a non-private step on D_stable.

    Either ``steps`` coins, or coins until ``private_steps`` of them are ``True`` (the last
    coin is then ``True``), at most ``max_steps`` coins. The coins are independent of the
    data, so they are drawn up front and are public: accounting may condition on them.
    """
    coin_p = _check_probability(p, "p")
    gen = _check_rng(rng)
    if (steps is None) == (private_steps is None):
        raise ValueError("give exactly one of steps / private_steps")
    if steps is not None:
        n = _check_n(steps)
        return gen.random(n) < coin_p
    k = _check_n(private_steps)
    cap = None if max_steps is None else _check_n(max_steps)
    if k == 0:
        return np.zeros(0, dtype=bool)
    if coin_p == 0.0:
        if cap is None:
            raise ValueError("p = 0 never draws a private step: give max_steps")
        return np.zeros(cap, dtype=bool)
    parts: list[np.ndarray] = []
    drawn = found = 0
    while found < k and (cap is None or drawn < cap):
        size = int((k - found) / coin_p * 1.1) + 64
        if cap is not None:
            size = min(size, cap - drawn)
        chunk = gen.random(size) < coin_p
        parts.append(chunk)
        drawn += size
        found += int(chunk.sum())
    coins = np.concatenate(parts)
    if found >= k:  # cut right after the k-th private step
        coins = coins[: int(np.flatnonzero(coins)[k - 1]) + 1]
    return coins


def one_per_unit(
    units: np.ndarray, starts: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """One row drawn uniformly from each unit in ``units``: unit u owns rows
    ``starts[u] : starts[u] + counts[u]`` (of an array sorted by unit). Units with no rows
    contribute nothing (they are dropped). Returns positions into that sorted array."""
    gen = _check_rng(rng)
    u = np.asarray(units, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    if starts.shape != counts.shape or starts.ndim != 1:
        raise ValueError("starts and counts must be 1-D arrays of the same length")
    if u.size and (u.min() < 0 or u.max() >= counts.shape[0]):
        raise ValueError(f"unit index out of range [0, {counts.shape[0]})")
    if np.any(counts < 0):
        raise ValueError("counts must be >= 0")
    u = u[counts[u] > 0]
    offsets = np.floor(gen.random(u.shape[0]) * counts[u]).astype(np.int64)
    return starts[u] + np.minimum(offsets, counts[u] - 1)


def shuffled_batches(
    n_units: int, batch_size: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """Endless batches of ``batch_size`` distinct units: each epoch is a fresh permutation cut
    into consecutive batches (the last, shorter one included), so a unit appears at most once
    per batch and exactly once per epoch.

    NOT Poisson sampling: a Poisson-subsampled accountant does not certify a run that uses this
    (see `SHUFFLE_MATCHES_POISSON_ACCOUNTANT`); its report must say so.
    """
    n = _check_n(n_units)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if n == 0:
        raise ValueError("cannot shuffle zero units")
    gen = _check_rng(rng)
    while True:
        perm = gen.permutation(n)
        for start in range(0, n, int(batch_size)):
            yield np.sort(perm[start : start + int(batch_size)])
