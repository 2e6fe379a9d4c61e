"""RiverSwim (Strehl & Littman 2008; Osband et al. 2013), the episodic version of the SDP-PE
paper's experiment (Bai et al., arXiv 2411.11647, Figure 4).

S states in a row, actions 0 = left, 1 = right, start at the leftmost state 0. Left always
succeeds (state 0 stays). Right: at state 0 stay 0.4 / move right 0.6; in the middle move right
0.35, stay 0.6, move left 0.05; at the last state stay 0.6, move left 0.4. Rewards are
Bernoulli with mean 0.005 at (0, left) and 1 at (S−1, right), 0 elsewhere. Stationary over the
H steps of an episode.
"""

from __future__ import annotations

import numpy as np

from privrl.envs.tabular import RewardKind, TabularMDP

__all__ = ["LEFT", "RIGHT", "riverswim"]

LEFT, RIGHT = 0, 1


def riverswim(S: int = 4, H: int = 5, *, reward_kind: RewardKind = "bernoulli") -> TabularMDP:
    """The RiverSwim MDP with ``S ≥ 2`` states and horizon ``H`` (start state 0)."""
    if S < 2:
        raise ValueError(f"RiverSwim needs S >= 2 states, got {S}")
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")
    P = np.zeros((S, 2, S))
    R = np.zeros((S, 2))
    for s in range(S):
        P[s, LEFT, max(s - 1, 0)] = 1.0
    P[0, RIGHT, 0] = 0.4
    P[0, RIGHT, 1] = 0.6
    for s in range(1, S - 1):
        P[s, RIGHT, s + 1] = 0.35
        P[s, RIGHT, s] = 0.6
        P[s, RIGHT, s - 1] = 0.05
    P[S - 1, RIGHT, S - 1] = 0.6
    P[S - 1, RIGHT, S - 2] = 0.4
    R[0, LEFT] = 0.005
    R[S - 1, RIGHT] = 1.0
    d1 = np.zeros(S)
    d1[0] = 1.0
    return TabularMDP(
        np.broadcast_to(P, (H, S, 2, S)),
        np.broadcast_to(R, (H, S, 2)),
        d1,
        reward_kind=reward_kind,
    )
