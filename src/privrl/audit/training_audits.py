"""Audits of private training and of expert-dp's filter: DP-SGD (many runs or one run),
expert-dp's consensus filter, expert-level DP-SGD and PRIMORL's DP-FedAvg (docs/audit.md).

Each is a config and an `Audit` (`privrl.audit.base`), as in `privrl.audit.statistic_audits`:

- `DpSgdAudit`: DP-SGD's final parameters with a gradient canary, in many runs (two-run
  game, Clopper–Pearson) or in ONE run with many canaries (``mode="one-run"``; Steinke, Nasr
  & Jagielski 2023) (`privrl.audit.dpsgd`);
- `ExpertDpAudit`: vectorised trials of one DataRelease round with a canary expert
  (`privrl.audit.expert`), bound by Clopper–Pearson;
- `ExpertDpSgdAudit`: ONE run of expert-level DP-SGD (selective DP-SGD's private steps) with
  m canary experts (`privrl.audit.expert`), bound by Steinke, Nasr & Jagielski 2023;
- `PrimorlAudit`: ONE DP-FedAvg training with m canary trajectories each included with
  probability ½ (`privrl.audit.primorl`), bound by Steinke, Nasr & Jagielski 2023.

The units, experts, trajectories and canaries are synthetic and public (drawn from the seed)
or the auditor's canary file: no dataset, no ledger, no budget. Each audit has its
non-private twin (``non_private=True``), the same code with the noise switched off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privrl.algorithm import Plan
from privrl.audit.attacks import AuditTrials
from privrl.audit.base import (
    SYNTHETIC_NOTE,
    Audit,
    AuditConfig,
    AuditResult,
    at_least,
    canaries_field,
    canary_field,
    check_canary,
    check_confidence,
    check_guesses,
    check_noise_settings,
    check_rate,
    confidence_field,
    delta_field,
    epsilon_field,
    given_parameters,
    guesses_field,
    load_file_canary,
    noise_multiplier_field,
    non_private_field,
    one_run_canaries,
    one_run_outcome,
    positive,
    resolve_noise_multiplier,
    synthetic_report,
    trials_field,
)
from privrl.config import Config, check, option
from privrl.nn.device import DEVICE_HELP, check_device
from privrl.privacy.public import PublicParameters
from privrl.privacy.report import PrivacyReport
from privrl.progress import Progress, no_progress

__all__ = [
    "AuditDpSgdConfig",
    "AuditExpertDpConfig",
    "AuditExpertDpSgdConfig",
    "AuditPrimorlConfig",
    "DpSgdAudit",
    "ExpertDpAudit",
    "ExpertDpSgdAudit",
    "PrimorlAudit",
]


# ---------------------------------------------------------------------------------------------
# DP-SGD
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditDpSgdConfig(AuditConfig):
    """Audit of DP-SGD (Algorithm 4 of Sharma et al.; Abadi et al. 2016) with a gradient
    canary, in many runs (two-run game) or in one run (Steinke et al. 2023)."""

    system: ClassVar[str] = "audit-dp-sgd"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = epsilon_field("Target ε: z calibrated by PLD (as `train dp-sgd`).")
    noise_multiplier: float | None = noise_multiplier_field()
    non_private: bool = non_private_field("the same SGD steps, no noise")
    delta: float = delta_field()
    rate: float = option(1.0, "--rate", help="Poisson sampling rate q.", allow_nan=True)
    steps: int = option(1, "--steps", help="Steps N.")
    clip: float = option(1.0, "--clip", help="Clip norm C.", allow_nan=True)
    background: int = option(10, "--background", help="Units in D₀ besides the canaries.")
    mode: str = option("two-run", "--mode", help="two-run (many runs) | one-run (one run).")
    canaries: int | None = canaries_field("one-run: canaries m (each in w.p. ½).")
    guesses: int | None = guesses_field()
    trials: int = trials_field()
    canary: str = canary_field(
        "one episode (or one transition) with Box((3,)) observations, the linear model's "
        "1 + 2 inputs; the canary's input is the mean of its observations. In one-run mode: "
        "m such episodes (m canaries), unit j's first input on its own coordinate j."
    )
    confidence: float = confidence_field()

    def validate(self) -> None:
        check_noise_settings(self)
        self.check_common()
        check_rate(self)
        at_least(self, {"steps": 1, "background": 0, "canaries": 2, "guesses": 2})
        check(
            self.mode in ("two-run", "one-run"),
            "mode",
            f"must be 'two-run' or 'one-run', got {self.mode!r}",
        )
        check_guesses(self)
        check(
            self.steps * self.trials <= 50_000_000,
            "steps",
            f"× `trials` = {self.steps * self.trials} is too many; lower one of them",
        )


DP_SGD_ONE_RUN = (1000, 100)  # the one-run audit's smallest m and r
DP_SGD_ONE_RUN_CAP = 4000  # the units' inputs are m × m: ~130 MB at the cap


class DpSgdAudit(Audit[AuditDpSgdConfig]):
    """DP-SGD with a worst-case gradient canary (Nasr et al. 2021), add/remove one unit."""

    name = "audit-dp-sgd"
    Config = AuditDpSgdConfig
    summary = "DP-SGD's final parameters with a gradient canary (many runs or one run)."

    def plan(self) -> Plan:
        from privrl.audit.canary import load_gradient_canaries, load_gradient_canary
        from privrl.audit.dpsgd import dp_sgd_claimed

        config = self.config
        params = given_parameters(
            ("δ", config.delta),
            ("sampling rate q", config.rate),
            ("steps N", config.steps),
            ("clip C", config.clip),
        )
        z = resolve_noise_multiplier(params, config, config.rate, config.steps)

        def claimed(canaries: int) -> PrivacyReport:
            return dp_sgd_claimed(
                noise_multiplier=z,
                rate=config.rate,
                steps=config.steps,
                delta=config.delta,
                params=2 + canaries,  # the canaries' directions and the background's 2
                units=config.background + canaries,
                clip=config.clip,
            )

        size = None
        if config.mode == "one-run":  # ε does not depend on m: the claim picks m
            claim = float(claimed(DP_SGD_ONE_RUN[0]).epsilon)
            size = one_run_canaries(
                config, claim, params, base=DP_SGD_ONE_RUN, cap=DP_SGD_ONE_RUN_CAP
            )
        canaries = 1 if size is None else size.canaries
        report = synthetic_report(claimed(canaries), params)
        unit = (
            load_file_canary(config, load_gradient_canaries, p=3, m=canaries)
            if config.mode == "one-run"
            else load_file_canary(config, load_gradient_canary, p=3)
        )
        audit: dict[str, Any] = {"noise_multiplier": z, "mode": config.mode}
        if size is not None:
            audit |= {"canaries": size.canaries, "guesses": size.guesses}
            audit["epsilon_ceiling"] = size.ceiling
        public = {"command": "audit dp-sgd", "audit": audit}
        return Plan(report=report, public=public, facts={"z": z, "unit": unit, "size": size})

    def _settings(self, plan: Plan) -> Any:
        from privrl.audit.dpsgd import DPSGDAuditSettings

        config = self.config
        return DPSGDAuditSettings(
            noise_multiplier=plan.facts["z"],
            rate=config.rate,
            steps=config.steps,
            delta=config.delta,
            clip=config.clip,
            background=config.background,
        )

    def trials(self, plan: Plan, rng: np.random.Generator, progress: Progress) -> AuditTrials:
        from privrl.audit.dpsgd import audit_dp_sgd

        return audit_dp_sgd(
            self._settings(plan), **self.trial_keywords(plan, rng, progress, "unit")
        )

    def play(
        self, plan: Plan, rng: np.random.Generator, progress: Progress = no_progress
    ) -> AuditResult:
        config = self.config
        if config.mode == "two-run":
            return super().play(plan, rng, progress)
        from privrl.audit.dpsgd import audit_dp_sgd_one_run

        audit = audit_dp_sgd_one_run(
            self._settings(plan),
            canaries=plan.facts["size"].canaries,
            guesses=plan.facts["size"].guesses,
            confidence=config.confidence,
            canary="worst" if plan.facts["unit"] is not None else config.canary,
            units=plan.facts["unit"],
            rng=rng,
        )
        return one_run_outcome(audit, plan.report, config.confidence)


# ---------------------------------------------------------------------------------------------
# expert-dp: the consensus filter
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditExpertDpConfig(AuditConfig):
    """Audit of expert-dp's consensus filter (Sharma et al., Algorithm 2, one round) with a
    canary expert; ε1, δ1 the filter's budget, L the public maximum trajectory length."""

    system: ClassVar[str] = "audit-expert-dp"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = epsilon_field("The filter's budget ε1 (its claimed ε).")
    non_private: bool = non_private_field("the same threshold, no noise")
    delta: float = delta_field("The filter's δ1.")
    max_len: int = option(5, "--max-len", help="L: the longest trajectory the filter queries.")
    actions: int = option(2, "--actions", help="|A|.")
    p_min: float = option(0.01, "--p-min", help="p_min of the modified experts.", allow_nan=True)
    calibration: str = option("pld", "--calibration", help="paper | tight | pld (ε' from ε1).")
    trials: int = trials_field()
    canary: str = canary_field(
        "one expert's episodes with Discrete(L) observations (τ's states) and Discrete(|A|) "
        "actions: its greedy action in a state is the one it takes most often there "
        "(a state it never visits: random)."
    )
    confidence: float = confidence_field()

    def validate(self) -> None:
        check(self.epsilon is not None, "epsilon", "is required (the filter's ε1); pass `epsilon`")
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


class ExpertDpAudit(Audit[AuditExpertDpConfig]):
    """expert-dp's consensus filter (Sharma et al., Algorithm 2), add/remove one expert."""

    name = "audit-expert-dp"
    Config = AuditExpertDpConfig
    summary = "expert-dp's consensus filter (one DataRelease round), add/remove one expert."

    def plan(self) -> Plan:
        from privrl.audit.canary import load_expert_canary
        from privrl.audit.expert import filter_calibration, filter_claimed

        config = self.config
        params = given_parameters(
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

    def trials(self, plan: Plan, rng: np.random.Generator, progress: Progress) -> AuditTrials:
        from privrl.audit.expert import ConsensusFilterAuditSettings, audit_consensus_filter

        config = self.config
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
            **self.trial_keywords(plan, rng, progress, "greedy"),
        )


# ---------------------------------------------------------------------------------------------
# expert-dp: expert-level DP-SGD (selective DP-SGD's private steps), one run
# ---------------------------------------------------------------------------------------------


ONE_RUN_FILE_HELP = (
    "m {what} (m canaries) in privrl's format{ids}, Box((3,)) observations (1 + 2 inputs) and "
    "Discrete(2) actions: canary j's first input goes on its own coordinate j, the other two "
    "on the background's inputs (as worst's canaries)."
)


@dataclass(frozen=True)
class AuditExpertDpSgdConfig(Config):
    """One-run audit of expert-level DP-SGD (Sharma et al., Algorithm 4; the private steps of
    selective DP-SGD) with m canary experts (Steinke, Nasr & Jagielski 2023)."""

    system: ClassVar[str] = "audit-expert-dp-sgd"
    file_canary: ClassVar[bool] = True
    no_file_canary: ClassVar[str] = ""
    epsilon: float | None = epsilon_field("Target ε: z calibrated by PLD for the N steps.")
    noise_multiplier: float | None = noise_multiplier_field()
    non_private: bool = non_private_field("minibatch SGD, no noise")
    delta: float = delta_field()
    steps: int = option(5, "--steps", help="Private steps N.")
    clip: float = option(1.0, "--clip", help="Clip norm C (per expert).", allow_nan=True)
    canaries: int | None = canaries_field("Canary experts m (each in w.p. ½).")
    guesses: int | None = guesses_field()
    background: int = option(50, "--background", help="Background experts.")
    canary: str = canary_field(
        ONE_RUN_FILE_HELP.format(what="experts", ids=" (grouped by unit id; one episode each "
                                 "without ids)")
    )  # fmt: skip
    confidence: float = confidence_field()
    device: str = option("auto", "--device", help=DEVICE_HELP, keyless_default=True)

    def validate(self) -> None:
        check_noise_settings(self)
        problem = check_device(self.device)
        check(problem is None, "device", problem or "")
        at_least(self, {"steps": 1, "canaries": 2, "guesses": 2, "background": 0})
        check_guesses(self)
        check(
            (self.canaries or 0) <= 5000 and self.steps <= 10_000,
            "canaries",
            "<= 5000 and `steps` <= 10000 keep one audit within minutes",
        )
        check_canary(self, True)
        check_confidence(self)


EXPERT_ONE_RUN = (500, 50)  # the one-run audit's smallest m and r
EXPERT_ONE_RUN_CAP = 4000  # m canary experts read m inputs: a learner of ~16·m weights


class ExpertDpSgdAudit(Audit[AuditExpertDpSgdConfig]):
    """expert-level DP-SGD (`expert.dpsgd.expert_dp_sgd`), add/remove one expert, one run."""

    name = "audit-expert-dp-sgd"
    Config = AuditExpertDpSgdConfig
    summary = "expert-dp's private DP-SGD steps, one run with canary experts (Steinke et al.)."

    def plan(self) -> Plan:
        from privrl.audit.canary import load_one_run_canaries
        from privrl.audit.expert import expert_dp_sgd_claimed
        from privrl.expert.api import learner_device
        from privrl.nn.device import describe_device

        config = self.config
        device = learner_device(config.device)  # an absent GPU is refused before any work
        params = given_parameters(
            ("δ", config.delta), ("steps N", config.steps), ("clip C", config.clip)
        )
        params.derive("sampling rate q", 1.0, "b = m: every expert is sampled each step")
        z = resolve_noise_multiplier(params, config, 1.0, config.steps)

        def claimed(canaries: int) -> PrivacyReport:
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
            "m + `background`",
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
                "device": describe_device(device),  # public: the hardware used
                "canaries": size.canaries,
                "guesses": size.guesses,
                "epsilon_ceiling": size.ceiling,
            },
        }
        facts = {"z": z, "units": units, "size": size, "device": device}
        return Plan(report=report, public=public, facts=facts)

    def play(
        self, plan: Plan, rng: np.random.Generator, progress: Progress = no_progress
    ) -> AuditResult:
        from privrl.audit.expert import ExpertDPSGDAuditSettings, audit_expert_dp_sgd_one_run

        config = self.config
        audit = audit_expert_dp_sgd_one_run(
            ExpertDPSGDAuditSettings(
                noise_multiplier=plan.facts["z"],
                background=config.background,
                steps=config.steps,
                delta=config.delta,
                clip=config.clip,
                device=plan.facts["device"],
            ),
            canaries=plan.facts["size"].canaries,
            guesses=plan.facts["size"].guesses,
            confidence=config.confidence,
            canary="worst" if plan.facts["units"] is not None else config.canary,
            units=plan.facts["units"],
            rng=rng,
        )
        return one_run_outcome(audit, plan.report, config.confidence, "loss")


# ---------------------------------------------------------------------------------------------
# PRIMORL: DP-FedAvg, one run
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditPrimorlConfig(Config):
    """One-run audit of PRIMORL's TDP ensemble training (DP-FedAvg, the paper's Algorithm 2)
    with m canary trajectories (Steinke, Nasr & Jagielski 2023)."""

    system: ClassVar[str] = "audit-primorl"
    file_canary: ClassVar[bool] = True
    no_file_canary: ClassVar[str] = ""
    epsilon: float | None = epsilon_field("Target ε: z calibrated by PLD at T rounds.")
    noise_multiplier: float | None = noise_multiplier_field()
    non_private: bool = non_private_field("z = 0, NO NOISE; C kept")
    delta: float = delta_field()
    rate: float = option(1.0, "--rate", help="Poisson sampling rate q.", allow_nan=True)
    rounds: int = option(1, "--rounds", help="Rounds T.")
    clip: float = option(
        1.0, "--clip", help="Clip norm C (joint over the ensemble).", allow_nan=True
    )
    local_lr: float = option(1.0, "--local-lr", help="Local SGD step η.", allow_nan=True)
    canaries: int | None = canaries_field("Canary trajectories m (each in w.p. ½).")
    guesses: int | None = guesses_field()
    background: int = option(100, "--background", help="Background trajectories.")
    members: int = option(2, "--members", help="Ensemble members N.")
    hidden: int = option(16, "--hidden", help="Hidden units (one layer).")
    statistic: str = option(
        "loss",
        "--statistic",
        help="loss (the released model's loss on the canary, vs θ_0) | gradient (projection "
        "on the canary's own update; worst canaries only).",
    )
    canary: str = canary_field(
        ONE_RUN_FILE_HELP.format(what="trajectories", ids=" (one episode each)").replace(
            "Discrete(2) actions", "Box((1,)) actions"
        )
    )
    confidence: float = confidence_field()

    def validate(self) -> None:
        check_noise_settings(self)
        positive(self.local_lr, "local_lr")
        check_rate(self)
        at_least(self, {"rounds": 1, "canaries": 2, "guesses": 2, "background": 0})
        for key in ("members", "hidden"):
            check(getattr(self, key) >= 1, key, f"must be >= 1, got {getattr(self, key)}")
        check_guesses(self)
        check(
            (self.canaries or 0) <= 5000 and self.rounds <= 1000,
            "canaries",
            "<= 5000 and `rounds` <= 1000 keep one audit within minutes",
        )
        check(
            self.statistic in ("loss", "gradient"),
            "statistic",
            f"must be 'loss' or 'gradient', got {self.statistic!r}",
        )
        check_canary(self, True)
        if self.canary == "random" and self.statistic == "gradient":
            raise ValueError(
                "`statistic=gradient` reads canary j's own row of the first layer, which "
                "random canaries do not own (worst's and a file's do); use `statistic=loss` "
                "with `canary=random`"
            )
        check_confidence(self)


PRIMORL_ONE_RUN = (1000, 100)  # the one-run audit's smallest m and r
PRIMORL_ONE_RUN_CAP = 2000  # every canary is a client of the T-round training


class PrimorlAudit(Audit[AuditPrimorlConfig]):
    """PRIMORL's DP-FedAvg (the paper's Algorithm 2), add/remove one trajectory, one run."""

    name = "audit-primorl"
    Config = AuditPrimorlConfig
    summary = "PRIMORL's DP-FedAvg ensemble, one run with canary trajectories (Steinke et al.)."

    def _setup(self, canaries: int) -> Any:
        from privrl.audit.canary import load_one_run_canaries
        from privrl.audit.primorl import PrimorlAuditSetup

        config = self.config
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
                    f"`canary={config.canary}`: canary trajectory(ies) {blind[:5]} have first "
                    "input 0 at every step, so they never move their own row of the first "
                    "layer that `statistic=gradient` reads; give them a nonzero first input "
                    "or use `statistic=loss`"
                )
        return PrimorlAuditSetup(
            canaries=canaries,
            background=config.background,
            members=config.members,
            hidden=config.hidden,
            canary="file" if units is not None else config.canary,
            file=units,
        )

    def plan(self) -> Plan:
        from privrl.audit.primorl import n_params, primorl_plan

        config = self.config

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
        setup = self._setup(size.canaries)
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

    def play(
        self, plan: Plan, rng: np.random.Generator, progress: Progress = no_progress
    ) -> AuditResult:
        from privrl.audit.primorl import audit_primorl_one_run

        config = self.config
        audit = audit_primorl_one_run(
            plan=plan.facts["plan"],
            setup=plan.facts["setup"],
            guesses=plan.facts["size"].guesses,
            statistic=config.statistic,
            confidence=config.confidence,
            rng=rng,
        )
        result = one_run_outcome(audit, plan.report, config.confidence, config.statistic)
        result.metrics["rounds"] = config.rounds
        return result
