"""PEVI — pessimistic value iteration for linear MDPs (Jin, Yang & Wang 2021, Algorithm 2).

Backwards over h = H..1 (``h = H-1..0`` in code), on all K trajectories:

* ``Λ_h = Σ_τ φ(s_h^τ, a_h^τ)φ(s_h^τ, a_h^τ)ᵀ + λI`` (unweighted ridge regression),
* ``ŵ_h = Λ_h⁻¹ Σ_τ φ(s_h^τ, a_h^τ)·(r_h^τ + V̂_{h+1}(s_{h+1}^τ))``,
* ``Γ_h(s,a) = β·‖φ(s,a)‖_{Λ_h⁻¹}`` with ``β = c·d·H·√ζ``, ``ζ = log(2dHK/ξ)``,
* ``Q̂_h = min{φᵀŵ_h − Γ_h, H − h + 1}⁺``, greedy π̂_h, ``V̂_h = max_a Q̂_h``.

``bonus_scale`` is the constant c — the linear learners' common multiplier C, applied to
PEVI's own theory coefficient dH√ζ exactly as VAPVI's C multiplies its √d. Not private: the
report says so. The learned policy, data and feature types are shared with
`privrl.offline.vapvi`; `PEVIConfig` holds the settings and `privrl.offline.PEVI` runs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from privrl.config import check, option
from privrl.data.padding import step_rows
from privrl.offline.common import Names
from privrl.offline.vapvi import (
    RELATION,
    UNIT,
    FeatureTable,
    LinearConfig,
    LinearEpisodes,
    LinearPVIResult,
    build_policy,
    cho_solve,
    cholesky_lower,
    pessimistic_q,
    prepare_inputs,
    public_information,
)
from privrl.privacy.report import PrivacyReport

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset

__all__ = ["PEVIConfig", "pevi", "pevi_beta"]


@dataclass(frozen=True)
class PEVIConfig(LinearConfig):
    """PEVI (Jin, Yang & Wang 2021): the linear learners' settings plus ξ (`xi`), the failure
    probability in β = c·dH√(log(2dHK/ξ)) (c = `bonus_scale`). Not private."""

    system = "pevi"
    xi: float = option(
        0.05,
        "--xi",
        help="Failure probability ξ in β = c·dH√log(2dHK/ξ).",
        allow_nan=True,
    )

    def validate_named(self, names: Names | None) -> None:
        check(0 < self.xi < 1, "xi", f"must be in (0, 1), got {self.xi}")
        super().validate_named(names)


def pevi_beta(d: int, H: int, K: int, xi: float, c: float = 1.0) -> float:
    """Jin et al.'s bonus coefficient ``β = c·d·H·√(log(2dHK/ξ))``."""
    if not 0 < xi < 1:
        raise ValueError(f"xi (failure probability) must be in (0, 1), got {xi}")
    return c * d * H * math.sqrt(math.log(2.0 * d * H * max(K, 1) / xi))


def pevi(
    data: LinearEpisodes | TrajectoryDataset,
    features: FeatureTable | npt.ArrayLike,
    *,
    bonus_scale: float = 1.0,
    lam: float = 1.0,
    xi: float = 0.05,
    stationary: bool = False,
) -> LinearPVIResult:
    """PEVI on the episodes ``data`` with feature table ``features`` (not private).
    ``stationary``: each step's regression runs over the transitions of every step (one model
    for every step; β keeps its per-step form)."""
    if bonus_scale < 0 or not math.isfinite(bonus_scale):
        raise ValueError(f"bonus_scale must be finite and >= 0, got {bonus_scale}")
    if not lam > 0:
        raise ValueError(f"lambda must be > 0, got {lam}")
    data, table = prepare_inputs(data, features)
    H, K = data.H, data.K
    S, A, d = table.phi.shape
    beta = pevi_beta(d, H, K, xi, bonus_scale)
    eye = np.eye(d)
    q = np.zeros((H, S, A))
    v = np.zeros((H + 1, S))
    bonus = np.zeros((H, S, A))
    weights = np.zeros((H, d))
    lambdas = np.zeros((H, d, d))
    for h in range(H - 1, -1, -1):
        st, ac, rw, nx, ab, ok = step_rows(
            (data.states, data.actions, data.rewards, data.next_states, data.absorbing,
             data.valid),
            h,
            stationary,
        )  # fmt: skip
        phi = table.phi[st, ac]
        m = ok.astype(np.float64)
        v_next = np.where(ab, data.terminal_value(h), v[h + 1][nx])
        lam_h = (phi * m[:, None]).T @ phi + lam * eye  # Λ_h
        w = cho_solve(cholesky_lower(lam_h), phi.T @ (m * (rw + v_next)))  # ŵ_h
        q[h], bonus[h] = pessimistic_q(table.phi, w, lam_h, beta, 0.0, float(H - h))
        v[h] = q[h].max(axis=1)
        weights[h], lambdas[h] = w, lam_h
    report = PrivacyReport.non_private(
        UNIT,
        RELATION,
        system="pevi",
        public=public_information(table, H),
        notes=["PEVI (Jin et al. 2021) is a non-private baseline"],
    )
    meta = {
        "bonus_scale": bonus_scale,
        "lambda": lam,
        "xi": xi,
        "beta": beta,
        "K": K,
        "stationary": stationary,
    }
    diagnostics = {"bonus_coef": beta, "additive_per_step": 0.0}
    policy = build_policy(
        q, weights, lambdas, diagnostics, algorithm="pevi", features=table, meta=meta
    )
    return LinearPVIResult(policy, report, q, v, bonus, diagnostics)
