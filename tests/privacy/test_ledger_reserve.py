"""What a run reserves on a dataset's ledger: the ε of the steps it will take, not the ε it was
given as a ceiling (`privrl train dp-sgd --steps N --epsilon E` spends ε(N) ≤ E; a dp-sgd run
stopped by `--steps-cap` spends the ε of the capped count; `expert-dp` spends the filter's
rounds composed with its private steps, exactly at p ∈ {0, 1} and at most the reserved upper
bound at 0 < p < 1), and the non-private twin of dp-sgd needs no expert ids (it trains on all
transitions)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from privrl.cli.main import main
from privrl.data.collect import collect
from privrl.data.io import save_hdf5
from privrl.privacy.ledger import BudgetLedger

torch.set_num_threads(1)
M = 8
FAST = [  # z = 3, b/m = 1/2, δ = 1e-5: fast PLD calls; tiny network and evaluations
    "--batch-size", "4", "--noise-multiplier", "3", "--delta", "1e-5", "--hidden", "8,8",
    "--steps-cap", "10",
    "--eval-episodes", "1", "--eval-horizon", "5", "--evals", "1", "--eval-window", "5",
]  # fmt: skip


class _Heuristic:
    def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return (obs[:, 2] > 0).astype(np.int64)


def _data(units: bool) -> object:
    ds = collect(
        "CartPole-v1",
        _Heuristic(),
        n_episodes=M,
        seed=0,
        max_steps=10,
        progress=False,
        unit_ids=np.arange(M) if units else None,
        num_envs=2,
    )
    return ds.with_metadata(ds.metadata.with_extra(n_experts=M))


def _dp(data: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "dp-sgd", "--data", str(data), "--out", str(out), *FAST, *extra]


def test_dp_sgd_with_steps_reserves_the_spend_of_those_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Property: with --steps N, the ledger checks ε(N), so a ledger whose budget covers ε(N)
    but not the --epsilon ceiling admits the run, and it records exactly ε(N)."""
    data = save_hdf5(_data(units=True), tmp_path / "d.h5")
    # ε of 3 Poisson-sampled Gaussian steps at z = 3, q = 4/8, δ = 1e-5: below the ceiling 50
    from privrl.expert.dpsgd import build_report, dp_sgd_release

    release = dp_sgd_release(
        noise_multiplier=3, clip_norm=1, sampling_probability=0.5, steps=3, batch_size=4,
        n_units=M, n_params=1,
    )  # fmt: skip
    spend = build_report([release], 1e-5, system="reference").epsilon
    assert 0.5 < spend < 5
    ledger = BudgetLedger.init(
        data, epsilon=1.5 * spend, delta=1e-4, unit="expert", relation="add_remove", backend="pld"
    )
    out = tmp_path / "run"
    code = main(_dp(data, out, "--epsilon", "50", "--steps", "3"))
    err = capsys.readouterr().err
    assert code == 0, err  # before: refused, the ceiling ε = 50 was checked against ε_total = 1
    assert [e.report["epsilon"] for e in ledger.entries] == [pytest.approx(spend, rel=1e-9)]
    # without --steps the cap (10 steps) stops the run long before ε = 50: it needs ε(10),
    # more than the ledger has left
    capped = _spend(10)
    assert spend < capped < 50
    code = main(_dp(data, tmp_path / "ceiling", "--epsilon", "50"))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: The dataset's ledger refuses this run: ")
    needed = re.search(r"this run needs ε=([0-9.]+) at δ=0.0001", err)
    assert needed is not None and float(needed.group(1)) <= capped  # ε(10) at the ledger's δ


def _spend(steps: int) -> float:
    """ε of ``steps`` Poisson-sampled Gaussian steps at FAST's z = 3, q = 4/8, δ = 1e-5."""
    from privrl.expert.dpsgd import build_report, dp_sgd_release

    release = dp_sgd_release(
        noise_multiplier=3, clip_norm=1, sampling_probability=0.5, steps=steps, batch_size=4,
        n_units=M, n_params=1,
    )  # fmt: skip
    return float(build_report([release], 1e-5, system="reference").epsilon)


def test_dp_sgd_stopped_by_the_cap_reserves_the_capped_spend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Property: without --steps, a run that --steps-cap stops before its budget is spent
    reserves ε(cap), the ε it records, not the --epsilon ceiling: a ledger whose budget covers
    ε(cap) but not the ceiling admits it and records exactly ε(cap)."""
    data = save_hdf5(_data(units=True), tmp_path / "d.h5")
    capped = _spend(10)  # FAST's --steps-cap 10
    ledger = BudgetLedger.init(
        data, epsilon=1.01 * capped, delta=1e-4, unit="expert", relation="add_remove",
        backend="pld",
    )  # fmt: skip
    out = tmp_path / "run"
    code = main(_dp(data, out, "--epsilon", "50"))
    err = capsys.readouterr().err
    assert code == 0, err  # before: refused, ε = 50 was reserved against ε_total ≈ 2
    assert [e.report["epsilon"] for e in ledger.entries] == [pytest.approx(capped, rel=1e-9)]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["private_steps"] == 10 and metrics["epsilon"] == pytest.approx(capped)


def test_dp_sgd_steps_above_the_budget_refused_before_the_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = save_hdf5(_data(units=True), tmp_path / "d.h5")
    code = main(_dp(data, tmp_path / "r", "--epsilon", "0.5", "--steps", "5"))
    err = capsys.readouterr().err
    assert code == 2 and "5 private steps need ε =" in err and "> the budget ε = 0.5" in err
    assert not (tmp_path / "r" / "privacy.json").exists()


def test_non_private_dp_sgd_runs_without_expert_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = save_hdf5(_data(units=False), tmp_path / "plain.h5")
    out = tmp_path / "twin"
    code = main(_dp(data, out, "--non-private", "--steps", "3"))
    err = capsys.readouterr().err
    assert code == 0, err
    assert json.loads((out / "privacy.json").read_text())["private"] is False
    assert (out / "learner.pt").is_file()
    # the private variant still needs them (expert-level sampling), with one error line
    code = main(_dp(data, tmp_path / "p", "--epsilon", "10", "--steps", "1"))
    err = capsys.readouterr().err
    assert code == 2 and "no expert ids" in err and len(err.strip().splitlines()) == 1


def test_uncertified_run_refusal_is_one_sentence_with_the_budget(tmp_path: Path) -> None:
    """Message rule: a run whose report turns out uncertified (ε=∞) is refused after it ran,
    nothing published, with one sentence naming ε=∞, the ledger's budget and the fix; its
    reservation keeps counting (the data were read)."""
    from privrl.privacy.ledger import LedgerError
    from privrl.privacy.report import PrivacyReport
    from privrl.runs.rundir import RunDir, ledger_transaction

    data = save_hdf5(_data(units=True), tmp_path / "d.h5")
    ledger = BudgetLedger.init(data, epsilon=5, delta=1e-5, unit="expert", relation="add_remove")
    out = tmp_path / "run"
    planned = _planned(2.0)
    with pytest.raises(LedgerError) as info:
        with ledger_transaction(data, planned, out=out) as txn:
            run = RunDir(txn.staging)
            run.write_config({})
            run.write_metrics({})
            bad = PrivacyReport.non_private("expert", "add_remove", system="t")
            run.write_privacy(bad)
            txn.reports.append(bad)
    msg = str(info.value)
    assert msg.startswith("The dataset's ledger refuses this run: its guarantee could not be")
    assert msg.endswith(".") and ". " not in msg
    assert "(ε=∞)" in msg and "ε_total=5 at δ=1e-05" in msg and "rerun with a certified" in msg
    assert not out.exists()
    assert [e.status for e in ledger.entries] == ["reserved"]


def _planned(sigma: float) -> object:
    from dp_accounting import dp_event

    from privrl.privacy.release import Release
    from privrl.privacy.report import PrivacyReport

    event = dp_event.GaussianDpEvent(sigma)
    release = Release("x", "gaussian", 1.0, "l2", {"sigma": sigma}, event=event)
    return PrivacyReport.build("expert", "add_remove", [release], 1e-5, system="t")


# ---------------------------------------------------------------------------------------------
# expert-dp: the filter's rounds composed with the private steps it will take
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def expert_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """M CartPole experts (LQR gains) × 2 episodes of 10 steps, m declared in the metadata."""
    from privrl.expert.experts import CartPoleLQRExperts, save_experts

    root = tmp_path_factory.mktemp("reserve_expert_dp")
    experts = CartPoleLQRExperts({"K": np.random.default_rng(0).normal(size=(M, 4))})
    ds = collect(
        "CartPole-v1",
        _Heuristic(),
        n_episodes=2 * M,
        seed=0,
        max_steps=10,
        progress=False,
        unit_ids=np.repeat(np.arange(M), 2),
        num_envs=2,
    )
    ds = ds.with_metadata(ds.metadata.with_extra(n_experts=M))
    return {
        "data": save_hdf5(ds, root / "d.h5"),
        "experts": save_experts(experts, root / "experts"),
    }


EXPERT_DP = {  # FAST as settings, at the ceiling ε = 10 (the filter runs at ε >= 5)
    "epsilon": 10.0, "batch_size": 4, "noise_multiplier": 3.0, "delta": 1e-5, "hidden": (8, 8),
    "steps_cap": 10, "eval_episodes": 1, "eval_horizon": 5, "evals": 1, "eval_window": 5,
}  # fmt: skip


def _settings(files: dict[str, Path], **extra: object) -> dict[str, object]:
    return {**EXPERT_DP, "experts": files["experts"], **extra}


def _expert_dp(data: Path, out: Path, settings: dict[str, object]) -> list[str]:
    argv = ["train", "expert-dp", "--data", str(data), "--out", str(out)]
    for key, value in settings.items():
        text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
        argv += ["--" + key.replace("_", "-"), text]
    return argv


def _reserved(data: Path, settings: dict[str, object]) -> tuple[float, object]:
    """The ε expert-dp's plan reserves for these settings (from the header only), and the
    bound it records (private steps, exact or upper bound)."""
    from privrl.data.io import read_header
    from privrl.systems.expert import ExpertDp, ExpertDpConfig

    plan = ExpertDp().plan(ExpertDpConfig(**settings), read_header(data))  # type: ignore[arg-type]
    return float(plan.report.epsilon), plan.facts["bound"]


def _ledger(data: Path, tmp_path: Path, name: str, epsilon: float) -> tuple[Path, BudgetLedger]:
    """A fresh copy of ``data`` with a ledger of budget ``epsilon`` at the runs' δ = 1e-5."""
    import shutil

    copy = Path(shutil.copy(data, tmp_path / f"{name}.h5"))
    ledger = BudgetLedger.init(
        copy, epsilon=epsilon, delta=1e-5, unit="expert", relation="add_remove", backend="pld"
    )
    return copy, ledger


EXACT = {  # public cases: the run takes exactly the reserved private steps
    "p=1 --steps 3 (plain DP-SGD, 3 private steps)": {"p": 1.0, "steps": 3},
    "p=1 (largest K within ε at most the cap)": {"p": 1.0},
    "p=0 (the filter's 2 rounds only)": {"p": 0.0, "filter_rounds": 2},
}


@pytest.mark.parametrize("extra", list(EXACT.values()), ids=list(EXACT))
def test_expert_dp_reserves_exactly_what_it_records(
    extra: dict[str, object],
    expert_files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Property: when the number of private steps is public (p ∈ {0, 1}), the ledger reserves
    the ε the finished run records, far below the --epsilon ceiling; a ledger whose budget
    covers that ε but not the ceiling admits the run."""
    settings = _settings(expert_files, **extra)
    reserved, bound = _reserved(expert_files["data"], settings)
    assert bound.exact and reserved < 0.5 * EXPERT_DP["epsilon"]
    data, ledger = _ledger(expert_files["data"], tmp_path, "d", 1.01 * reserved)
    out = tmp_path / "run"
    code = main(_expert_dp(data, out, settings))
    err = capsys.readouterr().err
    assert code == 0, err  # before: refused, the ceiling ε = 10 was reserved
    assert [e.report["epsilon"] for e in ledger.entries] == [pytest.approx(reserved, rel=1e-9)]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["private_steps"] == bound.private_steps


def test_expert_dp_reserves_an_upper_bound_when_the_coins_decide(
    expert_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Property: at 0 < p < 1 the step coins (independent of the data) decide how many steps
    are private, so the ledger reserves the public upper bound (all of them private); the run
    records at most that, and its privacy.json says what was reserved and what was spent."""
    settings = _settings(expert_files, p=0.5, filter_rounds=2, steps=6)
    reserved, bound = _reserved(expert_files["data"], settings)
    assert not bound.exact and bound.private_steps == 6 and reserved < 0.5 * EXPERT_DP["epsilon"]
    data, ledger = _ledger(expert_files["data"], tmp_path, "d", 1.01 * reserved)
    out = tmp_path / "run"
    code = main(_expert_dp(data, out, settings))
    err = capsys.readouterr().err
    assert code == 0, err
    (entry,) = ledger.entries
    assert entry.report["epsilon"] <= reserved * (1 + 1e-9)
    privacy = json.loads((out / "privacy.json").read_text())
    private_steps = json.loads((out / "metrics.json").read_text())["private_steps"]
    assert private_steps <= 6
    assert any(
        f"reserved ε = {reserved:.6g} for up to 6 private steps" in note
        and f"gave {private_steps}," in note
        for note in privacy["notes"]
    )


def test_expert_dp_refused_when_the_reservation_exceeds_the_budget(
    expert_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Property: a ledger whose budget is below the reservation refuses the run before the data
    are read, naming the reserved ε (not the --epsilon ceiling); --steps whose steps could all
    be private above the DP-SGD budget is refused from the flags alone."""
    settings = _settings(expert_files, p=0.5, filter_rounds=2)
    reserved, _ = _reserved(expert_files["data"], settings)
    data, ledger = _ledger(expert_files["data"], tmp_path, "d", 0.9 * reserved)
    out = tmp_path / "run"
    code = main(_expert_dp(data, out, settings))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: The dataset's ledger refuses this run: ")
    assert f"this run needs ε={reserved:.4g} " in err and len(err.strip().splitlines()) == 1
    assert not ledger.entries and not (out / "privacy.json").exists()
    # the filter is on (ε ≥ 5) and ε2 = ε/4 = 1.5 cannot pay 40 private steps at z = 3
    many = _settings(expert_files, epsilon=6.0, p=0.5, filter_rounds=2, steps=40)
    code = main(_expert_dp(expert_files["data"], tmp_path / "many", many))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: with p = 0.5, 40 steps may all be private: ")
    assert "40 private steps need ε =" in err and len(err.strip().splitlines()) == 1
