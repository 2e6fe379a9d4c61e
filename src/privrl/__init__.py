"""privrl: differentially private reinforcement learning.

Learn a policy from logged interaction data, evaluate a policy on it, or learn online, with a
formal, correctly accounted privacy guarantee. Every algorithm is a frozen config and an
object (`DPAPVI(config).fit(dataset)`, `IPS(config).estimate(dataset, policy)`), returning a
result whose `.report` is the `PrivacyReport`: the protected unit and neighbouring relation,
every release, ε at δ.

The public names are importable from here and from their families:

- `privrl.offline`: `APVI`, `DPAPVI`, `VAPVI`, `DPVAPVI`, `PEVI` and their configs.
- `privrl.ope`: `IPS`, `SNIPS`, `DR`, `GPOPE`, `DPLSW`, `DPLSL`, `LSTD`, `LSTDOP` and their
  configs; `privrl.ope.bandit` for logged bandit arrays.
- `privrl.online`: `PE`, `SDPPE`, `UCBVI`, `DPUCBVI` and their configs.
- `privrl.expert`: `ExpertDP`, `DPSGD` and their configs.
- `privrl.primorl`: `PRIMORL`, `MOPO` and their configs (needs torch).
- `privrl.rl.evaluation`: `Evaluate`, `EvalConfig`, `evaluate_policy` (a policy's return in a
  Gymnasium environment: post-processing that inherits the policy's report).
- `privrl.data`: `TrajectoryDataset`, `from_table`, `import_table`, `load_hdf5`, `save_hdf5`.
- `privrl.privacy`: `PrivacyReport`, `NoiseSource`, `BudgetLedger`, mechanisms, accounting.

Names are loaded on first use, so `import privrl` stays light (no torch, no plotting).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: public name → the module that defines it (loaded on first access)
_EXPORTS: dict[str, str] = {
    # the shape of every algorithm
    "Fitted": "privrl.algorithm",
    "Estimated": "privrl.algorithm",
    "Plan": "privrl.algorithm",
    "Config": "privrl.config",
    "ConfigError": "privrl.config",
    # data
    "TrajectoryDataset": "privrl.data",
    "DatasetMetadata": "privrl.data",
    "DatasetError": "privrl.data",
    "from_table": "privrl.data",
    "import_table": "privrl.data",
    "load_hdf5": "privrl.data",
    "save_hdf5": "privrl.data",
    "collect": "privrl.data",
    # privacy
    "PrivacyReport": "privrl.privacy",
    "PrivacyUnit": "privrl.privacy",
    "NeighbourRelation": "privrl.privacy",
    "NoiseSource": "privrl.privacy",
    "BudgetLedger": "privrl.privacy",
    # offline learners
    "APVI": "privrl.offline",
    "APVIConfig": "privrl.offline",
    "DPAPVI": "privrl.offline",
    "DPAPVIConfig": "privrl.offline",
    "VAPVI": "privrl.offline",
    "VAPVIConfig": "privrl.offline",
    "DPVAPVI": "privrl.offline",
    "DPVAPVIConfig": "privrl.offline",
    "PEVI": "privrl.offline",
    "PEVIConfig": "privrl.offline",
    # off-policy evaluation
    "IPS": "privrl.ope",
    "IPSConfig": "privrl.ope",
    "SNIPS": "privrl.ope",
    "SNIPSConfig": "privrl.ope",
    "DR": "privrl.ope",
    "DRConfig": "privrl.ope",
    "GPOPE": "privrl.ope",
    "GPOPEConfig": "privrl.ope",
    "DPLSW": "privrl.ope",
    "DPLSWConfig": "privrl.ope",
    "DPLSL": "privrl.ope",
    "DPLSLConfig": "privrl.ope",
    "LSTD": "privrl.ope",
    "LSTDConfig": "privrl.ope",
    "LSTDOP": "privrl.ope",
    "LSTDOPConfig": "privrl.ope",
    # online learners
    "PE": "privrl.online",
    "PEConfig": "privrl.online",
    "SDPPE": "privrl.online",
    "SDPPEConfig": "privrl.online",
    "UCBVI": "privrl.online",
    "UCBVIConfig": "privrl.online",
    "DPUCBVI": "privrl.online",
    "DPUCBVIConfig": "privrl.online",
    # expert-level learners
    "ExpertDP": "privrl.expert",
    "ExpertDPConfig": "privrl.expert",
    "DPSGD": "privrl.expert",
    "DPSGDConfig": "privrl.expert",
    # deep model-based offline RL (loads torch on first use)
    "PRIMORL": "privrl.primorl",
    "PrimorlConfig": "privrl.primorl",
    "MOPO": "privrl.primorl",
    "MOPOConfig": "privrl.primorl",
    "ControlTask": "privrl.primorl",
    # evaluation of a saved or in-memory policy in a Gymnasium environment
    "Evaluate": "privrl.rl.evaluation",
    "EvalConfig": "privrl.rl.evaluation",
    "evaluate_policy": "privrl.rl.evaluation",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'privrl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
