"""Recipe builds compute the same on any x86-64 machine (`privrl.runs.recipes.numerics`).

Another machine is emulated by the knobs a machine turns by itself: MKL's instruction set
(``MKL_ENABLE_INSTRUCTIONS``, what an AVX2-only CPU would get) and the thread count."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from privrl.runs.recipes import build_recipe, numerics
from privrl.runs.recipes.common import stage_fingerprint

X86 = platform.machine().lower() in {"x86_64", "amd64"}
needs_x86 = pytest.mark.skipif(not X86, reason="the pinned numerics are x86-64's (MKL, AVX2)")

# a few hundred Adam steps on an MLP: long enough for summation order to show in the weights
TRAIN = """
import hashlib, torch
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(5, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1))
opt = torch.optim.Adam(net.parameters(), 1e-3)
x = torch.randn(2048, 5)
y = torch.sin(x.sum(1, keepdim=True))
for _ in range(100):
    i = torch.randint(0, 2048, (256,))
    loss = ((net(x[i]) - y[i]) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in net.parameters())).hexdigest())
"""


def _train(env: dict[str, str]) -> str:
    base = {k: v for k, v in os.environ.items() if k not in numerics.PINNED_ENV}
    out = subprocess.run(
        [sys.executable, "-c", TRAIN], env={**base, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@needs_x86
def test_pinned_training_is_independent_of_mkl_path_and_threads():
    pinned = numerics.PINNED_ENV
    ref = _train({**pinned, "OMP_NUM_THREADS": "1"})
    assert _train({**pinned, "OMP_NUM_THREADS": "2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}) == ref


def test_stage_fingerprints_name_the_numerics(monkeypatch):
    a = stage_fingerprint(["stage", 1])
    monkeypatch.setattr(numerics, "tag", lambda: "AVX512||2.13.0")
    assert stage_fingerprint(["stage", 1]) != a  # a stage built on other numerics is rebuilt


def test_run_pinned_returns_the_childs_path_and_errors(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, env, check):
        calls.append(env)
        result = Path(cmd[cmd.index("--seed") - 1])
        result.write_text(json.dumps({"error": "unknown recipe 'x'", "kind": "input"}))
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr(subprocess, "run", fake_run)
    from privrl.privacy.limits import InputError

    with pytest.raises(InputError, match="unknown recipe"):
        numerics.run_pinned("x", tmp_path, seed=0, quick=True, progress=False)
    assert all(calls[0][k] == v for k, v in numerics.PINNED_ENV.items())


@pytest.mark.slow
@needs_x86
def test_pinned_quick_build_is_the_same_dataset_on_another_mkl_path(tmp_path, monkeypatch):
    from privrl.data import content_sha256, read_header

    a = build_recipe("primorl-pendulum", tmp_path / "a", quick=True, pinned=True, progress=False)
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    monkeypatch.setenv("PRIVRL_RECIPE_THREADS", "2")
    b = build_recipe("primorl-pendulum", tmp_path / "b", quick=True, pinned=True, progress=False)
    assert content_sha256(a) == content_sha256(b)
    recipe = read_header(a).metadata.extra["recipe"]
    assert recipe["numerics"]["pinned"] and recipe["numerics"]["mkl_cbwr"] == "AVX2,STRICT"
