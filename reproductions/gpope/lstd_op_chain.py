"""Output-perturbed ridge LSTD on the chain (beyond the paper): the LSTD-OP series of Figure 1(a).

`privrl.ope.lstd_op` with the chain's public bounds: one-hot features (Φ̄ = 1), rewards in
[0, 1] (R̄ = 1), γ = 0.99, m̄ = the design size m. The ridge λ is chosen per (m, ε) from
`RIDGES` by the mean MSPBE of `REPEATS` noisy releases on an independent public sample of m
trajectories (its own seed), never on the trial data; σ = z·Δ₂ with z calibrated to (ε, δ) by
the PLD accountant (one Gaussian release, add/remove). The trial datasets are those of the
paper-mode trials (same seeds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from privrl.ope.lstd_op import (
    LstdOpConfig,
    lstd_op_noise_multiplier,
    lstd_op_release,
    lstd_op_statistics,
)
from reproductions.gpope.common import DELTA, _Acc, _Cfg, _log, _rng

RIDGES = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)  # λ grid searched on public data
REPEATS = 8  # noisy releases per λ on the public sample
EPSILONS = (0.1, 1.0)
TRIALS = 100  # per point (cheap: one solve and one draw per trial)


def method(eps: float) -> str:
    return f"LSTD-OP ε={eps:g}"


def config(chain: Any, m: int, ridge: float) -> LstdOpConfig:
    """The chain's public bounds: Φ̄ = 1 (one-hot), R̄ = r_max = 1, γ, m̄ = m (design size)."""
    return LstdOpConfig(
        feature_bound=1.0,
        reward_bound=float(chain.mdp.r_max),
        gamma=float(chain.mdp.gamma),
        ridge=float(ridge),
        public_m=int(m),
    )


def tune_ridge(
    chain: Any, m: int, epsilon: float, z: float, *, base: int, fig: int
) -> tuple[float, dict[float, float]]:
    """λ minimising the mean MSPBE of REPEATS releases on a public sample of m trajectories."""
    public = chain.sample(m, base, fig, 7, m)  # its own public seed
    rng = _rng(base, fig, 8, m, round(epsilon * 1000))
    scores: dict[float, float] = {}
    # the sums (1)–(2) depend on the bounds only, not on λ: computed once
    stats = lstd_op_statistics(public, chain.domain.features, config(chain, m, 1.0))
    for lam in RIDGES:
        cfg = config(chain, m, lam)
        theta = stats.solve(cfg)
        vals = [
            chain.system.mspbe(lstd_op_release(theta, cfg, noise_multiplier=z, rng=rng)[0])
            for _ in range(REPEATS)
        ]
        scores[lam] = float(np.mean(vals))
    return min(scores, key=scores.__getitem__), scores


def lstd_op_points(
    chain: Any, cfg: _Cfg, ms: Sequence[int], acc: _Acc, *, fig: int = 1
) -> list[dict[str, Any]]:
    """Every (m, ε) point: tune λ on public data, release on each trial dataset; rows into
    `acc` (with the noiseless ridge solution's MSPBE, the bias part, as its own method)."""
    zs = {e: lstd_op_noise_multiplier(e, DELTA) for e in EPSILONS}
    facts: list[dict[str, Any]] = []
    trials = min(cfg.trials, TRIALS)
    for m in ms:
        tuned = {}
        for e in EPSILONS:
            _log(f"chain LSTD-OP m={m} ε={e}: tuning λ")
            tuned[e] = tune_ridge(chain, m, e, zs[e], base=cfg.base, fig=fig)
        rngs = {e: _rng(cfg.base, fig, 9, m, round(e * 1000)) for e in EPSILONS}
        for t in range(trials):
            data = chain.sample(m, cfg.base, fig, 1, m, t)  # the paper-mode trial's dataset
            stats = lstd_op_statistics(data, chain.domain.features, config(chain, m, 1.0))
            for e in EPSILONS:
                c = config(chain, m, tuned[e][0])
                theta = stats.solve(c)
                noisy, _ = lstd_op_release(theta, c, noise_multiplier=zs[e], rng=rngs[e])
                acc.add(m=m, method=method(e), trial=t, mspbe=float(chain.system.mspbe(noisy)))
                acc.add(
                    m=m,
                    method=f"ridge LSTD, no noise (λ of ε={e:g})",
                    trial=t,
                    mspbe=float(chain.system.mspbe(theta)),
                )
        for e in EPSILONS:
            lam, scores = tuned[e]
            c = config(chain, m, lam)
            facts.append(
                {
                    "m": m,
                    "epsilon": e,
                    "ridge": lam,
                    "sensitivity": c.sensitivity(),
                    "noise_multiplier": zs[e],
                    "sigma": zs[e] * c.sensitivity(),
                    "public_scores": {f"{k:g}": v for k, v in scores.items()},
                    "trials": trials,
                }
            )
    return facts


def fact_lines(facts: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "| ε | m | λ (public) | Δ₂ | z = σ/Δ₂ (PLD) | σ | trials |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in sorted(facts, key=lambda f: (f["epsilon"], f["m"])):
        lines.append(
            f"| {f['epsilon']:g} | {f['m']} | {f['ridge']:g} | {f['sensitivity']:.3g} "
            f"| {f['noise_multiplier']:.3g} | {f['sigma']:.3g} | {f['trials']} |"
        )
    return lines
