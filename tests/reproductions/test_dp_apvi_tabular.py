"""The `dp-apvi-tabular` reproduction (APVI vs DP-APVI on random tabular MDPs), end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


# ---------------------------------------------------------------------------------------------
# the report, from fixed inputs
# ---------------------------------------------------------------------------------------------

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "reproductions" / "dp-apvi-tabular"


def _committed_findings() -> tuple[object, bool]:
    """The `Findings` of the committed full study, rebuilt from the files it wrote (config.json,
    metrics.json, metrics.csv), and whether it was a quick run."""
    import csv
    import json

    from reproductions.dp_apvi_tabular.study import Findings, StudyConfig, Variant

    def number(text: str) -> Any:
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
        return text

    def nan_back(obj: dict[str, Any]) -> dict[str, Any]:  # json_safe writes NaN as "nan"
        return {k: float(v) if v in ("nan", "inf", "-inf") else v for k, v in obj.items()}

    config = json.loads((COMMITTED / "config.json").read_text())
    quick = config.pop("quick")
    variants = [Variant(**v) for v in config.pop("variants")]
    metrics = json.loads((COMMITTED / "metrics.json").read_text(), object_hook=nan_back)
    with (COMMITTED / "metrics.csv").open(newline="") as fh:
        agg = [{k: number(v) for k, v in row.items()} for row in csv.DictReader(fh)]
    found = Findings(
        StudyConfig(**config),
        variants,
        agg,
        metrics["slopes"],
        metrics["tuned_bonus_scale"],
        metrics["tuning"],
        metrics["threshold_ablation"],
        metrics["elapsed_seconds"],
    )
    return found, quick


def test_report_regenerates_the_committed_report_byte_for_byte() -> None:
    """The report rendered from the committed study's own results is the committed report.md."""
    from reproductions.dp_apvi_tabular.report import _render
    from reproductions.dp_apvi_tabular.summary import _summary

    found, quick = _committed_findings()
    text = _render(found, _summary(found), quick=quick)  # type: ignore[arg-type]
    assert text == (COMMITTED / "report.md").read_text(encoding="utf-8")


def test_report_quick_adds_only_the_smoke_test_note() -> None:
    """`quick=True` inserts the smoke-test note after the title and changes nothing else."""
    from reproductions.dp_apvi_tabular.report import _render
    from reproductions.dp_apvi_tabular.summary import _summary

    found, _ = _committed_findings()
    full = _render(found, _summary(found), quick=False)  # type: ignore[arg-type]
    quick = _render(found, _summary(found), quick=True)  # type: ignore[arg-type]
    title, rest = full.split("\n\n", 1)
    note = (
        "> **Quick smoke-test run**: a reduced grid and few seeds. The numbers below are not the "
        "study's; run `privrl reproduce dp-apvi-tabular` for the full version."
    )
    assert quick == f"{title}\n\n{note}\n\n{rest}"
