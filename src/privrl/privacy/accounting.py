"""One accounting facade over dp-accounting (RDP and PLD backends).

`epsilon(event, delta)` turns a `DpEvent` (dp-accounting's, or privrl's `PureDpEvent` /
`ApproxDpEvent`) into the smallest epsilon this library can certify at `delta`. Native events
go through dp-accounting's own accountants; our events are added as follows.

RDP backend
    * Native leaves are composed by `RdpAccountant` (public API: the `rdp` property) one leaf
      at a time, and their curves summed over the orders. We never write the accountant's
      internal state: we read its public RDP curve and convert with dp-accounting's public
      `compute_epsilon`. This also lets us cache the curve of each (immutable) leaf, which makes
      calibration and `max_steps` cheap.
    * `PureDpEvent(eps)`: eps-DP implies (alpha, min(eps, alpha eps^2 / 2))-RDP for every alpha
      (the density ratio is bounded by e^eps; and eps-DP => eps^2/2-zCDP, Bun & Steinke 2016,
      Prop. 1.4). We also try basic composition (RDP part at delta, plus sum of eps) and keep
      the smaller epsilon: both are valid guarantees at the same delta.
    * `ApproxDpEvent(eps, delta_i)` has no RDP curve. The budget is split by basic
      composition: the approx events get sum(delta_i) plus a slack delta_s and are composed by
      advanced composition (or basic composition, whichever is smaller); the RDP part gets
      delta - sum(delta_i) - delta_s. The share of the remaining delta given to delta_s is
      chosen by minimising the total over a fixed grid (`_SLACK_FRACTIONS`); every grid point
      is a valid guarantee, so the minimum is too.

PLD backend
    * Native leaves are composed by `PLDAccountant`. Our events enter as the dominating PLD of
      an (eps, delta)-DP mechanism, `privacy_loss_distribution.from_privacy_parameters`
      (a randomized-response pair, Kairouz, Oh & Viswanath 2015): composing it is the optimal
      composition of (eps, delta)-DP mechanisms, up to the pessimistic discretisation. Those
      PLDs are composed with the accountant's internal `_pld` (read only; guarded by a
      runtime check and by a test).

dp-accounting's log lines
    dp-accounting logs through absl. Its RDP accountant logs one warning per order whose
    series fails to converge ("_compute_log_a_frac failed to converge ... Excluding this order"),
    dozens in one call for a small noise multiplier. Excluding an order leaves that order's RDP
    infinite, so the epsilon is taken over the other orders: a valid, only possibly looser,
    bound. Those lines carry no action for a user, so they are dropped while privrl's calls
    into the accountant run (`quiet_dp_accounting`). Every other absl record (e.g. a negative
    Rényi divergence from an extreme event) and every warning of privrl's own passes unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from dp_accounting import dp_event, dp_event_builder
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution
from dp_accounting.privacy_accountant import NeighboringRelation, UnsupportedEventError
from dp_accounting.rdp import rdp_privacy_accountant

from privrl.privacy.events import ApproxDpEvent, PureDpEvent
from privrl.privacy.units import NeighbourRelation, parse_relation

Backend = Literal["rdp", "pld"]
Sampling = Literal["poisson", "without_replacement", "none"]


def _segment(start: float, stop: float, step: float) -> list[float]:
    n = round((stop - start) / step)
    return [round(start + i * step, 6) for i in range(n + 1)]


def _dense_orders() -> tuple[float, ...]:
    """Fine fractional orders near 1 (the optimum for small noise, e.g. z = 0.25, sits at
    alpha ~ 1.25), 0.05-0.25 steps up to 20, then integers roughly geometric up to 1024
    (~7% apart: subsampling-without-replacement bounds are steep in alpha). Includes
    dp-accounting's DEFAULT_RDP_ORDERS, so the dense grid is never looser than the default.
    Measured: within 0.15% of a 4,700-order reference grid for Poisson-subsampled Gaussians
    (z in [0.2, 2], q in [1e-3, 0.1], T in [1e2, 1e4], epsilon <= 30)."""
    orders: list[float] = []
    orders += _segment(1.01, 1.20, 0.01)
    orders += _segment(1.22, 2.00, 0.02)
    orders += _segment(2.05, 3.00, 0.05)
    orders += _segment(3.10, 10.0, 0.10)
    orders += _segment(10.25, 20.0, 0.25)
    orders += [float(round(x)) for x in np.geomspace(20, 1024, 60)]
    orders += [float(x) for x in rdp_privacy_accountant.DEFAULT_RDP_ORDERS]
    return tuple(sorted(set(orders)))


# Dense grid of RDP orders, fractional orders included (needed below 2 for small noise).
DENSE_RDP_ORDERS: tuple[float, ...] = _dense_orders()

# Fractions of the remaining delta given to the advanced-composition slack (RDP backend).
_SLACK_FRACTIONS: tuple[float, ...] = (
    1e-3,
    1e-2,
    0.05,
    *(i / 20 for i in range(2, 19)),
    0.95,
    0.99,
    0.999,
)

# Search limits for noise calibration. PLDs of very small noise are huge (z = 0.05: ~2 GB and
# 40 s for one Gaussian), so the PLD search stops at a larger floor (see the docstring).
_MIN_NOISE = {"rdp": 1e-6, "pld": 0.2}
_MAX_NOISE = 1e7

# Input limits. e^ε of a pure/approximate event enters the PLD of (ε, δ)-DP and advanced
# composition, so ε must keep e^ε a float64 (overflow above ~709.78); such an event guarantees
# nothing anyway. A Gaussian's noise multiplier is squared, so z² must be a float64 too (ε is 0
# to float precision long before).
MAX_EVENT_EPSILON = 700.0
MAX_NOISE_MULTIPLIER = 1e150


class AccountingError(ValueError):
    """An event the chosen backend cannot account, or an impossible target."""


# --------------------------------------------------------------------------- validation


def _check_delta(delta: float, *, allow_zero: bool = False) -> float:
    delta = float(delta)
    low_ok = delta >= 0 if allow_zero else delta > 0
    if not (math.isfinite(delta) and low_ok and delta < 1):
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise AccountingError(f"delta must be in {interval}; got {delta!r}")
    return delta


def _check_backend(backend: str) -> Backend:
    if backend not in ("rdp", "pld"):
        raise AccountingError(f"unknown accounting backend {backend!r}; expected 'rdp' or 'pld'")
    return backend  # type: ignore[return-value]


def _check_orders(orders: Sequence[float] | None) -> tuple[float, ...]:
    if orders is None:
        return DENSE_RDP_ORDERS
    out = tuple(float(a) for a in orders)
    if not out:
        raise AccountingError("orders must not be empty")
    if not all(math.isfinite(a) and a > 1 for a in out):
        raise AccountingError("every RDP order must be finite and > 1")
    return out


def _check_discretization(value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and 0 < value <= 0.1):
        raise AccountingError(f"pld_discretization must be in (0, 0.1]; got {value!r}")
    return value


def _check_count(count: object, what: str = "count") -> int:
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 0:
        raise AccountingError(f"{what} must be a non-negative integer; got {count!r}")
    return int(count)


def _relation(relation: NeighbourRelation | str) -> NeighbourRelation:
    try:
        return parse_relation(relation)
    except ValueError as err:
        raise AccountingError(str(err)) from None


# --------------------------------------------------------------------------- event traversal


class _Parts:
    """An event flattened by composition: native dp-accounting leaves and our own events."""

    def __init__(self) -> None:
        self.native: list[tuple[dp_event.DpEvent, int]] = []
        self.pure: list[tuple[float, int]] = []  # (epsilon, count)
        self.approx: list[tuple[float, float, int]] = []  # (epsilon, delta, count)
        self.non_private = False


def _flatten(event: dp_event.DpEvent) -> _Parts:
    parts = _Parts()

    def visit(ev: object, count: int) -> None:
        if not isinstance(ev, dp_event.DpEvent):
            raise AccountingError(f"expected a DpEvent; got {type(ev).__name__}")
        if isinstance(ev, dp_event.NoOpDpEvent) or count == 0:
            return
        if isinstance(ev, dp_event.NonPrivateDpEvent):
            parts.non_private = True
        elif isinstance(ev, dp_event.UnsupportedDpEvent):
            raise AccountingError(
                "UnsupportedDpEvent: the release has no privacy description, so no epsilon "
                "can be certified"
            )
        elif isinstance(ev, dp_event.SelfComposedDpEvent):
            visit(ev.event, count * _check_count(ev.count, "SelfComposedDpEvent.count"))
        elif isinstance(ev, dp_event.ComposedDpEvent):
            for sub in ev.events:
                visit(sub, count)
        elif isinstance(ev, PureDpEvent):
            parts.pure.append((_check_event_epsilon(ev.epsilon, ev), count))
        elif isinstance(ev, ApproxDpEvent):
            eps = _check_event_epsilon(ev.epsilon, ev)
            d = float(ev.delta)
            if not (math.isfinite(d) and 0 <= d < 1):
                raise AccountingError(f"{ev!r}: delta must be in [0, 1)")
            if d == 0:
                parts.pure.append((eps, count))  # (eps, 0)-DP is eps-DP
            else:
                parts.approx.append((eps, d, count))
        else:
            parts.native.append((ev, count))

    visit(event, 1)
    return parts


def _check_event_epsilon(eps: float, ev: dp_event.DpEvent) -> float:
    eps = float(eps)
    if not (math.isfinite(eps) and eps >= 0):
        raise AccountingError(f"{ev!r}: epsilon must be finite and >= 0")
    if eps > MAX_EVENT_EPSILON:
        raise AccountingError(
            f"{ev!r}: epsilon must be <= {MAX_EVENT_EPSILON:g} (e^epsilon overflows float64 "
            "beyond ~709, and such an event guarantees nothing)"
        )
    return eps


def _supports(leaf: dp_event.DpEvent, backend: Backend, relation: NeighbourRelation) -> bool:
    rel = relation.to_dp_accounting()
    if backend == "rdp":
        acc: rdp_privacy_accountant.RdpAccountant | pld_privacy_accountant.PLDAccountant = (
            rdp_privacy_accountant.RdpAccountant([2.0], rel)
        )
    else:
        acc = pld_privacy_accountant.PLDAccountant(rel)
    return acc.supports(leaf)


def _unsupported(
    leaf: dp_event.DpEvent, backend: Backend, relation: NeighbourRelation, detail: str
) -> AccountingError:
    other = "pld" if backend == "rdp" else "rdp"
    hints = []
    if _supports(leaf, other, relation):
        hints.append(f"use backend={other!r}, which supports it")
    other_rel = (
        NeighbourRelation.REPLACE_ONE
        if relation is NeighbourRelation.ADD_REMOVE
        else NeighbourRelation.ADD_REMOVE
    )
    if _supports(leaf, backend, other_rel):
        hints.append(
            f"it is supported under relation {other_rel.value!r} (only if that is the relation "
            "your mechanism actually satisfies)"
        )
    hint = "; ".join(hints) if hints else "no backend of this library supports it"
    return AccountingError(
        f"{type(leaf).__name__} cannot be accounted by the {backend.upper()} backend under "
        f"relation {relation.value!r}: {hint}. Event: {leaf!r}. dp-accounting says: {detail}"
    )


# ------------------------------------------------------------------ dp-accounting's logging

# The one message dropped (see the module docstring): the series of an order did not converge,
# so dp-accounting leaves that order out of the epsilon (conservative).
_NON_CONVERGENCE = "_compute_log_a_frac failed to converge"


class _DropNonConvergence(logging.Filter):
    """Drops dp-accounting's per-order non-convergence warnings; passes every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(_NON_CONVERGENCE))


_ABSL_LOGGER = "absl"  # the logger absl.logging (and so dp-accounting) writes to
_QUIET_FILTER = _DropNonConvergence()
_quiet_lock = threading.Lock()
_quiet_depth = 0


@contextlib.contextmanager
def quiet_dp_accounting() -> Iterator[None]:
    """While inside, dp-accounting's per-order non-convergence warnings are dropped (nested
    and thread-safe: the filter stays on the absl logger until the last caller leaves)."""
    global _quiet_depth
    logger = logging.getLogger(_ABSL_LOGGER)
    with _quiet_lock:
        if _quiet_depth == 0:
            logger.addFilter(_QUIET_FILTER)
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                logger.removeFilter(_QUIET_FILTER)


# --------------------------------------------------------------------------- RDP backend


def _leaf_rdp_uncached(
    leaf: dp_event.DpEvent, orders: tuple[float, ...], relation: NeighboringRelation
) -> np.ndarray:
    acc = rdp_privacy_accountant.RdpAccountant(list(orders), relation)
    with quiet_dp_accounting():
        acc.compose(leaf)  # raises UnsupportedEventError before touching any state
    curve = np.asarray(acc.rdp, dtype=np.float64)
    curve.setflags(write=False)
    return curve


_leaf_rdp_cached = functools.lru_cache(maxsize=1024)(_leaf_rdp_uncached)


def _leaf_rdp(
    leaf: dp_event.DpEvent, orders: tuple[float, ...], relation: NeighbourRelation
) -> np.ndarray:
    """RDP curve of one composition of `leaf` (events are immutable, so it is cached)."""
    rel = relation.to_dp_accounting()
    try:
        try:
            return _leaf_rdp_cached(leaf, orders, rel)
        except TypeError:  # unhashable event (list fields): compute without the cache
            return _leaf_rdp_uncached(leaf, orders, rel)
    except UnsupportedEventError as err:
        raise _unsupported(leaf, "rdp", relation, str(err)) from None


def _rdp_epsilon(orders: tuple[float, ...], curve: np.ndarray, delta: float) -> float:
    # Canonne, Kamath & Steinke 2020 Prop. 12 (dp-accounting's conversion), KL bound near 1.
    return float(rdp_privacy_accountant.compute_epsilon(orders, curve, delta)[0])


def _pure_rdp(eps: float, orders: np.ndarray) -> np.ndarray:
    # eps-DP => D_alpha <= eps (bounded ratio) and <= alpha eps^2 / 2 (Bun & Steinke 2016,
    # Prop. 1.4: eps-DP => eps^2/2-zCDP).
    return np.minimum(eps, orders * eps * eps / 2.0)


def _approx_part_epsilon(approx: list[tuple[float, float, int]], slack: float) -> float:
    """Epsilon of the approx events (their deltas excluded) with `slack` extra delta: the
    smaller of basic composition and heterogeneous advanced composition."""
    basic = math.fsum(c * e for e, _, c in approx)
    if slack <= 0:
        return basic
    return min(basic, _advanced_mixed([(e, c) for e, _, c in approx], slack))


def _epsilon_rdp(
    parts: _Parts, delta: float, relation: NeighbourRelation, orders: tuple[float, ...]
) -> float:
    grid = np.asarray(orders, dtype=np.float64)
    native = np.zeros_like(grid)
    for leaf, count in parts.native:
        native = native + count * _leaf_rdp(leaf, orders, relation)
    pure_curve = np.zeros_like(grid)
    for eps, count in parts.pure:
        pure_curve = pure_curve + count * _pure_rdp(eps, grid)
    pure_basic = math.fsum(c * e for e, c in parts.pure)

    def rdp_part(d: float) -> float:
        if not parts.native and not parts.pure:
            return 0.0
        best = _rdp_epsilon(orders, native + pure_curve, d)
        if parts.pure:
            best = min(best, _rdp_epsilon(orders, native, d) + pure_basic)
        return best

    if not parts.approx:
        return rdp_part(delta)

    remaining = delta - _approx_delta(parts)
    if not parts.native and not parts.pure:
        return _approx_part_epsilon(parts.approx, remaining)
    # Basic composition of the RDP part (gets delta_n) and the approx part (gets slack).
    candidates = [rdp_part(remaining) + _approx_part_epsilon(parts.approx, 0.0)]
    for frac in _SLACK_FRACTIONS:
        slack = frac * remaining
        candidates.append(rdp_part(remaining - slack) + _approx_part_epsilon(parts.approx, slack))
    return min(candidates)


def _approx_delta(parts: _Parts) -> float:
    return math.fsum(c * d for _, d, c in parts.approx)


def _check_approx_budget(parts: _Parts, delta: float) -> None:
    spent = _approx_delta(parts)
    if parts.approx and spent >= delta:
        raise AccountingError(
            f"the ApproxDpEvents alone spend delta = {spent:.3g} >= target delta = {delta:.3g}; "
            "no useful epsilon can be certified at this delta (ask for a larger delta)"
        )


# --------------------------------------------------------------------------- PLD backend


def _epsilon_pld(
    parts: _Parts, delta: float, relation: NeighbourRelation, discretization: float
) -> float:
    acc = pld_privacy_accountant.PLDAccountant(relation.to_dp_accounting(), discretization)
    for leaf, count in parts.native:
        try:
            acc.compose(leaf, count)
        except UnsupportedEventError as err:
            raise _unsupported(leaf, "pld", relation, str(err)) from None
    custom = [(e, 0.0, c) for e, c in parts.pure] + parts.approx
    native_eps = float(acc.get_epsilon(delta))
    if not custom or math.isinf(native_eps):
        # Infinite for the native part alone (e.g. a zero-noise Gaussian, which the accountant
        # flags instead of composing into `_pld`) stays infinite after further composition.
        return native_eps
    pld = _internal_pld(acc)
    for eps, d, count in custom:
        dominating = privacy_loss_distribution.from_privacy_parameters(
            pld_common.DifferentialPrivacyParameters(eps, d),
            value_discretization_interval=discretization,
        )
        pld = pld.compose(dominating.self_compose(count) if count > 1 else dominating)
    return float(pld.get_epsilon_for_delta(delta))


def _internal_pld(
    acc: pld_privacy_accountant.PLDAccountant,
) -> privacy_loss_distribution.PrivacyLossDistribution:
    """The accountant's composed PLD (dp-accounting internal; fail loudly if it moves)."""
    pld = getattr(acc, "_pld", None)
    if not isinstance(pld, privacy_loss_distribution.PrivacyLossDistribution):
        raise AccountingError(
            "dp-accounting's PLDAccountant no longer exposes its composed PLD as `_pld`; "
            "privrl's PLD accounting of PureDpEvent/ApproxDpEvent must be updated"
        )
    return pld


# --------------------------------------------------------------------------- public API


def epsilon(
    event: dp_event.DpEvent,
    delta: float,
    *,
    relation: NeighbourRelation = NeighbourRelation.ADD_REMOVE,
    backend: Backend = "rdp",
    orders: Sequence[float] | None = None,
    pld_discretization: float = 1e-4,
) -> float:
    """Smallest epsilon such that `event` is (epsilon, delta)-DP under `relation`.

    `orders` (RDP only) defaults to `DENSE_RDP_ORDERS`; `pld_discretization` (PLD only) is the
    loss discretisation interval (pessimistic rounding: the result is an upper bound).
    `delta = 0` is allowed and is finite only for pure-DP events. Returns `math.inf` for
    events containing a `NonPrivateDpEvent`.
    """
    delta = _check_delta(delta, allow_zero=True)
    backend = _check_backend(backend)
    rel = _relation(relation)
    parts = _flatten(event)
    _check_approx_budget(parts, delta)
    if backend == "rdp":
        grid = _check_orders(orders)
        if parts.non_private:
            return math.inf
        return _epsilon_rdp(parts, delta, rel, grid)
    disc = _check_discretization(pld_discretization)
    if parts.non_private:
        return math.inf
    return _epsilon_pld(parts, delta, rel, disc)


def check_supported(
    event: dp_event.DpEvent,
    *,
    relation: NeighbourRelation = NeighbourRelation.ADD_REMOVE,
    backend: Backend = "rdp",
) -> None:
    """Raise AccountingError if `backend` cannot account `event` under `relation` (cheap:
    no privacy loss is computed)."""
    backend = _check_backend(backend)
    rel = _relation(relation)
    parts = _flatten(event)
    rel_da = rel.to_dp_accounting()
    for leaf, _ in parts.native:
        if backend == "rdp":
            acc: rdp_privacy_accountant.RdpAccountant | pld_privacy_accountant.PLDAccountant = (
                rdp_privacy_accountant.RdpAccountant([2.0], rel_da)
            )
        else:
            acc = pld_privacy_accountant.PLDAccountant(rel_da)
        if acc.supports(leaf):
            continue
        try:
            acc.compose(leaf)  # raises (before composing anything) with dp-accounting's reason
        except UnsupportedEventError as err:
            raise _unsupported(leaf, backend, rel, str(err)) from None
        raise AccountingError(f"{leaf!r} is not supported by the {backend.upper()} backend")


def zcdp_to_dp(rho: float, delta: float) -> float:
    """Bun & Steinke (2016) Prop. 1.3: rho-zCDP => (rho + 2 sqrt(rho log(1/delta)), delta)-DP."""
    rho = float(rho)
    if not (rho >= 0 and not math.isnan(rho)):
        raise AccountingError(f"rho must be >= 0; got {rho!r}")
    delta = _check_delta(delta)
    if math.isinf(rho):
        return math.inf
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def advanced_composition(
    epsilon0: float, delta0: float, count: int, delta_slack: float
) -> tuple[float, float]:
    """Dwork, Rothblum & Vadhan (2010): count-fold composition of (epsilon0, delta0)-DP is
    (sqrt(2 k ln(1/delta_slack)) eps0 + k eps0 (e^eps0 - 1), k delta0 + delta_slack)-DP.

    The exact formula, not min'ed with basic composition (k eps0), so that a runtime check can
    reproduce a paper's bound. Forms with ln(2/delta1) (e.g. Sharma et al.) are
    `delta_slack = delta1 / 2`.
    """
    eps0 = float(epsilon0)
    if not (math.isfinite(eps0) and 0 <= eps0 <= MAX_EVENT_EPSILON):
        raise AccountingError(
            f"epsilon0 must be finite, >= 0 and <= {MAX_EVENT_EPSILON:g}; got {epsilon0!r}"
        )
    d0 = float(delta0)
    if not (0 <= d0 <= 1):
        raise AccountingError(f"delta0 must be in [0, 1]; got {delta0!r}")
    k = _check_count(count)
    slack = float(delta_slack)
    if not (0 < slack < 1):
        raise AccountingError(f"delta_slack must be in (0, 1); got {delta_slack!r}")
    eps = math.sqrt(2.0 * k * math.log(1.0 / slack)) * eps0 + k * eps0 * math.expm1(eps0)
    return eps, k * d0 + slack


def _advanced_mixed(eps_counts: Sequence[tuple[float, int]], slack: float) -> float:
    """Heterogeneous advanced composition: sqrt(2 ln(1/slack) sum eps_i^2) + sum eps_i
    (e^eps_i - 1). Equals DRV for equal eps_i and is implied by Kairouz, Oh & Viswanath
    (2015) Thm 3.5, whose mean term eps (e^eps - 1)/(e^eps + 1) is smaller."""
    sq = math.fsum(c * e * e for e, c in eps_counts)
    mean = math.fsum(c * e * math.expm1(e) for e, c in eps_counts)
    return math.sqrt(2.0 * math.log(1.0 / slack) * sq) + mean


def sampled_gaussian_event(
    noise_multiplier: float,
    steps: int,
    *,
    sampling: Sampling = "poisson",
    sampling_probability: float = 1.0,
    dataset_size: int | None = None,
    sample_size: int | None = None,
) -> dp_event.DpEvent:
    """The DpEvent of `steps` (sub)sampled Gaussian steps.

    `sampling="poisson"`: each unit joins each step independently with `sampling_probability`
    (rate 1 selects everyone, so it is described as the plain Gaussian). `"without_replacement"`:
    a uniform subset of `sample_size` out of `dataset_size` (accountable under replace-one by
    RDP only). `"none"`: every step sees all data. Always a `SelfComposedDpEvent` of `steps`.
    """
    z = float(noise_multiplier)
    if not (math.isfinite(z) and 0 <= z <= MAX_NOISE_MULTIPLIER):
        raise AccountingError(
            f"noise_multiplier must be finite, >= 0 and <= {MAX_NOISE_MULTIPLIER:g} (its square "
            f"must be a float64); got {noise_multiplier!r}"
        )
    steps = _check_count(steps, "steps")
    q = float(sampling_probability)
    gaussian = dp_event.GaussianDpEvent(z)
    if sampling == "poisson":
        if dataset_size is not None or sample_size is not None:
            raise AccountingError(
                "dataset_size/sample_size apply to sampling='without_replacement' only"
            )
        if not (0 < q <= 1):
            raise AccountingError(f"sampling_probability must be in (0, 1]; got {q!r}")
        inner: dp_event.DpEvent = (
            gaussian if q == 1.0 else dp_event.PoissonSampledDpEvent(q, gaussian)
        )
    elif sampling == "without_replacement":
        if q != 1.0:
            raise AccountingError(
                "sampling='without_replacement' is set by dataset_size and sample_size; "
                "leave sampling_probability at its default"
            )
        n = _check_count(dataset_size, "dataset_size") if dataset_size is not None else None
        m = _check_count(sample_size, "sample_size") if sample_size is not None else None
        if n is None or m is None or not (1 <= m <= n):
            raise AccountingError(
                "sampling='without_replacement' needs integers 1 <= sample_size <= dataset_size; "
                f"got sample_size={sample_size!r}, dataset_size={dataset_size!r}"
            )
        inner = dp_event.SampledWithoutReplacementDpEvent(n, m, gaussian)
    elif sampling == "none":
        if q != 1.0 or dataset_size is not None or sample_size is not None:
            raise AccountingError("sampling='none' takes no sampling parameters")
        inner = gaussian
    else:
        raise AccountingError(
            f"unknown sampling {sampling!r}; expected 'poisson', 'without_replacement' or 'none'"
        )
    return dp_event.SelfComposedDpEvent(inner, steps)


def _check_target(target_epsilon: float) -> float:
    t = float(target_epsilon)
    if not (math.isfinite(t) and t > 0):
        raise AccountingError(f"target_epsilon must be finite and > 0; got {target_epsilon!r}")
    return t


def _log_gap(value: float, target: float) -> float:
    """log(value / target), with +-inf for value = inf / 0."""
    if value <= 0:
        return -math.inf
    return math.log(value) - math.log(target)


def _interpolate(x_ok: float, g_ok: float, x_bad: float, g_bad: float) -> float | None:
    """Zero of the secant through (x_ok, g_ok), (x_bad, g_bad), or None if not finite."""
    if not (math.isfinite(g_ok) and math.isfinite(g_bad)) or g_bad == g_ok:
        return None
    x = x_ok - g_ok * (x_bad - x_ok) / (g_bad - g_ok)
    return x if math.isfinite(x) else None


def _after(prior: dp_event.DpEvent | None, event: dp_event.DpEvent) -> dp_event.DpEvent:
    """``event`` released after ``prior`` (their composition), or ``event`` alone."""
    return event if prior is None else dp_event.ComposedDpEvent([prior, event])


@dataclass(frozen=True)
class _Search:
    """The accountant of a calibration search (relation, backend, RDP orders, PLD
    discretisation), checked once before searching; `epsilon` of each candidate's event."""

    rel: NeighbourRelation
    backend: Backend
    grid: tuple[float, ...]
    disc: float

    @classmethod
    def checked(
        cls,
        relation: NeighbourRelation | str,
        backend: str,
        orders: Sequence[float] | None,
        pld_discretization: float,
    ) -> _Search:
        backend_ = _check_backend(backend)
        grid = _check_orders(orders)
        disc = _check_discretization(pld_discretization)
        return cls(_relation(relation), backend_, grid, disc)

    def check_supported(self, event: dp_event.DpEvent) -> None:
        check_supported(event, relation=self.rel, backend=self.backend)

    def epsilon(self, event: dp_event.DpEvent, delta: float) -> float:
        return epsilon(
            event,
            delta,
            relation=self.rel,
            backend=self.backend,
            orders=self.grid,
            pld_discretization=self.disc,
        )


def _check_prior(
    prior: dp_event.DpEvent | None, target: float, delta: float, search: _Search
) -> None:
    """Refuse a ``prior`` that already spends the whole target on its own."""
    if prior is None:
        return
    spent = search.epsilon(prior, delta)
    if spent >= target:
        raise AccountingError(
            f"the prior event alone has epsilon = {spent:.4g} >= the target {target:g} at "
            f"delta {delta:g}: nothing is left for the steps"
        )


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    steps: int,
    *,
    sampling: Sampling = "poisson",
    sampling_probability: float = 1.0,
    dataset_size: int | None = None,
    sample_size: int | None = None,
    relation: NeighbourRelation = NeighbourRelation.ADD_REMOVE,
    backend: Backend = "rdp",
    tolerance: float = 1e-4,
    orders: Sequence[float] | None = None,
    pld_discretization: float = 1e-4,
    prior: dp_event.DpEvent | None = None,
) -> float:
    """Smallest noise multiplier whose `steps`-fold (sub)sampled Gaussian meets the target.

    ``prior``: an event released before these steps (for example a data filter's rounds).
    The target (ε, δ) is then the total of ``prior`` composed with the steps, so the steps
    get whatever budget the accountant's joint composition leaves, which is more than
    ε − ε(prior) whenever composition is sub-additive (PLD, RDP).

    Keeps a bracket [lo, hi] with epsilon(lo) > target >= epsilon(hi) (epsilon is
    non-increasing in the noise), expanded geometrically from 1, and shrinks it until
    hi / lo <= 1 + `tolerance` (relative tolerance on z). Steps are secant (Illinois) steps
    in (log z, log epsilon), where epsilon is nearly linear, with bisection whenever the
    bracket fails to halve in two steps; the bracket guarantees of bisection are kept.
    Returns hi, so the result always meets the target (safe side) and z / (1 + tolerance)
    does not. Exception: noise below a floor is not searched (1e-6 for RDP; 0.2 for PLD,
    whose loss grids explode for small noise): if the floor already meets the target, the
    floor is returned (safe, possibly more noise than needed; use RDP for such targets).
    """
    target = _check_target(target_epsilon)
    delta = _check_delta(delta)
    steps = _check_count(steps, "steps")
    if steps < 1:
        raise AccountingError("steps must be >= 1 to calibrate noise")
    tol = float(tolerance)
    if not (0 < tol < 1):
        raise AccountingError(f"tolerance must be in (0, 1); got {tolerance!r}")
    search = _Search.checked(relation, backend, orders, pld_discretization)
    make_event = functools.partial(
        sampled_gaussian_event,
        sampling=sampling,
        sampling_probability=sampling_probability,
        dataset_size=dataset_size,
        sample_size=sample_size,
    )
    # Validate the sampling arguments and backend support once, before searching.
    search.check_supported(_after(prior, make_event(1.0, steps)))
    _check_prior(prior, target, delta, search)

    def eps_at(z: float) -> float:
        return search.epsilon(_after(prior, make_event(z, steps)), delta)

    # Bracket expansion from z = 1 by factor 4 (the secant steps cope with wide brackets). A
    # PLD search starts at RDP's answer instead, by factor 1.5: a PLD far from the target is
    # huge (z = 1 at q = 1, T = 10⁴ does not fit in memory), and RDP's z is within tens of
    # percent of the PLD's (RDP's ε bounds the PLD's from above).
    z, factor = 1.0, 4.0
    if backend == "pld":
        start = _rdp_start(
            search,
            target_epsilon=target,
            delta=delta,
            steps=steps,
            sampling=sampling,
            sampling_probability=sampling_probability,
            dataset_size=dataset_size,
            sample_size=sample_size,
            prior=prior,
        )
        if start is not None:
            z, factor = start, 1.5
    e = eps_at(z)
    if e <= target:
        floor = _MIN_NOISE[backend]
        hi, e_hi = z, e
        lo = max(z / factor, floor)
        e_lo = eps_at(lo)
        while e_lo <= target:
            hi, e_hi = lo, e_lo
            if lo <= floor:
                return hi  # the target holds even at the search floor: safe, maybe not minimal
            lo = max(lo / factor, floor)
            e_lo = eps_at(lo)
    else:
        lo, e_lo = z, e
        hi, e_hi = factor * z, eps_at(factor * z)
        while e_hi > target:
            lo, e_lo = hi, e_hi
            if hi > _MAX_NOISE:
                raise AccountingError(
                    f"target epsilon {target:g} at delta {delta:g} is not reached even with "
                    f"noise multiplier {hi:g} (epsilon = {e_hi:g}); the target is unreachable"
                )
            hi, e_hi = factor * hi, eps_at(factor * hi)

    # Refine in x = log z: g = log(eps / target), g(x_lo) > 0 >= g(x_hi).
    width_tol = math.log1p(tol)
    x_lo, x_hi = math.log(lo), math.log(hi)
    g_lo, g_hi = _log_gap(e_lo, target), _log_gap(e_hi, target)
    widths: list[float] = []
    last_side = ""
    while x_hi - x_lo > width_tol:
        width = x_hi - x_lo
        x = _interpolate(x_hi, g_hi, x_lo, g_lo)
        if x is None or (len(widths) >= 2 and width > 0.5 * widths[-2]):
            x = 0.5 * (x_lo + x_hi)
        guard = min(0.4 * width_tol, 0.25 * width)  # stay inside: the bracket must shrink
        x = min(max(x, x_lo + guard), x_hi - guard)
        gx = _log_gap(eps_at(math.exp(x)), target)
        side = "hi" if gx <= 0 else "lo"
        if side == "hi":
            x_hi, g_hi = x, gx
            if last_side == "hi":
                g_lo *= 0.5  # Illinois: the retained end's value is halved
        else:
            x_lo, g_lo = x, gx
            if last_side == "lo":
                g_hi *= 0.5
        last_side = side
        widths.append(width)
    return math.exp(x_hi)


def _rdp_start(search: _Search, **kwargs: object) -> float | None:
    """RDP's calibrated z (to 1%) for the same event and target, where a PLD search starts;
    None when RDP cannot account the event or reach the target (the search starts at 1)."""
    try:
        z = calibrate_noise_multiplier(
            **kwargs, relation=search.rel, backend="rdp", orders=search.grid, tolerance=1e-2
        )
    except AccountingError:
        return None
    return max(z, _MIN_NOISE["pld"])


def max_steps(
    noise_multiplier: float,
    target_epsilon: float,
    delta: float,
    *,
    sampling: Sampling = "poisson",
    sampling_probability: float = 1.0,
    dataset_size: int | None = None,
    sample_size: int | None = None,
    relation: NeighbourRelation = NeighbourRelation.ADD_REMOVE,
    backend: Backend = "rdp",
    upper: int = 10**7,
    orders: Sequence[float] | None = None,
    pld_discretization: float = 1e-4,
    prior: dp_event.DpEvent | None = None,
) -> int:
    """Largest step count whose epsilon stays within target (0 if even one step exceeds it).
    With ``prior``, the target is the total of ``prior`` composed with the steps (see
    `calibrate_noise_multiplier`).

    Exponential search (T = 1, 2, 4, ...) for a bracket, then a secant/bisection search on
    integers; the returned T satisfies epsilon(T) <= target < epsilon(T + 1) as computed by
    `epsilon`, unless it is `upper` (the search cap).
    """
    target = _check_target(target_epsilon)
    delta = _check_delta(delta)
    upper = _check_count(upper, "upper")
    if upper < 1:
        raise AccountingError("upper must be >= 1")
    search = _Search.checked(relation, backend, orders, pld_discretization)
    make_event = functools.partial(
        sampled_gaussian_event,
        noise_multiplier,
        sampling=sampling,
        sampling_probability=sampling_probability,
        dataset_size=dataset_size,
        sample_size=sample_size,
    )
    search.check_supported(_after(prior, make_event(1)))

    def eps_at(t: int) -> float:
        return search.epsilon(_after(prior, make_event(t)), delta)

    e1 = eps_at(1)
    if e1 > target:
        return 0
    ok, e_ok = 1, e1
    while True:
        t = min(2 * ok, upper)
        if t == ok:
            return upper
        e = eps_at(t)
        if e > target:
            bad, e_bad = t, e
            break
        ok, e_ok = t, e
    return _integer_search(eps_at, target, ok, e_ok, bad, e_bad)


def _integer_search(
    eps_at: Callable[[int], float], target: float, ok: int, e_ok: float, bad: int, e_bad: float
) -> int:
    """Largest integer T in [ok, bad) with eps_at(T) <= target, given eps_at(ok) <= target <
    eps_at(bad) and eps_at non-decreasing. Secant steps in (log T, log eps), Illinois
    weighting, bisection when the bracket fails to halve in two steps."""
    g_ok, g_bad = _log_gap(e_ok, target), _log_gap(e_bad, target)
    widths: list[int] = []
    last_side = ""
    while bad - ok > 1:
        width = bad - ok
        x = _interpolate(math.log(ok), g_ok, math.log(bad), g_bad)
        if x is None or (len(widths) >= 2 and width > widths[-2] // 2):
            t = (ok + bad) // 2
        else:
            t = round(math.exp(min(x, math.log(bad))))
        t = min(max(t, ok + 1), bad - 1)
        e = eps_at(t)
        if e <= target:
            ok, g_ok = t, _log_gap(e, target)
            if last_side == "ok":
                g_bad *= 0.5
            last_side = "ok"
        else:
            bad, g_bad = t, _log_gap(e, target)
            if last_side == "bad":
                g_ok *= 0.5
            last_side = "bad"
        widths.append(width)
    return ok


def zcdp_rho(event: dp_event.DpEvent) -> float | None:
    """Total zCDP rho of an event built only from Gaussian / ZCDp (composed) events, else None.

    Gaussian with noise multiplier z: rho = 1 / (2 z^2) per step (Bun & Steinke 2016,
    Prop. 1.6); zCDP composes additively. A `ZCDpEvent` with xi != 0 (approximate zCDP) and
    any other event give None: their rho alone would not describe them.
    """

    def visit(ev: dp_event.DpEvent) -> float | None:
        if isinstance(ev, dp_event.NoOpDpEvent):
            return 0.0
        if isinstance(ev, dp_event.GaussianDpEvent):
            z = float(ev.noise_multiplier)
            return math.inf if z == 0 else 1.0 / (2.0 * z * z)
        if isinstance(ev, dp_event.ZCDpEvent):
            return float(ev.rho) if float(ev.xi) == 0 else None
        if isinstance(ev, dp_event.SelfComposedDpEvent):
            inner = visit(ev.event)
            count = _check_count(ev.count, "SelfComposedDpEvent.count")
            return None if inner is None else (0.0 if count == 0 else count * inner)
        if isinstance(ev, dp_event.ComposedDpEvent):
            total = 0.0
            for sub in ev.events:
                r = visit(sub)
                if r is None:
                    return None
                total += r
            return total
        return None

    return visit(event)


def describe_backend(
    backend: Backend = "rdp",
    orders: Sequence[float] | None = None,
    pld_discretization: float = 1e-4,
) -> str:
    """One line naming the accountant for reports, e.g.
    "RDP (dp-accounting 0.6.0, 286 orders 1.01–1024)"."""
    backend = _check_backend(backend)
    version = importlib.metadata.version("dp-accounting")
    if backend == "rdp":
        grid = _check_orders(orders)
        return f"RDP (dp-accounting {version}, {len(grid)} orders {min(grid):g}–{max(grid):g})"
    disc = _check_discretization(pld_discretization)
    return f"PLD (dp-accounting {version}, pessimistic, discretisation {disc:g})"


class Accountant:
    """Stateful composition: `compose(event, count)` then `epsilon(delta)`.

    A thin wrapper over `epsilon` / `zcdp_rho`: it keeps the composed `DpEvent` (so a report
    can store exactly what was accounted) and re-accounts it on demand.
    """

    def __init__(
        self,
        relation: NeighbourRelation = NeighbourRelation.ADD_REMOVE,
        backend: Backend = "rdp",
        *,
        orders: Sequence[float] | None = None,
        pld_discretization: float = 1e-4,
    ) -> None:
        self.relation = _relation(relation)
        self.backend: Backend = _check_backend(backend)
        self.orders = _check_orders(orders)
        self.pld_discretization = _check_discretization(pld_discretization)
        self._builder = dp_event_builder.DpEventBuilder()

    def compose(self, event: dp_event.DpEvent, count: int = 1) -> Accountant:
        """Add `count` runs of `event`; fails now (AccountingError) if the backend cannot
        account it, rather than at report time."""
        count = _check_count(count)
        if not isinstance(event, dp_event.DpEvent):
            raise AccountingError(f"expected a DpEvent; got {type(event).__name__}")
        check_supported(event, relation=self.relation, backend=self.backend)
        if count > 0:
            self._builder.compose(event, count)
        return self

    @property
    def event(self) -> dp_event.DpEvent:
        """Everything composed so far (a `NoOpDpEvent` if nothing)."""
        return self._builder.build()

    def epsilon(self, delta: float) -> float:
        """Epsilon at `delta` of everything composed so far."""
        return epsilon(
            self.event,
            delta,
            relation=self.relation,
            backend=self.backend,
            orders=self.orders,
            pld_discretization=self.pld_discretization,
        )

    @property
    def rho(self) -> float | None:
        """Total zCDP rho if every composed event is Gaussian / zCDP, else None."""
        return zcdp_rho(self.event)

    def describe(self) -> str:
        """The backend line for reports."""
        return describe_backend(self.backend, self.orders, self.pld_discretization)
