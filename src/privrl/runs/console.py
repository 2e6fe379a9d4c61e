"""Console conventions of the command line, kept out of the CLI modules so that any entry
point (the `privrl` CLI, a script) can share them.

- `one_line`: a message on one line (no newlines, single spaces).
- `os_error`: one line for an operating-system error on a user's path.
- `console_conventions`: warnings (and dp-accounting's absl log warnings) as one `warning: …`
  line each, without Python source lines, and SIGTERM raised as `Terminated` (a
  KeyboardInterrupt), so every `finally` runs before the process exits.
- `INTERRUPTED`: what an interrupted run kept, for its `error:` line.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def one_line(message: object) -> str:
    return " ".join(str(message).split())


INTERRUPTED = (
    "what was kept: files already written (finished stages, checkpoints, earlier runs); "
    "resumable runs (data collect --recipe, train mopo, reproduce) resume from their checkpoint "
    "when rerun with the same arguments; `privrl ledger show DATASET` lists the privacy spends "
    "(a private run reserves its spend before it reads the data; an interrupted run publishes "
    "nothing and its reservation stays counted until `privrl ledger settle` settles it)"
)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every `finally` (temporary files, progress bars)
    runs before the process exits."""


def os_error(exc: OSError) -> str:
    """One line for an operating-system error on a user's path."""
    name = exc.filename if exc.filename is not None else ""
    if exc.filename2 is not None:
        name = f"{name} -> {exc.filename2}"
    if isinstance(exc, FileNotFoundError):
        return f"file not found: {name or exc}"
    if isinstance(exc, IsADirectoryError):
        return f"{name} is a directory where a file is expected; give a file path (or remove it)"
    if isinstance(exc, NotADirectoryError):
        return f"{name}: part of this path is a file, not a directory; fix the path"
    if isinstance(exc, PermissionError):
        return f"permission denied: {name}; check its mode or choose another location"
    if isinstance(exc, FileExistsError):
        return f"{name} already exists; choose another path or remove it"
    reason = exc.strerror or str(exc) or type(exc).__name__
    where = f" {name}" if name else ""
    return f"cannot read or write{where}: {reason}; check the path, its mode and the free space"


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """`warnings.showwarning` for the terminal: one line, no file path, no source line."""
    try:
        print(f"warning: {one_line(message)}", file=file or sys.stderr)
    except (OSError, ValueError):  # a closed stream: warnings are never fatal
        pass


class _WarningLine(logging.Handler):
    """Library log records at WARNING and above (e.g. dp-accounting's absl logger), printed
    like warnings, each kind once (dp-accounting logs one line per RDP order)."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self._seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        kind = re.sub(r"[-+]?\d[\d.e+-]*", "#", message)
        if kind in self._seen:
            return
        self._seen.add(kind)
        _show_warning(message, UserWarning, "", 0)


@contextmanager
def console_conventions() -> Iterator[None]:
    """Warnings as one line, SIGTERM as an interruption; both restored afterwards (main() is
    also called in-process by tests)."""
    saved_show = warnings.showwarning
    warnings.showwarning = _show_warning
    absl = logging.getLogger("absl")
    handler = _WarningLine(logging.WARNING)
    saved_propagate = absl.propagate
    absl.addHandler(handler)
    absl.propagate = False
    saved_term: Any = None
    main_pid = os.getpid()
    in_main_thread = threading.current_thread() is threading.main_thread()

    def on_term(signum: int, frame: Any) -> None:
        if os.getpid() != main_pid:  # a forked worker: die as it would without us
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated()

    if in_main_thread:
        saved_term = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        warnings.showwarning = saved_show
        absl.removeHandler(handler)
        absl.propagate = saved_propagate
        if in_main_thread:
            signal.signal(signal.SIGTERM, saved_term)
