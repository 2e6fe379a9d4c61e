"""Privacy audits on the run layer: `audit-dp-apvi` and `audit-gpope` (issue 17; docs/audit.md).

An audit runs a private system's own release many times on two neighbouring datasets D and D'
(replace-one on trajectories), attacks each output and turns the attack's scores into an
empirical ε lower bound (Clopper–Pearson, `privrl.audit.bounds`), to compare with the ε the
system claims. The attacks live in `privrl.audit.attacks`; this module only adapts them:

- `plan` resolves the public parameters (the MDP's sizes or GPOPE's clip, m, N; δ; the target ε
  or the noise), calibrates the noise from them (ρ for DP-APVI, σ for GPOPE) and states the
  audited system's claimed report, which is the planned report;
- `run` plays the trials and returns metrics.json (`privrl.audit.run.summarise`: the claimed ε,
  the lower bound and its interval, the attack's AUC), privacy.json (the claimed report with
  its public parameters) and plots/roc.png.

The audit reads no private data: D₀ and the canary are synthetic, drawn from the run's seed, so
these systems take no `--data` and no ledger is involved. A bound above the claimed ε fails the
audit (`failure`: exit code 1 on the command line, after the run directory is written).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privrl.config import RunConfig, check, option
from privrl.privacy.noise import NoiseSource
from privrl.runs.system import Plan, Result, RunContext, System
from privrl.systems.wording import in_command_words

MAX_TRIALS = 20_000_000  # scores and bits of every trial stay in memory (~16 bytes each)
MAX_GPOPE_STEPS = 50_000_000  # iterations × trials of one GPOPE audit (time, not memory)
SYNTHETIC_NOTE = (
    "audit: D₀ and the canary are synthetic (drawn from the run's seed); no private data is "
    "read and no budget is spent. ε here is the audited system's claim."
)


# ---------------------------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------------------------


def _trials() -> Any:
    return option(100_000, "--trials", help="Number of trials (each draws b ~ Ber(½)).")


def _canary(file_help: str) -> Any:
    """The --canary flag; `file_help` says what a FILE.h5 canary is for this audit (or why the
    audit refuses one)."""
    return option(
        "worst",
        "--canary",
        help="worst (the sensitivity-maximising canary) | random (drawn from the background's "
        f"public generator) | FILE.h5: {file_help} A file whose episodes have a privacy "
        "ledger is refused (an audit publishes statistics of its canary unprotected).",
    )


TABULAR_FILE_HELP = (
    "one episode in privrl's format of the audited MDP (Discrete(S) observations, "
    "Discrete(A) actions, H steps), the canary x₁."
)


def _confidence() -> Any:
    return option(0.95, "--confidence", help="Confidence of the ε lower bound.", allow_nan=True)


def _epsilon(help: str = "Claimed ε (the system's budget at --delta).") -> Any:
    return option(None, "--epsilon", help=help, allow_nan=True)


def _non_private(what: str) -> Any:
    return option(False, "--non-private/", help=f"Audit the non-private twin ({what}).")


def _delta(help: str = "δ at which ε is stated.") -> Any:
    return option(1e-5, "--delta", help=help, allow_nan=True)


def _noise_multiplier() -> Any:
    return option(
        None,
        "--noise-multiplier",
        help="Noise multiplier z (instead of --epsilon).",
        allow_nan=True,
    )


def _one_of(config: Any, names: tuple[str, ...], flags: str) -> None:
    given = sum(
        bool(getattr(config, n)) if n == "non_private" else getattr(config, n) is not None
        for n in names
    )
    if given != 1:
        raise ValueError(f"give exactly one of {flags}")


def _at_least(config: Any, lows: dict[str, int]) -> None:
    for key, low in lows.items():
        value = getattr(config, key)
        check(value is None or value >= low, key, f"must be >= {low}, got {value}")


def check_guesses(config: Any) -> None:
    """One-run audits: r guesses, even (half "in", half "out") and at most m canaries (either
    may be left to `one_run_canaries`)."""
    if config.guesses is None:
        return
    top = config.canaries if config.canaries is not None else config.guesses
    check(
        config.guesses <= top and config.guesses % 2 == 0,
        "guesses",
        f"must be even and <= --canaries ({top}), got {config.guesses}",
    )


def _one_run_canaries(help: str) -> Any:
    return option(
        None,
        "--canaries",
        help=f"{help} Default: chosen from the claimed ε so that the audit's ceiling (the "
        "bound if every guess were right) is at least twice the claim, within a cap.",
    )


def _one_run_guesses() -> Any:
    return option(
        None,
        "--guesses",
        help="Guesses r (half top, half bottom). Default: m/10, raised at the canary cap "
        "until the ceiling reaches twice the claim.",
    )


@dataclass(frozen=True)
class OneRunSize:
    """A one-run audit's canaries m and guesses r, each from its flag or chosen from the
    claim (`privrl.audit.bounds.one_run_size`), and the ceiling they give."""

    canaries: int
    guesses: int
    ceiling: float


def one_run_canaries(
    config: Any, claim: float, params: Any, *, base: tuple[int, int], cap: int
) -> OneRunSize:
    """m and r of a one-run audit: the flags where given; else, from the claimed ε, the
    smallest m = base·2^k (r = m/10), then at the cap `cap` the smallest r = r₀·2^k, whose
    ceiling reaches twice the claim (`one_run_size`). A canary FILE fixes m to its flag (or
    the base). Both are recorded in `params` with their source."""
    from privrl.audit.bounds import CEILING_FACTOR, one_run_ceiling, one_run_size
    from privrl.audit.canary import is_canary_file

    m0, r0 = base
    m, r = config.canaries, config.guesses
    if m is None and not is_canary_file(config.canary) and r is None:
        m, r = one_run_size(
            claim, config.delta, config.confidence, canaries=m0, guesses=r0, cap=cap
        )
        rule = (
            f"the smallest of {m0}·2^k (at most {cap}), then r doubled, whose ceiling is "
            f">= {CEILING_FACTOR:g} × the claimed ε"
        )
        params.derive("canaries m", m, rule)
        params.derive("guesses r", r, rule)
    else:
        m = params.resolve("canaries m", flag=m, default=max(m0, r or 0), fix="pass --canaries")
        r = params.resolve(
            "guesses r",
            flag=r,
            default=min(max(2, 2 * round(m / 20)), m - m % 2),
            fix="pass --guesses",
        )
    ceiling = one_run_ceiling(m, r, config.delta, config.confidence)
    params.derive(
        "ceiling (bound if every guess is right)", ceiling, "Steinke et al. 2023, Thm 3.3"
    )
    return OneRunSize(int(m), int(r), float(ceiling))


def check_confidence(config: Any) -> None:
    check(
        0.0 < config.confidence < 1.0,
        "confidence",
        f"must be in (0, 1), got {config.confidence}; e.g. 0.95",
    )


@dataclass(frozen=True)
class AuditConfig(RunConfig):
    """The checks every audit shares: trials, canary, confidence (each config declares them
    after its own settings, the order of the command's help). `file_canary`: the audit takes
    ``--canary FILE.h5`` (a tabular canary episode)."""

    file_canary: ClassVar[bool] = False
    no_file_canary: ClassVar[str] = "its canary cannot be given as a dataset file"

    def check_common(self: Any) -> None:
        check(
            self.trials >= 2,
            "trials",
            f"must be >= 2, got {self.trials}; pass e.g. --trials 100000",
        )
        check(
            self.trials <= MAX_TRIALS,
            "trials",
            f"{self.trials} is more than one audit holds in memory (at most {MAX_TRIALS}); "
            "run several audits with different --seed instead",
        )

        check_canary(self, self.file_canary)
        check_confidence(self)

    def check_delta(self, delta: float) -> None:
        check(0.0 < delta < 1.0, "delta", f"must be in (0, 1), got {delta}")


def check_canary(config: Any, file_ok: bool) -> None:
    """--canary is 'worst', 'random' or (where the audit can express one) a FILE.h5; a file
    given to an audit that cannot use it is refused with the reason (`no_file_canary`),
    never ignored."""
    from privrl.audit.canary import is_canary_file

    command = config.system.removeprefix("audit-")
    if is_canary_file(config.canary) and not file_ok:
        raise ValueError(
            f"--canary {config.canary}: audit {command} takes no canary file: "
            f"{config.no_file_canary}; use --canary worst or --canary random"
        )
    check(
        config.canary in ("worst", "random") or is_canary_file(config.canary),
        "canary",
        f"must be 'worst' or 'random'{' or a canary FILE.h5' if file_ok else ''}, "
        f"got {config.canary!r}",
    )


def load_file_canary(config: Any, load: Callable[..., Any], **shape: Any) -> Any:
    """The `--canary FILE.h5` input, `load(FILE, **shape)` (public: the auditor's own input,
    checked in `plan`, before any trial); None for 'worst' / 'random'. The loader's refusals
    name the audit's settings as its flags."""
    from privrl.audit.canary import is_canary_file

    if not is_canary_file(config.canary):
        return None
    with in_command_words(type(config)):
        return load(config.canary, **shape)


def _canary_episode(config: Any, H: int, S: int, A: int, *, binary: bool = False) -> Any:
    """The `--canary FILE` episode, checked against H, S, A; None for 'worst' / 'random'."""
    from privrl.audit.canary import load_tabular_canary

    return load_file_canary(config, load_tabular_canary, H=H, S=S, A=A, binary_rewards=binary)


def flag_parameters(*named: tuple[str, Any]) -> Any:
    """The audit's `PublicParameters`: each (name, value) resolved from its flag."""
    from privrl.privacy.public import PublicParameters

    params = PublicParameters()
    for name, flag in named:
        params.resolve(name, flag=flag, fix="pass the flag")
    return params


def synthetic_report(report: Any, params: Any) -> Any:
    """The claimed report with the audit's public parameters and `SYNTHETIC_NOTE`."""
    report = report.with_public_parameters(params)
    report.notes.append(SYNTHETIC_NOTE)
    return report


def _positive(value: float | None, key: str) -> None:
    if value is not None:
        check(math.isfinite(value) and value > 0, key, f"must be finite and > 0, got {value}")


def check_rate(config: Any) -> None:
    """The Poisson sampling rate q is in (0, 1]."""
    check(
        math.isfinite(config.rate) and 0.0 < config.rate <= 1.0,
        "rate",
        f"must be in (0, 1], got {config.rate}",
    )


def check_noise_flags(config: Any) -> None:
    """Audits of noisy training (DP-SGD, DP-FedAvg): exactly one of --epsilon,
    --noise-multiplier and --non-private; δ in (0, 1); ε, z and the clip C finite and > 0."""
    _one_of(
        config,
        ("epsilon", "noise_multiplier", "non_private"),
        "--epsilon E, --noise-multiplier Z or --non-private",
    )
    check(0.0 < config.delta < 1.0, "delta", f"must be in (0, 1), got {config.delta}")
    _positive(config.noise_multiplier, "noise_multiplier")
    _positive(config.clip, "clip")


def resolve_noise_multiplier(params: Any, config: Any, rate: float, steps: int) -> float | None:
    """z from --noise-multiplier, or the smallest z meeting the target (ε, δ) under PLD for
    `steps` Poisson-sampled steps at rate `rate`, recorded in `params`; None when
    non-private."""
    from privrl.audit.dpsgd import dp_sgd_noise_multiplier

    z = config.noise_multiplier
    if config.epsilon is not None:
        params.resolve("target ε", flag=config.epsilon, fix="pass --epsilon")
        z = params.derive(
            "noise multiplier z",
            dp_sgd_noise_multiplier(config.epsilon, config.delta, rate, steps),
            "smallest z meeting (ε, δ) under PLD",
        )
    elif z is not None:
        params.resolve("noise multiplier z", flag=z, fix="pass --noise-multiplier")
    return z


def one_run_result(
    audit: Any, report: Any, confidence: float, statistic: str | None = None
) -> Result:
    """The `Result` of a one-run audit (Steinke, Nasr & Jagielski 2023): its metrics (with
    the attack's `statistic` where the audit offers a choice), the claimed report, the ROC."""
    from privrl.audit.run import roc_plot

    metrics = audit.metrics()
    kind = f"one run, {metrics['canaries']} canaries"
    if statistic is not None:
        metrics["statistic"] = statistic
        kind += f", {statistic} statistic"
    line = (
        f"{metrics['system']} ({kind}): claimed ε = {metrics['epsilon_claimed']:.4g} at "
        f"δ = {audit.delta:.3g}; {metrics['correct']} of {metrics['guesses']} guesses correct; "
        f"one-run lower bound ε ≥ {metrics['epsilon_lower_bound']:.4g} ({confidence:.0%}); "
        f"ceiling {metrics['epsilon_ceiling']:.4g} (all guesses right); "
        f"verdict: {metrics['verdict']}"
    )
    trials = audit.as_trials()
    plots = {} if metrics["auc"] is None else {"roc": lambda p: roc_plot(p, trials, metrics)}
    return Result(metrics=metrics, privacy=report, plots=plots, summary=[line])


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
    trials: int = _trials()
    canary: str = _canary(TABULAR_FILE_HELP)
    confidence: float = _confidence()

    def validate(self) -> None:
        given = (self.epsilon is not None) + (self.rho is not None) + int(self.non_private)
        if given != 1:  # several settings together: a plain ValueError, worded with the flags
            raise ValueError("give exactly one of --epsilon E, --rho R or --non-private")
        check(
            self.mechanism in ("gaussian", "laplace"),
            "mechanism",
            f"must be 'gaussian' or 'laplace', got {self.mechanism!r}",
        )
        if self.mechanism == "laplace" and self.epsilon is None:
            raise ValueError(
                "--mechanism laplace takes --epsilon E (pure DP), not --rho/--non-private"
            )
        self.check_common()
        self.check_delta(self.delta)
        for key, low in (("horizon", 1), ("states", 2), ("actions", 1), ("background", 0)):
            value = getattr(self, key)
            check(value >= low, key, f"must be >= {low}, got {value}")
        _positive(self.rho, "rho")


GPOPE_FILE_HELP = (
    "one episode in privrl's format and --feature-map SPEC (a privrl feature map of its "
    "observation space with --features n dimensions): its per-trajectory (Â, b̂, Ĉ) is the "
    "canary x₁ (x₀ adds no gradient)."
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
    trials: int = _trials()
    canary: str = _canary(GPOPE_FILE_HELP)
    confidence: float = _confidence()

    def validate(self) -> None:
        if (self.epsilon is None) == (self.sigma is None):
            raise ValueError(
                "give exactly one of --epsilon E or --sigma S (--sigma 0: non-private)"
            )
        self.check_common()
        self.check_delta(self.delta)
        if self.sigma is not None:
            check(
                math.isfinite(self.sigma) and self.sigma >= 0,
                "sigma",
                f"must be finite and >= 0, got {self.sigma}",
            )
        _positive(self.clip, "clip")
        for key in ("m", "iterations", "features"):
            value = getattr(self, key)
            check(value >= 1, key, f"must be >= 1, got {value}")
        from privrl.audit.canary import is_canary_file

        file = is_canary_file(self.canary)
        check(
            self.feature_map is None or file,
            "feature_map",
            "maps a canary FILE.h5's episode; it applies only with --canary FILE.h5",
        )
        check(
            self.feature_map is not None or not file,
            "feature_map",
            "is required with --canary FILE.h5 (a privrl feature map of the file's "
            "observation space, e.g. onehot)",
        )
        if self.iterations * self.trials > MAX_GPOPE_STEPS:
            raise ValueError(
                f"--iterations × --trials = {self.iterations * self.trials} is too many steps "
                "for one audit; lower --trials or --iterations"
            )


# ---------------------------------------------------------------------------------------------
# systems
# ---------------------------------------------------------------------------------------------


class AuditSystem(System):
    """Shared result and verdict of the audits; subclasses plan and play their trials."""

    data = "none"

    def trials(self, config: Any, plan: Plan, rng: np.random.Generator, ctx: RunContext) -> Any:
        """The scored trials (`privrl.audit.attacks.AuditTrials`)."""
        raise NotImplementedError

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        from privrl.audit.run import roc_plot, summarise

        assert ctx.plan is not None
        trials = self.trials(config, ctx.plan, rng, ctx)
        metrics = summarise(trials, confidence=config.confidence)
        ci = metrics["epsilon_lower_bound_ci"]
        line = (
            f"{trials.system}: claimed ε = {metrics['epsilon_claimed']:.4g} at δ = "
            f"{trials.delta:.3g}; empirical lower bound ε ≥ {metrics['epsilon_lower_bound']:.4g} "
            f"({ci['confidence']:.0%} Clopper–Pearson, point {ci['point']:.4g}); "
            f"AUC {metrics['auc']:.4f}; {metrics['trials']} trials"
        )
        return Result(
            metrics=metrics,
            privacy=ctx.plan.report,  # the claimed report, with its public parameters
            plots={"roc": lambda path: roc_plot(path, trials, metrics)},
            summary=[line],
        )

    def progress(self, ctx: RunContext) -> Any:
        return lambda done, total: ctx.progress(self.name, done, total)

    def trial_keywords(
        self, config: Any, plan: Plan, rng: np.random.Generator, ctx: RunContext, loaded: str
    ) -> dict[str, Any]:
        """The keywords every audit function takes: trials, canary (``file`` when the plan
        loaded a canary file, passed as `plan.facts[loaded]` under the keyword `loaded`), rng
        and the progress hook. An audit's trials run the mechanism on canaries (synthetic, or a
        file that carries no ledger), so its noise repeats from the seed: the rng is an
        insecure reproducible `NoiseGenerator`, and the audit's report is the claim it tests."""
        canary = plan.facts[loaded]
        return {
            "trials": config.trials,
            "canary": "file" if canary is not None else config.canary,
            loaded: canary,
            "rng": NoiseSource.insecure(rng).generator("audit"),
            "progress": self.progress(ctx),
        }

    def failure(self, config: Any, result: Result) -> str | None:
        metrics = result.metrics
        if not metrics["violated"]:
            return None
        return (
            f"audit failed: the empirical lower bound ε ≥ {metrics['epsilon_lower_bound']:.4g} "
            f"exceeds the claimed ε = {metrics['epsilon_claimed']:.4g}; the mechanism leaks "
            "more than its privacy report states — check its noise scale and sensitivity"
        )


class AuditDpApvi(AuditSystem):
    """DP-APVI's noisy counts (Qiao & Wang 2023, eq. 2), replace-one on trajectories."""

    name = "audit-dp-apvi"
    Config = AuditDpApviConfig
    summary = "DP-APVI's noisy counts (Qiao & Wang 2023, eq. 2), replace-one on trajectories."

    def plan(self, config: AuditDpApviConfig, header: Any | None) -> Plan:
        from privrl.audit.attacks import apvi_claimed, calibrate_apvi_rho
        from privrl.offline.apvi import PrivacyConfig, noise_plan
        from privrl.privacy.public import PublicParameters

        params = PublicParameters()
        H = params.resolve("horizon H", flag=config.horizon, fix="pass --horizon")
        S = params.resolve("states S", flag=config.states, fix="pass --states")
        A = params.resolve("actions A", flag=config.actions, fix="pass --actions")
        privacy, rho = None, config.rho
        if not config.non_private:
            d = params.resolve("δ", flag=config.delta, fix="pass --delta")
            if config.mechanism == "laplace":
                params.resolve("pure-DP budget ε", flag=config.epsilon, fix="pass --epsilon")
            elif rho is None:
                params.resolve("target ε", flag=config.epsilon, fix="pass --epsilon")
                rho = params.derive(
                    "zCDP budget ρ",
                    calibrate_apvi_rho(config.epsilon, d, H, S, A),  # type: ignore[arg-type]
                    "largest ρ with ε ≤ target",
                )
            else:
                params.resolve("zCDP budget ρ", flag=rho, fix="pass --rho")
            privacy = (
                PrivacyConfig.laplace(config.epsilon)
                if config.mechanism == "laplace"
                else PrivacyConfig.gaussian(rho, report_delta=d)
            )
        report = synthetic_report(apvi_claimed(H, S, A, privacy), params)
        episode = _canary_episode(config, H, S, A)
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

    def trials(self, config: Any, plan: Plan, rng: np.random.Generator, ctx: RunContext) -> Any:
        from privrl.audit.attacks import audit_dp_apvi

        result = audit_dp_apvi(
            H=config.horizon,
            S=config.states,
            A=config.actions,
            privacy=plan.facts["privacy"],
            n_background=config.background,
            **self.trial_keywords(config, plan, rng, ctx, "episode"),
        )
        if config.non_private:
            result.delta = config.delta  # the twin's bound is stated at the flag's δ
        return result


class AuditGpope(AuditSystem):
    """GPOPE's per-step Gaussian (Xie et al. 2019, Algorithm 1), replace-one on trajectories."""

    name = "audit-gpope"
    Config = AuditGpopeConfig
    summary = (
        "GPOPE's per-step Gaussian (Xie et al. 2019, Algorithm 1), replace-one on trajectories."
    )

    def plan(self, config: AuditGpopeConfig, header: Any | None) -> Plan:
        from privrl.audit.attacks import GPOPE_AUDIT_GAMMA, gpope_report
        from privrl.audit.canary import load_gpope_canary
        from privrl.ope.gpope import calibrated_sigma

        params = flag_parameters(
            ("δ", config.delta),
            ("clip h", config.clip),
            ("trajectories m", config.m),
            ("iterations N", config.iterations),
        )
        if config.sigma is None:
            params.resolve("target ε", flag=config.epsilon, fix="pass --epsilon")
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
            sigma = params.resolve("σ", flag=config.sigma, fix="pass --sigma")
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

    def trials(self, config: Any, plan: Plan, rng: np.random.Generator, ctx: RunContext) -> Any:
        from privrl.audit.attacks import GPOPEAuditSettings, audit_gpope

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
            **self.trial_keywords(config, plan, rng, ctx, "statistic"),
        )
