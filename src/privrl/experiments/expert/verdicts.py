"""Gallery claims (claims.json): each report's verdicts, from its cells' (mean, 95% CI)
normalised scores, and the kind of each verdict (``"kind"`` in claims.json, one of `KINDS`).

Kind: at the equal-steps scale (N = 5,000, z calibrated to 1.5–2.4) every comparison tests
another trade-off than the paper's (z = 10–80 over up to 10⁶ steps), so its kind is
"inconclusive at our scale" whatever the means say. In the paper's noise regime
(`Scale.regime`) the verdict is its own kind when the two means differ by more than the wider
95% half-width, else "inconclusive at our scale"."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from privrl.experiments.claims import Claim, count_verdict, holds
from privrl.experiments.expert.paper import (
    ENVS,
    PAPER_TABLE1_P,
    PAPER_TABLE2A,
    PAPER_TABLE2B,
    _fmt,
    _nearest,
)

Scores = Mapping[str, tuple[float, float]]
FIGURE_ONLY = "figure only (no numbers)"
KINDS = ("holds", "partly", "does not hold", "inconclusive at our scale", "vacuous", "n/a")
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


def _add_kind(kinds: list[str] | None, claim: Claim, pair: object, regime: bool) -> Claim:
    if kinds is not None:
        kinds.append(kind_of(claim.verdict, pair, regime))  # type: ignore[arg-type]
    return claim


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
    kinds: list[str] | None = None,
    regime: bool = False,
) -> list[Claim]:
    """Table 2a's claim check: ours (Table-1 p) ≥ DP-SGD on the means, per (env, algo); the
    kind of each verdict is appended to ``kinds`` when given (`kind_of`)."""
    out = []
    for env in envs:
        for algo in ("cql", "bcq"):
            p = PAPER_TABLE1_P[(env, algo)][eps]
            pair = _pair(scores, f"{env}/{algo}/p{p:g}/main", f"{env}/{algo}/p1/main")
            if pair is None:
                continue
            (o, d), paper = pair, PAPER_TABLE2A[(env, algo)]
            out.append(
                _add_kind(
                    kinds,
                    Claim(
                        f"ours ≥ DP-SGD at ε = {eps:g}, {ENVS[env].label} {algo.upper()} "
                        f"(p = {p:g})",
                        " vs ".join(
                            "inf" if v is None else f"{v:.2f}" for v in (paper[p], paper[1.0])
                        ),
                        f"{_fmt(*o)} vs {_fmt(*d)}",
                        holds(o[0] - d[0] >= 0),
                        "plots/table2a.png",
                    ),
                    pair,
                    regime,
                )
            )
    return out


def gallery_claims_table2b(scores: Scores, *, kinds: list[str] | None = None) -> list[Claim]:
    """Table 2b: the report states the numbers but no verdict, so the gallery says
    inconclusive (3 seeds, CIs that overlap the paper's ordering)."""
    out = []
    for (env, eps), (p_f, p_n) in PAPER_TABLE2B.items():
        pair = _pair(scores, f"{env}/bcq/eps{eps:g}/filter", f"{env}/bcq/eps{eps:g}/nofilter")
        if pair is None:
            continue
        f, n = pair
        out.append(
            _add_kind(
                kinds,
                Claim(
                    f"below ε = 5, ε1 = 0 beats ε1 = 3ε/4 ({ENVS[env].label}, ε = {eps:g}, BCQ)",
                    f"ε1 = 3ε/4: {p_f:.2f}; ε1 = 0: {p_n:.2f}",
                    f"ε1 = 3ε/4: {_fmt(*f)}; ε1 = 0: {_fmt(*n)}",
                    "inconclusive",
                    "plots/table2b.png",
                ),
                pair,
                False,
            )
        )
    return out


def gallery_claims_fig3(
    scores: Scores,
    envs: Sequence[str],
    algos: Sequence[str],
    epsilons: Sequence[float],
    *,
    kinds: list[str] | None = None,
    regime: bool = False,
) -> list[Claim]:
    """Figure 3: ours ≥ DP-SGD on the means, per comparison with distinct runs (at Table-1
    p = 1 ours is DP-SGD: the same runs, no comparison)."""
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
                out.append(
                    _add_kind(
                        kinds,
                        Claim(
                            f"ours ≥ DP-SGD, {ENVS[env].label} {algo.upper()}, ε = {eps:g} "
                            f"(p = {p:g})",
                            FIGURE_ONLY,
                            f"ours {_fmt(*o)} vs DP-SGD {_fmt(*d)}",
                            holds(o[0] - d[0] >= 0),
                            "plots/fig3.png",
                        ),
                        pair,
                        regime,
                    )
                )
    return out


def gallery_claims_fig4(
    scores: Scores, ms: Sequence[int], *, kinds: list[str] | None = None
) -> list[Claim]:
    """Figure 4: the gap of ours over DP-SGD grows with m; ours ≥ DP-SGD at which m."""
    pairs = {m: _pair(scores, f"m{m}/ours", f"m{m}/dp-sgd") for m in ms}
    done = [m for m in ms if pairs[m] is not None]
    if not done:
        return []
    gaps = {m: pairs[m][0][0] - pairs[m][1][0] for m in done}
    grows = all(gaps[b] >= gaps[a] for a, b in itertools.pairwise(done))
    ahead = [m for m in done if gaps[m] >= 0]
    (o, d), last = pairs[done[-1]], done[-1]
    what = "Acrobot, ε = 10, CQL"
    if kinds is not None:  # the equal-steps scale: see the module doc
        kinds += [AT_OUR_SCALE, AT_OUR_SCALE]
    return [
        Claim(
            f"the gap of ours over DP-SGD grows with m ({what})",
            FIGURE_ONLY,
            "gap "
            + ", ".join(f"{gaps[m]:+.2f} (m = {m})" for m in done)
            + f": {'grows' if grows else 'does not grow'} monotonically",
            holds(grows) if len(done) == len(ms) else "inconclusive",
            "plots/fig4.png",
        ),
        Claim(
            f"ours ≥ DP-SGD as m grows ({what})",
            FIGURE_ONLY,
            (f"at m ∈ {{{', '.join(map(str, ahead))}}}" if ahead else "at no m")
            + f"; m = {last}: {_fmt(*o)} vs {_fmt(*d)}",
            count_verdict(len(ahead), len(done)),
            "plots/fig4.png",
        ),
    ]


def claims_with_kinds(claims: Sequence[Claim], kinds: Sequence[str]) -> list[dict[str, str]]:
    """The claims.json objects: each claim's fields and its kind."""
    from dataclasses import asdict

    if len(kinds) != len(claims):
        raise ValueError(f"{len(claims)} claims but {len(kinds)} kinds")
    out = []
    for c, k in zip(claims, kinds, strict=True):
        if k not in KINDS:
            raise ValueError(f"kind {k!r} is not one of {', '.join(KINDS)}")
        d = {key: v for key, v in asdict(c).items() if v is not None}
        d["kind"] = k
        out.append(d)
    return out


def write_claims_with_kinds(out: Path, claims: Sequence[Claim], kinds: Sequence[str]) -> Path:
    """Write ``out/claims.json`` (`claims_with_kinds`)."""
    path = Path(out) / "claims.json"
    rows = claims_with_kinds(claims, kinds)
    path.write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
