"""`privrl account` (epsilon for mechanism parameters) and `privrl calibrate` (the inverse)."""

from __future__ import annotations

import json
import math
from enum import StrEnum

import typer
from dp_accounting import dp_event
from rich.console import Console
from rich.table import Table

from privrl.cli.errors import CliError
from privrl.privacy import accounting as acc
from privrl.privacy.events import ApproxDpEvent, PureDpEvent
from privrl.privacy.units import parse_relation


class Mechanism(StrEnum):
    gaussian = "gaussian"
    laplace = "laplace"
    zcdp = "zcdp"
    pure = "pure"
    approx = "approx"


class BackendChoice(StrEnum):
    rdp = "rdp"
    pld = "pld"
    all = "all"


def _check_delta(delta: float) -> None:
    if not 0.0 < delta < 1.0:
        raise CliError(f"--delta must be in (0, 1), got {delta}")


def _sampling_args(
    sampling_rate: float, dataset_size: int | None, sample_size: int | None
) -> dict[str, object]:
    if (dataset_size is None) != (sample_size is None):
        raise CliError("give both --dataset-size and --sample-size (sampling without replacement)")
    if dataset_size is not None and sample_size is not None:
        if sampling_rate != 1.0:
            raise CliError("use either --sampling-rate (Poisson) or --dataset-size/--sample-size")
        if not 0 < sample_size <= dataset_size:
            raise CliError("--sample-size must be between 1 and --dataset-size")
        return {
            "sampling": "without_replacement",
            "dataset_size": dataset_size,
            "sample_size": sample_size,
        }
    if not 0.0 < sampling_rate <= 1.0:
        raise CliError(f"--sampling-rate must be in (0, 1], got {sampling_rate}")
    if sampling_rate < 1.0:
        return {"sampling": "poisson", "sampling_probability": sampling_rate}
    return {"sampling": "none"}


def _build_event(
    mechanism: Mechanism,
    *,
    noise_multiplier: float | None,
    steps: int,
    sampling: dict[str, object],
    rho: float | None,
    epsilon0: float | None,
    delta0: float | None,
) -> dp_event.DpEvent:
    if steps < 1:
        raise CliError(f"--steps must be >= 1, got {steps}")
    if mechanism in (Mechanism.gaussian, Mechanism.laplace):
        if noise_multiplier is None or noise_multiplier <= 0:
            raise CliError("--noise-multiplier must be given and > 0 (noise std / sensitivity)")
        if mechanism is Mechanism.gaussian:
            return acc.sampled_gaussian_event(noise_multiplier, steps, **sampling)
        base: dp_event.DpEvent = dp_event.LaplaceDpEvent(noise_multiplier)
        if sampling["sampling"] == "poisson":
            base = dp_event.PoissonSampledDpEvent(sampling["sampling_probability"], base)
        elif sampling["sampling"] == "without_replacement":
            raise CliError("the Laplace mechanism supports Poisson sampling only (--sampling-rate)")
        return dp_event.SelfComposedDpEvent(base, steps)
    if sampling["sampling"] != "none":
        raise CliError(f"sampling is not supported for --mechanism {mechanism.value}")
    if mechanism is Mechanism.zcdp:
        if rho is None or rho <= 0:
            raise CliError("--rho must be given and > 0 for --mechanism zcdp")
        return dp_event.SelfComposedDpEvent(dp_event.ZCDpEvent(rho), steps)
    if epsilon0 is None or epsilon0 <= 0:
        raise CliError(f"--epsilon0 must be given and > 0 for --mechanism {mechanism.value}")
    if mechanism is Mechanism.pure:
        return dp_event.SelfComposedDpEvent(PureDpEvent(epsilon0), steps)
    if delta0 is None or not 0 < delta0 < 1:
        raise CliError("--delta0 must be given and in (0, 1) for --mechanism approx")
    return dp_event.SelfComposedDpEvent(ApproxDpEvent(epsilon0, delta0), steps)


def _backends(choice: BackendChoice) -> list[str]:
    return ["rdp", "pld"] if choice is BackendChoice.all else [choice.value]


def account(
    mechanism: Mechanism = typer.Option(
        Mechanism.gaussian, "--mechanism", "-m", help="Mechanism family to account."
    ),
    noise_multiplier: float = typer.Option(
        None,
        "--noise-multiplier",
        "-z",
        help="Noise std (Gaussian) or scale (Laplace) / sensitivity.",
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
    rho: float = typer.Option(None, "--rho", help="zCDP parameter per step (--mechanism zcdp)."),
    epsilon0: float = typer.Option(
        None, "--epsilon0", help="Per-step epsilon (--mechanism pure|approx)."
    ),
    delta0: float = typer.Option(None, "--delta0", help="Per-step delta (--mechanism approx)."),
    delta: float = typer.Option(1e-5, "--delta", "-d", help="Target delta of the guarantee."),
    relation: str = typer.Option(
        "add_remove", "--relation", help="Neighbouring relation: add_remove or replace_one."
    ),
    backend: BackendChoice = typer.Option(
        BackendChoice.all, "--backend", help="Accountant: rdp, pld, or all (side by side)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Compute the (epsilon, delta) guarantee of a mechanism's parameters.

    Examples:

      privrl account -z 1.0 -q 0.00256 -T 10000 --delta 1e-5    # DP-SGD-style steps

      privrl account -m zcdp --rho 1 --delta 1e-3                # zCDP -> (eps, delta)

      privrl account -m approx --epsilon0 0.2 --delta0 1e-8 -T 25 --delta 1e-5
    """
    _check_delta(delta)
    rel = parse_relation(relation)
    sampling = _sampling_args(sampling_rate, dataset_size, sample_size)
    event = _build_event(
        mechanism,
        noise_multiplier=noise_multiplier,
        steps=steps,
        sampling=sampling,
        rho=rho,
        epsilon0=epsilon0,
        delta0=delta0,
    )
    rows: list[dict[str, object]] = []
    for name in _backends(backend):
        try:
            eps = acc.epsilon(event, delta, relation=rel, backend=name)
            rows.append({"accountant": acc.describe_backend(name), "epsilon": eps})
        except acc.AccountingError as exc:
            if backend is not BackendChoice.all:
                raise
            rows.append(
                {"accountant": acc.describe_backend(name), "epsilon": None, "note": str(exc)}
            )
    closed = _closed_forms(mechanism, steps, rho, epsilon0, delta0, delta)
    rows.extend(closed)
    result = {
        "mechanism": mechanism.value,
        "delta": delta,
        "relation": rel.value,
        "event": _event_json(event),
        "rho": acc.zcdp_rho(event),
        "results": rows,
    }
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=str))
        return
    _print_table(
        f"{mechanism.value} mechanism, {rel.describe()}, δ = {delta:g}", rows, result["rho"]
    )


def _closed_forms(
    mechanism: Mechanism,
    steps: int,
    rho: float | None,
    epsilon0: float | None,
    delta0: float | None,
    delta: float,
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    if mechanism is Mechanism.zcdp and rho is not None:
        rows.append(
            {
                "accountant": "closed form: ρ + 2√(ρ log 1/δ) (Bun & Steinke 2016)",
                "epsilon": acc.zcdp_to_dp(rho * steps, delta),
            }
        )
    if mechanism in (Mechanism.pure, Mechanism.approx) and epsilon0 is not None:
        d0 = delta0 or 0.0
        slack = delta - steps * d0
        if slack > 0:
            eps, _ = acc.advanced_composition(epsilon0, d0, steps, slack)
            rows.append(
                {
                    "accountant": "closed form: advanced composition (Dwork, Rothblum & Vadhan)",
                    "epsilon": eps,
                }
            )
        rows.append(
            {"accountant": "closed form: basic composition (k·ε0)", "epsilon": steps * epsilon0}
        )
    return rows


def _event_json(event: dp_event.DpEvent) -> dict[str, object]:
    from privrl.privacy.serialize import event_to_dict

    return event_to_dict(event)


def _fmt(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return "∞" if math.isinf(value) else f"{value:.4g}"
    return str(value)


def _print_table(title: str, rows: list[dict[str, object]], rho: float | None) -> None:
    table = Table(title=title)
    table.add_column("accountant")
    table.add_column("ε", justify="right")
    table.add_column("note")
    for row in rows:
        table.add_row(str(row["accountant"]), _fmt(row.get("epsilon")), str(row.get("note", "")))
    console = Console()
    console.print(table)
    if rho is not None:
        console.print(f"zCDP: ρ = {rho:.6g}")


def calibrate(
    epsilon: float = typer.Option(..., "--epsilon", "-e", help="Target epsilon."),
    delta: float = typer.Option(1e-5, "--delta", "-d", help="Target delta."),
    steps: int = typer.Option(
        None, "--steps", "-T", help="Number of steps; omit and give -z to find the largest T."
    ),
    noise_multiplier: float = typer.Option(
        None, "--noise-multiplier", "-z", help="Given noise multiplier: find the largest T instead."
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

      privrl calibrate --epsilon 5 --delta 1e-5 -q 0.001 -T 7000     # -> z ≈ 0.524

      privrl calibrate --epsilon 5 --delta 1e-5 -q 0.001 -z 0.6      # -> largest T
    """
    _check_delta(delta)
    if epsilon <= 0:
        raise CliError(f"--epsilon must be > 0, got {epsilon}")
    if backend is BackendChoice.all:
        raise CliError("--backend must be rdp or pld for calibration")
    rel = parse_relation(relation)
    sampling = _sampling_args(sampling_rate, dataset_size, sample_size)
    common = {"relation": rel, "backend": backend.value, **sampling}
    if (steps is None) == (noise_multiplier is None):
        raise CliError("give exactly one of --steps (find z) or --noise-multiplier (find T)")
    if steps is not None:
        if steps < 1:
            raise CliError(f"--steps must be >= 1, got {steps}")
        z = acc.calibrate_noise_multiplier(epsilon, delta, steps, **common)
        achieved = acc.epsilon(
            acc.sampled_gaussian_event(z, steps, **sampling),
            delta,
            relation=rel,
            backend=backend.value,
        )
        out = {"noise_multiplier": z, "steps": steps, "epsilon": achieved, "delta": delta}
        text = (
            f"noise multiplier z = {z:.4f} for {steps} steps: ε = {achieved:.4f} at δ = {delta:g}"
        )
    else:
        if noise_multiplier <= 0:
            raise CliError(f"--noise-multiplier must be > 0, got {noise_multiplier}")
        t = acc.max_steps(noise_multiplier, epsilon, delta, **common)
        out = {"noise_multiplier": noise_multiplier, "steps": t, "epsilon_target": epsilon}
        text = f"largest step count within ε = {epsilon:g} at δ = {delta:g}: T = {t}"
    out["accountant"] = acc.describe_backend(backend.value)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(f"{text}  [{out['accountant']}]")
