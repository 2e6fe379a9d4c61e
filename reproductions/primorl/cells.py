"""Committed sweep state: results of a long sweep that accumulate across sittings.

A sweep's cells live in the cache (`sweeps.sweep_dir`), which a machine may not keep. This
module copies what a later sitting needs into a committed directory (e.g.
``docs/reproductions/primorl-table1/cells/``) and back:

- per finished cell: its record (``cell.json``, the run's config.json, metrics.json,
  privacy.json, its evaluation curve metrics.csv) and, when small, the released model (what
  it committed while running to resume from is removed);
- per running cell: its record, its DP-FedAvg checkpoint made public (`public_checkpoint`:
  without the secure client-sampling and noise generators' states; resuming draws fresh ones
  from the secure `NoiseSource`, so the mechanism and ε from the public T are unchanged), the
  released model once the DP stage has finished (without the declared-public states it
  carries when those make it large: the resumed run takes them from the same public split),
  and the policy-stage checkpoint when small (else the policy stage restarts from the
  released model);
- ``fingerprints.json``: each dataset's ``content_sha256``, checked before a cell resumes on
  (or a record is reused with) a rebuilt dataset.

`export` may run while the sweep's cells run (`privrl reproduce primorl-table1` exports every
`$PRIVRL_REPRO_SYNC_S` and after each cell): the runs replace their checkpoints atomically
(``os.replace``), a checkpoint that vanishes or cannot be read meanwhile is skipped (the one
committed before is kept), and every committed file is written to a temporary name then renamed,
so neither a reader of the committed directory nor a later export sees half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from privrl.primorl import SECRET_STATE, public_checkpoint

__all__ = ["FingerprintMismatch", "check_fingerprints", "export", "restore", "secret_dir_of"]

RECORD = ("cell.json",)
RUN_RECORD = ("config.json", "metrics.json", "privacy.json", "metrics.csv")
SMALL = 4 * 2**20  # bytes: a model or a policy checkpoint larger than this is not committed
STATE = "fedavg_state.pt"  # the secret checkpoint's name (`privrl.primorl.primorl`)
PUBLIC_STATE = "fedavg_state.public.pt"
CKPT = "checkpoint.pt"  # the policy stage's checkpoint
PENDING = "released.pending.pt"  # a running cell's release, before its policy stage ends
FINGERPRINTS = "fingerprints.json"


class FingerprintMismatch(ValueError):
    """A committed cell was made on another dataset than the one now present (bad input: the
    command line prints it as an ``error:`` line)."""


def secret_dir_of(cell_dir: Path, record: Mapping[str, Any] | None = None) -> Path | None:
    """The secret-state directory of a cell's run (`privrl.runs.layer.secret_state_dir`);
    `record`: the cell's (default: its ``cell.json``)."""
    from privrl.runs.layer import RunSpec, secret_state_dir

    record = record or _read(cell_dir / "cell.json")
    if not record:
        return None
    run = cell_dir / "run"
    spec = RunSpec.from_mapping({**record["values"], "out": str(run)})
    return secret_state_dir(spec, run)


def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _data_paths(cells: Path, records: Iterable[Path] | None = None) -> set[Path]:
    """The datasets (this machine's paths) the cell records `records` (default: every
    ``cells/*/cell.json``) name."""
    out = set()
    for cell_json in cells.glob("*/cell.json") if records is None else records:
        data = (_read(cell_json) or {}).get("values", {}).get("data")
        if data:
            out.add(Path(str(data).replace(CACHE, _cache())))
    return out


def _fingerprint(path: Path) -> str:
    from privrl.data import content_sha256

    return content_sha256(path)


CACHE = "$PRIVRL_CACHE"  # the committed files' spelling of this machine's cache directory


def _cache() -> str:
    from privrl.data import cache_dir

    return str(cache_dir())


def _copy(src: Path, dst: Path, old: str, new: str) -> None:
    """Copy a record, rewriting the cache directory `old` as `new` in its text (so committed
    records hold no machine path, and a restored one names this machine's cache); written to a
    temporary name, then renamed."""
    tmp = dst.with_name(dst.name + ".tmp")
    if src.suffix in {".json", ".csv"}:
        tmp.write_text(src.read_text().replace(old, new))
    else:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def _save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _load_checkpoint(path: Path) -> dict[str, Any] | None:
    """A checkpoint of a cell that may be running; None when it vanished (its run ended) or
    cannot be read."""
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, EOFError, RuntimeError, pickle.UnpicklingError):
        return None


def _save_slim_release(src: Path, dst: Path) -> None:
    """Commit a running cell's release without the declared-public split's states it carries
    (most of its size: e.g. HalfCheetah's 200 public episodes, 15 MB); the resumed run fills
    them in again from the same public split (`privrl.primorl.primorl.run`). Kept only when
    that makes it small; a release that vanished or cannot be read is skipped."""
    state = _load_checkpoint(src)
    if state is None or not isinstance(state, dict):
        return
    state = {**state, "public_states": None}
    tmp = dst.with_name(dst.name + ".slim.tmp")
    torch.save(state, tmp)
    if tmp.stat().st_size <= SMALL:
        os.replace(tmp, dst)
    else:
        tmp.unlink()


def export(sweep: Path, dest: Path, names: Collection[str] | None = None) -> list[str]:
    """Write the committed state of the sweep directory `sweep` (its ``cells/``; with `names`,
    only those cells) to `dest`. Reads old-format checkpoints too; never writes a secure
    stream's state; safe while the cells run (module docstring). Returns the names of the
    cells written."""
    written = []
    dest.mkdir(parents=True, exist_ok=True)
    fingerprints = _read(dest / FINGERPRINTS) or {}
    found = sorted((sweep / "cells").glob("*/cell.json"))
    found = [c for c in found if names is None or c.parent.name in names]
    for data in _data_paths(sweep / "cells", found):
        if data.is_file():
            fingerprints[data.name] = _fingerprint(data)
    for cell in found:
        src = cell.parent
        out = dest / src.name
        (out / "run").mkdir(parents=True, exist_ok=True)
        finished = (_read(cell) or {}).get("status") == "ok"
        for name in RECORD:
            _copy(src / name, out / name, _cache(), CACHE)
        for name in RUN_RECORD:
            if (src / "run" / name).is_file():
                _copy(src / "run" / name, out / "run" / name, _cache(), CACHE)
        # a finished cell is not run again: its policy checkpoint is not needed
        for name in ("model.pt",) if finished else ("model.pt", PENDING, CKPT):
            f = src / "run" / name
            with contextlib.suppress(FileNotFoundError):  # replaced or removed meanwhile
                if f.is_file() and f.stat().st_size <= SMALL:
                    _copy(f, out / "run" / name, _cache(), CACHE)
                elif name == PENDING and f.is_file():
                    _save_slim_release(f, out / "run" / name)
        if finished:  # what it needed to resume, committed while it ran, is not kept
            for stale in (
                out / PUBLIC_STATE,
                out / "run" / PENDING,
                out / "run" / CKPT,
            ):
                stale.unlink(missing_ok=True)
            written.append(src.name)
            continue
        secret = secret_dir_of(src)
        if secret is not None and (secret / STATE).is_file():
            state = _load_checkpoint(secret / STATE)
            if state is not None:
                _save(public_checkpoint(state), out / PUBLIC_STATE)
        written.append(src.name)
    text = json.dumps(fingerprints, indent=2, sort_keys=True) + "\n"
    tmp = dest / (FINGERPRINTS + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, dest / FINGERPRINTS)
    return written


def check_fingerprints(dest: Path, datasets: Mapping[str, Path] | None = None) -> None:
    """Refuse (`FingerprintMismatch`) when a dataset present now is not the one the committed
    cells were made on. `datasets`: the paths to check (default: those the cells name)."""
    recorded = _read(dest / FINGERPRINTS) or {}
    paths = _data_paths(dest) if datasets is None else set(datasets.values())
    for path in paths:
        want = recorded.get(path.name)
        if want is None or not path.is_file():
            continue
        got = _fingerprint(path)
        if got != want:
            from privrl.runs.recipes.numerics import vendor_note

            note = vendor_note()
            raise FingerprintMismatch(
                f"dataset {path.name} ({path}) is not the one the committed cells in {dest} "
                f"were made on: its content_sha256 is {got}, the committed cells' "
                f"{FINGERPRINTS} expects {want}; rebuild the dataset with its recipe's seed "
                f"(`privrl data collect --recipe {path.stem}`, default seed 0) so that it "
                f"matches, or move the committed cells of {path.name} aside to start them "
                "afresh" + (f" ({note})" if note else "")
            )


def restore(dest: Path, sweep: Path, datasets: Mapping[str, Path] | None = None) -> list[str]:
    """Copy the committed state `dest` into the sweep directory `sweep` (cells already there
    are left alone) after checking the datasets' fingerprints. With `datasets` (e.g. task →
    path), only the cells made on one of them are restored and only those are checked.
    Returns the cells restored."""
    check_fingerprints(dest, datasets)
    wanted = None if datasets is None else {Path(p).resolve() for p in datasets.values()}
    restored = []
    for cell in sorted(dest.glob("*/cell.json")):
        src = cell.parent
        made_on = {p.resolve() for p in _data_paths(dest, [cell])}
        if wanted is not None and not made_on & wanted:
            continue
        out = sweep / "cells" / src.name
        if (out / "cell.json").is_file():
            continue
        (out / "run").mkdir(parents=True, exist_ok=True)
        for f in (src / "run").glob("*"):
            if not f.name.endswith(".tmp"):
                _copy(f, out / "run" / f.name, CACHE, _cache())
        if (src / PUBLIC_STATE).is_file():
            _restore_state(src / PUBLIC_STATE, out, (src / "cell.json").read_text())
        # the record last: a cell whose restore was cut short has none and is restored again
        for f in sorted(src.glob("*"), key=lambda f: f.name in RECORD):
            if f.is_file() and f.name != PUBLIC_STATE and not f.name.endswith(".tmp"):
                _copy(f, out / f.name, CACHE, _cache())
        restored.append(src.name)
    return restored


def _restore_state(public: Path, cell_dir: Path, record: str) -> None:
    """The committed public checkpoint `public` as the DP-FedAvg state of the restored cell
    `cell_dir` (record: its committed ``cell.json`` text), unless it has one already."""
    secret = secret_dir_of(cell_dir, json.loads(record.replace(CACHE, _cache())))
    if secret is None or (secret / STATE).exists():
        return
    state = torch.load(public, map_location="cpu", weights_only=False)
    assert all(state.get(k) is None for k in SECRET_STATE)
    secret.mkdir(parents=True, exist_ok=True)
    _save(state, secret / STATE)


def main(argv: list[str] | None = None) -> None:
    """``python -m reproductions.primorl.cells export|restore SWEEP DEST``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m reproductions.primorl.cells")
    p.add_argument("action", choices=("export", "restore"))
    p.add_argument("sweep", type=Path)
    p.add_argument("dest", type=Path)
    a = p.parse_args(argv)
    names = export(a.sweep, a.dest) if a.action == "export" else restore(a.dest, a.sweep)
    print(f"{a.action}: {len(names)} cells")


if __name__ == "__main__":
    main()
