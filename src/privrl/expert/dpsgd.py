"""Expert-level DP-SGD (Sharma et al., Appendix B.2, Algorithm 4): the baseline, and the private
half of Selective DP-SGD (`privrl.expert.selective`).

Each step (Algorithm 4, lines 4–9):

    B      ← Poisson sample of the m experts, rate b/m           (privrl.privacy.sampling)
    x_i    ← one transition drawn uniformly from expert i's data, i ∈ B
    g_i    ← ∇_φ ℓ(φ, x_i)                                        (the learner's joint loss)
    ḡ_i    ← g_i · min(1, C/‖g_i‖₂)                               (C = 1, joint over all params)
    g̃      ← (Σ_i ḡ_i + N(0, σ²C²I)) / b                          (b = expected batch size)
    φ      ← Adam(φ, g̃)                                           (post-processing)

An expert contributes at most one transition to a step, so adding or removing one expert moves
the clipped sum by at most C: each step is a Poisson-subsampled Gaussian mechanism with
sampling rate q = b/m and noise multiplier σ, and N steps are
``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), N)`` — accounted with
dp-accounting's PLD accountant (add/remove, unit = expert). The step count is the largest N
with ε(N) ≤ ε2 (``max_steps(..., backend="pld")``), or an explicit count whose ε is reported.

Dividing by the *expected* batch size b (not the realised |B|) keeps the update a function of
the privatised sum only; |B| is itself private.

m, the number of experts, must be public (``n_units``; the paper also sets δ = 1/m): under
add/remove-one-expert neighbours the number of experts in the data differs between neighbours,
so it is never read off the data. Poisson sampling needs m only for the rate q = b/m: every
expert present joins a step independently with probability q, however many there are, so data
holding more or fewer experts than the declared m are still sampled correctly (no
data-dependent error).

``sampling="shuffle"`` (the paper's implementation: shuffled batches, each expert at most once
per batch) is available, but no accountant we have certifies it under add/remove-one-expert
(a removed expert shifts every later batch of the permutation, so per-batch
sampling-without-replacement bounds do not apply): its report is NOT certified, ε = ∞, and
no ledger accepts it. The ε the paper would state (Poisson accounting at q = b/m) is kept only
as a labelled comparison (``paper_accounting_epsilon``), never as the run's ε.
``private=False`` is the non-private twin: the same learner trained on ordinary minibatches of
b transitions drawn uniformly from all the data (no clipping, no noise, no expert sampling).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from dp_accounting.dp_event import ComposedDpEvent, DpEvent, UnsupportedDpEvent

from privrl.data.dataset import TrajectoryDataset
from privrl.nn.per_example import DEFAULT_CLIP_METHOD, ClipMethod, clipped_grad_sum
from privrl.privacy.accounting import epsilon as accountant_epsilon
from privrl.privacy.accounting import max_steps, sampled_gaussian_event
from privrl.privacy.mechanisms import privatize_sum_torch
from privrl.privacy.noise import NoiseSource
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport, fmt_number
from privrl.privacy.sampling import (
    SHUFFLE_MATCHES_POISSON_ACCOUNTANT,
    one_per_unit,
    poisson_sample,
    shuffled_batches,
)
from privrl.privacy.units import NeighbourRelation, PrivacyUnit
from privrl.rl.discrete_common import DiscreteLearner, TransitionTable, eval_schedule

__all__ = [
    "COMPARISON_NOTE",
    "RELATION",
    "UNIT",
    "DPSGDSettings",
    "DpSgdResult",
    "ExpertTransitions",
    "build_report",
    "dp_sgd_release",
    "expert_dp_sgd",
    "paper_accounting_epsilon",
    "plan_steps",
    "uncertified_plan",
    "uncertified_release",
]

UNIT = PrivacyUnit.EXPERT
RELATION = NeighbourRelation.ADD_REMOVE
BACKEND = "pld"
DEFAULT_STEPS_UPPER = 10**7  # search cap of max_steps when no steps_cap is given

Sampling = Literal["poisson", "shuffle"]
Evaluate = Callable[[DiscreteLearner], np.ndarray]


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


def public_units(n_units: Any) -> int:
    """The public number of experts m (a positive integer; never read off the data)."""
    if n_units is None:
        raise ValueError(
            "n_units, the number of experts m, is required: it sets the sampling rate q = b/m "
            "(and the paper's δ = 1/m), so it must be public (declared by the data holder), "
            "never counted in the data"
        )
    if isinstance(n_units, bool) or not isinstance(n_units, int | np.integer) or n_units < 1:
        raise ValueError(f"n_units (the number of experts m) must be an integer >= 1: {n_units!r}")
    return int(n_units)


def expert_index(dataset: TrajectoryDataset) -> np.ndarray:
    """The sorted distinct expert ids of the data (used to group transitions, never to set a
    rate, δ or a count)."""
    if dataset.unit_ids is None:
        raise ValueError(
            "the dataset has no expert ids (unit_ids is None): expert-level privacy needs the "
            "expert of every trajectory (TrajectoryDataset(unit_ids=...))"
        )
    return np.unique(dataset.unit_ids)


class ExpertTransitions:
    """A dataset's transitions grouped by expert, for one-transition-per-expert sampling.

    ``expert_ids`` (sorted) maps an expert id to its index; experts of that list without data
    here (e.g. without unstable data) have zero transitions and contribute nothing when
    sampled. ``n_units`` is the public m of the rate q = b/m; the sampler draws over
    ``n_slots = max(m, len(expert_ids))`` slots, so every expert present is sampled with
    probability q whether the data hold fewer or more experts than m (slots without an expert
    contribute nothing).
    """

    def __init__(
        self,
        dataset: TrajectoryDataset,
        expert_ids: np.ndarray,
        n_units: int,
        table: TransitionTable,
    ) -> None:
        if dataset.unit_ids is None:
            raise ValueError("the dataset has no expert ids (unit_ids is None)")
        self.table = table
        self.n_units = public_units(n_units)
        ids = np.asarray(expert_ids)
        self.n_slots = max(self.n_units, int(ids.shape[0]))
        pos = np.searchsorted(ids, table.unit)  # expert index 0..m−1 of every transition
        if table.unit.size and (
            np.any(pos >= ids.shape[0])
            or np.any(ids[np.minimum(pos, ids.shape[0] - 1)] != table.unit)
        ):
            raise ValueError("the data hold an expert id that is not among the experts")
        # Transitions of expert u: order[starts[u] : starts[u] + counts[u]].
        self.order = np.argsort(pos, kind="stable")
        self.counts = np.bincount(pos, minlength=self.n_slots).astype(np.int64)
        self.starts = np.concatenate(([0], np.cumsum(self.counts)[:-1])).astype(np.int64)

    def batch_for(self, units: np.ndarray, rng: np.random.Generator) -> Any:
        """One uniformly drawn transition of each sampled expert (experts without data here
        are dropped: their contribution is zero)."""
        pos = one_per_unit(units, self.starts, self.counts, rng)
        return self.table.gather(self.order[pos])


# ---------------------------------------------------------------------------------------------
# accounting
# ---------------------------------------------------------------------------------------------


def _check_positive(x: float, what: str) -> float:
    v = float(x)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{what} must be finite and > 0, got {x!r}")
    return v


def plan_steps(
    *,
    noise_multiplier: float,
    sampling_probability: float,
    epsilon: float | None,
    delta: float,
    steps: int | None = None,
    steps_cap: int | None = None,
    prior: DpEvent | None = None,
) -> tuple[int, bool]:
    """Number of private steps: ``steps`` if given (refused if its ε exceeds ``epsilon``), else
    the largest N with ε(N) ≤ ``epsilon`` under PLD, at most ``steps_cap``.
    With ``prior`` (an event released before the steps, e.g. the consensus filter's rounds),
    (``epsilon``, ``delta``) is the total budget of ``prior`` composed with the N steps.
    Returns (N, capped) where capped says the cap, not the budget, set N."""
    z = _check_positive(noise_multiplier, "noise_multiplier")
    if steps is not None:
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        if epsilon is not None and steps > 0:
            event = sampled_gaussian_event(z, steps, sampling_probability=sampling_probability)
            if prior is not None:
                event = ComposedDpEvent([prior, event])
            eps = accountant_epsilon(event, delta, relation=RELATION, backend=BACKEND)
            if eps > epsilon:
                raise ValueError(
                    f"{steps} private steps need ε = {eps:.4g} > the budget ε = {epsilon:.4g} "
                    f"(δ = {delta:.3g}); use fewer steps or a larger noise multiplier"
                )
        return int(steps), False
    if epsilon is None:
        raise ValueError("give a privacy budget epsilon or an explicit number of steps")
    upper = DEFAULT_STEPS_UPPER if steps_cap is None else int(steps_cap)
    if upper < 1:
        return 0, True
    eps = _check_positive(epsilon, "epsilon")
    if steps_cap is not None:
        # the cap within the budget is the search's answer: one accountant call, not a search
        # (the plan finds the count before the ledger check, which should not wait on it)
        event = sampled_gaussian_event(z, upper, sampling_probability=sampling_probability)
        if prior is not None:
            event = ComposedDpEvent([prior, event])
        if accountant_epsilon(event, delta, relation=RELATION, backend=BACKEND) <= eps:
            return upper, True
    n = max_steps(
        z,
        eps,
        delta,
        sampling_probability=sampling_probability,
        relation=RELATION,
        backend=BACKEND,
        upper=upper,
        prior=prior,
    )
    if n == 0:
        raise ValueError(
            f"the budget ε = {epsilon:.4g} (δ = {delta:.3g}) does not cover a single step at "
            f"noise multiplier {z:.4g} and sampling rate {sampling_probability:.4g}; raise the "
            "noise multiplier or the budget"
        )
    return int(n), steps_cap is not None and n >= upper


def dp_sgd_release(
    *,
    noise_multiplier: float,
    clip_norm: float,
    sampling_probability: float,
    steps: int,
    batch_size: int,
    n_units: int,
    n_params: int,
    sampling: Sampling = "poisson",
    name: str = "expert-level DP-SGD: clipped per-expert gradient sums",
    extra: dict[str, Any] | None = None,
) -> Release:
    """The one `Release` standing for all ``steps`` noisy gradient sums of a run. With
    ``sampling="shuffle"`` the release is not certified (`uncertified_release`)."""
    matches = sampling == "poisson" or SHUFFLE_MATCHES_POISSON_ACCOUNTANT
    release = Release(
        name=name,
        mechanism="poisson_subsampled_gaussian" if sampling == "poisson" else "shuffled_gaussian",
        sensitivity=float(clip_norm),
        norm="l2",
        noise={
            "sigma": float(noise_multiplier) * float(clip_norm),
            "noise_multiplier": float(noise_multiplier),
        },
        count=int(steps),
        size=int(n_params),
        event=sampled_gaussian_event(
            noise_multiplier, int(steps), sampling_probability=sampling_probability
        ),
        extra={
            "sampling": sampling,
            "sampling_probability": float(sampling_probability),
            "expected_batch_size": int(batch_size),
            "n_units": int(n_units),
            "divide_by": "expected batch size b",
            "clipping": "per-example gradient of the joint loss, joint over all parameters",
            "accountant_matches_sampling": bool(matches),
            **(extra or {}),
        },
    )
    return release if matches else uncertified_release(release, SHUFFLE_NOT_CERTIFIED)


COMPARISON_NOTE = "for comparison only:"
SHUFFLE_NOT_CERTIFIED = (
    "sampling='shuffle': batches were shuffled (each expert at most once per batch), which no "
    "accountant here certifies under add/remove-one-expert: ε = ∞ (NOT certified), and a "
    "budget ledger refuses the run; use sampling='poisson' for a certified run"
)


def uncertified_release(release: Release, reason: str) -> Release:
    """``release`` without a certified event: the mechanism ran, but the event an accountant
    would need does not describe it, so the release's event is `UnsupportedDpEvent` (no
    accountant composes it) and the report built from it states ε = ∞.

    The event the paper's accounting would use is kept in ``extra["paper_event"]`` (and is
    read back only by `paper_accounting_epsilon`, a labelled comparison, never a guarantee).
    """
    from privrl.privacy.serialize import event_to_dict

    if release.event is None:
        raise ValueError(f"release {release.name!r} has no event to keep for comparison")
    return dataclasses.replace(
        release,
        event=UnsupportedDpEvent(),
        extra={
            **release.extra,
            "certified": False,
            "accountant_matches_sampling": False,
            "not_certified_because": reason,
            "paper_event": event_to_dict(release.event),
        },
    )


def _is_uncertified(release: Release) -> bool:
    return isinstance(release.event, UnsupportedDpEvent)


def paper_accounting_epsilon(
    releases: Sequence[Release], delta: float, *, backend: str = BACKEND
) -> float | None:
    """The ε the paper's accounting would state for ``releases`` at ``delta``: each uncertified
    release enters with its ``paper_event``. For comparison only, NOT a guarantee; None when
    every release is certified (the report's own ε is then the guarantee)."""
    from privrl.privacy.serialize import event_from_dict

    if not any(_is_uncertified(r) for r in releases):
        return None
    events = [
        event_from_dict(r.extra["paper_event"]) if _is_uncertified(r) else r.event
        for r in releases
        if r.event is not None
    ]
    return float(
        accountant_epsilon(ComposedDpEvent(events), delta, relation=RELATION, backend=backend)  # type: ignore[arg-type]
    )


def build_report(
    releases: Sequence[Release], delta: float, *, system: str, notes: Sequence[str] = ()
) -> PrivacyReport:
    """The expert-unit report of ``releases`` (add/remove, PLD). Any uncertified release makes
    the whole report uncertified: ε = ∞, ``private`` false (a ledger refuses it), with a note
    that states the paper's ε as a comparison only."""
    releases = list(releases)
    if not any(_is_uncertified(r) for r in releases):
        return PrivacyReport.build(
            UNIT, RELATION, releases, float(delta), backend=BACKEND, system=system, notes=notes
        )
    reasons = [
        str(r.extra.get("not_certified_because", r.name)) for r in releases if _is_uncertified(r)
    ]
    notes = [n for n in notes if n not in reasons]
    paper = paper_accounting_epsilon(releases, delta)
    return PrivacyReport.non_private(
        UNIT,
        RELATION,
        releases,
        delta=float(delta),
        accountant="none: the run is NOT certified (its sampling has no matching accountant)",
        system=system,
        notes=[
            *notes,
            *reasons,
            f"{COMPARISON_NOTE} the paper's accounting would state ε = {fmt_number(paper, 4)} "
            f"at δ = {fmt_number(float(delta))}; that number is NOT a guarantee for this run "
            "(metrics.json: epsilon_paper_accounting)",
        ],
    )


def uncertified_plan(system: str, reason: str) -> PrivacyReport:
    """The planned report of a run that will not be certified (ε = ∞), for the ledger check
    before the data are read: a ledger refuses it there."""
    return PrivacyReport.non_private(UNIT, RELATION, system=system, notes=[reason])


# ---------------------------------------------------------------------------------------------
# the training loop shared with Selective DP-SGD
# ---------------------------------------------------------------------------------------------


@dataclass
class DpSgdResult:
    """A trained learner, its step counts, the privacy report and the learning curve.

    ``curve`` rows: step, private_steps, and return_mean/return_std at evaluation points when
    an evaluation function was given. ``returns`` holds every evaluation's returns.
    """

    learner: DiscreteLearner
    steps: int
    private_steps: int
    report: PrivacyReport
    curve: list[dict[str, Any]] = field(default_factory=list)
    returns: list[np.ndarray] = field(default_factory=list)
    capped: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def return_mean(self) -> float | None:
        """Mean over the evaluations (each a mean over episodes), the paper's protocol."""
        if not self.returns:
            return None
        return float(np.mean([r.mean() for r in self.returns]))

    @property
    def return_std(self) -> float | None:
        """Standard deviation of the per-evaluation mean returns."""
        if not self.returns:
            return None
        return float(np.std([r.mean() for r in self.returns]))


@dataclass
class _Private:
    source: ExpertTransitions
    rate: float
    batch_size: int
    noise_multiplier: float
    clip_norm: float
    sampling: Sampling
    clip_method: ClipMethod


def _private_step(
    learner: DiscreteLearner,
    cfg: _Private,
    units: np.ndarray,
    rng: np.random.Generator,
    noise: np.random.Generator,
    check: bool,
) -> None:
    batch = cfg.source.batch_for(units, rng)
    clipped = clipped_grad_sum(
        learner.per_example_loss,
        learner.params,
        batch,
        cfg.clip_norm,
        method=cfg.clip_method,
        check=check,
    )
    names = list(clipped.sums)
    noisy, _ = privatize_sum_torch(
        [clipped.sums[k] for k in names],
        clip_norm=cfg.clip_norm,
        noise_multiplier=cfg.noise_multiplier,
        generator=noise,
        name="expert-level DP-SGD step",
    )
    b = float(cfg.batch_size)  # expected batch size, not |B| (Algorithm 4, line 8)
    learner.apply_gradients({k: t / b for k, t in zip(names, noisy, strict=True)})


def run_steps(
    learner: DiscreteLearner,
    coins: np.ndarray,
    *,
    private: _Private | None,
    stable: TransitionTable | None,
    batch_size: int,
    rng: np.random.Generator,
    noise: NoiseSource | None = None,
    evaluate: Evaluate | None = None,
    n_evals: int = 10,
    eval_window: int = 10_000,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    """Run ``len(coins)`` steps: coin 1 = private step, coin 0 = ordinary step on ``stable``
    (skipped when there is none). Evaluates at the paper's schedule. ``rng`` drives the
    ordinary steps' minibatches; the private steps' sampling (which experts, which of their
    transitions) and noise come from ``noise`` (default: a secure `NoiseSource`)."""
    source = noise or NoiseSource.secure()
    _, data_rng, _ = rng.spawn(3)
    sample_rng = source.generator("dp-sgd sampling")
    noise_rng = source.generator("dp-sgd noise")
    total = int(coins.shape[0])
    evals = set(eval_schedule(total, n_evals, eval_window).tolist()) if evaluate else set()
    shuffle_iter = None
    if private is not None and private.sampling == "shuffle":
        shuffle_iter = shuffled_batches(private.source.n_slots, private.batch_size, sample_rng)
    curve: list[dict[str, Any]] = []
    returns: list[np.ndarray] = []
    n_private = 0
    checked = False
    for t in range(total):
        if coins[t]:
            assert private is not None
            if shuffle_iter is not None:
                units = next(shuffle_iter)
            else:
                units = poisson_sample(private.source.n_slots, private.rate, sample_rng)
            _private_step(learner, private, units, sample_rng, noise_rng, check=not checked)
            checked = True
            n_private += 1
        elif stable is not None and len(stable) > 0:
            learner.update(stable.sample(batch_size, data_rng))
        # else: no stable data, the non-private step is skipped (Selective DP-SGD)
        step = t + 1
        if step in evals:
            assert evaluate is not None
            r = np.asarray(evaluate(learner), dtype=np.float64)
            returns.append(r)
            curve.append(
                {
                    "step": step,
                    "private_steps": n_private,
                    "return_mean": float(r.mean()),
                    "return_std": float(r.std()),
                }
            )
        if progress is not None:
            progress(step, total)
    return curve, returns


# ---------------------------------------------------------------------------------------------
# Algorithm 4
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DPSGDSettings:
    """The resolved public settings of expert-level DP-SGD (Algorithm 4).

    Attributes:
        epsilon, delta: the budget (ε2, δ2) of this part; the step count is the largest N
            within it (PLD), capped at ``steps_cap``.
        batch_size: the expected batch size b.
        noise_multiplier, clip_norm: σ and C of the private steps.
        steps: an explicit step count N (its ε is reported; refused if above ``epsilon``).
        steps_cap: the most steps in all.
        n_units: m, the public number of experts (required for a private run: it sets
            q = b/m, and is never counted in the data).
        sampling: "poisson" (certified) or "shuffle" (the paper's shuffled batches, NOT
            certified: the report says ε = ∞, `build_report`).
        private: False runs the non-private twin for ``steps`` (or ``steps_cap``) steps.
        n_evals, eval_window: the evaluation schedule (``n_evals`` evaluations spread over
            the last ``eval_window`` steps).
        clip_method: how per-example gradients are clipped (`privrl.nn.per_example`).
    """

    epsilon: float | None
    delta: float
    batch_size: int = 128
    noise_multiplier: float = 20.0
    clip_norm: float = 1.0
    steps: int | None = None
    steps_cap: int | None = None
    n_units: int | None = None
    sampling: Sampling = "poisson"
    private: bool = True
    n_evals: int = 10
    eval_window: int = 10_000
    clip_method: ClipMethod = DEFAULT_CLIP_METHOD


def expert_dp_sgd(
    settings: DPSGDSettings,
    learner: DiscreteLearner,
    dataset: TrajectoryDataset,
    *,
    rng: np.random.Generator,
    noise: NoiseSource | None = None,
    evaluate: Evaluate | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> DpSgdResult:
    """Train ``learner`` on ``dataset`` with expert-level DP-SGD (Algorithm 4), with the
    settings of `DPSGDSettings`.

    ``rng`` is public randomness; the sampling and noise come from ``noise`` (default: secure).
    """
    s = settings
    epsilon, delta, steps, steps_cap = s.epsilon, s.delta, s.steps, s.steps_cap
    batch_size, sampling, private = s.batch_size, s.sampling, s.private
    noise = noise or NoiseSource.secure()
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    if isinstance(batch_size, bool) or int(batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if sampling not in ("poisson", "shuffle"):
        raise ValueError(f"sampling must be 'poisson' or 'shuffle', got {sampling!r}")
    b = int(batch_size)
    table = TransitionTable(dataset, learner.obs_transform, learner.device)
    if private:
        ids = expert_index(dataset)  # expert-level sampling needs each trajectory's expert
        m = public_units(s.n_units)
        if b > m:
            raise ValueError(f"batch_size b = {b} exceeds the number of experts m = {m}")
        q = b / m
        z = _check_positive(s.noise_multiplier, "noise_multiplier")
        c = _check_positive(s.clip_norm, "clip_norm")
        n, capped = plan_steps(
            noise_multiplier=z,
            sampling_probability=q,
            epsilon=epsilon,
            delta=delta,
            steps=steps,
            steps_cap=steps_cap,
        )
        source = ExpertTransitions(dataset, ids, m, table)
        cfg = _Private(source, q, b, z, c, sampling, s.clip_method)
    else:
        n = steps if steps is not None else steps_cap
        if n is None:
            raise ValueError("the non-private twin needs steps or steps_cap")
        n, cfg = int(n), None
    # The twin is the same loop with privacy off: ordinary minibatches from the whole table.
    curve, returns = run_steps(
        learner,
        np.full(n, private, dtype=bool),
        private=cfg,
        stable=None if private else table,
        batch_size=b,
        rng=rng,
        noise=noise,
        evaluate=evaluate,
        n_evals=s.n_evals,
        eval_window=s.eval_window,
        progress=progress,
    )
    if not private:
        report = PrivacyReport.non_private(
            UNIT,
            RELATION,
            [
                Release(
                    name="minibatch SGD on all data (non-private twin)",
                    mechanism="none",
                    sensitivity=0.0,
                    norm="l2",
                    noise={},
                    count=max(n, 1),
                    extra={"non_private": True},
                )
            ],
            system="expert-dp-sgd (non-private twin)",
            delta=float(delta),
        )
        return DpSgdResult(learner, n, 0, report, curve, returns)
    notes = []
    if capped:
        notes.append(f"the step count was capped at {n}: the budget ε = {epsilon} is not spent")
    release = dp_sgd_release(
        noise_multiplier=z,
        clip_norm=c,
        sampling_probability=q,
        steps=n,
        batch_size=b,
        n_units=m,
        n_params=learner.n_parameters,
        sampling=sampling,
    )
    report = build_report([release] if n else [], float(delta), system="expert-dp-sgd", notes=notes)
    report = noise.certify(report)
    info = {"n_units": m, "sampling_probability": q, "epsilon_target": epsilon}
    return DpSgdResult(learner, n, n, report, curve, returns, capped=capped, info=info)
