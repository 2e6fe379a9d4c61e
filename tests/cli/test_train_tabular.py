"""`privrl train dp-apvi` / `privrl train apvi`: the run-directory contract, policy reload,
the ledger, and the bad-input contract (exit 2, one `error:` line, no traceback)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest

from privrl.cli.main import main
from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import save_hdf5
from privrl.envs.tabular import TabularMDP, behaviour_policy_full_support
from privrl.offline.apvi import FiniteHorizonPolicy
from privrl.privacy.ledger import BudgetLedger

H, S, A = 4, 5, 3
RUN_FILES = ("config.json", "metrics.json", "metrics.csv", "privacy.json", "policy.npz")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_bad_input(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:"), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def assert_run_dir(out: Path) -> dict:
    for name in RUN_FILES:
        assert (out / name).is_file(), name
    assert len(list((out / "plots").glob("*.png"))) >= 2
    privacy = json.loads((out / "privacy.json").read_text())
    for key in ("unit", "relation", "epsilon", "delta", "rho", "accountant", "releases"):
        assert key in privacy, key
    return privacy


@pytest.fixture(scope="module")
def mdp() -> TabularMDP:
    return TabularMDP.random(S, A, H, seed=3)


@pytest.fixture
def dataset_file(tmp_path: Path, mdp: TabularMDP) -> Path:
    mu = behaviour_policy_full_support(4, H, S, A, 0.1)
    ds = mdp.sample(mu, 1500, rng=5)
    path = tmp_path / "data.h5"
    ds.save(path)
    return path


@pytest.fixture
def reward_file(tmp_path: Path, mdp: TabularMDP) -> Path:
    path = tmp_path / "reward.npy"
    np.save(path, np.asarray(mdp.R))
    return path


def test_env_run_writes_contract_and_policy_reloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = [
        "train",
        "dp-apvi",
        "--env",
        "random-tabular",
        "--episodes",
        "3000",
        "--rho",
        "1",
        "--states",
        "6",
        "--actions",
        "3",
        "--horizon",
        "5",
        "--bonus-scale",
        "1e-4",
        "--seed",
        "7",
        "--out",
        str(out),
    ]
    code, stdout, err = run(argv, capsys)
    assert code == 0, err
    privacy = assert_run_dir(out)
    assert privacy["unit"] == "trajectory" and privacy["relation"] == "replace_one"
    assert privacy["rho"] == pytest.approx(1.0)
    assert privacy["delta"] == 1e-6
    assert len(privacy["releases"]) == 2
    assert "suboptimality" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    # Reload the policy and recompute its exact suboptimality on the same (seeded) MDP.
    policy = FiniteHorizonPolicy.load(out / "policy.npz")
    assert policy.actions.shape == (5, 6)
    mdp_seed = np.random.SeedSequence(7).spawn(4)[0]
    env_mdp = TabularMDP.random(6, 3, 5, rng=np.random.default_rng(mdp_seed))
    assert float(env_mdp.suboptimality(policy.actions)) == pytest.approx(metrics["suboptimality"])
    assert metrics["suboptimality"] >= -1e-12
    config = json.loads((out / "config.json").read_text())
    assert config["privacy"]["rho"] == 1.0 and config["seed"] == 7
    header = (out / "metrics.csv").read_text().splitlines()[0]
    assert "known_fraction" in header and "V_mean" in header
    # Same seed, same policy, with the insecure opt-in only (the noise is secret otherwise).
    seeded = [*argv[:-2], "--insecure-reproducible-noise", "--out"]
    for name in ("again", "again2"):
        code, _, err = run([*seeded, str(tmp_path / name)], capsys)
        assert code == 0, err
    a, b = (FiniteHorizonPolicy.load(tmp_path / n / "policy.npz") for n in ("again", "again2"))
    assert np.array_equal(a.actions, b.actions)


def test_data_run_with_public_reward_and_laplace(
    tmp_path: Path, dataset_file: Path, reward_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code, _, err = run(
        [
            "train",
            "dp-apvi",
            "--data",
            str(dataset_file),
            "--horizon",
            str(H),
            "--epsilon",
            "5",
            "--reward-table",
            str(reward_file),
            "--bonus",
            "hoeffding",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0, err
    privacy = assert_run_dir(out)
    assert privacy["epsilon"] == pytest.approx(5.0) and privacy["delta"] == 0.0
    assert privacy["rho"] is None
    assert {r["mechanism"] for r in privacy["releases"]} == {"discrete_laplace"}  # integer counts
    assert FiniteHorizonPolicy.load(out / "policy.npz").actions.shape == (H, S)


def test_data_run_with_private_rewards(
    tmp_path: Path, dataset_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code, _, err = run(
        [
            "train",
            "dp-apvi",
            "--data",
            str(dataset_file),
            "--horizon",
            str(H),
            "--rho",
            "2",
            "--privatize-rewards",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0, err
    privacy = assert_run_dir(out)
    assert len(privacy["releases"]) == 3 and privacy["rho"] == pytest.approx(2.0)


def test_apvi_is_labelled_non_private(
    tmp_path: Path, dataset_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code, _, err = run(
        ["train", "apvi", "--data", str(dataset_file), "--horizon", str(H), "--out", str(out)],
        capsys,
    )
    assert code == 0, err
    privacy = assert_run_dir(out)
    assert privacy["private"] is False and privacy["epsilon"] == "inf"


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------


def float_state_file(tmp_path: Path, mdp: TabularMDP) -> Path:
    ds = mdp.sample(behaviour_policy_full_support(0, H, S, A, 0.1), 20, rng=0)
    bad = TrajectoryDataset(
        observations=ds.observations.astype(np.float64) + 0.5,
        actions=ds.actions,
        rewards=ds.rewards,
        terminated=ds.terminated,
        truncated=ds.truncated,
        episode_offsets=ds.episode_offsets,
        # A continuous (Box) state space in the public metadata: refused from the schema.
        metadata=ds.metadata.replace(observation_space=gym.spaces.Box(0.0, float(S), shape=())),
    )
    path = tmp_path / "float_states.h5"
    bad.save(path)
    return path


def test_bad_inputs_exit_2_with_one_line(
    tmp_path: Path,
    dataset_file: Path,
    reward_file: Path,
    mdp: TabularMDP,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = ["--data", str(dataset_file), "--horizon", str(H), "--reward-table", str(reward_file)]
    out = ["--out", str(tmp_path / "bad")]
    cases = [
        (["--rho", "0", *data], ("--rho",)),
        (["--rho", "-1", *data], ("--rho",)),
        (["--rho", "1", "--epsilon", "1", *data], ("--rho", "--epsilon")),
        (data, ("--rho", "--epsilon")),
        (["--rho", "1", "--data", str(tmp_path / "missing.h5"), "--horizon", "4"], ("not found",)),
        (
            [
                "--rho",
                "1",
                "--data",
                str(dataset_file),
                "--horizon",
                str(H + 2),
                "--reward-table",
                str(reward_file),
            ],
            ("horizon",),
        ),
        (
            ["--rho", "1", "--data", str(dataset_file), "--horizon", str(H)],
            ("--privatize-rewards",),
        ),
        (["--rho", "1", "--env", "random-tabular"], ("--episodes",)),
        (["--rho", "1", "--env", "gridworld", "--episodes", "5"], ("unknown --env",)),
        (["--rho", "1", "--env", "random-tabular", "--episodes", "5", *data], ("exactly one",)),
        (["--rho", "1e300", *data], ("--rho must be in",)),
        (["--rho", "1e-300", *data], ("--rho must be in",)),
        (["--rho", "nan", *data], ("--rho must be in",)),
        (["--epsilon", "1e300", *data], ("--epsilon must be",)),
        (["--epsilon", "1e-300", *data], ("--epsilon must be",)),
        (["--epsilon", "1", "--privacy-delta", "1e-5", *data], ("--privacy-delta is for --rho",)),
        (["--rho", "1", "--env", "random-tabular", "--episodes", "1000000000000"], ("limit",)),
        (["--rho", "1", "--env", "random-tabular", "-n", "5", "--states", "100000"], ("limit",)),
        (
            ["--rho", "1", "--env", "random-tabular", "-n", "5", "--horizon", "1000000000"],
            ("limit",),
        ),
        (["--rho", "1", "--data", str(tmp_path), "--horizon", "4"], ("is a directory",)),
        (["--rho", "1", *data, "--states", str(S + 1)], ("contradicts",)),
        (["--rho", "1", *data, "--delta", "1.5"], ("--delta",)),
        (
            [
                "--rho",
                "1",
                "--data",
                str(float_state_file(tmp_path, mdp)),
                "--horizon",
                str(H),
                "--states",
                str(S),
                "--actions",
                str(A),
                "--privatize-rewards",
            ],
            ("non-integer states",),
        ),
    ]
    for args, fragments in cases:
        code, _, err = run(["train", "dp-apvi", *args, *out], capsys)
        assert_bad_input(code, err, *fragments)
    assert not (tmp_path / "bad" / "privacy.json").exists()


# ---------------------------------------------------------------------------------------------
# ledger
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def no_noise(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every noise draw and every read of the dataset."""
    import privrl.data.io as io
    import privrl.offline.apvi as apvi_mod

    calls: list[str] = []

    def spy(name, fn):
        def wrapped(*args, **kwargs):
            calls.append(name)
            return fn(*args, **kwargs)

        return wrapped

    for mechanism in (
        "gaussian_mechanism",
        "laplace_mechanism",
        "discrete_gaussian_mechanism",  # the counts
        "discrete_laplace_mechanism",
    ):
        monkeypatch.setattr(apvi_mod, mechanism, spy("noise", getattr(apvi_mod, mechanism)))
    monkeypatch.setattr(io, "load_hdf5", spy("read", io.load_hdf5))
    return calls


def test_exhausted_ledger_refuses_before_noise(
    tmp_path: Path,
    dataset_file: Path,
    reward_file: Path,
    no_noise: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Property: with a ledger whose budget cannot cover the run, the run is refused before the
    dataset is read and before any noise is drawn, and nothing is recorded."""
    ledger = BudgetLedger.init(
        dataset_file, epsilon=1.0, delta=1e-6, unit="trajectory", relation="replace_one"
    )
    out = tmp_path / "run"
    args = [
        "train",
        "dp-apvi",
        "--data",
        str(dataset_file),
        "--horizon",
        str(H),
        "--reward-table",
        str(reward_file),
        "--out",
        str(out),
    ]
    code, _, err = run([*args, "--rho", "1"], capsys)  # needs ε ≈ 7.8 > 1
    assert_bad_input(code, err, "ε")
    assert no_noise == []
    assert ledger.entries == ()
    assert not (out / "privacy.json").exists()
    # The non-private baseline is refused too.
    code, _, err = run(["train", "apvi", *args[2:]], capsys)
    assert_bad_input(code, err, "not differentially private")
    assert no_noise == []


def test_ledger_records_spend_and_then_refuses(
    tmp_path: Path,
    dataset_file: Path,
    reward_file: Path,
    no_noise: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    ledger = BudgetLedger.init(
        dataset_file, epsilon=10.0, delta=1e-6, unit="trajectory", relation="replace_one"
    )
    args = [
        "train",
        "dp-apvi",
        "--data",
        str(dataset_file),
        "--horizon",
        str(H),
        "--rho",
        "1",
        "--reward-table",
        str(reward_file),
    ]
    code, _, err = run([*args, "--out", str(tmp_path / "a")], capsys)
    assert code == 0, err
    assert len(ledger.entries) == 1
    assert no_noise.count("noise") == 2 and no_noise.count("read") == 1
    assert 0 < ledger.spent() <= 10.0
    no_noise.clear()
    code, _, err = run([*args, "--out", str(tmp_path / "b")], capsys)  # 2 × ρ=1 > ε 10
    assert_bad_input(code, err, "ledger")
    assert no_noise == [] and len(ledger.entries) == 1


def test_ledger_of_another_unit_is_refused(
    tmp_path: Path,
    dataset_file: Path,
    reward_file: Path,
    no_noise: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    BudgetLedger.init(dataset_file, epsilon=100.0, delta=1e-6, unit="user", relation="add_remove")
    code, _, err = run(
        [
            "train",
            "dp-apvi",
            "--data",
            str(dataset_file),
            "--horizon",
            str(H),
            "--rho",
            "1",
            "--reward-table",
            str(reward_file),
            "--out",
            str(tmp_path / "r"),
        ],
        capsys,
    )
    assert_bad_input(code, err, "trajectory")
    assert no_noise == []


def test_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["train", "--help"], capsys)
    assert code == 0 and "dp-apvi" in out and "apvi" in out


# ---------------------------------------------------------------------------------------------
# the ledger comes before any read of the episodes; --out before the ledger
# ---------------------------------------------------------------------------------------------


def unreadable_episodes(path: Path) -> Path:
    """Delete the episode arrays' first dataset, keeping the root attributes (the header)."""
    with h5py.File(path, "r+") as f:
        del f["observations"]
    return path


@pytest.mark.parametrize(
    ("algo", "budget", "expected"),
    [("dp-apvi", 0.5, "ε"), ("apvi", 100.0, "not differentially private")],
)
def test_ledger_refuses_before_the_episodes_are_read(
    algo: str,
    budget: float,
    expected: str,
    tmp_path: Path,
    dataset_file: Path,
    reward_file: Path,
    no_noise: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Property: a run reads only the file's header before the ledger check — with unreadable
    episode arrays and a ledger that refuses the run, the answer is the ledger's refusal, not
    a data error, and neither the data nor the noise is touched."""
    plain = tmp_path / "plain" / dataset_file.name
    plain.parent.mkdir()
    shutil.copy(dataset_file, plain)
    ledger = BudgetLedger.init(
        dataset_file, epsilon=budget, delta=1e-6, unit="trajectory", relation="replace_one"
    )
    unreadable_episodes(dataset_file)
    args = ["--reward-table", str(reward_file)]
    if algo == "dp-apvi":
        args += ["--rho", "1"]
    code, _, err = run(
        ["train", algo, "--data", str(dataset_file), *args, "--out", str(tmp_path / "r")], capsys
    )
    assert_bad_input(code, err, expected)
    assert "observations" not in err
    assert no_noise == [] and ledger.entries == ()
    # Without a ledger the same broken file is a data error (so the test can fail); a fresh
    # registry, since the registry would rightly map this copy to the ledger above.
    unreadable_episodes(plain)
    monkeypatch.setenv("PRIVRL_LEDGER_REGISTRY", str(tmp_path / "empty-registry"))
    code, _, err = run(
        ["train", algo, "--data", str(plain), *args, "--out", str(tmp_path / "r2")], capsys
    )
    assert_bad_input(code, err, "observations")


def test_out_inside_a_file_is_refused_before_any_spend(
    tmp_path: Path,
    dataset_file: Path,
    reward_file: Path,
    no_noise: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Property: an --out that cannot become a run directory is refused before the ledger
    records anything and before the data or the noise are touched (it used to spend ε and
    write nothing)."""
    ledger = BudgetLedger.init(
        dataset_file, epsilon=10.0, delta=1e-6, unit="trajectory", relation="replace_one"
    )
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    argv = ["train", "dp-apvi", "--data", str(dataset_file), "--rho", "1"]
    argv += ["--reward-table", str(reward_file), "--out", str(a_file / "run")]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "--out", "inside the file")
    assert ledger.entries == () and no_noise == []


# ---------------------------------------------------------------------------------------------
# public parameters, and nothing data-dependent outside the noisy releases
# ---------------------------------------------------------------------------------------------


def with_metadata(ds: TrajectoryDataset, path: Path, **changes) -> Path:
    return save_hdf5(ds.with_metadata(ds.metadata.replace(**changes)), path)


def test_spaces_inferred_from_the_data_are_refused(
    tmp_path: Path, mdp: TabularMDP, reward_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Structural rule: S and A set E, ι and the release sizes, so spaces the metadata marks as
    inferred from the data are not used — the run needs --states/--actions, and privacy.json
    lists each public parameter with its source."""
    ds = mdp.sample(behaviour_policy_full_support(4, H, S, A, 0.1), 200, rng=5)
    extra = {**ds.metadata.extra, "inferred_from_data": ["observation_space", "action_space"]}
    path = with_metadata(ds, tmp_path / "imported.h5", extra=extra)
    argv = ["train", "dp-apvi", "--data", str(path), "--rho", "1"]
    argv += ["--reward-table", str(reward_file)]
    code, _, err = run([*argv, "--out", str(tmp_path / "a")], capsys)
    assert_bad_input(code, err, "inferred", "--states")
    code, _, err = run([*argv, "--states", str(S), "--out", str(tmp_path / "b")], capsys)
    assert_bad_input(code, err, "inferred", "--actions")
    out = tmp_path / "c"
    code, _, err = run([*argv, "-S", str(S), "-A", str(A), "--out", str(out)], capsys)
    assert code == 0, err
    params = {
        p["name"]: p for p in json.loads((out / "privacy.json").read_text())["public_parameters"]
    }
    assert params["number of states S"]["source"] == "flag"
    assert params["number of actions A"]["source"] == "flag"
    assert params["horizon H"] == {
        "name": "horizon H",
        "value": H,
        "source": "public metadata",
        "detail": "metadata field 'horizon'",
    }
    assert params["zCDP budget ρ"]["source"] == "flag"
    assert params["privacy δ"]["source"] == "default"
    assert params["number of trajectories n"]["value"] == 200
    assert params["Gaussian σ per count"]["value"] == pytest.approx(math.sqrt(2 * H / 1.0))


def test_horizon_is_public(
    tmp_path: Path, mdp: TabularMDP, reward_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Structural rule: without --horizon and without a horizon in the metadata, refuse (H is
    never the longest episode)."""
    ds = mdp.sample(behaviour_policy_full_support(4, H, S, A, 0.1), 20, rng=5)
    path = with_metadata(ds, tmp_path / "no_h.h5", horizon=None)
    argv = ["train", "dp-apvi", "--data", str(path), "--rho", "1"]
    code, _, err = run([*argv, "--reward-table", str(reward_file), "--out", str(tmp_path)], capsys)
    assert_bad_input(code, err, "pass --horizon H")


def neighbour_files(tmp_path: Path, mdp: TabularMDP) -> tuple[Path, Path]:
    """D and D′ (replace-one): D′ has episode 0 replaced by a longer one of other states."""
    ds = mdp.sample(behaviour_policy_full_support(4, H, S, A, 0.1), 400, rng=5)
    long_mdp = TabularMDP.random(S, A, H + 3, seed=8)
    long = long_mdp.sample(behaviour_policy_full_support(1, H + 3, S, A, 0.2), 1, rng=9)
    other = TrajectoryDataset.concat(
        [long.with_metadata(ds.metadata), ds.subset(np.arange(1, ds.n_episodes))]
    )
    return save_hdf5(ds, tmp_path / "d.h5"), save_hdf5(other, tmp_path / "d2.h5")


PUBLIC_METRICS = ("epsilon", "delta", "rho", "E", "iota", "noise_scale")


@pytest.mark.parametrize("budget", [["--rho", "1"], ["--epsilon", "3", "--privatize-rewards"]])
def test_neighbours_publish_the_same_outside_the_noisy_releases(
    budget: list[str],
    tmp_path: Path,
    mdp: TabularMDP,
    reward_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Property: on neighbouring datasets (one trajectory replaced, here by a longer one) every
    published quantity that is not post-processing of a noisy release — config.json,
    privacy.json, the public metrics, the files written — is identical (before, the longer
    episode made one run fail and not the other)."""
    d, d2 = neighbour_files(tmp_path, mdp)
    published = []
    for path in (d, d2):
        out = tmp_path / path.stem
        argv = ["train", "dp-apvi", "--data", str(path), *budget, "--out", str(out)]
        if "--privatize-rewards" not in budget:
            argv += ["--reward-table", str(reward_file)]
        code, _, err = run(argv, capsys)
        assert code == 0, err
        config = json.loads((out / "config.json").read_text())
        config["source"]["data"] = Path(config["source"]["data"]).name.replace("d2", "d")
        privacy = json.loads((out / "privacy.json").read_text())
        privacy.pop("created")
        metrics = json.loads((out / "metrics.json").read_text())
        published.append(
            (
                config,
                privacy,
                {k: metrics[k] for k in PUBLIC_METRICS},
                sorted(metrics["timings_seconds"]),
                sorted(p.name for p in out.rglob("*")),
            )
        )
    assert published[0] == published[1]
    assert "counting" not in published[0][3]  # no time spent on the raw data is published
    assert any("truncated to their first H steps" in n for n in published[0][1]["notes"])


@pytest.mark.parametrize("units", [np.arange(40), np.arange(40) // 2])
def test_declared_units_are_refused_by_schema(
    units: np.ndarray,
    tmp_path: Path,
    mdp: TabularMDP,
    reward_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Structural rule: a dataset with a unit_ids field is refused by dp-apvi whether its ids
    are distinct or repeat (before, only repeats were refused: a data-dependent error); the
    non-private apvi accepts it."""
    ds = mdp.sample(behaviour_policy_full_support(4, H, S, A, 0.1), 40, rng=5)
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
    args = ["--data", str(path), "--reward-table", str(reward_file)]
    code, _, err = run(["train", "dp-apvi", *args, "--rho", "1", "--out", str(tmp_path)], capsys)
    assert_bad_input(code, err, "unit_ids field")
    code, _, err = run(["train", "apvi", *args, "--out", str(tmp_path / "a")], capsys)
    assert code == 0, err


def test_spaces_not_starting_at_zero_are_refused_from_the_metadata(
    tmp_path: Path, mdp: TabularMDP, reward_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """States declared as Discrete(S, start=1) would all be shifted out of [0, S) and dropped;
    the metadata says so up front, so the run is refused (a public check)."""
    ds = mdp.sample(behaviour_policy_full_support(4, H, S, A, 0.1), 20, rng=5)
    shifted = TrajectoryDataset(
        observations=ds.observations + 1,
        actions=ds.actions,
        rewards=ds.rewards,
        terminated=ds.terminated,
        truncated=ds.truncated,
        episode_offsets=ds.episode_offsets,
        metadata=ds.metadata.replace(observation_space=gym.spaces.Discrete(S, start=1)),
    )
    path = save_hdf5(shifted, tmp_path / "shifted.h5")
    argv = ["train", "dp-apvi", "--data", str(path), "--rho", "1", "-S", str(S)]
    argv += ["--reward-table", str(reward_file), "--out", str(tmp_path / "o")]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "does not start at 0")
