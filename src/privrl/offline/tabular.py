"""APVI and DP-APVI as objects: `APVI(config).fit(dataset)` and `DPAPVI(config).fit(dataset)`.

    from privrl.offline import DPAPVI

    result = DPAPVI(rho=1.0, horizon=10, privatize_rewards=True).fit(dataset, ledger=ledger)
    result.policy.actions        # π̂_h(s), [H, S]
    result.report                # ρ-zCDP for one trajectory (replace-one), as (ε, δ)

The computation is `privrl.offline.apvi.dp_apvi` (Qiao & Wang, Algorithm 1; `apvi` without
noise); this module adds the order of work every algorithm of privrl has (`privrl.algorithm`).

Public parameters (`plan`, from the dataset's header only). H, S, A, the budget, the privacy
δ, the utility δ_u and the reward range set the noise, so they are public
(`privrl.privacy.public.PublicParameters`): a config value, the dataset's metadata (unless it
marks them as inferred from the data, as `privrl data import` does when it guessed the
spaces) or a default, never the data. The report lists each with its source. The number of
trajectories n comes from the header: it is public under replace-one neighbours. A private
run needs the rewards protected: a public `reward` table or `privatize_rewards`.

The reward range [LOW, HIGH] is public too (`reward_range`, else the metadata's declared
``extra["reward_range"]``, else [0, 1] as a recorded default when no reward of the data enters
a sensitivity: a non-private run, or a public `reward` table). A private run that releases
reward sums refuses without one: clipping unknown rewards to a guessed [0, 1] silently
changes the objective (costs would all become 0). With absorbing padding the range must hold
0, the reward of a step after termination.

Two δ's, kept apart on purpose: `delta` is the paper's *utility* failure probability (it sets
the error bound E and ι, hence how pessimistic the learner is), `privacy_delta` is the δ at
which the zCDP guarantee is stated as (ε, δ). Tying them would invite a large privacy δ to
shrink the bonuses.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.algorithm import Algorithm, Fitted, Plan, Progress, header_and_plan, spending
from privrl.config import check
from privrl.offline.apvi import (
    DEFAULT_PRIVACY_DELTA,
    DEFAULT_UTILITY_DELTA,
    RELATION,
    UNIT,
    APVIConfig,
    APVIResult,
    DPAPVIConfig,
    FiniteHorizonPolicy,
    PrivacyConfig,
    config_dict,
    dp_apvi,
    noise_plan,
)
from privrl.offline.common import (
    Names,
    RewardRange,
    header_trajectories,
    name_of,
    resolve_reward_range,
)
from privrl.privacy.noise import NoiseGenerator, NoiseSource
from privrl.privacy.public import PublicParameters, Source, inferred_fields
from privrl.privacy.report import PrivacyReport

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset
    from privrl.data.io import DatasetHeader
    from privrl.envs.tabular import Episodes

__all__ = ["APVI", "DPAPVI", "MAX_ENTRIES", "check_sizes", "reward_table_problem"]

# Largest array a run builds (T·S²·A transition counts with T = H per step or 1 pooled,
# H·S·A values and bonuses, n·(H+1) steps): 5e7 float64 entries are 400 MB, and the pipeline
# holds a few such arrays at once.
MAX_ENTRIES = 50_000_000


class APVI(Algorithm[APVIConfig]):
    """APVI (Yin & Wang 2021): the non-private baseline, DP-APVI's code with no noise.

    Its report says it is not private (ε = ∞), so a ledger refuses it. Without a public
    `reward` the rewards are the empirical means of the data.
    """

    Config = APVIConfig
    name = "apvi"

    def __init__(self, config: APVIConfig | None = None, **settings: Any) -> None:
        super().__init__(config, **settings)
        if isinstance(self.config, DPAPVIConfig) and not isinstance(self, DPAPVI):
            raise TypeError("APVI is not private and takes an APVIConfig; give this to DPAPVI")

    # -- plan: public parameters only ------------------------------------------------------

    def privacy(self, params: PublicParameters, names: Names | None = None) -> PrivacyConfig | None:
        """The mechanism (None: no noise), its budget and δ recorded in `params`."""
        return None

    def settings(
        self, params: PublicParameters, names: Names | None = None, metadata: Any = None
    ) -> tuple[PrivacyConfig | None, APVIConfig]:
        """The mechanism and the config with δ_u and the reward range resolved (from the
        config, else `metadata`, a dataset's metadata or a mapping of its fields), recorded
        in `params`."""
        privacy = self.privacy(params, names)
        delta = params.resolve(
            "utility failure probability δ_u",
            flag=self.config.delta,
            default=DEFAULT_UTILITY_DELTA,
            fix=f"pass {name_of(names, 'delta')}",
            detail="in E and ι = log(HSA/δ_u); not a privacy parameter",
        )
        rr = self.reward_range(params, privacy, names, metadata)
        return privacy, self.config.replace(delta=delta, reward_range=(rr.low, rr.high))

    def reward_range(
        self,
        params: PublicParameters,
        privacy: PrivacyConfig | None,
        names: Names | None = None,
        metadata: Any = None,
    ) -> RewardRange:
        """The public reward range (`resolve_reward_range`); the [0, 1] default only when no
        reward of the data enters a sensitivity, and 0 in it when padding is absorbing."""
        rr = resolve_reward_range(
            params,
            self.config.reward_range,
            metadata,
            default_allowed=privacy is None or not privacy.privatize_rewards,
            names=names,
            why_needed="the private reward sums are clipped to it, so it sets their "
            "sensitivity; a guessed [0, 1] would silently clip rewards outside it",
        )
        check(
            self.config.padding != "absorbing" or rr.contains_zero,
            "reward_range",
            f"{rr} does not contain 0, the reward of a step after termination, which "
            f"absorbing padding needs; widen it to hold 0 or pass {name_of(names, 'padding')} "
            "none",
        )
        return rr

    def plan(self, header: DatasetHeader, *, names: Names | None = None) -> Plan:
        """H, S, A and n from the config and `header`, the planned report (never the
        episodes). `names` spells the settings in messages (`privrl.offline.common.Names`)."""
        params = PublicParameters()
        privacy, resolved = self.settings(params, names, header.metadata)
        privatize = privacy is not None and privacy.privatize_rewards
        reward = self.config.reward
        check(
            privacy is None or reward is not None or privatize,
            "reward",
            f"is needed: the rewards in the data are private; give {name_of(names, 'reward')} "
            f"(a public mean reward r_h(s,a)) or {name_of(names, 'privatize_rewards')} (spends "
            "part of the budget on reward sums)",
        )
        H, S, A, n = public_sizes(self.config, header, params, names)
        if n < 1:
            where = "" if header.path is None else f" {header.path}"
            raise ValueError(f"the dataset{where} has no episodes")
        check_sizes(H, S, A, n, stationary=self.config.stationary)
        if reward is not None:
            problem = reward_table_problem(reward, H, S, A, resolved.reward_range)
            check(problem is None, "reward", problem or "")
        return self.sized_plan(
            params,
            privacy,
            resolved,
            (H, S, A, n),
            reward_given=reward is not None,
            padding=self.config.padding,
        )

    def sized_plan(
        self,
        params: PublicParameters,
        privacy: PrivacyConfig | None,
        resolved: APVIConfig,
        sizes: tuple[int, int, int, int],
        *,
        reward_given: bool,
        padding: str,
    ) -> Plan:
        """The plan once H, S, A and n are public (from a header, or a simulator's sizes)."""
        H, S, A, n = sizes
        S_model = S + 1 if padding == "absorbing" else S
        if padding == "absorbing":
            params.derive(
                "states in the model S + 1", S_model, "S declared states + 1 absorbing state"
            )
            # the padded model's arrays (public sizes)
            check_sizes(H, S_model, A, n, stationary=self.config.stationary)
        report = planned_report(
            self.name,
            (H, S_model, A),
            privacy,
            resolved,
            reward_given,
            params,
            stationary=self.config.stationary,
        )
        public = {
            "algorithm": self.name,
            "horizon": H,
            "states": S,
            "actions": A,
            "padding": padding,
            "stationary": self.config.stationary,
            "reward_range": list(resolved.reward_range or (0.0, 1.0)),
            **config_dict(resolved, privacy),
        }
        facts = {
            "sizes": (H, S, A),
            "n": n,
            "params": params,
            "privacy": privacy,
            "apvi": resolved,
            "padding": padding,
            "stationary": self.config.stationary,
        }
        return Plan(report=report, public=public, facts=facts)

    # -- the computation -------------------------------------------------------------------

    def compute(
        self,
        data: TrajectoryDataset | Episodes,
        plan: Plan,
        noise: NoiseGenerator | None,
        *,
        reward: np.ndarray | None = None,
    ) -> APVIResult:
        """Algorithm 1 on `data` as `plan` fixed it; `noise` draws the privacy noise (unused
        without privacy); `reward` overrides the config's public table (a simulator's)."""
        facts = plan.facts
        H, S, A = facts["sizes"]
        result = dp_apvi(
            data,
            horizon=H,
            n_states=S,
            n_actions=A,
            privacy=facts["privacy"],
            config=facts["apvi"],
            reward=self.config.reward if reward is None else reward,
            rng=noise,
            padding=facts["padding"],
            stationary=facts["stationary"],
            reward_range=facts["apvi"].reward_range,
        )
        result.report.with_public_parameters(facts["params"])
        return result

    def fit(
        self,
        dataset: TrajectoryDataset,
        *,
        ledger: Any = None,
        noise: NoiseSource | None = None,
        progress: Progress | None = None,
    ) -> Fitted[FiniteHorizonPolicy]:
        """Learn π̂ from `dataset`. With `ledger`, the planned report is reserved before the
        episodes are read and completed with the final one. `noise=None` draws the privacy
        noise from a fresh secure source; `NoiseSource.insecure(seed)` repeats it (the
        report is then uncertified)."""
        source = NoiseSource.secure() if noise is None else noise
        header, plan = header_and_plan(self, dataset)
        plan = replace(plan, report=source.certify(plan.report))
        private = plan.facts["privacy"] is not None

        def compute() -> Fitted[FiniteHorizonPolicy]:
            result = self.compute(dataset, plan, source.generator("dp-apvi") if private else None)
            result.report = source.certify(result.report)
            return fitted(result, private=private)

        return spending(ledger, plan, header, compute, label=self.name)


class DPAPVI(APVI):
    """DP-APVI (Qiao & Wang, Algorithm 1): pessimistic value iteration on private counts.

    Protects one whole trajectory under replace-one neighbours: ρ-zCDP with `rho` (discrete
    Gaussian noise σ² = 2H/ρ on the counts), or ε-DP with `epsilon` (discrete Laplace
    b = 4H/ε). The rewards are private too: give a public `reward` table or
    `privatize_rewards=True`.
    """

    Config = DPAPVIConfig
    name = "dp-apvi"
    config: DPAPVIConfig

    def privacy(self, params: PublicParameters, names: Names | None = None) -> PrivacyConfig:
        """The PrivacyConfig of DP-APVI, its budget and δ recorded as public parameters."""
        config = self.config
        if config.rho is not None:
            rho = params.resolve(
                "zCDP budget ρ", flag=config.rho, fix=f"pass {name_of(names, 'rho')}"
            )
            report_delta = params.resolve(
                "privacy δ",
                flag=config.privacy_delta,
                default=DEFAULT_PRIVACY_DELTA,
                fix=f"pass {name_of(names, 'privacy_delta')}",
                detail="the δ at which ρ-zCDP is stated as (ε, δ)",
            )
            return PrivacyConfig.gaussian(
                rho, privatize_rewards=config.privatize_rewards, report_delta=report_delta
            )
        epsilon = params.resolve(
            "pure-DP budget ε", flag=config.epsilon, fix=f"pass {name_of(names, 'epsilon')}"
        )
        params.given("privacy δ", 0.0, Source.DEFAULT, "pure ε-DP (Laplace noise)")
        return PrivacyConfig.laplace(epsilon, privatize_rewards=config.privatize_rewards)


# ---------------------------------------------------------------------------------------------
# plan: public sizes and the planned report (never the episodes)
# ---------------------------------------------------------------------------------------------


def check_sizes(H: int, S: int, A: int, n: int, *, stationary: bool = False) -> None:
    """Refuse, before any work, sizes whose arrays cannot fit (all public).

    What a run allocates: the transition counts n_h(s,a,s') and what is derived from them
    (noise, projection, P̃) have T·S²·A entries, T = H per step or T = 1 when the counts are
    pooled over h (``stationary``: one table); the values Q̃ and bonuses Γ have H·S·A; the
    episodes n·(H+1)."""
    T = 1 if stationary else H
    table = "S²·A pooled transition counts" if stationary else "H·S²·A transition counts"
    if T * S * S * A > MAX_ENTRIES:
        raise ValueError(
            f"{table} (H={H}, S={S}, A={A}) exceed the limit of {MAX_ENTRIES:.0e} entries "
            "(memory); use fewer states, actions or steps"
            + ("" if stationary else ", or one transition model for every step (stationary)")
        )
    if H * S * A > MAX_ENTRIES:
        raise ValueError(
            f"H·S·A values (H={H}, S={S}, A={A}) exceed the limit of {MAX_ENTRIES:.0e} entries "
            "(memory); use fewer states, actions or steps"
        )
    if n * (H + 1) > MAX_ENTRIES:
        raise ValueError(
            f"n·(H+1) steps (n={n} trajectories, H={H}) exceed the limit of {MAX_ENTRIES:.0e} "
            "entries (memory); use fewer trajectories or a shorter horizon"
        )


def reward_table_problem(
    reward: np.ndarray,
    H: int,
    S: int,
    A: int,
    reward_range: tuple[float, float] | None = None,
) -> str | None:
    """What is wrong with a public reward table for H, S, A and the public reward range
    (default [0, 1]) (None: nothing)."""
    lo, hi = reward_range or (0.0, 1.0)
    r = np.asarray(reward)
    if r.shape != (H, S, A):
        return f"must have shape [H, S, A] = [{H}, {S}, {A}], got {r.shape}"
    numbers = r.dtype.kind in "biuf" and bool(np.all(np.isfinite(r)))
    if not (numbers and r.min() >= lo and r.max() <= hi):
        return f"values must be numbers in the reward range [{lo:g}, {hi:g}]"
    return None


def _discrete_n(space: Any) -> int | None:
    """n of a Discrete(n) space starting at 0 (what S or A can be read from), else None."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete) and int(space.start) == 0:
        return int(space.n)
    return None


def public_sizes(
    config: APVIConfig, header: DatasetHeader, params: PublicParameters, names: Names | None
) -> tuple[int, int, int, int]:
    """H, S, A and n from the config and the dataset's header only (never the episodes)."""
    from gymnasium import spaces

    meta = header.metadata
    inferred = set(inferred_fields(meta))
    view = {
        "horizon": meta.horizon,
        "observation_space": _discrete_n(meta.observation_space),
        "action_space": _discrete_n(meta.action_space),
        "extra": meta.extra,
    }
    horizon = name_of(names, "horizon")
    H = params.resolve(
        "horizon H",
        flag=config.horizon,
        metadata=view,
        key="horizon",
        fix=f"pass {horizon} H (the steps of an episode; longer episodes are truncated to H)",
    )
    if config.horizon is not None and meta.horizon is not None and "horizon" not in inferred:
        if int(meta.horizon) != config.horizon:
            raise ValueError(
                f"wrong horizon: the dataset's metadata says H = {meta.horizon}, {horizon} is "
                f"{config.horizon}; drop {horizon} or fix it"
            )
    sizes = []
    for key, setting, what in (
        ("observation_space", "states", "states S"),
        ("action_space", "actions", "actions A"),
    ):
        flag = name_of(names, setting)
        value = getattr(config, setting)
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
            setting,
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


def planned_report(
    algo: str,
    sizes: tuple[int, int, int],
    privacy: PrivacyConfig | None,
    config: APVIConfig,
    reward_given: bool,
    params: PublicParameters,
    *,
    stationary: bool = False,
) -> PrivacyReport:
    """The run's releases (same events, sizes) from public parameters only, for the ledger;
    the noise they imply is recorded as derived public parameters."""
    H, S, A = sizes
    plan = noise_plan(
        H, S, A, privacy, config.utility_delta, reward_sums=not reward_given, stationary=stationary
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


def metrics_of(
    result: APVIResult, *, private: bool, extra: dict[str, float] | None = None
) -> dict[str, Any]:
    """The final figures of a fit (`extra`: a simulator's exact values)."""
    report = result.report
    timings = dict(result.diagnostics["timings"])
    if private:
        timings.pop("counting", None)  # time spent on the raw private data is not published
    return {
        **(extra or {}),
        "epsilon": report.epsilon,
        "delta": report.delta,
        "rho": report.rho,
        "E": result.plan.E,
        "iota": result.plan.iota,
        "noise_scale": result.plan.scale,
        "known_fraction": float(result.model.known.mean()),
        "all_values_zero": bool(float(result.values.V[0].max()) == 0.0),
        "pessimistic_value_mean_V1": float(result.original_values()[0].mean()),
        "reward_range": result.reward_range.as_list(),
        "timings_seconds": timings,
    }


def fitted(
    result: APVIResult, *, private: bool, extra: dict[str, float] | None = None
) -> Fitted[FiniteHorizonPolicy]:
    """The `Fitted` of an APVI / DP-APVI result."""
    return Fitted(
        policy=result.policy,
        report=result.report,
        metrics=metrics_of(result, private=private, extra=extra),
        curve=result.per_step,
        details=result,
    )
