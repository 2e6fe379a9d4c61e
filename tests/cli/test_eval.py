"""`privrl eval POLICY --env ID`: a saved privrl policy rolled out in a Gymnasium environment.

Checks: a tabular policy's Monte-Carlo return agrees with its exact value (dynamic
programming on the simulator); the run directory holds metrics.json (return_mean,
return_std), one metrics.csv row per episode and a privacy.json that carries the policy's own
report over (a private run's ε, δ and releases; ε = ∞ for a non-private run's policy or one
with no report beside it); SAC
and discrete CQL checkpoints load and act; every bad input is one `error:` line, exit 2.
"""

from __future__ import annotations

import json
import math
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
    privacy = json.loads((out / "privacy.json").read_text())  # no run directory: uncertified
    assert privacy["releases"] == [] and privacy["epsilon"] == "inf"
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
    assert_bad_input(code, err, "--env 'NoSuchEnv-v9' is unknown", "not a registered Gymnasium")


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
        ("lin.npz", "privrl.linear_greedy_q", "linear-MDP policy"),
    ],
)
def test_files_that_are_not_policies(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: bytes | str | None,
    fragment: str,
) -> None:
    path = tmp_path / name
    if content is None:
        np.savez(path, a=np.zeros(3))
    elif isinstance(content, str):  # an .npz of another privrl kind
        np.savez(path, kind=np.array(content), theta=np.zeros(3))
    else:
        path.write_bytes(content)
    code, _, err = run(["eval", str(path), "--env", "FrozenLake-v1"], capsys)
    assert_bad_input(code, err, fragment)


def test_bad_episode_count(tabular: tuple[Path, float], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["eval", str(tabular[0]), "--env", "FrozenLake-v1", "-n", "0"], capsys)
    assert_bad_input(code, err, "episodes")


# ---------------------------------------------------------------------------------------------
# privacy.json: the policy's own report, carried over by post-processing
# ---------------------------------------------------------------------------------------------


def _train(command: str, out: Path, capsys: pytest.CaptureFixture[str], *privacy: str) -> dict:
    """A tabular run on a simulated 16-state, 4-action MDP (FrozenLake's sizes)."""
    argv = ["train", command, "--env", "random-tabular", "--episodes", "300", "--states", "16",
            "--actions", "4", "--horizon", "4", *privacy, "--out", str(out)]  # fmt: skip
    code, _, err = run(argv, capsys)
    assert code == 0, err
    return json.loads((out / "privacy.json").read_text())


def _eval(policy: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    argv = ["eval", str(policy), "--env", "FrozenLake-v1", "-n", "5", "--out", str(out)]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    return json.loads((out / "privacy.json").read_text())


def test_a_private_policy_keeps_its_runs_guarantee(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Evaluation is post-processing: its privacy.json states the training run's ε, δ, unit,
    relation and releases (not ε = 0), names the policy (and its bytes) and the run's data
    source, and says that the evaluation itself spends nothing."""
    from privrl.privacy.ledger import fingerprint

    own = _train("dp-apvi", tmp_path / "train", capsys, "--rho", "0.5")
    assert own["private"] and 0 < own["epsilon"] < math.inf
    got = _eval(tmp_path / "train" / "policy.npz", tmp_path / "ev", capsys)
    for key in ("unit", "relation", "epsilon", "delta", "rho", "accountant", "releases"):
        assert got[key] == own[key], key
    assert got["private"] is True and got["certified"] is True and got["system"] == "eval"
    origin = got["derived_from"]
    assert origin["policy_sha256"] == fingerprint(tmp_path / "train" / "policy.npz")
    assert origin["run"] == str(tmp_path / "train") and origin["trained_by"] == "dp-apvi"
    assert origin["trained_env"] == "random-tabular"
    assert any("spends nothing" in note for note in got["notes"])


def test_a_non_private_or_unreported_policy_is_not_certified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """train apvi's policy (its run: ε = ∞), the same file moved out of its run directory,
    and one beside an unreadable privacy.json: ε = ∞, certified false, and a note says why."""
    import shutil

    assert _train("apvi", tmp_path / "np", capsys)["epsilon"] == "inf"
    cases = {"not private": tmp_path / "np" / "policy.npz"}
    (tmp_path / "alone").mkdir()
    cases["no privacy.json"] = tmp_path / "alone" / "policy.npz"
    shutil.copyfile(cases["not private"], cases["no privacy.json"])
    shutil.copytree(tmp_path / "np", tmp_path / "bad")
    (tmp_path / "bad" / "privacy.json").write_text("{not json")
    cases["not a readable privacy report"] = tmp_path / "bad" / "policy.npz"
    for i, (why, policy) in enumerate(cases.items()):
        got = _eval(policy, tmp_path / f"ev{i}", capsys)
        assert got["epsilon"] == "inf" and got["private"] is False, why
        assert got["certified"] is False, why
        assert any(note.startswith("not certified") and why in note for note in got["notes"]), (
            why,
            got["notes"],
        )


# ---------------------------------------------------------------------------------------------
# every policy form: tables, code, checkpoint modes, the absorbing state
# ---------------------------------------------------------------------------------------------


def _metrics_and_privacy(out: Path) -> tuple[dict, dict]:
    return (
        json.loads((out / "metrics.json").read_text()),
        json.loads((out / "privacy.json").read_text()),
    )


def test_a_npy_table_is_evaluated_and_not_certified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The optimal [H, S, A] table of FrozenLake-v1 as a plain .npy: its return agrees with
    the exact value; privacy.json says ε = ∞ and why (no run's report is taken for a table)."""
    from privrl.privacy.ledger import fingerprint

    actions, exact = frozenlake_optimal(20)
    np.save(tmp_path / "pi.npy", np.eye(4)[actions])
    out = tmp_path / "ev"
    argv = ["eval", str(tmp_path / "pi.npy"), "--env", "FrozenLake-v1", "-n", "400"]
    code, _, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    metrics, privacy = _metrics_and_privacy(out)
    assert metrics["policy_kind"] == "table" and metrics["max_steps"] == 20
    assert abs(metrics["return_mean"] - exact) < 4 * metrics["return_stderr"] + 1e-9
    assert privacy["epsilon"] == "inf" and privacy["certified"] is False
    assert any(n.startswith("not certified") and ".npy table" in n for n in privacy["notes"])
    assert privacy["derived_from"]["policy_sha256"] == fingerprint(tmp_path / "pi.npy")
    code, stdout, err = run(argv, capsys)  # and the console says why, without --out
    assert code == 0 and "not certified: a .npy table" in " ".join(stdout.split()), err


def test_an_absorbing_state_policy_on_cliffwalking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A policy learned on padded episodes has 49 states for CliffWalking's 48: the last (the
    absorbing state) is dropped, said so, and the optimal path returns −13."""
    from tests.rl.test_evaluation import optimal, with_absorbing

    actions, value = optimal("CliffWalking-v1", 20)
    np.save(tmp_path / "pi49.npy", with_absorbing(np.eye(4)[actions]))
    out = tmp_path / "ev"
    argv = ["eval", str(tmp_path / "pi49.npy"), "--env", "CliffWalking-v1", "-n", "2"]
    code, stdout, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    metrics, _ = _metrics_and_privacy(out)
    assert metrics["return_mean"] == value == -13.0 and metrics["absorbing_state_dropped"]
    assert "absorbing" in stdout.replace("\n", " ")
    config = json.loads((out / "config.json").read_text())
    assert config["absorbing_state_dropped"] is True and config["max_steps"] == 20


def test_module_function_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Always 'left' as code: never reaches FrozenLake's goal, every return exactly 0."""
    import sys

    (tmp_path / "left_only.py").write_text(
        "import numpy as np\ndef probs(obs):\n    return np.tile([1.0, 0, 0, 0], (len(obs), 1))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "left_only", raising=False)
    out = tmp_path / "ev"
    code, _, err = run(
        ["eval", "left_only:probs", "--env", "FrozenLake-v1", "-n", "20", "--out", str(out)],
        capsys,
    )
    assert code == 0, err
    metrics, privacy = _metrics_and_privacy(out)
    assert metrics["policy_kind"] == "function" and metrics["return_mean"] == 0.0
    assert privacy["epsilon"] == "inf" and any("module:function" in n for n in privacy["notes"])
    code, _, err = run(["eval", "left_only:nope", "--env", "FrozenLake-v1"], capsys)
    assert_bad_input(code, err, "cannot import")


def test_a_learner_in_epsilon_greedy_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from privrl.rl.cql import DiscreteCQL

    torch.save(DiscreteCQL(4, 2, hidden=(8,)).state_dict(), tmp_path / "learner.pt")
    spec = f"{tmp_path / 'learner.pt'}:epsilon=0.5"
    out = tmp_path / "ev"
    code, _, err = run(["eval", spec, "--env", "CartPole-v1", "-n", "3", "--out", str(out)], capsys)
    assert code == 0, err
    assert _metrics_and_privacy(out)[0]["policy_kind"] == "cql"
    code, _, err = run(["eval", f"{tmp_path / 'learner.pt'}:bogus", "--env", "CartPole-v1"], capsys)
    assert_bad_input(code, err, "unknown mode")


@pytest.mark.parametrize(
    ("shape", "env", "fragments"),
    [
        ((20, 18, 4), "FrozenLake-v1", ("S = 18", "16", "S + 1")),
        ((16, 3), "FrozenLake-v1", ("A = 3", "4")),
        ((16, 2), "CartPole-v1", ("Discrete observations",)),
        ((5,), "FrozenLake-v1", ("5 actions",)),
    ],
)
def test_a_table_for_other_spaces_is_one_error_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    shape: tuple[int, ...],
    env: str,
    fragments: tuple[str, ...],
) -> None:
    np.save(tmp_path / "p.npy", np.full(shape, 1.0 / shape[-1]))
    code, _, err = run(["eval", str(tmp_path / "p.npy"), "--env", env], capsys)
    assert_bad_input(code, err, *fragments)


# ---------------------------------------------------------------------------------------------
# --report: the run a policy outside its directory came from
# ---------------------------------------------------------------------------------------------


def test_report_carries_a_runs_guarantee_to_a_table_and_refuses_another_policys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A .npy made from a private run's policy.npz, with --report naming that run: the run's ε
    and releases are carried over with a note that the caller named it. An eval's own
    privacy.json (which records the SHA-256 of the policy it evaluated) named for another
    policy is refused: one error line naming --report."""
    from privrl.rl.tabular_policy import FiniteHorizonPolicy as Saved

    own = _train("dp-apvi", tmp_path / "train", capsys, "--rho", "0.5")
    policy = Saved.load(tmp_path / "train" / "policy.npz")
    np.save(tmp_path / "pi.npy", np.eye(4)[policy.actions])
    argv = ["eval", str(tmp_path / "pi.npy"), "--env", "FrozenLake-v1", "-n", "5"]
    code, _, err = run([*argv, "--report", str(tmp_path / "train"), "--out", str(tmp_path / "a")],
                       capsys)  # fmt: skip
    assert code == 0, err
    got = json.loads((tmp_path / "a" / "privacy.json").read_text())
    for key in ("unit", "relation", "epsilon", "delta", "releases"):
        assert got[key] == own[key], key
    assert got["derived_from"]["report"] == str(tmp_path / "train")
    assert got["derived_from"]["trained_by"] == "dp-apvi"
    assert any("was named for this policy" in n for n in got["notes"])
    other = _eval(tmp_path / "train" / "policy.npz", tmp_path / "b", capsys)
    assert other["derived_from"]["policy_sha256"]
    code, _, err = run([*argv, "--report", str(tmp_path / "b" / "privacy.json")], capsys)
    assert_bad_input(code, err, "--report", "SHA-256")
    code, _, err = run([*argv, "--report", str(tmp_path / "nope.json")], capsys)
    assert_bad_input(code, err, "--report", "no such privacy report")
