"""`privrl ope lstd`: non-private LSTD(0) (`privrl.ope.linear.lstd`), a reference, on the run
layer. A dataset with a ledger refuses it before its episodes are read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import DatasetHeader
from privrl.ope.linear.lstd import LSTD, LSTDConfig
from privrl.privacy.public import PublicParameters
from privrl.runs.system import Plan, Result, RunContext
from privrl.systems.ope.common import (
    OpeConfig,
    OpeSystem,
    cli_errors,
    estimate_result,
    public_problem,
)

__all__ = ["Lstd", "LstdConfig"]


@dataclass(frozen=True)
class LstdConfig(LSTDConfig, OpeConfig):
    """`privrl ope lstd`: `LSTDConfig` and the data source."""

    system: ClassVar[str] = "lstd"


class Lstd(OpeSystem):
    name = "lstd"
    Config = LstdConfig
    summary = "Non-private LSTD(0) (off-policy with per-step ρ) — a reference, NOT private."

    def plan(self, config: LstdConfig, header: DatasetHeader | None, *, seed: int = 0) -> Plan:
        with cli_errors(config):
            params = PublicParameters()
            problem = public_problem(config, header, params, seed)
            plan = LSTD(config).plan_problem(problem, params, header)
        return self.adapt(plan, LstdConfig)

    def run(
        self,
        config: LstdConfig,
        data: TrajectoryDataset,
        rng: np.random.Generator,
        ctx: RunContext,
    ) -> Result:
        assert ctx.plan is not None
        with cli_errors(config):
            estimate = LSTD(config).compute(ctx.plan, data, ctx.noise)
        return estimate_result(ctx.plan.facts["problem"], estimate, LstdConfig)
