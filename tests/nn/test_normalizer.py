"""Normalizer: statistics, bounds, round trips, the epsilon rule and state dicts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privrl.nn.normalizer import Normalizer


def test_fit_standardises() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal([1.0, -3.0, 10.0], [0.5, 2.0, 7.0], size=(5000, 3))
    norm = Normalizer.fit(x, source="public split")
    np.testing.assert_allclose(norm.mean, x.mean(axis=0))
    np.testing.assert_allclose(norm.std, x.std(axis=0))
    z = norm.transform(x)
    np.testing.assert_allclose(z.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(z.std(axis=0), 1.0, atol=1e-12)
    assert norm.source == "public split" and norm.dim == 3


def test_roundtrip_numpy_and_torch_keep_kind_and_dtype() -> None:
    norm = Normalizer([1.0, 2.0], [0.5, 4.0])
    x32 = np.array([[3.0, -2.0], [0.0, 1.0]], dtype=np.float32)
    z = norm.transform(x32)
    assert z.dtype == np.float32
    np.testing.assert_allclose(z, [[4.0, -1.0], [-2.0, -0.25]])
    np.testing.assert_allclose(norm.inverse(z), x32, rtol=1e-6)
    t = torch.tensor(x32)
    zt = norm.transform(t)
    assert isinstance(zt, torch.Tensor) and zt.dtype == torch.float32
    torch.testing.assert_close(norm.inverse(zt), t)
    torch.testing.assert_close(zt, torch.tensor(z))
    np.testing.assert_allclose(norm.transform([[1, 2]]), [[0.0, 0.0]])  # ints → float64
    with pytest.raises(ValueError, match="dimension"):
        norm.transform(np.zeros((2, 3)))


def test_epsilon_rule_constant_dimension() -> None:
    x = np.stack([np.linspace(0, 1, 11), np.full(11, 5.0)], axis=1)
    norm = Normalizer.fit(x, eps=1e-6)
    assert norm.std[1] == 1.0  # constant feature: std 1, not eps (no 1/eps blow-up)
    z = norm.transform(np.array([[0.5, 6.0]]))
    assert z[0, 1] == pytest.approx(1.0)
    tiny = Normalizer.fit(np.stack([np.linspace(0, 1e-3, 11)], axis=1), eps=1e-6)
    assert tiny.std[0] == pytest.approx(np.linspace(0, 1e-3, 11).std())  # above eps: kept


def test_from_bounds_maps_box_to_unit_interval() -> None:
    low, high = np.array([-1.0, -8.0, -2.0]), np.array([1.0, 8.0, 2.0])
    norm = Normalizer.from_bounds(low, high, source="env bounds")
    np.testing.assert_allclose(norm.transform(low[None]), -1.0)
    np.testing.assert_allclose(norm.transform(high[None]), 1.0)
    np.testing.assert_allclose(norm.transform(((low + high) / 2)[None]), 0.0)
    with pytest.raises(ValueError, match=r"dimensions \[1\]"):
        Normalizer.from_bounds([-1.0, -np.inf], [1.0, np.inf])
    with pytest.raises(ValueError, match="low <= high"):
        Normalizer.from_bounds([1.0], [0.0])


def test_state_dict_roundtrip_and_identity() -> None:
    norm = Normalizer.fit(np.random.default_rng(1).normal(size=(50, 4)), source="public split")
    again = Normalizer.from_state_dict(norm.state_dict())
    np.testing.assert_array_equal(again.mean, norm.mean)
    np.testing.assert_array_equal(again.std, norm.std)
    assert again.source == norm.source and again.eps == norm.eps
    ident = Normalizer.identity(4)
    x = np.arange(8.0).reshape(2, 4)
    np.testing.assert_array_equal(ident.transform(x), x)
    with pytest.raises(ValueError, match="zero rows"):
        Normalizer.fit(np.zeros((0, 2)))
    with pytest.raises(ValueError, match="shape"):
        Normalizer([0.0, 1.0], [1.0])
