"""Rewards of any sign for the tabular learners, and padding that keeps the user's objective.

CliffWalking-v1 (Gymnasium): a cost of -1 per step, -100 for the cliff (back to the start),
the episode terminates at the goal; the optimal return from the start is -13. Its logs, from
an ε-greedy behaviour of the optimal policy, give the optimal policy to APVI and to DP-APVI at a
large ρ, with no hand padding, from Python and from the command line. Also checked: values are
reported on the original scale, the old inversion (padding at mapped reward 0) really learns a
worse policy, a private run without a declared range is refused, and the privacy property:
with the range declared, replacing one trajectory (its rewards arbitrary: huge, negative, NaN,
infinite) changes the reward sums by at most the documented bound (each entry by ≤ 1,
‖Δ‖₁ ≤ 2H, ‖Δ‖₂² ≤ 2H per step, ‖Δ‖₂ ≤ √2·H pooled over h).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from privrl.config import ConfigError
from privrl.data import collect, save_hdf5
from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.io import header_of
from privrl.offline import APVI, DPAPVI
from privrl.offline.apvi import empirical_counts
from privrl.offline.common import RewardRange
from privrl.policies import EpsilonGreedy, TabularPolicy
from privrl.privacy.noise import NoiseSource
from privrl.rl.tabular_policy import FiniteHorizonPolicy

ENV = "CliffWalking-v1"
H = 20  # public horizon: the optimal path takes 13 steps
START = 36
OPTIMAL_RETURN = -13.0
DP_APVI_LARGE_RHO = ("dp-apvi", "--rho", "1000000", "--privatize-rewards", "--bonus-scale", "0")


def optimal_actions() -> np.ndarray:
    """The optimal stationary policy of CliffWalking by value iteration on its model."""
    env = gym.make(ENV).unwrapped
    S, A = env.observation_space.n, env.action_space.n
    V = np.zeros(S)
    for _ in range(200):
        Q = np.array(
            [
                [
                    sum(p * (r + (0.0 if done else V[s2])) for p, s2, r, done in env.P[s][a])
                    for a in range(A)
                ]
                for s in range(S)
            ]
        )
        V = Q.max(axis=1)
    return Q.argmax(axis=1).astype(np.int64)


def cliff_logs(n: int = 400, epsilon: float = 0.1, seed: int = 0) -> TrajectoryDataset:
    space = gym.make(ENV).action_space
    behaviour = EpsilonGreedy(TabularPolicy(optimal_actions(), 4), space.n, epsilon)
    return collect(ENV, behaviour, n_episodes=n, seed=seed, max_steps=H)


def rollout_return(policy: FiniteHorizonPolicy) -> float:
    """The return of a learned [H, S] policy from the start (the environment is deterministic)."""
    env = gym.make(ENV)
    s, _ = env.reset(seed=0)
    total = 0.0
    for h in range(policy.H):
        s, r, terminated, truncated, _ = env.step(int(policy.actions[h, s]))
        total += float(r)
        if terminated or truncated:
            break
    return total


@pytest.fixture(scope="module")
def logs() -> TrajectoryDataset:
    return cliff_logs(n=1000)


def test_collected_logs_declare_their_public_reward_range(logs: TrajectoryDataset) -> None:
    assert logs.metadata.extra["reward_range"] == [-100.0, 0.0]
    assert float(np.min(logs.rewards)) < 0  # (costs: clipping to [0, 1] would erase them)


def test_apvi_learns_the_optimal_policy_from_cost_per_step_logs(logs: TrajectoryDataset) -> None:
    fit = APVI(horizon=H, reward_range=(-100, 0)).fit(logs)
    assert rollout_return(fit.policy) == OPTIMAL_RETURN
    # the declared range, from the metadata when the config does not give it
    from_meta = APVI(horizon=H).fit(logs)
    assert np.array_equal(from_meta.policy.actions, fit.policy.actions)
    sources = {p["name"]: p["source"] for p in from_meta.report.public_parameters}
    assert sources["reward range"] == "public metadata"


def test_dp_apvi_at_a_large_rho_learns_the_optimal_policy(logs: TrajectoryDataset) -> None:
    """Private reward sums, noise repeatable (insecure, seed 0). The range's width (100) is
    100 step costs: noise on a reward sum weighs 100× more on the user's scale than in [0, 1],
    so a "large ρ" here is the largest, 1e6 (at 1e5 rarely visited pairs often look free)."""
    learner = DPAPVI(
        rho=1e6, horizon=H, privatize_rewards=True, reward_range=(-100, 0), bonus_scale=0.0
    )
    fit = learner.fit(logs, noise=NoiseSource.insecure(0))
    assert rollout_return(fit.policy) == OPTIMAL_RETURN
    released = {r.name for r in fit.report.releases}
    assert any(name.startswith("reward sums") for name in released)


def test_values_are_reported_on_the_original_scale(logs: TrajectoryDataset) -> None:
    """Non-private APVI with no bonus on a deterministic MDP: the value of the start is the
    optimal return itself, −13 (not a mapped value in [0, H]); with the default bonus it is a
    pessimistic (lower) value on the same scale."""
    pessimistic = APVI(horizon=H, reward_range=(-100, 0)).fit(logs).details.original_values()
    assert -100.0 * H <= pessimistic[0, START] < OPTIMAL_RETURN
    fit = APVI(horizon=H, reward_range=(-100, 0), bonus_scale=0.0).fit(logs)
    V = fit.details.original_values()
    assert V[0, START] == pytest.approx(OPTIMAL_RETURN)
    assert V[0].max() <= 0.0 and V[H].max() == 0.0
    # the padded model's absorbing state, reached from step 13 on: a finished episode is worth
    # 0 on the user's scale — at every step, also before any episode has ended there (its
    # model is public: it is planned exactly, not from its counts)
    absorbing = fit.details.values.V.shape[1] - 1
    assert np.allclose(V[13:, absorbing], 0.0)
    assert np.allclose(V[:, absorbing], 0.0)
    assert fit.curve[0]["V_max"] == pytest.approx(float(V[0].max()))
    assert fit.metrics["reward_range"] == [-100.0, 0.0]
    assert fit.metrics["pessimistic_value_mean_V1"] == pytest.approx(float(V[0].mean()))


def test_padding_at_mapped_zero_would_invert_the_objective(
    logs: TrajectoryDataset, monkeypatch
) -> None:
    """The failure this guards against: an absorbing state at mapped reward 0 (= −100 on the
    user's scale) makes finishing the worst outcome, and APVI learns to avoid the goal."""
    import privrl.offline.apvi as apvi_module

    # (the one source of the absorbing state's reward: the padded counts and the planner)
    monkeypatch.setattr(apvi_module, "_absorbing_reward", lambda reward_range: 0.0)
    inverted = APVI(horizon=H, reward_range=(-100, 0)).fit(logs)
    assert rollout_return(inverted.policy) < OPTIMAL_RETURN


# ---------------------------------------------------------------------------------------------
# pessimism on a scale where every reward is near the top
# ---------------------------------------------------------------------------------------------


def test_the_absorbing_state_is_planned_exactly_with_no_bonus(logs: TrajectoryDataset) -> None:
    """The absorbing state's model is public (it stays put at the mapped reward 0), so its
    pessimistic value is its exact value (H − h)·zero at every step, with no bonus, for APVI
    and DP-APVI alike. Planned from its counts instead, it was unknown before step 13 (no
    episode had ended: value 0 in mapped units, −100 per remaining step on the user's scale)
    and penalised after (340 of 1000 episodes end at step 13), which made finishing look worse
    than wandering."""
    zero = RewardRange(-100, 0).zero
    steps = H - np.arange(H + 1)
    for learner in (
        APVI(horizon=H, reward_range=(-100, 0)),
        APVI(horizon=H, reward_range=(-100, 0), stationary=True),
        DPAPVI(rho=1e6, horizon=H, reward_range=(-100, 0), privatize_rewards=True),
    ):
        values = learner.fit(logs, noise=NoiseSource.insecure(0)).details.values
        assert np.allclose(values.V[:, -1], steps * zero)
        assert np.all(values.bonus[:, -1] == 0.0)
        assert np.allclose(values.Q[:, -1], (steps[:-1] * zero)[:, None])


def test_dp_apvi_with_a_scaled_bonus_learns_the_optimal_policy(logs: TrajectoryDataset) -> None:
    """ρ = 1e6, private rewards, bonus_scale 0.05: the optimal return in ≥ 9 of 10 noise draws
    (measured 10 of 10; 0 of 10 while the absorbing state was planned from its counts)."""
    learner = DPAPVI(
        rho=1e6, horizon=H, privatize_rewards=True, reward_range=(-100, 0), bonus_scale=0.05
    )
    returns = [
        rollout_return(learner.fit(logs, noise=NoiseSource.insecure(k)).policy) for k in range(10)
    ]
    assert sum(r == OPTIMAL_RETURN for r in returns) >= 9, returns


def test_the_theory_bonus_privacy_term_dwarfs_every_reward(logs: TrajectoryDataset) -> None:
    """Why the default (theory) bonus does not find the optimal policy on 1000 episodes even at
    ρ = 1e6: the privacy term C2·S·H·E·ι/ñ of Γ. E is small (0.088 of a count) but C2·S·H·ι
    = 16·49·20·10.6 ≈ 1.7e5, so the term is ≈ 1.5e4/ñ in mapped reward units: ≈ 16 on the
    best-visited pair (ñ = 913), sixteen times the largest per-step reward. Every Q̃ of the
    start state clips to 0 (and the argmax of a tie is action 0). The term does not depend on
    the reward map (it is the same for rewards in [0, 1]); it falls below 1 only for ñ above
    ≈ 1.5e4 visits."""
    from privrl.offline.apvi import C2

    fit = DPAPVI(rho=1e6, horizon=H, privatize_rewards=True, reward_range=(-100, 0)).fit(
        logs, noise=NoiseSource.insecure(0)
    )
    details = fit.details
    S = details.values.V.shape[1]  # the 48 states and the absorbing one
    E, iota = details.plan.E, details.plan.iota
    n_best = details.model.n_sa[0, START].max()
    privacy_term = C2 * S * H * E * iota / n_best
    assert privacy_term > 10.0  # ≫ 1, the largest mapped reward of a step
    assert details.values.bonus[0, START].min() >= privacy_term
    assert np.all(details.values.Q[0, START] == 0.0)
    assert rollout_return(fit.policy) < OPTIMAL_RETURN


def test_a_private_run_without_a_reward_range_is_refused(logs: TrajectoryDataset) -> None:
    bare = TrajectoryDataset(
        **{
            **{k: getattr(logs, k) for k in ("observations", "actions", "rewards")},
            "terminated": logs.terminated,
            "truncated": logs.truncated,
            "episode_offsets": logs.episode_offsets,
            "metadata": DatasetMetadata(
                logs.metadata.observation_space, logs.metadata.action_space, horizon=H
            ),
        }
    )
    with pytest.raises(ConfigError) as err:
        DPAPVI(rho=1.0, privatize_rewards=True).plan(header_of(bare))
    assert err.value.key == "reward_range" and "LOW,HIGH" in str(err.value)
    # a non-private run falls back to [0, 1], recorded as a default
    plan = APVI().plan(header_of(bare))
    params = {p.name: p for p in plan.facts["params"]}
    assert params["reward range"].source.value == "default"
    assert params["reward range"].value == [0.0, 1.0]


def test_absorbing_padding_needs_zero_in_the_range(logs: TrajectoryDataset) -> None:
    with pytest.raises(ConfigError, match="does not contain 0") as err:
        APVI(horizon=H, reward_range=(1, 2)).plan(header_of(logs))
    assert err.value.key == "reward_range"
    APVI(horizon=H, reward_range=(1, 2), padding="none").plan(header_of(logs))  # no padding


def test_a_public_reward_table_is_on_the_original_scale(logs: TrajectoryDataset) -> None:
    """The environment's mean reward as a public table in [-100, 0]: the same policy as the
    learned rewards; a table outside the range is refused."""
    env = gym.make(ENV).unwrapped
    table = np.array([[env.P[s][a][0][2] for a in range(4)] for s in range(48)], dtype=float)
    reward = np.broadcast_to(table, (H, 48, 4)).copy()
    fit = DPAPVI(rho=1e5, horizon=H, reward=reward, reward_range=(-100, 0), bonus_scale=0.0).fit(
        logs, noise=NoiseSource.insecure(4)
    )
    assert rollout_return(fit.policy) == OPTIMAL_RETURN
    with pytest.raises(ConfigError) as err:
        APVI(horizon=H, reward=reward, reward_range=(-1, 0)).plan(header_of(logs))
    assert err.value.key == "reward" and "[-1, 0]" in str(err.value)


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "learner",
    [
        ["apvi"],
        [*DP_APVI_LARGE_RHO, "--insecure-reproducible-noise"],
    ],
)
def test_the_command_line_learns_the_optimal_policy(
    learner: list[str], logs: TrajectoryDataset, tmp_path: Path
) -> None:
    from privrl.cli.main import main

    data = save_hdf5(logs, tmp_path / "cliff.h5")
    out = tmp_path / "run"
    argv = ["train", *learner, "--data", str(data), "-H", str(H), "--reward-range", "-100,0"]
    assert main([*argv, "--out", str(out), "--seed", "0"]) == 0
    policy = FiniteHorizonPolicy.load(out / "policy.npz")
    assert rollout_return(policy) == OPTIMAL_RETURN
    privacy = json.loads((out / "privacy.json").read_text())
    params = {p["name"]: p for p in privacy["public_parameters"]}
    assert params["reward range"]["value"] == [-100.0, 0.0]
    assert params["reward range"]["source"] == "flag"
    assert json.loads((out / "config.json").read_text())["reward_range"] == [-100.0, 0.0]


def test_the_command_line_refuses_a_private_run_without_a_range(tmp_path: Path, capsys) -> None:
    from privrl.cli.main import main
    from tests.privacy.test_ledger import make_dataset

    data = save_hdf5(make_dataset(), tmp_path / "d.h5")
    argv = ["train", "dp-apvi", "--data", str(data), "--rho", "1", "--privatize-rewards"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: --reward-range is required"), err
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------------------------
# the privacy property: sensitivity of the reward sums with the range declared
# ---------------------------------------------------------------------------------------------


def _replace_first(
    logs: TrajectoryDataset, rewards: np.ndarray, actions: np.ndarray
) -> TrajectoryDataset:
    """`logs` with its first episode's rewards and actions replaced (same length)."""
    r = np.asarray(logs.rewards, dtype=np.float64).copy()
    a = np.asarray(logs.actions).copy()
    L = int(logs.episode_offsets[1])
    r[:L], a[:L] = rewards[:L], actions[:L]
    return TrajectoryDataset(
        observations=logs.observations,
        actions=a,
        rewards=r,
        terminated=logs.terminated,
        truncated=logs.truncated,
        episode_offsets=logs.episode_offsets,
        metadata=logs.metadata,
    )


@pytest.mark.parametrize("stationary", [False, True])
def test_one_trajectory_moves_the_reward_sums_by_the_documented_bound(
    logs: TrajectoryDataset, stationary: bool
) -> None:
    rng = np.random.default_rng(1)
    small = cliff_logs(n=30, seed=2)
    L = int(small.episode_offsets[1])
    wild = rng.choice([1e300, -1e300, 1e9, -1e9, 5.0, -3.0, -50.0], size=L)
    rewards = np.concatenate([wild, np.zeros(small.n_transitions - L)])
    actions = np.concatenate([rng.integers(0, 4, L), np.zeros(small.n_transitions - L, int)])
    neighbour = _replace_first(small, rewards, actions)

    def sums(ds: TrajectoryDataset) -> np.ndarray:
        c = empirical_counts(
            ds,
            horizon=H,
            n_states=48,
            n_actions=4,
            reward_sums=True,
            padding="absorbing",
            stationary=stationary,
            reward_range=RewardRange(-100, 0),
        )
        return c.r_sum

    diff = (sums(small) - sums(neighbour)).ravel()
    assert np.all(np.isfinite(diff))
    assert np.abs(diff).max() <= 1.0 + 1e-12  # each entry: one mapped reward in [0, 1]
    assert np.abs(diff).sum() <= 2 * H + 1e-9
    if stationary:
        assert np.linalg.norm(diff) <= math.sqrt(2) * H + 1e-9
    else:
        assert np.linalg.norm(diff) ** 2 <= 2 * H + 1e-9
    assert np.abs(diff).max() > 0  # the neighbour really differs


# ---------------------------------------------------------------------------------------------
# the linear learners: the same range, and a terminal state worth the user's reward 0
# ---------------------------------------------------------------------------------------------

CHAIN_S, CHAIN_H = 5, 10  # states 0..4, the goal 4 terminates; a cost of 1 per step
CHAIN_ONE_HOT = np.eye(CHAIN_S * 2).reshape(CHAIN_S, 2, CHAIN_S * 2)  # a tabular linear MDP


def chain_step(s: np.ndarray, a: np.ndarray) -> np.ndarray:
    return np.where(a == 1, np.minimum(s + 1, CHAIN_S - 1), np.maximum(s - 1, 0))


def chain_logs(n: int = 300, seed: int = 0) -> TrajectoryDataset:
    """Uniform-random walks from state 0, reward −1 per step, terminated at the goal or cut at
    H steps; the optimal return is −4 (right, four times)."""
    rng = np.random.default_rng(seed)
    obs, acts, rews, term, trunc, offsets = [], [], [], [], [], [0]
    for _ in range(n):
        s = np.int64(0)
        obs.append(s)
        for h in range(CHAIN_H):
            a = rng.integers(0, 2)
            s = chain_step(s, a)
            done = bool(s == CHAIN_S - 1)
            obs.append(s)
            acts.append(a)
            rews.append(-1.0)
            term.append(done)
            trunc.append(not done and h == CHAIN_H - 1)
            if done:
                break
        offsets.append(len(acts))
    return TrajectoryDataset(
        observations=np.array(obs, dtype=np.int64),
        actions=np.array(acts, dtype=np.int64),
        rewards=np.array(rews),
        terminated=np.array(term),
        truncated=np.array(trunc),
        episode_offsets=np.array(offsets, dtype=np.int64),
        metadata=DatasetMetadata(spaces.Discrete(CHAIN_S), spaces.Discrete(2), horizon=CHAIN_H),
    )


def chain_return(actions: np.ndarray) -> float:
    s, total = np.int64(0), 0.0
    for h in range(CHAIN_H):
        s = chain_step(s, actions[h, s])
        total -= 1.0
        if s == CHAIN_S - 1:
            break
    return total


@pytest.fixture(scope="module")
def chain() -> TrajectoryDataset:
    return chain_logs()


@pytest.mark.parametrize("learner", ["vapvi", "pevi", "dp-vapvi"])
def test_the_linear_learners_learn_the_optimal_policy(learner: str, chain) -> None:
    from privrl.offline import DPVAPVI, PEVI, VAPVI

    settings = {"phi": CHAIN_ONE_HOT, "reward_range": (-1, 0), "bonus_scale": 0.0}
    if learner == "dp-vapvi":
        fit = DPVAPVI(rho=1e6, **settings).fit(chain, noise=NoiseSource.insecure(0))
    else:
        fit = (VAPVI if learner == "vapvi" else PEVI)(**settings).fit(chain)
    assert chain_return(np.asarray(fit.policy.actions)) == -4.0
    # values on the original scale: a (ridge-shrunk) return below the optimum, not in [0, H]
    v_start = fit.metrics["pessimistic_value_per_state"][0]
    assert -float(CHAIN_H) <= v_start <= -4.0 + 1e-9
    assert fit.metrics["reward_range"] == [-1.0, 0.0]


def test_a_linear_terminal_value_of_mapped_zero_would_invert_the_objective(
    chain, monkeypatch
) -> None:
    """Every step costs the same mapped 0 as the terminal state would be worth: finishing
    stops counting, and the learner has no reason to reach the goal."""
    from privrl.offline import VAPVI
    from privrl.offline.vapvi import LinearEpisodes

    monkeypatch.setattr(LinearEpisodes, "terminal_value", lambda self, h: 0.0)
    fit = VAPVI(phi=CHAIN_ONE_HOT, reward_range=(-1, 0), bonus_scale=0.0).fit(chain)
    assert chain_return(np.asarray(fit.policy.actions)) < -4.0


def test_dp_vapvi_without_a_reward_range_is_refused(chain) -> None:
    from privrl.offline import DPVAPVI, VAPVI

    with pytest.raises(ConfigError) as err:
        DPVAPVI(rho=1.0, phi=CHAIN_ONE_HOT).plan(header_of(chain))
    assert err.value.key == "reward_range"
    plan = VAPVI(phi=CHAIN_ONE_HOT).plan(header_of(chain))
    params = {p.name: p for p in plan.facts["params"]}
    assert params["reward range"].value == [0.0, 1.0]
    assert params["reward range"].source.value == "default"


def test_the_default_range_warning_names_the_flag(logs: TrajectoryDataset, tmp_path, capsys):
    """Costs read with the default [0, 1] all clip to 0, so every value is at its floor; the
    warning says the range was the default and names --reward-range (public facts only)."""
    from privrl.cli.main import main

    bare = logs.with_metadata(logs.metadata.replace(extra={}))
    data = save_hdf5(bare, tmp_path / "bare.h5")
    argv = ["train", "apvi", "--data", str(data), "-H", str(H), "--out", str(tmp_path / "r")]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "every pessimistic value is 0" in out
    assert "The reward range is [0, 1] (the default" in out and "--reward-range LOW,HIGH" in out
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["reward_range"] == [0.0, 1.0] and metrics["all_values_zero"] is True


def test_a_simulated_run_refuses_a_range_without_its_rewards(tmp_path, capsys) -> None:
    from privrl.cli.main import main

    argv = ["train", "apvi", "--env", "random-tabular", "--episodes", "10"]
    assert main([*argv, "--reward-range", "-1,0", "--out", str(tmp_path / "a")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: --reward-range"), err
    assert main([*argv, "--reward-range", "-1,1", "--out", str(tmp_path / "b")]) == 0
