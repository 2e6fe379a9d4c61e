"""Figure 4's jobs: the configuration, one job per algorithm × ε (× seed), their merge."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from privrl.online.common import checkpoints, make_env
from privrl.online.privatizers import IdentityPrivatizer
from privrl.online.sdp_pe import make_shuffle_privatizer, sdp_pe
from privrl.online.ucbvi import ucbvi

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
    long_episodes: int = 31_457_160  # 3·B·(2^18 − 1): 18 complete stages
    long_seeds: int = 5
    long_epsilon: float = 10.0
    points: int = 1000
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
            long_episodes=4000,
            long_seeds=1,
            points=100,
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


def _curve(cum: np.ndarray, grid: np.ndarray) -> np.ndarray:
    return cum[..., grid - 1]


def _run_job(job: Job, cfg_dict: dict[str, Any]) -> dict[str, Any]:
    """One job (top level: runs in a worker process). Returns curves on the checkpoint grid."""
    cfg = Fig4Config(**cfg_dict)
    mdp = make_env("riverswim", states=cfg.states, horizon=cfg.horizon)
    grid = checkpoints(job.episodes, cfg.points)
    t0 = time.perf_counter()
    curves, finals, logs, reports = [], [], [], []
    if job.kind == "ucbvi":
        results = ucbvi(
            mdp, job.episodes, seeds=list(job.seeds), privatizer=job.privatizer, epsilon=job.epsilon
        )
        for res in results:
            cum = res.cumulative_regret
            curves.append(_curve(cum, grid))
            finals.append(float(cum[-1]))
        reports.append(results[0].report.to_dict())
    else:
        for seed in job.seeds:
            env_ss, noise_ss = np.random.SeedSequence(seed).spawn(2)
            if job.kind == "sdp-pe":
                priv = make_shuffle_privatizer(
                    mdp,
                    job.episodes,
                    epsilon=job.epsilon,
                    delta=cfg.delta,  # type: ignore[arg-type]
                    rng=np.random.default_rng(noise_ss),
                    calibration=job.calibration,  # type: ignore[arg-type]
                )
            else:
                priv = IdentityPrivatizer()
            res = sdp_pe(
                mdp, job.episodes, priv, rng=np.random.default_rng(env_ss), system=job.kind
            )
            cum = res.cumulative_regret
            curves.append(_curve(cum, grid))
            finals.append(float(cum[-1]))
            logs.append(res.log)
            if not reports:
                reports.append(res.report.to_dict())
    return {
        "job": asdict(job),
        "grid": grid,
        "curves": np.array(curves),
        "finals": finals,
        "logs": logs,
        "report": reports[0],
        "seconds": time.perf_counter() - t0,
    }


def _jobs(cfg: Fig4Config) -> list[Job]:
    seeds = tuple(cfg.base_seed + i for i in range(cfg.seeds))
    K = cfg.episodes
    jobs = []
    for eps in cfg.epsilons:  # the expensive per-episode loops first
        jobs.append(Job("UCBVI-JDP", eps, K, seeds, "ucbvi", privatizer="central"))
        jobs.append(Job("UCBVI-LDP", eps, K, seeds, "ucbvi", privatizer="local"))
    jobs.append(Job("UCB-VI", None, K, seeds, "ucbvi"))
    per_seed = [(s,) for s in seeds]
    for s in per_seed:
        jobs.append(Job("PE", None, K, s, "pe"))
        for eps in cfg.epsilons:
            jobs.append(Job("SDP-PE", eps, K, s, "sdp-pe"))
            if cfg.theory_calibration:
                jobs.append(
                    Job("SDP-PE (theory calibration)", eps, K, s, "sdp-pe", calibration="theory")
                )
    if cfg.long_seeds > 0 and cfg.long_episodes > 0:
        long_seeds = [(cfg.base_seed + i,) for i in range(cfg.long_seeds)]
        for s in long_seeds:
            jobs.append(Job("PE", None, cfg.long_episodes, s, "pe", group="long"))
            jobs.append(
                Job("SDP-PE", cfg.long_epsilon, cfg.long_episodes, s, "sdp-pe", group="long")
            )
            jobs.append(
                Job(
                    "SDP-PE (theory calibration)",
                    cfg.long_epsilon,
                    cfg.long_episodes,
                    s,
                    "sdp-pe",
                    calibration="theory",
                    group="long",
                )
            )
    return jobs


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
    for m in merged.values():
        order = np.argsort(m["seeds"])
        m["curves"] = np.array(m["curves"])[order]
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
