"""The audits of DP-VAPVI, DP-LSW, SDP-PE and DP-SGD on the run layer
(`privrl.systems.audit_more`): configs round-trip, the command writes its run directory, what is
published besides metrics.json does not depend on the trials, a TOML run equals the command,
bad input is one `error:` line, and `--mode one-run` reports the one-run bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from privrl.cli.main import main
from privrl.runs import registry
from privrl.systems.audit_more import (
    AuditDpLswConfig,
    AuditDpSgdConfig,
    AuditDpVapviConfig,
    AuditSdpPeConfig,
)
from tests.systems.common import run_json as _json
from tests.systems.common import toml_text as _toml

CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "audit-dp-vapvi": ({"rho": 0.5, "trials": 3000}, "--rho 0.5 --trials 3000".split()),
    "audit-dp-lsw": (
        {"epsilon": 4.0, "states": 2, "trials": 3000},
        "--epsilon 4 --states 2 --trials 3000".split(),
    ),
    "audit-sdp-pe": ({"epsilon": 2.0, "trials": 3000}, "--epsilon 2 --trials 3000".split()),
    "audit-dp-sgd": (
        {"noise_multiplier": 2.0, "trials": 3000},
        "--noise-multiplier 2 --trials 3000".split(),
    ),
}


@pytest.mark.parametrize(
    ("cls", "values"),
    [
        (AuditDpVapviConfig, {"epsilon": 2.0, "canary": "random", "features": 4}),
        (AuditDpLswConfig, {"non_private": True, "trajectories": 3}),
        (AuditSdpPeConfig, {"epsilon": 1.0, "users": 50, "calibration": "theory"}),
        (AuditDpSgdConfig, {"epsilon": 1.0, "mode": "one-run", "canaries": 500, "guesses": 50}),
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
    assert metrics["trials"] == 3000 and not metrics["violated"]
    assert 0 <= metrics["epsilon_lower_bound"] <= metrics["epsilon_claimed"]
    privacy = _json(cli_out / "privacy.json")
    assert privacy["epsilon"] == pytest.approx(metrics["epsilon_claimed"])
    assert {p["source"] for p in privacy["public_parameters"]} <= {"flag", "derived"}
    assert (cli_out / "plots" / "roc.png").stat().st_size > 1000


@pytest.mark.parametrize("system", list(CASES))
def test_published_files_besides_metrics_do_not_depend_on_the_trials(
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


def test_non_private_twin_leaks_from_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "twin"
    argv = ["audit", "sdp-pe", "--non-private", "--trials", "2000", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    metrics = _json(out / "metrics.json")
    assert float(metrics["epsilon_claimed"]) == float("inf")
    assert metrics["epsilon_lower_bound"] > 4.0 and metrics["auc"] == 1.0


def test_one_run_mode_reports_the_one_run_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At a claimed ε ≈ 1 the default size (1000 canaries, 100 guesses) has a ceiling of 3.47,
    above the claim: the verdict is a pass, and metrics.json states the ceiling."""
    out = tmp_path / "one"
    argv = ["audit", "dp-sgd", "--epsilon", "1", "--mode", "one-run", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    metrics = _json(out / "metrics.json")
    assert metrics["mode"] == "one-run" and metrics["canaries"] == 1000
    assert metrics["guesses"] == 100 and 50 <= metrics["correct"] <= 100
    assert 0 < metrics["epsilon_lower_bound"] <= metrics["epsilon_claimed"]
    assert metrics["epsilon_ceiling"] == pytest.approx(3.465, abs=0.01)
    assert metrics["verdict"] == "pass"
    assert 0.5 < metrics["auc"] < 1.0 and (out / "plots" / "roc.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "one-run lower bound" in printed and "verdict: pass" in printed


def test_one_run_canary_count_follows_the_claim_and_refuses_to_pass_an_untestable_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Structural rule: with --canaries left to the audit, a claim of ε = 2 gets 2000 canaries
    (ceiling 4.14 ≥ 2ε); a claim the given size cannot reach (ε = 4 at 1000 canaries and 100
    guesses: ceiling 3.47) gets "cannot test this claim", never "pass"."""
    out = tmp_path / "two"
    argv = ["audit", "dp-sgd", "--epsilon", "2", "--mode", "one-run", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    metrics = _json(out / "metrics.json")
    assert (metrics["canaries"], metrics["guesses"]) == (2000, 200)
    assert metrics["epsilon_ceiling"] >= 2 * metrics["epsilon_claimed"]
    sources = {p["name"]: p["source"] for p in _json(out / "privacy.json")["public_parameters"]}
    assert sources["canaries m"] == "derived"
    out = tmp_path / "four"
    argv = [*argv[:3], "4", "--mode", "one-run", "--canaries", "1000", "--guesses", "100"]
    assert main([*argv, "--out", str(out)]) == 0, capsys.readouterr().err
    metrics = _json(out / "metrics.json")
    assert metrics["epsilon_ceiling"] < metrics["epsilon_claimed"]
    assert metrics["verdict"] == "cannot test this claim"
    assert "verdict: cannot test this claim" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["audit", "dp-vapvi", "--trials", "10"], "exactly one of --epsilon"),
        (["audit", "dp-lsw", "--epsilon", "1", "--non-private"], "exactly one of --epsilon"),
        (["audit", "dp-lsw", "--epsilon", "1", "--return-range", "0"], "--return-range must"),
        (["audit", "sdp-pe", "--epsilon", "1", "--states", "1"], "--states must be >= 2"),
        (["audit", "sdp-pe", "--epsilon", "1", "--calibration", "x"], "--calibration must"),
        (["audit", "dp-sgd", "--noise-multiplier", "1", "--rate", "2"], "--rate must be in"),
        (["audit", "dp-sgd", "--noise-multiplier", "1", "--mode", "x"], "--mode must be"),
        (["audit", "dp-sgd", "--noise-multiplier", "1", "--guesses", "3"], "--guesses must"),
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


# ---------------------------------------------------------------------------------------------
# the helpers the audits share (privrl.systems.audit)
# ---------------------------------------------------------------------------------------------


def test_noise_multiplier_is_resolved_once_for_every_dp_sgd_style_audit() -> None:
    """Public parameters: the target ε is a flag and z is derived from (ε, δ, q, N) by PLD —
    the same z `dp_sgd_noise_multiplier` gives; a given z is a flag; non-private gives None."""
    from privrl.audit.dpsgd import dp_sgd_noise_multiplier
    from privrl.privacy.public import PublicParameters
    from privrl.systems.audit import resolve_noise_multiplier

    config = AuditDpSgdConfig(epsilon=2.0, rate=0.5, steps=3)
    params = PublicParameters()
    z = resolve_noise_multiplier(params, config, config.rate, config.steps)
    assert z == dp_sgd_noise_multiplier(2.0, config.delta, 0.5, 3)
    sources = {p.name: p.source.value for p in params}
    assert sources == {"target ε": "flag", "noise multiplier z": "derived"}
    params = PublicParameters()
    given = AuditDpSgdConfig(noise_multiplier=1.5)
    assert resolve_noise_multiplier(params, given, 1.0, 1) == 1.5
    assert [p.source.value for p in params] == ["flag"]
    twin = AuditDpSgdConfig(non_private=True)
    assert resolve_noise_multiplier(PublicParameters(), twin, 1.0, 1) is None


@pytest.mark.parametrize(
    "values",
    [
        {"epsilon": 1.0, "noise_multiplier": 1.0},
        {"epsilon": 1.0, "delta": 1.0},
        {"noise_multiplier": -1.0},
        {"noise_multiplier": 1.0, "clip": float("inf")},
        {"noise_multiplier": 1.0, "rate": 0.0},
    ],
)
def test_dp_sgd_audit_refuses_bad_noise_settings(values: dict[str, Any]) -> None:
    """`check_noise_settings` and `check_rate`: one noise setting, δ in (0, 1), ε, z, C finite and
    positive, q in (0, 1] — refused when the config is built."""
    with pytest.raises(ValueError):
        AuditDpSgdConfig(**values)


def test_one_run_result_names_its_statistic_only_when_there_is_a_choice() -> None:
    """The one-run summary line and metrics: dp-sgd (no choice of statistic) has no
    `statistic` key; primorl-style audits add it to both."""
    import numpy as np

    from privrl.audit.dpsgd import OneRunAudit
    from privrl.privacy.report import PrivacyReport
    from privrl.systems.audit import one_run_result

    report = PrivacyReport.non_private("trajectory", "add_remove", system="sgd")
    included = np.array([True, False] * 10)
    audit = OneRunAudit.from_guesses(
        np.where(included, 1.0, -1.0),
        included,
        guesses=10,
        confidence=0.95,
        report=report,
        delta=1e-5,
        params={"system": "sgd", "confidence": 0.95},
    )
    plain = one_run_result(audit, report, 0.95)
    assert "statistic" not in plain.metrics
    assert plain.summary[0].startswith("sgd (one run, 20 canaries): claimed ε = ")
    assert "10 of 10 guesses correct" in plain.summary[0]
    named = one_run_result(audit, report, 0.95, "loss")
    assert named.metrics["statistic"] == "loss"
    assert named.summary[0].startswith("sgd (one run, 20 canaries, loss statistic): ")
