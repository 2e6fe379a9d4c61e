"""PRIMORL dataset recipes: replay-style offline datasets for Pendulum and the DMC cartpole
tasks, and a medium-expert-style HalfCheetah set (``privrl data collect --recipe primorl-…``).

The paper logs every episode of hundreds of DDPG training runs (Balance 600 × 50k steps,
Swingup 150 × 200k, Pendulum 6 × 1M; 30,000 trajectories). That is out of reach on a small
machine, so a recipe (spec "Data", decision):

1. **trains a few off-policy agents** (SAC / TD3 / DDPG, differing algorithms, seeds and
   budgets) online in the batched simulator, keeping a deterministic **policy checkpoint every
   few thousand steps** with its evaluation return;
2. **rolls the checkpoints out** with Gaussian action noise of a few levels (in ``[-1, 1]``
   action units, clipped to the box) plus a share of **uniform-random** episodes, in batches of
   parallel environments with batched actor inference, until K trajectories of the task's
   fixed horizon are recorded ("replay" mode: episodes spread evenly over all checkpoints and
   noise levels — early checkpoints give low/medium returns, later ones expert returns);
   HalfCheetah uses "medium-expert" mode instead: half the episodes from a medium checkpoint
   (evaluation return closest to a set fraction of the expert's), half from the expert;
3. measures **reference returns** on ≥ 50 fresh episodes: uniform random actions and the best
   checkpoint of the recipe (deterministic) — MOPO's normalised score is
   100·(R − R_rand)/(R_exp − R_rand);
4. writes one ``TrajectoryDataset`` HDF5 (float32 arrays, episodes in a seeded random order,
   ``truncated`` on each last step, env id = the privrl Gymnasium id, discount 0.99) with the
   recipe, the job table, the reference returns and the wall time of every stage in
   ``metadata.extra``;
5. **declares a public split**: ``extra["public_episodes"]`` lists the episodes a PRIMORL run
   may use in the clear (normaliser, early stopping, elites), the task's share (1% Pendulum
   and cartpole, 10% HalfCheetah; paper Table 8) drawn from the build seed's own stream — the
   recipe is public code with a public seed, so the split is public by declaration and never
   depends on an episode's content. A file built before the recipe declared it gains the same
   declaration (metadata only: the episodes and their ledger identity are untouched).

Resumable and deterministic: every stage (one agent's training with its checkpoints, the
reference returns, one shard of rollouts) is written atomically into the stage directory
``data_dir/<recipe>[-quick][-seed<S>]/`` together with a fingerprint of its parameters, and is
skipped on a rerun when its file exists with the same fingerprint. Each stage draws from its
own ``SeedSequence(seed, spawn_key=…)``, so a resumed build equals an uninterrupted one.
Bit-identical results assume the same torch thread count and instruction sets (recorded in the
metadata): a full build pins both (`privrl.runs.recipes.numerics`), so any x86-64 machine with
AVX2 rebuilds the same file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from privrl.runs.recipes import numerics
from privrl.runs.recipes.common import (
    atomic_write,
    build_stem,
    locked_build,
    log,
    progress_bar,
    seed_seq,
    stage_fingerprint,
    write_json,
)
from privrl.runs.recipes.primorl_stages import (
    _Job,
    _load_stage,
    _plan_jobs,
    _reference_returns,
    _rollout_shard,
    _shards,
    _train_agent,
)

__all__ = [
    "RECIPE_SPECS",
    "AgentSpec",
    "RecipeSpec",
    "balance",
    "build_recipe",
    "declare_recipe_public",
    "halfcheetah",
    "pendulum",
    "recipe_spec",
    "swingup",
]


# ============================================================================ specifications


@dataclass(frozen=True)
class AgentSpec:
    """One online training run whose checkpoints become behaviour policies."""

    algo: Literal["sac", "td3", "ddpg"]
    steps: int  # environment transitions (= gradient updates at update-to-data ratio 1)
    checkpoint_every: int
    start_steps: int = 1000  # uniform-random warm-up transitions
    update_after: int | None = None  # first update once this many are stored (None: start_steps)
    num_envs: int = 1
    lr: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)
    expl_noise: float = 0.1  # TD3/DDPG exploration σ (in [-1, 1] action units)
    first_checkpoint: int | None = None  # default: checkpoint_every


@dataclass(frozen=True)
class RecipeSpec:
    """Everything a recipe does; stored in the dataset's ``extra["recipe"]``."""

    name: str
    task: str  # key of privrl.envs.control.CONTROL_TASKS
    n_episodes: int
    agents: tuple[AgentSpec, ...]
    noise_levels: tuple[float, ...]  # Gaussian σ on checkpoint actions, [-1, 1] units
    random_share: float  # fraction of uniform-random episodes
    mode: Literal["replay", "medium_expert"] = "replay"
    medium_fraction: float = 0.4  # medium checkpoint: eval closest to this × expert eval
    shard_episodes: int = 1000  # at most this many episodes per rollout shard
    eval_episodes: int = 10  # per checkpoint, during training (deterministic)
    reference_episodes: int = 50
    discount: float = 0.99
    notes: str = ""

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))


def _pendulum(quick: bool) -> RecipeSpec:
    if quick:
        agents = (
            AgentSpec("sac", 200, 100, start_steps=100),
            AgentSpec("td3", 200, 100, start_steps=100),
        )
        return RecipeSpec(
            "primorl-pendulum", "pendulum", 24, agents, (0.1, 0.5), 0.25, shard_episodes=8
        )
    agents = (
        AgentSpec("sac", 10_000, 1000),
        AgentSpec("td3", 10_000, 1000),
        AgentSpec("ddpg", 10_000, 1000, lr=1e-3),
    )
    return RecipeSpec(
        "primorl-pendulum",
        "pendulum",
        30_000,
        agents,
        (0.1, 0.3, 0.6),
        0.1,
        shard_episodes=1000,
        notes="paper: 6 DDPG runs x 1M steps, all episodes kept",
    )


def _cartpole(task: str, quick: bool) -> RecipeSpec:
    name = f"primorl-{task}"
    if quick:
        agents = (AgentSpec("sac", 400, 200, start_steps=100),)
        return RecipeSpec(name, task, 20, agents, (0.1, 0.5), 0.25, shard_episodes=10)
    if task == "balance":
        agents = (
            AgentSpec("sac", 20_000, 2000),
            AgentSpec("td3", 20_000, 2000),
            AgentSpec("ddpg", 20_000, 2000, lr=1e-3),
        )
        notes = "paper: 600 DDPG runs x 50k steps, all episodes kept"
    else:
        agents = (
            AgentSpec("sac", 100_000, 5000),
            AgentSpec("ddpg", 100_000, 5000, lr=1e-3),
        )
        notes = "paper: 150 DDPG runs x 200k steps, all episodes kept"
    return RecipeSpec(
        name, task, 30_000, agents, (0.1, 0.3, 0.6), 0.1, shard_episodes=1000, notes=notes
    )


def _halfcheetah(quick: bool) -> RecipeSpec:
    full = RecipeSpec(
        "primorl-halfcheetah",
        "halfcheetah",
        2000,
        (AgentSpec("sac", 300_000, 10_000, start_steps=10_000),),
        (0.1,),
        0.0,
        "medium_expert",
        medium_fraction=0.4,
        shard_episodes=500,
        notes="D4RL medium-expert is not reachable; own SAC medium + expert checkpoints",
    )
    if not quick:
        return full
    agents = (AgentSpec("sac", 400, 200, start_steps=100),)
    return dataclasses.replace(full, n_episodes=20, agents=agents, shard_episodes=10, notes="")


RECIPE_SPECS: dict[str, Callable[[bool], RecipeSpec]] = {
    "pendulum": _pendulum,
    "balance": lambda quick: _cartpole("balance", quick),
    "swingup": lambda quick: _cartpole("swingup", quick),
    "halfcheetah": _halfcheetah,
}


def recipe_spec(task: str, quick: bool = False) -> RecipeSpec:
    """The recipe for ``task`` (full or quick)."""
    return RECIPE_SPECS[task](quick)


# ============================================================================ entry points


def pendulum(data_dir: Path, *, seed: int = 0, quick: bool = False, progress: bool = False) -> Path:
    """`primorl-pendulum`: 30,000 replay-style Pendulum trajectories of 200 steps."""
    return build_recipe(
        recipe_spec("pendulum", quick), data_dir, seed=seed, quick=quick, progress=progress
    )


def balance(data_dir: Path, *, seed: int = 0, quick: bool = False, progress: bool = False) -> Path:
    """`primorl-balance`: 30,000 replay-style cartpole-balance trajectories of 1000 steps."""
    return build_recipe(
        recipe_spec("balance", quick), data_dir, seed=seed, quick=quick, progress=progress
    )


def swingup(data_dir: Path, *, seed: int = 0, quick: bool = False, progress: bool = False) -> Path:
    """`primorl-swingup`: 30,000 replay-style cartpole-swingup trajectories of 1000 steps."""
    return build_recipe(
        recipe_spec("swingup", quick), data_dir, seed=seed, quick=quick, progress=progress
    )


def halfcheetah(
    data_dir: Path, *, seed: int = 0, quick: bool = False, progress: bool = False
) -> Path:
    """`primorl-halfcheetah`: ~2,000 medium-expert-style HalfCheetah trajectories."""
    return build_recipe(
        recipe_spec("halfcheetah", quick), data_dir, seed=seed, quick=quick, progress=progress
    )


# ============================================================================ the build


def build_recipe(
    spec: RecipeSpec,
    data_dir: Path,
    *,
    seed: int = 0,
    quick: bool = False,
    progress: bool = False,
    keep_shards: bool = False,
    threads: int | None = None,
) -> Path:
    """Build (or finish building) ``spec``'s dataset under ``data_dir``; returns its path.

    Returns at once when the dataset file already exists. Shard files are deleted after the
    dataset is written unless ``keep_shards`` (agents and references are kept).

    Torch runs with ``threads`` intra-op threads during the build (default
    ``$PRIVRL_RECIPE_THREADS`` or 1; restored afterwards): at batch 256 a second thread gains
    little and, on a busy machine, OpenMP threads spinning for a core slow updates down by an
    order of magnitude (benchmarks/bench_sac.py). A fixed count also keeps the build
    bit-reproducible across machines with different core counts.
    """
    if threads is None:
        threads = int(os.environ.get("PRIVRL_RECIPE_THREADS", "1"))
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        build = _Build(spec, Path(data_dir), seed, quick, progress, keep_shards)
        path = locked_build(
            spec.name, build.stage_dir, build.out_path, progress, lambda: _build_locked(build)
        )
        return declare_recipe_public(path)
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class _Build:
    """One build of a recipe dataset: the spec, where, the seed and the run's switches."""

    spec: RecipeSpec
    data_dir: Path
    seed: int
    quick: bool
    progress: bool
    keep_shards: bool

    @property
    def stage_dir(self) -> Path:
        """Where the build's shards, agents and references are staged."""
        return self.data_dir / build_stem(self.spec.name, self.seed, self.quick)

    @property
    def out_path(self) -> Path:
        """The dataset file."""
        return self.data_dir / f"{build_stem(self.spec.name, self.seed, self.quick)}.h5"


def _build_locked(build: _Build) -> Path:
    from privrl.envs.control import CONTROL_TASKS

    spec, seed, quick = build.spec, build.seed, build.quick
    progress, keep_shards = build.progress, build.keep_shards
    out_path, stage_dir = build.out_path, build.stage_dir
    task = CONTROL_TASKS[spec.task]
    walls: dict[str, float] = {}
    skipped: list[str] = []
    t_build = time.perf_counter()

    # 1. agents and their checkpoints
    agents: list[dict[str, Any]] = []
    for i, a_spec in enumerate(spec.agents):
        path = stage_dir / f"agent-{i}.pt"
        fp = stage_fingerprint([spec.task, dataclasses.asdict(a_spec), seed, i])
        rec = _load_stage(path, fp, lambda p: torch.load(p, weights_only=True))
        if rec is None:
            rec = _train_agent(spec, i, task, seed, path, progress)
        else:
            skipped.append(f"agent-{i}")
        agents.append(rec)
        walls[f"agent-{i}"] = rec["wall_time"]
        evals = [round(c["eval_return"], 1) for c in rec["checkpoints"]]
        log(
            progress,
            f"agent {i} ({a_spec.algo}, {a_spec.steps} steps): {rec['wall_time']:.0f} s; "
            f"checkpoint eval returns {evals}",
        )

    # 2. reference returns
    ref_path = stage_dir / "reference.json"
    ref_fp = stage_fingerprint(
        [stage_fingerprint([a["fingerprint"] for a in agents]), spec.reference_episodes, seed]
    )
    ref = _load_stage(ref_path, ref_fp, lambda p: json.loads(p.read_text()))
    if ref is None:
        ref = {"fingerprint": ref_fp, **_reference_returns(spec, task, agents, seed)}
        write_json(ref, ref_path)
    else:
        skipped.append("reference")
    walls["reference"] = ref["wall_time"]
    log(
        progress,
        f"reference returns ({ref['episodes']} episodes): random {ref['random']:.2f}, "
        f"expert {ref['expert']:.2f} ({ref['expert_policy']['algo']} step "
        f"{ref['expert_policy']['step']}); {ref['wall_time']:.1f} s",
    )

    # 3. rollout shards
    jobs, plan_info = _plan_jobs(spec, agents)
    shards = _shards(spec, jobs)
    agents_fp = stage_fingerprint([a["fingerprint"] for a in agents])
    shard_paths = [stage_dir / f"shard-{s:05d}.npz" for s in range(len(shards))]
    roll_wall = 0.0
    n_built = 0
    with progress_bar(progress, spec.n_episodes, f"{spec.name}: rollouts", transient=True) as bar:
        for s, (k, first, m) in enumerate(shards):
            job = jobs[k]
            fp = stage_fingerprint(
                [agents_fp, job.agent, job.checkpoint, job.noise, k, first, m, seed, s]
            )
            meta = _load_npz_meta(shard_paths[s], fp)
            if meta is None:
                t0 = time.perf_counter()
                arrays = _rollout_shard(spec, task, job, m, agents, seed_seq(seed, 3, s))
                wall = time.perf_counter() - t0
                meta = {"fingerprint": fp, "wall_time": wall, "n": m}
                _save_npz(shard_paths[s], arrays, meta)
                n_built += 1
            roll_wall += meta["wall_time"]
            bar.advance(m)
    if n_built < len(shards):
        skipped.append(f"{len(shards) - n_built} of {len(shards)} shards")
    walls["rollouts"] = roll_wall
    log(progress, f"rollouts: {len(shards)} shards, {spec.n_episodes} episodes, {roll_wall:.0f} s")

    # 4. assemble
    t0 = time.perf_counter()
    ds, job_table = _assemble(spec, task, jobs, shard_paths, seed)
    walls["assemble"] = time.perf_counter() - t0
    recipe = spec.to_dict()
    recipe.update(
        {
            "seed": seed,
            "quick": quick,
            "torch_threads": torch.get_num_threads(),
            "numerics": numerics.describe(),  # the instruction sets it ran on (pinned or not)
            "jobs": job_table,
            "checkpoints": [
                {
                    "agent": i,
                    "algo": a["algo"],
                    "steps": [c["step"] for c in a["checkpoints"]],
                    "eval_returns": [round(c["eval_return"], 3) for c in a["checkpoints"]],
                }
                for i, a in enumerate(agents)
            ],
            **({"medium_expert": plan_info} if plan_info else {}),
        }
    )
    walls["all_stages"] = sum(walls.values())
    public = _public_episodes(spec.task, spec.n_episodes, seed)
    walls["this_invocation"] = time.perf_counter() - t_build
    reference = {k: v for k, v in ref.items() if k not in ("fingerprint",)}
    meta = ds.metadata.with_extra(
        recipe=recipe,
        reference_returns={"random": ref["random"], "expert": ref["expert"]},
        # K for PRIMORL's denominator qK: the recipe's episode count, fixed before any
        # episode exists, hence public (privrl.primorl never counts it from the data)
        n_trajectories=int(spec.n_episodes),
        public_episodes=public,
        reference=reference,
        wall_time={k: round(v, 3) for k, v in walls.items()},
        stages_reused=skipped,
        source=(
            "privrl recipe: online SAC/TD3/DDPG checkpoints rolled out with Gaussian action "
            "noise plus uniform-random episodes (see docs/primorl-data.md)"
        ),
    )
    ds = ds.with_metadata(meta, validate=False)
    from privrl.data.io import save_hdf5

    t0 = time.perf_counter()
    save_hdf5(ds, out_path)
    walls["write"] = time.perf_counter() - t0
    log(
        progress,
        "wall time per stage (s): " + ", ".join(f"{k} {v:.1f}" for k, v in walls.items()),
    )
    if not keep_shards:
        for p in shard_paths:
            p.unlink(missing_ok=True)
    return out_path


PUBLIC_STREAM = 6  # the build seed's stream for the declared-public episodes


def _public_episodes(task: str, n_episodes: int, seed: int) -> list[int]:
    """The episodes the recipe declares public: the task's share, from the seed alone."""
    from privrl.data.public import declare_public_episodes
    from privrl.primorl.dynamics import dynamics_config

    fraction = dynamics_config(task).holdout_fraction
    return declare_public_episodes(n_episodes, fraction, seed_seq(seed, PUBLIC_STREAM))


def declare_recipe_public(path: Path) -> Path:
    """``path`` with its recipe's public declaration in the metadata, added in place when a
    build from before the recipe declared one lacks it (from the recipe's task, episode count
    and seed recorded in ``extra["recipe"]``: public facts). Only the metadata attribute is
    rewritten; the episodes and their content fingerprint (the ledger's key) are unchanged. A
    file that is not a PRIMORL recipe build is returned untouched."""
    from privrl.data.dataset import DatasetError
    from privrl.data.io import read_header
    from privrl.data.public import PUBLIC_EPISODES, PUBLIC_UNIT_IDS, rewrite_metadata

    try:
        meta = read_header(path).metadata
    except DatasetError:
        return path  # not a privrl dataset: whoever reads it reports that
    recipe = meta.extra.get("recipe")
    if PUBLIC_EPISODES in meta.extra or PUBLIC_UNIT_IDS in meta.extra:
        return path
    if not isinstance(recipe, dict) or not {"task", "n_episodes", "seed"} <= set(recipe):
        return path
    ids = _public_episodes(str(recipe["task"]), int(recipe["n_episodes"]), int(recipe["seed"]))
    rewrite_metadata(path, meta.with_extra(public_episodes=ids))
    return path


def _save_npz(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **arrays)

    atomic_write(path, write)


def _load_npz_meta(path: Path, fingerprint: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
    except Exception:
        return None
    return meta if meta.get("fingerprint") == fingerprint else None


def _assemble(
    spec: RecipeSpec, task: Any, jobs: list[_Job], shard_paths: list[Path], seed: int
) -> tuple[Any, list[dict[str, Any]]]:
    """Concatenate the shards into one dataset, episodes in a seeded random order."""
    from gymnasium import spaces

    from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
    from privrl.envs.control import make_env

    K, H, d, a_dim = spec.n_episodes, task.horizon, task.obs_dim, task.act_dim
    perm = np.random.default_rng(seed_seq(seed, 4)).permutation(K)
    obs = np.empty((K, H + 1, d), dtype=np.float32)
    act = np.empty((K, H, a_dim), dtype=np.float32)
    rew = np.empty((K, H), dtype=np.float32)
    table = []
    pos = 0
    for job in jobs:
        returns = []
        for s in job.shards:
            with np.load(shard_paths[s]) as z:
                m = z["rew"].shape[0]
                dest = perm[pos : pos + m]
                obs[dest] = z["obs"]
                act[dest] = z["act"]
                rew[dest] = z["rew"]
                returns.append(z["rew"].astype(np.float64).sum(axis=1))
            pos += m
        r = np.concatenate(returns)
        table.append(
            {
                "behaviour": job.label,
                "agent": job.agent,
                "checkpoint": job.checkpoint,
                "noise": job.noise,
                "episodes": job.n_episodes,
                "return_mean": round(float(r.mean()), 3),
                "return_std": round(float(r.std()), 3),
            }
        )
    if pos != K:
        raise RuntimeError(f"assembled {pos} episodes, expected {K}")
    truncated = np.zeros((K, H), dtype=bool)
    truncated[:, -1] = True
    env = make_env(task.name)
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    if obs_space.dtype != np.float32:  # HalfCheetah's is float64; the data is float32
        obs_space = spaces.Box(
            obs_space.low.astype(np.float32), obs_space.high.astype(np.float32), dtype=np.float32
        )
    meta = DatasetMetadata(
        observation_space=obs_space,
        action_space=act_space,
        env_id=task.env_id,
        discount=spec.discount,
        horizon=H,
    )
    ds = TrajectoryDataset(
        observations=obs.reshape(K * (H + 1), d),
        actions=act.reshape(K * H, a_dim),
        rewards=rew.reshape(K * H),
        terminated=np.zeros(K * H, dtype=bool),
        truncated=truncated.reshape(K * H),
        episode_offsets=np.arange(K + 1, dtype=np.int64) * H,
        metadata=meta,
    )
    return ds, table
