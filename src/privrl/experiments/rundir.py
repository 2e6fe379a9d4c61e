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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dp_accounting import dp_event

from privrl.privacy.ledger import BudgetLedger
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
        target = self.path / "metrics.csv"
        fields: list[str] = []
        for row in rows:
            fields.extend(k for k in row if k not in fields)
        with open(target, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: _csv_value(v) for k, v in row.items()})
        return target

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


def _csv_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


@contextmanager
def ledger_guard(
    dataset_path: str | Path | None,
    planned: PrivacyReport | dp_event.DpEvent,
    *,
    label: str = "",
) -> Iterator[list[PrivacyReport]]:
    """Check a dataset's ledger (if it has one) before the data are touched; on success, record
    the report the body appends to the yielded list.

    Usage:
        with ledger_guard(path, planned_event, label="dp-apvi") as reports:
            ...  # read the data, run the mechanism
            reports.append(report)
    """
    ledger = BudgetLedger.for_dataset(dataset_path) if dataset_path is not None else None
    if ledger is not None:
        ledger.check(planned)
    reports: list[PrivacyReport] = []
    yield reports
    if ledger is not None:
        for report in reports:
            if report.private:
                ledger.record(report, label=label)
