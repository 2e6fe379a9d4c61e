"""privrl.online — online episodic RL with privacy, one user per episode.

- `sdp_pe`: SDP-PE (shuffle model; Bai et al., arXiv 2411.11647) and PE (non-private);
- `ucbvi`: UCB-VI and DP-UCBVI with the central (ε-JDP) and local (ε-LDP) privatizers;
- `privatizers`: the one Privatizer interface (shuffle / central / local / identity);
- `common`: environments, counts, the deduplicated policy set, exact regret.

Every privacy noise draw happens in `privrl.privacy` (`shuffle`, `tree`, `mechanisms`).
The entry points named like their modules (`sdp_pe.sdp_pe`, `ucbvi.ucbvi`) are not re-exported
here, so that `privrl.online.sdp_pe` always names the module.
"""

from privrl.online.common import Counts, OnlineResult, make_env, policy_set
from privrl.online.privatizers import (
    CentralPrivatizer,
    IdentityPrivatizer,
    LocalPrivatizer,
    PrivateCounts,
    Privatizer,
    ShufflePrivatizer,
)
from privrl.online.sdp_pe import SDPPEConfig, make_shuffle_privatizer, pe
from privrl.online.ucbvi import UCBVIConfig, dp_ucbvi

__all__ = [
    "CentralPrivatizer",
    "Counts",
    "IdentityPrivatizer",
    "LocalPrivatizer",
    "OnlineResult",
    "PrivateCounts",
    "Privatizer",
    "SDPPEConfig",
    "ShufflePrivatizer",
    "UCBVIConfig",
    "dp_ucbvi",
    "make_env",
    "make_shuffle_privatizer",
    "pe",
    "policy_set",
]
