"""`privrl audit SYSTEM`: attack a private system's release many times and compare the
empirical ε lower bound with the ε it claims (issue 17; see docs/audit.md)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import typer

from privrl.cli.errors import CliError

audit_app = typer.Typer(
    help="Audit a private system: run its release on neighbouring datasets, attack it and "
    "bound ε from below (fails, exit 1, when the bound exceeds the claimed ε).",
    no_args_is_help=True,
)

TRIALS = typer.Option(100_000, "--trials", help="Number of trials (each draws b ~ Ber(½)).")
CANARY = typer.Option(
    "worst", "--canary", help="worst (the sensitivity-maximising pair) | random (typical)."
)
OUT = typer.Option(..., "--out", "-o", help="Run directory to write.")
MAX_TRIALS = 20_000_000  # scores and bits of every trial stay in memory (~16 bytes each)
SEED = typer.Option(0, "--seed", help="Seed of the audit's data, bits and noise.")
CONFIDENCE = typer.Option(0.95, "--confidence", help="Confidence of the ε lower bound.")


def _finish(result: Any, out: Path, config: dict[str, Any], confidence: float) -> None:
    from privrl.audit.run import summarise, write_audit

    metrics = summarise(result, confidence=confidence)
    write_audit(out, result, config, metrics)
    claimed, low = metrics["epsilon_claimed"], metrics["epsilon_lower_bound"]
    typer.echo(
        f"{result.system}: claimed ε = {claimed:.4g} at δ = {result.delta:.3g}; empirical lower "
        f"bound ε ≥ {low:.4g} ({metrics['epsilon_lower_bound_ci']['confidence']:.0%} "
        f"Clopper–Pearson, point {metrics['epsilon_lower_bound_ci']['point']:.4g}); "
        f"AUC {metrics['auc']:.4f}; {metrics['trials']} trials"
    )
    typer.echo(f"wrote {out}")
    if metrics["violated"]:
        typer.echo(
            f"error: audit failed: the empirical lower bound ε ≥ {low:.4g} exceeds the claimed "
            f"ε = {claimed:.4g}; the mechanism leaks more than its privacy report states — "
            "check its noise scale and sensitivity",
            err=True,
        )
        raise typer.Exit(1)


def _check_common(trials: int, canary: str, confidence: float, out: Path) -> None:
    from privrl.experiments.rundir import check_out_dir

    if trials < 2:
        raise CliError(f"--trials must be >= 2, got {trials}; pass e.g. --trials 100000")
    if trials > MAX_TRIALS:
        raise CliError(
            f"--trials {trials} is more than one audit holds in memory (at most {MAX_TRIALS}); "
            "run several audits with different --seed instead"
        )
    if canary not in ("worst", "random"):
        raise CliError(f"--canary must be 'worst' or 'random', got {canary!r}")
    if not 0.0 < confidence < 1.0:
        raise CliError(f"--confidence must be in (0, 1), got {confidence}; e.g. 0.95")
    check_out_dir(out)


@audit_app.command("dp-apvi")
def dp_apvi_cmd(
    *,
    epsilon: float = typer.Option(
        None,
        "--epsilon",
        help="Claimed ε: Gaussian: the largest ρ whose report states ε ≤ this at --delta; "
        "Laplace: the pure-DP ε (as `train dp-apvi --epsilon`).",
    ),
    mechanism: str = typer.Option(
        "gaussian", "--mechanism", help="gaussian (zCDP counts, eq. 2) | laplace (pure DP)."
    ),
    rho: float = typer.Option(None, "--rho", help="zCDP budget ρ (instead of --epsilon)."),
    non_private: bool = typer.Option(
        False, "--non-private", help="Audit the non-private twin (APVI's counts, no noise)."
    ),
    delta: float = typer.Option(1e-6, "--delta", help="δ at which ε is stated."),
    horizon: int = typer.Option(3, "--horizon", help="H of the audit's tabular MDP."),
    states: int = typer.Option(3, "--states", help="S (>= 2)."),
    actions: int = typer.Option(2, "--actions", help="A."),
    background: int = typer.Option(20, "--background", help="Random trajectories in D₀."),
    trials: int = TRIALS,
    canary: str = CANARY,
    out: Path = OUT,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> None:
    """DP-APVI's noisy counts (Qiao & Wang 2023, eq. 2), replace-one on trajectories."""
    from privrl.audit.attacks import audit_dp_apvi, calibrate_apvi_rho
    from privrl.offline.apvi import PrivacyConfig
    from privrl.privacy.public import PublicParameters

    given = sum(x is not None for x in (epsilon, rho)) + int(non_private)
    if given != 1:
        raise CliError("give exactly one of --epsilon E, --rho R or --non-private")
    if mechanism not in ("gaussian", "laplace"):
        raise CliError(f"--mechanism must be 'gaussian' or 'laplace', got {mechanism!r}")
    if mechanism == "laplace" and epsilon is None:
        raise CliError("--mechanism laplace takes --epsilon E (pure DP), not --rho/--non-private")
    _check_common(trials, canary, confidence, out)
    if not 0.0 < delta < 1.0:
        raise CliError(f"--delta must be in (0, 1), got {delta}")
    for flag, v, low in (
        ("--horizon", horizon, 1),
        ("--states", states, 2),
        ("--actions", actions, 1),
    ):
        if v < low:
            raise CliError(f"{flag} must be >= {low}, got {v}")
    if background < 0:
        raise CliError(f"--background must be >= 0, got {background}")
    params = PublicParameters()
    H = params.resolve("horizon H", flag=horizon, fix="pass --horizon")
    S = params.resolve("states S", flag=states, fix="pass --states")
    A = params.resolve("actions A", flag=actions, fix="pass --actions")
    privacy = None
    if not non_private:
        d = params.resolve("δ", flag=delta, fix="pass --delta")
        if mechanism == "laplace":
            if not (math.isfinite(epsilon) and epsilon > 0):
                raise CliError(f"--epsilon must be finite and > 0, got {epsilon}")
            params.resolve("pure-DP budget ε", flag=epsilon, fix="pass --epsilon")
        elif rho is None:
            if not (math.isfinite(epsilon) and epsilon > 0):
                raise CliError(f"--epsilon must be finite and > 0, got {epsilon}")
            params.resolve("target ε", flag=epsilon, fix="pass --epsilon")
            rho = params.derive(
                "zCDP budget ρ",
                calibrate_apvi_rho(epsilon, d, H, S, A),
                "largest ρ with ε ≤ target",
            )
        else:
            if not (math.isfinite(rho) and rho > 0):
                raise CliError(f"--rho must be finite and > 0, got {rho}")
            params.resolve("zCDP budget ρ", flag=rho, fix="pass --rho")
        privacy = (
            PrivacyConfig.laplace(epsilon)
            if mechanism == "laplace"
            else PrivacyConfig.gaussian(rho, report_delta=d)
        )
    result = audit_dp_apvi(
        H=H,
        S=S,
        A=A,
        privacy=privacy,
        trials=trials,
        canary=canary,  # type: ignore[arg-type]
        n_background=background,
        rng=np.random.default_rng(seed),
    )
    if non_private:
        result.delta = delta
    result.report.with_public_parameters(params)
    config = {
        "command": "audit dp-apvi",
        "mechanism": mechanism,
        "epsilon": epsilon,
        "rho": rho,
        "non_private": non_private,
        "delta": delta,
        "horizon": H,
        "states": S,
        "actions": A,
        "background": background,
        "trials": trials,
        "canary": canary,
        "seed": seed,
        "confidence": confidence,
    }
    _finish(result, out, config, confidence)


@audit_app.command("gpope")
def gpope_cmd(
    *,
    epsilon: float = typer.Option(
        None, "--epsilon", help="Target ε (σ calibrated by GPOPE's rigorous accountant)."
    ),
    sigma: float = typer.Option(
        None, "--sigma", help="Noise σ (std / h) instead of --epsilon; 0 = non-private twin."
    ),
    delta: float = typer.Option(1e-5, "--delta", help="δ of the guarantee."),
    clip: float = typer.Option(1.0, "--clip", help="Clip bound h of the gradients."),
    m: int = typer.Option(1, "--m", help="Trajectories in the dataset (1 of m per step)."),
    iterations: int = typer.Option(1, "--iterations", help="Iterations N of Algorithm 1."),
    features: int = typer.Option(2, "--features", help="Feature dimension n."),
    trials: int = TRIALS,
    canary: str = CANARY,
    out: Path = OUT,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> None:
    """GPOPE's per-step Gaussian (Xie et al. 2019, Algorithm 1), replace-one on trajectories."""
    from privrl.audit.attacks import audit_gpope
    from privrl.privacy.public import PublicParameters

    if (epsilon is None) == (sigma is None):
        raise CliError("give exactly one of --epsilon E or --sigma S (--sigma 0: non-private)")
    _check_common(trials, canary, confidence, out)
    if not 0.0 < delta < 1.0:
        raise CliError(f"--delta must be in (0, 1), got {delta}")
    if epsilon is not None and not (math.isfinite(epsilon) and epsilon > 0):
        raise CliError(f"--epsilon must be finite and > 0, got {epsilon}")
    if iterations * max(trials, 1) > 50_000_000:
        raise CliError(
            f"--iterations × --trials = {iterations * trials} is too many steps for one audit; "
            "lower --trials or --iterations"
        )
    params = PublicParameters()
    for name, flag in (
        ("δ", delta),
        ("clip h", clip),
        ("trajectories m", m),
        ("iterations N", iterations),
    ):
        params.resolve(name, flag=flag, fix="pass the flag")
    params.resolve(
        "target ε" if sigma is None else "σ", flag=epsilon if sigma is None else sigma, fix=""
    )
    result = audit_gpope(
        epsilon=epsilon,
        sigma=sigma,
        delta=delta,
        clip=clip,
        m=m,
        iterations=iterations,
        features=features,
        trials=trials,
        canary=canary,  # type: ignore[arg-type]
        rng=np.random.default_rng(seed),
    )
    if sigma is None:
        params.derive("σ", result.params["sigma"], "GPOPE's rigorous calibration for (ε, δ, m, N)")
    result.report.with_public_parameters(params)
    config = {
        "command": "audit gpope",
        "epsilon": epsilon,
        "sigma": sigma,
        "delta": delta,
        "clip": clip,
        "m": m,
        "iterations": iterations,
        "features": features,
        "trials": trials,
        "canary": canary,
        "seed": seed,
        "confidence": confidence,
    }
    _finish(result, out, config, confidence)
