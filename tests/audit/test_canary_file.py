"""`--canary FILE`: a canary episode in privrl's format, checked against the audited MDP."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.cli.main import main
from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.data.io import save_hdf5


def _canary(path: Path, *, H: int = 3, S: int = 3, A: int = 2, episodes: int = 1, r: float = 1.0):
    n = H * episodes
    ds = TrajectoryDataset(
        observations=np.tile(np.r_[np.full(H, 2), 2], episodes).astype(np.int64),
        actions=np.ones(n, np.int64),
        rewards=np.full(n, r),
        terminated=np.tile(np.r_[np.zeros(H - 1, bool), True], episodes),
        truncated=np.zeros(n, bool),
        episode_offsets=np.arange(episodes + 1) * H,
        metadata=DatasetMetadata(
            observation_space=spaces.Discrete(S), action_space=spaces.Discrete(A)
        ),
    )
    return save_hdf5(ds, path)


def _err(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    return lines[0]


@pytest.mark.parametrize(
    ("command", "flags"),
    [("dp-apvi", ["--epsilon", "2"]), ("sdp-pe", ["--epsilon", "4", "--horizon", "3",
                                                  "--states", "3"])],
)  # fmt: skip
def test_file_canary_is_audited(
    command: str, flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A canary file of the audited MDP's spaces runs the audit with that episode as x₁
    (stays below the claim)."""
    path = _canary(tmp_path / "canary.h5")
    out = tmp_path / "run"
    argv = ["audit", command, *flags, "--canary", str(path), "--trials", "20000"]
    assert main([*argv, "--out", str(out)]) == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.5 < metrics["auc"] and metrics["epsilon_lower_bound"] <= metrics["epsilon_claimed"]


def test_file_canary_must_match_the_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["audit", "dp-apvi", "--epsilon", "1", "--out", str(tmp_path / "o")]
    wrong_s = _canary(tmp_path / "s.h5", S=4)
    assert "observation space is Discrete(4)" in _err([*base, "--canary", str(wrong_s)], capsys)
    wrong_h = _canary(tmp_path / "h.h5", H=5)
    assert "horizon is H = 3" in _err([*base, "--canary", str(wrong_h)], capsys)
    two = _canary(tmp_path / "two.h5", episodes=2)
    assert "holds 2 episodes" in _err([*base, "--canary", str(two)], capsys)
    missing = str(tmp_path / "none.h5")
    assert "no such file" in _err([*base, "--canary", missing], capsys)
    half = _canary(tmp_path / "r.h5", r=0.5)
    pe = ["audit", "sdp-pe", "--epsilon", "1", "--horizon", "3", "--states", "3"]
    assert "must be 0 or 1" in _err(
        [*pe, "--canary", str(half), "--out", str(tmp_path / "p")], capsys
    )
    assert not (tmp_path / "o").exists()


def _gpope(path: Path, tmp: Path, *extra: str) -> list[str]:
    return ["audit", "gpope", "--epsilon", "1", "--trials", "2000", "--canary", str(path),
            *extra, "--out", str(tmp / "g")]  # fmt: skip


def test_gpope_file_canary_uses_its_own_statistics(tmp_path: Path) -> None:
    """A gpope canary file is mapped through the declared feature map to its (Â, b̂, Ĉ): the
    played statistic is the episode's, not worst's b̂ = ±2h·e₀ (so the scores differ), and the
    bound stays below the claim."""
    from privrl.audit.attacks import GPOPE_AUDIT_GAMMA, GPOPEAuditSettings, audit_gpope
    from privrl.audit.canary import load_gpope_canary
    from privrl.audit.run import summarise

    path = _canary(tmp_path / "c.h5", H=3, S=3, A=2, r=1.0)  # stays in state 2, reward 1
    A, b, C = load_gpope_canary(path, feature_map="onehot", n=3, gamma=GPOPE_AUDIT_GAMMA)
    assert np.allclose(b, [0.0, 0.0, 1.0]) and np.allclose(C, np.diag([0.0, 0.0, 1.0]))
    assert np.allclose(A[2, 2], 1.0 - GPOPE_AUDIT_GAMMA * 2 / 3)  # φ_{τ} = 0 after terminating
    settings = GPOPEAuditSettings(epsilon=1.0, features=3)
    kw = {"trials": 4000}
    file = audit_gpope(settings, **kw, statistic=(A, b, C), rng=np.random.default_rng(0))
    worst = audit_gpope(settings, **kw, rng=np.random.default_rng(0))
    assert file.params["canary"] == "file" and not np.allclose(file.scores, worst.scores)
    metrics = summarise(file, confidence=0.95)
    assert 0.5 < metrics["auc"] and metrics["epsilon_lower_bound"] <= metrics["epsilon_claimed"]


def test_gpope_file_canary_cli_and_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _canary(tmp_path / "c.h5", S=3)
    out = tmp_path / "g"
    ok = _gpope(path, tmp_path, "--features", "3", "--feature-map", "onehot")
    assert main(ok) == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epsilon_lower_bound"] <= metrics["epsilon_claimed"]
    capsys.readouterr()
    bad = tmp_path / "bad"
    cases = [
        (["--features", "2", "--feature-map", "onehot"], "has 3 features, the audit's is n = 2"),
        ([], "--feature-map is required with --canary FILE.h5"),
        (["--feature-map", "fourier:2"], "needs a 1-D Box observation space"),
    ]
    for extra, message in cases:
        argv = _gpope(path, bad, *extra)
        assert message in _err(argv, capsys)
    two = _canary(tmp_path / "two.h5", episodes=2)
    assert "holds 2 episodes" in _err(
        _gpope(two, bad, "--features", "3", "--feature-map", "onehot"), capsys
    )
    worst = ["audit", "gpope", "--epsilon", "1", "--feature-map", "onehot", "--out", str(bad / "w")]
    assert "applies only with --canary FILE.h5" in _err(worst, capsys)
    assert not (bad / "g").exists() and not (bad / "w").exists()


@pytest.mark.parametrize("where", ["sidecar", "copy"])
def test_a_ledgered_canary_file_is_refused_before_it_is_read(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    """An audit publishes statistics of its canary with no mechanism, so a file whose episodes
    have a privacy ledger is refused (the copy shares the ledger through the registry), with
    the reason and the fix, before any record is read and with no run directory."""
    import shutil

    from privrl.data import io
    from privrl.privacy.ledger import BudgetLedger

    path = _canary(tmp_path / "canary.h5")
    BudgetLedger.init(path, epsilon=1.0, delta=1e-6, unit="trajectory", relation="replace_one")
    if where == "copy":
        shutil.copyfile(path, tmp_path / "copy.h5")
        path = tmp_path / "copy.h5"

    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("the canary's records were read")

    monkeypatch.setattr(io, "load_hdf5", no_read)
    out = tmp_path / "run"
    line = _err(["audit", "dp-apvi", "--epsilon", "2", "--canary", str(path), "--out", str(out)],
                capsys)  # fmt: skip
    assert "refused" in line and "ledger" in line and "without a privacy mechanism" in line
    assert line.startswith(f"error: --canary {path}: refused") and "--canary worst" in line
    assert not out.exists()
