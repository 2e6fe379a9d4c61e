"""Registry of dataset recipes for `privrl data collect --recipe NAME`.

A recipe builds one dataset (and whatever it needs first: trained agents, checkpoints, experts)
into a data directory, resumably: every stage writes its output atomically and a rerun skips the
stages whose output exists. The recipe's name and parameters are stored in the dataset's
metadata (`extra["recipe"]`). Modules are imported lazily so `privrl --help` stays fast.

A recipe function has the signature
``build(data_dir: Path, *, seed: int, quick: bool, progress: bool) -> Path`` and returns the
path of the dataset file it wrote. ``quick`` builds a small version (for tests and smoke runs)
into a separate file so it never overwrites the full one.

A build holds an exclusive lock on its stage directory (`build_lock`), so two builds of the
same recipe never interleave. Under the lock, every hidden temporary that an atomic writer of
the recipe left behind (a build killed by SIGKILL or a power cut never reaches its cleanup) is
stale, and `remove_stale_temps` deletes them when a build starts (resumes) and when it ends:
a killed build once left a 105 MB ``.primorl-pendulum.h5.*.tmp`` next to the finished dataset.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Recipe:
    name: str
    what: str
    target: str  # "module:function"

    def load(self) -> Callable[..., Path]:
        module, func = self.target.split(":")
        return getattr(importlib.import_module(module), func)


RECIPES: dict[str, Recipe] = {}


def register(recipe: Recipe) -> None:
    RECIPES[recipe.name] = recipe


for _r in (
    Recipe(
        "primorl-pendulum",
        "PRIMORL Pendulum: 30,000 replay-style trajectories (random to expert) of 200 steps",
        "privrl.experiments.recipes_primorl:pendulum",
    ),
    Recipe(
        "primorl-balance",
        "PRIMORL cartpole balance (dm_control): 30,000 replay-style trajectories of 1000 steps",
        "privrl.experiments.recipes_primorl:balance",
    ),
    Recipe(
        "primorl-swingup",
        "PRIMORL cartpole swingup (dm_control): 30,000 replay-style trajectories of 1000 steps",
        "privrl.experiments.recipes_primorl:swingup",
    ),
    Recipe(
        "primorl-halfcheetah",
        "PRIMORL HalfCheetah: ~2,000 medium-expert-style trajectories of 1000 steps",
        "privrl.experiments.recipes_primorl:halfcheetah",
    ),
    Recipe(
        "experts-cartpole",
        "Expert-level DP: 3000 CartPole experts (perturbed physics) x 20 trajectories",
        "privrl.experiments.recipes_expert:cartpole",
    ),
    Recipe(
        "experts-acrobot",
        "Expert-level DP: 3000 Acrobot experts (perturbed physics) x 20 trajectories",
        "privrl.experiments.recipes_expert:acrobot",
    ),
    Recipe(
        "experts-lunarlander",
        "Expert-level DP: 3000 LunarLander experts (perturbed physics) x 20 trajectories",
        "privrl.experiments.recipes_expert:lunarlander",
    ),
    Recipe(
        "experts-hiv",
        "Expert-level DP: 3000 HIV-treatment experts (perturbed model) x 20 trajectories",
        "privrl.experiments.recipes_expert:hiv",
    ),
):
    register(_r)


def default_data_dir() -> Path:
    """`$PRIVRL_CACHE/data` (default `~/.cache/privrl/data`)."""
    from privrl.data.paths import data_dir

    return data_dir()


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
    from privrl.experiments.checks import InputError

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


def _copy_atomically(path: Path, target: Path) -> None:
    """Copy so that an interrupted copy never leaves a partial dataset at `target`."""
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        shutil.copyfile(path, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_recipe(
    name: str,
    data_dir: Path | None = None,
    *,
    seed: int = 0,
    quick: bool = False,
    out: Path | None = None,
    progress: bool = True,
) -> Path:
    """Build (or resume) the dataset of recipe `name` in `data_dir` (default
    `default_data_dir()`), copied to `out` if given; returns the dataset's path."""
    from privrl.experiments.checks import InputError

    if name not in RECIPES:
        raise InputError(f"unknown recipe {name!r}; available: {', '.join(RECIPES)}")
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    check_data_dir(root)
    path = RECIPES[name].load()(root, seed=seed, quick=quick, progress=progress)
    if out is not None and Path(out).resolve() != Path(path).resolve():
        _copy_atomically(path, Path(out))
        path = Path(out)
    return path
