"""DP-APVI and APVI on the run layer: `privrl train dp-apvi | apvi` and `privrl run`.

The algorithms are `privrl.offline.DPAPVI` and `privrl.offline.APVI` (their configs, public
parameters, planned report and computation); this module only adapts them to the run layer.
Data come from a native HDF5 dataset (`--data FILE`) or are sampled from a random tabular MDP
(`--env random-tabular --episodes N`), in which case the exact suboptimality of the learned
policy is reported. `--reward-table FILE.npy` is loaded here into the library's `reward`
array.

Order of work with `--data` (the run layer's): the file's header only → `plan` (public
parameters, the planned report, the public reward table) → the dataset's ledger reserves the
spend → `load` reads the episodes → `run` → the run directory, staged and published, then the
reservation is completed.

Data are fitted to the public H, S, A by fixed rules (`privrl.offline.common`: longer
episodes truncated to H, steps outside the spaces not counted, rewards clipped to the public
`--reward-range` and mapped into [0, 1]), never refused by a value of the data. The reward
range comes from `--reward-range LOW,HIGH` or the dataset's metadata; a non-private run
defaults to [0, 1], a private run with `--privatize-rewards` refuses without one. A private
run refuses a dataset with a unit_ids field (a schema decision: these systems protect one
trajectory, not a unit of several).

Two δ's, kept apart on purpose: `--delta` is the paper's *utility* failure probability (it
sets the error bound E and ι, hence how pessimistic the learner is), `--privacy-delta` is the δ
at which the zCDP guarantee is stated as (ε, δ).

Re-exported for the other systems: `check_budget`, `check_nonnegative`, `check_positive`,
`header_trajectories`, `stationary_option` (from `privrl.offline.common`) and `seed_streams`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from privrl.config import Config, ConfigError, check, flags_of, option
from privrl.offline.apvi import (
    DEFAULT_PRIVACY_DELTA,
    DEFAULT_UTILITY_DELTA,
    APVIConfig,
    APVIResult,
    DPAPVIConfig,
    PrivacyConfig,
)
from privrl.offline.common import (
    BUDGET_RANGE,
    Names,
    check_budget,
    check_nonnegative,
    check_positive,
    header_trajectories,
    stationary_option,
    without_keyless_defaults,
)
from privrl.offline.tabular import APVI, DPAPVI, MAX_ENTRIES, check_sizes, fitted
from privrl.privacy.public import PublicParameters
from privrl.runs.layer import OMIT
from privrl.runs.system import Plan, Result, RunContext, System

if TYPE_CHECKING:
    from privrl.data.dataset import TrajectoryDataset
    from privrl.data.io import DatasetHeader
    from privrl.envs.tabular import Episodes, TabularMDP

__all__ = [
    "BUDGET_RANGE",
    "DEFAULT_PRIVACY_DELTA",
    "DEFAULT_UTILITY_DELTA",
    "ENVS",
    "ENV_DEFAULTS",
    "MAX_ENTRIES",
    "ApviConfig",
    "ApviSystem",
    "DpApviConfig",
    "DpApviSystem",
    "check_budget",
    "check_nonnegative",
    "check_positive",
    "header_trajectories",
    "seed_streams",
    "stationary_option",
]

ENVS = ("random-tabular",)
ENV_DEFAULTS = {"horizon": 10, "states": 10, "actions": 5}


def seed_streams(rng: np.random.Generator, n: int) -> list[np.random.SeedSequence]:
    """`n` independent streams spawned from the run's seed (the layer seeds `rng` with
    `default_rng(seed)`; these are the children of `SeedSequence(seed)`: same seed, same
    numbers)."""
    return np.random.SeedSequence(rng.bit_generator.seed_seq.entropy).spawn(n)  # type: ignore[attr-defined]


def flag_names(config_cls: type[Config], **extra: str) -> dict[str, str]:
    """Each setting of `config_cls` named by its first flag (how the library's messages name
    settings on the command line), plus `extra` (a library field the adapter fills)."""
    names = {f.name: flags_of(f)[0].split("/")[0] for f in dataclasses.fields(config_cls)}
    return {**names, **extra}


# ---------------------------------------------------------------------------------------------
# configs: the library's, plus where the data come from
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TabularSource(Config):
    """The data-source settings of the command line: a simulated MDP or a public reward file
    (the library takes the loaded array as `reward`)."""

    env: str | None = option(None, "--env", help="Sample the data instead: 'random-tabular'.")
    episodes: int | None = option(
        None, "--episodes", "-n", help="Trajectories to sample (with --env)."
    )
    reward_table: Path | None = option(  # noqa: RUF009 - option() builds a field
        None,
        "--reward-table",
        help="Public mean reward r_h(s,a): a .npy array [H, S, A] in the reward range.",
    )


def _validate_run_config(config: APVIConfig) -> None:
    """The library's checks, messages naming flags, and the data-source fields'."""
    config.validate_named(_names(type(config)))
    check_positive(config, "episodes")
    check(
        config.reward is None,
        "reward",
        "is the Python API's array; a run loads it from reward_table (a .npy file)",
    )


def _names(config_cls: type[Config]) -> Names:
    return flag_names(config_cls, reward="--reward-table")


@dataclass(frozen=True)
class ApviConfig(APVIConfig, TabularSource):
    """`privrl train apvi`: `privrl.offline.APVIConfig` plus the data source."""

    system = "apvi"

    def validate(self) -> None:
        _validate_run_config(self)

    def to_dict(self) -> dict[str, Any]:
        return without_keyless_defaults(self, super().to_dict())


@dataclass(frozen=True)
class DpApviConfig(DPAPVIConfig, TabularSource):
    """`privrl train dp-apvi`: `privrl.offline.DPAPVIConfig` plus the data source."""

    system = "dp-apvi"

    def validate(self) -> None:
        _validate_run_config(self)

    def to_dict(self) -> dict[str, Any]:
        return without_keyless_defaults(self, super().to_dict())


TabularRunConfig = ApviConfig | DpApviConfig
"""A run config of the tabular learners."""


def library_config(config: APVIConfig, reward: np.ndarray | None) -> APVIConfig:
    """The library's config of a run config (the data-source fields dropped), with the
    loaded public `reward`."""
    cls = DPAPVIConfig if isinstance(config, DPAPVIConfig) else APVIConfig
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls)}
    return cls(**{**values, "reward": reward})


# ---------------------------------------------------------------------------------------------
# systems
# ---------------------------------------------------------------------------------------------


class _Sampled(NamedTuple):
    """Episodes sampled from a random MDP (with --env), with the MDP for exact metrics."""

    episodes: Episodes
    mdp: TabularMDP
    min_prob: float


class ApviSystem(System):
    name = "apvi"
    Config = ApviConfig
    algorithm: type[APVI] = APVI
    data = "optional"
    summary = "APVI (Yin & Wang 2021): the NON-PRIVATE baseline — DP-APVI's code with no noise."
    help = """APVI (Yin & Wang 2021): the NON-PRIVATE baseline — DP-APVI's code with no noise.

    Its privacy.json says it is not private (ε = ∞). A dataset with a ledger refuses it.
    Without --reward-table the rewards are the empirical means of the data. Rewards of any
    sign: --reward-range LOW,HIGH (default: the metadata's, else [0, 1]).
    """

    def plan(  # type: ignore[override]
        self, config: TabularRunConfig, header: DatasetHeader | None
    ) -> Plan:
        if (header is None) == (config.env is None):
            raise ValueError("give exactly one data source: --data FILE or --env random-tabular")
        names = _names(type(config))
        if header is None:
            algorithm = self.algorithm(library_config(config, None))
            plan, source = _sampled_plan(algorithm, config, names)
        else:
            reward = _check_data_source(config)
            algorithm = self.algorithm(library_config(config, reward))
            try:
                plan = algorithm.plan(header, names=names)
            except ConfigError as exc:  # the array came from --reward-table
                if exc.key != "reward":
                    raise
                raise ConfigError("reward_table", exc.problem) from None
            source = {
                "data": str(header.path),
                "episodes": plan.facts["n"],
                "reward": (
                    f"public table {config.reward_table}"
                    if config.reward_table is not None
                    else "private (noisy sums)"
                    if config_privatizes(config)
                    else "empirical mean (non-private)"
                ),
            }
        public = {
            "data": OMIT,  # published as source.data
            "command": f"privrl train {self.name}",
            **plan.public,
            "source": source,
        }
        facts = {**plan.facts, "algorithm": algorithm}
        return Plan(report=plan.report, public=public, facts=facts)

    def load(  # type: ignore[override]
        self, config: TabularRunConfig, source: Path | None, plan: Plan, rng: np.random.Generator
    ) -> TrajectoryDataset | _Sampled:
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

    def run(  # type: ignore[override]
        self,
        config: TabularRunConfig,
        data: TrajectoryDataset | _Sampled,
        rng: np.random.Generator,
        ctx: RunContext,
    ) -> Result:
        assert ctx.plan is not None
        facts = ctx.plan.facts
        H, S, A = facts["sizes"]
        privacy: PrivacyConfig | None = facts["privacy"]
        algorithm: APVI = facts["algorithm"]
        sampled = isinstance(data, _Sampled)
        noise = ctx.noise.generator("dp-apvi") if privacy is not None else None
        reward = None
        if sampled and not (privacy is not None and privacy.privatize_rewards):
            reward = data.mdp.R
        result = algorithm.compute(
            data.episodes if sampled else data, ctx.plan, noise, reward=reward
        )
        extra = _exact_values(data.mdp, result) if sampled else {}
        fit = fitted(result, private=privacy is not None, extra=extra)
        metrics = dict(fit.metrics)
        return Result(
            metrics=metrics,
            privacy=fit.report,
            curve=list(fit.curve),
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
    algorithm = DPAPVI
    summary = "DP-APVI (Qiao & Wang, Algorithm 1): pessimistic value iteration on private counts."
    help = """DP-APVI (Qiao & Wang, Algorithm 1): pessimistic value iteration on private counts.

    Protects one whole trajectory under replace-one neighbours: ρ-zCDP with --rho (Gaussian
    noise σ² = 2H/ρ on the counts), or ε-DP with --epsilon (Laplace(4H/ε)). With --data the
    rewards are private: pass --reward-table (a public reward function) or --privatize-rewards
    with the public --reward-range LOW,HIGH (any sign; costs: e.g. -100,0) unless the dataset's
    metadata declares it.

    Examples:

      privrl train dp-apvi --env random-tabular --episodes 20000 --rho 1

      privrl train dp-apvi --data trips.h5 -H 10 --rho 1 --privatize-rewards

      privrl train dp-apvi --data costs.h5 --rho 1 --reward-table r.npy
    """


# ---------------------------------------------------------------------------------------------
# plan: the data source (the library plans from the sizes)
# ---------------------------------------------------------------------------------------------


def config_privatizes(config: APVIConfig) -> bool:
    """Whether a run releases noisy reward sums."""
    return isinstance(config, DPAPVIConfig) and config.privatize_rewards


def _sampled_plan(
    algorithm: APVI, config: TabularRunConfig, names: Names
) -> tuple[Plan, dict[str, Any]]:
    """The library's plan for data sampled from the simulated MDP, and the source record."""
    params = PublicParameters()
    # the simulated MDP's mean rewards lie in [0, 1] by construction: a public fact
    privacy, resolved = algorithm.settings(params, names, {"reward_range": [0.0, 1.0]})
    H, S, A, n = _env_sizes(config, params)
    privatize = privacy is not None and privacy.privatize_rewards
    plan = algorithm.sized_plan(
        params, privacy, resolved, (H, S, A, n), reward_given=not privatize, padding="none"
    )
    source = {
        "env": config.env,
        "episodes": n,
        "behaviour": f"full support, π_h(a|s) ≥ {0.25 / A:g} (0.25/A)",
        "reward": "private (noisy sums)" if privatize else "public (the MDP's mean reward)",
    }
    return plan, source


def _env_sizes(config: TabularRunConfig, params: PublicParameters) -> tuple[int, int, int, int]:
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
    rr = config.reward_range
    check(
        rr is None or (rr[0] <= 0.0 and rr[1] >= 1.0),
        "reward_range",
        f"{list(rr or ())} does not hold the simulated MDP's rewards, which lie in [0, 1]; "
        "drop it with --env",
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
    check_sizes(H, S, A, n, stationary=config.stationary)
    return H, S, A, n


def _check_data_source(config: TabularRunConfig) -> np.ndarray | None:
    """The command line's checks of a run on a dataset (before the header is read by the
    library's plan), and the public reward table loaded from --reward-table."""
    check(config.episodes is None, "episodes", "is for --env (a dataset has its own episodes)")
    private = isinstance(config, DPAPVIConfig)
    privatize = config_privatizes(config)
    if private and config.reward_table is None and not privatize:
        raise ValueError(
            "the rewards in --data are private: pass --reward-table FILE.npy (a public mean "
            "reward r_h(s,a)) or --privatize-rewards (spends part of the budget on reward sums)"
        )
    if privatize and config.reward_table is not None:
        raise ValueError("give --reward-table or --privatize-rewards, not both")
    return _load_reward(config.reward_table)


def _load_reward(path: Path | None) -> np.ndarray | None:
    """The public reward table (a file the user declares public); the library checks it
    against H, S, A."""
    if path is None:
        return None
    if not path.is_file():
        raise ValueError(f"reward table not found: {path}")
    from privrl.data.files import read_npy

    return read_npy(path, "--reward-table")


def _exact_values(mdp: TabularMDP, result: APVIResult) -> dict[str, float]:
    """The learned policy's exact value and suboptimality on the simulated MDP."""
    v_star = mdp.optimal_value()
    v_pi = float(mdp.value(result.policy.actions))
    return {
        "suboptimality": v_star - v_pi,
        "optimal_value": v_star,
        "policy_value": v_pi,
        "pessimistic_value": float(mdp.d1 @ result.original_values()[0]),
    }


# ---------------------------------------------------------------------------------------------
# outputs: everything is public or post-processing of the releases
# ---------------------------------------------------------------------------------------------


def _summary(
    algo: str, sizes: tuple[int, int, int, int], result: APVIResult, metrics: dict[str, Any]
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
        lines.append(_no_information_warning(result))
    return lines


def _no_information_warning(result: APVIResult) -> str:
    """Why every pessimistic value is at its floor, from public facts only (never a count
    of the data): the reward range the run used and where it came from, then the bonus."""
    rr = result.reward_range
    floor = rr.value(0.0, result.values.V.shape[0] - 1)
    text = (
        "[yellow]warning:[/] every pessimistic value is 0 (in the rewards' units mapped into "
        f"[0, 1]; H·LOW = {floor:g} on the declared range), so the policy carries no "
        "information. "
    )
    if (rr.low, rr.high) == (0.0, 1.0):
        text += (
            "The reward range is [0, 1] (the default unless --reward-range or the metadata "
            "declared it): rewards outside it were clipped into it, so if yours are negative "
            "or above 1 (costs, scores), pass --reward-range LOW,HIGH. Otherwise: "
        )
    return text + (
        "the bonus exceeds the value range at this n (at --bonus-scale 1 the privacy term "
        "C2·S·H·E·ι/ñ needs ñ > C2·S·E·ι per pair). More data, a larger budget or a smaller "
        "--bonus-scale (chosen on other data, never on this dataset) would help."
    )


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
