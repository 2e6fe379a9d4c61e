"""Privatizers: one interface that turns a batch of users' statistics into private counts.

Every privatizer returns `PrivateCounts`: ñ_h(s,a), ñ_h(s,a,s'), r̃_h(s,a) and the uniform
error bound E of the Privatizer assumption (Qiao & Wang 2023; Bai et al. 2024, Assumption 4):
with probability ≥ 1 − β, for every counter |ñ − n| ≤ E, ñ_h(s,a,s') > 0 and
ñ_h(s,a) = Σ_{s'} ñ_h(s,a,s') ≥ n_h(s,a).

Post-processing (`consistent_counts`). If every raw noisy count is within E/4 of the truth,
the true counts are feasible for the projection (3–4) with slack E/4, so its solution x*
satisfies |Σx* − n(s,a)| ≤ E/2; the shift ñ(s,a,s') = x* + E/(2S), ñ(s,a) = Σx* + E/2 then
never underestimates n(s,a), keeps ñ(s,a) = Σ_{s'} ñ(s,a,s') and stays within E. The raw noise
bound e is therefore computed per mechanism and E = 4e. The one projection of the project,
`privrl.rl.projection.project_counts`, is used.

Models (every noise draw happens in `privrl.privacy`):

* `ShufflePrivatizer` — one shuffle binary summation per counter (`privacy.shuffle`), budget
  ε' = ε/(6H), δ' = δ/(6H) per counter: a replaced user changes ≤ 2H counters per family by 1,
  so each family is (ε/3, δ/3)-DP by basic composition and the three families (ε, δ)-DP. Each
  user belongs to one batch only; batches are disjoint, so the whole run is (ε, δ)-DP for any
  one user (M-batch SDP, Cheu et al. 2019) — the report lists the releases of one batch.
* `CentralPrivatizer` — a trusted server releases running counts with the binary-tree
  mechanism (`privacy.tree`), one tree over all counters, L1 sensitivity 6H per step (2H per
  family), b = L·6H/ε: ε-DP for the stream of counts, hence ε-JDP for the policies (Billboard
  lemma, Hsu et al. 2014).
* `LocalPrivatizer` — each user adds Laplace(2H/(ε/3)) = Laplace(6H/ε) to each of its
  indicators (`privacy.shuffle.LaplaceRandomizer`), ε/3-LDP per family, ε-LDP in total; the
  server sums the messages.
* `IdentityPrivatizer` — the non-private versions (E = 0, ñ = n).

Budget split note: the local scale is often written Laplace(2H/ε) per family and the central
ε' = ε/(2H·log K) per counter; we split ε over the three families (ε/3 each), as the shuffle
privatizer does, so that every model's report states the same total ε.

Batch privatizers (shuffle, identity) release the counts of one batch ("forgetting": SDP-PE
estimates from its own batches only). Streaming privatizers (central, local, identity with
``cumulative=True``) are called once per episode with that episode's counts (leading axis =
independent runs) and return private counts of all episodes so far.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from dp_accounting import dp_event

from privrl.arrays import FloatArray
from privrl.online.common import Counts
from privrl.privacy.events import ApproxDpEvent
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.shuffle import (
    BinarySumCalibration,
    Calibration,
    LaplaceRandomizer,
    aggregate_binary_sum,
    binary_sum_error_bound,
    calibrate_binary_sum,
)
from privrl.privacy.tree import BinaryTreeMechanism, laplace_sum_bound
from privrl.rl.projection import project_counts

__all__ = [
    "PRIVATIZERS",
    "RELATION",
    "UNIT",
    "CentralPrivatizer",
    "IdentityPrivatizer",
    "LocalPrivatizer",
    "PrivateCounts",
    "Privatizer",
    "RowFilter",
    "ShufflePrivatizer",
    "consistent_counts",
]

UNIT = "user"  # one user = one episode in online RL
RELATION = "replace_one"
PRIVATIZERS = ("shuffle", "central", "local", "none")
_FAMILIES = ("n_sa", "n_sas", "r_sum")
_FAMILY_NAMES = {
    "n_sa": "visit counts n_h(s,a)",
    "n_sas": "transition counts n_h(s,a,s')",
    "r_sum": "reward sums r_h(s,a) (binary rewards)",
}


@dataclass(frozen=True)
class PrivateCounts:
    """Private statistics (ñ_h(s,a), ñ_h(s,a,s'), r̃_h(s,a)) and the error bound E (0 when not
    private). ``e_raw`` is the bound on the raw noise of every counter (E/4 when private)."""

    n_sa: FloatArray
    n_sas: FloatArray
    r_sum: FloatArray
    E: float
    e_raw: float = 0.0


RowFilter = Callable[[FloatArray, float], npt.NDArray[np.bool_]]


def consistent_counts(
    n_sa_raw: FloatArray,
    n_sas_raw: FloatArray,
    E: float,
    rows: RowFilter | None = None,
) -> tuple[FloatArray, FloatArray]:
    """(ñ(s,a), ñ(s,a,s')) from raw noisy counts: projection (3–4) with slack E/4, then the
    shift x* + E/(2S), Σx* + E/2. Raw totals are clipped at 0 first (the truth is ≥ 0, so
    clipping never moves a total away from it).

    ``rows`` (optional, a speed-up for learners that ignore rows with too little data): called
    with the upper bound ñ⁺(s,a) = max(n̂(s,a), 0) + 3E/4 ≥ ñ(s,a) and E, it returns the mask
    of rows to post-process; the other rows are returned as ñ(s,a) = ñ⁺(s,a),
    ñ(s,a,s') = ñ⁺(s,a)/S (consistent, never below n(s,a), but not projected: a caller that
    asks for this must not use their transitions).
    """
    if E <= 0:
        return n_sa_raw, n_sas_raw
    S = n_sas_raw.shape[-1]
    clipped = np.maximum(n_sa_raw, 0.0)
    if rows is None:
        proj = project_counts(n_sas_raw, clipped, E / 4.0)
        return proj.x.sum(axis=-1) + E / 2.0, proj.x + E / (2.0 * S)
    upper = clipped + 0.75 * E
    mask = np.asarray(rows(upper, E), dtype=bool)
    n_sa = upper.copy()
    n_sas = np.repeat((upper / S)[..., None], S, axis=-1)
    if mask.any():
        proj = project_counts(n_sas_raw[mask], clipped[mask], E / 4.0)
        n_sas[mask] = proj.x + E / (2.0 * S)
        n_sa[mask] = proj.x.sum(axis=-1) + E / 2.0
    return n_sa, n_sas


def _check_budget(epsilon: float, beta: float, delta: float | None = None) -> None:
    """A privatizer's ε is finite and > 0, its δ (where it has one) in (0, 1) and the
    utility failure probability β in (0, 1)."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
    if delta is not None and not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if not 0 < beta < 1:
        raise ValueError(f"beta must be in (0, 1), got {beta}")


class Privatizer(ABC):
    """Turns users' counts into `PrivateCounts`; ``model`` is the trust model, ``cumulative``
    says whether `release` returns the counts of all users so far (streaming) or of this batch."""

    model: str
    cumulative: bool

    @abstractmethod
    def release(
        self,
        counts: Counts,
        *,
        n_users: int = 1,
        layers: Sequence[int] | None = None,
        rewards: bool = True,
        rows: RowFilter | None = None,
    ) -> PrivateCounts:
        """Private counts of ``counts`` (a batch of ``n_users`` users; for streaming privatizers
        one episode per run). ``layers``/``rewards`` restrict what a batch release contains
        (crude exploration releases layer h's visit and transition counts only); ``rows`` is
        passed to `consistent_counts`."""

    @abstractmethod
    def report(self, *, system: str) -> PrivacyReport:
        """The run's privacy report (unit: user, relation: replace one)."""

    def describe(self) -> dict[str, Any]:
        return {"model": self.model}


# ---------------------------------------------------------------------------------------------
# identity
# ---------------------------------------------------------------------------------------------


class IdentityPrivatizer(Privatizer):
    """No privacy: ñ = n, E = 0 (PE, UCB-VI). ``cumulative`` sums all calls."""

    model = "none"

    def __init__(self, *, cumulative: bool = False) -> None:
        self.cumulative = cumulative
        self._total: Counts | None = None

    def release(
        self,
        counts: Counts,
        *,
        n_users: int = 1,
        layers: Sequence[int] | None = None,
        rewards: bool = True,
        rows: RowFilter | None = None,
    ) -> PrivateCounts:
        if self.cumulative:
            self._total = counts if self._total is None else self._total + counts
            counts = self._total
        return PrivateCounts(counts.n_sa, counts.n_sas, counts.r_sum, 0.0, 0.0)

    def report(self, *, system: str) -> PrivacyReport:
        return PrivacyReport.non_private(
            UNIT, RELATION, system=system, notes=["non-private baseline: raw counts are used"]
        )


# ---------------------------------------------------------------------------------------------
# shuffle
# ---------------------------------------------------------------------------------------------


class ShufflePrivatizer(Privatizer):
    """Shuffle-model Privatizer of SDP-PE: each counter of a batch by shuffle binary summation.

    ``n_releases`` (the number of batches the run will privatise) and ``beta`` set the utility
    union bound: every counter of every release is within e_raw w.p. ≥ 1 − β.
    """

    model = "shuffle"
    cumulative = False

    def __init__(
        self,
        H: int,
        S: int,
        A: int,
        *,
        epsilon: float,
        delta: float,
        rng: np.random.Generator,
        calibration: Calibration = "tight",
        beta: float = 0.1,
        n_releases: int = 1,
    ) -> None:
        _check_budget(epsilon, beta, delta)
        if calibration not in ("tight", "theory"):
            raise ValueError(f"calibration must be 'tight' or 'theory', got {calibration!r}")
        self.H, self.S, self.A = H, S, A
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.eps_counter = self.epsilon / (6 * H)  # ε' = ε/(6H)
        self.delta_counter = self.delta / (6 * H)  # δ' = δ/(6H)
        self.calibration_mode = calibration
        self.beta = float(beta)
        self.n_releases = max(1, int(n_releases))
        self.rng = rng
        self.batches: list[dict[str, Any]] = []

    def calibration(self, n_users: int) -> BinarySumCalibration:
        return calibrate_binary_sum(
            self.eps_counter,
            self.delta_counter,
            n_users,
            self.calibration_mode,  # type: ignore[arg-type]
        )

    def release(
        self,
        counts: Counts,
        *,
        n_users: int = 1,
        layers: Sequence[int] | None = None,
        rewards: bool = True,
        rows: RowFilter | None = None,
    ) -> PrivateCounts:
        H, S, A = self.H, self.S, self.A
        hs = list(range(H)) if layers is None else sorted(int(h) for h in layers)
        cal = self.calibration(int(n_users))
        n_counters = len(hs) * S * A * (S + (2 if rewards else 1))
        beta_counter = self.beta / self.n_releases / n_counters
        e_raw = binary_sum_error_bound(cal, beta_counter)
        E = 4.0 * e_raw
        changed = 2 * len(hs)  # a replaced user moves ≤ 2 counters per released layer
        n_sa_raw, _ = aggregate_binary_sum(
            counts.n_sa[hs], cal, self.rng, name="n_sa", coordinates_changed=changed
        )
        n_sas_raw, _ = aggregate_binary_sum(
            counts.n_sas[hs], cal, self.rng, name="n_sas", coordinates_changed=changed
        )
        n_sa_l, n_sas_l = consistent_counts(n_sa_raw, n_sas_raw, E)
        n_sa, n_sas = np.zeros((H, S, A)), np.zeros((H, S, A, S))
        r_sum = np.zeros((H, S, A))
        n_sa[hs], n_sas[hs] = n_sa_l, n_sas_l
        if rewards:
            r_raw, _ = aggregate_binary_sum(
                counts.r_sum[hs], cal, self.rng, name="r_sum", coordinates_changed=changed
            )
            r_sum[hs] = r_raw
        self.batches.append(
            {
                "n_users": int(n_users),
                "layers": len(hs),
                "families": 3 if rewards else 2,
                "bits_per_user": cal.bits_per_user,
                "p": cal.p,
                "trials": cal.trials,
                "variance": cal.variance,
                "delta_exact": cal.delta_exact,
                "E": E,
            }
        )
        return PrivateCounts(n_sa, n_sas, r_sum, E, e_raw)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "epsilon_counter": self.eps_counter,
            "delta_counter": self.delta_counter,
            "calibration": self.calibration_mode,
        }

    def report(self, *, system: str) -> PrivacyReport:
        """Releases of one batch (the worst one: all H layers, three families, the largest exact
        δ of any batch); batches hold disjoint users, so this is the whole run's guarantee."""
        H = self.H
        delta_exact = max((b["delta_exact"] for b in self.batches), default=0.0)
        variances = [b["variance"] for b in self.batches] or [0.0]
        releases = []
        for fam in _FAMILIES:
            size = H * self.S * self.A * (self.S if fam == "n_sas" else 1)
            base = ApproxDpEvent(epsilon=self.eps_counter, delta=delta_exact)
            releases.append(
                Release(
                    name=f"{_FAMILY_NAMES[fam]} of one batch (shuffle binary sum per counter)",
                    mechanism="shuffle_binary_sum",
                    sensitivity=1.0,
                    norm="linf",
                    noise={
                        "epsilon_counter": self.eps_counter,
                        "delta_counter": self.delta_counter,
                        "delta_exact_max": delta_exact,
                        "variance_min": min(variances),
                        "variance_max": max(variances),
                    },
                    count=1,
                    size=size,
                    event=dp_event.SelfComposedDpEvent(base, 2 * H),
                    extra={
                        "counters_changed": 2 * H,
                        "calibration": self.calibration_mode,
                        "batches": self.batches,
                    },
                )
            )
        notes = [
            f"shuffle model: each user's local randomizer sends its bit plus Ber(p) noise bits "
            f"per counter; a trusted shuffler permutes a batch; the agent sees only the sums. "
            f"Per counter (ε', δ') = ({self.eps_counter:.4g}, {self.delta_counter:.3g}) "
            f"[ε/(6H), δ/(6H)], δ verified exactly (hockey-stick divergence of the binomial)",
            f"calibration: {self.calibration_mode} "
            + (
                "(smallest binomial meeting δ' exactly)"
                if self.calibration_mode == "tight"
                else "(Balcer–Cheu λ = 50 ln(2/δ')/ε'²)"
            ),
            f"{len(self.batches)} batches of disjoint users (M-batch SDP): the releases listed "
            "are one batch's; a user is in one batch only, so this is the whole run's guarantee",
            "the policies are post-processing of the shuffled outputs, so the run is also "
            "(ε, δ)-JDP (Billboard lemma)",
        ]
        return PrivacyReport.build(
            UNIT,
            RELATION,
            releases,
            self.delta,
            system=system,
            model="shuffle",
            notes=notes,
            public=["batch sizes and stage schedule", "start state and reachable (h, s) structure"],
        )


# ---------------------------------------------------------------------------------------------
# streaming: central (binary tree) and local (Laplace randomizer)
# ---------------------------------------------------------------------------------------------


def _flatten(counts: Counts, runs: int) -> FloatArray:
    return np.concatenate(
        [
            counts.n_sa.reshape(runs, -1),
            counts.n_sas.reshape(runs, -1),
            counts.r_sum.reshape(runs, -1),
        ],
        axis=1,
    )


class _StreamingPrivatizer(Privatizer):
    cumulative = True

    model: str

    def __init__(
        self,
        H: int,
        S: int,
        A: int,
        *,
        epsilon: float,
        episodes: int,
        rngs: Sequence[np.random.Generator],
        beta: float = 0.1,
    ) -> None:
        """`rngs`: one generator per parallel run (the runs share nothing)."""
        _check_budget(epsilon, beta)
        self.H, self.S, self.A = H, S, A
        self.epsilon = float(epsilon)
        self.episodes = int(episodes)
        self.beta = float(beta)
        self.rngs = list(rngs)
        self.runs = len(self.rngs)
        self.d_sa = H * S * A
        self.dim = 2 * self.d_sa + self.d_sa * S
        # union bound over every counter of every release (one release per episode)
        self.beta_counter = self.beta / (self.episodes * self.dim)
        self.t = 0
        self._start()

    def _start(self) -> None:
        """The mechanism's own state, once the common fields are set."""

    def _split(self, raw: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        H, S, A, R = self.H, self.S, self.A, self.runs
        d = self.d_sa
        return (
            raw[:, :d].reshape(R, H, S, A),
            raw[:, d : d + d * S].reshape(R, H, S, A, S),
            raw[:, d + d * S :].reshape(R, H, S, A),
        )

    @abstractmethod
    def _noisy_prefix(self, x: FloatArray) -> FloatArray: ...

    @abstractmethod
    def _raw_bound(self) -> float: ...

    def release(
        self,
        counts: Counts,
        *,
        n_users: int = 1,
        layers: Sequence[int] | None = None,
        rewards: bool = True,
        rows: RowFilter | None = None,
    ) -> PrivateCounts:
        if layers is not None or not rewards:
            raise ValueError("streaming privatizers release every layer and family")
        self.t += 1
        raw = self._noisy_prefix(_flatten(counts, self.runs))
        n_sa_raw, n_sas_raw, r_raw = self._split(raw)
        e_raw = self._raw_bound()
        E = 4.0 * e_raw
        n_sa, n_sas = consistent_counts(n_sa_raw, n_sas_raw, E, rows)
        return PrivateCounts(n_sa, n_sas, r_raw, E, e_raw)

    def _family_report(
        self, release: Callable[[str, int], Release], notes: list[str], *, system: str
    ) -> PrivacyReport:
        """The report of one release per count family (ε/3 each): `release(family, size)`."""
        releases = [release(f, self.d_sa * (self.S if f == "n_sas" else 1)) for f in _FAMILIES]
        return PrivacyReport.build(
            UNIT, RELATION, releases, 0.0, system=system, model=self.model, notes=notes
        )


class CentralPrivatizer(_StreamingPrivatizer):
    """Trusted server, binary-tree mechanism on the running counts (ε-DP stream ⇒ ε-JDP)."""

    model = "central"

    def _start(self) -> None:
        self.tree = BinaryTreeMechanism(
            (self.runs, self.dim),
            self.episodes,
            l1_sensitivity=6.0 * self.H,  # 2H per family, three families
            epsilon=self.epsilon,
            rngs=self.rngs,
        )

    def _noisy_prefix(self, x: FloatArray) -> FloatArray:
        return self.tree.step(x)

    def _raw_bound(self) -> float:
        return self.tree.error_bound(self.beta_counter, self.t)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "epsilon": self.epsilon,
            "tree_levels": self.tree.levels,
            "laplace_scale": self.tree.scale,
        }

    def report(self, *, system: str) -> PrivacyReport:
        notes = [
            f"central model (trusted server): binary-tree mechanism over {self.episodes} "
            f"episodes, {self.tree.levels} levels, Laplace scale {self.tree.scale:.4g} per node; "
            "ε/3 per family",
            "the policy of user k depends only on the counts released before k: the run is "
            "ε-JDP (Billboard lemma)",
        ]
        return self._family_report(
            lambda f, size: self.tree.release(
                f"running {_FAMILY_NAMES[f]} (binary-tree mechanism)",
                size=size,
                l1_sensitivity=2.0 * self.H,
            ),
            notes,
            system=system,
        )


class LocalPrivatizer(_StreamingPrivatizer):
    """Each user randomizes its own indicators with Laplace(6H/ε) (ε-LDP); the server sums."""

    model = "local"

    def __init__(self, H: int, S: int, A: int, *, chunk: int = 512, **stream: Any) -> None:
        """`chunk`: users' noise drawn per block; `stream`: `_StreamingPrivatizer`'s keywords
        (epsilon, episodes, rngs, beta)."""
        super().__init__(H, S, A, **stream)
        self.randomizer = LaplaceRandomizer.for_epsilon(self.epsilon, 6.0 * H)
        self.chunk = int(chunk)
        self._exact = np.zeros((self.runs, self.dim))
        self._noise_sum = np.zeros((self.runs, self.dim))
        self._buffer = np.empty(0)
        self._pos = 0

    @property
    def scale(self) -> float:
        return self.randomizer.scale

    def _noisy_prefix(self, x: FloatArray) -> FloatArray:
        if self._pos >= self.chunk or self._buffer.size == 0:
            self._buffer = np.empty((self.runs, self.chunk, self.dim))
            for r, g in enumerate(self.rngs):  # run r: one block from its own generator
                self._buffer[r] = self.randomizer.noise((self.chunk, self.dim), g)
            self._pos = 0
        self._exact += x
        self._noise_sum += self._buffer[:, self._pos]  # this user's message noise
        self._pos += 1
        return self._exact + self._noise_sum

    def _raw_bound(self) -> float:
        return laplace_sum_bound(self.scale, self.t, self.beta_counter)

    def describe(self) -> dict[str, Any]:
        return {"model": self.model, "epsilon": self.epsilon, "laplace_scale": self.scale}

    def report(self, *, system: str) -> PrivacyReport:
        per_family = LaplaceRandomizer(self.scale, 2.0 * self.H)  # ε/3 each
        notes = [
            f"local model: each user adds Laplace({self.scale:.4g}) = Laplace(6H/ε) to each of "
            "its indicators before sending (ε/3-LDP per family, ε-LDP in total); no trusted party",
        ]
        return self._family_report(
            lambda f, size: per_family.release(
                f"{_FAMILY_NAMES[f]} indicators of each user (local Laplace randomizer)",
                size=size,
                users=self.t,
            ),
            notes,
            system=system,
        )
