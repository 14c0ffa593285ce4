"""WeNet data formats <-> Lhotse: raw ``data.list`` and tar shards, readers
(lazy CutSets) and writers, with errors that name file and line or tar and member."""

from wenet_lhotse.formats.errors import SkippedItem, SkipReport, WenetDataError
from wenet_lhotse.formats.raw_list import (
    LazyWenetRawListIterator,
    read_raw_list,
    write_raw_list,
)
from wenet_lhotse.formats.shards import (
    LazyWenetShardIterator,
    ShardEntry,
    read_shard_entries,
    read_shard_list,
    write_wenet_shards,
)
from wenet_lhotse.formats.streams import atomic_output, open_input
from wenet_lhotse.formats.wenet_list import detect_data_type, read_wenet_list

__all__ = [
    "LazyWenetRawListIterator",
    "LazyWenetShardIterator",
    "ShardEntry",
    "SkipReport",
    "SkippedItem",
    "WenetDataError",
    "atomic_output",
    "detect_data_type",
    "open_input",
    "read_raw_list",
    "read_shard_entries",
    "read_shard_list",
    "read_wenet_list",
    "write_raw_list",
    "write_wenet_shards",
]
