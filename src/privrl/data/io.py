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

Tables (Parquet, CSV, DataFrames): `privrl.data.tables`, whose entry points this module
re-exports (`import_table`, `from_table`, `export_table`, `ColumnMapping`, ...).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from privrl import __version__ as privrl_version
from privrl.data.dataset import DatasetError, DatasetMetadata, TrajectoryDataset

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


# Transition tables live in privrl.data.tables; their names are importable from here too.
from privrl.data.tables import (  # noqa: E402
    CLIPPING_NOTE,
    DISCRETE_SPACES,
    ColumnMapping,
    clip_observations,
    clips,
    export_table,
    fit_observations,
    from_table,
    import_table,
    outside_space,
    parse_column_mapping,
)

__all__ = [
    "CLIPPING_NOTE",
    "DISCRETE_SPACES",
    "SCHEMA_VERSION",
    "ColumnMapping",
    "DatasetHeader",
    "clip_observations",
    "clips",
    "content_sha256",
    "export_table",
    "fit_observations",
    "from_table",
    "header_of",
    "import_table",
    "load_hdf5",
    "outside_space",
    "parse_column_mapping",
    "read_header",
    "save_hdf5",
]
