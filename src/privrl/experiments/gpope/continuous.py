"""GPOPE on the continuous domains: Figures 2(a), 3(b) (Mountain Car) and 4 (HIV)."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privrl.experiments.gpope.common import (
    DELTA,
    EPS_GRID,
    PAPER,
    _Acc,
    _Cfg,
    _cfg,
    _Claims,
    _finish,
    _fmt,
    _gp_trials,
    _log,
    _lsw_noisy,
    _rng,
    _setup_lines,
    _ss,
    mspbe_figure,
)
from privrl.experiments.rundir import RunDir
from privrl.ope.baselines import (
    first_visit_returns,
    lsw_estimate,
    lsw_sigma,
)
from privrl.ope.gpope import (
    PublicTuning,
    tune_on_public,
)
from privrl.ope.lstd import lstd
from privrl.ope.mspbe import model_system
from privrl.ope.stats import TrajectoryStats, trajectory_stats


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
    mspbe_figure(
        run.plot_path(figure),
        ms,
        {k: [table[(m, k)] for m in ms] for k in methods},
        zero=zero,
        title=title,
        xlabel="m (trajectories)",
        ylabel="relative MSPBE (MSPBE / r̄²)" if relative else "MSPBE",
        reference=lstd_name,
        off_scale=[k for k in methods if k.startswith("V1")],
    )
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
    # GP against θ = 0 first: comparisons with V1 or LSTD mean little where GP is no better
    # than the trivial estimator ('better' read as at least 10% below it)
    gp0 = {e: table[(m, f"GP ε={e:g}")]["mean"] / zero for e in eps_grid}
    vacuous = any(r > 0.9 for r in gp0.values())
    rows.add(
        "(ours) GP beats θ = 0 at every ε",
        not vacuous,
        f"MSPBE(GP)/MSPBE(θ = 0) at m = {m}: "
        + ", ".join(f"ε={e:g}: {r:.3g}" for e, r in gp0.items())
        + "; 'beats' read as at least 10% below",
    )
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
            vacuous=vacuous,
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


@dataclass(frozen=True)
class FigureSpec:
    """What differs between Figures 2(a), 3(b) and 4: domain, policy mode, scale, text."""

    figure: str
    fig_no: int  # the figure's key in the seed sequences (recorded in the reports)
    domain_name: str
    off_policy: bool
    scale: _Cont
    with_v1: bool
    relative: bool
    title: str
    paper_line: str
    notes: tuple[str, ...] = ()


FIGURES: dict[str, FigureSpec] = {
    "fig2a": FigureSpec(
        "fig2a",
        21,
        "mountain-car",
        off_policy=False,
        scale=MC_SCALE,
        with_v1=True,
        relative=False,
        title="Figure 2(a): Mountain Car, on-policy",
        paper_line=f"Paper: {PAPER}, Figure 2(a) (and 3(a), its zoom): 'our proposed "
        "gradient perturbation algorithm improves upon existing methods by orders "
        "of magnitude' and is close to LSTD.",
        notes=(MC_NOTE,),
    ),
    "fig3b": FigureSpec(
        "fig3b",
        32,
        "mountain-car",
        off_policy=True,
        scale=MC_SCALE,
        with_v1=False,
        relative=False,
        title="Figure 3(b): Mountain Car, off-policy (target uniform)",
        paper_line=f"Paper: {PAPER}, Figure 3(b): off-policy GP at several ε; 'despite "
        "being off-policy ... our algorithm's performances in Figures 3(a) and "
        "3(b) are remarkably similar'. The paper compares with WIS-LSTD; we use "
        "off-policy LSTD(0) with per-step ρ (WIS-LSTD is not implemented).",
        notes=(MC_NOTE,),
    ),
    "fig4": FigureSpec(
        "fig4",
        4,
        "hiv",
        off_policy=True,
        scale=HIV_SCALE,
        with_v1=False,
        relative=True,
        title="Figure 4: HIV treatment, off-policy (relative MSPBE = MSPBE / r̄²)",
        paper_line=f"Paper: {PAPER}, Figure 4: 'relative MSPBE, which normalizes MSPBE using "
        "the average reward (~10⁵) of the evaluated policy'. We divide by r̄² (MSPBE "
        "is quadratic in the value scale), r̄ = mean reward per step.",
    ),
}


def run_figure(
    spec: FigureSpec, out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False
) -> Path:
    """One continuous-domain figure from its spec (quick: a smoke scale, numbers not final)."""
    cont = _cont_scale(quick, spec.scale)
    cfg = _cfg(seeds, seed, quick, cont.trials)
    return _continuous(
        out,
        figure=spec.figure,
        fig_no=spec.fig_no,
        domain_name=spec.domain_name,
        off_policy=spec.off_policy,
        cont=cont,
        cfg=cfg,
        eps_grid=(0.1, 1.0) if quick else EPS_GRID,
        with_v1=spec.with_v1,
        relative=spec.relative,
        title=spec.title,
        paper_lines=[spec.paper_line],
        claims_fn=lambda t, ms, eg, z: _ratio_claims(t, ms, eg, z, **RATIO_CLAIMS[spec.figure]),
        notes=spec.notes,
    )


def fig2a(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Figure 2(a): Mountain Car on-policy — GP vs V1 (aggregation, approximate) vs LSTD."""
    return run_figure(FIGURES["fig2a"], out, seeds=seeds, seed=seed, quick=quick)


def fig3b(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Figure 3(b): Mountain Car off-policy — GP at several ε vs off-policy LSTD."""
    return run_figure(FIGURES["fig3b"], out, seeds=seeds, seed=seed, quick=quick)


def fig4(out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Figure 4: HIV off-policy, relative MSPBE = MSPBE / r̄²."""
    return run_figure(FIGURES["fig4"], out, seeds=seeds, seed=seed, quick=quick)
