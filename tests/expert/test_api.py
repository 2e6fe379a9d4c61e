"""The expert-level learners from Python (`privrl.expert.ExpertDP`, `privrl.expert.DPSGD`): the
same plan as the command line, the same run as the command line with the same seed and noise,
a ledger transaction (reserve before reading, one completed spend equal to the report, an
overspend refused before the data are read), reproducible insecure noise that no ledger
accepts, and errors that name the config's fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import privrl.expert.api as api
from privrl.cli.main import main
from privrl.config import ConfigError
from privrl.data.io import header_of, load_hdf5, read_header, save_hdf5
from privrl.expert import DPSGD, DPSGDConfig, ExpertDP, ExpertDPConfig, Fitted
from privrl.expert.public import NEEDS_EVALUATION, NEEDS_NONPRIVATE
from privrl.privacy.ledger import BudgetLedger, LedgerError
from privrl.privacy.noise import NoiseSource
from privrl.privacy.public import PublicParameterError
from privrl.rl.discrete_common import DiscreteLearner
from privrl.systems.expert import DpSgd, DpSgdConfig, ExpertDp, ExpertDpConfig
from privrl.systems.expert.common import command_words

from .test_dpsgd import ConstantExperts, expert_dataset

torch.set_num_threads(1)

M = 12
SMALL: dict[str, Any] = {  # b/m = 1/2 and z = 5: a fast PLD; a tiny network; no evaluation
    "n_experts": M,
    "delta": 1e-3,
    "batch_size": 6,
    "noise_multiplier": 5.0,
    "hidden": (8,),
    "steps_cap": 12,
    "no_eval": True,
}
EXPERT_DP = {**SMALL, "epsilon": 10.0, "p": 0.5, "filter_rounds": 2, "steps": 6}
DP_SGD = {**SMALL, "epsilon": 1.0}


def _state(learner: DiscreteLearner) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in learner.params.items()}


def _report(report: Any) -> dict[str, Any]:
    """A report's dict without its timestamp."""
    found = report.to_dict()
    found.pop("created", None)
    return found


def _same_fit(a: Fitted[DiscreteLearner], b: Fitted[DiscreteLearner]) -> None:
    assert a.metrics == b.metrics
    assert _report(a.report) == _report(b.report)
    sa, sb = _state(a.policy), _state(b.policy)
    assert sa.keys() == sb.keys()
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key])


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_hdf5(expert_dataset(n_experts=M), tmp_path_factory.mktemp("api") / "d.h5")


# ---------------------------------------------------------------------------------------------
# from Python
# ---------------------------------------------------------------------------------------------


def test_expert_dp_fits_a_small_dataset() -> None:
    """The pipeline from Python: a learner, the total report of the expert unit within ε
    (the filter's rounds and the private steps), its public parameters and the metrics."""
    result = ExpertDP(ExpertDPConfig(**EXPERT_DP)).fit(
        expert_dataset(n_experts=M), experts=ConstantExperts(M)
    )
    assert isinstance(result.policy, DiscreteLearner) and 0 < result.policy.steps <= 6
    report = result.report
    assert report.unit.value == "expert" and report.relation.value == "add_remove"
    assert report.private and 0 < report.epsilon <= 10.0
    mechanisms = [r.mechanism for r in report.releases]
    assert mechanisms[0] == "consensus_filter_svt"
    names = {p["name"]: p for p in report.public_parameters}
    assert names["number of experts m"]["value"] == M
    assert names["number of experts m"]["source"] == "flag"
    assert names["δ"]["value"] == pytest.approx(1e-3)
    assert result.metrics["steps"] == 6 and "return_mean" not in result.metrics
    assert result.metrics["private_steps"] == result.details.training.private_steps


def test_dp_sgd_fits_and_its_twin_is_not_private() -> None:
    ds = expert_dataset(n_experts=M)
    seen: list[tuple[str, int, int]] = []
    private = DPSGD(DPSGDConfig(**DP_SGD)).fit(ds, progress=lambda *done: seen.append(done))
    assert private.report.private and private.report.epsilon <= 1.0
    steps = private.metrics["steps"]
    assert seen and seen[-1] == ("dp-sgd cql", steps, steps)  # reported through the callback
    assert private.metrics["private_steps"] == private.metrics["steps"] > 0
    twin = DPSGD(**{**DP_SGD, "epsilon": None, "non_private": True, "steps": 5}).fit(ds)
    assert not twin.report.private and twin.metrics["steps"] == 5
    assert twin.metrics["private_steps"] == 0


# ---------------------------------------------------------------------------------------------
# the command line's plan is the library's
# ---------------------------------------------------------------------------------------------


def _same_plan(cli: Any, python: Any, command: str) -> None:
    assert _report(cli.report) == _report(python.report)
    assert cli.public["command"] == command
    published = {k: v for k, v in cli.public.items() if k not in ("command", "experts")}
    assert published == dict(python.public)
    cli_params = cli.facts["resolved"].params.to_list()
    assert cli_params == python.facts["resolved"].params.to_list() and cli_params


def test_the_command_line_plans_what_python_plans(stored: Path, tmp_path: Path) -> None:
    """Property: the same settings plan the same public parameters (with their sources), the
    same published values and the same planned report from the file's header (command line)
    and from the episodes in memory (Python)."""
    experts_dir = tmp_path / "experts"
    experts_dir.mkdir()
    header, memory = read_header(stored), header_of(load_hdf5(stored))
    cli = ExpertDp().plan(ExpertDpConfig(**EXPERT_DP, experts=experts_dir), header)
    python = ExpertDP(ExpertDPConfig(**EXPERT_DP)).plan(memory)
    _same_plan(cli, python, "privrl train expert-dp")
    assert cli.public["experts"] == str(experts_dir)
    assert python.report.epsilon > 0 and python.facts["bound"] == cli.facts["bound"]
    _same_plan(
        DpSgd().plan(DpSgdConfig(**DP_SGD), header),
        DPSGD(DPSGDConfig(**DP_SGD)).plan(memory),
        "privrl train dp-sgd",
    )


def test_python_runs_what_the_command_line_runs(tmp_path: Path, capsys) -> None:
    """Same data, settings, seed and (insecure, seeded) noise: `DPSGD.fit` learns the same
    network, with the same metrics and the same public parameters, as `privrl train dp-sgd`
    (evaluated in the dataset's environment, CartPole)."""
    from privrl.data.collect import collect

    class Policy:
        def act(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
            return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)

    ds = collect(
        "CartPole-v1",
        Policy(),
        n_episodes=2 * M,
        seed=0,
        max_steps=10,
        progress=False,
        unit_ids=np.repeat(np.arange(M), 2),
        num_envs=4,
    )
    path = save_hdf5(ds.with_metadata(ds.metadata.with_extra(n_experts=M)), tmp_path / "c.h5")
    settings = {
        **DP_SGD,
        "no_eval": False,
        "eval_episodes": 1,
        "eval_horizon": 10,
        "evals": 2,
        "eval_window": 12,
    }
    argv = ["train", "dp-sgd", "--data", str(path), "--out", str(tmp_path / "run")]
    argv += [
        "--seed",
        "3",
        "--insecure-reproducible-noise",
        "--n-experts",
        str(M),
        "--delta",
        "1e-3",
    ]
    argv += ["--batch-size", "6", "--noise-multiplier", "5", "--hidden", "8", "--epsilon", "1"]
    argv += ["--steps-cap", "12", "--eval-episodes", "1", "--eval-horizon", "10"]
    argv += ["--evals", "2", "--eval-window", "12"]
    assert main(argv) == 0, capsys.readouterr().err
    result = DPSGD(DPSGDConfig(**settings)).fit(
        load_hdf5(path), seed=3, noise=NoiseSource.insecure(3)
    )
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert "return_mean" in metrics and metrics.pop("epsilon") == "inf"  # insecure noise
    assert result.metrics["epsilon"] == float("inf")
    assert {k: v for k, v in result.metrics.items() if k != "epsilon"} == metrics
    privacy = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert privacy["public_parameters"] == result.report.to_dict()["public_parameters"]
    cli_learner = torch.load(tmp_path / "run" / "learner.pt")
    for key, value in result.policy.state_dict()["params"].items():
        torch.testing.assert_close(cli_learner["params"][key], value)


# ---------------------------------------------------------------------------------------------
# the ledger
# ---------------------------------------------------------------------------------------------


def _ledger(stored: Path, tmp_path: Path, epsilon: float) -> tuple[Path, BudgetLedger]:
    import shutil

    copy = Path(shutil.copy(stored, tmp_path / "copy.h5"))
    ledger = BudgetLedger.init(
        copy, epsilon=epsilon, delta=1e-3, unit="expert", relation="add_remove", backend="pld"
    )
    return copy, ledger


@pytest.mark.parametrize("learner", ["expert-dp", "dp-sgd"])
def test_fit_with_a_ledger_records_one_spend_equal_to_its_report(
    learner: str, stored: Path, tmp_path: Path
) -> None:
    path, ledger = _ledger(stored, tmp_path, epsilon=20.0)
    ds = load_hdf5(path)
    if learner == "expert-dp":
        result = ExpertDP(**EXPERT_DP).fit(ds, experts=ConstantExperts(M), ledger=ledger)
    else:
        result = DPSGD(**DP_SGD).fit(ds, ledger=ledger)
    (entry,) = ledger.entries
    assert entry.status == "complete" and entry.label == learner
    assert entry.report["epsilon"] == pytest.approx(result.report.epsilon, rel=1e-12)
    assert ledger.spent() == pytest.approx(result.report.epsilon, rel=1e-12)


def test_an_overspend_is_refused_before_the_data_are_read(
    stored: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Property: a ledger whose budget does not cover the planned report refuses the call
    before the training starts, and records nothing."""
    trained: list[str] = []
    monkeypatch.setattr(api, "fit_expert_dp", lambda *a, **k: trained.append("expert-dp"))
    monkeypatch.setattr(api, "fit_dp_sgd", lambda *a, **k: trained.append("dp-sgd"))
    path, ledger = _ledger(stored, tmp_path, epsilon=0.05)
    ds = load_hdf5(path)
    with pytest.raises(LedgerError):
        ExpertDP(**EXPERT_DP).fit(ds, experts=ConstantExperts(M), ledger=ledger)
    with pytest.raises(LedgerError):
        DPSGD(**DP_SGD).fit(ds, ledger=ledger)
    assert trained == [] and ledger.entries == ()


# ---------------------------------------------------------------------------------------------
# insecure noise: reproducible, never certified
# ---------------------------------------------------------------------------------------------


def test_insecure_noise_repeats_and_is_refused_by_a_ledger(stored: Path, tmp_path: Path) -> None:
    ds = expert_dataset(n_experts=M)
    experts = ConstantExperts(M)

    def expert_dp() -> Fitted[DiscreteLearner]:
        return ExpertDP(**EXPERT_DP).fit(ds, experts=experts, noise=NoiseSource.insecure(7))

    first = expert_dp()
    _same_fit(first, expert_dp())
    assert not first.report.private
    dp_sgd = DPSGD(**DP_SGD)
    _same_fit(
        dp_sgd.fit(ds, noise=NoiseSource.insecure(7)), dp_sgd.fit(ds, noise=NoiseSource.insecure(7))
    )
    path, ledger = _ledger(stored, tmp_path, epsilon=20.0)
    with pytest.raises(LedgerError):
        dp_sgd.fit(load_hdf5(path), ledger=ledger, noise=NoiseSource.insecure(7))
    assert ledger.entries == ()


# ---------------------------------------------------------------------------------------------
# errors name fields
# ---------------------------------------------------------------------------------------------


def test_config_errors_name_the_field_not_a_flag() -> None:
    with pytest.raises(ConfigError) as err:
        ExpertDPConfig(epsilon=1.0, p=1.5)
    assert err.value.key == "p" and "--" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        DPSGDConfig()
    assert err.value.key == "epsilon" and "`non_private=True`" in str(err.value)
    assert "--" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        DPSGDConfig(epsilon=1.0, non_private=True)
    assert err.value.key == "non_private" and "--" not in str(err.value)
    with pytest.raises(TypeError, match="takes a ExpertDPConfig"):
        ExpertDP(DPSGDConfig(epsilon=1.0))  # type: ignore[arg-type]


def test_plan_errors_name_the_field_not_a_flag() -> None:
    """A public parameter with no public source is refused with the setting that gives it."""
    undeclared = header_of(expert_dataset(n_experts=M))
    with pytest.raises(PublicParameterError) as err:
        ExpertDP(epsilon=10.0, no_eval=True).plan(undeclared)
    assert "`n_experts=M`" in str(err.value) and "--" not in str(err.value)
    no_horizon = expert_dataset(n_experts=M)
    no_horizon = no_horizon.with_metadata(no_horizon.metadata.replace(horizon=None))
    with pytest.raises(PublicParameterError) as err:
        ExpertDP(epsilon=10.0, n_experts=M, batch_size=6, no_eval=True).plan(header_of(no_horizon))
    assert "`max_len=L`" in str(err.value) and "--" not in str(err.value)
    with pytest.raises(ValueError, match="`no_eval=True`") as err:
        DPSGD(epsilon=1.0, n_experts=M).plan(undeclared)  # no environment to evaluate in
    assert "--" not in str(err.value)


def test_the_command_line_words_fields_as_flags() -> None:
    assert command_words("pass `n_experts=M`, or `no_eval=True`", DpSgdConfig) == (
        "pass --n-experts M, or --no-eval"
    )
    assert command_words("takes no `epsilon`; `unknown` stays", DpSgdConfig) == (
        "takes no --epsilon; `unknown` stays"
    )
    with pytest.raises(ConfigError, match=r"epsilon is required \(or --non-private for"):
        DpSgdConfig()
    # where the command has one more way to give R_np (a twin's run directory), it says so
    assert command_words(NEEDS_NONPRIVATE, DpSgdConfig) == (
        "needs R_np too: pass --reference RUN_DIR or --reference-return"
    )
    assert "--reference/--reference-return" in command_words(NEEDS_EVALUATION, DpSgdConfig)
