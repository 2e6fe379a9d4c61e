"""SDP-PE: Shuffle Differentially Private Policy Elimination (Bai et al., "Secure
Reinforcement Learning via Shuffle Privacy Model", arXiv 2411.11647, 2024, Algorithms 1–3).
PE is the same code with the identity privatizer. Configs: `PEConfig`, `SDPPEConfig`.

Stages k = 1, 2, ... of size T^(k) = B·2^{k−1} (B ≥ H·S·A); a stage runs 3T episodes:

1. `crude_exploration` (Alg. 2) — for each layer h, one batch of T/H users: for every (s, a)
   the policy π_{h,s,a} = argmax_{π∈φ} V^π(1_{h,s,a}, P̃) (occupancy of (h, s, a) under the
   crude model, layers < h); each episode runs one of them, (s, a) uniform. The privatizer
   releases layer h's counts; tuples with ñ_h(s,a,s') ≤ c1·H²·ι + c2·H·E join the infrequent
   set F, and P̃_h is built on S ∪ {s†} (Definition 5: F's mass goes to the absorbing s†).
   π_mix = uniform mixture of all π_{h,s,a}.
2. `fine_exploration` (Alg. 3) — π0 = argmin over mixtures of φ of
   max_{π̂∈φ} Σ_{h,s,a} V^{π̂}(1_{h,s,a}, P̃)/V^{π0}(1_{h,s,a}, P̃) (eq. 3), computed by
   Frank–Wolfe on max_D Σ_i log E_{π∼D}[x_i] (`coverage_design`; at its optimum the ratio is
   ≤ #coordinates, Zhang et al. 2022, Lemma 1). π0 and π_mix run T episodes each, one batch;
   the privatizer releases all counts and rewards; P̂ is built with the same F and
   r̂ = clip(r̃/ñ, 0, 1).
3. `eliminate` — V̂^π = V^π(r̂, P̂) for all π ∈ φ^k (one vectorised evaluation); keep π iff
   V̂^π + w(π) + b(π) ≥ max_{π'} (V̂^{π'} − w(π')) with the data-driven width
   w(π) = c·Σ_{h,s,a} d̂^π_h(s,a)·min(H − h, c1·√(S·Var·ι/ñ) + c2·(S·H·ι + H·S·E)/ñ),
   Var = Var_{P̂_h(·|s,a)}(V̂^π_{h+1}) + r̂(1 − r̂), and b(π) = Σ d̂^π_h(s,a)·P̂_h(s†|s,a)·(H−h−1),
   the absorbing model's value deficit (a departure from the paper, whose test has w only:
   the absorbing MDP underestimates every policy by up to the value lost in s†, Lemma 8;
   without b the optimal policy can be eliminated while F is large, e.g. in the first
   stages).

**Forgetting**: a stage estimates only from its own batches. Policy sets are deduplicated on
(h, s) unreachable from the start (`policy_set`). Mixtures are sampled once per episode, so
every episode runs one deterministic policy and the regret is exact. A batch's counts are drawn
from their exact law given the episodes' policies (`sample_counts`), not stepped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from privrl.arrays import FloatArray, IntArray
from privrl.config import ConfigError, check, option
from privrl.envs.tabular import TabularMDP, occupancy_measure, policy_evaluation
from privrl.online.common import (
    Counts,
    OnlineLearnerConfig,
    OnlineResult,
    Progress,
    check_at_least,
    check_choice,
    policy_set,
    policy_start_gaps,
    rollout_counts,
    sample_counts,
)
from privrl.online.privatizers import (
    IdentityPrivatizer,
    Privatizer,
    ShufflePrivatizer,
)
from privrl.privacy.limits import delta_problem
from privrl.privacy.shuffle import Calibration

__all__ = [
    "MAX_SHUFFLE_TRIALS",
    "FrankWolfeResult",
    "PEConfig",
    "SDPPEConfig",
    "absorbing_transitions",
    "check_shuffle_budget",
    "coverage_design",
    "crude_exploration",
    "eliminate",
    "fine_exploration",
    "make_shuffle_privatizer",
    "n_releases",
    "pe",
    "sdp_pe",
    "stage_schedule",
]


SIMULATIONS = ("counts", "episodes")  # how a batch's counts are made (`_Runner.run`)


@dataclass(frozen=True)
class PEConfig(OnlineLearnerConfig):
    """Policy elimination (PE): SDP-PE's code with raw counts, not private.

    Symbols (module docstring): K = `episodes`, β = `beta` (in ι = ln(2·H·S²·A·K0/β) and in a
    privatizer's E), c = `width_scale`, c1/c2 of the F threshold c1·H²·ι + c2·H·E =
    `threshold_c1`/`threshold_c2`, c1/c2 of the width = `width_c1`/`width_c2`, B =
    `base_batch` (default H·S·A, at least H·S·A), η = `fw_eta` (Frank–Wolfe stops at coverage
    ratio ≤ (1 + η)·#coordinates). Defaults are the theory's shapes with constant 1. The
    environment (S, A, H) is not a setting: it is what the learner is given.
    """

    system: ClassVar[str] = "pe"
    # The constants recorded as "config" in a run's config.json (the algorithm's constants).
    CONSTANTS: ClassVar[tuple[str, ...]] = (
        "base_batch",
        "beta",
        "threshold_c1",
        "threshold_c2",
        "width_scale",
        "width_c1",
        "width_c2",
        "fw_eta",
        "fw_max_iter",
        "max_policies",
    )

    width_scale: float = option(1.0, help="Elimination width scale c.")
    threshold_c1: float = option(1.0, help="F threshold: c1·H²·ι.")
    threshold_c2: float = option(1.0, help="F threshold: c2·H·E.")
    simulation: Literal["counts", "episodes"] = option(
        "counts",
        help="How the simulator makes a batch's visit counts: counts (drawn from their exact "
        "law, fast at 10⁸ episodes) or episodes (each user's episode stepped; the same law, "
        "slower; a user's own trajectory exists only here).",
        keyless_default=True,  # counts: what runs did before the option existed
    )
    # Further constants: config files and Python only (not command-line flags).
    base_batch: int | None = option(
        None, help="Base batch B (default H·S·A; at least H·S·A).", cli=False, keyless_default=True
    )
    width_c1: float = option(
        1.0, help="Width constant c1 of the variance term.", cli=False, keyless_default=True
    )
    width_c2: float = option(
        1.0, help="Width constant c2 of the lower-order term.", cli=False, keyless_default=True
    )
    fw_eta: float = option(
        0.1, help="Frank–Wolfe stops at ratio ≤ (1 + η)·d.", cli=False, keyless_default=True
    )
    fw_max_iter: int = option(
        20_000, help="Frank–Wolfe iteration cap.", cli=False, keyless_default=True
    )
    max_policies: int = option(
        1 << 18, help="Largest policy set φ¹ enumerated.", cli=False, keyless_default=True
    )

    def validate(self) -> None:
        check_choice(self, "simulation", SIMULATIONS)
        for key in ("width_scale", "threshold_c1", "threshold_c2", "width_c1", "width_c2"):
            check_at_least(self, key, 0)
        ok = math.isfinite(self.fw_eta) and self.fw_eta > 0
        check(ok, "fw_eta", f"must be a finite number > 0, got {self.fw_eta!r}")
        for key in ("fw_max_iter", "max_policies"):
            check(int(getattr(self, key)) >= 1, key, f"must be >= 1, got {getattr(self, key)}")
        if self.base_batch is not None:
            check(int(self.base_batch) >= 1, "base_batch", f"must be >= 1, got {self.base_batch}")
        super().validate()

    def batch(self, H: int, S: int, A: int) -> int:
        """B: `base_batch`, or H·S·A when unset; refused below H·S·A."""
        B = H * S * A if self.base_batch is None else int(self.base_batch)
        if B < H * S * A:
            raise ConfigError("base_batch", f"B = {B} must be >= H·S·A = {H * S * A}")
        return B


# SDP-PE's tight calibration is exact over Bin(N, p) with N ≈ λ = 50·ln(2/δ')/ε'² trials per
# counter (ε' = ε/(6H), δ' = δ/(6H)); its cost grows with N (λ ≈ 7e9, i.e. ε = 0.01 at H = 5,
# takes minutes and 0.2 GB; λ ≈ 7e11 does not finish). Refused above:
MAX_SHUFFLE_TRIALS = 1e10


def check_shuffle_budget(epsilon: float, delta: float, H: int) -> None:
    """Refuse an ε whose binomial noise is too large to calibrate at horizon H
    (`MAX_SHUFFLE_TRIALS`); the message names the least ε that can be."""
    from privrl.privacy.shuffle import theory_lambda

    eps_c, delta_c = epsilon / (6 * H), delta / (6 * H)
    lam = theory_lambda(eps_c, delta_c)
    # smallest ε with λ ≤ the cap: ε' = sqrt(50·ln(2/δ')/cap), ε = 6H·ε'
    least = 6 * H * math.sqrt(50.0 * math.log(2.0 / delta_c) / MAX_SHUFFLE_TRIALS)
    check(
        lam <= MAX_SHUFFLE_TRIALS,
        "epsilon",
        f"{epsilon:g} is too small for SDP-PE at H = {H}: each counter's binomial noise would "
        f"need ~{lam:.2g} trials (λ = 50·ln(2/δ')/ε'², ε' = ε/(6H)), more than the "
        f"{MAX_SHUFFLE_TRIALS:.0e} its calibration can handle; the least usable ε here is "
        f"{least:.3g}",
    )


@dataclass(frozen=True)
class SDPPEConfig(PEConfig):
    """SDP-PE: PE on shuffle-private counts, (ε, δ)-DP in the shuffle model for one user.

    Adds ε = `epsilon` and δ = `delta` (each counter of a batch gets ε' = ε/(6H), δ' = δ/(6H))
    and the binomial noise's `calibration` ("tight": the exact smallest binomial; "theory":
    λ = 50·ln(2/δ')/ε'²). The ε that the calibration can handle depends on H, so it is checked
    when the learner is planned for an environment (`check_shuffle_budget`).
    """

    system: ClassVar[str] = "sdp-pe"
    epsilon: float = option(..., "--epsilon", help="Privacy budget ε (1e-6 to 100).")
    delta: float = option(1e-5, help="Privacy δ in (0, 1).")
    calibration: Literal["tight", "theory"] = option(
        "tight", help="Binomial noise: tight (exact, default) or theory."
    )

    def validate(self) -> None:
        problem = delta_problem(self.delta)
        check(problem is None, "delta", problem or "")
        check_choice(self, "calibration", ("tight", "theory"))
        super().validate()


def stage_schedule(episodes: int, B: int) -> list[int]:
    """T^(k) = B·2^{k−1} for k = 1..K0, K0 the fewest stages whose 3·ΣT covers the episodes
    (the last stage is truncated when the episodes run out)."""
    out: list[int] = []
    used = 0
    while used < episodes:
        T = B * 2 ** len(out)
        out.append(T)
        used += 3 * T
    return out


def n_releases(episodes: int, B: int, H: int) -> int:
    """Batches privatised by a run: H crude batches and one fine batch per stage."""
    return len(stage_schedule(episodes, B)) * (H + 1)


# --------------------------------------------------------------------------------------------
# model pieces
# --------------------------------------------------------------------------------------------


def absorbing_transitions(
    n_sa: FloatArray, n_sas: FloatArray, F: npt.NDArray[np.bool_]
) -> FloatArray:
    """P̃_h on S ∪ {s†} (Definition 5) from one layer's counts ``n_sa [S, A]``,
    ``n_sas [S, A, S]`` and infrequent tuples ``F [S, A, S]``: P̃(s'|s,a) = ñ(s,a,s')/ñ(s,a)
    off F, the rest of the mass to s†; s† is absorbing. Returns ``[S+1, A, S+1]``."""
    S, A = n_sa.shape
    P = np.zeros((S + 1, A, S + 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(n_sa[..., None] > 0, n_sas / n_sa[..., None], 0.0)
    frac = np.where(F, 0.0, np.clip(frac, 0.0, 1.0))
    P[:S, :, :S] = frac
    P[:S, :, S] = np.maximum(0.0, 1.0 - frac.sum(axis=-1))
    P[S, :, S] = 1.0
    P[:S] /= P[:S].sum(axis=-1, keepdims=True)  # exact stochastic rows (rounding only)
    return P


def _extend(policies: IntArray) -> IntArray:
    """Policies on S ∪ {s†} (action 0 in s†, which is absorbing with zero reward)."""
    return np.concatenate([policies, np.zeros((*policies.shape[:-1], 1), dtype=policies.dtype)], -1)


@dataclass(frozen=True)
class FrankWolfeResult:
    """Mixture weights over the given rows, its coverage ratio max_π Σ_i x_π,i/E_D[x_i], the
    number of active coordinates d (bound: ratio ≤ d at the optimum) and iterations used."""

    weights: FloatArray
    ratio: float
    coordinates: int
    iterations: int


def _line_search(diff: FloatArray, m: FloatArray) -> float:
    """argmax_γ∈[0,1) Σ_i log(m_i + γ·diff_i): the root of the decreasing derivative."""
    lo, hi = 0.0, 1.0 - 1e-12
    if np.sum(diff / (m + hi * diff)) >= 0:
        return hi
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if np.sum(diff / (m + mid * diff)) > 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def coverage_design(
    X: FloatArray, *, eta: float = 0.1, max_iter: int = 20_000, tol: float = 1e-12
) -> FrankWolfeResult:
    """π0 of eq. (3): Frank–Wolfe on f(D) = Σ_i log(Σ_π D_π x_{π,i}) over mixtures D.

    ``X [N, n_coords]`` are the occupancies V^π(1_{h,s,a}, P̃). Coordinates no policy reaches
    (max ≤ tol) are dropped. ∂f/∂D_π = Σ_i x_{π,i}/E_D[x_i] is the coverage ratio of π; FW
    moves mass towards the worst-covered policy with an exact line search, until every ratio is
    ≤ (1 + η)·d (Kiefer–Wolfowitz-type optimality: the optimum has max ratio = d).
    Starts from the uniform mixture of the per-coordinate maximisers.
    """
    N = X.shape[0]
    keep = X.max(axis=0) > tol
    d = int(keep.sum())
    if d == 0:
        return FrankWolfeResult(np.full(N, 1.0 / N), 0.0, 0, 0)
    Xa = np.ascontiguousarray(X[:, keep])
    support = np.unique(Xa.argmax(axis=0))
    w = np.zeros(N)
    w[support] = 1.0 / support.size
    m = w @ Xa
    ratio = math.inf
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007
        g = Xa @ (1.0 / m)
        j = int(np.argmax(g))
        ratio = float(g[j])
        if ratio <= (1.0 + eta) * d:
            break
        gamma = _line_search(Xa[j] - m, m)
        w *= 1.0 - gamma
        w[j] += gamma
        m = (1.0 - gamma) * m + gamma * Xa[j]
    return FrankWolfeResult(w, ratio, d, it)


# --------------------------------------------------------------------------------------------
# the algorithm
# --------------------------------------------------------------------------------------------


class _Runner:
    """Episode budget, simulation and exact regret bookkeeping of one run."""

    def __init__(
        self,
        mdp: TabularMDP,
        policies: IntArray,
        gaps: FloatArray,
        episodes: int,
        rng: np.random.Generator,
        progress: Progress | None,
        *,
        simulation: str = "counts",
    ) -> None:
        if simulation not in SIMULATIONS:
            raise ValueError(
                f"simulation must be one of {', '.join(SIMULATIONS)}, got {simulation!r}"
            )
        self.simulate = sample_counts if simulation == "counts" else rollout_counts
        self.mdp, self.policies, self.gaps = mdp, policies, gaps
        self.K = episodes
        self.done = 0
        self.regret = np.zeros(episodes)
        self.rng = rng
        self.progress = progress

    @property
    def remaining(self) -> int:
        return self.K - self.done

    def run(self, index: IntArray) -> tuple[Counts, int]:
        """Run policies[index[i]] for as many episodes as remain; record their regret. With
        simulation "counts" the batch's counts are drawn from their exact law (`sample_counts`:
        per-episode starts, then multinomial layer counts per policy); with "episodes" each
        user's episode is stepped (`rollout_counts`), the same law."""
        idx = index[: self.remaining]
        n = int(idx.shape[0])
        counts, starts = self.simulate(self.mdp, self.policies, idx, self.rng)
        self.regret[self.done : self.done + n] = self.gaps[idx, starts]
        self.done += n
        if self.progress is not None and n:
            self.progress(n)
        return counts, n


def _iota(mdp: TabularMDP, stages: int, beta: float) -> float:
    """ι = ln(2·H·S²·A·K0/β): union over (h, s, a, s') and stages."""
    return math.log(2.0 * mdp.H * mdp.S**2 * mdp.A * stages / beta)


def crude_exploration(
    run: _Runner,
    active: IntArray,
    T: int,
    privatizer: Privatizer,
    start: FloatArray,
    *,
    iota: float,
    cfg: PEConfig,
) -> tuple[FloatArray, npt.NDArray[np.bool_], IntArray, dict[str, Any]] | None:
    """Algorithm 2. Returns (P̃ [H, S+1, A, S+1], F [H, S, A, S], π_mix ids, log), or None if the
    episodes ran out."""
    mdp = run.mdp
    H, S, A = mdp.H, mdp.S, mdp.A
    P = np.zeros((H, S + 1, A, S + 1))
    P[:, :, :, S] = 1.0  # layers not yet estimated: everything absorbs
    F = np.zeros((H, S, A, S), dtype=bool)
    ext = _extend(run.policies[active])
    mix = np.empty((H, S, A), dtype=np.int64)
    per_layer = T // H
    Es = []
    for h in range(H):
        occ = occupancy_measure(P, start, ext)[:, h, :S, :]  # V^π(1_{h,s,a}, P̃): layers < h
        mix[h] = active[np.argmax(occ, axis=0)]
        choice = run.rng.integers(S * A, size=per_layer)
        counts, n = run.run(mix[h].reshape(-1)[choice])
        if n < per_layer:
            return None
        priv = privatizer.release(counts, n_users=n, layers=[h], rewards=False)
        threshold = cfg.threshold_c1 * H * H * iota + cfg.threshold_c2 * H * priv.E
        F[h] = priv.n_sas[h] <= threshold
        P[h] = absorbing_transitions(priv.n_sa[h], priv.n_sas[h], F[h])
        Es.append(priv.E)
    log = {"E_crude": max(Es), "infrequent": int(F.sum()), "F_threshold": float(threshold)}
    return P, F, mix.reshape(-1), log


def fine_exploration(
    run: _Runner,
    active: IntArray,
    T: int,
    privatizer: Privatizer,
    P_crude: FloatArray,
    F: npt.NDArray[np.bool_],
    *,
    mix: IntArray,
    start: FloatArray,
    cfg: PEConfig,
) -> tuple[FloatArray, FloatArray, FloatArray, float, dict[str, Any]] | None:
    """Algorithm 3. Returns (P̂ [H, S+1, A, S+1], r̂ [H, S+1, A], ñ_h(s,a) [H, S, A], E, log) or
    None if the episodes ran out."""
    mdp = run.mdp
    H, S, A = mdp.H, mdp.S, mdp.A
    occ = occupancy_measure(P_crude, start, _extend(run.policies[active]))[:, :, :S, :]
    X = occ.reshape(active.size, -1)
    # policies with equal occupancy vectors cover identically: design over distinct rows
    uniq, first = np.unique(np.round(X, 12), axis=0, return_index=True)
    fw = coverage_design(X[first], eta=cfg.fw_eta, max_iter=cfg.fw_max_iter)
    support = fw.weights > 0
    ids, probs = active[first[support]], fw.weights[support]
    cdf = np.cumsum(probs)
    cdf /= cdf[-1]
    pi0 = ids[np.minimum(np.searchsorted(cdf, run.rng.random(T), side="right"), ids.size - 1)]
    pimix = mix[run.rng.integers(mix.size, size=T)]
    counts, n = run.run(np.concatenate([pi0, pimix]))
    if n < 2 * T:
        return None
    priv = privatizer.release(counts, n_users=n)
    P = np.stack([absorbing_transitions(priv.n_sa[h], priv.n_sas[h], F[h]) for h in range(H)])
    r = np.zeros((H, S + 1, A))
    with np.errstate(divide="ignore", invalid="ignore"):
        r[:, :S] = np.where(priv.n_sa > 0, np.clip(priv.r_sum / priv.n_sa, 0.0, 1.0), 0.0)
    log = {
        "E": priv.E,
        "fw_ratio": fw.ratio,
        "fw_coordinates": fw.coordinates,
        "fw_iterations": fw.iterations,
        "pi0_support": int(ids.size),
        "distinct_occupancies": int(uniq.shape[0]),
    }
    return P, r, priv.n_sa, priv.E, log


def eliminate(
    policies: IntArray,
    active: IntArray,
    P: FloatArray,
    r: FloatArray,
    n_sa: FloatArray,
    E: float,
    *,
    start: FloatArray,
    iota: float,
    cfg: PEConfig,
) -> tuple[IntArray, dict[str, Any]]:
    """Keep π iff V̂^π + w(π) + b(π) ≥ max_π' (V̂^π' − w(π')) (module docstring)."""
    H, S1, A, _ = P.shape
    S = S1 - 1
    ext = _extend(policies[active])
    ev = policy_evaluation(P, r, ext, start=start, return_q=False)
    occ = occupancy_measure(P, start, ext)[:, :, :S, :]  # d̂^π_h(s,a) [N, H, S, A]
    N = active.size
    width = np.zeros(N)
    bias = np.zeros(N)
    for h in range(H):
        Ph = P[h, :S].reshape(S * A, S1)  # [S·A, S+1]
        V = ev.V[:, h + 1]  # V̂^π_{h+1} [N, S+1]
        pv = V @ Ph.T
        var = np.maximum(0.0, (V * V) @ Ph.T - pv * pv).reshape(N, S, A)
        var += r[h, :S] * (1.0 - r[h, :S])
        n = n_sa[h]
        with np.errstate(divide="ignore", invalid="ignore"):
            term = (
                cfg.width_c1 * np.sqrt(S * var * iota / n)
                + cfg.width_c2 * (S * H * iota + H * S * E) / n
            )
        term = np.where(n > 0, cfg.width_scale * term, np.inf)
        term = np.minimum(term, H - h)  # the error of steps h..H-1 is at most H − h
        width += np.einsum("nsa,nsa->n", occ[:, h], term)
        bias += np.einsum("nsa,sa->n", occ[:, h], P[h, :S, :, S]) * (H - h - 1)
    value = ev.value
    best_lower = float(np.max(value - width))
    keep = value + width + bias >= best_lower
    log = {
        "value_hat_max": float(value.max()),
        "width_min": float(width.min()),
        "width_median": float(np.median(width)),
        "bias_median": float(np.median(bias)),
    }
    return active[keep], log


def sdp_pe(
    mdp: TabularMDP,
    episodes: int,
    privatizer: Privatizer,
    *,
    rng: np.random.Generator,
    config: PEConfig | None = None,
    progress: Progress | None = None,
    system: str = "sdp-pe",
    simulation: str = "counts",
) -> OnlineResult:
    """Run SDP-PE (Algorithm 1) for ``episodes`` episodes with ``privatizer`` (a batch
    privatizer: shuffle for SDP-PE, identity for PE). `simulation`: how the simulator makes
    a batch's counts, "counts" (from their exact law) or "episodes" (each user's episode
    stepped); see `_Runner.run`. Returns the exact per-episode regret, the privacy report and
    a per-stage log."""
    cfg = config or PEConfig()
    if privatizer.cumulative:
        raise ValueError("SDP-PE forgets between stages: give a batch privatizer (shuffle/none)")
    K = int(episodes)
    if K < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    H, S, A = mdp.H, mdp.S, mdp.A
    B = cfg.batch(H, S, A)
    schedule = stage_schedule(K, B)
    iota = _iota(mdp, len(schedule), cfg.beta)
    policies = policy_set(mdp, max_policies=cfg.max_policies)
    gaps = policy_start_gaps(mdp, policies)
    expected_gap = gaps @ mdp.d1
    start = np.append(mdp.d1, 0.0)
    run = _Runner(mdp, policies, gaps, K, rng, progress, simulation=simulation)
    active = np.arange(policies.shape[0])
    log: list[dict[str, Any]] = []
    for k, T in enumerate(schedule, start=1):
        entry: dict[str, Any] = {"stage": k, "T": T, "active_before": int(active.size)}
        log.append(entry)
        crude = crude_exploration(run, active, T, privatizer, start, iota=iota, cfg=cfg)
        if crude is None:
            break
        P_crude, F, mix, crude_log = crude
        entry.update(crude_log)
        fine = fine_exploration(
            run, active, T, privatizer, P_crude, F, mix=mix, start=start, cfg=cfg
        )
        if fine is None:
            break
        P_hat, r_hat, n_sa, E, fine_log = fine
        entry.update(fine_log)
        active, elim_log = eliminate(
            policies, active, P_hat, r_hat, n_sa, E, start=start, iota=iota, cfg=cfg
        )
        entry.update(elim_log)
        entry["active_after"] = int(active.size)
        entry["optimal_active"] = bool(expected_gap[active].min() <= 1e-9)
        entry["max_gap_active"] = float(expected_gap[active].max())
        if run.remaining == 0:
            break
    report = privatizer.report(system=system)
    info = {
        "config": cfg.constants(),
        "base_batch": B,
        "stages_planned": len(schedule),
        "iota": iota,
        "policies": int(policies.shape[0]),
        "privatizer": privatizer.describe(),
    }
    return OnlineResult(system, run.regret, report, log, info, policy=policies[active])


def make_shuffle_privatizer(
    mdp: TabularMDP,
    episodes: int,
    *,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    calibration: Calibration = "tight",
    config: PEConfig | None = None,
) -> ShufflePrivatizer:
    """The shuffle Privatizer sized for an SDP-PE run (its β union bound over all batches)."""
    cfg = config or PEConfig()
    B = cfg.batch(mdp.H, mdp.S, mdp.A)
    return ShufflePrivatizer(
        mdp.H,
        mdp.S,
        mdp.A,
        epsilon=epsilon,
        delta=delta,
        rng=rng,
        calibration=calibration,
        beta=cfg.beta,
        n_releases=n_releases(episodes, B, mdp.H),
    )


def pe(
    mdp: TabularMDP,
    episodes: int,
    *,
    rng: np.random.Generator,
    config: PEConfig | None = None,
    progress: Progress | None = None,
    simulation: str = "counts",
) -> OnlineResult:
    """Non-private policy elimination: SDP-PE with the identity privatizer."""
    return sdp_pe(
        mdp,
        episodes,
        IdentityPrivatizer(),
        rng=rng,
        config=config,
        progress=progress,
        system="pe",
        simulation=simulation,
    )
