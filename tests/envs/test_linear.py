"""The linear MDP of Qiao & Wang's simulations: features, equivalence after rescaling, exact
evaluation against Monte-Carlo, behaviour policy, sampling and metadata."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from privrl.data.io import load_hdf5, save_hdf5
from privrl.envs.linear import (
    ENV_ID,
    LinearMDP,
    action_codes,
    linear_mdp_from_metadata,
    raw_features,
    register_envs,
)
from privrl.envs.tabular import backward_induction

H = 20


def _spec_model(instance: int) -> tuple[np.ndarray, np.ndarray]:
    """P [H, 2, 100, 2] and R [H, 2, 100] written directly from the spec's formulas (no φ, ν, θ
    and no rescaling): P_h(0|s,a) = α_{h,1} if δ(s,a) = 1 else α_{h,2};
    r_h(s,a) = ⟨**a**, u_h⟩/16 + δ r_h/2 + (1 − δ)(1 − r_h)/2."""
    rng = np.random.default_rng(instance)  # the instance's draws, in the documented order
    alpha = rng.random((H, 2))
    u = rng.random((H, 8))
    r = rng.random(H)
    s = np.arange(2)[:, None]
    a = np.arange(100)[None, :]
    delta = ((s == 0) == (a == 0)).astype(float)  # [2, 100]
    p0 = np.where(delta[None] == 1, alpha[:, 0, None, None], alpha[:, 1, None, None])
    P = np.stack([p0, 1 - p0], axis=-1)
    codes = action_codes()
    R = (codes @ u.T).T[:, None, :] / 16 + delta[None] * r[:, None, None] / 2
    R = R + (1 - delta[None]) * (1 - r[:, None, None]) / 2
    return P, R


def test_features_match_the_spec_and_have_norm_at_most_one() -> None:
    mdp = LinearMDP.qiao_wang(0)
    assert (mdp.S, mdp.A, mdp.d, mdp.H) == (2, 100, 10, 20)
    norms = np.linalg.norm(mdp.phi, axis=-1)
    assert norms.max() <= 1.0 + 1e-12  # the guarantee's assumption ‖φ‖ ≤ 1
    assert norms.max() == pytest.approx(1.0)  # divided by the max norm, not more
    assert mdp.scale == pytest.approx(np.sqrt(7.0))  # popcount ≤ 6 below 100, plus δ or 1−δ
    raw = mdp.phi * mdp.scale
    np.testing.assert_allclose(raw, raw_features())
    np.testing.assert_array_equal(raw[0, 5, :8], [1, 0, 1, 0, 0, 0, 0, 0])  # 5 = 0b101
    assert raw[0, 0, 8] == 1 and raw[1, 0, 8] == 0  # δ(0,0) = 1, δ(1,0) = 0
    assert raw[1, 7, 8] == 1 and raw[0, 7, 8] == 0  # δ(1,a≠0) = 1, δ(0,a≠0) = 0
    np.testing.assert_allclose(raw[..., 8] + raw[..., 9], 1.0)


@pytest.mark.parametrize("instance", [0, 1])
def test_rescaled_mdp_is_the_spec_mdp(instance: int) -> None:
    """⟨φ/c, cν⟩ = ⟨φ, ν⟩: the rescaled linear MDP has the spec's P and r, hence its values."""
    mdp = LinearMDP.qiao_wang(instance)
    P, R = _spec_model(instance)
    tab = mdp.tabular()
    np.testing.assert_allclose(tab.P, P, atol=1e-12)
    np.testing.assert_allclose(tab.R, R, atol=1e-12)
    assert R.min() >= 0 and R.max() <= 1
    _, v_spec, _ = backward_induction(P, R)
    assert mdp.optimal_value() == pytest.approx(0.5 * v_spec[0].sum(), abs=1e-10)


def test_rescaling_a_generic_linear_mdp_preserves_values() -> None:
    rng = np.random.default_rng(3)
    S, A, d, h = 3, 4, 5, 6
    phi = rng.random((S, A, d)) * 2.0  # norms > 1
    nu = rng.dirichlet(np.ones(S), size=(h, d)).transpose(0, 2, 1)  # Σ_s' ν(s') = 1 per coord
    phi = phi / phi.sum(-1, keepdims=True)  # rows on the simplex → P rows sum to 1
    phi = phi * 3.0
    nu = nu / 3.0
    theta = rng.random((h, d)) / 3.0 / d
    mdp = LinearMDP.rescaled(phi, nu, theta, np.full(S, 1 / S))
    assert mdp.scale > 1 and np.linalg.norm(mdp.phi, axis=-1).max() <= 1 + 1e-12
    P = np.einsum("sad,htd->hsat", phi, nu)
    R = np.einsum("sad,hd->hsa", phi, theta)
    np.testing.assert_allclose(mdp.transitions(), P, atol=1e-12)
    np.testing.assert_allclose(mdp.rewards(), R, atol=1e-12)
    _, v, _ = backward_induction(P, R)
    assert mdp.optimal_value() == pytest.approx(v[0].mean(), abs=1e-12)
    with pytest.raises(ValueError, match="‖φ"):
        LinearMDP(phi=phi, nu=nu, theta=theta, d1=np.full(S, 1 / S))


def test_exact_evaluation_matches_monte_carlo() -> None:
    """Exact v^π (backward induction on the tabular form) vs the mean return of episodes rolled
    out from the spec's formulas directly, for μ and for π*."""
    mdp = LinearMDP.qiao_wang(1)
    P, R = _spec_model(1)
    _, _, pi_star = mdp.tabular().backward_induction()
    mu = mdp.behaviour_policy()
    rng = np.random.default_rng(7)
    n = 40_000
    for policy in (mu, pi_star):
        exact = float(mdp.tabular().value(policy))
        s = rng.integers(0, 2, size=n)
        ret = np.zeros(n)
        for h in range(H):
            if policy.dtype.kind == "f":
                cdf = np.cumsum(policy[h, s], axis=1)
                a = np.minimum((rng.random(n)[:, None] >= cdf).sum(axis=1), 99)
            else:
                a = policy[h, s]
            ret += R[h, s, a]
            s = (rng.random(n) >= P[h, s, a, 0]).astype(np.int64)  # s' = 0 w.p. P(0|s,a)
        se = ret.std(ddof=1) / np.sqrt(n)
        assert abs(ret.mean() - exact) < 4 * se + 1e-9, (ret.mean(), exact, se)


def test_behaviour_policy_and_sampling() -> None:
    mdp = LinearMDP.qiao_wang(0)
    mu = mdp.behaviour_policy()
    assert mu.shape == (H, 2, 100)
    np.testing.assert_allclose(mu.sum(-1), 1.0)
    assert mu[0, 0, 0] == pytest.approx(0.6) and mu[0, 1, 5] == pytest.approx(0.4 / 99)
    ds = mdp.sample(3000, rng=0)
    assert ds.n_episodes == 3000 and ds.n_transitions == 3000 * H
    actions = np.asarray(ds.actions)
    assert abs(np.mean(actions == 0) - 0.6) < 0.01
    probs = np.asarray(ds.behaviour_probs)
    np.testing.assert_allclose(probs, np.where(actions == 0, 0.6, 0.4 / 99))
    # Same seed, same data.
    again = mdp.sample(3000, rng=0)
    np.testing.assert_array_equal(np.asarray(again.observations), np.asarray(ds.observations))


def test_metadata_recovers_the_feature_table(tmp_path) -> None:
    mdp = LinearMDP.qiao_wang(1)
    ds = mdp.sample(4, rng=1)
    path = save_hdf5(ds, tmp_path / "d.h5")
    back = load_hdf5(path)
    rebuilt = linear_mdp_from_metadata(back.metadata.extra)
    assert rebuilt is not None
    np.testing.assert_array_equal(rebuilt.phi, mdp.phi)
    assert back.metadata.env_id == ENV_ID and back.metadata.horizon == H
    tampered = {"linear_mdp": {**back.metadata.extra["linear_mdp"], "feature_sha256": "0" * 64}}
    with pytest.raises(ValueError, match="does not reproduce"):
        linear_mdp_from_metadata(tampered)
    assert linear_mdp_from_metadata({}) is None


def test_gymnasium_env() -> None:
    register_envs()
    register_envs()  # idempotent
    env = gym.make(ENV_ID, instance=1)
    obs, info = env.reset(seed=0)
    assert obs in (0, 1) and info["h"] == 0
    steps = 0
    truncated = False
    while not truncated:
        obs, reward, terminated, truncated, _ = env.step(0)
        assert 0 <= reward <= 1 and not terminated
        steps += 1
    assert steps == H
    np.testing.assert_allclose(env.unwrapped.mdp.P, LinearMDP.qiao_wang(1).tabular().P)
