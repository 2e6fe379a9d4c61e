"""The ledger's side of a private run's transaction: a reservation counts against the budget
from the moment it is written (fail closed), `complete` settles it with the final report,
`release` only with a stated reason; settlements are links of the tamper-evident chain, and
concurrent reserving writers never overspend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from privrl.data.io import save_hdf5
from privrl.privacy.ledger import BudgetExceededError, BudgetLedger, LedgerError, registry_dir
from tests.privacy.test_ledger import (
    edit,
    eps_of,
    gaussian_report,
    make_dataset,
    new_ledger,
    rechain,
    temp_files,
    writer,
)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return save_hdf5(make_dataset(), tmp_path / "patients.h5")


def test_a_reservation_counts_at_once_and_completing_it_counts_the_final_report(dataset):
    """Property: spent() includes a pending reservation; after `complete` the final report
    counts instead of the planned one; `entries` shows one entry per run with its status."""
    ledger = new_ledger(dataset, epsilon=10.0)
    planned, final = gaussian_report(2.0, steps=4), gaussian_report(2.0, steps=2)
    entry = ledger.reserve(planned, label="dp-sgd", out=dataset.parent / "run")
    assert ledger.spent() == pytest.approx(eps_of(planned.event))
    (view,) = ledger.entries
    assert (view.status, view.label, view.out) == (
        "reserved",
        "dp-sgd",
        str((dataset.parent / "run").resolve()),
    )
    assert ledger.pending(dataset.parent / "run") == (view,)
    assert ledger.pending(dataset.parent / "other") == ()
    ledger.complete(entry.run_id, final)
    reopened = BudgetLedger.for_dataset(dataset)
    assert reopened is not None and reopened.spent() == pytest.approx(eps_of(final.event))
    (view,) = reopened.entries
    assert view.status == "complete" and view.privacy_report() == final
    assert len(reopened.records) == 2 and reopened.pending() == ()


def test_a_reservation_that_does_not_fit_is_refused_and_writes_nothing(dataset):
    ledger = new_ledger(dataset, epsilon=1.05 * eps_of(gaussian_report(3.0).event))
    ledger.reserve(gaussian_report(3.0))
    text = ledger.path.read_text()
    with pytest.raises(BudgetExceededError, match="refuses this run"):
        ledger.reserve(gaussian_report(3.0))
    assert ledger.path.read_text() == text


def test_release_stops_counting_only_with_a_reason_and_settles_once(dataset):
    ledger = new_ledger(dataset, epsilon=10.0)
    entry = ledger.reserve(gaussian_report(1.5))
    with pytest.raises(LedgerError, match="needs a reason"):
        ledger.release(entry.run_id, "  ")
    ledger.release(entry.run_id, "the run directory was never written")
    assert ledger.spent() == 0.0
    (view,) = ledger.entries
    assert view.status == "released" and "never written" in view.note
    with pytest.raises(LedgerError, match="already settled"):
        ledger.complete(entry.run_id)
    with pytest.raises(LedgerError, match="already settled"):
        ledger.release(entry.run_id, "again")
    with pytest.raises(LedgerError, match="no reservation"):
        ledger.complete("no-such-run")


def test_completing_above_both_the_budget_and_the_reservation_is_refused(dataset):
    """Property: a final report may not take the spend above the budget unless it is no more
    than what is already counted; the reservation keeps counting after a refusal."""
    ledger = new_ledger(dataset, epsilon=eps_of(gaussian_report(2.0).event) * 1.2)
    entry = ledger.reserve(gaussian_report(2.0))
    with pytest.raises(BudgetExceededError, match="needs more than it reserved"):
        ledger.complete(entry.run_id, gaussian_report(1.0))
    assert [e.status for e in ledger.entries] == ["reserved"]
    ledger.complete(entry.run_id, gaussian_report(4.0))  # less than reserved: always fits
    assert ledger.spent() == pytest.approx(eps_of(gaussian_report(4.0).event))


@pytest.mark.parametrize(
    "change, detail",
    [
        (lambda d: d["entries"].pop(), "removed"),  # drop the completion
        (lambda d: d["entries"][0].update(kind=""), "settles no reservation"),
        (lambda d: d["entries"][1].update(settles="x"), "settles no reservation"),
        (lambda d: d["entries"][1]["report"].update(epsilon=0.01), "edited"),  # a lower spend
    ],
)
def test_editing_reservations_or_settlements_breaks_the_chain(dataset, change, detail):
    ledger = new_ledger(dataset, epsilon=5.0)
    entry = ledger.reserve(gaussian_report(2.0))
    ledger.complete(entry.run_id)
    edit(ledger.path, change)
    with pytest.raises(LedgerError, match=detail):
        ledger.spent()


def test_a_consistent_rewrite_cannot_settle_twice_or_release_without_a_reason(dataset):
    ledger = new_ledger(dataset, epsilon=5.0)
    entry = ledger.reserve(gaussian_report(2.0))
    ledger.release(entry.run_id, "never published")

    def twice(d: dict) -> None:
        d["entries"].append({**d["entries"][1], "run_id": "dup"})
        rechain(d)

    saved = ledger.path.read_text()
    edit(ledger.path, twice)
    with pytest.raises(LedgerError, match="settled twice"):
        BudgetLedger.load(ledger.path, verify=False)
    ledger.path.write_text(saved)

    def silent(d: dict) -> None:
        d["entries"][1]["note"] = ""
        rechain(d)

    edit(ledger.path, silent)
    with pytest.raises(LedgerError, match="without a reason"):
        BudgetLedger.load(ledger.path, verify=False)


def test_show_lists_a_reservation_as_reserved_outcome_unknown(dataset):
    ledger = new_ledger(dataset, epsilon=5.0)
    ledger.reserve(gaussian_report(2.0), label="dp-apvi", out=dataset.parent / "runs" / "a")
    console = Console(width=250, record=True)
    console.print(ledger.to_table())
    text = console.export_text()
    assert "reserved, outcome unknown" in text and "dp-apvi" in text
    assert str((dataset.parent / "runs" / "a").resolve()) in text
    assert "ledger settle" in text
    (run,) = ledger.to_dict()["runs"]
    assert run["status"] == "reserved" and run["out"].endswith("a")


def test_concurrent_reserving_writers_lose_nothing_and_never_overspend(dataset):
    """Concurrency: three processes reserve and complete at once under a budget that admits
    exactly 20 of their 30 spends: exactly the 20 they were told were spent are complete, none
    is left reserved, within budget, chain and registry consistent, no temp files."""
    z = 10.0
    one = gaussian_report(z).event
    eps_20, eps_21 = eps_of(*[one] * 20), eps_of(*[one] * 21)
    ledger = new_ledger(dataset, epsilon=(eps_20 + eps_21) / 2)
    go = dataset.parent / "go"
    procs = [writer(ledger.path, 10, z, "--go", str(go), "--reserve") for _ in range(3)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    results = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
    lines = [line for out, _ in results for line in out.splitlines()]
    ok = {line.split()[1] for line in lines if line.startswith("ok ")}
    assert len(ok) == 20 and lines.count("refused") == 10
    final = BudgetLedger.load(ledger.path)
    assert {e.run_id for e in final.entries} == ok
    assert {e.status for e in final.entries} == {"complete"}
    assert final.spent() == pytest.approx(eps_20) and final.spent() <= final.epsilon_total
    entry = json.loads((registry_dir() / f"{final.content_sha256}.json").read_text())
    assert entry["length"] == 40 and entry["head"] == final.head
    assert temp_files(dataset.parent) == [] and temp_files(registry_dir()) == []
