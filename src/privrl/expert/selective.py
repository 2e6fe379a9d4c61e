"""Selective DP-SGD (Sharma et al., Algorithm 3) and the full expert-level pipeline: the
consensus filter (Algorithm 2, `privrl.expert.consensus`) splits the data into D_stable and
D_unst, then each training step is, with probability p, an expert-level DP-SGD step on D_unst
(`privrl.expert.dpsgd`), otherwise an ordinary minibatch step on D_stable (no noise: D_stable
was released by the filter, so using it is post-processing).

Private steps sample experts with rate b/m over ALL m experts; an expert without unstable data
contributes a zero gradient. An empty D_stable skips the non-private steps.

Accounting — a decision that differs from the paper (``accounting="exact"``, the default).
The paper accounts N steps as Poisson subsampling with rate q = p·b/m, arguing that an expert
is used in a step with probability p·b/m. That marginal probability is right, but the
inclusions of different experts are correlated through the shared coin, and the coin is
visible in the iterates (a noisy step and a stable step look nothing alike). A step is then
the mixture "(1 − p): no privacy loss; p: a Poisson(b/m)-subsampled Gaussian", whose
hockey-stick divergence is p·δ_{b/m}(ε) — larger than the δ_{p·b/m}(ε) of Poisson sampling at
rate p·b/m (subsampling also shrinks the loss itself, the coin does not); see
tests/expert/test_selective.py for a one-step counterexample. Instead, the coins are drawn up
front (they are independent of the data, hence public) and we condition on them: the run is
exactly K private steps of the Poisson(b/m)-subsampled Gaussian, with K the largest count
within ε2 (PLD), and training continues until the K-th private step (≈ K/p steps in all). This
certifies (ε2, δ2) with standard dp-accounting events; the price is ≈ 1/p fewer steps than the
paper's accounting allows (measured at z = 20, b/m = 128/3000, ε2 = 2.5: ×0.9 at p = 0.9,
×0.8 at p = 0.8, ×0.5 at p = 0.5). ``accounting="paper"`` reproduces the paper's training
(N steps sized by Poisson accounting at q = p·b/m), but that event does not describe the run,
so its report is NOT certified: ε = ∞, no ledger accepts it, and the paper's ε is kept only as
a labelled comparison (`privrl.expert.dpsgd.paper_accounting_epsilon`).

Public parameters: m (``n_units``, the number of experts; it sets q = b/m and the paper's
δ = 1/m) is given by the caller from public information, never counted in the data; the
consensus filter's L likewise (``max_len``, or a declared ``metadata.horizon``).

Budget split (:func:`split_budget`, spec and paper Appendix B.3): ε1 = 3ε/4, ε2 = ε/4,
δ1 = 9δ/10, δ2 = δ/10 by default; below ε = 5 the filter is skipped (ε1 = 0, all to DP-SGD);
p = 0 gives everything to the filter; p = 1 is plain DP-SGD on all data. The total report
composes the filter's rounds with the DP-SGD steps (PLD), unit = expert, add/remove.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from dp_accounting.dp_event import ComposedDpEvent, DpEvent

from privrl.data.dataset import TrajectoryDataset
from privrl.expert.base import ExpertSet
from privrl.expert.dpsgd import (
    COMPARISON_NOTE,
    DpSgdResult,
    Evaluate,
    ExpertTransitions,
    _Private,
    build_report,
    dp_sgd_release,
    plan_steps,
    public_units,
    run_steps,
    uncertified_release,
)
from privrl.nn.per_example import DEFAULT_CLIP_METHOD, ClipMethod
from privrl.privacy.noise import NoiseSource
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.sampling import step_coins
from privrl.rl.discrete_common import DiscreteLearner, TransitionTable

__all__ = [
    "DP_SGD_BUDGETS",
    "BudgetSplit",
    "ExpertDPSettings",
    "ExpertDpResult",
    "SelectiveSettings",
    "effective_split",
    "private_steps_bound",
    "selective_dp_sgd",
    "split_budget",
    "train_expert_dp",
]

Accounting = Literal["exact", "paper"]
_SUM_TOL = 1e-9

PAPER_NOT_CERTIFIED = (
    "accounting='paper': the DP-SGD steps were sized by Poisson accounting at q = p·b/m "
    "(Sharma et al.). The shared step coin is visible in the iterates, so the run is really a "
    "p-mixture of Poisson(b/m)-subsampled Gaussian steps, whose privacy loss that event "
    "understates: ε = ∞ (NOT certified), and a budget ledger refuses the run; use "
    "accounting='exact' for a certified run"
)


# ---------------------------------------------------------------------------------------------
# budget split
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetSplit:
    """(ε, δ) = (ε1 + ε2, δ1 + δ2): ε1, δ1 for the filter, ε2, δ2 for DP-SGD."""

    epsilon: float
    delta: float
    p: float
    epsilon1: float
    delta1: float
    epsilon2: float
    delta2: float
    rule: str

    @property
    def filter(self) -> bool:
        """Whether the consensus filter runs (ε1 > 0)."""
        return self.epsilon1 > 0

    @property
    def dp_sgd(self) -> bool:
        """Whether there are private DP-SGD steps (ε2 > 0 and p > 0)."""
        return self.epsilon2 > 0 and self.p > 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fraction(x: float, what: str) -> float:
    v = float(x)
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise ValueError(f"budget split does not add up: {what} = {x!r} is not in [0, 1]")
    return v


DpSgdBudget = Literal["split", "joint"]
DP_SGD_BUDGETS: tuple[str, ...] = ("split", "joint")


def split_budget(
    epsilon: float,
    delta: float,
    p: float,
    *,
    filter_below: float = 5.0,
    eps1_fraction: float = 0.75,
    delta1_fraction: float = 0.9,
    eps2_fraction: float | None = None,
    delta2_fraction: float | None = None,
) -> BudgetSplit:
    """Split (ε, δ) between the filter (ε1, δ1) and DP-SGD (ε2, δ2).

    Rules, first match wins: p = 1 ⇒ (0, 0, ε, δ) (plain DP-SGD); p = 0 ⇒ (ε, δ, 0, 0) (all to
    the filter, train on D_stable only); ε < ``filter_below`` ⇒ (0, 0, ε, δ) (filter skipped,
    paper B.3); else ε1 = ``eps1_fraction``·ε, δ1 = ``delta1_fraction``·δ and the rest to
    DP-SGD. ``eps2_fraction``/``delta2_fraction``, when given, must add up to 1 with the
    first; a ValueError says what does not add up.
    """
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    d = float(delta)
    if not 0.0 < d < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    pf = float(p)
    if not (math.isfinite(pf) and 0.0 <= pf <= 1.0):
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    f1 = _fraction(eps1_fraction, "eps1_fraction")
    g1 = _fraction(delta1_fraction, "delta1_fraction")
    for given, first, name, arg in (
        (eps2_fraction, f1, "epsilon", "eps2_fraction"),
        (delta2_fraction, g1, "delta", "delta2_fraction"),
    ):
        if given is not None:
            second = _fraction(given, arg)
            if abs(first + second - 1.0) > _SUM_TOL:
                raise ValueError(
                    f"budget split does not add up: {name} fractions {first:g} + {second:g} = "
                    f"{first + second:g}, not 1 ({name}1 + {name}2 must equal {name})"
                )
    if pf == 1.0:
        return BudgetSplit(eps, d, pf, 0.0, 0.0, eps, d, "p = 1: plain DP-SGD on all data")
    if pf == 0.0:
        return BudgetSplit(
            eps, d, pf, eps, d, 0.0, 0.0, "p = 0: all budget to the filter (D_stable only)"
        )
    if eps < filter_below:
        return BudgetSplit(
            eps,
            d,
            pf,
            0.0,
            0.0,
            eps,
            d,
            f"ε < {filter_below:g}: filter skipped (ε1 = 0), all budget to DP-SGD",
        )
    e1, d1 = f1 * eps, g1 * d
    e2, d2 = eps - e1, d - d1
    if e1 > 0 and d1 <= 0:
        raise ValueError("budget split does not add up: the filter has ε1 > 0 but δ1 = 0")
    if e2 > 0 and d2 <= 0:
        raise ValueError("budget split does not add up: DP-SGD has ε2 > 0 but δ2 = 0")
    if e2 <= 0:
        raise ValueError(
            f"budget split does not add up: p = {pf:g} asks for private steps but ε2 = 0 "
            "(use p = 0 to train on D_stable only)"
        )
    return BudgetSplit(
        eps, d, pf, e1, d1, e2, d2, f"ε1 = {f1:g}·ε, ε2 = {1 - f1:g}·ε; δ1 = {g1:g}·δ"
    )


def effective_split(split: BudgetSplit, rounds: int) -> BudgetSplit:
    """``split`` as run with T = ``rounds`` filter rounds: T = 0 disables the filter and gives
    its budget to DP-SGD (refused with p = 0, which would leave nothing to train on)."""
    if int(rounds) != 0 or not split.filter:
        return split
    if split.p == 0.0:
        raise ValueError(
            "p = 0 trains on D_stable only, but `filter_rounds=0` disables the filter: "
            "nothing could be learned (give T > 0 rounds or p > 0)"
        )
    return BudgetSplit(
        split.epsilon,
        split.delta,
        split.p,
        0.0,
        0.0,
        split.epsilon,
        split.delta,
        "filter disabled (T = 0 rounds): all budget to DP-SGD",
    )


def private_steps_bound(
    *,
    p: float,
    noise_multiplier: float,
    sampling_rate: float,
    epsilon: float | None,
    delta: float,
    steps: int | None,
    steps_cap: int | None,
    prior: DpEvent | None = None,
) -> tuple[int, bool]:
    """The most private steps `selective_dp_sgd` can take with these public settings, before
    the step coins are drawn: (K_max, exact), where ``exact`` says the run takes exactly K_max
    (p ∈ {0, 1}: every coin is known).

    With ``steps`` = N the run takes K ≤ N private steps (K = the number of coins that come up
    private); N private steps must fit the budget (refused otherwise, with the fix), so every
    K the coins can draw does. Without ``steps``, K_max is the largest count within the budget
    (PLD), at most ``steps_cap``; the run stops at its K_max-th private step or at the cap,
    whichever comes first. The number of private steps depends on the coins only (drawn
    independently of the data), so the bound is public. For the certified cases only: at
    0 < p < 1 the paper's accounting (q = p·b/m) is not certified and not bounded here.
    """
    pf = float(p)
    if pf == 0.0:
        return 0, True
    exact = pf == 1.0
    if steps is not None:
        try:
            plan_steps(
                noise_multiplier=noise_multiplier,
                sampling_probability=sampling_rate,
                epsilon=epsilon,
                delta=delta,
                prior=prior,
                steps=int(steps),
            )
        except ValueError as exc:
            if exact:
                raise
            raise ValueError(f"with p = {pf:g}, {steps} steps may all be private: {exc}") from None
        return int(steps), exact
    k, _ = plan_steps(
        noise_multiplier=noise_multiplier,
        sampling_probability=sampling_rate,
        epsilon=epsilon,
        delta=delta,
        prior=prior,
        steps_cap=steps_cap,
    )
    return int(k), exact


# ---------------------------------------------------------------------------------------------
# Algorithm 3
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelectiveSettings:
    """The resolved public settings of Selective DP-SGD (Algorithm 3).

    Attributes:
        n_units: the public number of experts m (private steps sample every expert at rate
            b/m; never counted in the data).
        p: the probability of a private step.
        epsilon, delta: the budget (ε2, δ2) of the private steps; with ``prior_event`` (the
            filter's T rounds) instead the total budget of that event composed with them.
        batch_size: the expected batch size b.
        noise_multiplier, clip_norm: σ and C of the private steps.
        steps: an explicit step count N (its coins drawn first; their K private steps must
            fit the budget), else the run stops at the K-th private step, K the largest count
            within the budget.
        steps_cap: the most steps in all.
        accounting: "exact" (the coins conditioned on, certified) or "paper" (N steps at
            q = p·b/m, NOT certified: the report states ε = ∞).
        n_evals, eval_window: the evaluation schedule (``n_evals`` evaluations spread over
            the last ``eval_window`` steps).
        clip_method: how per-example gradients are clipped (`privrl.nn.per_example`).
        prior_event: an event released before the steps, composed with them (joint budget).
    """

    n_units: int
    p: float
    epsilon: float | None
    delta: float
    batch_size: int = 128
    noise_multiplier: float = 20.0
    clip_norm: float = 1.0
    steps: int | None = None
    steps_cap: int | None = None
    accounting: Accounting = "exact"
    n_evals: int = 10
    eval_window: int = 10_000
    clip_method: ClipMethod = DEFAULT_CLIP_METHOD
    prior_event: DpEvent | None = None


def selective_dp_sgd(
    settings: SelectiveSettings,
    learner: DiscreteLearner,
    stable: TrajectoryDataset | None,
    unstable: TrajectoryDataset,
    *,
    expert_ids: np.ndarray,
    rng: np.random.Generator,
    noise: NoiseSource | None = None,
    evaluate: Evaluate | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> DpSgdResult:
    """Algorithm 3 with the budget of ``settings`` for its private steps (see
    `SelectiveSettings`): with probability p a DP-SGD step on ``unstable``, else an ordinary
    step on ``stable``.

    ``expert_ids``: the experts' ids (groups the transitions). Steps: ``accounting="exact"``
    runs until the K-th private step, K the largest count within the budget (at most
    ``steps_cap`` steps in all); with ``steps`` the coins of N steps are drawn first and their
    K private steps must fit the budget. ``"paper"``: N steps at q = p·b/m, NOT certified
    (the report states ε = ∞). p = 0 needs ``steps`` or ``steps_cap`` (no private steps).
    ``rng`` is public randomness (the step coins, the ordinary steps' minibatches); the private
    steps' sampling and their noise come from ``noise`` (default: secure).
    """
    s = settings
    n_units, p, epsilon, delta = s.n_units, s.p, s.epsilon, s.delta
    batch_size, noise_multiplier, clip_norm = s.batch_size, s.noise_multiplier, s.clip_norm
    steps, steps_cap, accounting, prior_event = s.steps, s.steps_cap, s.accounting, s.prior_event
    noise = noise or NoiseSource.secure()
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    if accounting not in ("exact", "paper"):
        raise ValueError(f"accounting must be 'exact' or 'paper', got {accounting!r}")
    pf = float(p)
    if not 0.0 <= pf <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    ids = np.unique(np.asarray(expert_ids))
    m = public_units(n_units)
    b = int(batch_size)
    if not 1 <= b <= m:
        raise ValueError(f"batch_size must be in [1, m = {m}], got {batch_size}")
    rate = b / m
    coin_seed, train_rng = rng.spawn(2)
    # The coins are public randomness: drawn before the data is touched, and the privacy event
    # conditions on them (see the module docstring), so they repeat from the seed.
    coin_rng = NoiseSource.insecure(coin_seed).generator("selective dp-sgd step coins")
    capped = False
    if pf == 0.0:
        n = steps if steps is not None else steps_cap
        if n is None:
            raise ValueError("p = 0 (no private steps) needs steps or steps_cap")
        coins = np.zeros(int(n), dtype=bool)
        q_event = rate
    elif accounting == "exact":
        q_event = rate
        if steps is not None:
            coins = step_coins(pf, coin_rng, steps=int(steps))
            plan_steps(
                noise_multiplier=noise_multiplier,
                sampling_probability=rate,
                epsilon=epsilon,
                delta=delta,
                prior=prior_event,
                steps=int(coins.sum()),
            )
        else:
            k, capped = plan_steps(
                noise_multiplier=noise_multiplier,
                sampling_probability=rate,
                epsilon=epsilon,
                delta=delta,
                prior=prior_event,
                steps_cap=steps_cap,
            )
            coins = step_coins(pf, coin_rng, private_steps=k, max_steps=steps_cap)
            capped = capped or int(coins.sum()) < k
    else:  # the paper's accounting: N steps at q = p·b/m
        q_event = pf * rate
        n, capped = plan_steps(
            noise_multiplier=noise_multiplier,
            sampling_probability=q_event,
            epsilon=epsilon,
            delta=delta,
            prior=prior_event,
            steps=steps,
            steps_cap=steps_cap,
        )
        coins = step_coins(pf, coin_rng, steps=n)
    k_real = int(coins.sum())
    n_total = int(coins.shape[0])

    table_u = TransitionTable(unstable, learner.obs_transform, learner.device)
    source = ExpertTransitions(unstable, ids, m, table_u)
    table_s = None
    if stable is not None and stable.n_transitions > 0:
        table_s = TransitionTable(stable, learner.obs_transform, learner.device)
    private = None
    if k_real > 0:
        private = _Private(
            source, rate, b, float(noise_multiplier), float(clip_norm), "poisson", s.clip_method
        )
    curve, returns = run_steps(
        learner,
        coins,
        private=private,
        stable=table_s,
        batch_size=b,
        rng=train_rng,
        noise=noise,
        evaluate=evaluate,
        n_evals=s.n_evals,
        eval_window=s.eval_window,
        progress=progress,
    )
    notes: list[str] = []
    releases: list[Release] = []
    if k_real > 0:
        extra: dict[str, Any] = {
            "algorithm": "Selective DP-SGD (Sharma et al. Algorithm 3)",
            "p": pf,
            "accounting": accounting,
            "total_steps": n_total,
        }
        if accounting == "exact":
            extra["coins"] = "drawn up front, independent of the data; event conditions on them"
        release = dp_sgd_release(
            noise_multiplier=noise_multiplier,
            clip_norm=clip_norm,
            sampling_probability=q_event,
            steps=k_real if accounting == "exact" else n_total,
            batch_size=b,
            n_units=m,
            n_params=learner.n_parameters,
            name="Selective DP-SGD: clipped per-expert gradient sums on D_unst",
            extra=extra,
        )
        if accounting == "paper" and pf < 1.0:  # at p = 1 every coin is 1: the event is exact
            release = uncertified_release(release, PAPER_NOT_CERTIFIED)
        releases.append(release)
    if table_s is None and pf < 1.0 and n_total > k_real:
        notes.append("D_stable is empty: the non-private steps were skipped")
    if capped:
        notes.append(f"training was capped at {n_total} steps: the DP-SGD budget is not spent")
    report = noise.certify(
        build_report(releases, float(delta), system="selective-dp-sgd", notes=notes)
    )
    info = {
        "n_units": m,
        "sampling_rate": rate,
        "p": pf,
        "accounting": accounting,
        "epsilon_target": epsilon,
        "budget": "split" if prior_event is None else "joint (total, composed with the filter)",
        "stable_transitions": 0 if table_s is None else len(table_s),
        "unstable_transitions": len(table_u),
    }
    return DpSgdResult(learner, n_total, k_real, report, curve, returns, capped, info)


# ---------------------------------------------------------------------------------------------
# Algorithms 2 + 3
# ---------------------------------------------------------------------------------------------


@dataclass
class ExpertDpResult:
    """The pipeline's learner, budget split, filter output, training result and total report."""

    learner: DiscreteLearner
    split: BudgetSplit
    training: DpSgdResult
    report: PrivacyReport
    stable_size: int  # transitions in D_stable
    filter_summary: dict[str, Any] = field(default_factory=dict)


def check_experts(experts: ExpertSet, learner: DiscreteLearner, dataset: TrajectoryDataset) -> int:
    """The expert set must match the data and the learner; returns m = n_experts."""
    m = int(experts.n_experts)
    if int(experts.n_actions) != learner.n_actions:
        raise ValueError(
            f"the experts have {experts.n_actions} actions but the data have "
            f"{learner.n_actions}: use the expert set that produced this dataset"
        )
    if int(experts.obs_dim) != learner.obs_dim:
        raise ValueError(
            f"the experts take observations of dimension {experts.obs_dim} but the data have "
            f"{learner.obs_dim}: use the expert set that produced this dataset"
        )
    if dataset.unit_ids is None:
        raise ValueError(
            "the dataset has no expert ids (unit_ids is None): expert-level privacy needs the "
            "expert of every trajectory"
        )
    n_data = dataset.n_units
    if n_data > m:
        raise ValueError(f"the data hold {n_data} distinct experts but the expert set has {m}")
    return m


@dataclass(frozen=True)
class ExpertDPSettings:
    """The resolved public settings of the pipeline (consensus filter + Selective DP-SGD).

    ``batch_size``, ``noise_multiplier``, ``clip_norm``, ``steps``, ``steps_cap``,
    ``accounting``, ``n_evals``, ``eval_window`` and ``clip_method`` are as in
    `SelectiveSettings`.

    Attributes:
        n_units: the public number of experts m (the rate b/m of the private steps; never
            counted in the data).
        epsilon, delta: the total budget (ε, δ).
        p: the probability of a private step.
        rounds: the filter's T (0 disables the filter: all budget to DP-SGD; refused with
            p = 0, which would leave nothing to train on).
        p_min: the experts' action floor.
        max_len: the filter's public L (default: a declared ``metadata.horizon``;
            `privrl.expert.consensus.data_release` refuses otherwise).
        split: the budget split (default ``split_budget(epsilon, delta, p)``).
        filter_calibration: "paper", "tight" or "pld" (`DataReleaseCalibration.from_budget`).
        dp_sgd_budget: "split" (the paper: DP-SGD's steps fit (ε2, δ2) on their own) or
            "joint" (the steps fit the *total* (ε1 + ε2, δ1 + δ2) composed with the filter's
            T rounds by the PLD accountant, so DP-SGD also gets the part of ε1 that the
            composition of the two does not use).
    """

    n_units: int
    epsilon: float
    delta: float
    p: float
    rounds: int
    p_min: float = 0.02
    max_len: int | None = None
    split: BudgetSplit | None = None
    batch_size: int = 128
    noise_multiplier: float = 20.0
    clip_norm: float = 1.0
    steps: int | None = None
    steps_cap: int | None = None
    accounting: Accounting = "exact"
    n_evals: int = 10
    eval_window: int = 10_000
    clip_method: ClipMethod = DEFAULT_CLIP_METHOD
    filter_calibration: str = "paper"
    dp_sgd_budget: DpSgdBudget = "split"


def train_expert_dp(
    settings: ExpertDPSettings,
    learner: DiscreteLearner,
    dataset: TrajectoryDataset,
    experts: ExpertSet,
    *,
    rng: np.random.Generator,
    noise: NoiseSource | None = None,
    evaluate: Evaluate | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ExpertDpResult:
    """Consensus filter (ε1, δ1, T rounds) then Selective DP-SGD (ε2, δ2), with the settings
    of `ExpertDPSettings`.

    ``rng`` is public randomness (the step coins, minibatches); the filter's draws, the
    private steps' sampling and all noise come from ``noise`` (default: secure).
    """
    s = settings
    n_units, epsilon, delta, p, rounds = s.n_units, s.epsilon, s.delta, s.p, s.rounds
    dp_sgd_budget, split = s.dp_sgd_budget, s.split
    noise = noise or NoiseSource.secure()
    if dp_sgd_budget not in DP_SGD_BUDGETS:
        raise ValueError(
            f"dp_sgd_budget must be one of {', '.join(DP_SGD_BUDGETS)}, got {dp_sgd_budget!r}"
        )
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    if isinstance(rounds, bool) or int(rounds) < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    check_experts(experts, learner, dataset)
    m = public_units(n_units)
    split = effective_split(
        split if split is not None else split_budget(epsilon, delta, p), int(rounds)
    )
    if dataset.unit_ids is None:  # checked above; for type checkers
        raise ValueError("the dataset has no expert ids")
    expert_ids = np.unique(dataset.unit_ids)
    if expert_ids.shape[0] < int(experts.n_experts):
        raise ValueError(
            f"the data hold {expert_ids.shape[0]} of the expert set's {experts.n_experts} "
            "experts; every expert of the set must contribute trajectories (the filter draws "
            "an expert uniformly): use the expert set that produced this dataset"
        )
    _, train_rng = rng.spawn(2)
    filter_rng = noise.generator("consensus filter")
    releases: list[Release] = []
    summary: dict[str, Any] = {}
    stable: TrajectoryDataset | None = None
    unstable = dataset
    if split.filter:
        from privrl.expert.consensus import data_release

        released = data_release(
            dataset,
            experts,
            epsilon1=split.epsilon1,
            delta1=split.delta1,
            rounds=int(rounds),
            p_min=s.p_min,
            rng=filter_rng,
            max_len=s.max_len,
            calibration=s.filter_calibration,
        )
        stable, unstable = released.stable, released.unstable
        releases.extend(released.releases)
        summary = dict(released.summary)
    joint = dp_sgd_budget == "joint" and split.filter and split.dp_sgd and bool(releases)
    prior = ComposedDpEvent([r.event for r in releases if r.event is not None]) if joint else None
    training = selective_dp_sgd(
        SelectiveSettings(
            n_units=m,
            p=split.p,
            epsilon=(split.epsilon if joint else split.epsilon2) if split.dp_sgd else None,
            delta=(split.delta if joint else split.delta2) if split.dp_sgd else split.delta,
            prior_event=prior,
            batch_size=s.batch_size,
            noise_multiplier=s.noise_multiplier,
            clip_norm=s.clip_norm,
            steps=s.steps,
            steps_cap=s.steps_cap,
            accounting=s.accounting,
            n_evals=s.n_evals,
            eval_window=s.eval_window,
            clip_method=s.clip_method,
        ),
        learner,
        stable,
        unstable,
        expert_ids=expert_ids,
        rng=train_rng,
        noise=noise,
        evaluate=evaluate,
        progress=progress,
    )
    releases.extend(training.report.releases)
    stable_size = 0 if stable is None else stable.n_transitions
    # the training report's own notes, without its comparison ε (the total report states the
    # comparison for the whole run) or what `build_report` repeats
    sub = [n for n in training.report.notes if not n.startswith(COMPARISON_NOTE)]
    notes = [f"budget split: {split.rule}", *sub]
    if joint:
        notes.append(
            "DP-SGD budget: joint — its steps were sized so that the filter's rounds and the "
            f"steps together meet (ε, δ) = ({split.epsilon:g}, {split.delta:.3g}) under the "
            "PLD accountant, not (ε2, δ2) on their own"
        )
    notes.append("hyperparameters (learning rate, b, p, noise multiplier) are not accounted")
    report = noise.certify(
        build_report(
            releases,
            split.delta1 + split.delta2,
            system="expert-consensus + selective-dp-sgd",
            notes=notes,
        )
    )
    return ExpertDpResult(learner, split, training, report, stable_size, summary)
