"""`PublicParameters`: every noise-setting quantity comes from a public source, never the data."""

from __future__ import annotations

import math

import pytest

from privrl.data.dataset import DatasetMetadata
from privrl.privacy.public import PublicParameter, PublicParameterError, PublicParameters, Source
from privrl.privacy.report import PrivacyReport
from privrl.privacy.units import NeighbourRelation, PrivacyUnit


def test_flag_wins_over_metadata_and_default() -> None:
    params = PublicParameters()
    meta = DatasetMetadata(horizon=20)
    H = params.resolve("horizon H", flag=10, metadata=meta, key="horizon", default=5, fix="-")
    assert H == 10
    assert params.to_list() == [{"name": "horizon H", "value": 10, "source": "flag"}]


def test_metadata_then_default() -> None:
    params = PublicParameters()
    meta = DatasetMetadata(horizon=20, extra={"n_experts": 300})
    assert params.resolve("H", metadata=meta, key="horizon", fix="-") == 20
    assert params.resolve("m", metadata=meta, key="n_experts", fix="-") == 300  # from extra
    assert params.resolve("B", metadata=meta, key="absent", default=16, fix="-") == 16
    sources = [p["source"] for p in params.to_list()]
    assert sources == ["public metadata", "public metadata", "default"]


def test_missing_value_is_refused_with_the_fix() -> None:
    with pytest.raises(PublicParameterError, match="pass --horizon"):
        PublicParameters().resolve(
            "horizon H", metadata=DatasetMetadata(), key="horizon", fix="pass --horizon H"
        )


def test_a_field_marked_inferred_from_the_data_is_not_public() -> None:
    """`data import` marks spaces it guessed from the data; they must not set the noise."""
    meta = DatasetMetadata(extra={"inferred_from_data": ["n_states"], "n_states": 7})
    with pytest.raises(PublicParameterError, match="inferred from the data"):
        PublicParameters().resolve("S", metadata=meta, key="n_states", fix="pass --states")
    # ... unless the user states it explicitly
    assert PublicParameters().resolve("S", flag=7, metadata=meta, key="n_states", fix="-") == 7


def test_public_split_and_derived_values_are_recorded() -> None:
    params = PublicParameters()
    params.resolve("clip h", public_split=0.5, fix="-", detail="95% quantile on public data")
    params.derive("per-step ρ", 0.1, "ρ/(5H)")
    listed = params.to_list()
    assert listed[0]["source"] == "public split" and listed[1]["source"] == "derived"
    assert listed[1]["detail"] == "ρ/(5H)"
    assert params["per-step ρ"] == 0.1 and "clip h" in params and len(params) == 2


def test_a_name_resolved_twice_must_agree() -> None:
    params = PublicParameters()
    params.given("m", 10, Source.FLAG)
    params.given("m", 10, Source.FLAG)  # same value and source: fine
    with pytest.raises(PublicParameterError, match="resolved twice"):
        params.given("m", 11, Source.FLAG)


def test_nan_is_refused() -> None:
    with pytest.raises(PublicParameterError):
        PublicParameter("x", math.nan, Source.FLAG)


def test_report_lists_public_parameters_and_round_trips() -> None:
    params = PublicParameters()
    params.given("H", 10, "flag")
    report = PrivacyReport.non_private(
        PrivacyUnit.TRAJECTORY, NeighbourRelation.REPLACE_ONE, system="x"
    ).with_public_parameters(params)
    data = report.to_dict()
    assert data["public_parameters"] == [{"name": "H", "value": 10, "source": "flag"}]
    assert PrivacyReport.from_dict(data).public_parameters == data["public_parameters"]


def test_an_infinite_epsilon_is_never_private() -> None:
    """A hand-built report with ε = ∞ (e.g. noise multiplier 0) used to read private=true."""
    report = PrivacyReport(
        unit=PrivacyUnit.TRAJECTORY,
        relation=NeighbourRelation.ADD_REMOVE,
        releases=[],
        delta=1e-5,
        epsilon=math.inf,
        rho=None,
        accountant="rdp",
        backend="rdp",
    )
    assert report.private is False
    assert "NOT differentially private" in report.summary()
    assert PrivacyReport.from_dict({**report.to_dict(), "private": True}).private is False
