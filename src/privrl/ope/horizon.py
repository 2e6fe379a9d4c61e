"""A declared horizon H for off-policy evaluation: the public bound on how many steps of an
episode count, enforced on the data by truncation (never checked against it).

Why. A return bound enters a sensitivity: with rewards in [a, b] and γ < 1 every
return-to-go lies in an interval of width (b − a)/(1 − γ), which a one-step log (a
contextual bandit) pays for nothing, and which is infinite at γ = 1. With a public horizon H
the return-to-go over at most H steps (h = 0..H-1 in code) has

    B_H = Σ_{t<H} γ^t = (1 − γ^H)/(1 − γ)   (H when γ = 1; B_1 = 1 for every γ)

as its discount mass, so the bound is (b − a)·B_H when a ≤ 0 ≤ b (`return_bounds`). H comes
from `max_horizon` or the dataset's public metadata (`PublicParameters`), never from the
longest episode.

Enforcement. `truncate` drops every step t ≥ H of every episode (a fixed rule: which steps
are dropped depends on each episode alone, so one trajectory's change moves only its own
summand). An episode cut at H ends `terminated` at its last kept step (the horizon ends it:
the value counts H steps, Σ_{t<H} γ^t r_t, so the TD estimators do not bootstrap past H, as the
Monte Carlo and importance-sampling ones do not sum past it), with its observation at step H
kept as the final one; shorter episodes are untouched.
"""

from __future__ import annotations

import math

import numpy as np

from privrl.data.dataset import TrajectoryDataset

__all__ = ["discount_mass", "return_bounds", "truncate"]


def discount_mass(gamma: float, horizon: int | None) -> float:
    """B_H = Σ_{t<H} γ^t (H at γ = 1); 1/(1 − γ) without a horizon (γ < 1 only)."""
    g = float(gamma)
    if horizon is None:
        if not 0.0 <= g < 1.0:
            raise ValueError(
                f"γ = {g:g} needs a finite horizon to bound a return; pass `max_horizon=H` "
                "(the number of steps of an episode that count) or a `gamma` below 1"
            )
        return 1.0 / (1.0 - g)
    H = int(horizon)
    if H < 1:
        raise ValueError(f"the horizon H must be >= 1, got {H}")
    if g == 1.0:
        return float(H)
    return (1.0 - g**H) / (1.0 - g)


def return_bounds(
    reward_bounds: tuple[float, float], gamma: float, horizon: int | None = None
) -> tuple[float, float]:
    """An interval holding every discounted return-to-go Σ_{k=t}^{t'} γ^{k−t} r_k of an
    episode of 1..H remaining steps (any length with no horizon) with rewards in [a, b]:

        lowest = a·B_H if a < 0 else a,    highest = b·B_H if b > 0 else b.

    With a ≤ 0 ≤ b its width is (b − a)·B_H; without a horizon B = 1/(1 − γ), the R/(1−γ) of
    Balle et al. (2016). Public inputs only."""
    a, b = float(reward_bounds[0]), float(reward_bounds[1])
    if not (math.isfinite(a) and math.isfinite(b) and a < b):
        raise ValueError(f"reward bounds must be finite with low < high, got [{a}, {b}]")
    B = discount_mass(gamma, horizon)
    lowest = a * B if a < 0 else a
    highest = b * B if b > 0 else b
    if not (math.isfinite(lowest) and math.isfinite(highest - lowest)):
        raise ValueError(f"the return range for rewards in [{a}, {b}] and γ = {gamma} overflows")
    return lowest, highest


def truncate(data: TrajectoryDataset, horizon: int) -> TrajectoryDataset:
    """`data` with the steps t ≥ H of every episode dropped (vectorised; returns `data` itself
    when no episode is longer than H). A cut episode ends `terminated` at step H − 1."""
    H = int(horizon)
    if H < 1:
        raise ValueError(f"the horizon H must be >= 1, got {H}")
    lengths = np.asarray(data.episode_lengths, dtype=np.int64)
    if lengths.size == 0 or int(lengths.max()) <= H:
        return data
    steps = np.asarray(data.transition_steps, dtype=np.int64)
    keep = steps < H
    new_len = np.minimum(lengths, H)
    cut = lengths > H
    # observation rows: episode e owns rows offsets[e] + e .. offsets[e+1] + e (its final one)
    obs_offsets = np.asarray(data.episode_offsets, dtype=np.int64) + np.arange(lengths.size + 1)
    obs_ep = np.repeat(np.arange(lengths.size), lengths + 1)
    obs_step = np.arange(obs_offsets[-1]) - obs_offsets[:-1][obs_ep]
    keep_obs = obs_step <= new_len[obs_ep]
    terminated = np.asarray(data.terminated, dtype=bool)[keep].copy()
    truncated = np.asarray(data.truncated, dtype=bool)[keep].copy()
    last = np.cumsum(new_len) - 1  # last kept transition of each episode
    terminated[last[cut]] = True
    truncated[last[cut]] = False
    probs = data.behaviour_probs
    return TrajectoryDataset(
        observations=np.asarray(data.observations)[keep_obs],
        actions=np.asarray(data.actions)[keep],
        rewards=np.asarray(data.rewards)[keep],
        terminated=terminated,
        truncated=truncated,
        episode_offsets=np.concatenate(([0], np.cumsum(new_len))),
        behaviour_probs=None if probs is None else np.asarray(probs)[keep],
        unit_ids=data.unit_ids,
        metadata=data.metadata,
        validate=False,
    )
