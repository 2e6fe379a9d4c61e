"""Off-policy evaluation with differential privacy for one whole trajectory: GPOPE,
GPOPEConfig, DPLSW, DPLSWConfig, DPLSL, DPLSLConfig, LSTD, LSTDConfig, LSTDOP, LSTDOPConfig,
IPS, IPSConfig, SNIPS, SNIPSConfig, DR, DRConfig, PDIS, PDISConfig, WPDIS, WPDISConfig,
Estimated, PublicTuningConfig and the functions below.

From Python (`privrl.ope.linear`): a frozen config and an object per estimator,

    from privrl.ope import GPOPE

    result = GPOPE(epsilon=1.0, features="onehot", clip=1.0, step_size=0.1).estimate(ds, "uniform")
    result.value, result.interval, result.report

with `estimate(dataset, policy, *, ledger=None, noise=None)` returning an `Estimated`.

Exports: `IPS`, `SNIPS`, `DR`, `PDIS`, `WPDIS` with `IPSConfig`, `SNIPSConfig`, `DRConfig`,
`PDISConfig`, `WPDISConfig` (`ImportanceConfig` their base; `non_private=True` for the
non-private reference) returning `Estimated`; the `bandit` array entry points; GPOPE's and
the baselines' functions and types listed in `__all__`.

- `is_estimators`: private IPS, SNIPS and DR as objects,
  `IPS(IPSConfig(...)).estimate(dataset, policy, ledger=...)`; `importance` holds their
  estimators, sensitivities, noise and intervals.
- `pdis`: per-decision importance sampling (PDIS, WPDIS; Precup, Sutton & Singh 2000) under
  a clip of the cumulative weights, with its sensitivity proof.
- `bandit`: the same estimators on logged bandit arrays in Open Bandit Pipeline's shape
  (`bandit.ips(reward, action, pscore, action_dist, position, epsilon=..., ...)`).

- `gpope`: GPOPE (Xie, Thomas & Miklau 2019, Algorithm 1) — saddle-point GTD2 with
  per-trajectory clipped, Gaussian-noised gradients; `tune_on_public` picks h and the step on
  public data.
- `accounting`: noise calibration, `rigorous` (default, dp-accounting RDP) and `paper`
  (Lemma 1, for comparison only).
- `stats`: per-trajectory statistics Â_i, b̂_i, Ĉ_i (2.2), computed once per dataset.
- `mspbe`: MSPBE and the model (A, b, C) it is measured with.
- `lstd`: non-private LSTD(0) references (on- and off-policy).
- `linear`: the estimators' configs and objects (GPOPE, DPLSW, DPLSL, LSTD, LSTDOP).
- `lstd_op`: output-perturbed ridge LSTD, one Gaussian release at a public worst-case
  sensitivity (a baseline for GPOPE; `privrl ope lstd-op`).
- `baselines`: DP-LSW / DP-LSL output perturbation (Balle, Gomrokchi & Precup 2016).
- `domains`: Mountain Car and HIV evaluation domains (the chain is `privrl.envs.chain`).


The functions named like their modules (`gpope.gpope`, `lstd.lstd`, `mspbe.mspbe`) are not
re-exported here, so that `privrl.ope.gpope` etc. always name the modules.
"""

from privrl.algorithm import Estimated
from privrl.ope import bandit
from privrl.ope.accounting import calibrate_sigma, gpope_epsilon, paper_epsilon
from privrl.ope.baselines import dp_lsl, dp_lsw, first_visit_returns
from privrl.ope.gpope import (
    GpopeResult,
    PublicTuning,
    PublicTuningConfig,
    StepSize,
    tune_on_public,
)
from privrl.ope.is_estimators import (
    DR,
    IPS,
    PDIS,
    SNIPS,
    WPDIS,
    DRConfig,
    ImportanceConfig,
    IPSConfig,
    PDISConfig,
    SNIPSConfig,
    WPDISConfig,
)
from privrl.ope.linear import (
    DPLSL,
    DPLSW,
    GPOPE,
    LSTD,
    LSTDOP,
    DPLSLConfig,
    DPLSWConfig,
    GPOPEConfig,
    LSTDConfig,
    LSTDOPConfig,
)
from privrl.ope.mspbe import LinearSystem, model_system
from privrl.ope.stats import TrajectoryStats, mean_system, trajectory_stats

__all__ = [
    "DPLSL",
    "DPLSW",
    "DR",
    "GPOPE",
    "IPS",
    "LSTD",
    "LSTDOP",
    "PDIS",
    "SNIPS",
    "WPDIS",
    "DPLSLConfig",
    "DPLSWConfig",
    "DRConfig",
    "Estimated",
    "GPOPEConfig",
    "GpopeResult",
    "IPSConfig",
    "ImportanceConfig",
    "LSTDConfig",
    "LSTDOPConfig",
    "LinearSystem",
    "PDISConfig",
    "PublicTuning",
    "PublicTuningConfig",
    "SNIPSConfig",
    "StepSize",
    "TrajectoryStats",
    "WPDISConfig",
    "bandit",
    "calibrate_sigma",
    "dp_lsl",
    "dp_lsw",
    "first_visit_returns",
    "gpope_epsilon",
    "mean_system",
    "model_system",
    "paper_epsilon",
    "trajectory_stats",
    "tune_on_public",
]
