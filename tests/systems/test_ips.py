"""`privrl ope ips|snips|dr` on the run layer (privrl.systems.ips): a bandit log imported from a
CSV with a propensity column, the run directory and console, `privrl run CONFIG.toml` equal to
the command line, the ledger refusing before the data is read, public parameters from flags
or metadata only, and bad input as one `error:` line. What neighbours publish is checked with
every private command in tests/privacy/test_neighbour_diff.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.cli.main import main
from privrl.data.dataset import DatasetMetadata
from privrl.data.io import load_hdf5, read_header, save_hdf5
from privrl.runs import registry
from privrl.systems.ips import DrConfig, IpsConfig, SnipsConfig
from tests.neighbours import dataset, episode
from tests.ope.test_importance import MU, PI, TRUE_VALUE, synthetic

SYSTEMS = ("ips", "snips", "dr")
COMMON = [
    "--target-policy", "uniform", "--reward-range", "0,1", "--weight-clip", "10",
    "--max-horizon", "1", "--epsilon", "1",
]  # fmt: skip


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def log_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bandit log (context, action, reward, propensity) of 400 rows imported from a CSV with
    `privrl data import`, spaces declared."""
    root = tmp_path_factory.mktemp("log")
    d = synthetic(400, np.random.default_rng(0))
    lines = ["id,ctx,arm,click,pscore"]
    for i in range(d.n_episodes):
        s, a = int(d.observations[2 * i]), int(d.actions[i])
        lines.append(f"{i},{s},{a},{d.rewards[i]:g},{float(d.behaviour_probs[i])!r}")
    (root / "log.csv").write_text("\n".join(lines) + "\n")
    code = main(
        [
            "data", "import", str(root / "log.csv"), "--out", str(root / "log.h5"),
            "--columns", "episode=id,obs=ctx,next_obs=ctx,action=arm,reward=click,"
            "behaviour_prob=pscore",
            "--observation-space", "discrete:3", "--action-space", "discrete:3",
        ]
    )  # fmt: skip
    assert code == 0
    return root / "log.h5"


def test_data_import_with_a_propensity_column_makes_one_step_episodes(log_file: Path) -> None:
    """A bandit CSV (next_obs mapped to the context column) becomes m one-step episodes with
    the propensities as behaviour_probs, identical to the rows."""
    d = load_hdf5(log_file)
    ref = synthetic(400, np.random.default_rng(0))
    assert d.n_episodes == d.n_transitions == 400
    np.testing.assert_array_equal(d.episode_lengths, 1)
    np.testing.assert_array_equal(d.behaviour_probs, ref.behaviour_probs)
    np.testing.assert_array_equal(d.actions, ref.actions)


def test_the_systems_are_registered() -> None:
    for name in SYSTEMS:
        assert registry.get(name).name == name


@pytest.mark.parametrize(
    "config",
    [
        IpsConfig(target_policy="uniform", weight_clip=5.0, epsilon=1.0),
        SnipsConfig(
            target_policy="pi.npy",
            weight_clip=2.0,
            reward_range=(-1.0, 1.0),
            max_horizon=3,
            gamma=1.0,
            epsilon=0.5,
            mechanism="laplace",
        ),
        DrConfig(target_policy="mod:fn", weight_clip=3.0, epsilon=2.0, reward_model="constant:1"),
    ],
)
def test_config_round_trips(config: object) -> None:
    assert type(config).from_dict(config.to_dict()) == config  # type: ignore[attr-defined]


@pytest.mark.parametrize("system", SYSTEMS)
def test_a_run_writes_the_value_and_its_interval(
    system: str, log_file: Path, tmp_path: Path, capsys
) -> None:
    """metrics.json has value, value_ci_low ≤ value_ci_high, ε ≤ target; privacy.json lists
    each public parameter with its source and the releases (one per sum); the console prints
    the value and the interval; the planned report (from the header) is the run's report."""
    out = tmp_path / "run"
    code, stdout, err = run(
        ["ope", system, "--data", str(log_file), *COMMON, "--out", str(out)], capsys
    )
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["value_ci_low"] <= metrics["value_ci_high"]
    assert 0.0 <= metrics["value_ci_low"] and metrics["value_ci_high"] <= 1.0
    assert metrics["epsilon"] <= 1.0 + 1e-9
    privacy = json.loads((out / "privacy.json").read_text())
    sources = {p["name"]: p["source"] for p in privacy["public_parameters"]}
    assert sources["weight clip W"] == "flag"
    assert sources["horizon H"] == "flag"
    assert sources["reward range"] == "flag"
    assert sources["trajectories m"] == "public metadata"
    assert len(privacy["releases"]) == (2 if system == "snips" else 1)
    assert "value of uniform" in stdout and "CI [" in stdout
    # the plan, from the header only, states the same releases the run made
    sys_ = registry.get(system)
    spec_cfg = sys_.Config(
        target_policy="uniform",
        reward_range=(0.0, 1.0),
        weight_clip=10.0,
        max_horizon=1,
        epsilon=1.0,
    )
    plan = sys_.plan(spec_cfg, read_header(log_file))
    assert [r.to_dict() for r in plan.report.releases] == privacy["releases"]


def test_private_value_is_close_to_the_truth(log_file: Path, tmp_path: Path, capsys) -> None:
    """The table policy's private DR value at ε = 5 lies in its interval's neighbourhood of
    the true value (interval holds the truth, for this seed)."""
    pi = tmp_path / "pi.npy"
    np.save(pi, PI)
    out = tmp_path / "run"
    argv = [
        "ope", "dr", "--data", str(log_file), "--target-policy", str(pi), "--reward-range",
        "0,1", "--weight-clip", str(float(np.max(PI / MU))), "--max-horizon", "1",
        "--epsilon", "5", "--out", str(out),
    ]  # fmt: skip
    code, _, err = run(argv, capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["value_ci_low"] <= TRUE_VALUE <= m["value_ci_high"]


def test_gamma_one_on_a_finite_horizon(tmp_path: Path, capsys) -> None:
    """γ = 1 with a declared horizon works (no 1/(1−γ)); the sensitivity is W·H·(r_max − 0)."""
    meta = DatasetMetadata(
        observation_space=spaces.Discrete(2), action_space=spaces.Discrete(2), horizon=3
    )
    eps = [
        episode([0, 1, 0, 1], [0, 1, 0], [1.0, 0.0, 1.0], behaviour_probs=[0.5, 0.5, 0.5]),
        episode([1, 0], [1], [1.0], behaviour_probs=[0.5]),
    ]
    path = save_hdf5(dataset(eps, meta), tmp_path / "d.h5")
    out = tmp_path / "run"
    argv = [
        "ope", "ips", "--data", str(path), "--target-policy", "uniform", "--reward-range",
        "0,1", "--weight-clip", "2", "--gamma", "1", "--epsilon", "1", "--out", str(out),
    ]  # fmt: skip
    code, _, err = run(argv, capsys)
    assert code == 0, err
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["releases"][0]["sensitivity"] == pytest.approx(2 * 3 * 1.0)
    sources = {p["name"]: p["source"] for p in privacy["public_parameters"]}
    assert sources["horizon H"] == "public metadata"


# ------------------------------------------------------------------------ privrl run


def toml(values: dict[str, object]) -> str:
    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, (int, float)):
            return repr(v)
        return json.dumps(str(v))

    return "".join(f"{k} = {value(v)}\n" for k, v in values.items())


@pytest.mark.parametrize("system", SYSTEMS)
def test_run_config_file_is_the_command_line(
    system: str, log_file: Path, tmp_path: Path, capsys
) -> None:
    """`privrl run CONFIG.toml` and `privrl ope SYSTEM --flags` with the same seed write the same
    metrics.json, privacy.json (but its timestamp) and config.json."""
    out_cli, out_file = tmp_path / "cli", tmp_path / "file"
    argv = ["ope", system, "--data", str(log_file), *COMMON, "--seed", "7", "--out", str(out_cli)]
    argv.append("--insecure-reproducible-noise")  # the same (insecure, repeatable) noise below
    code, _, err = run(argv, capsys)
    assert code == 0, err
    cfg = tmp_path / "run.toml"
    values = {
        "system": system,
        "data": str(log_file),
        "out": str(out_file),
        "seed": 7,
        "target_policy": "uniform",
        "reward_range": [0.0, 1.0],
        "weight_clip": 10.0,
        "max_horizon": 1,
        "epsilon": 1.0,
        "insecure_reproducible_noise": True,
    }
    cfg.write_text(toml(values))
    code, _, err = run(["run", str(cfg)], capsys)
    assert code == 0, err

    def read(out: Path, name: str) -> dict[str, object]:
        data = json.loads((out / name).read_text())
        data.pop("created", None)
        return data

    for name in ("metrics.json", "privacy.json", "config.json"):
        assert read(out_cli, name) == read(out_file, name), name


# ------------------------------------------------------------------------ ledger


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_ledger_refuses_before_the_data_is_read(
    system: str, log_file: Path, tmp_path: Path, capsys
) -> None:
    """Structural rule: with a spent ledger the run is refused on the header alone (the
    file's `observations` are deleted, so reading them would fail differently), and no run
    directory is written."""
    import shutil

    import h5py

    from privrl.privacy.ledger import BudgetLedger

    path = tmp_path / "log.h5"
    shutil.copy(log_file, path)
    BudgetLedger.init(path, epsilon=0.5, delta=1e-3, unit="trajectory", relation="replace_one")
    with h5py.File(path, "r+") as f:
        del f["observations"]
    out = tmp_path / "o"
    code, _, err = run(["ope", system, "--data", str(path), *COMMON, "--out", str(out)], capsys)
    assert code == 2
    line = error_line(err)
    assert "ledger has" in line and "budget" in line
    assert not (out / "config.json").exists()


def test_the_ledger_records_the_spend(log_file: Path, tmp_path: Path, capsys) -> None:
    """A run at ε = 1 fits a budget of 1.05 and is recorded; a second one is then refused."""
    import shutil

    from privrl.privacy.ledger import BudgetLedger

    path = tmp_path / "log.h5"
    shutil.copy(log_file, path)
    BudgetLedger.init(path, epsilon=1.05, delta=1e-5, unit="trajectory", relation="replace_one")
    code, _, err = run(
        ["ope", "ips", "--data", str(path), *COMMON, "--out", str(tmp_path / "a")], capsys
    )
    assert code == 0, err
    code, _, err = run(
        ["ope", "ips", "--data", str(path), *COMMON, "--out", str(tmp_path / "b")], capsys
    )
    assert code == 2 and "ledger has" in error_line(err)


# ------------------------------------------------------------------------ bad input


def _no_probs(tmp_path: Path) -> Path:
    meta = DatasetMetadata(observation_space=spaces.Discrete(2), action_space=spaces.Discrete(2))
    return save_hdf5(dataset([episode([0, 0], [1], [1.0])], meta), tmp_path / "np.h5")


def _inferred(tmp_path: Path) -> Path:
    meta = DatasetMetadata(
        observation_space=spaces.Discrete(2),
        action_space=spaces.Discrete(2),
        extra={"inferred_from_data": ["action_space"]},
    )
    eps = [episode([0, 0], [1], [1.0], behaviour_probs=[0.5])]
    return save_hdf5(dataset(eps, meta), tmp_path / "inf.h5")


def _bad_table(tmp_path: Path) -> Path:
    np.save(tmp_path / "bad.npy", np.ones((2, 3)))
    return tmp_path / "bad.npy"


def _drop(flag: str) -> list[str]:
    i = COMMON.index(flag)
    return COMMON[:i] + COMMON[i + 2 :]


def _with(flag: str, value: str) -> list[str]:
    i = COMMON.index(flag)
    return [*COMMON[: i + 1], value, *COMMON[i + 2 :]]


BAD = [
    ("no-horizon", lambda p, d: ["--data", d, *_drop("--max-horizon")], "--max-horizon"),
    ("no-reward-range", lambda p, d: ["--data", d, *_drop("--reward-range")], "--reward-range"),
    ("zero-clip", lambda p, d: ["--data", d, *_with("--weight-clip", "0")], "--weight-clip"),
    ("nan-clip", lambda p, d: ["--data", d, *_with("--weight-clip", "nan")], "--weight-clip"),
    ("empty-range", lambda p, d: ["--data", d, *_with("--reward-range", "1,0")], "--reward-range"),
    ("gamma", lambda p, d: ["--data", d, *COMMON, "--gamma", "1.5"], "--gamma"),
    ("epsilon", lambda p, d: ["--data", d, *_with("--epsilon", "0")], "--epsilon"),
    ("policy", lambda p, d: ["--data", d, *_with("--target-policy", "greedy")], "target-policy"),
    (
        "policy-shape",
        lambda p, d: ["--data", d, *_with("--target-policy", str(_bad_table(p)))],
        "(S, A) = (3, 3)",
    ),
    ("module", lambda p, d: ["--data", d, *_with("--target-policy", "nomod:f")], "import"),
    ("no-propensities", lambda p, d: ["--data", str(_no_probs(p)), *COMMON], "behaviour_probs"),
    ("inferred-space", lambda p, d: ["--data", str(_inferred(p)), *COMMON], "inferred"),
    ("missing-file", lambda p, d: ["--data", str(p / "nope.h5"), *COMMON], "not found"),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: c[0])
def test_bad_input_is_one_error_line(case, log_file: Path, tmp_path: Path, capsys) -> None:
    """Bad input → exit 2, one `error:` line naming the problem (and the flag that fixes it),
    no traceback, no run directory."""
    _, build, needle = case
    out = tmp_path / "o"
    code, _, err = run(["ope", "ips", *build(tmp_path, str(log_file)), "--out", str(out)], capsys)
    assert code == 2, err
    assert needle in error_line(err)
    assert not (out / "config.json").exists()


def test_a_callable_target_policy(log_file: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """--target-policy module:function: called with a batch of observations, returns [n, A]."""
    (tmp_path / "mypolicy.py").write_text(
        "import numpy as np\n"
        "def probs(obs):\n"
        "    out = np.zeros((len(obs), 3))\n"
        "    out[:, 2] = 1.0\n"
        "    return out\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    argv = ["ope", "snips", "--data", str(log_file), *_with("--target-policy", "mypolicy:probs")]
    code, stdout, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    assert "mypolicy" in sys.modules
    assert "value of mypolicy:probs" in stdout


def test_laplace_mechanism(log_file: Path, tmp_path: Path, capsys) -> None:
    """--mechanism laplace: every release is a Laplace release and the report meets ε."""
    out = tmp_path / "run"
    argv = ["ope", "snips", "--data", str(log_file), *COMMON, "--mechanism", "laplace"]
    code, _, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    privacy = json.loads((out / "privacy.json").read_text())
    assert [r["mechanism"] for r in privacy["releases"]] == ["laplace", "laplace"]
    assert privacy["epsilon"] <= 1.0 + 1e-9


def _with_metadata(tmp_path: Path, **extra: object) -> Path:
    meta = DatasetMetadata(
        observation_space=spaces.Discrete(2),
        action_space=spaces.Discrete(2),
        horizon=1,
        extra=dict(extra),
    )
    eps = [episode([0, 0], [1], [1.0], behaviour_probs=[0.5]) for _ in range(5)]
    return save_hdf5(dataset(eps, meta), tmp_path / "meta.h5")


def test_reward_range_from_public_metadata_and_not_from_inferred(tmp_path: Path, capsys) -> None:
    """The reward range comes from the metadata when declared there (source "public
    metadata"); a metadata value marked as inferred from the data is skipped, so the run is
    refused with the flag that supplies it."""
    args = ["--target-policy", "uniform", "--weight-clip", "2", "--epsilon", "1"]
    path = _with_metadata(tmp_path, reward_range=[-1.0, 1.0])
    out = tmp_path / "a"
    code, _, err = run(["ope", "ips", "--data", str(path), *args, "--out", str(out)], capsys)
    assert code == 0, err
    params = json.loads((out / "privacy.json").read_text())["public_parameters"]
    rr = next(p for p in params if p["name"] == "reward range")
    assert rr["source"] == "public metadata" and rr["value"] == [-1.0, 1.0]
    (tmp_path / "meta.h5").unlink()
    path = _with_metadata(tmp_path, reward_range=[-1.0, 1.0], inferred_from_data=["reward_range"])
    out = tmp_path / "b"
    code, _, err = run(["ope", "ips", "--data", str(path), *args, "--out", str(out)], capsys)
    assert code == 2
    assert "--reward-range" in error_line(err) and "inferred" in err


def test_a_value_outside_its_interval_is_explained(log_file: Path, tmp_path: Path, capsys) -> None:
    """At a tiny ε the unbiased noisy IPS release falls outside the public return range the
    interval is cut to; the console says why instead of leaving the user to wonder."""
    out = tmp_path / "run"
    argv = ["ope", "ips", "--data", str(log_file), *COMMON, "--out", str(out)]
    argv[argv.index("--epsilon") + 1] = "0.001"
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert not m["value_ci_low"] <= m["value"] <= m["value_ci_high"]
    assert "unbiased noisy release" in stdout
