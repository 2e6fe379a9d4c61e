"""A toy system for the run layer's tests: the Gaussian-noised mean return of a dataset."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from privrl.config import RunConfig, check, option
from privrl.privacy.accounting import calibrate_noise_multiplier
from privrl.privacy.mechanisms import gaussian_mechanism
from privrl.privacy.noise import NoiseSource
from privrl.privacy.public import PublicParameters, Source
from privrl.privacy.report import PrivacyReport
from privrl.runs import registry
from privrl.runs.system import Plan, PlotSpec, Result, RunContext, Series, System


@dataclass(frozen=True)
class ToyConfig(RunConfig):
    system = "toy-mean"
    epsilon: float = option(..., "--epsilon", "-e", help="Target ε.")
    delta: float = option(1e-5, help="Target δ.")
    reward_range: float = option(1.0, help="Per-trajectory return bound (public).")
    steps: int = option(5, help="Curve points.")
    mode: Literal["plain", "loud"] = option("plain", help="Output mode.")
    hidden: tuple[int, ...] = option((4, 4), help="Sizes.")

    def validate(self) -> None:
        check(0 < self.epsilon <= 100, "epsilon", f"must be in (0, 100], got {self.epsilon}")
        check(0 < self.delta < 1, "delta", f"must be in (0, 1), got {self.delta}")
        check(self.steps >= 1, "steps", f"must be >= 1, got {self.steps}")


class ToySystem(System):
    name = "toy-mean"
    Config = ToyConfig
    data = "required"
    summary = "Noisy mean return (a test system)."

    def plan(self, config: Any, header: Any) -> Plan:
        params = PublicParameters()
        m = params.given("m", header.n_episodes, Source.METADATA, "header")
        sigma = calibrate_noise_multiplier(config.epsilon, config.delta, 1)
        _, release = gaussian_mechanism(
            0.0,
            sensitivity=config.reward_range / m,
            noise_multiplier=sigma,
            rng=NoiseSource.secure().generator(),
            name="mean return",
        )
        report = PrivacyReport.build(
            "trajectory", "replace-one", [release], config.delta, system=self.name
        ).with_public_parameters(params)
        return Plan(report=report, public={"m": m}, facts={"m": m, "z": sigma})

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        m = ctx.plan.facts["m"]
        returns = np.clip(data.returns(1.0), 0, config.reward_range)
        value, release = gaussian_mechanism(
            returns.mean(),
            sensitivity=config.reward_range / m,
            noise_multiplier=ctx.plan.facts["z"],
            rng=ctx.noise.generator("toy"),
            name="mean return",
        )
        for i in range(config.steps):
            ctx.progress("steps", i + 1, config.steps)
        report = PrivacyReport.build(
            "trajectory", "replace-one", [release], config.delta, system=self.name
        )
        curve = [{"step": i, "value": float(value) * i} for i in range(config.steps)]
        plot = PlotSpec(
            "curve",
            "toy",
            "step",
            "value",
            [Series("value", [r["step"] for r in curve], [r["value"] for r in curve])],
        )
        return Result(
            metrics={"value": float(value), "epsilon": report.epsilon},
            privacy=report,
            curve=curve,
            artifacts={"value.npy": np.array([value])},
            plots={"curve": plot},
            summary=[f"value {float(value):.4f}"],
        )


registry.register("toy-mean", "tests.runs.toy:ToySystem")
