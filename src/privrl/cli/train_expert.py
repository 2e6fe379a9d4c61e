"""`privrl train expert-dp` and `privrl train dp-sgd`: offline RL with expert-level privacy
(Sharma et al.): discrete CQL or BCQ trained with the consensus filter + Selective DP-SGD, or
with expert-level DP-SGD alone (the paper's baseline; ``--non-private`` runs its non-private
twin, the reference of the normalised score).

The dataset must record the expert of every trajectory (``unit_ids``). ``--experts`` defaults to
the expert set the dataset's metadata name (``extra["experts_dir"]``, relative to the dataset
file; the ``experts-*`` recipes write it). ``--filter-calibration tight`` calibrates the
consensus filter to the exact advanced-composition bound instead of the paper's formula, and
``pld`` to the PLD (optimal) composition of its rounds, which spends all of ε1 and roughly
halves the threshold (``privrl.privacy.threshold``). ``--dp-sgd-budget joint`` sizes
DP-SGD's steps against the total (ε, δ) composed with the filter's rounds, instead of
(ε2, δ2) alone. The learned policy is
evaluated greedily in the dataset's environment (``metadata.env_id``): the mean return of 10
evaluations spaced over the last 10,000 steps, each of ``--eval-episodes`` episodes (CartPole
is evaluated for 1000 steps, other environments for the dataset's horizon).

The normalised score (R − R_rand)/(R_np − R_rand) is reported too when R_np is known: from
``--reference RUN_DIR`` (the run directory of ``privrl train dp-sgd --non-private`` with the
same data, ``--algo`` and evaluation horizon), from ``--reference-return R_np``, or from the
metadata's ``extra["reference_returns"]["nonprivate"]``. R_rand is the uniform-random return the
``experts-*`` recipes record in ``extra["reference_returns"]["random"]`` (or
``--random-return``). Both references are public to the analyst (they chose to compute them);
the score only rescales the private run's return.

Every run writes the run-directory contract: config.json, metrics.json, metrics.csv (the
learning curve), privacy.json, plots/learning_curve.png and learner.pt (reload with
``DiscreteCQL(...).load_state_dict(torch.load(...))``). A dataset with a ledger is checked
before the data are read; the planned spend is the run's target (ε, δ).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import typer

from privrl.cli.errors import CliError
from privrl.privacy.threshold import CALIBRATIONS

ALGOS = ("cql", "bcq")
CARTPOLE_EVAL_HORIZON = 1000


def register(app: typer.Typer) -> None:
    """Add this module's commands to `privrl train`."""
    app.command("expert-dp", no_args_is_help=True)(expert_dp_command)
    app.command("dp-sgd", no_args_is_help=True)(dp_sgd_command)


# ---------------------------------------------------------------------------------------------
# options
# ---------------------------------------------------------------------------------------------

_DATA = typer.Option(..., "--data", help="Dataset file (.h5) with the expert id of every episode.")
_ALGO = typer.Option("cql", "--algo", help="Offline RL learner: cql or bcq.")
_EPSILON = typer.Option(..., "--epsilon", help="Total privacy budget ε of the run.")
_DELTA = typer.Option(None, "--delta", help="δ of the run (default 1/m, m = number of experts).")
_BATCH = typer.Option(128, "--batch-size", "-b", help="Expected batch size b (rate b/m).")
_NOISE = typer.Option(
    20.0, "--noise-multiplier", "-z", help="DP-SGD noise multiplier σ (noise std / C)."
)
_CLIP = typer.Option(1.0, "--clip-norm", help="Per-expert gradient clipping norm C.")
_LR = typer.Option(None, "--lr", help="Adam learning rate (default 3e-4).")
_STEPS_CAP = typer.Option(
    100_000, "--steps-cap", help="Most training steps (the budget may allow more)."
)
_STEPS = typer.Option(
    None, "--steps", help="Explicit step count (its ε is reported; refused above the budget)."
)
_HIDDEN = typer.Option(
    None, "--hidden", help="Hidden layer sizes, e.g. 256,256 (default; HIV: 512)."
)
_EVAL_EPISODES = typer.Option(10, "--eval-episodes", help="Episodes per evaluation.")
_EVAL_HORIZON = typer.Option(
    None, "--eval-horizon", help="Evaluation episode length (CartPole 1000; else data horizon)."
)
_N_EVALS = typer.Option(10, "--evals", help="Evaluations over the last --eval-window steps.")
_EVAL_WINDOW = typer.Option(10_000, "--eval-window", help="Steps over which evaluations spread.")
_NO_EVAL = typer.Option(False, "--no-eval", help="Skip evaluation (no return metrics).")
_SEED = typer.Option(0, "--seed", help="Seed of the network, the sampling and the noise.")
_REFERENCE = typer.Option(
    None,
    "--reference",
    help=(
        "Run directory of the non-private twin (privrl train dp-sgd --non-private, same data, "
        "--algo and evaluation horizon): its return R_np scales the normalised score "
        "(R − R_rand)/(R_np − R_rand)."
    ),
)
_REFERENCE_RETURN = typer.Option(
    None, "--reference-return", help="R_np of the normalised score, given as a number."
)
_RANDOM_RETURN = typer.Option(
    None,
    "--random-return",
    help="R_rand of the normalised score (default: the dataset's recorded random return).",
)


def _out_option(name: str) -> Any:
    return typer.Option(Path("runs") / name, "--out", "-o", help="Run directory to write.")


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _check_common(
    algo: str, epsilon: float, delta: float | None, batch_size: int, noise: float, clip: float
) -> None:
    if algo not in ALGOS:
        raise CliError(f"--algo must be one of {', '.join(ALGOS)}, got {algo!r}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise CliError(f"--epsilon must be finite and > 0, got {epsilon}")
    if delta is not None and not 0 < delta < 1:
        raise CliError(f"--delta must be in (0, 1), got {delta}")
    if batch_size < 1:
        raise CliError(f"--batch-size must be >= 1, got {batch_size}")
    if not (math.isfinite(noise) and noise > 0):
        raise CliError(f"--noise-multiplier must be finite and > 0, got {noise}")
    if not (math.isfinite(clip) and clip > 0):
        raise CliError(f"--clip-norm must be finite and > 0, got {clip}")


def _parse_hidden(hidden: str | None, env_id: str | None) -> tuple[int, ...]:
    if hidden is None:
        return (512,) if env_id is not None and "HIV" in env_id else (256, 256)
    try:
        sizes = tuple(int(h) for h in hidden.split(",") if h.strip())
    except ValueError:
        raise CliError(f"--hidden must be comma-separated integers, got {hidden!r}") from None
    if not sizes or min(sizes) < 1:
        raise CliError(f"--hidden must be positive sizes, got {hidden!r}")
    return sizes


def _load_dataset(path: Path) -> Any:
    from privrl.data.io import load_hdf5

    if not path.is_file():
        raise CliError(f"--data: file not found: {path}")
    return load_hdf5(path)


def _spaces(dataset: Any) -> tuple[int, int]:
    """(obs_dim, n_actions) of a dataset with flat observations and Discrete actions."""
    from gymnasium import spaces

    if dataset.unit_ids is None:
        raise CliError(
            "the dataset has no expert ids (unit_ids is None): expert-level privacy needs the "
            "expert of every trajectory; collect or import the data with unit ids"
        )
    act = dataset.metadata.action_space
    actions = np.asarray(dataset.actions)
    if isinstance(act, spaces.Discrete):
        n_actions = int(act.n)
        if int(act.start) != 0:
            raise CliError(f"the action space must start at 0, got {act}")
    elif actions.ndim == 1 and actions.dtype.kind in "iu":
        n_actions = int(actions.max()) + 1 if actions.size else 0
    else:
        raise CliError(f"CQL/BCQ need discrete actions; the dataset's action space is {act}")
    if n_actions < 2:
        raise CliError(f"need at least 2 actions, the data have {n_actions}")
    obs = np.asarray(dataset.observations)
    if obs.ndim != 2:
        raise CliError(f"observations must be flat vectors, got shape {obs.shape[1:]}")
    return int(obs.shape[1]), n_actions


def _obs_transform(env_id: str | None) -> Any:
    from privrl.rl.discrete_common import ObsTransform

    if env_id is not None and "HIV" in env_id:
        from privrl.envs.hiv import log_state_statistics

        mean, std = log_state_statistics()  # public simulator rollouts, no private data
        return ObsTransform(
            log10=True,
            loc=tuple(float(v) for v in mean),
            scale=tuple(float(v) for v in std),
            source="log10 + public HIV simulator statistics",
        )
    return ObsTransform()


def _make_learner(
    algo: str, obs_dim: int, n_actions: int, hidden: tuple[int, ...], lr: float, seed: int, tf: Any
) -> Any:
    from privrl.rl.bcq import DiscreteBCQ
    from privrl.rl.cql import DiscreteCQL

    cls = DiscreteCQL if algo == "cql" else DiscreteBCQ
    return cls(obs_dim, n_actions, hidden=hidden, lr=lr, seed=seed, obs_transform=tf)


def _evaluator(
    dataset: Any, episodes: int, horizon: int | None, seed: int, no_eval: bool
) -> tuple[Callable[[Any], np.ndarray] | None, dict[str, Any]]:
    """Greedy evaluation in the dataset's (public) environment."""
    if no_eval:
        return None, {"evaluation": "skipped (--no-eval)"}
    import gymnasium as gym

    from privrl.envs import register_envs
    from privrl.rl.discrete_common import evaluate_greedy

    if episodes < 1:
        raise CliError(f"--eval-episodes must be >= 1, got {episodes}")
    env_id = dataset.metadata.env_id
    if env_id is None:
        raise CliError(
            "cannot evaluate: the dataset's metadata name no environment (env_id); pass --no-eval"
        )
    register_envs()
    if env_id not in gym.registry:
        raise CliError(f"cannot evaluate: unknown environment {env_id!r}; pass --no-eval")
    if horizon is None:
        horizon = (
            CARTPOLE_EVAL_HORIZON if env_id.startswith("CartPole") else dataset.metadata.horizon
        )
    if horizon is not None and horizon < 1:
        raise CliError(f"--eval-horizon must be >= 1, got {horizon}")
    from privrl.experiments.expert import eval_env_factory

    make = eval_env_factory(dataset.metadata, horizon)  # with the recipe's env_kwargs (HIV)
    counter = iter(range(10**9))

    def evaluate(learner: Any) -> np.ndarray:
        return evaluate_greedy(learner, make, episodes=episodes, seed=seed + 7919 * next(counter))

    return evaluate, {"env_id": env_id, "eval_horizon": horizon, "eval_episodes": episodes}


def _progress_bar(label: str) -> Any:
    """(context manager, callback) — a transient rich bar on a terminal, nothing otherwise."""
    from contextlib import nullcontext

    if not sys.stderr.isatty():
        return nullcontext(), None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    bar = Progress(
        f"[bold]{label}[/]",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task(label, total=None)

    def update(step: int, total: int) -> None:
        if step % 100 == 0 or step == total:
            bar.update(task, completed=step, total=total)

    return bar, update


def _metrics(result: Any, extra: dict[str, Any], reference: Reference) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        "steps": result.steps,
        "private_steps": result.private_steps,
        "epsilon": result.report.epsilon,
        "delta": result.report.delta,
        **extra,
    }
    if result.return_mean is not None:
        metrics["return_mean"] = result.return_mean
        metrics["return_std"] = result.return_std
        metrics.update(reference.score(result.return_mean))
    return metrics


def _write_run(
    out: Path, config: dict[str, Any], metrics: dict[str, Any], result: Any, title: str
) -> None:
    import torch

    from privrl.experiments.rundir import RunDir

    run = RunDir(out)
    run.write_config(config)
    run.write_metrics(metrics)
    rows = result.curve or [{"step": result.steps, "private_steps": result.private_steps}]
    run.write_curve(rows)
    run.write_privacy(result.report)
    torch.save(result.learner.state_dict(), run.artifact("learner.pt"))
    _plot(run.plot_path("learning_curve"), result.curve, title)


def _plot(path: Path, curve: list[dict[str, Any]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _summary(out: Path, metrics: dict[str, Any], report: Any) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console()
    console.print(Text(report.summary()))
    for note in report.notes:
        console.print(Text(f"note: {note}"))
    line = f"steps = {metrics['steps']} ({metrics['private_steps']} private)"
    if "return_mean" in metrics:
        line += f"; return = {metrics['return_mean']:.2f} ± {metrics['return_std']:.2f}"
    if "normalised_score" in metrics:
        line += f"; normalised score = {metrics['normalised_score']:.3f}"
    console.print(Text(line))
    typer.echo(
        f"wrote {out}/ (config.json, metrics.json, metrics.csv, privacy.json, learner.pt, "
        "plots/learning_curve.png)"
    )


def _planned(epsilon: float, delta: float) -> Any:
    """The ledger's planned spend: the run never exceeds its target (ε, δ)."""
    from privrl.privacy.events import ApproxDpEvent

    return ApproxDpEvent(epsilon=float(epsilon), delta=float(delta))


def _has_ledger(data: Path) -> bool:
    from privrl.privacy.ledger import default_ledger_path

    return default_ledger_path(data).exists()


def _experts_from_metadata(data: Path) -> Path:
    """The expert set named by the dataset's metadata (``extra["experts_dir"]``, relative to
    the dataset file), for ``--experts`` left out. Reads the file's public metadata attribute
    only, not the records (so it runs before the ledger check)."""
    import h5py

    if not data.is_file():
        raise CliError(f"--data: file not found: {data}")
    try:
        with h5py.File(data, "r") as f:
            meta = json.loads(f.attrs["metadata"])
    except (OSError, KeyError, ValueError):
        meta = {}
    extra = meta.get("extra") if isinstance(meta, dict) else None
    rel = extra.get("experts_dir") if isinstance(extra, dict) else None
    if not isinstance(rel, str) or not rel:
        raise CliError(
            "--experts is required: the dataset's metadata name no expert set "
            '(extra["experts_dir"]); pass --experts DIR'
        )
    path = Path(rel)
    path = path if path.is_absolute() else data.parent / path
    if not path.exists():
        raise CliError(
            f"--experts: the dataset's expert set {path} (metadata experts_dir = {rel!r}) does "
            "not exist; pass --experts DIR or rebuild the dataset's recipe"
        )
    return path


@dataclass(frozen=True)
class Reference:
    """R_rand and R_np of the normalised score (R − R_rand)/(R_np − R_rand). ``explicit``: asked
    for on the command line, so a score that cannot be computed is an error before training."""

    nonprivate: float | None = None
    random: float | None = None
    source: str | None = None
    explicit: bool = False
    eval_horizon: int | None = None  # of the twin run, when R_np comes from one

    def resolve(self, dataset: Any, eval_info: dict[str, Any]) -> Reference:
        """Fill in what the dataset's metadata record; check the score is defined."""
        refs = dataset.metadata.extra.get("reference_returns")
        refs = refs if isinstance(refs, dict) else {}
        r_np, source = self.nonprivate, self.source
        if r_np is None and refs.get("nonprivate") is not None:
            r_np, source = float(refs["nonprivate"]), "dataset metadata"
        r_rand = self.random if self.random is not None else refs.get("random")
        if not self.explicit:
            ok = r_np is not None and r_rand is not None and r_np != r_rand
            return replace(self, nonprivate=r_np, random=r_rand, source=source) if ok else self
        if "eval_horizon" not in eval_info:
            raise CliError("--reference/--reference-return need an evaluation (drop --no-eval)")
        if self.eval_horizon is not None and self.eval_horizon != eval_info["eval_horizon"]:
            raise CliError(
                f"--reference: the twin was evaluated over {self.eval_horizon} steps, this run "
                f"over {eval_info['eval_horizon']}; pass the same --eval-horizon"
            )
        if r_np is None:
            raise CliError(
                "--random-return needs R_np too: pass --reference RUN_DIR or --reference-return"
            )
        if r_rand is None:
            raise CliError(
                "the dataset records no random-policy return (extra['reference_returns']"
                "['random']) for the normalised score; pass --random-return"
            )
        if r_np == float(r_rand):
            raise CliError(
                f"the reference return R_np = {r_np:g} equals the random return: the normalised "
                "score is undefined"
            )
        return replace(self, nonprivate=r_np, random=float(r_rand), source=source)

    def score(self, ret: float) -> dict[str, Any]:
        """``normalised_score`` and the references it used (nothing when they are unknown)."""
        if self.nonprivate is None or self.random is None:
            return {}
        from privrl.rl.discrete_common import normalised_score

        refs = {"random": self.random, "nonprivate": self.nonprivate, "source": self.source}
        if self.eval_horizon is not None:
            refs["eval_horizon"] = self.eval_horizon
        return {
            "normalised_score": normalised_score(ret, self.random, self.nonprivate),
            "reference_returns": refs,
        }


def _reference(
    reference: Path | None,
    reference_return: float | None,
    random_return: float | None,
    *,
    algo: str,
    data: Path,
) -> Reference:
    """Read ``--reference RUN_DIR`` (a non-private twin of the same data and learner) or take
    ``--reference-return``; before the data are read."""
    for name, value in (
        ("--reference-return", reference_return),
        ("--random-return", random_return),
    ):
        if value is not None and not math.isfinite(value):
            raise CliError(f"{name} must be finite, got {value}")
    if reference is not None and reference_return is not None:
        raise CliError("give --reference or --reference-return, not both")
    if reference_return is not None:
        return Reference(reference_return, random_return, "--reference-return", explicit=True)
    if reference is None:
        return Reference(random=random_return, explicit=random_return is not None)
    config, metrics = _read_run(reference)
    if config.get("command") != "privrl train dp-sgd" or not config.get("non_private"):
        raise CliError(
            f"--reference {reference}: not a non-private twin (privrl train dp-sgd "
            "--non-private); its return is not the normalised score's 1"
        )
    if config.get("algo") != algo:
        raise CliError(
            f"--reference {reference}: trained --algo {config.get('algo')}, this run {algo}"
        )
    if not _same_file(Path(str(config.get("data"))), data):
        raise CliError(
            f"--reference {reference}: trained on {config.get('data')}, this run on {data}"
        )
    if "return_mean" not in metrics:
        raise CliError(f"--reference {reference}: the twin was not evaluated (--no-eval)")
    horizon = config.get("eval_horizon")
    return Reference(
        float(metrics["return_mean"]),
        random_return,
        str(reference),
        explicit=True,
        eval_horizon=int(horizon) if isinstance(horizon, int) else None,
    )


def _read_run(run: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from privrl.experiments.rundir import read_run

    found = read_run(run)
    if found is None:
        raise CliError(
            f"--reference {run}: not a readable run directory (needs config.json and "
            "metrics.json, as every privrl train command writes)"
        )
    return found


def _same_file(recorded: Path, data: Path) -> bool:
    """The twin's recorded data path names this dataset (the same file where both exist, else
    the same file name: the twin may have been run from another directory)."""
    if recorded.exists() and data.exists():
        return os.path.samefile(recorded, data)
    return recorded.name == data.name


def _load_experts(path: Path) -> Any:
    if not path.exists():
        raise CliError(f"--experts: not found: {path}")
    try:
        from privrl.expert.experts import load_experts
    except ImportError:
        raise CliError(
            "--experts: this privrl has no expert loader (privrl.expert.experts.load_experts)"
        ) from None
    return load_experts(path)


# ---------------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------------


def expert_dp_command(
    data: Path = _DATA,
    experts: Path = typer.Option(
        None,
        "--experts",
        help="Expert set (directory) of the data (default: the dataset's extra['experts_dir']).",
    ),
    algo: str = _ALGO,
    epsilon: float = _EPSILON,
    delta: float = _DELTA,
    p: float = typer.Option(
        None, "--p", help="Probability of a private step on D_unst (default CQL 0.8, BCQ 0.5)."
    ),
    filter_rounds: int = typer.Option(
        25, "--filter-rounds", "-T", help="Rounds T of the consensus filter (0 = no filter)."
    ),
    p_min: float = typer.Option(0.02, "--p-min", help="Smallest action probability of experts."),
    filter_calibration: str = typer.Option(
        "paper",
        "--filter-calibration",
        help=(
            "paper (ε' = ε1/sqrt(32·T·ln(2/δ1))), tight (largest ε' within the exact "
            "advanced-composition bound) or pld (largest ε' within the PLD composition)."
        ),
    ),
    filter_below: float = typer.Option(
        5.0, "--filter-below", help="Skip the filter (ε1 = 0) when ε is below this."
    ),
    eps1_fraction: float = typer.Option(0.75, "--eps1-fraction", help="ε1 / ε (filter)."),
    eps2_fraction: float = typer.Option(
        None, "--eps2-fraction", help="ε2 / ε (DP-SGD); must add up to 1 with --eps1-fraction."
    ),
    delta1_fraction: float = typer.Option(0.9, "--delta1-fraction", help="δ1 / δ (filter)."),
    delta2_fraction: float = typer.Option(
        None, "--delta2-fraction", help="δ2 / δ; must add up to 1 with --delta1-fraction."
    ),
    accounting: str = typer.Option(
        "exact",
        "--accounting",
        help="exact (coins conditioned on, certified) or paper (q = p·b/m, NOT certified).",
    ),
    dp_sgd_budget: str = typer.Option(
        "split",
        "--dp-sgd-budget",
        help=(
            "split (the paper: DP-SGD's steps fit (ε2, δ2) alone) or joint (they fit the total "
            "(ε, δ) composed with the filter's rounds by the PLD accountant, so DP-SGD also "
            "gets the part of ε1 that the composition does not use)."
        ),
    ),
    batch_size: int = _BATCH,
    noise_multiplier: float = _NOISE,
    clip_norm: float = _CLIP,
    lr: float = _LR,
    steps_cap: int = _STEPS_CAP,
    steps: int = _STEPS,
    hidden: str = _HIDDEN,
    eval_episodes: int = _EVAL_EPISODES,
    eval_horizon: int = _EVAL_HORIZON,
    evals: int = _N_EVALS,
    eval_window: int = _EVAL_WINDOW,
    no_eval: bool = _NO_EVAL,
    reference: Path = _REFERENCE,
    reference_return: float = _REFERENCE_RETURN,
    random_return: float = _RANDOM_RETURN,
    out: Path = _out_option("expert-dp"),
    seed: int = _SEED,
) -> None:
    """Consensus filter + Selective DP-SGD (Sharma et al.): expert-level (ε, δ)-DP.

    The filter (Algorithm 2, budget ε1, δ1) releases stable trajectory prefixes; training
    (Algorithm 3) takes a private DP-SGD step on the rest with probability p (budget ε2, δ2),
    else an ordinary step on the stable prefixes. Protects one expert with all their
    trajectories (add/remove).
    """
    from privrl.experiments.rundir import ledger_guard
    from privrl.expert.selective import split_budget, train_expert_dp

    _check_common(algo, epsilon, delta, batch_size, noise_multiplier, clip_norm)
    if p is None:
        p = 0.8 if algo == "cql" else 0.5
    if not (math.isfinite(p) and 0.0 <= p <= 1.0):
        raise CliError(f"--p must be in [0, 1], got {p}")
    if filter_rounds < 0:
        raise CliError(f"--filter-rounds must be >= 0, got {filter_rounds}")
    if accounting not in ("exact", "paper"):
        raise CliError(f"--accounting must be exact or paper, got {accounting!r}")
    if dp_sgd_budget not in ("split", "joint"):
        raise CliError(f"--dp-sgd-budget must be split or joint, got {dp_sgd_budget!r}")
    if filter_calibration not in CALIBRATIONS:
        raise CliError(
            f"--filter-calibration must be one of {', '.join(CALIBRATIONS)}, "
            f"got {filter_calibration!r}"
        )
    ref = _reference(reference, reference_return, random_return, algo=algo, data=data)
    if experts is None:
        experts = _experts_from_metadata(data)
    expert_set = _load_experts(experts)
    m = int(expert_set.n_experts)
    delta = 1.0 / m if delta is None else delta
    if not 0 < delta < 1:
        raise CliError(f"δ = 1/m must be in (0, 1); the expert set has m = {m}")
    try:
        split = split_budget(
            epsilon,
            delta,
            p,
            filter_below=filter_below,
            eps1_fraction=eps1_fraction,
            delta1_fraction=delta1_fraction,
            eps2_fraction=eps2_fraction,
            delta2_fraction=delta2_fraction,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    rng = np.random.default_rng(seed)
    with ledger_guard(data, _planned(epsilon, delta), label="privrl train expert-dp") as reports:
        dataset = _load_dataset(data)
        obs_dim, n_actions = _spaces(dataset)
        if int(expert_set.n_actions) != n_actions:
            raise CliError(
                f"--experts: the experts have {expert_set.n_actions} actions but the data have "
                f"{n_actions}; use the expert set that produced this dataset"
            )
        if int(expert_set.obs_dim) != obs_dim:
            raise CliError(
                f"--experts: the experts take observations of dimension {expert_set.obs_dim} "
                f"but the data have {obs_dim}; use the expert set that produced this dataset"
            )
        env_id = dataset.metadata.env_id
        learner = _make_learner(
            algo,
            obs_dim,
            n_actions,
            _parse_hidden(hidden, env_id),
            3e-4 if lr is None else lr,
            seed,
            _obs_transform(env_id),
        )
        evaluate, eval_info = _evaluator(dataset, eval_episodes, eval_horizon, seed, no_eval)
        ref = ref.resolve(dataset, eval_info)
        bar, update = _progress_bar(f"expert-dp {algo}")
        with bar:
            result = train_expert_dp(
                learner,
                dataset,
                expert_set,
                epsilon=epsilon,
                delta=delta,
                p=p,
                rounds=filter_rounds,
                p_min=p_min,
                split=split,
                batch_size=batch_size,
                noise_multiplier=noise_multiplier,
                clip_norm=clip_norm,
                steps=steps,
                steps_cap=steps_cap,
                accounting=accounting,  # type: ignore[arg-type]
                rng=rng,
                evaluate=evaluate,
                n_evals=evals,
                eval_window=eval_window,
                progress=update,
                filter_calibration=filter_calibration,
                dp_sgd_budget=dp_sgd_budget,  # type: ignore[arg-type]
            )
        reports.append(result.report)
    training = result.training
    training.report = result.report  # the run's total report (filter + DP-SGD)
    config = {
        "command": "privrl train expert-dp",
        "data": str(data),
        "reference": None if reference is None else str(reference),
        "reference_return": reference_return,
        "random_return": random_return,
        "experts": str(experts),
        "n_experts": m,
        "algo": algo,
        "learner": learner.config(),
        "epsilon": epsilon,
        "delta": delta,
        "split": result.split.to_dict(),
        "filter_rounds": filter_rounds,
        "filter_calibration": filter_calibration,
        "p_min": p_min,
        "accounting": accounting,
        "dp_sgd_budget": dp_sgd_budget,
        "batch_size": batch_size,
        "noise_multiplier": noise_multiplier,
        "clip_norm": clip_norm,
        "steps": steps,
        "steps_cap": steps_cap,
        "seed": seed,
        **eval_info,
    }
    extra = {
        "algorithm": f"expert-dp {algo}",
        "stable_size": result.stable_size,
        "filter_calibration": filter_calibration,
        "dp_sgd_budget": dp_sgd_budget,
        "epsilon1": result.split.epsilon1,
        "epsilon2": result.split.epsilon2,
        "p": result.split.p,
    }
    # the filter's public summary: counts of released data (privatised by the filter)
    for key in ("released_trajectories", "released_transitions"):
        if key in result.filter_summary:
            extra[key] = result.filter_summary[key]
    metrics = _metrics(training, extra, ref)
    _write_run(out, config, metrics, training, f"expert-dp {algo} (ε = {epsilon:g})")
    _summary(out, metrics, result.report)


def dp_sgd_command(
    data: Path = _DATA,
    algo: str = _ALGO,
    epsilon: float = typer.Option(
        None, "--epsilon", help="Privacy budget ε of the run (not with --non-private)."
    ),
    delta: float = _DELTA,
    n_experts: int = typer.Option(
        None, "--n-experts", help="m (public; default: the number of experts in the data)."
    ),
    sampling: str = typer.Option(
        "poisson", "--sampling", help="poisson (certified) or shuffle (NOT certified)."
    ),
    non_private: bool = typer.Option(
        False, "--non-private", help="Train the non-private twin (ordinary minibatches)."
    ),
    batch_size: int = _BATCH,
    noise_multiplier: float = _NOISE,
    clip_norm: float = _CLIP,
    lr: float = _LR,
    steps_cap: int = _STEPS_CAP,
    steps: int = _STEPS,
    hidden: str = _HIDDEN,
    eval_episodes: int = _EVAL_EPISODES,
    eval_horizon: int = _EVAL_HORIZON,
    evals: int = _N_EVALS,
    eval_window: int = _EVAL_WINDOW,
    no_eval: bool = _NO_EVAL,
    reference: Path = _REFERENCE,
    reference_return: float = _REFERENCE_RETURN,
    random_return: float = _RANDOM_RETURN,
    out: Path = _out_option("dp-sgd"),
    seed: int = _SEED,
) -> None:
    """Expert-level DP-SGD (Sharma et al., Algorithm 4), the paper's baseline.

    Each step Poisson-samples experts (rate b/m), takes one transition of each, clips the
    per-example gradients to C, adds N(0, σ²C²) and divides by b; steps until ε is spent.
    """
    from privrl.experiments.rundir import ledger_guard
    from privrl.expert.dpsgd import RELATION, UNIT, expert_dp_sgd
    from privrl.privacy.report import PrivacyReport

    if epsilon is None and not non_private:
        raise CliError("--epsilon is required (or --non-private for the non-private twin)")
    if epsilon is not None and non_private:
        raise CliError("--non-private takes no --epsilon: the twin is not private")
    _check_common(algo, epsilon or 1.0, delta, batch_size, noise_multiplier, clip_norm)
    if sampling not in ("poisson", "shuffle"):
        raise CliError(f"--sampling must be poisson or shuffle, got {sampling!r}")
    if n_experts is not None and n_experts < 1:
        raise CliError(f"--n-experts must be >= 1, got {n_experts}")
    if not non_private and delta is None and n_experts is None and _has_ledger(data):
        raise CliError(
            "this dataset has a budget ledger: give --delta (or --n-experts) explicitly, since "
            "the default δ = 1/m would read the data before the ledger check"
        )
    if delta is None and n_experts is not None:
        delta = 1.0 / n_experts
    ref = _reference(reference, reference_return, random_return, algo=algo, data=data)
    planned: Any
    if non_private:
        planned = PrivacyReport.non_private(UNIT, RELATION, system="expert-dp-sgd")
    else:  # δ is known here whenever the dataset has a ledger (checked above)
        planned = _planned(float(epsilon), delta if delta is not None else 0.5)
    rng = np.random.default_rng(seed)
    with ledger_guard(data, planned, label="privrl train dp-sgd") as reports:
        dataset = _load_dataset(data)
        obs_dim, n_actions = _spaces(dataset)
        m = int(n_experts) if n_experts is not None else dataset.n_units
        if m < dataset.n_units:
            raise CliError(f"--n-experts {m} is below the {dataset.n_units} experts in the data")
        if delta is None:
            delta = 1.0 / m
        if not 0 < delta < 1:
            raise CliError(f"δ = 1/m must be in (0, 1); the data have m = {m} experts")
        if batch_size > m:
            raise CliError(f"--batch-size {batch_size} exceeds the number of experts m = {m}")
        env_id = dataset.metadata.env_id
        learner = _make_learner(
            algo,
            obs_dim,
            n_actions,
            _parse_hidden(hidden, env_id),
            3e-4 if lr is None else lr,
            seed,
            _obs_transform(env_id),
        )
        evaluate, eval_info = _evaluator(dataset, eval_episodes, eval_horizon, seed, no_eval)
        ref = ref.resolve(dataset, eval_info)
        bar, update = _progress_bar(f"dp-sgd {algo}")
        with bar:
            result = expert_dp_sgd(
                learner,
                dataset,
                epsilon=epsilon,
                delta=delta,
                batch_size=batch_size,
                noise_multiplier=noise_multiplier,
                clip_norm=clip_norm,
                steps=steps if steps is not None or not non_private else steps_cap,
                steps_cap=steps_cap,
                n_units=m,
                sampling=sampling,  # type: ignore[arg-type]
                private=not non_private,
                rng=rng,
                evaluate=evaluate,
                n_evals=evals,
                eval_window=eval_window,
                progress=update,
            )
        if not non_private:
            reports.append(result.report)
    config = {
        "command": "privrl train dp-sgd",
        "data": str(data),
        "reference": None if reference is None else str(reference),
        "reference_return": reference_return,
        "random_return": random_return,
        "algo": algo,
        "learner": learner.config(),
        "epsilon": None if non_private else epsilon,
        "delta": delta,
        "n_experts": m,
        "sampling": sampling,
        "non_private": non_private,
        "batch_size": batch_size,
        "noise_multiplier": None if non_private else noise_multiplier,
        "clip_norm": None if non_private else clip_norm,
        "steps": steps,
        "steps_cap": steps_cap,
        "seed": seed,
        **eval_info,
    }
    extra = {
        "algorithm": f"{'non-private' if non_private else 'expert-dp-sgd'} {algo}",
        "stable_size": 0,
    }
    metrics = _metrics(result, extra, ref)
    title = f"{'non-private' if non_private else 'DP-SGD'} {algo}"
    if not non_private:
        title += f" (ε = {epsilon:g})"
    _write_run(out, config, metrics, result, title)
    _summary(out, metrics, result.report)
