"""Figure 1(a) and 1(b) of Qiao & Wang: the reports rendered from the committed runs' own
results (config.json, metrics.json: the grid, every cell's mean ± s.e., the D/K tuning, the
times) are the committed report.md byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reproductions.qiao_wang.grid import RHO_A, _Setup
from reproductions.qiao_wang.report import _vstar
from tests.reproductions.committed import committed, committed_json


def _setup_of(config: dict[str, Any]) -> _Setup:
    return _Setup(
        tuple(config["K"]),
        tuple(config.get("K_extended", ())),
        config["seeds"],
        tuple(config["bonus_scales"]),
        config["base_seed"],
        config["quick"],
    )


def _agg(cells: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """metrics.json's list of cells back to (algorithm, instance, C, K) → mean, se, n."""
    return {
        (c["algorithm"], c["instance"], c["C"], c["K"]): {k: c[k] for k in ("mean", "se", "n")}
        for c in cells
    }


def _tuning(setup: _Setup, t: dict[str, Any]) -> Any:
    from reproductions.qiao_wang.tuning import Tuning, tuning_setup

    score = {float(c): {float(m): v for m, v in row.items()} for c, row in t["score"].items()}
    return Tuning(
        tuning_setup(setup.quick, setup.scales),
        tuple(t["multipliers"]),
        score,
        {float(c): m for c, m in t["chosen"].items()},
        t["wall_seconds"],
        t["cell_cpu_seconds"],
    )


def _fig1a(root: Path, setup: _Setup, m: dict[str, Any]) -> str:
    from reproductions.qiao_wang import _report_a
    from reproductions.qiao_wang.report import _claims_a, _representative_report

    agg = _agg(m["cells"])
    extras = {
        "zero_q": _agg(m["zero_q_fraction"]),
        "cap_q": _agg(m["cap_q_fraction"]),
        "v_hat": _agg(m["pessimistic_value_estimate"]),
    }
    vstar = _vstar()
    plots = [root / "plots" / f"fig1a_C{c:g}.png" for c in setup.scales]
    plots.append(root / "plots" / f"fig1a_diagnostics_C{setup.scales[-1]:g}.png")
    return _report_a(
        setup,
        agg,
        extras,
        _claims_a(agg, setup, vstar),
        vstar,
        m["wall_seconds"],
        plots=plots,
        root=root,
        priv=_representative_report(RHO_A),
        tuning=_tuning(setup, m["dk_tuning"]),
        cell_cpu=m["cell_cpu_seconds"],
    )


def _fig1b(root: Path, setup: _Setup, m: dict[str, Any]) -> str:
    from reproductions.qiao_wang import _report_b
    from reproductions.qiao_wang.grid import RHOS_B
    from reproductions.qiao_wang.report import _claims_b

    agg = _agg(m["cells"])
    plots = [root / "plots" / f"fig1b_C{c:g}.png" for c in setup.scales]
    claims = _claims_b(agg, setup, RHOS_B)
    return _report_b(setup, agg, claims, _vstar(), m["wall_seconds"], plots=plots, root=root)


def test_fig1a_report_regenerates_the_committed_report(tmp_path: Path) -> None:
    rid = "qiao-wang-fig1a"
    setup = _setup_of(committed_json(rid, "config.json"))
    text = _fig1a(tmp_path, setup, committed_json(rid, "metrics.json"))
    assert text == committed(rid)


def test_fig1a_config_and_metrics_rebuild_from_the_committed_cells(tmp_path: Path) -> None:
    """config.json and metrics.json written from the committed cells, claims recomputed."""
    from privrl.runs.rundir import RunDir
    from reproductions.qiao_wang import _fig1a_config, _fig1a_metrics
    from reproductions.qiao_wang.report import _claims_a

    rid = "qiao-wang-fig1a"
    setup = _setup_of(committed_json(rid, "config.json"))
    m = committed_json(rid, "metrics.json")
    agg = _agg(m["cells"])
    extras = {
        "zero_q": _agg(m["zero_q_fraction"]),
        "cap_q": _agg(m["cap_q_fraction"]),
        "v_hat": _agg(m["pessimistic_value_estimate"]),
    }
    vstar, tuning = _vstar(), _tuning(setup, m["dk_tuning"])
    claims = _claims_a(agg, setup, vstar)
    run = RunDir(tmp_path)
    run.write_config(_fig1a_config(setup, tuning))
    seconds, cpu = m["wall_seconds"], m["cell_cpu_seconds"]
    run.write_metrics(_fig1a_metrics(setup, agg, extras, claims, vstar, tuning, seconds, cpu))
    for name in ("config.json", "metrics.json"):
        assert (tmp_path / name).read_text(encoding="utf-8") == committed(rid, name)


def test_fig1b_report_regenerates_the_committed_report(tmp_path: Path) -> None:
    rid = "qiao-wang-fig1b"
    setup = _setup_of(committed_json(rid, "config.json"))
    text = _fig1b(tmp_path, setup, committed_json(rid, "metrics.json"))
    assert text == committed(rid)


GOLDEN = Path(__file__).resolve().parent / "golden"


def _quick(setup: _Setup) -> _Setup:
    """The committed grid seen as a quick run: the quick K and C, no K beyond the paper's."""
    from reproductions.qiao_wang.grid import QUICK_K, QUICK_SCALES

    return _Setup(QUICK_K, (), setup.seeds, QUICK_SCALES, setup.base_seed, True)


def test_fig1a_quick_rendering_of_the_committed_cells_is_the_stored_one(tmp_path: Path) -> None:
    rid = "qiao-wang-fig1a"
    setup = _quick(_setup_of(committed_json(rid, "config.json")))
    text = _fig1a(tmp_path, setup, committed_json(rid, "metrics.json"))
    assert "--quick" in text and "**Beyond the paper's range.**" not in text
    assert text == (GOLDEN / "qiao-wang-fig1a-quick.md").read_text(encoding="utf-8")


def test_fig1b_quick_rendering_of_the_committed_cells_is_the_stored_one(tmp_path: Path) -> None:
    rid = "qiao-wang-fig1b"
    setup = _quick(_setup_of(committed_json(rid, "config.json")))
    text = _fig1b(tmp_path, setup, committed_json(rid, "metrics.json"))
    assert "(quick mode: numbers are not final)" in text
    assert text == (GOLDEN / "qiao-wang-fig1b-quick.md").read_text(encoding="utf-8")
