"""DP-APVI and APVI (Qiao & Wang; Yin & Wang 2021) on the run layer: offline RL in tabular MDPs.

`privrl train dp-apvi | apvi` and `privrl run` (system "dp-apvi" / "apvi") build these configs.
Data come from a native HDF5 dataset (`--data FILE`) or are sampled from a random tabular MDP
(`--env random-tabular --episodes N`), in which case the exact suboptimality of the learned
policy is reported. The algorithm is `privrl.offline.apvi.dp_apvi`; this module only adapts.

Public parameters. H, S, A, the budget, δ and the reward range set the noise, so they are
public (`privrl.privacy.public.PublicParameters`): a flag, the dataset's metadata (unless it
marks them as inferred from the data, as `privrl data import` does when it guessed the
spaces) or a default — never the data. privacy.json lists each with its source. The number of
trajectories n comes from the file's header: it is public under replace-one neighbours.

Order of work with `--data` (the run layer's): the file's header only → `plan` (public
parameters, the planned report, the public reward table) → the dataset's ledger reserves the
spend → `load` reads the episodes → `run` → the run directory, staged and published, then the
reservation is completed.

Data are fitted to the public H, S, A by fixed rules (`privrl.offline.common`: longer
episodes truncated to H, steps outside the spaces not counted, rewards clipped to [0, 1]),
never refused by a value of the data. A private run refuses a dataset with a unit_ids field
(a schema decision: these systems protect one trajectory, not a unit of several).

Two δ's, kept apart on purpose: `--delta` is the paper's *utility* failure probability (it
sets the error bound E and ι, hence how pessimistic the learner is), `--privacy-delta` is the δ
at which the zCDP guarantee is stated as (ε, δ). Tying them would invite a large privacy δ
to shrink the bonuses.

Shared with `privrl.systems.linear`: `check_budget`, `check_positive`, `seed_streams`;
with every system on a replace-one dataset: `header_trajectories`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np

from privrl.config import ConfigError, RunConfig, check, option
from privrl.runs.layer import OMIT
from privrl.runs.system import Plan, Result, RunContext, System

ENVS = ("random-tabular",)
# Largest array a run builds (H·S²·A transition counts, n·(H+1) sampled steps): 5e7
# float64 entries are 400 MB, and the pipeline holds a few such arrays at once.
MAX_ENTRIES = 50_000_000
# ρ and ε outside this range make the run numerically meaningless (σ or b overflow, or no
# noise at all); a budget above it is no privacy (use the non-private twin).
BUDGET_RANGE = (1e-6, 1e6)
DEFAULT_PRIVACY_DELTA = 1e-6
DEFAULT_UTILITY_DELTA = 0.1
ENV_DEFAULTS = {"horizon": 10, "states": 10, "actions": 5}


# ---------------------------------------------------------------------------------------------
# shared with privrl.systems.linear
# ---------------------------------------------------------------------------------------------


def check_budget(value: float, key: str, twin: str) -> None:
    """A budget (ρ or ε) in `BUDGET_RANGE` (NaN refused too); `twin` is the non-private
    system named when the budget is too large to mean anything."""
    lo, hi = BUDGET_RANGE
    if not lo <= value <= hi:
        hint = f" (for no privacy use `{twin}`)" if value > hi else ""
        raise ConfigError(
            key,
            f"must be in [{lo:g}, {hi:g}], got {value:g}: outside it the noise is "
            f"numerically meaningless{hint}",
        )


def check_nonnegative(config: RunConfig, *keys: str) -> None:
    """Each of `keys` is finite and >= 0."""
    for key in keys:
        value = getattr(config, key)
        check(math.isfinite(value) and value >= 0, key, f"must be finite and >= 0, got {value}")


def check_positive(config: RunConfig, *keys: str) -> None:
    """Each of `keys` is unset or >= 1."""
    for key in keys:
        value = getattr(config, key)
        check(value is None or value >= 1, key, f"must be >= 1, got {value}")


def header_trajectories(
    params: Any,
    name: str,
    header: Any,
    detail: str = "the file's header; fixed under replace-one neighbours",
) -> int:
    """The header's episode count as a public parameter (replace-one neighbours have the
    same count; under add/remove it is not public and is never asked for)."""
    from privrl.privacy.public import Source

    return params.given(name, int(header.n_episodes), Source.METADATA, detail)


def seed_streams(rng: np.random.Generator, n: int) -> list[np.random.SeedSequence]:
    """`n` independent streams spawned from the run's seed (the layer seeds `rng` with
    `default_rng(seed)`; these are the children of `SeedSequence(seed)`, as the commands
    spawned them before the run layer: same seed, same numbers)."""
    return np.random.SeedSequence(rng.bit_generator.seed_seq.entropy).spawn(n)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------------------------


def stationary_option(what: str) -> Any:
    """The ``--stationary`` flag of the tabular and linear learners (one wording for both):
    `what` says what is pooled. Pooling is `privrl.data.padding.step_rows`; the noise is
    calibrated to the H entries one trajectory adds to a pooled statistic
    (`privrl.data.padding.entries_per_trajectory`)."""
    return option(
        False,
        "--stationary",
        help=f"One transition model for every step h ({what}; the noise is calibrated to a "
        "trajectory's H entries in one pooled statistic, H the declared horizon).",
    )


@dataclass(frozen=True)
class ApviConfig(RunConfig):
    """APVI's settings (DP-APVI adds the budget); H, S, A default to the metadata's."""

    system = "apvi"
    env: str | None = option(None, "--env", help="Sample the data instead: 'random-tabular'.")
    episodes: int | None = option(
        None, "--episodes", "-n", help="Trajectories to sample (with --env)."
    )
    horizon: int | None = option(
        None,
        "--horizon",
        "-H",
        help="Horizon H (with --data: this flag or the dataset's metadata, never the longest "
        "episode; longer episodes are truncated to H, terminated shorter ones padded (see "
        "--padding). Default 10 with --env).",
    )
    states: int | None = option(
        None,
        "--states",
        "-S",
        help="Number of states (default: 10 with --env; with --data the metadata's Discrete "
        "space, unless it was inferred from the data).",
    )
    actions: int | None = option(
        None,
        "--actions",
        "-A",
        help="Number of actions (default: 5 with --env; with --data the metadata's Discrete "
        "space, unless it was inferred from the data).",
    )
    bonus: Literal["bernstein", "hoeffding"] = option(
        "bernstein", "--bonus", help="Pessimism bonus."
    )
    bonus_scale: float = option(
        1.0,
        "--bonus-scale",
        help="Multiplier of the bonus (1 = theory constants C1=√2, C2=16).",
        allow_nan=True,
    )
    delta: float | None = option(
        None,
        "--delta",
        help="Utility failure probability δ in E and ι, default 0.1 (not a privacy parameter).",
        allow_nan=True,
    )
    reward_table: Path | None = option(  # noqa: RUF009 - option() builds a field
        None,
        "--reward-table",
        help="Public mean reward r_h(s,a): a .npy array [H, S, A] in [0, 1].",
    )
    padding: Literal["absorbing", "none"] = option(
        "absorbing",
        "--padding",
        help="With --data: 'absorbing' pads a terminated episode shorter than H with an "
        "absorbing state (reward 0) to H steps; 'none' counts only the steps it has. Episodes "
        "cut without termination are never padded.",
    )
    stationary: bool = stationary_option("counts pooled over h into one table")

    def validate(self) -> None:
        check_nonnegative(self, "bonus_scale")
        check(
            self.delta is None or 0 < self.delta < 1,
            "delta",
            f"(utility failure probability) must be in (0, 1), got {self.delta}",
        )
        check_positive(self, "episodes", "horizon", "states", "actions")


@dataclass(frozen=True)
class DpApviConfig(ApviConfig):
    """DP-APVI: APVI's settings plus exactly one budget (ρ-zCDP or ε-DP)."""

    system = "dp-apvi"
    rho: float | None = option(
        None, "--rho", help="zCDP budget ρ (Gaussian noise).", allow_nan=True
    )
    epsilon: float | None = option(
        None, "--epsilon", help="Pure-DP budget ε (Laplace noise).", allow_nan=True
    )
    privacy_delta: float | None = option(
        None,
        "--privacy-delta",
        help="δ at which the zCDP guarantee is stated as (ε, δ), default 1e-6 (--rho only).",
        allow_nan=True,
    )
    privatize_rewards: bool = option(
        False,
        "--privatize-rewards",
        help="Release noisy reward sums too (the budget is split over 3 count families).",
    )

    def validate(self) -> None:
        check(
            (self.rho is None) != (self.epsilon is None),
            "rho",
            "or --epsilon: give exactly one of --rho (zCDP, Gaussian noise) or --epsilon (pure "
            "DP, Laplace noise)" + ("" if self.rho is None else ", not both"),
        )
        if self.rho is not None:
            check_budget(self.rho, "rho", "apvi")
            check(
                self.privacy_delta is None or 0 < self.privacy_delta < 1,
                "privacy_delta",
                f"must be in (0, 1), got {self.privacy_delta}",
            )
        else:
            # (ε's range is checked by `RunConfig` for every system: `privrl.privacy.limits`)
            check(
                self.privacy_delta is None,
                "privacy_delta",
                "is for --rho; --epsilon is pure ε-DP (δ = 0)",
            )
        super().validate()


# ---------------------------------------------------------------------------------------------
# systems
# ---------------------------------------------------------------------------------------------


class _Sampled(NamedTuple):
    """Episodes sampled from a random MDP (with --env), with the MDP for exact metrics."""

    episodes: Any
    mdp: Any
    min_prob: float


class ApviSystem(System):
    name = "apvi"
    Config = ApviConfig
    data = "optional"
    summary = "APVI (Yin & Wang 2021): the NON-PRIVATE baseline — DP-APVI's code with no noise."
    help = """APVI (Yin & Wang 2021): the NON-PRIVATE baseline — DP-APVI's code with no noise.

    Its privacy.json says it is not private (ε = ∞). A dataset with a ledger refuses it.
    Without --reward-table the rewards are the empirical means of the data.
    """

    def privacy(self, config: Any, params: Any) -> Any:
        """The `PrivacyConfig` (None: the non-private baseline), recorded in `params`."""
        return None

    def plan(self, config: Any, header: Any) -> Plan:
        from privrl.offline.apvi import APVIConfig, config_dict
        from privrl.privacy.public import PublicParameters, Source

        params = PublicParameters()
        privacy = self.privacy(config, params)
        if (header is None) == (config.env is None):
            raise ValueError("give exactly one data source: --data FILE or --env random-tabular")
        delta = params.resolve(
            "utility failure probability δ_u",
            flag=config.delta,
            default=DEFAULT_UTILITY_DELTA,
            fix="pass --delta",
            detail="in E and ι = log(HSA/δ_u); not a privacy parameter",
        )
        params.given("reward range", [0.0, 1.0], Source.DEFAULT, "rewards are clipped to [0, 1]")
        apvi_config = APVIConfig(bonus=config.bonus, bonus_scale=config.bonus_scale, delta=delta)
        privatize = privacy is not None and privacy.privatize_rewards
        if header is None:
            H, S, A, n = _env_sizes(config, params)
            reward = None
            source = {
                "env": config.env,
                "episodes": n,
                "behaviour": f"full support, π_h(a|s) ≥ {0.25 / A:g} (0.25/A)",
                "reward": "private (noisy sums)" if privatize else "public (the MDP's mean reward)",
            }
            reward_given = not privatize
        else:
            H, S, A, n, reward = _data_sizes(config, header, params, privacy)
            source = {
                "data": str(header.path),
                "episodes": n,
                "reward": (
                    f"public table {config.reward_table}"
                    if config.reward_table is not None
                    else "private (noisy sums)"
                    if privatize
                    else "empirical mean (non-private)"
                ),
            }
            reward_given = reward is not None
        padding = "none" if header is None else config.padding
        S_model = S + 1 if padding == "absorbing" else S
        if padding == "absorbing":
            params.derive(
                "states in the model S + 1", S_model, "S declared states + 1 absorbing state"
            )
            _check_sizes(H, S_model, A, n)  # the padded model's arrays (public sizes)
        report = _planned_report(
            self.name,
            (H, S_model, A),
            privacy,
            apvi_config,
            reward_given,
            params,
            stationary=config.stationary,
        )
        public = {
            "data": OMIT,  # published as source.data
            "command": f"privrl train {self.name}",
            "algorithm": self.name,
            "source": source,
            "horizon": H,
            "states": S,
            "actions": A,
            "padding": padding,
            "stationary": config.stationary,
            **config_dict(apvi_config, privacy),
        }
        facts = {
            "sizes": (H, S, A),
            "n": n,
            "params": params,
            "privacy": privacy,
            "apvi": apvi_config,
            "reward": reward,
            "padding": padding,
            "stationary": config.stationary,
        }
        return Plan(report=report, public=public, facts=facts)

    def load(self, config: Any, source: Path | None, plan: Plan, rng: np.random.Generator) -> Any:
        if source is not None:
            return super().load(config, source, plan, rng)
        from privrl.envs.tabular import TabularMDP, behaviour_policy_full_support

        H, S, A = plan.facts["sizes"]
        min_prob = 0.25 / A
        mdp_seed, behaviour_seed, data_seed, _ = seed_streams(rng, 4)
        mdp = TabularMDP.random(S, A, H, rng=np.random.default_rng(mdp_seed))
        behaviour = behaviour_policy_full_support(
            np.random.default_rng(behaviour_seed), H, S, A, min_prob
        )
        episodes = mdp.sample_arrays(
            behaviour, plan.facts["n"], rng=np.random.default_rng(data_seed)
        )
        return _Sampled(episodes, mdp, min_prob)

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        from privrl.offline.apvi import dp_apvi

        assert ctx.plan is not None
        facts = ctx.plan.facts
        H, S, A = facts["sizes"]
        privacy = facts["privacy"]
        sampled = isinstance(data, _Sampled)
        noise_rng = ctx.noise.generator("dp-apvi") if privacy is not None else None
        if sampled:
            privatize = privacy is not None and privacy.privatize_rewards
            reward = None if privatize else data.mdp.R
        else:
            reward = facts["reward"]
        result = dp_apvi(
            data.episodes if sampled else data,
            horizon=H,
            n_states=S,
            n_actions=A,
            privacy=privacy,
            config=facts["apvi"],
            reward=reward,
            rng=noise_rng,
            padding=facts["padding"],
            stationary=facts["stationary"],
        )
        result.report.with_public_parameters(facts["params"])
        extra: dict[str, float] = {}
        if sampled:
            v_star = data.mdp.optimal_value()
            v_pi = float(data.mdp.value(result.policy.actions))
            extra = {
                "suboptimality": v_star - v_pi,
                "optimal_value": v_star,
                "policy_value": v_pi,
                "pessimistic_value": float(data.mdp.d1 @ result.values.V[0]),
            }
        metrics = _metrics(result, private=privacy is not None, extra=extra)
        return Result(
            metrics=metrics,
            privacy=result.report,
            curve=result.per_step,
            artifacts={"policy.npz": result.policy.save},
            plots={
                "value_per_step": partial(_plot_values, per_step=result.per_step, algo=self.name),
                "bonus_heatmap": partial(
                    _plot_bonus,
                    bonus=result.values.bonus,
                    known=result.model.known,
                    algo=self.name,
                ),
            },
            summary=_summary(self.name, (H, S, A, facts["n"]), result, metrics),
        )


class DpApviSystem(ApviSystem):
    name = "dp-apvi"
    Config = DpApviConfig
    summary = "DP-APVI (Qiao & Wang, Algorithm 1): pessimistic value iteration on private counts."
    help = """DP-APVI (Qiao & Wang, Algorithm 1): pessimistic value iteration on private counts.

    Protects one whole trajectory under replace-one neighbours: ρ-zCDP with --rho (Gaussian
    noise σ² = 2H/ρ on the counts), or ε-DP with --epsilon (Laplace(4H/ε)). With --data the
    rewards are private: pass --reward-table (a public reward function) or --privatize-rewards.

    Examples:

      privrl train dp-apvi --env random-tabular --episodes 20000 --rho 1

      privrl train dp-apvi --data trips.h5 -H 10 --rho 1 --privatize-rewards
    """

    def privacy(self, config: Any, params: Any) -> Any:
        """The PrivacyConfig of `dp-apvi`, its budget and δ recorded as public parameters."""
        from privrl.offline.apvi import PrivacyConfig
        from privrl.privacy.public import Source

        if config.rho is not None:
            rho = params.resolve("zCDP budget ρ", flag=config.rho, fix="pass --rho")
            report_delta = params.resolve(
                "privacy δ",
                flag=config.privacy_delta,
                default=DEFAULT_PRIVACY_DELTA,
                fix="pass --privacy-delta",
                detail="the δ at which ρ-zCDP is stated as (ε, δ)",
            )
            return PrivacyConfig.gaussian(
                rho, privatize_rewards=config.privatize_rewards, report_delta=report_delta
            )
        epsilon = params.resolve("pure-DP budget ε", flag=config.epsilon, fix="pass --epsilon")
        params.given("privacy δ", 0.0, Source.DEFAULT, "pure ε-DP (Laplace noise)")
        return PrivacyConfig.laplace(epsilon, privatize_rewards=config.privatize_rewards)


# ---------------------------------------------------------------------------------------------
# plan: public sizes, the reward table and the planned report (never the episodes)
# ---------------------------------------------------------------------------------------------


def _check_sizes(H: int, S: int, A: int, n: int) -> None:
    """Refuse, before any work, sizes whose arrays cannot fit (all public)."""
    if H * S * S * A > MAX_ENTRIES:
        raise ValueError(
            f"H·S²·A transition counts (H={H}, S={S}, A={A}) exceed the limit of "
            f"{MAX_ENTRIES:.0e} entries (memory); use fewer states, actions or steps"
        )
    if n * (H + 1) > MAX_ENTRIES:
        raise ValueError(
            f"n·(H+1) steps (n={n} trajectories, H={H}) exceed the limit of {MAX_ENTRIES:.0e} "
            "entries (memory); use fewer trajectories or a shorter horizon"
        )


def _env_sizes(config: Any, params: Any) -> tuple[int, int, int, int]:
    """H, S, A and n of a sampled run (flags or the simulated MDP's defaults)."""
    if config.env not in ENVS:
        raise ValueError(f"unknown --env {config.env!r}; available: {', '.join(ENVS)}")
    check(
        config.episodes is not None,
        "env",
        "needs --episodes N (how many trajectories to sample)",
    )
    check(
        config.reward_table is None,
        "reward_table",
        "is for --data (the environment's reward is known)",
    )
    why = "the simulated MDP's size (a public choice)"
    H, S, A = (
        params.resolve(name, flag=flag, default=ENV_DEFAULTS[key], fix="", detail=why)
        for name, flag, key in (
            ("horizon H", config.horizon, "horizon"),
            ("number of states S", config.states, "states"),
            ("number of actions A", config.actions, "actions"),
        )
    )
    n = params.resolve("number of trajectories n", flag=config.episodes, fix="pass --episodes N")
    _check_sizes(H, S, A, n)
    return H, S, A, n


def _data_sizes(
    config: Any, header: Any, params: Any, privacy: Any
) -> tuple[int, int, int, int, np.ndarray | None]:
    """H, S, A, n and the public reward table of a run on a dataset (header only)."""
    check(config.episodes is None, "episodes", "is for --env (a dataset has its own episodes)")
    privatize = privacy is not None and privacy.privatize_rewards
    if privacy is not None and config.reward_table is None and not privatize:
        raise ValueError(
            "the rewards in --data are private: pass --reward-table FILE.npy (a public mean "
            "reward r_h(s,a)) or --privatize-rewards (spends part of the budget on reward sums)"
        )
    if privatize and config.reward_table is not None:
        raise ValueError("give --reward-table or --privatize-rewards, not both")
    H, S, A, n = _public_sizes(config, header, params)
    if n < 1:
        raise ValueError(f"the dataset {header.path} has no episodes")
    _check_sizes(H, S, A, n)
    return H, S, A, n, _load_reward(config.reward_table, H, S, A)


def _discrete_n(space: Any) -> int | None:
    """n of a Discrete(n) space starting at 0 (what S or A can be read from), else None."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete) and int(space.start) == 0:
        return int(space.n)
    return None


def _public_sizes(config: Any, header: Any, params: Any) -> tuple[int, int, int, int]:
    """H, S, A and n from flags and the file's header only (never from the episodes)."""
    from gymnasium import spaces

    from privrl.privacy.public import inferred_fields

    meta = header.metadata
    inferred = set(inferred_fields(meta))
    view = {
        "horizon": meta.horizon,
        "observation_space": _discrete_n(meta.observation_space),
        "action_space": _discrete_n(meta.action_space),
        "extra": meta.extra,
    }
    H = params.resolve(
        "horizon H",
        flag=config.horizon,
        metadata=view,
        key="horizon",
        fix="pass --horizon H (the steps of an episode; longer episodes are truncated to H)",
    )
    if config.horizon is not None and meta.horizon is not None and "horizon" not in inferred:
        if int(meta.horizon) != config.horizon:
            raise ValueError(
                f"wrong horizon: the dataset's metadata says H = {meta.horizon}, --horizon is "
                f"{config.horizon}; drop --horizon or fix it"
            )
    sizes = []
    for key, field, flag, what in (
        ("observation_space", "states", "--states", "states S"),
        ("action_space", "actions", "--actions", "actions A"),
    ):
        value = getattr(config, field)
        space = getattr(meta, key)
        if key not in inferred and space is not None and not isinstance(space, spaces.Discrete):
            raise ValueError(
                f"non-integer {what.split()[0]}: the dataset's metadata declares {space}; "
                f"DP-APVI is tabular and needs a Discrete {key.replace('_', ' ')}"
            )
        if key not in inferred and isinstance(space, spaces.Discrete) and int(space.start) != 0:
            raise ValueError(
                f"the dataset's metadata declares {space}, which does not start at 0; DP-APVI "
                f"needs {what.split()[0]} as indices 0..n-1 (re-index them)"
            )
        declared = view[key] if key not in inferred else None
        check(
            value is None or declared is None or value == declared,
            field,
            f"{value} contradicts the dataset's metadata ({space}); drop {flag} or fix it",
        )
        sizes.append(
            params.resolve(
                f"number of {what}",
                flag=value,
                metadata=view,
                key=key,
                fix=f"pass {flag} N (the size of the {key.replace('_', ' ')})",
            )
        )
    n = header_trajectories(params, "number of trajectories n", header)
    return int(H), int(sizes[0]), int(sizes[1]), n


def _load_reward(path: Path | None, H: int, S: int, A: int) -> np.ndarray | None:
    """The public reward table (a file the user declares public), checked against H, S, A."""
    if path is None:
        return None
    if not path.is_file():
        raise ValueError(f"reward table not found: {path}")
    from privrl.data.files import read_npy

    r = read_npy(path, "--reward-table")
    check(
        r.shape == (H, S, A),
        "reward_table",
        f"must have shape [H, S, A] = [{H}, {S}, {A}], got {r.shape}",
    )
    check(
        r.dtype.kind in "biuf" and bool(np.all(np.isfinite(r))) and r.min() >= 0 and r.max() <= 1,
        "reward_table",
        "values must be numbers in [0, 1]",
    )
    return r.astype(np.float64)


def _planned_report(
    algo: str,
    sizes: tuple[int, int, int],
    privacy: Any,
    config: Any,
    reward_given: bool,
    params: Any,
    *,
    stationary: bool = False,
) -> Any:
    """The run's releases (same events, sizes) from public parameters only, for the ledger;
    the noise they imply is recorded as derived public parameters."""
    from privrl.offline.apvi import RELATION, UNIT, noise_plan
    from privrl.privacy.report import PrivacyReport

    H, S, A = sizes
    plan = noise_plan(
        H, S, A, privacy, config.delta, reward_sums=not reward_given, stationary=stationary
    )
    m = len(plan.families)
    params.derive("released count families m", m, " + ".join(plan.families))
    if plan.mechanism == "gaussian":
        if stationary:
            params.derive("ℓ2 sensitivity per family Δ₂", plan.sensitivity, "√2·H (pooled)")
            params.derive("Gaussian σ per count", plan.scale, f"H·√({m}/ρ)")
        else:
            params.derive("ℓ2 sensitivity per family Δ₂", plan.sensitivity, "√(2H)")
            params.derive("Gaussian σ per count", plan.scale, f"√({m}H/ρ)")
    elif plan.mechanism == "laplace":
        params.derive("ℓ1 sensitivity per family Δ₁", plan.sensitivity, "2H")
        params.derive("Laplace scale b per count", plan.scale, f"{m}·2H/ε")
    params.derive("error bound E", plan.E, "2 × the noise's tail bound at δ_u (0 with no noise)")
    params.derive("ι", plan.iota, "log(HSA/δ_u)")
    releases = plan.releases_planned(H, S, A)
    if privacy is None:
        return PrivacyReport.non_private(UNIT, RELATION, releases, system=algo)
    delta = privacy.report_delta if privacy.mechanism == "gaussian" else 0.0
    return PrivacyReport.build(UNIT, RELATION, releases, delta, system=algo)


# ---------------------------------------------------------------------------------------------
# outputs: everything is public or post-processing of the releases
# ---------------------------------------------------------------------------------------------


def _metrics(result: Any, *, private: bool, extra: dict[str, float]) -> dict[str, Any]:
    report = result.report
    timings = dict(result.diagnostics["timings"])
    if private:
        timings.pop("counting", None)  # time spent on the raw private data is not published
    return {
        **extra,
        "epsilon": report.epsilon,
        "delta": report.delta,
        "rho": report.rho,
        "E": result.plan.E,
        "iota": result.plan.iota,
        "noise_scale": result.plan.scale,
        "known_fraction": float(result.model.known.mean()),
        "all_values_zero": bool(float(result.values.V[0].max()) == 0.0),
        "pessimistic_value_mean_V1": float(result.values.V[0].mean()),
        "timings_seconds": timings,
    }


def _summary(
    algo: str, sizes: tuple[int, int, int, int], result: Any, metrics: dict[str, Any]
) -> list[str]:
    H, S, A, n = sizes
    lines = [f"{algo}: H={H}, S={S}, A={A}, {n} trajectories"]
    for key in ("suboptimality", "policy_value", "optimal_value"):
        if key in metrics:
            lines.append(f"{key}: {metrics[key]:.4f}")
    lines.append(f"known (h,s,a) (ñ > E): {metrics['known_fraction']:.1%}")
    lines.append(f"E: {result.plan.E:.4g}")
    lines.append(f"mean Ṽ_1 (pessimistic): {metrics['pessimistic_value_mean_V1']:.4f}")
    if metrics["all_values_zero"]:
        lines.append(
            "[yellow]warning:[/] every pessimistic value is 0, so the policy carries no "
            "information: the bonus exceeds the value range at this n (at --bonus-scale 1 the "
            "privacy term C2·S·H·E·ι/ñ needs ñ > C2·S·E·ι per pair). More data, a larger budget "
            "or a smaller --bonus-scale (chosen on other data, never on this dataset) would help."
        )
    return lines


def _plot_values(path: Path, *, per_step: list[dict[str, float]], algo: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = [r["h"] for r in per_step]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    axes[0].plot(h, [r["V_mean"] for r in per_step], "o-", label="mean over s")
    axes[0].plot(h, [r["V_max"] for r in per_step], "s--", label="max over s")
    axes[0].plot(h, [len(h) - x + 1 for x in h], ":", color="gray", label="H − h + 1 (cap)")
    axes[0].set_xlabel("step h")
    axes[0].set_ylabel("pessimistic value Ṽ_h(s)")
    axes[0].legend(fontsize=8)
    # One filled step curve, not one bar per step: a bar per step took ~40 s at H = 10⁴.
    axes[1].fill_between(
        h, [r["known_fraction"] for r in per_step], step="mid", color="tab:green", alpha=0.8
    )
    axes[1].set_ylim(0, 1)
    axes[1].set_xlabel("step h")
    axes[1].set_ylabel("fraction of (s,a) with ñ > E")
    fig.suptitle(f"{algo}: value estimates and coverage per step")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_bonus(path: Path, *, bonus: np.ndarray, known: np.ndarray, algo: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Mean bonus over actions per (h, s); unknown pairs (bonus C·H) shown as the cap.
    mean_bonus = bonus.mean(axis=2)  # [H, S]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    im = ax.imshow(
        np.log10(np.maximum(mean_bonus.T, 1e-6)),
        aspect="auto",
        origin="lower",
        cmap="viridis",
        extent=(0.5, bonus.shape[0] + 0.5, -0.5, bonus.shape[1] - 0.5),
    )
    fig.colorbar(im, ax=ax, label="log10 mean_a Γ_h(s,a)")
    ax.set_xlabel("step h")
    ax.set_ylabel("state s")
    ax.set_title(f"{algo}: pessimism bonus ({known.mean():.0%} of (h,s,a) known)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
