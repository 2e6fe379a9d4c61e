"""Output-perturbation baselines of Balle, Gomrokchi & Precup (2016): DP-LSW (V1), DP-LSL (V2).

Both are on-policy, tabular (a finite set of S states with a feature matrix Φ [S, n]) and use
first-visit Monte Carlo returns: for trajectory i and state s it visits, F_{i,s} is the
discounted return from the first visit; m_s is the number of trajectories visiting s and
F̄_s = (1/m_s) Σ_i F_{i,s} (0 when m_s = 0). A non-private estimate is computed and Gaussian
noise scaled by a *smooth* upper bound on its local sensitivity (Nissim, Raskhodnikova & Smith
2007) is added, with

    α = 5·√(2 ln(2/δ))/ε,    β = ε/(4(n + ln(2/δ))),    noise N(0, σ_X² I_n).

DP-LSW (V1): θ_X = (ΦᵀΓΦ)⁺ΦᵀΓF̄ with fixed weights Γ = diag(ρ) (ρ a data-independent state
distribution), and

    φ_w(X, k) = Σ_s ρ_s / max(m_s − k, 1)²,   Ψ = max_{k ≥ 0} e^{−kβ} φ_w(X, k),
    σ_X = α · (R/(1−γ)) · ‖(Γ^{1/2}Φ)⁺‖_F · √Ψ,

where R/(1−γ) bounds the range of a return (R: range of one reward). Derivation of the local
part (checked by the tests on small cases): replacing one trajectory moves F̄_s by at most
(R/(1−γ))/max(m_s, 1), and θ_X = (Γ^{1/2}Φ)⁺Γ^{1/2}F̄ is linear in F̄, so
‖Δθ‖ ≤ ‖(Γ^{1/2}Φ)⁺‖_op · √(Σ_s ρ_s ΔF̄_s²) ≤ (R/(1−γ))‖(Γ^{1/2}Φ)⁺‖_F √φ_w(X, 0); a dataset
k replacements away has m_s ≥ m_s − k, hence φ_w(X, k).

DP-LSL (V2): ridge regression with data-dependent weights Γ_X = diag(ρ_s m_s/m),

    θ_λ = (ΦᵀΓ_XΦ + λ/(2m) I)⁻¹ΦᵀΓ_X F̄,   λ = c·m^0.4 (requires λ > ‖ρ‖_∞‖Φ‖_F²),
    c_λ = ‖Φ‖_F‖ρ‖_∞/√(2λ),   ψ(X, k) = (c_λ √(Σ_s ρ_s min(m_s + k, m)) + ‖ρ‖₂)²,
    σ_X = 2α R ‖Φ‖_F / ((1−γ)(λ − ‖ρ‖_∞‖Φ‖_F²)) · √(max_k e^{−kβ} ψ(X, k)).

Notes against Balle et al. (2016), as far as we could check them (the spec's formulas, which we
implement, are recalled from the paper; the original text was not available offline):

* Both smooth bounds put e^{−kβ} on the *squared* local bound (√max_k e^{−kβ}φ_w =
  max_k e^{−kβ/2}√φ_w): a β/2-smooth bound, which is also β-smooth — valid, slightly
  conservative compared with max_k e^{−kβ} √φ_w.
* ‖·‖_F upper-bounds the operator norm the derivation needs — valid, conservative.
* The neighbouring relation is replace-one trajectory (m fixed), as in the derivation above.
* The guarantee is (ε, δ)-DP by the smooth-sensitivity framework; it is recorded as an
  `ApproxDpEvent(ε, δ)` (the noise is not a fixed-sensitivity Gaussian mechanism, so a
  `GaussianDpEvent` would misdescribe it). The noise is drawn by
  `privrl.privacy.gaussian_mechanism` (whose own fixed-sensitivity record is replaced).

What is published, and what is not. σ_X is a function of the first-visit counts m_s: two
neighbouring datasets give different σ_X, so the number itself tells them apart (the
framework protects the *noisy output* only). σ_X, the smooth bound σ_X/α and the non-private
θ_X are therefore never published: the `Release` records the mechanism ("gaussian (smooth
sensitivity)"), α, β, the public return range (and λ, m for DP-LSL) with the sensitivity as
NaN and a note that it is data-dependent and withheld. They stay on the result object for
experiments (`OutputPerturbationResult.private_sigma`, `theta_nonprivate`).

Public bounds, no data-dependent failure. For every dataset of m trajectories σ_X lies in a
public interval [σ_lo, σ_hi] (`SmoothSensitivityPlan.sigma_bounds`): DP-LSW has
1/m² ≤ φ_w(X, 0) ≤ Ψ ≤ Σ_s ρ_s = 1, DP-LSL has ‖ρ‖₂² ≤ ψ(X, 0) ≤ max_k ψ ≤
(c_λ√m + ‖ρ‖₂)². A configuration whose interval is not finite and positive (an overflowing
return range, a vanishing ε) is refused before the data are read, on public grounds only. The
noise scale actually used is min(max(σ_X, σ_lo), σ_hi) (NaN → σ_hi): equal to σ_X in exact
arithmetic, and still a β-smooth upper bound on the local sensitivity (times α) in floating
point — the max with a constant and the min with α times the global bound σ_hi/α are again
smooth upper bounds — so the mechanism never fails on the data and always draws with a
valid smooth bound.

Rewards. The derivation bounds the spread of first-visit returns by the return range. It is
enforced, not assumed: `first_visit_returns(..., reward_bounds=(a, b))` clips every reward
into the declared public interval [a, b] first, and `return_range(reward_bounds, γ)` gives
the width of the interval that then holds every return-to-go ((b − a)/(1 − γ) when a ≤ 0 ≤ b,
the R/(1−γ) of the paper; wider when the interval excludes 0, since episode lengths vary).
γ < 1 is required unless a public horizon H is declared: the data are then truncated to their
first H steps and the return range is (b − a)·B_H with B_H = Σ_{t<H} γ^t (H at γ = 1), so a
one-step log pays b − a, not (b − a)/(1 − γ) (`privrl.ope.horizon`).

On continuous domains (Mountain Car) the baselines run on a state aggregation; first-visit MC
over aggregated cells is not a Markov estimate, so those numbers are marked approximate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from privrl.data.dataset import DatasetError, TrajectoryDataset
from privrl.privacy.events import ApproxDpEvent
from privrl.privacy.mechanisms import gaussian_mechanism
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit

__all__ = [
    "FirstVisit",
    "OutputPerturbationResult",
    "SmoothSensitivityPlan",
    "dp_lsl",
    "dp_lsw",
    "first_visit_returns",
    "lsl_estimate",
    "lsl_psi",
    "lsl_sigma",
    "lsl_sigma_bounds",
    "lsw_estimate",
    "lsw_phi_w",
    "lsw_psi",
    "lsw_sigma",
    "lsw_sigma_bounds",
    "plan_dp_lsl",
    "plan_dp_lsw",
    "return_range",
    "smooth_constants",
]

UNIT = PrivacyUnit.TRAJECTORY
RELATION = NeighbourRelation.REPLACE_ONE
MECHANISM = "gaussian (smooth sensitivity)"


@dataclass(frozen=True)
class FirstVisit:
    """First-visit Monte Carlo summaries: m_s [S], F̄_s [S] (0 where m_s = 0), m."""

    counts: np.ndarray
    mean_returns: np.ndarray
    m: int


def return_range(
    reward_bounds: tuple[float, float], gamma: float, horizon: int | None = None
) -> float:
    """Width of an interval holding every discounted return-to-go Σ_{k≥t} γ^{k−t} R_k of an
    episode (any length ≥ 1; at most `horizon` steps when one is declared) whose rewards lie
    in [a, b] (`privrl.ope.horizon.return_bounds`):

        lowest = a·B if a < 0 else a,    highest = b·B if b > 0 else b,

    with B = 1/(1−γ) without a horizon (the paper's R/(1−γ) when a ≤ 0 ≤ b; needs γ < 1) and
    B = B_H = Σ_{t<H} γ^t with one (H at γ = 1; 1 for a one-step log, whatever γ). The data
    must then be truncated to H steps (`privrl.ope.horizon.truncate`). Public inputs only.
    """
    from privrl.ope.horizon import return_bounds

    a, b = float(reward_bounds[0]), float(reward_bounds[1])
    if not (math.isfinite(a) and math.isfinite(b) and a < b):
        raise ValueError(f"reward bounds must be finite with low < high, got [{a}, {b}]")
    gamma = float(gamma)
    if horizon is None and not 0.0 <= gamma < 1.0:
        raise ValueError(
            f"the first-visit returns are bounded by R/(1−γ), which needs a discount γ in "
            f"[0, 1), got γ = {gamma}, or a declared horizon H (then R·B_H)"
        )
    lowest, highest = return_bounds((a, b), gamma, horizon)
    width = highest - lowest
    if not math.isfinite(width):
        raise ValueError(f"the return range for rewards in [{a}, {b}] and γ = {gamma} overflows")
    return width


def _discounted_returns(data: TrajectoryDataset, gamma: float, rewards: np.ndarray) -> np.ndarray:
    """G_t = Σ_{k ≥ t} γ^{k−t} R_k within each episode, per transition (flat, O(transitions)
    memory: one vectorised step per time index over the episodes still running, never an
    [episodes × longest episode] array, whose size would depend on the private data)."""
    n = int(data.n_transitions)
    G = np.zeros(n)
    if n == 0:
        return G
    step = np.asarray(data.transition_steps, dtype=np.int64)
    lengths = np.asarray(data.episode_lengths, dtype=np.int64)[data.transition_episode_index]
    has_next = step + 1 < lengths
    order = np.argsort(-step, kind="stable")  # latest time index first
    cuts = np.flatnonzero(np.diff(step[order])) + 1
    for idx in np.split(order, cuts):  # backwards over time, vectorised over episodes
        nxt = np.where(has_next[idx], G[np.minimum(idx + 1, n - 1)], 0.0)
        G[idx] = rewards[idx] + gamma * nxt
    return G


def first_visit_returns(
    data: TrajectoryDataset,
    state_index: Callable[[np.ndarray], np.ndarray],
    n_states: int,
    gamma: float,
    *,
    reward_bounds: tuple[float, float] | None = None,
) -> FirstVisit:
    """m_s and F̄_s from a dataset; `state_index` maps observations to {0..S-1}.

    With `reward_bounds` = (a, b) (public), every reward is clipped into [a, b] first, which
    is what makes `return_range(reward_bounds, γ)` a true bound for the private runs (the
    declared bound is enforced on the data, never checked against it). Truncated episodes
    contribute their truncated returns (no bootstrapping: Monte Carlo).
    """
    if data.n_episodes == 0:
        raise DatasetError("the dataset has no episodes")
    ep = data.transition_episode_index
    rows = np.arange(data.n_transitions) + ep
    s = np.asarray(state_index(np.asarray(data.observations)[rows]), dtype=np.int64)
    if s.size and (s.min() < 0 or s.max() >= n_states):
        raise ValueError(f"state_index returned values outside [0, {n_states})")
    rewards = np.asarray(data.rewards, dtype=np.float64)
    if reward_bounds is not None:
        rewards = np.clip(rewards, float(reward_bounds[0]), float(reward_bounds[1]))
    G = _discounted_returns(data, gamma, rewards)
    key = ep * n_states + s
    _, first = np.unique(key, return_index=True)  # first visit of each (episode, state)
    counts = np.bincount(s[first], minlength=n_states).astype(np.int64)
    sums = np.bincount(s[first], weights=G[first], minlength=n_states)
    mean = np.divide(sums, counts, out=np.zeros(n_states), where=counts > 0)
    return FirstVisit(counts=counts, mean_returns=mean, m=data.n_episodes)


def smooth_constants(epsilon: float, delta: float, n: int) -> tuple[float, float]:
    """(α, β) = (5√(2 ln(2/δ))/ε, ε/(4(n + ln(2/δ))))."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    log_term = math.log(2.0 / delta)
    return 5.0 * math.sqrt(2.0 * log_term) / epsilon, epsilon / (4.0 * (n + log_term))


# ------------------------------------------------------------------------ DP-LSW (V1)


def lsw_estimate(Phi: np.ndarray, rho: np.ndarray, fv: FirstVisit) -> np.ndarray:
    """θ_X = (ΦᵀΓΦ)⁺ΦᵀΓF̄, Γ = diag(ρ)."""
    G = rho[:, None] * Phi
    return np.linalg.pinv(Phi.T @ G) @ (G.T @ fv.mean_returns)


def lsw_phi_w(rho: np.ndarray, counts: np.ndarray, k: np.ndarray | int) -> np.ndarray:
    """φ_w(X, k) = Σ_s ρ_s / max(m_s − k, 1)² for every k given."""
    k = np.atleast_1d(np.asarray(k, dtype=np.float64))
    denom = np.maximum(counts[None, :] - k[:, None], 1.0) ** 2
    return (rho[None, :] / denom).sum(axis=1)


def lsw_psi(rho: np.ndarray, counts: np.ndarray, beta: float) -> float:
    """Ψ = max_{k ≥ 0} e^{−kβ} φ_w(X, k). φ_w stops changing at k = max m_s − 1, where the
    decreasing e^{−kβ} makes larger k irrelevant, so k ∈ [0, max m_s] is exhaustive."""
    k = np.arange(int(counts.max()) + 1 if counts.size else 1)
    return float(np.max(np.exp(-k * beta) * lsw_phi_w(rho, counts, k)))


def _lsw_scale(Phi: np.ndarray, rho: np.ndarray, alpha: float, return_range: float) -> float:
    """α · return_range · ‖(Γ^{1/2}Φ)⁺‖_F (σ_X = this · √Ψ)."""
    pinv_norm = float(np.linalg.norm(np.linalg.pinv(np.sqrt(rho)[:, None] * Phi), "fro"))
    return alpha * return_range * pinv_norm


def lsw_sigma(
    Phi: np.ndarray,
    rho: np.ndarray,
    counts: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    return_range: float,
) -> float:
    """σ_X = α · return_range · ‖(Γ^{1/2}Φ)⁺‖_F · √Ψ. DATA-DEPENDENT: never publish it."""
    alpha, beta = smooth_constants(epsilon, delta, Phi.shape[1])
    return _lsw_scale(Phi, rho, alpha, return_range) * math.sqrt(lsw_psi(rho, counts, beta))


def lsw_sigma_bounds(
    Phi: np.ndarray, rho: np.ndarray, m: int, *, epsilon: float, delta: float, return_range: float
) -> tuple[float, float]:
    """Public [σ_lo, σ_hi] ∋ σ_X for every dataset of m trajectories: 1/m² ≤ Ψ ≤ Σ_s ρ_s = 1
    (m_s ≤ m in φ_w(X, 0); max(m_s − k, 1) ≥ 1 for every k)."""
    alpha, _ = smooth_constants(epsilon, delta, Phi.shape[1])
    scale = _lsw_scale(Phi, rho, alpha, return_range)
    return scale / max(int(m), 1), scale


# ------------------------------------------------------------------------ DP-LSL (V2)


def lsl_estimate(Phi: np.ndarray, rho: np.ndarray, fv: FirstVisit, lam: float) -> np.ndarray:
    """θ_λ = (ΦᵀΓ_XΦ + λ/(2m) I)⁻¹ΦᵀΓ_X F̄, Γ_X = diag(ρ_s m_s/m)."""
    g = rho * fv.counts / fv.m
    G = g[:, None] * Phi
    n = Phi.shape[1]
    return np.linalg.solve(Phi.T @ G + lam / (2.0 * fv.m) * np.eye(n), G.T @ fv.mean_returns)


def _lsl_check(Phi: np.ndarray, rho: np.ndarray, lam: float) -> float:
    bound = float(np.max(rho)) * float(np.linalg.norm(Phi, "fro")) ** 2
    if not (lam > bound and math.isfinite(lam)):
        raise ValueError(
            f"DP-LSL needs a finite λ > ‖ρ‖_∞‖Φ‖_F² = {bound:.4g}, got λ = {lam:.4g}; choose c "
            "in λ = c·m^0.4 accordingly"
        )
    return bound


def _lsl_c_lambda(Phi: np.ndarray, rho: np.ndarray, lam: float) -> float:
    return float(np.linalg.norm(Phi, "fro")) * float(np.max(rho)) / math.sqrt(2.0 * lam)


def lsl_psi(
    Phi: np.ndarray, rho: np.ndarray, counts: np.ndarray, m: int, lam: float, beta: float
) -> float:
    """max_{k ≥ 0} e^{−kβ} ψ(X, k), ψ(X, k) = (c_λ √(Σ_s ρ_s min(m_s + k, m)) + ‖ρ‖₂)².
    ψ stops growing at k = m, so k ∈ [0, m] is exhaustive."""
    c_lam = _lsl_c_lambda(Phi, rho, lam)
    k = np.arange(m + 1, dtype=np.float64)
    inner = (rho[None, :] * np.minimum(counts[None, :] + k[:, None], m)).sum(axis=1)
    psi = (c_lam * np.sqrt(inner) + float(np.linalg.norm(rho))) ** 2
    return float(np.max(np.exp(-k * beta) * psi))


def _lsl_scale(
    Phi: np.ndarray, rho: np.ndarray, lam: float, alpha: float, return_range: float
) -> float:
    """2α·return_range·‖Φ‖_F/(λ − ‖ρ‖_∞‖Φ‖_F²) (σ_X = this · √max_k e^{−kβ}ψ)."""
    bound = _lsl_check(Phi, rho, lam)
    return 2.0 * alpha * return_range * float(np.linalg.norm(Phi, "fro")) / (lam - bound)


def lsl_sigma(
    Phi: np.ndarray,
    rho: np.ndarray,
    counts: np.ndarray,
    m: int,
    lam: float,
    *,
    epsilon: float,
    delta: float,
    return_range: float,
) -> float:
    """σ_X = 2α·return_range·‖Φ‖_F/(λ − ‖ρ‖_∞‖Φ‖_F²) · √(max_k e^{−kβ} ψ(X, k)).
    DATA-DEPENDENT: never publish it."""
    alpha, beta = smooth_constants(epsilon, delta, Phi.shape[1])
    scale = _lsl_scale(Phi, rho, lam, alpha, return_range)
    return scale * math.sqrt(lsl_psi(Phi, rho, counts, m, lam, beta))


def lsl_sigma_bounds(
    Phi: np.ndarray,
    rho: np.ndarray,
    m: int,
    lam: float,
    *,
    epsilon: float,
    delta: float,
    return_range: float,
) -> tuple[float, float]:
    """Public [σ_lo, σ_hi] ∋ σ_X for every dataset of m trajectories:
    ‖ρ‖₂² ≤ ψ(X, 0) ≤ max_k e^{−kβ}ψ(X, k) ≤ (c_λ√m + ‖ρ‖₂)² (Σ_s ρ_s min(m_s + k, m) ≤ m)."""
    alpha, _ = smooth_constants(epsilon, delta, Phi.shape[1])
    scale = _lsl_scale(Phi, rho, lam, alpha, return_range)
    rho2 = float(np.linalg.norm(rho))
    return scale * rho2, scale * (_lsl_c_lambda(Phi, rho, lam) * math.sqrt(m) + rho2)


# ------------------------------------------------------------------------ runs


Algorithm = Literal["dp-lsw", "dp-lsl"]

_NAMES = {
    "dp-lsw": "DP-LSW value weights θ_X (first-visit MC, fixed weights ρ)",
    "dp-lsl": "DP-LSL value weights θ_λ (first-visit MC, ridge, weights ρ_s m_s/m)",
}
_LABELS = {"dp-lsw": "DP-LSW (V1)", "dp-lsl": "DP-LSL (V2)"}


@dataclass(frozen=True)
class SmoothSensitivityPlan:
    """The public side of one DP-LSW / DP-LSL release, fixed before the data are read.

    Everything here is a function of public quantities ((ε, δ), the number of features n, the
    return range, m — public under replace-one — and λ for DP-LSL), so the report it builds
    is the same for every neighbouring dataset and can be checked against a ledger first.
    `sigma_bounds` is the public interval holding σ_X (see the module docstring).
    """

    algorithm: Algorithm
    epsilon: float
    delta: float
    alpha: float
    beta: float
    return_range: float
    m: int
    n: int
    lam: float | None
    sigma_bounds: tuple[float, float]

    def noise_scale(self, sigma_x: float) -> float:
        """The σ the noise is drawn with: σ_X clamped to the public [σ_lo, σ_hi] (NaN → σ_hi).
        Never fails on the data; never below the analysis' σ_X."""
        lo, hi = self.sigma_bounds
        if math.isnan(sigma_x):
            return hi
        return min(max(float(sigma_x), lo), hi)

    def release(self) -> Release:
        extra: dict[str, Any] = {
            "algorithm": _LABELS[self.algorithm],
            "framework": "smooth sensitivity (Nissim, Raskhodnikova & Smith 2007)",
            "sensitivity": "data-dependent: a β-smooth upper bound S_β(X) on the local "
            "sensitivity of θ (a function of the first-visit counts m_s); withheld, since its "
            "value tells neighbouring datasets apart",
            "noise_scale": "σ_X = α·S_β(X), data-dependent, withheld; drawn with σ_X clamped "
            "to a public interval that holds it for every dataset of m trajectories",
            "return_range": self.return_range,
            "m": self.m,
        }
        if self.lam is not None:
            extra["lambda"] = self.lam
        return Release(
            name=_NAMES[self.algorithm],
            mechanism=MECHANISM,
            sensitivity=math.nan,  # data-dependent and withheld (see extra)
            norm="l2",
            noise={"alpha": self.alpha, "beta": self.beta},
            count=1,
            size=int(self.n),
            event=ApproxDpEvent(epsilon=float(self.epsilon), delta=float(self.delta)),
            extra=extra,
        )

    def report(self, notes: tuple[str, ...] | list[str] = ()) -> PrivacyReport:
        """(ε, δ) holds by construction (smooth-sensitivity framework): stated directly, since
        the accountant cannot restate an ApproxDpEvent at its own δ."""
        return PrivacyReport(
            unit=UNIT,
            relation=RELATION,
            releases=[self.release()],
            delta=float(self.delta),
            epsilon=float(self.epsilon),
            rho=None,
            accountant="closed form: Gaussian noise at a smooth sensitivity bound "
            "(Nissim, Raskhodnikova & Smith 2007; Balle et al. 2016), one release",
            backend="rdp",
            system=self.algorithm,
            notes=list(notes),
        )

    def config(self) -> dict[str, Any]:
        """The run's public settings (what config.json may show)."""
        out: dict[str, Any] = {
            "algorithm": self.algorithm,
            "alpha": self.alpha,
            "beta": self.beta,
            "return_range": self.return_range,
        }
        if self.lam is not None:
            out["lambda"] = self.lam
        return out


def _check_sigma_bounds(name: str, bounds: tuple[float, float]) -> tuple[float, float]:
    lo, hi = bounds
    if not (lo > 0 and math.isfinite(hi)):
        raise ValueError(
            f"{name}: the noise scale is not representable for these public parameters (for "
            f"datasets of this size it lies in [{lo:.4g}, {hi:.4g}]); use a smaller reward "
            "range or a larger ε"
        )
    return lo, hi


def _check_m(m: int) -> int:
    if int(m) < 1:
        raise ValueError(f"the dataset must have m >= 1 trajectories, got {m}")
    return int(m)


def plan_dp_lsw(
    Phi: np.ndarray,
    rho: np.ndarray,
    m: int,
    *,
    epsilon: float,
    delta: float,
    return_range: float,
) -> SmoothSensitivityPlan:
    """The public plan of a DP-LSW release (refuses, on public grounds, settings whose noise
    scale cannot be represented)."""
    rho = _check_rho(rho, Phi.shape[0])
    m = _check_m(m)
    _check_return_range(return_range)
    alpha, beta = smooth_constants(epsilon, delta, Phi.shape[1])
    bounds = lsw_sigma_bounds(Phi, rho, m, epsilon=epsilon, delta=delta, return_range=return_range)
    return SmoothSensitivityPlan(
        "dp-lsw",
        float(epsilon),
        float(delta),
        alpha,
        beta,
        float(return_range),
        m,
        int(Phi.shape[1]),
        None,
        _check_sigma_bounds("DP-LSW", bounds),
    )


def plan_dp_lsl(
    Phi: np.ndarray,
    rho: np.ndarray,
    m: int,
    *,
    epsilon: float,
    delta: float,
    return_range: float,
    c: float = 1.0,
    lam: float | None = None,
) -> SmoothSensitivityPlan:
    """The public plan of a DP-LSL release, λ = c·m^0.4 unless given (public: c and m are)."""
    rho = _check_rho(rho, Phi.shape[0])
    m = _check_m(m)
    _check_return_range(return_range)
    lam = float(c) * m**0.4 if lam is None else float(lam)
    alpha, beta = smooth_constants(epsilon, delta, Phi.shape[1])
    bounds = lsl_sigma_bounds(
        Phi, rho, m, lam, epsilon=epsilon, delta=delta, return_range=return_range
    )
    return SmoothSensitivityPlan(
        "dp-lsl",
        float(epsilon),
        float(delta),
        alpha,
        beta,
        float(return_range),
        m,
        int(Phi.shape[1]),
        lam,
        _check_sigma_bounds("DP-LSL", bounds),
    )


@dataclass
class OutputPerturbationResult:
    """A DP-LSW / DP-LSL run. `theta` and `report` may be published; `theta_nonprivate` and
    `private_sigma` are functions of the private data without a mechanism: for experiments
    only, NEVER publish them (config, metrics, logs, plots)."""

    theta: np.ndarray
    theta_nonprivate: np.ndarray  # for experiments only: never publish it
    private_sigma: float  # σ the noise was drawn with (data-dependent): never publish it
    report: PrivacyReport
    config: dict[str, Any] = field(default_factory=dict)  # public settings only


def _noisy(theta: np.ndarray, sigma: float, rng: np.random.Generator, name: str) -> np.ndarray:
    # The draw goes through the privacy core; its fixed-sensitivity record is replaced by the
    # smooth-sensitivity one (see the module docstring). σ > 0 and finite by the plan's clamp.
    noisy, _ = gaussian_mechanism(theta, sensitivity=1.0, sigma=sigma, rng=rng, name=name)
    return np.asarray(noisy, dtype=np.float64)


def _check_rho(rho: np.ndarray, S: int) -> np.ndarray:
    rho = np.asarray(rho, dtype=np.float64)
    if rho.shape != (S,) or np.any(rho < 0) or not np.isclose(rho.sum(), 1.0):
        raise ValueError(f"rho must be a distribution over the {S} states")
    return rho


def _check_return_range(return_range: float) -> None:
    if not (math.isfinite(return_range) and return_range > 0):
        raise ValueError(f"the return range must be finite and > 0, got {return_range}")


def dp_lsw(
    fv: FirstVisit,
    Phi: np.ndarray,
    rho: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    return_range: float,
    rng: np.random.Generator,
    notes: tuple[str, ...] = (),
) -> OutputPerturbationResult:
    """DP-LSW (V1): θ_X + N(0, σ_X² I). `fv` must come from rewards inside an interval whose
    `return_range` is given (`first_visit_returns(..., reward_bounds=...)` enforces it)."""
    plan = plan_dp_lsw(Phi, rho, fv.m, epsilon=epsilon, delta=delta, return_range=return_range)
    rho = _check_rho(rho, Phi.shape[0])
    theta = lsw_estimate(Phi, rho, fv)
    sigma = plan.noise_scale(
        lsw_sigma(Phi, rho, fv.counts, epsilon=epsilon, delta=delta, return_range=return_range)
    )
    noisy = _noisy(theta, sigma, rng, _NAMES["dp-lsw"])
    return OutputPerturbationResult(noisy, theta, sigma, plan.report(notes), plan.config())


def dp_lsl(
    fv: FirstVisit,
    Phi: np.ndarray,
    rho: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    return_range: float,
    rng: np.random.Generator,
    c: float = 1.0,
    lam: float | None = None,
    notes: tuple[str, ...] = (),
) -> OutputPerturbationResult:
    """DP-LSL (V2): θ_λ + N(0, σ_X² I), λ = c·m^0.4 unless given."""
    plan = plan_dp_lsl(
        Phi, rho, fv.m, epsilon=epsilon, delta=delta, return_range=return_range, c=c, lam=lam
    )
    rho = _check_rho(rho, Phi.shape[0])
    lam = plan.lam
    assert lam is not None
    sigma = plan.noise_scale(
        lsl_sigma(
            Phi, rho, fv.counts, fv.m, lam, epsilon=epsilon, delta=delta, return_range=return_range
        )
    )
    theta = lsl_estimate(Phi, rho, fv, lam)
    noisy = _noisy(theta, sigma, rng, _NAMES["dp-lsl"])
    return OutputPerturbationResult(noisy, theta, sigma, plan.report(notes), plan.config())
