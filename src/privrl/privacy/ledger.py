"""A privacy-budget ledger bound to a dataset's content.

The ledger is a JSON file (by default `<dataset>.ledger.json` next to the dataset) holding the
dataset's declared total budget (ε_total at δ, for one privacy unit under one neighbouring
relation) and every `PrivacyReport` spent on it; the ledger refuses any run that would take the
composed spend above ε_total.

A private run is a transaction on the ledger. It `reserve`s its planned report before it reads
the data: a pending entry that counts against the budget from the moment it is written. Once
its outputs are published it `complete`s the reservation with its final report, which counts
instead from then on. A run that dies in between leaves the reservation counting (fail closed;
`entries` shows it as "reserved"); the data holder settles it with `complete` (keep the spend)
or, stating that nothing of the run was ever published, `release` (the spend stops counting).
Reservations and settlements are entries of the one hash chain (`LedgerEntry.kind`), so they
are as tamper-evident as any spend; `record` writes a completed spend in one step.

Identity. A ledger belongs to the dataset's episodes, not to a file: it is keyed by the
content fingerprint `content_sha256`, a SHA-256 over the canonical arrays (`CONTENT_FIELDS`,
each with its name, little-endian dtype and shape; see `content_fingerprint`). Copies, renames
and re-exports of the same episodes (HDF5 → Parquet → HDF5) share one fingerprint and so one
budget; metadata edits do not change it. `save_hdf5` stores it as the root attribute
`content_sha256`; for older files it is computed from the arrays.

Finding a dataset's ledger (`for_dataset`): `<file>.ledger.json` next to the file, else the
registry, a directory (`$PRIVRL_LEDGER_REGISTRY`, default `~/.local/share/privrl/ledgers`)
with one entry per fingerprint naming its ledger file, the files seen with it, and the
ledger's hash-chain head. `init` also marks the dataset file itself with the root attribute
`privrl_ledger` (ledger id, fingerprint, genesis hash): a marked file whose ledger is found in
neither place (deleted, moved, a copy on another machine) is refused rather than run unledgered.
Writing an attribute does not change the content fingerprint.

What is checked when.
- Every load and re-read (so every `check`, `record`, `spent`, `show`): strict schema
  (finite ε_total > 0, 0 ≤ δ < 1, known unit/relation/backend, well-formed entries whose
  reports are private with finite ε), the hash chain, and the registry's head.
- Before a run (`for_dataset`, the fast path): the fingerprint *stored* in the file's
  attribute must equal the ledger's, and the file's `privrl_ledger` mark must name this
  ledger (id and genesis). No array is read, so the check costs milliseconds for any file
  size; a file without the attribute (written before it existed) is hashed, O(size).
- `verify` (`privrl ledger verify`, and `load` with `verify=True`): recomputes the
  fingerprint from the arrays, so a file whose episodes were edited in place (its stored
  attribute now stale or forged) is caught. It reads every array once (a small multiple of
  `load_hdf5` of the same file), where the run path's check is constant in the file's size.

Tamper evidence. Each entry stores the hash of the previous state and its own hash (a chain
starting from a genesis hash over the header: ledger id, fingerprint, unit, relation, backend,
budget, creation time); the chain's head and length are stored in the ledger, the head also in
the registry entry, and the genesis in the dataset's mark. So editing a spend, raising the
budget, truncating or emptying the entries — by editing the JSON alone — is detected on load
and refused (LedgerError: the budget can no longer be trusted). Copies of a ledger file next
to copies of the dataset are refused too (the registry names the one ledger of the episodes).
The head is kept in the registry, not in the dataset file: runs read the dataset concurrently
(HDF5 file locks), dataset files may be read-only and large, and an in-place HDF5 write is not
atomic. What it does NOT protect against: the hashes are unkeyed, so someone who rewrites the
ledger and the registry entry (and the dataset's mark) consistently, or who deletes the
registry entry and then truncates the ledger, is not detected; a fresh machine with no
registry trusts the ledger it is given. The threat addressed is accidental or casual edits and
copies, not a determined user with write access to all three.

Version-1 ledgers (keyed by the file's SHA-256, no chain) still load, with a warning, and are
checked against the file's bytes; the first recorded run migrates them to version 2 (the
chain starts then, over the entries as they are at migration, and the ledger is registered).

Accounting across runs. `spent()` is the accountant's ε, at the ledger's δ, of the
composition of ALL recorded reports' events — never a sum of per-run ε's (which would waste
budget) nor anything less (which would overspend). When the ledger's backend cannot account a
recorded report's events (e.g. an event only the other backend supports), that report enters
the composition as an `ApproxDpEvent(ε_run, δ_run)` built from its own stated guarantee: valid
(every report's (ε, δ) is a true guarantee) but looser than composing its events directly.

Crash safety. Every write takes an exclusive `fcntl.flock` on a sibling `.lock` file, re-reads
the ledger from disk, re-checks the budget, writes a temp file in the same directory, fsyncs
it, renames it over the ledger with `os.replace` and fsyncs the directory: a crash at any point
leaves either the old or the new complete ledger, and a spend is durable once `record` or
`reserve` returns. The registry entry is written the same way, after the ledger (a crash in between
leaves the ledger one run ahead of the registry, which is accepted). Stale temp files of a
crashed writer are removed by the next writer. `flock` is advisory and may not work across
machines on some network file systems; keep ledgers on a local disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from dp_accounting import dp_event

from privrl.privacy import accounting, limits
from privrl.privacy.events import ApproxDpEvent
from privrl.privacy.report import PrivacyReport, fmt_number, json_safe, utc_now
from privrl.privacy.units import NeighbourRelation, PrivacyUnit, parse_relation, parse_unit

if TYPE_CHECKING:  # rich draws tables only; importing the privacy core does not load it
    from rich.table import Table

LEDGER_FORMAT = "privrl.ledger"
REGISTRY_FORMAT = "privrl.ledger-registry"
SCHEMA_VERSION = 2
LEDGER_SUFFIX = ".ledger.json"
REGISTRY_ENV = "PRIVRL_LEDGER_REGISTRY"
DEFAULT_REGISTRY = "~/.local/share/privrl/ledgers"
CONTENT_ATTR = "content_sha256"
MARK_ATTR = "privrl_ledger"
#: The arrays a dataset's content fingerprint covers, in hashing order (the last two when present).
CONTENT_FIELDS = (
    "episode_offsets",
    "observations",
    "actions",
    "rewards",
    "terminated",
    "truncated",
    "behaviour_probs",
    "unit_ids",
)
_REQUIRED_FIELDS = CONTENT_FIELDS[:6]
_CHUNK = 1 << 20
_HASH_BLOCK = 16 << 20  # bytes of one array read at a time while hashing a file
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")


class LedgerError(ValueError):
    """The ledger cannot be used: missing, malformed, bound to another dataset, or mismatched."""


class BudgetExceededError(LedgerError):
    """The run would take the dataset's composed spend above its total budget."""


def _tampered(path: Path, detail: str) -> LedgerError:
    return LedgerError(
        f"ledger {path} was modified outside privrl ({detail}); the dataset's budget can no "
        "longer be trusted: restore the ledger from a backup"
    )


# -- content fingerprint --------------------------------------------------------------------------


def _canonical_dtype(dtype: Any, name: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind not in "biuf":
        raise ValueError(f"field {name!r} has dtype {dtype}, not a numeric or boolean array")
    return dtype.newbyteorder("<")


def _hash_header(digest: Any, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    dims = "x".join(str(int(d)) for d in shape)
    digest.update(f"{name}\x00{dtype.str}\x00{dims}\n".encode())


def _hash_bytes(digest: Any, values: Any, dtype: np.dtype) -> None:
    data = np.ascontiguousarray(values, dtype=dtype)
    digest.update(data.reshape(-1).view(np.uint8))


def _content_digest() -> Any:
    return hashlib.sha256(b"privrl.content.v1\n")


def content_fingerprint(arrays: Mapping[str, Any]) -> str:
    """SHA-256 hex digest of a dataset's episodes: `CONTENT_FIELDS` in order, each as its name,
    little-endian dtype, shape and C-order bytes (`behaviour_probs`/`unit_ids` only if present).

    Metadata is not covered, so editing it keeps the ledger; any change to an episode, a dtype or
    a shape changes the fingerprint.
    """
    digest = _content_digest()
    for name in CONTENT_FIELDS:
        values = arrays.get(name)
        if values is None:
            if name in _REQUIRED_FIELDS:
                raise ValueError(f"content fingerprint: the field {name!r} is missing")
            continue
        values = np.asarray(values)
        dtype = _canonical_dtype(values.dtype, name)
        _hash_header(digest, name, dtype, values.shape)
        _hash_bytes(digest, values, dtype)
    return digest.hexdigest()


def _hash_file_arrays(f: Any, path: Path) -> str:
    """`content_fingerprint` of an open HDF5 dataset, reading ~16 MiB of an array at a time."""
    digest = _content_digest()
    for name in CONTENT_FIELDS:
        if name not in f:
            if name in _REQUIRED_FIELDS:
                raise LedgerError(f"{path} is not a privrl dataset (it has no {name!r} array)")
            continue
        array = f[name]
        try:
            dtype = _canonical_dtype(array.dtype, name)
        except ValueError as exc:
            raise LedgerError(f"{path} is not a privrl dataset ({exc})") from None
        shape = tuple(array.shape)
        _hash_header(digest, name, dtype, shape)
        if not shape:
            _hash_bytes(digest, array[()], dtype)
            continue
        row_bytes = max(1, dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64)))
        rows = max(1, _HASH_BLOCK // row_bytes)
        for start in range(0, shape[0], rows):
            _hash_bytes(digest, array[start : start + rows], dtype)
    return digest.hexdigest()


def _attr_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes | np.bytes_):
        return bytes(value).decode("utf-8")
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray) and value.shape == ():
        return _attr_str(value[()])
    raise TypeError(f"expected a string attribute, got {type(value).__name__}")


@dataclass(frozen=True)
class DatasetIdentity:
    """What a dataset file says about its episodes and its ledger (its root attributes)."""

    path: Path
    content_sha256: str
    stored: str | None  # the `content_sha256` attribute as stored (None in older files)
    mark: dict[str, str] | None  # the `privrl_ledger` attribute written by `ledger init`


def _parse_mark(raw: Any, path: Path) -> dict[str, str] | None:
    if raw is None:
        return None
    try:
        mark = json.loads(_attr_str(raw) or "", parse_constant=_reject_constant)
        if not isinstance(mark, dict):
            raise ValueError("not a JSON object")
        for key, pattern in (
            ("ledger_id", _HEX32),
            ("content_sha256", _HEX64),
            ("genesis", _HEX64),
        ):
            if not isinstance(mark.get(key), str) or not pattern.fullmatch(mark[key]):
                raise ValueError(f"bad or missing {key!r}")
        for key in ("created", "ledger"):
            if not isinstance(mark.get(key), str):
                raise ValueError(f"bad or missing {key!r}")
    except (TypeError, ValueError) as exc:
        raise LedgerError(
            f"{path}: its {MARK_ATTR!r} attribute (the dataset's binding to its privacy ledger) "
            f"is unreadable ({exc}); it was modified outside privrl, so the dataset's budget "
            "cannot be found: restore the file from a backup"
        ) from None
    return {k: mark[k] for k in ("ledger_id", "content_sha256", "genesis", "created", "ledger")}


def dataset_identity(path: str | os.PathLike[str], *, recompute: bool = False) -> DatasetIdentity:
    """Read a privrl HDF5 dataset's fingerprint and ledger mark from its root attributes.

    The stored `content_sha256` attribute is trusted unless `recompute` (then, or when the
    attribute is missing, the arrays are hashed: O(file size)). Raises LedgerError for a file
    that is not a privrl dataset.
    """
    import h5py

    path = Path(path)
    if not path.is_file():
        raise LedgerError(f"dataset file not found: {path}")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise LedgerError(f"{path} is not a privrl dataset (not an HDF5 file: {exc})") from None
    try:
        with f:
            if "privrl_schema_version" not in f.attrs:
                raise LedgerError(
                    f"{path} is not a privrl dataset (no 'privrl_schema_version' attribute); "
                    "import the data first with `privrl data import`"
                )
            try:
                stored = _attr_str(f.attrs.get(CONTENT_ATTR))
            except (TypeError, UnicodeDecodeError):
                stored = ""
            if stored is not None and not _HEX64.fullmatch(stored):
                raise LedgerError(
                    f"{path}: its {CONTENT_ATTR!r} attribute is not a SHA-256 digest; the file "
                    "was modified outside privrl (re-save it with privrl to repair it)"
                )
            mark = _parse_mark(f.attrs.get(MARK_ATTR), path)
            content = stored if stored and not recompute else _hash_file_arrays(f, path)
    except OSError as exc:
        raise LedgerError(f"{path}: unreadable dataset file ({exc})") from None
    return DatasetIdentity(path=path, content_sha256=content, stored=stored, mark=mark)


def _write_attrs(path: Path, attrs: Mapping[str, str | None]) -> None:
    """Set (or, for None, delete) root attributes of an HDF5 file in place."""
    import h5py

    try:
        with h5py.File(path, "r+") as f:
            for key, value in attrs.items():
                if value is None:
                    if key in f.attrs:
                        del f.attrs[key]
                else:
                    f.attrs[key] = value
    except OSError as exc:
        raise LedgerError(
            f"cannot write the {MARK_ATTR!r} attribute into {path} ({exc}); `ledger init` marks "
            "the dataset file as ledgered: make it writable and close programs that have it open"
        ) from None


def _read_mark(path: Path) -> dict[str, str] | None:
    import h5py

    try:
        with h5py.File(path, "r") as f:
            return _parse_mark(f.attrs.get(MARK_ATTR), path)
    except OSError:
        return None


# -- the registry ---------------------------------------------------------------------------------


def registry_dir() -> Path:
    """The ledger registry: `$PRIVRL_LEDGER_REGISTRY`, default `~/.local/share/privrl/ledgers`."""
    raw = os.environ.get(REGISTRY_ENV)
    return Path(raw or DEFAULT_REGISTRY).expanduser()


def _registry_path(content_sha256: str) -> Path:
    return registry_dir() / f"{content_sha256}.json"


@dataclass(frozen=True)
class RegistryEntry:
    """The registry's record of one fingerprint: its ledger, files seen with it, chain head."""

    content_sha256: str
    ledger: Path
    ledger_id: str
    genesis: str
    head: str
    length: int
    files: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": REGISTRY_FORMAT,
            "version": 1,
            "content_sha256": self.content_sha256,
            "ledger": str(self.ledger),
            "ledger_id": self.ledger_id,
            "genesis": self.genesis,
            "head": self.head,
            "length": self.length,
            "files": list(self.files),
            "updated": utc_now(),
        }


def _read_registry(content_sha256: str) -> RegistryEntry | None:
    path = _registry_path(content_sha256)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LedgerError(
            f"cannot read the ledger registry entry {path} ({exc.strerror or exc}); fix it or "
            f"point {REGISTRY_ENV} at a readable directory"
        ) from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
        if not isinstance(data, dict) or data.get("format") != REGISTRY_FORMAT:
            raise ValueError("not a privrl registry entry")
        if data.get("content_sha256") != content_sha256:
            raise ValueError("its fingerprint does not match its file name")
        for key, pattern in (("ledger_id", _HEX32), ("genesis", _HEX64), ("head", _HEX64)):
            if not isinstance(data.get(key), str) or not pattern.fullmatch(data[key]):
                raise ValueError(f"bad or missing {key!r}")
        length = data.get("length")
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise ValueError("bad or missing 'length'")
        ledger = data.get("ledger")
        files = data.get("files", [])
        if not isinstance(ledger, str) or not ledger:
            raise ValueError("bad or missing 'ledger'")
        if not isinstance(files, list) or not all(isinstance(x, str) for x in files):
            raise ValueError("bad 'files'")
    except ValueError as exc:
        raise LedgerError(
            f"the ledger registry entry {path} is invalid ({exc}); it was modified outside "
            "privrl: restore it from a backup, or delete it (which drops the check of its "
            "ledger's head)"
        ) from None
    return RegistryEntry(
        content_sha256=content_sha256,
        ledger=Path(ledger),
        ledger_id=data["ledger_id"],
        genesis=data["genesis"],
        head=data["head"],
        length=length,
        files=tuple(files),
    )


def _update_registry(
    content_sha256: str, change: Callable[[RegistryEntry | None], RegistryEntry | None]
) -> None:
    """Read-modify-write one registry entry under its lock, atomically."""
    directory = registry_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LedgerError(
            f"cannot create the ledger registry {directory} ({exc.strerror or exc}); point "
            f"{REGISTRY_ENV} at a writable directory"
        ) from None
    path = _registry_path(content_sha256)
    with _locked(path):
        current = _read_registry(content_sha256)
        new = change(current)
        if new is not None and new != current:
            _remove_stale_temps(path)
            # No directory fsync: a rename lost in a crash leaves the registry behind its ledger,
            # which is accepted (and caught up by the next write).
            _atomic_write_json(path, new.to_dict(), sync_dir=False)


def _with_file(files: tuple[str, ...], seen: Path | None) -> tuple[str, ...]:
    if seen is None:
        return files
    name = str(seen.resolve())
    return files if name in files else (*files, name)


# -- ledger entries -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spend:
    """One run as the ledger composes it: its event and, if it has one, its stated (ε, δ)."""

    event: dp_event.DpEvent
    fallback: ApproxDpEvent | None
    private: bool

    @classmethod
    def of(cls, report: PrivacyReport) -> _Spend:
        fallback = None
        if report.private and math.isfinite(report.epsilon):
            fallback = ApproxDpEvent(epsilon=report.epsilon, delta=report.delta)
        return cls(event=report.event, fallback=fallback, private=report.private)


#: What a chain entry is. "" (a one-step `record`): a spend completed in one write;
#: "reserve": a pending spend written before a run reads the data (it counts at once);
#: "complete": settles a reservation with the run's final report (which then counts instead);
#: "release": settles a reservation as never published (it stops counting).
ENTRY_KINDS = ("", "reserve", "complete", "release")
#: `LedgerEntry.status` of a run in the per-run view (`BudgetLedger.entries`).
RESERVED, COMPLETE, RELEASED = "reserved", "complete", "released"


@dataclass(frozen=True)
class LedgerEntry:
    """One entry of the ledger's hash chain: its id, when it was written, a label, its
    serialised report, and its link in the chain (`prev`: the state before it, `hash`: the
    state after).

    `kind` (see `ENTRY_KINDS`), `out` (a reservation's run directory), `settles` (the
    reservation a "complete"/"release" entry settles) and `note` (a release's statement) are
    empty for a one-step record, whose hashed content is unchanged by them. `status` is not
    stored: it is set on the per-run view (`BudgetLedger.entries`) to "complete", "reserved"
    (counted, outcome unknown) or "released"."""

    run_id: str
    timestamp: str
    label: str
    report: dict[str, Any]
    prev: str = ""
    hash: str = ""
    kind: str = ""
    out: str = ""
    settles: str = ""
    note: str = ""
    status: str = ""

    def privacy_report(self) -> PrivacyReport:
        """The recorded report, deserialised."""
        return PrivacyReport.from_dict(self.report)

    def content(self) -> dict[str, Any]:
        """What the chain hashes: everything but the chain fields (and the view's status)."""
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "timestamp": self.timestamp,
            "label": self.label,
            "report": self.report,
        }
        for key in ("kind", "out", "settles", "note"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    def to_dict(self) -> dict[str, Any]:
        out = self.content()
        if self.hash:
            out.update(prev=self.prev, hash=self.hash)
        return out

    @classmethod
    def from_dict(cls, data: Any, *, chained: bool) -> LedgerEntry:
        """Parse strictly (every field has its type; chain fields in version-2 ledgers)."""
        if not isinstance(data, dict):
            raise ValueError("an entry is not a JSON object")
        run_id = data.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise ValueError("an entry has no run id")
        for key in ("timestamp", "label"):
            if not isinstance(data.get(key, "" if key == "label" else None), str):
                raise ValueError(f"entry {run_id!r}: {key!r} is not a string")
        if not isinstance(data.get("report"), dict):
            raise ValueError(f"entry {run_id!r}: 'report' is not a JSON object")
        extra = {key: data.get(key, "") for key in ("kind", "out", "settles", "note")}
        for key, value in extra.items():
            if not isinstance(value, str):
                raise ValueError(f"entry {run_id!r}: {key!r} is not a string")
        if extra["kind"] not in ENTRY_KINDS:
            raise ValueError(f"entry {run_id!r}: unknown kind {extra['kind']!r}")
        if not chained and any(extra.values()):
            raise ValueError(f"entry {run_id!r}: a version-1 ledger holds no reservations")
        prev = hash_ = ""
        if chained:
            prev, hash_ = data.get("prev"), data.get("hash")
            if not all(isinstance(h, str) and _HEX64.fullmatch(h) for h in (prev, hash_)):
                raise ValueError(f"entry {run_id!r}: missing or malformed chain hashes")
        return cls(
            run_id=run_id,
            timestamp=data["timestamp"],
            label=data.get("label", ""),
            report=data["report"],
            prev=prev,
            hash=hash_,
            **extra,
        )


def _entry_report(entry: LedgerEntry, unit: PrivacyUnit, relation: NeighbourRelation) -> Any:
    """The entry's report, refused unless it is a private guarantee for the ledger's unit."""
    report = entry.privacy_report()
    if report.unit is not unit or report.relation is not relation:
        raise ValueError(
            f"entry {entry.run_id!r} protects {report.unit.value} under "
            f"{report.relation.value}, not the ledger's {unit.value} under {relation.value}"
        )
    if not report.private or not (math.isfinite(report.epsilon) and report.epsilon >= 0):
        raise ValueError(f"entry {entry.run_id!r} is not a private run with a finite ε ≥ 0")
    if not (math.isfinite(report.delta) and 0.0 <= report.delta < 1.0):
        raise ValueError(f"entry {entry.run_id!r} has δ={report.delta} outside [0, 1)")
    if report.rho is not None and not (math.isfinite(report.rho) and report.rho >= 0):
        raise ValueError(f"entry {entry.run_id!r} has ρ={report.rho}, not finite ≥ 0")
    report.event  # noqa: B018 -- composes the releases' events: refuse a report without them
    return report


# -- the hash chain -------------------------------------------------------------------------------


def _canonical(value: Any) -> bytes:
    """Canonical JSON bytes of JSON-safe data (sorted keys, no spaces, no NaN/Infinity)."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def _genesis(header: Mapping[str, Any]) -> str:
    return hashlib.sha256(b"privrl.ledger.genesis\n" + _canonical(header)).hexdigest()


def _link(prev: str, entry: LedgerEntry) -> str:
    return hashlib.sha256(prev.encode() + b"\n" + _canonical(entry.content())).hexdigest()


# -- parsing --------------------------------------------------------------------------------------


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value}")
    return value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {value!r}")
    return value


@dataclass
class _State:
    """A parsed, validated ledger file."""

    version: int
    ledger_id: str | None  # None in version 1
    content_sha256: str | None  # None in version 1
    dataset_file: str
    dataset_sha256: str | None  # version 1 only: SHA-256 of the file's bytes
    dataset_size: int | None  # version 1 only
    unit: PrivacyUnit
    relation: NeighbourRelation
    backend: accounting.Backend
    epsilon_total: float
    delta: float
    created: str
    entries: list[LedgerEntry]
    reports: dict[str, PrivacyReport]
    genesis: str | None = None
    hashes: list[str] = field(default_factory=list)
    text: str = ""  # the file's text this state was parsed from ("" if unknown)
    settled: dict[str, str] = field(default_factory=dict)  # reservation id -> settling entry id

    def copy(self) -> _State:
        return replace(
            self,
            entries=list(self.entries),
            reports=dict(self.reports),
            hashes=list(self.hashes),
            settled=dict(self.settled),
        )

    def add(self, entry: LedgerEntry, report: PrivacyReport | None) -> None:
        """Append a parsed entry, refusing a settlement of anything but a pending reservation."""
        if entry.run_id in self.reports or entry.run_id in self.settled:
            raise ValueError(f"run id {entry.run_id!r} appears twice")
        if entry.kind in ("complete", "release"):
            target = next((e for e in self.entries if e.run_id == entry.settles), None)
            if target is None or target.kind != "reserve":
                raise ValueError(f"entry {entry.run_id!r} settles no reservation")
            if entry.settles in self.settled:
                raise ValueError(f"reservation {entry.settles!r} is settled twice")
            if entry.kind == "release" and not entry.note:
                raise ValueError(f"entry {entry.run_id!r} releases a reservation without a reason")
            self.settled[entry.settles] = entry.run_id
        if report is not None:
            self.reports[entry.run_id] = report
        self.entries.append(entry)

    @property
    def head(self) -> str | None:
        return self.hashes[-1] if self.hashes else self.genesis

    def header(self) -> dict[str, Any]:
        """The fields the genesis hash covers (the dataset's file name is only a hint)."""
        return {
            "format": LEDGER_FORMAT,
            "schema_version": self.version,
            "ledger_id": self.ledger_id,
            "content_sha256": self.content_sha256,
            "unit": self.unit.value,
            "relation": self.relation.value,
            "backend": self.backend,
            "budget": {"epsilon": self.epsilon_total, "delta": self.delta},
            "created": self.created,
        }


def _parse(
    path: Path, data: dict[str, Any], cache: Mapping[str, tuple[Any, PrivacyReport]]
) -> _State:
    """Validate a ledger file strictly and check its hash chain (all or nothing).

    `cache` maps run ids to (entry hash, report) of entries validated before: a report is
    reused only for the same chain hash (the chain check below re-hashes every entry's content,
    so an edit still fails) or, in version 1, for an identical report dict."""
    try:
        if data.get("format") != LEDGER_FORMAT:
            raise ValueError("not a privrl ledger (missing format tag)")
        version = data.get("schema_version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"bad schema version {version!r}")
        if version > SCHEMA_VERSION:
            raise ValueError(f"schema version {version} is newer than this privrl supports")
        dataset = data.get("dataset")
        if not isinstance(dataset, dict):
            raise ValueError("'dataset' is missing")
        ledger_id = content = sha = size = None
        if version == 1:
            sha = _text(dataset.get("sha256"), "dataset.sha256")
            if not _HEX64.fullmatch(sha):
                raise ValueError("dataset.sha256 is not a SHA-256 digest")
            size = dataset.get("size")
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ValueError("dataset.size must be a non-negative integer")
        else:
            ledger_id = _text(data.get("ledger_id"), "ledger_id")
            if not _HEX32.fullmatch(ledger_id):
                raise ValueError("ledger_id is malformed")
            content = _text(dataset.get("content_sha256"), "dataset.content_sha256")
            if not _HEX64.fullmatch(content):
                raise ValueError("dataset.content_sha256 is not a SHA-256 digest")
        backend = data.get("backend")
        if backend not in ("rdp", "pld"):
            raise ValueError(f"unknown backend {backend!r}")
        budget = data.get("budget")
        if not isinstance(budget, dict):
            raise ValueError("'budget' is missing")
        epsilon_total = _number(budget.get("epsilon"), "budget.epsilon")
        delta = _number(budget.get("delta"), "budget.delta")
        if epsilon_total <= 0:
            raise ValueError(f"budget.epsilon must be > 0, got {epsilon_total}")
        if not 0.0 <= delta < 1.0:
            raise ValueError(f"budget.delta must be in [0, 1), got {delta}")
        state = _State(
            version=version,
            ledger_id=ledger_id,
            content_sha256=content,
            dataset_file=_text(dataset.get("file"), "dataset.file"),
            dataset_sha256=sha,
            dataset_size=size,
            unit=parse_unit(_text(data.get("unit"), "unit")),
            relation=parse_relation(_text(data.get("relation"), "relation")),
            backend=backend,
            epsilon_total=epsilon_total,
            delta=delta,
            created=_text(data.get("created", ""), "created"),
            entries=[],
            reports={},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise LedgerError(f"ledger {path} is not a valid privrl ledger: {exc}") from None
    try:
        raw = data.get("entries")
        if not isinstance(raw, list):
            raise ValueError("'entries' is not a list")
        for item in raw:
            entry = LedgerEntry.from_dict(item, chained=version >= 2)
            report = None
            if entry.kind != "release":  # a release carries no spend, hence no report
                key, cached = cache.get(entry.run_id, (None, None))
                reuse = cached is not None and key == (entry.hash or entry.report)
                report = cached if reuse else _entry_report(entry, state.unit, state.relation)
            state.add(entry, report)
    except (KeyError, TypeError, ValueError, accounting.AccountingError) as exc:
        raise LedgerError(f"ledger {path} has an invalid entry: {exc}") from None
    if version >= 2:
        _check_chain(path, data, state)
    return state


def _check_chain(path: Path, data: dict[str, Any], state: _State) -> None:
    chain = data.get("chain")
    if not isinstance(chain, dict):
        raise _tampered(path, "its hash chain is missing")
    state.genesis = _genesis(state.header())
    if chain.get("genesis") != state.genesis:
        raise _tampered(path, "its header (budget, unit, relation, backend or dataset) was edited")
    prev = state.genesis
    for i, entry in enumerate(state.entries, start=1):
        if entry.prev != prev:
            raise _tampered(path, f"entry {i} ({entry.run_id}) does not follow the entry before it")
        prev = _link(prev, entry)
        if entry.hash != prev:
            raise _tampered(path, f"entry {i} ({entry.run_id}) was edited")
        state.hashes.append(prev)
    if chain.get("head") != prev or chain.get("length") != len(state.entries):
        raise _tampered(path, "recorded runs were removed")


# -- the ledger -----------------------------------------------------------------------------------


def fingerprint(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex digest of a file's bytes, streamed (binds version-1 ledgers)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def default_ledger_path(dataset_path: str | os.PathLike[str]) -> Path:
    """`<dataset>.ledger.json`, next to the dataset file."""
    p = Path(dataset_path)
    return p.with_name(p.name + LEDGER_SUFFIX)


def ledgered(dataset_path: str | os.PathLike[str]) -> str | None:
    """Why a file's budget is bound to a ledger (to refuse overwriting it), or None.

    A file is ledgered if a ledger sits next to it, if it carries the `privrl_ledger` mark, or if
    the registry knows a ledger for its episodes.
    """
    path = Path(dataset_path)
    sidecar = default_ledger_path(path)
    if os.path.lexists(sidecar):
        return f"it has a privacy ledger at {sidecar}"
    try:
        ident = dataset_identity(path)
    except LedgerError:
        return None
    if ident.mark is not None:
        return f"it is bound to the privacy ledger id {ident.mark['ledger_id'][:12]}…"
    entry = _read_registry(ident.content_sha256)
    if entry is not None:
        return f"its episodes have a privacy ledger at {entry.ledger} (found in the registry)"
    return None


@dataclass
class Spend:
    """A reservation held by `BudgetLedger.spend`; `complete(report)` settles it."""

    ledger: BudgetLedger
    run_id: str
    entry: LedgerEntry | None = None

    def complete(self, report: PrivacyReport) -> LedgerEntry:
        """Settle the reservation with the call's final report (see `BudgetLedger.complete`)."""
        if self.entry is not None:
            raise LedgerError(f"the reservation {self.run_id} is already completed")
        self.entry = self.ledger.complete(self.run_id, report)
        return self.entry


class BudgetLedger:
    """The privacy budget of one dataset's episodes and every spend recorded against it.

    Create with `init`, open with `load` or `for_dataset`. Reads (`entries`, `spent`,
    `check`, ...) re-read the file, re-check its hash chain and the registry, so they see runs
    recorded by other processes and refuse a ledger edited meanwhile; `record` is atomic and
    safe against concurrent writers in other processes.
    """

    def __init__(self, path: Path, data: dict[str, Any], *, text: str = "") -> None:
        self.path = Path(path)
        self._reports: dict[str, PrivacyReport] = {}
        self._cache: dict[str, tuple[Any, PrivacyReport]] = {}
        self._dataset_seen: Path | None = None
        state = _parse(self.path, data, {})
        state.text = text
        self._take(state)

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def init(
        cls,
        dataset_path: str | os.PathLike[str],
        *,
        epsilon: float,
        delta: float,
        unit: PrivacyUnit | str,
        relation: NeighbourRelation | str,
        backend: accounting.Backend = "rdp",
        ledger_path: str | os.PathLike[str] | None = None,
        overwrite: bool = False,
    ) -> BudgetLedger:
        """Create the ledger of a dataset's episodes with total budget (ε_total, δ).

        Refuses a file that is not a privrl dataset, and episodes that already have a ledger
        (next to this file, in the registry, or named by the file's mark: copies share one
        budget) unless `overwrite` — which forgets every recorded spend, so is only right for a
        genuinely new dataset. Hashes the arrays (O(size)), registers the ledger and marks the
        dataset file with the `privrl_ledger` attribute.
        """
        dataset = Path(dataset_path)
        for name, problem in (
            ("epsilon", limits.epsilon_problem(epsilon)),
            ("delta", limits.delta_problem(delta)),
        ):
            if problem is not None:  # the range every budget is held to (privacy.limits)
                raise LedgerError(f"the ledger's total {name} {problem}")
        epsilon, delta = float(epsilon), float(delta)
        if backend not in ("rdp", "pld"):
            raise LedgerError(f"unknown accountant backend {backend!r}; expected 'rdp' or 'pld'")
        ident = dataset_identity(dataset, recompute=True)
        path = Path(ledger_path) if ledger_path is not None else default_ledger_path(dataset)
        if path.is_dir() or _lock_path(path).is_dir():
            raise LedgerError(f"cannot create the ledger {path}: it (or its .lock) is a directory")
        if not overwrite:
            cls._refuse_second_ledger(ident, path)
        state = _State(
            version=SCHEMA_VERSION,
            ledger_id=uuid.uuid4().hex,
            content_sha256=ident.content_sha256,
            dataset_file=Path(os.path.relpath(dataset.resolve(), path.parent.resolve())).as_posix(),
            dataset_sha256=None,
            dataset_size=None,
            unit=parse_unit(unit),
            relation=parse_relation(relation),
            backend=backend,
            epsilon_total=epsilon,
            delta=delta,
            created=utc_now(),
            entries=[],
            reports={},
        )
        state.genesis = _genesis(state.header())
        data = _to_json(state)
        mark = {
            "ledger_id": state.ledger_id,
            "content_sha256": state.content_sha256,
            "genesis": state.genesis,
            "created": state.created,
            "ledger": os.path.relpath(path.resolve(), dataset.resolve().parent),
        }
        # Mark the dataset first: if that fails (read-only file), nothing else has changed.
        old_mark = _read_mark(dataset)
        _write_attrs(dataset, {MARK_ATTR: json.dumps(mark), CONTENT_ATTR: ident.content_sha256})
        try:
            with _locked(path):
                if os.path.lexists(path) and not overwrite:
                    raise LedgerError(
                        f"a ledger already exists at {path}; it records the spends on this "
                        "dataset, so it is kept (pass overwrite=True only for a new dataset)"
                    )
                _remove_stale_temps(path)
                _atomic_write_json(path, data)
        except BaseException:
            with contextlib.suppress(LedgerError):
                _write_attrs(
                    dataset, {MARK_ATTR: None if old_mark is None else json.dumps(old_mark)}
                )
            raise
        ledger = cls(path, data)
        ledger._register(seen=dataset, replace_other=True)
        return ledger

    @staticmethod
    def _refuse_second_ledger(ident: DatasetIdentity, path: Path) -> None:
        if os.path.lexists(path):
            raise LedgerError(
                f"a ledger already exists at {path}; it records the spends on this dataset, so "
                "it is kept (pass overwrite=True / --force only for a new dataset)"
            )
        entry = _read_registry(ident.content_sha256)
        if entry is not None and os.path.lexists(entry.ledger):
            raise LedgerError(
                f"the episodes of {ident.path} already have a privacy ledger at {entry.ledger} "
                "(a copy or re-export of a ledgered dataset shares its budget); use that ledger"
            )
        lost = entry.ledger_id if entry is not None else None
        if ident.mark is not None:
            lost = ident.mark["ledger_id"]
        if lost is not None:
            raise LedgerError(
                f"{ident.path} is bound to a privacy ledger (id {lost[:12]}…) that was not found; "
                "restore it, or pass overwrite=True / --force to start a new budget (this "
                "forgets every spend recorded on these episodes)"
            )

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        dataset_path: str | os.PathLike[str] | None = None,
        verify: bool = True,
    ) -> BudgetLedger:
        """Open a ledger file (strict schema, hash chain and registry head are always checked);
        with `verify`, also `verify` the dataset (recomputing its content fingerprint).

        The dataset is `dataset_path` if given, else the file recorded in the ledger (relative
        to the ledger's directory). A missing or different dataset raises LedgerError.
        """
        ledger = cls._open(Path(path))
        if verify:
            ledger.verify(dataset_path)
        return ledger

    @classmethod
    def _open(cls, path: Path) -> BudgetLedger:
        text = _read_text(path)
        ledger = cls(path, _decode(path, text), text=text)
        if ledger.schema_version < SCHEMA_VERSION:
            warnings.warn(
                f"ledger {path} is a version-{ledger.schema_version} ledger (bound to the file's "
                "bytes, without tamper evidence); the next recorded run upgrades it to version "
                f"{SCHEMA_VERSION}",
                UserWarning,
                stacklevel=3,
            )
        ledger._check_registry()
        return ledger

    @classmethod
    def for_dataset(
        cls,
        dataset_path: str | os.PathLike[str],
        *,
        ledger_path: str | os.PathLike[str] | None = None,
        verify: bool = True,
    ) -> BudgetLedger | None:
        """The ledger of a dataset's episodes, or None if they have none.

        Looks at `ledger_path` if given, else `<file>.ledger.json`, else the registry (by the
        content fingerprint stored in the file). A file marked as ledgered whose ledger is
        found nowhere is refused. With `verify` (the fast check before a run; see the module
        docstring) the file's stored fingerprint and mark must match the ledger. A file that
        is not a privrl dataset and has no ledger next to it gives None.
        """
        dataset = Path(dataset_path)
        ident: DatasetIdentity | None
        if ledger_path is not None:
            try:
                ident = dataset_identity(dataset)
            except LedgerError:
                ident = None
            ledger = cls._open(Path(ledger_path))
            ledger._bind(dataset, ident, verify=verify)
            return ledger
        sidecar = default_ledger_path(dataset)
        try:
            ident = dataset_identity(dataset)
        except LedgerError:
            if not os.path.lexists(sidecar):
                return None
            ident = None
        if os.path.lexists(sidecar):
            ledger = cls._open(sidecar)
        else:
            assert ident is not None
            entry = _read_registry(ident.content_sha256)
            if entry is not None and os.path.lexists(entry.ledger):
                ledger = cls._open(entry.ledger)
            elif entry is not None or ident.mark is not None:
                cls._refuse_lost(ident, entry)
            else:
                return None
        ledger._bind(dataset, ident, verify=verify)
        return ledger

    @staticmethod
    def _refuse_lost(ident: DatasetIdentity, entry: RegistryEntry | None) -> None:
        ledger_id = (ident.mark or {}).get("ledger_id") or (entry and entry.ledger_id) or ""
        places = [default_ledger_path(ident.path)]
        if ident.mark is not None:
            places.append(ident.path.parent / ident.mark["ledger"])
        if entry is not None:
            places.append(entry.ledger)
        where = ", ".join(dict.fromkeys(str(p.resolve()) for p in places))
        raise LedgerError(
            f"this dataset is bound to a privacy ledger (id {ledger_id[:12]}…) that was not "
            f"found at {where} or in the registry {registry_dir()}; restore the ledger (e.g. "
            f"next to the dataset as {default_ledger_path(ident.path).name}) — a run without it "
            "could overspend the dataset's budget"
        )

    def _bind(self, dataset: Path, ident: DatasetIdentity | None, *, verify: bool) -> None:
        """The fast check before a run: the file's stored fingerprint and mark match."""
        if self.schema_version == 1:
            if verify:
                self._verify_file_bytes(dataset)
            self._dataset_seen = dataset
            return
        if ident is None:
            raise LedgerError(
                f"{dataset} is not a privrl dataset, but the ledger {self.path} belongs to the "
                "episodes of one; this is another dataset's ledger"
            )
        if not verify:
            return
        self._match(ident)
        self._dataset_seen = dataset
        self._register(seen=dataset)

    def _match(self, ident: DatasetIdentity) -> None:
        if ident.content_sha256 != self.content_sha256:
            raise LedgerError(
                f"ledger {self.path} belongs to other episodes than those in {ident.path} (their "
                "content fingerprints differ); the file was modified or this is another "
                "dataset's ledger, so its budget cannot be applied"
            )
        mark = ident.mark
        if mark is None:
            return
        if mark["ledger_id"] != self.ledger_id:
            raise LedgerError(
                f"{ident.path} is bound to the privacy ledger id {mark['ledger_id'][:12]}…, but "
                f"the ledger found for it ({self.path}) is id {self.ledger_id[:12]}…; restore the "
                f"dataset's own ledger (it was at {ident.path.parent / mark['ledger']})"
            )
        if mark["genesis"] != self.genesis:
            raise _tampered(
                self.path, "its header differs from the one the dataset was marked with"
            )
        if mark["content_sha256"] != ident.content_sha256:
            raise LedgerError(
                f"{ident.path}: its stored fingerprint changed after `ledger init`; the file was "
                "modified outside privrl, so its ledger cannot vouch for it"
            )

    def verify(self, dataset_path: str | os.PathLike[str] | None = None) -> None:
        """Full check: the ledger's chain and registry head, and the dataset's episodes, by
        recomputing their fingerprint from the arrays (O(file size)). Raises LedgerError."""
        self.reload()
        dataset = Path(dataset_path) if dataset_path is not None else self.dataset_path
        if not dataset.is_file():
            raise LedgerError(
                f"the dataset {dataset} of ledger {self.path} was not found; pass the dataset "
                "path explicitly (or verify=False to inspect the ledger only)"
            )
        if self.schema_version == 1:
            self._verify_file_bytes(dataset)
            return
        ident = dataset_identity(dataset, recompute=True)
        if ident.stored is not None and ident.stored != ident.content_sha256:
            raise LedgerError(
                f"the episodes in {dataset} do not match its stored fingerprint (attribute "
                f"{CONTENT_ATTR}): the file was modified after it was written, so its ledger "
                "cannot vouch for it"
            )
        self._match(ident)

    verify_dataset = verify  # the name used before content fingerprints

    def _verify_file_bytes(self, dataset: Path) -> None:
        """Version-1 binding: the file's SHA-256 and size."""
        if not dataset.is_file():
            raise LedgerError(f"the dataset {dataset} of ledger {self.path} was not found")
        size = dataset.stat().st_size
        digest = fingerprint(dataset) if size == self.dataset_size else None
        if digest != self.dataset_sha256:
            raise LedgerError(
                f"ledger {self.path} (version 1) belongs to another file than {dataset} (their "
                "SHA-256 differ); the file was modified or this is another dataset's ledger, so "
                "its budget cannot be applied"
            )

    # -- state ------------------------------------------------------------------------------

    def _take(self, state: _State) -> None:
        self._state = state
        self.schema_version: int = state.version
        self.ledger_id: str | None = state.ledger_id
        self.content_sha256: str | None = state.content_sha256
        self.dataset_file: str = state.dataset_file
        self.dataset_sha256: str | None = state.dataset_sha256
        self.dataset_size: int | None = state.dataset_size
        self.unit: PrivacyUnit = state.unit
        self.relation: NeighbourRelation = state.relation
        self.backend: accounting.Backend = state.backend
        self.epsilon_total: float = state.epsilon_total
        self.delta: float = state.delta
        self.created: str = state.created
        self.genesis: str | None = state.genesis
        self._entries = list(state.entries)
        self._reports = dict(state.reports)
        self._cache = {
            e.run_id: (e.hash or e.report, state.reports[e.run_id])
            for e in state.entries
            if e.run_id in state.reports
        }

    def _load_state(self) -> _State:
        """The ledger as on disk now: parsed and checked, or (same text as last time) reused."""
        text = _read_text(self.path)
        if text and text == self._state.text:
            return self._state.copy()
        state = _parse(self.path, _decode(self.path, text), self._cache)
        state.text = text
        return state

    def _adopt(self, state: _State) -> None:
        """Take a freshly read on-disk state, refusing one bound to another dataset/budget."""
        fields = ("unit", "relation", "backend", "epsilon_total", "delta")
        same = all(getattr(state, k) == getattr(self._state, k) for k in fields)
        if self._state.version == state.version:
            keys = ("ledger_id", "content_sha256", "dataset_sha256", "genesis")
            same = same and all(getattr(state, k) == getattr(self._state, k) for k in keys)
        elif self._state.version > state.version:
            same = False  # a version-2 ledger never goes back to version 1
        if not same:
            raise LedgerError(
                f"ledger {self.path} was re-initialised on disk (different dataset or budget) "
                "since it was opened; open it again"
            )
        self._take(state)

    def reload(self) -> None:
        """Re-read the ledger from disk (another process may have recorded a run since) and
        check it against the registry."""
        self._adopt(self._load_state())
        self._check_registry()

    @property
    def head(self) -> str | None:
        """The hash-chain head: the hash of the last entry (the genesis hash when empty)."""
        return self._state.head

    @property
    def dataset_path(self) -> Path:
        """The dataset file, as recorded relative to the ledger's directory."""
        return self.path.parent / self.dataset_file

    def known_files(self) -> list[str]:
        """Files known to hold this ledger's episodes (seen by `init` and by runs)."""
        if self.content_sha256 is not None:
            entry = _read_registry(self.content_sha256)
            if entry is not None and entry.ledger_id == self.ledger_id and entry.files:
                return list(entry.files)
        return [str(self.dataset_path)]

    def to_dict(self) -> dict[str, Any]:
        """The ledger file's content plus the composed spend and the files known to map to it
        (for `privrl ledger show --json`)."""
        data = _read(self.path)
        data["spent"] = {"epsilon": self.spent(), "delta": self.delta}
        data["runs"] = [
            {
                "run_id": view.run_id,
                "timestamp": view.timestamp,
                "label": view.label,
                "status": view.status,
                "out": view.out or None,
                "epsilon": view.report.get("epsilon") if view.report else None,
                **({"note": view.note} if view.note else {}),
            }
            for view, _ in self._runs()
        ]
        data["remaining_epsilon"] = self.remaining()
        data["files"] = self.known_files()
        return json_safe(data)

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        """Every run, oldest first, one entry each (`LedgerEntry.status`): a completed spend
        (its final report), a reservation whose outcome is unknown (its planned report, which
        counts), or a released reservation (which does not)."""
        self.reload()
        return tuple(view for view, _ in self._runs())

    @property
    def records(self) -> tuple[LedgerEntry, ...]:
        """The hash chain's entries as written (reservations and their settlements apart)."""
        self.reload()
        return tuple(self._entries)

    def pending(self, out: str | os.PathLike[str] | None = None) -> tuple[LedgerEntry, ...]:
        """The reservations not settled yet (optionally only those of the run directory
        `out`): runs in progress, or runs that died with their outcome unknown."""
        self.reload()
        where = None if out is None else _out_key(out)
        return tuple(
            view
            for view, _ in self._runs()
            if view.status == RESERVED and (where is None or view.out == where)
        )

    def _runs(self) -> list[tuple[LedgerEntry, str | None]]:
        """(per-run view, id of the report that counts for it or None) for every run."""
        by_id = {e.run_id: e for e in self._entries}
        runs: list[tuple[LedgerEntry, str | None]] = []
        for entry in self._entries:
            if entry.kind == "":
                runs.append((replace(entry, status=COMPLETE), entry.run_id))
            elif entry.kind == "reserve":
                settle = by_id.get(self._state.settled.get(entry.run_id, ""))
                if settle is None:
                    runs.append((replace(entry, status=RESERVED), entry.run_id))
                elif settle.kind == "complete":
                    view = replace(entry, report=settle.report, status=COMPLETE)
                    runs.append((view, settle.run_id))
                else:
                    runs.append((replace(entry, status=RELEASED, note=settle.note), None))
        return runs

    # -- the registry -----------------------------------------------------------------------

    def _registry_state(self, entry: RegistryEntry | None) -> str | None:
        """Why the registry entry contradicts this ledger (None if it does not)."""
        if entry is None:
            return None
        if entry.ledger_id != self.ledger_id:
            return "other"
        if entry.genesis != self.genesis:
            return "its header differs from the registered one"
        hashes = self._state.hashes
        seen = self.genesis if entry.length == 0 else None
        if 0 < entry.length <= len(hashes):
            seen = hashes[entry.length - 1]
        if seen != entry.head:
            return (
                f"the registry saw {entry.length} recorded run(s), the ledger holds "
                f"{len(hashes)} that do not extend them: recorded runs were removed or rewritten"
            )
        return None

    def _check_registry(self, *, locked: bool = False) -> RegistryEntry | None:
        """Refuse a ledger that the registry shows truncated, rewritten, another ledger of the
        same episodes, or a copy of the registered one. Under the ledger's lock (`locked`), the
        file on disk is final; otherwise a registry ahead of us triggers one re-read first (the
        registry is written after the ledger, so a re-read catches up with another writer)."""
        if self.content_sha256 is None:
            return None
        entry = _read_registry(self.content_sha256)
        problem = self._registry_state(entry)
        if problem is not None and problem != "other" and not locked:
            self._adopt(self._load_state())
            problem = self._registry_state(entry)
        if problem == "other":
            assert entry is not None
            raise LedgerError(
                f"the registry {registry_dir()} binds these episodes to another ledger (id "
                f"{entry.ledger_id[:12]}… at {entry.ledger}), not to {self.path} (id "
                f"{(self.ledger_id or '')[:12]}…); a dataset has one budget: use that ledger"
            )
        if problem is not None:
            raise _tampered(self.path, problem)
        if entry is not None and not _same_file(entry.ledger, self.path):
            if os.path.lexists(entry.ledger):
                raise LedgerError(
                    f"{self.path} is a copy of the ledger {entry.ledger}: a copy would spend the "
                    f"same budget twice; use {entry.ledger} and delete the copy"
                )
        return entry

    def _register(self, *, seen: Path | None = None, replace_other: bool = False) -> None:
        """Record this ledger (location, chain head, a file seen with it) in the registry."""
        if self.content_sha256 is None or self.ledger_id is None or self.genesis is None:
            return
        head, length = self.head or self.genesis, len(self._entries)
        me = self.path.resolve()

        def change(current: RegistryEntry | None) -> RegistryEntry | None:
            if current is None or (replace_other and current.ledger_id != self.ledger_id):
                return RegistryEntry(
                    self.content_sha256,  # type: ignore[arg-type]
                    me,
                    self.ledger_id,  # type: ignore[arg-type]
                    self.genesis,  # type: ignore[arg-type]
                    head,
                    length,
                    _with_file((), seen),
                )
            if current.ledger_id != self.ledger_id:
                return None  # another ledger's entry (refused by _check_registry before)
            # A registry ahead of this handle (another process recorded since) keeps its head.
            ahead = current.length > length
            return replace(
                current,
                ledger=current.ledger if _same_file(current.ledger, me) else me,
                head=current.head if ahead else head,
                length=current.length if ahead else length,
                files=_with_file(current.files, seen),
            )

        entry = _read_registry(self.content_sha256)
        if (
            entry is not None
            and entry.ledger_id == self.ledger_id
            and entry.length == length
            and entry.head == head
            and _same_file(entry.ledger, me)
            and (seen is None or str(seen.resolve()) in entry.files)
        ):
            return  # nothing new: no write on the common path of a run
        _update_registry(self.content_sha256, change)

    # -- accounting -------------------------------------------------------------------------

    def _validate(self, report: PrivacyReport) -> None:
        if report.unit is not self.unit or report.relation is not self.relation:
            raise LedgerError(
                f"the run protects {report.unit.value} under {report.relation.value}, but the "
                f"dataset's ledger accounts {self.unit.value} under {self.relation.value}; "
                "run with the ledger's unit and relation"
            )

    def _epsilon(self, events: list[dp_event.DpEvent]) -> float:
        if not events:
            return 0.0
        return float(
            accounting.epsilon(
                dp_event.ComposedDpEvent(events),
                self.delta,
                relation=self.relation,
                backend=self.backend,
            )
        )

    def _composable(self, spend: _Spend) -> dp_event.DpEvent:
        """The run's event, or its stated (ε, δ) as ApproxDpEvent if the backend can't take it."""
        try:
            accounting.check_supported(spend.event, relation=self.relation, backend=self.backend)
        except accounting.AccountingError:
            if spend.fallback is None:
                raise
            return spend.fallback
        return spend.event

    def _spend(self, spends: list[_Spend]) -> float:
        """ε at the ledger's δ of the composition of `spends` (with per-run fallback)."""
        try:
            return self._epsilon([self._composable(s) for s in spends])
        except accounting.AccountingError as exc:
            raise LedgerError(
                f"the ledger's {self.backend.upper()} accountant cannot compose these runs at "
                f"δ={fmt_number(self.delta)}: {exc} (a run whose events this backend cannot "
                "account enters as its own (ε, δ), and those δ's must sum below the ledger's δ: "
                "state such runs at a smaller δ)"
            ) from exc

    def _recorded(self) -> list[_Spend]:
        """The spends that count: every completed run and every unsettled reservation."""
        return [_Spend.of(self._reports[rid]) for _, rid in self._runs() if rid is not None]

    def _as_spend(self, run: PrivacyReport | dp_event.DpEvent) -> _Spend:
        if isinstance(run, PrivacyReport):
            self._validate(run)
            return _Spend.of(run)
        if isinstance(run, dp_event.DpEvent):
            # A bare event is taken to be stated under the ledger's unit and relation.
            return _Spend(event=run, fallback=None, private=True)
        raise TypeError(f"expected a PrivacyReport or DpEvent, got {type(run).__name__}")

    def spent(self) -> float:
        """ε at the ledger's δ for the composition of every recorded run (by the accountant)."""
        self.reload()
        return self._spend(self._recorded())

    def remaining(self) -> float:
        """ε_total − spent, for display (composition is not additive: use `check` to decide)."""
        return self.epsilon_total - self.spent()

    def would_spend(self, run: PrivacyReport | dp_event.DpEvent) -> float:
        """ε at the ledger's δ of every recorded run composed with `run` (∞ if not private)."""
        self.reload()
        new = self._as_spend(run)
        if not new.private:
            return math.inf
        return self._spend([*self._recorded(), new])

    def check(self, run: PrivacyReport | dp_event.DpEvent) -> None:
        """Raise BudgetExceededError if `run` would take the composed spend above ε_total."""
        self.reload()
        self._check(self._as_spend(run))

    def _check(self, new: _Spend) -> float:
        recorded = self._recorded()
        if new.private:
            total = self._spend([*recorded, new])
            if total <= self.epsilon_total:
                return total
        spent = self._spend(recorded)
        left = self.epsilon_total - spent
        at = f"at δ={fmt_number(self.delta)}"
        budget = (
            f"the ledger has ε={fmt_number(left, 4)} left of its budget "
            f"ε_total={fmt_number(self.epsilon_total, 4)} {at} (ε={fmt_number(spent, 4)} spent)"
        )
        if not new.private:
            raise BudgetExceededError(
                "The dataset's ledger refuses this run: it is not differentially private (ε=∞) "
                f"and would void the budget, and {budget}; run a private variant of the command "
                "(a finite ε, certified accounting) or use data without a ledger."
            )
        alone = self._spend([new])
        fallback = [s.fallback for s in [*recorded, new] if self._composable(s) is not s.event]
        hint = ""
        if fallback and math.isinf(total):
            used = math.fsum(f.delta for f in fallback if f is not None)
            hint = (
                f"; {len(fallback)} run(s) the {self.backend.upper()} backend cannot account "
                f"enter as their own (ε, δ) and use δ={fmt_number(used)} of the ledger's "
                f"δ={fmt_number(self.delta)}, so state such runs at a smaller δ"
            )
        raise BudgetExceededError(
            f"The dataset's ledger refuses this run: this run needs ε={fmt_number(alone, 4)} {at}, "
            f"{budget}, and composed with the {len(recorded)} recorded run(s) it would reach "
            f"ε={fmt_number(total, 4)}, "
            f"above ε_total={fmt_number(self.epsilon_total, 4)}; lower this run's budget (a "
            f"smaller ε, more noise or fewer steps) or use data not yet spent on{hint}."
        )

    # -- writing ----------------------------------------------------------------------------

    def record(
        self, report: PrivacyReport, label: str = "", *, run_id: str | None = None
    ) -> LedgerEntry:
        """Append a completed spend in one write, atomically and safely against concurrent
        writers (for a report whose release is not published yet; a run that reads private
        data uses `reserve` before reading and `complete` after publishing instead).

        Under an exclusive lock: re-read and re-check the ledger (chain and registry), refuse a
        duplicate run id or an overspend (BudgetExceededError), write a fsynced temp file and
        rename it over the ledger, then advance the registry's head. The spend is durable when
        this returns. A version-1 ledger is migrated to version 2 in the same write.
        """
        report = self._checked_report(report)
        entry = LedgerEntry(run_id or new_run_id(), utc_now(), str(label), report.to_dict())
        return self._append(entry, report, lambda: self._check(_Spend.of(report)))

    def reserve(
        self,
        report: PrivacyReport,
        label: str = "",
        *,
        out: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
    ) -> LedgerEntry:
        """Reserve a run's planned spend before it reads the data: a pending entry that counts
        against the budget from the moment this returns (fail closed: a run that dies later
        keeps counting until `complete` or `release` settles it). Refused like `record`
        (BudgetExceededError) if the planned report does not fit. `out`: the run directory
        the release will be published in (shown by `privrl ledger show`, used by `release`
        and by a resumed run to find its reservation)."""
        report = self._checked_report(report)
        entry = LedgerEntry(
            run_id or new_run_id(),
            utc_now(),
            str(label),
            report.to_dict(),
            kind="reserve",
            out="" if out is None else _out_key(out),
        )
        return self._append(entry, report, lambda: self._check(_Spend.of(report)))

    def complete(self, run_id: str, report: PrivacyReport | None = None) -> LedgerEntry:
        """Settle the reservation `run_id` as spent, with the run's final report (default: the
        reserved one), which counts instead of the planned report from then on. Refused if the
        reservation is not pending, the report is not a private guarantee, or the final report
        would take the spend above both the budget and what is counted now
        (`check_complete`)."""

        def check() -> None:
            self._check_complete(run_id, self._final(run_id, report))

        self.reload()
        reserved = self._pending_or_raise(run_id)
        final = self._final(run_id, report)
        entry = LedgerEntry(
            f"{run_id}.complete",
            utc_now(),
            reserved.label,
            final.to_dict(),
            kind="complete",
            settles=run_id,
        )
        return self._append(entry, final, check)

    @contextlib.contextmanager
    def spend(
        self, planned: PrivacyReport, *, content_sha256: str, label: str = ""
    ) -> Iterator[Spend]:
        """A library call as a ledger transaction: reserve → compute → complete.

        The Python API's form of the run layer's transaction (there, the run directory is
        published between the two): `planned` is reserved before the body runs, so the body
        may read the private episodes; the body hands its final report to `Spend.complete`,
        which settles the reservation with it. `content_sha256` is the fingerprint of the
        episodes the body will read (`privrl.data.episodes_sha256`); a ledger of other
        episodes is refused before anything is reserved.

        Fail closed: if the body raises, or returns without calling `Spend.complete`, the
        reservation keeps counting (the data may have been read) and the exception is
        raised unchanged; `privrl ledger settle` or `release` settles it.
        """
        if content_sha256 != self.content_sha256:
            raise LedgerError(
                f"the ledger {self.path} belongs to other episodes (fingerprint "
                f"{self.content_sha256}); these have {content_sha256}"
            )
        reservation = self.reserve(planned, label)
        spend = Spend(self, reservation.run_id)
        yield spend
        if spend.entry is None:
            raise LedgerError(
                f"the reservation {reservation.run_id} was not completed (the call returned "
                "without a final report); it keeps counting"
            )

    def check_complete(self, run_id: str, report: PrivacyReport) -> None:
        """Raise (LedgerError, BudgetExceededError) if `complete(run_id, report)` would be
        refused now; writes nothing. The run layer calls it before it publishes."""
        self.reload()
        self._check_complete(run_id, self._final(run_id, report))

    def release(self, run_id: str, reason: str) -> LedgerEntry:
        """Settle the reservation `run_id` as never published: it stops counting. Only right
        when nothing derived from the data by that run was ever published or kept (the data
        holder states why in `reason`, which the ledger keeps); if in doubt, `complete` it.
        Refused unless the reservation is pending."""
        reason = str(reason).strip()
        if not reason:
            raise LedgerError("releasing a reservation needs a reason (why it was never published)")
        self.reload()
        self._pending_or_raise(run_id)
        entry = LedgerEntry(
            f"{run_id}.release", utc_now(), "", {}, kind="release", settles=run_id, note=reason
        )
        return self._append(entry, None, lambda: self._pending_or_raise(run_id))

    def _checked_report(self, report: PrivacyReport) -> PrivacyReport:
        if not isinstance(report, PrivacyReport):
            raise TypeError(f"expected a PrivacyReport, got {type(report).__name__}")
        self._validate(report)
        return report

    def _pending_or_raise(self, run_id: str) -> LedgerEntry:
        """The pending reservation `run_id` (in the state as last read)."""
        for view, _ in self._runs():
            if view.run_id == run_id and view.kind == "reserve":
                if view.status != RESERVED:
                    raise LedgerError(
                        f"the reservation {run_id} in {self.path} is already settled "
                        f"({view.status})"
                    )
                return view
        raise LedgerError(f"no reservation {run_id!r} in {self.path} (see `privrl ledger show`)")

    def _final(self, run_id: str, report: PrivacyReport | None) -> PrivacyReport:
        reserved = self._pending_or_raise(run_id)
        final = self._reports[reserved.run_id] if report is None else report
        final = self._checked_report(final)
        if not final.private or not math.isfinite(final.epsilon):
            raise LedgerError(
                "The dataset's ledger refuses this run: its guarantee could not be certified "
                "(ε=∞), so it would void the ledger's budget "
                f"ε_total={self.epsilon_total:g} at δ={self.delta:g}; nothing is published and "
                f"its reservation {run_id} keeps counting (the data were read); rerun with a "
                "certified configuration (such as Poisson sampling or the exact accountant) or "
                "on data without a ledger."
            )
        return final

    def _check_complete(self, run_id: str, final: PrivacyReport) -> None:
        """Completing may not raise the counted spend above both the budget and its value now
        (a final report within the reservation always passes)."""
        counted = [(view.run_id, rid) for view, rid in self._runs() if rid is not None]
        spends = [_Spend.of(final if vid == run_id else self._reports[rid]) for vid, rid in counted]
        total, now = self._spend(spends), self._spend(self._recorded())
        if total <= self.epsilon_total or total <= now:
            return
        raise BudgetExceededError(
            f"The dataset's ledger refuses this run: its final report needs more than it "
            f"reserved, and the spend would reach ε={fmt_number(total, 4)} above "
            f"ε_total={fmt_number(self.epsilon_total, 4)} at δ={fmt_number(self.delta)}; its "
            f"reservation {run_id} keeps counting and its outputs are withdrawn."
        )

    def _append(
        self, entry: LedgerEntry, report: PrivacyReport | None, check: Callable[[], Any]
    ) -> LedgerEntry:
        """Write `entry` at the end of the chain under the lock, after `check()` passed on the
        ledger as it is on disk now."""
        migrated = False
        with _locked(self.path):
            state = self._load_state()
            if state.version == 1:
                state = self._migrate(state)
                migrated = True
            self._adopt(state)
            self._check_registry(locked=True)
            if any(e.run_id == entry.run_id for e in self._entries):
                raise LedgerError(f"run id {entry.run_id!r} is already recorded in {self.path}")
            check()
            prev = self.head
            assert prev is not None
            entry = replace(entry, prev=prev, hash=_link(prev, entry))
            state = state.copy()  # `self` keeps the old state until the write has succeeded
            try:
                state.add(entry, report)
            except ValueError as exc:
                raise LedgerError(f"cannot write to {self.path}: {exc}") from None
            state.hashes.append(entry.hash)
            _remove_stale_temps(self.path)
            state.text = _atomic_write_json(self.path, _to_json(state))
            self._take(state)
            self._register(seen=self._dataset_seen)
        if migrated:
            self._mark_migrated()
        return entry

    def _migrate(self, state: _State) -> _State:
        """A version-1 state as version 2: a new id, the content fingerprint, a chain over the
        entries as they are now. Called under the lock, before the first version-2 write."""
        dataset = self._dataset_seen or (self.path.parent / state.dataset_file)
        self._verify_file_bytes(dataset)  # the version-1 binding, checked one last time
        ident = dataset_identity(dataset, recompute=True)
        new = replace(
            state,
            version=SCHEMA_VERSION,
            ledger_id=uuid.uuid4().hex,
            content_sha256=ident.content_sha256,
            dataset_sha256=None,
            dataset_size=None,
            entries=[],
            hashes=[],
        )
        new.genesis = _genesis(new.header())
        prev = new.genesis
        for old in state.entries:
            entry = replace(old, prev=prev, hash=_link(prev, old))
            new.entries.append(entry)
            new.hashes.append(entry.hash)
            prev = entry.hash
        other = _read_registry(ident.content_sha256)
        if other is not None and os.path.lexists(other.ledger):
            raise LedgerError(
                f"cannot upgrade {self.path}: the episodes of {dataset} already have the ledger "
                f"{other.ledger} in the registry; a dataset has one budget: use that ledger"
            )
        self._dataset_seen = dataset
        return new

    def _mark_migrated(self) -> None:
        """Best effort: mark the dataset of a migrated ledger (the registry already covers it)."""
        dataset = self._dataset_seen
        if dataset is None or self.genesis is None:
            return
        mark = {
            "ledger_id": self.ledger_id,
            "content_sha256": self.content_sha256,
            "genesis": self.genesis,
            "created": self.created,
            "ledger": os.path.relpath(self.path.resolve(), dataset.resolve().parent),
        }
        try:
            _write_attrs(dataset, {MARK_ATTR: json.dumps(mark), CONTENT_ATTR: self.content_sha256})
        except LedgerError as exc:
            warnings.warn(f"ledger upgraded, but the dataset was not marked: {exc}", stacklevel=3)

    # -- display ----------------------------------------------------------------------------

    def to_table(self) -> Table:
        """A rich table of the ledger (for `privrl ledger show`): one row per run, with its
        status (complete; reserved, outcome unknown; released) and run directory."""
        from rich.table import Table
        from rich.text import Text

        self.reload()
        runs = self._runs()
        spent = self._spend(self._recorded())
        # The ledger id, not the fingerprint: a digest of the data is not printed.
        key = f"ledger id {self.ledger_id[:12]}…" if self.ledger_id else "version-1 ledger"
        title = (
            f"privacy ledger of {Path(self.dataset_file).name} ({key}): spent "
            f"ε={fmt_number(spent, 4)} of ε_total={fmt_number(self.epsilon_total, 4)} at "
            f"δ={fmt_number(self.delta)}, ε={fmt_number(self.epsilon_total - spent, 4)} left"
        )
        # Ids, times and numbers are never wrapped or cut (at 80 columns too): the run id and
        # the ε spent each take two lines of their cell; the label / run directory wrap. The
        # table is at least as wide as its title, so a wide terminal shows it on one line.
        table = Table(title=Text(title), title_justify="left", min_width=len(title) + 4)
        table.add_column("run id / recorded (UTC)", no_wrap=True)
        table.add_column("label / run directory", ratio=1)
        table.add_column("system / status", ratio=1)
        table.add_column("run ε (δ)", justify="right", no_wrap=True)
        table.add_column("total ε", justify="right", no_wrap=True)
        counted: list[_Spend] = []
        for view, rid in runs:
            rep = view.privacy_report() if view.report else None
            if rid is not None:
                counted.append(_Spend.of(self._reports[rid]))
            table.add_row(
                Text(f"{view.run_id}\n{view.timestamp}"),
                Text(f"{view.label}\n{view.out or '-'}"),
                Text(f"{rep.system if rep is not None else ''}\n{_STATUS_TEXT[view.status]}"),
                "-" if rep is None else f"{fmt_number(rep.epsilon, 4)}\n({fmt_number(rep.delta)})",
                fmt_number(self._spend(counted), 4),
            )
        files = "; ".join(self.known_files())
        pending = sum(view.status == RESERVED for view, _ in runs)
        note = (
            f"\n{pending} reservation(s) with outcome unknown count in full (a run in progress, "
            "or one that died): settle them with `privrl ledger settle`"
            if pending
            else ""
        )
        table.caption = Text(
            f"unit: {self.unit.describe()}; relation: {self.relation.describe()}; "
            f"runs composed by the {self.backend.upper()} accountant at the ledger's δ\n"
            f"files known to hold these episodes: {files}{note}"
        )
        table.caption_justify = "left"
        return table


_STATUS_TEXT = {
    COMPLETE: "complete",
    RESERVED: "reserved, outcome unknown",
    RELEASED: "released (never published)",
}


def _out_key(out: str | os.PathLike[str]) -> str:
    """How a reservation names its run directory: the absolute path."""
    return str(Path(out).expanduser().resolve())


def new_run_id() -> str:
    """A fresh run id: UTC time (sortable) plus 12 random hex digits (unique)."""
    stamp = utc_now().replace("-", "").replace(":", "").replace("+0000", "Z")
    return f"{stamp}-{uuid.uuid4().hex[:12]}"


def _to_json(state: _State) -> dict[str, Any]:
    """The version-2 ledger file of a state."""
    if state.genesis is None:
        raise AssertionError("only version-2 states are written")
    return {
        "format": LEDGER_FORMAT,
        "schema_version": state.version,
        "ledger_id": state.ledger_id,
        "dataset": {"content_sha256": state.content_sha256, "file": state.dataset_file},
        "unit": state.unit.value,
        "relation": state.relation.value,
        "backend": state.backend,
        "budget": {"epsilon": state.epsilon_total, "delta": state.delta},
        "created": state.created,
        "entries": [e.to_dict() for e in state.entries],
        "chain": {"genesis": state.genesis, "head": state.head, "length": len(state.entries)},
    }


# -- file handling ----------------------------------------------------------------------------


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on the ledger's sibling lock file (kept, never deleted)."""
    lock = _lock_path(path)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise LedgerError(
            f"cannot lock {path}: {lock} could not be opened ({exc.strerror or exc}); it must be a "
            "writable file (remove it if it is a directory)"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def _remove_stale_temps(path: Path) -> None:
    """Delete temp files left by a crashed writer (call only while holding the lock)."""
    for stale in path.parent.glob(_temp_prefix(path) + "*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def _atomic_write_json(path: Path, data: dict[str, Any], *, sync_dir: bool = True) -> str:
    """Write-then-rename: temp file in the same directory, fsync, os.replace, fsync dir.
    Returns the text written."""
    text = json.dumps(json_safe(data), indent=1, allow_nan=False, ensure_ascii=False) + "\n"
    if path.is_dir():
        raise LedgerError(f"cannot write {path}: it is a directory")
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if not sync_dir:
        return text
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return text


def _reject_constant(name: str) -> Any:
    raise ValueError(f"the non-finite number {name} is not valid in a privrl file")


def _read(path: Path) -> dict[str, Any]:
    return _decode(path, _read_text(path))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LedgerError(f"no ledger at {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = "it is a directory" if path.is_dir() else str(exc)
        raise LedgerError(
            f"cannot read the ledger {path} ({reason}); a ledger is a JSON file written by privrl"
        ) from None


def _decode(path: Path, text: str) -> dict[str, Any]:
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise LedgerError(f"ledger {path} is not valid JSON: {exc}") from None
    except ValueError as exc:
        raise LedgerError(
            f"ledger {path} is not a valid privrl ledger: {exc} (it was modified outside privrl)"
        ) from None
    if not isinstance(data, dict):
        raise LedgerError(f"ledger {path} is not a valid privrl ledger")
    return data


def open_ledger(path: str | os.PathLike[str]) -> BudgetLedger:
    """The ledger of a dataset file, or the ledger file itself (`*.ledger.json`, read without
    verifying it against its dataset); a LedgerError that says how to create one if none."""
    path = Path(path)
    if path.name.endswith(LEDGER_SUFFIX):
        return BudgetLedger.load(path, verify=False)
    if not path.exists():
        raise LedgerError(f"dataset file not found: {path}")
    ledger = BudgetLedger.for_dataset(path)
    if ledger is None:
        raise LedgerError(
            f"no ledger for {path}; create one with "
            f"'privrl ledger init {path} --epsilon E --delta D'"
        )
    return ledger
