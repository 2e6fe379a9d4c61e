"""The reproduction gallery: claims files, `write_index` and `privrl reproduce --index`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privrl.cli.main import main
from privrl.experiments.claims import VERDICTS, Claim, count_verdict, read_claims, write_claims
from privrl.experiments.gallery import render_index, write_index
from privrl.experiments.reproduce import REPRODUCTIONS

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
    text = write_index(tmp_path).read_text(encoding="utf-8")
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
