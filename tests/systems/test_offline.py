"""Offline RL systems on the run layer (dp-apvi, apvi, dp-vapvi, vapvi, pevi): each config
round-trips, `privrl run CONFIG.toml` is the same run as the command line (same seed, same
metrics.json), and a bad value in a file is refused with the same message as the bad flag."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import main
from privrl.envs.tabular import TabularMDP, behaviour_policy_full_support
from privrl.runs import registry
from privrl.systems.linear import DpVapviConfig, PeviConfig, VapviConfig
from privrl.systems.tabular import ApviConfig, DpApviConfig

H, S, A = 3, 4, 2


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("offline_systems")
    mdp = TabularMDP.random(S, A, H, seed=3)
    mdp.sample(behaviour_policy_full_support(4, H, S, A, 0.1), 200, rng=5).save(root / "tab.h5")
    np.save(root / "reward.npy", np.asarray(mdp.R))
    return {"root": root, "tab": root / "tab.h5", "reward": root / "reward.npy"}


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _write_toml(path: Path, system: str, settings: dict[str, object]) -> Path:
    lines = [f'system = "{system}"'] + [f"{k} = {_toml_value(v)}" for k, v in settings.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _one_error_line(capsys: pytest.CaptureFixture[str], code: int) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "config",
    [
        DpApviConfig(rho=1.0, env="random-tabular", episodes=10, bonus="hoeffding"),
        DpApviConfig(epsilon=2.0, reward_table=Path("r.npy"), horizon=4, states=3, actions=2),
        ApviConfig(env="random-tabular", episodes=5, delta=0.2),
        DpVapviConfig(rho=1.0, matrix_noise="paper_exact", lam=0.5, split=True, features="f.npy"),
        VapviConfig(env="linear-mdp", episodes=5, additive_bonus=1.5, bonus_scale=0.1),
        PeviConfig(env="linear-mdp", episodes=5, xi=0.1, horizon=7),
    ],
    ids=lambda c: c.system,
)
def test_config_round_trips(config: object) -> None:
    """Property: from_dict(to_dict()) is the same config (through JSON, as config.json)."""
    cls = type(config)
    again = cls.from_dict(json.loads(json.dumps(config.to_dict())))  # type: ignore[attr-defined]
    assert again == config
    assert registry.get(config.system).Config is cls  # type: ignore[attr-defined]


# (system, flags, the same settings as a file) — small, fast runs, one per system
SAME_RUN = [
    (
        "dp-apvi",
        ["--env", "random-tabular", "-n", "300", "-S", "4", "-A", "2", "-H", "3", "--rho", "1"],
        {"env": "random-tabular", "episodes": 300, "states": 4, "actions": 2, "horizon": 3,
         "rho": 1.0},
    ),
    (
        "apvi",
        ["--data", "{tab}", "--reward-table", "{reward}", "--bonus", "hoeffding"],
        {"data": "{tab}", "reward_table": "{reward}", "bonus": "hoeffding"},
    ),
    (
        "dp-vapvi",
        ["--env", "linear-mdp", "-K", "20", "--rho", "2", "--matrix-noise", "paper_exact"],
        {"env": "linear-mdp", "episodes": 20, "rho": 2.0, "matrix_noise": "paper_exact"},
    ),
    (
        "vapvi",
        ["--env", "linear-mdp", "-K", "20", "--instance", "1", "--split", "-C", "0.1"],
        {"env": "linear-mdp", "episodes": 20, "instance": 1, "split": True, "bonus_scale": 0.1},
    ),
    (
        "pevi",
        ["--env", "linear-mdp", "-K", "20", "--lambda", "2", "--xi", "0.1"],
        {"env": "linear-mdp", "episodes": 20, "lam": 2.0, "xi": 0.1},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("system", "flags", "settings"), SAME_RUN, ids=[c[0] for c in SAME_RUN])
def test_toml_run_is_the_command_line_run(
    system: str,
    flags: list[str],
    settings: dict[str, object],
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Property: the same settings from flags and from a file, same seed → identical
    metrics.json and privacy.json releases, and config.json agrees on every setting."""
    names = {k: str(v) for k, v in files.items()}
    flags = [f.format(**names) for f in flags]
    settings = {k: v.format(**names) if isinstance(v, str) else v for k, v in settings.items()}
    cli_out, file_out = tmp_path / "cli", tmp_path / "file"
    same = "--insecure-reproducible-noise"  # the same (insecure, repeatable) noise on both paths
    code = main(["train", system, *flags, "--seed", "3", same, "--out", str(cli_out)])
    assert code == 0, capsys.readouterr().err
    toml = _write_toml(
        tmp_path / "run.toml", system, {**settings, "seed": 3, "insecure_reproducible_noise": True}
    )
    code = main(["run", str(toml), "--out", str(file_out)])
    assert code == 0, capsys.readouterr().err
    a = json.loads((cli_out / "metrics.json").read_text())
    b = json.loads((file_out / "metrics.json").read_text())
    for metrics in (a, b):
        metrics.pop("timings_seconds", None)  # wall-clock
    assert a == b
    pa = json.loads((cli_out / "privacy.json").read_text())
    pb = json.loads((file_out / "privacy.json").read_text())
    assert pa["releases"] == pb["releases"] and pa["epsilon"] == pb["epsilon"]
    assert pa["public_parameters"] == pb["public_parameters"]
    ca = json.loads((cli_out / "config.json").read_text())
    cb = json.loads((file_out / "config.json").read_text())
    assert ca == cb and ca["system"] == system and ca["seed"] == 3
    assert sorted(p.name for p in cli_out.rglob("*")) == sorted(p.name for p in file_out.rglob("*"))


def test_tabular_config_json_keeps_the_path_in_source(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """config.json of dp-apvi/apvi keeps its pre-run-layer layout: the dataset path is under
    source.data (no top-level copy that would differ between neighbouring files)."""
    out = tmp_path / "r"
    argv = ["train", "apvi", "--data", str(files["tab"]), "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert config["source"]["data"] == str(files["tab"]) and "data" not in config
    assert config["horizon"] == H and config["states"] == S and config["actions"] == A


# (system, bad flags, the same bad setting in a file, the flag, the key)
BAD = [
    (
        "dp-apvi",
        ["--env", "random-tabular", "-n", "5", "--rho", "1e300"],
        {"env": "random-tabular", "episodes": 5, "rho": 1e300},
        "--rho",
        "rho",
    ),
    (
        "dp-apvi",
        ["--env", "random-tabular", "-n", "5", "--rho", "nan"],
        {"env": "random-tabular", "episodes": 5, "rho": float("nan")},
        "--rho",
        "rho",
    ),
    (
        "apvi",
        ["--env", "random-tabular", "-n", "5", "--delta", "1.5"],
        {"env": "random-tabular", "episodes": 5, "delta": 1.5},
        "--delta",
        "delta",
    ),
    (
        "apvi",
        ["--env", "random-tabular", "-n", "5", "--bonus", "x"],
        {"env": "random-tabular", "episodes": 5, "bonus": "x"},
        "--bonus",
        "bonus",
    ),
    (
        "dp-vapvi",
        ["--env", "linear-mdp", "-K", "5", "--rho", "1", "--lambda", "1e-300"],
        {"env": "linear-mdp", "episodes": 5, "rho": 1.0, "lam": 1e-300},
        "--lambda",
        "lam",
    ),
    (
        "dp-vapvi",
        ["--env", "linear-mdp", "-K", "5", "--rho", "1", "--matrix-noise", "x"],
        {"env": "linear-mdp", "episodes": 5, "rho": 1.0, "matrix_noise": "x"},
        "--matrix-noise",
        "matrix_noise",
    ),
    (
        "vapvi",
        ["--env", "linear-mdp", "-K", "5", "--additive-bonus", "-1"],
        {"env": "linear-mdp", "episodes": 5, "additive_bonus": -1.0},
        "--additive-bonus",
        "additive_bonus",
    ),
    (
        "pevi",
        ["--env", "linear-mdp", "-K", "5", "--xi", "2"],
        {"env": "linear-mdp", "episodes": 5, "xi": 2.0},
        "--xi",
        "xi",
    ),
]


@pytest.mark.parametrize(
    ("system", "flags", "settings", "flag", "key"), BAD, ids=[f"{c[0]} {c[3]}" for c in BAD]
)
def test_bad_file_value_is_refused_like_the_bad_flag(
    system: str,
    flags: list[str],
    settings: dict[str, object],
    flag: str,
    key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Property: a bad value is refused before any work with one `error:` line; from a file
    the line names the key where the command line names the flag, and says the same thing."""
    code = main(["train", system, *flags, "--out", str(tmp_path / "cli")])
    cli_line = _one_error_line(capsys, code)
    toml = _write_toml(tmp_path / "bad.toml", system, settings)
    code = main(["run", str(toml), "--out", str(tmp_path / "file")])
    file_line = _one_error_line(capsys, code)
    assert cli_line.startswith(f"error: {flag} "), cli_line
    assert file_line.startswith(f"error: {toml}: {key} "), file_line
    assert cli_line.removeprefix(f"error: {flag} ") == file_line.removeprefix(
        f"error: {toml}: {key} "
    )
    assert not (tmp_path / "cli" / "metrics.json").exists()
    assert not (tmp_path / "file" / "metrics.json").exists()
