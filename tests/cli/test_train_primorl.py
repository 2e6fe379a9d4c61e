"""`privrl train primorl`: the run-directory contract, --model reuse without data, the CLI's
one-line errors and the ledger checked before the data (what neighbours publish is checked
with every private command in tests/privacy/test_neighbour_diff.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import main
from privrl.data.io import save_hdf5
from tests.primorl.test_primorl import pendulum_data

FAST = [
    "--steps",
    "4",
    "-q",
    "0.2",
    "--eval-every",
    "2",
    "--epochs",
    "2",
    "--steps-per-epoch",
    "10",
    "--rollout-batch-size",
    "20",
    "--rollout-length",
    "5",
    "--holdout-fraction",
    "0.2",
]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "d.h5"
    save_hdf5(pendulum_data(30, seed=0, extra={"n_trajectories": 30}), path)
    return path


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error:") and "Traceback" not in "\n".join(err)
    return err[-1]


def test_run_directory_contract_and_model_reuse(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """config.json, metrics.json (return_mean, return_std, normalised_score, epsilon, delta),
    metrics.csv, model_holdout.csv, privacy.json with ONE release (DpEvent, unit trajectory,
    add/remove, public parameters with sources), model.pt, policy.pt, plots; then --model runs
    the policy stage alone without --data and reports the same guarantee (no new spend)."""
    out = tmp_path / "run"
    assert main(["train", "primorl", "--data", str(data), "-z", "2", *FAST, "--out", str(out)]) == 0
    for name in (
        "config.json",
        "metrics.json",
        "metrics.csv",
        "model_holdout.csv",
        "privacy.json",
        "model.pt",
        "policy.pt",
        "plots/learning_curve.png",
        "plots/model_holdout.png",
    ):
        assert (out / name).is_file(), name
    for secret in ("fedavg_state.pt", "released.pending.pt"):
        assert not (out / secret).exists()
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("return_mean", "return_std", "normalised_score", "epsilon", "delta"):
        assert metrics[key] is not None, key
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["unit"] == "trajectory" and privacy["relation"] == "add_remove"
    (release,) = privacy["releases"]
    assert release["count"] == 4 and release["event"] is not None
    assert {"z (noise multiplier)", "K (declared number of units)"} <= {
        p["name"] for p in privacy["public_parameters"]
    }
    assert 0 < privacy["epsilon"] == metrics["epsilon"] < np.inf
    # what must not be published: counts of private episodes, training loss, clip fraction
    text = (out / "metrics.json").read_text() + (out / "config.json").read_text()
    for word in ("train_loss", "clipped", "train_episodes", "n_private"):
        assert word not in text
    again = tmp_path / "again"
    code = main(
        [
            "train",
            "primorl",
            "--model",
            str(out / "model.pt"),
            "--epochs",
            "1",
            "--steps-per-epoch",
            "10",
            "--rollout-batch-size",
            "20",
            "--out",
            str(again),
        ]
    )
    assert code == 0
    p2 = json.loads((again / "privacy.json").read_text())
    assert p2["epsilon"] == privacy["epsilon"] and p2["releases"] == privacy["releases"]
    assert json.loads((again / "metrics.json").read_text())["model_reused"] is True
    # the released model carries the public split's states for public-split rollout starts
    code = main(
        [
            "train",
            "primorl",
            "--model",
            str(out / "model.pt"),
            "--epochs",
            "1",
            "--steps-per-epoch",
            "10",
            "--rollout-batch-size",
            "20",
            "--start-states",
            "public-split",
            "--out",
            str(tmp_path / "pub"),
        ]
    )
    assert code == 0
    assert json.loads((tmp_path / "pub" / "metrics.json").read_text())["start_mode"] == (
        "public-split"
    )
    capsys.readouterr()
    code = main(["train", "primorl", "--model", str(out / "model.pt"), "--data", str(data)])
    assert code == 2 and "--model" in _err(capsys)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["-z", "1", "--epsilon", "3"], "not both"),
        (["--variant", "high", "-z", "1"], "variant"),
        (["--clip-mode", "diagonal", "-z", "1"], "clip mode"),
        (["--start-states", "dataset", "-z", "1"], "private states"),
        (["--unit", "user", "-z", "1"], "unit ids"),
        (["-z", "1", "--sampling-rate", "2"], "sampling rate"),
        (["-z", "1", "--local-optimizer", "rmsprop"], "local optimizer"),
        (["-z", "1", "--server-momentum", "1"], "server momentum"),
    ],
)
def test_bad_input_is_one_error_line(
    argv: list[str], match: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["train", "primorl", "--data", str(data), "--out", str(tmp_path / "o"), *argv])
    assert code == 2
    assert match in _err(capsys)


def test_K_must_be_declared_never_counted(tmp_path: Path, capsys) -> None:
    """Without --trajectories and without declared metadata, the run is refused (naming the
    flag) before any data is read."""
    path = tmp_path / "nok.h5"
    save_hdf5(pendulum_data(10, T=5), path)
    code = main(["train", "primorl", "--data", str(path), "-z", "1", "--out", str(tmp_path / "o")])
    assert code == 2 and "--trajectories" in _err(capsys)


def test_ledger_is_checked_before_the_data_is_read(
    data: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that would overspend the dataset's ledger, and a non-private variant, are refused
    while the episode arrays were never loaded (load_hdf5 rigged to fail)."""
    assert main(["ledger", "init", str(data), "--epsilon", "0.5", "--delta", "1e-5"]) == 0
    import privrl.data.io as io

    def boom(*a, **k):
        raise AssertionError("episode data read before the ledger check")

    monkeypatch.setattr(io, "load_hdf5", boom)
    capsys.readouterr()
    out = tmp_path / "o"
    assert (
        main(["train", "primorl", "--data", str(data), "-z", "0.6", *FAST, "--out", str(out)]) == 2
    )
    assert "ledger" in _err(capsys)
    assert (
        main(
            [
                "train",
                "primorl",
                "--data",
                str(data),
                "--variant",
                "no-privacy",
                *FAST,
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "not differentially private" in _err(capsys)


def _releases(data: Path, tmp_path: Path, flag: str, values: tuple[str, ...]) -> dict:
    """The one release of a short private run per value of `flag` (run directory: the value)."""
    releases = {}
    for value in values:
        out = tmp_path / value
        argv = ["train", "primorl", "--data", str(data), "-z", "2", *FAST, "--out", str(out)]
        assert main([*argv, flag, value]) == 0
        (releases[value],) = json.loads((out / "privacy.json").read_text())["releases"]
    return releases


def test_local_adam_is_a_flag_recorded_in_the_release(data: Path, tmp_path: Path) -> None:
    """--local-optimizer adam (the spec's option; the default is the paper's SGD) reaches
    DP-FedAvg and privacy.json names it; the event is the same as with SGD (the clip bounds
    each unit's update whatever the local steps)."""
    releases = _releases(data, tmp_path, "--local-optimizer", ("sgd", "adam"))
    for opt, release in releases.items():
        assert release["extra"]["local_optimizer"] == opt
    assert releases["sgd"]["event"] == releases["adam"]["event"]


def test_server_momentum_is_a_flag_recorded_in_the_release(data: Path, tmp_path: Path) -> None:
    """--server-momentum β reaches DP-FedAvg, privacy.json names the server step, the event is
    FedAvg's; with --model it is refused (the release is reused as trained)."""
    releases = _releases(data, tmp_path, "--server-momentum", ("0", "0.9"))
    for beta, release in releases.items():
        assert ("server_step" in release["extra"]) == (beta == "0.9")
    assert releases["0"]["event"] == releases["0.9"]["event"]
    model = str(tmp_path / "0" / "model.pt")
    argv = ["train", "primorl", "--model", model, "--out", str(tmp_path / "m")]
    assert main([*argv, "--server-momentum", "0.9"]) == 2
