"""The PRIMORL recipes' stages: training the behaviour agents (with their checkpoints), the
allocation of episodes to behaviours, one shard of rollouts, and the reference returns (see
`privrl.runs.recipes.primorl`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from privrl.runs.recipes.common import atomic_write, int_seed, seed_seq, stage_fingerprint

if TYPE_CHECKING:
    from privrl.runs.recipes.primorl import AgentSpec, RecipeSpec


def _torch_save(obj: Any, path: Path) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            torch.save(obj, f)

    atomic_write(path, write)


def _scaler(task: Any) -> Any:
    from privrl.rl.mlp import ActionScaler

    a = task.act_dim
    return ActionScaler([task.action_low] * a, [task.action_high] * a)


def _make_agent(spec: AgentSpec, task: Any, seed: int) -> Any:
    low, high = [task.action_low] * task.act_dim, [task.action_high] * task.act_dim
    if spec.algo == "sac":
        from privrl.rl.sac import SAC, SACConfig

        cfg = SACConfig(hidden=tuple(spec.hidden), lr=spec.lr)
        return SAC(task.obs_dim, task.act_dim, low, high, cfg, seed=seed)
    from privrl.rl.td3 import TD3, TD3Config

    kw = {
        "hidden": tuple(spec.hidden),
        "actor_lr": spec.lr,
        "critic_lr": spec.lr,
        "expl_noise": spec.expl_noise,
    }
    cfg = TD3Config.ddpg(**kw) if spec.algo == "ddpg" else TD3Config(**kw)
    return TD3(task.obs_dim, task.act_dim, low, high, cfg, seed=seed)


def _actor_module(algo: str, task: Any, hidden: Sequence[int], state: dict) -> torch.nn.Module:
    from privrl.rl.mlp import DeterministicActor, SquashedGaussianActor

    if algo == "sac":
        m: torch.nn.Module = SquashedGaussianActor(task.obs_dim, task.act_dim, hidden)
    else:
        m = DeterministicActor(task.obs_dim, task.act_dim, hidden)
    m.load_state_dict(state)
    return m.requires_grad_(False).eval()


def _unit_actions(actor: torch.nn.Module, algo: str, obs: np.ndarray) -> np.ndarray:
    """Deterministic actions in ``[-1, 1]`` (SAC: tanh of the Gaussian mean)."""
    with torch.no_grad():
        o = torch.as_tensor(obs, dtype=torch.float32)
        a = actor(o, deterministic=True, with_logprob=False)[0] if algo == "sac" else actor(o)
    return a.numpy().astype(np.float64)


def _evaluate(
    task: Any,
    act_fn: Callable[[np.ndarray], np.ndarray],
    n_episodes: int,
    seed: int,
) -> np.ndarray:
    """Undiscounted returns of ``n_episodes`` in the batched simulator (one batch)."""
    from privrl.envs.batched import make_batched

    env = make_batched(task, n_episodes)
    obs = env.reset(seed=seed)
    ret = np.zeros(n_episodes)
    for _ in range(env.horizon):
        obs, r, _ = env.step(act_fn(obs))
        ret += r
    return ret


def _train_agent(
    spec: RecipeSpec, i: int, task: Any, seed: int, path: Path, progress: bool
) -> dict[str, Any]:
    """Stage: train agent ``i`` and keep its deterministic checkpoints (with eval returns)."""
    from privrl.envs.batched import make_batched
    from privrl.rl.replay import OnlineTrainingSettings, train_online
    from privrl.runs.progress import progress_bars

    a_spec = spec.agents[i]
    ss = seed_seq(seed, 1, i)
    s_agent, s_env, s_eval = (int_seed(s) for s in ss.spawn(3))
    agent = _make_agent(a_spec, task, s_agent)
    env = make_batched(task, a_spec.num_envs)
    first = a_spec.first_checkpoint or a_spec.checkpoint_every
    fingerprint = stage_fingerprint([spec.task, dataclasses.asdict(a_spec), seed, i])
    kept: dict[str, Any] = {"checkpoints": []}  # saved in (and restored from) snapshots

    def on_checkpoint(step: int, ag: Any, result: Any) -> None:
        if step < first:
            return
        checkpoints = kept["checkpoints"]
        actor_state = {k: v.detach().clone() for k, v in ag.actor.state_dict().items()}
        rets = _evaluate(
            task,
            lambda o: ag.act(o, deterministic=True),
            spec.eval_episodes,
            s_eval + len(checkpoints),
        )
        checkpoints.append(
            {
                "step": step,
                "actor": actor_state,
                "eval_return": float(rets.mean()),
                "eval_std": float(rets.std()),
            }
        )

    snapshot = path.with_name(path.stem + ".partial.pt")
    update_after = a_spec.start_steps if a_spec.update_after is None else a_spec.update_after
    with progress_bars(progress) as report:
        res = train_online(
            OnlineTrainingSettings(
                total_steps=a_spec.steps,
                start_steps=a_spec.start_steps,
                update_after=update_after,
                checkpoint_every=a_spec.checkpoint_every,
                buffer_capacity=max(a_spec.steps, 1),
                description=f"{spec.name}: agent {i} ({a_spec.algo})",
                snapshot_tag=fingerprint,
            ),
            agent,
            env,
            callback=on_checkpoint,
            progress=report,
            seed=s_env,
            snapshot_path=snapshot,
            extra_state=kept,
        )
    out = {
        "fingerprint": fingerprint,
        "algo": a_spec.algo,
        "hidden": list(a_spec.hidden),
        "checkpoints": kept["checkpoints"],
        "train_steps": res.episode_steps,
        "train_returns": res.episode_returns,
        "wall_time": res.wall_time,
    }
    _torch_save(out, path)
    snapshot.unlink(missing_ok=True)
    return out


def _load_stage(path: Path, fingerprint: str, loader: Callable[[Path], Any]) -> Any | None:
    if not path.is_file():
        return None
    try:
        obj = loader(path)
    except Exception:  # a corrupt or foreign file: rebuild the stage
        return None
    return obj if obj.get("fingerprint") == fingerprint else None


@dataclass
class _Job:
    """Episodes of one behaviour: a checkpoint (agent, index) with noise σ, or uniform random."""

    agent: int | None
    checkpoint: int | None
    noise: float
    n_episodes: int
    label: str = ""
    shards: list[int] = field(default_factory=list)


def _split_even(total: int, parts: int) -> list[int]:
    base, rem = divmod(total, parts)
    return [base + (1 if j < rem else 0) for j in range(parts)]


def _plan_jobs(spec: RecipeSpec, agents: list[dict[str, Any]]) -> tuple[list[_Job], dict]:
    """Allocate the K episodes to behaviours (see the module docstring)."""
    n_random = round(spec.random_share * spec.n_episodes)
    n_policy = spec.n_episodes - n_random
    jobs: list[_Job] = []
    info: dict[str, Any] = {}
    if spec.mode == "replay":
        refs = [(i, j) for i, a in enumerate(agents) for j in range(len(a["checkpoints"]))]
        if not refs:
            raise RuntimeError(f"{spec.name}: no checkpoints were kept")
        for (i, j), n in zip(refs, _split_even(n_policy, len(refs)), strict=True):
            for sigma, m in zip(
                spec.noise_levels, _split_even(n, len(spec.noise_levels)), strict=True
            ):
                jobs.append(_Job(i, j, sigma, m))
    else:  # medium_expert
        flat = [
            (i, j, c["eval_return"])
            for i, a in enumerate(agents)
            for j, c in enumerate(a["checkpoints"])
        ]
        ei, ej, best = max(flat, key=lambda t: t[2])
        target = spec.medium_fraction * best
        mi, mj, med = min(flat, key=lambda t: abs(t[2] - target))
        info = {
            "expert": {"agent": ei, "checkpoint": ej, "eval_return": best},
            "medium": {"agent": mi, "checkpoint": mj, "eval_return": med},
        }
        n_med, n_exp = _split_even(n_policy, 2)
        for (i, j), n in (((mi, mj), n_med), ((ei, ej), n_exp)):
            for sigma, m in zip(
                spec.noise_levels, _split_even(n, len(spec.noise_levels)), strict=True
            ):
                jobs.append(_Job(i, j, sigma, m))
    if n_random:
        jobs.append(_Job(None, None, 0.0, n_random))
    jobs = [j for j in jobs if j.n_episodes > 0]
    for job in jobs:
        if job.agent is None:
            job.label = "uniform random"
        else:
            c = agents[job.agent]["checkpoints"][job.checkpoint]
            job.label = (
                f"{agents[job.agent]['algo']}#{job.agent} step {c['step']} sigma {job.noise:g}"
            )
    return jobs, info


def _shards(spec: RecipeSpec, jobs: list[_Job]) -> list[tuple[int, int, int]]:
    """(job index, first episode of the job, n episodes) per shard; assigns job.shards."""
    out: list[tuple[int, int, int]] = []
    for k, job in enumerate(jobs):
        done = 0
        for m in _split_even(job.n_episodes, -(-job.n_episodes // spec.shard_episodes)):
            job.shards.append(len(out))
            out.append((k, done, m))
            done += m
    return out


def _rollout_shard(
    spec: RecipeSpec,
    task: Any,
    job: _Job,
    n: int,
    agents: list[dict[str, Any]],
    ss: np.random.SeedSequence,
) -> dict[str, np.ndarray]:
    """``n`` episodes of one behaviour, stepped together; float32 arrays [n, H(+1), ·]."""
    from privrl.envs.batched import make_batched

    s_env, s_noise = ss.spawn(2)
    rng = np.random.default_rng(s_noise)
    env = make_batched(task, n)
    scaler = _scaler(task)
    H, d, a_dim = task.horizon, task.obs_dim, task.act_dim
    obs_buf = np.empty((n, H + 1, d), dtype=np.float32)
    act_buf = np.empty((n, H, a_dim), dtype=np.float32)
    rew_buf = np.empty((n, H), dtype=np.float32)
    actor = None
    if job.agent is not None:
        a = agents[job.agent]
        actor = _actor_module(
            a["algo"], task, a["hidden"], a["checkpoints"][job.checkpoint]["actor"]
        )
    obs = env.reset(seed=int_seed(s_env))
    for t in range(H):
        if actor is None:
            unit = rng.uniform(-1.0, 1.0, (n, a_dim))
        else:
            unit = _unit_actions(actor, agents[job.agent]["algo"], obs)
            if job.noise > 0:
                unit = np.clip(unit + job.noise * rng.standard_normal(unit.shape), -1.0, 1.0)
        act = scaler.to_env_np(unit)
        obs_buf[:, t] = obs
        act_buf[:, t] = act
        obs, rew, _ = env.step(act)
        rew_buf[:, t] = rew
    obs_buf[:, H] = obs
    return {"obs": obs_buf, "act": act_buf, "rew": rew_buf}


def _reference_returns(
    spec: RecipeSpec, task: Any, agents: list[dict[str, Any]], seed: int
) -> dict[str, Any]:
    """Stage: R_rand (uniform actions) and R_exp (best checkpoint, deterministic) on
    ``reference_episodes`` fresh episodes each."""
    start = time.perf_counter()
    ss_rand, ss_exp, ss_act = seed_seq(seed, 2).spawn(3)
    rng = np.random.default_rng(ss_act)
    scaler = _scaler(task)
    n = spec.reference_episodes
    r_rand = _evaluate(
        task,
        lambda o: scaler.to_env_np(rng.uniform(-1, 1, (len(o), task.act_dim))),
        n,
        int_seed(ss_rand),
    )
    flat = [
        (i, j, c["eval_return"])
        for i, a in enumerate(agents)
        for j, c in enumerate(a["checkpoints"])
    ]
    bi, bj, _ = max(flat, key=lambda t: t[2])
    best = agents[bi]
    actor = _actor_module(best["algo"], task, best["hidden"], best["checkpoints"][bj]["actor"])
    r_exp = _evaluate(
        task,
        lambda o: scaler.to_env_np(_unit_actions(actor, best["algo"], o)),
        n,
        int_seed(ss_exp),
    )
    return {
        "random": float(r_rand.mean()),
        "random_std": float(r_rand.std()),
        "expert": float(r_exp.mean()),
        "expert_std": float(r_exp.std()),
        "episodes": n,
        "expert_policy": {
            "agent": bi,
            "algo": best["algo"],
            "step": best["checkpoints"][bj]["step"],
            "selected_on_eval_return": best["checkpoints"][bj]["eval_return"],
        },
        "wall_time": time.perf_counter() - start,
    }
