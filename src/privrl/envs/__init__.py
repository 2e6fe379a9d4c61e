"""Environments: finite-horizon tabular MDPs, the linear MDP of Qiao & Wang, the chain,
Mountain Car, HIV treatment and RiverSwim."""

from privrl.envs.tabular import (
    TabularMDP,
    TabularMDPEnv,
    behaviour_policy_full_support,
)


def register_envs() -> None:
    """Register privrl's Gymnasium ids (idempotent)."""
    from privrl.envs import chain, hiv, linear, mountain_car, tabular  # chain registers on import

    del chain
    for module in (tabular, linear, mountain_car, hiv):
        module.register_envs()


__all__ = ["TabularMDP", "TabularMDPEnv", "behaviour_policy_full_support", "register_envs"]
