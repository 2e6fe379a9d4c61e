"""Expert-level DP offline RL (Sharma et al.): `ExpertDP` / `ExpertDPConfig` (consensus filter +
Selective DP-SGD), `DPSGD` / `DPSGDConfig` (expert-level DP-SGD and its non-private twin),
`ExpertSet` (the experts' policies), `Fitted` (what `fit` returns).

    from privrl.expert import ExpertDP, ExpertDPConfig

    result = ExpertDP(ExpertDPConfig(epsilon=10.0)).fit(dataset, experts=experts)

The privacy unit is the expert: neighbouring datasets add or remove one expert with all of
their trajectories. The building blocks are in the submodules: `consensus` (PrefixQuery,
DataRelease), `dpsgd` (expert-level DP-SGD), `selective` (Selective DP-SGD and the pipeline),
`experts` (expert sets), `planning` (the public parameters and the planned report).
"""

from privrl.algorithm import Fitted
from privrl.expert.api import DPSGD, ExpertDP
from privrl.expert.base import ExpertSet
from privrl.expert.config import DPSGDConfig, ExpertDPConfig, ExpertTrainingConfig

__all__ = [
    "DPSGD",
    "DPSGDConfig",
    "ExpertDP",
    "ExpertDPConfig",
    "ExpertSet",
    "ExpertTrainingConfig",
    "Fitted",
]
