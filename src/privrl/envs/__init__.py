"""Environments: finite-horizon tabular MDPs, the linear MDP of Qiao & Wang, the chain,
Mountain Car, HIV treatment and RiverSwim."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from privrl.envs.tabular import (
    TabularMDP,
    TabularMDPEnv,
    behaviour_policy_full_support,
)


def register_envs() -> None:
    """Register privrl's Gymnasium ids (idempotent)."""
    from privrl.envs import (  # chain registers on import
        chain,
        control,
        hiv,
        linear,
        mountain_car,
        tabular,
    )

    del chain
    for module in (tabular, linear, mountain_car, hiv, control):
        module.register_envs()


def eval_env_factory(metadata: Any, horizon: int | None) -> Callable[[], Any]:
    """A factory of the dataset's (public) evaluation environment: ``metadata.env_id`` with
    the recipe's ``extra["env_kwargs"]`` (HIV: 20-day interval, 50 steps, reward scale 1e-6;
    ``reward_scale`` becomes ``RewardWeights(scale=…)``), truncated at ``horizon`` steps."""
    import gymnasium as gym

    register_envs()
    env_id = metadata.env_id
    kwargs = dict(metadata.extra.get("env_kwargs") or {})
    if "reward_scale" in kwargs:
        from privrl.envs.hiv import RewardWeights

        kwargs["reward"] = RewardWeights(scale=float(kwargs.pop("reward_scale")))
    if horizon is not None:
        kwargs["max_episode_steps"] = int(horizon)

    def make() -> Any:
        return gym.make(env_id, **kwargs)

    return make


__all__ = [
    "TabularMDP",
    "TabularMDPEnv",
    "behaviour_policy_full_support",
    "eval_env_factory",
    "register_envs",
]
