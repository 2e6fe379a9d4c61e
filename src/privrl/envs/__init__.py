"""Environments: finite-horizon tabular MDPs and the linear MDP of Qiao & Wang (more domains
arrive with their systems)."""

from privrl.envs.tabular import (
    TabularMDP,
    TabularMDPEnv,
    behaviour_policy_full_support,
)


def register_envs() -> None:
    """Register privrl's Gymnasium ids (idempotent)."""
    from privrl.envs import linear, tabular

    tabular.register_envs()
    linear.register_envs()


__all__ = ["TabularMDP", "TabularMDPEnv", "behaviour_policy_full_support", "register_envs"]
