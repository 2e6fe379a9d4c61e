"""The run-directory contract shared by every `train`, `ope`, `online` and `reproduce` command.

A run writes `DIR/config.json`, `DIR/metrics.json` (final figures; standard keys where they
apply: `suboptimality`, `regret`, `mspbe`, `return_mean`, `return_std`), `DIR/metrics.csv`
(curves), `DIR/privacy.json` (the PrivacyReport) and `DIR/plots/*.png`.

A private run is a ledger transaction (`ledger_transaction`): it reserves its planned spend on
the dataset's ledger before it touches the data, writes the run directory into a hidden staging
folder, publishes it with one rename and then completes the reservation.
"""

from __future__ import annotations

import csv
import errno
import json
import math
import os
import shutil
import signal
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privrl.data.dataset import redacted_errors
from privrl.privacy.ledger import BudgetLedger, LedgerEntry, LedgerError
from privrl.privacy.limits import InputError
from privrl.privacy.report import PrivacyReport, json_safe

STANDARD_METRICS = ("suboptimality", "regret", "mspbe", "return_mean", "return_std")


class RunDir:
    """One run's output directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.plots = self.path / "plots"
        self.plots.mkdir(exist_ok=True)

    def _write_json(self, name: str, data: Any) -> Path:
        target = self.path / name
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n")
        tmp.replace(target)
        return target

    def write_config(self, config: Mapping[str, Any]) -> Path:
        return self._write_json("config.json", dict(config))

    def write_metrics(self, metrics: Mapping[str, Any]) -> Path:
        return self._write_json("metrics.json", dict(metrics))

    def write_curve(self, rows: Sequence[Mapping[str, Any]]) -> Path:
        """Write `metrics.csv`; the columns are the union of the rows' keys, in order."""
        return write_rows(self.path / "metrics.csv", rows)

    def write_privacy(self, report: PrivacyReport) -> Path:
        target = self.path / "privacy.json"
        report.to_json(target)
        return target

    def plot_path(self, name: str) -> Path:
        return self.plots / (name if name.endswith(".png") else f"{name}.png")

    def artifact(self, name: str) -> Path:
        return self.path / name


def read_run(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(config, metrics) of a finished run directory; None when either file is missing, is not
    JSON, or is not an object. Reads only (``RunDir`` creates the directory)."""
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text())
        metrics = json.loads((path / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or not isinstance(metrics, dict):
        return None
    return config, metrics


def write_rows(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write `rows` as a CSV table at `path`; the columns are the union of the rows' keys, in
    order (a row without a column leaves it empty)."""
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(v) for k, v in row.items()})
    return path


def _csv_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class OutDirError(InputError):
    """`--out` cannot become a run directory (an existing file, inside a file, not writable)."""


_RUN_FILES = ("config.json", "metrics.json", "privacy.json")


def check_out_dir(path: str | Path, flag: str = "--out") -> Path:
    """Make sure `path` can hold a run directory, before any work is done or budget spent.

    Refuses an existing file, a path inside a file and a directory that cannot be created or
    written to; creates the directory (empty) so that nothing later fails to write it. The
    refusal names `flag`, the option the path came from.
    """
    path = Path(path)
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            where = "is an existing file" if parent == path else f"is inside the file {parent}"
            raise OutDirError(
                f"{flag} {path} {where}; give a directory path (new or an earlier run's)"
            )
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".privrl-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise OutDirError(
            f"{flag} {path} cannot be written ({reason}); choose a writable directory"
        ) from None
    return path


STAGING = ".privrl-staging-"
# The fields of a planned report that must match for a resumed run to take over a reservation.
_SAME_SPEND = ("unit", "relation", "epsilon", "delta", "releases", "system")


@dataclass
class Transaction:
    """A private run in progress (see `ledger_transaction`).

    Attributes:
        staging: the hidden folder the body writes the whole run directory into (a sibling of
            `out` on the same file system); published by one rename when the body is done.
        out: the run directory.
        reports: the body appends the run's final report here.
        reservation: the ledger's reservation for this run (None without a ledger).
        resumed: whether `reservation` was taken over from an earlier run of the same `out`.
    """

    staging: Path
    out: Path
    reports: list[PrivacyReport] = field(default_factory=list)
    reservation: LedgerEntry | None = None
    resumed: bool = False


@contextmanager
def ledger_transaction(
    dataset_path: str | Path | None,
    planned: PrivacyReport,
    *,
    out: str | Path,
    label: str = "",
    resumable: bool = False,
) -> Iterator[Transaction]:
    """A private run as a ledger transaction: reserve → compute → stage → publish → complete.

    1. `out` is checked (`check_out_dir`) and the staging folder made; then, if the dataset
       has a ledger, the planned spend is *reserved* (`BudgetLedger.reserve`): a pending entry
       that counts against the budget from then on. A refused run (budget short, a
       concurrent run took it, not certified) stops here, before the data are read, and
       leaves no file.
    2. The body reads the data, computes, writes the complete run directory into
       `Transaction.staging` and appends its final report to `Transaction.reports`.
    3. The final report is checked against the reservation (`check_complete`), then the staged
       directory is published: one atomic rename onto `out` when `out` is new or empty, else
       (an earlier run's directory, or a resumable run's checkpoints) each staged file renamed
       into place.
    4. The reservation is completed with the final report.

    A failure or interruption (exception, Ctrl-C, SIGTERM) in the body or before publishing
    removes the staging folder, so nothing is published; the reservation keeps counting, since
    the data may have been read (fail closed; `privrl ledger settle` settles it). A process
    killed outright leaves its staging folder, which the next run of the same `out` removes.
    `resumable`: a run of a system that resumes from its checkpoint takes over a pending
    reservation of the same `out`, label and planned spend instead of reserving again (it
    continues the same release), unless `out` already holds a published run.

    While the body of a private run executes, a `DatasetError` withholds what it found in the
    data (`privrl.data.dataset.redacted_errors`).
    """
    fresh = not Path(out).exists()
    out_path = check_out_dir(out)
    txn: Transaction | None = None
    staging: Path | None = None
    try:
        staging = _new_staging(out_path)  # before the reservation: a failure here spends nothing
        ledger = BudgetLedger.for_dataset(dataset_path) if dataset_path is not None else None
        reservation, resumed = None, False
        if ledger is not None:
            reservation, resumed = _reserve(ledger, planned, label, staging, out_path, resumable)
        txn = Transaction(staging, out_path, [], reservation, resumed)
        # A private run's data errors must not quote the data (values, episode indices, counts).
        with redacted_errors() if planned.private else nullcontext():
            yield txn
        final = _final_report(txn, ledger)
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        _remove_if_empty(out_path, fresh)
        raise
    assert txn is not None
    published = publish(txn.staging, out_path)
    crash_point("published")
    try:
        if ledger is not None and reservation is not None:
            ledger.complete(reservation.run_id, final)
    except BaseException:
        _withdraw(out_path, published, fresh)
        raise


#: Test hook: PRIVRL_TEST_KILL_AT=<point> SIGKILLs the process at that point of a run
#: ("reserved", "staged", "published", "completed"), for the crash tests of the transaction.
KILL_ENV = "PRIVRL_TEST_KILL_AT"


def crash_point(point: str) -> None:
    """SIGKILL this process here if `KILL_ENV` names `point` (a no-op otherwise)."""
    if os.environ.get(KILL_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _reserve(
    ledger: BudgetLedger,
    planned: PrivacyReport,
    label: str,
    staging: Path,
    out: Path,
    resumable: bool,
) -> tuple[LedgerEntry, bool]:
    """The run's reservation: a pending one of the same resumable run whose process died,
    or a new one."""
    if resumable:
        same = {k: planned.to_dict()[k] for k in _SAME_SPEND}
        for entry in ledger.pending(out):
            if entry.label == label and {k: entry.report.get(k) for k in _SAME_SPEND} == same:
                # a live run keeps its staging folder until it publishes (stale ones are gone)
                if [p for p in _stagings(out) if p != staging]:
                    raise LedgerError(
                        f"another run of {out} is in progress (its reservation "
                        f"{entry.run_id} is pending); wait for it to finish"
                    )
                if all((out / name).is_file() for name in _RUN_FILES):
                    raise LedgerError(
                        f"{out} holds a published run whose reservation {entry.run_id} was "
                        "never completed (the process died after publishing); settle it first "
                        f"with 'privrl ledger settle DATA {entry.run_id} --complete'"
                    )
                return entry, True
    return ledger.reserve(planned, label, out=out), False


def _final_report(txn: Transaction, ledger: BudgetLedger | None) -> PrivacyReport | None:
    """The body's final report, checked before anything is published."""
    missing = [n for n in _RUN_FILES if not (txn.staging / n).is_file()]
    if missing:
        raise RuntimeError(
            f"run directory {txn.out} is incomplete ({', '.join(missing)} missing); nothing "
            "is published"
        )
    if ledger is None or txn.reservation is None:
        return txn.reports[-1] if txn.reports else None
    if len(txn.reports) != 1:
        raise RuntimeError(f"a ledgered run states one final report, not {len(txn.reports)}")
    (final,) = txn.reports
    ledger.check_complete(txn.reservation.run_id, final)
    return final


def _stagings(out: Path) -> list[Path]:
    """The staging folders of runs of `out` (beside it, or inside it)."""
    return [*out.parent.glob(f".{out.name}{STAGING}*"), *out.glob(f"{STAGING}*")]


def _new_staging(out: Path) -> Path:
    """A fresh hidden staging folder beside `out` (inside it if its parent is not writable);
    stale ones of dead processes are removed (they hold unpublished outputs of a killed run)."""
    for where, prefix in ((out.parent, f".{out.name}{STAGING}"), (out, STAGING)):
        for stale in where.glob(prefix + "*"):
            pid = stale.name.removeprefix(prefix).split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(stale, ignore_errors=True)
    name = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging = out.parent / f".{out.name}{STAGING}{name}"
    try:
        staging.mkdir()
    except PermissionError:  # `check_out_dir` only asks for a writable `out`
        staging = out / f"{STAGING}{name}"
        staging.mkdir()
    return staging


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def publish(staging: Path, out: Path) -> list[Path]:
    """Move the staged run directory to `out`; returns the files published (relative to
    `out`). One atomic `rename` when `out` is absent or an empty directory; otherwise each
    staged file is renamed into place (files of `out` that the run does not write are kept,
    as `check_out_dir` allows an earlier run's directory). The directory is fsynced."""
    files = sorted(p.relative_to(staging) for p in staging.rglob("*") if not p.is_dir())
    try:
        if staging.parent == out:  # staged inside `out` (its parent is not writable)
            raise OSError(errno.ENOTEMPTY, "staged inside the run directory")
        os.rename(staging, out)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        _merge(staging, out)
        shutil.rmtree(staging, ignore_errors=True)
    _fsync_dir(out)
    _fsync_dir(out.parent)
    return files


def _merge(src: Path, dst: Path) -> None:
    dst.mkdir(exist_ok=True)
    for item in sorted(src.iterdir()):
        target = dst / item.name
        if item.is_dir() and not item.is_symlink():
            _merge(item, target)
        else:
            os.replace(item, target)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_if_empty(out: Path, fresh: bool) -> None:
    """A run that created `out` and leaves nothing in it removes it again."""
    if fresh:
        with suppress(OSError):
            out.rmdir()


def _withdraw(out: Path, files: Sequence[Path], fresh: bool) -> None:
    """Remove the files a run published (its release must not outlive a refused completion)."""
    for name in files:
        (out / name).unlink(missing_ok=True)
    for folder in sorted({(out / n).parent for n in files}, key=lambda p: -len(p.parts)):
        if folder != out:
            with suppress(OSError):
                folder.rmdir()
    _remove_if_empty(out, fresh)


def run_traces(out: str | Path) -> list[Path]:
    """What a run of the directory `out` may have left on disk: `out` itself when it holds
    anything, and staging folders beside it (of a killed run, or one in progress)."""
    out = Path(out)
    found = [out] if out.is_dir() and any(out.iterdir()) else []
    if out.exists() and not out.is_dir():
        found.append(out)
    if out.parent.is_dir():
        found += sorted(out.parent.glob(f".{out.name}{STAGING}*"))
    return found  # a staging folder inside `out` makes `out` non-empty, so it is found


def settle_reservation(
    ledger: BudgetLedger, run_id: str, *, complete: bool, reason: str = ""
) -> LedgerEntry:
    """Settle the pending reservation `run_id` of a run that died: `complete` keeps the spend
    (always safe); otherwise release it, with the holder's `reason`, which is refused while
    the run's directory holds anything or a staging folder of it exists (`run_traces`)."""
    pending = {e.run_id: e for e in ledger.pending()}
    if run_id not in pending:
        known = ", ".join(pending) or "none"
        raise LedgerError(
            f"{run_id} is not a pending reservation of {ledger.path} (pending: {known})"
        )
    if complete:
        return ledger.complete(run_id)
    if not reason.strip():
        raise LedgerError("--release needs --reason TEXT (why nothing of the run was published)")
    entry = pending[run_id]
    traces = run_traces(entry.out) if entry.out else []
    if traces:
        raise LedgerError(
            f"the run may have published: {', '.join(map(str, traces))} exist(s); keep the "
            "spend with --complete, or delete them first if you are sure they were never read"
        )
    return ledger.release(run_id, reason)
