"""Stationary DP-APVI on cost-per-step logs: why no pessimism at all loses the optimal policy.

CliffWalking-v1 logs (`cliff_logs(n=1000)`, H = 20, public reward range [-100, 0], optimal
return -13). With ``stationary=True``, private rewards, ρ = 1e6 and ``bonus_scale=0`` the
learned policy wanders to the step cap (return -20) for every noise draw, while the per-step
model and stationary APVI reach -13. The pooled statistics are not at fault: the private
model's counts, P̃ and known mask are APVI's exactly. The reward sums are the cause. One
trajectory can add H entries to one pooled cell (bumping a wall for H steps), so the pooled
Δ₂ = √2·H and the noise on each reward sum is σ = H·√(3/ρ) = 0.035 in mapped units. That is
√H times the per-step σ = √(3H/ρ) = 0.0077, and 3.5 times the cost of one step, 1/100 on
this range. A wall bump visited once or three times gets r̃ = 1 (clipped), the absorbing
state's reward. The one table serves every step h, so looping on it is worth as much as
finishing at every remaining step, and the greedy planner picks it. Any bonus between 0.001
and 0.01 removes the tie (measured: -13 for all five draws at 0.0005, 0.001, 0.002, 0.005 and
0.01; the reward-noise term (tail + E)/ñ of Γ is large exactly where ñ is small). At 0.05 the
privacy term C2·S·H·E·ι/ñ dwarfs every reward, as it does for the theory bonus in the per-step
model. Choose the scale on public data, never on the private logs.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from privrl.data.dataset import TrajectoryDataset
from privrl.offline import APVI, DPAPVI
from privrl.offline.apvi import PrivacyConfig, noise_plan
from privrl.offline.common import RewardRange
from privrl.privacy.noise import NoiseSource
from tests.offline.test_reward_range import (
    ENV,
    OPTIMAL_RETURN,
    START,
    H,
    cliff_logs,
    rollout_return,
)

RHO = 1e6
RANGE = (-100.0, 0.0)
STEP_COST = 1.0 / 100.0  # a reward of -1 costs this much in mapped units on [-100, 0]
DRAWS = range(5)


@pytest.fixture(scope="module")
def logs() -> TrajectoryDataset:
    return cliff_logs(n=1000)


def private(bonus_scale: float, stationary: bool = True) -> DPAPVI:
    return DPAPVI(
        rho=RHO,
        horizon=H,
        reward_range=RANGE,
        privatize_rewards=True,
        stationary=stationary,
        bonus_scale=bonus_scale,
    )


def test_the_pooled_private_model_is_apvis_at_a_large_rho(logs: TrajectoryDataset) -> None:
    """Counts, P̃ and the known mask of the pooled private model are APVI's exactly
    (discrete noise of σ = 0.035 draws 0 there), padding and masks included; the rewards of
    well-visited pairs agree to the noise of their sums."""
    apvi = APVI(horizon=H, reward_range=RANGE, stationary=True, bonus_scale=0.0).fit(logs)
    a = apvi.details.model
    for k in DRAWS:
        d = private(0.0).fit(logs, noise=NoiseSource.insecure(k)).details.model
        np.testing.assert_array_equal(d.n_sa, a.n_sa)
        np.testing.assert_array_equal(d.P, a.P)
        np.testing.assert_array_equal(d.known, a.known)
        busy = a.n_sa >= 500
        assert busy.sum() >= 10
        assert np.abs(d.reward[busy] - a.reward[busy]).max() < 1e-3


def test_pooled_reward_noise_exceeds_the_cost_of_a_step() -> None:
    """The documented scales: pooled Δ₂ = √2·H, σ = Δ₂/√(2ρ/3) = H·√(3/ρ) > one step's cost;
    per step Δ₂ = √(2H), σ = √(3H/ρ) < one step's cost."""
    privacy = PrivacyConfig.gaussian(RHO, privatize_rewards=True)
    pooled = noise_plan(H, 49, 4, privacy, 0.1, stationary=True)
    per_step = noise_plan(H, 49, 4, privacy, 0.1, stationary=False)
    assert pooled.sensitivity == pytest.approx(math.sqrt(2.0) * H)
    assert per_step.sensitivity == pytest.approx(math.sqrt(2.0 * H))
    assert pooled.scale == pytest.approx(H * math.sqrt(3.0 / RHO))
    assert per_step.scale == pytest.approx(math.sqrt(3.0 * H / RHO))
    assert pooled.scale > 3 * STEP_COST
    assert per_step.scale < STEP_COST
    assert pooled.E > 4 * per_step.E  # √H times the σ, a shorter union bound


def _first_self_loop(fit, env) -> tuple[int, int, int] | None:
    """(h, s, a) of the first greedy step from the start whose move stays in s."""
    s = START
    for h in range(H):
        a = int(fit.details.values.policy[h, s])
        _, s_next, _, done = env.P[s][a][0]
        if s_next == s:
            return h, s, a
        if done:
            return None
        s = s_next
    return None


def test_without_pessimism_a_noisy_wall_bump_ties_with_finishing(logs: TrajectoryDataset) -> None:
    """bonus_scale 0: for every draw the greedy path reaches a wall bump seen at most three
    times whose r̃ clipped to 1, the absorbing state's reward, and stays there with the
    largest value a step can have (H − h); the return is the step cap's. The per-step model
    and stationary APVI find the optimum on the same logs."""
    env = gym.make(ENV).unwrapped
    zero = RewardRange(*RANGE).zero
    for k in DRAWS:
        fit = private(0.0).fit(logs, noise=NoiseSource.insecure(k))
        assert rollout_return(fit.policy) == -float(H)
        loop = _first_self_loop(fit, env)
        assert loop is not None, k
        h, s, a = loop
        model, values = fit.details.model, fit.details.values
        assert model.known[0, s, a] and model.n_sa[0, s, a] <= 3
        assert model.reward[0, s, a] == zero == 1.0
        assert values.Q[h, s, a] == pytest.approx(H - h)
        per_step = private(0.0, stationary=False).fit(logs, noise=NoiseSource.insecure(k))
        assert rollout_return(per_step.policy) == OPTIMAL_RETURN
    apvi = APVI(horizon=H, reward_range=RANGE, stationary=True, bonus_scale=0.0).fit(logs)
    assert rollout_return(apvi.policy) == OPTIMAL_RETURN


@pytest.mark.parametrize("bonus_scale", [0.001, 0.01])
def test_a_small_bonus_learns_the_optimal_stationary_policy(
    logs: TrajectoryDataset, bonus_scale: float
) -> None:
    returns = [
        rollout_return(private(bonus_scale).fit(logs, noise=NoiseSource.insecure(k)).policy)
        for k in DRAWS
    ]
    assert returns == [OPTIMAL_RETURN] * len(DRAWS)


def test_a_bonus_of_005_is_dominated_by_the_pooled_privacy_term(logs: TrajectoryDataset) -> None:
    """At bonus_scale 0.05 the pooled privacy term 0.05·C2·S·H·E·ι/ñ exceeds the largest
    mapped reward of a step on every action of the start (E = 0.36 pooled, 4.0 times the
    per-step E = 0.088), so every Q̃ there clips to 0."""
    from privrl.offline.apvi import C2

    fit = private(0.05).fit(logs, noise=NoiseSource.insecure(0))
    plan, model, values = fit.details.plan, fit.details.model, fit.details.values
    S = values.V.shape[1]
    term = 0.05 * C2 * S * H * plan.E * plan.iota / model.n_sa[0, START]
    assert np.all(term > 1.0)
    assert np.all(values.Q[0, START] == 0.0)
    assert rollout_return(fit.policy) < OPTIMAL_RETURN
