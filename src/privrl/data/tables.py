"""Transition tables (Parquet, CSV, a DataFrame or an Arrow table) to and from datasets.

One row per transition with an episode-id column, mapped to dataset fields by a
:class:`ColumnMapping` (parsed from text by :func:`parse_column_mapping`). `from_table` builds
a dataset from a table in memory, `import_table` from a file (`read_table` then `from_table`),
`export_table` writes one. How the final observation of an episode is obtained is the one
real decision here:

* with ``next_obs`` columns mapped, the final observation is the ``next_obs`` of the
  episode's last row, and ``next_obs[t] == obs[t+1]`` is checked inside every episode;
* without them, the **last row of each episode is dropped**: its observation becomes the
  final observation and its action, reward and flags are discarded. This is announced with a
  warning and recorded in ``metadata.extra["final_observation"]``. An episode with a single
  row then has no transition and is an error.

Observations outside a *declared* observation space: a Box's finite bounds are a clipping
range, so values outside them are clipped into it; a discrete code outside a Discrete,
MultiDiscrete or MultiBinary space (1-based codes declared as ``discrete:N``, which takes
0..N-1) is a coding error, refused with the column and the number of such values unless
``clip_out_of_space=True`` asks for clipping. Actions under a declared (or stored) discrete
action space follow the same rule (`fit_values`); a Box action space is validated as it is.
Import is the data holder's own tool, run on the raw data before any privatisation, so its
local messages (that refusal, and a warning with the number of values actually clipped) may
depend on the data; what it *stores* may not: ``metadata.extra["observation_clipping"]`` (and
``"action_clipping"``) says that clipping is in force (from the declared space and the option
alone), never whether or how much it changed.

A contextual-bandit log (one row per impression, no ``next_obs``) is read with
``bandit=True``: `privrl.data.bandit_log` turns it into this module's transition table of
one-step episodes (horizon 1 declared), and the import is the same from there on.

A row with both ``terminated`` and ``truncated`` set (Gymnasium returns both when the MDP
ends at the time limit, e.g. CartPole-v1 falling at step 500; Minari records both) is
imported as terminated: the terminal state is what a learner must not bootstrap from, and
the time limit is then moot. Minari datasets follow the same rule.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from gymnasium import spaces

from privrl.data.dataset import DatasetError, DatasetMetadata, TrajectoryDataset, _gather_index

if TYPE_CHECKING:
    from privrl.data.bandit_log import BanditColumns

_MAPPING_KEYS = (
    "episode",
    "obs",
    "action",
    "reward",
    "next_obs",
    "terminated",
    "truncated",
    "behaviour_prob",
    "unit",
    "timestep",
)
_MULTI_KEYS = ("obs", "action", "next_obs")
_REQUIRED_KEYS = ("episode", "obs", "action", "reward")


@dataclass(frozen=True)
class ColumnMapping:
    """Which table columns hold which dataset field.

    ``obs``, ``action`` and ``next_obs`` are either one column name (a scalar value per row)
    or a sequence of names (a vector, in that order). Everything after ``reward`` is optional.
    """

    episode: str
    obs: str | tuple[str, ...]
    action: str | tuple[str, ...]
    reward: str
    next_obs: str | tuple[str, ...] | None = None
    terminated: str | None = None
    truncated: str | None = None
    behaviour_prob: str | None = None
    unit: str | None = None
    timestep: str | None = None

    def __post_init__(self) -> None:
        for key in _MULTI_KEYS:
            value = getattr(self, key)
            if isinstance(value, list):
                object.__setattr__(self, key, tuple(value))
        if self.next_obs is not None and _ncols(self.next_obs) != _ncols(self.obs):
            raise DatasetError(
                f"column mapping: next_obs has {_ncols(self.next_obs)} column(s) but obs has "
                f"{_ncols(self.obs)}"
            )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ColumnMapping:
        unknown = sorted(set(d) - set(_MAPPING_KEYS))
        if unknown:
            raise DatasetError(
                f"column mapping: unknown key(s) {unknown}; valid keys: {list(_MAPPING_KEYS)}"
            )
        missing = [k for k in _REQUIRED_KEYS if not d.get(k)]
        if missing:
            raise DatasetError(
                f"column mapping: missing required key(s) {missing} (required: "
                f"{list(_REQUIRED_KEYS)})"
            )
        return cls(**{k: v for k, v in d.items() if v is not None})

    def columns(self) -> dict[str, list[str]]:
        """Mapping key → list of column names (only mapped keys)."""
        out: dict[str, list[str]] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            out[f.name] = [value] if isinstance(value, str) else list(value)
        return out

    def to_string(self) -> str:
        """The CLI form, inverse of :func:`parse_column_mapping`."""
        return ",".join(f"{k}={'|'.join(cols)}" for k, cols in self.columns().items())


def _label(value: Any) -> str:
    """repr of a table value without numpy's type wrapper (``'a'``, ``3``)."""
    return repr(np.asarray(value).tolist())


def _ncols(value: str | Sequence[str]) -> int:
    return 1 if isinstance(value, str) else len(value)


def parse_column_mapping(text: str) -> ColumnMapping:
    """Parse ``"episode=patient_id,obs=o1|o2,action=treatment,reward=r"``.

    Items are ``key=column`` separated by commas; ``|`` separates the columns of a vector
    (``obs``, ``action``, ``next_obs``). A single column stays a scalar field.
    """
    example = "'episode=patient_id,obs=o1|o2,action=treatment,reward=r'"
    return ColumnMapping.from_dict(parse_items(text, _MAPPING_KEYS, _MULTI_KEYS, example))


def parse_items(
    text: str, keys: Sequence[str], multi_keys: Sequence[str], example: str, hint: str = ""
) -> dict[str, Any]:
    """``key=column`` items separated by commas (``|`` between the columns of a vector key in
    `multi_keys`) as a dict key → column or tuple of columns; `example` shows the form and
    `hint` follows the refusal of an unknown key."""
    d: dict[str, Any] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        if "=" not in item:
            raise DatasetError(f"column mapping: item {item!r} is not key=column (e.g. {example})")
        key, _, value = (s.strip() for s in item.partition("="))
        if key not in keys:
            raise DatasetError(
                f"column mapping: unknown key {key!r}{hint}; valid keys: {list(keys)}"
            )
        if key in d:
            raise DatasetError(f"column mapping: key {key!r} given twice")
        cols = [c.strip() for c in value.split("|")]
        if not all(cols):
            raise DatasetError(f"column mapping: empty column name in {item!r}")
        if len(cols) > 1 and key not in multi_keys:
            raise DatasetError(f"column mapping: {key!r} takes one column, got {cols}")
        d[key] = tuple(cols) if len(cols) > 1 else cols[0]
    return d


def _table_format(path: Path, fmt: str | None) -> str:
    if fmt is not None:
        fmt = fmt.lower()
    else:
        suffix = path.suffix.lower()
        fmt = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}.get(suffix, "")
    if fmt not in ("parquet", "csv"):
        raise DatasetError(
            f"cannot tell the table format of {path.name!r}; use a .parquet or .csv suffix or "
            "pass format='parquet' / 'csv'"
        )
    return fmt


def _read_table(path: Path, fmt: str) -> Any:
    import pyarrow as pa

    if not path.is_file():
        raise DatasetError(f"table file not found: {path}")
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)
        import pyarrow.csv as pcsv

        return pcsv.read_csv(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"cannot read {fmt} table {path}: {exc}") from exc


def _column(table: Any, name: str, key: str, source: str) -> np.ndarray:
    if name not in table.column_names:
        raise DatasetError(
            f"column {name!r} (mapped as {key!r}) not found in {source}; available columns: "
            f"{table.column_names}"
        )
    col = table.column(name)
    if col.null_count:
        mask = np.asarray(col.is_null().to_numpy(zero_copy_only=False))
        row = int(np.flatnonzero(mask)[0])
        raise DatasetError(
            f"column {name!r} (mapped as {key!r}) is empty at data row {row} of {source} "
            f"({col.null_count} empty cells in total)"
        )
    return np.asarray(col.to_numpy(zero_copy_only=False))


def _stack(cols: list[np.ndarray], name: str) -> np.ndarray:
    for c in cols:
        if not (np.issubdtype(c.dtype, np.number) or c.dtype == np.bool_):
            raise DatasetError(f"field {name!r}: columns must be numeric, got dtype {c.dtype}")
    if len(cols) == 1:
        return cols[0]
    return np.stack(cols, axis=1)


def _infer_space(values: np.ndarray, scalar: bool) -> spaces.Space:
    """Discrete for one integer column with a small range, else an unbounded Box."""
    if scalar and np.issubdtype(values.dtype, np.integer) and values.size:
        lo, hi = int(values.min()), int(values.max())
        if hi - lo < 1024:
            start = 0 if lo >= 0 else lo
            return spaces.Discrete(hi - start + 1, start=start)
    dtype = np.float32 if values.dtype == np.float32 else np.float64
    shape = (1,) if values.ndim == 1 else values.shape[1:]
    return spaces.Box(low=-np.inf, high=np.inf, shape=shape, dtype=dtype)


def _fit_to_space(values: np.ndarray, space: spaces.Space, name: str) -> np.ndarray:
    """Cast and reshape table values to the layout a space expects."""
    if isinstance(space, spaces.Discrete):
        if values.ndim != 1:
            raise DatasetError(f"field {name!r}: a Discrete space needs exactly one column")
        if not np.issubdtype(values.dtype, np.integer):
            if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
                raise DatasetError(f"field {name!r}: Discrete values must be whole numbers")
        return values.astype(np.int64)
    if isinstance(space, spaces.MultiDiscrete | spaces.MultiBinary) and not np.issubdtype(
        values.dtype, np.integer
    ):
        if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
            raise DatasetError(
                f"field {name!r}: {type(space).__name__} values must be whole numbers "
                "(integer codes)"
            )
    shape = tuple(space.shape)
    flat = values.reshape(values.shape[0], -1)
    if flat.shape[1] != int(np.prod(shape, dtype=np.int64)):
        raise DatasetError(
            f"field {name!r}: {flat.shape[1]} column(s) mapped but {space} needs "
            f"{int(np.prod(shape, dtype=np.int64))}"
        )
    return flat.reshape((values.shape[0], *shape)).astype(space.dtype, copy=False)


def _to_bool(values: np.ndarray, name: str) -> np.ndarray:
    if values.dtype == np.bool_:
        return values
    if np.issubdtype(values.dtype, np.number):
        bad = (values != 0) & (values != 1)
        if not bad.any():
            return values.astype(np.bool_)
    if values.dtype == object or values.dtype.kind in "US":
        low = np.char.lower(values.astype(str))
        ok = np.isin(low, ["true", "false", "1", "0"])
        if ok.all():
            return np.isin(low, ["true", "1"])
    raise DatasetError(f"column for {name!r}: flags must be booleans or 0/1")


def read_table(path: str | Path, format: Literal["parquet", "csv"] | None = None) -> Any:
    """A Parquet or CSV file as a `pyarrow.Table` (the format from the suffix unless given)."""
    path = Path(path)
    return _read_table(path, _table_format(path, format))


def stored_metadata(table: Any, source: str = "table") -> DatasetMetadata | None:
    """The dataset metadata privrl stored in a Parquet table's schema (`export_table`), if
    any."""
    schema_meta = table.schema.metadata or {}
    if b"privrl" not in schema_meta:
        return None
    try:
        return DatasetMetadata.from_dict(json.loads(schema_meta[b"privrl"])["metadata"])
    except (KeyError, ValueError) as exc:
        raise DatasetError(f"{source}: unreadable privrl metadata ({exc})") from exc


def as_arrow(table: Any) -> Any:
    """`table` as a `pyarrow.Table`: a pyarrow Table as it is, a pandas DataFrame, or a mapping
    of column name → 1-D array."""
    import pyarrow as pa

    if isinstance(table, pa.Table):
        return table
    if hasattr(table, "to_dict") and hasattr(table, "columns") and hasattr(table, "dtypes"):
        return pa.Table.from_pandas(table, preserve_index=False)
    if isinstance(table, Mapping):
        return pa.table({str(k): np.asarray(v) for k, v in table.items()})
    raise TypeError(
        "a table is a pyarrow Table, a pandas DataFrame or a mapping of column → array, "
        f"not {type(table).__name__}"
    )


def as_mapping(mapping: ColumnMapping | Mapping[str, Any] | str) -> ColumnMapping:
    """A `ColumnMapping` from itself, a mapping of key → column(s) or its text form."""
    if isinstance(mapping, ColumnMapping):
        return mapping
    if isinstance(mapping, str):
        return parse_column_mapping(mapping)
    return ColumnMapping.from_dict(mapping)


@dataclass(frozen=True)
class _Rows:
    """A table's rows grouped into episodes: rows sorted by episode (and timestep), with the
    episodes' row offsets into that order."""

    ep_ids: np.ndarray  # episode id per episode code (sorted)
    codes: np.ndarray  # episode code per sorted row
    order: np.ndarray  # sorted row r is table row order[r]
    rows_per_ep: np.ndarray
    row_off: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.codes.shape[0])

    @property
    def n_episodes(self) -> int:
        return int(self.ep_ids.shape[0])

    def error(self, r: int, field: str, problem: str) -> DatasetError:
        """The error for sorted row `r`, located by episode and step."""
        e = int(self.codes[r])
        step = r - int(self.row_off[e])
        return DatasetError(
            f"episode {_label(self.ep_ids[e])}, step {step}, field {field!r}: {problem}",
            episode=e,
            step=step,
            field=field,
        )


def _mapped_columns(table: Any, mapping: ColumnMapping, source: str) -> dict[str, list[np.ndarray]]:
    """Each mapped key's columns, read from `table` (missing or empty cells refused)."""
    return {
        key: [_column(table, c, key, source) for c in names]
        for key, names in mapping.columns().items()
    }


def _group_rows(raw: dict[str, list[np.ndarray]], mapping: ColumnMapping, source: str) -> _Rows:
    """Rows grouped by episode id, ordered by the timestep column if mapped (a duplicate is
    refused), else by their order in the table."""
    ep_col = raw["episode"][0]
    if ep_col.dtype == object or ep_col.dtype.kind in "US":
        ep_col = ep_col.astype(str)
    ep_ids, codes = np.unique(ep_col, return_inverse=True)
    codes = codes.reshape(-1)
    if codes.shape[0] == 0:
        raise DatasetError(f"{source} has no rows")
    if "timestep" in raw:
        ts = raw["timestep"][0]
        order = np.lexsort((ts, codes))
        sorted_codes, sorted_ts = codes[order], ts[order]
        dup = np.flatnonzero(
            (sorted_codes[1:] == sorted_codes[:-1]) & (sorted_ts[1:] == sorted_ts[:-1])
        )
        if dup.size:
            r = int(order[dup[0] + 1])
            raise DatasetError(
                f"episode {_label(ep_ids[codes[r]])}: timestep {_label(sorted_ts[dup[0]])} "
                f"appears twice (column {mapping.timestep!r}, data row {r})"
            )
    else:
        order = np.argsort(codes, kind="stable")
    codes = codes[order]
    rows_per_ep = np.bincount(codes, minlength=ep_ids.shape[0]).astype(np.int64)
    row_off = np.concatenate(([0], np.cumsum(rows_per_ep))).astype(np.int64)
    return _Rows(ep_ids, codes, order, rows_per_ep, row_off)


def _sorted(raw: dict[str, list[np.ndarray]], rows: _Rows, key: str) -> np.ndarray | None:
    """Key `key`'s columns in episode order, stacked (None if the key is not mapped)."""
    if key not in raw:
        return None
    return _stack([c[rows.order] for c in raw[key]], key)


def _flags(raw: dict[str, list[np.ndarray]], rows: _Rows, key: str) -> np.ndarray | None:
    """A flag column (booleans or 0/1) in episode order (None if not mapped)."""
    values = _sorted(raw, rows, key)
    return None if values is None else _to_bool(values, key)


@dataclass(frozen=True)
class _Layout:
    """Where each episode's observations and transitions come from in the sorted rows."""

    observations: np.ndarray  # one sequence per episode, final observation included
    t_sel: np.ndarray  # sorted rows that are transitions
    lengths: np.ndarray  # transitions per episode
    facts: dict[str, Any]  # how the final observation was obtained (metadata.extra)


def _layout(
    raw: dict[str, list[np.ndarray]],
    rows: _Rows,
    obs_rows: np.ndarray,
    term_rows: np.ndarray | None,
    source: str,
) -> _Layout:
    """The episodes' observation sequences: with next_obs columns, the last row's next_obs is
    the final observation (next_obs[t] == obs[t+1] checked); without them, the last row of each
    episode only supplies it (its action, reward and flags are dropped, with a warning)."""
    next_rows = _sorted(raw, rows, "next_obs")
    last_rows = rows.row_off[1:] - 1
    n_ep = rows.n_episodes
    if next_rows is not None:
        if next_rows.dtype != obs_rows.dtype:
            common = np.result_type(obs_rows.dtype, next_rows.dtype)
            obs_rows, next_rows = obs_rows.astype(common), next_rows.astype(common)
        same_ep = rows.codes[1:] == rows.codes[:-1]
        diff = next_rows[:-1] != obs_rows[1:]
        mismatch = np.flatnonzero(same_ep & (diff.reshape(diff.shape[0], -1).any(axis=1)))
        if mismatch.size:
            raise rows.error(
                int(mismatch[0]),
                "next_obs",
                f"differs from the observation of the next row ({mismatch.size} such rows); a "
                "dataset stores one observation sequence per episode",
            )
        lengths = rows.rows_per_ep
        obs_off = rows.row_off + np.arange(n_ep + 1)
        observations = np.empty((rows.n_rows + n_ep, *obs_rows.shape[1:]), dtype=obs_rows.dtype)
        observations[_gather_index(obs_off[:-1], lengths)] = obs_rows
        observations[obs_off[1:] - 1] = next_rows[last_rows]
        facts = {"final_observation": "next_obs of the last row"}
        return _Layout(observations, np.arange(rows.n_rows, dtype=np.int64), lengths, facts)
    lengths = rows.rows_per_ep - 1
    short = np.flatnonzero(lengths == 0)
    if short.size:
        raise DatasetError(
            f"episode {_label(rows.ep_ids[short[0]])}, step 0, field 'obs': the episode has a "
            f"single row ({short.size} such episodes). Without next_obs columns the last "
            "row of each episode only supplies the final observation, so every episode "
            "needs at least two rows; map next_obs columns to keep single-row episodes",
            episode=int(short[0]),
            step=0,
            field="obs",
        )
    dropped_term = 0 if term_rows is None else int(term_rows[last_rows].sum())
    msg = (
        f"{source}: no next_obs columns mapped, so the last row of each of the {n_ep} "
        "episodes was dropped: its observation is the episode's final observation and its "
        "action, reward and flags are discarded"
    )
    if dropped_term:
        msg += (
            f" ({dropped_term} of those rows had terminated=True; that information is lost "
            "— map next_obs columns to keep it)"
        )
    warnings.warn(msg, UserWarning, stacklevel=3)
    facts = {
        "final_observation": "last row dropped (no next_obs columns)",
        "dropped_rows": int(n_ep),
    }
    return _Layout(obs_rows, _gather_index(rows.row_off[:-1], lengths), lengths, facts)


def _unit_ids(
    raw: dict[str, list[np.ndarray]], rows: _Rows, keep_ids: bool, facts: dict[str, Any]
) -> np.ndarray | None:
    """One unit id per episode (a unit that changes inside an episode is refused); labels that
    are not integers become 0..k-1 in sorted order (kept in `facts` only with `keep_ids`)."""
    if "unit" not in raw:
        return None
    u = raw["unit"][0][rows.order]
    first = u[rows.row_off[:-1]]
    bad = np.flatnonzero(u != np.repeat(first, rows.rows_per_ep))
    if bad.size:
        r = int(bad[0])
        raise rows.error(
            r,
            "unit",
            f"the unit changes inside the episode ({_label(first[rows.codes[r]])} then "
            f"{_label(u[r])}); an episode belongs to one unit",
        )
    if np.issubdtype(first.dtype, np.integer):
        return first.astype(np.int64)
    labels, ids = np.unique(first.astype(str), return_inverse=True)
    if keep_ids:
        facts["unit_labels"] = labels.tolist()
    return ids.reshape(-1).astype(np.int64)


def _spaces(
    observations: np.ndarray,
    actions: np.ndarray,
    mapping: ColumnMapping,
    *,
    given: tuple[spaces.Space | None, spaces.Space | None],
    stored: DatasetMetadata | None,
    source: str,
    facts: dict[str, Any],
) -> tuple[spaces.Space, spaces.Space]:
    """Spaces: given > stored in the file > inferred from the data (flagged in `facts` and
    warned about: an inferred space depends on the private data)."""
    obs_space = given[0] or (stored.observation_space if stored else None)
    act_space = given[1] or (stored.action_space if stored else None)
    inferred = []
    if obs_space is None:
        obs_space = _infer_space(observations, scalar=isinstance(mapping.obs, str))
        inferred.append("observation_space")
    if act_space is None:
        act_space = _infer_space(actions, scalar=isinstance(mapping.action, str))
        inferred.append("action_space")
    if inferred:
        facts["inferred_from_data"] = inferred
        warnings.warn(
            f"{source}: {' and '.join(inferred)} inferred from the data ({obs_space}, "
            f"{act_space}); inferred spaces depend on the private data — pass them explicitly "
            "for private work",
            UserWarning,
            stacklevel=3,
        )
    return obs_space, act_space


def from_table(
    table: Any,
    mapping: ColumnMapping | BanditColumns | Mapping[str, Any] | str,
    *,
    observation_space: spaces.Space | None = None,
    action_space: spaces.Space | None = None,
    env_id: str | None = None,
    discount: float | None = None,
    horizon: int | None = None,
    keep_ids: bool = False,
    keep_columns: Sequence[str] = (),
    validate: bool = True,
    clip_out_of_space: bool = False,
    bandit: bool = False,
    source: str = "the table",
    origin: Mapping[str, Any] | None = None,
) -> TrajectoryDataset:
    """A transitions table (one row per transition) as a dataset.

    `table` is a pyarrow Table, a pandas DataFrame or a mapping of column → array; `mapping`
    says which columns hold which field (a `ColumnMapping`, a dict such as
    ``{"episode": "patient", "obs": ("o1", "o2"), "action": "treatment", "reward": "r"}``, or
    its text form). `source` names the table in messages; `origin` is what
    ``metadata.extra["source"]`` records (default ``{"format": "table"}``).

    The steps, each a function of this module: map the columns (`_mapped_columns`), group the
    rows into episodes (`_group_rows`: by episode id, then by the ``timestep`` column if
    mapped, duplicates refused, else by row order), lay out each episode's observations
    (`_layout`: the final observation from ``next_obs``, or the last row dropped), take the
    unit ids (`_unit_ids`), resolve the spaces (`_spaces`: given > stored > inferred and
    flagged), fit the values to the spaces and build the validated dataset.

    ``keep_columns`` names numeric columns kept per transition as ``ds.extra_columns`` (e.g. a
    target policy's probability of the logged action). Observations outside a space given
    here (``observation_space``): see `fit_observations` (a Box clips; discrete codes are
    refused unless ``clip_out_of_space``; the same for codes outside a declared discrete
    ``action_space``). Episode ids and unit labels are identifiers, so they are kept in
    ``metadata.extra`` only with ``keep_ids=True``.

    ``bandit=True`` reads a contextual-bandit log instead (one row per impression, no
    ``next_obs``): `mapping` is then a `privrl.data.bandit_log.BanditColumns` (or its dict or
    text form, e.g. ``"obs=age|country,action=item,reward=click,behaviour_prob=pscore"``), each
    row becomes a one-step episode and the metadata declares horizon 1 (see that module).
    """
    table = as_arrow(table)
    bandit_facts: dict[str, Any] = {}
    if bandit:
        from privrl.data.bandit_log import as_transitions

        table, mapping, bandit_facts = as_transitions(table, mapping, source)
        observation_space, horizon, discount = _bandit_defaults(
            mapping, observation_space, horizon, discount
        )
    mapping = as_mapping(mapping)
    stored = stored_metadata(table, source)
    raw = _mapped_columns(table, mapping, source)
    kept_raw = {
        name: _stack([_column(table, name, "keep_columns", source)], f"keep_columns {name!r}")
        for name in _check_keep_names(keep_columns)
    }
    rows = _group_rows(raw, mapping, source)
    term_rows, trunc_rows = _flags(raw, rows, "terminated"), _flags(raw, rows, "truncated")
    obs_rows, act_rows = _sorted(raw, rows, "obs"), _sorted(raw, rows, "action")
    rew_rows, prob_rows = _sorted(raw, rows, "reward"), _sorted(raw, rows, "behaviour_prob")
    assert obs_rows is not None and act_rows is not None and rew_rows is not None
    layout = _layout(raw, rows, obs_rows, term_rows, source)
    facts = {"source": dict(origin or {"format": "table"}), **layout.facts, **bandit_facts}
    t_sel = layout.t_sel
    n_t = int(layout.lengths.sum())
    actions = act_rows[t_sel]
    terminated = np.zeros(n_t, np.bool_) if term_rows is None else term_rows[t_sel]
    truncated = np.zeros(n_t, np.bool_) if trunc_rows is None else trunc_rows[t_sel]
    truncated &= ~terminated  # both set (Gymnasium allows it): the episode terminated
    kept = {name: col[rows.order][t_sel] for name, col in kept_raw.items()}
    if "unit" in raw:
        facts["unit_column"] = mapping.unit
    unit_ids = _unit_ids(raw, rows, keep_ids, facts)
    if keep_ids:
        facts["episode_ids"] = rows.ep_ids.tolist()
    obs_space, act_space = _spaces(
        layout.observations,
        actions,
        mapping,
        given=(observation_space, action_space),
        stored=stored,
        source=source,
        facts=facts,
    )
    observations = _fit_to_space(layout.observations, obs_space, "obs")
    actions = _fit_to_space(actions, act_space, "action")
    if isinstance(act_space, DISCRETE_SPACES) and "action_space" not in facts.get(
        "inferred_from_data", ()
    ):
        act_columns = [mapping.action] if isinstance(mapping.action, str) else list(mapping.action)
        actions, act_clipping = fit_values(
            actions, act_space, act_columns, source=source, clip=clip_out_of_space, what="action"
        )
        if act_clipping:
            facts["action_clipping"] = ACTION_CLIPPING_NOTE
    if observation_space is not None and clips(obs_space):
        obs_columns = [mapping.obs] if isinstance(mapping.obs, str) else list(mapping.obs)
        observations, clipping = fit_values(
            observations,
            obs_space,
            obs_columns,
            source=source,
            clip=clip_out_of_space,
            counted=np.arange(len(observations)) % 2 == 0 if bandit else None,
        )
        if clipping:
            facts["observation_clipping"] = CLIPPING_NOTE
    if kept:
        facts["extra_columns"] = list(kept)
    meta = _metadata(
        stored,
        facts,
        obs_space=obs_space,
        act_space=act_space,
        env_id=env_id,
        discount=discount,
        horizon=horizon,
    )
    try:
        return TrajectoryDataset(
            observations=observations,
            actions=actions,
            rewards=rew_rows[t_sel],
            terminated=terminated,
            truncated=truncated,
            episode_offsets=np.concatenate(([0], np.cumsum(layout.lengths))).astype(np.int64),
            behaviour_probs=None if prob_rows is None else prob_rows[t_sel].astype(np.float64),
            unit_ids=unit_ids,
            extra_columns=kept or None,
            metadata=meta,
            validate=validate,
        )
    except DatasetError as exc:
        if exc.episode is None:
            raise
        raise DatasetError(
            f"{exc} — episode {exc.episode} is {_label(rows.ep_ids[exc.episode])} in column "
            f"{mapping.episode!r} of {source}",
            episode=exc.episode,
            step=exc.step,
            field=exc.field,
        ) from exc


def _bandit_defaults(
    mapping: ColumnMapping,
    observation_space: spaces.Space | None,
    horizon: int | None,
    discount: float | None,
) -> tuple[spaces.Space | None, int, float]:
    """A bandit log's public facts: horizon 1 (a different one is refused), discount 1 unless
    given, and the declared space ``Discrete(1)`` of a context-free log."""
    from privrl.data.bandit_log import CONTEXT_COLUMN, CONTEXT_FREE_SPACE

    if horizon is not None and horizon != 1:
        raise DatasetError(
            f"horizon: a bandit log's episodes have one step, so its horizon is 1, not {horizon}"
        )
    if observation_space is None and mapping.obs == CONTEXT_COLUMN:
        observation_space = CONTEXT_FREE_SPACE
    return observation_space, 1, 1.0 if discount is None else discount


def _metadata(
    stored: DatasetMetadata | None,
    facts: dict[str, Any],
    *,
    obs_space: spaces.Space,
    act_space: spaces.Space,
    env_id: str | None,
    discount: float | None,
    horizon: int | None,
) -> DatasetMetadata:
    """The dataset's metadata: what was given, else what the file stored, plus this import's
    facts (metadata stored in a Parquet schema comes back as it was exported, with only this
    import's options added)."""
    base = stored if stored is not None else DatasetMetadata()
    return DatasetMetadata(
        observation_space=obs_space,
        action_space=act_space,
        env_id=env_id if env_id is not None else base.env_id,
        discount=discount if discount is not None else base.discount,
        horizon=horizon if horizon is not None else base.horizon,
        extra={**_without(base.extra, "extra_columns"), **_import_facts(facts)}
        if stored is not None
        else facts,
    )


def import_table(
    path: str | Path,
    mapping: ColumnMapping | BanditColumns | Mapping[str, Any] | str,
    *,
    format: Literal["parquet", "csv"] | None = None,
    **options: Any,
) -> TrajectoryDataset:
    """Read a transitions file (Parquet or CSV, one row per transition) into a dataset:
    `read_table` then `from_table` (its keyword options: spaces, env id, discount, horizon,
    ``keep_ids``, ``keep_columns``, ``validate``, ``clip_out_of_space``, ``bandit`` for a
    contextual-bandit log of one row per impression). Spaces not given are
    taken from privrl's Parquet metadata if present, else inferred from the data and flagged.
    """
    path = Path(path)
    fmt = _table_format(path, format)
    origin = {"format": fmt, "file": path.name}
    return from_table(_read_table(path, fmt), mapping, source=path.name, origin=origin, **options)


CLIPPING_NOTE = "observations outside the declared observation space are clipped into it"
ACTION_CLIPPING_NOTE = "actions outside the declared discrete action space are clipped into it"
DISCRETE_SPACES = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def outside_space(values: np.ndarray, space: spaces.Space) -> np.ndarray:
    """Per flattened column, how many of `values` lie outside the declared `space` (a Box's
    bounds, or the codes of a discrete space); NaN is not counted (validation refuses it)."""
    flat = np.asarray(values).reshape(len(values), -1)
    moved = flat != np.asarray(clip_observations(values, space)).reshape(len(values), -1)
    if np.issubdtype(flat.dtype, np.floating):
        moved &= ~np.isnan(flat)
    return moved.sum(axis=0)


def fit_observations(
    values: np.ndarray,
    space: spaces.Space,
    columns: Sequence[str],
    *,
    source: str,
    clip: bool = False,
) -> tuple[np.ndarray, bool]:
    """`values` fitted into the declared observation `space`, and whether clipping is in force.

    A Box clips (its bounds are a clipping range). A discrete space refuses codes outside it
    (a `DatasetError` naming each column and how many of its values are outside), unless
    `clip`. A warning says how many values were clipped, only when some were. These messages
    are the data holder's own, at import; nothing stored depends on them (see the module
    docstring)."""
    return fit_values(values, space, columns, source=source, clip=clip, what="observation")


def fit_values(
    values: np.ndarray,
    space: spaces.Space,
    columns: Sequence[str],
    *,
    source: str,
    clip: bool = False,
    what: Literal["observation", "action"] = "observation",
    counted: np.ndarray | None = None,
) -> tuple[np.ndarray, bool]:
    """`fit_observations` for either field: `what` names it in the messages (and in the
    column names used when `columns` does not give one per value); `counted` (a boolean mask
    over the rows of `values`) limits the counts to those rows (a bandit log stores each
    context twice, as the observation and as the final observation)."""
    counts = outside_space(values if counted is None else values[counted], space)
    total = int(counts.sum())
    prefix = "obs" if what == "observation" else "action"
    names = (
        list(columns)
        if len(columns) == len(counts)
        else [f"{prefix}[{j}]" for j in range(len(counts))]
    )
    where = ", ".join(f"{n!r} ({int(c)})" for n, c in zip(names, counts, strict=True) if c)
    discrete = isinstance(space, DISCRETE_SPACES)
    if discrete and total and not clip:
        raise DatasetError(
            f"{source}: {total} {what} value(s) fall outside the declared space {space}, "
            f"in column(s) {where} (1-based codes? {space} takes codes from "
            f"{_first_code(space)}{_start_hint(space)}); fix the codes or the space, or pass "
            "clip_out_of_space=True to clip them into it"
        )
    clipping = clip or not discrete
    if clipping and total:
        warnings.warn(
            f"{source}: {total} {what} value(s) outside the declared {what} space "
            f"were clipped into it, in column(s) {where}",
            UserWarning,
            stacklevel=3,
        )
    return (clip_observations(values, space) if clipping else values), clipping


def _first_code(space: spaces.Space) -> str:
    start = np.asarray(getattr(space, "start", 0)).reshape(-1)
    return str(int(start[0])) if start.size and np.all(start == start[0]) else "its start"


def _start_hint(space: spaces.Space) -> str:
    """For a 0-based Discrete space, how to declare the same number of codes from 1."""
    if isinstance(space, spaces.Discrete) and int(space.start) == 0:
        return f"; codes 1..{int(space.n)} are Discrete({int(space.n)}, start=1)"
    return ""


def _import_facts(extra: dict[str, Any]) -> dict[str, Any]:
    """What this import's options add to metadata stored in a Parquet file's schema (which
    otherwise comes back as it was exported)."""
    keys = ("extra_columns", "observation_clipping", "action_clipping", "bandit")
    return {k: extra[k] for k in keys if k in extra}


def _without(extra: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in extra.items() if k != key}


def _check_keep_names(names: Sequence[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        name = str(name).strip()
        if not name or "/" in name or name == ".":
            raise DatasetError(
                f"keep_columns: {name!r} is not a column name that can be kept (no '/', not empty)"
            )
        if name in out:
            raise DatasetError(f"keep_columns: column {name!r} is given twice")
        out.append(name)
    return out


def clips(space: spaces.Space | None) -> bool:
    """Whether a declared observation space bounds its values (so import clips into it)."""
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary):
        return True
    if isinstance(space, spaces.Box):
        return bool(np.isfinite(space.low).any() or np.isfinite(space.high).any())
    return False


def clip_observations(values: np.ndarray, space: spaces.Space) -> np.ndarray:
    """Observations clipped into a declared space: a Box's bounds, or the codes of a
    Discrete / MultiDiscrete / MultiBinary space. Never an error on the values (a refusal that
    depends on private values would leak); NaN is left to validation."""
    if isinstance(space, spaces.Discrete):
        lo, hi = int(space.start), int(space.start) + int(space.n) - 1
        return np.clip(values, lo, hi).astype(values.dtype, copy=False)
    if isinstance(space, spaces.MultiDiscrete):
        start = np.asarray(space.start)
        return np.clip(values, start, start + np.asarray(space.nvec) - 1).astype(
            values.dtype, copy=False
        )
    if isinstance(space, spaces.MultiBinary):
        return np.clip(values, 0, 1).astype(values.dtype, copy=False)
    if isinstance(space, spaces.Box):
        low = np.asarray(space.low, dtype=values.dtype)
        high = np.asarray(space.high, dtype=values.dtype)
        return np.clip(values, low, high)
    return values


def _field_columns(prefix: str, arr: np.ndarray, space: spaces.Space | None) -> list[str]:
    if arr.ndim == 1 and (space is None or isinstance(space, spaces.Discrete)):
        return [prefix]
    width = int(np.prod(arr.shape[1:], dtype=np.int64))
    return [f"{prefix}_{j}" for j in range(width)]


def export_table(
    ds: TrajectoryDataset,
    path: str | Path,
    *,
    format: Literal["parquet", "csv"] | None = None,
) -> ColumnMapping:
    """Write one row per transition; returns the mapping that reads the file back.

    Columns: ``episode``, ``timestep``, observation columns (``obs`` or ``obs_0..``), action
    columns, ``reward``, ``next_obs`` columns (so the final observation survives),
    ``terminated``, ``truncated`` and, when present, ``behaviour_prob``, ``unit`` and the kept
    columns (``ds.extra_columns``, under their names; re-import with ``keep_columns``). Parquet
    files also carry the dataset metadata (spaces included) in their schema metadata, so a
    Parquet round trip is lossless without passing spaces; CSV needs the spaces passed back
    to :func:`import_table` to restore dtypes and shapes. Written atomically.
    """
    import pyarrow as pa

    from privrl.data.io import SCHEMA_VERSION, _atomic_target

    path = Path(path)
    fmt = _table_format(path, format)
    md = ds.metadata
    tr = ds.transitions()
    n = ds.n_transitions
    data: dict[str, np.ndarray] = {
        "episode": ds.transition_episode_index,
        "timestep": ds.transition_steps,
    }
    obs_cols = _field_columns("obs", tr.observations, md.observation_space)
    act_cols = _field_columns("action", tr.actions, md.action_space)
    next_cols = _field_columns("next_obs", tr.next_observations, md.observation_space)
    for names, arr in ((obs_cols, tr.observations), (act_cols, tr.actions)):
        flat = arr.reshape(n, -1)
        for j, name in enumerate(names):
            data[name] = flat[:, j]
    data["reward"] = tr.rewards
    flat_next = tr.next_observations.reshape(n, -1)
    for j, name in enumerate(next_cols):
        data[name] = flat_next[:, j]
    data["terminated"] = tr.terminated
    data["truncated"] = tr.truncated
    mapping = ColumnMapping(
        episode="episode",
        obs=obs_cols[0] if len(obs_cols) == 1 and obs_cols[0] == "obs" else tuple(obs_cols),
        action=act_cols[0] if act_cols == ["action"] else tuple(act_cols),
        reward="reward",
        next_obs=next_cols[0] if next_cols == ["next_obs"] else tuple(next_cols),
        terminated="terminated",
        truncated="truncated",
        timestep="timestep",
        behaviour_prob="behaviour_prob" if ds.behaviour_probs is not None else None,
        unit="unit" if ds.unit_ids is not None else None,
    )
    if ds.behaviour_probs is not None:
        data["behaviour_prob"] = ds.behaviour_probs
    if ds.unit_ids is not None:
        data["unit"] = ds.unit_ids[ds.transition_episode_index]
    for name, values in ds.extra_columns.items():  # re-import with --keep-columns
        if name in data:
            raise DatasetError(
                f"kept column {name!r} has the name of a standard column of the export; "
                "rename it before exporting"
            )
        data[name] = values
    table = pa.table({k: np.ascontiguousarray(v) for k, v in data.items()})
    tmp = _atomic_target(path)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            privrl_meta = {
                "schema_version": SCHEMA_VERSION,
                "metadata": md.to_dict(),
                "mapping": mapping.to_string(),
            }
            table = table.replace_schema_metadata(
                {b"privrl": json.dumps(privrl_meta, allow_nan=False).encode()}
            )
            pq.write_table(table, tmp)
        else:
            import pyarrow.csv as pcsv

            pcsv.write_csv(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return mapping
