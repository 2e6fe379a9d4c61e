"""Linear feature maps φ: observations → R^dim for linear value functions (LSTD, GTD2, Q-learning).

Every map is vectorised (a batch of observations ``[n, ...]`` in, ``[n, dim]`` float64 out) and
carries a ``spec`` string that :func:`make_features` parses back, so a run can record which
features it used. The OPE convention φ(terminal) = 0 is applied by the OPE code, not here.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from privrl.arrays import FloatArray

__all__ = [
    "HIV_LOG_MEAN",
    "HIV_LOG_STD",
    "FeatureMap",
    "FourierBasis",
    "LogStandardised",
    "OneHot",
    "StateAggregation",
    "make_features",
    "one_hot",
]


# Standardisation statistics of log10 of the HIV state (T1, T2, T1*, T2*, V, E), computed on
# PUBLIC simulator rollouts, never on private data: 200 episodes of uniformly random treatment,
# half from the unhealthy and half from the healthy steady state of Adams et al. (2004), 200
# steps of 5 days, every visited state weighted equally. Reproduced by
# ``privrl.envs.hiv.log_state_statistics(n_episodes=200, seed=0)`` (a test checks it).
HIV_LOG_MEAN = np.array([5.4305, 1.6284, 2.9465, 1.3901, 3.6368, 1.9712])
HIV_LOG_STD = np.array([0.2085, 0.8864, 1.3596, 0.7140, 1.3282, 0.6911])


def one_hot(index: npt.NDArray[np.int64], n: int) -> FloatArray:
    """Rows ``e_index[i]`` of the identity ``[len(index), n]``."""
    out = np.zeros((index.shape[0], n))
    out[np.arange(index.shape[0]), index] = 1.0
    return out


@runtime_checkable
class FeatureMap(Protocol):
    """A linear feature map: ``phi(obs[n, ...]) -> [n, dim]`` float64."""

    @property
    def dim(self) -> int: ...

    @property
    def spec(self) -> str: ...

    def __call__(self, obs: np.ndarray) -> FloatArray: ...


def _box_bounds(low: npt.ArrayLike, high: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    lo = np.atleast_1d(np.asarray(low, dtype=np.float64))
    hi = np.atleast_1d(np.asarray(high, dtype=np.float64))
    if lo.shape != hi.shape or lo.ndim != 1:
        raise ValueError(f"low and high must be 1-D of equal shape, got {lo.shape}, {hi.shape}")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ValueError("low and high must be finite (the box is used to normalise the state)")
    if np.any(hi <= lo):
        raise ValueError(f"need high > low in every dimension, got low={lo}, high={hi}")
    return lo, hi


def _as_batch(obs: np.ndarray, k: int) -> FloatArray:
    x = np.asarray(obs, dtype=np.float64)
    if x.ndim == 1 and k == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[1] != k:
        raise ValueError(f"expected observations of shape [n, {k}], got {x.shape}")
    return x


class OneHot:
    """Indicator of a discrete state in ``{0, ..., n-1}`` (tabular features)."""

    def __init__(self, n: int) -> None:
        if int(n) < 1:
            raise ValueError(f"OneHot needs n >= 1, got {n}")
        self.n = int(n)

    @property
    def dim(self) -> int:
        return self.n

    @property
    def spec(self) -> str:
        return "onehot"

    def __call__(self, obs: np.ndarray) -> FloatArray:
        s = np.asarray(obs)
        if s.ndim == 2 and s.shape[1] == 1:
            s = s[:, 0]
        if s.ndim != 1:
            raise ValueError(f"OneHot expects integer states of shape [n], got {s.shape}")
        if not (np.issubdtype(s.dtype, np.integer) or np.all(s == np.round(s))):
            raise ValueError("OneHot expects integer states")
        s = s.astype(np.int64)
        if s.size and (s.min() < 0 or s.max() >= self.n):
            raise ValueError(f"state out of range [0, {self.n}): min {s.min()}, max {s.max()}")
        return one_hot(s, self.n)


class MultiOneHot:
    """Concatenated indicators of integer-coded categorical columns (a MultiDiscrete state with
    ``nvec`` categories per column): ``sum(nvec)`` features, one 1 per column. Codes outside a
    column's range are clipped into it (they cannot occur in a validated dataset)."""

    def __init__(self, nvec: npt.ArrayLike) -> None:
        self.nvec = np.asarray(nvec, dtype=np.int64).reshape(-1)
        if self.nvec.size < 1 or np.any(self.nvec < 1):
            raise ValueError(f"MultiOneHot needs categories >= 1 per column, got {self.nvec}")
        self.offsets = np.concatenate(([0], np.cumsum(self.nvec)[:-1]))

    @property
    def dim(self) -> int:
        return int(self.nvec.sum())

    @property
    def spec(self) -> str:
        return "onehot"

    def __call__(self, obs: np.ndarray) -> FloatArray:
        s = np.asarray(obs).reshape(-1, self.nvec.size)
        codes = np.clip(np.round(s).astype(np.int64), 0, self.nvec - 1) + self.offsets
        out = np.zeros((s.shape[0], self.dim))
        np.put_along_axis(out, codes, 1.0, axis=1)
        return out


class FourierBasis:
    """Full coupled Fourier cosine basis (Konidaris, Osentoski & Thomas 2011).

    φ_c(s) = cos(π c·s̄) for every integer vector c ∈ {0..order}^k, with s̄ the state mapped
    from the box [low, high] to [0, 1]^k (clipped): (order+1)^k features. The first
    coefficient vector is c = 0, so feature 0 is the constant 1. ``coefficients`` [dim, k] is
    exposed so that learners can scale step sizes per frequency (α_c = α/‖c‖).
    """

    def __init__(self, low: npt.ArrayLike, high: npt.ArrayLike, order: int) -> None:
        if int(order) < 0:
            raise ValueError(f"Fourier order must be >= 0, got {order}")
        self.low, self.high = _box_bounds(low, high)
        self.order = int(order)
        k = self.low.shape[0]
        coeffs = np.array(list(itertools.product(range(self.order + 1), repeat=k)), dtype=float)
        self.coefficients: FloatArray = coeffs.reshape(-1, k)

    @property
    def dim(self) -> int:
        return int(self.coefficients.shape[0])

    @property
    def spec(self) -> str:
        return f"fourier:{self.order}"

    def normalise(self, obs: np.ndarray) -> FloatArray:
        """The state mapped to [0, 1]^k by the box (clipped at its edges)."""
        x = _as_batch(obs, self.low.shape[0])
        return np.clip((x - self.low) / (self.high - self.low), 0.0, 1.0)

    def __call__(self, obs: np.ndarray) -> FloatArray:
        return np.cos(np.pi * (self.normalise(obs) @ self.coefficients.T))


class StateAggregation:
    """One-hot of the grid cell holding the state (``bins`` equal cells per dimension).

    States outside the box fall into the edge cells. Cells are numbered in C order (the last
    dimension varies fastest).
    """

    def __init__(self, low: npt.ArrayLike, high: npt.ArrayLike, bins: int | Sequence[int]) -> None:
        self.low, self.high = _box_bounds(low, high)
        k = self.low.shape[0]
        b = np.broadcast_to(np.asarray(bins, dtype=np.int64), (k,)).copy()
        if np.any(b < 1):
            raise ValueError(f"bins must be >= 1 in every dimension, got {bins}")
        self.bins = b

    @property
    def dim(self) -> int:
        return int(np.prod(self.bins))

    @property
    def spec(self) -> str:
        if np.all(self.bins == self.bins[0]):
            return f"aggregation:{int(self.bins[0])}"
        return "aggregation:" + ",".join(str(int(v)) for v in self.bins)

    def cell(self, obs: np.ndarray) -> npt.NDArray[np.int64]:
        """Flat cell index of each state."""
        x = _as_batch(obs, self.low.shape[0])
        u = (x - self.low) / (self.high - self.low)
        idx = np.clip(np.floor(u * self.bins).astype(np.int64), 0, self.bins - 1)
        return np.ravel_multi_index(tuple(idx.T), tuple(int(v) for v in self.bins))

    def __call__(self, obs: np.ndarray) -> FloatArray:
        return one_hot(self.cell(obs), self.dim)


class LogStandardised:
    """[1, (log10(max(s, floor)) − mean) / std] — for positive states spanning decades (HIV).

    ``mean`` and ``std`` must come from public information (for HIV: simulator rollouts, see
    ``HIV_LOG_MEAN``), never from the private data set, or the standardisation itself would leak.
    """

    def __init__(
        self,
        mean: npt.ArrayLike,
        std: npt.ArrayLike,
        bias: bool = True,
        *,
        floor: float = 1e-8,
        spec: str = "log-standardised",
    ) -> None:
        self.mean = np.atleast_1d(np.asarray(mean, dtype=np.float64))
        self.std = np.atleast_1d(np.asarray(std, dtype=np.float64))
        if self.mean.shape != self.std.shape or self.mean.ndim != 1:
            raise ValueError("mean and std must be 1-D of equal shape")
        if np.any(self.std <= 0) or not np.all(np.isfinite(self.std)):
            raise ValueError("std must be positive and finite")
        self.bias = bool(bias)
        self.floor = float(floor)
        self._spec = spec

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0]) + int(self.bias)

    @property
    def spec(self) -> str:
        return self._spec

    def __call__(self, obs: np.ndarray) -> FloatArray:
        x = _as_batch(obs, self.mean.shape[0])
        z = (np.log10(np.maximum(x, self.floor)) - self.mean) / self.std
        if not self.bias:
            return z
        return np.concatenate([np.ones((z.shape[0], 1)), z], axis=1)


_SPEC_HELP = "'onehot', 'fourier:ORDER', 'aggregation:BINS' or 'hiv-log'"


def _int_arg(spec: str, arg: str, what: str) -> int:
    try:
        v = int(arg)
    except ValueError:
        raise ValueError(
            f"feature spec {spec!r}: {what} must be an integer, got {arg!r} (use {_SPEC_HELP})"
        ) from None
    return v


def _finite_box(spec: str, space: spaces.Space) -> tuple[FloatArray, FloatArray]:
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        raise ValueError(f"feature spec {spec!r} needs a 1-D Box observation space, got {space}")
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise ValueError(
            f"feature spec {spec!r} needs finite observation bounds to normalise the state, "
            f"got {space}"
        )
    return space.low.astype(np.float64), space.high.astype(np.float64)


def make_features(spec: str, observation_space: spaces.Space) -> FeatureMap:
    """Build the feature map named by ``spec`` for ``observation_space``.

    ``onehot`` (Discrete; MultiDiscrete: one indicator block per column), ``fourier:ORDER``
    and ``aggregation:BINS`` (bounded 1-D Box; BINS per dimension) and ``hiv-log`` (the
    6-dim HIV state; public standardisation statistics).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"feature spec must be a non-empty string ({_SPEC_HELP}), got {spec!r}")
    name, _, arg = spec.strip().partition(":")
    name = name.lower()
    if name == "onehot":
        if arg:
            raise ValueError(f"feature spec {spec!r}: 'onehot' takes no argument")
        if isinstance(observation_space, spaces.MultiDiscrete):
            if np.any(np.asarray(observation_space.start) != 0):
                raise ValueError("'onehot' needs a MultiDiscrete space starting at 0")
            return MultiOneHot(observation_space.nvec)
        if not isinstance(observation_space, spaces.Discrete):
            raise ValueError(
                f"'onehot' needs a Discrete observation space, got {observation_space}"
            )
        if int(observation_space.start) != 0:
            raise ValueError("'onehot' needs a Discrete space starting at 0")
        return OneHot(int(observation_space.n))
    if name == "fourier":
        if not arg:
            raise ValueError(f"feature spec {spec!r}: give the order, e.g. 'fourier:5'")
        order = _int_arg(spec, arg, "the Fourier order")
        if order < 0:
            raise ValueError(f"feature spec {spec!r}: the Fourier order must be >= 0")
        low, high = _finite_box(spec, observation_space)
        return FourierBasis(low, high, order)
    if name == "aggregation":
        if not arg:
            raise ValueError(
                f"feature spec {spec!r}: give the bins per dimension, e.g. 'aggregation:10'"
            )
        parts = [_int_arg(spec, a, "the number of bins") for a in arg.split(",")]
        if any(p < 1 for p in parts):
            raise ValueError(f"feature spec {spec!r}: bins must be >= 1")
        low, high = _finite_box(spec, observation_space)
        if len(parts) not in (1, low.shape[0]):
            raise ValueError(
                f"feature spec {spec!r}: give one bin count or one per dimension ({low.shape[0]})"
            )
        return StateAggregation(low, high, parts if len(parts) > 1 else parts[0])
    if name == "hiv-log":
        if arg:
            raise ValueError(f"feature spec {spec!r}: 'hiv-log' takes no argument")
        if not isinstance(observation_space, spaces.Box) or observation_space.shape != (6,):
            raise ValueError(
                f"'hiv-log' needs the 6-dim HIV observation space, got {observation_space}"
            )
        return LogStandardised(HIV_LOG_MEAN, HIV_LOG_STD, bias=True, spec="hiv-log")
    raise ValueError(f"unknown feature spec {spec!r}; use {_SPEC_HELP}")
