"""`privrl ope ...`: the --env chain and --data paths, the run directory, the ledger, and the
bad-input contract (exit 2, exactly one stderr line starting `error:`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import app, main
from privrl.cli.ope import ope_app
from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import save_hdf5
from privrl.envs.chain import ChainMDP
from privrl.ope import gpope as gpope_mod

if not any(g.name == "ope" for g in app.registered_groups):  # until main.py registers it
    app.add_typer(ope_app, name="ope")

EPS, DELTA, M, N = 1.0, 1e-5, 100, 200
SIGMA_REF = 2.84  # meets (EPS, DELTA) for (M, N): checked in tests/ope/test_gpope.py


@pytest.fixture(autouse=True)
def fast_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the 10-40 s dense-order calibration for the one configuration used here (its
    value is verified in tests/ope); every report's ε is still computed by the accountant."""
    real = gpope_mod._cached_sigma

    def cached(eps: float, delta: float, m: int, n: int, mode: str) -> float:
        if (eps, delta, m, n, mode) == (EPS, DELTA, M, N, "rigorous"):
            return SIGMA_REF
        return real(eps, delta, m, n, mode)

    monkeypatch.setattr(gpope_mod, "_cached_sigma", cached)


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


@pytest.fixture(scope="module")
def chain_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "chain.h5"
    save_hdf5(ChainMDP().sample(M, seed=0), path)
    return path


@pytest.fixture(scope="module")
def no_probs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = ChainMDP().sample(M, seed=1)
    bare = TrajectoryDataset(
        observations=d.observations,
        actions=d.actions,
        rewards=d.rewards,
        terminated=d.terminated,
        truncated=d.truncated,
        episode_offsets=d.episode_offsets,
        metadata=d.metadata,
    )
    path = tmp_path_factory.mktemp("data") / "bare.h5"
    save_hdf5(bare, path)
    return path


def test_gpope_env_chain_writes_run_directory(tmp_path: Path, capsys) -> None:
    """--env chain: tuning on a public sample, run dir with mspbe, curve, privacy, theta."""
    out = tmp_path / "run"
    argv = [
        "ope",
        "gpope",
        "--env",
        "chain",
        "--trajectories",
        str(M),
        "--epsilon",
        str(EPS),
        "--iterations",
        str(N),
        "--out",
        str(out),
        "--seed",
        "3",
    ]
    code, _stdout, err = run(argv, capsys)
    assert code == 0, err
    for name in ("config.json", "metrics.json", "metrics.csv", "privacy.json", "theta.npy"):
        assert (out / name).is_file(), name
    assert (out / "plots" / "mspbe.png").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0 < metrics["mspbe"] < 1 and metrics["epsilon"] <= EPS
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["relation"] == "replace_one" and privacy["unit"] == "trajectory"
    (rel,) = privacy["releases"]
    assert rel["count"] == N and rel["sensitivity"] == pytest.approx(2 * metrics["clip"])
    assert any("PUBLIC" in p for p in privacy["public"])
    params = {p["name"]: p for p in privacy["public_parameters"]}
    assert params["clip bound h"]["source"] == "public split"  # tuned on the public sample
    assert params["clip bound h"]["value"] == pytest.approx(metrics["clip"])
    assert params["step size"]["source"] == "public split"
    assert params["discount γ"]["source"] == "default"  # the chain's γ
    assert "PUBLIC" in metrics["public_clipped_fraction_note"]
    curve = (out / "metrics.csv").read_text().splitlines()
    assert curve[0] == "iteration,mspbe" and len(curve) > 10
    assert np.load(out / "theta.npy").shape == (39,)


def test_gpope_data_path_and_ledger(chain_file: Path, tmp_path: Path, capsys) -> None:
    """--data with explicit --clip/--step-size; a ledger records the spend and refuses the run
    that would exceed the budget."""
    out = tmp_path / "run"
    base = [
        "ope",
        "gpope",
        "--data",
        str(chain_file),
        "--features",
        "onehot",
        "--epsilon",
        str(EPS),
        "--iterations",
        str(N),
        "--clip",
        "0.05",
        "--step-size",
        "0.01",
    ]
    code, _, err = run([*base, "--out", str(out)], capsys)
    assert code == 0, err
    assert json.loads((out / "metrics.json").read_text())["epsilon"] <= EPS
    code, _, err = run(
        [
            "ledger",
            "init",
            str(chain_file),
            "--epsilon",
            "1.2",
            "--delta",
            "1e-5",
            "--relation",
            "replace_one",
        ],
        capsys,
    )
    assert code == 0, err
    code, _, err = run([*base, "--out", str(tmp_path / "r2")], capsys)
    assert code == 0, err
    code, _, err = run([*base, "--out", str(tmp_path / "r3")], capsys)
    assert_bad_input(code, err, "ε")


def test_gpope_data_without_tuning_inputs_is_refused(chain_file: Path, tmp_path, capsys):
    argv = [
        "ope",
        "gpope",
        "--data",
        str(chain_file),
        "--features",
        "onehot",
        "--epsilon",
        "1",
        "--out",
        str(tmp_path / "x"),
    ]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "--public-data")


def test_missing_behaviour_probs_is_a_clear_error(no_probs_file: Path, tmp_path, capsys):
    argv = [
        "ope",
        "gpope",
        "--data",
        str(no_probs_file),
        "--features",
        "onehot",
        "--target-policy",
        "uniform",
        "--epsilon",
        "1",
        "--clip",
        "1",
        "--step-size",
        "0.1",
        "--iterations",
        str(N),
        "--out",
        str(tmp_path / "x"),
    ]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "behaviour_probs")


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--epsilon", "0"], "--epsilon"),
        (["--epsilon", "-1"], "--epsilon"),
        (["--epsilon", "1", "--delta", "1.5"], "--delta"),
        (["--epsilon", "1", "--delta", "0"], "--delta"),
    ],
)
def test_bad_privacy_parameters(flags: list[str], fragment: str, tmp_path, capsys) -> None:
    for cmd in ("gpope", "dp-lsw"):
        argv = ["ope", cmd, "--env", "chain", *flags, "--out", str(tmp_path / "x")]
        code, _, err = run(argv, capsys)
        assert_bad_input(code, err, fragment)


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--env", "moon"], "--env"),
        (["--env", "chain", "--features", "wavelet:3"], "feature"),
        (["--env", "chain", "--accounting", "loose"], "--accounting"),
        ([], "--data"),
    ],
)
def test_bad_inputs(flags: list[str], fragment: str, tmp_path, capsys) -> None:
    argv = ["ope", "gpope", *flags, "--epsilon", "1", "--out", str(tmp_path / "x")]
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, fragment)


def test_baselines_and_lstd_on_the_chain(tmp_path: Path, capsys) -> None:
    """dp-lsw / dp-lsl / lstd --env chain write run directories with mspbe; LSTD is labelled
    non-private."""
    for cmd, extra in (
        ("dp-lsw", ["--epsilon", "1"]),
        ("dp-lsl", ["--epsilon", "1"]),
        ("lstd", []),
    ):
        out = tmp_path / cmd
        code, _, err = run(
            ["ope", cmd, "--env", "chain", "--trajectories", "200", *extra, "--out", str(out)],
            capsys,
        )
        assert code == 0, (cmd, err)
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["mspbe"] >= 0
        privacy = json.loads((out / "privacy.json").read_text())
        assert privacy["private"] is (cmd != "lstd")
    lstd_m = json.loads((tmp_path / "lstd" / "metrics.json").read_text())["mspbe"]
    assert lstd_m < 1e-4
    code, _, err = run(
        [
            "ope",
            "dp-lsw",
            "--env",
            "chain",
            "--target-policy",
            "uniform",
            "--epsilon",
            "1",
            "--out",
            str(tmp_path / "y"),
        ],
        capsys,
    )
    assert_bad_input(code, err, "on-policy")


# ------------------------------------------------------------------------ privacy of the faces


def chain_neighbours() -> tuple[TrajectoryDataset, TrajectoryDataset]:
    """The chain dataset of the module (M trajectories) and a replace-one neighbour: its first
    trajectory swapped for a one-step trajectory 5 → absorbing (any trajectory is a valid
    replacement), so the first-visit counts m_s — and with them σ_X — differ."""
    x = ChainMDP().sample(M, seed=0)
    odd = TrajectoryDataset(
        observations=np.array([5, 39]),
        actions=np.array([0]),
        rewards=np.array([1.0]),
        terminated=np.array([True]),
        truncated=np.array([False]),
        episode_offsets=np.array([0, 1]),
        behaviour_probs=np.array([1.0]),
        metadata=x.metadata,
    )
    y = TrajectoryDataset.concat([odd, x.subset(np.arange(1, M))])
    assert y.n_episodes == x.n_episodes and not y.equals(x)
    return x, y


def published(out: Path, stdout: str) -> dict[str, object]:
    """Everything a run publishes outside its noisy release (θ, its curve and plots): the
    config, the metrics, the privacy report (minus its timestamp) and the console output
    (minus the timestamp line and the run directory's name)."""
    privacy = json.loads((out / "privacy.json").read_text())
    privacy.pop("created")
    console = [
        line.replace(str(out), "OUT")
        for line in stdout.splitlines()
        if privacy["privrl_version"] + " ·" not in line
    ]
    return {
        "config": json.loads((out / "config.json").read_text()),
        "metrics": json.loads((out / "metrics.json").read_text()),
        "privacy": privacy,
        "console": console,
    }


NEIGHBOUR_RUNS = {
    "gpope": ["--iterations", str(N), "--clip", "0.05", "--step-size", "0.01"],
    "dp-lsw": ["--reward-range", "1"],
    "dp-lsl": ["--reward-range", "1", "--c", "50"],
}


@pytest.mark.parametrize("cmd", sorted(NEIGHBOUR_RUNS))
def test_neighbours_publish_the_same_outside_the_noisy_release(
    cmd: str, tmp_path: Path, capsys
) -> None:
    """Privacy property (replace-one, one trajectory): a run on a dataset and on a neighbour
    publishes identical config.json, metrics.json, privacy.json and console output; only the
    noisy θ may differ. For DP-LSW/DP-LSL the smooth-sensitivity noise scale σ_X is a function
    of the first-visit counts (it differs between these two datasets, checked below), so it
    must appear nowhere."""
    from privrl.ope.baselines import first_visit_returns, lsw_sigma

    x, y = chain_neighbours()
    index = lambda o: np.asarray(o).reshape(-1)  # noqa: E731
    sig = [
        lsw_sigma(
            np.eye(40),
            np.full(40, 1 / 40),
            first_visit_returns(d, index, 40, 0.99).counts,
            epsilon=EPS,
            delta=DELTA,
            return_range=100.0,
        )
        for d in (x, y)
    ]
    assert sig[0] != sig[1]  # the withheld quantity does tell these neighbours apart
    path = tmp_path / "data.h5"  # one path for both: the path itself is public
    seen = []
    for i, d in enumerate((x, y)):
        save_hdf5(d, path)
        out = tmp_path / f"run{i}"
        argv = ["ope", cmd, "--data", str(path), "--features", "onehot", "--epsilon", str(EPS)]
        code, stdout, err = run([*argv, *NEIGHBOUR_RUNS[cmd], "--out", str(out)], capsys)
        assert code == 0, err
        seen.append(published(out, stdout))
    assert seen[0] == seen[1]
    text = json.dumps(seen[0])
    if cmd != "gpope":
        assert "sigma" not in text
        assert not any(f"{s:.6g}"[:6] in text for s in sig)
        (release,) = seen[0]["privacy"]["releases"]  # type: ignore[index]
        assert release["sensitivity"] == "nan" and "sigma" not in release["noise"]
        assert "withheld" in release["extra"]["sensitivity"]


def corrupt_and_spend(path: Path, dataset: TrajectoryDataset) -> None:
    """A dataset whose episode arrays cannot be read (the `observations` array deleted; the
    header intact) and whose ledger (trajectory, replace-one) has ε_total = 0.01: any run
    must be refused by the ledger before a data error could arise."""
    import h5py

    from privrl.privacy.ledger import BudgetLedger

    save_hdf5(dataset, path)
    spec = dict(epsilon=0.01, delta=1e-3, unit="trajectory", relation="replace_one")
    BudgetLedger.init(path, **spec)
    with h5py.File(path, "r+") as f:
        del f["observations"]
    # The ledger is found from the header's content fingerprint, without the arrays.
    assert BudgetLedger.for_dataset(path) is not None


LEDGER_RUNS = {
    "gpope": ["--epsilon", str(EPS), "--iterations", str(N), "--clip", "1", "--step-size", "0.1"],
    "dp-lsw": ["--epsilon", str(EPS), "--reward-range", "1"],
    "dp-lsl": ["--epsilon", str(EPS), "--reward-range", "1", "--c", "50"],
    "lstd": [],
}


@pytest.mark.parametrize("cmd", sorted(LEDGER_RUNS))
def test_the_ledger_refuses_before_the_episodes_are_read(cmd: str, tmp_path: Path, capsys) -> None:
    """Structural rule: a command reads only the dataset's header before the ledger check, so
    a spent ledger refuses the run (exit 2, the budget message) even when the episode arrays
    are unreadable — the old code loaded the data first and failed on them. LSTD is not
    private, so the ledger refuses it outright. Nothing is written to the run directory."""
    path = tmp_path / "data.h5"
    corrupt_and_spend(path, ChainMDP().sample(M, seed=0))
    out = tmp_path / "run"
    argv = ["ope", cmd, "--data", str(path), "--features", "onehot", *LEDGER_RUNS[cmd]]
    code, _, err = run([*argv, "--out", str(out)], capsys)
    assert_bad_input(code, err, "ledger has", "budget")
    assert not any((out / name).exists() for name in ("config.json", "privacy.json"))


@pytest.mark.parametrize("cmd", ["gpope", "dp-lsw"])
def test_a_ledger_under_another_relation_is_refused_first(cmd: str, tmp_path: Path, capsys):
    """The unit/relation check is the guard's, on the planned report, before the data."""
    import h5py

    from privrl.privacy.ledger import BudgetLedger

    path = tmp_path / "data.h5"
    save_hdf5(ChainMDP().sample(M, seed=0), path)
    BudgetLedger.init(path, epsilon=10, delta=1e-5, unit="trajectory", relation="add_remove")
    with h5py.File(path, "r+") as f:
        del f["observations"]
    argv = ["ope", cmd, "--data", str(path), "--features", "onehot", *LEDGER_RUNS[cmd]]
    code, _, err = run([*argv, "--out", str(tmp_path / "run")], capsys)
    assert_bad_input(code, err, "replace_one", "add_remove")


def test_public_parameters_are_listed_with_their_sources(tmp_path: Path, capsys) -> None:
    """privacy.json lists every quantity that set the noise with its public source: m from the
    header (public under replace-one), ε, N, h from flags, γ from the public metadata; DP-LSL
    adds the reward range, the derived return range and λ = c·m^0.4."""
    chain_file = save_hdf5(ChainMDP().sample(M, seed=0), tmp_path / "chain.h5")
    out = tmp_path / "gp"
    argv = ["ope", "gpope", "--data", str(chain_file), "--features", "onehot"]
    code, _, err = run([*argv, *LEDGER_RUNS["gpope"], "--out", str(out)], capsys)
    assert code == 0, err
    params = {
        p["name"]: p for p in json.loads((out / "privacy.json").read_text())["public_parameters"]
    }
    assert params["trajectories m"]["value"] == M
    assert params["trajectories m"]["source"] == "public metadata"
    assert "replace-one" in params["trajectories m"]["detail"]
    assert params["iterations N"] == {
        "name": "iterations N",
        "value": N,
        "source": "flag",
        "detail": "--iterations",
    }
    assert params["clip bound h"]["source"] == "flag" and params["ε (target)"]["value"] == EPS
    assert params["discount γ"]["source"] == "public metadata"
    assert params["noise σ (std / h)"]["source"] == "derived"
    out = tmp_path / "lsl"
    argv = ["ope", "dp-lsl", "--data", str(chain_file), "--features", "onehot"]
    code, _, err = run([*argv, *LEDGER_RUNS["dp-lsl"], "--out", str(out)], capsys)
    assert code == 0, err
    params = {
        p["name"]: p for p in json.loads((out / "privacy.json").read_text())["public_parameters"]
    }
    assert params["reward range R"]["source"] == "flag"
    assert params["reward lower bound"]["source"] == "default"
    assert params["return range"]["value"] == pytest.approx(100.0)
    assert params["ridge λ"]["value"] == pytest.approx(50 * M**0.4)
    assert params["c (λ = c·m^0.4)"]["source"] == "flag"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["dp-lsw", "--env", "chain", "--epsilon", "1", "--aggregation", "0"], "--aggregation"),
        (["dp-lsw", "--env", "chain", "--epsilon", "1", "--gamma", "1"], "γ < 1"),
        (["dp-lsl", "--env", "chain", "--epsilon", "1", "--gamma", "1"], "γ < 1"),
        (["dp-lsw", "--env", "chain", "--epsilon", "1", "--gamma", "-1"], "--gamma"),
        (["dp-lsw", "--env", "chain", "--epsilon", "1", "--gamma", "nan"], "--gamma"),
        (["lstd", "--env", "chain", "--gamma", "2"], "--gamma"),
        (["gpope", "--env", "chain", "--epsilon", "1", "--gamma", "inf"], "--gamma"),
        (["dp-lsw", "--env", "chain", "--epsilon", "1", "--reward-range", "inf"], "reward-range"),
        (["dp-lsw", "--env", "chain", "--epsilon", "1", "--reward-range", "1e307"], "range"),
        (["dp-lsw", "--env", "chain", "--epsilon", "1", "--reward-min", "nan"], "reward-min"),
        (["dp-lsl", "--env", "chain", "--epsilon", "1", "--c", "inf"], "--c"),
        (["dp-lsl", "--env", "chain", "--epsilon", "1", "--c", "0"], "--c"),
        (["dp-lsl", "--env", "chain", "--epsilon", "1", "--c", "1e-3"], "λ"),
        (["dp-lsw", "--env", "chain", "--epsilon", "1", "-m", "1000000000000"], "1,000,000"),
        (["lstd", "--env", "chain", "-m", "1000000000000"], "1,000,000"),
        (["lstd", "--env", "chain", "-m", "1e12"], "--trajectories"),
        (["gpope", "--env", "chain", "--epsilon", "1", "-N", "1000000000000"], "100,000,000"),
        (["gpope", "--env", "chain", "--epsilon", "1", "-N", "1e12"], "--iterations"),
        (["gpope", "--env", "chain", "--epsilon", "1", "-N", "0"], "--iterations"),
        (["gpope", "--env", "chain", "--epsilon", "1", "--clip", "inf"], "--clip"),
        (["gpope", "--env", "chain", "--epsilon", "1", "--step-size", "inf"], "--step-size"),
        (["gpope", "--env", "chain", "--epsilon", "1", "--k", "nan"], "--k"),
        (["gpope", "--env", "chain", "--epsilon", "1", "--lambda-min", "-1"], "--lambda-min"),
        (["gpope", "--env", "chain", "--epsilon", "1e300", "--seed", "-1"], "--seed"),
        (["gpope", "--env", "chain", "--epsilon", "inf"], "--epsilon"),
        (["dp-lsw", "--env", "chain", "--epsilon", "1", "--delta", "nan"], "--delta"),
    ],
)
def test_obviously_bad_values_are_one_error_line(argv: list[str], fragment: str, tmp_path, capsys):
    """Bad values are refused up front (exit 2, one `error:` line naming the flag or the
    limit): the old code accepted --aggregation 0 and --gamma -1, crashed with
    ZeroDivisionError on --gamma 1 and with MemoryError on 10^12 trajectories or iterations."""
    code, _, err = run(["ope", *argv, "--out", str(tmp_path / "x")], capsys)
    assert_bad_input(code, err, fragment)


@pytest.mark.parametrize("cmd", ["gpope", "dp-lsw", "dp-lsl", "lstd"])
def test_bad_paths_are_one_error_line(cmd: str, chain_file: Path, tmp_path: Path, capsys):
    """An existing file (or a path inside one) as --out and a directory as --data."""
    extra = {"gpope": LEDGER_RUNS["gpope"], "lstd": []}.get(cmd, LEDGER_RUNS["dp-lsw"])
    base = ["ope", cmd, "--features", "onehot", *extra]
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    for out in (afile, afile / "sub"):
        code, _, err = run([*base, "--data", str(chain_file), "--out", str(out)], capsys)
        assert_bad_input(code, err, "--out")
    code, _, err = run([*base, "--data", str(tmp_path), "--out", str(tmp_path / "o")], capsys)
    assert_bad_input(code, err, "directory")


def test_reward_range_from_metadata_unless_inferred(tmp_path: Path, capsys) -> None:
    """Privacy rule: the reward range sets the noise, so it is taken from the dataset's public
    metadata only when the metadata does not mark it as inferred from the data; otherwise the
    run is refused with the flag that supplies it."""
    d = ChainMDP().sample(M, seed=0)
    argv = ["ope", "dp-lsw", "--features", "onehot", "--epsilon", "1"]
    for i, extra in enumerate(
        ({"reward_range": 1.0}, {"reward_range": 1.0, "inferred_from_data": ["reward_range"]})
    ):
        path = save_hdf5(d.with_metadata(d.metadata.with_extra(**extra)), tmp_path / f"{i}.h5")
        out = tmp_path / f"run{i}"
        code, _, err = run([*argv, "--data", str(path), "--out", str(out)], capsys)
        if i == 0:
            assert code == 0, err
            params = json.loads((out / "privacy.json").read_text())["public_parameters"]
            (r,) = [p for p in params if p["name"] == "reward range R"]
            assert r["source"] == "public metadata" and r["value"] == 1.0
        else:
            assert_bad_input(code, err, "--reward-range", "inferred")


def box_dataset(m: int = 30, length: int = 6) -> TrajectoryDataset:
    """m episodes of `length` steps in a 2-D Box [-1, 1]², rewards in [-1, 0], γ = 0.9."""
    from gymnasium import spaces

    from privrl.data.dataset import DatasetMetadata

    rng = np.random.default_rng(0)
    return TrajectoryDataset(
        observations=rng.uniform(-1, 1, size=(m * (length + 1), 2)).astype(np.float32),
        actions=rng.integers(0, 2, size=m * length),
        rewards=-rng.uniform(0, 1, size=m * length),
        terminated=np.tile([False] * (length - 1) + [True], m),
        truncated=np.zeros(m * length, dtype=bool),
        episode_offsets=np.arange(m + 1) * length,
        metadata=DatasetMetadata(
            observation_space=spaces.Box(-1.0, 1.0, shape=(2,)),
            action_space=spaces.Discrete(2),
            discount=0.9,
        ),
    )


def test_continuous_states_aggregation_and_size_limits(tmp_path: Path, capsys) -> None:
    """DP-LSW on a continuous (Box) dataset runs on a state aggregation (marked approximate);
    an aggregation or a feature spec too large to fit is refused up front with the limit."""
    path = save_hdf5(box_dataset(), tmp_path / "box.h5")
    base = ["ope", "dp-lsw", "--data", str(path), "--epsilon", "1", "--reward-range", "1"]
    out = tmp_path / "ok"
    argv = [*base, "--reward-min", "-1", "--features", "fourier:2", "--aggregation", "3"]
    code, _, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["aggregation"] == 3 and config["reward_bounds"] == [-1.0, 0.0]
    assert np.load(out / "theta.npy").shape == (9,)
    assert any("APPROXIMATE" in n for n in json.loads((out / "privacy.json").read_text())["notes"])
    code, _, err = run(
        [*base, "--features", "fourier:2", "--aggregation", "100000", "--out", str(out)], capsys
    )
    assert_bad_input(code, err, "tabular states", "4,096")
    code, _, err = run([*base, "--features", "fourier:100000", "--out", str(out)], capsys)
    assert_bad_input(code, err, "features", "4,096")
