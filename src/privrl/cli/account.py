"""`privrl account` (ε of mechanism parameters), `privrl calibrate` (the inverse): the CLI."""

from __future__ import annotations

import json

import typer
from rich.console import Console

from privrl.privacy import calculator
from privrl.privacy.calculator import SEARCH_FLOOR, BackendChoice, Mechanism  # noqa: F401
from privrl.runs.wording import calculator_notes, in_calculator_words


def account(
    *,
    mechanism: Mechanism = typer.Option(
        Mechanism.gaussian, "--mechanism", "-m", help="Mechanism family to account."
    ),
    noise_multiplier: float = typer.Option(
        None,
        "--noise-multiplier",
        "-z",
        help="Noise std (Gaussian) or scale (Laplace) / sensitivity (1e-6 to 1e7).",
    ),
    steps: int = typer.Option(1, "--steps", "-T", help="Number of (sub)sampled invocations."),
    sampling_rate: float = typer.Option(
        1.0, "--sampling-rate", "-q", help="Poisson sampling rate q (1 = no subsampling)."
    ),
    dataset_size: int = typer.Option(
        None, "--dataset-size", help="m, for sampling without replacement (replace-one)."
    ),
    sample_size: int = typer.Option(
        None, "--sample-size", help="Sample size per step, for sampling without replacement."
    ),
    rho: float = typer.Option(
        None, "--rho", help="zCDP parameter per step (--mechanism zcdp; at most 100)."
    ),
    epsilon0: float = typer.Option(
        None, "--epsilon0", help="Per-step epsilon (--mechanism pure|approx; at most 100)."
    ),
    delta0: float = typer.Option(None, "--delta0", help="Per-step delta (--mechanism approx)."),
    delta: float = typer.Option(1e-5, "--delta", "-d", help="Target delta of the guarantee."),
    relation: str = typer.Option(
        "add_remove", "--relation", help="Neighbouring relation: add_remove or replace_one."
    ),
    backend: BackendChoice = typer.Option(
        BackendChoice.all,
        "--backend",
        help=(
            "Accountant: rdp, pld, or all (side by side; PLD is left out when ε > 100 or its "
            "grid would not fit in memory)."
        ),
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Compute the (epsilon, delta) guarantee of a mechanism's parameters.

    Examples:

      privrl account -z 1.0 -q 0.00256 -T 10000 --delta 1e-5   # DP-SGD-style

      privrl account -m zcdp --rho 1 --delta 1e-3               # zCDP -> (ε, δ)

      privrl account -m approx --epsilon0 0.2 --delta0 1e-8 -T 25 --delta 1e-5
    """
    with in_calculator_words():
        result = calculator.account(
            mechanism,
            noise_multiplier=noise_multiplier,
            steps=steps,
            sampling_rate=sampling_rate,
            dataset_size=dataset_size,
            sample_size=sample_size,
            rho=rho,
            epsilon0=epsilon0,
            delta0=delta0,
            delta=delta,
            relation=relation,
            backend=backend,
        )
    result = calculator_notes(result)
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=str))
        return
    console = Console()
    console.print(calculator.account_table(result))
    if result["rho"] is not None:
        console.print(f"zCDP: ρ = {result['rho']:.6g}")


def calibrate(
    *,
    epsilon: float = typer.Option(..., "--epsilon", "-e", help="Target epsilon (1e-6 to 100)."),
    delta: float = typer.Option(1e-5, "--delta", "-d", help="Target delta."),
    steps: int = typer.Option(
        None, "--steps", "-T", help="Number of steps; omit and give -z to find the largest T."
    ),
    noise_multiplier: float = typer.Option(
        None,
        "--noise-multiplier",
        "-z",
        help="Given noise multiplier (1e-6 to 1e7): find the largest T instead.",
    ),
    sampling_rate: float = typer.Option(1.0, "--sampling-rate", "-q", help="Poisson rate q."),
    dataset_size: int = typer.Option(None, "--dataset-size", help="m (without replacement)."),
    sample_size: int = typer.Option(None, "--sample-size", help="Sample size per step."),
    relation: str = typer.Option("add_remove", "--relation", help="add_remove or replace_one."),
    backend: BackendChoice = typer.Option(BackendChoice.rdp, "--backend", help="rdp or pld."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """Find the noise multiplier for a target (epsilon, delta), or the steps a noise affords.

    With --steps, finds the smallest Gaussian noise multiplier z whose T (sub)sampled steps meet
    the target; with --noise-multiplier, finds the largest T within the target.

    Examples:

      privrl calibrate --epsilon 5 --delta 1e-5 -q 0.001 -T 7000  # z ≈ 0.524

      privrl calibrate --epsilon 5 --delta 1e-5 -q 0.001 -z 0.6   # largest T
    """
    with in_calculator_words():
        out, text = calculator.calibrate(
            epsilon,
            delta=delta,
            steps=steps,
            noise_multiplier=noise_multiplier,
            sampling_rate=sampling_rate,
            dataset_size=dataset_size,
            sample_size=sample_size,
            relation=relation,
            backend=backend,
        )
    typer.echo(json.dumps(out, indent=2) if as_json else f"{text}  [{out['accountant']}]")
