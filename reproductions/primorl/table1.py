"""Reproduction ``primorl-table1``: PRIMORL's Table 1 on Pendulum, Balance and Swingup, as a sweep.

The rows of the paper's Table 1 for each task — MOPO (non-private), NO PRIVACY (z = 0, clipping
kept), LOW and HIGH (the paper's z, q and T for the task: PRIMORL's preset for the task,
chosen by `--variant`) — each for several seeds, run by the
sweep runner (`privrl.runs.sweep`) as ordinary `privrl train mopo` / `privrl train primorl`
runs on the task's recipe dataset. A task runs when its recipe dataset is present
(`sweeps.recipe_path`; quick mode: Pendulum only, as `primorl-ablation`); Pendulum on
the scale's seeds, the cartpoles on at most `DMC_SEEDS` of them. A task whose dataset is absent
gets a section saying why it was not run and what it would cost, and inconclusive claims. The
sweep's directory (in the cache: ``$PRIVRL_CACHE/reproduce/primorl-table1/``; its cells hold
checkpoints and models, too big for docs/) keeps every cell's run directory, so an interrupted
reproduction resumes with the cells left; `--backend ray` runs the cells on Ray. The results
table is copied beside the report.

The table continues wherever the committed state stands (`table1_state`): a machine may start
with an empty cache, so before the sweep runs the committed cells beside the report
(``OUT/cells``, by default the checkout's ``docs/reproductions/primorl-table1/cells``) made on a
dataset present are restored into the cache (never over a cell already there; a rebuilt
dataset whose ``content_sha256`` differs from ``cells/fingerprints.json`` is refused), and the
state of the sweep's cells is exported back after each cell, every ``$PRIVRL_REPRO_SYNC_S``
seconds (default 1800; 0: not in between) and when the sweep stops, so that committing
``docs/reproductions/primorl-table1`` saves the table. `--tasks balance` (any of Pendulum,
Balance, Swingup, comma-separated) runs only those tasks, neither building nor reading the
others' datasets; a task not run keeps its finished rows from the committed results.csv
(which holds each row's curve and z), and the report says which numbers come from earlier
runs. `$PRIVRL_REPRO_BUDGET_S` starts no cell after the budget; a cell running then runs to
its end (hours on the cartpoles): to stop sooner, interrupt it (Ctrl-C, SIGTERM), which keeps
its last checkpoint, exports it and resumes it on the next run. Quick mode uses none of the
committed state.

The report (``OUT/report.md``, ``OUT/claims.json``, ``OUT/plots/``) sets each row beside the
paper's: ε (our PLD accountant for the paper's z, q and T), the return (mean ± 95% t-interval
over seeds, the mean of the last 10 SAC epochs' evaluations, as in the paper), and the share of
our MOPO's return, which is what can be compared (the paper's Pendulum reward scale differs:
our reward is r' = 1 + r/16.27 ∈ [0, 1]), and the return on the source simulator's raw scale
(Pendulum-v1: R = c_max·(R' − 200), the public inverse transform, `sweeps.raw_map`;
the cartpoles' is ours).

Beyond the paper, one more row on Pendulum: HIGH at the paper's ε (5.1) with z calibrated under
our PLD accountant for the same q and T (`train primorl --epsilon 5.1`), which shows what the
tighter accounting buys: less noise for the same guarantee. It runs on the first `PLD_SEEDS`
seeds.

What does not fit on this machine (the cartpoles' 7000 / 10,000 rounds at their model sizes,
and HalfCheetah) is stated from a measurement (`table1_report`, which writes the
report).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from privrl.runs.sweep import budget_deadline
from reproductions.primorl import sweeps as shared
from reproductions.primorl.sweeps import Scale, mean_ci

__all__ = [
    "Scale",
    "available_datasets",
    "claims",
    "mean_ci",
    "share_target",
    "summarise",
    "summarise_tasks",
    "sweep_doc",
    "table1",
    "task_base",
    "task_entries",
]

ID = "primorl-table1"
TASKS = ("pendulum", "balance", "swingup")
TASK_LABELS = {"pendulum": "Pendulum", "balance": "Balance", "swingup": "Swingup"}
# Table 1 per task: ε (∞ = not private), return, share of MOPO (%), as the paper prints them
# (the PRIMORL paper's Table 1; the Swingup shares are printed with two decimals).
PAPER: dict[str, dict[str, tuple[float, float, float]]] = {
    "pendulum": {
        "mopo": (math.inf, 795.9, 100.0),
        "no-privacy": (math.inf, 810.4, 101.8),
        "low": (22.3, 817.4, 102.7),
        "high": (5.1, 778.9, 97.9),
        "high-pld": (5.1, 778.9, 97.9),  # beyond the paper: the paper's HIGH ε, our accountant
    },
    "balance": {
        "mopo": (math.inf, 976.3, 100.0),
        "no-privacy": (math.inf, 947.5, 97.1),
        "low": (85.0, 815.8, 83.6),
        "high": (8.2, 758.2, 77.7),
    },
    "swingup": {
        "mopo": (math.inf, 804.9, 100.0),
        "no-privacy": (math.inf, 774.1, 96.17),
        "low": (94.2, 772.4, 95.96),
        "high": (17.0, 698.3, 86.75),
    },
}
ROWS = ("mopo", "no-privacy", "low", "high", "high-pld")
VARIANT_ROWS = ("no-privacy", "low", "high")
LABELS = {
    "mopo": "MOPO",
    "no-privacy": "NO PRIVACY (z = 0)",
    "low": "LOW",
    "high": "HIGH",
    "high-pld": "HIGH at the paper's ε, calibrated under PLD (ours)",
}
PLD_SEEDS = 3  # seeds of the high-pld row (the first of the scale's seeds; Pendulum only)
DMC_SEEDS = 3  # at most this many seeds on the cartpoles (the issue: ≥ 3; a run is hours)
# SAC epochs of the cartpole cells: MOPO's per-task epochs (its task defaults), so that the
# PRIMORL and MOPO cells train their policies alike; stated here so that a new library default
# does not change these runs (tests/reproductions check them against the defaults)
CARTPOLE_EPOCHS = {"balance": 40, "swingup": 80}
# Where the cartpole PRIMORL cells' model rollouts start: the declared public split's states.
# With the simulator's initial states (chained; the library's default) Balance's seed-0 NO
# PRIVACY policy reached 308 in the real task against 650 on the same release with these starts
# (the cells of both are kept beside the report): 20-step rollouts from a near-upright pole
# never show the policy the states it must recover from. MOPO starts from dataset states.
CARTPOLE_STARTS = "public-split"
# a row's column: the real-task return of the policy its release trained from initial starts
INITIAL_STARTS = "initial_starts_return"
# A row is "close to MOPO" when its share of our MOPO is at least this; where the paper's own
# share for the row is lower (Balance LOW/HIGH, Swingup HIGH), the target is the paper's share
# rounded down to a whole percent — the target, "≥ the paper's % of MOPO" (share_target).
SHARE_TARGET = 90.0
CEILING = 95.0  # normalised score at which a row is at the task's ceiling
MOPO_LEARNED = 50.0  # MOPO's normalised score below which shares of it are not evidence
PLOT = "plots/returns.png"  # Pendulum's learning curves (the report's first plot)

# Our PLD ε at the paper's z, q = 1e-3 and T of each private row, δ = 1e-5 (computed with
# `privrl.primorl.dp_fedavg`'s accountant, tests/primorl/test_dp_fedavg.py; a minute of CPU
# each to recompute, so a row not run shows these instead of its cells' ε).
PLD_EPSILON = {
    ("pendulum", "low"): 19.51,
    ("pendulum", "high"): 4.07,
    ("balance", "low"): 69.60,
    ("balance", "high"): 7.20,
    ("swingup", "low"): 83.16,
    ("swingup", "high"): 16.01,
}


def share_target(task: str, row: str) -> float:
    """The share of our MOPO a row must reach to be "close to MOPO": `SHARE_TARGET`, or the
    paper's own share for the row rounded down when that is lower (the paper's claim for the
    row is no more than that)."""
    return min(SHARE_TARGET, float(math.floor(PAPER[task][row][2])))


def sweep_dir(scale: Scale) -> Path:
    """Where the cells live (the cache: their checkpoints and models do not belong in docs/)."""
    return shared.sweep_dir("primorl-table1", scale)


def task_seeds(task: str, scale: Scale) -> list[int]:
    """The seeds of `task`: the scale's for Pendulum, at most `DMC_SEEDS` for the cartpoles."""
    seeds = scale.seed_list()
    return seeds if task == "pendulum" else seeds[:DMC_SEEDS]


def task_base(task: str, data: Path, scale: Scale) -> dict[str, Any]:
    """What every cell of `task` sets: its dataset, and on the cartpoles their presets' SAC
    epochs (40, 80), as in mopo-table1 (Pendulum's cells keep the scale's 20: their keys
    predate the other tasks). Shared with primorl-ablation, so identical runs share keys."""
    base: dict[str, Any] = {"data": str(data)}
    if task != "pendulum" and not scale.quick:
        base["epochs"] = CARTPOLE_EPOCHS[task]
    return base


def primorl_base(task: str, data: Path, scale: Scale) -> dict[str, Any]:
    """What every PRIMORL cell of `task` sets: `task_base`, and on the cartpoles the rollout
    starts (`CARTPOLE_STARTS`). Shared with primorl-ablation, so identical runs share keys."""
    starts = {} if task == "pendulum" else {"start_states": CARTPOLE_STARTS}
    return {**task_base(task, data, scale), **starts}


def task_entries(task: str, data: Path, scale: Scale) -> list[dict[str, Any]]:
    """The [[cells]] of one task: MOPO and PRIMORL's three rows × the task's seeds (z, q and T
    from the task preset via `variant`), and on Pendulum the high-pld row (a target ε, z
    calibrated for the preset's T) on its seeds. Each entry names its dataset; a cell's key is
    that of the same run as a grid cell (the key is the run's system, config, seed and data)."""
    seeds = task_seeds(task, scale)
    base = task_base(task, data, scale)
    entries: list[dict[str, Any]] = [{"system": "mopo", **base, "seed": s} for s in seeds]
    entries += [
        {"system": "primorl", **primorl_base(task, data, scale), "variant": v, "seed": s}
        for v in VARIANT_ROWS
        for s in seeds
    ]
    if task == "pendulum":
        paper_eps = PAPER["pendulum"]["high-pld"][0]
        entries += [
            {"system": "primorl", **base, "epsilon": paper_eps, "seed": s}
            for s in seeds[:PLD_SEEDS]
        ]
        return entries
    # a cartpole run is hours: seed by seed (every row of a seed before the next seed), so a
    # table cut short by a session or a time budget has whole seeds of every row
    return sorted(entries, key=lambda e: seeds.index(e["seed"]))


def sweep_doc(
    datasets: Mapping[str, Path] | Path,
    out: Path,
    scale: Scale,
    *,
    backend: str,
    workers: int | None,
) -> dict:
    """The grid: per task (`datasets`: task → dataset; a bare path is Pendulum's), MOPO and
    PRIMORL's three rows × seeds, and on Pendulum the high-pld row; cells under `out`. The
    cells are explicit entries, so each paper row's cell keeps the key it had as a grid cell."""
    if isinstance(datasets, Path):
        datasets = {"pendulum": datasets}
    entries = [e for task, data in datasets.items() for e in task_entries(task, data, scale)]
    return shared.sweep_doc(
        scale,
        out,
        {},
        primorl={},
        backend=backend,
        workers=workers,
        cells=entries,
        x="variant",
    )


def available_datasets(req: shared.Request) -> tuple[dict[str, Path], dict[str, str]]:
    """The datasets of the tasks that run (task → path) and why each other task does not.

    A dataset given (`--data`) is the one task its header names (its env id: public metadata,
    read before any private data); else each task's recipe dataset when present (quick mode:
    Pendulum only, its quick dataset built on the fly). With `req.tasks` (`--tasks`) only
    those tasks run (the others' datasets are neither built nor read); a task asked for that
    cannot run is refused, saying why."""
    asked = check_tasks(req.tasks)
    if req.data is not None:
        task = _task_of(req.data)
        others = "one dataset was given (--data); rerun without it for the recipe datasets"
        datasets, missing = {task: req.data}, {t: others for t in TASKS if t != task}
    elif "pendulum" in asked:
        datasets, missing = {"pendulum": req.dataset(ID)}, {}
    else:
        datasets, missing = {}, {}
    for task in TASKS[1:]:
        path = shared.recipe_path(task, quick=False)
        if req.data is not None or task not in asked:
            continue
        if req.scale.quick:
            missing[task] = "quick mode runs Pendulum only"
        elif path.is_file():
            datasets[task] = path
        else:
            missing[task] = f"its recipe dataset {path.name} is not built on this machine"
    not_asked = f"not asked for (--tasks {','.join(asked)})"
    missing.update({t: not_asked for t in TASKS if t not in asked and t not in datasets})
    refused = [f"{t}: {missing[t]}" for t in asked if t not in datasets and req.tasks is not None]
    if refused:
        raise ValueError(f"--tasks {','.join(asked)}: cannot run {'; '.join(refused)}")
    return {t: datasets[t] for t in TASKS if t in datasets}, missing


def check_tasks(tasks: Sequence[str] | None) -> tuple[str, ...]:
    """The tasks asked for (`--tasks`; None: all of Table 1's), refusing an unknown one."""
    if tasks is None:
        return TASKS
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise ValueError(
            f"--tasks {','.join(tasks)}: Table 1's tasks are {', '.join(TASKS)} "
            "(comma-separated, e.g. --tasks balance)"
        )
    return tuple(t for t in TASKS if t in tasks)


def _task_of(data: Path) -> str:
    """The task of a dataset, from its header's env id (public metadata)."""
    from privrl.data import read_header
    from privrl.envs.control import task_for_env_id

    env_id = read_header(data).metadata.env_id
    name = task_for_env_id(str(env_id)).name
    if name not in TASKS:
        raise ValueError(
            f"dataset {data} is a {name} dataset; Table 1 is Pendulum, Balance and Swingup "
            "(HalfCheetah is Table 11)"
        )
    return name


def table1(out: Path, **options: Any) -> Path:
    """`privrl reproduce primorl-table1`: run (or resume) the sweep, write the report.
    `options`: seeds, seed, quick, backend, workers, data, epochs, tasks
    (`shared.Request.of`). With a time budget (`budget_deadline`) the cells not started by
    then are left for a rerun, and the report lists them as pending; a cell running at the
    deadline runs to its end.

    At full scale the table continues from the committed state beside the report
    (`table1_state`: ``OUT/cells``, ``OUT/results.csv``): the committed cells of the tasks
    that run are restored into the cache first, their state is exported back while they run
    and at the end, and the tasks not run keep their earlier rows."""
    from privrl.runs.sweep import expand
    from reproductions.primorl import table1_state as state

    req = shared.Request.of(out, **options)
    deadline = budget_deadline()  # $PRIVRL_REPRO_BUDGET_S: no cell starts after it
    every = state.sync_seconds()  # checked before any work
    datasets, missing = available_datasets(req)
    t0 = time.perf_counter()
    where = sweep_dir(req.scale)
    doc = sweep_doc(datasets, where, req.scale, backend=req.backend, workers=req.workers)
    earlier: list[dict[str, Any]] = []
    if req.scale.quick:  # a smoke test: nothing of the committed table
        rows = shared.run_cells(doc, req.out, deadline=deadline)
    else:
        earlier = state.earlier_rows(req.out, req.scale)  # before results.csv is rewritten
        names = {c.name for c in expand(doc).cells}
        state.warn_unused(state.restore(req.out, where, datasets), names)
        with state.Export(where, req.out, names, every) as export:
            rows = shared.run_cells(doc, req.out, deadline=deadline, on_cell=export.now)
    rows = [with_initial_starts(r) for r in rows]
    rows, from_earlier = state.merge(rows, earlier, datasets)
    if not req.scale.quick:
        state.write_results(rows, req.out / "results.csv")
    from reproductions.primorl.table1_report import write_report  # it imports this module

    return write_report(
        req.out,
        rows,
        req.scale,
        data=datasets,
        missing=missing,
        wall=time.perf_counter() - t0,
        earlier=from_earlier,
    )


def with_initial_starts(row: dict[str, Any]) -> dict[str, Any]:
    """`row`, and when its cell's release came from a finished cell that trained its policy
    from the simulator's initial starts (`seeding.reuse_releases`), that policy's real-task
    return (`INITIAL_STARTS`)."""
    cell = Path(row["dir"]) if row.get("dir") else None
    if cell is None or not (cell / "cell.json").is_file():
        return row
    source = json.loads((cell / "cell.json").read_text()).get("release_of")
    metrics = cell.parent / str(source) / "run" / "metrics.json"
    if source is None or not metrics.is_file():
        return row
    values = json.loads((metrics.parent.parent / "cell.json").read_text()).get("values") or {}
    if values.get("start_states", "initial") != "initial":
        return row
    return {**row, INITIAL_STARTS: json.loads(metrics.read_text())["return_mean"]}


# --------------------------------------------------------------------------------------------
# the summary and the claims (the report: `table1_report`)
# --------------------------------------------------------------------------------------------


def row_of(cell: Mapping[str, Any]) -> str:
    """The Table 1 row of a results-table row."""
    if cell["system"] == "mopo":
        return "mopo"
    variant = cell.get("variant")
    return str(variant) if isinstance(variant, str) and variant else "high-pld"


def task_of(cell: Mapping[str, Any]) -> str:
    """The task of a results-table row (its run's `task`; Pendulum when the row has none)."""
    task = cell.get("task")
    return str(task) if isinstance(task, str) and task else "pendulum"


def summarise(
    rows: Sequence[Mapping[str, Any]], task: str = "pendulum"
) -> dict[str, dict[str, Any]]:
    """Per Table 1 row of `task`: seeds, return mean ± CI, normalised score, ε, share of our
    MOPO."""
    by_row: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("status") == "ok" and task_of(r) == task:
            by_row.setdefault(row_of(r), []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for name in ROWS:
        cells = by_row.get(name, [])
        if not cells:
            continue
        out[name] = {**shared.cell_stats(cells), "curves": [c.get("curve") or [] for c in cells]}
    shared.add_shares(out, "mopo")
    return out


def summarise_tasks(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """:func:`summarise` for every task with a finished cell (in Table 1's order)."""
    present = {task_of(r) for r in rows if r.get("status") == "ok"}
    return {t: summarise(rows, t) for t in TASKS if t in present}


def claims(
    summary: Mapping[str, Mapping[str, Any]],
    *,
    quick: bool = False,
    task: str = "pendulum",
    pending: bool = False,
) -> list[dict[str, str]]:
    """One claim per private/ablation row of `task`: its share of MOPO against the paper's.

    The target is :func:`share_target`. A share of MOPO says nothing when MOPO itself did not
    learn (normalised score below `MOPO_LEARNED`: a row "close to" a random-level MOPO would be
    vacuous, kind "vacuous"), nor in quick mode or with one seed, nor when the row was not run
    (kind "inconclusive at our scale", ours "not run"; "pending" when `pending`: the task
    ran and its rerun will run the row).
    """
    found = []
    label = TASK_LABELS[task]
    mopo = summary.get("mopo", {})
    learned = (mopo.get("normalised") or -math.inf) >= MOPO_LEARNED
    for name in VARIANT_ROWS:
        s = summary.get(name)
        paper_eps, _, paper_share = PAPER[task][name]
        paper = f"{paper_share:.1f}% of MOPO" + (
            "" if math.isinf(paper_eps) else f" at ε = {paper_eps:g}"
        )
        claim = f"{LABELS[name]} is close to MOPO ({label}, ≥ {share_target(task, name):g}%)"
        # the task's plot; a task with no cell (not run) has none: the report's first
        plot = f"plots/returns-{task}.png" if summary and task != "pendulum" else PLOT
        if s is None or "share" not in s:
            found.append(
                {
                    "claim": claim,
                    "paper": paper,
                    "ours": "pending" if pending else "not run",
                    "verdict": "inconclusive",
                    "plot": plot,
                    "kind": "inconclusive at our scale",
                }
            )
            continue
        eps = "" if math.isinf(s["epsilon"]) else f" at ε = {s['epsilon']:.2f}"
        verdict = kind = "holds" if s["share"] >= share_target(task, name) else "does not hold"
        if s["seeds"] < 2 or quick or not learned:
            verdict = "inconclusive"
            # a share of a MOPO that did not learn is met or missed trivially: vacuous
            kind = "inconclusive at our scale" if s["seeds"] < 2 or quick else "vacuous"
        found.append(
            {
                "claim": claim,
                "paper": paper,
                "ours": f"{s['share']:.1f}% of MOPO{eps} ({s['seeds']} seeds)",
                "verdict": verdict,
                "plot": plot,
                "kind": kind,
            }
        )
    return found
