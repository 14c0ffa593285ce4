"""WeNet's on-disk data formats <-> Lhotse: raw ``data.list`` and tar shards, readers
(lazy CutSets) and writers, Kaldi data dirs, input streams, and the WeNet item layout
on a cut. Errors name file and line or tar and member (:mod:`wenet_lhotse.errors`).
Telling input kinds apart and opening any of them is :mod:`wenet_lhotse.sources`."""

from wenet_lhotse.formats.raw_list import LazyWenetRawListIterator, read_raw_list
from wenet_lhotse.formats.raw_list_writer import write_raw_list
from wenet_lhotse.formats.shard_reader import (
    LazyWenetShardIterator,
    ShardEntry,
    read_one_tar,
    read_shard_entries,
    read_shard_list,
)
from wenet_lhotse.formats.shard_writer import write_wenet_shards
from wenet_lhotse.io.lhotse_io import install_lhotse_io_backend

# Lhotse's readers and writers (Shar tars, manifests, url audio) reach object storage
# from any process that imports wenet_lhotse.formats, DataLoader and Dask workers included.
install_lhotse_io_backend()

__all__ = [
    "LazyWenetRawListIterator",
    "LazyWenetShardIterator",
    "ShardEntry",
    "read_one_tar",
    "read_raw_list",
    "read_shard_entries",
    "read_shard_list",
    "write_raw_list",
    "write_wenet_shards",
]
