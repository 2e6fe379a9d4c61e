"""Additive-noise mechanisms. Each returns `(noisy_output, Release)`.

Every mechanism takes its randomness explicitly — a `NoiseGenerator` issued by
`privrl.privacy.noise.NoiseSource` (secure ChaCha20 keyed by OS entropy unless a caller opted
in to insecure reproducible noise), or OS entropy for the secure discrete samplers; any other
generator is refused — and describes itself with
a dp-accounting `DpEvent` that states the mathematics of the release exactly, so that the
accountant consumes what the mechanism did and nothing else.

Conventions: `sensitivity` is the sensitivity of the released statistic under the neighbouring
relation the caller reports (the caller derives it; the mechanism only records it), in the
norm named by `Release.norm`. The continuous mechanisms sample floating-point noise with numpy
(torch noise is drawn in float64 by numpy and cast): like every textbook implementation they
are exposed to floating-point side channels
(Mironov, CCS 2012); where that matters, release integers with the discrete mechanisms and
`secure=True`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
from dp_accounting import dp_event
from scipy import stats

from privrl.privacy import discrete
from privrl.privacy.events import ApproxDpEvent, PureDpEvent
from privrl.privacy.noise import NoiseGenerator, require_noise_generator, torch_normal
from privrl.privacy.release import Release

if TYPE_CHECKING:
    import torch

__all__ = [
    "binomial_delta",
    "binomial_mechanism",
    "discrete_gaussian_mechanism",
    "discrete_laplace_mechanism",
    "gaussian_mechanism",
    "gaussian_noise_like",
    "gaussian_symmetric_matrix",
    "laplace_mechanism",
    "privatize_sum_torch",
]

ArrayLike = Any  # numbers, nested sequences or numpy arrays

# ---------------------------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------------------------


def _positive(x: Any, what: str) -> float:
    """A finite, strictly positive real parameter."""
    if isinstance(x, bool) or not isinstance(x, int | float | np.integer | np.floating):
        raise TypeError(f"{what} must be a real number, got {type(x).__name__}")
    v = float(x)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{what} must be finite and > 0, got {x}")
    return v


def _positive_int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int | np.integer):
        raise TypeError(f"{what} must be an integer, got {type(x).__name__}")
    if x < 1:
        raise ValueError(f"{what} must be >= 1, got {x}")
    return int(x)


def _name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError("name must be a non-empty string saying what is released")
    return name


def _check_rng(rng: Any) -> np.random.Generator:
    return require_noise_generator(rng)


def _noise_facts(rng: Any) -> dict[str, Any]:
    """What a release records of its noise source: an insecure one is marked, and a report
    built from the release is then uncertified (`PrivacyReport.build`)."""
    return {} if getattr(rng, "secure", True) else {"insecure_noise": True}


def _one_of(a: float | None, b: float | None, names: tuple[str, str]) -> None:
    if (a is None) == (b is None):
        raise ValueError(f"give exactly one of {names[0]} / {names[1]}")


def _float_array(value: ArrayLike, what: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{what} must be real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} contains NaN or infinite entries")
    return arr


_INT_LIMIT = 2**53  # float64 holds every integer up to here exactly


def _int_array(counts: ArrayLike, what: str) -> np.ndarray:
    """Integer-valued input as int64; floats must be integral (1.0 is fine, 1.5 is not)."""
    arr = np.asarray(counts)
    if arr.dtype.kind in "biu":
        if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{what} has entries beyond the int64 range")
        return arr.astype(np.int64)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{what} contains NaN or infinite entries")
        if np.any(arr != np.round(arr)) or np.any(np.abs(arr) > _INT_LIMIT):
            raise ValueError(
                f"{what} must be integers for a discrete mechanism (got non-integral values)"
            )
        return arr.astype(np.int64)
    raise ValueError(f"{what} must be integers for a discrete mechanism, got dtype {arr.dtype}")


def _out(arr: np.ndarray) -> Any:
    """0-d results come back as numpy scalars, others as arrays."""
    return arr[()] if arr.ndim == 0 else arr


# ---------------------------------------------------------------------------------------------
# Continuous mechanisms (numpy)
# ---------------------------------------------------------------------------------------------


def gaussian_mechanism(
    value: ArrayLike,
    *,
    sensitivity: float,
    sigma: float | None = None,
    noise_multiplier: float | None = None,
    rng: np.random.Generator,
    name: str,
) -> tuple[Any, Release]:
    """value + N(0, σ² I), σ = noise_multiplier · sensitivity (L2 sensitivity).

    Event: GaussianDpEvent(noise_multiplier = σ / Δ₂), dp-accounting's definition.
    """
    delta2 = _positive(sensitivity, "sensitivity")
    _one_of(sigma, noise_multiplier, ("sigma", "noise_multiplier"))
    if sigma is not None:
        s = _positive(sigma, "sigma")
        z = s / delta2
    else:
        z = _positive(noise_multiplier, "noise_multiplier")
        s = z * delta2
    x = _float_array(value, "value")
    rng = _check_rng(rng)
    noisy = x + rng.normal(0.0, s, size=x.shape)
    release = Release(
        name=_name(name),
        mechanism="gaussian",
        sensitivity=delta2,
        norm="l2",
        noise={"sigma": s, "noise_multiplier": z},
        count=1,
        size=int(x.size),
        event=dp_event.GaussianDpEvent(noise_multiplier=z),
        extra=_noise_facts(rng),
    )
    return _out(noisy), release


_SYMMETRY_RTOL = 1e-9


def gaussian_symmetric_matrix(
    matrix: ArrayLike,
    *,
    sensitivity: float,
    s: float | None = None,
    noise_multiplier: float | None = None,
    rng: np.random.Generator,
    name: str,
) -> tuple[np.ndarray, Release]:
    """Symmetric matrix + (Z + Zᵀ)/√2, Z_ij ~ N(0, s²) i.i.d. (Qiao & Wang's Gram-matrix noise).

    The noise is symmetric with Var = s² off the diagonal and 2s² on it. `sensitivity` bounds
    the Frobenius norm of the change of the (symmetric) matrix. The input is symmetrised as
    (M + Mᵀ)/2 — a contraction in Frobenius norm, so the sensitivity bound still holds — to
    make the output exactly symmetric.

    Privacy: the release is the d(d+1)/2 upper-triangle entries with independent Gaussian
    noise, variance s² off the diagonal and 2s² on it. For a change Δ (symmetric) the privacy
    loss is ½ΔᵀΣ⁻¹Δ = Σ_{i<j} Δ_ij²/(2s²) + Σ_i Δ_ii²/(4s²) = ‖Δ‖_F²/(4s²), since
    ‖Δ‖_F² = 2Σ_{i<j}Δ_ij² + Σ_iΔ_ii². So the release is ρ = Δ_F²/(4s²)-zCDP, and is exactly a
    Gaussian mechanism (whitened) with ‖shift‖ = Δ_F/(√2 s), i.e. noise multiplier
    z = √2·s/Δ_F (ρ = 1/(2z²)).
    """
    delta_f = _positive(sensitivity, "sensitivity")
    _one_of(s, noise_multiplier, ("s", "noise_multiplier"))
    if s is not None:
        s_ = _positive(s, "s")
        z = math.sqrt(2.0) * s_ / delta_f
    else:
        z = _positive(noise_multiplier, "noise_multiplier")
        s_ = z * delta_f / math.sqrt(2.0)
    m = _float_array(matrix, "matrix")
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"matrix must be square (d, d), got shape {m.shape}")
    asym = float(np.max(np.abs(m - m.T))) if m.size else 0.0
    if asym > _SYMMETRY_RTOL * max(1.0, float(np.max(np.abs(m))) if m.size else 1.0):
        raise ValueError(f"matrix must be symmetric (max |M - Mᵀ| = {asym:.3g})")
    rng = _check_rng(rng)
    d = m.shape[0]
    z_noise = rng.normal(0.0, s_, size=(d, d))
    # Z + Zᵀ is exactly symmetric in floating point (addition commutes), as is (M + Mᵀ)/2.
    noisy = 0.5 * (m + m.T) + (z_noise + z_noise.T) / math.sqrt(2.0)
    release = Release(
        name=_name(name),
        mechanism="gaussian_symmetric_matrix",
        sensitivity=delta_f,
        norm="frobenius",
        noise={"s": s_, "noise_multiplier": z},
        count=1,
        size=d * (d + 1) // 2,  # distinct released scalars (upper triangle)
        event=dp_event.GaussianDpEvent(noise_multiplier=z),
        extra={"dim": d, "rho": delta_f**2 / (4.0 * s_**2), **_noise_facts(rng)},
    )
    return noisy, release


def laplace_mechanism(
    value: ArrayLike,
    *,
    sensitivity: float,
    scale: float | None = None,
    epsilon: float | None = None,
    rng: np.random.Generator,
    name: str,
) -> tuple[Any, Release]:
    """value + Laplace(b) per coordinate, b = sensitivity/epsilon (L1 sensitivity).

    Event: a scalar release is LaplaceDpEvent(noise_multiplier = b/Δ₁), which the accountants
    treat with the exact 1-D Laplace privacy loss. A vector release is PureDpEvent(Δ₁/b): for
    d > 1 coordinates only ‖shift‖₁ ≤ Δ₁ is known, the shift may be split across coordinates
    (a composition of smaller Laplace losses), and the accountants' 1-D privacy-loss curve is
    not documented or proven here to dominate every split at every (ε, δ). We therefore claim
    only the guarantee that holds for every split: ε = Δ₁/b pure DP (Dwork et al. 2006).
    (It is conservative; a per-coordinate budget should call this once per coordinate.)
    """
    delta1 = _positive(sensitivity, "sensitivity")
    _one_of(scale, epsilon, ("scale", "epsilon"))
    b = _positive(scale, "scale") if scale is not None else delta1 / _positive(epsilon, "epsilon")
    x = _float_array(value, "value")
    rng = _check_rng(rng)
    noisy = x + rng.laplace(0.0, b, size=x.shape)
    eps = delta1 / b
    event: dp_event.DpEvent
    if x.size == 1:
        event = dp_event.LaplaceDpEvent(noise_multiplier=b / delta1)
    else:
        event = PureDpEvent(epsilon=eps)
    release = Release(
        name=_name(name),
        mechanism="laplace",
        sensitivity=delta1,
        norm="l1",
        noise={"scale": b, "epsilon": eps},
        count=1,
        size=int(x.size),
        event=event,
        extra=_noise_facts(rng),
    )
    return _out(noisy), release


# ---------------------------------------------------------------------------------------------
# Discrete mechanisms
# ---------------------------------------------------------------------------------------------


def _sampler_facts(secure: bool, exact: bool) -> dict[str, str]:
    if secure:
        return {"sampler": "exact", "randomness": "os"}
    return {"sampler": "exact" if exact else "fast", "randomness": "numpy"}


def discrete_gaussian_mechanism(
    counts: ArrayLike,
    *,
    sensitivity: float,
    sigma: float,
    rng: np.random.Generator | None = None,
    secure: bool = False,
    exact: bool = False,
    name: str,
) -> tuple[Any, Release]:
    """Integer counts + N_Z(0, σ²) per coordinate (integer output). L2 sensitivity.

    Event: ZCDpEvent(ρ = Δ₂²/(2σ²)) — Canonne, Kamath & Steinke 2020, Thm 4 (1-D) and its
    multivariate form (independent coordinates, integer-valued shift of L2 norm ≤ Δ₂). The
    counts are integers, so any real Δ₂ ≥ ‖shift‖₂ is valid (e.g. √2 for two ±1 changes).
    Sampling: `secure=True` uses the exact sampler on OS entropy (rng is ignored),
    `exact=True` the exact sampler on `rng`, otherwise the vectorised sampler on `rng`.
    """
    delta2 = _positive(sensitivity, "sensitivity")
    sig = _positive(sigma, "sigma")
    x = _int_array(counts, "counts")
    if not secure:
        _check_rng(rng)
    sigma2: Fraction | float = Fraction(sig) ** 2 if (secure or exact) else sig * sig
    noise = discrete.sample_discrete_gaussian(sigma2, x.shape, rng=rng, secure=secure, exact=exact)
    rho = delta2**2 / (2.0 * sig**2)
    release = Release(
        name=_name(name),
        mechanism="discrete_gaussian",
        sensitivity=delta2,
        norm="l2",
        noise={"sigma": sig, "sigma2": sig * sig},
        count=1,
        size=int(x.size),
        event=dp_event.ZCDpEvent(rho=rho),
        extra={"rho": rho, **_sampler_facts(secure, exact), **_noise_facts(rng)},
    )
    return _out(x + noise), release


def discrete_laplace_mechanism(
    counts: ArrayLike,
    *,
    sensitivity: int,
    scale: float,
    rng: np.random.Generator | None = None,
    secure: bool = False,
    exact: bool = False,
    name: str,
) -> tuple[Any, Release]:
    """Integer counts + DLap(scale) per coordinate, P(x) ∝ exp(-|x|/scale). L1 sensitivity
    (an integer: the counts are integers).

    Event: a scalar release is DiscreteLaplaceDpEvent(noise_parameter = 1/scale, sensitivity =
    Δ₁) — dp-accounting's DLap(a) has pmf ∝ exp(-a|x|), so a = 1/scale. A vector release is
    PureDpEvent(Δ₁/scale), for the same reason as `laplace_mechanism`.
    """
    delta1 = _positive_int(sensitivity, "sensitivity")
    b = _positive(scale, "scale")
    x = _int_array(counts, "counts")
    if not secure:
        _check_rng(rng)
    sc: Fraction | float = Fraction(b) if (secure or exact) else b
    noise = discrete.sample_discrete_laplace(sc, x.shape, rng=rng, secure=secure, exact=exact)
    event: dp_event.DpEvent
    if x.size == 1:
        event = dp_event.DiscreteLaplaceDpEvent(noise_parameter=1.0 / b, sensitivity=delta1)
    else:
        event = PureDpEvent(epsilon=delta1 / b)
    release = Release(
        name=_name(name),
        mechanism="discrete_laplace",
        sensitivity=float(delta1),
        norm="l1",
        noise={"scale": b, "noise_parameter": 1.0 / b, "epsilon": delta1 / b},
        count=1,
        size=int(x.size),
        event=event,
        extra={**_sampler_facts(secure, exact), **_noise_facts(rng)},
    )
    return _out(x + noise), release


def _hinge_mass(log_p: np.ndarray, log_q_shifted: np.ndarray) -> float:
    """Σ_k max(0, e^{log_p} - e^{log_q_shifted}), computed as p·(1 - q/p) with expm1."""
    with np.errstate(invalid="ignore", over="ignore"):
        pos = log_p > log_q_shifted
        terms = np.where(pos, -np.exp(log_p) * np.expm1(log_q_shifted - log_p), 0.0)
    return float(np.sum(terms))


_LOG_TAIL = 700.0  # each tail of Bin(n, p) left outside the summation window has mass < e^-700


def binomial_delta(trials: int, p: float, epsilon: float, sensitivity: int = 1) -> float:
    """Exact δ(ε) of the binomial mechanism: the hockey-stick divergence
    max over both directions of Σ_k max(0, P(X + Δ = k) - e^ε P(X = k)), X ~ Bin(trials, p).

    Only a window μ ± t of X is summed (vectorised logpmf; ~75 standard deviations wide, so
    trials ~ 1e9 are cheap), with t from Bernstein's inequality P(|X - μ| ≥ t) ≤
    2·exp(-t²/(2(σ² + t/3))) = 2e^-700. The omitted part of each sum is at most the mass of X
    outside the window; that bound is added back, so the value returned is never below the
    true δ and exceeds it by < 2e-304.
    """
    n = _positive_int(trials, "trials")
    if not (isinstance(p, int | float | np.floating) and 0.0 < float(p) < 1.0):
        raise ValueError(f"p must be in (0, 1), got {p}")
    p = float(p)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.integer | np.floating):
        raise TypeError(f"epsilon must be a real number, got {type(epsilon).__name__}")
    eps = float(epsilon)
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon}")
    d = _positive_int(sensitivity, "sensitivity")
    mu, var = n * p, n * p * (1.0 - p)
    # t solves t² = 2L(σ² + t/3): t = L/3 + sqrt(L²/9 + 2Lσ²)
    t = _LOG_TAIL / 3.0 + math.sqrt(_LOG_TAIL**2 / 9.0 + 2.0 * _LOG_TAIL * var)
    lo = max(0, math.floor(mu - t))
    hi = min(n, math.ceil(mu + t))
    omitted = 2.0 * math.exp(-_LOG_TAIL)
    k = np.arange(lo, hi + d + 1)  # every output value with X or X + Δ in the window
    log_x = stats.binom.logpmf(k, n, p)  # law of X
    log_xd = stats.binom.logpmf(k - d, n, p)  # law of X + Δ
    up = _hinge_mass(log_xd, log_x + eps)  # P = X + Δ, Q = X
    down = _hinge_mass(log_x, log_xd + eps)  # P = X, Q = X + Δ
    return min(1.0, max(up, down) + omitted)


def binomial_mechanism(
    counts: ArrayLike,
    *,
    trials: int,
    p: float,
    rng: np.random.Generator,
    name: str,
    epsilon: float | None = None,
    sensitivity: int = 1,
    coordinates_changed: int | None = None,
) -> tuple[Any, Release]:
    """Integer counts + (Bin(trials, p) - trials·p) per coordinate (float output, centred;
    the centring is post-processing by a public constant).

    `sensitivity` is the largest change of one coordinate (|shift| ≤ Δ, norm "linf"), and
    `coordinates_changed` how many coordinates one unit can change (required for a vector
    release when `epsilon` is given). With `epsilon`, δ = `binomial_delta(trials, p, ε, Δ)`
    is exact for one coordinate and the event is ApproxDpEvent(ε, δ), self-composed over the
    changed coordinates (independent noise per coordinate). Without `epsilon` the event is
    None: the caller must supply the accounting (e.g. a shuffle-model bound).
    """
    n = _positive_int(trials, "trials")
    if not (isinstance(p, int | float | np.floating) and 0.0 < float(p) < 1.0):
        raise ValueError(f"p must be in (0, 1), got {p}")
    p = float(p)
    delta = _positive_int(sensitivity, "sensitivity")
    x = _int_array(counts, "counts")
    rng = _check_rng(rng)
    if coordinates_changed is None:
        if epsilon is not None and x.size > 1:
            raise ValueError(
                "coordinates_changed is required for a vector binomial release with epsilon: "
                "say how many coordinates one unit can change"
            )
        k_changed = 1
    else:
        k_changed = _positive_int(coordinates_changed, "coordinates_changed")
    extra: dict[str, Any] = {"coordinates_changed": k_changed}
    event: dp_event.DpEvent | None
    if epsilon is None:
        event = None
        extra["accounting"] = "none attached: the caller must supply the privacy event"
    else:
        dlt = binomial_delta(n, p, epsilon, delta)
        eps = float(epsilon)
        base = ApproxDpEvent(epsilon=eps, delta=dlt)
        event = base if k_changed == 1 else dp_event.SelfComposedDpEvent(base, k_changed)
        extra.update({"epsilon": eps, "delta": dlt})
    noisy = x + (rng.binomial(n, p, size=x.shape) - n * p)
    extra.update(_noise_facts(rng))
    release = Release(
        name=_name(name),
        mechanism="binomial",
        sensitivity=float(delta),
        norm="linf",
        noise={"trials": float(n), "p": p, "std": math.sqrt(n * p * (1.0 - p))},
        count=1,
        size=int(x.size),
        event=event,
        extra=extra,
    )
    return _out(noisy.astype(np.float64)), release


# ---------------------------------------------------------------------------------------------
# Torch (DP-SGD-style sums)
# ---------------------------------------------------------------------------------------------


def gaussian_noise_like(
    tensor: torch.Tensor, *, sigma: float, generator: NoiseGenerator
) -> torch.Tensor:
    """N(0, σ²) noise with the shape, dtype and device of `tensor`, drawn in float64 from the
    `NoiseGenerator` (never a torch generator: see `privrl.privacy.noise`) and cast."""
    import torch

    s = _positive(sigma, "sigma")
    gen = require_noise_generator(generator, "generator")
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        raise ValueError("tensor must be a floating-point torch.Tensor")
    return torch_normal(tuple(tensor.shape), std=s, like=tensor, rng=gen)


def privatize_sum_torch(
    summed_clipped: torch.Tensor | Sequence[torch.Tensor],
    *,
    clip_norm: float,
    noise_multiplier: float,
    generator: NoiseGenerator,
    name: str,
    count: int = 1,
) -> tuple[torch.Tensor | list[torch.Tensor], Release]:
    """Sum of clipped contributions + N(0, (z·C)² I) (DP-SGD / DP-FedAvg aggregation).

    `summed_clipped` is one tensor or a list of tensors (e.g. one per parameter) whose *joint*
    L2 sensitivity is `clip_norm` — the caller clipped each unit's whole contribution to C.
    Returns detached noisy tensors in the same structure. Event: GaussianDpEvent(z), wrapped
    in SelfComposedDpEvent when this record stands for `count` identical invocations.
    Subsampling is not part of this event; the accountant adds it (e.g. PoissonSampledDpEvent).
    """
    import torch

    c = _positive(clip_norm, "clip_norm")
    z = _positive(noise_multiplier, "noise_multiplier")
    k = _positive_int(count, "count")
    single = isinstance(summed_clipped, torch.Tensor)
    tensors = [summed_clipped] if single else list(summed_clipped)
    if not tensors:
        raise ValueError("summed_clipped is empty")
    sigma = z * c
    with torch.no_grad():
        for t in tensors:
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                raise ValueError("summed_clipped must hold floating-point torch tensors")
            if not bool(torch.isfinite(t).all()):
                raise ValueError("summed_clipped contains NaN or infinite entries")
        noisy = [
            t.detach() + gaussian_noise_like(t, sigma=sigma, generator=generator) for t in tensors
        ]
    base = dp_event.GaussianDpEvent(noise_multiplier=z)
    release = Release(
        name=_name(name),
        mechanism="gaussian",
        sensitivity=c,
        norm="l2",
        noise={"sigma": sigma, "noise_multiplier": z},
        count=k,
        size=int(sum(t.numel() for t in tensors)),
        event=base if k == 1 else dp_event.SelfComposedDpEvent(base, k),
        extra={"dtype": str(tensors[0].dtype).removeprefix("torch."), **_noise_facts(generator)},
    )
    return (noisy[0] if single else noisy), release
