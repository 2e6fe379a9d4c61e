"""PRIMORL and MOPO as objects of the Python API: a config, `plan(header)`, `fit(dataset)`.

    from privrl.primorl import PRIMORL, PrimorlConfig

    result = PRIMORL(PrimorlConfig(epsilon=5.0, steps=200, clip=0.02)).fit(data, ledger=ledger)
    result.policy.act(obs, rng), result.report, result.metrics["return_mean"]

`plan` reads the dataset's header only: it resolves the task (a preset, any Gymnasium
continuous-control id, or a `ControlTask`; `privrl.primorl.tasks`), which data is public
(`PublicSource`: a dataset the caller declares public, the episodes the metadata declares
public, or none), every public parameter of DP-FedAvg with its source, and the planned report
for T_max rounds. `fit` runs inside the ledger's transaction (`privrl.algorithm.spending`): the
planned report is reserved before a byte of the episodes is read. MOPO is not private: its
planned report says ε = ∞, so any ledger refuses it before the data is read.

The command line reaches the same plans and computations through `privrl.systems.primorl` and
`privrl.systems.mopo`, which add the files (a public dataset file, a released model), the
run directory, checkpoints and plots.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
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
from privrl.config import ConfigError
from privrl.data.dataset import DatasetError, TrajectoryDataset
from privrl.data.io import DatasetHeader, header_of
from privrl.envs.control import ControlTask
from privrl.nn.device import describe_device
from privrl.primorl.dp_fedavg import SmallDataWarning
from privrl.primorl.mopo import RELATION, UNIT, MOPOConfig, MOPOResult, check_dataset, mopo
from privrl.primorl.options import MAX_MODEL_BUFFER
from privrl.primorl.primorl import (
    PrimorlConfig,
    PrimorlResult,
    ReleasedModel,
    bounds_normalizer,
    normalised_score,
    plan,
    planned_report,
    policy_from_model,
    run,
    stage_report,
)
from privrl.primorl.primorl import _seeds as primorl_seeds
from privrl.primorl.tasks import in_reward_scale, is_preset, resolve_task, task_facts
from privrl.privacy.noise import NoiseSource
from privrl.privacy.report import PrivacyReport
from privrl.rl.sac import SACPolicy

if TYPE_CHECKING:
    from privrl.privacy.ledger import BudgetLedger

__all__ = [
    "MOPO",
    "PRIMORL",
    "PublicSource",
    "mopo_metrics",
    "primorl_metrics",
    "stage_progress",
]

StageProgress = Callable[[str, dict[str, Any]], None]


def stage_progress(
    progress: Progress | None, model_phase: tuple[str, str, str, int | None] | None = None
) -> StageProgress | None:
    """The pipelines' `progress(phase, record)` as a `Progress(label, done, total)`:
    `model_phase` is (phase, label, counter key, total) of the model's training; "policy"
    records are SAC epochs. None without a `progress`."""
    if progress is None:
        return None

    def report(name: str, record: dict[str, Any]) -> None:
        if model_phase is not None and name == model_phase[0]:
            _, label, key, total = model_phase
            progress(label, int(record[key]), int(total or record[key]))
        else:
            progress("SAC in the model", int(record["epoch"]), int(record["epochs"]))

    return report


# --------------------------------------------------------------------------------------------
# PRIMORL: which data is public, fixed from the headers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublicSource:
    """Which data a run uses in the clear, fixed from the headers before any episode is read:
    a dataset the caller declares public (``name``: its file name, or how it was given), the
    episodes the private dataset's metadata declares public (``declaration``), or none."""

    name: str | None = None
    content_sha256: str | None = None
    n_episodes: int = 0
    declaration: Any = None  # privrl.data.public.PublicDeclaration
    kind: str = "public dataset"

    def describe(self) -> str | None:
        """The public data, as the report names it (None: there is none)."""
        if self.name is not None:
            return (
                f"the dataset {self.name} declared public ({self.n_episodes} episodes, "
                f"content sha256 {self.content_sha256})"
            )
        if self.declaration is not None:
            return str(self.declaration.describe())
        return None

    @property
    def identity(self) -> dict[str, Any]:
        """config.json's record of the public source: its identity, nothing from private data."""
        if self.name is not None:
            return {
                "source": self.kind,
                "file": self.name,
                "content_sha256": self.content_sha256,
                "episodes": self.n_episodes,
            }
        if self.declaration is not None:
            return {  # the count only: positions would tell where private episodes lie
                "source": "declared in the dataset's metadata",
                "key": self.declaration.key,
                "ids": len(self.declaration.ids),
            }
        return {"source": "none", "normaliser": "declared observation/action bounds"}


def published_task(task: ControlTask) -> dict[str, Any]:
    """The facts of a task without a preset (dimensions, action box, horizon, reward range:
    all public), for config.json; nothing for a preset, which its id names."""
    return {} if is_preset(task) else {"task_facts": task_facts(task)}


def _where(header: DatasetHeader) -> str:
    return str(header.path) if header.path is not None else "the dataset"


def declaration_of(header: DatasetHeader) -> Any:
    """The episodes (or units) the dataset's metadata declares public, or None."""
    from privrl.data.public import declared_public

    try:
        return declared_public(header.metadata, header.n_episodes)
    except DatasetError as exc:
        raise ConfigError("data", f"{_where(header)}: {exc}") from None


def one_public_source(name: str, header: DatasetHeader) -> None:
    """Refuse a public dataset `name` beside episodes the dataset declares public."""
    declaration = declaration_of(header)
    if declaration is not None:
        raise ConfigError(
            "public_data",
            f"{name}: {_where(header)} already declares public episodes ({declaration.key}); "
            "give one public source",
        )


def public_source_of(
    config: PrimorlConfig,
    header: DatasetHeader,
    given: PublicSource | None,
    *,
    has_unit_ids: bool | None,
) -> PublicSource:
    """The run's public data from the headers alone (`given`, else the dataset's declaration,
    else none), checked: one source; a declaration fits the privacy unit; without public data
    the declared bounds are finite and the rollouts start from initial states.
    `has_unit_ids`: whether the dataset stores unit ids (None: not known here)."""
    from privrl.data.public import PUBLIC_EPISODES, PUBLIC_UNIT_IDS

    where = _where(header)
    declaration = declaration_of(header)
    if declaration is not None and declaration.key == PUBLIC_EPISODES and config.unit == "user":
        raise ConfigError(
            "unit",
            f"user: {where} declares public episodes, not users; with unit user declare "
            "public users (metadata extra public_unit_ids) or give public data",
        )
    if declaration is not None and declaration.key == PUBLIC_UNIT_IDS and has_unit_ids is False:
        raise ConfigError(
            "data",
            f"{where} declares public unit ids but stores no unit ids; declare public "
            f"episodes ({PUBLIC_EPISODES}) instead",
        )
    source = PublicSource(declaration=declaration)
    if given is not None:
        one_public_source(str(given.name), header)
        source = given
    if source.describe() is None:
        try:
            bounds_normalizer(header.metadata)
        except ValueError as exc:
            raise ConfigError("public_data", f"is not given: {exc}") from None
        if config.start_states == "public-split":
            raise ConfigError(
                "start_states",
                "public-split needs public data: give a dataset declared public (or declare "
                "public episodes in the dataset's metadata), or start from initial states",
            )
    return source


def check_declared(
    header: DatasetHeader, task: ControlTask, config: PrimorlConfig, *, has_unit_ids: bool | None
) -> None:
    """The header's declared spaces fit the task; user-level privacy has unit ids."""
    meta, where = header.metadata, _where(header)
    for name, space, dim in (
        ("observation", meta.observation_space, task.obs_dim),
        ("action", meta.action_space, task.act_dim),
    ):
        shape = getattr(space, "shape", None)
        if shape is not None and tuple(shape) != (dim,):
            raise ConfigError(
                "data",
                f"{where}: the declared {name} space has shape {tuple(shape)} but "
                f"{task.env_id} has ({dim},); re-import it with the task's spaces",
            )
    if config.unit == "user" and has_unit_ids is False:
        raise ConfigError(
            "unit",
            f"user: {where} has no unit ids; import the table with a user column "
            "(`privrl data import T.csv -c episode=…,obs=…,action=…,reward=…,unit=user_id`)",
        )


def plan_primorl(
    config: PrimorlConfig,
    header: DatasetHeader,
    public: PublicSource | None = None,
    *,
    has_unit_ids: bool | None = None,
) -> Plan:
    """PRIMORL's plan from the header: the task, the public data, DP-FedAvg's public
    parameters (settings > public metadata > task preset) and the report for T_max rounds.
    A `SmallDataWarning` for each reason the declared K is too small for the noise
    (`DpFedAvgPlan.small_data_warnings`: public values only). The torch device is resolved
    here, once (an absent GPU is refused before the ledger is asked)."""
    device = config.torch_device()
    source, task = resolve_task(
        config.task, header.metadata, config.reward_transform, config.task_facts()
    )
    check_declared(header, task, config, has_unit_ids=has_unit_ids)
    settings = config.for_task(task)
    the_plan = plan(settings, header.metadata)
    for text in the_plan.small_data_warnings():
        warnings.warn(f"PRIMORL: {text}", SmallDataWarning, stacklevel=3)
    public_source = public_source_of(settings, header, public, has_unit_ids=has_unit_ids)
    published = {
        "algorithm": "primorl",
        "env_id": task.env_id,
        "data_env_id": source.env_id,
        "reward_transform": task.reward_transform,
        **settings.settings(),
        "public_parameters": the_plan.params.to_list(),
        "public_data": public_source.identity,
        **published_task(task),
    }
    facts = {
        "task": task,
        "source": source,
        "primorl": settings,
        "T_max": the_plan.T_max,
        "fedavg_plan": the_plan,
        "public_source": public_source,
        "device": device,
    }
    return Plan(report=planned_report(settings, the_plan, task), public=published, facts=facts)


def in_task_scale(dataset: TrajectoryDataset, key: str, where: str, plan: Plan) -> Any:
    """Schema checks a public schema would make (array shapes), never value checks; the
    rewards in the task's scale. ConfigError naming `key` (the data's field)."""
    task = plan.facts["task"]
    for name, arr, dim in (
        ("observations", dataset.observations, task.obs_dim),
        ("actions", dataset.actions, task.act_dim),
    ):
        arr = np.asarray(arr)
        if arr.ndim != 2 or arr.shape[1] != dim:
            raise ConfigError(key, f"{where}: {name} do not have shape [n, {dim}]")
    return in_reward_scale(dataset, plan.facts["source"], task)


def split_public(
    dataset: TrajectoryDataset, public: TrajectoryDataset | None, plan: Plan
) -> tuple[TrajectoryDataset, TrajectoryDataset, str | None]:
    """(private episodes, public episodes, how the report names the public data): the given
    public dataset, or the episodes the dataset's metadata declares public (never chosen by
    their content)."""
    from privrl.data.public import episodes_sha256, split_declared

    source: PublicSource = plan.facts["public_source"]
    if public is not None:
        private = dataset
    else:
        private, public = split_declared(dataset, source.declaration)
    described = source.describe()
    if source.declaration is not None:  # identity from the public episodes alone
        described = f"{described}; content sha256 {episodes_sha256(public)}"
    return private, public, described


def primorl_metrics(
    config: PrimorlConfig, result: PrimorlResult, *, n_public: int | None
) -> dict[str, Any]:
    """The final figures of a PRIMORL run (metrics.json): returns, ε, the public summary of
    DP-FedAvg, the policy stage's settings. Nothing computed from the private episodes."""
    task = result.released.control
    stage, fed, report = result.stage, result.fedavg, result.report
    metrics: dict[str, Any] = {
        "algorithm": "primorl",
        "task": task.name,
        "env_id": task.env_id,
        "reward_transform": task.reward_transform,
        "variant": config.variant,
        "return_mean": result.return_mean,
        "return_std": result.return_std,
        "normalised_score": result.normalised_score,
        "reference_returns": result.released.reference_returns,
        "epsilon": float(report.epsilon),
        "delta": float(report.delta),
        "private": bool(report.private),
        "unit": report.unit.value,
        "epsilon_max": fed.get("epsilon_max"),
        "rounds": fed.get("rounds"),
        "max_rounds": fed.get("max_rounds"),
        "stopped_early": fed.get("stopped_early"),
        "best_holdout_mse": fed.get("best_holdout_mse"),
        "elites": fed.get("elites"),
        "start_mode": stage.start_mode,
        "penalty": config.penalty,
        "lambda": config.lam,
        "rollout_length": config.rollout_length,
        "epochs": len(stage.curve),
        "final_epochs": min(config.final_epochs, len(stage.curve)),
        "policy_stage_seconds": stage.seconds,
        "model_reused": n_public is None,
        "device": describe_device(stage.agent.device),  # public: the hardware used
    }
    if n_public is not None:
        metrics["public_split_units"] = int(n_public)
    return metrics


class PRIMORL(Algorithm[PrimorlConfig]):
    """PRIMORL: trajectory-level (or user-level) private model-based offline RL.

    DP-FedAvg trains the dynamics ensemble on the private episodes (the one release); SAC
    then learns in the pessimistic released model without touching the data.
    """

    Config = PrimorlConfig

    def plan(
        self,
        header: DatasetHeader,
        *,
        public: DatasetHeader | None = None,
        has_unit_ids: bool | None = None,
    ) -> Plan:
        """The plan from the dataset's header (and a public dataset's header, if one is
        declared public): see `plan_primorl`."""
        given = None if public is None else _public_in_memory(public, header)
        return plan_primorl(self.config, header, given, has_unit_ids=has_unit_ids)

    def fit(
        self,
        dataset: TrajectoryDataset,
        *,
        public: TrajectoryDataset | None = None,
        ledger: BudgetLedger | None = None,
        noise: NoiseSource | None = None,
        progress: Progress | None = None,
        seed: int = 0,
    ) -> Fitted[SACPolicy]:
        """Train on the private episodes `dataset` (`public`: a dataset you declare public,
        same task and spaces, not protected). `seed` governs everything but the privacy
        noise (`noise`, secure by default); with a `ledger` the planned report is reserved
        before the episodes are read."""
        noise = noise_or_secure(noise)
        _threads(self.config.threads)
        header = header_of(dataset)
        pub_header = None if public is None else header_of(public)
        the_plan = self.plan(header, public=pub_header, has_unit_ids=dataset.unit_ids is not None)
        # a ledger sees the planned report as the noise makes it: uncertified when insecure
        the_plan = dataclasses.replace(the_plan, report=noise.certify(the_plan.report))

        def compute() -> tuple[PrimorlResult, int]:
            data = in_task_scale(dataset, "data", "the dataset", the_plan)
            pub = None if public is None else in_task_scale(public, "public", "public", the_plan)
            split = split_public(data, pub, the_plan)
            result = self.compute(the_plan, split, seed=seed, noise=noise, progress=progress)
            return result, split[1].n_episodes

        result, n_public = spending(
            ledger, the_plan, header, compute, label="primorl", report_of=lambda r: r[0].report
        )
        metrics = primorl_metrics(the_plan.facts["primorl"], result, n_public=n_public)
        return fitted(result.stage, result.report, metrics, result)

    def compute(
        self,
        the_plan: Plan,
        data: tuple[TrajectoryDataset, TrajectoryDataset, str | None],
        *,
        seed: int,
        noise: NoiseSource | None = None,
        progress: Progress | None = None,
        workdir: str | Path | None = None,
        secret_dir: str | Path | None = None,
    ) -> PrimorlResult:
        """The computation on the loaded data ``(private, public, public description)``,
        after the ledger's reservation: DP-FedAvg, then the policy stage."""
        private, public, described = data
        rounds = ("fedavg", "DP-FedAvg rounds", "round", the_plan.facts["T_max"])
        return run(
            the_plan.facts["primorl"],
            private,
            seed,
            public_split=public,
            public_source=described,
            progress=stage_progress(progress, rounds),
            workdir=workdir,
            noise=noise_or_secure(noise),
            secret_dir=secret_dir,
            fedavg_plan=the_plan.facts["fedavg_plan"],
            device=the_plan.facts["device"],
        )


def _public_in_memory(public: DatasetHeader, header: DatasetHeader) -> PublicSource:
    """A dataset in memory the caller declares public, checked from its header."""
    from privrl.data.public import check_public_compatible

    try:
        check_public_compatible(public.metadata, header.metadata, where="public")
    except DatasetError as exc:
        raise ConfigError("public", str(exc)) from None
    if public.n_episodes < 1:
        raise ConfigError("public", "has no episodes")
    if public.content_sha256 == header.content_sha256:
        raise ConfigError(
            "public", "holds the same episodes as the private dataset; give a separate dataset"
        )
    return PublicSource(
        name="in memory",
        content_sha256=public.content_sha256,
        n_episodes=public.n_episodes,
    )


def policy_stage_only(
    released: ReleasedModel,
    config: PrimorlConfig,
    *,
    seed: int,
    checkpoint: str | Path | None = None,
    progress: Progress | None = None,
    device: Any = None,
) -> PrimorlResult:
    """The policy stage alone on a released model: post-processing, no data, no spend (the
    report is the release's own, the policy stage named). ``device``: a `torch.device`
    (default: the config's ``device``)."""
    report_progress = stage_progress(progress)
    stage = policy_from_model(
        released,
        config,
        seed=primorl_seeds(seed)["stage"],
        checkpoint=checkpoint,
        progress=None if report_progress is None else lambda r: report_progress("policy", r),
        device=device,
    )
    return PrimorlResult(
        released=released,
        fedavg=released.fedavg,
        stage=stage,
        report=stage_report(released.report, config, stage.start_mode),
        return_mean=stage.return_mean,
        return_std=stage.return_std,
        normalised_score=normalised_score(stage.return_mean, released.reference_returns),
    )


def _threads(n: int) -> None:
    """torch's threads for this process, as the config's ``threads`` asks."""
    import torch

    torch.set_num_threads(n)


def fitted(stage: Any, report: PrivacyReport, metrics: dict[str, Any], details: Any) -> Fitted:
    """The `Fitted` of a run ending in a policy stage: the deterministic SAC actor."""
    return Fitted(
        policy=stage.agent.policy(deterministic=True),
        report=report,
        metrics=metrics,
        curve=list(stage.curve),
        details=details,
    )


# --------------------------------------------------------------------------------------------
# MOPO
# --------------------------------------------------------------------------------------------


def plan_mopo(config: MOPOConfig, header: DatasetHeader) -> Plan:
    """MOPO's plan from the header: the task, its settings, the model buffer's size checked,
    and the planned report ε = ∞ (any ledger refuses it before the data is read); the torch
    device, resolved once."""
    device = config.torch_device()
    source, task = resolve_task(
        config.task, header.metadata, config.reward_transform, config.task_facts()
    )
    settings = config.mopo_config(task)
    buffer = (
        settings.rollout_batch_size
        * settings.rollout_length
        * math.ceil(settings.steps_per_epoch / settings.rollout_every)
        * settings.retain_epochs
    )
    if buffer > MAX_MODEL_BUFFER:
        raise ConfigError(
            "rollout_batch_size",
            f"{settings.rollout_batch_size}: the model buffer would hold {buffer} transitions "
            f"(rollout batch × length × rollouts per epoch × {settings.retain_epochs} epochs), "
            f"more than {MAX_MODEL_BUFFER}; lower rollout_batch_size, rollout_length or "
            "steps_per_epoch",
        )
    published = {
        "algorithm": "mopo",
        "env_id": task.env_id,
        "data_env_id": source.env_id,
        "reward_transform": task.reward_transform,
        **settings.settings(),
        **published_task(task),
    }
    planned = PrivacyReport.non_private(UNIT, RELATION, system="mopo")
    facts = {"task": task, "source": source, "mopo": settings, "device": device}
    return Plan(report=planned, public=published, facts=facts)


def mopo_data(dataset: TrajectoryDataset, the_plan: Plan) -> TrajectoryDataset:
    """The episodes in the task's reward scale, their shapes checked against the task."""
    facts = the_plan.facts
    data = in_reward_scale(dataset, facts["source"], facts["task"])
    try:
        check_dataset(data, facts["task"])
    except ValueError as exc:
        raise ConfigError("data", str(exc)) from None
    return data


def mopo_metrics(config: MOPOConfig, result: MOPOResult) -> dict[str, Any]:
    """The final figures of a MOPO run (returns, the report's ε = ∞, the policy stage)."""
    return {
        "algorithm": "mopo",
        "return_mean": result.return_mean,
        "return_std": result.return_std,
        "normalised_score": result.normalised_score,
        "reference_returns": result.reference_returns,
        "epsilon": float(result.report.epsilon),
        "private": False,
        "start_mode": result.stage.start_mode,
        "penalty": config.penalty,
        "lambda": config.lam,
        "rollout_length": config.rollout_length,
        "epochs": len(result.stage.curve),
        "split": dict(result.split),
        "device": describe_device(result.stage.agent.device),  # public: the hardware used
    }


class MOPO(Algorithm[MOPOConfig]):
    """MOPO (Yu et al. 2020), PRIMORL's non-private baseline: ε = ∞."""

    Config = MOPOConfig

    def plan(self, header: DatasetHeader) -> Plan:
        """See `plan_mopo`."""
        return plan_mopo(self.config, header)

    def fit(
        self,
        dataset: TrajectoryDataset,
        *,
        ledger: BudgetLedger | None = None,
        noise: NoiseSource | None = None,
        progress: Progress | None = None,
        seed: int = 0,
    ) -> Fitted[SACPolicy]:
        """Train on `dataset` (not private: `noise` is unused, and a `ledger` refuses the
        run before the episodes are read)."""
        _threads(self.config.threads)
        header, the_plan = header_and_plan(self, dataset)

        def compute() -> MOPOResult:
            return self.compute(
                the_plan, mopo_data(dataset, the_plan), seed=seed, progress=progress
            )

        result = spending(ledger, the_plan, header, compute, label="mopo")
        metrics = mopo_metrics(the_plan.facts["mopo"], result)
        return fitted(result.stage, result.report, metrics, result)

    def compute(
        self,
        the_plan: Plan,
        data: TrajectoryDataset,
        *,
        seed: int,
        progress: Progress | None = None,
        workdir: str | Path | None = None,
    ) -> MOPOResult:
        """The computation on the loaded episodes: the dynamics model, then the policy stage."""
        return mopo(
            data,
            the_plan.facts["mopo"],
            seed=seed,
            workdir=workdir,
            progress=stage_progress(progress, ("dynamics", "dynamics model", "epoch", None)),
            task=the_plan.facts["task"],
            device=the_plan.facts.get("device"),
        )
