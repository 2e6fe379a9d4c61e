"""What every recipe build shares: the build lock and the clean-up of an interrupted build's
temporaries, atomic writes, stage fingerprints, per-stage seed streams, and console output
(a message, a progress bar) that is silent unless ``progress`` is on."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np


class RecipeBusyError(ValueError):
    """Another process is building the same recipe into the same directory."""


_LOCK_NAME = ".build.lock"


@contextmanager
def build_lock(stage_dir: Path, name: str) -> Iterator[None]:
    """Hold an exclusive, non-blocking lock on `stage_dir` (created if needed) for a build.

    The lock is an `flock` on ``stage_dir/.build.lock``: the kernel releases it when the
    process dies, however it dies, so a killed build never blocks the next one.
    """
    stage_dir = Path(stage_dir)
    stage_dir.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock (and no temp cleanup)
        yield
        return
    fh = open(stage_dir / _LOCK_NAME, "a+")  # held (and locked) for the whole build
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RecipeBusyError(
                f"another build of {name} is running in {stage_dir}; wait for it to finish "
                "(its dataset is then reused) or build into another --data-dir"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    finally:
        fh.close()


def _is_temp(path: Path) -> bool:
    """A temporary of an atomic writer: ``.<name>.<random>.tmp`` (tempfile.mkstemp) or a
    hidden ``.<name>.<random>`` directory (tempfile.mkdtemp, e.g. expert sets)."""
    name = path.name
    if not name.startswith(".") or name == _LOCK_NAME:
        return False
    if path.is_dir():
        return name.count(".") >= 2
    return name.endswith(".tmp")


def remove_stale_temps(directory: Path, *, prefix: str = "", recursive: bool = True) -> list[Path]:
    """Delete the temporaries atomic writers left in `directory` (and below, if `recursive`)
    whose names start with `prefix`; returns what was removed.

    Call only while holding `build_lock` for the build that owns `directory`: then no live
    writer can own them.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed: list[Path] = []
    candidates = directory.rglob(".*") if recursive else directory.glob(".*")
    for path in sorted(candidates, key=lambda p: len(p.parts)):
        if not path.name.startswith(prefix or ".") or not _is_temp(path):
            continue
        if any(parent in removed for parent in path.parents):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
        removed.append(path)
    return removed


def check_data_dir(root: Path) -> None:
    """--data-dir must be a writable directory (created if new), checked before any work."""
    from privrl.privacy.limits import InputError

    for parent in [root, *root.parents]:
        if parent.exists() and not parent.is_dir():
            where = "is a file" if parent == root else f"is inside the file {parent}"
            raise InputError(f"--data-dir {root} {where}; give a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"--data-dir {root} cannot be created ({exc.strerror or type(exc).__name__}); "
            "choose a writable directory"
        ) from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise InputError(f"--data-dir {root} is not writable; choose a writable directory")


def copy_atomically(path: Path, target: Path) -> None:
    """Copy so that an interrupted copy never leaves a partial dataset at `target`."""
    atomic_write(target, lambda tmp: shutil.copyfile(path, tmp))


def remove_stale(stage_dir: Path, out_path: Path, progress: bool) -> None:
    """Temporaries of an earlier, killed build in its stage directory and next to its dataset
    (under the build lock, none is live)."""
    gone = remove_stale_temps(stage_dir)
    gone += remove_stale_temps(out_path.parent, prefix=f".{out_path.name}.", recursive=False)
    if gone:
        log(progress, f"removed {len(gone)} stale temporary file(s) of an interrupted build")


def locked_build(
    name: str, stage_dir: Path, out_path: Path, progress: bool, build: Callable[[], Path]
) -> Path:
    """``build()`` under the build lock of ``stage_dir``, with an interrupted build's
    temporaries removed before and after; ``out_path`` at once when it exists."""
    with build_lock(stage_dir, name):
        remove_stale(stage_dir, out_path, progress)
        if out_path.is_file():
            log(progress, f"{out_path} exists; nothing to do")
            return out_path
        path = build()
        remove_stale(stage_dir, out_path, progress)
        return path


def build_stem(name: str, seed: int, quick: bool) -> str:
    """A build's file and stage-directory stem: ``<recipe>[-quick][-seed<S>]``."""
    return name + ("-quick" if quick else "") + (f"-seed{seed}" if seed != 0 else "")


def stage_fingerprint(obj: Any) -> str:
    """The fingerprint of a stage's inputs and of the numerics it runs with (a stage output is
    reused when it matches; `numerics.tag`: one built on another instruction set is not)."""
    from privrl.runs.recipes.numerics import tag

    key = json.dumps([tag(), obj], sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def seed_seq(seed: int, *key: int) -> np.random.SeedSequence:
    """The stage ``key``'s own stream of the build seed (resumed stages draw the same)."""
    return np.random.SeedSequence(entropy=int(seed), spawn_key=tuple(int(k) for k in key))


def stage_rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(seed_seq(seed, *key))


def int_seed(ss: np.random.SeedSequence) -> int:
    return int(ss.generate_state(1, dtype=np.uint32)[0])


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """``write`` a temporary next to ``path``, then rename it: ``path`` is whole or absent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(obj: Any, path: Path, *, allow_nan: bool = True) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=2, allow_nan=allow_nan)))


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def log(enabled: bool, message: str) -> None:
    if enabled:
        from rich.console import Console

        Console(stderr=True).print(message, highlight=False)


class Bar:
    """A progress bar's handle (a no-op when progress is off)."""

    def __init__(self, progress: Any, task: Any) -> None:
        self.progress, self.task = progress, task

    def advance(self, k: int = 1) -> None:
        if self.progress is not None:
            self.progress.advance(self.task, k)


@contextmanager
def progress_bar(
    enabled: bool, total: int, label: str, *, transient: bool = False
) -> Iterator[Bar]:
    if not enabled:
        yield Bar(None, None)
        return
    from privrl.runs.progress import rich_progress

    with rich_progress("{task.description}", transient=transient) as p:
        yield Bar(p, p.add_task(label, total=total))
