"""Expert-level DP-SGD (Sharma et al., Algorithm 4): the step count stops at the budget, the
noise of the privatised sum has std z·C, the update divides by the expected batch size b, each
expert contributes at most one clipped example, the report states the expert unit and the
Poisson-subsampled Gaussian event, and the non-private twin is ordinary minibatch training."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from gymnasium import spaces

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.expert.dpsgd import (
    DPSGDSettings,
    ExpertTransitions,
    _Private,
    _private_step,
    expert_dp_sgd,
    paper_accounting_epsilon,
    plan_steps,
)
from privrl.nn.per_example import clipped_grad_sum
from privrl.privacy.accounting import epsilon as accountant_epsilon
from privrl.privacy.accounting import sampled_gaussian_event
from privrl.privacy.report import PrivacyReport
from privrl.rl.bcq import DiscreteBCQ
from privrl.rl.cql import DiscreteCQL
from privrl.rl.discrete_common import TransitionTable
from tests.noise import noise_rng, noise_source

torch.set_num_threads(1)


# --------------------------------------------------------------------------------- helpers


def expert_dataset(
    n_experts: int = 12,
    episodes_per_expert: int = 2,
    length: int = 5,
    obs_dim: int = 2,
    n_actions: int = 3,
    seed: int = 0,
    reward_scale: float = 1.0,
    env_id: str | None = None,
    unit_ids: bool = True,
) -> TrajectoryDataset:
    """Episodes of random observations; expert i mostly takes action i mod 2."""
    rng = noise_rng(seed)
    n_ep = n_experts * episodes_per_expert
    n_t = n_ep * length
    units = np.repeat(np.arange(n_experts), episodes_per_expert)
    preferred = np.repeat(units % 2, length)
    actions = np.where(rng.random(n_t) < 0.8, preferred, rng.integers(0, n_actions, n_t))
    obs = rng.normal(size=(n_t + n_ep, obs_dim)).astype(np.float32)
    truncated = np.zeros(n_t, dtype=bool)
    truncated[length - 1 :: length] = True
    return TrajectoryDataset(
        observations=obs,
        actions=actions.astype(np.int64),
        rewards=reward_scale * (actions == 0).astype(np.float64),
        terminated=np.zeros(n_t, dtype=bool),
        truncated=truncated,
        episode_offsets=np.arange(n_ep + 1) * length,
        unit_ids=units if unit_ids else None,
        metadata=DatasetMetadata(
            observation_space=spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
            action_space=spaces.Discrete(n_actions),
            env_id=env_id,
            horizon=length,
        ),
    )


class ConstantExperts:
    """m experts whose greedy action is (i mod 2) for expert i, at every state."""

    def __init__(self, n_experts: int = 12, n_actions: int = 3, obs_dim: int = 2) -> None:
        self._m, self._a, self._d = n_experts, n_actions, obs_dim

    @property
    def n_experts(self) -> int:
        return self._m

    @property
    def n_actions(self) -> int:
        return self._a

    @property
    def obs_dim(self) -> int:
        return self._d

    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        n = np.asarray(obs).shape[0]
        return np.repeat((np.arange(self._m) % 2)[:, None], n, axis=1).astype(np.int64)


def _source(ds: TrajectoryDataset, learner) -> ExpertTransitions:
    ids = np.unique(ds.unit_ids)
    return ExpertTransitions(ds, ids, ids.shape[0], TransitionTable(ds, learner.obs_transform))


class _Capture:
    """Replaces `apply_gradients` to record the gradient a step would apply."""

    def __init__(self) -> None:
        self.grads: list[dict[str, torch.Tensor]] = []

    def __call__(self, grads) -> None:
        self.grads.append({k: v.clone() for k, v in grads.items()})


# --------------------------------------------------------------------------------- tests


def test_step_count_stops_at_budget() -> None:
    """N = largest count with ε(N) ≤ ε2 < ε(N + 1) under PLD (Poisson(b/m) Gaussian)."""
    z, q, eps, delta = 5.0, 0.5, 1.0, 1e-3  # a fast PLD (large noise), N = 14
    n, capped = plan_steps(noise_multiplier=z, sampling_probability=q, epsilon=eps, delta=delta)
    assert not capped and n > 5

    def eps_at(t: int) -> float:
        ev = sampled_gaussian_event(z, t, sampling_probability=q)
        return accountant_epsilon(ev, delta, backend="pld")

    assert eps_at(n) <= eps < eps_at(n + 1)
    capped_n, capped = plan_steps(
        noise_multiplier=z, sampling_probability=q, epsilon=eps, delta=delta, steps_cap=3
    )
    assert (capped_n, capped) == (3, True)


def test_run_uses_budgeted_steps_and_reports_expert_event() -> None:
    ds = expert_dataset(n_experts=10)
    learner = DiscreteCQL(2, 3, hidden=(8,), seed=0)
    res = expert_dp_sgd(
        DPSGDSettings(epsilon=1.0, delta=1e-3, n_units=10, batch_size=5, noise_multiplier=5.0),
        learner,
        ds,
        rng=noise_rng(0),
    )
    n, _ = plan_steps(noise_multiplier=5.0, sampling_probability=0.5, epsilon=1.0, delta=1e-3)
    assert res.steps == res.private_steps == n == learner.steps
    rep = res.report
    assert rep.unit.value == "expert" and rep.relation.value == "add_remove"
    assert rep.backend == "pld" and rep.private
    assert rep.epsilon <= 1.0 and rep.delta == 1e-3
    (release,) = rep.releases
    assert release.count == n and release.sensitivity == 1.0
    assert release.noise == {"sigma": 5.0, "noise_multiplier": 5.0}
    ev = release.event
    assert isinstance(ev, dp_event.SelfComposedDpEvent) and ev.count == n
    assert isinstance(ev.event, dp_event.PoissonSampledDpEvent)
    assert ev.event.sampling_probability == pytest.approx(5 / 10)
    assert ev.event.event == dp_event.GaussianDpEvent(5.0)
    assert release.extra["accountant_matches_sampling"] is True
    rep.to_dict()  # serialises


def test_noise_std_is_z_times_c() -> None:
    """The privatised sum of an empty batch is pure noise: std z·C per coordinate, mean 0."""
    ds = expert_dataset()
    learner = DiscreteCQL(2, 3, hidden=(64, 64), seed=0)
    cap = _Capture()
    learner.apply_gradients = cap  # type: ignore[method-assign]
    z, c, b = 3.0, 0.5, 4
    cfg = _Private(_source(ds, learner), b / 12, b, z, c, "poisson", "ghost")
    gen = noise_rng(1)
    rng = noise_rng(0)
    for _ in range(5):
        _private_step(learner, cfg, np.zeros(0, dtype=np.int64), rng, gen, check=False)
    noise = torch.cat([torch.cat([g.reshape(-1) for g in d.values()]) for d in cap.grads]) * b
    assert noise.numel() > 20_000
    assert abs(float(noise.std()) / (z * c) - 1) < 0.03
    assert abs(float(noise.mean())) < 4 * z * c / math.sqrt(noise.numel())


def test_update_divides_by_expected_b_not_realised_batch() -> None:
    ds = expert_dataset(reward_scale=20.0)
    learner = DiscreteBCQ(2, 3, hidden=(8,), seed=0)
    cap = _Capture()
    learner.apply_gradients = cap  # type: ignore[method-assign]
    b, c = 8, 1.0
    source = _source(ds, learner)
    cfg = _Private(source, b / 12, b, 1e-9, c, "poisson", "ghost")  # noise negligible
    units = np.array([0, 3, 5])  # |B| = 3 ≠ b = 8
    _private_step(learner, cfg, units, noise_rng(4), noise_rng(5), check=True)
    batch = source.batch_for(units, noise_rng(4))  # the same draw
    assert batch.obs.shape[0] == 3
    sums = clipped_grad_sum(learner.per_example_loss, learner.params, batch, c).sums
    applied = cap.grads[0]
    for k in sums:
        assert torch.allclose(applied[k], sums[k] / b, atol=1e-6)
    assert not torch.allclose(applied["q0.weight"], sums["q0.weight"] / 3, atol=1e-6)


def test_one_transition_per_sampled_expert() -> None:
    ds = expert_dataset(n_experts=6, episodes_per_expert=3, length=4)
    learner = DiscreteCQL(2, 3, hidden=(8,))
    source = _source(ds, learner)
    units = np.array([1, 2, 4])
    rng = noise_rng(0)
    table_unit = np.repeat(ds.episode_unit_ids, ds.episode_lengths)
    for _ in range(20):
        pos = source.order[
            np.asarray(
                source.starts[units]
                + np.floor(rng.random(3) * source.counts[units]).astype(np.int64)
            )
        ]
        assert sorted(table_unit[pos].tolist()) == [1, 2, 4]
    batch = source.batch_for(units, rng)
    assert batch.obs.shape == (3, 2)


def test_clipped_contribution_bounded_by_c() -> None:
    """Per-expert clipped gradients (joint over Q and imitation heads) have norm ≤ C."""
    ds = expert_dataset(reward_scale=100.0)
    learner = DiscreteBCQ(2, 3, hidden=(16, 16), seed=0)
    batch = _source(ds, learner).batch_for(np.arange(12), noise_rng(0))
    out = clipped_grad_sum(learner.per_example_loss, learner.params, batch, 1.0, check=True)
    assert float(out.norms.max()) > 1.0
    assert float((out.norms * out.scales).max()) <= 1.0 + 1e-12


def test_explicit_steps_reported_or_refused() -> None:
    ds = expert_dataset(n_experts=10)
    learner = DiscreteCQL(2, 3, hidden=(8,), seed=0)
    res = expert_dp_sgd(
        DPSGDSettings(
            epsilon=None, delta=1e-3, n_units=10, batch_size=5, noise_multiplier=5.0, steps=7
        ),
        learner,
        ds,
        rng=noise_rng(0),
    )
    expected = accountant_epsilon(
        sampled_gaussian_event(5.0, 7, sampling_probability=0.5), 1e-3, backend="pld"
    )
    assert res.steps == 7 and res.report.epsilon == pytest.approx(expected)
    with pytest.raises(ValueError, match="budget"):
        expert_dp_sgd(
            DPSGDSettings(
                epsilon=0.01, delta=1e-3, n_units=10, batch_size=5, noise_multiplier=5.0, steps=7
            ),
            DiscreteCQL(2, 3, hidden=(8,)),
            ds,
            rng=noise_rng(0),
        )


def test_shuffle_sampling_is_not_certified() -> None:
    """Property: shuffled batches have no accountant here (add/remove-one-expert shifts every
    later batch of the permutation), so the run states ε = ∞ and is not private; the Poisson
    ε the paper would state is kept only as a labelled comparison."""
    ds = expert_dataset(n_experts=10)
    res = expert_dp_sgd(
        DPSGDSettings(
            epsilon=None,
            delta=1e-3,
            n_units=10,
            batch_size=4,
            noise_multiplier=5.0,
            steps=5,
            sampling="shuffle",
        ),
        DiscreteCQL(2, 3, hidden=(8,)),
        ds,
        rng=noise_rng(0),
    )
    rep = res.report
    assert math.isinf(rep.epsilon) and not rep.private
    assert rep.event == dp_event.NonPrivateDpEvent()
    (release,) = rep.releases
    assert release.event == dp_event.UnsupportedDpEvent()
    assert release.mechanism == "shuffled_gaussian"
    assert release.extra["accountant_matches_sampling"] is False
    assert release.extra["certified"] is False
    paper = accountant_epsilon(
        sampled_gaussian_event(5.0, 5, sampling_probability=0.4), 1e-3, backend="pld"
    )
    assert paper_accounting_epsilon(rep.releases, 1e-3) == pytest.approx(paper)
    assert any("NOT certified" in n for n in rep.notes)
    assert any(n.startswith("for comparison only") for n in rep.notes)
    assert PrivacyReport.from_dict(rep.to_dict()).private is False  # round trip


def test_non_private_twin_is_ordinary_minibatch_training() -> None:
    ds = expert_dataset()
    twin = DiscreteCQL(2, 3, hidden=(8,), lr=1e-2, seed=0)
    res = expert_dp_sgd(
        DPSGDSettings(epsilon=None, delta=1e-3, batch_size=6, steps=4, private=False),
        twin,
        ds,
        rng=noise_rng(3),
    )
    assert not res.report.private and math.isinf(res.report.epsilon)
    assert res.steps == 4 and res.private_steps == 0
    manual = DiscreteCQL(2, 3, hidden=(8,), lr=1e-2, seed=0)
    table = TransitionTable(ds)
    _, data_rng, _ = noise_rng(3).spawn(3)  # run_steps' minibatch stream
    for _ in range(4):
        manual.update(table.sample(6, data_rng))
    for k in manual.params:
        assert torch.allclose(manual.params[k], twin.params[k])


def test_same_seed_same_result() -> None:
    ds = expert_dataset()
    runs = []
    for _ in range(2):
        learner = DiscreteCQL(2, 3, hidden=(8,), seed=0)
        expert_dp_sgd(
            DPSGDSettings(
                epsilon=None, delta=1e-3, n_units=12, batch_size=3, noise_multiplier=5.0, steps=5
            ),
            learner,
            ds,
            rng=noise_rng(11),
            noise=noise_source(11),
        )
        runs.append(learner.params)
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])


def test_evaluation_curve_follows_schedule() -> None:
    ds = expert_dataset()
    calls = []

    def evaluate(learner) -> np.ndarray:
        calls.append(learner.steps)
        return np.array([1.0, 3.0])

    res = expert_dp_sgd(
        DPSGDSettings(
            epsilon=None,
            delta=1e-3,
            n_units=12,
            batch_size=3,
            noise_multiplier=5.0,
            steps=20,
            n_evals=4,
            eval_window=8,
        ),
        DiscreteCQL(2, 3, hidden=(8,)),
        ds,
        rng=noise_rng(0),
        evaluate=evaluate,
    )
    assert calls == [14, 16, 18, 20]
    assert [r["step"] for r in res.curve] == calls
    assert res.return_mean == 2.0 and res.return_std == 0.0


def test_bad_input() -> None:
    learner = DiscreteCQL(2, 3, hidden=(8,))
    rng = noise_rng(0)
    no_ids = expert_dataset(unit_ids=False)
    with pytest.raises(ValueError, match="expert ids"):
        expert_dp_sgd(
            DPSGDSettings(epsilon=1.0, delta=1e-3, n_units=12),
            learner,
            no_ids,
            rng=rng,
            noise=noise_source(rng),
        )
    with pytest.raises(ValueError, match="exceeds the number of experts"):
        expert_dp_sgd(
            DPSGDSettings(epsilon=1.0, delta=1e-3, n_units=12, batch_size=50),
            learner,
            expert_dataset(),
            rng=rng,
            noise=noise_source(rng),
        )
    with pytest.raises(ValueError, match="noise_multiplier"):
        expert_dp_sgd(
            DPSGDSettings(epsilon=1.0, delta=1e-3, n_units=12, batch_size=2, noise_multiplier=0.0),
            learner,
            expert_dataset(),
            rng=rng,
            noise=noise_source(rng),
        )
    with pytest.raises(ValueError, match="single step"):
        expert_dp_sgd(
            DPSGDSettings(epsilon=1e-3, delta=1e-5, n_units=12, batch_size=6, noise_multiplier=5.0),
            learner,
            expert_dataset(),
            rng=rng,
            noise=noise_source(rng),
        )
    # m is public: a private run without it is refused (it is never counted in the data)
    with pytest.raises(ValueError, match="n_units"):
        expert_dp_sgd(
            DPSGDSettings(epsilon=1.0, delta=1e-3),
            learner,
            expert_dataset(),
            rng=rng,
            noise=noise_source(rng),
        )
