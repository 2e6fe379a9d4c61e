"""Figure 1a's investigation: signal-to-noise of the private statistics, capped values."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from privrl.envs.linear import LinearMDP
from privrl.offline.pevi import pevi_beta
from privrl.offline.vapvi import (
    FeatureTable,
    GaussianReleaser,
    NonPrivateReleaser,
    gram_shift,
    variance_aware_pvi,
)
from reproductions.qiao_wang.grid import (
    DK_ON,
    FAILURE_PROB,
    INSTANCES,
    PEVI_XI,
    RHO_A,
    _mean,
    _nested_episodes,
    _Setup,
)
from reproductions.qiao_wang.report import _tables


class _Recorder(NonPrivateReleaser):
    """Records the norm of every statistic VAPVI computes (for the signal-to-noise table)."""

    def __init__(self) -> None:
        self.norms: dict[str, list[float]] = {}

    def vector(self, value: np.ndarray, *, kind: str, h: int) -> np.ndarray:
        self.norms.setdefault(kind, []).append(float(np.linalg.norm(value)))
        return value

    def gram(self, value: np.ndarray, *, kind: str, h: int) -> np.ndarray:
        self.norms.setdefault(kind, []).append(float(np.linalg.norm(value)))
        return value


# the diagnostics shown beside VAPVI and DP-VAPVI: one ingredient of DP-VAPVI at a time, and
# both algorithms on the raw (unscaled) features
_SHIFT_NOISE = ("diag: DP-VAPVI shift only", "diag: DP-VAPVI noise only")
_UNSCALED = ("diag: VAPVI unscaled φ", "diag: DP-VAPVI unscaled φ")
_KIND_LABELS = {
    "gram": "Σφ̄φ̄ᵀ",
    "v2": "Σφ̄Ṽ²",
    "v1": "Σφ̄Ṽ",
    "gram_weighted": "Σφφᵀ/σ̃²",
    "target": "Σφ(r+Ṽ)/σ̃²",
}


def _signal_to_noise(setup: _Setup, ks: Sequence[int], scale: float) -> dict[int, dict[str, float]]:
    """Median over steps h (instance 0, first seed) of ‖statistic‖ / E‖noise‖ at ρ = 1, with
    VAPVI's own Ṽ and σ̃ (no noise): how large each release is next to the noise DP-VAPVI adds.
    E‖noise‖ ≈ σ√d for a vector and s·√(d(d+1)) (Frobenius) for a Gram matrix."""
    mdp = LinearMDP.qiao_wang(INSTANCES[0])
    table = FeatureTable(phi=mdp.phi, scale=mdp.scale)
    episodes = _nested_episodes(mdp, max(ks), setup.base_seed, INSTANCES[0], 0)
    ref = GaussianReleaser(rho=RHO_A, H=mdp.H, d=mdp.d, rng=np.random.default_rng(0))
    d = mdp.d
    noise = {
        "gram": ref.s * math.sqrt(d * (d + 1)),
        "gram_weighted": ref.s * math.sqrt(d * (d + 1)),
        "v2": ref.sigma("v2") * math.sqrt(d),
        "v1": ref.sigma("v1") * math.sqrt(d),
        "target": ref.sigma("target") * math.sqrt(d),
    }
    out = {}
    for k in ks:
        rec = _Recorder()
        data = episodes.subset(np.arange(k))
        variance_aware_pvi(data, data, table, releaser=rec, bonus_scale=scale)
        out[k] = {kind: float(np.median(rec.norms[kind]) / noise[kind]) for kind in _KIND_LABELS}
    return out


def _capped_values(
    setup: _Setup, capped: dict, vhat: dict, vstar: dict[int, float], c: float
) -> list[str]:
    """Fraction of Q̂ at the cap H−h+1 and the value estimate d1·Ṽ_1, for the shift diagnosis."""
    algs = ("VAPVI", "DP-VAPVI", DK_ON, "diag: DP-VAPVI shift only", "diag: DP-VAPVI noise only")
    ks = [
        k
        for k in (100, setup.ks[-1], *setup.k_extended[-1:])
        if k in (*setup.ks, *setup.k_extended)
    ]
    md = [
        "**Over-estimated, capped values.** A pessimistic algorithm should under-estimate. "
        "Below, for each algorithm and K: the fraction of Q̂ entries at the cap H−h+1 and the "
        "algorithm's own value estimate d1·Ṽ_1 (mean over seeds), beside v*. Where many "
        "entries sit at the cap, the saturated actions tie and the greedy step takes the "
        "lowest index among them, whatever their true value:",
        "",
    ]
    for inst in INSTANCES:
        md += [
            f"Instance {inst} (v* = {vstar[inst]:.3f}), C = {c:g}; cells: capped fraction / "
            "d1·Ṽ_1:",
            "",
            "| algorithm | " + " | ".join(f"K = {k}" for k in ks) + " |",
            "|---|" + "---:|" * len(ks),
        ]
        for alg in algs:
            cells = []
            for k in ks:
                key = (alg, inst, c, k)
                if key in capped:
                    cells.append(f"{capped[key]['mean']:.3f} / {vhat[key]['mean']:.2f}")
                else:
                    cells.append("–")
            md.append(f"| {alg} | " + " | ".join(cells) + " |")
        md.append("")
    k_last = ks[-1]

    def over(alg: str) -> list[float]:
        return [vhat[(alg, i, c, k_last)]["mean"] - vstar[i] for i in INSTANCES]

    dp_over = over("DP-VAPVI")
    dk_over = over(DK_ON)
    md.append(
        f"At K = {k_last}, d1·Ṽ_1 − v* is "
        + ", ".join(f"{x:+.2f}" for x in dp_over)
        + " for DP-VAPVI, "
        + ", ".join(f"{x:+.2f}" for x in dk_over)
        + " for DP-VAPVI + D/K and "
        + ", ".join(f"{x:+.2f}" for x in over("VAPVI"))
        + " for VAPVI (instances "
        + ", ".join(str(i) for i in INSTANCES)
        + "). "
        + (
            "DP-VAPVI over-estimates: its bonus does not cover the error that the shift and "
            "the noise introduce (the additive D/K term the theory adds for it is off by the "
            "spec's decision, since at the theory's size it exceeds H here and would zero every "
            "Q). "
            + (
                "With the term on at the tuned constant the over-estimate remains."
                if max(dk_over) > 0
                else "With the term on at the tuned constant DP-VAPVI + D/K under-estimates, "
                "yet its suboptimality stays far from VAPVI's: lowering every value by the "
                "same amount does not change which action looks best."
            )
            if max(dp_over) > 0
            else "DP-VAPVI under-estimates at this K, as pessimism intends: its loss is in "
            "which action it prefers, not in the level of its values."
        )
    )
    md.append("")
    return md


def _max_conditional_variance(mdp: LinearMDP) -> float:
    """max over (h, s, a) of Var_{P_h}(V*_{h+1})(s, a), from the exact model."""
    tab = mdp.tabular()
    _, v_star, _ = tab.backward_induction()
    second = np.einsum("hsat,ht->hsa", tab.P, v_star[1:] ** 2)
    first = np.einsum("hsat,ht->hsa", tab.P, v_star[1:])
    return float((second - first**2).max())


def _investigation_a(
    setup: _Setup,
    agg: dict,
    extras: dict[str, dict],
    vstar: dict[int, float],
    diag_plot: Path,
    root: Path,
) -> list[str]:
    zero, capped, vhat = extras["zero_q"], extras["cap_q"], extras["v_hat"]
    c = setup.scales[-1]
    ks = setup.ks
    kmax = ks[-1]
    d, H = 10, 20
    E = gram_shift(H, d, RHO_A, FAILURE_PROB, "strict")
    betas = [pevi_beta(d, H, k, PEVI_XI, cc) for cc in setup.scales for k in (ks[0], kmax)]
    pevi_zero = [
        zero[("PEVI", i, cc, k)]["mean"] for i in INSTANCES for cc in setup.scales for k in ks
    ]
    vap_zero_small = {
        cc: [zero[("VAPVI", i, cc, ks[0])]["mean"] for i in INSTANCES] for cc in setup.scales
    }
    always0 = {i: float(LinearMDP.qiao_wang(i).suboptimality(np.zeros((H, 2), dtype=np.int64)))
               for i in INSTANCES}  # fmt: skip

    def m(alg: str, inst: int, k: int, cc: float = c) -> float:
        return _mean(agg, alg, inst, cc, k)

    md = [
        "## Investigation (diagnostics on the same data and noise seeds)",
        "",
        "Everything in this section is computed by the reproduction itself; the diagnostics are "
        "fixed variants of the same code, not tuned algorithms.",
        "",
        "**PEVI's theory bonus.** PEVI's coefficient β = C·dH·√(log(2dHK/ξ)) is "
        f"{min(betas):.0f}–{max(betas):.0f} over the C and K used, against Q-values ≤ H = 20. "
        f"The fraction of PEVI's Q̂ entries clipped to 0 is {min(pevi_zero):.3f}–"
        f"{max(pevi_zero):.3f} over all (instance, C, K). With Q̂ ≡ 0 every action ties and the "
        "greedy policy takes the first one (action 0) everywhere, whose suboptimality is "
        + ", ".join(f"{always0[i]:.3f} (instance {i})" for i in INSTANCES)
        + (
            ". PEVI's Q̂ is identically 0 in every cell, so claim 3 is decided by the size of "
            "PEVI's theory coefficient. The "
            if min(pevi_zero) == 1.0
            else ". The "
        )
        + "diagnostic *PEVI with β = C√d* (VAPVI's coefficient, unweighted regression) separates "
        "the variance weighting from the bonus size:",
        "",
    ]
    md += _tables(agg, setup, ("VAPVI", "DP-VAPVI", "diag: PEVI β=C√d"), (c,))
    same = sum(
        abs(m("diag: PEVI β=C√d", i, k, cc) - m("VAPVI", i, k, cc)) < 1e-9
        for i in INSTANCES
        for k in ks
        for cc in setup.scales
    )
    max_var = max(_max_conditional_variance(LinearMDP.qiao_wang(i)) for i in INSTANCES)
    md += [
        f"PEVI with β = C√d has the same mean as VAPVI in {same} of "
        f"{len(INSTANCES) * len(ks) * len(setup.scales)} (instance, K, C) cells. The "
        f"conditional variance of the optimal values is tiny here (max over h, s, a of "
        f"Var_{{P_h}}(V*_{{h+1}})(s, a) = {max_var:.4f}), so VAPVI's weights "
        "σ̃² = max{1, Var̃} are 1 wherever its variance estimate is accurate"
        + (
            ", and VAPVI reduces to unweighted LSVI: on this instance the variance weighting, "
            "which the paper credits for beating PEVI, has nothing to act on."
            if same == len(INSTANCES) * len(ks) * len(setup.scales)
            else "."
        ),
        "",
    ]
    md += [
        "**VAPVI's bonus at small K.** Fraction of VAPVI's Q̂ entries at 0 for K = "
        f"{ks[0]}: "
        + "; ".join(
            f"C = {cc:g}: " + ", ".join(f"{z:.3f}" for z in vap_zero_small[cc])
            for cc in setup.scales
        )
        + " (instances "
        + ", ".join(str(i) for i in INSTANCES)
        + "). Where VAPVI's Q̂ is all zero it falls back to action 0, while DP-VAPVI's bonus "
        "is shrunk by the PD shift (‖φ‖_{Λ̃⁻¹} ≤ 1/√(λ + E/2)). K values where DP-VAPVI's mean "
        "is below VAPVI's: "
        + "; ".join(
            f"C = {cc:g}, instance {i}: "
            + (
                ", ".join(str(k) for k in ks if m("DP-VAPVI", i, k, cc) < m("VAPVI", i, k, cc))
                or "none"
            )
            for cc in setup.scales
            for i in INSTANCES
        )
        + ".",
        "",
        f"**The PD shift and the noise.** At ρ = 1, H = 20, d = 10 the strict shift is "
        f"E = {E:.1f}, so E/2 = {E / 2:.1f} is added to both Gram matrices. The diagnostics run "
        "DP-VAPVI's code with only one ingredient: the shift without noise, or the noise "
        "(same stream) without the shift (then eigenvalues are clipped at λ):",
        "",
    ]
    md += _tables(agg, setup, ("VAPVI", "DP-VAPVI", *_SHIFT_NOISE), (c,))
    md += [
        f"At K = {kmax}, C = {c:g}: VAPVI "
        + ", ".join(f"{m('VAPVI', i, kmax):.3f}" for i in INSTANCES)
        + "; shift only "
        + ", ".join(f"{m('diag: DP-VAPVI shift only', i, kmax):.3f}" for i in INSTANCES)
        + "; noise only "
        + ", ".join(f"{m('diag: DP-VAPVI noise only', i, kmax):.3f}" for i in INSTANCES)
        + "; DP-VAPVI "
        + ", ".join(f"{m('DP-VAPVI', i, kmax):.3f}" for i in INSTANCES)
        + " (instances "
        + ", ".join(str(i) for i in INSTANCES)
        + ").",
        "",
    ]
    md += _capped_values(setup, capped, vhat, vstar, c)
    snr_ks = tuple(k for k in (100, kmax, *setup.k_extended) if k <= max(ks + setup.k_extended))
    snr = _signal_to_noise(setup, sorted(set(snr_ks)), c)
    md += [
        "Signal-to-noise of the releases: median over h of ‖statistic‖ / E‖noise‖ at ρ = 1 "
        "(instance 0, first seed, computed with VAPVI's Ṽ and σ̃; E‖noise‖ = σ√d for vectors, "
        "s·√(d(d+1)) for Gram matrices). A ratio below 1 means the release is mostly noise:",
        "",
        "| K | " + " | ".join(_KIND_LABELS.values()) + " |",
        "|---:|" + "---:|" * len(_KIND_LABELS),
    ]
    for k, row in snr.items():
        md.append(f"| {k} | " + " | ".join(f"{row[kind]:.2f}" for kind in _KIND_LABELS) + " |")
    md.append("")
    md += [
        "**Does the rescaling of φ explain the gap?** The guarantee needs ‖φ‖ ≤ 1, so φ is "
        "divided by √7 (ν, θ compensated: the same MDP), while the noise stays the same. The "
        "diagnostic runs both algorithms on the raw features (‖φ‖ up to √7) — for DP-VAPVI the "
        "sensitivity bounds then fail, so it is **not** private and is shown only to test the "
        "explanation:",
        "",
    ]
    md += _tables(agg, setup, ("VAPVI", "DP-VAPVI", *_UNSCALED), (c,))
    better = sum(
        m("diag: DP-VAPVI unscaled φ", i, k) < m("DP-VAPVI", i, k) for i in INSTANCES for k in ks
    )
    md += [
        f"Unscaled DP-VAPVI has a lower mean than DP-VAPVI in {better} of "
        f"{len(INSTANCES) * len(ks)} (instance, K) cells at C = {c:g}.",
        "",
    ]
    if setup.k_extended:
        md += [
            "**Beyond the paper's range.** Does DP-VAPVI converge to VAPVI as K grows? Same "
            f"protocol, K up to {setup.k_extended[-1]}:",
            "",
        ]
        md += _tables(agg, setup, ("PEVI", "VAPVI", "DP-VAPVI", DK_ON), (c,))
        md += [
            "Gap to VAPVI at C = "
            f"{c:g}, DP-VAPVI (D/K off) and DP-VAPVI + D/K: "
            + "; ".join(
                f"instance {i}: "
                + ", ".join(
                    f"K={k}: {m('DP-VAPVI', i, k) - m('VAPVI', i, k):+.3f} / "
                    f"{m(DK_ON, i, k) - m('VAPVI', i, k):+.3f}"
                    for k in (kmax, *setup.k_extended)
                )
                for i in INSTANCES
            )
            + ".",
            "",
        ]
    md += [f"![diagnostics]({diag_plot.relative_to(root).as_posix()})", ""]
    return md
