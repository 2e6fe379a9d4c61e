"""The pessimistic model MDP r̃ = r̂ − λu: u_MA, u_MA-Frobenius and u_MPD on hand-built
ensembles whose values are known in closed form, and the penalised step."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from privrl.primorl.dynamics import DynamicsModel, dynamics_config
from privrl.primorl.pessimism import PENALTIES, PenalizedModel, uncertainty

torch.set_num_threads(1)


class HandBuiltEnsemble:
    """A 'model' whose members predict fixed means/stds of [Δs, r] for every (s, a)."""

    obs_dim = 2
    act_dim = 1

    def __init__(self, means: np.ndarray, stds: np.ndarray, reward: float = 1.0) -> None:
        self.means, self.stds, self.reward = means, stds, reward

    def predict(
        self, obs: Any, act: Any, generator: Any = None, deterministic: bool = False
    ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        b = len(obs)
        n = self.means.shape[0]
        means = np.broadcast_to(self.means[:, None, :], (n, b, 3)).copy()
        stds = np.broadcast_to(self.stds[:, None, :], (n, b, 3)).copy()
        return np.asarray(obs) + 0.5, np.full(b, self.reward), {"means": means, "stds": stds}


# Three members; outputs [Δs0, Δs1, r].
MEANS = np.array([[0.0, 0.0, 10.0], [3.0, 4.0, 0.0], [0.0, -3.0, 0.0]])
STDS = np.array([[3.0, 4.0, 0.0], [1.0, 1.0, 1.0], [0.5, 0.5, 2.0]])


def _info(b: int = 4) -> dict[str, Any]:
    _, _, info = HandBuiltEnsemble(MEANS, STDS).predict(np.zeros((b, 2)), np.zeros((b, 1)))
    return info


def test_u_ma_is_the_largest_member_std_norm() -> None:
    # ‖(3, 4, 0)‖ = 5 beats ‖(1, 1, 1)‖ = √3 and ‖(.5, .5, 2)‖ = √4.5 (reward included, MOPO)
    np.testing.assert_allclose(uncertainty(_info(), "ma"), 5.0)


def test_u_ma_frobenius_is_the_largest_covariance_norm() -> None:
    # ‖diag(σ²)‖_F: (9, 16, 0) → √337; (.25, .25, 4) → √16.125; (1, 1, 1) → √3
    np.testing.assert_allclose(uncertainty(_info(), "ma-frobenius"), math.sqrt(337.0))


def test_u_mpd_is_the_largest_pairwise_mean_distance_over_states() -> None:
    # states only: |m0 − m1| = 5, |m0 − m2| = 3, |m1 − m2| = √(9 + 49) = √58
    np.testing.assert_allclose(uncertainty(_info(), "mpd"), math.sqrt(58.0))
    # with the reward another pair wins: |m0 − m1| = √(25 + 100) > √(9 + 100) > √58
    np.testing.assert_allclose(
        uncertainty(_info(), "mpd", mpd_include_reward=True), math.sqrt(125.0)
    )


@pytest.mark.parametrize(
    ("penalty", "u"), [("ma", 5.0), ("ma-frobenius", math.sqrt(337.0)), ("mpd", math.sqrt(58.0))]
)
def test_penalised_reward_is_model_reward_minus_lambda_u(penalty: str, u: float) -> None:
    pm = PenalizedModel(HandBuiltEnsemble(MEANS, STDS, reward=1.5), penalty, lam=2.0)
    step = pm.step(np.zeros((5, 2)), np.zeros((5, 1)), generator=None)
    np.testing.assert_allclose(step.model_reward, 1.5)
    np.testing.assert_allclose(step.uncertainty, u)
    np.testing.assert_allclose(step.reward, 1.5 - 2.0 * u)
    np.testing.assert_allclose(step.next_obs, 0.5)


def test_lambda_zero_leaves_the_reward_unpenalised() -> None:
    pm = PenalizedModel(HandBuiltEnsemble(MEANS, STDS, reward=0.25), "ma", lam=0.0)
    np.testing.assert_allclose(pm.step(np.zeros((3, 2)), np.zeros((3, 1)), None).reward, 0.25)


def test_bad_penalty_or_lambda_is_refused() -> None:
    model = HandBuiltEnsemble(MEANS, STDS)
    with pytest.raises(ValueError, match="unknown penalty"):
        PenalizedModel(model, "variance", 1.0)
    with pytest.raises(ValueError, match="λ"):
        PenalizedModel(model, "ma", -1.0)
    with pytest.raises(ValueError, match="λ"):
        PenalizedModel(model, "ma", math.inf)
    assert set(PENALTIES) == {"ma", "ma-frobenius", "mpd"}


def test_identical_members_have_zero_disagreement_on_the_real_model() -> None:
    """u_MPD of a real DynamicsModel whose members are copies of one network is 0, and then
    r̃ = r̂; u_MA of the same model is the (positive) predicted std norm."""
    model = DynamicsModel(3, 1, dynamics_config("pendulum"), seed=0)
    params = model.ensemble.parameters_dict()
    with torch.no_grad():
        for v in params.values():
            v.copy_(v[:, :1].expand_as(v))
    rng = np.random.default_rng(0)
    obs, act = rng.normal(size=(16, 3)), rng.uniform(-2, 2, size=(16, 1))
    step = PenalizedModel(model, "mpd", lam=2.0).step(obs, act, torch.Generator().manual_seed(0))
    np.testing.assert_allclose(step.uncertainty, 0.0, atol=1e-6)
    np.testing.assert_allclose(step.reward, step.model_reward, atol=1e-5)
    ma = PenalizedModel(model, "ma", lam=1.0).step(obs, act, torch.Generator().manual_seed(0))
    assert np.all(ma.uncertainty > 0)
    # the default ensemble (members differ) disagrees
    fresh = DynamicsModel(3, 1, dynamics_config("pendulum"), seed=1)
    u = PenalizedModel(fresh, "mpd", 1.0).step(obs, act, torch.Generator().manual_seed(0))
    assert np.all(u.uncertainty > 0)


def _numpy_step(model: DynamicsModel, penalty: str, obs: np.ndarray, act: np.ndarray) -> tuple:
    """The penalised step computed from the model's numpy outputs (every member's means and
    stds brought to the CPU): what `PenalizedModel.step` must equal."""
    nxt, r_hat, info = model.predict(obs, act, torch.Generator().manual_seed(3))
    u = uncertainty(info, penalty)
    return np.asarray(nxt, np.float64), np.asarray(r_hat, np.float64) - 0.7 * u, u


@pytest.mark.parametrize("penalty", PENALTIES)
def test_the_step_reduces_u_on_the_model_and_equals_the_numpy_path(penalty: str) -> None:
    """The step keeps the [N, B, ·] member outputs where the model lives and moves only s', r̂
    and u; on the CPU that is the numpy path bit for bit."""
    model = DynamicsModel(3, 1, dynamics_config("pendulum"), seed=4)
    rng = np.random.default_rng(2)
    obs, act = rng.normal(size=(32, 3)), rng.uniform(-2, 2, size=(32, 1))
    step = PenalizedModel(model, penalty, lam=0.7).step(obs, act, torch.Generator().manual_seed(3))
    nxt, reward, u = _numpy_step(model, penalty, obs, act)
    assert step.next_obs.dtype == step.reward.dtype == step.uncertainty.dtype == np.float64
    np.testing.assert_array_equal(step.next_obs, nxt)
    np.testing.assert_array_equal(step.uncertainty, u)
    np.testing.assert_array_equal(step.reward, reward)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")
@pytest.mark.parametrize("penalty", PENALTIES)
def test_the_penalised_step_agrees_on_cpu_and_cuda(penalty: str) -> None:
    rng = np.random.default_rng(5)
    obs, act = rng.normal(size=(32, 3)), rng.uniform(-2, 2, size=(32, 1))
    steps = [
        PenalizedModel(
            DynamicsModel(3, 1, dynamics_config("pendulum"), seed=4, device=d), penalty, 0.7
        ).step(obs, act, torch.Generator().manual_seed(3))
        for d in ("cpu", "cuda")
    ]
    for field in ("next_obs", "reward", "uncertainty"):
        got, want = getattr(steps[1], field), getattr(steps[0], field)
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
