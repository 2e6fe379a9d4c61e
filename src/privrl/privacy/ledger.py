"""A privacy-budget ledger bound to one dataset file.

The ledger is a JSON file (by default `<dataset>.ledger.json` next to the dataset) holding the
dataset's declared total budget (ε_total at δ, for one privacy unit under one neighbouring
relation) and every `PrivacyReport` spent on it. A run checks the ledger before it touches the
data and records its report when it finishes; the ledger refuses any run that would take the
composed spend above ε_total.

Accounting across runs. `spent()` is the accountant's ε, at the ledger's δ, of the
composition of ALL recorded reports' events — never a sum of per-run ε's (which would waste
budget) nor anything less (which would overspend). When the ledger's backend cannot account a
recorded report's events (e.g. an event only the other backend supports), that report enters
the composition as an `ApproxDpEvent(ε_run, δ_run)` built from its own stated guarantee: valid
(every report's (ε, δ) is a true guarantee) but looser than composing its events directly.

Integrity. The ledger stores the SHA-256 of the dataset file, so it cannot silently be
applied to another file (or to the same file after its contents changed). Every write takes
an exclusive `fcntl.flock` on a sibling `.lock` file, re-reads the ledger from disk, re-checks
the budget, writes a temp file in the same directory, fsyncs it, renames it over the ledger
with `os.replace` and fsyncs the directory: a crash at any point leaves either the old or the
new complete ledger, and a spend is durable once `record` returns. Stale temp files of a
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
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dp_accounting import dp_event
from rich.table import Table
from rich.text import Text

from privrl.privacy import accounting
from privrl.privacy.events import ApproxDpEvent
from privrl.privacy.report import PrivacyReport, fmt_number, json_safe, utc_now
from privrl.privacy.units import NeighbourRelation, PrivacyUnit, parse_relation, parse_unit

LEDGER_FORMAT = "privrl.ledger"
SCHEMA_VERSION = 1
LEDGER_SUFFIX = ".ledger.json"
_CHUNK = 1 << 20


class LedgerError(ValueError):
    """The ledger cannot be used: missing, malformed, bound to another dataset, or mismatched."""


class BudgetExceededError(LedgerError):
    """The run would take the dataset's composed spend above its total budget."""


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


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded run: its id, when it was recorded, a label and its serialised report."""

    run_id: str
    timestamp: str
    label: str
    report: dict[str, Any]

    def privacy_report(self) -> PrivacyReport:
        """The recorded report, deserialised."""
        return PrivacyReport.from_dict(self.report)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "timestamp": self.timestamp,
            "label": self.label,
            "report": self.report,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LedgerEntry:
        return cls(
            run_id=str(data["run_id"]),
            timestamp=str(data["timestamp"]),
            label=str(data.get("label", "")),
            report=dict(data["report"]),
        )


def fingerprint(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex digest of a file, streamed in 1 MiB chunks (datasets can be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def default_ledger_path(dataset_path: str | os.PathLike[str]) -> Path:
    """`<dataset>.ledger.json`, next to the dataset file."""
    p = Path(dataset_path)
    return p.with_name(p.name + LEDGER_SUFFIX)


class BudgetLedger:
    """The privacy budget of one dataset file and every spend recorded against it.

    Create with `init`, open with `load` or `for_dataset`. Reads (`entries`, `spent`,
    `check`, ...) re-read the file, so they see runs recorded by other processes; `record` is
    atomic and safe against concurrent writers in other processes.
    """

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self._reports: dict[str, PrivacyReport] = {}
        self._apply(data)

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
        """Create the ledger of a dataset with total budget (ε_total=`epsilon`, δ=`delta`).

        Refuses to replace an existing ledger unless `overwrite` (which forgets every
        recorded spend — only right for a genuinely new dataset).
        """
        dataset = Path(dataset_path)
        if not dataset.is_file():
            raise LedgerError(f"dataset file {dataset} does not exist")
        epsilon, delta = float(epsilon), float(delta)
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise LedgerError(f"the total budget epsilon must be finite and > 0, got {epsilon}")
        if not 0.0 <= delta < 1.0:
            raise LedgerError(f"the ledger's delta must be in [0, 1), got {delta}")
        if backend not in ("rdp", "pld"):
            raise LedgerError(f"unknown accountant backend {backend!r}; expected 'rdp' or 'pld'")
        path = Path(ledger_path) if ledger_path is not None else default_ledger_path(dataset)
        rel = os.path.relpath(dataset.resolve(), path.parent.resolve())
        data = {
            "format": LEDGER_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "dataset": {
                "file": Path(rel).as_posix(),
                "sha256": fingerprint(dataset),
                "size": dataset.stat().st_size,
            },
            "unit": parse_unit(unit).value,
            "relation": parse_relation(relation).value,
            "backend": backend,
            "budget": {"epsilon": epsilon, "delta": delta},
            "created": utc_now(),
            "entries": [],
        }
        with _locked(path):
            if path.exists() and not overwrite:
                raise LedgerError(
                    f"a ledger already exists at {path}; it records the spends on this dataset, "
                    "so it is kept (pass overwrite=True only for a new dataset)"
                )
            _remove_stale_temps(path)
            _atomic_write_json(path, data)
        return cls(path, data)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        dataset_path: str | os.PathLike[str] | None = None,
        verify: bool = True,
    ) -> BudgetLedger:
        """Open a ledger file; with `verify`, check the dataset's SHA-256 fingerprint.

        The dataset is `dataset_path` if given, else the file recorded in the ledger (relative
        to the ledger's directory). A missing or different dataset raises LedgerError.
        """
        path = Path(path)
        data = _read(path)
        ledger = cls(path, data)
        if verify:
            ledger.verify_dataset(dataset_path)
        return ledger

    @classmethod
    def for_dataset(
        cls,
        dataset_path: str | os.PathLike[str],
        *,
        ledger_path: str | os.PathLike[str] | None = None,
        verify: bool = True,
    ) -> BudgetLedger | None:
        """The ledger of a dataset (at the default path unless given), or None if it has none."""
        path = Path(ledger_path) if ledger_path is not None else default_ledger_path(dataset_path)
        if not path.exists():
            return None
        return cls.load(path, dataset_path=dataset_path, verify=verify)

    def verify_dataset(self, dataset_path: str | os.PathLike[str] | None = None) -> None:
        """Raise LedgerError unless the dataset file's SHA-256 matches the ledger's."""
        dataset = Path(dataset_path) if dataset_path is not None else self.dataset_path
        if not dataset.is_file():
            raise LedgerError(
                f"the dataset {dataset} of ledger {self.path} was not found; pass the dataset "
                "path explicitly (or verify=False to inspect the ledger only)"
            )
        size = dataset.stat().st_size
        digest = fingerprint(dataset) if size == self.dataset_size else None
        if digest != self.dataset_sha256:
            found = f"SHA-256 {digest[:16]}…" if digest else f"size {size} bytes"
            raise LedgerError(
                f"ledger {self.path} belongs to a dataset with SHA-256 {self.dataset_sha256[:16]}… "
                f"({self.dataset_size} bytes), but {dataset} has {found}; the file was modified "
                "or this is another dataset's ledger, so its budget cannot be applied"
            )

    # -- state ------------------------------------------------------------------------------

    def _parse_header(self, data: dict[str, Any]) -> dict[str, Any]:
        """Validate a parsed ledger file's header fields (everything but the entries)."""
        try:
            if data.get("format") != LEDGER_FORMAT:
                raise ValueError("not a privrl ledger (missing format tag)")
            version = int(data.get("schema_version", 0))
            if version > SCHEMA_VERSION:
                raise ValueError(f"schema version {version} is newer than this privrl supports")
            dataset = data["dataset"]
            backend = data["backend"]
            if backend not in ("rdp", "pld"):
                raise ValueError(f"unknown backend {backend!r}")
            return {
                "dataset_file": str(dataset["file"]),
                "dataset_sha256": str(dataset["sha256"]),
                "dataset_size": int(dataset["size"]),
                "unit": parse_unit(data["unit"]),
                "relation": parse_relation(data["relation"]),
                "backend": backend,
                "epsilon_total": float(data["budget"]["epsilon"]),
                "delta": float(data["budget"]["delta"]),
                "created": str(data.get("created", "")),
            }
        except (KeyError, TypeError, ValueError) as exc:
            raise LedgerError(f"ledger {self.path} is not a valid privrl ledger: {exc}") from exc

    def _apply(self, data: dict[str, Any]) -> None:
        """Validate a parsed ledger file and take its state (all or nothing)."""
        header = self._parse_header(data)
        try:
            entries = [LedgerEntry.from_dict(e) for e in data["entries"]]
            reports = {}
            for e in entries:
                if e.run_id in reports:
                    raise ValueError(f"run id {e.run_id!r} appears twice")
                reports[e.run_id] = self._reports.get(e.run_id) or e.privacy_report()
        except (KeyError, TypeError, ValueError) as exc:
            raise LedgerError(f"ledger {self.path} has an invalid entry: {exc}") from exc
        self.dataset_file: str = header["dataset_file"]
        self.dataset_sha256: str = header["dataset_sha256"]
        self.dataset_size: int = header["dataset_size"]
        self.unit: PrivacyUnit = header["unit"]
        self.relation: NeighbourRelation = header["relation"]
        self.backend: accounting.Backend = header["backend"]
        self.epsilon_total: float = header["epsilon_total"]
        self.delta: float = header["delta"]
        self.created: str = header["created"]
        self._entries = entries
        self._reports = reports

    _BINDING = ("dataset_sha256", "unit", "relation", "backend", "epsilon_total", "delta")

    def _adopt(self, data: dict[str, Any]) -> None:
        """Take a freshly read on-disk state, refusing one bound to another dataset/budget."""
        header = self._parse_header(data)
        if any(header[k] != getattr(self, k) for k in self._BINDING):
            raise LedgerError(
                f"ledger {self.path} was re-initialised on disk (different dataset or budget) "
                "since it was opened; open it again"
            )
        self._apply(data)

    def reload(self) -> None:
        """Re-read the ledger from disk (another process may have recorded a run since)."""
        self._adopt(_read(self.path))

    @property
    def dataset_path(self) -> Path:
        """The dataset file, as recorded relative to the ledger's directory."""
        return self.path.parent / self.dataset_file

    def to_dict(self) -> dict[str, Any]:
        """The ledger file's content plus the composed spend (for `privrl ledger show --json`)."""
        data = _read(self.path)
        data["spent"] = {"epsilon": self.spent(), "delta": self.delta}
        data["remaining_epsilon"] = self.remaining()
        return json_safe(data)

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        """Every recorded run, oldest first."""
        self.reload()
        return tuple(self._entries)

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
        return [_Spend.of(self._reports[e.run_id]) for e in self._entries]

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
        budget = (
            f"the dataset's ledger has ε={fmt_number(self.epsilon_total - spent, 4)} of "
            f"ε_total={fmt_number(self.epsilon_total, 4)} left at δ={fmt_number(self.delta)}"
        )
        if not new.private:
            raise BudgetExceededError(
                f"this run is not differentially private (ε=∞) and would void the budget; {budget}"
            )
        alone = self._spend([new])
        fallback = [s.fallback for s in [*recorded, new] if self._composable(s) is not s.event]
        hint = ""
        if fallback and math.isinf(total):
            used = math.fsum(f.delta for f in fallback if f is not None)
            hint = (
                f"; {len(fallback)} run(s) the {self.backend.upper()} backend cannot account "
                f"enter as their own (ε, δ) and use δ={fmt_number(used)} of the ledger's "
                f"δ={fmt_number(self.delta)}: state such runs at a smaller δ"
            )
        raise BudgetExceededError(
            f"this run needs ε={fmt_number(alone, 4)} at δ={fmt_number(self.delta)}; {budget} "
            f"(composed with the {len(recorded)} recorded run(s) it would reach "
            f"ε={fmt_number(total, 4)}); lower the budget of the run (smaller ε, more noise "
            f"or fewer steps) or use data not yet spent on{hint}"
        )

    # -- writing ----------------------------------------------------------------------------

    def record(
        self, report: PrivacyReport, label: str = "", *, run_id: str | None = None
    ) -> LedgerEntry:
        """Append a run's report, atomically and safely against concurrent writers.

        Under an exclusive lock: re-read the ledger, refuse a duplicate run id or an overspend
        (BudgetExceededError), write a fsynced temp file and rename it over the ledger. The
        spend is durable when this returns.
        """
        if not isinstance(report, PrivacyReport):
            raise TypeError(f"expected a PrivacyReport, got {type(report).__name__}")
        self._validate(report)
        entry = LedgerEntry(
            run_id=run_id or new_run_id(),
            timestamp=utc_now(),
            label=str(label),
            report=report.to_dict(),
        )
        with _locked(self.path):
            data = _read(self.path)
            self._adopt(data)
            if any(e.run_id == entry.run_id for e in self._entries):
                raise LedgerError(f"run id {entry.run_id!r} is already recorded in {self.path}")
            self._check(_Spend.of(report))
            data["entries"].append(entry.to_dict())
            _remove_stale_temps(self.path)
            _atomic_write_json(self.path, data)
        self._entries.append(entry)
        self._reports[entry.run_id] = report
        return entry

    # -- display ----------------------------------------------------------------------------

    def to_table(self) -> Table:
        """A rich table of the ledger (for `privrl ledger show`): one row per recorded run."""
        self.reload()
        reports = [self._reports[e.run_id] for e in self._entries]
        spends = [_Spend.of(r) for r in reports]
        spent = self._spend(spends)
        title = (
            f"privacy ledger of {Path(self.dataset_file).name} "
            f"(SHA-256 {self.dataset_sha256[:12]}…): spent ε={fmt_number(spent, 4)} of "
            f"ε_total={fmt_number(self.epsilon_total, 4)} at δ={fmt_number(self.delta)}, "
            f"ε={fmt_number(self.epsilon_total - spent, 4)} left"
        )
        table = Table(title=Text(title), title_justify="left")
        for name, justify in [
            ("run id", "left"),
            ("recorded (UTC)", "left"),
            ("label", "left"),
            ("system", "left"),
            ("run ε (δ)", "right"),
            ("cumulative ε", "right"),
        ]:
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for i, (entry, rep) in enumerate(zip(self._entries, reports, strict=True)):
            cumulative = self._spend(spends[: i + 1])
            table.add_row(
                Text(entry.run_id),
                entry.timestamp,
                Text(entry.label),
                Text(rep.system),
                f"{fmt_number(rep.epsilon, 4)} ({fmt_number(rep.delta)})",
                fmt_number(cumulative, 4),
            )
        table.caption = Text(
            f"unit: {self.unit.describe()}; relation: {self.relation.describe()}; "
            f"runs composed by the {self.backend.upper()} accountant at the ledger's δ"
        )
        table.caption_justify = "left"
        return table


def new_run_id() -> str:
    """A fresh run id: UTC time (sortable) plus 12 random hex digits (unique)."""
    stamp = utc_now().replace("-", "").replace(":", "").replace("+0000", "Z")
    return f"{stamp}-{uuid.uuid4().hex[:12]}"


# -- file handling ----------------------------------------------------------------------------


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on the ledger's sibling lock file (kept, never deleted)."""
    fd = os.open(_lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
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


def _atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    """Write-then-rename: temp file in the same directory, fsync, os.replace, fsync dir."""
    text = json.dumps(json_safe(data), indent=1, allow_nan=False, ensure_ascii=False) + "\n"
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
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LedgerError(f"no ledger at {path}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LedgerError(f"ledger {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise LedgerError(f"ledger {path} is not a valid privrl ledger")
    return data
