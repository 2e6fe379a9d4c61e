"""OPE domains: reproducible sampling, recorded propensities, coverage, cache, policy specs.

Training budgets here are tiny (a few seconds) and the cache lives in a temporary directory;
the full-budget policies are checked by the slow tests at the end.
"""

from __future__ import annotations

import numpy as np
import pytest

from privrl.data.paths import cache_dir
from privrl.ope import domains as dom
from privrl.ope.domains import domain_cache_path, get_domain, policy_from_spec
from privrl.policies import UniformRandomPolicy
from privrl.rl.linear_q import FQIConfig, GreedyQPolicy, SarsaLambdaConfig, SoftmaxQPolicy

MC_TINY = SarsaLambdaConfig(episodes=40, alpha=0.005)
HIV_TINY = FQIConfig(
    rounds=1, episodes_per_round=3, iterations=2, gradient_steps=10, hidden=(8,), horizon=10
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> object:
    mp = pytest.MonkeyPatch()
    mp.setenv("PRIVRL_CACHE", str(tmp_path_factory.mktemp("privrl-cache")))
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def mc(cache: object) -> dom.OpeDomain:
    return get_domain("mountain-car", seed=0, train=MC_TINY, progress=False)


@pytest.fixture(scope="module")
def hiv(cache: object) -> dom.OpeDomain:
    return get_domain("hiv", seed=0, train=HIV_TINY, progress=False, horizon=12)


def test_domain_fields(mc: dom.OpeDomain, hiv: dom.OpeDomain) -> None:
    assert mc.gamma == 0.99 and mc.n_actions == 3 and mc.features.dim == 36
    assert mc.features.spec == "fourier:5" and mc.horizon == 1000 and mc.mode == "off-policy"
    assert isinstance(mc.target_policy, UniformRandomPolicy)
    assert hiv.gamma == 0.98 and hiv.n_actions == 4 and hiv.features.spec == "hiv-log"
    assert hiv.features.dim == 7 and hiv.horizon == 12
    assert isinstance(hiv.target_policy, GreedyQPolicy)
    assert isinstance(hiv.behaviour_policy, SoftmaxQPolicy)


@pytest.mark.parametrize("name", ["mc", "hiv"])
def test_sample_is_reproducible_and_records_behaviour_probs(
    name: str, request: pytest.FixtureRequest
) -> None:
    d: dom.OpeDomain = request.getfixturevalue(name)
    m = 20
    a = d.sample(d.behaviour_policy, m, seed=7)
    b = d.sample(d.behaviour_policy, m, seed=7)
    c = d.sample(d.behaviour_policy, m, seed=8)
    for field in ("observations", "actions", "rewards", "behaviour_probs", "episode_offsets"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.observations, c.observations)
    assert a.n_episodes == m and a.metadata.discount == d.gamma
    assert a.metadata.extra["policy"] == "behaviour"
    # recorded propensities are the sampling policy's probabilities of the taken actions
    probs = d.behaviour_policy.action_probs(a.transitions().observations)
    np.testing.assert_allclose(a.behaviour_probs, probs[np.arange(a.n_transitions), a.actions])
    # each transition is the simulator's step
    t = a.transitions()
    nxt, r, _ = d.simulator.step(t.observations, t.actions)
    np.testing.assert_allclose(t.next_observations, nxt, rtol=1e-12)
    np.testing.assert_allclose(t.rewards, r, rtol=1e-12)


def test_target_is_covered_by_behaviour(mc: dom.OpeDomain, hiv: dom.OpeDomain) -> None:
    for d, rho_max in ((mc, 1 / 3 / (0.1 / 3)), (hiv, 4.0)):
        obs = d.sample(d.behaviour_policy, 20, seed=1).transitions().observations
        pt = d.target_policy.action_probs(obs)
        pb = d.behaviour_policy.action_probs(obs)
        assert np.all(pb[pt > 0] > 0)
        rho = pt / pb
        assert rho.max() <= rho_max + 1e-9


def test_on_policy_mode(cache: object) -> None:
    d = get_domain("mountain-car", seed=0, train=MC_TINY, progress=False, mode="on-policy")
    assert d.target_policy is d.behaviour_policy
    assert d.sample(d.target_policy, 2, seed=0).metadata.extra["policy"] == "target=behaviour"


def test_mountain_car_episode_ends(mc: dom.OpeDomain) -> None:
    ds = mc.sample(mc.behaviour_policy, 30, seed=3, horizon=150)
    last = ds.episode_offsets[1:] - 1
    final = ds.observations[ds.episode_offsets[1:] + np.arange(ds.n_episodes)]
    np.testing.assert_array_equal(ds.terminated[last], final[:, 0] >= 0.5)
    np.testing.assert_array_equal(
        ds.truncated[last], (ds.episode_lengths == 150) & ~ds.terminated[last]
    )
    assert np.all(ds.terminated[last] | ds.truncated[last])
    assert ds.metadata.horizon == 150


def test_iter_samples_chunks(mc: dom.OpeDomain) -> None:
    sizes = [
        ds.n_episodes for ds in mc.iter_samples(mc.behaviour_policy, 25, seed=0, chunk_size=10)
    ]
    assert sizes == [10, 10, 5]


def test_trained_once_then_loaded_from_cache(
    mc: dom.OpeDomain, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = domain_cache_path("mountain-car", 0, MC_TINY)
    assert path.exists() and path.parent == cache_dir() / "ope"

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("retrained although cached")

    monkeypatch.setattr(dom, "sarsa_lambda", boom)
    again = get_domain("mountain-car", seed=0, train=MC_TINY, progress=False)
    np.testing.assert_array_equal(again.q_function.weights, mc.q_function.weights)


def test_cache_paths_and_deterministic_training(cache: object) -> None:
    assert domain_cache_path("hiv", 3) == cache_dir() / "ope" / "hiv-3.npz"
    assert domain_cache_path("mountain-car", 1, dom.MC_TRAIN).name == "mountain-car-1.npz"
    assert domain_cache_path("mountain-car", 1, MC_TINY).name.startswith("mountain-car-1-")
    cfg = SarsaLambdaConfig(episodes=3)
    a = get_domain("mountain-car", seed=5, train=cfg, progress=False, cache=False)
    b = get_domain("mountain-car", seed=5, train=cfg, progress=False, cache=False)
    np.testing.assert_array_equal(a.q_function.weights, b.q_function.weights)
    assert not domain_cache_path("mountain-car", 5, cfg).exists()


def test_stale_cache_is_retrained(cache: object) -> None:
    cfg = SarsaLambdaConfig(episodes=2)
    path = domain_cache_path("mountain-car", 9, cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not an npz file")
    d = get_domain("mountain-car", seed=9, train=cfg, progress=False)
    assert d.q_function.weights.shape == (3, 36)
    with np.load(path) as z:
        assert int(z["version"]) == dom.CACHE_VERSION


def test_policy_from_spec(mc: dom.OpeDomain, hiv: dom.OpeDomain) -> None:
    obs = mc.sample(mc.behaviour_policy, 3, seed=0).transitions().observations
    assert policy_from_spec(mc, "target") is mc.target_policy
    assert policy_from_spec(mc, "behaviour") is mc.behaviour_policy
    assert policy_from_spec(mc, "behavior") is mc.behaviour_policy
    np.testing.assert_allclose(policy_from_spec(mc, "uniform").action_probs(obs), 1 / 3)
    greedy = policy_from_spec(mc, "greedy").action_probs(obs)
    np.testing.assert_array_equal(greedy.max(axis=1), 1.0)
    eg = policy_from_spec(mc, "epsilon-greedy:0.3").action_probs(obs)
    np.testing.assert_allclose(eg.max(axis=1), 0.8)
    sm = policy_from_spec(mc, "softmax:0.5")
    assert isinstance(sm, SoftmaxQPolicy) and sm.scale == "value"
    assert policy_from_spec(hiv, "softmax:0.1").scale == "log"
    for bad, match in (
        ("softmax", "give a number"),
        ("softmax:abc", "give a number"),
        ("softmax:0", "positive"),
        ("epsilon-greedy:1.5", r"\[0, 1\]"),
        ("greedy:2", "no argument"),
        ("optimal", "unknown policy spec"),
    ):
        with pytest.raises(ValueError, match=match):
            policy_from_spec(mc, bad)


def test_get_domain_errors(cache: object) -> None:
    with pytest.raises(ValueError, match="unknown OPE domain"):
        get_domain("cartpole")
    with pytest.raises(ValueError, match="unknown override"):
        get_domain("mountain-car", temperature=1.0)
    with pytest.raises(ValueError, match="mode"):
        get_domain("hiv", mode="offline")
    with pytest.raises(ValueError, match="SarsaLambdaConfig"):
        get_domain("mountain-car", train=HIV_TINY, progress=False)
    with pytest.raises(ValueError, match="epsilon"):
        get_domain("mountain-car", seed=0, train=MC_TINY, progress=False, epsilon=0.0)


def test_hiv_behaviour_temperature_calibration(hiv: dom.OpeDomain) -> None:
    d = get_domain("hiv", seed=0, train=HIV_TINY, progress=False, behaviour_greedy_prob=0.6)
    cache_file = np.load(domain_cache_path("hiv", 0, HIV_TINY))
    states = cache_file["target_states"]
    p = d.behaviour_policy.action_probs(states).max(axis=1).mean()
    assert p == pytest.approx(0.6, abs=1e-6)
    fixed = get_domain("hiv", seed=0, train=HIV_TINY, progress=False, temperature=0.05)
    assert fixed.behaviour_policy.temperature == 0.05


@pytest.mark.slow
def test_full_budget_mountain_car_policy_solves_the_task() -> None:
    """The cached (default-budget) learned policy: greedy reaches the goal from every start,
    in < 300 steps on average; the behaviour (ε = 0.1) too."""
    d = get_domain("mountain-car", seed=0, progress=False)
    for pol in (policy_from_spec(d, "greedy"), d.behaviour_policy):
        ds = d.sample(pol, 200, seed=11)
        assert ds.terminated.sum() == 200
        assert ds.episode_lengths.mean() < 300


@pytest.mark.slow
def test_full_budget_hiv_policy_beats_fixed_treatments() -> None:
    d = get_domain("hiv", seed=0, progress=False)
    info = d.info
    assert info["greedy_return"] > 10 * max(
        info["never_treat_return"], info["always_treat_return"], info["uniform_return"]
    )
