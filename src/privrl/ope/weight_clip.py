"""Choosing the public weight clip W of private IPS, SNIPS and DR, from public facts only.

The weight ρ = Π_t π(a_t|s_t) / μ(a_t|s_t) of a logged trajectory is clipped at W before it is
summed, and every release's sensitivity is proportional to W (IPS: W (R_hi − R_lo)), so W sets
both sides of a trade-off:

* **bias** — weights above W are cut to W, which biases the estimate (down, for non-negative
  rewards) by E_μ[(ρ − W)⁺ R]; no weight is above W when W ≥ the largest weight the target can
  reach, and clipping is then free;
* **noise** — the noise standard deviation on the value is z(ε, δ) · W (R_hi − R_lo) / m for m
  trajectories, linear in W, and the confidence interval widens with it.

The largest weight the target can reach is bounded by public quantities: the target policy π
(a public table or public code) and a declared lower bound p_min on the logging policy's
propensities (a property of the logging design, e.g. 1/A for a uniform logger or an
exploration floor; never the smallest propensity in the log, which is private). Per step the
ratio is at most max_{s,a} π(a|s) / p_min, so over H steps

    W_max = Π_{h<H} max_{s,a} π_h(a|s) / p_min^H.

`suggest_weight_clip` computes W_max, never reading a dataset: its inputs are the target, the
declared spaces and horizon and p_min. The maximum of π is exact for a table (every state and
step is enumerated) and for code on a Discrete observation space (every state is a public
point); for code on a continuous space it cannot be enumerated, so the bound π ≤ 1 is used
and the suggestion says so. `ips_noise_std` gives the noise side for a candidate W. A W
below W_max lowers the noise and adds clipping bias, which is worth it when m is small; the
guide in the documentation measures the trade-off on a synthetic log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.ope import importance as imp
from privrl.ope.targets import ALL_STATES, TargetPolicy, as_target_policy

if TYPE_CHECKING:
    from privrl.data.io import DatasetHeader

__all__ = [
    "WeightClipSuggestion",
    "ips_noise_std",
    "largest_weight",
    "suggest_for_header",
    "suggest_weight_clip",
]


@dataclass(frozen=True)
class WeightClipSuggestion:
    """W_max, the largest trajectory weight the target can reach, and how it was found.

    `max_probability` holds max_{s,a} π_h(a|s) per step h (one entry when π does not depend
    on h); `exact` is False when π's maximum could not be enumerated and 1 was used."""

    weight_clip: float
    max_probability: tuple[float, ...]
    min_propensity: float
    horizon: int
    exact: bool
    policy: str

    def explain(self) -> str:
        """One sentence on how W_max follows from the public inputs."""
        p = self.max_probability
        if not self.exact:
            top = "π ≤ 1 (the target's maximum cannot be enumerated on public inputs)"
        elif len(set(p)) == 1:
            top = f"the largest target probability {p[0]:.4g}"
        else:
            top = "the largest target probabilities " + ", ".join(f"{x:.4g}" for x in p)
        steps = "" if self.horizon == 1 else f", over H = {self.horizon} steps"
        return (
            f"W = {self.weight_clip:.6g} clips no weight: {top} over the declared minimum "
            f"propensity {self.min_propensity:.4g}{steps}"
        )


def largest_weight(max_probability: Any, min_propensity: float, horizon: int = 1) -> float:
    """Π_h max π_h / p_min^H: the largest trajectory weight when every logged propensity is
    at least `min_propensity` (`max_probability`: one value for every step, or one per step)."""
    p_min = float(min_propensity)
    if not (math.isfinite(p_min) and 0.0 < p_min <= 1.0):
        raise ValueError(f"the minimum propensity must be in (0, 1], got {min_propensity}")
    if int(horizon) < 1:
        raise ValueError(f"the horizon H must be >= 1, got {horizon}")
    per_step = np.asarray(max_probability, dtype=np.float64).reshape(-1)
    if per_step.size not in (1, int(horizon)):
        raise ValueError(f"give one maximum probability, or one per step (H = {horizon})")
    per_step = np.broadcast_to(per_step, (int(horizon),))
    if np.any(~np.isfinite(per_step)) or np.any(per_step < 0) or np.any(per_step > 1):
        raise ValueError("target probabilities must be in [0, 1]")
    return float(np.prod(per_step / p_min))


def _max_probability(
    target: TargetPolicy, observation_space: Any, horizon: int
) -> tuple[tuple[float, ...], bool]:
    """(max π per step, exact?) from the target on public inputs only: every state of a
    Discrete space for a table, or for code on up to `ALL_STATES` states; one point for a
    context-free table; else unknown (the bound 1)."""
    from gymnasium import spaces

    if target.column is not None:  # π of the logged action, read per row: unknown here
        return (1.0,), False
    if isinstance(observation_space, spaces.Discrete) and (
        not target.guarded or int(observation_space.n) <= ALL_STATES
    ):
        points = int(observation_space.start) + np.arange(int(observation_space.n))
    elif not target.guarded:  # a context-free table [A]: it does not read the observation
        points = np.zeros(1, dtype=np.int64)
    else:
        return (1.0,), False
    if not target.time_indexed:
        return (float(np.max(target.probs(points))),), True
    steps = [np.full(len(points), h) for h in range(int(target.horizon or horizon))]
    return tuple(float(np.max(target.probs(points, h))) for h in steps), True


def suggest_weight_clip(
    policy: Any,
    min_propensity: float,
    *,
    action_space: Any,
    observation_space: Any,
    horizon: int = 1,
    columns: Any = None,
) -> WeightClipSuggestion:
    """W_max for `policy` (any form `as_target_policy` takes: "uniform", a table, a saved
    policy, code) under a declared minimum logging propensity, from the declared spaces and
    horizon. Reads no data: a table or code is evaluated on the public points of the
    observation space (every state of a Discrete space) only. `columns` are the kept columns
    a ``column:NAME`` target may name; its values are private, so its maximum is taken as 1."""
    H = int(horizon)
    target = as_target_policy(policy, action_space, observation_space, horizon=H, columns=columns)
    if target.time_indexed and target.horizon is not None:
        H = int(target.horizon)
    per_step, exact = _max_probability(target, observation_space, H)
    W = largest_weight(per_step, min_propensity, H)
    return WeightClipSuggestion(
        weight_clip=W,
        max_probability=tuple(per_step),
        min_propensity=float(min_propensity),
        horizon=H,
        exact=exact,
        policy=target.spec,
    )


def ips_noise_std(
    weight_clip: float,
    reward_range: tuple[float, float],
    trajectories: int,
    epsilon: float,
    delta: float,
    *,
    horizon: int = 1,
    gamma: float = 1.0,
) -> float:
    """The standard deviation of private IPS's Gaussian noise on the value: z(ε, δ) times the
    sensitivity W (R_hi − R_lo), over m trajectories (all public)."""
    bounds = imp.Bounds(float(weight_clip), tuple(reward_range), int(horizon), float(gamma))
    noise = imp.noise_spec("ips", "gaussian", float(epsilon), float(delta))
    assert noise.noise_multiplier is not None
    return noise.noise_multiplier * imp.ips_sensitivity(bounds) / int(trajectories)


def suggest_for_header(
    header: DatasetHeader, policy: Any, min_propensity: float, *, horizon: int | None = None
) -> WeightClipSuggestion:
    """`suggest_weight_clip` with the spaces and horizon of a dataset's header (its public
    metadata; no episode is read). The horizon is `horizon`, else the metadata's (a bandit
    log declares 1); spaces inferred from the data at import are refused (they are private)."""
    from privrl.privacy.public import inferred_fields

    meta = header.metadata
    inferred = [f for f in ("observation_space", "action_space") if f in inferred_fields(meta)]
    if inferred:
        raise ValueError(
            f"the {' and '.join(inferred)} of the dataset were inferred from the data at "
            "import, so they are not public; re-import it with declared spaces"
        )
    H = horizon if horizon is not None else meta.horizon
    if H is None:
        raise ValueError(
            "the dataset declares no horizon; give the number of steps that count (1 for a "
            "bandit log)"
        )
    return suggest_weight_clip(
        policy,
        min_propensity,
        action_space=meta.action_space,
        observation_space=meta.observation_space,
        horizon=int(H),
        columns=meta.extra.get("extra_columns", []),
    )
