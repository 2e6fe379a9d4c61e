"""Figure 4's jobs: the configuration, one job per algorithm × ε (× seed), their merge."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privrl.online import (
    DPUCBVI,
    UCBVI,
    DPUCBVIConfig,
    Fitted,
    UCBVIConfig,
    checkpoints,
    make_env,
)
from privrl.privacy import NoiseSource

COLORS = {
    "SDP-PE": "tab:red",
    "SDP-PE (theory calibration)": "tab:pink",
    "PE": "tab:orange",
    "UCB-VI": "tab:blue",
    "UCBVI-JDP": "tab:green",
    "UCBVI-LDP": "tab:purple",
}


@dataclass
class Fig4Config:
    """Scale of the reproduction (defaults: the full one)."""

    states: int = 4
    horizon: int = 5
    episodes: int = 1_000_000
    seeds: int = 20
    epsilons: list[float] = field(default_factory=lambda: [1.0, 10.0])
    delta: float = 1e-5
    theory_calibration: bool = True
    long_episodes: int = 125_829_000  # 3·B·(2^20 − 1): 20 complete stages
    long_seeds: int = 3
    long_epsilons: list[float] = field(default_factory=lambda: [1.0, 10.0])
    # one more stage where SDP-PE is still in burn-in at long_episodes (ε = 1)
    longer_episodes: int = 251_658_120  # 3·B·(2^21 − 1): 21 complete stages
    longer_seeds: int = 2
    longer_epsilons: list[float] = field(default_factory=lambda: [1.0])
    # sensitivity of the verdict to the rebuilt constants: each ×factor, one at a time
    sens_episodes: int = 31_457_160  # 3·B·(2^18 − 1): 18 complete stages
    sens_seeds: int = 1
    sens_constants: list[str] = field(
        default_factory=lambda: ["threshold_c1", "threshold_c2", "width_scale"]
    )
    sens_factors: list[float] = field(default_factory=lambda: [0.25, 4.0])
    # UCBVI-JDP measured at the scale where the stages act (its per-episode loop: ~1 CPU-hour
    # per ε for 3 seeds vectorised), beside SDP-PE's long group at the same K
    jdp_long_episodes: int = 31_457_160  # 3·B·(2^18 − 1), a point of SDP-PE's long curves
    jdp_long_seeds: int = 3
    jdp_long_epsilons: list[float] = field(default_factory=lambda: [1.0, 10.0])
    points: int = 1000  # curve points: the online systems' grid (`checkpoints(K)`)
    base_seed: int = 0
    workers: int = 1

    @classmethod
    def quick(cls, seed: int = 0) -> Fig4Config:
        """Smoke-test scale (< 30 s): RiverSwim S = 3, H = 4 (2^9 policies), 2,000 episodes."""
        return cls(
            states=3,
            horizon=4,
            episodes=2000,
            seeds=2,
            long_episodes=4536,  # 3·24·(2^6 − 1)
            long_seeds=1,
            longer_episodes=9144,  # 3·24·(2^7 − 1)
            longer_seeds=1,
            sens_episodes=2160,  # 3·24·(2^5 − 1)
            sens_constants=["width_scale"],
            jdp_long_episodes=4536,
            jdp_long_seeds=1,
            base_seed=seed,
        )


@dataclass(frozen=True)
class Job:
    algorithm: str  # legend name
    epsilon: float | None
    episodes: int
    seeds: tuple[int, ...]
    kind: str  # "pe", "sdp-pe", "ucbvi"
    calibration: str = "tight"
    privatizer: str = "none"
    group: str = "main"


def _run_job(job: Job, cfg_dict: dict[str, Any]) -> dict[str, Any]:
    """One UCB-VI-type job over all its seeds at once (top level: runs in a worker process).
    Returns the curves on the checkpoint grid, as `privrl online ucbvi|dp-ucbvi` records them."""
    cfg = Fig4Config(**cfg_dict)
    mdp = make_env("riverswim", states=cfg.states, horizon=cfg.horizon)
    grid = checkpoints(job.episodes, cfg.points)
    t0 = time.perf_counter()
    learner = ucbvi_learner(job.privatizer, job.epsilon, job.episodes)
    # a simulation on a public MDP: noise repeatable from the seeds
    runs = learner.learn_seeds(mdp, job.seeds, noise=NoiseSource.insecure(list(job.seeds)))
    return {
        "job": asdict(job),
        "grid": grid,
        "curves": np.array([_cumulative(r)[grid - 1] for r in runs]),
        "finals": [r.metrics["regret"] for r in runs],
        "logs": [],
        "report": runs[0].report.to_dict(),
        "seconds": time.perf_counter() - t0,
    }


def ucbvi_learner(
    privatizer: str, epsilon: float | None, episodes: int, bonus_scale: float = 1.0
) -> UCBVI:
    """The learner of a UCB-VI-type job: UCB-VI (``privatizer`` "none"), or DP-UCBVI with the
    central (UCBVI-JDP) or local (UCBVI-LDP) privatizer at ``epsilon``; C = ``bonus_scale``,
    β at its default."""
    if privatizer == "none":
        return UCBVI(UCBVIConfig(bonus_scale=bonus_scale, episodes=episodes))
    assert epsilon is not None, f"the {privatizer} privatizer needs ε"
    config = DPUCBVIConfig(
        bonus_scale=bonus_scale, epsilon=epsilon, privatizer=privatizer, episodes=episodes
    )
    return DPUCBVI(config)


def _cumulative(run: Fitted[Any]) -> np.ndarray:
    """A run's cumulative regret after every episode (its curve keeps only the grid's)."""
    return run.details.cumulative_regret


def _jobs(cfg: Fig4Config) -> list[Job]:
    """The UCB-VI family: one job per (algorithm, ε), vectorised over all seeds (see the
    package docstring: 8× faster than one run per seed, with the same numbers)."""
    seeds = tuple(cfg.base_seed + i for i in range(cfg.seeds))
    K = cfg.episodes
    jobs = []
    for eps in cfg.epsilons:  # the expensive per-episode loops first
        jobs.append(Job("UCBVI-JDP", eps, K, seeds, "ucbvi", privatizer="central"))
        jobs.append(Job("UCBVI-LDP", eps, K, seeds, "ucbvi", privatizer="local"))
    jobs.append(Job("UCB-VI", None, K, seeds, "ucbvi"))
    return jobs


def jdp_long_unit(
    *,
    epsilon: float,
    episodes: int,
    seeds: list[int],
    states: int,
    horizon: int,
    points: int,
    bonus_scale: float = 1.0,
    checkpoint: str | None = None,
) -> dict[str, Any]:
    """UCBVI-JDP (DP-UCBVI, central binary-tree counts) for ``episodes`` episodes on RiverSwim,
    vectorised over ``seeds`` (a function cell, `privrl.runs.units`): the regret curves on the
    checkpoint grid, the finals, the privacy report and, per seed, the first episode whose
    regret differs from episode 1's (the all-left plan every uninformed run starts with), i.e.
    where its burn-in ended (None: never within ``episodes``). ``checkpoint``: the directory
    the loop saves its state in, so that a unit cut off continues (`online.resume`)."""
    mdp = make_env("riverswim", states=states, horizon=horizon)
    grid = checkpoints(episodes, points)
    t0 = time.perf_counter()
    learner = ucbvi_learner("central", epsilon, episodes, bonus_scale)
    runs = learner.learn_seeds(
        mdp,
        seeds,
        checkpoint=checkpoint,
        noise=NoiseSource.insecure(list(seeds)),  # a simulation: repeatable, resumable
    )
    job = Job("UCBVI-JDP", epsilon, episodes, tuple(seeds), "ucbvi", "tight", "central", "jdp-long")
    burn_in_end = []
    for run in runs:
        regret = run.details.regret
        moved = np.flatnonzero(np.abs(regret - regret[0]) > 1e-9)
        burn_in_end.append(int(moved[0]) + 1 if moved.size else None)
    return {
        "job": asdict(job),
        "grid": grid.tolist(),
        "curves": [_cumulative(r)[grid - 1].tolist() for r in runs],
        "finals": [r.metrics["regret"] for r in runs],
        "logs": [],
        "burn_in_measured": burn_in_end,
        "report": runs[0].report.to_dict(),
        "seconds": time.perf_counter() - t0,
    }


def jdp_long_units(cfg: Fig4Config, root: Path) -> list[Any]:
    """The ``jdp-long`` group's function cells, one per ε of ``jdp_long_epsilons`` (all seeds
    in one vectorised run), cached under ``root/jdp-long/``; each saves its loop's state
    beside its result (``<name>.resume/``) every 5 minutes while it runs."""
    from privrl.runs.units import Unit

    seeds = [cfg.base_seed + i for i in range(cfg.jdp_long_seeds)]
    if cfg.jdp_long_seeds < 1 or cfg.jdp_long_episodes < 1:
        return []
    units = []
    for eps in cfg.jdp_long_epsilons:
        name = (
            f"ucbvi-jdp-S{cfg.states}-H{cfg.horizon}-eps{eps:g}-K{cfg.jdp_long_episodes}"
            f"-seeds{seeds[0]}-{seeds[-1]}"
        )
        kwargs = {
            "epsilon": float(eps),
            "episodes": int(cfg.jdp_long_episodes),
            "seeds": seeds,
            "states": cfg.states,
            "horizon": cfg.horizon,
            "points": cfg.points,
            "checkpoint": str(Path(root) / "jdp-long" / f"{name}.resume"),
        }
        target = "reproductions.sdp_pe.jobs:jdp_long_unit"
        units.append(Unit(Path(root) / "jdp-long" / f"{name}.json", target, kwargs))
    return units


def jdp_long_output(result: dict[str, Any]) -> dict[str, Any]:
    """A ``jdp-long`` unit's stored result in the form of a job's output (numpy curves)."""
    return {**result, "grid": np.asarray(result["grid"]), "curves": np.asarray(result["curves"])}


GROUPS = ("main", "long", "longer", "sens")
JDP_LONG = "jdp-long"  # the group of `jdp_long_units`: function cells, not sweep cells
LDP_DERIVED = "UCBVI-LDP (derived)"  # computed from public quantities, never read back


def sens_group(constant: str, factor: float) -> str:
    """The group of one sensitivity variant: the constant and its factor (1 = defaults)."""
    return f"sens|{constant}|{factor:g}"


def _pe_cells(
    cfg: Fig4Config, groups: tuple[str, ...] = GROUPS
) -> list[tuple[str, dict[str, Any]]]:
    """The PE and SDP-PE runs, one per seed: (group, `[[cells]]` entry of the sweep), each
    exactly `privrl online pe|sdp-pe ... --seed s`. Groups: ``main`` (K = ``episodes``, every
    algorithm), ``long`` (SDP-PE at K = ``long_episodes``, each ε of ``long_epsilons``),
    ``longer`` (SDP-PE at K = ``longer_episodes``, each ε of ``longer_epsilons``) and
    ``sens`` (SDP-PE at K = ``sens_episodes`` with one rebuilt constant scaled at a time)."""

    def pe(K: int, s: int) -> dict[str, Any]:
        return {"system": "pe", "episodes": K, "seed": s}

    def sdp(K: int, s: int, eps: float, calibration: str, **consts: float) -> dict[str, Any]:
        return {
            "system": "sdp-pe",
            "episodes": K,
            "seed": s,
            "epsilon": eps,
            "delta": cfg.delta,
            "calibration": calibration,
            **consts,
        }

    calibrations = ("tight", "theory") if cfg.theory_calibration else ("tight",)
    cells: list[tuple[str, dict[str, Any]]] = []
    # the most expensive first, so that parallel workers finish together
    if "long" in groups and cfg.long_seeds > 0 and cfg.long_episodes > 0:
        for i in range(cfg.long_seeds):
            s = cfg.base_seed + i
            cells += [
                ("long", sdp(cfg.long_episodes, s, eps, "tight")) for eps in cfg.long_epsilons
            ]
    if "longer" in groups and cfg.longer_seeds > 0 and cfg.longer_episodes > 0:
        for i in range(cfg.longer_seeds):
            s = cfg.base_seed + i
            cells += [
                ("longer", sdp(cfg.longer_episodes, s, eps, "tight")) for eps in cfg.longer_epsilons
            ]
    if "sens" in groups and cfg.sens_seeds > 0 and cfg.sens_episodes > 0:
        for i in range(cfg.sens_seeds):
            s = cfg.base_seed + i
            for eps in cfg.long_epsilons:
                cells.append((sens_group("default", 1.0), sdp(cfg.sens_episodes, s, eps, "tight")))
                for const in cfg.sens_constants:
                    for f in cfg.sens_factors:
                        cells.append(
                            (
                                sens_group(const, f),
                                sdp(cfg.sens_episodes, s, eps, "tight", **{const: float(f)}),
                            )
                        )
    if "main" in groups:
        for i in range(cfg.seeds):
            s = cfg.base_seed + i
            cells.append(("main", pe(cfg.episodes, s)))
            cells += [
                ("main", sdp(cfg.episodes, s, eps, c)) for eps in cfg.epsilons for c in calibrations
            ]
    return cells


def sweep_doc(
    cfg: Fig4Config, out: Path, *, backend: str = "local", groups: tuple[str, ...] = GROUPS
) -> dict[str, Any]:
    """The sweep of the PE and SDP-PE runs on RiverSwim (S, H of `cfg`); cells under `out`."""
    return {
        "out": str(out),
        "env": "riverswim",
        "states": cfg.states,
        "horizon": cfg.horizon,
        "cells": [entry for _, entry in _pe_cells(cfg, groups)],
        "sweep": {"backend": backend, "workers": cfg.workers, "metrics": ["regret"]},
    }


def _cell_output(values: dict[str, Any], group: str, run_dir: Path) -> dict[str, Any]:
    """A finished PE/SDP-PE cell in the form of a job's output (one seed): its regret curve
    (metrics.csv), final regret and stage log (metrics.json) and report (privacy.json)."""
    import csv

    metrics = json.loads((run_dir / "metrics.json").read_text())
    with open(run_dir / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    calibration = values.get("calibration", "tight")
    algorithm = "PE" if values["system"] == "pe" else "SDP-PE"
    if calibration == "theory":
        algorithm += " (theory calibration)"
    job = Job(
        algorithm,
        values.get("epsilon"),
        int(values["episodes"]),
        (int(values["seed"]),),
        values["system"],
        calibration=calibration,
        group=group,
    )
    return {
        "job": asdict(job),
        "grid": np.array([int(r["episode"]) for r in rows]),
        "curves": np.array([[float(r["regret"]) for r in rows]]),
        "finals": [float(metrics["regret"])],
        "logs": [metrics["stages"]],
        "report": json.loads((run_dir / "privacy.json").read_text()),
        "seconds": float(metrics["wall_time_s"]),
    }


def _merge(outputs: list[dict[str, Any]]) -> dict[tuple[str, str, float | None], dict[str, Any]]:
    """Per (group, algorithm, ε): stacked curves and finals over seeds (per-seed jobs merged)."""
    merged: dict[tuple[str, str, float | None], dict[str, Any]] = {}
    for o in outputs:
        j = o["job"]
        key = (j["group"], j["algorithm"], j["epsilon"])
        m = merged.setdefault(
            key,
            {
                "grid": o["grid"],
                "curves": [],
                "finals": [],
                "logs": [],
                "seeds": [],
                "report": o["report"],
                "seconds": 0.0,
            },
        )
        m["curves"].extend(list(o["curves"]))
        m["finals"].extend(o["finals"])
        m["logs"].extend(o["logs"])
        m["seeds"].extend(j["seeds"])
        m["seconds"] += o["seconds"]
        if "burn_in_measured" in o:  # jdp-long: per seed, the episode its plan left all-left
            m.setdefault("burn_in_measured", []).extend(o["burn_in_measured"])
    for m in merged.values():
        order = np.argsort(m["seeds"])
        m["curves"] = np.array(m["curves"])[order]
        m["mean"] = m["curves"].mean(axis=0)
        m["std"] = m["curves"].std(axis=0, ddof=1) if m["curves"].shape[0] > 1 else 0.0 * m["mean"]
        m["finals"] = np.array(m["finals"])[order]
        m["seeds"] = [m["seeds"][i] for i in order]
        if m["logs"]:
            m["logs"] = [m["logs"][i] for i in order]
    return merged


def _execute(jobs: list[Job], cfg: Fig4Config, log: Callable[[str], None]) -> list[dict[str, Any]]:
    cfg_dict = asdict(cfg)
    outputs: list[dict[str, Any]] = []
    if cfg.workers <= 1:
        for i, job in enumerate(jobs, 1):
            outputs.append(_run_job(job, cfg_dict))
            log(
                f"[{i}/{len(jobs)}] {job.algorithm} ε={job.epsilon} seeds={job.seeds[:3]}… "
                f"{outputs[-1]['seconds']:.1f}s"
            )
        return outputs
    with ProcessPoolExecutor(max_workers=cfg.workers) as pool:
        futures = [pool.submit(_run_job, job, cfg_dict) for job in jobs]
        for i, fut in enumerate(futures, 1):
            outputs.append(fut.result())
            job = jobs[i - 1]
            log(f"[{i}/{len(jobs)}] {job.algorithm} ε={job.epsilon} {outputs[-1]['seconds']:.1f}s")
    return outputs


def load_group(run_dir: Path, group: str = "main") -> dict[tuple[str, str, float | None], Any]:
    """A finished group of a written reproduction, read back from its run directory (curves'
    mean and std from metrics.csv; per-seed finals, seeds, seconds and first elimination stages
    from metrics.json; privacy reports from privacy_reports.json; stage logs of the first seeds
    from stage_logs.json), in the form `_merge` returns, so that a reproduction can be
    rewritten with new groups without rerunning this one. ``group`` "sens" reads every
    sensitivity variant (`sens_group`); derived curves (`LDP_DERIVED`) are not read: the
    report recomputes them."""
    import csv

    run_dir = Path(run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    reports = json.loads((run_dir / "privacy_reports.json").read_text())
    logs = json.loads((run_dir / "stage_logs.json").read_text())
    curves: dict[tuple[str, str, str], list[tuple[int, float, float]]] = {}
    with open(run_dir / "metrics.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            mine = r["group"] == group or (group == "sens" and r["group"].startswith("sens|"))
            if mine and r["algorithm"] != LDP_DERIVED:
                curves.setdefault((r["group"], r["algorithm"], r["epsilon"]), []).append(
                    (int(r["episode"]), float(r["regret_mean"]), float(r["regret_std"]))
                )
    out: dict[tuple[str, str, float | None], Any] = {}
    for (name, algo, eps_text), pts in curves.items():
        pts.sort()
        eps = None if eps_text == "" else float(eps_text)
        key = f"{name}|{algo}|{'-' if eps is None else f'{eps:g}'}"
        f = metrics["final_regret"][key]
        arr = np.array(pts)
        out[(name, algo, eps)] = {
            "grid": arr[:, 0].astype(np.int64),
            "mean": arr[:, 1],
            "std": arr[:, 2],
            "curves": None,
            "finals": np.array(f["per_seed"]),
            "seeds": list(f["seeds"]),
            "seconds": float(f["cpu_seconds"]),
            "logs": logs.get(key, []),
            "first_elimination": f.get("first_elimination_stage"),
            "report": reports[f"{algo} ε={'-' if eps is None else f'{eps:g}'}"],
            **({"burn_in_measured": f["burn_in_measured"]} if "burn_in_measured" in f else {}),
        }
    return out
