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
    sha = bench.read_header(bench.dataset_path(True)).content_sha256
    build = tmp_path / f"quick-{sha[:12]}"  # the records of this dataset build
    out = build / "dp-fedsgd-adam.json"
    first = json.loads(out.read_text())
    assert first["rounds"] == 1 and not first.get("finished")
    state = torch.load(build / "checkpoints" / "dp-fedsgd-adam.pt", weights_only=False)
    assert "noise_gen" not in state and "sample_rng" not in state
    assert state["dataset_sha256"] == first["dataset_sha256"]
    assert state["momentum"].shape[0] == 2  # FedAdam's (m, v)
    bench.main(args)  # resumes at round 2 with fresh secure generators
    done = json.loads(out.read_text())
    assert done["finished"] and [p["round"] for p in done["curve"]] == [1, 2]
    assert 0 < done["epsilon"] <= 10 + 1e-6
    assert (build / "mse_vs_core_seconds.png").is_file()
    first["dataset_sha256"] = "0" * 64  # another dataset: refused
    out.write_text(json.dumps(first))
    with pytest.raises(SystemExit, match="another dataset"):
        bench.main(args)


@pytest.mark.slow
def test_mopo_reference_is_measured_on_the_dataset_at_hand(tmp_path, monkeypatch) -> None:
    """`--mopo` trains MOPO's ensemble, records its public-split MSE per epoch with the
    dataset's fingerprint, and reuses the record for the same dataset."""
    bench = _module()
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    args = bench.argparse.Namespace(quick=True)
    data = bench.dataset_path(True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as main() runs it
    try:
        first = bench.run_mopo(data, args)
    finally:
        torch.set_num_threads(threads)
    assert first["finished"] and first["epochs"] == 1 and len(first["curve"]) == 1
    assert first["dataset_sha256"] == bench.read_header(data).content_sha256
    assert 0 < first["best_mse"] < float("inf")
    calls = []
    monkeypatch.setattr(bench, "load_hdf5", lambda *a: calls.append(a))
    assert bench.run_mopo(data, args) == first and not calls  # the record, not a rerun


def test_the_noise_screen_uses_public_sizes_and_a_closed_form_bound() -> None:
    """The screen's K and d are the recipe's declared private trajectories and the noised
    parameters that the Table 11 report states (1,800 and 928,704), and its bound is
    z·√d/(qK)."""
    bench = _module()
    assert bench.declared_units("halfcheetah") == 1800
    assert bench.ensemble_size("halfcheetah") == 928_704
    assert bench.noise_to_signal(0.5, 400, 0.1, 1000) == pytest.approx(0.5 * 20 / 100)
    grid = [
        {"q": q, "T": t, "z": 1.0, "noise_to_signal": q * t, "core_hours": 0.5}
        for q in (0.1, 0.5)
        for t in (10, 100)
    ]
    table = bench.screen_table({"grid": grid}).splitlines()
    assert table[0] == "| q | T = 10 | T = 100 |" and len(table) == 4
    assert table[3].startswith("| 0.5 | z = 1: **5** (0.5 h) | z = 1: **50**")


@pytest.mark.slow
def test_the_screen_calibrates_z_for_the_target_at_each_q_and_t(monkeypatch) -> None:
    """Each grid z meets the target ε by dp-accounting's own RDP accountant over privrl's
    orders (and 3% less noise does not), at the q and T of its row."""
    import dp_accounting

    from privrl.privacy.accounting import DENSE_RDP_ORDERS

    def eps(z: float) -> float:
        acc = dp_accounting.rdp.RdpAccountant(list(DENSE_RDP_ORDERS))
        event = dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(z))
        return acc.compose(dp_accounting.SelfComposedDpEvent(event, 100)).get_epsilon(1e-5)

    bench = _module()
    monkeypatch.setattr(bench, "SCREEN_Q", (0.05,))
    monkeypatch.setattr(bench, "SCREEN_T", (100,))
    (row,) = bench.screen(10.0, 1e-5)["grid"]
    assert eps(row["z"]) <= 10.0 * (1 + 1e-3)
    assert eps(0.97 * row["z"]) > 10.0


def test_a_smaller_ensemble_configuration_changes_only_the_architecture() -> None:
    """`hidden` in a configuration sets the ensemble's widths (7 members kept); its other
    settings and the paper's configurations are untouched."""
    bench = _module()
    small = bench.config_for("small-local-adam-q0.25-T50", 10.0, False, None)
    assert small.dynamics is not None and small.dynamics.hidden == (128, 128)
    assert small.dynamics.members == 7 and small.steps == 50 and small.sampling_rate == 0.25
    paper = bench.config_for("local-adam-q0.25-T50", 10.0, False, None)
    assert paper.dynamics is not None and paper.dynamics.hidden == (200, 200, 200, 200)
    assert small.dynamics.replace(hidden=(200,) * 4) == paper.dynamics
    assert "hidden" in bench.CONFIGS["small-local-adam-q0.25-T50"]  # not popped from CONFIGS
    from privrl.envs.control import CONTROL_TASKS

    spec = CONTROL_TASKS["halfcheetah"]
    model = bench.DynamicsModel(spec.obs_dim, spec.act_dim, small.dynamics, seed=0)
    layout = bench.EnsembleLayout(model.ensemble)
    # 7 × (23·128 + 128 + 128·128 + 128 + 128·36 + 36 + the 2 × 18 learned log-variance bounds)
    assert layout.members * layout.size == 7 * (
        23 * 128 + 128 + 128 * 128 + 128 + 128 * 36 + 36 + 36
    )


@pytest.mark.slow
def test_references_are_the_public_splits_initial_and_mean_predictor_mse(
    tmp_path, monkeypatch
) -> None:
    bench = _module()
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    args = bench.argparse.Namespace(quick=True)
    refs = bench.run_references(bench.dataset_path(True), args)
    widths = {"x".join(map(str, c["hidden"])) for c in bench.CONFIGS.values() if "hidden" in c}
    assert set(refs["initial_mse"]) == {"200x200x200x200", *widths} and "128x128" in widths
    # an untrained ensemble predicts about the mean: within a few percent of its MSE
    for mse in refs["initial_mse"].values():
        assert abs(mse / refs["mean_predictor_mse"] - 1) < 0.1
    records, mopo = bench.build_records(next(tmp_path.iterdir()))
    assert records == [] and mopo is None  # references.json is not a configuration
