"""Neighbouring datasets and a side-by-side runner for the neighbour-diff privacy test.

A differential-privacy guarantee covers only a command's declared noisy releases. Everything
else it publishes (config.json, privacy.json, the other fields of metrics.json, the console,
the file names of the run directory) must be the same function of public inputs for two
neighbouring datasets run with the same seed. This module builds small extreme neighbours
(D, D′) under each system's relation, saves both under the SAME file name in two sibling
directories with the same public metadata, runs one command on each in-process and lists every
published difference, naming the field and both values.
"""

from __future__ import annotations

import csv
import json
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from privrl import __version__
from privrl.cli.main import main
from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.io import save_hdf5

DATA_NAME = "data.h5"
"""Both datasets are saved under this name (in directories ``a/`` and ``b/``)."""

# Keys removed from every JSON file before comparing (run times and software versions).
VOLATILE_KEYS = frozenset({"created", "version", "privrl_version"})
# Unicode box drawing (rich tables): column widths follow the widest cell, so a release's
# printed value would otherwise shift every border line.
_BOX = re.compile(r"[\u2500-\u257f]+")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")


# ---------------------------------------------------------------------------------------------
# datasets
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """Two sibling directories ``a/`` (D) and ``b/`` (D′) under one root."""

    root: Path

    @property
    def a(self) -> Path:
        return self.root / "a"

    @property
    def b(self) -> Path:
        return self.root / "b"

    def save(self, d: TrajectoryDataset, d_prime: TrajectoryDataset) -> None:
        """Save D in ``a/`` and D′ in ``b/`` under the same name; the metadata must agree."""
        assert d.metadata.to_dict() == d_prime.metadata.to_dict(), "public metadata differ"
        self.a.mkdir(parents=True, exist_ok=True)
        self.b.mkdir(parents=True, exist_ok=True)
        save_hdf5(d, self.a / DATA_NAME)
        save_hdf5(d_prime, self.b / DATA_NAME)

    def dirs(self) -> tuple[Path, Path]:
        return self.a, self.b


def episode(
    states: Sequence[Any],
    actions: Sequence[int],
    rewards: Sequence[float],
    *,
    terminated: bool = False,
    unit_id: int | None = None,
    behaviour_probs: Sequence[float] | None = None,
) -> dict[str, Any]:
    """One episode dict for `TrajectoryDataset.from_episodes` (``states`` has T + 1 rows)."""
    T = len(actions)
    assert len(states) == T + 1 and len(rewards) == T
    ep: dict[str, Any] = {
        "observations": np.asarray(states),
        "actions": np.asarray(actions, dtype=np.int64),
        "rewards": np.asarray(rewards, dtype=np.float64),
        "terminated": np.array([False] * (T - 1) + [terminated]),
        "truncated": np.array([False] * (T - 1) + [not terminated]),
    }
    if unit_id is not None:
        ep["unit_id"] = int(unit_id)
    if behaviour_probs is not None:
        ep["behaviour_probs"] = np.asarray(behaviour_probs, dtype=np.float64)
    return ep


def dataset(episodes: Sequence[Mapping[str, Any]], metadata: DatasetMetadata) -> TrajectoryDataset:
    return TrajectoryDataset.from_episodes(list(episodes), metadata=metadata)


def import_table_pair(
    pair: Pair,
    d: Sequence[Mapping[str, Any]],
    d_prime: Sequence[Mapping[str, Any]],
    *flags: str,
) -> None:
    """Write D and D′ as CSV tables of transitions (same file name) and import each with
    ``privrl data import`` and the same ``flags``: the spaces the import infers are its own,
    as they would be for a user who did not declare them."""
    for side, episodes in ((pair.a, d), (pair.b, d_prime)):
        side.mkdir(parents=True, exist_ok=True)
        lines = ["episode,s,a,r"]
        for i, ep in enumerate(episodes):
            obs, act, rew = ep["observations"], ep["actions"], ep["rewards"]
            for t in range(len(act)):
                lines.append(f"{i},{int(obs[t])},{int(act[t])},{float(rew[t])}")
            lines.append(f"{i},{int(obs[-1])},0,0.0")  # final observation (the import drops it)
        (side / "table.csv").write_text("\n".join(lines) + "\n")
        argv = ["data", "import", str(side / "table.csv"), "--out", str(side / DATA_NAME)]
        with warnings.catch_warnings():  # the import warns that it infers the spaces
            warnings.simplefilter("ignore", UserWarning)
            code = main([*argv, "-c", "episode=episode,obs=s,action=a,reward=r", *flags])
        assert code == 0, f"privrl data import failed for {side}"


def tabular_metadata(
    S: int, A: int, *, horizon: int | None, discount: float = 1.0, **extra: Any
) -> DatasetMetadata:
    """Explicit (declared, not inferred) spaces, horizon and discount."""
    return DatasetMetadata(
        observation_space=spaces.Discrete(S),
        action_space=spaces.Discrete(A),
        discount=discount,
        horizon=horizon,
        extra=dict(extra),
    )


def random_tabular_episodes(
    n: int,
    lengths: int | Sequence[int],
    S: int,
    A: int,
    *,
    seed: int,
    avoid_state: int | None = None,
    with_probs: bool = False,
) -> list[dict[str, Any]]:
    """n episodes of uniformly random states (never ``avoid_state``) and actions, rewards in
    {0, 0.5}; ``lengths`` one length for all or one per episode. ``with_probs``: behaviour
    probabilities of the uniform behaviour policy (1/A)."""
    rng = np.random.default_rng(seed)
    lens = [lengths] * n if isinstance(lengths, int) else list(lengths)
    states = [s for s in range(S) if s != avoid_state]
    out = []
    for T in lens:
        out.append(
            episode(
                rng.choice(states, size=T + 1),
                rng.integers(0, A, size=T),
                0.5 * rng.integers(0, 2, size=T),
                behaviour_probs=[1.0 / A] * T if with_probs else None,
            )
        )
    return out


def extreme_tabular_episode(
    T: int, state: int, action: int, *, with_probs: bool = False, A: int = 2
) -> dict[str, Any]:
    """A trajectory that sits in one (rare) state, takes one action and earns the highest
    reward 1 at every step."""
    return episode(
        [state] * (T + 1),
        [action] * T,
        [1.0] * T,
        behaviour_probs=[1.0 / A] * T if with_probs else None,
    )


# ---------------------------------------------------------------------------------------------
# running both sides
# ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one run published: exit code, console, and the run directory's contents."""

    code: int
    stdout: str
    stderr: str
    files: list[str] = field(default_factory=list)
    json: dict[str, Any] = field(default_factory=dict)
    csv_header: list[str] | None = None
    csv_rows: int | None = None


def _expand(argv: Sequence[str], side: Path) -> list[str]:
    return [a.format(dir=side, data=side / DATA_NAME, out=side / "run") for a in argv]


def run_side(
    argv: Sequence[str],
    side: Path,
    capsys: pytest.CaptureFixture[str],
    patch: Callable[[], Any] | None = None,
) -> Outcome:
    """Run ``privrl ARGV`` in-process with ``{data}``, ``{out}`` and ``{dir}`` bound to
    ``side``; ``patch`` is a context-manager factory active during the run (the online
    commands' neighbour)."""
    capsys.readouterr()
    if patch is None:
        code = main(_expand(argv, side))
    else:
        with patch():
            code = main(_expand(argv, side))
    captured = capsys.readouterr()
    outcome = Outcome(code, captured.out, captured.err)
    run = side / "run"
    if run.is_dir():
        outcome.files = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
        for name in ("config.json", "metrics.json", "privacy.json"):
            if (run / name).is_file():
                outcome.json[name] = json.loads((run / name).read_text())
        if (run / "metrics.csv").is_file():
            with open(run / "metrics.csv", newline="") as fh:
                rows = list(csv.reader(fh))
            outcome.csv_header = rows[0] if rows else []
            outcome.csv_rows = max(len(rows) - 1, 0)
    return outcome


# ---------------------------------------------------------------------------------------------
# comparing
# ---------------------------------------------------------------------------------------------


def normalise_text(text: str, dirs: Iterable[Path]) -> str:
    """Both sides' directories become <DIR>, timestamps <TIME> and privrl's version <VERSION>."""
    for d in dirs:
        text = text.replace(str(d), "<DIR>")
    text = text.replace(f"privrl {__version__}", "privrl <VERSION>")
    return _TIMESTAMP.sub("<TIME>", text)


def normalise_json(value: Any, dirs: Sequence[Path]) -> Any:
    """Drop volatile keys, and write both sides' directories as <DIR>."""
    if isinstance(value, dict):
        return {k: normalise_json(v, dirs) for k, v in value.items() if str(k) not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [normalise_json(v, dirs) for v in value]
    if isinstance(value, str):
        return normalise_text(value, dirs)
    return value


def console_lines(text: str, dirs: Sequence[Path], released: Sequence[str]) -> list[str]:
    """Console lines after normalisation (directories, table borders, runs of blanks), minus
    the lines that print an allow-listed release (regular expressions in ``released``)."""
    out = []
    for raw in normalise_text(text, dirs).splitlines():
        line = " ".join(_BOX.sub(" ", raw).split())
        if line and not any(re.search(p, line) for p in released):
            out.append(line)
    return out


def _json_diff(a: Any, b: Any, where: str) -> Iterator[str]:
    if (a is None) != (b is None) and "." not in where:  # a whole file written on one side
        yield f"{where}: {'absent' if a is None else 'written'} (D) != " + (
            f"{'absent' if b is None else 'written'} (D')"
        )
    elif isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                yield f"{where}.{k}: {a.get(k, '<absent>')!r} (D) != {b.get(k, '<absent>')!r} (D')"
            else:
                yield from _json_diff(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _json_diff(x, y, f"{where}[{i}]")
    elif a != b or type(a) is not type(b):
        yield f"{where}: {_short(a)} (D) != {_short(b)} (D')"


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


class PublishedDifference(AssertionError):
    """Two neighbours published different values outside the declared releases."""


def assert_same_publication(
    case_id: str,
    a: Outcome,
    b: Outcome,
    dirs: Sequence[Path],
    *,
    released_metrics: Iterable[str] = (),
    released_lines: Sequence[str] = (),
) -> None:
    """Raise `PublishedDifference` listing every difference (field, value on D, value on D′)."""
    diffs = published_differences(
        a, b, dirs, released_metrics=released_metrics, released_lines=released_lines
    )
    if diffs:
        raise PublishedDifference(
            f"{case_id}: published outside the releases and differs between neighbours:\n"
            + "\n".join(f"  {d}" for d in diffs)
        )


def published_differences(
    a: Outcome,
    b: Outcome,
    dirs: Sequence[Path],
    *,
    released_metrics: Iterable[str] = (),
    released_lines: Sequence[str] = (),
) -> list[str]:
    """Every difference between what the two runs published outside their declared releases.

    Both runs refusing with the same (normalised) error is no difference: a refusal that
    depends only on public inputs tells the neighbours nothing.
    """
    diffs: list[str] = []
    if a.code != b.code:
        diffs.append(
            f"exit code: {a.code} (D) != {b.code} (D'); stderr D: {a.stderr.strip()[-300:]!r}, "
            f"D': {b.stderr.strip()[-300:]!r}"
        )
    for stream in ("stdout", "stderr"):
        la = console_lines(getattr(a, stream), dirs, released_lines)
        lb = console_lines(getattr(b, stream), dirs, released_lines)
        if la != lb:
            for i, (x, y) in enumerate(zip(la, lb, strict=False)):
                if x != y:
                    diffs.append(f"{stream} line {i}: {x!r} (D) != {y!r} (D')")
                    break
            else:
                diffs.append(f"{stream}: {len(la)} lines (D) != {len(lb)} lines (D')")
    if a.files != b.files:
        diffs.append(f"run directory files: {a.files} (D) != {b.files} (D')")
    released = set(released_metrics)
    for name in sorted(set(a.json) | set(b.json)):
        ja = normalise_json(a.json.get(name), dirs)
        jb = normalise_json(b.json.get(name), dirs)
        if name == "metrics.json" and isinstance(ja, dict) and isinstance(jb, dict):
            ja = {k: v for k, v in ja.items() if k not in released}
            jb = {k: v for k, v in jb.items() if k not in released}
        diffs.extend(_json_diff(ja, jb, name))
    if a.csv_header != b.csv_header:
        diffs.append(f"metrics.csv columns: {a.csv_header} (D) != {b.csv_header} (D')")
    if a.csv_rows != b.csv_rows:
        diffs.append(f"metrics.csv rows: {a.csv_rows} (D) != {b.csv_rows} (D')")
    return diffs
