"""privrl.privacy.sampling: Poisson sampling of units (what the Poisson-subsampled accountant
assumes), Selective DP-SGD's step coins, one row per unit, and shuffled batches."""

from __future__ import annotations

import numpy as np
import pytest

from privrl.privacy.sampling import (
    SHUFFLE_MATCHES_POISSON_ACCOUNTANT,
    one_per_unit,
    poisson_sample,
    shuffled_batches,
    step_coins,
)
from tests.noise import noise_rng


def _inclusion_matrix(n: int, rate: float, draws: int, seed: int) -> np.ndarray:
    rng = noise_rng(seed)
    m = np.zeros((draws, n), dtype=bool)
    for t in range(draws):
        m[t, poisson_sample(n, rate, rng)] = True
    return m


def test_poisson_inclusion_rate_matches() -> None:
    """Every unit is included with probability `rate` (checked per unit and overall)."""
    n, rate, draws = 200, 0.1, 2000
    m = _inclusion_matrix(n, rate, draws, seed=1)
    overall = m.mean()
    assert abs(overall - rate) < 4 * np.sqrt(rate * (1 - rate) / (n * draws))
    per_unit = m.mean(axis=0)  # each unit's own rate, 2000 draws
    assert np.all(np.abs(per_unit - rate) < 5 * np.sqrt(rate * (1 - rate) / draws))


def test_poisson_units_independent() -> None:
    """Joint inclusion P(i and j) = rate² and the batch size is Binomial(n, rate)."""
    n, rate, draws = 50, 0.3, 4000
    m = _inclusion_matrix(n, rate, draws, seed=2).astype(float)
    joint = (m[:, :, None] * m[:, None, :]).mean(axis=0)
    off = joint[~np.eye(n, dtype=bool)]
    assert abs(off.mean() - rate**2) < 0.005
    corr = np.corrcoef(m.T)[~np.eye(n, dtype=bool)]
    assert np.abs(corr).max() < 0.1
    sizes = m.sum(axis=1)
    assert abs(sizes.var() / (n * rate * (1 - rate)) - 1) < 0.1  # Binomial variance


def test_poisson_output_sorted_unique_int() -> None:
    idx = poisson_sample(1000, 0.5, noise_rng(0))
    assert idx.dtype == np.int64
    assert np.all(np.diff(idx) > 0)
    assert idx.min() >= 0 and idx.max() < 1000


def test_poisson_empty_batches_possible() -> None:
    rng = noise_rng(3)
    sizes = [poisson_sample(5, 0.05, rng).size for _ in range(200)]
    assert 0 in sizes  # P(empty) = 0.95^5 ≈ 0.77
    assert poisson_sample(10, 0.0, rng).size == 0
    assert poisson_sample(0, 0.5, rng).size == 0
    assert np.array_equal(poisson_sample(7, 1.0, rng), np.arange(7))


def test_poisson_same_seed_same_sample() -> None:
    a = poisson_sample(100, 0.2, noise_rng(9))
    b = poisson_sample(100, 0.2, noise_rng(9))
    assert np.array_equal(a, b)


@pytest.mark.parametrize(
    ("n", "rate", "exc"),
    [
        (10, -0.1, ValueError),
        (10, 1.5, ValueError),
        (10, float("nan"), ValueError),
        (-1, 0.5, ValueError),
        (2.5, 0.5, ValueError),
        (True, 0.5, ValueError),
        (10, "0.5", TypeError),
    ],
)
def test_poisson_bad_input(n: object, rate: object, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        poisson_sample(n, rate, noise_rng(0))  # type: ignore[arg-type]


def test_poisson_needs_generator() -> None:
    with pytest.raises(TypeError, match="Generator"):
        poisson_sample(10, 0.5, 0)  # type: ignore[arg-type]


def test_step_coins_fixed_steps_rate() -> None:
    coins = step_coins(0.3, noise_rng(0), steps=20_000)
    assert coins.dtype == bool and coins.shape == (20_000,)
    assert abs(coins.mean() - 0.3) < 0.015


def test_step_coins_until_k_private_steps() -> None:
    """Coins stop right after the k-th private step; about k/p coins in all."""
    coins = step_coins(0.25, noise_rng(1), private_steps=400)
    assert coins.sum() == 400 and coins[-1]
    assert 0.8 * 1600 < coins.size < 1.2 * 1600
    capped = step_coins(0.25, noise_rng(1), private_steps=400, max_steps=100)
    assert capped.size == 100 and capped.sum() < 400
    assert step_coins(1.0, noise_rng(0), private_steps=5).tolist() == [True] * 5
    assert step_coins(0.0, noise_rng(0), private_steps=5, max_steps=3).sum() == 0


def test_step_coins_bad_input() -> None:
    rng = noise_rng(0)
    with pytest.raises(ValueError, match="exactly one"):
        step_coins(0.5, rng)
    with pytest.raises(ValueError, match="exactly one"):
        step_coins(0.5, rng, steps=3, private_steps=3)
    with pytest.raises(ValueError, match="never"):
        step_coins(0.0, rng, private_steps=3)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        step_coins(1.2, rng, steps=3)


def test_one_per_unit_uniform_and_drops_empty_units() -> None:
    # unit 0: rows 0..3, unit 1: no rows, unit 2: rows 4..5
    starts, counts = np.array([0, 4, 4]), np.array([4, 0, 2])
    rng = noise_rng(0)
    draws = np.stack([one_per_unit(np.array([0, 1, 2]), starts, counts, rng) for _ in range(4000)])
    assert draws.shape == (4000, 2)  # unit 1 contributes nothing
    assert set(np.unique(draws[:, 0])) == {0, 1, 2, 3}
    assert set(np.unique(draws[:, 1])) == {4, 5}
    freq = np.bincount(draws[:, 0], minlength=4) / 4000
    assert np.all(np.abs(freq - 0.25) < 0.03)
    assert one_per_unit(np.array([], dtype=np.int64), starts, counts, rng).size == 0
    with pytest.raises(ValueError, match="out of range"):
        one_per_unit(np.array([3]), starts, counts, rng)


def test_shuffled_batches_each_unit_once_per_epoch() -> None:
    assert SHUFFLE_MATCHES_POISSON_ACCOUNTANT is False
    it = shuffled_batches(10, 4, noise_rng(0))
    epoch = [next(it) for _ in range(3)]  # 4 + 4 + 2
    assert [b.size for b in epoch] == [4, 4, 2]
    assert np.array_equal(np.sort(np.concatenate(epoch)), np.arange(10))
    for b in epoch:
        assert len(set(b.tolist())) == b.size  # a unit at most once per batch
    second = np.concatenate([next(it) for _ in range(3)])
    assert np.array_equal(np.sort(second), np.arange(10))


@pytest.mark.parametrize(("n", "b"), [(0, 2), (5, 0), (5, 1.5)])
def test_shuffled_batches_bad_input(n: int, b: object) -> None:
    with pytest.raises(ValueError):
        next(shuffled_batches(n, b, noise_rng(0)))  # type: ignore[arg-type]
