"""`privrl audit`: the run directory, the failure exit and clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privrl.cli.main import main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "dp-apvi", "--epsilon", "1", "--trials", "20000"],
        ["audit", "gpope", "--epsilon", "1", "--trials", "20000"],
    ],
)
def test_audit_writes_the_run_directory(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code, stdout, err = _run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("epsilon_claimed", "epsilon_lower_bound", "epsilon_lower_bound_ci", "trials"):
        assert key in metrics
    assert metrics["trials"] == 20000
    assert 0.5 < metrics["auc"] < 1.0
    assert 0 <= metrics["epsilon_lower_bound"] <= metrics["epsilon_claimed"] <= 1.0 + 1e-9
    assert (out / "plots" / "roc.png").stat().st_size > 0
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["epsilon"] == pytest.approx(metrics["epsilon_claimed"])
    sources = {p["name"]: p["source"] for p in privacy["public_parameters"]}
    assert sources and set(sources.values()) <= {"flag", "derived", "default"}
    assert json.loads((out / "config.json").read_text())["trials"] == 20000
    assert "lower bound" in stdout


def test_a_broken_mechanism_fails_the_audit(
    broken_gaussian: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "run"
    argv = ["audit", "dp-apvi", "--epsilon", "1", "--trials", "20000", "--out", str(out)]
    code, _, err = _run(argv, capsys)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: audit failed")
    assert json.loads((out / "metrics.json").read_text())["violated"] is True


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["audit", "dp-apvi", "--trials", "10"], "exactly one of --epsilon"),
        (["audit", "dp-apvi", "--epsilon", "1", "--rho", "1"], "exactly one of --epsilon"),
        (["audit", "dp-apvi", "--epsilon", "-1"], "--epsilon must be"),
        (["audit", "dp-apvi", "--epsilon", "nan"], "--epsilon must be"),
        (["audit", "dp-apvi", "--rho", "1", "--states", "1"], "--states must be >= 2"),
        (["audit", "dp-apvi", "--rho", "1", "--delta", "2"], "--delta must be in"),
        (["audit", "gpope", "--epsilon", "1", "--canary", "foo"], "--canary must be"),
        (["audit", "dp-apvi", "--epsilon", "1", "--mechanism", "x"], "--mechanism must be"),
        (["audit", "dp-apvi", "--rho", "1", "--mechanism", "laplace"], "takes --epsilon"),
        (["audit", "dp-apvi", "--epsilon", "1", "--trials", "100000000"], "at most"),
        (["audit", "gpope", "--epsilon", "1", "--trials", "1"], "--trials must be >= 2"),
        (["audit", "gpope", "--epsilon", "1", "--sigma", "1"], "exactly one of --epsilon"),
        (["audit", "gpope", "--sigma", "-1"], "sigma must be"),
    ],
)
def test_bad_input_is_one_error_line(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run([*argv, "--out", str(tmp_path / "o")], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], err


def test_out_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = _run(["audit", "gpope", "--epsilon", "1", "--out", str(f)], capsys)
    assert code == 2 and err.startswith("error: --out") and "existing file" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "dp-sgd", "--noise-multiplier", "3.73", "--trials", "5000"],
        ["audit", "dp-sgd", "--noise-multiplier", "3.73", "--mode", "one-run"],
        ["audit", "dp-vapvi", "--epsilon", "1", "--trials", "20000"],
    ],
)
def test_a_broken_mechanism_fails_the_new_audits(
    argv: list[str],
    broken_gaussian: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """10× less noise than the report states: exit 1 and one `error: audit failed` line, from
    DP-SGD's many-run and one-run audits and DP-VAPVI's."""
    out = tmp_path / "run"
    code, _, err = _run([*argv, "--out", str(out)], capsys)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: audit failed")
    assert json.loads((out / "metrics.json").read_text())["violated"] is True
