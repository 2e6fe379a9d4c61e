"""The privacy calculator behind `privrl account` and `privrl calibrate`.

`account(...)` builds the `DpEvent` of a mechanism family from its public parameters (noise
multiplier, steps, sampling, per-step ε/δ or ρ) and states its (ε, δ) guarantee by every
accountant asked for, beside the closed forms that apply; `calibrate(...)` is the inverse for
the (sub)sampled Gaussian: the smallest noise multiplier for T steps, or the largest T for a
noise multiplier. Nothing here touches data: every input is a public parameter.

Bad parameters raise `InputError` (a ValueError) with a message naming the parameter that
carries the value, written `` `noise_multiplier` `` (or `` `mechanism=zcdp` `` for a value);
the command line writes those names as its flags.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from dp_accounting import dp_event

from privrl.privacy import accounting as acc
from privrl.privacy.events import ApproxDpEvent, PureDpEvent
from privrl.privacy.limits import (
    MAX_EPSILON,
    InputError,
    check_delta,
    check_epsilon,
    check_int,
    check_number,
    format_bytes,
    machine_memory,
)
from privrl.privacy.units import parse_relation

if TYPE_CHECKING:  # rich draws tables only; importing the privacy core does not load it
    from rich.table import Table


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
# calibrate_noise_multiplier's search floors (the library's own; a test keeps them equal).
SEARCH_FLOOR = dict(acc._MIN_NOISE)
# `calibrate` with a given noise multiplier stops its search for T here.
MAX_STEPS_SEARCHED = 10**7

# PLD cost model, measured on this project's machine with dp-accounting 0.6.0 (discretisation
# 1e-4): the privacy-loss grid spans about [0, ε] in steps of 1e-4 and its construction and
# composition hold ~350 bytes per grid point (z = 1, T = 1000, q = 1: ε = 634, 2.6 GB, 55 s).
# RDP's ε (an upper bound, cheap) stands in for ε; a PLD whose estimate exceeds half the
# machine's memory is refused up front instead of failing after minutes with a MemoryError.
_PLD_BYTES_PER_POINT = 350.0
_PLD_DISCRETIZATION = 1e-4

_MECHANISM_PARAMS = {
    Mechanism.gaussian: ("noise_multiplier",),
    Mechanism.laplace: ("noise_multiplier",),
    Mechanism.zcdp: ("rho",),
    Mechanism.pure: ("epsilon0",),
    Mechanism.approx: ("epsilon0", "delta0"),
}


def check_noise_multiplier(z: float, name: str = "`noise_multiplier`") -> float:
    return check_number(
        z, name, ge=MIN_Z, le=MAX_Z, hint="outside this range ε is ∞ or 0 to float precision"
    )


def rdp_epsilon(event: dp_event.DpEvent, delta: float, rel: object) -> float | None:
    """RDP's ε for `event` (an upper bound on the PLD's), or None if RDP cannot account it."""
    try:
        return acc.epsilon(event, delta, relation=rel, backend="rdp")  # type: ignore[arg-type]
    except acc.AccountingError:
        return None


def _pld_bytes(eps: float) -> float:
    return _PLD_BYTES_PER_POINT * max(eps, 1.0) / _PLD_DISCRETIZATION


def pld_too_large(eps: float | None, *, fix: str = "use `backend=rdp`") -> str | None:
    """Why a PLD for an event with RDP ε `eps` cannot be built here, or None if it can;
    ``fix`` ends the reason (the setting that selects RDP in the caller's words)."""
    if eps is None:
        return None
    budget = machine_memory() / 2
    if math.isfinite(eps) and _pld_bytes(eps) <= budget:
        return None
    need = "unbounded memory" if not math.isfinite(eps) else f"~{format_bytes(_pld_bytes(eps))}"
    return (
        f"the PLD accountant is not run for this event: its privacy loss reaches ε ≈ {eps:.4g} "
        f"(RDP bound), whose PLD grid at discretisation {_PLD_DISCRETIZATION:g} needs {need} "
        f"(more than half of this machine's {format_bytes(machine_memory())}); {fix}"
    )


def _refuse_large_pld(eps: float | None, where: str) -> None:
    reason = pld_too_large(eps)
    if reason is not None:
        raise InputError(f"{reason} ({where})")


def sampling_args(
    sampling_rate: float, dataset_size: int | None, sample_size: int | None
) -> dict[str, object]:
    """The sampling keywords of `accounting.sampled_gaussian_event`: Poisson at rate q, without
    replacement (m, sample size), or none."""
    if (dataset_size is None) != (sample_size is None):
        raise InputError(
            "give both `dataset_size` and `sample_size` (sampling without replacement)"
        )
    if dataset_size is not None and sample_size is not None:
        check_int(dataset_size, "`dataset_size`", minimum=1)
        check_int(sample_size, "`sample_size`", minimum=1)
        if sampling_rate != 1.0:
            raise InputError("use either `sampling_rate` (Poisson) or `dataset_size`/`sample_size`")
        if not 0 < sample_size <= dataset_size:
            raise InputError("`sample_size` must be between 1 and `dataset_size`")
        return {
            "sampling": "without_replacement",
            "dataset_size": dataset_size,
            "sample_size": sample_size,
        }
    check_number(sampling_rate, "`sampling_rate`", gt=0, le=1)
    if sampling_rate < 1.0:
        return {"sampling": "poisson", "sampling_probability": sampling_rate}
    return {"sampling": "none"}


def _refuse_foreign_params(mechanism: Mechanism, given: dict[str, object]) -> None:
    """A parameter of another mechanism is refused rather than silently ignored."""
    for name, value in given.items():
        if value is not None and name not in _MECHANISM_PARAMS[mechanism]:
            owners = [m.value for m, names in _MECHANISM_PARAMS.items() if name in names]
            raise InputError(
                f"`{name}` does not apply to `mechanism={mechanism.value}` (it is for "
                f"`mechanism={' or '.join(owners)}`); remove it or change `mechanism`"
            )


def mechanism_event(
    mechanism: Mechanism,
    *,
    noise_multiplier: float | None,
    steps: int,
    sampling: dict[str, object],
    rho: float | None,
    epsilon0: float | None,
    delta0: float | None,
) -> dp_event.DpEvent:
    """The event of `steps` invocations of `mechanism` (sampled as `sampling_args` says)."""
    check_int(steps, "`steps`", minimum=1)
    _refuse_foreign_params(
        mechanism,
        {
            "noise_multiplier": noise_multiplier,
            "rho": rho,
            "epsilon0": epsilon0,
            "delta0": delta0,
        },
    )
    if mechanism in (Mechanism.gaussian, Mechanism.laplace):
        if noise_multiplier is None:
            raise InputError("`noise_multiplier` must be given and > 0 (noise std / sensitivity)")
        noise_multiplier = check_noise_multiplier(noise_multiplier)
        if mechanism is Mechanism.gaussian:
            return acc.sampled_gaussian_event(noise_multiplier, steps, **sampling)
        base: dp_event.DpEvent = dp_event.LaplaceDpEvent(noise_multiplier)
        if sampling["sampling"] == "poisson":
            base = dp_event.PoissonSampledDpEvent(sampling["sampling_probability"], base)
        elif sampling["sampling"] == "without_replacement":
            raise InputError(
                "the Laplace mechanism supports Poisson sampling only (`sampling_rate`)"
            )
        return dp_event.SelfComposedDpEvent(base, steps)
    if sampling["sampling"] != "none":
        raise InputError(f"sampling is not supported for `mechanism={mechanism.value}`")
    if mechanism is Mechanism.zcdp:
        if rho is None:
            raise InputError("`rho` must be given and > 0 for `mechanism=zcdp`")
        rho = check_number(rho, "`rho`", gt=0, le=MAX_EPSILON)
        return dp_event.SelfComposedDpEvent(dp_event.ZCDpEvent(rho), steps)
    if epsilon0 is None:
        raise InputError(f"`epsilon0` must be given and > 0 for `mechanism={mechanism.value}`")
    epsilon0 = check_number(epsilon0, "`epsilon0`", gt=0, le=MAX_EPSILON)
    if mechanism is Mechanism.pure:
        return dp_event.SelfComposedDpEvent(PureDpEvent(epsilon0), steps)
    if delta0 is None:
        raise InputError("`delta0` must be given and in (0, 1) for `mechanism=approx`")
    delta0 = check_number(delta0, "`delta0`", gt=0, lt=1)
    return dp_event.SelfComposedDpEvent(ApproxDpEvent(epsilon0, delta0), steps)


def _pld_skip(proxy: float | None, backend: BackendChoice) -> str | None:
    """Why `account` leaves the PLD out (memory; or, side by side, a meaningless ε), or None."""
    skip = pld_too_large(proxy)
    if skip is None and backend is BackendChoice.all and proxy is not None:
        if proxy > MAX_EPSILON:
            skip = (
                f"not computed: ε ≈ {proxy:.4g} by RDP is beyond {MAX_EPSILON:g}, where "
                "no guarantee is meaningful (the PLD would take minutes); "
                "`backend=pld` forces it"
            )
    return skip


def _accountant_rows(
    event: dp_event.DpEvent, delta: float, rel: Any, backend: BackendChoice
) -> list[dict[str, object]]:
    names = ["rdp", "pld"] if backend is BackendChoice.all else [backend.value]
    rows: list[dict[str, object]] = []
    proxy = rdp_epsilon(event, delta, rel)
    for name in names:
        label = acc.describe_backend(name)
        skip = _pld_skip(proxy, backend) if name == "pld" else None
        if skip is not None:
            if backend is not BackendChoice.all:
                raise InputError(skip)
            rows.append({"accountant": label, "epsilon": None, "note": skip})
            continue
        try:
            rows.append(
                {
                    "accountant": label,
                    "epsilon": acc.epsilon(event, delta, relation=rel, backend=name),
                }
            )
        except acc.AccountingError as exc:
            if backend is not BackendChoice.all:
                raise
            rows.append({"accountant": label, "epsilon": None, "note": str(exc)})
    return rows


def closed_forms(
    mechanism: Mechanism,
    *,
    steps: int,
    rho: float | None,
    epsilon0: float | None,
    delta0: float | None,
    delta: float,
) -> list[dict[str, object]]:
    """Closed-form guarantees that apply: zCDP conversion, advanced and basic composition."""
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


def account(
    mechanism: Mechanism | str = Mechanism.gaussian,
    *,
    noise_multiplier: float | None = None,
    steps: int = 1,
    sampling_rate: float = 1.0,
    dataset_size: int | None = None,
    sample_size: int | None = None,
    rho: float | None = None,
    epsilon0: float | None = None,
    delta0: float | None = None,
    delta: float = 1e-5,
    relation: str = "add_remove",
    backend: BackendChoice | str = BackendChoice.all,
) -> dict[str, Any]:
    """The (ε, δ) guarantee of a mechanism's parameters, by each accountant and closed form.

    Returns {"mechanism", "delta", "relation", "event" (the event as JSON), "rho" (zCDP ρ where
    the event has one), "results": [{"accountant", "epsilon", "note"?}, ...]}.
    """
    mechanism, backend = Mechanism(mechanism), BackendChoice(backend)
    check_delta(delta, "`delta`")
    rel = parse_relation(relation)
    sampling = sampling_args(sampling_rate, dataset_size, sample_size)
    event = mechanism_event(
        mechanism,
        noise_multiplier=noise_multiplier,
        steps=steps,
        sampling=sampling,
        rho=rho,
        epsilon0=epsilon0,
        delta0=delta0,
    )
    rows = _accountant_rows(event, delta, rel, backend)
    rows += closed_forms(
        mechanism, steps=steps, rho=rho, epsilon0=epsilon0, delta0=delta0, delta=delta
    )
    from privrl.privacy.serialize import event_to_dict

    return {
        "mechanism": mechanism.value,
        "delta": delta,
        "relation": rel.value,
        "event": event_to_dict(event),
        "rho": acc.zcdp_rho(event),
        "results": rows,
    }


def _fmt(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return "∞" if math.isinf(value) else f"{value:.4g}"
    return str(value)


def account_table(result: dict[str, Any]) -> Table:
    """`account`'s result as a table: one row per accountant (ε, note)."""
    from rich.table import Table

    rel = parse_relation(result["relation"])
    title = f"{result['mechanism']} mechanism, {rel.describe()}, δ = {result['delta']:g}"
    table = Table(title=title)
    table.add_column("accountant")
    table.add_column("ε", justify="right")
    table.add_column("note")
    for row in result["results"]:
        table.add_row(str(row["accountant"]), _fmt(row.get("epsilon")), str(row.get("note", "")))
    return table


def _calibrate_z(
    epsilon: float, delta: float, steps: int, sampling: dict[str, object], common: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    check_int(steps, "`steps`", minimum=1)
    rel, backend = common["relation"], common["backend"]
    if backend == "pld":
        # The PLD search starts at RDP's z, or at z = 1 where RDP cannot calibrate: refuse up
        # front if the first PLD it builds below that start cannot be built.
        rdp = {**common, "backend": "rdp"}
        try:
            z_rdp = acc.calibrate_noise_multiplier(epsilon, delta, steps, **rdp)
            z0, where = z_rdp / 1.5, f"at z = {z_rdp / 1.5:.4g}, below RDP's z where it starts"
        except acc.AccountingError:
            z0, where = 1.0, "at the search's start z = 1"
        first = acc.sampled_gaussian_event(z0, steps, **sampling)
        _refuse_large_pld(rdp_epsilon(first, delta, rel), where)
    z = acc.calibrate_noise_multiplier(epsilon, delta, steps, **common)
    event = acc.sampled_gaussian_event(z, steps, **sampling)
    achieved = acc.epsilon(event, delta, relation=rel, backend=backend)
    floor = SEARCH_FLOOR[backend]
    out: dict[str, Any] = {
        "noise_multiplier": z,
        "steps": steps,
        "epsilon": achieved,
        "delta": delta,
    }
    text = f"noise multiplier z = {z:.4g} for {steps} steps: ε = {achieved:.4g} at δ = {delta:g}"
    if z <= floor:
        out["search_floor"] = True
        text += (
            f" (z is the search floor {floor:g}: even that little noise meets the target, "
            "so the budget does not constrain these steps)"
        )
    return out, text


def _calibrate_steps(
    epsilon: float, delta: float, z: float, sampling: dict[str, object], common: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    z = check_noise_multiplier(z)
    rel, backend = common["relation"], common["backend"]
    one = acc.sampled_gaussian_event(z, 1, **sampling)
    if backend == "pld":
        _refuse_large_pld(rdp_epsilon(one, delta, rel), "for a single step")
    cap = MAX_STEPS_SEARCHED
    t = acc.max_steps(z, epsilon, delta, upper=cap, **common)
    if t == 0:
        e1 = acc.epsilon(one, delta, relation=rel, backend=backend)
        need = acc.calibrate_noise_multiplier(epsilon, delta, 1, **common)
        raise InputError(
            f"no step is affordable: a single step with noise multiplier "
            f"{z:g} already has ε = {e1:.4g} > {epsilon:g} at δ = {delta:g}; use "
            f"`noise_multiplier` >= {need:.4g} (or a larger `epsilon` / smaller `sampling_rate`)"
        )
    out: dict[str, Any] = {"noise_multiplier": z, "steps": t, "epsilon_target": epsilon}
    text = f"largest step count within ε = {epsilon:g} at δ = {delta:g}: T = {t}"
    if t >= cap:
        out["search_cap"] = True
        text += f" or more (the search stops at {cap}: the budget allows at least that many)"
    return out, text


def calibrate(
    epsilon: float,
    *,
    delta: float = 1e-5,
    steps: int | None = None,
    noise_multiplier: float | None = None,
    sampling_rate: float = 1.0,
    dataset_size: int | None = None,
    sample_size: int | None = None,
    relation: str = "add_remove",
    backend: BackendChoice | str = BackendChoice.rdp,
) -> tuple[dict[str, Any], str]:
    """The smallest Gaussian noise multiplier z whose `steps` (sub)sampled steps meet (ε, δ), or,
    given `noise_multiplier`, the largest number of steps within it. Returns the result (as
    `privrl calibrate --json` prints it, with the accountant) and a sentence saying it."""
    backend = BackendChoice(backend)
    check_delta(delta, "`delta`")
    epsilon = check_epsilon(epsilon, "`epsilon`")
    if backend is BackendChoice.all:
        raise InputError("`backend` must be rdp or pld for calibration")
    rel = parse_relation(relation)
    sampling = sampling_args(sampling_rate, dataset_size, sample_size)
    common = {"relation": rel, "backend": backend.value, **sampling}
    if (steps is None) == (noise_multiplier is None):
        raise InputError("give exactly one of `steps` (find z) or `noise_multiplier` (find T)")
    if steps is not None:
        out, text = _calibrate_z(epsilon, delta, steps, sampling, common)
    else:
        out, text = _calibrate_steps(epsilon, delta, noise_multiplier, sampling, common)
    out["accountant"] = acc.describe_backend(backend.value)
    return out, text
