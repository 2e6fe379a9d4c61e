"""Summarise an audit: metrics.json (epsilon_claimed, epsilon_lower_bound,
epsilon_lower_bound_ci, trials, auc) and plots/roc.png. The run layer writes them with
config.json and privacy.json (the audited system's claimed report); see
`privrl.systems.audit`.

An audit reads no private data: D and the canary are synthetic and public, so it spends no
budget and needs no ledger.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from privrl.audit.attacks import AuditTrials
from privrl.audit.bounds import auc, epsilon_lower_bound, roc_curve

__all__ = ["roc_plot", "summarise"]


def summarise(result: AuditTrials, *, confidence: float = 0.95) -> dict[str, Any]:
    """metrics.json of an audit: the claimed ε, the empirical lower bound (Bonferroni-corrected
    Clopper–Pearson, `confidence`), its interval and the attack's AUC."""
    bound = epsilon_lower_bound(result.scores, result.labels, result.delta, confidence=confidence)
    claimed = result.epsilon_claimed
    return {
        "system": result.system,
        "epsilon_claimed": claimed,
        "delta": result.delta,
        "epsilon_lower_bound": bound.epsilon,
        # one-sided interval: with probability ≥ confidence the true ε is ≥ `low`; `point` is
        # the same formula on the raw rates at the chosen threshold (an estimate, no bound)
        "epsilon_lower_bound_ci": {
            "confidence": bound.confidence,
            "low": bound.epsilon,
            "high": None,
            "point": bound.point,
        },
        "trials": result.trials,
        "trials_with_canary": int(result.labels.sum()),
        "auc": auc(result.scores, result.labels),
        "threshold": {
            "value": bound.threshold,
            "fpr": bound.fpr,
            "fnr": bound.fnr,
            "thresholds_tried": bound.n_thresholds,
        },
        "violated": bool(bound.epsilon > claimed),
        "tightness": (bound.epsilon / claimed) if math.isfinite(claimed) and claimed > 0 else None,
    }


def roc_plot(path: Path, result: AuditTrials, metrics: dict[str, Any]) -> None:
    """plots/roc.png: the attack's ROC curve (linear and log-log) against the (ε, δ) limit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fpr, tpr, _ = roc_curve(result.scores, result.labels)
    if fpr.size > 4000:  # thin the curve for drawing (it is monotone; dense near both ends)
        idx = np.r_[np.linspace(0, fpr.size - 1, 2000), np.geomspace(1, fpr.size - 1, 2000)]
        keep = np.unique(np.r_[0, idx.astype(int), fpr.size - 1])
        fpr, tpr = fpr[keep], tpr[keep]
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.8))
    try:
        eps, delta = result.epsilon_claimed, result.delta
        for ax, log in zip(axes, (False, True), strict=True):
            # Log axes show the low-FPR tail, where the ε bound is decided (Carlini et al. 2022).
            x = np.geomspace(1e-7, 1.0, 400) if log else np.linspace(0.0, 1.0, 400)
            keep = (fpr > 0) & (tpr > 0) if log else slice(None)
            ax.plot(fpr[keep], tpr[keep], lw=1.6, label=f"attack (AUC {metrics['auc']:.3f})")
            if math.isfinite(eps):
                # The (ε, δ)-DP region (Kairouz et al. 2015): TPR ≤ min(e^ε FPR + δ,
                # 1 − e^{−ε}(1 − δ − FPR)); no test of a DP mechanism lies above it.
                top = np.minimum(np.exp(eps) * x + delta, 1.0 - np.exp(-eps) * (1.0 - delta - x))
                ax.plot(
                    x, np.clip(top, 0, 1), "--", lw=1.0, color="0.3", label=f"ε = {eps:.3g} limit"
                )
            ax.plot(x, x, ":", lw=1.0, color="0.6", label="chance")
            if log:
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.set_xlim(max(1.0 / result.trials, 1e-7), 1.0)
                ax.set_ylim(max(1.0 / result.trials, 1e-7), 1.0)
            ax.set_xlabel("false-positive rate")
            ax.set_ylabel("true-positive rate")
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right", fontsize=8)
        fig.suptitle(
            f"{result.system}: ε lower bound {metrics['epsilon_lower_bound']:.3g} "
            f"(claimed {eps:.3g}, {result.trials} trials)"
        )
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
