"""Reproduction of Figure 4 of "Secure RL via Shuffle Privacy Model" (Bai et al., arXiv
2411.11647; spec sdp_pe.md): cumulative regret vs episodes on RiverSwim of SDP-PE, PE, UCB-VI,
DP-UCBVI central (JDP) and DP-UCBVI local (LDP), one panel per ε, mean ± std over seeds.

Setting: RiverSwim S = 4, A = 2, H = 5 (the paper's H was lost), start at state 0, Bernoulli
rewards; ε ∈ {1, 10}, δ = 1e-5 (both lost; the spec's choice); K = 10⁶ episodes; 20 seeds.
All constants at their defaults (theory shapes, constant 1): no tuning. SDP-PE is also run with
the `theory` calibration, and a supplement runs PE and SDP-PE (ε = 10, tight vs theory) for
18 stages (3.1·10⁷ episodes, 5 seeds), long enough for SDP-PE's stages to eliminate.

Seed i of every algorithm is exactly `privrl online <algorithm> --seed <base + i>`.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privrl.experiments.claims import Claim, holds, write_claims
from privrl.experiments.rundir import RunDir
from privrl.online.common import checkpoints, make_env
from privrl.online.privatizers import IdentityPrivatizer
from privrl.online.sdp_pe import make_shuffle_privatizer, sdp_pe, stage_schedule
from privrl.online.ucbvi import ucbvi
from privrl.privacy.report import PrivacyReport
from privrl.privacy.shuffle import binary_sum_error_bound, calibrate_binary_sum

__all__ = ["Fig4Config", "fig4", "run_fig4", "write_fig4"]

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


# --------------------------------------------------------------------------------------------
# analysis
# --------------------------------------------------------------------------------------------


def _stats(x: np.ndarray) -> tuple[float, float]:
    x = np.asarray(x, dtype=float)
    return float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else 0.0


def _expectations(merged: dict, cfg: Fig4Config) -> list[dict[str, Any]]:
    """The paper's four claims, checked per ε with the criteria written in the report."""
    out = []
    ucb = _stats(merged[("main", "UCB-VI", None)]["finals"])[0]
    pe = _stats(merged[("main", "PE", None)]["finals"])[0]
    for eps in cfg.epsilons:
        sdp = _stats(merged[("main", "SDP-PE", eps)]["finals"])[0]
        jdp = _stats(merged[("main", "UCBVI-JDP", eps)]["finals"])[0]
        ldp = _stats(merged[("main", "UCBVI-LDP", eps)]["finals"])[0]
        others = [pe, sdp, jdp, ldp]
        out += [
            {
                "epsilon": eps,
                "claim": "UCB-VI has the lowest regret",
                "criterion": "UCB-VI < every other algorithm",
                "numbers": f"UCB-VI {ucb:.4g}; others ≥ {min(others):.4g}",
                "holds": bool(ucb < min(others)),
            },
            {
                "epsilon": eps,
                "claim": "PE is comparable to UCB-VI",
                "criterion": "PE ≤ 2 × UCB-VI",
                "numbers": f"PE / UCB-VI = {pe / ucb:.3g}",
                "holds": bool(pe <= 2 * ucb),
            },
            {
                "epsilon": eps,
                "claim": "SDP-PE is far below UCBVI-LDP",
                "criterion": "SDP-PE ≤ ½ × UCBVI-LDP",
                "numbers": f"SDP-PE / LDP = {sdp / ldp:.3g}",
                "holds": bool(sdp <= 0.5 * ldp),
            },
            {
                "epsilon": eps,
                "claim": "SDP-PE is slightly above UCBVI-JDP",
                "criterion": "JDP < SDP-PE ≤ 1.5 × JDP",
                "numbers": f"SDP-PE / JDP = {sdp / jdp:.3g}",
                "holds": bool(jdp < sdp <= 1.5 * jdp),
            },
        ]
    # A claim between two algorithms that both still pay (almost) the all-left regret per
    # episode compares burn-in behaviour, not learning: say so next to the verdict.
    gap = _all_left_gap(cfg)
    burning = {(a, e): _slope(m) >= 0.8 * gap for (g, a, e), m in merged.items() if g == "main"}
    involved = {
        "PE is comparable to UCB-VI": [("PE", None), ("UCB-VI", None)],
        "SDP-PE is far below UCBVI-LDP": [("SDP-PE", 0), ("UCBVI-LDP", 0)],
        "SDP-PE is slightly above UCBVI-JDP": [("SDP-PE", 0), ("UCBVI-JDP", 0)],
        "UCB-VI has the lowest regret": [("UCB-VI", None)],
    }
    for ex in out:
        keys = [(a, ex["epsilon"] if e == 0 else e) for a, e in involved[ex["claim"]]]
        ex["burn_in"] = all(burning.get(k, False) for k in keys)
    return out


def gallery_claims(expectations: list[dict[str, Any]]) -> list[Claim]:
    """The gallery rows: the report's 'paper's expectations' table, one row per (claim, ε).
    A verdict between two algorithms that are both still in burn-in is not evidence either
    way (the report says so beside it): the gallery calls it inconclusive."""
    out = []
    for ex in expectations:
        burn = "; both still in burn-in: not evidence" if ex.get("burn_in") else ""
        out.append(
            Claim(
                f"{ex['claim']} (ε = {ex['epsilon']:g})",
                "figure only (numbers lost in extraction)",
                f"{ex['numbers']} (criterion: {ex['criterion']}){burn}",
                "inconclusive" if ex.get("burn_in") else holds(ex["holds"]),
                "plots/fig4.png",
            )
        )
    return out


def _calibration_table(cfg: Fig4Config) -> list[dict[str, Any]]:
    """Per-counter noise of the shuffle privatizer at the run's batch sizes: tight vs theory."""
    H, S, A = cfg.horizon, cfg.states, 2
    B = H * S * A
    sched = stage_schedule(max(cfg.episodes, cfg.long_episodes), B)
    rows = []
    n_rel = len(sched) * (H + 1)
    beta_counter = 0.1 / n_rel / (H * S * A * (S + 2))
    for eps in sorted({*cfg.epsilons, cfg.long_epsilon}):
        e_c, d_c = eps / (6 * H), cfg.delta / (6 * H)
        for k in sorted({1, len(sched) // 2, len(sched)}):
            n = 2 * sched[k - 1]  # the fine batch of stage k
            t = calibrate_binary_sum(e_c, d_c, n, "tight")
            th = calibrate_binary_sum(e_c, d_c, n, "theory")
            rows.append(
                {
                    "epsilon": eps,
                    "stage": k,
                    "batch": n,
                    "tight_trials": t.trials,
                    "tight_p": t.p,
                    "tight_variance": t.variance,
                    "theory_trials": th.trials,
                    "theory_p": th.p,
                    "theory_variance": th.variance,
                    "variance_ratio": th.variance / t.variance,
                    "E_tight": 4 * binary_sum_error_bound(t, beta_counter),
                    "E_theory": 4 * binary_sum_error_bound(th, beta_counter),
                    "delta_exact_tight": t.delta_exact,
                    "delta_exact_theory": th.delta_exact,
                }
            )
    return rows


def _first_elimination(logs: list[list[dict[str, Any]]]) -> list[int | None]:
    out = []
    for log in logs:
        first = next(
            (
                e["stage"]
                for e in log
                if "active_after" in e and e["active_after"] < e["active_before"]
            ),
            None,
        )
        out.append(first)
    return out


def _plot(merged: dict, cfg: Fig4Config, path: Path, group: str = "main") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps_list = cfg.epsilons if group == "main" else [cfg.long_epsilon]
    fig, axes = plt.subplots(1, len(eps_list), figsize=(6.2 * len(eps_list), 4.4), squeeze=False)
    for ax, eps in zip(axes[0], eps_list, strict=True):
        order = list(COLORS)
        items = sorted(merged.items(), key=lambda kv: order.index(kv[0][1]))
        for (g, algo, e), m in items:
            if g != group or (e is not None and e != eps):
                continue
            mean = m["curves"].mean(axis=0)
            std = m["curves"].std(axis=0, ddof=1) if m["curves"].shape[0] > 1 else 0 * mean
            ls = "--" if "theory" in algo else "-"
            ax.plot(m["grid"], mean, ls, color=COLORS.get(algo), label=algo, lw=1.4)
            ax.fill_between(m["grid"], mean - std, mean + std, color=COLORS.get(algo), alpha=0.2)
        K = cfg.episodes if group == "main" else cfg.long_episodes
        ends = np.cumsum([3 * T for T in stage_schedule(K, 2 * cfg.states * cfg.horizon)])
        for end in ends[ends < K]:
            ax.axvline(end, color="grey", lw=0.4, ls=":")  # SDP-PE stage boundaries
        ax.set_title(f"RiverSwim S={cfg.states}, H={cfg.horizon}, ε={eps:g}")
        ax.set_xlabel("episode")
        ax.set_ylabel("cumulative regret")
        ax.ticklabel_format(style="sci", scilimits=(0, 0))
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------------------------


def fig4(
    out: Path,
    *,
    seeds: int | None = None,
    seed: int = 0,
    quick: bool = False,
    workers: int | None = None,
) -> Path:
    """`privrl reproduce sdp-pe-fig4`: run, write the run directory and ``report.md``."""
    cfg = Fig4Config.quick(seed) if quick else Fig4Config(base_seed=seed)
    if seeds is not None:
        cfg.seeds = int(seeds)
    if workers is None:
        workers = int(os.environ.get("PRIVRL_WORKERS", "1"))
    cfg.workers = max(1, int(workers))
    return run_fig4(cfg, Path(out), quick=quick)


def run_fig4(
    cfg: Fig4Config, out: Path, *, quick: bool = False, log: Callable[[str], None] = print
) -> Path:
    """Run every job of ``cfg`` and write the reproduction to ``out``; returns report.md."""
    t0 = time.perf_counter()
    outputs = _execute(_jobs(cfg), cfg, log)
    return write_fig4(cfg, outputs, out, wall=time.perf_counter() - t0, quick=quick)


def write_fig4(
    cfg: Fig4Config, outputs: list[dict[str, Any]], out: Path, *, wall: float, quick: bool
) -> Path:
    """Write the run directory and report.md from the jobs' outputs (see `_run_job`)."""
    merged = _merge(outputs)
    run = RunDir(out)
    _plot(merged, cfg, run.plot_path("fig4"))
    if any(k[0] == "long" for k in merged):
        _plot(merged, cfg, run.plot_path("fig4_long"), group="long")
    expectations = _expectations(merged, cfg)
    calib = _calibration_table(cfg)
    finals = {
        f"{g}|{a}|{'-' if e is None else f'{e:g}'}": {
            "mean": _stats(m["finals"])[0],
            "std": _stats(m["finals"])[1],
            "per_seed": m["finals"].tolist(),
            "seeds": m["seeds"],
            "cpu_seconds": m["seconds"],
            "episodes": int(m["grid"][-1]),
            **({"first_elimination_stage": _first_elimination(m["logs"])} if m["logs"] else {}),
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
            "calibration": calib,
            "wall_time_s": wall,
        }
    )
    rows = []
    for (g, a, e), m in sorted(merged.items(), key=lambda kv: str(kv[0])):
        mean = m["curves"].mean(axis=0)
        std = m["curves"].std(axis=0, ddof=1) if m["curves"].shape[0] > 1 else 0 * mean
        for k, mu, sd in zip(m["grid"], mean, std, strict=True):
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
    report.write_text(_report(cfg, merged, finals, expectations, calib, wall, quick=quick))
    write_claims(run.path, gallery_claims(expectations))
    return report


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _report(
    cfg: Fig4Config,
    merged: dict,
    finals: dict,
    expectations: list[dict[str, Any]],
    calib: list[dict[str, Any]],
    wall: float,
    *,
    quick: bool,
) -> str:
    K = cfg.episodes
    lines = [
        "# SDP-PE — Figure 4 (RiverSwim regret), reproduction",
        "",
        "Paper: *Secure Reinforcement Learning via Shuffle Privacy Model* (Bai et al., arXiv "
        "2411.11647). The extraction lost every formula and number of the experiment; the "
        "method is rebuilt in `specs/sdp_pe.md`. Regenerate with "
        "`PRIVRL_WORKERS=2 privrl reproduce sdp-pe-fig4` (the full scale below: 20 seeds × "
        "10⁶ episodes and the 3.1·10⁷-episode supplement; `--quick` for a smoke test).",
        "",
    ]
    if quick:
        lines += ["**QUICK RUN — smoke-test scale, numbers are not final.**", ""]
    lines += [
        "## Setup",
        "",
        f"- RiverSwim S = {cfg.states}, A = 2, H = {cfg.horizon}, start state 0, Bernoulli "
        "rewards (0.005 at (0, left), 1 at (S−1, right)). Regret is exact: "
        "V*₁(s₁) − V^{π_k}₁(s₁) per episode by backward induction on the true MDP.",
        f"- K = {K:,} episodes (one user each), {cfg.seeds} seeds (seed i = "
        f"`--seed {cfg.base_seed}+i`), ε ∈ {{{', '.join(f'{e:g}' for e in cfg.epsilons)}}}, "
        f"δ = {cfg.delta:g} (SDP-PE). Mean ± std over seeds.",
        "- SDP-PE: shuffle Privatizer, ε' = ε/(6H), δ' = δ/(6H) per counter, `tight` "
        "calibration (dashed: `theory`); stages T = B·2^(k−1), B = H·S·A (dotted lines: "
        f"stage ends); forgetting; {_n_policies(cfg):,} policies (deduplicated on unreachable "
        "(h, s)). PE: the same code, identity privatizer.",
        "- UCB-VI: the DP-UCBVI code with the identity privatizer. UCBVI-JDP: binary-tree "
        "counts (ε-DP stream ⇒ ε-JDP). UCBVI-LDP: every user adds Laplace(6H/ε) to each "
        "indicator (ε-LDP). Both pure ε-DP.",
        "- **Constants: all defaults, constant 1 in every theory-shaped term** (F threshold "
        "H²ι + H·E, width c = c1 = c2 = 1, bonus C = 1, β = 0.1). Nothing was tuned.",
        "",
        "## Results",
        "",
        "![Figure 4](plots/fig4.png)",
        "",
        f"Final cumulative regret at K = {K:,} (mean ± std over seeds) and regret per "
        "episode over the last 10% of episodes (slope; 0 = learned). For scale: the all-left "
        f"policy costs {_all_left_gap(cfg):.4f} per episode, the worst policy "
        f"{_worst_gap(cfg):.4f}.",
        "",
        "| algorithm | " + " | ".join(f"ε = {e:g}: regret | slope" for e in cfg.epsilons) + " |",
        "|---|" + "---|---|" * len(cfg.epsilons),
    ]
    for algo in ("UCB-VI", "PE", "SDP-PE", "SDP-PE (theory calibration)", "UCBVI-JDP", "UCBVI-LDP"):
        cells = []
        for eps in cfg.epsilons:
            e_key = None if algo in ("UCB-VI", "PE") else eps
            key = f"main|{algo}|{'-' if e_key is None else f'{eps:g}'}"
            m = merged.get(("main", algo, e_key))
            if key in finals and m is not None:
                f = finals[key]
                cells.append(f"{_fmt(f['mean'])} ± {_fmt(f['std'])} | {_slope(m):.4f}")
            else:
                cells.append("— | —")
        lines.append(f"| {algo} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "### The paper's expectations",
        "",
        "| ε | claim | criterion | measured | holds |",
        "|---|---|---|---|---|",
    ]
    for ex in expectations:
        lines.append(
            f"| {ex['epsilon']:g} | {ex['claim']} | {ex['criterion']} | "
            f"{ex['numbers']} | {'yes' if ex['holds'] else '**no**'}"
            f"{' (both still in burn-in: not evidence)' if ex['burn_in'] else ''} |"
        )
    lines += [
        "",
        "### SDP-PE stages (seed 0)",
        "",
        "| stage | T | size of F | E (fine batch) | active policies after | π* active |",
        "|---|---|---|---|---|---|",
    ]
    for eps in cfg.epsilons:
        m = merged.get(("main", "SDP-PE", eps))
        if not m or not m["logs"]:
            continue
        for e in m["logs"][0]:
            if "active_after" in e:
                lines.append(
                    f"| ε={eps:g} · {e['stage']} | {e['T']:,} | {e['infrequent']} | "
                    f"{e['E']:.1f} | {e['active_after']:,} | {e['optimal_active']} |"
                )
    lines += ["", "### Reading the result", ""]
    lines += _discussion(cfg, merged, finals)
    lines += ["", "### Why the private runs are (or are not) still exploring", ""]
    lines += _burn_in_lines(cfg)
    lines += [
        "",
        "## Calibration: `tight` vs `theory`",
        "",
        "Per-counter noise of the shuffle binary summation at the fine batch (2T users) of "
        "a few stages; E is the Assumption's bound (4 × the Bernstein bound on the raw "
        "noise, β = 0.1 over all counters and batches). Every row meets δ' exactly "
        "(column δ_exact, hockey-stick divergence at e^{ε'}).",
        "",
        "| ε | stage | batch n | tight N, p | tight Var | theory N, p | theory Var | "
        "Var ratio | E tight | E theory | δ_exact tight | δ_exact theory |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in calib:
        lines.append(
            f"| {r['epsilon']:g} | {r['stage']} | {r['batch']:,} | {r['tight_trials']:,}, "
            f"{r['tight_p']:.4f} | {r['tight_variance']:,.0f} | {r['theory_trials']:,}, "
            f"{r['theory_p']:.3g} | {r['theory_variance']:,.0f} | {r['variance_ratio']:.1f}× | "
            f"{r['E_tight']:,.0f} | {r['E_theory']:,.0f} | {r['delta_exact_tight']:.3g} | "
            f"{r['delta_exact_theory']:.3g} |"
        )
    long_keys = [k for k in merged if k[0] == "long"]
    if long_keys:
        KL = cfg.long_episodes
        lines += [
            "",
            f"### Supplement: {KL:,} episodes ({cfg.long_seeds} seeds), ε = {cfg.long_epsilon:g}",
            "",
            "![long run](plots/fig4_long.png)",
            "",
            "| algorithm | final regret | first stage that eliminates (per seed) |",
            "|---|---|---|",
        ]
        for key in sorted(long_keys, key=str):
            f = finals[f"long|{key[1]}|{'-' if key[2] is None else f'{key[2]:g}'}"]
            lines.append(
                f"| {key[1]} | {_fmt(f['mean'])} ± {_fmt(f['std'])} | "
                f"{f.get('first_elimination_stage')} |"
            )
        e = f"{cfg.long_epsilon:g}"
        tight = finals.get(f"long|SDP-PE|{e}")
        theory = finals.get(f"long|SDP-PE (theory calibration)|{e}")
        if tight and theory:
            lines += [
                "",
                f"Effect of the calibration on regret (ε = {e}): the `tight` binomial has "
                "~20–55× less variance per counter (table above), hence ~4–6× smaller E and F "
                "threshold, so SDP-PE's stages start eliminating earlier: "
                f"{_fmt(tight['mean'])} vs {_fmt(theory['mean'])} cumulative regret "
                f"({100 * (1 - tight['mean'] / theory['mean']):.0f}% less) after "
                f"{KL:,} episodes. At K = {cfg.episodes:,} both are still in burn-in and "
                "their regrets differ by < 1%.",
            ]
    lines += [
        "",
        "## Cost",
        "",
        f"Wall time {wall / 60:.1f} min with {cfg.workers} worker process(es) on a shared "
        "2-core machine; worker seconds per algorithm (all seeds; UCB-VI-type runs are "
        "vectorised over seeds, SDP-PE/PE run one seed at a time):",
        "",
    ]
    for key, f in sorted(finals.items()):
        lines.append(f"- {key}: {f['cpu_seconds']:.0f} s")
    lines.append("")
    return "\n".join(lines)


def _discussion(cfg: Fig4Config, merged: dict, finals: dict) -> list[str]:
    """Data-driven remarks: who learned within K, and what the private runs were doing."""
    gap = _all_left_gap(cfg)
    out = []
    learned, burn = [], []
    for (g, a, e), m in sorted(merged.items(), key=lambda kv: str(kv[0])):
        if g != "main":
            continue
        name = a if e is None else f"{a} (ε = {e:g})"
        (burn if _slope(m) >= 0.8 * gap else learned).append(f"{name}: {_slope(m):.3f}")
    out.append(
        f"- Learning within K = {cfg.episodes:,} (final slope < 0.8 × the all-left cost "
        f"{gap:.3f}/episode): " + ("; ".join(learned) or "none") + "."
    )
    out.append(
        "- Still in burn-in (slope ≥ 0.8 × all-left cost): " + ("; ".join(burn) or "none") + "."
    )
    pe_first = finals.get("main|PE|-", {}).get("first_elimination_stage")
    if pe_first:
        out.append(
            f"- PE first eliminates at stage {pe_first[0]} (seed 0; all seeds: "
            f"{sorted(set(x for x in pe_first if x is not None))}); stage k ends after "
            "3·B·(2^k − 1) episodes, so with the theory-shaped F threshold (H²ι visits in a "
            "crude batch) PE spends most of K = 10⁶ exploring; UCB-VI's per-episode updates "
            "learn long before."
        )
    out.append(
        "- An algorithm in burn-in runs whatever its rule gives with no usable data: DP-UCBVI's "
        "bonus caps every Q̃ at H − h and the tie goes to action 0 (all-left, the cheapest "
        "uninformed policy on RiverSwim, hence zero variance across seeds); SDP-PE's "
        "explorations target (h, s, a) through a model whose tuples are all still in F, which "
        "also reduces to mostly all-left. The ordering among private methods at this K is "
        "therefore a tie-breaking artefact, not a privacy–regret comparison."
    )
    return out


def _slope(m: dict[str, Any]) -> float:
    """Mean regret per episode over the last 10% of the run (from the checkpoint grid)."""
    grid, mean = m["grid"], m["curves"].mean(axis=0)
    i = int(np.searchsorted(grid, 0.9 * grid[-1]))
    i = min(i, grid.size - 2)
    return float((mean[-1] - mean[i]) / (grid[-1] - grid[i]))


def _first_time(need: Callable[[int], float], limit: int) -> int | None:
    """Smallest t ≤ limit with need(t) < t (need non-decreasing in the cases used), by
    doubling then bisection on integers."""
    if need(limit) >= limit:
        return None
    lo, hi = 0, 1
    while need(hi) >= hi:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid) < mid:
            hi = mid
        else:
            lo = mid
    return hi


def _burn_in_lines(cfg: Fig4Config) -> list[str]:
    """Public-parameter analysis: when can each private algorithm start using its data?"""
    from privrl.privacy.tree import laplace_sum_bound, tree_levels

    H, S, A, K, beta = cfg.horizon, cfg.states, 2, cfg.episodes, 0.1
    iota_ucb = math.log(2 * H * S * A * K / beta)
    d = 2 * H * S * A + H * S * A * S
    beta_c = beta / (K * d)
    lines = [
        "DP-UCBVI (C = 1) can use a row (h, s, a) only once its bonus can fall below H, i.e. "
        "H·ñ > H·S·E·ι + H²·S·ι with ñ ≤ n + E; until then Q̃ = H − h everywhere and the "
        "greedy policy is 'action 0 everywhere' (all-left on RiverSwim). Earliest episode "
        f"t at which this is possible for any row (n ≤ t, ι = {iota_ucb:.1f}):",
        "",
    ]
    for eps in cfg.epsilons:
        L = tree_levels(K)
        b_tree = L * 6 * H / eps  # smallest E over the run: a prefix of one node (popcount 1)
        E_min = 4 * laplace_sum_bound(b_tree, 1, beta_c)
        t_jdp = _first_time(
            lambda t, E=E_min: (H * S * E * iota_ucb + H * H * S * iota_ucb) / H - E, 10**13
        )
        b_loc = 6 * H / eps
        t_ldp = _first_time(
            lambda t, b=b_loc: (
                (H * S * 4 * laplace_sum_bound(b, t, beta_c) * iota_ucb + H * H * S * iota_ucb) / H
                - 4 * laplace_sum_bound(b, t, beta_c)
            ),
            10**13,
        )
        lines.append(
            f"- ε = {eps:g}: UCBVI-JDP (tree, E ≥ {E_min:,.0f}) — t ≥ "
            f"{_fmt_t(t_jdp)}; UCBVI-LDP (E grows like √t) — t ≥ {_fmt_t(t_ldp)}."
        )
    sched = stage_schedule(max(cfg.episodes, cfg.long_episodes), H * S * A)
    iota_pe = math.log(2 * H * S * S * A * len(stage_schedule(K, H * S * A)) / beta)
    n_rel = len(stage_schedule(K, H * S * A)) * (H + 1)
    lines += [
        "",
        "SDP-PE / PE can remove a tuple from the infrequent set F (and so estimate anything "
        "beyond the first step) only if its count in the crude batch of T/H users exceeds "
        f"H²ι + H·E_crude (ι = {iota_pe:.1f}); a targeted (s, a) gets about T/(H·S·A) of "
        "those users. First stage where T/(H·S·A) exceeds the threshold (and the episodes "
        "used up to the end of that stage):",
        "",
    ]
    for label, eps, mode in [("PE", None, None)] + [
        (f"SDP-PE ε = {e:g} ({m})", e, m)
        for e in sorted({*cfg.epsilons, cfg.long_epsilon})
        for m in ("tight", "theory")
    ]:
        first = None
        for k, T in enumerate(sched, start=1):
            n_c = T // H
            E = 0.0
            if eps is not None:
                cal = calibrate_binary_sum(eps / (6 * H), cfg.delta / (6 * H), n_c, mode)
                E = 4 * binary_sum_error_bound(cal, beta / n_rel / (H * S * A * (S + 1)))
            if n_c / (S * A) > H * H * iota_pe + H * E:
                first = (k, 3 * H * S * A * (2**k - 1), E)
                break
        if first is None:
            lines.append(f"- {label}: not within {len(sched)} stages")
        else:
            lines.append(
                f"- {label}: stage {first[0]} (after {first[1]:,} episodes; "
                f"E_crude = {first[2]:,.0f})"
            )
    return lines


def _fmt_t(t: int | None) -> str:
    return "never below 10¹³" if t is None else f"{t:,}"


def _all_left_gap(cfg: Fig4Config) -> float:
    mdp = make_env("riverswim", states=cfg.states, horizon=cfg.horizon)
    left = np.zeros((cfg.horizon, cfg.states), dtype=np.int64)
    return float(mdp.optimal_value() - mdp.value(left))


def _n_policies(cfg: Fig4Config) -> int:
    from privrl.online.common import policy_set

    return int(policy_set(make_env("riverswim", states=cfg.states, horizon=cfg.horizon)).shape[0])


def _worst_gap(cfg: Fig4Config) -> float:
    from privrl.online.common import policy_set

    mdp = make_env("riverswim", states=cfg.states, horizon=cfg.horizon)
    return float(mdp.optimal_value() - mdp.value(policy_set(mdp)).min())
