"""The reproduction gallery: claims files, `write_index` and `privrl reproduce --index`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privrl.cli.main import main
from reproductions.claims import (
    KINDS,
    VERDICTS,
    Claim,
    count_verdict,
    derive_kind,
    read_claims,
    with_kinds,
    write_claims,
)
from reproductions.gallery import render_index, write_index
from reproductions.reproduce import REPRODUCTIONS

ROOT = Path(__file__).resolve().parents[2] / "docs" / "reproductions"


def test_committed_index_is_what_write_index_generates():
    """index.md cannot drift from the claims files: it is exactly their rendering."""
    assert (ROOT / "index.md").read_text(encoding="utf-8") == render_index(ROOT)


@pytest.mark.parametrize("rid", sorted(REPRODUCTIONS))
def test_every_reproduction_has_valid_claims(rid):
    claims = read_claims(ROOT / rid / "claims.json")
    assert claims, f"{rid}: no claims"
    for c in claims:
        assert c.verdict in VERDICTS
        assert (ROOT / rid / c.plot).is_file(), f"{rid}: plot {c.plot} missing"
        assert f"({rid}/report.md)" in (ROOT / "index.md").read_text(encoding="utf-8")


def test_sub_reports_are_listed_after_their_reproduction(tmp_path):
    """A claims file one level below a reproduction (ID/SUB/claims.json) is a sub-report: it
    is listed as ID/SUB right after ID, under ID's paper, linked to its own report and plot,
    and counted by kind."""
    for rid in ("expert-fig3", "expert-fig3/regime", "expert-fig4"):
        (tmp_path / rid).mkdir(parents=True)
        write_claims(tmp_path / rid, [Claim(rid, "p", "o", "holds", "plots/f.png")])
    md = render_index(tmp_path)
    rows = [line for line in md.splitlines() if line.startswith("| [expert")]
    assert [r.split("]")[0] for r in rows] == ["| [expert-fig3", "| [expert-fig3/regime",
                                               "| [expert-fig4"]  # fmt: skip
    assert "[expert-fig3/regime](expert-fig3/regime/report.md)" in rows[1]
    assert '<img src="expert-fig3/regime/plots/f.png"' in rows[1]
    assert md.count(f"## {REPRODUCTIONS['expert-fig3'].paper}") == 1
    assert "| holds | 3 |" in md


def test_committed_regime_report_is_in_the_index():
    index = (ROOT / "index.md").read_text(encoding="utf-8")
    for c in read_claims(ROOT / "expert-fig3" / "regime" / "claims.json"):
        assert (ROOT / "expert-fig3" / "regime" / c.plot).is_file()
        assert f"| [expert-fig3/regime](expert-fig3/regime/report.md) | {c.claim} |" in index


# reports whose generators state the kind of every claim (the others may leave it to the verdict)
STATES_KIND = (
    "mopo-table1",
    "primorl-table1",
    "primorl-ablation",
    "primorl-fig3",
    "primorl-table11",
    "dp-apvi-tabular",
    "audit",
    "gpope-accounting",
    "gpope-fig1a",
    "gpope-fig1b",
    "gpope-fig2a",
    "gpope-fig3b",
    "gpope-fig4",
    "sdp-pe-fig4",
    "expert-table2a",
    "expert-table2b",
    "expert-fig3",
    "expert-fig4",
)


@pytest.mark.parametrize("rid", sorted(REPRODUCTIONS))
def test_every_committed_kind_is_a_known_kind(rid):
    """A stated ``kind`` is one of KINDS (read_claims refuses others) and the index shows each
    claim's kind, stated or derived, in its kind column."""
    rows = json.loads((ROOT / rid / "claims.json").read_text(encoding="utf-8"))
    for row in rows:
        assert row.get("kind", KINDS[0]) in KINDS, f"{rid}: kind {row.get('kind')!r}"
    index = (ROOT / "index.md").read_text(encoding="utf-8")
    for c in read_claims(ROOT / rid / "claims.json"):
        assert c.kind_of_verdict in KINDS
        assert f'| {c.kind_of_verdict} | [<img src="{rid}/{c.plot}"' in index


@pytest.mark.parametrize("rid", STATES_KIND)
def test_these_reports_state_the_kind_of_every_claim(rid):
    rows = json.loads((ROOT / rid / "claims.json").read_text(encoding="utf-8"))
    assert all("kind" in row for row in rows), rid


def test_claim_refuses_an_unknown_kind(tmp_path):
    with pytest.raises(ValueError, match="kind 'mostly'"):
        Claim("c", "p", "o", "holds", "plots/x.png", kind="mostly")
    with pytest.raises(ValueError, match="kind"):  # the verdict's spelling is not a kind
        Claim("c", "p", "o", "n/a (our study)", "plots/x.png", kind="n/a (our study)")
    (tmp_path / "claims.json").write_text(
        json.dumps([{"claim": "c", "paper": "p", "ours": "o", "verdict": "holds",
                     "plot": "plots/x.png", "kind": "inconclusive"}])
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"not a valid claims file.*kind 'inconclusive'"):
        read_claims(tmp_path / "claims.json")


def test_derive_kind_from_the_verdict():
    assert derive_kind("holds") == "holds"
    assert derive_kind("partly") == "partly"
    assert derive_kind("does not hold") == "does not hold"
    assert derive_kind("n/a (our study)") == "n/a"
    assert derive_kind("inconclusive", "both still in burn-in") == "inconclusive at our scale"
    assert derive_kind("inconclusive", "189× — vacuous: GP does not beat θ = 0") == "vacuous"
    with pytest.raises(ValueError, match="verdict"):
        derive_kind("mostly")
    # a stated kind wins over the derived one
    c = Claim("c", "p", "GP beats V1 (vacuous)", "holds", "plots/x.png", kind="vacuous")
    assert c.kind_of_verdict == "vacuous"
    assert Claim("c", "p", "o", "holds", "plots/x.png").kind_of_verdict == "holds"


def test_claims_round_trip_with_and_without_kind(tmp_path):
    """A claim without a kind is written without the key (files of reports that state none
    stay as they were); a stated kind survives write → read; `with_kinds` states them all."""
    claims = [
        Claim("a", "p", "o", "inconclusive", "plots/x.png"),
        Claim("b", "p", "o", "inconclusive", "plots/x.png", kind="vacuous"),
    ]
    write_claims(tmp_path, claims)
    rows = json.loads((tmp_path / "claims.json").read_text(encoding="utf-8"))
    assert "kind" not in rows[0] and rows[1]["kind"] == "vacuous"
    assert read_claims(tmp_path / "claims.json") == claims
    assert [c.kind for c in with_kinds(claims)] == ["inconclusive at our scale", "vacuous"]


def test_claim_refuses_an_unknown_verdict():
    with pytest.raises(ValueError, match="verdict"):
        Claim("c", "p", "o", "mostly", "plots/x.png")
    with pytest.raises(ValueError, match="ours"):
        Claim("c", "p", "", "holds", "plots/x.png")


def test_count_verdict():
    assert count_verdict(6, 6) == "holds"
    assert count_verdict(0, 6) == "does not hold"
    assert count_verdict(2, 6) == "partly"
    assert count_verdict(0, 0) == "inconclusive"


def test_write_index_groups_by_paper_bolds_failures_and_links(tmp_path):
    for rid, verdict in (("gpope-fig1b", "does not hold"), ("qiao-wang-fig1b", "holds")):
        (tmp_path / rid).mkdir()
        write_claims(tmp_path / rid, [Claim("a | b", "1.0", "2.0 ± 0.1", verdict, "plots/f.png")])
    write_claims(
        tmp_path / "gpope-fig1b",
        [
            *read_claims(tmp_path / "gpope-fig1b" / "claims.json"),
            Claim("v", "10×", "189× — vacuous", "inconclusive", "plots/f.png"),
            Claim("s", "p", "o", "inconclusive", "plots/f.png", kind="inconclusive at our scale"),
        ],
    )
    text = write_index(tmp_path).read_text(encoding="utf-8")
    assert "| verdict | kind | plot |" in text
    # kinds: derived from the verdict, from the text ('vacuous'), or stated; and counted
    assert "| 2.0 ± 0.1 | **does not hold** | does not hold | [<img" in text
    assert "| 189× — vacuous | inconclusive | vacuous | [<img" in text
    assert "| o | inconclusive | inconclusive at our scale | [<img" in text
    assert "| holds | holds | [<img" in text
    pairs = [
        line.strip("| ").split(" | ")
        for line in text.splitlines()
        if line.startswith("| ") and line.count("|") == 3 and "kind" not in line
    ]
    assert {k: int(n) for k, n in pairs} == {
        "holds": 1, "partly": 0, "does not hold": 1, "inconclusive at our scale": 1,
        "vacuous": 1, "n/a": 0,
    }  # fmt: skip
    # registry order: Qiao & Wang's section before Xie et al.'s
    assert text.index("## Qiao & Wang") < text.index("## Xie, Thomas & Miklau")
    assert "| [gpope-fig1b](gpope-fig1b/report.md) | a \\| b | 1.0 | 2.0 ± 0.1 |" in text
    assert "| **does not hold** |" in text and "| holds |" in text
    assert (
        '[<img src="qiao-wang-fig1b/plots/f.png" width="160">](qiao-wang-fig1b/plots/f.png)' in text
    )


def test_read_claims_names_a_malformed_file(tmp_path):
    (tmp_path / "claims.json").write_text(json.dumps([{"claim": "x"}]))
    with pytest.raises(ValueError, match="not a valid claims file"):
        read_claims(tmp_path / "claims.json")


def test_cli_index_writes_and_refuses(tmp_path, capsys):
    (tmp_path / "gpope-fig4").mkdir()
    write_claims(tmp_path / "gpope-fig4", [Claim("c", "p", "o", "partly", "plots/f.png")])
    assert main(["reproduce", "--index", "--out", str(tmp_path)]) == 0
    assert "gpope-fig4" in (tmp_path / "index.md").read_text(encoding="utf-8")
    capsys.readouterr()
    for argv, fragment in (
        (["reproduce", "--index", "--out", str(tmp_path / "missing")], "not a directory"),
        (["reproduce", "gpope-fig4", "--index"], "--index takes no reproduction id"),
    ):
        assert main(argv) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and err[0].startswith("error:") and fragment in err[0], err
