"""The online systems on the run layer (`privrl.systems.online`): each config round-trips, a
TOML run is the same run as the command line (same seed → same metrics.json), and a bad value
is refused with the same meaning from a file as from a flag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from privrl.cli.main import main
from privrl.config import ConfigError
from privrl.runs import registry
from privrl.runs.layer import RunSpec, execute
from privrl.systems.online import DpUcbviConfig, PeConfig, SdpPeConfig, UcbviConfig

SMALL = {"env": "random-tabular", "states": 2, "actions": 2, "horizon": 2, "episodes": 300}

# system -> (its settings beyond SMALL, the same as flags)
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "sdp-pe": (
        {"epsilon": 5.0, "calibration": "theory", "width_scale": 0.5},
        ["--epsilon", "5", "--calibration", "theory", "--width-scale", "0.5"],
    ),
    "pe": ({"threshold_c1": 2.0}, ["--threshold-c1", "2"]),
    "ucbvi": ({"bonus_scale": 0.5}, ["--bonus-scale", "0.5"]),
    "dp-ucbvi": (
        {"epsilon": 1.0, "privatizer": "local"},
        ["--epsilon", "1", "--privatizer", "local"],
    ),
}
SMALL_FLAGS = ["--env", "random-tabular", "-S", "2", "-A", "2", "-H", "2", "-K", "300"]


def _toml(values: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        return f'"{v}"' if isinstance(v, str) else repr(v)

    return "\n".join(f"{k} = {value(v)}" for k, v in values.items()) + "\n"


def _metrics(out: Path) -> dict[str, Any]:
    metrics = json.loads((out / "metrics.json").read_text())
    metrics.pop("wall_time_s")  # the only key that differs between two identical runs
    return metrics


@pytest.mark.parametrize(
    ("cls", "values"),
    [
        (SdpPeConfig, {**SMALL, "epsilon": 2.0, "delta": 1e-6, "calibration": "theory"}),
        (PeConfig, {"width_scale": 0.0, "beta": 0.2}),
        (UcbviConfig, {"env": "riverswim", "states": 6, "bonus_scale": 3.0}),
        (DpUcbviConfig, {**SMALL, "epsilon": 0.5, "privatizer": "local"}),
    ],
)
def test_config_round_trips(cls: type, values: dict[str, Any]) -> None:
    config = cls.from_dict(values)
    again = cls.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert again.fingerprint() == config.fingerprint()
    assert registry.get(cls.system).Config is cls


@pytest.mark.parametrize("system", list(CASES))
def test_toml_run_equals_command_line(
    system: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same seed, same settings: `privrl run CONFIG.toml` writes the metrics.json, metrics.csv,
    privacy.json (up to its timestamp) and config.json of `privrl online <system> ...`."""
    settings, flags = CASES[system]
    cli_out, toml_out = tmp_path / "cli", tmp_path / "toml"
    argv = ["online", system, *SMALL_FLAGS, *flags, "--seed", "7", "--out", str(cli_out)]
    argv.append("--insecure-reproducible-noise")  # the same (insecure, repeatable) noise below
    assert main(argv) == 0, capsys.readouterr().err
    toml = tmp_path / "run.toml"
    same = {"insecure_reproducible_noise": True}
    toml.write_text(
        _toml({"system": system, "out": str(toml_out), "seed": 7, **SMALL, **settings, **same})
    )
    assert main(["run", str(toml)]) == 0, capsys.readouterr().err
    assert _metrics(toml_out) == _metrics(cli_out)
    assert (toml_out / "metrics.csv").read_text() == (cli_out / "metrics.csv").read_text()
    privacy = [json.loads((d / "privacy.json").read_text()) for d in (cli_out, toml_out)]
    for p in privacy:
        p.pop("created", None)
    assert privacy[0] == privacy[1]
    configs = [json.loads((d / "config.json").read_text()) for d in (cli_out, toml_out)]
    assert configs[0] == configs[1] and configs[0]["system"] == system and configs[0]["seed"] == 7
    assert (toml_out / "plots" / "regret.png").stat().st_size > 1000


@pytest.mark.parametrize(
    ("system", "key", "flag_value", "toml_value", "meaning"),
    [
        ("sdp-pe", "epsilon", "0", 0, "must be a finite number > 0, got 0.0"),
        ("sdp-pe", "delta", "1.5", 1.5, "must be a finite number in (0, 1), got 1.5"),
        ("sdp-pe", "epsilon", "1e-3", 1e-3, "0.001 is too small for SDP-PE at H = 5"),
        ("sdp-pe", "calibration", "loose", "loose", "must be one of tight, theory, not 'loose'"),
        ("pe", "episodes", "0", 0, "must be >= 1, got 0"),
        ("pe", "width_scale", "inf", "inf", "must be a finite number >= 0, got inf"),
        ("ucbvi", "env", "mountain-car", "mountain-car", "names an unknown environment"),
        ("ucbvi", "bonus_scale", "-1", -1, "must be a finite number >= 0, got -1.0"),
        ("dp-ucbvi", "epsilon", "1e300", 1e300, "must be at most 100, got 1e+300"),
        ("dp-ucbvi", "actions", "3", 3, "must be left out: riverswim has exactly 2 actions"),
        ("pe", "horizon", "1000000000000", 10**12, "of memory"),
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
    required = {"epsilon": 1.0} if system in ("sdp-pe", "dp-ucbvi") and key != "epsilon" else {}
    flag = "--" + key.replace("_", "-")
    extra = [f"--{k}" for k in required] + [str(v) for v in required.values()]
    argv = ["online", system, flag, flag_value, *extra, "--out", str(tmp_path / "cli")]
    assert main(argv) == 2
    cli_err = capsys.readouterr().err.strip()
    toml = tmp_path / "bad.toml"
    out = tmp_path / "toml"
    toml.write_text(_toml({"system": system, "out": str(out), key: toml_value, **required}))
    assert main(["run", str(toml)]) == 2
    file_err = capsys.readouterr().err.strip()
    for err, name in ((cli_err, flag), (file_err, key)):
        assert err.startswith("error:") and len(err.splitlines()) == 1, err
        assert f"{name} " in err and meaning in err, (name, meaning, err)
    if "memory" not in meaning:  # (the memory refusal weighs several settings: no one key)
        assert str(toml) in file_err
    assert not (out / "metrics.json").exists()


def test_plan_states_the_public_side_before_any_user_is_simulated() -> None:
    """The plan holds only values from the config: its public parameters (S, A, H from the
    flags or the environment, K, ε, δ, calibration), the planned report (private, shuffle model)
    and config.json's extra keys."""
    system = registry.get("sdp-pe")
    config = SdpPeConfig(epsilon=1.0, states=3, episodes=500)
    plan = system.plan(config, None)
    params = {p["name"]: (p["value"], p["source"]) for p in plan.report.public_parameters}
    assert params["S"] == (3, "flag") and params["A"] == (2, "default")
    assert params["H"] == (5, "default") and params["episodes (users) K"] == (500, "flag")
    assert params["calibration"] == ("tight", "flag")
    assert plan.report.private and plan.report.model == "shuffle"
    assert plan.public["algorithm"] == "sdp-pe" and plan.public["base_batch"] == 5 * 3 * 2
    assert plan.public["privatizer"]["epsilon_counter"] == pytest.approx(1 / 30)
    # a non-private system plans a non-private report, and lists no privacy flags
    pe_plan = registry.get("pe").plan(PeConfig(), None)
    assert not pe_plan.report.private and pe_plan.public["epsilon"] is None


def test_execute_refuses_a_dataset(tmp_path: Path) -> None:
    """The online systems simulate their users: a `data` setting is refused, not ignored."""
    spec = RunSpec.from_mapping(
        {"system": "pe", "data": str(tmp_path / "d.h5"), "out": str(tmp_path / "o"), **SMALL}
    )
    with pytest.raises(ConfigError, match="data is not used by pe"):
        execute(spec, quiet=True)
