"""PEVI (Jin et al. 2021): its ridge regression and bonus against direct formulas, the theory
coefficient, learning on the linear MDP, and its non-private report."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privrl.envs.linear import LinearMDP
from privrl.offline.pevi import pevi, pevi_beta
from privrl.offline.vapvi import FeatureTable, LinearEpisodes

H = 20


@pytest.fixture(scope="module")
def mdp() -> LinearMDP:
    return LinearMDP.qiao_wang(1)


@pytest.fixture(scope="module")
def table(mdp: LinearMDP) -> FeatureTable:
    return FeatureTable.from_array(mdp.phi)


def _episodes(mdp: LinearMDP, K: int, seed: int) -> LinearEpisodes:
    return LinearEpisodes.from_dataset(mdp.sample(K, rng=seed), n_states=2, n_actions=100)


def test_beta_is_jin_et_al_coefficient() -> None:
    assert pevi_beta(10, 20, 1000, 0.05, c=0.5) == pytest.approx(
        0.5 * 10 * 20 * math.sqrt(math.log(2 * 10 * 20 * 1000 / 0.05))
    )
    with pytest.raises(ValueError):
        pevi_beta(10, 20, 1000, 0.0)


def test_regression_and_bonus_match_direct_formulas(mdp, table) -> None:
    """At every h: ŵ_h = argmin Σ(φᵀw − r − V̂_{h+1}(s'))² + λ‖w‖² (lstsq on the augmented
    system) and Γ_h = β·√(φᵀΛ_h⁻¹φ); Q̂_h = clip(φᵀŵ_h − Γ_h, 0, H−h+1)."""
    data = _episodes(mdp, 150, 0)
    lam, c = 1.0, 0.02
    res = pevi(data, table, bonus_scale=c, lam=lam)
    beta = pevi_beta(table.d, H, data.K, 0.05, c)
    flat = table.phi.reshape(-1, table.d)
    for h in (H - 1, 10, 0):
        phi = table.phi[data.states[:, h], data.actions[:, h]]
        y = data.rewards[:, h] + res.v[h + 1][data.next_states[:, h]]
        X = np.vstack([phi, math.sqrt(lam) * np.eye(table.d)])
        w, *_ = np.linalg.lstsq(X, np.concatenate([y, np.zeros(table.d)]), rcond=None)
        np.testing.assert_allclose(res.policy.weights[h], w, atol=1e-8)
        Lam = phi.T @ phi + lam * np.eye(table.d)
        gamma = beta * np.sqrt(np.einsum("nd,nd->n", flat, np.linalg.solve(Lam, flat.T).T))
        np.testing.assert_allclose(res.bonus[h].reshape(-1), gamma, rtol=1e-8)
        q = np.clip(flat @ w - gamma, 0, H - h).reshape(2, 100)
        np.testing.assert_allclose(res.q[h], q, atol=1e-8)
        np.testing.assert_allclose(res.v[h], q.max(axis=1), atol=1e-8)


def test_theory_coefficient_zeroes_q_at_this_scale(mdp, table) -> None:
    """The documented finding of the reproduction: with β = C·dH√ζ, C ≥ 0.1, PEVI's Q̂ is
    identically 0 on this instance at K = 100, so its policy is 'always action 0'."""
    res = pevi(_episodes(mdp, 100, 1), table, bonus_scale=0.1)
    assert np.all(res.q == 0) and np.all(res.policy.actions == 0)


def test_pevi_learns_with_a_small_coefficient(mdp, table) -> None:
    """Suboptimality drops with K (mean of 3 seeds) and is small at K = 5000 (c = 0.005)."""
    means = []
    for K in (50, 5000):
        vals = [
            float(
                mdp.suboptimality(
                    pevi(_episodes(mdp, K, s), table, bonus_scale=0.005).policy.actions
                )
            )
            for s in range(3)
        ]
        means.append(np.mean(vals))
    assert means[0] > means[1]
    assert means[1] < 0.1 * mdp.optimal_value()


def test_pevi_report_is_non_private(mdp, table) -> None:
    res = pevi(_episodes(mdp, 10, 2), table)
    rep = res.report
    assert not rep.private and rep.epsilon == math.inf and rep.system == "pevi"
    assert rep.to_dict()["relation"] == "replace_one"
    assert res.policy.algorithm == "pevi" and res.policy.meta["beta"] > 0
