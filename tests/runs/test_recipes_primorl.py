"""PRIMORL dataset recipes: contents and metadata, determinism per seed, resumability."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from privrl.data.io import load_hdf5
from privrl.runs.recipes import RECIPES, primorl_stages
from privrl.runs.recipes import primorl as rp

torch.set_num_threads(1)


def _tiny(mode: str = "replay") -> rp.RecipeSpec:
    """A seconds-scale Pendulum recipe exercising every stage."""
    agents = (
        rp.AgentSpec("sac", 400, 200, start_steps=100, hidden=(32, 32)),
        rp.AgentSpec("ddpg", 200, 100, start_steps=100, hidden=(32, 32)),
    )
    return rp.RecipeSpec(
        "primorl-pendulum",
        "pendulum",
        n_episodes=14,
        agents=agents,
        noise_levels=(0.1, 0.5),
        random_share=0.3,
        mode=mode,  # type: ignore[arg-type]
        shard_episodes=3,
        eval_episodes=4,
        reference_episodes=50,
    )


@pytest.fixture(scope="module")
def reference_build(tmp_path_factory):
    """The tiny recipe built once with seed 0 (shards kept for inspection)."""
    root = tmp_path_factory.mktemp("reference")
    return rp.build_recipe(_tiny(), root, seed=0, quick=True)


def _arrays(path):
    ds = load_hdf5(path)
    return ds, {
        "obs": ds.observations,
        "act": ds.actions,
        "rew": ds.rewards,
        "trunc": ds.truncated,
        "term": ds.terminated,
    }


def test_registry_points_at_these_builders():
    for name, func in [
        ("primorl-pendulum", rp.pendulum),
        ("primorl-balance", rp.balance),
        ("primorl-swingup", rp.swingup),
        ("primorl-halfcheetah", rp.halfcheetah),
    ]:
        assert RECIPES[name].load() is func


def test_tiny_build_contents_and_metadata(reference_build):
    path = reference_build
    assert path.name == "primorl-pendulum-quick.h5"
    ds, a = _arrays(path)
    assert ds.n_episodes == 14
    assert np.all(ds.episode_lengths == 200)
    assert a["obs"].dtype == np.float32 and a["obs"].shape == (14 * 201, 3)
    assert a["act"].shape == (14 * 200, 1) and np.all(np.abs(a["act"]) <= 2.0)
    assert a["trunc"].sum() == 14 and np.all(a["trunc"].reshape(14, 200)[:, -1])
    assert not a["term"].any()
    # Pendulum reward transform: every per-step reward in [0, 1].
    assert a["rew"].min() >= 0.0 and a["rew"].max() <= 1.0
    # Observations follow the dynamics: (cos, sin) on the unit circle.
    np.testing.assert_allclose(np.hypot(a["obs"][:, 0], a["obs"][:, 1]), 1.0, atol=1e-5)
    m = ds.metadata
    assert m.env_id == "privrl/Pendulum-v0" and m.discount == 0.99 and m.horizon == 200
    recipe = m.extra["recipe"]
    assert recipe["name"] == "primorl-pendulum" and recipe["seed"] == 0
    assert recipe["agents"][1]["algo"] == "ddpg"
    jobs = recipe["jobs"]
    assert sum(j["episodes"] for j in jobs) == 14
    assert next(j for j in jobs if j["agent"] is None)["episodes"] == round(0.3 * 14)
    # The job table's returns are the dataset's returns, regrouped.
    total = sum(j["return_mean"] * j["episodes"] for j in jobs)
    assert total == pytest.approx(ds.returns(discount=1.0).sum(), rel=1e-4)
    ref = m.extra["reference_returns"]
    assert set(ref) == {"random", "expert"}
    # PRIMORL's K: declared by the recipe (public), not marked inferred from the data
    assert m.extra["n_trajectories"] == 14 and "inferred_from_data" not in m.extra
    assert m.extra["reference"]["episodes"] == 50
    # Uniform random Pendulum actions score ≈ 125 on the rescaled reward.
    assert 100 < ref["random"] < 150
    for stage in ("agent-0", "agent-1", "reference", "rollouts", "assemble"):
        assert m.extra["wall_time"][stage] >= 0
    json.dumps(m.extra)  # stays JSON


def test_same_seed_same_dataset_other_seed_differs(tmp_path, reference_build):
    spec = _tiny()
    p1 = reference_build
    p2 = rp.build_recipe(spec, tmp_path / "b", seed=0, quick=True)
    p3 = rp.build_recipe(spec, tmp_path / "c", seed=1, quick=True)
    assert p3.name == "primorl-pendulum-quick-seed1.h5"
    _, a1 = _arrays(p1)
    _, a2 = _arrays(p2)
    _, a3 = _arrays(p3)
    for k in a1:
        np.testing.assert_array_equal(a1[k], a2[k], err_msg=k)
    assert not np.array_equal(a1["obs"], a3["obs"])
    assert not np.array_equal(a1["act"], a3["act"])


def test_resume_skips_finished_stages_and_gives_the_same_dataset(tmp_path, reference_build):
    spec = _tiny()
    _, ref = _arrays(reference_build)

    root = tmp_path / "resume"
    path = rp.build_recipe(spec, root, seed=0, quick=True, keep_shards=True)
    stage = root / "primorl-pendulum-quick"
    shards = sorted(stage.glob("shard-*.npz"))
    assert len(shards) >= 6
    # Simulate an interruption: the dataset and some shards were never written.
    path.unlink()
    for p in shards[::2]:
        p.unlink()
    agent_mtime = (stage / "agent-0.pt").stat().st_mtime_ns
    ds, again = _arrays(rp.build_recipe(spec, root, seed=0, quick=True))
    for k in ref:
        np.testing.assert_array_equal(ref[k], again[k], err_msg=k)
    assert (stage / "agent-0.pt").stat().st_mtime_ns == agent_mtime  # not retrained
    reused = ds.metadata.extra["stages_reused"]
    assert "agent-0" in reused and "agent-1" in reused and "reference" in reused
    assert any("shards" in r for r in reused)
    assert not list(stage.glob("shard-*.npz"))  # cleaned up after the write


def test_an_interrupted_agent_resumes_from_its_snapshot(tmp_path, monkeypatch, reference_build):
    spec = _tiny()
    _, ref = _arrays(reference_build)

    real_save = primorl_stages._torch_save

    def crash(obj, path):
        if path.name == "agent-0.pt":
            raise KeyboardInterrupt  # killed after training, before the stage was written
        real_save(obj, path)

    root = tmp_path / "crash"
    monkeypatch.setattr(primorl_stages, "_torch_save", crash)
    with pytest.raises(KeyboardInterrupt):
        rp.build_recipe(spec, root, seed=0, quick=True)
    stage = root / "primorl-pendulum-quick"
    assert (stage / "agent-0.partial.pt").is_file() and not (stage / "agent-0.pt").exists()
    monkeypatch.setattr(primorl_stages, "_torch_save", real_save)
    _, again = _arrays(rp.build_recipe(spec, root, seed=0, quick=True))
    for k in ref:
        np.testing.assert_array_equal(ref[k], again[k], err_msg=k)
    assert not (stage / "agent-0.partial.pt").exists()


def test_a_changed_recipe_rebuilds_its_stale_stages(tmp_path):
    spec = _tiny()
    rp.build_recipe(spec, tmp_path, seed=0, quick=True).unlink()
    changed = dataclasses.replace(
        spec, agents=(dataclasses.replace(spec.agents[0], steps=600), spec.agents[1])
    )
    ds = load_hdf5(rp.build_recipe(changed, tmp_path, seed=0, quick=True))
    reused = ds.metadata.extra["stages_reused"]
    assert "agent-0" not in reused and "agent-1" in reused
    assert ds.metadata.extra["recipe"]["agents"][0]["steps"] == 600


def test_existing_dataset_is_returned_untouched(reference_build):
    path = reference_build
    mtime = path.stat().st_mtime_ns
    assert rp.build_recipe(_tiny(), path.parent, seed=0, quick=True) == path
    assert path.stat().st_mtime_ns == mtime


def test_medium_expert_mode_takes_half_from_each_checkpoint(tmp_path):
    spec = dataclasses.replace(_tiny("medium_expert"), random_share=0.0, n_episodes=10)
    ds = load_hdf5(rp.build_recipe(spec, tmp_path, seed=0, quick=True))
    recipe = ds.metadata.extra["recipe"]
    info = recipe["medium_expert"]
    assert info["expert"]["eval_return"] >= info["medium"]["eval_return"]
    by_ckpt: dict[tuple, int] = {}
    for j in recipe["jobs"]:
        key = (j["agent"], j["checkpoint"])
        by_ckpt[key] = by_ckpt.get(key, 0) + j["episodes"]
    expert = (info["expert"]["agent"], info["expert"]["checkpoint"])
    medium = (info["medium"]["agent"], info["medium"]["checkpoint"])
    if expert == medium:
        assert by_ckpt == {expert: 10}
    else:
        assert by_ckpt == {medium: 5, expert: 5}


def test_plan_spreads_episodes_over_checkpoints_and_noise_levels():
    spec = dataclasses.replace(_tiny(), n_episodes=1000, random_share=0.1)
    agents = [
        {"algo": "sac", "checkpoints": [{"step": s, "eval_return": 0.0} for s in (1, 2, 3)]},
        {"algo": "td3", "checkpoints": [{"step": s, "eval_return": 0.0} for s in (1, 2)]},
    ]
    jobs, _ = rp._plan_jobs(spec, agents)
    counts = [j.n_episodes for j in jobs if j.agent is not None]
    assert len(counts) == 5 * 2 and sum(counts) == 900 and max(counts) - min(counts) <= 1
    assert jobs[-1].agent is None and jobs[-1].n_episodes == 100
    shards = rp._shards(spec, jobs)
    assert all(m <= spec.shard_episodes for _, _, m in shards)
    assert sum(m for _, _, m in shards) == 1000


def test_quick_pendulum_entry_point(tmp_path):
    path = rp.pendulum(tmp_path, seed=0, quick=True, progress=False)
    assert path == tmp_path / "primorl-pendulum-quick.h5"
    ds = load_hdf5(path)
    spec = rp.recipe_spec("pendulum", quick=True)
    assert ds.n_episodes == spec.n_episodes
    assert ds.metadata.extra["recipe"]["quick"] is True


@pytest.mark.parametrize(
    "task",
    [
        "balance",  # the default check of a dm_control build; the others are slow (~12 s each)
        pytest.param("swingup", marks=pytest.mark.slow),
        pytest.param("halfcheetah", marks=pytest.mark.slow),
    ],
)
def test_quick_builds_of_the_other_tasks(tmp_path, task):
    path = getattr(rp, task)(tmp_path, seed=0, quick=True, progress=False)
    ds = load_hdf5(path)
    spec = rp.recipe_spec(task, quick=True)
    assert ds.n_episodes == spec.n_episodes
    assert np.all(ds.episode_lengths == 1000)
    from privrl.envs.control import CONTROL_TASKS

    assert ds.metadata.env_id == CONTROL_TASKS[task].env_id
    ref = ds.metadata.extra["reference_returns"]
    assert np.isfinite(ref["random"]) and np.isfinite(ref["expert"])


def test_recipe_declares_public_episodes_from_its_seed(reference_build, tmp_path):
    """The build declares the task's share of episodes public (Pendulum: 1%, at least one),
    drawn from the build seed alone; an older build without the declaration gains the same
    one in place, with its episodes and content fingerprint untouched."""
    import h5py

    from privrl.data.io import content_sha256, read_header
    from privrl.data.public import declare_public_episodes
    from privrl.runs.recipes.common import seed_seq

    meta = read_header(reference_build).metadata
    expected = declare_public_episodes(14, 0.01, seed_seq(0, rp.PUBLIC_STREAM))
    assert meta.extra["public_episodes"] == expected and len(expected) == 1
    old = tmp_path / "old.h5"
    old.write_bytes(reference_build.read_bytes())
    stripped = {k: v for k, v in meta.extra.items() if k != "public_episodes"}
    with h5py.File(old, "r+") as f:
        f.attrs["metadata"] = json.dumps(meta.replace(extra=stripped).to_dict())
    digest = content_sha256(old, recompute=True)
    assert rp.declare_recipe_public(old) == old
    assert read_header(old).metadata.extra["public_episodes"] == expected
    assert content_sha256(old, recompute=True) == digest
