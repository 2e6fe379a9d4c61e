"""DP-VAPVI, VAPVI and PEVI (Qiao & Wang; Yin et al. 2022; Jin et al. 2021) on the run layer:
offline RL on linear MDPs.

`privrl train dp-vapvi | vapvi | pevi` and `privrl run` build these configs. Data come either
from a user's dataset (``--data FILE --features SPEC``) or are sampled from the built-in linear
MDP (``--env linear-mdp --episodes K [--instance I]``), in which case the run also reports the
exact suboptimality of the learned policy. The algorithms are `privrl.offline.vapvi.dp_vapvi`,
`vapvi` and `privrl.offline.pevi.pevi`; this module only adapts.

``--features SPEC`` is

* a ``.npy`` file holding a float array ``[S, A, d]``: φ(s, a) for integer states
  ``0..S-1`` and actions ``0..A-1`` (rescaled by its max norm if that exceeds 1 — public
  post-processing that the guarantee's ``‖φ‖ ≤ 1`` needs); or
* ``module:function``: an importable function taking no arguments that returns such an array
  (features computed in code).

States must be integer indices: continuous observations are refused (discretise them and
build a table). Without ``--features``, a dataset sampled from the built-in linear MDP
(``privrl.envs.linear``) rebuilds its table from the recipe in its metadata.

Public parameters. H sets ρ/(5H), the sensitivities and the number of releases, so it is
``--horizon`` or the dataset's metadata (the environment's with ``--env``) — never the longest
episode; without one the run is refused. The feature table fixes S, A and d; ρ, δ and the
reward range complete the list, which privacy.json gives with each source
(`privrl.privacy.public.PublicParameters`). The number of episodes K comes from the file's
header (public under replace-one neighbours). The data are fitted to these by fixed rules
(`privrl.offline.common`: longer episodes truncated to H, steps outside the table masked,
rewards clipped to [0, 1]), never refused by a value of the data; DP-VAPVI refuses a dataset
with a unit_ids field (a schema decision: it protects one trajectory).

Every run writes the run directory contract (config.json, metrics.json, metrics.csv,
privacy.json, plots/values.png) and ``policy.npz`` (reload with
``privrl.offline.vapvi.load_policy``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

import numpy as np

from privrl.config import RunConfig, check, option
from privrl.runs.system import Plan, Result, RunContext, System
from privrl.systems.tabular import (
    check_budget,
    check_nonnegative,
    header_trajectories,
    seed_streams,
    stationary_option,
)

ENV_NAMES = ("linear-mdp",)
# Largest array a run builds (the [K, H] episode arrays, Q̂ [H, S, A], Λ̃ [H, d, d]).
MAX_ENTRIES = 50_000_000
# A ridge λ below this can leave Λ numerically singular (a Cholesky failure on some data).
LAMBDA_RANGE = (1e-6, 1e6)
DEFAULT_DELTA = 1e-5
DEFAULT_FAILURE_PROB = 0.05
DEFAULT_MATRIX_NOISE = "strict"


# ---------------------------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearConfig(RunConfig):
    """What the three linear-MDP systems share: the data source, H, the bonus and the ridge."""

    features: str | None = option(
        None,
        "--features",
        help="Feature table: a .npy array [S, A, d], or module:function returning one. "
        "Optional for data sampled from the built-in linear MDP.",
    )
    env: str | None = option(
        None, "--env", help="Sample the data from a built-in environment instead: linear-mdp."
    )
    episodes: int | None = option(None, "--episodes", "-K", help="Episodes to sample (with --env).")
    instance: int = option(0, "--instance", help="Instance of the built-in linear MDP (--env).")
    bonus_scale: float = option(
        1.0,
        "--bonus-scale",
        "-C",
        help="Multiplier C of the pessimism bonus (1 = theory).",
        allow_nan=True,
    )
    lam: float = option(1.0, "--lambda", help="Ridge parameter λ.", allow_nan=True)
    horizon: int | None = option(
        None,
        "--horizon",
        help="Horizon H (default: the dataset's metadata, or the environment's; never taken "
        "from the data). Longer episodes are truncated to H.",
    )
    stationary: bool = stationary_option("every regression sum pooled over h")

    def validate(self) -> None:
        check_nonnegative(self, "bonus_scale")
        lo, hi = LAMBDA_RANGE
        check(
            lo <= self.lam <= hi,
            "lam",
            f"must be in [{lo:g}, {hi:g}], got {self.lam:g} (a smaller ridge can leave Λ "
            "numerically singular)",
        )
        check(
            self.horizon is None or self.horizon >= 1,
            "horizon",
            f"must be >= 1, got {self.horizon}",
        )


@dataclass(frozen=True)
class VapviConfig(LinearConfig):
    """VAPVI: DP-VAPVI's code with the noise off (DP-VAPVI adds the budget)."""

    system = "vapvi"
    additive_bonus: float = option(
        0.0,
        "--additive-bonus",
        help="Numerator D of the additive D/K bonus (0 = off; theory: 2H³√d).",
        allow_nan=True,
    )
    split: bool = option(False, "--split", help="Split the data into halves (D', D).")

    def validate(self) -> None:
        check_nonnegative(self, "additive_bonus")
        super().validate()


@dataclass(frozen=True)
class DpVapviConfig(VapviConfig):
    """DP-VAPVI: VAPVI's settings plus the budget; ρ-zCDP for one trajectory (replace-one)."""

    system = "dp-vapvi"
    rho: float = option(
        ...,
        "--rho",
        help="zCDP budget ρ of the whole run, in [1e-6, 1e6].",
        allow_nan=True,
    )
    matrix_noise: Literal["strict", "paper_exact"] | None = option(
        None,
        "--matrix-noise",
        help="Gram-matrix noise: strict (default; ρ-zCDP under replace-one) or paper_exact "
        "(Algorithm 2's s² = 1/(4ρ0); the report then states 7ρ/5).",
    )
    delta: float | None = option(
        None, "--delta", help="δ at which ε is reported (default 1e-5).", allow_nan=True
    )
    failure_prob: float | None = option(
        None,
        "--failure-prob",
        help="Utility failure probability in the PD shift E (default 0.05).",
        allow_nan=True,
    )

    def validate(self) -> None:
        check_budget(self.rho, "rho", "vapvi")
        for key in ("delta", "failure_prob"):
            value = getattr(self, key)
            check(value is None or 0 < value < 1, key, f"must be in (0, 1), got {value}")
        super().validate()


@dataclass(frozen=True)
class PeviConfig(LinearConfig):
    """PEVI: pessimistic least-squares value iteration."""

    system = "pevi"
    xi: float = option(
        0.05,
        "--xi",
        help="Failure probability ξ in β = c·dH√log(2dHK/ξ).",
        allow_nan=True,
    )

    def validate(self) -> None:
        check(0 < self.xi < 1, "xi", f"must be in (0, 1), got {self.xi}")
        super().validate()


# ---------------------------------------------------------------------------------------------
# systems
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Public:
    """What is known before the ledger check: all public (flags, header, feature table)."""

    features: Any  # FeatureTable
    mdp: Any  # LinearMDP | None: the true model when known (exact suboptimality)
    H: int
    K: int


class _Loaded(NamedTuple):
    episodes: Any  # LinearEpisodes
    dataset: Any  # TrajectoryDataset


# The help of the non-private commands says why a ledgered dataset refuses them.
NOT_PRIVATE = "Refused on a dataset with a budget ledger (a non-private run would void its budget)."


class _LinearSystem(System):
    """The shared plan/load/run; a subclass says how it is private and which learner runs."""

    data = "optional"
    private: ClassVar[bool] = False

    def resolve(self, config: Any, params: Any) -> dict[str, Any]:
        """The privacy settings, resolved as public parameters (before the sizes)."""
        return {}

    def planned(self, settings: dict[str, Any], public: _Public, params: Any) -> Any:
        """The planned report (for the ledger)."""
        from privrl.offline.vapvi import RELATION, UNIT
        from privrl.privacy.report import PrivacyReport

        return PrivacyReport.non_private(UNIT, RELATION, system=self.name)

    def fit(
        self, config: Any, loaded: _Loaded, plan: Plan, rng: np.random.Generator, ctx: RunContext
    ) -> Any:
        """The learner's result (its `.report`, `.policy`, `.v`, `.q`, `.bonus`)."""
        raise NotImplementedError

    def plan(self, config: Any, header: Any) -> Plan:
        from privrl.privacy.public import PublicParameters

        _check_source(config, header)
        params = PublicParameters()
        settings = self.resolve(config, params)
        public = _prepare(config, header, params)
        report = self.planned(settings, public, params)
        published = {
            "command": f"privrl train {self.name}",
            "algorithm": self.name,
            "instance": config.instance if config.env is not None else None,
            "features": public.features.source,
            "feature_scale": public.features.scale,
            "horizon": public.H,
            "stationary": config.stationary,
            **settings,  # the resolved privacy settings (and E), which override the flags
            "lambda": config.lam,
        }
        facts = {"public": public, "params": params, "settings": settings}
        return Plan(report=report, public=published, facts=facts)

    def load(self, config: Any, source: Path | None, plan: Plan, rng: np.random.Generator) -> Any:
        """Read (or sample) the episodes — inside the ledger transaction."""
        from privrl.offline.common import refuse_declared_units
        from privrl.offline.vapvi import LinearEpisodes

        public: _Public = plan.facts["public"]
        if source is None:
            data_rng = np.random.default_rng(seed_streams(rng, 2)[0])
            dataset = public.mdp.sample(public.K, rng=data_rng)
        else:
            dataset = super().load(config, source, plan, rng)
        table = public.features
        episodes = LinearEpisodes.from_dataset(
            dataset, n_states=table.S, n_actions=table.A, horizon=public.H
        )
        if self.private:
            refuse_declared_units(dataset, self.name.upper())
        return _Loaded(episodes, dataset)

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        assert ctx.plan is not None
        public: _Public = ctx.plan.facts["public"]
        algo_rng = np.random.default_rng(seed_streams(rng, 2)[1])
        result = self.fit(config, data, ctx.plan, algo_rng, ctx)
        result.report.with_public_parameters(ctx.plan.facts["params"])
        metrics, curve, truth = _outputs(self.name, data.episodes, public, result)
        line = f"K = {metrics['K']}, H = {metrics['H']}, d = {metrics['d']}"
        if "suboptimality" in metrics:
            line += (
                f"; suboptimality v* − v^π̂ = {metrics['suboptimality']:.4f} "
                f"(v* = {metrics['v_star']:.4f})"
            )
        return Result(
            metrics=metrics,
            privacy=result.report,
            curve=curve,
            artifacts={"policy.npz": result.policy.save},
            plots={"values": partial(_plot_values, result=result, curve=truth, algo=self.name)},
            summary=[line],
        )


class DpVapviSystem(_LinearSystem):
    name = "dp-vapvi"
    Config = DpVapviConfig
    summary = "DP-VAPVI (Qiao & Wang, Algorithm 2): ρ-zCDP for one trajectory under replace-one."
    help = """DP-VAPVI (Qiao & Wang, Algorithm 2): ρ-zCDP for one trajectory under replace-one.

    The 5H statistics of variance-aware pessimistic value iteration are released with
    Gaussian noise (ρ/(5H) each); the privacy report lists every release. H, the feature
    table, ρ and δ are public (privacy.json lists each with its source); only the file's
    header is read before the dataset's ledger is checked.
    """
    private = True

    def resolve(self, config: Any, params: Any) -> dict[str, Any]:
        rho = params.resolve("zCDP budget ρ", flag=config.rho, fix="pass --rho")
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

    def planned(self, settings: dict[str, Any], public: _Public, params: Any) -> Any:
        from privrl.data.padding import entries_per_trajectory
        from privrl.offline.vapvi import (
            GRAM_SENSITIVITY,
            N_RELEASES_PER_STEP,
            dp_vapvi_planned_report,
            gram_shift,
        )

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

    def fit(
        self, config: Any, loaded: _Loaded, plan: Plan, rng: np.random.Generator, ctx: RunContext
    ) -> Any:
        from privrl.offline.vapvi import dp_vapvi

        s = plan.facts["settings"]
        return dp_vapvi(
            loaded.episodes,
            plan.facts["public"].features,
            rho=s["rho"],
            rng=rng,
            noise=ctx.noise.generator("dp-vapvi"),
            delta=s["delta"],
            failure_prob=s["failure_prob"],
            matrix_noise=s["matrix_noise"],
            bonus_scale=config.bonus_scale,
            lam=config.lam,
            additive_bonus=config.additive_bonus,
            split=config.split,
            stationary=config.stationary,
        )


class VapviSystem(_LinearSystem):
    name = "vapvi"
    Config = VapviConfig
    summary = "VAPVI (Yin et al. 2022): DP-VAPVI's code with the noise off. NOT private."
    help = f"""VAPVI (Yin et al. 2022): DP-VAPVI's code with the noise off. NOT private.

    {NOT_PRIVATE}
    """

    def fit(
        self, config: Any, loaded: _Loaded, plan: Plan, rng: np.random.Generator, ctx: RunContext
    ) -> Any:
        from privrl.offline.vapvi import vapvi

        return vapvi(
            loaded.episodes,
            plan.facts["public"].features,
            bonus_scale=config.bonus_scale,
            lam=config.lam,
            additive_bonus=config.additive_bonus,
            split=config.split,
            rng=rng,
            stationary=config.stationary,
        )


class PeviSystem(_LinearSystem):
    name = "pevi"
    Config = PeviConfig
    summary = "PEVI (Jin et al. 2021): pessimistic least-squares value iteration. NOT private."
    help = f"""PEVI (Jin et al. 2021): pessimistic least-squares value iteration. NOT private.

    {NOT_PRIVATE}
    """

    def fit(
        self, config: Any, loaded: _Loaded, plan: Plan, rng: np.random.Generator, ctx: RunContext
    ) -> Any:
        from privrl.offline.pevi import pevi

        features = plan.facts["public"].features
        return pevi(
            loaded.episodes,
            features,
            bonus_scale=config.bonus_scale,
            lam=config.lam,
            xi=config.xi,
            stationary=config.stationary,
        )


# ---------------------------------------------------------------------------------------------
# plan: the data source, the feature table, H and K (never the episodes)
# ---------------------------------------------------------------------------------------------


def _check_source(config: Any, header: Any) -> None:
    if (header is None) == (config.env is None):
        raise ValueError(
            "give exactly one data source: --data FILE [--features SPEC], or --env linear-mdp "
            "--episodes K"
        )
    if config.env is not None:
        if config.env not in ENV_NAMES:
            raise ValueError(f"unknown --env {config.env!r}; available: {', '.join(ENV_NAMES)}")
        check(
            config.episodes is not None and config.episodes >= 1,
            "env",
            "needs --episodes K with K >= 1",
        )
        check(
            config.features is None,
            "features",
            "is for --data; the environment brings its own features",
        )
    else:
        check(
            config.episodes is None,
            "episodes",
            "is for --env; with --data all episodes of the file are used",
        )


def _load_feature_spec(spec: str) -> np.ndarray:
    """A feature table from ``path.npy`` or ``module:function`` (public code or file)."""
    path = Path(spec)
    if spec.endswith(".npy") or path.is_file():
        from privrl.data.files import read_npy

        if not path.is_file():
            raise ValueError(f"--features: file not found: {spec}")
        return read_npy(path, "--features")
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ValueError(f"--features: cannot import {spec!r} ({exc})") from None
        if not callable(fn):
            raise ValueError(f"--features: {spec!r} is not a function")
        try:
            return np.asarray(fn())
        except Exception as exc:  # the user's code: any failure is bad input here
            raise ValueError(
                f"--features: calling {spec}() failed ({type(exc).__name__}: {exc}); it must take "
                "no arguments and return an array [S, A, d]"
            ) from None
    raise ValueError(
        f"--features: {spec!r} is neither a .npy file nor module:function (a zero-argument "
        "function returning an array [S, A, d])"
    )


def _prepare(config: Any, header: Any, params: Any) -> _Public:
    """The features, H and K from the config, the file's header and the feature table only
    (the episodes are not read), each recorded as a public parameter."""
    from privrl.envs.linear import LinearMDP, linear_mdp_from_metadata
    from privrl.offline.vapvi import FeatureTable
    from privrl.privacy.public import Source

    if header is None:
        mdp = LinearMDP.qiao_wang(config.instance)
        # φ is already divided by its max norm (mdp.scale = √7); record that factor.
        table = FeatureTable(phi=mdp.phi, scale=mdp.scale, source=f"{config.env}:{config.instance}")
        where = (Source.DEFAULT, f"the built-in {config.env} instance {config.instance}")
        H = params.resolve(
            "horizon H", flag=config.horizon, default=mdp.H, fix="", detail="the environment's"
        )
        K = params.resolve("number of trajectories K", flag=config.episodes, fix="pass --episodes")
        _check_sizes(max(H, mdp.H), table, K, h_flag="--horizon", k_flag="--episodes")
    else:
        meta = header.metadata
        recorded = meta.extra.get("linear_mdp")
        mdp = linear_mdp_from_metadata(meta.extra)
        if config.features is not None:
            array = _load_feature_spec(config.features)
            try:
                table = FeatureTable.from_array(array, source=config.features)
            except ValueError as exc:
                raise ValueError(f"--features: {exc}") from None
            if isinstance(recorded, dict) and recorded.get("dim") not in (None, table.d):
                raise ValueError(
                    f"--features: feature dimension mismatch: the table has d = {table.d} but "
                    f"the dataset was sampled with d = {recorded['dim']} features"
                )
            if mdp is not None and (
                mdp.phi.shape != table.phi.shape or not np.allclose(mdp.phi, table.phi)
            ):
                mdp = None  # user features differ from the generating model: no exact metric
            where = (Source.FLAG, f"--features {config.features}")
        elif mdp is not None:
            table = FeatureTable(
                phi=mdp.phi,
                scale=mdp.scale,
                source=f"linear-mdp:{mdp.recipe.get('instance')} (from metadata)",
            )
            where = (Source.METADATA, "the linear-MDP recipe in metadata field 'linear_mdp'")
        else:
            raise ValueError(
                "--features SPEC is required: the dataset records no built-in feature map "
                "(give a .npy array [S, A, d] or module:function)"
            )
        _check_spaces(meta, table)
        H = params.resolve(
            "horizon H",
            flag=config.horizon,
            metadata=meta,
            key="horizon",
            fix="pass --horizon H (the steps of an episode; longer episodes are truncated to H)",
        )
        K = header_trajectories(params, "number of trajectories K", header)
        if K < 1:
            raise ValueError(f"the dataset {header.path} has no episodes")
        h_flag = "--horizon" if config.horizon is not None else "the metadata's horizon H"
        _check_sizes(H, table, K, h_flag=h_flag, k_flag="the dataset's episode count K")
    params.given("feature table [S, A, d]", [table.S, table.A, table.d], *where)
    params.derive(
        "feature scale", table.scale, "the table's max norm if above 1, which it is divided by"
    )
    params.given("reward range", [0.0, 1.0], Source.DEFAULT, "rewards are clipped to [0, 1]")
    params.derive("value range", [0.0, float(H)], "[0, H]; values are clipped to it")
    return _Public(table, mdp, int(H), int(K))


def _at_most(value: int, name: str, maximum: int, why: str) -> None:
    if value > maximum:
        raise ValueError(f"{name} must be at most {maximum} ({why}), got {value}")


def _check_sizes(H: int, table: Any, K: int, *, h_flag: str, k_flag: str) -> None:
    """Refuse, before any work, sizes whose arrays cannot fit (all public), naming the flag
    (or the source) of the size at fault and the largest value that fits."""
    per_step = max(table.S * table.A, table.d * table.d)
    _at_most(
        H,
        h_flag,
        MAX_ENTRIES // per_step,
        f"H·S·A and H·d² with S={table.S}, A={table.A}, d={table.d} must stay within "
        f"the limit of {MAX_ENTRIES:.0e} entries (memory)",
    )
    _at_most(
        K,
        k_flag,
        MAX_ENTRIES // max(H, 1),
        f"K·H with H={H} must stay within the limit of {MAX_ENTRIES:.0e} entries (memory); "
        "or use a shorter horizon",
    )


def _check_spaces(meta: Any, table: Any) -> None:
    """The metadata's declared spaces against the feature table (public: spaces marked as
    inferred from the data are not compared — the data are fitted to the table instead)."""
    from gymnasium import spaces

    from privrl.privacy.public import inferred_fields

    inferred = set(inferred_fields(meta))
    obs_space = None if "observation_space" in inferred else meta.observation_space
    act_space = None if "action_space" in inferred else meta.action_space
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
            f"--features: feature dimension mismatch: the table has S = {table.S} states but "
            f"the dataset's observation space has {int(obs_space.n)}"
        )
    if isinstance(act_space, spaces.Discrete) and int(act_space.n) != table.A:
        raise ValueError(
            f"--features: feature dimension mismatch: the table has A = {table.A} actions but "
            f"the dataset's action space has {int(act_space.n)}"
        )


# ---------------------------------------------------------------------------------------------
# outputs: public, or post-processing of the releases
# ---------------------------------------------------------------------------------------------


def _outputs(
    algorithm: str, episodes: Any, public: _Public, result: Any
) -> tuple[dict[str, Any], list[dict[str, Any]], Any]:
    """metrics.json, the metrics.csv rows and the true value curves (when the model is known)."""
    H = episodes.H
    metrics: dict[str, Any] = {
        "algorithm": algorithm,
        "K": episodes.K,
        "H": H,
        "d": public.features.d,
        "epsilon": result.report.epsilon,
        "delta": result.report.delta,
        "rho": result.report.rho,
        # Post-processing of the releases: the pessimistic value Ṽ_1 per state.
        "pessimistic_value_per_state": result.v[0].tolist(),
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
                "pessimistic_value": float(mdp.d1 @ result.v[0]),
            }
        )
        truth = (np.asarray(evaluation.V), np.asarray(v_star))
    rows = []
    for h in range(H):
        row: dict[str, Any] = {
            "h": h + 1,
            "pessimistic_value_mean": float(result.v[h].mean()),
            "bonus_mean": float(result.bonus[h].mean()),
            "q_zero_fraction": float(np.mean(result.q[h] == 0.0)),
        }
        if truth is not None:
            row["policy_value_mean"] = float(truth[0][h].mean())
            row["optimal_value_mean"] = float(truth[1][h].mean())
        rows.append(row)
    return metrics, rows, truth


def _plot_values(path: Path, *, result: Any, curve: Any, algo: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    H = result.q.shape[0]
    steps = np.arange(1, H + 1)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for s in range(result.v.shape[1]):
        ax.plot(steps, result.v[:H, s], "o-", ms=3, label=f"pessimistic Ṽ_h(s={s})")
        if curve is not None:
            ax.plot(steps, curve[0][:H, s], "--", label=f"true V^π̂_h(s={s})")
            ax.plot(steps, curve[1][:H, s], ":", color="gray", label=f"V*_h(s={s})")
        if s >= 4:  # keep the legend readable for larger state sets
            break
    ax.set_xlabel("step h")
    ax.set_ylabel("value")
    ax.set_title(f"{algo}: values by step")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
