"""DP-FedAvg's defaults from the declared K: q = min(1, m/K) (the paper's q at the paper's K),
and the warnings of a run whose public parameters say it will learn little (qK < 1, or a noise
std per coordinate zC/(qK) at least C). Public values only: K declared, q, z, C."""

from __future__ import annotations

import math
import warnings

import pytest
from gymnasium import spaces

from privrl.data.dataset import DatasetMetadata
from privrl.data.io import DatasetHeader
from privrl.primorl import PRIMORL, PrimorlConfig, SmallDataWarning
from privrl.primorl import dp_fedavg as fed
from privrl.primorl import primorl as P
from privrl.primorl.dp_fedavg import DpFedAvgConfig, plan_dp_fedavg
from privrl.privacy.public import Source


def _meta(k: int) -> DatasetMetadata:
    return DatasetMetadata(extra={"n_trajectories": k})


def _q_param(plan: fed.DpFedAvgPlan) -> dict:
    return next(p for p in plan.params.to_list() if p["name"] == "q (sampling rate)")


@pytest.mark.parametrize(
    ("task", "k", "q"),
    [
        ("pendulum", 30_000, 1e-3),  # the paper's q at the paper's K (the recipes' K)
        ("balance", 30_000, 1e-3),
        ("swingup", 30_000, 1e-3),
        ("halfcheetah", 2_000, 1e-2),  # 20 expected trajectories per round, as in the paper
        ("pendulum", 3_000, 0.01),
        ("pendulum", 50, 0.6),
        ("pendulum", 20, 1.0),  # K ≤ m: every unit in every round
        ("MountainCarContinuous-v0", 600, 0.05),  # a task without a preset: m = 30
    ],
)
def test_the_default_rate_keeps_m_units_per_round(task: str, k: int, q: float) -> None:
    """q = min(1, m/K) from the declared K (m: the paper's q·K for a preset, else 30), recorded
    as derived from K, never counted from the data."""
    clip = None if task in P.PRESETS else 0.1  # (a task without a preset has no default C)
    cfg = PrimorlConfig(task=task, noise_multiplier=1.0, steps=10, clip=clip)
    plan = P.plan(cfg, _meta(k))
    assert plan.q == pytest.approx(q) and plan.K == k
    assert plan.denominator == pytest.approx(min(k, P.preset_of(task).units_per_round))
    param = _q_param(plan)
    assert param["source"] == Source.DERIVED.value and "min(1, m/K)" in param["detail"]


def test_a_given_rate_is_kept_and_named_a_flag() -> None:
    plan = P.plan(
        PrimorlConfig(task="pendulum", noise_multiplier=1.0, sampling_rate=0.2), _meta(50)
    )
    assert plan.q == 0.2 and _q_param(plan)["source"] == Source.FLAG.value


def test_the_low_level_plan_has_the_same_rule_and_a_fixed_default_beats_it() -> None:
    cfg = DpFedAvgConfig(noise_multiplier=1.0, clip_norm=1.0, max_rounds=5, n_units=600)
    assert plan_dp_fedavg(cfg).q == pytest.approx(30 / 600)
    fixed = plan_dp_fedavg(cfg, defaults={"sampling_rate": 1e-3})
    assert fixed.q == 1e-3 and _q_param(fixed)["source"] == Source.DEFAULT.value
    assert fed.default_rate(30, 10) == 1.0 and fed.default_rate(30, 30_000) == 1e-3


def _warnings(**kw: object) -> list[str]:
    base = dict(noise_multiplier=1.0, clip_norm=0.02, max_rounds=10, n_units=50)
    return plan_dp_fedavg(DpFedAvgConfig(**{**base, **kw})).small_data_warnings()  # type: ignore[arg-type]


def test_fewer_than_one_unit_per_round_is_warned() -> None:
    """The issue's run: K = 50 at q = 0.001 samples 0.05 trajectories per round."""
    found = _warnings(sampling_rate=1e-3, noise_multiplier=0.39)
    assert any("q·K = 0.05 < 1" in w for w in found), found
    assert any("zC/(qK) = 0.156" in w for w in found), found  # 7.8 × C: both reasons


def test_noise_that_dwarfs_the_clip_is_warned_and_the_threshold_is_c() -> None:
    """zC/(qK) ≥ C ⇔ z ≥ qK: at qK = 30 (the default), z = 30 warns and z = 29 does not."""
    assert _warnings(noise_multiplier=29.0) == []
    (only,) = _warnings(noise_multiplier=30.0)
    assert "1 times the clip C = 0.02" in only and "q·K = 30" in only


def test_the_papers_settings_and_non_private_runs_are_not_warned() -> None:
    assert _warnings(sampling_rate=1e-3, n_units=30_000, noise_multiplier=0.52) == []
    assert _warnings(sampling_rate=1e-3, noise_multiplier=0.0) == []  # NO PRIVACY: no release
    assert _warnings(clip_norm=math.inf, noise_multiplier=0.0) == []


def test_the_warnings_are_in_the_report_and_raised_by_the_plan() -> None:
    """From Python: `PRIMORL.plan` (which `fit` calls before reading any episode) warns with
    `SmallDataWarning`; the report's notes keep the same lines."""
    meta = DatasetMetadata(
        observation_space=spaces.Box(-8.0, 8.0, (3,)),
        action_space=spaces.Box(-2.0, 2.0, (1,)),
        env_id="Pendulum-v1",
        extra={"n_trajectories": 50},
    )
    header = DatasetHeader(None, meta, 50, 10_000, {"content_sha256": "0" * 64})
    algo = PRIMORL(PrimorlConfig(noise_multiplier=0.39, sampling_rate=1e-3, steps=10))
    with pytest.warns(SmallDataWarning) as record:
        planned = algo.plan(header)
    texts = [str(w.message) for w in record]
    assert len(texts) == 2 and "q·K = 0.05 < 1" in texts[0] and "zC/(qK) = 0.156" in texts[1]
    assert "more trajectories (K)" in texts[1]
    notes = [n for n in planned.report.notes if n.startswith("warning: ")]
    assert [n.removeprefix("warning: ") for n in notes] == [
        t.removeprefix("PRIMORL: ") for t in texts
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallDataWarning)
        PRIMORL(PrimorlConfig(noise_multiplier=0.5, steps=10)).plan(header)  # q = 0.6: fine
