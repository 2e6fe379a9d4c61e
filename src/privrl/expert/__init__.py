"""Expert-level DP offline RL (Sharma et al.): `ExpertDP` / `ExpertDPConfig` (consensus filter +
Selective DP-SGD), `DPSGD` / `DPSGDConfig` (expert-level DP-SGD and its non-private twin),
`ExpertTrainingConfig` (their shared settings), `Fitted` (what `fit` returns, with
`ExpertDpResult` / `DpSgdResult` as its details), `ExpertSet`, `load_experts` and
`save_experts` (the experts' policies), `split_budget` (the paper's split of (ε, δ) between
the filter and DP-SGD, a `BudgetSplit`), and the trainers underneath: `train_expert_dp`
(`ExpertDPSettings`), `selective_dp_sgd` (`SelectiveSettings`), `expert_dp_sgd`
(`DPSGDSettings`).

    from privrl.expert import ExpertDP, ExpertDPConfig

    result = ExpertDP(ExpertDPConfig(epsilon=10.0)).fit(dataset, experts=experts)

The privacy unit is the expert: neighbouring datasets add or remove one expert with all of
their trajectories. Submodules: `consensus` (PrefixQuery, DataRelease), `dpsgd` (expert-level
DP-SGD), `selective` (Selective DP-SGD and the pipeline), `experts` (expert sets), `planning`
(the public parameters and the planned report), `api` (the objects).
"""

from privrl.algorithm import Fitted
from privrl.expert.api import DPSGD, ExpertDP
from privrl.expert.base import ExpertSet
from privrl.expert.config import DPSGDConfig, ExpertDPConfig, ExpertTrainingConfig
from privrl.expert.dpsgd import DpSgdResult, DPSGDSettings, expert_dp_sgd
from privrl.expert.experts import load_experts, save_experts
from privrl.expert.selective import (
    BudgetSplit,
    ExpertDpResult,
    ExpertDPSettings,
    SelectiveSettings,
    selective_dp_sgd,
    split_budget,
    train_expert_dp,
)

__all__ = [
    "DPSGD",
    "BudgetSplit",
    "DPSGDConfig",
    "DPSGDSettings",
    "DpSgdResult",
    "ExpertDP",
    "ExpertDPConfig",
    "ExpertDPSettings",
    "ExpertDpResult",
    "ExpertSet",
    "ExpertTrainingConfig",
    "Fitted",
    "SelectiveSettings",
    "expert_dp_sgd",
    "load_experts",
    "save_experts",
    "selective_dp_sgd",
    "split_budget",
    "train_expert_dp",
]
