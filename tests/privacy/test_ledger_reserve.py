"""What a run reserves on a dataset's ledger: the ε of the steps it will take, not the ε it was
given as a ceiling (`privrl train dp-sgd --steps N --epsilon E` spends ε(N) ≤ E), and the
non-private twin of dp-sgd needs no expert ids (it trains on all transitions)."""

from __future__ import annotations

import json
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
    # without --steps the run takes the largest N within ε, so ε is what it spends: refused
    code = main(_dp(data, tmp_path / "ceiling", "--epsilon", "50"))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: The dataset's ledger refuses this run: ")
    assert "this run needs ε=50" in err


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
    its outputs withdrawn, with one sentence naming ε=∞, the ledger's budget and the fix."""
    from dp_accounting import dp_event

    from privrl.experiments.rundir import RunDir, ledger_guard
    from privrl.privacy.ledger import LedgerError
    from privrl.privacy.report import PrivacyReport

    data = save_hdf5(_data(units=True), tmp_path / "d.h5")
    BudgetLedger.init(data, epsilon=5, delta=1e-5, unit="expert", relation="add_remove")
    out = tmp_path / "run"
    with pytest.raises(LedgerError) as info:
        with ledger_guard(data, dp_event.GaussianDpEvent(2.0), out=out) as reports:
            run = RunDir(out)
            run.write_config({})
            run.write_metrics({})
            bad = PrivacyReport.non_private("expert", "add_remove", system="t")
            run.write_privacy(bad)
            reports.append(bad)
    msg = str(info.value)
    assert msg.startswith("The dataset's ledger refuses this run: its guarantee could not be")
    assert msg.endswith(".") and ". " not in msg
    assert "(ε=∞)" in msg and "ε_total=5 at δ=1e-05" in msg and "rerun with a certified" in msg
    assert not (out / "privacy.json").exists()
