"""Privacy audits of DP-VAPVI, DP-LSW, SDP-PE and DP-SGD on the run layer (issue 17;
docs/audit.md). Same shape as `privrl.systems.audit`: `plan` resolves the public parameters
and states the audited system's claimed report; `run` plays the vectorised trials
(`privrl.audit.releases`, `privrl.audit.dpsgd`) and returns metrics.json, privacy.json and
plots/roc.png. `audit-dp-sgd --mode one-run` audits ONE training run with many canaries
(Steinke, Nasr & Jagielski 2023) instead of many runs.

D₀ and the canaries are synthetic and public (drawn from the run's seed): no dataset, no
ledger, no budget. Each audit has its non-private twin (`--non-private`), the same release
code with the noise switched off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privrl.config import check, option
from privrl.privacy.noise import NoiseSource
from privrl.runs.system import Plan, Result, RunContext
from privrl.systems.audit import (
    TABULAR_FILE_HELP,
    AuditConfig,
    AuditSystem,
    _at_least,
    _canary,
    _canary_episode,
    _confidence,
    _delta,
    _epsilon,
    _noise_multiplier,
    _non_private,
    _one_of,
    _one_run_canaries,
    _one_run_guesses,
    _positive,
    _trials,
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
    "AuditDpLsw",
    "AuditDpLswConfig",
    "AuditDpSgd",
    "AuditDpSgdConfig",
    "AuditDpVapvi",
    "AuditDpVapviConfig",
    "AuditSdpPe",
    "AuditSdpPeConfig",
]


# ---------------------------------------------------------------------------------------------
# DP-VAPVI
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditDpVapviConfig(AuditConfig):
    """Audit of DP-VAPVI's Gaussian vector releases (Algorithm 2) with d features."""

    system: ClassVar[str] = "audit-dp-vapvi"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = _epsilon("Target ε: the largest ρ whose report states ε ≤ this.")
    rho: float | None = option(None, "--rho", help="zCDP budget ρ.", allow_nan=True)
    non_private: bool = _non_private("VAPVI: the same statistics, no noise")
    delta: float = _delta()
    horizon: int = option(3, "--horizon", help="H.")
    features: int = option(3, "--features", help="Feature dimension d.")
    background: int = option(20, "--background", help="Random trajectories in D₀.")
    trials: int = _trials()
    canary: str = _canary(
        "one episode with Box((d,)) observations: φ = its first observation (scaled to "
        "‖φ‖ ≤ 1), its return (clipped to [0, H]) the next value; x₀ drawn like random."
    )
    confidence: float = _confidence()

    def validate(self) -> None:
        _one_of(self, ("epsilon", "rho", "non_private"), "--epsilon E, --rho R or --non-private")
        self.check_common()
        self.check_delta(self.delta)
        _at_least(self, {"horizon": 1, "features": 1, "background": 0})
        _positive(self.rho, "rho")


class AuditDpVapvi(AuditSystem):
    """DP-VAPVI's Gaussian releases (Qiao & Wang 2023, Algorithm 2), replace-one trajectory."""

    name = "audit-dp-vapvi"
    Config = AuditDpVapviConfig
    summary = "DP-VAPVI's Gaussian vector releases (Algorithm 2), replace-one on trajectories."

    def plan(self, config: AuditDpVapviConfig, header: Any | None) -> Plan:
        from privrl.audit.canary import load_feature_canary
        from privrl.audit.releases import calibrate, vapvi_claimed
        from privrl.privacy.public import PublicParameters

        params = PublicParameters()
        H = params.resolve("horizon H", flag=config.horizon, fix="pass --horizon")
        params.resolve("features d", flag=config.features, fix="pass --features")
        d = params.resolve("δ", flag=config.delta, fix="pass --delta")
        rho = config.rho
        if config.epsilon is not None:
            params.resolve("target ε", flag=config.epsilon, fix="pass --epsilon")
            rho = params.derive(
                "zCDP budget ρ",
                calibrate(lambda r: float(vapvi_claimed(r, d).epsilon), config.epsilon),
                "largest ρ with ε ≤ target",
            )
        elif rho is not None:
            params.resolve("zCDP budget ρ", flag=rho, fix="pass --rho")
        report = synthetic_report(vapvi_claimed(rho, d), params)
        feature = load_file_canary(config, load_feature_canary, d=config.features, H=H)
        public = {"command": "audit dp-vapvi", "audit": {"H": H, "rho": rho}}
        return Plan(report=report, public=public, facts={"rho": rho, "feature": feature})

    def trials(self, config: Any, plan: Plan, rng: np.random.Generator, ctx: RunContext) -> Any:
        from privrl.audit.releases import audit_dp_vapvi

        return audit_dp_vapvi(
            rho=plan.facts["rho"],
            H=config.horizon,
            d=config.features,
            delta=config.delta,
            background=config.background,
            **self.trial_keywords(config, plan, rng, ctx, "feature"),
        )


# ---------------------------------------------------------------------------------------------
# DP-LSW
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditDpLswConfig(AuditConfig):
    """Audit of DP-LSW's released θ (Balle et al. 2016, output perturbation)."""

    system: ClassVar[str] = "audit-dp-lsw"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = _epsilon()
    non_private: bool = _non_private("LSW: the same θ, no noise")
    delta: float = _delta()
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
    trials: int = _trials()
    canary: str = _canary(
        "one episode with Discrete(S) observations visiting every state: its first-visit "
        "returns (undiscounted, clipped to --return-range); x₀ drawn like random."
    )
    confidence: float = _confidence()

    def validate(self) -> None:
        _one_of(self, ("epsilon", "non_private"), "--epsilon E or --non-private")
        self.check_common()
        self.check_delta(self.delta)
        _at_least(self, {"states": 1, "trajectories": 1})
        _positive(self.return_range, "return_range")
        check(
            self.algorithm in ("dp-lsw", "dp-lsl"),
            "algorithm",
            f"must be 'dp-lsw' or 'dp-lsl', got {self.algorithm!r}",
        )


class AuditDpLsw(AuditSystem):
    """DP-LSW's θ (Balle et al. 2016, V1), replace-one trajectory."""

    name = "audit-dp-lsw"
    Config = AuditDpLswConfig
    summary = "DP-LSW's released θ (Balle et al. 2016, smooth sensitivity), replace-one."

    def plan(self, config: AuditDpLswConfig, header: Any | None) -> Plan:
        from privrl.audit.canary import load_lsw_canary
        from privrl.audit.releases import lsw_claimed

        params = flag_parameters(
            ("δ", config.delta),
            ("states S", config.states),
            ("trajectories m", config.trajectories),
            ("return range", config.return_range),
        )
        if config.epsilon is not None:
            params.resolve("ε", flag=config.epsilon, fix="pass --epsilon")
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

    def trials(self, config: Any, plan: Plan, rng: np.random.Generator, ctx: RunContext) -> Any:
        from privrl.audit.releases import audit_dp_lsw

        return audit_dp_lsw(
            epsilon=config.epsilon,
            delta=config.delta,
            states=config.states,
            trajectories=config.trajectories,
            return_range=config.return_range,
            algorithm=config.algorithm,
            **self.trial_keywords(config, plan, rng, ctx, "returns"),
        )


# ---------------------------------------------------------------------------------------------
# SDP-PE
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditSdpPeConfig(AuditConfig):
    """Audit of SDP-PE's shuffle-model counters (one batch of users)."""

    system: ClassVar[str] = "audit-sdp-pe"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = _epsilon()
    non_private: bool = _non_private("PE: the raw counts")
    delta: float = _delta()
    horizon: int = option(1, "--horizon", help="H.")
    states: int = option(2, "--states", help="S (>= 2).")
    actions: int = option(2, "--actions", help="A.")
    users: int = option(100, "--users", help="Users in the batch.")
    calibration: str = option("tight", "--calibration", help="tight | theory.")
    trials: int = _trials()
    canary: str = _canary(TABULAR_FILE_HELP + " Its rewards must be 0 or 1.")
    confidence: float = _confidence()

    def validate(self) -> None:
        _one_of(self, ("epsilon", "non_private"), "--epsilon E or --non-private")
        self.check_common()
        self.check_delta(self.delta)
        _at_least(self, {"horizon": 1, "states": 2, "actions": 1, "users": 1})
        check(
            self.calibration in ("tight", "theory"),
            "calibration",
            f"must be 'tight' or 'theory', got {self.calibration!r}",
        )


class AuditSdpPe(AuditSystem):
    """SDP-PE's private counters (shuffle binary sums), replace-one user."""

    name = "audit-sdp-pe"
    Config = AuditSdpPeConfig
    summary = "SDP-PE's shuffle-model counters of one batch, replace-one on users."

    def plan(self, config: AuditSdpPeConfig, header: Any | None) -> Plan:
        from privrl.audit.releases import sdp_pe_claimed
        from privrl.online.common import Counts
        from privrl.online.privatizers import IdentityPrivatizer, ShufflePrivatizer

        params = flag_parameters(
            ("δ", config.delta),
            ("horizon H", config.horizon),
            ("states S", config.states),
            ("actions A", config.actions),
            ("batch size (users)", config.users),
        )
        if config.epsilon is None:
            report = IdentityPrivatizer().report(system="pe")
        else:
            params.resolve("ε", flag=config.epsilon, fix="pass --epsilon")
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
        episode = _canary_episode(
            config, config.horizon, config.states, config.actions, binary=True
        )
        return Plan(report=report, public={"command": "audit sdp-pe"}, facts={"episode": episode})

    def trials(self, config: Any, plan: Plan, rng: np.random.Generator, ctx: RunContext) -> Any:
        from privrl.audit.releases import audit_sdp_pe

        return audit_sdp_pe(
            epsilon=config.epsilon,
            delta=config.delta,
            H=config.horizon,
            S=config.states,
            A=config.actions,
            users=config.users,
            calibration=config.calibration,
            **self.trial_keywords(config, plan, rng, ctx, "episode"),
        )


# ---------------------------------------------------------------------------------------------
# DP-SGD
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditDpSgdConfig(AuditConfig):
    """Audit of DP-SGD (Algorithm 4 of Sharma et al.; Abadi et al. 2016) with a gradient
    canary, in many runs (two-run game) or in one run (Steinke et al. 2023)."""

    system: ClassVar[str] = "audit-dp-sgd"
    file_canary: ClassVar[bool] = True
    epsilon: float | None = _epsilon("Target ε: z calibrated by PLD (as `train dp-sgd`).")
    noise_multiplier: float | None = _noise_multiplier()
    non_private: bool = _non_private("the same SGD steps, no noise")
    delta: float = _delta()
    rate: float = option(1.0, "--rate", help="Poisson sampling rate q.", allow_nan=True)
    steps: int = option(1, "--steps", help="Steps N.")
    clip: float = option(1.0, "--clip", help="Clip norm C.", allow_nan=True)
    background: int = option(10, "--background", help="Units in D₀ besides the canaries.")
    mode: str = option("two-run", "--mode", help="two-run (many runs) | one-run (one run).")
    canaries: int | None = _one_run_canaries("one-run: canaries m (each in w.p. ½).")
    guesses: int | None = _one_run_guesses()
    trials: int = _trials()
    canary: str = _canary(
        "one episode (or one transition) with Box((3,)) observations, the linear model's "
        "1 + 2 inputs; the canary's input is the mean of its observations. With --mode "
        "one-run: --canaries m such episodes, unit j's first input on its own coordinate j."
    )
    confidence: float = _confidence()

    def validate(self) -> None:
        check_noise_flags(self)
        self.check_common()
        check_rate(self)
        _at_least(self, {"steps": 1, "background": 0, "canaries": 2, "guesses": 2})
        check(
            self.mode in ("two-run", "one-run"),
            "mode",
            f"must be 'two-run' or 'one-run', got {self.mode!r}",
        )
        check_guesses(self)
        check(
            self.steps * self.trials <= 50_000_000,
            "steps",
            f"--steps × --trials = {self.steps * self.trials} is too many; lower one of them",
        )


DP_SGD_ONE_RUN = (1000, 100)  # the one-run audit's smallest m and r
DP_SGD_ONE_RUN_CAP = 4000  # the units' inputs are m × m: ~130 MB at the cap


class AuditDpSgd(AuditSystem):
    """DP-SGD with a worst-case gradient canary (Nasr et al. 2021), add/remove one unit."""

    name = "audit-dp-sgd"
    Config = AuditDpSgdConfig
    summary = "DP-SGD's final parameters with a gradient canary (many runs or one run)."

    def plan(self, config: AuditDpSgdConfig, header: Any | None) -> Plan:
        from privrl.audit.canary import load_gradient_canaries, load_gradient_canary
        from privrl.audit.dpsgd import dp_sgd_claimed

        params = flag_parameters(
            ("δ", config.delta),
            ("sampling rate q", config.rate),
            ("steps N", config.steps),
            ("clip C", config.clip),
        )
        z = resolve_noise_multiplier(params, config, config.rate, config.steps)

        def claimed(canaries: int) -> Any:
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

    def trials(self, config: Any, plan: Plan, rng: np.random.Generator, ctx: RunContext) -> Any:
        from privrl.audit.dpsgd import DPSGDAuditSettings, audit_dp_sgd

        return audit_dp_sgd(
            DPSGDAuditSettings(
                noise_multiplier=plan.facts["z"],
                rate=config.rate,
                steps=config.steps,
                delta=config.delta,
                clip=config.clip,
                background=config.background,
            ),
            **self.trial_keywords(config, plan, rng, ctx, "unit"),
        )

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        if config.mode == "two-run":
            return super().run(config, data, rng, ctx)
        from privrl.audit.dpsgd import DPSGDAuditSettings, audit_dp_sgd_one_run

        assert ctx.plan is not None
        audit = audit_dp_sgd_one_run(
            DPSGDAuditSettings(
                noise_multiplier=ctx.plan.facts["z"],
                rate=config.rate,
                steps=config.steps,
                delta=config.delta,
                clip=config.clip,
                background=config.background,
            ),
            canaries=ctx.plan.facts["size"].canaries,
            guesses=ctx.plan.facts["size"].guesses,
            confidence=config.confidence,
            canary="worst" if ctx.plan.facts["unit"] is not None else config.canary,
            units=ctx.plan.facts["unit"],
            rng=rng,
        )
        return one_run_result(audit, ctx.plan.report, config.confidence)
