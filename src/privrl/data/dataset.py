"""``TrajectoryDataset``: the one data type every privrl system consumes.

Storage is flat, with episode offsets, so that every whole-dataset operation is a handful of
numpy calls rather than a Python loop over episodes or rows:

* ``episode_offsets`` int64 ``[n_episodes + 1]``: starts at 0, strictly increasing, ends at
  ``n_transitions``. Transitions of episode ``i`` are rows ``offsets[i]:offsets[i+1]`` of
  ``actions``, ``rewards``, ``terminated``, ``truncated`` and ``behaviour_probs``.
* ``observations`` has ``n_transitions + n_episodes`` rows: every episode also stores its final
  observation, so episode ``i`` owns rows ``offsets[i] + i : offsets[i+1] + i + 1``.
* ``behaviour_probs`` (optional) ``[n_transitions]``: probability of the taken action under
  the behaviour policy, in (0, 1].
* ``unit_ids`` (optional) int64 ``[n_episodes]``: the privacy unit (user, patient, expert) each
  episode belongs to. ``None`` means every episode is its own unit.
* ``extra_columns`` (optional) ``{name: float64 [n_transitions]}``: per-transition columns kept
  from an imported table (``privrl data import --keep-columns``), e.g. a target policy's
  probability of the logged action. They are not part of the episodes' content fingerprint.

Flag semantics (Gymnasium / Minari): an episode ends exactly once, at its last step.
``terminated`` marks that the last transition entered a terminal state (no bootstrapping);
``truncated`` marks a stop for an outside reason (time limit) with a non-terminal final state.
Both may not be set at the same step, and neither may be set before the last step. The last
step may carry **neither** flag: that records data cut at collection end (treated like a
truncation by value-based learners, but kept distinct so no information is invented).

Arrays are not copied on construction (views are taken and marked read-only), so callers must
not mutate the arrays they passed in afterwards.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
from gymnasium import spaces

from privrl.data.spaces import space_to_dict, spaces_equal

__all__ = [
    "DatasetError",
    "DatasetMetadata",
    "Episode",
    "MDPArrays",
    "TrajectoryDataset",
    "Transitions",
    "redacted_errors",
]

SeedLike = int | np.random.Generator | np.random.SeedSequence


_REDACT: contextvars.ContextVar[bool] = contextvars.ContextVar("privrl_redact", default=False)


@contextlib.contextmanager
def redacted_errors() -> Iterator[None]:
    """While active, a `DatasetError` located in the content withholds what it found there.

    A private run reads its dataset inside this context (the ledger transaction sets it): a
    validation error that quoted an offending value, an episode index or a count of bad rows
    would publish a function of the private data on the console. The full text stays on the
    exception's ``detail`` attribute for code that handles it, and `privrl data info FILE`,
    run outside any private command, shows it.
    """
    token = _REDACT.set(True)
    try:
        yield
    finally:
        _REDACT.reset(token)


class DatasetError(ValueError):
    """Invalid dataset content or file; the message names episode, step and field.

    When the problem is located, ``episode``, ``step`` and ``field`` are also set as
    attributes (so importers can translate the episode index back to the source's id). Inside
    `redacted_errors` the message names only the field (``detail`` keeps the full text).
    """

    def __init__(
        self,
        message: str,
        *,
        episode: int | None = None,
        step: int | str | None = None,
        field: str | None = None,
    ) -> None:
        self.detail = message
        # Schema errors (a dtype, a shape, a missing array) are kept: only an error located in
        # the content (an episode, a step, a value) says something about the private data.
        located = episode is not None or step is not None or message.startswith("episode ")
        if _REDACT.get() and located:
            where = f" in field '{field}'" if field else ""
            message = (
                f"the private dataset failed validation{where}; what was found is withheld "
                "because it would reveal the private data (run `privrl data info` on the file, "
                "outside any private run, to see it)"
            )
        super().__init__(message)
        self.episode = episode
        self.step = step
        self.field = field


def _rng(seed: SeedLike) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.SeedSequence | int | np.integer):
        return np.random.default_rng(seed)
    raise TypeError(f"expected a seed (int, SeedSequence) or numpy Generator, got {seed!r}")


@dataclass(frozen=True)
class DatasetMetadata:
    """What a dataset is about: spaces, origin and the discount its returns use.

    ``extra`` holds JSON-serialisable provenance (recipe, source, seed, ...).
    """

    observation_space: spaces.Space | None = None
    action_space: spaces.Space | None = None
    env_id: str | None = None
    discount: float = 1.0
    horizon: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (0.0 <= float(self.discount) <= 1.0):
            raise DatasetError(f"metadata: discount must be in [0, 1], got {self.discount}")
        if self.horizon is not None and int(self.horizon) <= 0:
            raise DatasetError(f"metadata: horizon must be positive, got {self.horizon}")
        try:
            json.dumps(self.extra, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise DatasetError(f"metadata: extra must be JSON-serialisable: {exc}") from exc

    def replace(self, **changes: Any) -> DatasetMetadata:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def with_extra(self, **items: Any) -> DatasetMetadata:
        """A copy with ``items`` merged into ``extra``."""
        return dataclasses.replace(self, extra={**self.extra, **items})

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible dict (spaces serialised)."""
        return {
            "observation_space": None
            if self.observation_space is None
            else space_to_dict(self.observation_space),
            "action_space": None if self.action_space is None else space_to_dict(self.action_space),
            "env_id": self.env_id,
            "discount": float(self.discount),
            "horizon": None if self.horizon is None else int(self.horizon),
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DatasetMetadata:
        """Inverse of :meth:`to_dict`."""
        from privrl.data.spaces import space_from_dict

        obs = d.get("observation_space")
        act = d.get("action_space")
        return cls(
            observation_space=None if obs is None else space_from_dict(obs),
            action_space=None if act is None else space_from_dict(act),
            env_id=d.get("env_id"),
            discount=float(d.get("discount", 1.0)),
            horizon=d.get("horizon"),
            extra=dict(d.get("extra") or {}),
        )

    def equals(self, other: DatasetMetadata) -> bool:
        """Exact equality (spaces compared through their serialised form)."""
        return (
            spaces_equal(self.observation_space, other.observation_space)
            and spaces_equal(self.action_space, other.action_space)
            and self.env_id == other.env_id
            and float(self.discount) == float(other.discount)
            and self.horizon == other.horizon
            and self.extra == other.extra
        )


@dataclass(frozen=True, eq=False)
class Episode:
    """One episode as read-only views into the dataset's flat arrays (no copies)."""

    index: int
    observations: np.ndarray  # [T + 1, ...] including the final observation
    actions: np.ndarray  # [T, ...]
    rewards: np.ndarray  # [T]
    terminated: np.ndarray  # [T]
    truncated: np.ndarray  # [T]
    behaviour_probs: np.ndarray | None  # [T]
    unit_id: int

    @property
    def length(self) -> int:
        return int(self.rewards.shape[0])

    def __len__(self) -> int:
        return self.length

    @property
    def next_observations(self) -> np.ndarray:
        return self.observations[1:]

    @property
    def final_observation(self) -> np.ndarray:
        return self.observations[-1]

    def discounted_return(self, discount: float = 1.0) -> float:
        return float(np.sum(self.rewards * discount ** np.arange(self.length)))


class Transitions(NamedTuple):
    """Flat transition arrays, aligned row by row."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray


class MDPArrays(NamedTuple):
    """Arrays in d3rlpy's ``MDPDataset`` layout, plus what d3rlpy drops.

    Layout (one row per step, an episode ends at the row whose ``terminals`` or ``timeouts`` is
    1, never both): a *terminated* episode of T transitions takes T rows, with
    ``terminals = 1`` on its last transition (d3rlpy zero-fills the next observation of a
    terminal transition, so the final observation is not needed; it is kept in
    ``terminal_observations``, one row per terminated episode, in episode order). Any other
    episode (truncated, or cut with neither flag) takes T + 1 rows: the T transitions, then one
    row holding the final observation with a zero action, zero reward and ``timeouts = 1``.
    d3rlpy never uses the last row of a timeout episode as a transition (its
    ``transition_count`` is ``size - 1``), so its dummy action and reward never enter learning,
    and the transition before it bootstraps from the true final observation.
    ``d3rlpy_kwargs()`` returns exactly the keyword arguments of ``d3rlpy.dataset.MDPDataset``.
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    timeouts: np.ndarray
    terminal_observations: np.ndarray

    def d3rlpy_kwargs(self) -> dict[str, np.ndarray]:
        return {
            "observations": self.observations,
            "actions": self.actions,
            "rewards": self.rewards,
            "terminals": self.terminals,
            "timeouts": self.timeouts,
        }


# --------------------------------------------------------------------------------------------
# validation helpers (vectorised: find the first bad row, then map it to episode and step)


def _readonly(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def _rows_any(mask: np.ndarray) -> np.ndarray:
    """Reduce a per-element mask [N, ...] to a per-row mask [N]."""
    return mask.reshape(mask.shape[0], -1).any(axis=1) if mask.ndim > 1 else mask


class _Locator:
    """Maps flat row indices to (episode, step) for transition and observation arrays."""

    def __init__(self, offsets: np.ndarray) -> None:
        self.offsets = offsets
        self.obs_offsets = offsets + np.arange(offsets.shape[0], dtype=np.int64)

    def transition(self, row: int) -> tuple[int, int]:
        ep = int(np.searchsorted(self.offsets, row, side="right")) - 1
        ep = min(max(ep, 0), self.offsets.shape[0] - 2)
        return ep, int(row - self.offsets[ep])

    def observation(self, row: int) -> tuple[int, str]:
        ep = int(np.searchsorted(self.obs_offsets, row, side="right")) - 1
        ep = min(max(ep, 0), self.offsets.shape[0] - 2)
        step = int(row - self.obs_offsets[ep])
        length = int(self.offsets[ep + 1] - self.offsets[ep])
        return ep, f"{step} (final observation)" if step == length else str(step)


def _fail_rows(
    bad: np.ndarray,
    where: _Locator,
    field_name: str,
    what: str,
    values: np.ndarray | None = None,
    kind: Literal["transition", "observation"] = "transition",
) -> None:
    """Raise a DatasetError for the first True row of ``bad`` (a per-row mask), if any."""
    rows = np.flatnonzero(bad)
    if rows.size == 0:
        return
    row = int(rows[0])
    if kind == "transition":
        ep, step = where.transition(row)
        step_s = str(step)
    else:
        ep, step_s = where.observation(row)
    value = ""
    if values is not None:
        v = values[row]
        value = f" (value {np.asarray(v).tolist()!r})"
    more = f"; {rows.size} offending rows in total" if rows.size > 1 else ""
    raise DatasetError(
        f"episode {ep}, step {step_s}, field '{field_name}': {what}{value}{more} [row {row}]",
        episode=ep,
        step=step_s,
        field=field_name,
    )


def _check_finite(arr: np.ndarray, name: str, where: _Locator, kind: str) -> None:
    if not np.issubdtype(arr.dtype, np.floating):
        return
    finite = np.isfinite(arr)
    if finite.all():
        return
    _fail_rows(_rows_any(~finite), where, name, "NaN or infinite value", arr, kind)  # type: ignore[arg-type]


def _space_shape(space: spaces.Space) -> tuple[int, ...]:
    if isinstance(space, spaces.Discrete):
        return ()
    return tuple(int(s) for s in space.shape)


def _check_in_space(
    arr: np.ndarray,
    space: spaces.Space | None,
    name: str,
    where: _Locator,
    kind: Literal["transition", "observation"],
    check_box_bounds: bool,
) -> None:
    """Shape, dtype and membership checks of ``arr`` against ``space``."""
    if space is None:
        return
    if not isinstance(
        space, spaces.Discrete | spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary
    ):
        raise DatasetError(
            f"field '{name}': unsupported space {space!r} (Discrete, Box, MultiDiscrete and "
            "MultiBinary are supported)"
        )
    expected = _space_shape(space)
    if arr.shape[1:] != expected:
        raise DatasetError(
            f"field '{name}': rows have shape {arr.shape[1:]} but {space} expects {expected} "
            f"(array shape {arr.shape}; Discrete values are stored as a 1-D integer array)"
        )
    if isinstance(space, spaces.Box):
        if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise DatasetError(f"field '{name}': Box values must be numeric, got {arr.dtype}")
        if check_box_bounds:
            low, high = space.low, space.high
            lo_ok = np.all(np.isneginf(low))
            hi_ok = np.all(np.isposinf(high))
            if not (lo_ok and hi_ok):
                outside = (arr < low) | (arr > high)
                if outside.any():
                    _fail_rows(
                        _rows_any(outside), where, name, f"outside the bounds of {space}", arr, kind
                    )
        return
    if not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_):
        raise DatasetError(
            f"field '{name}': {type(space).__name__} values must be integers, got dtype {arr.dtype}"
        )
    if isinstance(space, spaces.Discrete):
        low, high = int(space.start), int(space.start) + int(space.n) - 1
    elif isinstance(space, spaces.MultiDiscrete):
        low, high = space.start, space.start + space.nvec - 1
    else:
        low, high = 0, 1
    outside = (arr < low) | (arr > high)
    if outside.any():
        _fail_rows(_rows_any(outside), where, name, f"outside {space}", arr, kind)


def _as_bool(arr: Any, name: str, where: _Locator | None) -> np.ndarray:
    a = np.asarray(arr)
    if a.dtype == np.bool_:
        return a
    if np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating):
        bad = (a != 0) & (a != 1)
        if bad.any():
            if where is not None and a.ndim == 1:
                _fail_rows(bad, where, name, "flags must be 0/1 or boolean", a)
            raise DatasetError(f"field '{name}': flags must be 0/1 or boolean")
        return a.astype(np.bool_)
    raise DatasetError(f"field '{name}': expected booleans, got dtype {a.dtype}")


def _extra_columns(
    columns: Mapping[str, Any] | None, n_transitions: int, validate: bool
) -> dict[str, np.ndarray] | None:
    """Per-transition extra columns as read-only float64 arrays (None when there are none);
    each must be numeric with one value per transition, and finite when validated."""
    if not columns:
        return None
    out: dict[str, np.ndarray] = {}
    for name, values in columns.items():
        arr = np.asarray(values)
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise DatasetError(
                f"field 'extra_columns[{name!r}]': expected numbers, got dtype {arr.dtype}"
            )
        if arr.shape != (n_transitions,):
            raise DatasetError(
                f"field 'extra_columns[{name!r}]': has shape {arr.shape}, expected "
                f"({n_transitions},) (one value per transition)"
            )
        arr = arr.astype(np.float64, copy=False)
        if validate and not np.all(np.isfinite(arr)):
            row = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise DatasetError(
                f"field 'extra_columns[{name!r}]': NaN or infinite value at transition {row}",
                step=row,
                field=f"extra_columns[{name!r}]",
            )
        out[str(name)] = _readonly(arr)
    return out


def _gather_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for each (s, l), without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    new_starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    return np.arange(total, dtype=np.int64) + np.repeat(starts - new_starts, lengths)


# --------------------------------------------------------------------------------------------


class TrajectoryDataset:
    """Episodes stored flat with offsets; validated on construction (see module docstring)."""

    def __init__(
        self,
        *,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminated: Any,
        truncated: Any,
        episode_offsets: Any,
        behaviour_probs: Any = None,
        unit_ids: Any = None,
        extra_columns: Mapping[str, Any] | None = None,
        metadata: DatasetMetadata | None = None,
        validate: bool = True,
    ) -> None:
        self.metadata = metadata if metadata is not None else DatasetMetadata()
        offsets = np.asarray(episode_offsets)
        if offsets.ndim != 1 or offsets.shape[0] < 1:
            raise DatasetError(
                "field 'episode_offsets': expected a 1-D array of n_episodes + 1 offsets, got "
                f"shape {offsets.shape}"
            )
        if not np.issubdtype(offsets.dtype, np.integer):
            raise DatasetError(
                f"field 'episode_offsets': expected integers, got dtype {offsets.dtype}"
            )
        offsets = offsets.astype(np.int64, copy=False)
        self._offsets = _readonly(offsets)
        where = _Locator(offsets)

        obs = np.asarray(observations)
        act = np.asarray(actions)
        rew = np.asarray(rewards)
        if rew.dtype == np.bool_ or np.issubdtype(rew.dtype, np.integer):
            rew = rew.astype(np.float64)
        elif not np.issubdtype(rew.dtype, np.floating):
            raise DatasetError(f"field 'rewards': expected numbers, got dtype {rew.dtype}")
        probs = None if behaviour_probs is None else np.asarray(behaviour_probs)
        if probs is not None:
            if not (
                np.issubdtype(probs.dtype, np.floating) or np.issubdtype(probs.dtype, np.integer)
            ):
                raise DatasetError(
                    f"field 'behaviour_probs': expected numbers, got dtype {probs.dtype}"
                )
            probs = probs.astype(np.float64, copy=False)
        units = None if unit_ids is None else np.asarray(unit_ids)
        if units is not None:
            if not np.issubdtype(units.dtype, np.integer):
                raise DatasetError(
                    f"field 'unit_ids': expected integer ids, got dtype {units.dtype} (map "
                    "labels to integers first; the table importer does this for you)"
                )
            units = units.astype(np.int64, copy=False)

        if validate:
            self._validate_structure(
                offsets,
                obs,
                act,
                rew,
                terminated=terminated,
                truncated=truncated,
                probs=probs,
                units=units,
            )
        term = _as_bool(terminated, "terminated", where if validate else None)
        trunc = _as_bool(truncated, "truncated", where if validate else None)

        self._observations = _readonly(obs)
        self._actions = _readonly(act)
        self._rewards = _readonly(rew)
        self._terminated = _readonly(term)
        self._truncated = _readonly(trunc)
        self._behaviour_probs = None if probs is None else _readonly(probs)
        self._unit_ids = None if units is None else _readonly(units)
        self._extra_columns = _extra_columns(extra_columns, int(offsets[-1]), validate)
        self._lengths = _readonly(np.diff(offsets))
        if validate:
            self._validate_values(where)

    # ---------------------------------------------------------------- validation
    @staticmethod
    def _validate_structure(
        offsets: np.ndarray,
        obs: np.ndarray,
        act: np.ndarray,
        rew: np.ndarray,
        *,
        terminated: Any,
        truncated: Any,
        probs: np.ndarray | None,
        units: np.ndarray | None,
    ) -> None:
        n_ep = offsets.shape[0] - 1
        if offsets[0] != 0:
            raise DatasetError(
                f"episode 0, step 0, field 'episode_offsets': offsets must start at 0, got "
                f"{int(offsets[0])}"
            )
        diffs = np.diff(offsets)
        neg = np.flatnonzero(diffs < 0)
        if neg.size:
            e = int(neg[0])
            raise DatasetError(
                f"episode {e}, step 0, field 'episode_offsets': offsets are not monotone "
                f"(offsets[{e}]={int(offsets[e])} > offsets[{e + 1}]={int(offsets[e + 1])})"
            )
        empty = np.flatnonzero(diffs == 0)
        if empty.size:
            e = int(empty[0])
            raise DatasetError(
                f"episode {e}, step 0, field 'episode_offsets': empty episode (zero transitions"
                f"; {empty.size} empty episodes in total). Every episode needs at least one "
                "transition"
            )
        n_t = int(offsets[-1])
        where = _Locator(offsets)

        def check_len(name: str, n_rows: int, expected: int, obs_rows: bool = False) -> None:
            if n_rows == expected:
                return
            if n_rows < expected and n_ep > 0:
                if obs_rows:
                    ep, step = where.observation(n_rows)
                else:
                    ep, s = where.transition(n_rows)
                    step = str(s)
                detail = f"episode {ep}, step {step} is missing"
            else:
                detail = f"{n_rows - expected} extra rows after the last episode"
                ep, step = max(n_ep - 1, 0), "end"
            basis = (
                "n_transitions + n_episodes = "
                f"{n_t} + {n_ep} (every episode stores its final observation)"
                if obs_rows
                else f"n_transitions = episode_offsets[-1] = {n_t}"
            )
            raise DatasetError(
                f"episode {ep}, step {step}, field '{name}': has {n_rows} rows, expected "
                f"{expected} ({basis}); {detail}"
            )

        if obs.ndim == 0 or act.ndim == 0:
            raise DatasetError("field 'observations'/'actions': expected arrays, got scalars")
        check_len("actions", act.shape[0], n_t)
        if rew.ndim != 1:
            raise DatasetError(f"field 'rewards': expected a 1-D array, got shape {rew.shape}")
        check_len("rewards", rew.shape[0], n_t)
        for name, flags in (("terminated", terminated), ("truncated", truncated)):
            f = np.asarray(flags)
            if f.ndim != 1:
                raise DatasetError(f"field '{name}': expected a 1-D array, got shape {f.shape}")
            check_len(name, f.shape[0], n_t)
        if probs is not None:
            if probs.ndim != 1:
                raise DatasetError(
                    f"field 'behaviour_probs': expected a 1-D array, got shape {probs.shape}"
                )
            check_len("behaviour_probs", probs.shape[0], n_t)
        check_len("observations", obs.shape[0], n_t + n_ep, obs_rows=True)
        if units is not None and units.shape != (n_ep,):
            raise DatasetError(
                f"episode {min(units.shape[0], max(n_ep - 1, 0)) if units.ndim else 0}, step 0, "
                f"field 'unit_ids': has shape {units.shape}, expected ({n_ep},) (one id per "
                "episode)"
            )

    def _validate_values(self, where: _Locator) -> None:
        md = self.metadata
        _check_finite(self._observations, "observations", where, "observation")
        _check_finite(self._actions, "actions", where, "transition")
        _check_finite(self._rewards, "rewards", where, "transition")
        if self._behaviour_probs is not None:
            p = self._behaviour_probs
            _fail_rows(~np.isfinite(p), where, "behaviour_probs", "NaN or infinite value", p)
            _fail_rows(
                (p <= 0.0) | (p > 1.0),
                where,
                "behaviour_probs",
                "probability outside (0, 1]",
                p,
            )
        _check_in_space(
            self._observations,
            md.observation_space,
            "observations",
            where,
            "observation",
            check_box_bounds=False,
        )
        _check_in_space(
            self._actions, md.action_space, "actions", where, "transition", check_box_bounds=True
        )
        term, trunc = self._terminated, self._truncated
        _fail_rows(term & trunc, where, "terminated/truncated", "both flags set at one step")
        n_t = term.shape[0]
        if n_t:
            not_last = np.ones(n_t, dtype=np.bool_)
            not_last[self._offsets[1:] - 1] = False
            _fail_rows(
                term & not_last,
                where,
                "terminated",
                "set before the episode's last step (an episode ends exactly once, at its last "
                "step)",
            )
            _fail_rows(
                trunc & not_last,
                where,
                "truncated",
                "set before the episode's last step (an episode ends exactly once, at its last "
                "step)",
            )

    def validate(self) -> None:
        """Re-run every check (useful after constructing with ``validate=False``)."""
        type(self)(**self._fields(), metadata=self.metadata, validate=True)

    # ---------------------------------------------------------------- basic properties
    @property
    def observations(self) -> np.ndarray:
        return self._observations

    @property
    def actions(self) -> np.ndarray:
        return self._actions

    @property
    def rewards(self) -> np.ndarray:
        return self._rewards

    @property
    def terminated(self) -> np.ndarray:
        return self._terminated

    @property
    def truncated(self) -> np.ndarray:
        return self._truncated

    @property
    def episode_offsets(self) -> np.ndarray:
        return self._offsets

    @property
    def behaviour_probs(self) -> np.ndarray | None:
        return self._behaviour_probs

    @property
    def extra_columns(self) -> dict[str, np.ndarray]:
        """Per-transition columns kept at import, by name (read-only arrays; empty if none)."""
        return dict(self._extra_columns or {})

    @property
    def unit_ids(self) -> np.ndarray | None:
        """Per-episode unit ids as given (None: one unit per episode)."""
        return self._unit_ids

    @property
    def n_episodes(self) -> int:
        return int(self._offsets.shape[0] - 1)

    @property
    def n_transitions(self) -> int:
        return int(self._offsets[-1])

    def __len__(self) -> int:
        return self.n_episodes

    @property
    def episode_lengths(self) -> np.ndarray:
        return self._lengths

    @property
    def observation_offsets(self) -> np.ndarray:
        """Offsets into ``observations``: episode i owns rows ``[o[i], o[i+1])``."""
        return self._offsets + np.arange(self.n_episodes + 1, dtype=np.int64)

    @property
    def episode_unit_ids(self) -> np.ndarray:
        """Unit id of every episode; the episode index when ``unit_ids`` is None."""
        if self._unit_ids is None:
            return np.arange(self.n_episodes, dtype=np.int64)
        return self._unit_ids

    @property
    def transition_episode_index(self) -> np.ndarray:
        """Episode index of every transition [n_transitions]."""
        return np.repeat(np.arange(self.n_episodes, dtype=np.int64), self._lengths)

    @property
    def transition_steps(self) -> np.ndarray:
        """Step index within its episode of every transition [n_transitions]."""
        return np.arange(self.n_transitions, dtype=np.int64) - np.repeat(
            self._offsets[:-1], self._lengths
        )

    def _fields(self) -> dict[str, Any]:
        return {
            "observations": self._observations,
            "actions": self._actions,
            "rewards": self._rewards,
            "terminated": self._terminated,
            "truncated": self._truncated,
            "episode_offsets": self._offsets,
            "behaviour_probs": self._behaviour_probs,
            "unit_ids": self._unit_ids,
            "extra_columns": self._extra_columns,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle through the constructor so unpickled arrays are read-only again.
        return (_rebuild, (self._fields(), self.metadata))

    def __repr__(self) -> str:
        md = self.metadata
        return (
            f"TrajectoryDataset(n_episodes={self.n_episodes}, n_transitions={self.n_transitions}"
            f", observation_space={md.observation_space}, action_space={md.action_space}, "
            f"env_id={md.env_id!r}, behaviour_probs={self._behaviour_probs is not None}, "
            f"unit_ids={self._unit_ids is not None})"
        )

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_episodes(
        cls,
        episodes: Sequence[Mapping[str, Any]],
        metadata: DatasetMetadata | None = None,
        validate: bool = True,
    ) -> TrajectoryDataset:
        """Build from per-episode dicts.

        Each dict has ``observations`` (T + 1 rows, final observation included), ``actions``,
        ``rewards``, ``terminated``, ``truncated`` (T rows each) and optionally
        ``behaviour_probs`` (T) and ``unit_id``; the optional keys must be in all or none.
        """
        required = ("observations", "actions", "rewards", "terminated", "truncated")
        for i, ep in enumerate(episodes):
            missing = [k for k in required if k not in ep]
            if missing:
                raise DatasetError(
                    f"episode {i}, step 0, field '{missing[0]}': missing key(s) {missing}"
                )
        for key in ("behaviour_probs", "unit_id"):
            has = [key in ep and ep[key] is not None for ep in episodes]
            if any(has) and not all(has):
                i = has.index(False)
                raise DatasetError(
                    f"episode {i}, step 0, field '{key}': given for some episodes but not this "
                    "one (give it for all episodes or none)"
                )
        lengths = np.array([len(ep["rewards"]) for ep in episodes], dtype=np.int64)
        for i, ep in enumerate(episodes):
            n_obs = len(ep["observations"])
            if n_obs != lengths[i] + 1:
                raise DatasetError(
                    f"episode {i}, step {min(n_obs, lengths[i])}, field 'observations': has "
                    f"{n_obs} rows, expected {lengths[i] + 1} (T + 1: the final observation is "
                    "stored too)"
                )
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)

        def cat(key: str) -> np.ndarray:
            parts = [np.asarray(ep[key]) for ep in episodes]
            if not parts:
                return np.zeros(0)
            return np.concatenate(parts, axis=0)

        has_probs = bool(episodes) and "behaviour_probs" in episodes[0]
        has_units = bool(episodes) and episodes[0].get("unit_id") is not None
        return cls(
            observations=cat("observations"),
            actions=cat("actions"),
            rewards=cat("rewards"),
            terminated=cat("terminated").astype(np.bool_) if episodes else np.zeros(0, bool),
            truncated=cat("truncated").astype(np.bool_) if episodes else np.zeros(0, bool),
            episode_offsets=offsets,
            behaviour_probs=cat("behaviour_probs") if has_probs else None,
            unit_ids=np.array([ep["unit_id"] for ep in episodes], dtype=np.int64)
            if has_units
            else None,
            metadata=metadata,
            validate=validate,
        )

    def with_metadata(self, metadata: DatasetMetadata, validate: bool = True) -> TrajectoryDataset:
        """Same arrays (shared, no copy), new metadata; re-validated against its spaces."""
        return TrajectoryDataset(**self._fields(), metadata=metadata, validate=validate)

    # ---------------------------------------------------------------- episodes and units
    def episode(self, i: int) -> Episode:
        """Episode ``i`` as views (no copies)."""
        n = self.n_episodes
        if not -n <= i < n:
            raise IndexError(f"episode {i} out of range for {n} episodes")
        i = int(i) % n
        s, e = int(self._offsets[i]), int(self._offsets[i + 1])
        return Episode(
            index=i,
            observations=self._observations[s + i : e + i + 1],
            actions=self._actions[s:e],
            rewards=self._rewards[s:e],
            terminated=self._terminated[s:e],
            truncated=self._truncated[s:e],
            behaviour_probs=None if self._behaviour_probs is None else self._behaviour_probs[s:e],
            unit_id=int(self.episode_unit_ids[i]),
        )

    def iter_episodes(self) -> Iterator[Episode]:
        """Episodes in order (for user-facing code; hot paths should use the flat arrays)."""
        for i in range(self.n_episodes):
            yield self.episode(i)

    def units(self) -> np.ndarray:
        """Sorted unique unit ids."""
        return np.unique(self.episode_unit_ids)

    @property
    def n_units(self) -> int:
        return int(self.units().shape[0])

    def unit_episodes(self, uid: int) -> np.ndarray:
        """Indices of the episodes of unit ``uid`` (empty if unknown)."""
        return np.flatnonzero(self.episode_unit_ids == uid)

    def by_unit(self) -> dict[int, np.ndarray]:
        """Unit id → episode indices (in episode order), via one stable sort."""
        ids = self.episode_unit_ids
        order = np.argsort(ids, kind="stable")
        uniq, starts = np.unique(ids[order], return_index=True)
        groups = np.split(order, starts[1:]) if order.size else []
        return {int(u): g for u, g in zip(uniq, groups, strict=True)}

    # ---------------------------------------------------------------- transitions
    def transitions(self) -> Transitions:
        """Flat (obs, action, reward, next_obs, terminated, truncated), one row per transition."""
        obs_idx = np.arange(self.n_transitions, dtype=np.int64) + self.transition_episode_index
        return Transitions(
            self._observations[obs_idx],
            self._actions,
            self._rewards,
            self._observations[obs_idx + 1],
            self._terminated,
            self._truncated,
        )

    def sample_transitions(self, batch_size: int, rng: SeedLike) -> Transitions:
        """``batch_size`` transitions drawn uniformly with replacement."""
        gen = _rng(rng)
        if self.n_transitions == 0:
            raise DatasetError("cannot sample transitions from an empty dataset")
        idx = gen.integers(0, self.n_transitions, size=int(batch_size))
        ep = np.searchsorted(self._offsets, idx, side="right") - 1
        obs_idx = idx + ep
        return Transitions(
            self._observations[obs_idx],
            self._actions[idx],
            self._rewards[idx],
            self._observations[obs_idx + 1],
            self._terminated[idx],
            self._truncated[idx],
        )

    # ---------------------------------------------------------------- subsets
    def subset(self, episode_indices: Any) -> TrajectoryDataset:
        """A dataset of the given episodes, in the given order (vectorised gather).

        Unit ids follow their episodes; with ``unit_ids=None`` the subset again has one unit
        per episode.
        """
        idx = np.asarray(episode_indices, dtype=np.int64).reshape(-1)
        n = self.n_episodes
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"episode index out of range for {n} episodes")
        idx = idx % n if n else idx
        lengths = self._lengths[idx]
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        contiguous = idx.size > 0 and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size))
        if contiguous:
            s, e = int(self._offsets[idx[0]]), int(self._offsets[idx[-1] + 1])
            t_sel: Any = slice(s, e)
            o_sel: Any = slice(s + int(idx[0]), e + int(idx[-1]) + 1)
        else:
            t_sel = _gather_index(self._offsets[idx], lengths)
            o_sel = _gather_index(self._offsets[idx] + idx, lengths + 1)
        return TrajectoryDataset(
            observations=self._observations[o_sel],
            actions=self._actions[t_sel],
            rewards=self._rewards[t_sel],
            terminated=self._terminated[t_sel],
            truncated=self._truncated[t_sel],
            episode_offsets=offsets,
            behaviour_probs=None if self._behaviour_probs is None else self._behaviour_probs[t_sel],
            unit_ids=None if self._unit_ids is None else self._unit_ids[idx],
            extra_columns=None
            if self._extra_columns is None
            else {k: v[t_sel] for k, v in self._extra_columns.items()},
            metadata=self.metadata,
            validate=False,  # a subset of valid episodes is valid
        )

    def sample_episodes(self, n: int, rng: SeedLike, replace: bool = False) -> TrajectoryDataset:
        """A subset of ``n`` episodes drawn uniformly (without replacement by default)."""
        idx = _rng(rng).choice(self.n_episodes, size=int(n), replace=replace)
        return self.subset(idx)

    def split(
        self, fraction: float, rng: SeedLike, by: Literal["episode", "unit"] = "episode"
    ) -> tuple[TrajectoryDataset, TrajectoryDataset]:
        """Random disjoint split: ``round(fraction * count)`` episodes (or units) go to the first.

        With ``by="unit"`` all episodes of a unit land on the same side, which is what a
        privacy split (e.g. a public/private partition by patient) needs. Episodes keep their
        original order within each side.
        """
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be in [0, 1], got {fraction}")
        gen = _rng(rng)
        if by == "episode":
            perm = gen.permutation(self.n_episodes)
            k = round(fraction * self.n_episodes)
            in_a = np.zeros(self.n_episodes, dtype=np.bool_)
            in_a[perm[:k]] = True
        elif by == "unit":
            uniq, inverse = np.unique(self.episode_unit_ids, return_inverse=True)
            perm = gen.permutation(uniq.shape[0])
            k = round(fraction * uniq.shape[0])
            unit_in_a = np.zeros(uniq.shape[0], dtype=np.bool_)
            unit_in_a[perm[:k]] = True
            in_a = unit_in_a[inverse]
        else:
            raise ValueError(f"by must be 'episode' or 'unit', got {by!r}")
        return self.subset(np.flatnonzero(in_a)), self.subset(np.flatnonzero(~in_a))

    @staticmethod
    def concat(datasets: Sequence[TrajectoryDataset]) -> TrajectoryDataset:
        """Episodes of all datasets in order.

        Spaces and discount must agree. Unit ids are kept as they are (the same id in two
        datasets means the same unit); mixing datasets with and without unit ids or behaviour
        probabilities is an error rather than a guess.
        """
        if not datasets:
            raise DatasetError("concat needs at least one dataset")
        first = datasets[0]
        md = first.metadata
        for j, d in enumerate(datasets[1:], start=1):
            m = d.metadata
            if not spaces_equal(m.observation_space, md.observation_space):
                raise DatasetError(
                    f"concat: dataset {j} has observation space {m.observation_space}, "
                    f"dataset 0 has {md.observation_space}"
                )
            if not spaces_equal(m.action_space, md.action_space):
                raise DatasetError(
                    f"concat: dataset {j} has action space {m.action_space}, dataset 0 has "
                    f"{md.action_space}"
                )
            if float(m.discount) != float(md.discount):
                raise DatasetError(
                    f"concat: dataset {j} has discount {m.discount}, dataset 0 has {md.discount}"
                )
        for name, attr in (("behaviour_probs", "_behaviour_probs"), ("unit_ids", "_unit_ids")):
            has = [getattr(d, attr) is not None for d in datasets]
            if any(has) and not all(has):
                j = has.index(False)
                raise DatasetError(
                    f"concat: dataset {j} has no {name} but dataset {has.index(True)} does"
                )
        names = [sorted(d.extra_columns) for d in datasets]
        for j, cols in enumerate(names[1:], start=1):
            if cols != names[0]:
                raise DatasetError(
                    f"concat: dataset {j} has extra columns {cols}, dataset 0 has {names[0]}"
                )
        same = all(d.metadata.equals(md) for d in datasets)
        if same:
            meta = md
        else:
            env_ids = {d.metadata.env_id for d in datasets}
            horizons = {d.metadata.horizon for d in datasets}
            meta = DatasetMetadata(
                observation_space=md.observation_space,
                action_space=md.action_space,
                env_id=env_ids.pop() if len(env_ids) == 1 else None,
                discount=md.discount,
                horizon=horizons.pop() if len(horizons) == 1 else None,
                extra={"concat_of": [d.metadata.extra for d in datasets]},
            )
        lengths = np.concatenate([d._lengths for d in datasets])
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)

        def cat(attr: str) -> np.ndarray:
            return np.concatenate([getattr(d, attr) for d in datasets], axis=0)

        return TrajectoryDataset(
            observations=cat("_observations"),
            actions=cat("_actions"),
            rewards=cat("_rewards"),
            terminated=cat("_terminated"),
            truncated=cat("_truncated"),
            episode_offsets=offsets,
            behaviour_probs=cat("_behaviour_probs") if first._behaviour_probs is not None else None,
            unit_ids=cat("_unit_ids") if first._unit_ids is not None else None,
            extra_columns={
                k: np.concatenate([d.extra_columns[k] for d in datasets]) for k in names[0]
            }
            or None,
            metadata=meta,
            validate=True,  # dtypes may differ between inputs; re-check the result
        )

    # ---------------------------------------------------------------- statistics
    def returns(self, discount: float | None = None) -> np.ndarray:
        """Per-episode (discounted) return, ``sum_t discount**t r_t``; float64 [n_episodes]."""
        gamma = self.metadata.discount if discount is None else float(discount)
        if self.n_episodes == 0:
            return np.zeros(0)
        r = self._rewards.astype(np.float64)
        if gamma != 1.0:
            r = r * np.power(gamma, self.transition_steps.astype(np.float64))
        return np.add.reduceat(r, self._offsets[:-1])

    def summary(self) -> dict[str, Any]:
        """Descriptive statistics for ``privrl data info``.

        Not private: these are exact statistics of the data, for the data owner's eyes only.
        """
        md = self.metadata
        lengths = self._lengths
        rets = self.returns(1.0)  # undiscounted: what the environment scores

        def stats(x: np.ndarray) -> dict[str, float] | None:
            if x.size == 0:
                return None
            return {
                "min": float(x.min()),
                "mean": float(x.mean()),
                "max": float(x.max()),
                "std": float(x.std()),
            }

        return {
            "n_episodes": self.n_episodes,
            "n_transitions": self.n_transitions,
            "n_units": self.n_units,
            "unit_ids": "given" if self._unit_ids is not None else "one unit per episode",
            "episode_length": stats(lengths.astype(np.float64)),
            "return": stats(rets),
            **({"discounted_return": stats(self.returns())} if float(md.discount) != 1.0 else {}),
            "discount": float(md.discount),
            "horizon": md.horizon,
            "env_id": md.env_id,
            "observation_space": str(md.observation_space),
            "action_space": str(md.action_space),
            "observation_dtype": str(self._observations.dtype),
            "action_dtype": str(self._actions.dtype),
            "n_terminated": int(self._terminated.sum()),
            "n_truncated": int(self._truncated.sum()),
            "n_unflagged_ends": int(
                self.n_episodes - self._terminated.sum() - self._truncated.sum()
            ),
            "behaviour_probs": self._behaviour_probs is not None,
            **({"extra_columns": sorted(self._extra_columns)} if self._extra_columns else {}),
            "extra": md.extra,
        }

    # ---------------------------------------------------------------- comparison
    def equals(self, other: object, check_metadata: bool = True) -> bool:
        """Exact equality of every array (values, dtype, shape) and, optionally, metadata."""
        if not isinstance(other, TrajectoryDataset):
            return False
        a, b = self._fields(), other._fields()
        for key in a:
            x, y = a[key], b[key]
            if (x is None) != (y is None):
                return False
            if x is None:
                continue
            if isinstance(x, Mapping):
                if sorted(x) != sorted(y) or not all(
                    x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]) for k in x
                ):
                    return False
                continue
            if x.dtype != y.dtype or x.shape != y.shape or not np.array_equal(x, y):
                return False
        return not check_metadata or self.metadata.equals(other.metadata)

    # ---------------------------------------------------------------- d3rlpy layout
    def to_mdp_arrays(self) -> MDPArrays:
        """Arrays in d3rlpy's ``MDPDataset`` layout (see :class:`MDPArrays` for the exact rules)."""
        n_ep, lengths = self.n_episodes, self._lengths
        if n_ep == 0:
            raise DatasetError("cannot convert an empty dataset to d3rlpy arrays")
        last = self._offsets[1:] - 1
        ep_terminated = self._terminated[last]
        extra = (~ep_terminated).astype(np.int64)  # one final-observation row per such episode
        rows = lengths + extra
        row_off = np.concatenate(([0], np.cumsum(rows))).astype(np.int64)
        n_rows = int(row_off[-1])
        # rows holding real transitions
        t_rows = _gather_index(row_off[:-1], lengths)
        obs_sel = _gather_index(self.observation_offsets[:-1], lengths)
        observations = np.empty((n_rows, *self._observations.shape[1:]), self._observations.dtype)
        observations[t_rows] = self._observations[obs_sel]
        actions = np.zeros((n_rows, *self._actions.shape[1:]), self._actions.dtype)
        actions[t_rows] = self._actions
        rewards = np.zeros(n_rows, dtype=self._rewards.dtype)
        rewards[t_rows] = self._rewards
        terminals = np.zeros(n_rows, dtype=np.float32)
        timeouts = np.zeros(n_rows, dtype=np.float32)
        final_obs = self._observations[self.observation_offsets[1:] - 1]
        end_rows = row_off[1:] - 1
        observations[end_rows[~ep_terminated]] = final_obs[~ep_terminated]
        terminals[end_rows[ep_terminated]] = 1.0
        timeouts[end_rows[~ep_terminated]] = 1.0
        return MDPArrays(
            observations, actions, rewards, terminals, timeouts, final_obs[ep_terminated].copy()
        )

    @classmethod
    def from_mdp_arrays(
        cls,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminals: Any,
        timeouts: Any = None,
        terminal_observations: Any = None,
        *,
        metadata: DatasetMetadata | None = None,
        validate: bool = True,
    ) -> TrajectoryDataset:
        """Inverse of :meth:`to_mdp_arrays`, reading d3rlpy's layout the way d3rlpy does.

        An episode ends at each row with ``terminals`` or ``timeouts`` set; rows after the last
        flag are ignored by d3rlpy and rejected here. A timeout episode's last row contributes
        only its observation (the final observation). A terminated episode's final observation
        is taken from ``terminal_observations`` if given, else zero-filled (d3rlpy's own
        convention), which is recorded in ``metadata.extra``.
        """
        obs = np.asarray(observations)
        act = np.asarray(actions)
        rew = np.asarray(rewards).reshape(-1)
        term = np.asarray(terminals).reshape(-1) != 0
        tout = np.zeros_like(term) if timeouts is None else np.asarray(timeouts).reshape(-1) != 0
        n = term.shape[0]
        for name, arr in (("observations", obs), ("actions", act), ("rewards", rew)):
            if arr.shape[0] != n:
                raise DatasetError(
                    f"field '{name}': {arr.shape[0]} rows but terminals has {n} (d3rlpy layout "
                    "has one row per step)"
                )
        if timeouts is not None and tout.shape[0] != n:
            raise DatasetError(f"field 'timeouts': {tout.shape[0]} rows but terminals has {n}")
        both = np.flatnonzero(term & tout)
        if both.size:
            raise DatasetError(
                f"row {int(both[0])}, field 'terminals/timeouts': both set at one step"
            )
        ends = np.flatnonzero(term | tout)
        if ends.size == 0 or ends[-1] != n - 1:
            raise DatasetError(
                "field 'terminals/timeouts': the last row must end an episode (d3rlpy ignores "
                f"rows after the last flag; last flag at row {int(ends[-1]) if ends.size else -1}"
                f" of {n})"
            )
        starts = np.concatenate(([0], ends[:-1] + 1))
        ep_term = term[ends]
        rows = ends - starts + 1
        lengths = rows - (~ep_term).astype(np.int64)
        bad = np.flatnonzero(lengths <= 0)
        if bad.size:
            e = int(bad[0])
            raise DatasetError(
                f"episode {e}, step 0, field 'timeouts': a timeout episode needs at least two "
                f"rows (transitions plus the final-observation row); rows {int(starts[e])}.."
                f"{int(ends[e])}"
            )
        t_sel = _gather_index(starts, lengths)
        n_ep = ends.shape[0]
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        obs_off = offsets + np.arange(n_ep + 1)
        new_obs = np.empty((int(obs_off[-1]), *obs.shape[1:]), dtype=obs.dtype)
        new_obs[_gather_index(obs_off[:-1], lengths)] = obs[t_sel]
        final_rows = obs_off[1:] - 1
        new_obs[final_rows[~ep_term]] = obs[ends[~ep_term]]
        n_term = int(ep_term.sum())
        meta = metadata if metadata is not None else DatasetMetadata()
        if terminal_observations is None:
            new_obs[final_rows[ep_term]] = 0
            if n_term:
                meta = meta.with_extra(terminal_observations="zero-filled (d3rlpy convention)")
        else:
            tobs = np.asarray(terminal_observations)
            if tobs.shape[0] != n_term:
                raise DatasetError(
                    f"field 'terminal_observations': {tobs.shape[0]} rows but the data has "
                    f"{n_term} terminated episodes"
                )
            new_obs[final_rows[ep_term]] = tobs
        new_term = np.zeros(int(offsets[-1]), dtype=np.bool_)
        new_trunc = np.zeros(int(offsets[-1]), dtype=np.bool_)
        new_term[offsets[1:][ep_term] - 1] = True
        new_trunc[offsets[1:][~ep_term] - 1] = True
        return cls(
            observations=new_obs,
            actions=act[t_sel],
            rewards=rew[t_sel],
            terminated=new_term,
            truncated=new_trunc,
            episode_offsets=offsets,
            metadata=meta,
            validate=validate,
        )

    # ---------------------------------------------------------------- files
    def save(self, path: str | Path, **kwargs: Any) -> Path:
        """Write the native HDF5 format (see :func:`privrl.data.io.save_hdf5`)."""
        from privrl.data.io import save_hdf5

        return save_hdf5(self, path, **kwargs)

    @classmethod
    def load(cls, path: str | Path, validate: bool = True) -> TrajectoryDataset:
        """Read the native HDF5 format (see :func:`privrl.data.io.load_hdf5`)."""
        from privrl.data.io import load_hdf5

        return load_hdf5(path, validate=validate)


def _rebuild(fields: dict[str, Any], metadata: DatasetMetadata) -> TrajectoryDataset:
    return TrajectoryDataset(**fields, metadata=metadata, validate=False)
