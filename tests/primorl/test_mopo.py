"""MOPO (split → dynamics → policy stage): per-task defaults, dataset checks, the normalised
score, the non-private report, start modes, resume from the work directory, and a tiny
end-to-end run on a small Pendulum dataset that beats the random policy."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.envs.batched import make_batched
from privrl.primorl import mopo as mopo_mod
from privrl.primorl.mopo import (
    MOPOConfig,
    check_dataset,
    mopo,
    mopo_privacy_report,
    normalised_score,
)
from privrl.privacy.report import PrivacyReport

torch.set_num_threads(1)


# --------------------------------------------------------------------------------------------
# a small Pendulum dataset (also used by tests/cli/test_train_mopo.py)
# --------------------------------------------------------------------------------------------


def pendulum_controller(obs: np.ndarray) -> np.ndarray:
    """Energy pumping far from upright, PD control near it (returns ≈ 177 of 200)."""
    c, s, w = obs[:, 0], obs[:, 1], obs[:, 2]
    th = np.arctan2(s, c)
    energy = 0.5 * w**2 + 15.0 * c  # θ̈ = 15 sin θ + 3u ⇒ E = ½θ̇² + 15 cos θ, 15 upright
    pump = 2.0 * np.sign(w * (15.0 - energy) + 1e-6)
    pd = np.clip(-(12.0 * th + 3.0 * w) / 3.0, -2.0, 2.0)
    return np.where(c > 0.85, pd, pump)[:, None]


def small_pendulum_dataset(
    episodes: int = 100,
    seed: int = 0,
    obs_dim: int = 3,
    act_dim: int = 1,
    env_id: str | None = None,
) -> TrajectoryDataset:
    """Episodes of an ε-greedy controller, ε ~ U(0, 1) per episode (a replay-like mix of random
    to expert behaviour), with random and expert reference returns. ``obs_dim``/``act_dim``
    other than 3/1 pad or cut the arrays (for shape-mismatch tests)."""
    rng = np.random.default_rng(seed)
    env = make_batched("pendulum", episodes, seed)
    eps = rng.uniform(0.0, 1.0, size=(episodes, 1))
    obs = env.reset(seed)
    observations, actions, rewards = [obs], [], []
    for _ in range(env.horizon):
        a = np.where(
            rng.random((episodes, 1)) < eps,
            rng.uniform(-2.0, 2.0, (episodes, 1)),
            pendulum_controller(obs),
        )
        obs, r, _ = env.step(a)
        observations.append(obs)
        actions.append(a)
        rewards.append(r)
    o = np.stack(observations, 1).astype(np.float32)
    a = np.stack(actions, 1).astype(np.float32)
    r = np.stack(rewards, 1)
    o = np.concatenate([o, np.zeros((*o.shape[:2], max(0, obs_dim - 3)), np.float32)], 2)
    a = np.concatenate([a, np.zeros((*a.shape[:2], max(0, act_dim - 1)), np.float32)], 2)
    o, a = o[..., :obs_dim], a[..., :act_dim]
    horizon = env.horizon
    last = np.zeros(horizon, bool)
    last[-1] = True
    eps_list = [
        {
            "observations": o[i],
            "actions": a[i],
            "rewards": r[i],
            "terminated": np.zeros(horizon, bool),
            "truncated": last,
        }
        for i in range(episodes)
    ]
    ref = {}
    for name, policy in (
        ("random", lambda x: rng.uniform(-2.0, 2.0, (len(x), 1))),
        ("expert", pendulum_controller),
    ):
        e = make_batched("pendulum", 50, seed + 1)
        x = e.reset(seed + 1)
        ret = np.zeros(50)
        for _ in range(horizon):
            x, rew, _ = e.step(policy(x))
            ret += rew
        ref[name] = float(ret.mean())
    meta = DatasetMetadata(
        observation_space=spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        action_space=spaces.Box(-2.0, 2.0, (act_dim,), np.float32),
        env_id=env_id or "privrl/Pendulum-v0",
        discount=0.99,
        horizon=horizon,
        extra={"reference_returns": ref},
    )
    return TrajectoryDataset.from_episodes(eps_list, metadata=meta)


def tiny_mopo_config(**kw: Any) -> MOPOConfig:
    base: dict[str, Any] = {
        "epochs": 2,
        "steps_per_epoch": 30,
        "rollout_batch_size": 64,
        "rollout_length": 5,
        "sac_hidden": (16, 16),
        "sac_batch_size": 32,
        "eval_episodes": 2,
        "final_epochs": 2,
        "checkpoint_every": 1,
        "dynamics_overrides": {"hidden": (16, 16), "steps_per_epoch": 20, "max_epochs": 2},
    }
    base.update(kw)
    return MOPOConfig.for_task("pendulum", **base)


@pytest.fixture(scope="module")
def dataset() -> TrajectoryDataset:
    return small_pendulum_dataset(100, seed=0)


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "penalty", "lam", "h", "holdout"),
    [
        ("pendulum", "mpd", 2.0, 30, 0.01),
        ("balance", "mpd", 2.0, 20, 0.01),
        ("swingup", "ma", 2.0, 20, 0.01),
        ("halfcheetah", "ma", 1.0, 5, 0.1),
    ],
)
def test_task_defaults_follow_the_spec(
    task: str, penalty: str, lam: float, h: int, holdout: float
) -> None:
    cfg = MOPOConfig.for_task(task)
    assert (cfg.penalty, cfg.lam, cfg.rollout_length) == (penalty, lam, h)
    assert cfg.holdout_fraction == holdout == cfg.dynamics.holdout_fraction
    assert cfg.real_ratio == 0.05 and cfg.starts == "dataset"
    assert cfg.target_entropy == -3.0 and cfg.steps_per_epoch == 1000
    stage = cfg.stage_config()
    assert stage.sac.target_entropy == -3.0 and stage.sac.hidden == (256, 256)
    assert stage.sac.lr == 3e-4 and stage.sac.gamma == 0.99 and stage.sac.tau == 0.005
    assert stage.eval_episodes == 10 and stage.final_epochs == 10 and stage.retain_epochs == 5
    assert MOPOConfig.for_task(task, target_entropy=None).stage_config().sac.target_entropy is None


def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match="real ratio"):
        MOPOConfig.for_task("pendulum", real_ratio=-0.1)
    with pytest.raises(ValueError, match="penalty"):
        MOPOConfig.for_task("pendulum", penalty="var")
    with pytest.raises(ValueError, match="start mode"):
        MOPOConfig.for_task("pendulum", starts="everywhere")
    with pytest.raises(ValueError, match="no MOPO defaults"):
        MOPOConfig.for_task("acrobot")


def test_check_dataset_names_env_and_shape_problems() -> None:
    assert check_dataset(small_pendulum_dataset(3)).name == "pendulum"
    with pytest.raises(ValueError, match="unknown control env id 'Acrobot-v1'"):
        check_dataset(small_pendulum_dataset(3, env_id="Acrobot-v1"))
    with pytest.raises(ValueError, match=r"observation shape mismatch.*\(4,\).*\(3,\)"):
        check_dataset(small_pendulum_dataset(3, obs_dim=4))
    with pytest.raises(ValueError, match=r"action shape mismatch.*\(2,\).*\(1,\)"):
        check_dataset(small_pendulum_dataset(3, act_dim=2))
    ds = small_pendulum_dataset(3)
    with pytest.raises(ValueError, match="no env id"):
        check_dataset(ds.with_metadata(ds.metadata.replace(env_id=None)))


def test_normalised_score() -> None:
    ref = {"random": 100.0, "expert": 180.0}
    assert normalised_score(180.0, ref) == pytest.approx(100.0)
    assert normalised_score(100.0, ref) == pytest.approx(0.0)
    assert normalised_score(160.0, ref) == pytest.approx(75.0)
    assert normalised_score(160.0, None) is None
    assert normalised_score(160.0, {"random": 1.0}) is None


def test_privacy_report_says_not_private() -> None:
    cfg = MOPOConfig.for_task("pendulum")
    report = mopo_privacy_report(cfg)
    assert not report.private and math.isinf(report.epsilon)
    assert report.system == "mopo" and report.unit.value == "trajectory"
    names = " | ".join(r.name for r in report.releases)
    assert "dynamics" in names and "real transitions" in names and "training-data states" in names
    assert all(r.extra.get("non_private") for r in report.releases)
    again = PrivacyReport.from_dict(report.to_dict())
    assert math.isinf(again.epsilon) and not again.private
    initial = mopo_privacy_report(MOPOConfig.for_task("pendulum", real_ratio=0, starts="initial"))
    # the model and its holdout read the data; the holdout is never named public
    assert [r.name.split(" ")[0] for r in initial.releases] == ["dynamics", "holdout"]
    assert any("initial-state distribution" in p for p in initial.public)
    assert not any("holdout" in p for p in initial.public)


def test_mopo_pipeline_outputs(dataset: TrajectoryDataset) -> None:
    res = mopo(dataset, tiny_mopo_config(), seed=0)
    assert res.split == {
        "train_episodes": 99,
        "holdout_episodes": 1,  # 1% of 100 episodes (a seeded split; MOPO is not private)
        "train_transitions": 99 * 200,
        "holdout_transitions": 200,
    }
    assert len(res.curve) == 2 and res.stage.eval_returns.shape == (2, 2)
    assert res.return_mean == pytest.approx(res.stage.eval_returns.mean())
    assert res.normalised_score == pytest.approx(
        normalised_score(res.return_mean, dataset.metadata.extra["reference_returns"])
    )
    assert res.dynamics["epochs"] <= 2 and len(res.dynamics["elites"]) == 3
    assert res.stage.start_mode == "dataset" and not res.report.private
    assert res.seconds > 0


@pytest.mark.parametrize("mode", ["initial", "public-split"])
def test_other_start_modes_run_and_are_named(dataset: TrajectoryDataset, mode: str) -> None:
    res = mopo(dataset, tiny_mopo_config(epochs=1, starts=mode, real_ratio=0.0), seed=0)
    assert res.stage.start_mode == mode and res.curve[0]["start_mode"] == mode
    assert res.report.notes[-1] == f"rollout start states: {mode}"


def test_zero_real_ratio_uses_no_real_buffer(
    dataset: TrajectoryDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    real_run = mopo_mod.run_policy_stage

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["real_buffer"])
        return real_run(*args, **kwargs)

    monkeypatch.setattr(mopo_mod, "run_policy_stage", spy)
    mopo(dataset, tiny_mopo_config(epochs=1, real_ratio=0.0), seed=0)
    mopo(dataset, tiny_mopo_config(epochs=1, real_ratio=0.05), seed=0)
    assert seen[0] is None and len(seen[1]) == 99 * 200


def test_workdir_resume_skips_model_training(
    dataset: TrajectoryDataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = mopo(dataset, tiny_mopo_config(epochs=2), seed=3, workdir=tmp_path)
    assert (tmp_path / "dynamics.pt").is_file() and (tmp_path / "checkpoint.pt").is_file()

    def no_training(*a: Any, **k: Any) -> Any:
        raise AssertionError("the dynamics model was retrained")

    monkeypatch.setattr(mopo_mod, "train_dynamics", no_training)
    longer = mopo(dataset, tiny_mopo_config(epochs=3), seed=3, workdir=tmp_path)
    assert longer.stage.resumed_from == 2 and len(longer.curve) == 3
    strip = [{k: v for k, v in r.items() if "seconds" not in k} for r in longer.curve[:2]]
    assert strip == [{k: v for k, v in r.items() if "seconds" not in k} for r in first.curve]
    with pytest.raises(ValueError, match="different run"):
        mopo(dataset, tiny_mopo_config(epochs=2), seed=4, workdir=tmp_path)


@pytest.mark.slow  # a learning check (12 s): MOPO's pipeline is covered fast by the tests above
def test_tiny_mopo_improves_over_the_random_policy(dataset: TrajectoryDataset) -> None:
    """100 episodes, a small SAC (64×64, α₀ = 0.05) for 5 × 500 steps: the mean of the last
    two epochs' real returns must clearly beat the random policy (normalised score > 25)."""
    cfg = MOPOConfig.for_task(
        "pendulum",
        epochs=5,
        steps_per_epoch=500,
        rollout_batch_size=1000,
        sac_hidden=(64, 64),
        sac_init_alpha=0.05,
        final_epochs=2,
        holdout_fraction=0.05,
        dynamics_overrides={"steps_per_epoch": 200, "max_epochs": 6},
    )
    res = mopo(dataset, cfg, seed=2)
    ref = dataset.metadata.extra["reference_returns"]
    assert res.return_mean > ref["random"] + 10.0, (res.return_mean, ref)
    assert res.normalised_score is not None and res.normalised_score > 25.0


# --------------------------------------------------------------------------------------------
# reproduction mopo-table1
# --------------------------------------------------------------------------------------------


def test_table1_names_the_command_for_missing_datasets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from privrl.experiments.mopo import table1

    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError) as info:
        table1(tmp_path / "out", seeds=3)
    msg = str(info.value)
    for task in ("pendulum", "balance", "swingup"):
        assert f"privrl data collect --recipe primorl-{task}" in msg
    assert not (tmp_path / "out" / "report.md").exists()


def test_table1_cells_are_train_mopo_runs_with_the_task_defaults() -> None:
    """The full reproduction's cells are `privrl train mopo` with no option: their library
    config is exactly `MOPOConfig.for_task` (the configuration the published report ran), and
    the grid is every task's dataset × the seeds."""
    from privrl.experiments import mopo as exp
    from privrl.primorl.mopo import MOPOConfig

    for task in exp.TABLE1_TASKS:
        assert exp.task_config(task, False).to_dict() == MOPOConfig.for_task(task).to_dict()
        quick = exp.task_config(task, True)
        assert (quick.epochs, quick.steps_per_epoch) == (2, 50)
    paths = {t: Path(f"{t}.h5") for t in exp.TABLE1_TASKS}
    doc = exp.sweep_doc(paths, Path("cells"), [0, 1, 2], quick=False)
    assert doc["system"] == "mopo"
    assert doc["cells"] == [{"data": f"{t}.h5", "seed": s} for t in paths for s in (0, 1, 2)]
    assert not set(doc) & set(exp.QUICK_OPTIONS)
    assert exp.QUICK_OPTIONS.items() <= exp.sweep_doc(paths, Path("c"), [0], quick=True).items()


def test_table1_runs_five_pendulum_seeds_and_three_per_cartpole(tmp_path: Path) -> None:
    """The paper's ≥ 5 seeds for Pendulum; a cell's key is its run only, so Pendulum's cells
    are the same whatever the cartpoles' seeds (finished ones are found again)."""
    from privrl.experiments import mopo as exp
    from privrl.runs.sweep import expand

    lists = exp._seed_lists(exp.TABLE1_TASKS, None, 0, quick=False)
    assert lists == {"pendulum": [0, 1, 2, 3, 4], "balance": [0, 1, 2], "swingup": [0, 1, 2]}
    assert exp._seed_lists(("pendulum",), 2, 3, quick=False) == {"pendulum": [3, 4]}
    assert exp._seed_lists(exp.TABLE1_TASKS, None, 0, quick=True)["pendulum"] == [0, 1]
    with pytest.raises(ValueError, match="seeds must be >= 1"):
        exp._seed_lists(("pendulum",), 0, 0, quick=False)
    data = _toy_dataset(tmp_path)
    paths = {"pendulum": data}
    per_task = expand(exp.sweep_doc(paths, tmp_path / "c", {"pendulum": [3, 4]}, quick=True))
    uniform = expand(exp.sweep_doc(paths, tmp_path / "c", [0, 1, 2, 3, 4], quick=True))
    keys = {c.values["seed"]: c.key for c in uniform.cells}
    assert [c.key for c in per_task.cells] == [keys[3], keys[4]]


@pytest.mark.slow
def test_table1_quick_runs_resumes_and_skips_finished_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quick mode builds the tiny recipe datasets, runs 3 tasks × 2 seeds as a sweep of the
    `mopo` system and writes the report; a rerun skips every finished cell."""
    import json

    from privrl.experiments import mopo as exp
    from privrl.runs import sweep

    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    report = exp.table1(out, quick=True)  # 6 runs of the system at its quick options
    text = report.read_text()
    assert "Quick mode" in text and "795.9 ± 6.5" in text and "976.3 ± 26.8" in text
    cells = exp.sweep_dir(quick=True) / "cells"
    finished = sorted(cells.glob("mopo-*/run/metrics.json"))
    assert len(finished) == 6
    seen = {
        (
            json.loads(p.read_text())["task"],
            json.loads(p.parent.joinpath("config.json").read_text()).get("seed"),
        )
        for p in finished
    }
    assert {t for t, _ in seen} == {"pendulum", "balance", "swingup"}
    assert (out / "plots" / "learning_curves.png").is_file()
    assert (out / "results.csv").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["tasks"]) == {"pendulum", "balance", "swingup"}
    assert all(len(t["seeds"]) == 2 for t in metrics["tasks"].values())

    def no_rerun(tasks: list[Any], *args: Any, **kwargs: Any) -> None:
        assert not tasks, f"finished cells were rerun: {[t['cell'] for t in tasks]}"

    monkeypatch.setattr(sweep, "run_local", no_rerun)
    exp.table1(out, quick=True)


def _toy_dataset(tmp_path: Path) -> Path:
    from privrl.data.io import save_hdf5

    return save_hdf5(small_pendulum_dataset(2, seed=1), tmp_path / "primorl-pendulum.h5")


def _summary(task: str, rets: tuple[float, ...], norm: float | None = 99.0) -> dict[str, Any]:
    return {
        "seeds": list(range(len(rets))),
        "return_mean": float(np.mean(rets)),
        "return_ci95": 1.0,
        "raw_return_mean": -140.0 if task == "pendulum" else float(np.mean(rets)),
        "raw_return_ci95": 16.3 if task == "pendulum" else 1.0,
        "normalised_mean": norm,
        "normalised_ci95": 1.5,
        "target": 90.0,
        "paper_mopo": (795.9, 6.5) if task == "pendulum" else (976.3, 26.8),
    }


def test_table1_claims_name_the_papers_scale_and_our_raw_return() -> None:
    """The paper's Pendulum number is on its own scale (not 'raw': a raw Pendulum-v1 return is
    ≤ 0); ours is given on both scales with its seed count; quick mode decides nothing."""
    from privrl.experiments import mopo_report as rep

    summary = {"pendulum": _summary("pendulum", (191.0,) * 5), "balance": _summary("b", (950.0,))}
    pend, bal = rep.gallery_claims(summary)
    assert "(raw)" not in pend.paper and "paper's own Pendulum scale" in pend.paper
    assert "raw Pendulum-v1 -140.0 ± 16.3" in pend.ours and "(5 seeds)" in pend.ours
    assert "dm_control scale" in bal.paper and "raw" not in bal.ours
    assert (pend.verdict, pend.kind) == ("holds", "holds")
    low = rep.gallery_claims({"pendulum": _summary("pendulum", (150.0,) * 5, norm=40.0)})[0]
    assert (low.verdict, low.kind) == ("does not hold", "does not hold")
    quick = rep.gallery_claims(summary, quick=True)
    assert {(c.verdict, c.kind) for c in quick} == {("inconclusive", "inconclusive at our scale")}


def _recorded_report(out: Path) -> None:
    """A report as `table1` writes it: pendulum and balance, 2 seeds each."""
    from privrl.experiments import mopo_report as rep

    runs = [
        {"task": t, "env_id": e, "seed": s, "return_mean": r + s, "normalised_score": 95.0,
         "seconds": 60.0, "curve": [r - 1, r + s]}
        for t, e, r in (("pendulum", "privrl/Pendulum-v0", 190.0),
                        ("balance", "privrl/CartpoleBalance-v0", 950.0))
        for s in (0, 1)
    ]  # fmt: skip
    datasets = {
        t: {"path": f"{t}.h5", "recipe": f"primorl-{t}", "episodes": 10, "transitions": 2000,
            "reference_returns": {"random": 10.0, "expert": 200.0}}
        for t in ("pendulum", "balance")
    }  # fmt: skip
    rep._write_table1(out, runs, datasets, ("pendulum", "balance"), 0, quick=False, wall=60.0)


def test_regenerate_rebuilds_the_report_from_its_runs_and_adds_finished_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`regenerate` runs nothing: the recorded runs give the same numbers again, and a finished
    cell of the default grid (here Pendulum seed 2) joins them."""
    import json

    from privrl.experiments import mopo as exp
    from privrl.runs import sweep

    out = tmp_path / "out"
    _recorded_report(out)
    before = json.loads((out / "metrics.json").read_text())["tasks"]
    monkeypatch.setattr(exp, "_dataset_path", lambda task, quick: tmp_path / f"no-{task}.h5")
    monkeypatch.setattr(sweep, "run_local", lambda *a, **k: pytest.fail("regenerate ran a cell"))
    exp.regenerate(out)
    again = json.loads((out / "metrics.json").read_text())["tasks"]
    for task in ("pendulum", "balance"):
        for key in ("seeds", "per_seed_return", "per_seed_normalised", "raw_return_mean"):
            assert again[task][key] == pytest.approx(before[task][key]), (task, key)

    # a finished cell: Pendulum seed 2 (its run directory as the run layer leaves it)
    run = tmp_path / "cell" / "run"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps(
        {"task": "pendulum", "env_id": "privrl/Pendulum-v0", "return_mean": 196.0,
         "normalised_score": 97.0, "seconds": 120.0}))  # fmt: skip
    (run / "config.json").write_text(json.dumps({"seed": 2}))
    (run / "metrics.csv").write_text("epoch,return_mean\n1,150.0\n2,196.0\n")
    cell = type("C", (), {"dir": tmp_path / "cell", "run_dir": run})()
    data = _toy_dataset(tmp_path)
    monkeypatch.setattr(exp, "_dataset_path", lambda task, quick: data)
    monkeypatch.setattr(sweep, "expand", lambda doc: type("S", (), {"cells": [cell]})())
    monkeypatch.setattr(sweep, "finished", lambda c: True)
    note = "Seed 2 of Pendulum: a test cell."
    text = exp.regenerate(out, note=[note]).read_text()
    pend = json.loads((out / "metrics.json").read_text())["tasks"]["pendulum"]
    assert pend["seeds"] == [0, 1, 2] and pend["per_seed_return"] == [190.0, 191.0, 196.0]
    assert "| pendulum | 3 |" in text and "| balance | 2 |" in text
    assert "## How these runs were obtained" in text and note in text
    assert "Regenerated from finished runs (the regeneration ran nothing)" in text
    assert json.loads((out / "config.json").read_text())["seeds"] == {"pendulum": 3, "balance": 2}


def test_report_states_the_rollout_batch_and_its_measured_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from privrl.experiments import mopo_report as rep

    out = tmp_path / "out"
    cost = {
        5000: {"transitions": 150_000, "cpu_total": 40.0, "cpu_epoch": 20.0, "peak_mb": 900.0},
        50000: {"transitions": 1_500_000, "cpu_total": 160.0, "cpu_epoch": 140.0,
                "peak_mb": 1900.0},
    }  # fmt: skip
    monkeypatch.setattr(rep, "ROLLOUT_BATCH_COST", cost)
    _recorded_report(out)
    text = (out / "report.md").read_text()
    assert "not the paper's 50,000" in text
    assert "| 50,000 | 1,500,000 | 7,500,000 | 140.0 | 160 | 1,900 |" in text
    assert "An epoch costs 7.0× as much at the paper's batch" in text
    assert "The paper's batch itself is not run" in text
