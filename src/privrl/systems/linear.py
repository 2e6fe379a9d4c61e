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
rewards clipped to the public --reward-range and mapped into [0, 1]), never refused by a value
of the data; DP-VAPVI refuses a dataset with a unit_ids field (a schema decision: it protects
one trajectory) and, unless the metadata declares it, a run without --reward-range.

Every run writes the run directory contract (config.json, metrics.json, metrics.csv,
privacy.json, plots/values.png) and ``policy.npz`` (reload with
``privrl.offline.vapvi.load_policy``).
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from privrl.config import Config, check, option
from privrl.offline.common import without_keyless_defaults
from privrl.offline.linear import (
    DPVAPVI,
    MAX_ENTRIES,
    PEVI,
    VAPVI,
    LinearPublic,
    check_sizes,
    outputs,
    record_table,
    reward_range_of,
)
from privrl.offline.pevi import PEVIConfig
from privrl.offline.vapvi import (
    DEFAULT_DELTA,
    DEFAULT_FAILURE_PROB,
    DEFAULT_MATRIX_NOISE,
    LAMBDA_RANGE,
    DPVAPVIConfig,
    FeatureTable,
    LinearConfig,
    LinearEpisodes,
    LinearPVIResult,
    VAPVIConfig,
)
from privrl.privacy.public import PublicParameters, Source
from privrl.runs.system import Plan, Result, RunContext, System
from privrl.systems.tabular import flag_names, seed_streams

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset
    from privrl.data.io import DatasetHeader
    from privrl.offline.linear import _LinearLearner

__all__ = [
    "DEFAULT_DELTA",
    "DEFAULT_FAILURE_PROB",
    "DEFAULT_MATRIX_NOISE",
    "ENV_NAMES",
    "LAMBDA_RANGE",
    "MAX_ENTRIES",
    "DpVapviConfig",
    "DpVapviSystem",
    "PeviConfig",
    "PeviSystem",
    "VapviConfig",
    "VapviSystem",
]

ENV_NAMES = ("linear-mdp",)


# ---------------------------------------------------------------------------------------------
# configs: the library's, plus where the data and the features come from
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearSource(Config):
    """The data-source settings of the command line: the feature spec the adapter loads into
    the library's `phi`, or the built-in linear MDP to sample from."""

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


def _names(config_cls: type[Config]) -> dict[str, str]:
    return flag_names(config_cls, phi="--features")


def _validate_run_config(config: LinearConfig) -> None:
    """The library's checks, messages naming flags, and the data-source fields'."""
    config.validate_named(_names(type(config)))
    check(
        config.phi is None,
        "phi",
        "is the Python API's array; a run loads it from features (a .npy file or module:function)",
    )


@dataclass(frozen=True)
class VapviConfig(VAPVIConfig, LinearSource):
    """`privrl train vapvi`: `privrl.offline.VAPVIConfig` plus the data source."""

    system = "vapvi"

    def validate(self) -> None:
        _validate_run_config(self)

    def to_dict(self) -> dict[str, Any]:
        return without_keyless_defaults(self, super().to_dict())


@dataclass(frozen=True)
class DpVapviConfig(DPVAPVIConfig, LinearSource):
    """`privrl train dp-vapvi`: `privrl.offline.DPVAPVIConfig` plus the data source."""

    system = "dp-vapvi"

    def validate(self) -> None:
        _validate_run_config(self)

    def to_dict(self) -> dict[str, Any]:
        return without_keyless_defaults(self, super().to_dict())


@dataclass(frozen=True)
class PeviConfig(PEVIConfig, LinearSource):
    """`privrl train pevi`: `privrl.offline.PEVIConfig` plus the data source."""

    system = "pevi"

    def validate(self) -> None:
        _validate_run_config(self)

    def to_dict(self) -> dict[str, Any]:
        return without_keyless_defaults(self, super().to_dict())


LinearRunConfig = VapviConfig | DpVapviConfig | PeviConfig
"""A run config of the linear learners."""

_LIBRARY: dict[type[Config], type[LinearConfig]] = {
    VapviConfig: VAPVIConfig,
    DpVapviConfig: DPVAPVIConfig,
    PeviConfig: PEVIConfig,
}


def library_config(config: LinearConfig, phi: FeatureTable | None) -> LinearConfig:
    """The library's config of a run config (the data-source fields dropped), with the
    loaded feature table."""
    cls = _LIBRARY[type(config)]
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls)}
    return cls(**{**values, "phi": phi})


# ---------------------------------------------------------------------------------------------
# systems
# ---------------------------------------------------------------------------------------------


class _Loaded(NamedTuple):
    episodes: LinearEpisodes
    dataset: TrajectoryDataset


# The help of the non-private commands says why a ledgered dataset refuses them.
NOT_PRIVATE = "Refused on a dataset with a budget ledger (a non-private run would void its budget)."


class _LinearSystem(System):
    """The shared plan/load/run of the adapters; the library object does the work."""

    data = "optional"
    algorithm: ClassVar[type[_LinearLearner[Any]]]

    def plan(  # type: ignore[override]
        self, config: LinearRunConfig, header: DatasetHeader | None
    ) -> Plan:
        _check_source(config, header)
        names = _names(type(config))
        table = _load_features(config.features) if config.features is not None else None
        algorithm = self.algorithm(library_config(config, table))
        if header is None:
            params = PublicParameters()
            settings = algorithm.resolve(params, names)
            plan = algorithm.sized_plan(settings, _env_public(config, params), params)
        else:
            _check_features_given(config, header)
            plan = algorithm.plan(header, names=names)
        published = {
            "command": f"privrl train {self.name}",
            **plan.public,
            "instance": config.instance if config.env is not None else None,
        }
        return Plan(plan.report, published, {**plan.facts, "algorithm": algorithm})

    def load(  # type: ignore[override]
        self, config: LinearRunConfig, source: Path | None, plan: Plan, rng: np.random.Generator
    ) -> _Loaded:
        """Read (or sample) the episodes — inside the ledger transaction."""
        public: LinearPublic = plan.facts["public"]
        if source is None:
            data_rng = np.random.default_rng(seed_streams(rng, 2)[0])
            dataset = public.mdp.sample(public.K, rng=data_rng)  # type: ignore[union-attr]
        else:
            dataset = super().load(config, source, plan, rng)
        return _Loaded(plan.facts["algorithm"].episodes(dataset, plan), dataset)

    def run(  # type: ignore[override]
        self, config: LinearRunConfig, data: _Loaded, rng: np.random.Generator, ctx: RunContext
    ) -> Result:
        assert ctx.plan is not None
        public: LinearPublic = ctx.plan.facts["public"]
        algorithm: _LinearLearner[Any] = ctx.plan.facts["algorithm"]
        algo_rng = np.random.default_rng(seed_streams(rng, 2)[1])
        noise = ctx.noise.generator(self.name) if algorithm.private else None
        result = algorithm.compute(data.episodes, ctx.plan, algo_rng, noise)
        metrics, curve, truth = outputs(self.name, data.episodes, public, result)
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
    algorithm = DPVAPVI
    summary = "DP-VAPVI (Qiao & Wang, Algorithm 2): ρ-zCDP for one trajectory under replace-one."
    help = """DP-VAPVI (Qiao & Wang, Algorithm 2): ρ-zCDP for one trajectory under replace-one.

    The 5H statistics of variance-aware pessimistic value iteration are released with
    Gaussian noise (ρ/(5H) each); the privacy report lists every release. H, the feature
    table, ρ and δ are public (privacy.json lists each with its source); only the file's
    header is read before the dataset's ledger is checked.
    """


class VapviSystem(_LinearSystem):
    name = "vapvi"
    Config = VapviConfig
    algorithm = VAPVI
    summary = "VAPVI (Yin et al. 2022): DP-VAPVI's code with the noise off. NOT private."
    help = f"""VAPVI (Yin et al. 2022): DP-VAPVI's code with the noise off. NOT private.

    {NOT_PRIVATE}
    """


class PeviSystem(_LinearSystem):
    name = "pevi"
    Config = PeviConfig
    algorithm = PEVI
    summary = "PEVI (Jin et al. 2021): pessimistic least-squares value iteration. NOT private."
    help = f"""PEVI (Jin et al. 2021): pessimistic least-squares value iteration. NOT private.

    {NOT_PRIVATE}
    """


# ---------------------------------------------------------------------------------------------
# plan: the data source and the feature spec (the library plans from the header)
# ---------------------------------------------------------------------------------------------


def _check_source(config: LinearRunConfig, header: DatasetHeader | None) -> None:
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


def _check_features_given(config: LinearRunConfig, header: DatasetHeader) -> None:
    """Without --features the dataset must record the built-in MDP's recipe."""
    from privrl.envs.linear import linear_mdp_from_metadata

    if config.features is None and linear_mdp_from_metadata(header.metadata.extra) is None:
        raise ValueError(
            "--features SPEC is required: the dataset records no built-in feature map "
            "(give a .npy array [S, A, d] or module:function)"
        )


def _env_public(config: LinearRunConfig, params: PublicParameters) -> LinearPublic:
    """The built-in linear MDP's features, H and K (public choices), recorded in `params`."""
    from privrl.envs.linear import LinearMDP

    mdp = LinearMDP.qiao_wang(config.instance)
    # φ is already divided by its max norm (mdp.scale = √7); record that factor.
    table = FeatureTable(phi=mdp.phi, scale=mdp.scale, source=f"{config.env}:{config.instance}")
    where = (Source.DEFAULT, f"the built-in {config.env} instance {config.instance}")
    H = params.resolve(
        "horizon H", flag=config.horizon, default=mdp.H, fix="", detail="the environment's"
    )
    K = params.resolve("number of trajectories K", flag=config.episodes, fix="pass --episodes")
    check_sizes(max(H, mdp.H), table, K, h_name="--horizon", k_name="--episodes")
    # the built-in MDP's rewards lie in [0, 1] by construction: a public fact
    rr = reward_range_of(config, {"reward_range": [0.0, 1.0]}, params, None)
    return record_table(params, LinearPublic(table, mdp, int(H), int(K), rr), where)


def _load_features(spec: str) -> FeatureTable:
    """The feature table of ``--features`` (a public file or code), validated and rescaled."""
    array = _load_feature_spec(spec)
    try:
        return FeatureTable.from_array(array, source=spec)
    except ValueError as exc:
        raise ValueError(f"--features: {exc}") from None


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


def _plot_values(
    path: Path, *, result: LinearPVIResult, curve: tuple[np.ndarray, np.ndarray] | None, algo: str
) -> None:
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
