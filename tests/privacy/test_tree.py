"""Binary-tree mechanism: dyadic structure against a naive reference with the same noise,
node-vector L1 sensitivity, ε, the noise scale of a prefix, and the Laplace-sum error bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privrl.privacy.events import PureDpEvent
from privrl.privacy.tree import BinaryTreeMechanism, laplace_sum_bound, tree_levels
from tests.noise import noise_rng


def dyadic_nodes(t: int) -> list[tuple[int, int]]:
    """(start, end) (1-based, inclusive) of the complete nodes summing to the prefix [1, t]."""
    out, end = [], 0
    for j in range(t.bit_length() - 1, -1, -1):
        if (t >> j) & 1:
            out.append((end + 1, end + 2**j))
            end += 2**j
    return out


def all_node_sums(x: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """Every complete dyadic node of a stream x [T, d]: (start, end) -> Σ x over it."""
    T = x.shape[0]
    out = {}
    for j in range(tree_levels(T)):
        size = 2**j
        for i in range(T // size):
            out[(i * size + 1, (i + 1) * size)] = x[i * size : (i + 1) * size].sum(axis=0)
    return out


def test_levels() -> None:
    assert [tree_levels(t) for t in (1, 2, 3, 4, 7, 8)] == [1, 2, 2, 3, 3, 4]
    assert tree_levels(10**6) == 20
    with pytest.raises(ValueError):
        tree_levels(0)


def test_outputs_equal_naive_tree_with_the_same_node_noise() -> None:
    """Output at t = Σ over t's dyadic nodes of (exact node sum + that node's noise), where the
    node ending at time τ gets the τ-th noise vector drawn."""
    T, d, chunk, b = 45, 3, 8, 2.0
    x = noise_rng(0).integers(0, 3, size=(T, d)).astype(float)
    tree = BinaryTreeMechanism((d,), T, l1_sensitivity=1.0, scale=b, rngs=noise_rng(7), chunk=chunk)
    ref = noise_rng(7)
    z = np.concatenate([ref.laplace(0.0, b, size=(chunk, d)) for _ in range(math.ceil(T / chunk))])
    nodes = all_node_sums(x)
    for t in range(1, T + 1):
        out = tree.step(x[t - 1])
        expected = sum(nodes[node] + z[node[1] - 1] for node in dyadic_nodes(t))
        np.testing.assert_allclose(out, expected, atol=1e-9)
        assert tree.noise_terms() == len(dyadic_nodes(t))


def test_node_vector_sensitivity_and_epsilon() -> None:
    """Property: replacing one step's vector (L1 change ≤ Δ) moves the vector of all node sums
    by ≤ L·Δ in L1 (one node per level), so ε = L·Δ/b; the release says so."""
    T, d, delta1 = 37, 4, 6.0
    rng = noise_rng(1)
    L = tree_levels(T)
    for _ in range(20):
        x = rng.integers(0, 2, size=(T, d)).astype(float)
        y = x.copy()
        t = int(rng.integers(T))
        change = rng.random(d)
        y[t] += change / change.sum() * delta1 * (1 if rng.random() < 0.5 else -1)
        nx, ny = all_node_sums(x), all_node_sums(y)
        dist = sum(np.abs(nx[k] - ny[k]).sum() for k in nx)
        assert dist <= L * delta1 + 1e-9
        assert sum(1 for k in nx if k[0] <= t + 1 <= k[1]) <= L  # nodes containing step t
    tree = BinaryTreeMechanism((d,), T, l1_sensitivity=delta1, epsilon=0.7, rngs=noise_rng(0))
    assert tree.scale == pytest.approx(L * delta1 / 0.7)
    rel = tree.release("counts", size=d)
    assert rel.event == PureDpEvent(epsilon=pytest.approx(0.7))
    assert tree.release("part", size=1, l1_sensitivity=2.0).event.epsilon == pytest.approx(
        0.7 * 2.0 / delta1
    )


def test_prefix_noise_scale() -> None:
    """At t = 2^k − 1 the output carries k node noises: variance 2·k·b² per coordinate."""
    d, b, k = 40_000, 1.5, 4
    tree = BinaryTreeMechanism((d,), 16, l1_sensitivity=1.0, scale=b, rngs=noise_rng(2), chunk=16)
    for _ in range(2**k - 1):
        out = tree.step(np.zeros(d))
    var = 2 * k * b * b
    assert np.var(out) == pytest.approx(var, rel=6 * math.sqrt(2.5 / d))


def test_per_run_generators_give_batch_independent_results() -> None:
    """Run r draws from its own generator: batching runs together changes nothing."""
    x = np.ones((2, 5))
    together = BinaryTreeMechanism(
        (2, 5), 10, l1_sensitivity=1.0, scale=1.0, rngs=[noise_rng(s) for s in (3, 4)]
    )
    alone = BinaryTreeMechanism((1, 5), 10, l1_sensitivity=1.0, scale=1.0, rngs=[noise_rng(4)])
    for _ in range(10):
        a, b = together.step(x), alone.step(x[1:])
    np.testing.assert_allclose(a[1], b[0])
    with pytest.raises(RuntimeError, match="sized"):
        alone.step(x[1:])


def test_laplace_sum_bound() -> None:
    """Property: P(|Σ_{i≤m} Lap(b)| > bound) ≤ β (up to 4 binomial standard errors: the
    bound is exact for m = 1); 0 for m = 0."""
    rng = noise_rng(3)
    b = 2.0
    assert laplace_sum_bound(b, 1, 0.05) == pytest.approx(b * math.log(1 / 0.05))
    assert laplace_sum_bound(b, 0, 0.05) == 0.0
    for m in (1, 3, 20, 200):
        sums = rng.laplace(0.0, b, size=(20_000, m)).sum(axis=1)
        for beta in (0.1, 0.01):
            tol = 4 * math.sqrt(beta * (1 - beta) / sums.size)
            assert np.mean(np.abs(sums) > laplace_sum_bound(b, m, beta)) <= beta + tol
    with pytest.raises(ValueError):
        laplace_sum_bound(0.0, 3, 0.1)
