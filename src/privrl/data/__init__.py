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
    content_sha256,
    header_of,
    load_hdf5,
    read_header,
    save_hdf5,
)
from privrl.data.minari_io import export_minari, import_minari
from privrl.data.paths import cache_dir, data_dir
from privrl.data.spaces import space_from_dict, space_from_json, space_to_dict, space_to_json
from privrl.data.tables import (
    ColumnMapping,
    export_table,
    from_table,
    import_table,
    parse_column_mapping,
    read_table,
)

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
    "content_sha256",
    "data_dir",
    "export_minari",
    "export_table",
    "from_table",
    "header_of",
    "import_minari",
    "import_table",
    "load_hdf5",
    "parse_column_mapping",
    "read_header",
    "read_table",
    "save_hdf5",
    "space_from_dict",
    "space_from_json",
    "space_to_dict",
    "space_to_json",
]
