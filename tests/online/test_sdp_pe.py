"""SDP-PE / PE: policy set, schedule, absorbing model, coverage design, vectorised policy
evaluation, exact regret, and the elimination keeping π* in the non-private run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privrl.envs.riverswim import riverswim
from privrl.envs.tabular import occupancy_measure, policy_evaluation
from privrl.online.common import (
    make_env,
    policy_set,
    policy_start_gaps,
    reachable_states,
    rollout_counts,
)
from privrl.online.sdp_pe import (
    PEConfig,
    absorbing_transitions,
    coverage_design,
    make_shuffle_privatizer,
    n_releases,
    pe,
    sdp_pe,
    stage_schedule,
)
from tests.noise import noise_rng


def test_policy_set_is_deduplicated_on_unreachable_states() -> None:
    """RiverSwim S = 4, H = 5 from state 0: 1 + 2 + 3 + 4 + 4 = 14 reachable (h, s) ⇒ 2^14."""
    mdp = riverswim(4, 5)
    reach = reachable_states(mdp)
    assert reach.sum(axis=1).tolist() == [1, 2, 3, 4, 4]
    phi = policy_set(mdp)
    assert phi.shape == (2**14, 5, 4)
    assert np.all(phi[:, ~reach] == 0)
    assert np.unique(phi.reshape(phi.shape[0], -1), axis=0).shape[0] == 2**14
    _, _, pi_star = mdp.backward_induction()
    star = np.where(reach, pi_star, 0)
    assert np.any(np.all(phi == star, axis=(1, 2)))
    with pytest.raises(ValueError, match="max_policies"):
        policy_set(mdp, max_policies=1000)


def test_set_evaluation_matches_single_policy_evaluation() -> None:
    """Vectorised values and occupancies of the policy set (true and absorbing models) equal
    one-at-a-time evaluation."""
    mdp = riverswim(4, 5)
    phi = policy_set(mdp)
    gaps = policy_start_gaps(mdp, phi)
    pick = noise_rng(0).choice(phi.shape[0], size=12, replace=False)
    for i in pick:
        assert gaps[i, 0] == pytest.approx(mdp.optimal_value() - float(mdp.value(phi[i])))
    rng = noise_rng(1)
    counts, _ = rollout_counts(mdp, phi, rng.integers(0, phi.shape[0], 3000), rng)
    F = counts.n_sas < 20
    P = np.stack([absorbing_transitions(counts.n_sa[h], counts.n_sas[h], F[h]) for h in range(5)])
    r = np.zeros((5, 5, 2))
    r[:, :4] = mdp.R
    ext = np.concatenate([phi, np.zeros((phi.shape[0], 5, 1), dtype=np.int64)], axis=-1)
    start = np.append(mdp.d1, 0.0)
    values = policy_evaluation(P, r, ext, start=start, return_q=False).value
    occ = occupancy_measure(P, start, ext)
    for i in pick:
        single = policy_evaluation(P, r, ext[i], start=start).value
        assert values[i] == pytest.approx(float(single), abs=1e-12)
        np.testing.assert_allclose(occ[i], occupancy_measure(P, start, ext[i]), atol=1e-12)
        assert float((occ[i] * r).sum()) == pytest.approx(values[i], abs=1e-12)


def test_absorbing_transitions() -> None:
    n_sas = np.array([[[5.0, 1.0], [0.0, 0.0]], [[2.0, 2.0], [3.0, 0.0]]])
    n_sa = n_sas.sum(-1)
    F = n_sas <= 1
    P = absorbing_transitions(n_sa, n_sas, F)
    assert P.shape == (3, 2, 3)
    np.testing.assert_allclose(P.sum(-1), 1.0)
    assert P[0, 0, 0] == pytest.approx(5 / 6) and P[0, 0, 2] == pytest.approx(1 / 6)
    assert P[0, 1, 2] == 1.0  # no data: everything to s†
    assert np.all(P[2, :, 2] == 1.0)  # s† absorbing


def test_stage_schedule_and_releases() -> None:
    sched = stage_schedule(10**6, 40)
    assert sched == [40 * 2**k for k in range(len(sched))]
    assert 3 * sum(sched[:-1]) < 10**6 <= 3 * sum(sched)
    assert n_releases(10**6, 40, 5) == 6 * len(sched)
    with pytest.raises(ValueError, match="base_batch"):
        PEConfig(base_batch=10).batch(5, 4, 2)


def test_coverage_design_meets_the_stopping_rule() -> None:
    """Frank–Wolfe reaches max_π Σ_i x_π,i/E_D[x_i] ≤ (1 + η)·d on random occupancies, and a
    tighter η gives a ratio closer to the optimum d (Lemma 13)."""
    rng = noise_rng(0)
    X = rng.random((300, 12)) ** 4
    X[:, 3] = 0.0  # an unreachable coordinate is dropped
    for eta in (0.5, 0.05):
        fw = coverage_design(X, eta=eta)
        assert fw.coordinates == 11
        assert fw.weights.sum() == pytest.approx(1.0) and np.all(fw.weights >= 0)
        m = fw.weights @ X[:, X.max(0) > 0]
        ratios = X[:, X.max(0) > 0] @ (1 / m)
        assert ratios.max() == pytest.approx(fw.ratio)
        assert fw.ratio <= (1 + eta) * 11


def test_exact_regret_equals_monte_carlo() -> None:
    """The exact per-episode regret V*(s_1) − V^π(s_1) averages to the Monte-Carlo regret
    V*(s_1) − return over many sampled episodes (small random MDP, uniform start)."""
    mdp = make_env("random-tabular", states=3, actions=2, horizon=3, seed=4)
    phi = policy_set(mdp)
    gaps = policy_start_gaps(mdp, phi)
    _, V_star, _ = mdp.backward_induction()
    rng = noise_rng(5)
    idx = rng.integers(0, phi.shape[0], size=100_000)
    ep = mdp.sample_arrays(phi[idx], idx.size, rng=rng, record_probs=False)
    exact = gaps[idx, ep.states[:, 0]]
    mc = V_star[0][ep.states[:, 0]] - ep.returns
    se = mc.std() / math.sqrt(idx.size)
    assert abs(mc.mean() - exact.mean()) < 4 * se


def test_pi_star_never_eliminated_in_the_non_private_run() -> None:
    """PE on RiverSwim: π* stays active at every stage while elimination does happen. The
    constants are made aggressive (width ×0.02, F threshold ×0.02) so that elimination starts
    within 31k episodes (8 stages): a stricter test of safety than the defaults (slow test)."""
    mdp = riverswim(4, 5)
    cfg = PEConfig(threshold_c1=0.02, width_scale=0.02)
    for seed in range(2):
        res = pe(mdp, 31_000, rng=noise_rng(seed), config=cfg)
        done = [e for e in res.log if "optimal_active" in e]
        assert all(e["optimal_active"] for e in done)
        assert done[-1]["active_after"] < 2**14 // 4
        assert res.regret.shape == (31_000,) and np.all(res.regret >= 0)


@pytest.mark.slow
def test_pi_star_never_eliminated_with_default_constants() -> None:
    mdp = riverswim(4, 5)
    for seed in range(3):
        res = pe(mdp, 10**6, rng=noise_rng(seed))
        done = [e for e in res.log if "optimal_active" in e]
        assert all(e["optimal_active"] for e in done)
        assert done[-1]["active_after"] < 2**14


def test_sdp_pe_shuffle_run_is_reproducible_and_reports() -> None:
    mdp = riverswim(3, 4)  # 2^9 policies: fast

    def run() -> tuple[float, object]:
        priv = make_shuffle_privatizer(
            mdp, 5000, epsilon=10.0, delta=1e-5, rng=noise_rng(1), calibration="theory"
        )
        return sdp_pe(mdp, 5000, priv, rng=noise_rng(2))

    a, b = run(), run()
    assert np.array_equal(a.regret, b.regret)
    assert a.report.model == "shuffle" and a.report.epsilon <= 10.0 + 1e-9
    assert a.info["privatizer"]["calibration"] == "theory"
    assert a.log[0]["E"] > 0 and a.log[0]["T"] == 4 * 3 * 2
    with pytest.raises(ValueError, match="batch privatizer"):
        from privrl.online.privatizers import IdentityPrivatizer

        sdp_pe(mdp, 100, IdentityPrivatizer(cumulative=True), rng=noise_rng(0))
