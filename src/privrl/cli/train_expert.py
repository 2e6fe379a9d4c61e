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

Public parameters. Everything that sets a sensitivity, a noise scale, a sampling rate, δ or a
number of steps or rounds is public and listed with its source in privacy.json
(``public_parameters``): the number of experts m (``--n-experts``, or the metadata's declared
``extra["n_experts"]`` / ``extra["recipe"]["n_experts"]``; it sets q = b/m and the default
δ = 1/m), the number of actions |A| (``--actions``, or a declared Discrete action space not
marked ``inferred_from_data``), the filter's maximum trajectory length L (``--max-len``, or a
declared ``metadata.horizon``), and the flags. None of them is ever read off the private data;
a command refuses, naming the flag, when one has no public source.

Certification. ``train dp-sgd --sampling shuffle`` and ``train expert-dp --accounting paper``
(with 0 < p < 1) run the paper's procedure, which no accountant here certifies: their reports
say ε = ∞ (not private), a dataset's budget ledger refuses them before the data are read, and
the ε the paper's accounting would state is kept only as metrics.json's
``epsilon_paper_accounting`` and a report note.

The normalised score (R − R_rand)/(R_np − R_rand) is reported too when R_np is known: from
``--reference RUN_DIR`` (the run directory of ``privrl train dp-sgd --non-private`` with the
same data, ``--algo`` and evaluation horizon), from ``--reference-return R_np``, or from the
metadata's ``extra["reference_returns"]["nonprivate"]``. R_rand is the uniform-random return the
``experts-*`` recipes record in ``extra["reference_returns"]["random"]`` (or
``--random-return``). A twin trained on the same private data without a mechanism is NOT
covered by the run's guarantee: its R_np, and the score computed from it, are evaluation-only
(metrics.json ``reference_return_outside_guarantee: true`` and a note in privacy.json); publish
the private run's own return, or a score against a reference from separate data.

Every run writes the run-directory contract: config.json, metrics.json, metrics.csv (the
learning curve), privacy.json, plots/learning_curve.png and learner.pt (reload with
``DiscreteCQL(...).load_state_dict(torch.load(...))``). Before a single record is read, the
command reads the dataset's header (metadata and sizes), resolves its public parameters and
checks the dataset's ledger (``ledger_guard``) with the planned spend, the run's target (ε, δ)
under the expert unit (ε = ∞ for an uncertified mode); the episodes (and the expert set, the
experts' own policies) are read only inside the guard, which records the spend once the run
directory is complete.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import typer

from privrl.cli.errors import CliError, check_int, check_out_dir
from privrl.privacy.threshold import CALIBRATIONS

ALGOS = ("cql", "bcq")
CARTPOLE_EVAL_HORIZON = 1000

# Limits of the options, checked before anything is read or allocated: beyond them a run
# would exhaust memory (a step array of --steps entries), overflow the accountant (noise
# multipliers far from 1, ε far above any meaningful guarantee) or never end.
MAX_EPSILON = 100.0
NOISE_RANGE = (0.1, 1e4)
MAX_CLIP = 1e6
MAX_LR = 1.0
MAX_STEPS = 10**7
MAX_WIDTH, MAX_LAYERS = 8192, 16
MAX_EVAL_EPISODES = 10_000
MAX_EVAL_HORIZON = 10**6
MAX_EVALS = 10_000
MAX_ROUNDS = 10_000  # the paper uses T <= 100; the PLD's discretisation error grows with T
MAX_LEN = 10**7
MAX_EXPERTS = 10**9
MAX_ACTIONS = 10**6
MAX_SEED = 2**63 - 1
DEFAULT_BATCH, DEFAULT_NOISE, DEFAULT_CLIP, DEFAULT_STEPS_CAP = 128, 20.0, 1.0, 100_000
DEFAULT_ROUNDS, DEFAULT_P_MIN = 25, 0.02


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
_N_EXPERTS = typer.Option(
    None,
    "--n-experts",
    help=(
        "m, the number of experts (public; default: the dataset's declared extra['n_experts'] "
        "or extra['recipe']['n_experts']; never counted in the data)."
    ),
)
_ACTIONS = typer.Option(
    None,
    "--actions",
    help=(
        "|A|, the number of discrete actions (public; default: the dataset's declared action "
        "space, unless its metadata mark it as inferred from the data)."
    ),
)
_BATCH = typer.Option(
    None, "--batch-size", "-b", help=f"Expected batch size b (rate b/m; default {DEFAULT_BATCH})."
)
_NOISE = typer.Option(
    None,
    "--noise-multiplier",
    "-z",
    help=f"DP-SGD noise multiplier σ (noise std / C; default {DEFAULT_NOISE:g}).",
)
_CLIP = typer.Option(
    None, "--clip-norm", help=f"Per-expert gradient clipping norm C (default {DEFAULT_CLIP:g})."
)
_LR = typer.Option(None, "--lr", help="Adam learning rate (default 3e-4).")
_STEPS_CAP = typer.Option(
    None,
    "--steps-cap",
    help=f"Most training steps (the budget may allow more; default {DEFAULT_STEPS_CAP}).",
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
        "(R − R_rand)/(R_np − R_rand). Trained on the same data without a mechanism, it is "
        "outside the run's guarantee: the score is labelled evaluation-only."
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
# checks of the options (before anything is read)
# ---------------------------------------------------------------------------------------------


def _in_range(
    name: str, value: float | None, lo: float, hi: float, *, lo_open: bool = False
) -> None:
    if value is None:
        return
    v = float(value)
    ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi
    if not ok:
        left = "(" if lo_open else "["
        raise CliError(f"{name} must be in {left}{lo:g}, {hi:g}], got {value}")


def _check_common(
    algo: str,
    epsilon: float | None,
    delta: float | None,
    batch_size: int | None,
    noise: float | None,
    clip: float | None,
    lr: float | None,
    steps: int | None,
    steps_cap: int | None,
    seed: int,
    n_experts: int | None,
    actions: int | None,
) -> None:
    if algo not in ALGOS:
        raise CliError(f"--algo must be one of {', '.join(ALGOS)}, got {algo!r}")
    if epsilon is not None:
        _in_range("--epsilon", epsilon, 0.0, MAX_EPSILON, lo_open=True)
    if delta is not None and not (math.isfinite(delta) and 0 < delta < 1):
        raise CliError(f"--delta must be in (0, 1), got {delta}")
    _in_range("--batch-size", batch_size, 1, MAX_EXPERTS)
    _in_range("--noise-multiplier", noise, *NOISE_RANGE)
    _in_range("--clip-norm", clip, 0.0, MAX_CLIP, lo_open=True)
    _in_range("--lr", lr, 0.0, MAX_LR, lo_open=True)
    _in_range("--steps", steps, 0, MAX_STEPS)
    _in_range("--steps-cap", steps_cap, 1, MAX_STEPS)
    _in_range("--seed", seed, 0, MAX_SEED)
    if n_experts is not None:
        check_int(n_experts, "--n-experts", minimum=1, maximum=MAX_EXPERTS)
    _in_range("--actions", actions, 2, MAX_ACTIONS)


def _check_eval(episodes: int, horizon: int | None, evals: int, window: int) -> None:
    check_int(episodes, "--eval-episodes", minimum=1, maximum=MAX_EVAL_EPISODES)
    _in_range("--eval-horizon", horizon, 1, MAX_EVAL_HORIZON)
    _in_range("--evals", evals, 1, MAX_EVALS)
    _in_range("--eval-window", window, 1, MAX_STEPS)


def _check_out(out: Path) -> None:
    """Refuse an unusable --out before the header is read, leaving nothing behind: a
    directory the check had to create is removed again (the ledger guard makes it for the
    run), so a run refused later leaves no empty run directory."""
    fresh = not out.exists()
    check_out_dir(out)
    if fresh:
        out.rmdir()


def _parse_hidden(hidden: str | None, env_id: str | None) -> tuple[int, ...]:
    if hidden is None:
        return (512,) if env_id is not None and "HIV" in env_id else (256, 256)
    try:
        sizes = tuple(int(h) for h in hidden.split(",") if h.strip())
    except ValueError:
        raise CliError(f"--hidden must be comma-separated integers, got {hidden!r}") from None
    if not sizes or min(sizes) < 1:
        raise CliError(f"--hidden must be positive sizes, got {hidden!r}")
    if max(sizes) > MAX_WIDTH or len(sizes) > MAX_LAYERS:
        raise CliError(
            f"--hidden allows at most {MAX_LAYERS} layers of at most {MAX_WIDTH} units, "
            f"got {hidden!r}"
        )
    return sizes


# ---------------------------------------------------------------------------------------------
# the dataset's header and the public parameters (nothing private is read here)
# ---------------------------------------------------------------------------------------------


def _read_header(path: Path) -> Any:
    """The dataset's metadata and sizes (`privrl.data.io.read_header`): no episode is read."""
    from privrl.data.io import read_header

    if not path.is_file():
        raise CliError(f"--data: file not found: {path}")
    return read_header(path)


def _declared_experts(meta: Any) -> tuple[Any, str]:
    """(m, metadata key) as the data holder declared it: ``extra["n_experts"]``, or the
    ``experts-*`` recipes' ``extra["recipe"]["n_experts"]``."""
    extra = meta.extra if isinstance(meta.extra, dict) else {}
    if extra.get("n_experts") is not None:
        return extra["n_experts"], "n_experts"
    recipe = extra.get("recipe")
    if isinstance(recipe, dict) and recipe.get("n_experts") is not None:
        return recipe["n_experts"], "recipe.n_experts"
    return None, "n_experts"


def _resolve_experts(params: Any, flag: int | None, meta: Any) -> int:
    """m, the number of experts: ``--n-experts`` or the metadata's declaration, never the
    number of distinct ids in the data (under add/remove-one-expert it differs between
    neighbours)."""
    value, key = _declared_experts(meta)
    m = params.resolve(
        "number of experts m",
        flag=flag,
        metadata={key: value, "extra": meta.extra},
        key=key,
        fix="pass --n-experts M, the number of experts the data holder declares",
        detail="sets the sampling rate q = b/m and the default δ = 1/m",
    )
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= MAX_EXPERTS:
        raise CliError(
            f"the dataset's metadata declare {key} = {m!r}, not a number of experts in "
            f"[1, {MAX_EXPERTS}]; pass --n-experts M"
        )
    return m


def _resolve_actions(params: Any, flag: int | None, meta: Any) -> int:
    """|A|: ``--actions`` or the metadata's declared Discrete action space (not one the
    metadata mark as inferred from the data: the largest action index is private)."""
    from gymnasium import spaces

    from privrl.privacy.public import inferred_fields

    space = meta.action_space
    declared = None
    if space is not None:
        if not isinstance(space, spaces.Discrete):
            raise CliError(f"CQL/BCQ need discrete actions; the dataset's action space is {space}")
        if int(space.start) != 0:
            raise CliError(f"the action space must start at 0, got {space}")
        declared = int(space.n)
    a = params.resolve(
        "number of actions |A|",
        flag=flag,
        metadata={"action_space": declared, "extra": meta.extra},
        key="action_space",
        fix="pass --actions A, the size of the public action space",
        detail="the network's output size; the consensus count's g = 1 − (|A|−1)·p_min",
    )
    if (
        flag is not None
        and declared is not None
        and "action_space" not in inferred_fields(meta)
        and flag != declared
    ):
        raise CliError(
            f"--actions {flag} contradicts the dataset's declared action space Discrete("
            f"{declared}); drop --actions or fix the dataset's metadata"
        )
    if not 2 <= int(a) <= MAX_ACTIONS:
        raise CliError(f"need between 2 and {MAX_ACTIONS} actions, the dataset declares {a}")
    return int(a)


def _resolve_delta(params: Any, flag: float | None, m: int) -> float:
    if flag is not None:
        return float(params.resolve("δ", flag=flag, fix="pass --delta"))
    delta = params.derive("δ", 1.0 / m, "1/m (the paper's choice; --delta overrides)")
    if not 0 < delta < 1:
        raise CliError(f"the default δ = 1/m needs m >= 2 experts, got m = {m}; pass --delta")
    return float(delta)


def _flag_or_default(params: Any, name: str, flag: Any, default: Any, detail: str = "") -> Any:
    return params.resolve(name, flag=flag, default=default, fix="", detail=detail)


def _planned(epsilon: float, delta: float, system: str) -> Any:
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


# ---------------------------------------------------------------------------------------------
# inside the ledger guard: the private data
# ---------------------------------------------------------------------------------------------


def _load_dataset(path: Path) -> Any:
    from privrl.data.io import load_hdf5

    return load_hdf5(path)


def _check_data(dataset: Any, n_actions: int) -> int:
    """Schema checks of the records against the public schema; returns obs_dim."""
    if dataset.unit_ids is None:
        raise CliError(
            "the dataset has no expert ids (unit_ids is None): expert-level privacy needs the "
            "expert of every trajectory; collect or import the data with unit ids"
        )
    obs = np.asarray(dataset.observations)
    if obs.ndim != 2:
        raise CliError(f"observations must be flat vectors, got shape {obs.shape[1:]}")
    actions = np.asarray(dataset.actions)
    if actions.ndim != 1 or actions.dtype.kind not in "iu":
        raise CliError("CQL/BCQ need discrete actions (one integer index per step)")
    if actions.size and (int(actions.min()) < 0 or int(actions.max()) >= n_actions):
        raise CliError(
            f"the data hold action indices outside the public action space 0..{n_actions - 1}; "
            "pass the right --actions A or fix the dataset"
        )
    return int(obs.shape[1])


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
    meta: Any, episodes: int, horizon: int | None, seed: int, no_eval: bool
) -> tuple[Callable[[Any], np.ndarray] | None, dict[str, Any]]:
    """Greedy evaluation in the dataset's (public) environment, from its metadata only."""
    if no_eval:
        return None, {"evaluation": "skipped (--no-eval)"}
    import gymnasium as gym

    from privrl.envs import register_envs
    from privrl.rl.discrete_common import evaluate_greedy

    env_id = meta.env_id
    if env_id is None:
        raise CliError(
            "cannot evaluate: the dataset's metadata name no environment (env_id); pass --no-eval"
        )
    register_envs()
    if env_id not in gym.registry:
        raise CliError(f"cannot evaluate: unknown environment {env_id!r}; pass --no-eval")
    if horizon is None:
        horizon = CARTPOLE_EVAL_HORIZON if env_id.startswith("CartPole") else meta.horizon
    from privrl.experiments.expert import eval_env_factory

    make = eval_env_factory(meta, horizon)  # with the recipe's env_kwargs (HIV)
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


def _finish_report(report: Any, params: Any, reference: Reference) -> Any:
    """The run's report with its public parameters and, when the normalised score uses a twin
    trained on the same data, the note that the score is outside the guarantee."""
    report = report.with_public_parameters(params)
    if reference.outside_guarantee:
        report.notes.append(REFERENCE_NOTE)
    return report


REFERENCE_NOTE = (
    "metrics.json's normalised_score uses R_np, the return of a non-private twin trained on "
    "the same private data (--reference): R_np and the score are evaluation-only and NOT "
    "covered by this guarantee (reference_return_outside_guarantee: true); publish "
    "return_mean, or a score against a reference from separate data"
)


def _metrics(
    result: Any, report: Any, extra: dict[str, Any], reference: Reference
) -> dict[str, Any]:
    from privrl.expert.dpsgd import paper_accounting_epsilon

    metrics: dict[str, Any] = {
        "steps": result.steps,
        "private_steps": result.private_steps,
        "epsilon": report.epsilon,
        "delta": report.delta,
        "private": report.private,
        **extra,
    }
    paper = paper_accounting_epsilon(report.releases, report.delta)
    if paper is not None:
        # the paper's accounting, for comparison only: this run is NOT certified (ε = ∞)
        metrics["epsilon_paper_accounting"] = paper
    if result.return_mean is not None:
        metrics["return_mean"] = result.return_mean
        metrics["return_std"] = result.return_std
        metrics.update(reference.score(result.return_mean))
    return metrics


def _write_run(
    out: Path,
    config: dict[str, Any],
    metrics: dict[str, Any],
    result: Any,
    report: Any,
    title: str,
) -> None:
    import torch

    from privrl.experiments.rundir import RunDir

    run = RunDir(out)
    run.write_config(config)
    rows = result.curve or [{"step": result.steps, "private_steps": result.private_steps}]
    run.write_curve(rows)
    torch.save(result.learner.state_dict(), run.artifact("learner.pt"))
    _plot(run.plot_path("learning_curve"), result.curve, title)
    run.write_privacy(report)
    run.write_metrics(metrics)


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
        if metrics.get("reference_return_outside_guarantee"):
            line += " (evaluation-only: outside the guarantee)"
    console.print(Text(line))
    typer.echo(
        f"wrote {out}/ (config.json, metrics.json, metrics.csv, privacy.json, learner.pt, "
        "plots/learning_curve.png)"
    )


def _experts_from_metadata(data: Path, meta: Any) -> Path:
    """The expert set named by the dataset's metadata (``extra["experts_dir"]``, relative to
    the dataset file), for ``--experts`` left out. Uses the header's metadata only."""
    extra = meta.extra if isinstance(meta.extra, dict) else {}
    rel = extra.get("experts_dir")
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
    twin: bool = False  # R_np is the return of a twin trained on this dataset (--reference)

    @property
    def outside_guarantee(self) -> bool:
        """The score uses a twin trained on the same private data without a mechanism: it is
        evaluation-only, not covered by the run's guarantee."""
        return self.twin and self.nonprivate is not None and self.random is not None

    def resolve(self, meta: Any, eval_info: dict[str, Any]) -> Reference:
        """Fill in what the dataset's (public) metadata record; check the score is defined."""
        refs = meta.extra.get("reference_returns")
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
            # true: R_np comes from a non-private twin on the same data (evaluation-only);
            # false: R_np was given as a public number (flag or the dataset's metadata)
            "reference_return_outside_guarantee": self.outside_guarantee,
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
        twin=True,
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
    try:
        from privrl.expert.experts import load_experts
    except ImportError:
        raise CliError(
            "--experts: this privrl has no expert loader (privrl.expert.experts.load_experts)"
        ) from None
    return load_experts(path)


def _check_experts(expert_set: Any, n_actions: int, obs_dim: int) -> None:
    """The expert set (read inside the guard: the experts' policies are private) must fit the
    public action space and the data's observations."""
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
    n_experts: int = _N_EXPERTS,
    actions: int = _ACTIONS,
    p: float = typer.Option(
        None, "--p", help="Probability of a private step on D_unst (default CQL 0.8, BCQ 0.5)."
    ),
    filter_rounds: int = typer.Option(
        None,
        "--filter-rounds",
        "-T",
        help=f"Rounds T of the consensus filter (0 = no filter; default {DEFAULT_ROUNDS}).",
    ),
    max_len: int = typer.Option(
        None,
        "--max-len",
        help=(
            "L, the longest trajectory the filter queries (public; default: the dataset's "
            "declared metadata.horizon; longer trajectories are truncated to L for the filter)."
        ),
    ),
    p_min: float = typer.Option(
        None,
        "--p-min",
        help=f"Smallest action probability of experts (default {DEFAULT_P_MIN:g}).",
    ),
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
        help=(
            "exact (coins conditioned on, certified) or paper (q = p·b/m, NOT certified: the "
            "report says ε = ∞ and a ledger refuses it; the paper's ε is a comparison field)."
        ),
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
    from privrl.expert.dpsgd import uncertified_plan
    from privrl.expert.selective import (
        PAPER_NOT_CERTIFIED,
        effective_split,
        split_budget,
        train_expert_dp,
    )
    from privrl.privacy.public import PublicParameters
    from privrl.privacy.threshold import DataReleaseCalibration

    # 1. the options, before anything is read
    _check_common(
        algo,
        epsilon,
        delta,
        batch_size,
        noise_multiplier,
        clip_norm,
        lr,
        steps,
        steps_cap,
        seed,
        n_experts,
        actions,
    )
    _check_eval(eval_episodes, eval_horizon, evals, eval_window)
    if p is not None and not (math.isfinite(p) and 0.0 <= p <= 1.0):
        raise CliError(f"--p must be in [0, 1], got {p}")
    _in_range("--filter-rounds", filter_rounds, 0, MAX_ROUNDS)
    _in_range("--max-len", max_len, 1, MAX_LEN)
    _in_range("--p-min", p_min, 0.0, 0.5, lo_open=True)
    if not math.isfinite(filter_below):
        raise CliError(f"--filter-below must be finite, got {filter_below}")
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
    _check_out(out)

    # 2. the header and the public parameters (no record, no expert policy is read)
    header = _read_header(data)
    meta = header.metadata
    if experts is None:
        experts = _experts_from_metadata(data, meta)
    elif not experts.exists():
        raise CliError(f"--experts: not found: {experts}")
    elif not experts.is_dir():
        raise CliError(f"--experts: {experts} is not a directory; give an expert set's directory")
    params = PublicParameters()
    m = _resolve_experts(params, n_experts, meta)
    delta = _resolve_delta(params, delta, m)
    n_actions = _resolve_actions(params, actions, meta)
    epsilon = params.resolve("ε", flag=epsilon, fix="pass --epsilon")
    b = _flag_or_default(params, "expected batch size b", batch_size, DEFAULT_BATCH)
    if b > m:
        raise CliError(f"--batch-size {b} exceeds the number of experts m = {m}")
    params.derive("sampling rate q", b / m, "b/m")
    rounds = _flag_or_default(params, "filter rounds T", filter_rounds, DEFAULT_ROUNDS)
    p = _flag_or_default(params, "private-step probability p", p, 0.8 if algo == "cql" else 0.5)
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
        split = effective_split(split, rounds)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    filter_runs = split.filter
    length = None
    pm = _flag_or_default(params, "expert action floor p_min", p_min, DEFAULT_P_MIN)
    for name, value in (
        ("ε1 (filter)", split.epsilon1),
        ("δ1 (filter)", split.delta1),
        ("ε2 (DP-SGD)", split.epsilon2),
        ("δ2 (DP-SGD)", split.delta2),
    ):
        params.derive(name, value, f"budget split of (ε, δ): {split.rule}")
    if filter_runs:
        length = params.resolve(
            "maximum trajectory length L",
            flag=max_len,
            metadata=meta,
            key="horizon",
            fix="pass --max-len L, the longest trajectory the data may hold",
            detail="sets δ' = δ1/(2TL) and the threshold shift; longer trajectories truncated",
        )
        if not isinstance(length, int) or length < 1:
            raise CliError(f"the maximum trajectory length L must be >= 1, got {length!r}")
        if pm * n_actions > 1:
            raise CliError(f"--p-min {pm:g} is above 1/|A| = {1 / n_actions:.4g}")
    z = _flag_or_default(params, "noise multiplier σ", noise_multiplier, DEFAULT_NOISE)
    c = _flag_or_default(params, "clipping norm C", clip_norm, DEFAULT_CLIP)
    cap = _flag_or_default(params, "steps cap", steps_cap, DEFAULT_STEPS_CAP)
    if steps is not None:
        params.resolve("training steps N", flag=steps, fix="")
    uncertified = accounting == "paper" and split.dp_sgd and 0.0 < split.p < 1.0
    system = "expert-consensus + selective-dp-sgd"
    planned = (
        uncertified_plan(system, PAPER_NOT_CERTIFIED)
        if uncertified
        else _planned(epsilon, delta, system)
    )
    env_id = meta.env_id
    sizes = _parse_hidden(hidden, env_id)
    evaluate, eval_info = _evaluator(meta, eval_episodes, eval_horizon, seed, no_eval)
    ref = ref.resolve(meta, eval_info)
    rng = np.random.default_rng(seed)

    # 3. the ledger, then the private data, the run and its directory
    label = "privrl train expert-dp"
    with ledger_guard(data, planned, label=label, out=out) as reports:
        if filter_runs:
            # the filter's calibration is public: an infeasible one is refused before the data
            # are read (after the ledger check: the PLD calibration's search takes seconds)
            calib = DataReleaseCalibration.from_budget(
                split.epsilon1, split.delta1, rounds, length, pm, calibration=filter_calibration
            )
            params.derive("filter ε'", calib.epsilon_prime, f"{filter_calibration} calibration")
            params.derive("filter δ'", calib.delta_prime, "δ1/(2TL)")
        dataset = _load_dataset(data)
        obs_dim = _check_data(dataset, n_actions)
        expert_set = _load_experts(experts)
        _check_experts(expert_set, n_actions, obs_dim)
        learner = _make_learner(
            algo, obs_dim, n_actions, sizes, 3e-4 if lr is None else lr, seed,
            _obs_transform(env_id),
        )  # fmt: skip
        bar, update = _progress_bar(f"expert-dp {algo}")
        with bar:
            result = train_expert_dp(
                learner,
                dataset,
                expert_set,
                n_units=m,
                epsilon=epsilon,
                delta=delta,
                p=p,
                rounds=rounds,
                p_min=pm,
                max_len=length,
                split=split,
                batch_size=b,
                noise_multiplier=z,
                clip_norm=c,
                steps=steps,
                steps_cap=cap,
                accounting=accounting,  # type: ignore[arg-type]
                rng=rng,
                evaluate=evaluate,
                n_evals=evals,
                eval_window=eval_window,
                progress=update,
                filter_calibration=filter_calibration,
                dp_sgd_budget=dp_sgd_budget,  # type: ignore[arg-type]
            )
        training = result.training
        params.derive(
            "private DP-SGD steps K",
            training.private_steps,
            "from the budget by the PLD accountant (or --steps), with the public step coins",
        )
        params.derive("training steps", training.steps, "the public step coins up to step K")
        report = _finish_report(result.report, params, ref)
        training.report = report  # the run's total report (filter + DP-SGD)
        config = {
            "command": "privrl train expert-dp",
            "data": str(data),
            "reference": None if reference is None else str(reference),
            "reference_return": reference_return,
            "random_return": random_return,
            "experts": str(experts),
            "n_experts": m,
            "n_actions": n_actions,
            "algo": algo,
            "learner": learner.config(),
            "epsilon": epsilon,
            "delta": delta,
            "split": result.split.to_dict(),
            "filter_rounds": rounds,
            "max_len": length,
            "filter_calibration": filter_calibration,
            "p_min": pm,
            "accounting": accounting,
            "dp_sgd_budget": dp_sgd_budget,
            "batch_size": b,
            "noise_multiplier": z,
            "clip_norm": c,
            "steps": steps,
            "steps_cap": cap,
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
        # the filter's public output: counts of the released prefixes (post-processing)
        for key in ("released_trajectories", "released_transitions"):
            if key in result.filter_summary:
                extra[key] = result.filter_summary[key]
        metrics = _metrics(training, report, extra, ref)
        _write_run(out, config, metrics, training, report, f"expert-dp {algo} (ε = {epsilon:g})")
        reports.append(report)
    _summary(out, metrics, report)


def dp_sgd_command(
    data: Path = _DATA,
    algo: str = _ALGO,
    epsilon: float = typer.Option(
        None, "--epsilon", help="Privacy budget ε of the run (not with --non-private)."
    ),
    delta: float = _DELTA,
    n_experts: int = _N_EXPERTS,
    actions: int = _ACTIONS,
    sampling: str = typer.Option(
        "poisson",
        "--sampling",
        help=(
            "poisson (certified) or shuffle (the paper's batches, NOT certified: the report says "
            "ε = ∞ and a ledger refuses it; the paper's ε is a comparison field)."
        ),
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
    from privrl.expert.dpsgd import (
        RELATION,
        SHUFFLE_NOT_CERTIFIED,
        UNIT,
        expert_dp_sgd,
        plan_steps,
        uncertified_plan,
    )
    from privrl.privacy.public import PublicParameters
    from privrl.privacy.report import PrivacyReport

    # 1. the options, before anything is read
    if epsilon is None and not non_private:
        raise CliError("--epsilon is required (or --non-private for the non-private twin)")
    if epsilon is not None and non_private:
        raise CliError("--non-private takes no --epsilon: the twin is not private")
    _check_common(
        algo,
        epsilon,
        delta,
        batch_size,
        noise_multiplier,
        clip_norm,
        lr,
        steps,
        steps_cap,
        seed,
        n_experts,
        actions,
    )
    _check_eval(eval_episodes, eval_horizon, evals, eval_window)
    if sampling not in ("poisson", "shuffle"):
        raise CliError(f"--sampling must be poisson or shuffle, got {sampling!r}")
    ref = _reference(reference, reference_return, random_return, algo=algo, data=data)
    _check_out(out)

    # 2. the header and the public parameters (no record is read)
    header = _read_header(data)
    meta = header.metadata
    params = PublicParameters()
    n_actions = _resolve_actions(params, actions, meta)
    b = _flag_or_default(params, "batch size b", batch_size, DEFAULT_BATCH)
    cap = _flag_or_default(params, "steps cap", steps_cap, DEFAULT_STEPS_CAP)
    if steps is not None:
        params.resolve("training steps N", flag=steps, fix="")
    system = "expert-dp-sgd"
    m: int | None = None
    n_steps, capped = (steps if steps is not None else cap), False
    planned: Any
    if non_private:
        planned = PrivacyReport.non_private(UNIT, RELATION, system=f"{system} (non-private twin)")
        z = c = None
    else:
        m = _resolve_experts(params, n_experts, meta)
        delta = _resolve_delta(params, delta, m)
        epsilon = params.resolve("ε", flag=epsilon, fix="pass --epsilon")
        if b > m:
            raise CliError(f"--batch-size {b} exceeds the number of experts m = {m}")
        params.derive("sampling rate q", b / m, "b/m")
        z = _flag_or_default(params, "noise multiplier σ", noise_multiplier, DEFAULT_NOISE)
        c = _flag_or_default(params, "clipping norm C", clip_norm, DEFAULT_CLIP)
        planned = (
            uncertified_plan(system, SHUFFLE_NOT_CERTIFIED)
            if sampling == "shuffle"
            else _planned(epsilon, delta, system)
        )
    env_id = meta.env_id
    sizes = _parse_hidden(hidden, env_id)
    evaluate, eval_info = _evaluator(meta, eval_episodes, eval_horizon, seed, no_eval)
    ref = ref.resolve(meta, eval_info)
    rng = np.random.default_rng(seed)

    # 3. the ledger, then the private data, the run and its directory
    with ledger_guard(data, planned, label="privrl train dp-sgd", out=out) as reports:
        if m is not None:
            # the step count from public parameters only, before the data are read (after
            # the ledger check: the accountant's search is not instant)
            n_steps, capped = plan_steps(
                noise_multiplier=z,
                sampling_probability=b / m,
                epsilon=epsilon,
                delta=delta,
                steps=steps,
                steps_cap=cap,
            )
            params.derive(
                "private steps N",
                n_steps,
                "--steps" if steps is not None else "largest count within (ε, δ), PLD accountant",
            )
        dataset = _load_dataset(data)
        obs_dim = _check_data(dataset, n_actions)
        learner = _make_learner(
            algo, obs_dim, n_actions, sizes, 3e-4 if lr is None else lr, seed,
            _obs_transform(env_id),
        )  # fmt: skip
        bar, update = _progress_bar(f"dp-sgd {algo}")
        with bar:
            result = expert_dp_sgd(
                learner,
                dataset,
                epsilon=epsilon,
                delta=0.0 if delta is None else delta,
                batch_size=b,
                noise_multiplier=DEFAULT_NOISE if z is None else z,
                clip_norm=DEFAULT_CLIP if c is None else c,
                steps=n_steps,
                steps_cap=cap,
                n_units=m,
                sampling=sampling,  # type: ignore[arg-type]
                private=not non_private,
                rng=rng,
                evaluate=evaluate,
                n_evals=evals,
                eval_window=eval_window,
                progress=update,
            )
        if capped:
            result.report.notes.append(
                f"the step count was capped at {n_steps}: the budget ε = {epsilon} is not spent"
            )
        report = _finish_report(result.report, params, ref)
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
            "n_actions": n_actions,
            "sampling": sampling,
            "non_private": non_private,
            "batch_size": b,
            "noise_multiplier": z,
            "clip_norm": c,
            "steps": steps,
            "steps_cap": cap,
            "seed": seed,
            **eval_info,
        }
        extra = {
            "algorithm": f"{'non-private' if non_private else 'expert-dp-sgd'} {algo}",
            "stable_size": 0,
        }
        metrics = _metrics(result, report, extra, ref)
        title = f"{'non-private' if non_private else 'DP-SGD'} {algo}"
        if not non_private:
            title += f" (ε = {epsilon:g})"
        _write_run(out, config, metrics, result, report, title)
        if not non_private:
            reports.append(report)
    _summary(out, metrics, report)
