"""Perturbed physics: numpy CartPole/Acrobot equal gymnasium's, HIV perturbations, grids."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from privrl.envs.hiv import ACTIONS, HIVBatch, RewardWeights
from privrl.envs.perturbed import (
    HIV_DEFAULT,
    PAPER_GRIDS,
    AcrobotBatch,
    AcrobotParams,
    CartPoleBatch,
    CartPoleParams,
    PerturbationGrid,
    PerturbedHIVBatch,
    expert_settings,
    lunar_lander_rollout,
    make_lunar_lander,
    numpy_rollout,
    set_lunar_lander_physics,
)

# ----------------------------------------------------------------------------- CartPole


@pytest.mark.parametrize(
    "phys", [{}, {"gravity": 8.75, "force_mag": 11.25, "masscart": 0.8}], ids=["default", "pert"]
)
def test_cartpole_equals_gymnasium_including_termination(phys: dict) -> None:
    env = gym.make("CartPole-v1").unwrapped
    for k, v in phys.items():
        setattr(env, k, v)
    env.total_mass = env.masspole + env.masscart  # as gymnasium's __init__ computes them
    env.polemass_length = env.masspole * env.length
    sim = CartPoleBatch(CartPoleParams(**phys))
    rng = np.random.default_rng(0)
    n_term = 0
    for ep in range(30):
        obs, _ = env.reset(seed=ep)
        s = env.state.copy()[None]
        for _ in range(300):
            a = int(rng.integers(2))
            obs, r, term, _, _ = env.step(a)
            s, rr, tt = sim.step(s, np.array([a]))
            np.testing.assert_allclose(s[0], env.state, rtol=0, atol=1e-12)
            np.testing.assert_array_equal(sim.observe(s)[0], obs)
            assert rr[0] == r and bool(tt[0]) == term
            if term:
                n_term += 1
                break
    assert n_term == 30  # random actions always topple the pole: termination was compared


def test_cartpole_per_episode_parameters_follow_their_episode() -> None:
    """Episodes drop out of the batch as they terminate; each keeps its own physics."""
    g = np.array([8.75, 11.0, 9.5, 10.25])
    sim = CartPoleBatch(CartPoleParams(gravity=g))

    def act(obs, idx, rng):
        return (obs[:, 2] > 0).astype(np.int64)  # a poor controller: varied episode lengths

    batch = numpy_rollout(sim, act, 4, 200, np.random.default_rng(3))
    start = CartPoleBatch().reset(4, np.random.default_rng(3))
    for i in range(4):
        s, t = start[i : i + 1], 0
        one = CartPoleBatch(CartPoleParams(gravity=g[i]))
        while t < 200:
            s, _, term = one.step(s, act(one.observe(s), None, None))
            t += 1
            if term[0]:
                break
        assert batch.lengths[i] == t
        np.testing.assert_array_equal(batch.obs[i, t], one.observe(s)[0])
    assert len(set(batch.lengths.tolist())) > 1


def test_cartpole_linearisation_matches_finite_differences() -> None:
    sim = CartPoleBatch(
        CartPoleParams(gravity=np.array([9.0, 11.0]), masscart=np.array([0.8, 1.2]))
    )
    a, b = sim.linearised()
    h = 1e-6
    for j in range(4):
        e = np.zeros((2, 4))
        e[:, j] = h
        # force enters linearly: average the two pushes to get the u = 0 derivative
        fp = 0.5 * (sim.step(e, np.array([1, 1]))[0] + sim.step(e, np.array([0, 0]))[0])
        fm = 0.5 * (sim.step(-e, np.array([1, 1]))[0] + sim.step(-e, np.array([0, 0]))[0])
        np.testing.assert_allclose((fp - fm) / (2 * h), a[:, :, j], atol=1e-6)
    z = np.zeros((2, 4))
    du = (sim.step(z, np.array([1, 1]))[0] - sim.step(z, np.array([0, 0]))[0]) / 20.0
    np.testing.assert_allclose(du, b, atol=1e-12)


# ----------------------------------------------------------------------------- Acrobot


@pytest.mark.parametrize("length,m1,m2", [(1.0, 1.0, 1.0), (0.8, 0.9, 1.1), (1.2, 1.1, 0.9)])
def test_acrobot_equals_gymnasium(length: float, m1: float, m2: float) -> None:
    env = gym.make("Acrobot-v1").unwrapped
    env.LINK_LENGTH_1 = env.LINK_LENGTH_2 = length
    env.LINK_MASS_1, env.LINK_MASS_2 = m1, m2
    sim = AcrobotBatch(
        AcrobotParams(link_length_1=length, link_length_2=length, link_mass_1=m1, link_mass_2=m2)
    )
    rng = np.random.default_rng(1)
    worst = 0.0
    for ep in range(5):
        obs, _ = env.reset(seed=ep)
        s = env.state.astype(np.float64)[None]
        for _ in range(200):
            a = int(rng.integers(3))
            obs, r, term, _, _ = env.step(a)
            s, rr, tt = sim.step(s, np.array([a]))
            worst = max(worst, float(np.abs(s[0] - env.state).max()))
            np.testing.assert_allclose(sim.observe(s)[0], obs, atol=1e-6)
            assert rr[0] == r and bool(tt[0]) == term
            if term:
                break
    assert worst < 1e-8


def test_acrobot_reset_is_gymnasiums_distribution() -> None:
    s = AcrobotBatch().reset(1000, np.random.default_rng(0))
    assert np.all(np.abs(s) <= 0.1) and np.array_equal(s, s.astype(np.float32))
    assert s.std() > 0.05


def test_acrobot_wraps_angles_and_clips_velocities() -> None:
    sim = AcrobotBatch()
    s = np.array([[3.1, -3.1, 12.5, 28.0]])
    for _ in range(20):
        s, _, _ = sim.step(s, np.array([2]))
        assert np.all(np.abs(s[:, :2]) <= np.pi)
        assert abs(s[0, 2]) <= 4 * np.pi and abs(s[0, 3]) <= 9 * np.pi


# ----------------------------------------------------------------------------- HIV


def test_perturbed_hiv_default_equals_hivbatch() -> None:
    base = HIVBatch(
        interval=HIV_DEFAULT["interval"],
        horizon=int(HIV_DEFAULT["horizon"]),
        reward=RewardWeights(scale=HIV_DEFAULT["reward_scale"]),
    )
    sim = PerturbedHIVBatch()
    rng = np.random.default_rng(0)
    x = sim.reset(4, rng)
    a = np.array([0, 1, 2, 3])
    x1, r1, t1 = sim.step(x, a)
    x2, r2, t2 = base.step(x, a)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(r1, r2)
    assert not t1.any() and not t2.any()


def test_hiv_penalties_enter_the_reward_only() -> None:
    x = PerturbedHIVBatch().reset(2, np.random.default_rng(0))
    a = np.array([3, 3])
    lo = PerturbedHIVBatch(r1=np.array([18750.0, 18750.0]), r2=np.array([1850.0, 2150.0]))
    hi = PerturbedHIVBatch(r1=np.array([21250.0, 21250.0]), r2=np.array([1850.0, 2150.0]))
    (xl, rl, _), (xh, rh, _) = lo.step(x, a), hi.step(x, a)
    np.testing.assert_array_equal(xl, xh)
    # r = scale·(S E − Q V − R1 ε1² − R2 ε2²): ΔR1 = 2500 costs 2500·0.49·scale
    np.testing.assert_allclose(rl - rh, 2500 * 0.7**2 * HIV_DEFAULT["reward_scale"], rtol=1e-9)
    np.testing.assert_allclose(rl[0] - rl[1], 300 * 0.3**2 * HIV_DEFAULT["reward_scale"], rtol=1e-6)


def test_hiv_efficacy_noise_only_on_given_drugs() -> None:
    x = PerturbedHIVBatch().reset(3, np.random.default_rng(0))
    noisy = PerturbedHIVBatch(efficacy_std=np.full(3, 0.01))
    clean = PerturbedHIVBatch()
    xn, _, _ = noisy.step(x, np.array([0, 0, 0]), np.random.default_rng(1))
    xc, _, _ = clean.step(x, np.array([0, 0, 0]))
    np.testing.assert_array_equal(xn, xc)  # no drug given: nothing to perturb
    xn, _, _ = noisy.step(x, np.array([3, 3, 3]), np.random.default_rng(1))
    xc, _, _ = clean.step(x, np.array([3, 3, 3]))
    assert not np.allclose(xn, xc, rtol=1e-9)
    np.testing.assert_allclose(xn, xc, rtol=0.2)  # std 0.01 on ε: a small change
    with pytest.raises(ValueError, match="rng"):
        noisy.step(x, np.array([3, 3, 3]))
    assert ACTIONS[3].tolist() == [0.7, 0.3]


# ----------------------------------------------------------------------------- grids


def test_paper_grids_are_appendix_b1() -> None:
    cp, ac, ll, hv = (PAPER_GRIDS[k] for k in ("cartpole", "acrobot", "lunarlander", "hiv"))
    assert cp.bounds() == {
        "gravity": (8.75, 11.0),
        "force_mag": (9.0, 11.25),
        "masscart": (0.8, 1.25),
    }
    assert ac.bounds() == {
        "link_length": (0.8, 1.2),
        "link_mass_1": (0.9, 1.1),
        "link_mass_2": (0.9, 1.1),
    }
    assert ll.bounds() == {
        "gravity": (-11.0, -9.0),
        "wind_power": (0.0, 5.0),
        "turbulence_power": (0.0, 0.5),
    }
    assert hv.bounds() == {
        "r1": (18750.0, 21250.0),
        "r2": (1850.0, 2150.0),
        "efficacy_std": (0.0, 0.01),
    }
    assert (cp.size, ac.size, ll.size, hv.size) == (1000, 1000, 1000, 2000)


@pytest.mark.parametrize("env", ["cartpole", "acrobot", "lunarlander", "hiv"])
def test_expert_settings_tile_the_grid_within_bounds(env: str) -> None:
    grid = PAPER_GRIDS[env]
    st = expert_settings(grid, 3000, np.random.default_rng(0))
    counts = np.bincount(st["setting"].astype(int), minlength=grid.size)
    if grid.size == 1000:
        assert np.all(counts == 3)
    else:  # HIV: every setting's best agent plus 1000 second-best ones
        assert np.all(counts >= 1) and (counts == 2).sum() == 1000
    for name, (lo, hi) in grid.bounds().items():
        assert st[name].min() >= lo and st[name].max() <= hi
        assert len(np.unique(st[name])) == len(grid.axes[name])
    few = expert_settings(grid, 50, np.random.default_rng(1))
    assert len(np.unique(few["setting"])) == 50


def test_grid_points_and_bad_m() -> None:
    g = PerturbationGrid.linspace("x", a=(0.0, 1.0, 2), b=(5.0, 6.0, 3))
    pts = g.points()
    assert g.size == 6 and pts["a"].tolist() == [0, 0, 0, 1, 1, 1]
    assert pts["b"].tolist() == [5, 5.5, 6, 5, 5.5, 6]
    with pytest.raises(ValueError):
        expert_settings(g, 0, np.random.default_rng(0))


# ----------------------------------------------------------------------------- LunarLander


def test_lunar_lander_physics_and_rollout_match_gymnasium() -> None:
    from gymnasium.envs.box2d.lunar_lander import heuristic

    env = make_lunar_lander()
    set_lunar_lander_physics(env, -9.5, 3.0, 0.25)
    env.reset(seed=0)
    assert env.world.gravity[1] == pytest.approx(-9.5) and env.enable_wind
    with pytest.raises(ValueError, match="gravity"):
        set_lunar_lander_physics(env, -12.5, 0.0, 0.0)

    ref = gym.make(
        "LunarLander-v3", gravity=-9.5, enable_wind=True, wind_power=3.0, turbulence_power=0.25
    )
    s, _ = ref.reset(seed=7)
    total, steps = 0.0, 0
    while True:
        s, r, term, trunc, _ = ref.step(heuristic(ref, s))
        total, steps = total + r, steps + 1
        if term or trunc:
            break
    phys = {
        "gravity": np.array([-9.5]),
        "wind_power": np.array([3.0]),
        "turbulence_power": np.array([0.25]),
    }
    ro = lunar_lander_rollout(
        lambda obs, idx, rng: np.array([heuristic(ref, o) for o in obs]),
        np.array([7]),
        np.random.default_rng(0),
        physics=phys,
    )
    assert ro.lengths[0] == steps and ro.returns()[0] == pytest.approx(total, abs=1e-6)
    assert ro.terminated[0] == (steps < 1000)
