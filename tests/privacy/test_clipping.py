"""Clipping: the sensitivity bound every Gaussian release relies on.

Properties (hypothesis, numpy and torch): clipped norms ≤ C(1 + 1e-6); rows already inside
the ball are unchanged; directions are preserved; group sums are bounded and equal a naive
per-group loop; ensemble clipping (flat and per-layer) bounds each copy's joint norm by C and
equals a loop reference; numpy and torch agree.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privrl.privacy.clipping import clip_groups, clip_rows, ensemble_clip, group_sum

TOL = 1e-6
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)  # reproducible

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=64)
max_norms = st.floats(1e-3, 1e3, allow_nan=False)


@st.composite
def matrices(draw, max_rows: int = 12, max_cols: int = 6):
    n = draw(st.integers(1, max_rows))
    d = draw(st.integers(1, max_cols))
    return draw(arrays(np.float64, (n, d), elements=finite))


def row_norms(x: np.ndarray) -> np.ndarray:
    return np.sqrt(np.sum(np.asarray(x, dtype=np.float64).reshape(len(x), -1) ** 2, axis=1))


# --- clip_rows ------------------------------------------------------------------------------------


@SETTINGS
@given(matrices(), max_norms)
def test_clip_rows_bounds_preserves_direction_and_inside_rows(x, c):
    clipped, scales, frac = clip_rows(x, c)
    norms = row_norms(x)
    # bound
    assert np.all(row_norms(clipped) <= c * (1 + TOL))
    # rows already inside are returned bit-for-bit (margin: the test's own norm may differ
    # from the implementation's in the last bit)
    inside = norms <= c * (1 - 1e-12)
    np.testing.assert_array_equal(clipped[inside], x[inside])
    # direction: clipped = s·x with s = min(1, C/‖x‖) ∈ (0, 1]
    np.testing.assert_allclose(scales, np.minimum(1.0, c / np.maximum(norms, 1e-12)), rtol=1e-12)
    np.testing.assert_allclose(clipped, scales[:, None] * x, rtol=1e-12, atol=0)
    assert np.all((scales > 0) & (scales <= 1))
    assert frac == np.mean(scales < 1)
    assert np.all(scales[norms > c * (1 + 1e-12)] < 1)


@SETTINGS
@given(matrices(), max_norms)
def test_clip_rows_torch_agrees_with_numpy(x, c):
    ref = clip_rows(x, c)
    got = clip_rows(torch.from_numpy(x), c)
    assert isinstance(got.clipped, torch.Tensor) and got.clipped.dtype == torch.float64
    np.testing.assert_allclose(got.clipped.numpy(), ref.clipped, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(got.scales.numpy(), ref.scales, rtol=1e-12)
    assert got.fraction_clipped == float(np.mean(got.scales.numpy() < 1))
    inside = row_norms(x) <= c * (1 - 1e-12)
    np.testing.assert_array_equal(got.clipped.numpy()[inside], x[inside])


@SETTINGS
@given(matrices(), max_norms)
def test_clip_rows_float32_torch_bound(x, c):
    """float32 rows: norms are accumulated in float64, so the bound holds to 1e-6."""
    clipped = clip_rows(torch.from_numpy(x).float(), c).clipped
    assert clipped.dtype == torch.float32
    assert np.all(row_norms(clipped.double().numpy()) <= c * (1 + TOL))


def test_clip_rows_examples_and_higher_rank_rows():
    x = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    clipped, scales, frac = clip_rows(x, 1.0)
    np.testing.assert_allclose(clipped, [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]])
    np.testing.assert_allclose(scales, [0.2, 1.0, 1.0])
    assert frac == pytest.approx(1 / 3)
    # a row may be a matrix (e.g. a per-example gradient of a weight): norm over all its axes
    y = np.ones((2, 3, 4))
    out = clip_rows(y, 1.0).clipped
    assert out.shape == y.shape
    np.testing.assert_allclose(row_norms(out), [1.0, 1.0])
    # integer input is promoted to float64
    assert clip_rows(np.array([[3, 4]]), 1.0).clipped.dtype == np.float64


def test_clip_rows_validation():
    with pytest.raises(ValueError):
        clip_rows(np.ones((2, 2)), 0.0)
    with pytest.raises(ValueError):
        clip_rows(np.ones((2, 2)), float("nan"))
    with pytest.raises(ValueError, match="NaN"):
        clip_rows(np.array([[np.nan, 1.0]]), 1.0)
    with pytest.raises(ValueError, match="NaN"):
        clip_rows(torch.tensor([[float("inf"), 1.0]]), 1.0)
    with pytest.raises(ValueError, match="ndim"):
        clip_rows(np.ones(3), 1.0)


# --- clip_groups ---------------------------------------------------------------------------------


@st.composite
def grouped(draw):
    x = draw(matrices(max_rows=20))
    ids = draw(arrays(np.int64, (len(x),), elements=st.integers(0, 6)))
    return x, ids


def naive_clip_groups(x, ids, c):
    out_ids = sorted(set(ids.tolist()))
    sums = []
    for g in out_ids:
        s = x[ids == g].sum(axis=0)
        n = math.sqrt(float(np.sum(s**2)))
        sums.append(s * min(1.0, c / max(n, 1e-12)))
    return np.array(sums), np.array(out_ids)


@SETTINGS
@given(grouped(), max_norms)
def test_clip_groups_bounded_and_matches_loop(data, c):
    x, ids = data
    sums, uids = clip_groups(x, ids, c)
    ref_sums, ref_ids = naive_clip_groups(x, ids, c)
    np.testing.assert_array_equal(uids, ref_ids)
    np.testing.assert_allclose(sums, ref_sums, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(x).max()))
    assert np.all(row_norms(sums) <= c * (1 + TOL))
    # torch agrees (ids as tensor or as numpy)
    tsums, tids = clip_groups(torch.from_numpy(x), torch.from_numpy(ids), c)
    np.testing.assert_array_equal(tids.numpy(), ref_ids)
    np.testing.assert_allclose(tsums.numpy(), sums, rtol=1e-9, atol=1e-9 * max(1.0, c))
    tsums2, _ = clip_groups(torch.from_numpy(x), ids, c)
    np.testing.assert_allclose(tsums2.numpy(), tsums.numpy(), rtol=0, atol=0)


def test_clip_groups_bounds_a_unit_not_its_rows():
    """A unit with many small rows: each row is inside C, but their sum is clipped to C."""
    x = np.tile([[0.5, 0.0]], (10, 1))
    ids = np.array([7] * 10)
    sums, uids = clip_groups(x, ids, 1.0)
    np.testing.assert_allclose(sums, [[1.0, 0.0]])
    assert uids.tolist() == [7]
    # scalar rows and string ids
    s, u = clip_groups(np.array([3.0, -1.0, 0.5]), np.array(["b", "a", "b"]), 2.0)
    np.testing.assert_allclose(s, [-1.0, 2.0])
    assert u.tolist() == ["a", "b"]


def test_group_sum_and_validation():
    sums, ids = group_sum(np.arange(6.0).reshape(3, 2), [2, 0, 2])
    np.testing.assert_allclose(sums, [[2.0, 3.0], [4.0, 6.0]])
    assert ids.tolist() == [0, 2]
    with pytest.raises(ValueError, match="group_ids"):
        group_sum(np.ones((3, 2)), [0, 1])
    with pytest.raises(ValueError, match="group_ids"):
        group_sum(torch.ones(3, 2), torch.tensor([0, 1]))


# --- ensemble_clip -------------------------------------------------------------------------------


@st.composite
def ensembles(draw):
    copies = draw(st.integers(1, 4))
    members = draw(st.integers(1, 4))
    n_tensors = draw(st.integers(1, 3))
    tensors = []
    for _ in range(n_tensors):
        trailing = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
        tensors.append(draw(arrays(np.float64, (copies, members, *trailing), elements=finite)))
    return tensors


def loop_ensemble_clip(tensors, c, mode):
    copies, members = tensors[0].shape[:2]
    n_t = len(tensors)
    out = [t.copy() for t in tensors]
    for ci in range(copies):
        for i in range(members):
            if mode == "flat":
                n = math.sqrt(sum(float(np.sum(t[ci, i] ** 2)) for t in tensors))
                s = min(1.0, (c / math.sqrt(members)) / max(n, 1e-12))
                for o, t in zip(out, tensors, strict=True):
                    o[ci, i] = t[ci, i] * s
            else:
                for o, t in zip(out, tensors, strict=True):
                    n = math.sqrt(float(np.sum(t[ci, i] ** 2)))
                    o[ci, i] = t[ci, i] * min(1.0, (c / math.sqrt(members * n_t)) / max(n, 1e-12))
    return out


def copy_norms(tensors) -> np.ndarray:
    sq = sum(
        np.sum(np.asarray(t, np.float64).reshape(*t.shape[:1], -1) ** 2, axis=1) for t in tensors
    )
    return np.sqrt(sq)


@SETTINGS
@given(ensembles(), max_norms, st.sampled_from(["flat", "per_layer"]))
def test_ensemble_clip_bounds_copy_norm_and_matches_loop(tensors, c, mode):
    out = ensemble_clip(tensors, c, mode=mode)
    assert len(out) == len(tensors)
    assert np.all(copy_norms(out) <= c * (1 + TOL))
    ref = loop_ensemble_clip(tensors, c, mode)
    for o, r in zip(out, ref, strict=True):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-12, atol=0)
    tout = ensemble_clip([torch.from_numpy(t) for t in tensors], c, mode=mode)
    for o, t in zip(out, tout, strict=True):
        assert isinstance(t, torch.Tensor)
        np.testing.assert_allclose(t.numpy(), o, rtol=1e-12, atol=0)


def test_ensemble_clip_per_member_budget():
    """Flat: member bound C/√N — one large member cannot use the others' share; members inside
    C/√N are unchanged. Per-layer: each tensor of a member gets C/√(N·L)."""
    c, n = 2.0, 4
    w = np.zeros((1, n, 3))
    w[0, 0] = [10.0, 0, 0]
    w[0, 1] = [0.1, 0, 0]
    (out,) = ensemble_clip([w], c, mode="flat")
    assert np.linalg.norm(out[0, 0]) == pytest.approx(c / math.sqrt(n))
    np.testing.assert_array_equal(out[0, 1:], w[0, 1:])
    b = np.ones((1, n, 2))
    out_w, out_b = ensemble_clip([w, b], c, mode="per_layer")
    bound = c / math.sqrt(n * 2)
    assert np.linalg.norm(out_w[0, 0]) == pytest.approx(bound)
    assert np.linalg.norm(out_b[0, 0]) == pytest.approx(bound)


def test_ensemble_clip_float32_and_validation():
    g = torch.Generator().manual_seed(0)
    ts = [torch.randn(5, 3, 8, 4, generator=g) * 10, torch.randn(5, 3, 4, generator=g) * 10]
    for mode in ("flat", "per_layer"):
        out = ensemble_clip(ts, 1.0, mode=mode)
        assert all(o.dtype == torch.float32 for o in out)
        assert np.all(copy_norms([o.double().numpy() for o in out]) <= 1.0 + TOL)
    with pytest.raises(ValueError, match="mode"):
        ensemble_clip(ts, 1.0, mode="layer")
    with pytest.raises(ValueError, match="leading dims"):
        ensemble_clip([torch.zeros(2, 3, 1), torch.zeros(2, 4, 1)], 1.0)
    with pytest.raises(ValueError, match="empty"):
        ensemble_clip([], 1.0)
    with pytest.raises(ValueError, match="all numpy"):
        ensemble_clip([torch.zeros(2, 3), np.zeros((2, 3))], 1.0)


def test_long_float32_rows_are_clipped_accurately():
    """Long float32 rows (2e6 entries, not a multiple of the block size): the clipped norm is
    within 1e-6 of C. A plain float32 norm is off by ~1e-5 at this length, so this fails if
    the norm is accumulated naively in float32."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 2_000_003, generator=g) * 3 + 1
    clipped = clip_rows(x, 1.0).clipped
    norms = torch.linalg.vector_norm(clipped.double(), dim=1)
    assert torch.all((norms - 1.0).abs() <= TOL)
    (e,) = ensemble_clip([x.reshape(3, 1, -1)], 1.0)
    assert torch.all(torch.linalg.vector_norm(e.double().reshape(3, -1), dim=1) <= 1 + TOL)
    half = clip_rows(torch.ones(2, 1000, dtype=torch.float16), 1.0).clipped
    assert half.dtype == torch.float16
    assert torch.all(torch.linalg.vector_norm(half.double(), dim=1) <= 1 + 1e-3)
