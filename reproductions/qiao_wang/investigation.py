"""Figure 1a's investigation: signal-to-noise of the private statistics, capped values."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privrl.envs.linear import LinearMDP
from privrl.offline import FeatureTable
from privrl.offline.pevi import pevi_beta
from privrl.offline.vapvi import (
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
from reproductions.qiao_wang.report import TEXT, _tables, numeric_table


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
) -> str:
    """Fraction of Q̂ at the cap H−h+1 and the value estimate d1·Ṽ_1, for the shift diagnosis."""
    algs = ("VAPVI", "DP-VAPVI", DK_ON, "diag: DP-VAPVI shift only", "diag: DP-VAPVI noise only")
    ks = [
        k
        for k in (100, setup.ks[-1], *setup.k_extended[-1:])
        if k in (*setup.ks, *setup.k_extended)
    ]
    tables = []
    for inst in INSTANCES:
        rows = []
        for alg in algs:
            cells = []
            for k in ks:
                key = (alg, inst, c, k)
                if key in capped:
                    cells.append(f"{capped[key]['mean']:.3f} / {vhat[key]['mean']:.2f}")
                else:
                    cells.append("–")
            rows.append([alg, *cells])
        table = numeric_table(["algorithm", *(f"K = {k}" for k in ks)], rows, left=1)
        tables.append(
            TEXT.fill(
                "capped_table", instance=inst, vstar=f"{vstar[inst]:.3f}", C=f"{c:g}", table=table
            )
        )
    k_last = ks[-1]

    def over(alg: str) -> list[float]:
        return [vhat[(alg, i, c, k_last)]["mean"] - vstar[i] for i in INSTANCES]

    dp_over, dk_over = over("DP-VAPVI"), over(DK_ON)
    if max(dp_over) > 0:
        dk = TEXT.fill("dk_over" if max(dk_over) > 0 else "dk_under")
        verdict = TEXT.fill("over_estimates", dk=dk)
    else:
        verdict = TEXT.fill("under_estimates")
    return TEXT.fill(
        "capped",
        tables="\n\n".join(tables),
        k_last=k_last,
        dp_over=_signed(dp_over),
        dk_over=_signed(dk_over),
        vapvi_over=_signed(over("VAPVI")),
        instances=_instances(),
        verdict=verdict,
    )


def _signed(values: Sequence[float]) -> str:
    return ", ".join(f"{x:+.2f}" for x in values)


def _instances() -> str:
    return ", ".join(str(i) for i in INSTANCES)


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
    """The report's investigation section (its lines; the last one empty)."""
    c = setup.scales[-1]
    text = TEXT.fill(
        "investigation",
        _pevi_fields(setup, agg, extras["zero_q"]),
        **_small_k_fields(setup, agg, extras["zero_q"]),
        **_shift_fields(setup, agg, c),
        capped=_capped_values(setup, extras["cap_q"], extras["v_hat"], vstar, c) + "\n",
        snr_table=_snr_table(setup, c),
        **_unscaled_fields(setup, agg, c),
        beyond=_beyond(setup, agg, c),
        diag_plot=diag_plot.relative_to(root).as_posix(),
    )
    return [*text.split("\n"), ""]


def _tables_text(setup: _Setup, agg: dict, algs: Sequence[str], c: float) -> str:
    return "\n".join(_tables(agg, setup, algs, (c,)))


def _pevi_fields(setup: _Setup, agg: dict, zero: dict) -> dict[str, Any]:
    """PEVI's theory bonus: its size, the Q̂ it zeroes, and PEVI with VAPVI's coefficient."""
    ks, c = setup.ks, setup.scales[-1]
    d, H = 10, 20
    betas = [pevi_beta(d, H, k, PEVI_XI, cc) for cc in setup.scales for k in (ks[0], ks[-1])]
    pevi_zero = [
        zero[("PEVI", i, cc, k)]["mean"] for i in INSTANCES for cc in setup.scales for k in ks
    ]
    always0 = {i: float(LinearMDP.qiao_wang(i).suboptimality(np.zeros((H, 2), dtype=np.int64)))
               for i in INSTANCES}  # fmt: skip
    same = sum(
        abs(_mean(agg, "diag: PEVI β=C√d", i, cc, k) - _mean(agg, "VAPVI", i, cc, k)) < 1e-9
        for i in INSTANCES
        for k in ks
        for cc in setup.scales
    )
    cells = len(INSTANCES) * len(ks) * len(setup.scales)
    max_var = max(_max_conditional_variance(LinearMDP.qiao_wang(i)) for i in INSTANCES)
    return {
        "beta_lo": f"{min(betas):.0f}",
        "beta_hi": f"{max(betas):.0f}",
        "zero_lo": f"{min(pevi_zero):.3f}",
        "zero_hi": f"{max(pevi_zero):.3f}",
        "always0": ", ".join(f"{always0[i]:.3f} (instance {i})" for i in INSTANCES),
        "pevi_all_zero": TEXT.fill("pevi_all_zero") if min(pevi_zero) == 1.0 else "",
        "pevi_tables": _tables_text(setup, agg, ("VAPVI", "DP-VAPVI", "diag: PEVI β=C√d"), c),
        "same": same,
        "cells": cells,
        "max_var": f"{max_var:.4f}",
        "reduces": TEXT.fill("reduces") if same == cells else ".",
    }


def _small_k_fields(setup: _Setup, agg: dict, zero: dict) -> dict[str, Any]:
    """VAPVI's zeroed Q̂ at the smallest K, and the K where DP-VAPVI beats VAPVI."""
    ks = setup.ks
    vap_zero = {
        cc: [zero[("VAPVI", i, cc, ks[0])]["mean"] for i in INSTANCES] for cc in setup.scales
    }

    def below(cc: float, i: int) -> str:
        better = [
            str(k) for k in ks if _mean(agg, "DP-VAPVI", i, cc, k) < _mean(agg, "VAPVI", i, cc, k)
        ]
        return ", ".join(better) or "none"

    return {
        "k_small": ks[0],
        "vapvi_zero": "; ".join(
            f"C = {cc:g}: " + ", ".join(f"{z:.3f}" for z in vap_zero[cc]) for cc in setup.scales
        ),
        "instances": _instances(),
        "dp_below": "; ".join(
            f"C = {cc:g}, instance {i}: {below(cc, i)}" for cc in setup.scales for i in INSTANCES
        ),
    }


def _shift_fields(setup: _Setup, agg: dict, c: float) -> dict[str, Any]:
    """The PD shift's size and the shift-only and noise-only diagnostics at the largest K."""
    kmax = setup.ks[-1]
    E = gram_shift(20, 10, RHO_A, FAILURE_PROB, "strict")

    def at(alg: str) -> str:
        return ", ".join(f"{_mean(agg, alg, i, c, kmax):.3f}" for i in INSTANCES)

    return {
        "E": f"{E:.1f}",
        "half_E": f"{E / 2:.1f}",
        "shift_tables": _tables_text(setup, agg, ("VAPVI", "DP-VAPVI", *_SHIFT_NOISE), c),
        "kmax": kmax,
        "C": f"{c:g}",
        "vapvi": at("VAPVI"),
        "shift": at("diag: DP-VAPVI shift only"),
        "noise": at("diag: DP-VAPVI noise only"),
        "dp": at("DP-VAPVI"),
    }


def _snr_table(setup: _Setup, c: float) -> str:
    """The signal-to-noise of each release at a few K (instance 0, first seed)."""
    ks = setup.ks
    snr_ks = tuple(k for k in (100, ks[-1], *setup.k_extended) if k <= max(ks + setup.k_extended))
    snr = _signal_to_noise(setup, sorted(set(snr_ks)), c)
    rows = [[k, *(f"{r[kind]:.2f}" for kind in _KIND_LABELS)] for k, r in snr.items()]
    return numeric_table(["K", *_KIND_LABELS.values()], rows)


def _unscaled_fields(setup: _Setup, agg: dict, c: float) -> dict[str, Any]:
    """Both algorithms on the raw features, to test the rescaling as an explanation."""
    better = sum(
        _mean(agg, "diag: DP-VAPVI unscaled φ", i, c, k) < _mean(agg, "DP-VAPVI", i, c, k)
        for i in INSTANCES
        for k in setup.ks
    )
    return {
        "unscaled_tables": _tables_text(setup, agg, ("VAPVI", "DP-VAPVI", *_UNSCALED), c),
        "better": better,
        "unscaled_cells": len(INSTANCES) * len(setup.ks),
    }


def _beyond(setup: _Setup, agg: dict, c: float) -> str:
    """K beyond the paper's range: does DP-VAPVI (D/K off, on) converge to VAPVI? ("" without)."""
    if not setup.k_extended:
        return ""
    kmax = setup.ks[-1]

    def gap(alg: str, i: int, k: int) -> str:
        return f"{_mean(agg, alg, i, c, k) - _mean(agg, 'VAPVI', i, c, k):+.3f}"

    gaps = "; ".join(
        f"instance {i}: "
        + ", ".join(
            f"K={k}: {gap('DP-VAPVI', i, k)} / {gap(DK_ON, i, k)}"
            for k in (kmax, *setup.k_extended)
        )
        for i in INSTANCES
    )
    text = TEXT.fill(
        "beyond",
        k_last=setup.k_extended[-1],
        tables=_tables_text(setup, agg, ("PEVI", "VAPVI", "DP-VAPVI", DK_ON), c),
        C=f"{c:g}",
        gaps=gaps,
    )
    return text + "\n"
