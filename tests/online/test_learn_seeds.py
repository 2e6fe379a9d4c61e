"""`UCBVI.learn_seeds` / `DPUCBVI.learn_seeds`: several runs simulated together, each what
`learn` returns for its seed (the users), with its own privacy noise, and the same numbers as
the vectorised loop underneath (what the Figure 4 reproduction of SDP-PE runs)."""

from __future__ import annotations

import numpy as np
import pytest

from privrl.online import DPUCBVI, UCBVI, make_env
from privrl.online.ucbvi import ucbvi
from privrl.privacy import NoiseSource

SEEDS = [3, 4, 7]


def env():
    return make_env("random-tabular", states=2, actions=2, horizon=2, seed=0)


def test_each_non_private_run_is_the_run_of_its_seed() -> None:
    learner = UCBVI(episodes=150)
    batch = learner.learn_seeds(env(), SEEDS)
    assert len(batch) == len(SEEDS)
    for seed, fitted in zip(SEEDS, batch, strict=True):
        alone = learner.learn(env(), seed=seed)
        assert np.array_equal(fitted.details.regret, alone.details.regret)
        assert np.array_equal(np.asarray(fitted.policy), np.asarray(alone.policy))
        assert fitted.curve == alone.curve
        assert fitted.metrics == alone.metrics
    # the seeds drive the users: different seeds, different runs
    assert not np.array_equal(batch[0].details.regret, batch[1].details.regret)


@pytest.mark.parametrize("privatizer", ["central", "local"])
def test_private_runs_are_the_vectorised_loops_numbers(privatizer: str) -> None:
    learner = DPUCBVI(epsilon=2.0, privatizer=privatizer, episodes=120)
    batch = learner.learn_seeds(env(), SEEDS, noise=NoiseSource.insecure(SEEDS))
    loop = ucbvi(
        env(),
        120,
        seeds=SEEDS,
        privatizer=privatizer,
        epsilon=2.0,
        noise=NoiseSource.insecure(SEEDS),
    )
    for fitted, raw in zip(batch, loop, strict=True):
        assert np.array_equal(fitted.details.regret, raw.regret)
        assert fitted.metrics["regret"] == float(raw.cumulative_regret[-1])
        # repeatable noise: the report says the run is not certified
        assert not fitted.report.certified and fitted.report.epsilon == float("inf")
    # run 0's noise is `learn`'s with the same source
    alone = learner.learn(env(), seed=SEEDS[0], noise=NoiseSource.insecure(SEEDS))
    assert np.array_equal(batch[0].details.regret, alone.details.regret)


def test_the_batch_reports_the_plans_public_parameters() -> None:
    learner = DPUCBVI(epsilon=2.0, privatizer="central", episodes=60)
    fitted = learner.learn_seeds(env(), SEEDS[:2])
    planned = learner.plan(env()).report
    for run in fitted:
        assert run.report.certified
        assert run.report.epsilon == pytest.approx(planned.epsilon)
        assert run.report.public_parameters == planned.public_parameters
        assert any(p["name"] == "episodes (users) K" for p in run.report.public_parameters)


def test_progress_counts_the_batchs_episodes_and_a_foreign_plan_is_refused() -> None:
    learner = UCBVI(episodes=90)
    seen: list[tuple[str, int, int]] = []
    learner.learn_seeds(env(), SEEDS, progress=lambda *step: seen.append(step))
    assert seen and seen[-1] == ("ucbvi", 90, 90)
    assert all(total == 90 and 0 < done <= 90 for _, done, total in seen)
    with pytest.raises(ValueError, match="plan is for"):
        learner.learn_seeds(env(), SEEDS, plan=learner.plan(make_env("riverswim")))
