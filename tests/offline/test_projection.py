"""The consistency projection (Qiao & Wang eq. 3–4): the vectorised exact solver must return
the LP optimum (checked against scipy HiGHS), a feasible x attaining it, and must be exact on
consistent counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privrl.rl import projection
from privrl.rl.projection import project_counts, project_counts_lp

# Tolerance on t and on the constraints: HiGHS solves to 1e-10 primal/dual feasibility; the
# counts below are at most ~1e3, so agreement to 1e-7 absolute is a strict check.
ATOL = 1e-7


def assert_solution(n_next, n_total, slack, x, t) -> None:
    """x is feasible for (3–4) and attains objective t."""
    n_next, n_total, slack = (np.asarray(a, dtype=float) for a in (n_next, n_total, slack))
    assert np.all(x >= 0)
    assert np.all(np.abs(x.sum(-1) - n_total) <= slack + ATOL)
    np.testing.assert_allclose(np.abs(x - n_next).max(-1), t, atol=ATOL)


def noisy_rows(rng: np.random.Generator, rows: int, S: int, sigma: float):
    """Rows shaped like DP-APVI's: sparse true counts + Gaussian noise, clipped at 0."""
    n = np.zeros((rows, S))
    k = min(3, S)
    n[:, :k] = rng.integers(0, 40, (rows, k))
    n_next = np.maximum(0.0, n + rng.normal(0, sigma, (rows, S)))
    n_total = np.maximum(0.0, n.sum(1) + rng.normal(0, sigma, rows))
    slack = rng.uniform(0, 4 * sigma, rows)
    return n_next, n_total, slack


def test_matches_linprog_on_noisy_count_rows() -> None:
    """Property: t equals the HiGHS LP optimum on 300 DP-APVI-like rows (S = 12)."""
    rng = np.random.default_rng(0)
    n_next, n_total, slack = noisy_rows(rng, 300, 12, sigma=5.0)
    ours = project_counts(n_next, n_total, slack)
    ref = project_counts_lp(n_next, n_total, slack)
    np.testing.assert_allclose(ours.t, ref.t, atol=ATOL)
    assert_solution(n_next, n_total, slack, ours.x, ours.t)


@settings(max_examples=150, deadline=None)
@given(
    S=st.integers(1, 7),
    data=st.data(),
)
def test_matches_linprog_hypothesis(S: int, data: st.DataObject) -> None:
    """Property: for arbitrary rows (negative entries allowed, any feasible slack) the optimum
    equals the LP's to 1e-7 and x is feasible."""
    vals = st.floats(-50, 200, allow_nan=False, allow_infinity=False)
    n_next = np.array(data.draw(st.lists(vals, min_size=S, max_size=S)))
    n_total = data.draw(st.floats(-50, 500, allow_nan=False))
    slack = data.draw(st.floats(0, 100, allow_nan=False))
    if n_total + slack < 0:
        slack = -n_total + data.draw(st.floats(0, 10))
    ours = project_counts(n_next, n_total, slack)
    ref = project_counts_lp(n_next, n_total, slack)
    assert float(ours.t) == pytest.approx(float(ref.t), abs=ATOL, rel=1e-9)
    assert_solution(n_next, n_total, slack, ours.x, ours.t)


def test_consistent_counts_are_fixed_points() -> None:
    """Property: exact counts (Σ n_{s,a,s'} = n_{s,a}) with slack 0 — APVI's case — are returned
    unchanged with t = 0, bit for bit."""
    rng = np.random.default_rng(1)
    n_next = rng.integers(0, 50, (4, 5, 3, 6)).astype(float)
    out = project_counts(n_next, n_next.sum(-1), 0.0)
    assert np.array_equal(out.x, n_next)
    assert np.array_equal(out.t, np.zeros((4, 5, 3)))


def test_batch_shape_broadcast_and_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Property: any leading shape works, a scalar slack broadcasts, and chunked processing
    gives exactly the same result as one chunk."""
    rng = np.random.default_rng(2)
    n_next, n_total, _ = noisy_rows(rng, 60, 8, sigma=3.0)
    whole = project_counts(n_next.reshape(3, 4, 5, 8), n_total.reshape(3, 4, 5), 7.5)
    assert whole.x.shape == (3, 4, 5, 8) and whole.t.shape == (3, 4, 5)
    monkeypatch.setattr(projection, "_CHUNK_ELEMENTS", 8 * 7)  # 7 rows per chunk
    chunked = project_counts(n_next, n_total, 7.5)
    np.testing.assert_array_equal(chunked.t, whole.t.reshape(-1))
    np.testing.assert_array_equal(chunked.x, whole.x.reshape(-1, 8))


def test_tight_sum_constraint_and_uniqueness() -> None:
    """A hand-checked row: n' = (10, 0, 0), m' = 4, slack 1 ⇒ Σx ≤ 5 forces x₁ = 5 (t = 5)."""
    out = project_counts([10.0, 0.0, 0.0], 4.0, 1.0)
    assert float(out.t) == pytest.approx(5.0)
    np.testing.assert_allclose(out.x, [5.0, 0.0, 0.0])
    # Too little mass: n' = (1, 1), m' = 10, slack 2 ⇒ Σx ≥ 8 ⇒ t = 3, x = (4, 4).
    out = project_counts([1.0, 1.0], 10.0, 2.0)
    assert float(out.t) == pytest.approx(3.0)
    np.testing.assert_allclose(out.x, [4.0, 4.0])


def test_rejects_infeasible_and_bad_inputs() -> None:
    with pytest.raises(ValueError, match="infeasible"):
        project_counts([1.0, 2.0], -5.0, 1.0)
    with pytest.raises(ValueError, match="slack"):
        project_counts([1.0, 2.0], 3.0, -1.0)
    with pytest.raises(ValueError, match="NaN"):
        project_counts([1.0, np.nan], 3.0, 1.0)
    with pytest.raises(ValueError, match="broadcast"):
        project_counts(np.ones((3, 2)), np.ones(4), 1.0)
