"""CLI behaviour: help, account/calibrate values, ledger, demo, and the bad-input contract
(exit code 2, exactly one stderr line starting `error:`, no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_bad_input(code: int, err: str, *fragments: str) -> None:
    """The bad-input contract: exit 2, one stderr line starting `error:` naming the problem."""
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:"), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    for command in ("account", "calibrate", "data", "ledger", "demo"):
        assert command in out


def test_account_json_matches_accountant(capsys: pytest.CaptureFixture[str]) -> None:
    from privrl.privacy import accounting as acc

    args = ["account", "-z", "1.0", "-q", "0.00256", "-T", "10000", "--delta", "1e-5"]
    code, out, _ = run([*args, "--json", "--backend", "rdp"], capsys)
    assert code == 0
    result = json.loads(out)
    eps = result["results"][0]["epsilon"]
    expected = acc.epsilon(
        acc.sampled_gaussian_event(1.0, 10000, sampling="poisson", sampling_probability=0.00256),
        1e-5,
    )
    assert eps == pytest.approx(expected, rel=1e-9)
    assert eps == pytest.approx(1.498, rel=0.02)  # Opacus/dp-accounting reference value


def test_account_zcdp_closed_form(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["account", "-m", "zcdp", "--rho", "1", "--delta", "1e-3", "--json"], capsys)
    assert code == 0
    rows = json.loads(out)["results"]
    closed = next(r for r in rows if "Bun" in r["accountant"])["epsilon"]
    assert closed == pytest.approx(1 + 2 * np.sqrt(np.log(1e3)), rel=1e-12)
    rdp = next(r for r in rows if r["accountant"].startswith("RDP"))["epsilon"]
    assert rdp <= closed + 1e-9  # the RDP conversion is never looser than the closed form


def test_calibrate_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["calibrate", "-e", "5", "-d", "1e-5", "-q", "0.001", "-T", "7000", "--json"]
    code, out, _ = run(argv, capsys)
    assert code == 0
    result = json.loads(out)
    assert result["noise_multiplier"] == pytest.approx(0.524, rel=0.01)
    assert result["epsilon"] <= 5.0
    argv = ["calibrate", "-e", "5", "-d", "1e-5", "-q", "0.001", "-z", "0.524", "--json"]
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert 6000 < json.loads(out)["steps"] <= 7100


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["account", "-z", "1", "--delta", "2"], "--delta"),
        (["account", "-z", "-1"], "--noise-multiplier"),
        (["account", "-m", "zcdp"], "--rho"),
        (["calibrate", "-e", "1", "-T", "10", "-z", "1"], "exactly one"),
        (["calibrate", "-e", "-1", "-T", "10"], "--epsilon"),
        (["account", "--relation", "sideways", "-z", "1"], "relation"),
        (["account", "--nonsense"], "nonsense"),
        (["data", "info", "does-not-exist.h5"], "does-not-exist.h5"),
        (["ledger", "show", "does-not-exist.h5"], "does-not-exist.h5"),
    ],
)
def test_bad_input_one_error_line(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, fragment)


def _small_dataset(path: Path) -> Path:
    from privrl.envs.tabular import TabularMDP, behaviour_policy_full_support

    rng = np.random.default_rng(1)
    mdp = TabularMDP.random(4, 2, 3, rng=rng)
    policy = behaviour_policy_full_support(rng, 3, 4, 2, 0.1)
    mdp.sample(policy, 50, rng=rng).save(path)
    return path


def test_ledger_init_show_and_overspend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _small_dataset(tmp_path / "d.h5")
    code, out, err = run(["ledger", "init", str(data), "-e", "1", "-d", "1e-5"], capsys)
    assert code == 0, err
    code, _, err = run(["ledger", "init", str(data), "-e", "1", "-d", "1e-5"], capsys)
    assert_bad_input(code, err)  # refuses to overwrite a ledger (would lose its history)
    code, out, _ = run(["ledger", "show", str(data), "--json"], capsys)
    assert code == 0
    shown = json.loads(out)
    assert shown["budget"]["epsilon"] == 1.0
    assert shown["spent"]["epsilon"] == 0.0


def test_data_info_and_malformed_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _small_dataset(tmp_path / "d.h5")
    code, _out, err = run(["data", "info", str(data), "--plot", str(tmp_path / "r.png")], capsys)
    assert code == 0, err
    assert (tmp_path / "r.png").stat().st_size > 0
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"this is not an HDF5 file")
    code, _, err = run(["data", "info", str(bad)], capsys)
    assert_bad_input(code, err, "bad.h5")


def test_data_import_bad_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("ep,s,a,r\n0,0,1,0.5\n0,1,0,1.0\n")
    argv = [
        "data",
        "import",
        str(csv),
        "--columns",
        "episode=ep,obs=state,action=a,reward=r",
        "--out",
        str(tmp_path / "o.h5"),
    ]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "state")


def test_demo_writes_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    code, _stdout, err = run(["demo", "--out", str(out), "--episodes", "3000"], capsys)
    assert code == 0, err
    for name in ("config.json", "metrics.json", "metrics.csv", "privacy.json", "plots/demo.png"):
        assert (out / name).exists(), name
    metrics = json.loads((out / "metrics.json").read_text())
    privacy = json.loads((out / "privacy.json").read_text())
    for key in ("unit", "relation", "epsilon", "delta", "accountant", "releases"):
        assert key in privacy
    assert privacy["unit"] == "trajectory" and privacy["relation"] == "replace_one"
    assert len(privacy["releases"]) == 5
    # more privacy (smaller ε) never gives a better model in expectation: check the extremes
    errors = [p["model_error"] for p in metrics["points"]]
    assert errors[0] > errors[-1] > metrics["model_error_non_private"]
    assert metrics["overspend_refused"] is True
    ledger = json.loads((out / "data.h5.ledger.json").read_text())
    # each release is a transaction: a reservation before it is drawn, then its completion
    kinds = [e.get("kind") for e in ledger["entries"]]
    assert kinds == ["reserve", "complete"] * 5


def test_console_script_exit_code(tmp_path: Path) -> None:
    """The installed entry point itself returns 2 and prints no traceback on bad input."""
    proc = subprocess.run(
        [sys.executable, "-m", "privrl.cli.main", "data", "info", str(tmp_path / "missing.h5")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and "Traceback" not in proc.stderr


def test_data_collect_recipes_listed_and_validated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["data", "collect", "--recipe", "list"], capsys)
    assert code == 0
    for name in ("primorl-pendulum", "primorl-swingup", "experts-cartpole", "experts-hiv"):
        assert name in out
    code, _, err = run(["data", "collect", "--recipe", "nope", "--data-dir", str(tmp_path)], capsys)
    assert_bad_input(code, err, "unknown recipe", "primorl-pendulum")
    code, _, err = run(["data", "collect", "--env", "CartPole-v1"], capsys)
    assert_bad_input(code, err, "--out")
    code, _, err = run(["data", "collect"], capsys)
    assert_bad_input(code, err, "--env or --recipe")
