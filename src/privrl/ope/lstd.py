"""Non-private least-squares references: LSTD(0) and off-policy LSTD(0) with per-step ρ.

LSTD (Bradtke & Barto 1996) pools all transitions: A = Σ_t ρ_t φ_t (φ_t − γφ_{t+1})ᵀ,
b = Σ_t ρ_t φ_t R_t, θ = A⁻¹b (least squares / pseudo-inverse when A is singular). On-policy
ρ_t = 1. Off-policy it is LSTD(0) with the per-step ratio on the whole update (e_t = ρ_tφ_t,
Yu 2010 at λ = 0) — for tabular features this normalises each state's update by Σρ_t, i.e. it
is a per-state weighted-importance-sampling estimate. It is the stand-in for WIS-LSTD
(Mahmood et al. 2014), which is not implemented.

``weighting="trajectory"`` instead averages within each trajectory first (the statistics
(2.2) that GPOPE uses): θ = (mean_i Â_i)⁻¹ mean_i b̂_i, the empirical saddle point that
non-private GTD2 on the same data converges to. With per-trajectory weighting the fixed point
differs from the pooled one (see `privrl.envs.chain`); pooled tabular LSTD equals the value
function of the empirical (certainty-equivalence) model and converges to the true V.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from privrl.data.dataset import TrajectoryDataset
from privrl.ope.stats import FeatureFn, mean_system

__all__ = ["lstd", "solve_linear"]


def solve_linear(A: np.ndarray, b: np.ndarray, ridge: float = 0.0) -> np.ndarray:
    """A⁻¹b, or the minimum-norm least-squares solution when A is singular."""
    n = A.shape[0]
    M = A + ridge * np.eye(n) if ridge else A
    try:
        if np.linalg.cond(M) < 1e12:
            return np.linalg.solve(M, b)
    except np.linalg.LinAlgError:
        pass
    return np.linalg.lstsq(M, b, rcond=None)[0]


def lstd(
    data: TrajectoryDataset,
    features: FeatureFn,
    gamma: float,
    *,
    target_policy: Any | None = None,
    weighting: Literal["pooled", "trajectory"] = "pooled",
    ridge: float = 0.0,
) -> np.ndarray:
    """LSTD(0) θ (non-private). Off-policy when `target_policy` is given (needs
    `behaviour_probs`)."""
    if weighting not in ("pooled", "trajectory"):
        raise ValueError(f"weighting must be 'pooled' or 'trajectory', got {weighting!r}")
    norm = "sum" if weighting == "pooled" else "length"
    A, b, _ = mean_system(data, features, gamma, target_policy=target_policy, normalisation=norm)
    return solve_linear(A, b, ridge)
