"""Target policies the user supplies, for every OPE command (`privrl ope gpope | dp-lsw |
dp-lsl | lstd | ips | snips | dr`): one resolver, checked against the PUBLIC spaces and
horizon only.

``--target-policy`` accepts:

* ``uniform`` — π(a|s) = 1/A;
* ``FILE.npy`` — a table π(a|s): ``[S, A]`` (stationary), ``[H, S, A]`` (time-indexed,
  h = 0..H-1 in code; needs a declared horizon equal to H) or ``[A]`` (context-free). S and A
  must match the dataset's declared Discrete spaces; every row must be a distribution
  (non-negative, summing to 1 within 1e-6);
* ``FILE.npz`` — a saved privrl tabular policy (``policy.npz`` of ``privrl train dp-apvi |
  apvi | ...``, kind ``privrl.finite_horizon_tabular_policy``): its greedy actions ``[H, S]``
  as the deterministic time-indexed table;
* ``DIR/learner.pt`` — a saved privrl discrete-action learner (`privrl train dp-sgd |
  expert-dp`, discrete CQL or BCQ), read by the loader of `privrl eval`
  (`privrl.rl.policy_files.load_policy`). Its observation size and action count must match
  the dataset's declared spaces. The target is the policy the learner acts with:
  ``learner.pt`` (or ``learner.pt:greedy``) is the greedy policy, π(a|s) = 1 on the action
  `privrl eval` would take (argmax Q for CQL, BCQ's constrained argmax); ``learner.pt:epsilon=E``
  the ε-greedy one, π(a|s) = (1 − E)·1[a = greedy] + E/A, for estimators whose weights a
  deterministic target would make too sparse; ``learner.pt:imitation`` (BCQ only) its
  behaviour-cloning classifier, π(a|s) = softmax(logits(s))_a. SAC/TD3 agents (``policy.pt``)
  act in a continuous box and have no π(a|s) over discrete actions: refused. On private
  observations a learner's probabilities go through the same guarded evaluation as a
  ``module:function`` (the uniform fallback for an observation it fails on);
* ``module:function`` — called with a batch of observations ``[n, ...]``, returning ``[n, A]``
  probabilities, each row a function of its own observation alone. The user's code is
  checked on public inputs before any private data are read (`public_points`: every state of
  a Discrete space up to 4096 states, else 256 points drawn from the declared space with the
  fixed public seed 0, plus its finite bounds): it must not raise, must return shape (n, A)
  and a distribution per row (finite, non-negative, summing to 1 within 1e-6), and must give
  each row the same probabilities alone as in the batch (deterministic, row by row).
  A failure there is refused with one ``error:`` line naming it (the inputs are public).
  On the private observations, a failure cannot be refused without leaking whether (and
  where) it happened, so it is handled the same way for every dataset (`guarded_probs`): an
  observation on which the code raises (any exception, or exits), returns a wrong shape or an
  invalid distribution gets the uniform distribution 1/A, a fixed public fallback, and the run
  goes on; warnings and printed output of the code are discarded, and nothing says whether the
  fallback was used (the report's public parameters say that it exists);
* ``column:NAME`` — the target policy's probability of the *logged* action, one value per row,
  from a column kept at import (``privrl data import --keep-columns NAME``; the header's
  ``metadata.extra["extra_columns"]`` lists them). It gives no π(a|s) for the other actions,
  so only the estimators that need π(a_t|s_t) alone accept it (ips, snips: callers pass
  ``columns``). Values outside [0, 1] are clipped into it, never refused (they are private).

From Python, `as_target_policy` also takes the policy as an object: a table as an array
(checked like a FILE.npy), an object with ``action_probs(obs)`` (the `Policy` protocol) or a
callable ``fn(obs) -> [n, A]`` (both user code, checked and guarded like a
``module:function``), or a `TargetPolicy`; `describe` names it in a report by public facts
only (an array's shape, code's qualified name).

Everything about a table is checked when it is loaded, before any private data are read, so
a bad file is refused with one ``error:`` line naming the problem and the fix. A table is
indexed by the observation's Discrete index (minus the space's ``start``); out-of-range
indices cannot occur in a dataset that validated against its declared space.
"""

from __future__ import annotations

import contextlib
import copy
import io
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.config import ConfigError
from privrl.rl.policy_files import (
    ATOL,
    CHECKPOINT,
    TableError,
    checkpoint_probs,
    import_function,
    parse_checkpoint,
    read_table,
    table_problem,
)

__all__ = [
    "FALLBACK_NOTE",
    "IMPORT_ACTION_SPACE",
    "IMPORT_KEEP_COLUMNS",
    "IMPORT_OBSERVATION_SPACE",
    "PUBLIC_POINTS",
    "PUBLIC_SEED",
    "TABULAR_POLICY_KIND",
    "USER_CODE_HELP",
    "TargetPolicy",
    "as_target_policy",
    "describe",
    "guarded_probs",
    "is_user_spec",
    "load_target_policy",
    "public_points",
]

TABULAR_POLICY_KIND = "privrl.finite_horizon_tabular_policy"
_ATOL = ATOL
_HELP = (
    "give uniform, FILE.npy (π(a|s) as [S, A], [H, S, A] or [A]), a saved privrl policy.npz, "
    "a saved discrete learner DIR/learner.pt[:greedy|:epsilon=E|:imitation], module:function "
    "or column:NAME"
)
_CHECKPOINT = CHECKPOINT
#: How a dataset declares the public facts a target policy is checked against: the flags of
#: `privrl data import` (another command than the estimator's, so a message names them as they
#: are typed, from Python too).
IMPORT_OBSERVATION_SPACE = "privrl data import --observation-space"
IMPORT_ACTION_SPACE = "privrl data import --action-space"
IMPORT_KEEP_COLUMNS = "privrl data import --keep-columns"
_NEEDS_DISCRETE_ACTIONS = (
    "a target policy needs a Discrete action space in the dataset's metadata; re-import with "
    f"{IMPORT_ACTION_SPACE} discrete:A"
)

#: Public inputs a user's target policy is checked on before the data are read: every state of
#: a Discrete space of at most `ALL_STATES` states, else `PUBLIC_POINTS` draws from the declared
#: space with the fixed public seed `PUBLIC_SEED` (plus the finite bounds of a Box).
PUBLIC_POINTS = 256
PUBLIC_SEED = 0
ALL_STATES = 4096
#: Rows compared alone and in the batch (the policy must treat each observation on its own).
_ROWS_ALONE = 8
#: What the commands' --target-policy help says of user code (module:function, a learner).
USER_CODE_HELP = (
    "user code is checked on public points before the data are read, and gives the uniform "
    "distribution on a private observation it fails on"
)
FALLBACK_NOTE = (
    "user code (a target policy is checked on public points of the declared observation "
    "space before the data are read); on a private observation where it raises, exits, or "
    "returns a wrong shape or an invalid distribution, π(·|s) is the uniform distribution 1/A "
    "(a fixed public fallback, the same rule for every dataset; whether it was used is not "
    "reported)"
)


@dataclass(frozen=True)
class TargetPolicy:
    """π(a|s) for a batch of observations: `probs(obs, steps) -> [n, A]`.

    `spec` is what the user gave (published in config.json: it is public); `A` the number of
    actions; `fn(obs)` (or `fn(obs, steps)` when `time_indexed`) the probabilities. `horizon`
    is the table's H for a time-indexed policy. `action_probs` is the `Policy` protocol's name
    for the same thing.
    """

    spec: str
    A: int
    fn: Callable[..., Any]
    time_indexed: bool = False
    horizon: int | None = None
    column: str | None = None
    guarded: bool = True
    """Evaluate `fn` through `guarded_probs` (the uniform fallback per observation it fails
    on): the default, for code the user supplies (module:function, a saved learner, a callable
    built in Python); False only for the tables this module checked when loading them."""

    @property
    def fallback(self) -> str | None:
        """What the report says about the fallback (None: a table, which cannot fail)."""
        return FALLBACK_NOTE if self.guarded else None

    def probs(self, obs: np.ndarray, steps: np.ndarray | None = None) -> np.ndarray:
        """[n, A] probabilities. User code (`guarded`) goes through `guarded_probs`: an
        observation it fails on gets the uniform distribution, whatever the data, since an
        error whose occurrence depends on the private data would leak. A table was checked
        when it was loaded (every row a distribution), so its rows are returned as they are."""
        args: tuple[np.ndarray, ...] = (np.asarray(obs),)
        if self.time_indexed:
            if steps is None:
                raise ConfigError(
                    "target_policy",
                    f"{self.spec} is time-indexed [H, S, A]: it needs each observation's step h",
                )
            args = (*args, np.asarray(steps, dtype=np.int64).reshape(-1))
        if self.guarded:  # user code: the public fallback per observation it fails on
            return guarded_probs(self.fn, *args, A=self.A)
        return np.asarray(self.fn(*args), dtype=np.float64)  # a table checked at load

    def action_probs(self, obs: np.ndarray, steps: np.ndarray | None = None) -> np.ndarray:
        return self.probs(obs, steps)


# ---------------------------------------------------------------------------------------------
# user code: checked on public points, guarded on private ones
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Discard what user code says while it runs on private observations (warnings, numpy
    floating-point messages, printed output): their occurrence may depend on the data."""
    with (
        warnings.catch_warnings(),
        np.errstate(all="ignore"),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        yield


def _call(fn: Callable[..., Any], args: tuple[np.ndarray, ...], A: int) -> np.ndarray | None:
    """fn(*args) as float64 [n, A], or None if it raised, exited or gave another shape."""
    try:
        with _quiet():
            p = np.asarray(fn(*args), dtype=np.float64)
    except (Exception, SystemExit):  # the user's code: any failure, handled one way
        return None
    return p if p.shape == (len(args[0]), A) else None


def _evaluate(fn: Callable[..., Any], args: tuple[np.ndarray, ...], A: int) -> np.ndarray:
    """fn on the batch; where the batch fails, on its halves, down to single observations (a
    failing one gets NaN rows, replaced by the fallback). Each row is its observation's alone,
    as the public check asserted, so splitting the batch changes no row."""
    p = _call(fn, args, A)
    if p is not None:
        return p
    n = len(args[0])
    if n <= 1:
        return np.full((n, A), np.nan)
    mid = n // 2
    halves = [tuple(a[:mid] for a in args), tuple(a[mid:] for a in args)]
    return np.concatenate([_evaluate(fn, half, A) for half in halves])


def _valid_rows(p: np.ndarray) -> np.ndarray:
    """Rows that are distributions: finite, non-negative, summing to 1 within 1e-6."""
    with np.errstate(all="ignore"):
        ok = np.all(np.isfinite(p), axis=1) & np.all(p >= 0.0, axis=1)
        return ok & (np.abs(np.where(ok[:, None], p, 0.0).sum(axis=1) - 1.0) <= _ATOL)


def guarded_probs(fn: Callable[..., Any], *args: np.ndarray, A: int) -> np.ndarray:
    """[n, A] probabilities `fn(*args)` of user code on private observations (args: the
    observations [n, ...], and for a time-indexed policy their steps [n]), by one public rule:
    a row that is a distribution is kept (renormalised within its 1e-6 tolerance); an
    observation on which the code raises, exits, returns a wrong shape or an invalid row gets
    the uniform distribution 1/A. Nothing is raised or printed, so the run does not reveal
    whether (or for which record) the fallback was used."""
    args = tuple(np.asarray(a) for a in args)
    if len(args[0]) == 0:
        return np.zeros((0, A))
    p = _evaluate(fn, args, A)
    ok = _valid_rows(p)
    safe = np.where(ok[:, None], p, 1.0)
    return np.where(ok[:, None], safe / safe.sum(axis=1, keepdims=True), 1.0 / A)


def public_points(space: Any) -> np.ndarray:
    """The public inputs a user's policy is checked on (`PUBLIC_POINTS`, `PUBLIC_SEED`): every
    state of a Discrete space (up to `ALL_STATES`), else draws from the declared space and,
    for a Box, its finite lower and upper bounds; as the dataset stores observations (int64
    for discrete spaces, float64 for a Box). ValueError for a space that cannot be sampled."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete) and int(space.n) <= ALL_STATES:
        return int(space.start) + np.arange(int(space.n), dtype=np.int64)
    try:
        sampler = copy.deepcopy(space)
        sampler.seed(PUBLIC_SEED)
        points = np.stack([np.asarray(sampler.sample()) for _ in range(PUBLIC_POINTS)])
    except Exception as exc:  # a space gymnasium cannot sample into one array
        raise ValueError(
            f"cannot draw public points from the observation space {space} ({exc})"
        ) from None
    if isinstance(space, spaces.Box):
        low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
        bounds = [np.where(np.isfinite(b), b, 0.0) for b in (low, high)]
        return np.concatenate([np.stack(bounds), points.astype(np.float64)])
    return points.astype(np.int64) if np.issubdtype(points.dtype, np.integer) else points


def _check_on_public(spec: str, fn: Callable[..., Any], A: int, observation_space: Any) -> None:
    """Run the user's code on public points before any private data are read; refuse (one
    error line naming the failure: the inputs are public) code that raises, returns another
    shape or an invalid distribution, or treats a row differently alone than in a batch."""
    if observation_space is None:
        raise ConfigError(
            "target_policy",
            f"{spec}: user code is checked on public points of the dataset's "
            "declared observation space before the data are read; declare it (re-import with "
            f"{IMPORT_OBSERVATION_SPACE})",
        )
    try:
        points = public_points(observation_space)
    except ValueError as exc:
        raise ConfigError("target_policy", f"{spec}: {exc}") from None
    where = f"{spec} on public points of {observation_space}"
    try:
        p = np.asarray(fn(points), dtype=np.float64)
    except Exception as exc:
        raise ConfigError("target_policy", f"{where}: raised {type(exc).__name__}: {exc}") from None
    if p.shape != (len(points), A):
        raise ConfigError(
            "target_policy",
            f"{where}: returned shape {p.shape} for {len(points)} observations; it must return "
            f"action probabilities of shape (n, {A})",
        )
    bad = np.flatnonzero(~_valid_rows(p))
    if bad.size:
        raise ConfigError(
            "target_policy",
            f"{where}: row {int(bad[0])} (observation {points[bad[0]].tolist()}) is not a "
            "distribution (finite, non-negative, summing to 1 within 1e-6)",
        )
    for i in range(min(_ROWS_ALONE, len(points))):
        alone = _call(fn, (points[i : i + 1],), A)
        if alone is None or not np.allclose(alone[0], p[i], rtol=0.0, atol=_ATOL):
            raise ConfigError(
                "target_policy",
                f"{where}: observation {points[i].tolist()} alone gets other probabilities "
                "than in the batch; each row must be a deterministic function of its own "
                "observation",
            )


def is_user_spec(spec: str) -> bool:
    """True for the specs this module resolves (a file, a module:function), as opposed to a
    built-in domain's named policies (``target``, ``greedy``, ``softmax:T``, ...)."""
    s = str(spec).strip()
    if s.endswith((".npy", ".npz")) or _CHECKPOINT.match(s):
        return True
    head, sep, tail = s.partition(":")
    return bool(sep and head and tail) and head.lower() not in ("softmax", "epsilon-greedy")


def _discrete(space: Any) -> tuple[int, int] | None:
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return int(space.n), int(space.start)
    return None


def _state_index(obs: np.ndarray, start: int) -> np.ndarray:
    return np.asarray(obs).reshape(len(obs), -1)[:, 0].astype(np.int64) - int(start)


def _read_npy(path: Path, spec: str) -> np.ndarray:
    try:
        return read_table(path, "`target_policy`")
    except TableError as exc:
        raise ConfigError("target_policy", f"{spec}: {exc.problem}; {_HELP}") from None


def _read_npz(path: Path, spec: str, A: int) -> np.ndarray:
    """A saved privrl tabular policy as a one-hot table [H, S, A]."""
    if not path.is_file():
        raise ConfigError("target_policy", f"{spec}: no such file; {_HELP}")
    from privrl.data.files import read_npz

    f = read_npz(path, "`target_policy`")
    kind = str(f["kind"]) if "kind" in f else None
    if kind != TABULAR_POLICY_KIND:
        raise ConfigError(
            "target_policy",
            f"{spec} is not a saved privrl tabular policy (kind "
            f"{kind!r}, expected {TABULAR_POLICY_KIND!r}: the policy.npz of privrl "
            "train dp-apvi | apvi); for another policy give its π(a|s) as a .npy "
            "table or a module:function",
        )
    try:
        actions = np.asarray(f["actions"])
        n_actions = int(f["n_actions"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError("target_policy", f"{spec}: cannot read a policy.npz ({exc})") from None
    if actions.ndim != 2 or not np.issubdtype(actions.dtype, np.integer):
        raise ConfigError("target_policy", f"{spec}: its actions must be an integer table [H, S]")
    if n_actions != A:
        raise ConfigError(
            "target_policy",
            f"{spec} has {n_actions} actions but the dataset's action space has {A}",
        )
    if actions.size and (actions.min() < 0 or actions.max() >= A):
        raise ConfigError("target_policy", f"{spec}: its actions must lie in [0, {A})")
    return np.eye(A)[actions]


def _check_table(
    table: np.ndarray, spec: str, A: int, n_states: int | None, horizon: int | None
) -> None:
    """The table's shape against the public spaces and horizon; rows are distributions."""
    shape = table.shape
    if table.ndim == 1:
        if shape != (A,):
            raise ConfigError(
                "target_policy",
                f"{spec}: a context-free table must have shape ({A},) for the "
                f"dataset's {A} actions, got {shape}",
            )
    elif table.ndim in (2, 3):
        if n_states is None:
            raise ConfigError(
                "target_policy",
                f"{spec} is a per-state table, but the observation space is "
                "not a public Discrete space; re-import with "
                f"{IMPORT_OBSERVATION_SPACE} discrete:S, or "
                "give a context-free table [A] or a module:function",
            )
        if shape[-2:] != (n_states, A):
            want = "(S, A)" if table.ndim == 2 else "(H, S, A)"
            raise ConfigError(
                "target_policy",
                f"{spec}: shape {shape} does not match the declared spaces "
                f"{want} with (S, A) = ({n_states}, {A})",
            )
        if table.ndim == 3:
            if horizon is None:
                raise ConfigError(
                    "target_policy",
                    f"{spec} is time-indexed (H = {shape[0]} steps) but no "
                    f"horizon is declared; pass `max_horizon={shape[0]}`",
                )
            if shape[0] != int(horizon):
                raise ConfigError(
                    "target_policy",
                    f"{spec} has H = {shape[0]} steps but the declared horizon "
                    f"is {horizon}; give a table [{horizon}, {n_states}, {A}] or "
                    f"`max_horizon={shape[0]}`",
                )
    else:
        raise ConfigError("target_policy", f"{spec}: shape {shape}; {_HELP}")
    problem = table_problem(table)
    if problem is not None:
        raise ConfigError("target_policy", f"{spec}: {problem}")


def load_target_policy(
    spec: str,
    action_space: Any,
    observation_space: Any,
    *,
    horizon: int | None = None,
    columns: Any = None,
) -> TargetPolicy:
    """The target policy from its public spec (see the module docstring), checked against
    the PUBLIC action and observation spaces and the declared horizon only. ``columns``: the
    per-row columns the dataset's header declares, for ``column:NAME`` (None: the caller
    needs π(a|s) for every action and refuses a column)."""
    act = _discrete(action_space)
    if act is None:
        raise ValueError(_NEEDS_DISCRETE_ACTIONS)
    A = act[0]
    spec = str(spec).strip()
    if spec == "uniform":
        return TargetPolicy(spec, A, lambda obs: np.full((len(obs), A), 1.0 / A), guarded=False)
    checkpoint = _CHECKPOINT.match(spec)
    if checkpoint is not None:
        return _checkpoint_policy(spec, A, observation_space)
    if spec.endswith((".npy", ".npz")):
        path = Path(spec)
        table = _read_npy(path, spec) if spec.endswith(".npy") else _read_npz(path, spec, A)
        return _table_policy(spec, table, A, observation_space, horizon)
    module, sep, name = spec.partition(":")
    if module == "column":
        return _column_policy(spec, name, A, columns)
    if sep and module and name:
        try:
            fn = import_function(spec)
        except (ImportError, AttributeError) as exc:
            raise ConfigError("target_policy", f"{spec}: cannot import it ({exc})") from None
        return _code_policy(spec, fn, A, observation_space)
    raise ConfigError("target_policy", f"{spec!r} is not understood; {_HELP}")


def _table_policy(
    spec: str, table: np.ndarray, A: int, observation_space: Any, horizon: int | None
) -> TargetPolicy:
    """A table π(a|s) ([A], [S, A] or [H, S, A]) checked against the public spaces and
    horizon, indexed by the observation's Discrete index."""
    obs_d = _discrete(observation_space)
    n_states = None if obs_d is None else obs_d[0]
    start = 0 if obs_d is None else obs_d[1]
    _check_table(table, spec, A, n_states, horizon)
    table = np.array(table, dtype=np.float64)
    table.flags.writeable = False
    if table.ndim == 1:
        return TargetPolicy(
            spec, A, lambda obs: np.broadcast_to(table, (len(obs), A)), guarded=False
        )
    if table.ndim == 2:
        return TargetPolicy(spec, A, lambda obs: table[_state_index(obs, start)], guarded=False)
    H = int(table.shape[0])

    def timed(obs: np.ndarray, steps: np.ndarray) -> np.ndarray:
        # steps ≥ H are dropped before (truncation at the declared horizon = H)
        return table[np.minimum(steps, H - 1), _state_index(obs, start)]

    return TargetPolicy(spec, A, timed, time_indexed=True, horizon=H, guarded=False)


def _code_policy(spec: str, fn: Any, A: int, observation_space: Any) -> TargetPolicy:
    """User code `fn(obs) -> [n, A]`, checked on public points, then guarded."""
    if not callable(fn):
        raise ConfigError("target_policy", f"{spec} is not callable")
    _check_on_public(spec, fn, A, observation_space)
    return TargetPolicy(spec, A, fn)


def describe(policy: Any) -> str:
    """What the report says of a target policy given as a Python object: a spec as it is, an
    array by its shape, code by its name (public facts only, never its values)."""
    if isinstance(policy, str):
        return policy.strip()
    if isinstance(policy, TargetPolicy):
        return policy.spec
    if isinstance(policy, (np.ndarray, list, tuple)):
        return f"array of shape {tuple(np.shape(policy))}"
    fn = getattr(policy, "action_probs", policy)
    name = getattr(fn, "__qualname__", None) or type(policy).__name__
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module else str(name)


def as_target_policy(
    policy: Any,
    action_space: Any,
    observation_space: Any,
    *,
    horizon: int | None = None,
    columns: Any = None,
) -> TargetPolicy:
    """The target policy from what a caller has: a spec string (as `load_target_policy`), a
    `TargetPolicy`, a table π(a|s) as an array ([A], [S, A] or [H, S, A], checked like a
    FILE.npy), an object with `action_probs(obs) -> [n, A]` (the `Policy` protocol) or a
    callable `fn(obs) -> [n, A]` (both user code: checked on public points, then guarded as a
    module:function is)."""
    if isinstance(policy, (str, Path)):
        return load_target_policy(
            str(policy), action_space, observation_space, horizon=horizon, columns=columns
        )
    act = _discrete(action_space)
    if act is None:
        raise ValueError(_NEEDS_DISCRETE_ACTIONS)
    A, spec = act[0], describe(policy)
    if isinstance(policy, TargetPolicy):
        if policy.A != A:
            raise ConfigError(
                "target_policy", f"{spec} has {policy.A} actions but the action space has {A}"
            )
        return policy
    if isinstance(policy, (np.ndarray, list, tuple)):
        try:
            table = np.asarray(policy, dtype=np.float64)
        except (TypeError, ValueError):
            raise ConfigError("target_policy", f"{spec}: not a numeric array; {_HELP}") from None
        return _table_policy(spec, table, A, observation_space, horizon)
    return _code_policy(spec, getattr(policy, "action_probs", policy), A, observation_space)


def _column_policy(spec: str, name: str, A: int, columns: Any) -> TargetPolicy:
    """``column:NAME``: π(a_t|s_t) of the logged action, read per row from a kept column."""
    if columns is None:
        raise ConfigError(
            "target_policy",
            f"{spec} gives only the logged action's target probability per row; "
            "this estimator needs π(a|s) for every action (use it with ips or snips, or give π "
            "as FILE.npy or module:function)",
        )
    kept = [str(c) for c in columns]
    if not name or name not in kept:
        raise ConfigError(
            "target_policy",
            f"{spec}: the dataset keeps no column {name!r} (kept: "
            f"{kept or 'none'}); re-import the table with {IMPORT_KEEP_COLUMNS} {name or 'NAME'}",
        )

    def no_table(*_: Any) -> np.ndarray:
        raise ConfigError("target_policy", f"{spec} has no π(a|s) table, only the logged action's")

    return TargetPolicy(spec, A, no_table, column=name, guarded=False)


def _checkpoint_policy(spec: str, A: int, observation_space: Any) -> TargetPolicy:
    """A saved discrete learner (learner.pt) through `privrl eval`'s loader, its sizes checked
    against the declared spaces; greedy, ε-greedy or (BCQ) the imitation classifier."""
    from privrl.rl.policy_files import load_policy

    try:
        parsed = parse_checkpoint(spec)
    except ValueError as exc:
        raise ConfigError("target_policy", f"{spec}: {exc}") from None
    assert parsed is not None
    path, mode, epsilon = parsed
    try:
        loaded = load_policy(path)
    except ValueError as exc:
        raise ConfigError("target_policy", f"{spec}: {exc}") from None
    if loaded.probs is None:
        raise ConfigError(
            "target_policy",
            f"{spec} is a {loaded.kind} policy without discrete action "
            "probabilities (SAC/TD3 act in a continuous box); give a discrete learner's "
            "learner.pt (train dp-sgd | expert-dp), a table or a module:function",
        )
    if loaded.n_actions != A:
        raise ConfigError(
            "target_policy",
            f"{spec} has {loaded.n_actions} actions but the dataset's action "
            f"space has {A}; give a policy trained for this action space",
        )
    if observation_space is None or getattr(observation_space, "shape", None) is None:
        raise ConfigError(
            "target_policy",
            f"{spec} needs the dataset's declared observation space to check "
            "its input size; re-import with "
            f"{IMPORT_OBSERVATION_SPACE}",
        )
    shape = tuple(observation_space.shape)
    obs_dim = int(np.prod(shape)) if shape else 1
    if loaded.obs_dim != obs_dim:
        raise ConfigError(
            "target_policy",
            f"{spec} takes {loaded.obs_dim}-dimensional observations but the "
            f"dataset's observation space {observation_space} has {obs_dim}; give a policy "
            "trained on observations of this space",
        )
    for fn in (loaded.probs, loaded.imitation):
        if fn is not None:
            _check_on_public(spec, fn, A, observation_space)
    try:
        probs = checkpoint_probs(loaded, path, mode, epsilon)
    except ValueError as exc:
        raise ConfigError("target_policy", f"{spec}: {exc}") from None
    return TargetPolicy(spec, A, probs)
