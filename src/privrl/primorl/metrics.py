"""The metrics.json of a finished MOPO run (``privrl train mopo`` and the MOPO reproduction)."""

from __future__ import annotations

import math
from typing import Any

from privrl.nn.device import describe_device


def mopo_metrics(config: Any, result: Any, task: Any) -> dict[str, Any]:
    """metrics.json of a finished MOPO run (``privrl train mopo`` and the reproduction)."""
    stage = result.stage
    return {
        "algorithm": "mopo",
        "task": task.name,
        "env_id": task.env_id,
        "return_mean": result.return_mean,
        "return_std": result.return_std,
        "normalised_score": result.normalised_score,
        "reference_returns": result.reference_returns,
        "final_epochs": min(config.final_epochs, len(stage.curve)),
        "epochs": len(stage.curve),
        "start_mode": stage.start_mode,
        "penalty": config.penalty,
        "lambda": config.lam,
        "rollout_length": config.rollout_length,
        "real_ratio": config.real_ratio,
        "epsilon": math.inf,
        "private": False,
        "split": result.split,
        "dynamics": result.dynamics,
        "seconds": result.seconds,
        "policy_stage_seconds": stage.seconds,
        "device": describe_device(stage.agent.device),  # public: the hardware used
    }
