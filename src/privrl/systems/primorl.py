"""PRIMORL on the run layer (`privrl train primorl`): a dynamics ensemble trained
with trajectory-level (or user-level) DP by DP-FedAvg, a pessimistic model, and SAC inside it
with zero access to the data. The system adapts `privrl.primorl.primorl` (`PrimorlConfig`,
`plan`, `run`); the algorithm lives there.

`PrimorlRunConfig` is the command's face: each option maps onto one field of the library's
`PrimorlConfig` / `DpFedAvgConfig` (`None`: the library's default, resolved with its source by
`privrl.primorl.primorl.plan`), so no default is repeated here.

- `plan` (header only): the task from the env id, the declared spaces, the unit ids' presence,
  every public parameter (z or target ε, C, q, δ, T_max, K) and the planned report for T_max
  rounds, which the ledger checks before a byte of episode data is read.
- `load` (inside the ledger transaction): the episodes, a schema check of their shapes, and the
  public data: the `--public-data` file, or the episodes the file's metadata declares public
  (`privrl.data.public`), or none. Which data is public is fixed in `plan` from the headers
  alone, and config.json records its identity (the public file's content fingerprint, or the
  declared list's digest), never anything computed from the private episodes.
- `run`: DP-FedAvg → the released model (model.pt) → the policy stage; checkpoints
  (``released.pending.pt``, ``checkpoint.pt``, ``run.json``) stay in the run directory itself,
  as before the run layer, and a rerun with the same settings resumes. DP-FedAvg's secret state
  (``fedavg_state.pt``: θ(t) and the noise generator's state) is kept beside the dataset, in
  `RunContext.secret_dir` (``.privrl-secret/KEY/``), never in the run directory.
  The pending release and the secret DP-FedAvg state are deleted once the spend is completed;
  a rerun after a crash takes over the crashed attempt's reservation (no second spend).

``--model DIR/model.pt`` runs the policy stage only, on the released model: post-processing,
no dataset, no spend (the planned report is the release's own).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.config import ConfigError, check, option
from privrl.runs.system import Plan, PlotSpec, Result, RunContext, Series, System
from privrl.systems.mopo import (
    StageOptions,
    check_resume,
    header_task,
    in_reward_scale,
    return_line,
    stage_progress,
    stage_result,
)

__all__ = ["PrimorlRunConfig", "PrimorlSystem"]

PENDING = "released.pending.pt"  # the release while the run is unfinished (not recorded)
FEDAVG_STATE = "fedavg_state.pt"  # DP-FedAvg's secret state between rounds
CHECKPOINTS = (PENDING, FEDAVG_STATE, "checkpoint.pt")
NEEDS_TASK = (
    "PRIMORL needs a control task: a privrl id or a standard Gymnasium id with declared facts "
    "(collect with `privrl data collect --env Pendulum-v1` or `--recipe primorl-pendulum`)"
)


@dataclass(frozen=True)
class PrimorlRunConfig(StageOptions):
    """`privrl train primorl`: the options of a PRIMORL run (`None`: the library's default)."""

    system = "primorl"

    epsilon: float | None = option(
        None, "--epsilon", help="Target ε: z is calibrated for T_max rounds (PLD by default)."
    )
    delta: float | None = option(None, "--delta", help="δ (default 1e-5).")
    noise_multiplier: float | None = option(
        None, "--noise-multiplier", "-z", help="Noise multiplier z (instead of --epsilon)."
    )
    steps: int | None = option(
        None, "--steps", help="T_max, DP-FedAvg rounds fixed in advance (default: task preset)."
    )
    variant: str | None = option(
        None,
        "--variant",
        help="A paper row: no-clip | no-privacy (z = 0; not private) | low | high (the "
        "paper's z and T for the task).",
    )
    clip: float | None = option(
        None, "--clip", help="C, L2 bound on one unit's update of the whole ensemble."
    )
    clip_mode: str | None = option(
        None, "--clip-mode", help="flat | per-layer (default: task preset)."
    )
    sampling_rate: float | None = option(
        None, "--sampling-rate", "-q", help="Poisson sampling rate q of units per round."
    )
    local_batch: int | None = option(None, "--local-batch", help="Local batch size B (16).")
    local_lr: float | None = option(None, "--local-lr", help="Local SGD step η (1e-3).")
    local_optimizer: str = option(
        "sgd",
        "--local-optimizer",
        help="sgd (the paper's) | adam (reset for every unit and round: no state crosses "
        "units or rounds, so the clip and the sensitivity are unchanged).",
        keyless_default=True,  # added after runs were cached: SGD is what they ran
    )
    server_momentum: float = option(
        0.0,
        "--server-momentum",
        help="β of the server's momentum on the noisy mean update (0: the paper's FedAvg "
        "step; 0.9 as in McMahan et al. 2018). Post-processing: ε is unchanged.",
        keyless_default=True,
    )
    server_lr: float = option(
        1.0,
        "--server-lr",
        help="η_s, the server's step on the noisy mean update (1: FedAvg's).",
        keyless_default=True,
    )
    trajectories: int | None = option(
        None,
        "--trajectories",
        "--users",
        "-K",
        help="Declared number K of units (public; default: the dataset's declared "
        "n_trajectories / n_users, never counted from the data).",
    )
    unit: str = option(
        "trajectory", "--unit", help="Privacy unit: trajectory | user (all of one user's)."
    )
    user_column: str | None = option(
        None,
        "--user-column",
        help="With --unit user: the table column `privrl data import -c …,unit=COL` mapped "
        "to the dataset's unit ids (checked against the file's record).",
    )
    accountant: str = option("pld", "--accountant", help="pld | rdp (other beside it).")
    start_states: str = option(
        "initial",
        "--start-states",
        help="Rollout starts: initial (simulator's initial states, chained) | public-split.",
    )
    held_rollouts: bool = option(
        True,
        "--held-rollouts",
        help="Hold model rollouts inside the simulator's public observation box and reward "
        "range (--no-held-rollouts: free rollouts, which drift from initial starts).",
    )
    public_data: Path | None = option(  # noqa: RUF009 - option() is a dataclasses.field
        None,
        "--public-data",
        help="A dataset you declare public (same task and spaces as --data, no ledger): it sets "
        "the input normaliser, early stopping, the elites and public-split starts, and is not "
        "protected. Without it, episodes the --data file's metadata declares public "
        "(extra public_episodes / public_unit_ids) play that role; with neither, the "
        "normaliser comes from the declared observation/action bounds (refused if unbounded), "
        "all --steps rounds run and every member is an elite.",
        keyless_default=True,
    )
    eval_every: int = option(50, "--eval-every", help="Rounds between public-split evals.")
    patience: int = option(10, "--patience", help="Early stopping patience (evals).")
    model: Path | None = option(  # noqa: RUF009 - option() is a dataclasses.field
        None,
        "--model",
        help="A released model (DIR/model.pt): run only the policy stage — no data, no spend.",
    )

    def validate(self) -> None:
        check(
            self.unit in ("trajectory", "user"),
            "unit",
            f"must be trajectory or user, got {self.unit!r}",
        )
        check(
            self.accountant in ("pld", "rdp"),
            "accountant",
            f"must be pld or rdp, got {self.accountant!r}",
        )
        check(
            self.user_column is None or self.unit == "user", "user_column", "goes with --unit user"
        )
        check(
            self.public_data is None or self.public_data.is_file(),
            "public_data",
            f"{self.public_data} is not a file; give a privrl HDF5 dataset declared public",
        )
        super().validate()
        if self.model is not None:
            given = [
                flag
                for flag, value in (
                    ("--epsilon", self.epsilon),
                    ("--noise-multiplier", self.noise_multiplier),
                    ("--steps", self.steps),
                    ("--variant", self.variant),
                    ("--clip", self.clip),
                    ("--sampling-rate", self.sampling_rate),
                    ("--trajectories", self.trajectories),
                    ("--public-data", self.public_data),
                    ("--reward-transform", self.reward_transform),
                    ("--local-optimizer", None if self.local_optimizer == "sgd" else "adam"),
                    ("--server-momentum", self.server_momentum or None),
                    ("--server-lr", None if self.server_lr == 1 else self.server_lr),
                )
                if value is not None
            ]
            if given:
                raise ValueError(
                    f"{', '.join(given)} set(s) the private training, which --model reuses as "
                    "released; drop it"
                )
        self.fedavg()  # DP-FedAvg's own checks (z or ε, q, C, clip mode), before any file

    def fedavg(self) -> Any:
        """The library's `DpFedAvgConfig` as given (None: resolved by `plan`)."""
        from privrl.primorl.dp_fedavg import DpFedAvgConfig

        return DpFedAvgConfig(
            noise_multiplier=self.noise_multiplier,
            target_epsilon=self.epsilon,
            delta=self.delta,
            sampling_rate=self.sampling_rate,
            clip_norm=self.clip,
            clip_mode=self.clip_mode,
            max_rounds=self.steps,
            n_units=self.trajectories,
            local_batch=self.local_batch,
            local_lr=self.local_lr,
            local_optimizer=self.local_optimizer,  # type: ignore[arg-type]
            server_momentum=self.server_momentum,
            server_lr=self.server_lr,
            unit=self.unit,  # type: ignore[arg-type]
            accountant=self.accountant,  # type: ignore[arg-type]
            eval_every=self.eval_every,
            patience=self.patience,
        )

    def primorl_config(self, task: str, *, policy_only: bool = False) -> Any:
        """The library's `PrimorlConfig` for `task` (the policy stage's settings alone with
        `policy_only`: the release's own training settings are kept)."""
        from privrl.primorl.primorl import PrimorlConfig

        stage = {
            **self.stage_overrides(),
            "starts": self.start_states,
            "bounded_rollouts": self.held_rollouts,
        }
        if policy_only:
            return PrimorlConfig(task=task, **stage)
        return PrimorlConfig(task=task, fedavg=self.fedavg(), variant=self.variant, **stage)


class PrimorlSystem(System):
    """PRIMORL: trajectory-level private model-based offline RL."""

    name = "primorl"
    Config = PrimorlRunConfig
    data = "optional"  # none with --model
    summary = (
        "PRIMORL: trajectory-level private model-based offline RL. DP-FedAvg "
        "trains the dynamics ensemble (the one release); SAC then learns in the pessimistic "
        "model without touching the data."
    )
    help = """PRIMORL: trajectory-level private model-based offline RL. DP-FedAvg trains
    the dynamics ensemble (the one release); SAC then learns in the pessimistic model without
    touching the data.

    Examples:
      privrl train primorl --data primorl-pendulum.h5 --variant high --out runs/hi
      privrl train primorl --data D.h5 --epsilon 5 --out runs/e5   # z calibrated
      privrl train primorl --data D.h5 --public-data P.h5 --epsilon 5 --out runs/p
      privrl train primorl --data D.h5 -z 0.52 --steps 7000 --clip 0.02 \\
          --trajectories 30000
      privrl train primorl --data users.h5 --unit user --users 500 --epsilon 8
      privrl train primorl --model runs/hi/model.pt --epochs 50 --out runs/again

    Public data is declared, never chosen from the private episodes: --public-data FILE (same
    task and spaces, no ledger), else the episodes D.h5's metadata declares public
    (`privrl data declare-public`; the primorl recipes declare 1% / 10%), else none:
    the input normaliser comes from the declared observation/action bounds (an unbounded space is
    refused), all --steps rounds run and every ensemble member is an elite. The guarantee covers
    every trajectory (user) of --data except the public data, which is not protected.

    Writes config.json, metrics.json (return_mean, return_std, normalised_score, epsilon,
    delta), metrics.csv (per SAC epoch), model_holdout.csv, privacy.json (one release),
    model.pt, policy.pt and plots/. A rerun with the same flags and --out resumes.
"""
    resumable = True
    checkpoint_subdir = ""  # the checkpoints beside config.json, as before the run layer
    auto_resume = True

    # -- plan: public facts only ---------------------------------------------------------------

    def plan(self, config: Any, header: Any) -> Plan:
        if config.model is not None:
            if header is not None:
                raise ConfigError(
                    "model",
                    "runs only the policy stage and reads no data; drop --data (or drop "
                    "--model to train a new model)",
                )
            return self._plan_policy_only(config)
        if header is None:
            raise ValueError("give --data D.h5 (train a private model) or --model DIR/model.pt")
        from privrl.primorl import primorl as P

        source, task = header_task(header, NEEDS_TASK, config.reward_transform)
        _check_declared(header, task, config)
        lib = config.primorl_config(task.name)
        the_plan = P.plan(lib, header.metadata)  # flags > header metadata > preset
        public_source = plan_public_source(config, header, lib)
        public = {
            "command": "privrl train primorl",
            "algorithm": "primorl",
            "data": header.path.name,
            "env_id": task.env_id,
            "data_env_id": source.env_id,
            "reward_transform": task.reward_transform,
            **lib.to_dict(),
            "public_parameters": the_plan.params.to_list(),
            "public_data": public_source.identity,
        }
        facts = {
            "task": task,
            "source": source,
            "primorl": lib,
            "T_max": the_plan.T_max,
            "public_source": public_source,
        }
        return Plan(report=P.planned_report(lib, the_plan), public=public, facts=facts)

    def _plan_policy_only(self, config: Any) -> Plan:
        from privrl.primorl import primorl as P

        if not config.model.is_file():
            raise ValueError(f"--model: file not found: {config.model}")
        released = P.load_released_model(config.model)
        lib = config.primorl_config(released.task, policy_only=True)
        if lib.starts == "public-split" and released.public_states is None:
            raise ConfigError(
                "start_states", "public-split: the released model carries no public split"
            )
        if lib.starts == "public-split" and released.public_source is None:
            raise ConfigError(
                "start_states",
                "public-split: this model was released before public data had to be declared; "
                "its states were chosen by the private episodes' content, so they are not "
                "public. Use --start-states initial",
            )
        public = {
            "command": "privrl train primorl --model",
            "algorithm": "primorl (policy stage only)",
            "model": str(config.model),
            **lib.stage_dict(),
            "task": released.task,
        }
        facts = {"primorl": lib, "released": released}
        return Plan(report=released.report, public=public, facts=facts)

    # -- load: inside the ledger transaction -------------------------------------------------------

    def load(self, config: Any, source: Path | None, plan: Plan, rng: np.random.Generator) -> Any:
        if source is None:
            return None
        from privrl.data.io import load_hdf5
        from privrl.data.public import episodes_sha256, split_declared

        public_source: PublicSource = plan.facts["public_source"]
        dataset = self._checked(super().load(config, source, plan, rng), "data", source, plan)
        if public_source.path is not None:
            public = load_hdf5(public_source.path)
            private = dataset
            public = self._checked(public, "public_data", public_source.path, plan)
        else:
            private, public = split_declared(dataset, public_source.declaration)
        described = public_source.describe()
        if public_source.declaration is not None:  # identity from the public episodes alone
            described = f"{described}; content sha256 {episodes_sha256(public)}"
        return private, public, described

    @staticmethod
    def _checked(dataset: Any, key: str, path: Path, plan: Plan) -> Any:
        """Schema checks a public schema would make (array shapes), never value checks; the
        rewards in the task's scale."""
        task = plan.facts["task"]
        for name, arr, dim in (
            ("observations", dataset.observations, task.obs_dim),
            ("actions", dataset.actions, task.act_dim),
        ):
            arr = np.asarray(arr)
            if arr.ndim != 2 or arr.shape[1] != dim:
                raise ConfigError(key, f"{path}: {name} do not have shape [n, {dim}]")
        return in_reward_scale(dataset, plan.facts["source"], task)

    # -- run -------------------------------------------------------------------------------------

    def run(self, config: Any, data: Any, rng: np.random.Generator, ctx: RunContext) -> Result:
        import torch

        from privrl.primorl import primorl as P

        assert ctx.plan is not None and ctx.checkpoint_dir is not None
        torch.set_num_threads(config.threads)
        facts, work = ctx.plan.facts, ctx.checkpoint_dir
        if data is None:
            return self._policy_only(facts["primorl"], facts["released"], ctx)
        private, public, public_source = data
        if check_resume(
            work, {**ctx.plan.public, "seed": ctx.seed}, CHECKPOINTS, insist=ctx.resume
        ):
            if (work / "model.pt").exists():
                raise ValueError(
                    f"{work}/ holds a finished run; to train the policy stage longer on its "
                    f"released model (no new spend) use --model {work}/model.pt --out NEW_DIR"
                )
            ctx.notice(f"resuming {work}/ from its checkpoint")
        progress = stage_progress(ctx, ("fedavg", "DP-FedAvg rounds", "round", facts["T_max"]))
        result = P.run(
            facts["primorl"],
            private,
            ctx.seed,
            public_split=public,
            public_source=public_source,
            progress=progress,
            workdir=work,
            noise=ctx.noise,
            secret_dir=ctx.secret_dir,
        )
        out = _outputs(facts["primorl"], result, n_public=public.n_episodes)
        out.artifacts["model.pt"] = lambda path: P.save_released_model(result.released, path)
        out.discard = [PENDING, FEDAVG_STATE]
        return out

    def _policy_only(self, lib: Any, released: Any, ctx: RunContext) -> Result:
        from privrl.primorl import primorl as P

        seeds = P._seeds(ctx.seed)
        progress = stage_progress(ctx)
        assert ctx.checkpoint_dir is not None
        stage = P.policy_from_model(
            released,
            lib,
            seed=seeds["stage"],
            checkpoint=ctx.checkpoint_dir / "checkpoint.pt",
            progress=lambda record: progress("policy", record),
        )
        result = P.PrimorlResult(
            released=released,
            fedavg=released.fedavg,
            stage=stage,
            report=P.stage_report(released.report, lib, stage.start_mode),
            return_mean=stage.return_mean,
            return_std=stage.return_std,
            normalised_score=P.normalised_score(stage.return_mean, released.reference_returns),
        )
        return _outputs(lib, result, n_public=None)


@dataclass(frozen=True)
class PublicSource:
    """Which data a run uses in the clear, fixed from the headers before any episode is read:
    the `--public-data` file (``path``), the episodes the data file's metadata declares public
    (``declaration``), or none (both None)."""

    path: Path | None = None
    content_sha256: str | None = None
    n_episodes: int = 0
    declaration: Any = None  # privrl.data.public.PublicDeclaration

    def describe(self) -> str | None:
        """The public data, as the report names it (None: there is none)."""
        if self.path is not None:
            return (
                f"the dataset {self.path.name} declared public ({self.n_episodes} episodes, "
                f"content sha256 {self.content_sha256})"
            )
        if self.declaration is not None:
            return self.declaration.describe()
        return None

    @property
    def identity(self) -> dict[str, Any]:
        """config.json's record of the public source: its identity, nothing from private data."""
        if self.path is not None:
            return {
                "source": "public dataset file",
                "file": self.path.name,
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


def plan_public_source(config: PrimorlRunConfig, header: Any, lib: Any) -> PublicSource:
    """The run's public data from the headers alone (`--public-data`, else the data file's
    declaration, else none), checked: a public file describes the same task and spaces, has no
    ledger and is not the private file; without public data the declared bounds must be
    finite; ``--start-states public-split`` needs public data."""
    from privrl.data.dataset import DatasetError
    from privrl.data.public import PUBLIC_EPISODES, PUBLIC_UNIT_IDS, declared_public
    from privrl.primorl.primorl import bounds_normalizer

    try:
        declaration = declared_public(header.metadata, header.n_episodes)
    except DatasetError as exc:
        raise ConfigError("data", f"{header.path}: {exc}") from None
    if declaration is not None and declaration.key == PUBLIC_EPISODES and config.unit == "user":
        raise ConfigError(
            "unit",
            f"user: {header.path} declares public episodes, not users; with --unit user "
            "declare public users (metadata extra public_unit_ids) or give --public-data",
        )
    if declaration is not None and declaration.key == PUBLIC_UNIT_IDS:
        if not _has_unit_ids(header.path):
            raise ConfigError(
                "data",
                f"{header.path} declares public unit ids but stores no unit ids; declare "
                f"public episodes ({PUBLIC_EPISODES}) instead",
            )
    source = PublicSource(declaration=declaration)
    if config.public_data is not None:
        path = Path(config.public_data)
        if declaration is not None:
            raise ConfigError(
                "public_data",
                f"{path}: {header.path} already declares public episodes "
                f"({declaration.key}); give one public source",
            )
        source = _public_file(path, header)
    if source.describe() is None:
        try:
            bounds_normalizer(header.metadata)
        except ValueError as exc:
            raise ConfigError("public_data", f"is not given: {exc}") from None
        if lib.starts == "public-split":
            raise ConfigError(
                "start_states",
                "public-split needs public data: give --public-data FILE (or declare public "
                "episodes in the dataset's metadata), or use --start-states initial",
            )
    return source


def _public_file(path: Path, header: Any) -> PublicSource:
    """The `--public-data` file, checked from its header (no episode read)."""
    from privrl.data.dataset import DatasetError
    from privrl.data.io import content_sha256, read_header
    from privrl.data.public import check_public_compatible, not_public_because

    try:
        pub = read_header(path)
        check_public_compatible(pub.metadata, header.metadata, where=str(path))
    except DatasetError as exc:
        raise ConfigError("public_data", str(exc)) from None
    why = not_public_because(path, header.path)
    if why is not None:
        raise ConfigError(
            "public_data", f"{path}: {why}; give a separate dataset you declare public"
        )
    digest = content_sha256(path)
    if pub.n_episodes < 1:
        raise ConfigError("public_data", f"{path} has no episodes")
    return PublicSource(path=path, content_sha256=digest, n_episodes=pub.n_episodes)


def _check_declared(header: Any, task: Any, config: PrimorlRunConfig) -> None:
    """The header's declared spaces, unit ids and unit column fit the task and the options."""
    meta, path = header.metadata, header.path
    for name, space, dim in (
        ("observation", meta.observation_space, task.obs_dim),
        ("action", meta.action_space, task.act_dim),
    ):
        shape = getattr(space, "shape", None)
        if shape is not None and tuple(shape) != (dim,):
            raise ConfigError(
                "data",
                f"{path}: the declared {name} space has shape {tuple(shape)} but "
                f"{task.env_id} has ({dim},); re-import it with the task's spaces",
            )
    if config.unit == "user" and not _has_unit_ids(path):
        raise ConfigError(
            "unit",
            f"user: {path} has no unit ids; import the table with a user column "
            "(`privrl data import T.csv -c episode=…,obs=…,action=…,reward=…,unit=user_id`)",
        )
    recorded = meta.extra.get("unit_column")
    if config.user_column is not None and recorded is not None and recorded != config.user_column:
        raise ConfigError(
            "user_column",
            f"{config.user_column}: the dataset's unit ids came from column {recorded!r}; "
            f"pass --user-column {recorded}",
        )


def _has_unit_ids(path: Path) -> bool:
    """Whether the file stores a unit id per episode (structure only, no array is read)."""
    import h5py

    with h5py.File(path, "r") as f:
        return "unit_ids" in f


def _outputs(lib: Any, result: Any, *, n_public: int | None) -> Result:
    """metrics.json, metrics.csv, model_holdout.csv, privacy.json, policy.pt and the plots."""
    task = result.released.control
    stage, fed, report = result.stage, result.fedavg, result.report
    metrics: dict[str, Any] = {
        "algorithm": "primorl",
        "task": task.name,
        "env_id": task.env_id,
        "reward_transform": task.reward_transform,
        "variant": lib.variant,
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
        "penalty": lib.penalty,
        "lambda": lib.lam,
        "rollout_length": lib.rollout_length,
        "epochs": len(stage.curve),
        "final_epochs": min(lib.final_epochs, len(stage.curve)),
        "policy_stage_seconds": stage.seconds,
        "model_reused": n_public is None,
    }
    if n_public is not None:
        metrics["public_split_units"] = int(n_public)
    out = stage_result(
        metrics,
        report,
        stage,
        label="PRIMORL",
        reference=result.released.reference_returns,
        title=f"PRIMORL on {task.name} (ε = {report.epsilon:.3g}): real-environment return",
        steps_per_epoch=lib.steps_per_epoch,
        summary=[
            f"PRIMORL on {task.name}",
            return_line(
                metrics,
                f"ε {metrics['epsilon']:.3g}",
                f"rounds {metrics['rounds']} / {metrics['max_rounds']}",
                f"start states {metrics['start_mode']}",
            ),
        ],
    )
    rows = [
        {"round": int(r), **{f"mse_member{i}": float(v) for i, v in enumerate(m)}}
        for r, m in zip(fed.get("eval_rounds", []), fed.get("holdout_mse", []), strict=True)
    ]
    if rows:
        out.artifacts["model_holdout.csv"] = lambda path: _write_csv(path, rows)
        mse = np.asarray(fed["holdout_mse"], dtype=np.float64)
        x = [float(r) for r in fed["eval_rounds"]]
        out.plots["model_holdout"] = PlotSpec(
            "model_holdout",
            "released model: public-split error over rounds",
            "DP-FedAvg round",
            "MSE on the public split",
            [Series(f"member {i}", x, mse[:, i].tolist()) for i in range(mse.shape[1])],
            logy=True,
        )
    return out


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    import csv

    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
