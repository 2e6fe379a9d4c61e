"""What `ExpertDP` and `DPSGD` fix before the data are read: their `plan(header)`.

From the config and the dataset's header only (metadata, sizes, fingerprint), each resolves
its public parameters with their sources (`PublicParameters`): m (``n_experts`` or the
metadata's declared ``extra["n_experts"]`` / ``extra["recipe"]["n_experts"]``; it sets
q = b/m and the default δ = 1/m), |A| (``actions`` or a declared Discrete action space not
marked ``inferred_from_data``), the filter's L (``max_len`` or a declared
``metadata.horizon``) and the settings; the budget split; the filter's calibration and the
step count (public searches: an infeasible calibration or a ``steps`` above the budget is
refused here); and the planned spend a ledger reserves. The planned spend is what the run will
spend, not its ε ceiling: for DP-SGD the ε of its N steps (``steps``, or the largest count
within ε at most ``steps_cap``); for ExpertDP the filter's T rounds composed with the most
private steps it can take (exact at p ∈ {0, 1}; at 0 < p < 1 an upper bound, since the step
coins, drawn independently of the data, make some steps non-private — the final report says
so); or ε = ∞ for an uncertified mode, which a ledger refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from privrl.algorithm import Plan
from privrl.config import ConfigError
from privrl.expert.config import (
    DEFAULT_BATCH,
    DEFAULT_CLIP,
    DEFAULT_NOISE,
    DEFAULT_P_MIN,
    DEFAULT_ROUNDS,
    DEFAULT_STEPS_CAP,
    DPSGDConfig,
    ExpertDPConfig,
    ExpertTrainingConfig,
)
from privrl.expert.public import (
    Reference,
    check_batch,
    eval_setup,
    flag_or_default,
    resolve_actions,
    resolve_delta,
    resolve_experts,
)
from privrl.expert.selective import BudgetSplit
from privrl.privacy.public import PublicParameters
from privrl.privacy.report import PrivacyReport

if TYPE_CHECKING:
    from privrl.data.dataset import DatasetMetadata
    from privrl.data.io import DatasetHeader
    from privrl.privacy.threshold import DataReleaseCalibration

EXPERT_DP_SYSTEM = "expert-consensus + selective-dp-sgd"
DP_SGD_SYSTEM = "expert-dp-sgd"


@dataclass
class Resolved:
    """What `plan` resolved for both learners (carried to the computation in `Plan.facts`).

    ``params`` is completed during the computation (the step counts the coins gave) and
    lands in the final report.
    """

    params: PublicParameters
    meta: DatasetMetadata
    sizes: tuple[int, ...]
    eval_info: dict[str, Any]
    ref: Reference
    n_actions: int = 0
    b: int = 0
    cap: int = 0
    m: int | None = None
    epsilon: float | None = None
    delta: float | None = None
    z: float | None = None
    c: float | None = None


@dataclass(frozen=True)
class Bound:
    """What ExpertDP's plan reserved: ε of the filter's T rounds composed with
    ``private_steps`` DP-SGD steps; ``exact`` when the run takes exactly that many (p ∈ {0, 1}),
    else an upper bound (the step coins decide how many of them are private)."""

    epsilon: float
    private_steps: int
    exact: bool


def resolve_common(
    config: ExpertTrainingConfig, header: DatasetHeader, reference: Reference | None = None
) -> Resolved:
    """What both learners resolve from the header alone: the network's sizes, the evaluation
    and the score's references (the public parameters follow, in each learner's order).
    ``reference``: references from outside the config (a non-private twin's run), else the
    config's numbers."""
    meta = header.metadata
    ref = reference or Reference.given(config.reference_return, config.random_return)
    info = eval_setup(
        meta, episodes=config.eval_episodes, horizon=config.eval_horizon, no_eval=config.no_eval
    )
    sizes = config.hidden
    if sizes is None:
        sizes = (512,) if meta.env_id is not None and "HIV" in meta.env_id else (256, 256)
    return Resolved(
        params=PublicParameters(),
        meta=meta,
        sizes=tuple(sizes),
        eval_info=info,
        ref=ref.resolve(meta, info),
    )


def _steps_params(config: ExpertTrainingConfig, r: Resolved) -> None:
    r.cap = flag_or_default(r.params, "steps cap", config.steps_cap, DEFAULT_STEPS_CAP)
    if config.steps is not None:
        r.params.resolve("training steps N", flag=config.steps, fix="")


def _sampling_rate(r: Resolved, m: int) -> None:
    check_batch(r.b, m)
    r.params.derive("sampling rate q", r.b / m, "b/m")


def _noise_params(config: ExpertTrainingConfig, r: Resolved) -> None:
    r.z = flag_or_default(r.params, "noise multiplier σ", config.noise_multiplier, DEFAULT_NOISE)
    r.c = flag_or_default(r.params, "clipping norm C", config.clip_norm, DEFAULT_CLIP)


def public_values(r: Resolved) -> dict[str, Any]:
    """The resolved public values published beside the config (sizes, the evaluation)."""
    return {
        "n_actions": r.n_actions,
        "batch_size": r.b,
        "steps_cap": r.cap,
        **r.eval_info,
    }


# ---------------------------------------------------------------------------------------------
# ExpertDP
# ---------------------------------------------------------------------------------------------


def plan_expert_dp(
    config: ExpertDPConfig, header: DatasetHeader, reference: Reference | None = None
) -> Plan:
    """ExpertDP's plan (consensus filter + Selective DP-SGD), from the header only."""
    from privrl.expert.dpsgd import uncertified_plan
    from privrl.expert.selective import PAPER_NOT_CERTIFIED, effective_split, split_budget

    meta = header.metadata
    r = resolve_common(config, header, reference)
    params = r.params
    r.m = m = resolve_experts(params, config.n_experts, meta)
    r.delta = delta = resolve_delta(params, config.delta, m)
    r.n_actions = resolve_actions(params, config.actions, meta)
    r.epsilon = epsilon = params.resolve("ε", flag=config.epsilon, fix="pass `epsilon`")
    r.b = flag_or_default(params, "expected batch size b", config.batch_size, DEFAULT_BATCH)
    _sampling_rate(r, m)
    rounds = flag_or_default(params, "filter rounds T", config.filter_rounds, DEFAULT_ROUNDS)
    default_p = 0.8 if config.algo == "cql" else 0.5
    p = flag_or_default(params, "private-step probability p", config.p, default_p)
    split = split_budget(
        epsilon,
        delta,
        p,
        filter_below=config.filter_below,
        eps1_fraction=config.eps1_fraction,
        delta1_fraction=config.delta1_fraction,
        eps2_fraction=config.eps2_fraction,
        delta2_fraction=config.delta2_fraction,
    )
    split = effective_split(split, rounds)
    pm = flag_or_default(params, "expert action floor p_min", config.p_min, DEFAULT_P_MIN)
    for name, value in (
        ("ε1 (filter)", split.epsilon1),
        ("δ1 (filter)", split.delta1),
        ("ε2 (DP-SGD)", split.epsilon2),
        ("δ2 (DP-SGD)", split.delta2),
    ):
        params.derive(name, value, f"budget split of (ε, δ): {split.rule}")
    length = _filter_length(config, r, split, pm)
    _noise_params(config, r)
    _steps_params(config, r)
    uncertified = config.accounting == "paper" and split.dp_sgd and 0.0 < split.p < 1.0
    bound = None
    if uncertified:
        planned = uncertified_plan(EXPERT_DP_SYSTEM, PAPER_NOT_CERTIFIED)
    else:
        calib = _filter_calibration(config, r, split, rounds, length, pm)
        planned, bound = _expert_dp_spend(config, r, split, calib)
    public = {
        **public_values(r),
        "n_experts": m,
        "epsilon": epsilon,
        "delta": delta,
        "split": split.to_dict(),
        "filter_rounds": rounds,
        "max_len": length,
        "p_min": pm,
        "noise_multiplier": r.z,
        "clip_norm": r.c,
    }
    facts = {"resolved": r, "p": p, "split": split, "rounds": rounds, "length": length}
    return Plan(report=planned, public=public, facts={**facts, "bound": bound})


def _filter_length(
    config: ExpertDPConfig, r: Resolved, split: BudgetSplit, p_min: float
) -> int | None:
    """The filter's public L (None without a filter); p_min must be admissible for |A|."""
    if not split.filter:
        return None
    length = r.params.resolve(
        "maximum trajectory length L",
        flag=config.max_len,
        metadata=r.meta,
        key="horizon",
        fix="pass `max_len=L`, the longest trajectory the data may hold",
        detail="sets δ' = δ1/(2TL) and the threshold shift; longer trajectories truncated",
    )
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"the maximum trajectory length L must be >= 1, got {length!r}")
    if p_min * r.n_actions > 1:
        raise ConfigError("p_min", f"{p_min:g} is above 1/|A| = {1 / r.n_actions:.4g}")
    return length


def _filter_calibration(
    config: ExpertDPConfig,
    r: Resolved,
    split: BudgetSplit,
    rounds: int,
    length: int | None,
    p_min: float,
) -> DataReleaseCalibration | None:
    """The consensus filter's calibration (public: the budget split, T, L and p_min), or None
    without a filter; an infeasible one is refused before the data are read."""
    from privrl.privacy.threshold import DataReleaseCalibration

    if not split.filter:
        return None
    assert length is not None
    calib = DataReleaseCalibration.from_budget(
        split.epsilon1,
        split.delta1,
        rounds,
        length,
        p_min,
        calibration=config.filter_calibration,
    )
    r.params.derive("filter ε'", calib.epsilon_prime, f"{config.filter_calibration} calibration")
    r.params.derive("filter δ'", calib.delta_prime, "δ1/(2TL)")
    return calib


def _expert_dp_spend(
    config: ExpertDPConfig,
    r: Resolved,
    split: BudgetSplit,
    calib: DataReleaseCalibration | None,
) -> tuple[PrivacyReport, Bound]:
    """ExpertDP's planned report, from public quantities only: the filter's T rounds (its
    calibration) composed with the most private DP-SGD steps the run can take
    (`privrl.expert.selective.private_steps_bound`: the step count within the budget, the cap
    or ``steps``), as the final report composes them. At p ∈ {0, 1} this is exactly what the
    run spends; at 0 < p < 1 the step coins (drawn at run time, independent of the data) make
    some of those steps non-private, so it is an upper bound."""
    from dp_accounting.dp_event import ComposedDpEvent

    from privrl.expert.dpsgd import build_report, dp_sgd_release
    from privrl.expert.selective import private_steps_bound

    assert r.m is not None and r.z is not None and r.c is not None
    releases = []
    if calib is not None:
        releases.append(calib.release(name="consensus filter (planned): T rounds"))
    joint = config.dp_sgd_budget == "joint" and split.filter and split.dp_sgd
    k, exact = 0, True
    if split.dp_sgd:
        prior = ComposedDpEvent([rel.event for rel in releases]) if joint else None
        k, exact = private_steps_bound(
            p=split.p,
            noise_multiplier=r.z,
            sampling_rate=r.b / r.m,
            epsilon=split.epsilon if joint else split.epsilon2,
            delta=split.delta if joint else split.delta2,
            steps=config.steps,
            steps_cap=r.cap,
            prior=prior,
        )
    if k:
        releases.append(
            dp_sgd_release(
                noise_multiplier=r.z,
                clip_norm=r.c,
                sampling_probability=r.b / r.m,
                steps=k,
                batch_size=r.b,
                n_units=r.m,
                n_params=1,  # the network's size is not known before the data; ε ignores it
                name=f"Selective DP-SGD (planned): {'' if exact else 'at most '}{k} private steps",
            )
        )
    note = (
        "reserved: the filter's rounds and the run's private steps"
        if exact
        else f"reserved: the public upper bound, all {k} steps private (p = {split.p:g}); the "
        "step coins, independent of the data, make fewer of them private"
    )
    report = build_report(
        releases,
        split.delta1 + split.delta2,
        system=f"{EXPERT_DP_SYSTEM} (planned)",
        notes=[note],
    )
    return report, Bound(float(report.epsilon), k, exact)


# ---------------------------------------------------------------------------------------------
# DPSGD
# ---------------------------------------------------------------------------------------------


def plan_dp_sgd(
    config: DPSGDConfig, header: DatasetHeader, reference: Reference | None = None
) -> Plan:
    """DPSGD's plan (expert-level DP-SGD, or its non-private twin), from the header only."""
    from privrl.expert.dpsgd import (
        RELATION,
        SHUFFLE_NOT_CERTIFIED,
        UNIT,
        plan_steps,
        uncertified_plan,
    )

    r = resolve_common(config, header, reference)
    params = r.params
    r.n_actions = resolve_actions(params, config.actions, header.metadata)
    r.b = flag_or_default(params, "batch size b", config.batch_size, DEFAULT_BATCH)
    _steps_params(config, r)
    n_steps, capped = (config.steps if config.steps is not None else r.cap), False
    if config.non_private:
        planned = PrivacyReport.non_private(
            UNIT, RELATION, system=f"{DP_SGD_SYSTEM} (non-private twin)"
        )
        r.delta = config.delta
    else:
        r.m = m = resolve_experts(params, config.n_experts, header.metadata)
        r.delta = delta = resolve_delta(params, config.delta, m)
        r.epsilon = epsilon = params.resolve("ε", flag=config.epsilon, fix="pass `epsilon`")
        _sampling_rate(r, m)
        _noise_params(config, r)
        assert r.z is not None and r.c is not None
        # the step count from public parameters only, before the ledger check: `steps`
        # (refused above the budget), else the largest N within (ε, δ), at most the cap
        n_steps, capped = plan_steps(
            noise_multiplier=r.z,
            sampling_probability=r.b / m,
            epsilon=epsilon,
            delta=delta,
            steps=config.steps,
            steps_cap=r.cap,
        )
        params.derive(
            "private steps N",
            n_steps,
            "`steps`"
            if config.steps is not None
            else "largest count within (ε, δ) at most the steps cap, PLD accountant",
        )
        if config.sampling == "shuffle":
            planned = uncertified_plan(DP_SGD_SYSTEM, SHUFFLE_NOT_CERTIFIED)
        else:  # the ledger checks what the N steps spend, not the ε ceiling
            planned = steps_spend(r, steps=n_steps)
    public = {
        **public_values(r),
        "epsilon": r.epsilon,
        "delta": r.delta,
        "n_experts": r.m,
        "noise_multiplier": r.z,
        "clip_norm": r.c,
    }
    facts = {"resolved": r, "n_steps": n_steps, "capped": capped}
    return Plan(report=planned, public=public, facts=facts)


def steps_spend(r: Resolved, *, steps: int) -> PrivacyReport:
    """The report of `steps` Poisson-sampled DP-SGD steps (rate b/m, noise σ): what a run with
    a given step count spends, for the ledger check before the data are read."""
    from privrl.expert.dpsgd import build_report, dp_sgd_release

    assert r.m is not None and r.z is not None and r.c is not None and r.delta is not None
    release = dp_sgd_release(
        noise_multiplier=r.z,
        clip_norm=r.c,
        sampling_probability=r.b / r.m,
        steps=steps,
        batch_size=r.b,
        n_units=r.m,
        n_params=1,  # the network's size is not known before the data; ε does not depend on it
    )
    return build_report(
        [release] if steps else [], float(r.delta), system=f"{DP_SGD_SYSTEM} (planned)"
    )
