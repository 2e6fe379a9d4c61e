"""One safe way to read a user's array and checkpoint files (.npy, .npz, .pt).

Every file a user hands privrl (a policy.npz, a .npy table, a learner.pt, a bounds archive) is
read here, so that a damaged file — truncated by a copy, a full disk or a killed writer, or not
the format its name says — is one `UnreadableFileError` naming the file, not whatever numpy,
zipfile, zlib or torch happens to raise (a `BadZipFile`, an `EOFError`, a `RuntimeError` from
torch's zip reader), which the command line would report as a bug.

An .npz archive is read eagerly (every member at once): its members are decompressed lazily by
numpy, so a truncated member would otherwise fail later, far from the file's name.

`check_input_file` and `check_output_file` check a path a command reads or writes before any
work starts; their refusal is an `InputError` naming where the path came from (`flag`: a
parameter as `` `out` ``, which the command line writes as its flag, or a flag itself).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from privrl.privacy.limits import InputError

# What parsing a damaged or mislabelled file can raise is open-ended (OSError, ValueError,
# EOFError, zipfile.BadZipFile, zlib.error, tokenize.TokenError and SyntaxError from numpy's
# header parser, RuntimeError and pickle errors from torch, ...). Each reader below wraps only
# the parse of the user's bytes, so whatever it raises is a property of the file, not a bug.
_READ_ERRORS: tuple[type[BaseException], ...] = (Exception,)


class UnreadableFileError(ValueError):
    """A user's file cannot be read as the format it should have; the message names it."""


def _fail(path: Path, what: str, kind: str, exc: BaseException) -> UnreadableFileError:
    lead = f"{what} {path}" if what else str(path)
    reason = str(exc).strip() or type(exc).__name__
    return UnreadableFileError(
        f"{lead}: cannot read it as {kind} (truncated, damaged or another format: "
        f"{type(exc).__name__}: {reason})"
    )


def _existing(path: str | Path, what: str) -> Path:
    path = Path(path)
    lead = f"{what} " if what else ""
    if not path.is_file():
        raise UnreadableFileError(f"{lead}{path}: no such file")
    return path


def read_npy(path: str | Path, what: str = "") -> np.ndarray:
    """The array in a .npy file (no pickles); `what` names the option or role in messages."""
    path = _existing(path, what)
    try:
        array = np.load(path, allow_pickle=False)
    except _READ_ERRORS as exc:
        raise _fail(path, what, "a .npy array", exc) from None
    if not isinstance(array, np.ndarray):  # an .npz given where a .npy is expected
        if hasattr(array, "close"):
            array.close()
        raise UnreadableFileError(
            f"{f'{what} ' if what else ''}{path}: is an .npz archive, not a .npy array"
        )
    return array


def read_npz(path: str | Path, what: str = "") -> dict[str, np.ndarray]:
    """Every member of an .npz archive (no pickles), read at once; `what` as for `read_npy`."""
    path = _existing(path, what)
    try:
        with np.load(path, allow_pickle=False) as archive:
            if not hasattr(archive, "files"):
                raise ValueError("a .npy array, not an .npz archive")
            return {name: archive[name] for name in archive.files}
    except _READ_ERRORS as exc:
        raise _fail(path, what, "an .npz archive", exc) from None


def read_torch(path: str | Path, what: str = "", *, weights_only: bool = True) -> Any:
    """A torch checkpoint on the CPU; `weights_only=False` only for privrl's own formats that
    need it (it unpickles arbitrary objects)."""
    import torch

    path = _existing(path, what)
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only)
    except _READ_ERRORS as exc:
        raise _fail(path, what, "a torch checkpoint", exc) from None


def check_output_file(path: str | Path, flag: str = "`out`") -> Path:
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
