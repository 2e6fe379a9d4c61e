"""Offline RL with differential privacy in tabular and linear MDPs (Qiao & Wang): `APVI`,
`DPAPVI`, `VAPVI`, `DPVAPVI`, `PEVI`, their configs, `FeatureTable`, and the results
(`Fitted`, `APVIResult`, `LinearPVIResult`, `FiniteHorizonPolicy`, `LinearGreedyPolicy`)."""

from privrl.algorithm import Fitted
from privrl.offline.apvi import (
    APVIConfig,
    APVIResult,
    DPAPVIConfig,
    FiniteHorizonPolicy,
)
from privrl.offline.tabular import APVI, DPAPVI

__all__ = [
    "APVI",
    "DPAPVI",
    "APVIConfig",
    "APVIResult",
    "DPAPVIConfig",
    "FiniteHorizonPolicy",
    "Fitted",
]
