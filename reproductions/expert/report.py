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
            f"| {c['label']} | {_fmt(raw, float(c.get('return_ci95') or math.nan), 1)} | "
            f"{_fmt(float(c['normalised_mean']), float(c['normalised_ci95']))} | "
            f"{(raw - r0) / (expert - r0):.2f} |"
        )
    if not rows:
        return []
    return [
        "## Raw returns and the experts' reference",
        "",
        "The normalised score divides by the non-private run of the same learner and length, "
        "which is not a ceiling where it trained badly (Acrobot BCQ: −138.7 while the private "
        "runs reach ≈ −84, hence scores of 1.8–1.9). The raw return and the score against the "
        "experts' own median greedy return on the default environment (CartPole 1000, "
        "Acrobot −88, HIV 1227, LunarLander 267; docs/expert-data.md) read the same runs "
        "without that dependence: (R − R_random)/(R_experts − R_random).",
        "",
        "| cell | return (mean ± CI) | normalised (non-private ref.) | vs experts' median |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


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
    scale = ctx.scale
    lines = [
        f"# {title}" + (" (the paper's noise regime)" if scale.is_regime else ""),
        "",
        "Paper: Sharma et al., *Preserving Expert-Level Privacy in Offline Reinforcement "
        "Learning* (2024)."
        + (
            ""
            if scale.is_regime
            else f" Regenerate with `privrl reproduce {name}` (resumable: finished runs are "
            "skipped; `--quick` for a smoke test on the `--quick` recipe data)."
        ),
        "",
    ]
    if scale.is_regime:
        lines += [
            f"**The paper's noise regime**: every private run at z = {scale.fixed_noise:g}, "
            f"b = {scale.batch_size}, as many steps as its budget allows up to "
            f"{scale.steps:,}. Regenerate with `privrl reproduce {name}/regime` (resumable: "
            f"finished runs are skipped; `privrl reproduce {name}` runs the equal-steps scale).",
            "",
        ]
    if scale.is_quick:
        lines += [
            "**Quick mode** (smoke test): 50 experts × 2 trajectories, "
            f"{scale.steps} steps, a {scale.hidden} network, z = {scale.fixed_noise} — the "
            "numbers say nothing about the methods.",
            "",
        ]
    n_done_note = ""
    if ctx.stopped:
        n_done_note = (
            " **This invocation hit its time budget: the tables below are partial (cells "
            "show the seeds that finished); rerun the same command to finish.**"
        )
    lines += [
        f"Seeds {', '.join(str(s) for s in seeds)}; cells show the normalised score "
        "(R − R_random)/(R_nonprivate − R_random), mean ± 95% CI (Student t over seeds; "
        "R_nonprivate is the mean over the same seeds of the non-private run)." + n_done_note,
        "",
    ]
    return lines


def _protocol(ctx: _Context) -> list[str]:
    s = ctx.scale
    z = (
        f"fixed z = {s.fixed_noise} and exactly N steps"
        if s.fixed_noise is not None
        else "z calibrated (PLD, 1% tolerance, safe side) so that the run's private steps "
        "spend exactly its DP-SGD budget: K = N for DP-SGD, K ≈ p·N for Selective DP-SGD "
        "(exact accounting; training stops at the K-th private step, ≈ N steps in all)"
    )
    grid = ", ".join(f"{v:g}" for v in s.lr_grid)
    if s.is_regime:
        training = (
            f"- Training length (the paper's noise regime): every private run at the fixed "
            f"z = {s.fixed_noise:g} (the smallest multiplier of the paper's grid {{10, …, 80}}), "
            f"b = {s.batch_size} (the largest batch of its grid), trained as long as its budget "
            f"allows (the paper's protocol), capped at N = {s.steps:,} steps. The paper's own "
            "step counts at these z (DP-SGD at ε = 10, z = 10, b = 256: about 75,000 steps; "
            "at its chosen z = 20–80, 10⁵–10⁶) cost far more than the machine allows, so a "
            "capped run spends less than its budget: the table reports each run's private "
            "and total steps and the ε its report certifies. Ours and DP-SGD are compared at "
            "the same z and the same cap."
        )
    else:
        training = (
            f"- Training length: N = {s.steps:,} steps per run, batch b = {s.batch_size}; "
            f"{z}. The paper trains as long as the budget lasts with z ∈ {{10, …, 80}} (up "
            "to ~10⁶ steps), which does not fit on 2 shared CPU cores. Our z (table column) "
            "is therefore much smaller than the paper's; the comparison of methods is at an "
            "equal number of steps (see the regime report for z in the paper's range)."
        )
    if len(s.lr_grid) == 1:
        hyper = (
            f"- Hyper-parameters: η = {s.lr_grid[0]:g} fixed for every method (at the full "
            "scale the search chose it for every CartPole method and for LunarLander's "
            "private methods; no search at this scale); "
            f"b = {s.batch_size}; z fixed; p as in the paper's Table 1 unless the table "
            "varies it."
        )
    else:
        hyper = (
            f"- Hyper-parameters: η searched over {{{grid}}} (a subset of the paper's grid "
            "{1e-4, 5e-4, 1e-3, 5e-3, 1e-2}) per (environment, algorithm, method) at ε = 10 "
            "(ours at the paper's Table 1 p) on one search seed (1000 + base seed) that is "
            f"not a reporting seed; b = {s.batch_size} fixed"
            + (" (quick scale)" if s.is_quick else " (the paper's most frequent best value)")
            + f"; z {'fixed' if s.fixed_noise is not None else 'calibrated'}, not searched; "
            "p as in the paper's Table 1 unless the table varies it. When the largest η of "
            "the grid wins (see the search table), a larger one (the paper's 1e-2) might do "
            "better; it was not tried. **The search is not privacy-accounted**, as in the "
            "paper."
        )
    return [
        "## Protocol and deviations from the paper",
        "",
        training,
        f"- Evaluation: mean return of {s.n_evals} greedy evaluations ({s.eval_episodes} "
        f"episodes each) spaced over the last {min(s.eval_window, 10_000):,} steps (paper: "
        "last 10,000 steps of much longer runs); CartPole evaluated for 1000 steps, Acrobot "
        "200, HIV 50, LunarLander 1000.",
        hyper,
        "- Accounting: ours uses the exact (certified) Selective DP-SGD accounting by "
        "default: the step coins are drawn up front and the K private steps are accounted "
        "as Poisson(b/m)-subsampled Gaussian steps, which allows fewer private steps than "
        "the paper's q = p·b/m. The paper's accounting is not a certified bound (the shared "
        "coin is visible in the iterates); runs marked *paper accounting* use it and are "
        "**not certified**.",
        "- Filter: T rounds per ε from the paper (B.3), p_min = 0.02, L = the dataset "
        "horizon (public), δ = 1/m, split ε1 = 3ε/4, δ1 = 9δ/10 (p = 0: all to the filter; "
        "ε < 5: no filter) unless stated; calibration of the paper (ε' = ε1/sqrt(32·T·"
        "ln(2/δ1))) unless marked *tight* or *PLD*.",
        "- BCQ uses linear imitation logits (the `privrl.rl.bcq` default; Fujimoto's final "
        "ReLU kills an output unit at initialisation for 2-action tasks, see docs/expert.md).",
        "- Experts and data: our recipes (`privrl data collect --recipe experts-*`, "
        "docs/expert-data.md): 3000 perturbed-physics experts × 20 trajectories, not the "
        "paper's 3000 PPO agents.",
        "",
    ]


def _refs_section(
    ctx: _Context, refs: dict[str, dict[str, Any]], cells: dict[str, Cell] | None = None
) -> list[str]:
    """The reference table; with ``cells`` (keys ``env/algo/…``), a note on every reference
    that some private cell beats on the mean (normalised score above 1)."""
    lines = [
        "## References (non-private runs and random policy)",
        "",
        "| env | algo | η | R_random | R_nonprivate (mean ± CI) | per seed |",
        "|---|---|---|---|---|---|",
    ]
    for key, ref in refs.items():
        env, algo = key.split("/")
        per = ", ".join(f"{v:.1f}" for v in ref["per_seed"].values()) or "pending"
        lines.append(
            f"| {ENVS[env].label} | {algo.upper()} | {ref['lr']:g} | {ref['random']:.2f} | "
            f"{_fmt(ref['mean'], ref['ci'], 1)} | {per} |"
        )
    lines.append("")
    above = sorted(
        {
            f"{ENVS[key.split('/')[0]].label} {key.split('/')[1].upper()}"
            for key, cell in (cells or {}).items()
            if cell.runs and math.isfinite(cell.score[0]) and cell.score[0] > 1.05
        }
    )
    if above:
        lines += [
            f"Scores above 1 ({', '.join(above)}): private runs returned more than the "
            "non-private reference of the same learner at the same training length. The "
            "normalisation takes the non-private run as the ceiling, which it is not there; "
            "compare raw returns (per-seed references above).",
            "",
        ]
    return lines


def _search_section(
    ctx: _Context, envs: Iterable[str], algos: Sequence[str] = ("cql", "bcq")
) -> list[str]:
    lines = [
        "## Learning-rate search (not privacy-accounted)",
        "",
        "| env | algo | method | return per η (search seed) | chosen |",
        "|---|---|---|---|---|",
    ]
    for env in dict.fromkeys(envs):  # each environment once, in order
        if env not in ctx.data:
            continue
        for key, entry in sorted(ctx.data[env].read_cache().get("search", {}).items()):
            e, algo, method, tag, _ = key.split("/")
            if e != env or tag != _scale_tag(ctx.scale) or algo not in algos:
                continue
            per = ", ".join(f"{lr}: {r:.1f}" for lr, r in entry["returns"].items())
            lines.append(
                f"| {ENVS[env].label} | {algo.upper()} | {METHOD_LABEL.get(method, method)} "
                f"| {per} | {entry['chosen']:g}{'' if entry.get('complete') else ' (partial)'} |"
            )
    lines.append("")
    return lines


def _tail(
    ctx: _Context, name: str, n_done: int, n_total: int, cells: dict[str, Cell] | None = None
) -> list[str]:
    lines = ["## Status", ""]
    runs = {r["key"]: r["wall_s"] for cell in (cells or {}).values() for r in cell.runs}
    this = (
        f"wall time of this invocation {(time.perf_counter() - ctx.started) / 60:.1f} min"
        if ctx.n_run
        else "this invocation trained nothing (every run was finished: the report was rebuilt)"
    )
    lines.append(
        f"{n_done} of {n_total} runs finished ({sum(runs.values()) / 60:.0f} min of training "
        f"and evaluation, not counting the reference and search runs); {this}; a shared "
        "2-core machine."
    )
    if ctx.missing:
        lines += ["", "Missing datasets (their rows are empty):", ""]
        for env, cmd in ctx.missing.items():
            lines.append(f"- {ENVS[env].label}: build with `{cmd}`")
    if ctx.failed:
        lines += ["", "Failed runs (retried on the next invocation):", ""]
        for key, msg in ctx.failed.items():
            lines.append(f"- `{key}`: {msg}")
    if n_done < n_total or ctx.missing:
        quick = " --quick" if ctx.scale.is_quick else ""
        target = f"{name}/regime" if ctx.scale.is_regime else name
        lines += [
            "",
            f"To finish: `nice -n 10 privrl reproduce {target}{quick} --out {ctx.out}` "
            "(resumable; builds nothing itself — build missing datasets first).",
        ]
    lines.append("")
    return lines


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
