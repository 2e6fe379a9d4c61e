"""The chain figures (GPOPE Fig. 1a/1b): the plot style of `gpope.plots`, the claims' kinds,
the LSTD-OP series, and the committed claims.json rebuilt from the committed per-trial rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reproductions.claims import KINDS
from reproductions.gpope import lstd_op_chain as op
from reproductions.gpope import minibatch_chain as mb
from reproductions.gpope.chain import _Chain, _read_rows
from reproductions.gpope.chain_claims import fig1a_claims, fig1b_claims
from reproductions.gpope.chain_report import FIG1A_METHODS
from reproductions.gpope.common import _Acc
from reproductions.gpope.plots import Panel, mspbe_panels, y_range

ROOT = Path(__file__).resolve().parents[2] / "docs" / "reproductions"
ZERO = 0.0367
MS = (100, 1000, 5000)


def _st(v: float) -> dict:
    return {"mean": v, "std": 0.1 * v, "se": 0.0, "n": 20}


def test_y_range_runs_from_the_best_curve_to_theta_zero_and_skips_off_scale_series():
    panel = Panel(
        x=MS,
        series={"GP": [_st(0.03), _st(0.01), _st(1e-3)], "V1": [_st(1e11)] * 3},
        zero=ZERO,
        title="t",
        xlabel="m",
        references={"LSTD": 4e-7},
        off_scale=("V1",),
    )
    lo, hi = y_range(panel)
    assert lo == pytest.approx(2e-7)  # half of the lowest line drawn (LSTD)
    assert hi == pytest.approx(6 * ZERO)  # V1 does not stretch it (a band for its arrow)
    # a drawn series far above θ = 0 (beyond the ceiling) does not stretch it either
    series = {"GP": [_st(0.03), _st(50.0), _st(1e-3)]}
    wild = Panel(**{**panel.__dict__, "series": series, "off_scale": ()})
    assert y_range(wild)[1] == pytest.approx(2 * ZERO)


def test_mspbe_panels_writes_a_png(tmp_path):
    p = Panel(
        x=MS,
        series={"GP": [_st(0.03), _st(0.5), _st(1e-3)], "V2": [_st(30.0)] * 3},
        zero=ZERO,
        title="t",
        xlabel="m",
        references={"LSTD": [1e-6, 5e-7, 4e-7]},
        off_scale=("V2",),
        marks=((1000, "tuned"),),
    )
    path = tmp_path / "f.png"
    mspbe_panels(path, [p], suptitle="s")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _table(op_ratio: float) -> dict:
    t = {}
    for m in MS:
        for k in FIG1A_METHODS:
            t[(m, k)] = _st({"V1 (DP-LSW)": 1e9, "V2 (DP-LSL)": 10.0}.get(k, ZERO * 0.5))
        t[(m, "LSTD (non-private)")] = _st(4e-7)
        for e in mb.EPSILONS:
            t[(m, mb.method(e))] = _st(ZERO * 0.01)
            t[(m, op.method(e))] = _st(ZERO * op_ratio)
    return t


def test_fig1a_claims_carry_a_kind_and_judge_lstd_op_against_theta_zero_first():
    claims = fig1a_claims(_table(op_ratio=0.8), MS, ZERO)
    items = [c.to_dict() for c in claims.items]
    assert all(i["kind"] in KINDS for i in items)
    assert len(claims.rows) == 2 + len(items)
    by = {i["claim"]: i for i in items}
    beats0 = by[next(k for k in by if k.startswith("(beyond the paper) LSTD-OP (output"))]
    assert (beats0["verdict"], beats0["kind"]) == ("holds", "holds")
    vs_mb = by[next(k for k in by if k.startswith("(beyond the paper) LSTD-OP beats minibatch"))]
    assert (vs_mb["verdict"], vs_mb["kind"]) == ("does not hold", "does not hold")
    # 'beats θ = 0' means at least 10% below it: 0.95 × θ = 0 does not count
    near = {c.claim: c.to_dict() for c in fig1a_claims(_table(op_ratio=0.95), MS, ZERO).items}
    assert near[beats0["claim"]]["kind"] == "does not hold"
    # LSTD-OP worse than θ = 0 but better than a minibatch GP that is worse still: vacuous
    t = _table(op_ratio=2.0)
    for m in MS:
        for e in mb.EPSILONS:
            t[(m, mb.method(e))] = _st(ZERO * 3)
    items = {c.claim: c.to_dict() for c in fig1a_claims(t, MS, ZERO).items}
    assert items[vs_mb["claim"]]["kind"] == "vacuous"
    assert items[beats0["claim"]]["kind"] == "does not hold"


def test_fig1b_kind_is_vacuous_when_gp_beats_v1_only_at_the_level_of_theta_zero():
    etas = [1e-3, 1e-2, 1e-1]
    means = np.array([ZERO, 0.5 * ZERO, 10 * ZERO])
    claims, _, _ = fig1b_claims(means, etas, 1e9, ZERO, 4e-7)
    kinds = [c.kind for c in claims.items]
    assert kinds == ["holds", "does not hold", "vacuous", "n/a"]
    claims, _, _ = fig1b_claims(np.array([0.5, 0.4, 0.6]) * ZERO, etas, 1e9, ZERO, 4e-7)
    assert claims.items[2].kind == "holds"


def test_ridge_is_tuned_on_public_data_from_the_grid():
    chain = _Chain()
    lam, scores = op.tune_ridge(chain, 50, 1.0, 3.73, base=0, fig=1)
    assert lam in op.RIDGES and set(scores) == set(op.RIDGES)
    assert scores[lam] == min(scores.values())


def _table_from(rid: str) -> tuple[dict, tuple[int, ...]]:
    acc = _Acc(_read_rows(ROOT / rid / "results_per_trial.csv"))
    mb_file = ROOT / rid / "minibatch" / "results_per_trial.csv"
    if mb_file.exists():
        acc.rows += [r for r in _read_rows(mb_file) if r["method"].startswith("GP minibatch")]
    ms = tuple(sorted({r["m"] for r in acc.rows}))
    methods = {r["method"] for r in acc.rows}
    return {(m, k): acc.stats(m=m, method=k) for m in ms for k in methods}, ms


def _committed(rid: str) -> list[dict]:
    return json.loads((ROOT / rid / "claims.json").read_text(encoding="utf-8"))


def test_committed_fig1a_claims_rebuild_from_the_committed_rows():
    table, ms = _table_from("gpope-fig1a")
    zero = _Chain().zero_mspbe()
    assert [c.to_dict() for c in fig1a_claims(table, ms, zero).items] == _committed("gpope-fig1a")


def test_committed_fig1b_claims_rebuild_from_the_committed_rows():
    conf = json.loads((ROOT / "gpope-fig1b" / "config.json").read_text(encoding="utf-8"))
    acc = _Acc(_read_rows(ROOT / "gpope-fig1b" / "results_per_trial.csv"))
    means = np.array([acc.stats(method="GP", eta=e)["mean"] for e in conf["etas"]])
    claims, _, _ = fig1b_claims(
        means,
        conf["etas"],
        acc.stats(method="V1 (DP-LSW)")["mean"],
        _Chain().zero_mspbe(),
        acc.stats(method="LSTD (non-private)")["mean"],
    )
    assert [c.to_dict() for c in claims.items] == _committed("gpope-fig1b")


# ---------------------------------------------------------------------------------------------
# the reports, rebuilt from the committed per-trial results
# ---------------------------------------------------------------------------------------------

GOLDEN = Path(__file__).resolve().parent / "golden"


def _rebuilt_fig1a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, as_full_run: bool) -> str:
    """report.md of `fig1a_from_results` on a copy of the committed run; `as_full_run` renders
    it as a full run would (no 'regenerated from' line, the wall time instead)."""
    import shutil

    from reproductions.gpope import chain

    if as_full_run:
        import dataclasses

        write = chain._write_fig1a

        def full(out: Path, inputs: Any) -> Path:
            return write(out, dataclasses.replace(inputs, rebuilt_in=None))

        monkeypatch.setattr(chain, "_write_fig1a", full)
    out = tmp_path / "gpope-fig1a"
    shutil.copytree(ROOT / "gpope-fig1a", out)
    return chain.fig1a_from_results(out).read_text(encoding="utf-8")


def test_fig1a_report_regenerates_the_committed_report_byte_for_byte(tmp_path, monkeypatch):
    text = _rebuilt_fig1a(tmp_path, monkeypatch, as_full_run=False)
    assert text == (ROOT / "gpope-fig1a" / "report.md").read_text(encoding="utf-8")


def test_fig1a_report_of_a_full_run_is_the_stored_rendering(tmp_path, monkeypatch):
    text = _rebuilt_fig1a(tmp_path, monkeypatch, as_full_run=True)
    assert "Regenerated from" not in text and "- wall time: " in text
    assert text == (GOLDEN / "gpope-fig1a-full-run.md").read_text(encoding="utf-8")


def _rebuilt_fig1b(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, as_full_run: bool) -> str:
    """report.md of `fig1b_from_results` on a copy of the committed run (`as_full_run`: as a
    full run renders it, with its wall time and no 'regenerated from' line)."""
    import shutil

    from reproductions.gpope import chain

    if as_full_run:
        write = chain._write_fig1b

        def full(*args: Any, **kwargs: Any) -> Path:
            return write(*args, **{**kwargs, "rebuilt_in": None})

        monkeypatch.setattr(chain, "_write_fig1b", full)
    out = tmp_path / ("full" if as_full_run else "rebuilt") / "gpope-fig1b"
    shutil.copytree(ROOT / "gpope-fig1b", out)
    return chain.fig1b_from_results(out).read_text(encoding="utf-8")


def _without(prefix: str, text: str) -> str:
    lines = text.split("\n")
    assert sum(x.startswith(prefix) for x in lines) == 1, prefix
    return "\n".join(x for x in lines if not x.startswith(prefix))


def test_fig1b_report_regenerates_the_committed_report(tmp_path, monkeypatch):
    """Byte for byte but the wall-time line (the committed run predates its wording); a rebuild
    replaces that line with the 'regenerated from' one and changes nothing else."""
    committed = (ROOT / "gpope-fig1b" / "report.md").read_text(encoding="utf-8")
    rebuilt = _rebuilt_fig1b(tmp_path, monkeypatch, as_full_run=False)
    full = _rebuilt_fig1b(tmp_path, monkeypatch, as_full_run=True)
    assert _without("- wall time: ", full) == _without("- wall time: ", committed)
    assert _without("- Regenerated from ", rebuilt) == _without("- wall time: ", committed)
