"""A team's own toy-text logs with step costs, end to end on the command line.

The journey of a user with logged episodes of a Gymnasium toy-text task whose rewards are costs
(CliffWalking-v1: −1 per step, −100 at the cliff; the optimal return from the start is −13):
their own behaviour policy's episodes as a CSV table → `privrl data import` with declared
spaces → `privrl train dp-apvi` with the public reward range → `privrl eval` of the learned
policy in the environment. Nothing is reshaped by hand: no mapping of rewards into [0, 1], no
padding, no removal of the absorbing state the learner adds. At a large ρ the private policy is
optimal, and the evaluation's privacy.json is the training run's report carried over.

The private run draws its noise from a fixed, insecure seed so that the test is deterministic
(its report is therefore not certified, ε = ∞, which the evaluation carries over too). With
secure noise at ρ = 10⁶ on 1,000 such logs, the recommended `--bonus-scale 0.05` reached the
optimal return in 10 of 10 runs (9 of 10 with no bonus, 0 of 10 with the theory's default
scale, whose privacy term dwarfs a step's cost; docs/own-data-learning.md has the numbers).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from privrl.cli.main import main
from privrl.data import collect
from privrl.policies import EpsilonGreedy, TabularPolicy

ENV = "CliffWalking-v1"
H = 20
OPTIMAL_RETURN = -13.0


def optimal_actions() -> np.ndarray:
    """The optimal stationary policy by value iteration on the environment's model."""
    env = gym.make(ENV).unwrapped
    S, A = env.observation_space.n, env.action_space.n
    V = np.zeros(S)
    for _ in range(200):
        Q = np.array(
            [
                [
                    sum(p * (r + (0.0 if d else V[s2])) for p, s2, r, d in env.P[s][a])
                    for a in range(A)
                ]
                for s in range(S)
            ]
        )
        V = Q.max(axis=1)
    return Q.argmax(axis=1).astype(np.int64)


def own_logs_csv(path: Path, n: int = 1000) -> Path:
    """The user's logs: an ε-greedy behaviour of a good policy, one row per transition."""
    behaviour = EpsilonGreedy(TabularPolicy(optimal_actions(), 4), 4, 0.1)
    data = collect(ENV, behaviour, n_episodes=n, seed=7, max_steps=H)
    rows = []
    for k, ep in enumerate(data.iter_episodes()):
        for t in range(len(ep.actions)):
            rows.append(
                {
                    "visit": k,
                    "cell": int(ep.observations[t]),
                    "move": int(ep.actions[t]),
                    "cost": float(ep.rewards[t]),
                    "next_cell": int(ep.observations[t + 1]),
                    "done": bool(ep.terminated[t]),
                }
            )
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize(
    "learner",
    [
        ["apvi"],
        [
            "dp-apvi",
            "--rho",
            "1000000",
            "--privatize-rewards",
            "--bonus-scale",
            "0",
            "--insecure-reproducible-noise",
            "--seed",
            "0",
        ],
    ],
)
def test_cost_per_step_logs_to_an_optimal_evaluated_policy(learner, tmp_path: Path) -> None:
    table = own_logs_csv(tmp_path / "logs.csv")
    data = tmp_path / "logs.h5"
    columns = "episode=visit,obs=cell,action=move,reward=cost,next_obs=next_cell,terminated=done"
    assert (
        main(
            [
                "data",
                "import",
                str(table),
                "--out",
                str(data),
                "-c",
                columns,
                "--observation-space",
                "discrete:48",
                "--action-space",
                "discrete:4",
            ]
        )
        == 0
    )
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                *learner,
                "--data",
                str(data),
                "-H",
                str(H),
                "--reward-range",
                "-100,0",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    evaluation = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                str(run / "policy.npz"),
                "--env",
                ENV,
                "-n",
                "3",
                "--out",
                str(evaluation),
            ]
        )
        == 0
    )
    metrics = json.loads((evaluation / "metrics.json").read_text())
    assert metrics["return_mean"] == OPTIMAL_RETURN
    trained = json.loads((run / "privacy.json").read_text())
    carried = json.loads((evaluation / "privacy.json").read_text())
    assert carried["epsilon"] == trained["epsilon"]
    if learner[0] == "apvi":
        assert trained["epsilon"] is None or not np.isfinite(float(trained["epsilon"]))
