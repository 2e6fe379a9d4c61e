"""The report text the PRIMORL reproductions share: a row's return with its interval, the
shares of MOPO's return, the quick-mode warning and the verdict table (re-exported by
`reproductions.primorl.sweeps`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reproductions.primorl.sweeps import Scale

__all__ = [
    "at_ceiling",
    "eps_text",
    "mopo_not_learned",
    "num_text",
    "raw_text",
    "return_text",
    "share_texts",
    "smoke_lines",
    "verdict_lines",
    "verdict_section",
]


def return_text(stats: Mapping[str, Any], digits: int = 1, *, raw: bool = False) -> str:
    """A row's return ± its 95% CI (``raw``: on the raw scale, "—" without one). One seed has
    no interval: "(one seed, no CI)" instead, or the number alone in the raw column."""
    key = "raw_return" if raw else "return"
    if key not in stats:
        return "—"
    value = f"{stats[key]:.{digits}f}"
    if stats["seeds"] < 2:
        return value if raw else f"{value} (one seed, no CI)"
    return f"{value} ± {stats['raw_ci' if raw else 'ci']:.{digits}f}"


def raw_text(stats: Mapping[str, Any]) -> str:
    """`return_text` on the raw scale, for a report table's raw column."""
    return return_text(stats, raw=True)


def at_ceiling(table: Mapping[Any, Mapping[str, Any]], ceiling: float) -> bool:
    """Every row of `table` has a normalised score of at least `ceiling`: all reach the task's
    ceiling, so no difference between them can show."""
    scores = [s.get("normalised") for s in table.values()]
    return bool(scores) and None not in scores and min(scores) >= ceiling


def num_text(value: float | None) -> str:
    """A normalised score for a report table ("—" without one)."""
    return "—" if value is None else f"{value:.1f}"


def share_texts(stats: Mapping[str, Any]) -> tuple[str, str]:
    """A row's share of our MOPO ("—" without one) and its per-seed returns, as table cells."""
    share = f"{stats['share']:.1f}%" if "share" in stats else "—"
    return share, ", ".join(f"{v:.1f}" for v in stats["per_seed"])


def smoke_lines(scale: Scale) -> list[str]:
    """The report's quick-mode warning (nothing outside quick mode)."""
    if not scale.quick:
        return []
    return [
        "**Quick mode (smoke scale), not the paper's scale**: tiny dataset, 3 DP-FedAvg "
        f"rounds, {scale.epochs} × 20 SAC steps — the numbers mean nothing; every verdict "
        "is inconclusive.",
        "",
    ]


def mopo_not_learned(mopo: Mapping[str, Any] | None, threshold: float) -> list[str]:
    """The report's warning when MOPO's normalised score is below `threshold` (or missing)."""
    if ((mopo or {}).get("normalised") or -math.inf) >= threshold:
        return []
    return [
        f"MOPO's normalised score is below {threshold:g}: it did not learn, so no share "
        "of its return is evidence (verdicts inconclusive).",
    ]


def verdict_lines(found: Sequence[Mapping[str, str]]) -> list[str]:
    """The report's verdicts: a table of claim, paper, ours, verdict (a failure in bold)."""
    lines = ["## Verdicts", "", "| claim | paper | ours | verdict |", "|---|---|---|---|"]
    for c in found:
        verdict = f"**{c['verdict']}**" if c["verdict"] == "does not hold" else c["verdict"]
        lines.append(f"| {c['claim']} | {c['paper']} | {c['ours']} | {verdict} |")
    return lines


def verdict_section(
    summary: Mapping[Any, Mapping[str, Any]],
    found: Sequence[Mapping[str, str]],
    *,
    ceiling: float,
    ceiling_note: str,
    learned: float,
) -> list[str]:
    """The verdicts of a one-task report, then `ceiling_note` when every row is at the task's
    `ceiling` and the warning when a finished MOPO's normalised score is below `learned`."""
    lines = ["", *verdict_lines(found)]
    if at_ceiling(summary, ceiling):
        lines += ["", ceiling_note]
    if summary.get("mopo") and (warning := mopo_not_learned(summary["mopo"], learned)):
        lines += ["", *warning]
    return lines


def eps_text(eps: float) -> str:
    return "∞" if math.isinf(eps) else f"{eps:.2f}"
