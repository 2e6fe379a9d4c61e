"""examples/cartpole_own_logs.py at a tiny size: a CartPole-v1 CSV with raw rewards → `privrl
data import --unit episode --units m` → `privrl train dp-sgd --non-private` and `--epsilon`
(no expert ids in the CSV: each episode is its own expert, m the declared count) → `privrl
eval` of both saved learners. Also: a dataset without unit ids or the per-episode declaration
is still refused by the private run with one `error:` line."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from privrl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--episodes", "12", "--steps", "10", "--private-steps", "3", "--batch-size", "4",
        "--hidden", "8", "--eval-episodes", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location(
        "cartpole_own_logs", ROOT / "examples" / "cartpole_own_logs.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["cartpole_own_logs"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("cartpole_own_logs", None)


@pytest.fixture(scope="module")
def walked(ex, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cartpole")
    assert ex.run(["--out", str(out), *TINY]) == 0
    return out


@pytest.mark.slow  # every command of the walkthrough: ~7 s of CPU, a minute on a busy machine
def test_the_walkthrough_runs_end_to_end(walked: Path) -> None:
    """Both learners are trained and evaluated; the private one spends a finite ε ≤ 5 in its
    3 private steps, with m from the declared --units (public metadata); the twin is labelled
    non-private."""
    private = json.loads((walked / "dp-sgd" / "privacy.json").read_text())
    assert 0 <= private["epsilon"] <= 5.0
    assert sum(r.get("count", 1) for r in private["releases"]) >= 1
    sources = {p["name"]: p["source"] for p in private["public_parameters"]}
    assert sources["number of experts m"] == "public metadata"
    twin = json.loads((walked / "dp-sgd-non-private" / "privacy.json").read_text())
    assert twin["private"] is False and float(twin["epsilon"]) == float("inf")
    for run in ("eval-private", "eval-non-private"):
        metrics = json.loads((walked / run / "metrics.json").read_text())
        assert metrics["episodes"] == 2 and 1 <= metrics["return_mean"] <= 500
        assert metrics["policy_kind"] == "cql"
    # evaluation is post-processing: each carries its learner's own guarantee over
    evaluated = json.loads((walked / "eval-private" / "privacy.json").read_text())
    assert evaluated["epsilon"] == private["epsilon"] and evaluated["certified"] is True
    evaluated = json.loads((walked / "eval-non-private" / "privacy.json").read_text())
    assert evaluated["epsilon"] == "inf" and evaluated["certified"] is False


@pytest.fixture(scope="module")
def logs(ex, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("logs") / "logs.csv"
    ex.write_logs(path, 12, 0.3, seed=0)
    return path


def test_the_csv_has_raw_rewards_and_gymnasium_ends(logs: Path) -> None:
    rows = logs.read_text().splitlines()[1:]
    fields = [r.split(",") for r in rows]
    assert {f[7] for f in fields} == {"1"}  # raw CartPole reward, no transform
    ends = [f for f in fields if f[-2] == "True" or f[-1] == "True"]
    assert len(ends) == 12  # one end per episode


def test_a_private_run_without_units_is_refused(ex, logs: Path, tmp_path: Path, capsys) -> None:
    """Imported without --unit, the private run has no expert of each episode: one `error:`
    line naming --unit, exit 2, no run directory."""
    data = tmp_path / "plain.h5"
    argv = ["data", "import", str(logs), "--out", str(data), "--columns",
            ex.COLUMNS, "--observation-space", "box:-4.8:4.8:4", "--action-space", "discrete:2",
            "--env-id", "CartPole-v1"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    argv = ["train", "dp-sgd", "--data", str(data), "--n-experts", "12", "--epsilon", "5",
            "--steps", "2", "--batch-size", "4", "--hidden", "8", "--no-eval",
            "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "--unit episode" in lines[0]
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_unit_episode_makes_each_episode_an_expert(ex, logs: Path, tmp_path: Path, capsys) -> None:
    """`--unit episode --units 12` at import: the private dp-sgd run needs no expert ids in
    the CSV (each episode is its own expert) and takes m = 12 from the declared count."""
    data = tmp_path / "units.h5"
    argv = ["data", "import", str(logs), "--out", str(data), "--columns", ex.COLUMNS,
            "--observation-space", "box:-4.8:4.8:4", "--action-space", "discrete:2",
            "--env-id", "CartPole-v1", "--unit", "episode", "--units", "12"]  # fmt: skip
    assert main(argv) == 0
    out = tmp_path / "run"
    argv = ["train", "dp-sgd", "--data", str(data), "--epsilon", "5", "--steps", "1",
            "--batch-size", "4", "--hidden", "8", "--no-eval", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    privacy = json.loads((out / "privacy.json").read_text())
    given = {p["name"]: p for p in privacy["public_parameters"]}
    assert given["number of experts m"]["value"] == 12
    assert given["number of experts m"]["source"] == "public metadata"


def test_a_row_with_both_flags_imports_as_terminated(ex, logs: Path, tmp_path: Path) -> None:
    """Gymnasium sets terminated and truncated together when CartPole-v1's pole falls at step
    500; such a row imports as terminated (not an error, which would depend on the data)."""
    from privrl.data.io import load_hdf5

    rows = logs.read_text().splitlines()
    last = rows[-1].split(",")
    last[-2], last[-1] = "True", "True"
    both = tmp_path / "both.csv"
    both.write_text("\n".join([*rows[:-1], ",".join(last)]) + "\n")
    data = tmp_path / "both.h5"
    argv = ["data", "import", str(both), "--out", str(data), "--columns", ex.COLUMNS,
            "--observation-space", "box:-4.8:4.8:4", "--action-space", "discrete:2"]  # fmt: skip
    assert main(argv) == 0
    d = load_hdf5(data)
    assert bool(d.terminated[-1]) and not bool(d.truncated[-1])
