"""Contextual-bandit logs (one row per impression) as datasets of one-step episodes.

A bandit log has no ``next_obs``: each row is one decision, with its context column(s), the
action taken, the reward and, for off-policy evaluation, the logging policy's propensity of
that action (and, for slates, the position the action was shown at). `BanditColumns` says
which columns hold what (`parse_bandit_columns` reads its text form
``"obs=age|country,action=item,reward=click,behaviour_prob=pscore,position=slot"``), and
`as_transitions` turns the log into the transition table `privrl.data.tables.from_table`
reads, so a bandit import is the same import with its layout fixed:

* every row is its own one-step episode (``episode=ID`` may name an impression id, which must
  then be unique; without it the row number is the episode);
* the observation is the context columns followed by the position column, if mapped (a
  target policy that depends on the slot sees it); a log with neither is context-free and
  every observation is 0, in the declared space ``Discrete(1)``;
* the final observation is the context again and the episode is terminated (nothing follows
  a decision, so no estimator bootstraps from it);
* the metadata declares horizon 1 and discount 1 (a bandit log's public facts, not read from
  the data), so the importance-sampling estimators need no ``--max-horizon`` or ``--gamma``,
  and ``metadata.extra["bandit"]`` names the context, position and propensity columns.

The spaces are declared like any import's (the observation space covers the context columns
and the position, in that order; see `privrl.data.tables`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from gymnasium import spaces

from privrl.data.dataset import DatasetError
from privrl.data.tables import ColumnMapping, parse_items

__all__ = ["BANDIT_KEYS", "BanditColumns", "as_bandit_columns", "as_transitions"]

BANDIT_KEYS = ("obs", "action", "reward", "behaviour_prob", "position", "episode", "unit")
_REQUIRED = ("action", "reward")
_EXAMPLE = "'obs=age|country,action=item,reward=click,behaviour_prob=pscore'"
_HINT = " (a bandit log has one-step episodes: no next_obs, flags or timestep)"
#: The synthetic columns the transition table adds (never a user's column name).
ROW_COLUMN, CONTEXT_COLUMN, DONE_COLUMN = "(row number)", "(no context)", "(one step)"
#: The declared observation space of a context-free log (every observation is 0).
CONTEXT_FREE_SPACE = spaces.Discrete(1)


@dataclass(frozen=True)
class BanditColumns:
    """Which columns of a bandit log hold what: ``action`` and ``reward`` (required), the
    context ``obs`` (one column or a sequence), ``behaviour_prob`` (the logging policy's
    propensity of the logged action), ``position`` (the slot the action was shown at),
    ``episode`` (a unique impression id) and ``unit`` (the privacy unit, e.g. a user id)."""

    action: str
    reward: str
    obs: str | tuple[str, ...] | None = None
    behaviour_prob: str | None = None
    position: str | None = None
    episode: str | None = None
    unit: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.obs, list):
            object.__setattr__(self, "obs", tuple(self.obs))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BanditColumns:
        unknown = sorted(set(d) - set(BANDIT_KEYS))
        if unknown:
            raise DatasetError(
                f"bandit column mapping: unknown key(s) {unknown}{_HINT}; valid keys: "
                f"{list(BANDIT_KEYS)}"
            )
        missing = [k for k in _REQUIRED if not d.get(k)]
        if missing:
            raise DatasetError(
                f"bandit column mapping: missing required key(s) {missing} (required: "
                f"{list(_REQUIRED)}; e.g. {_EXAMPLE})"
            )
        return cls(**{k: v for k, v in d.items() if v is not None})

    def context_columns(self) -> list[str]:
        """The observation's columns, in order: the context columns, then the position."""
        obs = [] if self.obs is None else [self.obs] if isinstance(self.obs, str) else self.obs
        return [*obs, *([self.position] if self.position else [])]

    def columns(self) -> dict[str, list[str]]:
        """Mapping key → list of column names (only mapped keys)."""
        out: dict[str, list[str]] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = [value] if isinstance(value, str) else list(value)
        return out

    def to_string(self) -> str:
        """The command-line form, inverse of `parse_bandit_columns`."""
        return ",".join(f"{k}={'|'.join(cols)}" for k, cols in self.columns().items())


def parse_bandit_columns(text: str) -> BanditColumns:
    """Parse ``"obs=c1|c2,action=item,reward=click,behaviour_prob=pscore,position=pos"``
    (``key=column`` items; ``|`` between the context columns)."""
    return BanditColumns.from_dict(parse_items(text, BANDIT_KEYS, ("obs",), _EXAMPLE, _HINT))


def as_bandit_columns(mapping: BanditColumns | Mapping[str, Any] | str) -> BanditColumns:
    """`BanditColumns` from itself, a mapping of key → column(s) or its text form."""
    if isinstance(mapping, BanditColumns):
        return mapping
    if isinstance(mapping, ColumnMapping):
        raise DatasetError(
            "a bandit log takes BanditColumns (action, reward, obs, behaviour_prob, position, "
            "episode, unit), not a transitions ColumnMapping"
        )
    if isinstance(mapping, str):
        return parse_bandit_columns(mapping)
    return BanditColumns.from_dict(mapping)


def _unique_ids(table: Any, name: str, source: str) -> None:
    """An impression id column names each row once (a bandit episode is one row)."""
    if name not in table.column_names:
        return  # the transition import names the missing column
    ids = np.asarray(table.column(name).to_numpy(zero_copy_only=False))
    if ids.dtype == object:
        ids = ids.astype(str)
    _, counts = np.unique(ids, return_counts=True)
    repeated = int((counts > 1).sum())
    if repeated:
        raise DatasetError(
            f"{source}: {repeated} id(s) of column {name!r} (mapped as 'episode') appear in more "
            "than one row; a bandit log has one row per impression — map episode= to a unique "
            "impression id, or leave it out (each row is then its own episode)"
        )


def as_transitions(
    table: Any, mapping: BanditColumns | Mapping[str, Any] | str, source: str
) -> tuple[Any, ColumnMapping, dict[str, Any]]:
    """The bandit log `table` (a pyarrow Table) as a transitions table of one-step episodes,
    the `ColumnMapping` that reads it, and the facts its metadata records (public: column
    names and the layout, nothing computed from the values)."""
    import pyarrow as pa

    cols = as_bandit_columns(mapping)
    for name in (ROW_COLUMN, CONTEXT_COLUMN, DONE_COLUMN):
        if name in table.column_names:
            raise DatasetError(f"{source}: column name {name!r} is reserved for bandit import")
    n = table.num_rows
    if n == 0:
        raise DatasetError(f"{source} has no rows")
    if cols.episode is not None:
        _unique_ids(table, cols.episode, source)
    else:
        table = table.append_column(ROW_COLUMN, pa.array(np.arange(n, dtype=np.int64)))
    context = cols.context_columns()
    if not context:
        table = table.append_column(CONTEXT_COLUMN, pa.array(np.zeros(n, dtype=np.int64)))
        context = [CONTEXT_COLUMN]
    table = table.append_column(DONE_COLUMN, pa.array(np.ones(n, dtype=np.bool_)))
    obs: str | tuple[str, ...] = context[0] if len(context) == 1 else tuple(context)
    transitions = ColumnMapping(
        episode=cols.episode or ROW_COLUMN,
        obs=obs,
        action=cols.action,
        reward=cols.reward,
        next_obs=obs,
        terminated=DONE_COLUMN,
        behaviour_prob=cols.behaviour_prob,
        unit=cols.unit,
    )
    facts = {
        "final_observation": "bandit log: one-step episodes, the context repeated",
        "bandit": {
            "context_columns": cols.columns().get("obs", []),
            "position_column": cols.position,
            "propensity_column": cols.behaviour_prob,
            "mapping": cols.to_string(),
        },
    }
    return table, transitions, facts
