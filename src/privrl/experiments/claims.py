"""Machine-readable claims of a reproduction: ``docs/reproductions/ID/claims.json``.

Each reproduction's report writer builds its verdict table and, from the same numbers, a list
of `Claim`s that `write_claims` stores beside ``report.md``; `privrl.experiments.gallery`
collects them into ``docs/reproductions/index.md``. A claim holds only strings already shown in
the report (the report's own formatting), so the gallery can never state a number the report
does not.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

VERDICTS = ("holds", "does not hold", "inconclusive", "partly", "n/a (our study)")
CLAIMS_FILE = "claims.json"


@dataclass(frozen=True)
class Claim:
    """One row of the gallery.

    claim: the paper's claim in a few words; paper: the paper's number or statement; ours: our
    measured number (with its CI where the report has one); verdict: one of `VERDICTS`; plot:
    the plot file that shows it, relative to the reproduction's directory.
    """

    claim: str
    paper: str
    ours: str
    verdict: str
    plot: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")
        for name in ("claim", "paper", "ours", "plot"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"claim field {name!r} must be a non-empty string")

    @classmethod
    def from_dict(cls, d: dict) -> Claim:
        return cls(**{k: d[k] for k in ("claim", "paper", "ours", "verdict", "plot")})


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
        json.dumps([asdict(c) for c in claims], indent=2, ensure_ascii=False) + "\n",
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
