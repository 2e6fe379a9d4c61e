"""`privrl online ...`: the run-directory contract, the privacy report of each model, and the
bad-input contract (exit 2, one `error:` line, no traceback)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from privrl.cli.main import app, main
from privrl.cli.online import online_app


@pytest.fixture(autouse=True, scope="module")
def _registered() -> None:
    """Register `online` on the main app if cli/main.py does not (yet) do it."""
    if not any(g.name == "online" for g in app.registered_groups):
        app.add_typer(online_app, name="online")


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


def assert_run_dir(out: Path, episodes: int) -> tuple[dict, dict]:
    for name in ("config.json", "metrics.json", "metrics.csv", "privacy.json"):
        assert (out / name).is_file(), name
    assert (out / "plots" / "regret.png").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    privacy = json.loads((out / "privacy.json").read_text())
    for key in ("unit", "relation", "epsilon", "delta", "rho", "accountant", "releases"):
        assert key in privacy, key
    with open(out / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert int(rows[-1]["episode"]) == episodes
    assert float(rows[-1]["regret"]) == pytest.approx(metrics["regret"])
    regrets = [float(r["regret"]) for r in rows]
    assert regrets == sorted(regrets)  # cumulative
    return metrics, privacy


def test_sdp_pe_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sdp"
    argv = [
        "online",
        "sdp-pe",
        "--env",
        "riverswim",
        "--episodes",
        "3000",
        "--epsilon",
        "1",
        "--delta",
        "1e-5",
        "--calibration",
        "theory",
        "--states",
        "3",
        "--horizon",
        "4",
        "--seed",
        "3",
        "--out",
        str(out),
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    metrics, privacy = assert_run_dir(out, 3000)
    assert privacy["model"] == "shuffle" and privacy["unit"] == "user"
    assert privacy["relation"] == "replace_one"
    assert privacy["epsilon"] <= 1.0 + 1e-9 and privacy["delta"] == 1e-5
    rel = privacy["releases"][0]
    assert rel["noise"]["epsilon_counter"] == pytest.approx(1 / 24)
    assert rel["noise"]["delta_counter"] == pytest.approx(1e-5 / 24)
    assert rel["extra"]["calibration"] == "theory"
    assert metrics["stages"] and metrics["stages"][0]["T"] == 24
    config = json.loads((out / "config.json").read_text())
    assert config["calibration"] == "theory" and config["seed"] == 3
    assert "shuffle model" in stdout
    # Everything that sets the noise is listed with its public source (flags or the env).
    params = {p["name"]: p for p in privacy["public_parameters"]}
    assert params["S"] == {"name": "S", "value": 3, "source": "flag"}
    assert params["A"]["source"] == "default" and params["H"]["value"] == 4
    assert params["episodes (users) K"]["value"] == 3000
    assert params["epsilon"]["value"] == 1.0 and params["delta"]["value"] == 1e-5


@pytest.mark.parametrize(
    ("cmd", "extra", "model"),
    [
        ("pe", [], "central"),
        ("ucbvi", [], "central"),
        ("dp-ucbvi", ["--privatizer", "central", "--epsilon", "2"], "central"),
        ("dp-ucbvi", ["--privatizer", "local", "--epsilon", "2"], "local"),
    ],
)
def test_other_algorithms(
    cmd: str, extra: list[str], model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / cmd
    argv = [
        "online",
        cmd,
        "--env",
        "random-tabular",
        "--episodes",
        "400",
        "--states",
        "2",
        "--horizon",
        "3",
        "--out",
        str(out),
        *extra,
    ]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    metrics, privacy = assert_run_dir(out, 400)
    assert privacy["model"] == model
    if cmd in ("pe", "ucbvi"):
        assert privacy["private"] is False and privacy["epsilon"] == "inf"
    else:
        assert privacy["epsilon"] == pytest.approx(2.0) and privacy["delta"] == 0.0
        names = {p["name"]: p["value"] for p in privacy["public_parameters"]}
        assert names["epsilon"] == 2.0 and names["S"] == 2 and names["H"] == 3
    assert metrics["regret"] >= 0


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["sdp-pe", "--epsilon", "0"], ("--epsilon", "> 0")),
        (["sdp-pe", "--epsilon", "-1"], ("--epsilon",)),
        (["sdp-pe", "--epsilon", "1", "--delta", "0"], ("--delta", "(0, 1)")),
        (["sdp-pe", "--epsilon", "1", "--delta", "1.5"], ("--delta",)),
        (["sdp-pe", "--epsilon", "1", "--env", "cartpole"], ("unknown environment", "riverswim")),
        (["sdp-pe", "--epsilon", "1", "--calibration", "loose"], ("--calibration",)),
        (["dp-ucbvi", "--epsilon", "1", "--privatizer", "shuffle"], ("--privatizer",)),
        (["dp-ucbvi", "--epsilon", "nan"], ("--epsilon",)),
        (["ucbvi", "--env", "mountain-car"], ("unknown environment",)),
        (["pe", "--episodes", "0"], ("--episodes",)),
        (["pe", "--epsilon", "1"], ("--epsilon",)),
        (["dp-ucbvi", "--privatizer", "local"], ("--epsilon",)),
        (["pe", "--env", "random-tabular", "--states", "12"], ("max_policies",)),
    ],
)
def test_bad_input(
    argv: list[str], fragments: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["online", *argv, "--out", str(tmp_path / "x")], capsys)
    assert_bad_input(code, err, *fragments)
