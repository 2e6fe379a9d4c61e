"""What the two expert-level adapters share: the command's wording of the library's errors, the
``--reference`` option, loading the dataset file, and the run directory's files (metrics,
learner.pt, the learning curve's plot, the console line)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privrl.config import Config, ConfigError, option
from privrl.expert.public import NEEDS_EVALUATION, NEEDS_NONPRIVATE
from privrl.runs import wording
from privrl.runs.system import Result

if TYPE_CHECKING:
    from privrl.algorithm import Fitted
    from privrl.data.dataset import TrajectoryDataset
    from privrl.expert.base import ExpertSet
    from privrl.rl.discrete_common import DiscreteLearner

# messages where the command has a way the library does not (a twin's run directory)
_COMMAND_TEXT = {
    NEEDS_EVALUATION: "--reference/--reference-return need an evaluation (drop --no-eval)",
    NEEDS_NONPRIVATE: "needs R_np too: pass --reference RUN_DIR or --reference-return",
}


def reference_option() -> Any:
    """The ``--reference`` option: the twin's run directory (a file the adapter reads)."""
    return option(
        None,
        "--reference",
        help=(
            "Run directory of the non-private twin (privrl train dp-sgd --non-private, same "
            "data, --algo and evaluation horizon): its return R_np scales the normalised score "
            "(R − R_rand)/(R_np − R_rand). Trained on the same data without a mechanism, it is "
            "outside the run's guarantee: the score is labelled evaluation-only."
        ),
    )


def check_one_reference(reference: Path | None, reference_return: float | None) -> None:
    if reference is not None and reference_return is not None:
        raise ConfigError("reference", "and --reference-return: give one, not both")


def command_words(text: str, config_cls: type[Config]) -> str:
    """``text`` with every `field` / `field=VALUE` of ``config_cls`` written as its flag
    (`privrl.runs.wording.command_words`, with the command's own wording of the references'
    messages)."""
    return wording.command_words(text, config_cls, _COMMAND_TEXT)


def in_command_words(config_cls: type[Config]) -> AbstractContextManager[None]:
    """Re-raise the library's errors with their settings written as the command's flags
    (`privrl.runs.wording.in_command_words`)."""
    return wording.in_command_words(config_cls, _COMMAND_TEXT)


@dataclass
class Loaded:
    """The private data of a run: the episodes, their observation size, the expert set."""

    dataset: TrajectoryDataset
    obs_dim: int
    experts: ExpertSet | None = None


def load_episodes(
    source: Path | None, n_actions: int, config_cls: type[Config], *, units: bool = True
) -> Loaded:
    """The episodes (inside the ledger transaction), checked against the public schema (with
    `units`, the expert ids expert-level privacy needs)."""
    from privrl.data.io import load_hdf5
    from privrl.expert.api import expert_data

    assert source is not None  # the systems require --data
    with in_command_words(config_cls):
        dataset, obs_dim = expert_data(load_hdf5(source), n_actions, units=units)
    return Loaded(dataset, obs_dim)


def run_result(fitted: Fitted[DiscreteLearner], *, title: str) -> Result:
    """metrics.json, metrics.csv, learner.pt (+ learner.json), the learning curve's plot and
    the console line of a finished run."""
    metrics = dict(fitted.metrics)
    line = f"steps = {metrics['steps']} ({metrics['private_steps']} private)"
    if "return_mean" in metrics:
        line += f"; return = {metrics['return_mean']:.2f} ± {metrics['return_std']:.2f}"
    if "normalised_score" in metrics:
        line += f"; normalised score = {metrics['normalised_score']:.3f}"
        if metrics.get("reference_return_outside_guarantee"):
            line += " (evaluation-only: outside the guarantee)"
    learner = fitted.policy
    curve = [dict(row) for row in fitted.curve]

    def save_learner(path: Path) -> None:
        import torch

        torch.save(learner.state_dict(), path)

    return Result(
        metrics=metrics,
        privacy=fitted.report,
        curve=curve,
        artifacts={"learner.pt": save_learner, "learner.json": learner.config()},
        plots={"learning_curve": lambda path: _plot(path, curve, title)},
        summary=[line],
    )


def _plot(path: Path, curve: list[dict[str, Any]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 3.8))
    pts = [r for r in curve if "return_mean" in r]
    if pts:
        x = np.array([r["step"] for r in pts])
        y = np.array([r["return_mean"] for r in pts])
        s = np.array([r["return_std"] for r in pts])
        ax.plot(x, y, "o-", ms=3, label="greedy return (mean over episodes)")
        ax.fill_between(x, y - s, y + s, alpha=0.2)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no evaluation", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("training step")
    ax.set_ylabel("return")
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
