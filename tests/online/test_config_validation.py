"""Online configs refuse values that would hang or overflow later (they used to pass)."""

from __future__ import annotations

import pytest

from privrl.online.common import make_env
from privrl.online.sdp_pe import PEConfig


@pytest.mark.parametrize(
    "changes",
    [
        {"fw_eta": float("inf")},
        {"fw_eta": float("nan")},
        {"fw_max_iter": 0},
        {"max_policies": 0},
        {"base_batch": 0},
        {"beta": float("nan")},
        {"width_scale": float("inf")},
    ],
)
def test_sdp_pe_config_refuses(changes: dict) -> None:
    with pytest.raises(ValueError):
        PEConfig(**changes)


@pytest.mark.parametrize("size", [{"states": 0}, {"horizon": -1}, {"actions": 0}])
def test_make_env_refuses_empty_sizes(size: dict) -> None:
    with pytest.raises(ValueError, match="integer >= 1"):
        make_env("random-tabular", **size)
    assert make_env("random-tabular", states=2, actions=2, horizon=2).S == 2
