"""Checks of public input (flags, paths, the machine's memory), shared by the command line and
the run layer, so that bad input is refused before any work starts (and before a dataset's first
byte is read). A refusal is an `InputError` (a ValueError) whose message names the problem and
the fix; the messages name the command-line flag the value came from.

The checks are about public input only: none of them looks at private data, so a refusal never
depends on it.

Caps (documented in `privrl <command> --help` where they apply):

- ε flags are in [`MIN_EPSILON`, `MAX_EPSILON`] = [1e-6, 100] and δ flags in (0, 1): the one
  range of `privrl.privacy.limits`, which config files, sweep cells, audits and ledgers use too.
- Sizes (episodes, steps, horizons, states) must fit in this machine's memory: each command
  states its bytes per unit, and `check_memory` refuses a size whose estimate exceeds the
  memory the process may use (physical RAM or the cgroup limit, whichever is smaller),
  naming the largest size that fits.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from privrl.privacy.limits import (  # noqa: F401  (MAX/MIN_EPSILON: imported from here too)
    MAX_EPSILON,
    MIN_EPSILON,
    delta_problem,
    epsilon_problem,
)


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
    (`privrl.privacy.limits`), with the flag's name in the message."""
    problem = epsilon_problem(value)
    if problem is not None:
        raise InputError(f"{flag} {problem}".strip())
    return float(value)


def check_delta(value: float, flag: str = "--delta") -> float:
    """A δ in (0, 1) (`privrl.privacy.limits`)."""
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


# --------------------------------------------------------------------------------------------
# paths
# --------------------------------------------------------------------------------------------


def check_out_dir(path: str | Path, flag: str = "--out") -> Path:
    """A run directory that can be written (created empty if new), checked before any work:
    refuses an existing file, a path inside a file and an unwritable location."""
    from privrl.experiments.rundir import OutDirError
    from privrl.experiments.rundir import check_out_dir as _check

    try:
        return _check(path)
    except OutDirError as exc:
        raise InputError(str(exc).replace("--out", flag, 1)) from None


def check_output_file(path: str | Path, flag: str = "--out") -> Path:
    """A file the command will write (created or replaced), checked before any work: not a
    directory, not inside a file, in a directory that exists or can be created and is
    writable."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{flag} {path} is a directory; give a file path (e.g. {path}/data.h5)")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise InputError(
                f"{flag} {path} is inside the file {parent}; give a path in a directory"
            )
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(
            f"{flag} {path}: cannot create its directory {parent} ({reason}); choose a "
            "writable location"
        ) from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(
            f"{flag} {path}: the directory {parent} is not writable; choose a writable location"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"{flag} {path} exists and is not writable; choose another file")
    return path


def check_input_file(path: str | Path, flag: str = "", *, what: str = "file") -> Path:
    """An existing, readable, non-empty regular file (`flag` names the option, if any)."""
    path = Path(path)
    lead = f"{flag}: " if flag else ""
    if not path.exists():
        raise InputError(f"{lead}{what} not found: {path}")
    if path.is_dir():
        raise InputError(f"{lead}{path} is a directory, not a {what}; give the file's path")
    if not os.access(path, os.R_OK):
        raise InputError(f"{lead}{path} is not readable (permission denied); check its mode")
    if path.stat().st_size == 0:
        raise InputError(f"{lead}{path} is empty (0 bytes); re-create or re-import it")
    return path
