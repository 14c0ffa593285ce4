"""A source as the map-style loader reads it: :func:`map_reader` (a positioned reader)
and :func:`source_metadata` (cuts without audio, for bucket estimation).

Each source's kind decides (:meth:`~wenet_lhotse.sources.kinds.base.InputKind.map_reader`
and ``.metadata``); it builds its reader from :class:`SourceReaders`, the loader's readers
(:mod:`wenet_lhotse.sources.positioned`) bound to the source's shuffling, seed and read
policy. This module
only binds them, so the loader never switches on a kind's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from lhotse import CutSet

from wenet_lhotse.errors import SkipReport
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.loader.config import LoaderConfig
from wenet_lhotse.sources import SourceSpec
from wenet_lhotse.sources.cycled import CycledReader
from wenet_lhotse.sources.indexed_shards import IndexReader
from wenet_lhotse.sources.positioned import JsonlReader, ListReader, shar_reader
from wenet_lhotse.sources.registry import get_kind
from wenet_lhotse.sources.shar_audio import SharAudioAttacher


@dataclass
class SourceReaders:
    """The loader's positioned readers for one source
    (:class:`~wenet_lhotse.sources.kinds.base.PositionedReaders`).

    :param shuffle: WeNet's ``list_shuffle``: reorder lines (in memory) or files each pass.
    :param buffer_size: ``list_shuffle_size`` of an in-memory list (``None``: whole list).
    :param light: metadata-only cuts (the training sampler builds what it emits).
    :param probe_cache: ``lhotse_conf.probe_cache`` (raw lists).
    """

    policy: ReadPolicy
    shuffle: bool = False
    seed: int = 0
    light: bool = False
    buffer_size: Optional[int] = None
    probe_cache: Any = None

    def _kw(self) -> dict:
        return {"shuffle_files": self.shuffle, "seed": self.seed, "light": self.light,
                "policy": self.policy}

    def jsonl(self, paths: Sequence[str]) -> JsonlReader:
        return JsonlReader(paths, **self._kw())

    def shar(self, in_dir: str) -> JsonlReader:
        return shar_reader(in_dir, **self._kw())

    def in_memory(self, cuts: List[Any]) -> ListReader:
        return ListReader(cuts, shuffle=self.shuffle, seed=self.seed,
                          buffer_size=self.buffer_size)


def map_reader(spec: SourceSpec, cfg: LoaderConfig, seed: int, policy: ReadPolicy,
               light: bool = False,
               index: Optional[List[Tuple[str, List[int]]]] = None) -> Any:
    """The source as a positioned reader: WeNet's ``list_shuffle`` reorders its lines
    (in memory) or files (manifests, Shar) or tars (indexed shards: ``index``, the parts
    of :func:`~wenet_lhotse.sources.indexed_shards.open_shard_index`) each pass;
    ``cycle`` > 1 reads it that
    many times per epoch (:class:`~wenet_lhotse.sources.cycled.CycledReader`)."""
    reader: Any
    if index is not None:
        window = cfg.lhotse.read_window_mb
        reader = IndexReader(index, shuffle=cfg.list_shuffle, seed=seed, light=light,
                             policy=policy,
                             window_bytes=int(window * (1 << 20)) if window else None)
    else:
        readers = SourceReaders(policy, shuffle=cfg.list_shuffle, seed=seed, light=light,
                                buffer_size=cfg.list_shuffle_size,
                                probe_cache=cfg.lhotse.probe_cache)
        reader = get_kind(spec.type).map_reader(spec, readers)
    return CycledReader(reader, cfg.cycle) if cfg.cycle > 1 else reader


def source_metadata(spec: SourceSpec, policy: ReadPolicy, transform: Any) -> CutSet:
    """The source's cuts for estimating bins, ``transform`` applied: as its kind reads
    them without audio (Shar: its cuts jsonl only; shard lists read their first tars)."""
    # skips met here are met, and counted, again for batches
    readers = SourceReaders(policy.replace(skip_report=SkipReport(log=False)))
    return get_kind(spec.type).metadata(spec, readers, transform)


def audio_attacher(specs: Sequence[SourceSpec], policy: ReadPolicy,
                   indexed: bool = False) -> Optional[SharAudioAttacher]:
    """What fetches the audio of map-style cuts read without it -- sources whose kind
    has ``late_audio`` (Shar), or ``indexed`` shard lists -- or None. It reads as
    ``policy`` says, into a report of its own (forwarded with each batch)."""
    if not indexed and not any(get_kind(s.type).late_audio for s in specs):
        return None
    return SharAudioAttacher(policy=policy.replace(skip_report=SkipReport()))
