"""The PRIMORL reproductions' shared sweep helpers: a finished cell continued to more SAC
epochs gives the run a fresh cell would make."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from privrl.data.io import save_hdf5
from privrl.primorl.primorl import load_released_model
from reproductions.primorl import sweeps as shared
from tests.primorl.test_primorl import pendulum_data

STAGE = {"steps_per_epoch": 10, "rollout_batch_size": 20, "rollout_length": 5}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "d.h5"
    save_hdf5(pendulum_data(30, seed=0, extra={"n_trajectories": 30}), path)
    return path


def _doc(out: Path, data: Path, epochs: int) -> dict[str, Any]:
    return {
        "out": str(out),
        "data": str(data),
        "epochs": epochs,
        **STAGE,
        # a continued cell is compared with a fresh one: the same (insecure, repeatable) noise
        "insecure_reproducible_noise": True,
        "cells": [{"system": "primorl"}, {"system": "mopo"}],
        "systems": {
            "primorl": {
                "steps": 4,
                "sampling_rate": 0.2,
                "noise_multiplier": 2.0,
                "eval_every": 2,
            },
            "mopo": {"model_epochs": 1},
        },
        "sweep": {"workers": 1},
    }


def _curve(cell_dir: Path) -> list[tuple[str, str]]:
    with open(cell_dir / "run" / "metrics.csv", newline="") as fh:
        return [(r["epoch"], r["return_mean"]) for r in csv.DictReader(fh)]


def test_a_finished_cell_is_continued_to_more_sac_epochs(tmp_path: Path, data: Path) -> None:
    """Cells finished at 1 SAC epoch, asked for at 2: each new cell starts from the finished
    one's checkpoints (PRIMORL: its release as the pending release, so no second DP-FedAvg)
    and ends with what fresh 2-epoch cells give: the same curve, release and privacy.json."""
    out, fresh = tmp_path / "sweep", tmp_path / "fresh"
    shared.run_cells(_doc(out, data, 1), tmp_path / "r1")
    rows = shared.run_cells(_doc(out, data, 2), tmp_path / "r2")
    records = [json.loads((Path(r["dir"]) / "cell.json").read_text()) for r in rows]
    assert all(r["status"] == "ok" and r["resumed"] for r in records)
    again = shared.run_cells(_doc(fresh, data, 2), tmp_path / "r3")
    for continued, new in zip(rows, again, strict=True):
        a, b = Path(continued["dir"]), Path(new["dir"])
        assert a.name == b.name  # the same cell (fingerprint)
        assert _curve(a) == _curve(b) and len(_curve(a)) == 2
        privacy = [json.loads((d / "run" / "privacy.json").read_text()) for d in (a, b)]
        for p in privacy:
            p.pop("created", None)
        assert privacy[0] == privacy[1]
    released = [
        load_released_model(Path(r["dir"]) / "run" / "model.pt").model.ensemble.state_dict()
        for r in (rows[0], again[0])
    ]
    assert all(torch.equal(released[0][k], released[1][k]) for k in released[0])


@pytest.mark.parametrize(
    ("stats", "text", "raw"),
    [
        ({"seeds": 3, "return": 12.345, "ci": 1.25}, "12.3 ± 1.2", "—"),
        ({"seeds": 1, "return": 924.04, "ci": 0.0}, "924.0 (one seed, no CI)", "—"),
        (
            {"seeds": 2, "return": 50.0, "ci": 5.0, "raw_return": -600.0, "raw_ci": 49.35},
            "50.0 ± 5.0",
            "-600.0 ± 49.4",
        ),
        (
            {"seeds": 1, "return": 50.0, "ci": 0.0, "raw_return": -600.0, "raw_ci": 0.0},
            "50.0 (one seed, no CI)",
            "-600.0",
        ),
    ],
)
def test_return_text_shows_no_interval_for_one_seed(stats: dict, text: str, raw: str) -> None:
    """A row's return ± its 95% CI; one seed has none ("± 0.0" would claim one), so the return
    says so and the raw column shows the number alone; no raw scale: "—"."""
    assert shared.return_text(stats) == text
    assert shared.raw_text(stats) == raw
    assert shared.return_text({"seeds": 1, "return": 5804.4}, 0) == "5804 (one seed, no CI)"


def test_a_cell_differing_only_in_its_policy_stage_reuses_the_finished_release(
    tmp_path: Path,
) -> None:
    """PRIMORL finished with initial starts, then asked for with public-split starts: the new
    cell gets the finished cell's release as its pending release (no second DP-FedAvg) and ends
    with what a fresh public-split cell gives: the same release, curve and privacy.json."""
    path = tmp_path / "d.h5"
    extra = {"n_trajectories": 30, "public_episodes": [0, 1, 2]}
    save_hdf5(pendulum_data(30, seed=0, extra=extra), path)

    def doc(out: Path, starts: str | None) -> dict[str, Any]:
        d = _doc(out, path, 1)
        d["cells"] = [{"system": "primorl"} | ({} if starts is None else {"start_states": starts})]
        return d

    out = tmp_path / "sweep"
    [first] = shared.run_cells(doc(out, None), tmp_path / "r1")
    [reused] = shared.run_cells(doc(out, "public-split"), tmp_path / "r2")
    [fresh] = shared.run_cells(doc(tmp_path / "fresh", "public-split"), tmp_path / "r3")
    record = json.loads((Path(reused["dir"]) / "cell.json").read_text())
    assert record["status"] == "ok" and record["release_of"] == Path(first["dir"]).name
    a, b = Path(reused["dir"]), Path(fresh["dir"])
    assert a.name == b.name != Path(first["dir"]).name
    metrics = json.loads((a / "run" / "metrics.json").read_text())
    assert metrics["start_mode"] == "public-split"
    assert _curve(a) == _curve(b) and _curve(a) != _curve(Path(first["dir"]))
    privacy = [json.loads((d / "run" / "privacy.json").read_text()) for d in (a, b)]
    for p in privacy:
        p.pop("created", None)
    assert privacy[0] == privacy[1]
    released = [
        load_released_model(d / "run" / "model.pt").model.ensemble.state_dict()
        for d in (Path(first["dir"]), a)
    ]
    assert all(torch.equal(released[0][k], released[1][k]) for k in released[0])
