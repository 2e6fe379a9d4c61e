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
* rewards are clipped to [0, 1] (NaN counts as 0).

What may be refused is the schema, which neighbouring datasets share: array rank and dtype,
and the presence of a ``unit_ids`` field (a dataset that declares privacy units other than the
trajectory), decided by the field being there, never by how many distinct ids it holds.

Also shared: the checks of the learners' configs (`check_budget`, `check_nonnegative`,
`check_positive`, the `stationary` setting), the episode count as a public parameter
(`header_trajectories`) and `Names`, how a message spells a setting (the field from Python,
the flag on the command line).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from privrl.config import Config, ConfigError, check, option
from privrl.data.dataset import DatasetError

__all__ = [
    "BUDGET_RANGE",
    "DATA_RULES",
    "Names",
    "as_indices",
    "check_budget",
    "check_nonnegative",
    "check_positive",
    "clip_rewards",
    "header_trajectories",
    "refuse_declared_units",
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
    "used; rewards are clipped to [0, 1] (NaN as 0)"
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


def clip_rewards(rewards: Any) -> npt.NDArray[np.float64]:
    """Rewards clipped to [0, 1], NaN as 0 (the bound every reward sensitivity uses)."""
    r = np.asarray(rewards, dtype=np.float64)
    return np.clip(np.nan_to_num(r, nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)


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
