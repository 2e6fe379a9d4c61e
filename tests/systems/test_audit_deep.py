"""The audits of expert-dp's consensus filter and of PRIMORL on the run layer
(`privrl.systems.audit_deep`): configs round-trip, the command writes its run directory, a
TOML run equals the command, what is published besides metrics.json does not depend on the
seed, the twins leak, a weakened mechanism exits 1 and bad input is one `error:` line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from privrl.cli.main import main
from privrl.runs import registry
from privrl.systems.audit_deep import (
    AuditExpertDpConfig,
    AuditExpertDpSgdConfig,
    AuditPrimorlConfig,
)
from tests.systems.common import run_json as _json
from tests.systems.common import toml_text as _toml

torch.set_num_threads(1)

SMALL_PRIMORL = {"canaries": 200, "background": 20, "guesses": 40}
SMALL_FLAGS = "--canaries 200 --background 20 --guesses 40".split()
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "audit-expert-dp": ({"epsilon": 4.0, "trials": 3000}, "--epsilon 4 --trials 3000".split()),
    "audit-expert-dp-sgd": (
        {"noise_multiplier": 3.0, **SMALL_PRIMORL},
        ["--noise-multiplier", "3", *SMALL_FLAGS],
    ),
    "audit-primorl": (
        {"noise_multiplier": 1.0, **SMALL_PRIMORL},
        "--noise-multiplier 1 --canaries 200 --background 20 --guesses 40".split(),
    ),
}


@pytest.mark.parametrize(
    ("cls", "values"),
    [
        (AuditExpertDpConfig, {"epsilon": 2.0, "canary": "random", "max_len": 7}),
        (AuditExpertDpConfig, {"epsilon": 2.0, "non_private": True, "calibration": "tight"}),
        (AuditExpertDpSgdConfig, {"epsilon": 4.0, "steps": 3, "guesses": 20}),
        (AuditPrimorlConfig, {"epsilon": 4.0, "rate": 0.5, "rounds": 3, "statistic": "gradient"}),
        (AuditPrimorlConfig, {"non_private": True, **SMALL_PRIMORL}),
    ],
)
def test_config_round_trips(cls: type, values: dict[str, Any]) -> None:
    config = cls.from_dict(values)
    again = cls.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and again.fingerprint() == config.fingerprint()
    assert registry.get(cls.system).Config is cls
    assert registry.get(cls.system).data == "none"


@pytest.mark.parametrize("system", list(CASES))
def test_audit_run_directory_and_toml_face(
    system: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same seed: `privrl run` writes what `privrl audit` writes; the private audit stays
    below its claim; privacy.json lists the public parameters with their sources."""
    settings, flags = CASES[system]
    cli_out, toml_out = tmp_path / "cli", tmp_path / "toml"
    argv = ["audit", system.removeprefix("audit-"), *flags, "--seed", "3", "--out", str(cli_out)]
    assert main(argv) == 0, capsys.readouterr().err
    toml = tmp_path / "run.toml"
    toml.write_text(_toml({"system": system, "out": str(toml_out), "seed": 3, **settings}))
    assert main(["run", str(toml)]) == 0, capsys.readouterr().err
    for name in ("metrics.json", "privacy.json", "config.json"):
        assert _json(toml_out / name) == _json(cli_out / name), name
    metrics = _json(cli_out / "metrics.json")
    assert not metrics["violated"]
    assert 0 <= metrics["epsilon_lower_bound"] <= metrics["epsilon_claimed"]
    for key in ("epsilon_claimed", "epsilon_lower_bound", "trials", "auc"):
        assert key in metrics
    privacy = _json(cli_out / "privacy.json")
    assert privacy["epsilon"] == pytest.approx(metrics["epsilon_claimed"])
    sources = {p["source"] for p in privacy["public_parameters"]}
    assert sources and sources <= {"flag", "derived", "default"}
    assert privacy["unit"] == ("trajectory" if system == "audit-primorl" else "expert")
    assert (cli_out / "plots" / "roc.png").stat().st_size > 1000


@pytest.mark.parametrize("system", list(CASES))
def test_published_files_besides_metrics_do_not_depend_on_the_seed(
    system: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Structural rule: config.json and privacy.json are fixed by `plan` from public values;
    two seeds give the same privacy.json and config.json up to `seed`."""
    settings, _ = CASES[system]
    outs = []
    for seed in (1, 2):
        out = tmp_path / f"s{seed}"
        toml = tmp_path / f"s{seed}.toml"
        toml.write_text(_toml({"system": system, "out": str(out), "seed": seed, **settings}))
        assert main(["run", str(toml)]) == 0, capsys.readouterr().err
        outs.append(out)
    assert _json(outs[0] / "privacy.json") == _json(outs[1] / "privacy.json")
    configs = [_json(out / "config.json") for out in outs]
    assert {k for k in configs[0] if configs[0][k] != configs[1][k]} == {"seed"}


@pytest.mark.parametrize(
    "argv",
    [
        ["expert-dp", "--epsilon", "4", "--non-private", "--trials", "2000"],
        ["expert-dp-sgd", "--non-private"],
        ["primorl", "--non-private", "--canaries", "200", "--background", "20", "--guesses", "40"],
    ],
)
def test_non_private_twins_leak_from_the_command(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "twin"
    assert main(["audit", *argv, "--out", str(out)]) == 0, capsys.readouterr().err
    metrics = _json(out / "metrics.json")
    assert float(metrics["epsilon_claimed"]) == float("inf")
    assert metrics["epsilon_lower_bound"] > 2.0 and metrics["auc"] > 0.9


def test_primorl_one_run_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "one"
    flags = "--noise-multiplier 1 --canaries 200 --background 20 --guesses 40".split()
    assert main(["audit", "primorl", *flags, "--statistic", "gradient", "--out", str(out)]) == 0
    metrics = _json(out / "metrics.json")
    assert metrics["mode"] == "one-run" and metrics["canaries"] == 200
    assert metrics["guesses"] == 40 and metrics["statistic"] == "gradient"
    assert 20 <= metrics["correct"] <= 40 and metrics["trials"] == 1
    assert "one-run lower bound" in capsys.readouterr().out


def test_weakened_noise_fails_every_deep_audit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fault behind a test-only patch: every Laplace draw of the filter and every Gaussian
    of DP-FedAvg and expert-level DP-SGD 10× smaller than the reports say. Each audit exits 1
    with one error line."""
    from privrl.privacy import mechanisms, threshold

    real_t, real_q = threshold.noisy_threshold, threshold.prefix_query_noise
    real_like = mechanisms.gaussian_noise_like
    monkeypatch.setattr(
        threshold, "noisy_threshold", lambda t, s, rng, size=None: real_t(t, s / 10, rng, size)
    )
    monkeypatch.setattr(threshold, "prefix_query_noise", lambda n, s, rng: real_q(n, s / 10, rng))
    monkeypatch.setattr(
        mechanisms,
        "gaussian_noise_like",
        lambda x, *, sigma, generator: real_like(x, sigma=sigma / 10, generator=generator),
    )
    for argv in (
        ["expert-dp", "--epsilon", "1", "--trials", "100000"],
        ["primorl", "--noise-multiplier", "5", "--statistic", "gradient", *SMALL_FLAGS],
        ["expert-dp-sgd", "--noise-multiplier", "8"],
    ):
        out = tmp_path / argv[0]
        assert main(["audit", *argv, "--out", str(out)]) == 1
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: audit failed"), lines
        assert _json(out / "metrics.json")["violated"] is True


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_audit_on_an_absent_gpu_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    argv = ["audit", "expert-dp-sgd", "--noise-multiplier", "1", "--device", "cuda"]
    assert main([*argv, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    assert "--device" in lines[0] and "needs a CUDA GPU" in lines[0], lines
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["audit", "expert-dp", "--trials", "10"], "--epsilon is required"),
        (["audit", "expert-dp", "--epsilon", "1", "--p-min", "0.9"], "--p-min must"),
        (["audit", "expert-dp", "--epsilon", "1", "--max-len", "0"], "--max-len must"),
        (["audit", "expert-dp", "--epsilon", "1", "--calibration", "x"], "--calibration must"),
        (["audit", "expert-dp-sgd", "--steps", "2"], "exactly one of --epsilon"),
        (["audit", "expert-dp-sgd", "--noise-multiplier", "1", "--steps", "0"], "--steps must"),
        (["audit", "expert-dp-sgd", "--noise-multiplier", "1", "--guesses", "7"], "--guesses"),
        (["audit", "expert-dp-sgd", "--noise-multiplier", "1", "--device", "gpu"], "--device"),
        (["audit", "primorl", "--canaries", "20"], "exactly one of --epsilon"),
        (["audit", "primorl", "--epsilon", "1", "--non-private"], "exactly one of --epsilon"),
        (["audit", "primorl", "--noise-multiplier", "1", "--guesses", "3"], "--guesses must"),
        (["audit", "primorl", "--noise-multiplier", "1", "--rate", "0"], "--rate must"),
        (["audit", "primorl", "--noise-multiplier", "1", "--statistic", "x"], "--statistic must"),
    ],
)
def test_bad_input_is_one_error_line(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    assert main([*argv, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], lines
    assert not out.exists()
