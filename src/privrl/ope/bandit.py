"""Private IPS, SNIPS and DR on logged bandit arrays, in the shape Open Bandit Pipeline
(OBP) users know: `reward`, `action`, `pscore`, `action_dist` [n, n_actions, len_list],
`position`, and for DR `estimated_rewards_by_reg_model` [n, n_actions, len_list].

    from privrl.ope import bandit

    est = bandit.ips(reward, action, pscore, action_dist, epsilon=1.0, weight_clip=20,
                     reward_range=(0, 1))
    est.value, est.interval, est.report

Names: `ips`, `snips`, `dr` (private, each returning an `Estimated`), `non_private` (the same
estimators with privacy off, returning the bare estimate), `as_dataset` (the arrays as the
dataset these functions evaluate). Each of `ips`, `snips`, `dr` takes `non_private=True`
instead of `epsilon=` for the non-private reference: the same estimate, bounds and interval
method with no noise, an `Estimated` whose report says ε = ∞ and whose
`metrics["private"]` is False, to compare with the private answer. `interval="auto"` (the
default) uses the Bhatia–Davis interval when the weight clip and the reward range guarantee
it is narrower than Popoviciu's (`privrl.ope.importance.interval_plan`; e.g. W > 2 for
rewards in [0, 1]); `metrics["interval_method"]` says which was used and why.

There is no second implementation here: the arrays become a dataset of one-step
episodes, one per row, whose observation is the row's index, and the target policy the table
π(a | row) = action_dist[row, :, position[row]]; the estimate is `IPS` / `SNIPS` / `DR` of
`privrl.ope.is_estimators` on it (plan, sensitivities, noise, interval and report included).

Privacy unit and relation: one row under replace-one neighbours (the row count n is public).
The public bounds are arguments, never read from the arrays: the weight clip W (OBP's
``lambda_``: weights above W are clipped to W), the reward range (rewards are clipped into
it) and, for DR, the range of q̂ (`reward_model_range`, default the reward range's return
range; the model's values are clipped into it — its range over the rows would depend on the
private contexts). The horizon is one step.

The arrays are checked for shape (public) and, like a dataset, for valid values (actions in
range, propensities in (0, 1], every action_dist row a distribution) before anything is
computed; such a refusal publishes nothing. No `ledger=`: a ledger belongs to a dataset file;
import the log (`privrl data import`) and use `IPS(...).estimate(dataset, policy, ledger=...)`
to keep a budget across calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from privrl.algorithm import Estimated
from privrl.ope import importance as imp
from privrl.ope.importance import IntervalChoice
from privrl.ope.is_estimators import (
    DEFAULT_DELTA,
    DR,
    IPS,
    SNIPS,
    DRConfig,
    ImportanceEstimator,
    IPSConfig,
    SNIPSConfig,
)
from privrl.privacy.noise import NoiseSource

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset

__all__ = ["as_dataset", "dr", "ips", "non_private", "snips"]

Estimator = Literal["ips", "snips", "dr"]
_OBJECTS: dict[str, tuple[type[ImportanceEstimator[Any]], type[Any]]] = {
    "ips": (IPS, IPSConfig),
    "snips": (SNIPS, SNIPSConfig),
    "dr": (DR, DRConfig),
}


def _vector(x: Any, name: str, n: int | None) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1 or (n is not None and a.shape[0] != n):
        want = "(n_rounds,)" if n is None else f"({n},)"
        raise ValueError(f"{name} must be a 1-D array of shape {want}, got shape {a.shape}")
    return a


def _cube(x: Any, name: str, n: int) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 3 or a.shape[0] != n:
        raise ValueError(
            f"{name} must have shape (n_rounds, n_actions, len_list) = ({n}, ·, ·), got {a.shape}"
        )
    return a


def _positions(position: Any, n: int, len_list: int) -> np.ndarray:
    """OBP's rule: no position means position 0, allowed only when len_list is 1."""
    if position is None:
        if len_list != 1:
            raise ValueError(f"position is required when action_dist has len_list = {len_list} > 1")
        return np.zeros(n, dtype=np.int64)
    pos = _vector(position, "position", n)
    if not np.issubdtype(pos.dtype, np.integer) or (
        pos.size and (pos.min() < 0 or pos.max() >= len_list)
    ):
        raise ValueError(
            f"position must hold integers in [0, {len_list}) (len_list of action_dist)"
        )
    return pos.astype(np.int64)


def as_dataset(reward: Any, action: Any, pscore: Any, n_actions: int) -> TrajectoryDataset:
    """The log as n one-step episodes: observation = the row's index (Discrete(n)), the
    logged action and reward, `behaviour_probs` = pscore; horizon 1 and γ = 1 declared."""
    from gymnasium import spaces

    from privrl.data.dataset import DatasetMetadata, TrajectoryDataset

    r = _vector(reward, "reward", None)
    n = r.shape[0]
    a = _vector(action, "action", n)
    p = _vector(pscore, "pscore", n)
    if n < 1:
        raise ValueError("the log has no rows")
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"action must hold integer action indices, got dtype {a.dtype}")
    meta = DatasetMetadata(
        observation_space=spaces.Discrete(n),
        action_space=spaces.Discrete(int(n_actions)),
        discount=1.0,
        horizon=1,
    )
    return TrajectoryDataset(
        observations=np.repeat(np.arange(n, dtype=np.int64), 2),
        actions=a.astype(np.int64),
        rewards=r,
        terminated=np.zeros(n, bool),
        truncated=np.ones(n, bool),
        episode_offsets=np.arange(n + 1, dtype=np.int64),
        behaviour_probs=p,
        metadata=meta,
    )


def _setup(
    estimator: Estimator,
    reward: Any,
    action: Any,
    pscore: Any,
    action_dist: Any,
    position: Any,
    **settings: Any,
) -> tuple[ImportanceEstimator[Any], TrajectoryDataset, np.ndarray]:
    """(the estimator object, the log as a dataset, the per-row target table [n, A])."""
    n = _vector(reward, "reward", None).shape[0]
    dist = _cube(action_dist, "action_dist", n)
    pos = _positions(position, n, dist.shape[2])
    data = as_dataset(reward, action, pscore, dist.shape[1])
    rr = tuple(float(v) for v in np.ravel(settings["reward_range"]))
    if len(rr) != 2:
        raise ValueError(f"reward_range must be (low, high), got {settings['reward_range']!r}")
    settings["reward_range"] = rr
    cls, config = _OBJECTS[estimator]
    return cls(config(**settings)), data, dist[np.arange(n), :, pos]


def _q_model(
    obj: ImportanceEstimator[Any],
    estimated_rewards_by_reg_model: Any,
    position: Any,
    n: int,
    reward_model_range: Sequence[float] | None,
) -> imp.RewardModel:
    """DR's q̂ per row, clipped into its declared range (default: the return range)."""
    from gymnasium import spaces

    q = _cube(estimated_rewards_by_reg_model, "estimated_rewards_by_reg_model", n)
    pos = _positions(position, n, q.shape[2])
    c = obj.config
    assert c.reward_range is not None and len(c.reward_range) == 2  # set by `_setup`
    lo, hi = c.reward_range
    bounds = imp.Bounds(c.weight_clip, (lo, hi), 1, 1.0)  # as DR's plan resolves them
    q_range = bounds.return_range if reward_model_range is None else tuple(reward_model_range)
    return imp.table_reward_model(
        q[np.arange(n), :, pos],
        bounds,
        spaces.Discrete(q.shape[1]),
        spaces.Discrete(n),
        spec="estimated_rewards_by_reg_model",
        q_range=(float(q_range[0]), float(q_range[1])),
    )


def ips(
    reward: Any,
    action: Any,
    pscore: Any,
    action_dist: Any,
    position: Any = None,
    *,
    epsilon: float | None = None,
    non_private: bool = False,
    weight_clip: float,
    reward_range: Sequence[float],
    delta: float = DEFAULT_DELTA,
    mechanism: Literal["gaussian", "laplace"] = "gaussian",
    confidence: float = 0.95,
    interval: IntervalChoice = "auto",
    noise: NoiseSource | None = None,
) -> Estimated:
    """Private IPS of the policy `action_dist` from the log: (1/n)(Σ_i min(π_i/pscore_i, W)
    r̄_i + noise), one release of sensitivity W (r_max − r_min) (r_min ≤ 0 ≤ r_max taken)."""
    obj, data, table = _setup(
        "ips", reward, action, pscore, action_dist, position, epsilon=epsilon,
        weight_clip=weight_clip, reward_range=reward_range, delta=delta, mechanism=mechanism,
        confidence=confidence, interval=interval, non_private=non_private,
    )  # fmt: skip
    return obj.estimate(data, table, noise=noise)


def snips(
    reward: Any,
    action: Any,
    pscore: Any,
    action_dist: Any,
    position: Any = None,
    *,
    epsilon: float | None = None,
    non_private: bool = False,
    weight_clip: float,
    reward_range: Sequence[float],
    delta: float = DEFAULT_DELTA,
    mechanism: Literal["gaussian", "laplace"] = "gaussian",
    confidence: float = 0.95,
    interval: IntervalChoice = "auto",
    noise: NoiseSource | None = None,
) -> Estimated:
    """Private self-normalised IPS: the ratio of the noisy sums Σ ρ̄_i r̄_i and Σ ρ̄_i
    (sensitivities W (r_max − r_min) and W), the budget split over the two releases."""
    obj, data, table = _setup(
        "snips", reward, action, pscore, action_dist, position, epsilon=epsilon,
        weight_clip=weight_clip, reward_range=reward_range, delta=delta, mechanism=mechanism,
        confidence=confidence, interval=interval, non_private=non_private,
    )  # fmt: skip
    return obj.estimate(data, table, noise=noise)


def dr(
    reward: Any,
    action: Any,
    pscore: Any,
    action_dist: Any,
    estimated_rewards_by_reg_model: Any,
    position: Any = None,
    *,
    epsilon: float | None = None,
    non_private: bool = False,
    weight_clip: float,
    reward_range: Sequence[float],
    reward_model_range: Sequence[float] | None = None,
    delta: float = DEFAULT_DELTA,
    mechanism: Literal["gaussian", "laplace"] = "gaussian",
    confidence: float = 0.95,
    interval: IntervalChoice = "auto",
    noise: NoiseSource | None = None,
) -> Estimated:
    """Private doubly robust estimate with q̂ = `estimated_rewards_by_reg_model`: one release
    of Σ_i [Σ_a π q̂ + ρ̄_i (r̄_i − q̂_i)], sensitivity (q_hi − q_lo) + W (r_max − r_min + q_hi −
    q_lo) for the declared q̂ range [q_lo, q_hi] (`reward_model_range`). q̂ must not be fitted on
    these rows unless its values are treated as private like them (they are only summed)."""
    obj, data, table = _setup(
        "dr", reward, action, pscore, action_dist, position, epsilon=epsilon,
        weight_clip=weight_clip, reward_range=reward_range, delta=delta, mechanism=mechanism,
        confidence=confidence, interval=interval, non_private=non_private,
    )  # fmt: skip
    q = _q_model(obj, estimated_rewards_by_reg_model, position, data.n_episodes, reward_model_range)
    return obj.estimate(data, table, noise=noise, reward_model=q)


def non_private(
    estimator: Estimator,
    reward: Any,
    action: Any,
    pscore: Any,
    action_dist: Any,
    position: Any = None,
    *,
    weight_clip: float,
    reward_range: Sequence[float],
    estimated_rewards_by_reg_model: Any = None,
    reward_model_range: Sequence[float] | None = None,
    confidence: float = 0.95,
    interval: IntervalChoice = "auto",
) -> imp.Estimate:
    """The same estimator with privacy off (same clipping, no noise, no report): NOT private,
    for simulations and for logs you may look at. Returns `value`, `ci_low`, `ci_high`."""
    obj, data, table = _setup(
        estimator, reward, action, pscore, action_dist, position, epsilon=1.0,
        weight_clip=weight_clip, reward_range=reward_range, confidence=confidence,
        interval=interval,
    )  # fmt: skip
    q = None
    if estimator == "dr":
        if estimated_rewards_by_reg_model is None:
            raise ValueError("dr needs estimated_rewards_by_reg_model")
        q = _q_model(
            obj, estimated_rewards_by_reg_model, position, data.n_episodes, reward_model_range
        )
    return obj.non_private(data, table, reward_model=q)
