"""Expert-level DP dataset recipes: contents, determinism, resumption, registry and CLI."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from privrl.data.io import load_hdf5
from privrl.expert.experts import load_experts
from privrl.runs.recipes import expert as rx

G = 1.0 - 0.02  # greedy probability of a 2-action expert with p_min = 0.02


def _tiny(env: str, **changes) -> rx.ExpertRecipeSpec:
    base = {
        "cartpole": {"n_experts": 6, "trajectories": 3, "experts_per_shard": 4},
        "acrobot": {
            "n_experts": 4,
            "trajectories": 2,
            "experts_per_shard": 3,
            "random_episodes": 100,
            "build_kwargs": {"population": 6, "generations": 2, "episodes": 1, "eval_episodes": 1},
        },
        "hiv": {
            "n_experts": 4,
            "trajectories": 2,
            "experts_per_shard": 3,
            "random_episodes": 100,
            "warm_start_kwargs": {"population": 8, "generations": 1, "n_elite": 2},
            "build_kwargs": {"population": 4, "generations": 1, "n_elite": 1},
        },
    }[env]
    return dataclasses.replace(rx.SPECS[env], **{**base, **changes})


def _build(tmp: Path, spec: rx.ExpertRecipeSpec, seed: int = 0) -> Path:
    return rx.build_recipe(spec, tmp, seed=seed, progress=False)


def test_cartpole_dataset_contract(tmp_path: Path) -> None:
    spec = _tiny("cartpole")
    path = _build(tmp_path, spec)
    assert path == tmp_path / "experts-cartpole" / "experts-cartpole.h5"
    ds = load_hdf5(path)
    md = ds.metadata
    assert md.env_id == "CartPole-v1" and md.discount == 0.99 and md.horizon == 200
    assert md.extra["recipe"]["name"] == "experts-cartpole"
    assert md.extra["recipe"]["p_min"] == 0.02
    assert md.extra["experts_dir"] == "experts"
    ref = md.extra["reference_returns"]["random"]
    assert 15 < ref < 30  # uniform random CartPole lasts ~22 steps
    assert md.extra["reference"]["episodes"] >= 100
    assert set(md.extra["wall_time"]) >= {"expert_search", "reference", "trajectories"}
    # one unit per expert, trajectories each, ids 0..m-1
    assert ds.n_episodes == 18 and np.bincount(ds.unit_ids).tolist() == [3] * 6
    assert ds.observations.dtype == np.float32 and ds.actions.dtype == np.uint8
    # behaviour probabilities are those of the modified experts: g on the greedy action
    experts = load_experts(path.parent / md.extra["experts_dir"])
    greedy = experts.greedy_for(
        ds.unit_ids[ds.transition_episode_index], ds.transitions().observations
    )
    is_greedy = ds.actions.astype(np.int64) == greedy
    np.testing.assert_allclose(ds.behaviour_probs, np.where(is_greedy, G, 0.02))
    assert 0.9 < is_greedy.mean() < 1.0
    # episodes end by termination (pole down / cart out) or truncation at 200
    ends = ds.episode_offsets[1:] - 1
    short = ds.episode_lengths < 200
    np.testing.assert_array_equal(ds.terminated[ends], short)
    np.testing.assert_array_equal(ds.truncated[ends], ~short)
    # the stage files and the figure sit next to the dataset
    assert (path.parent / "experts_hist.png").stat().st_size > 1000
    assert (path.parent / "build.json").is_file()
    assert not list(path.parent.glob("shard-*.h5"))  # shards removed once merged
    s = experts.settings
    assert set(s) >= {"gravity", "force_mag", "masscart", "own_return", "default_return"}


def test_cartpole_deterministic_and_seed_dependent(tmp_path: Path) -> None:
    spec = _tiny("cartpole")
    a = load_hdf5(_build(tmp_path / "a", spec))
    b = load_hdf5(_build(tmp_path / "b", spec))
    assert a.equals(b, check_metadata=False)
    c = load_hdf5(_build(tmp_path / "c", spec, seed=1))
    assert (tmp_path / "c" / "experts-cartpole-seed1").is_dir()
    assert not np.array_equal(a.observations, c.observations)


def test_interrupted_build_resumes_to_the_same_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _tiny("cartpole")
    whole = load_hdf5(_build(tmp_path / "whole", spec))

    calls = {"n": 0}
    real = rx._collect

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(rx, "_collect", flaky)
    with pytest.raises(KeyboardInterrupt):
        _build(tmp_path / "resumed", spec)
    stage = tmp_path / "resumed" / "experts-cartpole"
    assert (stage / "shard-0000.h5").is_file() and not (stage / "shard-0001.h5").exists()
    assert not list(stage.glob(".*.tmp"))  # no half-written files left behind
    monkeypatch.setattr(rx, "_collect", real)
    experts_mtime = (stage / "experts" / "experts.npz").stat().st_mtime_ns
    resumed = load_hdf5(_build(tmp_path / "resumed", spec))
    assert resumed.equals(whole, check_metadata=False)
    assert (stage / "experts" / "experts.npz").stat().st_mtime_ns == experts_mtime  # reused
    # a finished dataset is returned as is
    assert _build(tmp_path / "resumed", spec) == stage / "experts-cartpole.h5"


def test_acrobot_tiny_build(tmp_path: Path) -> None:
    ds = load_hdf5(_build(tmp_path, _tiny("acrobot")))
    assert ds.metadata.env_id == "Acrobot-v1" and ds.n_episodes == 8
    assert ds.episode_lengths.max() <= 200
    assert set(np.unique(ds.rewards)) <= {-1.0, 0.0}
    np.testing.assert_array_equal(ds.rewards[ds.terminated], 0.0)
    g = 1 - 2 * 0.02
    assert set(np.round(ds.behaviour_probs, 12)) <= {round(g, 12), 0.02}
    assert ds.metadata.extra["reference_returns"]["random"] < -150


def test_rollout_to_dataset_flags_and_layout() -> None:
    from privrl.envs.perturbed import Rollout

    obs = np.arange(2 * 4 * 1, dtype=np.float32).reshape(2, 4, 1)
    ro = Rollout(
        obs=obs,
        actions=np.array([[1, 0, 1], [0, 1, 1]]),
        rewards=np.array([[1.0, 2.0, 0.0], [3.0, 4.0, 5.0]]),
        probs=np.array([[0.98, 0.02, 0.0], [0.98, 0.98, 0.02]]),
        lengths=np.array([2, 3]),
        terminated=np.array([True, False]),
    )
    ds = rx.rollout_to_dataset(ro, np.array([7, 9]))
    assert ds.episode_offsets.tolist() == [0, 2, 5]
    assert ds.observations[:, 0].tolist() == [0, 1, 2, 4, 5, 6, 7]
    assert ds.terminated.tolist() == [False, True, False, False, False]
    assert ds.truncated.tolist() == [False, False, False, False, True]
    assert ds.rewards.tolist() == [1, 2, 3, 4, 5] and ds.unit_ids.tolist() == [7, 9]


def test_registry_and_cli_quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from privrl.cli.main import app
    from privrl.runs.recipes import RECIPES

    for env in ("cartpole", "acrobot", "lunarlander", "hiv"):
        assert RECIPES[f"experts-{env}"].load() is getattr(rx, env)
    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "cache"))
    res = CliRunner().invoke(
        app,
        [
            "data",
            "collect",
            "--recipe",
            "experts-cartpole",
            "--quick",
            "--data-dir",
            str(tmp_path / "d"),
        ],
    )
    assert res.exit_code == 0, res.output
    path = tmp_path / "d" / "experts-cartpole-quick" / "experts-cartpole-quick.h5"
    ds = load_hdf5(path)
    assert ds.n_units == 50 and ds.n_episodes == 100
    res = CliRunner().invoke(app, ["data", "info", str(path), "--plot", str(tmp_path / "r.png")])
    assert res.exit_code == 0 and (tmp_path / "r.png").is_file()


def test_hiv_dataset_contract(tmp_path: Path) -> None:
    """The HIV recipe's stages on a tiny spec (its quick build is a slow test): the recipe's
    environment settings in the metadata, float64 observations, fixed-length episodes."""
    path = _build(tmp_path, _tiny("hiv"))
    ds = load_hdf5(path)
    assert ds.n_units == 4 and ds.n_episodes == 8
    assert ds.metadata.extra["env_kwargs"] == {
        "interval": 20.0,
        "horizon": 50,
        "reward_scale": 1e-6,
    }
    assert ds.observations.dtype == np.float64 and ds.episode_lengths.tolist() == [50] * 8
    assert load_experts(path.parent / "experts").n_experts == 4


@pytest.mark.parametrize(
    "name",
    [
        "acrobot",  # the default check of the recipe builder; the others are slow (~25 s+)
        pytest.param("hiv", marks=pytest.mark.slow),
        pytest.param("lunarlander", marks=pytest.mark.slow),
    ],
)
def test_quick_recipes(tmp_path: Path, name: str) -> None:
    """The quick builds of the slower recipes (3 s, 18 s, 7 s on an idle 2-core machine; HIV
    ~1.5 min on a busy one: slow, `test_hiv_dataset_contract` covers its stages)."""
    path = getattr(rx, name)(tmp_path, seed=0, quick=True, progress=False)
    ds = load_hdf5(path)
    assert ds.n_units == 50 and ds.n_episodes == 100
    experts = load_experts(path.parent / "experts")
    assert experts.n_experts == 50
    own = experts.settings["own_return"]
    ref = ds.metadata.extra["reference_returns"]["random"]
    assert np.median(own) > ref  # the experts beat the random policy on their own physics
    assert np.median(ds.returns(1.0)) > ref
    if name == "hiv":
        assert ds.metadata.extra["env_kwargs"] == {
            "interval": 20.0,
            "horizon": 50,
            "reward_scale": 1e-6,
        }
        assert ds.observations.dtype == np.float64 and ds.episode_lengths.tolist() == [50] * 100
