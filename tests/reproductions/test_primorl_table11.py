"""`privrl reproduce primorl-table11`: its rows' configurations, the accounting of its private
rows, the scale's projected cost, and the report and claims on synthetic summaries."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from reproductions.primorl import table11 as T11
from reproductions.primorl.sweeps import Scale
from reproductions.primorl.table11_report import write_report


def _plan(cell: dict, steps: int):
    """The DP-FedAvg plan a cell's run would make (public: its flags, the preset, K)."""
    from privrl.primorl.primorl import plan
    from privrl.runs.layer import RunSpec

    values = {**T11.MODEL_STAGE, **{k: v for k, v in cell.items() if k != "data"}}
    spec = RunSpec.from_mapping({**values, "steps": steps}, out="unused")
    return plan(spec.config.primorl_config("halfcheetah"), {"extra": {"n_trajectories": 2000}})


def test_each_row_sets_what_the_papers_row_sets() -> None:
    """MOPO, then NO CLIP (z = 0, C = ∞), NO NOISE (z = 0, C = 15), z = 1e-4 and 1e-3
    (accounted under RDP) and the ε row (target ε = 10): all with the preset's per-layer
    clipping and the investigation's model stage (q = 0.25, 2×128, the server's EMA released,
    local Adam) at the same T; MOPO's dynamics capped."""
    cells = T11.cells(Path("h.h5"), Scale(seeds=2, base_seed=3))
    assert [c["seed"] for c in cells if c["system"] == "mopo"] == [3, 4]
    assert all(c["model_epochs"] == T11.MOPO_MODEL_EPOCHS for c in cells if c["system"] == "mopo")
    primorl = [c for c in cells if c["system"] == "primorl"]
    assert len(primorl) == 5 * 2 and {T11.row_of(c) for c in primorl} == set(T11.PRIMORL_ROWS)
    assert [T11.row_of(c) for c in primorl][::2] == [
        "eps",
        "no-noise",
        "no-clip",
        "z-1e-4",
        "z-1e-3",
    ]
    expected = {  # row: (z, C, private, accountant)
        "no-clip": (0.0, math.inf, False, "pld"),
        "no-noise": (0.0, 15.0, False, "pld"),
        "z-1e-4": (1e-4, 15.0, True, "rdp"),
        "z-1e-3": (1e-3, 15.0, True, "rdp"),
    }
    for cell in (c for c in primorl if c["seed"] == 3):
        row = T11.row_of(cell)
        if row == "eps":
            assert cell["epsilon"] == T11.TARGET_EPSILON <= 20
            continue  # its plan calibrates z (tested below on the stored value)
        p = _plan(cell, T11.ROUNDS)
        assert (p.z, p.C, p.private, p.accountant) == expected[row], row
        assert (p.q, p.T_max, p.clip_mode, p.K) == (0.25, T11.ROUNDS, "per_layer", 2000)
        assert p.server_ema == 0.9
    primorl_config = _config(primorl[0])
    assert primorl_config.dynamics_hidden == (128, 128)
    assert primorl_config.local_optimizer == "adam"
    req = T11.request(Path("out"))
    assert (req.scale.seeds, req.scale.epochs) == (1, T11.EPOCHS)
    assert T11.request(Path("out"), quick=True).scale.epochs < T11.EPOCHS
    doc = T11.sweep_doc(Path("h.h5"), Path("out"), req.scale, backend="local", workers=2)
    assert doc["systems"]["primorl"] == {
        "steps": T11.ROUNDS,
        "sampling_rate": 0.25,
        "dynamics_hidden": [128, 128],
        "server_ema": 0.9,
        "local_optimizer": "adam",
    }
    assert doc["epochs"] == T11.EPOCHS
    quick = T11.sweep_doc(
        Path("h.h5"), Path("o"), Scale(seeds=1, quick=True), backend="local", workers=1
    )
    assert quick["systems"]["primorl"]["steps"] == T11.QUICK_ROUNDS
    assert quick["systems"]["primorl"]["sampling_rate"] == T11.Q  # the table's q, not 30/K
    assert [c["model_epochs"] for c in quick["cells"] if c["system"] == "mopo"] == [1]


def test_the_calibrated_row_meets_its_epsilon_and_is_tight() -> None:
    """Privacy: the stored z of the ε row, at q = 0.25, T = ROUNDS, δ = 1e-5, certifies
    ε ≤ 10 under PLD, and 0.1% less noise would not (so the report's z is the calibration's);
    it is the z the investigation's run of this model stage used."""
    from privrl.primorl.dp_fedavg import _epsilon_cached

    z = T11.CALIBRATED_Z
    assert _epsilon_cached(z, 0.25, T11.ROUNDS, 1e-5, "pld") <= T11.TARGET_EPSILON
    assert _epsilon_cached(z / 1.001, 0.25, T11.ROUNDS, 1e-5, "pld") > T11.TARGET_EPSILON
    run = json.loads((Path(__file__).resolve().parents[2] / T11.INVESTIGATION).read_text())
    assert (run["q"], run["T_max"], run["settings"]["server_ema"]) == (0.25, T11.ROUNDS, 0.9)
    assert run["z"] == pytest.approx(z, abs=1e-4)
    assert T11.accounting(T11.ROUNDS)["eps"]["rdp"] > T11.TARGET_EPSILON  # RDP is looser


def test_tiny_z_refuses_pld_and_reports_rdp() -> None:
    """z = 1e-3 at the table's q: the PLD grid would need terabytes, so the PLD accountant refuses
    with the fix (it used to fail to allocate 38 GiB); under RDP the plan's report states the
    huge ε and says PLD was not computed."""
    from privrl.primorl.dp_fedavg import DpFedAvgConfig, _epsilon_cached, plan_dp_fedavg

    with pytest.raises(ValueError, match=r"^accountant pld: .*; choose rdp$"):
        _epsilon_cached(1e-3, T11.Q, T11.ROUNDS, 1e-5, "pld")
    cfg = DpFedAvgConfig(
        noise_multiplier=1e-3,
        clip_norm=15.0,
        sampling_rate=T11.Q,
        max_rounds=T11.ROUNDS,
        n_units=2000,
        accountant="rdp",
    )
    report = plan_dp_fedavg(cfg).report(T11.ROUNDS, 10)
    assert report.epsilon > 1e6
    assert any("not computed" in n for n in report.notes)
    acc = T11.accounting(T11.ROUNDS)
    assert acc["z-1e-3"]["rdp"] > 1e6 and acc["z-1e-4"]["rdp"] > acc["z-1e-3"]["rdp"]


def test_the_full_scale_fits_the_budget() -> None:
    """The projected cost is the measured units' sum, within the budget; the DP round is the
    investigation's run of this model stage (its core-seconds over its rounds)."""
    run = json.loads((Path(__file__).resolve().parents[2] / T11.INVESTIGATION).read_text())
    assert T11.MEASURED["dp_round"] == pytest.approx(run["core_seconds"] / run["rounds"], 1e-3)
    assert run["d"] == T11.N_PARAMS and run["settings"]["hidden"] == list(T11.HIDDEN)
    cost = T11.projected_cost()
    m = T11.MEASURED
    primorl = T11.ROUNDS * m["dp_round"] + T11.EPOCHS * m["primorl_policy_epoch"]
    assert cost["primorl_run_hours"] == pytest.approx(primorl / 3600)
    assert cost["core_hours"] <= 1.1 * T11.BUDGET_CORE_HOURS
    assert T11.projected_cost(seeds=3)["core_hours"] == pytest.approx(3 * cost["core_hours"])


def _config(cell: dict):
    """The PRIMORL configuration a cell's run would have (its flags over the sweep's)."""
    from privrl.runs.layer import RunSpec

    values = {**T11.MODEL_STAGE, **{k: v for k, v in cell.items() if k != "data"}}
    return RunSpec.from_mapping(values, out="unused").config.primorl_config("halfcheetah")


def _row(row: str, ret: float, score: float = 80.0, seed: int = 0) -> dict:
    settings = (
        {"system": "mopo"} if row == "mopo" else {"system": "primorl", **T11.row_settings(row)}
    )
    eps = {"z-1e-4": 1e10, "z-1e-3": 1e8, "eps": 10.0}.get(row)
    return {
        **settings,
        "status": "ok",
        "return_mean": ret,
        "normalised_score": score,
        "privacy_epsilon": eps,
        "curve": [ret / 2, ret],
        "seed": seed,
        "env_id": "privrl/HalfCheetah-v0",
    }


RETURNS = {
    "mopo": 6000,
    "no-clip": 4000,
    "no-noise": 5000,
    "z-1e-4": 5400,
    "z-1e-3": 1000,
    "eps": 800,
}


def test_summary_and_claims_on_two_seeds() -> None:
    rows = [_row(r, v + d, seed=s) for r, v in RETURNS.items() for s, d in ((0, -50), (1, 50))]
    s = T11.summarise(rows)
    assert s["z-1e-4"]["share"] == pytest.approx(90.0) and s["mopo"]["seeds"] == 2
    found = {c["claim"].split(" (")[0]: c for c in T11.claims(s)}
    verdicts = {k.split(" reaches")[0].split(" causes")[0]: c["kind"] for k, c in found.items()}
    # NO CLIP 66.7% ≥ 64%: holds; NO NOISE 83.3% ≥ 80%; z = 1e-4 90% ≥ 89%; z = 1e-3 far below
    assert list(verdicts.values()) == ["holds"] * 5
    rows[2:4] = [_row("no-clip", 3000, seed=s) for s in (0, 1)]  # 50% < 64%
    assert T11.claims(T11.summarise(rows))[0]["verdict"] == "does not hold"
    one_seed = T11.summarise([r for r in rows if r["seed"] == 0])
    kinds = [c["kind"] for c in T11.claims(one_seed)]
    assert kinds == ["inconclusive at our scale"] * 4 + ["holds"]  # ε's claim needs no run
    ours = T11.claims(one_seed)[2]["ours"]  # z = 1e-4: 5400 − 50 against MOPO's 6000 − 50
    assert ours == f"5350 (89.9% of MOPO; one seed, no CI) at T = {T11.ROUNDS}"
    # two seeds, 5350 and 5450: ± t(0.975, 1)·70.7/√2 = 635
    assert T11.claims(s)[2]["ours"] == f"5400 ± 635 (90.0% of MOPO; 2 seeds) at T = {T11.ROUNDS}"
    low = [dict(r, normalised_score=10.0) if r["system"] == "mopo" else r for r in rows]
    assert {c["kind"] for c in T11.claims(T11.summarise(low))[:4]} == {"vacuous"}


def test_report_without_the_dataset_says_what_would_run(tmp_path: Path) -> None:
    """Dataset absent: no cell runs; the report says how to build it and what the table would
    cost, states our ε for every private row, and its return claims are inconclusive."""
    why = "its recipe dataset primorl-halfcheetah.h5 is not built on this machine"
    path = write_report(tmp_path, [], T11.request(tmp_path).scale, data=None, wall=0.0, missing=why)
    text = path.read_text()
    assert "privrl data collect --recipe primorl-halfcheetah" in text and why in text
    assert "What did not fit" in text and f"T = {T11.ROUNDS} DP-FedAvg rounds" in text
    assert "no meaningful ε" in text and "| NO CLIP (z = 0, no clipping) | 0 | ∞ |" in text
    assert f"| {T11.CALIBRATED_Z:.3f} | 10.00 (PLD" in text
    found = json.loads((tmp_path / "claims.json").read_text())
    assert [c["kind"] for c in found] == ["inconclusive at our scale"] * 4 + ["holds"]
    assert all((tmp_path / c["plot"]).is_file() for c in found)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["not_run"] == why and metrics["rows"] == {}
    assert metrics["projected"]["core_hours"] == pytest.approx(T11.projected_cost()["core_hours"])


def test_report_with_rows(tmp_path: Path) -> None:
    rows = [_row(r, v + d, seed=s) for r, v in RETURNS.items() for s, d in ((0, -50), (1, 50))]
    text = write_report(tmp_path, rows, Scale(seeds=2), data=Path("h.h5"), wall=60.0)
    text = text.read_text()
    assert "| z = 1e-4 | 1e-4 |" in text and "90.0%" in text and "9729 ± 2018" in text
    assert (tmp_path / T11.PLOT_RETURNS).stat().st_size > 1000
    assert json.loads((tmp_path / "config.json").read_text())["rounds"] == T11.ROUNDS


def test_registered_on_the_sweep_runner() -> None:
    from reproductions.reproduce import REPRODUCTIONS

    entry = REPRODUCTIONS["primorl-table11"]
    assert entry.sweep and entry.load() is T11.table11


@pytest.mark.slow
def test_quick_reproduction_runs_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))  # the quick dataset, the cells
    report = T11.table11(tmp_path / "report", quick=True, workers=2)
    rows = (tmp_path / "report" / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 6  # six rows × one seed
    text = report.read_text()
    assert "Quick mode" in text and "not run" not in text.split("## Table 11")[1].split("\n\n")[1]
    found = json.loads((tmp_path / "report" / "claims.json").read_text())
    assert [c["kind"] for c in found][:4] == ["inconclusive at our scale"] * 4


def test_a_given_dataset_must_be_halfcheetah(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--data` is checked against its public header's env id before anything runs."""
    from types import SimpleNamespace

    import privrl.data as data
    from reproductions.primorl.sweeps import Request

    def header(env_id: str):
        return lambda path: SimpleNamespace(metadata=SimpleNamespace(env_id=env_id))

    monkeypatch.setattr(data, "read_header", header("privrl/Pendulum-v0"))
    with pytest.raises(ValueError, match="Table 11 is HalfCheetah"):
        T11.dataset(Request.of(Path("out"), data=Path("p.h5")))
    monkeypatch.setattr(data, "read_header", header("privrl/HalfCheetah-v0"))
    assert T11.dataset(Request.of(Path("out"), data=Path("h.h5"))) == (Path("h.h5"), "")


def test_a_diverged_model_is_a_result_of_its_row(tmp_path: Path) -> None:
    """Seeds whose released model sent every rollout to non-finite values (the noise drowned
    the model) have no return: the row says "model diverged", a share claim on it does not
    hold, z = 1e-3's decline does; they are not counted as returns."""
    rows = [_row(r, v + d, seed=s) for r, v in RETURNS.items() for s, d in ((0, -50), (1, 50))]
    rows = [r for r in rows if T11.row_of(r) not in ("z-1e-3", "eps")]
    for s in (0, 1):
        for row in ("z-1e-3", "eps"):
            failed = {**_row(row, 0.0, seed=s), "status": "failed", "return_mean": None}
            rows.append({**failed, "error": f"no model transitions: {T11.DIVERGED}"})
    summary = T11.summarise(rows)
    assert summary["z-1e-3"] == {"seeds": 0, "curves": [], "diverged": 2}
    assert list(summary) == list(T11.ROWS)
    decline = T11.claims(summary)[3]
    assert (decline["verdict"], decline["ours"]) == (
        "holds",
        f"model diverged on all 2 seed(s): no policy at T = {T11.ROUNDS}",
    )
    text = write_report(tmp_path, rows, Scale(seeds=2), data=Path("h.h5"), wall=1.0).read_text()
    assert (
        "| z = 1e-3 | 1e-3 | 2.55e+07 (RDP; no meaningful ε) | 3697 ± 1465 | 33.8% | model " in text
    )
    assert "model diverged (2 seed(s))" in text


def test_cells_left_by_a_time_budget_are_pending(tmp_path: Path) -> None:
    """A time budget stopped the sweep: the unfinished cells' rows say *pending* (not "not
    run", which means the dataset is absent), the report says how to finish, metrics.json says
    it is incomplete, and the claims on those rows are inconclusive."""
    done = [_row(r, RETURNS[r]) for r in ("mopo", "no-clip")]
    left = [{**_row(r, 0.0), "status": "missing"} for r in ("no-noise", "z-1e-4", "z-1e-3", "eps")]
    text = write_report(tmp_path, done + left, Scale(seeds=1), data=Path("h.h5"), wall=1.0)
    text = text.read_text()
    assert "**Incomplete**: 4 of 6 cells have not finished" in text
    assert "| NO NOISE (z = 0, C = 15) | 0 | ∞ | 8792 ± 2053 | 80.4% | pending |" in text
    assert "| 4000 (one seed, no CI) |" in text and "not run" not in text.split("## Table 11")[1]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["pending_cells"] == 4 and metrics["complete"] is False
    found = json.loads((tmp_path / "claims.json").read_text())
    assert found[1]["ours"] == f"pending (T = {T11.ROUNDS})"
    assert found[1]["kind"] == "inconclusive at our scale"


def test_the_model_error_column_reads_each_cells_public_split_mse(tmp_path: Path) -> None:
    """PRIMORL's released model and MOPO's trained one report the same public-split MSE in
    different places of metrics.json; the row shows the members' mean, averaged over seeds."""
    cells = {}
    for name, metrics in (
        ("mopo", {"dynamics": {"best_holdout_mse": [0.2, 0.3]}}),
        ("no-clip", {"best_holdout_mse": [45.0, 46.0, None]}),
    ):
        (tmp_path / name / "run").mkdir(parents=True)
        (tmp_path / name / "run" / "metrics.json").write_text(json.dumps(metrics))
        cells[name] = {**_row(name, RETURNS[name]), "dir": str(tmp_path / name)}
    assert T11.model_mse(cells["mopo"]) == pytest.approx(0.25)
    assert T11.model_mse(cells["no-clip"]) == pytest.approx(45.5)
    assert T11.model_mse(_row("eps", 1.0)) is None  # no cell directory
    text = write_report(tmp_path / "r", list(cells.values()), Scale(seeds=1), data=None, wall=0)
    report = text.read_text()
    assert "| 0.25 |" in report and "| 45.5 |" in report


def test_a_policy_driven_non_finite_by_the_model_is_a_diverged_seed() -> None:
    """The policy stage's refusal of a non-finite policy (and, in cells run before that check,
    the simulator's refusal of its NaN actions) is the row's outcome "model diverged", like a
    release whose every rollout diverged."""
    from privrl.primorl.policy_stage import POLICY_DIVERGED

    assert POLICY_DIVERGED in T11.DIVERGED_ERRORS
    failed = {**_row("eps", 0.0), "status": "failed"}
    rows = [_row("mopo", RETURNS["mopo"])]
    for error in (f"{POLICY_DIVERGED}: …", "actions contain NaN or infinite values"):
        rows.append({**failed, "error": error})
    assert T11.summarise(rows)["eps"]["diverged"] == 2


def test_the_report_compares_each_row_with_the_earlier_run(tmp_path: Path) -> None:
    """The earlier run in the paper's configuration (its record beside the report) is set
    beside each row: its model MSE, return and share of its MOPO, then this table's."""
    import shutil

    from reproductions.primorl.table11_report import earlier_summary

    record = Path(__file__).resolve().parents[2] / "docs/reproductions/primorl-table11"
    earlier = earlier_summary(record)
    assert set(earlier) == set(T11.ROWS) and earlier["eps"]["diverged"] == 1
    (tmp_path / T11.EARLIER).mkdir()
    shutil.copyfile(record / T11.EARLIER / "metrics.json", tmp_path / T11.EARLIER / "metrics.json")
    rows = [_row(r, RETURNS[r]) for r in ("mopo", "no-noise")]
    text = write_report(tmp_path, rows, Scale(seeds=1), data=Path("h.h5"), wall=1.0).read_text()
    section = text.split("## Against the paper's configuration")[1].split("\n## ")[0]
    assert "| NO NOISE (z = 0, C = 15) | 0.892 | — | -218 | 5000 | -3.8% | 83.3% |" in section
    assert "| ε = 10, z calibrated under PLD (ours) | — | — | model diverged | — |" in section
    assert "| z = 1e-4 | 0.907 | — | -242 | — | -4.2% | — |" in section
    alone = write_report(tmp_path / "alone", rows, Scale(seeds=1), data=None, wall=0.0)
    assert "is not beside this report" in alone.read_text()


def test_a_diverged_row_shows_the_error_of_the_release_it_kept(tmp_path: Path) -> None:
    """A cell whose policy diverged published no run, but kept its release: the row's model
    MSE is that release's public-split error (post-processing), so the table says how far
    the model was from MOPO's when SAC diverged in it."""
    import torch

    (tmp_path / "eps" / "run").mkdir(parents=True)
    release = {"fedavg": {"best_holdout_mse": [2.0, 3.0, float("nan")]}, "public_states": None}
    torch.save(release, tmp_path / "eps" / "run" / "released.pending.pt")
    failed = {**_row("eps", 0.0), "status": "failed", "dir": str(tmp_path / "eps")}
    failed["error"] = "the policy diverged in the model: …"
    rows = [_row("mopo", RETURNS["mopo"]), failed]
    summary = T11.summarise(rows)
    assert summary["eps"]["diverged"] == 1 and summary["eps"]["model_mse"] == pytest.approx(2.5)
    text = write_report(tmp_path / "r", rows, Scale(seeds=1), data=Path("h.h5"), wall=0.0)
    assert "| model diverged (1 seed(s)) | — | — | — | 2.5 |" in text.read_text()
