"""Episodes of different lengths on a fixed, declared horizon H: absorbing-state padding.

A finite-horizon tabular learner (APVI, DP-APVI) wants every trajectory to have H steps
h = 0..H-1. Real logs do not: a FrozenLake episode ends when the agent reaches the goal or
falls in a hole, after 1 to 100 steps. The rules below fit any episode to H without reading a
length off the data (H is public: a flag or the dataset's metadata):

* **longer than H** — the first H steps are kept, the rest is dropped (truncation, never an
  error: an error would fire on one dataset and not on its neighbour);
* **terminated after L ≤ H steps** (``terminated`` on its last step, Gymnasium semantics: the
  MDP entered a terminal state) — the terminal observation is replaced by an *absorbing state*
  z = S (one state added to the S declared ones), and steps L..H-1 are padded with the
  transition (z, a = 0) → z and the reward the user's reward 0 has after the learners' map
  into [0, 1] (`absorbing_reward` = (0 − LOW)/(HIGH − LOW) for the public reward range
  [LOW, HIGH]; 0 for the default [0, 1]). The absorbing state's value is then 0 on the user's
  scale at every step, which is what a terminal state means: a finished episode keeps its
  value, so under a cost per step (rewards in [LOW, 0]) finishing early is worth more than
  wandering, as it is under the user's reward. Padding at mapped reward 0 would instead give
  every padded step the reward LOW and invert that objective. The padded reward must lie in
  [0, 1], so padding needs 0 ∈ [LOW, HIGH] (the learners refuse a range without it);
* **cut after L < H steps** (``truncated``, or neither flag: a time limit or the end of the
  log, not the MDP's doing) — steps L..H-1 are unobserved and not counted; padding them would
  claim the trajectory stopped, which it did not.

Padding adds at most one entry per step h to each count family, as a real step does, with a
reward in [0, 1] as a real (mapped) step has, so the per-trajectory sensitivity of the counts
and of the reward sums is unchanged (≤ 1 entry of weight ≤ 1 per step; ≤ H entries in a
table pooled over h). The learner plans on S + 1 states and reports its policy on the
S original ones.

**Stationary pooling** (``--stationary``, tabular and linear learners): one model for every
step, so the statistic of step h is computed over the transitions of *every* step
(`step_rows`). An episode then contributes up to H terms to one pooled statistic instead of
one, and every per-statistic sensitivity is multiplied by `entries_per_trajectory` = H (the
declared horizon, public; never the longest episode).

The linear learners (VAPVI, DP-VAPVI, PEVI) need no padded rows: a padded step's features
would be φ(z, ·) = 0 (the absorbing state is outside the feature table), which adds nothing
to any Gram matrix or regression target, and the step into a terminal state uses the value
of the absorbing state, (H − h − 1)·`absorbing_reward` in mapped units (0 on the user's
scale). Masking the steps after the end, as they do, is the same computation.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["PADDINGS", "Padded", "entries_per_trajectory", "pad_absorbing", "step_rows"]

PADDINGS = ("absorbing", "none")


class Padded(NamedTuple):
    """Per-step arrays ``[n, H]`` (states ``[n, H+1]``) after padding; ``padded`` marks the
    steps that padding added (at the absorbing state or into it)."""

    states: npt.NDArray[np.int64]
    actions: npt.NDArray[np.int64]
    rewards: npt.NDArray[np.float64]
    valid: npt.NDArray[np.bool_]
    padded: npt.NDArray[np.bool_]


def pad_absorbing(
    states: npt.NDArray[np.int64],
    actions: npt.NDArray[np.int64],
    rewards: npt.NDArray[np.float64],
    step_ok: npt.NDArray[np.bool_],
    next_ok: npt.NDArray[np.bool_],
    *,
    lengths: npt.ArrayLike,
    terminated: npt.ArrayLike,
    absorbing: int,
    absorbing_reward: float = 0.0,
) -> Padded:
    """Pad the terminated episodes of length L ≤ H with the absorbing state `absorbing`.

    ``states [n, H+1]``, ``actions``/``rewards [n, H]`` hold each episode's first min(L, H)
    steps (zeros beyond); ``step_ok [n, H]`` says a step's state and action are indices of the
    declared spaces and ``next_ok [n, H]`` that its next state is. ``lengths [n]`` are the
    episodes' lengths L and ``terminated [n]`` their last step's flag. Returns new arrays
    (the inputs are not modified) with ``valid = step_ok & next_ok`` after padding: the
    terminal observation is replaced by `absorbing` (so its own index no longer matters), and
    steps L..H-1 become (absorbing, 0) → absorbing with reward `absorbing_reward` (the
    mapped value of the user's reward 0, in [0, 1]; public).
    """
    if not 0.0 <= absorbing_reward <= 1.0:
        raise ValueError(
            f"the absorbing state's reward must be in [0, 1] (a mapped reward), got "
            f"{absorbing_reward}"
        )
    states, actions, rewards = states.copy(), actions.copy(), rewards.copy()
    step_ok, next_ok = step_ok.copy(), next_ok.copy()
    H = actions.shape[1]
    L = np.asarray(lengths, dtype=np.int64)
    ends = np.asarray(terminated, dtype=bool) & (L <= H)
    h = np.arange(H + 1)
    after = ends[:, None] & (h[None, :] >= L[:, None])  # [n, H+1]: at or after the terminal
    states[after] = absorbing
    pad = after[:, :H]
    actions[pad] = 0
    rewards[pad] = absorbing_reward
    step_ok[pad] = True
    next_ok[pad] = True
    k = np.flatnonzero(ends & (L >= 1))
    next_ok[k, L[k] - 1] = True  # the step into the terminal state now goes to z
    return Padded(states, actions, rewards, step_ok & next_ok, pad)


def entries_per_trajectory(horizon: int, stationary: bool) -> int:
    """How many terms one trajectory adds to one statistic: one (its transition at step h) per
    step, or up to H when the statistic is pooled over h. Each per-statistic sensitivity is
    multiplied by it. ``horizon`` is the declared, public H."""
    H = int(horizon)
    if H < 1:
        raise ValueError(f"the horizon must be >= 1, got {H}")
    return H if stationary else 1


def step_rows(
    arrays: tuple[npt.NDArray[np.generic], ...], h: int, stationary: bool
) -> tuple[npt.NDArray[np.generic], ...]:
    """The rows of step h of per-step arrays ``[n, H]``: column h, or, pooled over h
    (``stationary``), every step's rows ``[n·H]`` (the same for every h)."""
    if stationary:
        return tuple(np.asarray(a).reshape(-1) for a in arrays)
    return tuple(np.asarray(a)[:, h] for a in arrays)
