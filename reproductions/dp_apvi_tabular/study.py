"""The DP-APVI tabular study's computations: instances, learners, tuning, aggregation, slopes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privrl.envs import TabularMDP, behaviour_policy_full_support
from privrl.envs.tabular import Episodes
from privrl.offline import APVIConfig
from privrl.offline.apvi import PrivacyConfig, dp_apvi_from_counts, empirical_counts, noise_plan
from privrl.privacy import NoiseSource, PrivacyReport

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


@dataclass(frozen=True)
class Findings:
    """What the study computed: the summaries and the report are built from it alone."""

    cfg: StudyConfig
    variants: list[Variant]
    agg: list[dict[str, Any]]  # mean ± SE per (variant, bonus, scale, n), see `_aggregate`
    slopes: list[dict[str, Any]]  # `_fit_slope` per private variant, bonus and scale kind
    tuned: dict[str, float]  # the chosen bonus scale per bonus type
    tuning_table: list[dict[str, Any]]
    ablation: list[dict[str, Any]]  # `_aggregate_ablation`
    elapsed: float


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
        # A simulation on synthetic MDPs: the noise is repeatable (and the runs uncertified).
        return NoiseSource.insecure([*self.noise_ss.generate_state(2), n, key]).generator()


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


def _root() -> Any:
    """The folder of the study's unit results in the project cache (each file is named by its
    unit's full configuration, `keyed_unit`)."""
    from privrl.data import cache_dir

    return cache_dir() / "reproduce" / "dp-apvi-tabular"


def _config_of(cfg: dict[str, Any]) -> StudyConfig:
    return StudyConfig(**cfg)


def unit_tuning(cfg: dict[str, Any], j: int) -> list[dict[str, Any]]:
    """Tuning instance j (seed TUNING_SEED_OFFSET + j): every variant at every grid scale."""
    c = _config_of(cfg)
    settings = [(b, "grid", s) for b in c.bonuses for s in c.scale_grid]
    return _evaluate(_Instance(c, TUNING_SEED_OFFSET + j), c, _variants(c), settings)


def unit_seed(cfg: dict[str, Any], seed: int, tuned: dict[str, float]) -> dict[str, Any]:
    """Evaluation seed i: every variant at the theory and the tuned scales, and the
    threshold-only ablation."""
    c = _config_of(cfg)
    inst = _Instance(c, seed)
    settings = [(b, "theory", 1.0) for b in c.bonuses] + [(b, "tuned", tuned[b]) for b in c.bonuses]
    return {
        "rows": _evaluate(inst, c, _variants(c), settings),
        "ablation": _threshold_ablation(inst, c, c.bonuses[0], tuned),
    }


def _tune(
    cfg: StudyConfig, *, backend: str = "local", workers: int | None = None
) -> tuple[dict[str, float], list[dict[str, Any]], int]:
    """Pick one bonus scale per bonus type on separate instances (never the evaluation data);
    each tuning instance is a function cell (`unit_tuning`) on the sweep runner."""
    from dataclasses import asdict

    from privrl.runs.units import keyed_unit, log_progress, run_units

    target = f"{__name__}:unit_tuning"
    cache_key = "privrl.experiments.dp_apvi_tabular.study:unit_tuning"  # the name cached under
    units = [
        keyed_unit(_root(), f"tuning{j}", target, {"cfg": asdict(cfg), "j": j}, key=cache_key)
        for j in range(cfg.tuning_seeds)
    ]
    progress = log_progress("dp-apvi-tabular: tuning the bonus scale")
    results = run_units(units, backend=backend, workers=workers, progress=progress)
    rows: list[dict[str, Any]] = [r for res in results for r in res]
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


def _get(agg: list[dict[str, Any]], variant: str, bonus: str, kind: str, n: int) -> dict:
    for r in agg:
        if (r["variant"], r["bonus"], r["scale_kind"], r["n"]) == (variant, bonus, kind, n):
            return r
    raise KeyError((variant, bonus, kind, n))
