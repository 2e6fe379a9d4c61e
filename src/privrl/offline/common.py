"""Rules shared by the offline systems (DP-APVI, DP-VAPVI and their baselines) for turning a
dataset into per-step arrays without letting the private data decide anything.

Both systems protect one trajectory under replace-one neighbours, and their sensitivities
rest on one fact: a trajectory contributes at most one term per step h = 0..H-1. The data are
made to respect that bound by public rules, never by errors whose occurrence would depend on
the data (such an error is itself a release):

* the horizon H is public (a flag or the dataset's metadata), never the longest episode;
  episodes longer than H are truncated to their first H steps, shorter ones contribute the
  steps they have;
* a step whose state, action or next state is not an index of the declared spaces (out of
  range, or a non-integral float) is not used;
* rewards are clipped to the public reward range [LOW, HIGH] (NaN counts as 0, clipped into
  the range) and mapped affinely into [0, 1], r ↦ (r − LOW)/(HIGH − LOW) (`RewardRange`), so
  every sensitivity is stated for rewards in [0, 1] whatever their sign or scale. The range is
  public (`resolve_reward_range`: the config's ``reward_range`` > the dataset metadata's
  declared ``extra["reward_range"]`` > [0, 1] by default for a non-private run; a private run
  that learns rewards from the data refuses without one). The learners plan on the mapped
  rewards and report values on the original scale (`RewardRange.value`).

What may be refused is the schema, which neighbouring datasets share: array rank and dtype,
and the presence of a ``unit_ids`` field (a dataset that declares privacy units other than the
trajectory), decided by the field being there, never by how many distinct ids it holds.

Also shared: the checks of the learners' configs (`check_budget`, `check_nonnegative`,
`check_positive`, the `stationary` setting), the episode count as a public parameter
(`header_trajectories`) and `Names`, how a message spells a setting (the field from Python,
the flag on the command line), and the reward range (`RewardRange`, `reward_range_option`,
`check_reward_range`, `resolve_reward_range`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from privrl.config import Config, ConfigError, check, option
from privrl.data.dataset import DatasetError

__all__ = [
    "BUDGET_RANGE",
    "DATA_RULES",
    "DEFAULT_REWARD_RANGE",
    "Names",
    "RewardRange",
    "as_indices",
    "check_budget",
    "check_nonnegative",
    "check_positive",
    "check_reward_range",
    "clip_rewards",
    "header_trajectories",
    "refuse_declared_units",
    "resolve_reward_range",
    "reward_range_option",
    "stationary_option",
    "without_keyless_defaults",
]

# ρ and ε outside this range make a run numerically meaningless (σ or b overflow, or no noise
# at all); a budget above it is no privacy (use the non-private twin).
BUDGET_RANGE = (1e-6, 1e6)

Names = Mapping[str, str]
"""How a message names a setting: config field → the word shown (the field itself from
Python; a command-line adapter passes the flags). A field it does not list is named as is."""


def without_keyless_defaults(config: Config, values: dict[str, Any]) -> dict[str, Any]:
    """`values` (a config's `to_dict`) without the `keyless_default` settings that hold
    their default (what `Config.identity` drops), safe for array-valued settings."""
    import dataclasses

    out = dict(values)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        plain = value is None or isinstance(value, (bool, int, float, str))
        if f.metadata.get("keyless_default") and plain and value == f.default:
            out.pop(f.name, None)
    return out


def name_of(names: Names | None, key: str) -> str:
    """The word a message uses for the setting `key` (see `Names`)."""
    return key if names is None else names.get(key, key)


DATA_RULES = (
    "public data rules (the same for every dataset, so they bound each trajectory's "
    "contribution to one term per step without a data-dependent error): episodes longer than "
    "H are truncated to their first H steps and shorter ones contribute the steps they have; a "
    "step whose state, action or next state is not an index of the declared spaces is not "
    "used; rewards are clipped to the public reward range [LOW, HIGH] (NaN as 0) and mapped "
    "affinely into [0, 1], r ↦ (r − LOW)/(HIGH − LOW)"
)


def as_indices(
    values: Any, what: str, n: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``(index, ok)`` of a dataset column of state or action indices in ``[0, n)``.

    Entries that are not such an index (out of range, NaN, a non-integral float) get index 0
    and ``ok = False``: the caller drops their steps. Only the schema is refused (a
    `DatasetError`): a column with more than one value per row, or a non-numeric dtype.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise DatasetError(
            f"non-scalar {what}: one integer index per step is needed, got rows of shape "
            f"{arr.shape[1:]} (a tabular or feature-table method needs integer indices; "
            "discretise the observations first)",
            field=what,
        )
    if arr.dtype.kind in "biu":
        idx = arr.astype(np.int64)
        ok = (idx >= 0) & (idx < n)
    elif arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(arr) & (arr == np.round(arr)) & (arr >= 0) & (arr < n)
        idx = np.where(ok, arr, 0).astype(np.int64)
    else:
        raise DatasetError(
            f"non-integer {what} (dtype {arr.dtype}): integer indices are needed",
            field=what,
        )
    return np.where(ok, idx, 0), ok


def clip_rewards(rewards: Any, reward_range: RewardRange | None = None) -> npt.NDArray[np.float64]:
    """Rewards clipped to the public `reward_range` (default [0, 1]) and mapped into [0, 1],
    NaN as 0 (the bound every reward sensitivity uses; see `RewardRange.to_unit`)."""
    return (reward_range or RewardRange()).to_unit(rewards)


# ---------------------------------------------------------------------------------------------
# the reward range: public, any sign, applied as the privacy bound
# ---------------------------------------------------------------------------------------------

DEFAULT_REWARD_RANGE = (0.0, 1.0)


@dataclass(frozen=True)
class RewardRange:
    """A public reward range [low, high] and its affine map into [0, 1].

    A reward r is clipped to [low, high] (NaN as 0, clipped too; ±inf to the bounds) and
    mapped to u = (r − low)/(high − low) ∈ [0, 1], where every sensitivity of the learners is
    stated. The map is affine with a positive slope, so for episodes of a fixed length H
    (every episode of the padded model has H steps, `privrl.data.padding`) it preserves the
    order of values: V = (high − low)·V_u + H·low (`value`). The original reward 0 maps to
    `zero` = −low/(high − low), the reward of a step that no longer exists (the absorbing
    state after termination), which is why padding needs 0 ∈ [low, high].
    """

    low: float = 0.0
    high: float = 1.0

    def __post_init__(self) -> None:
        lo, hi = float(self.low), float(self.high)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"a reward range needs finite LOW < HIGH, got [{lo:g}, {hi:g}]")
        object.__setattr__(self, "low", lo)
        object.__setattr__(self, "high", hi)

    @property
    def width(self) -> float:
        return self.high - self.low

    @property
    def contains_zero(self) -> bool:
        return self.low <= 0.0 <= self.high

    @property
    def zero(self) -> float:
        """The mapped value of the original reward 0 (in [0, 1] when 0 ∈ [low, high])."""
        return -self.low / self.width

    def to_unit(self, rewards: Any) -> npt.NDArray[np.float64]:
        """Rewards clipped to [low, high] and mapped into [0, 1]."""
        r = np.asarray(rewards, dtype=np.float64)
        r = np.nan_to_num(r, nan=0.0, posinf=self.high, neginf=self.low)
        return (np.clip(r, self.low, self.high) - self.low) / self.width

    def value(self, unit_value: Any, steps: Any) -> Any:
        """A value of the mapped rewards over `steps` steps, on the original scale:
        (high − low)·V_u + steps·low (exact for a sum of `steps` mapped rewards)."""
        return (
            self.width * np.asarray(unit_value, dtype=np.float64)
            + np.asarray(steps, dtype=np.float64) * self.low
        )

    def as_list(self) -> list[float]:
        return [self.low, self.high]

    def __str__(self) -> str:
        return f"[{self.low:g}, {self.high:g}]"


def reward_range_option() -> Any:
    """The ``reward_range`` setting (flag ``--reward-range LOW,HIGH``) of the offline
    learners (one wording for all)."""
    return option(
        None,
        "--reward-range",
        metavar="LOW,HIGH",
        help="Public per-step reward range, any sign (e.g. -100,0 for costs): rewards are "
        "clipped to it and mapped into [0, 1] for the noise; values are reported on the "
        "original scale. Default: the dataset metadata's reward_range, else [0, 1] for a "
        "non-private run (a private run that learns rewards refuses without one).",
    )


def check_reward_range(config: Config, key: str = "reward_range") -> None:
    """`key` is unset or two finite numbers LOW < HIGH."""
    r = getattr(config, key)
    ok = r is None or (
        isinstance(r, Sequence)
        and len(r) == 2
        and all(isinstance(v, (int, float)) and math.isfinite(v) for v in r)
        and r[0] < r[1]
    )
    check(ok, key, f"must be LOW,HIGH with finite LOW < HIGH, got {r}")


def resolve_reward_range(
    params: Any,
    given: Sequence[float] | None,
    metadata: Any,
    *,
    default_allowed: bool,
    names: Names | None = None,
    why_needed: str = "rewards learned from the data enter a sensitivity",
) -> RewardRange:
    """The public reward range, recorded in `params`: `given` (the config's field) > the
    dataset metadata's declared ``extra["reward_range"]`` (skipped when marked inferred from
    the data) > [0, 1] as a recorded default when `default_allowed` (a non-private run, or one
    whose rewards never enter a sensitivity) > a `ConfigError` on ``reward_range``.

    Never from the data: the smallest and largest reward of a private dataset are not public.
    """
    from privrl.privacy.public import PublicParameterError

    flag = name_of(names, "reward_range")
    fix = f"pass {flag} LOW,HIGH (a public bound on every per-step reward, any sign)"
    extra = {"default": list(DEFAULT_REWARD_RANGE)} if default_allowed else {}
    try:
        value = params.resolve(
            "reward range",
            flag=None if given is None else [float(v) for v in given],
            metadata=metadata,
            key="reward_range",
            fix=fix,
            detail="rewards are clipped to it and mapped into [0, 1], r ↦ (r − LOW)/(HIGH − LOW)",
            **extra,
        )
    except PublicParameterError as exc:
        raise ConfigError("reward_range", f"is required ({why_needed}): {exc}") from None
    try:
        lo, hi = (float(v) for v in value)
        return RewardRange(lo, hi)
    except (TypeError, ValueError):
        raise ConfigError(
            "reward_range", f"must be two finite numbers LOW < HIGH, got {value!r}; {fix}"
        ) from None


def refuse_declared_units(dataset: Any, system: str) -> None:
    """Refuse a dataset with a ``unit_ids`` field for a private run of `system`.

    The systems protect one trajectory. A dataset that records units (users, patients) may
    hold several trajectories per unit, which a trajectory-level guarantee does not protect.
    The decision is the schema's (the field is present), not the ids' (how many repeat): an
    error on repeated ids would fire on one dataset and not on its neighbour.
    """
    if getattr(dataset, "unit_ids", None) is not None:
        raise DatasetError(
            f"the dataset declares privacy units (a unit_ids field): {system} protects one "
            "trajectory, which does not protect a unit that contributes several; this is "
            "decided from the schema, not from the ids — if every unit has exactly one "
            "episode, re-import the data without the unit column",
            field="unit_ids",
        )


# ---------------------------------------------------------------------------------------------
# config checks and public parameters shared by the tabular and linear learners
# ---------------------------------------------------------------------------------------------


def check_budget(value: float, key: str, twin: str) -> None:
    """A budget (ρ or ε) in `BUDGET_RANGE` (NaN refused too); `twin` is the non-private
    algorithm named when the budget is too large to mean anything."""
    lo, hi = BUDGET_RANGE
    if not lo <= value <= hi:
        hint = f" (for no privacy use `{twin}`)" if value > hi else ""
        raise ConfigError(
            key,
            f"must be in [{lo:g}, {hi:g}], got {value:g}: outside it the noise is "
            f"numerically meaningless{hint}",
        )


def check_nonnegative(config: Config, *keys: str) -> None:
    """Each of `keys` is finite and >= 0."""
    for key in keys:
        value = getattr(config, key)
        check(math.isfinite(value) and value >= 0, key, f"must be finite and >= 0, got {value}")


def check_positive(config: Config, *keys: str) -> None:
    """Each of `keys` is unset or >= 1."""
    for key in keys:
        value = getattr(config, key)
        check(value is None or value >= 1, key, f"must be >= 1, got {value}")


def header_trajectories(
    params: Any,
    name: str,
    header: Any,
    detail: str = "the file's header; fixed under replace-one neighbours",
) -> int:
    """The header's episode count as a public parameter (replace-one neighbours have the
    same count; under add/remove it is not public and is never asked for)."""
    from privrl.privacy.public import Source

    return params.given(name, int(header.n_episodes), Source.METADATA, detail)


def stationary_option(what: str) -> Any:
    """The ``stationary`` setting (flag ``--stationary``) of the tabular and linear learners
    (one wording for both): `what` says what is pooled. Pooling is
    `privrl.data.padding.step_rows`; the noise is calibrated to the H entries one trajectory
    adds to a pooled statistic (`privrl.data.padding.entries_per_trajectory`)."""
    return option(
        False,
        "--stationary",
        help=f"One transition model for every step h ({what}; the noise is calibrated to a "
        "trajectory's H entries in one pooled statistic, H the declared horizon).",
    )
