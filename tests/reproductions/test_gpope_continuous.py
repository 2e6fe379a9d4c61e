"""Verdicts of the continuous-domain GPOPE figures (2a, 3b, 4): GP is compared with θ = 0
first, "close to LSTD" is only tested where non-private GTD2 itself has converged, and every
claims entry carries its kind of verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reproductions import gpope
from reproductions.claims import KINDS, VERDICT_OF_KIND, VERDICTS, derive_kind, write_claims

EPS = (0.1, 1.0, 5.0)
LSTD = "LSTD (non-private)"


def _table(gp: dict[float, float], nonprivate: float, lstd: float, v1: float = 1e9) -> dict:
    def st(v: float) -> dict[str, float]:
        return {"mean": v, "std": 0.0, "se": 0.0, "n": 10}

    t = {(1000, f"GP ε={e:g}"): st(v) for e, v in gp.items()}
    t[(1000, "GP non-private (σ = 0)")] = st(nonprivate)
    t[(1000, LSTD)] = st(lstd)
    t.update({(1000, f"V1 ε={e:g} (approx.)"): st(v1) for e in gp})
    return t


def _kinds(table: dict, zero: float = 1.0) -> dict[str, str]:
    claims = gpope._ratio_claims(table, [1000], EPS, zero, **gpope.RATIO_CLAIMS["fig2a"])
    return {c.claim: c.kind for c in claims.items}


def test_gp_at_theta_zero_makes_the_v1_comparison_vacuous() -> None:
    """Property: where GP is no better than θ = 0 at any ε, 'beats V1' and 'falls with ε'
    are vacuous, not held; 'close to LSTD' does not hold."""
    k = _kinds(_table({0.1: 1.0, 1.0: 0.99, 5.0: 0.95}, nonprivate=0.01, lstd=0.008))
    assert k["(ours) GP beats θ = 0 at every ε"] == "does not hold"
    assert k["GP beats V1 by orders of magnitude"] == "vacuous"
    assert k["(ours) MSPBE falls as ε grows"] == "vacuous"
    assert k["GP approaches LSTD"] == "does not hold"


def test_close_to_lstd_needs_converged_gtd2() -> None:
    """Property: GP close to LSTD is a verdict only when non-private GTD2 is itself close to
    LSTD (within the same 10×); otherwise it is 'inconclusive at our scale'."""
    gp = {0.1: 0.5, 1.0: 0.1, 5.0: 0.05}
    assert _kinds(_table(gp, nonprivate=0.5, lstd=0.008))["GP approaches LSTD"] == (
        "inconclusive at our scale"
    )
    assert _kinds(_table(gp, nonprivate=0.0015, lstd=0.001))["GP approaches LSTD"] == (
        "does not hold"
    )  # converged, but GP (ε = 5) is 50× LSTD
    assert _kinds(_table(gp, nonprivate=0.01, lstd=0.008))["GP approaches LSTD"] == "holds"


def test_partly_when_gp_beats_theta_zero_at_some_eps() -> None:
    k = _kinds(_table({0.1: 0.99, 1.0: 0.5, 5.0: 0.05}, nonprivate=0.01, lstd=0.008))
    assert k["(ours) GP beats θ = 0 at every ε"] == "partly"
    assert k["GP beats V1 by orders of magnitude"] == "partly"
    assert k["(ours) MSPBE falls as ε grows"] == "holds"


def test_every_kind_maps_to_a_gallery_verdict_and_unknown_kinds_are_refused() -> None:
    """Property: a stated kind has a gallery verdict whose derived kind is the kind itself
    (`derive_kind` reads vacuous from the text), and an unknown kind is refused."""
    from reproductions.gpope.common import _Claims

    assert set(VERDICT_OF_KIND) == set(KINDS) and set(VERDICT_OF_KIND.values()) <= set(VERDICTS)
    for kind, verdict in VERDICT_OF_KIND.items():
        assert derive_kind(verdict, kind) == kind
    with pytest.raises(ValueError, match="kind"):
        _Claims("p.png").add_kind("c", "probably", "d")


def test_claims_json_carries_the_kind(tmp_path) -> None:
    claims = gpope._ratio_claims(
        _table({0.1: 0.99, 1.0: 0.5, 5.0: 0.05}, nonprivate=0.01, lstd=0.008),
        [1000],
        EPS,
        1.0,
        **gpope.RATIO_CLAIMS["fig2a"],
    )
    rows = json.loads(write_claims(tmp_path, claims.items).read_text())
    assert [r["kind"] for r in rows] == [c.kind for c in claims.items]
    assert all(r["kind"] in KINDS for r in rows)
    assert len(claims.rows) == 2 + len(rows)


def test_units_keep_the_cache_layout_and_a_dry_run_computes_nothing(tmp_path, monkeypatch) -> None:
    """The units of a figure are function cells whose result files keep the historic layout
    (reproduce/gpope-FIG/{quick,full}/DIGEST/{tune,refs,gp,np}-*.json, DIGEST from the run's
    key), so finished full-scale units are reused unchanged; a dry run counts the units to
    compute and computes none (here: every unit of an empty cache)."""
    from reproductions.gpope.continuous import FIGURES, run_figure
    from reproductions.gpope.continuous_units import _stages

    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path))
    # the digests of the committed full-scale reports' unit folders
    digests = {"fig2a": "2b08678796284f1d", "fig3b": "03d224e8231e39eb", "fig4": "1681065244e2d898"}
    for name, digest in digests.items():
        # full scale: 3 ε → 3 tunings + refs, then 3 trial units + non-private
        assert run_figure(FIGURES[name], tmp_path / name, dry=True) == 8
        root = tmp_path / "reproduce" / f"gpope-{name}" / "full" / digest
        assert (root / "key.json").is_file() and not list(root.glob("*-m*.json"))
    assert run_figure(FIGURES["fig2a"], tmp_path / "q", quick=True, dry=True) == 6
    root = next((tmp_path / "reproduce" / "gpope-fig2a" / "quick").iterdir())
    ctx = json.loads((root / "key.json").read_text())
    first = [u.path.name for u in _stages(ctx, root)]
    assert first == ["tune-m50-eps0.1.json", "tune-m50-eps1.json", "refs-m50.json"]
    fact = {"eta": 0.01, "h": 1.0, "nonprivate_eta": 0.1}
    tuned = {(50, 0.1): fact, (50, 1.0): fact}
    second = _stages(ctx, root, tuned)
    assert [u.path.name for u in second] == [
        "gp-m50-eps0.1.json",
        "gp-m50-eps1.json",
        "np-m50.json",
    ]
    assert all(u.target.startswith("reproductions.gpope.continuous_units:") for u in second)
    # finished stage-1 units: the dry run counts only stage 2's missing units
    for name in first:
        (root / name).write_text(json.dumps(fact if name.startswith("tune") else []))
    assert run_figure(FIGURES["fig2a"], tmp_path / "q", quick=True, dry=True) == 3


# ---------------------------------------------------------------------------------------------
# the reports, rendered from the committed per-trial results
# ---------------------------------------------------------------------------------------------

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "reproductions"


def _render_committed(figure: str, out: Path) -> str:
    """report.md written by `_write_continuous` from a committed run's per-trial results and
    public facts; what the run printed of its domain (γ, features, the V1 note), θ = 0's MSPBE
    and its wall time are read back from its report."""
    import csv
    import re
    import time
    from types import SimpleNamespace

    from reproductions.gpope.common import _Acc, _Cfg
    from reproductions.gpope.continuous import CONT_EPS, FIGURES
    from reproductions.gpope.continuous_report import RATIO_CLAIMS, _ratio_claims

    run = COMMITTED / f"gpope-{figure}"
    spec = FIGURES[figure]
    conf = json.loads((run / "config.json").read_text(encoding="utf-8"))
    text = (run / "report.md").read_text(encoding="utf-8")
    domain = re.search(r"γ = (\S+), features (\S+) \((\d+)\)", text)
    zero = re.search(r"θ = 0 gives ([0-9.eE+-]+)\.", text)
    recorded = re.search(r"- wall time: (\d+) s", text)
    assert domain and zero and recorded
    v1_note = next((x[2:] for x in text.split("\n") if x.startswith("- V1 runs on")), "")
    acc = _Acc([])
    with (run / "results_per_trial.csv").open(encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            acc.add(m=int(r["m"]), method=r["method"], mspbe=float(r["mspbe"]))
    inputs = gpope.continuous_report.ContinuousInputs(
        acc=acc,
        facts=conf["facts"],
        zero=float(zero.group(1)),
        r_bar=conf["r_bar"],
        t0=time.time() - int(recorded.group(1)),
        figure=figure,
        title=spec.title,
        paper_lines=[spec.paper_line],
        notes=spec.notes,
        claims_fn=lambda t, ms, eg, z: _ratio_claims(t, ms, eg, z, **RATIO_CLAIMS[figure]),
        domain_name=spec.domain_name,
        off_policy=spec.off_policy,
        features=SimpleNamespace(spec=domain.group(2), dim=int(domain.group(3))),
        gamma=float(domain.group(1)),
        model_n=conf["model_trajectories"],
        lstd_name="off-policy LSTD (non-private)" if spec.off_policy else LSTD,
        v1_note=v1_note,
        cont=spec.scale,
        cfg=_Cfg(quick=False, trials=conf["trials"], base=conf["base_seed"], orders=None),
        eps_grid=CONT_EPS,
        with_v1=spec.with_v1,
        relative=spec.relative,
    )
    return gpope.continuous_report._write_continuous(out, inputs).read_text(encoding="utf-8")


def _without_wall_time(text: str) -> str:
    lines = text.split("\n")
    assert sum(x.startswith("- wall time: ") for x in lines) == 1
    return "\n".join(x for x in lines if not x.startswith("- wall time: "))


@pytest.mark.parametrize("figure", ["fig2a", "fig3b", "fig4"])
def test_report_regenerates_the_committed_report_byte_for_byte(figure: str, tmp_path) -> None:
    """Byte for byte but the wall-time line (this rendering's own time; the committed runs
    also predate its current wording)."""
    text = _render_committed(figure, tmp_path)
    committed = (COMMITTED / f"gpope-{figure}" / "report.md").read_text(encoding="utf-8")
    assert _without_wall_time(text) == _without_wall_time(committed)
