"""The shared target-policy resolver (privrl.ope.targets): every accepted shape gives the right
π(a|s), every bad input is refused before the data are read, with a message naming the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.offline.apvi import FiniteHorizonPolicy
from privrl.ope.stats import importance_ratios
from privrl.ope.targets import is_user_spec, load_target_policy

S, A, H = 3, 2, 4
ACT, OBS = spaces.Discrete(A), spaces.Discrete(S)


def save(tmp_path: Path, table: object, name: str = "pi.npy") -> str:
    path = tmp_path / name
    np.save(path, np.asarray(table))
    return str(path)


def test_a_stationary_table_is_indexed_by_state(tmp_path: Path) -> None:
    table = np.array([[0.2, 0.8], [1.0, 0.0], [0.5, 0.5]])
    pi = load_target_policy(save(tmp_path, table), ACT, OBS)
    np.testing.assert_allclose(pi.probs(np.array([2, 0, 1])), table[[2, 0, 1]])
    assert not pi.time_indexed


def test_a_time_indexed_table_is_indexed_by_step_and_state(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    table = rng.dirichlet(np.ones(A), size=(H, S))
    pi = load_target_policy(save(tmp_path, table), ACT, OBS, horizon=H)
    assert pi.time_indexed and pi.horizon == H
    obs, steps = np.array([0, 1, 2, 1]), np.array([0, 3, 1, 2])
    np.testing.assert_allclose(pi.probs(obs, steps), table[steps, obs])


def test_a_space_with_a_start_offset(tmp_path: Path) -> None:
    table = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
    pi = load_target_policy(save(tmp_path, table), ACT, spaces.Discrete(S, start=10))
    np.testing.assert_allclose(pi.probs(np.array([[10], [11]])), table[[0, 1]])


def test_a_saved_privrl_tabular_policy(tmp_path: Path) -> None:
    """policy.npz of privrl train dp-apvi: greedy actions [H, S] → a one-hot [H, S, A]."""
    actions = np.array([[0, 1, 1], [1, 1, 0], [0, 0, 0], [1, 0, 1]])
    path = FiniteHorizonPolicy(actions, A, {"algorithm": "dp-apvi"}).save(tmp_path / "policy.npz")
    pi = load_target_policy(str(path), ACT, OBS, horizon=H)
    h, s = np.array([0, 1, 3, 2]), np.array([1, 2, 0, 1])
    np.testing.assert_array_equal(pi.probs(s, h), np.eye(A)[actions[h, s]])


def test_time_indexed_importance_ratios_use_the_step(tmp_path: Path) -> None:
    """GPOPE/LSTD's ρ_t = π_h(a_t|s_t)/μ_t with h the step of transition t."""
    from privrl.data.dataset import DatasetMetadata, TrajectoryDataset

    table = np.zeros((2, S, A))
    table[0, :, 0] = 1.0  # step 0: action 0
    table[1, :, 1] = 1.0  # step 1: action 1
    pi = load_target_policy(save(tmp_path, table), ACT, OBS, horizon=2)
    data = TrajectoryDataset(
        observations=np.array([0, 1, 2]),
        actions=np.array([0, 1]),
        rewards=np.zeros(2),
        terminated=np.array([False, True]),
        truncated=np.zeros(2, bool),
        episode_offsets=np.array([0, 2]),
        behaviour_probs=np.array([0.5, 0.25]),
        metadata=DatasetMetadata(observation_space=OBS, action_space=ACT),
    )
    np.testing.assert_allclose(importance_ratios(data, pi), [2.0, 4.0])


def test_module_function_and_uniform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mypi.py").write_text(
        "import numpy as np\ndef probs(obs):\n    return np.tile([0.25, 0.75], (len(obs), 1))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mypi", raising=False)
    pi = load_target_policy("mypi:probs", ACT, OBS)
    np.testing.assert_allclose(pi.probs(np.zeros(3)), [[0.25, 0.75]] * 3)
    u = load_target_policy("uniform", ACT, OBS)
    np.testing.assert_allclose(u.action_probs(np.zeros(2)), 0.5)


def test_which_specs_are_the_users() -> None:
    for spec in ("pi.npy", "run/policy.npz", "pkg.mod:fn"):
        assert is_user_spec(spec)
    for spec in ("uniform", "target", "greedy", "softmax:0.5", "epsilon-greedy:0.1"):
        assert not is_user_spec(spec)


def _npz_of_another_kind(tmp_path: Path) -> str:
    path = tmp_path / "other.npz"
    np.savez(path, kind=np.array("privrl.linear_greedy_q"), q=np.zeros(2))
    return str(path)


def _npz_wrong_actions(tmp_path: Path) -> str:
    return str(FiniteHorizonPolicy(np.zeros((H, S), int), A + 1).save(tmp_path / "p3.npz"))


BAD = [
    ("wrong S", lambda p: save(p, np.full((S + 1, A), 0.5)), "does not match the declared"),
    ("wrong A", lambda p: save(p, np.full((S, A + 1), 1 / 3)), "does not match the declared"),
    ("context-free wrong A", lambda p: save(p, [1.0]), f"shape ({A},)"),
    ("not a distribution", lambda p: save(p, np.full((S, A), 0.4)), "probability distribution"),
    ("negative", lambda p: save(p, [[1.5, -0.5]] * S), "probability distribution"),
    ("nan", lambda p: save(p, [[np.nan, 1.0]] * S), "NaN"),
    ("4-d", lambda p: save(p, np.full((1, H, S, A), 0.5)), "shape"),
    ("[H, S, A] without a horizon", lambda p: save(p, np.full((H, S, A), 0.5)), "`max_horizon="),
    ("missing file", lambda p: str(p / "nope.npy"), "no such file"),
    ("not numeric", lambda p: save(p, np.array(["a", "b"])), "not a numeric array"),
    ("not npy", lambda p: (p / "x.npy").write_text("hello") and str(p / "x.npy"), "cannot read"),
    ("npz of another kind", _npz_of_another_kind, "not a saved privrl tabular policy"),
    ("npz with other actions", _npz_wrong_actions, "actions"),
    ("unknown module", lambda p: "no_such_module_xyz:f", "cannot import"),
    ("a dataset column", lambda p: "column:pi_taken", "needs π(a|s) for every action"),
    ("gibberish", lambda p: "greedy-ish", "not understood"),
]


@pytest.mark.parametrize("make, needle", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_target_policies_are_refused_with_the_fix(tmp_path: Path, make, needle: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        load_target_policy(make(tmp_path), ACT, OBS)
    assert needle in str(info.value)


def test_a_time_indexed_table_must_match_the_declared_horizon(tmp_path: Path) -> None:
    path = save(tmp_path, np.full((H, S, A), 0.5))
    with pytest.raises(ValueError, match=f"declared horizon is {H + 1}"):
        load_target_policy(path, ACT, OBS, horizon=H + 1)


def test_a_per_state_table_needs_a_discrete_observation_space(tmp_path: Path) -> None:
    box = spaces.Box(0.0, 1.0, (2,))
    with pytest.raises(ValueError, match="not a public Discrete space"):
        load_target_policy(save(tmp_path, np.full((S, A), 0.5)), ACT, box)
    with pytest.raises(ValueError, match="Discrete action space"):
        load_target_policy("uniform", box, OBS)


def test_refusals_name_the_field_not_a_flag(tmp_path: Path) -> None:
    """From Python a refused target policy is a `ConfigError` on `target_policy` (the spec
    first); a fix that is another setting is written as that field, a fix that belongs to the
    import as the import command's flag."""
    from privrl.config import ConfigError

    path = save(tmp_path, np.full((H, S, A), 0.5))
    with pytest.raises(ConfigError) as info:
        load_target_policy(path, ACT, OBS)
    assert info.value.key == "target_policy" and info.value.problem.startswith(path)
    assert "pass `max_horizon=" in info.value.problem and "--" not in info.value.problem
    box = spaces.Box(0.0, 1.0, (2,))
    with pytest.raises(ConfigError, match="privrl data import --observation-space discrete:S"):
        load_target_policy(save(tmp_path, np.full((S, A), 0.5)), ACT, box)
