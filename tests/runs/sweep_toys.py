"""A test-only system for sweeps: fixed CPU work, then one Gaussian release; no dataset.

`toy-work` runs `work` iterations of a linear congruential generator in pure Python (a fixed
amount of CPU, so that wall time measures throughput under contention), then releases the
final state's fraction in [0, 1) with the Gaussian mechanism (sensitivity 1, public). `crash`
makes the run raise after its work (to test that a failed cell does not stop a sweep).

Importing this module registers the system (`[sweep] imports = ["tests.runs.sweep_toys"]`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from privrl.config import RunConfig, check, option
from privrl.privacy.accounting import calibrate_noise_multiplier
from privrl.privacy.mechanisms import gaussian_mechanism
from privrl.privacy.noise import NoiseSource
from privrl.privacy.public import PublicParameters, Source
from privrl.privacy.report import PrivacyReport
from privrl.runs import registry
from privrl.runs.system import Plan, Result, RunContext, System


@dataclass(frozen=True)
class WorkConfig(RunConfig):
    system = "toy-work"
    epsilon: float = option(1.0, "--epsilon", "-e", help="Target ε.")
    delta: float = option(1e-5, help="Target δ.")
    work: int = option(1000, help="Iterations of CPU work.")
    crash: bool = option(False, help="Raise after the work (tests).")
    only_work: int = option(0, help="A setting only this system has (tests).")

    def validate(self) -> None:
        check(0 < self.epsilon <= 100, "epsilon", f"must be in (0, 100], got {self.epsilon}")
        check(self.work >= 0, "work", f"must be >= 0, got {self.work}")


class WorkSystem(System):
    name = "toy-work"
    Config = WorkConfig
    data = "none"
    summary = "Fixed CPU work and one Gaussian release (a test system)."

    def plan(self, config: Any, header: Any) -> Plan:
        params = PublicParameters()
        params.given("work", config.work, Source.FLAG, "--work")
        z = calibrate_noise_multiplier(config.epsilon, config.delta, 1)
        _, release = gaussian_mechanism(
            0.0,
            sensitivity=1.0,
            noise_multiplier=z,
            rng=NoiseSource.secure().generator(),
            name="state",
        )
        report = PrivacyReport.build(
            "trajectory", "replace-one", [release], config.delta, system=self.name
        ).with_public_parameters(params)
        return Plan(report=report, facts={"z": z})

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        x = int(rng.integers(1 << 31))
        for _ in range(config.work):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        if config.crash:
            raise RuntimeError("toy-work crashed as asked (crash = true)")
        value, release = gaussian_mechanism(
            x / 2**31,
            sensitivity=1.0,
            noise_multiplier=ctx.plan.facts["z"],
            rng=ctx.noise.generator("toy"),
            name="state",
        )
        report = PrivacyReport.build(
            "trajectory", "replace-one", [release], config.delta, system=self.name
        )
        # the worker's thread limit (the sweep sets it): 0 when unset
        threads = int(os.environ.get("OMP_NUM_THREADS", "0"))
        metrics = {"value": float(value), "work": config.work, "omp_threads": threads}
        return Result(metrics=metrics, privacy=report)


registry.register("toy-work", "tests.runs.sweep_toys:WorkSystem")


@dataclass(frozen=True)
class StepsConfig(RunConfig):
    system = "toy-steps"
    steps: int = option(5, help="Steps, each checkpointed.")


STOP_AT = "PRIVRL_TOY_STEPS_STOP_AT"  # tests: raise before this step, as a kill would stop it


class Killed(BaseException):
    """What `toy-steps` raises at `$PRIVRL_TOY_STEPS_STOP_AT`: not an error a cell records."""


class StepsSystem(System):
    """A resumable test system: `steps` steps, the count checkpointed in the run directory
    after each one (refused when it belongs to another run); no release (ε = 0 plan)."""

    name = "toy-steps"
    Config = StepsConfig
    data = "none"
    summary = "Checkpointed steps (a resumable test system)."
    resumable = True
    checkpoint_subdir = ""
    auto_resume = True

    def plan(self, config: Any, header: Any) -> Plan:
        _, release = gaussian_mechanism(
            0.0,
            sensitivity=1.0,
            noise_multiplier=1.0,
            rng=NoiseSource.secure().generator(),
            name="x",
        )
        report = PrivacyReport.build("trajectory", "replace-one", [release], 1e-5, system=self.name)
        return Plan(report=report)

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        import json

        assert ctx.checkpoint_dir is not None
        path = ctx.checkpoint_dir / "progress.json"
        done = 0
        if path.exists():
            state = json.loads(path.read_text())
            if state["steps"] != config.steps:
                raise ValueError("the checkpoint belongs to another run")
            done = state["done"]
        resumed_from = done
        stop = int(os.environ.get(STOP_AT, "-1"))
        while done < config.steps:
            if done == stop:
                raise Killed  # as a kill would end it: the cell's record stays "running"
            done += 1
            path.write_text(json.dumps({"steps": config.steps, "done": done}))
        metrics = {"done": done, "resumed_from": resumed_from}
        return Result(metrics=metrics, privacy=ctx.plan.report)


registry.register("toy-steps", "tests.runs.sweep_toys:StepsSystem")
