"""Machine-readable claims of a reproduction: ``docs/reproductions/ID/claims.json``.

Each reproduction's report writer builds its verdict table and, from the same numbers, a list
of `Claim`s that `write_claims` stores beside ``report.md``; `reproductions.gallery`
collects them into ``docs/reproductions/index.md``. A claim holds only strings already shown in
the report (the report's own formatting), so the gallery can never state a number the report
does not.

Each claim also has a *kind of verdict* (`KINDS`), the index's reading of it: holds, partly,
does not hold, inconclusive at our scale (the claim may hold, but our runs are too small, too
short or at a ceiling to tell), vacuous (met or unmet only because both sides are no better
than a trivial baseline: no evidence either way), n/a (our own study, no paper claim). A
report states it by setting `Claim.kind` (``"kind"`` in claims.json, written by
`write_claims`); otherwise `derive_kind` reads it from the verdict.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

VERDICTS = ("holds", "does not hold", "inconclusive", "partly", "n/a (our study)")
KINDS = ("holds", "partly", "does not hold", "inconclusive at our scale", "vacuous", "n/a")
CLAIMS_FILE = "claims.json"
# the gallery verdict of a claim whose report states its kind first (the inverse of `derive_kind`)
VERDICT_OF_KIND = {
    "holds": "holds",
    "partly": "partly",
    "does not hold": "does not hold",
    "inconclusive at our scale": "inconclusive",
    "vacuous": "inconclusive",
    "n/a": "n/a (our study)",
}


@dataclass(frozen=True)
class Claim:
    """One row of the gallery.

    claim: the paper's claim in a few words; paper: the paper's number or statement; ours: our
    measured number (with its CI where the report has one); verdict: one of `VERDICTS`; plot:
    the plot file that shows it, relative to the reproduction's directory; kind: the kind of
    verdict, one of `KINDS`, or None to derive it from the verdict (`derive_kind`).
    """

    claim: str
    paper: str
    ours: str
    verdict: str
    plot: str
    kind: str | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")
        for name in ("claim", "paper", "ours", "plot"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"claim field {name!r} must be a non-empty string")

    @classmethod
    def from_dict(cls, d: dict) -> Claim:
        fields = {k: d[k] for k in ("claim", "paper", "ours", "verdict", "plot")}
        return cls(**fields, kind=d.get("kind"))

    def to_dict(self) -> dict[str, str]:
        """The claims.json object (without ``kind`` when it is left to `derive_kind`)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @property
    def kind_of_verdict(self) -> str:
        """The stated kind, else the one derived from the verdict."""
        return self.kind or derive_kind(self.verdict, f"{self.claim} {self.ours}")


def derive_kind(verdict: str, text: str = "") -> str:
    """The kind of a verdict that states none: holds, partly and does not hold are their own
    kind, our study is n/a, and inconclusive is "vacuous" when `text` (the claim and our
    number) says so, otherwise "inconclusive at our scale"."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    if verdict == "n/a (our study)":
        return "n/a"
    if verdict == "inconclusive":
        return "vacuous" if "vacuous" in text.lower() else "inconclusive at our scale"
    return verdict


def with_kinds(claims: list[Claim]) -> list[Claim]:
    """`claims` with each kind stated (derived from the verdict where none was given)."""
    return [replace(c, kind=c.kind_of_verdict) for c in claims]


def count_verdict(held: int, total: int) -> str:
    """The verdict of a claim checked in `total` cases and holding in `held`: all → holds,
    none → does not hold, some → partly."""
    if total <= 0:
        return "inconclusive"
    return "holds" if held == total else "does not hold" if held == 0 else "partly"


def holds(flag: bool) -> str:
    return "holds" if flag else "does not hold"


def write_claims(out: Path, claims: list[Claim]) -> Path:
    """Write `claims` to ``out/claims.json`` (a JSON list of objects) and return its path."""
    path = Path(out) / CLAIMS_FILE
    path.write_text(
        json.dumps([c.to_dict() for c in claims], indent=2, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    return path


def read_claims(path: Path) -> list[Claim]:
    """The claims of one ``claims.json``; a malformed file raises ValueError naming it."""
    try:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(rows, list):
            raise ValueError("expected a JSON list")
        return [Claim.from_dict(r) for r in rows]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a valid claims file ({err})") from err
