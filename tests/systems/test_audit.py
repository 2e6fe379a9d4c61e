"""The audits on the run layer (`privrl.systems.audit`): each config round-trips, a TOML run is
the same run as `privrl audit ...` (same seed → same files), a bad value has the same meaning
from a file as from a flag, and a failed audit is exit code 1 from either face."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import privrl.offline.apvi as apvi_module
from privrl.cli.main import main
from privrl.privacy import mechanisms
from privrl.runs import registry
from privrl.systems.audit import AuditDpApviConfig, AuditGpopeConfig
from tests.systems.common import run_json as _json
from tests.systems.common import toml_text as _toml

# system -> (settings, the same as flags); small trials keep each run well under a second (and
# GPOPE's m = 1: the rigorous calibration of σ for m > 1 takes seconds)
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "audit-gpope": (
        {"epsilon": 2.0, "iterations": 2, "features": 3, "trials": 3000, "canary": "random"},
        "--epsilon 2 --iterations 2 --features 3 --trials 3000 --canary random".split(),
    ),
    "audit-dp-apvi": (
        {"rho": 0.5, "horizon": 2, "states": 2, "trials": 3000, "confidence": 0.9},
        "--rho 0.5 --horizon 2 --states 2 --trials 3000 --confidence 0.9".split(),
    ),
}


@pytest.mark.parametrize(
    ("cls", "values"),
    [
        (AuditDpApviConfig, {"epsilon": 2.0, "mechanism": "laplace", "canary": "random"}),
        (AuditDpApviConfig, {"non_private": True, "delta": 1e-4, "background": 0}),
        (AuditDpApviConfig, {"rho": 0.3, "horizon": 4, "states": 5, "actions": 3}),
        (AuditGpopeConfig, {"sigma": 0.0, "clip": 0.5, "features": 3, "trials": 50}),
        (AuditGpopeConfig, {"epsilon": 1.0, "m": 10, "iterations": 5, "confidence": 0.99}),
    ],
)
def test_config_round_trips(cls: type, values: dict[str, Any]) -> None:
    config = cls.from_dict(values)
    again = cls.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert again.fingerprint() == config.fingerprint()
    assert registry.get(cls.system).Config is cls
    assert registry.get(cls.system).data == "none"  # an audit reads no dataset


@pytest.mark.parametrize("system", list(CASES))
def test_toml_run_equals_command_line(
    system: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same seed, same settings: `privrl run CONFIG.toml` writes the metrics.json,
    privacy.json (up to its timestamp) and config.json of `privrl audit <command> ...`."""
    settings, flags = CASES[system]
    cli_out, toml_out = tmp_path / "cli", tmp_path / "toml"
    command = system.removeprefix("audit-")
    argv = ["audit", command, *flags, "--seed", "7", "--out", str(cli_out)]
    assert main(argv) == 0, capsys.readouterr().err
    toml = tmp_path / "run.toml"
    toml.write_text(_toml({"system": system, "out": str(toml_out), "seed": 7, **settings}))
    assert main(["run", str(toml)]) == 0, capsys.readouterr().err
    for name in ("metrics.json", "privacy.json", "config.json"):
        assert _json(toml_out / name) == _json(cli_out / name), name
    metrics = _json(cli_out / "metrics.json")
    assert metrics["trials"] == 3000 and not metrics["violated"]
    config = _json(cli_out / "config.json")
    assert config["system"] == system and config["seed"] == 7
    assert (toml_out / "plots" / "roc.png").stat().st_size > 1000


@pytest.mark.parametrize("system", list(CASES))
def test_published_files_besides_metrics_do_not_depend_on_the_trials(
    system: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Structural rule: config.json and privacy.json are fixed by `plan` from the config's
    public values before any trial is drawn; two seeds (different D₀, bits and noise) give the
    same privacy.json and a config.json that differs only in `seed`, while the attack's scores
    (metrics.json) do differ."""
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
    metrics = [_json(out / "metrics.json") for out in outs]
    assert metrics[0]["auc"] != metrics[1]["auc"]
    privacy = _json(outs[0] / "privacy.json")
    assert privacy["epsilon"] == pytest.approx(metrics[0]["epsilon_claimed"])
    assert {p["source"] for p in privacy["public_parameters"]} <= {"flag", "derived"}
    assert any("synthetic" in note for note in privacy["notes"])


@pytest.mark.parametrize(
    ("system", "key", "flag_value", "toml_value", "meaning"),
    [
        ("audit-gpope", "trials", "1", 1, "must be >= 2, got 1 (e.g. 100000)"),
        (
            "audit-gpope",
            "trials",
            "30000000",
            30_000_000,
            "run several audits with different seeds instead",
        ),
        (
            "audit-gpope",
            "canary",
            "foo",
            "foo",
            "must be 'worst' or 'random' or a canary FILE.h5, got 'foo'",
        ),
        ("audit-gpope", "confidence", "1.5", 1.5, "must be in (0, 1), got 1.5; e.g. 0.95"),
        ("audit-gpope", "delta", "nan", "nan", "must be in (0, 1), got nan"),
        ("audit-gpope", "clip", "0", 0, "must be finite and > 0, got 0.0"),
        ("audit-gpope", "m", "0", 0, "must be >= 1, got 0"),
        ("audit-dp-apvi", "states", "1", 1, "must be >= 2, got 1"),
        ("audit-dp-apvi", "background", "-1", -1, "must be >= 0, got -1"),
        ("audit-dp-apvi", "mechanism", "x", "x", "must be 'gaussian' or 'laplace', got 'x'"),
    ],
)
def test_bad_value_same_meaning_from_file_and_flag(
    system: str,
    key: str,
    flag_value: str,
    toml_value: Any,
    meaning: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One bad value: the flag's `error:` line names the flag, the file's names the key, and
    both say the same thing about the value; nothing is run or written."""
    flag = "--" + key.replace("_", "-")
    cli_out, toml_out = tmp_path / "cli", tmp_path / "toml"
    argv = ["audit", system.removeprefix("audit-"), "--epsilon", "1", flag, flag_value]
    assert main([*argv, "--out", str(cli_out)]) == 2
    cli_err = capsys.readouterr().err.strip()
    assert cli_err.startswith(f"error: {flag} ") and cli_err.endswith(meaning), cli_err
    toml = tmp_path / "run.toml"
    values = {"system": system, "out": str(toml_out), "epsilon": 1.0, key: toml_value}
    toml.write_text(_toml(values))
    assert main(["run", str(toml)]) == 2
    toml_err = capsys.readouterr().err.strip()
    assert toml_err.startswith(f"error: {toml}: {key} ") and toml_err.endswith(meaning), toml_err
    assert len(toml_err.splitlines()) == 1 and len(cli_err.splitlines()) == 1
    assert not cli_out.exists() and not toml_out.exists()


def test_a_failed_audit_is_exit_1_from_a_file_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mechanism that draws 10× less noise than its report states fails the audit from
    `privrl run` as from `privrl audit`: exit code 1, one `error: audit failed` line, and the
    complete run directory (metrics.json says `violated`)."""

    def weak(value: Any, *, sensitivity: float, sigma: float, rng: Any, name: str) -> Any:
        return mechanisms.discrete_gaussian_mechanism(
            value, sensitivity=sensitivity, sigma=sigma / 10.0, rng=rng, name=name
        )

    monkeypatch.setattr(apvi_module, "discrete_gaussian_mechanism", weak)  # DP-APVI's counts
    out = tmp_path / "run"
    toml = tmp_path / "run.toml"
    toml.write_text(
        _toml({"system": "audit-dp-apvi", "out": str(out), "epsilon": 1.0, "trials": 20000})
    )
    assert main(["run", str(toml)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: audit failed"), lines
    assert json.loads((out / "metrics.json").read_text())["violated"] is True
    assert (out / "privacy.json").is_file() and (out / "config.json").is_file()
