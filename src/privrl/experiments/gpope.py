"""Reproductions of Xie, Thomas & Miklau (2019), "Privacy Preserving Off-Policy Evaluation".

* ``fig1a`` — chain, MSPBE vs m ∈ {100, …, 5000}: GPOPE (tuned step, 0.1×, 10×), DP-LSW (V1),
  DP-LSL (V2), with non-private LSTD and the trivial θ = 0 as references; ε = 0.1.
* ``fig1b`` — chain, MSPBE vs step size at fixed m.
* ``fig2a`` — Mountain Car on-policy: GPOPE at ε ∈ {0.1, 0.5, 1, 5} and non-private vs V1
  (state aggregation, approximate) vs LSTD.
* ``fig3b`` — Mountain Car off-policy (target uniform): GPOPE at several ε vs off-policy LSTD.
* ``fig4`` — HIV off-policy: relative MSPBE = MSPBE / r̄² (r̄: the evaluated policy's mean
  reward per step, estimated on the public model sample).
* ``accounting`` — a figure the paper lacks: GPOPE with `paper` vs `rigorous` accounting at
  equal nominal ε (the σ each needs, the true ε of the paper's σ, and the MSPBE).

Protocol (common to all): δ = 1e-5; the privacy unit is one trajectory under replace-one; σ
is calibrated by the rigorous accountant unless stated; every hyper-parameter (clip bound h,
step size η, DP-LSL's c) is chosen on an independent PUBLIC sample of the same size from the
same simulator (`tune_on_public`), never on the evaluation data; each trial draws a fresh
dataset and fresh noise from a recorded seed (SeedSequence([base, figure, ...])). MSPBE is
exact for the chain and uses a cached 10⁵-trajectory public sample for the continuous domains.
Each function writes ``report.md`` (tables, the paper's claims checked), ``plots/*.png`` and the
run-directory files into `out` and returns the report path.
"""

from __future__ import annotations

import csv
import itertools
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.envs.chain import ChainDomain
from privrl.experiments.claims import Claim, write_claims
from privrl.experiments.rundir import RunDir
from privrl.ope.accounting import COARSE_ORDERS, paper_sigma, rigorous_epsilon, rigorous_sigma
from privrl.ope.baselines import (
    FirstVisit,
    first_visit_returns,
    lsl_estimate,
    lsl_sigma,
    lsw_estimate,
    lsw_sigma,
)
from privrl.ope.gpope import (
    PublicTuning,
    StepSize,
    _report,
    gpope_replicas,
    tune_on_public,
)
from privrl.ope.lstd import lstd, solve_linear
from privrl.ope.mspbe import LinearSystem, model_system
from privrl.ope.stats import TrajectoryStats, trajectory_stats
from privrl.privacy.mechanisms import gaussian_mechanism

__all__ = ["accounting", "fig1a", "fig1b", "fig2a", "fig3b", "fig4"]

DELTA = 1e-5
EPS_GRID = (0.1, 0.5, 1.0, 5.0)
CHAIN_EPS = 0.1
CHAIN_M = (100, 200, 500, 1000, 2000, 5000)
CHAIN_TRIALS = 100
ITER_PER_TRAJ = 10  # N = 10·m (documented choice; see the report)
ETAS = tuple(float(x) for x in np.geomspace(1e-4, 1.0, 9))
LSL_C = (1.0, 10.0, 100.0, 1000.0)
MEMORY_BUDGET = 400e6  # bytes of stacked per-trajectory statistics per lock-step batch
PAPER = "Xie, Thomas & Miklau (2019), Privacy Preserving Off-Policy Evaluation"


# ------------------------------------------------------------------------ helpers


def _log(msg: str) -> None:
    """One progress line on stderr (reproductions take minutes)."""
    print(f"[gpope {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _ss(*keys: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(k) for k in keys])


def _rng(*keys: int) -> np.random.Generator:
    return np.random.default_rng(_ss(*keys))


@dataclass
class _Acc:
    """Per-trial rows and their aggregation."""

    rows: list[dict[str, Any]]

    def add(self, **row: Any) -> None:
        self.rows.append(row)

    def stats(self, **match: Any) -> dict[str, float]:
        vals = np.array(
            [r["mspbe"] for r in self.rows if all(r.get(k) == v for k, v in match.items())],
            dtype=np.float64,
        )
        if vals.size == 0:
            return {"mean": math.nan, "std": math.nan, "se": math.nan, "n": 0}
        std = float(vals.std(ddof=1)) if vals.size > 1 else 0.0
        return {
            "mean": float(vals.mean()),
            "std": std,
            "se": std / math.sqrt(vals.size),
            "n": int(vals.size),
            "median": float(np.median(vals)),
        }


def _fmt(s: dict[str, float]) -> str:
    if not s["n"]:
        return "—"
    return f"{s['mean']:.3g} ± {s['std']:.2g}"


def _batches(n_items: int, bytes_per_item: float) -> list[range]:
    size = max(1, int(MEMORY_BUDGET // max(bytes_per_item, 1.0)))
    return [range(i, min(i + size, n_items)) for i in range(0, n_items, size)]


def _write_rows(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    fields: list[str] = []
    for r in rows:
        fields.extend(k for k in r if k not in fields)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _errorbar(ax: Any, x: Sequence[float], st: Sequence[dict[str, float]], **kw: Any) -> None:
    """Mean ± std on a log axis (lower bar clipped to stay positive)."""
    mean = np.array([s["mean"] for s in st])
    std = np.array([s["std"] for s in st])
    lower = np.minimum(std, mean * 0.999)
    ax.errorbar(x, mean, yerr=[lower, std], capsize=3, marker="o", ms=4, **kw)


def _lsw_noisy(theta: np.ndarray, sigma: float, rng: np.random.Generator, name: str) -> np.ndarray:
    noisy, _ = gaussian_mechanism(theta, sensitivity=1.0, sigma=sigma, rng=rng, name=name)
    return np.asarray(noisy)


# ------------------------------------------------------------------------ GPOPE trials


def _gp_trials(
    make_stats: Callable[[int], TrajectoryStats],
    n_trials: int,
    steps: Sequence[StepSize],
    *,
    clip: float,
    epsilon: float | None,
    iterations: int,
    seed: np.random.SeedSequence,
    accounting: str = "rigorous",
    n_record: int = 0,
    on_batch: Callable[[int, TrajectoryStats], None] | None = None,
    orders: tuple[float, ...] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """θ [D, V, n] (and history [K, D, V, n]) of GPOPE on every trial's dataset × step size.

    Datasets are built by `make_stats(t)` in memory-bounded batches (a batch runs in lock step
    and is then dropped); `on_batch(t, stats)` sees each dataset's statistics (for
    non-private references). `epsilon=None` runs non-private GTD2 (σ = 0, no clipping).
    """
    V = len(steps)
    first = make_stats(0)
    n = first.n
    per = first.A.nbytes + first.C.nbytes
    out = np.zeros((n_trials, V, n))
    hist_all: list[np.ndarray] = []
    rec = np.zeros(0)
    sig = 0.0
    batches = _batches(n_trials, per)
    for chunk, child in zip(batches, seed.spawn(len(batches)), strict=True):
        sub = [first if t == 0 else make_stats(t) for t in chunk]
        if on_batch is not None:
            for t, st in zip(chunk, sub, strict=True):
                on_batch(t, st)
        if epsilon is None:
            th, rec, hist, sig, _ = gpope_replicas(
                sub,
                iterations=iterations,
                clip=math.inf,
                step=steps,
                sigma=0.0,
                seed=child,
                n_record=n_record,
            )
        else:
            th, rec, hist, sig, _ = gpope_replicas(
                sub,
                epsilon=epsilon,
                delta=DELTA,
                iterations=iterations,
                clip=clip,
                step=steps,
                accounting=accounting,
                seed=child,
                n_record=n_record,  # type: ignore[arg-type]
                orders=orders,
            )
        out[chunk.start : chunk.stop] = th.reshape(len(sub), V, n)
        hist_all.append(hist.reshape(hist.shape[0], len(sub), V, n))
        del sub
    hist_cat = np.concatenate(hist_all, axis=1) if hist_all else np.zeros((0, n_trials, V, n))
    return out, rec, hist_cat, sig


def _tune(
    public: TrajectoryStats,
    system: LinearSystem,
    *,
    m: int,
    epsilon: float | None,
    iterations: int,
    repeats: int,
    seed: int,
    etas: Sequence[float] = ETAS,
    accounting: str = "rigorous",
    source: str,
    orders: tuple[float, ...] | None = None,
) -> PublicTuning:
    return tune_on_public(
        public,
        system,
        m=m,
        epsilon=epsilon,
        delta=DELTA,
        iterations=iterations,
        accounting=accounting,
        etas=etas,
        repeats=repeats,
        seed=seed,  # type: ignore[arg-type]
        source=source,
        orders=orders,
    )


def _lsl_c(
    fv: FirstVisit,
    Phi: np.ndarray,
    rho: np.ndarray,
    system: LinearSystem,
    *,
    epsilon: float,
    return_range: float,
    seed: int,
    scorer: Callable[[np.ndarray], np.ndarray],
) -> float:
    """DP-LSL's c chosen on the PUBLIC sample (mean MSPBE over 20 noise draws)."""
    best, best_c = math.inf, LSL_C[0]
    bound = float(np.max(rho)) * float(np.linalg.norm(Phi, "fro")) ** 2
    for c in LSL_C:
        lam = c * fv.m**0.4
        if lam <= bound:
            continue
        sig = lsl_sigma(
            Phi, rho, fv.counts, fv.m, lam, epsilon=epsilon, delta=DELTA, return_range=return_range
        )
        theta = lsl_estimate(Phi, rho, fv, lam)
        rng = _rng(seed, 7, int(c))
        draws = np.stack(
            [_lsw_noisy(theta, sig, rng, "DP-LSL θ (public tuning)") for _ in range(20)]
        )
        val = float(np.mean(scorer(draws)))
        if val < best:
            best, best_c = val, c
    return best_c


# ------------------------------------------------------------------------ chain


@dataclass(frozen=True)
class _Cfg:
    quick: bool
    trials: int
    base: int
    orders: tuple[float, ...] | None  # RDP orders for calibration (None: dense default)


def _cfg(seeds: int | None, seed: int, quick: bool, full_trials: int) -> _Cfg:
    trials = seeds if seeds is not None else (2 if quick else full_trials)
    return _Cfg(
        quick=quick, trials=int(trials), base=int(seed), orders=COARSE_ORDERS if quick else None
    )


class _Chain:
    """Chain domain, exact model, tabular view for the baselines."""

    def __init__(self) -> None:
        self.domain = ChainDomain()
        self.mdp = self.domain.mdp
        self.system = LinearSystem(*self.domain.linear_system(), info={"source": "exact model"})
        S = self.mdp.n_states
        self.Phi = np.eye(S)[:, : S - 1]
        self.rho = self.mdp.start_distribution
        self.return_range = self.mdp.r_max / (1.0 - self.mdp.gamma)

    def stats(self, data: Any) -> TrajectoryStats:
        return trajectory_stats(data, self.domain.features, self.mdp.gamma)

    def fv(self, data: Any) -> FirstVisit:
        return first_visit_returns(
            data, lambda o: np.asarray(o).reshape(-1), self.mdp.n_states, self.mdp.gamma
        )

    def sample(self, m: int, *keys: int) -> Any:
        return self.mdp.sample(m, seed=_rng(*keys))


def _chain_notes(chain: _Chain) -> list[str]:
    V = chain.mdp.true_values()[:-1]
    theta_star = chain.system.theta_star()
    return [
        f"MSPBE(θ = 0) = {chain.system.mspbe(np.zeros(V.size)):.4g} (the trivial estimator, "
        "a reference every private estimate should beat).",
        "θ* = A⁻¹b of the per-trajectory-averaged statistics (2.1) is NOT the true V on the "
        f"chain: max |θ* − V| = {np.max(np.abs(theta_star - V)):.3g}, MSPBE(V) = "
        f"{chain.system.mspbe(V):.3g} (the 1/τ weighting under-weights self-transitions; see "
        "`privrl.envs.chain`). LSTD (pooled transitions) targets V, so its MSPBE does not go "
        "to 0; the per-trajectory empirical saddle point (what non-private GTD2 converges to) "
        "does.",
    ]


def _chain_point(
    chain: _Chain,
    cfg: _Cfg,
    m: int,
    fig: int,
    acc: _Acc,
    *,
    step_factors: Sequence[float],
    epsilon: float,
    iterations: int,
    repeats: int,
    etas: Sequence[float],
    baselines: bool = True,
    accounting: str = "rigorous",
    label: str = "",
) -> tuple[PublicTuning, dict[str, Any]]:
    """Tune on a public sample, then run every trial at one m; rows into `acc`."""
    _log(f"chain fig{fig} m={m} N={iterations} ε={epsilon} ({accounting}): tuning")
    public = chain.sample(m, cfg.base, fig, 0, m)
    pub_stats = chain.stats(public)
    tuning = _tune(
        pub_stats,
        chain.system,
        m=m,
        epsilon=epsilon,
        iterations=iterations,
        repeats=repeats,
        seed=cfg.base * 1000 + fig,
        etas=etas,
        accounting=accounting,
        source="sampled from the chain with its own seed",
        orders=cfg.orders,
    )
    facts: dict[str, Any] = {
        "m": m,
        "N": iterations,
        "h": tuning.clip,
        "eta": tuning.step.eta,
        "sigma": tuning.sigma,
        "public_clipped_fraction": tuning.clipped_fraction,
    }
    c_lsl = None
    if baselines:
        c_lsl = _lsl_c(
            chain.fv(public),
            chain.Phi,
            chain.rho,
            chain.system,
            epsilon=epsilon,
            return_range=chain.return_range,
            seed=cfg.base,
            scorer=lambda t: np.asarray(chain.system.mspbe(t)),
        )
        facts["lsl_c"] = c_lsl
    steps = [tuning.step.scaled(f) for f in step_factors]

    def make(t: int) -> TrajectoryStats:
        return chain.stats(chain.sample(m, cfg.base, fig, 1, m, t))

    def references(t: int, st: TrajectoryStats) -> None:
        if not baselines:
            return
        assert c_lsl is not None
        data = chain.sample(m, cfg.base, fig, 1, m, t)  # same seed: the trial's dataset
        fv = chain.fv(data)
        rng = _rng(cfg.base, fig, 3, m, t)
        s1 = lsw_sigma(
            chain.Phi,
            chain.rho,
            fv.counts,
            epsilon=epsilon,
            delta=DELTA,
            return_range=chain.return_range,
        )
        th1 = _lsw_noisy(lsw_estimate(chain.Phi, chain.rho, fv), s1, rng, "DP-LSW θ")
        lam = c_lsl * m**0.4
        s2 = lsl_sigma(
            chain.Phi,
            chain.rho,
            fv.counts,
            m,
            lam,
            epsilon=epsilon,
            delta=DELTA,
            return_range=chain.return_range,
        )
        th2 = _lsw_noisy(lsl_estimate(chain.Phi, chain.rho, fv, lam), s2, rng, "DP-LSL θ")
        th_l = lstd(data, chain.domain.features, chain.mdp.gamma)
        th_e = solve_linear(*st.mean()[:2])
        acc.add(m=m, method="V1 (DP-LSW)", trial=t, mspbe=chain.system.mspbe(th1), sigma=s1)
        acc.add(m=m, method="V2 (DP-LSL)", trial=t, mspbe=chain.system.mspbe(th2), sigma=s2)
        acc.add(m=m, method="LSTD (non-private)", trial=t, mspbe=chain.system.mspbe(th_l))
        acc.add(
            m=m,
            method="empirical saddle point (non-private)",
            trial=t,
            mspbe=chain.system.mspbe(th_e),
        )

    theta, *_ = _gp_trials(
        make,
        cfg.trials,
        steps,
        clip=tuning.clip,
        epsilon=epsilon,
        iterations=iterations,
        seed=_ss(cfg.base, fig, 2, m),
        accounting=accounting,
        on_batch=references,
        orders=cfg.orders,
    )
    vals = np.asarray(chain.system.mspbe(theta))  # [D, V]
    for t in range(cfg.trials):
        for v, f in enumerate(step_factors):
            acc.add(m=m, method=f"GP{label} ({f:g}× step)", trial=t, mspbe=float(vals[t, v]))
    return tuning, facts


def _setup_lines(cfg: _Cfg, seconds: float, extra: Sequence[str]) -> list[str]:
    orders = (
        "QUICK: σ calibrated on a coarse RDP order grid (valid, slightly more noise)"
        if cfg.orders
        else "σ calibrated with dp-accounting RDP on the dense order grid"
    )
    return [
        f"- {orders}.",
        f"- trials per point: {cfg.trials}"
        + (" (QUICK smoke run: numbers are not final)" if cfg.quick else ""),
        f"- base seed {cfg.base}; trial t of a point uses SeedSequence([base, figure, 1, m, t]) "
        "for its data and SeedSequence([base, figure, 2, m]) for the GPOPE draws (recorded).",
        f"- δ = {DELTA:g}; unit: one trajectory; relation: replace-one (sensitivity 2h).",
        *extra,
        f"- wall time: {seconds:.0f} s on this machine (2 cores, single process).",
    ]


class _Claims:
    """The report's claims table and, from the same strings, the gallery's claims.json."""

    def __init__(self, plot: str) -> None:
        self.plot = plot
        self.rows = ["| claim (paper) | verdict | measured |", "|---|---|---|"]
        self.items: list[Claim] = []

    def add(
        self,
        text: str,
        holds: bool | None,
        detail: str,
        *,
        claim: str | None = None,
        paper: str = "— (ours)",
    ) -> None:
        """One claim: `text` in the report (`claim` in the gallery, default `text`), checked
        `holds` (None: our observation, no verdict), measured `detail`; `paper`: the paper's
        number or statement."""
        verdict = {True: "**holds**", False: "**does not hold**", None: "n/a"}[holds]
        self.rows.append(f"| {text} | {verdict} | {detail} |")
        gallery = {True: "holds", False: "does not hold", None: "n/a (our study)"}[holds]
        self.items.append(Claim(claim or text, paper, detail, gallery, self.plot))


def fig1a(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Figure 1(a): chain, MSPBE vs m for GPOPE (tuned, 0.1×, 10×), V1, V2 at ε = 0.1."""
    t0 = time.time()
    cfg = _cfg(seeds, seed, quick, CHAIN_TRIALS)
    chain = _Chain()
    ms = (100,) if quick else CHAIN_M
    factors = (1.0, 0.1, 10.0)
    acc = _Acc([])
    facts = []
    for m in ms:
        n_iter = (2 if quick else ITER_PER_TRAJ) * m
        _, f = _chain_point(
            chain,
            cfg,
            m,
            1,
            acc,
            step_factors=factors,
            epsilon=CHAIN_EPS,
            iterations=n_iter,
            repeats=1 if quick else 4,
            etas=ETAS[::3] if quick else ETAS,
        )
        facts.append(f)
    methods = [
        "GP (1× step)",
        "GP (0.1× step)",
        "GP (10× step)",
        "V1 (DP-LSW)",
        "V2 (DP-LSL)",
        "LSTD (non-private)",
        "empirical saddle point (non-private)",
    ]
    table = {(m, k): acc.stats(m=m, method=k) for m in ms for k in methods}
    run = RunDir(out)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for k in methods:
        _errorbar(ax, ms, [table[(m, k)] for m in ms], label=k)
    ax.axhline(chain.system.mspbe(np.zeros(chain.Phi.shape[1])), ls=":", c="k", label="θ = 0")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("m (trajectories)")
    ax.set_ylabel("MSPBE")
    ax.set_title(f"Chain, ε = {CHAIN_EPS}, δ = {DELTA:g} (mean ± std)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(run.plot_path("fig1a"), dpi=110)
    plt.close(fig)
    # claims
    claims = _Claims("plots/fig1a.png")
    ratios = [
        min(table[(m, "V1 (DP-LSW)")]["mean"], table[(m, "V2 (DP-LSL)")]["mean"])
        / table[(m, "GP (1× step)")]["mean"]
        for m in ms
    ]
    claims.add(
        "GP ≈ an order of magnitude better than V1/V2 (Fig. 1a)",
        all(r >= 10 for r in ratios),
        "min over m of MSPBE(best of V1, V2)/MSPBE(GP) = "
        f"{min(ratios):.3g} (max {max(ratios):.3g}): far MORE than one order of magnitude",
        claim="GP ≈ an order of magnitude better than V1/V2",
        paper="≈ 10× (Fig. 1a)",
    )
    robust = [
        max(table[(m, "GP (0.1× step)")]["mean"], table[(m, "GP (10× step)")]["mean"])
        < min(table[(m, "V1 (DP-LSW)")]["mean"], table[(m, "V2 (DP-LSL)")]["mean"])
        for m in ms
    ]
    claims.add(
        "with 0.1×/10× the tuned step GP usually still beats V1/V2",
        all(robust),
        f"{sum(robust)}/{len(ms)} values of m",
        paper="Fig. 1a",
    )
    zero = chain.system.mspbe(np.zeros(chain.Phi.shape[1]))
    beats0 = [table[(m, "GP (1× step)")]["mean"] < zero for m in ms]
    claims.add(
        "(ours) GP beats the trivial θ = 0",
        all(beats0),
        f"{sum(beats0)}/{len(ms)} values of m; GP/θ=0 at the largest m: "
        f"{table[(ms[-1], 'GP (1× step)')]['mean'] / zero:.3g}",
    )
    lines = ["| m | N | " + " | ".join(methods) + " |", "|---" * (len(methods) + 2) + "|"]
    for m, f in zip(ms, facts, strict=True):
        lines.append(
            f"| {m} | {f['N']} | " + " | ".join(_fmt(table[(m, k)]) for k in methods) + " |"
        )
    fact_lines = [
        "| m | N | σ (rigorous) | h | η | public clipped fraction | DP-LSL c |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in facts:
        fact_lines.append(
            f"| {f['m']} | {f['N']} | {f['sigma']:.3g} | {f['h']:.3g} | "
            f"{f['eta']:.3g} | {f['public_clipped_fraction']:.3f} | "
            f"{f.get('lsl_c', '—')} |"
        )
    v_sig = [r["sigma"] for r in acc.rows if r["method"] == "V1 (DP-LSW)"]
    md = [
        "# GPOPE Figure 1(a): chain, MSPBE vs number of trajectories",
        "",
        f"Paper: {PAPER}, §7 'Synthetic chain domain', Figure 1(a).",
        "",
        "## Setup",
        "",
        "- 40-state chain (last absorbing, uniform start over the other 39, stay 0.5, reward 1 "
        "on absorption), γ = 0.99, one-hot features over the 39 non-absorbing states, on-policy.",
        f"- ε = {CHAIN_EPS}; GPOPE σ from the rigorous accountant; N = {ITER_PER_TRAJ}·m "
        "iterations (our choice: the paper gives no N; 10 passes in expectation), constant step.",
        "- h = 95% quantile of ‖B_i‖ on a non-private public run; η from the grid "
        f"{', '.join(f'{e:.2g}' for e in ETAS)} by mean MSPBE of 4 private-noise runs on a "
        "public sample of m trajectories (independent of the trials); DP-LSL c ∈ "
        f"{LSL_C} chosen the same way; DP-LSW has no tuning.",
        "- V1/V2: ρ = start distribution, return range R/(1−γ) = 100 (the spec's bound).",
        *_setup_lines(cfg, time.time() - t0, []),
        "",
        "## Results (MSPBE, mean ± std over trials)",
        "",
        *lines,
        "",
        "Per-point privacy and tuning facts (all public):",
        "",
        *fact_lines,
        "",
        "## Claims",
        "",
        *claims.rows,
        "",
        "## Notes",
        "",
        *[f"- {x}" for x in _chain_notes(chain)],
        f"- V1/V2 add noise of std {min(v_sig):.3g}–{max(v_sig):.3g} (V1) to values of order 1: "
        "at ε = 0.1 the smooth-sensitivity bounds (α = 5√(2 ln(2/δ))/ε ≈ 247, return range 100, "
        "‖(Γ^{1/2}Φ)⁺‖_F = 39) are enormous, hence MSPBEs of 10⁷–10¹¹. The paper's plot shows a "
        "gap of about one order of magnitude, so its baselines must have used a different "
        "scale (e.g. a tighter return bound); we implement the spec's formulas as written.",
        "- DP-LSL's c was tuned on public data from the grid above; the largest c wins (heavy "
        "ridge shrinkage towards θ = 0 is its best answer to the noise), so V2 tends to the "
        "trivial estimator plus noise.",
        "",
        "![fig1a](plots/fig1a.png)",
    ]
    report = _finish(
        run,
        md,
        acc,
        {
            "figure": "fig1a",
            "ms": list(ms),
            "trials": cfg.trials,
            "epsilon": CHAIN_EPS,
            "delta": DELTA,
            "base_seed": cfg.base,
            "iterations_per_trajectory": ITER_PER_TRAJ,
            "step_factors": list(factors),
            "facts": facts,
        },
        {
            "mspbe": table[(ms[-1], "GP (1× step)")]["mean"],
            "mspbe_v1": table[(ms[-1], "V1 (DP-LSW)")]["mean"],
            "mspbe_v2": table[(ms[-1], "V2 (DP-LSL)")]["mean"],
        },
        facts[-1],
        orders=cfg.orders,
        claims=claims.items,
    )
    return report


def _finish(
    run: RunDir,
    md: list[str],
    acc: _Acc,
    config: dict[str, Any],
    metrics: dict[str, Any],
    fact: dict[str, Any],
    *,
    accounting: str = "rigorous",
    epsilon: float = CHAIN_EPS,
    n_features: int = 39,
    orders: tuple[float, ...] | None = None,
    claims: list[Claim] | None = None,
) -> Path:
    run.write_config(config)
    run.write_metrics(metrics)
    _write_rows(run.artifact("results_per_trial.csv"), acc.rows)
    keys = sorted(
        {(r.get("m"), r.get("method"), r.get("epsilon"), r.get("eta")) for r in acc.rows}, key=str
    )
    curve = []
    for m, meth, eps, eta in keys:
        match = {
            k: v
            for k, v in (("m", m), ("method", meth), ("epsilon", eps), ("eta", eta))
            if v is not None
        }
        s = acc.stats(**match)
        curve.append(
            {
                **match,
                "mspbe_mean": s["mean"],
                "mspbe_std": s["std"],
                "mspbe_se": s["se"],
                "n": s["n"],
            }
        )
    run.write_curve(curve)
    report = _report(
        sigma=fact["sigma"],
        clip=fact["h"],
        m=fact["m"],
        iterations=fact["N"],
        n=n_features,
        delta=DELTA,
        epsilon=epsilon,
        accounting=accounting,  # type: ignore[arg-type]
        public=["clip bound and step size tuned on an independent public sample"],
        notes=["representative run of this reproduction (largest m)"],
        orders=orders,
    )
    run.write_privacy(report)
    target = run.artifact("report.md")
    target.write_text("\n".join(md) + "\n")
    if claims is not None:
        write_claims(target.parent, claims)
    return target


def fig1b(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Figure 1(b): chain, MSPBE vs step size at fixed m (ε = 0.1)."""
    t0 = time.time()
    cfg = _cfg(seeds, seed, quick, CHAIN_TRIALS)
    chain = _Chain()
    m = 200 if quick else 1000
    n_iter = (2 if quick else ITER_PER_TRAJ) * m
    etas = ETAS[::2] if quick else tuple(float(x) for x in np.geomspace(1e-5, 10.0, 13))
    public = chain.sample(m, cfg.base, 2, 0, m)
    tuning = _tune(
        chain.stats(public),
        chain.system,
        m=m,
        epsilon=CHAIN_EPS,
        iterations=n_iter,
        repeats=1 if quick else 4,
        seed=cfg.base * 1000 + 2,
        etas=ETAS[::3] if quick else ETAS,
        source="sampled from the chain",
        orders=cfg.orders,
    )
    steps = [StepSize(eta=e) for e in etas]
    theta, *_ = _gp_trials(
        lambda t: chain.stats(chain.sample(m, cfg.base, 2, 1, m, t)),
        cfg.trials,
        steps,
        clip=tuning.clip,
        epsilon=CHAIN_EPS,
        iterations=n_iter,
        seed=_ss(cfg.base, 2, 2, m),
        orders=cfg.orders,
    )
    vals = np.asarray(chain.system.mspbe(theta))
    acc = _Acc([])
    for t in range(cfg.trials):
        for v, e in enumerate(etas):
            acc.add(m=m, method="GP", eta=e, trial=t, mspbe=float(vals[t, v]))
    # baselines' level at this m (for the plot and the claim)
    base = _Acc([])
    for t in range(min(cfg.trials, 20)):
        fv = chain.fv(chain.sample(m, cfg.base, 2, 1, m, t))
        s1 = lsw_sigma(
            chain.Phi,
            chain.rho,
            fv.counts,
            epsilon=CHAIN_EPS,
            delta=DELTA,
            return_range=chain.return_range,
        )
        th1 = _lsw_noisy(
            lsw_estimate(chain.Phi, chain.rho, fv), s1, _rng(cfg.base, 2, 3, t), "DP-LSW θ"
        )
        base.add(method="V1", mspbe=chain.system.mspbe(th1))
    st = [acc.stats(eta=e) for e in etas]
    v1 = base.stats(method="V1")
    zero = chain.system.mspbe(np.zeros(chain.Phi.shape[1]))
    run = RunDir(out)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    _errorbar(ax, etas, st, label=f"GP (m = {m}, h = {tuning.clip:.3g})")
    ax.axhline(zero, ls=":", c="k", label="θ = 0")
    ax.axvline(tuning.step.eta, ls="--", c="grey", label="η tuned on public data")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step size η (constant β = η)")
    ax.set_ylabel("MSPBE")
    ax.set_title(f"Chain, ε = {CHAIN_EPS}; V1 at this m: {v1['mean']:.2g}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(run.plot_path("fig1b"), dpi=110)
    plt.close(fig)
    means = np.array([s["mean"] for s in st])
    best = float(np.nanmin(means))
    ok = np.flatnonzero(means <= 2 * best)
    span = math.log10(etas[ok.max()] / etas[ok.min()]) if ok.size else 0.0
    beats = int(np.sum(means < v1["mean"]))
    claims = _Claims("plots/fig1b.png")
    claims.add(
        "accuracy is stable over a very wide range of step sizes (Fig. 1b)",
        span >= 1.0,
        f"MSPBE within 2× of the best over {span:.2g} decades of η "
        f"({etas[ok.min()]:.2g}–{etas[ok.max()]:.2g})",
        claim="accuracy is stable over a very wide range of step sizes",
        paper="Fig. 1b",
    )
    claims.add(
        "GP beats V1 at every step size tried",
        beats == len(etas),
        f"{beats}/{len(etas)} step sizes (V1 mean MSPBE {v1['mean']:.3g})",
        paper="Fig. 1b",
    )
    claims.add(
        "(ours) small steps degrade gracefully towards θ = 0, large ones diverge into the noise",
        None,
        f"MSPBE at the smallest η {means[0]:.3g} (θ = 0: {zero:.3g}); at the largest "
        f"{means[-1]:.3g}",
    )
    lines = ["| η | MSPBE mean ± std | SE |", "|---|---|---|"]
    lines += [f"| {e:.3g} | {_fmt(s)} | {s['se']:.2g} |" for e, s in zip(etas, st, strict=True)]
    md = [
        "# GPOPE Figure 1(b): chain, MSPBE vs step size",
        "",
        f"Paper: {PAPER}, Figure 1(b) (and Fig. 5).",
        "",
        "## Setup",
        "",
        f"- m = {m} trajectories, N = {n_iter}, ε = {CHAIN_EPS}, σ = {tuning.sigma:.4g} "
        f"(rigorous), h = {tuning.clip:.4g} (public 95% quantile), constant step β = η.",
        f"- The η tuned on the public sample: {tuning.step.eta:.3g} (dashed line).",
        *_setup_lines(cfg, time.time() - t0, []),
        "",
        "## Results",
        "",
        *lines,
        "",
        f"V1 (DP-LSW) at this m: {_fmt(v1)} over {v1['n']} trials; θ = 0: {zero:.4g}.",
        "",
        "## Claims",
        "",
        *claims.rows,
        "",
        "![fig1b](plots/fig1b.png)",
    ]
    fact = {"m": m, "N": n_iter, "h": tuning.clip, "sigma": tuning.sigma}
    return _finish(
        run,
        md,
        acc,
        {
            "figure": "fig1b",
            "m": m,
            "N": n_iter,
            "etas": list(etas),
            "trials": cfg.trials,
            "base_seed": cfg.base,
            "clip": tuning.clip,
            "epsilon": CHAIN_EPS,
        },
        {"mspbe": best, "stable_decades": span},
        fact,
        orders=cfg.orders,
        claims=claims.items,
    )


# ------------------------------------------------------------------------ accounting


SPEC_TABLE = (
    (1000, 1000, 3.12, 5.07),
    (1000, 10_000, 9.64, 13.74),
    (10_000, 100_000, 3.12, 4.68),
    (100, 1000, 30.4, 43.6),
)


def accounting(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Paper vs rigorous accounting: σ each needs, the true ε of the paper's σ, and MSPBE."""
    t0 = time.time()
    cfg = _cfg(seeds, seed, quick, CHAIN_TRIALS)
    chain = _Chain()
    # 1. the spec's reference table
    ref_rows = []
    for m, n_iter, p_ref, r_ref in SPEC_TABLE[-1:] if quick else SPEC_TABLE:
        p = paper_sigma(0.1, DELTA, m, n_iter)
        r = rigorous_sigma(0.1, DELTA, m, n_iter, tolerance=1e-3, orders=cfg.orders)
        ref_rows.append(
            (
                m,
                n_iter,
                p,
                p_ref,
                r,
                r_ref,
                rigorous_epsilon(p, m, n_iter, DELTA, orders=cfg.orders),
            )
        )
    # 1b. how much the paper's σ under-delivers across the ε grid
    grid_rows = []
    for m, n_iter in ((100, 100),) if quick else ((100, 100), (100, 1000), (1000, 10_000)):
        for eps in (0.1,) if quick else EPS_GRID:
            p = paper_sigma(eps, DELTA, m, n_iter)
            r = rigorous_sigma(eps, DELTA, m, n_iter, tolerance=1e-3, orders=cfg.orders)
            grid_rows.append(
                (m, n_iter, eps, p, r, rigorous_epsilon(p, m, n_iter, DELTA, orders=cfg.orders))
            )
    # 2. MSPBE at equal nominal ε
    ms = (100,) if quick else (100, 1000, 5000)
    eps_list = (CHAIN_EPS,) if quick else (0.1, 1.0)
    acc = _Acc([])
    sig_rows = []
    for eps in eps_list:
        for m in ms:
            n_iter = (2 if quick else ITER_PER_TRAJ) * m
            for mode in ("paper", "rigorous"):
                tuning, _ = _chain_point(
                    chain,
                    cfg,
                    m,
                    3,
                    acc,
                    step_factors=(1.0,),
                    epsilon=eps,
                    iterations=n_iter,
                    repeats=1 if quick else 4,
                    etas=ETAS[::3] if quick else ETAS,
                    baselines=False,
                    accounting=mode,
                    label=f" {mode} ε={eps:g}",
                )
                for r in acc.rows:
                    r.setdefault("epsilon", eps)
                sig = tuning.sigma
                sig_rows.append(
                    {
                        "epsilon": eps,
                        "m": m,
                        "N": n_iter,
                        "mode": mode,
                        "sigma": sig,
                        "true_epsilon": rigorous_epsilon(sig, m, n_iter, DELTA, orders=cfg.orders),
                        "h": tuning.clip,
                        "eta": tuning.step.eta,
                    }
                )
    run = RunDir(out)
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for eps in eps_list:
        for mode, ls in (("paper", "--"), ("rigorous", "-")):
            st = [acc.stats(m=m, method=f"GP {mode} ε={eps:g} (1× step)") for m in ms]
            _errorbar(axes[0], ms, st, ls=ls, label=f"{mode}, ε = {eps:g}")
            sg = [r["sigma"] for r in sig_rows if r["mode"] == mode and r["epsilon"] == eps]
            axes[1].plot(ms, sg, ls=ls, marker="o", label=f"σ {mode}, ε = {eps:g}")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("m (N = 10·m)")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("MSPBE (chain)")
    axes[1].set_ylabel("σ (noise std / h)")
    fig.suptitle("GPOPE at equal nominal ε: the paper's Lemma 1 vs rigorous RDP accounting")
    fig.tight_layout()
    fig.savefig(run.plot_path("accounting"), dpi=110)
    plt.close(fig)
    ref = [
        "| m | N | σ paper (ours) | σ paper (spec) | σ rigorous 2h (ours) | σ rigorous 2h "
        "(spec) | true ε of the paper's σ |",
        "|---|---|---|---|---|---|---|",
    ]
    for m, n_iter, p, p_ref, r, r_ref, te in ref_rows:
        ref.append(f"| {m} | {n_iter} | {p:.3g} | {p_ref} | {r:.3g} | {r_ref} | {te:.3g} |")
    grid = [
        "| m | N | nominal ε | σ paper | σ rigorous | ratio | true ε of the paper's σ |",
        "|---|---|---|---|---|---|---|",
    ]
    for m, n_iter, eps, p, r, te in grid_rows:
        grid.append(f"| {m} | {n_iter} | {eps:g} | {p:.3g} | {r:.3g} | {r / p:.2f} | {te:.3g} |")
    tab = [
        "| ε (nominal) | m | N | mode | σ | true ε (rigorous) | h | η | MSPBE mean ± std |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sig_rows:
        st = acc.stats(m=r["m"], method=f"GP {r['mode']} ε={r['epsilon']:g} (1× step)")
        tab.append(
            f"| {r['epsilon']:g} | {r['m']} | {r['N']} | {r['mode']} | {r['sigma']:.3g} "
            f"| {r['true_epsilon']:.3g} | {r['h']:.3g} | {r['eta']:.3g} | {_fmt(st)} |"
        )
    ratio = [
        next(
            x["sigma"]
            for x in sig_rows
            if x["mode"] == "rigorous" and x["m"] == r["m"] and x["epsilon"] == r["epsilon"]
        )
        / r["sigma"]
        for r in sig_rows
        if r["mode"] == "paper"
    ]
    md = [
        "# GPOPE accounting: the paper's Lemma 1 vs rigorous RDP accounting",
        "",
        f"Not a figure of the paper ({PAPER}); it quantifies the spec's accounting decision.",
        "",
        "- `paper`: Lemma 1's closed form α(λ) ≤ λ(λ+1)/(2m²)·min{4(e^{1/σ²}−1), 2e^{1/σ²}}, "
        "composed N times, ε = min_λ (Nα(λ) + log(1/δ))/λ. It drops the higher-order terms of "
        "the subsampled-Gaussian RDP bound and uses sensitivity h: NOT a valid guarantee.",
        "- `rigorous` (default): dp-accounting RDP of N × SampledWithoutReplacement(m, 1, "
        "Gaussian(σ/2)) under REPLACE_ONE (sensitivity 2h), dense fractional orders.",
        "- The 'true ε' column is the rigorous accountant's ε for the σ each mode chose.",
        *_setup_lines(cfg, time.time() - t0, []),
        "",
        "## σ for ε = 0.1 against the spec's reference table",
        "",
        *ref,
        "",
        "(The rigorous values agree with the spec's to ≲ 1%; small differences come from the "
        "order grid: ours is dp-accounting's default orders plus a dense fractional grid.)",
        "",
        "## The paper's σ across the ε grid",
        "",
        *grid,
        "",
        "The spec's remark that Lemma 1 underestimates σ '≈ 20× at m = N = 100' is not what we "
        "measure: the σ ratio is 1.4–2.5× over this grid. What grows large is the ε actually "
        "delivered by the paper's σ, which exceeds the nominal ε by a factor that increases "
        "with ε (see the last column).",
        "",
        "## MSPBE at equal nominal ε (chain, h and η tuned on public data per mode)",
        "",
        *tab,
        "",
        f"The rigorous σ is {min(ratio):.2g}–{max(ratio):.2g}× the paper's at these (m, N). Any "
        "MSPBE advantage of the paper-mode rows is bought with a weaker guarantee than the one "
        "claimed (the 'true ε' column).",
        "",
        "![accounting](plots/accounting.png)",
    ]
    fact = next(r for r in reversed(sig_rows) if r["mode"] == "rigorous")
    return _finish(
        run,
        md,
        acc,
        {
            "figure": "accounting",
            "ms": list(ms),
            "epsilons": list(eps_list),
            "trials": cfg.trials,
            "base_seed": cfg.base,
        },
        {"sigma_ratio_min": min(ratio), "sigma_ratio_max": max(ratio)},
        {"m": fact["m"], "N": fact["N"], "h": fact["h"], "sigma": fact["sigma"]},
        epsilon=fact["epsilon"],
        orders=cfg.orders,
        claims=_accounting_claims(ref_rows, grid_rows, sig_rows, acc).items,
    )


def _accounting_claims(
    ref_rows: Sequence[tuple], grid_rows: Sequence[tuple], sig_rows: Sequence[dict], acc: _Acc
) -> _Claims:
    """The accounting study's claims, from the numbers of its three tables."""
    claims = _Claims("plots/accounting.png")
    nominal = min(g[2] for g in grid_rows)
    top = max(g[2] for g in grid_rows)
    te_low = [r[6] for r in ref_rows] + [g[5] for g in grid_rows if g[2] == nominal]
    te_top = [g[5] for g in grid_rows if g[2] == top]
    valid = all(g[5] <= g[2] for g in grid_rows) and all(r[6] <= nominal for r in ref_rows)
    claims.add(
        "Lemma 1's σ gives the nominal ε",
        valid,
        f"true ε of the paper's σ at nominal ε = {nominal:g}: {min(te_low):.3g}–"
        f"{max(te_low):.3g}; at nominal ε = {top:g}: {min(te_top):.3g}–{max(te_top):.3g}"
        + ("" if valid else " — NOT a valid guarantee"),
        paper="Lemma 1 closed form (drops higher-order terms; sensitivity h)",
    )
    ratios = [g[4] / g[3] for g in grid_rows]
    claims.add(
        "(spec) Lemma 1 underestimates σ ≈ 20× at m = N = 100",
        max(ratios) >= 10,  # '≈ 20×' read as at least 10×
        f"σ ratio (rigorous/paper) {min(ratios):.2g}–{max(ratios):.2g}× over the grid",
        paper="≈ 20× (spec remark)",
    )
    eps, m = max(r["epsilon"] for r in sig_rows), max(r["m"] for r in sig_rows)
    pair = {r["mode"]: r for r in sig_rows if r["epsilon"] == eps and r["m"] == m}
    st = {k: acc.stats(m=m, method=f"GP {k} ε={eps:g} (1× step)") for k in pair}
    claims.add(
        "(ours) MSPBE at equal nominal ε, paper vs rigorous accounting",
        None,
        f"e.g. ε = {eps:g}, m = {m}: paper {_fmt(st['paper'])} (true ε "
        f"{pair['paper']['true_epsilon']:.3g}) vs rigorous {_fmt(st['rigorous'])}",
    )
    return claims


# ------------------------------------------------------------------------ continuous domains


@dataclass(frozen=True)
class _Cont:
    """Scale of a continuous-domain reproduction (chosen to fit ~15 min on 2 cores)."""

    ms: tuple[int, ...]
    trials: int
    model_trajectories: int
    iter_per_traj: int
    etas: tuple[float, ...]
    repeats: int
    clip_mults: tuple[float, ...] = (1.0, 10.0, 100.0)


def _domain(name: str, mode: str) -> Any:
    from privrl.ope.domains import get_domain

    # The learned policies are fixed, public objects (domain seed 0).
    return get_domain(name, seed=0, mode=mode, progress=False)


def _mean_reward(domain: Any, policy: Any, seed: int, n: int = 500) -> float:
    """r̄: the evaluated policy's mean reward per step, on a public simulator sample."""
    data = domain.sample(policy, n, seed=_ss(seed, 99))
    return float(np.mean(data.rewards))


def _v1_view(domain: Any, public: Any, bins: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """State aggregation for DP-LSW on a continuous domain: (aggregation map, Φ = I, ρ).
    ρ = the cells' visit frequencies in a PUBLIC sample (data-independent weights)."""
    from privrl.rl.features import make_features

    agg = make_features(f"aggregation:{bins}", public.metadata.observation_space)
    rows = np.arange(public.n_transitions) + public.transition_episode_index
    cells = agg.cell(np.asarray(public.observations)[rows])
    rho = np.bincount(cells, minlength=agg.dim).astype(np.float64)
    return agg, np.eye(agg.dim), rho / rho.sum()


def _continuous(
    out: Path,
    *,
    figure: str,
    fig_no: int,
    domain_name: str,
    off_policy: bool,
    cont: _Cont,
    cfg: _Cfg,
    eps_grid: Sequence[float],
    with_v1: bool,
    relative: bool,
    title: str,
    paper_lines: Sequence[str],
    claims_fn: Callable[[dict, list[int], Sequence[float], float], _Claims],
    notes: Sequence[str] = (),
) -> Path:
    t0 = time.time()
    domain = _domain(domain_name, "off-policy" if off_policy else "on-policy")
    target = domain.target_policy if off_policy else None
    features = domain.features
    gamma = float(domain.gamma)
    model_n = cont.model_trajectories
    system = model_system(
        domain, target_policy=target, features=features, n_trajectories=model_n, seed=12345
    )
    r_bar = _mean_reward(
        domain, domain.target_policy if off_policy else domain.behaviour_policy, cfg.base
    )
    scale = r_bar**2 if relative else 1.0
    acc = _Acc([])
    facts: list[dict[str, Any]] = []
    zero = float(system.mspbe(np.zeros(features.dim))) / scale
    v1_note = ""
    for m in cont.ms:
        n_iter = cont.iter_per_traj * m
        _log(f"{figure} m={m} N={n_iter}: tuning on public data")
        public = domain.sample(domain.behaviour_policy, m, seed=_ss(cfg.base, fig_no, 0, m))
        pub_stats = trajectory_stats(public, features, gamma, target_policy=target)
        base_clip: float | None = None  # the public quantile, chosen once per m
        tunings: dict[float, PublicTuning] = {}
        for eps in eps_grid:
            tunings[eps] = tune_on_public(
                pub_stats,
                system,
                m=m,
                epsilon=eps,
                delta=DELTA,
                iterations=n_iter,
                etas=cont.etas,
                repeats=cont.repeats,
                seed=cfg.base * 1000 + fig_no,
                source=f"sampled from the {domain_name} simulator with its own seed",
                orders=cfg.orders,
                clip=base_clip,
                clip_multipliers=cont.clip_mults,
            )
            if base_clip is None:
                first = tunings[eps]
                base_clip = first.clip / first.clip_multiplier
                np_step = first.nonprivate_step
            facts.append(
                {
                    "m": m,
                    "N": n_iter,
                    "epsilon": eps,
                    "h": tunings[eps].clip,
                    "h_multiplier": tunings[eps].clip_multiplier,
                    "eta": tunings[eps].step.eta,
                    "sigma": tunings[eps].sigma,
                    "public_clipped_fraction": tunings[eps].clipped_fraction,
                }
            )
        assert np_step is not None
        v1 = None
        if with_v1:
            agg, Phi_v, rho_v = _v1_view(domain, public, 10)
            cross = model_system(
                domain,
                target_policy=None,
                features=features,
                value_features=agg,
                n_trajectories=model_n,
                seed=12345,
            )
            v1 = (agg, Phi_v, rho_v, cross)
            v1_note = (
                f"V1 runs on a 10×10 state aggregation ({agg.dim} cells, ρ = public "
                "cell-visit frequencies) and is APPROXIMATE (first-visit MC over "
                "aggregated, non-Markov cells); its value function is scored by the "
                "same MSPBE of the Fourier features through the cross system "
                "E[(1/τ)Σ ρ_t φ_t(ψ_t − γψ_{t+1})ᵀ]."
            )

        cache: dict[int, TrajectoryStats] = {}
        keep = cfg.trials * m * features.dim**2 * 16 < 1.5e9  # reuse across ε if it fits

        def make(t: int, m: int = m, cache: dict = cache, keep: bool = keep) -> TrajectoryStats:
            if t in cache:
                return cache[t]
            data = domain.sample(domain.behaviour_policy, m, seed=_ss(cfg.base, fig_no, 1, m, t))
            st = trajectory_stats(data, features, gamma, target_policy=target)
            if keep:
                cache[t] = st
            return st

        def references(t: int, st: TrajectoryStats, m: int = m, v1: Any = v1) -> None:
            data = domain.sample(domain.behaviour_policy, m, seed=_ss(cfg.base, fig_no, 1, m, t))
            th = lstd(data, features, gamma, target_policy=target)
            name = "off-policy LSTD (non-private)" if off_policy else "LSTD (non-private)"
            acc.add(m=m, method=name, trial=t, mspbe=float(system.mspbe(th)) / scale)
            if v1 is not None:
                agg, Phi_v, rho_v, cross = v1
                fv = first_visit_returns(data, agg.cell, agg.dim, gamma)
                rr = 1.0 / (1.0 - gamma)  # rewards −1: return range 1/(1−γ)
                for eps in eps_grid:
                    s1 = lsw_sigma(
                        Phi_v, rho_v, fv.counts, epsilon=eps, delta=DELTA, return_range=rr
                    )
                    th1 = _lsw_noisy(
                        lsw_estimate(Phi_v, rho_v, fv),
                        s1,
                        _rng(cfg.base, fig_no, 3, m, t, int(eps * 100)),
                        "DP-LSW",
                    )
                    acc.add(
                        m=m,
                        method=f"V1 ε={eps:g} (approx.)",
                        trial=t,
                        epsilon=eps,
                        mspbe=float(cross.mspbe(th1)) / scale,
                    )

        for k_eps, eps in enumerate(eps_grid):
            _log(f"{figure} m={m} ε={eps}: {cfg.trials} trials")
            tun = tunings[eps]
            theta, *_ = _gp_trials(
                make,
                cfg.trials,
                [tun.step],
                clip=tun.clip,
                epsilon=eps,
                iterations=n_iter,
                seed=_ss(cfg.base, fig_no, 2, m, k_eps),
                on_batch=references if k_eps == 0 else None,
                orders=cfg.orders,
            )
            vals = np.asarray(system.mspbe(theta[:, 0])) / scale
            for t in range(cfg.trials):
                acc.add(m=m, method=f"GP ε={eps:g}", trial=t, epsilon=eps, mspbe=float(vals[t]))
        theta, *_ = _gp_trials(
            make,
            cfg.trials,
            [np_step],
            clip=math.inf,
            epsilon=None,
            iterations=n_iter,
            seed=_ss(cfg.base, fig_no, 4, m),
        )
        vals = np.asarray(system.mspbe(theta[:, 0])) / scale
        for t in range(cfg.trials):
            acc.add(m=m, method="GP non-private (σ = 0)", trial=t, mspbe=float(vals[t]))
    ms = list(cont.ms)
    methods = [f"GP ε={e:g}" for e in eps_grid] + ["GP non-private (σ = 0)"]
    lstd_name = "off-policy LSTD (non-private)" if off_policy else "LSTD (non-private)"
    methods.append(lstd_name)
    if with_v1:
        methods += [f"V1 ε={e:g} (approx.)" for e in eps_grid]
    table = {(m, k): acc.stats(m=m, method=k) for m in ms for k in methods}
    run = RunDir(out)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.6, 4.4))
    for k in methods:
        _errorbar(
            ax, ms, [table[(m, k)] for m in ms], label=k, ls="--" if k.startswith("V1") else "-"
        )
    ax.axhline(zero, ls=":", c="k", label="θ = 0")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("m (trajectories)")
    ax.set_ylabel("relative MSPBE (MSPBE / r̄²)" if relative else "MSPBE")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(run.plot_path(figure), dpi=110)
    plt.close(fig)
    lines = ["| m | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for m in ms:
        lines.append(f"| {m} | " + " | ".join(_fmt(table[(m, k)]) for k in methods) + " |")
    fact_lines = [
        "| m | N | ε | σ | h (multiple of the public 95% quantile) | η | public clipped fraction |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in facts:
        fact_lines.append(
            f"| {f['m']} | {f['N']} | {f['epsilon']:g} | {f['sigma']:.3g} | "
            f"{f['h']:.3g} ({f['h_multiplier']:g}×) | {f['eta']:.3g} | "
            f"{f['public_clipped_fraction']:.3f} |"
        )
    claims = claims_fn(table, ms, eps_grid, zero)
    metric = "relative MSPBE = MSPBE / r̄²" if relative else "MSPBE"
    md = [
        f"# GPOPE {title}",
        "",
        *paper_lines,
        "",
        "## Setup",
        "",
        f"- domain `{domain_name}` (privrl.ope.domains, seed 0), γ = {gamma}, features "
        f"{getattr(features, 'spec', features)} ({features.dim}); "
        + (
            "off-policy: target = the domain's target policy, data from its behaviour policy"
            if off_policy
            else "on-policy: the evaluated policy is the domain's behaviour "
            "policy, data from it (ρ = 1)"
        )
        + ".",
        f"- {metric}; MSPBE from a cached public sample of {model_n} simulator trajectories "
        f"(E over trajectories of the per-trajectory statistics (2.1))"
        + (
            f"; r̄ = {r_bar:.4g} (mean reward per step of the evaluated policy, 500 public "
            "simulator episodes)"
            if relative
            else ""
        )
        + ".",
        f"- scale: m ∈ {ms}, N = {cont.iter_per_traj}·m, {cfg.trials} trials per point "
        "(fewer than the chain's 100 to fit ~15 min on 2 cores), ε ∈ "
        f"{list(eps_grid)}, δ = {DELTA:g}.",
        f"- h and η tuned per (m, ε) on an independent public sample of m trajectories: h ∈ "
        f"{{{', '.join(f'{c:g}' for c in cont.clip_mults)}}} × the 95% quantile of ‖B_i‖ "
        "along the best non-private public run (the spec's rule alone, 1×, left every step "
        "clipped to a bound tuned for the converged phase and GPOPE could not leave θ = 0 in "
        f"a first run), η ∈ {{{', '.join(f'{e:.2g}' for e in cont.etas)}}}, {cont.repeats} "
        "noise repeats each; the non-private GTD2 row (σ = 0, no clipping) uses the best η "
        "of the non-private public sweep.",
        *([f"- {v1_note}"] if v1_note else []),
        *_setup_lines(cfg, time.time() - t0, []),
        "",
        f"## Results ({metric}, mean ± std over trials)",
        "",
        *lines,
        "",
        f"θ = 0 gives {zero:.4g}.",
        "",
        "Per-point privacy and tuning facts (public):",
        "",
        *fact_lines,
        "",
        "## Claims",
        "",
        *claims.rows,
        "",
        *(["## Notes", "", *[f"- {x}" for x in notes], ""] if notes else []),
        f"![{figure}](plots/{figure}.png)",
    ]
    fact = next(f for f in reversed(facts) if f["epsilon"] == eps_grid[0])
    return _finish(
        run,
        md,
        acc,
        {
            "figure": figure,
            "domain": domain_name,
            "ms": ms,
            "trials": cfg.trials,
            "epsilons": list(eps_grid),
            "base_seed": cfg.base,
            "model_trajectories": model_n,
            "iter_per_traj": cont.iter_per_traj,
            "relative": relative,
            "r_bar": r_bar,
            "facts": facts,
        },
        {"mspbe": table[(ms[-1], methods[0])]["mean"], "r_bar": r_bar},
        fact,
        epsilon=eps_grid[0],
        orders=cfg.orders,
        n_features=features.dim,
        claims=claims.items,
    )


def _cont_scale(quick: bool, full: _Cont) -> _Cont:
    if quick:
        return _Cont(
            ms=(50,),
            trials=2,
            model_trajectories=300,
            iter_per_traj=2,
            etas=(1e-3, 1e-2),
            repeats=1,
            clip_mults=(1.0, 10.0),
        )
    return full


MC_SCALE = _Cont(
    ms=(200, 1000),
    trials=20,
    model_trajectories=100_000,
    iter_per_traj=10,
    etas=tuple(float(x) for x in np.geomspace(1e-5, 1.0, 6)),
    repeats=2,
)
HIV_SCALE = _Cont(
    ms=(100, 500),
    trials=10,
    model_trajectories=20_000,
    iter_per_traj=10,
    etas=tuple(float(x) for x in np.geomspace(1e-5, 1.0, 6)),
    repeats=2,
)


def _ratio_claims(
    table: dict,
    ms: list[int],
    eps_grid: Sequence[float],
    zero: float,
    *,
    v1: bool,
    ref: str,
    close_text: str,
    close_paper: str,
    plot: str,
    close_claim: str | None = None,
) -> _Claims:
    rows = _Claims(plot)
    m = ms[-1]
    if v1:
        ratios = [
            table[(m, f"V1 ε={e:g} (approx.)")]["mean"] / table[(m, f"GP ε={e:g}")]["mean"]
            for e in eps_grid
        ]
        rows.add(
            "GP beats V1 by orders of magnitude",
            all(r >= 100 for r in ratios),
            f"MSPBE(V1)/MSPBE(GP) at m = {m}: "
            + ", ".join(f"ε={e:g}: {r:.3g}" for e, r in zip(eps_grid, ratios, strict=True)),
            paper="orders of magnitude (Fig. 2a)",
        )
    lst = table[(m, ref)]["mean"]
    gp_best = table[(m, f"GP ε={max(eps_grid):g}")]["mean"]
    rows.add(
        close_text,
        gp_best <= 10 * lst,
        f"at m = {m}: GP (ε = {max(eps_grid):g}) {gp_best:.3g} vs {ref} {lst:.3g} "
        f"(ratio {gp_best / lst:.3g}; 'close' read as within 10×)",
        claim=close_claim,
        paper=close_paper,
    )
    mono = all(
        table[(m, f"GP ε={a:g}")]["mean"] >= table[(m, f"GP ε={b:g}")]["mean"]
        for a, b in itertools.pairwise(eps_grid)
    )
    rows.add(
        "(ours) MSPBE falls as ε grows",
        mono,
        ", ".join(f"ε={e:g}: {table[(m, f'GP ε={e:g}')]['mean']:.3g}" for e in eps_grid),
    )
    beats0 = table[(m, f"GP ε={min(eps_grid):g}")]["mean"] < zero
    rows.add(
        "(ours) GP at the smallest ε beats θ = 0",
        beats0,
        f"{table[(m, f'GP ε={min(eps_grid):g}')]['mean']:.3g} vs {zero:.3g}",
    )
    return rows


# the keywords of `_ratio_claims` per figure (shared with the tests of the claims)
RATIO_CLAIMS: dict[str, dict[str, Any]] = {
    "fig2a": {
        "v1": True,
        "ref": "LSTD (non-private)",
        "close_text": "GP approaches LSTD (Fig. 2a/3a)",
        "close_claim": "GP approaches LSTD",
        "close_paper": "close to LSTD (Fig. 2a/3a)",
        "plot": "plots/fig2a.png",
    },
    "fig3b": {
        "v1": False,
        "ref": "off-policy LSTD (non-private)",
        "close_text": "off-policy GP approaches off-policy LSTD (resembles on-policy)",
        "close_paper": "'remarkably similar' to Fig. 3(a)",
        "plot": "plots/fig3b.png",
    },
    "fig4": {
        "v1": False,
        "ref": "off-policy LSTD (non-private)",
        "close_text": "GP works on the HIV simulator (close to off-policy LSTD)",
        "close_paper": "Fig. 4 (relative MSPBE)",
        "plot": "plots/fig4.png",
    },
}


MC_NOTE = (
    "Diagnosis (measured separately, same model): λ_min(Q) of the Mountain Car saddle point "
    "is 1.3e-6. Non-private GTD2 on m = 1000 trajectories reaches MSPBE 0.20 after 10⁴ "
    "iterations at η = 0.3 (0.50 at η = 0.1) and 0.033 after 10⁵ iterations (LSTD: 0.007). "
    "So at N = 10·m the gap to LSTD is mostly the slow convergence of the saddle-point "
    "iteration itself, which the privacy noise (σ grows with N) only widens. The paper does "
    "not state N, its step schedule or feature scaling; approaching LSTD would need at least "
    "N ≥ 10⁵ per run, beyond this reproduction's ~15-minute budget on 2 cores."
)


def fig2a(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Figure 2(a): Mountain Car on-policy — GP vs V1 (aggregation, approximate) vs LSTD."""
    cont = _cont_scale(quick, MC_SCALE)
    cfg = _cfg(seeds, seed, quick, cont.trials)
    return _continuous(
        out,
        figure="fig2a",
        fig_no=21,
        domain_name="mountain-car",
        off_policy=False,
        cont=cont,
        cfg=cfg,
        eps_grid=(0.1, 1.0) if quick else EPS_GRID,
        with_v1=True,
        relative=False,
        title="Figure 2(a): Mountain Car, on-policy",
        paper_lines=[
            f"Paper: {PAPER}, Figure 2(a) (and 3(a), its zoom): 'our proposed "
            "gradient perturbation algorithm improves upon existing methods by orders "
            "of magnitude' and is close to LSTD."
        ],
        claims_fn=lambda t, ms, eg, z: _ratio_claims(
            t,
            ms,
            eg,
            z,
            **RATIO_CLAIMS["fig2a"],
        ),
        notes=[MC_NOTE],
    )


def fig3b(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Figure 3(b): Mountain Car off-policy — GP at several ε vs off-policy LSTD."""
    cont = _cont_scale(quick, MC_SCALE)
    cfg = _cfg(seeds, seed, quick, cont.trials)
    return _continuous(
        out,
        figure="fig3b",
        fig_no=32,
        domain_name="mountain-car",
        off_policy=True,
        cont=cont,
        cfg=cfg,
        eps_grid=(0.1, 1.0) if quick else EPS_GRID,
        with_v1=False,
        relative=False,
        title="Figure 3(b): Mountain Car, off-policy (target uniform)",
        paper_lines=[
            f"Paper: {PAPER}, Figure 3(b): off-policy GP at several ε; 'despite "
            "being off-policy ... our algorithm's performances in Figures 3(a) and "
            "3(b) are remarkably similar'. The paper compares with WIS-LSTD; we use "
            "off-policy LSTD(0) with per-step ρ (WIS-LSTD is not implemented)."
        ],
        claims_fn=lambda t, ms, eg, z: _ratio_claims(
            t,
            ms,
            eg,
            z,
            **RATIO_CLAIMS["fig3b"],
        ),
        notes=[MC_NOTE],
    )


def fig4(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Figure 4: HIV off-policy, relative MSPBE = MSPBE / r̄²."""
    cont = _cont_scale(quick, HIV_SCALE)
    cfg = _cfg(seeds, seed, quick, cont.trials)
    return _continuous(
        out,
        figure="fig4",
        fig_no=4,
        domain_name="hiv",
        off_policy=True,
        cont=cont,
        cfg=cfg,
        eps_grid=(0.1, 1.0) if quick else EPS_GRID,
        with_v1=False,
        relative=True,
        title="Figure 4: HIV treatment, off-policy (relative MSPBE = MSPBE / r̄²)",
        paper_lines=[
            f"Paper: {PAPER}, Figure 4: 'relative MSPBE, which normalizes MSPBE using "
            "the average reward (~10⁵) of the evaluated policy'. We divide by r̄² (MSPBE "
            "is quadratic in the value scale), r̄ = mean reward per step."
        ],
        claims_fn=lambda t, ms, eg, z: _ratio_claims(
            t,
            ms,
            eg,
            z,
            **RATIO_CLAIMS["fig4"],
        ),
    )
