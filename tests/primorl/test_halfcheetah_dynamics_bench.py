"""benchmarks/primorl_halfcheetah_dynamics.py in quick mode: a record per configuration, a
budget that stops and a rerun that resumes, and checkpoints without the secret generators."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "primorl_halfcheetah_dynamics.py"


def _module():
    spec = importlib.util.spec_from_file_location("primorl_halfcheetah_dynamics", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_quick_run_stops_on_its_budget_and_resumes_without_secret_state(
    tmp_path, monkeypatch
) -> None:
    bench = _module()
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    args = ["--quick", "--only", "dp-fedsgd-adam", "--steps", "2"]
    bench.main([*args, "--budget-core-hours", "1e-9"])  # spent after round 1
    out = tmp_path / "dp-fedsgd-adam-quick.json"
    first = json.loads(out.read_text())
    assert first["rounds"] == 1 and not first.get("finished")
    state = torch.load(tmp_path / "checkpoints" / "dp-fedsgd-adam-quick.pt", weights_only=False)
    assert "noise_gen" not in state and "sample_rng" not in state
    assert state["dataset_sha256"] == first["dataset_sha256"]
    assert state["momentum"].shape[0] == 2  # FedAdam's (m, v)
    bench.main(args)  # resumes at round 2 with fresh secure generators
    done = json.loads(out.read_text())
    assert done["finished"] and [p["round"] for p in done["curve"]] == [1, 2]
    assert 0 < done["epsilon"] <= 10 + 1e-6
    assert (tmp_path / "mse_vs_core_seconds-quick.png").is_file()
    first["dataset_sha256"] = "0" * 64  # another dataset: refused
    out.write_text(json.dumps(first))
    with pytest.raises(SystemExit, match="another dataset"):
        bench.main(args)
