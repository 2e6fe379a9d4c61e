"""A user's target policy (`--target-policy module:function`) is checked on public inputs
before the data are read, and on private observations a failure is handled by one public rule
(the uniform fallback for that observation), so a run never reveals whether, or for which
record, the user's code failed."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.data.dataset import DatasetMetadata
from privrl.ope.targets import FALLBACK_NOTE, load_target_policy, public_points
from tests.neighbours import Pair, assert_same_publication, dataset, episode, run_side
from tests.privacy.test_neighbour_diff import BANDIT_LINES

ACT = spaces.Discrete(2)
BOX = spaces.Box(-1.0, 1.0, (1,))
SECRET = 0.5  # a private value no public point hits (uniform draws, the bounds ±1)

USER_CODE = f"""
import sys
import warnings

import numpy as np


def _x(obs):
    return np.asarray(obs, dtype=float).reshape(len(obs), -1)[:, 0]


def raises(obs):
    x = _x(obs)
    if np.any(x == {SECRET}):
        raise RuntimeError("record with x = {SECRET}")
    return np.tile([0.2, 0.8], (len(obs), 1))


def invalid(obs):
    x = _x(obs)
    out = np.tile([0.2, 0.8], (len(obs), 1))
    out[x == {SECRET}] = [np.nan, -1.0]
    if np.any(x == {SECRET}):
        print("saw the secret record")
        warnings.warn("secret record")
    return out


def exits(obs):
    if np.any(_x(obs) == {SECRET}):
        sys.exit(3)
    return np.tile([0.2, 0.8], (len(obs), 1))


def state_two_fails(obs):
    if np.any(np.asarray(obs) == 2):
        raise KeyError(2)
    return np.full((len(obs), 2), 0.5)


def unnormalised(obs):
    return np.ones((len(obs), 2))


def batch_softmax(obs):
    z = np.exp(_x(obs) - _x(obs).mean())
    p = z / (1.0 + z)
    return np.stack([p, 1.0 - p], axis=1)
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "user_pi.py").write_text(USER_CODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_pi", raising=False)
    return "user_pi"


def test_public_points_cover_the_declared_space() -> None:
    """Every state of a small Discrete space; for a Box, its bounds and draws inside it (a
    fixed public seed: the same points every time)."""
    assert public_points(spaces.Discrete(4, start=1)).tolist() == [1, 2, 3, 4]
    box = public_points(BOX)
    assert box.dtype == np.float64 and box.shape[1:] == (1,) and len(box) > 100
    assert box[0, 0] == -1.0 and box[1, 0] == 1.0 and np.all(np.abs(box) <= 1.0)
    assert np.array_equal(box, public_points(BOX)) and SECRET not in box


@pytest.mark.parametrize(
    ("fn", "space", "needle"),
    [
        ("state_two_fails", spaces.Discrete(3), "raised KeyError"),
        ("unnormalised", BOX, "is not a distribution"),
        ("batch_softmax", BOX, "alone gets other probabilities"),
    ],
)
def test_user_code_that_fails_on_public_points_is_refused_before_the_data(
    user_module: str, fn: str, space: spaces.Space, needle: str
) -> None:
    """Raising on a state of the declared space, rows that are not distributions, and rows
    that depend on the rest of the batch are refused at load (the inputs are public), naming
    the failure."""
    with pytest.raises(ValueError, match="on public points") as info:
        load_target_policy(f"{user_module}:{fn}", ACT, space)
    assert needle in str(info.value)


def test_user_code_needs_a_declared_observation_space(user_module: str) -> None:
    with pytest.raises(ValueError, match="declared observation space"):
        load_target_policy(f"{user_module}:raises", ACT, None)


@pytest.mark.parametrize("fn", ["raises", "invalid", "exits"])
def test_a_failure_on_a_private_observation_is_the_uniform_fallback(
    user_module: str, fn: str, capsys: pytest.CaptureFixture[str], recwarn
) -> None:
    """The observation the code raises on, exits on or gives an invalid row (NaN, negative)
    gets 1/A; every other row keeps its probabilities; nothing is raised, printed or warned."""
    pi = load_target_policy(f"{user_module}:{fn}", ACT, BOX)
    assert pi.fallback == FALLBACK_NOTE
    obs = np.array([[0.1], [SECRET], [-0.3], [0.9]])
    got = pi.probs(obs)
    np.testing.assert_allclose(got, [[0.2, 0.8], [0.5, 0.5], [0.2, 0.8], [0.2, 0.8]])
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert len(recwarn) == 0


def _logs(pair: Pair) -> None:
    """D: 40 one-step rows with Box contexts (never x = 0.5); D′: the first row replaced by
    one with x = 0.5, on which the user's code fails."""
    rng = np.random.default_rng(2)
    meta = DatasetMetadata(observation_space=BOX, action_space=ACT)
    rows = [
        episode([[x], [x]], [int(a)], [float(r)], behaviour_probs=[0.5])
        for x, a, r in zip(
            rng.uniform(-0.4, 0.4, 40), rng.integers(0, 2, 40), rng.random(40), strict=True
        )
    ]
    secret = episode([[SECRET], [SECRET]], [1], [1.0], behaviour_probs=[0.5])
    pair.save(dataset(rows, meta), dataset([secret, *rows[1:]], meta))


@pytest.mark.parametrize("fn", ["raises", "invalid"])
def test_neighbours_publish_the_same_when_the_code_fails_on_one_record(
    user_module: str,
    fn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`ope ips` with a user's code that fails on one record of D′ only: both runs finish,
    and everything published outside the noisy releases is identical (exit code, console,
    config.json, privacy.json, file names); privacy.json names the fallback."""
    import json

    monkeypatch.setenv("COLUMNS", "400")
    pair = Pair(tmp_path)
    _logs(pair)
    argv = [
        "ope", "ips", "--data", "{data}", "--target-policy", f"{user_module}:{fn}",
        "--reward-range", "0,1", "--weight-clip", "10", "--max-horizon", "1",
        "--epsilon", "1", "--out", "{out}", "--seed", "1",
    ]  # fmt: skip
    a, b = run_side(argv, pair.a, capsys), run_side(argv, pair.b, capsys)
    assert a.code == 0 and b.code == 0, (a.stderr, b.stderr)
    assert_same_publication(
        fn,
        a,
        b,
        pair.dirs(),
        released_metrics={"value", "value_ci_low", "value_ci_high"},
        released_lines=(r"value of .* CI \[", BANDIT_LINES[1]),
    )
    privacy = json.loads((pair.b / "run" / "privacy.json").read_text())
    target = [p for p in privacy["public_parameters"] if p["name"] == "target policy π"]
    assert target and "uniform distribution" in target[0]["detail"]
