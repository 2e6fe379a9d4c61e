"""Minari interop on local datasets only (MINARI_DATASETS_PATH points at a temporary dir)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from privrl.data import (
    DatasetError,
    DatasetMetadata,
    TrajectoryDataset,
    export_minari,
    import_minari,
)

minari = pytest.importorskip("minari")


@pytest.fixture(autouse=True)
def local_minari(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def make_dataset(box_actions: bool = False, units: bool = True, probs: bool = True):
    rng = np.random.default_rng(3)
    lengths = np.array([4, 1, 6, 3, 2])
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    n_t, n_ep = int(offsets[-1]), 5
    term = np.zeros(n_t, bool)
    trunc = np.zeros(n_t, bool)
    term[offsets[[1, 3]] - 1] = True
    trunc[offsets[[2, 4]] - 1] = True  # episode 4 ends unflagged
    if box_actions:
        actions = rng.uniform(-1, 1, (n_t, 2)).astype(np.float32)
        act_space: spaces.Space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    else:
        actions = rng.integers(0, 3, n_t)
        act_space = spaces.Discrete(3)
    return TrajectoryDataset(
        observations=rng.normal(size=(n_t + n_ep, 4)).astype(np.float32),
        actions=actions,
        rewards=rng.normal(size=n_t),
        terminated=term,
        truncated=trunc,
        episode_offsets=offsets,
        behaviour_probs=rng.uniform(0.1, 1, n_t) if probs else None,
        unit_ids=np.array([3, 3, 1, 2, 1]) if units else None,
        metadata=DatasetMetadata(
            spaces.Box(-np.inf, np.inf, (4,), np.float32),
            act_space,
            env_id="Toy-v0",
            discount=0.99,
            extra={"recipe": "minari test"},
        ),
    )


@pytest.mark.parametrize("box_actions", [False, True])
def test_minari_round_trip_lossless(local_minari: Path, box_actions: bool) -> None:
    ds = make_dataset(box_actions=box_actions)
    path = export_minari(ds, "privrl/toy/test-v0")
    assert path.is_relative_to(local_minari)
    back = import_minari("privrl/toy/test-v0")
    assert back.equals(ds)  # obs incl. final obs, actions, rewards, flags, probs, units, metadata
    assert import_minari(path).equals(ds)  # by directory too


def test_minari_dataset_is_readable_by_minari(local_minari: Path) -> None:
    ds = make_dataset(probs=False, units=False)
    export_minari(ds, "privrl/toy/plain-v0")
    mds = minari.load_dataset("privrl/toy/plain-v0")
    assert mds.total_episodes == 5 and mds.total_steps == ds.n_transitions
    ep = next(iter(mds.iterate_episodes([2])))
    np.testing.assert_array_equal(ep.observations, ds.episode(2).observations)
    np.testing.assert_array_equal(ep.truncations, ds.episode(2).truncated)


def test_import_foreign_minari_dataset(local_minari: Path) -> None:
    """A dataset written by Minari itself (no privrl metadata) gets spaces from Minari."""
    from minari.data_collector.episode_buffer import EpisodeBuffer

    rng = np.random.default_rng(0)
    buffers = []
    for t in (3, 5):
        term = np.zeros(t, bool)
        term[-1] = True
        buffers.append(
            EpisodeBuffer(
                observations=rng.normal(size=(t + 1, 2)).astype(np.float32),
                actions=rng.integers(0, 2, t),
                rewards=np.ones(t),
                terminations=term,
                truncations=np.zeros(t, bool),
            )
        )
    obs_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.warns(UserWarning):
        minari.create_dataset_from_buffers(
            "other/foreign-v0",
            buffers,
            observation_space=obs_space,
            action_space=spaces.Discrete(2),
        )
    ds = import_minari("other/foreign-v0")
    assert ds.n_episodes == 2 and ds.n_transitions == 8
    assert ds.metadata.action_space == spaces.Discrete(2)
    assert ds.behaviour_probs is None and ds.unit_ids is None
    assert ds.metadata.extra["source"]["dataset_id"] == "other/foreign-v0"


def test_missing_dataset_is_a_clear_error_and_never_downloads() -> None:
    with pytest.raises(DatasetError, match=r"no local Minari dataset.*never downloads"):
        import_minari("nobody/nothing-v0")


def test_export_refuses_to_overwrite() -> None:
    ds = make_dataset()
    export_minari(ds, "privrl/toy/once-v0")
    with pytest.raises(ValueError, match="already exists"):
        export_minari(ds, "privrl/toy/once-v0")


def _foreign(dataset_id: str, users: list[int]) -> None:
    """A Minari dataset privrl did not write, each episode's user in its per-step infos."""
    from minari.data_collector.episode_buffer import EpisodeBuffer

    rng = np.random.default_rng(1)
    buffers = []
    for user in users:
        t = 3
        term = np.zeros(t, bool)
        term[-1] = True
        buffers.append(
            EpisodeBuffer(
                observations=rng.uniform(-2, 2, size=(t + 1, 2)).astype(np.float32),
                actions=rng.integers(0, 2, t),
                rewards=np.ones(t),
                terminations=term,
                truncations=np.zeros(t, bool),
                infos={"user": np.full(t + 1, user, dtype=np.int64)},
            )
        )
    with pytest.warns(UserWarning):
        minari.create_dataset_from_buffers(
            dataset_id,
            buffers,
            observation_space=spaces.Box(-np.inf, np.inf, (2,), np.float32),
            action_space=spaces.Discrete(2),
        )


def test_import_sets_the_unit_from_an_info_key_or_per_episode() -> None:
    _foreign("other/users-v0", [42, 7, 42])
    ds = import_minari("other/users-v0", unit="column=user")
    assert ds.unit_ids.tolist() == [42, 7, 42]
    assert ds.metadata.extra["unit_column"] == "user"
    per_episode = import_minari("other/users-v0", unit="episode")
    assert per_episode.unit_ids is None and per_episode.metadata.extra["unit"] == "episode"
    with pytest.raises(DatasetError, match=r"no episode metadata attribute or info key 'site'"):
        import_minari("other/users-v0", unit="column=site")


def test_cli_import_of_minari_with_unit_and_box_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from privrl.cli.main import main
    from privrl.data.io import load_hdf5

    _foreign("other/users2-v0", [0, 1])
    out = tmp_path / "m.h5"
    argv = ["data", "import", "other/users2-v0", "--unit", "column=user"]
    code = main([*argv, "--observation-space", "box:-1,1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    ds = load_hdf5(out)
    assert ds.unit_ids.tolist() == [0, 1]
    assert ds.observations.min() >= -1 and ds.observations.max() <= 1
    assert ds.metadata.observation_space == spaces.Box(-1.0, 1.0, (2,), np.float64)
    code = main([*argv[:4], "column=site", "--out", str(tmp_path / "n.h5")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1
