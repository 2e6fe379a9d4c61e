"""Committed sweep state (`reproductions.primorl.cells`): secret-free, fingerprint-checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from privrl.primorl.dp_fedavg import SECRET_STATE, public_checkpoint
from reproductions.primorl import cells


def test_public_checkpoint_holds_no_secure_stream_state() -> None:
    state = {"rounds": 3, "theta": torch.zeros(2), "noise_gen": {"s": 1}, "sample_rng": {"s": 2}}
    public = public_checkpoint(state)
    assert all(public[k] is None for k in SECRET_STATE)
    assert public["rounds"] == 3 and state["noise_gen"] == {"s": 1}


def test_fingerprint_mismatch_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "d.h5"
    data.write_bytes(b"x")
    (tmp_path / cells.FINGERPRINTS).write_text(json.dumps({"d.h5": "a" * 64}))
    monkeypatch.setattr(cells, "_fingerprint", lambda p: "b" * 64)
    with pytest.raises(cells.FingerprintMismatch, match="rebuild the dataset"):
        cells.check_fingerprints(tmp_path, {"balance": data})
    monkeypatch.setattr(cells, "_fingerprint", lambda p: "a" * 64)
    cells.check_fingerprints(tmp_path, {"balance": data})


@pytest.mark.parametrize(("vendor", "hint"), [("GenuineIntel", False), ("AuthenticAMD", True)])
def test_fingerprint_mismatch_names_another_vendors_numerics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vendor: str, hint: bool
) -> None:
    from privrl.runs.recipes import numerics

    data = tmp_path / "d.h5"
    data.write_bytes(b"x")
    (tmp_path / cells.FINGERPRINTS).write_text(json.dumps({"d.h5": "a" * 64}))
    monkeypatch.setattr(cells, "_fingerprint", lambda p: "b" * 64)
    monkeypatch.setattr(numerics, "cpu_vendor", lambda: vendor)
    with pytest.raises(cells.FingerprintMismatch) as err:
        cells.check_fingerprints(tmp_path, {"balance": data})
    assert ("MKL ignores the pinned MKL_CBWR=AVX2" in str(err.value)) is hint
    assert (vendor in str(err.value)) is hint


def test_committed_records_hold_no_machine_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "machine-cache"
    monkeypatch.setenv("PRIVRL_CACHE", str(cache))
    data = cache / "data" / "d.h5"
    cell = tmp_path / "sweep" / "cells" / "mopo-1"
    (cell / "run").mkdir(parents=True)
    record = {"name": "mopo-1", "status": "ok", "values": {"data": str(data)}}
    (cell / "cell.json").write_text(json.dumps(record))
    (cell / "run" / "config.json").write_text(json.dumps({"data": str(data)}))
    monkeypatch.setattr(cells, "secret_dir_of", lambda d: None)
    dest = tmp_path / "committed"
    assert cells.export(tmp_path / "sweep", dest) == ["mopo-1"]
    for f in dest.rglob("*.json"):
        assert str(cache) not in f.read_text(), f
    assert json.loads((dest / "mopo-1" / "cell.json").read_text())["values"]["data"] == (
        f"{cells.CACHE}/data/d.h5"
    )
    assert cells._data_paths(dest) == {data}  # read back as this machine's path
    fresh = tmp_path / "fresh"
    assert cells.restore(dest, fresh) == ["mopo-1"]
    restored = json.loads((fresh / "cells" / "mopo-1" / "cell.json").read_text())
    assert restored == record


def test_a_large_pending_release_is_committed_without_its_public_states(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running cell's release whose declared-public states make it larger than `SMALL` is
    committed without them (the resumed run refills them from the same public split); one
    still too large without them is not committed at all."""
    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cells, "secret_dir_of", lambda d: None)
    monkeypatch.setattr(cells, "SMALL", 100_000)
    cell = tmp_path / "sweep" / "cells" / "primorl-1"
    (cell / "run").mkdir(parents=True)
    (cell / "cell.json").write_text(json.dumps({"name": "primorl-1", "status": "running"}))
    release = {"format": "m", "model": {"w": torch.ones(10)}, "fedavg": {"rounds": 50}}
    big = [torch.zeros(40_000), torch.arange(40_000)]  # 480 kB of public states
    torch.save({**release, "public_states": big}, cell / "run" / cells.PENDING)
    dest = tmp_path / "committed"
    cells.export(tmp_path / "sweep", dest)
    committed = torch.load(dest / "primorl-1" / "run" / cells.PENDING, weights_only=False)
    assert committed["public_states"] is None
    assert committed["fedavg"] == {"rounds": 50} and torch.equal(
        committed["model"]["w"], torch.ones(10)
    )
    assert not list(dest.rglob("*.tmp"))
    monkeypatch.setattr(cells, "SMALL", 100)  # too large even without them: not committed
    (dest / "primorl-1" / "run" / cells.PENDING).unlink()
    cells.export(tmp_path / "sweep", dest)
    assert not (dest / "primorl-1" / "run" / cells.PENDING).exists()
    assert not list(dest.rglob("*.tmp"))
