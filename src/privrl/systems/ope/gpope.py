"""`privrl ope gpope`: GPOPE (Xie et al. 2019; `privrl.ope.linear.gpope`) on the run layer.

    privrl ope gpope --env chain --trajectories 1000 --epsilon 0.1 --out runs/gp
    privrl ope gpope --data data.h5 --features onehot --clip 1 --step-size 0.1 --epsilon 1

The plan and the computation are the library's (`plan_gpope`, `run_gpope`, in both modes);
this adapter adds the data source (`--data`, or `--env` sampled with SeedSequence([seed, 1])),
`--public-data FILE` (read here into the public dataset the library tunes on), the ledger's
relation check and the run directory (config.json, metrics.json, metrics.csv: the MSPBE curve
with --env, else θ; privacy.json, theta.npy, plots/*.png).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from privrl.config import ConfigError, check, option
from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import DatasetHeader
from privrl.ope.linear.gpope import (
    GPOPE,
    GPOPE_VALUE_REPLICAS,
    MAX_REPLICA_GATHER,
    MAX_REPLICA_WORK,
    MIN_VALUE_REPLICAS,
    PAPER_ONLY,
    GPOPEConfig,
    flag_or_tuned,
    measured_on_public,
    needs_public_data,
    public_clipping,
    value_replicas,
)
from privrl.ope.linear.minibatch import (
    MAX_TUNING_GATHER,
    minibatch_batch,
    minibatch_value_replicas,
)
from privrl.runs.system import Plan, Result, RunContext
from privrl.systems.ope.common import OpeSystem, PrivateOpeConfig, cli_errors, estimate_result

__all__ = [
    "GPOPE_VALUE_REPLICAS",
    "MAX_REPLICA_GATHER",
    "MAX_REPLICA_WORK",
    "MAX_TUNING_GATHER",
    "MIN_VALUE_REPLICAS",
    "PAPER_ONLY",
    "Gpope",
    "GpopeConfig",
    "flag_or_tuned",
    "measured_on_public",
    "minibatch_batch",
    "minibatch_value_replicas",
    "needs_public_data",
    "public_clipping",
    "value_replicas",
]


@dataclass(frozen=True)
class GpopeConfig(GPOPEConfig, PrivateOpeConfig):
    """`privrl ope gpope`: `GPOPEConfig` and the data source, with `--public-data FILE` for
    the public dataset h and the step are tuned on."""

    system: ClassVar[str] = "gpope"

    public_data: Path | None = option(  # noqa: RUF009 (a field specifier, not a shared default)
        None, help="An independent PUBLIC dataset to tune h and the step on."
    )

    def validate(self) -> None:
        super().validate()
        check(
            self.public_data is None or self.public_data.is_file(),
            "public_data",
            f"{self.public_data} is not a file; give a privrl HDF5 dataset",
        )


class Gpope(OpeSystem):
    name = "gpope"
    Config = GpopeConfig
    epsilon_label = "ε (target)"
    summary = (
        "GPOPE (Xie et al. 2019): saddle-point GTD2 with per-trajectory clipped, noised gradients."
    )

    def plan(self, config: GpopeConfig, header: DatasetHeader | None, *, seed: int = 0) -> Plan:
        with cli_errors(config):
            _refuse_data_as_public(config, header)
            params, problem = self.start(
                config, header, seed, count_is_public=config.mode == "paper"
            )
            plan = estimator(config, seed).plan_problem(problem, params, header)
        return self.adapt(plan, GpopeConfig)

    def run(
        self,
        config: GpopeConfig,
        data: TrajectoryDataset,
        rng: np.random.Generator,
        ctx: RunContext,
    ) -> Result:
        assert ctx.plan is not None
        with cli_errors(config):
            estimate = estimator(config, ctx.seed, public=False).compute(ctx.plan, data, ctx.noise)
        return estimate_result(ctx.plan.facts["problem"], estimate, GpopeConfig)


def estimator(config: GpopeConfig, seed: int, *, public: bool = True) -> GPOPE:
    """The library's GPOPE for this run: --public-data FILE read into its public dataset (for
    the plan; the run finds it in the plan's facts)."""
    if not public or config.public_data is None:
        return GPOPE(config, seed=seed)
    from privrl.data.io import load_hdf5

    name = f"public dataset {config.public_data.name}"
    return GPOPE(config, public=load_hdf5(config.public_data), public_name=name, seed=seed)


def _refuse_data_as_public(config: GpopeConfig, header: DatasetHeader | None) -> None:
    """--public-data must be public: not the --data file or a copy of its episodes, and no
    ledgered (private) file."""
    from privrl.data.public import not_public_because

    if config.public_data is None:
        return
    why = not_public_because(config.public_data, None if header is None else header.path)
    if why is not None:
        raise ConfigError(
            "public_data",
            f"{config.public_data}: {why}; tuning must use an independent PUBLIC dataset (or "
            "give --clip and --step-size)",
        )
