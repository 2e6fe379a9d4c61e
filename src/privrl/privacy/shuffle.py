"""Shuffle-model binary summation, and the Laplace local randomizer of the local model.

Shuffle model (Cheu, Smith, Ullman, Zeber & Zhilyaev 2019; Balcer & Cheu 2020). Each of the
``n`` users of a batch holds a bit ``x_i`` per counter. Its local randomizer R sends the bit
plus ``m`` random bits ``Ber(p)`` as separate messages (counter id, bit); a trusted shuffler
permutes all messages of the batch; the analyzer A (the learning agent) sums the bits of each
counter and subtracts the public mean ``N·p`` of the noise, N = n·m:

    A(S(R(x_1), ..., R(x_n))) = Σ_i x_i + η − N·p,      η ~ Bin(N, p).

The analyzer's view is the shuffled multiset; per counter it is determined by the number of
1-messages (every user sends the same, data-independent number of messages), i.e. by
``Σ x_i + η``. Replacing one user moves ``Σ x_i`` by at most 1, so the protocol is (ε', δ')-DP
per counter iff the hockey-stick divergence of ``Bin(N, p)`` against its shift by one is ≤ δ'
at e^{ε'} — computed exactly by `privrl.privacy.mechanisms.binomial_delta`.

Calibration (two choices of the binomial noise):

* ``"theory"`` — Balcer & Cheu's binomial smoothness: λ = 50·ln(2/δ')/ε'². If n ≥ 2λ every
  user adds one bit Ber(λ/n) (η ~ Bin(n, λ/n)); otherwise m = ⌈2λ/n⌉ bits Ber(½).
* ``"tight"`` (default) — the smallest binomial the users can realise: N* = the smallest
  number of fair coins with exact δ(N*, ½) < δ' (δ is non-increasing in N: adding an
  independent coin is post-processing); m = ⌈N*/n⌉ bits per user; then the smallest
  p ≤ ½ (bisection, every candidate verified exactly) with δ(n·m, p) < δ'. The returned
  calibration always satisfies the exact bound.

Error (utility): η − N·p is a sum of N centred Bernoulli variables bounded by 1, sub-gamma with
variance factor V = N·p(1−p) and scale 1/3, so P(|η − N·p| ≥ √(2V·L) + L/3) ≤ 2e^{−L}
(Boucheron, Lugosi & Massart 2013, Thm 2.10 and §2.8); with L = ln(2/β) the bound holds w.p.
≥ 1 − β (`binary_sum_error_bound`).

Two samplers of the same law: `shuffle_protocol` runs the message-level protocol (randomizers,
shuffler, analyzer; for tests and small n) and `aggregate_binary_sum` draws Σx + Bin(N, p) − Np
directly (for experiments). Both are tested to agree in distribution.

Local model: `LaplaceRandomizer` — a user adds Laplace(b) to each coordinate of its vector;
with L1 sensitivity Δ₁ (any two inputs of one user) it is (Δ₁/b)-LDP (Dwork et al. 2006).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from dp_accounting import dp_event

from privrl.privacy.events import ApproxDpEvent, PureDpEvent
from privrl.privacy.mechanisms import binomial_delta, binomial_mechanism
from privrl.privacy.noise import require_noise_generator
from privrl.privacy.release import Release

__all__ = [
    "CALIBRATIONS",
    "BinarySumCalibration",
    "Calibration",
    "LaplaceRandomizer",
    "aggregate_binary_sum",
    "analyzer",
    "binary_sum_error_bound",
    "calibrate_binary_sum",
    "local_randomizer",
    "shuffle_protocol",
    "shuffler",
    "theory_lambda",
]

Calibration = Literal["tight", "theory"]
CALIBRATIONS: tuple[str, ...] = ("tight", "theory")
_P_BISECTIONS = 40  # relative precision 2^-40 on p: far below any practical variance gain


@dataclass(frozen=True)
class BinarySumCalibration:
    """Noise of one shuffle binary-summation counter: every user sends ``bits_per_user`` bits
    Ber(``p``), so η ~ Bin(N = n_users·bits_per_user, p).

    ``epsilon``/``delta`` are the per-counter target (ε', δ'); ``delta_exact`` is the exact
    hockey-stick δ of the calibrated binomial at e^{ε'} (≤ ``delta``), the value accounted.
    """

    epsilon: float
    delta: float
    n_users: int
    bits_per_user: int
    p: float
    mode: str
    delta_exact: float

    @property
    def trials(self) -> int:
        """N = n·m, the number of noise bits in the batch."""
        return self.n_users * self.bits_per_user

    @property
    def noise_mean(self) -> float:
        """E[η] = N·p, subtracted by the analyzer (a public constant)."""
        return self.trials * self.p

    @property
    def variance(self) -> float:
        """Var[η] = N·p(1−p), the variance of every released count."""
        return self.trials * self.p * (1.0 - self.p)

    def event(self) -> ApproxDpEvent:
        """(ε', δ_exact)-DP of one counter under replace-one neighbouring users."""
        return ApproxDpEvent(epsilon=self.epsilon, delta=self.delta_exact)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(trials=self.trials, variance=self.variance)
        return out


def _check_eps_delta(epsilon: float, delta: float) -> tuple[float, float]:
    eps, dlt = float(epsilon), float(delta)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
    if not 0.0 < dlt < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return eps, dlt


def theory_lambda(epsilon: float, delta: float) -> float:
    """λ = 50·ln(2/δ)/ε² of Balcer & Cheu's binomial randomizer."""
    eps, dlt = _check_eps_delta(epsilon, delta)
    return 50.0 * math.log(2.0 / dlt) / (eps * eps)


def _meets(trials: int, p: float, eps: float, dlt: float) -> bool:
    return binomial_delta(trials, p, eps) < dlt


@functools.lru_cache(maxsize=256)
def _fair_coins_needed(eps: float, dlt: float) -> int:
    """Smallest N with δ(Bin(N, ½)) < δ at e^ε (monotone in N: exponential + binary search)."""
    hi = 1
    while not _meets(hi, 0.5, eps, dlt):
        hi *= 2
        if hi > 2**62:
            raise ValueError(f"no binomial meets delta={dlt} at epsilon={eps}")
    lo = hi // 2  # infeasible (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _meets(mid, 0.5, eps, dlt):
            hi = mid
        else:
            lo = mid
    return hi


@functools.lru_cache(maxsize=1024)
def _calibrate(eps: float, dlt: float, n: int, mode: str) -> BinarySumCalibration:
    if mode == "theory":
        lam = theory_lambda(eps, dlt)
        if n >= 2.0 * lam:
            m, p = 1, lam / n
        else:
            m, p = math.ceil(2.0 * lam / n), 0.5
    elif mode == "tight":
        m = math.ceil(_fair_coins_needed(eps, dlt) / n)
        trials = n * m
        lo, hi = 0.0, 0.5  # invariant: hi meets the target
        for _ in range(_P_BISECTIONS):
            mid = 0.5 * (lo + hi)
            if _meets(trials, mid, eps, dlt):
                hi = mid
            else:
                lo = mid
        p = hi
    else:
        raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {mode!r}")
    exact = binomial_delta(n * m, p, eps)
    return BinarySumCalibration(eps, dlt, n, m, p, mode, exact)


def calibrate_binary_sum(
    epsilon: float, delta: float, n_users: int, mode: Calibration = "tight"
) -> BinarySumCalibration:
    """The per-counter noise of a batch of ``n_users`` for (ε', δ') = (epsilon, delta).

    Depends only on public quantities (budget, batch size, mode), never on data. Cached.
    """
    eps, dlt = _check_eps_delta(epsilon, delta)
    if isinstance(n_users, bool) or not isinstance(n_users, int | np.integer) or n_users < 1:
        raise ValueError(f"n_users must be an integer >= 1, got {n_users!r}")
    return _calibrate(eps, dlt, int(n_users), str(mode))


def binary_sum_error_bound(calibration: BinarySumCalibration, beta: float) -> float:
    """t with P(|released − true sum| > t) ≤ β for one counter (sub-gamma Bernstein)."""
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta}")
    log_term = math.log(2.0 / beta)
    return math.sqrt(2.0 * calibration.variance * log_term) + log_term / 3.0


# ---------------------------------------------------------------------------------------------
# Message-level protocol: local randomizers -> shuffler -> analyzer
# ---------------------------------------------------------------------------------------------


def local_randomizer(
    bits: npt.ArrayLike, calibration: BinarySumCalibration, rng: np.random.Generator
) -> np.ndarray:
    """Every user's messages: rows ``(user, counter, bit)``.

    ``bits [n_users, n_counters]`` in {0, 1}. A user sends, per counter, its bit and
    ``bits_per_user`` Ber(p) bits. The user column is kept only so that tests can check what a
    user sent; the shuffler drops it.
    """
    x = np.asarray(bits)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or not np.isin(x, (0, 1)).all():
        raise ValueError("bits must be a 0/1 array [n_users, n_counters]")
    n, c = x.shape
    if n != calibration.n_users:
        raise ValueError(f"calibration is for {calibration.n_users} users, got {n}")
    m = calibration.bits_per_user
    noise = (require_noise_generator(rng).random((n, c, m)) < calibration.p).astype(np.int64)
    payload = np.concatenate([x[:, :, None].astype(np.int64), noise], axis=2)  # [n, c, 1+m]
    users = np.broadcast_to(np.arange(n)[:, None, None], payload.shape)
    counters = np.broadcast_to(np.arange(c)[None, :, None], payload.shape)
    return np.stack([users.ravel(), counters.ravel(), payload.ravel()], axis=1)


def shuffler(messages: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Uniformly random permutation of all messages, sender identity removed: ``(counter, bit)``
    rows. (Trusted component: in a deployment, a mixnet or trusted hardware.)"""
    order = require_noise_generator(rng).permutation(messages.shape[0])
    return messages[order][:, 1:]


def analyzer(
    shuffled: np.ndarray, calibration: BinarySumCalibration, n_counters: int
) -> np.ndarray:
    """Per counter: Σ of received bits − N·p (unbiased, data-independent error)."""
    counters = shuffled[:, 0].astype(np.int64)
    totals = np.bincount(counters, weights=shuffled[:, 1], minlength=n_counters)
    return totals - calibration.noise_mean


def shuffle_protocol(
    bits: npt.ArrayLike, calibration: BinarySumCalibration, rng: np.random.Generator
) -> np.ndarray:
    """Run R → S → A on ``bits [n_users, n_counters]``; returns the released sums [n_counters]."""
    x = np.asarray(bits)
    n_counters = 1 if x.ndim == 1 else x.shape[1]
    return analyzer(shuffler(local_randomizer(x, calibration, rng), rng), calibration, n_counters)


# ---------------------------------------------------------------------------------------------
# Aggregate sampler (same law, for experiments)
# ---------------------------------------------------------------------------------------------


def aggregate_binary_sum(
    sums: npt.ArrayLike,
    calibration: BinarySumCalibration,
    rng: np.random.Generator,
    *,
    name: str,
    coordinates_changed: int,
) -> tuple[np.ndarray, Release]:
    """Released counts ``Σx + Bin(N, p) − N·p`` for every counter of ``sums`` at once.

    Exactly the analyzer's output law of `shuffle_protocol`, drawn without the messages
    (via `binomial_mechanism`). ``coordinates_changed`` counters move by ≤ 1 when one user is
    replaced; the event is their composition, SelfComposed(ApproxDpEvent(ε', δ_exact)).
    """
    x = np.asarray(sums)
    noisy, release = binomial_mechanism(
        x,
        trials=calibration.trials,
        p=calibration.p,
        rng=rng,
        name=name,
        epsilon=calibration.epsilon,
        coordinates_changed=coordinates_changed,
    )
    extra = dict(release.extra)
    extra.update(
        protocol="shuffle binary summation (Cheu et al. 2019)",
        calibration=calibration.mode,
        n_users=calibration.n_users,
        bits_per_user=calibration.bits_per_user,
    )
    release = Release(
        name=release.name,
        mechanism="shuffle_binary_sum",
        sensitivity=release.sensitivity,
        norm=release.norm,
        noise=release.noise,
        count=release.count,
        size=release.size,
        event=release.event,
        extra=extra,
    )
    return np.asarray(noisy, dtype=np.float64).reshape(x.shape), release


# ---------------------------------------------------------------------------------------------
# Local model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaplaceRandomizer:
    """A user's local randomizer: x + Laplace(scale) per coordinate, (Δ₁/scale)-LDP.

    ``l1_sensitivity`` bounds ‖x − x'‖₁ over any two inputs of one user.
    """

    scale: float
    l1_sensitivity: float

    def __post_init__(self) -> None:
        for what, v in (("scale", self.scale), ("l1_sensitivity", self.l1_sensitivity)):
            if not (math.isfinite(float(v)) and float(v) > 0):
                raise ValueError(f"{what} must be finite and > 0, got {v}")

    @classmethod
    def for_epsilon(cls, epsilon: float, l1_sensitivity: float) -> LaplaceRandomizer:
        """The randomizer that is exactly ε-LDP: scale = Δ₁/ε."""
        if not (math.isfinite(float(epsilon)) and float(epsilon) > 0):
            raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
        return cls(scale=float(l1_sensitivity) / float(epsilon), l1_sensitivity=l1_sensitivity)

    @property
    def epsilon(self) -> float:
        return float(self.l1_sensitivity) / float(self.scale)

    def noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """The noise of ``shape[0]`` users' messages (drawn independently of any data)."""
        return require_noise_generator(rng).laplace(0.0, self.scale, size=shape)

    def randomize(self, x: npt.ArrayLike, rng: np.random.Generator) -> np.ndarray:
        """Messages x + Laplace(scale) (rows = users)."""
        arr = np.asarray(x, dtype=np.float64)
        return arr + self.noise(arr.shape, rng)

    def release(self, name: str, *, size: int, users: int) -> Release:
        """Record of every user's randomizer (parallel over users: each user is ε-LDP)."""
        event: dp_event.DpEvent = PureDpEvent(epsilon=self.epsilon)
        return Release(
            name=name,
            mechanism="laplace_local_randomizer",
            sensitivity=float(self.l1_sensitivity),
            norm="l1",
            noise={"scale": float(self.scale), "epsilon": self.epsilon},
            count=1,
            size=int(size),
            event=event,
            extra={"users": int(users), "model": "local (one message per user, no shuffler)"},
        )
