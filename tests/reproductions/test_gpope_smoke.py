"""The GPOPE reproductions (chain and Mountain Car figures, the accounting study), end to end."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # ~10 s; test_gpope_chain_figures.py rebuilds both chain figures by default
def test_chain_reproductions_quick_smoke(tmp_path) -> None:
    """`quick=True` chain reproductions run end to end: report with tables and the claims
    section, plots, and the run-directory files (numbers are not final)."""
    from reproductions.gpope import accounting, fig1a, fig1b

    for fn in (fig1a, fig1b, accounting):
        out = tmp_path / fn.__name__
        report = fn(out, seeds=1, seed=0, quick=True)
        text = report.read_text()
        assert "QUICK" in text and "|" in text, fn.__name__
        for name in ("config.json", "metrics.json", "metrics.csv", "privacy.json"):
            assert (out / name).is_file(), (fn.__name__, name)
        assert list((out / "plots").glob("*.png")), fn.__name__
    assert "## Claims" in (tmp_path / "fig1a" / "report.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fig2a", "fig3b", "fig4"])
def test_continuous_reproductions_quick_smoke(tmp_path, name: str) -> None:
    """Mountain Car / HIV quick runs (slow: the domains train their Q on first use)."""
    from reproductions import gpope as g

    report = getattr(g, name)(tmp_path / name, seeds=1, quick=True)
    assert "## Claims" in report.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fig1a", "fig1b", "accounting", "fig2a", "fig3b", "fig4"])
def test_full_reproductions(tmp_path, name: str) -> None:
    """The full reproductions (minutes each; the committed reports come from these)."""
    from reproductions import gpope as g

    report = getattr(g, name)(tmp_path / name)
    assert "## Claims" in report.read_text()
