"""Tests of BudgetLedger: identity by content, tamper evidence, strict loading, composed
spending, refusal, crash safety and concurrency."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from dp_accounting import dp_event
from gymnasium import spaces
from rich.console import Console

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.io import export_table, import_table, save_hdf5
from privrl.privacy import accounting
from privrl.privacy import ledger as ledger_mod
from privrl.privacy.events import ApproxDpEvent
from privrl.privacy.ledger import (
    MARK_ATTR,
    BudgetExceededError,
    BudgetLedger,
    LedgerError,
    content_fingerprint,
    dataset_identity,
    default_ledger_path,
    fingerprint,
    ledgered,
    registry_dir,
)
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport, fmt_number, json_safe
from privrl.privacy.units import NeighbourRelation, PrivacyUnit

DELTA = 1e-5
UNIT, RELATION = PrivacyUnit.TRAJECTORY, NeighbourRelation.ADD_REMOVE
WRITER = Path(__file__).with_name("ledger_writer.py")


def make_dataset(seed: int = 0, n_ep: int = 40, horizon: int = 5) -> TrajectoryDataset:
    rng = np.random.default_rng(seed)
    n_t = n_ep * horizon
    terminated = np.zeros(n_t, bool)
    terminated[horizon - 1 :: horizon] = True
    return TrajectoryDataset(
        observations=rng.integers(0, 6, n_t + n_ep),
        actions=rng.integers(0, 3, n_t),
        rewards=rng.normal(size=n_t),
        terminated=terminated,
        truncated=np.zeros(n_t, bool),
        episode_offsets=np.arange(n_ep + 1, dtype=np.int64) * horizon,
        behaviour_probs=np.full(n_t, 1 / 3),
        metadata=DatasetMetadata(spaces.Discrete(6), spaces.Discrete(3), horizon=horizon),
    )


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A small privrl dataset file."""
    return save_hdf5(make_dataset(), tmp_path / "patients.h5")


def gaussian_report(z: float, steps: int = 1, *, relation=RELATION, unit=UNIT) -> PrivacyReport:
    event = dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z), steps)
    release = Release("gradients", "gaussian", 1.0, "l2", {"noise_multiplier": z}, steps, 1, event)
    return PrivacyReport.build(unit, relation, [release], DELTA, system="primorl")


def eps_of(*events: dp_event.DpEvent) -> float:
    return accounting.epsilon(dp_event.ComposedDpEvent(list(events)), DELTA, relation=RELATION)


def temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.endswith(".tmp")]


def new_ledger(dataset: Path, epsilon: float = 2.0, **kwargs) -> BudgetLedger:
    return BudgetLedger.init(
        dataset, epsilon=epsilon, delta=DELTA, unit=UNIT, relation=RELATION, **kwargs
    )


def edit(path: Path, change) -> None:
    """Edit a ledger file by hand, the way a user with a text editor would."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=1))


def rechain(data: dict) -> None:
    """Recompute a ledger's whole hash chain after an edit (a consistent rewrite of the JSON)."""
    state = ledger_mod._State(
        version=2,
        ledger_id=data["ledger_id"],
        content_sha256=data["dataset"]["content_sha256"],
        dataset_file=data["dataset"]["file"],
        dataset_sha256=None,
        dataset_size=None,
        unit=PrivacyUnit(data["unit"]),
        relation=NeighbourRelation(data["relation"]),
        backend=data["backend"],
        epsilon_total=float(data["budget"]["epsilon"]),
        delta=float(data["budget"]["delta"]),
        created=data["created"],
        entries=[],
        reports={},
    )
    prev = ledger_mod._genesis(state.header())
    data["chain"] = {"genesis": prev, "length": len(data["entries"])}
    for e in data["entries"]:
        e["prev"] = prev
        e["hash"] = prev = ledger_mod._link(prev, ledger_mod.LedgerEntry.from_dict(e, chained=True))
    data["chain"]["head"] = prev


# -- identity: the episodes, not the file ----------------------------------------------------------


def test_init_load_and_for_dataset(dataset, tmp_path):
    """Structural rule: the ledger lives at <dataset>.ledger.json, is keyed by the episodes'
    content fingerprint (also stored in the file), registers itself, marks the dataset, round-
    trips through load/for_dataset, and is never silently overwritten."""
    ledger = new_ledger(dataset)
    assert ledger.path == default_ledger_path(dataset) == tmp_path / "patients.h5.ledger.json"
    ds = make_dataset()
    content = content_fingerprint({k: getattr(ds, k) for k in ledger_mod.CONTENT_FIELDS})
    assert ledger.content_sha256 == content == dataset_identity(dataset).content_sha256
    raw = json.loads(ledger.path.read_text())
    assert raw["schema_version"] == 2
    assert raw["dataset"] == {"content_sha256": content, "file": "patients.h5"}  # relative
    with h5py.File(dataset, "r") as f:
        mark = json.loads(f.attrs[MARK_ATTR])
    assert mark["ledger_id"] == ledger.ledger_id and mark["genesis"] == ledger.genesis
    registered = json.loads((registry_dir() / f"{content}.json").read_text())
    assert registered["ledger"] == str(ledger.path.resolve())
    assert registered["files"] == [str(dataset.resolve())]

    loaded = BudgetLedger.load(ledger.path)
    same = ("ledger_id", "content_sha256", "unit", "relation", "backend", "epsilon_total", "delta")
    assert all(getattr(loaded, k) == getattr(ledger, k) for k in same)
    assert loaded.entries == () and loaded.spent() == 0.0 and loaded.remaining() == 2.0
    assert BudgetLedger.for_dataset(dataset) is not None
    assert BudgetLedger.for_dataset(save_hdf5(make_dataset(seed=1), tmp_path / "o.h5")) is None
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"x")
    assert BudgetLedger.for_dataset(junk) is None  # not a dataset: the command's read fails

    ledger.record(gaussian_report(5.0))
    with pytest.raises(LedgerError, match="already exists"):
        new_ledger(dataset)
    assert len(BudgetLedger.load(ledger.path).entries) == 1
    fresh = new_ledger(dataset, epsilon=1.0, overwrite=True)
    assert fresh.entries == () and fresh.epsilon_total == 1.0
    # A ledger object opened before the re-initialisation refuses to write on the new one.
    with pytest.raises(LedgerError, match="re-initialised"):
        ledger.record(gaussian_report(5.0))


def test_copies_renames_and_reexports_share_one_budget(dataset, tmp_path):
    """Finding 1 (budget escape by copy): a byte-identical copy, a renamed file and an
    HDF5 → Parquet → HDF5 re-export of the same episodes all resolve to the one ledger, so a
    spend through any of them is refused once the budget is gone; `ledger show` lists them."""
    ledger = new_ledger(dataset, epsilon=1.0)
    run = gaussian_report(5.0)
    assert run.epsilon < 1.0 < eps_of(run.event, run.event)  # one fits, two do not
    ledger.record(run)

    copy = tmp_path / "copy.h5"
    shutil.copyfile(dataset, copy)
    renamed = tmp_path / "elsewhere" / "renamed.h5"
    renamed.parent.mkdir()
    shutil.copyfile(dataset, renamed)
    table = tmp_path / "export.parquet"
    mapping = export_table(make_dataset(), table)
    reexport = save_hdf5(import_table(table, mapping), tmp_path / "reexport.h5")
    for path in (copy, renamed, reexport):
        found = BudgetLedger.for_dataset(path)
        assert found is not None and found.path == ledger.path, path
        with pytest.raises(BudgetExceededError):
            found.check(run)
    # Without the mark (a re-export has none), the registry alone finds the ledger.
    assert dataset_identity(reexport).mark is None
    assert set(ledger.known_files()) == {
        str(p.resolve()) for p in (dataset, copy, renamed, reexport)
    }


def test_metadata_edits_keep_the_ledger(dataset, tmp_path):
    """Identity rule: the fingerprint covers the episodes, not the metadata."""
    ledger = new_ledger(dataset)
    ds = make_dataset()
    edited = TrajectoryDataset(
        **{k: getattr(ds, k) for k in ledger_mod.CONTENT_FIELDS},
        metadata=DatasetMetadata(
            spaces.Discrete(6), spaces.Discrete(3), env_id="Renamed-v1", discount=0.5
        ),
    )
    other = save_hdf5(edited, tmp_path / "edited.h5")
    found = BudgetLedger.for_dataset(other)
    assert found is not None and found.ledger_id == ledger.ledger_id


def test_marking_does_not_change_the_fingerprint(dataset):
    """Identity rule: `init` writes the `privrl_ledger` attribute into the dataset; the
    recomputed fingerprint is the one stored before."""
    before = dataset_identity(dataset, recompute=True).content_sha256
    new_ledger(dataset)
    after = dataset_identity(dataset, recompute=True)
    assert after.mark is not None and after.content_sha256 == before == after.stored


def test_files_without_the_attribute_are_fingerprinted_from_the_arrays(dataset, monkeypatch):
    """Older files (no `content_sha256` attribute) get their fingerprint computed from the
    arrays, streamed in blocks (a tiny block forces many), equal to the in-memory one."""
    with h5py.File(dataset, "r+") as f:
        stored = f.attrs["content_sha256"]
        del f.attrs["content_sha256"]
    monkeypatch.setattr(ledger_mod, "_HASH_BLOCK", 64)
    ident = dataset_identity(dataset)
    assert ident.stored is None and ident.content_sha256 == stored
    ledger = new_ledger(dataset)
    assert ledger.content_sha256 == stored
    assert dataset_identity(dataset).stored == stored  # init stores it for later runs


def test_run_check_trusts_the_stored_fingerprint_verify_recomputes(dataset, tmp_path):
    """What is checked when: the check before a run reads only the header (it trusts the
    stored fingerprint); `verify` re-hashes the arrays and catches episodes edited in place
    (stored attribute stale) and a forged attribute."""
    ledger = new_ledger(dataset)
    ledger.verify(dataset)
    with h5py.File(dataset, "r+") as f:
        f["rewards"][0] += 1.0  # the stored content_sha256 is now stale
    assert BudgetLedger.for_dataset(dataset) is not None  # fast path: header only
    with pytest.raises(LedgerError, match="do not match its stored fingerprint"):
        ledger.verify(dataset)
    with pytest.raises(LedgerError, match="do not match its stored fingerprint"):
        BudgetLedger.load(ledger.path)

    other = save_hdf5(make_dataset(seed=3), tmp_path / "other.h5")
    with h5py.File(other, "r+") as f:  # forge the attribute to borrow another file's ledger
        f.attrs["content_sha256"] = ledger.content_sha256
    forged = BudgetLedger.for_dataset(other)
    assert forged is not None and forged.path == ledger.path  # spends on the ledger: fails safe
    with pytest.raises(LedgerError, match="do not match its stored fingerprint"):
        forged.verify(other)


def test_ledger_of_other_episodes_is_refused(dataset, tmp_path):
    """Structural rule: a ledger cannot be applied to other episodes (explicit ledger path,
    or a dataset replaced under its ledger)."""
    ledger = new_ledger(dataset)
    other = save_hdf5(make_dataset(seed=1), tmp_path / "other.h5")
    with pytest.raises(LedgerError, match="another dataset's ledger"):
        BudgetLedger.for_dataset(other, ledger_path=ledger.path)
    shutil.copyfile(other, dataset)  # replace the file behind the ledger's back
    with pytest.raises(LedgerError, match="another dataset's ledger"):
        BudgetLedger.for_dataset(dataset)
    dataset.unlink()
    with pytest.raises(LedgerError, match="not found"):
        BudgetLedger.load(ledger.path)
    assert BudgetLedger.load(ledger.path, verify=False).epsilon_total == 2.0


# -- the dataset's mark ---------------------------------------------------------------------------


def test_marked_dataset_whose_ledger_is_lost_is_refused(dataset, tmp_path, monkeypatch):
    """Finding 2: a dataset marked as ledgered whose ledger is not found — deleted, or a copy
    taken to a machine with an empty registry — is refused, not run unledgered."""
    ledger = new_ledger(dataset)
    elsewhere = tmp_path / "machine2"
    elsewhere.mkdir()
    copy = elsewhere / "copy.h5"
    shutil.copyfile(dataset, copy)
    monkeypatch.setenv("PRIVRL_LEDGER_REGISTRY", str(tmp_path / "empty-registry"))
    with pytest.raises(LedgerError, match=r"bound to a privacy ledger \(id [0-9a-f]{12}…\)"):
        BudgetLedger.for_dataset(copy)
    assert ledgered(copy) is not None
    # Restoring the ledger next to the copy makes it usable (and registers it there).
    shutil.copyfile(ledger.path, default_ledger_path(copy))
    assert BudgetLedger.for_dataset(copy).ledger_id == ledger.ledger_id  # type: ignore[union-attr]

    monkeypatch.setenv("PRIVRL_LEDGER_REGISTRY", str(tmp_path / "registry-3"))
    ledger.path.unlink()
    with pytest.raises(LedgerError, match="restore the ledger"):
        BudgetLedger.for_dataset(dataset)


def test_deleted_ledger_is_refused_through_the_registry(dataset, tmp_path):
    """Finding 2: with the registry entry present, a deleted ledger is refused even for a file
    without the mark (a re-export)."""
    ledger = new_ledger(dataset)
    table = tmp_path / "t.parquet"
    reexport = save_hdf5(
        import_table(table, export_table(make_dataset(), table)), tmp_path / "r.h5"
    )
    ledger.path.unlink()
    for path in (dataset, reexport):
        with pytest.raises(LedgerError, match="that was not found"):
            BudgetLedger.for_dataset(path)
    with pytest.raises(LedgerError, match="--force"):
        new_ledger(reexport)  # a new ledger for the same episodes needs an explicit overwrite


def test_init_refuses_a_second_ledger_for_the_same_episodes(dataset, tmp_path):
    """Identity rule: a copy already has a budget; `overwrite` starts a new one, after which
    the old ledger is refused (one budget per episodes)."""
    old = new_ledger(dataset)
    copy = tmp_path / "copy.h5"
    shutil.copyfile(dataset, copy)
    with pytest.raises(LedgerError, match="already have a privacy ledger"):
        new_ledger(copy)
    fresh = new_ledger(copy, overwrite=True)
    assert fresh.ledger_id != old.ledger_id
    with pytest.raises(LedgerError, match="another ledger"):
        BudgetLedger.for_dataset(dataset)


def test_a_copied_ledger_is_refused_a_moved_one_is_followed(dataset, tmp_path):
    """Identity rule: copying the ledger next to a copy of the dataset would fork the budget
    and is refused; moving dataset and ledger together keeps working (registry updated)."""
    ledger = new_ledger(dataset)
    ledger.record(gaussian_report(5.0))
    copy = tmp_path / "copy.h5"
    shutil.copyfile(dataset, copy)
    shutil.copyfile(ledger.path, default_ledger_path(copy))
    with pytest.raises(LedgerError, match="is a copy of the ledger"):
        BudgetLedger.for_dataset(copy)
    default_ledger_path(copy).unlink()

    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.move(dataset, moved / dataset.name)
    shutil.move(ledger.path, moved / ledger.path.name)
    found = BudgetLedger.for_dataset(moved / dataset.name)
    assert found is not None and len(found.entries) == 1
    found.record(gaussian_report(5.0))
    entry = json.loads((registry_dir() / f"{ledger.content_sha256}.json").read_text())
    assert entry["ledger"] == str((moved / ledger.path.name).resolve()) and entry["length"] == 2


# -- strict loading and tamper evidence -----------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d["budget"].update(epsilon=float("inf")), "non-finite number Infinity"),
        (lambda d: d["budget"].update(epsilon=float("nan")), "non-finite number NaN"),
        (lambda d: d["budget"].update(epsilon="inf"), "budget.epsilon must be a number"),
        (lambda d: d["budget"].update(epsilon=True), "budget.epsilon must be a number"),
        (lambda d: d["budget"].update(epsilon=-1.0), "budget.epsilon must be > 0"),
        (lambda d: d["budget"].update(delta=1.0), r"budget.delta must be in \[0, 1\)"),
        (lambda d: d["budget"].update(delta=-1e-9), r"budget.delta must be in \[0, 1\)"),
        (lambda d: d.update(unit="martian"), "unit"),
        (lambda d: d.update(relation="sideways"), "relation"),
        (lambda d: d.update(backend="abacus"), "unknown backend"),
        (lambda d: d.update(schema_version=3), "newer than this privrl"),
        (lambda d: d.update(ledger_id="x"), "ledger_id is malformed"),
        (lambda d: d["dataset"].update(content_sha256="abc"), "not a SHA-256"),
        (lambda d: d.update(entries={}), "'entries' is not a list"),
        (lambda d: d["entries"][0].pop("run_id"), "has no run id"),
        (lambda d: d["entries"][0].pop("hash"), "chain hashes"),
        (lambda d: d["entries"].append(d["entries"][0]), "appears twice"),
        (lambda d: d["entries"][0]["report"].update(epsilon="inf"), "finite ε"),
        (lambda d: d["entries"][0]["report"].update(private=False), "finite ε"),
        (lambda d: d["entries"][0]["report"].update(delta=2.0), "outside"),
        (lambda d: d["entries"][0]["report"].update(unit="user"), "not the ledger's"),
        (lambda d: d["entries"][0]["report"].pop("releases"), "releases"),
    ],
)
def test_every_loaded_field_is_validated(dataset, change, match):
    """Finding 3 (fail open): every field of a loaded ledger is checked strictly — a budget of
    Infinity, a δ outside [0, 1), unknown unit/relation/backend, malformed entries and
    non-private or infinite-ε reports are refused before the chain is even looked at."""
    ledger = new_ledger(dataset)
    ledger.record(gaussian_report(5.0))
    edit(ledger.path, change)
    with pytest.raises(LedgerError, match=match):
        BudgetLedger.load(ledger.path, verify=False)
    with pytest.raises(LedgerError):
        ledger.check(gaussian_report(50.0))


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        (lambda d: d["budget"].update(epsilon=100.0), "header"),
        (lambda d: d.update(backend="pld"), "header"),
        (lambda d: d["budget"].update(delta=0.5), "header"),
        (lambda d: d["entries"][0]["report"].update(epsilon=0.001), "entry 1"),
        (
            lambda d: d["entries"][1]["report"]["releases"][0]["noise"].update(noise_multiplier=99),
            "entry 2",
        ),
        (lambda d: d["entries"][0].update(label="innocent"), "entry 1"),
        (lambda d: d["entries"].pop(), "removed"),
        (lambda d: d.update(entries=[]), "removed"),
        (lambda d: d["entries"].reverse(), "does not follow"),
        (lambda d: d.pop("chain"), "chain is missing"),
    ],
)
def test_hand_edits_break_the_chain(dataset, change, detail):
    """Finding 3 (tamper evidence): raising the budget, editing a spend or a label, removing,
    emptying or reordering entries breaks the hash chain and is refused with a LedgerError
    that says the ledger was modified outside privrl."""
    ledger = new_ledger(dataset)
    ledger.record(gaussian_report(5.0), label="a")
    ledger.record(gaussian_report(6.0), label="b")
    edit(ledger.path, change)
    with pytest.raises(LedgerError, match="modified outside privrl") as info:
        BudgetLedger.for_dataset(dataset)
    assert detail in str(info.value) and "can no longer be trusted" in str(info.value)


def test_consistent_rewrites_of_the_json_alone_are_detected(dataset):
    """Finding 3: rewriting the JSON with a recomputed chain is caught by the registry's head
    (truncation, emptied entries, edited spend) and by the dataset's mark (raised budget),
    each on its own."""
    ledger = new_ledger(dataset)
    ledger.record(gaussian_report(5.0))
    ledger.record(gaussian_report(6.0))
    original = ledger.path.read_text()

    def drop_last(d):
        d["entries"].pop()

    for change in (drop_last, lambda d: d.update(entries=[])):
        edit(ledger.path, lambda d, change=change: (change(d), rechain(d)))
        with pytest.raises(LedgerError, match="recorded runs were removed or rewritten"):
            BudgetLedger.for_dataset(dataset)
        ledger.path.write_text(original)

    edit(ledger.path, lambda d: (d["budget"].update(epsilon=1e6), rechain(d)))
    with pytest.raises(LedgerError, match="registered one"):
        BudgetLedger.for_dataset(dataset)
    (registry_dir() / f"{ledger.content_sha256}.json").unlink()  # without the registry ...
    with pytest.raises(LedgerError, match="the dataset was marked with"):
        BudgetLedger.for_dataset(dataset)  # ... the mark in the dataset still catches it


def test_documented_limit_registry_deleted_then_truncated(dataset):
    """Documented limitation (module docstring): someone who deletes the registry entry and
    then truncates the ledger consistently is not detected — the ledger is re-registered as
    found. The header (budget) stays protected by the dataset's mark."""
    ledger = new_ledger(dataset)
    ledger.record(gaussian_report(5.0))
    (registry_dir() / f"{ledger.content_sha256}.json").unlink()
    edit(ledger.path, lambda d: (d.update(entries=[]), rechain(d)))
    found = BudgetLedger.for_dataset(dataset)
    assert found is not None and found.entries == ()


def test_ledger_ahead_of_the_registry_is_accepted(dataset, monkeypatch):
    """Crash safety: a crash between the ledger's write and the registry's leaves the ledger
    one run ahead; that state loads, and the next write brings the registry up to date."""
    ledger = new_ledger(dataset, epsilon=10.0)
    real = ledger_mod._update_registry
    monkeypatch.setattr(ledger_mod, "_update_registry", lambda *a: None)
    ledger.record(gaussian_report(5.0))
    monkeypatch.setattr(ledger_mod, "_update_registry", real)
    entry = json.loads((registry_dir() / f"{ledger.content_sha256}.json").read_text())
    assert entry["length"] == 0
    found = BudgetLedger.for_dataset(dataset)
    assert found is not None and len(found.entries) == 1
    found.record(gaussian_report(5.0))
    entry = json.loads((registry_dir() / f"{ledger.content_sha256}.json").read_text())
    assert entry["length"] == 2 and entry["head"] == found.head


def test_a_stale_handle_catches_up_with_the_registry(dataset):
    """Concurrency: a handle opened before another one recorded sees the registry ahead of its
    in-memory state, re-reads the ledger and carries on (no false tamper alarm)."""
    first = new_ledger(dataset, epsilon=10.0)
    second = BudgetLedger.for_dataset(dataset)
    assert second is not None
    second.record(gaussian_report(5.0))
    first._check_registry()  # the registry is ahead of `first`'s memory
    assert len(first._entries) == 1
    first.record(gaussian_report(5.0))
    assert len(second.entries) == 2


def test_malformed_ledger_is_an_error(dataset):
    """Structural rule: a truncated or foreign file is reported, never read as an empty ledger."""
    ledger = new_ledger(dataset)
    ledger.path.write_text('{"format": "privrl.ledger", "entries": [')
    with pytest.raises(LedgerError, match="not valid JSON"):
        BudgetLedger.load(ledger.path)
    ledger.path.write_text('{"entries": []}')
    with pytest.raises(LedgerError, match="not a valid privrl ledger"):
        BudgetLedger.load(ledger.path)


def test_a_corrupt_registry_entry_is_refused(dataset):
    """Fail closed: an unreadable registry entry is an error, not a missing one."""
    ledger = new_ledger(dataset)
    (registry_dir() / f"{ledger.content_sha256}.json").write_text('{"format": "nope"}')
    with pytest.raises(LedgerError, match=r"registry entry .* is invalid"):
        BudgetLedger.for_dataset(dataset)


# -- refusals of bad input ------------------------------------------------------------------------


def test_init_refuses_files_that_are_not_privrl_datasets(tmp_path):
    """Finding 5: a ledger binds a privrl dataset; a text file or a foreign HDF5 file is
    refused with a LedgerError and no ledger is written."""
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.zeros(3)
    for path in (text, foreign, tmp_path / "missing.h5"):
        with pytest.raises(LedgerError, match=r"not a privrl dataset|not found"):
            new_ledger(path)
        assert not default_ledger_path(path).exists()


def test_directories_in_place_of_the_ledger_or_its_lock(dataset):
    """Finding 5: a ledger path or a `.lock` that is a directory gives a LedgerError (a clean
    CLI error), not an IsADirectoryError."""
    default_ledger_path(dataset).mkdir()
    with pytest.raises(LedgerError, match="is a directory"):
        new_ledger(dataset)
    with pytest.raises(LedgerError, match="is a directory"):
        BudgetLedger.for_dataset(dataset)
    default_ledger_path(dataset).rmdir()
    lock = dataset.with_name(dataset.name + ".ledger.json.lock")
    lock.mkdir()
    with pytest.raises(LedgerError, match="directory"):
        new_ledger(dataset)
    lock.rmdir()
    ledger = new_ledger(dataset)
    Path(str(lock)).unlink()
    lock.mkdir()
    with pytest.raises(LedgerError, match="could not be opened"):
        ledger.record(gaussian_report(5.0))


def test_ledgered_names_the_reason(dataset, tmp_path):
    """The overwrite check of `data import`/`collect`: a sidecar ledger, the mark, or a
    registry entry each make a file ledgered."""
    assert ledgered(dataset) is None
    ledger = new_ledger(dataset)
    assert "has a privacy ledger" in (ledgered(dataset) or "")
    copy = tmp_path / "copy.h5"
    shutil.copyfile(dataset, copy)
    assert "bound to the privacy ledger" in (ledgered(copy) or "")
    table = tmp_path / "t.parquet"
    reexport = save_hdf5(
        import_table(table, export_table(make_dataset(), table)), tmp_path / "r.h5"
    )
    assert "registry" in (ledgered(reexport) or "")
    assert ledger.content_sha256 is not None


def test_registry_location(monkeypatch, tmp_path):
    """The registry is $PRIVRL_LEDGER_REGISTRY, else ~/.local/share/privrl/ledgers."""
    monkeypatch.setenv("PRIVRL_LEDGER_REGISTRY", str(tmp_path / "reg"))
    assert registry_dir() == tmp_path / "reg"
    monkeypatch.delenv("PRIVRL_LEDGER_REGISTRY")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert registry_dir() == tmp_path / "home" / ".local" / "share" / "privrl" / "ledgers"


def test_tests_never_use_the_home_registry():
    """The autouse fixture in tests/conftest.py points the registry at a per-test directory."""
    home = Path("~/.local/share/privrl/ledgers").expanduser()
    assert registry_dir() != home and "ledger-registry" in registry_dir().name


# -- version-1 ledgers ----------------------------------------------------------------------------


def v1_ledger(dataset: Path, reports: list[PrivacyReport], epsilon: float = 10.0) -> Path:
    """A ledger as privrl wrote it before content fingerprints (schema version 1)."""
    path = default_ledger_path(dataset)
    data = {
        "format": "privrl.ledger",
        "schema_version": 1,
        "dataset": {
            "file": dataset.name,
            "sha256": hashlib.sha256(dataset.read_bytes()).hexdigest(),
            "size": dataset.stat().st_size,
        },
        "unit": UNIT.value,
        "relation": RELATION.value,
        "backend": "rdp",
        "budget": {"epsilon": epsilon, "delta": DELTA},
        "created": "2024-01-01T00:00:00+0000",
        "entries": [
            {"run_id": f"old-{i}", "timestamp": "t", "label": "old", "report": r.to_dict()}
            for i, r in enumerate(reports)
        ],
    }
    path.write_text(json.dumps(json_safe(data)))
    return path


def test_version_1_ledgers_load_with_a_warning_and_migrate_on_first_write(dataset):
    """Schema decision: a version-1 ledger loads (warning), is checked against the file's
    bytes, keeps its spends, and the first recorded run migrates it to version 2 — chain over
    the old entries, registered, dataset marked — after which copies are covered."""
    old = gaussian_report(5.0)
    path = v1_ledger(dataset, [old])
    with pytest.warns(UserWarning, match="version-1 ledger"):
        ledger = BudgetLedger.for_dataset(dataset)
    assert ledger is not None and ledger.schema_version == 1
    assert ledger.spent() == pytest.approx(old.epsilon)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ledger.record(gaussian_report(6.0), label="new")
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == 2 and len(raw["entries"]) == 2
    assert raw["entries"][0]["run_id"] == "old-0"
    migrated = BudgetLedger.for_dataset(dataset)
    assert migrated is not None and migrated.spent() == eps_of(
        old.event, gaussian_report(6.0).event
    )
    assert dataset_identity(dataset).mark is not None
    edit(path, lambda d: d["entries"].pop(0))
    with pytest.raises(LedgerError, match="modified outside privrl"):
        BudgetLedger.for_dataset(dataset)


def test_version_1_ledgers_are_validated_strictly(dataset):
    """Finding 3 for old ledgers: an Infinity budget in a version-1 ledger is refused, and its
    binding to the file's bytes still holds."""
    path = v1_ledger(dataset, [])
    text = path.read_text().replace('"epsilon": 10.0', '"epsilon": Infinity')
    path.write_text(text)
    with pytest.raises(LedgerError, match="Infinity"):
        BudgetLedger.load(path, verify=False)
    v1_ledger(dataset, [])
    with h5py.File(dataset, "r+") as f:
        f.attrs["note"] = "edited"
    with pytest.warns(UserWarning), pytest.raises(LedgerError, match="SHA-256 differ"):
        BudgetLedger.for_dataset(dataset)
    assert fingerprint(dataset) == hashlib.sha256(dataset.read_bytes()).hexdigest()


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
    # one complete sentence naming this run's need, what is spent and left, the budget, the fix
    assert msg.startswith("The dataset's ledger refuses this run: ") and msg.endswith(".")
    assert msg.count(". ") == 0 and "\n" not in msg
    assert f"this run needs ε={fmt_number(big.epsilon, 4)} at δ=1e-05" in msg
    spent = fmt_number(ledger.spent(), 4)
    assert f"ε={left} left of its budget ε_total=1 at δ=1e-05 (ε={spent} spent)" in msg
    total = fmt_number(ledger.would_spend(big), 4)
    assert f"composed with the 1 recorded run(s) it would reach ε={total}, above ε_total=1" in msg
    assert "lower this run's budget (a smaller ε, more noise" in msg
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
    assert BudgetLedger.load(ledger.path).spent() == expected  # survives the strict reload

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

    real_replace = os.replace
    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        ledger.record(gaussian_report(5.0))
    monkeypatch.setattr(os, "replace", real_replace)
    assert ledger.path.read_bytes() == before
    assert temp_files(dataset.parent) == []
    assert len(ledger.entries) == 1


def test_table_lists_runs_budget_and_files(dataset, tmp_path):
    """Display: the ledger table shows each run, the spent/total budget and the files known to
    hold the episodes."""
    ledger = new_ledger(dataset)
    ledger.record(gaussian_report(5.0), label="baseline [v1]")
    copy = tmp_path / "copy.h5"
    shutil.copyfile(dataset, copy)
    BudgetLedger.for_dataset(copy)
    console = Console(record=True, width=400)
    console.print(ledger.to_table())
    text = console.export_text()
    assert "baseline [v1]" in text and "primorl" in text
    assert f"spent ε={fmt_number(ledger.spent(), 4)} of ε_total=2" in text
    assert str(copy.resolve()) in text and str(dataset.resolve()) in text
    assert ledger.to_dict()["files"] == [str(dataset.resolve()), str(copy.resolve())]


# -- crash safety and concurrency ------------------------------------------------------------


def writer(ledger: Path, count: int, z: float, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(ledger), str(count), str(z), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkill_never_loses_a_recorded_spend(dataset):
    """Crash safety: SIGKILL a writer at various moments; the ledger always loads (valid JSON,
    intact chain, consistent with the registry) and holds every run id the writer reported as
    recorded (at most one more per kill: recorded, killed before printing). A kill between
    temp write and rename leaves a stale temp file that the next writer removes."""
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
        recorded = {e.run_id for e in BudgetLedger.load(ledger.path, verify=False).entries}
        assert printed <= recorded
        assert len(recorded - printed) <= kills

    # Killed inside the 5th rename: two runs recorded (each renames the ledger, then the
    # registry entry); the third's temp file written and fsynced, the ledger not yet replaced.
    proc = writer(ledger.path, 5, 200.0, "--kill-at-replace", "5")
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
    within budget, its chain and registry head consistent, and no temp files."""
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
    entry = json.loads((registry_dir() / f"{final.content_sha256}.json").read_text())
    assert entry["length"] == 20 and entry["head"] == final.head
    assert temp_files(dataset.parent) == [] and temp_files(registry_dir()) == []


def test_non_private_refusal_is_one_sentence_with_the_numbers_and_the_fix(dataset):
    """Message rule: refusing a non-private run names ε=∞, what is left and spent of the
    budget, and what to do instead, as one complete sentence."""
    ledger = new_ledger(dataset, epsilon=2.0)
    ledger.record(gaussian_report(5.0))
    spent = fmt_number(ledger.spent(), 4)
    with pytest.raises(BudgetExceededError) as info:
        ledger.check(PrivacyReport.non_private(UNIT, RELATION, system="primorl"))
    msg = str(info.value)
    assert msg.startswith("The dataset's ledger refuses this run: it is not differentially")
    assert msg.endswith(".") and ". " not in msg
    assert "(ε=∞)" in msg and f"budget ε_total=2 at δ=1e-05 (ε={spent} spent)" in msg
    assert "run a private variant of the command" in msg
