"""The expert-level learners from Python: `ExpertDP` (consensus filter + Selective DP-SGD) and
`DPSGD` (expert-level DP-SGD, or its non-private twin).

    from privrl.expert import ExpertDP, ExpertDPConfig

    result = ExpertDP(ExpertDPConfig(epsilon=10.0)).fit(dataset, experts=experts, ledger=ledger)
    result.policy, result.report, result.metrics

Each call plans from the dataset's header (`privrl.expert.planning`), reserves the planned
report on the ledger when one is given, then trains a discrete CQL or BCQ learner and
evaluates it greedily in the dataset's (public) environment. The privacy unit is the expert:
neighbouring datasets add or remove one expert with all their trajectories.

Randomness: ``seed`` drives everything public (the network's initialisation, the step coins,
the ordinary steps' minibatches, the evaluation episodes); the private steps' sampling, the
filter's draws and all noise come from ``noise`` (default: a fresh secure `NoiseSource`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.algorithm import (
    Algorithm,
    Fitted,
    Plan,
    Progress,
    header_and_plan,
    noise_or_secure,
    spending,
)
from privrl.expert.config import (
    DEFAULT_CLIP,
    DEFAULT_LR,
    DEFAULT_NOISE,
    DPSGDConfig,
    ExpertDPConfig,
    ExpertTrainingConfig,
)
from privrl.expert.planning import Bound, Resolved, plan_dp_sgd, plan_expert_dp
from privrl.expert.public import (
    EnvFactory,
    Evaluate,
    Reference,
    default_env_factory,
    greedy_evaluator,
)

if TYPE_CHECKING:
    import torch

    from privrl.data.dataset import TrajectoryDataset
    from privrl.data.io import DatasetHeader
    from privrl.expert.base import ExpertSet
    from privrl.privacy.ledger import BudgetLedger
    from privrl.privacy.noise import NoiseSource
    from privrl.privacy.report import PrivacyReport
    from privrl.rl.discrete_common import DiscreteLearner, ObsTransform

__all__ = ["DPSGD", "ExpertDP", "evaluator_for", "expert_data", "fit_dp_sgd", "fit_expert_dp"]


class ExpertDP(Algorithm[ExpertDPConfig]):
    """Consensus filter + Selective DP-SGD (Sharma et al.): expert-level (ε, δ)-DP.

    The filter (Algorithm 2, budget ε1, δ1) releases stable trajectory prefixes; training
    (Algorithm 3) takes a private DP-SGD step on the rest with probability p (budget ε2, δ2),
    else an ordinary step on the stable prefixes. Protects one expert with all their
    trajectories (add/remove).
    """

    Config = ExpertDPConfig

    def plan(self, header: DatasetHeader, *, reference: Reference | None = None) -> Plan:
        """The public parameters and the planned report, from ``header`` alone; ``reference``:
        the normalised score's references from outside the config."""
        return plan_expert_dp(self.config, header, reference)

    def fit(
        self,
        dataset: TrajectoryDataset,
        *,
        experts: ExpertSet,
        ledger: BudgetLedger | None = None,
        noise: NoiseSource | None = None,
        progress: Progress | None = None,
        seed: int = 0,
        env: EnvFactory | None = None,
    ) -> Fitted[DiscreteLearner]:
        """Train on ``dataset`` (with the expert id of every trajectory) with the experts'
        policies ``experts`` (the set that produced the data, for the consensus filter).

        ``env`` makes the evaluation environment (default: the dataset's registered
        ``metadata.env_id``, truncated at the evaluation horizon).
        """
        header, plan, source = _plan_and_noise(self, dataset, noise)
        evaluate = evaluator_for(self.config, plan.facts["resolved"], seed, env)

        def compute() -> Fitted[DiscreteLearner]:
            return fit_expert_dp(
                self.config,
                plan,
                dataset,
                experts,
                seed=seed,
                noise=source,
                evaluate=evaluate,
                progress=progress,
            )

        return spending(ledger, plan, header, compute, label=self.config.system)


class DPSGD(Algorithm[DPSGDConfig]):
    """Expert-level DP-SGD (Sharma et al., Algorithm 4), the paper's baseline; with
    ``non_private=True`` its non-private twin (the reference of the normalised score).

    Each step Poisson-samples experts (rate b/m), takes one transition of each, clips the
    per-example gradients to C, adds N(0, σ²C²) and divides by b; steps until ε is spent.
    """

    Config = DPSGDConfig

    def plan(self, header: DatasetHeader, *, reference: Reference | None = None) -> Plan:
        """The public parameters and the planned report, from ``header`` alone; ``reference``:
        the normalised score's references from outside the config."""
        return plan_dp_sgd(self.config, header, reference)

    def fit(
        self,
        dataset: TrajectoryDataset,
        *,
        ledger: BudgetLedger | None = None,
        noise: NoiseSource | None = None,
        progress: Progress | None = None,
        seed: int = 0,
        env: EnvFactory | None = None,
    ) -> Fitted[DiscreteLearner]:
        """Train on ``dataset`` (with the expert id of every trajectory, unless the twin);
        ``env`` as in `ExpertDP.fit`."""
        header, plan, source = _plan_and_noise(self, dataset, noise)
        evaluate = evaluator_for(self.config, plan.facts["resolved"], seed, env)

        def compute() -> Fitted[DiscreteLearner]:
            return fit_dp_sgd(
                self.config,
                plan,
                dataset,
                seed=seed,
                noise=source,
                evaluate=evaluate,
                progress=progress,
            )

        return spending(ledger, plan, header, compute, label=self.config.system)


def _plan_and_noise(
    algorithm: ExpertDP | DPSGD, dataset: TrajectoryDataset, noise: NoiseSource | None
) -> tuple[DatasetHeader, Plan, NoiseSource]:
    """The header, the plan and the noise source of a call. With insecure noise the planned
    report is uncertified (ε = ∞), so a ledger refuses the call before the data are read."""
    header, plan = header_and_plan(algorithm, dataset)
    source = noise_or_secure(noise)
    if not source.certified:
        plan = dataclasses.replace(plan, report=source.certify(plan.report))
    return header, plan, source


# ---------------------------------------------------------------------------------------------
# the computations (the run layer calls them too, inside its ledger transaction)
# ---------------------------------------------------------------------------------------------


def fit_expert_dp(
    config: ExpertDPConfig,
    plan: Plan,
    dataset: TrajectoryDataset,
    experts: ExpertSet,
    *,
    seed: int,
    noise: NoiseSource,
    evaluate: Evaluate | None,
    progress: Progress | None,
) -> Fitted[DiscreteLearner]:
    """ExpertDP's training on ``dataset`` after `plan_expert_dp` (the plan's facts)."""
    from privrl.expert.selective import ExpertDPSettings, train_expert_dp

    f = plan.facts
    r: Resolved = f["resolved"]
    assert r.m is not None and r.epsilon is not None and r.delta is not None
    data, obs_dim = expert_data(dataset, r.n_actions)
    learner = make_learner(config, r, obs_dim, seed)
    settings = ExpertDPSettings(
        n_units=r.m,
        epsilon=r.epsilon,
        delta=r.delta,
        p=f["p"],
        rounds=f["rounds"],
        p_min=plan.public["p_min"],
        max_len=f["length"],
        split=f["split"],
        batch_size=r.b,
        noise_multiplier=DEFAULT_NOISE if r.z is None else r.z,
        clip_norm=DEFAULT_CLIP if r.c is None else r.c,
        steps=config.steps,
        steps_cap=r.cap,
        accounting=config.accounting,
        n_evals=config.evals,
        eval_window=config.eval_window,
        filter_calibration=config.filter_calibration,
        dp_sgd_budget=config.dp_sgd_budget,
    )
    result = train_expert_dp(
        settings,
        learner,
        data,
        experts,
        rng=np.random.default_rng(seed),
        noise=noise,
        evaluate=evaluate,
        progress=_every_100(progress, f"expert-dp {config.algo}"),
    )
    training = result.training
    r.params.derive(
        "private DP-SGD steps K",
        training.private_steps,
        "from the budget by the PLD accountant (or `steps`), with the public step coins",
    )
    r.params.derive("training steps", training.steps, "the public step coins up to step K")
    report = finish_report(result.report, r)
    bound: Bound | None = f["bound"]
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
    return _fitted(training, report, extra, r.ref, details=result)


def fit_dp_sgd(
    config: DPSGDConfig,
    plan: Plan,
    dataset: TrajectoryDataset,
    *,
    seed: int,
    noise: NoiseSource,
    evaluate: Evaluate | None,
    progress: Progress | None,
) -> Fitted[DiscreteLearner]:
    """DPSGD's training on ``dataset`` after `plan_dp_sgd` (the plan's facts)."""
    from privrl.expert.dpsgd import DPSGDSettings, expert_dp_sgd

    f = plan.facts
    r: Resolved = f["resolved"]
    # the non-private twin needs no expert ids: it trains on all transitions
    data, obs_dim = expert_data(dataset, r.n_actions, units=not config.non_private)
    learner = make_learner(config, r, obs_dim, seed)
    result = expert_dp_sgd(
        DPSGDSettings(
            epsilon=r.epsilon,
            delta=0.0 if r.delta is None else r.delta,
            batch_size=r.b,
            noise_multiplier=DEFAULT_NOISE if r.z is None else r.z,
            clip_norm=DEFAULT_CLIP if r.c is None else r.c,
            steps=f["n_steps"],
            steps_cap=r.cap,
            n_units=r.m,
            sampling=config.sampling,
            private=not config.non_private,
            n_evals=config.evals,
            eval_window=config.eval_window,
        ),
        learner,
        data,
        rng=np.random.default_rng(seed),
        noise=noise,
        evaluate=evaluate,
        progress=_every_100(progress, f"dp-sgd {config.algo}"),
    )
    if f["capped"]:
        result.report.notes.append(
            f"the step count was capped at {f['n_steps']}: the budget ε = {r.epsilon} is not spent"
        )
    report = finish_report(result.report, r)
    name = "non-private" if config.non_private else "expert-dp-sgd"
    extra = {"algorithm": f"{name} {config.algo}", "stable_size": 0}
    return _fitted(result, report, extra, r.ref, details=result)


# ---------------------------------------------------------------------------------------------
# shared by both learners
# ---------------------------------------------------------------------------------------------


def evaluator_for(
    config: ExpertTrainingConfig, r: Resolved, seed: int, env: EnvFactory | None = None
) -> Evaluate | None:
    """The greedy evaluation the plan set up (None when skipped); evaluation k resets its
    environments from seed ``eval_seed + k·eval_seed_step`` (default ``eval_seed``: ``seed``).
    ``env``: the environment factory (default `default_env_factory`)."""
    if "eval_horizon" not in r.eval_info:
        return None
    first = seed if config.eval_seed is None else config.eval_seed
    make = env or default_env_factory(r.meta, r.eval_info["eval_horizon"])
    return greedy_evaluator(r.eval_info, make, first, step=config.eval_seed_step)


def expert_data(
    dataset: TrajectoryDataset, n_actions: int, *, units: bool = True
) -> tuple[TrajectoryDataset, int]:
    """``dataset`` checked against the public schema (with ``units``, the expert ids that
    expert-level privacy needs) and its observation dimension."""
    if units and dataset.unit_ids is None and dataset.metadata.extra.get("unit") == "episode":
        # imported with every episode its own expert (a schema fact declared in the header,
        # not read off the data): the expert ids are the episode indices
        fields = dataset._fields()
        fields["unit_ids"] = dataset.episode_unit_ids
        dataset = type(dataset)(**fields, metadata=dataset.metadata, validate=False)
    if units and dataset.unit_ids is None:
        raise ValueError(
            "the dataset has no expert ids (unit_ids is None): expert-level privacy needs the "
            "expert of every trajectory; import the data with each episode's expert as its "
            "unit (a unit column) or with every episode its own unit (`privrl data import --unit "
            'episode`, or unit="episode" in `import_table`)'
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
            "pass the right `actions=A` or fix the dataset"
        )
    return dataset, int(obs.shape[1])


def make_learner(
    config: ExpertTrainingConfig, r: Resolved, obs_dim: int, seed: int
) -> DiscreteLearner:
    """A fresh CQL or BCQ learner for the data's observations and the public action space."""
    from privrl.rl.bcq import DiscreteBCQ
    from privrl.rl.cql import DiscreteCQL

    cls = DiscreteCQL if config.algo == "cql" else DiscreteBCQ
    lr = DEFAULT_LR if config.lr is None else config.lr
    return cls(
        obs_dim,
        r.n_actions,
        hidden=r.sizes,
        lr=lr,
        seed=seed,
        obs_transform=obs_transform(r.meta.env_id),
        device=learner_device(config.device),
    )


def learner_device(spec: str) -> torch.device:
    """The `torch.device` of the ``device`` field on this machine (an absent GPU is refused,
    naming the field)."""
    from privrl.nn.device import config_device

    return config_device(spec)


@functools.cache
def _hiv_log_stats() -> tuple[np.ndarray, np.ndarray]:
    """Public HIV simulator statistics (simulated once per process)."""
    from privrl.envs.hiv import log_state_statistics

    return log_state_statistics()  # public simulator rollouts, no private data


def obs_transform(env_id: str | None) -> ObsTransform:
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


def finish_report(report: PrivacyReport, r: Resolved) -> PrivacyReport:
    """The run's report with its public parameters and, when the normalised score uses a twin
    trained on the same data, the note that the score is outside the guarantee."""
    report = report.with_public_parameters(r.params)
    if r.ref.outside_guarantee and r.ref.note:
        report.notes.append(r.ref.note)
    return report


def _every_100(progress: Progress | None, label: str) -> Any:
    """The trainers' ``progress(step, total)`` as a `Progress` report every 100 steps."""
    if progress is None:
        return None

    def update(step: int, total: int) -> None:
        if step % 100 == 0 or step == total:
            progress(label, step, total)

    return update


def _fitted(
    training: Any, report: PrivacyReport, extra: dict[str, Any], ref: Reference, *, details: Any
) -> Fitted[DiscreteLearner]:
    """The learner, the final report, the metrics (steps, ε, δ, returns, the normalised score)
    and the learning curve."""
    from privrl.expert.dpsgd import paper_accounting_epsilon
    from privrl.nn.device import describe_device

    metrics: dict[str, Any] = {
        "steps": training.steps,
        "private_steps": training.private_steps,
        "epsilon": report.epsilon,
        "delta": report.delta,
        "private": report.private,
        "device": describe_device(training.learner.device),  # public: the hardware used
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
    curve = training.curve or [{"step": training.steps, "private_steps": training.private_steps}]
    return Fitted(training.learner, report, metrics, curve, details)
