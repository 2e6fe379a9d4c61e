"""Expert sets: protocol, batched greedy actions, modified-policy sampling, builders, storage."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import scipy.linalg

from privrl.envs.perturbed import PAPER_GRIDS, expert_settings
from privrl.expert.base import ExpertSet, modified_probs
from privrl.expert.experts import (
    FAMILIES,
    LUNAR_HEURISTIC_GAINS,
    AcrobotLinearExperts,
    CartPoleLQRExperts,
    HIVLinearExperts,
    LunarLanderHeuristicExperts,
    build_acrobot_experts,
    build_cartpole_experts,
    build_hiv_experts,
    cem_per_setting,
    evaluate_experts,
    load_experts,
    save_experts,
    solve_dare,
    top_k_per_setting,
)


def _random_set(family: str, m: int, rng: np.random.Generator):
    cls = FAMILIES[family]
    params = {k: rng.standard_normal((m, *shape)) for k, shape in cls.param_shapes.items()}
    if family == "lunarlander-heuristic":
        params["gains"] = LUNAR_HEURISTIC_GAINS * np.exp(0.3 * params["gains"])
    return cls(params, {"setting": np.arange(m, dtype=float)}, {"note": "test"})


def _random_obs(family: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if family == "hiv-linear":
        return 10 ** rng.uniform(0, 6, size=(n, 6))
    if family == "lunarlander-heuristic":
        o = rng.normal(0, 0.5, size=(n, 8))
        o[:, 6:] = rng.random((n, 2)) < 0.2
        return o.astype(np.float32)
    d = FAMILIES[family].observation_dim
    return rng.normal(0, 0.3, size=(n, d)).astype(np.float32)


# ----------------------------------------------------------------------------- protocol


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_protocol_and_batched_greedy_equals_per_expert(family: str) -> None:
    rng = np.random.default_rng(0)
    experts = _random_set(family, 17, rng)
    obs = _random_obs(family, 40, rng)
    assert isinstance(experts, ExpertSet)
    assert experts.n_experts == 17 and experts.obs_dim == obs.shape[1]
    g = experts.greedy_actions(obs)
    assert g.shape == (17, 40) and g.dtype == np.int64
    assert g.min() >= 0 and g.max() < experts.n_actions
    for i in range(17):  # one expert at a time, one state at a time
        np.testing.assert_array_equal(g[i], experts.greedy_for(np.full(40, i), obs))
    assert len(np.unique(g)) > 1  # the comparison was not vacuous


def test_greedy_actions_chunks_large_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    import privrl.expert.experts as mod

    rng = np.random.default_rng(1)
    experts = _random_set("acrobot-linear", 30, rng)
    obs = _random_obs("acrobot-linear", 500, rng)
    whole = experts.greedy_actions(obs)
    monkeypatch.setattr(mod, "_CHUNK_ELEMENTS", 30 * 3 * 7)  # chunks of 7 states
    np.testing.assert_array_equal(experts.greedy_actions(obs), whole)


def test_reference_rules() -> None:
    """Each family's greedy rule against a direct scalar implementation."""
    rng = np.random.default_rng(2)
    k = rng.standard_normal((5, 4))
    cp = CartPoleLQRExperts({"K": k})
    obs = rng.normal(0, 0.1, size=(20, 4))
    np.testing.assert_array_equal(cp.greedy_actions(obs), (-(k @ obs.T) > 0).astype(int))

    w = rng.standard_normal((3, 4, 7))
    hv = HIVLinearExperts({"W": w})
    x = 10 ** rng.uniform(0, 6, size=(10, 6))
    from privrl.rl.features import HIV_LOG_MEAN, HIV_LOG_STD

    phi = np.c_[(np.log10(x) - HIV_LOG_MEAN) / HIV_LOG_STD, np.ones(10)]
    np.testing.assert_array_equal(hv.greedy_actions(x)[1], (phi @ w[1].T).argmax(1))

    from gymnasium.envs.box2d.lunar_lander import heuristic

    ll = LunarLanderHeuristicExperts({"gains": LUNAR_HEURISTIC_GAINS[None]})
    env = gym.make("LunarLander-v3")
    s, _ = env.reset(seed=3)
    for _ in range(300):
        a = heuristic(env, s)
        assert ll.greedy_actions(s[None])[0, 0] == a
        s, _, term, trunc, _ = env.step(a)
        if term or trunc:
            break


def test_bad_input() -> None:
    rng = np.random.default_rng(3)
    ac = _random_set("acrobot-linear", 4, rng)
    with pytest.raises(ValueError, match=r"\[n, 6\]"):
        ac.greedy_actions(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"\[n, 6\]"):
        ac.greedy_actions(np.zeros(6))
    with pytest.raises(ValueError, match="expert ids"):
        ac.greedy_for(np.array([0, 4]), np.zeros((2, 6)))
    with pytest.raises(ValueError, match="integer expert ids"):
        ac.greedy_for(np.array([0.0, 1.0]), np.zeros((2, 6)))
    with pytest.raises(ValueError, match="shape"):
        AcrobotLinearExperts({"W": np.zeros((4, 3, 6))})
    with pytest.raises(ValueError, match="missing"):
        AcrobotLinearExperts({"K": np.zeros((4, 4))})
    with pytest.raises(ValueError, match="non-finite"):
        CartPoleLQRExperts({"K": np.full((2, 4), np.nan)})
    with pytest.raises(ValueError, match="setting"):
        CartPoleLQRExperts({"K": np.zeros((2, 4))}, {"gravity": np.zeros(3)})
    with pytest.raises(ValueError, match="admissible"):
        ac.act(np.array([0]), np.zeros((1, 6)), rng, p_min=0.5)


# ----------------------------------------------------------------------------- sampling


def test_act_samples_the_modified_policy() -> None:
    rng = np.random.default_rng(4)
    experts = _random_set("lunarlander-heuristic", 3, rng)
    obs = np.repeat(_random_obs("lunarlander-heuristic", 1, rng), 40000, axis=0)
    ids = np.repeat(np.arange(3), [20000, 10000, 10000])
    p_min = 0.02
    a, p = experts.act(ids, obs, np.random.default_rng(5), p_min, return_probs=True)
    expected = experts.action_probs(ids, obs, p_min)
    np.testing.assert_array_equal(p, expected[np.arange(len(a)), a])
    freq = np.bincount(a[:20000], minlength=4) / 20000
    np.testing.assert_allclose(freq, expected[0], atol=0.006)  # ~ 5 σ at p = 0.94
    np.testing.assert_allclose(expected.sum(1), 1.0)
    assert set(np.round(p, 12)) <= {0.94, 0.02}
    np.testing.assert_array_equal(expected, modified_probs(experts.greedy_for(ids, obs), 4, p_min))


# ----------------------------------------------------------------------------- builders


def test_solve_dare_matches_scipy() -> None:
    rng = np.random.default_rng(6)
    a = np.eye(4)[None] + 0.05 * rng.standard_normal((3, 4, 4))
    b = rng.standard_normal((3, 4, 1))
    q = np.stack([np.diag(10 ** rng.uniform(-2, 2, 4)) for _ in range(3)])
    r = 10 ** rng.uniform(-2, 2, (3, 1, 1))
    p = solve_dare(a, b, q, r)
    for i in range(3):
        ref = scipy.linalg.solve_discrete_are(a[i], b[i], q[i], r[i])
        np.testing.assert_allclose(p[i], ref, rtol=1e-8, atol=1e-10)


def test_cartpole_experts_are_mostly_competent_and_diverse() -> None:
    """Measured: 50/50 quick experts balance all 200 steps on their own physics (and on the
    default one); asserted with margin: >= 90 %."""
    st = expert_settings(PAPER_GRIDS["cartpole"], 50, np.random.default_rng(0))
    experts = build_cartpole_experts(st, np.random.default_rng(1), eval_episodes=3)
    own = experts.settings["own_return"]
    assert (own >= 195).mean() >= 0.9
    default = evaluate_experts(experts, "cartpole", np.random.default_rng(2), episodes=3, own=False)
    assert (default >= 195).mean() >= 0.9
    # diversity: the experts do not all act alike on states off the upright
    obs = np.random.default_rng(3).normal(0, [0.5, 0.5, 0.05, 0.3], size=(500, 4))
    share_right = experts.greedy_actions(obs).mean(axis=0)
    assert ((share_right > 0.05) & (share_right < 0.95)).mean() > 0.1
    for name in ("gravity", "force_mag", "masscart"):
        lo, hi = PAPER_GRIDS["cartpole"].bounds()[name]
        assert lo <= experts.settings[name].min() and experts.settings[name].max() <= hi


def test_acrobot_search_beats_random() -> None:
    """Six settings, a small CEM: measured own-physics means ≈ −90 (random policy: −200)."""
    st = expert_settings(PAPER_GRIDS["acrobot"], 6, np.random.default_rng(0))
    experts = build_acrobot_experts(
        st, np.random.default_rng(1), population=12, generations=5, episodes=2, eval_episodes=4
    )
    assert experts.n_experts == 6
    assert np.median(experts.settings["own_return"]) > -140


def test_hiv_builder_keeps_settings_and_ranks() -> None:
    """Two settings, the second with two experts: they are its best and second-best
    candidates (own_return ordered), and every expert's score beats the untreated patient's."""
    st = expert_settings(PAPER_GRIDS["hiv"], 3, np.random.default_rng(0))
    st["setting"] = np.array([5.0, 9.0, 9.0])
    for k in ("r1", "r2", "efficacy_std"):
        st[k] = np.array([st[k][0], st[k][1], st[k][1]])
    warm = (np.zeros(28), np.ones(28))
    experts = build_hiv_experts(st, np.random.default_rng(1), warm, population=4, generations=1)
    own = experts.settings["own_return"]
    assert own[1] >= own[2]
    assert not np.array_equal(experts.params["W"][1], experts.params["W"][2])
    assert np.all(own > 0)


def test_cem_per_setting_optimises_each_setting_independently() -> None:
    targets = np.array([[1.0, -2.0], [-3.0, 0.5], [0.0, 4.0]])

    def evaluate(theta, rng):
        return -((theta - targets[:, None, :]) ** 2).sum(axis=2)

    theta, scores = cem_per_setting(
        evaluate,
        np.zeros((3, 2)),
        np.full((3, 2), 3.0),
        np.random.default_rng(0),
        population=40,
        generations=25,
        n_elite=8,
        min_std=0.02,
    )
    best = theta[np.arange(3), scores.argmax(axis=1)]
    np.testing.assert_allclose(best, targets, atol=0.1)


def test_top_k_per_setting() -> None:
    theta = np.arange(2 * 4 * 1, dtype=float).reshape(2, 4, 1)
    scores = np.array([[0.0, 3.0, 1.0, 2.0], [5.0, 4.0, 7.0, 6.0]])
    sel, sc = top_k_per_setting(theta, scores, np.array([2, 1]))
    assert sel[:, 0].tolist() == [1.0, 3.0, 6.0] and sc.tolist() == [3.0, 2.0, 7.0]
    with pytest.raises(ValueError):
        top_k_per_setting(theta, scores, np.array([5, 1]))


# ----------------------------------------------------------------------------- storage


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_save_load_round_trip(family: str, tmp_path) -> None:
    rng = np.random.default_rng(7)
    experts = _random_set(family, 9, rng)
    experts.settings["own_return"] = rng.standard_normal(9)
    path = save_experts(experts, tmp_path / "set")
    back = load_experts(path)
    assert type(back) is type(experts) and back.info == experts.info
    for k in experts.params:
        np.testing.assert_array_equal(back.params[k], experts.params[k])
    for k in experts.settings:
        np.testing.assert_array_equal(back.settings[k], experts.settings[k])
    obs = _random_obs(family, 25, rng)
    np.testing.assert_array_equal(back.greedy_actions(obs), experts.greedy_actions(obs))
    meta = json.loads((path / "experts.json").read_text())
    assert meta["family"] == family and meta["env_id"] == experts.env_id
    save_experts(experts.subset(np.array([3, 1])), path)  # overwrite in place
    assert load_experts(path).n_experts == 2


def test_load_rejects_unknown_family_and_missing_dir(tmp_path) -> None:
    experts = _random_set("cartpole-lqr", 2, np.random.default_rng(8))
    path = save_experts(experts, tmp_path / "set")
    meta = json.loads((path / "experts.json").read_text())
    meta["family"] = "ppo-mlp"
    (path / "experts.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="unknown expert family 'ppo-mlp'"):
        load_experts(path)
    with pytest.raises(FileNotFoundError):
        load_experts(tmp_path / "nowhere")
