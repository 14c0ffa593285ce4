"""``shard``: a WeNet shard list (one tar path, URL or ``pipe:`` per line), read by
:func:`~wenet_lhotse.formats.shard_reader.read_shard_list`.

Detected by a first line that is a tar path, a URL or ``pipe:`` (of a file that is not
gzip). Only readable as a stream of tars: ``auto`` mode streams it (each rank and
DataLoader worker reads its own tars) unless a shard index (``wenet-lhotse index``)
lets the map-style loader sample it by offset; map mode without an index loads its
cuts into memory, with a warning.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

from lhotse import CutSet

from wenet_lhotse.formats.shard_reader import read_one_tar, read_shard_entries, read_shard_list
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.kinds.base import InputKind, PositionedReaders
from wenet_lhotse.sources.kinds.sniff import NO, SURE, FirstLine, looks_like_shard_line
from wenet_lhotse.sources.units import UnitCut, WorkUnit

logger = logging.getLogger(__name__)


class ShardKind(InputKind):
    name = "shard"
    description = "WeNet shard list (one tar path, URL or pipe: per line)"
    wenet = True
    lists_tars = True
    streamable = True
    indexable = True
    reader = staticmethod(read_shard_list)

    def sniff(self, first: FirstLine) -> int:
        ok = first.line and not first.is_json and not first.gz
        return SURE if ok and looks_like_shard_line(first.line) else NO

    def open(self, paths: Sequence[str], policy: ReadPolicy, *, shuffle_shards: bool = False,
             seed: int = 0, epoch: int = 0, split_for_dataloading: bool = False,
             wav_root: Any = None, with_audio: bool = True, fields: Any = None,
             shar_shards: Any = None, **split_kw: Any) -> CutSet:
        recorder = split_kw.pop("recorder", None)  # a streamed first pass writes the index
        if recorder is not None:
            return recorder.open(paths, policy=policy, shuffle_shards=shuffle_shards,
                                 seed=seed, epoch=epoch,
                                 split_for_dataloading=split_for_dataloading, **split_kw)
        return read_shard_list(paths, shuffle_shards=shuffle_shards, seed=seed, epoch=epoch,
                               split_for_dataloading=split_for_dataloading, policy=policy,
                               **split_kw)

    def stream_kw(self, spec: Any, *, rank: int, world_size: int, worker: int,
                  num_workers: int, shuffle: bool, seed: int, epoch: int) -> Dict[str, Any]:
        return {"rank": rank, "world_size": world_size, "worker_id": worker,
                "num_workers": num_workers}

    def map_reader(self, spec: Any, readers: PositionedReaders) -> Any:
        reader = super().map_reader(spec, readers)
        logger.warning("source %s: WeNet shards loaded into memory for map-style "
                       "loading (%d cuts)", spec.name, len(reader))
        return reader

    # -- the tools' work units (sources/units.py): one per tar, read by the task ---------------
    unit_name = "tar"
    keys_repeat_across_units = True
    reads_in_caller = False

    def work_units(self, path: str, policy: ReadPolicy, **_: Any
                   ) -> Tuple[Iterator[WorkUnit], Optional[int]]:
        tars = read_shard_entries([path], policy=policy)
        return (WorkUnit(self.name, t.url, t) for t in tars), len(tars)

    def read_unit(self, unit: WorkUnit, policy: ReadPolicy, *, audio: bool = True
                  ) -> Iterator[UnitCut]:
        for cut in read_one_tar(unit.payload, policy=policy):
            yield UnitCut(cut, unit.label, cut.id)


KIND = ShardKind()
