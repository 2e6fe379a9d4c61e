"""The range of a privacy budget, one for every way a budget enters privrl.

A command-line flag (`--epsilon`), a key of a `privrl run` config file, a cell of a sweep grid,
an audit's claimed ε and a ledger's total budget are all checked by the functions below, so
that no path accepts a budget another path refuses:

- ε is finite and in [`MIN_EPSILON`, `MAX_EPSILON`] = [1e-6, 100]. Above 100 a guarantee says
  nothing (e^ε > 10^43) and the accountants' e^ε overflows; below 1e-6 the noise calibrations
  of the shuffle and tree mechanisms do not terminate in useful time and the noise would drown
  any signal.
- δ is finite and in the open interval (0, 1).

Each function returns the problem as text (to be prefixed with the name of the flag, config
key or ledger field the value came from), or None when the value is in range. The checks look
at public input only.
"""

from __future__ import annotations

import math

MAX_EPSILON = 100.0
MIN_EPSILON = 1e-6


def _as_float(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def epsilon_problem(value: object) -> str | None:
    """Why `value` is not a usable ε (see the module docstring), or None if it is."""
    v = _as_float(value)
    if v is None or not math.isfinite(v) or v <= 0:
        return f"must be a finite number > 0, got {value!r}"
    if v > MAX_EPSILON:
        return (
            f"must be at most {MAX_EPSILON:g}, got {value!r}: an ε that large guarantees "
            "nothing (e^ε > 10^43) and overflows the accountants; use a meaningful budget "
            "(typically 0.1-10) or the command's non-private twin"
        )
    if v < MIN_EPSILON:
        return (
            f"must be at least {MIN_EPSILON:g}, got {value!r}: the noise for a budget that "
            "small cannot be calibrated in useful time and would drown any signal"
        )
    return None


def delta_problem(value: object) -> str | None:
    """Why `value` is not a usable δ (finite, in (0, 1)), or None if it is."""
    v = _as_float(value)
    if v is None or not (math.isfinite(v) and 0.0 < v < 1.0):
        return f"must be a finite number in (0, 1), got {value!r}; e.g. 1e-5"
    return None
