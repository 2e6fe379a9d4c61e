"""`privrl ope lstd-op`: output-perturbed ridge LSTD (`privrl.ope.linear.lstd_op`) on the run
layer: the library's plan and estimate, with the data source (`--data`, or `--env` sampled
from the run's seed) and the run directory. On-policy only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import DatasetHeader
from privrl.ope.linear.lstd_op import LSTDOP, LSTDOPConfig
from privrl.runs.system import Plan, Result, RunContext
from privrl.systems.ope.common import (
    OpeSystem,
    PrivateOpeConfig,
    check_on_policy,
    cli_errors,
    estimate_result,
)

__all__ = ["LstdOp", "LstdOpConfig"]


@dataclass(frozen=True)
class LstdOpConfig(LSTDOPConfig, PrivateOpeConfig):
    """`privrl ope lstd-op`: `LSTDOPConfig` and the data source (the target policy is the
    behaviour)."""

    system: ClassVar[str] = "lstd-op"

    def validate(self) -> None:
        super().validate()
        check_on_policy(self, "its sensitivity bound needs ρ_t = 1")


class LstdOp(OpeSystem):
    name = "lstd-op"
    Config = LstdOpConfig
    summary = (
        "Output-perturbed ridge LSTD: one Gaussian release of (A + λI)⁻¹b at a public "
        "worst-case sensitivity (a baseline for GPOPE)."
    )

    def plan(self, config: LstdOpConfig, header: DatasetHeader | None, *, seed: int = 0) -> Plan:
        with cli_errors(config):
            # add/remove neighbours differ in the header's count: it is not a public parameter
            params, problem = self.start(config, header, seed, count_is_public=False)
            plan = LSTDOP(config).plan_problem(problem, params, header)
        return self.adapt(plan, LstdOpConfig)

    def run(
        self,
        config: LstdOpConfig,
        data: TrajectoryDataset,
        rng: np.random.Generator,
        ctx: RunContext,
    ) -> Result:
        assert ctx.plan is not None
        with cli_errors(config):
            estimate = LSTDOP(config).compute(ctx.plan, data, ctx.noise)
        return estimate_result(ctx.plan.facts["problem"], estimate, LstdOpConfig)
