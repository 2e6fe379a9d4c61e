"""examples/frozenlake.py at a tiny n: the simulator's exact values agree with its sampled
episodes, the pipeline (CSV → `privrl data import` → `privrl train apvi | dp-apvi` → exact
value and played return) runs end to end, and nothing in it is specific to FrozenLake
(CliffWalking, rewards of the other sign, runs too and reaches its optimal return)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("frozenlake", ROOT / "examples" / "frozenlake.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["frozenlake"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("frozenlake", None)


def test_exact_value_agrees_with_the_sampled_returns(ex) -> None:
    """The behaviour policy's exact H-step value (dynamic programming) is the mean H-step
    return of the episodes `simulate` draws (within 4 standard errors)."""
    env = ex.load_env("FrozenLake-v1")
    H, mu = 12, ex.behaviour(env, 0.3)
    rows = ex.simulate(env, mu, 4000, seed=1)
    early = rows["timestep"] < H
    returns = np.bincount(rows["episode"][early], weights=rows["reward"][early], minlength=4000)
    exact = ex.value(env, H, np.broadcast_to(mu, (H, env.S, env.A)))
    assert abs(returns.mean() - exact) < 4 * returns.std() / np.sqrt(4000)
    # Episodes end once: terminated or truncated on their last row only.
    last = np.r_[rows["episode"][1:] != rows["episode"][:-1], True]
    assert np.all((rows["terminated"] | rows["truncated"]) == last)


def test_pipeline_end_to_end_at_tiny_n(ex, tmp_path: Path) -> None:
    results = ex.run(tmp_path, ns=(400,), rhos=(1.0,), grid=(0.0,), H=10, epsilon=0.5)
    rows = {r["method"]: r for r in results["rows"]}
    assert set(rows) == {"apvi", "dp-apvi"}
    for r in rows.values():
        assert 0.0 <= r["value"] <= results["optimal_value"] + 1e-12
        assert 0.0 <= r["return_mean"] <= 1.0 and r["return_stderr"] >= 0.0
        assert r["bonus_scale"] == 0.0 and set(r["public_scores"]) == {"0.0"}
    assert results["behaviour_value"] < results["optimal_value"]
    assert rows["apvi"]["value"] > results["behaviour_value"]
    assert (tmp_path / "n400" / "dp-apvi-rho1" / "privacy.json").is_file()
    table = ex.markdown(results)
    assert "DP-APVI ρ = 1" in table and "behaviour policy" in table
    ex.plot(results, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_another_toy_text_env_runs(ex, tmp_path: Path) -> None:
    """CliffWalking: rewards −1 / −100 on their own scale, the declared range given to the
    learner; no termination at the cliff (a reset), so episodes run to the time limit and are
    truncated at H. Values are on the original scale: at least H · (−100), at most optimal."""
    results = ex.run(
        tmp_path,
        env_id="CliffWalking-v1",
        ns=(30,),
        rhos=(),
        grid=(0.0,),
        H=5,
        epsilon=0.5,
        reward_range=(-100.0, 0.0),
    )
    assert results["rows"][0]["method"] == "apvi"
    assert -100.0 * 5 <= results["rows"][0]["value"] <= results["optimal_value"] + 1e-12
    assert results["optimal_value"] == -5.0  # the goal is 13 steps away: −1 per step for 5


def test_cliff_walking_logs_give_apvi_its_optimal_return(ex, tmp_path: Path) -> None:
    """Cost-per-step logs (CliffWalking-v1, range [−100, 0]) with no hand mapping: APVI's
    policy reaches the goal in 13 steps, return −13 both by the exact value on the table and
    played in the Gymnasium environment (the mapped scale's padding would make it wander)."""
    results = ex.run(
        tmp_path,
        env_id="CliffWalking-v1",
        ns=(300,),
        rhos=(),
        grid=(0.0,),
        H=20,
        epsilon=0.1,
        reward_range=(-100.0, 0.0),
        eval_episodes=3,
    )
    (row,) = results["rows"]
    assert results["optimal_value"] == -13.0
    assert results["behaviour_value"] < -13.0
    assert row["value"] == -13.0 and row["return_mean"] == -13.0
