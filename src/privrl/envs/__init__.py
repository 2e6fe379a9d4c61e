"""Environments: finite-horizon tabular MDPs (more domains arrive with their systems)."""

from privrl.envs.tabular import (
    TabularMDP,
    TabularMDPEnv,
    behaviour_policy_full_support,
    register_envs,
)

__all__ = ["TabularMDP", "TabularMDPEnv", "behaviour_policy_full_support", "register_envs"]
