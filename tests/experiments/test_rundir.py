"""`read_run`: the one reader of a run directory's config.json and metrics.json."""

from __future__ import annotations

import json
from pathlib import Path

from privrl.experiments.rundir import RunDir, read_run


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
