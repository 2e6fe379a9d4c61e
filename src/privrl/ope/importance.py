"""Private importance-sampling off-policy evaluation: IPS, self-normalised IPS and doubly
robust, for short horizons and contextual-bandit logs with propensities (the per-decision
estimators PDIS and WPDIS for longer horizons are in `privrl.ope.pdis`, built on the
per-step quantities, noise and intervals here).

Estimators (h = 0..H-1 in code; a logged episode longer than the declared horizon H is
truncated to its first H steps, a shorter one contributes the steps it has):

* per-trajectory clipped weight   ρ̄_i = min(Π_{t<H} π(a_it|s_it)/μ_it, W)            (1)
  with μ_it the logged propensity (``behaviour_probs``) and W the PUBLIC weight clip;
* per-trajectory return           R_i = Σ_{t<H} γ^t r̄_it,  r̄ = clip(r, r_min, r_max)   (2)
* IPS (Precup et al. 2000, trajectory-wise):   V_IPS = (1/m) Σ_i ρ̄_i R_i                (3)
* SNIPS (Swaminathan & Joachims 2015):         V_SN = Σ_i ρ̄_i R_i / Σ_i ρ̄_i              (4)
* DR (Dudík et al. 2011, eq. (2); one control variate on the first step):
      V_DR = (1/m) Σ_i [ Σ_a π(a|s_i0) q̂(s_i0, a) + ρ̄_i (R_i − q̂(s_i0, a_i0)) ]          (5)
  q̂ is a PUBLIC model of the (truncated, discounted) return after taking a in the first
  state s: for a bandit log (H = 1) it is the usual reward model; for H > 1 it is a
  control variate on the whole return, and (5) stays unbiased for any q̂ when no weight is
  clipped (E_μ[ρ q̂(s_0, a_0)] = E_s Σ_a π(a|s) q̂(s, a)). q̂ is a constant (``constant:C``,
  default the midpoint of the return range) or a table [S, A] / [A] given as a .npy file;
  it is clipped into the return range (public post-processing of a public model).

Privacy unit and relation: one trajectory (one row of a bandit log) under REPLACE-ONE
neighbours, so the number of trajectories m is public (read from the file's header).

Sensitivities (replace-one changes one summand; each summand lies in an interval fixed by
public parameters only, so the sum moves by at most that interval's width). With
B_H = Σ_{t<H} γ^t (H when γ = 1; a one-step log has B_1 = 1, never 1/(1−γ)) the return (2)
lies in [R_lo, R_hi] = [min(r_min, 0)·B_H, max(r_max, 0)·B_H] (episodes may end before H,
so 0 is inside), and ρ̄ ∈ [0, W]:

* IPS, SNIPS numerator: ρ̄_i R_i ∈ [W·R_lo, W·R_hi], so Δ = W (R_hi − R_lo);
* SNIPS denominator: ρ̄_i ∈ [0, W], so Δ = W;
* DR: summand ∈ [q_lo + W (R_lo − q_hi), q_hi + W (R_hi − q_lo)], so
  Δ = (q_hi − q_lo) + W (R_hi − R_lo + q_hi − q_lo);

where [q_lo, q_hi] is the range of the (clipped, public) q̂. Each sum is released once by
`privrl.privacy.mechanisms.gaussian_mechanism` (noise multiplier calibrated for all the
run's releases together, dp-accounting RDP) or `laplace_mechanism` (ε split equally).

Confidence interval: the estimate is (S + Z)/m with Z the privacy noise (variance known,
public) and S a sum of m i.i.d. summands, each in an interval of width Δ, so Var(summand) ≤
Δ²/4 (Popoviciu). The interval is value ± z_{1−α/2} √(Δ²/(4m) + Var(Z)/m²): the sampling
variance is BOUNDED PUBLICLY rather than estimated, so no budget is spent on it and nothing
data-dependent other than the released sums enters the interval; it is conservative (wide
when W is large). SNIPS combines a Bonferroni pair of such intervals for the two sums
(each at level 1 − α/2) into an interval for their ratio. Every interval is intersected
with the return range [R_lo, R_hi], which holds every policy's value (an interval wholly
outside it becomes its nearest end); the IPS and DR point
estimates are left unclipped (unbiased), so at very small m or ε they may fall outside
their interval. The intervals cover the clipped
estimand E[ρ̄R] (IPS, DR) or E[ρ̄R]/E[ρ̄] (SNIPS), which is the target policy's value when no
weight exceeds W; the clipping bias is not in the interval.

Option ``interval="bhatia-davis"``: the summand's interval [a, b] is known (public), so
Var(summand) ≤ (b − μ)(μ − a) (Bhatia & Davis 2000), with μ the summand's mean — far below
Δ²/4 when μ sits near an end of [a, b], as for rare rewards (click rates of 0.4% with W = 20:
√(W μ) ≈ 0.28 against Δ/2 = 10). The interval is the set of μ the released mean does not
reject, {μ ∈ [a, b] : (μ̂ − μ)² ≤ z² ((b − μ)(μ − a)/m + Var(Z)/m²)} (a score interval, as
Wilson's for a proportion): the roots of a quadratic in μ. It is post-processing of the
released sum with public quantities (no budget, nothing else published), always inside the
Popoviciu interval, and, like it, relies on the normal approximation of the sum.

Option ``interval="auto"`` (the estimators' configs' default) chooses between the two from
public facts only, by what they guarantee whatever the data. Every clipped weight has
E_μ[min(ρ, W)] ≤ E_μ[ρ] ≤ 1 (ρ's mean under μ is the target's probability of the logged
support), so each summand's MEAN lies in the summand's interval evaluated at min(W, 1)
instead of W — e.g. [R_lo, R_hi] for the IPS summand, whose support is [W·R_lo, W·R_hi];
[0, 1] for the SNIPS denominator (support [0, W]). Over that public mean range M the
Bhatia–Davis bound is at most v* = max_{μ∈M} (b − μ)(μ − a), attained at the point of M
nearest the support's centre (a + b)/2; G = (Δ²/4) / v* ≥ 1 is the variance factor the
public bounds guarantee. "auto" takes Bhatia–Davis when G > 1 for some released sum (with
rewards in [0, 1]: whenever W > 2; G ≈ W/4 for large W) and Popoviciu when the bounds allow
a mean at the support's centre (G = 1: e.g. a return range symmetric about 0), where the
score interval guarantees nothing narrower. Either choice is valid: the Bhatia–Davis
interval never uses M (it holds for any mean in [a, b]), and it is never wider than the
Popoviciu one. The choice, its reason and G are stated in the report and the metrics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy import stats

from privrl.config import ConfigError
from privrl.ope.targets import IMPORT_OBSERVATION_SPACE, TargetPolicy, load_target_policy
from privrl.privacy.noise import NoiseSource
from privrl.privacy.release import Release
from privrl.privacy.units import NeighbourRelation, PrivacyUnit

__all__ = [
    "INTERVALS",
    "INTERVAL_CHOICES",
    "RELATION",
    "UNIT",
    "Bounds",
    "Estimate",
    "IntervalPlan",
    "NoiseSpec",
    "RewardModel",
    "Steps",
    "TargetPolicy",
    "Terms",
    "dr",
    "dr_sensitivity",
    "interval_plan",
    "ips",
    "ips_sensitivity",
    "load_reward_model",
    "load_target_policy",
    "mean_estimate",
    "noise_spec",
    "planned_releases",
    "ratio_estimate",
    "snips",
    "snips_sensitivities",
    "steps",
    "table_reward_model",
    "terms",
]

UNIT = PrivacyUnit.TRAJECTORY
RELATION = NeighbourRelation.REPLACE_ONE

Estimator = Literal["ips", "snips", "dr", "pdis", "wpdis"]
Mechanism = Literal["gaussian", "laplace"]
Interval = Literal["popoviciu", "bhatia-davis"]
IntervalChoice = Literal["auto", "popoviciu", "bhatia-davis"]
INTERVALS: tuple[str, ...] = ("popoviciu", "bhatia-davis")
INTERVAL_CHOICES: tuple[str, ...] = ("auto", *INTERVALS)
MEAN_SUMS = ("ips", "pdis")  # one sum divided by m
RATIO_SUMS = ("snips", "wpdis")  # a numerator over a denominator of clipped weights


# ------------------------------------------------------------------------ public bounds


@dataclass(frozen=True)
class Bounds:
    """The public quantities every sensitivity is derived from.

    Attributes:
        weight_clip: W, the bound the trajectory weight ρ is clipped at (1).
        reward_range: (r_min, r_max); every reward is clipped into it (2).
        horizon: H, the number of steps of an episode that count (longer ones are truncated).
        gamma: γ in [0, 1] (γ = 1 is fine: H is finite).
    """

    weight_clip: float
    reward_range: tuple[float, float]
    horizon: int
    gamma: float

    def __post_init__(self) -> None:
        W, (lo, hi) = float(self.weight_clip), self.reward_range
        if not (math.isfinite(W) and W > 0):
            raise ValueError(f"the weight clip W must be a finite number > 0, got {W}")
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"the reward range must be finite with r_min < r_max, got {lo, hi}")
        if int(self.horizon) < 1:
            raise ValueError(f"the horizon H must be >= 1, got {self.horizon}")
        if not 0.0 <= float(self.gamma) <= 1.0:
            raise ValueError(f"γ must be in [0, 1], got {self.gamma}")

    @property
    def discount_mass(self) -> float:
        """B_H = Σ_{t<H} γ^t (H when γ = 1)."""
        g, H = float(self.gamma), int(self.horizon)
        return float(H) if g == 1.0 else (1.0 - g**H) / (1.0 - g)

    @property
    def return_range(self) -> tuple[float, float]:
        """[R_lo, R_hi] holding every truncated return (2); 0 is inside (short episodes)."""
        lo, hi = self.reward_range
        B = self.discount_mass
        return min(lo, 0.0) * B, max(hi, 0.0) * B


def ips_sensitivity(bounds: Bounds) -> float:
    """Replace-one sensitivity of Σ ρ̄_i R_i: W (R_hi − R_lo)."""
    lo, hi = bounds.return_range
    return float(bounds.weight_clip) * (hi - lo)


def snips_sensitivities(bounds: Bounds) -> tuple[float, float]:
    """Replace-one sensitivities of (Σ ρ̄_i R_i, Σ ρ̄_i): (W (R_hi − R_lo), W)."""
    return ips_sensitivity(bounds), float(bounds.weight_clip)


def dr_sensitivity(bounds: Bounds, q_range: tuple[float, float]) -> float:
    """Replace-one sensitivity of the DR sum (5): the width of the summand's interval,
    (q_hi − q_lo) + W (R_hi − R_lo + q_hi − q_lo), for q̂ in [q_lo, q_hi] ⊆ [R_lo, R_hi]."""
    lo, hi = bounds.return_range
    q_lo, q_hi = q_range
    if not (lo <= q_lo <= q_hi <= hi):
        raise ValueError(f"q̂'s range {q_range} must lie in the return range {(lo, hi)}")
    W = float(bounds.weight_clip)
    return (q_hi - q_lo) + W * (hi - lo + q_hi - q_lo)


# ---------------------------------------------------- tables (target policies: privrl.ope.targets)


def _state_index(obs: np.ndarray, start: int) -> np.ndarray:
    return np.asarray(obs).reshape(len(obs), -1)[:, 0].astype(np.int64) - int(start)


def _table(path: Path, what: str, A: int, n_states: int | None) -> np.ndarray:
    from privrl.data.files import read_npy

    return _check_q_table(read_npy(path, what), f"{what} {path}", A, n_states)


def _check_q_table(table: Any, where: str, A: int, n_states: int | None) -> np.ndarray:
    """A q̂ table as float64 [S, A] or [A], checked against the public spaces (`where` names
    it in errors)."""
    try:
        table = np.asarray(table, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: not a numeric array") from None
    if table.ndim == 1:
        if table.shape != (A,):
            raise ValueError(f"{where}: a context-free table must have shape ({A},)")
    elif table.ndim == 2:
        if n_states is None:
            raise ValueError(
                f"{where} is a per-state table [S, A], but the dataset's observation "
                "space is not a public Discrete space; re-import with "
                f"{IMPORT_OBSERVATION_SPACE} discrete:S, or give a context-free table [A]"
            )
        if table.shape != (n_states, A):
            raise ValueError(
                f"{where}: shape {table.shape} does not match the dataset's spaces "
                f"(S, A) = ({n_states}, {A})"
            )
    else:
        raise ValueError(f"{where}: shape {table.shape}; give [S, A] or [A]")
    if not np.all(np.isfinite(table)):
        raise ValueError(f"{where} holds NaN or infinite values")
    return table


def _discrete(space: Any) -> tuple[int, int] | None:
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return int(space.n), int(space.start)
    return None


@dataclass(frozen=True)
class RewardModel:
    """DR's public model q̂(s, a), clipped into the return range: `values(obs) -> [n, A]`."""

    spec: str
    q_range: tuple[float, float]
    fn: Callable[[np.ndarray], np.ndarray]

    def values(self, obs: np.ndarray) -> np.ndarray:
        return self.fn(obs)


def load_reward_model(
    spec: str, bounds: Bounds, action_space: Any, observation_space: Any
) -> RewardModel:
    """q̂ from its public spec: ``midpoint`` (the constant (R_lo + R_hi)/2), ``constant:C``
    or a ``FILE.npy`` table [S, A] / [A]; clipped into the return range."""
    lo, hi = bounds.return_range
    act = _discrete(action_space)
    if act is None:
        raise ValueError("DR needs a Discrete action space in the dataset's metadata")
    A = act[0]
    if spec == "midpoint" or spec.startswith("constant:"):
        if spec == "midpoint":
            c = 0.5 * (lo + hi)
        else:
            try:
                c = float(spec.partition(":")[2])
            except ValueError:
                raise ConfigError("reward_model", f"{spec!r}: C must be a number") from None
            if not math.isfinite(c):
                raise ConfigError("reward_model", f"{spec!r}: C must be finite")
        c = min(max(c, lo), hi)
        return RewardModel(spec, (c, c), lambda obs: np.full((len(obs), A), c))
    if spec.endswith(".npy"):
        obs_d = _discrete(observation_space)
        table = _table(Path(spec), "`reward_model`", A, None if obs_d is None else obs_d[0])
        return _table_model(spec, table, bounds, obs_d)
    raise ConfigError(
        "reward_model",
        f"{spec!r} is not understood; give midpoint, constant:C or FILE.npy ([S, A] or [A])",
    )


def table_reward_model(
    table: Any,
    bounds: Bounds,
    action_space: Any,
    observation_space: Any,
    *,
    spec: str = "table",
    q_range: tuple[float, float] | None = None,
) -> RewardModel:
    """q̂ from a table [S, A] / [A] in memory, clipped into the return range. Its range
    [q_lo, q_hi] (which enters DR's sensitivity) is the clipped table's own when the table
    is public; pass `q_range` to declare it instead (the table is then clipped into it), as
    for per-row model outputs on private contexts, whose range must not be read from them."""
    act = _discrete(action_space)
    if act is None:
        raise ValueError("DR needs a Discrete action space in the dataset's metadata")
    obs_d = _discrete(observation_space)
    where = f"reward model {spec}"
    table = _check_q_table(table, where, act[0], None if obs_d is None else obs_d[0])
    if q_range is not None:
        lo, hi = bounds.return_range
        q_lo, q_hi = float(q_range[0]), float(q_range[1])
        if not (lo <= q_lo <= q_hi <= hi):
            raise ValueError(
                f"the declared q̂ range {(q_lo, q_hi)} must lie in the return range {(lo, hi)}"
            )
        table = np.clip(table, q_lo, q_hi)
        return _table_model(spec, table, bounds, obs_d, q_range=(q_lo, q_hi))
    return _table_model(spec, table, bounds, obs_d)


def _table_model(
    spec: str,
    table: np.ndarray,
    bounds: Bounds,
    obs_d: tuple[int, int] | None,
    *,
    q_range: tuple[float, float] | None = None,
) -> RewardModel:
    table = np.clip(table, *bounds.return_range)
    if q_range is None:
        q_range = (float(table.min()), float(table.max()))
    A = table.shape[-1]
    if table.ndim == 1:
        return RewardModel(spec, q_range, lambda obs: np.broadcast_to(table, (len(obs), A)))
    assert obs_d is not None
    start = obs_d[1]
    return RewardModel(spec, q_range, lambda obs: table[_state_index(obs, start)])


# ------------------------------------------------------------------------ per-trajectory terms


@dataclass(frozen=True)
class Terms:
    """Per-trajectory quantities (private; never published): ρ̄_i (1), R_i (2), for DR the
    first step's Σ_a π q̂ and q̂(s_0, a_0), and for PDIS / WPDIS the per-decision weighted
    return Σ_t γ^t w̄_it r̄_it (`privrl.ope.pdis.terms`)."""

    weights: np.ndarray
    returns: np.ndarray
    baseline: np.ndarray | None = None
    q_taken: np.ndarray | None = None
    per_decision: np.ndarray | None = None

    @property
    def m(self) -> int:
        return int(self.weights.shape[0])


@dataclass(frozen=True)
class Steps:
    """The kept steps (t < H) of every trajectory, vectorised over transitions (private;
    never published): episode index, step, log(π/μ) of the logged action, the discounted
    clipped reward γ^t r̄; `m` trajectories."""

    m: int
    episode: np.ndarray
    step: np.ndarray
    log_ratio: np.ndarray
    discounted_reward: np.ndarray


def steps(data: Any, policy: TargetPolicy, bounds: Bounds, *, allow_column: bool = True) -> Steps:
    """The per-step quantities every importance estimator is built from: steps t ≥ H
    dropped (the declared horizon, never the data's), rewards clipped to the declared range,
    log ratios log π(a_t|s_t) − log μ_t (−∞ where π gives the action probability 0)."""
    if data.behaviour_probs is None:  # a schema error (the field is absent from the file)
        raise ValueError(
            "the dataset has no 'behaviour_probs' field: importance sampling needs the logged "
            "propensities μ(a|s) (import them with privrl data import --columns "
            "...,behaviour_prob=COLUMN)"
        )
    t = np.asarray(data.transition_steps)
    ep = np.asarray(data.transition_episode_index)
    keep = t < int(bounds.horizon)
    obs_rows = np.arange(data.n_transitions) + ep  # observation row of each transition
    obs = np.asarray(data.observations)[obs_rows[keep]]
    actions = np.asarray(data.actions)[keep].reshape(-1).astype(np.int64)
    ep_k, t_k = ep[keep], t[keep]
    action_space = getattr(data.metadata, "action_space", None)
    a_idx = actions - int(getattr(action_space, "start", 0))
    if getattr(policy, "column", None) is not None:  # column:NAME, π(a_t|s_t) per row
        if not allow_column or policy.column not in data.extra_columns:
            raise ConfigError(  # schema errors: the option and the file's structure
                "target_policy",
                f"{policy.spec} needs the dataset's kept column "
                f"{policy.column!r} and no reward model",
            )
        pi_taken = np.clip(data.extra_columns[policy.column][keep], 0.0, 1.0)
    else:
        pi = policy.probs(obs, t_k)  # t_k: the step h, for a time-indexed π [H, S, A]
        pi_taken = pi[np.arange(len(a_idx)), a_idx]
    mu = np.asarray(data.behaviour_probs, dtype=np.float64)[keep]
    with np.errstate(divide="ignore"):
        log_w = np.log(pi_taken) - np.log(mu)
    r = np.clip(np.asarray(data.rewards, dtype=np.float64)[keep], *bounds.reward_range)
    disc = np.power(float(bounds.gamma), t_k.astype(np.float64))  # γ^0 = 1 also when γ = 0
    return Steps(int(data.n_episodes), ep_k, t_k, log_w, disc * r)


def terms(
    data: Any,
    policy: TargetPolicy,
    bounds: Bounds,
    reward_model: RewardModel | None = None,
) -> Terms:
    """ρ̄_i and R_i of every trajectory (vectorised over transitions), steps t ≥ H dropped,
    rewards clipped to the declared range, weights clipped at W."""
    st = steps(data, policy, bounds, allow_column=reward_model is None)
    m = st.m
    # (1) in log space: Π w may under/overflow; clip at log W before exponentiating.
    log_rho = np.bincount(st.episode, weights=st.log_ratio, minlength=m)
    weights = np.exp(np.minimum(log_rho, math.log(float(bounds.weight_clip))))
    returns = np.bincount(st.episode, weights=st.discounted_reward, minlength=m)  # (2)
    baseline = q_taken = None
    if reward_model is not None:
        ep = np.asarray(data.transition_episode_index)
        offsets = np.asarray(data.episode_offsets)
        start = int(getattr(getattr(data.metadata, "action_space", None), "start", 0))
        first = offsets[:-1][offsets[:-1] < offsets[1:]]  # first transition of each episode
        ep_first = ep[first]
        q = reward_model.values(np.asarray(data.observations)[first + ep_first])
        pi0 = policy.probs(np.asarray(data.observations)[first + ep_first], np.zeros_like(first))
        baseline = np.zeros(m)
        q_taken = np.zeros(m)
        baseline[ep_first] = np.sum(pi0 * q, axis=1)
        a0 = np.asarray(data.actions)[first].reshape(-1).astype(np.int64) - start
        q_taken[ep_first] = q[np.arange(len(first)), a0]
    return Terms(weights=weights, returns=returns, baseline=baseline, q_taken=q_taken)


# ------------------------------------------------------------------------ noise and releases


@dataclass(frozen=True)
class NoiseSpec:
    """How each sum is privatised: Gaussian with noise multiplier z (σ = z·Δ) or Laplace with
    ε per release (b = Δ/ε); `releases` is the number of sums the estimator releases."""

    mechanism: Mechanism
    releases: int
    noise_multiplier: float | None = None
    epsilon_each: float | None = None

    def variance(self, sensitivity: float) -> float:
        """Variance of the noise added to a sum of this sensitivity (public)."""
        if self.mechanism == "gaussian":
            assert self.noise_multiplier is not None
            return (self.noise_multiplier * sensitivity) ** 2
        assert self.epsilon_each is not None
        return 2.0 * (sensitivity / self.epsilon_each) ** 2


N_RELEASES: dict[str, int] = {"ips": 1, "snips": 2, "dr": 1, "pdis": 1, "wpdis": 2}


def noise_spec(
    estimator: Estimator, mechanism: Mechanism, epsilon: float, delta: float
) -> NoiseSpec:
    """Calibrate the noise for (ε, δ) over all of the estimator's releases: Gaussian — the
    smallest z whose k-fold Gaussian composition is (ε, δ)-DP under replace-one
    (dp-accounting RDP); Laplace — about ε/k each (basic composition), lowered until the
    report's accountant certifies ε."""
    k = N_RELEASES[estimator]
    if mechanism == "gaussian":
        from privrl.privacy.accounting import calibrate_noise_multiplier

        z = calibrate_noise_multiplier(epsilon, delta, k, sampling="none", relation=RELATION)
        return NoiseSpec("gaussian", k, noise_multiplier=float(z))
    return NoiseSpec("laplace", k, epsilon_each=_laplace_epsilon_each(epsilon, delta, k))


def _laplace_epsilon_each(epsilon: float, delta: float, k: int) -> float:
    """The largest ε_each ≤ ε/k whose k Laplace releases the report's accountant (RDP at δ,
    replace-one) certifies at ≤ ε. Basic composition gives ε/k, but the RDP conversion the
    report uses is slightly looser for a single Laplace release (ε = 1 reads as 1.003 at
    δ = 1e-5), and the report — what the ledger records — must not exceed the target."""
    from dp_accounting import dp_event

    from privrl.privacy.accounting import epsilon as account

    def eps_at(e_each: float) -> float:
        event = dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(1.0 / e_each), k)
        return float(account(event, delta, relation=RELATION))

    hi = float(epsilon) / k
    if eps_at(hi) <= epsilon:
        return hi
    lo = hi / 2.0
    while eps_at(lo) > epsilon:
        lo /= 2.0
    for _ in range(40):  # bisection: eps_at(lo) <= target < eps_at(hi)
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps_at(mid) <= epsilon else (lo, mid)
    return lo


def _release(
    value: float, sensitivity: float, noise: NoiseSpec, rng: np.random.Generator, name: str
) -> tuple[float, Release]:
    from privrl.privacy.mechanisms import gaussian_mechanism, laplace_mechanism

    if noise.mechanism == "gaussian":
        out, release = gaussian_mechanism(
            value,
            sensitivity=sensitivity,
            noise_multiplier=noise.noise_multiplier,
            rng=rng,
            name=name,
        )
    else:
        out, release = laplace_mechanism(
            value, sensitivity=sensitivity, epsilon=noise.epsilon_each, rng=rng, name=name
        )
    return float(out), release


def _sums(
    estimator: Estimator, bounds: Bounds, q_range: tuple[float, float] | None
) -> list[tuple[str, float]]:
    """(name, sensitivity) of each sum the estimator releases, in order (PDIS and WPDIS:
    `privrl.ope.pdis`, the same sensitivities as IPS and SNIPS)."""
    if estimator == "ips":
        return [("IPS sum Σ ρ̄_i R_i", ips_sensitivity(bounds))]
    if estimator == "pdis":
        return [("PDIS sum Σ_i Σ_t γ^t w̄_it r̄_it", ips_sensitivity(bounds))]
    if estimator == "snips":
        d_num, d_den = snips_sensitivities(bounds)
        return [("SNIPS numerator Σ ρ̄_i R_i", d_num), ("SNIPS denominator Σ ρ̄_i", d_den)]
    if estimator == "wpdis":
        d_num, d_den = snips_sensitivities(bounds)
        return [
            ("WPDIS numerator Σ_i Σ_t γ^t w̄_it r̄_it", d_num),
            ("WPDIS denominator Σ_i w̄_i,H−1", d_den),
        ]
    assert q_range is not None
    return [("DR sum Σ [Σ_a π q̂ + ρ̄_i (R_i − q̂_i)]", dr_sensitivity(bounds, q_range))]


def planned_releases(
    estimator: Estimator,
    bounds: Bounds,
    noise: NoiseSpec,
    q_range: tuple[float, float] | None = None,
) -> list[Release]:
    """The releases a run will make, from public facts only (for the plan the ledger
    checks). Made by the same mechanism calls as the run, on the value 0 with a throwaway
    generator, so the records are identical to the run's; the noisy zeros are discarded."""
    rng = NoiseSource.secure().generator("planning")
    return [_release(0.0, s, noise, rng, name)[1] for name, s in _sums(estimator, bounds, q_range)]


# ------------------------------------------------------------------------ estimators


@dataclass
class Estimate:
    """A value estimate with its confidence interval (see the module docstring) and the
    releases made. `noise_std` is public (a function of ε, δ and the sensitivities);
    `interval_method` is the variance bound the interval used, `interval_reason` why."""

    value: float
    ci_low: float
    ci_high: float
    level: float
    releases: list[Release] = field(default_factory=list)
    sensitivities: list[float] = field(default_factory=list)
    noise_std: list[float] = field(default_factory=list)
    interval_method: str = "popoviciu"
    interval_reason: str = ""


def _z(level: float) -> float:
    return float(stats.norm.ppf(0.5 + level / 2.0))


def _mean_interval(
    total: float,
    sensitivity: float,
    m: int,
    noise_var: float,
    level: float,
    support: tuple[float, float] | None = None,
) -> tuple[float, float, float]:
    """(mean, low, high) of (S + Z)/m: sampling variance bounded by Δ²/(4m) (Popoviciu), or,
    given the summand's public `support` [a, b], by (b − μ)(μ − a)/m (Bhatia–Davis; the
    score interval of the module docstring)."""
    mean = total / m
    z = _z(level)
    sd = math.sqrt(sensitivity**2 / (4.0 * m) + noise_var / m**2)
    low, high = mean - z * sd, mean + z * sd
    if support is None:
        return mean, low, high
    a, b = support
    # (μ̂ − μ)² ≤ k (b − μ)(μ − a) + z² v/m², k = z²/m:  A μ² − B μ + C ≤ 0
    k = z * z / m
    A = 1.0 + k
    B = 2.0 * mean + k * (a + b)
    C = mean * mean + k * a * b - z * z * noise_var / m**2
    disc = B * B - 4.0 * A * C
    if disc < 0:  # no μ in the model fits the released mean: keep the Popoviciu interval
        return mean, low, high
    root = math.sqrt(disc)
    # the score set lies inside the Popoviciu interval (its variance bound is the larger)
    return mean, max((B - root) / (2.0 * A), low), min((B + root) / (2.0 * A), high)


def _supports(
    estimator: Estimator, bounds: Bounds, q_range: tuple[float, float] | None
) -> list[tuple[float, float]]:
    """The public interval [a, b] holding each released sum's summand (module docstring)."""
    lo, hi = bounds.return_range
    W = float(bounds.weight_clip)
    if estimator in MEAN_SUMS:
        return [(W * lo, W * hi)]
    if estimator in RATIO_SUMS:
        return [(W * lo, W * hi), (0.0, W)]
    assert q_range is not None
    q_lo, q_hi = q_range
    return [(q_lo + W * (lo - q_hi), q_hi + W * (hi - q_lo))]


def _mean_ranges(
    estimator: Estimator, bounds: Bounds, q_range: tuple[float, float] | None
) -> list[tuple[float, float]]:
    """The public range M of each summand's mean: its support at min(W, 1), as E ρ̄ ≤ 1."""
    return _supports(estimator, replace(bounds, weight_clip=min(bounds.weight_clip, 1.0)), q_range)


def _guaranteed_gain(support: tuple[float, float], means: tuple[float, float]) -> float:
    """G = (Δ²/4) / max_{μ∈M} (b − μ)(μ − a): Popoviciu's variance bound over the largest
    Bhatia–Davis bound the public mean range M allows (module docstring)."""
    a, b = support
    mu = min(max(0.5 * (a + b), means[0]), means[1])  # the point of M nearest the centre
    worst = (b - mu) * (mu - a)
    return math.inf if worst <= 0 else (b - a) ** 2 / 4.0 / worst


@dataclass(frozen=True)
class IntervalPlan:
    """Which variance bound the interval uses and why (public): `method` is popoviciu or
    bhatia-davis, `gains` the factor G the public bounds guarantee for each released sum."""

    method: Interval
    reason: str
    gains: tuple[float, ...]


def interval_plan(
    interval: IntervalChoice,
    estimator: Estimator,
    bounds: Bounds,
    q_range: tuple[float, float] | None = None,
) -> IntervalPlan:
    """Resolve ``auto`` (module docstring) from the public bounds; keep an explicit choice."""
    if interval not in INTERVAL_CHOICES:
        raise ValueError(f"interval must be one of {', '.join(INTERVAL_CHOICES)}, got {interval!r}")
    pairs = zip(
        _supports(estimator, bounds, q_range), _mean_ranges(estimator, bounds, q_range), strict=True
    )
    gains = tuple(_guaranteed_gain(s, m) for s, m in pairs)
    shown = ", ".join("∞" if math.isinf(g) else f"{g:.3g}" for g in gains)
    if interval != "auto":
        return IntervalPlan(interval, f"{interval} chosen explicitly", gains)  # type: ignore[arg-type]
    if max(gains) > 1.0 + 1e-12:
        return IntervalPlan(
            "bhatia-davis",
            f"auto: W and the reward range guarantee a variance bound below Popoviciu's by a "
            f"factor G = {shown} (per released sum) whatever the data: each summand's mean "
            "lies in its support at W = 1, as E ρ̄ ≤ 1",
            gains,
        )
    return IntervalPlan(
        "popoviciu",
        "auto: the public bounds allow a summand mean at the centre of its support, where "
        "Bhatia–Davis guarantees nothing narrower; Popoviciu's worst-case bound is used",
        gains,
    )


def _support(
    interval: IntervalChoice,
    estimator: Estimator,
    bounds: Bounds,
    q_range: tuple[float, float] | None,
) -> tuple[list[tuple[float, float] | None], IntervalPlan]:
    chosen = interval_plan(interval, estimator, bounds, q_range)
    supports = _supports(estimator, bounds, q_range)
    if chosen.method == "bhatia-davis":
        return list(supports), chosen
    return [None] * len(supports), chosen


def _within(low: float, high: float, bounds: Bounds) -> tuple[float, float]:
    """The interval intersected with the return range, which holds every policy's value; an
    interval wholly outside the range (noise or clipping can put it there) becomes the
    range's nearest end, so that low ≤ high always."""
    lo_r, hi_r = bounds.return_range
    return min(max(low, lo_r), hi_r), max(min(high, hi_r), lo_r)


def _private_sums(
    estimator: Estimator,
    values: list[float],
    bounds: Bounds,
    noise: NoiseSpec | None,
    rng: np.random.Generator | None,
    q_range: tuple[float, float] | None,
) -> tuple[list[float], list[Release], list[float], list[float]]:
    sums = _sums(estimator, bounds, q_range)
    if noise is None:  # the non-private estimator: the same code with privacy off
        return values, [], [s for _, s in sums], [0.0] * len(sums)
    if rng is None:
        raise ValueError("a private estimate needs rng (a numpy.random.Generator)")
    out, releases, variances = [], [], []
    for value, (name, s) in zip(values, sums, strict=True):
        noisy, release = _release(value, s, noise, rng, name)
        out.append(noisy)
        releases.append(release)
        variances.append(noise.variance(s))
    return out, releases, [s for _, s in sums], variances


def mean_estimate(
    estimator: Estimator,
    t: Terms,
    bounds: Bounds,
    summands: np.ndarray,
    *,
    q_range: tuple[float, float] | None = None,
    noise: NoiseSpec | None = None,
    rng: np.random.Generator | None = None,
    level: float = 0.95,
    interval: IntervalChoice = "popoviciu",
) -> Estimate:
    """One (noisy) sum of the per-trajectory `summands` divided by the public m, with its
    interval: IPS (3), DR (5) and PDIS (`privrl.ope.pdis`)."""
    (support,), chosen = _support(interval, estimator, bounds, q_range)
    (total,), releases, (sens,), (var,) = _private_sums(
        estimator, [float(np.sum(summands))], bounds, noise, rng, q_range
    )
    value, lo, hi = _mean_interval(total, sens, t.m, var, level, support)
    return Estimate(
        value, *_within(lo, hi, bounds), level, releases, [sens], [math.sqrt(var)],
        chosen.method, chosen.reason,
    )  # fmt: skip


def ips(
    t: Terms,
    bounds: Bounds,
    *,
    noise: NoiseSpec | None = None,
    rng: np.random.Generator | None = None,
    level: float = 0.95,
    interval: IntervalChoice = "popoviciu",
) -> Estimate:
    """(Private) IPS (3): one release of Σ ρ̄_i R_i, divided by the public m."""
    common: dict[str, Any] = dict(noise=noise, rng=rng, level=level, interval=interval)
    return mean_estimate("ips", t, bounds, t.weights * t.returns, **common)


def dr(
    t: Terms,
    bounds: Bounds,
    q_range: tuple[float, float],
    *,
    noise: NoiseSpec | None = None,
    rng: np.random.Generator | None = None,
    level: float = 0.95,
    interval: IntervalChoice = "popoviciu",
) -> Estimate:
    """(Private) DR (5): one release of Σ [b_i + ρ̄_i (R_i − q̂_i)], divided by m."""
    if t.baseline is None or t.q_taken is None:
        raise ValueError("DR needs terms computed with a reward model")
    summand = t.baseline + t.weights * (t.returns - t.q_taken)
    common: dict[str, Any] = dict(noise=noise, rng=rng, level=level, interval=interval)
    return mean_estimate("dr", t, bounds, summand, q_range=q_range, **common)


def ratio_estimate(
    estimator: Estimator,
    t: Terms,
    bounds: Bounds,
    numerators: np.ndarray,
    *,
    noise: NoiseSpec | None = None,
    rng: np.random.Generator | None = None,
    level: float = 0.95,
    interval: IntervalChoice = "popoviciu",
) -> Estimate:
    """Σ numerators / Σ ρ̄_i from two (noisy) sums: SNIPS (4) and WPDIS (`privrl.ope.pdis`).

    Post-processing of the two noisy sums only: the ratio is clipped into the public return
    range; a noisy denominator ≤ 0 gives the range's midpoint. Interval: each sum's mean gets
    a Popoviciu- (or Bhatia–Davis-) bounded interval at level 1 − α/2 (Bonferroni); the
    ratio's interval is the range of N/D over that box (the whole return range when D's
    interval reaches 0).
    """
    lo_r, hi_r = bounds.return_range
    (num_support, den_support), chosen = _support(interval, estimator, bounds, None)
    (num, den), releases, sens, variances = _private_sums(
        estimator,
        [float(np.sum(numerators)), float(np.sum(t.weights))],
        bounds,
        noise,
        rng,
        None,
    )
    value = num / den if den > 0 else 0.5 * (lo_r + hi_r)
    value = min(max(value, lo_r), hi_r)
    inner = 1.0 - (1.0 - level) / 2.0
    _, n_lo, n_hi = _mean_interval(num, sens[0], t.m, variances[0], inner, num_support)
    _, d_lo, d_hi = _mean_interval(den, sens[1], t.m, variances[1], inner, den_support)
    if d_lo <= 0:
        low, high = lo_r, hi_r
    else:
        corners = [n_lo / d_lo, n_lo / d_hi, n_hi / d_lo, n_hi / d_hi]
        low, high = _within(min(corners), max(corners), bounds)
    return Estimate(
        value, low, high, level, releases, sens, [math.sqrt(v) for v in variances],
        chosen.method, chosen.reason,
    )  # fmt: skip


def snips(
    t: Terms,
    bounds: Bounds,
    *,
    noise: NoiseSpec | None = None,
    rng: np.random.Generator | None = None,
    level: float = 0.95,
    interval: IntervalChoice = "popoviciu",
) -> Estimate:
    """(Private) SNIPS (4): the ratio of two released sums, Σ ρ̄_i R_i and Σ ρ̄_i, each with
    its own sensitivity (`ratio_estimate`)."""
    common: dict[str, Any] = dict(noise=noise, rng=rng, level=level, interval=interval)
    return ratio_estimate("snips", t, bounds, t.weights * t.returns, **common)
