"""Running configurations: the learner, the evaluation, one run's run directory, resume,
and the cached non-private reference and learning-rate search."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from privrl.experiments.expert.configs import (
    RunConfig,
    _base,
    _Context,
    _Data,
    _log,
    _private,
    _with_noise,
)
from privrl.experiments.expert.paper import (
    PAPER_TABLE1_P,
    SEARCH_EPSILON,
    Scale,
    mean_ci,
    pick_best,
)
from privrl.experiments.rundir import RunDir, read_run

# ---------------------------------------------------------------------------------------------
# learners
# ---------------------------------------------------------------------------------------------


def _learner_class(algo: str) -> type:
    """DiscreteCQL or DiscreteBCQ (linear imitation logits, the default; see docstring)."""
    from privrl.rl.bcq import DiscreteBCQ
    from privrl.rl.cql import DiscreteCQL

    return DiscreteCQL if algo == "cql" else DiscreteBCQ


@functools.cache
def _hiv_log_stats() -> tuple[np.ndarray, np.ndarray]:
    """Public HIV simulator statistics (8 s to simulate; once per process)."""
    from privrl.envs.hiv import log_state_statistics

    return log_state_statistics()  # public simulator rollouts, no private data


def _obs_transform(env_id: str) -> Any:
    from privrl.rl.discrete_common import ObsTransform

    if "HIV" in env_id:
        mean, std = _hiv_log_stats()
        return ObsTransform(
            log10=True,
            loc=tuple(float(v) for v in mean),
            scale=tuple(float(v) for v in std),
            source="log10 + public HIV simulator statistics",
        )
    return ObsTransform()


# ---------------------------------------------------------------------------------------------
# running one configuration
# ---------------------------------------------------------------------------------------------


def eval_env_factory(metadata: Any, horizon: int | None) -> Callable[[], Any]:
    """A factory of the dataset's (public) evaluation environment: ``metadata.env_id`` with
    the recipe's ``extra["env_kwargs"]`` (HIV: 20-day interval, 50 steps, reward scale 1e-6;
    ``reward_scale`` becomes ``RewardWeights(scale=…)``), truncated at ``horizon`` steps."""
    import gymnasium as gym

    from privrl.envs import register_envs

    register_envs()
    env_id = metadata.env_id
    kwargs = dict(metadata.extra.get("env_kwargs") or {})
    if "reward_scale" in kwargs:
        from privrl.envs.hiv import RewardWeights

        kwargs["reward"] = RewardWeights(scale=float(kwargs.pop("reward_scale")))
    if horizon is not None:
        kwargs["max_episode_steps"] = int(horizon)

    def make() -> Any:
        return gym.make(env_id, **kwargs)

    return make


def _evaluator(cfg: RunConfig, metadata: Any) -> Callable[[Any], np.ndarray]:
    from privrl.rl.discrete_common import evaluate_greedy

    make = eval_env_factory(metadata, cfg.eval_horizon)
    counter = iter(range(10**9))

    def evaluate(learner: Any) -> np.ndarray:
        # the same evaluation seeds for every method at a given run seed
        return evaluate_greedy(
            learner, make, episodes=cfg.eval_episodes, seed=cfg.seed * 100_003 + next(counter)
        )

    return evaluate


def _finished(run_dir: Path, cfg: RunConfig) -> dict[str, Any] | None:
    """The metrics of a finished run with exactly this configuration, else None."""
    run = read_run(run_dir)
    if run is None or run[0].get("run") != cfg.to_dict():
        return None
    return run[1]


def _execute(cfg: RunConfig, data: _Data, run_dir: Path) -> dict[str, Any]:
    """Train and evaluate one configuration; write its run directory; return its metrics."""
    import torch

    from privrl.expert.dpsgd import expert_dp_sgd
    from privrl.expert.selective import BudgetSplit, train_expert_dp

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    dataset, experts = data.subset(cfg.m, cfg.subset_seed)
    env_id = dataset.metadata.env_id
    obs_dim = int(np.asarray(dataset.observations).shape[1])
    n_actions = int(experts.n_actions)
    cls: Any = _learner_class(cfg.algo)
    learner = cls(
        obs_dim,
        n_actions,
        hidden=cfg.hidden,
        lr=cfg.lr,
        seed=cfg.seed,
        obs_transform=_obs_transform(env_id),
    )
    evaluate = _evaluator(cfg, dataset.metadata)
    rng = np.random.default_rng(cfg.seed)
    common = {
        "batch_size": cfg.batch_size,
        "rng": rng,
        "evaluate": evaluate,
        "n_evals": cfg.n_evals,
        "eval_window": cfg.eval_window,
    }
    extra: dict[str, Any] = {"stable_size": 0}
    if cfg.method == "nonprivate":
        result = expert_dp_sgd(
            learner,
            dataset,
            epsilon=None,
            delta=1.0 / cfg.m,
            steps=cfg.steps,
            private=False,
            **common,
        )
        report = result.report
    elif cfg.method == "dp-sgd":
        result = expert_dp_sgd(
            learner,
            dataset,
            epsilon=cfg.epsilon,
            delta=float(cfg.delta or 0.0),
            noise_multiplier=float(cfg.noise_multiplier or 0.0),
            steps=cfg.steps if cfg.explicit_steps else None,
            steps_cap=None if cfg.explicit_steps else 2 * cfg.steps,
            n_units=cfg.m,
            **common,
        )
        report = result.report
    else:
        split = BudgetSplit(
            float(cfg.epsilon or 0.0),
            float(cfg.delta or 0.0),
            float(cfg.p or 0.0),
            cfg.epsilon1,
            cfg.delta1,
            cfg.epsilon2,
            cfg.delta2,
            f"ε1 = {cfg.epsilon1:g}, ε2 = {cfg.epsilon2:g} (reproduction)",
        )
        stable_only = cfg.p == 0.0
        full = train_expert_dp(
            learner,
            dataset,
            experts,
            n_units=cfg.m,  # public: the recipe's m (or the public subset's)
            epsilon=float(cfg.epsilon or 0.0),
            delta=float(cfg.delta or 0.0),
            p=float(cfg.p or 0.0),
            rounds=cfg.rounds,
            split=split,
            noise_multiplier=float(cfg.noise_multiplier or 1.0),
            steps=cfg.steps if (cfg.explicit_steps or stable_only) else None,
            steps_cap=None if (cfg.explicit_steps or stable_only) else 2 * cfg.steps,
            accounting=cfg.accounting,  # type: ignore[arg-type]
            filter_calibration=cfg.calibration,
            dp_sgd_budget=cfg.dpsgd_budget,  # type: ignore[arg-type]
            **common,
        )
        result, report = full.training, full.report
        summary = full.filter_summary
        extra = {
            "stable_size": int(full.stable_size),
            "released_trajectories": summary.get("released_trajectories"),
            "filter_theta_shifted": summary.get("theta_shifted"),
            "filter_epsilon_prime": summary.get("epsilon_prime"),
            "filter_composition_epsilon": summary.get("composition_epsilon"),
        }
    returns = [float(np.mean(r)) for r in result.returns]
    metrics: dict[str, Any] = {
        "key": cfg.key(),
        "env": cfg.env,
        "algo": cfg.algo,
        "method": cfg.method,
        "seed": cfg.seed,
        "return_mean": float(np.mean(returns)) if returns else math.nan,
        "return_std": float(np.std(returns)) if returns else math.nan,
        "eval_returns": returns,
        "steps": int(result.steps),
        "private_steps": int(result.private_steps),
        "capped": bool(result.capped),
        "epsilon": report.epsilon if report.private else None,
        "delta": report.delta,
        "random_return": data.random_return,
        "wall_s": time.perf_counter() - t0,
        **extra,
    }
    from privrl.data.paths import portable_path

    run = RunDir(run_dir)
    run.write_config({"run": cfg.to_dict(), "dataset_path": portable_path(data.path)})
    run.write_curve(result.curve or [{"step": result.steps}])
    run.write_privacy(report)
    run.write_metrics(metrics)  # last: its presence marks the run finished
    return metrics


def _adopt_sibling(ctx: _Context, where: str, cfg: RunConfig) -> dict[str, Any] | None:
    """A finished run of exactly this configuration in a sibling reproduction directory
    (e.g. Figure 3's ε = 10 cells are Table 2a's runs): copied here and reused."""
    parent = ctx.out.resolve().parent
    for other in sorted(parent.glob(f"*/{where}/{cfg.key()}")):
        if other.parent.parent.resolve() == ctx.out.resolve():
            continue
        metrics = _finished(other, cfg)
        if metrics is not None:
            shutil.copytree(other, ctx.out / where / cfg.key(), dirs_exist_ok=True)
            _log(f"reused {cfg.key()} from {other.parent.parent.name}")
            return metrics
    return None


def _run_all(ctx: _Context, cfgs: Sequence[RunConfig], where: str) -> dict[str, dict[str, Any]]:
    """Run (or reuse) every configuration; returns metrics by key (finished runs only)."""
    done: dict[str, dict[str, Any]] = {}
    todo = []
    for cfg in cfgs:
        run_dir = ctx.out / where / cfg.key()
        metrics = _finished(run_dir, cfg) or _adopt_sibling(ctx, where, cfg)
        if metrics is not None:
            done[cfg.key()] = metrics
        elif cfg.key() not in {c.key() for c in todo}:
            todo.append(cfg)
    for i, cfg in enumerate(todo, start=1):
        if ctx.out_of_time():  # the budget stops new runs only; cells are still reported
            break
        data = ctx.data[cfg.env]
        _log(f"[{where} {i}/{len(todo)}] {cfg.key()} …")
        try:
            metrics = _execute(cfg, data, ctx.out / where / cfg.key())
        except Exception as exc:  # keep going; the run is retried on the next invocation
            ctx.failed[cfg.key()] = f"{type(exc).__name__}: {exc}"
            _log(f"  FAILED: {ctx.failed[cfg.key()]}")
            _log("".join(traceback.format_exception(exc)[-3:]).rstrip())
            continue
        ctx.n_run += 1
        done[cfg.key()] = metrics
        _log(
            f"  done in {metrics['wall_s']:.0f} s: return {metrics['return_mean']:.2f}, "
            f"{metrics['private_steps']}/{metrics['steps']} private steps, stable "
            f"{metrics['stable_size']} transitions"
        )
    return done


# ---------------------------------------------------------------------------------------------
# non-private reference and hyper-parameter search (cached per dataset)
# ---------------------------------------------------------------------------------------------


def _scale_tag(scale: Scale) -> str:
    d = asdict(scale)
    keep = ("steps", "batch_size", "eval_episodes", "n_evals", "eval_window", "eval_horizon_cap")
    d = {k: d[k] for k in (*keep, "hidden", "fixed_noise", "is_quick")}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:8]


def _search_lr(ctx: _Context, env: str, algo: str, method: str, base_seed: int) -> float:
    """η for (env, algo, method): the best of ``scale.lr_grid`` at ε = 10 on the search seed
    1000 + base seed (ours at the paper's Table 1 p). Not privacy-accounted (as in the paper)."""
    scale, data = ctx.scale, ctx.data[env]
    grid = scale.lr_grid
    key = f"{env}/{algo}/{method}/{_scale_tag(scale)}/seed{1000 + base_seed}"
    cached = data.read_cache().get("search", {}).get(key)
    if cached is not None and cached.get("grid") == list(grid) and cached.get("complete"):
        return float(cached["chosen"])
    cfgs = {}
    for lr in grid:
        base = _base(env, algo, "nonprivate", 1000 + base_seed, lr, data, scale=scale, m=data.m)
        base = replace(base, role="search")
        if method != "nonprivate":
            p = 1.0 if method == "dp-sgd" else PAPER_TABLE1_P[(env, algo)][SEARCH_EPSILON]
            base = _with_noise(_private(base, epsilon=SEARCH_EPSILON, p=p), data, scale)
        cfgs[lr] = base
    done = _run_all(ctx, list(cfgs.values()), "search")
    returns = {lr: done[c.key()]["return_mean"] for lr, c in cfgs.items() if c.key() in done}
    chosen = pick_best(returns, grid)
    complete = len(returns) == len(grid)
    data.update_cache(
        "search",
        key,
        {
            "grid": list(grid),
            "returns": {f"{lr:g}": r for lr, r in returns.items()},
            "chosen": chosen,
            "complete": complete,
            "method_config": next(iter(cfgs.values())).method,
            "computed_in": str(ctx.out),
        },
    )
    return chosen


def _lr(ctx: _Context, env: str, algo: str, method: str, base_seed: int) -> float:
    if method == "ours-p0":  # stable-only training uses ours' η
        method = "ours"
    return _search_lr(ctx, env, algo, method, base_seed)


def _reference(ctx: _Context, env: str, algo: str, seeds: Sequence[int]) -> dict[str, Any]:
    """R_nonprivate of (env, algo): non-private runs on all data, one per reporting seed,
    cached next to the dataset."""
    scale, data = ctx.scale, ctx.data[env]
    lr = _lr(ctx, env, algo, "nonprivate", seeds[0])
    key = f"{env}/{algo}/{_scale_tag(scale)}/lr{lr:g}"
    cached = data.read_cache().get("reference", {}).get(key, {})
    per_seed = {int(s): float(r) for s, r in cached.get("per_seed", {}).items()}
    need = [s for s in seeds if s not in per_seed]
    if need:
        cfgs = [
            replace(
                _base(env, algo, "nonprivate", s, lr, data, scale=scale, m=data.m), role="reference"
            )
            for s in need
        ]
        done = _run_all(ctx, cfgs, "reference")
        for cfg in cfgs:
            if cfg.key() in done:
                per_seed[cfg.seed] = float(done[cfg.key()]["return_mean"])
        data.update_cache(
            "reference",
            key,
            {
                "per_seed": {str(s): r for s, r in sorted(per_seed.items())},
                "lr": lr,
                "computed_in": str(ctx.out),
            },
        )
    use = [per_seed[s] for s in seeds if s in per_seed]
    mean, ci = mean_ci(use)
    return {
        "lr": lr,
        "per_seed": {s: per_seed[s] for s in seeds if s in per_seed},
        "mean": mean,
        "ci": ci,
        "random": data.random_return,
        "complete": len(use) == len(seeds),
    }
