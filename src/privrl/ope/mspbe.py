"""Mean squared projected Bellman error, MSPBE(θ) = (b − Aθ)ᵀ C⁻¹ (b − Aθ)  (Sutton et al. 2009).

A, b, C are the expectations (2.1) under the behaviour policy: exact for the chain (from its
model, `privrl.envs.chain.ChainMDP.linear_system`), or averaged over a large independent
sample (≥ 10⁵ trajectories, `large_sample_system`, cached on disk) for the continuous domains.
Where C is singular (features that never occur), C⁻¹ is the Moore–Penrose pseudo-inverse.

A `LinearSystem` may be a cross system: rows indexed by the projection features φ (n_φ) and
columns by the value features ψ (n_ψ), so a value function ϑᵀψ from another representation
(e.g. state aggregation for the DP-LSW baseline on Mountain Car) is scored by the same MSPBE
of the φ features: b − Aϑ is then E[φ δ_ϑ], the expected TD update of that value function.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LinearSystem", "large_sample_system", "mspbe"]


def _pinv_or_inv(C: np.ndarray) -> np.ndarray:
    """C⁻¹ when C is well conditioned, else the pseudo-inverse."""
    try:
        if np.linalg.cond(C) < 1e12:
            return np.linalg.inv(C)
    except np.linalg.LinAlgError:
        pass
    return np.linalg.pinv(C, rcond=1e-12, hermitian=True)


@dataclass(frozen=True)
class LinearSystem:
    """Expected (A, b, C) of the saddle point (2.1); `mspbe` scores parameter vectors."""

    A: np.ndarray
    b: np.ndarray
    C: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        A, b, C = (np.asarray(x, dtype=np.float64) for x in (self.A, self.b, self.C))
        if A.ndim != 2 or b.shape != (A.shape[0],) or C.shape != (A.shape[0], A.shape[0]):
            raise ValueError(f"inconsistent shapes A {A.shape}, b {b.shape}, C {C.shape}")
        object.__setattr__(self, "A", A)
        object.__setattr__(self, "b", b)
        object.__setattr__(self, "C", C)
        object.__setattr__(self, "_C_inv", _pinv_or_inv(C))

    @property
    def C_inv(self) -> np.ndarray:
        return self._C_inv  # type: ignore[attr-defined]

    def residual(self, theta: np.ndarray) -> np.ndarray:
        """b − Aθ for θ of shape [..., n_ψ]."""
        return self.b - np.asarray(theta, dtype=np.float64) @ self.A.T

    def mspbe(self, theta: np.ndarray) -> np.ndarray | float:
        """(b − Aθ)ᵀ C⁻¹ (b − Aθ); batched over leading axes of θ. NaN θ gives NaN."""
        r = self.residual(theta)
        out = np.einsum("...i,ij,...j->...", r, self.C_inv, r)
        return float(out) if np.ndim(out) == 0 else out

    def theta_star(self) -> np.ndarray:
        """The MSPBE minimiser (AᵀC⁻¹A)⁺AᵀC⁻¹b (6.1); equals A⁻¹b when A is invertible."""
        M = self.A.T @ self.C_inv
        return np.linalg.lstsq(M @ self.A, M @ self.b, rcond=None)[0]

    def w_star(self, theta: np.ndarray | None = None) -> np.ndarray:
        """The dual optimum C⁻¹(b − Aθ*)."""
        t = self.theta_star() if theta is None else theta
        return self.C_inv @ self.residual(t)

    def Q(self) -> np.ndarray:
        """Q = [[0, −Aᵀ], [A, C]] (6.2) (square systems only)."""
        n = self.A.shape[0]
        if self.A.shape[1] != n:
            raise ValueError("Q is defined for square systems only")
        return np.block([[np.zeros((n, n)), -self.A.T], [self.A, self.C]])

    def lambda_min_q(self) -> float:
        """Smallest real part of Q's eigenvalues (λ_min(Q) of Theorem 3)."""
        return float(np.linalg.eigvals(self.Q()).real.min())

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, A=self.A, b=self.b, C=self.C, info=json.dumps(self.info))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> LinearSystem:
        with np.load(path) as z:
            return cls(z["A"], z["b"], z["C"], json.loads(str(z["info"])))


def mspbe(theta: np.ndarray, system: LinearSystem) -> np.ndarray | float:
    """MSPBE(θ) under `system` (see `LinearSystem.mspbe`)."""
    return system.mspbe(theta)


def large_sample_system(
    key: dict[str, Any],
    build: Callable[[], LinearSystem],
    *,
    cache: bool = True,
    cache_dir: str | Path | None = None,
) -> LinearSystem:
    """A large-sample (A, b, C), cached on disk under a hash of `key` (a JSON description of
    domain, policies, features, sample size and seed). `build` computes it on a cache miss.

    The sample is drawn from the simulator, independently of any private data: it is public.
    """
    if not cache:
        return build()
    from privrl.data.paths import cache_dir as default_cache_dir

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "ope"
    root.mkdir(parents=True, exist_ok=True)
    text = json.dumps(key, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:20]
    path = root / f"system-{digest}.npz"
    if path.exists():
        try:
            system = LinearSystem.load(path)
            if system.info.get("key") == json.loads(text):
                return system
        except (OSError, ValueError, KeyError):
            pass  # corrupt or stale cache entry: rebuild
    system = build()
    system = LinearSystem(system.A, system.b, system.C, {**system.info, "key": json.loads(text)})
    system.save(path)
    return system


def _policy_key(policy: Any) -> str:
    spec = getattr(policy, "spec", None)
    return str(spec) if spec is not None else type(policy).__name__


def _policy_fingerprint(domain: Any, target_policy: Any | None) -> str:
    """Hash of the behaviour (and target) action probabilities on a fixed probe sample, so a
    cached model is never reused for different policies (e.g. a retrained Q)."""
    probe = domain.sample(domain.behaviour_policy, 3, seed=np.random.SeedSequence(7))
    obs = np.asarray(probe.observations)
    parts = [np.round(np.asarray(domain.behaviour_policy.action_probs(obs)), 10)]
    if target_policy is not None:
        parts.append(np.round(np.asarray(target_policy.action_probs(obs)), 10))
    return hashlib.sha256(b"".join(p.tobytes() for p in parts)).hexdigest()[:16]


def model_system(
    domain: Any,
    *,
    target_policy: Any | None,
    features: Any,
    value_features: Any | None = None,
    n_trajectories: int = 100_000,
    seed: int = 12345,
    batch: int = 5_000,
    cache: bool = True,
    cache_dir: str | Path | None = None,
) -> LinearSystem:
    """The (A, b, C) that MSPBE is measured with, for a built-in domain.

    Exact when the domain has a known model (`domain.linear_system`, the chain; on-policy).
    Otherwise averaged over `n_trajectories` (≥ 10⁵ for the reproductions) independent
    behaviour-policy trajectories from the simulator with per-step ratios for
    `target_policy` (None: on-policy), sampled in batches and cached on disk. `value_features`
    gives the cross system that scores value functions in another representation.
    """
    if hasattr(domain, "linear_system") and value_features is None:
        A, b, C = domain.linear_system(features)
        return LinearSystem(A, b, C, {"source": "exact model"})
    from privrl.ope.stats import mean_system

    key = {
        "domain": getattr(domain, "name", type(domain).__name__),
        "domain_seed": getattr(domain, "seed", None),
        "mode": getattr(domain, "mode", None),
        "policies": _policy_fingerprint(domain, target_policy),
        "gamma": float(domain.gamma),
        "horizon": getattr(domain, "horizon", None),
        "behaviour": _policy_key(domain.behaviour_policy),
        "target": None if target_policy is None else _policy_key(target_policy),
        "features": getattr(features, "spec", repr(features)),
        "value_features": None
        if value_features is None
        else getattr(value_features, "spec", repr(value_features)),
        "n_trajectories": int(n_trajectories),
        "seed": int(seed),
        "version": 1,
    }

    def build() -> LinearSystem:
        ss = np.random.SeedSequence(seed)
        total: list[np.ndarray] | None = None
        done = 0
        for child in ss.spawn((n_trajectories + batch - 1) // batch):
            k = min(batch, n_trajectories - done)
            data = domain.sample(domain.behaviour_policy, k, seed=child)
            parts = mean_system(
                data,
                features,
                float(domain.gamma),
                target_policy=target_policy,
                value_features=value_features,
            )
            scaled = [p * k for p in parts]
            total = scaled if total is None else [t + p for t, p in zip(total, scaled, strict=True)]
            done += k
        assert total is not None
        A, b, C = (t / done for t in total)
        return LinearSystem(A, b, C, {"source": f"{done} simulated trajectories (public)"})

    return large_sample_system(key, build, cache=cache, cache_dir=cache_dir)
