"""VAPVI (Yin et al. 2022) and DP-VAPVI (Qiao & Wang, Algorithm 2) for linear MDPs.

Variance-aware pessimistic value iteration, backwards over h = H..1 (``h = H-1..0`` in code):

* lines 4–8: ridge-regress ``Ṽ_{h+1}²`` and ``Ṽ_{h+1}`` on φ over the variance data D' to get
  ``σ̃_h² = max{1, Var̃_h Ṽ_{h+1}}``;
* lines 9–10: variance-weighted ridge regression of ``r + Ṽ_{h+1}(s')`` on φ over D;
* lines 11–14: ``Q̂_h = min{φᵀw̃_h − Γ_h, H−h+1}⁺`` with ``Γ_h = C·√d·‖φ‖_{Λ̃_h⁻¹} + D/K``,
  greedy ``π̂_h``, ``Ṽ_h = max_a Q̂_h``.

DP-VAPVI privatises the five sums of step h (lines 4, 5, 6, 9, 10) — 5H releases of
``ρ0 = ρ/(5H)``-zCDP each, fresh noise per h, composed adaptively:

==========================  ========================  ======================
statistic (step h)          noise                     replace-one sensitivity
==========================  ========================  ======================
Σ φ̄ Ṽ_{h+1}(s̄')²           N(0, 2H⁴/ρ0 · I)          2H²  (ℓ2)
Σ φ̄ Ṽ_{h+1}(s̄')            N(0, 2H²/ρ0 · I)          2H   (ℓ2)
Σ φ (r + Ṽ_{h+1}(s'))/σ̃²    N(0, 2H²/ρ0 · I)          2H   (ℓ2)
Σ φ̄φ̄ᵀ, Σ φφᵀ/σ̃²           (Z + Zᵀ)/√2, Z ~ N(0, s²)  √2   (Frobenius)
==========================  ========================  ======================

Why these bounds hold: every trajectory contributes exactly one (or, if it ended early, no)
transition at step h — for any data, by the public rules of `privrl.offline.common` (H is
public and longer episodes are truncated to it; steps outside the table are masked);
``‖φ‖ ≤ 1``, ``σ̃² ≥ 1``, ``r ∈ [0,1]`` (rewards are clipped to the public range
[LOW, HIGH] and mapped into [0, 1], `privrl.offline.common.RewardRange`),
``Ṽ_{h+1} ∈ [0, H−h]`` (values are clipped), so one term has norm ≤ H², H, H, and replacing it
moves the sum by at most twice that. For the Gram matrices, ``‖φφᵀ − ψψᵀ‖_F² = ‖φ‖⁴ + ‖ψ‖⁴ −
2(φᵀψ)² ≤ 2``. Ṽ_{h+1} and σ̃_h are functions of earlier releases only (post-processing).

**Stationary pooling** (``stationary=True``, `privrl train ... --stationary`): one model for
every step, so each sum of step h runs over the transitions of *all* steps (the regression
target still uses Ṽ_{h+1}; `privrl.data.padding.step_rows`). A trajectory then adds up to
H terms to one sum (``T = H`` = `entries_per_trajectory`, the declared H), so every
sensitivity above is multiplied by H — 2H³, 2H², 2H² (ℓ2) and √2·H (Frobenius: the difference
of two PSD sums of H terms of Frobenius norm ≤ 1 each has ‖A − B‖_F² ≤ ‖A‖_F² + ‖B‖_F² ≤ 2H²)
— and so is every noise std (σ and s, hence E): the same ρ0 = ρ/(5H) per release, the same
planned report, H times the noise on sums of up to H times as many terms.

**Rewards of any sign.** The regression runs on the mapped rewards u = (r − LOW)/(HIGH − LOW)
∈ [0, 1] (so every bound above holds as stated), and a transition into a terminal state
continues with the value of the user's reward 0 over the remaining steps,
Ṽ_{h+1}(terminal) = (H − h − 1)·(−LOW/(HIGH − LOW)) ∈ [0, H − h − 1] in mapped units (0 for the
default [0, 1]): every trajectory then has H steps of mapped reward, values are an increasing
affine function of the user's, V_h = (HIGH − LOW)·V^u_h + (H − h)·LOW, and the learner
optimises the user's objective; a terminal value of 0 in mapped units would instead charge
every step after termination LOW (for costs, finishing early would cost the most). The
outputs (`privrl.offline.linear`) report values on the original scale.

**Matrix noise** (a design decision). ``(Z+Zᵀ)/√2`` with ``Z_ij ~ N(0, s²)`` is
``‖Δ‖_F²/(4s²)``-zCDP. Algorithm 2's ``s² = 1/(4ρ0)`` (``matrix_noise="paper_exact"``) is
therefore ρ0-zCDP for add/remove (‖Δ‖_F ≤ 1) but costs 2ρ0 per Gram release under
replace-one (the run is then ``7ρ/5``-zCDP, and the report says so). The default ``"strict"``
uses ``s² = 1/(2ρ0)``: ρ0 per release, ρ in total. The PD shift
``E = 2√2·s·(2√d + √(2 log(2H/δ)))`` (= ``√(10H/ρ)(2√d + √(2 log(2H/δ)))`` for paper_exact;
×√2 for strict) bounds ``‖(Z+Zᵀ)/√2‖ ≤ E/2`` for all 2H matrices w.p. ≥ 1−δ (Gordon's bound
``E‖Z‖ ≤ 2√d s`` plus Gaussian concentration with Lipschitz constant √2·s, union bound).
If a noisy matrix still has an eigenvalue below λ it is clipped at λ (post-processing).

**Other decisions**: λ = 1; the additive ``D/K`` (DP-VAPVI) and ``2H³√d/K`` (VAPVI)
bonus terms exceed H at this scale and would zero every Q, so they are 0 by default
(``additive_bonus`` restores a numerator D); ``bonus_scale`` is the common multiplier C; no data
split by default (D' = D, as in the paper's experiment), ``split=True`` halves the data.
Non-private VAPVI is this same code with the releaser switched off.

Settings: `VAPVIConfig` and `DPVAPVIConfig` (and `privrl.offline.pevi.PEVIConfig`, all on
`LinearConfig`) hold every setting of a run; the objects `privrl.offline.VAPVI`, `DPVAPVI`
and `PEVI` (`privrl.offline.linear`) plan and fit with them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
from dp_accounting import dp_event
from scipy import linalg

from privrl.arrays import FloatArray, IntArray
from privrl.config import Config, check, option
from privrl.data.dataset import DatasetError
from privrl.data.padding import entries_per_trajectory, step_rows
from privrl.offline.common import (
    DATA_RULES,
    Names,
    RewardRange,
    as_indices,
    check_budget,
    check_nonnegative,
    check_reward_range,
    clip_rewards,
    refuse_declared_units,
    reward_range_option,
    stationary_option,
    without_keyless_defaults,
)
from privrl.policies import TabularPolicy
from privrl.privacy.accounting import zcdp_to_dp
from privrl.privacy.mechanisms import gaussian_mechanism, gaussian_symmetric_matrix
from privrl.privacy.noise import noise_generator
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit
from privrl.rl.tabular_policy import GreedyTableActions

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset

__all__ = [
    "MATRIX_NOISE_MODES",
    "RELATION",
    "UNIT",
    "DPVAPVIConfig",
    "FeatureTable",
    "GaussianReleaser",
    "LinearConfig",
    "LinearEpisodes",
    "LinearGreedyPolicy",
    "LinearPVIResult",
    "NonPrivateReleaser",
    "VAPVIConfig",
    "dp_vapvi",
    "dp_vapvi_planned_event",
    "dp_vapvi_planned_report",
    "gram_shift",
    "load_policy",
    "matrix_noise_std",
    "theory_additive_bonus",
    "vapvi",
    "variance_aware_pvi",
    "variance_statistics",
    "weighted_statistics",
]

MatrixNoise = Literal["strict", "paper_exact"]
MATRIX_NOISE_MODES: tuple[str, ...] = ("strict", "paper_exact")
UNIT = PrivacyUnit.TRAJECTORY
RELATION = NeighbourRelation.REPLACE_ONE
GRAM_SENSITIVITY = math.sqrt(2.0)  # ‖φφᵀ − ψψᵀ‖_F ≤ √2 for ‖φ‖, ‖ψ‖ ≤ 1
N_RELEASES_PER_STEP = 5
_NORM_ATOL = 1e-12
POLICY_KIND = "privrl.linear_greedy_q"


# --------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------

# A ridge λ below this can leave Λ numerically singular (a Cholesky failure on some data).
LAMBDA_RANGE = (1e-6, 1e6)
DEFAULT_DELTA = 1e-5
DEFAULT_FAILURE_PROB = 0.05
DEFAULT_MATRIX_NOISE = "strict"


def array_option(help: str) -> Any:
    """A config field holding a public array (None by default), for Python and config files
    only (no flag): left out of equality (arrays do not compare to one bool) and out of the
    config's identity while unset, so runs without it keep their fingerprint."""
    meta = {"flags": (), "help": help, "metavar": None, "cli": False, "keyless_default": True}
    return field(default=None, compare=False, metadata=meta)


@dataclass(frozen=True)
class LinearConfig(Config):
    """What the linear-MDP learners share (VAPVI, DP-VAPVI, PEVI).

    `phi` is the public feature map φ(s, a) over integer states and actions: an array
    [S, A, d] or a `FeatureTable` (divided by its max norm if that exceeds 1, the guarantee's
    ‖φ‖ ≤ 1); unset, a dataset sampled from the built-in linear MDP brings its own. H
    (`horizon`) is public: unset, the dataset's metadata gives it. C (`bonus_scale`)
    multiplies the pessimism bonus Γ_h = C·√d·‖φ‖_{Λ̃_h⁻¹} (PEVI: C·dH√ζ), λ (`lam`) is the
    ridge, `stationary` pools every regression sum over h. `reward_range` (LOW, HIGH) is the
    public per-step reward range, any sign (rewards are clipped to it and mapped into [0, 1];
    values are reported on the original scale); unset, the dataset's metadata, else [0, 1]
    for the non-private learners (DP-VAPVI refuses without one).
    """

    bonus_scale: float = option(
        1.0,
        "--bonus-scale",
        "-C",
        help="Multiplier C of the pessimism bonus (1 = theory).",
        allow_nan=True,
    )
    lam: float = option(1.0, "--lambda", help="Ridge parameter λ.", allow_nan=True)
    horizon: int | None = option(
        None,
        "--horizon",
        help="Horizon H (default: the dataset's metadata, or the environment's; never taken "
        "from the data). Longer episodes are truncated to H.",
    )
    stationary: bool = stationary_option("every regression sum pooled over h")
    reward_range: tuple[float, float] | None = reward_range_option()
    phi: Any = array_option(  # noqa: RUF009 - builds a field
        "Public feature map φ: an array [S, A, d] or a FeatureTable (None: the built-in linear "
        "MDP's, recorded in the dataset's metadata)."
    )

    def __post_init__(self) -> None:
        rr = self.reward_range
        if isinstance(rr, (list, tuple)) and all(isinstance(v, (int, float)) for v in rr):
            object.__setattr__(self, "reward_range", tuple(float(v) for v in rr))
        if self.phi is not None and not isinstance(self.phi, FeatureTable):
            object.__setattr__(self, "phi", np.array(self.phi))
        super().__post_init__()

    def validate(self) -> None:
        self.validate_named(None)

    def validate_named(self, names: Names | None) -> None:
        """`validate`, its messages naming the other settings by `names` (`Names`)."""
        check_nonnegative(self, "bonus_scale")
        lo, hi = LAMBDA_RANGE
        check(
            lo <= self.lam <= hi,
            "lam",
            f"must be in [{lo:g}, {hi:g}], got {self.lam:g} (a smaller ridge can leave Λ "
            "numerically singular)",
        )
        check(
            self.horizon is None or self.horizon >= 1,
            "horizon",
            f"must be >= 1, got {self.horizon}",
        )
        check_reward_range(self)

    def to_dict(self) -> dict[str, Any]:
        if self.phi is None:
            return super().to_dict()
        values = self.replace(phi=None).to_dict()
        table = self.phi
        values["phi"] = (
            table.phi * table.scale if isinstance(table, FeatureTable) else table
        ).tolist()
        return values

    def identity(self) -> dict[str, Any]:
        return without_keyless_defaults(self, self.to_dict())


@dataclass(frozen=True)
class VAPVIConfig(LinearConfig):
    """VAPVI (Yin et al. 2022): DP-VAPVI's code with the noise off (not private).

    D (`additive_bonus`) adds D/K to the bonus (0 = off; the theory's 2H³√d zeroes every Q̂
    at practical K); `split` estimates the variances on one half D' of the episodes and
    regresses on the other D (default: D' = D, as in the paper's experiment).
    """

    system = "vapvi"
    additive_bonus: float = option(
        0.0,
        "--additive-bonus",
        help="Numerator D of the additive D/K bonus (0 = off; theory: 2H³√d).",
        allow_nan=True,
    )
    split: bool = option(False, "--split", help="Split the data into halves (D', D).")

    def validate_named(self, names: Names | None) -> None:
        check_nonnegative(self, "additive_bonus")
        super().validate_named(names)


@dataclass(frozen=True)
class DPVAPVIConfig(VAPVIConfig):
    """DP-VAPVI (Qiao & Wang, Algorithm 2): VAPVI plus ρ-zCDP for one trajectory (replace-one).

    ρ (`rho`) is split over the 5H releases (ρ0 = ρ/(5H) each); `matrix_noise` "strict"
    (default: s² = 1/(2ρ0), ρ-zCDP under replace-one) or "paper_exact" (Algorithm 2's
    s² = 1/(4ρ0), then 7ρ/5-zCDP); ε is stated at δ = `delta` (default 1e-5);
    `failure_prob` is the utility failure probability in the PD shift E (default 0.05).
    """

    system = "dp-vapvi"
    rho: float = option(
        ...,
        "--rho",
        help="zCDP budget ρ of the whole run, in [1e-6, 1e6].",
        allow_nan=True,
    )
    matrix_noise: Literal["strict", "paper_exact"] | None = option(
        None,
        "--matrix-noise",
        help="Gram-matrix noise: strict (default; ρ-zCDP under replace-one) or paper_exact "
        "(Algorithm 2's s² = 1/(4ρ0); the report then states 7ρ/5).",
    )
    delta: float | None = option(
        None, "--delta", help="δ at which ε is reported (default 1e-5).", allow_nan=True
    )
    failure_prob: float | None = option(
        None,
        "--failure-prob",
        help="Utility failure probability in the PD shift E (default 0.05).",
        allow_nan=True,
    )

    def validate_named(self, names: Names | None) -> None:
        check_budget(self.rho, "rho", "vapvi")
        check(
            self.matrix_noise is None or self.matrix_noise in MATRIX_NOISE_MODES,
            "matrix_noise",
            f"must be one of {', '.join(MATRIX_NOISE_MODES)}, not {self.matrix_noise!r}",
        )
        for key in ("delta", "failure_prob"):
            value = getattr(self, key)
            check(value is None or 0 < value < 1, key, f"must be in (0, 1), got {value}")
        super().validate_named(names)


# --------------------------------------------------------------------------------------------
# features and data
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FeatureTable:
    """A public feature map over integer states: ``φ [S, A, d]`` with ``‖φ(s,a)‖ ≤ 1``.

    ``scale`` is the factor the given table was divided by (its max norm, if > 1: a public,
    data-independent rescaling that keeps the guarantee's assumption ``‖φ‖ ≤ 1``); ``source``
    names where it came from (a path, ``module:function``, or an environment).
    """

    phi: FloatArray
    scale: float = 1.0
    source: str = ""

    @classmethod
    def from_array(cls, table: npt.ArrayLike, *, source: str = "") -> FeatureTable:
        """Validate a table ``[S, A, d]`` and rescale it to ``max ‖φ‖ ≤ 1`` if needed."""
        phi = np.asarray(table)
        if phi.dtype.kind not in "biuf":
            raise ValueError(f"feature table must be numeric, got dtype {phi.dtype}")
        phi = phi.astype(np.float64)
        if phi.ndim != 3 or min(phi.shape) < 1:
            raise ValueError(
                f"feature table must have shape [S, A, d] (states × actions × features), got "
                f"{phi.shape}"
            )
        if not np.all(np.isfinite(phi)):
            raise ValueError("feature table contains NaN or infinite entries")
        c = float(np.linalg.norm(phi, axis=-1).max())
        scale = c if c > 1.0 + _NORM_ATOL else 1.0
        phi = phi / scale
        phi.flags.writeable = False
        return cls(phi=phi, scale=scale, source=source)

    @property
    def S(self) -> int:
        return int(self.phi.shape[0])

    @property
    def A(self) -> int:
        return int(self.phi.shape[1])

    @property
    def d(self) -> int:
        return int(self.phi.shape[2])


@dataclass(frozen=True, eq=False)
class LinearEpisodes:
    """Episodes as ``[K, H]`` arrays (step h of every trajectory in one column).

    ``valid[k, h]`` is False past the end of a short episode; ``absorbing[k, h]`` marks a
    transition into a terminal state (there ``Ṽ(s')`` is the value of the user's reward 0,
    `terminal_value`). Rewards are clipped to `reward_range` and mapped into [0, 1].
    """

    states: IntArray
    actions: IntArray
    rewards: FloatArray
    next_states: IntArray
    valid: npt.NDArray[np.bool_]
    absorbing: npt.NDArray[np.bool_]
    reward_range: RewardRange = field(default_factory=RewardRange)

    @property
    def K(self) -> int:
        return int(self.states.shape[0])

    @property
    def H(self) -> int:
        return int(self.states.shape[1])

    def subset(self, index: npt.ArrayLike) -> LinearEpisodes:
        """The episodes ``index`` (rows), e.g. one half of a split."""
        idx = np.asarray(index)
        return LinearEpisodes(
            states=self.states[idx],
            actions=self.actions[idx],
            rewards=self.rewards[idx],
            next_states=self.next_states[idx],
            valid=self.valid[idx],
            absorbing=self.absorbing[idx],
            reward_range=self.reward_range,
        )

    def terminal_value(self, h: int) -> float:
        """Ṽ_{h+1} of a terminal state in mapped units: the user's reward 0 over the H − h − 1
        steps left (0 for the default range [0, 1])."""
        return self.reward_range.zero * float(self.H - h - 1)

    @classmethod
    def from_dataset(
        cls,
        dataset: TrajectoryDataset,
        *,
        n_states: int,
        n_actions: int,
        horizon: int | None = None,
        reward_range: RewardRange | None = None,
    ) -> LinearEpisodes:
        """``[K, H]`` arrays from a dataset of integer states and actions (vectorised).

        H is ``horizon``, else the metadata's horizon — public, never the longest episode
        (H sets ρ/(5H), the sensitivities and the number of releases); without either it is
        refused. The data are fitted to the public H, S, A by the rules of
        `privrl.offline.common`: a longer episode is truncated to its first H steps, a
        shorter one is masked past its end, a step whose state, action or next state is not
        an index of the table is masked, rewards are clipped to the public `reward_range`
        (default [0, 1]) and mapped into [0, 1]. Only the schema is refused (ValueError):
        non-scalar or non-numeric states/actions.
        """
        H = horizon if horizon is not None else dataset.metadata.horizon
        if H is None:
            raise ValueError(
                "the horizon H is not given: pass `horizon=H`, or record it in the "
                "dataset's metadata; it sets the noise, so it is never taken from the data"
            )
        H = int(H)
        if H < 1:
            raise ValueError(f"the horizon must be >= 1, got {H}")
        try:
            obs, obs_ok = as_indices(dataset.observations, "states (observations)", n_states)
            act, act_ok = as_indices(dataset.actions, "actions", n_actions)
        except DatasetError as exc:
            raise ValueError(str(exc)) from None
        K = dataset.n_episodes
        ep = np.asarray(dataset.transition_episode_index, dtype=np.int64)
        t = np.asarray(dataset.transition_steps, dtype=np.int64)
        rows = np.arange(dataset.n_transitions, dtype=np.int64)
        obs_row = rows + ep  # observation of transition i: offsets[ep] + ep + t = i + ep
        keep = t < H  # truncation to the public horizon
        k, h, o = ep[keep], t[keep], obs_row[keep]
        shape = (K, H)
        states = np.zeros(shape, dtype=np.int64)
        actions = np.zeros(shape, dtype=np.int64)
        rewards = np.zeros(shape)
        next_states = np.zeros(shape, dtype=np.int64)
        valid = np.zeros(shape, dtype=bool)
        absorbing = np.zeros(shape, dtype=bool)
        states[k, h] = obs[o]
        next_states[k, h] = obs[o + 1]
        actions[k, h] = act[keep]
        rr = reward_range or RewardRange()
        rewards[k, h] = clip_rewards(dataset.rewards, rr)[keep]
        valid[k, h] = obs_ok[o] & obs_ok[o + 1] & act_ok[keep]
        absorbing[k, h] = np.asarray(dataset.terminated, dtype=bool)[keep]
        return cls(states, actions, rewards, next_states, valid, absorbing, rr)


# --------------------------------------------------------------------------------------------
# the private statistics of one step (Algorithm 2 lines 4–6 and 9–10, before noise)
# --------------------------------------------------------------------------------------------


def variance_statistics(
    phi: FloatArray, v_next: FloatArray, mask: npt.NDArray[np.bool_]
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``(Σ φ̄φ̄ᵀ, Σ φ̄·Ṽ_{h+1}(s̄')², Σ φ̄·Ṽ_{h+1}(s̄'))`` over the rows of ``phi [K, d]``
    where ``mask`` is True (lines 4–6 of Algorithm 2, without noise)."""
    m = mask.astype(np.float64)
    gram = (phi * m[:, None]).T @ phi
    return gram, phi.T @ (m * v_next**2), phi.T @ (m * v_next)


def weighted_statistics(
    phi: FloatArray,
    sigma2: FloatArray,
    rewards: FloatArray,
    v_next: FloatArray,
    mask: npt.NDArray[np.bool_],
) -> tuple[FloatArray, FloatArray]:
    """``(Σ φφᵀ/σ̃², Σ φ·(r + Ṽ_{h+1}(s'))/σ̃²)`` (lines 9–10 of Algorithm 2, without noise)."""
    w = mask.astype(np.float64) / sigma2
    return (phi * w[:, None]).T @ phi, phi.T @ (w * (rewards + v_next))


# --------------------------------------------------------------------------------------------
# noise: DP-VAPVI's releaser, and the switched-off one for VAPVI
# --------------------------------------------------------------------------------------------


def _check_rho(rho: Any) -> float:
    """ρ as a float; finite and > 0, else ValueError."""
    try:
        value = float(rho)
    except (TypeError, ValueError):
        raise ValueError(f"rho must be a number, got {rho!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"rho must be finite and > 0, got {rho}")
    return value


def matrix_noise_std(rho0: float, matrix_noise: MatrixNoise, terms: int = 1) -> float:
    """Std s of ``Z_ij`` in ``(Z+Zᵀ)/√2``: ``T/√(2ρ0)`` (strict) or ``T/√(4ρ0)`` (paper_exact),
    with ``T`` = `terms` the terms one trajectory adds to the sum (1 per step; H pooled)."""
    if matrix_noise == "strict":
        return terms / math.sqrt(2.0 * rho0)
    if matrix_noise == "paper_exact":
        return terms / math.sqrt(4.0 * rho0)
    raise ValueError(f"matrix_noise must be one of {MATRIX_NOISE_MODES}, got {matrix_noise!r}")


def gram_shift(
    H: int,
    d: int,
    rho: float,
    failure_prob: float,
    matrix_noise: MatrixNoise = "strict",
    *,
    stationary: bool = False,
) -> float:
    """E such that ``‖(Z+Zᵀ)/√2‖ ≤ E/2`` for all 2H Gram noises w.p. ≥ 1 − failure_prob.

    ``E = 2√2·s·(2√d + √(2 log(2H/δ)))``; for paper_exact this is the paper's
    ``√(10H/ρ)(2√d + √(2 log(2H/δ)))``, and strict is √2 larger; H times larger again when
    the sums are pooled over h (``stationary``: s is).
    """
    if not 0 < failure_prob < 1:
        raise ValueError(f"failure probability must be in (0, 1), got {failure_prob}")
    terms = entries_per_trajectory(H, stationary)
    s = matrix_noise_std(rho / (N_RELEASES_PER_STEP * H), matrix_noise, terms)
    return (
        2.0
        * math.sqrt(2.0)
        * s
        * (2.0 * math.sqrt(d) + math.sqrt(2.0 * math.log(2 * H / failure_prob)))
    )


class NonPrivateReleaser:
    """No noise, no shift: VAPVI (and the DP-VAPVI code path with privacy switched off)."""

    private = False
    shift = 0.0

    def vector(self, value: FloatArray, *, kind: str, h: int) -> FloatArray:
        return value

    def gram(self, value: FloatArray, *, kind: str, h: int) -> FloatArray:
        return value


_VECTOR_NAMES = {
    "v2": "Σ φ̄·Ṽ_{h+1}(s̄')² (line 5)",
    "v1": "Σ φ̄·Ṽ_{h+1}(s̄') (line 6)",
    "target": "Σ φ·(r + Ṽ_{h+1}(s'))/σ̃² (line 10)",
}
_GRAM_NAMES = {"gram": "Σ φ̄φ̄ᵀ (line 4)", "gram_weighted": "Σ φφᵀ/σ̃² (line 9)"}


class GaussianReleaser:
    """DP-VAPVI's 5H Gaussian releases (ρ0 = ρ/(5H) each), recorded as `Release`s.

    All noise is drawn by `privrl.privacy` mechanisms from ``rng``. ``shift`` is E/2, the
    public PD shift added to both noisy Gram matrices. ``stationary``: the sums are pooled
    over h, a trajectory adds ``terms`` = H terms to each, and every sensitivity and noise
    std is ``terms`` times the per-step one.
    """

    private = True

    def __init__(
        self,
        *,
        rho: float,
        H: int,
        d: int,
        rng: np.random.Generator,
        matrix_noise: MatrixNoise = "strict",
        failure_prob: float = 0.05,
        stationary: bool = False,
    ) -> None:
        self.rho = _check_rho(rho)
        self.H = int(H)
        self.d = int(d)
        self.stationary = bool(stationary)
        self.terms = entries_per_trajectory(self.H, self.stationary)
        self.rho0 = self.rho / (N_RELEASES_PER_STEP * self.H)
        self.matrix_noise: MatrixNoise = matrix_noise
        self.s = matrix_noise_std(self.rho0, matrix_noise, self.terms)
        self.E = gram_shift(
            self.H, self.d, self.rho, failure_prob, matrix_noise, stationary=self.stationary
        )
        self.shift = self.E / 2.0
        self.failure_prob = float(failure_prob)
        self.rng = rng
        self.releases: list[Release] = []

    def sensitivity(self, kind: str) -> float:
        """Replace-one ℓ2 sensitivity: 2H² for Σφ̄Ṽ², 2H for the other vectors (per step; ×H
        pooled over h)."""
        per_step = 2.0 * self.H**2 if kind == "v2" else 2.0 * self.H
        return self.terms * per_step

    @property
    def gram_sensitivity(self) -> float:
        """Replace-one Frobenius sensitivity of a Gram sum: √2 per step, √2·H pooled."""
        return self.terms * GRAM_SENSITIVITY

    def sigma(self, kind: str) -> float:
        """Noise std: √(2H⁴/ρ0) for Σφ̄Ṽ² (the corrected φ1), √(2H²/ρ0) otherwise — the
        sensitivity over √(2ρ0), so ×H pooled over h."""
        power = 4 if kind == "v2" else 2
        return self.terms * math.sqrt(2.0 * self.H**power / self.rho0)

    def vector(self, value: FloatArray, *, kind: str, h: int) -> FloatArray:
        noisy, release = gaussian_mechanism(
            value,
            sensitivity=self.sensitivity(kind),
            sigma=self.sigma(kind),
            rng=self.rng,
            name=f"{_VECTOR_NAMES[kind]}, step h={h + 1}",
        )
        self.releases.append(release)
        return np.asarray(noisy, dtype=np.float64)

    def gram(self, value: FloatArray, *, kind: str, h: int) -> FloatArray:
        noisy, release = gaussian_symmetric_matrix(
            value,
            sensitivity=self.gram_sensitivity,
            s=self.s,
            rng=self.rng,
            name=f"{_GRAM_NAMES[kind]}, step h={h + 1}",
        )
        release.extra["matrix_noise"] = self.matrix_noise
        if self.stationary:
            release.extra["pooled_over_steps"] = self.terms
        self.releases.append(release)
        return noisy

    def delivered_rho(self) -> float:
        """Total zCDP ρ of the 5H releases under replace-one (ρ strict, 7ρ/5 paper_exact)."""
        per_gram = self.gram_sensitivity**2 / (4.0 * self.s**2)
        return self.H * (3 * self.rho0 + 2 * per_gram)


def dp_vapvi_planned_event(rho: float, matrix_noise: MatrixNoise = "strict") -> dp_event.DpEvent:
    """An event equivalent to DP-VAPVI's composed releases, known before the data are read.

    5H Gaussians with ρ_i-zCDP compose to exactly one Gaussian with ρ = Σρ_i (same Rényi
    curve and same privacy-loss distribution), so the ledger check does not need H.
    """
    total = rho if matrix_noise == "strict" else 1.4 * rho
    return dp_event.GaussianDpEvent(noise_multiplier=1.0 / math.sqrt(2.0 * total))


def dp_vapvi_planned_report(
    rho: float, matrix_noise: MatrixNoise = "strict", delta: float = 1e-5
) -> PrivacyReport:
    """The report a DP-VAPVI run will have, up to the per-release detail, for a ledger check
    before the data are touched (it carries the unit and relation, which the ledger checks)."""
    event = dp_vapvi_planned_event(rho, matrix_noise)
    planned = Release(
        name="DP-VAPVI: the 5H Gaussian releases, composed (planned)",
        mechanism="gaussian",
        sensitivity=1.0,
        norm="l2",
        noise={"noise_multiplier": float(event.noise_multiplier)},
        event=event,
        extra={"matrix_noise": matrix_noise, "rho": rho},
    )
    return PrivacyReport.build(UNIT, RELATION, [planned], delta, system="dp-vapvi")


# --------------------------------------------------------------------------------------------
# linear algebra helpers (solve/Cholesky, never inv)
# --------------------------------------------------------------------------------------------


def _floor_eigenvalues(matrix: FloatArray, lam: float) -> tuple[FloatArray, bool]:
    """Clip the eigenvalues of a symmetric matrix at ``lam`` (post-processing of a noisy
    release); returns the matrix unchanged if its spectrum is already ≥ lam."""
    w, V = np.linalg.eigh(matrix)
    if w.min() >= lam:
        return matrix, False
    out = (V * np.maximum(w, lam)) @ V.T
    return 0.5 * (out + out.T), True


def cholesky_lower(matrix: FloatArray) -> FloatArray:
    """Lower Cholesky factor (the matrices here are PD by construction)."""
    return linalg.cholesky(matrix, lower=True, check_finite=False)


def cho_solve(chol: FloatArray, rhs: FloatArray) -> FloatArray:
    return linalg.cho_solve((chol, True), rhs, check_finite=False)


def _mahalanobis(matrix: FloatArray, phi: FloatArray) -> FloatArray:
    """``‖φ‖_{Λ⁻¹} = √(Σ_i (v_iᵀφ)²/w_i)`` for each row of ``phi [n, d]``, from the
    eigendecomposition Λ = V diag(w) Vᵀ of a symmetric PD matrix.

    Why not a triangular solve: with many right-hand sides, OpenBLAS threads its trsm/potrs
    even for d = 10, and on a loaded 2-core machine those calls measured 0.05–5 ms each
    against a steady ~25 µs for ``eigh`` + one matmul (same accuracy, ~1e-16 here).
    """
    w, V = np.linalg.eigh(matrix)
    u = phi @ V
    return np.sqrt(np.maximum((u * u / w).sum(axis=1), 0.0))


def theory_additive_bonus(H: int, d: int) -> float:
    """VAPVI's theory numerator 2H³√d of the additive ``·/K`` bonus (Yin et al. 2022).
    DP-VAPVI's D is larger still (it adds privacy terms that need κ); both are off by default."""
    return 2.0 * H**3 * math.sqrt(d)


# --------------------------------------------------------------------------------------------
# the learned policy
# --------------------------------------------------------------------------------------------


class LinearGreedyPolicy(GreedyTableActions):
    """Greedy policy w.r.t. a pessimistic linear Q, non-stationary (``h = 0..H-1``).

    Holds the pessimistic ``Q̂ [H, S, A]`` over the finite state set (so ``actions [H, S]`` is
    the tabular deterministic policy) and, for any other feature map, what defines Q̂:
    ``weights [H, d]``, the matrices ``lambdas [H, d, d]`` (Λ̃_h), the bonus coefficient
    (C√d or β) and the additive bonus per step: ``Q̂_h(s,·) = clip(φw_h − coef·‖φ‖_{Λ⁻¹} −
    add_h, 0, H−h)``.
    """

    def __init__(
        self,
        q: npt.ArrayLike,
        *,
        weights: npt.ArrayLike,
        lambdas: npt.ArrayLike,
        bonus_coef: float,
        additive: npt.ArrayLike,
        algorithm: str,
        features_source: str = "",
        feature_scale: float = 1.0,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.q = np.asarray(q, dtype=np.float64)
        if self.q.ndim != 3:
            raise ValueError(f"q must be [H, S, A], got shape {self.q.shape}")
        self.weights = np.asarray(weights, dtype=np.float64)
        self.lambdas = np.asarray(lambdas, dtype=np.float64)
        self.bonus_coef = float(bonus_coef)
        self.additive = np.asarray(additive, dtype=np.float64)
        self.algorithm = algorithm
        self.features_source = features_source
        self.feature_scale = float(feature_scale)
        self.meta = dict(meta or {})
        self.actions = np.argmax(self.q, axis=-1).astype(np.int64)  # ties → smallest index

    @property
    def H(self) -> int:
        return int(self.q.shape[0])

    @property
    def n_actions(self) -> int:
        return int(self.q.shape[2])

    def at_step(self, h: int) -> TabularPolicy:
        """The step-h policy as a stationary `privrl.policies.TabularPolicy` (Policy protocol)."""
        return TabularPolicy(self.actions[h], n_actions=int(self.q.shape[2]))

    def q_values(self, phi: npt.ArrayLike, h: int) -> FloatArray:
        """Pessimistic ``Q̂_h`` for features ``phi [..., d]`` of a user feature map (already
        scaled like the training features: ``‖φ‖ ≤ 1``)."""
        f = np.asarray(phi, dtype=np.float64)
        flat = f.reshape(-1, f.shape[-1])
        bonus = self.bonus_coef * _mahalanobis(self.lambdas[h], flat) + self.additive[h]
        q = np.clip(flat @ self.weights[h] - bonus, 0.0, self.H - h)
        return q.reshape(f.shape[:-1])

    def save(self, path: str | Path) -> Path:
        """Write an ``.npz`` (``kind`` = "privrl.linear_greedy_q"); reload with `load_policy`."""
        path = Path(path)
        meta = {
            "algorithm": self.algorithm,
            "features_source": self.features_source,
            "feature_scale": self.feature_scale,
            "bonus_coef": self.bonus_coef,
            **self.meta,
        }
        with open(path, "wb") as fh:
            np.savez(
                fh,
                kind=np.array(POLICY_KIND),
                q=self.q,
                actions=self.actions,
                weights=self.weights,
                lambdas=self.lambdas,
                additive=self.additive,
                meta=np.array(json.dumps(meta)),
            )
        return path

    @classmethod
    def load(cls, path: str | Path) -> LinearGreedyPolicy:
        """Read a policy written by `save`."""
        from privrl.data.files import read_npz

        z = read_npz(path, "policy")
        kind = str(z["kind"]) if "kind" in z else ""
        if kind != POLICY_KIND:
            raise ValueError(f"{path} is not a {POLICY_KIND} policy file (kind={kind!r})")
        meta = json.loads(str(z["meta"]))
        return cls(
            z["q"],
            weights=z["weights"],
            lambdas=z["lambdas"],
            bonus_coef=float(meta.pop("bonus_coef")),
            additive=z["additive"],
            algorithm=str(meta.pop("algorithm")),
            features_source=str(meta.pop("features_source", "")),
            feature_scale=float(meta.pop("feature_scale", 1.0)),
            meta=meta,
        )


def load_policy(path: str | Path) -> LinearGreedyPolicy:
    """Load a policy saved by `LinearGreedyPolicy.save`."""
    return LinearGreedyPolicy.load(path)


@dataclass
class LinearPVIResult:
    """Output of VAPVI / DP-VAPVI / PEVI: the policy, Q̂ and Ṽ, and the privacy report.

    ``diagnostics`` are post-processing of the (noisy) releases, per step h: mean bonus,
    fraction of Q̂ clipped at 0, eigenvalue clips of noisy Gram matrices.
    """

    policy: LinearGreedyPolicy
    report: PrivacyReport
    q: FloatArray  # [H, S, A]
    v: FloatArray  # [H+1, S]
    bonus: FloatArray  # [H, S, A]
    diagnostics: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# the algorithm (Algorithm 2 lines 3–15; VAPVI when the releaser is NonPrivateReleaser)
# --------------------------------------------------------------------------------------------


def pessimistic_q(
    table: FloatArray,
    w: FloatArray,
    matrix: FloatArray,
    coef: float,
    additive: float,
    h_max: float,
) -> tuple[FloatArray, FloatArray]:
    """``Q̂ = min{φᵀw − Γ, h_max}⁺`` and ``Γ = coef·‖φ‖_{Λ⁻¹} + additive`` over a table
    ``[S, A, d]`` (lines 11–13)."""
    S, A, d = table.shape
    flat = table.reshape(S * A, d)
    bonus = coef * _mahalanobis(matrix, flat) + additive
    q = np.clip(flat @ w - bonus, 0.0, h_max)
    return q.reshape(S, A), bonus.reshape(S, A)


def variance_aware_pvi(
    var_data: LinearEpisodes,
    data: LinearEpisodes,
    features: FeatureTable,
    *,
    releaser: GaussianReleaser | NonPrivateReleaser,
    bonus_scale: float = 1.0,
    lam: float = 1.0,
    additive_bonus: float = 0.0,
    stationary: bool = False,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, dict[str, Any]]:
    """The loop of Algorithm 2 (lines 3–15): returns ``Q̂ [H,S,A]``, ``Ṽ [H+1,S]``,
    ``Γ [H,S,A]``, ``w̃ [H,d]``, ``Λ̃ [H,d,d]`` and per-step diagnostics.

    ``var_data`` is D' (variance estimation), ``data`` is D (the weighted regression); pass
    the same episodes for no split. The releaser privatises each sum (or passes it through).
    ``stationary``: each sum of step h runs over the transitions of every step (a private
    releaser must have been built with ``stationary=True``: its sensitivities are ×H).
    """
    if stationary and releaser.private and not getattr(releaser, "stationary", False):
        raise ValueError("pooled sums need a releaser calibrated for them (stationary=True)")
    if bonus_scale < 0 or not math.isfinite(bonus_scale):
        raise ValueError(f"bonus_scale must be finite and >= 0, got {bonus_scale}")
    if not lam > 0:
        raise ValueError(f"lambda must be > 0, got {lam}")
    H = data.H
    if var_data.H != H:
        raise ValueError(f"both halves must have the same horizon, got {var_data.H} and {H}")
    table = features.phi
    S, A, d = table.shape
    eye = np.eye(d)
    coef = bonus_scale * math.sqrt(d)  # C·√d (line 11)
    add = additive_bonus / max(data.K, 1)  # D/K (line 11), 0 by default
    q = np.zeros((H, S, A))
    v = np.zeros((H + 1, S))  # Ṽ_{H+1} = 0 (line 2)
    bonus = np.zeros((H, S, A))
    weights = np.zeros((H, d))
    lambdas = np.zeros((H, d, d))
    clipped = np.zeros((H, 2), dtype=bool)
    sigma2_mean = np.zeros(H)
    for h in range(H - 1, -1, -1):
        h_max = float(H - h)  # H − h + 1 in the paper's 1-based steps
        # Variance estimation on D' (lines 4–8).
        st, ac, nx, ab, ok = step_rows(
            (var_data.states, var_data.actions, var_data.next_states, var_data.absorbing,
             var_data.valid),
            h,
            stationary,
        )  # fmt: skip
        phi_bar = table[st, ac]
        v_bar = np.where(ab, var_data.terminal_value(h), v[h + 1][nx])
        gram, v2, v1 = variance_statistics(phi_bar, v_bar, ok)
        gram = releaser.gram(gram, kind="gram", h=h)
        v2 = releaser.vector(v2, kind="v2", h=h)
        v1 = releaser.vector(v1, kind="v1", h=h)
        sigma_tilde = gram + (lam + releaser.shift) * eye  # Σ̃_h = Σφ̄φ̄ᵀ + λI + K1 (line 4)
        if releaser.private:
            sigma_tilde, clipped[h, 0] = _floor_eigenvalues(sigma_tilde, lam)
        chol_s = cholesky_lower(sigma_tilde)
        beta_theta = cho_solve(chol_s, np.stack([v2, v1], axis=1))  # β̃_h, θ̃_h (lines 5–6)
        flat = table.reshape(S * A, d)
        second = np.clip(flat @ beta_theta[:, 0], 0.0, h_max**2)
        first = np.clip(flat @ beta_theta[:, 1], 0.0, h_max)
        sigma2 = np.maximum(1.0, second - first**2).reshape(S, A)  # σ̃_h² (lines 7–8)
        # Variance-weighted ridge regression on D (lines 9–10).
        st, ac, rw, nx, ab, ok = step_rows(
            (data.states, data.actions, data.rewards, data.next_states, data.absorbing,
             data.valid),
            h,
            stationary,
        )  # fmt: skip
        phi = table[st, ac]
        v_next = np.where(ab, data.terminal_value(h), v[h + 1][nx])
        s2 = sigma2[st, ac]
        gram_w, target = weighted_statistics(phi, s2, rw, v_next, ok)
        gram_w = releaser.gram(gram_w, kind="gram_weighted", h=h)
        target = releaser.vector(target, kind="target", h=h)
        lambda_tilde = gram_w + (lam + releaser.shift) * eye  # Λ̃_h (line 9)
        if releaser.private:
            lambda_tilde, clipped[h, 1] = _floor_eigenvalues(lambda_tilde, lam)
        chol_l = cholesky_lower(lambda_tilde)
        w = cho_solve(chol_l, target)  # w̃_h (line 10)
        # Pessimism and greedy step (lines 11–14).
        q[h], bonus[h] = pessimistic_q(table, w, lambda_tilde, coef, add, h_max)
        v[h] = q[h].max(axis=1)
        weights[h], lambdas[h] = w, lambda_tilde
        sigma2_mean[h] = float(sigma2.mean())
    diagnostics = {
        "bonus_coef": coef,
        "additive_per_step": add,
        "eigen_clipped": clipped,
        "sigma2_mean": sigma2_mean,
    }
    return q, v, bonus, weights, lambdas, diagnostics


def _as_generator(rng: np.random.Generator | int | None) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


def _halves(
    data: LinearEpisodes, split: bool, rng: np.random.Generator
) -> tuple[LinearEpisodes, LinearEpisodes]:
    """(D', D): a random half split of the episodes, or the same data twice (paper default)."""
    if not split:
        return data, data
    if data.K < 2:
        raise ValueError("split=True needs at least 2 episodes")
    perm = rng.permutation(data.K)
    half = data.K // 2
    return data.subset(np.sort(perm[:half])), data.subset(np.sort(perm[half:]))


def prepare_inputs(
    data: LinearEpisodes | TrajectoryDataset, features: FeatureTable | npt.ArrayLike
) -> tuple[LinearEpisodes, FeatureTable]:
    table = features if isinstance(features, FeatureTable) else FeatureTable.from_array(features)
    if not isinstance(data, LinearEpisodes):
        data = LinearEpisodes.from_dataset(data, n_states=table.S, n_actions=table.A)
    if data.K < 1:
        raise ValueError("the dataset has no episodes")
    v = data.valid
    if v.any() and (
        data.states[v].max() >= table.S
        or data.next_states[v].max() >= table.S
        or data.actions[v].max() >= table.A
    ):
        # Only for episodes built by hand: `LinearEpisodes.from_dataset` masks such steps.
        raise ValueError(
            f"the data index states/actions beyond the feature table's [S, A] = "
            f"[{table.S}, {table.A}]"
        )
    return data, table


def build_policy(
    q: FloatArray,
    weights: FloatArray,
    lambdas: FloatArray,
    diag: dict[str, Any],
    *,
    algorithm: str,
    features: FeatureTable,
    meta: dict[str, Any],
) -> LinearGreedyPolicy:
    """Greedy policy of ``q``, bonus from ``diag`` (``bonus_coef``, ``additive_per_step``)."""
    return LinearGreedyPolicy(
        q,
        weights=weights,
        lambdas=lambdas,
        bonus_coef=diag["bonus_coef"],
        additive=np.full(q.shape[0], diag["additive_per_step"]),
        algorithm=algorithm,
        features_source=features.source,
        feature_scale=features.scale,
        meta=meta,
    )


def public_information(features: FeatureTable, H: int) -> list[str]:
    scaled = "" if features.scale == 1.0 else f", divided by its max norm {features.scale:.6g}"
    return [
        f"the feature map φ [S={features.S}, A={features.A}, d={features.d}]{scaled}",
        f"the horizon H={H} and the state and action spaces",
        "the reward range (rewards are clipped to it and mapped into [0, 1]) and the value "
        "range [0, H] of the mapped rewards",
    ]


def vapvi(
    data: LinearEpisodes | TrajectoryDataset,
    features: FeatureTable | npt.ArrayLike,
    *,
    bonus_scale: float = 1.0,
    lam: float = 1.0,
    additive_bonus: float = 0.0,
    split: bool = False,
    rng: np.random.Generator | int | None = 0,
    stationary: bool = False,
) -> LinearPVIResult:
    """VAPVI (Yin et al. 2022): Algorithm 2 with no noise and E = 0. Not private.

    ``rng`` is only used for the random half split (``split=True``). ``stationary``: every
    sum pooled over h (one model for every step).
    """
    data, table = prepare_inputs(data, features)
    split_rng, _ = _as_generator(rng).spawn(2)
    var_data, main = _halves(data, split, split_rng)
    q, v, bonus, weights, lambdas, diag = variance_aware_pvi(
        var_data,
        main,
        table,
        releaser=NonPrivateReleaser(),
        bonus_scale=bonus_scale,
        lam=lam,
        additive_bonus=additive_bonus,
        stationary=stationary,
    )
    report = PrivacyReport.non_private(
        UNIT,
        RELATION,
        system="vapvi",
        public=public_information(table, data.H),
        notes=["VAPVI is the non-private baseline: DP-VAPVI's code with every noise switched off"],
    )
    meta = {
        "bonus_scale": bonus_scale,
        "lambda": lam,
        "split": split,
        "K": main.K,
        "stationary": stationary,
    }
    policy = build_policy(q, weights, lambdas, diag, algorithm="vapvi", features=table, meta=meta)
    return LinearPVIResult(policy, report, q, v, bonus, diag)


def dp_vapvi(
    data: LinearEpisodes | TrajectoryDataset,
    features: FeatureTable | npt.ArrayLike,
    *,
    rho: float,
    rng: np.random.Generator | int | None,
    noise: np.random.Generator | None = None,
    delta: float = 1e-5,
    failure_prob: float = 0.05,
    matrix_noise: MatrixNoise = "strict",
    bonus_scale: float = 1.0,
    lam: float = 1.0,
    additive_bonus: float = 0.0,
    split: bool = False,
    backend: Literal["rdp", "pld"] = "rdp",
    stationary: bool = False,
) -> LinearPVIResult:
    """DP-VAPVI (Qiao & Wang, Algorithm 2): ρ-zCDP (strict) for one trajectory, replace-one.

    ``delta`` is the privacy δ at which ε is stated; ``failure_prob`` is the utility failure
    probability in E. ``rng`` seeds the random half split (public randomness); the noise comes
    from ``noise``, a `NoiseGenerator` (default: a fresh secure one), drawn by privrl.privacy.
    ``stationary``: every sum pooled over h, sensitivities and noise ×H (module docstring).
    """
    if matrix_noise not in MATRIX_NOISE_MODES:
        raise ValueError(f"matrix_noise must be one of {MATRIX_NOISE_MODES}, got {matrix_noise!r}")
    _check_rho(rho)
    refuse_declared_units(data, "DP-VAPVI")
    data, table = prepare_inputs(data, features)
    max_norm = float(np.linalg.norm(table.phi, axis=-1).max())
    if max_norm > 1.0 + _NORM_ATOL:
        raise ValueError(
            f"DP-VAPVI's sensitivities need ‖φ(s,a)‖ ≤ 1, but the feature table has norm "
            f"{max_norm:.6g}; build it with FeatureTable.from_array, which rescales it"
        )
    split_rng, _ = _as_generator(rng).spawn(2)
    noise_rng = noise_generator(noise, "dp-vapvi")
    var_data, main = _halves(data, split, split_rng)
    releaser = GaussianReleaser(
        rho=rho,
        H=data.H,
        d=table.d,
        rng=noise_rng,
        matrix_noise=matrix_noise,
        failure_prob=failure_prob,
        stationary=stationary,
    )
    q, v, bonus, weights, lambdas, diag = variance_aware_pvi(
        var_data,
        main,
        table,
        releaser=releaser,
        bonus_scale=bonus_scale,
        lam=lam,
        additive_bonus=additive_bonus,
        stationary=stationary,
    )
    report = _dp_report(releaser, table, data.H, delta, backend)
    meta = {
        "bonus_scale": bonus_scale,
        "lambda": lam,
        "split": split,
        "K": main.K,
        "rho": rho,
        "matrix_noise": matrix_noise,
        "E": releaser.E,
        "stationary": stationary,
    }
    policy = build_policy(
        q, weights, lambdas, diag, algorithm="dp-vapvi", features=table, meta=meta
    )
    diag["E"] = releaser.E
    return LinearPVIResult(policy, report, q, v, bonus, diag)


def _dp_report(
    releaser: GaussianReleaser,
    features: FeatureTable,
    H: int,
    delta: float,
    backend: Literal["rdp", "pld"],
) -> PrivacyReport:
    r = releaser
    if r.matrix_noise == "strict":
        mode = (
            "matrix noise: strict — Gram releases use s² = 1/(2ρ0), so each is ρ0-zCDP under "
            "replace-one (‖Δ‖_F ≤ √2); the run is ρ-zCDP as requested"
        )
    else:
        mode = (
            "matrix noise: paper_exact — Gram releases use Algorithm 2's s² = 1/(4ρ0), which is "
            "ρ0-zCDP only under add/remove; under replace-one (‖Δ‖_F ≤ √2) each costs 2ρ0, so "
            f"the run is 7ρ/5 = {r.delivered_rho():.6g}-zCDP, not the requested ρ = {r.rho:.6g}"
        )
    notes = [
        mode,
        f"budget: ρ = {r.rho:.6g} split evenly over 5H = {5 * H} releases, ρ0 = ρ/(5H) = "
        f"{r.rho0:.6g} each, fresh noise per step, adaptive composition of zCDP",
        "Σφ̄Ṽ² noise variance 2H⁴/ρ0 (its sensitivity is 2H²; the extracted text's 2H²/ρ0 is "
        "an extraction error)",
        f"PD shift E = {r.E:.6g} (failure probability {r.failure_prob:g}) added as E/2·I to both "
        "noisy Gram matrices; eigenvalues still below λ are clipped at λ (post-processing)",
        DATA_RULES,
    ]
    if r.stationary:
        notes.insert(
            2,
            f"stationary model: every sum pooled over h, so a trajectory adds up to H = {H} terms "
            f"to one sum; sensitivities 2H³ (Σφ̄Ṽ²), 2H² (the other vectors), √2·H (Gram, "
            "Frobenius) and every noise std ×H, from the declared horizon H",
        )
    report = PrivacyReport.build(
        UNIT,
        RELATION,
        r.releases,
        delta,
        backend=backend,
        system="dp-vapvi",
        public=public_information(features, H),
        notes=notes,
    )
    if report.rho is not None:
        eps_bs = zcdp_to_dp(report.rho, delta)
        report.notes.append(
            f"Bun–Steinke closed form: ρ = {report.rho:.6g}-zCDP ⇒ ε = ρ + 2√(ρ·log(1/δ)) = "
            f"{eps_bs:.6g} at δ = {delta:g} (the stated ε is the accountant's, never larger)"
        )
    return report
