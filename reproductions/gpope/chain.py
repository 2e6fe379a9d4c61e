"""GPOPE on the chain: Figure 1(a) (MSPBE vs m) and 1(b) (MSPBE vs step size).

The chain with its exact model (`_Chain`), the trials of each figure (`_chain_point`: tune on a
public sample, run GPOPE and the baselines at one m) and the entry points, which run each
point as a function cell on the sweep runner (`chain_units`). Each figure can be rebuilt
from its committed per-trial results (`fig1a_from_results`, `fig1b_from_results`): plot,
tables and claims come from the same writer as a full run (`chain_report`; the verdicts are
`chain_claims`)."""

from __future__ import annotations

import csv
import json
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privrl.envs.chain import ChainDomain
from privrl.ope import (
    LinearSystem,
    PublicTuning,
    StepSize,
    TrajectoryStats,
    first_visit_returns,
    trajectory_stats,
)
from privrl.ope.baselines import FirstVisit, lsl_estimate, lsl_sigma, lsw_estimate, lsw_sigma
from privrl.ope.lstd import lstd, solve_linear
from privrl.runs.rundir import write_rows
from reproductions.gpope import lstd_op_chain as op
from reproductions.gpope import minibatch_chain as mb
from reproductions.gpope.chain_report import Fig1aInputs, _write_fig1a, _write_fig1b
from reproductions.gpope.chain_units import cfg_json, run_chain_units
from reproductions.gpope.common import (
    CHAIN_EPS,
    CHAIN_M,
    CHAIN_TRIALS,
    DELTA,
    ETAS,
    ITER_PER_TRAJ,
    _Acc,
    _Cfg,
    _cfg,
    _gp_trials,
    _log,
    _lsl_c,
    _lsw_noisy,
    _rng,
    _ss,
    _tune,
)


class _Chain:
    """Chain domain, exact model, tabular view for the baselines."""

    def __init__(self) -> None:
        self.domain = ChainDomain()
        self.mdp = self.domain.mdp
        self.system = LinearSystem(*self.domain.linear_system(), info={"source": "exact model"})
        S = self.mdp.n_states
        self.Phi = np.eye(S)[:, : S - 1]
        self.rho = self.mdp.start_distribution
        self.return_range = self.mdp.r_max / (1.0 - self.mdp.gamma)

    def stats(self, data: Any) -> TrajectoryStats:
        return trajectory_stats(data, self.domain.features, self.mdp.gamma)

    def fv(self, data: Any) -> FirstVisit:
        return first_visit_returns(
            data, lambda o: np.asarray(o).reshape(-1), self.mdp.n_states, self.mdp.gamma
        )

    def sample(self, m: int, *keys: int) -> Any:
        return self.mdp.sample(m, seed=_rng(*keys))

    def zero_mspbe(self) -> float:
        """MSPBE(θ = 0): the trivial estimator, the reference every private estimate beats."""
        return float(self.system.mspbe(np.zeros(self.Phi.shape[1])))

    def lsw_sigma(self, fv: FirstVisit, epsilon: float) -> float:
        """DP-LSW's noise scale (V1) for these first-visit counts at (ε, δ = DELTA)."""
        return lsw_sigma(
            self.Phi,
            self.rho,
            fv.counts,
            epsilon=epsilon,
            delta=DELTA,
            return_range=self.return_range,
        )


def _chain_point(
    chain: _Chain,
    cfg: _Cfg,
    m: int,
    fig: int,
    acc: _Acc,
    *,
    step_factors: Sequence[float],
    epsilon: float,
    iterations: int,
    repeats: int,
    etas: Sequence[float],
    baselines: bool = True,
    accounting: str = "rigorous",
    label: str = "",
) -> tuple[PublicTuning, dict[str, Any]]:
    """Tune on a public sample, then run every trial at one m; rows into `acc`."""
    _log(f"chain fig{fig} m={m} N={iterations} ε={epsilon} ({accounting}): tuning")
    public = chain.sample(m, cfg.base, fig, 0, m)
    pub_stats = chain.stats(public)
    tuning = _tune(
        pub_stats,
        chain.system,
        m=m,
        epsilon=epsilon,
        iterations=iterations,
        repeats=repeats,
        seed=cfg.base * 1000 + fig,
        etas=etas,
        accounting=accounting,
        source="sampled from the chain with its own seed",
        orders=cfg.orders,
    )
    facts: dict[str, Any] = {
        "m": m,
        "N": iterations,
        "h": tuning.clip,
        "eta": tuning.step.eta,
        "sigma": tuning.sigma,
        "public_clipped_fraction": tuning.clipped_fraction,
    }
    c_lsl = None
    if baselines:
        c_lsl = _lsl_c(
            chain.fv(public),
            chain.Phi,
            chain.rho,
            chain.system,
            epsilon=epsilon,
            return_range=chain.return_range,
            seed=cfg.base,
            scorer=lambda t: np.asarray(chain.system.mspbe(t)),
        )
        facts["lsl_c"] = c_lsl
    steps = [tuning.step.scaled(f) for f in step_factors]

    def make(t: int) -> TrajectoryStats:
        return chain.stats(chain.sample(m, cfg.base, fig, 1, m, t))

    def references(t: int, st: TrajectoryStats) -> None:
        data = chain.sample(m, cfg.base, fig, 1, m, t)  # same seed: the trial's dataset
        th_l = lstd(data, chain.domain.features, chain.mdp.gamma)
        acc.add(m=m, method="LSTD (non-private)", trial=t, mspbe=chain.system.mspbe(th_l))
        if not baselines:
            return
        assert c_lsl is not None
        fv = chain.fv(data)
        rng = _rng(cfg.base, fig, 3, m, t)
        s1 = chain.lsw_sigma(fv, epsilon)
        th1 = _lsw_noisy(lsw_estimate(chain.Phi, chain.rho, fv), s1, rng, "DP-LSW θ")
        lam = c_lsl * m**0.4
        s2 = lsl_sigma(
            chain.Phi,
            chain.rho,
            fv.counts,
            m,
            lam,
            epsilon=epsilon,
            delta=DELTA,
            return_range=chain.return_range,
        )
        th2 = _lsw_noisy(lsl_estimate(chain.Phi, chain.rho, fv, lam), s2, rng, "DP-LSL θ")
        th_e = solve_linear(*st.mean()[:2])
        acc.add(m=m, method="V1 (DP-LSW)", trial=t, mspbe=chain.system.mspbe(th1), sigma=s1)
        acc.add(m=m, method="V2 (DP-LSL)", trial=t, mspbe=chain.system.mspbe(th2), sigma=s2)
        acc.add(
            m=m,
            method="empirical saddle point (non-private)",
            trial=t,
            mspbe=chain.system.mspbe(th_e),
        )

    theta, *_ = _gp_trials(
        make,
        cfg.trials,
        steps,
        clip=tuning.clip,
        epsilon=epsilon,
        iterations=iterations,
        seed=_ss(cfg.base, fig, 2, m),
        accounting=accounting,
        on_batch=references,
        orders=cfg.orders,
    )
    vals = np.asarray(chain.system.mspbe(theta))  # [D, V]
    for t in range(cfg.trials):
        for v, f in enumerate(step_factors):
            acc.add(m=m, method=f"GP{label} ({f:g}× step)", trial=t, mspbe=float(vals[t, v]))
    return tuning, facts


def fig1a(
    out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False, **where: Any
) -> Path:
    """Figure 1(a): chain, MSPBE vs m for GPOPE (tuned, 0.1×, 10×), V1, V2 at ε = 0.1, with
    minibatch GPOPE and LSTD-OP at ε ∈ {0.1, 1} beside them. Each m's paper-mode point, each
    (m, ε) minibatch point and each m's LSTD-OP points is a function cell (`chain_units`)."""
    t0 = time.time()
    cfg = _cfg(seeds, seed, quick, CHAIN_TRIALS)
    chain = _Chain()
    ms = (100,) if quick else CHAIN_M
    factors = (1.0, 0.1, 10.0)
    plain = cfg_json(cfg)
    specs = []
    for m in ms:
        point = {
            "step_factors": factors,
            "epsilon": CHAIN_EPS,
            "iterations": (2 if quick else ITER_PER_TRAJ) * m,
            "repeats": 1 if quick else 4,
            "etas": ETAS[::3] if quick else ETAS,
        }
        specs.append((f"point-m{m}", "unit_point", {"cfg": plain, "m": m, "fig": 1, **point}))
    specs += [
        (f"minibatch-m{m}-eps{e:g}", "unit_minibatch", {"cfg": plain, "m": m, "epsilon": e})
        for e in mb.EPSILONS
        for m in ms
    ]
    specs += [(f"lstd-op-m{m}", "unit_lstd_op", {"cfg": plain, "m": m}) for m in ms]
    results = run_chain_units("fig1a", quick, specs, **where)
    acc = _Acc([r for res in results for r in res["rows"]])
    facts = [res["facts"] for res in results[: len(ms)]]
    mb_facts = [res["facts"] for res in results[len(ms) : len(specs) - len(ms)]]
    op_facts = [f for res in results[len(specs) - len(ms) :] for f in res["facts"]]
    inputs = Fig1aInputs(
        chain,
        cfg,
        acc,
        ms,
        facts=facts,
        mb_facts=mb_facts,
        op_facts=op_facts,
        seconds=time.time() - t0,
        factors=factors,
    )
    return _write_fig1a(out, inputs)


def fig1a_from_results(out: Path, *, recompute_lstd_op: bool = False) -> Path:
    """Figure 1(a) rewritten from the committed per-trial results in `out` (paper-mode rows
    of results_per_trial.csv, minibatch rows of minibatch/results_per_trial.csv, the public
    facts of the config files): plot, tables and claims are rebuilt, nothing is re-run except
    the LSTD-OP series when the results lack it (or `recompute_lstd_op`), which is computed on
    the same trial datasets (same seeds)."""
    t0 = time.time()
    out = Path(out)
    conf = json.loads((out / "config.json").read_text(encoding="utf-8"))
    rows = _read_rows(out / "results_per_trial.csv")
    mb_dir = out / "minibatch"
    mb_methods = {mb.method(e) for e in mb.EPSILONS}
    from_subdir = not any(r["method"] in mb_methods for r in rows)
    if from_subdir:
        mb_rows = _read_rows(mb_dir / "results_per_trial.csv")
        rows += [r for r in mb_rows if r["method"] in mb_methods]
    mb_facts = (
        conf.get("minibatch_facts")
        or json.loads((mb_dir / "config.json").read_text(encoding="utf-8"))["facts"]
    )
    op_facts = conf.get("lstd_op_facts")
    ms = tuple(int(m) for m in conf["ms"])
    cfg = _Cfg(quick=False, trials=int(conf["trials"]), base=int(conf["base_seed"]), orders=None)
    chain = _Chain()
    is_op = [r["method"].startswith(("LSTD-OP", "ridge LSTD")) for r in rows]
    acc = _Acc([r for r, o in zip(rows, is_op, strict=True) if not o])
    op_seconds = conf.get("lstd_op_wall_time_s")
    if recompute_lstd_op or not op_facts or not any(is_op):
        t1 = time.time()
        op_facts = op.lstd_op_points(chain, cfg, ms, acc)
        op_seconds = time.time() - t1
    else:
        acc.rows += [r for r, o in zip(rows, is_op, strict=True) if o]
    seconds = float(conf.get("wall_time_s") or _report_wall_time(out / "report.md"))
    inputs = Fig1aInputs(
        chain,
        cfg,
        acc,
        ms,
        facts=conf["facts"],
        mb_facts=mb_facts,
        op_facts=op_facts,
        seconds=seconds,
        factors=tuple(conf["step_factors"]),
        rebuilt_in=time.time() - t0 if op_seconds is None else float(op_seconds),
    )
    report = _write_fig1a(out, inputs)
    if from_subdir:  # the minibatch rows stay in minibatch/ only (no second copy)
        kept = [r for r in acc.rows if r["method"] not in mb_methods]
        write_rows(out / "results_per_trial.csv", kept)
    return report


def _read_rows(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with open(path, encoding="utf-8", newline="") as fh:
        for r in csv.DictReader(fh):
            row: dict[str, Any] = {"m": int(r["m"]), "method": r["method"]}
            for k, v in r.items():
                if k in row or v in ("", None):
                    continue
                row[k] = int(v) if k == "trial" else float(v)
            out.append(row)
    return out


def _report_wall_time(path: Path) -> float:
    found = re.search(r"wall time: (\d+) s", path.read_text(encoding="utf-8"))
    return float(found.group(1)) if found else math.nan


def fig1b(
    out: Path, *, seeds: int | None = None, seed: int = 0, quick: bool = False, **where: Any
) -> Path:
    """Figure 1(b): chain, MSPBE vs step size at fixed m (ε = 0.1); the GP trials and the
    references are two function cells (`chain_units`)."""
    t0 = time.time()
    cfg = _cfg(seeds, seed, quick, CHAIN_TRIALS)
    chain = _Chain()
    m = 200 if quick else 1000
    etas = ETAS[::2] if quick else tuple(float(x) for x in np.geomspace(1e-5, 10.0, 13))
    plain = cfg_json(cfg)
    specs = [
        ("fig1b-gp", "unit_fig1b_gp", {"cfg": plain, "m": m, "etas": etas}),
        ("fig1b-refs", "unit_fig1b_refs", {"cfg": plain, "m": m}),
    ]
    gp, refs = run_chain_units("fig1b", quick, specs, **where)
    acc = _Acc([*gp["rows"], *refs["rows"]])
    return _write_fig1b(out, chain, cfg, acc, gp["facts"], seconds=time.time() - t0)


def fig1b_gp(chain: _Chain, cfg: _Cfg, m: int, etas: Sequence[float], acc: _Acc) -> dict[str, Any]:
    """Figure 1(b)'s GP trials: tune (h, η) on a public sample, run every step size; rows
    into `acc`; returns the figure's configuration facts."""
    n_iter = (2 if cfg.quick else ITER_PER_TRAJ) * m
    public = chain.sample(m, cfg.base, 2, 0, m)
    tuning = _tune(
        chain.stats(public),
        chain.system,
        m=m,
        epsilon=CHAIN_EPS,
        iterations=n_iter,
        repeats=1 if cfg.quick else 4,
        seed=cfg.base * 1000 + 2,
        etas=ETAS[::3] if cfg.quick else ETAS,
        source="sampled from the chain",
        orders=cfg.orders,
    )
    steps = [StepSize(eta=e) for e in etas]
    theta, *_ = _gp_trials(
        lambda t: chain.stats(chain.sample(m, cfg.base, 2, 1, m, t)),
        cfg.trials,
        steps,
        clip=tuning.clip,
        epsilon=CHAIN_EPS,
        iterations=n_iter,
        seed=_ss(cfg.base, 2, 2, m),
        orders=cfg.orders,
    )
    vals = np.asarray(chain.system.mspbe(theta))
    for t in range(cfg.trials):
        for v, e in enumerate(etas):
            acc.add(m=m, method="GP", eta=e, trial=t, mspbe=float(vals[t, v]))
    return {
        "figure": "fig1b",
        "m": m,
        "N": n_iter,
        "etas": list(etas),
        "trials": cfg.trials,
        "base_seed": cfg.base,
        "clip": tuning.clip,
        "epsilon": CHAIN_EPS,
        "eta_tuned": tuning.step.eta,
        "sigma": tuning.sigma,
    }


def _fig1b_references(chain: _Chain, cfg: _Cfg, m: int, acc: _Acc) -> None:
    """V1 (DP-LSW) and LSTD on the first 20 trial datasets: the baselines' level at this m."""
    for t in range(min(cfg.trials, 20)):
        data = chain.sample(m, cfg.base, 2, 1, m, t)
        fv = chain.fv(data)
        s1 = chain.lsw_sigma(fv, CHAIN_EPS)
        th1 = _lsw_noisy(
            lsw_estimate(chain.Phi, chain.rho, fv), s1, _rng(cfg.base, 2, 3, t), "DP-LSW θ"
        )
        acc.add(m=m, method="V1 (DP-LSW)", trial=t, mspbe=chain.system.mspbe(th1))
        th_l = lstd(data, chain.domain.features, chain.mdp.gamma)
        acc.add(m=m, method="LSTD (non-private)", trial=t, mspbe=chain.system.mspbe(th_l))


def fig1b_from_results(out: Path) -> Path:
    """Figure 1(b) rewritten from the committed per-trial results in `out`: the GP rows are
    read back, the V1/LSTD references recomputed on the same datasets when missing (20
    trials, seconds), the tuned η and σ read from the config (or the committed report)."""
    t0 = time.time()
    out = Path(out)
    conf = json.loads((out / "config.json").read_text(encoding="utf-8"))
    rows = _read_rows(out / "results_per_trial.csv")
    cfg = _Cfg(quick=False, trials=int(conf["trials"]), base=int(conf["base_seed"]), orders=None)
    chain = _Chain()
    acc = _Acc(rows)
    if not any(r["method"] == "V1 (DP-LSW)" for r in rows):
        _fig1b_references(chain, cfg, int(conf["m"]), acc)
    text = (out / "report.md").read_text(encoding="utf-8")
    if "eta_tuned" not in conf:
        found = re.search(r"tuned on the public sample: ([0-9.e+-]+)", text)
        assert found, "the committed report names the tuned η"
        conf["eta_tuned"] = min(ETAS, key=lambda e: abs(math.log(e / float(found.group(1)))))
    if "sigma" not in conf:
        found = re.search(r"σ = ([0-9.]+) \(rigorous\)", text)
        assert found, "the committed report names σ"
        conf["sigma"] = float(found.group(1))
    seconds = float(conf.get("wall_time_s") or _report_wall_time(out / "report.md"))
    return _write_fig1b(out, chain, cfg, acc, conf, seconds=seconds, rebuilt_in=time.time() - t0)
