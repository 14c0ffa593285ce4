"""Data sources: a yaml-friendly spec per source, opened as a lazy Lhotse ``CutSet``.

A source is one of

* ``raw``   a WeNet raw ``data.list`` (JSON lines with ``key``/``wav``/``txt``);
* ``shard`` a WeNet shard list (one tar path or URL per line);
* ``cuts``  a Lhotse cuts manifest (``cuts.jsonl`` / ``cuts.jsonl.gz``);
* ``shar``  a Lhotse Shar directory (``cuts.*.jsonl.gz`` + ``recording.*.tar``);
* ``auto``  decided from the path (see :func:`detect_source_type`).

Each source carries a mixing ``weight`` and ``tags`` (``task``, ``lang`` or any
key). Tags are written to ``cut.custom`` of every cut of the source, where the
dataset reads ``task``/``lang`` into the batch's ``tasks``/``langs``.
Weighted mixing of several sources is Lhotse's ``CutSet.mux``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from lhotse import CutSet
from lhotse.cut import Cut
from lhotse.lazy import Dillable
from lhotse.utils import fastcopy

logger = logging.getLogger(__name__)

Pathlike = Union[str, os.PathLike]

SOURCE_TYPES = ("raw", "shard", "cuts", "shar", "auto")
#: Source types read as a stream of tar files inside DataLoader workers.
STREAMED_TYPES = ("shard",)


@dataclass
class SourceSpec:
    """One data source.

    :param path: list file, manifest, Shar directory, or a list of them (same type).
    :param type: ``raw`` | ``shard`` | ``cuts`` | ``shar`` | ``auto``.
    :param weight: relative mixing weight (only used with several sources).
    :param tags: written to ``cut.custom`` of every cut; ``task`` and ``lang`` reach
        the batch as ``tasks``/``langs``.
    :param name: a label for logs and bench output (default: the file name).
    :param fields: a Shar source on object storage, as Lhotse's ``CutSet.from_shar(fields=)``
        takes it: ``{"cuts": [url, ...], "recording": [url, ...]}``, one entry per shard,
        in the same order; URLs are anything Lhotse opens (``pipe:aws s3 cp s3://... -``,
        ``pipe:curl -s https://...``, or ``s3://``/``https://`` with smart_open). Instead
        of ``path``; such a source is always streamed.
    """

    path: Union[str, List[str], None] = None
    type: str = "auto"
    weight: float = 1.0
    tags: Dict[str, Any] = field(default_factory=dict)
    name: Optional[str] = None
    fields: Optional[Dict[str, List[str]]] = None

    def __post_init__(self) -> None:
        what = self.path if self.path is not None else "shar fields"
        if self.type not in SOURCE_TYPES:
            raise ValueError(f"source {what!r}: unknown type {self.type!r}; use one of "
                             f"{', '.join(SOURCE_TYPES)}")
        if not self.weight > 0:
            raise ValueError(f"source {what!r}: weight must be > 0, got {self.weight}")
        if self.fields is not None:
            if self.type not in ("auto", "shar") or self.path is not None:
                raise ValueError(f"source {what!r}: 'fields' describes a Shar source; give "
                                 "either 'path' or 'fields'")
            if "cuts" not in self.fields or any(
                    len(v) != len(self.fields["cuts"]) for v in self.fields.values()):
                raise ValueError("Shar 'fields' need a 'cuts' list and lists of the same "
                                 "length for every field (one entry per shard)")
            self.type = "shar"
            self.name = self.name or "shar"
            return
        if self.path is None:
            raise ValueError("a source needs 'path' (or 'fields' for Shar on object storage)")
        if self.type == "auto":
            self.type = detect_source_type(self.paths[0])
        if self.name is None:
            self.name = Path(self.paths[0]).name

    @property
    def paths(self) -> List[str]:
        if self.path is None:
            return []
        paths = self.path if isinstance(self.path, (list, tuple)) else [self.path]
        return [str(p) for p in paths]

    @property
    def streamed(self) -> bool:
        """True when the source can only be read as a stream of tars (WeNet shards, and
        Shar given by URLs)."""
        return self.type in STREAMED_TYPES or self.fields is not None

    @classmethod
    def from_any(cls, obj: Union[SourceSpec, Mapping[str, Any], str, os.PathLike]) -> SourceSpec:
        """Build a spec from a spec, a yaml dict, or a bare path (type ``auto``)."""
        if isinstance(obj, SourceSpec):
            return obj
        if isinstance(obj, Mapping):
            unknown = set(obj) - {"path", "type", "weight", "tags", "name", "fields"}
            if unknown:
                raise ValueError(f"source {dict(obj)!r}: unknown keys {sorted(unknown)}")
            if "path" not in obj and "fields" not in obj:
                raise ValueError(f"source {dict(obj)!r}: missing 'path'")
            return cls(**dict(obj))
        return cls(path=str(obj))


def parse_sources(sources: Any) -> List[SourceSpec]:
    """A list of :class:`SourceSpec` from a spec, a path, or a list of either."""
    if isinstance(sources, (str, os.PathLike, SourceSpec, Mapping)):
        sources = [sources]
    specs = [SourceSpec.from_any(s) for s in sources]
    if not specs:
        raise ValueError("no data sources given")
    return specs


def detect_source_type(path: Pathlike) -> str:
    """A source's type from its path and first line: a directory with ``cuts.*.jsonl*``
    is Shar; a JSON line with ``key`` a raw list; one with ``id`` (or a gzipped file) a
    cuts manifest; anything else (tar paths/URLs) a shard list. Raises
    :class:`~wenet_lhotse.formats.errors.WenetDataError` for a missing path."""
    from wenet_lhotse.convert.inputs import detect_input_kind

    return detect_input_kind(path)


class TagCuts(Dillable):
    """Picklable ``cut -> cut`` that adds ``tags`` to ``cut.custom`` (existing keys win)."""

    def __init__(self, tags: Mapping[str, Any]) -> None:
        self.tags = dict(tags)

    def __call__(self, cut: Cut) -> Cut:
        if not self.tags:
            return cut
        custom = dict(self.tags)
        custom.update(cut.custom or {})
        return fastcopy(cut, custom=custom)


def open_source(
    spec: SourceSpec,
    *,
    strict: bool = True,
    skip_report=None,
    shuffle_shards: bool = False,
    seed: int = 0,
    epoch: int = 0,
    split_for_dataloading: bool = False,
    transform: Optional[Callable[[CutSet], CutSet]] = None,
    shar_shards: Optional[Sequence[int]] = None,
    **split_kw: Any,
) -> CutSet:
    """Open ``spec`` as a lazy CutSet with its tags attached (no audio is decoded).

    :param shuffle_shards: shuffle the order of tars (shard/Shar) with ``seed + epoch``.
    :param split_for_dataloading: give each (rank, DataLoader worker) its own tars.
    :param transform: applied to the CutSet before tagging (e.g. WeNet's filters).
    :param split_kw: for shard lists, explicit ``rank``/``world_size``/``worker_id``/
        ``num_workers`` of the split (default: detected).
    :param shar_shards: for Shar, read exactly these shard indices, in this order (the
        caller's own split; ``shuffle_shards``/``split_for_dataloading`` are then unused).
    """
    paths = spec.paths
    if spec.type == "raw":
        from wenet_lhotse.formats import read_raw_list

        cuts = read_raw_list(paths, strict=strict, skip_report=skip_report)
    elif spec.type == "shard":
        from wenet_lhotse.formats import read_shard_list

        cuts = read_shard_list(paths, shuffle_shards=shuffle_shards, seed=seed, epoch=epoch,
                               split_for_dataloading=split_for_dataloading, strict=strict,
                               skip_report=skip_report, **split_kw)
    elif spec.type == "cuts":
        cuts = _chain([CutSet.from_jsonl_lazy(p) for p in paths])
    elif spec.type == "shar":
        if spec.fields is None and len(paths) != 1:
            raise ValueError(f"source {spec.name}: a Shar source takes one directory")
        if shar_shards is not None:
            fields = shar_fields(spec)
            chosen = {f: [urls[i] for i in shar_shards] for f, urls in fields.items()}
            cuts = CutSet.from_shar(fields=chosen) if shar_shards else CutSet()
        else:
            where = {"fields": spec.fields} if spec.fields is not None else {"in_dir": paths[0]}
            cuts = CutSet.from_shar(**where, shuffle_shards=shuffle_shards,
                                    split_for_dataloading=split_for_dataloading,
                                    seed=seed + epoch, stateful_shuffle=False)
    else:  # pragma: no cover - __post_init__ resolves "auto"
        raise ValueError(spec.type)
    if transform is not None:
        cuts = transform(cuts)
    if spec.tags:
        cuts = cuts.map(TagCuts(spec.tags))
    return cuts


def shar_fields(spec: SourceSpec) -> Dict[str, List[str]]:
    """``{field: [path or URL per shard]}`` of a Shar source: its ``fields``, or the
    ``<field>.<index>.<ext>`` files of its directory, by shard index."""
    if spec.fields is not None:
        return {f: list(v) for f, v in spec.fields.items()}
    found: Dict[str, Dict[int, str]] = {}
    for p in Path(spec.paths[0]).iterdir():
        parts = p.name.split(".")
        if len(parts) >= 3 and parts[1].isdigit():
            found.setdefault(parts[0], {})[int(parts[1])] = str(p)
    if "cuts" not in found:
        raise ValueError(f"{spec.paths[0]}: no cuts.*.jsonl* files: not a Shar directory")
    n = len(found["cuts"])
    for f, shards in found.items():
        if sorted(shards) != list(range(n)):
            raise ValueError(f"{spec.paths[0]}: field {f!r} has shards {sorted(shards)}, "
                             f"cuts has {n}")
    return {f: [shards[i] for i in range(n)] for f, shards in found.items()}


def _chain(cutsets: Sequence[CutSet]) -> CutSet:
    out = cutsets[0]
    for cs in cutsets[1:]:
        out = out + cs
    return out


def mux_sources(
    cutsets: Sequence[CutSet],
    weights: Optional[Sequence[float]] = None,
    seed: int = 0,
    stop_early: bool = False,
    infinite: bool = False,
) -> CutSet:
    """Weighted mixing with Lhotse: ``CutSet.mux`` (ends when every source is
    exhausted, or at the first with ``stop_early``) or ``CutSet.infinite_mux``
    (never ends; sources are sampled with replacement). One source is returned as is."""
    if len(cutsets) == 1:
        return cutsets[0]
    weights = list(weights) if weights is not None else [1.0] * len(cutsets)
    if infinite:
        return CutSet.infinite_mux(*cutsets, weights=weights, seed=seed)
    return CutSet.mux(*cutsets, weights=weights, seed=seed, stop_early=stop_early)
