"""`read_run`: the one reader of a run directory's config.json and metrics.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event

from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import read_header, save_hdf5
from privrl.experiments.rundir import OutDirError, RunDir, check_out_dir, ledger_guard, read_run
from privrl.privacy.ledger import BudgetLedger, LedgerError
from privrl.privacy.noise import NoiseSource
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit


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


# -- check_out_dir and ledger_guard: validate --out first, record only a complete run --------


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


def _ledger(data: Path) -> BudgetLedger:
    return BudgetLedger.init(data, epsilon=5, delta=1e-5, unit="trajectory", relation="add_remove")


def _report(sigma: float) -> PrivacyReport:
    from privrl.privacy.mechanisms import gaussian_mechanism

    _, release = gaussian_mechanism(
        np.zeros(1), sensitivity=1.0, sigma=sigma, rng=NoiseSource.secure().generator(), name="x"
    )
    return PrivacyReport.build(
        PrivacyUnit.TRAJECTORY, NeighbourRelation.ADD_REMOVE, [release], 1e-5, system="t"
    )


def test_read_header_gives_sizes_and_metadata_without_the_arrays(tmp_path: Path) -> None:
    path = _tiny_dataset(tmp_path / "d.h5")
    header = read_header(path)
    assert (header.n_episodes, header.n_transitions) == (1, 2)
    assert "metadata" in header.attrs


def test_ledger_guard_refuses_a_bad_out_before_the_ledger_and_spends_nothing(
    tmp_path: Path,
) -> None:
    data = _tiny_dataset(tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=5, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutDirError):
        with ledger_guard(data, _report(2.0), out=blocker / "run"):
            pytest.fail("the body must not run")
    assert ledger.entries == ()


def test_ledger_guard_records_only_a_complete_run_directory(tmp_path: Path) -> None:
    data = _tiny_dataset(tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=5, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="incomplete"):
        with ledger_guard(data, _report(2.0), out=out) as reports:
            RunDir(out).write_config({})
            reports.append(_report(2.0))
    assert ledger.entries == ()
    assert not (out / "config.json").exists()  # withdrawn with the refused spend
    with ledger_guard(data, _report(2.0), out=out) as reports:
        run = RunDir(out)
        run.write_config({})
        run.write_metrics({})
        report = _report(2.0)
        run.write_privacy(report)
        reports.append(report)
    assert len(ledger.entries) == 1


def test_ledger_guard_refuses_an_uncertified_report_on_a_ledgered_dataset(tmp_path: Path) -> None:
    data = _tiny_dataset(tmp_path / "d.h5")
    ledger = BudgetLedger.init(
        data, epsilon=5, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    out = tmp_path / "run"
    planned = dp_event.GaussianDpEvent(2.0)
    with pytest.raises(LedgerError, match="could not be certified"):
        with ledger_guard(data, planned, out=out) as reports:
            run = RunDir(out)
            run.write_config({})
            run.write_metrics({})
            bad = PrivacyReport.non_private(
                PrivacyUnit.TRAJECTORY, NeighbourRelation.ADD_REMOVE, system="t"
            )
            run.write_privacy(bad)
            reports.append(bad)
    assert ledger.entries == ()
    assert not (out / "privacy.json").exists()


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
        with ledger_guard(data, _report(2.0)):
            nan_reward()
    message = str(withheld.value)
    assert "withheld" in message and "'rewards'" in message
    assert "episode 0" not in message and "nan" not in message
    assert withheld.value.detail == str(full.value)
    with pytest.raises(DatasetError, match="expected a 1-D array"):  # schema: kept
        with ledger_guard(data, _report(2.0)):
            raise DatasetError("field 'rewards': expected a 1-D array, got shape (2, 2)")
    non_private = PrivacyReport.non_private(
        PrivacyUnit.TRAJECTORY, NeighbourRelation.ADD_REMOVE, system="t"
    )
    with pytest.raises(DatasetError, match="episode 0, step 1"):  # a baseline's errors: kept
        with ledger_guard(None, non_private):
            nan_reward()
