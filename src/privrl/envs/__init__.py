"""Environments: finite-horizon tabular MDPs, the linear MDP of Qiao & Wang, the chain,
Mountain Car, HIV treatment and RiverSwim."""

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


__all__ = ["TabularMDP", "TabularMDPEnv", "behaviour_policy_full_support", "register_envs"]
