"""Reading and writing ``TrajectoryDataset``: native HDF5 and Parquet/CSV transition tables.

Native format (one HDF5 file, root attribute ``privrl_schema_version = 1``): the flat arrays
of the dataset as chunked, compressed datasets (``observations``, ``actions``, ``rewards``,
``terminated``, ``truncated``, ``episode_offsets`` and, when present, ``behaviour_probs`` and
``unit_ids``), and the metadata (spaces included) as a JSON root attribute ``metadata``.
Files are written to a temporary name and renamed into place, so a crash never leaves a
half-written dataset under the final name. The root attribute ``content_sha256`` holds the
episodes' content fingerprint (:func:`privrl.privacy.ledger.content_fingerprint`), the key of
the dataset's privacy ledger; ``privrl ledger init`` adds ``privrl_ledger`` (the binding).
Per-transition columns kept at import (``keep_columns``) are the group ``extra_columns``, one
float64 array per column; they are outside the content fingerprint.

Tables: one row per transition with an episode-id column, mapped to dataset fields by a
:class:`ColumnMapping` (parsed from the CLI by :func:`parse_column_mapping`). How the final
observation of an episode is obtained is the one real decision here:

* with ``next_obs`` columns mapped, the final observation is the ``next_obs`` of the
  episode's last row, and ``next_obs[t] == obs[t+1]`` is checked inside every episode;
* without them, the **last row of each episode is dropped**: its observation becomes the
  final observation and its action, reward and flags are discarded. This is announced with a
  warning and recorded in ``metadata.extra["final_observation"]``. An episode with a single
  row then has no transition and is an error.

Observations outside a *declared* observation space: a Box's finite bounds are a clipping
range, so values outside them are clipped into it; a discrete code outside a Discrete,
MultiDiscrete or MultiBinary space (1-based codes imported with ``discrete:N``, which takes
0..N-1) is a coding error, refused with the column and the number of such values unless
``clip_out_of_space=True`` (``--clip-observations``) asks for clipping. Import is the data
holder's own tool, run on the raw data before any privatisation, so its local messages (that
refusal, and a warning with the number of values actually clipped) may depend on the data;
what it *stores* may not: ``metadata.extra["observation_clipping"]`` says that clipping is in
force (from the declared space and the option alone), never whether or how much it changed.

A row with both ``terminated`` and ``truncated`` set (Gymnasium returns both when the MDP
ends at the time limit, e.g. CartPole-v1 falling at step 500; Minari records both) is
imported as terminated: the terminal state is what a learner must not bootstrap from, and
the time limit is then moot. Tables and Minari datasets follow the same rule.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np
from gymnasium import spaces

from privrl import __version__ as privrl_version
from privrl.data.dataset import DatasetError, DatasetMetadata, TrajectoryDataset, _gather_index

__all__ = [
    "SCHEMA_VERSION",
    "ColumnMapping",
    "DatasetHeader",
    "clip_observations",
    "content_sha256",
    "export_table",
    "fit_observations",
    "import_table",
    "load_hdf5",
    "parse_column_mapping",
    "read_header",
    "save_hdf5",
]

SCHEMA_VERSION = 1
_ARRAYS = ("observations", "actions", "rewards", "terminated", "truncated", "episode_offsets")
_OPTIONAL_ARRAYS = ("behaviour_probs", "unit_ids")
_CHUNK_BYTES = 1 << 20  # ~1 MiB chunks: large enough for fast sequential reads


# ============================================================================ HDF5


def _atomic_target(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def save_hdf5(
    ds: TrajectoryDataset,
    path: str | Path,
    *,
    compression: Literal["lzf", "gzip"] | None = "lzf",
    compression_level: int = 4,
) -> Path:
    """Write ``ds`` as one HDF5 file, atomically (temporary file, then ``os.replace``).

    ``lzf`` is the default: in ``benchmarks/bench_dataset_load.py`` it loads several times
    faster than ``gzip`` for a modest size cost. The episodes' content fingerprint is stored as
    the root attribute ``content_sha256`` (one SHA-256 pass over the arrays).
    """
    import h5py

    from privrl.privacy.ledger import content_fingerprint

    path = Path(path)
    tmp = _atomic_target(path)
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["privrl_schema_version"] = SCHEMA_VERSION
            f.attrs["format"] = "privrl.TrajectoryDataset"
            f.attrs["privrl_version"] = privrl_version
            f.attrs["metadata"] = json.dumps(ds.metadata.to_dict(), allow_nan=False)
            f.attrs["n_episodes"] = ds.n_episodes
            f.attrs["n_transitions"] = ds.n_transitions
            arrays = {name: getattr(ds, name) for name in _ARRAYS + _OPTIONAL_ARRAYS}
            # The ledger's key, computed once here so a run finds the ledger from the header.
            f.attrs["content_sha256"] = content_fingerprint(arrays)
            for name, arr in arrays.items():
                if arr is None:
                    continue
                arr = np.ascontiguousarray(arr)
                kwargs: dict[str, Any] = {}
                if arr.size > 0:
                    row_bytes = max(1, arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64)))
                    rows = int(min(arr.shape[0], max(1, _CHUNK_BYTES // row_bytes)))
                    kwargs["chunks"] = (rows, *arr.shape[1:])
                    if compression == "gzip":
                        kwargs.update(compression="gzip", compression_opts=compression_level)
                    elif compression == "lzf":
                        kwargs["compression"] = "lzf"
                    elif compression is not None:
                        raise ValueError(f"unknown compression {compression!r}")
                f.create_dataset(name, data=arr, **kwargs)
            if ds.extra_columns:
                group = f.create_group("extra_columns")
                for name, arr in ds.extra_columns.items():
                    group.create_dataset(name, data=np.ascontiguousarray(arr))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _has_hdf5_signature(path: Path) -> bool:
    """True if the file carries HDF5's signature (at byte 0, 512, 1024, 2048, ...: HDF5 allows
    a user block before it), i.e. it was an HDF5 file even if it no longer opens."""
    try:
        with open(path, "rb") as fh:
            offset = 0
            while True:
                fh.seek(offset)
                head = fh.read(len(_HDF5_SIGNATURE))
                if head == _HDF5_SIGNATURE:
                    return True
                if len(head) < len(_HDF5_SIGNATURE):
                    return False
                offset = 512 if offset == 0 else offset * 2
    except OSError:
        return False


def _corrupt(path: Path, exc: BaseException) -> DatasetError:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return DatasetError(f"{path} is corrupt or truncated: {detail}; re-create or re-import it")


def load_hdf5(path: str | Path, validate: bool = True) -> TrajectoryDataset:
    """Read a file written by :func:`save_hdf5` (validated unless ``validate=False``).

    Every failure is a ``DatasetError`` naming the file: not found, not HDF5, not a privrl
    dataset, another schema version, or corrupt/truncated (HDF5 structures that no longer
    read, e.g. bytes overwritten or the file cut short).
    """
    path = Path(path)
    f = _open_hdf5(path, detect_corrupt=True)
    try:
        with f:
            _check_privrl(f, path)
            version = int(f.attrs["privrl_schema_version"])
            if version != SCHEMA_VERSION:
                newer = version > SCHEMA_VERSION
                raise DatasetError(
                    f"{path} has privrl schema version {version}, but this privrl reads version "
                    f"{SCHEMA_VERSION}"
                    + (
                        ": it was written by a newer privrl; upgrade privrl to read it"
                        if newer
                        else ""
                    )
                )
            try:
                meta = DatasetMetadata.from_dict(json.loads(f.attrs["metadata"]))
            except (KeyError, ValueError) as exc:
                raise DatasetError(f"{path}: unreadable metadata ({exc})") from exc
            missing = [name for name in _ARRAYS if name not in f]
            if missing:
                raise DatasetError(f"{path}: missing dataset(s) {missing}")
            arrays = {name: f[name][()] for name in _ARRAYS}
            for name in _OPTIONAL_ARRAYS:
                arrays[name] = f[name][()] if name in f else None
            if "extra_columns" in f:
                group = f["extra_columns"]
                arrays["extra_columns"] = {name: group[name][()] for name in group}
    except DatasetError:
        raise
    except (OSError, KeyError, ValueError, RuntimeError, TypeError) as exc:
        # h5py reports damaged structures as OSError ("wrong B-tree signature"), KeyError
        # ("bad object header version number") or ValueError; none is the user's input.
        raise _corrupt(path, exc) from exc
    return TrajectoryDataset(**arrays, metadata=meta, validate=validate)


def _open_hdf5(path: Path, *, detect_corrupt: bool) -> Any:
    """The open ``h5py.File`` of ``path``; a missing file or a non-HDF5 file is a DatasetError
    (with ``detect_corrupt``, a file with the HDF5 signature that fails to open is corrupt)."""
    import h5py

    if not path.is_file():
        raise DatasetError(f"dataset file not found: {path}")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        if detect_corrupt and _has_hdf5_signature(path):
            raise _corrupt(path, exc) from exc
        raise DatasetError(f"{path} is not an HDF5 file ({exc})") from exc


def _check_privrl(f: Any, path: Path) -> None:
    """Refuse an HDF5 file that privrl did not write."""
    if "privrl_schema_version" not in f.attrs:
        raise DatasetError(
            f"{path} is not a privrl dataset (no 'privrl_schema_version' attribute); "
            "import foreign data with `privrl data import` (tables, Minari)"
        )


@dataclass(frozen=True)
class DatasetHeader:
    """What a dataset file says about itself without reading any episode: its metadata (the
    public part of a dataset), its sizes and its root attributes.

    Private commands read this, and only this, before the ledger check: the arrays stay
    untouched until the ledger has allowed the run.
    """

    path: Path | None  # None: a dataset in memory (`header_of`)
    metadata: DatasetMetadata
    n_episodes: int
    n_transitions: int
    attrs: dict[str, Any]

    @property
    def content_sha256(self) -> str | None:
        """The stored content fingerprint (the ledger's key); None for files written before it
        existed. Trusted as stored: :func:`content_sha256` with ``recompute=True`` checks it."""
        value = self.attrs.get("content_sha256")
        return value if isinstance(value, str) else None


def read_header(path: str | Path) -> DatasetHeader:
    """The header of a file written by :func:`save_hdf5` (metadata and sizes, no arrays)."""
    path = Path(path)
    f = _open_hdf5(path, detect_corrupt=False)
    try:
        with f:
            _check_privrl(f, path)
            attrs = {k: _attr(v) for k, v in f.attrs.items()}
            meta = DatasetMetadata.from_dict(json.loads(attrs["metadata"]))
            return DatasetHeader(
                path=path,
                metadata=meta,
                n_episodes=int(attrs["n_episodes"]),
                n_transitions=int(attrs["n_transitions"]),
                attrs=attrs,
            )
    except (KeyError, ValueError, TypeError, OSError) as exc:
        if isinstance(exc, DatasetError):
            raise
        raise DatasetError(f"{path}: unreadable or corrupt dataset header ({exc})") from exc


def header_of(dataset: TrajectoryDataset) -> DatasetHeader:
    """The header of a dataset in memory: what a file of it would say about itself (metadata,
    sizes and the content fingerprint), so the Python API plans a run from the same public
    facts a file gives the command line. `path` is None."""
    from privrl.data.public import episodes_sha256

    return DatasetHeader(
        path=None,
        metadata=dataset.metadata,
        n_episodes=int(dataset.n_episodes),
        n_transitions=int(dataset.n_transitions),
        attrs={"content_sha256": episodes_sha256(dataset)},
    )


def content_sha256(path: str | Path, *, recompute: bool = False) -> str:
    """The content fingerprint of a dataset file: the stored attribute, or (``recompute``, or
    a file written before the attribute existed) a SHA-256 pass over its arrays."""
    from privrl.privacy.ledger import LedgerError, dataset_identity

    try:
        return dataset_identity(path, recompute=recompute).content_sha256
    except LedgerError as exc:
        raise DatasetError(str(exc)) from None


def _attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


# ============================================================================ tables

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
    d: dict[str, Any] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        if "=" not in item:
            raise DatasetError(
                f"column mapping: item {item!r} is not key=column (e.g. "
                "'episode=patient_id,obs=o1|o2,action=treatment,reward=r')"
            )
        key, _, value = (s.strip() for s in item.partition("="))
        if key not in _MAPPING_KEYS:
            raise DatasetError(
                f"column mapping: unknown key {key!r}; valid keys: {list(_MAPPING_KEYS)}"
            )
        if key in d:
            raise DatasetError(f"column mapping: key {key!r} given twice")
        cols = [c.strip() for c in value.split("|")]
        if not all(cols):
            raise DatasetError(f"column mapping: empty column name in {item!r}")
        if len(cols) > 1 and key not in _MULTI_KEYS:
            raise DatasetError(f"column mapping: {key!r} takes one column, got {cols}")
        d[key] = tuple(cols) if len(cols) > 1 else cols[0]
    return ColumnMapping.from_dict(d)


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


def _column(table: Any, name: str, key: str, path: Path) -> np.ndarray:
    if name not in table.column_names:
        raise DatasetError(
            f"column {name!r} (mapped as {key!r}) not found in {path.name}; available columns: "
            f"{table.column_names}"
        )
    col = table.column(name)
    if col.null_count:
        mask = np.asarray(col.is_null().to_numpy(zero_copy_only=False))
        row = int(np.flatnonzero(mask)[0])
        raise DatasetError(
            f"column {name!r} (mapped as {key!r}) is empty at data row {row} of {path.name} "
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


def import_table(
    path: str | Path,
    mapping: ColumnMapping | Mapping[str, Any] | str,
    *,
    format: Literal["parquet", "csv"] | None = None,
    observation_space: spaces.Space | None = None,
    action_space: spaces.Space | None = None,
    env_id: str | None = None,
    discount: float | None = None,
    horizon: int | None = None,
    keep_ids: bool = False,
    keep_columns: Sequence[str] = (),
    validate: bool = True,
    clip_out_of_space: bool = False,
) -> TrajectoryDataset:
    """Read a transitions table (one row per transition) into a dataset.

    ``keep_columns`` names numeric columns kept per transition as ``ds.extra_columns`` (e.g. a
    target policy's probability of the logged action, for ``--target-policy column:NAME``).
    Observations outside a space given here (``observation_space``): see `fit_observations`
    (a Box clips; discrete codes are refused unless ``clip_out_of_space``).

    Episodes are ordered by episode id, rows within an episode by the ``timestep`` column if
    mapped (duplicates are an error), else by their order in the file. Spaces not given are
    taken from privrl's Parquet metadata if present, else inferred from the data (Discrete
    for one integer column with a range under 1024, else an unbounded Box) — an inferred
    space is derived from the private data, so it is flagged in ``metadata.extra`` and warned
    about; pass spaces explicitly for private work. Unit labels that are not integers are
    mapped to 0..k-1 in sorted order. Episode ids and unit labels are identifiers, so they
    are kept in ``metadata.extra`` only with ``keep_ids=True``.
    """
    path = Path(path)
    if isinstance(mapping, str):
        mapping = parse_column_mapping(mapping)
    elif not isinstance(mapping, ColumnMapping):
        mapping = ColumnMapping.from_dict(mapping)
    fmt = _table_format(path, format)
    table = _read_table(path, fmt)
    stored: DatasetMetadata | None = None
    schema_meta = table.schema.metadata or {}
    if b"privrl" in schema_meta:
        try:
            stored = DatasetMetadata.from_dict(json.loads(schema_meta[b"privrl"])["metadata"])
        except (KeyError, ValueError) as exc:
            raise DatasetError(f"{path.name}: unreadable privrl metadata ({exc})") from exc

    cols = mapping.columns()
    raw = {key: [_column(table, c, key, path) for c in names] for key, names in cols.items()}
    keep_names = _check_keep_names(keep_columns)
    kept_raw = {
        name: _stack([_column(table, name, "keep_columns", path)], f"keep_columns {name!r}")
        for name in keep_names
    }
    ep_col = raw["episode"][0]
    if ep_col.dtype == object or ep_col.dtype.kind in "US":
        ep_col = ep_col.astype(str)
    ep_ids, codes = np.unique(ep_col, return_inverse=True)
    codes = codes.reshape(-1)
    n_rows = codes.shape[0]
    if n_rows == 0:
        raise DatasetError(f"{path.name} has no rows")
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
    n_ep = ep_ids.shape[0]

    def row_error(r: int, field: str, problem: str) -> DatasetError:
        """The error for sorted row ``r``, located by episode and step."""
        e = int(codes[r])
        step = r - int(row_off[e])
        return DatasetError(
            f"episode {_label(ep_ids[e])}, step {step}, field {field!r}: {problem}",
            episode=e,
            step=step,
            field=field,
        )

    def take(key: str) -> np.ndarray | None:
        if key not in raw:
            return None
        return _stack([c[order] for c in raw[key]], key)

    obs_rows = take("obs")
    act_rows = take("action")
    rew_rows = take("reward")
    next_rows = take("next_obs")
    term_rows = None if "terminated" not in raw else _to_bool(take("terminated"), "terminated")
    trunc_rows = None if "truncated" not in raw else _to_bool(take("truncated"), "truncated")
    prob_rows = take("behaviour_prob")
    assert obs_rows is not None and act_rows is not None and rew_rows is not None
    last_rows = row_off[1:] - 1
    extra: dict[str, Any] = {"source": {"format": fmt, "file": path.name}}

    if next_rows is not None:
        if next_rows.dtype != obs_rows.dtype:
            common = np.result_type(obs_rows.dtype, next_rows.dtype)
            obs_rows, next_rows = obs_rows.astype(common), next_rows.astype(common)
        # inside an episode, next_obs of row t must equal obs of row t+1
        same_ep = codes[1:] == codes[:-1]
        diff = next_rows[:-1] != obs_rows[1:]
        mismatch = np.flatnonzero(same_ep & (diff.reshape(diff.shape[0], -1).any(axis=1)))
        if mismatch.size:
            raise row_error(
                int(mismatch[0]),
                "next_obs",
                f"differs from the observation of the next row ({mismatch.size} such rows); a "
                "dataset stores one observation sequence per episode",
            )
        lengths = rows_per_ep
        t_sel = np.arange(n_rows, dtype=np.int64)
        obs_off = row_off + np.arange(n_ep + 1)
        observations = np.empty((n_rows + n_ep, *obs_rows.shape[1:]), dtype=obs_rows.dtype)
        observations[_gather_index(obs_off[:-1], lengths)] = obs_rows
        observations[obs_off[1:] - 1] = next_rows[last_rows]
        extra["final_observation"] = "next_obs of the last row"
    else:
        lengths = rows_per_ep - 1
        short = np.flatnonzero(lengths == 0)
        if short.size:
            raise DatasetError(
                f"episode {_label(ep_ids[short[0]])}, step 0, field 'obs': the episode has a "
                f"single row ({short.size} such episodes). Without next_obs columns the last "
                "row of each episode only supplies the final observation, so every episode "
                "needs at least two rows; map next_obs columns to keep single-row episodes",
                episode=int(short[0]),
                step=0,
                field="obs",
            )
        t_sel = _gather_index(row_off[:-1], lengths)
        observations = obs_rows
        dropped_term = 0 if term_rows is None else int(term_rows[last_rows].sum())
        msg = (
            f"{path.name}: no next_obs columns mapped, so the last row of each of the {n_ep} "
            "episodes was dropped: its observation is the episode's final observation and its "
            "action, reward and flags are discarded"
        )
        if dropped_term:
            msg += (
                f" ({dropped_term} of those rows had terminated=True; that information is lost "
                "— map next_obs columns to keep it)"
            )
        warnings.warn(msg, UserWarning, stacklevel=2)
        extra["final_observation"] = "last row dropped (no next_obs columns)"
        extra["dropped_rows"] = int(n_ep)
    n_t = int(lengths.sum())
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    actions = act_rows[t_sel]
    rewards = rew_rows[t_sel]
    terminated = np.zeros(n_t, np.bool_) if term_rows is None else term_rows[t_sel]
    truncated = np.zeros(n_t, np.bool_) if trunc_rows is None else trunc_rows[t_sel]
    truncated &= ~terminated  # both set (Gymnasium allows it): the episode terminated
    probs = None if prob_rows is None else prob_rows[t_sel].astype(np.float64)
    kept = {name: col[order][t_sel] for name, col in kept_raw.items()}

    unit_ids = None
    if "unit" in raw:
        extra["unit_column"] = mapping.unit
        u = raw["unit"][0][order]
        first = u[row_off[:-1]]
        bad = np.flatnonzero(u != np.repeat(first, rows_per_ep))
        if bad.size:
            r = int(bad[0])
            raise row_error(
                r,
                "unit",
                f"the unit changes inside the episode ({_label(first[codes[r]])} then "
                f"{_label(u[r])}); an episode belongs to one unit",
            )
        if np.issubdtype(first.dtype, np.integer):
            unit_ids = first.astype(np.int64)
        else:
            labels, unit_ids = np.unique(first.astype(str), return_inverse=True)
            unit_ids = unit_ids.reshape(-1).astype(np.int64)
            if keep_ids:
                extra["unit_labels"] = labels.tolist()
    if keep_ids:
        extra["episode_ids"] = ep_ids.tolist()

    # spaces: explicit > stored in the file > inferred from the data
    inferred = []
    obs_space = observation_space or (stored.observation_space if stored else None)
    act_space = action_space or (stored.action_space if stored else None)
    if obs_space is None:
        obs_space = _infer_space(observations, scalar=isinstance(mapping.obs, str))
        inferred.append("observation_space")
    if act_space is None:
        act_space = _infer_space(actions, scalar=isinstance(mapping.action, str))
        inferred.append("action_space")
    if inferred:
        extra["inferred_from_data"] = inferred
        warnings.warn(
            f"{path.name}: {' and '.join(inferred)} inferred from the data ({obs_space}, "
            f"{act_space}); inferred spaces depend on the private data — pass them explicitly "
            "for private work",
            UserWarning,
            stacklevel=2,
        )
    observations = _fit_to_space(observations, obs_space, "obs")
    actions = _fit_to_space(actions, act_space, "action")
    if observation_space is not None and clips(obs_space):
        obs_columns = [mapping.obs] if isinstance(mapping.obs, str) else list(mapping.obs)
        observations, clipping = fit_observations(
            observations, obs_space, obs_columns, source=path.name, clip=clip_out_of_space
        )
        if clipping:
            extra["observation_clipping"] = CLIPPING_NOTE
    if kept:
        extra["extra_columns"] = list(kept)

    if stored is not None:
        base = stored
    else:
        base = DatasetMetadata()
    meta = DatasetMetadata(
        observation_space=obs_space,
        action_space=act_space,
        env_id=env_id if env_id is not None else base.env_id,
        discount=discount if discount is not None else base.discount,
        horizon=horizon if horizon is not None else base.horizon,
        extra={**_without(base.extra, "extra_columns"), **_import_facts(extra)}
        if stored is not None
        else extra,
    )
    try:
        return TrajectoryDataset(
            observations=observations,
            actions=actions,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            episode_offsets=offsets,
            behaviour_probs=probs,
            unit_ids=unit_ids,
            extra_columns=kept or None,
            metadata=meta,
            validate=validate,
        )
    except DatasetError as exc:
        if exc.episode is None:
            raise
        raise DatasetError(
            f"{exc} — episode {exc.episode} is {_label(ep_ids[exc.episode])} in column "
            f"{mapping.episode!r} of {path.name}",
            episode=exc.episode,
            step=exc.step,
            field=exc.field,
        ) from exc


CLIPPING_NOTE = "observations outside the declared observation space are clipped into it"
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
    """`values` fitted into the declared `space`, and whether clipping is in force.

    A Box clips (its bounds are a clipping range). A discrete space refuses codes outside it
    (a `DatasetError` naming each column and how many of its values are outside), unless
    `clip`. A warning says how many values were clipped, only when some were. These messages
    are the data holder's own, at import; nothing stored depends on them (see the module
    docstring)."""
    counts = outside_space(values, space)
    total = int(counts.sum())
    names = (
        list(columns) if len(columns) == len(counts) else [f"obs[{j}]" for j in range(len(counts))]
    )
    where = ", ".join(f"{n!r} ({int(c)})" for n, c in zip(names, counts, strict=True) if c)
    discrete = isinstance(space, DISCRETE_SPACES)
    if discrete and total and not clip:
        raise DatasetError(
            f"{source}: {total} observation value(s) fall outside the declared space {space}, "
            f"in column(s) {where} (1-based codes? {space} takes codes from "
            f"{_first_code(space)}); fix the codes or the space, or pass --clip-observations "
            "to clip them into it"
        )
    clipping = clip or not discrete
    if clipping and total:
        warnings.warn(
            f"{source}: {total} observation value(s) outside the declared observation space "
            f"were clipped into it, in column(s) {where}",
            UserWarning,
            stacklevel=3,
        )
    return (clip_observations(values, space) if clipping else values), clipping


def _first_code(space: spaces.Space) -> str:
    start = np.asarray(getattr(space, "start", 0)).reshape(-1)
    return str(int(start[0])) if start.size and np.all(start == start[0]) else "its start"


def _import_facts(extra: dict[str, Any]) -> dict[str, Any]:
    """What this import's options add to metadata stored in a Parquet file's schema (which
    otherwise comes back as it was exported)."""
    keys = ("extra_columns", "observation_clipping")
    return {k: extra[k] for k in keys if k in extra}


def _without(extra: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in extra.items() if k != key}


def _check_keep_names(names: Sequence[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        name = str(name).strip()
        if not name or "/" in name or name == ".":
            raise DatasetError(
                f"--keep-columns: {name!r} is not a column name that can be kept (no '/', "
                "not empty)"
            )
        if name in out:
            raise DatasetError(f"--keep-columns: column {name!r} is given twice")
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
