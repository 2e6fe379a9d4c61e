"""Native HDF5 and Parquet/CSV table round trips, mapping parsing and file-level errors."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from gymnasium import spaces

from privrl.data import (
    ColumnMapping,
    DatasetError,
    DatasetMetadata,
    TrajectoryDataset,
    cache_dir,
    data_dir,
    export_table,
    import_table,
    load_hdf5,
    parse_column_mapping,
    save_hdf5,
)
from privrl.data.spaces import space_from_dict, space_from_json, space_to_dict, space_to_json


def make_dataset(
    seed: int = 0,
    n_ep: int = 9,
    obs_space: spaces.Space | None = None,
    act_space: spaces.Space | None = None,
    units: bool = True,
    probs: bool = True,
) -> TrajectoryDataset:
    rng = np.random.default_rng(seed)
    obs_space = obs_space or spaces.Box(-np.inf, np.inf, (4,), np.float32)
    act_space = act_space or spaces.Discrete(3)
    lengths = rng.integers(1, 8, n_ep)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    n_t = int(offsets[-1])
    ends = rng.integers(0, 3, n_ep)
    term = np.zeros(n_t, bool)
    trunc = np.zeros(n_t, bool)
    term[offsets[1:] - 1] = ends == 0
    trunc[offsets[1:] - 1] = ends == 1

    def sample(space: spaces.Space, n: int) -> np.ndarray:
        if isinstance(space, spaces.Discrete):
            return rng.integers(space.start, space.start + space.n, n)
        if isinstance(space, spaces.MultiDiscrete):
            return rng.integers(0, space.nvec, (n, *space.shape)).astype(space.dtype)
        if isinstance(space, spaces.MultiBinary):
            return rng.integers(0, 2, (n, *space.shape)).astype(space.dtype)
        low = np.where(np.isfinite(space.low), space.low, -3)
        high = np.where(np.isfinite(space.high), space.high, 3)
        return rng.uniform(low, high, (n, *space.shape)).astype(space.dtype)

    return TrajectoryDataset(
        observations=sample(obs_space, n_t + n_ep),
        actions=sample(act_space, n_t),
        rewards=rng.normal(size=n_t),
        terminated=term,
        truncated=trunc,
        episode_offsets=offsets,
        behaviour_probs=rng.uniform(0.1, 1.0, n_t) if probs else None,
        unit_ids=rng.integers(0, 4, n_ep) if units else None,
        metadata=DatasetMetadata(
            obs_space,
            act_space,
            env_id="Toy-v0",
            discount=0.95,
            horizon=7,
            extra={"recipe": "test", "seed": seed, "nested": {"a": [1, 2]}},
        ),
    )


SPACE_CASES = [
    spaces.Discrete(5),
    spaces.Discrete(4, start=-2),
    spaces.Box(-1.0, 2.0, (3,), np.float32),
    spaces.Box(np.array([-np.inf, 0.0]), np.array([1.0, np.inf]), dtype=np.float64),
    spaces.Box(-1.0, 1.0, (2, 3), np.float32),
    spaces.MultiDiscrete([3, 4, 2]),
    spaces.MultiBinary(4),
]


@pytest.mark.parametrize("space", SPACE_CASES, ids=str)
def test_space_json_round_trip(space: spaces.Space) -> None:
    text = space_to_json(space)
    assert "Infinity" not in text  # strict JSON
    back = space_from_json(text)
    assert space_to_dict(back) == space_to_dict(space)
    assert type(back) is type(space) and back.shape == space.shape
    if isinstance(space, spaces.Box):
        np.testing.assert_array_equal(back.low, space.low)
        assert back.dtype == space.dtype
    assert space_from_json(space_to_json(None)) is None


def test_unsupported_space_is_an_error() -> None:
    with pytest.raises(ValueError, match="unsupported space"):
        space_to_dict(spaces.Dict({"a": spaces.Discrete(2)}))
    with pytest.raises(ValueError, match="unknown space type"):
        space_from_dict({"type": "Graph"})


# ------------------------------------------------------------------------------------ HDF5


@pytest.mark.parametrize("compression", ["lzf", "gzip", None])
def test_hdf5_round_trip_lossless(tmp_path: Path, compression: str | None) -> None:
    ds = make_dataset()
    path = save_hdf5(ds, tmp_path / "d.h5", compression=compression)
    back = load_hdf5(path)
    assert back.equals(ds)
    assert back.metadata.extra == ds.metadata.extra
    assert back.behaviour_probs is not None and back.unit_ids is not None


@pytest.mark.parametrize(
    ("obs_space", "act_space"),
    [
        (spaces.Discrete(6), spaces.Box(-2.0, 2.0, (2,), np.float32)),
        (spaces.MultiBinary(3), spaces.MultiDiscrete([2, 5])),
        (spaces.Box(-1.0, 1.0, (2, 2), np.float64), spaces.Discrete(3, start=1)),
    ],
    ids=str,
)
def test_hdf5_round_trip_other_spaces(tmp_path: Path, obs_space, act_space) -> None:
    ds = make_dataset(obs_space=obs_space, act_space=act_space, units=False, probs=False)
    back = TrajectoryDataset.load(ds.save(tmp_path / "d.h5"))
    assert back.equals(ds) and back.unit_ids is None and back.behaviour_probs is None


def test_hdf5_layout_and_attributes(tmp_path: Path) -> None:
    ds = make_dataset()
    save_hdf5(ds, tmp_path / "d.h5")
    with h5py.File(tmp_path / "d.h5", "r") as f:
        assert int(f.attrs["privrl_schema_version"]) == 1
        meta = json.loads(f.attrs["metadata"])
        assert meta["observation_space"]["type"] == "Box"
        assert f["observations"].chunks is not None
        assert f["observations"].compression == "lzf"


def test_hdf5_newer_schema_version_is_a_clear_error(tmp_path: Path) -> None:
    path = save_hdf5(make_dataset(), tmp_path / "d.h5")
    with h5py.File(path, "a") as f:
        f.attrs["privrl_schema_version"] = 2
    with pytest.raises(DatasetError, match=r"schema version 2.*newer privrl"):
        load_hdf5(path)


def test_hdf5_foreign_and_missing_files(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(DatasetError, match="not a privrl dataset"):
        load_hdf5(tmp_path / "other.h5")
    (tmp_path / "junk.h5").write_text("not hdf5")
    with pytest.raises(DatasetError, match="not an HDF5 file"):
        load_hdf5(tmp_path / "junk.h5")
    with pytest.raises(DatasetError, match="not found"):
        load_hdf5(tmp_path / "missing.h5")


def test_hdf5_load_validates(tmp_path: Path) -> None:
    path = save_hdf5(make_dataset(), tmp_path / "d.h5")
    with h5py.File(path, "a") as f:
        f["rewards"][3] = np.nan
    with pytest.raises(DatasetError, match="rewards"):
        load_hdf5(path)
    assert load_hdf5(path, validate=False).n_episodes == 9


def test_hdf5_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed write leaves the previous file intact and no temporary file behind."""
    path = save_hdf5(make_dataset(seed=1), tmp_path / "d.h5")
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(h5py.Group, "create_dataset", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        save_hdf5(make_dataset(seed=2), path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5"]
    assert load_hdf5(path).equals(make_dataset(seed=1))


# ------------------------------------------------------------- content fingerprint (ledger key)


def _fingerprint(ds: TrajectoryDataset) -> str:
    from privrl.privacy.ledger import CONTENT_FIELDS, content_fingerprint

    return content_fingerprint({name: getattr(ds, name) for name in CONTENT_FIELDS})


def test_hdf5_stores_the_content_fingerprint(tmp_path: Path) -> None:
    """Structural rule (the ledger's key): save_hdf5 stores `content_sha256`, the fingerprint
    of the arrays; read_header exposes it without reading arrays; recomputing it from the file
    agrees; a file written before the attribute existed gets it computed from its arrays."""
    from privrl.data.io import content_sha256, read_header

    ds = make_dataset()
    path = save_hdf5(ds, tmp_path / "d.h5")
    assert read_header(path).content_sha256 == _fingerprint(ds)
    assert content_sha256(path, recompute=True) == _fingerprint(ds)
    with h5py.File(path, "r+") as f:
        del f.attrs["content_sha256"]
    assert read_header(path).content_sha256 is None
    assert content_sha256(path) == _fingerprint(ds)
    (tmp_path / "junk.h5").write_text("not hdf5")
    with pytest.raises(DatasetError, match="not a privrl dataset"):
        content_sha256(tmp_path / "junk.h5")


def test_content_fingerprint_covers_the_episodes_not_the_metadata() -> None:
    """Identity rule: metadata edits keep the fingerprint; a changed reward, a dtype, a shape
    or dropping an optional field (unit ids) changes it."""
    ds = make_dataset()
    arrays = {name: getattr(ds, name) for name in ("observations", "actions", "rewards")}
    flags = {name: getattr(ds, name) for name in ("terminated", "truncated", "episode_offsets")}
    extra = {"behaviour_probs": ds.behaviour_probs, "unit_ids": ds.unit_ids}
    base = _fingerprint(ds)
    other_meta = TrajectoryDataset(
        **arrays, **flags, **extra, metadata=DatasetMetadata(env_id="Other-v9", discount=0.1)
    )
    assert _fingerprint(other_meta) == base
    rewards = ds.rewards.copy()
    rewards[0] += 1e-12
    variants = [
        dict(arrays, rewards=rewards),
        dict(arrays, observations=ds.observations.astype(np.float64)),
        dict(arrays, actions=ds.actions.astype(np.int32)),
    ]
    for variant in variants:
        changed = TrajectoryDataset(**variant, **flags, **extra, metadata=ds.metadata)
        assert _fingerprint(changed) != base
    no_units = TrajectoryDataset(
        **arrays, **flags, behaviour_probs=ds.behaviour_probs, metadata=ds.metadata
    )
    assert _fingerprint(no_units) != base


@pytest.mark.parametrize(
    ("obs_space", "act_space"),
    [
        (spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(3)),
        (spaces.Discrete(6), spaces.Box(-2.0, 2.0, (2,), np.float32)),
    ],
    ids=str,
)
def test_parquet_reexport_keeps_the_fingerprint(tmp_path: Path, obs_space, act_space) -> None:
    """Identity rule: HDF5 → Parquet → HDF5 of the same episodes has the same fingerprint, so a
    re-export shares the original's privacy ledger."""
    from privrl.data.io import read_header

    ds = make_dataset(obs_space=obs_space, act_space=act_space)
    first = save_hdf5(ds, tmp_path / "a.h5")
    mapping = export_table(load_hdf5(first), tmp_path / "t.parquet")
    again = save_hdf5(import_table(tmp_path / "t.parquet", mapping), tmp_path / "b.h5")
    assert read_header(again).content_sha256 == read_header(first).content_sha256


def test_cache_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVRL_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c" and cache_dir().is_dir()
    assert data_dir() == tmp_path / "c" / "data" and data_dir().is_dir()


# ------------------------------------------------------------------------------------ tables


def test_parse_column_mapping() -> None:
    m = parse_column_mapping("episode=patient_id, obs=o1|o2,action=treatment,reward=r")
    assert m == ColumnMapping(
        episode="patient_id", obs=("o1", "o2"), action="treatment", reward="r"
    )
    assert parse_column_mapping(m.to_string()) == m
    full = parse_column_mapping(
        "episode=e,obs=s,action=a,reward=r,next_obs=s2,terminated=d,truncated=t,"
        "behaviour_prob=p,unit=u,timestep=k"
    )
    assert full.next_obs == "s2" and full.timestep == "k" and full.unit == "u"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("episode=e,obs=s,action=a", "missing required key.*reward"),
        ("episode=e,obs=s,action=a,reward=r,colour=c", "unknown key 'colour'"),
        ("episode=e,obs=s,action=a,reward=r,reward=q", "given twice"),
        ("episode=e,obs,action=a,reward=r", "not key=column"),
        ("episode=e|f,obs=s,action=a,reward=r", "takes one column"),
        ("episode=e,obs=s1|s2,next_obs=n1,action=a,reward=r", "next_obs has 1"),
    ],
)
def test_parse_column_mapping_errors(text: str, match: str) -> None:
    with pytest.raises(DatasetError, match=match):
        parse_column_mapping(text)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_table_round_trip_lossless(tmp_path: Path, fmt: str) -> None:
    ds = make_dataset()
    path = tmp_path / f"t.{fmt}"
    mapping = export_table(ds, path)
    if fmt == "parquet":  # metadata (spaces included) travels in the Parquet schema
        back = import_table(path, mapping)
        assert back.equals(ds)
    else:  # CSV has no metadata: pass the spaces back to restore dtypes
        md = ds.metadata
        back = import_table(
            path,
            mapping.to_string(),
            observation_space=md.observation_space,
            action_space=md.action_space,
        )
        assert back.equals(ds, check_metadata=False)
        assert back.metadata.extra["final_observation"] == "next_obs of the last row"


@pytest.mark.parametrize(
    ("obs_space", "act_space"),
    [
        (spaces.Discrete(6), spaces.Box(-2.0, 2.0, (2,), np.float32)),
        (spaces.Box(-1.0, 1.0, (2, 2), np.float64), spaces.MultiDiscrete([2, 5])),
    ],
    ids=str,
)
def test_parquet_round_trip_other_spaces(tmp_path: Path, obs_space, act_space) -> None:
    ds = make_dataset(obs_space=obs_space, act_space=act_space, units=False, probs=False)
    mapping = export_table(ds, tmp_path / "t.parquet")
    assert import_table(tmp_path / "t.parquet", mapping).equals(ds)


def write_csv(path: Path, columns: dict) -> Path:
    pcsv.write_csv(pa.table(columns), path)
    return path


def patients_table(tmp_path: Path) -> Path:
    """Rows deliberately shuffled; two patients with 3 and 2 visits, string ids and units."""
    return write_csv(
        tmp_path / "p.csv",
        {
            "patient_id": ["b", "a", "b", "a", "b"],
            "visit": [2, 1, 0, 0, 1],
            "o1": [0.3, 1.1, 0.1, 1.0, 0.2],
            "o2": [3.0, 11.0, 1.0, 10.0, 2.0],
            "treatment": [1, 0, 0, 1, 1],
            "outcome": [0.5, -1.0, 0.0, 2.0, 1.5],
            "hospital": ["north", "south", "north", "south", "north"],
            "prob": [0.5, 0.25, 0.5, 0.75, 0.5],
        },
    )


def test_import_without_next_obs_drops_last_row_loudly(tmp_path: Path) -> None:
    path = patients_table(tmp_path)
    with pytest.warns(UserWarning, match="last row of each of the 2 episodes was dropped"):
        ds = import_table(
            path,
            "episode=patient_id,timestep=visit,obs=o1|o2,action=treatment,reward=outcome,"
            "unit=hospital,behaviour_prob=prob",
            observation_space=spaces.Box(-np.inf, np.inf, (2,), np.float64),
            action_space=spaces.Discrete(2),
        )
    # episodes ordered by id ("a", "b"), rows by visit; last visits supply final observations
    np.testing.assert_array_equal(ds.episode_lengths, [1, 2])
    np.testing.assert_array_equal(ds.episode(0).observations, [[1.0, 10.0], [1.1, 11.0]])
    np.testing.assert_array_equal(ds.episode(1).observations[:, 1], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(ds.actions, [1, 0, 1])
    np.testing.assert_array_equal(ds.rewards, [2.0, 0.0, 1.5])
    np.testing.assert_array_equal(ds.behaviour_probs, [0.75, 0.5, 0.5])
    np.testing.assert_array_equal(ds.unit_ids, [1, 0])  # sorted labels: north=0, south=1
    assert ds.metadata.extra["final_observation"].startswith("last row dropped")
    assert "episode_ids" not in ds.metadata.extra and "unit_labels" not in ds.metadata.extra


def test_import_keep_ids_and_inferred_spaces_flagged(tmp_path: Path) -> None:
    path = patients_table(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = import_table(
            path,
            "episode=patient_id,timestep=visit,obs=o1|o2,action=treatment,reward=outcome,"
            "unit=hospital",
            keep_ids=True,
        )
    assert any("inferred from the data" in str(w.message) for w in caught)
    assert ds.metadata.extra["inferred_from_data"] == ["observation_space", "action_space"]
    assert ds.metadata.action_space == spaces.Discrete(2)
    assert isinstance(ds.metadata.observation_space, spaces.Box)
    assert ds.metadata.extra["episode_ids"] == ["a", "b"]
    assert ds.metadata.extra["unit_labels"] == ["north", "south"]


def test_import_missing_column_lists_available(tmp_path: Path) -> None:
    path = patients_table(tmp_path)
    with pytest.raises(DatasetError, match=r"column 'state'.*'obs'.*available columns.*o1"):
        import_table(path, "episode=patient_id,obs=state,action=treatment,reward=outcome")


def test_import_single_row_episode_without_next_obs(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "s.csv",
        {"e": [1, 2, 2], "s": [0, 1, 2], "a": [0, 1, 0], "r": [1.0, 0.0, 1.0]},
    )
    with pytest.raises(DatasetError, match=r"episode 1.*single row.*next_obs"):
        import_table(path, "episode=e,obs=s,action=a,reward=r")


def test_import_duplicate_timestep(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "d.csv",
        {"e": [1, 1, 1], "t": [0, 1, 1], "s": [0, 1, 2], "a": [0, 1, 0], "r": [1.0, 0.0, 1.0]},
    )
    with pytest.raises(DatasetError, match="timestep 1 appears twice"):
        import_table(path, "episode=e,timestep=t,obs=s,action=a,reward=r")


def test_import_inconsistent_next_obs(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "n.csv",
        {"e": [1, 1], "s": [0, 1], "s2": [2, 3], "a": [0, 1], "r": [1.0, 0.0]},
    )
    with pytest.raises(DatasetError, match="episode 1, step 0, field 'next_obs'"):
        import_table(path, "episode=e,obs=s,next_obs=s2,action=a,reward=r")


def test_import_unit_changing_inside_episode(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "u.csv",
        {"e": [1, 1, 1], "u": [5, 5, 6], "s": [0, 1, 2], "a": [0, 1, 0], "r": [1.0, 0.0, 1.0]},
    )
    with (
        pytest.warns(UserWarning, match="dropped"),
        pytest.raises(DatasetError, match="episode 1, step 2, field 'unit'"),
    ):
        import_table(path, "episode=e,unit=u,obs=s,action=a,reward=r")


def test_import_validation_error_names_source_episode(tmp_path: Path) -> None:
    """A validation failure is reported with the file's own episode id."""
    path = write_csv(
        tmp_path / "v.csv",
        {
            "pid": ["x", "x", "y", "y"],
            "s": [0, 1, 0, 1],
            "s2": [1, 2, 1, 2],
            "a": [0, 1, 0, 7],
            "r": [1.0, 0.0, 1.0, 0.0],
        },
    )
    # a Box action space is validated, not clipped (a discrete one refuses out-of-space codes
    # before validation, with their count: tests/data/test_out_of_space.py)
    with pytest.raises(DatasetError, match=r"episode 1, step 1, field 'actions'.*'y'"):
        import_table(
            path,
            "episode=pid,obs=s,next_obs=s2,action=a,reward=r",
            observation_space=spaces.Discrete(3),
            action_space=spaces.Box(0.0, 1.0, shape=(1,)),
        )


def test_import_flags_and_empty_cells(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "f.csv",
        {
            "e": [1, 1, 2],
            "s": [0, 1, 0],
            "s2": [1, 2, 2],
            "a": [0, 1, 0],
            "r": [1.0, 0.0, 1.0],
            "done": [False, True, False],
            "cut": [0, 0, 1],
        },
    )
    ds = import_table(
        path,
        "episode=e,obs=s,next_obs=s2,action=a,reward=r,terminated=done,truncated=cut",
        observation_space=spaces.Discrete(3),
        action_space=spaces.Discrete(2),
    )
    np.testing.assert_array_equal(ds.terminated, [False, True, False])
    np.testing.assert_array_equal(ds.truncated, [False, False, True])
    table = pa.table({"e": [1, None], "s": [0, 1], "a": [0, 1], "r": [1.0, 2.0]})
    pq.write_table(table, tmp_path / "n.parquet")
    with pytest.raises(DatasetError, match=r"'e'.*empty at data row 1"):
        import_table(tmp_path / "n.parquet", "episode=e,obs=s,action=a,reward=r")


def test_unknown_table_format(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="table format"):
        import_table(tmp_path / "x.xlsx", "episode=e,obs=s,action=a,reward=r")
