"""PRIMORL and MOPO from Python: `PRIMORL`, `PrimorlConfig`, `MOPO`, `MOPOConfig`, `ControlTask`,
`PublicSource`, `ReleasedModel` (`fit` returns a `privrl.algorithm.Fitted`).

PRIMORL is trajectory-level (or user-level) differentially private model-based offline RL:
DP-FedAvg trains an ensemble dynamics model, SAC learns in the pessimistic model without the
data. MOPO is its non-private baseline. Both take any Gymnasium continuous-control task."""

from privrl.algorithm import Fitted
from privrl.envs.control import ControlTask
from privrl.primorl.learners import MOPO, PRIMORL, PublicSource
from privrl.primorl.mopo import MOPOConfig
from privrl.primorl.primorl import PrimorlConfig, ReleasedModel

__all__ = [
    "MOPO",
    "PRIMORL",
    "ControlTask",
    "Fitted",
    "MOPOConfig",
    "PrimorlConfig",
    "PublicSource",
    "ReleasedModel",
]
