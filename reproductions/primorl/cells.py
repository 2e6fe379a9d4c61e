"""Committed sweep state: results of a long sweep that accumulate across sittings.

A sweep's cells live in the cache (`sweeps.sweep_dir`), which a machine may not keep. This
module copies what a later sitting needs into a committed directory (e.g.
``docs/reproductions/primorl-table1/cells/``) and back:

- per finished cell: its record (``cell.json``, the run's config.json, metrics.json,
  privacy.json, its evaluation curve metrics.csv) and, when small, the released model;
- per running cell: its record, its DP-FedAvg checkpoint made public (`public_checkpoint`:
  without the secure client-sampling and noise generators' states; resuming draws fresh ones
  from the secure `NoiseSource`, so the mechanism and ε from the public T are unchanged), the
  released model once the DP stage has finished, and the policy-stage checkpoint when small
  (else the policy stage restarts from the released model);
- ``fingerprints.json``: each dataset's ``content_sha256``, checked before a cell resumes on
  (or a record is reused with) a rebuilt dataset.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
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
FINGERPRINTS = "fingerprints.json"


class FingerprintMismatch(RuntimeError):
    """A committed cell was made on another dataset than the one now present."""


def secret_dir_of(cell_dir: Path) -> Path | None:
    """The secret-state directory of a cell's run (`privrl.runs.layer.secret_state_dir`)."""
    from privrl.runs.layer import RunSpec, secret_state_dir

    record = _read(cell_dir / "cell.json")
    if not record:
        return None
    run = cell_dir / "run"
    spec = RunSpec.from_mapping({**record["values"], "out": str(run)})
    return secret_state_dir(spec, run)


def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _data_paths(cells: Path) -> set[Path]:
    out = set()
    for cell_json in cells.glob("*/cell.json"):
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
    records hold no machine path, and a restored one names this machine's cache)."""
    if src.suffix in {".json", ".csv"}:
        dst.write_text(src.read_text().replace(old, new))
    else:
        shutil.copy2(src, dst)


def export(sweep: Path, dest: Path) -> list[str]:
    """Write the committed state of the sweep directory `sweep` (its ``cells/``) to `dest`.
    Reads old-format checkpoints too; never writes a secure stream's state. Returns the
    names of the cells written."""
    written = []
    dest.mkdir(parents=True, exist_ok=True)
    fingerprints = _read(dest / FINGERPRINTS) or {}
    for data in _data_paths(sweep / "cells"):
        if data.is_file():
            fingerprints[data.name] = _fingerprint(data)
    for cell in sorted((sweep / "cells").glob("*/cell.json")):
        src = cell.parent
        out = dest / src.name
        (out / "run").mkdir(parents=True, exist_ok=True)
        for name in RECORD:
            _copy(src / name, out / name, _cache(), CACHE)
        for name in RUN_RECORD:
            if (src / "run" / name).is_file():
                _copy(src / "run" / name, out / "run" / name, _cache(), CACHE)
        for name in ("model.pt", "released.pending.pt", "checkpoint.pt"):
            f = src / "run" / name
            if f.is_file() and f.stat().st_size <= SMALL:
                shutil.copy2(f, out / "run" / name)
        secret = secret_dir_of(src)
        if secret is not None and (secret / STATE).is_file():
            state = torch.load(secret / STATE, map_location="cpu", weights_only=False)
            torch.save(public_checkpoint(state), out / PUBLIC_STATE)
        written.append(src.name)
    (dest / FINGERPRINTS).write_text(json.dumps(fingerprints, indent=2, sort_keys=True) + "\n")
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
            raise FingerprintMismatch(
                f"{path} (content_sha256 {got[:12]}…) is not the dataset the committed cells in "
                f"{dest} were made on ({want[:12]}…); rebuild the dataset with the recipe's "
                f"seed, or move the committed cells of {path.name} aside to start them afresh"
            )


def restore(dest: Path, sweep: Path) -> list[str]:
    """Copy the committed state `dest` into the sweep directory `sweep` (cells already there
    are left alone) after checking the datasets' fingerprints. Returns the cells restored."""
    check_fingerprints(dest)
    restored = []
    for cell in sorted(dest.glob("*/cell.json")):
        src = cell.parent
        out = sweep / "cells" / src.name
        if (out / "cell.json").is_file():
            continue
        (out / "run").mkdir(parents=True, exist_ok=True)
        for f in src.glob("*"):
            if f.is_file() and f.name != PUBLIC_STATE:
                _copy(f, out / f.name, CACHE, _cache())
        for f in (src / "run").glob("*"):
            _copy(f, out / "run" / f.name, CACHE, _cache())
        public = src / PUBLIC_STATE
        secret = secret_dir_of(out)
        if public.is_file() and secret is not None and not (secret / STATE).exists():
            state = torch.load(public, map_location="cpu", weights_only=False)
            assert all(state.get(k) is None for k in SECRET_STATE)
            secret.mkdir(parents=True, exist_ok=True)
            torch.save(state, secret / STATE)
        restored.append(src.name)
    return restored


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
