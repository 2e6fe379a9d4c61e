"""The run layer's side of the expert-level systems (`privrl.systems.expert`), from the dataset's
header and the command's settings only — nothing here reads an episode or an expert's policy.

The public parameters, the evaluation set-up and the normalised score's references are the
library's (`privrl.expert.public`, re-exported here); this module adds what only a command
has: the expert set's directory (``--experts`` or the metadata's ``extra["experts_dir"]``),
the evaluation environment of a recipe's dataset, the non-private twin's run directory
(``--reference``) and the planned spend of a target budget.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privrl.config import ConfigError
from privrl.expert.config import EVAL_SEED_STEP, MAX_ACTIONS, MAX_EXPERTS
from privrl.expert.public import (
    CARTPOLE_EVAL_HORIZON,
    Reference,
    check_batch,
    eval_setup,
    flag_or_default,
    greedy_evaluator,
    resolve_actions,
    resolve_delta,
    resolve_experts,
)

if TYPE_CHECKING:
    from privrl.data.dataset import DatasetMetadata
    from privrl.data.io import DatasetHeader
    from privrl.expert.config import ExpertTrainingConfig
    from privrl.privacy.report import PrivacyReport
    from privrl.rl.discrete_common import DiscreteLearner

__all__ = [
    "CARTPOLE_EVAL_HORIZON",
    "EVAL_SEED_STEP",
    "MAX_ACTIONS",
    "MAX_EXPERTS",
    "REFERENCE_NOTE",
    "Reference",
    "check_batch",
    "eval_setup",
    "evaluator",
    "expert_set_path",
    "experts_from_metadata",
    "flag_or_default",
    "planned_spend",
    "reference_from",
    "resolve_actions",
    "resolve_delta",
    "resolve_experts",
    "twin_reference",
]

REFERENCE_NOTE = (
    "metrics.json's normalised_score uses R_np, the return of a non-private twin trained on "
    "the same private data (--reference): R_np and the score are evaluation-only and NOT "
    "covered by this guarantee (reference_return_outside_guarantee: true); publish "
    "return_mean, or a score against a reference from separate data"
)


def planned_spend(epsilon: float, delta: float, system: str) -> PrivacyReport:
    """The spend checked against a ledger before the data are read: the run's target (ε, δ)
    under the expert unit (the run never exceeds it; the certified report is recorded)."""
    from privrl.expert.dpsgd import BACKEND, RELATION, UNIT
    from privrl.privacy.events import ApproxDpEvent
    from privrl.privacy.release import Release
    from privrl.privacy.report import PrivacyReport

    planned = Release(
        name="planned spend: the run's target budget (ε, δ)",
        mechanism="approx_dp",
        sensitivity=0.0,
        norm="l2",
        noise={},
        event=ApproxDpEvent(epsilon=float(epsilon), delta=float(delta)),
    )
    # stated directly, not re-accounted: the target is the (ε, δ) the run is calibrated to
    return PrivacyReport(
        unit=UNIT,
        relation=RELATION,
        releases=[planned],
        delta=float(delta),
        epsilon=float(epsilon),
        rho=None,
        accountant="planned: the run's target (ε, δ)",
        backend=BACKEND,
        system=f"{system} (planned)",
    )


def experts_from_metadata(data: Path, meta: DatasetMetadata) -> Path:
    """The expert set named by the dataset's metadata (``extra["experts_dir"]``, relative to
    the dataset file), for ``--experts`` left out. Uses the header's metadata only."""
    extra = meta.extra if isinstance(meta.extra, dict) else {}
    rel = extra.get("experts_dir")
    if not isinstance(rel, str) or not rel:
        raise ConfigError(
            "experts",
            "is required: the dataset's metadata name no expert set "
            '(extra["experts_dir"]); pass --experts DIR',
        )
    path = Path(rel)
    path = path if path.is_absolute() else data.parent / path
    if not path.exists():
        raise ConfigError(
            "experts",
            f"left out, and the dataset's expert set {path} (metadata experts_dir = {rel!r}) "
            "does not exist; pass --experts DIR or rebuild the dataset's recipe",
        )
    return path


def expert_set_path(given: Path | None, data: Path, meta: DatasetMetadata) -> Path:
    """``--experts`` (checked to be a directory), or the one the metadata name."""
    if given is None:
        return experts_from_metadata(data, meta)
    if not given.exists():
        raise ConfigError("experts", f"not found: {given}")
    if not given.is_dir():
        raise ConfigError("experts", f"{given} is not a directory; give an expert set's directory")
    return given


# ---------------------------------------------------------------------------------------------
# evaluation in the dataset's public environment
# ---------------------------------------------------------------------------------------------


def evaluator(
    meta: DatasetMetadata, info: dict[str, Any], seed: int, *, step: int = EVAL_SEED_STEP
) -> Callable[[DiscreteLearner], np.ndarray] | None:
    """Greedy evaluation as `eval_setup` planned it (None when skipped), in the dataset's
    environment with its recipe's ``env_kwargs``; evaluation k resets its environments from
    seed ``seed + k·step``."""
    if "eval_horizon" not in info:
        return None
    from privrl.envs import eval_env_factory

    make = eval_env_factory(meta, info["eval_horizon"])  # with the recipe's env_kwargs (HIV)
    return greedy_evaluator(info, make, seed, step=step)


# ---------------------------------------------------------------------------------------------
# the normalised score's references: the non-private twin's run directory
# ---------------------------------------------------------------------------------------------


def reference_from(
    reference: Path | None,
    reference_return: float | None,
    random_return: float | None,
    *,
    algo: str,
    data: Path,
) -> Reference:
    """Read ``--reference RUN_DIR`` (a non-private twin of the same data and learner) or take
    ``--reference-return``; before the data are read."""
    if reference_return is not None:
        return Reference(reference_return, random_return, "reference_return", explicit=True)
    if reference is None:
        return Reference(random=random_return, explicit=random_return is not None)
    from privrl.runs.rundir import read_run

    found = read_run(reference)
    if found is None:
        raise ConfigError(
            "reference",
            f"{reference}: not a readable run directory (needs config.json and metrics.json, "
            "as every privrl train command writes)",
        )
    config, metrics = found
    if config.get("command") != "privrl train dp-sgd" or not config.get("non_private"):
        raise ConfigError(
            "reference",
            f"{reference}: not a non-private twin (privrl train dp-sgd --non-private); its "
            "return is not the normalised score's 1",
        )
    if config.get("algo") != algo:
        raise ConfigError(
            "reference", f"{reference}: trained --algo {config.get('algo')}, this run {algo}"
        )
    if not _same_file(Path(str(config.get("data"))), data):
        raise ConfigError(
            "reference", f"{reference}: trained on {config.get('data')}, this run on {data}"
        )
    if "return_mean" not in metrics:
        raise ConfigError("reference", f"{reference}: the twin was not evaluated (--no-eval)")
    horizon = config.get("eval_horizon")
    return Reference(
        float(metrics["return_mean"]),
        random_return,
        str(reference),
        explicit=True,
        eval_horizon=int(horizon) if isinstance(horizon, int) else None,
        twin=True,
    )


def _same_file(recorded: Path, data: Path) -> bool:
    """The twin's recorded data path names this dataset (the same file where both exist, else
    the same file name: the twin may have been run from another directory)."""
    if recorded.exists() and data.exists():
        return os.path.samefile(recorded, data)
    return recorded.name == data.name


def twin_reference(
    config: ExpertTrainingConfig, reference: Path | None, header: DatasetHeader
) -> Reference | None:
    """The normalised score's references from the twin's run directory ``--reference`` (None
    without one: the library takes the config's numbers), checked against this run's
    evaluation horizon before the data are read."""
    if reference is None or header.path is None:
        return None
    ref = reference_from(
        reference,
        config.reference_return,
        config.random_return,
        algo=config.algo,
        data=Path(header.path),
    )
    info = eval_setup(
        header.metadata,
        episodes=config.eval_episodes,
        horizon=config.eval_horizon,
        no_eval=config.no_eval,
    )
    horizon = info.get("eval_horizon")
    if horizon is not None and ref.eval_horizon is not None and ref.eval_horizon != horizon:
        raise ConfigError(
            "reference",
            f"(the twin) was evaluated over {ref.eval_horizon} steps, this run over "
            f"{horizon}; pass the same --eval-horizon",
        )
    return replace(ref, note=REFERENCE_NOTE)
