"""Gallery claims (claims.json): each report's verdicts, from its cells' (mean, 95% CI)
normalised scores, each with the kind of its verdict (`Claim.kind`, one of `KINDS`).

Kind: at the equal-steps scale (N = 5,000, z calibrated to 1.5–2.4) every comparison tests
another trade-off than the paper's (z = 10–80 over up to 10⁶ steps), so its kind is
"inconclusive at our scale" whatever the means say. In the paper's noise regime
(`Scale.regime`) the verdict is its own kind when the two means differ by more than the wider
95% half-width, else "inconclusive at our scale"."""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from reproductions.claims import Claim, count_verdict, holds
from reproductions.expert.paper import (
    ENVS,
    PAPER_FIG3_POINTS,
    PAPER_TABLE1_P,
    PAPER_TABLE2A,
    PAPER_TABLE2B,
    REGIME_NOISE,
    REGIME_STEPS,
    _fmt,
    _nearest,
)

Scores = Mapping[str, tuple[float, float]]
FIGURE_ONLY = "figure only (no numbers)"
AT_OUR_SCALE = "inconclusive at our scale"


def kind_of(
    verdict: str, pair: tuple[tuple[float, float], tuple[float, float]] | None, regime: bool
) -> str:
    """The kind of a verdict from the (mean, CI) pair it compares (see the module doc)."""
    if verdict not in ("holds", "does not hold", "partly") or pair is None or not regime:
        return AT_OUR_SCALE
    (o, ci_o), (d, ci_d) = pair
    width = max(
        ci_o if math.isfinite(ci_o) else math.inf, ci_d if math.isfinite(ci_d) else math.inf
    )
    return verdict if abs(o - d) > width else AT_OUR_SCALE


def _pair(scores: Scores, a: str, b: str) -> tuple[tuple[float, float], tuple[float, float]] | None:
    o, d = scores.get(a), scores.get(b)
    if o is None or d is None or not (math.isfinite(o[0]) and math.isfinite(d[0])):
        return None
    return o, d


def gallery_claims_table2a(
    scores: Scores,
    envs: Sequence[str],
    eps: float = 10.0,
    *,
    regime: bool = False,
) -> list[Claim]:
    """Table 2a's claim check: ours (Table-1 p) ≥ DP-SGD on the means, per (env, algo), each
    with its kind (`kind_of`)."""
    out = []
    for env in envs:
        for algo in ("cql", "bcq"):
            p = PAPER_TABLE1_P[(env, algo)][eps]
            pair = _pair(scores, f"{env}/{algo}/p{p:g}/main", f"{env}/{algo}/p1/main")
            if pair is None:
                continue
            (o, d), paper = pair, PAPER_TABLE2A[(env, algo)]
            verdict = holds(o[0] - d[0] >= 0)
            out.append(
                Claim(
                    f"ours ≥ DP-SGD at ε = {eps:g}, {ENVS[env].label} {algo.upper()} (p = {p:g})",
                    " vs ".join("inf" if v is None else f"{v:.2f}" for v in (paper[p], paper[1.0])),
                    f"{_fmt(*o)} vs {_fmt(*d)}",
                    verdict,
                    "plots/table2a.png",
                    kind=kind_of(verdict, pair, regime),
                )
            )
    return out


def gallery_claims_table2b(scores: Scores) -> list[Claim]:
    """Table 2b: the report states the numbers but no verdict, so the gallery says
    inconclusive (3 seeds, CIs that overlap the paper's ordering), at our scale."""
    out = []
    for (env, eps), (p_f, p_n) in PAPER_TABLE2B.items():
        pair = _pair(scores, f"{env}/bcq/eps{eps:g}/filter", f"{env}/bcq/eps{eps:g}/nofilter")
        if pair is None:
            continue
        f, n = pair
        out.append(
            Claim(
                f"below ε = 5, ε1 = 0 beats ε1 = 3ε/4 ({ENVS[env].label}, ε = {eps:g}, BCQ)",
                f"ε1 = 3ε/4: {p_f:.2f}; ε1 = 0: {p_n:.2f}",
                f"ε1 = 3ε/4: {_fmt(*f)}; ε1 = 0: {_fmt(*n)}",
                "inconclusive",
                "plots/table2b.png",
                kind=AT_OUR_SCALE,
            )
        )
    return out


def fig3_paper(env: str, algo: str, eps: float) -> str:
    """The paper's values of one Figure 3 comparison (ours vs DP-SGD), where its tables print
    them (`PAPER_FIG3_POINTS`: Table 2a at ε = 10, Table 2b's ε1 = 0 column at ε = 5; the
    report's stars), else `FIGURE_ONLY`."""
    ours, dp = (PAPER_FIG3_POINTS.get((env, algo, eps, m)) for m in ("ours", "dp-sgd"))
    if ours is None and dp is None:
        return FIGURE_ONLY
    table = "Table 2a" if eps == 10.0 else "Table 2b, ε1 = 0"
    pairs = [(name, v) for name, v in (("ours", ours), ("DP-SGD", dp)) if v is not None]
    text = " vs ".join(f"{name} {v:.2f}" for name, v in pairs)
    return f"{text} ({table})"


def gallery_claims_fig3(
    scores: Scores,
    envs: Sequence[str],
    algos: Sequence[str],
    epsilons: Sequence[float],
    *,
    regime: bool = False,
) -> list[Claim]:
    """Figure 3: ours ≥ DP-SGD on the means, per comparison with distinct runs (at Table-1
    p = 1 ours is DP-SGD: the same runs, no comparison), each with its kind (`kind_of`)."""
    out = []
    for env in envs:
        for algo in algos:
            for eps in epsilons:
                p = PAPER_TABLE1_P[(env, algo)][_nearest(eps)]
                key = f"{env}/{algo}/eps{eps:g}"
                pair = _pair(scores, f"{key}/ours", f"{key}/dp-sgd")
                if pair is None or p >= 1.0:
                    continue
                o, d = pair
                verdict = holds(o[0] - d[0] >= 0)
                out.append(
                    Claim(
                        f"ours ≥ DP-SGD, {ENVS[env].label} {algo.upper()}, ε = {eps:g} (p = {p:g})",
                        fig3_paper(env, algo, eps),
                        f"ours {_fmt(*o)} vs DP-SGD {_fmt(*d)}",
                        verdict,
                        "plots/fig3.png",
                        kind=kind_of(verdict, pair, regime),
                    )
                )
    return out


def gallery_claims_fig4(scores: Scores, ms: Sequence[int]) -> list[Claim]:
    """Figure 4: the gap of ours over DP-SGD grows with m; ours ≥ DP-SGD at which m (both at
    the equal-steps scale: see the module doc)."""
    pairs = {m: _pair(scores, f"m{m}/ours", f"m{m}/dp-sgd") for m in ms}
    done = [m for m in ms if pairs[m] is not None]
    if not done:
        return []
    gaps = {m: pairs[m][0][0] - pairs[m][1][0] for m in done}
    grows = all(gaps[b] >= gaps[a] for a, b in itertools.pairwise(done))
    ahead = [m for m in done if gaps[m] >= 0]
    (o, d), last = pairs[done[-1]], done[-1]
    what = "Acrobot, ε = 10, CQL"
    return [
        Claim(
            f"the gap of ours over DP-SGD grows with m ({what})",
            FIGURE_ONLY,
            "gap "
            + ", ".join(f"{gaps[m]:+.2f} (m = {m})" for m in done)
            + f": {'grows' if grows else 'does not grow'} monotonically",
            holds(grows) if len(done) == len(ms) else "inconclusive",
            "plots/fig4.png",
            kind=AT_OUR_SCALE,
        ),
        Claim(
            f"ours ≥ DP-SGD as m grows ({what})",
            FIGURE_ONLY,
            (f"at m ∈ {{{', '.join(map(str, ahead))}}}" if ahead else "at no m")
            + f"; m = {last}: {_fmt(*o)} vs {_fmt(*d)}",
            count_verdict(len(ahead), len(done)),
            "plots/fig4.png",
            kind=AT_OUR_SCALE,
        ),
    ]


# ---------------------------------------------------------------------------------------------
# the equal-steps reports' note on scale, with what the noise-regime report found
# ---------------------------------------------------------------------------------------------

REGIME_ID = "expert-fig3/regime"  # its report is OUT/../expert-fig3/regime (a sibling folder)


def _span(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}–{hi:.3g}"


def _regime_pairs(metrics: Mapping[str, object]) -> list[tuple[str, float, float, bool]]:
    """(label, ours, DP-SGD, intervals overlap) of every (env, algo) the regime report ran."""
    cells = metrics.get("cells", {})
    assert isinstance(cells, Mapping)
    pairs = []
    for key in cells:
        if not key.endswith("/ours"):
            continue
        o, d = cells[key], cells.get(key[: -len("ours")] + "dp-sgd")
        if d is None or "normalised_mean" not in o or "normalised_mean" not in d:
            continue
        a, b = float(o["normalised_mean"]), float(d["normalised_mean"])
        width = max(float(o.get("normalised_ci95", math.inf)), float(d.get("normalised_ci95", 0)))
        env, algo = key.split("/")[:2]
        pairs.append((f"{ENVS[env].label} {algo.upper()}", a, b, abs(a - b) <= width))
    return pairs


def scale_note(out: Path, z_dp_sgd: Sequence[float], z_ours: Sequence[float]) -> list[str]:
    """The paragraph of an equal-steps report (N = 5,000, z calibrated to the budget) on its
    scale: its z beside the paper's, why its verdicts are "inconclusive at our scale", and what
    the noise-regime report beside it (`REGIME_ID`) found, read from its metrics.json."""
    zs = []
    if z_dp_sgd:
        zs.append(f"{_span(z_dp_sgd)} for DP-SGD")
    if z_ours:
        zs.append(f"{_span(z_ours)} for ours")
    regime = out.parent / "expert-fig3" / "regime"
    link = f"[{REGIME_ID}]({os.path.relpath(regime / 'report.md', out)})"
    text = (
        "**Scale and the paper's noise regime.** The runs of this report train N = 5,000 steps "
        f"with z calibrated to the budget{': ' + ', '.join(zs) if zs else ''}, far below the "
        "paper's z = 10–80 over up to 10⁶ steps, so they test another trade-off than the "
        f"paper's; the kind of every verdict in claims.json is therefore *{AT_OUR_SCALE}*. The "
        "same CartPole and LunarLander comparison at ε = 10 in the paper's noise regime (every "
        f"private run at z = {REGIME_NOISE:g}, b = 256, trained as long as its budget allows up "
        f"to {REGIME_STEPS:,} steps; the cap binds, so the methods are compared at equal z and "
        "steps, not at equal ε spent), with all three series (ours, DP-SGD, ours with the PLD "
        "filter calibration + joint budget) and the paper's printed values beside ours, is "
        f"{link} (`privrl reproduce {REGIME_ID}`)."
    )
    try:
        pairs = _regime_pairs(json.loads((regime / "metrics.json").read_text()))
    except (OSError, ValueError):
        pairs = []
    if not pairs:
        return [text + " It has not been run beside this report.", ""]
    held = sum(a >= b for _, a, b, _ in pairs)
    listed = ", ".join(f"{label} {a:.2f} vs {b:.2f}" for label, a, b, _ in pairs)
    overlap = sum(o for *_, o in pairs)
    apart = (
        "every interval overlapping"
        if overlap == len(pairs)
        else f"the 95% intervals apart in {len(pairs) - overlap} of them"
    )
    return [
        text + f" There, on the means, ours ≥ DP-SGD in {held} of {len(pairs)} comparisons "
        f"({listed}), {apart}.",
        "",
    ]
