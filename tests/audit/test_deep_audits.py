"""Audits of expert-dp's consensus filter and of PRIMORL's DP-FedAvg (issue 17): the audited
code is the system's own, the bound never exceeds the claim, the non-private twins leak and a
10× weaker noise is caught."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privrl.audit.bounds import one_run_epsilon
from privrl.audit.expert import (
    ConsensusFilterAuditSettings,
    ExpertDPSGDAuditSettings,
    _expert_dataset,
    audit_consensus_filter,
    audit_expert_dp_sgd_one_run,
    expert_dp_sgd_claimed,
    filter_calibration,
    filter_claimed,
    stable_prefix_lengths,
)
from privrl.audit.primorl import (
    PrimorlAuditSetup,
    _canary_inputs,
    _episodes,
    _w0_rows,
    audit_primorl_one_run,
    n_params,
    primorl_plan,
)
from privrl.audit.run import summarise
from privrl.privacy.threshold import first_failing_prefix, noisy_threshold
from tests.noise import noise_rng

torch.set_num_threads(1)

DELTA = 1e-5

# ---------------------------------------------------------------------------- expert-dp


def test_batched_rounds_are_first_failing_prefix_draw_for_draw() -> None:
    """Structural: one row of `stable_prefix_lengths` consumes the generator exactly as the
    filter's own `noisy_threshold` + `first_failing_prefix` do and returns the same k."""
    calib = filter_calibration(2.0, DELTA, 6, 0.01)
    counts = calib.theta_shifted + np.array([3.0, 2.0, 1.0, 0.5, 0.0, -1.0])
    for seed in range(50):
        ours = stable_prefix_lengths(counts[None, :], calib, noise_rng(seed))[0]
        rng = noise_rng(seed)
        theta_hat = noisy_threshold(calib.theta_shifted, calib.threshold_scale, rng)
        ref = first_failing_prefix(np.log(counts), theta_hat, calib.query_scale, rng)
        assert ours == ref


def test_filter_claim_is_the_filter_report() -> None:
    """Accountant value: one round of DataRelease with the PLD calibration claims ε1 at δ1."""
    for eps in (1.0, 4.0):
        report = filter_claimed(filter_calibration(eps, DELTA, 5, 0.01), DELTA)
        assert report.epsilon == pytest.approx(eps, rel=1e-3)
        assert report.unit.value == "expert"
    assert math.isinf(filter_claimed(None, DELTA).epsilon)


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_filter_audit_stays_below_its_claim(epsilon: float) -> None:
    """Privacy property: the Clopper–Pearson lower bound of the worst-case canary expert does
    not exceed the filter's claimed ε (and the attack sees something at ε = 4)."""
    result = audit_consensus_filter(
        ConsensusFilterAuditSettings(epsilon=epsilon), trials=50_000, rng=noise_rng(0)
    )
    m = summarise(result)
    assert m["epsilon_claimed"] == pytest.approx(epsilon, rel=1e-3)
    assert not m["violated"]
    if epsilon == 4.0:
        assert m["epsilon_lower_bound"] > 0.3 and m["auc"] > 0.55


def test_filter_twin_leaks() -> None:
    """Twin leaks: the same filter without noise tells Π₀ from Π₀ ∪ {canary} every time."""
    m = summarise(
        audit_consensus_filter(
            ConsensusFilterAuditSettings(epsilon=4.0, non_private=True),
            trials=2000,
            rng=noise_rng(0),
        )
    )
    assert math.isinf(m["epsilon_claimed"])
    assert m["auc"] == 1.0 and m["epsilon_lower_bound"] > 5.0


def test_random_canary_is_weaker_than_worst() -> None:
    """The worst-case canary expert (follows τ everywhere) leaks more than a random one."""
    rng = noise_rng(1)
    worst = summarise(
        audit_consensus_filter(ConsensusFilterAuditSettings(epsilon=8.0), trials=20_000, rng=rng)
    )
    rand = summarise(
        audit_consensus_filter(
            ConsensusFilterAuditSettings(epsilon=8.0), trials=20_000, canary="random", rng=rng
        )
    )
    assert worst["auc"] > rand["auc"]


def test_broken_filter_noise_is_caught(broken_laplace: None) -> None:
    """A 10× weaker Laplace noise (threshold and queries) puts the bound above the claimed
    ε = 1. (The filter's analysis charges 2ε' per round where one query of this canary leaks
    about ε'/4, so only a fault of this size is visible; 10⁵ trials give bounds of 1.25–1.4.)"""
    result = audit_consensus_filter(
        ConsensusFilterAuditSettings(epsilon=1.0), trials=100_000, rng=noise_rng(0)
    )
    m = summarise(result)
    assert m["violated"], m["epsilon_lower_bound"]


# ---------------------------------------------------------------------------- expert-level DP-SGD


def test_canary_expert_owns_its_input_column() -> None:
    """Structural: background experts' per-example gradients are zero on every canary's input
    column of the first layer, and canary j's is zero on every other canary's column."""
    from privrl.nn.per_example import per_example_grads
    from privrl.rl.cql import DiscreteCQL
    from privrl.rl.discrete_common import TransitionTable

    data = _expert_dataset(5, 3, 2, 10.0, np.ones(5, bool), noise_rng(0))
    learner = DiscreteCQL(7, 2, hidden=(16,))
    table = TransitionTable(data, learner.obs_transform)
    batch = table.gather(np.arange(len(table)))
    grads = per_example_grads(learner.per_example_loss, learner.params, batch)["q0.weight"]
    cols = grads.abs().amax(dim=1)[:, :5]  # [transitions, canary columns]
    owner = np.asarray(table.unit)
    for k in range(cols.shape[0]):
        for j in range(5):
            assert (cols[k, j].item() > 0) == (owner[k] == j), (k, j)


def test_expert_dp_sgd_claim_is_the_system_report_and_bound_stays_below() -> None:
    """Accountant value and validity: the claim is `expert_dp_sgd`'s own report (and the
    plan's `expert_dp_sgd_claimed` equals it); one run at z = 3 stays below it."""
    audit = audit_expert_dp_sgd_one_run(
        ExpertDPSGDAuditSettings(noise_multiplier=3.0), rng=noise_rng(0)
    )
    planned = expert_dp_sgd_claimed(
        noise_multiplier=3.0, canaries=500, background=50, batch_size=None, steps=5,
        delta=DELTA, clip=1.0,
    )  # fmt: skip
    assert audit.epsilon_claimed == pytest.approx(planned.epsilon)
    assert audit.report.releases[0].size == planned.releases[0].size
    assert audit.report.unit.value == "expert"
    assert not audit.metrics()["violated"]


def test_expert_dp_sgd_twin_leaks() -> None:
    """Twin leaks: minibatch SGD without clipping or noise (expert_dp_sgd(private=False))."""
    audit = audit_expert_dp_sgd_one_run(
        ExpertDPSGDAuditSettings(noise_multiplier=None), rng=noise_rng(0)
    )
    assert math.isinf(audit.epsilon_claimed)
    assert audit.correct >= 48 and audit.epsilon_lower_bound > 2.0


def test_broken_expert_dp_sgd_noise_is_caught(broken_gaussian: None) -> None:
    """The Gaussian of `privatize_sum_torch` 10× smaller than the report says (z = 8,
    claimed ε ≈ 1.05) is caught by one run of 500 canary experts."""
    audit = audit_expert_dp_sgd_one_run(
        ExpertDPSGDAuditSettings(noise_multiplier=8.0), rng=noise_rng(0)
    )
    assert audit.epsilon_claimed < 1.1
    assert audit.epsilon_lower_bound > audit.epsilon_claimed


# ---------------------------------------------------------------------------- PRIMORL

SMALL = PrimorlAuditSetup(canaries=200, background=20)


def _plan(z: float, setup: PrimorlAuditSetup = SMALL, **kw):
    args = dict(delta=DELTA, rate=1.0, clip=1.0, rounds=1, units=setup.units, local_lr=1.0)
    args.update(kw)
    return primorl_plan(noise_multiplier=z, target_epsilon=None, **args)


def test_canary_rows_of_w0_are_moved_by_that_canary_only() -> None:
    """Structural: a background trajectory's clipped update is zero on every canary's row of
    w0, and canary j's update is zero on every other canary's row (so the gradient score of j
    sees j's update and the noise only)."""
    from privrl.primorl import dp_fedavg as fed
    from privrl.primorl.dynamics import DynamicsConfig, DynamicsModel

    setup = PrimorlAuditSetup(canaries=6, background=3)
    plan = _plan(0.0, setup)
    model = DynamicsModel(8, 1, DynamicsConfig(hidden=(16,), members=2, weight_decay=False))
    layout = fed.EnsembleLayout(model.ensemble)
    theta0 = layout.flatten(model.ensemble.parameters_dict())
    included = np.ones(6, bool)
    clients = fed.Clients.from_dataset(model, _episodes(setup, included, noise_rng(0)))
    deltas = fed.local_displacements(
        model.ensemble,
        theta0,
        clients,
        np.arange(9),
        plan,
        noise_rng(0),
        weight_decay=False,
        reduce="none",
    ).reshape(9, -1)
    rows = _w0_rows(layout, 6)
    assert deltas.norm(dim=1).max() <= 1.0 + 1e-5  # clipped to C
    for k in range(9):
        for j in range(6):
            moved = deltas[k, rows[j]].abs().max().item()
            assert (moved > 0) == (k == j), (k, j)
    assert n_params(setup) == layout.members * layout.size
    x, _ = _canary_inputs(model, setup)
    assert torch.equal(x[:6], clients.x[:6])  # the scored transitions are the trained ones


@pytest.mark.parametrize("statistic", ["loss", "gradient"])
def test_primorl_twin_leaks(statistic: str) -> None:
    """Twin leaks: DP-FedAvg with z = 0 (NO NOISE, C kept) gives every guess right and a
    one-run bound of the most 40 guesses of 200 canaries can show."""
    audit = audit_primorl_one_run(
        plan=_plan(0.0),
        setup=SMALL,
        guesses=40,
        statistic=statistic,
        rng=noise_rng(0),
    )
    assert math.isinf(audit.epsilon_claimed)
    assert audit.correct == 40
    assert audit.epsilon_lower_bound == pytest.approx(one_run_epsilon(200, 40, 40, DELTA))
    assert audit.epsilon_lower_bound > 2.0


def test_primorl_claim_is_the_run_report_and_bound_stays_below() -> None:
    """Accountant value and validity: the claimed ε is PRIMORL's own PLD ε for the T rounds,
    and the one-run bound of a private run (z = 1) does not exceed it."""
    plan = _plan(1.0)
    audit = audit_primorl_one_run(
        plan=plan, setup=SMALL, guesses=40, statistic="gradient", rng=noise_rng(0)
    )
    assert audit.epsilon_claimed == pytest.approx(plan.epsilon(1))
    assert audit.report.unit.value == "trajectory"
    m = audit.metrics()
    assert m["mode"] == "one-run" and m["canaries"] == 200 and m["guesses"] == 40
    assert not m["violated"] and m["epsilon_lower_bound"] <= m["epsilon_claimed"]


def test_broken_primorl_noise_is_caught(broken_gaussian: None) -> None:
    """DP-FedAvg's Gaussian 10× smaller than its report says (z = 5, claimed ε = 0.73; each canary
    then sees a Gaussian of μ ≈ 2) is caught by one run."""
    audit = audit_primorl_one_run(
        plan=_plan(5.0),
        setup=SMALL,
        guesses=40,
        statistic="gradient",
        rng=noise_rng(0),
    )
    assert audit.epsilon_claimed < 1.5
    assert audit.epsilon_lower_bound > audit.epsilon_claimed


def test_primorl_refuses_bad_guesses_and_a_wrong_K() -> None:
    with pytest.raises(ValueError, match="guesses"):
        audit_primorl_one_run(plan=_plan(1.0), setup=SMALL, guesses=3, rng=noise_rng(0))
    with pytest.raises(ValueError, match="K"):
        audit_primorl_one_run(plan=_plan(1.0, units=5), setup=SMALL, guesses=4, rng=noise_rng(0))
