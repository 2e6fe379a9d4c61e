"""Minibatch GPOPE (Poisson-subsampled GTD2, PLD accounting, Polyak averaging)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant

from privrl.ope.minibatch import (
    MINIBATCH_RELATION,
    MinibatchConfig,
    default_sampling_rate,
    minibatch_event,
    minibatch_gtd2,
    minibatch_report,
    minibatch_sigma,
    replace_one_epsilon,
    tune_minibatch_on_public,
)
from privrl.ope.stats import TrajectoryStats
from privrl.privacy.units import NeighbourRelation
from tests.noise import noise_rng, noise_source


def _stats(m: int, n: int, *, b_scale: float = 1.0, zero: bool = False) -> TrajectoryStats:
    rng = noise_rng(0)
    A = np.zeros((m, n, n)) if zero else np.eye(n)[None] * (1.0 + rng.random((m, 1, 1)))
    C = np.zeros((m, n, n)) if zero else np.tile(np.eye(n), (m, 1, 1))
    b = np.zeros((m, n)) if zero else b_scale * rng.normal(size=(m, n))
    return TrajectoryStats(A, b, C, np.ones(m, dtype=np.int64), 0.9)


def test_noise_scale_of_one_step_is_h_sigma():
    """Privacy (noise scale): with all gradients 0, one step moves (θ, w) by
    −β·(noise)/(q·m̄), the noise having std h·σ per coordinate."""
    stats = _stats(10, 3, zero=True)
    cfg = MinibatchConfig(q=0.5, iterations=1, clip=0.7, eta=2.0, public_m=10, average_from=0.0)
    runs = minibatch_gtd2([stats] * 4000, cfg, sigma=3.0, noise=noise_source(1))
    step = cfg.betas()[0] / (cfg.q * cfg.public_m)
    std = float(np.std(runs.x)) / step
    assert std == pytest.approx(0.7 * 3.0, rel=0.03)


def test_each_trajectory_moves_the_sum_by_at_most_h():
    """Privacy (sensitivity): with no noise and q = 1, the first step is −β/(q m̄) times the
    sum of the clipped gradients [0; −b̂_j]; adding one trajectory with a huge b̂ changes it
    by exactly h (the clip bound), never more."""
    base = _stats(5, 4, b_scale=1e-3)
    big = _stats(6, 4, b_scale=1e6)
    added = TrajectoryStats(
        np.concatenate([base.A, big.A[-1:]]),
        np.concatenate([base.b, big.b[-1:]]),
        np.concatenate([base.C, big.C[-1:]]),
        np.ones(6, dtype=np.int64),
        0.9,
    )
    cfg = MinibatchConfig(q=1.0, iterations=1, clip=0.25, eta=1.0, public_m=5, average_from=0.0)
    x0 = minibatch_gtd2([base], cfg, sigma=0.0, noise=noise_source(0)).x[0]
    x1 = minibatch_gtd2([added], cfg, sigma=0.0, noise=noise_source(0)).x[0]
    step = cfg.betas()[0] / (cfg.q * cfg.public_m)
    assert np.linalg.norm(x1 - x0) / step == pytest.approx(0.25, rel=1e-9)


def test_pld_epsilon_matches_dp_accounting_and_rdp_bounds_it():
    """Privacy (accountant): the report's ε equals dp-accounting's PLDAccountant on
    T × PoissonSampled(q, Gaussian(σ)) under add/remove (relative tolerance 1e-9: the same
    computation), and lies below dp-accounting's RDP ε for the same event (RDP is looser) by
    at most 40%."""
    sigma, q, T, delta = 1.1, 0.02, 500, 1e-5
    cfg = MinibatchConfig(q=q, iterations=T, clip=1.0, eta=1.0, public_m=100)
    report = minibatch_report(cfg, sigma=sigma, n=3, delta=delta, epsilon_target=None)
    assert report.relation == MINIBATCH_RELATION == NeighbourRelation.ADD_REMOVE
    event = dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), T
    )
    pld = pld_privacy_accountant.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE, 1e-4)
    pld.compose(event)
    rdp = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE
    )
    rdp.compose(event)
    assert report.epsilon == pytest.approx(pld.get_epsilon(delta), rel=1e-9)
    assert report.epsilon <= rdp.get_epsilon(delta) <= 1.4 * report.epsilon
    assert minibatch_event(sigma, q, T) == event


def test_calibrated_sigma_meets_the_target_and_replace_one_costs_more():
    """Privacy (calibration): σ from `minibatch_sigma` meets ε (PLD, add/remove) and 1% less
    noise does not; the same run under replace-one (noise multiplier σ/2) has a larger ε."""
    eps, delta, q, T = 1.0, 1e-5, 0.05, 400
    sigma = minibatch_sigma(eps, delta, q, T)
    cfg = MinibatchConfig(q=q, iterations=T, clip=1.0, eta=1.0, public_m=200)
    ok = minibatch_report(cfg, sigma=sigma, n=2, delta=delta, epsilon_target=eps).epsilon
    low = minibatch_report(cfg, sigma=sigma / 1.01, n=2, delta=delta, epsilon_target=eps).epsilon
    assert ok <= eps < low
    assert replace_one_epsilon(sigma, q, T, delta) > eps


def test_noiseless_averaged_iterate_converges_to_the_saddle_point():
    """σ = 0, a clip that never binds, q = 1: the Polyak average tends to θ* = A⁻¹b."""
    stats = _stats(20, 3)
    A, b, _ = stats.mean()
    cfg = MinibatchConfig(
        q=1.0, iterations=3000, clip=1e9, eta=0.1, public_m=20, kappa=0.0, average_from=0.75
    )
    out = minibatch_gtd2([stats], cfg, sigma=0.0, noise=noise_source(0))
    np.testing.assert_allclose(out.theta_avg[0], np.linalg.solve(A, b), atol=1e-6)
    assert out.clipped_fraction[0] == 0.0


def test_config_refuses_bad_public_parameters():
    for bad in ({"q": 0.0}, {"q": 1.5}, {"clip": math.inf}, {"iterations": 0}, {"public_m": 0}):
        with pytest.raises(ValueError):
            MinibatchConfig(
                **{"q": 0.1, "iterations": 10, "clip": 1.0, "eta": 1.0, "public_m": 10, **bad}
            )


def test_public_tuning_keeps_a_given_clip_and_is_seeded_by_a_seed_sequence():
    """A fixed public h (`clips`) is kept and only η is chosen; a SeedSequence seeds the tuning
    (same seed, same choice and grid), instead of fresh OS entropy."""
    from privrl.ope.mspbe import LinearSystem

    stats = _stats(30, 3)
    system = LinearSystem(*stats.mean(), info={"source": "test"})
    base = MinibatchConfig(q=0.5, iterations=20, clip=1.0, eta=1.0, public_m=30)

    def tune(seed: np.random.SeedSequence):
        return tune_minibatch_on_public(
            stats, system, base, epsilon_target=None, delta=1e-5, etas=(0.01, 0.1),
            clips=(0.3,), repeats=1, seed=seed,
        )  # fmt: skip

    a, b = tune(np.random.SeedSequence([4, 2])), tune(np.random.SeedSequence([4, 2]))
    assert a.config.clip == 0.3 and {g["clip"] for g in a.grid} == {0.3}
    assert a.config.eta in (0.01, 0.1) and a.grid == b.grid


def test_default_sampling_rate_is_an_expected_batch_of_the_declared_size():
    assert default_sampling_rate(1000) == 20 / 1000
    assert default_sampling_rate(10) == 1.0
    with pytest.raises(ValueError):
        default_sampling_rate(0)
