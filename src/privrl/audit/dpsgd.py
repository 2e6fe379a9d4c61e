"""Auditing DP-SGD with worst-case gradient canaries (Jagielski et al. 2020; Nasr et al. 2021),
in many runs or in one run (Steinke, Nasr & Jagielski 2023).

The audited mechanism is the production trainer itself: every run is a call of
`privrl.expert.dpsgd.expert_dp_sgd` (Algorithm 4 of Sharma et al.; the private half of
selective DP-SGD), so its Poisson sampling of units, one transition per sampled unit, its
per-example clipping (`privrl.nn.per_example.clipped_grad_sum`, joint over all parameters), its
Gaussian noise and its division by the expected batch size are the ones that ran, and the
claimed ε is the report the trainer's own accountant call wrote (add/remove one unit, PLD). A
bug anywhere on that path moves the audit.

The trainer's learner is `TrialHeads`, a linear model with loss ℓ(θ, x) = −θ·x, so a unit's
gradient −x does not depend on θ: the adversary controls gradients directly — the "gradient
canary" of Nasr et al. 2021 §4. Many trials run in one trainer call: trial r's units take
"action" r and move only row r of the heads, so joint clipping, per-coordinate noise and
per-unit Poisson sampling make the rows R independent DP-SGD runs. Its update is plain SGD, a
post-processing of the trainer's noisy gradients, so θ_N − θ_0 is −(η/b)Σ_t g̃_t.

Canary ``worst``: the canary's input is `CANARY_NORM`·C·e₀, far beyond the clip norm, in a
direction no other unit uses (the background's inputs live in coordinates 1..p−1). Correct
clipping maps it to C·e₀ exactly, the worst case of a unit under clipping; a clip that is too
wide (or missing) lets its full norm through, which the score sees at once. Score: the
projection of the released displacement on the canary's direction. With q = 1, N = 1 the
release is one Gaussian of sensitivity C: the closed-form worst case. ``random``: the canary
is drawn from the background's generator. ``file``: the canary's input is the user's unit
(`privrl.audit.canary.load_gradient_canary`).

One run (`audit_dp_sgd_one_run`): m canaries with orthogonal directions e₀..e_{m−1}, each
included independently with probability ½ in ONE trainer run; score_j = displacement · e_j;
guess "in" for the k highest scores and "out" for the k lowest; the number of correct guesses
gives the ε lower bound of Steinke et al. 2023 (`privrl.audit.bounds.one_run_epsilon`).

The non-private twin (`noise_multiplier` None) is the trainer's own twin
(``DPSGDSettings(private=False)``): ordinary minibatches drawn with replacement, no clipping,
no noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privrl.audit.attacks import AuditTrials, Canary, _check_trials, _trial_batches
from privrl.config import ConfigError
from privrl.privacy.noise import NoiseSource
from privrl.privacy.report import PrivacyReport

__all__ = [
    "CANARY_NORM",
    "DPSGDAuditSettings",
    "OneRunAudit",
    "TrialHeads",
    "audit_dp_sgd",
    "audit_dp_sgd_one_run",
    "dp_sgd_claimed",
    "dp_sgd_noise_multiplier",
    "one_run_verdict",
    "trainer_displacements",
]

Progress = Callable[[int, int], None] | None


def dp_sgd_claimed(
    *,
    noise_multiplier: float | None,
    rate: float,
    steps: int,
    delta: float,
    params: int,
    units: int = 1,
    clip: float = 1.0,
) -> PrivacyReport:
    """DP-SGD's report (`dpsgd.dp_sgd_release` through PLD, add/remove one unit) for `units`
    units of which each step samples rate·units on average; non-private when the noise
    multiplier is None."""
    from privrl.expert.dpsgd import BACKEND, RELATION, UNIT, dp_sgd_release

    if noise_multiplier is None:
        return PrivacyReport.non_private(UNIT, RELATION, system="sgd")
    release = dp_sgd_release(
        noise_multiplier=noise_multiplier,
        clip_norm=clip,
        sampling_probability=rate,
        steps=steps,
        batch_size=max(round(rate * units), 1),
        n_units=units,
        n_params=params,
    )
    return PrivacyReport.build(UNIT, RELATION, [release], delta, backend=BACKEND, system="dp-sgd")


def dp_sgd_noise_multiplier(epsilon: float, delta: float, rate: float, steps: int) -> float:
    """The smallest z whose N × Poisson(q) ∘ Gaussian(z) meets (ε, δ) under PLD (add/remove)."""
    from privrl.expert.dpsgd import BACKEND, RELATION
    from privrl.privacy.accounting import calibrate_noise_multiplier

    return float(
        calibrate_noise_multiplier(
            epsilon,
            delta,
            steps,
            sampling_probability=rate,
            relation=RELATION,
            backend=BACKEND,
        )
    )


@dataclass(frozen=True)
class DPSGDAuditSettings:
    """The audited DP-SGD run (`audit_dp_sgd`, `audit_dp_sgd_one_run`).

    Attributes:
        noise_multiplier: z (None: the non-private twin, the same steps without noise).
        rate: the sampling rate q.
        steps: N, the number of steps.
        delta: the δ of the claimed ε.
        clip: the clip norm C.
        lr: the step size.
        background: the number of background units.
        dim: the background units' input dimension.
    """

    noise_multiplier: float | None
    rate: float = 1.0
    steps: int = 1
    delta: float = 1e-5
    clip: float = 1.0
    lr: float = 1.0
    background: int = 10
    dim: int = 2

    def check(self) -> None:
        if not 0.0 < self.rate <= 1.0:
            raise ConfigError("rate", f"must be in (0, 1], got {self.rate}")
        if self.steps < 1 or self.background < 0 or self.dim < 1:
            raise ValueError(
                f"need steps >= 1, background >= 0, dim >= 1 (steps={self.steps}, "
                f"background={self.background}, dim={self.dim})"
            )
        for name, v in (("clip", self.clip), ("lr", self.lr)):
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(name, f"must be finite and > 0, got {v}")


_HEADS_FLOATS = 6_000_000  # the largest [R·n, R] forward pass of one trainer call
CANARY_NORM = 100.0  # the worst canary's gradient norm, in units of C (see the module docstring)


class TrialHeads:
    """The audited model, given to the trainer as its learner: R independent linear models
    θ_r ∈ R^p stacked as one parameter ``heads.weight`` [R, p], with loss ℓ(θ, (x, r)) = −θ_r·x
    for a unit of trial r (its transition's action is r). A unit's gradient lives in its own
    trial's row only, so the trainer's joint per-example clipping clips it exactly as a run
    holding θ_r alone would, its Gaussian noise is independent per row, and its Poisson
    sampling is independent per unit: one trainer run is R independent DP-SGD runs. The update
    is plain SGD (θ ← θ − η·g̃, post-processing of the trainer's noisy gradient g̃), so the
    released θ_r is −(η/b)Σ_t g̃_t,r."""

    def __init__(self, trials: int, dim: int, lr: float) -> None:
        from privrl.rl.discrete_common import ObsTransform

        self.lr = float(lr)
        self.obs_transform = ObsTransform()
        self.device = torch.device("cpu")  # the trainer builds its tables here
        weight = torch.zeros((int(trials), int(dim)), dtype=torch.float32)
        self.params: dict[str, torch.Tensor] = {"heads.weight": weight.requires_grad_(True)}

    @property
    def n_parameters(self) -> int:
        return int(self.params["heads.weight"].numel())

    @property
    def theta(self) -> np.ndarray:
        """The released parameters θ [R, p]."""
        return self.params["heads.weight"].detach().numpy().copy()

    def per_example_loss(self, params: dict[str, torch.Tensor], batch: Any) -> torch.Tensor:
        from privrl.nn.per_example import linear

        w = params["heads.weight"]
        out = linear(batch.obs.to(w.dtype), w)  # [B, R]: θ_r·x for every head r
        return -out.gather(1, batch.actions.reshape(-1, 1)).squeeze(1)

    def apply_gradients(self, grads: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for k, p in self.params.items():
                p -= self.lr * grads[k].to(p.dtype).reshape(p.shape)

    def update(self, batch: Any) -> float:
        """The non-private twin's ordinary step: SGD on the mean loss (no clipping, no noise)."""
        loss = self.per_example_loss(self.params, batch).mean()
        (grad,) = torch.autograd.grad(loss, [self.params["heads.weight"]])
        self.apply_gradients({"heads.weight": grad})
        return float(loss.detach())


def _units_dataset(units: np.ndarray, member: np.ndarray) -> Any:
    """The trainer's data: unit i of trial r (if `member`[r, i]) is an expert with one terminal
    transition from x = `units`[i] taking action r (the trial's head), reward 0."""
    from privrl.data.dataset import TrajectoryDataset

    r, i = np.nonzero(member)
    n = r.size
    x = np.repeat(units[i].astype(np.float32), 2, axis=0)  # each step's state and final state
    return TrajectoryDataset(
        observations=x,
        actions=r.astype(np.int64),
        rewards=np.zeros(n, np.float32),
        terminated=np.ones(n, bool),
        truncated=np.zeros(n, bool),
        episode_offsets=np.arange(n + 1, dtype=np.int64),
        unit_ids=(r * units.shape[0] + i).astype(np.int64),
    )


def sampling_sizes(rate: float, slots: int) -> tuple[int, int]:
    """(b, m) for the trainer's rate q = b/m: m ≥ `slots` declared units and b/m = `rate` (to
    float precision), b ≥ 1."""
    from fractions import Fraction

    frac = Fraction(rate).limit_denominator(10**6)
    k = max(math.ceil(slots / frac.denominator), 1)
    return frac.numerator * k, frac.denominator * k


def trainer_displacements(
    sgd: DPSGDAuditSettings,
    units: np.ndarray,
    member: np.ndarray,
    *,
    rng: np.random.Generator,
) -> tuple[np.ndarray, PrivacyReport]:
    """θ_N − θ_0 [runs, p] of `runs` independent DP-SGD runs on the units [n, p] whose
    `member` [runs, n] is True, and the trainer's own report: ONE call of the production
    trainer `privrl.expert.dpsgd.expert_dp_sgd` (its Poisson sampling, per-example clipping,
    noise and accountant) on `TrialHeads`; the non-private twin is the trainer's own
    (``private=False``). The trainer divides by its expected batch b = q·m over all runs, a
    public constant that scales every score alike."""
    from privrl.expert import dpsgd as trainer

    runs, n = member.shape
    b, m = sampling_sizes(sgd.rate, runs * n)
    heads = TrialHeads(runs, units.shape[1], sgd.lr)
    result = trainer.expert_dp_sgd(
        trainer.DPSGDSettings(
            epsilon=None,
            delta=sgd.delta,
            batch_size=b,
            noise_multiplier=1.0 if sgd.noise_multiplier is None else sgd.noise_multiplier,
            clip_norm=sgd.clip,
            steps=sgd.steps,
            n_units=m,
            private=sgd.noise_multiplier is not None,
        ),
        heads,  # type: ignore[arg-type]
        _units_dataset(units, member),
        rng=rng,
        noise=NoiseSource.insecure(rng),  # canaries are synthetic: the audit repeats from its seed
    )
    return heads.theta, result.report.claim()


def _units(
    background: int,
    canaries: int,
    dim: int,
    canary: Canary,
    clip: float,
    rng: np.random.Generator,
    *,
    unit: np.ndarray | None = None,
) -> np.ndarray:
    """Units' data x (gradient −x): `canaries` rows then `background` rows, in R^(canaries +
    dim). Worst: canary j is `CANARY_NORM`·C·e_j, the background lives in the last `dim`
    coordinates. File: canary j is row j of `unit` [canaries, 1 + dim] (`privrl.audit.canary`),
    its first input on its own coordinate j and the rest on the background's `dim`, the
    background as for worst. Random: every row, canary or background, from the same generator
    (N(0, C²/p) on the first `canaries` coordinates, N(0, C²) on the last `dim`)."""
    p = canaries + dim
    if canary == "random":  # canaries and background from one public generator, row for row
        rows = np.empty((canaries + background, p))
        rows[:, :canaries] = rng.normal(0.0, clip / math.sqrt(p), size=(len(rows), canaries))
        rows[:, canaries:] = rng.normal(0.0, clip, size=(len(rows), dim))
        return rows
    bg = np.zeros((background, p))
    bg[:, canaries:] = rng.normal(0.0, clip, size=(background, dim))
    if canary == "file":
        units = None if unit is None else np.asarray(unit, np.float64).reshape(-1, 1 + dim)
        if units is None or units.shape[0] != canaries:
            raise ValueError(
                f"a file canary is {canaries} unit(s) of 1 + {dim} inputs (own coordinate first)"
            )
        can = np.zeros((canaries, p))  # unit j's first input on its own coordinate j
        can[np.arange(canaries), np.arange(canaries)] = units[:, 0]
        can[:, canaries:] = units[:, 1:]
    else:  # worst
        can = CANARY_NORM * clip * np.eye(canaries, p)
    return np.vstack([can, bg])


def audit_dp_sgd(
    settings: DPSGDAuditSettings,
    *,
    trials: int,
    canary: Canary = "worst",
    rng: np.random.Generator,
    progress: Progress = None,
    batch: int | None = None,
    unit: np.ndarray | None = None,
) -> AuditTrials:
    """Score `trials` DP-SGD runs on D₀ (b = 0) or D₀ ∪ {canary} (b = 1), add/remove one unit.
    `noise_multiplier` None is the non-private twin (the same steps without noise). `unit`
    [1 + dim] (with ``canary="file"``) is the canary's input x."""
    trials = _check_trials(trials, canary, file=unit is not None)
    sgd = settings
    sgd.check()
    units = _units(sgd.background, 1, sgd.dim, canary, sgd.clip, rng, unit=unit)
    if not np.any(units[0]):
        raise ValueError("the canary unit is 0: its gradient moves nothing; give a nonzero unit")
    direction = units[0] / float(np.linalg.norm(units[0]))  # −(its gradient), normalised
    labels = rng.integers(0, 2, size=trials)
    scores = np.empty(trials)
    # one trainer call runs R trials; its forward pass is [R·n, R] (`TrialHeads`)
    cap = max(int(math.sqrt(_HEADS_FLOATS / units.shape[0])), 1)
    report = None
    for done, size in _trial_batches(trials, 1, min(batch or cap, cap), progress):
        member = np.ones((size, units.shape[0]), bool)
        member[:, 0] = labels[done : done + size] == 1
        disp, report = trainer_displacements(sgd, units, member, rng=rng)
        scores[done : done + size] = disp @ direction
    assert report is not None
    return AuditTrials.from_report(
        "dp-sgd" if sgd.noise_multiplier is not None else "sgd",
        report,
        scores,
        labels,
        delta=sgd.delta,
        params={
            "noise_multiplier": sgd.noise_multiplier,
            "sampling_rate": sgd.rate,
            "steps": sgd.steps,
            "clip": sgd.clip,
            "background_units": sgd.background,
            "canary": canary,
            "audited_release": "the final parameters of N DP-SGD steps (linear model)",
        },
    )


@dataclass
class OneRunAudit:
    """One run with m canaries: scores [m], inclusion bits [m], the k + k guesses and the bound."""

    scores: np.ndarray
    included: np.ndarray
    guesses: int
    correct: int
    epsilon_lower_bound: float
    epsilon_claimed: float
    delta: float
    report: PrivacyReport
    params: dict[str, Any]
    epsilon_ceiling: float = math.inf

    @property
    def verdict(self) -> str:
        """``violated`` (the bound exceeds the claim), ``cannot test this claim`` (even all r
        guesses right would not exceed it: the ceiling is at or below the claim), ``pass``, or
        ``no claim`` for a non-private twin (ε = ∞)."""
        return one_run_verdict(self.epsilon_lower_bound, self.epsilon_claimed, self.epsilon_ceiling)

    @classmethod
    def from_guesses(
        cls,
        scores: np.ndarray,
        included: np.ndarray,
        *,
        guesses: int,
        confidence: float,
        report: PrivacyReport,
        delta: float,
        params: dict[str, Any],
    ) -> OneRunAudit:
        """Guess "in" for the `guesses`/2 highest scores and "out" for the as many lowest,
        count the correct guesses and bound ε from below (Steinke et al. 2023, Thm. 3.3);
        the claimed ε is `report`'s own."""
        from privrl.audit.bounds import one_run_ceiling, one_run_epsilon

        order = np.argsort(scores, kind="mergesort")
        half = guesses // 2
        correct = int(included[order[-half:]].sum() + (~included[order[:half]]).sum())
        bound = one_run_epsilon(included.size, guesses, correct, delta, confidence)
        ceiling = one_run_ceiling(included.size, guesses, delta, confidence)
        return cls(
            scores=scores,
            included=included,
            guesses=guesses,
            correct=correct,
            epsilon_lower_bound=float(bound),
            epsilon_claimed=float(report.epsilon),
            delta=float(delta),
            report=report,
            params=params,
            epsilon_ceiling=float(ceiling),
        )

    def as_trials(self) -> AuditTrials:
        """The canaries as scored trials (score, inclusion bit), for the ROC plot."""
        return AuditTrials(
            system=self.params["system"],
            scores=self.scores,
            labels=self.included.astype(np.int64),
            epsilon_claimed=self.epsilon_claimed,
            delta=self.delta,
            report=self.report,
            params=self.params,
        )

    def metrics(self) -> dict[str, Any]:
        from privrl.audit.bounds import auc

        claimed = self.epsilon_claimed
        both = 0 < int(self.included.sum()) < self.included.size
        return {
            "system": self.params["system"],
            "mode": "one-run",
            "epsilon_claimed": claimed,
            "delta": self.delta,
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "epsilon_lower_bound_ci": {
                "confidence": self.params["confidence"],
                "low": self.epsilon_lower_bound,
                "high": None,
                "method": "Steinke, Nasr & Jagielski 2023, Theorem 3.3 (exact binomial tail)",
            },
            # the bound if every guess were right: no claim at or above it can be tested
            "epsilon_ceiling": self.epsilon_ceiling,
            "verdict": self.verdict,
            "canaries": int(self.included.size),
            "canaries_included": int(self.included.sum()),
            "guesses": self.guesses,
            "correct": self.correct,
            # the canaries' scores against their inclusion bits (all m, not only the guesses)
            "auc": auc(self.scores, self.included.astype(int)) if both else None,
            "trials": 1,
            "violated": bool(self.epsilon_lower_bound > claimed),
            "tightness": (self.epsilon_lower_bound / claimed)
            if math.isfinite(claimed) and claimed > 0
            else None,
        }


def one_run_verdict(bound: float, claimed: float, ceiling: float) -> str:
    """The verdict of a one-run audit (see `OneRunAudit.verdict`)."""
    if bound > claimed:
        return "violated"
    if not math.isfinite(claimed):
        return "no claim"
    return "cannot test this claim" if ceiling <= claimed else "pass"


def audit_dp_sgd_one_run(
    settings: DPSGDAuditSettings,
    *,
    canaries: int = 1000,
    guesses: int = 100,
    confidence: float = 0.95,
    canary: Canary = "worst",
    rng: np.random.Generator,
    units: np.ndarray | None = None,
) -> OneRunAudit:
    """ONE DP-SGD run with `canaries` canaries each included with probability ½; guess "in" for
    the `guesses`/2 highest and "out" for the `guesses`/2 lowest scores (Steinke et al. 2023,
    §6: abstaining on the middle is what makes the bound tight). `units` [canaries, 1 + dim]:
    the canaries of a ``--canary FILE`` (`privrl.audit.canary.load_gradient_canaries`)."""

    if units is not None:
        canary = "file"  # type: ignore[assignment]
    elif canary not in ("worst", "random"):
        raise ConfigError("canary", f"must be 'worst' or 'random', got {canary!r}")
    m, r = int(canaries), int(guesses)
    if m < 2 or not (2 <= r <= m) or r % 2:
        raise ValueError(
            f"need canaries >= 2 and an even guesses in [2, canaries], got m={m}, r={r}"
        )
    sgd = settings
    sgd.check()
    units = _units(sgd.background, m, sgd.dim, canary, sgd.clip, rng, unit=units)
    included = rng.integers(0, 2, size=m).astype(bool)
    member = np.ones((1, units.shape[0]), bool)
    member[0, :m] = included
    disp, report = trainer_displacements(sgd, units, member, rng=rng)
    norms = np.maximum(np.linalg.norm(units[:m], axis=1), 1e-300)
    scores = (units[:m] @ disp[0]) / norms  # projection on each canary's own direction
    return OneRunAudit.from_guesses(
        scores,
        included,
        guesses=r,
        confidence=confidence,
        report=report,
        delta=sgd.delta,
        params={
            "system": "dp-sgd" if sgd.noise_multiplier is not None else "sgd",
            "confidence": confidence,
            "noise_multiplier": sgd.noise_multiplier,
            "sampling_rate": sgd.rate,
            "steps": sgd.steps,
            "canary": canary,
        },
    )
