"""PRIMORL (private) and MOPO: `PrimorlConfig`, `PRIMORL`, `MOPOConfig`, `MOPO`, `ControlTask`,
`PublicSource`, `ReleasedModel`; `fit` returns `Fitted` (details `PrimorlResult`, `MOPOResult`)."""

from privrl.algorithm import Fitted
from privrl.envs.control import ControlTask
from privrl.primorl.dp_fedavg import SECRET_STATE, SmallDataWarning, public_checkpoint
from privrl.primorl.learners import MOPO, PRIMORL, PublicSource
from privrl.primorl.mopo import MOPOConfig, MOPOResult
from privrl.primorl.primorl import PrimorlConfig, PrimorlResult, ReleasedModel

__all__ = [
    "MOPO",
    "PRIMORL",
    "SECRET_STATE",
    "ControlTask",
    "Fitted",
    "MOPOConfig",
    "MOPOResult",
    "PrimorlConfig",
    "PrimorlResult",
    "PublicSource",
    "ReleasedModel",
    "SmallDataWarning",
    "public_checkpoint",
]
