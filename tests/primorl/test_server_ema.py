"""A moving average of DP-FedAvg's server iterates (``server_ema`` γ): the evaluated, kept and
released parameters are the bias-corrected EMA of θ(1..t), a function of the noisy iterates
alone, so the mechanism, the event and ε are those of the run without it."""

from __future__ import annotations

import pytest
import torch

from privrl.nn.normalizer import Normalizer
from privrl.primorl import dp_fedavg as fed
from privrl.primorl.dynamics import DynamicsModel
from tests.noise import noise_source
from tests.primorl.test_dp_fedavg import SMALL, _dataset, _plan

torch.set_num_threads(1)

KW = dict(n_units=10, sampling_rate=0.5, max_rounds=4)


def _train(plan: fed.DpFedAvgPlan, states: list[dict], resume=None) -> DynamicsModel:
    """A short run without public split (so the final parameters are the last iterate's, or
    its EMA's) on a fixed insecure noise stream; every round's state to `states`."""
    model = DynamicsModel(3, 1, SMALL)
    model.input_normalizer = Normalizer.from_bounds([-5.0] * 4, [5.0] * 4, source="bounds")
    fed.train_dp_fedavg(
        model,
        _dataset([20] * 10, seed=4),
        plan,
        normalizer="model",
        seed=0,
        noise=noise_source(0),
        resume=resume,
        on_checkpoint=states.append,
        checkpoint_every=1,
    )
    return model


def _released(model: DynamicsModel) -> torch.Tensor:
    layout = fed.EnsembleLayout(model.ensemble)
    return layout.flatten(model.ensemble.parameters_dict())


def test_the_release_is_the_bias_corrected_ema_of_the_same_iterates() -> None:
    plain_states: list[dict] = []
    plain = _released(_train(_plan(**KW), plain_states))
    ema_states: list[dict] = []
    gamma = 0.8
    averaged = _released(_train(_plan(server_ema=gamma, **KW), ema_states))
    thetas = [s["theta"] for s in plain_states]
    # θ steps as without the average (same noise stream): only what is released differs
    for a, b in zip(thetas, (s["theta"] for s in ema_states), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(plain, thetas[-1], rtol=0, atol=0)
    a = torch.zeros_like(thetas[0])
    for theta in thetas:  # a(t) = γ a(t−1) + (1 − γ) θ(t)
        a = gamma * a + (1 - gamma) * theta
    want = a / (1 - gamma ** len(thetas))
    torch.testing.assert_close(averaged, want, rtol=1e-6, atol=1e-7)
    assert not torch.allclose(averaged, plain)


def test_the_event_and_epsilon_are_unchanged_and_the_release_names_the_average() -> None:
    plain, averaged = _plan(**KW), _plan(server_ema=0.9, **KW)
    assert averaged.event(4) == plain.event(4) and averaged.epsilon(4) == plain.epsilon(4)
    release = averaged.release(4, 5)
    assert release.sensitivity == plain.release(4, 5).sensitivity
    assert "moving average" in release.extra["released_iterate"]
    assert "released_iterate" not in plain.release(4, 5).extra


def test_an_interrupted_run_resumes_to_the_same_average_and_refuses_another_gamma() -> None:
    plan = _plan(server_ema=0.8, **KW)
    states: list[dict] = []
    straight = _released(_train(plan, states))
    assert states[1]["server_ema"] == 0.8 and states[1]["ema"] is not None
    resumed = _released(_train(plan, [], resume=states[1]))  # from round 2, same streams
    torch.testing.assert_close(resumed, straight, rtol=0, atol=0)
    with pytest.raises(ValueError, match="server EMA"):
        _train(_plan(server_ema=0.5, **KW), [], resume=states[1])
    old = {k: v for k, v in states[1].items() if k not in ("server_ema", "ema")}
    with pytest.raises(ValueError, match="server EMA"):  # made before the option: γ = 0
        _train(plan, [], resume=old)


@pytest.mark.parametrize("gamma", [-0.1, 1.0, float("nan")])
def test_gamma_must_be_in_0_1(gamma: float) -> None:
    with pytest.raises(ValueError, match="server EMA"):
        fed.DpFedAvgConfig(server_ema=gamma)
