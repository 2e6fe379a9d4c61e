"""What every audit shares: its config's common settings, the object that plans and plays it,
and the result it returns.

An audit runs a private system's own release many times on two neighbouring datasets (or, in
one run, with many canaries), attacks each output and turns the attack's scores into an
empirical ε lower bound (`privrl.audit.bounds`) to compare with the ε the system claims:

    from privrl.audit import DpApviAudit, AuditDpApviConfig

    result = DpApviAudit(AuditDpApviConfig(epsilon=2.0, trials=20_000)).run(seed=0)
    result.verdict       # "pass", "violated", "no claim" (non-private) or "cannot test this claim"
    result.metrics       # the claimed ε, the lower bound and its interval, the attack's AUC
    result.report        # the audited system's claimed PrivacyReport, with its public parameters

`Audit.plan` resolves the public parameters (sizes, δ, the target ε or the noise), calibrates
the noise from them and states the claimed report, before any trial; `Audit.play` runs the
trials from a generator and summarises them. An audit reads no private data: D₀ and the
canaries are synthetic (drawn from the seed) or the auditor's own canary file, so no ledger is
involved. Its trials' noise repeats from the seed (`NoiseSource.insecure`): the audit tests
the claim of a mechanism, it does not protect anything. `privrl audit NAME` is generated from
the same configs and gives the same trials for the same `--seed`.

Messages name settings by their config field (`` `field` ``, `` `field=VALUE` ``); the
command line writes them as its flags.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from privrl.algorithm import Plan
from privrl.config import Config, ConfigError, check, option
from privrl.privacy.noise import NoiseSource
from privrl.privacy.public import PublicParameters
from privrl.privacy.report import PrivacyReport
from privrl.progress import Progress, no_progress

if TYPE_CHECKING:
    from privrl.audit.attacks import AuditTrials
    from privrl.audit.canary import TabularCanary
    from privrl.audit.dpsgd import OneRunAudit

__all__ = [
    "SYNTHETIC_NOTE",
    "Audit",
    "AuditConfig",
    "AuditResult",
    "OneRunSize",
    "one_run_outcome",
]

C = TypeVar("C", bound=Config)
T = TypeVar("T")

MAX_TRIALS = 20_000_000  # scores and bits of every trial stay in memory (~16 bytes each)
SYNTHETIC_NOTE = (
    "audit: D₀ and the canary are synthetic (drawn from the run's seed); no private data is "
    "read and no budget is spent. ε here is the audited system's claim."
)
TABULAR_FILE_HELP = (
    "one episode in privrl's format of the audited MDP (Discrete(S) observations, "
    "Discrete(A) actions, H steps), the canary x₁."
)


# ---------------------------------------------------------------------------------------------
# the settings every audit declares
# ---------------------------------------------------------------------------------------------


def trials_field() -> Any:
    return option(100_000, "--trials", help="Number of trials (each draws b ~ Ber(½)).")


def canary_field(file_help: str) -> Any:
    """The `canary` setting; `file_help` says what a FILE.h5 canary is for this audit (or why
    the audit refuses one)."""
    return option(
        "worst",
        "--canary",
        help="worst (the sensitivity-maximising canary) | random (drawn from the background's "
        f"public generator) | FILE.h5: {file_help} A file whose episodes have a privacy "
        "ledger is refused (an audit publishes statistics of its canary unprotected).",
    )


def confidence_field() -> Any:
    return option(0.95, "--confidence", help="Confidence of the ε lower bound.", allow_nan=True)


def epsilon_field(help: str = "Claimed ε (the system's budget at δ).") -> Any:
    return option(None, "--epsilon", help=help, allow_nan=True)


def non_private_field(what: str) -> Any:
    return option(False, "--non-private/", help=f"Audit the non-private twin ({what}).")


def delta_field(help: str = "δ at which ε is stated.") -> Any:
    return option(1e-5, "--delta", help=help, allow_nan=True)


def noise_multiplier_field() -> Any:
    return option(
        None,
        "--noise-multiplier",
        help="Noise multiplier z (instead of --epsilon).",
        allow_nan=True,
    )


def canaries_field(help: str) -> Any:
    return option(
        None,
        "--canaries",
        help=f"{help} Default: chosen from the claimed ε so that the audit's ceiling (the "
        "bound if every guess were right) is at least twice the claim, within a cap.",
    )


def guesses_field() -> Any:
    return option(
        None,
        "--guesses",
        help="Guesses r (half top, half bottom). Default: m/10, raised at the canary cap "
        "until the ceiling reaches twice the claim.",
    )


# ---------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------


class _Canaried(Protocol):
    """A config with a canary and a confidence (every audit's)."""

    @property
    def canary(self) -> str: ...

    @property
    def confidence(self) -> float: ...


class _HasCanary(_Canaried, Protocol):
    system: ClassVar[str]
    no_file_canary: ClassVar[str]


class _OneRun(_Canaried, Protocol):
    @property
    def canaries(self) -> int | None: ...

    @property
    def guesses(self) -> int | None: ...

    @property
    def delta(self) -> float: ...


class _Sampled(Protocol):
    @property
    def rate(self) -> float: ...


class _NoisyTraining(Protocol):
    @property
    def epsilon(self) -> float | None: ...

    @property
    def noise_multiplier(self) -> float | None: ...

    @property
    def non_private(self) -> bool: ...

    @property
    def delta(self) -> float: ...

    @property
    def clip(self) -> float: ...


def one_of(config: object, names: tuple[str, ...], settings: str) -> None:
    """Exactly one of the settings `names` is given (a switch: set)."""
    given = sum(
        bool(getattr(config, n)) if n == "non_private" else getattr(config, n) is not None
        for n in names
    )
    if given != 1:
        raise ValueError(f"give exactly one of {settings}")


def at_least(config: object, lows: dict[str, int]) -> None:
    for key, low in lows.items():
        value = getattr(config, key)
        check(value is None or value >= low, key, f"must be >= {low}, got {value}")


def positive(value: float | None, key: str) -> None:
    if value is not None:
        check(math.isfinite(value) and value > 0, key, f"must be finite and > 0, got {value}")


def check_guesses(config: _OneRun) -> None:
    """One-run audits: r guesses, even (half "in", half "out") and at most m canaries (either
    may be left to `one_run_canaries`)."""
    if config.guesses is None:
        return
    top = config.canaries if config.canaries is not None else config.guesses
    check(
        config.guesses <= top and config.guesses % 2 == 0,
        "guesses",
        f"must be even and <= `canaries` ({top}), got {config.guesses}",
    )


def check_confidence(config: _Canaried) -> None:
    check(
        0.0 < config.confidence < 1.0,
        "confidence",
        f"must be in (0, 1), got {config.confidence}; e.g. 0.95",
    )


def check_canary(config: _HasCanary, file_ok: bool) -> None:
    """`canary` is 'worst', 'random' or (where the audit can express one) a FILE.h5; a file
    given to an audit that cannot use it is refused with the reason (`no_file_canary`),
    never ignored."""
    from privrl.audit.canary import is_canary_file

    command = config.system.removeprefix("audit-")
    if is_canary_file(config.canary) and not file_ok:
        raise ConfigError(
            "canary",
            f"{config.canary}: audit {command} takes no canary file: {config.no_file_canary}; "
            "use `canary=worst` or `canary=random`",
        )
    check(
        config.canary in ("worst", "random") or is_canary_file(config.canary),
        "canary",
        f"must be 'worst' or 'random'{' or a canary FILE.h5' if file_ok else ''}, "
        f"got {config.canary!r}",
    )


def check_rate(config: _Sampled) -> None:
    """The Poisson sampling rate q is in (0, 1]."""
    check(
        math.isfinite(config.rate) and 0.0 < config.rate <= 1.0,
        "rate",
        f"must be in (0, 1], got {config.rate}",
    )


def check_noise_settings(config: _NoisyTraining) -> None:
    """Audits of noisy training (DP-SGD, DP-FedAvg): exactly one of `epsilon`,
    `noise_multiplier` and `non_private`; δ in (0, 1); ε, z and the clip C finite and > 0."""
    one_of(
        config,
        ("epsilon", "noise_multiplier", "non_private"),
        "`epsilon=E`, `noise_multiplier=Z` or `non_private`",
    )
    check(0.0 < config.delta < 1.0, "delta", f"must be in (0, 1), got {config.delta}")
    positive(config.noise_multiplier, "noise_multiplier")
    positive(config.clip, "clip")


@dataclass(frozen=True)
class AuditConfig(Config):
    """The checks every audit shares: trials, canary, confidence (each config declares them
    after its own settings, the order of the command's help). `file_canary`: the audit takes
    ``canary=FILE.h5``."""

    file_canary: ClassVar[bool] = False
    no_file_canary: ClassVar[str] = "its canary cannot be given as a dataset file"

    def check_common(self: Any) -> None:
        check(
            self.trials >= 2,
            "trials",
            f"must be >= 2, got {self.trials} (e.g. 100000)",
        )
        check(
            self.trials <= MAX_TRIALS,
            "trials",
            f"{self.trials} is more than one audit holds in memory (at most {MAX_TRIALS}); "
            "run several audits with different seeds instead",
        )
        check_canary(self, self.file_canary)
        check_confidence(self)

    def check_delta(self, delta: float) -> None:
        check(0.0 < delta < 1.0, "delta", f"must be in (0, 1), got {delta}")


# ---------------------------------------------------------------------------------------------
# planning helpers
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OneRunSize:
    """A one-run audit's canaries m and guesses r, each from its setting or chosen from the
    claim (`privrl.audit.bounds.one_run_size`), and the ceiling they give."""

    canaries: int
    guesses: int
    ceiling: float


def one_run_canaries(
    config: _OneRun, claim: float, params: PublicParameters, *, base: tuple[int, int], cap: int
) -> OneRunSize:
    """m and r of a one-run audit: the settings where given; else, from the claimed ε, the
    smallest m = base·2^k (r = m/10), then at the cap `cap` the smallest r = r₀·2^k, whose
    ceiling reaches twice the claim (`one_run_size`). A canary FILE fixes m to its setting (or
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
        m = params.resolve("canaries m", flag=m, default=max(m0, r or 0), fix="pass `canaries`")
        r = params.resolve(
            "guesses r",
            flag=r,
            default=min(max(2, 2 * round(m / 20)), m - m % 2),
            fix="pass `guesses`",
        )
    ceiling = one_run_ceiling(m, r, config.delta, config.confidence)
    params.derive(
        "ceiling (bound if every guess is right)", ceiling, "Steinke et al. 2023, Thm 3.3"
    )
    return OneRunSize(int(m), int(r), float(ceiling))


def load_file_canary(config: _Canaried, load: Callable[..., T], **shape: Any) -> T | None:
    """The ``canary=FILE.h5`` input, `load(FILE, **shape)` (public: the auditor's own input,
    checked in `plan`, before any trial); None for 'worst' / 'random'."""
    from privrl.audit.canary import is_canary_file

    if not is_canary_file(config.canary):
        return None
    return load(config.canary, **shape)


def canary_episode(
    config: _Canaried, H: int, S: int, A: int, *, binary: bool = False
) -> TabularCanary | None:
    """The ``canary=FILE`` episode, checked against H, S, A; None for 'worst' / 'random'."""
    from privrl.audit.canary import load_tabular_canary

    return load_file_canary(config, load_tabular_canary, H=H, S=S, A=A, binary_rewards=binary)


def given_parameters(*named: tuple[str, Any]) -> PublicParameters:
    """The audit's `PublicParameters`: each (name, value) resolved from its setting."""
    params = PublicParameters()
    for name, value in named:
        params.resolve(name, flag=value, fix="pass the setting")
    return params


def synthetic_report(report: PrivacyReport, params: PublicParameters) -> PrivacyReport:
    """The claimed report with the audit's public parameters and `SYNTHETIC_NOTE`."""
    report = report.with_public_parameters(params)
    report.notes.append(SYNTHETIC_NOTE)
    return report


def resolve_noise_multiplier(
    params: PublicParameters, config: _NoisyTraining, rate: float, steps: int
) -> float | None:
    """z from `noise_multiplier`, or the smallest z meeting the target (ε, δ) under PLD for
    `steps` Poisson-sampled steps at rate `rate`, recorded in `params`; None when
    non-private."""
    from privrl.audit.dpsgd import dp_sgd_noise_multiplier

    z = config.noise_multiplier
    if config.epsilon is not None:
        params.resolve("target ε", flag=config.epsilon, fix="pass `epsilon`")
        z = params.derive(
            "noise multiplier z",
            dp_sgd_noise_multiplier(config.epsilon, config.delta, rate, steps),
            "smallest z meeting (ε, δ) under PLD",
        )
    elif z is not None:
        params.resolve("noise multiplier z", flag=z, fix="pass `noise_multiplier`")
    return z


# ---------------------------------------------------------------------------------------------
# the object and its result
# ---------------------------------------------------------------------------------------------


@dataclass
class AuditResult:
    """What an audit returns.

    Attributes:
        metrics: metrics.json of the audit: the claimed ε, the lower bound and its interval,
            the attack's AUC (None for a one-run audit with no guess), `violated`, ...
        report: the audited system's claimed report, with the audit's public parameters.
        trials: the scored trials (for a one-run audit: the canaries as trials), for the ROC.
        summary: one line saying the claim, the bound and the verdict.
    """

    metrics: dict[str, Any]
    report: PrivacyReport
    trials: AuditTrials
    summary: str

    @property
    def violated(self) -> bool:
        """Whether the lower bound exceeds the claimed ε (the audit fails)."""
        return bool(self.metrics["violated"])

    @property
    def verdict(self) -> str:
        """``violated``, ``pass``, ``no claim`` (a non-private twin: ε = ∞) or, for a
        one-run audit whose ceiling is at or below the claim, ``cannot test this claim``."""
        if "verdict" in self.metrics:
            return str(self.metrics["verdict"])
        if self.violated:
            return "violated"
        return "pass" if math.isfinite(self.metrics["epsilon_claimed"]) else "no claim"

    def roc_plot(self, path: Path) -> None:
        """The attack's ROC curve under the (ε, δ)-DP limit (`privrl.audit.run.roc_plot`)."""
        from privrl.audit.run import roc_plot

        roc_plot(path, self.trials, self.metrics)


def one_run_outcome(
    audit: OneRunAudit, report: PrivacyReport, confidence: float, statistic: str | None = None
) -> AuditResult:
    """The result of a one-run audit (Steinke, Nasr & Jagielski 2023): its metrics (with the
    attack's `statistic` where the audit offers a choice), the claimed report, the canaries
    as trials."""
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
    return AuditResult(metrics, report, audit.as_trials(), line)


class Audit(Generic[C]):
    """An audit of one private system: a validated config, `plan` (public parameters and the
    claimed report) and `play` (the trials from a generator, summarised). `run` does both.

    Subclasses set `name`, `Config` and `summary` and implement `plan` and `trials` (an audit
    of many trials) or `play` (one run)."""

    name: ClassVar[str] = ""
    Config: ClassVar[type[Config]]
    summary: ClassVar[str] = ""

    def __init__(self, config: C) -> None:
        if not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} takes a {self.Config.__name__}")
        self.config = config

    def plan(self) -> Plan:
        """The public parameters, the claimed report and what the trials need (the canary
        file, loaded and checked), before any trial."""
        raise NotImplementedError

    def trials(self, plan: Plan, rng: np.random.Generator, progress: Progress) -> AuditTrials:
        """The scored trials (`privrl.audit.attacks.AuditTrials`)."""
        raise NotImplementedError

    def play(
        self, plan: Plan, rng: np.random.Generator, progress: Progress = no_progress
    ) -> AuditResult:
        """The trials of `plan` from `rng`, bounded by Clopper–Pearson and summarised."""
        from privrl.audit.run import summarise

        trials = self.trials(plan, rng, progress)
        metrics = summarise(trials, confidence=self.config.confidence)  # type: ignore[attr-defined]
        ci = metrics["epsilon_lower_bound_ci"]
        line = (
            f"{trials.system}: claimed ε = {metrics['epsilon_claimed']:.4g} at δ = "
            f"{trials.delta:.3g}; empirical lower bound ε ≥ {metrics['epsilon_lower_bound']:.4g} "
            f"({ci['confidence']:.0%} Clopper–Pearson, point {ci['point']:.4g}); "
            f"AUC {metrics['auc']:.4f}; {metrics['trials']} trials"
        )
        return AuditResult(metrics, plan.report, trials, line)

    def run(self, *, seed: int = 0, progress: Progress = no_progress) -> AuditResult:
        """Plan, then play the trials from ``numpy.random.default_rng(seed)`` (as the command
        line does with ``--seed``)."""
        return self.play(self.plan(), np.random.default_rng(seed), progress)

    def trial_keywords(
        self, plan: Plan, rng: np.random.Generator, progress: Progress, loaded: str
    ) -> dict[str, Any]:
        """The keywords every audit function takes: trials, canary (``file`` when the plan
        loaded a canary file, passed as `plan.facts[loaded]` under the keyword `loaded`), rng
        and the progress hook. An audit's trials run the mechanism on canaries (synthetic, or a
        file that carries no ledger), so its noise repeats from the seed: the rng is an
        insecure reproducible `NoiseGenerator`, and the audit's report is the claim it tests."""
        config: Any = self.config
        canary = plan.facts[loaded]
        name = self.name
        return {
            "trials": config.trials,
            "canary": "file" if canary is not None else config.canary,
            loaded: canary,
            "rng": NoiseSource.insecure(rng).generator("audit"),
            "progress": lambda done, total: progress(name, done, total),
        }
