"""Mechanisms: noise scale, Release fields, DpEvent values, validation, RNG discipline.

Empirical noise checks use fixed seeds and tolerances of ~5-6 standard errors of the
statistic (stated per test), so they pass deterministically and fail for a wrong scale
(a factor √2 or a 5% error is many standard errors away at these sample sizes).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution as pld
from scipy import stats
from scipy.special import logsumexp

from privrl.privacy.events import ApproxDpEvent, PureDpEvent
from privrl.privacy.mechanisms import (
    binomial_delta,
    binomial_mechanism,
    discrete_gaussian_mechanism,
    discrete_laplace_mechanism,
    gaussian_mechanism,
    gaussian_noise_like,
    gaussian_symmetric_matrix,
    laplace_mechanism,
    privatize_sum_torch,
)
from privrl.privacy.release import Release
from tests.noise import noise_rng

N = 200_000


def rng(seed: int = 0) -> np.random.Generator:
    return noise_rng(seed)


def roundtrip(release: Release) -> None:
    """The release serialises to JSON types and back without loss."""
    assert Release.from_dict(release.to_dict()) == release


# --- Gaussian --------------------------------------------------------------------------------


def test_gaussian_noise_scale_and_release():
    """Noise std = σ within 1% (SE of the std at 200k draws is 0.16%); mean within 5 SE;
    Release: l2 norm, σ and z = σ/Δ recorded, GaussianDpEvent(z), size = #coordinates."""
    value = np.full(N, 3.0)
    out, rel = gaussian_mechanism(value, sensitivity=2.0, sigma=5.0, rng=rng(1), name="v")
    noise = out - value
    assert abs(noise.std() / 5.0 - 1) < 0.01
    assert abs(noise.mean()) < 5 * 5.0 / math.sqrt(N)
    assert out.dtype == np.float64 and out.shape == value.shape
    assert rel.mechanism == "gaussian" and rel.norm == "l2" and rel.name == "v"
    assert rel.sensitivity == 2.0 and rel.count == 1 and rel.size == N
    assert rel.noise == {"sigma": 5.0, "noise_multiplier": 2.5}
    assert rel.event == dp_event.GaussianDpEvent(noise_multiplier=2.5)
    roundtrip(rel)


def test_gaussian_noise_multiplier_parameterisation_and_scalar():
    """Given z, σ = z·Δ; a scalar in gives a float scalar out; size 1."""
    out, rel = gaussian_mechanism(1.5, sensitivity=4.0, noise_multiplier=0.5, rng=rng(), name="s")
    assert np.ndim(out) == 0 and isinstance(out, float)
    assert rel.noise["sigma"] == 2.0 and rel.size == 1
    assert rel.event == dp_event.GaussianDpEvent(noise_multiplier=0.5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sensitivity": 1.0},  # neither sigma nor noise_multiplier
        {"sensitivity": 1.0, "sigma": 1.0, "noise_multiplier": 1.0},  # both
        {"sensitivity": 1.0, "sigma": 0.0},
        {"sensitivity": 1.0, "sigma": -1.0},
        {"sensitivity": 0.0, "sigma": 1.0},
        {"sensitivity": -2.0, "sigma": 1.0},
        {"sensitivity": float("nan"), "sigma": 1.0},
        {"sensitivity": 1.0, "noise_multiplier": float("inf")},
    ],
)
def test_gaussian_rejects_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        gaussian_mechanism(np.zeros(3), rng=rng(), name="x", **kwargs)


def test_mechanisms_reject_nan_input_and_bad_rng():
    with pytest.raises(ValueError, match="NaN"):
        gaussian_mechanism([1.0, np.nan], sensitivity=1, sigma=1, rng=rng(), name="x")
    with pytest.raises(ValueError, match="NaN"):
        laplace_mechanism([np.inf], sensitivity=1, scale=1, rng=rng(), name="x")
    with pytest.raises(TypeError, match="Generator"):
        gaussian_mechanism([1.0], sensitivity=1, sigma=1, rng=np.random.RandomState(0), name="x")
    with pytest.raises(TypeError, match="Generator"):
        gaussian_mechanism([1.0], sensitivity=1, sigma=1, rng=0, name="x")
    with pytest.raises(ValueError, match="name"):
        gaussian_mechanism([1.0], sensitivity=1, sigma=1, rng=rng(), name="")


def test_no_global_rng_state_is_used():
    """Structural rule: output depends on the passed generator only, not on numpy's or
    torch's global seeds."""
    np.random.seed(1)  # noqa: NPY002 - deliberately perturbing the global state
    torch.manual_seed(1)
    a, _ = gaussian_mechanism(np.zeros(5), sensitivity=1, sigma=1, rng=rng(7), name="x")
    b, _ = discrete_gaussian_mechanism(
        np.zeros(5, int), sensitivity=1, sigma=2, rng=rng(7), name="x"
    )
    t, _ = privatize_sum_torch(
        torch.zeros(5),
        clip_norm=1,
        noise_multiplier=1,
        generator=noise_rng(7),
        name="x",
    )
    np.random.seed(2)  # noqa: NPY002
    torch.manual_seed(2)
    a2, _ = gaussian_mechanism(np.zeros(5), sensitivity=1, sigma=1, rng=rng(7), name="x")
    b2, _ = discrete_gaussian_mechanism(
        np.zeros(5, int), sensitivity=1, sigma=2, rng=rng(7), name="x"
    )
    t2, _ = privatize_sum_torch(
        torch.zeros(5),
        clip_norm=1,
        noise_multiplier=1,
        generator=noise_rng(7),
        name="x",
    )
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)
    assert torch.equal(t, t2)


# --- symmetric matrix Gaussian -------------------------------------------------------------------


def test_symmetric_matrix_noise_structure():
    """Output exactly symmetric; Var = 2s² on the diagonal (20k draws, within 4%, SE 1%) and
    s² off it (90k upper-triangle draws, within 2.5%, SE 0.5%); off-diagonal entries of one
    draw uncorrelated."""
    d, reps, s = 10, 2000, 1.5
    g = rng(3)
    m = np.arange(d * d, dtype=float).reshape(d, d)
    m = m + m.T
    noise = np.empty((reps, d, d))
    for r in range(reps):
        out, _ = gaussian_symmetric_matrix(m, sensitivity=1.0, s=s, rng=g, name="gram")
        np.testing.assert_array_equal(out, out.T)
        noise[r] = out - m
    diag = noise[:, np.arange(d), np.arange(d)].ravel()
    iu = np.triu_indices(d, 1)
    off = noise[:, iu[0], iu[1]]
    assert abs(diag.var() / (2 * s**2) - 1) < 0.04
    assert abs(off.var() / s**2 - 1) < 0.025
    assert abs(np.corrcoef(off[:, 0], off[:, 1])[0, 1]) < 5 / math.sqrt(reps)


def test_symmetric_matrix_event_matches_privacy_loss():
    """The release's privacy loss ½ΔᵀΣ⁻¹Δ over the upper triangle (Σ = diag(2s² on the
    diagonal, s² off it)) equals ‖Δ‖_F²/(4s²) = ρ, and the event's z satisfies 1/(2z²) = ρ at
    the worst case ‖Δ‖_F = sensitivity."""
    d, s, sens = 6, 0.7, 1.3
    a = rng(4).normal(size=(d, d))
    delta = a + a.T
    delta *= sens / np.linalg.norm(delta)  # a worst-case change
    iu = np.triu_indices(d)
    var = np.where(iu[0] == iu[1], 2 * s**2, s**2)
    loss = 0.5 * np.sum(delta[iu] ** 2 / var)
    rho = sens**2 / (4 * s**2)
    assert loss == pytest.approx(rho, rel=1e-12)
    _, rel = gaussian_symmetric_matrix(np.eye(d), sensitivity=sens, s=s, rng=rng(), name="g")
    z = rel.event.noise_multiplier
    assert z == pytest.approx(math.sqrt(2) * s / sens)
    assert 1 / (2 * z**2) == pytest.approx(rho)
    assert rel.extra["rho"] == pytest.approx(rho)
    assert rel.norm == "frobenius" and rel.size == d * (d + 1) // 2
    assert rel.mechanism == "gaussian_symmetric_matrix"
    roundtrip(rel)
    # noise_multiplier parameterisation inverts s = z·Δ/√2
    _, rel2 = gaussian_symmetric_matrix(
        np.eye(d), sensitivity=sens, noise_multiplier=z, rng=rng(), name="g"
    )
    assert rel2.noise["s"] == pytest.approx(s)


def test_symmetric_matrix_validation():
    with pytest.raises(ValueError, match="square"):
        gaussian_symmetric_matrix(np.zeros((2, 3)), sensitivity=1, s=1, rng=rng(), name="g")
    with pytest.raises(ValueError, match="symmetric"):
        gaussian_symmetric_matrix(
            np.array([[0, 1], [0, 0.0]]), sensitivity=1, s=1, rng=rng(), name="g"
        )
    with pytest.raises(ValueError):
        gaussian_symmetric_matrix(np.eye(2), sensitivity=1, rng=rng(), name="g")
    with pytest.raises(ValueError):
        gaussian_symmetric_matrix(np.eye(2), sensitivity=1, s=-1, rng=rng(), name="g")


# --- Laplace -----------------------------------------------------------------------------------


def test_laplace_noise_scale_and_events():
    """E|noise| = b within 1% (SE 0.22%) and std = √2·b within 1.5% (SE 0.25%); b = Δ/ε;
    vector → PureDpEvent(Δ/b); scalar → LaplaceDpEvent(b/Δ)."""
    out, rel = laplace_mechanism(np.zeros(N), sensitivity=2.0, epsilon=0.5, rng=rng(5), name="v")
    b = 4.0
    assert abs(np.abs(out).mean() / b - 1) < 0.01
    assert abs(out.std() / (math.sqrt(2) * b) - 1) < 0.015
    assert rel.noise == {"scale": 4.0, "epsilon": 0.5}
    assert rel.norm == "l1" and rel.size == N
    assert rel.event == PureDpEvent(epsilon=0.5)
    roundtrip(rel)
    out1, rel1 = laplace_mechanism(7.0, sensitivity=2.0, scale=3.0, rng=rng(), name="s")
    assert np.ndim(out1) == 0
    assert rel1.event == dp_event.LaplaceDpEvent(noise_multiplier=1.5)
    with pytest.raises(ValueError):
        laplace_mechanism(1.0, sensitivity=1, scale=1, epsilon=1, rng=rng(), name="x")
    with pytest.raises(ValueError):
        laplace_mechanism(1.0, sensitivity=1, epsilon=0, rng=rng(), name="x")


def test_laplace_event_means_what_we_claim():
    """dp-accounting reads LaplaceDpEvent(b/Δ) as ε = Δ/b pure DP (PLD ε at δ=0)."""
    _, rel = laplace_mechanism(0.0, sensitivity=2.0, scale=3.0, rng=rng(), name="s")
    eps = pld.from_laplace_mechanism(rel.event.noise_multiplier).get_epsilon_for_delta(0.0)
    assert eps == pytest.approx(2.0 / 3.0, rel=1e-3)


# --- discrete mechanisms -----------------------------------------------------------------------


def test_discrete_gaussian_mechanism_noise_and_event():
    """Integer in, integer out; noise variance ≈ σ² (within 2%, SE 0.3%); event
    ZCDpEvent(Δ²/(2σ²)); sampler facts recorded."""
    counts = np.arange(N) % 17
    out, rel = discrete_gaussian_mechanism(
        counts, sensitivity=3, sigma=4.0, rng=rng(6), name="n_h(s,a)"
    )
    assert out.dtype == np.int64 and out.shape == counts.shape
    assert abs((out - counts).var() / 16.0 - 1) < 0.02
    assert rel.event == dp_event.ZCDpEvent(rho=9 / 32)
    assert rel.noise == {"sigma": 4.0, "sigma2": 16.0} and rel.norm == "l2"
    assert rel.extra["sampler"] == "fast" and rel.extra["randomness"] == "numpy"
    roundtrip(rel)


def test_discrete_gaussian_zcdp_bound_holds():
    """Property behind the event (CKS Thm 4): for the event's ρ, D_α(N_Z(0,σ²) ‖ N_Z(Δ,σ²))
    ≤ α·ρ for every α, with equality when (α-1)Δ is an integer — computed from the exact pmf
    (log domain), so a ρ that is too small or too large fails."""
    for sigma, delta in [(0.6, 1), (1.0, 1), (2.5, 3)]:
        _, rel = discrete_gaussian_mechanism(0, sensitivity=delta, sigma=sigma, rng=rng(), name="c")
        rho = rel.event.rho
        k = np.arange(-400, 401)
        log_p = -(k**2) / (2 * sigma**2)  # unnormalised; both laws share the normaliser
        log_q = -((k - delta) ** 2) / (2 * sigma**2)
        log_z = logsumexp(log_p)
        for alpha in [1.5, 2.0, 3.7, 8.0]:
            d_alpha = (logsumexp(alpha * log_p + (1 - alpha) * log_q) - log_z) / (alpha - 1)
            assert d_alpha <= alpha * rho * (1 + 1e-9)
            if float((alpha - 1) * delta).is_integer():
                assert d_alpha == pytest.approx(alpha * rho, rel=1e-9)


def test_discrete_gaussian_secure_and_exact_paths():
    """secure=True needs no rng and returns ints; exact=True is reproducible from the seed."""
    out, rel = discrete_gaussian_mechanism(
        [1, 2, 3], sensitivity=1, sigma=1.5, secure=True, name="c"
    )
    assert out.dtype == np.int64 and out.shape == (3,)
    assert rel.extra == {"rho": rel.event.rho, "sampler": "exact", "randomness": "os"}
    a, _ = discrete_gaussian_mechanism(
        np.zeros(50, int), sensitivity=1, sigma=2.0, rng=rng(8), exact=True, name="c"
    )
    b, _ = discrete_gaussian_mechanism(
        np.zeros(50, int), sensitivity=1, sigma=2.0, rng=rng(8), exact=True, name="c"
    )
    np.testing.assert_array_equal(a, b)
    s, _ = discrete_gaussian_mechanism(5, sensitivity=1, sigma=1.0, secure=True, name="c")
    assert np.ndim(s) == 0 and isinstance(s, np.integer)


@pytest.mark.parametrize("bad", [[1.5, 2.0], ["a"], [np.nan], [2.0**60]])
def test_discrete_mechanisms_reject_non_integer_counts(bad):
    with pytest.raises(ValueError, match="counts"):
        discrete_gaussian_mechanism(bad, sensitivity=1, sigma=1, rng=rng(), name="c")
    with pytest.raises(ValueError, match="counts"):
        discrete_laplace_mechanism(bad, sensitivity=1, scale=1, rng=rng(), name="c")
    with pytest.raises(ValueError, match="counts"):
        binomial_mechanism(bad, trials=10, p=0.5, rng=rng(), name="c")


def test_discrete_mechanisms_accept_integral_floats():
    out, _ = discrete_gaussian_mechanism([1.0, 2.0], sensitivity=1, sigma=1, rng=rng(), name="c")
    assert out.dtype == np.int64


def test_discrete_mechanisms_validate_parameters():
    with pytest.raises(ValueError):
        discrete_gaussian_mechanism([1], sensitivity=1, sigma=0, rng=rng(), name="c")
    with pytest.raises(ValueError):
        discrete_gaussian_mechanism([1], sensitivity=0, sigma=1, rng=rng(), name="c")
    with pytest.raises(TypeError):
        discrete_gaussian_mechanism([1], sensitivity=1, sigma=1, name="c")  # no rng, not secure
    with pytest.raises(TypeError):
        discrete_laplace_mechanism([1], sensitivity=1.5, scale=1, rng=rng(), name="c")
    with pytest.raises(ValueError):
        discrete_laplace_mechanism([1], sensitivity=0, scale=1, rng=rng(), name="c")


def test_discrete_laplace_mechanism_noise_and_events():
    """Noise variance 2q/(1-q)², q = e^{-1/b}, within 2% (SE ~0.5%); scalar event
    DiscreteLaplaceDpEvent(1/b, Δ); vector event PureDpEvent(Δ/b)."""
    b = 2.5
    counts = np.zeros(N, dtype=np.int64)
    out, rel = discrete_laplace_mechanism(counts, sensitivity=2, scale=b, rng=rng(9), name="v")
    q = math.exp(-1 / b)
    assert abs(out.var() / (2 * q / (1 - q) ** 2) - 1) < 0.02
    assert rel.event == PureDpEvent(epsilon=2 / b)
    roundtrip(rel)
    _, rel1 = discrete_laplace_mechanism(4, sensitivity=2, scale=b, rng=rng(), name="s")
    assert rel1.event == dp_event.DiscreteLaplaceDpEvent(noise_parameter=1 / b, sensitivity=2)
    roundtrip(rel1)


def test_discrete_laplace_event_parameterisation_matches_dp_accounting():
    """dp-accounting's DLap(a) has pmf ∝ e^{-a|x|}: with a = 1/scale the PLD's ε at δ = 0 is
    the pure-DP ε = Δ/scale of our noise."""
    _, rel = discrete_laplace_mechanism(0, sensitivity=2, scale=4.0, rng=rng(), name="s")
    ev = rel.event
    eps = pld.from_discrete_laplace_mechanism(
        ev.noise_parameter, sensitivity=ev.sensitivity
    ).get_epsilon_for_delta(0.0)
    assert eps == pytest.approx(0.5, rel=1e-3)


def test_discrete_laplace_secure():
    out, rel = discrete_laplace_mechanism(
        np.array([[1, 2], [3, 4]]), sensitivity=1, scale=1.5, secure=True, name="c"
    )
    assert out.dtype == np.int64 and out.shape == (2, 2)
    assert rel.extra["randomness"] == "os"


# --- binomial ----------------------------------------------------------------------------------


def test_binomial_mechanism_centering_and_variance():
    """Mean of output - counts within 5 SE of 0 (centred); variance n·p·(1-p) within 2%
    (SE 0.3%); float output; no epsilon → event None with a note."""
    trials, p = 1000, 0.3
    counts = np.full(N, 5)
    out, rel = binomial_mechanism(counts, trials=trials, p=p, rng=rng(10), name="c")
    noise = out - counts
    var = trials * p * (1 - p)
    assert out.dtype == np.float64
    assert abs(noise.mean()) < 5 * math.sqrt(var / N)
    assert abs(noise.var() / var - 1) < 0.02
    assert rel.event is None and "caller" in rel.extra["accounting"]
    assert rel.noise["std"] == pytest.approx(math.sqrt(var))
    roundtrip(rel)


def test_binomial_mechanism_events():
    """With ε: ApproxDpEvent(ε, exact δ); a vector needs coordinates_changed, and k changed
    coordinates compose to SelfComposedDpEvent(·, k)."""
    _, rel = binomial_mechanism(3, trials=500, p=0.5, epsilon=0.5, rng=rng(), name="c")
    assert rel.event == ApproxDpEvent(epsilon=0.5, delta=binomial_delta(500, 0.5, 0.5))
    roundtrip(rel)
    with pytest.raises(ValueError, match="coordinates_changed"):
        binomial_mechanism([1, 2], trials=500, p=0.5, epsilon=0.5, rng=rng(), name="c")
    _, rel3 = binomial_mechanism(
        [1, 2, 3, 4],
        trials=500,
        p=0.5,
        epsilon=0.5,
        coordinates_changed=3,
        sensitivity=2,
        rng=rng(),
        name="c",
    )
    base = ApproxDpEvent(epsilon=0.5, delta=binomial_delta(500, 0.5, 0.5, 2))
    assert rel3.event == dp_event.SelfComposedDpEvent(base, 3)
    roundtrip(rel3)


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_binomial_rejects_bad_p(p):
    with pytest.raises(ValueError, match="p must"):
        binomial_mechanism([1], trials=10, p=p, rng=rng(), name="c")
    with pytest.raises(ValueError, match="p must"):
        binomial_delta(10, p, 1.0)


def brute_force_delta(n: int, p: float, eps: float, d: int) -> float:
    pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]

    def f(k: int) -> float:  # P(X = k)
        return pmf[k] if 0 <= k <= n else 0.0

    up = sum(max(0.0, f(k - d) - math.exp(eps) * f(k)) for k in range(-1, n + d + 2))
    down = sum(max(0.0, f(k) - math.exp(eps) * f(k - d)) for k in range(-1, n + d + 2))
    return max(up, down)


@pytest.mark.parametrize("n", [1, 2, 5, 20, 60])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
@pytest.mark.parametrize("d", [1, 2])
def test_binomial_delta_matches_brute_force(n, p, d):
    """Property: the windowed, vectorised δ equals the plain definition (to 1e-12)."""
    for eps in [0.0, 0.1, 1.0, 3.0]:
        assert binomial_delta(n, p, eps, d) == pytest.approx(
            brute_force_delta(n, p, eps, d), abs=1e-12
        )


def test_binomial_delta_special_values():
    """At ε = 0, δ is the total variation distance (max pmf for Δ = 1 and p = ½); disjoint
    supports (Δ > trials) give δ = 1."""
    assert binomial_delta(10, 0.5, 0.0) == pytest.approx(math.comb(10, 5) / 2**10)
    assert binomial_delta(1, 0.5, 2.0, sensitivity=2) == 1.0


def test_binomial_delta_monotone():
    """δ decreases in ε (fixed trials) and in trials (fixed ε, p = ½)."""
    eps_grid = np.linspace(0, 2, 21)
    d_eps = [binomial_delta(2000, 0.5, e) for e in eps_grid]
    assert all(a >= b for a, b in itertools.pairwise(d_eps))
    assert d_eps[0] > d_eps[-1]
    n_grid = [100, 200, 500, 1000, 2000, 5000, 10_000]
    d_n = [binomial_delta(n, 0.5, 0.1) for n in n_grid]
    assert all(a > b for a, b in itertools.pairwise(d_n))


def test_binomial_delta_reproduces_spec_calibration():
    """specs/sdp_pe.md: (ε', δ') = (1/30, 3.3e-7) needs N ≈ 47,300 trials at p = ½."""
    assert binomial_delta(47_000, 0.5, 1 / 30) > 3.3e-7 > binomial_delta(47_600, 0.5, 1 / 30)


def test_binomial_delta_large_trials_is_fast_and_sane():
    """trials ~ 1e6-1e9 use only the non-negligible window (no full-support arrays)."""
    d6 = binomial_delta(10**6, 0.5, 0.01)
    d9 = binomial_delta(10**9, 0.001, 0.01)
    assert 0 < d6 < 1e-6 and 0 < d9 < d6
    # normal approximation: Bin ≈ N(μ, σ²) so δ ≈ Gaussian-mechanism δ with z = σ
    sigma = math.sqrt(10**6 * 0.25)
    gauss = stats.norm.cdf(1 / (2 * sigma) - 0.01 * sigma) - math.exp(0.01) * stats.norm.cdf(
        -1 / (2 * sigma) - 0.01 * sigma
    )
    assert d6 == pytest.approx(gauss, rel=0.1)


# --- torch --------------------------------------------------------------------------------------


def test_gaussian_noise_like_scale_dtype_and_generator():
    """Noise std = σ within 1% (200k float32 draws), dtype/shape preserved; same generator
    seed → same noise, different seed → different noise."""
    t = torch.zeros(400, 500, dtype=torch.float32)
    a = gaussian_noise_like(t, sigma=0.7, generator=noise_rng(0))
    b = gaussian_noise_like(t, sigma=0.7, generator=noise_rng(0))
    c = gaussian_noise_like(t, sigma=0.7, generator=noise_rng(1))
    assert a.dtype == torch.float32 and a.shape == t.shape and a.device == t.device
    assert abs(a.double().std().item() / 0.7 - 1) < 0.01
    assert torch.equal(a, b) and not torch.equal(a, c)
    with pytest.raises(ValueError):
        gaussian_noise_like(t, sigma=0.0, generator=torch.Generator())
    for plain in (np.random.default_rng(0), torch.Generator().manual_seed(0)):
        with pytest.raises(TypeError, match="NoiseGenerator"):  # never a caller's generator
            gaussian_noise_like(t, sigma=1.0, generator=plain)


def test_privatize_sum_torch_single_and_list():
    """Noise std = z·C within 1.5% over 200k coordinates split across tensors; Release size
    = total numel, GaussianDpEvent(z); count > 1 self-composes; outputs detached, same dtype."""
    g = noise_rng(3)
    parts = [
        torch.zeros(100_000, dtype=torch.float64, requires_grad=True),
        torch.zeros(1000, 100, dtype=torch.float64),
    ]
    noisy, rel = privatize_sum_torch(
        parts, clip_norm=2.0, noise_multiplier=1.5, generator=g, name="Σ clipped Δ_k", count=4
    )
    flat = torch.cat([n.reshape(-1) for n in noisy])
    assert abs(flat.std().item() / 3.0 - 1) < 0.015
    assert all(not n.requires_grad for n in noisy)
    assert [n.shape for n in noisy] == [p.shape for p in parts]
    assert rel.size == 200_000 and rel.count == 4 and rel.sensitivity == 2.0
    assert rel.noise == {"sigma": 3.0, "noise_multiplier": 1.5}
    assert rel.event == dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(1.5), 4)
    roundtrip(rel)
    one, rel1 = privatize_sum_torch(
        torch.ones(3, dtype=torch.float32),
        clip_norm=1.0,
        noise_multiplier=0.5,
        generator=g,
        name="s",
    )
    assert isinstance(one, torch.Tensor) and one.dtype == torch.float32
    assert rel1.event == dp_event.GaussianDpEvent(noise_multiplier=0.5)


def test_privatize_sum_torch_validation():
    g = torch.Generator()
    with pytest.raises(ValueError, match="NaN"):
        privatize_sum_torch(
            torch.tensor([float("nan")]), clip_norm=1, noise_multiplier=1, generator=g, name="x"
        )
    with pytest.raises(ValueError):
        privatize_sum_torch(torch.zeros(2), clip_norm=0, noise_multiplier=1, generator=g, name="x")
    with pytest.raises(ValueError):
        privatize_sum_torch(torch.zeros(2), clip_norm=1, noise_multiplier=0, generator=g, name="x")
    with pytest.raises(ValueError):
        privatize_sum_torch([], clip_norm=1, noise_multiplier=1, generator=g, name="x")
    with pytest.raises(ValueError):
        privatize_sum_torch(
            torch.zeros(2, dtype=torch.int64),
            clip_norm=1,
            noise_multiplier=1,
            generator=g,
            name="x",
        )
