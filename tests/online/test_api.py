"""The online learners from Python (`privrl.online.PE`, `SDPPE`, `UCBVI`, `DPUCBVI`): they learn
on an environment given to them, plan the same public side as the command line, repeat with
repeatable noise, and name config fields (never flags) in their errors.

These learners simulate their users and read no dataset, so no ledger is involved: the
planned report is what `learn` spends, which is checked instead."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

import privrl.online as online
from privrl.cli.main import main
from privrl.config import ConfigError
from privrl.envs.tabular import TabularMDP
from privrl.online import (
    DPUCBVI,
    PE,
    SDPPE,
    UCBVI,
    DPUCBVIConfig,
    PEConfig,
    SDPPEConfig,
    UCBVIConfig,
    make_env,
)
from privrl.privacy.noise import NoiseSource
from privrl.privacy.report import json_safe
from privrl.runs import registry
from privrl.systems.online import DpUcbviConfig, SdpPeConfig

SIZES = {"states": 2, "actions": 2, "horizon": 2}
DOC = Path(__file__).resolve().parents[2] / "docs" / "online.md"


def small_env(seed: int = 0) -> TabularMDP:
    return make_env("random-tabular", **SIZES, seed=seed)


def test_sdp_pe_learns_from_python() -> None:
    """A Fitted with the shuffle report (public parameters recorded), the exact regret, the
    regret curve and the surviving policy set."""
    env = small_env()
    fitted = SDPPE(epsilon=5.0, episodes=300).learn(env, seed=0)
    report = fitted.report
    assert report.private and report.model == "shuffle" and report.epsilon <= 5.0 + 1e-9
    params = {p["name"]: p["value"] for p in report.public_parameters}
    assert params["S"] == 2 and params["H"] == 2 and params["episodes (users) K"] == 300
    assert params["epsilon"] == 5.0 and params["calibration"] == "tight"
    assert fitted.curve[-1]["episode"] == 300
    assert fitted.curve[-1]["regret"] == pytest.approx(fitted.metrics["regret"])
    assert fitted.metrics["regret"] >= 0 and fitted.metrics["episodes"] == 300
    policies = np.asarray(fitted.policy)
    assert policies.ndim == 3 and policies.shape[1:] == (2, 2) and policies.shape[0] >= 1
    assert fitted.details.regret.shape == (300,)


@pytest.mark.parametrize(
    ("learner", "model"),
    [
        (UCBVI(episodes=200), "central"),
        (DPUCBVI(epsilon=2.0, privatizer="local", episodes=200), "local"),
        (PE(episodes=200), "central"),
    ],
)
def test_other_learners_from_python(learner: online.OnlineLearner, model: str) -> None:
    fitted = learner.learn(small_env(), seed=1, noise=NoiseSource.insecure(1))
    assert fitted.report.model == model
    assert fitted.metrics["episodes"] == 200 and len(fitted.curve) == 200
    policy = np.asarray(fitted.policy)
    assert policy.shape[-2:] == (2, 2)  # [H, S] (UCB-VI) or a set of them (PE)


def test_progress_is_reported_through_the_callback() -> None:
    seen: list[tuple[str, int, int]] = []
    DPUCBVI(epsilon=1.0, episodes=50).learn(
        small_env(), progress=lambda label, done, total: seen.append((label, done, total))
    )
    assert seen and seen[-1] == ("dp-ucbvi-central", 50, 50)
    assert all(total == 50 for _, _, total in seen)


def test_the_plan_is_what_learn_spends() -> None:
    """The planned report (before any user is simulated) has the final report's ε, δ, model
    and releases; with secure noise the final report is certified."""
    for learner in (SDPPE(epsilon=2.0, episodes=200), DPUCBVI(epsilon=2.0, episodes=200)):
        env = small_env()
        plan = learner.plan(env)
        fitted = learner.learn(env, plan=plan)
        assert fitted.report.certified and fitted.report.private
        assert fitted.report.epsilon == pytest.approx(plan.report.epsilon)
        assert fitted.report.delta == plan.report.delta
        assert fitted.report.model == plan.report.model
        assert len(fitted.report.releases) == len(plan.report.releases)
        assert fitted.report.public_parameters == plan.report.public_parameters


def test_python_and_command_line_plan_the_same_public_side() -> None:
    """The run layer's plan is the learner's: the same public values (up to config.json's
    extra keys) and the same planned report; the public parameters have the same values and
    differ only in where S, A, H come from (flags or the environment's default)."""
    cli_config = SdpPeConfig(epsilon=1.0, states=3, episodes=500)
    cli_plan = registry.get("sdp-pe").plan(cli_config, None)
    py_plan = SDPPE(SDPPEConfig(epsilon=1.0, episodes=500)).plan(make_env("riverswim", states=3))
    for key, value in py_plan.public.items():
        assert cli_plan.public[key] == value, key
    a, b = cli_plan.report.to_dict(), py_plan.report.to_dict()
    for report in (a, b):
        report.pop("created", None)
        report.pop("public_parameters")
    assert a == b
    values = [
        {p["name"]: p["value"] for p in plan.report.public_parameters}
        for plan in (cli_plan, py_plan)
    ]
    assert values[0] == values[1]
    sources = {p["name"]: p["source"] for p in cli_plan.report.public_parameters}
    assert sources["S"] == "flag" and sources["H"] == "default"
    # the learner's config is the run config less the environment it is simulated from
    dp = registry.get("dp-ucbvi")
    assert issubclass(dp.Config, DPUCBVIConfig) and dp.Config is DpUcbviConfig


def test_python_learn_equals_the_command_line_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same seed, same repeatable noise: `learn` gives the metrics.json and metrics.csv of
    `privrl online sdp-pe ... --insecure-reproducible-noise`."""
    out = tmp_path / "cli"
    argv = ["online", "sdp-pe", "--env", "random-tabular", "-S", "2", "-A", "2", "-H", "2"]
    argv += ["-K", "300", "--epsilon", "5", "--seed", "7", "--out", str(out)]
    assert main([*argv, "--insecure-reproducible-noise"]) == 0, capsys.readouterr().err
    fitted = SDPPE(epsilon=5.0, episodes=300).learn(
        small_env(seed=7), seed=7, noise=NoiseSource.insecure(7)
    )
    metrics = json.loads((out / "metrics.json").read_text())
    metrics.pop("wall_time_s")
    # (metrics.json spells a non-finite number as a string, e.g. the uncertified ε = "inf")
    assert json.loads(json.dumps(json_safe(dict(fitted.metrics)))) == metrics
    with open(out / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [row["episode"] for row in fitted.curve] == [int(r["episode"]) for r in rows]
    regrets = [float(r["regret"]) for r in rows]
    assert [row["regret"] for row in fitted.curve] == pytest.approx(regrets, rel=1e-12)
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["certified"] is False and not fitted.report.certified


@pytest.mark.parametrize(
    "learner",
    [
        SDPPE(epsilon=3.0, episodes=300, simulation="episodes"),
        DPUCBVI(epsilon=3.0, privatizer="local", episodes=100),
    ],
)
def test_repeatable_noise_repeats_and_is_uncertified(learner: online.OnlineLearner) -> None:
    env = small_env()
    a = learner.learn(env, seed=2, noise=NoiseSource.insecure(5))
    b = learner.learn(env, seed=2, noise=NoiseSource.insecure(5))
    assert np.array_equal(a.details.regret, b.details.regret)
    assert np.array_equal(np.asarray(a.policy), np.asarray(b.policy))
    assert a.curve == b.curve
    assert not a.report.certified and a.report.epsilon == float("inf")
    # the noise, not the users, changes with a fresh secure source
    secure = [learner.learn(env, seed=2) for _ in range(2)]
    assert all(s.report.certified for s in secure)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: SDPPEConfig(epsilon=0.0), "epsilon"),
        (lambda: SDPPEConfig(epsilon=1.0, delta=1.5), "delta"),
        (lambda: SDPPEConfig(epsilon=1.0, calibration="loose"), "calibration"),
        (lambda: SDPPEConfig(), "epsilon"),
        (lambda: PEConfig(width_scale=float("inf")), "width_scale"),
        (lambda: PEConfig(episodes=0), "episodes"),
        (lambda: PEConfig(simulation="steps"), "simulation"),
        (lambda: PEConfig(fw_eta=0.0), "fw_eta"),
        (lambda: UCBVIConfig(bonus_scale=-1.0), "bonus_scale"),
        (lambda: UCBVIConfig(beta=1.0), "beta"),
        (lambda: DPUCBVIConfig(epsilon=1.0, privatizer="shuffle"), "privatizer"),
        (lambda: SDPPE(epsilon=1e-3).plan(make_env("riverswim")), "epsilon"),
        (lambda: PE(base_batch=3).plan(make_env("riverswim")), "base_batch"),
    ],
)
def test_errors_name_the_field_not_a_flag(build, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        build()
    assert err.value.key == field
    assert "--" not in str(err.value), str(err.value)


def test_learn_refuses_what_does_not_fit() -> None:
    learner = SDPPE(epsilon=2.0, episodes=100)
    with pytest.raises(ValueError, match="plan is for"):
        learner.learn(small_env(), plan=learner.plan(make_env("riverswim")))
    binary_free = TabularMDP.random(2, 2, 2, seed=0)  # deterministic (fractional) rewards
    with pytest.raises(ValueError, match="Bernoulli"):
        learner.learn(binary_free)
    with pytest.raises(TypeError, match="takes a SDPPEConfig"):
        SDPPE(PEConfig())  # type: ignore[arg-type]


def test_the_family_exports_its_public_names() -> None:
    for name in ("PE", "SDPPE", "UCBVI", "DPUCBVI", "PEConfig", "SDPPEConfig", "UCBVIConfig"):
        assert name in online.__all__ and hasattr(online, name)
    assert "DPUCBVIConfig" in online.__all__ and "Fitted" in online.__all__
    assert all(hasattr(online, name) for name in online.__all__)


def test_the_guides_python_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/online.md's "From Python" code runs as written and does what it says."""
    text = DOC.read_text(encoding="utf-8").split("## From Python", 1)[1]
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, object] = {}
    exec(compile(code, str(DOC), "exec"), scope)
    result = scope["result"]
    assert isinstance(result, online.Fitted) and result.report.private
    assert result.report.model == "shuffle" and result.curve[-1]["episode"] == 3000
    assert np.asarray(scope["active"]).shape[1:] == (4, 3)
    assert scope["plan"].report.epsilon == pytest.approx(result.report.epsilon)
    assert "shuffle" in capsys.readouterr().out


def test_constants_off_the_command_line_are_config_file_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """B and Frank–Wolfe's η are settings of a `privrl run` file (listed once in config.json,
    under "config"), not flags."""
    from privrl.runs.layer import RunSpec, execute

    out = tmp_path / "run"
    values = {"system": "pe", "out": str(out), "env": "random-tabular", **SIZES}
    spec = RunSpec.from_mapping({**values, "episodes": 300, "base_batch": 16, "fw_eta": 0.2})
    execute(spec, quiet=True)
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["base_batch"] == 16 and config["config"]["fw_eta"] == 0.2
    assert config["base_batch"] == 16 and "fw_eta" not in config
    assert json.loads((out / "metrics.json").read_text())["stages"][0]["T"] == 16
    assert main(["online", "pe", "--fw-eta", "0.2", "--out", str(tmp_path / "cli")]) == 2
    assert "--fw-eta" in capsys.readouterr().err


def test_the_learners_load_no_command_line_or_plotting_package() -> None:
    """`import privrl.online` (in a fresh interpreter) loads neither typer, matplotlib nor
    Ray, nor anything of privrl's application layer: plots and flags live in systems/ and
    cli/."""
    import subprocess
    import sys

    code = (
        "import sys, json, privrl.online\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('typer', 'matplotlib', 'ray') or m.startswith(('privrl.runs', 'privrl.systems', "
        "'privrl.cli', 'reproductions')))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout) == []


def test_an_insecure_run_publishes_infinite_epsilon_in_its_metrics_too() -> None:
    """A run on insecure reproducible noise is uncertified: metrics.json's ε is its report's
    (∞), never the nominal ε it would have had with secret noise."""
    from privrl.online import SDPPE, SDPPEConfig
    from privrl.privacy.noise import NoiseSource

    fitted = SDPPE(SDPPEConfig(episodes=200, epsilon=1.0)).learn(
        small_env(), seed=0, noise=NoiseSource.insecure(0)
    )
    assert not fitted.report.certified
    assert fitted.metrics["epsilon"] == fitted.report.epsilon == float("inf")
