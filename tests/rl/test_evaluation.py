"""`privrl.rl.evaluation`: every policy form rolled out on Gymnasium toy-text environments
whose optimal behaviour is known exactly (dynamic programming on the simulator's own P).

Checks: a table, a saved policy.npz, user code and a `FiniteHorizonPolicy` object each reach
the optimal return (exactly on the deterministic CliffWalking-v1 and non-slippery
FrozenLake, within a loose Monte-Carlo band on slippery FrozenLake-v1); a tabular policy over
S + 1 states (the absorbing state of padded episodes last) drops that state and plays the
same; any other S, or other actions, is refused with a message naming both sizes; an unknown
id is a `ConfigError` on ``env``; the inherited report is ε = ∞ with a reason for a table or
code, and a report the caller names is refused when it records another policy's SHA-256.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.rl.evaluation import EvalConfig, Evaluate, evaluate_policy, policy_report
from privrl.rl.policy_files import load_any_policy
from privrl.rl.tabular_policy import FiniteHorizonPolicy


def optimal(env: str | gym.Env, H: int) -> tuple[np.ndarray, float]:
    """The optimal H-step actions [H, S] of a toy-text env (its `P`) and their exact value
    from the start state distribution's state 0 (FrozenLake) or 36 (CliffWalking)."""
    u = (gym.make(env) if isinstance(env, str) else env).unwrapped
    S, A = int(u.observation_space.n), int(u.action_space.n)
    V, actions = np.zeros(S), np.zeros((H, S), dtype=np.int64)
    for h in range(H - 1, -1, -1):
        Q = np.zeros((S, A))
        for s in range(S):
            for a in range(A):
                Q[s, a] = sum(p * (r + (0.0 if d else V[s2])) for p, s2, r, d in u.P[s][a])
        actions[h], V = Q.argmax(axis=1), Q.max(axis=1)
    start = int(np.argmax(u.initial_state_distrib))
    return actions, float(V[start])


def shortest(env: gym.Env, gamma: float = 0.9, sweeps: int = 200) -> np.ndarray:
    """The stationary optimal actions [S] of a toy-text env under discount γ (value
    iteration): with a goal reward, the shortest safe path."""
    u = env.unwrapped
    S, A = int(u.observation_space.n), int(u.action_space.n)
    V = np.zeros(S)
    for _ in range(sweeps):
        Q = np.array(
            [
                [sum(p * (r + (0.0 if d else gamma * V[s2])) for p, s2, r, d in u.P[s][a])
                 for a in range(A)]
                for s in range(S)
            ]
        )  # fmt: skip
        V = Q.max(axis=1)
    return Q.argmax(axis=1)


def one_hot(actions: np.ndarray, A: int) -> np.ndarray:
    return np.eye(A)[actions]


def with_absorbing(table: np.ndarray) -> np.ndarray:
    """One more state row (the absorbing state of padded episodes), acting 'up'."""
    extra = np.zeros((*table.shape[:-2], 1, table.shape[-1]))
    extra[..., 0, 3] = 1.0
    return np.concatenate([table, extra], axis=-2)


# ---------------------------------------------------------------------------------------------
# every form reaches the optimal return
# ---------------------------------------------------------------------------------------------


def test_cliffwalking_tables_in_every_shape_reach_the_optimal_return(tmp_path: Path) -> None:
    """Deterministic: the optimal return is −13 exactly (the path along the cliff's edge)."""
    actions, value = optimal("CliffWalking-v1", 20)
    assert value == -13.0
    stationary = one_hot(actions[0], 4)
    for name, table in {"hsa": one_hot(actions, 4), "sa": stationary}.items():
        np.save(tmp_path / f"{name}.npy", table)
        out = evaluate_policy(str(tmp_path / f"{name}.npy"), "CliffWalking-v1", episodes=3)
        np.testing.assert_array_equal(out.returns, -13.0)
        assert out.lengths.tolist() == [13, 13, 13] and not out.absorbing_dropped
    assert evaluate_policy(one_hot(actions, 4), "CliffWalking-v1", episodes=1).max_steps == 20


def test_an_absorbing_state_policy_plays_on_the_env_without_it(tmp_path: Path) -> None:
    """49 states for CliffWalking's 48: the learner's padded episodes had an absorbing state
    (index 48); it is dropped, and the policy still returns −13."""
    actions, _ = optimal("CliffWalking-v1", 20)
    table = with_absorbing(one_hot(actions, 4))
    assert table.shape == (20, 49, 4)
    np.save(tmp_path / "pi49.npy", table)
    npz = FiniteHorizonPolicy(table.argmax(axis=-1), 4).save(tmp_path / "policy.npz")
    for spec in (tmp_path / "pi49.npy", npz):
        out = evaluate_policy(spec, "CliffWalking-v1", episodes=2)
        np.testing.assert_array_equal(out.returns, -13.0)
        assert out.absorbing_dropped and "absorbing" in out.notes[0] and "48" in out.notes[0]


def test_a_saved_policy_npz_and_a_policy_object_on_slippery_frozenlake(tmp_path: Path) -> None:
    """Bernoulli returns: within 4 standard errors of the exact optimal value (seeded)."""
    actions, value = optimal("FrozenLake-v1", 20)
    path = FiniteHorizonPolicy(actions, 4).save(tmp_path / "policy.npz")
    for policy in (path, FiniteHorizonPolicy(actions, 4), one_hot(actions, 4)):
        out = evaluate_policy(policy, "FrozenLake-v1", episodes=400, seed=1)
        assert out.max_steps == 20 and abs(out.mean - value) < 4 * out.stderr + 1e-9


def test_user_code_and_an_env_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """module:function on non-slippery FrozenLake (a factory): the optimal path, return 1."""
    env = gym.make("FrozenLake-v1", is_slippery=False)
    _, value = optimal(env, 10)
    assert value == 1.0
    np.save(tmp_path / "best.npy", one_hot(shortest(env), 4))
    (tmp_path / "frozen_best.py").write_text(
        "import numpy as np\n"
        f"T = np.load({str(tmp_path / 'best.npy')!r})\n"
        "def probs(obs):\n    return T[np.asarray(obs, dtype=int).reshape(-1)]\n"
        "def broken(obs):\n    return np.ones((len(obs), 3))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "frozen_best", raising=False)
    factory = lambda: gym.make("FrozenLake-v1", is_slippery=False)  # noqa: E731
    out = evaluate_policy("frozen_best:probs", factory, episodes=3, max_steps=50)
    np.testing.assert_array_equal(out.returns, 1.0)
    assert out.lengths.tolist() == [6, 6, 6]
    with pytest.raises(ValueError, match=r"returned shape \(1, 3\).*\(1, 4\)"):
        evaluate_policy("frozen_best:broken", factory, episodes=1)


def test_a_context_free_table_is_the_uniform_policy(tmp_path: Path) -> None:
    """[A] = uniform on CliffWalking: stochastic, and never better than the optimum."""
    np.save(tmp_path / "u.npy", np.full(4, 0.25))
    policy = load_any_policy(tmp_path / "u.npy")
    assert policy.kind == "table" and policy.stochastic and policy.n_states is None
    out = evaluate_policy(policy, "CliffWalking-v1", episodes=5, max_steps=30)
    assert np.all(out.returns < -13.0) and np.all(out.lengths <= 30)
    again = evaluate_policy(policy, "CliffWalking-v1", episodes=5, max_steps=30)
    np.testing.assert_array_equal(out.returns, again.returns)  # same seed, same draws
    uniform = evaluate_policy("uniform", "CliffWalking-v1", episodes=5, max_steps=30)
    np.testing.assert_array_equal(uniform.returns, out.returns)  # the same π, the same draws
    with pytest.raises(ValueError, match="uniform policy needs Discrete actions"):
        evaluate_policy("uniform", "Pendulum-v1", episodes=1)
    report = policy_report(load_any_policy("uniform"), "uniform", "CliffWalking-v1")
    assert report.epsilon == np.inf and any("learned from no data" in n for n in report.notes)


# ---------------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "needles"),
    [
        ((20, 50, 4), ("S = 50", "48")),  # neither S nor S + 1
        ((47, 4), ("S = 47", "48")),
        ((48, 5), ("A = 5", "4")),
        ((5,), ("5 actions", "4")),
    ],
)
def test_a_table_for_other_spaces_is_refused(
    tmp_path: Path, shape: tuple[int, ...], needles: tuple[str, ...]
) -> None:
    np.save(tmp_path / "p.npy", np.full(shape, 1.0 / shape[-1]))
    with pytest.raises(ValueError) as info:
        evaluate_policy(tmp_path / "p.npy", "CliffWalking-v1", episodes=1)
    for needle in needles:
        assert needle in str(info.value), str(info.value)


def test_a_table_on_continuous_observations_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "p.npy", np.full((16, 2), 0.5))
    with pytest.raises(ValueError, match="needs Discrete observations"):
        evaluate_policy(tmp_path / "p.npy", "CartPole-v1", episodes=1)


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        (np.full((4, 4), 0.3), "probability distribution"),
        (np.zeros((2, 2, 2, 2)), "shape"),
        (np.array([[0, 2, 1], [3, 3, 0]]), "numpy.eye(A)[actions]"),  # actions, not π
    ],
)
def test_a_table_that_is_not_a_policy_is_refused(
    tmp_path: Path, table: np.ndarray, needle: str
) -> None:
    np.save(tmp_path / "p.npy", table)
    with pytest.raises(ValueError, match=re.escape(needle)):
        load_any_policy(tmp_path / "p.npy")


def test_an_unknown_env_id_is_a_config_error_on_env() -> None:
    with pytest.raises(ConfigError) as info:
        evaluate_policy(np.full(4, 0.25), "NoSuchEnv-v9", episodes=1)
    assert info.value.key == "env" and "NoSuchEnv-v9" in str(info.value)


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        EvalConfig(policy="p.npy", env="FrozenLake-v1", episodes=0)
    assert info.value.key == "episodes"


# ---------------------------------------------------------------------------------------------
# the report the returns inherit
# ---------------------------------------------------------------------------------------------


def _tiny_run(run: Path) -> FiniteHorizonPolicy:
    """A private report of a made-up run beside a policy.npz (what a training command writes)."""
    from dp_accounting import dp_event

    from privrl.privacy.release import Release
    from privrl.privacy.report import PrivacyReport
    from privrl.privacy.units import NeighbourRelation, PrivacyUnit

    run.mkdir(parents=True)
    noise = {"sigma": 8.0, "noise_multiplier": 4.0}
    release = Release("counts", "gaussian", 2.0, "l2", noise, event=dp_event.GaussianDpEvent(4.0))
    report = PrivacyReport.build(
        PrivacyUnit.TRAJECTORY, NeighbourRelation.REPLACE_ONE, [release], 1e-5, system="dp-apvi"
    )
    report.to_json(run / "privacy.json")
    (run / "config.json").write_text('{"system": "dp-apvi", "data": "logs.h5"}')
    actions, _ = optimal("CliffWalking-v1", 20)
    policy = FiniteHorizonPolicy(actions, 4)
    policy.save(run / "policy.npz")
    return policy


def test_a_table_has_no_report_unless_its_run_is_named(tmp_path: Path) -> None:
    """A .npy in a run directory does not take that run's report (nobody's run wrote it); the
    caller naming the run's privacy.json carries its ε over, with a note of what was checked;
    code has no report either."""
    policy = _tiny_run(tmp_path / "run")
    table = tmp_path / "run" / "pi.npy"
    np.save(table, np.eye(4)[policy.actions])
    loaded = load_any_policy(table)
    alone = policy_report(loaded, str(table), "CliffWalking-v1")
    assert not alone.private and alone.epsilon == np.inf
    assert any(n.startswith("not certified") and ".npy table" in n for n in alone.notes)
    own = policy_report(loaded, str(table), "CliffWalking-v1", tmp_path / "run" / "privacy.json")
    assert own.private and 0 < own.epsilon < np.inf
    assert own.derived_from["trained_by"] == "dp-apvi" and own.derived_from["run"] == str(
        tmp_path / "run"
    )
    assert any("checked only that it records no other" in n for n in own.notes)
    npz = load_any_policy(tmp_path / "run" / "policy.npz")
    beside = policy_report(npz, str(tmp_path / "run" / "policy.npz"), "CliffWalking-v1")
    assert beside.private and beside.epsilon == own.epsilon
    code = policy_report(load_any_policy("numpy:ones"), "numpy:ones", "CliffWalking-v1")
    assert code.epsilon == np.inf and any("module:function" in n for n in code.notes)


def test_a_named_report_of_another_policy_is_refused(tmp_path: Path) -> None:
    """An eval's own privacy.json records the SHA-256 of the policy it evaluated: naming it
    for another file is refused, naming it for the same file is accepted."""
    _tiny_run(tmp_path / "run")
    npz = str(tmp_path / "run" / "policy.npz")
    first = policy_report(load_any_policy(npz), npz, "CliffWalking-v1")
    first.to_json(tmp_path / "eval.json")
    other = tmp_path / "other.npy"
    np.save(other, np.full((48, 4), 0.25))
    with pytest.raises(ConfigError) as info:
        policy_report(load_any_policy(other), str(other), "CliffWalking-v1", tmp_path / "eval.json")
    assert info.value.key == "report" and "SHA-256" in str(info.value)
    same = policy_report(load_any_policy(npz), npz, "CliffWalking-v1", tmp_path / "eval.json")
    assert same.private and any("records the SHA-256 of this policy" in n for n in same.notes)
    assert same.derived_from["trained_by"] == "dp-apvi"  # kept from the report carried over


def test_the_object_plans_then_estimates(tmp_path: Path) -> None:
    policy = _tiny_run(tmp_path / "run")
    table = tmp_path / "pi49.npy"
    np.save(table, with_absorbing(np.eye(4)[policy.actions]))
    config = EvalConfig(policy=str(table), env="CliffWalking-v1", episodes=2)
    result = Evaluate(config, report=tmp_path / "run").estimate(seed=3)
    assert result.value == -13.0 and result.metrics["absorbing_state_dropped"] is True
    assert result.metrics["max_steps"] == 20 and result.report.private
    assert Evaluate(config).plan().public["policy_kind"] == "table"
    heard: list[tuple[str, int, int]] = []
    Evaluate(config).estimate(progress=lambda *call: heard.append(call))
    assert heard == [("rolling out", 1, 2), ("rolling out", 2, 2)]
