"""The online learners as objects: `PE`, `SDPPE`, `UCBVI`, `DPUCBVI`.

    from privrl.online import SDPPE, SDPPEConfig, make_env

    env = make_env("riverswim")
    result = SDPPE(SDPPEConfig(epsilon=10.0, episodes=100_000)).learn(env, seed=0)
    result.report, result.metrics["regret"], result.curve

Each object holds one validated config (`privrl.algorithm.Algorithm`) and has two methods:

- `plan(env)` sees only the public environment's sizes S, A, H and the config. It builds the
  privatizer the run will use (from public values only; it releases nothing), states the
  planned `PrivacyReport` and, for the private learners, the public parameters that set the
  noise (S, A, H, the number of users K and the privacy settings), each with its source.
- `learn(env, *, seed, noise, progress)` simulates K users, one episode each, on the public
  environment `env` (a `privrl.envs.tabular.TabularMDP`), and returns a `Fitted`: the learned
  policy, the final report, the exact regret as metrics and the regret curve.

These learners read no dataset: their users are simulated, so there is no dataset ledger to
reserve a budget on (`fit(dataset, ledger=...)` of the offline learners has no counterpart
here); the privacy unit is one user's episode, under replace-one. `seed` drives the users
(`SeedSequence(seed).spawn(2)[0]`); the privacy noise comes from `noise` (a fresh secure
`NoiseSource` by default; `NoiseSource.insecure(seed)` repeats it and leaves the report
uncertified), never from `seed`. The command line (`privrl online ...`) runs the same objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from privrl.algorithm import Algorithm, Fitted, Plan, Progress, no_progress, noise_or_secure
from privrl.online.common import OnlineResult, checkpoints
from privrl.online.sdp_pe import PEConfig, SDPPEConfig, check_shuffle_budget
from privrl.online.ucbvi import DPUCBVIConfig, UCBVIConfig
from privrl.privacy.noise import NoiseSource
from privrl.privacy.public import PublicParameters, Source
from privrl.privacy.report import PrivacyReport

if TYPE_CHECKING:
    from privrl.envs.tabular import TabularMDP
    from privrl.online.privatizers import Privatizer

__all__ = [
    "DPUCBVI",
    "PE",
    "SDPPE",
    "UCBVI",
    "OnlineLearner",
    "Sizes",
    "public_parameters",
    "sizes_of",
]

Sizes = tuple[int, int, int]
"""S, A, H of a tabular environment."""

C = TypeVar("C", bound=PEConfig | UCBVIConfig)


def sizes_of(env: TabularMDP | Sizes) -> Sizes:
    """S, A, H of `env` (a `TabularMDP`, or the sizes themselves)."""
    if isinstance(env, tuple):
        S, A, H = (int(v) for v in env)
        return S, A, H
    return int(env.S), int(env.A), int(env.H)


def public_parameters(
    config: PEConfig | UCBVIConfig,
    sizes: Sizes,
    fields: tuple[str, ...],
    *,
    sizes_from: Mapping[str, tuple[Source, str]] | None = None,
    provenance: Callable[[str], str] = str,
) -> PublicParameters:
    """What sets the noise of a private online run, with its public source: the environment's
    S, A, H (by default "given": the caller chose the environment; `sizes_from` may say
    otherwise, per name), the number of users K and the config's privacy `fields`.
    `provenance(field)` names a config field in the record (default: the field's name).
    Nothing here is read off the users' data: they are simulated from a public environment."""
    params = PublicParameters()
    given = sizes_from or {}
    for name, value in zip(("S", "A", "H"), sizes, strict=True):
        source, detail = given.get(name, (Source.FLAG, "the environment given to the learner"))
        params.given(name, int(value), source, detail)
    params.given("episodes (users) K", int(config.episodes), Source.FLAG, provenance("episodes"))
    for key in fields:
        params.given(key, getattr(config, key), Source.FLAG, provenance(key))
    return params


def make_privatizer(
    kind: str, config: PEConfig | UCBVIConfig, sizes: Sizes, rng: np.random.Generator
) -> Privatizer:
    """The privatizer `kind` ("none", "shuffle", "central" or "local") of a run, built from
    public values only (the config and the sizes)."""
    from privrl.online.privatizers import (
        CentralPrivatizer,
        IdentityPrivatizer,
        LocalPrivatizer,
        ShufflePrivatizer,
    )

    S, A, H = sizes
    if kind == "shuffle" and isinstance(config, SDPPEConfig):
        return ShufflePrivatizer(
            H,
            S,
            A,
            epsilon=config.epsilon,
            delta=config.delta,
            rng=rng,
            calibration=config.calibration,
            beta=config.beta,
        )
    if kind in ("central", "local") and isinstance(config, DPUCBVIConfig):
        cls = CentralPrivatizer if kind == "central" else LocalPrivatizer
        return cls(
            H, S, A, epsilon=config.epsilon, episodes=config.episodes, rngs=[rng], beta=config.beta
        )
    if kind == "none":
        return IdentityPrivatizer()
    raise ValueError(f"no {kind!r} privatizer for a {type(config).__name__}")


class OnlineLearner(Algorithm[C]):
    """Shared `plan` and `learn` of the online learners; subclasses say which privatizer they
    use and run their algorithm (`_simulate`)."""

    name: ClassVar[str] = ""
    # config fields listed as public parameters (empty: a non-private learner)
    privacy_fields: ClassVar[tuple[str, ...]] = ()

    def privatizer_kind(self) -> str:
        """The privatizer a run uses: none, shuffle, central or local."""
        return "none"

    def algorithm_name(self) -> str:
        """The name in the report and the metrics (`name`, or with the trust model)."""
        return self.name

    def check_environment(self, sizes: Sizes) -> None:
        """Refuse settings that do not fit an environment of these sizes (default: none)."""

    def planned_info(self, sizes: Sizes) -> dict[str, Any]:
        """The algorithm's constants, as a run's config.json lists them (public)."""
        return {"config": self.config.constants()}

    def plan(  # type: ignore[override]  # from the environment, not a dataset's header
        self,
        env: TabularMDP | Sizes,
        *,
        sizes_from: Mapping[str, tuple[Source, str]] | None = None,
        provenance: Callable[[str], str] = str,
    ) -> Plan:
        """The public side of a run on `env` (an environment or its sizes S, A, H): the planned
        report, with the public parameters of a private learner (see `public_parameters` for
        `sizes_from` and `provenance`), and `public` = the algorithm, S, A, H, its constants
        and the privatizer's description. Releases nothing and simulates no user."""
        sizes = sizes_of(env)
        self.check_environment(sizes)
        algo = self.algorithm_name()
        planned = make_privatizer(
            self.privatizer_kind(),
            self.config,
            sizes,
            NoiseSource.secure().generator("planning"),  # never drawn from: nothing released
        )
        report = planned.report(system=algo)
        if self.privacy_fields:
            params = public_parameters(
                self.config,
                sizes,
                self.privacy_fields,
                sizes_from=sizes_from,
                provenance=provenance,
            )
            report.with_public_parameters(params)
        S, A, H = sizes
        public: dict[str, Any] = {"algorithm": algo, "S": S, "A": A, "H": H}
        public |= self.planned_info(sizes)
        public["privatizer"] = planned.describe()
        return Plan(report=report, public=public)

    def learn(
        self,
        env: TabularMDP,
        *,
        seed: int = 0,
        noise: NoiseSource | None = None,
        progress: Progress = no_progress,
        plan: Plan | None = None,
    ) -> Fitted[Any]:
        """Run the learner for K = `config.episodes` simulated users on `env`.

        `seed` drives the users; the privacy noise comes from `noise` (None: a fresh secure
        source). `progress(label, done, total)` is told the episodes done. `plan`: this
        learner's plan for `env`, when the caller made it already (its public parameters are
        the report's). Returns the learned policy, the final report, the metrics (`regret` is
        the final cumulative regret) and the regret curve (`episode`, `regret` rows)."""
        plan = self.checked_plan(env, plan)
        noise = noise_or_secure(noise)
        result, extra = self._simulate(env, seed, self.episode_progress(progress), noise)
        return self.fitted(result, extra, env, plan, noise)

    def checked_plan(self, env: TabularMDP, plan: Plan | None) -> Plan:
        """`plan`, or this learner's plan for `env` when None; a ValueError when `plan` is
        for an environment of other sizes."""
        plan = self.plan(env) if plan is None else plan
        planned = tuple(plan.public.get(key) for key in ("S", "A", "H"))
        if planned != sizes_of(env):
            raise ValueError(
                f"the plan is for S, A, H = {planned}, the environment has {sizes_of(env)}"
            )
        return plan

    def episode_progress(self, progress: Progress) -> Callable[[int], None]:
        """The algorithm's per-batch callback (episodes just done) as a `Progress` of K."""
        algo = self.algorithm_name()
        total = int(self.config.episodes)
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            progress(algo, done, total)

        return advance

    def fitted(
        self,
        result: OnlineResult,
        extra: dict[str, Any],
        env: TabularMDP,
        plan: Plan,
        noise: NoiseSource,
    ) -> Fitted[Any]:
        """What `learn` returns for one run: the policy, the certified report (with the plan's
        public parameters), the metrics and the regret curve."""
        report = noise.certify(result.report)
        if plan.report.public_parameters and not report.public_parameters:
            report.with_public_parameters(plan.report.public_parameters)
        return Fitted(
            policy=result.policy,
            report=report,
            metrics=online_metrics(result, report, extra, env),
            curve=regret_curve(result),
            details=result,
        )

    def _simulate(
        self, mdp: TabularMDP, seed: int, progress: Callable[[int], None], noise: NoiseSource
    ) -> tuple[OnlineResult, dict[str, Any]]:
        """Run the algorithm on `mdp` for K simulated users; its result and extra metrics."""
        raise NotImplementedError


def online_metrics(
    result: OnlineResult, report: PrivacyReport, extra: dict[str, Any], mdp: TabularMDP
) -> dict[str, Any]:
    """The final figures of a run: exact regret, V*(s1), the final (certified) report's ε, δ
    and model (ε = ∞ for a run on insecure noise), the algorithm's extra figures and ι
    (public: S, A, H, K, β)."""
    cum = result.cumulative_regret
    tail = max(1, result.episodes // 10)
    return {
        "regret": float(cum[-1]),
        "episodes": result.episodes,
        "regret_per_episode_last_10pct": float(result.regret[-tail:].mean()),
        "optimal_value": float(mdp.optimal_value()),
        "epsilon": report.epsilon,
        "delta": report.delta,
        "model": report.model,
        **extra,
        "iota": result.info["iota"],
    }


def regret_curve(result: OnlineResult) -> list[dict[str, Any]]:
    """The cumulative regret at `checkpoints(K)`, as rows `episode`, `regret`."""
    cum = result.cumulative_regret
    grid = checkpoints(result.episodes)
    return [{"episode": int(k), "regret": float(cum[k - 1])} for k in grid]


# ---------------------------------------------------------------------------------------------
# policy elimination
# ---------------------------------------------------------------------------------------------


class PE(OnlineLearner[PEConfig]):
    """PE: SDP-PE's code with raw counts (the identity privatizer), not private.

    `learn(...).policy` is the set of policies still active after the last stage,
    `[N, H, S]` actions (any of them is near-optimal with high probability)."""

    name = "pe"
    Config = PEConfig

    def planned_info(self, sizes: Sizes) -> dict[str, Any]:
        from privrl.online.sdp_pe import stage_schedule

        S, A, H = sizes
        B = self.config.batch(H, S, A)
        return {
            "config": self.config.constants(),
            "base_batch": B,
            "stages_planned": len(stage_schedule(self.config.episodes, B)),
        }

    def privatizer(self, mdp: TabularMDP, noise: np.random.Generator) -> Privatizer:
        """The batch privatizer of a run (PE: the identity)."""
        from privrl.online.privatizers import IdentityPrivatizer

        return IdentityPrivatizer()

    def _simulate(
        self, mdp: TabularMDP, seed: int, progress: Callable[[int], None], noise: NoiseSource
    ) -> tuple[OnlineResult, dict[str, Any]]:
        from privrl.online import sdp_pe

        env_ss, _ = np.random.SeedSequence(seed).spawn(2)
        priv = self.privatizer(mdp, noise.generator(self.name))
        result = sdp_pe.sdp_pe(
            mdp,
            self.config.episodes,
            priv,
            rng=np.random.default_rng(env_ss),
            config=self.config,
            progress=progress,
            system=self.name,
            simulation=self.config.simulation,
        )
        return result, {"stages": result.log, "policies": result.info["policies"]}


class SDPPE(PE):
    """SDP-PE: policy elimination with shuffle-private counts, (ε, δ)-DP in the shuffle model
    for one user's episode (no trusted server). `learn(...).policy` as for `PE`."""

    name = "sdp-pe"
    Config = SDPPEConfig
    privacy_fields = ("epsilon", "delta", "calibration")
    config: SDPPEConfig

    def privatizer_kind(self) -> str:
        return "shuffle"

    def check_environment(self, sizes: Sizes) -> None:
        check_shuffle_budget(self.config.epsilon, self.config.delta, sizes[2])

    def learn(
        self,
        env: TabularMDP,
        *,
        seed: int = 0,
        noise: NoiseSource | None = None,
        progress: Progress = no_progress,
        plan: Plan | None = None,
    ) -> Fitted[Any]:
        # the shuffle binary summation releases each user's reward as one bit
        if getattr(env, "reward_kind", "bernoulli") != "bernoulli":
            raise ValueError(
                "SDP-PE sums each user's rewards as bits: the environment's rewards must be "
                f"Bernoulli (reward_kind 'bernoulli'), not {env.reward_kind!r}"
            )
        return super().learn(env, seed=seed, noise=noise, progress=progress, plan=plan)

    def privatizer(self, mdp: TabularMDP, noise: np.random.Generator) -> Privatizer:
        from privrl.online.sdp_pe import make_shuffle_privatizer

        return make_shuffle_privatizer(
            mdp,
            self.config.episodes,
            epsilon=self.config.epsilon,
            delta=self.config.delta,
            rng=noise,
            calibration=self.config.calibration,
            config=self.config,
        )


# ---------------------------------------------------------------------------------------------
# optimistic value iteration
# ---------------------------------------------------------------------------------------------


class UCBVI(OnlineLearner[UCBVIConfig]):
    """UCB-VI (Azar et al. 2017): optimistic value iteration every episode, not private.

    `learn(...).policy` is the greedy policy of the last episode, `[H, S]` actions."""

    name = "ucbvi"
    Config = UCBVIConfig

    def learn_seeds(
        self,
        env: TabularMDP,
        seeds: Sequence[int],
        *,
        noise: NoiseSource | None = None,
        progress: Progress = no_progress,
        plan: Plan | None = None,
        checkpoint: str | Path | None = None,
    ) -> list[Fitted[Any]]:
        """One run per seed of `seeds`, simulated together (the per-episode planning loop,
        whose Python overhead dominates, is shared by the batch): a list of what `learn`
        returns, in the order of `seeds`.

        Run r's users come from `seeds[r]` exactly as in `learn(env, seed=seeds[r])`, and its
        result does not depend on the other runs of the batch; its privacy noise comes from
        `noise.generator(f"dp-ucbvi run {r}")` (None: a fresh secure source), so with
        repeatable noise only run 0 repeats `learn`'s. `progress` is told the episodes done
        (of K, by the whole batch). `checkpoint`: a directory the loop saves its state in
        every 5 minutes, so that a batch cut off continues where it was (the state holds raw
        counts and noise: keep it beside the data, never publish it)."""
        plan = self.checked_plan(env, plan)
        noise = noise_or_secure(noise)
        results = self._run(env, seeds, self.episode_progress(progress), noise, checkpoint)
        return [self.fitted(result, {}, env, plan, noise) for result in results]

    def _run(
        self,
        mdp: TabularMDP,
        seeds: Sequence[int],
        progress: Callable[[int], None],
        noise: NoiseSource,
        checkpoint: str | Path | None = None,
    ) -> list[OnlineResult]:
        from privrl.online import ucbvi

        return ucbvi.ucbvi(
            mdp,
            self.config.episodes,
            seeds=[int(seed) for seed in seeds],
            privatizer=self.privatizer_kind(),
            epsilon=getattr(self.config, "epsilon", None),
            config=self.config,
            progress=progress,
            checkpoint=checkpoint,
            noise=noise,
        )

    def _simulate(
        self, mdp: TabularMDP, seed: int, progress: Callable[[int], None], noise: NoiseSource
    ) -> tuple[OnlineResult, dict[str, Any]]:
        (result,) = self._run(mdp, [seed], progress, noise)
        return result, {}


class DPUCBVI(UCBVI):
    """DP-UCBVI (Qiao & Wang 2023): UCB-VI on private running counts, pure ε-DP for one user's
    episode: ε-JDP with the central privatizer, ε-LDP with the local one."""

    name = "dp-ucbvi"
    Config = DPUCBVIConfig
    privacy_fields = ("epsilon", "privatizer")
    config: DPUCBVIConfig

    def privatizer_kind(self) -> str:
        return str(self.config.privatizer)

    def algorithm_name(self) -> str:
        return f"dp-ucbvi-{self.config.privatizer}"
