"""The Python code of the documentation site's getting-started page runs as printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "getting-started.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def test_blocks_are_found() -> None:
    assert python_blocks("a\n```python\nx = 1\n```\n```bash\nls\n```\n") == ["x = 1\n"]


def test_getting_started_python_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = python_blocks(PAGE.read_text(encoding="utf-8"))
    assert blocks, f"no python block in {PAGE.name}"
    for block in blocks:
        namespace: dict[str, object] = {}
        exec(compile(block, str(PAGE), "exec"), namespace)
    report = namespace["report"]
    assert report.epsilon == pytest.approx(1.0, rel=1e-3)  # the guarantee the page states
    printed = " ".join(capsys.readouterr().out.split())  # the table, however it wraps
    assert "(ε=1, δ=1e-05)-DP for one whole trajectory" in printed
