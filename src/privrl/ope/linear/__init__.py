"""The linear-feature estimators from Python: GPOPE, GPOPEConfig, DPLSW, DPLSWConfig, DPLSL,
DPLSLConfig, LSTD, LSTDConfig, LSTDOP, LSTDOPConfig, LinearEstimate, LinearEstimator.

Each is a frozen config plus an object with `plan(header, policy)` (every public parameter and
the planned report, from the dataset's header only) and
`estimate(dataset, policy, *, ledger=None, noise=None)` returning a `privrl.algorithm.Estimated`
(`.value`, `.interval`, `.report`, `.metrics`; `.details` is the `LinearEstimate` with the
released θ). Modules: `common` (shared fields, the public problem, the value), `estimator`
(the base object), `gpope`, `minibatch`, `baselines`, `lstd`, `lstd_op`.
"""

from privrl.ope.linear.baselines import (
    DPLSL,
    DPLSW,
    DPLSLConfig,
    DPLSWConfig,
    OutputPerturbationConfig,
)
from privrl.ope.linear.estimator import LinearEstimate, LinearEstimator
from privrl.ope.linear.gpope import GPOPE, GPOPEConfig
from privrl.ope.linear.lstd import LSTD, LSTDConfig
from privrl.ope.linear.lstd_op import LSTDOP, LSTDOPConfig

__all__ = [
    "DPLSL",
    "DPLSW",
    "GPOPE",
    "LSTD",
    "LSTDOP",
    "DPLSLConfig",
    "DPLSWConfig",
    "GPOPEConfig",
    "LSTDConfig",
    "LSTDOPConfig",
    "LinearEstimate",
    "LinearEstimator",
    "OutputPerturbationConfig",
]
