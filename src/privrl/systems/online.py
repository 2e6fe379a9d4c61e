"""Online episodic RL with a privacy model on the run layer: `sdp-pe`, `pe`, `ucbvi`, `dp-ucbvi`.

Each episode is one user. SDP-PE (Bai et al., "Secure RL via Shuffle Privacy Model") is
(ε, δ)-DP in the shuffle model (no trusted server); DP-UCBVI (Qiao & Wang 2023) is ε-JDP with
`privatizer = "central"` (trusted server, binary-tree counts) or ε-LDP with `"local"`; PE and
UCB-VI are the same code without privacy. The users are simulated from a public environment
(riverswim or random-tabular, its instance chosen by the run's seed), so these systems read no
dataset and no ledger is involved; the privacy unit is one user's episode, replace-one.

The algorithms live in `privrl.online` (`sdp_pe`, `ucbvi`); this module only adapts them:

- `plan` resolves S, A, H (flags, else the environment's defaults), the number of users K and
  the privacy flags as public parameters, refuses sizes that cannot fit in memory, and states
  the planned report (the privatizer the run will use, before it releases anything);
- `run` builds the environment, simulates K users and returns the exact regret (backward
  induction on the true MDP) as metrics.json (`regret` = final cumulative regret), the regret
  curve as metrics.csv, the privatizer's report and plots/regret.png.

Seeds: as before the run layer, the environment instance is `make_env(..., seed=seed)` and the
users draw from `SeedSequence(seed).spawn(2)[0]`; the privacy noise comes from the run's secure
`NoiseSource` (`RunContext.noise`), never from the seed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from privrl.config import ConfigError, RunConfig, check, option
from privrl.online.common import ENVS
from privrl.privacy.limits import (
    InputError,
    check_delta,
    check_int,
    check_number,
)
from privrl.privacy.noise import NoiseSource
from privrl.runs.system import Plan, Result, RunContext, System

if TYPE_CHECKING:
    from privrl.envs.tabular import TabularMDP
    from privrl.online.common import OnlineResult
    from privrl.online.privatizers import Privatizer
    from privrl.privacy.public import PublicParameters

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

# SDP-PE's tight calibration is exact over Bin(N, p) with N ≈ λ = 50·ln(2/δ')/ε'² trials per
# counter (ε' = ε/(6H), δ' = δ/(6H)); its cost grows with N (measured: λ ≈ 7e9, i.e. ε = 0.01
# at H = 5, takes minutes and 0.2 GB; λ ≈ 7e11 does not finish and takes GBs). Refused above:
_MAX_SHUFFLE_TRIALS = 1e10


def _checked(key: str, check_fn: Callable[..., Any], value: Any, **bounds: Any) -> None:
    """Run one of the shared input checks (`privrl.privacy.limits`) on a config field; its
    refusal becomes a `ConfigError` of `key` (on the command line: the same text as before)."""
    flag = "--" + key.replace("_", "-")
    try:
        check_fn(value, flag, **bounds)
    except InputError as exc:
        raise ConfigError(key, str(exc).removeprefix(flag + " ")) from None


# ---------------------------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OnlineConfig(RunConfig):
    """What every online run chooses: the public environment, its sizes and K users."""

    env: str = option("riverswim", "--env", help="Environment: riverswim or random-tabular.")
    episodes: int = option(
        100_000, "--episodes", "-K", help="Number of episodes (users) K (must fit in memory)."
    )
    states: int | None = option(
        None, "--states", "-S", help="States (riverswim 4, random-tabular 3)."
    )
    actions: int | None = option(
        None, "--actions", "-A", help="Actions (random-tabular only; default 2)."
    )
    horizon: int | None = option(
        None, "--horizon", "-H", help="Horizon H (riverswim 5, random-tabular 4)."
    )
    beta: float = option(
        0.1, help="Utility failure probability β in ι and E (not a privacy parameter)."
    )

    def validate(self) -> None:
        check(
            self.env in ENVS,
            "env",
            f"names an unknown environment {self.env!r}; use one of: {', '.join(ENVS)}",
        )
        _checked("episodes", check_int, self.episodes, minimum=1)
        _checked("beta", check_number, self.beta, gt=0, lt=1)
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

    def sizes(self) -> tuple[int, int, int]:
        """S, A, H: the flags, else the environment's defaults (public either way)."""
        S, A, H = DEFAULT_SIZES[self.env]
        return (
            S if self.states is None else self.states,
            A if self.actions is None else self.actions,
            H if self.horizon is None else self.horizon,
        )


@dataclass(frozen=True)
class PeConfig(OnlineConfig):
    """PE / SDP-PE: policy elimination's constants (theory shapes, constant 1 by default)."""

    system: ClassVar[str] = "pe"
    width_scale: float = option(1.0, help="Elimination width scale c.")
    threshold_c1: float = option(1.0, help="F threshold: c1·H²·ι.")
    threshold_c2: float = option(1.0, help="F threshold: c2·H·E.")
    simulation: Literal["counts", "episodes"] = option(
        "counts",
        help="How the simulator makes a batch's visit counts: counts (drawn from their exact "
        "law, fast at 10⁸ episodes) or episodes (each user's episode stepped; the same law, "
        "slower; a user's own trajectory exists only here).",
        keyless_default=True,  # counts: what runs did before the option existed
    )

    def validate(self) -> None:
        super().validate()
        for key in ("width_scale", "threshold_c1", "threshold_c2"):
            _checked(key, check_number, getattr(self, key), ge=0)

    def algorithm(self) -> Any:
        """The library's `SDPPEConfig` of these settings."""
        from privrl.online.sdp_pe import SDPPEConfig

        return SDPPEConfig(
            beta=self.beta,
            width_scale=self.width_scale,
            threshold_c1=self.threshold_c1,
            threshold_c2=self.threshold_c2,
        )


@dataclass(frozen=True)
class SdpPeConfig(PeConfig):
    """SDP-PE: PE on shuffle-private counts, (ε, δ)-DP in the shuffle model."""

    system: ClassVar[str] = "sdp-pe"
    epsilon: float = option(..., "--epsilon", help="Privacy budget ε (1e-6 to 100).")
    delta: float = option(1e-5, help="Privacy δ in (0, 1).")
    calibration: Literal["tight", "theory"] = option(
        "tight", help="Binomial noise: tight (exact, default) or theory."
    )

    def validate(self) -> None:
        _checked("delta", check_delta, self.delta)
        super().validate()
        self._check_shuffle_noise()

    def _check_shuffle_noise(self) -> None:
        """Refuse an ε whose binomial noise is too large to calibrate (`_MAX_SHUFFLE_TRIALS`)."""
        from privrl.privacy.shuffle import theory_lambda

        H = self.sizes()[2]
        eps_c, delta_c = self.epsilon / (6 * H), self.delta / (6 * H)
        lam = theory_lambda(eps_c, delta_c)
        # smallest ε with λ ≤ the cap: ε' = sqrt(50·ln(2/δ')/cap), ε = 6H·ε'
        least = 6 * H * math.sqrt(50.0 * math.log(2.0 / delta_c) / _MAX_SHUFFLE_TRIALS)
        check(
            lam <= _MAX_SHUFFLE_TRIALS,
            "epsilon",
            f"{self.epsilon:g} is too small for SDP-PE at H = {H}: each counter's binomial "
            f"noise would need ~{lam:.2g} trials (λ = 50·ln(2/δ')/ε'², ε' = ε/(6H)), more than "
            f"the {_MAX_SHUFFLE_TRIALS:.0e} its calibration can handle; use --epsilon >= "
            f"{least:.3g}",
        )


@dataclass(frozen=True)
class UcbviConfig(OnlineConfig):
    """UCB-VI / DP-UCBVI: the bonus constant."""

    system: ClassVar[str] = "ucbvi"
    bonus_scale: float = option(1.0, help="Bonus constant C.")

    def validate(self) -> None:
        super().validate()
        _checked("bonus_scale", check_number, self.bonus_scale, ge=0)

    def algorithm(self) -> Any:
        """The library's `UCBVIConfig` of these settings."""
        from privrl.online.ucbvi import UCBVIConfig

        return UCBVIConfig(bonus_scale=self.bonus_scale, beta=self.beta)


@dataclass(frozen=True)
class DpUcbviConfig(UcbviConfig):
    """DP-UCBVI: UCB-VI on private running counts (pure ε-DP)."""

    system: ClassVar[str] = "dp-ucbvi"
    epsilon: float = option(..., "--epsilon", help="Privacy budget ε (1e-6 to 100).")
    privatizer: Literal["central", "local"] = option(
        "central", help="central (ε-JDP, trusted server) or local (ε-LDP)."
    )

    def validate(self) -> None:
        super().validate()


# ---------------------------------------------------------------------------------------------
# plan: public parameters, memory, planned report
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


def public_parameters(config: OnlineConfig, **privacy: Any) -> PublicParameters:
    """What sets the noise of a private online run — the environment's S, A, H, the number of
    users K and the privacy flags — with its public source (the users are simulated from a
    public environment; nothing here is read off their data)."""
    from privrl.privacy.public import PublicParameters, Source

    params = PublicParameters()
    for name, flag, value in zip(
        ("S", "A", "H"),
        (config.states, config.actions, config.horizon),
        config.sizes(),
        strict=True,
    ):
        if flag is not None:
            params.given(name, int(flag), Source.FLAG)
        else:
            params.given(name, int(value), Source.DEFAULT, f"the {config.env} environment")
    params.given("episodes (users) K", int(config.episodes), Source.FLAG, "--episodes")
    for name, value in privacy.items():
        if value is not None:
            params.given(name, value, Source.FLAG, f"--{name.replace('_', '-')}")
    return params


def make_privatizer(kind: str, config: OnlineConfig, rng: np.random.Generator) -> Privatizer:
    """The planned privatizer of a run ("none", "shuffle", "central" or "local"), built from
    public values only; it is never given data, so its generator is never drawn from."""
    from privrl.online.privatizers import (
        CentralPrivatizer,
        IdentityPrivatizer,
        LocalPrivatizer,
        ShufflePrivatizer,
    )

    S, A, H = config.sizes()
    if kind == "shuffle":
        return ShufflePrivatizer(
            H,
            S,
            A,
            epsilon=config.epsilon,  # type: ignore[attr-defined]
            delta=config.delta,  # type: ignore[attr-defined]
            rng=rng,
            calibration=config.calibration,  # type: ignore[attr-defined]
            beta=config.beta,
        )
    if kind in ("central", "local"):
        cls = CentralPrivatizer if kind == "central" else LocalPrivatizer
        return cls(
            H,
            S,
            A,
            epsilon=config.epsilon,  # type: ignore[attr-defined]
            episodes=config.episodes,
            rngs=[rng],
            beta=config.beta,
        )
    return IdentityPrivatizer()


# ---------------------------------------------------------------------------------------------
# systems
# ---------------------------------------------------------------------------------------------


class OnlineSystem(System):
    """Shared plan and result of the online systems; subclasses say which privatizer and
    simulate the users (`simulate`)."""

    data = "none"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.summary = (cls.__doc__ or "").strip()  # the command's help: one place

    def privatizer_kind(self, config: Any) -> str:
        """The privatizer the run uses: none, shuffle, central or local (`make_privatizer`)."""
        return "none"

    def algorithm_name(self, config: Any) -> str:
        return self.name

    def privacy_flags(self, config: Any) -> dict[str, Any]:
        """The privacy flags listed as public parameters (empty: a non-private run)."""
        return {}

    def plan(self, config: Any, header: Any | None) -> Plan:
        kind = self.privatizer_kind(config)
        check_memory(config, kind)
        algo = self.algorithm_name(config)
        S, A, H = config.sizes()
        planned = make_privatizer(kind, config, NoiseSource.secure().generator("planning"))
        report = planned.report(system=algo)
        flags = self.privacy_flags(config)
        if flags:
            report.with_public_parameters(public_parameters(config, **flags))
        public: dict[str, Any] = {"algorithm": algo, "S": S, "A": A, "H": H}
        # config.json has these keys for every algorithm (None where they do not apply)
        public |= {key: None for key in ("epsilon", "delta", "calibration") if key not in flags}
        public |= self.planned_info(config, (S, A, H))
        # the privatizer's description ("privatizer" as before, unless that names a setting)
        key = "privatizer_info" if "privatizer" in config.field_map() else "privatizer"
        public[key] = planned.describe()
        return Plan(report=report, public=public)

    def planned_info(self, config: Any, sizes: tuple[int, int, int]) -> dict[str, Any]:
        """The algorithm's constants as config.json lists them (public: from the config)."""
        return {"config": asdict(config.algorithm())}

    def simulate(
        self,
        config: Any,
        mdp: TabularMDP,
        seed: int,
        progress: Callable[[int], None],
        noise: NoiseSource,
    ) -> tuple[OnlineResult, dict[str, Any]]:
        """Run the algorithm on `mdp` for K simulated users (`seed`: the users; `noise`: the
        privacy noise); its result and extra metrics."""
        raise NotImplementedError

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        from privrl.online.common import make_env

        algo = self.algorithm_name(config)
        mdp = make_env(
            config.env,
            states=config.states,
            actions=config.actions,
            horizon=config.horizon,
            seed=ctx.seed,
        )
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            ctx.progress(algo, done, config.episodes)

        t0 = time.perf_counter()
        result, extra = self.simulate(config, mdp, ctx.seed, advance, ctx.noise)
        return online_result(algo, result, extra, time.perf_counter() - t0, mdp)


class PeSystem(OnlineSystem):
    """PE: SDP-PE's code with no privacy (raw counts) — the NON-PRIVATE baseline."""

    name = "pe"
    Config = PeConfig

    def planned_info(self, config: Any, sizes: tuple[int, int, int]) -> dict[str, Any]:
        from privrl.online.sdp_pe import stage_schedule

        S, A, H = sizes
        algorithm = config.algorithm()
        B = algorithm.batch(H, S, A)
        return {
            "config": asdict(algorithm),
            "base_batch": B,
            "stages_planned": len(stage_schedule(config.episodes, B)),
        }

    def privatizer(self, config: Any, mdp: TabularMDP, noise: np.random.Generator) -> Privatizer:
        from privrl.online.privatizers import IdentityPrivatizer

        return IdentityPrivatizer()

    def simulate(
        self,
        config: Any,
        mdp: TabularMDP,
        seed: int,
        progress: Callable[[int], None],
        noise: NoiseSource,
    ) -> tuple[OnlineResult, dict[str, Any]]:
        from privrl.online import sdp_pe

        algorithm = config.algorithm()
        env_ss, _ = np.random.SeedSequence(seed).spawn(2)
        priv = self.privatizer(config, mdp, noise.generator(self.name))
        result = sdp_pe.sdp_pe(
            mdp,
            config.episodes,
            priv,
            rng=np.random.default_rng(env_ss),
            config=algorithm,
            progress=progress,
            system=self.name,
            simulation=config.simulation,
        )
        return result, {"stages": result.log, "policies": result.info["policies"]}


class SdpPeSystem(PeSystem):
    """SDP-PE: policy elimination with shuffle-private counts, (ε, δ)-DP in the shuffle model."""

    name = "sdp-pe"
    Config = SdpPeConfig

    def privatizer_kind(self, config: Any) -> str:
        return "shuffle"

    def privacy_flags(self, config: Any) -> dict[str, Any]:
        return {
            "epsilon": config.epsilon,
            "delta": config.delta,
            "calibration": config.calibration,
        }

    def privatizer(self, config: Any, mdp: TabularMDP, noise: np.random.Generator) -> Privatizer:
        from privrl.online.sdp_pe import make_shuffle_privatizer

        return make_shuffle_privatizer(
            mdp,
            config.episodes,
            epsilon=config.epsilon,
            delta=config.delta,
            rng=noise,
            calibration=config.calibration,
            config=config.algorithm(),
        )


class UcbviSystem(OnlineSystem):
    """UCB-VI (Azar et al. 2017): optimistic value iteration every episode — NON-PRIVATE."""

    name = "ucbvi"
    Config = UcbviConfig

    def simulate(
        self,
        config: Any,
        mdp: TabularMDP,
        seed: int,
        progress: Callable[[int], None],
        noise: NoiseSource,
    ) -> tuple[OnlineResult, dict[str, Any]]:
        from privrl.online import ucbvi

        kind = self.privatizer_kind(config)
        (result,) = ucbvi.ucbvi(
            mdp,
            config.episodes,
            seeds=[seed],
            privatizer=kind,
            epsilon=getattr(config, "epsilon", None),
            config=config.algorithm(),
            progress=progress,
            noise=noise,
        )
        return result, {}


class DpUcbviSystem(UcbviSystem):
    """DP-UCBVI (Qiao & Wang 2023): UCB-VI on private running counts (pure ε-DP)."""

    name = "dp-ucbvi"
    Config = DpUcbviConfig

    def privatizer_kind(self, config: Any) -> str:
        return str(config.privatizer)

    def algorithm_name(self, config: Any) -> str:
        return f"dp-ucbvi-{config.privatizer}"

    def privacy_flags(self, config: Any) -> dict[str, Any]:
        return {"epsilon": config.epsilon, "privatizer": config.privatizer}


# ---------------------------------------------------------------------------------------------
# result: metrics, regret curve, plot, console summary
# ---------------------------------------------------------------------------------------------


def online_result(
    algo: str, result: OnlineResult, extra: dict[str, Any], seconds: float, mdp: TabularMDP
) -> Result:
    """The run directory of an online run: final regret and the regret curve at
    `checkpoints(K)`, the privatizer's report, plots/regret.png and the console lines."""
    from privrl.online.common import checkpoints

    cum = result.cumulative_regret
    K = result.episodes
    tail = max(1, K // 10)
    metrics = {
        "regret": float(cum[-1]),
        "episodes": K,
        "regret_per_episode_last_10pct": float(result.regret[-tail:].mean()),
        "optimal_value": float(mdp.optimal_value()),
        "epsilon": result.report.epsilon,
        "delta": result.report.delta,
        "model": result.report.model,
        "wall_time_s": seconds,
        **extra,
        "iota": result.info["iota"],  # the confidence log-term (public: S, A, H, K, β)
    }
    grid = checkpoints(K)
    summary = [
        f"privrl online {algo}: {K} episodes",
        f"cumulative regret {cum[-1]:.4g}",
        f"regret / episode (last 10%) {metrics['regret_per_episode_last_10pct']:.4g}",
        f"V*(s1) {metrics['optimal_value']:.4g}",
        f"wall time {seconds:.1f} s",
    ]
    return Result(
        metrics=metrics,
        privacy=result.report,
        curve=[{"episode": int(k), "regret": float(cum[k - 1])} for k in grid],
        plots={
            "regret": partial(plot_regret, grid=grid, curve=cum[grid - 1], algo=algo, result=result)
        },
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
