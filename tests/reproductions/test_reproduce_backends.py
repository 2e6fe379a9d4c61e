"""Every `privrl reproduce ID` runs on the sweep runner (system cells or function cells), so
`privrl reproduce all --backend ray` puts every reproduction's cells on Ray."""

from __future__ import annotations

import inspect

import pytest

from reproductions import reproduce as registry
from reproductions.reproduce import REPRODUCTIONS


@pytest.mark.parametrize("rid", sorted(REPRODUCTIONS))
def test_every_reproduction_takes_the_backend_and_its_workers(rid: str) -> None:
    entry = REPRODUCTIONS[rid]
    assert entry.sweep, f"{rid} runs in-process; give it function cells (privrl.runs.units)"
    params = inspect.signature(entry.load(), follow_wrapped=False).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    assert takes_all or {"backend", "workers"} <= set(params), rid


def test_reproduce_passes_the_backend_through(monkeypatch, tmp_path) -> None:
    seen = {}

    def fake(out, **kwargs):
        seen.update(kwargs)
        return out / "report.md"

    monkeypatch.setattr(registry.Reproduction, "load", lambda self: fake)
    registry.reproduce("dp-apvi-tabular", tmp_path / "o", quick=True, backend="ray", workers=2)
    assert seen["backend"] == "ray" and seen["workers"] == 2
