"""Test-wide fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def ledger_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point the ledger registry (PRIVRL_LEDGER_REGISTRY) at a fresh directory per test, so no
    test writes to $HOME and no test sees another's ledgers; subprocesses inherit it. Its own
    MonkeyPatch, so a test's `monkeypatch.undo()` cannot restore the $HOME default."""
    path = tmp_path_factory.mktemp("ledger-registry")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRIVRL_LEDGER_REGISTRY", str(path))
        yield path
