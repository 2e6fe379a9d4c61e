"""The run-directory contract shared by every `train`, `ope`, `online` and `reproduce` command.

A run writes `DIR/config.json`, `DIR/metrics.json` (final figures; standard keys where they
apply: `suboptimality`, `regret`, `mspbe`, `return_mean`, `return_std`), `DIR/metrics.csv`
(curves), `DIR/privacy.json` (the PrivacyReport) and `DIR/plots/*.png`.

A private run on a dataset that has a ledger checks the ledger *before* it touches the data and
records its report there when it finishes: use `ledger_guard`.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from dp_accounting import dp_event

from privrl.data.dataset import redacted_errors
from privrl.privacy.ledger import BudgetLedger, LedgerError
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


class OutDirError(ValueError):
    """`--out` cannot become a run directory (an existing file, inside a file, not writable)."""


_RUN_FILES = ("config.json", "metrics.json", "privacy.json")


def check_out_dir(path: str | Path) -> Path:
    """Make sure `path` can hold a run directory, before any work is done or budget spent.

    Refuses an existing file, a path inside a file and a directory that cannot be created or
    written to; creates the directory (empty) so that nothing later fails to write it.
    """
    path = Path(path)
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            where = "is an existing file" if parent == path else f"is inside the file {parent}"
            raise OutDirError(
                f"--out {path} {where}; give a directory path (new or an earlier run's)"
            )
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".privrl-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise OutDirError(
            f"--out {path} cannot be written ({reason}); choose a writable directory"
        ) from None
    return path


def _withdraw(out: Path) -> None:
    """Remove a run's released files (its outputs must not outlive a refused spend)."""
    for name in _RUN_FILES:
        (out / name).unlink(missing_ok=True)


@contextmanager
def ledger_guard(
    dataset_path: str | Path | None,
    planned: PrivacyReport | dp_event.DpEvent,
    *,
    label: str = "",
    out: str | Path | None = None,
) -> Iterator[list[PrivacyReport]]:
    """Check a dataset's ledger (if it has one) before the data are touched; on success, record
    the reports the body appends to the yielded list.

    With `out`, the run directory is validated first (before the ledger is even opened), the
    body must write the complete run directory (config.json, metrics.json, privacy.json), and
    the spend is recorded only once it is there; if the ledger then refuses (another process
    spent the budget meanwhile), the run's outputs are withdrawn.

    While the body of a private run executes, a `DatasetError` withholds what it found in the
    data (`privrl.data.dataset.redacted_errors`).

    A ledgered dataset accepts only certified runs: a report that turns out not private
    (ε = ∞) is refused and its outputs withdrawn.

    Usage:
        with ledger_guard(path, planned_event, label="dp-apvi", out=out) as reports:
            ...  # read the data, run the mechanism, write the run directory
            reports.append(report)
    """
    out_path = check_out_dir(out) if out is not None else None
    ledger = BudgetLedger.for_dataset(dataset_path) if dataset_path is not None else None
    if ledger is not None:
        ledger.check(planned)
    reports: list[PrivacyReport] = []
    private = not (isinstance(planned, PrivacyReport) and not planned.private)
    # A private run's data errors must not quote the data (values, episode indices, counts).
    with redacted_errors() if private else nullcontext():
        yield reports
    if ledger is None:
        return
    try:
        if out_path is not None:
            missing = [n for n in _RUN_FILES if not (out_path / n).is_file()]
            if missing:
                raise RuntimeError(
                    f"run directory {out_path} is incomplete ({', '.join(missing)} missing); "
                    "the spend is not recorded"
                )
        for report in reports:
            if not report.private:
                raise LedgerError(
                    "The dataset's ledger refuses this run: its guarantee could not be "
                    "certified (ε=∞), so it would void the ledger's budget "
                    f"ε_total={ledger.epsilon_total:g} at δ={ledger.delta:g}, and its outputs "
                    "are withdrawn; "
                    "rerun with a certified configuration (such as Poisson sampling or the "
                    "exact accountant) or on data without a ledger."
                )
        for report in reports:
            ledger.record(report, label=label)
    except BaseException:
        if out_path is not None:
            _withdraw(out_path)
        raise
