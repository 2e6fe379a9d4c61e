"""Expert-level DP dataset recipes: m = 3000 experts for perturbed physics, 20 trajectories
each on the default environment (``privrl data collect --recipe experts-…``).

Stages (Sharma et al., §6 and Appendix B.1; methods in ``docs/expert-data.md``):

1. **experts** — one grid point of the paper's perturbation grid per expert
   (:func:`privrl.envs.perturbed.expert_settings`), then a controller per perturbed model
   (:mod:`privrl.expert.experts`): CartPole bang-bang LQR, Acrobot and HIV linear policies
   found by vectorised per-setting CEM (HIV after a shared warm start), LunarLander gains of
   gymnasium's heuristic found by random search. Built in chunks of settings, each chunk
   saved atomically; the merged set is ``experts/`` (``.npz`` + ``.json``).
2. **reference** — the uniform random policy's mean return on the default environment at
   the evaluation horizon (≥ 100 episodes).
3. **shards** — each expert runs ``trajectories`` episodes on the default environment with its
   p_min-modified policy (p_min = 0.02), batched over episodes (numpy simulators; a pool of
   Box2D environments for LunarLander), a shard of experts per HDF5 file.
4. **dataset** — the shards concatenated into ``<stem>.h5``: float32 observations (HIV:
   float64), uint8 actions, ``unit_ids`` = expert id, ``behaviour_probs`` = the modified
   policy's probability of each action, discount 0.99, and in ``metadata.extra`` the recipe,
   ``experts_dir`` (relative to the dataset), ``reference_returns = {"random": R}`` and the
   wall time of every stage. Shards are deleted once it is written.
5. **plot** — ``experts_hist.png`` (paper Figure 2): each expert's return on its own perturbed
   physics (greedy) and on the default environment (its 20 trajectories).

Everything lives in ``data_dir/<stem>/`` with ``stem = <recipe>[-quick][-seed<S>]``; every
stage output carries a fingerprint of its inputs and is reused on a rerun when it matches, and
every stage draws from its own ``SeedSequence(seed, spawn_key=…)``, so an interrupted build
resumes to the same result as an uninterrupted one.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privrl.data.dataset import DatasetMetadata, TrajectoryDataset
from privrl.envs.perturbed import (
    HIV_DEFAULT,
    PAPER_GRIDS,
    Rollout,
    expert_settings,
    lunar_lander_rollout,
    numpy_rollout,
)
from privrl.expert import experts as ex
from privrl.runs.recipes.common import (
    Bar,
    build_stem,
    locked_build,
    log,
    progress_bar,
    read_json,
    stage_fingerprint,
    stage_rng,
    write_json,
)
from privrl.runs.recipes.expert_shards import (
    P_MIN,
    _collect,
    _default_sim,
    _spaces,
    plot_expert_returns,
    rollout_to_dataset,
)

__all__ = [
    "SPECS",
    "ExpertRecipeSpec",
    "acrobot",
    "build_recipe",
    "cartpole",
    "hiv",
    "lunarlander",
    "rollout_to_dataset",
]

VERSION = 1  # bump when a stage's output changes meaning (invalidates fingerprints)
DISCOUNT = 0.99


@dataclass(frozen=True)
class ExpertRecipeSpec:
    """What one ``experts-<env>`` recipe builds."""

    name: str
    env: str  # key of PAPER_GRIDS and of the builders below
    env_id: str
    n_experts: int = 3000
    trajectories: int = 20
    data_horizon: int = 200
    eval_horizon: int = 200
    settings_per_chunk: int = 1000  # expert search chunk (resumable unit)
    experts_per_shard: int = 250  # dataset shard (resumable unit)
    random_episodes: int = 1000
    build_kwargs: dict[str, Any] = field(default_factory=dict)
    warm_start_kwargs: dict[str, Any] = field(default_factory=dict)
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def quick(self) -> ExpertRecipeSpec:
        """50 experts × 2 trajectories (smoke tests), cheaper searches."""
        from dataclasses import replace

        kw = dict(self.build_kwargs)
        ws = dict(self.warm_start_kwargs)
        if self.env == "hiv":
            ws.update(population=64, generations=6, n_elite=8)
        return replace(
            self,
            n_experts=50,
            trajectories=2,
            random_episodes=max(100, min(self.random_episodes, 200)),
            build_kwargs=kw,
            warm_start_kwargs=ws,
        )


SPECS: dict[str, ExpertRecipeSpec] = {
    "cartpole": ExpertRecipeSpec(
        "experts-cartpole",
        "cartpole",
        "CartPole-v1",
        eval_horizon=1000,
        settings_per_chunk=1000,
        build_kwargs={"eval_horizon": 1000},
    ),
    "acrobot": ExpertRecipeSpec("experts-acrobot", "acrobot", "Acrobot-v1", settings_per_chunk=250),
    "lunarlander": ExpertRecipeSpec(
        "experts-lunarlander",
        "lunarlander",
        "LunarLander-v3",
        data_horizon=1000,
        eval_horizon=1000,
        settings_per_chunk=50,
        experts_per_shard=50,
        random_episodes=100,
    ),
    "hiv": ExpertRecipeSpec(
        "experts-hiv",
        "hiv",
        "privrl/HIV-v0",
        data_horizon=50,
        eval_horizon=50,
        settings_per_chunk=500,
        experts_per_shard=500,
        random_episodes=200,
        env_kwargs={
            "interval": HIV_DEFAULT["interval"],
            "horizon": int(HIV_DEFAULT["horizon"]),
            "reward_scale": HIV_DEFAULT["reward_scale"],
        },
    ),
}


# ============================================================================ recipe entry points


def cartpole(data_dir: Path, *, seed: int = 0, quick: bool = False, progress: bool = False) -> Path:
    """3000 CartPole experts (LQR per perturbed physics) × 20 trajectories of ≤ 200 steps."""
    return build_recipe(SPECS["cartpole"], data_dir, seed=seed, quick=quick, progress=progress)


def acrobot(data_dir: Path, *, seed: int = 0, quick: bool = False, progress: bool = False) -> Path:
    """3000 Acrobot experts (CEM per perturbed physics) × 20 trajectories of ≤ 200 steps."""
    return build_recipe(SPECS["acrobot"], data_dir, seed=seed, quick=quick, progress=progress)


def lunarlander(
    data_dir: Path, *, seed: int = 0, quick: bool = False, progress: bool = False
) -> Path:
    """3000 LunarLander experts (tuned heuristic gains) × 20 trajectories of ≤ 1000 steps."""
    return build_recipe(SPECS["lunarlander"], data_dir, seed=seed, quick=quick, progress=progress)


def hiv(data_dir: Path, *, seed: int = 0, quick: bool = False, progress: bool = False) -> Path:
    """3000 HIV-treatment experts (CEM per perturbed model) × 20 trajectories of 50 steps."""
    return build_recipe(SPECS["hiv"], data_dir, seed=seed, quick=quick, progress=progress)


# ============================================================================ stage 1: experts


def _chunks(settings: dict[str, np.ndarray], per_chunk: int) -> list[np.ndarray]:
    """Expert rows grouped into chunks of ≤ ``per_chunk`` grid points (all experts of a grid
    point in the same chunk, so its search ranks its candidates together)."""
    idx = settings["setting"].astype(np.int64)
    uniq = np.unique(idx)
    return [
        np.flatnonzero(np.isin(idx, uniq[s : s + per_chunk]))
        for s in range(0, len(uniq), per_chunk)
    ]


def _build_chunk(
    spec: ExpertRecipeSpec,
    sub: dict[str, np.ndarray],
    rng: np.random.Generator,
    warm: tuple[np.ndarray, np.ndarray] | None,
    bar: Bar,
) -> ex.ArrayExperts:
    kw = spec.build_kwargs
    if spec.env == "cartpole":
        out = ex.build_cartpole_experts(sub, rng, **kw)
        bar.advance(1)
        return out
    if spec.env == "acrobot":
        return ex.build_acrobot_experts(sub, rng, progress=lambda _: bar.advance(1), **kw)
    if spec.env == "hiv":
        assert warm is not None
        return ex.build_hiv_experts(sub, rng, warm, progress=lambda _: bar.advance(1), **kw)
    if spec.env == "lunarlander":
        return ex.build_lunarlander_experts(sub, rng, progress=bar.advance, **kw)
    raise ValueError(f"unknown environment {spec.env!r}")


def _chunk_units(spec: ExpertRecipeSpec, rows: np.ndarray, settings: dict[str, np.ndarray]) -> int:
    """Progress units of one chunk: generations for the CEM searches, episodes otherwise."""
    if spec.env == "acrobot":
        return int(spec.build_kwargs.get("generations", 10))
    if spec.env == "hiv":
        return int(spec.build_kwargs.get("generations", 3))
    if spec.env == "lunarlander":
        n_set = len(np.unique(settings["setting"][rows]))
        kw = spec.build_kwargs
        search = n_set * int(kw.get("candidates", 6)) * int(kw.get("episodes", 2))
        return search + len(rows) * int(kw.get("eval_episodes", 1))
    return 1


def _stage_experts(
    spec: ExpertRecipeSpec, stage: Path, seed: int, progress: bool, walls: dict[str, float]
) -> ex.ArrayExperts:
    fp = stage_fingerprint([VERSION, asdict(spec), seed, "experts"])
    final = stage / "experts"
    info = read_json(final / "experts.json")
    if info is not None and info.get("info", {}).get("fingerprint") == fp:
        experts = ex.load_experts(final)
        walls.update(experts.info.get("wall_time", {}))
        log(progress, f"experts: reusing {final} ({experts.n_experts} experts)")
        return experts

    grid = PAPER_GRIDS[spec.env]
    settings = expert_settings(grid, spec.n_experts, stage_rng(seed, 1))
    wall: dict[str, float] = {}
    warm = None
    if spec.env == "hiv":
        path = stage / "warm_start.json"
        wfp = stage_fingerprint([fp, "warm"])
        rec = read_json(path)
        if rec is None or rec.get("fingerprint") != wfp:
            t0 = time.perf_counter()
            gens = int(spec.warm_start_kwargs.get("generations", 15))
            with progress_bar(progress, gens, f"{spec.name}: warm start (CEM generations)") as bar:
                mean, std = ex.hiv_warm_start(
                    settings,
                    stage_rng(seed, 2),
                    progress=lambda _: bar.advance(1),
                    **spec.warm_start_kwargs,
                )
            rec = {
                "fingerprint": wfp,
                "mean": mean.tolist(),
                "std": std.tolist(),
                "wall_time": time.perf_counter() - t0,
            }
            write_json(rec, path, allow_nan=False)
        warm = (np.asarray(rec["mean"]), np.asarray(rec["std"]))
        wall["warm_start"] = rec["wall_time"]

    chunks = _chunks(settings, spec.settings_per_chunk)
    parts: list[tuple[np.ndarray, ex.ArrayExperts]] = []
    search_wall = 0.0
    total = sum(_chunk_units(spec, rows, settings) for rows in chunks)
    with progress_bar(progress, total, f"{spec.name}: experts ({len(chunks)} chunks)") as bar:
        for c, rows in enumerate(chunks):
            cdir = stage / "expert_chunks" / f"chunk-{c:04d}"
            cfp = stage_fingerprint([fp, c, rows.tolist()])
            cinfo = read_json(cdir / "experts.json")
            if cinfo is not None and cinfo.get("info", {}).get("fingerprint") == cfp:
                part = ex.load_experts(cdir)
                bar.advance(_chunk_units(spec, rows, settings))
            else:
                t0 = time.perf_counter()
                sub = {k: v[rows] for k, v in settings.items()}
                part = _build_chunk(spec, sub, stage_rng(seed, 3, c), warm, bar)
                part.info["fingerprint"] = cfp
                part.info["wall_time"] = time.perf_counter() - t0
                ex.save_experts(part, cdir)
            search_wall += float(part.info["wall_time"])
            parts.append((rows, part))
    wall["expert_search"] = search_wall

    m = spec.n_experts
    first = parts[0][1]
    params = {k: np.empty((m, *v.shape[1:])) for k, v in first.params.items()}
    sets = {k: np.empty(m, dtype=v.dtype) for k, v in first.settings.items()}
    for rows, part in parts:
        for k in params:
            params[k][rows] = part.params[k]
        for k in sets:
            sets[k][rows] = part.settings[k]
    t0 = time.perf_counter()
    probe = type(first)(params, {})
    sets["default_return"] = _evaluate_default(spec, probe, stage_rng(seed, 6), progress)
    wall["evaluate_default"] = time.perf_counter() - t0
    info = {k: v for k, v in first.info.items() if k not in ("fingerprint", "wall_time")}
    info.update(
        {
            "fingerprint": fp,
            "recipe": spec.name,
            "seed": seed,
            "grid": {k: list(v) for k, v in grid.axes.items()},
            "grid_env": grid.env,
            "wall_time": {k: round(v, 3) for k, v in wall.items()},
            "own_return_mean": float(np.mean(sets["own_return"])),
            "default_return_mean": float(np.mean(sets["default_return"])),
            "eval_horizon": spec.eval_horizon,
        }
    )
    experts = type(first)(params, sets, info)
    ex.save_experts(experts, final)
    shutil.rmtree(stage / "expert_chunks", ignore_errors=True)
    walls.update(wall)
    log(
        progress,
        f"experts: {m} built in {sum(wall.values()):.0f} s; own-physics return mean "
        f"{info['own_return_mean']:.2f}",
    )
    return experts


def _evaluate_default(
    spec: ExpertRecipeSpec, experts: ex.ArrayExperts, rng: np.random.Generator, progress: bool
) -> np.ndarray:
    """Each greedy expert's return in one (LunarLander) or ten episodes of the default
    environment at the evaluation horizon."""
    m = experts.n_experts
    if spec.env != "lunarlander":
        episodes = 1 if spec.env == "hiv" else 10  # HIV: deterministic start and dynamics
        return ex.evaluate_experts(
            experts, spec.env, rng, episodes=episodes, own=False, horizon=spec.eval_horizon
        )
    ids = np.arange(m)
    with progress_bar(progress, m, f"{spec.name}: experts on the default env") as bar:
        ro = lunar_lander_rollout(
            lambda obs, idx, _: experts.greedy_for(ids[idx], obs),
            rng.integers(0, 2**31 - 1, size=m),
            rng,
            horizon=spec.eval_horizon,
            record=False,
            progress=bar.advance,
        )
    return ro.returns()


# ============================================================================ stage 2: reference


def _random_reference(spec: ExpertRecipeSpec, rng: np.random.Generator) -> Rollout:
    n, h = spec.random_episodes, spec.eval_horizon
    n_act = _n_actions(spec.env)

    def act(obs: np.ndarray, idx: np.ndarray, g: np.random.Generator) -> np.ndarray:
        return g.integers(0, n_act, size=obs.shape[0])

    if spec.env == "lunarlander":
        seeds = rng.integers(0, 2**31 - 1, size=n)
        return lunar_lander_rollout(act, seeds, rng, horizon=h, record=False)
    return numpy_rollout(_default_sim(spec.env), act, n, h, rng, record=False)


def _n_actions(env: str) -> int:
    return {"cartpole": 2, "acrobot": 3, "lunarlander": 4, "hiv": 4}[env]


# ============================================================================ the recipe


def build_recipe(
    spec: ExpertRecipeSpec,
    data_dir: Path,
    *,
    seed: int = 0,
    quick: bool = False,
    progress: bool = False,
    keep_shards: bool = False,
) -> Path:
    """Build (or finish building) ``spec``'s dataset; returns ``data_dir/<stem>/<stem>.h5``.

    Returns at once when the dataset exists. ``quick`` uses :meth:`ExpertRecipeSpec.quick`.
    """
    if quick:
        spec = spec.quick()
    stem = build_stem(spec.name, seed, quick)
    stage = Path(data_dir) / stem
    out_path = stage / f"{stem}.h5"
    return locked_build(
        spec.name,
        stage,
        out_path,
        progress,
        lambda: _build_locked(
            spec, stage, out_path, seed, quick=quick, progress=progress, keep_shards=keep_shards
        ),
    )


def _metadata(spec: ExpertRecipeSpec, extra: dict[str, Any]) -> DatasetMetadata:
    """A shard's or the dataset's metadata: the recipe's spaces, environment, discount and
    data horizon, with ``extra``."""
    obs_space, act_space = _spaces(spec)
    return DatasetMetadata(
        observation_space=obs_space,
        action_space=act_space,
        env_id=spec.env_id,
        discount=DISCOUNT,
        horizon=spec.data_horizon,
        extra=extra,
    )


def _build_locked(
    spec: ExpertRecipeSpec,
    stage: Path,
    out_path: Path,
    seed: int,
    *,
    quick: bool,
    progress: bool,
    keep_shards: bool,
) -> Path:
    from privrl.data.io import load_hdf5, save_hdf5

    t_start = time.perf_counter()
    walls: dict[str, float] = {}

    # 1. experts
    experts = _stage_experts(spec, stage, seed, progress, walls)
    efp = experts.info["fingerprint"]

    # 2. reference returns (uniform random policy on the default environment)
    ref_path = stage / "reference.json"
    ref_fp = stage_fingerprint([VERSION, spec.env, spec.random_episodes, spec.eval_horizon, seed])
    ref = read_json(ref_path)
    if ref is None or ref.get("fingerprint") != ref_fp:
        t0 = time.perf_counter()
        rets = _random_reference(spec, stage_rng(seed, 4)).returns()
        ref = {
            "fingerprint": ref_fp,
            "random": float(rets.mean()),
            "random_std": float(rets.std()),
            "episodes": int(rets.size),
            "horizon": spec.eval_horizon,
            "wall_time": time.perf_counter() - t0,
        }
        write_json(ref, ref_path, allow_nan=False)
    walls["reference"] = ref["wall_time"]
    log(progress, f"reference: random policy {ref['random']:.3f} over {ref['episodes']} episodes")

    # 3. shards
    m = experts.n_experts
    bounds = list(range(0, m, spec.experts_per_shard))
    shard_paths = [stage / f"shard-{s:04d}.h5" for s in range(len(bounds))]
    shard_wall = 0.0
    with progress_bar(progress, m * spec.trajectories, f"{spec.name}: trajectories") as bar:
        for s, lo in enumerate(bounds):
            ids = np.arange(lo, min(m, lo + spec.experts_per_shard))
            sfp = stage_fingerprint([efp, s, ids.tolist(), spec.trajectories, P_MIN, seed])
            shard = None
            if shard_paths[s].is_file():
                shard = load_hdf5(shard_paths[s], validate=False)
                if shard.metadata.extra.get("fingerprint") != sfp:
                    shard = None
            if shard is None:
                t0 = time.perf_counter()
                ro = _collect(spec, experts, ids, stage_rng(seed, 5, s), bar)
                md = _metadata(spec, {"fingerprint": sfp, "wall_time": time.perf_counter() - t0})
                shard = rollout_to_dataset(ro, np.repeat(ids, spec.trajectories), md)
                save_hdf5(shard, shard_paths[s])
            else:
                bar.advance(len(ids) * spec.trajectories)
            shard_wall += float(shard.metadata.extra["wall_time"])
    walls["trajectories"] = shard_wall
    log(progress, f"trajectories: {len(bounds)} shards, {shard_wall:.0f} s")

    # 4. dataset
    t0 = time.perf_counter()
    parts = [load_hdf5(p, validate=False) for p in shard_paths]
    ds = TrajectoryDataset.concat(parts) if len(parts) > 1 else parts[0]
    returns = ds.returns(1.0)
    default_mean = np.bincount(ds.unit_ids, weights=returns, minlength=m) / spec.trajectories
    recipe = {
        "name": spec.name,
        "seed": seed,
        "quick": quick,
        "n_experts": m,
        "trajectories_per_expert": spec.trajectories,
        "p_min": P_MIN,
        "data_horizon": spec.data_horizon,
        "eval_horizon": spec.eval_horizon,
        "expert_family": experts.family,
        "perturbation_grid": {k: list(v) for k, v in PAPER_GRIDS[spec.env].axes.items()},
        "expert_build": {k: v for k, v in experts.info.items() if k not in ("grid",)},
    }
    walls["assemble"] = time.perf_counter() - t0
    walls["total_this_invocation"] = time.perf_counter() - t_start
    extra: dict[str, Any] = {
        "recipe": recipe,
        "experts_dir": "experts",
        "reference_returns": {"random": ref["random"]},
        "reference": {k: v for k, v in ref.items() if k != "fingerprint"},
        "expert_returns": {
            "greedy_own_physics_mean": float(np.mean(experts.settings["own_return"])),
            "greedy_default_env_mean": float(np.mean(experts.settings["default_return"])),
            "dataset_mean": float(default_mean.mean()),
            "eval_horizon": spec.eval_horizon,
        },
        "wall_time": {k: round(v, 3) for k, v in walls.items()},
        "source": "privrl recipe: perturbed-physics experts (see docs/expert-data.md)",
    }
    if spec.env_kwargs:
        extra["env_kwargs"] = spec.env_kwargs
    ds = ds.with_metadata(_metadata(spec, extra))
    t0 = time.perf_counter()
    save_hdf5(ds, out_path)
    walls["write"] = time.perf_counter() - t0

    # 5. plot
    h_eval, h_data = spec.eval_horizon, spec.data_horizon
    plot_expert_returns(
        [
            (f"greedy, own perturbed physics (H={h_eval})", experts.settings["own_return"]),
            (f"greedy, default env (H={h_eval})", experts.settings["default_return"]),
            (f"dataset: p_min-modified, default env (H={h_data})", default_mean),
        ],
        stage / "experts_hist.png",
        f"{spec.name}: {m} experts" + (" (returns in units of 1e6)" if spec.env == "hiv" else ""),
    )
    write_json(
        {
            "dataset": out_path.name,
            "wall_time": {k: round(v, 3) for k, v in walls.items()},
            "size_bytes": out_path.stat().st_size,
        },
        stage / "build.json",
        allow_nan=False,
    )
    log(
        progress,
        f"dataset: {ds.n_episodes} episodes, {ds.n_transitions} transitions, "
        f"{out_path.stat().st_size / 2**20:.1f} MiB; wall time per stage (s): "
        + ", ".join(f"{k} {v:.1f}" for k, v in walls.items()),
    )
    if not keep_shards:
        for p in shard_paths:
            p.unlink(missing_ok=True)
    return out_path
