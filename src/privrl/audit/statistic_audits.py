"""Audits of released statistics: DP-APVI's noisy counts, GPOPE's iterates, DP-VAPVI's
Gaussian vectors, DP-LSW's θ and SDP-PE's shuffle counters (docs/audit.md).

Each is a config and an `Audit` (`privrl.audit.base`): `plan` resolves the public parameters
(the problem's sizes, δ, the target ε or the noise), calibrates the noise from them and states
the audited system's claimed report; `play` runs vectorised trials of the system's own release
on two neighbouring datasets D and D' (`privrl.audit.attacks`, `privrl.audit.releases`) and
bounds ε from below (Clopper–Pearson). D₀ and the canary are synthetic, drawn from the seed,
or the auditor's canary file. Each audit has its non-private twin (`non_private=True`, or
σ = 0 for GPOPE), the same release code with the noise switched off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from privrl.algorithm import Plan
from privrl.audit.attacks import AuditTrials
from privrl.audit.base import (
    TABULAR_FILE_HELP,
    Audit,
    AuditConfig,
    at_least,
    canary_episode,
    canary_field,
    confidence_field,
    delta_field,
    epsilon_field,
    given_parameters,
    load_file_canary,
    non_private_field,
    one_of,
    positive,
    synthetic_report,
    trials_field,
)
from privrl.config import check, option
from privrl.privacy.noise import NoiseSource
from privrl.privacy.public import PublicParameters
from privrl.progress import Progress

__all__ = [
    "AuditDpApviConfig",
    "AuditDpLswConfig",
    "AuditDpVapviConfig",
    "AuditGpopeConfig",
    "AuditSdpPeConfig",
    "DpApviAudit",
    "DpLswAudit",
    "DpVapviAudit",
    "GpopeAudit",
    "SdpPeAudit",
]

MAX_GPOPE_STEPS = 50_000_000  # iterations × trials of one GPOPE audit (time, not memory)


# ---------------------------------------------------------------------------------------------
# DP-APVI
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditDpApviConfig(AuditConfig):
    """Audit of DP-APVI's noisy counts (eq. 2) on a random tabular MDP of H, S, A."""

    system: ClassVar[str] = "audit-dp-apvi"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = option(
        None,
        "--epsilon",
        help="Claimed ε: Gaussian: the largest ρ whose report states ε ≤ this at --delta; "
        "Laplace: the pure-DP ε (as `train dp-apvi --epsilon`).",
        allow_nan=True,
    )
    mechanism: str = option(
        "gaussian", "--mechanism", help="gaussian (zCDP counts, eq. 2) | laplace (pure DP)."
    )
    rho: float | None = option(
        None, "--rho", help="zCDP budget ρ (instead of --epsilon).", allow_nan=True
    )
    non_private: bool = option(
        False,
        "--non-private/",
        help="Audit the non-private twin (APVI's counts, no noise).",
    )
    delta: float = option(1e-6, "--delta", help="δ at which ε is stated.", allow_nan=True)
    horizon: int = option(3, "--horizon", help="H of the audit's tabular MDP.")
    states: int = option(3, "--states", help="S (>= 2).")
    actions: int = option(2, "--actions", help="A.")
    background: int = option(20, "--background", help="Random trajectories in D₀.")
    trials: int = trials_field()
    canary: str = canary_field(TABULAR_FILE_HELP)
    confidence: float = confidence_field()

    def validate(self) -> None:
        one_of(self, ("epsilon", "rho", "non_private"), "`epsilon=E`, `rho=R` or `non_private`")
        check(
            self.mechanism in ("gaussian", "laplace"),
            "mechanism",
            f"must be 'gaussian' or 'laplace', got {self.mechanism!r}",
        )
        if self.mechanism == "laplace" and self.epsilon is None:
            raise ValueError(
                "`mechanism=laplace` takes `epsilon=E` (pure DP), not `rho` or `non_private`"
            )
        self.check_common()
        self.check_delta(self.delta)
        for key, low in (("horizon", 1), ("states", 2), ("actions", 1), ("background", 0)):
            value = getattr(self, key)
            check(value >= low, key, f"must be >= {low}, got {value}")
        positive(self.rho, "rho")


class DpApviAudit(Audit[AuditDpApviConfig]):
    """DP-APVI's noisy counts (Qiao & Wang 2023, eq. 2), replace-one on trajectories."""

    name = "audit-dp-apvi"
    Config = AuditDpApviConfig
    summary = "DP-APVI's noisy counts (Qiao & Wang 2023, eq. 2), replace-one on trajectories."

    def plan(self) -> Plan:
        from privrl.audit.attacks import apvi_claimed, calibrate_apvi_rho
        from privrl.offline.apvi import PrivacyConfig, noise_plan

        config = self.config
        params = PublicParameters()
        H = params.resolve("horizon H", flag=config.horizon, fix="pass `horizon`")
        S = params.resolve("states S", flag=config.states, fix="pass `states`")
        A = params.resolve("actions A", flag=config.actions, fix="pass `actions`")
        privacy, rho = None, config.rho
        if not config.non_private:
            d = params.resolve("δ", flag=config.delta, fix="pass `delta`")
            if config.mechanism == "laplace":
                params.resolve("pure-DP budget ε", flag=config.epsilon, fix="pass `epsilon`")
            elif rho is None:
                params.resolve("target ε", flag=config.epsilon, fix="pass `epsilon`")
                rho = params.derive(
                    "zCDP budget ρ",
                    calibrate_apvi_rho(config.epsilon, d, H, S, A),  # type: ignore[arg-type]
                    "largest ρ with ε ≤ target",
                )
            else:
                params.resolve("zCDP budget ρ", flag=rho, fix="pass `rho`")
            privacy = (
                PrivacyConfig.laplace(config.epsilon)
                if config.mechanism == "laplace"
                else PrivacyConfig.gaussian(rho, report_delta=d)
            )
        report = synthetic_report(apvi_claimed(H, S, A, privacy), params)
        episode = canary_episode(config, H, S, A)
        noise = noise_plan(H, S, A, privacy, 0.1)
        public = {
            "command": "audit dp-apvi",
            "audit": {
                "H": H,
                "S": S,
                "A": A,
                "mechanism": noise.mechanism,
                "noise_scale_per_count": noise.scale,
                "rho": rho,
                "audited_release": "the noisy counts n_h(s,a), n_h(s,a,s') of eq. (2)",
            },
        }
        return Plan(report=report, public=public, facts={"privacy": privacy, "episode": episode})

    def trials(self, plan: Plan, rng: np.random.Generator, progress: Progress) -> AuditTrials:
        from privrl.audit.attacks import audit_dp_apvi

        config = self.config
        result = audit_dp_apvi(
            H=config.horizon,
            S=config.states,
            A=config.actions,
            privacy=plan.facts["privacy"],
            n_background=config.background,
            **self.trial_keywords(plan, rng, progress, "episode"),
        )
        if config.non_private:
            result.delta = config.delta  # the twin's bound is stated at the setting's δ
        return result


# ---------------------------------------------------------------------------------------------
# GPOPE
# ---------------------------------------------------------------------------------------------


GPOPE_FILE_HELP = (
    "one episode in privrl's format and a declared feature map SPEC (the feature-map option: a "
    "privrl feature map of its observation space, of n features): its per-trajectory "
    "(Â, b̂, Ĉ) is the canary x₁ (x₀ adds no gradient)."
)


@dataclass(frozen=True)
class AuditGpopeConfig(AuditConfig):
    """Audit of GPOPE's per-step Gaussian (Algorithm 1) with n features."""

    system: ClassVar[str] = "audit-gpope"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = option(
        None,
        "--epsilon",
        help="Target ε (σ calibrated by GPOPE's rigorous accountant).",
        allow_nan=True,
    )
    sigma: float | None = option(
        None,
        "--sigma",
        help="Noise σ (std / h) instead of --epsilon; 0 = non-private twin.",
        allow_nan=True,
    )
    delta: float = option(1e-5, "--delta", help="δ of the guarantee.", allow_nan=True)
    clip: float = option(1.0, "--clip", help="Clip bound h of the gradients.", allow_nan=True)
    m: int = option(1, "--m", help="Trajectories in the dataset (1 of m per step).")
    iterations: int = option(1, "--iterations", help="Iterations N of Algorithm 1.")
    features: int = option(2, "--features", help="Feature dimension n.")
    feature_map: str | None = option(
        None,
        "--feature-map",
        help="With --canary FILE.h5: the privrl feature map (onehot, fourier:K, "
        "aggregation:B) mapping the file's episode to its (Â, b̂, Ĉ); n features.",
        keyless_default=True,
    )
    trials: int = trials_field()
    canary: str = canary_field(GPOPE_FILE_HELP)
    confidence: float = confidence_field()

    def validate(self) -> None:
        if (self.epsilon is None) == (self.sigma is None):
            raise ValueError(
                "give exactly one of `epsilon=E` or `sigma=S` (`sigma=0`: non-private)"
            )
        self.check_common()
        self.check_delta(self.delta)
        if self.sigma is not None:
            check(
                math.isfinite(self.sigma) and self.sigma >= 0,
                "sigma",
                f"must be finite and >= 0, got {self.sigma}",
            )
        positive(self.clip, "clip")
        for key in ("m", "iterations", "features"):
            value = getattr(self, key)
            check(value >= 1, key, f"must be >= 1, got {value}")
        from privrl.audit.canary import is_canary_file

        file = is_canary_file(self.canary)
        check(
            self.feature_map is None or file,
            "feature_map",
            "maps a canary FILE.h5's episode; it applies only with `canary=FILE.h5`",
        )
        check(
            self.feature_map is not None or not file,
            "feature_map",
            "is required with `canary=FILE.h5` (a privrl feature map of the file's "
            "observation space, e.g. onehot)",
        )
        if self.iterations * self.trials > MAX_GPOPE_STEPS:
            raise ValueError(
                f"`iterations` × `trials` = {self.iterations * self.trials} is too many steps "
                "for one audit; lower `trials` or `iterations`"
            )


class GpopeAudit(Audit[AuditGpopeConfig]):
    """GPOPE's per-step Gaussian (Xie et al. 2019, Algorithm 1), replace-one on trajectories."""

    name = "audit-gpope"
    Config = AuditGpopeConfig
    summary = (
        "GPOPE's per-step Gaussian (Xie et al. 2019, Algorithm 1), replace-one on trajectories."
    )

    def plan(self) -> Plan:
        from privrl.audit.attacks import GPOPE_AUDIT_GAMMA, gpope_report
        from privrl.audit.canary import load_gpope_canary
        from privrl.ope.gpope import calibrated_sigma

        config = self.config
        params = given_parameters(
            ("δ", config.delta),
            ("clip h", config.clip),
            ("trajectories m", config.m),
            ("iterations N", config.iterations),
        )
        if config.sigma is None:
            params.resolve("target ε", flag=config.epsilon, fix="pass `epsilon`")
            sigma = params.derive(
                "σ",
                calibrated_sigma(
                    config.epsilon,  # type: ignore[arg-type]
                    config.delta,
                    config.m,
                    config.iterations,
                    "rigorous",
                ),
                "GPOPE's rigorous calibration for (ε, δ, m, N)",
            )
        else:
            sigma = params.resolve("σ", flag=config.sigma, fix="pass `sigma`")
        report = synthetic_report(
            gpope_report(
                sigma=sigma,
                clip=config.clip,
                m=config.m,
                iterations=config.iterations,
                features=config.features,
                delta=config.delta,
            ),
            params,
        )
        statistic = load_file_canary(
            config,
            load_gpope_canary,
            feature_map=config.feature_map,
            n=config.features,
            gamma=GPOPE_AUDIT_GAMMA,
        )
        public = {
            "command": "audit gpope",
            "audit": {
                "sigma": sigma,
                "audited_release": "GPOPE's final iterates [θ; w] (Algorithm 1, all N noisy steps)",
            },
        }
        return Plan(report=report, public=public, facts={"statistic": statistic})

    def trials(self, plan: Plan, rng: np.random.Generator, progress: Progress) -> AuditTrials:
        from privrl.audit.attacks import GPOPEAuditSettings, audit_gpope

        config = self.config
        return audit_gpope(
            GPOPEAuditSettings(
                epsilon=config.epsilon,
                sigma=config.sigma,
                delta=config.delta,
                clip=config.clip,
                m=config.m,
                iterations=config.iterations,
                features=config.features,
            ),
            **self.trial_keywords(plan, rng, progress, "statistic"),
        )


# ---------------------------------------------------------------------------------------------
# DP-VAPVI
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditDpVapviConfig(AuditConfig):
    """Audit of DP-VAPVI's Gaussian vector releases (Algorithm 2) with d features."""

    system: ClassVar[str] = "audit-dp-vapvi"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = epsilon_field("Target ε: the largest ρ whose report states ε ≤ this.")
    rho: float | None = option(None, "--rho", help="zCDP budget ρ.", allow_nan=True)
    non_private: bool = non_private_field("VAPVI: the same statistics, no noise")
    delta: float = delta_field()
    horizon: int = option(3, "--horizon", help="H.")
    features: int = option(3, "--features", help="Feature dimension d.")
    background: int = option(20, "--background", help="Random trajectories in D₀.")
    trials: int = trials_field()
    canary: str = canary_field(
        "one episode with Box((d,)) observations: φ = its first observation (scaled to "
        "‖φ‖ ≤ 1), its return (clipped to [0, H]) the next value; x₀ drawn like random."
    )
    confidence: float = confidence_field()

    def validate(self) -> None:
        one_of(self, ("epsilon", "rho", "non_private"), "`epsilon=E`, `rho=R` or `non_private`")
        self.check_common()
        self.check_delta(self.delta)
        at_least(self, {"horizon": 1, "features": 1, "background": 0})
        positive(self.rho, "rho")


class DpVapviAudit(Audit[AuditDpVapviConfig]):
    """DP-VAPVI's Gaussian releases (Qiao & Wang 2023, Algorithm 2), replace-one trajectory."""

    name = "audit-dp-vapvi"
    Config = AuditDpVapviConfig
    summary = "DP-VAPVI's Gaussian vector releases (Algorithm 2), replace-one on trajectories."

    def plan(self) -> Plan:
        from privrl.audit.canary import load_feature_canary
        from privrl.audit.releases import calibrate, vapvi_claimed

        config = self.config
        params = PublicParameters()
        H = params.resolve("horizon H", flag=config.horizon, fix="pass `horizon`")
        params.resolve("features d", flag=config.features, fix="pass `features`")
        d = params.resolve("δ", flag=config.delta, fix="pass `delta`")
        rho = config.rho
        if config.epsilon is not None:
            target = config.epsilon
            params.resolve("target ε", flag=target, fix="pass `epsilon`")
            rho = params.derive(
                "zCDP budget ρ",
                calibrate(lambda r: float(vapvi_claimed(r, d).epsilon), target),
                "largest ρ with ε ≤ target",
            )
        elif rho is not None:
            params.resolve("zCDP budget ρ", flag=rho, fix="pass `rho`")
        report = synthetic_report(vapvi_claimed(rho, d), params)
        feature = load_file_canary(config, load_feature_canary, d=config.features, H=H)
        public = {"command": "audit dp-vapvi", "audit": {"H": H, "rho": rho}}
        return Plan(report=report, public=public, facts={"rho": rho, "feature": feature})

    def trials(self, plan: Plan, rng: np.random.Generator, progress: Progress) -> AuditTrials:
        from privrl.audit.releases import audit_dp_vapvi

        config = self.config
        return audit_dp_vapvi(
            rho=plan.facts["rho"],
            H=config.horizon,
            d=config.features,
            delta=config.delta,
            background=config.background,
            **self.trial_keywords(plan, rng, progress, "feature"),
        )


# ---------------------------------------------------------------------------------------------
# DP-LSW
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditDpLswConfig(AuditConfig):
    """Audit of DP-LSW's released θ (Balle et al. 2016, output perturbation)."""

    system: ClassVar[str] = "audit-dp-lsw"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = epsilon_field()
    non_private: bool = non_private_field("LSW: the same θ, no noise")
    delta: float = delta_field()
    states: int = option(1, "--states", help="States S (tabular features Φ = I).")
    trajectories: int = option(1, "--trajectories", help="Trajectories m in D.")
    return_range: float = option(
        1.0, "--return-range", help="Declared range of a return.", allow_nan=True
    )
    algorithm: str = option(
        "dp-lsw",
        "--algorithm",
        help="dp-lsw (V1, fixed weights) | dp-lsl (V2, ridge with count weights, λ = 2·m^0.4).",
    )
    trials: int = trials_field()
    canary: str = canary_field(
        "one episode with Discrete(S) observations visiting every state: its first-visit "
        "returns (undiscounted, clipped to the declared return range); x₀ drawn like random."
    )
    confidence: float = confidence_field()

    def validate(self) -> None:
        one_of(self, ("epsilon", "non_private"), "`epsilon=E` or `non_private`")
        self.check_common()
        self.check_delta(self.delta)
        at_least(self, {"states": 1, "trajectories": 1})
        positive(self.return_range, "return_range")
        check(
            self.algorithm in ("dp-lsw", "dp-lsl"),
            "algorithm",
            f"must be 'dp-lsw' or 'dp-lsl', got {self.algorithm!r}",
        )


class DpLswAudit(Audit[AuditDpLswConfig]):
    """DP-LSW's θ (Balle et al. 2016, V1), replace-one trajectory."""

    name = "audit-dp-lsw"
    Config = AuditDpLswConfig
    summary = "DP-LSW's released θ (Balle et al. 2016, smooth sensitivity), replace-one."

    def plan(self) -> Plan:
        from privrl.audit.canary import load_lsw_canary
        from privrl.audit.releases import lsw_claimed

        config = self.config
        params = given_parameters(
            ("δ", config.delta),
            ("states S", config.states),
            ("trajectories m", config.trajectories),
            ("return range", config.return_range),
        )
        if config.epsilon is not None:
            params.resolve("ε", flag=config.epsilon, fix="pass `epsilon`")
        report = synthetic_report(
            lsw_claimed(
                epsilon=config.epsilon,
                delta=config.delta,
                states=config.states,
                trajectories=config.trajectories,
                return_range=config.return_range,
                algorithm=config.algorithm,
            ),
            params,
        )
        returns = load_file_canary(
            config, load_lsw_canary, S=config.states, return_range=config.return_range
        )
        return Plan(report=report, public={"command": "audit dp-lsw"}, facts={"returns": returns})

    def trials(self, plan: Plan, rng: np.random.Generator, progress: Progress) -> AuditTrials:
        from privrl.audit.releases import audit_dp_lsw

        config = self.config
        return audit_dp_lsw(
            epsilon=config.epsilon,
            delta=config.delta,
            states=config.states,
            trajectories=config.trajectories,
            return_range=config.return_range,
            algorithm=config.algorithm,
            **self.trial_keywords(plan, rng, progress, "returns"),
        )


# ---------------------------------------------------------------------------------------------
# SDP-PE
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditSdpPeConfig(AuditConfig):
    """Audit of SDP-PE's shuffle-model counters (one batch of users)."""

    system: ClassVar[str] = "audit-sdp-pe"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = epsilon_field()
    non_private: bool = non_private_field("PE: the raw counts")
    delta: float = delta_field()
    horizon: int = option(1, "--horizon", help="H.")
    states: int = option(2, "--states", help="S (>= 2).")
    actions: int = option(2, "--actions", help="A.")
    users: int = option(100, "--users", help="Users in the batch.")
    calibration: str = option("tight", "--calibration", help="tight | theory.")
    trials: int = trials_field()
    canary: str = canary_field(TABULAR_FILE_HELP + " Its rewards must be 0 or 1.")
    confidence: float = confidence_field()

    def validate(self) -> None:
        one_of(self, ("epsilon", "non_private"), "`epsilon=E` or `non_private`")
        self.check_common()
        self.check_delta(self.delta)
        at_least(self, {"horizon": 1, "states": 2, "actions": 1, "users": 1})
        check(
            self.calibration in ("tight", "theory"),
            "calibration",
            f"must be 'tight' or 'theory', got {self.calibration!r}",
        )


class SdpPeAudit(Audit[AuditSdpPeConfig]):
    """SDP-PE's private counters (shuffle binary sums), replace-one user."""

    name = "audit-sdp-pe"
    Config = AuditSdpPeConfig
    summary = "SDP-PE's shuffle-model counters of one batch, replace-one on users."

    def plan(self) -> Plan:
        from privrl.audit.releases import sdp_pe_claimed
        from privrl.online.common import Counts
        from privrl.online.privatizers import IdentityPrivatizer, ShufflePrivatizer

        config = self.config
        params = given_parameters(
            ("δ", config.delta),
            ("horizon H", config.horizon),
            ("states S", config.states),
            ("actions A", config.actions),
            ("batch size (users)", config.users),
        )
        if config.epsilon is None:
            report = IdentityPrivatizer().report(system="pe")
        else:
            params.resolve("ε", flag=config.epsilon, fix="pass `epsilon`")
            H, S, A = config.horizon, config.states, config.actions
            priv = ShufflePrivatizer(
                H,
                S,
                A,
                epsilon=config.epsilon,
                delta=config.delta,
                rng=NoiseSource.secure().generator("planning"),  # noise on zero counts: the
                calibration=config.calibration,  # type: ignore[arg-type]  # report needs the
                # batch's calibration
            )
            report = sdp_pe_claimed(priv, Counts.zeros(H, S, A), config.users)
        report = synthetic_report(report, params)
        episode = canary_episode(config, config.horizon, config.states, config.actions, binary=True)
        return Plan(report=report, public={"command": "audit sdp-pe"}, facts={"episode": episode})

    def trials(self, plan: Plan, rng: np.random.Generator, progress: Progress) -> AuditTrials:
        from privrl.audit.releases import audit_sdp_pe

        config = self.config
        return audit_sdp_pe(
            epsilon=config.epsilon,
            delta=config.delta,
            H=config.horizon,
            S=config.states,
            A=config.actions,
            users=config.users,
            calibration=config.calibration,
            **self.trial_keywords(plan, rng, progress, "episode"),
        )
