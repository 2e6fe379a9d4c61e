"""`privrl train mopo`: the run-directory contract, automatic resume, and bad input (exit code 2
with one `error:` line) — in particular a dataset whose observation or action shape does not
match its environment."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from privrl.cli.main import main
from privrl.data.io import save_hdf5
from privrl.nn.device import describe_device, resolve_device
from privrl.privacy.ledger import BudgetLedger
from privrl.rl.sac import SAC
from tests.primorl.test_mopo import small_pendulum_dataset

torch.set_num_threads(1)

TINY = [
    "--epochs", "2", "--steps-per-epoch", "20", "--rollout-batch-size", "50",
    "--rollout-length", "3", "--model-epochs", "2", "--checkpoint-every", "1",
]  # fmt: skip
RUN_FILES = (
    "config.json",
    "metrics.json",
    "metrics.csv",
    "privacy.json",
    "policy.pt",
    "plots/learning_curve.png",
    "checkpoint.pt",
    "dynamics.pt",
)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_bad_input(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mopo_data")
    return {
        "good": save_hdf5(small_pendulum_dataset(20, seed=1), root / "pendulum.h5"),
        "obs4": save_hdf5(small_pendulum_dataset(2, obs_dim=4), root / "obs4.h5"),
        "act2": save_hdf5(small_pendulum_dataset(2, act_dim=2), root / "act2.h5"),
        "acrobot": save_hdf5(small_pendulum_dataset(2, env_id="Acrobot-v1"), root / "acro.h5"),
        "ledgered": save_hdf5(small_pendulum_dataset(2), root / "ledgered.h5"),
    }


def test_observation_shape_mismatch_is_bad_input(files, tmp_path, capsys) -> None:
    code, _, err = run(
        ["train", "mopo", "--data", str(files["obs4"]), "--out", str(tmp_path / "r")], capsys
    )
    assert_bad_input(code, err, "observation shape mismatch", "(4,)", "privrl/Pendulum-v0")
    assert not (tmp_path / "r" / "metrics.json").exists()


def test_action_shape_mismatch_is_bad_input(files, tmp_path, capsys) -> None:
    code, _, err = run(
        ["train", "mopo", "--data", str(files["act2"]), "--out", str(tmp_path / "r")], capsys
    )
    assert_bad_input(code, err, "action shape mismatch", "(2,)", "(1,)")


def test_unknown_env_is_bad_input(files, tmp_path, capsys) -> None:
    code, _, err = run(
        ["train", "mopo", "--data", str(files["acrobot"]), "--out", str(tmp_path / "r")], capsys
    )
    # any Gymnasium id is a task if it is continuous control; Acrobot's actions are discrete
    assert_bad_input(code, err, "Acrobot-v1 has a Discrete action space", "continuous control")


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--real-ratio", "-0.5"], "--real-ratio"),
        (["--real-ratio", "1.5"], "--real-ratio"),
        (["--penalty", "variance"], "--penalty"),
        (["--starts", "anywhere"], "--starts"),
        (["--lam", "-1"], "--lam"),
        (["--epochs", "0"], "--epochs"),
        (["--rollout-length", "0"], "--rollout-length"),
        (["--target-entropy", "lots"], "--target-entropy"),
        (["--init-fraction", "0"], "--init-fraction"),
        (["--resume"], "no checkpoint"),
        (["--device", "gpu"], "--device"),
        *([] if torch.cuda.is_available() else [(["--device", "cuda"], "needs a CUDA GPU")]),
    ],
)
def test_bad_options_are_bad_input(files, tmp_path, capsys, extra, fragment) -> None:
    argv = ["train", "mopo", "--data", str(files["good"]), "--out", str(tmp_path / "r"), *extra]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, fragment)


def test_missing_file_is_bad_input(tmp_path, capsys) -> None:
    code, _, err = run(["train", "mopo", "--data", str(tmp_path / "none.h5")], capsys)
    assert_bad_input(code, err, "file not found")


def test_ledgered_dataset_is_refused(files, tmp_path, capsys) -> None:
    BudgetLedger.init(
        files["ledgered"], epsilon=10.0, delta=1e-5, unit="trajectory", relation="add_remove"
    )
    argv = ["train", "mopo", "--data", str(files["ledgered"]), "--out", str(tmp_path / "r")]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "not differentially private")


def test_run_directory_contract_and_resume(files, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    argv = ["train", "mopo", "--data", str(files["good"]), "--out", str(out), *TINY]
    code, stdout, err = run([*argv, "--seed", "3"], capsys)
    assert code == 0, err
    for name in RUN_FILES:
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("return_mean", "return_std", "normalised_score", "reference_returns"):
        assert key in metrics, key
    assert metrics["start_mode"] == "dataset" and metrics["epochs"] == 2
    assert (metrics["penalty"], metrics["lambda"], metrics["rollout_length"]) == ("mpd", 2.0, 3)
    assert metrics["epsilon"] == "inf" and metrics["private"] is False
    assert metrics["device"] == describe_device(resolve_device("auto"))
    privacy = json.loads((out / "privacy.json").read_text())
    for key in ("unit", "relation", "epsilon", "delta", "accountant", "releases"):
        assert key in privacy, key
    assert privacy["epsilon"] == "inf" and privacy["unit"] == "trajectory"
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert [int(r["epoch"]) for r in rows] == [1, 2]
    assert math.isclose(
        sum(float(r["return_mean"]) for r in rows) / 2, metrics["return_mean"], rel_tol=1e-9
    )
    config = json.loads((out / "config.json").read_text())
    assert config["seed"] == 3 and config["real_ratio"] == 0.05 and config["target_entropy"] == -3
    agent = SAC.from_state_dict(torch.load(out / "policy.pt", weights_only=False))
    assert agent.act(torch.zeros(3).numpy(), deterministic=True).shape == (1,)
    assert "MOPO on pendulum" in stdout

    # Same configuration, more epochs: resumes from epoch 2 (the model is not retrained), on
    # the device named (checkpoints are device-free; the device is no part of the run's record).
    longer = [*argv, "--seed", "3", "--device", "cpu"]
    longer[longer.index("--epochs") + 1] = "3"
    code, _, err = run([*longer, "--resume"], capsys)
    assert code == 0, err
    assert "resuming" in err and "from epoch 2" in err
    assert json.loads((out / "metrics.json").read_text())["epochs"] == 3
    rows3 = list(csv.DictReader((out / "metrics.csv").open()))
    assert [r["return_mean"] for r in rows3[:2]] == [r["return_mean"] for r in rows]

    # A different configuration in the same directory is refused, never overwritten.
    code, _, err = run([*argv, "--seed", "4"], capsys)
    assert_bad_input(code, err, "different run", "seed")
    code, _, err = run([*argv, "--seed", "3", "--real-ratio", "0"], capsys)
    assert_bad_input(code, err, "different run", "real_ratio")


def test_initial_starts_without_real_data(files, tmp_path, capsys) -> None:
    out = tmp_path / "init"
    argv = [
        "train", "mopo", "--data", str(files["good"]), "--out", str(out), *TINY,
        "--starts", "initial", "--real-ratio", "0", "--penalty", "ma", "--lam", "1",
        "--target-entropy", "action-dim",
    ]  # fmt: skip
    code, _, err = run(argv, capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["start_mode"] == "initial" and metrics["real_ratio"] == 0.0
    config = json.loads((out / "config.json").read_text())
    assert config["target_entropy"] is None and config["penalty"] == "ma"
    privacy = json.loads((out / "privacy.json").read_text())
    # the model and its holdout (a seeded split of the data, never named public) read it
    assert [r["name"].split(" ")[0] for r in privacy["releases"]] == ["dynamics", "holdout"]


def _unreadable_copy(src: Path, dst: Path, unit: str | None = None) -> Path:
    """A copy of a dataset file with a ledger for `unit` (made while the file is whole: a
    ledger is bound to the episodes' content), then made unreadable (``observations``
    deleted; root attributes — metadata, sizes, content fingerprint — intact)."""
    import shutil

    import h5py

    shutil.copyfile(src, dst)
    if unit is not None:
        BudgetLedger.init(dst, epsilon=10.0, delta=1e-5, unit=unit, relation="add_remove")
    with h5py.File(dst, "r+") as f:
        del f["observations"]
    return dst


@pytest.mark.parametrize("unit", ["trajectory", "expert"])
def test_ledger_refuses_before_any_record_is_read(
    files, tmp_path, capsys, unit, monkeypatch
) -> None:
    """Property: MOPO is not private, so any ledger refuses it — from the header alone: on a
    file whose episode arrays are unreadable the refusal is the ledger's (a ledger of another
    unit names the unit mismatch), the system's loader of the records is never called, and
    --out stays empty."""
    from privrl.runs import catalog, registry

    catalog.load()
    loads: list[object] = []

    def load(*args: object, **kwargs: object) -> None:
        loads.append(args)
        raise AssertionError("the records were read before the ledger refused")

    monkeypatch.setattr(registry.get("mopo"), "load", load)
    data = _unreadable_copy(files["good"], tmp_path / "broken.h5", unit)
    out = tmp_path / "r"
    code, _, err = run(["train", "mopo", "--data", str(data), "--out", str(out), *TINY], capsys)
    fragment = "not differentially private" if unit == "trajectory" else "ledger accounts"
    assert_bad_input(code, err, fragment)
    assert "observations" not in err and loads == []
    assert not any(out.glob("*")) if out.exists() else True


def test_out_must_be_a_directory(files, tmp_path, capsys) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    for out in (afile, afile / "run"):
        argv = ["train", "mopo", "--data", str(files["good"]), "--out", str(out), *TINY]
        code, _, err = run(argv, capsys)
        assert_bad_input(code, err, "--out", "afile")


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--epochs", str(10**12)], "--epochs"),
        (["--steps-per-epoch", str(10**12)], "--steps-per-epoch"),
        (["--rollout-batch-size", str(10**12)], "--rollout-batch-size"),
        (["--rollout-length", str(10**12)], "--rollout-length"),
        (["--model-epochs", str(10**12)], "--model-epochs"),
        (["--lam", "1e308"], "--lam"),
        (["--threads", "100000"], "--threads"),
        (["--seed", "-1"], "--seed"),
        (["--rollout-batch-size", "5000000", "--rollout-length", "100"], "model buffer"),
    ],
)
def test_extreme_values_are_refused_up_front(files, tmp_path, capsys, extra, fragment) -> None:
    """Values that used to exhaust memory, overflow or run for ever are refused before the
    dataset is read, naming the flag and its limit."""
    data = _unreadable_copy(files["good"], tmp_path / "broken.h5")
    argv = ["train", "mopo", "--data", str(data), "--out", str(tmp_path / "r"), *TINY, *extra]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, fragment)
