"""`--canary FILE`: a canary unit given as a privrl dataset file (HDF5).

The file is the audit's own, public input (the unit the auditor inserts), never the private
data. It must hold exactly one episode of the audited MDP: discrete observation and action
spaces of the audit's S and A, length H (and, for SDP-PE, binary rewards). A mismatch is
refused with a message naming the field and the audit's value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["CANARY_SUFFIXES", "TabularCanary", "is_canary_file", "load_tabular_canary"]

CANARY_SUFFIXES = (".h5", ".hdf5")


def is_canary_file(value: str) -> bool:
    """Whether a --canary value names a dataset file (rather than 'worst' / 'random')."""
    return str(value).lower().endswith(CANARY_SUFFIXES)


@dataclass(frozen=True)
class TabularCanary:
    """One tabular episode: states [H + 1], actions [H], rewards [H]."""

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray


def load_tabular_canary(
    path: str | Path, *, H: int, S: int, A: int, binary_rewards: bool = False
) -> TabularCanary:
    """The canary episode of `path`, checked against the audit's H, S, A."""
    from gymnasium import spaces

    from privrl.data.io import load_hdf5

    where = f"--canary {path}"
    if not Path(path).is_file():
        raise ValueError(f"{where}: no such file; give a privrl dataset (.h5) holding the canary")
    ds = load_hdf5(path)
    md = ds.metadata
    for name, space, n, flag in (
        ("observation", md.observation_space, S, "--states"),
        ("action", md.action_space, A, "--actions"),
    ):
        if not isinstance(space, spaces.Discrete) or int(space.n) != n:
            raise ValueError(
                f"{where}: its {name} space is {space}, the audit's is Discrete({n}); write the "
                f"canary in the audited MDP's spaces or set {flag}"
            )
    if ds.n_episodes != 1:
        raise ValueError(f"{where}: holds {ds.n_episodes} episodes; a canary is one episode")
    ep = ds.episode(0)
    if ep.length != H:
        raise ValueError(
            f"{where}: its episode has {ep.length} steps, the audit's horizon is H = {H}; "
            "give an episode of H steps or set --horizon"
        )
    rewards = np.asarray(ep.rewards, dtype=np.float64)
    if binary_rewards and not np.all((rewards == 0) | (rewards == 1)):
        raise ValueError(f"{where}: SDP-PE's rewards are binary; the canary's must be 0 or 1")
    return TabularCanary(
        states=np.asarray(ep.observations, dtype=np.int64).reshape(H + 1),
        actions=np.asarray(ep.actions, dtype=np.int64).reshape(H),
        rewards=rewards,
    )
