"""The Python of docs/own-data-learning.md's "From Python" section runs as printed, on logs
like the page's (FrozenLake-v1, H = 30), and fits what the page says."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import pytest

from privrl.data import collect, save_hdf5
from privrl.policies import UniformRandomPolicy

PAGE = Path(__file__).resolve().parents[2] / "docs" / "own-data-learning.md"


def section_blocks(text: str, heading: str) -> list[str]:
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)


def test_the_from_python_section_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    (block,) = section_blocks(PAGE.read_text(encoding="utf-8"), "From Python")
    space = gym.make("FrozenLake-v1").action_space
    logs = collect(
        "FrozenLake-v1", UniformRandomPolicy(space), n_episodes=200, seed=0, max_steps=30
    )
    save_hdf5(logs, tmp_path / "logs.h5")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(block, str(PAGE), "exec"), namespace)
    fit = namespace["fit"]
    assert fit.policy.actions.shape == (30, 16)  # type: ignore[attr-defined]
    assert fit.report.rho == pytest.approx(1.0)  # type: ignore[attr-defined]
    assert "for one whole trajectory under replace-one" in capsys.readouterr().out
