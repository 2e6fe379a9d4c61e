"""What the PRIMORL reproductions (``primorl-table1``, ``primorl-ablation``, ``primorl-fig3``)
share: their scale, where their cells live, the recipe datasets, running a sweep of
`privrl train mopo` / `privrl train primorl` cells (reusing another reproduction's finished
cell when it is the same run), the cells' learning curves and the 95% t-interval.

Each reproduction keeps its own cells under ``$PRIVRL_CACHE/reproduce/<id>/{quick,full}/``
(checkpoints and models: too big for docs/). A cell is identified by the sweep's fingerprint of
its system, config, seed and data path, so a cell of one reproduction with the same
fingerprint as a finished cell of another is the same run: it is copied, not run again.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privrl.runs.system import Series
from reproductions.primorl.report_text import (
    at_ceiling,
    eps_text,
    mopo_not_learned,
    num_text,
    raw_text,
    return_text,
    share_texts,
    smoke_lines,
    verdict_lines,
    verdict_section,
)

__all__ = [
    "Report",
    "Request",
    "Scale",
    "add_shares",
    "at_ceiling",
    "cell_seconds",
    "cell_stats",
    "curve",
    "curve_series",
    "eps_text",
    "mean_ci",
    "mopo_not_learned",
    "num_text",
    "pendulum_doc",
    "raw_map",
    "raw_scale_notes",
    "raw_text",
    "read_results",
    "recipe_dataset",
    "return_text",
    "reuse_finished",
    "run_cells",
    "share_texts",
    "smoke_lines",
    "sweep_dir",
    "sweep_doc",
    "verdict_lines",
    "verdict_section",
    "write_outputs",
]


@dataclass(frozen=True)
class Scale:
    """How big a reproduction is (the paper's scale by default; `quick` is a smoke test)."""

    seeds: int = 3
    base_seed: int = 0
    epochs: int = 20  # SAC epochs; the return is the mean of the last `final_epochs`
    quick: bool = False

    def settings(self) -> dict[str, Any]:
        """Settings every cell shares (both systems have them)."""
        if self.quick:
            return {"epochs": self.epochs, "steps_per_epoch": 20, "rollout_batch_size": 50}
        return {"epochs": self.epochs}

    def seed_list(self) -> list[int]:
        return list(range(self.base_seed, self.base_seed + self.seeds))

    @classmethod
    def of(cls, *, seeds: int | None, seed: int, epochs: int | None, quick: bool) -> Scale:
        """The scale `privrl reproduce` asks for: 3 seeds and 20 epochs unless given (quick:
        2 and 2)."""
        return cls(
            seeds=seeds or (2 if quick else 3),
            base_seed=seed,
            epochs=epochs or (2 if quick else 20),
            quick=quick,
        )


@dataclass(frozen=True)
class Request:
    """What `privrl reproduce` asks of a PRIMORL reproduction: the report's directory, the
    scale, the sweep's backend and workers, and the dataset given (None: the recipe's)."""

    out: Path
    scale: Scale
    backend: str = "local"
    workers: int | None = None
    data: Path | None = None
    tasks: tuple[str, ...] | None = None  # the tasks asked for (`--tasks`); None: every task

    @classmethod
    def of(
        cls,
        out: Path,
        *,
        seeds: int | None = None,
        seed: int = 0,
        quick: bool = False,
        backend: str = "local",
        workers: int | None = None,
        data: Path | None = None,
        epochs: int | None = None,
        tasks: str | Sequence[str] | None = None,
    ) -> Request:
        """The request of `privrl reproduce ID` (the options every PRIMORL entry takes;
        `tasks`: a comma-separated list or a sequence of task names)."""
        scale = Scale.of(seeds=seeds, seed=seed, epochs=epochs, quick=quick)
        if isinstance(tasks, str):
            tasks = [t for t in (t.strip() for t in tasks.split(",")) if t]
        given = None if tasks is None else tuple(tasks)
        return cls(Path(out), scale, backend, workers, None if data is None else Path(data), given)

    def dataset(self, reproduction: str, task: str = "pendulum") -> Path:
        """The dataset given, else the recipe dataset of `task` (:func:`recipe_dataset`)."""
        if self.data is not None:
            return self.data
        return recipe_dataset(task, self.scale.quick, reproduction)


@dataclass(frozen=True)
class Report:
    """What a one-dataset PRIMORL report is written from: the summary, the claims, the scale,
    the dataset, this invocation's wall time and the cells' total running time (seconds)."""

    summary: Mapping[Any, Mapping[str, Any]]
    found: Sequence[Mapping[str, str]]
    scale: Scale
    data: Path
    wall: float
    cell_seconds: float


def pendulum_doc(
    data: Path, out: Path, scale: Scale, primorl_grid: dict[str, list[Any]], **sweep: Any
) -> dict[str, Any]:
    """MOPO and PRIMORL × seeds on one dataset, PRIMORL over `primorl_grid` (one axis: the
    plots' x); `sweep`: the backend and workers (:func:`sweep_doc`)."""
    (x,) = primorl_grid
    return sweep_doc(
        scale,
        out,
        {"system": ["mopo", "primorl"], "seed": scale.seed_list()},
        primorl={"grid": primorl_grid},
        data=data,
        x=x,
        **sweep,
    )


def sweep_doc(
    scale: Scale,
    out: Path,
    grid: dict[str, Any],
    *,
    primorl: dict[str, Any],
    backend: str,
    workers: int | None,
    data: Path | None = None,
    cells: list[dict[str, Any]] | None = None,
    x: str | None = None,
) -> dict[str, Any]:
    """A sweep of MOPO and PRIMORL cells under `out`: the scale's settings, `grid` (and any
    explicit `cells`), PRIMORL's settings `primorl`. The per-system settings are the same in
    every PRIMORL reproduction, so identical cells have identical fingerprints; quick mode runs
    a few DP-FedAvg rounds (z calibrated for them) and dynamics epochs, a smoke test."""
    primorl = dict(primorl)
    mopo: dict[str, Any] = {}
    if scale.quick:
        primorl["steps"] = 3
        # the paper's q, which the quick datasets' small K would otherwise raise to 1 (the
        # default q = min(1, 30/K) gives the paper's q at the full datasets' K = 30,000)
        primorl.setdefault("sampling_rate", 1e-3)
        mopo["model_epochs"] = 2
    doc: dict[str, Any] = {"out": str(out)}
    if data is not None:
        doc["data"] = str(data)
    doc.update(scale.settings(), grid=grid)
    if cells is not None:
        doc["cells"] = cells
    doc["systems"] = {"primorl": primorl, "mopo": mopo}
    doc["sweep"] = {"backend": backend, "metrics": ["return_mean", "normalised_score"]}
    if x is not None:
        doc["sweep"]["x"] = x
    if workers is not None:
        doc["sweep"]["workers"] = workers
    return doc


def sweep_dir(reproduction: str, scale: Scale) -> Path:
    """Where a reproduction's cells live (the cache: their checkpoints and models do not
    belong in docs/)."""
    from privrl.data import cache_dir

    return cache_dir() / "reproduce" / reproduction / ("quick" if scale.quick else "full")


def recipe_path(task: str, quick: bool) -> Path:
    """Where the recipe dataset of `task` is (built or not); a build lacking the recipe's
    public declaration gains it (`recipes.primorl.declare_recipe_public`)."""
    from privrl.data import data_dir
    from privrl.runs.recipes.primorl import declare_recipe_public

    path = data_dir() / f"primorl-{task}{'-quick' if quick else ''}.h5"
    return declare_recipe_public(path) if path.is_file() else path


def recipe_dataset(task: str, quick: bool, reproduction: str) -> Path:
    """The recipe dataset of `task`; the quick one is built on the fly (seconds), the full one
    must have been built with `privrl data collect` (hours)."""
    path = recipe_path(task, quick)
    if path.is_file():
        return path
    if quick:
        from privrl.data import data_dir
        from privrl.runs.recipes import RECIPES

        RECIPES[f"primorl-{task}"].load()(data_dir(), seed=0, quick=True, progress=False)
        return path
    raise ValueError(
        f"dataset {path} is missing: build it with `privrl data collect --recipe "
        f"primorl-{task}` (resumable), then rerun `privrl reproduce {reproduction}`"
    )


def reuse_finished(sweep: Any, others: Sequence[Path]) -> int:
    """Copy into `sweep` every unfinished cell that is finished, with the same fingerprint, in
    one of the sweep directories `others`; returns how many were copied."""
    from privrl.runs.sweep import RUN_FILES, finished, read_record

    copied = 0
    for cell in sweep.cells:
        if finished(cell):
            continue
        for other in others:
            source = other / "cells" / cell.name
            if (read_record(source, cell.key) or {}).get("status") != "ok":
                continue
            if not all((source / "run" / n).is_file() for n in RUN_FILES):
                continue
            if cell.dir.exists():
                shutil.rmtree(cell.dir)
            cell.dir.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(source, cell.dir)
            copied += 1
            break
    return copied


def run_cells(
    doc: Mapping[str, Any],
    out: Path,
    *,
    reuse: Sequence[Path] = (),
    tolerate: Sequence[str] = (),
    deadline: float | None = None,
    on_cell: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Expand `doc`, reuse finished cells of the sweeps `reuse`, continue finished cells to
    more SAC epochs (`seeding.extend_finished`), give a cell that differs from a finished one
    only in its policy stage that cell's release (`seeding.reuse_releases`), run (or resume) the
    others, copy the results table to `out`; the rows, with each cell's learning curve
    (`curve`) and directory (`dir`).
    A failed cell stops the report (a rerun retries it) unless its error contains one of
    `tolerate`, an outcome the report states (a diverged model): it is kept, not rerun
    (`runs.sweep.settled`). No cell starts after `deadline` (`time.monotonic()`); the rows of
    cells left unfinished have a status other than "ok" (the report: pending). `on_cell(record)`
    is called as each cell ends (`runs.sweep.run_sweep`)."""
    from privrl.runs.sweep import SweepOutcome, expand, run_sweep
    from reproductions.primorl.seeding import extend_finished, reuse_releases

    sweep = expand(doc)
    reuse_finished(sweep, [p for p in reuse if p != sweep.out])
    extend_finished(sweep)
    reuse_releases(sweep)
    outcome = run_sweep(sweep, deadline=deadline, outcomes=tolerate, on_cell=on_cell)
    out.mkdir(parents=True, exist_ok=True)
    _copy_results(sweep.out / "results.csv", out / "results.csv")
    failed = [(c, e) for c, e in outcome.failed if not any(t in e for t in tolerate)]
    SweepOutcome(failed=failed).raise_failed()
    return [
        dict(r, curve=curve(sweep.out / "cells" / r["cell"]), dir=sweep.out / "cells" / r["cell"])
        for r in outcome.rows
    ]


def _copy_results(source: Path, target: Path) -> None:
    """Copy the results table beside the report, a `data` column reduced to file names (the
    cache's location is this machine's, not the reproduction's)."""
    with open(source, newline="") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    if "data" not in fields:
        shutil.copyfile(source, target)
        return
    for r in rows:
        if r.get("data"):
            r["data"] = Path(r["data"]).name
    with open(target, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _value(text: str) -> Any:
    """A results.csv cell as the sweep's rows hold it: None (empty), bool, int, float, str."""
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def read_results(path: Path) -> list[dict[str, Any]]:
    """The rows of a results table (results.csv), typed as the sweep's rows; [] without one."""
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return [{k: _value(v) for k, v in r.items()} for r in csv.DictReader(fh)]


def curve(cell_dir: Path) -> list[float]:
    """A cell's per-epoch real-environment return (metrics.csv), [] if it has none."""
    path = cell_dir / "run" / "metrics.csv"
    if not path.is_file():
        return []
    with open(path, newline="") as fh:
        return [float(r["return_mean"]) for r in csv.DictReader(fh) if r.get("return_mean")]


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval (0 for one value); the sweep's statistic."""
    from privrl.runs.sweep import mean_ci as sweep_mean_ci

    mean, _, high = sweep_mean_ci(values)
    return mean, high - mean


def raw_map(env_id: str) -> tuple[float, float]:
    """(A, B) with R_raw = A + B·R: an episode return R of the task `env_id` on the raw
    Gymnasium / dm_control scale (the source env's own reward, transform "none").

    Public: per step r_raw = a + b·r (:func:`privrl.envs.control.reward_map`, fixed by the
    simulator's declared cost), and every episode of these tasks lasts the horizon H (truncated,
    never terminated), so the return maps as R_raw = H·a + b·R. For privrl/Pendulum-v0
    (r' = 1 + r/c_max) that is R_raw = c_max·(R' − H); identity where privrl leaves the reward
    as its source computes it (the cartpoles, HalfCheetah)."""
    from privrl.envs.control import reward_map, task_for_env_id, with_reward_transform

    task = task_for_env_id(env_id)
    a, b = reward_map(task, with_reward_transform(task, "none"))
    return task.horizon * a, b


def raw_scale_notes() -> list[str]:
    """The report paragraph on the raw scale: the transform, its inverse and the paper's scale."""
    from privrl.envs.control import PENDULUM_MAX_COST

    c = PENDULUM_MAX_COST
    return [
        "## Returns on the raw scale",
        "",
        "Our Pendulum task (privrl/Pendulum-v0) rescales Gymnasium Pendulum-v1's per-step "
        f"reward r ∈ [−c_max, 0] to r' = 1 + r/c_max ∈ [0, 1], with c_max = π² + 0.1·8² + "
        f"0.001·2² ≈ {c:.4f} (the largest per-step cost). The inverse is r = c_max·(r' − 1); "
        "an episode lasts H = 200 steps (truncated, never terminated), so a return maps as "
        f"R = c_max·(R' − H) = {c:.4f}·(R' − 200): R' ∈ [0, 200] ↔ R ∈ [−{200 * c:.1f}, 0]. "
        "The raw column applies this public affine map to our return (the interval's "
        "half-width scales by c_max); for the cartpoles (dm_control rewards in [0, 1], "
        "1000 steps) and HalfCheetah privrl does not transform the reward and the two "
        "scales coincide.",
        "",
        "The paper's Pendulum returns (MOPO 795.9, NO PRIVACY 810.4, LOW 817.4, HIGH 778.9) "
        "are on neither scale and cannot be mapped to ours: a raw Pendulum-v1 return is ≤ 0, "
        "and a return of rewards in [0, 1] (the paper's MDP definition, Section 3) over "
        "Pendulum-v1's 200 steps is ≤ 200. The paper states neither its Pendulum reward "
        "transform nor its episode length (its Figure 3 axis reaches 1000, which suggests "
        "longer episodes or another scaling), so no affine map from its numbers to ours "
        "can be derived; we compare shares of MOPO's return instead. Its cartpole returns "
        "(Balance 976.3, Swingup 804.9 for MOPO) are on dm_control's own scale, which is "
        "ours (the raw column equals our return there).",
        "",
    ]


def cell_stats(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One report row over its seeds' cells: seeds, return mean ± 95% CI, per-seed returns,
    the mean normalised score (None when a cell has none), ε (∞ for a non-private row) and,
    when the cells name their env id, the return ± CI on the raw scale (:func:`raw_map`)."""
    returns = [float(c["return_mean"]) for c in cells]
    ret, ci = mean_ci(returns)
    scores = [c.get("normalised_score") for c in cells]
    eps = cells[0].get("privacy_epsilon")
    stats = {
        "seeds": len(cells),
        "return": ret,
        "ci": ci,
        "per_seed": returns,
        "normalised": None if None in scores else sum(scores) / len(scores),
        "epsilon": math.inf if eps is None else float(eps),
    }
    env_id = cells[0].get("env_id")
    if env_id:
        a, b = raw_map(str(env_id))
        stats.update(env_id=str(env_id), raw_return=a + b * ret, raw_ci=abs(b) * ci)
    return stats


def add_shares(table: Mapping[Any, dict[str, Any]], mopo: Any, *, ci: bool = False) -> None:
    """Each row's return as a percentage of the MOPO row's (`table[mopo]`), and with `ci` its
    interval's half-width too; nothing without a MOPO row."""
    if mopo not in table:
        return
    reference = table[mopo]["return"]
    for s in table.values():
        s["share"] = 100.0 * s["return"] / reference
        if ci:
            s["ci_share"] = 100.0 * s["ci"] / reference


def write_outputs(
    out: Path,
    found: Sequence[Mapping[str, str]],
    config: Mapping[str, Any],
    metrics: Any,
    markdown: str,
) -> Path:
    """A reproduction's claims.json, config.json, metrics.json and report.md (`markdown`);
    returns the report's path."""
    from privrl.runs.rundir import RunDir

    (out / "claims.json").write_text(json.dumps(found, indent=2, ensure_ascii=False) + "\n")
    run = RunDir(out)
    run.write_config(dict(config))
    run.write_metrics(metrics)
    path = out / "report.md"
    path.write_text(markdown)
    return path


def noise_multiplier(cell_dir: Path | None) -> float | None:
    """z of the cell's one release (its privacy.json), None for MOPO or an unfinished cell."""
    if cell_dir is None:
        return None
    try:
        report = json.loads((Path(cell_dir) / "run" / "privacy.json").read_text())
        return float(report["releases"][0]["noise"]["noise_multiplier"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def cell_seconds(rows: Sequence[Mapping[str, Any]]) -> float:
    """The cells' total running time (each on one thread)."""
    return sum(float(r.get("seconds") or 0.0) for r in rows)


def curve_series(label: str, curves: Sequence[Sequence[float]]) -> Series | None:
    """Mean learning curve over seeds with its 95% band (None without a curve)."""
    curves = [c for c in curves if c]
    if not curves:
        return None
    n = min(len(c) for c in curves)
    stats = [mean_ci([c[i] for c in curves]) for i in range(n)]
    return Series(
        label,
        list(range(1, n + 1)),
        [m for m, _ in stats],
        low=[m - h for m, h in stats],
        high=[m + h for m, h in stats],
    )
