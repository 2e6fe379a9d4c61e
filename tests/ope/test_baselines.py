"""DP-LSW / DP-LSL (Balle et al. 2016): first-visit MC, smooth-sensitivity formulas against
direct computations on small cases, and the privacy record."""

from __future__ import annotations

import io
import itertools
import math

import numpy as np
import pytest
from rich.console import Console

from privrl.data.dataset import TrajectoryDataset
from privrl.envs.chain import ChainMDP
from privrl.ope.baselines import (
    FirstVisit,
    dp_lsl,
    dp_lsw,
    first_visit_returns,
    lsl_estimate,
    lsl_psi,
    lsl_sigma,
    lsl_sigma_bounds,
    lsw_estimate,
    lsw_phi_w,
    lsw_psi,
    lsw_sigma,
    lsw_sigma_bounds,
    plan_dp_lsl,
    plan_dp_lsw,
    return_range,
    smooth_constants,
)
from privrl.privacy.events import ApproxDpEvent
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation
from tests.noise import noise_rng

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
    rng = noise_rng(seed)
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
    rng = noise_rng(2)
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
    rng = noise_rng(3)
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


def test_lsw_smooth_bound_covers_the_local_sensitivity() -> None:
    """Sensitivity bound: for every replace-one neighbour X' of small datasets X,
    ‖θ_X − θ_X'‖ ≤ σ_X/α — the noise scale the release draws with covers the local
    sensitivity it is meant to cover — and some neighbour comes within a factor 2 of it (a
    σ_X half as large fails: the check has teeth)."""
    closest = 0.0
    for Phi, rho, X, neighbours, _ in cases(40):
        fx = summarise(X)
        alpha, _ = smooth_constants(0.5, 1e-5, 2)
        sx = lsw_sigma(Phi, rho, fx.counts, epsilon=0.5, delta=1e-5, return_range=R)
        th = lsw_estimate(Phi, rho, fx)
        for Y in neighbours:
            gap = np.linalg.norm(lsw_estimate(Phi, rho, summarise(Y)) - th)
            assert gap <= sx / alpha * (1 + 1e-9)
            closest = max(closest, gap / (sx / alpha))
    assert closest > 0.5


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
    rng = noise_rng(0)
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
    assert abs((draws - res.theta_nonprivate).std() / res.private_sigma - 1) < 0.05
    res2 = dp_lsl(fv, Phi, rho, epsilon=1.0, delta=1e-5, return_range=10.0, rng=rng, c=2.0)
    assert res2.config["lambda"] == pytest.approx(2.0 * 6**0.4)
    assert res2.report.releases[0].event == ApproxDpEvent(epsilon=1.0, delta=1e-5)


def test_the_data_dependent_noise_scale_is_withheld() -> None:
    """Privacy property: σ_X depends on the first-visit counts, so it differs between
    neighbours (checked), yet the published report — release, sensitivity, noise, extra — is
    the same for both: the sensitivity is NaN with a 'withheld' note, the noise lists only α
    and β, and the result's config holds public settings only. The report round-trips through
    JSON and its table prints the sensitivity as withheld."""
    Phi, rho = np.eye(3), np.full(3, 1 / 3)
    x = FirstVisit(np.array([5, 3, 0]), np.array([0.5, 1.0, 0.0]), 6)
    y = FirstVisit(np.array([4, 3, 1]), np.array([0.5, 1.0, 0.2]), 6)  # one trajectory replaced
    kw = dict(epsilon=1.0, delta=1e-5, return_range=10.0)
    for run, sig in ((dp_lsw, lsw_sigma), (dp_lsl, None)):
        extra = {} if run is dp_lsw else {"c": 5.0}
        rx = run(x, Phi, rho, rng=noise_rng(0), **kw, **extra)  # type: ignore[operator]
        ry = run(y, Phi, rho, rng=noise_rng(0), **kw, **extra)  # type: ignore[operator]
        assert rx.private_sigma != ry.private_sigma
        if sig is not None:
            assert rx.private_sigma == sig(Phi, rho, x.counts, **kw)
        a, b = rx.report.to_dict(), ry.report.to_dict()
        a.pop("created"), b.pop("created")
        assert a == b and rx.config == ry.config
        (rel,) = a["releases"]
        assert rel["sensitivity"] == "nan" and set(rel["noise"]) == {"alpha", "beta"}
        assert rel["mechanism"] == "gaussian (smooth sensitivity)"
        assert "withheld" in rel["extra"]["sensitivity"]
        assert "sigma" not in str(rx.config) and "sigma" not in str(a)
        back = PrivacyReport.from_dict(rx.report.to_dict())
        assert math.isnan(back.releases[0].sensitivity) and back.epsilon == 1.0
        assert back.releases[0].event == ApproxDpEvent(epsilon=1.0, delta=1e-5)
        console = Console(width=200, record=True, file=io.StringIO())
        rx.report.print(console)
        assert "withheld, data-dependent (l2)" in console.export_text()


def test_noise_scale_lies_in_public_bounds_and_never_fails() -> None:
    """The drawn σ is σ_X clamped to a public interval [σ_lo, σ_hi] that holds σ_X for every
    dataset of m trajectories (checked on random counts, LSW and LSL), a NaN becomes σ_hi
    (a valid, larger smooth bound) instead of an error, and a configuration whose interval
    is not representable is refused from public inputs alone (no data needed)."""
    rng = noise_rng(4)
    Phi = rng.normal(size=(5, 3))
    rho = rng.dirichlet(np.ones(5))
    m, lam = 40, 4 * float(rho.max()) * float(np.linalg.norm(Phi, "fro")) ** 2
    kw = dict(epsilon=0.7, delta=1e-6, return_range=3.0)
    lw, lsl = lsw_sigma_bounds(Phi, rho, m, **kw), lsl_sigma_bounds(Phi, rho, m, lam, **kw)
    for _ in range(200):
        counts = rng.integers(0, m + 1, size=5)
        assert lw[0] <= lsw_sigma(Phi, rho, counts, **kw) <= lw[1] * (1 + 1e-12)
        assert lsl[0] <= lsl_sigma(Phi, rho, counts, m, lam, **kw) <= lsl[1] * (1 + 1e-12)
    for extreme in (np.zeros(5, int), np.full(5, m)):
        assert lw[0] <= lsw_sigma(Phi, rho, extreme, **kw) <= lw[1] * (1 + 1e-12)
    plan = plan_dp_lsw(Phi, rho, m, **kw)
    assert plan.sigma_bounds == lw
    assert plan.noise_scale(math.nan) == lw[1] and plan.noise_scale(math.inf) == lw[1]
    assert plan.noise_scale(0.0) == lw[0]
    assert plan_dp_lsl(Phi, rho, m, lam=lam, **kw).sigma_bounds == lsl
    with pytest.raises(ValueError, match="not representable"):
        plan_dp_lsw(Phi, rho, m, epsilon=1e-300, delta=1e-6, return_range=1e10)
    with pytest.raises(ValueError, match="λ >"):
        plan_dp_lsl(Phi, rho, m, lam=0.5 * lam / 4, **kw)


def test_return_range_holds_every_return() -> None:
    """For rewards in [a, b] and any episode lengths, every discounted return-to-go lies in an
    interval of width `return_range((a, b), γ)` (checked against extreme and random reward
    sequences); with 0 in [a, b] it is the paper's (b − a)/(1 − γ); γ = 1 is refused."""
    gamma = 0.9
    assert return_range((0.0, 1.0), gamma) == pytest.approx(10.0)
    assert return_range((-1.0, 0.0), gamma) == pytest.approx(10.0)
    rng = noise_rng(0)
    for a, b in ((0.0, 1.0), (-1.0, 0.0), (-0.5, 2.0), (0.5, 1.5), (-3.0, -1.0)):
        width = return_range((a, b), gamma)
        seqs = [np.full(T, v) for T in (1, 2, 200) for v in (a, b)]
        seqs += [rng.uniform(a, b, size=int(rng.integers(1, 200))) for _ in range(50)]
        G = [sum(gamma**k * r for k, r in enumerate(s)) for s in seqs]
        assert max(G) - min(G) <= width * (1 + 1e-12)
    assert return_range((0.5, 1.5), gamma) > 1.0 / (1 - gamma)  # 0 outside: wider than R/(1−γ)
    with pytest.raises(ValueError, match="γ"):
        return_range((0.0, 1.0), 1.0)


def test_rewards_are_clipped_to_the_declared_bounds() -> None:
    """The declared reward interval is enforced on the data (clipping), never checked against
    it: a dataset with a reward of 10⁶ gives the same first-visit summaries as the same
    dataset with that reward at the interval's top, so the sensitivity bound holds."""
    c = ChainMDP(n_states=8)
    data = c.sample(30, seed=2)
    rewards = np.asarray(data.rewards).copy()
    big, top = rewards.copy(), rewards.copy()
    big[3], top[3] = 1e6, 1.0
    fields = dict(
        observations=data.observations,
        actions=data.actions,
        terminated=data.terminated,
        truncated=data.truncated,
        episode_offsets=data.episode_offsets,
        metadata=data.metadata,
    )
    index = lambda o: np.asarray(o).reshape(-1)  # noqa: E731
    fv = [
        first_visit_returns(
            TrajectoryDataset(rewards=r, **fields), index, 8, c.gamma, reward_bounds=(0.0, 1.0)
        )
        for r in (big, top)
    ]
    assert np.array_equal(fv[0].counts, fv[1].counts)
    assert np.array_equal(fv[0].mean_returns, fv[1].mean_returns)
    assert fv[0].mean_returns.max() <= return_range((0.0, 1.0), c.gamma)
