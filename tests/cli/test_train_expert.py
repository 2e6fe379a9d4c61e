"""`privrl train dp-sgd` and `privrl train expert-dp`: the run-directory contract, the privacy
report of the expert unit, the non-private twin, ledgers (checked before a single record is
read), public parameters (m, |A|, L never read off the data), uncertified modes (ε = ∞),
neighbouring datasets publishing the same parameters, and bad input (exit code 2 with one
`error:` line)."""

from __future__ import annotations

import importlib
import json
import math
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from privrl.cli.main import main
from privrl.data.collect import collect
from privrl.data.io import load_hdf5, save_hdf5
from privrl.privacy.ledger import BudgetLedger
from privrl.rl.cql import DiscreteCQL

torch.set_num_threads(1)

M = 16  # experts, 2 CartPole episodes each
FAST = [  # z = 5 and b/m = 1/2: a fast PLD; tiny network; short evaluations
    "--batch-size", "8", "--noise-multiplier", "5", "--hidden", "16,16", "--steps-cap", "40",
    "--eval-episodes", "2", "--eval-horizon", "20", "--evals", "3", "--eval-window", "30",
]  # fmt: skip
RUN_FILES = ("config.json", "metrics.json", "metrics.csv", "privacy.json", "learner.pt")


class _Heuristic:
    def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        a = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
        return np.where(rng.random(len(obs)) < 0.2, 1 - a, a)


def _cartpole_data(seed: int = 0, *, declare: bool = True):
    """M experts × 2 short CartPole episodes of a noisy heuristic, expert ids recorded; with
    ``declare`` the metadata declare m = M, as a data holder (or a recipe) does."""
    ds = collect(
        "CartPole-v1",
        _Heuristic(),
        n_episodes=2 * M,
        seed=seed,
        max_steps=25,
        progress=False,
        unit_ids=np.repeat(np.arange(M), 2),
        num_envs=4,
    )
    return ds.with_metadata(ds.metadata.with_extra(n_experts=M)) if declare else ds


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("expert_data")
    ds = _cartpole_data()
    ds = ds.with_metadata(
        ds.metadata.with_extra(reference_returns={"random": 10.0, "nonprivate": 25.0})
    )
    plain = ds.with_metadata(ds.metadata)
    # experts_dir in the metadata (relative to the dataset file), as the experts-* recipes write
    (root / "sub").mkdir()
    named = ds.with_metadata(ds.metadata.with_extra(experts_dir="../experts"))
    dangling = ds.with_metadata(ds.metadata.with_extra(experts_dir="nowhere"))
    no_units = type(ds)(**{**ds._fields(), "unit_ids": None}, metadata=ds.metadata)
    out = {
        "data": save_hdf5(ds, root / "cartpole.h5"),
        "ledgered": save_hdf5(plain, root / "ledgered.h5"),
        "no_units": save_hdf5(no_units, root / "no_units.h5"),
        "named": save_hdf5(named, root / "sub" / "named.h5"),
        "dangling": save_hdf5(dangling, root / "dangling.h5"),
    }
    for name, (a, d) in {"experts": (2, 4), "experts_a3": (3, 4), "experts_d5": (2, 5)}.items():
        (root / name).mkdir()
        (root / name / "spec.json").write_text(json.dumps({"m": M, "a": a, "d": d}))
        out[name] = root / name
    return out


class _Experts:
    def __init__(self, m: int, a: int, d: int) -> None:
        self.n_experts, self.n_actions, self.obs_dim = m, a, d

    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        a = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
        return np.tile(a, (self.n_experts, 1))


def _fake_load_experts(path: str | Path) -> _Experts:
    spec = json.loads((Path(path) / "spec.json").read_text())
    return _Experts(spec["m"], spec["a"], spec["d"])


@pytest.fixture
def fake_experts(monkeypatch: pytest.MonkeyPatch) -> None:
    """`privrl.expert.experts.load_experts` reading our spec files (the real loader's format
    is not needed to test the CLI)."""
    try:
        module = importlib.import_module("privrl.expert.experts")
        monkeypatch.setattr(module, "load_experts", _fake_load_experts)
    except ImportError:
        module = types.ModuleType("privrl.expert.experts")
        module.load_experts = _fake_load_experts  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "privrl.expert.experts", module)


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
    assert (out / "plots" / "learning_curve.png").is_file()
    privacy = json.loads((out / "privacy.json").read_text())
    for key in ("unit", "relation", "epsilon", "delta", "accountant", "releases"):
        assert key in privacy, key
    assert privacy["unit"] == "expert" and privacy["relation"] == "add_remove"
    return json.loads((out / "metrics.json").read_text()), privacy


def test_dp_sgd_run_directory(files, tmp_path, capsys) -> None:
    out = tmp_path / "dp"
    argv = ["train", "dp-sgd", "--data", str(files["data"]), "--epsilon", "1", "--out", str(out)]
    code, stdout, err = run([*argv, *FAST], capsys)
    assert code == 0, err
    metrics, privacy = assert_run_dir(out)
    assert privacy["delta"] == pytest.approx(1 / M)  # default δ = 1/m
    assert privacy["epsilon"] <= 1.0 and privacy["backend"] == "pld"
    (release,) = privacy["releases"]
    assert release["count"] == metrics["steps"] == metrics["private_steps"] > 0
    assert release["extra"]["sampling_probability"] == pytest.approx(8 / M)
    for key in ("return_mean", "return_std", "normalised_score", "stable_size"):
        assert key in metrics, key
    assert metrics["normalised_score"] == pytest.approx((metrics["return_mean"] - 10) / 15)
    curve = (out / "metrics.csv").read_text().splitlines()
    assert curve[0].startswith("step,private_steps,return_mean") and len(curve) == 4
    state = torch.load(out / "learner.pt")
    learner = DiscreteCQL(4, 2, hidden=(16, 16))
    learner.load_state_dict(state)
    assert learner.act(np.zeros((1, 4))).shape == (1,)
    assert "expert" in stdout


def test_dp_sgd_non_private_twin(files, tmp_path, capsys) -> None:
    out = tmp_path / "np"
    argv = ["train", "dp-sgd", "--data", str(files["data"]), "--non-private", "--algo", "bcq"]
    code, _, err = run([*argv, "--steps", "12", "--out", str(out), *FAST], capsys)
    assert code == 0, err
    metrics, privacy = assert_run_dir(out)
    assert privacy["private"] is False and privacy["epsilon"] == "inf"
    assert metrics["steps"] == 12 and metrics["private_steps"] == 0


def test_expert_dp_without_filter(files, tmp_path, capsys, fake_experts) -> None:
    out = tmp_path / "edp"
    argv = ["train", "expert-dp", "--data", str(files["data"]), "--experts", str(files["experts"])]
    argv += ["--epsilon", "1", "--p", "1", "--filter-rounds", "0", "--out", str(out)]
    code, _, err = run([*argv, *FAST], capsys)
    assert code == 0, err
    metrics, privacy = assert_run_dir(out)
    assert [r["mechanism"] for r in privacy["releases"]] == ["poisson_subsampled_gaussian"]
    assert metrics["stable_size"] == 0 and metrics["epsilon1"] == 0.0
    assert privacy["epsilon"] <= 1.0
    config = json.loads((out / "config.json").read_text())
    assert config["split"]["epsilon2"] == 1.0 and config["n_experts"] == M


def test_expert_dp_with_filter(files, tmp_path, capsys, fake_experts) -> None:
    out = tmp_path / "filtered"
    argv = ["train", "expert-dp", "--data", str(files["data"]), "--experts", str(files["experts"])]
    argv += ["--epsilon", "10", "--p", "0.5", "--filter-rounds", "3", "--out", str(out)]
    code, _, err = run([*argv, *FAST], capsys)
    assert code == 0, err
    metrics, privacy = assert_run_dir(out)
    mechanisms = [r["mechanism"] for r in privacy["releases"]]
    assert mechanisms == ["consensus_filter_svt", "poisson_subsampled_gaussian"]
    assert privacy["epsilon"] <= 10.0 and privacy["delta"] == pytest.approx(1 / M)
    assert metrics["epsilon1"] == 7.5 and metrics["stable_size"] >= 0


def test_ledger_checked_and_recorded(files, tmp_path, capsys) -> None:
    data = files["ledgered"]
    ledger = BudgetLedger.init(
        data,
        epsilon=5.0,
        delta=0.1,
        unit="expert",
        relation="add_remove",
        backend="pld",
        overwrite=True,
    )
    base = ["train", "dp-sgd", "--data", str(data), "--epsilon", "1", *FAST]
    out = tmp_path / "b"
    code, _, err = run([*base, "--delta", "0.01", "--out", str(out)], capsys)
    assert code == 0, err
    # the recorded spend is the run's own report, as privacy.json states it
    (entry,) = ledger.entries
    recorded, written = entry.privacy_report(), json.loads((out / "privacy.json").read_text())
    assert recorded.epsilon == pytest.approx(written["epsilon"]) and recorded.private
    assert {p["name"] for p in written["public_parameters"]} >= {"number of experts m", "δ"}
    twin = ["train", "dp-sgd", "--data", str(data), "--non-private", "--steps", "3", *FAST]
    code, _, err = run([*twin, "--out", str(tmp_path / "c")], capsys)
    assert_bad_input(code, err, "not differentially private")


def test_bad_input(files, tmp_path, capsys, fake_experts) -> None:
    out = str(tmp_path / "bad")
    dp = ["train", "dp-sgd", "--out", out, *FAST]
    code, _, err = run([*dp, "--data", str(files["no_units"]), "--epsilon", "1"], capsys)
    assert_bad_input(code, err, "expert ids")
    code, _, err = run([*dp, "--data", str(files["data"])], capsys)
    assert_bad_input(code, err, "--epsilon")
    code, _, err = run([*dp, "--data", str(files["data"]), "--epsilon", "1", "--algo", "x"], capsys)
    assert_bad_input(code, err, "--algo")
    code, _, err = run([*dp, "--data", str(files["data"]), "--epsilon", "1", "-b", "40"], capsys)
    assert_bad_input(code, err, "exceeds the number of experts")

    def edp(experts: str, *extra: str) -> tuple[int, str, str]:
        argv = ["train", "expert-dp", "--data", str(files["data"]), "--experts", experts]
        return run([*argv, "--epsilon", "10", "--out", out, *FAST, *extra], capsys)

    code, _, err = edp(str(files["experts_a3"]), "--p", "1", "--filter-rounds", "0")
    assert_bad_input(code, err, "3 actions", "2")
    code, _, err = edp(str(files["experts_d5"]), "--p", "1", "--filter-rounds", "0")
    assert_bad_input(code, err, "dimension 5")
    code, _, err = edp(str(files["experts"]), "--eps1-fraction", "0.6", "--eps2-fraction", "0.3")
    assert_bad_input(code, err, "does not add up")
    code, _, err = edp(str(files["experts"]), "--p", "1.5")
    assert_bad_input(code, err, "--p must be in [0, 1]")
    code, _, err = edp(str(files["experts"]), "--p", "-0.5")
    assert_bad_input(code, err, "--p must be in [0, 1]")
    code, _, err = edp(str(tmp_path / "missing"), "--p", "1")
    assert_bad_input(code, err, "--experts")
    code, _, err = edp(str(files["experts"]), "--p", "0", "--filter-rounds", "0")
    assert_bad_input(code, err, "nothing could be learned")
    code, _, err = edp(str(files["experts"]), "--accounting", "loose")
    assert_bad_input(code, err, "--accounting")


def test_expert_dp_with_saved_expert_set(files, tmp_path, capsys) -> None:
    """The real loader (`privrl.expert.experts`): a saved CartPole LQR expert set."""
    experts_mod = pytest.importorskip("privrl.expert.experts")
    rng = np.random.default_rng(0)
    experts = experts_mod.CartPoleLQRExperts({"K": rng.normal(size=(M, 4))})
    directory = experts_mod.save_experts(experts, tmp_path / "lqr")
    out = tmp_path / "real"
    argv = ["train", "expert-dp", "--data", str(files["data"]), "--experts", str(directory)]
    argv += ["--epsilon", "10", "--p", "0.5", "--filter-rounds", "2", "--out", str(out)]
    code, _, err = run([*argv, *FAST], capsys)
    assert code == 0, err
    metrics, privacy = assert_run_dir(out)
    assert len(privacy["releases"]) == 2 and metrics["steps"] > metrics["private_steps"]


def test_expert_dp_experts_default_to_the_dataset_metadata(
    files, tmp_path, capsys, fake_experts
) -> None:
    out = tmp_path / "named"
    argv = ["train", "expert-dp", "--data", str(files["named"]), "--epsilon", "10"]
    argv += ["--p", "0.5", "--filter-rounds", "2", "--out", str(out)]
    code, _, err = run([*argv, *FAST], capsys)
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    # resolved relative to the dataset file (sub/../experts)
    assert Path(config["experts"]).resolve() == files["experts"].resolve()
    assert config["n_experts"] == M
    # neither --experts nor extra["experts_dir"]: the error names the fix
    bad = ["train", "expert-dp", "--epsilon", "10", "--out", str(tmp_path / "x"), *FAST]
    code, _, err = run([*bad, "--data", str(files["data"])], capsys)
    assert_bad_input(code, err, "--experts is required", "experts_dir")
    code, _, err = run([*bad, "--data", str(files["dangling"])], capsys)
    assert_bad_input(code, err, "--experts", "nowhere", "does not exist")
    code, _, err = run([*bad, "--data", str(tmp_path / "missing.h5")], capsys)
    assert_bad_input(code, err, "--data", "not found")
    # an explicit --experts still wins over the metadata
    code, _, err = run(
        [*bad, "--data", str(files["named"]), "--experts", str(files["experts_a3"])], capsys
    )
    assert_bad_input(code, err, "3 actions")


def test_expert_dp_filter_calibration(files, tmp_path, capsys, fake_experts) -> None:
    argv = ["train", "expert-dp", "--data", str(files["data"]), "--experts", str(files["experts"])]
    argv += ["--epsilon", "10", "--p", "0.5", "--filter-rounds", "3", *FAST]
    calibrations = {}
    for mode in ("paper", "tight", "pld"):
        out = tmp_path / mode
        code, _, err = run([*argv, "--filter-calibration", mode, "--out", str(out)], capsys)
        assert code == 0, err
        metrics, privacy = assert_run_dir(out)
        assert metrics["filter_calibration"] == mode
        assert json.loads((out / "config.json").read_text())["filter_calibration"] == mode
        (svt,) = [r for r in privacy["releases"] if r["mechanism"] == "consensus_filter_svt"]
        cal = svt["extra"]["calibration"]
        assert cal["calibration"] == mode and cal["composition_epsilon"] <= 7.5
        assert privacy["epsilon"] <= 10.0
        calibrations[mode] = cal
    # tight spends all of the filter's ε1 = 7.5 under the exact bound; paper (δ1 = 0.9/16,
    # T = 3) leaves 0.7 of it unused
    assert calibrations["tight"]["composition_epsilon"] == pytest.approx(7.5)
    assert calibrations["paper"]["composition_epsilon"] < 7.0
    assert calibrations["tight"]["theta_shifted"] < calibrations["paper"]["theta_shifted"]
    # pld spends ε1 under the PLD composition: a larger ε' still, a lower threshold
    assert calibrations["pld"]["composition_epsilon"] == pytest.approx(7.5, rel=2e-3)
    assert calibrations["pld"]["epsilon_prime"] > calibrations["tight"]["epsilon_prime"]
    assert calibrations["pld"]["theta_shifted"] < calibrations["tight"]["theta_shifted"]
    code, _, err = run([*argv, "--filter-calibration", "loose", "--out", str(tmp_path)], capsys)
    assert_bad_input(code, err, "--filter-calibration")


@pytest.mark.slow  # ~14 s; tests/expert/test_selective.py checks the joint budget by default
def test_expert_dp_joint_dp_sgd_budget(files, tmp_path, capsys, fake_experts) -> None:
    argv = ["train", "expert-dp", "--data", str(files["data"]), "--experts", str(files["experts"])]
    argv += ["--epsilon", "10", "--p", "0.5", "--filter-rounds", "3", *FAST]
    argv += ["--filter-calibration", "pld", "--steps-cap", "1000"]  # the budget sets the steps
    private_steps, epsilons = {}, {}
    for budget in ("split", "joint"):
        out = tmp_path / budget
        code, _, err = run([*argv, "--dp-sgd-budget", budget, "--out", str(out)], capsys)
        assert code == 0, err
        metrics, privacy = assert_run_dir(out)
        assert metrics["dp_sgd_budget"] == budget
        assert json.loads((out / "config.json").read_text())["dp_sgd_budget"] == budget
        assert privacy["epsilon"] <= 10.0 + 1e-9
        private_steps[budget] = metrics["private_steps"]
        epsilons[budget] = privacy["epsilon"]
    assert private_steps["split"] < private_steps["joint"]
    assert epsilons["split"] < epsilons["joint"]
    code, _, err = run([*argv, "--dp-sgd-budget", "both", "--out", str(tmp_path / "x")], capsys)
    assert_bad_input(code, err, "--dp-sgd-budget")


@pytest.fixture(scope="module")
def twin(files, tmp_path_factory) -> Path:
    """A non-private CQL twin of `files["data"]`, the reference of the normalised score."""
    out = tmp_path_factory.mktemp("twin") / "np"
    argv = ["train", "dp-sgd", "--data", str(files["data"]), "--non-private", "--steps", "12"]
    assert main([*argv, "--out", str(out), *FAST]) == 0
    return out


def test_reference_run_sets_the_normalised_score(files, twin, tmp_path, capsys) -> None:
    """R_np from the twin's metrics.json, R_rand from the dataset's metadata (10); the
    metadata's own R_np (25) is overridden."""
    r_np = json.loads((twin / "metrics.json").read_text())["return_mean"]
    out = tmp_path / "dp"
    argv = ["train", "dp-sgd", "--data", str(files["data"]), "--epsilon", "1"]
    code, stdout, err = run([*argv, "--reference", str(twin), "--out", str(out), *FAST], capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    expected = (metrics["return_mean"] - 10.0) / (r_np - 10.0)
    assert metrics["normalised_score"] == pytest.approx(expected)
    refs = metrics["reference_returns"]
    assert refs["nonprivate"] == r_np and refs["random"] == 10.0 and refs["eval_horizon"] == 20
    assert refs["source"] == str(twin) and "normalised score" in stdout
    assert json.loads((out / "config.json").read_text())["reference"] == str(twin)
    # the twin was trained on the same private data without a mechanism: its R_np, and the
    # score, are labelled evaluation-only, outside the guarantee (metrics.json and the report)
    assert metrics["reference_return_outside_guarantee"] is True
    notes = json.loads((out / "privacy.json").read_text())["notes"]
    assert any("NOT covered by this guarantee" in n and "--reference" in n for n in notes)
    assert "outside the guarantee" in stdout


def test_reference_return_and_random_return_given_as_numbers(
    files, tmp_path, capsys, fake_experts
) -> None:
    out = tmp_path / "edp"
    argv = ["train", "expert-dp", "--data", str(files["data"]), "--experts", str(files["experts"])]
    argv += ["--epsilon", "1", "--p", "1", "--filter-rounds", "0", "--out", str(out)]
    extra = ["--reference-return", "30", "--random-return", "5"]
    code, _, err = run([*argv, *extra, *FAST], capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["normalised_score"] == pytest.approx((metrics["return_mean"] - 5) / 25)
    assert metrics["reference_returns"]["source"] == "reference_return"
    # a number given on the command line is public input, not a twin on this data
    assert metrics["reference_return_outside_guarantee"] is False
    notes = json.loads((out / "privacy.json").read_text())["notes"]
    assert not any("NOT covered by this guarantee" in n for n in notes)


def test_no_reference_anywhere_gives_no_score(tmp_path, capsys) -> None:
    data = save_hdf5(_cartpole_data(seed=1), tmp_path / "plain.h5")
    out = tmp_path / "dp"
    argv = ["train", "dp-sgd", "--data", str(data), "--epsilon", "1", "--out", str(out)]
    code, _, err = run([*argv, *FAST], capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert "return_mean" in metrics and "normalised_score" not in metrics
    # asked for explicitly, a score that cannot be computed is refused before training
    code, _, err = run([*argv, "--reference-return", "30", *FAST], capsys)
    assert_bad_input(code, err, "--random-return")


def test_bad_reference(files, twin, tmp_path, capsys) -> None:
    out = str(tmp_path / "bad")
    base = ["train", "dp-sgd", "--data", str(files["data"]), "--epsilon", "1", "--out", out]

    def bad(*extra: str, fast: list[str] = FAST) -> str:
        code, _, err = run([*base, *fast, *extra], capsys)
        assert code == 2, err
        assert not (tmp_path / "bad").exists()  # refused before training
        return err

    assert_bad_input(2, bad("--reference", str(tmp_path / "none")), "not a readable run")
    assert_bad_input(2, bad("--reference", str(twin), "--algo", "bcq"), "--algo cql")
    assert_bad_input(2, bad("--reference", str(twin), "--reference-return", "3"), "not both")
    horizon = [*FAST[:-6], "--eval-horizon", "15", *FAST[-4:]]
    assert_bad_input(2, bad("--reference", str(twin), fast=horizon), "over 20 steps")
    assert_bad_input(2, bad("--reference", str(twin), "--no-eval"), "drop --no-eval")
    assert_bad_input(2, bad("--reference-return", "10"), "undefined")
    assert_bad_input(2, bad("--reference-return", "nan"), "finite")
    plain = tmp_path / "plain.h5"
    ds = load_hdf5(files["data"])
    save_hdf5(ds.with_metadata(ds.metadata.with_extra(reference_returns={})), plain)
    code, _, err = run([*base[:3], str(plain), *base[4:], *FAST, "--random-return", "1"], capsys)
    assert_bad_input(code, err, "needs R_np")
    other = ["train", "dp-sgd", "--data", str(files["named"]), "--epsilon", "1", *FAST]
    code, _, err = run([*other, "--reference", str(twin), "--out", out], capsys)
    assert_bad_input(code, err, "trained on")
    private = tmp_path / "private"
    assert main([*base[:-1], str(private), *FAST]) == 0
    capsys.readouterr()
    assert_bad_input(2, bad("--reference", str(private)), "not a non-private twin")


# ---------------------------------------------------------------------------------------------
# the ledger before the data; uncertified modes; public parameters; neighbours; bad values
# ---------------------------------------------------------------------------------------------


def _unreadable_copy(src: Path, dst: Path, ledger: Any = None) -> tuple[Path, Any]:
    """A copy of a dataset file with a ledger (`ledger(path)` makes it, while the file is
    whole: a ledger is bound to the episodes' content), then made unreadable (``observations``
    deleted; the root attributes — metadata, sizes, content fingerprint — intact): any
    command that reads the records fails on it with a data error."""
    import shutil

    import h5py

    shutil.copyfile(src, dst)
    made = ledger(dst) if ledger is not None else None
    with h5py.File(dst, "r+") as f:
        del f["observations"]
    with pytest.raises(Exception, match="observations"):
        load_hdf5(dst)
    return dst, made


def _spent_ledger(path: Path) -> BudgetLedger:
    """A ledger on `path` whose whole budget is already recorded (one Laplace release)."""
    from dp_accounting import dp_event

    from privrl.privacy.accounting import epsilon
    from privrl.privacy.release import Release
    from privrl.privacy.report import PrivacyReport

    event = dp_event.LaplaceDpEvent(noise_multiplier=1.0)
    total = epsilon(event, 0.1, backend="pld")  # the ledger's ε_total: exactly this release
    ledger = BudgetLedger.init(
        path, epsilon=total, delta=0.1, unit="expert", relation="add_remove", backend="pld"
    )
    spend = Release(
        name="an earlier release",
        mechanism="laplace",
        sensitivity=1.0,
        norm="l1",
        noise={"scale": 1.0},
        event=event,
    )
    ledger.record(
        PrivacyReport.build("expert", "add_remove", [spend], 0.1, backend="pld", system="test")
    )
    assert ledger.remaining() <= 1e-9
    return ledger


def _edp(data: Path, experts: Path, out: Path, *extra: str) -> list[str]:
    argv = ["train", "expert-dp", "--data", str(data), "--experts", str(experts)]
    return [*argv, "--epsilon", "10", "--p", "0.5", "--filter-rounds", "2", "--out", str(out),
            *FAST, *extra]  # fmt: skip


def _dp(data: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "dp-sgd", "--data", str(data), "--epsilon", "1", "--out", str(out),
            *FAST, *extra]  # fmt: skip


def test_ledger_refuses_before_any_record_is_read(files, tmp_path, capsys, fake_experts) -> None:
    """Property: a private command reads only the dataset's header before the ledger check.
    On a file whose episode arrays are unreadable, a spent ledger gives the ledger's refusal
    (not a data error), and nothing is written to --out."""
    data, _ = _unreadable_copy(files["data"], tmp_path / "spent.h5", _spent_ledger)
    for argv in (
        _dp(data, tmp_path / "dp"),
        _edp(data, files["experts"], tmp_path / "edp"),
    ):
        code, _, err = run(argv, capsys)
        assert_bad_input(code, err, "this run needs ε=", "ledger has ε=0")
        assert "observations" not in err
        out = Path(argv[argv.index("--out") + 1])
        assert not any(out.glob("*.json"))


@pytest.mark.parametrize("command", ["dp-sgd", "expert-dp"])
def test_ledger_of_another_unit_is_refused_at_once(
    command, files, tmp_path, capsys, fake_experts, monkeypatch
) -> None:
    """Property: the planned spend names the expert unit, so a ledger that accounts another
    unit refuses the run before any record is read, not after training: the episode arrays of
    the copy are unreadable (a read would fail naming them), and the system's loader of the
    private records is never called."""
    from privrl.runs import catalog, registry

    catalog.load()
    loads: list[object] = []

    def load(*args: object, **kwargs: object) -> None:
        loads.append(args)
        raise AssertionError("the private records were read before the ledger refused")

    monkeypatch.setattr(registry.get(command), "load", load)
    data, _ = _unreadable_copy(
        files["data"],
        tmp_path / "traj.h5",
        lambda p: BudgetLedger.init(
            p, epsilon=10.0, delta=0.5, unit="trajectory", relation="add_remove"
        ),
    )
    out = tmp_path / "r"
    argv = _dp(data, out) if command == "dp-sgd" else _edp(data, files["experts"], out)
    code, _, err = run(argv, capsys)
    assert_bad_input(code, err, "ledger accounts")
    assert "expert" in err and "observations" not in err
    assert loads == []


def test_uncertified_modes_are_refused_by_a_ledger_before_reading(
    files, tmp_path, capsys, fake_experts
) -> None:
    """Property: `dp-sgd --sampling shuffle` and `expert-dp --accounting paper` (0 < p < 1)
    are not certified, so their PLANNED report already says ε = ∞ and a ledger with ample
    budget refuses them before any record is read."""
    data, ledger = _unreadable_copy(
        files["data"],
        tmp_path / "ample.h5",
        lambda p: BudgetLedger.init(
            p, epsilon=100.0, delta=0.5, unit="expert", relation="add_remove", backend="pld"
        ),
    )
    for argv in (
        _dp(data, tmp_path / "shuffle", "--sampling", "shuffle"),
        _edp(data, files["experts"], tmp_path / "paper", "--accounting", "paper"),
    ):
        code, _, err = run(argv, capsys)
        assert_bad_input(code, err, "not differentially private (ε=∞)")
        assert "observations" not in err
    assert ledger.entries == ()


def test_uncertified_modes_report_infinite_epsilon(files, tmp_path, capsys, fake_experts) -> None:
    """Property: an uncertified run states ε = ∞ and private = false; the paper's ε appears
    only as the labelled comparison field epsilon_paper_accounting (and a note)."""
    paper = _edp(files["data"], files["experts"], tmp_path / "paper", "--accounting", "paper")
    shuffle = _dp(files["data"], tmp_path / "shuffle", "--sampling", "shuffle")
    for name, argv in (("shuffle", shuffle), ("paper", paper)):
        code, stdout, err = run(argv, capsys)
        assert code == 0, err
        out = tmp_path / name
        metrics, privacy = assert_run_dir(out)
        assert privacy["epsilon"] == "inf" and privacy["private"] is False
        assert metrics["epsilon"] == "inf" and metrics["private"] is False
        assert 0 < metrics["epsilon_paper_accounting"] < math.inf
        assert any("for comparison only" in n for n in privacy["notes"])
        assert any("NOT certified" in n for n in privacy["notes"])
        (uncertified,) = [r for r in privacy["releases"] if r["extra"].get("certified") is False]
        assert uncertified["event"] == {"type": "UnsupportedDpEvent"}
        assert "NOT differentially private" in stdout


def test_m_actions_and_max_len_must_be_public(files, tmp_path, capsys, fake_experts) -> None:
    """Property: m (sets q = b/m and δ = 1/m), |A| and the filter's L are never read off the
    data: without a public source the command refuses, naming the flag, before reading; with
    the flag the run lists the value with source "flag" in privacy.json."""
    ds = load_hdf5(files["data"])
    meta = ds.metadata
    bare_meta = meta.replace(
        horizon=None,
        extra={
            **{k: v for k, v in meta.extra.items() if k != "n_experts"},
            "inferred_from_data": ["action_space"],
        },
    )
    bare = save_hdf5(ds.with_metadata(bare_meta), tmp_path / "bare.h5")
    broken, _ = _unreadable_copy(bare, tmp_path / "bare_broken.h5")
    experts = files["experts"]
    code, _, err = run(_dp(broken, tmp_path / "a"), capsys)
    assert_bad_input(code, err, "--actions")
    code, _, err = run(_dp(broken, tmp_path / "a", "--actions", "2"), capsys)
    assert_bad_input(code, err, "--n-experts")
    code, _, err = run(_edp(broken, experts, tmp_path / "a", "--actions", "2"), capsys)
    assert_bad_input(code, err, "--n-experts")
    code, _, err = run(
        _edp(broken, experts, tmp_path / "a", "--actions", "2", "--n-experts", "16"), capsys
    )
    assert_bad_input(code, err, "maximum trajectory length L", "--max-len")
    # with the flags, the runs go through and say where each value came from
    out = tmp_path / "flags"
    flags = ["--actions", "2", "--n-experts", str(M), "--max-len", "10"]
    code, _, err = run(_edp(bare, experts, out, *flags), capsys)
    assert code == 0, err
    _, privacy = assert_run_dir(out)
    params = {p["name"]: p for p in privacy["public_parameters"]}
    for name, value in (
        ("number of experts m", M),
        ("number of actions |A|", 2),
        ("maximum trajectory length L", 10),
    ):
        assert params[name]["value"] == value and params[name]["source"] == "flag", name
    assert params["δ"]["source"] == "derived" and params["δ"]["value"] == pytest.approx(1 / M)
    (svt,) = [r for r in privacy["releases"] if r["mechanism"] == "consensus_filter_svt"]
    assert svt["extra"]["calibration"]["max_len"] == 10  # shorter than the 25-step episodes
    # declared in the metadata instead: source "public metadata"
    out = tmp_path / "declared"
    code, _, err = run(_edp(files["data"], experts, out), capsys)
    assert code == 0, err
    params = {
        p["name"]: p for p in json.loads((out / "privacy.json").read_text())["public_parameters"]
    }
    assert params["number of experts m"]["source"] == "public metadata"
    assert params["maximum trajectory length L"]["value"] == 25  # metadata.horizon


def _drop_expert(path: Path, dst: Path, expert: int) -> Path:
    """The add/remove neighbour of a dataset file: every trajectory of one expert removed."""
    ds = load_hdf5(path)
    keep = np.flatnonzero(ds.unit_ids != expert)
    return save_hdf5(ds.subset(keep), dst)


def _published(out: Path) -> dict:
    config = json.loads((out / "config.json").read_text())
    config.pop("data")
    config.pop("experts", None)
    privacy = json.loads((out / "privacy.json").read_text())
    privacy.pop("created")
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("stable_size", "released_trajectories", "released_transitions"):
        metrics.pop(key, None)  # the consensus filter's noisy output (post-processing)
    return {"config": config, "privacy": privacy, "metrics": metrics}


@pytest.mark.parametrize("command", ["dp-sgd", "expert-dp"])
def test_neighbours_publish_the_same_parameters(
    command, files, tmp_path, capsys, fake_experts
) -> None:
    """Property (add/remove one expert): on a dataset and on its neighbour without expert 0,
    everything published outside the noisy releases — config.json, privacy.json (ε, δ,
    releases, public parameters) and the step counts — is identical."""
    neighbour = _drop_expert(files["data"], tmp_path / "neighbour.h5", expert=0)
    (tmp_path / "experts15").mkdir()
    (tmp_path / "experts15" / "spec.json").write_text(json.dumps({"m": M - 1, "a": 2, "d": 4}))
    runs = {}
    for name, data, experts in (
        ("d", files["data"], files["experts"]),
        ("d_prime", neighbour, tmp_path / "experts15"),
    ):
        out = tmp_path / name
        argv = _dp(data, out) if command == "dp-sgd" else _edp(data, experts, out)
        code, _, err = run([*argv, "--no-eval"], capsys)
        assert code == 0, err
        runs[name] = _published(out)
    assert runs["d"] == runs["d_prime"]


def test_extreme_values_are_refused_up_front(files, tmp_path, capsys, fake_experts) -> None:
    """Values that used to raise MemoryError/OverflowError (or run for ever) are refused
    before anything is read, with the flag and its limit in one error line."""
    afile = tmp_path / "afile"
    afile.write_text("")
    cases = [
        (["--steps", str(10**12)], "--steps"),
        (["--steps-cap", str(10**12)], "--steps-cap"),
        (["-z", "1e-300"], "--noise-multiplier"),
        (["-z", "1e300"], "--noise-multiplier"),
        (["--clip-norm", "1e308"], "--clip-norm"),
        (["--lr", "1e300"], "--lr"),
        (["--hidden", "100000000,1"], "--hidden"),
        (["--seed", "-1"], "--seed"),
        (["--eval-episodes", "0"], "--eval-episodes"),
        (["--eval-horizon", str(10**12)], "--eval-horizon"),
        (["--n-experts", "0"], "--n-experts"),
        (["--actions", "1"], "--actions"),
        (["--delta", "1"], "--delta"),
    ]
    for extra, flag in cases:
        for argv in (
            _dp(files["data"], tmp_path / "x", *extra),
            _edp(files["data"], files["experts"], tmp_path / "x", *extra),
        ):
            code, _, err = run(argv, capsys)
            assert_bad_input(code, err, flag)
    for argv in (
        ["train", "dp-sgd", "--data", str(files["data"]), "--epsilon", "1e300", "--out", "x"],
        [*_edp(files["data"], files["experts"], tmp_path / "x")[:6], "--epsilon", "1e300"],
    ):
        code, _, err = run(argv, capsys)
        assert_bad_input(code, err, "--epsilon", "100")
    edp_only = [
        (["--filter-rounds", str(10**9)], "--filter-rounds"),
        (["--max-len", "0"], "--max-len"),
        (["--p-min", "0"], "--p-min"),
        (["--p-min", "0.6"], "--p-min"),
        (["--filter-below", "nan"], "--filter-below"),
    ]
    for extra, flag in edp_only:
        code, _, err = run(_edp(files["data"], files["experts"], tmp_path / "x", *extra), capsys)
        assert_bad_input(code, err, flag)
    # --out an existing file, or inside one: refused by the guard before the run
    for out in (afile, afile / "run"):
        for argv in (_dp(files["data"], out), _edp(files["data"], files["experts"], out)):
            code, _, err = run(argv, capsys)
            assert_bad_input(code, err, "--out")


def test_device_is_recorded_and_an_absent_gpu_is_a_clean_error(files, tmp_path, capsys) -> None:
    out = tmp_path / "dev"
    argv = ["train", "dp-sgd", "--data", str(files["data"]), "--epsilon", "1", *FAST]
    code, _, err = run([*argv, "--out", str(out), "--device", "cpu"], capsys)
    assert code == 0, err
    metrics, _ = assert_run_dir(out)
    assert metrics["device"] == "cpu"
    code, _, err = run([*argv, "--out", str(tmp_path / "bad"), "--device", "gpu"], capsys)
    assert_bad_input(code, err, "--device", "cpu, cuda, cuda:N or auto")
    if not torch.cuda.is_available():
        code, _, err = run([*argv, "--out", str(tmp_path / "none"), "--device", "cuda"], capsys)
        assert_bad_input(code, err, "--device", "needs a CUDA GPU")
