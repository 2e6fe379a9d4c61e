"""One safe way to read a user's array and checkpoint files (.npy, .npz, .pt).

Every file a user hands privrl (a policy.npz, a .npy table, a learner.pt, a bounds archive) is
read here, so that a damaged file — truncated by a copy, a full disk or a killed writer, or not
the format its name says — is one `UnreadableFileError` naming the file, not whatever numpy,
zipfile, zlib or torch happens to raise (a `BadZipFile`, an `EOFError`, a `RuntimeError` from
torch's zip reader), which the command line would report as a bug.

An .npz archive is read eagerly (every member at once): its members are decompressed lazily by
numpy, so a truncated member would otherwise fail later, far from the file's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

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
