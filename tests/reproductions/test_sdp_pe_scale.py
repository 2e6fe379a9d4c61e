"""SDP-PE Figure 4 at the scale where the stages act: UCBVI-LDP's derived burn-in cost agrees
with the measured loop, the verdicts' kinds, the sensitivity table's logic, claims.json's kind
field and reading a written group back."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from privrl.online.common import make_env
from privrl.online.ucbvi import UCBVIConfig, ucbvi
from reproductions.claims import KINDS, read_claims, write_claims
from reproductions.sdp_pe import run_fig4
from reproductions.sdp_pe.analysis import (
    LDP_DERIVED,
    _expectations,
    derived_ldp,
    gallery_claims,
    sensitivity,
)
from reproductions.sdp_pe.burn_in import ldp_burn_in_end
from reproductions.sdp_pe.jobs import (
    GROUPS,
    JDP_LONG,
    Fig4Config,
    _pe_cells,
    jdp_long_output,
    jdp_long_unit,
    jdp_long_units,
    load_group,
    sens_group,
)
from reproductions.sdp_pe.report import _all_left_gap, _jdp_lines

ROOT = Path(__file__).resolve().parents[2] / "docs" / "reproductions" / "sdp-pe-fig4"


def test_ldp_burn_in_end_matches_the_published_analysis() -> None:
    """The K = 10⁶ burn-in ends stated by the report's analysis (C = 1, β = 0.1); a smaller C
    ends burn-in earlier (t scales about like C²), a larger ε too."""
    assert ldp_burn_in_end(5, 4, 2, 1_000_000, 1.0) == 16_849_014_884
    assert ldp_burn_in_end(5, 4, 2, 1_000_000, 10.0) == 168_490_961
    t = [ldp_burn_in_end(5, 4, 2, 31_457_160, 10.0, bonus_scale=c) for c in (0.25, 1.0, 4.0)]
    assert t[0] < t[1] < t[2]
    assert 10 < t[1] / t[0] < 25


@pytest.mark.parametrize(("eps", "departs"), [(10.0, False), (100.0, True)])
def test_derived_ldp_cost_equals_the_measured_loop_before_its_burn_in_end(
    eps: float, departs: bool
) -> None:
    """Property: before `ldp_burn_in_end` the DP-UCBVI-LDP loop plays all-left in every episode,
    so each episode costs exactly the all-left gap (C = 0.03 puts the end inside the run). At
    ε = 100 the loop departs from all-left within the run (after the derived end), which shows
    the comparison is not vacuous."""
    K, C = 2500, 0.03
    cfg = Fig4Config(states=3, horizon=4, points=K)
    end = ldp_burn_in_end(4, 3, 2, K, eps, bonus_scale=C)
    assert end is not None and 10 < end < K
    mdp = make_env("riverswim", states=3, horizon=4)
    runs = ucbvi(mdp, K, seeds=[0, 1, 2], privatizer="local", epsilon=eps, config=UCBVIConfig(C))
    gap = _all_left_gap(cfg)
    for r in runs:
        np.testing.assert_allclose(r.regret[: end - 1], gap, rtol=0, atol=1e-12)
    moved = [bool(np.any(np.abs(r.regret - gap) > 1e-9)) for r in runs]
    assert any(moved) == departs
    d = derived_ldp(cfg, K, eps, bonus_scale=C)
    ok = d["grid"] < end
    np.testing.assert_allclose(d["mean"][ok], gap * d["grid"][ok])
    assert np.isnan(d["mean"][~ok]).all() and np.isnan(d["finals"]).all()


def _entry(grid: np.ndarray, per_episode: np.ndarray, seeds: int = 3) -> dict:
    mean = np.cumsum(per_episode)[grid - 1]
    return {
        "grid": grid,
        "mean": mean,
        "std": 0 * mean,
        "curves": None,
        "finals": np.full(seeds, mean[-1]),
        "seeds": list(range(seeds)),
        "seconds": 0.0,
        "logs": [],
        "report": {},
    }


def _merged(cfg: Fig4Config, late_cost: float) -> dict:
    """A synthetic run: everything at the all-left cost, except SDP-PE's long runs, which drop
    to ``late_cost`` per episode after a tenth of K."""
    gap = _all_left_gap(cfg)
    K, KL = cfg.episodes, cfg.long_episodes
    g = np.unique(np.linspace(1, K, 50).astype(int))
    gl = np.unique(np.linspace(1, KL, 400).astype(int))
    flat = np.full(K, gap)
    merged = {
        ("main", a, e): _entry(g, flat)
        for a, e in [("UCB-VI", None), ("PE", None)]
        + [(a, x) for a in ("SDP-PE", "UCBVI-JDP", "UCBVI-LDP") for x in cfg.epsilons]
    }
    late = np.where(np.arange(KL) < KL // 10, gap, late_cost)
    for eps in cfg.long_epsilons:
        merged[("long", "SDP-PE", eps)] = _entry(gl, late)
        merged[("long", LDP_DERIVED, eps)] = derived_ldp(cfg, KL, eps)
    return merged


@pytest.mark.parametrize(
    ("late_cost", "kind"), [(0.02, "holds"), (0.15, "does not hold"), (0.2, "inconclusive")]
)
def test_scale_verdict_and_its_kind(late_cost: float, kind: str) -> None:
    """At the long scale: SDP-PE ≤ ½ × the derived LDP cost → holds; above → does not hold;
    SDP-PE itself still paying ≥ 0.8 × the all-left cost → inconclusive at our scale."""
    cfg = Fig4Config(states=3, horizon=4, episodes=2000, long_episodes=40_000, sens_episodes=20_000)
    cfg.points = 400
    ex = _expectations(_merged(cfg, late_cost * _all_left_gap(cfg) / 0.2152), cfg)
    main = [e for e in ex if e["episodes"] == cfg.episodes]
    assert {e["kind"] for e in main} == {"inconclusive at our scale"}  # all in burn-in
    long = [e for e in ex if e["episodes"] == cfg.long_episodes]
    assert len(long) == len(cfg.long_epsilons)
    expected = "inconclusive at our scale" if kind == "inconclusive" else kind
    assert {e["kind"] for e in long} == {expected}
    claims = gallery_claims(ex)
    assert len(claims) == len(ex)
    assert [c.kind for c in claims] == [e["kind"] for e in ex]
    assert all("K = 4e+04" in c.claim for c, e in zip(claims, ex, strict=True) if e in long)


def test_sensitivity_rows() -> None:
    """Each constant's variant is compared with the derived LDP cost; when DP-UCBVI's C makes
    its burn-in end before K, its cost is only a lower bound and the verdict is 'undetermined'
    unless SDP-PE is below half of that bound."""
    cfg = Fig4Config(states=4, horizon=5, long_epsilons=[10.0], sens_episodes=31_457_160)
    cfg.sens_constants = ["width_scale"]
    gap = _all_left_gap(cfg)
    K = cfg.sens_episodes
    grid = np.array([1, K])

    def entry(regret: float) -> dict:
        return {
            "grid": grid,
            "mean": np.array([0, regret]),
            "finals": np.array([regret]),
            "logs": [],
        }

    merged = {
        (sens_group("default", 1.0), "SDP-PE", 10.0): entry(0.7 * gap * K),
        (sens_group("width_scale", 0.25), "SDP-PE", 10.0): entry(0.3 * gap * K),
        (sens_group("width_scale", 4.0), "SDP-PE", 10.0): entry(1.1 * gap * K),
    }
    rows = {(r["constant"], r["factor"]): r for r in sensitivity(merged, cfg)}
    assert rows[("default", 1.0)]["verdict"] == "does not hold"
    assert rows[("default", 1.0)]["ordering_holds"]
    assert rows[("width_scale", 0.25)]["verdict"] == "holds"
    assert not rows[("width_scale", 4.0)]["ordering_holds"]
    # C × ¼ at ε = 10: DP-UCBVI-LDP may leave burn-in at ~1.6·10⁷ < K
    low = rows[("bonus_scale", 0.25)]
    assert not low["ldp_exact"] and low["verdict"] == "undetermined"
    assert rows[("bonus_scale", 4.0)]["ldp_exact"]


def test_cells_of_each_group_are_distinct_runs() -> None:
    cfg = Fig4Config()
    cells = _pe_cells(cfg)
    keys = [json.dumps(c, sort_keys=True) for _, c in cells]
    assert len(keys) == len(set(keys))
    groups = {g for g, _ in cells}
    assert {"main", "long", sens_group("default", 1.0), sens_group("width_scale", 4.0)} <= groups
    assert all(c["episodes"] >= 3 * 10**7 for g, c in cells if g == "long")


def test_claims_json_carries_kinds(tmp_path: Path) -> None:
    cfg = Fig4Config(states=3, horizon=4, episodes=2000, long_episodes=40_000, sens_episodes=20_000)
    ex = _expectations(_merged(cfg, 0.01), cfg)
    write_claims(tmp_path, gallery_claims(ex))
    rows = json.loads((tmp_path / "claims.json").read_text())
    assert [r["kind"] for r in rows] == [e["kind"] for e in ex]
    assert all(r["kind"] in KINDS for r in rows)
    assert read_claims(tmp_path / "claims.json") == gallery_claims(ex)


@pytest.mark.skipif(not (ROOT / "stage_logs.json").exists(), reason="no committed run")
def test_committed_main_group_reads_back() -> None:
    """The main group read back from the committed run: the curve's last point is the mean of
    the per-seed finals (same numbers as metrics.json)."""
    main = load_group(ROOT, "main")
    assert ("main", "UCB-VI", None) in main and ("main", "UCBVI-LDP", 10.0) in main
    for m in main.values():
        assert m["mean"][-1] == pytest.approx(float(np.mean(m["finals"])), rel=1e-6)


def _group_rows(run_dir: Path) -> tuple[list[dict], dict]:
    """metrics.csv's rows and metrics.json's finals of the groups in `GROUPS`."""
    with open(run_dir / "metrics.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["group"].split("|")[0] in GROUPS]
    finals = json.loads((run_dir / "metrics.json").read_text())["final_regret"]
    return rows, {k: v for k, v in finals.items() if k.split("|")[0] in GROUPS}


@pytest.mark.skipif(not (ROOT / "stage_logs.json").exists(), reason="no committed run")
def test_committed_report_rewrites_from_its_own_groups(tmp_path: Path) -> None:
    """Every group read back (`reuse`, the jdp-long units included): nothing runs and the
    rewritten report is the committed one — the same curves, finals, reports, claims and
    report.md (how a missing jdp-long unit is added to a report whose cells left the cache)."""
    out = tmp_path / "fig4"
    shutil.copytree(ROOT, out)
    finals = json.loads((ROOT / "metrics.json").read_text())["final_regret"]
    cfg = Fig4Config()
    cfg.jdp_long_epsilons = [float(k.split("|")[2]) for k in finals if k.startswith("jdp-long|")]
    run_fig4(cfg, out, reuse=(*GROUPS, JDP_LONG), log=lambda _: None)
    assert _group_rows(out) == _group_rows(ROOT)
    for name in ("privacy_reports.json", "stage_logs.json", "claims.json"):
        assert json.loads((out / name).read_text()) == json.loads((ROOT / name).read_text())
    for name in ("results.csv", "report.md", "metrics.csv"):
        assert (out / name).read_text() == (ROOT / name).read_text()
    with pytest.raises(ValueError, match="unknown group"):
        run_fig4(cfg, out, reuse=("mian",))


def test_jdp_long_unit_records_where_each_plan_left_all_left(tmp_path: Path) -> None:
    """The jdp-long unit is `ucbvi(privatizer="central")` vectorised over its seeds: its curves
    are the runs' cumulative regret on the checkpoint grid, and 'burn_in_measured' is, per
    seed, the first episode whose regret differs from the all-left cost (C = 0.03, ε = 100
    put that episode inside a short run; None where a run stays all-left, as at C = 1)."""
    K, seeds = 2500, [0, 1, 2]
    kw = {"epsilon": 100.0, "episodes": K, "seeds": seeds, "states": 3, "horizon": 4}
    out = jdp_long_output(jdp_long_unit(points=K, bonus_scale=0.03, **kw))
    mdp = make_env("riverswim", states=3, horizon=4)
    runs = ucbvi(mdp, K, seeds=seeds, privatizer="central", epsilon=100.0, config=UCBVIConfig(0.03))
    gap = _all_left_gap(Fig4Config(states=3, horizon=4))
    for r, curve, moved in zip(runs, out["curves"], out["burn_in_measured"], strict=True):
        np.testing.assert_allclose(curve, r.cumulative_regret[out["grid"] - 1])
        off = np.flatnonzero(np.abs(r.regret - gap) > 1e-9)
        assert moved == (int(off[0]) + 1 if off.size else None)
    assert any(m is not None for m in out["burn_in_measured"])  # not vacuous
    flat = jdp_long_unit(points=50, **kw)
    assert flat["burn_in_measured"] == [None] * 3
    np.testing.assert_allclose(flat["finals"], K * gap)
    units = jdp_long_units(Fig4Config(), tmp_path)
    assert [u.kwargs["epsilon"] for u in units] == [1.0, 10.0]
    assert all(u.kwargs["episodes"] == 31_457_160 and u.kwargs["seeds"] == [0, 1, 2]
               for u in units)  # fmt: skip
    assert len({u.path for u in units}) == 2


@pytest.mark.parametrize(
    ("sdp_cost", "jdp_cost", "kind"),
    [(0.01, 0.03, "holds"), (0.05, 0.01, "does not hold"), (0.2152, 0.2152, "inconclusive")],
)
def test_jdp_verdict_at_the_long_scale(sdp_cost: float, jdp_cost: float, kind: str) -> None:
    """'SDP-PE is slightly above UCBVI-JDP' at K = jdp_long_episodes, both measured: holds when
    JDP < SDP-PE ≤ 1.5 × JDP, does not hold otherwise, inconclusive when both still pay the
    all-left cost per episode."""
    cfg = Fig4Config(states=3, horizon=4, episodes=2000, long_episodes=40_000,
                     sens_episodes=20_000, jdp_long_episodes=20_000)  # fmt: skip
    cfg.points = 400
    scale = _all_left_gap(cfg) / 0.2152
    merged = _merged(cfg, sdp_cost * scale)
    KJ = cfg.jdp_long_episodes
    gj = np.unique(np.linspace(1, KJ, 400).astype(int))
    late = np.where(np.arange(KJ) < KJ // 10, _all_left_gap(cfg), jdp_cost * scale)
    for eps in cfg.jdp_long_epsilons:
        merged[("jdp-long", "UCBVI-JDP", eps)] = _entry(gj, late)
    # SDP-PE's long curve drops after KL/10 = 4,000 episodes, JDP's after 2,000: compare at KJ
    ex = [e for e in _expectations(merged, cfg) if e.get("jdp")]
    assert len(ex) == len(cfg.jdp_long_epsilons)
    expected = "inconclusive at our scale" if kind == "inconclusive" else kind
    assert {e["kind"] for e in ex} == {expected}
    assert all(e["episodes"] == KJ for e in ex)
    claims = [c for c in gallery_claims(ex)]
    assert all("K = 2e+04" in c.claim and c.plot == "plots/fig4_long.png" for c in claims)


def test_jdp_table_names_an_epsilon_this_run_did_not_measure() -> None:
    """A run of the jdp-long group at fewer ε than the default (a unit too long for the
    sitting) says which ε has no row, instead of leaving it out silently."""
    cfg = Fig4Config(states=3, horizon=4, episodes=2000, long_episodes=40_000,
                     sens_episodes=20_000, jdp_long_episodes=20_000)  # fmt: skip
    KJ = cfg.jdp_long_episodes
    gj = np.unique(np.linspace(1, KJ, 400).astype(int))
    for epsilons, skipped in (([1.0, 10.0], None), ([1.0], "ε = 10 (no row above)")):
        cfg.jdp_long_epsilons = epsilons
        merged = _merged(cfg, 0.01)
        for eps in epsilons:
            merged[("jdp-long", "UCBVI-JDP", eps)] = _entry(gj, np.full(KJ, 0.02))
        text = "\n".join(_jdp_lines(cfg, merged, _expectations(merged, cfg)))
        assert text.count("| 1 |") == 1
        assert ("Not measured at this K" in text) == (skipped is not None)
        assert skipped is None or skipped in text


@pytest.mark.skipif(not (ROOT / "stage_logs.json").exists(), reason="no committed run")
def test_report_of_a_fresh_quick_run_is_the_stored_rendering(tmp_path: Path, monkeypatch) -> None:
    """The committed groups rendered as a fresh quick run would render them (the QUICK banner,
    a wall time, no 'read back' paragraph) are byte for byte the stored rendering."""
    import dataclasses

    from reproductions import sdp_pe
    from reproductions.sdp_pe import report

    seen: list[tuple[tuple, dict]] = []

    def recording(*args: object, **kwargs: object) -> str:
        seen.append((args, kwargs))
        return report._report(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sdp_pe, "_report", recording)
    out = tmp_path / "fig4"
    shutil.copytree(ROOT, out)
    finals = json.loads((ROOT / "metrics.json").read_text())["final_regret"]
    cfg = Fig4Config()
    cfg.jdp_long_epsilons = [float(k.split("|")[2]) for k in finals if k.startswith("jdp-long|")]
    run_fig4(cfg, out, reuse=(*GROUPS, JDP_LONG), log=lambda _: None)
    ((inputs,), _), *_ = seen
    fresh = dataclasses.replace(inputs, wall=754.2, quick=True, reused=False)  # type: ignore[type-var]
    text = report._report(fresh)
    golden = Path(__file__).resolve().parent / "golden" / "sdp-pe-fig4-fresh-quick.md"
    assert text == golden.read_text(encoding="utf-8")
