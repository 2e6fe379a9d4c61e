"""The run layer: config → ledger check → run → run directory, the same for every system."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tests.runs.toy  # noqa: F401 - registers the toy system
from privrl.config import ConfigError
from privrl.data.io import save_hdf5
from privrl.privacy.ledger import BudgetLedger, LedgerError
from privrl.runs.layer import RunSpec, execute, load_toml
from tests.neighbours import dataset, random_tabular_episodes, tabular_metadata
from tests.runs.toy import ToyConfig


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    meta = tabular_metadata(3, 2, horizon=4)
    eps = random_tabular_episodes(20, 4, 3, 2, seed=0)
    path = tmp_path / "d.h5"
    save_hdf5(dataset(eps, meta), path)
    return path


def test_config_round_trips_and_refuses_unknown_keys() -> None:
    config = ToyConfig(epsilon=1.0, hidden=(8, 8))
    again = ToyConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert again.fingerprint() == config.fingerprint()
    with pytest.raises(ConfigError, match="epsilonn is not a setting"):
        ToyConfig.from_dict({"epsilonn": 1.0})
    with pytest.raises(ConfigError, match="epsilon is required"):
        ToyConfig.from_dict({})
    with pytest.raises(ConfigError, match="mode must be one of plain, loud"):
        ToyConfig.from_dict({"epsilon": 1.0, "mode": "quiet"})
    with pytest.raises(ConfigError, match="epsilon must be a finite number > 0"):
        ToyConfig(epsilon=-1.0)  # (the library's one ε range, before the system's own checks)


def test_execute_writes_the_run_directory(data_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    spec = RunSpec.from_mapping(
        {"system": "toy-mean", "data": str(data_file), "epsilon": 2.0, "out": str(out), "seed": 3}
    )
    result = execute(spec, quiet=True)
    config = json.loads((out / "config.json").read_text())
    assert config["system"] == "toy-mean" and config["epsilon"] == 2.0 and config["m"] == 20
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["value"] == pytest.approx(result.metrics["value"])
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["epsilon"] <= 2.0 + 1e-6
    assert privacy["public_parameters"][0]["name"] == "m"
    assert (out / "metrics.csv").read_text().startswith("step,value")
    assert (out / "plots" / "curve.png").stat().st_size > 1000
    assert np.load(out / "value.npy")[0] == pytest.approx(result.metrics["value"])
    # same seed, fresh secret noise: a rerun does not reproduce the release
    again = execute(RunSpec(spec.system, spec.config, tmp_path / "again", data_file, 3), quiet=True)
    assert again.metrics["value"] != result.metrics["value"]
    # with the insecure opt-in it does, and the run says it is not certified
    specs = [
        RunSpec(spec.system, spec.config, tmp_path / f"insecure{i}", data_file, 3, True)
        for i in (0, 1)
    ]
    a, b = (execute(s, quiet=True) for s in specs)
    assert a.metrics["value"] == b.metrics["value"] and not a.privacy.certified


def test_ledger_refuses_before_the_data_is_read(data_file: Path, tmp_path: Path) -> None:
    BudgetLedger.init(data_file, epsilon=1.0, delta=1e-5, unit="trajectory", relation="replace-one")
    import h5py

    with h5py.File(data_file, "a") as f:  # the episodes are gone: reading them would fail
        del f["observations"]
    spec = RunSpec.from_mapping(
        {"system": "toy-mean", "data": str(data_file), "epsilon": 2.0, "out": str(tmp_path / "r")}
    )
    with pytest.raises(LedgerError):
        execute(spec, quiet=True)
    assert not (tmp_path / "r" / "config.json").exists()


def test_toml_spec(tmp_path: Path, data_file: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(f'system = "toy-mean"\ndata = "{data_file}"\nepsilon = 1\nout = "x"\n')
    spec = RunSpec.from_mapping(load_toml(path))
    assert spec.config.epsilon == 1.0 and spec.out == Path("x")
    path.write_text("system = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_toml(path)
    with pytest.raises(ConfigError, match="system"):
        RunSpec.from_mapping({"system": "nope", "out": "x"})


def test_generated_command_and_privrl_run(data_file: Path, tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from privrl.cli.main import main
    from privrl.runs.cli import add_command

    app = typer.Typer()
    add_command(app, "toy-mean")
    app.command("other")(lambda: None)
    runner = CliRunner()
    help_text = runner.invoke(app, ["toy-mean", "--help"]).output
    assert "--epsilon" in help_text and "--reward-range" in help_text and "plain|loud" in help_text
    out = tmp_path / "cli"
    res = runner.invoke(
        app,
        [
            "toy-mean",
            "--data",
            str(data_file),
            "-e",
            "1",
            "--hidden",
            "2,3",
            "--out",
            str(out),
            "--seed",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads((out / "config.json").read_text())["hidden"] == [2, 3]
    res = runner.invoke(
        app, ["toy-mean", "--data", str(data_file), "-e", "1000", "--out", str(tmp_path / "bad")]
    )
    assert "--epsilon must be at most 100" in str(res.exception)
    # the same run from a file: identical metrics (with the same insecure, repeatable noise)
    res = runner.invoke(
        app,
        ["toy-mean", "--data", str(data_file), "-e", "1", "--hidden", "2,3", "--out",
         str(out), "--seed", "1", "--insecure-reproducible-noise"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    toml = tmp_path / "run.toml"
    toml.write_text(
        f'system = "toy-mean"\ndata = "{data_file}"\nepsilon = 1\nhidden = [2, 3]\nseed = 1\n'
        "insecure_reproducible_noise = true\n"
    )
    assert main(["run", str(toml), "--out", str(tmp_path / "file")]) == 0
    a = json.loads((out / "metrics.json").read_text())
    b = json.loads((tmp_path / "file" / "metrics.json").read_text())
    assert a == b


def test_settings_template_is_valid_toml_with_every_setting() -> None:
    """`privrl run --show SYSTEM`: a TOML template whose uncommented values are the defaults."""
    import tomllib

    from privrl.runs import registry
    from privrl.runs.layer import settings_template

    text = settings_template(registry.get("toy-mean"))
    values = tomllib.loads(text)
    assert values["system"] == "toy-mean" and values["hidden"] == [4, 4]
    assert values["mode"] == "plain" and "# epsilon = ..." in text  # required: commented
    assert set(ToyConfig.field_map()) - {"epsilon"} <= set(values)


def test_an_option_added_later_keeps_cached_identities_at_its_default() -> None:
    """A `keyless_default` option left at its default does not change a run's identity (a
    sweep's finished cells stay finished); any other value does, and so does a plain option."""
    from dataclasses import dataclass

    from privrl.config import RunConfig, option

    @dataclass(frozen=True)
    class Before(RunConfig):
        system = "identity-toy"
        epsilon: float = option(1.0, help="ε.")

    @dataclass(frozen=True)
    class After(Before):
        scale: str | None = option(None, help="Added later.", keyless_default=True)

    @dataclass(frozen=True)
    class Plain(Before):
        scale: str | None = option(None, help="Added later, without the marker.")

    assert After().fingerprint() == Before().fingerprint()
    assert After(scale="raw").fingerprint() != Before().fingerprint()
    assert Plain().fingerprint() != Before().fingerprint()
    assert "scale" in After().to_dict()  # config.json still shows the value
