"""The OPE systems on the run layer (privrl.systems.ope): configs round-trip, `privrl run
CONFIG.toml` is the same run as the `privrl ope ...` command line, and a bad value in a file is
refused with the same meaning as the bad flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privrl.cli.main import main
from privrl.data.io import save_hdf5
from privrl.envs.chain import ChainMDP
from privrl.ope import gpope as gpope_mod
from privrl.runs import registry
from privrl.systems.ope import DpLslConfig, DpLswConfig, GpopeConfig, LstdConfig

EPS, DELTA, M, N = 1.0, 1e-5, 100, 200
SIGMA_REF = 2.84  # meets (EPS, DELTA) for (M, N): checked in tests/ope/test_gpope.py


@pytest.fixture(autouse=True)
def fast_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the 10-40 s calibration for the one GPOPE configuration used here (as in
    tests/cli/test_ope_cli.py); every report's ε is still computed by the accountant."""
    real = gpope_mod._cached_sigma

    def cached(eps: float, delta: float, m: int, n: int, mode: str) -> float:
        if (eps, delta, m, n, mode) == (EPS, DELTA, M, N, "rigorous"):
            return SIGMA_REF
        return real(eps, delta, m, n, mode)

    monkeypatch.setattr(gpope_mod, "_cached_sigma", cached)


@pytest.fixture(scope="module")
def chain_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "chain.h5"
    save_hdf5(ChainMDP().sample(M, seed=0), path)
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


def toml(values: dict[str, object]) -> str:
    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        return json.dumps(str(v))

    return "".join(f"{k} = {value(v)}\n" for k, v in values.items())


# ------------------------------------------------------------------------ configs


@pytest.mark.parametrize(
    "config",
    [
        GpopeConfig(epsilon=0.5),
        GpopeConfig(
            env="chain",
            trajectories=50,
            target_policy="uniform",
            epsilon=2.0,
            delta=1e-6,
            iterations=300,
            clip=0.1,
            step_size=0.02,
            schedule="diminishing",
            k=0.5,
            lambda_min=0.01,
            accounting="paper",
            clip_quantile=0.9,
            gamma=0.9,
        ),
        DpLswConfig(epsilon=1.0, features="fourier:2", reward_range=2.0, reward_min=-1.0),
        DpLslConfig(epsilon=1.0, env="hiv", aggregation=3, c=50.0),
        LstdConfig(env="mountain-car", weighting="trajectory"),
    ],
    ids=lambda c: type(c).__name__,
)
def test_config_round_trips(config: object) -> None:
    """from_dict(to_dict()) gives the same config (plain values, as in a TOML file)."""
    plain = config.to_dict()  # type: ignore[attr-defined]
    json.dumps(plain)  # plain JSON values only
    assert type(config).from_dict(plain) == config
    assert type(config).from_dict(json.loads(json.dumps(plain))) == config


def test_config_round_trips_a_public_data_path(chain_file: Path) -> None:
    config = GpopeConfig(epsilon=1.0, public_data=chain_file)
    assert GpopeConfig.from_dict(config.to_dict()) == config


def test_the_systems_are_registered() -> None:
    for name, cls in (
        ("gpope", GpopeConfig),
        ("dp-lsw", DpLswConfig),
        ("dp-lsl", DpLslConfig),
        ("lstd", LstdConfig),
    ):
        system = registry.get(name)
        assert system.Config is cls and cls.system == name and system.data == "optional"


# ------------------------------------------------------------------------ run = command line

SAME_RUN = {
    "gpope": {
        "data": "{data}",
        "features": "onehot",
        "epsilon": EPS,
        "iterations": N,
        "clip": 0.05,
        "step_size": 0.01,
    },
    "dp-lsw": {"env": "chain", "trajectories": 200, "epsilon": EPS},
    "dp-lsl": {
        "data": "{data}",
        "features": "onehot",
        "epsilon": EPS,
        "reward_range": 1.0,
        "c": 50.0,
    },
    "lstd": {"env": "chain", "trajectories": 200, "weighting": "trajectory"},
}


def _flags(values: dict[str, object]) -> list[str]:
    argv: list[str] = []
    for key, value in values.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    return argv


@pytest.mark.parametrize("system", sorted(SAME_RUN))
def test_run_config_file_is_the_command_line(
    system: str, chain_file: Path, tmp_path: Path, capsys
) -> None:
    """`privrl run CONFIG.toml` and `privrl ope SYSTEM --flags` with the same seed write the
    same metrics.json, privacy.json (but its timestamp) and theta; config.json holds the same
    public values."""
    values = {k: str(chain_file) if v == "{data}" else v for k, v in SAME_RUN[system].items()}
    out_cli, out_file = tmp_path / "cli", tmp_path / "file"
    same = "--insecure-reproducible-noise"  # the same (insecure, repeatable) noise on both paths
    code, err = run(
        ["ope", system, *_flags(values), "--seed", "7", same, "--out", str(out_cli)], capsys
    )
    assert code == 0, err
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        toml(
            {
                "system": system,
                "out": str(out_file),
                "seed": 7,
                **values,
                "insecure_reproducible_noise": True,
            }
        )
    )
    code, err = run(["run", str(cfg)], capsys)
    assert code == 0, err

    def read(out: Path, name: str) -> dict[str, object]:
        data = json.loads((out / name).read_text())
        data.pop("created", None)
        return data

    assert read(out_cli, "metrics.json") == read(out_file, "metrics.json")
    assert read(out_cli, "privacy.json") == read(out_file, "privacy.json")
    assert read(out_cli, "config.json") == read(out_file, "config.json")
    assert (out_cli / "theta.npy").read_bytes() == (out_file / "theta.npy").read_bytes()


# ------------------------------------------------------------------------ bad values

BAD = [
    ("gpope", {"env": "chain", "epsilon": 0.0}, "epsilon", "must be a finite number > 0"),
    ("gpope", {"env": "chain", "epsilon": EPS, "iterations": 0}, "iterations", "at least 1"),
    ("gpope", {"env": "chain", "epsilon": EPS, "accounting": "loose"}, "accounting", "one of"),
    ("gpope", {"data": "{data}", "epsilon": EPS}, "features", "is required with --data"),
    (
        "gpope",
        {"env": "chain", "epsilon": EPS, "mode": "minibatch", "sampling_rate": 0.0},
        "sampling_rate",
        "must be in (0, 1]",
    ),
    (
        "gpope",
        {"env": "chain", "epsilon": EPS, "mode": "minibatch", "iterations": 10},
        "iterations",
        "--mode paper only",
    ),
    ("dp-lsw", {"env": "chain", "epsilon": EPS, "aggregation": 0}, "aggregation", ">= 1"),
    ("dp-lsw", {"env": "chain", "epsilon": EPS, "target_policy": "uniform"}, "target", "on-policy"),
    ("dp-lsl", {"env": "chain", "epsilon": EPS, "c": 0.0}, "c", "finite number > 0"),
    ("lstd", {"env": "chain", "trajectories": 1}, "trajectories", "at least 2"),
    ("lstd", {"env": "moon"}, "env", "one of"),
    ("lstd", {"env": "chain", "gamma": 2.0}, "gamma", "in [0, 1]"),
]


@pytest.mark.parametrize("case", BAD, ids=lambda case: f"{case[0]}-{case[2]}")
def test_a_bad_value_in_a_file_is_the_bad_flag(
    case: tuple[str, dict[str, object], str, str], chain_file: Path, tmp_path: Path, capsys
) -> None:
    """The config validates itself, so the flag and the file get the same refusal (exit 2, one
    `error:` line): the flag's message names --flag, the file's names the key; the problem is
    the same text."""
    system, values, key, problem = case
    values = {k: str(chain_file) if v == "{data}" else v for k, v in values.items()}
    code, err = run(["ope", system, *_flags(values), "--out", str(tmp_path / "a")], capsys)
    assert code == 2
    flag_line = error_line(err)
    cfg = tmp_path / "bad.toml"
    cfg.write_text(toml({"system": system, "out": str(tmp_path / "b"), **values}))
    code, err = run(["run", str(cfg)], capsys)
    assert code == 2
    file_line = error_line(err)
    assert problem in flag_line and problem in file_line, (flag_line, file_line)
    assert "--" + key.replace("_", "-") in flag_line and str(cfg) in file_line
    # the same problem after the name: "--flag PROBLEM" and "FILE: key PROBLEM"
    assert flag_line.split(problem, 1)[1] == file_line.split(problem, 1)[1]
    assert not (tmp_path / "a" / "config.json").exists()
    assert not (tmp_path / "b" / "config.json").exists()


def test_a_config_file_is_refused_by_a_spent_ledger_before_the_data(tmp_path: Path, capsys):
    """Structural rule, through `privrl run`: the ledger refuses the run on the header alone
    (the episode arrays are deleted, so reading them would fail differently)."""
    import h5py

    from privrl.privacy.ledger import BudgetLedger

    path = save_hdf5(ChainMDP().sample(M, seed=0), tmp_path / "data.h5")
    BudgetLedger.init(path, epsilon=0.01, delta=1e-3, unit="trajectory", relation="replace_one")
    with h5py.File(path, "r+") as f:
        del f["observations"]
    cfg = tmp_path / "run.toml"
    values = {"system": "dp-lsw", "data": str(path), "out": str(tmp_path / "o")}
    cfg.write_text(toml({**values, "features": "onehot", "epsilon": EPS, "reward_range": 1.0}))
    code, err = run(["run", str(cfg)], capsys)
    assert code == 2
    line = error_line(err)
    assert "ledger has" in line and "budget" in line
    assert not (tmp_path / "o" / "config.json").exists()


def test_tuning_settings_come_from_the_flag_or_the_public_tuning() -> None:
    """Public parameters: GPOPE's h and η are a flag (the tuned value is ignored) or, without
    one, the value tuned on public data, recorded as a public split with how it was tuned."""
    from privrl.privacy.public import PublicParameters
    from privrl.systems.ope import flag_or_tuned

    params = PublicParameters()
    assert flag_or_tuned(params, "clip bound h", 2.0, "--clip", (9.0, "tuned")) == 2.0
    assert flag_or_tuned(params, "step size η", None, "--step-size", (0.3, "best MSPBE")) == 0.3
    recorded = {p.name: (p.source.value, p.detail) for p in params}
    assert recorded == {
        "clip bound h": ("flag", "--clip"),
        "step size η": ("public split", "best MSPBE"),
    }


def test_target_delta_is_a_flag_only_when_it_differs_from_the_default() -> None:
    """Public parameters: ε is always a flag; δ is the default unless the user changed it."""
    from privrl.systems.ope import target_parameters

    default = target_parameters(DpLswConfig(env="chain", epsilon=1.0))
    assert {p.name: p.source.value for p in default} == {"ε": "flag", "δ": "default"}
    given = target_parameters(DpLswConfig(env="chain", epsilon=1.0, delta=1e-3), "ε (target)")
    assert {p.name: p.source.value for p in given} == {"ε (target)": "flag", "δ": "flag"}


def test_statistics_memory_refusal_names_the_estimator_and_the_public_count() -> None:
    """Before the data: m per-trajectory statistics that would not fit are refused, from the
    public count and the feature dimension only."""
    from privrl.systems.ope import check_statistics_fit

    check_statistics_fit("lstd-op", 1_000, 10, "m̄ = 1,000 declared trajectories")
    with pytest.raises(ValueError, match=r"^lstd-op's per-trajectory statistics .*m̄ = 10"):
        check_statistics_fit("lstd-op", 10, 100_000, "m̄ = 10 declared trajectories")
