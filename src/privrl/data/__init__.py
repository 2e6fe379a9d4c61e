"""Datasets of episodes: the ``TrajectoryDataset`` type, files, interop and collection."""

from privrl.data.collect import collect
from privrl.data.dataset import (
    DatasetError,
    DatasetMetadata,
    Episode,
    MDPArrays,
    TrajectoryDataset,
    Transitions,
)
from privrl.data.io import (
    SCHEMA_VERSION,
    ColumnMapping,
    export_table,
    import_table,
    load_hdf5,
    parse_column_mapping,
    save_hdf5,
)
from privrl.data.minari_io import export_minari, import_minari
from privrl.data.paths import cache_dir, data_dir
from privrl.data.spaces import space_from_dict, space_from_json, space_to_dict, space_to_json

__all__ = [
    "SCHEMA_VERSION",
    "ColumnMapping",
    "DatasetError",
    "DatasetMetadata",
    "Episode",
    "MDPArrays",
    "TrajectoryDataset",
    "Transitions",
    "cache_dir",
    "collect",
    "data_dir",
    "export_minari",
    "export_table",
    "import_minari",
    "import_table",
    "load_hdf5",
    "parse_column_mapping",
    "save_hdf5",
    "space_from_dict",
    "space_from_json",
    "space_to_dict",
    "space_to_json",
]
