"""GPOPE accounting study: the paper's Lemma 1 vs rigorous accounting."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from privrl.experiments.gpope.chain import _Chain, _chain_point
from privrl.experiments.gpope.common import (
    CHAIN_EPS,
    CHAIN_TRIALS,
    DELTA,
    EPS_GRID,
    ETAS,
    ITER_PER_TRAJ,
    PAPER,
    _Acc,
    _cfg,
    _Claims,
    _errorbar,
    _finish,
    _fmt,
    _plt,
    _setup_lines,
)
from privrl.experiments.rundir import RunDir
from privrl.ope.accounting import paper_sigma, rigorous_epsilon, rigorous_sigma

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
