"""A scalar answer for the θ-estimators (GPOPE, DP-LSW, DP-LSL, LSTD): the target policy's
value over a PUBLIC start distribution d₀, with an interval for the privacy noise.

    v = E_{s₀ ~ d₀}[φ(s₀)]ᵀ θ = wᵀθ                                                    (1)

Start distribution (public only; never the logged starts, which are private):

* ``start_states="uniform"`` — uniform over a declared Discrete observation space;
* ``start_states="FILE.npy"`` — a distribution over the S states of a Discrete space (1-D,
  length S, summing to 1), or public start observations ``[k, ...]`` (equally weighted);
* ``start_states="FILE.h5"`` — a PUBLIC dataset: the first observation of each episode (a
  public split; never the private data's file itself);
* the dataset metadata's ``extra["start_distribution"]`` (a list of S probabilities, unless
  marked inferred from the data);
* on a built-in domain (``env``), the domain's declared initial distribution (the chain's d₀
  exactly; Mountain Car and HIV: start states drawn from the simulator with an independent
  seed).

Interval. θ is released with noise whose law is public, so v's noise is too:

* DP-LSW / DP-LSL release θ + N(0, σ_X² I). σ_X is data-dependent and withheld, but it is
  drawn clamped to a public interval [σ_lo, σ_hi] (`privrl.ope.baselines`), so
  v ± z_{1−α/2}·σ_hi·‖w‖ covers the noise-free wᵀθ_X with probability ≥ 1 − α over the noise
  (exactly 1 − α when σ_X = σ_hi, e.g. when no state is visited by two trajectories);
* GPOPE's noise passes through data-dependent GTD2 dynamics, so its law on θ has no closed
  form. Its spread is measured on PUBLIC data: R independent runs of the same mechanism (same
  h, σ, N, step) on the public tuning sample (or a public dataset, or a simulator sample) give
  the standard deviation s_R of v, and v ± t_{R−1, 1−α/2}·s_R is the interval — approximate
  for the private data, stated as such; without public data there is no interval;
* LSTD is non-private: no noise, no interval.

None of these intervals covers sampling error (the finite log), which would need a private
estimate of the data's spread; `value_ci_covers` in metrics.json says what each one covers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from privrl.config import ConfigError

__all__ = [
    "StartStates",
    "gaussian_interval",
    "resolve_start_states",
    "t_interval",
]

_HELP = (
    "give `start_states=uniform`, FILE.npy (a distribution over the S states, or public start "
    "observations [k, ...]) or FILE.h5 (a public dataset: its episodes' first observations)"
)


@dataclass(frozen=True)
class StartStates:
    """A public start distribution: observations and their weights (summing to 1)."""

    spec: str
    source: str  # a privrl.privacy.public.Source value
    observations: np.ndarray
    weights: np.ndarray

    def mean_features(self, features: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """w = Σ_k d₀(s_k) φ(s_k) (1)."""
        phi = np.asarray(features(self.observations), dtype=np.float64)
        return self.weights @ phi


def _discrete(space: Any) -> tuple[int, int] | None:
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return int(space.n), int(space.start)
    return None


def _distribution(p: np.ndarray, space: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    d = _discrete(space)
    if d is None:
        raise ValueError(
            f"{what} is a distribution over states, but the observation space is not a public "
            "Discrete space; give public start observations [k, ...] instead"
        )
    n, start = d
    if p.shape != (n,):
        raise ValueError(f"{what}: a distribution over the {n} states must have shape ({n},)")
    if not np.all(np.isfinite(p)) or np.any(p < 0) or not math.isclose(p.sum(), 1.0, abs_tol=1e-6):
        raise ValueError(f"{what} must be non-negative and sum to 1")
    return np.arange(n) + start, p / p.sum()


def _observations(obs: np.ndarray, space: Any, what: str) -> np.ndarray:
    """Public start observations, checked against the declared space (a public check)."""
    if obs.ndim == 0 or obs.shape[0] < 1:
        raise ValueError(f"{what} holds no start observations")
    d = _discrete(space)
    if d is not None:
        flat = obs.reshape(obs.shape[0], -1)
        if flat.shape[1] != 1 or not np.issubdtype(obs.dtype, np.integer):
            raise ValueError(f"{what}: start observations of a Discrete space are integers [k]")
        n, start = d
        if flat.min() < start or flat.max() >= start + n:
            raise ValueError(f"{what}: start states outside the observation space")
        return flat[:, 0]
    if space is not None and not all(space.contains(np.asarray(o, space.dtype)) for o in obs):
        raise ValueError(f"{what}: the start observations are not in the observation space")
    return obs


def resolve_start_states(
    spec: str | None,
    *,
    observation_space: Any,
    metadata: Any = None,
    domain: Any = None,
    data_path: Path | None = None,
    seed: int = 0,
    n_samples: int = 1000,
) -> StartStates | None:
    """The public start distribution (flag > metadata > the domain's), or None when there is
    none (the run then reports θ only)."""
    from privrl.privacy.public import Source, inferred_fields

    if spec is not None:
        spec = str(spec).strip()
        if spec == "uniform":
            d = _discrete(observation_space)
            if d is None:
                raise ConfigError(
                    "start_states",
                    "uniform needs a Discrete observation space; give public start "
                    "observations as FILE.npy",
                )
            n, start = d
            return StartStates(spec, Source.FLAG, np.arange(n) + start, np.full(n, 1.0 / n))
        path = Path(spec)
        if spec.endswith(".npy"):
            if not path.is_file():
                raise ConfigError("start_states", f"{spec}: no such file; {_HELP}")
            from privrl.data.files import read_npy

            arr = read_npy(path, "`start_states`")
            if not np.issubdtype(arr.dtype, np.number):
                raise ConfigError("start_states", f"{spec}: not a numeric array")
            d = _discrete(observation_space)
            if arr.ndim == 1 and np.issubdtype(arr.dtype, np.floating) and d is not None:
                obs, w = _distribution(arr.astype(np.float64), observation_space, "`start_states`")
                return StartStates(spec, Source.FLAG, obs, w)
            obs = _observations(arr, observation_space, f"`start_states` {spec}")
            k = obs.shape[0]
            return StartStates(spec, Source.PUBLIC_SPLIT, obs, np.full(k, 1.0 / k))
        if spec.endswith((".h5", ".hdf5")):
            if not path.is_file():
                raise ConfigError("start_states", f"{spec}: no such file; {_HELP}")
            from privrl.data.io import load_hdf5
            from privrl.data.public import not_public_because

            private = data_path if data_path is not None and Path(data_path).exists() else None
            why = not_public_because(path, private)
            if why is not None:
                raise ConfigError(
                    "start_states",
                    f"{spec}: {why}; its starts are private. Give an independent PUBLIC "
                    "dataset, a distribution, or uniform",
                )

            pub = load_hdf5(path)
            obs = np.asarray(pub.observations)[np.asarray(pub.observation_offsets)[:-1]]
            obs = _observations(obs, observation_space, f"`start_states` {spec}")
            k = obs.shape[0]
            return StartStates(spec, Source.PUBLIC_SPLIT, obs, np.full(k, 1.0 / k))
        raise ConfigError("start_states", f"{spec!r} is not understood; {_HELP}")
    if metadata is not None:
        extra = getattr(metadata, "extra", None) or {}
        p = extra.get("start_distribution") if isinstance(extra, dict) else None
        if p is not None and "start_distribution" not in inferred_fields(metadata):
            obs, w = _distribution(
                np.asarray(p, dtype=np.float64),
                observation_space,
                "the metadata's start_distribution",
            )
            return StartStates("metadata", Source.METADATA, obs, w)
    if domain is not None:
        mdp = getattr(domain, "mdp", None)
        if mdp is not None:
            d0 = np.asarray(mdp.start_distribution, dtype=np.float64)
            return StartStates("chain", Source.DEFAULT, np.arange(d0.size), d0)
        starts = domain.sample(
            domain.behaviour_policy,
            n_samples,
            seed=np.random.SeedSequence([seed, 6]),
            horizon=1,
        )
        obs = np.asarray(starts.observations)[np.asarray(starts.observation_offsets)[:-1]]
        return StartStates(
            f"{domain.name} simulator", Source.DEFAULT, obs, np.full(len(obs), 1.0 / len(obs))
        )
    return None


def gaussian_interval(value: float, sd: float, level: float) -> tuple[float, float]:
    """value ± z_{1−α/2}·sd (sd public)."""
    half = float(stats.norm.ppf(0.5 + level / 2.0)) * float(sd)
    return value - half, value + half


def t_interval(value: float, sd: float, replicas: int, level: float) -> tuple[float, float]:
    """value ± t_{R−1, 1−α/2}·sd, sd estimated from R replicas."""
    half = float(stats.t.ppf(0.5 + level / 2.0, df=max(int(replicas) - 1, 1))) * float(sd)
    return value - half, value + half
