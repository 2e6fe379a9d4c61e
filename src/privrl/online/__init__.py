"""privrl.online: online learners `PE`, `SDPPE`, `UCBVI`, `DPUCBVI` and their configs, the
privatizers, environments and counts.

- `learners`: the objects (`SDPPE(SDPPEConfig(epsilon=1.0)).learn(env)` returns a `Fitted`);
- `sdp_pe`: SDP-PE (shuffle model; Bai et al. 2024, arXiv 2411.11647) and PE (non-private);
- `ucbvi`: UCB-VI and DP-UCBVI with the central (ε-JDP) and local (ε-LDP) privatizers;
- `privatizers`: the one Privatizer interface (shuffle / central / local / identity);
- `common`: environments, counts, the deduplicated policy set, exact regret, and
  `checkpoints(K)`, the episodes at which a regret curve is recorded;
- `stage_schedule(K, B)`: SDP-PE's and PE's stage lengths T^(k) = B·2^(k−1) (public sizes).

Every privacy noise draw happens in `privrl.privacy` (`shuffle`, `tree`, `mechanisms`).
The entry points named like their modules (`sdp_pe.sdp_pe`, `ucbvi.ucbvi`) are not re-exported
here, so that `privrl.online.sdp_pe` always names the module.
"""

from privrl.algorithm import Fitted
from privrl.online.common import Counts, OnlineResult, checkpoints, make_env, policy_set
from privrl.online.learners import DPUCBVI, PE, SDPPE, UCBVI, OnlineLearner
from privrl.online.privatizers import (
    CentralPrivatizer,
    IdentityPrivatizer,
    LocalPrivatizer,
    PrivateCounts,
    Privatizer,
    ShufflePrivatizer,
)
from privrl.online.sdp_pe import (
    PEConfig,
    SDPPEConfig,
    make_shuffle_privatizer,
    pe,
    stage_schedule,
)
from privrl.online.ucbvi import DPUCBVIConfig, UCBVIConfig, dp_ucbvi

__all__ = [
    "DPUCBVI",
    "PE",
    "SDPPE",
    "UCBVI",
    "CentralPrivatizer",
    "Counts",
    "DPUCBVIConfig",
    "Fitted",
    "IdentityPrivatizer",
    "LocalPrivatizer",
    "OnlineLearner",
    "OnlineResult",
    "PEConfig",
    "PrivateCounts",
    "Privatizer",
    "SDPPEConfig",
    "ShufflePrivatizer",
    "UCBVIConfig",
    "checkpoints",
    "dp_ucbvi",
    "make_env",
    "make_shuffle_privatizer",
    "pe",
    "policy_set",
    "stage_schedule",
]
