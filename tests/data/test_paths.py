"""Reports name datasets without naming the machine (`portable_path`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from privrl.data.paths import portable_path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_cache_paths_become_cache_relative(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    p = tmp_path / "cache" / "data" / "experts-cartpole" / "experts-cartpole.h5"
    assert portable_path(p) == "$PRIVRL_CACHE/data/experts-cartpole/experts-cartpole.h5"


def test_home_paths_become_tilde(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "elsewhere"))
    assert portable_path(tmp_path / "runs" / "a.h5") == "~/runs/a.h5"


def test_other_paths_are_kept(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    assert portable_path("/srv/shared/d.h5") == "/srv/shared/d.h5"
    assert portable_path("relative/d.h5") == "relative/d.h5"


@pytest.mark.skipif(not DOCS.is_dir(), reason="docs/ not present")
def test_committed_reports_name_no_machine_paths() -> None:
    pattern = re.compile(r"(?<![\w$~.])/(?:root|home/[^/\s\"]+|tmp)/")
    offenders = [
        str(f.relative_to(DOCS))
        for f in DOCS.rglob("*")
        if f.suffix in {".json", ".md", ".csv"} and pattern.search(f.read_text(errors="ignore"))
    ]
    assert not offenders, f"{len(offenders)} report files name machine paths: {offenders[:5]}"
