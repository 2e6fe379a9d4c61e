"""APVI and DP-APVI: (differentially private) adaptive pessimistic value iteration.

Qiao & Wang, "Offline Reinforcement Learning with Differential Privacy" (2023), Algorithm 1,
built on APVI (Yin & Wang 2021). Finite horizon H, tabular S × A, n trajectories of a behaviour
policy. Steps are h = 0..H-1 in code (h = 1..H in the paper).

Pipeline (one function per box of the paper):

1. `empirical_counts` — n_h(s,a), n_h(s,a,s') and, optionally, reward sums Σ r_h(s,a).
2. `noise_plan` + `private_counts` — eq. (2): independent noise on every count, clipped at 0.
   Gaussian (ρ-zCDP): σ² = 2H/ρ; Laplace (ε-DP): Lap(4H/ε). Unit: one trajectory; relation:
   replace-one. Every draw goes through `privrl.privacy` mechanisms, one `Release` per family.
   The counts are integers, so they get the discrete Gaussian N_Z(0, σ²) and the discrete
   Laplace DLap(b) (Canonne, Kamath & Steinke 2020) of the same σ and b, and the released
   counts are integers: no floating-point noise reaches them (Mironov 2012). The reward sums
   are real-valued and keep the continuous Gaussian / Laplace.
3. `private_model` — consistency projection (eq. 3–4, slack E/2) and P̃ (eq. 5).
4. `pessimistic_value_iteration` — Algorithm 1 lines 3–9 with the Bernstein bonus (line 5)
   or the Hoeffding variant, vectorised over (s, a), a loop over h only.

Non-private APVI is the same code with no noise and E = 0 (`apvi`), never a second copy.

Settings: `APVIConfig` and `DPAPVIConfig` hold every setting of a run (the command line's
flags are generated from them); `PrivacyConfig` is the mechanism they resolve to. The objects
`privrl.offline.APVI` and `DPAPVI` (`privrl.offline.tabular`) plan and fit with them.

Sensitivity (replace-one). One trajectory contributes at most one entry per step h to each
family: (h, s_h, a_h) to n_h(s,a) and to the reward sums, (h, s_h, a_h, s_{h+1}) to
n_h(s,a,s'). Replacing it removes ≤ H entries and adds ≤ H entries, so each family changes in
≤ 2H entries by ≤ 1 (rewards are clipped to the public range [LOW, HIGH] and mapped into
[0, 1] before summation, see "Reward range" below): Δ₂² ≤ 2H and Δ₁ ≤ 2H per family. The
bound is enforced, not assumed: H, S, A and the reward range are public, a longer episode is
truncated to H steps and a step outside the spaces is not counted (`privrl.offline.common`),
so no dataset can break it and no error depends on the data. An absorbing padded step (see
`privrl.data.padding`) is one entry per step like a real one, with a reward in [0, 1]. The
absorbing state's model is public (it stays put at the mapped value of reward 0), so the
planner gives it its exact value and no bonus instead of estimating it from its counts: a
function of public facts only, so the releases and the guarantee are unchanged.

Budget split. The m released families (m = 2, or 3 with `privatize_rewards`) get equal
shares: ρ/m each (σ² = Δ₂²/(2ρ/m) = mH/ρ, i.e. 2H/ρ for m = 2 as in eq. 2) or ε/m each
(Lap(mΔ₁/ε) = Lap(4H/ε) for m = 2). The discrete Gaussian with an integer-valued shift of L2
norm ≤ Δ₂ is Δ₂²/(2σ²)-zCDP, exactly as the continuous one (CKS Thm 4 and its multivariate
form; event `ZCDpEvent`), and the discrete Laplace with an integer shift of L1 norm ≤ Δ₁ is
Δ₁/b-DP (event `PureDpEvent`, as the continuous vector Laplace). zCDP and pure DP compose
additively, so the run is ρ-zCDP (resp. ε-DP). The privacy report states ε from the
accountant (dp-accounting RDP, which accounts `ZCDpEvent`; its PLD accountant does not) and,
in its notes, the Bun–Steinke closed form ε = ρ + 2√(ρ log(1/δ)).

Uniform error bound E (the paper's E_ρ / E_ε). With probability ≥ 1 − δ every noise draw is
within `tail` of 0 (union bound over N ≤ m·HS²A counters): Gaussian tail = σ√(2 log(2N/δ)),
Laplace tail = b (log(N/δ) + log(2/(1 + e^{-1/b}))); E = 2·tail. The discrete Gaussian is
σ²-subgaussian (CKS), so the Gaussian tail holds for it unchanged; the discrete Laplace has
P(|X| > t) < 2e^{-t/b}/(1 + e^{-1/b}), up to twice the continuous e^{-t/b}, hence the second
term (it rises to 1/2 as b grows: E grows by less than one count). For m = 2 the
Gaussian E is exactly the paper's E_ρ = 4√(H log(4HS²A/δ)/ρ), and the Laplace E is the paper's
E_ε = (8H/ε) log(2HS²A/δ) plus that correction. The slack of the projection is E/2
(= tail), so the true counts are feasible and |ñ_{s,a} − n_{s,a}| ≤ E. δ here is the *utility*
failure probability; it is unrelated to the δ at which ε is reported (`PrivacyConfig`).

Rewards. As in the paper the mean reward r_h(s,a) is public by default (pass `reward`). With
`privatize_rewards=True` the reward sums are released as a third family and
r̃ = clip(r̃_sum/ñ, 0, 1) where ñ > E (0 elsewhere); the bonus then gains a reward term
sqrt(ι/(2(ñ − E))) (Hoeffding for a mean of [0, 1] rewards) + (tail + E)/ñ (noise on the sum
and on ñ). Non-private APVI without a given reward uses the empirical mean with the same term.

Reward range. Rewards of any sign enter through a public range [LOW, HIGH] (`reward_range`,
else the dataset metadata's declared ``extra["reward_range"]``, else [0, 1] for a run whose
rewards enter no sensitivity; `privrl.offline.common.resolve_reward_range`): each reward is
clipped to it and mapped affinely, r ↦ u = (r − LOW)/(HIGH − LOW) ∈ [0, 1], and the algorithm
above runs on u unchanged (so every sensitivity and bonus stays as stated). Every episode of
the model has H steps (the absorbing padding continues a terminated episode at the mapped
value of the user's reward 0, `privrl.data.padding`), so a policy's value under u and under r
are related by V_h = (HIGH − LOW)·V^u_h + (H − h)·LOW, an increasing affine map: the learner
optimises the user's objective, and values are reported on the original scale
(`APVIResult.original_values`). A public `reward` table is given on the original scale, in
[LOW, HIGH].

Constants: C1 = √2, C2 = 16 (the paper's); C = `unknown_penalty` > 1 for ñ ≤ E (it zeroes
Q̃ there). `bonus_scale` multiplies every bonus term except C·H (a design decision: default 1 =
theory; compare private and non-private runs at the same scale; never tune it on the data
being privatised).

Stationary pooling and small costs. Pooled over h, one trajectory can add H entries to one cell
(bumping a wall for H steps), so the bound Δ₂ = √2·H above is attained and each pooled reward
sum gets σ = H·√(m/ρ), √H times the per-step σ = √(mH/ρ) (the pooled release is no noisier than
H per-step ones summed, which have the same variance). On a pair seen a few times r̃ is then
off by about σ/ñ. With `bonus_scale` 0 nothing corrects that: where one step's cost is small in
mapped units (1/100 for a cost of 1 on [−100, 0]), a rarely seen pair that stays put (a wall
bump) can get r̃ = 1, the absorbing state's reward, and since one table serves every h, looping
on it is worth as much as finishing at every remaining step. Measured on 1,000 CliffWalking
episodes (H = 20, ρ = 10⁶, private rewards): return −20 with bonus 0 for each of five noise
draws, the optimal −13 with a bonus scale of 0.0005 to 0.01, and −13 for the per-step model
with bonus 0. This is not a defect of the pooled counts: the counts and P̃ are APVI's exactly.
The noise floor (tail + E)/ñ of the reward bonus removes such a tie, but it is scaled like
every other term: left unscaled, it would take a stationary FrozenLake learner (20,000
uniform-random episodes, H = 30, ρ = 1) from a return of up to 0.17 to 0.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from dp_accounting import dp_event

from privrl.arrays import FloatArray, IntArray
from privrl.config import Config, check, option
from privrl.data.dataset import TrajectoryDataset
from privrl.data.padding import PADDINGS, pad_absorbing
from privrl.envs.tabular import Episodes
from privrl.offline.common import (
    DATA_RULES,
    Names,
    RewardRange,
    as_indices,
    check_budget,
    check_nonnegative,
    check_positive,
    check_reward_range,
    clip_rewards,
    name_of,
    refuse_declared_units,
    reward_range_option,
    stationary_option,
    without_keyless_defaults,
)
from privrl.privacy.accounting import zcdp_to_dp
from privrl.privacy.events import PureDpEvent
from privrl.privacy.mechanisms import (
    discrete_gaussian_mechanism,
    discrete_laplace_mechanism,
    gaussian_mechanism,
    laplace_mechanism,
)
from privrl.privacy.noise import noise_generator
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit
from privrl.rl.projection import project_counts
from privrl.rl.tabular_policy import FiniteHorizonPolicy

__all__ = [
    "C1",
    "C2",
    "RELATION",
    "UNIT",
    "APVIConfig",
    "APVIResult",
    "Counts",
    "DPAPVIConfig",
    "FiniteHorizonPolicy",
    "NoisePlan",
    "PrivacyConfig",
    "PrivateModel",
    "ValueIteration",
    "apvi",
    "config_dict",
    "dp_apvi",
    "dp_apvi_from_counts",
    "empirical_counts",
    "noise_plan",
    "pessimistic_value_iteration",
    "private_counts",
    "private_model",
]

Mechanism = Literal["gaussian", "laplace"]
Bonus = Literal["bernstein", "hoeffding"]

C1 = math.sqrt(2.0)  # Algorithm 1, line 1
C2 = 16.0
UNIT = PrivacyUnit.TRAJECTORY
RELATION = NeighbourRelation.REPLACE_ONE

_FAMILY_NAMES = {
    "n_sa": "visit counts n_h(s,a)",
    "n_sas": "transition counts n_h(s,a,s')",
    "r_sum": "reward sums Σ r_h(s,a) (rewards clipped to [0, 1])",
}
# Integer-valued families: released with the discrete mechanisms (the reward sums are real).
_COUNT_FAMILIES = frozenset({"n_sa", "n_sas"})


# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------


def _positive_finite(x: float, what: str) -> float:
    v = float(x)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{what} must be finite and > 0, got {x}")
    return v


DEFAULT_UTILITY_DELTA = 0.1
DEFAULT_PRIVACY_DELTA = 1e-6


def _array_option(help: str) -> Any:
    """A config field holding a public array (None by default), for Python and config files
    only (no flag): left out of equality (arrays do not compare to one bool) and out of the
    config's identity while unset, so runs without it keep their fingerprint."""
    meta = {"flags": (), "help": help, "metavar": None, "cli": False, "keyless_default": True}
    return field(default=None, compare=False, metadata=meta)


@dataclass(frozen=True)
class APVIConfig(Config):
    """APVI (Yin & Wang 2021), the non-private baseline: every setting of one run.

    H (`horizon`), S (`states`), A (`actions`) are public; unset, a dataset's metadata gives
    them (unless it marks them as inferred from the data). The pessimism bonus Γ_h(s,a) is
    `bonus` ("bernstein": Algorithm 1, line 5; "hoeffding": the paper's variant) times
    `bonus_scale` (1 = the theory constants C1 = √2, C2 = 16); where ñ ≤ E the bonus is
    C·H with C = `unknown_penalty` > 1. `delta` is the *utility* failure probability δ_u in
    E and ι = log(HSA/δ_u) (default 0.1; not a privacy parameter). `reward_range` (LOW, HIGH)
    is the public per-step reward range, any sign: rewards are clipped to it and mapped into
    [0, 1] for the noise, values are reported on the original scale (unset: the dataset's
    metadata, else [0, 1] when no reward of the data enters a sensitivity). `reward` is the
    public mean reward r_h(s,a) as an array [H, S, A] in the reward range (without it the
    rewards are learned from the data). `padding` and `stationary` fix how episodes are
    counted (`privrl.data.padding`).
    """

    system = "apvi"
    horizon: int | None = option(
        None,
        "--horizon",
        "-H",
        help="Horizon H (with --data: this flag or the dataset's metadata, never the longest "
        "episode; longer episodes are truncated to H, terminated shorter ones padded (see "
        "--padding). Default 10 with --env).",
    )
    states: int | None = option(
        None,
        "--states",
        "-S",
        help="Number of states (default: 10 with --env; with --data the metadata's Discrete "
        "space, unless it was inferred from the data).",
    )
    actions: int | None = option(
        None,
        "--actions",
        "-A",
        help="Number of actions (default: 5 with --env; with --data the metadata's Discrete "
        "space, unless it was inferred from the data).",
    )
    bonus: Literal["bernstein", "hoeffding"] = option(
        "bernstein", "--bonus", help="Pessimism bonus."
    )
    bonus_scale: float = option(
        1.0,
        "--bonus-scale",
        help="Multiplier of the bonus (1 = theory constants C1=√2, C2=16).",
        allow_nan=True,
    )
    delta: float | None = option(
        None,
        "--delta",
        help="Utility failure probability δ in E and ι, default 0.1 (not a privacy parameter).",
        allow_nan=True,
    )
    unknown_penalty: float = option(
        2.0,
        help="C > 1: the bonus C·H where ñ ≤ E (not scaled by bonus_scale).",
        cli=False,
        keyless_default=True,
    )
    reward_range: tuple[float, float] | None = reward_range_option()
    reward: FloatArray | None = _array_option(  # noqa: RUF009 - builds a field
        "Public mean reward r_h(s,a): an array [H, S, A] in the reward range (None: learned "
        "from the data)."
    )
    padding: Literal["absorbing", "none"] = option(
        "absorbing",
        "--padding",
        help="With --data: 'absorbing' pads a terminated episode shorter than H with an "
        "absorbing state (reward 0 on the user's scale) to H steps; 'none' counts only the "
        "steps it has. Episodes cut without termination are never padded.",
    )
    stationary: bool = stationary_option("counts pooled over h into one table")

    def __post_init__(self) -> None:
        rr = self.reward_range
        if isinstance(rr, (list, tuple)) and all(isinstance(v, (int, float)) for v in rr):
            object.__setattr__(self, "reward_range", tuple(float(v) for v in rr))
        if self.reward is not None:
            table = np.array(self.reward)
            if table.dtype.kind in "biuf":
                table = table.astype(np.float64)
                table.flags.writeable = False
            object.__setattr__(self, "reward", table)
        super().__post_init__()

    def validate(self) -> None:
        self.validate_named(None)

    def validate_named(self, names: Names | None) -> None:
        """`validate`, its messages naming the other settings by `names` (`Names`)."""
        check(
            self.bonus in ("bernstein", "hoeffding"),
            "bonus",
            f"must be one of bernstein, hoeffding, not {self.bonus!r}",
        )
        check(
            self.padding in PADDINGS,
            "padding",
            f"must be one of {', '.join(PADDINGS)}, not {self.padding!r}",
        )
        check_nonnegative(self, "bonus_scale")
        check(
            self.delta is None or 0 < self.delta < 1,
            "delta",
            f"(utility failure probability) must be in (0, 1), got {self.delta}",
        )
        check(
            self.unknown_penalty > 1,
            "unknown_penalty",
            f"(C) must be > 1, got {self.unknown_penalty}",
        )
        check(
            self.reward is None or (self.reward.dtype.kind == "f" and self.reward.ndim == 3),
            "reward",
            "must be a numeric array [H, S, A]",
        )
        check_positive(self, "horizon", "states", "actions")
        check_reward_range(self)

    @property
    def utility_delta(self) -> float:
        """δ_u: `delta`, or its default 0.1."""
        return DEFAULT_UTILITY_DELTA if self.delta is None else float(self.delta)

    def to_dict(self) -> dict[str, Any]:
        values = super().to_dict() if self.reward is None else self.replace(reward=None).to_dict()
        if self.reward is not None:
            values["reward"] = self.reward.tolist()
        return values

    def identity(self) -> dict[str, Any]:
        return without_keyless_defaults(self, self.to_dict())


@dataclass(frozen=True)
class DPAPVIConfig(APVIConfig):
    """DP-APVI (Qiao & Wang, Algorithm 1): APVI's settings plus exactly one budget.

    `rho`: ρ-zCDP (discrete Gaussian noise on the counts, σ² = mH/ρ for m released families;
    eq. 2's 2H/ρ for m = 2), stated as (ε, δ)-DP at δ = `privacy_delta` (default 1e-6); or
    `epsilon`: pure ε-DP (discrete Laplace, b = m·2H/ε). `privatize_rewards` also releases the
    reward sums (m = 3) instead of taking a public `reward`. The unit is one trajectory, the
    relation replace-one.
    """

    system = "dp-apvi"
    rho: float | None = option(
        None, "--rho", help="zCDP budget ρ (Gaussian noise).", allow_nan=True
    )
    epsilon: float | None = option(
        None, "--epsilon", help="Pure-DP budget ε (Laplace noise).", allow_nan=True
    )
    privacy_delta: float | None = option(
        None,
        "--privacy-delta",
        help="δ at which the zCDP guarantee is stated as (ε, δ), default 1e-6 (--rho only).",
        allow_nan=True,
    )
    privatize_rewards: bool = option(
        False,
        "--privatize-rewards",
        help="Release noisy reward sums too (the budget is split over 3 count families).",
    )

    def validate_named(self, names: Names | None) -> None:
        rho, eps = name_of(names, "rho"), name_of(names, "epsilon")
        check(
            (self.rho is None) != (self.epsilon is None),
            "rho",
            f"or {eps}: give exactly one of {rho} (zCDP, Gaussian noise) or {eps} (pure "
            "DP, Laplace noise)" + ("" if self.rho is None else ", not both"),
        )
        if self.rho is not None:
            check_budget(self.rho, "rho", "apvi")
            check(
                self.privacy_delta is None or 0 < self.privacy_delta < 1,
                "privacy_delta",
                f"must be in (0, 1), got {self.privacy_delta}",
            )
        else:
            # (ε's range is checked by `Config` for every algorithm: `privrl.privacy.limits`)
            check(
                self.privacy_delta is None,
                "privacy_delta",
                f"is for {rho}; {eps} is pure ε-DP (δ = 0)",
            )
        check(
            not (self.privatize_rewards and self.reward is not None),
            "reward",
            f"give a public reward or {name_of(names, 'privatize_rewards')}, not both",
        )
        super().validate_named(names)


@dataclass(frozen=True)
class PrivacyConfig:
    """What DP-APVI releases and how: the mechanism and the budget.

    mechanism: "gaussian" (ρ-zCDP, give `rho`) or "laplace" (ε-DP, give `epsilon`).
    rho = math.inf switches the noise off (the same code path; the report is then labelled
    non-private) — for limits and tests, not for real runs.
    privatize_rewards: also release the reward sums (the budget is split in three).
    report_delta: the δ at which ε is stated for the Gaussian variant (the Laplace variant is
    pure DP and is stated at δ = 0).
    """

    mechanism: Mechanism = "gaussian"
    rho: float | None = None
    epsilon: float | None = None
    privatize_rewards: bool = False
    report_delta: float = 1e-6

    def __post_init__(self) -> None:
        if self.mechanism == "gaussian":
            if self.rho is None or self.epsilon is not None:
                raise ValueError("the Gaussian (zCDP) variant takes rho (and no epsilon)")
            if not (float(self.rho) > 0 and not math.isnan(self.rho)):
                raise ValueError(f"rho must be > 0, got {self.rho}")
        elif self.mechanism == "laplace":
            if self.epsilon is None or self.rho is not None:
                raise ValueError("the Laplace (pure DP) variant takes epsilon (and no rho)")
            _positive_finite(self.epsilon, "epsilon")
        else:
            raise ValueError(f"mechanism must be 'gaussian' or 'laplace', got {self.mechanism!r}")
        if not 0.0 < self.report_delta < 1.0:
            raise ValueError(f"report_delta must be in (0, 1), got {self.report_delta}")

    @classmethod
    def gaussian(cls, rho: float, **kwargs: Any) -> PrivacyConfig:
        return cls(mechanism="gaussian", rho=rho, **kwargs)

    @classmethod
    def laplace(cls, epsilon: float, **kwargs: Any) -> PrivacyConfig:
        return cls(mechanism="laplace", epsilon=epsilon, **kwargs)

    @property
    def noise_off(self) -> bool:
        return self.mechanism == "gaussian" and math.isinf(float(self.rho or 0.0))


# ---------------------------------------------------------------------------------------------
# 1. counts
# ---------------------------------------------------------------------------------------------


class Counts(NamedTuple):
    """n_h(s,a) ``[H,S,A]``, n_h(s,a,s') ``[H,S,A,S]``, reward sums ``[H,S,A]`` (or None) and
    the number of trajectories (public under replace-one). Counts are int64, exact and
    released (noisy: discrete noise) alike; reward sums are float64."""

    n_sa: npt.NDArray[np.int64] | FloatArray
    n_sas: npt.NDArray[np.int64] | FloatArray
    r_sum: FloatArray | None
    n_episodes: int
    horizon: int | None = None  # H when the tables are pooled over h (leading axis 1)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(H, S, A): the planning horizon, the states counted and the actions."""
        T, S, A = self.n_sa.shape
        return int(self.horizon if self.horizon is not None else T), int(S), int(A)

    @property
    def stationary(self) -> bool:
        """True when the tables are pooled over h (one table for every step)."""
        return self.horizon is not None and int(self.n_sa.shape[0]) == 1 and self.horizon > 1


def _episodes(
    data: TrajectoryDataset | Episodes,
    horizon: int,
    n_states: int,
    n_actions: int,
    padding: str = "none",
    reward_range: RewardRange | None = None,
) -> tuple[Episodes, npt.NDArray[np.bool_]]:
    """``[n, H]`` arrays (states ``[n, H+1]``) and the mask ``valid [n, H]`` of the steps that
    are counted, under the public rules of `privrl.offline.common` (episodes truncated to H,
    short ones padded and masked, steps with an index outside the spaces masked, rewards
    clipped to `reward_range` (default [0, 1]) and mapped into [0, 1]). With
    ``padding="absorbing"`` terminated episodes shorter than H are padded with the absorbing
    state S at the mapped value of reward 0 (`privrl.data.padding`). Only the schema is
    refused, never a value of the data."""
    rr = reward_range or RewardRange()
    H, S, A = int(horizon), int(n_states), int(n_actions)
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {', '.join(PADDINGS)}, got {padding!r}")
    if isinstance(data, Episodes):
        # Sampled arrays: every episode has exactly H steps, so there is nothing to pad.
        st, acts = np.asarray(data.states), np.asarray(data.actions)
        n = acts.shape[0] if acts.ndim == 2 else -1
        if acts.ndim != 2 or acts.shape[1] != H or st.shape != (n, H + 1):
            raise ValueError(
                f"episodes must be arrays states [n, H+1], actions [n, H] with H = {horizon}, "
                f"got {st.shape} and {acts.shape}"
            )
        s_idx, s_ok = as_indices(st.ravel(), "states", S)
        a_idx, a_ok = as_indices(acts.ravel(), "actions", A)
        s_ok = s_ok.reshape(n, H + 1)
        valid = a_ok.reshape(n, H) & s_ok[:, :-1] & s_ok[:, 1:]
        rewards = clip_rewards(data.rewards, rr).reshape(n, H)
        ep = Episodes(s_idx.reshape(n, H + 1), a_idx.reshape(n, H), rewards, None)
        return ep, valid
    if not isinstance(data, TrajectoryDataset):
        raise TypeError(f"expected a TrajectoryDataset or Episodes, got {type(data).__name__}")
    n = int(data.n_episodes)
    s_idx, s_ok = as_indices(data.observations, "states", S)
    a_idx, a_ok = as_indices(data.actions, "actions", A)
    ep_of = np.asarray(data.transition_episode_index, dtype=np.int64)
    t = np.asarray(data.transition_steps, dtype=np.int64)
    # Observation of transition i is row i + episode(i) (each episode adds its final one).
    obs_row = np.arange(data.n_transitions, dtype=np.int64) + ep_of
    keep = t < H  # truncation to the public horizon
    k, h, o = ep_of[keep], t[keep], obs_row[keep]
    states = np.zeros((n, H + 1), dtype=np.int64)
    actions = np.zeros((n, H), dtype=np.int64)
    rewards = np.zeros((n, H))
    step_ok = np.zeros((n, H), dtype=bool)
    next_ok = np.zeros((n, H), dtype=bool)
    states[k, h] = s_idx[o]
    states[k, h + 1] = s_idx[o + 1]
    actions[k, h] = a_idx[keep]
    rewards[k, h] = clip_rewards(data.rewards, rr)[keep]
    step_ok[k, h] = s_ok[o] & a_ok[keep]
    next_ok[k, h] = s_ok[o + 1]
    if padding == "absorbing":
        if not rr.contains_zero:
            raise ValueError(
                f"absorbing padding needs 0 in the reward range, got {rr}: a terminated "
                "episode's remaining steps are worth 0"
            )
        lengths = np.asarray(data.episode_lengths, dtype=np.int64)
        last = np.asarray(data.episode_offsets, dtype=np.int64)[1:] - 1
        padded = pad_absorbing(
            states,
            actions,
            rewards,
            step_ok,
            next_ok,
            lengths=lengths,
            terminated=np.asarray(data.terminated, dtype=bool)[last],
            absorbing=S,
            absorbing_reward=_absorbing_reward(rr),
        )
        return Episodes(padded.states, padded.actions, padded.rewards, None), padded.valid
    return Episodes(states, actions, rewards, None), step_ok & next_ok


def _absorbing_reward(reward_range: RewardRange) -> float:
    """The absorbing state's reward per step in mapped units: the user's reward 0, mapped
    (public). One source for the padded counts, a public reward table and the planner."""
    return reward_range.zero


def empirical_counts(
    data: TrajectoryDataset | Episodes,
    *,
    horizon: int,
    n_states: int,
    n_actions: int,
    reward_sums: bool = False,
    padding: str = "none",
    stationary: bool = False,
    reward_range: RewardRange | None = None,
) -> Counts:
    """The sufficient statistics of DP-APVI, one ``np.bincount`` per family.

    Each trajectory adds at most one entry per step h to each family, whatever the data: the
    public rules of `privrl.offline.common` truncate it to H steps, drop steps with an index
    outside the spaces and clip rewards to the public `reward_range` (default [0, 1]), mapped
    into [0, 1] (what bounds their sensitivity).

    ``padding="absorbing"``: terminated episodes shorter than H are padded with the absorbing
    state S (`privrl.data.padding`), so the counts are over S + 1 states. ``stationary``: the
    counts are pooled over h into one table (leading axis of size 1), for a stationary model;
    a trajectory then adds up to H entries to that one table.
    """
    ep, valid = _episodes(data, horizon, n_states, n_actions, padding, reward_range)
    H, A = int(horizon), int(n_actions)
    S = int(n_states) + (1 if padding == "absorbing" else 0)
    T = 1 if stationary else H  # the count tables' leading axis
    h = np.broadcast_to(np.arange(H, dtype=np.int64) * (0 if stationary else 1), ep.actions.shape)
    sa = (h * S + ep.states[:, :-1]) * A + ep.actions  # flat (h, s, a) index
    sas = sa * S + ep.states[:, 1:]  # flat (h, s, a, s') index
    sa_v = sa[valid]
    n_sa = np.bincount(sa_v, minlength=T * S * A).reshape(T, S, A)
    n_sas = np.bincount(sas[valid], minlength=T * S * A * S).reshape(T, S, A, S)
    r_sum = None
    if reward_sums:
        r_sum = np.bincount(sa_v, weights=ep.rewards[valid], minlength=T * S * A)
        r_sum = r_sum.reshape(T, S, A)
    return Counts(
        n_sa=n_sa,  # int64; the mechanisms convert to float64 once, when adding noise
        n_sas=n_sas,
        r_sum=r_sum,
        n_episodes=int(ep.actions.shape[0]),
        horizon=H if stationary else None,
    )


# ---------------------------------------------------------------------------------------------
# 2. private counts (eq. 2)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoisePlan:
    """Noise of every released family and the resulting uniform error bound E.

    mechanism: "gaussian", "laplace" or "none" (APVI / noise off). The counts get the
        discrete Gaussian / Laplace of this σ or b, the reward sums the continuous one.
    scale: σ (Gaussian) or b (Laplace) per count; 0 for "none".
    sensitivity: Δ₂ = √(2H) (Gaussian) or Δ₁ = 2H (Laplace) per family.
    tail: w.p. ≥ 1 − δ every noise draw is within ±tail; E = 2·tail (the paper's E_ρ / E_ε).
    stationary: the counts are pooled over h (one table; Δ₂ = √2·H, Δ₁ = 2H).
    """

    mechanism: str
    families: tuple[str, ...]
    scale: float
    sensitivity: float
    family_budget: float
    tail: float
    E: float
    iota: float
    stationary: bool = False

    def releases_planned(self, H: int, S: int | None = None, A: int | None = None) -> list[Release]:
        """The releases a run will make (same events), before any data are read; ``size`` is
        filled in when S and A are known (0 otherwise)."""
        out = []
        for fam in self.families:
            size = 0
            if S is not None and A is not None:
                T = 1 if self.stationary else H
                size = T * S * A * (S if fam == "n_sas" else 1)
            out.append(_release_record(self, fam, size))
        return out


def noise_plan(
    H: int,
    S: int,
    A: int,
    privacy: PrivacyConfig | None,
    delta: float,
    *,
    reward_sums: bool | None = None,
    stationary: bool = False,
) -> NoisePlan:
    """σ or b per family from the budget, and E, ι (see the module docstring).

    The reward sums are a released family when ``privacy.privatize_rewards`` (private runs) or
    when ``reward_sums`` is true for APVI (rewards learned from data, recorded as non-private).

    ``stationary``: the counts are pooled over h into one table. A trajectory's contribution
    c to that table is a non-negative vector with ‖c‖₁ ≤ H (one entry, or one reward in
    [0, 1], per step), so ‖c‖₂ ≤ H, and replacing it by c' changes the table by c' − c with
    ‖c' − c‖₂² = ‖c'‖² + ‖c‖² − 2⟨c', c⟩ ≤ 2H² (⟨c', c⟩ ≥ 0) and ‖c' − c‖₁ ≤ 2H: Δ₂ = √2·H
    (attained when each trajectory stays in one cell, vs √(2H) per step) and Δ₁ = 2H (as per
    step). The union bound of E runs over m·S²A counters instead of m·H·S²A.
    """
    if privacy is not None:
        with_rewards = privacy.privatize_rewards
    else:
        with_rewards = bool(reward_sums)
    families = ("n_sa", "n_sas", "r_sum") if with_rewards else ("n_sa", "n_sas")
    m = len(families)
    iota = math.log(H * S * A / delta)  # ι = log(HSA/δ)
    n_bound = m * (1 if stationary else H) * S * S * A  # ≥ number of released counters
    if privacy is None or privacy.noise_off:
        return NoisePlan("none", families, 0.0, 0.0, math.inf, 0.0, 0.0, iota, stationary)
    if privacy.mechanism == "gaussian":
        rho_f = float(privacy.rho) / m  # type: ignore[arg-type]
        # Δ₂ per family: √(2H) per step; √2·H pooled over h (see above)
        sens = math.sqrt(2.0) * H if stationary else math.sqrt(2.0 * H)
        sigma = sens / math.sqrt(2.0 * rho_f)  # σ² = Δ₂²/(2ρ_f) = mH/ρ (eq. 2: 2H/ρ)
        tail = sigma * math.sqrt(2.0 * math.log(2.0 * n_bound / delta))
        return NoisePlan(
            "gaussian", families, sigma, sens, rho_f, tail, 2.0 * tail, iota, stationary
        )
    eps_f = float(privacy.epsilon) / m  # type: ignore[arg-type]
    sens = 2.0 * H  # Δ₁ per family (per step and pooled alike): an integer, as DLap needs
    b = sens / eps_f  # Lap(mΔ₁/ε) = Lap(4H/ε) for m = 2
    # P(|X| > t) < 2e^{-t/b}/(1 + e^{-1/b}) for X ~ DLap(b), ≥ e^{-t/b} of the continuous
    # Laplace of the reward sums: this tail covers both.
    tail = b * (math.log(n_bound / delta) + math.log(2.0 / (1.0 + math.exp(-1.0 / b))))
    return NoisePlan("laplace", families, b, sens, eps_f, tail, 2.0 * tail, iota, stationary)


def _release_record(plan: NoisePlan, family: str, size: int) -> Release:
    """The Release of one family (used for planned releases; the mechanisms make the real
    ones, and a test checks both agree)."""
    name = _FAMILY_NAMES[family]
    if plan.mechanism == "gaussian" and family in _COUNT_FAMILIES:
        rho = plan.sensitivity**2 / (2.0 * plan.scale**2)  # as `discrete_gaussian_mechanism`
        return Release(
            name=name,
            mechanism="discrete_gaussian",
            sensitivity=plan.sensitivity,
            norm="l2",
            noise={"sigma": plan.scale, "sigma2": plan.scale * plan.scale},
            size=size,
            event=dp_event.ZCDpEvent(rho=rho),
            extra={"rho": rho, **_release_extra(family, plan.stationary)},
        )
    if plan.mechanism == "laplace" and family in _COUNT_FAMILIES:
        delta1 = _l1_sensitivity(plan)
        return Release(
            name=name,
            mechanism="discrete_laplace",
            sensitivity=float(delta1),
            norm="l1",
            noise={
                "scale": plan.scale,
                "noise_parameter": 1.0 / plan.scale,
                "epsilon": delta1 / plan.scale,
            },
            size=size,
            event=PureDpEvent(epsilon=delta1 / plan.scale),
            extra=_release_extra(family, plan.stationary),
        )
    if plan.mechanism == "gaussian":
        z = plan.scale / plan.sensitivity
        return Release(
            name=name,
            mechanism="gaussian",
            sensitivity=plan.sensitivity,
            norm="l2",
            noise={"sigma": plan.scale, "noise_multiplier": z},
            size=size,
            event=dp_event.GaussianDpEvent(noise_multiplier=z),
            extra=_release_extra(family, plan.stationary),
        )
    if plan.mechanism == "laplace":
        eps = plan.sensitivity / plan.scale
        return Release(
            name=name,
            mechanism="laplace",
            sensitivity=plan.sensitivity,
            norm="l1",
            noise={"scale": plan.scale, "epsilon": eps},
            size=size,
            event=PureDpEvent(epsilon=eps),
            extra=_release_extra(family, plan.stationary),
        )
    return Release(
        name=name,
        mechanism="none",
        sensitivity=0.0,
        norm="l2",
        noise={},
        size=size,
        event=None,
        extra={"non_private": True},
    )


def _l1_sensitivity(plan: NoisePlan) -> int:
    """Δ₁ of a count family as the integer the discrete Laplace needs (2H: an integer for
    every horizon, per step and pooled alike)."""
    if not (math.isfinite(plan.sensitivity) and plan.sensitivity == round(plan.sensitivity)):
        raise ValueError(
            f"the discrete Laplace on integer counts needs an integer L1 sensitivity, got "
            f"{plan.sensitivity}"
        )
    return round(plan.sensitivity)


def _noisy_family(
    value: Any, family: str, plan: NoisePlan, rng: np.random.Generator
) -> tuple[Any, Release]:
    """One family plus noise: integer counts get the discrete Gaussian / Laplace (vectorised
    sampler on the run's noise generator; the exact `secure=True` sampler is a Python loop per
    draw, far too slow for H·S²·A counts), reward sums the continuous mechanism."""
    name = _FAMILY_NAMES[family]
    counts = family in _COUNT_FAMILIES
    if plan.mechanism == "gaussian":
        gauss = discrete_gaussian_mechanism if counts else gaussian_mechanism
        return gauss(value, sensitivity=plan.sensitivity, sigma=plan.scale, rng=rng, name=name)
    if counts:
        noisy, release = discrete_laplace_mechanism(
            value, sensitivity=_l1_sensitivity(plan), scale=plan.scale, rng=rng, name=name
        )
        if not isinstance(release.event, PureDpEvent):
            # A single count (H·S·A = 1) gets DiscreteLaplaceDpEvent, which dp-accounting's RDP
            # accountant cannot take; Δ₁/b pure DP holds for it as for a vector (and is planned).
            release = replace(release, event=PureDpEvent(epsilon=release.noise["epsilon"]))
        return noisy, release
    return laplace_mechanism(
        value, sensitivity=plan.sensitivity, scale=plan.scale, rng=rng, name=name
    )


def _release_extra(family: str, stationary: bool = False) -> dict[str, Any]:
    what = "a reward in [0, 1]" if family == "r_sum" else "1"
    if stationary:
        derivation = (
            f"replace-one, counts pooled over h: a trajectory adds {what} per step h to one "
            "table, a non-negative vector c with ‖c‖₁ ≤ H; replacing c by c' changes the "
            "table by ‖c' − c‖₂² ≤ ‖c'‖² + ‖c‖² ≤ 2H² and ‖c' − c‖₁ ≤ 2H"
        )
    else:
        derivation = (
            f"replace-one: a trajectory adds {what} to one entry per step h, and replacing it "
            "removes that and adds another, so ≤ 2H entries change, each by ≤ 1"
        )
    return {
        "sensitivity_derivation": derivation,
        "post_processing": "clipped at 0"
        + (", then projected (eq. 3–4)" if family != "r_sum" else ""),
    }


def private_counts(
    counts_: Counts, plan: NoisePlan, rng: np.random.Generator
) -> tuple[Counts, list[Release]]:
    """Eq. (2): n' = max(0, n + noise) for every released family, with one Release each.

    The counts n_h(s,a), n_h(s,a,s') must be integers (`empirical_counts` gives int64): they
    get discrete noise and come back as int64. Reward sums get continuous noise (float64).
    With ``plan.mechanism == "none"`` the counts pass through unchanged and each family is
    recorded as a non-private release. Reward sums that are not a released family are dropped
    from a private output.
    """
    values = {"n_sa": counts_.n_sa, "n_sas": counts_.n_sas, "r_sum": counts_.r_sum}
    # Unreleased reward sums never pass into a private output.
    out: dict[str, Any] = {"r_sum": counts_.r_sum if plan.mechanism == "none" else None}
    releases: list[Release] = []
    for fam in plan.families:
        value = values[fam]
        if value is None:
            raise ValueError("reward sums are to be released but were not counted")
        if plan.mechanism == "none":
            out[fam] = value
            releases.append(_release_record(plan, fam, int(value.size)))
            continue
        noisy, release = _noisy_family(value, fam, plan, rng)
        np.maximum(noisy, 0, out=noisy)  # {·}⁺ of eq. (2): post-processing (keeps the dtype)
        out[fam] = noisy
        extra = {**release.extra, **_release_extra(fam, plan.stationary)}
        releases.append(replace(release, extra=extra))
    return (
        Counts(
            n_sa=out["n_sa"],  # type: ignore[arg-type]
            n_sas=out["n_sas"],  # type: ignore[arg-type]
            r_sum=out["r_sum"],
            n_episodes=counts_.n_episodes,
            horizon=counts_.horizon,
        ),
        releases,
    )


# ---------------------------------------------------------------------------------------------
# 3. projection and private model (eq. 3–5)
# ---------------------------------------------------------------------------------------------


class PrivateModel(NamedTuple):
    """ñ_h(s,a) ``[H,S,A]``, P̃_h(s'|s,a) ``[H,S,A,S]``, the projection optimum t ``[H,S,A]``,
    the reward estimate r̃ ``[H,S,A]`` (None when the reward is given) and ``known`` =
    ñ > E ``[H,S,A]``."""

    n_sa: FloatArray
    P: FloatArray
    t: FloatArray
    reward: FloatArray | None
    known: npt.NDArray[np.bool_]


def private_model(noisy: Counts, E: float) -> PrivateModel:
    """Consistent counts by the projection (3–4) with slack E/2, then P̃ (5).

    P̃(s'|s,a) = ñ_{s,a,s'}/ñ_{s,a} if ñ_{s,a} > E, else 1/S. With E = 0 (APVI) the projection
    returns the counts unchanged (t = 0) and P̃ is the empirical P̂ where n > 0.
    """
    S = noisy.n_sas.shape[-1]
    proj = project_counts(noisy.n_sas, noisy.n_sa, E / 2.0)
    n_tilde_sas = proj.x
    n_tilde = n_tilde_sas.sum(axis=-1)  # ñ_{s,a} = Σ_{s'} ñ_{s,a,s'}
    known = n_tilde > E
    denom = np.where(known, n_tilde, 1.0)
    P = n_tilde_sas
    P /= denom[..., None]  # in place: the projected counts are not kept
    P[~known] = 1.0 / S
    reward = None
    if noisy.r_sum is not None:
        reward = np.where(known, np.clip(noisy.r_sum / denom, 0.0, 1.0), 0.0)
    return PrivateModel(n_sa=n_tilde, P=P, t=proj.t, reward=reward, known=known)


# ---------------------------------------------------------------------------------------------
# 4. pessimistic value iteration (Algorithm 1, lines 3–9)
# ---------------------------------------------------------------------------------------------


class ValueIteration(NamedTuple):
    """Pessimistic Q̃ ``[H,S,A]``, Ṽ ``[H+1,S]``, greedy π̂ ``[H,S]`` and bonus Γ ``[H,S,A]``."""

    Q: FloatArray
    V: FloatArray
    policy: IntArray
    bonus: FloatArray


def pessimistic_value_iteration(
    model: PrivateModel,
    reward: FloatArray,
    plan: NoisePlan,
    config: APVIConfig,
    *,
    reward_bonus: bool = False,
    horizon: int | None = None,
    absorbing_reward: float | None = None,
) -> ValueIteration:
    """Backward induction with the (private) pessimism of Algorithm 1.

    Γ = C1·√(Var_P̃(Ṽ_{h+1})·ι/(ñ − E)) + C2·S·H·E·ι/ñ  (Bernstein, line 5) or
    Γ = C1·H·√(ι/(ñ − E)) + C2·S·H·E·ι/ñ  (Hoeffding), times `bonus_scale`, where ñ > E;
    C·H elsewhere. With `reward_bonus` (reward estimated from data) Γ also gets
    √(ι/(2(ñ − E))) + (tail + E)/ñ. Q̃ = min(r + P̃Ṽ − Γ, H − h + 1)⁺; π̂ = argmax; Ṽ = max.

    A stationary model (tables with a leading axis of size 1, `horizon` = H) uses its one
    table at every step h; the policy and values are still per step.

    ``absorbing_reward`` (absorbing padding, `privrl.data.padding`): the model's last state is
    the absorbing state z, whose model is public, not estimated: every action stays in z with
    this (mapped) reward. It is planned exactly, Q̃_h(z, ·) = (H − h)·absorbing_reward with
    Γ = 0, instead of from its counts: few episodes have ended at the first steps a goal can
    be reached, so a bonus on z's counts would make finishing look worthless (a value of 0,
    below every step that continues) — pessimism about a model that is known.
    """
    T, S, A = model.n_sa.shape
    H = int(horizon) if horizon is not None else T
    E, iota, scale = plan.E, plan.iota, config.bonus_scale
    known = model.known
    n = np.where(known, model.n_sa, 1.0)
    n_minus_e = np.where(known, model.n_sa - E, 1.0)
    lower_order = C2 * S * H * E * iota / n  # the privacy term C2·S·H·E·ι/ñ
    extra = np.zeros_like(n)
    if reward_bonus:
        extra = np.sqrt(iota / (2.0 * n_minus_e)) + (plan.tail + E) / n
    Q = np.empty((H, S, A))
    V = np.zeros((H + 1, S))
    bonus = np.empty((H, S, A))
    policy = np.empty((H, S), dtype=np.int64)
    for h in range(H - 1, -1, -1):
        t = h if T > 1 else 0  # the model's table for step h
        v_next = V[h + 1]
        pv = model.P[t] @ v_next  # (P̃_h · Ṽ_{h+1})(s,a)
        if config.bonus == "bernstein":
            var = np.maximum(model.P[t] @ (v_next * v_next) - pv * pv, 0.0)
            stat = C1 * np.sqrt(var * iota / n_minus_e[t])
        else:
            stat = C1 * H * np.sqrt(iota / n_minus_e[t])
        gamma = np.where(
            known[t], scale * (stat + lower_order[t] + extra[t]), config.unknown_penalty * H
        )
        r_h = reward[h] if reward.shape[0] > 1 else reward[0]
        q = np.clip(r_h + pv - gamma, 0.0, H - h)  # min{Q^p, H − h + 1}⁺ (1-indexed h)
        if absorbing_reward is not None:  # z: known model, exact value, no bonus
            q[-1], gamma[-1] = (H - h) * absorbing_reward, 0.0
        Q[h], bonus[h] = q, gamma
        policy[h] = np.argmax(q, axis=1)
        V[h] = q.max(axis=1)
    return ValueIteration(Q=Q, V=V, policy=policy, bonus=bonus)


# ---------------------------------------------------------------------------------------------
# the algorithm
# ---------------------------------------------------------------------------------------------


@dataclass
class APVIResult:
    """Output of APVI / DP-APVI.

    policy: π̂ (``policy.actions`` is ``[H, S]``); report: the PrivacyReport (non-private for
    APVI); model: ñ, P̃, t, r̃; values: Q̃, Ṽ, Γ in the mapped units of the rewards (each
    reward in [0, 1]); plan: noise and E, ι; diagnostics: per-step rows (functions of
    released quantities only, values on the original scale) and timings; reward_range: the
    public range whose affine map the rewards went through (`original_values` undoes it).
    """

    policy: FiniteHorizonPolicy
    report: PrivacyReport
    model: PrivateModel
    values: ValueIteration
    plan: NoisePlan
    config: APVIConfig
    privacy: PrivacyConfig | None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    reward_range: RewardRange = field(default_factory=RewardRange)

    @property
    def per_step(self) -> list[dict[str, float]]:
        return self.diagnostics["per_step"]

    def original_values(self) -> FloatArray:
        """The pessimistic Ṽ_h(s) ``[H+1, S]`` on the user's reward scale:
        (HIGH − LOW)·Ṽ^u_h + (H − h)·LOW (exact: every episode of the model has H steps)."""
        return _original_values(self.values.V, self.reward_range)


def _original_values(V: FloatArray, reward_range: RewardRange) -> FloatArray:
    """Ṽ ``[H+1, S]`` in mapped units on the original scale (H − h steps remain at row h)."""
    steps = np.arange(V.shape[0] - 1, -1, -1, dtype=np.float64)  # H − h for h = 0..H
    return reward_range.value(V, steps[:, None])


def _check_reward(
    reward: npt.ArrayLike, H: int, S: int, A: int, reward_range: RewardRange | None = None
) -> FloatArray:
    """A public reward table [H, S, A] with values in `reward_range` (default [0, 1])."""
    rr = reward_range or RewardRange()
    r = np.asarray(reward, dtype=np.float64)
    if r.shape != (H, S, A):
        raise ValueError(f"reward must have shape [H, S, A] = [{H}, {S}, {A}], got {r.shape}")
    if not np.all(np.isfinite(r)) or r.min() < rr.low or r.max() > rr.high:
        raise ValueError(f"reward must be in {rr}")
    return r


def _public(privacy: PrivacyConfig | None, reward_given: bool) -> list[str]:
    out = [
        "horizon H and the sizes S, A of the state and action spaces (given, never read off "
        "the data)",
        "the number of trajectories n (fixed under replace-one neighbours)",
    ]
    if reward_given:
        out.append("the mean reward function r_h(s,a) (given, not learned from the data)")
    return out


_DISCRETE_NOTE = (
    "the counts are integers and get the {noise} (Canonne, Kamath & Steinke 2020), so the "
    "released counts are integers with the same privacy as the continuous mechanism; reward "
    "sums, when released, are real-valued and get the continuous one"
)


def _report(
    plan: NoisePlan,
    releases: list[Release],
    privacy: PrivacyConfig | None,
    config: APVIConfig,
    reward_given: bool,
    H: int,
) -> PrivacyReport:
    system = "apvi" if privacy is None else "dp-apvi"
    common = [
        f"utility failure probability δ = {config.utility_delta:g} (in E and ι; not a privacy "
        "parameter)",
        *(
            ["stationary model: counts pooled over h in one table (Δ₂ = √2·H, Δ₁ = 2H)"]
            if plan.stationary
            else []
        ),
        f"E = {plan.E:.6g}, ι = {plan.iota:.6g}; projection slack E/2",
        DATA_RULES,
    ]
    if plan.mechanism == "none":
        why = (
            "APVI: non-private baseline (no noise, E = 0)"
            if privacy is None
            else "ρ = ∞: noise switched off (DP-APVI's code path with E = 0)"
        )
        return PrivacyReport.non_private(
            UNIT,
            RELATION,
            releases,
            system=system,
            public=_public(privacy, reward_given),
            notes=[why, *common],
        )
    assert privacy is not None
    m = len(plan.families)
    notes = list(common)
    if plan.mechanism == "gaussian":
        rho = float(privacy.rho)  # type: ignore[arg-type]
        delta = privacy.report_delta
        notes.insert(
            0,
            f"ρ = {rho:g}-zCDP split equally over {m} families (ρ/{m} each, σ² = "
            f"{m}Δ₂²/(2ρ) = {plan.scale**2:.6g}); Bun–Steinke closed form ε = ρ + 2√(ρ log(1/δ)) = "
            f"{zcdp_to_dp(rho, delta):.6g} at δ = {delta:g} (the accountant's ε is tighter)",
        )
        notes.insert(1, _DISCRETE_NOTE.format(noise="discrete Gaussian N_Z(0, σ²)"))
    else:
        delta = 0.0
        eps = float(privacy.epsilon)  # type: ignore[arg-type]
        notes.insert(
            0,
            f"ε = {eps:g} pure DP split equally over {m} families (ε/{m} each, "
            f"Laplace scale {m}·2H/ε = {plan.scale:.6g}); basic composition",
        )
        notes.insert(1, _DISCRETE_NOTE.format(noise="discrete Laplace DLap(b)"))
    return PrivacyReport.build(
        UNIT,
        RELATION,
        releases,
        delta,
        system=system,
        public=_public(privacy, reward_given),
        notes=notes,
    )


def dp_apvi_from_counts(
    counts_: Counts,
    *,
    privacy: PrivacyConfig | None,
    config: APVIConfig | None = None,
    reward: npt.ArrayLike | None = None,
    rng: np.random.Generator | None = None,
    reward_range: RewardRange | None = None,
    absorbing: bool = False,
) -> APVIResult:
    """DP-APVI (or APVI with ``privacy=None``) from the empirical counts.

    The counts hold rewards already mapped into [0, 1] (`empirical_counts`), and ``reward``,
    the public mean reward ``[H,S,A]``, is in the same mapped units; ``reward_range`` is the
    range of that map, used to report values on the original scale (default [0, 1]: the
    identity). Without ``reward``, a private run must release the reward sums
    (``privacy.privatize_rewards``), and APVI uses the empirical mean.
    ``rng`` is the `NoiseGenerator` of the privacy noise (default: a fresh secure one; tests
    and simulations pass `NoiseSource.insecure(seed).generator()` for repeatable noise).
    ``absorbing``: the counts' last state is the absorbing state of `padding="absorbing"`,
    planned with its public model (see `pessimistic_value_iteration`).
    """
    config = config or APVIConfig()
    rr = reward_range or RewardRange()
    H, S, A = counts_.shape
    timings: dict[str, float] = {}
    privatize_rewards = privacy is not None and privacy.privatize_rewards
    if reward is not None and privatize_rewards:
        raise ValueError("give a public reward or privatize_rewards=True, not both")
    if reward is None and privacy is not None and not privatize_rewards:
        raise ValueError(
            "the rewards in the data are private: pass the public mean reward (reward=...) or "
            "release noisy reward sums (privatize_rewards=True)"
        )
    reward_given = reward is not None
    r_pub = _check_reward(reward, H, S, A) if reward is not None else None
    if not reward_given and counts_.r_sum is None:
        raise ValueError("reward sums were not counted (empirical_counts(..., reward_sums=True))")
    plan = noise_plan(
        H,
        S,
        A,
        privacy,
        config.utility_delta,
        reward_sums=not reward_given,
        stationary=counts_.stationary,
    )
    gen = noise_generator(rng, "dp-apvi") if privacy is not None else rng

    t0 = time.perf_counter()
    noisy, releases = private_counts(counts_, plan, gen)
    if reward_given:
        noisy = noisy._replace(r_sum=None)  # the public reward is used instead
    timings["noise"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    model = private_model(noisy, plan.E)
    timings["projection"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    r = r_pub if r_pub is not None else model.reward
    assert r is not None
    values = pessimistic_value_iteration(
        model,
        r,
        plan,
        config,
        reward_bonus=not reward_given,
        horizon=H,
        absorbing_reward=_absorbing_reward(rr) if absorbing else None,
    )
    timings["planning"] = time.perf_counter() - t0

    report = _report(plan, releases, privacy, config, reward_given, H)
    if not (rr.low == 0.0 and rr.high == 1.0):
        report.notes.append(
            f"reward range {rr}: rewards clipped to it and mapped into [0, 1], r ↦ (r − "
            f"{rr.low:g})/{rr.width:g}; the sensitivities hold for the mapped rewards, values "
            f"are reported on the original scale (V = {rr.width:g}·V_u + (H − h)·{rr.low:g})"
        )
    policy = FiniteHorizonPolicy(
        values.policy,
        A,
        info={
            "system": report.system,
            "bonus": config.bonus,
            "bonus_scale": config.bonus_scale,
            "epsilon": report.epsilon,
            "delta": report.delta,
            "rho": report.rho,
        },
    )
    diagnostics = {
        "E": plan.E,
        "iota": plan.iota,
        "noise_scale": plan.scale,
        "tail": plan.tail,
        "n_episodes": counts_.n_episodes,
        "per_step": _per_step(model, values, rr),
        "timings": timings,
    }
    return APVIResult(policy, report, model, values, plan, config, privacy, diagnostics, rr)


def _per_step(
    model: PrivateModel, values: ValueIteration, reward_range: RewardRange
) -> list[dict[str, float]]:
    """Per-step summaries of released quantities only (safe to publish); values on the
    original reward scale."""
    V = _original_values(values.V, reward_range)
    known = model.known
    n_known = known.sum(axis=(1, 2))
    rows = []
    for h in range(values.V.shape[0] - 1):
        t = h if known.shape[0] > 1 else 0  # a stationary model has one table
        per_step_known = values.bonus[h][known[t]]
        rows.append(
            {
                "h": h + 1,
                "known_fraction": float(known[t].mean()),
                "mean_bonus_known": float(per_step_known.mean()) if n_known[t] else float("nan"),
                "mean_n_tilde": float(model.n_sa[t].mean()),
                "mean_projection_t": float(model.t[t].mean()),
                "V_mean": float(V[h].mean()),
                "V_max": float(V[h].max()),
            }
        )
    return rows


def dp_apvi(
    data: TrajectoryDataset | Episodes,
    *,
    horizon: int,
    n_states: int,
    n_actions: int,
    privacy: PrivacyConfig | None,
    config: APVIConfig | None = None,
    reward: npt.ArrayLike | None = None,
    rng: np.random.Generator | None = None,
    padding: str = "none",
    stationary: bool = False,
    reward_range: RewardRange | tuple[float, float] | None = None,
) -> APVIResult:
    """DP-APVI on a dataset of tabular episodes (Algorithm 1).

    ``privacy=None`` gives non-private APVI (same code, no noise, E = 0). States and actions
    are integer indices; ``horizon``, ``n_states`` and ``n_actions`` are public (never read
    off the data) and the data are fitted to them by public rules (`privrl.offline.common`:
    longer episodes truncated to H, steps outside the spaces not counted). A private run
    refuses a dataset that declares privacy units (``unit_ids``): it protects one trajectory.

    ``reward_range`` (LOW, HIGH), public (default [0, 1]): rewards are clipped to it and
    mapped into [0, 1] (the privacy bound), values are reported on the original scale
    (see the module docstring). ``padding="absorbing"``: terminated episodes shorter than H
    are padded with an absorbing state (index S, reward 0 on the original scale, so 0 must be
    in the range; `privrl.data.padding`); the model and values have S + 1 states, the policy
    is reported on the S original ones. A public ``reward`` is given on the S original states
    (``[H, S, A]``, original scale, in the range); the absorbing state's reward is 0.
    ``stationary``: the counts are pooled over h (one transition model for every step; see
    `noise_plan` for the sensitivity).
    """
    if privacy is not None:
        refuse_declared_units(data, "DP-APVI")
    rr = (
        reward_range
        if isinstance(reward_range, RewardRange)
        else RewardRange(*(reward_range or (0.0, 1.0)))
    )
    privatize = privacy is not None and privacy.privatize_rewards
    absorbing = padding == "absorbing"
    if reward is not None:
        r = np.asarray(reward, dtype=np.float64)
        if r.ndim == 3:  # (a shape error is reported by `dp_apvi_from_counts`)
            r = rr.to_unit(_check_reward(r, *r.shape, rr))
            if absorbing:  # the absorbing state's reward: the original 0, mapped
                r = np.concatenate(
                    [r, np.full((r.shape[0], 1, r.shape[2]), _absorbing_reward(rr))], axis=1
                )
        reward = r
    t0 = time.perf_counter()
    c = empirical_counts(
        data,
        horizon=horizon,
        n_states=n_states,
        n_actions=n_actions,
        reward_sums=privatize or reward is None,
        padding=padding,
        stationary=stationary,
        reward_range=rr,
    )
    counting = time.perf_counter() - t0
    result = dp_apvi_from_counts(
        c,
        privacy=privacy,
        config=config,
        reward=reward,
        rng=rng,
        reward_range=rr,
        absorbing=absorbing,
    )
    result.diagnostics["timings"] = {"counting": counting, **result.diagnostics["timings"]}
    if absorbing:  # the policy on the original states; model and values keep S + 1
        result.report.notes.append(
            "absorbing-state padding: a terminated episode shorter than H continues in an "
            f"absorbing state (index {int(n_states)}, reward 0 on the original scale, "
            f"{rr.zero:g} mapped) to H steps, one count per step as a real step (the "
            "sensitivity is unchanged); episodes cut without termination are not padded; "
            "the absorbing state's model is public (it stays put at that reward), so it is "
            "planned exactly, with no bonus (post-processing: no release changes)"
        )
        policy = result.policy
        info = {**policy.info, "padding": "absorbing (state S, dropped from the policy)"}
        result.policy = FiniteHorizonPolicy(
            policy.actions[:, : int(n_states)], policy.n_actions, info
        )
    if stationary:
        result.policy.info["stationary"] = True
    return result


def apvi(
    data: TrajectoryDataset | Episodes,
    *,
    horizon: int,
    n_states: int,
    n_actions: int,
    config: APVIConfig | None = None,
    reward: npt.ArrayLike | None = None,
    padding: str = "none",
    stationary: bool = False,
    reward_range: RewardRange | tuple[float, float] | None = None,
) -> APVIResult:
    """Non-private APVI (Yin & Wang 2021): `dp_apvi` with no noise and E = 0."""
    return dp_apvi(
        data,
        horizon=horizon,
        n_states=n_states,
        n_actions=n_actions,
        privacy=None,
        config=config,
        reward=reward,
        padding=padding,
        stationary=stationary,
        reward_range=reward_range,
    )


def config_dict(config: APVIConfig, privacy: PrivacyConfig | None) -> dict[str, Any]:
    """JSON-ready description of a run's planning settings and mechanism (for config.json)."""
    planning = {
        "bonus": config.bonus,
        "bonus_scale": config.bonus_scale,
        "delta": config.utility_delta,
        "unknown_penalty": config.unknown_penalty,
    }
    return {"apvi": planning, "privacy": None if privacy is None else asdict(privacy)}
