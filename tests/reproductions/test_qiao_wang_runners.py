"""Qiao & Wang's grid runs the public learner objects (DPVAPVI, VAPVI, PEVI) on the simulator's
episodes; their policies are the learner functions' own, to the bit, with the same noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privrl.envs.linear import LinearMDP
from privrl.offline.pevi import pevi, pevi_beta
from privrl.offline.vapvi import FeatureTable, LinearGreedyPolicy, dp_vapvi, vapvi
from privrl.privacy.noise import NoiseSource
from reproductions.qiao_wang.grid import (
    DELTA,
    FAILURE_PROB,
    PEVI_XI,
    _dp_dk_runner,
    _dp_runner,
    _nested_episodes,
    _pevi_matched_runner,
    _pevi_runner,
    _vapvi_runner,
)


def _same(a: LinearGreedyPolicy, b: LinearGreedyPolicy) -> None:
    assert np.array_equal(a.q, b.q) and np.array_equal(a.actions, b.actions)
    assert np.array_equal(a.weights, b.weights)


@pytest.fixture(scope="module")
def case() -> tuple:
    mdp = LinearMDP.qiao_wang(1)
    return _nested_episodes(mdp, 50, 0, 1, 0), FeatureTable(phi=mdp.phi, scale=mdp.scale)


@pytest.mark.parametrize("rho", [0.5, 5.0])
def test_the_dp_vapvi_runners_are_the_function_with_the_same_noise(case: tuple, rho: float) -> None:
    data, table = case
    noise = NoiseSource.insecure(11).generator("dp-vapvi")
    want = dp_vapvi(
        data, table, rho=rho, rng=11, noise=noise, bonus_scale=0.3, delta=DELTA,
        failure_prob=FAILURE_PROB,
    ).policy  # fmt: skip
    _same(_dp_runner(rho)(data, table, 0.3, 11), want)
    _same(_dp_dk_runner(rho, {0.3: 0.0})(data, table, 0.3, 11), want)
    other = _dp_runner(rho)(data, table, 0.3, 12)  # another noise seed, another policy
    assert not np.array_equal(other.weights, want.weights)


def test_the_non_private_runners_are_the_functions(case: tuple) -> None:
    data, table = case
    _same(_vapvi_runner(data, table, 0.3, 11), vapvi(data, table, bonus_scale=0.3).policy)
    _same(_pevi_runner(data, table, 0.3, 11), pevi(data, table, bonus_scale=0.3, xi=PEVI_XI).policy)
    matched = 0.3 * math.sqrt(table.d) / pevi_beta(table.d, data.H, data.K, PEVI_XI)
    want = pevi(data, table, bonus_scale=matched, xi=PEVI_XI).policy
    _same(_pevi_matched_runner(data, table, 0.3, 11), want)
