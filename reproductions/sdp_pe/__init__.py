"""Reproduction of Figure 4 of "Secure RL via Shuffle Privacy Model" (Bai et al., arXiv
2411.11647): cumulative regret vs episodes on RiverSwim of SDP-PE, PE, UCB-VI,
DP-UCBVI central (JDP) and DP-UCBVI local (LDP), one panel per ε, mean ± std over seeds.

Setting: RiverSwim S = 4, A = 2, H = 5 (the paper's H was lost), start at state 0, Bernoulli
rewards; ε ∈ {1, 10}, δ = 1e-5 (both lost; the spec's choice); K = 10⁶ episodes; 20 seeds.
All constants at their defaults (theory shapes, constant 1): no tuning. SDP-PE is also run with
the `theory` calibration. At 10⁶ episodes every private method is still in burn-in, so a long
group runs SDP-PE (tight, ε = 1 and 10, 3 seeds) for 20 stages (1.26·10⁸ episodes), where its
stages eliminate; UCBVI-LDP's regret there is derived, not measured (its plan is provably
all-left until an episode computed from public quantities, `ldp_burn_in_end`), and labelled so.
A sensitivity group reruns SDP-PE at 3.1·10⁷ episodes with each rebuilt constant ×¼ and ×4.

Seed i of every algorithm is exactly `privrl online <algorithm> --seed <base + i>`. PE and
SDP-PE run as a sweep (`privrl.runs.sweep`) of the registered `pe` and `sdp-pe` systems, one
cell per (algorithm, ε, calibration, K, seed), kept in the cache
(``$PRIVRL_CACHE/reproduce/sdp-pe-fig4/{full,quick}/``) so that an interrupted reproduction
resumes with the cells left. UCB-VI, DP-UCBVI central and local are not cells: each runs as
one job vectorised over all seeds (`UCBVI(...).learn_seeds(env, seeds)`, the same users per
seed as `privrl online ucbvi --seed s`), because their per-episode planning loop is
dominated by Python overhead that the batch shares — measured side by side on this project's
machine (RiverSwim S = 4, H = 5, 2·10⁴ episodes, 10 seeds): 40 s as one batch against 331 s
as ten separate runs (8.3×); at 20 seeds and 10⁶ episodes that is the difference between
hours and days. The jdp-long units (UCBVI-JDP at 3.1·10⁷ episodes, hours each) save their
loop's state every 5 minutes (`privrl.online.resume`), so a unit cut off continues where it was.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from privrl.privacy import PrivacyReport
from privrl.runs.rundir import RunDir
from reproductions.claims import write_claims
from reproductions.sdp_pe.analysis import (
    LDP_DERIVED,
    _calibration_table,
    _expectations,
    _first_elimination,
    _plot,
    _stats,
    derived_ldp,
    gallery_claims,
    sensitivity,
)
from reproductions.sdp_pe.jobs import (
    GROUPS,
    JDP_LONG,
    Fig4Config,
    _cell_output,
    _execute,
    _jobs,
    _merge,
    _pe_cells,
    jdp_long_output,
    jdp_long_units,
    load_group,
    sweep_doc,
)
from reproductions.sdp_pe.report import Fig4ReportInputs, _report

__all__ = ["Fig4Config", "fig4", "refresh_fig4", "run_fig4", "sweep_dir", "write_fig4"]


def fig4(
    out: Path,
    *,
    seeds: int | None = None,
    seed: int = 0,
    quick: bool = False,
    workers: int | None = None,
    backend: str = "local",
) -> Path:
    """`privrl reproduce sdp-pe-fig4`: run, write the run directory and ``report.md``
    (``backend``: where the PE/SDP-PE sweep runs its cells, local or ray)."""
    cfg = Fig4Config.quick(seed) if quick else Fig4Config(base_seed=seed)
    if seeds is not None:
        cfg.seeds = int(seeds)
    if workers is None:
        workers = int(os.environ.get("PRIVRL_WORKERS", "1"))
    cfg.workers = max(1, int(workers))
    return run_fig4(cfg, Path(out), quick=quick, backend=backend)


def run_fig4(
    cfg: Fig4Config,
    out: Path,
    *,
    quick: bool = False,
    log: Callable[[str], None] = print,
    backend: str = "local",
    reuse: tuple[str, ...] = (),
) -> Path:
    """Run (or resume) every run of ``cfg`` and write the reproduction to ``out``; returns
    report.md. PE and SDP-PE run as a sweep (finished cells are skipped), the UCB-VI family as
    one vectorised job per (algorithm, ε). ``reuse``: groups of `GROUPS` (and `JDP_LONG`)
    read back from ``out``'s previous run (`load_group`) instead of run; a jdp-long unit whose
    ε is not in the previous run runs (or is read from the cache)."""
    from privrl.runs.units import run_units

    t0 = time.perf_counter()
    cells = sweep_dir(quick)
    unknown = sorted(set(reuse) - {*GROUPS, JDP_LONG})
    if unknown:
        raise ValueError(f"reuse: unknown group(s) {unknown}; groups are {(*GROUPS, JDP_LONG)}")
    groups = tuple(g for g in GROUPS if g not in reuse)
    reused = {k: v for g in reuse for k, v in load_group(Path(out), g).items()}
    sweep_cells = _run_pe_sweep(cfg, cells, groups, backend, log) if groups else []
    cell_groups = [group for group, _ in _pe_cells(cfg, groups)]
    outputs = [] if "main" in reuse else _execute(_jobs(cfg), cfg, log)
    jdp = [
        u
        for u in jdp_long_units(cfg, cells)
        if (JDP_LONG, "UCBVI-JDP", u.kwargs["epsilon"]) not in reused
    ]
    log(f"UCBVI-JDP at K = {cfg.jdp_long_episodes:,}: {len(jdp)} vectorised run(s) (cached)")
    outputs += [jdp_long_output(r) for r in run_units(jdp, backend=backend, workers=cfg.workers)]
    outputs += [
        _cell_output(cell.values, group, cell.run_dir)
        for cell, group in zip(sweep_cells, cell_groups, strict=True)
    ]
    Path(out).mkdir(parents=True, exist_ok=True)
    if sweep_cells and (cells / "results.csv").exists():  # else keep the previous run's table
        shutil.copyfile(cells / "results.csv", Path(out) / "results.csv")
    return write_fig4(cfg, outputs, out, wall=time.perf_counter() - t0, quick=quick, reused=reused)


def _run_pe_sweep(
    cfg: Fig4Config, cells: Path, groups: tuple[str, ...], backend: str, log: Callable[[str], None]
) -> list[Any]:
    """Run (or resume) the PE/SDP-PE cells of ``groups``; their cells, in `_pe_cells` order."""
    from privrl.runs.sweep import expand, run_sweep

    sweep = expand(sweep_doc(cfg, cells, backend=backend, groups=groups))
    outcome = run_sweep(
        sweep,
        on_start=lambda total, todo: log(f"PE/SDP-PE sweep: {todo} of {total} runs to do"),
        on_cell=lambda r: log(f"[sweep] {r['name']} {r['status']} {r.get('seconds') or 0:.1f}s"),
    )
    if outcome.failed:
        cell, error = outcome.failed[0]
        raise RuntimeError(
            f"{len(outcome.failed)} run(s) failed, e.g. {cell.label()}: {error} "
            f"(logs in {cell.dir}/log.txt); rerun to retry them"
        )
    return list(sweep.cells)


def refresh_fig4(
    out: Path, *, quick: bool = False, workers: int = 1, reuse: tuple[str, ...] = ("main",)
) -> Path:
    """Rewrite a written reproduction with the groups in ``reuse`` read back (nothing of them
    rerun) and the others and the jdp-long units run (or resumed from the cache). With
    ``reuse=(*GROUPS, JDP_LONG)`` only the jdp-long units the report lacks are computed: the
    way to add them to a report whose other groups' cells are no longer in the cache."""
    cfg = Fig4Config.quick() if quick else Fig4Config()
    cfg.workers = max(1, int(workers))
    return run_fig4(cfg, Path(out), quick=quick, reuse=tuple(reuse))


def sweep_dir(quick: bool) -> Path:
    """Where the PE/SDP-PE cells live (the cache: a run directory each)."""
    from privrl.data import cache_dir

    return cache_dir() / "reproduce" / "sdp-pe-fig4" / ("quick" if quick else "full")


def write_fig4(
    cfg: Fig4Config,
    outputs: list[dict[str, Any]],
    out: Path,
    *,
    wall: float,
    quick: bool,
    reused: dict | None = None,
) -> Path:
    """Write the run directory and report.md from the jobs' outputs (see `_run_job`) and the
    groups read back from a previous run (``reused``, see `load_group`)."""
    merged = {**(reused or {}), **_merge(outputs)}
    for group, K, epsilons in (
        ("long", cfg.long_episodes, cfg.long_epsilons),
        ("longer", cfg.longer_episodes, cfg.longer_epsilons),
    ):
        if any(k[0] == group for k in merged):
            for eps in epsilons:
                merged[(group, LDP_DERIVED, eps)] = derived_ldp(cfg, K, eps)
    run = RunDir(out)
    _plot(merged, cfg, run.plot_path("fig4"))
    if any(k[0] == "long" for k in merged):
        _plot(merged, cfg, run.plot_path("fig4_long"), group="long")
    expectations = _expectations(merged, cfg)
    sens = sensitivity(merged, cfg)
    calib = _calibration_table(cfg)

    def first_elim(m: dict[str, Any]) -> dict[str, Any]:
        if m.get("first_elimination") is not None:
            return {"first_elimination_stage": m["first_elimination"]}
        return {"first_elimination_stage": _first_elimination(m["logs"])} if m["logs"] else {}

    finals = {
        f"{g}|{a}|{'-' if e is None else f'{e:g}'}": {
            "mean": _stats(m["finals"])[0],
            "std": _stats(m["finals"])[1],
            "per_seed": m["finals"].tolist(),
            "seeds": m["seeds"],
            "cpu_seconds": m["seconds"],
            "episodes": int(m["grid"][-1]),
            **({"derived": True, "burn_in_end": m["burn_in_end"]} if m.get("derived") else {}),
            **({"burn_in_measured": m["burn_in_measured"]} if "burn_in_measured" in m else {}),
            **first_elim(m),
        }
        for (g, a, e), m in merged.items()
    }
    main_sdp = merged[("main", "SDP-PE", cfg.epsilons[0])]
    run.write_config({**asdict(cfg), "quick": quick, "jobs": len(outputs)})
    run.write_metrics(
        {
            "regret": finals[f"main|SDP-PE|{cfg.epsilons[0]:g}"]["mean"],
            "final_regret": finals,
            "expectations": expectations,
            "sensitivity": sens,
            "calibration": calib,
            "wall_time_s": wall,
        }
    )
    rows = []
    for (g, a, e), m in sorted(merged.items(), key=lambda kv: str(kv[0])):
        for k, mu, sd in zip(m["grid"], m["mean"], m["std"], strict=True):
            rows.append(
                {
                    "group": g,
                    "algorithm": a,
                    "epsilon": "" if e is None else e,
                    "episode": int(k),
                    "regret_mean": float(mu),
                    "regret_std": float(sd),
                }
            )
    run.write_curve(rows)
    run.write_privacy(PrivacyReport.from_dict(main_sdp["report"]))
    (run.path / "privacy_reports.json").write_text(
        json.dumps(
            {
                f"{a} ε={'-' if e is None else f'{e:g}'}": m["report"]
                for (g, a, e), m in merged.items()
                if g == "main"
            },
            indent=2,
            ensure_ascii=False,
        )
        + "\n"
    )
    (run.path / "stage_logs.json").write_text(
        json.dumps(
            {
                f"{g}|{a}|{'-' if e is None else f'{e:g}'}": m["logs"][:3]
                for (g, a, e), m in merged.items()
                if m["logs"]
            },
            indent=1,
            default=float,
        )
        + "\n"
    )
    report = run.path / "report.md"
    report.write_text(
        _report(
            Fig4ReportInputs(
                cfg,
                merged,
                finals,
                expectations,
                calib,
                wall,
                quick=quick,
                sens=sens,
                reused=bool(reused),
            )
        )
    )
    write_claims(run.path, gallery_claims(expectations))
    return report
