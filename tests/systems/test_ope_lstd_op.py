"""`privrl ope lstd-op` on the run layer: the plan's report states the derived sensitivity and
the PLD-calibrated noise, an add/remove neighbour publishes the same files, and a missing
public parameter is one `error:` line naming its flag."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import main
from privrl.data.io import save_hdf5
from privrl.envs.chain import ChainMDP
from privrl.ope.lstd_op import LstdOpConfig

M = 60
ARGV = ["ope", "lstd-op", "--epsilon", "1", "--ridge", "0.5"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def read(out: Path, name: str, data: Path | None = None) -> dict:
    text = (out / name).read_text()
    if data is not None:
        text = text.replace(str(data), "DATA")
    doc = json.loads(text)
    doc.pop("created", None)
    return doc


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("data")
    d = ChainMDP().sample(M, seed=0)
    return {
        "d": save_hdf5(d, root / "d.h5"),
        "d2": save_hdf5(d.subset(np.arange(M - 1)), root / "d2.h5"),
    }


def test_report_lists_the_public_sensitivity_and_meets_epsilon(tmp_path: Path, capsys) -> None:
    """Privacy (accounting): one Gaussian release with sensitivity Δ₂ = eq. (4) for the
    chain's public bounds (Φ̄ = R̄ = 1, γ = 0.99, m̄ = --trajectories, λ = --ridge), its ε
    from the PLD accountant within 1% of the target, every input listed with its source."""
    out = tmp_path / "a"
    code, err = run([*ARGV, "--env", "chain", "--trajectories", str(M), "--out", str(out)], capsys)
    assert code == 0, err
    report = read(out, "privacy.json")
    (release,) = report["releases"]
    want = LstdOpConfig(
        feature_bound=1.0, reward_bound=1.0, gamma=0.99, ridge=0.5, public_m=M
    ).sensitivity()
    assert release["sensitivity"] == pytest.approx(want)
    assert report["relation"] == "add_remove"
    assert report["epsilon"] == pytest.approx(1.0, rel=0.01) and report["epsilon"] <= 1.0 + 1e-9
    params = {p["name"]: p for p in report["public_parameters"]}
    assert params["LSTD-OP sensitivity Δ₂"]["source"] == "derived"
    assert params["ridge λ"]["source"] == "flag"
    assert "mspbe" in read(out, "metrics.json")


def test_an_add_remove_neighbour_publishes_the_same_files(files, tmp_path: Path, capsys):
    """Property (DESIGN.md, "Public parameters"): on D and D′ = D minus one trajectory,
    config.json and privacy.json are identical (m̄ declared, never the header's count), and
    metrics.json differs only in the released estimate's value and interval."""
    argv = [*ARGV, "--features", "onehot", "--declared-trajectories", str(M), "--seed", "3"]
    argv += ["--reward-bound", "1"]
    argv += ["--start-states", "uniform"]
    results = []
    for key in ("d", "d2"):
        out = tmp_path / key
        code, err = run([*argv, "--data", str(files[key]), "--out", str(out)], capsys)
        assert code == 0, err
        results.append([read(out, n, files[key]) for n in ("config.json", "privacy.json")])
        results[-1].append(read(out, "metrics.json"))
    (c1, p1, m1), (c2, p2, m2) = results
    assert c1 == c2 and p1 == p2
    moving = {"value", "value_ci_low", "value_ci_high"}
    assert {k: v for k, v in m1.items() if k not in moving} == {
        k: v for k, v in m2.items() if k not in moving
    }
    assert m1["value"] != m2["value"]


@pytest.mark.parametrize(
    "extra,flag",
    [(["--reward-bound", "1"], "--declared-trajectories"), ([], "--reward-bound")],
)
def test_a_missing_public_bound_is_one_error_line(files, tmp_path: Path, capsys, extra, flag):
    # with --data neither the count m̄ nor the reward bound R̄ may come from the episodes
    argv = [*ARGV, "--features", "onehot", "--data", str(files["d"]), *extra]
    code, err = run([*argv, "--out", str(tmp_path / "x")], capsys)
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert flag in lines[0]


def test_off_policy_is_refused(tmp_path: Path, capsys) -> None:
    argv = [*ARGV, "--env", "chain", "--target-policy", "uniform", "--out", str(tmp_path / "y")]
    code, err = run(argv, capsys)
    assert code == 2 and err.strip().startswith("error:") and "on-policy" in err


def test_the_plan_needs_only_the_header_and_a_ledger_is_checked_first(tmp_path: Path, capsys):
    """Structural rule: the report comes from the header and flags; a spent add/remove ledger
    refuses the run before the episode arrays are read (they are deleted here, so reading them
    would fail differently), and a replace-one ledger is refused naming the relation."""
    import h5py

    from privrl.privacy.ledger import BudgetLedger

    base = [*ARGV, "--features", "onehot", "--declared-trajectories", str(M)]
    base += ["--reward-bound", "1"]
    for relation, needle in (("add_remove", "budget"), ("replace_one", "--relation add_remove")):
        seed = 1 if relation == "add_remove" else 2  # a ledger belongs to the content
        path = save_hdf5(ChainMDP().sample(M, seed=seed), tmp_path / f"{relation}.h5")
        BudgetLedger.init(path, epsilon=0.01, delta=1e-3, unit="trajectory", relation=relation)
        with h5py.File(path, "r+") as f:
            del f["observations"]
        out = tmp_path / f"o-{relation}"
        code, err = run([*base, "--data", str(path), "--out", str(out)], capsys)
        lines = [x for x in err.splitlines() if x.strip()]
        assert code == 2 and len(lines) == 1 and needle in lines[0], err
        assert not (out / "config.json").exists()
