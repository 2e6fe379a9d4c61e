"""GPOPE accounting study: the paper's Lemma 1 vs rigorous accounting."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from privrl.ope.accounting import paper_sigma, rigorous_epsilon, rigorous_sigma
from privrl.privacy.accounting import epsilon, sampled_gaussian_event
from privrl.privacy.units import NeighbourRelation
from privrl.runs.rundir import RunDir
from reproductions.claims import with_kinds
from reproductions.gpope.chain import _Chain
from reproductions.gpope.chain_units import cfg_json, run_chain_units
from reproductions.gpope.common import (
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
    _finish,
    _fmt,
    _plt,
    _setup_lines,
    mspbe_figure,
)

# ------------------------------------------------------------------------ accounting


SPEC_TABLE = (
    (1000, 1000, 3.12, 5.07),
    (1000, 10_000, 9.64, 13.74),
    (10_000, 100_000, 3.12, 4.68),
    (100, 1000, 30.4, 43.6),
)


def relation_epsilons(
    sigma: float, m: int, n_iter: int, claimed: float, *, orders: tuple[float, ...] | None
) -> dict[str, float]:
    """ε of N GPOPE steps with noise h·σ under each neighbouring relation (δ = DELTA):

    * replace-one, sensitivity 2h, 1 of m without replacement (RDP; our default for the
      paper's algorithm): noise multiplier σ/2;
    * add/remove, sensitivity h, Poisson sampling at rate 1/m (PLD): noise multiplier σ —
      the guarantee of a Poisson-sampled variant, not of the fixed one-trajectory step;
    * the paper's d′ = d ∪ {x} with sensitivity h: the same without-replacement event with
      noise multiplier σ (RDP, REPLACE_ONE), i.e. Lemma 1's setting without its truncation.
    """
    wor = functools.partial(
        sampled_gaussian_event, sampling="without_replacement", dataset_size=m, sample_size=1
    )
    poisson = sampled_gaussian_event(
        sigma, n_iter, sampling="poisson", sampling_probability=1.0 / m
    )
    return {
        "m": m,
        "N": n_iter,
        "claimed": claimed,
        "sigma": sigma,
        "replace_one_2h": rigorous_epsilon(sigma, m, n_iter, DELTA, orders=orders),
        "add_remove_h_poisson": float(
            epsilon(poisson, DELTA, relation=NeighbourRelation.ADD_REMOVE, backend="pld")
        ),
        "paper_union_h": float(
            epsilon(
                wor(sigma, n_iter), DELTA, relation=NeighbourRelation.REPLACE_ONE, orders=orders
            )
        ),
    }


RELATION_NAMES = {
    "replace_one_2h": "replace-one, 2h (ours, default)",
    "add_remove_h_poisson": "add/remove, h, Poisson q = 1/m",
    "paper_union_h": "paper's d ∪ {x}, h",
}


def relation_table(rows: Sequence[dict[str, float]]) -> list[str]:
    lines = [
        "| m | N | claimed ε (Lemma 1) | σ | "
        + " | ".join(f"ε: {v}" for v in RELATION_NAMES.values())
        + " |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['m']} | {r['N']} | {r['claimed']:g} | {r['sigma']:.3g} | "
            + " | ".join(f"{r[k]:.3g}" for k in RELATION_NAMES)
            + " |"
        )
    return lines


def accounting(
    out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False, **where: Any
) -> Path:
    """Paper vs rigorous accounting: σ each needs, the true ε of the paper's σ, and MSPBE (each
    (ε, m, mode) point a function cell on the sweep runner, `chain_units`)."""
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
    relation_rows: list[dict[str, float]] = []
    for m, n_iter in ((100, 100),) if quick else ((100, 100), (100, 1000), (1000, 10_000)):
        for eps in (0.1,) if quick else EPS_GRID:
            p = paper_sigma(eps, DELTA, m, n_iter)
            r = rigorous_sigma(eps, DELTA, m, n_iter, tolerance=1e-3, orders=cfg.orders)
            grid_rows.append(
                (m, n_iter, eps, p, r, rigorous_epsilon(p, m, n_iter, DELTA, orders=cfg.orders))
            )
            relation_rows.append(relation_epsilons(p, m, n_iter, eps, orders=cfg.orders))
    # 2. MSPBE at equal nominal ε
    ms = (100,) if quick else (100, 1000, 5000)
    eps_list = (CHAIN_EPS,) if quick else (0.1, 1.0)
    acc = _Acc([])
    sig_rows = []
    plain = cfg_json(cfg)
    points = [(eps, m, mode) for eps in eps_list for m in ms for mode in ("paper", "rigorous")]
    specs = []
    for eps, m, mode in points:
        point = {
            "step_factors": (1.0,),
            "epsilon": eps,
            "iterations": (2 if quick else ITER_PER_TRAJ) * m,
            "repeats": 1 if quick else 4,
            "etas": ETAS[::3] if quick else ETAS,
            "baselines": False,
            "accounting": mode,
            "label": f" {mode} ε={eps:g}",
        }
        name = f"point-m{m}-eps{eps:g}-{mode}"
        specs.append((name, "unit_point", {"cfg": plain, "m": m, "fig": 3, **point}))
    results = run_chain_units("accounting", quick, specs, **where)
    for (eps, m, mode), res in zip(points, results, strict=True):
        for row in res["rows"]:
            acc.add(**row)
        for r in acc.rows:
            r.setdefault("epsilon", eps)
        tuning = res["facts"]
        n_iter = tuning["N"]
        sig = tuning["sigma"]
        sig_rows.append(
            {
                "epsilon": eps,
                "m": m,
                "N": n_iter,
                "mode": mode,
                "sigma": sig,
                "true_epsilon": rigorous_epsilon(sig, m, n_iter, DELTA, orders=cfg.orders),
                "h": tuning["h"],
                "eta": tuning["eta"],
            }
        )
    run = RunDir(out)
    series = {
        f"GP {mode}, ε = {eps:g}": [
            acc.stats(m=m, method=f"GP {mode} ε={eps:g} (1× step)") for m in ms
        ]
        for eps in eps_list
        for mode in ("paper", "rigorous")
    }
    series["LSTD (non-private)"] = [acc.stats(m=m, method="LSTD (non-private)") for m in ms]
    mspbe_figure(
        run.plot_path("accounting"),
        ms,
        series,
        zero=chain.zero_mspbe(),
        title="GPOPE on the chain at equal nominal ε: Lemma 1's σ vs rigorous σ",
        xlabel="m (N = 10·m)",
        ylabel="MSPBE (chain)",
        reference="LSTD (non-private)",
    )
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for eps in eps_list:
        for mode, ls in (("paper", "--"), ("rigorous", "-")):
            sg = [r["sigma"] for r in sig_rows if r["mode"] == mode and r["epsilon"] == eps]
            ax.plot(ms, sg, ls=ls, marker="o", label=f"σ {mode}, ε = {eps:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("m (N = 10·m)")
    ax.set_ylabel("σ (noise std / h)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.savefig(run.plot_path("accounting_sigma"), dpi=110, bbox_inches="tight")
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
    claims = _accounting_claims(ref_rows, grid_rows, sig_rows, acc, relation_rows)
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
        "## The verdict by neighbouring relation",
        "",
        "ε (δ = 1e-5) actually delivered by Lemma 1's σ under each relation. The paper's "
        "proof uses d′ = d ∪ {x} with sensitivity h; replace-one neighbours (its Definition 1: "
        "datasets differ in one trajectory) move the clipped gradient by up to 2h; add/remove "
        "with Poisson sampling at rate 1/m is the relation DP-SGD analyses use (it describes a "
        "Poisson-sampled variant of the step, not the fixed one-trajectory step).",
        "",
        *relation_table(relation_rows),
        "",
        "**Our default is replace-one with sensitivity 2h** for the paper's algorithm: it is "
        "the paper's own definition of neighbouring datasets (one trajectory changed, m fixed "
        "and public), the one-trajectory step samples exactly 1 of m without replacement — a "
        "sampling scheme dp-accounting accounts under replace-one only — and a changed "
        "trajectory can move the clipped gradient from one side of the h-ball to the other "
        "(2h). Under the paper's own d ∪ {x} relation Lemma 1 is close to right up to a "
        "claimed ε = 1 (1.06 for a claimed 1 at m = N = 100) and understates ε where σ is "
        "small (claimed 5: about 11); under replace-one it understates ε in every cell (6.0 "
        "for a claimed 1, 681 for a claimed 5). The minibatch mode (`privrl.ope.minibatch`) "
        "uses add/remove with Poisson sampling — the relation its sampling is analysed under "
        "— and lists the replace-one ε of the same σ beside it (gpope-fig1a/minibatch).",
        "",
        "## MSPBE at equal nominal ε (chain, h and η tuned on public data per mode)",
        "",
        *tab,
        "",
        f"The rigorous σ is {min(ratio):.2g}–{max(ratio):.2g}× the paper's at these (m, N). Any "
        "MSPBE advantage of the paper-mode rows is bought with a weaker guarantee than the one "
        "claimed (the 'true ε' column).",
        "",
        "## Claims",
        "",
        *claims.rows,
        "",
        "![accounting](plots/accounting.png)",
        "",
        "![σ per mode](plots/accounting_sigma.png)",
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
        claims=with_kinds(claims.items),  # every kind follows from its verdict here
    )


def _accounting_claims(
    ref_rows: Sequence[tuple],
    grid_rows: Sequence[tuple],
    sig_rows: Sequence[dict],
    acc: _Acc,
    relation_rows: Sequence[dict[str, float]],
) -> _Claims:
    """The accounting study's claims, from the numbers of its tables: Lemma 1's σ checked
    under each neighbouring relation (the paper's own first), then the spec's remark."""
    claims = _Claims("plots/accounting.png")
    for key, label in (
        ("paper_union_h", "the paper's relation d ∪ {x}, sensitivity h"),
        ("replace_one_2h", "replace-one, sensitivity 2h (our default)"),
        ("add_remove_h_poisson", "add/remove, sensitivity h, Poisson q = 1/m"),
    ):
        over = [r for r in relation_rows if r[key] > r["claimed"]]
        worst = max(relation_rows, key=lambda r: r[key] / r["claimed"])
        claims.add(
            f"Lemma 1's σ gives the claimed ε under {label}",
            not over,
            f"{len(relation_rows) - len(over)}/{len(relation_rows)} (m, N, ε) cells within the "
            f"claim; worst: claimed {worst['claimed']:g} → {worst[key]:.3g} at m = "
            f"{worst['m']}, N = {worst['N']}"
            + (
                "; exceeded at claimed ε ∈ {"
                + ", ".join(f"{e:g}" for e in sorted({r["claimed"] for r in over}))
                + "}"
                if over
                else ""
            ),
            claim=f"Lemma 1's σ gives the claimed ε ({label})",
            paper="Lemma 1 (ε as claimed)",
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
