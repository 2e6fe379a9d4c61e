"""Limits on public input: the range of a privacy budget, one for every way a budget enters
privrl, the shared checks of numbers and integers, and the memory a size may take.

A command-line flag (`--epsilon`), a key of a `privrl run` config file, a cell of a sweep grid,
an audit's claimed ε and a ledger's total budget are all checked by the functions below, so
that no path accepts a budget another path refuses:

- ε is finite and in [`MIN_EPSILON`, `MAX_EPSILON`] = [1e-6, 100]. Above 100 a guarantee says
  nothing (e^ε > 10^43) and the accountants' e^ε overflows; below 1e-6 the noise calibrations
  of the shuffle and tree mechanisms do not terminate in useful time and the noise would drown
  any signal.
- δ is finite and in the open interval (0, 1).

`epsilon_problem` and `delta_problem` return the problem as text (to be prefixed with the name
of the flag, config key or ledger field the value came from), or None when the value is in
range. `check_epsilon`, `check_delta`, `check_number` and `check_int` raise an `InputError` (a
ValueError) whose message names the flag the value came from, so that bad input is refused
before any work starts (and before a dataset's first byte is read).

Sizes (episodes, steps, horizons, states) must fit in this machine's memory: each command
states its bytes per unit, and `check_memory` refuses a size whose estimate exceeds the memory
the process may use (physical RAM or the cgroup limit, whichever is smaller), naming the
largest size that fits.

The checks look at public input only: none of them looks at private data, so a refusal never
depends on it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

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
            "(typically 0.1-10) or the command's non-private twin (--non-private, where the "
            "command has one)"
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


class InputError(ValueError):
    """Bad public input (a flag, a path, a size); the message names the problem and the fix."""


# --------------------------------------------------------------------------------------------
# numbers
# --------------------------------------------------------------------------------------------


def _bounds_text(gt: float | None, ge: float | None, lt: float | None, le: float | None) -> str:
    low = gt if gt is not None else ge
    high = lt if lt is not None else le
    if low is not None and high is not None:
        left = "(" if gt is not None else "["
        right = ")" if lt is not None else "]"
        return f"in {left}{low:g}, {high:g}{right}"
    if low is not None:
        return f"{'>' if gt is not None else '>='} {low:g}"
    if high is not None:
        return f"{'<' if lt is not None else '<='} {high:g}"
    return ""


def check_number(
    value: float,
    flag: str,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    hint: str = "",
) -> float:
    """`value` as a float if it is finite and within the given bounds, else an InputError that
    names the flag, the bounds and the value (nan and ±inf are always refused)."""
    v = float(value)
    ok = math.isfinite(v)
    ok = ok and (gt is None or v > gt) and (ge is None or v >= ge)
    ok = ok and (lt is None or v < lt) and (le is None or v <= le)
    if not ok:
        bounds = _bounds_text(gt, ge, lt, le)
        what = f"a finite number {bounds}" if bounds else "a finite number"
        raise InputError(f"{flag} must be {what}, got {value!r}" + (f"; {hint}" if hint else ""))
    return v


def check_epsilon(value: float, flag: str = "--epsilon") -> float:
    """A privacy budget ε in [MIN_EPSILON, MAX_EPSILON]: the library's one range
    (`epsilon_problem`), with the flag's name in the message."""
    problem = epsilon_problem(value)
    if problem is not None:
        raise InputError(f"{flag} {problem}".strip())
    return float(value)


def check_delta(value: float, flag: str = "--delta") -> float:
    """A δ in (0, 1) (`delta_problem`), with the flag's name in the message."""
    problem = delta_problem(value)
    if problem is not None:
        raise InputError(f"{flag} {problem}".strip())
    return float(value)


def check_int(
    value: int, flag: str, *, minimum: int | None = 1, maximum: int | None = None, why: str = ""
) -> int:
    """An integer flag within [minimum, maximum]."""
    v = int(value)
    if minimum is not None and v < minimum:
        raise InputError(f"{flag} must be >= {minimum}, got {value}")
    if maximum is not None and v > maximum:
        reason = f" ({why})" if why else ""
        raise InputError(f"{flag} must be at most {maximum}{reason}, got {value}")
    return v


# --------------------------------------------------------------------------------------------
# sizes vs memory
# --------------------------------------------------------------------------------------------


def machine_memory() -> int:
    """Bytes this process may use: physical RAM, or the cgroup memory limit if smaller."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        total = 1 << 40
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return int(total)


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"  # pragma: no cover


def check_memory(
    flag: str,
    value: int,
    bytes_each: float,
    *,
    fixed_bytes: float = 0.0,
    what: str = "",
) -> int:
    """Refuse `flag value` up front when its memory estimate `fixed_bytes + value * bytes_each`
    exceeds what this machine can hold; the message gives the estimate and the largest value
    that fits. `what` names the unit ("episode", "step") for the message."""
    value = int(value)
    available = machine_memory()
    need = fixed_bytes + value * bytes_each
    if need <= available:
        return value
    largest = max(0, int((available - fixed_bytes) // bytes_each)) if bytes_each > 0 else 0
    per = f" (~{format_bytes(bytes_each)} per {what})" if what else ""
    fix = f"use at most {flag} {largest}" if largest >= 1 else "reduce the other sizes"
    raise InputError(
        f"{flag} {value} needs about {format_bytes(need)} of memory{per}, more than this "
        f"machine's {format_bytes(available)}; {fix}"
    )
