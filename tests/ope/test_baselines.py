"""DP-LSW / DP-LSL (Balle et al. 2016): first-visit MC, smooth-sensitivity formulas against
direct computations on small cases, and the privacy record."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privrl.envs.chain import ChainMDP
from privrl.ope.baselines import (
    FirstVisit,
    dp_lsl,
    dp_lsw,
    first_visit_returns,
    lsl_estimate,
    lsl_psi,
    lsl_sigma,
    lsw_estimate,
    lsw_phi_w,
    lsw_psi,
    lsw_sigma,
    smooth_constants,
)
from privrl.privacy.events import ApproxDpEvent
from privrl.privacy.units import NeighbourRelation

S, R = 3, 1.0
# Every first-visit pattern over 3 states with extreme returns {0, R}: 27 trajectory types.
TYPES = [
    dict(zip(sub, vals, strict=True))
    for k in range(S + 1)
    for sub in itertools.combinations(range(S), k)
    for vals in itertools.product([0.0, R], repeat=k)
]


def summarise(X: list[dict[int, float]]) -> FirstVisit:
    counts, sums = np.zeros(S), np.zeros(S)
    for tr in X:
        for s, f in tr.items():
            counts[s] += 1
            sums[s] += f
    mean = np.divide(sums, counts, out=np.zeros(S), where=counts > 0)
    return FirstVisit(counts.astype(np.int64), mean, len(X))


def cases(n: int, seed: int = 0):
    """Random small problems (Φ, ρ, dataset X) and all replace-one neighbours of X."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        Phi = rng.normal(size=(S, 2))
        rho = rng.dirichlet(np.ones(S))
        m = int(rng.integers(2, 6))
        X = [TYPES[i] for i in rng.integers(0, len(TYPES), m)]
        neighbours = [[*X[:j], t, *X[j + 1 :]] for j in range(m) for t in TYPES]
        yield Phi, rho, X, neighbours, rng


def test_first_visit_returns_match_a_loop() -> None:
    """m_s and F̄_s equal a per-episode loop (first visit, discounted return-to-go)."""
    c = ChainMDP(n_states=8)
    data = c.sample(60, seed=1)
    fv = first_visit_returns(data, lambda o: np.asarray(o).reshape(-1), 8, c.gamma)
    counts, sums = np.zeros(8), np.zeros(8)
    for ep in data.iter_episodes():
        seen = set()
        for t in range(ep.length):
            s = int(ep.observations[t])
            if s in seen:
                continue
            seen.add(s)
            counts[s] += 1
            sums[s] += sum(c.gamma ** (k - t) * ep.rewards[k] for k in range(t, ep.length))
    assert np.array_equal(fv.counts, counts)
    assert np.allclose(fv.mean_returns, np.divide(sums, counts, out=np.zeros(8), where=counts > 0))


def test_lsw_psi_is_the_max_over_k() -> None:
    """Ψ = max_k e^{−kβ} Σ_s ρ_s/max(m_s − k, 1)², against a direct loop over k < 2000
    (beyond max m_s nothing changes)."""
    rng = np.random.default_rng(2)
    for _ in range(20):
        counts = rng.integers(0, 60, size=5)
        rho = rng.dirichlet(np.ones(5))
        beta = float(rng.uniform(1e-3, 0.5))
        direct = max(
            math.exp(-k * beta)
            * sum(r / max(c - k, 1) ** 2 for r, c in zip(rho, counts, strict=False))
            for k in range(2_000)
        )
        assert lsw_psi(rho, counts, beta) == pytest.approx(direct, rel=1e-12)


def test_lsl_psi_is_the_max_over_k() -> None:
    rng = np.random.default_rng(3)
    Phi = rng.normal(size=(4, 2))
    for _ in range(10):
        counts = rng.integers(0, 30, size=4)
        m = int(counts.max()) + 5
        rho = rng.dirichlet(np.ones(4))
        lam, beta = 50.0, float(rng.uniform(1e-3, 0.3))
        c_lam = np.linalg.norm(Phi, "fro") * rho.max() / math.sqrt(2 * lam)
        direct = max(
            math.exp(-k * beta)
            * (
                c_lam * math.sqrt(sum(r * min(c + k, m) for r, c in zip(rho, counts, strict=False)))
                + np.linalg.norm(rho)
            )
            ** 2
            for k in range(m + 200)
        )
        assert lsl_psi(Phi, rho, counts, m, lam, beta) == pytest.approx(direct, rel=1e-12)


def test_lsw_local_sensitivity_bound_by_enumeration() -> None:
    """For every replace-one neighbour X' of small datasets X:
    ‖θ_X − θ_X'‖ ≤ (R/(1−γ))‖(Γ^{1/2}Φ)⁺‖_F √φ_w(X, 0) (here the return range is R), and the
    smooth noise scale is β/2-smooth: σ_X ≤ e^{β/2} σ_X'."""
    worst = 0.0
    for Phi, rho, X, neighbours, _ in cases(40):
        fx = summarise(X)
        th = lsw_estimate(Phi, rho, fx)
        pinv = np.linalg.norm(np.linalg.pinv(np.sqrt(rho)[:, None] * Phi), "fro")
        bound = R * pinv * math.sqrt(lsw_phi_w(rho, fx.counts, 0)[0])
        _, beta = smooth_constants(0.5, 1e-5, 2)
        sx = lsw_sigma(Phi, rho, fx.counts, epsilon=0.5, delta=1e-5, return_range=R)
        for Y in neighbours:
            fy = summarise(Y)
            ratio = np.linalg.norm(lsw_estimate(Phi, rho, fy) - th) / bound
            worst = max(worst, ratio)
            sy = lsw_sigma(Phi, rho, fy.counts, epsilon=0.5, delta=1e-5, return_range=R)
            assert sx <= math.exp(beta / 2) * sy * (1 + 1e-12)
    assert worst <= 1 + 1e-9
    assert worst > 0.5  # the bound is nearly attained: the check has teeth


def test_lsl_local_sensitivity_bound_by_enumeration() -> None:
    """‖θ_λ(X) − θ_λ(X')‖ ≤ σ_X/α (the spec's DP-LSL smooth bound at k = 0 already covers the
    local sensitivity) and σ_X ≤ e^{β} σ_X' for every replace-one neighbour."""
    for Phi, rho, X, neighbours, rng in cases(30, seed=1):
        fx = summarise(X)
        bound_lam = rho.max() * np.linalg.norm(Phi, "fro") ** 2
        lam = bound_lam * float(rng.uniform(1.05, 5.0))
        alpha, beta = smooth_constants(0.5, 1e-5, 2)
        sx = lsl_sigma(Phi, rho, fx.counts, fx.m, lam, epsilon=0.5, delta=1e-5, return_range=R)
        th = lsl_estimate(Phi, rho, fx, lam)
        for Y in neighbours:
            fy = summarise(Y)
            assert np.linalg.norm(lsl_estimate(Phi, rho, fy, lam) - th) <= sx / alpha
            sy = lsl_sigma(Phi, rho, fy.counts, fy.m, lam, epsilon=0.5, delta=1e-5, return_range=R)
            assert sx <= math.exp(beta) * sy * (1 + 1e-12)


def test_lsl_requires_large_lambda() -> None:
    Phi, rho = np.eye(3), np.full(3, 1 / 3)
    with pytest.raises(ValueError, match="λ >"):
        lsl_sigma(Phi, rho, np.ones(3, int), 5, 0.9, epsilon=1, delta=1e-5, return_range=1)


def test_release_noise_and_report() -> None:
    """The release is an (ε, δ) smooth-sensitivity Gaussian on θ: ApproxDpEvent(ε, δ),
    replace-one, one trajectory; the injected noise has std σ_X (1,000 draws × 3 coordinates:
    within 5%, ~4 SE)."""
    fv = FirstVisit(np.array([5, 3, 0]), np.array([0.5, 1.0, 0.0]), 6)
    Phi, rho = np.eye(3), np.full(3, 1 / 3)
    rng = np.random.default_rng(0)
    res = dp_lsw(fv, Phi, rho, epsilon=1.0, delta=1e-5, return_range=10.0, rng=rng)
    rep = res.report
    assert rep.epsilon == 1.0 and rep.delta == 1e-5
    assert rep.relation is NeighbourRelation.REPLACE_ONE and rep.unit.value == "trajectory"
    assert rep.releases[0].event == ApproxDpEvent(epsilon=1.0, delta=1e-5)
    draws = np.stack(
        [
            dp_lsw(fv, Phi, rho, epsilon=1.0, delta=1e-5, return_range=10.0, rng=rng).theta
            for _ in range(1000)
        ]
    )
    assert abs((draws - res.theta_nonprivate).std() / res.sigma - 1) < 0.05
    res2 = dp_lsl(fv, Phi, rho, epsilon=1.0, delta=1e-5, return_range=10.0, rng=rng, c=2.0)
    assert res2.config["lambda"] == pytest.approx(2.0 * 6**0.4)
    assert res2.report.releases[0].event == ApproxDpEvent(epsilon=1.0, delta=1e-5)
