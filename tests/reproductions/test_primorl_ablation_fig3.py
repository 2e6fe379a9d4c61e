"""`privrl reproduce primorl-ablation` and `primorl-fig3`: the sweeps they run (and the cells
they share with primorl-table1), the summaries, the verdicts and the reports."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from reproductions.primorl import ablation as A
from reproductions.primorl import fig3 as F
from reproductions.primorl import table1 as T
from reproductions.primorl.sweeps import Scale, reuse_finished


def _pendulum_data(tmp_path: Path) -> Path:
    from privrl.data.io import save_hdf5
    from tests.primorl.test_primorl import pendulum_data

    path = tmp_path / "d.h5"
    save_hdf5(pendulum_data(4, T=5, extra={"n_trajectories": 4}), path)
    return path


# ------------------------------------------------------------------------------ the sweeps


def test_ablation_grid_is_mopo_and_four_combinations_at_two_z(tmp_path: Path) -> None:
    from privrl.runs.sweep import expand

    data = _pendulum_data(tmp_path)
    sweep = expand(
        A.sweep_doc({"pendulum": data}, tmp_path / "s", Scale(seeds=2), backend="local", workers=1)
    )
    assert len(sweep.cells) == 2 * (1 + 2 * 4)
    combos = {
        (c.values.get("variant"), c.values.get("penalty"), c.values.get("clip_mode"))
        for c in sweep.cells
        if c.values["system"] == "primorl"
    }
    # the preset (MPD + per-layer) sets neither flag: the same runs as primorl-table1's
    assert combos == {
        (v, p, m) for v in ("low", "high") for p in ("ma", None) for m in (None, "flat")
    }


@pytest.mark.parametrize("module", [A, F])
def test_cells_identical_to_table1_share_its_keys_and_are_reused(module, tmp_path: Path) -> None:
    """MOPO (both) and the preset's LOW/HIGH cells (ablation) have primorl-table1's cell keys,
    and a finished table1 cell is copied instead of run again; a cell whose record has another
    key is not."""
    from privrl.runs.sweep import expand, finished

    data = _pendulum_data(tmp_path)
    scale = Scale(seeds=1, quick=True)
    table1 = expand(T.sweep_doc(data, tmp_path / "t1", scale, backend="local", workers=1))
    if module is A:
        doc = A.sweep_doc({"pendulum": data}, tmp_path / "s", scale, backend="local", workers=1)
        expected = 3  # MOPO, and the preset's LOW and HIGH (NO PRIVACY is not in Table 10)
    else:
        doc = F.sweep_doc(data, tmp_path / "s", scale, backend="local", workers=1)
        expected = 1  # MOPO
    sweep = expand(doc)
    shared = {c.name for c in table1.cells} & {c.name for c in sweep.cells}
    assert len(shared) == expected
    for cell in table1.cells:  # fake finished table1 cells
        (cell.run_dir).mkdir(parents=True)
        for name in ("config.json", "metrics.json", "privacy.json"):
            (cell.run_dir / name).write_text("{}")
        key = cell.key if cell.values["system"] == "mopo" else "another"
        (cell.dir / "cell.json").write_text(json.dumps({"status": "ok", "key": key}))
    assert reuse_finished(sweep, [tmp_path / "t1"]) == 1  # MOPO only: the others' keys differ
    done = [c for c in sweep.cells if finished(c)]
    assert [c.values["system"] for c in done] == ["mopo"]


def test_fig3_grid_has_at_least_six_budgets_from_1_to_100(tmp_path: Path) -> None:
    from privrl.runs.sweep import expand

    data = _pendulum_data(tmp_path)
    sweep = expand(F.sweep_doc(data, tmp_path / "s", Scale(seeds=2), backend="local", workers=1))
    eps = sorted({c.values["epsilon"] for c in sweep.cells if c.values["system"] == "primorl"})
    assert len(eps) >= 6 and eps[0] == 1 and eps[-1] == 100
    assert all(c.values.get("variant") is None for c in sweep.cells)  # z calibrated, no row z


# ------------------------------------------------------------------------------ ablation report


def _abl_row(variant, penalty, clip, ret, score, seed=0, system="primorl", eps=4.07) -> dict:
    return {
        "system": system,
        "task": "pendulum",
        "variant": variant,
        "penalty": penalty,
        "clip_mode": clip,
        "seed": seed,
        "status": "ok",
        "return_mean": ret,
        "normalised_score": score,
        "privacy_epsilon": None if system == "mopo" else eps,
    }


def _ablation_rows(returns: dict, score: float = 99.0) -> list[dict]:
    rows = [_abl_row(None, None, None, r, score, s, "mopo") for s, r in enumerate((190.0, 191.0))]
    for (variant, penalty, clip), ret in returns.items():
        for s, d in enumerate((-0.5, 0.5)):
            rows.append(_abl_row(variant, penalty, clip, ret + d, score, s))
    return rows


def _all(ret: float, **override: float) -> dict:
    out = {}
    for v in ("low", "high"):
        for p, c in A.COMBOS:
            flag_p = None if p == "mpd" else p  # preset flags left out, as in the sweep
            flag_c = None if c == "per_layer" else c
            out[(v, flag_p, flag_c)] = override.get(f"{v}/{p}/{c}", ret)
    return out


def test_ablation_verdicts_and_ceiling(tmp_path: Path) -> None:
    rows = _ablation_rows(_all(150.0, **{"low/ma/flat": 120.0, "high/ma/flat": 110.0}), 60.0)
    s = A.summarise(rows)["pendulum"]
    assert s[("low", "mpd", "per_layer")]["share"] == pytest.approx(100 * 150 / 190.5)
    found = [c["verdict"] for c in A.claims({"pendulum": s}) if "Pendulum" in c["claim"]]
    assert found == ["holds", "holds"]
    # the preset clearly worse than the best at one z: the first claim does not hold
    rows = _ablation_rows(_all(150.0, **{"high/mpd/per_layer": 120.0}), 60.0)
    pend = [c for c in A.claims(A.summarise(rows)) if "Pendulum" in c["claim"]]
    assert pend[0]["verdict"] == "does not hold"
    # every row at the ceiling: no difference can show, the second claim is inconclusive
    rows = _ablation_rows(_all(190.0), 99.0)
    report = A.write_report(
        tmp_path, rows, Scale(seeds=2), datasets={"pendulum": Path("d.h5")},
        missing={"balance": "dataset missing"}, wall=1.0,
    )  # fmt: skip
    text = report.read_text()
    assert "ceiling" in text and "Balance" in text and "dataset missing" in text
    assert "734.5 (92.3%)" in text  # the paper's number and its share of the paper's MOPO
    claims = json.loads((tmp_path / "claims.json").read_text())
    verdicts = [c["verdict"] for c in claims if "Pendulum" in c["claim"]]
    assert verdicts == ["holds", "inconclusive"]
    kinds = [c["kind"] for c in claims]  # at the ceiling, or not run: open at our scale
    assert kinds == ["holds", "inconclusive at our scale"] + ["inconclusive at our scale"] * 2
    assert {c["verdict"] for c in claims if "Balance" in c["claim"]} == {"inconclusive"}
    assert (tmp_path / "plots" / "ablation.png").stat().st_size > 1000
    assert "core-hours" not in text  # no timed cells: no cost claimed
    # timed Pendulum cells: the missing task's cost is stated from them (ratio × DP stage)
    from reproductions.primorl.table1_report import ROUND_RATIO

    for r in rows:
        r.update(seconds=1000.0, policy_stage_seconds=300.0, rounds=7000)
    text = A.write_report(
        tmp_path, rows, Scale(seeds=2), datasets={"pendulum": Path("d.h5")},
        missing={"balance": "dataset missing"}, wall=1.0,
    ).read_text()  # fmt: skip
    run_h = ROUND_RATIO["balance"] * 0.1 * 7000 / 3600 + 300.0 * 40 / 20 / 3600
    assert f"one PRIMORL run is ≈ {run_h:.1f} h" in text
    assert f"≈ {2 * (8 * run_h + 13.1 / 60):.0f} core-hours at 2 seeds" in text
    # quick mode: everything inconclusive, and the report says it is not the paper's scale
    text = A.write_report(
        tmp_path, rows, Scale(seeds=2, quick=True), datasets={"pendulum": Path("d.h5")},
        missing={}, wall=1.0,
    ).read_text()  # fmt: skip
    assert "not the paper's scale" in text
    assert {c["verdict"] for c in json.loads((tmp_path / "claims.json").read_text())} == {
        "inconclusive"
    }
    assert {c["kind"] for c in json.loads((tmp_path / "claims.json").read_text())} == {
        "inconclusive at our scale"
    }
    # a MOPO that did not learn: every share of it is vacuous
    s = A.summarise(_ablation_rows(_all(150.0), 10.0))
    assert {c["kind"] for c in A.claims(s) if "Pendulum" in c["claim"]} == {"vacuous"}


# ------------------------------------------------------------------------------ fig3 report


def _fig_rows(shares: dict[float, float], score: float = 60.0) -> list[dict]:
    rows = [
        {"system": "mopo", "seed": s, "status": "ok", "return_mean": r,
         "normalised_score": score, "privacy_epsilon": None}
        for s, r in enumerate((199.0, 201.0))
    ]  # fmt: skip
    for eps, share in shares.items():
        for s, d in enumerate((-1.0, 1.0)):
            rows.append(
                {"system": "primorl", "epsilon": eps, "seed": s, "status": "ok",
                 "return_mean": 2 * share + d, "normalised_score": score,
                 "privacy_epsilon": eps * 0.99, "noise_multiplier": 1.0 / eps}
            )  # fmt: skip
    return rows


def test_fig3_verdicts() -> None:
    degrading = {e: (60.0 if e < 10 else 98.0) for e in F.EPSILONS}
    verdicts = [c["verdict"] for c in F.claims(F.summarise(_fig_rows(degrading)))]
    assert verdicts == ["holds", "holds"]
    early = {e: (60.0 if e < 50 else 98.0) for e in F.EPSILONS}
    verdicts = [c["verdict"] for c in F.claims(F.summarise(_fig_rows(early)))]
    assert verdicts == ["does not hold", "holds"]
    flat = dict.fromkeys(F.EPSILONS, 99.0)
    s = F.summarise(_fig_rows(flat, score=99.0))
    assert s["1"]["noise_multiplier"] == 1.0 and math.isinf(s["mopo"]["epsilon"])
    assert [c["verdict"] for c in F.claims(s)] == ["holds", "inconclusive"]  # at the ceiling
    assert [c["kind"] for c in F.claims(s)] == ["holds", "inconclusive at our scale"]
    assert {c["verdict"] for c in F.claims(s, quick=True)} == {"inconclusive"}
    assert {c["kind"] for c in F.claims(s, quick=True)} == {"inconclusive at our scale"}
    low = F.summarise(_fig_rows(degrading, score=10.0))  # MOPO did not learn
    assert {c["kind"] for c in F.claims(low)} == {"vacuous"}


def test_fig3_report(tmp_path: Path) -> None:
    rows = _fig_rows(dict.fromkeys(F.EPSILONS, 99.0), score=99.0)
    text = F.write_report(tmp_path, rows, Scale(seeds=2), data=Path("d.h5"), wall=1.0).read_text()
    assert "ceiling" in text and "| PRIMORL | 100.00 |" in text and "| MOPO | ∞ |" in text
    assert (tmp_path / "plots" / "return_vs_epsilon.png").stat().st_size > 1000
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["100"]["seeds"] == 2 and metrics["mopo"]["share"] == 100.0


def test_registered_as_sweeps() -> None:
    from reproductions.reproduce import REPRODUCTIONS

    for rid in ("primorl-ablation", "primorl-fig3"):
        assert REPRODUCTIONS[rid].sweep
        assert callable(REPRODUCTIONS[rid].load())


@pytest.mark.slow
@pytest.mark.parametrize("rid", ["primorl-ablation", "primorl-fig3"])
def test_quick_reproduction_runs_end_to_end(
    rid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reproductions.reproduce import reproduce

    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))  # the quick dataset, the cells
    report = Path(str(reproduce(rid, tmp_path / "report", quick=True, seeds=1, workers=2)))
    assert (tmp_path / "cache" / "reproduce" / rid / "quick" / "cells").is_dir()
    assert "Quick mode" in report.read_text()
    claims = json.loads((tmp_path / "report" / "claims.json").read_text())
    assert {c["verdict"] for c in claims} == {"inconclusive"}


def test_balance_cells_are_table1s_runs_at_full_scale(tmp_path: Path) -> None:
    """On Balance (full scale) the ablation's MOPO and preset LOW/HIGH cells are the same runs
    as primorl-table1's: same settings, the preset's 40 SAC epochs included."""
    data = tmp_path / "primorl-balance.h5"
    scale = Scale(seeds=1)
    t1 = T.sweep_doc({"balance": data}, tmp_path / "t1", scale, backend="local", workers=1)
    ab = A.sweep_doc({"balance": data}, tmp_path / "ab", scale, backend="local", workers=1)
    ignore = ("out", "grid", "cells", "sweep")  # "sweep": how the runs are executed and drawn
    assert {k: v for k, v in t1.items() if k not in ignore} == {
        k: v for k, v in ab.items() if k not in ignore
    }
    ours = [{k: v for k, v in c.items() if k != "seed"} for c in ab["cells"]]
    same = [c for c in t1["cells"] if c["system"] == "mopo" or c.get("variant") != "no-privacy"]
    assert len(same) == 3 and all(c["epochs"] == 40 for c in same)
    assert all({k: v for k, v in c.items() if k != "seed"} in ours for c in same)
    assert ab["grid"] == {"seed": [0]}


def test_balance_with_its_dataset_and_no_finished_run_is_pending(tmp_path: Path) -> None:
    """Balance's dataset is there but none of its runs has finished: its section and claims
    say *pending* (a rerun continues them), not "not run"."""
    rows = _ablation_rows(_all(150.0), 60.0)
    text = A.write_report(
        tmp_path, rows, Scale(seeds=2),
        datasets={"pendulum": Path("d.h5"), "balance": Path("b.h5")}, missing={}, wall=1.0,
    ).read_text()  # fmt: skip
    balance = text.split("## Balance\n")[1].split("## ")[0]
    assert "Pending: none of its runs has finished yet" in balance and "Not run" not in balance
    found = [
        c for c in json.loads((tmp_path / "claims.json").read_text()) if "Balance" in c["claim"]
    ]
    assert [c["ours"] for c in found] == ["pending", "pending"]


def test_fig3_report_optional_paragraphs_from_its_template() -> None:
    """The quick-mode warning, the PLD floor paragraph and the not-run line appear only when
    they apply, each a paragraph of its own (the prose lives in fig3.md.tmpl)."""
    from reproductions.primorl import sweeps as shared

    summary = F.summarise(_fig_rows(dict.fromkeys(F.EPSILONS, 99.0), score=99.0))

    def text(s: dict, scale: Scale) -> str:
        found = F.claims(s, quick=scale.quick)
        return F._markdown(shared.Report(s, found, scale, Path("d.h5"), 60.0, 600.0))

    plain = text(summary, Scale(seeds=2))
    assert "Quick mode" not in plain and "Not run" not in plain and "floor z = 0.2" not in plain
    assert "for T_max = 7000 rounds" in plain and "took 1.0 min" in plain
    del summary["50"]
    summary["20"] = {**summary["20"], "epsilon": 5.0}
    quick = text(summary, Scale(seeds=2, epochs=2, quick=True))
    assert "--seeds 2 --quick`" in quick and "for 3 rounds (quick mode)" in quick
    assert "is inconclusive.\n\n| method |" in quick
    assert "|\n\nTarget ε = 20: the PLD calibration stops at its floor" in quick
    assert "floor).\n\nNot run: ε = 50.\n\n## Verdicts" in quick
