"""`privrl account` (epsilon for mechanism parameters) and `privrl calibrate` (the inverse)."""

from __future__ import annotations

import json
import math
from enum import StrEnum

import typer
from dp_accounting import dp_event
from rich.console import Console
from rich.table import Table

from privrl.cli.errors import (
    MAX_EPSILON,
    CliError,
    check_delta,
    check_epsilon,
    check_int,
    check_number,
    format_bytes,
    machine_memory,
)
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


# Noise multipliers outside [MIN_Z, MAX_Z] give ε = ∞ or 0 to float precision (and overflow
# the accountants' arithmetic); the same limits bound `calibrate`'s own search (accounting.py).
MIN_Z, MAX_Z = 1e-6, 1e7
# calibrate_noise_multiplier's search floors (accounting._MIN_NOISE; a test keeps them equal).
SEARCH_FLOOR = {"rdp": 1e-6, "pld": 0.2}

# PLD cost model, measured on this project's machine with dp-accounting 0.6.0 (discretisation
# 1e-4): the privacy-loss grid spans about [0, ε] in steps of 1e-4 and its construction and
# composition hold ~350 bytes per grid point (z = 1, T = 1000, q = 1: ε = 634, 2.6 GB, 55 s).
# RDP's ε (an upper bound, cheap) stands in for ε; a PLD whose estimate exceeds half the
# machine's memory is refused up front instead of failing after minutes with a MemoryError.
_PLD_BYTES_PER_POINT = 350.0
_PLD_DISCRETIZATION = 1e-4


def _check_delta(delta: float) -> None:
    check_delta(delta)


def _check_z(z: float, flag: str = "--noise-multiplier") -> float:
    return check_number(
        z,
        flag,
        ge=MIN_Z,
        le=MAX_Z,
        hint="outside this range ε is ∞ or 0 to float precision",
    )


def _rdp_proxy(event: dp_event.DpEvent, delta: float, rel: object) -> float | None:
    """RDP's ε for `event` (an upper bound on the PLD's), or None if RDP cannot account it."""
    try:
        return acc.epsilon(event, delta, relation=rel, backend="rdp")  # type: ignore[arg-type]
    except acc.AccountingError:
        return None


def _pld_bytes(eps: float) -> float:
    return _PLD_BYTES_PER_POINT * max(eps, 1.0) / _PLD_DISCRETIZATION


def _pld_too_large(eps: float | None) -> str | None:
    """Why a PLD for an event with RDP ε `eps` cannot be built here, or None if it can."""
    if eps is None:
        return None
    budget = machine_memory() / 2
    if math.isfinite(eps) and _pld_bytes(eps) <= budget:
        return None
    need = "unbounded memory" if not math.isfinite(eps) else f"~{format_bytes(_pld_bytes(eps))}"
    return (
        f"the PLD accountant is not run for this event: its privacy loss reaches ε ≈ {eps:.4g} "
        f"(RDP bound), whose PLD grid at discretisation {_PLD_DISCRETIZATION:g} needs {need} "
        f"(more than half of this machine's {format_bytes(machine_memory())}); use --backend rdp"
    )


def _sampling_args(
    sampling_rate: float, dataset_size: int | None, sample_size: int | None
) -> dict[str, object]:
    if (dataset_size is None) != (sample_size is None):
        raise CliError("give both --dataset-size and --sample-size (sampling without replacement)")
    if dataset_size is not None and sample_size is not None:
        check_int(dataset_size, "--dataset-size", minimum=1)
        check_int(sample_size, "--sample-size", minimum=1)
        if sampling_rate != 1.0:
            raise CliError("use either --sampling-rate (Poisson) or --dataset-size/--sample-size")
        if not 0 < sample_size <= dataset_size:
            raise CliError("--sample-size must be between 1 and --dataset-size")
        return {
            "sampling": "without_replacement",
            "dataset_size": dataset_size,
            "sample_size": sample_size,
        }
    check_number(sampling_rate, "--sampling-rate", gt=0, le=1)
    if sampling_rate < 1.0:
        return {"sampling": "poisson", "sampling_probability": sampling_rate}
    return {"sampling": "none"}


_MECHANISM_FLAGS = {
    Mechanism.gaussian: ("--noise-multiplier",),
    Mechanism.laplace: ("--noise-multiplier",),
    Mechanism.zcdp: ("--rho",),
    Mechanism.pure: ("--epsilon0",),
    Mechanism.approx: ("--epsilon0", "--delta0"),
}


def _refuse_foreign_flags(mechanism: Mechanism, given: dict[str, object]) -> None:
    """A flag of another mechanism is refused rather than silently ignored."""
    for flag, value in given.items():
        if value is not None and flag not in _MECHANISM_FLAGS[mechanism]:
            owners = [m.value for m, flags in _MECHANISM_FLAGS.items() if flag in flags]
            raise CliError(
                f"{flag} does not apply to --mechanism {mechanism.value} (it is for "
                f"--mechanism {' or '.join(owners)}); remove it or change --mechanism"
            )


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
    check_int(steps, "--steps", minimum=1)
    _refuse_foreign_flags(
        mechanism,
        {
            "--noise-multiplier": noise_multiplier,
            "--rho": rho,
            "--epsilon0": epsilon0,
            "--delta0": delta0,
        },
    )
    if mechanism in (Mechanism.gaussian, Mechanism.laplace):
        if noise_multiplier is None:
            raise CliError("--noise-multiplier must be given and > 0 (noise std / sensitivity)")
        noise_multiplier = _check_z(noise_multiplier)
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
        if rho is None:
            raise CliError("--rho must be given and > 0 for --mechanism zcdp")
        rho = check_number(rho, "--rho", gt=0, le=MAX_EPSILON)
        return dp_event.SelfComposedDpEvent(dp_event.ZCDpEvent(rho), steps)
    if epsilon0 is None:
        raise CliError(f"--epsilon0 must be given and > 0 for --mechanism {mechanism.value}")
    epsilon0 = check_number(epsilon0, "--epsilon0", gt=0, le=MAX_EPSILON)
    if mechanism is Mechanism.pure:
        return dp_event.SelfComposedDpEvent(PureDpEvent(epsilon0), steps)
    if delta0 is None:
        raise CliError("--delta0 must be given and in (0, 1) for --mechanism approx")
    delta0 = check_number(delta0, "--delta0", gt=0, lt=1)
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
    proxy = _rdp_proxy(event, delta, rel)
    for name in _backends(backend):
        if name == "pld":
            skip = _pld_too_large(proxy)
            if skip is None and backend is BackendChoice.all and proxy is not None:
                if proxy > MAX_EPSILON:
                    skip = (
                        f"not computed: ε ≈ {proxy:.4g} by RDP is beyond {MAX_EPSILON:g}, where "
                        "no guarantee is meaningful (the PLD would take minutes); "
                        "--backend pld forces it"
                    )
            if skip is not None:
                if backend is not BackendChoice.all:
                    raise CliError(skip)
                label = acc.describe_backend(name)
                rows.append({"accountant": label, "epsilon": None, "note": skip})
                continue
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

      privrl calibrate --epsilon 5 --delta 1e-5 -q 0.001 -T 7000     # -> z ≈ 0.524

      privrl calibrate --epsilon 5 --delta 1e-5 -q 0.001 -z 0.6      # -> largest T
    """
    _check_delta(delta)
    epsilon = check_epsilon(epsilon)
    if backend is BackendChoice.all:
        raise CliError("--backend must be rdp or pld for calibration")
    rel = parse_relation(relation)
    sampling = _sampling_args(sampling_rate, dataset_size, sample_size)
    common = {"relation": rel, "backend": backend.value, **sampling}
    if (steps is None) == (noise_multiplier is None):
        raise CliError("give exactly one of --steps (find z) or --noise-multiplier (find T)")
    if steps is not None:
        check_int(steps, "--steps", minimum=1)
        if backend is BackendChoice.pld:
            # The search starts at z = 1: refuse up front if that PLD alone cannot be built.
            start = acc.sampled_gaussian_event(1.0, steps, **sampling)
            _refuse_large_pld(_rdp_proxy(start, delta, rel), "at the search's start z = 1")
        z = acc.calibrate_noise_multiplier(epsilon, delta, steps, **common)
        achieved = acc.epsilon(
            acc.sampled_gaussian_event(z, steps, **sampling),
            delta,
            relation=rel,
            backend=backend.value,
        )
        floor = SEARCH_FLOOR[backend.value]
        out = {"noise_multiplier": z, "steps": steps, "epsilon": achieved, "delta": delta}
        text = (
            f"noise multiplier z = {z:.4g} for {steps} steps: ε = {achieved:.4g} at δ = {delta:g}"
        )
        if z <= floor:
            out["search_floor"] = True
            text += (
                f" (z is the search floor {floor:g}: even that little noise meets the target, "
                "so the budget does not constrain these steps)"
            )
    else:
        noise_multiplier = _check_z(noise_multiplier)
        one = acc.sampled_gaussian_event(noise_multiplier, 1, **sampling)
        if backend is BackendChoice.pld:
            _refuse_large_pld(_rdp_proxy(one, delta, rel), "for a single step")
        cap = 10**7
        t = acc.max_steps(noise_multiplier, epsilon, delta, upper=cap, **common)
        if t == 0:
            e1 = acc.epsilon(one, delta, relation=rel, backend=backend.value)
            need = acc.calibrate_noise_multiplier(epsilon, delta, 1, **common)
            raise CliError(
                f"no step is affordable: a single step with noise multiplier "
                f"{noise_multiplier:g} already has ε = {e1:.4g} > {epsilon:g} at δ = {delta:g}; "
                f"use -z >= {need:.4g} (or a larger --epsilon / smaller --sampling-rate)"
            )
        out = {"noise_multiplier": noise_multiplier, "steps": t, "epsilon_target": epsilon}
        text = f"largest step count within ε = {epsilon:g} at δ = {delta:g}: T = {t}"
        if t >= cap:
            out["search_cap"] = True
            text += f" or more (the search stops at {cap}: the budget allows at least that many)"
    out["accountant"] = acc.describe_backend(backend.value)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(f"{text}  [{out['accountant']}]")


def _refuse_large_pld(eps: float | None, where: str) -> None:
    reason = _pld_too_large(eps)
    if reason is not None:
        raise CliError(f"{reason} ({where})")
