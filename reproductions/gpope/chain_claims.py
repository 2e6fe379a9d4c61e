"""The verdicts of the chain figures, GPOPE Figure 1(a) and 1(b), from their tables of MSPBE
statistics. GP is judged against the trivial θ = 0 first; a comparison with V1/V2 (or of LSTD-OP
with minibatch GP) that holds only because neither beats θ = 0 is reported as vacuous."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from reproductions.gpope import lstd_op_chain as op
from reproductions.gpope import minibatch_chain as mb
from reproductions.gpope.common import _Claims


def _count_kind(held: int, total: int) -> str:
    return "holds" if held == total else "does not hold" if held == 0 else "partly"


def fig1a_claims(table: dict, ms: Sequence[int], zero: float) -> _Claims:
    """Figure 1(a)'s claims from its table of MSPBE statistics ((m, method) → stats)."""
    # claims: GP against θ = 0 first; a comparison with V1/V2 says nothing where it does not
    claims = _Claims("plots/fig1a.png")
    beats0 = [table[(m, "GP (1× step)")]["mean"] < zero for m in ms]
    claims.add(
        "(ours) paper-mode GP beats the trivial θ = 0",
        all(beats0),
        f"{sum(beats0)}/{len(ms)} values of m; GP/θ=0: "
        + ", ".join(f"m={m}: {table[(m, 'GP (1× step)')]['mean'] / zero:.3g}" for m in ms),
        kind=_count_kind(sum(beats0), len(ms)),
    )
    ratios = [
        min(table[(m, "V1 (DP-LSW)")]["mean"], table[(m, "V2 (DP-LSL)")]["mean"])
        / table[(m, "GP (1× step)")]["mean"]
        for m in ms
    ]
    claims.add(
        "GP ≈ an order of magnitude better than V1/V2 (Fig. 1a)",
        all(r >= 10 for r in ratios),
        "min over m of MSPBE(best of V1, V2)/MSPBE(GP) = "
        f"{min(ratios):.3g} (max {max(ratios):.3g}); V1/V2 are far worse than θ = 0 itself",
        claim="GP ≈ an order of magnitude better than V1/V2",
        paper="≈ 10× (Fig. 1a)",
        vacuous=not all(beats0),
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
        vacuous=not all(beats0),
    )
    mb.claims(claims, table, ms, zero)
    if all((m, op.method(e)) in table for m in ms for e in op.EPSILONS):
        _lstd_op_claims(claims, table, ms, zero)
    return claims


def _lstd_op_claims(claims: _Claims, table: dict, ms: Sequence[int], zero: float) -> None:
    """LSTD-OP against θ = 0 first, then against minibatch GP (the issue's question). 'Beats
    θ = 0' is read as at least 10% below it, as in Figure 1(b)."""
    pts = [(e, m) for e in op.EPSILONS for m in ms]

    def mean(m: int, k: str) -> float:
        return table[(m, k)]["mean"]

    beats0 = [(e, m) for e, m in pts if mean(m, op.method(e)) < 0.9 * zero]
    claims.add(
        "(beyond the paper) LSTD-OP (output-perturbed ridge LSTD, public sensitivity) beats θ = 0",
        len(beats0) == len(pts),
        f"{len(beats0)}/{len(pts)} (ε, m) points at least 10% below θ = 0; LSTD-OP/θ=0: "
        + "; ".join(
            f"ε={e:g}: " + ", ".join(f"{mean(m, op.method(e)) / zero:.2g}" for m in ms)
            for e in op.EPSILONS
        )
        + f" (m = {', '.join(str(m) for m in ms)})",
        paper="— (ours)",
        kind=_count_kind(len(beats0), len(pts)),
    )
    wins = [(e, m) for e, m in pts if mean(m, op.method(e)) < mean(m, mb.method(e))]
    real = [(e, m) for e, m in wins if mean(m, op.method(e)) < 0.9 * zero]
    where = ", ".join(f"ε={e:g} m={m}" for e, m in wins) or "none"
    claims.add(
        "(beyond the paper) LSTD-OP beats minibatch GP (issue 19: a baseline if so)",
        len(wins) == len(pts),
        f"{len(wins)}/{len(pts)} (ε, m) points ({where}); LSTD-OP is at least 10% below "
        f"θ = 0 at {len(real)} of them",
        paper="— (ours)",
        kind="vacuous"
        if wins and not real and len(wins) == len(pts)
        else _count_kind(len(real), len(pts)),
    )


def lstd_op_verdict(table: dict, ms: Sequence[int], zero: float) -> str:
    """One sentence: where LSTD-OP has the lower MSPBE than minibatch GP, and what that is."""
    pts = [(e, m) for e in op.EPSILONS for m in ms]
    wins = [
        (e, m)
        for e, m in pts
        if table[(m, op.method(e))]["mean"] < table[(m, mb.method(e))]["mean"]
    ]
    if not wins:
        return f"Minibatch GP has the lower MSPBE at all {len(pts)} (ε, m) points."
    vacuous = all(
        table[(m, mb.method(e))]["mean"] >= zero and table[(m, op.method(e))]["mean"] >= 0.9 * zero
        for e, m in wins
    )
    where = " and ".join(f"(ε = {e:g}, m = {m})" for e, m in wins)
    tail = (
        ": there minibatch GP is itself above θ = 0 and LSTD-OP within 10% of θ = 0, so "
        "neither estimates anything (a vacuous win)"
        if vacuous
        else ""
    )
    return (
        f"Minibatch GP has the lower MSPBE at {len(pts) - len(wins)} of the {len(pts)} "
        f"(ε, m) points; LSTD-OP is lower at {where}{tail}."
    )


def fig1b_claims(
    means: np.ndarray, etas: Sequence[float], v1: float, zero: float, lstd_mean: float
) -> tuple[_Claims, float, float]:
    """Figure 1(b)'s claims from the mean MSPBE per step size (and V1's, θ = 0's, LSTD's
    level at this m); returns (claims, best MSPBE, decades of η within 2× of the best)."""
    best = float(np.nanmin(means))
    # "stable" = within 2× of the best AND keeping at least half of its gain over θ = 0
    # (a 2× band alone would count step sizes that only return θ ≈ 0)
    ok = np.flatnonzero(means <= min(2 * best, best + 0.5 * max(zero - best, 0.0)))
    span = math.log10(etas[ok.max()] / etas[ok.min()]) if ok.size else 0.0
    beats = int(np.sum(means < v1))
    below0 = int(np.sum(means < 0.9 * zero))  # "beats" as in the first claim
    claims = _Claims("plots/fig1b.png")
    # GP against θ = 0 first: a flat curve at the level of θ = 0 is no evidence of robustness
    vacuous = best > 0.9 * zero
    claims.add(
        "(ours) GP at its best step beats θ = 0",
        not vacuous,
        f"best MSPBE {best:.3g} = {best / zero:.3g} × θ = 0's {zero:.3g} (LSTD "
        f"{lstd_mean:.3g}); 'beats' read as at least 10% below",
    )
    claims.add(
        "accuracy is stable over a very wide range of step sizes (Fig. 1b)",
        span >= 1.0,
        f"MSPBE within 2× of the best and below (best + θ = 0)/2 over {span:.2g} decades of η "
        f"({etas[ok.min()]:.2g}–{etas[ok.max()]:.2g})",
        claim="accuracy is stable over a very wide range of step sizes",
        paper="Fig. 1b",
        vacuous=vacuous,
    )
    # met at every step, but where GP is above θ = 0 it only says θ = 0 beats V1 too
    claims.add(
        "GP beats V1 at every step size tried",
        beats == len(etas),
        f"{beats}/{len(etas)} step sizes (V1 mean MSPBE {v1:.3g})",
        paper="Fig. 1b",
        vacuous=vacuous,
        kind="vacuous" if beats == len(etas) and 2 * below0 < len(etas) else None,
    )
    claims.add(
        "(ours) small steps degrade gracefully towards θ = 0, large ones diverge into the noise",
        None,
        f"MSPBE at the smallest η {means[0]:.3g} (θ = 0: {zero:.3g}); at the largest "
        f"{means[-1]:.3g}",
    )
    return claims, best, span
