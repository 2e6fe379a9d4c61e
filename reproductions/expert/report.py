"""Aggregation of runs into cells, the reports' shared sections, the gallery claims and the
top-level run-directory files."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from privrl.runs.rundir import RunDir
from privrl.runs.sweep import budget_deadline
from reproductions.claims import Claim, write_claims
from reproductions.expert.configs import RunConfig, _base, _Context, _private, _with_noise
from reproductions.expert.paper import (
    ENVS,
    METHOD_LABEL,
    Scale,
    _fmt,
    mean_ci,
    normalised,
)
from reproductions.expert.runs import _lr, _run_all, _scale_tag, lr_method_of
from reproductions.templates import beside, table

TEXT = beside(__file__, "report.md.tmpl")

# ---------------------------------------------------------------------------------------------
# aggregation, plots, reports
# ---------------------------------------------------------------------------------------------


@dataclass
class Cell:
    """One configuration over seeds: its runs and the normalised-score summary."""

    label: str
    cfgs: list[RunConfig]
    runs: list[dict[str, Any]] = field(default_factory=list)
    score: tuple[float, float] = (math.nan, math.nan)
    raw: tuple[float, float] = (math.nan, math.nan)
    scores: list[float] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.runs)

    def stable_sizes(self) -> list[int]:
        return [int(r.get("stable_size", 0)) for r in self.runs]


def _fill(cell: Cell, done: dict[str, dict[str, Any]], ref: dict[str, Any] | None) -> Cell:
    cell.runs = [done[c.key()] for c in cell.cfgs if c.key() in done]
    rets = [float(r["return_mean"]) for r in cell.runs]
    cell.raw = mean_ci(rets)
    if ref is not None and math.isfinite(ref["mean"]) and ref["mean"] != ref["random"]:
        cell.scores = [normalised(x, ref["random"], ref["mean"]) for x in rets]
        cell.score = mean_ci(cell.scores)
    return cell


def _cell_info(cell: Cell) -> dict[str, Any]:
    c0 = cell.cfgs[0]
    return {
        "label": cell.label,
        "config": {k: v for k, v in c0.to_dict().items() if k != "seed"},
        "seeds_finished": [r["seed"] for r in cell.runs],
        "normalised_mean": cell.score[0],
        "normalised_ci95": cell.score[1],
        "normalised_per_seed": cell.scores,
        "return_mean": cell.raw[0],
        "return_ci95": cell.raw[1],
        "return_per_seed": [r["return_mean"] for r in cell.runs],
        "stable_size_per_seed": cell.stable_sizes(),
        "private_steps_per_seed": [r["private_steps"] for r in cell.runs],
        "steps_per_seed": [r["steps"] for r in cell.runs],
        "epsilon_reported": [r.get("epsilon") for r in cell.runs],
        "minutes_per_run": [r["wall_s"] / 60 for r in cell.runs],
    }


def raw_return_section(
    cells: Mapping[str, Mapping[str, Any]], random: Mapping[str, float]
) -> list[str]:
    """Raw returns beside the normalised score, and the score against the experts' own median
    return (`EXPERT_MEDIAN_RETURN`) — the reading that does not depend on how well the
    non-private run trained. ``cells``: metrics.json's cells (label, return_mean, return_ci95,
    normalised_mean, normalised_ci95) keyed ``env/algo/…``; ``random``: R_random per env."""
    from reproductions.expert.paper import EXPERT_MEDIAN_RETURN

    rows = []
    for key, c in cells.items():
        env = key.split("/")[0]
        raw = c.get("return_mean")
        if env not in EXPERT_MEDIAN_RETURN or env not in random or raw is None:
            continue
        raw = float(raw)
        if not math.isfinite(raw):
            continue
        expert, r0 = EXPERT_MEDIAN_RETURN[env], float(random[env])
        rows.append(
            [c["label"], _fmt(raw, float(c.get("return_ci95") or math.nan), 1),
             _fmt(float(c["normalised_mean"]), float(c["normalised_ci95"])),
             f"{(raw - r0) / (expert - r0):.2f}"]
        )  # fmt: skip
    if not rows:
        return []
    header = ["cell", "return (mean ± CI)", "normalised (non-private ref.)",
              "vs experts' median"]  # fmt: skip
    return _lines(TEXT.fill("raw_returns", table=table(header, rows)))


def _lines(text: str) -> list[str]:
    """A report section's lines, the last one empty (the reports join sections' lines)."""
    return [*text.split("\n"), ""]


def _stable_text(cell: Cell) -> str:
    if cell.cfgs[0].method != "ours" or not cell.runs:
        return "—"
    s = cell.stable_sizes()
    return f"{np.mean(s):.0f} ({', '.join(str(v) for v in s)})"


def _z_text(cell: Cell) -> str:
    z = cell.cfgs[0].noise_multiplier
    return "—" if z is None else f"{z:.3g}"


def z_by_method(cells: Mapping[str, Cell]) -> tuple[list[float], list[float]]:
    """z of the DP-SGD cells (p = 1) and of ours that filter (0 < p < 1), run or not."""
    cfgs = [c.cfgs[0] for c in cells.values() if c.cfgs[0].noise_multiplier is not None]
    dp_sgd = [c.noise_multiplier for c in cfgs if c.method == "dp-sgd" or c.p == 1]
    ours = [c.noise_multiplier for c in cfgs if c.method == "ours" and 0 < (c.p or 0) < 1]
    return dp_sgd, ours


def _private_steps_text(cell: Cell) -> str:
    if not cell.runs:
        return "—"
    k = [r["private_steps"] for r in cell.runs]
    n = [r["steps"] for r in cell.runs]
    return f"{np.mean(k):.0f} / {np.mean(n):.0f}"


def _write_outputs(
    ctx: _Context,
    name: str,
    cells: dict[str, Cell],
    refs: dict[str, dict[str, Any]],
    report_lines: list[str],
    extra_metrics: dict[str, Any],
    *,
    claims: list[Claim] | None = None,
) -> Path:
    """Top-level run-directory files of a reproduction, its report and its claims.json."""
    from privrl.privacy.report import PrivacyReport

    run = RunDir(ctx.out)
    all_cfgs = [c for cell in cells.values() for c in cell.cfgs]
    run.write_config(
        {
            "reproduction": name,
            "scale": asdict(ctx.scale),
            "runs": [c.key() for c in all_cfgs],
        }
    )
    rows = []
    for cell_key, cell in cells.items():
        for r in cell.runs:
            rows.append(
                {
                    "cell": cell_key,
                    "label": cell.label,
                    "key": r["key"],
                    "seed": r["seed"],
                    "return_mean": r["return_mean"],
                    "normalised": (cell.scores[cell.runs.index(r)] if cell.scores else math.nan),
                    "stable_size": r.get("stable_size", 0),
                    "private_steps": r["private_steps"],
                    "steps": r["steps"],
                    "epsilon": r.get("epsilon"),
                    "wall_s": r["wall_s"],
                }
            )
    run.write_curve(rows or [{"cell": "", "key": ""}])
    n_total = len(all_cfgs)
    n_done = sum(cell.n for cell in cells.values())
    run.write_metrics(
        {
            "finished_runs": n_done,
            "total_runs": n_total,
            "complete": n_done == n_total and not ctx.missing,
            "missing_datasets": ctx.missing,
            "failed_runs": ctx.failed,
            "references": {k: _json_ref(v) for k, v in refs.items()},
            "cells": {k: _cell_info(c) for k, c in cells.items()},
            "wall_time_s": time.perf_counter() - ctx.started,
            **extra_metrics,
        }
    )
    # privacy.json: the report of the first finished private run of the headline cell
    privacy = None
    for cell in cells.values():
        for r in cell.runs:
            path = Path(r["privacy_json"])
            if r["method"] != "nonprivate" and path.is_file():
                privacy = PrivacyReport.from_json(path)
                break
        if privacy is not None:
            break
    if privacy is not None:
        run.write_privacy(privacy)
    report = run.artifact("report.md")
    report.write_text("\n".join(report_lines) + "\n")
    if claims is not None:
        write_claims(run.path, claims)
    return report


def _scores(cells: Mapping[str, Cell]) -> dict[str, tuple[float, float]]:
    return {k: c.score for k, c in cells.items() if c.runs}


def _json_ref(ref: dict[str, Any]) -> dict[str, Any]:
    return {**ref, "per_seed": {str(k): v for k, v in ref["per_seed"].items()}}


def _header(title: str, name: str, ctx: _Context, seeds: Sequence[int]) -> list[str]:
    """The opening of a report: its title, the paper, the scale's notes and the seeds."""
    scale = ctx.scale
    regime = ""
    if scale.is_regime:
        regime = TEXT.fill(
            "regime",
            {"name": name},
            z=f"{scale.fixed_noise:g}",
            batch=scale.batch_size,
            steps=f"{scale.steps:,}",
        )
    quick = ""
    if scale.is_quick:
        quick = TEXT.fill("quick", steps=scale.steps, hidden=scale.hidden, z=scale.fixed_noise)
    text = TEXT.fill(
        "report",
        title=title,
        regime=TEXT.fill("title_regime") if scale.is_regime else "",
        regenerate="" if scale.is_regime else TEXT.fill("regenerate", {"name": name}),
        regime_note=regime + "\n" if regime else "",
        quick=quick + "\n" if quick else "",
        seeds=", ".join(str(s) for s in seeds),
        stopped=TEXT.fill("stopped") if ctx.stopped else "",
    )
    return _lines(text)


_PAPER_BATCH = " (the paper's most frequent best value)"


def _protocol(ctx: _Context) -> list[str]:
    s = ctx.scale
    if s.is_regime:
        training = TEXT.fill(
            "training_regime", z=f"{s.fixed_noise:g}", batch=s.batch_size, steps=f"{s.steps:,}"
        )
    else:
        if s.fixed_noise is not None:
            z = TEXT.fill("z_fixed", z=s.fixed_noise)
        else:
            z = TEXT.fill("z_calibrated")
        training = TEXT.fill("training", steps=f"{s.steps:,}", batch=s.batch_size, z=z)
    if len(s.lr_grid) == 1:
        hyper = TEXT.fill("hyper_fixed", lr=f"{s.lr_grid[0]:g}", batch=s.batch_size)
    else:
        hyper = TEXT.fill(
            "hyper_searched",
            grid=", ".join(f"{v:g}" for v in s.lr_grid),
            batch=s.batch_size,
            batch_note=" (quick scale)"
            if s.is_quick
            else " (the paper's most frequent best value)",
            z_how="fixed" if s.fixed_noise is not None else "calibrated",
        )
    text = TEXT.fill(
        "protocol",
        training=training,
        n_evals=s.n_evals,
        eval_episodes=s.eval_episodes,
        window=f"{min(s.eval_window, 10_000):,}",
        hyper=hyper,
    )
    return _lines(text)


def _refs_section(
    ctx: _Context, refs: dict[str, dict[str, Any]], cells: dict[str, Cell] | None = None
) -> list[str]:
    """The reference table; with ``cells`` (keys ``env/algo/…``), a note on every reference
    that some private cell beats on the mean (normalised score above 1)."""
    rows = []
    for key, ref in refs.items():
        env, algo = key.split("/")
        per = ", ".join(f"{v:.1f}" for v in ref["per_seed"].values()) or "pending"
        rows.append(
            [ENVS[env].label, algo.upper(), f"{ref['lr']:g}", f"{ref['random']:.2f}",
             _fmt(ref["mean"], ref["ci"], 1), per]
        )  # fmt: skip
    header = ["env", "algo", "η", "R_random", "R_nonprivate (mean ± CI)", "per seed"]
    text = TEXT.fill("refs", table=table(header, rows))
    above = sorted(
        {
            f"{ENVS[key.split('/')[0]].label} {key.split('/')[1].upper()}"
            for key, cell in (cells or {}).items()
            if cell.runs and math.isfinite(cell.score[0]) and cell.score[0] > 1.05
        }
    )
    if above:
        text += "\n\n" + TEXT.fill("refs_above", cells=", ".join(above))
    return _lines(text)


def _search_section(
    ctx: _Context, envs: Iterable[str], algos: Sequence[str] = ("cql", "bcq")
) -> list[str]:
    rows = []
    for env in dict.fromkeys(envs):  # each environment once, in order
        if env not in ctx.data:
            continue
        for key, entry in sorted(ctx.data[env].read_cache().get("search", {}).items()):
            e, algo, method, tag, _ = key.split("/")
            if e != env or tag != _scale_tag(ctx.scale) or algo not in algos:
                continue
            per = ", ".join(f"{lr}: {r:.1f}" for lr, r in entry["returns"].items())
            chosen = f"{entry['chosen']:g}{'' if entry.get('complete') else ' (partial)'}"
            rows.append([ENVS[env].label, algo.upper(), METHOD_LABEL.get(method, method), per,
                         chosen])  # fmt: skip
    header = ["env", "algo", "method", "return per η (search seed)", "chosen"]
    return _lines(TEXT.fill("search", table=table(header, rows)))


def _tail(
    ctx: _Context, name: str, n_done: int, n_total: int, cells: dict[str, Cell] | None = None
) -> list[str]:
    runs = {r["key"]: r["wall_s"] for cell in (cells or {}).values() for r in cell.runs}
    if ctx.n_run:
        this = TEXT.fill("this_ran", minutes=f"{(time.perf_counter() - ctx.started) / 60:.1f}")
    else:
        this = TEXT.fill("this_rebuilt")
    missing = failed = finish = ""
    if ctx.missing:
        items = "\n".join(
            f"- {ENVS[env].label}: build with `{cmd}`" for env, cmd in ctx.missing.items()
        )
        missing = "\n" + TEXT.fill("missing", items=items)
    if ctx.failed:
        items = "\n".join(f"- `{key}`: {msg}" for key, msg in ctx.failed.items())
        failed = "\n" + TEXT.fill("failed", items=items)
    if n_done < n_total or ctx.missing:
        target = f"{name}/regime" if ctx.scale.is_regime else name
        quick = " --quick" if ctx.scale.is_quick else ""
        finish = "\n" + TEXT.fill("finish", target=target, quick=quick, out=ctx.out)
    text = TEXT.fill(
        "status",
        done=n_done,
        total=n_total,
        minutes=f"{sum(runs.values()) / 60:.0f}",
        this=this,
        missing=missing,
        failed=failed,
        finish=finish,
    )
    return _lines(text)


def run_cells(ctx: _Context, cells: dict[str, Cell], refs: dict[str, dict[str, Any]]) -> None:
    """Run (or reuse) every cell's configurations as one sweep, then fill in their scores: a
    cell keyed ``env/algo/…`` against that reference, otherwise against the only one."""
    done = _run_all(ctx, [c for cell in cells.values() for c in cell.cfgs], "runs")
    only = next(iter(refs.values())) if len(refs) == 1 else None
    for key, cell in cells.items():
        _fill(cell, done, refs.get("/".join(key.split("/")[:2]), only))


def closing(
    ctx: _Context,
    name: str,
    cells: dict[str, Cell],
    refs: dict[str, dict[str, Any]],
    envs: Iterable[str],
    algos: Sequence[str] = ("cql", "bcq"),
    *,
    above_notes: bool = True,
) -> list[str]:
    """The sections every report ends with: references (with a note where a private cell
    beats its reference, ``above_notes``), the η search, the protocol and the status."""
    lines = _refs_section(ctx, refs, cells if above_notes else None)
    if len(ctx.scale.lr_grid) > 1:  # a fixed η has no search
        lines += _search_section(ctx, envs, algos)
    lines += _protocol(ctx)
    n_total = len({c.key() for cell in cells.values() for c in cell.cfgs})
    n_done = len({r["key"] for cell in cells.values() for r in cell.runs})
    return lines + _tail(ctx, name, n_done, n_total, cells)


def _save_plot(
    ctx: _Context, fig: Any, name: str, caption: str, rect: tuple[float, ...] | None = None
) -> list[str]:
    """Save ``fig`` as ``plots/<name>.png`` of the reproduction; the report's image line
    (``rect``: the part of the figure the panels fill, leaving room for a figure legend)."""
    fig.tight_layout(rect=rect)
    fig.savefig(RunDir(ctx.out).plot_path(name), dpi=110)
    _plt().close(fig)
    return [f"![{caption}](plots/{name}.png)", ""]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ---------------------------------------------------------------------------------------------
# entry helpers
# ---------------------------------------------------------------------------------------------


def _setup(
    out: Path,
    seeds: int | None,
    seed: int,
    quick: bool,
    time_budget_s: float | None,
    regime: bool = False,
    **sweep: Any,
) -> tuple[_Context, list[int]]:
    """The invocation's context and seeds; ``regime``: the paper's noise regime
    (`Scale.regime`); ``sweep``: the sweep runner's ``backend`` and ``workers``."""
    if regime:
        scale = Scale.quick_regime() if quick else Scale.regime()
    else:
        scale = Scale.quick() if quick else Scale.full()
    deadline = budget_deadline(time_budget_s)  # else $PRIVRL_REPRO_BUDGET_S
    n = scale.seeds if seeds is None else int(seeds)
    if n < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    ctx = _Context(Path(out), scale, deadline, **sweep)
    ctx.out.mkdir(parents=True, exist_ok=True)
    return ctx, [int(seed) + i for i in range(n)]


def reproduction(build: Callable[..., Path]) -> Callable[..., Path]:
    """A reproduction's entry point made from ``build(ctx, seeds, **options)``: every
    reproduction takes ``out``, ``seeds`` (default: the scale's), the base ``seed``, ``quick``,
    ``time_budget_s`` (no new runs after it; also ``$PRIVRL_REPRO_BUDGET_S``), ``regime``
    (the paper's noise regime, `Scale.regime`) and the sweep runner's ``backend`` ("local" |
    "ray") and ``workers``."""

    @functools.wraps(build)
    def entry(
        out: Path,
        *,
        seeds: int | None = None,
        seed: int = 0,
        quick: bool = False,
        time_budget_s: float | None = None,
        backend: str = "local",
        workers: int | None = None,
        regime: bool = False,
        **options: Any,
    ) -> Path:
        sweep = {"backend": backend, "workers": workers}
        ctx, seed_list = _setup(out, seeds, seed, quick, time_budget_s, regime, **sweep)
        return build(ctx, seed_list, **options)

    return entry


def private_cells(
    ctx: _Context,
    env: str,
    algo: str,
    seeds: Sequence[int],
    *,
    epsilon: float,
    p: float,
    m: int | None = None,
    **private: Any,
) -> list[RunConfig]:
    """One private run per seed at (ε, δ = 1/m) and mixing rate p (`_private`; ``private``:
    its split and calibration options) with the searched η of its method and its noise
    multiplier; ``m`` below the dataset's experts: a public subset drawn with seed 0."""
    data = ctx.data[env]
    lr = _lr(ctx, env, algo, lr_method_of(p), seeds[0])
    out = []
    for s in seeds:
        base = _base(env, algo, "ours", s, lr, data, scale=ctx.scale, m=m or data.m)
        if base.m < data.m:
            base = replace(base, subset_seed=0)
        out.append(_with_noise(_private(base, epsilon=epsilon, p=p, **private), data, ctx.scale))
    return out
