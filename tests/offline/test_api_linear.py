"""The linear learners from Python (`privrl.offline.DPVAPVI`, `VAPVI`, `PEVI`): the same plan
as the command line, a fit as one ledger transaction (reserved before the episodes are read),
repeatable with insecure noise, errors that name config fields, never flags."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.data.io import header_of, load_hdf5, read_header, save_hdf5
from privrl.envs.linear import LinearMDP
from privrl.offline import (
    DPVAPVI,
    PEVI,
    VAPVI,
    DPVAPVIConfig,
    FeatureTable,
    LinearGreedyPolicy,
    PEVIConfig,
)
from privrl.privacy.ledger import BudgetLedger, LedgerError
from privrl.privacy.noise import NoiseSource
from privrl.privacy.public import PublicParameterError
from privrl.privacy.units import NeighbourRelation, PrivacyUnit
from privrl.systems.linear import DpVapviConfig, DpVapviSystem

K = 200


@pytest.fixture(scope="module")
def mdp() -> LinearMDP:
    return LinearMDP.qiao_wang(0)


@pytest.fixture
def stored(tmp_path: Path, mdp: LinearMDP) -> Path:
    return save_hdf5(mdp.sample(K, rng=np.random.default_rng(0)), tmp_path / "lin.h5")


def ledger_for(path: Path, epsilon: float) -> BudgetLedger:
    return BudgetLedger.init(
        path,
        epsilon=epsilon,
        delta=1e-5,
        unit=PrivacyUnit.TRAJECTORY,
        relation=NeighbourRelation.REPLACE_ONE,
    )


def test_fit_from_python_on_the_built_in_mdp(stored: Path, mdp: LinearMDP) -> None:
    ds = load_hdf5(stored)
    fit = DPVAPVI(rho=5.0).fit(ds)
    assert isinstance(fit.policy, LinearGreedyPolicy)
    assert fit.policy.actions.shape == (mdp.H, mdp.phi.shape[0])
    assert fit.report.system == "dp-vapvi" and fit.report.rho == pytest.approx(5.0)
    assert fit.report.certified and np.isfinite(fit.report.epsilon)
    # the recipe in the metadata gives the true MDP: the exact suboptimality is reported
    assert 0.0 <= fit.metrics["suboptimality"] <= fit.metrics["v_star"]
    assert len(fit.curve) == mdp.H and fit.metrics["K"] == K
    for learner in (VAPVI(), PEVI(PEVIConfig(xi=0.1))):
        base = learner.fit(ds)
        assert base.report.epsilon == np.inf and "suboptimality" in base.metrics


def test_features_given_as_an_array(stored: Path, mdp: LinearMDP) -> None:
    """A user's table (the same φ, scaled ×3) is rescaled to ‖φ‖ ≤ 1 and gives the same
    policy as the recorded one."""
    ds = load_hdf5(stored)
    mine = VAPVI(phi=np.asarray(mdp.phi) * 3.0).fit(ds)
    recorded = VAPVI().fit(ds)
    assert np.array_equal(mine.policy.actions, recorded.policy.actions)
    assert mine.details.policy.features_source == ""
    table = FeatureTable.from_array(mdp.phi, source="mine")
    assert PEVI(phi=table).plan(header_of(ds)).public["features"] == "mine"


def test_python_and_command_line_plan_the_same(stored: Path) -> None:
    cli = DpVapviSystem().plan(DpVapviConfig(rho=2.0, delta=1e-6), read_header(stored))
    lib = DPVAPVI(DPVAPVIConfig(rho=2.0, delta=1e-6)).plan(header_of(load_hdf5(stored)))
    assert cli.facts["params"].to_list() == lib.facts["params"].to_list()
    assert cli.report.epsilon == pytest.approx(lib.report.epsilon)
    assert {k: v for k, v in cli.public.items() if k in lib.public} == dict(lib.public)


def test_a_fit_with_a_ledger_records_one_completed_spend(stored: Path) -> None:
    ledger = ledger_for(stored, epsilon=50.0)
    fit = DPVAPVI(rho=1.0, delta=1e-5).fit(load_hdf5(stored), ledger=ledger)
    (entry,) = ledger.entries
    assert entry.status == "complete" and entry.label == "dp-vapvi"
    assert entry.privacy_report().epsilon == pytest.approx(fit.report.epsilon)
    assert ledger.spent() == pytest.approx(fit.report.epsilon)  # same δ as the ledger's


def test_an_overspend_is_refused_before_the_episodes_are_read(stored: Path, monkeypatch) -> None:
    import privrl.offline.linear as linear

    calls = []
    monkeypatch.setattr(linear.LinearEpisodes, "from_dataset", lambda *a, **k: calls.append(1))
    ledger = ledger_for(stored, epsilon=0.5)
    with pytest.raises(LedgerError):
        DPVAPVI(rho=1.0).fit(load_hdf5(stored), ledger=ledger)
    with pytest.raises(LedgerError):  # not private: never admitted
        PEVI().fit(load_hdf5(stored), ledger=ledger)
    assert calls == [] and ledger.entries == ()


def test_insecure_noise_repeats(stored: Path) -> None:
    ds = load_hdf5(stored)
    algo = DPVAPVI(rho=1.0, split=True)
    one = algo.fit(ds, noise=NoiseSource.insecure(3), rng=1)
    two = algo.fit(ds, noise=NoiseSource.insecure(3), rng=1)
    other = algo.fit(ds, noise=NoiseSource.insecure(4), rng=1)
    assert np.array_equal(one.details.q, two.details.q)
    assert not np.array_equal(one.details.q, other.details.q)
    assert not one.report.certified and one.report.epsilon == np.inf


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({}, "rho"),
        ({"rho": 1e7}, "rho"),
        ({"rho": 1.0, "lam": 0.0}, "lam"),
        ({"rho": 1.0, "failure_prob": 1.0}, "failure_prob"),
        ({"rho": 1.0, "matrix_noise": "loose"}, "matrix_noise"),
        ({"rho": 1.0, "additive_bonus": -1.0}, "additive_bonus"),
    ],
)
def test_config_errors_name_the_field(settings: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        DPVAPVI(**settings)
    assert err.value.key == key and "--" not in str(err.value)


def test_plan_errors_name_fields_not_flags(stored: Path, mdp: LinearMDP) -> None:
    ds = load_hdf5(stored)
    plain = ds.__class__(**{**ds._fields(), "metadata": ds.metadata.replace(extra={})})
    with pytest.raises(ValueError, match="phi is required") as err:
        DPVAPVI(rho=1.0).fit(plain)
    assert "--" not in str(err.value)
    with pytest.raises(ValueError, match="phi: feature dimension mismatch") as err:
        VAPVI(phi=np.ones((mdp.phi.shape[0], mdp.phi.shape[1] + 1, 2))).fit(ds)
    assert "--" not in str(err.value)
    bare = ds.__class__(**{**ds._fields(), "metadata": ds.metadata.replace(horizon=None)})
    with pytest.raises(PublicParameterError, match="pass horizon H") as perr:
        VAPVI().fit(bare)
    assert "--" not in str(perr.value)


def test_the_baseline_refuses_a_private_config() -> None:
    with pytest.raises(TypeError, match="give this to DPVAPVI"):
        VAPVI(DPVAPVIConfig(rho=1.0))
