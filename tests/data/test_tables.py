"""`privrl.data.tables`: a table in memory (Arrow, a mapping of columns) becomes the same
dataset as the file it would be written to, and the steps of the import are callable alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from gymnasium import spaces

from privrl.data.dataset import DatasetError
from privrl.data.tables import (
    as_arrow,
    as_mapping,
    export_table,
    from_table,
    import_table,
    read_table,
    stored_metadata,
)
from tests.data.test_io import make_dataset


def test_from_table_equals_import_table(tmp_path: Path) -> None:
    ds = make_dataset()
    path = tmp_path / "t.parquet"
    mapping = export_table(ds, path)
    table = read_table(path)
    assert stored_metadata(table) is not None
    in_memory = from_table(table, mapping, source=path.name)
    from_file = import_table(path, mapping)
    assert in_memory.equals(from_file, check_metadata=False)
    assert in_memory.equals(ds)
    assert from_file.metadata.extra.get("source", {}).get("file") in (None, "t.parquet")


def test_a_mapping_of_columns_is_a_table() -> None:
    columns = {
        "patient": [7, 7, 7, 3, 3],
        "state": [0, 1, 2, 4, 5],
        "treatment": [1, 0, 1, 0, 1],
        "outcome": [0.5, -1.0, 2.0, 0.0, 1.0],
    }
    with pytest.warns(UserWarning, match="last row of each of the 2 episodes was dropped"):
        ds = from_table(
            columns,
            {"episode": "patient", "obs": "state", "action": "treatment", "reward": "outcome"},
            observation_space=spaces.Discrete(6),
            action_space=spaces.Discrete(2),
        )
    # episodes ordered by id (3 before 7); the last row of each supplies the final observation
    assert ds.n_episodes == 2 and list(ds.episode_lengths) == [1, 2]
    np.testing.assert_array_equal(ds.observations, [4, 5, 0, 1, 2])
    np.testing.assert_array_equal(ds.rewards, [0.0, 0.5, -1.0])
    assert ds.metadata.extra["source"] == {"format": "table"}


def test_library_errors_name_the_keyword_not_a_flag(tmp_path: Path) -> None:
    columns = {"e": [0, 0, 0], "o": [1, 2, 3], "a": [0, 0, 0], "r": [0.0, 0.0, 0.0]}
    mapping = "episode=e,obs=o,action=a,reward=r"
    with (
        pytest.raises(DatasetError, match="clip_out_of_space=True") as err,
        pytest.warns(UserWarning),
    ):
        from_table(columns, mapping, observation_space=spaces.Discrete(3))
    assert "--" not in str(err.value)
    with pytest.raises(DatasetError, match="keep_columns: column 'r' is given twice"):
        from_table(columns, mapping, keep_columns=["r", "r"])


def test_bad_tables_and_mappings_are_refused() -> None:
    with pytest.raises(TypeError, match="pyarrow Table"):
        as_arrow([1, 2, 3])
    assert isinstance(as_arrow({"x": [1]}), pa.Table)
    assert as_mapping("episode=e,obs=o,action=a,reward=r").episode == "e"
    with pytest.raises(DatasetError, match="missing required"):
        as_mapping({"episode": "e"})
