"""Expert-level private offline RL (Sharma et al.) on the run layer: `expert-dp` (consensus
filter + Selective DP-SGD) and `dp-sgd` (expert-level DP-SGD alone, the paper's baseline;
``non_private`` runs its non-private twin, the reference of the normalised score).

The algorithms live in `privrl.expert` (`train_expert_dp`, `expert_dp_sgd`); this module only
adapts them to `plan` / `load` / `run`:

- `plan` (header only): the public parameters — m (``n_experts`` or the metadata's declared
  ``extra["n_experts"]`` / ``extra["recipe"]["n_experts"]``; it sets q = b/m and the default
  δ = 1/m), |A| (``actions`` or a declared Discrete action space not marked
  ``inferred_from_data``), the filter's L (``max_len`` or a declared ``metadata.horizon``) and
  the settings — each with its source; the budget split; the filter's calibration and the
  step count (public searches; an infeasible calibration or a `--steps` above the budget is
  refused here); the planned spend: what the run will spend, not its ε ceiling — for dp-sgd
  the ε of its N steps (`--steps`, or the largest count within ε at most `--steps-cap`), for
  expert-dp the filter's T rounds composed with the most private steps it can take (exact at
  p ∈ {0, 1}; at 0 < p < 1 an upper bound, since the step coins, drawn at run time
  independently of the data, make some steps non-private — the finished report says so); or
  ε = ∞ for an uncertified mode, which a ledger refuses; the evaluation set-up and the
  normalised score's references (`expert_public.Reference`).
- `load` (inside the ledger transaction): the episodes and the expert set, checked against the
  public schema.
- `run`: trains, evaluates greedily in the dataset's environment (the mean return of
  ``evals`` evaluations spaced over the last ``eval_window`` steps; CartPole for 1000 steps,
  other environments for the dataset's horizon) and returns metrics, the learning curve, the
  total report, learner.pt (+ learner.json, its architecture) and plots/learning_curve.png.

Certification: ``dp-sgd --sampling shuffle`` and ``expert-dp --accounting paper`` (0 < p < 1)
run the paper's procedure, which no accountant here certifies: their reports say ε = ∞, a
ledger refuses them before the data are read, and the paper's ε is kept only as metrics.json's
``epsilon_paper_accounting``. A twin trained on the same private data without a mechanism is
not covered by the run's guarantee: a score against it is labelled evaluation-only
(``reference_return_outside_guarantee: true`` and a note in privacy.json).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from privrl.config import ConfigError, RunConfig, check, option
from privrl.runs.system import Plan, Result, RunContext, System
from privrl.systems.expert_public import (
    EVAL_SEED_STEP,
    REFERENCE_NOTE,
    Reference,
    check_batch,
    eval_setup,
    evaluator,
    expert_set_path,
    flag_or_default,
    reference_from,
    resolve_actions,
    resolve_delta,
    resolve_experts,
)

# Limits of the settings, checked before anything is read or allocated: beyond them a run
# would exhaust memory (a step array of `steps` entries), overflow the accountant (noise
# multipliers far from 1) or never end. (ε's range is `privrl.privacy.limits`, checked by
# `RunConfig` for every system.)
NOISE_RANGE = (0.1, 1e4)
MAX_CLIP = 1e6
MAX_LR = 1.0
MAX_STEPS = 10**7
MAX_WIDTH, MAX_LAYERS = 8192, 16
MAX_EVAL_EPISODES = 10_000
MAX_EVAL_HORIZON = 10**6
MAX_EVALS = 10_000
MAX_ROUNDS = 10_000  # the paper uses T <= 100; the PLD's discretisation error grows with T
MAX_LEN = 10**7
MAX_EXPERTS = 10**9
MAX_ACTIONS = 10**6
MAX_SEED = 2**63 - 1  # numpy's SeedSequence takes any non-negative int; keep it in int64
DEFAULT_BATCH, DEFAULT_NOISE, DEFAULT_CLIP, DEFAULT_STEPS_CAP = 128, 20.0, 1.0, 100_000
DEFAULT_ROUNDS, DEFAULT_P_MIN, DEFAULT_LR = 25, 0.02, 3e-4


def _in_range(
    key: str, value: float | None, lo: float, hi: float, *, lo_open: bool = False
) -> None:
    if value is None:
        return
    v = float(value)
    ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi
    left = "(" if lo_open else "["
    check(ok, key, f"must be in {left}{lo:g}, {hi:g}], got {value}")


def _int_in(key: str, value: int | None, lo: int, hi: int) -> None:
    if value is None:
        return
    check(value >= lo, key, f"must be >= {lo}, got {value}")
    check(value <= hi, key, f"must be at most {hi}, got {value}")


@dataclass(frozen=True)
class ExpertConfig(RunConfig):
    """Settings shared by `expert-dp` and `dp-sgd` (learner, DP-SGD, evaluation, score)."""

    algo: Literal["cql", "bcq"] = option("cql", "--algo", help="Offline RL learner: cql or bcq.")
    epsilon: float | None = option(
        None, "--epsilon", help="Total privacy budget ε of the run.", allow_nan=True
    )
    delta: float | None = option(
        None, "--delta", help="δ of the run (default 1/m, m = number of experts).", allow_nan=True
    )
    n_experts: int | None = option(
        None,
        "--n-experts",
        help=(
            "m, the number of experts (public; default: the dataset's declared "
            "extra['n_experts'] or extra['recipe']['n_experts']; never counted in the data)."
        ),
    )
    actions: int | None = option(
        None,
        "--actions",
        help=(
            "|A|, the number of discrete actions (public; default: the dataset's declared "
            "action space, unless its metadata mark it as inferred from the data)."
        ),
    )
    batch_size: int | None = option(
        None,
        "--batch-size",
        "-b",
        help=f"Expected batch size b (rate b/m; default {DEFAULT_BATCH}).",
    )
    noise_multiplier: float | None = option(
        None,
        "--noise-multiplier",
        "-z",
        help=f"DP-SGD noise multiplier σ (noise std / C; default {DEFAULT_NOISE:g}).",
        allow_nan=True,
    )
    clip_norm: float | None = option(
        None,
        "--clip-norm",
        help=f"Per-expert gradient clipping norm C (default {DEFAULT_CLIP:g}).",
        allow_nan=True,
    )
    lr: float | None = option(
        None, "--lr", help="Adam learning rate (default 3e-4).", allow_nan=True
    )
    steps_cap: int | None = option(
        None,
        "--steps-cap",
        help=f"Most training steps (the budget may allow more; default {DEFAULT_STEPS_CAP}).",
    )
    steps: int | None = option(
        None, "--steps", help="Explicit step count (its ε is reported; refused above the budget)."
    )
    hidden: tuple[int, ...] | None = option(
        None, "--hidden", help="Hidden layer sizes, e.g. 256,256 (default; HIV: 512)."
    )
    eval_episodes: int = option(10, "--eval-episodes", help="Episodes per evaluation.")
    eval_horizon: int | None = option(
        None, "--eval-horizon", help="Evaluation episode length (CartPole 1000; else data horizon)."
    )
    evals: int = option(10, "--evals", help="Evaluations over the last --eval-window steps.")
    eval_window: int = option(10_000, "--eval-window", help="Steps over which evaluations spread.")
    no_eval: bool = option(False, "--no-eval/", help="Skip evaluation (no return metrics).")
    eval_seed: int | None = option(
        None,
        "--eval-seed",
        help="Seed of the first evaluation's environments (default: the run's --seed).",
    )
    eval_seed_step: int = option(
        EVAL_SEED_STEP,
        "--eval-seed-step",
        help="Evaluation k uses seed --eval-seed + k * this (public; no privacy effect).",
    )
    reference: Path | None = option(  # noqa: RUF009 - option() returns a field
        None,
        "--reference",
        help=(
            "Run directory of the non-private twin (privrl train dp-sgd --non-private, same "
            "data, --algo and evaluation horizon): its return R_np scales the normalised score "
            "(R − R_rand)/(R_np − R_rand). Trained on the same data without a mechanism, it is "
            "outside the run's guarantee: the score is labelled evaluation-only."
        ),
    )
    reference_return: float | None = option(
        None,
        "--reference-return",
        help="R_np of the normalised score, given as a number.",
        allow_nan=True,  # refused by validate as "must be finite"
    )
    random_return: float | None = option(
        None,
        "--random-return",
        help="R_rand of the normalised score (default: the dataset's recorded random return).",
        allow_nan=True,
    )

    def validate(self) -> None:
        if self.delta is not None:
            ok = math.isfinite(self.delta) and 0 < self.delta < 1
            check(ok, "delta", f"must be in (0, 1), got {self.delta}")
        _in_range("batch_size", self.batch_size, 1, MAX_EXPERTS)
        _in_range("noise_multiplier", self.noise_multiplier, *NOISE_RANGE)
        _in_range("clip_norm", self.clip_norm, 0.0, MAX_CLIP, lo_open=True)
        _in_range("lr", self.lr, 0.0, MAX_LR, lo_open=True)
        _in_range("steps", self.steps, 0, MAX_STEPS)
        _in_range("steps_cap", self.steps_cap, 1, MAX_STEPS)
        _int_in("n_experts", self.n_experts, 1, MAX_EXPERTS)
        _in_range("actions", self.actions, 2, MAX_ACTIONS)
        if self.hidden is not None:
            sizes = self.hidden
            check(bool(sizes) and min(sizes) >= 1, "hidden", f"must be positive sizes, got {sizes}")
            check(
                max(sizes) <= MAX_WIDTH and len(sizes) <= MAX_LAYERS,
                "hidden",
                f"allows at most {MAX_LAYERS} layers of at most {MAX_WIDTH} units, got {sizes}",
            )
        _int_in("eval_episodes", self.eval_episodes, 1, MAX_EVAL_EPISODES)
        _in_range("eval_horizon", self.eval_horizon, 1, MAX_EVAL_HORIZON)
        _in_range("evals", self.evals, 1, MAX_EVALS)
        _in_range("eval_window", self.eval_window, 1, MAX_STEPS)
        _in_range("eval_seed", self.eval_seed, 0, MAX_SEED)
        _int_in("eval_seed_step", self.eval_seed_step, 1, MAX_SEED)
        for key in ("reference_return", "random_return"):
            value = getattr(self, key)
            check(value is None or math.isfinite(value), key, f"must be finite, got {value}")
        check(
            self.reference is None or self.reference_return is None,
            "reference",
            "and --reference-return: give one, not both",
        )


@dataclass(frozen=True)
class ExpertDpConfig(ExpertConfig):
    """`privrl train expert-dp`: consensus filter (ε1, δ1, T rounds) + Selective DP-SGD
    (ε2, δ2, private-step probability p)."""

    system = "expert-dp"
    epsilon: float = option(
        ..., "--epsilon", help="Total privacy budget ε of the run.", allow_nan=True
    )
    experts: Path | None = option(  # noqa: RUF009 - option() returns a field
        None,
        "--experts",
        help="Expert set (directory) of the data (default: the dataset's extra['experts_dir']).",
    )
    p: float | None = option(
        None,
        "--p",
        help="Probability of a private step on D_unst (default CQL 0.8, BCQ 0.5).",
        allow_nan=True,
    )
    filter_rounds: int | None = option(
        None,
        "--filter-rounds",
        "-T",
        help=f"Rounds T of the consensus filter (0 = no filter; default {DEFAULT_ROUNDS}).",
    )
    max_len: int | None = option(
        None,
        "--max-len",
        help=(
            "L, the longest trajectory the filter queries (public; default: the dataset's "
            "declared metadata.horizon; longer trajectories are truncated to L for the filter)."
        ),
    )
    p_min: float | None = option(
        None,
        "--p-min",
        help=f"Smallest action probability of experts (default {DEFAULT_P_MIN:g}).",
        allow_nan=True,
    )
    filter_calibration: Literal["paper", "tight", "pld"] = option(
        "paper",
        "--filter-calibration",
        help=(
            "paper (ε' = ε1/sqrt(32·T·ln(2/δ1))), tight (largest ε' within the exact "
            "advanced-composition bound) or pld (largest ε' within the PLD composition)."
        ),
    )
    filter_below: float = option(
        5.0,
        "--filter-below",
        help="Skip the filter (ε1 = 0) when ε is below this.",
        allow_nan=True,  # refused by validate as "must be finite"
    )
    eps1_fraction: float = option(0.75, "--eps1-fraction", help="ε1 / ε (filter).")
    eps2_fraction: float | None = option(
        None, "--eps2-fraction", help="ε2 / ε (DP-SGD); must add up to 1 with --eps1-fraction."
    )
    delta1_fraction: float = option(0.9, "--delta1-fraction", help="δ1 / δ (filter).")
    delta2_fraction: float | None = option(
        None, "--delta2-fraction", help="δ2 / δ; must add up to 1 with --delta1-fraction."
    )
    accounting: Literal["exact", "paper"] = option(
        "exact",
        "--accounting",
        help=(
            "exact (coins conditioned on, certified) or paper (q = p·b/m, NOT certified: the "
            "report says ε = ∞ and a ledger refuses it; the paper's ε is a comparison field)."
        ),
    )
    dp_sgd_budget: Literal["split", "joint"] = option(
        "split",
        "--dp-sgd-budget",
        help=(
            "split (the paper: DP-SGD's steps fit (ε2, δ2) alone) or joint (they fit the total "
            "(ε, δ) composed with the filter's rounds by the PLD accountant, so DP-SGD also "
            "gets the part of ε1 that the composition does not use)."
        ),
    )

    def validate(self) -> None:
        super().validate()
        if self.p is not None:
            ok = math.isfinite(self.p) and 0.0 <= self.p <= 1.0
            check(ok, "p", f"must be in [0, 1], got {self.p}")
        _in_range("filter_rounds", self.filter_rounds, 0, MAX_ROUNDS)
        _in_range("max_len", self.max_len, 1, MAX_LEN)
        _in_range("p_min", self.p_min, 0.0, 0.5, lo_open=True)
        check(
            math.isfinite(self.filter_below),
            "filter_below",
            f"must be finite, got {self.filter_below}",
        )


@dataclass(frozen=True)
class DpSgdConfig(ExpertConfig):
    """`privrl train dp-sgd`: expert-level DP-SGD (Algorithm 4), or its non-private twin."""

    system = "dp-sgd"
    epsilon: float | None = option(
        None,
        "--epsilon",
        help="Privacy budget ε of the run (not with --non-private).",
        allow_nan=True,
    )
    sampling: Literal["poisson", "shuffle"] = option(
        "poisson",
        "--sampling",
        help=(
            "poisson (certified) or shuffle (the paper's batches, NOT certified: the report "
            "says ε = ∞ and a ledger refuses it; the paper's ε is a comparison field)."
        ),
    )
    non_private: bool = option(
        False, "--non-private/", help="Train the non-private twin (ordinary minibatches)."
    )

    def validate(self) -> None:
        check(
            self.epsilon is not None or self.non_private,
            "epsilon",
            "is required (or --non-private for the non-private twin)",
        )
        check(
            self.epsilon is None or not self.non_private,
            "non_private",
            "takes no --epsilon: the twin is not private",
        )
        super().validate()


# ---------------------------------------------------------------------------------------------
# shared by both systems
# ---------------------------------------------------------------------------------------------


@dataclass
class _Common:
    """What `plan` resolved for both systems (carried to `load`/`run` in `Plan.facts`)."""

    params: Any  # PublicParameters, completed inside the guard
    meta: Any
    n_actions: int
    b: int
    cap: int
    sizes: tuple[int, ...]
    eval_info: dict[str, Any]
    ref: Reference


@dataclass
class _Loaded:
    dataset: Any
    obs_dim: int
    experts: Any = None


def _common(config: ExpertConfig, header: Any) -> _Common:
    """What both systems resolve from the header alone: the network's sizes, the evaluation
    and the score's references (the public parameters follow, in each system's order)."""
    from privrl.privacy.public import PublicParameters

    meta = header.metadata
    ref = reference_from(
        config.reference,
        config.reference_return,
        config.random_return,
        algo=config.algo,
        data=Path(header.path),
    )
    info = eval_setup(
        meta, episodes=config.eval_episodes, horizon=config.eval_horizon, no_eval=config.no_eval
    )
    params = PublicParameters()
    sizes = config.hidden
    if sizes is None:
        sizes = (512,) if meta.env_id is not None and "HIV" in meta.env_id else (256, 256)
    return _Common(
        params=params,
        meta=meta,
        n_actions=0,
        b=0,
        cap=0,
        sizes=tuple(sizes),
        eval_info=info,
        ref=ref.resolve(meta, info),
    )


def _steps_params(config: ExpertConfig, common: _Common) -> None:
    params = common.params
    common.cap = flag_or_default(params, "steps cap", config.steps_cap, DEFAULT_STEPS_CAP)
    if config.steps is not None:
        params.resolve("training steps N", flag=config.steps, fix="")


def _sampling_rate(common: _Common, m: int) -> None:
    check_batch(common.b, m)
    common.params.derive("sampling rate q", common.b / m, "b/m")


def _noise_params(config: ExpertConfig, common: _Common) -> tuple[float, float]:
    params = common.params
    z = flag_or_default(params, "noise multiplier σ", config.noise_multiplier, DEFAULT_NOISE)
    c = flag_or_default(params, "clipping norm C", config.clip_norm, DEFAULT_CLIP)
    return z, c


def _public(common: _Common, command: str) -> dict[str, Any]:
    """config.json beyond the config: the command and the resolved public values."""
    return {
        "command": command,
        "n_actions": common.n_actions,
        "batch_size": common.b,
        "steps_cap": common.cap,
        **common.eval_info,
    }


def _steps_spend(
    z: float, c: float, b: int, m: int, *, steps: int, delta: float, system: str
) -> Any:
    """The report of `steps` Poisson-sampled DP-SGD steps (rate b/m, noise z): what a run with
    a given step count spends, for the ledger check before the data are read."""
    from privrl.expert.dpsgd import build_report, dp_sgd_release

    release = dp_sgd_release(
        noise_multiplier=z,
        clip_norm=c,
        sampling_probability=b / m,
        steps=steps,
        batch_size=b,
        n_units=m,
        n_params=1,  # the network's size is not known before the data; ε does not depend on it
    )
    return build_report([release] if steps else [], float(delta), system=f"{system} (planned)")


@dataclass(frozen=True)
class _Bound:
    """What expert-dp's plan reserved: ε of the filter's T rounds composed with
    ``private_steps`` DP-SGD steps; ``exact`` when the run takes exactly that many (p ∈ {0, 1}),
    else an upper bound (the step coins decide how many of them are private)."""

    epsilon: float
    private_steps: int
    exact: bool


def _filter_calibration(
    config: ExpertDpConfig,
    common: _Common,
    split: Any,
    rounds: int,
    length: int | None,
    p_min: float,
) -> Any:
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
    common.params.derive(
        "filter ε'", calib.epsilon_prime, f"{config.filter_calibration} calibration"
    )
    common.params.derive("filter δ'", calib.delta_prime, "δ1/(2TL)")
    return calib


def _expert_dp_spend(
    config: ExpertDpConfig,
    common: _Common,
    split: Any,
    calib: Any,
    *,
    m: int,
    z: float,
    c: float,
    system: str,
) -> tuple[Any, _Bound]:
    """expert-dp's planned report, from public quantities only: the filter's T rounds (its
    calibration) composed with the most private DP-SGD steps the run can take
    (`privrl.expert.selective.private_steps_bound`: the step count within the budget, the cap
    or ``--steps``), as the finished run's report composes them. At p ∈ {0, 1} this is
    exactly what the run spends; at 0 < p < 1 the step coins (drawn at run time, independent
    of the data) make some of those steps non-private, so it is an upper bound."""
    from dp_accounting.dp_event import ComposedDpEvent

    from privrl.expert.dpsgd import build_report, dp_sgd_release
    from privrl.expert.selective import private_steps_bound

    releases = []
    if calib is not None:
        releases.append(calib.release(name="consensus filter (planned): T rounds"))
    joint = config.dp_sgd_budget == "joint" and split.filter and split.dp_sgd
    k, exact = 0, True
    if split.dp_sgd:
        prior = ComposedDpEvent([r.event for r in releases]) if joint else None
        k, exact = private_steps_bound(
            p=split.p,
            noise_multiplier=z,
            sampling_rate=common.b / m,
            epsilon=split.epsilon if joint else split.epsilon2,
            delta=split.delta if joint else split.delta2,
            steps=config.steps,
            steps_cap=common.cap,
            prior=prior,
        )
    if k:
        releases.append(
            dp_sgd_release(
                noise_multiplier=z,
                clip_norm=c,
                sampling_probability=common.b / m,
                steps=k,
                batch_size=common.b,
                n_units=m,
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
        releases, split.delta1 + split.delta2, system=f"{system} (planned)", notes=[note]
    )
    return report, _Bound(float(report.epsilon), k, exact)


def _load_dataset(source: Path, n_actions: int, *, units: bool = True) -> _Loaded:
    """The episodes (inside the guard), checked against the public schema (with `units`, the
    expert ids expert-level privacy needs)."""
    from privrl.data.io import load_hdf5

    dataset = load_hdf5(source)
    if units and dataset.unit_ids is None and dataset.metadata.extra.get("unit") == "episode":
        # imported with --unit episode: the header declares every episode its own expert (a
        # schema fact, not read off the data), so the expert ids are the episode indices
        fields = dataset._fields()
        fields["unit_ids"] = dataset.episode_unit_ids
        dataset = type(dataset)(**fields, metadata=dataset.metadata, validate=False)
    if units and dataset.unit_ids is None:
        raise ValueError(
            "the dataset has no expert ids (unit_ids is None): expert-level privacy needs the "
            "expert of every trajectory; import the data with --unit column=NAME (each "
            "episode's expert) or --unit episode (each episode its own expert)"
        )
    obs = np.asarray(dataset.observations)
    if obs.ndim != 2:
        raise ValueError(f"observations must be flat vectors, got shape {obs.shape[1:]}")
    actions = np.asarray(dataset.actions)
    if actions.ndim != 1 or actions.dtype.kind not in "iu":
        raise ValueError("CQL/BCQ need discrete actions (one integer index per step)")
    if actions.size and (int(actions.min()) < 0 or int(actions.max()) >= n_actions):
        raise ValueError(
            f"the data hold action indices outside the public action space 0..{n_actions - 1}; "
            "pass the right --actions A or fix the dataset"
        )
    return _Loaded(dataset, int(obs.shape[1]))


def _learner(config: ExpertConfig, common: _Common, obs_dim: int, seed: int) -> Any:
    from privrl.rl.bcq import DiscreteBCQ
    from privrl.rl.cql import DiscreteCQL

    cls = DiscreteCQL if config.algo == "cql" else DiscreteBCQ
    lr = DEFAULT_LR if config.lr is None else config.lr
    return cls(
        obs_dim,
        common.n_actions,
        hidden=common.sizes,
        lr=lr,
        seed=seed,
        obs_transform=obs_transform(common.meta.env_id),
    )


def _begin(config: ExpertConfig, data: _Loaded, ctx: RunContext) -> tuple[Any, _Common, Any, Any]:
    """What `run` starts from: the plan's facts, their common part, the public values, and a
    fresh learner for the data's observations."""
    assert ctx.plan is not None
    common: _Common = ctx.plan.facts["common"]
    learner = _learner(config, common, data.obs_dim, ctx.seed)
    return ctx.plan.facts, common, ctx.plan.public, learner


def _evaluator(config: ExpertConfig, common: _Common, seed: int) -> Any:
    """The greedy evaluation; evaluation k resets its environments from seed
    ``eval_seed + k·eval_seed_step`` (default ``eval_seed``: the run's seed)."""
    first = seed if config.eval_seed is None else config.eval_seed
    return evaluator(common.meta, common.eval_info, first, step=config.eval_seed_step)


@functools.cache
def _hiv_log_stats() -> tuple[np.ndarray, np.ndarray]:
    """Public HIV simulator statistics (8 s to simulate; once per process)."""
    from privrl.envs.hiv import log_state_statistics

    return log_state_statistics()  # public simulator rollouts, no private data


def obs_transform(env_id: str | None) -> Any:
    """The learner's observation transform: HIV's log10 scaled by public simulator statistics,
    else the identity."""
    from privrl.rl.discrete_common import ObsTransform

    if env_id is not None and "HIV" in env_id:
        mean, std = _hiv_log_stats()
        return ObsTransform(
            log10=True,
            loc=tuple(float(v) for v in mean),
            scale=tuple(float(v) for v in std),
            source="log10 + public HIV simulator statistics",
        )
    return ObsTransform()


def _progress(ctx: RunContext, label: str) -> Any:
    def update(step: int, total: int) -> None:
        if step % 100 == 0 or step == total:
            ctx.progress(label, step, total)

    return update


def _result(
    training: Any,
    report: Any,
    *,
    extra: dict[str, Any],
    ref: Reference,
    title: str,
) -> Result:
    """metrics.json, metrics.csv, learner.pt (+ learner.json), the learning curve's plot and
    the console line of a finished run."""
    from privrl.expert.dpsgd import paper_accounting_epsilon

    metrics: dict[str, Any] = {
        "steps": training.steps,
        "private_steps": training.private_steps,
        "epsilon": report.epsilon,
        "delta": report.delta,
        "private": report.private,
        **extra,
    }
    paper = paper_accounting_epsilon(report.releases, report.delta)
    if paper is not None:
        # the paper's accounting, for comparison only: this run is NOT certified (ε = ∞)
        metrics["epsilon_paper_accounting"] = paper
    if training.return_mean is not None:
        metrics["return_mean"] = training.return_mean
        metrics["return_std"] = training.return_std
        metrics.update(ref.score(training.return_mean))
    line = f"steps = {metrics['steps']} ({metrics['private_steps']} private)"
    if "return_mean" in metrics:
        line += f"; return = {metrics['return_mean']:.2f} ± {metrics['return_std']:.2f}"
    if "normalised_score" in metrics:
        line += f"; normalised score = {metrics['normalised_score']:.3f}"
        if metrics.get("reference_return_outside_guarantee"):
            line += " (evaluation-only: outside the guarantee)"
    learner = training.learner
    curve = training.curve

    def save_learner(path: Path) -> None:
        import torch

        torch.save(learner.state_dict(), path)

    return Result(
        metrics=metrics,
        privacy=report,
        curve=curve or [{"step": training.steps, "private_steps": training.private_steps}],
        artifacts={"learner.pt": save_learner, "learner.json": learner.config()},
        plots={"learning_curve": lambda path: _plot(path, curve, title)},
        summary=[line],
    )


def _finish_report(report: Any, params: Any, ref: Reference) -> Any:
    """The run's report with its public parameters and, when the normalised score uses a twin
    trained on the same data, the note that the score is outside the guarantee."""
    report = report.with_public_parameters(params)
    if ref.outside_guarantee:
        report.notes.append(REFERENCE_NOTE)
    return report


def _plot(path: Path, curve: list[dict[str, Any]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    pts = [r for r in curve if "return_mean" in r]
    if pts:
        x = np.array([r["step"] for r in pts])
        y = np.array([r["return_mean"] for r in pts])
        s = np.array([r["return_std"] for r in pts])
        ax.plot(x, y, "o-", ms=3, label="greedy return (mean over episodes)")
        ax.fill_between(x, y - s, y + s, alpha=0.2)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no evaluation", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("training step")
    ax.set_ylabel("return")
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# expert-dp: consensus filter + Selective DP-SGD
# ---------------------------------------------------------------------------------------------


class ExpertDp(System):
    """Consensus filter + Selective DP-SGD (Sharma et al.): expert-level (ε, δ)-DP.

    The filter (Algorithm 2, budget ε1, δ1) releases stable trajectory prefixes; training
    (Algorithm 3) takes a private DP-SGD step on the rest with probability p (budget ε2, δ2),
    else an ordinary step on the stable prefixes. Protects one expert with all their
    trajectories (add/remove).
    """

    name = "expert-dp"
    Config = ExpertDpConfig
    data = "required"
    summary = "Consensus filter + Selective DP-SGD (Sharma et al.): expert-level (ε, δ)-DP."

    def plan(self, config: ExpertDpConfig, header: Any) -> Plan:
        from privrl.expert.dpsgd import uncertified_plan
        from privrl.expert.selective import PAPER_NOT_CERTIFIED, effective_split, split_budget

        meta = header.metadata
        experts = expert_set_path(config.experts, Path(header.path), meta)
        common = _common(config, header)
        params = common.params
        m = resolve_experts(params, config.n_experts, meta)
        delta = resolve_delta(params, config.delta, m)
        common.n_actions = resolve_actions(params, config.actions, meta)
        epsilon = params.resolve("ε", flag=config.epsilon, fix="pass --epsilon")
        common.b = flag_or_default(
            params, "expected batch size b", config.batch_size, DEFAULT_BATCH
        )
        _sampling_rate(common, m)
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
        length = None
        if split.filter:
            length = params.resolve(
                "maximum trajectory length L",
                flag=config.max_len,
                metadata=meta,
                key="horizon",
                fix="pass --max-len L, the longest trajectory the data may hold",
                detail="sets δ' = δ1/(2TL) and the threshold shift; longer trajectories truncated",
            )
            if not isinstance(length, int) or length < 1:
                raise ValueError(f"the maximum trajectory length L must be >= 1, got {length!r}")
            if pm * common.n_actions > 1:
                raise ConfigError("p_min", f"{pm:g} is above 1/|A| = {1 / common.n_actions:.4g}")
        z, c = _noise_params(config, common)
        _steps_params(config, common)
        uncertified = config.accounting == "paper" and split.dp_sgd and 0.0 < split.p < 1.0
        system = "expert-consensus + selective-dp-sgd"
        calib = None
        if uncertified:
            planned, bound = uncertified_plan(system, PAPER_NOT_CERTIFIED), None
        else:
            calib = _filter_calibration(config, common, split, rounds, length, pm)
            planned, bound = _expert_dp_spend(
                config, common, split, calib, m=m, z=z, c=c, system=system
            )
        public = {
            **_public(common, "privrl train expert-dp"),
            "experts": str(experts),
            "n_experts": m,
            "epsilon": epsilon,
            "delta": delta,
            "split": split.to_dict(),
            "filter_rounds": rounds,
            "max_len": length,
            "p_min": pm,
            "noise_multiplier": z,
            "clip_norm": c,
        }
        facts = {
            "common": common,
            "experts": experts,
            "m": m,
            "p": p,
            "split": split,
            "rounds": rounds,
            "length": length,
            "z": z,
            "c": c,
            "bound": bound,
        }
        return Plan(report=planned, public=public, facts=facts)

    def load(self, config: ExpertDpConfig, source: Path | None, plan: Plan, rng: Any) -> _Loaded:
        from privrl.expert.experts import load_experts

        f = plan.facts
        common: _Common = f["common"]
        assert source is not None
        loaded = _load_dataset(source, common.n_actions)
        expert_set = load_experts(f["experts"])  # the experts' policies are private
        if int(expert_set.n_actions) != common.n_actions:
            raise ConfigError(
                "experts",
                f"hold experts with {expert_set.n_actions} actions but the data have "
                f"{common.n_actions}; use the expert set that produced this dataset",
            )
        if int(expert_set.obs_dim) != loaded.obs_dim:
            raise ConfigError(
                "experts",
                f"hold experts taking observations of dimension {expert_set.obs_dim} but the "
                f"data have {loaded.obs_dim}; use the expert set that produced this dataset",
            )
        loaded.experts = expert_set
        return loaded

    def run(self, config: ExpertDpConfig, data: _Loaded, rng: Any, ctx: RunContext) -> Result:
        from privrl.expert.selective import train_expert_dp

        f, common, public, learner = _begin(config, data, ctx)
        result = train_expert_dp(
            learner,
            data.dataset,
            data.experts,
            n_units=f["m"],
            epsilon=public["epsilon"],
            delta=public["delta"],
            p=f["p"],
            rounds=f["rounds"],
            p_min=public["p_min"],
            max_len=f["length"],
            split=f["split"],
            batch_size=common.b,
            noise_multiplier=f["z"],
            clip_norm=f["c"],
            steps=config.steps,
            steps_cap=common.cap,
            accounting=config.accounting,
            rng=rng,
            noise=ctx.noise,
            evaluate=_evaluator(config, common, ctx.seed),
            n_evals=config.evals,
            eval_window=config.eval_window,
            progress=_progress(ctx, f"expert-dp {config.algo}"),
            filter_calibration=config.filter_calibration,
            dp_sgd_budget=config.dp_sgd_budget,
        )
        training = result.training
        common.params.derive(
            "private DP-SGD steps K",
            training.private_steps,
            "from the budget by the PLD accountant (or --steps), with the public step coins",
        )
        common.params.derive("training steps", training.steps, "the public step coins up to step K")
        report = _finish_report(result.report, common.params, common.ref)
        bound = f["bound"]
        if bound is not None and not bound.exact:
            report.notes.append(
                f"the ledger reserved ε = {bound.epsilon:.6g} for up to {bound.private_steps} "
                f"private steps (the public upper bound at p = {result.split.p:g}); the step "
                f"coins, drawn independently of the data, gave {training.private_steps}, so "
                f"this run spends ε = {report.epsilon:.6g}"
            )
        training.report = report  # the run's total report (filter + DP-SGD)
        extra = {
            "algorithm": f"expert-dp {config.algo}",
            "stable_size": result.stable_size,
            "filter_calibration": config.filter_calibration,
            "dp_sgd_budget": config.dp_sgd_budget,
            "epsilon1": result.split.epsilon1,
            "epsilon2": result.split.epsilon2,
            "p": result.split.p,
        }
        # the filter's public output: counts of the released prefixes (post-processing)
        for key in ("released_trajectories", "released_transitions"):
            if key in result.filter_summary:
                extra[key] = result.filter_summary[key]
        title = f"expert-dp {config.algo} (ε = {public['epsilon']:g})"
        return _result(training, report, extra=extra, ref=common.ref, title=title)


# ---------------------------------------------------------------------------------------------
# dp-sgd: expert-level DP-SGD (Algorithm 4) and its non-private twin
# ---------------------------------------------------------------------------------------------


class DpSgd(System):
    """Expert-level DP-SGD (Sharma et al., Algorithm 4), the paper's baseline.

    Each step Poisson-samples experts (rate b/m), takes one transition of each, clips the
    per-example gradients to C, adds N(0, σ²C²) and divides by b; steps until ε is spent.
    """

    name = "dp-sgd"
    Config = DpSgdConfig
    data = "required"
    summary = "Expert-level DP-SGD (Sharma et al., Algorithm 4), the paper's baseline."

    def plan(self, config: DpSgdConfig, header: Any) -> Plan:
        from privrl.expert.dpsgd import (
            RELATION,
            SHUFFLE_NOT_CERTIFIED,
            UNIT,
            plan_steps,
            uncertified_plan,
        )
        from privrl.privacy.report import PrivacyReport

        common = _common(config, header)
        params = common.params
        common.n_actions = resolve_actions(params, config.actions, header.metadata)
        common.b = flag_or_default(params, "batch size b", config.batch_size, DEFAULT_BATCH)
        _steps_params(config, common)
        system = "expert-dp-sgd"
        m = epsilon = delta = z = c = None
        n_steps, capped = (config.steps if config.steps is not None else common.cap), False
        if config.non_private:
            planned = PrivacyReport.non_private(
                UNIT, RELATION, system=f"{system} (non-private twin)"
            )
            delta = config.delta
        else:
            m = resolve_experts(params, config.n_experts, header.metadata)
            delta = resolve_delta(params, config.delta, m)
            epsilon = params.resolve("ε", flag=config.epsilon, fix="pass --epsilon")
            _sampling_rate(common, m)
            z, c = _noise_params(config, common)
            # the step count from public parameters only, before the ledger check: --steps N
            # (refused above the budget), else the largest N within (ε, δ), at most the cap
            n_steps, capped = plan_steps(
                noise_multiplier=z,
                sampling_probability=common.b / m,
                epsilon=epsilon,
                delta=delta,
                steps=config.steps,
                steps_cap=common.cap,
            )
            params.derive(
                "private steps N",
                n_steps,
                "--steps"
                if config.steps is not None
                else "largest count within (ε, δ) at most the steps cap, PLD accountant",
            )
            if config.sampling == "shuffle":
                planned = uncertified_plan(system, SHUFFLE_NOT_CERTIFIED)
            else:  # the ledger checks what the N steps spend, not the ε ceiling
                planned = _steps_spend(z, c, common.b, m, steps=n_steps, delta=delta, system=system)
        public = {
            **_public(common, "privrl train dp-sgd"),
            "epsilon": epsilon,
            "delta": delta,
            "n_experts": m,
            "noise_multiplier": z,
            "clip_norm": c,
        }
        facts = {"common": common, "m": m, "n_steps": n_steps, "capped": capped}
        return Plan(report=planned, public=public, facts=facts)

    def load(self, config: DpSgdConfig, source: Path | None, plan: Plan, rng: Any) -> _Loaded:
        common: _Common = plan.facts["common"]
        assert source is not None
        # the non-private twin needs no expert ids: it trains on all transitions
        return _load_dataset(source, common.n_actions, units=not config.non_private)

    def run(self, config: DpSgdConfig, data: _Loaded, rng: Any, ctx: RunContext) -> Result:
        from privrl.expert.dpsgd import expert_dp_sgd

        f, common, public, learner = _begin(config, data, ctx)
        z, c = public["noise_multiplier"], public["clip_norm"]
        result = expert_dp_sgd(
            learner,
            data.dataset,
            epsilon=public["epsilon"],
            delta=0.0 if public["delta"] is None else public["delta"],
            batch_size=common.b,
            noise_multiplier=DEFAULT_NOISE if z is None else z,
            clip_norm=DEFAULT_CLIP if c is None else c,
            steps=f["n_steps"],
            steps_cap=common.cap,
            n_units=f["m"],
            sampling=config.sampling,
            private=not config.non_private,
            rng=rng,
            noise=ctx.noise,
            evaluate=_evaluator(config, common, ctx.seed),
            n_evals=config.evals,
            eval_window=config.eval_window,
            progress=_progress(ctx, f"dp-sgd {config.algo}"),
        )
        if f["capped"]:
            result.report.notes.append(
                f"the step count was capped at {f['n_steps']}: the budget ε = "
                f"{public['epsilon']} is not spent"
            )
        report = _finish_report(result.report, common.params, common.ref)
        name = "non-private" if config.non_private else "expert-dp-sgd"
        extra = {"algorithm": f"{name} {config.algo}", "stable_size": 0}
        title = f"{'non-private' if config.non_private else 'DP-SGD'} {config.algo}"
        if not config.non_private:
            title += f" (ε = {public['epsilon']:g})"
        return _result(result, report, extra=extra, ref=common.ref, title=title)
