"""Resumable episode loops: the state of a long vectorised loop (UCB-VI over tens of millions
of episodes) saved between blocks, so that a run cut off (a killed process, a stopped machine)
continues where it was instead of starting over.

A checkpoint is a directory: ``state.pkl`` (the loop's next episode, its state object — counts,
privatizer, generators — and the fingerprint of the run it belongs to) and the per-episode
regret in append-only segments ``regret-<first episode>.npy``, so each save writes only the
episodes since the last one. Files are written whole or not at all (tmp + rename), the
segments before the state that lists them. A state of another run (fingerprint) or one whose
segments do not add up is discarded: the loop starts over. Resuming at a block boundary with
the generators' saved states gives exactly the numbers of an uninterrupted run (tested).

``state.pkl`` is a pickle: load checkpoints only from a directory of your own (the cache).
It holds what the privatizer holds before its mechanism (the raw counts and the noise drawn so
far), so it belongs with the data it came from, never with what a run publishes: the
reproductions that use it simulate public MDPs and keep it in the cache, and a finished run
removes it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LoopCheckpoint", "fingerprint"]


def fingerprint(*parts: Any) -> str:
    """A digest of everything that determines a run (its inputs and initial generator states)."""
    return hashlib.sha256(pickle.dumps(parts, protocol=4)).hexdigest()


class LoopCheckpoint:
    """Save and restore a loop's state every ``every_s`` seconds of wall time (see module)."""

    def __init__(self, directory: str | Path, key: str, *, every_s: float = 300.0) -> None:
        self.dir = Path(directory)
        self.key = key
        self.every_s = float(every_s)
        self.saved_to = 0  # episodes whose regret is on disk
        self._segments: list[str] = []
        self._last = time.monotonic()

    def load(self) -> tuple[int, Any, np.ndarray] | None:
        """(next episode, state, regret of the episodes before it [R, episode]) of this run, or
        None (no checkpoint, another run's, or an unreadable one: then it is removed)."""
        try:
            saved = pickle.loads((self.dir / "state.pkl").read_bytes())
            if saved["key"] != self.key:
                raise ValueError("another run's checkpoint")
            regret = np.concatenate(
                [np.load(self.dir / name, allow_pickle=False) for name in saved["segments"]],
                axis=1,
            )
            if regret.shape[1] != saved["episode"]:
                raise ValueError("segments do not add up")
        except FileNotFoundError:
            return None
        except Exception:  # unreadable, truncated or stale: start over
            self.clear()
            return None
        self.saved_to, self._segments = int(saved["episode"]), list(saved["segments"])
        return self.saved_to, saved["state"], regret

    def due(self) -> bool:
        """Whether ``every_s`` seconds have passed since the last save (or the start)."""
        return time.monotonic() - self._last >= self.every_s

    def save(self, episode: int, state: Any, regret: np.ndarray) -> None:
        """Record that the loop continues at ``episode`` with ``state``; ``regret`` is the
        whole [R, K] array, of which the episodes since the last save are written."""
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"regret-{self.saved_to:012d}.npy"
        _atomic(self.dir / name, lambda f: np.save(f, regret[:, self.saved_to : episode]))
        segments = [*self._segments, name]
        record = {"key": self.key, "episode": episode, "segments": segments, "state": state}
        _atomic(self.dir / "state.pkl", lambda f: f.write(pickle.dumps(record, protocol=4)))
        self.saved_to, self._segments = episode, segments
        self._last = time.monotonic()

    def clear(self) -> None:
        """Remove the checkpoint (the run finished, or its state is of no use)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self.saved_to, self._segments = 0, []


def _atomic(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        write(f)
    tmp.replace(path)
