"""Auditing DP-SGD with worst-case gradient canaries (Jagielski et al. 2020; Nasr et al. 2021),
in many runs or in one run (Steinke, Nasr & Jagielski 2023).

The audited mechanism is expert-level DP-SGD as `privrl.expert.dpsgd` runs it (Algorithm 4):
every step Poisson-samples the units at rate q (`privrl.privacy.sampling.poisson_sample`),
clips each sampled unit's gradient to C jointly over all parameters
(`privrl.nn.per_example`, `privrl.privacy.clipping`), adds N(0, (zC)² I) to the sum
(`privrl.privacy.mechanisms.privatize_sum_torch`) and divides by the expected batch size b;
relation add/remove one unit, accounted as N × Poisson(q) ∘ Gaussian(z) by PLD
(`dpsgd.dp_sgd_release`). The model is linear, θ ∈ R^p with loss ℓ(θ, x) = −θ·x, so a unit's
gradient −x does not depend on θ: the adversary controls gradients directly — the "gradient
canary" of Nasr et al. 2021 §4 — and a trial of N steps reduces to sums that batch over trials.

Canary ``worst``: the canary's gradient is −c·e₀ with c > C (clipped to C·e₀ exactly), a
direction no other unit uses (the background's gradients live in coordinates 1..p−1). Score:
the projection of the final parameters' displacement θ_N − θ_0 = −(η/b)Σ_t g̃_t on the canary's
clipped gradient direction. With q = 1, N = 1 the release is one Gaussian of sensitivity C:
the closed-form worst case. ``random``: the canary is drawn from the background's generator.
``file``: the canary's input is the user's unit (`privrl.audit.canary.load_gradient_canary`).

One run (`audit_dp_sgd_one_run`): m canaries with orthogonal gradient directions e₀..e_{m−1},
each included independently with probability ½ in ONE run; score_j = displacement · e_j; guess
"in" for the k highest scores and "out" for the k lowest; the number of correct guesses gives
the ε lower bound of Steinke et al. 2023 (`privrl.audit.bounds.one_run_epsilon`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privrl.audit.attacks import AuditTrials, Canary, _check_trials, _trial_batches
from privrl.privacy.noise import NoiseSource
from privrl.privacy.report import PrivacyReport

__all__ = [
    "OneRunAudit",
    "audit_dp_sgd",
    "audit_dp_sgd_one_run",
    "dp_sgd_claimed",
    "dp_sgd_noise_multiplier",
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


def _linear_loss(params: dict[str, torch.Tensor], batch: torch.Tensor) -> torch.Tensor:
    return -(batch @ params["theta"])  # ℓ(θ, x) = −θ·x, per example


def _clipped_gradients(units: np.ndarray, clip: float) -> np.ndarray:
    """Each unit's clipped gradient [n, p]: the loss's per-example gradients
    (`nn.per_example.per_example_grads`) clipped by `privacy.clipping.clip_rows` (C, joint)."""
    from privrl.nn.per_example import per_example_grads
    from privrl.privacy.clipping import clip_rows

    params = {"theta": torch.zeros(units.shape[1], dtype=torch.float64)}
    batch = torch.as_tensor(units, dtype=torch.float64)
    grads = per_example_grads(_linear_loss, params, batch, method="vmap")["theta"]
    return np.asarray(clip_rows(grads.detach().numpy(), clip).clipped, dtype=np.float64)


@dataclass(frozen=True)
class _DpSgd:
    """The audited DP-SGD run: sampling rate q, N steps, noise multiplier z (None: the
    non-private twin, no noise), clip C, step size lr."""

    rate: float
    steps: int
    noise_multiplier: float | None
    clip: float
    lr: float

    def check(self, background: int, dim: int) -> None:
        if not 0.0 < self.rate <= 1.0:
            raise ValueError(f"--rate must be in (0, 1], got {self.rate}")
        if self.steps < 1 or background < 0 or dim < 1:
            raise ValueError(f"need --steps >= 1, --background >= 0, dim >= 1 (steps={self.steps})")
        for name, v in (("clip", self.clip), ("lr", self.lr)):
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"--{name} must be finite and > 0, got {v}")

    def claimed(self, units: np.ndarray, delta: float) -> PrivacyReport:
        """`dp_sgd_claimed` for the `units` [n, p] of the audit."""
        return dp_sgd_claimed(
            noise_multiplier=self.noise_multiplier,
            rate=self.rate,
            steps=self.steps,
            delta=delta,
            params=units.shape[1],
            units=units.shape[0],
            clip=self.clip,
        )

    def displacements(
        self,
        grads: np.ndarray,
        member: np.ndarray,
        *,
        rng: np.random.Generator,
        generator: np.random.Generator,
    ) -> np.ndarray:
        """θ_N − θ_0 [runs, p] of `runs` independent DP-SGD runs on the units whose `member`
        [runs, n] is True. Sampling: `poisson_sample` over all (run, step, unit) slots at
        once (each joins independently with probability q); noise: one `privatize_sum_torch`
        call."""
        from privrl.privacy.mechanisms import privatize_sum_torch
        from privrl.privacy.sampling import poisson_sample

        runs, n = member.shape
        joined = np.zeros(runs * self.steps * n, bool)
        joined[poisson_sample(runs * self.steps * n, self.rate, rng)] = True
        joined = joined.reshape(runs, self.steps, n) & member[:, None, :]
        sums = np.einsum("rtn,np->rtp", joined.astype(np.float64), grads)  # Σ_i clipped g_i
        if self.noise_multiplier is not None:
            noisy, _ = privatize_sum_torch(
                torch.as_tensor(sums),
                clip_norm=self.clip,
                noise_multiplier=self.noise_multiplier,
                generator=generator,
                name="DP-SGD steps (audit)",
            )
            sums = noisy.numpy()  # type: ignore[union-attr]
        b = max(round(self.rate * n), 1)  # expected batch size (Algorithm 4, line 8)
        return -(self.lr / b) * sums.sum(axis=1)


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
    dim). Worst: canary j is 2C·e_j, the background lives in the last `dim` coordinates. File:
    canary j is row j of `unit` [canaries, 1 + dim] (`privrl.audit.canary`), its first input
    on its own coordinate j and the rest on the background's `dim`, the background as for
    worst. Random: every row, canary or background, from the same generator (N(0, C²/p) on
    the first `canaries` coordinates, N(0, C²) on the last `dim`)."""
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
        can = 2.0 * clip * np.eye(canaries, p)
    return np.vstack([can, bg])


def audit_dp_sgd(
    *,
    noise_multiplier: float | None,
    rate: float = 1.0,
    steps: int = 1,
    delta: float = 1e-5,
    clip: float = 1.0,
    lr: float = 1.0,
    background: int = 10,
    dim: int = 2,
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
    sgd = _DpSgd(rate=rate, steps=steps, noise_multiplier=noise_multiplier, clip=clip, lr=lr)
    sgd.check(background, dim)
    units = _units(background, 1, dim, canary, clip, rng, unit=unit)
    grads = _clipped_gradients(units, clip)
    if not np.any(grads[0]):
        raise ValueError("the canary unit is 0: its gradient moves nothing; give a nonzero unit")
    direction = -grads[0] / max(float(np.linalg.norm(grads[0])), 1e-300)
    # Synthetic canaries and background: the audit's noise and sampling repeat from its seed.
    noise = NoiseSource.insecure(rng)
    generator, sampler = noise.generator("audit noise"), noise.generator("audit sampling")
    labels = rng.integers(0, 2, size=trials)
    scores = np.empty(trials)
    for done, size in _trial_batches(
        trials, steps * (units.shape[0] + units.shape[1]), batch, progress
    ):
        member = np.ones((size, units.shape[0]), bool)
        member[:, 0] = labels[done : done + size] == 1
        disp = sgd.displacements(grads, member, rng=sampler, generator=generator)
        scores[done : done + size] = disp @ direction
    report = sgd.claimed(units, delta)
    return AuditTrials.from_report(
        "dp-sgd" if noise_multiplier is not None else "sgd",
        report,
        scores,
        labels,
        delta=delta,
        params={
            "noise_multiplier": noise_multiplier,
            "sampling_rate": rate,
            "steps": steps,
            "clip": clip,
            "background_units": background,
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
        from privrl.audit.bounds import one_run_epsilon

        order = np.argsort(scores, kind="mergesort")
        half = guesses // 2
        correct = int(included[order[-half:]].sum() + (~included[order[:half]]).sum())
        bound = one_run_epsilon(included.size, guesses, correct, delta, confidence)
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


def audit_dp_sgd_one_run(
    *,
    noise_multiplier: float | None,
    canaries: int = 1000,
    guesses: int = 100,
    rate: float = 1.0,
    steps: int = 1,
    delta: float = 1e-5,
    clip: float = 1.0,
    lr: float = 1.0,
    background: int = 10,
    dim: int = 2,
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
        raise ValueError(f"--canary must be 'worst' or 'random', got {canary!r}")
    m, r = int(canaries), int(guesses)
    if m < 2 or not (2 <= r <= m) or r % 2:
        raise ValueError(f"need --canaries >= 2 and an even --guesses in [2, canaries], got {r}")
    sgd = _DpSgd(rate=rate, steps=steps, noise_multiplier=noise_multiplier, clip=clip, lr=lr)
    sgd.check(background, dim)
    units = _units(background, m, dim, canary, clip, rng, unit=units)
    grads = _clipped_gradients(units, clip)
    included = rng.integers(0, 2, size=m).astype(bool)
    member = np.ones((1, units.shape[0]), bool)
    member[0, :m] = included
    noise = NoiseSource.insecure(rng)  # synthetic canaries: repeatable from the audit's seed
    disp = sgd.displacements(
        grads, member, rng=noise.generator("audit sampling"), generator=noise.generator("audit")
    )[0]
    norms = np.maximum(np.linalg.norm(grads[:m], axis=1), 1e-300)
    scores = -(grads[:m] @ disp) / norms  # projection on each canary's own direction
    report = sgd.claimed(units, delta)
    return OneRunAudit.from_guesses(
        scores,
        included,
        guesses=r,
        confidence=confidence,
        report=report,
        delta=delta,
        params={
            "system": "dp-sgd" if noise_multiplier is not None else "sgd",
            "confidence": confidence,
            "noise_multiplier": noise_multiplier,
            "sampling_rate": rate,
            "steps": steps,
            "canary": canary,
        },
    )
