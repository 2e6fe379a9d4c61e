"""Output-perturbed ridge LSTD (a baseline for GPOPE): θ̃ = (A_D + λI)⁻¹ b_D + N(0, σ²I).

Not in Xie, Thomas & Miklau (2019). Output perturbation of a least-squares solution with a
sensitivity derived from public bounds is the classical alternative to private gradient
descent (Chaudhuri, Monteleoni & Sarwate 2011, §4, for ERM; Balle, Gomrokchi & Precup 2016
for LSTD with a data-dependent, smooth sensitivity). Here the sensitivity is a worst case over
all datasets, fixed by public numbers only, so the noise never depends on the data.

Statistics (on-policy, per-trajectory averaged as in GPOPE's (2.2)). For trajectory i with
τ_i transitions, features clipped to ‖φ‖₂ ≤ Φ̄ and rewards clipped to [−R̄, R̄]:

    Â_i = (1/τ_i) Σ_t φ_t (φ_t − γ φ_{t+1})ᵀ,   b̂_i = (1/τ_i) Σ_t R_t φ_t            (1)
    Ã_i = Â_i + (γ / (2τ_i)) φ_τ φ_τᵀ      (φ_τ: the final observation's features; 0 when
                                             the episode ends ``terminated``)          (2)
    n_D = max(m, m̄),  A_D = (1/n_D) Σ_i Ã_i + λ I,  b_D = (1/n_D) Σ_i b̂_i,  θ_D = A_D⁻¹ b_D  (3)

m is the dataset's number of trajectories (private), m̄ the declared number (public), λ > 0
the ridge. The correction (2) is zero for every trajectory that ends in a terminal state (all
of the chain's); it makes the symmetric part of each Ã_i positive semi-definite, which is what
bounds ‖A_D⁻¹‖ by a public number.

Sensitivity (unit: one trajectory; relation: add/remove, D' = D ∪ {x}):

(S1) sym(Ã_i) ⪰ 0. With a_t = φ_tᵀv (t = 0..τ), 2γ a_t a_{t+1} ≤ γ(a_t² + a_{t+1}²) gives
     τ vᵀÂ_i v = Σ_{t<τ} (a_t² − γ a_t a_{t+1}) ≥ (1 − γ) Σ_{t<τ} a_t² + (γ/2)(a_0² − a_τ²),
     and (2) adds (γ/2) a_τ², so τ vᵀÃ_i v ≥ 0.
(S2) Hence vᵀA_D v ≥ λ‖v‖², so ‖A_D v‖ ≥ λ‖v‖ and ‖A_D⁻¹‖₂ ≤ 1/λ, for every dataset.
(S3) ‖b̂_i‖ ≤ R̄Φ̄ =: β, so ‖b_D‖ ≤ (m/n_D) β ≤ β and ‖θ_D‖ ≤ β/λ.
(S4) ‖Ã_i‖₂ ≤ (1 + γ)Φ̄² + (γ/2)Φ̄² =: α  (‖φ(φ − γφ')ᵀ‖ ≤ Φ̄·(1 + γ)Φ̄; the correction ≤ γΦ̄²/2).
(S5) θ_D' − θ_D = A_D'⁻¹ (b_D' − A_D' θ_D). Two cases:
     m + 1 ≤ m̄ (n_D = n_D' = m̄): b_D' − A_D'θ_D = (b̂_x − Ã_x θ_D)/m̄, so
         ‖θ_D' − θ_D‖ ≤ (β + αβ/λ) / (λ m̄).
     m ≥ m̄ (n_D = m, n_D' = m + 1): A_Dθ_D = b_D gives (Σ_i Ã_i)θ_D = Σ_i b̂_i − mλθ_D, so
         b_D' − A_D'θ_D = (b̂_x − Ã_x θ_D − λθ_D)/(m + 1) and
         ‖θ_D' − θ_D‖ ≤ (2β + αβ/λ) / (λ (m + 1)) < (2β + αβ/λ) / (λ m̄).
     Removal is the same pair read backwards. Therefore

         Δ₂ = R̄Φ̄ (2 + α/λ) / (λ m̄),   α = (1 + 3γ/2) Φ̄²                         (4)

     bounds ‖θ_D − θ_D'‖₂ for all add/remove neighbours of any size. The episode length
     never enters (the 1/τ_i averaging of (1)), so no horizon needs declaring. Replace-one
     neighbours are two add/remove steps apart: Δ₂ ≤ 2·(4) there (stated in the report).

Mechanism: one Gaussian release of θ_D with noise multiplier z = σ/Δ₂ calibrated to (ε, δ) by
dp-accounting's PLD accountant; the noise is drawn by `privrl.privacy.gaussian_mechanism`.
Every input of (4) and of z — Φ̄, R̄, γ, λ, m̄, ε, δ — is public: the caller passes them (the
reproduction fixes Φ̄ = R̄ = 1 from the chain's definition, m̄ = the design size, and picks λ on
an independent public sample); a bound the data violate is enforced by clipping, never by an
error. The price of a worst-case bound is the 1/λ² in (4): λ must be large against the
scale of A_D (≈ (1 − γ/2)/|S| on the chain), which shrinks θ towards 0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privrl.data.dataset import TrajectoryDataset
from privrl.ope.stats import FeatureFn, trajectory_stats
from privrl.privacy.accounting import calibrate_noise_multiplier
from privrl.privacy.mechanisms import gaussian_mechanism
from privrl.privacy.public import PublicParameters
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit

__all__ = [
    "LSTD_OP_RELATION",
    "LstdOpConfig",
    "LstdOpParameters",
    "LstdOpResult",
    "LstdOpStatistics",
    "lstd_op",
    "lstd_op_noise_multiplier",
    "lstd_op_release",
    "lstd_op_report",
    "lstd_op_statistics",
    "ridge_solution",
]

UNIT = PrivacyUnit.TRAJECTORY
LSTD_OP_RELATION = NeighbourRelation.ADD_REMOVE
PLD_DISCRETIZATION = 1e-4


@dataclass(frozen=True)
class LstdOpParameters:
    """The resolved public inputs of output-perturbed ridge LSTD (each enters the sensitivity
    (4)); `privrl.ope.linear.lstd_op.LSTDOPConfig` is the user's config they are resolved from.

    feature_bound: Φ̄ (‖φ(s)‖₂ ≤ Φ̄, enforced by scaling longer rows down); reward_bound: R̄
    (rewards clipped to [−R̄, R̄]); gamma: γ; ridge: λ > 0; public_m: m̄, the declared number of
    trajectories.
    """

    feature_bound: float
    reward_bound: float
    gamma: float
    ridge: float
    public_m: int

    def __post_init__(self) -> None:
        for name in ("feature_bound", "reward_bound", "ridge"):
            v = float(getattr(self, name))
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be finite and > 0, got {v}")
        if not 0.0 <= self.gamma < 1.0:
            raise ValueError(f"gamma must be in [0, 1), got {self.gamma}")
        if int(self.public_m) < 1:
            raise ValueError(
                f"the declared number of trajectories m̄ must be >= 1, got {self.public_m}"
            )

    @property
    def alpha(self) -> float:
        """α = (1 + 3γ/2) Φ̄², the bound (S4) on ‖Ã_i‖₂."""
        return (1.0 + 1.5 * self.gamma) * self.feature_bound**2

    @property
    def beta(self) -> float:
        """β = R̄Φ̄, the bound (S3) on ‖b̂_i‖₂."""
        return self.reward_bound * self.feature_bound

    def sensitivity(self) -> float:
        """Δ₂ = R̄Φ̄ (2 + α/λ) / (λ m̄), eq. (4) of the module docstring."""
        lam = float(self.ridge)
        return self.beta * (2.0 + self.alpha / lam) / (lam * int(self.public_m))

    def public_parameters(self, params: PublicParameters | None = None) -> PublicParameters:
        """Record the derived sensitivity in `params` (the caller has resolved the inputs)."""
        params = params if params is not None else PublicParameters()
        params.derive(
            "LSTD-OP sensitivity Δ₂",
            self.sensitivity(),
            "R̄Φ̄(2 + (1 + 3γ/2)Φ̄²/λ)/(λ m̄)",
        )
        return params


LstdOpConfig = LstdOpParameters
"""Another name of `LstdOpParameters` (the reproductions use it): the resolved public inputs,
not a user's config (that is `privrl.ope.linear.lstd_op.LSTDOPConfig`)."""


@dataclass(frozen=True)
class LstdOpStatistics:
    """Σ_i Ã_i [n, n], Σ_i b̂_i [n] and m of one dataset (private; never published)."""

    A_sum: np.ndarray
    b_sum: np.ndarray
    m: int

    def solve(self, config: LstdOpParameters) -> np.ndarray:
        return ridge_solution(self.A_sum, self.b_sum, self.m, config)


def _clip_rows(phi: np.ndarray, bound: float) -> np.ndarray:
    norms = np.linalg.norm(phi, axis=1)
    scale = np.minimum(1.0, bound / np.maximum(norms, 1e-300))
    return phi * scale[:, None]


def lstd_op_statistics(
    data: TrajectoryDataset, features: FeatureFn, config: LstdOpParameters
) -> LstdOpStatistics:
    """The sums of (1)–(2) over the dataset's trajectories, with Φ̄ and R̄ enforced."""
    bound = float(config.feature_bound)

    def clipped(obs: np.ndarray) -> np.ndarray:
        return _clip_rows(np.asarray(features(obs), dtype=np.float64), bound)

    rb = float(config.reward_bound)
    clipped_rewards = np.clip(np.asarray(data.rewards, dtype=np.float64), -rb, rb)
    data_c = TrajectoryDataset(
        observations=data.observations,
        actions=data.actions,
        rewards=clipped_rewards,
        terminated=data.terminated,
        truncated=data.truncated,
        episode_offsets=data.episode_offsets,
        metadata=data.metadata,
        validate=False,  # the same episodes, rewards clipped
    )
    st = trajectory_stats(data_c, clipped, config.gamma)  # on-policy: ρ_t = 1
    A_sum = st.A.sum(axis=0)
    # (2): for episodes that do not end `terminated`, add (γ/(2τ)) φ_τ φ_τᵀ
    lengths = np.asarray(data.episode_lengths, dtype=np.int64)
    offsets = np.asarray(data.episode_offsets, dtype=np.int64)
    last = offsets[1:] - 1
    open_end = ~np.asarray(data.terminated, dtype=bool)[last]
    if np.any(open_end):
        obs_offsets = np.asarray(data.observation_offsets, dtype=np.int64)
        final_rows = obs_offsets[1:][open_end] - 1
        phi_t = clipped(np.asarray(data.observations)[final_rows])
        w = config.gamma / (2.0 * lengths[open_end])
        A_sum = A_sum + (phi_t * w[:, None]).T @ phi_t
    return LstdOpStatistics(A_sum, st.b.sum(axis=0), int(st.m))


def ridge_solution(
    A_sum: np.ndarray, b_sum: np.ndarray, m: int, config: LstdOpParameters
) -> np.ndarray:
    """θ_D = (Σ Ã_i / n_D + λI)⁻¹ Σ b̂_i / n_D with n_D = max(m, m̄), eq. (3)."""
    n_d = float(max(int(m), int(config.public_m)))
    n = A_sum.shape[0]
    return np.linalg.solve(A_sum / n_d + config.ridge * np.eye(n), b_sum / n_d)


@functools.lru_cache(maxsize=64)
def lstd_op_noise_multiplier(epsilon: float, delta: float) -> float:
    """Smallest z = σ/Δ₂ for which one Gaussian release is (ε, δ)-DP (PLD accountant); a
    function of public numbers only, cached."""
    return float(
        calibrate_noise_multiplier(
            float(epsilon),
            float(delta),
            1,
            sampling="none",
            relation=LSTD_OP_RELATION,
            backend="pld",
            tolerance=1e-4,
            pld_discretization=PLD_DISCRETIZATION,
        )
    )


def lstd_op_release(
    theta: np.ndarray,
    config: LstdOpParameters,
    *,
    noise_multiplier: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, Release]:
    """θ + N(0, (zΔ₂)² I): the only release of the method (drawn in `privrl.privacy`)."""
    noisy, release = gaussian_mechanism(
        theta,
        sensitivity=config.sensitivity(),
        noise_multiplier=noise_multiplier,
        rng=rng,
        name="LSTD-OP θ = (A_D + λI)⁻¹ b_D",
    )
    return np.asarray(noisy, dtype=np.float64), release


def lstd_op_report(
    release: Release,
    config: LstdOpParameters,
    *,
    delta: float,
    public: Sequence[str] = (),
    notes: Sequence[str] = (),
    params: PublicParameters | None = None,
) -> PrivacyReport:
    """The run's report (add/remove, PLD) with the derived sensitivity among its public
    parameters."""
    report = PrivacyReport.build(
        UNIT,
        LSTD_OP_RELATION,
        [release],
        delta,
        backend="pld",
        system="lstd-op",
        public=list(public),
        notes=[
            "sensitivity Δ₂ = R̄Φ̄(2 + α/λ)/(λ m̄), α = (1 + 3γ/2)Φ̄² (privrl.ope.lstd_op, eq. 4); "
            "replace-one neighbours move θ by at most 2Δ₂",
            *notes,
        ],
    )
    return report.with_public_parameters(config.public_parameters(params))


@dataclass(frozen=True)
class LstdOpResult:
    theta: np.ndarray
    report: PrivacyReport
    sigma: float


def lstd_op(
    data: TrajectoryDataset,
    features: FeatureFn,
    config: LstdOpParameters,
    *,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    noise_multiplier: float | None = None,
    params: PublicParameters | None = None,
) -> LstdOpResult:
    """Statistics (1)–(2) → ridge solution (3) → one Gaussian release → report.

    `noise_multiplier`: a z already calibrated to (ε, δ) by `lstd_op_noise_multiplier` (it
    depends on public inputs only; pass it to skip the calibration in repeated trials).
    """
    z = (
        noise_multiplier
        if noise_multiplier is not None
        else (lstd_op_noise_multiplier(epsilon, delta))
    )
    theta = lstd_op_statistics(data, features, config).solve(config)
    noisy, release = lstd_op_release(theta, config, noise_multiplier=z, rng=rng)
    report = lstd_op_report(release, config, delta=delta, params=params)
    return LstdOpResult(noisy, report, z * config.sensitivity())
