"""Every validation rule rejects bad data with a message naming episode, step and field.

Base data: 4 episodes of lengths 3, 2, 4, 1 (offsets 0, 3, 5, 9, 10): transition row 6 is
episode 2, step 1; observation rows are located with ``obs_row`` (each episode stores one
more observation than it has transitions).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from gymnasium import spaces

from privrl.data import DatasetError, DatasetMetadata, TrajectoryDataset

OFFSETS = np.array([0, 3, 5, 9, 10])
N_T, N_EP = 10, 4


def fields(discrete_obs: bool = False, box_actions: bool = False) -> dict:
    rng = np.random.default_rng(0)
    term = np.zeros(N_T, bool)
    trunc = np.zeros(N_T, bool)
    term[OFFSETS[1:] - 1] = [True, False, True, False]
    trunc[OFFSETS[1:] - 1] = [False, True, False, False]  # episode 3 ends unflagged (cut)
    if discrete_obs:
        obs = rng.integers(0, 5, N_T + N_EP)
        obs_space = spaces.Discrete(5)
    else:
        obs = rng.normal(size=(N_T + N_EP, 3)).astype(np.float32)
        obs_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
    if box_actions:
        act = rng.uniform(-1, 1, size=(N_T, 2)).astype(np.float32)
        act_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    else:
        act = rng.integers(0, 3, N_T)
        act_space = spaces.Discrete(3)
    return {
        "observations": obs,
        "actions": act,
        "rewards": rng.normal(size=N_T),
        "terminated": term,
        "truncated": trunc,
        "episode_offsets": OFFSETS.copy(),
        "behaviour_probs": np.full(N_T, 0.5),
        "unit_ids": np.array([7, 7, 8, 9]),
        "metadata": DatasetMetadata(obs_space, act_space),
    }


def obs_row(episode: int, step: int) -> int:
    return int(OFFSETS[episode]) + episode + step


def check(f: dict, episode: int, step: int | str, field: str) -> str:
    """Construction fails and the message names the given episode, step and field."""
    with pytest.raises(DatasetError) as info:
        TrajectoryDataset(**f)
    msg = str(info.value)
    assert f"episode {episode}," in msg, msg
    assert re.search(rf"step {step}\b", msg), msg
    assert field in msg, msg
    return msg


def test_valid_base_data_is_accepted() -> None:
    ds = TrajectoryDataset(**fields())
    assert ds.n_episodes == N_EP and ds.n_transitions == N_T
    TrajectoryDataset(**fields(discrete_obs=True, box_actions=True))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_observation(bad: float) -> None:
    f = fields()
    f["observations"][obs_row(2, 1), 1] = bad
    check(f, 2, 1, "observations")


def test_non_finite_final_observation_is_called_final() -> None:
    f = fields()
    f["observations"][obs_row(1, 2), 0] = np.nan  # episode 1 has 2 steps: row 2 is final
    msg = check(f, 1, 2, "observations")
    assert "final observation" in msg


def test_non_finite_action_reward_and_prob() -> None:
    f = fields(box_actions=True)
    f["actions"][6, 0] = np.nan
    check(f, 2, 1, "actions")
    f = fields()
    f["rewards"][4] = np.inf
    check(f, 1, 1, "rewards")
    f = fields()
    f["behaviour_probs"][9] = np.nan
    check(f, 3, 0, "behaviour_probs")


@pytest.mark.parametrize("p", [0.0, -0.1, 1.5])
def test_probability_outside_unit_interval(p: float) -> None:
    f = fields()
    f["behaviour_probs"][7] = p
    msg = check(f, 2, 2, "behaviour_probs")
    assert "(0, 1]" in msg


def test_probability_one_is_allowed() -> None:
    f = fields()
    f["behaviour_probs"][:] = 1.0
    TrajectoryDataset(**f)


def test_discrete_action_out_of_range() -> None:
    for value in (3, -1):
        f = fields()
        f["actions"][5] = value
        check(f, 2, 0, "actions")


def test_discrete_action_start_offset() -> None:
    f = fields()
    f["actions"] = f["actions"] + 1
    f["metadata"] = DatasetMetadata(f["metadata"].observation_space, spaces.Discrete(3, start=1))
    TrajectoryDataset(**f)
    f["actions"][2] = 0
    check(f, 0, 2, "actions")


def test_box_action_outside_bounds() -> None:
    f = fields(box_actions=True)
    f["actions"][8, 1] = 1.01
    check(f, 2, 3, "actions")


def test_discrete_observation_outside_space() -> None:
    f = fields(discrete_obs=True)
    f["observations"][obs_row(3, 1)] = 5
    msg = check(f, 3, 1, "observations")
    assert "final observation" in msg


def test_float_observations_with_discrete_space_rejected() -> None:
    f = fields(discrete_obs=True)
    f["observations"] = f["observations"].astype(float)
    with pytest.raises(DatasetError, match=r"observations.*integers"):
        TrajectoryDataset(**f)


def test_shape_mismatch_with_space() -> None:
    f = fields()
    f["observations"] = f["observations"][:, :2]
    with pytest.raises(DatasetError, match=r"observations.*shape"):
        TrajectoryDataset(**f)


@pytest.mark.parametrize(
    "name", ["actions", "rewards", "terminated", "truncated", "behaviour_probs"]
)
def test_transition_field_too_short(name: str) -> None:
    f = fields()
    f[name] = f[name][:-2]
    # row 8 is missing: episode 2, step 3
    msg = check(f, 2, 3, name)
    assert "expected 10" in msg


def test_transition_field_too_long() -> None:
    f = fields()
    f["rewards"] = np.concatenate([f["rewards"], [0.0]])
    msg = check(f, 3, "end", "rewards")
    assert "extra rows" in msg


def test_observations_missing_final_rows() -> None:
    f = fields()
    f["observations"] = f["observations"][:N_T]  # forgot the final observations
    msg = check(f, 2, 3, "observations")  # row 10 is episode 2, step 3
    assert "expected 14" in msg and "final observation" in msg  # the rule is explained


def test_empty_episode() -> None:
    f = fields()
    f["episode_offsets"] = np.array([0, 3, 3, 5, 9, 10])
    f["unit_ids"] = None
    msg = check(f, 1, 0, "episode_offsets")
    assert "empty episode" in msg


def test_offsets_not_starting_at_zero() -> None:
    f = fields()
    f["episode_offsets"] = np.array([1, 3, 5, 9, 10])
    check(f, 0, 0, "episode_offsets")


def test_offsets_not_monotone() -> None:
    f = fields()
    f["episode_offsets"] = np.array([0, 6, 5, 9, 10])
    msg = check(f, 1, 0, "episode_offsets")
    assert "monotone" in msg


def test_offsets_not_ending_at_n_transitions() -> None:
    f = fields()
    f["episode_offsets"] = np.array([0, 3, 5, 9, 11])
    check(f, 3, 1, "actions")  # offsets claim 11 transitions, actions have 10


def test_both_flags_at_one_step() -> None:
    f = fields()
    f["truncated"][2] = True  # episode 0 is already terminated at its last step 2
    msg = check(f, 0, 2, "terminated/truncated")
    assert "both" in msg


@pytest.mark.parametrize("name", ["terminated", "truncated"])
def test_flag_before_last_step(name: str) -> None:
    f = fields()
    f[name][6] = True
    msg = check(f, 2, 1, name)
    assert "before the episode's last step" in msg


def test_unflagged_final_step_is_allowed() -> None:
    f = fields()
    f["terminated"][:] = False
    f["truncated"][:] = False
    ds = TrajectoryDataset(**f)
    assert ds.summary()["n_unflagged_ends"] == N_EP


def test_non_binary_flags_rejected() -> None:
    f = fields()
    f["terminated"] = f["terminated"].astype(np.int64)
    TrajectoryDataset(**f)  # 0/1 integers are fine
    f["terminated"][4] = 2
    check(f, 1, 1, "terminated")


def test_unit_ids_length_mismatch() -> None:
    f = fields()
    f["unit_ids"] = np.array([1, 2, 3])
    with pytest.raises(DatasetError, match=r"unit_ids.*\(4,\)") as info:
        TrajectoryDataset(**f)
    assert "episode" in str(info.value) and "step" in str(info.value)


def test_float_unit_ids_rejected() -> None:
    f = fields()
    f["unit_ids"] = np.array([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(DatasetError, match="unit_ids"):
        TrajectoryDataset(**f)


def test_error_counts_all_offending_rows() -> None:
    f = fields()
    f["rewards"][[1, 4, 8]] = np.nan
    msg = check(f, 0, 1, "rewards")
    assert "3 offending rows" in msg


def test_error_attributes_locate_the_problem() -> None:
    f = fields()
    f["actions"][7] = 9
    with pytest.raises(DatasetError) as info:
        TrajectoryDataset(**f)
    assert (info.value.episode, info.value.step, info.value.field) == (2, "2", "actions")


def test_validate_false_skips_checks_and_validate_reruns_them() -> None:
    f = fields()
    f["actions"][0] = 99
    ds = TrajectoryDataset(**f, validate=False)
    with pytest.raises(DatasetError, match="actions"):
        ds.validate()


def test_metadata_rules() -> None:
    with pytest.raises(DatasetError, match="discount"):
        DatasetMetadata(discount=1.5)
    with pytest.raises(DatasetError, match="JSON"):
        DatasetMetadata(extra={"x": object()})
    with pytest.raises(DatasetError, match="horizon"):
        DatasetMetadata(horizon=0)


def _dataset_kwargs(n_ep: int, length: int) -> dict:
    rng = np.random.default_rng(0)
    n_t = n_ep * length
    offsets = np.arange(n_ep + 1, dtype=np.int64) * length
    term = np.zeros(n_t, bool)
    term[offsets[1:] - 1] = True
    return {
        "observations": rng.standard_normal((n_t + n_ep, 17), dtype=np.float32),
        "actions": rng.uniform(-1, 1, (n_t, 6)).astype(np.float32),
        "rewards": rng.standard_normal(n_t),
        "terminated": term,
        "truncated": np.zeros(n_t, bool),
        "episode_offsets": offsets,
        "behaviour_probs": np.full(n_t, 0.5),
        "metadata": DatasetMetadata(
            spaces.Box(-np.inf, np.inf, (17,), np.float32), spaces.Box(-1, 1, (6,), np.float32)
        ),
    }


def _python_calls(fn: object) -> int:
    """How many Python-level function calls `fn()` makes (a deterministic count)."""
    import sys

    calls = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(profile)
    try:
        fn()  # type: ignore[operator]
    finally:
        sys.setprofile(None)
    return calls


def test_validation_is_vectorised_over_episodes_and_rows() -> None:
    """Vectorised validation: the Python work of validating a dataset does not grow with its
    episodes or rows (no Python loop over them), so 1M transitions validate in numpy time.
    Counted in Python calls, not seconds (no test asserts wall-clock time)."""
    small, large = _dataset_kwargs(10, 5), _dataset_kwargs(2000, 50)
    TrajectoryDataset(**small)  # warm up (imports, caches)
    n_small = _python_calls(lambda: TrajectoryDataset(**small))
    n_large = _python_calls(lambda: TrajectoryDataset(**large))
    assert n_small > 0
    assert n_large == n_small, (n_small, n_large)
