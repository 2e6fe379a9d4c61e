"""Tests of BudgetLedger: binding to a dataset, composed spending, refusal, crash safety."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event
from rich.console import Console

from privrl.privacy import accounting
from privrl.privacy.events import ApproxDpEvent
from privrl.privacy.ledger import (
    BudgetExceededError,
    BudgetLedger,
    LedgerError,
    default_ledger_path,
    fingerprint,
)
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport, fmt_number
from privrl.privacy.units import NeighbourRelation, PrivacyUnit

DELTA = 1e-5
UNIT, RELATION = PrivacyUnit.TRAJECTORY, NeighbourRelation.ADD_REMOVE
WRITER = Path(__file__).with_name("ledger_writer.py")


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A 2.5 MiB dataset file (several hashing chunks)."""
    path = tmp_path / "patients.h5"
    path.write_bytes(np.random.default_rng(0).bytes(5 * (1 << 19)))
    return path


def gaussian_report(z: float, steps: int = 1, *, relation=RELATION, unit=UNIT) -> PrivacyReport:
    event = dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z), steps)
    release = Release("gradients", "gaussian", 1.0, "l2", {"noise_multiplier": z}, steps, 1, event)
    return PrivacyReport.build(unit, relation, [release], DELTA, system="primorl")


def eps_of(*events: dp_event.DpEvent) -> float:
    return accounting.epsilon(dp_event.ComposedDpEvent(list(events)), DELTA, relation=RELATION)


def temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.endswith(".tmp")]


def new_ledger(dataset: Path, epsilon: float = 2.0) -> BudgetLedger:
    return BudgetLedger.init(dataset, epsilon=epsilon, delta=DELTA, unit=UNIT, relation=RELATION)


# -- binding to the dataset ----------------------------------------------------------------------


def test_init_load_and_for_dataset(dataset, tmp_path):
    """Structural rule: the ledger lives at <dataset>.ledger.json, stores the dataset's SHA-256
    (streamed), round-trips through load/for_dataset, and is never silently overwritten."""
    ledger = new_ledger(dataset)
    assert ledger.path == default_ledger_path(dataset) == tmp_path / "patients.h5.ledger.json"
    digest = hashlib.sha256(dataset.read_bytes()).hexdigest()
    assert fingerprint(dataset) == digest == ledger.dataset_sha256
    raw = json.loads(ledger.path.read_text())
    assert raw["dataset"]["file"] == "patients.h5"  # relative: no machine paths in the ledger

    loaded = BudgetLedger.load(ledger.path)
    same = ("dataset_sha256", "unit", "relation", "backend", "epsilon_total", "delta")
    assert all(getattr(loaded, k) == getattr(ledger, k) for k in same)
    assert loaded.entries == () and loaded.spent() == 0.0 and loaded.remaining() == 2.0
    assert BudgetLedger.for_dataset(dataset) is not None

    other = tmp_path / "other.h5"
    other.write_bytes(b"x")
    assert BudgetLedger.for_dataset(other) is None

    ledger.record(gaussian_report(5.0))
    with pytest.raises(LedgerError, match="already exists"):
        new_ledger(dataset)
    assert len(BudgetLedger.load(ledger.path).entries) == 1
    fresh = BudgetLedger.init(
        dataset, epsilon=1.0, delta=DELTA, unit=UNIT, relation=RELATION, overwrite=True
    )
    assert fresh.entries == () and fresh.epsilon_total == 1.0
    # A ledger object opened before the re-initialisation refuses to write on the new one.
    with pytest.raises(LedgerError, match="re-initialised"):
        ledger.record(gaussian_report(5.0))


def test_fingerprint_mismatch_is_refused(dataset, tmp_path):
    """Structural rule: a ledger cannot be applied to a modified or different dataset file
    (same size, one byte changed, is caught); verify=False allows inspection only."""
    ledger = new_ledger(dataset)
    data = bytearray(dataset.read_bytes())
    data[len(data) // 2] ^= 1
    dataset.write_bytes(bytes(data))
    with pytest.raises(LedgerError, match="SHA-256"):
        BudgetLedger.load(ledger.path)
    with pytest.raises(LedgerError, match="SHA-256"):
        BudgetLedger.for_dataset(dataset)
    assert BudgetLedger.load(ledger.path, verify=False).epsilon_total == 2.0

    other = tmp_path / "other.h5"
    other.write_bytes(b"another dataset")
    with pytest.raises(LedgerError, match="another dataset's ledger"):
        BudgetLedger.for_dataset(other, ledger_path=ledger.path)
    dataset.unlink()
    with pytest.raises(LedgerError, match="not found"):
        BudgetLedger.load(ledger.path)


def test_malformed_ledger_is_an_error(dataset):
    """Structural rule: a truncated or foreign file is reported, never read as an empty ledger."""
    ledger = new_ledger(dataset)
    ledger.path.write_text('{"format": "privrl.ledger", "entries": [')
    with pytest.raises(LedgerError, match="not valid JSON"):
        BudgetLedger.load(ledger.path)
    ledger.path.write_text('{"entries": []}')
    with pytest.raises(LedgerError, match="not a valid privrl ledger"):
        BudgetLedger.load(ledger.path)


# -- spending --------------------------------------------------------------------------------------


def test_spent_composes_runs_with_the_accountant_not_by_adding(dataset):
    """Accountant value: spent() of two recorded Gaussian runs is the accountant's ε of their
    composed events at the ledger's δ, strictly below the sum of the runs' own ε's."""
    ledger = new_ledger(dataset, epsilon=10.0)
    a, b = gaussian_report(2.0, steps=4), gaussian_report(3.0, steps=9)
    ledger.record(a, label="first")
    ledger.record(b, label="second")
    spent = ledger.spent()
    assert spent == eps_of(a.event, b.event)
    assert max(a.epsilon, b.epsilon) < spent < a.epsilon + b.epsilon
    assert ledger.remaining() == 10.0 - spent
    assert [e.label for e in ledger.entries] == ["first", "second"]
    assert ledger.entries[1].privacy_report() == b
    # A second handle on the same file sees the same spend (state lives on disk).
    assert BudgetLedger.load(ledger.path).spent() == spent


def test_refuses_overspend_with_remaining_budget_in_message(dataset):
    """Budget rule: a run whose composition with the recorded runs exceeds ε_total is refused
    by check() and by record(), the message states the need and what is left, and nothing is
    written."""
    ledger = new_ledger(dataset, epsilon=1.0)
    first = gaussian_report(6.0)
    ledger.record(first)
    big = gaussian_report(5.0)
    assert big.epsilon < 1.0 < ledger.would_spend(big)  # fits alone, not after `first`
    left = fmt_number(ledger.remaining(), 4)
    with pytest.raises(BudgetExceededError) as info:
        ledger.check(big)
    msg = str(info.value)
    assert f"this run needs ε={fmt_number(big.epsilon, 4)}" in msg
    assert f"has ε={left} of ε_total=1 left at δ=1e-05" in msg
    assert "lower the budget of the run" in msg
    before = ledger.path.read_bytes()
    with pytest.raises(BudgetExceededError):
        ledger.record(big)
    assert ledger.path.read_bytes() == before
    assert isinstance(info.value, LedgerError)

    small = gaussian_report(40.0)
    ledger.check(small)
    ledger.check(small.event)  # a bare event is checked under the ledger's relation
    ledger.record(small)
    assert len(ledger.entries) == 2 and ledger.spent() <= 1.0


def test_rejects_mismatched_unit_relation_and_non_private_runs(dataset):
    """Structural rule: runs stated for another unit or relation, non-private runs and reused
    run ids are refused."""
    ledger = new_ledger(dataset)
    with pytest.raises(LedgerError, match="replace_one"):
        ledger.check(gaussian_report(5.0, relation=NeighbourRelation.REPLACE_ONE))
    with pytest.raises(LedgerError, match="transition"):
        ledger.record(gaussian_report(5.0, unit=PrivacyUnit.TRANSITION))
    baseline = PrivacyReport.non_private(UNIT, RELATION, system="primorl")
    with pytest.raises(BudgetExceededError, match="not differentially private"):
        ledger.record(baseline)
    ledger.record(gaussian_report(5.0), run_id="run-1")
    with pytest.raises(LedgerError, match="already recorded"):
        ledger.record(gaussian_report(5.0), run_id="run-1")
    assert len(ledger.entries) == 1


SWOR = dp_event.SelfComposedDpEvent(
    dp_event.SampledWithoutReplacementDpEvent(1000, 10, dp_event.GaussianDpEvent(2.0)), 50
)
TRUNCATED = dp_event.TruncatedSubsampledGaussianDpEvent(1000, 0.1, 3, 4.0)


@pytest.mark.parametrize(
    ("ledger_backend", "relation", "event", "report_backend"),
    [
        ("pld", NeighbourRelation.REPLACE_ONE, SWOR, "rdp"),  # only RDP accounts this event
        ("rdp", NeighbourRelation.ADD_REMOVE, TRUNCATED, "pld"),  # only PLD accounts this event
    ],
)
def test_unsupported_events_fall_back_to_the_reports_epsilon_delta(
    dataset, ledger_backend, relation, event, report_backend
):
    """Documented fallback: a run whose events the ledger's backend cannot account enters the
    composition as ApproxDpEvent(ε_run, δ_run); other runs keep their exact events. A fallback
    run stated at the ledger's whole δ leaves no δ for the rest and is refused with the reason."""
    ledger = BudgetLedger.init(
        dataset, epsilon=10.0, delta=DELTA, unit=UNIT, relation=relation, backend=ledger_backend
    )
    g = gaussian_report(8.0, relation=relation)
    release = Release("gradients", "gaussian", 1.0, "l2", {"noise_multiplier": 2.0}, 1, 1, event)

    def report_at(delta: float) -> PrivacyReport:
        return PrivacyReport.build(
            UNIT, relation, [release], delta, backend=report_backend, system="primorl"
        )

    fallback = report_at(DELTA / 10)
    with pytest.raises(accounting.AccountingError):
        accounting.check_supported(fallback.event, relation=relation, backend=ledger_backend)
    ledger.record(g)
    ledger.record(fallback)
    expected = accounting.epsilon(
        dp_event.ComposedDpEvent([g.event, ApproxDpEvent(fallback.epsilon, DELTA / 10)]),
        DELTA,
        relation=relation,
        backend=ledger_backend,
    )
    assert ledger.spent() == expected

    with pytest.raises(LedgerError, match="smaller δ"):
        ledger.record(report_at(DELTA))
    assert len(ledger.entries) == 2


def test_failed_write_leaves_ledger_and_directory_clean(dataset, monkeypatch):
    """Atomicity: if the rename fails, the ledger keeps its old content, the temp file is
    removed and the in-memory ledger does not claim the spend."""
    ledger = new_ledger(dataset)
    ledger.record(gaussian_report(5.0))
    before = ledger.path.read_bytes()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        ledger.record(gaussian_report(5.0))
    monkeypatch.undo()
    assert ledger.path.read_bytes() == before
    assert temp_files(dataset.parent) == []
    assert len(ledger.entries) == 1


def test_table_lists_runs_and_budget(dataset):
    """Display: the ledger table shows each run and the spent/total budget."""
    ledger = new_ledger(dataset)
    ledger.record(gaussian_report(5.0), label="baseline [v1]")
    console = Console(record=True, width=240)
    console.print(ledger.to_table())
    text = console.export_text()
    assert "baseline [v1]" in text and "primorl" in text
    assert f"spent ε={fmt_number(ledger.spent(), 4)} of ε_total=2" in text


# -- crash safety and concurrency ------------------------------------------------------------


def writer(ledger: Path, count: int, z: float, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(ledger), str(count), str(z), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkill_never_loses_a_recorded_spend(dataset):
    """Crash safety: SIGKILL a writer at various moments; the ledger always loads as valid
    JSON and holds every run id the writer reported as recorded (at most one more per kill:
    recorded, killed before printing). A kill between temp write and rename leaves a stale temp
    file that the next writer removes."""
    ledger = new_ledger(dataset, epsilon=50.0)
    printed: set[str] = set()
    kills = 0
    for delay in (0.0, 0.03, 0.1, 0.25):
        proc = writer(ledger.path, 10_000, 200.0)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        lines = proc.stdout.read().splitlines()
        printed |= {line.split()[1] for line in lines if line.startswith("ok ")}
        recorded = {e["run_id"] for e in json.loads(ledger.path.read_text())["entries"]}
        assert printed <= recorded
        assert len(recorded - printed) <= kills

    # Killed inside the 3rd rename: temp written and fsynced, ledger not yet replaced.
    proc = writer(ledger.path, 5, 200.0, "--kill-at-replace", "3")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    ids = [line.split()[1] for line in out.splitlines() if line.startswith("ok ")]
    assert len(ids) == 2
    printed |= set(ids)
    reloaded = BudgetLedger.load(ledger.path)
    recorded = {e.run_id for e in reloaded.entries}
    assert printed <= recorded and len(recorded - printed) <= kills
    assert temp_files(dataset.parent)  # the crashed writer's temp file
    reloaded.record(gaussian_report(200.0))
    assert temp_files(dataset.parent) == []
    assert len(BudgetLedger.load(ledger.path).entries) == len(recorded) + 1


def test_concurrent_writers_lose_nothing_and_never_overspend(dataset):
    """Concurrency: three processes record at once under a budget that admits exactly 20 of
    their 30 spends; the ledger ends with exactly the 20 spends they were told were recorded,
    within budget, and no temp files."""
    z = 10.0
    one = gaussian_report(z).event  # what the writer records (same release, same event)
    eps_20, eps_21 = eps_of(*[one] * 20), eps_of(*[one] * 21)
    ledger = new_ledger(dataset, epsilon=(eps_20 + eps_21) / 2)
    go = dataset.parent / "go"
    procs = [writer(ledger.path, 10, z, "--go", str(go)) for _ in range(3)]
    for p in procs:  # all three have started and wait at the barrier
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
    lines = [line for out, _ in results for line in out.splitlines()]
    ok = {line.split()[1] for line in lines if line.startswith("ok ")}
    assert len(ok) == 20 and lines.count("refused") == 10
    final = BudgetLedger.load(ledger.path)
    assert {e.run_id for e in final.entries} == ok
    assert final.spent() == eps_20 <= final.epsilon_total
    assert temp_files(dataset.parent) == []
