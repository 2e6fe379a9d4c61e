"""Console conventions of the command line, kept out of the CLI modules so that any entry
point (the `privrl` CLI, a script) can share them.

- `CliError`: bad input found by the command line itself (one `error:` line, exit code 2).
- `one_line`: a message on one line (no newlines, single spaces).
- `os_error`: one line for an operating-system error on a user's path.
- `console_conventions`: warnings (and dp-accounting's absl log warnings) as one `warning: …`
  line each, without Python source lines, and SIGTERM raised as `Terminated` (a
  KeyboardInterrupt), so every `finally` runs before the process exits.
- `kept_message`: what an interrupted command kept, for its `error:` line: the files in its
  output (`note_output`, else its `--out`), named, never read (nothing derived from data).
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
from pathlib import Path
from typing import Any


class CliError(Exception):
    """Bad input found by the CLI itself; the message names the problem and the fix."""


def one_line(message: object) -> str:
    return " ".join(str(message).split())


LEDGER_HINT = (
    "`privrl ledger show DATASET` lists the privacy spends (a private run reserves its spend "
    "before it reads the data; an interrupted run publishes nothing and its reservation stays "
    "counted until `privrl ledger settle` settles it)"
)
_SHOWN = 6  # file names listed before "and N more"
# The state files a resumable run continues from (MOPO's and PRIMORL's stage checkpoints, a
# run layer `checkpoint/` directory); their presence is what "rerun to resume" rests on.
RESUME_STATE = ("checkpoint.pt", "dynamics.pt", "fedavg_state.pt", "checkpoint/")
_OUTPUTS: list[Path] = []


def note_output(path: str | Path) -> None:
    """Record the run directory (or file) the current command writes, so that an interruption
    can say what it kept (commands whose output is not a plain `--out` flag call this)."""
    _OUTPUTS.append(Path(path))


def forget_outputs() -> None:
    _OUTPUTS.clear()


def _out_flag(argv: list[str]) -> Path | None:
    for i, arg in enumerate(argv):
        if arg in ("--out", "-o") and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--out="):
            return Path(arg.split("=", 1)[1])
    return None


def _cells(path: Path) -> str:
    """'k of n sweep cells finished' from the cells' published status files."""
    import json

    cells = [p for p in (path / "cells").iterdir() if p.is_dir()]
    done = 0
    for cell in cells:
        try:
            done += json.loads((cell / "cell.json").read_text()).get("status") == "ok"
        except (OSError, ValueError, AttributeError):
            pass
    return f"{done} of {len(cells)} sweep cells finished (rerun the same command for the rest)"


def what_was_kept(path: Path | None) -> str:
    """What `path` (a command's output) holds now, by file names only."""
    if path is None:
        return "this command has no --out whose files could be listed"
    if not path.exists():
        return f"nothing ({path} was not created)"
    if not path.is_dir():
        return f"the file {path}"
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
    names = [n for n in names if not n.startswith(".")]
    if not names:
        return f"nothing ({path} is empty)"
    parts = [
        ", ".join(names[:_SHOWN])
        + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
    ]
    if "cells/" in names:
        parts.append(_cells(path))
    if any(n in RESUME_STATE for n in names):
        parts.append("a checkpoint: rerun the same command to resume from it")
    if {"privacy.json", "metrics.json"} <= set(names):
        parts.append("its run files are those of a finished run")
    return f"in {path}: " + "; ".join(parts)


def kept_message(argv: list[str]) -> str:
    """'what was kept: …' for the `error:` line of an interrupted command (`argv`)."""
    path = _OUTPUTS[-1] if _OUTPUTS else _out_flag(argv)
    text = f"what was kept: {what_was_kept(path)}"
    if "--data" in argv or (argv and argv[0] in ("run", "sweep")):
        text += f"; {LEDGER_HINT}"
    return text


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
