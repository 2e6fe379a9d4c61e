"""Input validation of the accounting facade: values whose arithmetic overflows float64 are
refused with an AccountingError (a bad-input error the CLI prints as one line) instead of an
OverflowError deep inside dp-accounting."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event

from privrl.privacy import accounting as acc
from privrl.privacy.events import ApproxDpEvent, PureDpEvent


@pytest.mark.parametrize("backend", ["rdp", "pld"])
def test_event_epsilon_beyond_float_range_is_refused(backend: str) -> None:
    for event in (PureDpEvent(1e300), ApproxDpEvent(800.0, 1e-9)):
        with pytest.raises(acc.AccountingError, match="<= 700"):
            acc.epsilon(dp_event.SelfComposedDpEvent(event, 3), 1e-5, backend=backend)
    # the largest accepted value still accounts (basic composition: 3 × 700)
    eps = acc.epsilon(dp_event.SelfComposedDpEvent(PureDpEvent(700.0), 3), 1e-5, backend=backend)
    assert eps == pytest.approx(2100.0, rel=1e-3)


def test_advanced_composition_epsilon_limit() -> None:
    with pytest.raises(acc.AccountingError, match="epsilon0"):
        acc.advanced_composition(1e300, 0.0, 10, 1e-6)
    eps, _ = acc.advanced_composition(700.0, 0.0, 2, 1e-6)
    assert math.isinf(eps) or eps > 1400  # e^700 (e^ε − 1) term: a valid, useless bound


def test_noise_multiplier_whose_square_overflows_is_refused() -> None:
    with pytest.raises(acc.AccountingError, match="noise_multiplier"):
        acc.sampled_gaussian_event(1e300, 10)
    # z = 1e150: its square is a float64 and ε is 0 to float precision
    assert acc.epsilon(acc.sampled_gaussian_event(1e150, 10), 1e-5) == 0.0
