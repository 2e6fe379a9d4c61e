"""Our study of DP-APVI (the paper has no tabular experiment): APVI vs DP-APVI vs n.

Setting: random finite-horizon MDPs S = 10, A = 5, H = 10 (Dirichlet(1)
transitions, U[0, 1] mean rewards, uniform d1), behaviour policy with full support
(π_h(a|s) ≥ 0.05 = 0.25/A, otherwise Dirichlet(1)), n on a log grid 10²…10⁵, ρ ∈ {0.1, 1, 10}.
Algorithms: APVI (non-private), DP-APVI Gaussian (ρ-zCDP), DP-APVI Laplace (pure ε-DP), each
with the Bernstein and the Hoeffding bonus, at the theory scale (bonus_scale = 1) and at a
tuned scale. Metric: exact suboptimality v* − v^π̂ (backward induction on the true model).

Design choices (written into the report):

* **Seeds and common random numbers.** Seed i draws its own MDP instance, behaviour policy and
  one dataset of 10⁵ trajectories; the dataset of size n is its first n trajectories (nested).
  Every algorithm sees the same data at (i, n). The noise generator is seeded by (i, n,
  mechanism), so all ρ share the same standard-normal draws and the bonus variants share the
  same noisy counts. Mean ± standard error over seeds; the gap to APVI is paired per seed.
* **Laplace ε matched to ρ.** The Laplace run gets the ε that the accountant (dp-accounting
  RDP) states for the Gaussian run at δ = 1e-6: both runs carry the same headline
  (ε, δ = 1e-6) guarantee, and the Laplace one is in fact ε-DP with δ = 0.
* **Tuned scale.** One scale per bonus type, the same for APVI and every DP-APVI variant (spec
  decision), chosen from a grid by the mean suboptimality over the n grid and all variants on
  *separate* MDP instances (seeds 10,000 + j, never the evaluation instances or their data).
* **Gap slope.** log(mean gap) is regressed on log n over the grid points where DP-APVI's
  mean fraction of known (h, s, a) (ñ > E) is ≥ 95% — i.e. past the threshold below which
  DP-APVI cannot use a pair at all — and the mean gap is > 0.

Why the loops over seeds, n and variants are not a sweep of the `apvi`/`dp-apvi` systems: the
study is ~13,600 evaluations (20 seeds × 13 n × 7 learners × 2 bonuses × 2 scales, and the
tuning runs), each a few milliseconds of planning on counts shared by every learner at (seed,
n), with noise shared across ρ (common random numbers: a generator per (seed, n, mechanism),
which a run's seed cannot express). Measured side by side on the quick configuration: 24 ms
per evaluation in this loop (the instance and its 10⁴ trajectories included) against 6.8 s per
`dp-apvi` sweep cell (8 cells, one worker: a dataset file read, a run directory and its plots
written per cell) — 280×, i.e. about a day instead of a minute for the full study.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from privrl.runs.rundir import RunDir
from privrl.runs.units import keyed_unit, log_progress, run_units
from reproductions.claims import write_claims
from reproductions.dp_apvi_tabular.plots import _plot_curves, _plot_gaps, _plot_tuning
from reproductions.dp_apvi_tabular.report import _render
from reproductions.dp_apvi_tabular.study import (
    Findings,
    StudyConfig,
    _aggregate,
    _aggregate_ablation,
    _fit_slope,
    _root,
    _tune,
    _variants,
)
from reproductions.dp_apvi_tabular.summary import (
    _csv,
    _privacy_reports,
    _summary,
    gallery_claims,
)

UNITS = "reproductions.dp_apvi_tabular.study:"
# The name the study's unit results are cached under (`keyed_unit`'s key), kept so that cached
# results are found wherever the module lives.
CACHE_KEY = "privrl.experiments.dp_apvi_tabular.study:"

__all__ = ["StudyConfig", "run"]


def run(
    out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False, **where: Any
) -> Path:
    """Run the study and write ``report.md``, plots and metrics to ``out``; returns the report.
    Each tuning instance, then each evaluation seed, is a function cell on the sweep runner
    (`where`: backend=, workers=), cached in ``$PRIVRL_CACHE/reproduce/dp-apvi-tabular/``."""
    cfg = StudyConfig.quick(seed) if quick else StudyConfig(base_seed=seed)
    if seeds is not None:
        cfg.seeds = int(seeds)
    return run_study(cfg, Path(out), quick=quick, **where)


def run_study(
    cfg: StudyConfig,
    out: Path,
    *,
    quick: bool = False,
    **where: Any,
) -> Path:
    """The study at `cfg` into `out`; `where`: the sweep runner's backend= and workers=."""
    console = Console()
    t_start = time.perf_counter()
    rundir = RunDir(out)
    variants = _variants(cfg)
    tuned, tuning_table, tuning_runs = _tune(cfg, **where)
    args = {"cfg": asdict(cfg), "tuned": tuned}
    units = [
        keyed_unit(
            _root(),
            f"seed{i}",
            UNITS + "unit_seed",
            {**args, "seed": i},
            key=CACHE_KEY + "unit_seed",
        )
        for i in range(cfg.seeds)
    ]
    progress = log_progress("dp-apvi-tabular: evaluating")
    results = run_units(units, **where, progress=progress)
    rows: list[dict[str, Any]] = [r for res in results for r in res["rows"]]
    ablation_rows: list[dict[str, Any]] = [r for res in results for r in res["ablation"]]
    agg = _aggregate(rows)
    ablation = _aggregate_ablation(ablation_rows, agg, cfg.bonuses[0])
    slopes = [
        _fit_slope(agg, v.name, b, kind)
        for v in variants
        if v.mechanism != "none"
        for b in cfg.bonuses
        for kind in ("theory", "tuned")
    ]
    elapsed = time.perf_counter() - t_start

    privacy_reports = _privacy_reports(cfg, variants)
    rundir.write_config({**asdict(cfg), "quick": quick, "variants": [asdict(v) for v in variants]})
    rundir.write_curve(agg)
    representative = next(
        (r for v, r in privacy_reports if v.mechanism == "gaussian" and v.rho == 1.0),
        privacy_reports[0][1] if privacy_reports else None,
    )
    if representative is not None:
        rundir.write_privacy(representative)
    (rundir.path / "privacy_reports.json").write_text(
        json.dumps({v.name: r.to_dict() for v, r in privacy_reports}, indent=2, ensure_ascii=False)
        + "\n"
    )
    found = Findings(cfg, variants, agg, slopes, tuned, tuning_table, ablation, elapsed)
    summary = _summary(found)
    rundir.write_metrics(
        {
            "suboptimality": summary["headline"]["suboptimality_mean"],
            "suboptimality_of": summary["headline"],
            "tuned_bonus_scale": tuned,
            "tuning": tuning_table,
            "slopes": slopes,
            "apvi_slopes": summary["apvi_slopes"],
            "convergence": summary["convergence"],
            "n_to_reach": summary["n_to_reach"],
            "theory_scale_threshold": summary["theory_threshold"],
            "threshold_ablation": ablation,
            "elapsed_seconds": elapsed,
            "runs": {"evaluation": len(rows), "tuning": tuning_runs},
        }
    )
    (rundir.path / "results_per_seed.csv").write_text(_csv(rows))
    _plot_curves(rundir, cfg, agg, variants)
    _plot_gaps(rundir, cfg, agg, variants, slopes)
    _plot_tuning(rundir, cfg, tuning_table, tuned)
    report = rundir.path / "report.md"
    report.write_text(_render(found, summary, quick=quick), encoding="utf-8")
    write_claims(rundir.path, gallery_claims(summary["convergence"], slopes, summary["n_max"]))
    console.print(f"[bold]dp-apvi-tabular[/]: {len(rows)} runs in {elapsed:.1f} s → {report}")
    return report
