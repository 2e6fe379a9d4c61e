"""Privacy audits of expert-dp's consensus filter and of PRIMORL on the run layer (issue 17;
docs/audit.md). Same shape as `privrl.systems.audit`: `plan` resolves the public parameters
and states the audited system's claimed report; `run` plays the audit and returns
metrics.json, privacy.json and plots/roc.png.

- `audit-expert-dp`: vectorised trials of one DataRelease round with a canary expert
  (`privrl.audit.expert`), bound by Clopper–Pearson.
- `audit-expert-dp-sgd`: ONE run of expert-level DP-SGD (selective DP-SGD's private steps)
  with m canary experts (`privrl.audit.expert`), bound by Steinke, Nasr & Jagielski 2023.
- `audit-primorl`: ONE DP-FedAvg training with m canary trajectories each included with
  probability ½ (`privrl.audit.primorl`), bound by Steinke, Nasr & Jagielski 2023.

The experts, trajectories and canaries are synthetic and public (drawn from the run's seed):
no dataset, no ledger, no budget. Each audit has its non-private twin (`--non-private`), the
same code with the noise switched off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privrl.config import RunConfig, check, option
from privrl.runs.system import Plan, Result, RunContext
from privrl.systems.audit import (
    SYNTHETIC_NOTE,
    AuditConfig,
    AuditSystem,
    _at_least,
    _canary,
    _confidence,
    _delta,
    _epsilon,
    _noise_multiplier,
    _non_private,
    _one_run_canaries,
    _one_run_guesses,
    _positive,
    _trials,
    check_canary,
    check_confidence,
    check_guesses,
    check_noise_flags,
    check_rate,
    flag_parameters,
    load_file_canary,
    one_run_canaries,
    one_run_result,
    resolve_noise_multiplier,
    synthetic_report,
)

__all__ = [
    "AuditExpertDp",
    "AuditExpertDpConfig",
    "AuditExpertDpSgd",
    "AuditExpertDpSgdConfig",
    "AuditPrimorl",
    "AuditPrimorlConfig",
]


# ---------------------------------------------------------------------------------------------
# expert-dp: the consensus filter
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditExpertDpConfig(AuditConfig):
    """Audit of expert-dp's consensus filter (Sharma et al., Algorithm 2, one round) with a
    canary expert; ε1, δ1 the filter's budget, L the public maximum trajectory length."""

    system: ClassVar[str] = "audit-expert-dp"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = _epsilon("The filter's budget ε1 (its claimed ε).")
    non_private: bool = _non_private("the same threshold, no noise")
    delta: float = _delta("The filter's δ1.")
    max_len: int = option(5, "--max-len", help="L: the longest trajectory the filter queries.")
    actions: int = option(2, "--actions", help="|A|.")
    p_min: float = option(0.01, "--p-min", help="p_min of the modified experts.", allow_nan=True)
    calibration: str = option("pld", "--calibration", help="paper | tight | pld (ε' from ε1).")
    trials: int = _trials()
    canary: str = _canary(
        "one expert's episodes with Discrete(L) observations (τ's states) and Discrete(|A|) "
        "actions: its greedy action in a state is the one it takes most often there "
        "(a state it never visits: random)."
    )
    confidence: float = _confidence()

    def validate(self) -> None:
        check(self.epsilon is not None, "epsilon", "is required (the filter's ε1); pass --epsilon")
        self.check_common()
        self.check_delta(self.delta)
        check(self.max_len >= 1, "max_len", f"must be >= 1, got {self.max_len}")
        check(self.actions >= 2, "actions", f"must be >= 2, got {self.actions}")
        check(
            math.isfinite(self.p_min) and 0.0 < self.p_min * self.actions <= 1.0,
            "p_min",
            f"must be in (0, 1/|A|], got {self.p_min}",
        )
        check(
            self.calibration in ("paper", "tight", "pld"),
            "calibration",
            f"must be 'paper', 'tight' or 'pld', got {self.calibration!r}",
        )


class AuditExpertDp(AuditSystem):
    """expert-dp's consensus filter (Sharma et al., Algorithm 2), add/remove one expert."""

    name = "audit-expert-dp"
    Config = AuditExpertDpConfig
    summary = "expert-dp's consensus filter (one DataRelease round), add/remove one expert."

    def plan(self, config: AuditExpertDpConfig, header: Any | None) -> Plan:
        from privrl.audit.canary import load_expert_canary
        from privrl.audit.expert import filter_calibration, filter_claimed

        params = flag_parameters(
            ("δ1", config.delta),
            ("L (maximum trajectory length)", config.max_len),
            ("|A|", config.actions),
            ("p_min", config.p_min),
            ("ε1", config.epsilon),
        )
        calib = filter_calibration(
            config.epsilon,  # type: ignore[arg-type]
            config.delta,
            config.max_len,
            config.p_min,
            config.calibration,
        )
        params.derive("ε'", calib.epsilon_prime, f"{config.calibration} calibration, T = 1")
        params.derive("θ + shift", calib.theta_shifted, "c_min/p_min + (4/ε')·ln(1/δ')")
        report = filter_claimed(None if config.non_private else calib, config.delta)
        report = synthetic_report(report, params)
        public = {
            "command": "audit expert-dp",
            "audit": {
                "rounds": 1,
                "epsilon_prime": calib.epsilon_prime,
                "theta_shifted": calib.theta_shifted,
                "audited_release": "the stable-prefix length of one DataRelease round",
            },
        }
        greedy = load_file_canary(config, load_expert_canary, L=config.max_len, A=config.actions)
        return Plan(report=report, public=public, facts={"greedy": greedy})

    def trials(self, config: Any, plan: Plan, rng: np.random.Generator, ctx: RunContext) -> Any:
        from privrl.audit.expert import ConsensusFilterAuditSettings, audit_consensus_filter

        return audit_consensus_filter(
            ConsensusFilterAuditSettings(
                epsilon=config.epsilon,
                non_private=config.non_private,
                delta=config.delta,
                max_len=config.max_len,
                actions=config.actions,
                p_min=config.p_min,
                calibration=config.calibration,
            ),
            **self.trial_keywords(config, plan, rng, ctx, "greedy"),
        )


# ---------------------------------------------------------------------------------------------
# expert-dp: expert-level DP-SGD (selective DP-SGD's private steps), one run
# ---------------------------------------------------------------------------------------------


ONE_RUN_FILE_HELP = (
    "--canaries m {what} in privrl's format{ids}, Box((3,)) observations (1 + 2 inputs) and "
    "Discrete(2) actions: canary j's first input goes on its own coordinate j, the other two "
    "on the background's inputs (as worst's canaries)."
)


@dataclass(frozen=True)
class AuditExpertDpSgdConfig(RunConfig):
    """One-run audit of expert-level DP-SGD (Sharma et al., Algorithm 4; the private steps of
    selective DP-SGD) with m canary experts (Steinke, Nasr & Jagielski 2023)."""

    system: ClassVar[str] = "audit-expert-dp-sgd"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = _epsilon("Target ε: z calibrated by PLD for the N steps.")
    noise_multiplier: float | None = _noise_multiplier()
    non_private: bool = _non_private("minibatch SGD, no noise")
    delta: float = _delta()
    steps: int = option(5, "--steps", help="Private steps N.")
    clip: float = option(1.0, "--clip", help="Clip norm C (per expert).", allow_nan=True)
    canaries: int | None = _one_run_canaries("Canary experts m (each in w.p. ½).")
    guesses: int | None = _one_run_guesses()
    background: int = option(50, "--background", help="Background experts.")
    canary: str = _canary(
        ONE_RUN_FILE_HELP.format(what="experts", ids=" (grouped by unit id; one episode each "
                                 "without ids)")
    )  # fmt: skip
    confidence: float = _confidence()

    def validate(self) -> None:
        check_noise_flags(self)
        _at_least(self, {"steps": 1, "canaries": 2, "guesses": 2, "background": 0})
        check_guesses(self)
        check(
            (self.canaries or 0) <= 5000 and self.steps <= 10_000,
            "canaries",
            "--canaries <= 5000 and --steps <= 10000 keep one audit within minutes",
        )
        check_canary(self, True)
        check_confidence(self)


EXPERT_ONE_RUN = (500, 50)  # the one-run audit's smallest m and r
EXPERT_ONE_RUN_CAP = 4000  # m canary experts read m inputs: a learner of ~16·m weights


class AuditExpertDpSgd(AuditSystem):
    """expert-level DP-SGD (`expert.dpsgd.expert_dp_sgd`), add/remove one expert, one run."""

    name = "audit-expert-dp-sgd"
    Config = AuditExpertDpSgdConfig
    summary = "expert-dp's private DP-SGD steps, one run with canary experts (Steinke et al.)."

    def plan(self, config: AuditExpertDpSgdConfig, header: Any | None) -> Plan:
        from privrl.audit.canary import load_one_run_canaries
        from privrl.audit.expert import expert_dp_sgd_claimed

        params = flag_parameters(
            ("δ", config.delta), ("steps N", config.steps), ("clip C", config.clip)
        )
        params.derive("sampling rate q", 1.0, "b = m: every expert is sampled each step")
        z = resolve_noise_multiplier(params, config, 1.0, config.steps)

        def claimed(canaries: int) -> Any:
            return expert_dp_sgd_claimed(
                noise_multiplier=z,
                canaries=canaries,
                background=config.background,
                batch_size=None,
                steps=config.steps,
                delta=config.delta,
                clip=config.clip,
            )

        claim = float(claimed(EXPERT_ONE_RUN[0]).epsilon)  # ε does not depend on m
        size = one_run_canaries(config, claim, params, base=EXPERT_ONE_RUN, cap=EXPERT_ONE_RUN_CAP)
        params.derive(
            "experts (declared: canaries + background)",
            size.canaries + config.background,
            "m + --background",
        )
        report = synthetic_report(claimed(size.canaries), params)
        units = load_file_canary(
            config, load_one_run_canaries, m=size.canaries, inputs=3, actions=2, unit="expert"
        )
        public = {
            "command": "audit expert-dp-sgd",
            "audit": {
                "noise_multiplier": z,
                "mode": "one-run",
                "learner": "discrete CQL",
                "canaries": size.canaries,
                "guesses": size.guesses,
                "epsilon_ceiling": size.ceiling,
            },
        }
        return Plan(report=report, public=public, facts={"z": z, "units": units, "size": size})

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        from privrl.audit.expert import ExpertDPSGDAuditSettings, audit_expert_dp_sgd_one_run

        assert ctx.plan is not None
        audit = audit_expert_dp_sgd_one_run(
            ExpertDPSGDAuditSettings(
                noise_multiplier=ctx.plan.facts["z"],
                background=config.background,
                steps=config.steps,
                delta=config.delta,
                clip=config.clip,
            ),
            canaries=ctx.plan.facts["size"].canaries,
            guesses=ctx.plan.facts["size"].guesses,
            confidence=config.confidence,
            canary="worst" if ctx.plan.facts["units"] is not None else config.canary,
            units=ctx.plan.facts["units"],
            rng=rng,
        )
        return one_run_result(audit, ctx.plan.report, config.confidence, "loss")


# ---------------------------------------------------------------------------------------------
# PRIMORL: DP-FedAvg, one run
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditPrimorlConfig(RunConfig):
    """One-run audit of PRIMORL's TDP ensemble training (DP-FedAvg, the paper's Algorithm 2)
    with m canary trajectories (Steinke, Nasr & Jagielski 2023)."""

    system: ClassVar[str] = "audit-primorl"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = _epsilon("Target ε: z calibrated by PLD at T rounds.")
    noise_multiplier: float | None = _noise_multiplier()
    non_private: bool = _non_private("z = 0, NO NOISE; C kept")
    delta: float = _delta()
    rate: float = option(1.0, "--rate", help="Poisson sampling rate q.", allow_nan=True)
    rounds: int = option(1, "--rounds", help="Rounds T.")
    clip: float = option(
        1.0, "--clip", help="Clip norm C (joint over the ensemble).", allow_nan=True
    )
    local_lr: float = option(1.0, "--local-lr", help="Local SGD step η.", allow_nan=True)
    canaries: int | None = _one_run_canaries("Canary trajectories m (each in w.p. ½).")
    guesses: int | None = _one_run_guesses()
    background: int = option(100, "--background", help="Background trajectories.")
    members: int = option(2, "--members", help="Ensemble members N.")
    hidden: int = option(16, "--hidden", help="Hidden units (one layer).")
    statistic: str = option(
        "loss",
        "--statistic",
        help="loss (the released model's loss on the canary, vs θ_0) | gradient (projection "
        "on the canary's own update; worst canaries only).",
    )
    canary: str = _canary(
        ONE_RUN_FILE_HELP.format(what="trajectories", ids=" (one episode each)").replace(
            "Discrete(2) actions", "Box((1,)) actions"
        )
    )
    confidence: float = _confidence()

    def validate(self) -> None:
        check_noise_flags(self)
        _positive(self.local_lr, "local_lr")
        check_rate(self)
        _at_least(self, {"rounds": 1, "canaries": 2, "guesses": 2, "background": 0})
        for key in ("members", "hidden"):
            check(getattr(self, key) >= 1, key, f"must be >= 1, got {getattr(self, key)}")
        check_guesses(self)
        check(
            (self.canaries or 0) <= 5000 and self.rounds <= 1000,
            "canaries",
            "--canaries <= 5000 and --rounds <= 1000 keep one audit within minutes",
        )
        check(
            self.statistic in ("loss", "gradient"),
            "statistic",
            f"must be 'loss' or 'gradient', got {self.statistic!r}",
        )
        check_canary(self, True)
        if self.canary == "random" and self.statistic == "gradient":
            raise ValueError(
                "--statistic gradient reads canary j's own row of the first layer, which "
                "random canaries do not own (worst's and a file's do); use --statistic loss "
                "with --canary random"
            )
        check_confidence(self)


PRIMORL_ONE_RUN = (1000, 100)  # the one-run audit's smallest m and r
PRIMORL_ONE_RUN_CAP = 2000  # every canary is a client of the T-round training


class AuditPrimorl(AuditSystem):
    """PRIMORL's DP-FedAvg (the paper's Algorithm 2), add/remove one trajectory, one run."""

    name = "audit-primorl"
    Config = AuditPrimorlConfig
    summary = "PRIMORL's DP-FedAvg ensemble, one run with canary trajectories (Steinke et al.)."

    def _setup(self, config: AuditPrimorlConfig, canaries: int) -> Any:
        from privrl.audit.canary import load_one_run_canaries
        from privrl.audit.primorl import PrimorlAuditSetup

        units = load_file_canary(
            config,
            load_one_run_canaries,
            m=canaries,
            inputs=3,
            actions=1,
            unit="trajectory",
            continuous=True,
        )
        if units is not None:
            blind = [j for j, (ep,) in enumerate(units) if not ep.observations[:-1, 0].any()]
            if config.statistic == "gradient" and blind:
                raise ValueError(
                    f"--canary {config.canary}: canary trajectory(ies) {blind[:5]} have first "
                    "input 0 at every step, so they never move their own row of the first "
                    "layer that --statistic gradient reads; give them a nonzero first input or "
                    "use --statistic loss"
                )
        return PrimorlAuditSetup(
            canaries=canaries,
            background=config.background,
            members=config.members,
            hidden=config.hidden,
            canary="file" if units is not None else config.canary,
            file=units,
        )

    def plan(self, config: AuditPrimorlConfig, header: Any | None) -> Plan:
        from privrl.audit.primorl import n_params, primorl_plan
        from privrl.privacy.public import PublicParameters

        def planned(units: int) -> Any:
            return primorl_plan(
                noise_multiplier=0.0 if config.non_private else config.noise_multiplier,
                target_epsilon=config.epsilon,
                delta=config.delta,
                rate=config.rate,
                clip=config.clip,
                rounds=config.rounds,
                units=units,
                local_lr=config.local_lr,
            )

        base = planned(PRIMORL_ONE_RUN[0] + config.background)  # ε does not depend on K
        claim = float(base.report(base.T_max, 1).epsilon)
        sizes = PublicParameters()
        size = one_run_canaries(config, claim, sizes, base=PRIMORL_ONE_RUN, cap=PRIMORL_ONE_RUN_CAP)
        setup = self._setup(config, size.canaries)
        plan = planned(setup.units)
        report = plan.report(plan.T_max, n_params(setup))  # its public parameters attached
        report.notes.append(SYNTHETIC_NOTE)
        public = {
            "command": "audit primorl",
            "audit": {
                "noise_multiplier": plan.z,
                "K": setup.units,
                "mode": "one-run",
                "canaries": size.canaries,
                "guesses": size.guesses,
                "epsilon_ceiling": size.ceiling,
                "size_sources": {p.name: p.source.value for p in sizes},
                "audited_release": "the dynamics ensemble after T DP-FedAvg rounds",
            },
        }
        facts = {"plan": plan, "setup": setup, "size": size}
        return Plan(report=report, public=public, facts=facts)

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        from privrl.audit.primorl import audit_primorl_one_run

        assert ctx.plan is not None
        audit = audit_primorl_one_run(
            plan=ctx.plan.facts["plan"],
            setup=ctx.plan.facts["setup"],
            guesses=ctx.plan.facts["size"].guesses,
            statistic=config.statistic,
            confidence=config.confidence,
            rng=rng,
        )
        result = one_run_result(audit, ctx.plan.report, config.confidence, config.statistic)
        result.metrics["rounds"] = config.rounds
        return result
