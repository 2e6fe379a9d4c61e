"""`privrl eval POLICY --env ID`: a saved privrl policy rolled out in a Gymnasium environment.

Checks: a tabular policy's Monte-Carlo return agrees with its exact value (dynamic
programming on the simulator); the run directory holds metrics.json (return_mean,
return_std), one metrics.csv row per episode and a privacy.json that spends nothing; SAC
and discrete CQL checkpoints load and act; every bad input is one `error:` line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privrl.cli.main import main
from privrl.offline.apvi import FiniteHorizonPolicy


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_bad_input(code: int, err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def frozenlake_optimal(H: int) -> tuple[np.ndarray, float]:
    """The optimal H-step actions [H, S] on FrozenLake-v1 and their exact value."""
    import gymnasium as gym

    u = gym.make("FrozenLake-v1").unwrapped
    S, A = 16, 4
    V = np.zeros(S)
    actions = np.zeros((H, S), dtype=np.int64)
    for h in range(H - 1, -1, -1):
        Q = np.zeros((S, A))
        for s in range(S):
            for a in range(A):
                Q[s, a] = sum(p * (r + (0.0 if d else V[s2])) for p, s2, r, d in u.P[s][a])
        actions[h], V = Q.argmax(axis=1), Q.max(axis=1)
    return actions, float(V[0])


@pytest.fixture(scope="module")
def tabular(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    actions, v = frozenlake_optimal(20)
    path = tmp_path_factory.mktemp("pol") / "policy.npz"
    FiniteHorizonPolicy(actions, 4).save(path)
    return path, v


def test_tabular_policy_return_matches_its_exact_value(
    tabular: tuple[Path, float], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, exact = tabular
    out = tmp_path / "ev"
    code, stdout, err = run(
        ["eval", str(path), "--env", "FrozenLake-v1", "--episodes", "400", "--out", str(out)],
        capsys,
    )
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["max_steps"] == 20 and metrics["episodes"] == 400
    # Bernoulli returns: 4 standard errors is a loose, non-flaky band (seeded anyway).
    assert abs(metrics["return_mean"] - exact) < 4 * metrics["return_stderr"] + 1e-9
    assert metrics["return_std"] > 0
    assert len((out / "metrics.csv").read_text().strip().splitlines()) == 1 + 400
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["releases"] == [] and privacy["epsilon"] == 0.0
    assert (out / "plots" / "returns.png").is_file()
    assert "return:" in stdout


def test_same_seed_same_returns_and_no_files_without_out(
    tabular: tuple[Path, float], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path, _ = tabular
    argv = ["eval", str(path), "--env", "FrozenLake-v1", "--episodes", "50", "--seed", "3"]
    a = run(argv, capsys)
    b = run(argv, capsys)
    assert a[0] == b[0] == 0 and a[1] == b[1]
    assert list(tmp_path.iterdir()) == []


def test_a_policy_that_never_moves_right_scores_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Always 'left' can slip up or down but never right: the goal (column 3) is never
    reached, so every return is exactly 0."""
    path = FiniteHorizonPolicy(np.zeros((30, 16), dtype=np.int64), 4).save(tmp_path / "p.npz")
    out = tmp_path / "ev"
    code, _, err = run(
        ["eval", str(path), "--env", "FrozenLake-v1", "-n", "30", "--out", str(out)], capsys
    )
    assert code == 0, err
    assert json.loads((out / "metrics.json").read_text())["return_mean"] == 0.0


def test_sac_checkpoint_loads_and_acts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from privrl.rl.sac import SAC, SACConfig

    agent = SAC(3, 1, [-2.0], [2.0], SACConfig(hidden=(8, 8)))
    torch.save(agent.state_dict(), tmp_path / "policy.pt")
    out = tmp_path / "ev"
    argv = ["eval", str(tmp_path / "policy.pt"), "--env", "Pendulum-v1", "-n", "2"]
    code, _, err = run([*argv, "--max-steps", "5", "--out", str(out)], capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["policy_kind"] == "sac" and metrics["length_mean"] == 5
    assert metrics["return_mean"] <= 0  # Pendulum's rewards are ≤ 0


@pytest.mark.parametrize("algorithm", ["cql", "bcq"])
def test_discrete_learner_checkpoint_loads_and_acts(
    algorithm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from privrl.rl.bcq import DiscreteBCQ
    from privrl.rl.cql import DiscreteCQL

    cls = DiscreteCQL if algorithm == "cql" else DiscreteBCQ
    learner = cls(4, 2, hidden=(8,))
    torch.save(learner.state_dict(), tmp_path / "learner.pt")
    out = tmp_path / "ev"
    argv = ["eval", str(tmp_path / "learner.pt"), "--env", "CartPole-v1", "-n", "3"]
    code, _, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["policy_kind"] == algorithm and metrics["return_mean"] >= 1


def test_checkpoint_for_other_spaces_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from privrl.rl.cql import DiscreteCQL

    torch.save(DiscreteCQL(4, 2, hidden=(8,)).state_dict(), tmp_path / "learner.pt")
    code, _, err = run(["eval", str(tmp_path / "learner.pt"), "--env", "Acrobot-v1"], capsys)
    assert_bad_input(code, err, "4-dim observations", "6")


# ---------------------------------------------------------------------------------------------
# bad input: one error line, exit 2
# ---------------------------------------------------------------------------------------------


def test_missing_policy_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["eval", str(tmp_path / "nope.npz"), "--env", "FrozenLake-v1"], capsys)
    assert_bad_input(code, err, "policy file not found", "policy.npz")


def test_unknown_env(tabular: tuple[Path, float], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["eval", str(tabular[0]), "--env", "NoSuchEnv-v9"], capsys)
    assert_bad_input(code, err, "unknown --env", "NoSuchEnv-v9")


def test_policy_of_the_wrong_size(
    tabular: tuple[Path, float], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["eval", str(tabular[0]), "--env", "CliffWalking-v1"], capsys)
    assert_bad_input(code, err, "S = 16", "48")


def test_tabular_policy_on_a_continuous_env(
    tabular: tuple[Path, float], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["eval", str(tabular[0]), "--env", "Pendulum-v1"], capsys)
    assert_bad_input(code, err, "Discrete")


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("x.npz", None, "not a privrl policy"),
        ("x.pt", b"not a checkpoint", "cannot read"),
        ("x.txt", b"hello", "unknown policy file"),
    ],
)
def test_files_that_are_not_policies(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: bytes | None,
    fragment: str,
) -> None:
    path = tmp_path / name
    if content is None:
        np.savez(path, a=np.zeros(3))
    else:
        path.write_bytes(content)
    code, _, err = run(["eval", str(path), "--env", "FrozenLake-v1"], capsys)
    assert_bad_input(code, err, fragment)


def test_bad_episode_count(tabular: tuple[Path, float], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["eval", str(tabular[0]), "--env", "FrozenLake-v1", "-n", "0"], capsys)
    assert_bad_input(code, err, "episodes")
