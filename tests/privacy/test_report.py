"""Tests of PrivacyReport: accounting, serialisation, and the stated guarantee."""

from __future__ import annotations

import json
import math

import pytest
from dp_accounting import dp_event
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from privrl.privacy import accounting
from privrl.privacy.release import Release
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit

DELTA = 1e-5


def gaussian(name: str, z: float, count: int = 1) -> Release:
    event: dp_event.DpEvent = dp_event.GaussianDpEvent(z)
    if count > 1:
        event = dp_event.SelfComposedDpEvent(event, count)
    noise = {"sigma": 2.0 * z, "noise_multiplier": z}
    return Release(name, "gaussian", 2.0, "l2", noise, count=count, size=4, event=event)


def laplace(name: str, b: float) -> Release:
    return Release(name, "laplace", 1.0, "l1", {"scale": b}, event=dp_event.LaplaceDpEvent(b))


def public(name: str) -> Release:
    return Release(name, "none", 0.0, "l2", {}, extra={"public": True})


def build(releases: list[Release], **kw) -> PrivacyReport:
    kw.setdefault("system", "dp-apvi")
    return PrivacyReport.build(
        PrivacyUnit.TRAJECTORY, NeighbourRelation.REPLACE_ONE, releases, DELTA, **kw
    )


def strict_json_loads(text: str):
    """json.loads that fails on the non-standard NaN/Infinity literals."""

    def refuse(token: str):
        raise AssertionError(f"non-standard JSON literal {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("backend", ["rdp", "pld"])
def test_epsilon_is_the_accountant_on_the_composed_release_events(backend):
    """Accountant value: the report's ε is exactly the accountant's ε of the ComposedDpEvent of
    every release's event (in order), under the report's relation, at the report's δ."""
    releases = [gaussian("counts", 3.0, count=5), gaussian("rewards", 5.0)]
    report = build(releases, backend=backend)
    expected_event = dp_event.ComposedDpEvent([r.event for r in releases])
    assert report.event == expected_event
    expected = accounting.epsilon(
        expected_event, DELTA, relation=NeighbourRelation.REPLACE_ONE, backend=backend
    )
    assert report.epsilon == expected
    assert report.backend == backend
    # Each release costs something: dropping one must lower ε (composition is not ignored).
    assert build(releases[:1], backend=backend).epsilon < report.epsilon


def test_public_release_is_not_accounted_and_unmarked_missing_event_is_rejected():
    """Structural rule: a release without an event is accepted only if flagged public (then it
    costs nothing) or non-private (then the whole report is ε=∞); otherwise it is an error."""
    base = build([gaussian("q", 2.0)])
    with_public = build([gaussian("q", 2.0), public("state bounds")])
    assert with_public.epsilon == base.epsilon
    assert with_public.event == base.event

    forgotten = Release("value estimate", "gaussian", 1.0, "l2", {"sigma": 1.0})
    with pytest.raises(ValueError, match="value estimate"):
        build([gaussian("q", 2.0), forgotten])

    leaky = Release("normaliser", "none", 0.0, "l2", {}, extra={"non_private": True})
    report = build([gaussian("q", 2.0), leaky])
    assert not report.private
    assert math.isinf(report.epsilon)
    assert isinstance(report.event, dp_event.NonPrivateDpEvent)
    assert "NOT differentially private" in report.summary()
    assert any("normaliser" in n for n in report.notes)


def test_rho_for_gaussian_only_releases_and_none_with_laplace():
    """zCDP: Gaussian-only runs state ρ = Σ count/(2 z²) (Bun & Steinke 2016, Prop. 1.6 with
    sensitivity 1 in noise-multiplier units); one Laplace release makes ρ undefined (None)."""
    report = build([gaussian("a", 2.0, count=3), gaussian("b", 4.0)])
    assert report.rho == pytest.approx(3 / (2 * 2.0**2) + 1 / (2 * 4.0**2), rel=1e-12)
    assert report.rho == accounting.zcdp_rho(report.event)
    assert report.to_dict()["rho"] == report.rho

    mixed = build([gaussian("a", 2.0), laplace("counts", 2.0)])
    assert mixed.rho is None
    assert mixed.to_dict()["rho"] is None
    assert math.isfinite(mixed.epsilon)


def test_json_round_trip_is_lossless(tmp_path):
    """Serialisation: to_json/from_json and to_dict/from_dict reproduce the report exactly
    (events included), and the file is strict JSON with the run-directory contract keys."""
    extra = {"clip": math.inf, "fractions": [0.25, -math.inf], "mode": "calibrated"}
    releases = [
        gaussian("counts", 3.0, count=7),
        laplace("rewards", 0.5),
        public("env bounds"),
        Release(
            "sv",
            "sparse_vector",
            1.0,
            "l1",
            {"scale": 2.0},
            extra=extra,
            event=dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(2.0), 3),
        ),
    ]
    report = build(releases, public=["state/action bounds of the environment"], notes=["n1", "inf"])
    path = tmp_path / "privacy.json"
    report.to_json(path)
    raw = strict_json_loads(path.read_text(encoding="utf-8"))
    for key in ("unit", "relation", "epsilon", "delta", "rho", "accountant", "releases"):
        assert key in raw
    assert raw["unit"] == "trajectory" and raw["relation"] == "replace_one"
    assert raw["releases"][3]["extra"]["clip"] == "inf"

    back = PrivacyReport.from_json(path)
    assert back == report
    assert back.event == report.event
    assert back.releases[3].extra == extra
    assert back.notes == ["n1", "inf"]  # strings that spell "inf" stay strings
    assert PrivacyReport.from_dict(report.to_dict()) == report
    assert json.dumps(report.to_dict(), allow_nan=False)


def test_non_private_report_encodes_infinity_as_string(tmp_path):
    """inf handling: a non-private baseline has ε=∞, written as the string "inf" (JSON has no
    infinity), read back as float inf; its composed event is NonPrivateDpEvent."""
    report = PrivacyReport.non_private(
        "trajectory", "add_remove", [public("returns")], system="dp-apvi"
    )
    assert math.isinf(report.epsilon) and not report.private
    assert isinstance(report.event, dp_event.NonPrivateDpEvent)
    path = tmp_path / "privacy.json"
    report.to_json(path)
    text = path.read_text(encoding="utf-8")
    assert "Infinity" not in text
    assert strict_json_loads(text)["epsilon"] == "inf"
    back = PrivacyReport.from_json(path)
    assert back == report
    assert back.epsilon == math.inf and back.private is False
    assert "NOT differentially private" in back.summary()
    assert "one whole trajectory" in back.summary()


def test_summary_and_table_state_unit_relation_epsilon_delta():
    """Display: the one-sentence summary names (ε, δ), the unit, the relation and the
    accountant; the table has the summary and one row per release."""
    report = build([gaussian("transition counts", 3.0, count=2), laplace("rewards", 4.0)])
    s = report.summary()
    assert s.startswith(f"(ε={report.epsilon:.3g}, δ=1e-05)-DP")
    assert "for one whole trajectory" in s
    assert "under replace-one neighbouring" in s
    assert "RDP accountant" in s

    add_remove = PrivacyReport.build(
        "user", "add-remove", [gaussian("x", 2.0)], 1e-6, system="sdp-pe", model="shuffle"
    )
    s2 = add_remove.summary()
    assert "all data of one user" in s2 and "add/remove-one" in s2 and "shuffle model" in s2
    assert "ρ=" in s2

    console = Console(record=True, width=240)
    report.print(console)
    text = console.export_text()
    assert "transition counts" in text and "rewards" in text
    assert "gaussian" in text and "laplace" in text
    assert "2 (l2)" in text and "scale=4" in text
    assert s[:40] in text


def test_from_dict_rejects_unknown_events_and_missing_fields():
    """Structural rule: a tampered report cannot name arbitrary classes or drop fields."""
    d = build([gaussian("q", 2.0)]).to_dict()
    d["releases"][0]["event"]["type"] = "os.system"
    with pytest.raises(ValueError, match="unknown privacy event type"):
        PrivacyReport.from_dict(d)
    d = build([gaussian("q", 2.0)]).to_dict()
    del d["epsilon"]
    with pytest.raises(ValueError, match="epsilon"):
        PrivacyReport.from_dict(d)


finite_or_inf = st.floats(min_value=0.0, allow_nan=False, allow_infinity=True)


@settings(max_examples=60, deadline=None)
@given(
    eps=finite_or_inf,
    delta=st.floats(0.0, 0.5),
    rho=st.none() | finite_or_inf,
    z=st.floats(0.1, 1e6),
    count=st.integers(1, 10**6),
    sens=finite_or_inf,
    extra=st.dictionaries(st.text(max_size=5), finite_or_inf | st.text(max_size=5), max_size=3),
    unit=st.sampled_from(list(PrivacyUnit)),
    relation=st.sampled_from(list(NeighbourRelation)),
    texts=st.lists(st.text(max_size=20), max_size=3),
)
def test_round_trip_property(eps, delta, rho, z, count, sens, extra, unit, relation, texts):
    """Serialisation (property): any report with finite or infinite numbers survives
    to_dict → strict JSON text → from_dict unchanged."""
    event = dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z), count)
    release = Release("r", "gaussian", sens, "l2", {"sigma": z}, count, 3, event, extra)
    report = PrivacyReport(
        unit,
        relation,
        [release],
        delta,
        eps,
        rho,
        "acc",
        "rdp",
        public=texts,
        notes=texts,
        system="s",
    )
    extra_has_inf_text = any(v in ("inf", "-inf", "nan") for v in extra.values())
    text = json.dumps(report.to_dict(), allow_nan=False)
    back = PrivacyReport.from_dict(strict_json_loads(text))
    if extra_has_inf_text:  # documented: in free-form `extra`, "inf" strings decode to floats
        return
    assert back == report


def test_post_processing_keeps_the_guarantee_and_names_its_source(tmp_path):
    """A report of post-processing states the run's unit, relation, (ε, δ, ρ) and releases
    unchanged (it spends nothing), adds its own public information and notes, records what it
    was derived from, and round-trips; a non-private run's stays non-private (ε = ∞)."""
    own = build([gaussian("counts", 3.0, count=2)], public=["bounds"], notes=["n"])
    origin = {"policy": "run/policy.npz", "policy_sha256": "ab" * 32, "run": "run"}
    post = own.post_processing(system="eval", derived_from=origin, public=["sim"], notes=["p"])
    assert (post.epsilon, post.delta, post.rho) == (own.epsilon, own.delta, own.rho)
    assert post.releases == own.releases and post.event == own.event
    assert (post.unit, post.relation, post.private) == (own.unit, own.relation, True)
    assert post.public == ["bounds", "sim"] and post.notes == ["n", "p"]
    assert post.system == "eval" and post.derived_from == origin and own.derived_from is None
    raw = post.to_dict()
    assert raw["derived_from"] == origin and raw["certified"] is True
    assert "derived_from" not in own.to_dict()
    post.to_json(tmp_path / "privacy.json")
    assert PrivacyReport.from_json(tmp_path / "privacy.json") == post
    plain = PrivacyReport.non_private("trajectory", "replace_one", system="apvi")
    carried = plain.post_processing(system="eval", derived_from=origin)
    assert math.isinf(carried.epsilon) and not carried.private
    assert carried.to_dict()["certified"] is False
