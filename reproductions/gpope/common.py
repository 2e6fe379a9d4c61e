"""Shared plumbing of the GPOPE reproductions: constants, trials, tuning, tables, claims."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.ope import LinearSystem, PublicTuning, StepSize, TrajectoryStats, tune_on_public
from privrl.ope.accounting import COARSE_ORDERS
from privrl.ope.baselines import FirstVisit, lsl_estimate, lsl_sigma
from privrl.ope.gpope import gpope_replicas, gpope_report
from privrl.privacy import NoiseSource, gaussian_mechanism
from privrl.runs.rundir import RunDir, write_rows
from reproductions.claims import VERDICT_OF_KIND, Claim, derive_kind, write_claims

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
    """The study's generator for `keys` (data and noise alike): a simulation on synthetic
    chains, so its noise is insecure and repeatable — numpy's stream of `SeedSequence(keys)`."""
    return NoiseSource.insecure(_ss(*keys)).generator()


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


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def mspbe_figure(
    path: Path,
    x: Sequence[float],
    series: dict[str, Sequence[dict[str, float]]],
    *,
    zero: float,
    title: str,
    xlabel: str,
    ylabel: str = "MSPBE",
    reference: str | None = None,
    off_scale: Sequence[str] = (),
    marks: Sequence[tuple[float, str]] = (),
) -> None:
    """The standard GPOPE plot, one panel of :func:`plots.mspbe_panels`: mean ± std per series
    on log axes, θ = 0 as a dotted line, the series `reference` (LSTD) as a dashed grey line
    through its means, the y range from the best mean to θ = 0, series in `off_scale` (V1/V2)
    as an arrow at the top edge with their values, the legend outside the axes. `marks`:
    vertical dashed lines (x, label), e.g. the tuned step size."""
    from reproductions.gpope.plots import Panel, mspbe_panels

    drawn = {k: st for k, st in series.items() if k != reference}
    refs = {} if reference is None else {reference: [s["mean"] for s in series[reference]]}
    panel = Panel(
        x=list(x),
        series=drawn,
        zero=zero,
        title=title,
        xlabel=xlabel,
        references=refs,
        off_scale=tuple(off_scale),
        marks=tuple(marks),
    )
    mspbe_panels(path, [panel], ylabel=ylabel)


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
                noise=NoiseSource.insecure(child),
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
                noise=NoiseSource.insecure(child),
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
        f"- wall time: {seconds:.0f} s on this machine (2 cores; units on the sweep runner).",
    ]


class _Claims:
    """The report's claims table and, from the same strings, the gallery's claims (each with
    its kind of verdict, `Claim.kind`), written by `_finish` with `write_claims`."""

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
        vacuous: bool = False,
        kind: str | None = None,
    ) -> None:
        """One claim: `text` in the report (`claim` in the gallery, default `text`), checked
        `holds` (None: our observation, no verdict), measured `detail`; `paper`: the paper's
        number or statement; `vacuous`: the comparison says nothing because GP is no better than the
        trivial θ = 0 (reported as vacuous, gallery verdict "inconclusive"); `kind`: the kind
        of verdict when it is not the verdict's own (`derive_kind`)."""
        verdict = {True: "**holds**", False: "**does not hold**", None: "n/a"}[holds]
        gallery = {True: "holds", False: "does not hold", None: "n/a (our study)"}[holds]
        if vacuous:  # holds only because GP does not beat θ = 0: no evidence either way
            verdict, gallery = "**vacuous**", "inconclusive"
            detail = f"{detail} — vacuous: GP does not beat θ = 0 there"
        self.rows.append(f"| {text} | {verdict} | {detail} |")
        kind = kind or derive_kind(gallery, "vacuous" if vacuous else "")
        self.items.append(Claim(claim or text, paper, detail, gallery, self.plot, kind=kind))

    def add_kind(
        self,
        text: str,
        kind: str,
        detail: str,
        *,
        claim: str | None = None,
        paper: str = "— (ours)",
    ) -> None:
        """One claim whose report row states its kind (one of `KINDS`) as the verdict; the
        gallery's verdict follows from the kind (`VERDICT_OF_KIND`)."""
        if kind not in VERDICT_OF_KIND:
            raise ValueError(f"kind {kind!r} is not one of {', '.join(VERDICT_OF_KIND)}")
        self.rows.append(f"| {text} | **{kind}** | {detail} |")
        verdict = VERDICT_OF_KIND[kind]
        self.items.append(Claim(claim or text, paper, detail, verdict, self.plot, kind=kind))


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
    write_rows(run.artifact("results_per_trial.csv"), acc.rows)
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
    report = gpope_report(
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
