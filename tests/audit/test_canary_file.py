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
    gp = ["audit", "gpope", "--epsilon", "1", "--canary", str(half), "--out", str(tmp_path / "g")]
    assert "audit gpope takes no canary file" in _err(gp, capsys)
    assert not (tmp_path / "o").exists()
