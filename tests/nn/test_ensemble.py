"""GaussianEnsemble: batched forward/backward equal member-by-member math, bounds, copies.

Float32 tolerance: batched (baddbmm over the C·N stack) and per-member (one matmul per net)
computations sum in different orders, so results agree to float32 rounding, not bitwise; we
require rtol 1e-5 and atol 1e-6 for outputs and gradients.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from privrl.nn.ensemble import MOPO_WEIGHT_DECAYS, GaussianEnsemble, default_weight_decays
from privrl.privacy.clipping import ensemble_clip

TOL = {"rtol": 1e-5, "atol": 1e-6}

torch.set_num_threads(1)


def _diverse(ens: GaussianEnsemble, seed: int = 1) -> GaussianEnsemble:
    """Perturb every copy differently (copies start identical) and the log-variance bounds."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for k, p in ens.parameters_dict().items():
            scale = 0.3 if k.endswith("logvar") else 0.05
            p.add_(scale * torch.randn(p.shape, generator=g))
    return ens


def _member_forward(ens: GaussianEnsemble, c: int, n: int, x: torch.Tensor, leaves: dict):
    """Plain nn.Linear-style math for one network (copy c, member n) on leaf tensors."""
    h = x
    for i in range(ens.n_layers):
        w, b = leaves[f"w{i}"], leaves[f"b{i}"]
        h = F.linear(h, w.T, b[0])  # nn.Linear stores weight as [out, in]
        if i < ens.n_layers - 1:
            h = h * torch.sigmoid(h)  # SWISH
    mean, lv = h[:, : ens.out_dim], h[:, ens.out_dim :]
    hi, lo = leaves["max_logvar"][0], leaves["min_logvar"][0]
    lv = hi - torch.log1p(torch.exp(hi - lv))
    lv = lo + torch.log1p(torch.exp(lv - lo))
    return mean, lv


def _member_loss(ens, c, n, x, y, leaves):
    mean, lv = _member_forward(ens, c, n, x, leaves)
    nll = ((mean - y) ** 2 * torch.exp(-lv) + lv).mean()
    bound = ens.logvar_bound_coef * (leaves["max_logvar"].sum() - leaves["min_logvar"].sum())
    wd = sum(d * 0.5 * (leaves[f"w{i}"] ** 2).sum() for i, d in enumerate(ens.weight_decays))
    return nll + bound + wd


@pytest.mark.parametrize("x_kind", ["shared", "per_member", "per_copy"])
def test_forward_and_backward_match_member_by_member(x_kind: str) -> None:
    C, N, B, din, dout = 3, 4, 9, 5, 3
    ens = _diverse(GaussianEnsemble(din, dout, (16, 12), members=N, copies=C, seed=0))
    g = torch.Generator().manual_seed(2)
    shape = {"shared": (B, din), "per_member": (N, B, din), "per_copy": (C, N, B, din)}[x_kind]
    x = torch.randn(shape, generator=g)
    y = torch.randn((*shape[:-1], dout), generator=g)

    mean, logvar = ens(x)
    assert mean.shape == logvar.shape == (C, N, B, dout)
    loss = ens.loss(x, y)
    assert loss.shape == (C,)
    loss.sum().backward()

    for c in range(C):
        for n in range(N):
            idx = {"shared": (), "per_member": (n,), "per_copy": (c, n)}[x_kind]
            xs, ys = x[idx], y[idx]
            leaves = {
                k: p.detach()[c, n].clone().requires_grad_(True)
                for k, p in ens.parameters_dict().items()
            }
            m_ref, lv_ref = _member_forward(ens, c, n, xs, leaves)
            torch.testing.assert_close(mean[c, n], m_ref, **TOL)
            torch.testing.assert_close(logvar[c, n], lv_ref, **TOL)
            _member_loss(ens, c, n, xs, ys, leaves).backward()
            for k, p in ens.parameters_dict().items():
                torch.testing.assert_close(p.grad[c, n], leaves[k].grad, **TOL)


def test_copies_get_only_their_own_gradient() -> None:
    ens = _diverse(GaussianEnsemble(3, 2, (8,), members=2, copies=3, seed=0))
    x = torch.randn(3, 2, 5, 3)
    y = torch.randn(3, 2, 5, 2)
    ens.loss(x, y)[1].backward()  # only copy 1's loss
    for p in ens.parameters():
        assert p.grad[1].abs().sum() > 0
        assert p.grad[0].abs().sum() == 0 and p.grad[2].abs().sum() == 0


def test_shapes_and_broadcasting() -> None:
    ens = GaussianEnsemble(4, 2, (8, 8), members=3, copies=2, seed=0)
    names = ens.param_names
    assert names == ("w0", "b0", "w1", "b1", "w2", "b2", "max_logvar", "min_logvar")
    p = ens.parameters_dict()
    assert p["w0"].shape == (2, 3, 4, 8) and p["b0"].shape == (2, 3, 1, 8)
    assert p["w2"].shape == (2, 3, 8, 4)  # mean and log-variance
    assert p["max_logvar"].shape == p["min_logvar"].shape == (2, 3, 1, 2)
    assert len(list(ens.parameters())) == len(names)
    x = torch.randn(6, 4)
    ref = ens(x)[0]
    # copy-broadcast [1, N, B, in] and member-broadcast [C, 1, B, in] give the same result
    torch.testing.assert_close(ens(x.expand(1, 3, 6, 4))[0], ref)
    torch.testing.assert_close(ens(x.expand(2, 1, 6, 4))[0], ref)
    with pytest.raises(ValueError, match="must be"):
        ens(torch.randn(4))
    with pytest.raises(ValueError, match="one value per weight matrix"):
        GaussianEnsemble(4, 2, (8, 8), weight_decays=(1e-4,))


def test_logvar_soft_bounds_hold_and_are_learnable() -> None:
    ens = GaussianEnsemble(3, 2, (8,), members=2, copies=1, seed=0)
    with torch.no_grad():
        ens.w1.mul_(1e4)  # drive raw log-variances to huge magnitudes of both signs
    x = torch.randn(500, 3) * 10
    lv = ens(x)[1].detach()
    hi, lo = ens.max_logvar, ens.min_logvar
    # lower bound (float32 softplus underflows to 0 far below it, so >=); upper bound up to
    # the softplus slack log(1 + e^{-(max-min)}) ≈ 3e-5
    slack = math.log1p(math.exp(-(0.5 + 10.0)))
    assert bool((lv >= lo).all()) and bool((lv <= hi + slack + 1e-6).all())
    assert float(lv.max()) > 0.4 and float(lv.min()) < -9.9  # both bounds are reached
    ens.loss(x, torch.zeros(500, 2)).sum().backward()
    assert ens.max_logvar.grad.abs().sum() > 0 and ens.min_logvar.grad.abs().sum() > 0


def test_init_determinism_and_diversity() -> None:
    a = GaussianEnsemble(5, 3, (16, 16), members=4, copies=2, seed=7)
    b = GaussianEnsemble(5, 3, (16, 16), members=4, copies=2, seed=7)
    c = GaussianEnsemble(5, 3, (16, 16), members=4, copies=2, seed=8)
    for k in a.param_names:
        assert torch.equal(a.parameters_dict()[k], b.parameters_dict()[k])
    assert not torch.equal(a.w0, c.w0)
    assert not torch.equal(a.w0[0, 0], a.w0[0, 1])  # members differ
    assert torch.equal(a.w0[0], a.w0[1])  # copies start identical
    # truncated normal init: |w| <= 2·std, std = 1/(2√in)
    assert float(a.w0.detach().abs().max()) <= 2 / (2 * math.sqrt(5)) + 1e-7
    assert float(a.b0.detach().abs().max()) == 0.0
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a(x)[0], b(x)[0])


def test_weight_decays_and_penalties_brute_force() -> None:
    assert default_weight_decays(4) == MOPO_WEIGHT_DECAYS
    assert default_weight_decays(2) == (2.5e-5, 5e-5, 1e-4)
    assert default_weight_decays(1) == (2.5e-5, 1e-4)
    assert default_weight_decays(0) == (1e-4,)
    assert default_weight_decays(6) == (2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 7.5e-5, 7.5e-5, 1e-4)
    ens = _diverse(GaussianEnsemble(3, 2, (8, 8), members=2, copies=2, seed=0))
    p = {k: v.detach() for k, v in ens.parameters_dict().items()}
    for c in range(2):
        wd = sum(
            d * 0.5 * float((p[f"w{i}"][c] ** 2).sum()) for i, d in enumerate(ens.weight_decays)
        )
        assert float(ens.weight_decay_penalty(p)[c]) == pytest.approx(wd, rel=1e-5)
        lvb = 0.01 * float(p["max_logvar"][c].sum() - p["min_logvar"][c].sum())
        assert float(ens.logvar_bound_penalty(p)[c]) == pytest.approx(lvb, rel=1e-5)


def test_nll_loss_is_gaussian_nll_times_two_minus_const() -> None:
    mean, logvar = torch.randn(1, 2, 7, 3), torch.randn(1, 2, 7, 3)
    y = torch.randn(7, 3)
    ref = -torch.distributions.Normal(mean, torch.exp(0.5 * logvar)).log_prob(y)
    expected = (2 * ref - math.log(2 * math.pi)).mean(dim=(-2, -1))
    torch.testing.assert_close(GaussianEnsemble.nll_loss(mean, logvar, y), expected, **TOL)


def test_copy_management() -> None:
    base = _diverse(GaussianEnsemble(4, 2, (8,), members=3, copies=2, seed=0))
    big = base.expand_copies(5)
    assert big.copies == 5
    for k, v in big.parameters_dict().items():
        for c in range(5):
            assert torch.equal(v[c], base.parameters_dict()[k][0])
    with torch.no_grad():
        big.w0[1].add_(1.0)  # copies are independent storage
    assert torch.equal(big.w0[0], base.w0[0]) and not torch.equal(big.w0[1], big.w0[0])
    disp = big.copy_displacement(base.select_copies(0))
    assert set(disp) == set(big.param_names)
    assert float(disp["w0"][1].sub(1.0).abs().max()) < 1e-6
    assert float(disp["w0"][0].abs().max()) == 0.0 and float(disp["b0"].abs().max()) == 0.0
    one = base.select_copies(1)
    assert one.copies == 1 and torch.equal(one.w1[0], base.w1[1])
    base.max_logvar.requires_grad_(False)  # frozen bounds stay frozen in copies
    assert not base.expand_copies(2).max_logvar.requires_grad
    assert not base.select_copies([0, 1]).max_logvar.requires_grad
    assert base.expand_copies(2).w0.requires_grad
    # parameters_dict is live; load_parameters_dict copies values (1 copy broadcasts)
    assert big.parameters_dict()["w0"] is big.w0
    big.load_parameters_dict(one.parameters_dict())
    assert all(torch.equal(big.w0[c], base.w0[1]) for c in range(5))
    with pytest.raises(ValueError, match="shape"):
        big.load_parameters_dict({**one.parameters_dict(), "w0": torch.zeros(2, 3, 4, 8)})
    with pytest.raises(KeyError):
        big.load_parameters_dict({"w0": one.w0})


def test_functional_forward_uses_given_params_only() -> None:
    ens = _diverse(GaussianEnsemble(4, 2, (8,), members=3, copies=1, seed=0))
    x = torch.randn(5, 4)
    params = {k: v.detach().clone() for k, v in ens.parameters_dict().items()}
    torch.testing.assert_close(GaussianEnsemble.functional_forward(params, x)[0], ens(x)[0])
    # a 4-copy stack evaluated without building a module; module parameters untouched
    stacked = {k: v.expand(4, *v.shape[1:]).clone() for k, v in params.items()}
    stacked["b1"][2] += 1.0
    before = ens.b1.detach().clone()
    mean, _ = GaussianEnsemble.functional_forward(stacked, x)
    assert mean.shape == (4, 3, 5, 2)
    torch.testing.assert_close(mean[0], ens(x)[0][0])
    torch.testing.assert_close(mean[2], ens(x)[0][0] + 1.0)
    assert torch.equal(ens.b1, before)


def test_displacements_feed_ensemble_clip() -> None:
    """The stacked layout is what privacy.clipping.ensemble_clip expects ([copies, members])."""
    ref = GaussianEnsemble(4, 2, (8,), members=3, copies=1, seed=0)
    moved = _diverse(ref.expand_copies(6), seed=3)
    disp = list(moved.copy_displacement(ref).values())
    clipped = ensemble_clip(disp, max_norm=0.1, mode="per_layer")
    sq = sum(t.double().square().sum(dim=tuple(range(1, t.dim()))) for t in clipped)
    assert float(sq.sqrt().max()) <= 0.1 * (1 + 1e-6)
