"""HIV simulator: the ODE, the integrator's accuracy, the steady states, actions, batching."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from scipy.integrate import solve_ivp

from privrl.envs.hiv import (
    ACTIONS,
    HEALTHY_STATE,
    INITIAL_STATE,
    UNHEALTHY_STATE,
    HIVBatch,
    HIVEnv,
    HIVParams,
    RewardWeights,
    hiv_rhs,
    log_state_statistics,
    register_envs,
    rk4_interval,
    stiffness,
)
from privrl.rl.features import HIV_LOG_MEAN, HIV_LOG_STD


def test_action_table_is_ernst_et_al() -> None:
    # (ε1, ε2) ∈ {0, 0.7} × {0, 0.3}, including (0, 0.3) (the rlpy table gets this one wrong)
    np.testing.assert_array_equal(ACTIONS, [[0, 0], [0.7, 0], [0, 0.3], [0.7, 0.3]])


def test_rhs_matches_the_equations_at_a_point() -> None:
    x = np.array([[2e5, 10.0, 1e4, 50.0, 5e4, 30.0]])
    e1, e2 = 0.7, 0.3
    p = HIVParams()
    t1, t2, t1s, t2s, v, ef = x[0]
    inf1 = (1 - e1) * 8e-7 * v * t1
    inf2 = (1 - 0.34 * e1) * 1e-4 * v * t2
    infected = t1s + t2s
    expected = [
        1e4 - 0.01 * t1 - inf1,
        31.98 - 0.01 * t2 - inf2,
        inf1 - 0.7 * t1s - 1e-5 * ef * t1s,
        inf2 - 0.7 * t2s - 1e-5 * ef * t2s,
        (1 - e2) * 100 * 0.7 * infected - 13 * v - (inf1 + inf2),
        1
        + 0.3 * infected / (infected + 100) * ef
        - 0.25 * infected / (infected + 500) * ef
        - 0.1 * ef,
    ]
    np.testing.assert_allclose(hiv_rhs(x, np.array([[e1, e2]]), p)[0], expected, rtol=1e-12)


def test_rk4_agrees_with_solve_ivp_through_a_stiff_rebound() -> None:
    """Treat 50 days, then stop: the virus rebound makes the system stiff (λ ≈ 80/day).

    Stated tolerance: relative error < 1e-3 per variable (measured ≈ 1e-4).
    """
    p = HIVParams()
    pa = p.as_arrays()
    x = INITIAL_STATE.copy()
    ref = INITIAL_STATE.copy()
    max_lam = 0.0
    for a in [3] * 10 + [0] * 8:
        eps = ACTIONS[[a]]
        sol = solve_ivp(
            lambda t, y, eps=eps: hiv_rhs(y[None], eps, pa)[0],
            (0.0, 5.0),
            ref,
            method="LSODA",
            rtol=1e-10,
            atol=1e-6,
        )
        ref = sol.y[:, -1]
        x = rk4_interval(x[None], eps, p)[0]
        max_lam = max(max_lam, float(stiffness(x[None], eps, p)[0]))
        np.testing.assert_allclose(x, ref, rtol=1e-3)
    assert max_lam > 40  # the scenario really is stiff (fixed 20-step RK4 would blow up)


def test_steady_states_of_adams_et_al() -> None:
    """Never treating: the healthy and unhealthy steady states stay put (to the rounding of the
    published values), and perturbed or early-infection states converge to the unhealthy one."""
    starts = np.stack(
        [
            HEALTHY_STATE,
            UNHEALTHY_STATE,
            UNHEALTHY_STATE * np.array([1.3, 0.7, 0.8, 1.2, 2.0, 0.5]),
            np.array([1e6, 3198.0, 1e-4, 1e-4, 1.0, 10.0]),  # uninfected + a few virions
        ]
    )
    sim = HIVBatch()
    x = starts
    for _ in range(200):  # 1000 days
        x, _, _ = sim.step(x, np.zeros(4, dtype=np.int64))
    np.testing.assert_allclose(x[0], HEALTHY_STATE, rtol=0.02)
    for i in (1, 2, 3):
        np.testing.assert_allclose(x[i], UNHEALTHY_STATE, rtol=0.02)
    # the published values are near-fixed points of the vector field (relative rates ≪ 1/day)
    for s in (HEALTHY_STATE, UNHEALTHY_STATE):
        rates = hiv_rhs(s[None], np.zeros((1, 2)), HIVParams())[0] / s
        assert np.all(np.abs(rates) < 0.07)


def test_reward_is_ernst_et_al() -> None:
    x = np.array([[2e5, 10.0, 1e4, 50.0, 5e4, 30.0]])
    eps = np.array([[0.7, 0.3]])
    expected = -(0.1 * 5e4 + 20000 * 0.49 + 2000 * 0.09 - 1000 * 30.0)
    assert RewardWeights().reward(x, eps)[0] == pytest.approx(expected)
    assert RewardWeights(scale=1e-5).reward(x, eps)[0] == pytest.approx(1e-5 * expected)


def test_per_episode_parameters_broadcast_over_the_batch() -> None:
    rng = np.random.default_rng(0)
    params = HIVParams().perturbed(3, 0.2, rng)
    assert params.batch_size() == 3 and np.asarray(params.k1).shape == (3,)
    x0 = np.tile(INITIAL_STATE, (3, 1))
    eps = ACTIONS[[0, 3, 1]]
    batch = rk4_interval(x0, eps, params)
    for i in range(3):
        scalar = HIVParams(**{k: float(v[i]) for k, v in params.as_arrays().items()})
        single = rk4_interval(x0[i : i + 1], eps[i : i + 1], scalar)
        np.testing.assert_array_equal(batch[i], single[0])
    assert not np.allclose(batch[0], batch[1])
    with pytest.raises(ValueError):
        HIVBatch(params).reset(4, rng)  # 3 episodes' parameters, 4 episodes
    with pytest.raises(ValueError):
        HIVParams(k1=np.ones(2), k2=np.ones(3)).batch_size()


def test_episode_does_not_depend_on_its_batch() -> None:
    x = np.stack([INITIAL_STATE, HEALTHY_STATE, INITIAL_STATE * 1.1])
    eps = ACTIONS[[0, 0, 2]]
    batch = rk4_interval(x, eps, HIVParams())
    alone = rk4_interval(x[2:], eps[2:], HIVParams())
    np.testing.assert_array_equal(batch[2], alone[0])


def test_batch_equals_gymnasium_env_step_by_step() -> None:
    rng = np.random.default_rng(1)
    env = HIVEnv(horizon=8)
    obs, _ = env.reset(seed=0)
    sim = HIVBatch(horizon=8)
    state = obs[None].copy()
    for t in range(8):
        a = int(rng.integers(4))
        obs, r, term, trunc, _ = env.step(a)
        state, rb, tb = sim.step(state, np.array([a]))
        np.testing.assert_array_equal(obs, state[0])
        assert r == rb[0] and not term and not tb[0]
        assert trunc == (t == 7)


@pytest.mark.filterwarnings("ignore:.*maximum value is infinity")  # cell counts are unbounded
def test_env_passes_gymnasium_checker() -> None:
    register_envs()
    register_envs()  # idempotent
    check_env(HIVEnv(horizon=10), skip_render_check=True)


def test_initial_state_spread() -> None:
    x = HIVBatch(init_log_std=0.1).reset(500, np.random.default_rng(0))
    z = np.log10(x / INITIAL_STATE)
    assert abs(z.std() - 0.1) < 0.01
    np.testing.assert_array_equal(HIVBatch().reset(2, np.random.default_rng(0))[1], INITIAL_STATE)


@pytest.mark.slow
def test_hiv_log_constants_reproduce_from_public_rollouts() -> None:
    mean, std = log_state_statistics(n_episodes=200, seed=0)
    np.testing.assert_allclose(mean, HIV_LOG_MEAN, atol=1e-4)
    np.testing.assert_allclose(std, HIV_LOG_STD, atol=1e-4)
