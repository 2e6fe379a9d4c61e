"""Reading a saved privrl policy: what `privrl eval` rolls out and what the OPE commands'
``--target-policy DIR/learner.pt`` evaluates.

Formats read (what the training commands write):

* ``policy.npz`` with ``kind = "privrl.finite_horizon_tabular_policy"`` — a deterministic
  time-dependent tabular policy π_h(s) ``[H, S]`` (`privrl train apvi | dp-apvi`).
* ``policy.pt`` — a SAC or TD3 agent's state (`privrl train mopo | primorl`; the file records
  its kind, sizes, action bounds and config). Acts with its deterministic (mean) action.
* ``learner.pt`` — a discrete-action learner's state (`privrl train expert-dp | dp-sgd`:
  discrete CQL or BCQ; the file records its config). Acts greedily; ``LoadedPolicy.probs``
  gives the greedy action as a one-hot for a batch of observations and, for BCQ,
  ``LoadedPolicy.imitation`` the softmax of its behaviour-cloning classifier's logits.

Not policies, refused with a message that says so: PRIMORL's ``model.pt`` (a released dynamics
model), the linear systems' ``policy.npz`` (``kind = "privrl.linear_greedy_q"``: it needs the
feature map it was trained with).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class LoadedPolicy:
    """A policy read from a file: ``act(obs [1, ...], h, rng) -> action``, what it is, and
    the horizon it was learned for (tabular) or None."""

    kind: str
    act: Any
    horizon: int | None
    n_states: int | None = None
    n_actions: int | None = None
    obs_dim: int | None = None
    act_dim: int | None = None
    action_bounds: tuple[list[float], list[float]] | None = None
    probs: Any = None
    imitation: Any = None


FORMATS = (
    "policy.npz (tabular, from train apvi | dp-apvi), policy.pt (SAC/TD3, from train mopo | "
    "primorl) or learner.pt (discrete CQL/BCQ, from train expert-dp | dp-sgd)"
)


def load_policy(path: Path) -> LoadedPolicy:
    """Read a saved privrl policy (see the module docstring); ValueError naming the problem
    and the formats accepted otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"policy file not found: {path} (give {FORMATS})")
    if path.suffix == ".npz":
        return _load_npz(path)
    if path.suffix in (".pt", ".pth"):
        return _load_torch(path)
    raise ValueError(f"unknown policy file {path.name}: give {FORMATS}")


def _load_npz(path: Path) -> LoadedPolicy:
    from privrl.data.files import read_npz
    from privrl.rl.tabular_policy import FiniteHorizonPolicy

    f = read_npz(path, "policy")
    kind = str(f["kind"]) if "kind" in f else None
    if kind == "privrl.linear_greedy_q":
        raise ValueError(
            f"{path} is a linear-MDP policy: it needs the feature map it was trained with, "
            "which an environment id does not give; evaluate it with the training command's "
            "--env instead"
        )
    if kind != FiniteHorizonPolicy.KIND:
        raise ValueError(f"{path} is not a privrl policy (kind={kind!r}); give {FORMATS}")
    pol = FiniteHorizonPolicy.load(path)
    H = pol.H

    def act(obs: Any, h: int, rng: np.random.Generator) -> Any:
        return int(pol.actions[min(h, H - 1), int(obs)])

    return LoadedPolicy("tabular", act, H, n_states=pol.S, n_actions=pol.n_actions)


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
