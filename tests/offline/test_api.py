"""The tabular learners from Python (`privrl.offline.APVI`, `DPAPVI`): the same plan as the
command line, a fit as one ledger transaction (reserved before the episodes are read),
repeatable with insecure noise, errors that name config fields, never flags."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import header_of, load_hdf5, read_header, save_hdf5
from privrl.offline import APVI, DPAPVI, APVIConfig, DPAPVIConfig, FiniteHorizonPolicy
from privrl.privacy.ledger import BudgetLedger, LedgerError
from privrl.privacy.noise import NoiseSource
from privrl.privacy.public import PublicParameterError
from privrl.privacy.units import NeighbourRelation, PrivacyUnit
from privrl.systems.tabular import DpApviConfig, DpApviSystem
from tests.privacy.test_ledger import make_dataset

H, S, A = 5, 6, 3  # make_dataset's declared horizon and spaces


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    return save_hdf5(make_dataset(n_ep=60), tmp_path / "d.h5")


def ledger_for(path: Path, epsilon: float) -> BudgetLedger:
    return BudgetLedger.init(
        path,
        epsilon=epsilon,
        delta=1e-5,
        unit=PrivacyUnit.TRAJECTORY,
        relation=NeighbourRelation.REPLACE_ONE,
    )


def test_fit_from_python_learns_a_policy_with_its_report(stored: Path) -> None:
    ds = load_hdf5(stored)
    fit = DPAPVI(rho=1.0, privatize_rewards=True, reward_range=(0, 1)).fit(ds)
    assert isinstance(fit.policy, FiniteHorizonPolicy)
    assert fit.policy.actions.shape == (H, S)
    assert fit.report.system == "dp-apvi" and fit.report.rho == pytest.approx(1.0)
    assert 0 < fit.report.epsilon < 10 and fit.report.certified
    names = {p["name"] for p in fit.report.public_parameters}
    assert {"horizon H", "number of states S", "zCDP budget ρ", "error bound E"} <= names
    assert len(fit.curve) == H and fit.curve[0]["h"] == 1
    assert fit.metrics["E"] == fit.details.plan.E > 0
    base = APVI(APVIConfig(bonus="hoeffding")).fit(ds)
    assert base.report.epsilon == np.inf and base.metrics["E"] == 0.0


def test_python_and_command_line_plan_the_same(stored: Path) -> None:
    """The config through the run layer's adapter (header read from the file) and the
    library object (header of the dataset in memory) resolve the same public parameters and
    plan the same report."""
    cli = DpApviSystem().plan(
        DpApviConfig(rho=0.5, privatize_rewards=True, reward_range=(0, 1)), read_header(stored)
    )
    lib = DPAPVI(DPAPVIConfig(rho=0.5, privatize_rewards=True, reward_range=(0, 1))).plan(
        header_of(load_hdf5(stored))
    )
    assert cli.facts["params"].to_list() == lib.facts["params"].to_list()
    assert cli.report.epsilon == pytest.approx(lib.report.epsilon)
    assert [r.name for r in cli.report.releases] == [r.name for r in lib.report.releases]
    assert {k: v for k, v in cli.public.items() if k in lib.public} == dict(lib.public)


def test_a_fit_with_a_ledger_records_one_completed_spend(stored: Path) -> None:
    ledger = ledger_for(stored, epsilon=20.0)
    fit = DPAPVI(rho=1.0, privatize_rewards=True, reward_range=(0, 1)).fit(
        load_hdf5(stored), ledger=ledger
    )
    (entry,) = ledger.entries
    assert entry.status == "complete" and entry.label == "dp-apvi"
    recorded = entry.privacy_report()
    assert recorded.epsilon == pytest.approx(fit.report.epsilon)
    assert [r.name for r in recorded.releases] == [r.name for r in fit.report.releases]
    assert 0 < ledger.spent() <= fit.report.epsilon  # (composed at the ledger's larger δ)


def test_an_overspend_is_refused_before_the_episodes_are_read(stored: Path, monkeypatch) -> None:
    import privrl.offline.tabular as tabular

    calls = []
    monkeypatch.setattr(tabular, "dp_apvi", lambda *a, **k: calls.append(1))
    ledger = ledger_for(stored, epsilon=1.0)
    with pytest.raises(LedgerError):
        DPAPVI(rho=1.0, privatize_rewards=True, reward_range=(0, 1)).fit(
            load_hdf5(stored), ledger=ledger
        )
    assert calls == [] and ledger.entries == ()
    with pytest.raises(LedgerError):  # not private: ε = ∞ is never admitted
        APVI().fit(load_hdf5(stored), ledger=ledger)
    assert calls == [] and ledger.entries == ()


def test_insecure_noise_repeats_and_is_not_certified(stored: Path) -> None:
    ds = load_hdf5(stored)
    algo = DPAPVI(epsilon=2.0, privatize_rewards=True, reward_range=(0, 1))
    one = algo.fit(ds, noise=NoiseSource.insecure(7))
    two = algo.fit(ds, noise=NoiseSource.insecure(7))
    other = algo.fit(ds, noise=NoiseSource.insecure(8))
    assert np.array_equal(one.details.model.n_sa, two.details.model.n_sa)
    assert np.array_equal(one.policy.actions, two.policy.actions)
    assert not np.array_equal(one.details.model.n_sa, other.details.model.n_sa)
    assert not one.report.certified and one.report.epsilon == np.inf


def test_a_public_reward_table_is_an_array(stored: Path) -> None:
    ds = load_hdf5(stored)
    reward = np.full((H, S, A), 0.5)
    fit = DPAPVI(rho=1.0, reward=reward).fit(ds, noise=NoiseSource.insecure(0))
    assert fit.details.plan.families == ("n_sa", "n_sas")  # no reward sums released
    assert DPAPVIConfig(rho=1.0, reward=reward).to_dict()["reward"] == reward.tolist()
    with pytest.raises(ConfigError) as err:
        DPAPVI(rho=1.0, reward=np.zeros((H, S, A + 1))).fit(ds)
    assert err.value.key == "reward" and "[5, 6, 3]" in str(err.value)


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"rho": -1.0}, "rho"),
        ({"rho": 1.0, "epsilon": 1.0}, "rho"),
        ({"epsilon": 1.0, "privacy_delta": 1e-5}, "privacy_delta"),
        ({"rho": 1.0, "bonus_scale": float("nan")}, "bonus_scale"),
        ({"rho": 1.0, "delta": 1.5}, "delta"),
        ({"rho": 1.0, "unknown_penalty": 1.0}, "unknown_penalty"),
        ({"rho": 1.0, "privatize_rewards": True, "reward": np.zeros((1, 1, 1))}, "reward"),
    ],
)
def test_config_errors_name_the_field(settings: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        DPAPVI(**settings)
    assert err.value.key == key and "--" not in str(err.value)


def test_plan_errors_name_fields_not_flags(stored: Path) -> None:
    ds = load_hdf5(stored)
    with pytest.raises(ConfigError) as err:
        DPAPVI(rho=1.0).fit(ds)  # private rewards, no public table
    assert err.value.key == "reward" and "privatize_rewards" in str(err.value)
    assert "--" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        DPAPVI(rho=1.0, privatize_rewards=True, states=S + 1, reward_range=(0, 1)).fit(ds)
    assert err.value.key == "states" and "drop states" in str(err.value)
    full = make_dataset()
    bare = TrajectoryDataset(**{**full._fields(), "metadata": full.metadata.replace(horizon=None)})
    with pytest.raises(PublicParameterError, match="pass horizon H") as perr:
        DPAPVI(rho=1.0, privatize_rewards=True, reward_range=(0, 1)).fit(bare)
    assert "--" not in str(perr.value)


def test_a_command_line_run_publishes_what_the_python_fit_reports(stored: Path, tmp_path) -> None:
    """`privrl train dp-apvi` on the file and `DPAPVI.fit` on its episodes in memory: the same
    public parameters (with their sources) in privacy.json and in the report, the same ρ."""
    import json

    from privrl.cli.main import main

    out = tmp_path / "run"
    argv = [
        "train",
        "dp-apvi",
        "--data",
        str(stored),
        "--rho",
        "1",
        "--privatize-rewards",
        "--reward-range",
        "0,1",
    ]
    assert main([*argv, "--out", str(out)]) == 0
    published = json.loads((out / "privacy.json").read_text())
    fit = DPAPVI(rho=1.0, privatize_rewards=True, reward_range=(0, 1)).fit(load_hdf5(stored))
    assert published["public_parameters"] == json.loads(json.dumps(fit.report.public_parameters))
    assert published["rho"] == pytest.approx(fit.report.rho)
    config = json.loads((out / "config.json").read_text())
    plan = DPAPVI(rho=1.0, privatize_rewards=True, reward_range=(0, 1)).plan(
        header_of(load_hdf5(stored))
    )
    assert config["apvi"] == plan.public["apvi"] and config["privacy"] == plan.public["privacy"]
    assert fit.details.config.utility_delta == config["apvi"]["delta"] == 0.1
    assert "reward" not in config and "unknown_penalty" not in config


def test_run_configs_keep_their_keys_and_fingerprints_work() -> None:
    """A run config's config.json keys and sweep identity are its command line's settings
    (the library-only `reward` and `unknown_penalty` left out at their defaults), and a
    library config holding an array has a fingerprint too."""
    import dataclasses

    from privrl.systems.linear import DpVapviConfig

    for config in (DpApviConfig(rho=1.0), DpVapviConfig(rho=1.0)):
        cli = {f.name for f in dataclasses.fields(config) if f.metadata.get("cli", True)}
        assert set(config.to_dict()) == set(config.identity()) == cli
        assert config.fingerprint() == type(config).from_dict(config.to_dict()).fingerprint()
    reward = np.full((H, S, A), 0.25)
    one, two = DPAPVIConfig(rho=1.0, reward=reward), DPAPVIConfig(rho=1.0, reward=reward * 2)
    assert one.fingerprint() != two.fingerprint() != DPAPVIConfig(rho=1.0).fingerprint()
    assert DPAPVIConfig.from_dict(one.to_dict()).fingerprint() == one.fingerprint()


def test_the_baseline_refuses_a_private_config() -> None:
    """A DP-APVI config given to APVI would silently run without noise: refused."""
    with pytest.raises(TypeError, match="give this to DPAPVI"):
        APVI(DPAPVIConfig(rho=1.0))
    assert isinstance(DPAPVI(DPAPVIConfig(rho=1.0)).config, DPAPVIConfig)


def test_the_learners_load_no_command_line_or_plotting_package() -> None:
    """`import privrl.offline` (in a fresh interpreter) loads neither typer, matplotlib nor
    Ray, nor anything of privrl's application layer: plots, files and flags live in systems/
    and cli/."""
    import json
    import subprocess
    import sys

    code = (
        "import sys, json, privrl.offline\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('typer', 'matplotlib', 'ray') or m.startswith(('privrl.runs', 'privrl.systems', "
        "'privrl.cli', 'reproductions')))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout) == []
