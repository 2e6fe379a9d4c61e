"""`privrl train dp-apvi` / `privrl train apvi`: the run-directory contract, policy reload,
the ledger, and the bad-input contract (exit 2, one `error:` line, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import main
from privrl.data.dataset import TrajectoryDataset
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
    # Same seed, same policy.
    code, _, err = run([*argv[:-1], str(tmp_path / "again")], capsys)
    assert code == 0, err
    again = FiniteHorizonPolicy.load(tmp_path / "again" / "policy.npz")
    assert np.array_equal(again.actions, policy.actions)


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
    assert {r["mechanism"] for r in privacy["releases"]} == {"laplace"}
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
        metadata=ds.metadata.replace(observation_space=None),
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

    monkeypatch.setattr(apvi_mod, "gaussian_mechanism", spy("noise", apvi_mod.gaussian_mechanism))
    monkeypatch.setattr(apvi_mod, "laplace_mechanism", spy("noise", apvi_mod.laplace_mechanism))
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
