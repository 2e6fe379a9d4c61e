"""FedAdam on the server (Reddi et al. 2021) and DP-FedSGD (McMahan et al. 2018) as a named
configuration of DP-FedAvg: both leave the mechanism and its accounting unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privrl.config import ConfigError
from privrl.nn.normalizer import Normalizer
from privrl.primorl import dp_fedavg as fed
from privrl.primorl import primorl as P
from privrl.primorl.dynamics import DynamicsModel
from privrl.privacy.mechanisms import gaussian_noise_like
from tests.noise import noise_rng, noise_source
from tests.primorl.test_dp_fedavg import LENGTHS, SMALL, _dataset, _plan, _setup

torch.set_num_threads(1)


def test_fedadam_matches_its_recursion_and_leaves_epsilon_unchanged() -> None:
    _, _, _, start = _setup()
    adam = _plan(server_optimizer="adam", server_momentum=0.9, server_lr=0.01)
    plain = _plan()
    updates = [
        torch.randn(start.shape, generator=torch.Generator().manual_seed(t)) for t in range(4)
    ]
    state = fed.server_buffer(start, adam)
    assert state is not None and state.shape == (2, *start.shape)
    assert fed.server_buffer(start, plain) is None
    m, v, want = torch.zeros_like(start), torch.zeros_like(start), start.clone()
    theta = start
    for u in updates:
        theta = fed.server_step(theta, u, adam, state)
        m = 0.9 * m + 0.1 * u
        v = 0.99 * v + 0.01 * u * u
        want = want + 0.01 * m / (v.sqrt() + 1e-3)
    torch.testing.assert_close(theta, want, rtol=1e-5, atol=1e-6)
    assert not adam.fedavg_step
    assert adam.event(10) == plain.event(10)
    assert adam.epsilon(10) == plain.epsilon(10)
    assert "FedAdam" in adam.release(10, 5).extra["server_step"]
    assert adam.release(10, 5).sensitivity == plain.release(10, 5).sensitivity


def test_the_released_per_round_quantity_under_fedadam_is_the_noised_sum(monkeypatch) -> None:
    """Δ̃(t) handed to the server is (Σ_k Δ_k + N(0, (zC)² I))/(qK), the same draw as FedAvg."""
    model, clients, _, start = _setup()
    plan = _plan(server_optimizer="adam", server_momentum=0.9, sampling_rate=0.5)
    sampled = fed.sample_clients(clients.n_clients, plan.q, noise_rng(7))
    summed = fed.local_displacements(model.ensemble, start, clients, sampled, plan, noise_rng(8))
    draw = gaussian_noise_like(start, sigma=plan.z * plan.C, generator=noise_rng(9))
    seen: list[torch.Tensor] = []
    real = fed.server_step

    def spy(theta, update, p, state):
        seen.append(update.clone())
        return real(theta, update, p, state)

    monkeypatch.setattr(fed, "server_step", spy)
    theta = fed.dp_fedavg_round(
        model.ensemble,
        start,
        clients,
        plan,
        sample_rng=noise_rng(7),
        batch_rng=noise_rng(8),
        generator=noise_rng(9),
        momentum=fed.server_buffer(start, plan),
    )
    torch.testing.assert_close(seen[0], (summed + draw) / plan.denominator, rtol=1e-5, atol=1e-6)
    assert not torch.equal(theta, start + seen[0])  # the server step is Adam's, not FedAvg's


def test_dp_fedsgd_is_one_clipped_gradient_step_per_trajectory() -> None:
    """With B ≥ every length, E = 1 and SGD, Δ_k = −η∇ℓ_k(θ): exactly linear in η (C = ∞);
    with a finite C each Δ_k is clipped to C. Same plan event as DP-FedAvg."""
    model, clients, _, start = _setup()
    base = fed.DpFedAvgConfig(noise_multiplier=1.0, clip_norm=1.0, max_rounds=10, n_units=12)
    sampled = np.arange(clients.n_clients)

    def disp(lr: float, C: float = math.inf) -> torch.Tensor:
        cfg = fed.dp_fedsgd(
            fed.DpFedAvgConfig(**{**base.__dict__, "clip_norm": C, "noise_multiplier": 0.0}),
            batch=max(LENGTHS),
            lr=lr,
        )
        plan = fed.plan_dp_fedavg(cfg)
        assert (plan.E, plan.B, plan.lr, plan.local_optimizer) == (1, 60, lr, "sgd")
        return fed.local_displacements(
            model.ensemble, start, clients, sampled, plan, noise_rng(0), reduce="none"
        )

    one, half = disp(1.0), disp(0.5)
    torch.testing.assert_close(one, 2 * half, rtol=1e-4, atol=1e-7)
    clipped = disp(1.0, C=1e-3)
    norms = clipped.flatten(1).norm(dim=1)
    assert float(norms.max()) <= 1e-3 * (1 + 1e-4)
    private = fed.plan_dp_fedavg(
        fed.dp_fedsgd(fed.DpFedAvgConfig(**{**base.__dict__, "clip_norm": 1.0}), batch=60)
    )
    paper = fed.plan_dp_fedavg(fed.DpFedAvgConfig(**{**base.__dict__, "clip_norm": 1.0}))
    assert private.event(10) == paper.event(10)


def test_private_trainer_option_selects_dp_fedsgd() -> None:
    cfg = P.PrimorlConfig(task="halfcheetah", private_trainer="dp-fedsgd", trajectories=2000)
    got = cfg.fedavg()
    assert (got.local_epochs, got.local_batch, got.local_lr) == (1, P.FEDSGD_BATCH, 1.0)
    assert got.local_optimizer == "sgd"
    paper = P.PrimorlConfig(task="halfcheetah", trajectories=2000).fedavg()
    assert paper.local_batch is None and paper.local_epochs is None  # the paper's defaults
    adam = P.PrimorlConfig(task="halfcheetah", server_optimizer="adam", server_momentum=0.9)
    assert adam.fedavg().server_optimizer == "adam"
    with pytest.raises(ConfigError):
        P.PrimorlConfig(task="halfcheetah", private_trainer="fedprox").fedavg()
    with pytest.raises(ConfigError):
        P.PrimorlConfig(
            task="halfcheetah", private_trainer="dp-fedsgd", local_optimizer="adam"
        ).fedavg()


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"server_optimizer": "yogi"}, "server optimizer"),
        ({"server_beta2": 1.0}, "β₂"),
        ({"server_tau": 0.0}, "τ"),
    ],
)
def test_a_bad_server_optimizer_is_refused(kw, match) -> None:
    with pytest.raises(ValueError, match=match):
        fed.DpFedAvgConfig(noise_multiplier=1.0, **kw)


def test_a_checkpoint_resumes_only_with_its_server_optimizer() -> None:
    """The checkpoint records its server step; resuming it under another one (whose state it
    would misread) is refused, naming both; an older checkpoint is judged by its buffer."""
    data = _dataset([20] * 10, seed=4)
    states: list[dict] = []

    def train(plan: fed.DpFedAvgPlan, resume=None) -> None:
        model = DynamicsModel(3, 1, SMALL)
        model.input_normalizer = Normalizer.from_bounds([-5.0] * 4, [5.0] * 4, source="bounds")
        fed.train_dp_fedavg(
            model,
            data,
            plan,
            normalizer="model",
            seed=0,
            noise=noise_source(0),
            resume=resume,
            on_checkpoint=states.append,
            checkpoint_every=1,
        )

    kw = dict(n_units=10, sampling_rate=0.3, max_rounds=2)
    adam = _plan(server_optimizer="adam", server_momentum=0.9, server_lr=0.01, **kw)
    train(adam)
    first = states[0]
    assert first["server"]["server_optimizer"] == "adam"
    train(adam, resume=first)  # the same server step: continues
    faster = _plan(server_optimizer="adam", server_momentum=0.9, server_lr=0.1, **kw)
    for other in (_plan(**kw), _plan(server_momentum=0.9, **kw), faster):
        with pytest.raises(ValueError, match=r"made with .*'server_optimizer': 'adam'"):
            train(other, resume=first)
    old = {k: v for k, v in first.items() if k != "server"}  # before the step was recorded
    train(adam, resume=old)
    with pytest.raises(ValueError, match="another shape"):
        train(_plan(server_momentum=0.9, **kw), resume=old)
