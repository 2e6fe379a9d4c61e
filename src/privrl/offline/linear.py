"""VAPVI, DP-VAPVI and PEVI as objects: `DPVAPVI(config).fit(dataset)` and the baselines.

    from privrl.offline import DPVAPVI

    result = DPVAPVI(rho=1.0, phi=table).fit(dataset, ledger=ledger)   # table: [S, A, d]
    result.policy.actions        # π̂_h(s), [H, S]
    result.report                # ρ-zCDP for one trajectory (replace-one), as (ε, δ)

The computations are `privrl.offline.vapvi.dp_vapvi` (Qiao & Wang, Algorithm 2), `vapvi`
(Yin et al. 2022; the same code with the noise off) and `privrl.offline.pevi.pevi` (Jin, Yang
& Wang 2021); this module adds the order of work every algorithm of privrl has
(`privrl.algorithm`).

Public parameters (`plan`, from the dataset's header and the feature table only). H sets
ρ/(5H), the sensitivities and the number of releases, so it is the config's `horizon` or the
dataset's metadata, never the longest episode. The feature table fixes S, A and d; ρ, δ and
the reward range [LOW, HIGH] complete the list, which the report gives with each source
(`privrl.privacy.public.PublicParameters`). The number of episodes K comes from the header
(public under replace-one neighbours). When the dataset was sampled from the built-in linear
MDP (its recipe is in the metadata) and the features are that MDP's, the metrics include the
exact suboptimality of the learned policy.

The reward range is the config's `reward_range`, else the metadata's declared
``extra["reward_range"]``, else [0, 1] as a recorded default for VAPVI and PEVI; DP-VAPVI,
whose regression targets hold the private rewards, refuses without one. Rewards are clipped
to it and mapped into [0, 1] (`privrl.offline.vapvi`), and the published values are on the
original scale, V_h = (HIGH − LOW)·V^u_h + (H − h)·LOW.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from privrl.algorithm import Algorithm, Fitted, Plan, Progress, header_and_plan, spending
from privrl.offline.common import (
    Names,
    RewardRange,
    header_trajectories,
    name_of,
    refuse_declared_units,
    resolve_reward_range,
)
from privrl.offline.pevi import PEVIConfig, pevi
from privrl.offline.vapvi import (
    DEFAULT_DELTA,
    DEFAULT_FAILURE_PROB,
    DEFAULT_MATRIX_NOISE,
    GRAM_SENSITIVITY,
    N_RELEASES_PER_STEP,
    RELATION,
    UNIT,
    DPVAPVIConfig,
    FeatureTable,
    LinearConfig,
    LinearEpisodes,
    LinearGreedyPolicy,
    LinearPVIResult,
    VAPVIConfig,
    dp_vapvi,
    dp_vapvi_planned_report,
    gram_shift,
    vapvi,
)
from privrl.privacy.noise import NoiseGenerator, NoiseSource
from privrl.privacy.public import PublicParameters, Source, inferred_fields
from privrl.privacy.report import PrivacyReport

if TYPE_CHECKING:
    from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
    from privrl.data.io import DatasetHeader
    from privrl.envs.linear import LinearMDP

__all__ = ["DPVAPVI", "MAX_ENTRIES", "PEVI", "VAPVI", "LinearPublic"]

# Largest array a run builds (the [K, H] episode arrays, Q̂ [H, S, A], Λ̃ [H, d, d]).
MAX_ENTRIES = 50_000_000

C = TypeVar("C", bound=LinearConfig)


@dataclass(frozen=True)
class LinearPublic:
    """What is known before the data are read: all public (config, header, feature table).

    Attributes:
        features: the feature table φ [S, A, d].
        mdp: the built-in linear MDP the data were sampled from, when known (exact metrics).
        H: the horizon; K: the number of trajectories.
        reward_range: the public reward range the rewards are clipped to and mapped from.
    """

    features: FeatureTable
    mdp: LinearMDP | None
    H: int
    K: int
    reward_range: RewardRange = field(default_factory=RewardRange)


class _LinearLearner(Algorithm[C]):
    """The shared plan and fit; a subclass says how it is private and which learner runs."""

    name: ClassVar[str] = ""
    private: ClassVar[bool] = False

    # -- plan ------------------------------------------------------------------------------

    def resolve(self, params: PublicParameters, names: Names | None = None) -> dict[str, Any]:
        """The privacy settings, resolved as public parameters (before the sizes)."""
        return {}

    def planned(
        self, settings: dict[str, Any], public: LinearPublic, params: PublicParameters
    ) -> PrivacyReport:
        """The planned report (for the ledger)."""
        return PrivacyReport.non_private(UNIT, RELATION, system=self.name)

    def plan(self, header: DatasetHeader, *, names: Names | None = None) -> Plan:
        """H, the feature table and K from the config and `header` (never the episodes), and
        the planned report. `names` spells the settings in messages (`Names`)."""
        params = PublicParameters()
        settings = self.resolve(params, names)
        public = public_of_header(self.config, header, params, names)
        return self.sized_plan(settings, public, params)

    def sized_plan(
        self, settings: dict[str, Any], public: LinearPublic, params: PublicParameters
    ) -> Plan:
        """The plan once the feature table, H and K are public (a header or a simulator)."""
        report = self.planned(settings, public, params)
        published = {
            "algorithm": self.name,
            "features": public.features.source,
            "feature_scale": public.features.scale,
            "horizon": public.H,
            "stationary": self.config.stationary,
            **settings,  # the resolved privacy settings (and E), which override the config's
            "lambda": self.config.lam,
        }
        facts = {"public": public, "params": params, "settings": settings}
        return Plan(report=report, public=published, facts=facts)

    # -- the computation -------------------------------------------------------------------

    def episodes(self, dataset: TrajectoryDataset, plan: Plan) -> LinearEpisodes:
        """The `[K, H]` arrays of `dataset` under the public H and table (the first read)."""
        public: LinearPublic = plan.facts["public"]
        table = public.features
        episodes = LinearEpisodes.from_dataset(
            dataset,
            n_states=table.S,
            n_actions=table.A,
            horizon=public.H,
            reward_range=public.reward_range,
        )
        if self.private:
            refuse_declared_units(dataset, self.name.upper())
        return episodes

    def learn(
        self,
        episodes: LinearEpisodes,
        plan: Plan,
        rng: np.random.Generator,
        noise: NoiseGenerator | None,
    ) -> LinearPVIResult:
        """The learner on the episodes (`rng`: public randomness such as a data split)."""
        raise NotImplementedError

    def compute(
        self,
        episodes: LinearEpisodes,
        plan: Plan,
        rng: np.random.Generator,
        noise: NoiseGenerator | None,
    ) -> LinearPVIResult:
        """`learn`, its report carrying the public parameters."""
        result = self.learn(episodes, plan, rng, noise)
        result.report.with_public_parameters(plan.facts["params"])
        return result

    def fit(
        self,
        dataset: TrajectoryDataset,
        *,
        ledger: Any = None,
        noise: NoiseSource | None = None,
        progress: Progress | None = None,
        rng: np.random.Generator | int | None = 0,
    ) -> Fitted[LinearGreedyPolicy]:
        """Learn π̂ from `dataset`. With `ledger`, the planned report is reserved before the
        episodes are read and completed with the final one. `noise=None` draws the privacy
        noise from a fresh secure source; `NoiseSource.insecure(seed)` repeats it (the
        report is then uncertified). `rng` seeds the public randomness (the data split)."""
        source = NoiseSource.secure() if noise is None else noise
        header, plan = header_and_plan(self, dataset)
        plan = replace(plan, report=source.certify(plan.report))
        split_rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)

        def compute() -> Fitted[LinearGreedyPolicy]:
            episodes = self.episodes(dataset, plan)
            gen = source.generator(self.name) if self.private else None
            result = self.compute(episodes, plan, split_rng, gen)
            result.report = source.certify(result.report)
            return fitted(self.name, episodes, plan.facts["public"], result)

        return spending(ledger, plan, header, compute, label=self.name)


class DPVAPVI(_LinearLearner[DPVAPVIConfig]):
    """DP-VAPVI (Qiao & Wang, Algorithm 2): ρ-zCDP for one trajectory under replace-one.

    The 5H statistics of variance-aware pessimistic value iteration are released with
    Gaussian noise (ρ/(5H) each); the privacy report lists every release.
    """

    Config = DPVAPVIConfig
    name = "dp-vapvi"
    private = True

    def resolve(self, params: PublicParameters, names: Names | None = None) -> dict[str, Any]:
        config = self.config
        rho = params.resolve("zCDP budget ρ", flag=config.rho, fix=f"pass {name_of(names, 'rho')}")
        matrix_noise = params.resolve(
            "Gram-matrix noise", flag=config.matrix_noise, default=DEFAULT_MATRIX_NOISE, fix=""
        )
        delta = params.resolve(
            "privacy δ",
            flag=config.delta,
            default=DEFAULT_DELTA,
            fix="",
            detail="the δ at which ρ-zCDP is stated as (ε, δ)",
        )
        failure_prob = params.resolve(
            "utility failure probability",
            flag=config.failure_prob,
            default=DEFAULT_FAILURE_PROB,
            fix="",
            detail="in the PD shift E; not a privacy parameter",
        )
        return {
            "rho": rho,
            "matrix_noise": matrix_noise,
            "delta": delta,
            "failure_prob": failure_prob,
            "stationary": bool(config.stationary),
        }

    def planned(
        self, settings: dict[str, Any], public: LinearPublic, params: PublicParameters
    ) -> PrivacyReport:
        from privrl.data.padding import entries_per_trajectory

        H, d, rho = public.H, public.features.d, settings["rho"]
        stationary = bool(settings["stationary"])
        T = entries_per_trajectory(H, stationary)
        # pooled over h, one trajectory adds up to H terms to a sum: every sensitivity ×H
        per = "H·" if stationary else ""
        params.derive("number of releases", N_RELEASES_PER_STEP * H, "5H (5 statistics per step)")
        params.derive("ρ0 per release", rho / (N_RELEASES_PER_STEP * H), "ρ/(5H)")
        params.derive(
            "terms per trajectory in one statistic",
            T,
            "H, the declared horizon (pooled over h)" if stationary else "1 (one per step h)",
        )
        params.derive("ℓ2 sensitivity of Σφ̄Ṽ²", T * 2.0 * H**2, f"{per}2H²")
        params.derive("ℓ2 sensitivity of Σφ̄Ṽ and Σφ(r+Ṽ)/σ̃²", T * 2.0 * H, f"{per}2H")
        params.derive(
            "Frobenius sensitivity of the Gram matrices", T * GRAM_SENSITIVITY, f"{per}√2"
        )
        settings["E"] = params.derive(
            "PD shift E",
            gram_shift(
                H, d, rho, settings["failure_prob"], settings["matrix_noise"], stationary=stationary
            ),
            "2√2·s·(2√d + √(2 log(2H/failure probability)))"
            + (", s ×H (pooled over h)" if stationary else ""),
        )
        return dp_vapvi_planned_report(rho, settings["matrix_noise"], settings["delta"])

    def learn(
        self,
        episodes: LinearEpisodes,
        plan: Plan,
        rng: np.random.Generator,
        noise: NoiseGenerator | None,
    ) -> LinearPVIResult:
        s, config = plan.facts["settings"], self.config
        return dp_vapvi(
            episodes,
            plan.facts["public"].features,
            rho=s["rho"],
            rng=rng,
            noise=noise,
            delta=s["delta"],
            failure_prob=s["failure_prob"],
            matrix_noise=s["matrix_noise"],
            bonus_scale=config.bonus_scale,
            lam=config.lam,
            additive_bonus=config.additive_bonus,
            split=config.split,
            stationary=config.stationary,
        )


class VAPVI(_LinearLearner[VAPVIConfig]):
    """VAPVI (Yin et al. 2022): DP-VAPVI's code with the noise off. Not private (a ledger
    refuses it)."""

    Config = VAPVIConfig
    name = "vapvi"

    def __init__(self, config: VAPVIConfig | None = None, **settings: Any) -> None:
        super().__init__(config, **settings)
        if isinstance(self.config, DPVAPVIConfig):
            raise TypeError("VAPVI is not private and takes a VAPVIConfig; give this to DPVAPVI")

    def learn(
        self,
        episodes: LinearEpisodes,
        plan: Plan,
        rng: np.random.Generator,
        noise: NoiseGenerator | None,
    ) -> LinearPVIResult:
        config = self.config
        return vapvi(
            episodes,
            plan.facts["public"].features,
            bonus_scale=config.bonus_scale,
            lam=config.lam,
            additive_bonus=config.additive_bonus,
            split=config.split,
            rng=rng,
            stationary=config.stationary,
        )


class PEVI(_LinearLearner[PEVIConfig]):
    """PEVI (Jin, Yang & Wang 2021): pessimistic least-squares value iteration. Not private
    (a ledger refuses it)."""

    Config = PEVIConfig
    name = "pevi"

    def learn(
        self,
        episodes: LinearEpisodes,
        plan: Plan,
        rng: np.random.Generator,
        noise: NoiseGenerator | None,
    ) -> LinearPVIResult:
        config = self.config
        return pevi(
            episodes,
            plan.facts["public"].features,
            bonus_scale=config.bonus_scale,
            lam=config.lam,
            xi=config.xi,
            stationary=config.stationary,
        )


# ---------------------------------------------------------------------------------------------
# plan: the feature table, H and K (never the episodes)
# ---------------------------------------------------------------------------------------------


def feature_table(phi: Any, source: str = "") -> FeatureTable:
    """`phi` as a `FeatureTable` (an array is validated and rescaled to ‖φ‖ ≤ 1)."""
    return phi if isinstance(phi, FeatureTable) else FeatureTable.from_array(phi, source=source)


def public_of_header(
    config: LinearConfig, header: DatasetHeader, params: PublicParameters, names: Names | None
) -> LinearPublic:
    """The features, H and K from the config, the dataset's header and the feature table only
    (the episodes are not read), each recorded as a public parameter."""
    from privrl.envs.linear import linear_mdp_from_metadata

    meta = header.metadata
    recorded = meta.extra.get("linear_mdp")
    mdp = linear_mdp_from_metadata(meta.extra)
    phi = name_of(names, "phi")
    if config.phi is not None:
        try:
            table = feature_table(config.phi)
        except ValueError as exc:
            raise ValueError(f"{phi}: {exc}") from None
        if isinstance(recorded, dict) and recorded.get("dim") not in (None, table.d):
            raise ValueError(
                f"{phi}: feature dimension mismatch: the table has d = {table.d} but "
                f"the dataset was sampled with d = {recorded['dim']} features"
            )
        if mdp is not None and (
            mdp.phi.shape != table.phi.shape or not np.allclose(mdp.phi, table.phi)
        ):
            mdp = None  # features differ from the generating model: no exact metric
        where = (Source.FLAG, f"{phi} {table.source}".strip())
    elif mdp is not None:
        table = FeatureTable(
            phi=mdp.phi,
            scale=mdp.scale,
            source=f"linear-mdp:{mdp.recipe.get('instance')} (from metadata)",
        )
        where = (Source.METADATA, "the linear-MDP recipe in metadata field 'linear_mdp'")
    else:
        raise ValueError(
            f"{phi} is required: the dataset records no built-in feature map (give an "
            "array [S, A, d])"
        )
    check_spaces(meta, table, names)
    horizon = name_of(names, "horizon")
    H = params.resolve(
        "horizon H",
        flag=config.horizon,
        metadata=meta,
        key="horizon",
        fix=f"pass {horizon} H (the steps of an episode; longer episodes are truncated to H)",
    )
    K = header_trajectories(params, "number of trajectories K", header)
    if K < 1:
        where_file = "" if header.path is None else f" {header.path}"
        raise ValueError(f"the dataset{where_file} has no episodes")
    h_name = horizon if config.horizon is not None else "the metadata's horizon H"
    check_sizes(H, table, K, h_name=h_name, k_name="the dataset's episode count K")
    rr = reward_range_of(config, meta, params, names)
    return record_table(params, LinearPublic(table, mdp, int(H), int(K), rr), where)


def reward_range_of(
    config: LinearConfig, metadata: Any, params: PublicParameters, names: Names | None
) -> RewardRange:
    """The public reward range (`resolve_reward_range`): the [0, 1] default only for the
    non-private learners (DP-VAPVI's regression targets hold the private rewards)."""
    from privrl.offline.vapvi import DPVAPVIConfig

    return resolve_reward_range(
        params,
        config.reward_range,
        metadata,
        default_allowed=not isinstance(config, DPVAPVIConfig),
        names=names,
        why_needed="the private regression targets Σφ(r + Ṽ)/σ̃² hold the rewards clipped to "
        "it; a guessed [0, 1] would silently clip rewards outside it",
    )


def record_table(
    params: PublicParameters, public: LinearPublic, where: tuple[Source, str]
) -> LinearPublic:
    """Record the feature table's size and scale and the reward and value ranges."""
    table = public.features
    params.given("feature table [S, A, d]", [table.S, table.A, table.d], *where)
    params.derive(
        "feature scale", table.scale, "the table's max norm if above 1, which it is divided by"
    )
    params.derive(
        "value range", [0.0, float(public.H)], "[0, H] in mapped rewards; values are clipped to it"
    )
    return public


def _at_most(value: int, name: str, maximum: int, why: str) -> None:
    if value > maximum:
        raise ValueError(f"{name} must be at most {maximum} ({why}), got {value}")


def check_sizes(H: int, table: FeatureTable, K: int, *, h_name: str, k_name: str) -> None:
    """Refuse, before any work, sizes whose arrays cannot fit (all public), naming the
    setting (or the source) of the size at fault and the largest value that fits."""
    per_step = max(table.S * table.A, table.d * table.d)
    _at_most(
        H,
        h_name,
        MAX_ENTRIES // per_step,
        f"H·S·A and H·d² with S={table.S}, A={table.A}, d={table.d} must stay within "
        f"the limit of {MAX_ENTRIES:.0e} entries (memory)",
    )
    _at_most(
        K,
        k_name,
        MAX_ENTRIES // max(H, 1),
        f"K·H with H={H} must stay within the limit of {MAX_ENTRIES:.0e} entries (memory); "
        "or use a shorter horizon",
    )


def check_spaces(meta: DatasetMetadata, table: FeatureTable, names: Names | None) -> None:
    """The metadata's declared spaces against the feature table (public: spaces marked as
    inferred from the data are not compared — the data are fitted to the table instead)."""
    from gymnasium import spaces

    inferred = set(inferred_fields(meta))
    obs_space = None if "observation_space" in inferred else meta.observation_space
    act_space = None if "action_space" in inferred else meta.action_space
    phi = name_of(names, "phi")
    if obs_space is not None and not isinstance(obs_space, spaces.Discrete):
        raise ValueError(
            f"non-integer states: the observation space is {obs_space}, but a feature table "
            "needs integer states (Discrete); discretise the observations first"
        )
    if act_space is not None and not isinstance(act_space, spaces.Discrete):
        raise ValueError(
            f"non-integer actions: the action space is {act_space}, but a feature table needs "
            "integer actions (Discrete)"
        )
    for space in (obs_space, act_space):
        if isinstance(space, spaces.Discrete) and int(space.start) != 0:
            raise ValueError(
                f"the dataset's metadata declares {space}, which does not start at 0; a feature "
                "table indexes states and actions from 0 (re-index them)"
            )
    if isinstance(obs_space, spaces.Discrete) and int(obs_space.n) > table.S:
        raise ValueError(
            f"{phi}: feature dimension mismatch: the table has S = {table.S} states but "
            f"the dataset's observation space has {int(obs_space.n)}"
        )
    if isinstance(act_space, spaces.Discrete) and int(act_space.n) != table.A:
        raise ValueError(
            f"{phi}: feature dimension mismatch: the table has A = {table.A} actions but "
            f"the dataset's action space has {int(act_space.n)}"
        )


# ---------------------------------------------------------------------------------------------
# outputs: public, or post-processing of the releases
# ---------------------------------------------------------------------------------------------


def outputs(
    algorithm: str, episodes: LinearEpisodes, public: LinearPublic, result: LinearPVIResult
) -> tuple[dict[str, Any], list[dict[str, Any]], Any]:
    """The metrics, the per-step rows and the true value curves (when the model is known)."""
    H = episodes.H
    rr = public.reward_range
    # the pessimistic values on the original reward scale (H − h steps remain at row h)
    v = rr.value(result.v, np.arange(H, -1, -1, dtype=np.float64)[:, None])
    metrics: dict[str, Any] = {
        "algorithm": algorithm,
        "K": episodes.K,
        "H": H,
        "d": public.features.d,
        "epsilon": result.report.epsilon,
        "delta": result.report.delta,
        "rho": result.report.rho,
        # Post-processing of the releases: the pessimistic value Ṽ_1 per state.
        "pessimistic_value_per_state": v[0].tolist(),
        "reward_range": rr.as_list(),
    }
    truth = None
    mdp = public.mdp
    if mdp is not None and mdp.H == H:
        evaluation = mdp.tabular().evaluate(result.policy.actions, return_q=False)
        _, v_star, _ = mdp.tabular().backward_induction()
        v_pi = float(evaluation.value)
        metrics.update(
            {
                "suboptimality": mdp.optimal_value() - v_pi,
                "v_star": mdp.optimal_value(),
                "policy_value": v_pi,
                "pessimistic_value": float(mdp.d1 @ v[0]),
            }
        )
        truth = (np.asarray(evaluation.V), np.asarray(v_star))
    rows = []
    for h in range(H):
        row: dict[str, Any] = {
            "h": h + 1,
            "pessimistic_value_mean": float(v[h].mean()),
            "bonus_mean": float(result.bonus[h].mean()),
            "q_zero_fraction": float(np.mean(result.q[h] == 0.0)),
        }
        if truth is not None:
            row["policy_value_mean"] = float(truth[0][h].mean())
            row["optimal_value_mean"] = float(truth[1][h].mean())
        rows.append(row)
    return metrics, rows, truth


def fitted(
    algorithm: str, episodes: LinearEpisodes, public: LinearPublic, result: LinearPVIResult
) -> Fitted[LinearGreedyPolicy]:
    """The `Fitted` of a linear learner's result."""
    metrics, curve, _ = outputs(algorithm, episodes, public, result)
    return Fitted(result.policy, result.report, metrics, curve, result)
