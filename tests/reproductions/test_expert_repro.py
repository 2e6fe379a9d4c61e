"""Reproductions of Sharma et al. (reproductions.expert): the CI helper, the normalised
score, the learning-rate pick, run configurations and budget splits, the evaluation
environment (recipe env_kwargs), and the quick versions of expert-table2a/-table2b/-fig3/-fig4
end to end on ``--quick`` recipe data built in a temporary cache (CartPole and Acrobot only:
the reports must name the missing LunarLander and HIV datasets with their build command).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from reproductions import expert as E
from reproductions.expert import configs as C
from reproductions.expert import runs as R

torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------


def test_ci95_is_the_student_t_interval() -> None:
    x = np.array([0.2, 0.9, 0.5])
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert E.ci95(x) == pytest.approx((hi - lo) / 2, rel=1e-12)
    mean, half = E.mean_ci(x)
    assert mean == pytest.approx(0.5333333333333333) and half == pytest.approx(E.ci95(x))
    # with n = 3 the t quantile is 4.303, far wider than the normal 1.96
    assert E.ci95(x) == pytest.approx(4.302652729911275 * x.std(ddof=1) / math.sqrt(3))
    # non-finite values are dropped; fewer than two values have no interval
    assert E.ci95([0.2, np.nan, 0.9, 0.5]) == pytest.approx(E.ci95(x))
    assert math.isnan(E.ci95([1.0])) and math.isnan(E.ci95([]))
    assert all(math.isnan(v) for v in E.mean_ci([np.nan]))
    assert E.ci95([2.0, 2.0, 2.0]) == 0.0


def test_normalised_score() -> None:
    # (R − R_random)/(R_nonprivate − R_random): random → 0, non-private → 1, linear between
    assert E.normalised(21.9, 21.9, 1000.0) == 0.0
    assert E.normalised(1000.0, 21.9, 1000.0) == 1.0
    assert E.normalised(510.95, 21.9, 1000.0) == pytest.approx(0.5)
    assert E.normalised(1100.0, 0.0, 1000.0) == pytest.approx(1.1)  # above non-private
    # negative returns (Acrobot: random −200)
    assert E.normalised(-100.0, -200.0, -80.0) == pytest.approx(100 / 120)
    with pytest.raises(ValueError, match="undefined"):
        E.normalised(1.0, 5.0, 5.0)


def test_pick_best_learning_rate() -> None:
    grid = (5e-4, 1e-3, 5e-3)
    assert E.pick_best({5e-4: 10.0, 1e-3: 30.0, 5e-3: 20.0}, grid) == 1e-3
    assert E.pick_best({5e-4: 30.0, 1e-3: 30.0}, grid) == 5e-4  # tie: the earlier value
    assert E.pick_best({5e-4: np.nan, 1e-3: -5.0}, grid) == 1e-3  # nan never wins
    assert E.pick_best({}, grid) == 5e-4  # nothing finished: the first value


# ---------------------------------------------------------------------------------------------
# run configurations
# ---------------------------------------------------------------------------------------------


def _base(m: int = 3000, env: str = "cartpole", algo: str = "cql") -> E.RunConfig:
    return E.RunConfig(
        env=env,
        algo=algo,
        method="ours",
        seed=0,
        lr=1e-3,
        steps=5000,
        batch_size=128,
        hidden=(256, 256),
        eval_episodes=10,
        eval_horizon=1000,
        n_evals=10,
        eval_window=2500,
        dataset="experts-cartpole.h5",
        m=m,
    )


def _write_finished(cell_dir: Path, key: str, ret: float) -> None:
    """A finished sweep cell (cell.json, then the run directory) with fingerprint ``key``."""
    (cell_dir / "run").mkdir(parents=True)
    for name, data in (("config.json", {}), ("privacy.json", {}), ("metrics.json", {})):
        (cell_dir / "run" / name).write_text(json.dumps(data))
    metrics = {"return_mean": ret, "steps": 5, "private_steps": 5, "private": True}
    (cell_dir / "run" / "metrics.json").write_text(json.dumps(metrics))
    (cell_dir / "cell.json").write_text(json.dumps({"status": "ok", "key": key, "seconds": 1}))


def test_finished_runs_of_the_earlier_layout_are_reused(
    quick_cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished cell of exactly this run left in a reproduction directory by the earlier
    layout (cells under OUT/<phase>/) is copied into the cache and reused (no training); a cell
    directory of the same name holding another run is not."""
    from privrl.runs.sweep import expand

    quick_cache("cartpole")
    ctx = C._Context(tmp_path / "expert-fig3", E.Scale.quick(), deadline=0.0)  # no new runs
    data = ctx.load("cartpole")
    base = C._base("cartpole", "cql", "ours", 0, 1e-3, data, scale=ctx.scale, m=data.m)
    cfg = C._with_noise(C._private(base, epsilon=10.0, p=1.0), data, ctx.scale)
    other = replace(cfg, seed=1)
    doc = {"out": str(tmp_path / "x"), "cells": [R.cell_values(c, data.path) for c in (cfg, other)]}
    cell, cell_other = expand(doc).cells
    # the cells' cache of this test alone (the module's cache serves the end-to-end tests)
    monkeypatch.setattr("privrl.data.cache_dir", lambda: tmp_path / "cache")
    sibling = tmp_path / "expert-table2a" / "runs" / "cells"
    _write_finished(sibling / cell.name, cell.key, 123.0)
    _write_finished(sibling / cell_other.name, "another-run", 9.0)
    done = R._run_all(ctx, [cfg, other], "runs")
    assert list(done) == [cfg.key()] and done[cfg.key()]["return_mean"] == 123.0
    cells = R.cells_dir(ctx, "runs") / "cells"
    assert cells == tmp_path / "cache" / "reproduce" / "expert" / "quick" / "runs" / "cells"
    assert (cells / cell.name / "run" / "metrics.json").is_file()
    assert not (cells / cell_other.name).exists()
    assert not (ctx.out / "runs").exists()  # OUT holds the report alone


def test_a_run_is_a_cell_of_a_registered_system() -> None:
    """Each method maps to a system with the configuration's learner, steps, noise, budget
    split and evaluation seeds (evaluation k of seed s: s·100003 + k)."""
    base = _base()
    nonprivate = R.cell_values(replace(base, method="nonprivate"), Path("d.h5"))
    assert nonprivate["system"] == "dp-sgd" and nonprivate["non_private"] is True
    assert nonprivate["steps"] == base.steps and nonprivate["eval_seed"] == base.seed * 100_003
    assert nonprivate["eval_seed_step"] == 1 and nonprivate["hidden"] == list(base.hidden)
    dpsgd = R.cell_values(replace(C._private(base, epsilon=10.0, p=1.0), noise_multiplier=3.0),
                          Path("d.h5"))  # fmt: skip
    assert dpsgd["system"] == "dp-sgd" and dpsgd["noise_multiplier"] == 3.0
    assert dpsgd["n_experts"] == base.m and "steps" not in dpsgd  # N from the budget
    ours = R.cell_values(C._private(base, epsilon=10.0, p=0.5), Path("d.h5"))
    assert ours["system"] == "expert-dp" and ours["p"] == 0.5 and ours["filter_rounds"] == 25
    forced = C._private(base, epsilon=2.5, p=0.5, eps1_fraction=0.75)  # Table 2b's filter
    assert R.cell_values(forced, Path("d.h5"))["filter_below"] == 0.0
    with pytest.raises(ValueError, match="budget split"):
        R.cell_values(replace(forced, epsilon1=1.0), Path("d.h5"))


def test_budget_splits_follow_the_paper() -> None:
    base = _base()
    d = 1 / 3000
    dp = C._private(base, epsilon=10.0, p=1.0)  # p = 1: plain DP-SGD with all of (ε, δ)
    assert dp.method == "dp-sgd" and dp.epsilon == 10.0 and dp.delta == pytest.approx(d)
    assert dp.epsilon1 == 0.0
    ours = C._private(base, epsilon=10.0, p=0.8)  # ε1 = 3ε/4, δ1 = 9δ/10, T = 25
    assert ours.method == "ours" and ours.rounds == 25
    assert (ours.epsilon1, ours.epsilon2) == pytest.approx((7.5, 2.5))
    assert (ours.delta1, ours.delta2) == pytest.approx((0.9 * d, 0.1 * d))
    stable = C._private(base, epsilon=10.0, p=0.0)  # p = 0: everything to the filter
    assert stable.method == "ours" and stable.epsilon1 == 10.0 and stable.epsilon2 == 0.0
    low = C._private(base, epsilon=2.5, p=0.5)  # ε < 5: no filter (paper B.3)
    assert low.method == "dp-sgd"
    forced = C._private(base, epsilon=2.5, p=0.5, eps1_fraction=0.75)  # Table 2b column
    assert forced.method == "ours" and forced.epsilon1 == pytest.approx(1.875)
    assert forced.rounds == 20  # T of the nearest listed ε (5)
    tight = C._private(base, epsilon=10.0, p=0.8, calibration="tight", accounting="paper")
    assert tight.calibration == "tight" and tight.accounting == "paper"
    # LunarLander at ε = 7.5 uses T = 62; HIV T = 50
    assert C._private(_base(env="lunarlander"), epsilon=7.5, p=0.8).rounds == 62
    assert C._private(_base(env="hiv"), epsilon=10.0, p=0.9).rounds == 50


def test_run_config_key_identifies_the_configuration() -> None:
    a = C._private(_base(), epsilon=10.0, p=0.8)
    assert a.key() == C._private(_base(), epsilon=10.0, p=0.8).key()
    keys = {
        a.key(),
        C._private(_base(), epsilon=10.0, p=0.5).key(),
        C._private(_base(), epsilon=10.0, p=0.8, calibration="tight").key(),
        C._private(_base(), epsilon=10.0, p=0.8, accounting="paper").key(),
        a.__class__(**{**a.__dict__, "lr": 5e-3}).key(),
        a.__class__(**{**a.__dict__, "seed": 1}).key(),
        a.__class__(**{**a.__dict__, "noise_multiplier": 3.0}).key(),
    }
    assert len(keys) == 7
    assert a.key().startswith("cartpole-cql-ours-eps10-p0.8-") and a.key().endswith("-seed0")
    assert json.loads(json.dumps(a.to_dict()))["hidden"] == [256, 256]


def test_bcq_has_linear_imitation_logits_by_default() -> None:
    """BCQ (as the reproductions use it): no final ReLU on the imitation logits, so no output
    unit is dead for all states (with the ReLU, seed 0 on 4-dim inputs has one: logits ≡ 0)."""
    from privrl.rl.bcq import DiscreteBCQ

    obs = np.random.default_rng(0).normal(size=(256, 4))
    fixed = DiscreteBCQ(4, 2, seed=0)  # the `expert-dp` / `dp-sgd` systems' BCQ
    logits = fixed._imitation_logits(fixed.params, fixed._obs_tensor(obs)).detach().numpy()
    assert (logits < 0).any() and (logits > 0).any()
    assert fixed.config()["imitation_logits"] == "linear"
    relu = DiscreteBCQ(4, 2, seed=0, imitation_logits="relu")
    relu_logits = relu._imitation_logits(relu.params, relu._obs_tensor(obs)).detach().numpy()
    assert (relu_logits >= 0).all()


# ---------------------------------------------------------------------------------------------
# quick reproductions end to end
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_cache(tmp_path_factory: pytest.TempPathFactory):
    """A temporary PRIVRL_CACHE; ``quick_cache(env)`` builds that ``--quick`` recipe dataset
    there once (CartPole ~4 s, Acrobot ~8 s)."""
    from privrl.runs.recipes import expert as recipes_expert

    root = tmp_path_factory.mktemp("privrl_cache")
    built: set[str] = set()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRIVRL_CACHE", str(root))
        mp.delenv("PRIVRL_REPRO_BUDGET_S", raising=False)
        from privrl.data.paths import data_dir

        def build(*envs: str) -> Path:
            for env in envs:
                if env not in built:
                    getattr(recipes_expert, env)(data_dir(), quick=True)
                    built.add(env)
            return root

        yield build


def _metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def _check_run_dirs(out: Path) -> None:
    """The cells in the cache's shared sweep of runs; OUT holds the report alone."""
    sweep = Path(os.environ["PRIVRL_CACHE"]) / "reproduce" / "expert" / "quick" / "runs"
    runs = [cell / "run" for cell in (sweep / "cells").iterdir()]
    assert runs and (sweep / "results.csv").is_file()  # the sweep's results table
    assert not (out / "runs").exists()
    for run in runs:
        for name in ("config.json", "metrics.json", "metrics.csv", "privacy.json"):
            assert (run / name).is_file(), (run, name)
    for name in ("config.json", "metrics.json", "metrics.csv", "privacy.json", "report.md"):
        assert (out / name).is_file(), name


@pytest.mark.slow  # ~3 min on a busy 2-core machine (sweeps of process pools)
def test_quick_table2a_end_to_end(quick_cache, tmp_path, capsys) -> None:
    assert os.environ["PRIVRL_CACHE"] == str(quick_cache("cartpole"))
    out = tmp_path / "expert-table2a"
    report = E.table2a(out, quick=True)
    assert report == out / "report.md"
    text = report.read_text()
    _check_run_dirs(out)
    m = _metrics(out)
    # CartPole ran completely: 6 p-cells + tight + paper accounting, and the PLD calibration
    # alone and with the joint DP-SGD budget for CQL and BCQ; 2 seeds each
    cart = {k: v for k, v in m["cells"].items() if k.startswith("cartpole/")}
    assert len(cart) == 12 and all(len(v["seeds_finished"]) == 2 for v in cart.values())
    for algo, p in (("cql", "0.8"), ("bcq", "0.5")):
        pld = m["cells"][f"cartpole/{algo}/p{p}/pld"]["config"]
        joint = m["cells"][f"cartpole/{algo}/p{p}/pld-joint"]["config"]
        assert pld["calibration"] == joint["calibration"] == "pld"
        # "split" is the default, left out of the config so earlier runs keep their ids
        assert "dpsgd_budget" not in pld and joint["dpsgd_budget"] == "joint"
    assert m["missing_datasets"] == {
        "lunarlander": "privrl data collect --recipe experts-lunarlander --quick"
    }
    # the gallery row of the finished env, with the report's verdict (LunarLander not run)
    claims = json.loads((out / "claims.json").read_text(encoding="utf-8"))
    assert [c["claim"][:34] for c in claims] == ["ours ≥ DP-SGD at ε = 10, CartPole "] * 2
    assert all(c["verdict"] in ("holds", "does not hold") for c in claims)
    assert "privrl data collect --recipe experts-lunarlander --quick" in text
    for paper in ("1.03", "0.92", "0.67", "0.99", "0.31"):  # the paper's numbers beside ours
        assert f"| {paper} |" in text
    assert "NOT certified" in text and "tight filter calibration" in text
    # the quick scale fixes η (one value): no search, so no search table
    assert "## Learning-rate search" not in text and "fixed for every method" in text
    # the note on scale is generated (no regime report beside a tmp out)
    assert "**Scale and the paper's noise regime.**" in text
    assert "It has not been run beside this report." in text
    # the normalised score of every run uses the reference of its (env, algo)
    ref = m["references"]["cartpole/cql"]
    cell = m["cells"]["cartpole/cql/p1/main"]
    for ret, score in zip(cell["return_per_seed"], cell["normalised_per_seed"], strict=True):
        assert score == pytest.approx((ret - ref["random"]) / (ref["mean"] - ref["random"]))
    # p = 1 is DP-SGD; p = 0.8 is ours with ε1 = 7.5 and the stable-set size recorded
    assert cell["config"]["method"] == "dp-sgd"
    ours = m["cells"]["cartpole/cql/p0.8/main"]
    assert ours["config"]["epsilon1"] == 7.5 and len(ours["stable_size_per_seed"]) == 2
    assert m["cells"]["cartpole/cql/p0.8/tight"]["config"]["calibration"] == "tight"
    # every private run stays within its budget
    for v in cart.values():
        for eps in v["epsilon_reported"]:
            assert eps is None or eps <= 10.0 + 1e-9
    assert (out / "plots" / "table2a.png").is_file()
    # the per-dataset cache next to the dataset holds the reference (no search: η is fixed)
    cache = E.dataset_path("cartpole", True).with_name("experts-cartpole-quick.expert-repro.json")
    cached = json.loads(cache.read_text())
    assert "reference" in cached and "search" not in cached

    # resumable: a second invocation runs nothing and reproduces the report's numbers
    capsys.readouterr()
    E.table2a(out, quick=True)
    assert "…" not in capsys.readouterr().err  # no run started
    assert _metrics(out)["cells"] == m["cells"]


@pytest.mark.slow  # ~80 s; table2a / table2b-fig3 end to end cover the same runner by default
def test_quick_fig4_end_to_end(quick_cache, tmp_path, capsys) -> None:
    """Figure 4 at quick scale: m of the 50 quick Acrobot experts, δ = 1/m, ours
    (p = 0) vs DP-SGD; resumable."""
    quick_cache("acrobot")
    out4 = tmp_path / "expert-fig4"
    E.fig4(out4, quick=True)
    _check_run_dirs(out4)
    m4 = _metrics(out4)
    assert set(m4["cells"]) == {f"m{m}/{k}" for m in (20, 35, 50) for k in ("ours", "dp-sgd")}
    sub = m4["cells"]["m20/dp-sgd"]["config"]
    assert sub["m"] == 20 and sub["subset_seed"] == 0 and sub["delta"] == pytest.approx(1 / 20)
    assert m4["cells"]["m50/ours"]["config"]["subset_seed"] is None
    assert m4["cells"]["m20/ours"]["config"]["p"] == 0.0
    assert len(m4["gaps"]) == 3 and (out4 / "plots" / "fig4.png").is_file()
    assert "Gap grows monotonically with m" in (out4 / "report.md").read_text()

    # resumable: a second invocation starts no run
    capsys.readouterr()
    E.fig4(out4, quick=True)
    assert "…" not in capsys.readouterr().err
    assert _metrics(out4)["cells"] == m4["cells"]
    # a zero time budget starts nothing but still reports every finished cell
    E.fig4(out4, quick=True, time_budget_s=0)
    assert _metrics(out4)["cells"] == m4["cells"]
    # another output directory reports the same cells (they live in the cache, not in OUT)
    elsewhere = tmp_path / "elsewhere" / "fig4"
    E.fig4(elsewhere, quick=True, time_budget_s=0)
    assert _metrics(elsewhere)["cells"] == m4["cells"]
    # with no finished cell (an empty cache of cells) it lists the runs as pending, with the
    # resume command
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(R, "cells_dir", lambda ctx, where: tmp_path / "empty" / where)
        fresh = tmp_path / "elsewhere" / "fresh"
        text = E.fig4(fresh, quick=True, time_budget_s=0).read_text()
    m_fresh = _metrics(fresh)
    assert m_fresh["finished_runs"] == 0 and m_fresh["total_runs"] == 12
    assert "To finish: `nice -n 10 privrl reproduce expert-fig4 --quick" in text


@pytest.mark.slow  # ~3 min on a busy 2-core machine (sweeps of process pools)
def test_quick_table2b_and_fig3_end_to_end(quick_cache, tmp_path) -> None:
    quick_cache("cartpole", "acrobot")
    out = tmp_path / "expert-table2b"
    text = E.table2b(out, quick=True).read_text()
    _check_run_dirs(out)
    m = _metrics(out)
    assert set(m["cells"]) == {
        f"{e}/bcq/eps{eps:g}/{c}"
        for e, eps in (("acrobot", 2.5), ("cartpole", 2.5), ("cartpole", 5.0))
        for c in ("filter", "nofilter")
    }
    forced = m["cells"]["cartpole/bcq/eps2.5/filter"]["config"]
    assert forced["method"] == "ours" and forced["epsilon1"] == pytest.approx(1.875)
    assert m["cells"]["cartpole/bcq/eps2.5/nofilter"]["config"]["method"] == "dp-sgd"
    assert "0.74" in text and "0.95" in text and "0.28" in text

    out3 = tmp_path / "expert-fig3"
    text3 = E.fig3(out3, quick=True).read_text()
    _check_run_dirs(out3)
    m3 = _metrics(out3)
    assert set(m3["missing_datasets"]) == {"hiv", "lunarlander"}
    assert "privrl data collect --recipe experts-hiv --quick" in text3
    # ε = 5 on CartPole: Table 1 p = 1, so ours is DP-SGD and the cells share their runs
    a = m3["cells"]["cartpole/cql/eps5/ours"]
    b = m3["cells"]["cartpole/cql/eps5/dp-sgd"]
    assert a["config"] == b["config"] and a["return_per_seed"] == b["return_per_seed"]
    assert m3["cells"]["acrobot/cql/eps10/ours"]["config"]["p"] == 0.0
    assert (out3 / "plots" / "fig3.png").is_file()


def test_missing_dataset_report_names_the_build_command(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "empty"))
    out = tmp_path / "fig4"
    text = E.fig4(out, quick=True).read_text()
    assert "privrl data collect --recipe experts-acrobot --quick" in text
    m = _metrics(out)
    assert m["missing_datasets"] == {"acrobot": "privrl data collect --recipe experts-acrobot"
                                     " --quick"}  # fmt: skip
    assert m["finished_runs"] == 0 and not m["complete"]
    assert not (out / "runs").exists()


class _StubData:
    """The per-dataset cache interface of `_calibrated_noise`, in memory."""

    def __init__(self) -> None:
        self.cache: dict = {}

    def read_cache(self) -> dict:
        return self.cache

    def update_cache(self, section: str, key: str, value) -> None:
        self.cache.setdefault(section, {})[key] = value


def test_joint_budget_run_config_calibrates_less_noise_within_the_total() -> None:
    from dp_accounting import dp_event as de

    from privrl.privacy.accounting import epsilon as acc_epsilon
    from privrl.privacy.accounting import sampled_gaussian_event

    base = E.RunConfig(
        env="cartpole", algo="cql", method="ours", seed=0, lr=1e-3, steps=400, batch_size=64,
        hidden=(16,), eval_episodes=1, eval_horizon=10, n_evals=1, eval_window=10,
        dataset="d.h5", m=640,
    )  # fmt: skip
    split = C._private(base, epsilon=10.0, p=0.5, calibration="pld")
    joint = C._private(base, epsilon=10.0, p=0.5, calibration="pld", dpsgd_budget="joint")
    assert split.to_dict() == {k: v for k, v in joint.to_dict().items() if k != "dpsgd_budget"}
    assert "dpsgd_budget" not in split.to_dict()  # earlier runs keep their digests
    assert "joint-budget" in joint.key() and "budget" not in split.key()
    scale, data = E.Scale.full(), _StubData()  # full scale: z calibrated to the budget
    z_split = C._with_noise(split, data, scale).noise_multiplier
    z_joint = C._with_noise(joint, data, scale).noise_multiplier
    assert z_joint < z_split
    k = round(0.5 * 400)
    steps = sampled_gaussian_event(z_joint, k, sampling_probability=64 / 640)
    total = de.ComposedDpEvent([C._filter_event(joint), steps])
    assert acc_epsilon(total, joint.delta, backend="pld") <= 10.0 + 1e-9


def test_a_ledgered_dataset_gets_no_expert_subsets(quick_cache, tmp_path) -> None:
    """Structural rule: Figure 4's subsets are other files, hence other ledgers, so their runs
    would escape the dataset's budget; on a dataset with a ledger they are refused before
    anything is read or written."""
    import shutil

    from privrl.cli.main import main

    quick_cache("acrobot")
    path = tmp_path / "copy.h5"
    shutil.copyfile(E.dataset_path("acrobot", True), path)
    assert main(["ledger", "init", str(path), "--epsilon", "10", "--delta", "1e-5"]) == 0
    data = C._Data("acrobot", path)
    assert data.path_for(data.m, 0) == path  # all experts: the dataset itself
    with pytest.raises(ValueError, match="ledger"):
        data.path_for(20, 0)
    assert not (tmp_path / "subsets").exists()


# ---------------------------------------------------------------------------------------------
# the paper's noise regime, the paper's printed values, the kind of each verdict
# ---------------------------------------------------------------------------------------------


def test_scale_note_reads_the_regime_report_beside_it(tmp_path: Path) -> None:
    from reproductions.expert.verdicts import scale_note

    out = tmp_path / "expert-table2a"
    (regime := tmp_path / "expert-fig3" / "regime").mkdir(parents=True)
    cells = {
        "cartpole/cql/eps10/ours": {"normalised_mean": 0.9, "normalised_ci95": 0.1},
        "cartpole/cql/eps10/dp-sgd": {"normalised_mean": 0.2, "normalised_ci95": 0.1},
        "lunarlander/bcq/eps10/ours": {"normalised_mean": -0.07, "normalised_ci95": 1.9},
        "lunarlander/bcq/eps10/dp-sgd": {"normalised_mean": -0.03, "normalised_ci95": 2.4},
        "lunarlander/cql/eps10/ours": {"normalised_mean": 0.5},  # its DP-SGD did not run
    }
    (regime / "metrics.json").write_text(json.dumps({"cells": cells}))
    text = scale_note(out, [1.47, 1.47], [3.37, 4.22])[0]
    assert "1.47 for DP-SGD, 3.37–4.22 for ours" in text
    assert "(../expert-fig3/regime/report.md)" in text
    assert "ours ≥ DP-SGD in 1 of 2 comparisons" in text
    assert "CartPole CQL 0.90 vs 0.20, LunarLander BCQ -0.07 vs -0.03" in text
    assert "the 95% intervals apart in 1 of them" in text
    (regime / "metrics.json").unlink()
    assert scale_note(out, [], [])[0].endswith("It has not been run beside this report.")


def test_regime_runs_use_the_papers_protocol_with_a_fixed_public_z() -> None:
    """Regime scale: z is the fixed public value (the bottom of the paper's grid, never from
    the data), the budget sets the step count (no explicit steps) and N only caps it; the
    equal-steps configurations keep their keys (digests) unchanged."""
    from reproductions.expert.paper import REGIME_NOISE, REGIME_STEPS

    scale = E.Scale.regime()
    assert scale.is_regime and scale.fixed_noise == REGIME_NOISE and 10.0 <= REGIME_NOISE <= 80
    assert scale.steps == REGIME_STEPS and scale.batch_size in (64, 128, 256)
    data = _StubData()  # nothing calibrated: the noise is fixed
    base = replace(_base(), steps=scale.steps, batch_size=scale.batch_size)
    for p in (1.0, 0.8):
        cfg = C._with_noise(C._private(base, epsilon=10.0, p=p), data, scale)
        assert cfg.noise_multiplier == REGIME_NOISE and cfg.protocol == "budget"
        assert not cfg.explicit_steps and data.cache == {}
        cell = R.cell_values(cfg, Path("d.h5"))
        assert "steps" not in cell and cell["steps_cap"] == scale.steps
        assert cell["noise_multiplier"] == REGIME_NOISE
        assert cfg.to_dict()["protocol"] == "budget"
    full = C._private(_base(), epsilon=10.0, p=0.8)
    assert "protocol" not in full.to_dict()  # earlier runs keep their digests
    assert R.cell_values(full, Path("d.h5"))["steps_cap"] == 2 * full.steps
    regime = C._with_noise(C._private(base, epsilon=10.0, p=0.8), data, scale)
    assert regime.key() != replace(regime, protocol="calibrated").key()


def test_regime_uses_its_fixed_learning_rate_without_a_search(tmp_path) -> None:
    ctx = C._Context(tmp_path, E.Scale.regime(), deadline=0.0)
    assert R._lr(ctx, "cartpole", "cql", "dp-sgd", 0) == E.Scale.regime().lr_grid[0]
    assert R.prefetch(ctx, {}, [0]) == {}


def test_figure3_shows_the_papers_printed_values() -> None:
    from reproductions.expert.figures import _paper_pair
    from reproductions.expert.paper import PAPER_FIG3_POINTS

    # Table 2a at ε = 10 is a point of Figure 3 (ours at Table-1 p; DP-SGD)
    for (env, algo), row in E.PAPER_TABLE2A.items():
        p = E.PAPER_TABLE1_P[(env, algo)][10.0]
        assert PAPER_FIG3_POINTS[(env, algo, 10.0, "ours")] == row[p]
        assert PAPER_FIG3_POINTS[(env, algo, 10.0, "dp-sgd")] == row[1.0]
    assert _paper_pair("cartpole", "bcq", 10.0) == "0.99; 0.67"
    assert _paper_pair("cartpole", "bcq", 5.0) == "0.60; 0.60"  # p = 1: ours is DP-SGD
    assert _paper_pair("acrobot", "cql", 7.5) == "—"
    # the gallery's paper field carries the same printed values
    from reproductions.expert.verdicts import FIGURE_ONLY, fig3_paper

    assert fig3_paper("cartpole", "bcq", 10.0) == "ours 0.99 vs DP-SGD 0.67 (Table 2a)"
    assert fig3_paper("cartpole", "bcq", 5.0) == "DP-SGD 0.60 (Table 2b, ε1 = 0)"
    assert fig3_paper("acrobot", "cql", 7.5) == FIGURE_ONLY


def test_verdict_kinds() -> None:
    """At the equal-steps scale every verdict is 'inconclusive at our scale'; in the regime a
    verdict is its own kind only when the means differ by more than the wider CI."""
    from reproductions.expert import verdicts as V

    apart, close = ((0.9, 0.05), (0.5, 0.1)), ((0.9, 0.3), (0.8, 0.3))
    assert V.kind_of("holds", apart, regime=False) == V.AT_OUR_SCALE
    assert V.kind_of("holds", apart, regime=True) == "holds"
    assert V.kind_of("does not hold", apart[::-1], regime=True) == "does not hold"
    assert V.kind_of("holds", close, regime=True) == V.AT_OUR_SCALE
    assert V.kind_of("holds", ((0.9, math.nan), (0.5, math.nan)), regime=True) == V.AT_OUR_SCALE
    assert V.kind_of("inconclusive", apart, regime=True) == V.AT_OUR_SCALE
    scores = {
        "cartpole/cql/eps10/ours": (0.9, 0.05),
        "cartpole/cql/eps10/dp-sgd": (0.5, 0.1),
        "cartpole/bcq/eps10/ours": (0.5, 0.3),
        "cartpole/bcq/eps10/dp-sgd": (0.6, 0.3),
    }
    claims = E.gallery_claims_fig3(scores, ("cartpole",), ("cql", "bcq"), (10.0,), regime=True)
    assert [c.verdict for c in claims] == ["holds", "does not hold"]
    assert [c.kind for c in claims] == ["holds", V.AT_OUR_SCALE]
    assert [c.to_dict()["kind"] for c in claims] == ["holds", V.AT_OUR_SCALE]
    # at the equal-steps scale the same means are not evidence either way
    equal = E.gallery_claims_fig3(scores, ("cartpole",), ("cql", "bcq"), (10.0,))
    assert [c.kind for c in equal] == [V.AT_OUR_SCALE, V.AT_OUR_SCALE]


def test_raw_returns_beside_the_score_and_the_experts_reference() -> None:
    """The Acrobot BCQ reading: a non-private reference weaker than the private runs gives a
    score near 1.9; the raw return and the experts' median (−88) read the same run at ≈ 1.05."""
    from reproductions.expert.report import raw_return_section

    cells = {
        "acrobot/bcq/eps10/dp-sgd": {
            "label": "Acrobot BCQ ε = 10 DP-SGD",
            "return_mean": -82.3,
            "return_ci95": 2.0,
            "normalised_mean": 1.91,
            "normalised_ci95": 0.1,
        },
        "acrobot/bcq/eps10/ours": {"label": "pending", "return_mean": None},
    }
    lines = raw_return_section(cells, {"acrobot": -200.0})
    row = next(line for line in lines if line.startswith("| Acrobot BCQ"))
    assert row == "| Acrobot BCQ ε = 10 DP-SGD | -82.3 ± 2.0 | 1.91 ± 0.10 | 1.05 |"
    assert not any("pending" in line for line in lines)
    assert raw_return_section({}, {"acrobot": -200.0}) == []


@pytest.mark.slow  # a few minutes on a busy 2-core machine (a sweep of process pools)
def test_quick_regime_fig3_end_to_end(quick_cache, tmp_path) -> None:
    """The paper's protocol at the quick scale: z fixed, steps from the budget (capped), all
    three series, the steps/ε table, the paper's stars, and claims.json with kinds."""
    quick_cache("cartpole")
    out = tmp_path / "regime"
    text = E.fig3(out, quick=True, regime=True, envs=("cartpole",)).read_text()
    m = _metrics(out)
    cfg = m["cells"]["cartpole/cql/eps10/dp-sgd"]["config"]
    assert cfg["protocol"] == "budget" and cfg["noise_multiplier"] == E.Scale.quick().fixed_noise
    assert {"cartpole/cql/eps10/ours-pld", "cartpole/bcq/eps10/ours-pld"} <= set(m["cells"])
    assert "### Steps and ε spent" in text and "Not run in this regime: Acrobot" in text
    assert "Regenerate with `privrl reproduce expert-fig3/regime`" in text
    assert "wall time of this invocation" in text
    again = E.fig3(out, quick=True, regime=True, envs=("cartpole",)).read_text()
    assert "this invocation trained nothing" in again  # every run reused: nothing retrained
    assert "| 1.03; 0.92 |" in text  # the paper's CartPole CQL ε = 10 values
    claims = json.loads((out / "claims.json").read_text(encoding="utf-8"))
    assert claims and all(c["kind"] in ("holds", "does not hold", "inconclusive at our scale")
                          for c in claims)  # fmt: skip
    for cell in m["cells"].values():  # every capped run stays within its budget
        assert all(e is None or e <= cell["config"]["epsilon"] + 1e-6
                   for e in cell["epsilon_reported"])  # fmt: skip


def test_the_regime_report_is_a_registered_reproduction(monkeypatch, tmp_path) -> None:
    """`privrl reproduce expert-fig3/regime` runs Figure 3 in the paper's noise regime on
    CartPole and LunarLander and writes to the checkout's docs/reproductions/expert-fig3/regime
    by default (not the working directory's)."""
    from reproductions import reproduce as registry
    from reproductions.expert import figures

    seen: dict = {}

    def fake(out, **kwargs):
        seen.update(out=out, **kwargs)
        return out / "report.md"

    monkeypatch.setattr(figures, "fig3", fake)
    monkeypatch.chdir(tmp_path)
    registry.reproduce("expert-fig3/regime", seeds=1, workers=2)
    assert seen["regime"] is True and seen["envs"] == ("cartpole", "lunarlander")
    checkout = Path(__file__).resolve().parents[2]
    assert seen["out"] == checkout / "docs" / "reproductions" / "expert-fig3" / "regime"
    assert not (tmp_path / "docs").exists()
    assert seen["seeds"] == 1 and seen["workers"] == 2
