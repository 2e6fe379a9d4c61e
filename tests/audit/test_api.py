"""The audits from Python (`privrl.audit`): a config and an object whose `run(seed=...)` returns
the verdict, the metrics and the claimed report — the same audit, config and trials as the
generated `privrl audit` command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from privrl.audit import (
    AUDITS,
    AuditDpApviConfig,
    AuditGpopeConfig,
    AuditResult,
    DpApviAudit,
    GpopeAudit,
)
from privrl.audit.attacks import AuditTrials
from privrl.cli.main import main
from privrl.config import ConfigError
from privrl.runs import registry


def test_every_audit_command_is_generated_from_the_library_config() -> None:
    """Each `privrl audit NAME` system wraps the library's audit and takes its config class
    (so the flags, help and checks are the library config's)."""
    assert len(AUDITS) == 9
    for name, audit in AUDITS.items():
        system = registry.get(name)
        assert system.audit is audit, name
        assert system.Config is audit.Config and audit.Config.system == name
        assert system.summary == audit.summary != ""


def test_python_run_matches_the_command_line_for_the_same_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`GpopeAudit(config).run(seed=3)` gives the metrics `privrl audit gpope --seed 3` writes,
    and the claimed report its privacy.json states."""
    config = AuditGpopeConfig(epsilon=2.0, iterations=2, features=3, trials=3000)
    result = GpopeAudit(config).run(seed=3)
    out = tmp_path / "run"
    argv = ["audit", "gpope", "--epsilon", "2", "--iterations", "2", "--features", "3"]
    assert main([*argv, "--trials", "3000", "--seed", "3", "--out", str(out)]) == 0
    capsys.readouterr()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics == json.loads(json.dumps(result.metrics))
    assert json.loads((out / "privacy.json").read_text())["epsilon"] == pytest.approx(
        result.report.epsilon
    )
    assert result.verdict == "pass" and not result.violated
    assert result.summary.startswith("gpope: claimed ε = 2 at δ = 1e-05; empirical lower bound")
    assert isinstance(result.trials, AuditTrials) and result.trials.trials == 3000


def test_plan_states_the_claim_before_any_trial() -> None:
    """`plan` resolves the public parameters and the claimed report without running trials:
    the calibrated ρ for a target ε, recorded with its source."""
    plan = DpApviAudit(AuditDpApviConfig(epsilon=1.0, horizon=2, states=2)).plan()
    assert plan.report.epsilon <= 1.0 + 1e-9
    sources = {p["name"]: p["source"] for p in plan.report.public_parameters}
    assert sources["target ε"] == "flag" and sources["zCDP budget ρ"] == "derived"
    assert plan.public["audit"]["rho"] > 0


def test_a_broken_mechanism_is_a_violated_verdict(broken_gaussian: None) -> None:
    """Noise 10× smaller than the report states: the bound exceeds the claim."""
    result = DpApviAudit(AuditDpApviConfig(epsilon=1.0, trials=20_000)).run(seed=0)
    assert result.violated and result.verdict == "violated"
    assert result.metrics["epsilon_lower_bound"] > result.metrics["epsilon_claimed"]


def test_a_non_private_twin_has_no_claim_to_test() -> None:
    result = DpApviAudit(AuditDpApviConfig(non_private=True, trials=2000)).run(seed=0)
    assert math.isinf(result.metrics["epsilon_claimed"])
    assert result.verdict == "no claim" and not result.violated


def test_errors_name_the_config_field() -> None:
    """From Python, a bad setting names the field (the command line names the flag)."""
    with pytest.raises(ConfigError, match="trials must be >= 2") as info:
        AuditGpopeConfig(epsilon=1.0, trials=1)
    assert info.value.key == "trials"
    with pytest.raises(ValueError, match="give exactly one of `epsilon=E`, `rho=R`"):
        AuditDpApviConfig(epsilon=1.0, rho=1.0)
    with pytest.raises(TypeError, match="takes a AuditDpApviConfig"):
        DpApviAudit(AuditGpopeConfig(epsilon=1.0))  # type: ignore[arg-type]


def test_verdict_of_a_one_run_audit_is_its_own() -> None:
    """A one-run audit's metrics carry its verdict (e.g. a ceiling below the claim)."""
    metrics = {"violated": False, "epsilon_claimed": 5.0, "verdict": "cannot test this claim"}
    result = AuditResult(metrics, None, None, "")  # type: ignore[arg-type]
    assert result.verdict == "cannot test this claim"
