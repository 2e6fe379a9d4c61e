"""PRIMORL on the run layer (`privrl train primorl`): a dynamics ensemble trained
with trajectory-level (or user-level) DP by DP-FedAvg, a pessimistic model, and SAC inside it
with zero access to the data. The system adapts `privrl.primorl.PRIMORL`; the algorithm and
its config (`PrimorlConfig`, every flag one of its fields) live there. `PrimorlRunConfig` adds
the data sources of a run: a public dataset file, a released model, the unit column.

- `plan` (header only): the task from the env id, the file's unit ids and unit column, the
  `--public-data` file's header, then the library's plan: every public parameter (z or
  target ε, C, q, δ, T_max, K) and the planned report for T_max rounds, which the ledger checks
  before a byte of episode data is read. Which data is public is fixed from the headers alone,
  and config.json records its identity (the public file's content fingerprint, or the
  declared list's digest), never anything computed from the private episodes.
- `load` (inside the ledger transaction): the episodes, a schema check of their shapes, and the
  public data: the `--public-data` file, or the episodes the file's metadata declares public
  (`privrl.data.public`), or none.
- `run`: on the torch device `plan` resolved (``--device``; recorded in metrics.json), the
  library's computation (DP-FedAvg → the released model (model.pt) → the policy
  stage); checkpoints (``released.pending.pt``, ``checkpoint.pt``, ``run.json``) stay in the
  run directory itself, and a rerun with the same settings resumes. DP-FedAvg's secret state
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
from privrl.data.dataset import TrajectoryDataset
from privrl.data.io import DatasetHeader
from privrl.envs.control import ControlTask
from privrl.primorl.learners import PublicSource
from privrl.primorl.primorl import PrimorlConfig, PrimorlResult, ReleasedModel
from privrl.runs.system import Plan, PlotSpec, Result, RunContext, Series, System
from privrl.systems.mopo import check_resume, header_task, return_line, stage_result

__all__ = ["PrimorlRunConfig", "PrimorlSystem"]

PENDING = "released.pending.pt"  # the release while the run is unfinished (not recorded)
FEDAVG_STATE = "fedavg_state.pt"  # DP-FedAvg's secret state between rounds
CHECKPOINTS = (PENDING, FEDAVG_STATE, "checkpoint.pt")
NEEDS_TASK = (
    "PRIMORL needs a control task: a privrl id or a Gymnasium continuous-control id (collect "
    "with `privrl data collect --env Pendulum-v1`, or import with --env-id)"
)
LoadedData = tuple[TrajectoryDataset, TrajectoryDataset, str | None]


@dataclass(frozen=True)
class PrimorlRunConfig(PrimorlConfig):
    """`privrl train primorl`: PRIMORL's config and the data sources of a run."""

    system = "primorl"

    user_column: str | None = option(
        None,
        "--user-column",
        help="With --unit user: the table column `privrl data import -c …,unit=COL` mapped "
        "to the dataset's unit ids (checked against the file's record).",
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
    model: Path | None = option(  # noqa: RUF009 - option() is a dataclasses.field
        None,
        "--model",
        help="A released model (DIR/model.pt): run only the policy stage — no data, no spend.",
    )

    def validate(self) -> None:
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
                    ("--horizon", self.horizon),
                    ("--action-bounds", self.action_bounds),
                    ("--reward-range", self.reward_range),
                    ("--local-optimizer", None if self.local_optimizer == "sgd" else "adam"),
                    ("--server-momentum", self.server_momentum or None),
                    ("--server-lr", None if self.server_lr == 1 else self.server_lr),
                    ("--server-optimizer", None if self.server_optimizer == "sgd" else "adam"),
                    ("--private-trainer", None if self.private_trainer == "dp-fedavg" else 1),
                    ("--dynamics-hidden", self.dynamics_hidden),
                    ("--server-ema", self.server_ema or None),
                )
                if value is not None
            ]
            if given:
                raise ValueError(
                    f"{', '.join(given)} set(s) the private training, which --model reuses as "
                    "released; drop it"
                )


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
      privrl train primorl --data car.h5 --clip 0.1 --steps 2000 --epsilon 5 \\
          --horizon 200 --reward-range=-1,1   # a Gymnasium id without a preset
      privrl train primorl --model runs/hi/model.pt --epochs 50 --out runs/again

    Public data is declared, never chosen from the private episodes: --public-data FILE (same
    task and spaces, no ledger), else the episodes D.h5's metadata declares public
    (`privrl data declare-public`; the primorl recipes declare 1% / 10%), else none:
    the input normaliser comes from the declared observation/action bounds (an unbounded space is
    refused), all --steps rounds run and every ensemble member is an elite. The guarantee covers
    every trajectory (user) of --data except the public data, which is not protected.

    q defaults to min(1, 30/K) for the declared K (the paper's q = 0.001 at K = 30,000), and
    the run warns when K is too small for the noise (q·K < 1, or zC/(qK) ≥ C).

    Writes config.json, metrics.json (return_mean, return_std, normalised_score, epsilon,
    delta), metrics.csv (per SAC epoch), model_holdout.csv, privacy.json (one release),
    model.pt, policy.pt and plots/. A rerun with the same flags and --out resumes.
"""
    resumable = True
    checkpoint_subdir = ""  # the checkpoints beside config.json
    auto_resume = True

    # -- plan: public facts only ---------------------------------------------------------------

    def plan(self, config: PrimorlRunConfig, header: DatasetHeader | None) -> Plan:
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
        from privrl.primorl.learners import plan_primorl

        assert header.path is not None
        source, task = header_task(header, NEEDS_TASK, config)
        _check_declared(header, task, config)
        given = None if config.public_data is None else _public_file(config.public_data, header)
        planned = plan_primorl(
            config.for_task(source), header, given, has_unit_ids=_has_unit_ids(header.path)
        )
        public = {
            "command": "privrl train primorl",
            "algorithm": "primorl",
            "data": header.path.name,
            **planned.public,
        }
        facts = {**planned.facts, "public_path": config.public_data}
        return Plan(report=planned.report, public=public, facts=facts)

    def _plan_policy_only(self, config: PrimorlRunConfig) -> Plan:
        from privrl.primorl import primorl as P

        assert config.model is not None
        if not config.model.is_file():
            raise ValueError(f"--model: file not found: {config.model}")
        released = P.load_released_model(config.model)
        lib = config.for_task(released.control)
        if lib.start_states == "public-split" and released.public_states is None:
            raise ConfigError(
                "start_states", "public-split: the released model carries no public split"
            )
        if lib.start_states == "public-split" and released.public_source is None:
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
        facts = {"primorl": lib, "released": released, "device": lib.torch_device()}
        return Plan(report=released.report, public=public, facts=facts)

    # -- load: inside the ledger transaction -------------------------------------------------------

    def load(
        self,
        config: PrimorlRunConfig,
        source: Path | None,
        plan: Plan,
        rng: np.random.Generator,
    ) -> LoadedData | None:
        if source is None:
            return None
        from privrl.data.io import load_hdf5
        from privrl.primorl.learners import in_task_scale, split_public

        dataset = in_task_scale(super().load(config, source, plan, rng), "data", str(source), plan)
        path: Path | None = plan.facts["public_path"]
        public = None
        if path is not None:
            public = in_task_scale(load_hdf5(path), "public_data", str(path), plan)
        return split_public(dataset, public, plan)

    # -- run -------------------------------------------------------------------------------------

    def run(
        self,
        config: PrimorlRunConfig,
        data: LoadedData | None,
        rng: np.random.Generator,
        ctx: RunContext,
    ) -> Result:
        import torch

        from privrl.primorl import primorl as P
        from privrl.primorl.learners import PRIMORL

        assert ctx.plan is not None and ctx.checkpoint_dir is not None
        torch.set_num_threads(config.threads)
        facts, work = ctx.plan.facts, ctx.checkpoint_dir
        if data is None:
            return self._policy_only(facts["primorl"], facts["released"], facts["device"], ctx)
        if check_resume(
            work, {**ctx.plan.public, "seed": ctx.seed}, CHECKPOINTS, insist=ctx.resume
        ):
            if (work / "model.pt").exists():
                raise ValueError(
                    f"{work}/ holds a finished run; to train the policy stage longer on its "
                    f"released model (no new spend) use --model {work}/model.pt --out NEW_DIR"
                )
            ctx.notice(f"resuming {work}/ from its checkpoint")
        result = PRIMORL(facts["primorl"]).compute(
            ctx.plan,
            data,
            seed=ctx.seed,
            noise=ctx.noise,
            progress=ctx.progress,
            workdir=work,
            secret_dir=ctx.secret_dir,
        )
        out = _outputs(facts["primorl"], result, n_public=data[1].n_episodes)
        out.artifacts["model.pt"] = lambda path: P.save_released_model(result.released, path)
        out.discard = [PENDING, FEDAVG_STATE]
        return out

    def _policy_only(
        self, lib: PrimorlConfig, released: ReleasedModel, device: Any, ctx: RunContext
    ) -> Result:
        from privrl.primorl.learners import policy_stage_only

        assert ctx.checkpoint_dir is not None
        result = policy_stage_only(
            released,
            lib,
            seed=ctx.seed,
            checkpoint=ctx.checkpoint_dir / "checkpoint.pt",
            progress=ctx.progress,
            device=device,
        )
        return _outputs(lib, result, n_public=None)


def _public_file(path: Path, header: DatasetHeader) -> PublicSource:
    """The `--public-data` file, checked from its header (no episode read)."""
    from privrl.data.dataset import DatasetError
    from privrl.data.io import content_sha256, read_header
    from privrl.data.public import check_public_compatible, not_public_because
    from privrl.primorl.learners import one_public_source

    one_public_source(str(path), header)
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
    return PublicSource(
        name=path.name,
        content_sha256=digest,
        n_episodes=pub.n_episodes,
        kind="public dataset file",
    )


def _check_declared(header: DatasetHeader, task: ControlTask, config: Any) -> None:
    """The header's declared spaces, unit ids and unit column fit the task and the options."""
    from privrl.primorl.learners import check_declared

    assert header.path is not None
    check_declared(header, task, config, has_unit_ids=_has_unit_ids(header.path))
    recorded = header.metadata.extra.get("unit_column")
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


def _outputs(lib: PrimorlConfig, result: PrimorlResult, *, n_public: int | None) -> Result:
    """metrics.json, metrics.csv, model_holdout.csv, privacy.json, policy.pt and the plots."""
    from privrl.primorl.learners import primorl_metrics

    task = result.released.control
    stage, fed, report = result.stage, result.fedavg, result.report
    metrics = primorl_metrics(lib, result, n_public=n_public)
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
