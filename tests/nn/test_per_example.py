"""privrl.nn.per_example: vectorised per-example gradients equal a Python loop, and clipped sums
bound every example's contribution by C (the sensitivity DP-SGD's noise is calibrated to)."""

from __future__ import annotations

import pytest
import torch

from privrl.nn.per_example import (
    clipped_grad_sum,
    flat_norms,
    linear,
    per_example_grads,
    per_example_grads_loop,
)
from privrl.rl.bcq import DiscreteBCQ
from privrl.rl.cql import DiscreteCQL
from privrl.rl.discrete_common import TransitionBatch

torch.set_num_threads(1)


def _batch(n: int, obs_dim: int = 4, n_actions: int = 3, seed: int = 0, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    return TransitionBatch(
        torch.randn(n, obs_dim, generator=g, dtype=torch.float64),
        torch.randint(0, n_actions, (n,), generator=g),
        scale * torch.randn(n, generator=g, dtype=torch.float64),
        torch.randn(n, obs_dim, generator=g, dtype=torch.float64),
        (torch.rand(n, generator=g) < 0.3).double(),
    )


def _learner(cls: type, dtype: torch.dtype = torch.float64):
    learner = cls(4, 3, hidden=(16, 8), seed=3)
    with torch.no_grad():  # float64 copies: equality to 1e-6 without float32 rounding noise
        learner.params = {k: v.detach().to(dtype) for k, v in learner.params.items()}
        learner.target_params = {
            k: (v + 0.05 * torch.randn_like(v)).to(dtype) for k, v in learner.target_params.items()
        }
    return learner


# A model that applies one layer twice per example (inputs [B, 2, d]): the tape must sum both
# uses, and the ghost norms need the cross terms.
def _shared_params(dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return {
        "a.weight": torch.randn(6, 3, generator=g, dtype=dtype),
        "a.bias": torch.randn(6, generator=g, dtype=dtype),
        "b.weight": torch.randn(1, 6, generator=g, dtype=dtype),
        "b.bias": torch.randn(1, generator=g, dtype=dtype),
    }


def _shared_loss(params: dict[str, torch.Tensor], batch: tuple) -> torch.Tensor:
    x, y = batch  # x [B, 2, 3], y [B]
    h = torch.tanh(linear(x, params["a.weight"], params["a.bias"]))
    out = linear(h, params["b.weight"], params["b.bias"]).squeeze(-1)  # [B, 2]
    return (out.sum(1) - y) ** 2


def _shared_batch(n: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(6)
    return (
        torch.randn(n, 2, 3, generator=g, dtype=torch.float64),
        torch.randn(n, generator=g, dtype=torch.float64),
    )


def _assert_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], tol: float) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].shape == b[k].shape, k
        assert float((a[k] - b[k]).abs().max()) < tol, k


@pytest.mark.parametrize("cls", [DiscreteCQL, DiscreteBCQ])
@pytest.mark.parametrize("method", ["vmap", "batched"])
def test_vectorised_grads_equal_loop(cls: type, method: str) -> None:
    learner = _learner(cls)
    batch = _batch(11)
    ref = per_example_grads_loop(learner.per_example_loss, learner.params, batch)
    got = per_example_grads(learner.per_example_loss, learner.params, batch, method=method)
    _assert_equal(got, ref, 1e-6)
    assert ref["q0.weight"].shape == (11, 16, 4)
    assert float(flat_norms(ref).min()) > 0  # not trivially zero


@pytest.mark.parametrize("cls", [DiscreteCQL, DiscreteBCQ])
def test_float32_grads_close_to_loop(cls: type) -> None:
    learner = cls(4, 3, hidden=(16, 16), seed=1)
    batch = TransitionBatch(*(t.float() if t.is_floating_point() else t for t in _batch(8)))
    ref = per_example_grads_loop(learner.per_example_loss, learner.params, batch)
    for method in ("vmap", "batched"):
        got = per_example_grads(learner.per_example_loss, learner.params, batch, method=method)
        _assert_equal(got, ref, 1e-5)


@pytest.mark.parametrize("method", ["vmap", "batched"])
def test_layer_used_twice_equals_loop(method: str) -> None:
    params, batch = _shared_params(), _shared_batch()
    ref = per_example_grads_loop(_shared_loss, params, batch)
    got = per_example_grads(_shared_loss, params, batch, method=method, check=True)
    _assert_equal(got, ref, 1e-8)


def _reference_clipped_sum(loss_fn, params, batch, c: float) -> dict[str, torch.Tensor]:
    grads = per_example_grads_loop(loss_fn, params, batch)
    norms = flat_norms(grads)
    scale = torch.clamp(c / norms, max=1.0)
    return {k: (g * scale.reshape(-1, *[1] * (g.ndim - 1))).sum(0) for k, g in grads.items()}


@pytest.mark.parametrize("method", ["ghost", "batched", "vmap"])
def test_clipped_sum_matches_loop_and_bounds_norms(method: str) -> None:
    """Σ_i clip(g_i, C) with every clipped per-example gradient of norm ≤ C (clipping binds)."""
    learner = _learner(DiscreteCQL)
    batch = _batch(10, scale=30.0)  # large TD errors: most gradients exceed C
    c = 0.5
    out = clipped_grad_sum(learner.per_example_loss, learner.params, batch, c, method=method)
    ref = _reference_clipped_sum(learner.per_example_loss, learner.params, batch, c)
    _assert_equal(out.sums, ref, 1e-8)
    grads = per_example_grads_loop(learner.per_example_loss, learner.params, batch)
    true_norms = flat_norms(grads)
    assert torch.allclose(out.norms, true_norms, rtol=1e-9)
    assert int((true_norms > c).sum()) >= 5
    clipped_norms = out.norms * out.scales
    assert float(clipped_norms.max()) <= c * (1 + 1e-12)
    assert torch.allclose(out.scales, torch.clamp(c / true_norms, max=1.0))


@pytest.mark.parametrize("method", ["ghost", "batched", "vmap"])
def test_clipped_sum_layer_used_twice(method: str) -> None:
    params, batch = _shared_params(), _shared_batch()
    c = 1.0
    out = clipped_grad_sum(_shared_loss, params, batch, c, method=method, check=True)
    _assert_equal(out.sums, _reference_clipped_sum(_shared_loss, params, batch, c), 1e-8)
    assert float((out.norms * out.scales).max()) <= c * (1 + 1e-12)


def test_sensitivity_of_clipped_sum() -> None:
    """Adding one example moves the clipped sum by at most C (joint over all parameters)."""
    learner = _learner(DiscreteBCQ)
    batch = _batch(12, scale=50.0)
    c = 1.0
    full = clipped_grad_sum(learner.per_example_loss, learner.params, batch, c).sums
    minus = TransitionBatch(*(t[:-1] for t in batch))
    less = clipped_grad_sum(learner.per_example_loss, learner.params, minus, c).sums
    diff = torch.sqrt(sum(((full[k] - less[k]) ** 2).sum() for k in full))
    assert float(diff) <= c * (1 + 1e-9)
    assert float(diff) > 0.9 * c  # the added example's gradient was clipped to norm C


def test_empty_batch_gives_zero_sums() -> None:
    learner = _learner(DiscreteCQL)
    empty = TransitionBatch(*(t[:0] for t in _batch(3)))
    out = clipped_grad_sum(learner.per_example_loss, learner.params, empty, 1.0)
    assert all(float(v.abs().max()) == 0.0 for v in out.sums.values())
    assert out.norms.shape == (0,)
    grads = per_example_grads(learner.per_example_loss, learner.params, empty)
    assert grads["q0.weight"].shape == (0, 16, 4)


def test_parameter_outside_linear_is_refused() -> None:
    params = {**_shared_params(), "temperature": torch.tensor([2.0], dtype=torch.float64)}

    def loss(p: dict[str, torch.Tensor], batch: tuple) -> torch.Tensor:
        return _shared_loss(p, batch) * p["temperature"]

    with pytest.raises(ValueError, match="temperature"):
        per_example_grads(loss, params, _shared_batch(), method="batched")
    with pytest.raises(ValueError, match="temperature"):
        clipped_grad_sum(loss, params, _shared_batch(), 1.0, method="ghost")
    # vmap handles any loss
    got = per_example_grads(loss, params, _shared_batch(), method="vmap")
    _assert_equal(got, per_example_grads_loop(loss, params, _shared_batch()), 1e-8)


def test_check_catches_parameter_used_outside_linear_too() -> None:
    """A weight used through `linear` and also directly: the tape misses the direct use, and
    check=True notices that the per-example gradients do not add up."""

    def loss(p: dict[str, torch.Tensor], batch: tuple) -> torch.Tensor:
        return _shared_loss(p, batch) + p["a.weight"].sum() * batch[1]

    params, batch = _shared_params(), _shared_batch()
    with pytest.raises(ValueError, match="add up"):
        per_example_grads(loss, params, batch, method="batched", check=True)
    with pytest.raises(ValueError, match="add up"):
        clipped_grad_sum(loss, params, batch, 1.0, method="ghost", check=True)


def test_bad_arguments() -> None:
    params, batch = _shared_params(), _shared_batch()
    with pytest.raises(ValueError, match="one loss per example"):
        per_example_grads(lambda p, b: _shared_loss(p, b).sum(), params, batch, method="batched")
    with pytest.raises(ValueError, match="method"):
        per_example_grads(_shared_loss, params, batch, method="magic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="clip_norm"):
        clipped_grad_sum(_shared_loss, params, batch, 0.0)
    with pytest.raises(ValueError, match="leading dimension"):
        per_example_grads(_shared_loss, params, (batch[0], batch[1][:3]))
