"""`privrl train primorl`: the run-directory contract, --model reuse without data, the CLI's
one-line errors and the ledger checked before the data (what neighbours publish is checked
with every private command in tests/privacy/test_neighbour_diff.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

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
]
DECLARED = [2, 9, 17, 25, 28, 29]  # episodes the file declares public (as a recipe would)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "d.h5"
    extra = {"n_trajectories": 30, "public_episodes": DECLARED}
    save_hdf5(pendulum_data(30, seed=0, extra=extra), path)
    return path


def _released(out: Path):
    from privrl.primorl.primorl import load_released_model

    return load_released_model(out / "model.pt")


def _public_setup(out: Path) -> tuple[dict, list[str], list[str]]:
    """config.json's public source, privacy.json's public items and notes."""
    privacy = json.loads((out / "privacy.json").read_text())
    config = json.loads((out / "config.json").read_text())
    return config["public_data"], privacy["public"], privacy["notes"]


def _private_only(tmp_path: Path, name: str, change_episode: int | None = None) -> Path:
    """30 episodes, no public declaration; optionally one episode's states replaced."""
    ds = pendulum_data(30, seed=0, extra={"n_trajectories": 30})
    if change_episode is not None:
        from privrl.data.dataset import TrajectoryDataset

        obs = ds.observations.copy()
        a, b = ds.episode_offsets[change_episode : change_episode + 2]
        obs[a + change_episode : b + change_episode + 1] *= 0.5
        ds = TrajectoryDataset(
            observations=obs,
            actions=ds.actions,
            rewards=ds.rewards * 0.5,
            terminated=ds.terminated,
            truncated=ds.truncated,
            episode_offsets=ds.episode_offsets,
            metadata=ds.metadata,
        )
    path = tmp_path / f"{name}.h5"
    save_hdf5(ds, path)
    return path


def test_without_public_data_no_private_episode_is_used_in_the_clear(tmp_path: Path) -> None:
    """No --public-data and no declaration: model.pt holds no state of any episode, the
    input normaliser is the declared bounds', every member is an elite and all --steps rounds
    run (patience 1 cannot stop it); a dataset with one episode changed gives the same
    normaliser, elites, rounds, config.json and report notes. privacy.json says the guarantee
    covers every trajectory, config.json that there was no public source."""
    seen = []
    for name, change in (("d", None), ("d2", 0)):
        path = _private_only(tmp_path, name, change)
        out = tmp_path / f"run-{name}"
        argv = ["train", "primorl", "--data", str(path), "-z", "2", *FAST, "--patience", "1"]
        assert main([*argv, "--out", str(out)]) == 0
        rel = _released(out)
        assert rel.public_states is None and rel.state_dict()["public_states"] is None
        norm = rel.model.input_normalizer
        assert norm.source == "declared observation/action bounds"
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["rounds"] == 4 and metrics["stopped_early"] is False
        assert metrics["elites"] == list(rel.model.elites) == list(range(rel.model.config.members))
        source, _, notes = _public_setup(out)
        assert source["source"] == "none"
        assert any("covers every trajectory of the private dataset" in n for n in notes)
        config = json.loads((out / "config.json").read_text())
        config.pop("data")
        seen.append((np.asarray(norm.mean).tolist(), np.asarray(norm.std).tolist(), config, notes))
    assert seen[0] == seen[1]


def test_public_data_file_drives_normaliser_stopping_and_starts(tmp_path: Path) -> None:
    """--public-data FILE: the normaliser is fitted on the file's episodes, the model carries
    exactly its states, config.json records its content fingerprint (never a private
    statistic) and privacy.json names it as public, not covered."""
    from privrl.data.io import content_sha256

    data = _private_only(tmp_path, "d")
    pub_ds = pendulum_data(8, seed=42)
    pub = tmp_path / "pub.h5"
    save_hdf5(pub_ds, pub)
    out = tmp_path / "run"
    argv = ["train", "primorl", "--data", str(data), "-z", "2", *FAST, "--public-data", str(pub)]
    assert main([*argv, "--out", str(out)]) == 0
    rel = _released(out)
    tr = pub_ds.transitions()
    np.testing.assert_array_equal(rel.public_states[0], tr.observations)
    x = np.concatenate([tr.observations, tr.actions], axis=1).astype(np.float64)
    np.testing.assert_allclose(np.asarray(rel.model.input_normalizer.mean), x.mean(0), rtol=1e-5)
    source, public, notes = _public_setup(out)
    assert source == {
        "source": "public dataset file",
        "file": "pub.h5",
        "content_sha256": content_sha256(pub),
        "episodes": 8,
    }
    assert any("pub.h5" in p for p in public)
    assert any("except the public data (the dataset pub.h5" in n for n in notes)
    assert json.loads((out / "metrics.json").read_text())["public_split_units"] == 8


def test_declared_public_episodes_are_the_public_split(data: Path, tmp_path: Path) -> None:
    """Episodes the file's metadata declares public are the public split, exactly."""
    from privrl.data.io import load_hdf5

    out = tmp_path / "run"
    assert main(["train", "primorl", "--data", str(data), "-z", "2", *FAST, "--out", str(out)]) == 0
    want = load_hdf5(data).subset(DECLARED).transitions().observations
    np.testing.assert_array_equal(_released(out).public_states[0], want)
    source, public, notes = _public_setup(out)
    assert source == {
        "source": "declared in the dataset's metadata",
        "key": "public_episodes",
        "ids": 6,
    }
    assert any("6 episodes declared public" in n for n in notes)
    # the identity published: the public episodes' own content fingerprint (a file of them)
    from privrl.data.io import content_sha256

    save_hdf5(load_hdf5(data).subset(DECLARED), tmp_path / "pub.h5")
    assert any(content_sha256(tmp_path / "pub.h5") in p for p in public)


def test_bad_public_data_is_refused_before_the_data_is_read(
    data: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A public file of other spaces, a ledgered one, the private file itself, a public file
    beside a declaration, and public-split starts without public data: one error line each,
    before any episode is read."""
    from gymnasium import spaces

    import privrl.data.io as io

    private = _private_only(tmp_path, "p")
    other = pendulum_data(5, seed=1)
    other = other.with_metadata(
        other.metadata.replace(action_space=spaces.Box(-1.0, 1.0, (1,), np.float32)),
        validate=False,
    )
    save_hdf5(other, tmp_path / "other.h5")
    ledgered = _private_only(tmp_path, "led", change_episode=3)
    copy = tmp_path / "copy.h5"
    copy.write_bytes(private.read_bytes())
    assert main(["ledger", "init", str(ledgered), "--epsilon", "5", "--delta", "1e-5"]) == 0
    no_ids = tmp_path / "no_ids.h5"
    save_hdf5(pendulum_data(30, extra={"n_trajectories": 30, "public_unit_ids": [1]}), no_ids)
    users = tmp_path / "users.h5"
    extra = {"n_users": 15, "public_episodes": [0, 1]}
    save_hdf5(pendulum_data(30, users=np.arange(30) // 2, extra=extra), users)
    monkeypatch.setattr(io, "load_hdf5", lambda *a, **k: pytest.fail("episodes read"))
    cases = [
        (private, ["--public-data", str(tmp_path / "other.h5")], "action space"),
        (private, ["--public-data", str(ledgered)], "private data"),
        (private, ["--public-data", str(private)], "private dataset itself"),
        (private, ["--public-data", str(copy)], "same episodes"),
        (data, ["--public-data", str(ledgered)], "one public source"),
        (private, ["--start-states", "public-split"], "needs public data"),
        (no_ids, [], "stores no unit ids"),
        (users, ["--unit", "user"], "declares public episodes, not users"),
    ]
    for path, extra, match in cases:
        capsys.readouterr()
        argv = ["train", "primorl", "--data", str(path), "-z", "2", *FAST, *extra]
        assert main([*argv, "--out", str(tmp_path / "o")]) == 2, extra
        assert match in _err(capsys)


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
    # a release from before public data was declared-only: its states are not public
    import torch

    state = torch.load(out / "model.pt", weights_only=False)
    del state["public_source"]
    torch.save(state, tmp_path / "old.pt")
    argv = ["train", "primorl", "--model", str(tmp_path / "old.pt"), "--epochs", "1"]
    code = main([*argv, "--start-states", "public-split", "--out", str(tmp_path / "old")])
    assert code == 2 and "released before public data had to be declared" in _err(capsys)


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
        (["-z", "1", "--dynamics-hidden", "64,0"], "positive layer widths"),
        (["-z", "1", "--server-ema", "1"], "server EMA"),
        (["-z", "1", "--dynamics-hidden", "64,wide"], "comma-separated list of ints"),
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


def test_data_declare_public_writes_a_declaration_train_primorl_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`privrl data declare-public FILE --episodes …` records the declaration (a copy with
    --out; the original and the episodes' fingerprint untouched), `train primorl` uses exactly
    those episodes; a ledgered file and a second declaration are refused."""
    from privrl.data.io import content_sha256, load_hdf5, read_header

    src = _private_only(tmp_path, "src")
    dst = tmp_path / "declared.h5"
    assert main(["data", "declare-public", str(src), "--episodes", "4,1", "--out", str(dst)]) == 0
    assert read_header(dst).metadata.extra["public_episodes"] == [1, 4]
    assert "public_episodes" not in read_header(src).metadata.extra
    assert content_sha256(dst, recompute=True) == content_sha256(src)
    out = tmp_path / "run"
    assert main(["train", "primorl", "--data", str(dst), "-z", "2", *FAST, "--out", str(out)]) == 0
    want = load_hdf5(src).subset([1, 4]).transitions().observations
    np.testing.assert_array_equal(_released(out).public_states[0], want)
    capsys.readouterr()
    assert main(["data", "declare-public", str(dst), "--episodes", "2"]) == 2
    assert "already declares" in _err(capsys)
    assert main(["ledger", "init", str(src), "--epsilon", "5", "--delta", "1e-5"]) == 0
    capsys.readouterr()
    assert main(["data", "declare-public", str(src), "--episodes", "2"]) == 2
    assert "ledger" in _err(capsys)


def test_device_is_recorded_and_a_bad_or_absent_one_is_one_error_line(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "primorl", "--data", str(data), "-z", "2", *FAST]
    assert main([*argv, "--device", "cpu", "--out", str(tmp_path / "cpu")]) == 0
    assert json.loads((tmp_path / "cpu" / "metrics.json").read_text())["device"] == "cpu"
    capsys.readouterr()
    assert main([*argv, "--device", "gpu", "--out", str(tmp_path / "bad")]) == 2
    err = _err(capsys)
    assert "--device" in err and "cpu, cuda, cuda:N or auto" in err
    if not torch.cuda.is_available():  # refused from the plan, before the ledger or the data
        assert main([*argv, "--device", "cuda", "--out", str(tmp_path / "none")]) == 2
        assert "--device" in (err := _err(capsys)) and "needs a CUDA GPU" in err
        model = str(tmp_path / "cpu" / "model.pt")
        again = ["train", "primorl", "--model", model, "--out", str(tmp_path / "again")]
        code = main([*again, "--device", "cuda:0", "--epochs", "1"])
        assert code == 2 and "needs a CUDA GPU" in _err(capsys)


def test_dynamics_hidden_sets_the_released_architecture_and_d(data: Path, tmp_path: Path) -> None:
    """--dynamics-hidden replaces the preset's widths (Pendulum 64,64): the released model has
    them, privacy.json's release counts the smaller d, the event is unchanged (d sets no
    sensitivity), and with --model it is refused (the release is reused as trained)."""
    releases = {}
    for name, flag in (("preset", []), ("small", ["--dynamics-hidden", "16"])):
        out = tmp_path / name
        argv = ["train", "primorl", "--data", str(data), "-z", "2", *FAST, "--out", str(out)]
        assert main([*argv, *flag]) == 0
        (releases[name],) = json.loads((out / "privacy.json").read_text())["releases"]
    assert _released(tmp_path / "small").model.config.hidden == (16,)
    assert _released(tmp_path / "preset").model.config.hidden == (64, 64)
    assert releases["small"]["event"] == releases["preset"]["event"]
    assert 0 < releases["small"]["size"] < releases["preset"]["size"]
    config = json.loads((tmp_path / "small" / "config.json").read_text())
    assert config["dynamics_hidden"] == [16]
    model = str(tmp_path / "small" / "model.pt")
    argv = ["train", "primorl", "--model", model, "--out", str(tmp_path / "m")]
    assert main([*argv, "--dynamics-hidden", "16"]) == 2


def test_server_ema_is_a_flag_recorded_in_the_release(data: Path, tmp_path: Path) -> None:
    """--server-ema γ reaches DP-FedAvg, privacy.json names the released average, the event
    is unchanged; with --model it is refused (the release is reused as trained)."""
    releases = _releases(data, tmp_path, "--server-ema", ("0", "0.9"))
    assert "released_iterate" in releases["0.9"]["extra"]
    assert "released_iterate" not in releases["0"]["extra"]
    assert releases["0"]["event"] == releases["0.9"]["event"]
    model = str(tmp_path / "0.9" / "model.pt")
    argv = ["train", "primorl", "--model", model, "--out", str(tmp_path / "m")]
    assert main([*argv, "--server-ema", "0.9"]) == 2


def test_a_policy_that_diverges_in_the_model_is_one_error_line_not_a_bug(
    data: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release the noise drowned can drive SAC to non-finite parameters: the run ends with
    one `error:` line saying so (exit 1), not as an internal error, and publishes nothing."""
    from privrl.primorl import policy_stage

    def diverge(actor, epoch: int) -> None:
        raise policy_stage.ModelDiverged(f"{policy_stage.POLICY_DIVERGED}: after epoch {epoch}")

    monkeypatch.setattr(policy_stage, "check_finite_policy", diverge)
    out = tmp_path / "o"
    argv = ["train", "primorl", "--data", str(data), "-z", "2", *FAST, "--out", str(out)]
    capsys.readouterr()
    assert main(argv) == 1
    err = _err(capsys)
    assert err.startswith("error: the policy diverged in the model") and "internal" not in err
    assert "no policy was trained" in err and "ledger" in err
    assert not (out / "metrics.json").exists() and not (out / "policy.pt").exists()
