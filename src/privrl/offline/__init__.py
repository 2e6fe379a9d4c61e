"""Offline RL with differential privacy in tabular and linear MDPs (Qiao & Wang): `APVI`,
`DPAPVI`, `VAPVI`, `DPVAPVI`, `PEVI`, their configs, `FeatureTable`, and the results
(`Fitted`, `APVIResult`, `LinearPVIResult`, `FiniteHorizonPolicy`, `LinearGreedyPolicy`)."""

from privrl.algorithm import Fitted
from privrl.offline.apvi import APVIConfig, APVIResult, DPAPVIConfig, FiniteHorizonPolicy
from privrl.offline.linear import DPVAPVI, PEVI, VAPVI
from privrl.offline.pevi import PEVIConfig
from privrl.offline.tabular import APVI, DPAPVI
from privrl.offline.vapvi import (
    DPVAPVIConfig,
    FeatureTable,
    LinearGreedyPolicy,
    LinearPVIResult,
    VAPVIConfig,
)

__all__ = [
    "APVI",
    "DPAPVI",
    "DPVAPVI",
    "PEVI",
    "VAPVI",
    "APVIConfig",
    "APVIResult",
    "DPAPVIConfig",
    "DPVAPVIConfig",
    "FeatureTable",
    "FiniteHorizonPolicy",
    "Fitted",
    "LinearGreedyPolicy",
    "LinearPVIResult",
    "PEVIConfig",
    "VAPVIConfig",
]
