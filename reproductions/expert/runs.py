"""Running configurations: every run is a cell of a registered system (`dp-sgd`, its
non-private twin, `expert-dp`) run by the sweep runner (`privrl.runs.sweep`), so a finished
cell is skipped and an interrupted reproduction resumes; and the cached non-private reference
and learning-rate search, themselves sweeps."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from reproductions.expert.configs import (
    RunConfig,
    _base,
    _Context,
    _log,
    _private,
    _with_noise,
)
from reproductions.expert.paper import (
    PAPER_TABLE1_P,
    SEARCH_EPSILON,
    Scale,
    mean_ci,
    pick_best,
)

# Evaluation k of a run with seed s resets its environments from seed s·EVAL_SEED_STRIDE + k:
# the same evaluation episodes for every method at a given run seed.
EVAL_SEED_STRIDE = 100_003
# The sweep's results (metrics.json of the systems) that a reproduction's cell summary uses.
RUN_METRICS = ("return_mean", "return_std", "steps", "private_steps", "stable_size")


# ---------------------------------------------------------------------------------------------
# one configuration as a sweep cell
# ---------------------------------------------------------------------------------------------


def cell_values(cfg: RunConfig, data: Path) -> dict[str, Any]:
    """The sweep cell that runs ``cfg`` on the dataset file ``data``: the registered system
    (`dp-sgd`, `dp-sgd` with ``non_private``, or `expert-dp`) and its flags — the same learner,
    training length, noise, budget split and evaluation as the configuration says."""
    values: dict[str, Any] = {
        "data": str(data),
        "seed": cfg.seed,
        "algo": cfg.algo,
        "lr": cfg.lr,
        "batch_size": cfg.batch_size,
        "hidden": list(cfg.hidden),
        "eval_episodes": cfg.eval_episodes,
        "evals": cfg.n_evals,
        "eval_window": cfg.eval_window,
        "eval_seed": cfg.seed * EVAL_SEED_STRIDE,
        "eval_seed_step": 1,
        # private runs: z is calibrated for N (or K ≈ p·N) steps; in the paper's protocol
        # (z fixed) the budget sets the step count and N caps it
        "steps_cap": cfg.steps if cfg.protocol == "budget" else 2 * cfg.steps,
    }
    if cfg.eval_horizon is not None:
        values["eval_horizon"] = cfg.eval_horizon
    if cfg.method == "nonprivate":
        return {"system": "dp-sgd", **values, "non_private": True, "steps": cfg.steps}
    values.update(n_experts=cfg.m, epsilon=cfg.epsilon, delta=cfg.delta)
    if cfg.method == "dp-sgd":
        values.update(noise_multiplier=cfg.noise_multiplier)
        if cfg.explicit_steps:
            values["steps"] = cfg.steps
        return {"system": "dp-sgd", **values}
    _check_split(cfg)
    values.update(
        p=cfg.p,
        filter_rounds=cfg.rounds,
        filter_below=0.0,  # a run of "ours" below ε = 5 forces the filter (Table 2b)
        filter_calibration=cfg.calibration,
        accounting=cfg.accounting,
        dp_sgd_budget=cfg.dpsgd_budget,
        noise_multiplier=cfg.noise_multiplier or 1.0,  # p = 0: no DP-SGD step, z unused
    )
    if cfg.explicit_steps or cfg.p == 0.0:
        values["steps"] = cfg.steps
    return {"system": "expert-dp", **values}


def _check_split(cfg: RunConfig) -> None:
    """`expert-dp` splits (ε, δ) with the paper's rules (ε1 = 3ε/4, δ1 = 9δ/10; p = 0: all to
    the filter); a configuration with another split has no cell."""
    from privrl.expert import split_budget

    split = split_budget(
        float(cfg.epsilon or 0.0), float(cfg.delta or 0.0), float(cfg.p or 0.0), filter_below=0.0
    )
    want = (cfg.epsilon1, cfg.delta1, cfg.epsilon2, cfg.delta2)
    if (split.epsilon1, split.delta1, split.epsilon2, split.delta2) != want:
        raise ValueError(f"{cfg.key()}: budget split {want} is not expert-dp's {split.rule}")


def _metrics(cfg: RunConfig, row: dict[str, Any], cell: Any, random_return: float) -> dict:
    """A finished cell's results as the reports use them (one run of ``cfg``): its run's
    metrics.json (the results table prefixes the names that are also cell settings)."""
    run = _read_json(cell.run_dir / "metrics.json")
    return {
        "key": cfg.key(),
        "cell": cell.name,
        "env": cfg.env,
        "algo": cfg.algo,
        "method": cfg.method,
        "seed": cfg.seed,
        **{k: run.get(k) for k in RUN_METRICS},
        "return_mean": _float(run.get("return_mean")),
        "stable_size": int(run.get("stable_size") or 0),
        "epsilon": run.get("epsilon") if run.get("private") else None,
        "delta": run.get("delta"),
        "random_return": random_return,
        "wall_s": float(row.get("seconds") or 0.0),
        "privacy_json": str(cell.run_dir / "privacy.json"),
    }


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


# ---------------------------------------------------------------------------------------------
# running configurations: one sweep per phase (search, reference, runs)
# ---------------------------------------------------------------------------------------------


def cells_dir(ctx: _Context, where: str) -> Path:
    """Where the expert reproductions keep the cells of one phase (search, reference, runs):
    the cache (``$PRIVRL_CACHE/reproduce/expert/{full,quick}/<where>``), shared by every
    report, so a run that two reports need (Figure 3's ε = 10 cells are Table 2a's) is
    trained once; a cell's name carries its configuration's fingerprint."""
    from privrl.data import cache_dir

    scale = "quick" if ctx.scale.is_quick else "full"
    return cache_dir() / "reproduce" / "expert" / scale / where


def _adopt_earlier(ctx: _Context, where: str, cell: Any) -> None:
    """A finished cell of exactly this run left by an earlier layout, in which each report
    kept its cells under ``OUT/<where>/`` (this report's or a sibling's, e.g. Table 2a's
    beside Figure 3's): copied into the cache, so the sweep skips it."""
    from privrl.runs.sweep import read_record

    parent = ctx.out.resolve().parent
    for other in sorted(parent.glob(f"*/{where}/cells/{cell.name}")):
        if (read_record(other, cell.key) or {}).get("status") == "ok":
            shutil.copytree(other, cell.dir, dirs_exist_ok=True)
            _log(f"reused {cell.name} from {other.parent.parent.parent.name}")
            return


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _run_all(ctx: _Context, cfgs: Sequence[RunConfig], where: str) -> dict[str, dict[str, Any]]:
    """Run (or reuse) every configuration as a cell of one sweep in `cells_dir`; returns the
    metrics of the finished runs by configuration key."""
    from privrl.runs.sweep import expand, finished, run_sweep

    unique = list({c.key(): c for c in cfgs}.values())
    if not unique:
        return {}
    values = [cell_values(c, ctx.data[c.env].path_for(c.m, c.subset_seed)) for c in unique]
    doc: dict[str, Any] = {
        "out": str(cells_dir(ctx, where)),
        "cells": values,
        "sweep": {"backend": ctx.backend, "metrics": ["return_mean"]},
    }
    if ctx.workers is not None:
        doc["sweep"]["workers"] = ctx.workers
    sweep = expand(doc)
    for cell in sweep.cells:
        if not finished(cell):
            _adopt_earlier(ctx, where, cell)
    todo = [c for c in sweep.cells if not finished(c)]
    ran: list[Any] = []
    if todo and not ctx.out_of_time():
        _log(f"[{where}] {len(todo)} of {len(sweep.cells)} runs to go …")
        # the time budget stops new runs only: cells already started finish
        run_sweep(sweep, on_cell=lambda r: _log(_done_line(where, r)))
        ran = todo
    rows = _rows(sweep)
    done = {}
    for cfg, cell, row in zip(unique, sweep.cells, rows, strict=True):
        if row.get("status") == "ok":
            done[cfg.key()] = _metrics(cfg, row, cell, ctx.data[cfg.env].random_return)
        elif row.get("status") == "failed":
            ctx.failed[cfg.key()] = str(row.get("error"))
    ctx.n_run += sum(1 for c in ran if finished(c))  # trained by this invocation
    return done


def _rows(sweep: Any) -> list[dict[str, Any]]:
    from privrl.runs.sweep import collect_rows

    return collect_rows(sweep)


def _done_line(where: str, record: dict[str, Any]) -> str:
    if record.get("status") != "ok":
        return f"[{where}] FAILED {record.get('name')}: {record.get('error')}"
    return f"[{where}] done {record.get('name')} in {record.get('seconds') or 0:.0f} s"


# ---------------------------------------------------------------------------------------------
# non-private reference and hyper-parameter search (cached per dataset)
# ---------------------------------------------------------------------------------------------


def _scale_tag(scale: Scale) -> str:
    d = asdict(scale)
    keep = ("steps", "batch_size", "eval_episodes", "n_evals", "eval_window", "eval_horizon_cap")
    d = {k: d[k] for k in (*keep, "hidden", "fixed_noise", "is_quick")}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:8]


def _search_cfgs(
    ctx: _Context, env: str, algo: str, method: str, base_seed: int
) -> tuple[str, dict[float, RunConfig]]:
    """The cache key of the η search of (env, algo, method) and its runs (none when cached):
    every η of ``scale.lr_grid`` at ε = 10 on the search seed 1000 + base seed (ours at the
    paper's Table 1 p). Not privacy-accounted (as in the paper)."""
    scale, data = ctx.scale, ctx.data[env]
    grid = scale.lr_grid
    key = f"{env}/{algo}/{method}/{_scale_tag(scale)}/seed{1000 + base_seed}"
    cached = data.read_cache().get("search", {}).get(key)
    if cached is not None and cached.get("grid") == list(grid) and cached.get("complete"):
        return key, {}
    cfgs = {}
    for lr in grid:
        base = _base(env, algo, "nonprivate", 1000 + base_seed, lr, data, scale=scale, m=data.m)
        base = replace(base, role="search")
        if method != "nonprivate":
            p = 1.0 if method == "dp-sgd" else PAPER_TABLE1_P[(env, algo)][SEARCH_EPSILON]
            base = _with_noise(_private(base, epsilon=SEARCH_EPSILON, p=p), data, scale)
        cfgs[lr] = base
    return key, cfgs


def _record_search(
    ctx: _Context, env: str, key: str, cfgs: dict[float, RunConfig], done: dict[str, dict]
) -> None:
    grid = ctx.scale.lr_grid
    returns = {lr: done[c.key()]["return_mean"] for lr, c in cfgs.items() if c.key() in done}
    ctx.data[env].update_cache(
        "search",
        key,
        {
            "grid": list(grid),
            "returns": {f"{lr:g}": r for lr, r in returns.items()},
            "chosen": pick_best(returns, grid),
            "complete": len(returns) == len(grid),
            "method_config": next(iter(cfgs.values())).method,
            "computed_in": str(ctx.out),
        },
    )


def _search_lr(ctx: _Context, env: str, algo: str, method: str, base_seed: int) -> float:
    """η for (env, algo, method): the best of the search (`_search_cfgs`), cached."""
    key, cfgs = _search_cfgs(ctx, env, algo, method, base_seed)
    if cfgs:
        _record_search(ctx, env, key, cfgs, _run_all(ctx, list(cfgs.values()), "search"))
    return float(ctx.data[env].read_cache()["search"][key]["chosen"])


def lr_method_of(p: float) -> str:
    """Whose η a run at mixing rate p uses: DP-SGD's (p = 1), else ours'."""
    return "dp-sgd" if p == 1.0 else ("ours-p0" if p == 0.0 else "ours")


def _lr_method(method: str) -> str:
    return "ours" if method == "ours-p0" else method  # stable-only training uses ours' η


def _lr(ctx: _Context, env: str, algo: str, method: str, base_seed: int) -> float:
    if len(ctx.scale.lr_grid) == 1:  # a fixed η: nothing to search
        return float(ctx.scale.lr_grid[0])
    return _search_lr(ctx, env, algo, _lr_method(method), base_seed)


def _reference_cfgs(
    ctx: _Context, env: str, algo: str, seeds: Sequence[int]
) -> tuple[str, dict[int, float], list[RunConfig]]:
    """The cache key of R_nonprivate of (env, algo), its cached per-seed returns, and the
    non-private runs (on all data, one per reporting seed) still needed."""
    scale, data = ctx.scale, ctx.data[env]
    lr = _lr(ctx, env, algo, "nonprivate", seeds[0])
    key = f"{env}/{algo}/{_scale_tag(scale)}/lr{lr:g}"
    cached = data.read_cache().get("reference", {}).get(key, {})
    per_seed = {int(s): float(r) for s, r in cached.get("per_seed", {}).items()}
    cfgs = [
        replace(
            _base(env, algo, "nonprivate", s, lr, data, scale=scale, m=data.m), role="reference"
        )
        for s in seeds
        if s not in per_seed
    ]
    return key, per_seed, cfgs


def _record_reference(
    ctx: _Context, env: str, key: str, per_seed: dict[int, float], cfgs: list[RunConfig], done: dict
) -> None:
    for cfg in cfgs:
        if cfg.key() in done:
            per_seed[cfg.seed] = float(done[cfg.key()]["return_mean"])
    ctx.data[env].update_cache(
        "reference",
        key,
        {
            "per_seed": {str(s): r for s, r in sorted(per_seed.items())},
            "lr": float(key.rsplit("/lr", 1)[1]),
            "computed_in": str(ctx.out),
        },
    )


def _reference(ctx: _Context, env: str, algo: str, seeds: Sequence[int]) -> dict[str, Any]:
    """R_nonprivate of (env, algo): the mean over the reporting seeds of the non-private runs,
    cached next to the dataset."""
    key, per_seed, cfgs = _reference_cfgs(ctx, env, algo, seeds)
    if cfgs:
        _record_reference(ctx, env, key, per_seed, cfgs, _run_all(ctx, cfgs, "reference"))
    use = [per_seed[s] for s in seeds if s in per_seed]
    mean, ci = mean_ci(use)
    return {
        "lr": float(key.rsplit("/lr", 1)[1]),
        "per_seed": {s: per_seed[s] for s in seeds if s in per_seed},
        "mean": mean,
        "ci": ci,
        "random": ctx.data[env].random_return,
        "complete": len(use) == len(seeds),
    }


def prefetch(
    ctx: _Context, needs: Mapping[tuple[str, str], Iterable[str]], seeds: Sequence[int]
) -> dict[str, dict[str, Any]]:
    """Run the η searches, then the non-private references, that a reproduction's cells need
    (``needs``: the methods per (env, algo) loaded), each phase as one sweep: a few large
    sweeps instead of one per (env, algo, method). Returns the references by ``env/algo``."""
    searches = {}
    for (env, algo), methods in needs.items():
        if len(ctx.scale.lr_grid) == 1:  # a fixed η: no search
            break
        for method in dict.fromkeys(("nonprivate", *(_lr_method(m) for m in methods))):
            key, cfgs = _search_cfgs(ctx, env, algo, method, seeds[0])
            if cfgs:
                searches[(env, key)] = cfgs
    if searches:
        done = _run_all(ctx, [c for cfgs in searches.values() for c in cfgs.values()], "search")
        for (env, key), cfgs in searches.items():
            _record_search(ctx, env, key, cfgs, done)
    refs = {(env, algo): _reference_cfgs(ctx, env, algo, seeds) for env, algo in needs}
    todo = [c for _, _, cfgs in refs.values() for c in cfgs]
    if todo:
        done = _run_all(ctx, todo, "reference")
        for (env, _), (key, per_seed, cfgs) in refs.items():
            _record_reference(ctx, env, key, per_seed, cfgs, done)
    return {f"{env}/{algo}": _reference(ctx, env, algo, seeds) for env, algo in needs}
