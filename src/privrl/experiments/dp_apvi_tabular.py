"""Our study of DP-APVI (the paper has no tabular experiment): APVI vs DP-APVI vs n.

Setting (spec qiao_wang.md): random finite-horizon MDPs S = 10, A = 5, H = 10 (Dirichlet(1)
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
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress

from privrl.envs.tabular import Episodes, TabularMDP, behaviour_policy_full_support
from privrl.experiments.claims import Claim, count_verdict, write_claims
from privrl.experiments.rundir import RunDir
from privrl.offline.apvi import (
    C2,
    APVIConfig,
    PrivacyConfig,
    dp_apvi_from_counts,
    empirical_counts,
    noise_plan,
)
from privrl.privacy.report import PrivacyReport

__all__ = ["StudyConfig", "run"]

REPORT_DELTA = 1e-6
TARGET_SUBOPTIMALITY = 0.05
TUNING_SEED_OFFSET = 10_000


@dataclass
class StudyConfig:
    """Scale of the study (the defaults are the full reproduction)."""

    states: int = 10
    actions: int = 5
    horizon: int = 10
    min_prob: float = 0.05
    n_grid: list[int] = field(
        default_factory=lambda: [round(float(x)) for x in np.logspace(2, 5, 13)]
    )
    rhos: list[float] = field(default_factory=lambda: [0.1, 1.0, 10.0])
    bonuses: list[str] = field(default_factory=lambda: ["bernstein", "hoeffding"])
    seeds: int = 20
    tuning_seeds: int = 5
    scale_grid: list[float] = field(
        default_factory=lambda: [1.0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 0.0]
    )
    utility_delta: float = 0.1
    report_delta: float = REPORT_DELTA
    base_seed: int = 0

    @classmethod
    def quick(cls, seed: int = 0) -> StudyConfig:
        return cls(
            n_grid=[100, 1000, 10_000],
            rhos=[1.0],
            seeds=3,
            tuning_seeds=2,
            scale_grid=[1.0, 1e-2, 1e-4, 0.0],
            base_seed=seed,
        )


@dataclass(frozen=True)
class Variant:
    """One learner: APVI or DP-APVI with a mechanism and a budget."""

    name: str
    mechanism: str  # "none", "gaussian", "laplace"
    rho: float | None = None
    epsilon: float | None = None

    def privacy(self, report_delta: float) -> PrivacyConfig | None:
        if self.mechanism == "gaussian":
            return PrivacyConfig.gaussian(self.rho, report_delta=report_delta)  # type: ignore[arg-type]
        if self.mechanism == "laplace":
            return PrivacyConfig.laplace(self.epsilon, report_delta=report_delta)  # type: ignore[arg-type]
        return None


def matched_epsilon(rho: float, H: int, delta: float = REPORT_DELTA) -> float:
    """ε that the accountant states for DP-APVI Gaussian at ρ, at δ (the Laplace run's ε)."""
    plan = noise_plan(H, 1, 1, PrivacyConfig.gaussian(rho), 0.1)
    report = PrivacyReport.build(
        "trajectory", "replace_one", plan.releases_planned(H), delta, system="dp-apvi"
    )
    return float(report.epsilon)


def _variants(cfg: StudyConfig) -> list[Variant]:
    out = [Variant("APVI", "none")]
    for rho in cfg.rhos:
        out.append(Variant(f"DP-APVI Gaussian ρ={rho:g}", "gaussian", rho=rho))
    for rho in cfg.rhos:
        eps = matched_epsilon(rho, cfg.horizon, cfg.report_delta)
        out.append(Variant(f"DP-APVI Laplace ε={eps:.3g} (≙ρ={rho:g})", "laplace", epsilon=eps))
    return out


class _Instance:
    """One seed: an MDP, its behaviour policy and 10⁵ (max n) trajectories."""

    def __init__(self, cfg: StudyConfig, seed: int) -> None:
        ss = np.random.SeedSequence([cfg.base_seed, seed])
        mdp_ss, mu_ss, data_ss, self.noise_ss = ss.spawn(4)
        H, S, A = cfg.horizon, cfg.states, cfg.actions
        self.seed = seed
        self.mdp = TabularMDP.random(S, A, H, rng=np.random.default_rng(mdp_ss))
        mu = behaviour_policy_full_support(np.random.default_rng(mu_ss), H, S, A, cfg.min_prob)
        self.episodes = self.mdp.sample_arrays(
            mu, max(cfg.n_grid), rng=np.random.default_rng(data_ss), record_probs=False
        )
        self.v_star = self.mdp.optimal_value()

    def prefix(self, n: int) -> Episodes:
        e = self.episodes
        return Episodes(e.states[:n], e.actions[:n], e.rewards[:n], None)

    def noise_rng(self, n: int, mechanism: str) -> np.random.Generator:
        # CRN: the same draws for every ρ / bonus / scale at (seed, n, mechanism).
        key = {"none": 0, "gaussian": 1, "laplace": 2}[mechanism]
        return np.random.default_rng([*self.noise_ss.generate_state(2), n, key])


def _evaluate(
    inst: _Instance,
    cfg: StudyConfig,
    variants: list[Variant],
    settings: list[tuple[str, str, float]],
) -> list[dict[str, Any]]:
    """Suboptimality of every (variant, bonus, scale) at every n on one instance."""
    H, S, A = cfg.horizon, cfg.states, cfg.actions
    rows = []
    for n in cfg.n_grid:
        counts = empirical_counts(inst.prefix(n), horizon=H, n_states=S, n_actions=A)
        for v in variants:
            for bonus, scale_kind, scale in settings:
                config = APVIConfig(bonus=bonus, bonus_scale=scale, delta=cfg.utility_delta)  # type: ignore[arg-type]
                res = dp_apvi_from_counts(
                    counts,
                    privacy=v.privacy(cfg.report_delta),
                    config=config,
                    reward=inst.mdp.R,
                    rng=inst.noise_rng(n, v.mechanism),
                )
                rows.append(
                    {
                        "seed": inst.seed,
                        "n": n,
                        "variant": v.name,
                        "mechanism": v.mechanism,
                        "bonus": bonus,
                        "scale_kind": scale_kind,
                        "bonus_scale": scale,
                        "suboptimality": float(inst.v_star - inst.mdp.value(res.policy.actions)),
                        "known_fraction": float(res.model.known.mean()),
                        "n_tilde_bias": float((res.model.n_sa - counts.n_sa).mean()),
                        "E": res.plan.E,
                    }
                )
    return rows


def _threshold_ablation(
    inst: _Instance, cfg: StudyConfig, bonus: str, tuned: dict[str, float]
) -> list[dict[str, Any]]:
    """Investigation: APVI on the exact counts, but with DP-APVI's rule "ñ ≤ E ⇒ unknown" at
    the E of each ρ (and E in the bonus) — DP-APVI without its noise. Its gap to APVI is the
    part of the privacy cost due to the coverage threshold alone."""
    from privrl.offline.apvi import NoisePlan, pessimistic_value_iteration, private_model

    H, S, A = cfg.horizon, cfg.states, cfg.actions
    config = APVIConfig(bonus=bonus, bonus_scale=tuned[bonus], delta=cfg.utility_delta)  # type: ignore[arg-type]
    rows = []
    for n in cfg.n_grid:
        counts = empirical_counts(inst.prefix(n), horizon=H, n_states=S, n_actions=A)
        for rho in cfg.rhos:
            real = noise_plan(H, S, A, PrivacyConfig.gaussian(rho), cfg.utility_delta)
            plan = NoisePlan(
                "none", real.families, 0.0, 0.0, math.inf, real.tail, real.E, real.iota
            )
            model = private_model(counts, plan.E)
            values = pessimistic_value_iteration(model, inst.mdp.R, plan, config)
            rows.append(
                {
                    "seed": inst.seed,
                    "n": n,
                    "rho": rho,
                    "suboptimality": float(inst.v_star - inst.mdp.value(values.policy)),
                }
            )
    return rows


def _aggregate_ablation(
    rows: list[dict[str, Any]], agg: list[dict[str, Any]], bonus: str
) -> list[dict[str, Any]]:
    """Mean gap of the threshold-only learner next to DP-APVI's gap, per (ρ, n)."""
    out = []
    for rho in sorted({r["rho"] for r in rows}):
        for n in sorted({r["n"] for r in rows}):
            sub = np.array([r["suboptimality"] for r in rows if r["rho"] == rho and r["n"] == n])
            apvi = _get(agg, "APVI", bonus, "tuned", n)["suboptimality_mean"]
            dp = _get(agg, f"DP-APVI Gaussian ρ={rho:g}", bonus, "tuned", n)
            out.append(
                {
                    "rho": rho,
                    "n": n,
                    "threshold_only_gap": float(sub.mean()) - apvi,
                    "threshold_only_gap_se": _se(sub),
                    "dp_gap": dp["gap_mean"],
                    "dp_gap_se": dp["gap_se"],
                }
            )
    return out


def _tune(
    cfg: StudyConfig, variants: list[Variant], progress: Progress | None
) -> tuple[dict[str, float], list[dict[str, Any]], int]:
    """Pick one bonus scale per bonus type on separate instances (never the evaluation data)."""
    settings = [(b, "grid", s) for b in cfg.bonuses for s in cfg.scale_grid]
    rows: list[dict[str, Any]] = []
    task = progress.add_task("tuning the bonus scale", total=cfg.tuning_seeds) if progress else None
    for j in range(cfg.tuning_seeds):
        inst = _Instance(cfg, TUNING_SEED_OFFSET + j)
        rows.extend(_evaluate(inst, cfg, variants, settings))
        if progress is not None and task is not None:
            progress.advance(task)
    chosen: dict[str, float] = {}
    table = []
    for b in cfg.bonuses:
        scores = {}
        for s in cfg.scale_grid:
            vals = [r["suboptimality"] for r in rows if r["bonus"] == b and r["bonus_scale"] == s]
            scores[s] = float(np.mean(vals))
            table.append({"bonus": b, "bonus_scale": s, "mean_suboptimality": scores[s]})
        # Ties (e.g. several tiny scales with the same policies) go to the larger scale: the
        # more pessimistic choice among equals.
        best = min(scores.values())
        chosen[b] = max(s for s, v in scores.items() if v <= best + 1e-12)
    return chosen, table, len(rows)


def _aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± SE per (variant, bonus, scale_kind, n), and the paired gap to APVI."""
    by_key: dict[tuple, dict[int, dict[str, Any]]] = {}
    for r in rows:
        key = (r["variant"], r["bonus"], r["scale_kind"], r["n"])
        by_key.setdefault(key, {})[r["seed"]] = r
    out = []
    for (variant, bonus, kind, n), per_seed in by_key.items():
        base = by_key[("APVI", bonus, kind, n)]
        seeds = sorted(per_seed)
        sub = np.array([per_seed[s]["suboptimality"] for s in seeds])
        gap = sub - np.array([base[s]["suboptimality"] for s in seeds])
        k = len(seeds)
        first = per_seed[seeds[0]]
        out.append(
            {
                "variant": variant,
                "mechanism": first["mechanism"],
                "bonus": bonus,
                "scale_kind": kind,
                "bonus_scale": first["bonus_scale"],
                "n": n,
                "seeds": k,
                "suboptimality_mean": float(sub.mean()),
                "suboptimality_se": _se(sub),
                "gap_mean": float(gap.mean()),
                "gap_se": _se(gap),
                "known_fraction_mean": float(
                    np.mean([per_seed[s]["known_fraction"] for s in seeds])
                ),
                "n_tilde_bias_mean": float(np.mean([per_seed[s]["n_tilde_bias"] for s in seeds])),
                "E": first["E"],
            }
        )
    return out


def _se(x: np.ndarray) -> float:
    """Standard error of the mean over seeds (NaN for one seed)."""
    return float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")


def _fit_slope(agg: list[dict[str, Any]], variant: str, bonus: str, kind: str) -> dict[str, Any]:
    """Least-squares slope of log(mean gap) on log n past the E-threshold (see module doc)."""
    pts = sorted(
        (r for r in agg if (r["variant"], r["bonus"], r["scale_kind"]) == (variant, bonus, kind)),
        key=lambda r: r["n"],
    )
    used = [
        r for r in pts if r["known_fraction_mean"] >= 0.95 and r["gap_mean"] > 2.0 * r["gap_se"]
    ]
    positive = [r for r in pts if r["gap_mean"] > 2.0 * r["gap_se"]]
    out: dict[str, Any] = {"variant": variant, "bonus": bonus, "scale_kind": kind}
    for label, sel in (("slope", used), ("slope_all_positive", positive)):
        if len(sel) >= 3:
            x = np.log([r["n"] for r in sel])
            y = np.log([r["gap_mean"] for r in sel])
            A = np.vstack([x, np.ones_like(x)]).T
            coef, *_ = np.linalg.lstsq(A, y, rcond=None)
            dof = len(sel) - 2
            resid = y - A @ coef
            s2 = float(resid @ resid / dof) if dof > 0 else float("nan")
            cov = s2 * np.linalg.inv(A.T @ A)
            out[label] = float(coef[0])
            out[label + "_se"] = float(math.sqrt(cov[0, 0])) if dof > 0 else float("nan")
            out[label + "_n_range"] = [sel[0]["n"], sel[-1]["n"]]
            out[label + "_points"] = len(sel)
        else:
            out[label] = float("nan")
            out[label + "_points"] = len(sel)
    return out


def run(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Run the study and write ``report.md``, plots and metrics to ``out``; returns the report."""
    cfg = StudyConfig.quick(seed) if quick else StudyConfig(base_seed=seed)
    if seeds is not None:
        cfg.seeds = int(seeds)
    return run_study(cfg, Path(out), quick=quick)


def run_study(cfg: StudyConfig, out: Path, *, quick: bool = False) -> Path:
    console = Console()
    t_start = time.perf_counter()
    rundir = RunDir(out)
    variants = _variants(cfg)
    with Progress(console=console, transient=True) as progress:
        tuned, tuning_table, tuning_runs = _tune(cfg, variants, progress)
        settings = [(b, "theory", 1.0) for b in cfg.bonuses] + [
            (b, "tuned", tuned[b]) for b in cfg.bonuses
        ]
        task = progress.add_task("evaluating", total=cfg.seeds)
        rows: list[dict[str, Any]] = []
        ablation_rows: list[dict[str, Any]] = []
        for i in range(cfg.seeds):
            inst = _Instance(cfg, i)
            rows.extend(_evaluate(inst, cfg, variants, settings))
            ablation_rows.extend(_threshold_ablation(inst, cfg, cfg.bonuses[0], tuned))
            progress.advance(task)
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
    summary = _summary(cfg, agg, slopes, variants, tuned)
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
    report.write_text(
        _render(
            cfg,
            agg,
            slopes,
            variants,
            tuned,
            tuning_table,
            summary=summary,
            ablation=ablation,
            elapsed=elapsed,
            quick=quick,
        ),
        encoding="utf-8",
    )
    write_claims(rundir.path, gallery_claims(summary["convergence"], slopes, summary["n_max"]))
    console.print(f"[bold]dp-apvi-tabular[/]: {len(rows)} runs in {elapsed:.1f} s → {report}")
    return report


def _csv(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = [",".join(keys)]
    for r in rows:
        lines.append(",".join(_csv_cell(r[k]) for k in keys))
    return "\n".join(lines) + "\n"


def _csv_cell(v: Any) -> str:
    s = repr(v) if isinstance(v, float) else str(v)
    return f'"{s}"' if "," in s else s


def _privacy_reports(
    cfg: StudyConfig, variants: list[Variant]
) -> list[tuple[Variant, PrivacyReport]]:
    """The report of each private variant (identical for every seed and n: the noise does not
    depend on n)."""
    out = []
    H, S, A = cfg.horizon, cfg.states, cfg.actions
    for v in variants:
        if v.mechanism == "none":
            continue
        privacy = v.privacy(cfg.report_delta)
        plan = noise_plan(H, S, A, privacy, cfg.utility_delta)
        delta = cfg.report_delta if v.mechanism == "gaussian" else 0.0
        out.append(
            (
                v,
                PrivacyReport.build(
                    "trajectory",
                    "replace_one",
                    plan.releases_planned(H, S, A),
                    delta,
                    system="dp-apvi",
                    public=["the simulated MDP's mean reward r_h(s,a)", "H, S, A and n"],
                    notes=[f"E = {plan.E:.6g} at utility δ = {cfg.utility_delta:g}"],
                ),
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# summaries
# ---------------------------------------------------------------------------------------------


def _get(agg: list[dict[str, Any]], variant: str, bonus: str, kind: str, n: int) -> dict:
    for r in agg:
        if (r["variant"], r["bonus"], r["scale_kind"], r["n"]) == (variant, bonus, kind, n):
            return r
    raise KeyError((variant, bonus, kind, n))


def _summary(
    cfg: StudyConfig,
    agg: list[dict[str, Any]],
    slopes: list[dict[str, Any]],
    variants: list[Variant],
    tuned: dict[str, float],
) -> dict[str, Any]:
    n_max, n_min = max(cfg.n_grid), min(cfg.n_grid)
    conv = []
    for v in variants:
        if v.mechanism == "none":
            continue
        for b in cfg.bonuses:
            for kind in ("theory", "tuned"):
                last = _get(agg, v.name, b, kind, n_max)
                # Largest gap over the grid, to say whether it shrinks.
                worst = max(
                    (
                        r
                        for r in agg
                        if (r["variant"], r["bonus"], r["scale_kind"]) == (v.name, b, kind)
                    ),
                    key=lambda r: r["gap_mean"],
                )
                converged = last["gap_mean"] <= max(2.0 * last["gap_se"], 0.01)
                conv.append(
                    {
                        "variant": v.name,
                        "bonus": b,
                        "scale_kind": kind,
                        "gap_at_n_max": last["gap_mean"],
                        "gap_se_at_n_max": last["gap_se"],
                        "max_gap": worst["gap_mean"],
                        "n_of_max_gap": worst["n"],
                        "converged_by_n_max": bool(converged),
                    }
                )
    # Theory scale: the privacy term C2·S·H·E·ι/ñ alone exceeds H (≥ any Q̃) unless
    # ñ > C2·S·E·ι; with ñ ≈ n·d^μ_h(s,a) ≈ n/(S·A) on average, learning needs n ≳ C2·S²·A·E·ι.
    H, S, A = cfg.horizon, cfg.states, cfg.actions
    thresh = []
    for rho in cfg.rhos:
        plan = noise_plan(H, S, A, PrivacyConfig.gaussian(rho), cfg.utility_delta)
        n_tilde = C2 * S * plan.E * plan.iota
        thresh.append(
            {
                "rho": rho,
                "E": plan.E,
                "iota": plan.iota,
                "n_tilde_needed": n_tilde,
                "n_needed_avg_pair": n_tilde * S * A,
            }
        )
    head_variant = next(
        (v.name for v in variants if v.mechanism == "gaussian" and v.rho == 1.0),
        variants[-1].name,
    )
    head = _get(agg, head_variant, cfg.bonuses[0], "tuned", n_max)
    headline = {
        "variant": head_variant,
        "bonus": cfg.bonuses[0],
        "scale_kind": "tuned",
        "bonus_scale": head["bonus_scale"],
        "n": n_max,
        "suboptimality_mean": head["suboptimality_mean"],
        "suboptimality_se": head["suboptimality_se"],
    }
    apvi_slopes = []
    for b in cfg.bonuses:
        for kind in ("theory", "tuned"):
            pts = sorted(
                (
                    r
                    for r in agg
                    if (r["variant"], r["bonus"], r["scale_kind"]) == ("APVI", b, kind)
                    and r["suboptimality_mean"] > 0
                ),
                key=lambda r: r["n"],
            )
            x = np.log([r["n"] for r in pts])
            y = np.log([r["suboptimality_mean"] for r in pts])
            slope = float(np.polyfit(x, y, 1)[0]) if len(pts) >= 3 else float("nan")
            apvi_slopes.append({"bonus": b, "scale_kind": kind, "slope": slope})
    n_to_reach = []
    for v in variants:
        for b in cfg.bonuses:
            for kind in ("theory", "tuned"):
                n_to_reach.append(
                    {
                        "variant": v.name,
                        "bonus": b,
                        "scale_kind": kind,
                        "target": TARGET_SUBOPTIMALITY,
                        "n": _n_to_reach(agg, v.name, b, kind, TARGET_SUBOPTIMALITY),
                    }
                )
    return {
        "convergence": conv,
        "theory_threshold": thresh,
        "headline": headline,
        "apvi_slopes": apvi_slopes,
        "n_to_reach": n_to_reach,
        "n_min": n_min,
        "n_max": n_max,
    }


def _n_to_reach(
    agg: list[dict[str, Any]], variant: str, bonus: str, kind: str, target: float
) -> float | None:
    """Smallest n (log-linear interpolation on the grid) from which the mean suboptimality
    stays ≤ target; None if it is not reached on the grid."""
    pts = sorted(
        (r for r in agg if (r["variant"], r["bonus"], r["scale_kind"]) == (variant, bonus, kind)),
        key=lambda r: r["n"],
    )
    ys = [r["suboptimality_mean"] for r in pts]
    for i in range(len(pts)):
        if all(y <= target for y in ys[i:]):
            if i == 0:
                return float(pts[0]["n"])
            x0, x1 = math.log(pts[i - 1]["n"]), math.log(pts[i]["n"])
            y0, y1 = ys[i - 1], ys[i]
            frac = (y0 - target) / (y0 - y1) if y0 != y1 else 1.0
            return float(math.exp(x0 + frac * (x1 - x0)))
    return None


# ---------------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _style(v: Variant) -> dict[str, Any]:
    if v.mechanism == "none":
        return {"color": "black", "marker": "o", "ls": "-", "lw": 2}
    colors = {0.1: "tab:red", 1.0: "tab:blue", 10.0: "tab:green"}
    rho = v.rho if v.rho is not None else None
    if rho is None:  # Laplace: colour of the matched ρ, from the name
        rho = float(v.name.split("ρ=")[1].rstrip(")"))
    return {
        "color": colors.get(rho, "tab:purple"),
        "marker": "s" if v.mechanism == "gaussian" else "^",
        "ls": "-" if v.mechanism == "gaussian" else "--",
        "lw": 1.3,
    }


def _plot_curves(
    rundir: RunDir, cfg: StudyConfig, agg: list[dict[str, Any]], variants: list[Variant]
) -> None:
    plt = _plt()
    fig, axes = plt.subplots(
        len(cfg.bonuses), 2, figsize=(12, 4.2 * len(cfg.bonuses)), squeeze=False, sharey=True
    )
    for i, b in enumerate(cfg.bonuses):
        for j, kind in enumerate(("theory", "tuned")):
            ax = axes[i][j]
            for v in variants:
                pts = sorted(
                    (
                        r
                        for r in agg
                        if (r["variant"], r["bonus"], r["scale_kind"]) == (v.name, b, kind)
                    ),
                    key=lambda r: r["n"],
                )
                ax.errorbar(
                    [r["n"] for r in pts],
                    [r["suboptimality_mean"] for r in pts],
                    yerr=[r["suboptimality_se"] for r in pts],
                    label=v.name,
                    capsize=2,
                    ms=4,
                    **_style(v),
                )
            scale = pts[0]["bonus_scale"] if pts else float("nan")
            ax.set_xscale("log")
            ax.set_xlabel("trajectories n")
            ax.set_ylabel("suboptimality v* − v^π̂")
            ax.set_title(f"{b} bonus, {kind} scale ({scale:g})")
            ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        f"APVI vs DP-APVI on random MDPs (S={cfg.states}, A={cfg.actions}, H={cfg.horizon}); "
        f"mean ± SE over {cfg.seeds} seeds"
    )
    fig.tight_layout()
    fig.savefig(rundir.plot_path("suboptimality_vs_n"), dpi=120)
    plt.close(fig)


def _plot_gaps(
    rundir: RunDir,
    cfg: StudyConfig,
    agg: list[dict[str, Any]],
    variants: list[Variant],
    slopes: list[dict[str, Any]],
) -> None:
    plt = _plt()
    fig, axes = plt.subplots(
        1, len(cfg.bonuses), figsize=(6.2 * len(cfg.bonuses), 4.4), squeeze=False
    )
    for j, b in enumerate(cfg.bonuses):
        ax = axes[0][j]
        for v in variants:
            if v.mechanism == "none":
                continue
            pts = sorted(
                (
                    r
                    for r in agg
                    if (r["variant"], r["bonus"], r["scale_kind"]) == (v.name, b, "tuned")
                    and r["gap_mean"] > 0
                ),
                key=lambda r: r["n"],
            )
            if not pts:
                continue
            fit = next(
                s
                for s in slopes
                if (s["variant"], s["bonus"], s["scale_kind"]) == (v.name, b, "tuned")
            )
            label = v.name
            if math.isfinite(fit.get("slope", float("nan"))):
                label += f" (slope {fit['slope']:.2f})"
            ax.errorbar(
                [r["n"] for r in pts],
                [r["gap_mean"] for r in pts],
                yerr=[r["gap_se"] for r in pts],
                label=label,
                capsize=2,
                ms=4,
                **_style(v),
            )
        n = np.array(cfg.n_grid, dtype=float)
        ax.plot(n, 1e3 / n, ":", color="gray", label="∝ 1/n (reference)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("trajectories n")
        ax.set_ylabel("gap: subopt(DP-APVI) − subopt(APVI)")
        ax.set_title(f"privacy cost, {b} bonus, tuned scale (points with gap > 0)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(rundir.plot_path("privacy_gap_loglog"), dpi=120)
    plt.close(fig)


def _plot_tuning(
    rundir: RunDir, cfg: StudyConfig, table: list[dict[str, Any]], tuned: dict[str, float]
) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for b in cfg.bonuses:
        pts = [r for r in table if r["bonus"] == b]
        xs = [max(r["bonus_scale"], 1e-7) for r in pts]
        ax.plot(xs, [r["mean_suboptimality"] for r in pts], "o-", label=f"{b} (chose {tuned[b]:g})")
    ax.set_xscale("log")
    ax.set_xlabel("bonus_scale (0 plotted at 1e-7)")
    ax.set_ylabel("mean suboptimality (tuning instances)")
    ax.set_title("bonus-scale tuning on separate MDP instances")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(rundir.plot_path("bonus_scale_tuning"), dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------


THEOREM = "privacy cost is a lower-order term (Theorem 3.3; no tabular experiment)"


def gallery_claims(
    convergence: list[dict[str, Any]], slopes: list[dict[str, Any]], n_max: int
) -> list[Claim]:
    """The gallery rows of this study, with the report's verdicts on the paper's theorem:
    convergence to APVI (tuned and theory scale) and the 1/n rate of the privacy cost."""
    out = []
    for kind in ("tuned", "theory"):
        rows = [c for c in convergence if c["scale_kind"] == kind]
        ok = [c for c in rows if c["converged_by_n_max"]]
        lag = sorted({c["variant"] for c in rows if not c["converged_by_n_max"]})
        if ok or not rows:
            ours = f"converged at n = {n_max:,} in {len(ok)} of {len(rows)} configurations"
            ours += f" (not yet: {', '.join(lag)})" if lag else ""
        else:
            first = {c["bonus"]: c for c in reversed(rows)}
            gaps = ", ".join(
                f"{_fmt(c['gap_at_n_max'], c['gap_se_at_n_max'])} ({b})"
                for b, c in reversed(first.items())
            )
            ours = f"not within n ≤ {n_max:,} for any ρ or mechanism: gap {gaps}"
        label = "tuned bonus scale" if kind == "tuned" else "theory constants"
        out.append(
            Claim(
                f"DP-APVI converges to APVI as n grows ({label})",
                THEOREM,
                ours,
                count_verdict(len(ok), len(rows)),
                "plots/suboptimality_vs_n.png",
            )
        )
    finite = [
        s
        for s in slopes
        # metrics.json stores a missing slope as the string "nan"
        if s["scale_kind"] == "tuned" and math.isfinite(float(s.get("slope", "nan")))
    ]
    faster = [s for s in finite if s["slope"] + 2 * s["slope_se"] < -1.0]
    like = [s for s in finite if -1.5 <= s["slope"] <= -0.5]
    if not finite:
        ours, verdict = "no slope past the threshold (< 3 points)", "inconclusive"
    else:
        lo, hi = min(s["slope"] for s in finite), max(s["slope"] for s in finite)
        ours = (
            f"log-log slope past the threshold {lo:.2f} to {hi:.2f}; {len(faster)} of "
            f"{len(finite)} significantly steeper than −1"
        )
        # the report's reading: steeper for most → 'does not hold as stated'
        verdict = (
            "holds"
            if len(faster) <= len(finite) / 2 and len(like) >= len(finite) / 2
            else "does not hold"
        )
    out.append(
        Claim(
            "the privacy cost shrinks roughly like 1/n",
            "Õ(S·H²·E_ρ/(n·d̄_m)) (Theorem 3.3)",
            ours,
            verdict,
            "plots/privacy_gap_loglog.png",
        )
    )
    return out


def _fmt(mean: float, se: float) -> str:
    if math.isnan(se):
        return f"{mean:.4f}"
    return f"{mean:.4f} ± {se:.4f}"


def _fmt_n(n: float | None) -> str:
    if n is None:
        return "not reached"
    return f"{n:,.0f}"


def _nearest(grid: list[int], targets: list[int]) -> list[int]:
    out: list[int] = []
    for t in targets:
        n = min(grid, key=lambda g: abs(math.log(g) - math.log(t)))
        if n not in out:
            out.append(n)
    return out


def _table(
    agg: list[dict[str, Any]], variants: list[Variant], bonus: str, kind: str, ns: list[int]
) -> list[str]:
    lines = ["| algorithm | " + " | ".join(f"n = {n:,}" for n in ns) + " |"]
    lines.append("|---|" + "---|" * len(ns))
    for v in variants:
        cells = [
            _fmt(r["suboptimality_mean"], r["suboptimality_se"])
            for r in (_get(agg, v.name, bonus, kind, n) for n in ns)
        ]
        lines.append(f"| {v.name} | " + " | ".join(cells) + " |")
    return lines


def _render(
    cfg: StudyConfig,
    agg: list[dict[str, Any]],
    slopes: list[dict[str, Any]],
    variants: list[Variant],
    tuned: dict[str, float],
    tuning_table: list[dict[str, Any]],
    *,
    summary: dict[str, Any],
    ablation: list[dict[str, Any]],
    elapsed: float,
    quick: bool,
) -> str:
    n_max = summary["n_max"]
    ns = _nearest(cfg.n_grid, [100, 1000, 10_000, 100_000])
    private = [v for v in variants if v.mechanism != "none"]
    L: list[str] = []
    add = L.append
    add("# DP-APVI on random tabular MDPs (our study)")
    add("")
    if quick:
        add(
            "> **Quick smoke-test run**: a reduced grid and few seeds. The numbers below are not "
            "the study's; run `privrl reproduce dp-apvi-tabular` for the full version."
        )
        add("")
    add(
        "Qiao & Wang (*Offline Reinforcement Learning with Differential Privacy*) prove that "
        "DP-APVI's privacy cost is a lower-order term, Õ(S·H²·E_ρ/(n·d̄_m)), but run no "
        "tabular experiment, so there are no paper numbers to put beside ours. This study "
        "(spec `qiao_wang.md`) measures (1) whether DP-APVI converges to non-private APVI as "
        "the number of trajectories n grows and (2) whether the privacy cost — the gap "
        "between their suboptimalities — shrinks roughly like 1/n."
    )
    add("")
    add(
        f"Regenerate: `privrl reproduce dp-apvi-tabular` ({elapsed:.0f} s on this machine; "
        "`--quick` for a smoke test). Every number below is computed by that command."
    )
    add("")
    add("## Setup")
    add("")
    add(
        f"- **MDPs**: random, S = {cfg.states}, A = {cfg.actions}, H = {cfg.horizon}; "
        "P_h(·|s,a) ~ Dirichlet(1) per step, mean rewards ~ U[0,1] (public, as in the paper), "
        "uniform d1. Each seed draws its own instance."
    )
    add(
        f"- **Data**: behaviour policy with full support, π_h(a|s) = {cfg.min_prob:g} + "
        f"(1 − A·{cfg.min_prob:g})·Dirichlet(1); per seed one dataset of {n_max:,} "
        "trajectories, the size-n dataset is its first n (nested), n on a log grid "
        f"{', '.join(f'{n:,}' for n in cfg.n_grid)}."
    )
    add(
        "- **Algorithms**: APVI; DP-APVI Gaussian at ρ ∈ {"
        + ", ".join(f"{r:g}" for r in cfg.rhos)
        + "} "
        "(ρ-zCDP, σ² = 2H/ρ on n_h(s,a) and n_h(s,a,s')); DP-APVI Laplace (pure ε-DP, "
        "Lap(4H/ε)). Unit: one trajectory; relation: replace-one. Utility failure probability "
        f"δ = {cfg.utility_delta:g} in E and ι."
    )
    add(
        f"- **Laplace ε matched to ρ**: ε is what the accountant (dp-accounting RDP) states for "
        f"the Gaussian run at δ = {cfg.report_delta:g}, so both runs carry the same headline "
        f"(ε, δ = {cfg.report_delta:g}) guarantee — the Laplace run is in fact ε-DP with δ = 0: "
        + ", ".join(
            f"ρ = {v.name.split('ρ=')[1].rstrip(')')} → ε = {v.epsilon:.3f}"
            for v in private
            if v.mechanism == "laplace"
        )
        + "."
    )
    add(
        f"- **Seeds**: {cfg.seeds} evaluation seeds, common random numbers (same data for every "
        "algorithm at (seed, n); the same noise draws for every ρ and bonus at (seed, n, "
        "mechanism)). Mean ± standard error over seeds; the gap to APVI is paired per seed."
    )
    add("- **Metric**: suboptimality v* − v^π̂, exact (backward induction on the true model).")
    add(
        "- **Bonus scale**: theory (bonus_scale = 1: C1 = √2, C2 = 16) and tuned. The tuned "
        "scale is one value per bonus type, shared by APVI and every DP-APVI variant, chosen "
        "from the grid {" + ", ".join(f"{s:g}" for s in cfg.scale_grid) + "} by the mean "
        f"suboptimality over the n grid and all variants on {cfg.tuning_seeds} *separate* MDP "
        f"instances (seeds {TUNING_SEED_OFFSET}+j with their own data) — never on the "
        "evaluation instances or the data being privatised. Chosen: "
        + ", ".join(f"{b} {tuned[b]:g}" for b in cfg.bonuses)
        + "."
    )
    add("")
    add("| bonus | " + " | ".join(f"scale {s:g}" for s in cfg.scale_grid) + " |")
    add("|---|" + "---|" * len(cfg.scale_grid))
    for b in cfg.bonuses:
        row = [f"{r['mean_suboptimality']:.3f}" for r in tuning_table if r["bonus"] == b]
        add(f"| {b} (tuning instances) | " + " | ".join(row) + " |")
    add("")
    add("## Results")
    add("")
    add("![suboptimality vs n](plots/suboptimality_vs_n.png)")
    add("")
    for b in cfg.bonuses:
        add(f"**Suboptimality, {b} bonus, tuned scale ({tuned[b]:g})** (mean ± SE):")
        add("")
        L.extend(_table(agg, variants, b, "tuned", ns))
        add("")
    for b in cfg.bonuses:
        add(f"**Suboptimality, {b} bonus, theory scale (1)**:")
        add("")
        L.extend(_table(agg, variants, b, "theory", ns))
        add("")
    add(
        f"**Trajectories needed to reach mean suboptimality ≤ {TARGET_SUBOPTIMALITY:g}** "
        "(log-linear interpolation on the grid; from that n on it stays below):"
    )
    add("")
    add(
        "| algorithm | "
        + " | ".join(f"{b}, {k}" for b in cfg.bonuses for k in ("tuned", "theory"))
        + " |"
    )
    add("|---|" + "---|" * (2 * len(cfg.bonuses)))
    reach = {(r["variant"], r["bonus"], r["scale_kind"]): r["n"] for r in summary["n_to_reach"]}
    for v in variants:
        cells = []
        for b in cfg.bonuses:
            for k in ("tuned", "theory"):
                n = reach[(v.name, b, k)]
                base = reach[("APVI", b, k)]
                ratio = f" ({n / base:.0f}× APVI)" if (n and base and v.mechanism != "none") else ""
                cells.append(_fmt_n(n) + ratio)
        add(f"| {v.name} | " + " | ".join(cells) + " |")
    add("")

    # -- verdict 1: convergence
    add("### Does DP-APVI converge to APVI as n grows?")
    add("")
    conv = summary["convergence"]
    for kind in ("tuned", "theory"):
        rows = [c for c in conv if c["scale_kind"] == kind]
        ok = [c for c in rows if c["converged_by_n_max"]]
        add(
            f"**{kind.capitalize()} scale.** Gap to APVI at n = {n_max:,} (paired mean ± SE; "
            "'converged' = within max(2 SE, 0.01)):"
        )
        add("")
        add("| algorithm | bonus | gap at n max | largest gap (at n) | converged |")
        add("|---|---|---|---|---|")
        for c in rows:
            add(
                f"| {c['variant']} | {c['bonus']} | {_fmt(c['gap_at_n_max'], c['gap_se_at_n_max'])}"
                f" | {c['max_gap']:.3f} ({c['n_of_max_gap']:,}) | "
                f"{'yes' if c['converged_by_n_max'] else 'no'} |"
            )
        add("")
        if kind == "tuned":
            if len(ok) == len(rows):
                add(
                    f"**Yes** at the tuned scale: every DP-APVI variant is within noise of APVI "
                    f"by n = {n_max:,}."
                )
            else:
                lag = sorted({c["variant"] for c in rows if not c["converged_by_n_max"]})
                add(
                    f"**Yes for {len(ok)} of {len(rows)} configurations** at the tuned scale: "
                    "the gap falls from its maximum (where DP-APVI cannot yet use any pair) by "
                    "orders of magnitude. Not yet within noise at n = "
                    f"{n_max:,}: {', '.join(lag)} — these are still closing (see the table), "
                    "they need more data because their E is largest."
                )
        else:
            if not ok:
                add(
                    f"**No, not within n ≤ {n_max:,}** at the theory constants: DP-APVI's policy "
                    "stays at the value of a policy learned from nothing (every Q̃ clipped to "
                    "0), for every ρ and both mechanisms. This is not a bug but the size of the "
                    "theory bonus: see the investigation below."
                )
            else:
                add(f"{len(ok)} of {len(rows)} configurations converge at the theory scale.")
        add("")

    # -- verdict 2: 1/n
    add("### Does the privacy cost shrink like 1/n?")
    add("")
    add("![privacy gap, log-log](plots/privacy_gap_loglog.png)")
    add("")
    add(
        "Least-squares slope of log(mean gap) on log n, tuned scale, over the grid points past "
        "the E-threshold (mean fraction of (h,s,a) with ñ > E ≥ 95%) whose gap is significantly "
        "positive (mean > 2 SE); 'all' uses every significantly positive point. A slope of −1 "
        "is 1/n."
    )
    add("")
    add("| algorithm | bonus | slope past threshold | n range (points) | slope, all points |")
    add("|---|---|---|---|---|")
    tuned_slopes = [s for s in slopes if s["scale_kind"] == "tuned"]
    for s in tuned_slopes:
        if math.isfinite(s.get("slope", float("nan"))):
            past = f"{s['slope']:.2f} ± {s['slope_se']:.2f}"
            rng = f"{s['slope_n_range'][0]:,}–{s['slope_n_range'][1]:,} ({s['slope_points']})"
        else:
            past, rng = "— (< 3 points)", f"({s['slope_points']})"
        allp = (
            f"{s['slope_all_positive']:.2f} ± {s['slope_all_positive_se']:.2f}"
            if math.isfinite(s.get("slope_all_positive", float("nan")))
            else "—"
        )
        add(f"| {s['variant']} | {s['bonus']} | {past} | {rng} | {allp} |")
    add("")
    finite = [s for s in tuned_slopes if math.isfinite(s.get("slope", float("nan")))]
    if finite:
        lo = min(s["slope"] for s in finite)
        hi = max(s["slope"] for s in finite)
        faster = [s for s in finite if s["slope"] + 2 * s["slope_se"] < -1.0]
        like = [s for s in finite if -1.5 <= s["slope"] <= -0.5]
        slower = [s for s in finite if s["slope"] - 2 * s["slope_se"] > -1.0]
        add(
            f"Measured slopes past the threshold: {lo:.2f} to {hi:.2f}. "
            f"{len(faster)} of {len(finite)} are significantly steeper than −1, "
            f"{len(like)} lie in [−1.5, −0.5], {len(slower)} are significantly shallower."
        )
        add("")
        if len(faster) > len(finite) / 2:
            add(
                "**The gap shrinks, but faster than 1/n in this range** — so the claim "
                "'roughly 1/n' does not hold as stated; what holds is the bound's direction "
                "(the cost is at most a lower-order term and vanishes relative to APVI's "
                "error). The 1/n term of Theorem 3.3 is an *upper bound*, and it is not the "
                "dominant effect at these n."
            )
        elif len(like) >= len(finite) / 2:
            add("**Yes, roughly 1/n** past the threshold.")
        else:
            add("**Not like 1/n**: see the slopes above.")
        add("")
    apvi_sl = {(a["bonus"], a["scale_kind"]): a["slope"] for a in summary["apvi_slopes"]}
    add("**Investigation.** Two effects could make the slope steeper than −1:")
    add("")
    add(
        "1. *Coverage threshold.* DP-APVI treats a pair (h,s,a) as unknown while ñ ≤ E (Q̃ is "
        "zeroed by the C·H penalty, independent of bonus_scale). A pair with behaviour "
        "occupancy d becomes usable at n ≈ E/d, so the fraction of unusable pairs — and "
        "with it most of the gap — falls off like the lower tail of the occupancy "
        "distribution, much faster than 1/n, right after the threshold (the curves drop "
        "from the null-policy value to near APVI within about one decade of n; the mean "
        "known fraction is in `metrics.csv`)."
    )
    bern = apvi_sl.get((cfg.bonuses[0], "tuned"), float("nan"))
    add(
        f"2. *Fast rates of the greedy policy.* APVI's own suboptimality falls with slope "
        f"{bern:.2f} on log-log (tuned scale, {cfg.bonuses[0]}), not −0.5: with strictly "
        "positive action gaps, a policy's suboptimality is roughly quadratic in the "
        "value-estimation error (and zero once the error is below the smallest gap). The "
        "noise adds an error ∝ E/ñ ∝ 1/n to an error ∝ 1/√n, so the suboptimality "
        "difference scales like their product, ∝ n^−1.5, or faster when action gaps are "
        "resolved."
    )
    add("")
    add(
        "To separate the two, we ran DP-APVI *without its noise*: APVI on the exact counts but "
        "with DP-APVI's rule 'ñ ≤ E ⇒ unknown' at the E of each ρ (same bonus and scale). Its "
        "gap to APVI is the cost of the coverage threshold alone; the rest of DP-APVI's gap is "
        f"the noise in P̃ ({cfg.bonuses[0]}, tuned scale; mean over seeds):"
    )
    add("")
    add("| ρ | n | DP-APVI gap | threshold-only gap | threshold share of the gap |")
    add("|---|---|---|---|---|")
    shares = []
    shown = set(ns) | set(_nearest(cfg.n_grid, [3000, 30_000]))
    for r in ablation:
        significant = r["dp_gap"] > 0 and r["dp_gap"] > 2 * r["dp_gap_se"]
        if significant:
            shares.append(r["threshold_only_gap"] / r["dp_gap"])
        if r["n"] not in shown:
            continue
        share = (
            f"{r['threshold_only_gap'] / r['dp_gap']:.0%}" if significant else "— (within noise)"
        )
        add(
            f"| {r['rho']:g} | {r['n']:,} | {_fmt(r['dp_gap'], r['dp_gap_se'])} | "
            f"{r['threshold_only_gap']:.4f} | {share} |"
        )
    add("")
    if shares:
        add(
            "Over every grid point where the DP gap is significant, the threshold alone "
            f"accounts for {min(shares):.0%}–{max(shares):.0%} of it (median "
            f"{float(np.median(shares)):.0%}); the full table is `threshold_ablation` in "
            "`metrics.json`."
        )
        add("")
        g1 = next((v for v in private if v.mechanism == "gaussian" and v.rho == 1.0), None)
        if g1 is not None:
            mid = _nearest(cfg.n_grid, [3000])[0]
            row = _get(agg, g1.name, cfg.bonuses[0], "tuned", mid)
            bias, e_val = row["n_tilde_bias_mean"], row["E"]
        if float(np.median(shares)) > 0.5:
            add(
                "**The ablation settles it: the privacy cost here is mostly the coverage "
                "threshold (effect 1), not the noise in P̃ (effect 2).** Shares above 100% are "
                "real: the noisy ñ is biased upwards (n' is "
                "clipped at 0, which adds positive noise to the many zero next-state counts, and "
                "the projection lets Σx exceed n'_{s,a} by up to E/2)"
                + (
                    f" — for ρ = 1 at n = {mid:,} the mean of ñ − n over (h,s,a) is "
                    f"{bias:.1f} (E = {e_val:.1f})"
                    if g1 is not None
                    else ""
                )
                + " — so with noise a pair crosses ñ > E at a smaller true n than without."
            )
        else:
            add(
                "**The ablation points to the noise in P̃ (effect 2)**: the threshold alone "
                "explains less than half of the gap."
            )
        add("")
    add(
        "So the privacy cost is indeed a lower-order term here, and larger budgets close the "
        "gap sooner, but the log-log slope of the gap is not a clean −1 at these sample sizes."
    )
    add("")

    # -- theory scale
    ratios = [t["n_needed_avg_pair"] / n_max for t in summary["theory_threshold"]]
    add("### The theory-scale bonus at these n")
    add("")
    add(
        "At bonus_scale = 1 the privacy term of the bonus, C2·S·H·E·ι/ñ, exceeds H (so "
        "Q̃ = min(Q^p, H−h+1)⁺ = 0) unless ñ > C2·S·E·ι. With the average pair visited "
        "n/(S·A) times per step, that needs n ≳ C2·S²·A·E·ι:"
    )
    add("")
    add("| ρ | E_ρ | ι | ñ needed per pair | n needed (average pair) |")
    add("|---|---|---|---|---|")
    for t in summary["theory_threshold"]:
        add(
            f"| {t['rho']:g} | {t['E']:.1f} | {t['iota']:.2f} | {t['n_tilde_needed']:,.0f} | "
            f"{t['n_needed_avg_pair']:,.0f} |"
        )
    add("")
    add(
        f"— {min(ratios):.0f}× to {max(ratios):.0f}× beyond n = {n_max:,}. The paper's "
        "Theorem 3.3 "
        "requires n > c1·max{H², E_ρ}/d̄_m·ι with an unspecified constant; these numbers show "
        "what the stated constants (C1 = √2, C2 = 16) imply. This is why the spec exposes "
        "`bonus_scale`. APVI's theory-scale bonus has no E term, so it does learn: it reaches "
        f"mean suboptimality ≤ {TARGET_SUBOPTIMALITY:g} "
        + "; ".join(
            f"at n ≈ {reach[('APVI', b, 'theory')]:,.0f} with the {b} bonus"
            if reach[("APVI", b, "theory")] is not None
            else f"not by n = {n_max:,} with the {b} bonus"
            for b in cfg.bonuses
        )
        + ". The theory-scale gap is DP-APVI's privacy term."
    )
    add("")

    # -- other observations
    add("### Other observations")
    add("")
    b0 = cfg.bonuses[0]
    gauss = [v for v in private if v.mechanism == "gaussian"]
    lap = [v for v in private if v.mechanism == "laplace"]
    pairs = list(zip(gauss, lap, strict=False))
    comp = []
    for g, lp in pairs:
        ng, nl = reach[(g.name, b0, "tuned")], reach[(lp.name, b0, "tuned")]
        comp.append(f"ρ = {g.rho:g}: Gaussian {_fmt_n(ng)} vs Laplace {_fmt_n(nl)}")
    if comp:
        add(
            "- **Gaussian vs Laplace at matched (ε, δ)** (n to reach ≤ "
            f"{TARGET_SUBOPTIMALITY:g}, {b0}, tuned): " + "; ".join(comp) + ". The Laplace "
            "variant pays for pure DP: its per-count noise scales with the L1 sensitivity 2H "
            "(the Gaussian's with the L2 sensitivity √(2H)), and its uniform bound E_ε has a "
            "log(1/δ) where E_ρ has a √log, so E_ε is 2–3× E_ρ here."
        )
    ordered = [reach[(g.name, b0, "tuned")] for g in sorted(gauss, key=lambda v: v.rho or 0)]
    if all(x is not None for x in ordered) and len(ordered) > 1:
        mono = all(a >= b for a, b in itertools.pairwise(ordered))
        add(
            f"- **Larger ρ is closer to APVI**: {'yes' if mono else 'not monotone'} — n to "
            "reach the target "
            + ", ".join(
                f"{_fmt_n(x)} at ρ = {g.rho:g}"
                for x, g in zip(ordered, sorted(gauss, key=lambda v: v.rho or 0), strict=False)
            )
            + ". E_ρ ∝ 1/√ρ, so 10× the budget should need about √10 ≈ 3.2× fewer "
            "trajectories; measured ratios: "
            + ", ".join(f"{a / b:.1f}" for a, b in itertools.pairwise(ordered))
            + "."
        )
    if len(cfg.bonuses) > 1:
        a_b = _get(agg, "APVI", cfg.bonuses[0], "theory", ns[1] if len(ns) > 1 else ns[0])
        a_h = _get(agg, "APVI", cfg.bonuses[1], "theory", ns[1] if len(ns) > 1 else ns[0])
        add(
            f"- **Bernstein vs Hoeffding**: at the theory scale the Bernstein bonus is much "
            f"smaller, e.g. APVI at n = {a_b['n']:,}: "
            f"{_fmt(a_b['suboptimality_mean'], a_b['suboptimality_se'])} "
            f"(Bernstein) vs {_fmt(a_h['suboptimality_mean'], a_h['suboptimality_se'])} "
            "(Hoeffding). At the tuned scale the bonuses are negligible and the two coincide."
        )
    add(
        "- **Pessimism does not pay off on these instances**: the tuning picks "
        f"{', '.join(f'{tuned[b]:g} ({b})' for b in cfg.bonuses)} from the grid (scale "
        f"{min(x for x in cfg.scale_grid if x > 0):g} is its smallest positive value), "
        "essentially the plug-in greedy policy on P̃ restricted to known pairs. With a "
        "full-support behaviour "
        "policy every pair is covered, which is the regime where pessimism has least to add; "
        "the DP-specific part that remains in force is the ñ > E rule."
    )
    add("")
    add("## Files")
    add("")
    add(
        "- `metrics.csv`: mean ± SE of suboptimality and of the paired gap per (algorithm, "
        "bonus, scale, n), with the mean fraction of known pairs and E."
    )
    add("- `results_per_seed.csv`: every run.")
    add(
        "- `metrics.json`: tuning table and choice, slopes, convergence table, n to reach the "
        "target, theory thresholds."
    )
    add(
        "- `privacy.json`: the privacy report of DP-APVI Gaussian ρ = 1 (identical for every "
        "seed and n); `privacy_reports.json`: the report of every private variant."
    )
    add("- `plots/`: `suboptimality_vs_n.png`, `privacy_gap_loglog.png`, `bonus_scale_tuning.png`.")
    add("")
    return "\n".join(L)
