"""`read_run`: the one reader of a run directory's config.json and metrics.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event

from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import read_header, save_hdf5
from privrl.privacy.ledger import BudgetExceededError, BudgetLedger, LedgerError
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit
from privrl.runs.rundir import (
    STAGING,
    OutDirError,
    RunDir,
    check_out_dir,
    ledger_transaction,
    read_run,
)


def test_read_run_returns_what_rundir_wrote(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.write_config({"seed": 3, "algo": "cql"})
    run.write_metrics({"return_mean": 1.5})
    assert read_run(tmp_path / "run") == ({"seed": 3, "algo": "cql"}, {"return_mean": 1.5})


def test_read_run_is_none_for_missing_corrupt_or_non_object_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert read_run(missing) is None and not missing.exists()  # reading creates nothing
    half = tmp_path / "half"
    half.mkdir()
    (half / "config.json").write_text("{}")
    assert read_run(half) is None  # no metrics.json: not finished
    (half / "metrics.json").write_text("{not json")
    assert read_run(half) is None
    (half / "metrics.json").write_text(json.dumps([1, 2]))
    assert read_run(half) is None
    (half / "metrics.json").write_text("{}")
    assert read_run(half) == ({}, {})


# -- check_out_dir and ledger_transaction: validate --out first, publish only a complete run ----


def test_check_out_dir_refuses_a_file_and_a_path_inside_a_file(tmp_path: Path) -> None:
    file = tmp_path / "f.txt"
    file.write_text("x")
    with pytest.raises(OutDirError, match="existing file"):
        check_out_dir(file)
    with pytest.raises(OutDirError, match="inside the file"):
        check_out_dir(file / "run")
    assert check_out_dir(tmp_path / "new" / "run").is_dir()


def _tiny_dataset(path: Path) -> Path:
    ds = TrajectoryDataset.from_episodes(
        [
            {
                "observations": np.array([0, 1, 2]),
                "actions": np.array([0, 1]),
                "rewards": np.array([1.0, 0.0]),
                "terminated": np.array([False, True]),
                "truncated": np.array([False, False]),
            }
        ]
    )
    return save_hdf5(ds, path)


def _report(sigma: float) -> PrivacyReport:
    release = Release(
        "x", "gaussian", 1.0, "l2", {"sigma": sigma}, event=dp_event.GaussianDpEvent(sigma)
    )
    return PrivacyReport.build(
        PrivacyUnit.TRAJECTORY, NeighbourRelation.ADD_REMOVE, [release], 1e-5, system="t"
    )


def _write(staging: Path, report: PrivacyReport) -> None:
    run = RunDir(staging)
    run.write_config({})
    run.write_metrics({})
    run.write_privacy(report)
    (staging / "theta.npy").write_bytes(b"derived from the data")
    (run.plot_path("theta")).write_bytes(b"png")


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_read_header_gives_sizes_and_metadata_without_the_arrays(tmp_path: Path) -> None:
    path = _tiny_dataset(tmp_path / "d.h5")
    header = read_header(path)
    assert (header.n_episodes, header.n_transitions) == (1, 2)
    assert "metadata" in header.attrs


def test_transaction_refuses_a_bad_out_before_the_ledger_and_spends_nothing(
    tmp_path: Path,
) -> None:
    data = _tiny_dataset(tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=5, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutDirError):
        with ledger_transaction(data, _report(2.0), out=blocker / "run"):
            pytest.fail("the body must not run")
    assert ledger.entries == ()


def test_transaction_reserves_before_the_body_and_publishes_with_the_completion(
    tmp_path: Path,
) -> None:
    """Property (the transaction): the spend counts before the body runs (a pending
    reservation), the body writes only into the hidden staging folder, and the run directory
    appears at once with the completion."""
    data = _tiny_dataset(tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=5, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    out = tmp_path / "run"
    with ledger_transaction(data, _report(2.0), out=out, label="t") as txn:
        (view,) = ledger.entries
        assert view.status == "reserved" and view.out == str(out.resolve())
        # counted from the moment of the reservation
        assert ledger.spent() == pytest.approx(_report(2.0).epsilon, rel=1e-6)
        assert txn.staging.parent == out.parent and txn.staging.name.startswith(".run.")
        _write(txn.staging, _report(2.0))
        assert not out.exists() or _files(out) == []  # nothing published yet
        txn.reports.append(_report(2.0))
    assert [e.status for e in ledger.entries] == ["complete"]
    assert _files(out) == [
        "config.json", "metrics.json", "plots", "plots/theta.png", "privacy.json", "theta.npy"
    ]  # fmt: skip
    assert not txn.staging.exists()


def test_an_incomplete_run_publishes_nothing_and_its_reservation_counts(tmp_path: Path) -> None:
    data = _tiny_dataset(tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=5, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="incomplete"):
        with ledger_transaction(data, _report(2.0), out=out) as txn:
            RunDir(txn.staging).write_config({})
            txn.reports.append(_report(2.0))
    assert not out.exists() and not [p for p in tmp_path.iterdir() if STAGING in p.name]
    assert [e.status for e in ledger.entries] == ["reserved"] and ledger.spent() > 0


@pytest.mark.parametrize("error", [KeyboardInterrupt, ValueError])
def test_an_interrupted_run_publishes_nothing_and_its_reservation_counts(
    tmp_path: Path, error: type[BaseException]
) -> None:
    """Property (fail closed): an exception or Ctrl-C after the data were read removes the
    staged files (0 published) and keeps the reservation counted."""
    data = _tiny_dataset(tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=5, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    out = tmp_path / "run"
    with pytest.raises(error):
        with ledger_transaction(data, _report(2.0), out=out) as txn:
            _write(txn.staging, _report(2.0))
            raise error()
    assert not out.exists() and not txn.staging.exists()
    assert [e.status for e in ledger.entries] == ["reserved"] and ledger.spent() > 0


def test_a_refused_run_leaves_no_file(tmp_path: Path) -> None:
    """Property: a run the budget cannot fit is refused before the body and leaves nothing."""
    data = _tiny_dataset(tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=0.5, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    before = _files(tmp_path)
    with pytest.raises(BudgetExceededError):
        with ledger_transaction(data, _report(2.0), out=tmp_path / "run"):
            pytest.fail("the body must not run")
    assert _files(tmp_path) == before and ledger.entries == ()


def test_publishing_into_an_earlier_run_s_directory_keeps_its_other_files(tmp_path: Path) -> None:
    """`check_out_dir` accepts an earlier run's directory: the new run's files replace
    theirs, files it does not write stay (as before the transaction)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "config.json").write_text("{}")
    with ledger_transaction(None, _report(2.0), out=out) as txn:
        _write(txn.staging, _report(2.0))
    assert (out / "notes.txt").read_text() == "mine" and (out / "theta.npy").is_file()
    assert json.loads((out / "privacy.json").read_text())["epsilon"] > 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_stale_staging_folder_of_a_dead_process_is_removed(tmp_path: Path) -> None:
    out = tmp_path / "run"
    stale = tmp_path / f".run{STAGING}999999999-deadbeef"  # no such process
    stale.mkdir()
    (stale / "theta.npy").write_bytes(b"unpublished")
    with ledger_transaction(None, _report(2.0), out=out) as txn:
        _write(txn.staging, _report(2.0))
    assert not stale.exists()


def test_transaction_refuses_an_uncertified_report_on_a_ledgered_dataset(tmp_path: Path) -> None:
    data = _tiny_dataset(tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=5, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    out = tmp_path / "run"
    with pytest.raises(LedgerError, match="could not be certified"):
        with ledger_transaction(data, _report(2.0), out=out) as txn:
            bad = PrivacyReport.non_private(
                PrivacyUnit.TRAJECTORY, NeighbourRelation.ADD_REMOVE, system="t"
            )
            _write(txn.staging, bad)
            txn.reports.append(bad)
    assert not out.exists()
    assert [e.status for e in ledger.entries] == ["reserved"]


def test_a_private_run_s_data_errors_do_not_quote_the_data(tmp_path: Path) -> None:
    """Inside the guard of a private run, a validation error located in the content (a value,
    an episode index, a count of bad rows) is withheld; a schema error is not; outside the
    guard (e.g. `privrl data info`) the full message is shown."""
    from privrl.data.dataset import DatasetError

    def nan_reward() -> None:
        TrajectoryDataset.from_episodes(
            [
                {
                    "observations": np.array([0, 1, 2]),
                    "actions": np.array([0, 1]),
                    "rewards": np.array([1.0, np.nan]),
                    "terminated": np.array([False, True]),
                    "truncated": np.array([False, False]),
                }
            ]
        )

    with pytest.raises(DatasetError, match="episode 0, step 1") as full:
        nan_reward()
    data = _tiny_dataset(tmp_path / "d.h5")
    with pytest.raises(DatasetError) as withheld:
        with ledger_transaction(data, _report(2.0), out=tmp_path / "r"):
            nan_reward()
    message = str(withheld.value)
    assert "withheld" in message and "'rewards'" in message
    assert "episode 0" not in message and "nan" not in message
    assert withheld.value.detail == str(full.value)
    with pytest.raises(DatasetError, match="expected a 1-D array"):  # schema: kept
        with ledger_transaction(data, _report(2.0), out=tmp_path / "r"):
            raise DatasetError("field 'rewards': expected a 1-D array, got shape (2, 2)")
    non_private = PrivacyReport.non_private(
        PrivacyUnit.TRAJECTORY, NeighbourRelation.ADD_REMOVE, system="t"
    )
    with pytest.raises(DatasetError, match="episode 0, step 1"):  # a baseline's errors: kept
        with ledger_transaction(None, non_private, out=tmp_path / "r"):
            nan_reward()


def test_a_run_whose_out_s_parent_is_read_only_stages_inside_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check_out_dir` needs only a writable `out`: when the folder beside it cannot be made
    (a read-only parent), the run stages in a hidden folder inside `out` and publishes file by
    file, leaving no staging folder."""
    out = tmp_path / "ro" / "run"
    out.mkdir(parents=True)
    mkdir = Path.mkdir

    def read_only_parent(self: Path, *args: object, **kwargs: object) -> None:
        if self.parent == out.parent and self.name.startswith(".run"):
            raise PermissionError(13, "Permission denied", str(self))
        mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", read_only_parent)
    with ledger_transaction(None, _report(2.0), out=out) as txn:
        assert txn.staging.parent == out
        _write(txn.staging, _report(2.0))
    assert (out / "theta.npy").is_file() and (out / "plots" / "theta.png").is_file()
    assert [p.name for p in out.iterdir() if STAGING in p.name] == []
    assert [p.name for p in out.parent.iterdir()] == ["run"]


def _interrupted(data: Path, out: Path, *, resumable: bool, label: str = "t") -> None:
    with pytest.raises(KeyboardInterrupt):
        with ledger_transaction(data, _report(2.0), out=out, label=label, resumable=resumable):
            raise KeyboardInterrupt


def test_a_resumed_run_takes_over_its_dead_reservation_others_reserve_again(
    tmp_path: Path,
) -> None:
    """Property (no double count on resume): a resumable system's rerun of the same out, label
    and planned spend completes the pending reservation of its crashed attempt; a system that
    cannot resume draws fresh noise, so its rerun is a second, new reservation."""
    data = _tiny_dataset(tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=5, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    out = tmp_path / "run"
    _interrupted(data, out, resumable=True)
    (crashed,) = ledger.pending()
    with ledger_transaction(data, _report(2.0), out=out, label="t", resumable=True) as txn:
        assert txn.resumed and txn.reservation is not None
        assert txn.reservation.run_id == crashed.run_id
        _write(txn.staging, _report(2.0))
        txn.reports.append(_report(2.0))
    assert [(e.run_id, e.status) for e in ledger.entries] == [(crashed.run_id, "complete")]
    other = tmp_path / "other"
    _interrupted(data, other, resumable=False)
    with ledger_transaction(data, _report(2.0), out=other, label="t") as txn:
        assert not txn.resumed
        _write(txn.staging, _report(2.0))
        txn.reports.append(_report(2.0))
    assert [e.status for e in ledger.entries] == ["complete", "reserved", "complete"]


def test_a_resume_never_takes_over_a_published_or_running_attempt(tmp_path: Path) -> None:
    """A pending reservation whose out already holds a published run (the process died after
    publishing) must be settled first; one whose run is alive (its staging folder exists) is
    not taken over; neither attempt spends anything new."""
    data = _tiny_dataset(tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=5, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    out = tmp_path / "run"
    _interrupted(data, out, resumable=True)
    live = tmp_path / f".run{STAGING}{os.getpid()}-0000000"  # a live process's staging folder
    live.mkdir()
    with pytest.raises(LedgerError, match="in progress"):
        with ledger_transaction(data, _report(2.0), out=out, label="t", resumable=True):
            pytest.fail("the body must not run")
    live.rmdir()
    _write(out, _report(2.0))  # as if the crashed attempt had published
    with pytest.raises(LedgerError, match="settle it first"):
        with ledger_transaction(data, _report(2.0), out=out, label="t", resumable=True):
            pytest.fail("the body must not run")
    assert [e.status for e in ledger.entries] == ["reserved"]
