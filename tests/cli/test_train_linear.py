"""`privrl train dp-vapvi | vapvi | pevi` and `privrl reproduce qiao-wang-fig1a/b`: the run
directory contract, policy reload, user data with a feature table, ledgers, and bad input
(exit code 2 with one `error:` line)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest

from privrl.cli.main import main
from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.io import load_hdf5, save_hdf5
from privrl.envs.linear import LinearMDP, raw_features
from privrl.offline.vapvi import load_policy
from privrl.privacy.ledger import BudgetLedger

RUN_FILES = ("config.json", "metrics.json", "metrics.csv", "privacy.json", "policy.npz")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_bad_input(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def assert_run_dir(out: Path) -> tuple[dict, dict]:
    for name in RUN_FILES:
        assert (out / name).is_file(), name
    assert (out / "plots" / "values.png").is_file()
    privacy = json.loads((out / "privacy.json").read_text())
    for key in ("unit", "relation", "epsilon", "delta", "rho", "accountant", "releases"):
        assert key in privacy, key
    assert privacy["unit"] == "trajectory" and privacy["relation"] == "replace_one"
    return json.loads((out / "metrics.json").read_text()), privacy


@pytest.fixture(scope="module")
def user_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A dataset with no built-in recipe in its metadata, its raw feature table (.npy, norms up
    to √7), a dataset with continuous observations, and an env-sampled dataset."""
    root = tmp_path_factory.mktemp("linear_data")
    mdp = LinearMDP.qiao_wang(0)
    ds = mdp.sample(60, rng=4)
    plain = ds.with_metadata(ds.metadata.replace(extra={}, env_id=None))
    files = {
        "plain": save_hdf5(plain, root / "plain.h5"),
        "env": save_hdf5(ds, root / "env.h5"),
        "ledgered": save_hdf5(ds, root / "ledgered.h5"),
    }
    np.save(root / "phi.npy", raw_features())
    np.save(root / "phi_bad_a.npy", raw_features()[:, :50])
    np.save(root / "phi_bad_d.npy", raw_features()[..., :7])
    files.update(
        phi=root / "phi.npy",
        phi_bad_a=root / "phi_bad_a.npy",
        phi_bad_d=root / "phi_bad_d.npy",
        root=root,
    )
    n = 3
    cont = TrajectoryDataset(
        observations=np.linspace(0, 1, 2 * (n + 1)).reshape(-1, 1),
        actions=np.zeros(2 * n, dtype=np.int64),
        rewards=np.zeros(2 * n),
        terminated=np.zeros(2 * n, bool),
        truncated=np.array([0, 0, 1, 0, 0, 1], bool),
        episode_offsets=np.array([0, n, 2 * n]),
        metadata=DatasetMetadata(
            observation_space=gym.spaces.Box(0, 1, (1,)), action_space=gym.spaces.Discrete(100)
        ),
    )
    files["continuous"] = save_hdf5(cont, root / "continuous.h5")
    return files


def test_env_path_writes_the_run_directory_and_a_reloadable_policy(tmp_path, capsys) -> None:
    out = tmp_path / "dp"
    argv = ["train", "dp-vapvi", "--env", "linear-mdp", "--episodes", "40", "--rho", "1"]
    code, stdout, err = run([*argv, "--out", str(out), "--seed", "1"], capsys)
    assert code == 0, err
    metrics, privacy = assert_run_dir(out)
    assert privacy["rho"] == pytest.approx(1.0) and math.isfinite(privacy["epsilon"])
    assert len(privacy["releases"]) == 5 * 20
    assert any("matrix noise: strict" in n for n in privacy["notes"])
    config = json.loads((out / "config.json").read_text())
    assert config["matrix_noise"] == "strict" and config["seed"] == 1
    # Exact suboptimality, and the saved policy reproduces it.
    mdp = LinearMDP.qiao_wang(0)
    policy = load_policy(out / "policy.npz")
    assert metrics["suboptimality"] == pytest.approx(float(mdp.suboptimality(policy.actions)))
    assert 0 <= metrics["suboptimality"] <= metrics["v_star"]
    assert "suboptimality" in stdout
    # Same seed, same run only with the insecure opt-in (the noise is secret otherwise).
    pair = []
    for i in (2, 3):
        out_i = tmp_path / f"dp{i}"
        seeded = [*argv, "--out", str(out_i), "--seed", "1", "--insecure-reproducible-noise"]
        assert run(seeded, capsys)[0] == 0
        pair.append(json.loads((out_i / "metrics.json").read_text())["suboptimality"])
    assert pair[0] == pair[1]


def test_paper_exact_is_stated_in_the_report(tmp_path, capsys) -> None:
    out = tmp_path / "pe"
    argv = ["train", "dp-vapvi", "--env", "linear-mdp", "--episodes", "10", "--rho", "2"]
    code, _, err = run([*argv, "--matrix-noise", "paper_exact", "--out", str(out)], capsys)
    assert code == 0, err
    _, privacy = assert_run_dir(out)
    assert privacy["rho"] == pytest.approx(2.8)
    assert any("paper_exact" in n for n in privacy["notes"])


@pytest.mark.parametrize("algo", ["vapvi", "pevi"])
def test_non_private_baselines(algo: str, tmp_path, capsys) -> None:
    out = tmp_path / algo
    argv = ["train", algo, "--env", "linear-mdp", "--episodes", "30", "--instance", "1"]
    code, _, err = run([*argv, "--out", str(out), "--bonus-scale", "0.1"], capsys)
    assert code == 0, err
    metrics, privacy = assert_run_dir(out)
    assert privacy["epsilon"] == "inf" and privacy["rho"] is None and not privacy["private"]
    assert "suboptimality" in metrics
    assert load_policy(out / "policy.npz").algorithm == algo


def test_user_data_with_feature_table_and_module_function(user_files, tmp_path, capsys) -> None:
    out = tmp_path / "user"
    argv = [
        "train",
        "dp-vapvi",
        "--data",
        str(user_files["plain"]),
        "--rho",
        "5",
        "--reward-range",
        "0,1",
    ]
    code, _, err = run([*argv, "--features", str(user_files["phi"]), "--out", str(out)], capsys)
    assert code == 0, err
    metrics, _ = assert_run_dir(out)
    assert "suboptimality" not in metrics  # no model known for a user's data
    config = json.loads((out / "config.json").read_text())
    assert config["feature_scale"] == pytest.approx(math.sqrt(7))  # rescaled to ‖φ‖ ≤ 1
    out2 = tmp_path / "user_fn"
    spec = "privrl.envs.linear:raw_features"
    argv = ["train", "vapvi", "--data", str(user_files["plain"]), "--features", spec]
    code, _, err = run([*argv, "--out", str(out2)], capsys)
    assert code == 0, err
    assert json.loads((out2 / "config.json").read_text())["features"] == spec


def test_env_sampled_dataset_recovers_its_features(user_files, tmp_path, capsys) -> None:
    out = tmp_path / "env_file"
    code, _, err = run(
        ["train", "pevi", "--data", str(user_files["env"]), "--out", str(out)], capsys
    )
    assert code == 0, err
    metrics, _ = assert_run_dir(out)
    assert "suboptimality" in metrics  # the recipe in the metadata gives the true model


def test_ledger_is_checked_and_recorded(user_files, tmp_path, capsys) -> None:
    data = user_files["ledgered"]
    ledger = BudgetLedger.init(
        data, epsilon=12.0, delta=1e-5, unit="trajectory", relation="replace_one", overwrite=True
    )
    argv = [
        "train",
        "dp-vapvi",
        "--data",
        str(data),
        "--rho",
        "1",
        "--reward-range",
        "0,1",
        "--out",
        str(tmp_path / "a"),
    ]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    ledger.reload()
    assert len(ledger.entries) == 1 and 6.5 < ledger.spent() < 7.5
    # A second run would overspend: refused before the data are read, nothing recorded.
    argv[argv.index("--rho") + 1] = "2"
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "ε")
    # A non-private run would void the budget.
    code, _, err = run(
        ["train", "vapvi", "--data", str(data), "--out", str(tmp_path / "b")], capsys
    )
    assert_bad_input(code, err, "not differentially private")
    ledger.reload()
    assert len(ledger.entries) == 1


@pytest.mark.parametrize(
    ("extra", "fragments"),
    [
        (["--rho", "0", "--env", "linear-mdp", "--episodes", "5"], ["--rho"]),
        (["--rho", "-1", "--env", "linear-mdp", "--episodes", "5"], ["--rho must be in"]),
        (["--rho", "1e300", "--env", "linear-mdp", "--episodes", "5"], ["--rho must be in"]),
        (["--rho", "1e-300", "--env", "linear-mdp", "--episodes", "5"], ["--rho must be in"]),
        (["--rho", "nan", "--env", "linear-mdp", "--episodes", "5"], ["--rho must be in"]),
        (["--rho", "1", "--env", "linear-mdp", "--episodes", "1000000000000"], ["limit"]),
        (["--rho", "1", "--env", "linear-mdp", "-K", "5", "--horizon", "1000000000"], ["limit"]),
        (["--rho", "1", "--env", "linear-mdp", "-K", "5", "--lambda", "1e-300"], ["--lambda"]),
        (["--rho", "1", "--env", "linear-mdp", "-K", "5", "--delta", "2"], ["--delta"]),
        (["--rho", "1", "--data", "{root}", "--features", "{phi}"], ["is a directory"]),
        (["--rho", "1", "--data", "{plain}", "--features", "privrl.envs.linear:LinearMDP"], ["calling"]),  # noqa: E501
        (["--rho", "1", "--data", "{plain}", "--features", "{phi_bad_a}"], ["mismatch", "A = 50"]),
        (["--rho", "1", "--data", "{env}", "--features", "{phi_bad_d}"], ["dimension mismatch"]),
        (["--rho", "1", "--data", "{continuous}", "--features", "{phi}"], ["non-integer states"]),
        (["--rho", "1", "--data", "{plain}"], ["--features"]),
        (["--rho", "1", "--data", "missing.h5", "--features", "{phi}"], ["not found"]),
        (["--rho", "1", "--data", "{plain}", "--features", "nope.npy"], ["not found"]),
        (["--rho", "1", "--data", "{plain}", "--env", "linear-mdp"], ["exactly one"]),
        (["--rho", "1", "--env", "linear-mdp"], ["--episodes"]),
        (["--rho", "1", "--env", "cartpole", "--episodes", "5"], ["unknown --env"]),
        (["--rho", "1", "--env", "linear-mdp", "-K", "5", "--matrix-noise", "x"], ["strict"]),
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_one_error_line(
    extra: list[str], fragments: list[str], user_files, tmp_path, capsys
) -> None:
    argv = [a.format(**{k: str(v) for k, v in user_files.items()}) for a in extra]
    code, _, err = run(["train", "dp-vapvi", *argv, "--out", str(tmp_path / "x")], capsys)
    assert_bad_input(code, err, *fragments)
    assert not (tmp_path / "x" / "policy.npz").exists()


@pytest.mark.parametrize("algo", ["vapvi", "pevi"])
def test_baselines_refuse_a_tiny_lambda(algo: str, tmp_path, capsys) -> None:
    """--lambda 1e-300 left Λ singular: a Cholesky error message; now refused up front."""
    argv = ["train", algo, "--env", "linear-mdp", "-K", "5", "--lambda", "1e-300"]
    code, _, err = run([*argv, "--out", str(tmp_path / algo)], capsys)
    assert_bad_input(code, err, "--lambda must be in")


# --------------------------------------------------------------------------------------------
# public horizon, public parameters, neighbours
# --------------------------------------------------------------------------------------------


def episodes_of(mdp: LinearMDP, n: int, H: int, seed: int) -> TrajectoryDataset:
    """n episodes of length H from the instance's dynamics (a longer horizon than its own)."""
    other = LinearMDP.qiao_wang(0, horizon=H)
    ds = other.sample(n, rng=seed)
    return ds.with_metadata(ds.metadata.replace(extra={}, env_id=None, horizon=None))


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """D (40 episodes of 20 steps, no horizon in the metadata) and D′, with one episode
    replaced by a 26-step one (replace-one neighbours)."""
    root = tmp_path_factory.mktemp("linear_neighbours")
    mdp = LinearMDP.qiao_wang(0)
    d = episodes_of(mdp, 40, 20, 1)
    longer = episodes_of(mdp, 1, 26, 2).with_metadata(d.metadata)
    d2 = TrajectoryDataset.concat([longer, d.subset(np.arange(1, 40))])
    np.save(root / "phi.npy", raw_features())
    return {
        "d": save_hdf5(d, root / "d.h5"),
        "d2": save_hdf5(d2, root / "d2.h5"),
        "phi": root / "phi.npy",
    }


def test_horizon_is_never_the_longest_episode(neighbours, tmp_path, capsys) -> None:
    """Structural rule: H sets ρ/(5H), the sensitivities and the number of releases, so with
    neither --horizon nor a horizon in the metadata the run is refused (it used to take the
    longest episode — 20 on D, 26 on its neighbour D′ — and publish it)."""
    for name in ("d", "d2"):
        argv = [
            "train",
            "dp-vapvi",
            "--data",
            str(neighbours[name]),
            "--rho",
            "1",
            "--reward-range",
            "0,1",
        ]
        argv += ["--features", str(neighbours["phi"]), "--out", str(tmp_path / name)]
        code, _, err = run(argv, capsys)
        assert_bad_input(code, err, "pass --horizon H")
        assert not (tmp_path / name / "config.json").exists()


PUBLIC_METRICS = ("algorithm", "K", "H", "d", "epsilon", "delta", "rho")


def test_neighbours_publish_the_same_outside_the_noisy_releases(
    neighbours, tmp_path, capsys
) -> None:
    """Property: on neighbouring datasets (one episode replaced by a longer one) everything
    published that is not post-processing of the noisy releases — config.json, privacy.json,
    the public metrics, the files written — is identical; the longer episode is truncated to
    the public H (it used to be an error on one dataset and not the other)."""
    published = []
    for name in ("d", "d2"):
        out = tmp_path / name
        argv = [
            "train",
            "dp-vapvi",
            "--data",
            str(neighbours[name]),
            "--rho",
            "2",
            "--reward-range",
            "0,1",
        ]
        argv += ["--features", str(neighbours["phi"]), "--horizon", "20", "--out", str(out)]
        code, _, err = run(argv, capsys)
        assert code == 0, err
        config = json.loads((out / "config.json").read_text())
        config["data"] = Path(config["data"]).name.replace("d2", "d")
        privacy = json.loads((out / "privacy.json").read_text())
        privacy.pop("created")
        metrics = json.loads((out / "metrics.json").read_text())
        published.append(
            (
                config,
                privacy,
                {k: metrics[k] for k in PUBLIC_METRICS},
                sorted(p.name for p in out.rglob("*")),
            )
        )
    assert published[0] == published[1]
    privacy = published[0][1]
    assert len(privacy["releases"]) == 5 * 20
    assert any("truncated to their first H steps" in n for n in privacy["notes"])
    params = {p["name"]: p for p in privacy["public_parameters"]}
    assert params["horizon H"]["source"] == "flag" and params["horizon H"]["value"] == 20
    assert params["number of releases"]["value"] == 100
    assert params["ρ0 per release"]["value"] == pytest.approx(2 / 100)
    assert params["feature table [S, A, d]"]["value"] == [2, 100, 10]
    assert params["feature table [S, A, d]"]["source"] == "flag"
    assert params["number of trajectories K"]["value"] == 40
    assert params["privacy δ"]["source"] == "default"


def test_env_run_lists_its_public_parameters(tmp_path, capsys) -> None:
    out = tmp_path / "env"
    argv = ["train", "dp-vapvi", "--env", "linear-mdp", "-K", "10", "--rho", "1"]
    code, _, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    params = {
        p["name"]: p for p in json.loads((out / "privacy.json").read_text())["public_parameters"]
    }
    assert params["horizon H"]["source"] == "default" and params["horizon H"]["value"] == 20
    assert params["number of trajectories K"] == {
        "name": "number of trajectories K",
        "value": 10,
        "source": "flag",
    }


def test_spaces_inferred_from_the_data_are_not_compared(user_files, tmp_path, capsys) -> None:
    """Structural rule: the metadata's spaces are checked against the (public) feature table
    only when they are declared; spaces marked as inferred from the data are skipped (the
    data are fitted to the table), so whether the run is refused cannot depend on the data."""
    ds = load_hdf5(user_files["plain"])
    meta = ds.metadata.replace(
        observation_space=gym.spaces.Discrete(5),
        extra={"inferred_from_data": ["observation_space", "action_space"]},
    )
    declared = save_hdf5(ds.with_metadata(meta.replace(extra={})), tmp_path / "declared.h5")
    inferred = save_hdf5(ds.with_metadata(meta), tmp_path / "inferred.h5")
    argv = ["train", "dp-vapvi", "--rho", "1", "--features", str(user_files["phi"])]
    argv += ["--reward-range", "0,1"]
    code, _, err = run([*argv, "--data", str(declared), "--out", str(tmp_path / "a")], capsys)
    assert_bad_input(code, err, "mismatch", "S = 2")
    code, _, err = run([*argv, "--data", str(inferred), "--out", str(tmp_path / "b")], capsys)
    assert code == 0, err


@pytest.mark.parametrize("units", [np.arange(60), np.arange(60) // 3])
def test_declared_units_are_refused_by_schema(units, user_files, tmp_path, capsys) -> None:
    """Structural rule: a dataset with a unit_ids field is refused by dp-vapvi whether its ids
    are distinct or repeat (the old count of distinct ids was a data-dependent error); the
    non-private vapvi accepts it."""
    ds = load_hdf5(user_files["env"])
    with_units = TrajectoryDataset(
        observations=ds.observations,
        actions=ds.actions,
        rewards=ds.rewards,
        terminated=ds.terminated,
        truncated=ds.truncated,
        episode_offsets=ds.episode_offsets,
        unit_ids=units,
        metadata=ds.metadata,
    )
    path = save_hdf5(with_units, tmp_path / "units.h5")
    code, _, err = run(
        ["train", "dp-vapvi", "--data", str(path), "--rho", "1", "--out", str(tmp_path / "a")],
        capsys,
    )
    assert_bad_input(code, err, "unit_ids field")
    code, _, err = run(
        ["train", "vapvi", "--data", str(path), "--out", str(tmp_path / "b")], capsys
    )
    assert code == 0, err


# --------------------------------------------------------------------------------------------
# the ledger comes before any read of the episodes; --out before the ledger
# --------------------------------------------------------------------------------------------


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every read of a dataset's episodes and every Gaussian noise draw."""
    import privrl.data.io as io
    import privrl.offline.vapvi as vapvi_mod

    calls: list[str] = []

    def wrap(name, fn):
        def wrapped(*args, **kwargs):
            calls.append(name)
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(io, "load_hdf5", wrap("read", io.load_hdf5))
    monkeypatch.setattr(
        vapvi_mod, "gaussian_mechanism", wrap("noise", vapvi_mod.gaussian_mechanism)
    )
    return calls


@pytest.mark.parametrize(
    ("algo", "budget", "expected"),
    [
        ("dp-vapvi", 0.5, "ε"),
        ("vapvi", 100.0, "not differentially private"),
        ("pevi", 100.0, "not differentially private"),
    ],
)
def test_ledger_refuses_before_the_episodes_are_read(
    algo: str, budget: float, expected: str, user_files, spy, tmp_path, capsys, monkeypatch
) -> None:
    """Property: only the file's header is read before the ledger check — with unreadable
    episode arrays and a ledger that refuses the run, the answer is the ledger's refusal, not
    a data error, and neither the episodes nor the noise are touched."""
    path = save_hdf5(load_hdf5(user_files["env"]), tmp_path / "broken.h5")
    plain = save_hdf5(load_hdf5(path), tmp_path / "plain" / "broken.h5")
    spy.clear()
    ledger = BudgetLedger.init(
        path, epsilon=budget, delta=1e-5, unit="trajectory", relation="replace_one"
    )
    for broken in (path, plain):
        with h5py.File(broken, "r+") as f:
            del f["observations"]
    flags = ["--rho", "1"] if algo == "dp-vapvi" else []
    code, _, err = run(
        ["train", algo, "--data", str(path), *flags, "--out", str(tmp_path / "r")], capsys
    )
    assert_bad_input(code, err, expected)
    assert "observations" not in err and spy == [] and ledger.entries == ()
    # Without a ledger the same broken file is a data error (so the test can fail); a fresh
    # registry, since the registry would rightly map this copy to the ledger above.
    monkeypatch.setenv("PRIVRL_LEDGER_REGISTRY", str(tmp_path / "empty-registry"))
    code, _, err = run(
        ["train", algo, "--data", str(plain), *flags, "--out", str(tmp_path / "r2")], capsys
    )
    assert_bad_input(code, err, "observations")


def test_out_inside_a_file_is_refused_before_any_spend(user_files, spy, tmp_path, capsys) -> None:
    """Property: an --out that cannot become a run directory is refused before the ledger
    records anything and before the data or the noise are touched."""
    path = save_hdf5(load_hdf5(user_files["env"]), tmp_path / "data.h5")
    spy.clear()
    ledger = BudgetLedger.init(
        path, epsilon=100.0, delta=1e-5, unit="trajectory", relation="replace_one"
    )
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    argv = ["train", "dp-vapvi", "--data", str(path), "--rho", "1", "--out", str(a_file / "x")]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "--out", "inside the file")
    assert ledger.entries == () and spy == []


@pytest.mark.parametrize("target", ["qiao-wang-fig1a", "qiao-wang-fig1b"])
def test_reproduce_quick_smoke(target: str, tmp_path, capsys) -> None:
    out = tmp_path / target
    code, _, err = run(["reproduce", target, "--quick", "--seeds", "1", "--out", str(out)], capsys)
    assert code == 0, err
    report = (out / "report.md").read_text()
    assert "Verdict" in report and "quick mode" in report
    for name in ("config.json", "metrics.json", "metrics.csv", "privacy.json"):
        assert (out / name).is_file()
    assert list((out / "plots").glob("*.png"))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["claims"] and metrics["cells"]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["qiao-wang-fig1a", "qiao-wang-fig1b"])
def test_full_reproduction(target: str, tmp_path, capsys) -> None:
    """The full reproductions (minutes): every claim is evaluated and reported."""
    out = tmp_path / target
    code, _, err = run(["reproduce", target, "--out", str(out)], capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    n_scales, n_instances = 3, 2
    assert len(metrics["claims"]) == n_scales * n_instances
    assert all(cell["n"] == 30 for cell in metrics["cells"])
    assert len(list((out / "plots").glob("*.png"))) >= n_scales
