"""The `dp-apvi-tabular` reproduction (APVI vs DP-APVI on random tabular MDPs), end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

# ---------------------------------------------------------------------------------------------
# the reproduction
# ---------------------------------------------------------------------------------------------


def test_reproduction_quick_smoke(tmp_path: Path) -> None:
    """`run(quick=True)` writes the report, plots and run-directory files in a few seconds."""
    from reproductions.dp_apvi_tabular import run

    report = run(tmp_path, seeds=None, seed=0, quick=True)
    assert report == tmp_path / "report.md"
    text = report.read_text()
    assert "Does DP-APVI converge to APVI" in text and "1/n" in text
    for name in ("config.json", "metrics.json", "metrics.csv", "privacy.json"):
        assert (tmp_path / name).is_file(), name
    assert len(list((tmp_path / "plots").glob("*.png"))) == 3


@pytest.mark.slow
def test_reproduction_full(tmp_path: Path) -> None:
    """The full study (about a minute): DP-APVI Gaussian ρ = 1 converges to APVI at the tuned
    scale, and its gap shrinks at least like 1/n past the E-threshold."""
    import json

    from reproductions.dp_apvi_tabular import run

    run(tmp_path, seeds=None, seed=0, quick=False)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    conv = {(c["variant"], c["bonus"], c["scale_kind"]): c for c in metrics["convergence"]}
    assert conv[("DP-APVI Gaussian ρ=1", "bernstein", "tuned")]["converged_by_n_max"]
    slope = next(
        s
        for s in metrics["slopes"]
        if (s["variant"], s["bonus"], s["scale_kind"])
        == ("DP-APVI Gaussian ρ=1", "bernstein", "tuned")
    )
    assert slope["slope"] < -1.0
