"""Selective DP-SGD (Sharma et al., Algorithm 3) and the filter + training pipeline: the budget
split, exact accounting that conditions on the step coins (and why the paper's q = p·b/m
understates the loss), empty D_stable, experts without unstable data, and the total report."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from scipy import stats

from privrl.expert.dpsgd import ExpertTransitions, paper_accounting_epsilon, plan_steps
from privrl.expert.selective import (
    BudgetSplit,
    ExpertDPSettings,
    SelectiveSettings,
    selective_dp_sgd,
    split_budget,
    train_expert_dp,
)
from privrl.privacy import serialize
from privrl.rl.cql import DiscreteCQL
from privrl.rl.discrete_common import TransitionTable
from tests.noise import noise_rng, noise_source

from .test_dpsgd import ConstantExperts, expert_dataset

torch.set_num_threads(1)

Z, M, B = 5.0, 12, 6  # noise multiplier, experts, expected batch: q = 1/2 (fast PLD)


# --------------------------------------------------------------------------- budget split


def test_default_split() -> None:
    s = split_budget(10.0, 1e-3, 0.8)
    assert (s.epsilon1, s.epsilon2) == (7.5, 2.5)
    assert s.delta1 == pytest.approx(9e-4) and s.delta2 == pytest.approx(1e-4)
    assert s.filter and s.dp_sgd
    assert s.epsilon1 + s.epsilon2 == 10.0


def test_split_rules() -> None:
    low = split_budget(2.5, 1e-3, 0.5)  # below ε = 5: filter skipped
    assert (low.epsilon1, low.delta1, low.epsilon2, low.delta2) == (0.0, 0.0, 2.5, 1e-3)
    assert not low.filter
    forced = split_budget(2.5, 1e-3, 0.5, filter_below=0.0)  # Table 2b's ε1 = 3ε/4 column
    assert forced.epsilon1 == pytest.approx(1.875)
    p0 = split_budget(10.0, 1e-3, 0.0)  # everything to the filter
    assert (p0.epsilon1, p0.delta1, p0.epsilon2, p0.delta2) == (10.0, 1e-3, 0.0, 0.0)
    assert not p0.dp_sgd
    p1 = split_budget(10.0, 1e-3, 1.0)  # plain DP-SGD
    assert (p1.epsilon1, p1.epsilon2, p1.delta2) == (0.0, 10.0, 1e-3)
    custom = split_budget(8.0, 1e-3, 0.5, eps1_fraction=0.5, eps2_fraction=0.5)
    assert (custom.epsilon1, custom.epsilon2) == (4.0, 4.0)
    assert BudgetSplit(**{**custom.to_dict()}) == custom


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"eps1_fraction": 0.6, "eps2_fraction": 0.3}, "does not add up"),
        ({"delta1_fraction": 0.5, "delta2_fraction": 0.6}, "does not add up"),
        ({"eps1_fraction": 1.2}, "does not add up"),
        ({"eps1_fraction": 1.0}, "ε2 = 0"),
        ({"delta1_fraction": 1.0}, "δ2 = 0"),
        ({"delta1_fraction": 0.0}, "δ1 = 0"),
    ],
)
def test_split_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        split_budget(10.0, 1e-3, 0.5, **kwargs)


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_p_outside_unit_interval(p: float) -> None:
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        split_budget(10.0, 1e-3, p)


# --------------------------------------------------------------------------- accounting


def test_paper_rate_understates_the_coin_mixture() -> None:
    """One step, b = m (the Gaussian sees everyone), p = 1/2, z = 1, ε = 1. With the coin
    visible the mechanism is ½·(no loss) + ½·Gaussian: hockey-stick δ = ½·δ_G(1) = 0.063.
    Poisson sampling at q = p·b/m = ½ claims δ = 0.029 — less than half the truth."""
    z, p, eps = 1.0, 0.5, 1.0
    y = np.linspace(-15.0, 16.0, 200_001)
    dy = y[1] - y[0]
    f0, f1 = stats.norm.pdf(y, 0, z), stats.norm.pdf(y, 1, z)
    mixture = p * np.sum(np.maximum(f1 - math.exp(eps) * f0, 0)) * dy  # the coin-1 branch
    poisson = (1 - p) * f0 + p * f1
    claimed = max(
        np.sum(np.maximum(poisson - math.exp(eps) * f0, 0)) * dy,
        np.sum(np.maximum(f0 - math.exp(eps) * poisson, 0)) * dy,
    )
    d_gauss = stats.norm.cdf(0.5 / z - eps * z) - math.exp(eps) * stats.norm.cdf(-0.5 / z - eps * z)
    assert mixture == pytest.approx(p * d_gauss, rel=1e-6)
    assert mixture > 2 * claimed


def _split_data(seed: int = 0):
    """D_stable = the first episode of every expert, D_unst = the rest (experts 0..M-1)."""
    ds = expert_dataset(n_experts=M, episodes_per_expert=2, seed=seed)
    first = np.arange(0, ds.n_episodes, 2)
    return ds, ds.subset(first), ds.subset(first + 1)


def test_exact_accounting_runs_until_k_private_steps() -> None:
    ds, stable, unstable = _split_data()
    learner = DiscreteCQL(2, 3, hidden=(8,), seed=0)
    res = selective_dp_sgd(
        SelectiveSettings(
            n_units=M, p=0.5, epsilon=1.0, delta=1e-3, batch_size=B, noise_multiplier=Z
        ),
        learner,
        stable,
        unstable,
        expert_ids=np.unique(ds.unit_ids),
        rng=noise_rng(0),
    )
    k, _ = plan_steps(noise_multiplier=Z, sampling_probability=B / M, epsilon=1.0, delta=1e-3)
    assert res.private_steps == k
    assert res.steps > k and learner.steps == res.steps  # stable steps happened too
    (release,) = res.report.releases
    assert release.count == k
    assert isinstance(release.event, dp_event.SelfComposedDpEvent)
    assert release.event.event.sampling_probability == pytest.approx(B / M)
    assert res.report.epsilon <= 1.0
    assert res.info["stable_transitions"] == stable.n_transitions


def test_paper_accounting_is_not_certified() -> None:
    """Property: the paper's accounting (N steps at q = p·b/m) understates the coin mixture
    (see above), so a run that uses it states ε = ∞ and is not private; the ε the paper would
    state survives only as a labelled comparison (paper_accounting_epsilon)."""
    ds, stable, unstable = _split_data()
    res = selective_dp_sgd(
        SelectiveSettings(
            n_units=M,
            p=0.5,
            epsilon=1.0,
            delta=1e-3,
            batch_size=B,
            noise_multiplier=Z,
            accounting="paper",
        ),
        DiscreteCQL(2, 3, hidden=(8,)),
        stable,
        unstable,
        expert_ids=np.unique(ds.unit_ids),
        rng=noise_rng(0),
    )
    rep = res.report
    assert math.isinf(rep.epsilon) and not rep.private
    (release,) = rep.releases
    assert release.event == dp_event.UnsupportedDpEvent()
    assert release.count == res.steps  # N steps, not the private ones
    assert release.extra["accountant_matches_sampling"] is False
    paper = serialize.event_from_dict(release.extra["paper_event"])
    assert paper.event.sampling_probability == pytest.approx(0.5 * B / M)
    eps_paper = paper_accounting_epsilon(rep.releases, 1e-3)
    assert eps_paper is not None and eps_paper <= 1.0  # sized to the budget, the paper's way
    assert any("NOT certified" in n for n in rep.notes)


def test_paper_accounting_pipeline_is_not_certified() -> None:
    """The full pipeline with the paper's accounting: the filter is certified, the DP-SGD
    part is not, so the total report is not (ε = ∞); its comparison note composes both."""
    ds = expert_dataset(n_experts=M)
    res = train_expert_dp(
        ExpertDPSettings(
            n_units=M,
            epsilon=10.0,
            delta=1e-3,
            p=0.5,
            rounds=3,
            batch_size=B,
            noise_multiplier=Z,
            accounting="paper",
        ),
        DiscreteCQL(2, 3, hidden=(8,), seed=0),
        ds,
        ConstantExperts(M),
        rng=noise_rng(0),
    )
    rep = res.report
    assert math.isinf(rep.epsilon) and not rep.private
    mechanisms = [r.mechanism for r in rep.releases]
    assert mechanisms == ["consensus_filter_svt", "poisson_subsampled_gaussian"]
    assert rep.releases[0].event is not None and rep.releases[0].extra.get("certified", True)
    comparisons = [n for n in rep.notes if n.startswith("for comparison only")]
    assert len(comparisons) == 1  # the total's, not the training part's as well
    assert 0 < paper_accounting_epsilon(rep.releases, rep.delta) <= 10.0 + 1e-9


def test_more_experts_than_m_are_sampled_not_refused() -> None:
    """Property: m is public and the data may hold more (or fewer) experts than m (they differ
    between neighbours): every expert present is sampled at rate b/m, no error is raised."""
    ds = expert_dataset(n_experts=M)
    source = ExpertTransitions(ds, np.unique(ds.unit_ids), 5, TransitionTable(ds))
    assert source.n_units == 5 and source.n_slots == M
    res = selective_dp_sgd(
        SelectiveSettings(
            n_units=5, p=1.0, epsilon=None, delta=1e-3, batch_size=2, noise_multiplier=Z, steps=3
        ),
        DiscreteCQL(2, 3, hidden=(8,)),
        None,
        ds,
        expert_ids=np.unique(ds.unit_ids),
        rng=noise_rng(0),
    )
    assert res.private_steps == 3
    assert res.report.releases[0].event.event.sampling_probability == pytest.approx(2 / 5)


def test_empty_stable_skips_nonprivate_steps_keeps_rate() -> None:
    ds, _, unstable = _split_data()
    learner = DiscreteCQL(2, 3, hidden=(8,), seed=0)
    res = selective_dp_sgd(
        SelectiveSettings(
            n_units=M, p=0.5, epsilon=None, delta=1e-3, batch_size=B, noise_multiplier=Z, steps=40
        ),
        learner,
        None,
        unstable,
        expert_ids=np.unique(ds.unit_ids),
        rng=noise_rng(1),
    )
    assert res.steps == 40 and 5 < res.private_steps < 35
    assert learner.steps == res.private_steps  # only the private steps updated the learner
    (release,) = res.report.releases
    assert release.event.event.sampling_probability == pytest.approx(B / M)
    assert any("D_stable is empty" in n for n in res.report.notes)


def test_expert_without_unstable_data_contributes_nothing() -> None:
    ds = expert_dataset(n_experts=M)
    part = ds.subset(np.flatnonzero(ds.unit_ids < 6))  # experts 6..11 have no unstable data
    learner = DiscreteCQL(2, 3, hidden=(8,))
    source = ExpertTransitions(part, np.unique(ds.unit_ids), M, TransitionTable(part))
    assert source.n_units == M
    assert np.all(source.counts[6:] == 0) and np.all(source.counts[:6] > 0)
    batch = source.batch_for(np.arange(M), noise_rng(0))
    assert batch.obs.shape[0] == 6
    assert source.batch_for(np.arange(6, M), noise_rng(0)).obs.shape[0] == 0
    res = selective_dp_sgd(  # rate b/m over all m experts, not the 6 with data
        SelectiveSettings(
            n_units=M, p=1.0, epsilon=None, delta=1e-3, batch_size=B, noise_multiplier=Z, steps=3
        ),
        learner,
        None,
        part,
        expert_ids=np.unique(ds.unit_ids),
        rng=noise_rng(0),
    )
    assert res.report.releases[0].event.event.sampling_probability == pytest.approx(B / M)


def test_p_zero_trains_on_stable_only() -> None:
    ds, stable, unstable = _split_data()
    learner = DiscreteCQL(2, 3, hidden=(8,))
    res = selective_dp_sgd(
        SelectiveSettings(n_units=M, p=0.0, epsilon=None, delta=1e-3, batch_size=B, steps_cap=15),
        learner,
        stable,
        unstable,
        expert_ids=np.unique(ds.unit_ids),
        rng=noise_rng(0),
    )
    assert res.steps == 15 and res.private_steps == 0 and learner.steps == 15
    assert res.report.releases == [] and res.report.epsilon == 0.0
    with pytest.raises(ValueError, match="steps"):
        selective_dp_sgd(
            SelectiveSettings(n_units=M, p=0.0, epsilon=None, delta=1e-3, batch_size=B),
            learner,
            stable,
            unstable,
            expert_ids=np.unique(ds.unit_ids),
            rng=noise_rng(0),
        )


# --------------------------------------------------------------------------- pipeline


def test_pipeline_report_composes_filter_and_dp_sgd() -> None:
    ds = expert_dataset(n_experts=M)
    learner = DiscreteCQL(2, 3, hidden=(8,), seed=0)
    res = train_expert_dp(
        ExpertDPSettings(
            n_units=M, epsilon=10.0, delta=1e-3, p=0.5, rounds=3, batch_size=B, noise_multiplier=Z
        ),
        learner,
        ds,
        ConstantExperts(M),
        rng=noise_rng(0),
    )
    assert res.split.epsilon1 == 7.5 and res.split.epsilon2 == 2.5
    names = [r.mechanism for r in res.report.releases]
    assert names == ["consensus_filter_svt", "poisson_subsampled_gaussian"]
    rep = res.report
    assert rep.unit.value == "expert" and rep.relation.value == "add_remove"
    assert rep.delta == pytest.approx(1e-3) and rep.epsilon <= 10.0 + 1e-9
    assert res.training.report.epsilon <= 2.5
    assert res.filter_summary["rounds"] == 3
    assert res.stable_size == res.filter_summary["released_transitions"]
    assert any("budget split" in n for n in rep.notes)


def test_pipeline_without_filter() -> None:
    ds = expert_dataset(n_experts=M)
    res = train_expert_dp(
        ExpertDPSettings(
            n_units=M, epsilon=1.0, delta=1e-3, p=1.0, rounds=0, batch_size=B, noise_multiplier=Z
        ),
        DiscreteCQL(2, 3, hidden=(8,)),
        ds,
        ConstantExperts(M),
        rng=noise_rng(0),
    )
    assert res.split.epsilon1 == 0.0 and res.stable_size == 0
    assert [r.mechanism for r in res.report.releases] == ["poisson_subsampled_gaussian"]
    disabled = train_expert_dp(  # rounds = 0 with p < 1 moves the filter's share to DP-SGD
        ExpertDPSettings(
            n_units=M,
            epsilon=6.0,
            delta=1e-3,
            p=0.5,
            rounds=0,
            batch_size=B,
            noise_multiplier=Z,
            steps=4,
        ),
        DiscreteCQL(2, 3, hidden=(8,)),
        ds,
        ConstantExperts(M),
        rng=noise_rng(0),
    )
    assert disabled.split.epsilon2 == 6.0 and "T = 0" in disabled.split.rule
    with pytest.raises(ValueError, match="nothing could be learned"):
        train_expert_dp(
            ExpertDPSettings(n_units=M, epsilon=10.0, delta=1e-3, p=0.0, rounds=0),
            DiscreteCQL(2, 3, hidden=(8,)),
            ds,
            ConstantExperts(M),
            rng=noise_rng(0),
        )


def test_pipeline_checks_experts() -> None:
    ds = expert_dataset(n_experts=M)
    rng = noise_rng(0)
    with pytest.raises(ValueError, match="actions"):
        train_expert_dp(
            ExpertDPSettings(n_units=M, epsilon=1.0, delta=1e-3, p=1.0, rounds=0),
            DiscreteCQL(2, 3),
            ds,
            ConstantExperts(M, n_actions=4),
            rng=rng,
            noise=noise_source(rng),
        )
    with pytest.raises(ValueError, match="dimension"):
        train_expert_dp(
            ExpertDPSettings(n_units=M, epsilon=1.0, delta=1e-3, p=1.0, rounds=0),
            DiscreteCQL(2, 3),
            ds,
            ConstantExperts(M, obs_dim=5),
            rng=rng,
            noise=noise_source(rng),
        )
    with pytest.raises(ValueError, match="expert ids"):
        train_expert_dp(
            ExpertDPSettings(n_units=M, epsilon=1.0, delta=1e-3, p=1.0, rounds=0),
            DiscreteCQL(2, 3),
            expert_dataset(unit_ids=False),
            ConstantExperts(M),
            rng=rng,
            noise=noise_source(rng),
        )


class _AgreeingExperts(ConstantExperts):
    """m experts that all take action 0 everywhere: every logged all-zero prefix is stable."""

    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        return np.zeros((self.n_experts, np.asarray(obs).shape[0]), dtype=np.int64)


def test_pipeline_trains_on_released_stable_prefixes() -> None:
    m = 600
    ds = expert_dataset(n_experts=m, episodes_per_expert=1, length=3)
    ds = type(ds)(**{**ds._fields(), "actions": np.zeros(ds.n_transitions, np.int64)},
                  metadata=ds.metadata)  # fmt: skip
    learner = DiscreteCQL(2, 3, hidden=(8,), seed=0)
    res = train_expert_dp(
        ExpertDPSettings(
            n_units=m,
            epsilon=10.0,
            delta=1 / m,
            p=0.5,
            rounds=5,
            batch_size=m // 2,
            noise_multiplier=Z,
        ),
        learner,
        ds,
        _AgreeingExperts(m),
        rng=noise_rng(0),
    )
    assert res.stable_size > 0 and res.filter_summary["released_trajectories"] > 0
    training = res.training
    assert training.info["stable_transitions"] == res.stable_size
    assert training.info["unstable_transitions"] == ds.n_transitions - res.stable_size
    assert learner.steps == training.steps > training.private_steps > 0  # stable steps ran
    assert res.report.epsilon <= 10.0


def test_joint_dp_sgd_budget_spends_the_total_and_takes_more_steps() -> None:
    ds = expert_dataset(n_experts=M)

    def run(budget: str):
        return train_expert_dp(
            ExpertDPSettings(
                n_units=M,
                epsilon=10.0,
                delta=1e-3,
                p=0.5,
                rounds=3,
                batch_size=B,
                noise_multiplier=Z,
                filter_calibration="pld",
                dp_sgd_budget=budget,  # type: ignore[arg-type]
            ),
            DiscreteCQL(2, 3, hidden=(8,), seed=0),
            ds,
            ConstantExperts(M),
            rng=noise_rng(0),
        )

    split, joint = run("split"), run("joint")
    # same filter, same release; DP-SGD gets what the joint composition leaves
    assert joint.stable_size == split.stable_size
    assert joint.training.private_steps > split.training.private_steps
    assert split.report.epsilon < joint.report.epsilon <= 10.0 + 1e-9
    assert any("joint" in n for n in joint.report.notes)
    assert not any("DP-SGD budget: joint" in n for n in split.report.notes)
    with pytest.raises(ValueError, match="dp_sgd_budget"):
        run("both")
