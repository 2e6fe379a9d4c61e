"""MOPO and PRIMORL on the run layer: configs round-trip, `privrl run CONFIG.toml` is the same
run as the command line, a bad setting means the same in a file as on the command line, and the
ledger still refuses before a record is read when the run comes from a file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import h5py
import pytest
import torch

from privrl.cli.main import main
from privrl.config import ConfigError
from privrl.data.io import save_hdf5
from privrl.privacy.ledger import BudgetLedger
from privrl.runs import registry
from privrl.systems.mopo import MopoRunConfig
from privrl.systems.primorl import PrimorlRunConfig
from tests.primorl.test_mopo import small_pendulum_dataset
from tests.primorl.test_primorl import pendulum_data

torch.set_num_threads(1)

# Per system: command-line flags and the same settings as TOML lines (a tiny run).
CASES: dict[str, tuple[list[str], str]] = {
    "mopo": (
        ["--epochs", "1", "--steps-per-epoch", "5", "--rollout-batch-size", "10",
         "--rollout-length", "2", "--model-epochs", "1", "--lam", "1.5",
         "--target-entropy", "action-dim"],
        "epochs = 1\nsteps_per_epoch = 5\nrollout_batch_size = 10\nrollout_length = 2\n"
        'model_epochs = 1\nlam = 1.5\ntarget_entropy = "action-dim"\n',
    ),
    "primorl": (
        ["--variant", "no-privacy", "--steps", "2", "-q", "0.2", "--eval-every", "1",
         "--epochs", "1", "--steps-per-epoch", "5", "--rollout-batch-size", "10",
         "--rollout-length", "2", "--target-entropy", "-2"],
        'variant = "no-privacy"\nsteps = 2\nsampling_rate = 0.2\neval_every = 1\nepochs = 1\n'
        "steps_per_epoch = 5\nrollout_batch_size = 10\nrollout_length = 2\n"
        "target_entropy = -2\n",
    ),
}  # fmt: skip
# Wall-clock figures differ between two runs of the same seed.
TIMES = ("seconds", "policy_stage_seconds")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("deep")
    return {
        "mopo": save_hdf5(small_pendulum_dataset(20, seed=1), root / "pendulum.h5"),
        "primorl": save_hdf5(
            pendulum_data(30, seed=0, extra={"n_trajectories": 30}), root / "d.h5"
        ),
    }


@pytest.fixture
def small_dynamics(monkeypatch: pytest.MonkeyPatch) -> None:
    """MOPO's Pendulum preset with 20 model minibatches per epoch instead of 1000 (speed); the
    command line and the file read the same preset."""
    from privrl.primorl import mopo

    d = mopo.MOPO_DEFAULTS["pendulum"]
    small = replace(d, dynamics={**d.dynamics, "steps_per_epoch": 20})
    monkeypatch.setitem(mopo.MOPO_DEFAULTS, "pendulum", small)


def _metrics(out: Path) -> dict[str, Any]:
    metrics = json.loads((out / "metrics.json").read_text())
    for key in TIMES:
        metrics.pop(key, None)
    metrics.get("dynamics", {}).pop("seconds", None)
    return metrics


@pytest.mark.parametrize(
    ("config", "values"),
    [
        (MopoRunConfig, {"lam": 1.5, "target_entropy": "action-dim", "model_epochs": 3}),
        (PrimorlRunConfig, {"epsilon": 2.0, "trajectories": 30, "model": None, "clip": 0.1}),
        (PrimorlRunConfig, {"model": "runs/x/model.pt", "epochs": 4, "start_states": "initial"}),
    ],
)
def test_config_round_trips(config: Any, values: dict[str, Any]) -> None:
    """from_dict(to_dict()) gives the same config (through JSON, as config.json and TOML do)."""
    c = config.from_dict(values)
    again = config.from_dict(json.loads(json.dumps(c.to_dict())))
    assert again == c and again.fingerprint() == c.fingerprint()
    assert registry.get(config.system).Config is config


@pytest.mark.parametrize("system", ["mopo", "primorl"])
def test_toml_run_equals_the_command_line(
    system: str, files: dict[str, Path], tmp_path: Path, small_dynamics: None
) -> None:
    """`privrl run CONFIG.toml` and `privrl train SYSTEM FLAGS` with the same seed write the
    same metrics.json (apart from wall-clock times) and the same privacy.json."""
    flags, toml = CASES[system]
    data = files[system]
    cli, file = tmp_path / "cli", tmp_path / "file"
    argv = ["train", system, "--data", str(data), "--out", str(cli), "--seed", "2", *flags]
    argv.append("--insecure-reproducible-noise")  # the same (insecure, repeatable) noise below
    assert main(argv) == 0
    path = tmp_path / "run.toml"
    path.write_text(
        f'system = "{system}"\ndata = "{data}"\nout = "{file}"\nseed = 2\n'
        f"insecure_reproducible_noise = true\n{toml}"
    )
    assert main(["run", str(path)]) == 0
    assert _metrics(cli) == _metrics(file)
    a, b = (json.loads((d / "privacy.json").read_text()) for d in (cli, file))
    a.pop("created", None), b.pop("created", None)
    assert a == b
    config = json.loads((file / "config.json").read_text())
    assert config["system"] == system and config["seed"] == 2 and config["steps_per_epoch"] == 5


@pytest.mark.parametrize(
    ("system", "flag", "value", "key", "toml", "meaning"),
    [
        ("mopo", "--real-ratio", "1.5", "real_ratio", "1.5", "must be in [0, 1]"),
        ("mopo", "--starts", "anywhere", "starts", '"anywhere"', "must be one of initial"),
        ("mopo", "--target-entropy", "lots", "target_entropy", '"lots"', "must be a number or"),
        ("primorl", "--unit", "users", "unit", '"users"', "must be trajectory or user"),
        ("primorl", "--lam", "-1", "lam", "-1", "must be in [0, 1e+06]"),
    ],
)
def test_bad_setting_means_the_same_in_a_file(
    system: str,
    flag: str,
    value: str,
    key: str,
    toml: str,
    meaning: str,
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same `error:` line, naming the flag on the command line and the key in a file."""
    data = str(files[system])
    code = main(["train", system, "--data", data, "--out", str(tmp_path / "a"), flag, value])
    flag_line = capsys.readouterr().err.strip()
    path = tmp_path / "bad.toml"
    path.write_text(f'system = "{system}"\ndata = "{data}"\nout = "{tmp_path / "b"}"\n')
    path.write_text(path.read_text() + f"{key} = {toml}\n")
    assert code == 2 and main(["run", str(path)]) == 2
    file_line = capsys.readouterr().err.strip()
    assert flag_line.startswith(f"error: {flag} {meaning}"), flag_line
    assert file_line.startswith(f"error: {path}: {key} {meaning}"), file_line
    assert flag_line.split(meaning)[1] == file_line.split(meaning)[1]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_model_only_run_takes_no_data_setting() -> None:
    """--model reuses a release: a setting of the private training beside it is refused."""
    with pytest.raises(ValueError, match="--epsilon set"):
        PrimorlRunConfig(model=Path("m.pt"), epsilon=1.0)
    with pytest.raises(ConfigError, match="user_column goes with --unit user"):
        PrimorlRunConfig(user_column="uid")


@pytest.mark.parametrize("system", ["mopo", "primorl"])
def test_file_run_checks_the_ledger_before_any_record(
    system: str, files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Property (ledger before data): a run from a TOML file on a ledgered dataset whose episode
    arrays are unreadable is refused by the ledger (MOPO: not private; PRIMORL: would overspend
    ε = 0.01), so nothing read an array, and the run directory holds no result."""
    import shutil

    data = tmp_path / "broken.h5"
    shutil.copyfile(files[system], data)
    BudgetLedger.init(data, epsilon=0.01, delta=1e-5, unit="trajectory", relation="add_remove")
    with h5py.File(data, "r+") as f:
        del f["observations"]
    out = tmp_path / "r"
    path = tmp_path / "run.toml"
    setting = (
        "noise_multiplier = 1.0\nsteps = 4\nsampling_rate = 0.2\n" if system == "primorl" else ""
    )
    path.write_text(f'system = "{system}"\ndata = "{data}"\nout = "{out}"\n{setting}')
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after accountants' warnings
    assert err.startswith("error:"), err
    assert "ledger" in err.lower() or "not differentially private" in err, err
    assert "observations" not in err
    assert not (out / "metrics.json").exists() and not (out / "config.json").exists()


def test_resume_insists_on_a_checkpoint(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`privrl run --resume` (like `train mopo --resume`) refuses a run directory without a
    checkpoint instead of starting afresh."""
    path = tmp_path / "run.toml"
    path.write_text(f'system = "mopo"\ndata = "{files["mopo"]}"\nout = "{tmp_path / "r"}"\n')
    assert main(["run", str(path), "--resume"]) == 2
    assert "--resume: no checkpoint" in capsys.readouterr().err


@pytest.mark.slow
def test_primorl_crash_after_the_release_resumes_without_a_second_spend(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Property (one spend per release): a run interrupted after DP-FedAvg keeps only the
    pending release and its record, and its reservation stays counted on the ledger; the rerun
    resumes from the pending release without training again, takes over that reservation
    (no second spend) and completes it, and then deletes the pending release (Result.discard);
    a third run of the same flags is refused as finished."""
    import shutil

    from privrl.primorl import primorl as P

    data = tmp_path / "d.h5"
    shutil.copyfile(files["primorl"], data)
    BudgetLedger.init(
        data, epsilon=50.0, delta=1e-5, unit="trajectory", relation="add_remove", overwrite=True
    )
    out = tmp_path / "run"
    flags = ["-z", "5", *CASES["primorl"][0][2:]]
    argv = ["train", "primorl", "--data", str(data), "--out", str(out), *flags]
    policy_stage = P.policy_from_model

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(P, "policy_from_model", interrupted)
    assert main(argv) == 130
    assert sorted(p.name for p in out.iterdir()) == ["released.pending.pt", "run.json"]
    (reserved,) = BudgetLedger.for_dataset(data).entries
    assert reserved.status == "reserved"
    trained: list[int] = []
    train = P.train_dp_fedavg
    monkeypatch.setattr(P, "policy_from_model", policy_stage)
    monkeypatch.setattr(P, "train_dp_fedavg", lambda *a, **k: trained.append(1) or train(*a, **k))
    capsys.readouterr()
    assert main(argv) == 0
    assert "resuming" in capsys.readouterr().err and not trained
    (entry,) = BudgetLedger.for_dataset(data).entries
    assert (entry.run_id, entry.status) == (reserved.run_id, "complete")
    assert not (out / "released.pending.pt").exists() and (out / "model.pt").is_file()
    assert main(argv) == 2
    assert "holds a finished run" in capsys.readouterr().err


def test_a_checkpoint_recorded_before_the_reward_scale_option_resumes(tmp_path) -> None:
    """A checkpoint whose record predates `data_env_id` / `reward_transform` was trained in the
    dataset's own scale: it resumes a run in that scale and is refused for another scale."""
    import json

    from privrl.systems.mopo import RECORD, check_resume

    old = {"algorithm": "mopo", "env_id": "privrl/Pendulum-v0", "epochs": 3}
    (tmp_path / "agent.pt").write_bytes(b"")
    (tmp_path / RECORD).write_text(json.dumps(old))
    same = {**old, "data_env_id": "privrl/Pendulum-v0", "reward_transform": "privrl"}
    assert check_resume(tmp_path, same, ["agent.pt"], insist=False)
    (tmp_path / RECORD).write_text(json.dumps(old))
    other = {**old, "env_id": "Pendulum-v1", "data_env_id": "privrl/Pendulum-v0"}
    with pytest.raises(ValueError, match="different run"):
        check_resume(tmp_path, other, ["agent.pt"], insist=False)


def test_primorl_keeps_its_secret_state_beside_the_data_not_in_the_run_directory(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Property (resume state is secret): DP-FedAvg's state (θ(t) and the noise generator's
    state) is saved in `.privrl-secret/KEY/` beside the dataset, never in --out; a run cut off
    mid-training resumes from it, and the finished run deletes it."""
    import shutil

    from privrl.primorl import primorl as P

    data = tmp_path / "data" / "d.h5"
    data.parent.mkdir()
    shutil.copyfile(files["primorl"], data)
    out = tmp_path / "run"
    argv = ["train", "primorl", "--data", str(data), "--out", str(out), "-z", "5"]
    argv += CASES["primorl"][0][2:]
    train = P.train_dp_fedavg
    rounds: list[int] = []

    def cut_after_round_2(*args: Any, **kwargs: Any) -> Any:
        save = kwargs["on_checkpoint"]

        def checkpoint(state: dict[str, Any]) -> None:
            save(state)
            if state["rounds"] >= 2:
                raise KeyboardInterrupt

        return train(*args, **{**kwargs, "checkpoint_every": 1, "on_checkpoint": checkpoint})

    monkeypatch.setattr(P, "train_dp_fedavg", cut_after_round_2)
    assert main(argv) == 130
    secret = list((data.parent / ".privrl-secret").glob("*/fedavg_state.pt"))
    assert len(secret) == 1 and not list(out.rglob("fedavg_state.pt"))

    def resumed(*args: Any, **kwargs: Any) -> Any:
        rounds.append(int(kwargs["resume"]["rounds"]) if kwargs.get("resume") else 0)
        return train(*args, **kwargs)

    monkeypatch.setattr(P, "train_dp_fedavg", resumed)
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    assert rounds == [2]  # continued from the secret state, not from scratch
    assert (out / "model.pt").is_file() and not secret[0].exists()
    assert not (data.parent / ".privrl-secret").exists() or not any(
        (data.parent / ".privrl-secret").iterdir()
    )
