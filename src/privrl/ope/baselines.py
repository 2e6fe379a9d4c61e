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
* The data-dependent σ_X is itself released implicitly (it is a function of the counts m_s);
  the smooth-sensitivity framework accounts for that.

On continuous domains (Mountain Car) the baselines run on a state aggregation; first-visit MC
over aggregated cells is not a Markov estimate, so those numbers are marked approximate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
    "dp_lsl",
    "dp_lsw",
    "first_visit_returns",
    "lsl_estimate",
    "lsl_psi",
    "lsl_sigma",
    "lsw_estimate",
    "lsw_phi_w",
    "lsw_psi",
    "lsw_sigma",
    "smooth_constants",
]

UNIT = PrivacyUnit.TRAJECTORY
RELATION = NeighbourRelation.REPLACE_ONE


@dataclass(frozen=True)
class FirstVisit:
    """First-visit Monte Carlo summaries: m_s [S], F̄_s [S] (0 where m_s = 0), m."""

    counts: np.ndarray
    mean_returns: np.ndarray
    m: int


def _discounted_returns(data: TrajectoryDataset, gamma: float) -> np.ndarray:
    """G_t = Σ_{k ≥ t} γ^{k−t} R_k within each episode (vectorised over episodes)."""
    lengths = np.asarray(data.episode_lengths, dtype=np.int64)
    m, T = lengths.size, int(lengths.max())
    ep = data.transition_episode_index
    step = data.transition_steps
    R = np.zeros((m, T + 1))
    R[ep, step] = np.asarray(data.rewards, dtype=np.float64)
    G = np.zeros((m, T + 1))
    for t in range(T - 1, -1, -1):  # backwards over time, vectorised over episodes
        G[:, t] = R[:, t] + gamma * G[:, t + 1]
    return G[ep, step]


def first_visit_returns(
    data: TrajectoryDataset,
    state_index: Callable[[np.ndarray], np.ndarray],
    n_states: int,
    gamma: float,
) -> FirstVisit:
    """m_s and F̄_s from a dataset; `state_index` maps observations to {0..S-1}.

    Truncated episodes contribute their truncated returns (no bootstrapping: Monte Carlo).
    """
    if data.n_episodes == 0:
        raise DatasetError("the dataset has no episodes")
    ep = data.transition_episode_index
    rows = np.arange(data.n_transitions) + ep
    s = np.asarray(state_index(np.asarray(data.observations)[rows]), dtype=np.int64)
    if s.size and (s.min() < 0 or s.max() >= n_states):
        raise ValueError(f"state_index returned values outside [0, {n_states})")
    G = _discounted_returns(data, gamma)
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


def lsw_sigma(
    Phi: np.ndarray,
    rho: np.ndarray,
    counts: np.ndarray,
    *,
    epsilon: float,
    delta: float,
    return_range: float,
) -> float:
    """σ_X = α · return_range · ‖(Γ^{1/2}Φ)⁺‖_F · √Ψ."""
    alpha, beta = smooth_constants(epsilon, delta, Phi.shape[1])
    pinv_norm = float(np.linalg.norm(np.linalg.pinv(np.sqrt(rho)[:, None] * Phi), "fro"))
    return alpha * return_range * pinv_norm * math.sqrt(lsw_psi(rho, counts, beta))


# ------------------------------------------------------------------------ DP-LSL (V2)


def lsl_estimate(Phi: np.ndarray, rho: np.ndarray, fv: FirstVisit, lam: float) -> np.ndarray:
    """θ_λ = (ΦᵀΓ_XΦ + λ/(2m) I)⁻¹ΦᵀΓ_X F̄, Γ_X = diag(ρ_s m_s/m)."""
    g = rho * fv.counts / fv.m
    G = g[:, None] * Phi
    n = Phi.shape[1]
    return np.linalg.solve(Phi.T @ G + lam / (2.0 * fv.m) * np.eye(n), G.T @ fv.mean_returns)


def _lsl_check(Phi: np.ndarray, rho: np.ndarray, lam: float) -> float:
    bound = float(np.max(rho)) * float(np.linalg.norm(Phi, "fro")) ** 2
    if not lam > bound:
        raise ValueError(
            f"DP-LSL needs λ > ‖ρ‖_∞‖Φ‖_F² = {bound:.4g}, got λ = {lam:.4g}; increase c in "
            "λ = c·m^0.4"
        )
    return bound


def lsl_psi(
    Phi: np.ndarray, rho: np.ndarray, counts: np.ndarray, m: int, lam: float, beta: float
) -> float:
    """max_{k ≥ 0} e^{−kβ} ψ(X, k), ψ(X, k) = (c_λ √(Σ_s ρ_s min(m_s + k, m)) + ‖ρ‖₂)².
    ψ stops growing at k = m, so k ∈ [0, m] is exhaustive."""
    c_lam = float(np.linalg.norm(Phi, "fro")) * float(np.max(rho)) / math.sqrt(2.0 * lam)
    k = np.arange(m + 1, dtype=np.float64)
    inner = (rho[None, :] * np.minimum(counts[None, :] + k[:, None], m)).sum(axis=1)
    psi = (c_lam * np.sqrt(inner) + float(np.linalg.norm(rho))) ** 2
    return float(np.max(np.exp(-k * beta) * psi))


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
    """σ_X = 2α·return_range·‖Φ‖_F/(λ − ‖ρ‖_∞‖Φ‖_F²) · √(max_k e^{−kβ} ψ(X, k))."""
    bound = _lsl_check(Phi, rho, lam)
    alpha, beta = smooth_constants(epsilon, delta, Phi.shape[1])
    frob = float(np.linalg.norm(Phi, "fro"))
    scale = 2.0 * alpha * return_range * frob / (lam - bound)
    return scale * math.sqrt(lsl_psi(Phi, rho, counts, m, lam, beta))


# ------------------------------------------------------------------------ runs


@dataclass
class OutputPerturbationResult:
    theta: np.ndarray
    theta_nonprivate: np.ndarray  # for experiments only: never publish it
    sigma: float
    report: PrivacyReport
    config: dict[str, Any] = field(default_factory=dict)


def _release(
    name: str, sigma: float, epsilon: float, delta: float, n: int, extra: dict[str, Any]
) -> Release:
    alpha, beta = smooth_constants(epsilon, delta, n)
    return Release(
        name=name,
        mechanism="gaussian_smooth_sensitivity",
        sensitivity=float(sigma / alpha),  # the β-smooth upper bound on local sensitivity
        norm="l2",
        noise={"sigma": float(sigma), "alpha": alpha, "beta": beta},
        count=1,
        size=int(n),
        event=ApproxDpEvent(epsilon=float(epsilon), delta=float(delta)),
        extra={"framework": "smooth sensitivity (Nissim, Raskhodnikova & Smith 2007)", **extra},
    )


def _report(
    release: Release, epsilon: float, delta: float, system: str, notes: tuple[str, ...]
) -> PrivacyReport:
    """(ε, δ) holds by construction (smooth-sensitivity framework): stated directly, since the
    accountant cannot restate an ApproxDpEvent at its own δ."""
    return PrivacyReport(
        unit=UNIT,
        relation=RELATION,
        releases=[release],
        delta=float(delta),
        epsilon=float(epsilon),
        rho=None,
        accountant="closed form: Gaussian noise at a smooth sensitivity bound "
        "(Nissim, Raskhodnikova & Smith 2007; Balle et al. 2016), one release",
        backend="rdp",
        system=system,
        notes=list(notes),
    )


def _noisy(theta: np.ndarray, sigma: float, rng: np.random.Generator, name: str) -> np.ndarray:
    if sigma <= 0 or not math.isfinite(sigma):
        raise ValueError(f"smooth-sensitivity noise scale must be finite and > 0, got {sigma}")
    # The draw goes through the privacy core; its fixed-sensitivity record is replaced by the
    # smooth-sensitivity one (see the module docstring).
    noisy, _ = gaussian_mechanism(theta, sensitivity=1.0, sigma=sigma, rng=rng, name=name)
    return np.asarray(noisy, dtype=np.float64)


def _check_rho(rho: np.ndarray, S: int) -> np.ndarray:
    rho = np.asarray(rho, dtype=np.float64)
    if rho.shape != (S,) or np.any(rho < 0) or not np.isclose(rho.sum(), 1.0):
        raise ValueError(f"rho must be a distribution over the {S} states")
    return rho


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
    """DP-LSW (V1): θ_X + N(0, σ_X² I)."""
    rho = _check_rho(rho, Phi.shape[0])
    theta = lsw_estimate(Phi, rho, fv)
    sigma = lsw_sigma(Phi, rho, fv.counts, epsilon=epsilon, delta=delta, return_range=return_range)
    name = "DP-LSW value weights θ_X (first-visit MC, fixed weights ρ)"
    noisy = _noisy(theta, sigma, rng, name)
    release = _release(
        name,
        sigma,
        epsilon,
        delta,
        Phi.shape[1],
        {"return_range": return_range, "algorithm": "DP-LSW (V1)"},
    )
    report = _report(release, epsilon, delta, "dp-lsw", notes)
    return OutputPerturbationResult(
        noisy, theta, sigma, report, {"algorithm": "dp-lsw", "sigma": sigma}
    )


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
    rho = _check_rho(rho, Phi.shape[0])
    lam = c * fv.m**0.4 if lam is None else lam
    sigma = lsl_sigma(
        Phi, rho, fv.counts, fv.m, lam, epsilon=epsilon, delta=delta, return_range=return_range
    )
    theta = lsl_estimate(Phi, rho, fv, lam)
    name = "DP-LSL value weights θ_λ (first-visit MC, ridge, weights ρ_s m_s/m)"
    noisy = _noisy(theta, sigma, rng, name)
    release = _release(
        name,
        sigma,
        epsilon,
        delta,
        Phi.shape[1],
        {"return_range": return_range, "lambda": lam, "algorithm": "DP-LSL (V2)"},
    )
    report = _report(release, epsilon, delta, "dp-lsl", notes)
    return OutputPerturbationResult(
        noisy, theta, sigma, report, {"algorithm": "dp-lsl", "sigma": sigma, "lambda": lam}
    )
