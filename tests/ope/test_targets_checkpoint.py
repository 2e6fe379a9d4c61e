"""Saved deep policies as OPE targets: ``--target-policy DIR/learner.pt`` (a discrete CQL or
BCQ learner of `privrl train dp-sgd | expert-dp`) read through `privrl eval`'s loader. Each
checkpoint kind gives the π(a|s) it acts with for a batch of observations; a checkpoint whose
sizes do not match the dataset's declared spaces is refused before any data are read, as one
`error:` line (exit 2); an IPS run end to end on an imported log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.cli.main import main
from privrl.ope.targets import is_user_spec, load_target_policy
from privrl.rl.bcq import DiscreteBCQ
from privrl.rl.cql import DiscreteCQL

OBS_DIM, A = 3, 2
OBS = spaces.Box(-1.0, 1.0, shape=(OBS_DIM,))
ACT = spaces.Discrete(A)


def save(tmp_path: Path, cls: type, obs_dim: int = OBS_DIM, n_actions: int = A) -> Path:
    learner = cls(obs_dim, n_actions, hidden=(8,), seed=1)
    path = tmp_path / f"{cls.algorithm}" / "learner.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    learner.save(path)
    return path


def batch(n: int = 50) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, size=(n, OBS_DIM)).astype(np.float32)


def test_a_checkpoint_spec_is_a_user_spec() -> None:
    assert is_user_spec("runs/x/learner.pt")
    assert is_user_spec("runs/x/learner.pt:epsilon=0.1")
    assert not is_user_spec("softmax:1.0")


@pytest.mark.parametrize("cls", [DiscreteCQL, DiscreteBCQ])
def test_a_learner_is_its_greedy_policy(cls: type, tmp_path: Path) -> None:
    """π(a|s) = 1 on the action the saved learner takes (what `privrl eval` rolls out), for
    each checkpoint kind."""
    path = save(tmp_path, cls)
    learner = cls(OBS_DIM, A, hidden=(8,), seed=99)
    learner.load_state_dict(__import__("torch").load(path, weights_only=True))
    pi = load_target_policy(str(path), ACT, OBS)
    obs = batch()
    p = pi.probs(obs)
    np.testing.assert_array_equal(p, np.eye(A)[learner.act(obs)])
    assert pi.probs(obs).shape == (len(obs), A)


def test_epsilon_greedy_mixes_uniform_in(tmp_path: Path) -> None:
    """learner.pt:epsilon=E gives (1 − E)·greedy + E/A: every action has mass ≥ E/A."""
    path = save(tmp_path, DiscreteCQL)
    greedy = load_target_policy(str(path), ACT, OBS).probs(batch())
    mixed = load_target_policy(f"{path}:epsilon=0.2", ACT, OBS).probs(batch())
    np.testing.assert_allclose(mixed, 0.8 * greedy + 0.1)
    np.testing.assert_allclose(mixed.sum(axis=1), 1.0)


def test_bcq_imitation_is_the_softmax_of_its_classifier(tmp_path: Path) -> None:
    path = save(tmp_path, DiscreteBCQ)
    pi = load_target_policy(f"{path}:imitation", ACT, OBS)
    learner = DiscreteBCQ(OBS_DIM, A, hidden=(8,), seed=99)
    learner.load_state_dict(__import__("torch").load(path, weights_only=True))
    np.testing.assert_allclose(pi.probs(batch()), learner.imitation_probs(batch()), rtol=1e-6)
    assert np.all(pi.probs(batch()) > 0)


@pytest.mark.parametrize(
    ("spec_of", "obs", "act", "message"),
    [
        (lambda p: str(p), OBS, spaces.Discrete(3), "has 2 actions but the dataset's action"),
        (lambda p: str(p), spaces.Box(-1, 1, shape=(5,)), ACT, "takes 3-dimensional observations"),
        (lambda p: str(p), spaces.Discrete(4), ACT, "takes 3-dimensional observations"),
        (lambda p: f"{p}:epsilon=2", OBS, ACT, "epsilon must be a number in [0, 1]"),
        (lambda p: f"{p}:softmax", OBS, ACT, "unknown mode"),
        (lambda p: f"{p}:imitation", OBS, ACT, "only a BCQ learner"),
        (lambda p: str(p.with_name("missing.pt")), OBS, ACT, "not found"),
    ],
)
def test_a_mismatch_is_refused(spec_of, obs, act, message: str, tmp_path: Path) -> None:
    path = save(tmp_path, DiscreteCQL)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_target_policy(spec_of(path), act, obs)


def test_a_continuous_agent_is_refused(tmp_path: Path) -> None:
    """A SAC agent (policy.pt) has no π(a|s) over discrete actions."""
    from privrl.rl.sac import SAC, SACConfig

    agent = SAC(OBS_DIM, 1, [-1.0], [1.0], SACConfig(hidden=(8,)))
    path = tmp_path / "policy.pt"
    __import__("torch").save(agent.state_dict(), path)
    with pytest.raises(ValueError, match="continuous box"):
        load_target_policy(str(path), ACT, OBS)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-step log with 3-dim contexts and 2 actions, imported from a CSV (spaces declared,
    propensities 1/2)."""
    root = tmp_path_factory.mktemp("log")
    rng = np.random.default_rng(0)
    lines = ["id,x0,x1,x2,arm,r,p"]
    for i in range(200):
        x = rng.uniform(-1, 1, size=3)
        a = int(rng.integers(2))
        r = float(rng.random() < (0.8 if (a == 1) == (x[0] > 0) else 0.2))
        lines.append(f"{i},{x[0]:.4f},{x[1]:.4f},{x[2]:.4f},{a},{r:g},0.5")
    (root / "log.csv").write_text("\n".join(lines) + "\n")
    code = main(
        [
            "data", "import", str(root / "log.csv"), "--out", str(root / "log.h5"),
            "--columns", "episode=id,obs=x0|x1|x2,next_obs=x0|x1|x2,action=arm,reward=r,"
            "behaviour_prob=p",
            "--observation-space", "box:-1:1:3", "--action-space", "discrete:2",
        ]
    )  # fmt: skip
    assert code == 0
    return root / "log.h5"


def test_ips_of_a_saved_learner_end_to_end(imported: Path, tmp_path: Path, capsys) -> None:
    """`privrl ope ips --target-policy DIR/learner.pt` runs, reports the value with its
    interval and publishes the spec (public) as the target policy."""
    path = save(tmp_path, DiscreteCQL)
    out = tmp_path / "run"
    argv = [
        "ope", "ips", "--data", str(imported), "--target-policy", str(path),
        "--reward-range", "0,1", "--weight-clip", "10", "--max-horizon", "1",
        "--epsilon", "1", "--out", str(out),
    ]  # fmt: skip
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "IPS value of" in captured.out and "learner.pt" in captured.out.replace("\n", "")
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= metrics["value_ci_low"] <= metrics["value_ci_high"] <= 1.0
    assert np.isfinite(metrics["value"])
    privacy = json.loads((out / "privacy.json").read_text())
    given = {p["name"]: p["value"] for p in privacy["public_parameters"]}
    assert given["target policy π"] == str(path)


def test_ips_refuses_a_mismatched_learner_with_one_error_line(
    imported: Path, tmp_path: Path, capsys
) -> None:
    path = save(tmp_path, DiscreteCQL, n_actions=4)
    argv = [
        "ope", "ips", "--data", str(imported), "--target-policy", str(path),
        "--reward-range", "0,1", "--weight-clip", "10", "--max-horizon", "1",
        "--epsilon", "1", "--out", str(tmp_path / "bad"),
    ]  # fmt: skip
    assert main(argv) == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "4 actions" in lines[0]
    assert not (tmp_path / "bad" / "metrics.json").exists()
