"""`privrl ope ...`: the --env chain and --data paths, the run directory, the ledger, and the
bad-input contract (exit 2, exactly one stderr line starting `error:`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import app, main
from privrl.cli.ope import ope_app
from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import save_hdf5
from privrl.envs.chain import ChainMDP
from privrl.ope import gpope as gpope_mod

if not any(g.name == "ope" for g in app.registered_groups):  # until main.py registers it
    app.add_typer(ope_app, name="ope")

EPS, DELTA, M, N = 1.0, 1e-5, 100, 200
SIGMA_REF = 2.84  # meets (EPS, DELTA) for (M, N): checked in tests/ope/test_gpope.py


@pytest.fixture(autouse=True)
def fast_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the 10-40 s dense-order calibration for the one configuration used here (its
    value is verified in tests/ope); every report's ε is still computed by the accountant."""
    real = gpope_mod._cached_sigma

    def cached(eps: float, delta: float, m: int, n: int, mode: str) -> float:
        if (eps, delta, m, n, mode) == (EPS, DELTA, M, N, "rigorous"):
            return SIGMA_REF
        return real(eps, delta, m, n, mode)

    monkeypatch.setattr(gpope_mod, "_cached_sigma", cached)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_bad_input(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:"), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture(scope="module")
def chain_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "chain.h5"
    save_hdf5(ChainMDP().sample(M, seed=0), path)
    return path


@pytest.fixture(scope="module")
def no_probs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = ChainMDP().sample(20, seed=1)
    bare = TrajectoryDataset(
        observations=d.observations,
        actions=d.actions,
        rewards=d.rewards,
        terminated=d.terminated,
        truncated=d.truncated,
        episode_offsets=d.episode_offsets,
        metadata=d.metadata,
    )
    path = tmp_path_factory.mktemp("data") / "bare.h5"
    save_hdf5(bare, path)
    return path


def test_gpope_env_chain_writes_run_directory(tmp_path: Path, capsys) -> None:
    """--env chain: tuning on a public sample, run dir with mspbe, curve, privacy, theta."""
    out = tmp_path / "run"
    argv = [
        "ope",
        "gpope",
        "--env",
        "chain",
        "--trajectories",
        str(M),
        "--epsilon",
        str(EPS),
        "--iterations",
        str(N),
        "--out",
        str(out),
        "--seed",
        "3",
    ]
    code, _stdout, err = run(argv, capsys)
    assert code == 0, err
    for name in ("config.json", "metrics.json", "metrics.csv", "privacy.json", "theta.npy"):
        assert (out / name).is_file(), name
    assert (out / "plots" / "mspbe.png").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0 < metrics["mspbe"] < 1 and metrics["epsilon"] <= EPS
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["relation"] == "replace_one" and privacy["unit"] == "trajectory"
    (rel,) = privacy["releases"]
    assert rel["count"] == N and rel["sensitivity"] == pytest.approx(2 * metrics["clip"])
    assert any("PUBLIC" in p for p in privacy["public"])
    curve = (out / "metrics.csv").read_text().splitlines()
    assert curve[0] == "iteration,mspbe" and len(curve) > 10
    assert np.load(out / "theta.npy").shape == (39,)


def test_gpope_data_path_and_ledger(chain_file: Path, tmp_path: Path, capsys) -> None:
    """--data with explicit --clip/--step-size; a ledger records the spend and refuses the run
    that would exceed the budget."""
    out = tmp_path / "run"
    base = [
        "ope",
        "gpope",
        "--data",
        str(chain_file),
        "--features",
        "onehot",
        "--epsilon",
        str(EPS),
        "--iterations",
        str(N),
        "--clip",
        "0.05",
        "--step-size",
        "0.01",
    ]
    code, _, err = run([*base, "--out", str(out)], capsys)
    assert code == 0, err
    assert json.loads((out / "metrics.json").read_text())["epsilon"] <= EPS
    code, _, err = run(
        [
            "ledger",
            "init",
            str(chain_file),
            "--epsilon",
            "1.2",
            "--delta",
            "1e-5",
            "--relation",
            "replace_one",
        ],
        capsys,
    )
    assert code == 0, err
    code, _, err = run([*base, "--out", str(tmp_path / "r2")], capsys)
    assert code == 0, err
    code, _, err = run([*base, "--out", str(tmp_path / "r3")], capsys)
    assert_bad_input(code, err, "ε")


def test_gpope_data_without_tuning_inputs_is_refused(chain_file: Path, tmp_path, capsys):
    argv = [
        "ope",
        "gpope",
        "--data",
        str(chain_file),
        "--features",
        "onehot",
        "--epsilon",
        "1",
        "--out",
        str(tmp_path / "x"),
    ]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "--public-data")


def test_missing_behaviour_probs_is_a_clear_error(no_probs_file: Path, tmp_path, capsys):
    argv = [
        "ope",
        "gpope",
        "--data",
        str(no_probs_file),
        "--features",
        "onehot",
        "--target-policy",
        "uniform",
        "--epsilon",
        "1",
        "--clip",
        "1",
        "--step-size",
        "0.1",
        "--out",
        str(tmp_path / "x"),
    ]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "behaviour_probs")


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--epsilon", "0"], "--epsilon"),
        (["--epsilon", "-1"], "--epsilon"),
        (["--epsilon", "1", "--delta", "1.5"], "--delta"),
        (["--epsilon", "1", "--delta", "0"], "--delta"),
    ],
)
def test_bad_privacy_parameters(flags: list[str], fragment: str, tmp_path, capsys) -> None:
    for cmd in ("gpope", "dp-lsw"):
        argv = ["ope", cmd, "--env", "chain", *flags, "--out", str(tmp_path / "x")]
        code, _, err = run(argv, capsys)
        assert_bad_input(code, err, fragment)


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--env", "moon"], "--env"),
        (["--env", "chain", "--features", "wavelet:3"], "feature"),
        (["--env", "chain", "--accounting", "loose"], "--accounting"),
        ([], "--data"),
    ],
)
def test_bad_inputs(flags: list[str], fragment: str, tmp_path, capsys) -> None:
    argv = ["ope", "gpope", *flags, "--epsilon", "1", "--out", str(tmp_path / "x")]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, fragment)


def test_baselines_and_lstd_on_the_chain(tmp_path: Path, capsys) -> None:
    """dp-lsw / dp-lsl / lstd --env chain write run directories with mspbe; LSTD is labelled
    non-private."""
    for cmd, extra in (
        ("dp-lsw", ["--epsilon", "1"]),
        ("dp-lsl", ["--epsilon", "1"]),
        ("lstd", []),
    ):
        out = tmp_path / cmd
        code, _, err = run(
            ["ope", cmd, "--env", "chain", "--trajectories", "200", *extra, "--out", str(out)],
            capsys,
        )
        assert code == 0, (cmd, err)
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["mspbe"] >= 0
        privacy = json.loads((out / "privacy.json").read_text())
        assert privacy["private"] is (cmd != "lstd")
    lstd_m = json.loads((tmp_path / "lstd" / "metrics.json").read_text())["mspbe"]
    assert lstd_m < 1e-4
    code, _, err = run(
        [
            "ope",
            "dp-lsw",
            "--env",
            "chain",
            "--target-policy",
            "uniform",
            "--epsilon",
            "1",
            "--out",
            str(tmp_path / "y"),
        ],
        capsys,
    )
    assert_bad_input(code, err, "on-policy")
