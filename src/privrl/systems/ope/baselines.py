"""`privrl ope dp-lsw` and `dp-lsl`: the output-perturbation baselines (Balle et al. 2016;
`privrl.ope.linear.baselines`) on the run layer.

    privrl ope dp-lsw --data data.h5 --features onehot --epsilon 1 --reward-range 1 --out runs/v1

The plan and the computation are the library's; this adapter adds the data source and the
run directory. With --data, a declared horizon (`--max-horizon`, else the metadata's)
truncates every episode to its first H steps and bounds the returns over H steps
(`privrl.ope.horizon`), which is what makes γ = 1 possible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import DatasetHeader
from privrl.ope.linear.baselines import (
    DPLSL,
    DPLSW,
    DPLSLConfig,
    DPLSWConfig,
    OutputPerturbationConfig,
    reward_bounds,
    tabular_view,
)
from privrl.runs.system import Plan, Result, RunContext
from privrl.systems.ope.common import (
    OpeSystem,
    PrivateOpeConfig,
    check_on_policy,
    cli_errors,
    estimate_result,
)

__all__ = [
    "BaselineConfig",
    "DpLsl",
    "DpLslConfig",
    "DpLsw",
    "DpLswConfig",
    "reward_bounds",
    "tabular_view",
]


@dataclass(frozen=True)
class BaselineConfig(OutputPerturbationConfig, PrivateOpeConfig):
    """`OutputPerturbationConfig` and the data source (the target policy is the behaviour)."""

    def validate(self) -> None:
        super().validate()
        check_on_policy(self, "Balle et al. 2016")


@dataclass(frozen=True)
class DpLswConfig(DPLSWConfig, BaselineConfig):
    """`privrl ope dp-lsw`: `DPLSWConfig` and the data source."""

    system: ClassVar[str] = "dp-lsw"


@dataclass(frozen=True)
class DpLslConfig(DPLSLConfig, BaselineConfig):
    """`privrl ope dp-lsl`: `DPLSLConfig` and the data source."""

    system: ClassVar[str] = "dp-lsl"


class _Baseline(OpeSystem):
    """DP-LSW and DP-LSL: the same plan and run; the estimator differs by config."""

    @staticmethod
    def estimator(config: BaselineConfig) -> DPLSW | DPLSL:
        return DPLSL(config) if isinstance(config, DPLSLConfig) else DPLSW(config)

    def plan(self, config: BaselineConfig, header: DatasetHeader | None, *, seed: int = 0) -> Plan:
        with cli_errors(config):
            params, problem = self.start(config, header, seed)
            plan = self.estimator(config).plan_problem(problem, params, header)
        return self.adapt(plan, type(config))

    def run(
        self,
        config: BaselineConfig,
        data: TrajectoryDataset,
        rng: np.random.Generator,
        ctx: RunContext,
    ) -> Result:
        assert ctx.plan is not None
        with cli_errors(config):
            estimate = self.estimator(config).compute(ctx.plan, data, ctx.noise)
        return estimate_result(ctx.plan.facts["problem"], estimate, type(config))


class DpLsw(_Baseline):
    name = "dp-lsw"
    Config = DpLswConfig
    summary = (
        'DP-LSW (Balle et al. 2016, "V1"): on-policy first-visit MC least squares + smooth-'
        "sensitivity Gaussian noise."
    )


class DpLsl(_Baseline):
    name = "dp-lsl"
    Config = DpLslConfig
    summary = (
        'DP-LSL (Balle et al. 2016, "V2"): ridge version of DP-LSW with data-dependent weights.'
    )
