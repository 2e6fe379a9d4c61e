"""`canary=FILE`: a canary unit given as a privrl dataset file (HDF5).

The file is the audit's own, public input (the unit the auditor inserts), never the private
data. What it must hold depends on the audited system's unit (docs/audit.md, "Canaries"):

- DP-APVI, SDP-PE: one episode of the audited MDP — `Discrete(S)` observations, `Discrete(A)`
  actions, H steps (and, for SDP-PE, binary rewards) (`load_tabular_canary`);
- DP-LSW: one episode with `Discrete(S)` observations visiting every state; its first-visit
  returns (undiscounted, clipped to the declared return range) (`load_lsw_canary`);
- DP-VAPVI: one episode with `Box((d,))` observations: φ is its first observation (scaled to
  ‖φ‖ ≤ 1), its return (clipped to [0, H]) the next value (`load_feature_canary`);
- GPOPE: one episode and a declared feature map (`feature_map`, a privrl feature spec built
  on the file's observation space, of the audit's n features): its per-trajectory (Â, b̂, Ĉ)
  on-policy (ρ = 1) at the audit's γ (`load_gpope_canary`);
- DP-SGD: one episode (or one transition) with `Box((p,))` observations, p the audited model's
  dimension: the unit's input is the mean of its transitions' observations
  (`load_gradient_canary`);
- DP-SGD `mode='one-run'`: m episodes (m = `canaries`), each a unit as above with
  `Box((1 + dim,))` observations: unit j's first input goes on its own coordinate j, the rest
  on the background's `dim` inputs, as the worst canaries are (`load_gradient_canaries`);
- expert-dp-sgd and PRIMORL (one run): m canary units (m = `canaries`): m experts (unit ids;
  without ids, one episode each) or m trajectories, with `Box((1 + 2,))` observations and
  `Discrete(2)` actions; each observation's first input goes on the unit's own coordinate j,
  the other two on the background's inputs, as the worst canaries are
  (`load_one_run_canaries`);
- expert-dp's filter: one expert's episodes with `Discrete(L)` observations and `Discrete(A)`
  actions: its greedy action in each state is the one it takes most often there
  (`load_expert_canary`).

A mismatch is refused with a `ConfigError` on the field `canary` whose message names the
setting to change and the audit's value. Declared bounds
(‖φ‖ ≤ 1, the return range) are enforced by scaling or clipping, as the systems do. A file
whose episodes have a privacy ledger (`privrl.privacy.ledger.ledgered`) is refused before its
records are read (`refuse_ledgered`): an audit publishes statistics of its canary with no
mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.config import ConfigError

__all__ = [
    "CANARY_SUFFIXES",
    "CanaryEpisode",
    "TabularCanary",
    "is_canary_file",
    "load_expert_canary",
    "load_feature_canary",
    "load_gpope_canary",
    "load_gradient_canaries",
    "load_gradient_canary",
    "load_lsw_canary",
    "load_one_run_canaries",
    "load_tabular_canary",
    "place_on_own_coordinate",
    "refuse_ledgered",
]

CANARY_SUFFIXES = (".h5", ".hdf5")


def is_canary_file(value: str) -> bool:
    """Whether a `canary` value names a dataset file (rather than 'worst' / 'random')."""
    return str(value).lower().endswith(CANARY_SUFFIXES)


@dataclass(frozen=True)
class TabularCanary:
    """One tabular episode: states [H + 1], actions [H], rewards [H]."""

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray


def _load(path: str | Path) -> tuple[str, Any]:
    from privrl.data.io import load_hdf5

    where = str(path)
    if not Path(path).is_file():
        raise ConfigError(
            "canary", f"{where}: no such file; give a privrl dataset (.h5) holding the canary"
        )
    refuse_ledgered(path)
    return where, load_hdf5(path)


def refuse_ledgered(path: str | Path) -> None:
    """Refuse a canary file whose episodes have a privacy budget, before its records are read.

    An audit publishes scores, an AUC and a threshold computed from the canary's records over
    many runs, with no mechanism between them and the output: an audit of a ledgered file would
    publish its data unprotected. The check reads only the file's attributes and the ledger
    registry (`privrl.privacy.ledger.ledgered`); since a ledger belongs to the episodes'
    content, a copy or re-export of the same episodes is refused too.
    """
    from privrl.privacy.ledger import ledgered

    why = ledgered(path)
    if why is not None:
        raise ConfigError(
            "canary",
            f"{path}: refused, {why}: an audit's outputs (scores, AUC, threshold) are "
            "computed from the canary's records without a privacy mechanism, so they would "
            "publish that data unprotected; write the canary from synthetic or public episodes "
            "into a file of its own (no ledger, not a copy of ledgered episodes) or use a "
            "synthetic canary (`canary=worst` or `canary=random`)",
        )


def _one_episode(where: str, ds: Any) -> Any:
    if ds.n_episodes != 1:
        raise ConfigError(
            "canary", f"{where}: holds {ds.n_episodes} episodes; a canary is one episode"
        )
    return ds.episode(0)


def _discrete(where: str, name: str, space: Any, n: int, setting: str) -> None:
    from gymnasium import spaces

    if not isinstance(space, spaces.Discrete) or int(space.n) != n:
        raise ConfigError(
            "canary",
            f"{where}: its {name} space is {space}, the audit's is Discrete({n}); write the "
            f"canary in the audited problem's spaces or set {setting}",
        )


def _box(where: str, space: Any, p: int, what: str, fix: str) -> None:
    from gymnasium import spaces

    if not isinstance(space, spaces.Box) or tuple(space.shape) != (p,):
        raise ConfigError(
            "canary",
            f"{where}: its observation space is {space}, the audit's {what} is Box(shape=({p},)); "
            f"{fix}",
        )


def load_tabular_canary(
    path: str | Path, *, H: int, S: int, A: int, binary_rewards: bool = False
) -> TabularCanary:
    """The canary episode of `path`, checked against the audit's H, S, A."""
    from gymnasium import spaces

    where, ds = _load(path)
    md = ds.metadata
    for name, space, n, setting in (
        ("observation", md.observation_space, S, "`states`"),
        ("action", md.action_space, A, "`actions`"),
    ):
        if not isinstance(space, spaces.Discrete) or int(space.n) != n:
            raise ConfigError(
                "canary",
                f"{where}: its {name} space is {space}, the audit's is Discrete({n}); write the "
                f"canary in the audited MDP's spaces or set {setting}",
            )
    ep = _one_episode(where, ds)
    if ep.length != H:
        raise ConfigError(
            "canary",
            f"{where}: its episode has {ep.length} steps, the audit's horizon is H = {H}; "
            "give an episode of H steps or set `horizon`",
        )
    rewards = np.asarray(ep.rewards, dtype=np.float64)
    if binary_rewards and not np.all((rewards == 0) | (rewards == 1)):
        raise ConfigError(
            "canary", f"{where}: SDP-PE's rewards are binary; the canary's must be 0 or 1"
        )
    return TabularCanary(
        states=np.asarray(ep.observations, dtype=np.int64).reshape(H + 1),
        actions=np.asarray(ep.actions, dtype=np.int64).reshape(H),
        rewards=rewards,
    )


def load_lsw_canary(path: str | Path, *, S: int, return_range: float) -> np.ndarray:
    """DP-LSW's canary trajectory: its first-visit return from each of the S states [S]
    (undiscounted, clipped to [0, return_range], the declared range). Every state must be
    visited: the audit's trajectories all visit every state (tabular Φ = I)."""
    where, ds = _load(path)
    _discrete(where, "observation", ds.metadata.observation_space, S, "`states`")
    ep = _one_episode(where, ds)
    obs = np.asarray(ep.observations, dtype=np.int64).reshape(-1)[: ep.length]
    rewards = np.asarray(ep.rewards, dtype=np.float64).reshape(-1)
    missing = sorted(set(range(S)) - set(obs.tolist()))
    if missing:
        raise ConfigError(
            "canary",
            f"{where}: its episode never visits state(s) {missing[:5]}; DP-LSW's audit has "
            f"every trajectory visit all S = {S} states (set `states` or extend the episode)",
        )
    to_go = np.cumsum(rewards[::-1])[::-1]  # return-to-go from each step
    first = np.array([int(np.flatnonzero(obs == s)[0]) for s in range(S)])
    return np.clip(to_go[first], 0.0, float(return_range))


def load_feature_canary(path: str | Path, *, d: int, H: int) -> tuple[np.ndarray, float]:
    """DP-VAPVI's canary: φ = the episode's first observation scaled to ‖φ‖ ≤ 1 (the declared
    feature bound) and its next value V = its return clipped to [0, H]."""
    where, ds = _load(path)
    _box(where, ds.metadata.observation_space, d, "feature map φ", "set `features`")
    ep = _one_episode(where, ds)
    phi = np.asarray(ep.observations, dtype=np.float64).reshape(-1, d)[0]
    if not np.all(np.isfinite(phi)):
        raise ConfigError("canary", f"{where}: its first observation is not finite")
    phi = phi / max(float(np.linalg.norm(phi)), 1.0)
    value = float(np.clip(np.sum(np.asarray(ep.rewards, dtype=np.float64)), 0.0, float(H)))
    return phi, value


def load_gpope_canary(
    path: str | Path, *, feature_map: str | None, n: int, gamma: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPOPE's canary trajectory: its (Â, b̂, Ĉ) [n, n], [n], [n, n] (Xie et al. 2019, eq. 2.2)
    under the declared feature map `feature_map` (a privrl feature spec, built on the file's
    observation space; its dimension must be the audit's n), on-policy (ρ = 1)."""
    from privrl.ope.stats import trajectory_stats
    from privrl.rl.features import make_features

    if not feature_map:
        raise ConfigError(
            "feature_map",
            f"is required with the canary file {path}: GPOPE's canary file needs a declared "
            "feature map SPEC (e.g. onehot, fourier:3) of n = `features` dimensions",
        )
    where, ds = _load(path)
    try:
        phi = make_features(feature_map, ds.metadata.observation_space)
    except ValueError as exc:
        raise ConfigError(
            "feature_map", f"{feature_map} on the canary file {where}: {exc}"
        ) from exc
    if int(phi.dim) != n:
        raise ConfigError(
            "canary",
            f"{where}: `feature_map={feature_map}` on its observation space "
            f"{ds.metadata.observation_space} has {phi.dim} features, the audit's is n = {n}; "
            f"set `features={phi.dim}` or choose another feature map",
        )
    _one_episode(where, ds)
    stats = trajectory_stats(ds, phi, gamma)
    A, b, C = stats.A[0], stats.b[0], stats.C[0]
    if not (np.all(np.isfinite(A)) and np.all(np.isfinite(b)) and np.all(np.isfinite(C))):
        raise ConfigError("canary", f"{where}: its statistics are not finite (check its rewards)")
    return A, b, C


def load_gradient_canary(path: str | Path, *, p: int) -> np.ndarray:
    """DP-SGD's canary unit x [p] (its gradient is −x, clipped to C by the mechanism): the mean
    of the observations of its transitions (one transition: that observation)."""
    where, ds = _load(path)
    _box(
        where,
        ds.metadata.observation_space,
        p,
        "model input",
        "write the unit's observations as vectors of the model's p inputs",
    )
    ep = _one_episode(where, ds)
    obs = np.asarray(ep.observations, dtype=np.float64).reshape(-1, p)[: max(ep.length, 1)]
    if not np.all(np.isfinite(obs)):
        raise ConfigError("canary", f"{where}: its observations are not finite")
    return obs.mean(axis=0)


def load_gradient_canaries(path: str | Path, *, p: int, m: int) -> np.ndarray:
    """DP-SGD's m one-run canary units [m, p] (p = 1 + the background's inputs): unit j is the
    mean of the observations of episode j. Each is placed on its own input coordinate by the
    audit (`privrl.audit.dpsgd`)."""
    where, ds = _load(path)
    _box(
        where,
        ds.metadata.observation_space,
        p,
        "canary unit",
        f"write each unit's observations as 1 + {p - 1} inputs (its own coordinate first)",
    )
    if ds.n_episodes != m:
        raise ConfigError(
            "canary",
            f"{where}: holds {ds.n_episodes} episodes, the audit inserts `canaries={m}`; give "
            f"one episode per canary or set `canaries={ds.n_episodes}`",
        )
    units = np.empty((m, p))
    for j in range(m):
        ep = ds.episode(j)
        obs = np.asarray(ep.observations, dtype=np.float64).reshape(-1, p)[: max(ep.length, 1)]
        units[j] = obs.mean(axis=0)
    if not np.all(np.isfinite(units)):
        raise ConfigError("canary", f"{where}: its observations are not finite")
    zero = np.flatnonzero(~units.any(axis=1))
    if zero.size:
        raise ConfigError(
            "canary",
            f"{where}: canary unit(s) {zero[:5].tolist()} are 0: their gradient moves nothing; "
            "give nonzero units",
        )
    return units


@dataclass(frozen=True)
class CanaryEpisode:
    """One episode of a one-run canary unit, before it is placed on its own coordinate:
    observations [T + 1, 1 + k], actions [T], rewards [T], whether it ends terminated."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: bool


def load_one_run_canaries(
    path: str | Path,
    *,
    m: int,
    inputs: int,
    actions: int,
    unit: str,
    continuous: bool = False,
) -> list[list[CanaryEpisode]]:
    """The m canary units of a one-run audit, each a list of its episodes. `unit` is
    ``"expert"`` (episodes grouped by unit id, sorted; one episode per expert without ids) or
    ``"trajectory"`` (one episode per unit). Observations must be `Box((inputs,))`, actions
    `Discrete(actions)` (`continuous`: `Box((actions,))`), everything finite; rewards are
    taken as they are."""
    from gymnasium import spaces

    where, ds = _load(path)
    md = ds.metadata
    _box(
        where,
        md.observation_space,
        inputs,
        "canary input",
        f"write each observation as 1 + {inputs - 1} inputs (the unit's own coordinate first)",
    )
    if not continuous:
        _discrete(
            where, "action", md.action_space, actions, "no setting: the audit's learner has 2"
        )
    elif not isinstance(md.action_space, spaces.Box) or md.action_space.shape != (actions,):
        raise ConfigError(
            "canary",
            f"{where}: its action space is {md.action_space}, the audit's is "
            f"Box(shape=({actions},)); write the canary's actions as {actions}-vectors",
        )
    ids = np.asarray(ds.episode_unit_ids)
    if unit == "trajectory":
        ids = np.arange(ds.n_episodes)
    groups = np.unique(ids)
    noun = "experts (unit ids)" if unit == "expert" else "episodes"
    if groups.size != m:
        raise ConfigError(
            "canary",
            f"{where}: holds {groups.size} {noun}, the audit inserts `canaries={m}`; give one "
            f"{unit} per canary or set `canaries={groups.size}`",
        )
    units: list[list[CanaryEpisode]] = [[] for _ in range(m)]
    slot = {int(g): j for j, g in enumerate(groups.tolist())}
    for i in range(ds.n_episodes):
        ep = ds.episode(i)
        if ep.length < 1:
            raise ConfigError(
                "canary", f"{where}: episode {i} has no step; give episodes of >= 1 step"
            )
        obs = np.asarray(ep.observations, dtype=np.float64).reshape(-1, inputs)
        rewards = np.asarray(ep.rewards, dtype=np.float64).reshape(-1)
        if not (np.all(np.isfinite(obs)) and np.all(np.isfinite(rewards))):
            raise ConfigError(
                "canary", f"{where}: episode {i} has non-finite observations or rewards"
            )
        act = np.asarray(ep.actions)
        if continuous and not np.all(np.isfinite(act)):
            raise ConfigError("canary", f"{where}: episode {i} has non-finite actions")
        units[slot[int(ids[i])]].append(
            CanaryEpisode(
                observations=obs,
                actions=(
                    act.astype(np.float32).reshape(-1, actions)
                    if continuous
                    else act.astype(np.int64).reshape(-1)
                ),
                rewards=rewards,
                terminated=bool(np.asarray(ep.terminated)[-1]),
            )
        )
    return units


def synthetic_episode(
    obs: np.ndarray,
    act: np.ndarray,
    reward: Any,
    *,
    terminal: bool = False,
    unit: int | None = None,
) -> dict[str, Any]:
    """One synthetic (public) episode for `TrajectoryDataset.from_episodes`: `reward` (a
    number or one per step) on every step, its last step terminated or truncated, and its
    unit id where given."""
    n = act.shape[0]
    end = np.zeros(n, bool)
    end[-1] = True
    episode = {
        "observations": obs,
        "actions": act,
        "rewards": np.broadcast_to(np.asarray(reward, np.float32), (n,)).copy(),
        "terminated": end if terminal else np.zeros(n, bool),
        "truncated": np.zeros(n, bool) if terminal else end,
    }
    if unit is not None:
        episode["unit_id"] = unit
    return episode


def background_walk(steps: int, m: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """Observations [steps + 1, m + dim] of a background unit of a one-run audit: 0 on the m
    canaries' own coordinates, a Gaussian random walk (step sd 0.3) on the last `dim`."""
    s = np.zeros((steps + 1, m + dim), np.float32)
    s[:, m:] = np.cumsum(rng.normal(0.0, 0.3, size=(steps + 1, dim)), axis=0)
    return s


def place_on_own_coordinate(episode: CanaryEpisode, j: int, m: int) -> np.ndarray:
    """Observations [T + 1, m + k] of canary j's episode: its first input on coordinate j (the
    unit's own, no other unit's data touch it), its other k inputs on the last k coordinates
    (the background's), as the worst canaries are built."""
    obs = episode.observations
    out = np.zeros((obs.shape[0], m + obs.shape[1] - 1), np.float32)
    out[:, j] = obs[:, 0]
    out[:, m:] = obs[:, 1:]
    return out


def load_expert_canary(path: str | Path, *, L: int, A: int) -> np.ndarray:
    """expert-dp's canary expert: its greedy action in each of τ's states 0..L−1 [L], the
    action its episodes take most often there (ties: the smallest); −1 for a state its episodes
    never visit (the audit draws a uniformly random action there, as ``random``)."""
    where, ds = _load(path)
    md = ds.metadata
    _discrete(where, "observation", md.observation_space, L, "`max_len`")
    _discrete(where, "action", md.action_space, A, "`actions`")
    if ds.n_episodes < 1:
        raise ConfigError("canary", f"{where}: holds no episode; give the canary expert's episodes")
    ids = getattr(ds, "unit_ids", None)
    if ids is not None and np.unique(np.asarray(ids)).size > 1:
        raise ConfigError(
            "canary",
            f"{where}: holds {np.unique(np.asarray(ids)).size} experts (unit ids); a canary is "
            "one expert's episodes",
        )
    tally = np.zeros((L, A), dtype=np.int64)
    for i in range(ds.n_episodes):
        ep = ds.episode(i)
        obs = np.asarray(ep.observations, dtype=np.int64).reshape(-1)[: ep.length]
        np.add.at(tally, (obs, np.asarray(ep.actions, dtype=np.int64).reshape(-1)), 1)
    greedy = tally.argmax(axis=1)
    unseen = tally.sum(axis=1) == 0
    greedy[unseen] = -1
    return greedy.astype(np.int64)
