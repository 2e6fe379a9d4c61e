"""Reading a policy in any form privrl accepts: what `privrl eval` rolls out and what the OPE
commands' target-policy resolver (`privrl.ope.targets`) evaluates.

Forms read (`load_policy` for the files the training commands write, `load_any_policy` for
every form):

* ``policy.npz`` with ``kind = "privrl.finite_horizon_tabular_policy"`` — a deterministic
  time-dependent tabular policy π_h(s) ``[H, S]`` (`privrl train apvi | dp-apvi`).
* ``FILE.npy`` — a table π(a|s): ``[S, A]`` (stationary), ``[H, S, A]`` (time-indexed,
  h = 0..H-1 in code) or ``[A]`` (context-free); every row a distribution (`read_table`,
  `table_problem`). Acts by drawing from its row.
* ``policy.pt`` — a SAC or TD3 agent's state (`privrl train mopo | primorl`; the file records
  its kind, sizes, action bounds and config). Acts with its deterministic (mean) action.
* ``learner.pt`` — a discrete-action learner's state (`privrl train expert-dp | dp-sgd`:
  discrete CQL or BCQ; the file records its config). Acts greedily; ``LoadedPolicy.probs``
  gives the greedy action as a one-hot for a batch of observations and, for BCQ,
  ``LoadedPolicy.imitation`` the softmax of its behaviour-cloning classifier's logits.
  ``learner.pt:epsilon=E`` and ``learner.pt:imitation`` select the ε-greedy policy and (BCQ)
  the classifier (`parse_checkpoint`, `checkpoint_probs`).
* ``uniform`` — π(a|s) = 1/A over the actions of the space it is used in.
* ``module:function`` — user code called with a batch of observations ``[n, ...]`` returning
  ``[n, A]`` probabilities (`import_function`). Acts by drawing from its row.

Not policies, refused with a message that says so: PRIMORL's ``model.pt`` (a released dynamics
model), the linear systems' ``policy.npz`` (``kind = "privrl.linear_greedy_q"``: it needs the
feature map it was trained with).

Messages here name the policy by what the caller calls it (``what``): each caller adds its own
context (the OPE resolver names its option and the dataset's declared spaces).
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from privrl.policies import sample_from_probs

__all__ = [
    "ANY_FORMATS",
    "ATOL",
    "CHECKPOINT",
    "FORMATS",
    "LoadedPolicy",
    "TableError",
    "checkpoint_probs",
    "function_policy",
    "import_function",
    "load_any_policy",
    "load_policy",
    "parse_checkpoint",
    "read_table",
    "table_policy",
    "table_problem",
    "uniform_probs",
]

#: Tolerance of a row's sum in a table or user code's probabilities.
ATOL = 1e-6
#: ``PATH.pt`` or ``PATH.pth`` with an optional ``:mode`` (greedy, epsilon=E, imitation).
CHECKPOINT = re.compile(r"^(?P<path>.+\.pth?)(?::(?P<mode>[^:]*))?$")


@dataclass(frozen=True)
class LoadedPolicy:
    """A policy read from a file or code: ``act(obs, h, rng) -> action`` for one observation
    at step h (an action index for discrete actions), what it is, and the horizon it was
    learned for (a time-indexed table) or None.

    Attributes:
        kind: ``tabular`` (policy.npz), ``table`` (.npy), ``sac`` / ``td3``, ``cql`` / ``bcq``,
            ``function`` (module:function) or ``uniform``.
        spec: what the user gave (a path, a path with a mode, module:function).
        n_states: a per-state table's S (None for other forms).
        n_actions: the number of discrete actions (None: unknown before it is called, or a
            continuous policy).
        obs_dim / act_dim: a network's input size and (SAC/TD3) action size.
        probs: π(a|s) ``[n, A]`` for a batch of observations (discrete learners, tables, code).
        imitation: BCQ's behaviour-cloning classifier as ``[n, A]`` probabilities.
        stochastic: whether `act` draws from `rng` (a table or code that is not one-hot).
    """

    kind: str
    act: Callable[[Any, int, np.random.Generator], Any]
    horizon: int | None
    n_states: int | None = None
    n_actions: int | None = None
    obs_dim: int | None = None
    act_dim: int | None = None
    action_bounds: tuple[list[float], list[float]] | None = None
    probs: Callable[[np.ndarray], np.ndarray] | None = None
    imitation: Callable[[np.ndarray], np.ndarray] | None = None
    spec: str = ""
    stochastic: bool = False
    table: np.ndarray | None = None
    """A tabular policy's π as ``[H, S, A]`` / ``[S, A]`` / ``[A]`` (one-hot for policy.npz)."""


FORMATS = (
    "policy.npz (tabular, from train apvi | dp-apvi), policy.pt (SAC/TD3, from train mopo | "
    "primorl) or learner.pt (discrete CQL/BCQ, from train expert-dp | dp-sgd)"
)
ANY_FORMATS = (
    "uniform, a saved privrl policy.npz, policy.pt or learner.pt[:greedy|:epsilon=E|:imitation], a "
    "table FILE.npy (π(a|s) as [S, A], [H, S, A] or [A]) or module:function (returning [n, A] "
    "probabilities)"
)


class TableError(ValueError):
    """A table file that is missing or not numeric; `problem` says which (callers add the
    option or role and the formats they accept)."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


def read_table(path: Path, what: str = "") -> np.ndarray:
    """The table π(a|s) in a ``.npy`` file as float64 (no pickles); `TableError` when the file
    is missing or holds no numbers, `privrl.data.files.UnreadableFileError` when it is not a
    ``.npy`` array (`what` names the option or role in that message)."""
    if not Path(path).is_file():
        raise TableError("no such file")
    from privrl.data.files import read_npy

    table = read_npy(path, what)
    if not isinstance(table, np.ndarray) or not (
        np.issubdtype(table.dtype, np.floating) or np.issubdtype(table.dtype, np.integer)
    ):
        raise TableError("not a numeric array")
    return np.asarray(table, dtype=np.float64)


def table_problem(table: np.ndarray) -> str | None:
    """What is wrong with the rows of a table π(a|s) in themselves (None: every row is a
    distribution: finite, non-negative, summing to 1 within `ATOL`). Its shape against the
    spaces is the caller's check."""
    if not np.all(np.isfinite(table)):
        return "holds NaN or infinite values"
    if np.any(table < 0) or not np.allclose(table.sum(axis=-1), 1.0, atol=ATOL):
        return "every row must be a probability distribution (non-negative, summing to 1)"
    return None


def import_function(spec: str) -> Any:
    """The object ``function`` of ``module:function`` (ImportError or AttributeError if the
    module or the name does not exist; the caller says which option it was)."""
    module, _, name = str(spec).strip().partition(":")
    return getattr(importlib.import_module(module), name)


def parse_checkpoint(spec: str) -> tuple[Path, str, float | None] | None:
    """``PATH.pt[:mode]`` as (path, mode, ε of ``epsilon=E`` or None); None when `spec` names
    no checkpoint. ValueError (the problem alone) for an unknown mode or an ε outside [0, 1]."""
    match = CHECKPOINT.match(str(spec).strip())
    if match is None:
        return None
    path, mode = Path(match["path"]), (match["mode"] or "greedy").strip()
    if mode.startswith("epsilon="):
        try:
            epsilon = float(mode.partition("=")[2])
        except ValueError:
            epsilon = math.nan
        if not 0.0 <= epsilon <= 1.0:  # also refuses NaN
            raise ValueError(f"epsilon must be a number in [0, 1] (e.g. {path}:epsilon=0.1)")
        return path, mode, epsilon
    if mode not in ("greedy", "imitation"):
        raise ValueError(
            f"unknown mode {mode!r}; give {path}, {path}:greedy, {path}:epsilon=E or (BCQ) "
            f"{path}:imitation"
        )
    return path, mode, None


def checkpoint_probs(
    loaded: LoadedPolicy, path: Path, mode: str, epsilon: float | None
) -> Callable[[np.ndarray], np.ndarray]:
    """π(a|s) ``[n, A]`` of a discrete learner in `mode`: greedy (one-hot), ε-greedy
    ((1 − ε)·1[a = greedy] + ε/A) or BCQ's imitation classifier. ValueError (the problem
    alone) for a learner without that policy."""
    if mode == "imitation":
        if loaded.imitation is None:
            raise ValueError(
                f"only a BCQ learner has an imitation classifier (this is {loaded.kind}); use "
                f"{path} or {path}:epsilon=E"
            )
        return loaded.imitation
    greedy = loaded.probs
    if greedy is None or loaded.n_actions is None:
        raise ValueError(
            f"a {loaded.kind} policy has no discrete action probabilities (SAC/TD3 act in a "
            "continuous box)"
        )
    if epsilon is None:
        return greedy
    eps, A = float(epsilon), int(loaded.n_actions)
    return lambda obs: (1.0 - eps) * greedy(obs) + eps / A


# ---------------------------------------------------------------------------------------------
# every form
# ---------------------------------------------------------------------------------------------


def load_any_policy(spec: str | Path, *, what: str = "policy") -> LoadedPolicy:
    """A policy in any form of the module docstring; ValueError naming the problem and the
    forms accepted otherwise (`what` names the policy in messages)."""
    spec = str(spec).strip()
    if spec == "uniform":  # π(a|s) = 1/A, A from the environment (`function_policy` there)
        return LoadedPolicy("uniform", _uniform_unbound, None, spec=spec, stochastic=True)
    if CHECKPOINT.match(spec):
        return _checkpoint(spec, what)
    if spec.endswith(".npy"):
        return _table_file(spec, what)
    if spec.endswith(".npz"):
        return replace(load_policy(Path(spec)), spec=spec)
    module, sep, name = spec.partition(":")
    if sep and module and name and "/" not in module:
        try:
            fn = import_function(spec)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{what} {spec}: cannot import it ({exc})") from None
        if not callable(fn):
            raise ValueError(f"{what} {spec} is not callable")
        return function_policy(spec, fn)
    if not Path(spec).is_file():
        raise ValueError(f"policy file not found: {spec} (give {ANY_FORMATS})")
    raise ValueError(f"unknown policy file {Path(spec).name}: give {ANY_FORMATS}")


def _uniform_unbound(obs: Any, h: int, rng: np.random.Generator) -> int:
    raise ValueError("the uniform policy needs the number of actions: bind it to a space first")


def uniform_probs(n_actions: int) -> Callable[[np.ndarray], np.ndarray]:
    """π(a|s) = 1/A for a batch of observations."""
    return lambda obs: np.full((len(obs), int(n_actions)), 1.0 / int(n_actions))


def _checkpoint(spec: str, what: str) -> LoadedPolicy:
    try:
        parsed = parse_checkpoint(spec)
    except ValueError as exc:
        raise ValueError(f"{what} {spec}: {exc}") from None
    assert parsed is not None
    path, mode, epsilon = parsed
    loaded = replace(load_policy(path), spec=spec)
    if mode == "greedy" and epsilon is None:
        return loaded
    try:
        probs = checkpoint_probs(loaded, path, mode, epsilon)
    except ValueError as exc:
        raise ValueError(f"{what} {spec}: {exc}") from None
    return replace(loaded, act=_drawing(probs, spec), probs=probs, stochastic=True)


def _drawing(
    probs: Callable[[np.ndarray], np.ndarray], spec: str, n_actions: int | None = None
) -> Callable[[Any, int, np.random.Generator], int]:
    """``act`` that draws one action from ``probs(obs[None])``, refusing a row that is not a
    distribution over `n_actions` actions (when known)."""

    def act(obs: Any, h: int, rng: np.random.Generator) -> int:
        p = np.asarray(probs(np.asarray(obs)[None]), dtype=np.float64)
        want = f"(1, {n_actions})" if n_actions is not None else "(1, A)"
        if p.ndim != 2 or p.shape[0] != 1 or (n_actions is not None and p.shape[1] != n_actions):
            raise ValueError(
                f"policy {spec} returned shape {p.shape} for one observation; it must return "
                f"action probabilities of shape {want}"
            )
        problem = table_problem(p)
        if problem is not None:
            raise ValueError(f"policy {spec} on observation {np.asarray(obs).tolist()}: {problem}")
        return int(sample_from_probs(p, rng)[0])

    return act


def function_policy(
    spec: str, fn: Callable[[np.ndarray], Any], *, n_actions: int | None = None
) -> LoadedPolicy:
    """User code ``fn(obs [n, ...]) -> [n, A]`` as a policy that draws its actions from the
    probabilities it returns (each call checked: shape ``(1, A)``, a distribution)."""
    return LoadedPolicy(
        "function",
        _drawing(fn, spec, n_actions),
        None,
        n_actions=n_actions,
        probs=fn,
        spec=spec,
        stochastic=True,
    )


def table_policy(spec: str, table: np.ndarray) -> LoadedPolicy:
    """A table π(a|s) (``[A]``, ``[S, A]`` or ``[H, S, A]``, rows already checked) as a
    policy over state indices 0..S-1 that draws from its row; step h ≥ H uses row H-1."""
    table = np.array(table, dtype=np.float64)
    table.flags.writeable = False
    H = int(table.shape[0]) if table.ndim == 3 else None

    def row(s: int, h: int) -> np.ndarray:
        if table.ndim == 1:
            return table
        if table.ndim == 2:
            return table[s]
        return table[min(h, table.shape[0] - 1), s]

    def act(obs: Any, h: int, rng: np.random.Generator) -> int:
        return int(sample_from_probs(row(int(obs), h)[None], rng)[0])

    return LoadedPolicy(
        "table",
        act,
        H,
        n_states=int(table.shape[-2]) if table.ndim >= 2 else None,
        n_actions=int(table.shape[-1]),
        spec=spec,
        stochastic=not np.all((table == 0.0) | (table == 1.0)),
        table=table,
    )


def _table_file(spec: str, what: str) -> LoadedPolicy:
    try:
        table = read_table(Path(spec), what)
    except TableError as exc:
        if exc.problem == "no such file":
            raise ValueError(f"policy file not found: {spec} (give {ANY_FORMATS})") from None
        raise ValueError(f"{what} {spec}: {exc.problem}; give {ANY_FORMATS}") from None
    if table.ndim not in (1, 2, 3):
        raise ValueError(
            f"{what} {spec}: a table π(a|s) has shape [A], [S, A] or [H, S, A], not {table.shape}"
        )
    problem = table_problem(table)
    if problem is not None:
        if table.ndim <= 2 and np.all(np.isfinite(table)) and np.all(table == np.round(table)):
            problem += (
                "; a table of actions ([S] or [H, S]) is not a table π(a|s): give its one-hot "
                "probabilities, numpy.eye(A)[actions]"
            )
        raise ValueError(f"{what} {spec}: {problem}")
    return table_policy(spec, table)


# ---------------------------------------------------------------------------------------------
# the files the training commands write
# ---------------------------------------------------------------------------------------------


def load_policy(path: Path) -> LoadedPolicy:
    """Read a saved privrl policy file (policy.npz, policy.pt, learner.pt); ValueError naming
    the problem and the formats accepted otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"policy file not found: {path} (give {FORMATS})")
    if path.suffix == ".npz":
        return _load_npz(path)
    if path.suffix in (".pt", ".pth"):
        return replace(_load_torch(path), spec=str(path))
    raise ValueError(f"unknown policy file {path.name}: give {FORMATS}")


def _load_npz(path: Path) -> LoadedPolicy:
    from privrl.data.files import read_npz
    from privrl.rl.tabular_policy import FiniteHorizonPolicy

    f = read_npz(path, "policy")
    kind = str(f["kind"]) if "kind" in f else None
    if kind == "privrl.linear_greedy_q":
        raise ValueError(
            f"{path} is a linear-MDP policy: it needs the feature map it was trained with, "
            "which an environment id does not give; its training command (privrl train vapvi | "
            "dp-vapvi on the built-in linear MDP) reports its value instead"
        )
    if kind != FiniteHorizonPolicy.KIND:
        raise ValueError(f"{path} is not a privrl policy (kind={kind!r}); give {FORMATS}")
    pol = FiniteHorizonPolicy.load(path)
    H = pol.H

    def act(obs: Any, h: int, rng: np.random.Generator) -> Any:
        return int(pol.actions[min(h, H - 1), int(obs)])

    return LoadedPolicy(
        "tabular",
        act,
        H,
        n_states=pol.S,
        n_actions=pol.n_actions,
        spec=str(path),
        table=np.eye(pol.n_actions)[pol.actions],
    )


def _load_torch(path: Path) -> LoadedPolicy:
    from privrl.data.files import read_torch

    state = read_torch(path, "policy")
    if not isinstance(state, dict):
        raise ValueError(f"{path} is not a privrl policy checkpoint; give {FORMATS}")
    if state.get("kind") in ("sac", "td3"):
        return _box_agent(path, state)
    config = state.get("config")
    if isinstance(config, dict) and config.get("algorithm") in ("cql", "bcq") and "params" in state:
        return _discrete_learner(path, state)
    if "dynamics" in state or "ensemble" in state or "model" in state:
        raise ValueError(
            f"{path} is a dynamics model, not a policy (PRIMORL's model.pt); evaluate the "
            "policy.pt of the same run"
        )
    raise ValueError(f"{path} is not a privrl policy checkpoint; give {FORMATS}")


def _box_agent(path: Path, state: dict[str, Any]) -> LoadedPolicy:
    from privrl.rl.sac import SAC, SACConfig
    from privrl.rl.td3 import TD3, TD3Config

    cls, config_cls = (SAC, SACConfig) if state["kind"] == "sac" else (TD3, TD3Config)
    try:
        config = config_cls(**state["config"])
        agent = cls(
            state["obs_dim"], state["act_dim"], state["action_low"], state["action_high"], config
        )
        agent.load_state_dict(state)
    except (KeyError, TypeError, RuntimeError) as exc:
        raise ValueError(f"{path}: not a complete {state['kind']} checkpoint ({exc})") from None

    def act(obs: Any, h: int, rng: np.random.Generator) -> Any:
        return agent.act(np.asarray(obs, dtype=np.float32).reshape(1, -1), deterministic=True)[0]

    return LoadedPolicy(
        state["kind"],
        act,
        None,
        obs_dim=int(state["obs_dim"]),
        act_dim=int(state["act_dim"]),
        action_bounds=(list(state["action_low"]), list(state["action_high"])),
    )


def _discrete_learner(path: Path, state: dict[str, Any]) -> LoadedPolicy:
    from privrl.rl.bcq import DiscreteBCQ
    from privrl.rl.cql import DiscreteCQL
    from privrl.rl.discrete_common import DiscreteLearner, ObsTransform

    config = dict(state["config"])
    cls = DiscreteCQL if config["algorithm"] == "cql" else DiscreteBCQ
    accepted = set(inspect.signature(cls.__init__).parameters) | set(
        inspect.signature(DiscreteLearner.__init__).parameters
    )
    kwargs = {k: v for k, v in config.items() if k in accepted and k not in ("self", "common")}
    kwargs["obs_transform"] = ObsTransform.from_dict(config.get("obs_transform"))
    try:
        obs_dim, n_actions = int(kwargs.pop("obs_dim")), int(kwargs.pop("n_actions"))
        learner = cls(obs_dim, n_actions, **kwargs)
        learner.load_state_dict(state)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(
            f"{path}: not a complete {config['algorithm']} checkpoint ({exc})"
        ) from None

    def act(obs: Any, h: int, rng: np.random.Generator) -> Any:
        return int(learner.act(np.asarray(obs, dtype=np.float32).reshape(1, -1))[0])

    def greedy_probs(obs: np.ndarray) -> np.ndarray:
        """The greedy policy as a distribution: one-hot ``[n, A]`` on the action `act` takes."""
        x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        return np.eye(n_actions)[learner.act(x)]

    imitation = None
    if isinstance(learner, DiscreteBCQ):

        def imitation(obs: np.ndarray) -> np.ndarray:
            return learner.imitation_probs(np.asarray(obs, dtype=np.float32).reshape(len(obs), -1))

    return LoadedPolicy(
        config["algorithm"],
        act,
        None,
        obs_dim=obs_dim,
        n_actions=n_actions,
        probs=greedy_probs,
        imitation=imitation,
    )
