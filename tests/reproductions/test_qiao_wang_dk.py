"""Figure 1(a)'s D/K-on run: the constant's tuning rule and tuning set, the term itself, the
convergence claim to K = 20,000 and the resumable grid cache."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privrl.envs.linear import LinearMDP
from privrl.offline.vapvi import FeatureTable, dp_vapvi, theory_additive_bonus
from reproductions.qiao_wang.grid import (
    DEFAULT_SEEDS,
    DK_ON,
    DK_UNIT,
    EXTENDED_ALGORITHMS,
    INSTANCES,
    K_EXTENDED,
    _dp_dk_runner,
    _dp_runner,
    _nested_episodes,
    _run_grid,
    _Setup,
    _setup,
    dk_spec,
    runner_of,
)
from reproductions.qiao_wang.report import _claims_a
from reproductions.qiao_wang.tuning import (
    DK_MULTIPLIERS,
    TUNING_BASE_SEED,
    TUNING_INSTANCES,
    choose,
    tune,
    tuning_setup,
)


def _table(mdp: LinearMDP) -> FeatureTable:
    return FeatureTable(phi=mdp.phi, scale=mdp.scale)


def test_rule_takes_the_lowest_score_and_breaks_ties_to_the_smaller_constant() -> None:
    assert choose({0.0: 2.0, 0.03: 1.5, 0.1: 1.7}) == 0.03
    assert choose({0.0: 2.0, 0.03: 1.5, 0.1: 1.5}) == 0.03
    assert choose({0.1: 1.0, 0.0: 1.0}) == 0.0


def test_the_tuning_set_is_disjoint_from_the_reported_runs() -> None:
    """Property: the constant is chosen on data the report never shows — other environment
    instances (other α, u, r) and another base seed, so no reported episode is reused."""
    full = tuning_setup(quick=False)
    assert not set(full.instances) & set(INSTANCES)
    assert full.instances == TUNING_INSTANCES and full.base_seed == TUNING_BASE_SEED != 0
    assert not set(tuning_setup(quick=True).instances) & set(INSTANCES)
    reported, tuned = LinearMDP.qiao_wang(0), LinearMDP.qiao_wang(TUNING_INSTANCES[0])
    assert not np.allclose(reported.theta, tuned.theta)
    a = _nested_episodes(reported, 5, 0, 0, 0)
    b = _nested_episodes(reported, 5, TUNING_BASE_SEED, 0, 0)
    assert not np.array_equal(a.actions, b.actions)
    assert 0.0 in DK_MULTIPLIERS  # the term off competes: the rule may keep it off


def test_the_term_is_applied_and_zero_is_dp_vapvi_exactly() -> None:
    mdp = LinearMDP.qiao_wang(0)
    data = _nested_episodes(mdp, 200, 0, 0, 0)
    table = _table(mdp)
    off = _dp_runner(1.0)(data, table, 1.0, 7)
    zero = _dp_dk_runner(1.0, {1.0: 0.0})(data, table, 1.0, 7)
    np.testing.assert_array_equal(zero.q, off.q)  # same data, same noise
    on = _dp_dk_runner(1.0, {1.0: 0.1})(data, table, 1.0, 7)
    assert DK_UNIT == theory_additive_bonus(20, 10)
    np.testing.assert_allclose(on.additive, 0.1 * DK_UNIT / 200)
    assert np.all(on.q <= off.q + 1e-12) and np.any(on.q < off.q)  # more pessimistic
    huge = _dp_dk_runner(1.0, {1.0: 10.0})(data, table, 1.0, 7)
    assert np.all(huge.q == 0.0)  # the theory-sized term zeroes every Q̂ (why it is off)


def test_the_term_costs_no_privacy() -> None:
    """Property: D/K is post-processing of the released statistics, so the run's privacy
    report (ε, δ, ρ) is the same with the term on and off."""
    mdp = LinearMDP.qiao_wang(0)
    data = mdp.sample(5, rng=0)
    off = dp_vapvi(data, _table(mdp), rho=1.0, rng=0).report
    on = dp_vapvi(data, _table(mdp), rho=1.0, rng=0, additive_bonus=0.1 * DK_UNIT).report
    assert on.summary() == off.summary() and on.epsilon == off.epsilon


def test_the_full_figure_runs_every_curve_to_k_20000() -> None:
    full = _setup(None, 0, quick=False, extended=True)
    assert max(full.k_extended) == 20000 == K_EXTENDED[-1]
    assert {"PEVI", "VAPVI", "DP-VAPVI", DK_ON} <= set(EXTENDED_ALGORITHMS)
    assert full.seeds == DEFAULT_SEEDS


def _agg(gap_on: float, gap_off: float) -> dict:
    setup = _Setup((5, 1000), (20000,), 2, (1.0,), 0, False)
    agg = {}
    for inst in INSTANCES:
        for k in (5, 1000, 20000):
            late = k == 20000
            cells = {"PEVI": 5.0, "VAPVI": 0.1, "DP-VAPVI": 0.1 + (gap_off if late else 2.0)}
            cells[DK_ON] = 0.1 + (gap_on if late else 2.0)
            for alg, v in cells.items():
                agg[(alg, inst, 1.0, k)] = {"mean": v, "se": 0.0, "n": 2}
    return setup, agg


def test_the_convergence_verdict_is_taken_at_k_20000_with_the_term_on() -> None:
    setup, agg = _agg(gap_on=0.01, gap_off=2.0)
    vstar = dict.fromkeys(INSTANCES, 10.0)
    claims = _claims_a(agg, setup, vstar)
    assert all(c["k_max"] == 20000 for c in claims)
    assert all(c["converges_holds"] and not c["converges_off_holds"] for c in claims)
    setup, agg = _agg(gap_on=1.5, gap_off=0.01)
    claims = _claims_a(agg, setup, vstar)
    assert not any(c["converges_holds"] for c in claims)  # the verdict follows the term on
    assert all(c["converges_off_holds"] for c in claims)


def test_the_grid_cache_resumes_without_recomputing(tmp_path) -> None:
    """Each (instance, seed) is a function cell stored in the grid's cache folder as
    instance<i>-seed<s>.json (the layout of the finished full-scale cells): a rerun computes
    only the missing ones and gives the same rows."""
    computed: list[str] = []

    def seen(unit, record) -> None:
        computed.append(unit.path.name)

    setup = _Setup((5, 20), (), 2, (1.0,), 0, False, instances=(0,))
    first = _run_grid(setup, {"x": ["dp", 1.0]}, cache=tmp_path, workers=1, progress=seen)
    assert sorted(computed) == ["instance0-seed0.json", "instance0-seed1.json"]
    assert len(first) == 4 and len(list(tmp_path.glob("*.json"))) == 2
    (tmp_path / "instance0-seed1.json").unlink()  # as if interrupted before this cell
    computed.clear()
    again = _run_grid(setup, {"x": ["dp", 1.0]}, cache=tmp_path, workers=1, progress=seen)
    assert computed == ["instance0-seed1.json"]  # only the missing (instance, seed) ran again

    def results(rows: list[dict]) -> str:  # the timing field is the only one allowed to differ
        return json.dumps([{k: v for k, v in r.items() if k != "cell_cpu_seconds"} for r in rows])

    assert results(again) == results(first)
    # the spec names the runner the closures used to be: same policy, same noise
    mdp = LinearMDP.qiao_wang(0)
    data = _nested_episodes(mdp, 20, 0, 0, 0)
    spec = runner_of(dk_spec(1.0, {1.0: 0.03}))(data, _table(mdp), 1.0, 3)
    direct = _dp_dk_runner(1.0, {1.0: 0.03})(data, _table(mdp), 1.0, 3)
    assert np.array_equal(spec.q, direct.q)


def test_quick_tuning_is_fast_and_picks_from_its_grid() -> None:
    t = tune(True, (1.0,), cache=False)
    assert set(t.chosen) == {1.0} and t.chosen[1.0] in t.multipliers
    assert t.chosen[1.0] == choose(t.score[1.0])
    # fast: one (instance, seed) of the quick tuning grid costs well under a CPU-second (the
    # wall time also counts the start of the worker process that runs it)
    assert t.cell_cpu < 1.0


@pytest.mark.parametrize("c", [0.1, 1.0])
def test_the_runner_reads_the_constant_of_its_c(c: float) -> None:
    mdp = LinearMDP.qiao_wang(1)
    data = _nested_episodes(mdp, 50, 0, 1, 0)
    policy = _dp_dk_runner(1.0, {0.1: 0.01, 1.0: 0.03})(data, _table(mdp), c, 3)
    expected = (0.01 if c == 0.1 else 0.03) * DK_UNIT / 50
    np.testing.assert_allclose(policy.additive, expected)
