"""The contract between expert sets and the consensus filter.

An `ExpertSet` is m policies over one discrete action space, queried in one batched call. The
consensus filter only needs each expert's greedy action: every admissible expert is modified so
that its greedy action has probability g = 1 − (|A| − 1)·p_min and every other action p_min.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class ExpertSet(Protocol):
    """m experts over a discrete action space with ``n_actions`` actions."""

    @property
    def n_experts(self) -> int: ...

    @property
    def n_actions(self) -> int: ...

    @property
    def obs_dim(self) -> int: ...

    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        """Greedy action of every expert at every observation: int64 ``[m, n]`` for ``obs``
        of shape ``[n, obs_dim]`` (one vectorised pass, no loop over experts)."""
        ...


def modified_probs(greedy: np.ndarray, n_actions: int, p_min: float) -> np.ndarray:
    """π_i(·|s) of the p_min-modified experts, ``[..., n_actions]`` from greedy actions."""
    if not 0.0 < p_min * n_actions <= 1.0:
        raise ValueError(f"p_min={p_min} is not admissible for {n_actions} actions")
    g = 1.0 - (n_actions - 1) * p_min
    probs = np.full((*greedy.shape, n_actions), p_min)
    np.put_along_axis(probs, greedy[..., None], g, axis=-1)
    return probs
