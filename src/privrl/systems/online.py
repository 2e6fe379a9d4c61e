"""Online episodic RL on the run layer: `sdp-pe`, `pe`, `ucbvi`, `dp-ucbvi`.

The learners are `privrl.online`'s objects (`SDPPE`, `PE`, `UCBVI`, `DPUCBVI`) and their
configs; this module adapts them to the run layer and the command line:

- each run config is the learner's config plus the public environment its users are
  simulated from (`OnlineEnvironment`: riverswim or random-tabular, its sizes S, A, H, the
  instance chosen by the run's seed), so these systems read no dataset and no ledger is
  involved; the privacy unit is one user's episode, replace-one;
- `plan` refuses sizes that cannot fit in this machine's memory, then calls the learner's
  `plan` with the sizes' sources (a flag, else the environment's default) and the flags as
  provenance; config.json lists the algorithm, S, A, H and its constants;
- `run` builds the environment (`make_env(..., seed=seed)`), calls the learner's `learn` (the
  users draw from `SeedSequence(seed).spawn(2)[0]`, the privacy noise from the run's
  `NoiseSource`, never from the seed) and writes metrics.json (`regret` = final cumulative
  regret), the regret curve as metrics.csv, the report and plots/regret.png.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np

from privrl.config import ConfigError, RunConfig, check, option
from privrl.online.common import ENVS
from privrl.online.learners import DPUCBVI, PE, SDPPE, UCBVI, OnlineLearner, Sizes
from privrl.online.sdp_pe import PEConfig, SDPPEConfig, check_shuffle_budget
from privrl.online.ucbvi import DPUCBVIConfig, UCBVIConfig
from privrl.privacy.limits import (
    InputError,
    check_int,
)
from privrl.privacy.public import Source
from privrl.runs.layer import OMIT
from privrl.runs.system import Plan, Result, RunContext, System

if TYPE_CHECKING:
    from collections.abc import Callable

    from privrl.algorithm import Fitted
    from privrl.data.io import DatasetHeader
    from privrl.online.common import OnlineResult

# The environments' default sizes (S, A, H) when --states/--actions/--horizon are not given
# (privrl.online.common.make_env).
DEFAULT_SIZES = {"riverswim": (4, 2, 5), "random-tabular": (3, 2, 4)}

# Memory model (measured: `online pe` holds ~16 bytes per episode at K = 10^7): the per-episode
# regret, its cumulative sum and the start states, plus the counts and models of the MDP, whose
# size is one "model" H·S·A·(S + 2) of float64. Copies of a model held at once: the MDP, its
# CDFs, counts, released counts and temporaries (16); the central privatizer adds two per tree
# level; the local privatizer pre-draws its noise for 512 users at a time.
_BYTES_PER_EPISODE = 32
_MODEL_COPIES = 16
_LOCAL_CHUNK = 512


def _checked(key: str, check_fn: Callable[..., Any], value: Any, **bounds: Any) -> None:
    """Run one of the shared input checks (`privrl.privacy.limits`) on a config field; its
    refusal becomes a `ConfigError` of `key` (on the command line: named by its flag)."""
    flag = _flag(key)
    try:
        check_fn(value, flag, **bounds)
    except InputError as exc:
        raise ConfigError(key, str(exc).removeprefix(flag + " ")) from None


def _flag(key: str) -> str:
    """The command-line flag of a config field (the provenance of a public parameter)."""
    return "--" + key.replace("_", "-")


# ---------------------------------------------------------------------------------------------
# configs: the learner's config plus the simulated environment
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OnlineEnvironment(RunConfig):
    """The public environment an online run simulates its users from, and its sizes."""

    env: str = option("riverswim", "--env", help="Environment: riverswim or random-tabular.")
    states: int | None = option(
        None, "--states", "-S", help="States (riverswim 4, random-tabular 3)."
    )
    actions: int | None = option(
        None, "--actions", "-A", help="Actions (random-tabular only; default 2)."
    )
    horizon: int | None = option(
        None, "--horizon", "-H", help="Horizon H (riverswim 5, random-tabular 4)."
    )

    def validate(self) -> None:
        check(
            self.env in ENVS,
            "env",
            f"names an unknown environment {self.env!r}; use one of: {', '.join(ENVS)}",
        )
        for key in ("states", "actions", "horizon"):
            if getattr(self, key) is not None:
                _checked(key, check_int, getattr(self, key), minimum=1)
        if self.env == "riverswim":
            check(
                self.actions in (None, 2),
                "actions",
                "must be left out: riverswim has exactly 2 actions",
            )
            check(self.states is None or self.states >= 2, "states", "must be >= 2 for riverswim")
        super().validate()

    def sizes(self) -> Sizes:
        """S, A, H: the flags, else the environment's defaults (public either way)."""
        S, A, H = DEFAULT_SIZES[self.env]
        return (
            S if self.states is None else self.states,
            A if self.actions is None else self.actions,
            H if self.horizon is None else self.horizon,
        )

    def size_sources(self) -> dict[str, tuple[Source, str]]:
        """Where S, A and H come from: a flag, or the environment's default."""
        flags = zip(("S", "A", "H"), (self.states, self.actions, self.horizon), strict=True)
        return {
            name: (Source.FLAG, "")
            if flag is not None
            else (Source.DEFAULT, f"the {self.env} environment")
            for name, flag in flags
        }


@dataclass(frozen=True)
class PeConfig(PEConfig, OnlineEnvironment):
    """PE on a simulated environment."""


@dataclass(frozen=True)
class SdpPeConfig(SDPPEConfig, OnlineEnvironment):
    """SDP-PE on a simulated environment (its ε is checked against the environment's H)."""

    def validate(self) -> None:
        super().validate()
        check_shuffle_budget(self.epsilon, self.delta, self.sizes()[2])


@dataclass(frozen=True)
class UcbviConfig(UCBVIConfig, OnlineEnvironment):
    """UCB-VI on a simulated environment."""


@dataclass(frozen=True)
class DpUcbviConfig(DPUCBVIConfig, OnlineEnvironment):
    """DP-UCBVI on a simulated environment."""


OnlineConfig = PeConfig | SdpPeConfig | UcbviConfig | DpUcbviConfig
C = TypeVar("C", PeConfig, SdpPeConfig, UcbviConfig, DpUcbviConfig)


# ---------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------


def check_memory(config: OnlineConfig, privatizer: str) -> None:
    """Refuse up front what cannot fit in memory: the per-episode arrays and the model copies
    (`_BYTES_PER_EPISODE`, `_MODEL_COPIES`); the message names the largest sizes that fit."""
    from privrl.privacy.limits import check_memory as check_bytes
    from privrl.privacy.limits import format_bytes, machine_memory
    from privrl.privacy.tree import tree_levels

    S, A, H = config.sizes()
    episodes = config.episodes
    copies = _MODEL_COPIES
    if privatizer == "central":
        copies += 2 * tree_levels(episodes)
    elif privatizer == "local":
        copies += _LOCAL_CHUNK
    per_entry = 8.0 * copies  # bytes per model entry, all copies
    model_bytes = per_entry * H * S * A * (S + 2)
    episode_bytes = float(episodes) * _BYTES_PER_EPISODE
    if episode_bytes >= model_bytes:
        _checked(
            "episodes",
            lambda v, flag: check_bytes(
                flag, v, _BYTES_PER_EPISODE, fixed_bytes=model_bytes, what="episode"
            ),
            episodes,
        )
        return
    available = machine_memory()
    if model_bytes + episode_bytes <= available:
        return
    room = max(available - episode_bytes, 0.0) / per_entry  # model entries that fit
    h_max = int(room // (S * A * (S + 2)))
    a_max = int(room // (H * S * (S + 2)))
    s_max = max(0, math.isqrt(int(room // (H * A)) + 1) - 1)  # S·(S+2) <= room / (H·A)
    limits = [f"{flag} {v}" for flag, v in (("--horizon", h_max), ("--states", s_max)) if v >= 1]
    if config.env != "riverswim" and a_max >= 1:
        limits.append(f"--actions {a_max}")
    fix = f"use at most {' or '.join(limits)}" if limits else "reduce --episodes"
    # several settings together: a plain ValueError, worded with the flags on either face
    raise ValueError(
        f"--states {S} --actions {A} --horizon {H} need about "
        f"{format_bytes(model_bytes + episode_bytes)} of memory (a model of H·S·A·(S+2) "
        f"entries, {copies} copies of 8 bytes), more than this machine's "
        f"{format_bytes(available)}; {fix} (with the others unchanged)",
    )


# ---------------------------------------------------------------------------------------------
# systems
# ---------------------------------------------------------------------------------------------


class OnlineSystem(System, Generic[C]):
    """Shared plan and run of the online systems: the learner of the config (`learner`)."""

    data = "none"
    Learner: ClassVar[type[OnlineLearner[Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.summary = (cls.__doc__ or "").strip()  # the command's help: one place

    def learner(self, config: C) -> OnlineLearner[Any]:
        """The learner of `config` (the run config is the learner's config, plus the env)."""
        return self.Learner(config)

    def plan(self, config: C, header: DatasetHeader | None) -> Plan:
        learner = self.learner(config)
        check_memory(config, learner.privatizer_kind())
        plan = learner.plan(config.sizes(), sizes_from=config.size_sources(), provenance=_flag)
        public = dict(plan.public)
        privacy = learner.privacy_fields
        # config.json has these keys for every algorithm (None where they do not apply)
        public |= {key: None for key in ("epsilon", "delta", "calibration") if key not in privacy}
        # the privatizer's description ("privatizer", unless that names a setting)
        if "privatizer" in config.field_map():
            public["privatizer_info"] = public.pop("privatizer")
        # the constants are published once, under "config"
        public |= {key: OMIT for key in _hidden_constants(config) if key not in public}
        return Plan(report=plan.report, public=public)

    def run(self, config: C, data: None, rng: np.random.Generator, ctx: RunContext) -> Result:
        from privrl.online.common import make_env

        learner = self.learner(config)
        mdp = make_env(
            config.env,
            states=config.states,
            actions=config.actions,
            horizon=config.horizon,
            seed=ctx.seed,
        )
        t0 = time.perf_counter()
        fitted = learner.learn(
            mdp, seed=ctx.seed, noise=ctx.noise, progress=ctx.progress, plan=ctx.plan
        )
        return online_result(learner.algorithm_name(), fitted, time.perf_counter() - t0)


def _hidden_constants(config: OnlineConfig) -> tuple[str, ...]:
    """The constants that are not command-line flags (config.json lists them under "config")."""
    return tuple(
        f.name
        for f in config.field_map().values()
        if not f.metadata.get("cli", True) and f.name in type(config).CONSTANTS
    )


class PeSystem(OnlineSystem[PeConfig]):
    """PE: SDP-PE's code with no privacy (raw counts) — the NON-PRIVATE baseline."""

    name = "pe"
    Config = PeConfig
    Learner = PE


class SdpPeSystem(OnlineSystem[SdpPeConfig]):
    """SDP-PE: policy elimination with shuffle-private counts, (ε, δ)-DP in the shuffle model."""

    name = "sdp-pe"
    Config = SdpPeConfig
    Learner = SDPPE


class UcbviSystem(OnlineSystem[UcbviConfig]):
    """UCB-VI (Azar et al. 2017): optimistic value iteration every episode — NON-PRIVATE."""

    name = "ucbvi"
    Config = UcbviConfig
    Learner = UCBVI


class DpUcbviSystem(OnlineSystem[DpUcbviConfig]):
    """DP-UCBVI (Qiao & Wang 2023): UCB-VI on private running counts (pure ε-DP)."""

    name = "dp-ucbvi"
    Config = DpUcbviConfig
    Learner = DPUCBVI


# ---------------------------------------------------------------------------------------------
# result: metrics, regret curve, plot, console summary
# ---------------------------------------------------------------------------------------------


def online_result(algo: str, fitted: Fitted[Any], seconds: float) -> Result:
    """The run directory of an online run: the learner's metrics (and the wall time), the
    regret curve at `checkpoints(K)`, its report, plots/regret.png and the console lines."""
    result: OnlineResult = fitted.details
    metrics: dict[str, Any] = {}
    for key, value in fitted.metrics.items():
        metrics[key] = value
        if key == "model":  # (metrics.json's order: the wall time after the report's figures)
            metrics["wall_time_s"] = seconds
    K = result.episodes
    grid = np.array([row["episode"] for row in fitted.curve], dtype=np.int64)
    cum = np.array([row["regret"] for row in fitted.curve])
    summary = [
        f"privrl online {algo}: {K} episodes",
        f"cumulative regret {metrics['regret']:.4g}",
        f"regret / episode (last 10%) {metrics['regret_per_episode_last_10pct']:.4g}",
        f"V*(s1) {metrics['optimal_value']:.4g}",
        f"wall time {seconds:.1f} s",
    ]
    return Result(
        metrics=metrics,
        privacy=fitted.report,
        curve=[dict(row) for row in fitted.curve],
        plots={"regret": partial(plot_regret, grid=grid, curve=cum, algo=algo, result=result)},
        summary=summary,
    )


def plot_regret(
    path: Path, *, grid: np.ndarray, curve: np.ndarray, algo: str, result: OnlineResult
) -> None:
    """Cumulative regret vs episode, SDP-PE's stage ends as dotted lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(grid, curve, label=algo)
    ends = np.cumsum([3 * e["T"] for e in result.log])
    for end in ends[ends < grid[-1]]:
        ax.axvline(end, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("episode")
    ax.set_ylabel("cumulative regret")
    ax.set_title(f"{algo}: {result.report.summary()[:60]}", fontsize=8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
