"""Feature maps: shapes, values and the spec parser."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given
from hypothesis import strategies as st

from privrl.rl.features import (
    HIV_LOG_MEAN,
    HIV_LOG_STD,
    FeatureMap,
    FourierBasis,
    LogStandardised,
    OneHot,
    StateAggregation,
    make_features,
)

MC_BOX = spaces.Box(np.array([-1.2, -0.07]), np.array([0.5, 0.07]), dtype=np.float64)


def test_fourier_order5_in_2d_has_36_features_first_constant() -> None:
    f = FourierBasis(MC_BOX.low, MC_BOX.high, 5)
    assert f.dim == 36 and f.spec == "fourier:5" and isinstance(f, FeatureMap)
    x = np.random.default_rng(0).uniform(MC_BOX.low, MC_BOX.high, size=(100, 2))
    phi = f(x)
    assert phi.shape == (100, 36) and phi.dtype == np.float64
    np.testing.assert_array_equal(phi[:, 0], 1.0)
    assert np.all(np.abs(phi) <= 1.0)
    assert np.linalg.matrix_rank(phi) == 36  # the features are not redundant


def test_fourier_values_are_cosines_of_the_normalised_state() -> None:
    f = FourierBasis([0.0, 0.0], [2.0, 4.0], 2)  # s̄ = (x/2, y/4)
    phi = f(np.array([[1.0, 1.0]]))[0]  # s̄ = (0.5, 0.25)
    c = f.coefficients
    np.testing.assert_allclose(phi, np.cos(np.pi * (0.5 * c[:, 0] + 0.25 * c[:, 1])))
    i = int(np.flatnonzero((c[:, 0] == 1) & (c[:, 1] == 2))[0])
    assert phi[i] == pytest.approx(-1.0)  # cos(π(0.5 + 0.5))


@given(st.lists(st.floats(-10, 10), min_size=2, max_size=2))
def test_fourier_bounded_everywhere(s: list[float]) -> None:
    phi = FourierBasis(MC_BOX.low, MC_BOX.high, 5)(np.array([s]))
    assert np.all(np.abs(phi) <= 1.0) and phi[0, 0] == 1.0


def test_onehot() -> None:
    f = OneHot(5)
    phi = f(np.array([0, 3, 4]))
    np.testing.assert_array_equal(phi, np.eye(5)[[0, 3, 4]])
    np.testing.assert_array_equal(f(np.array([[2]])), np.eye(5)[[2]])
    with pytest.raises(ValueError, match="out of range"):
        f(np.array([5]))
    with pytest.raises(ValueError, match="out of range"):
        f(np.array([-1]))


def test_state_aggregation_cells() -> None:
    f = StateAggregation([0.0, 0.0], [1.0, 2.0], 4)
    assert f.dim == 16 and f.spec == "aggregation:4"
    x = np.array([[0.0, 0.0], [0.99, 1.99], [0.3, 1.2], [-5.0, 9.0], [1.0, 2.0]])
    # cell (i, j) = (floor(4 x), floor(2 y)), clipped to the edges; flat index 4 i + j
    np.testing.assert_array_equal(f.cell(x), [0, 15, 4 * 1 + 2, 0 * 4 + 3, 15])
    phi = f(x)
    np.testing.assert_array_equal(phi.sum(axis=1), 1.0)
    assert phi[2, 6] == 1.0
    g = StateAggregation([0.0, 0.0], [1.0, 1.0], [2, 3])
    assert g.dim == 6 and g.spec == "aggregation:2,3"


def test_log_standardised() -> None:
    f = LogStandardised([1.0, 2.0], [0.5, 2.0], bias=True)
    phi = f(np.array([[100.0, 1000.0]]))
    np.testing.assert_allclose(phi, [[1.0, (2 - 1) / 0.5, (3 - 2) / 2.0]])
    g = LogStandardised([0.0], [1.0], bias=False)
    assert g.dim == 1 and np.isfinite(g(np.array([[0.0]]))).all()  # floored, not −inf


def test_make_features_valid_specs() -> None:
    assert isinstance(make_features("onehot", spaces.Discrete(7)), OneHot)
    assert make_features("onehot", spaces.Discrete(7)).dim == 7
    f = make_features("fourier:5", MC_BOX)
    assert isinstance(f, FourierBasis) and f.dim == 36
    assert make_features(" Fourier:3 ", MC_BOX).dim == 16
    assert make_features("aggregation:10", MC_BOX).dim == 100
    assert make_features("aggregation:10,5", MC_BOX).dim == 50
    hiv_space = spaces.Box(0.0, np.inf, shape=(6,), dtype=np.float64)
    h = make_features("hiv-log", hiv_space)
    assert h.dim == 7 and h.spec == "hiv-log"
    phi = h(10.0 ** HIV_LOG_MEAN[None])
    np.testing.assert_allclose(phi, [[1.0, 0, 0, 0, 0, 0, 0]], atol=1e-12)
    assert np.all(HIV_LOG_STD > 0)
    for spec in ("fourier:5", "aggregation:10", "hiv-log"):
        space = hiv_space if spec == "hiv-log" else MC_BOX
        assert (
            make_features(make_features(spec, space).spec, space).dim
            == make_features(spec, space).dim
        )


@pytest.mark.parametrize(
    ("spec", "space", "match"),
    [
        ("", MC_BOX, "non-empty"),
        ("bogus", MC_BOX, "unknown feature spec"),
        ("fourier", MC_BOX, "give the order"),
        ("fourier:x", MC_BOX, "must be an integer"),
        ("fourier:-1", MC_BOX, ">= 0"),
        ("fourier:5", spaces.Discrete(4), "Box"),
        ("fourier:5", spaces.Box(-np.inf, np.inf, shape=(2,)), "finite"),
        ("aggregation", MC_BOX, "bins"),
        ("aggregation:0", MC_BOX, ">= 1"),
        ("aggregation:2,3,4", MC_BOX, "one per dimension"),
        ("onehot", MC_BOX, "Discrete"),
        ("onehot:3", spaces.Discrete(3), "no argument"),
        ("hiv-log", MC_BOX, "6-dim"),
    ],
)
def test_make_features_errors(spec: str, space: spaces.Space, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_features(spec, space)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError):
        FourierBasis([0.0], [0.0], 3)  # empty box
    with pytest.raises(ValueError):
        StateAggregation([0.0], [1.0], 0)
    with pytest.raises(ValueError):
        LogStandardised([0.0], [0.0])
    with pytest.raises(ValueError):
        FourierBasis([0.0, 0.0], [1.0, 1.0], 2)(np.zeros((3, 3)))  # wrong state dimension
