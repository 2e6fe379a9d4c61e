"""The fast paths of DP-FedAvg's local update (`privrl.primorl.fast_local`) change only the
computation layout: the fused Adam step equals the reference step, and stacked clients get
the same per-client clipped updates Δ_k as clients run one at a time (same minibatches in the
same order, same clip per client), for SGD and Adam, unequal lengths, a stack size that does
not divide the sampled clients, a client without data, and no clients at all."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from privrl.nn.ensemble import GaussianEnsemble
from privrl.primorl import dp_fedavg as fed
from privrl.primorl import fast_local
from tests.noise import noise_rng

torch.set_num_threads(1)

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_primorl_cpu_wins.py"
LENGTHS = [37, 0, 16, 5, 50, 1, 23]  # unequal; one client without data


def _setup(opt: str, mode: str, lengths=LENGTHS, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ens = GaussianEnsemble(3, 2, (16, 16), 3, 1, seed=seed)
    n = int(sum(lengths))
    clients = fed.Clients(
        torch.randn(n, 3, generator=g), 0.3 * torch.randn(n, 2, generator=g), np.array(lengths)
    )
    plan = fed.plan_dp_fedavg(
        fed.DpFedAvgConfig(
            noise_multiplier=1.0,
            clip_norm=0.05,
            clip_mode=mode,
            max_rounds=10,
            n_units=len(lengths),
            sampling_rate=0.5,
            local_optimizer=opt,  # type: ignore[arg-type]
            local_lr=1e-2,
            local_epochs=2,
        )
    )
    start = fed.EnsembleLayout(ens).flatten(ens.parameters_dict())
    return ens, clients, plan, start


def _updates(ens, clients, plan, start, sampled, *, chunk, seed=5, **fast):
    rng = noise_rng(seed)
    with fast_local.using(**fast):
        out = fed.local_displacements(
            ens, start, clients, sampled, plan, rng, reduce="none", chunk_copies=chunk
        )
    return out, rng.bit_generator.state


def test_fused_adam_step_equals_the_reference_step() -> None:
    if not fast_local.fused_adam_supported("cpu"):
        pytest.skip("torch._fused_adam_ is not available here")
    g = torch.Generator().manual_seed(1)
    p, m1, m2 = (torch.randn(4, 3, 50, generator=g) for _ in range(3))
    m2 = m2.abs()
    ref = [p.clone(), m1.clone(), m2.clone()]
    for t in range(1, 6):
        grad = torch.randn(4, 3, 50, generator=g)
        fast_local.adam_step_(p, grad, m1, m2, step=t, lr=1e-2)
        fast_local._reference_adam_(ref[0], grad, ref[1], ref[2], step=t, lr=1e-2)
    for a, b in zip((p, m1, m2), ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fused_adam_refuses_a_strided_buffer() -> None:
    """torch._fused_adam_ reads its tensors as contiguous: a strided view would be updated in
    the wrong elements, so it is refused."""
    view = torch.zeros(2, 10)[:, :5]
    with pytest.raises(ValueError, match="contiguous"):
        fast_local.adam_step_(
            view, torch.ones(2, 5), torch.zeros(2, 5), torch.zeros(2, 5), step=1, lr=1e-3
        )


@pytest.mark.parametrize(
    ("opt", "mode"),
    [("sgd", "flat"), ("sgd", "per_layer"), ("adam", "flat"), ("adam", "per_layer")],
)
def test_stacked_and_fused_give_each_clients_update(opt: str, mode: str) -> None:
    """Clients one at a time with the reference Adam step vs stacks of 4 (7 sampled: 4 + 3,
    a client without data) with the fused step: the same Δ_k per client, and the local
    batch stream advanced identically (the minibatches depend on nothing new)."""
    ens, clients, plan, start = _setup(opt, mode)
    sampled = np.arange(len(LENGTHS))
    ref, ref_state = _updates(ens, clients, plan, start, sampled, chunk=1, fused_adam=False)
    fast, fast_state = _updates(ens, clients, plan, start, sampled, chunk=4, fused_adam=True)
    scale = float(ref.abs().max())
    assert scale > 1e-3  # not trivially zero
    assert float(ref[1].abs().max()) == 0.0  # the client without data contributes 0
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5 * scale)
    assert fast_state == ref_state
    # the clip binds per client: every Δ_k within C
    assert float(fast.flatten(1).norm(dim=1).max()) <= plan.C * (1 + 1e-5)


def test_fused_adam_alone_and_stacking_alone_match_the_loop() -> None:
    ens, clients, plan, start = _setup("adam", "per_layer")
    sampled = np.array([0, 2, 4, 6, 1])
    loop = fed.local_displacements_loop(ens, start, clients, sampled, plan, noise_rng(5))
    for chunk, fused in ((None, True), (3, False), (2, True)):
        out, _ = _updates(ens, clients, plan, start, sampled, chunk=chunk, fused_adam=fused)
        torch.testing.assert_close(out, loop, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_no_sampled_clients_give_zero(opt: str) -> None:
    ens, clients, plan, start = _setup(opt, "flat")
    none = np.zeros(0, dtype=np.int64)
    for fused, chunk in ((False, 1), (True, 4)):
        out, _ = _updates(ens, clients, plan, start, none, chunk=chunk, fused_adam=fused)
        assert out.shape == (0, 3, fed.EnsembleLayout(ens).size)
        with fast_local.using(fused_adam=fused):
            total = fed.local_displacements(
                ens, start, clients, none, plan, noise_rng(0), chunk_copies=chunk
            )
        assert float(total.abs().max()) == 0.0


def test_the_benchmark_runs_in_quick_mode(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_primorl_cpu_wins", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "wins.json"
    bench.main(["--quick", "--sizes", "pendulum", "--out", str(out)])
    cases = json.loads(out.read_text())["cases"]
    assert set(cases) == {"pendulum/sgd", "pendulum/adam"}
    assert set(cases["pendulum/adam"]["speedup_vs_reference"]) == {"fused_adam"}
    for case in cases.values():
        for eq in case["equality"].values():
            assert eq["max_rel_diff"] < 1e-4


def test_the_fused_step_is_the_default_and_can_be_switched_off() -> None:
    """Adopted by benchmarks/bench_primorl_cpu_wins.py (≥ 1.1× with equal updates)."""
    assert fast_local.SETTINGS.fused_adam
    cpu = torch.device("cpu")
    assert fast_local.use_fused_adam(cpu) == fast_local.fused_adam_supported("cpu")
    with fast_local.using(fused_adam=False):
        assert not fast_local.use_fused_adam(cpu)
    assert fast_local.settings() == fast_local.SETTINGS
