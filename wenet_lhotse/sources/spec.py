"""A data source as the yaml describes it: :class:`SourceSpec` and :func:`parse_sources`.

A source is one of the registered kinds (:mod:`wenet_lhotse.sources.registry`; or
``auto``: detected from the path), checked by its kind, with a mixing ``weight`` and
``tags`` (``task``, ``lang`` or any key) that are written to ``cut.custom`` of each of
its cuts, where the dataset reads ``task``/``lang`` into the batch's ``tasks``/``langs``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.remote import url_scheme
from wenet_lhotse.sources.detect import KINDS, detect_input_kind
from wenet_lhotse.sources.kinds.base import check_columns
from wenet_lhotse.sources.registry import fields_kind, get_kind, kind_names

#: The detected kinds, ``auto``, then those only named in the yaml (``text``: sentences /
#: text pairs, :mod:`wenet_lhotse.sources.text`, mixed by batch).
SOURCE_TYPES = (*KINDS, "auto", *kind_names(detected=False))


@dataclass
class SourceSpec:
    """One data source.

    :param path: list file, manifest, Shar directory, or a list of them (same type).
    :param type: a registered kind (:mod:`~wenet_lhotse.sources.registry`): ``raw`` |
        ``shard`` | ``cuts`` | ``shar`` | ``nemo`` (detected, or ``auto``); ``text``
        (sentences, :mod:`~wenet_lhotse.sources.text`) | ``parquet``
        (:mod:`~wenet_lhotse.sources.parquet`); checked by the kind's ``check_spec``.
    :param weight: relative mixing weight (only used with several sources).
    :param tags: written to ``cut.custom`` of every cut; ``task`` and ``lang`` reach
        the batch as ``tasks``/``langs``.
    :param name: a label for logs and bench output (default: the file name).
    :param fields: a Shar source on object storage, as Lhotse's ``CutSet.from_shar(fields=)``
        takes it: ``{"cuts": [url, ...], "recording": [url, ...]}``, one entry per shard,
        in the same order; URLs are anything Lhotse opens (``pipe:aws s3 cp s3://... -``,
        ``pipe:curl -s https://...``, or ``s3://``/``https://`` with smart_open). Instead
        of ``path``; such a source is always streamed.
    :param repeat: (mixing by batch) start a new pass when exhausted instead of leaving the
        mix; the epoch ends when every other source is exhausted.
    :param transcripts: False for speech-only data (no targets: ``kind: speech`` batches).
    """

    path: Union[str, List[str], None] = None
    type: str = "auto"
    weight: float = 1.0
    tags: Dict[str, Any] = field(default_factory=dict)
    name: Optional[str] = None
    fields: Optional[Dict[str, List[str]]] = None
    repeat: bool = False
    transcripts: bool = True
    #: ``type: parquet``: column names ``{audio, text, id}`` (sources.parquet.ParquetColumns)
    columns: Optional[Dict[str, Optional[str]]] = None

    def __post_init__(self) -> None:
        what = self.path if self.path is not None else "shar fields"
        if self.type not in SOURCE_TYPES:
            raise ValueError(f"source {what!r}: unknown type {self.type!r}; use one of "
                             f"{', '.join(SOURCE_TYPES)}")
        if not self.weight > 0:
            raise ValueError(f"source {what!r}: weight must be > 0, got {self.weight}")
        if self.fields is not None:
            if (self.type != "auto" and not get_kind(self.type).takes_fields) \
                    or self.path is not None:
                raise ValueError(f"source {what!r}: 'fields' describes a Shar source; give "
                                 "either 'path' or 'fields'")
            if "cuts" not in self.fields or any(
                    len(v) != len(self.fields["cuts"]) for v in self.fields.values()):
                raise ValueError("Shar 'fields' need a 'cuts' list and lists of the same "
                                 "length for every field (one entry per shard)")
            self.type = fields_kind()
            self.name = self.name or self.type
            return
        if self.path is None:
            raise ValueError("a source needs 'path' (or 'fields' for Shar on object storage)")
        if self.type == "auto":
            check_columns(self)
            self.type = detect_input_kind(self.paths[0])
        else:
            get_kind(self.type).check_spec(self)
        if self.name is None:
            self.name = Path(self.paths[0]).name
        get_kind(self.type).resolve_spec(self)

    @property
    def paths(self) -> List[str]:
        if self.path is None:
            return []
        paths = self.path if isinstance(self.path, (list, tuple)) else [self.path]
        return [str(p) for p in paths]

    def check_local_paths(self) -> None:
        """WenetDataError (``missing_file``) for a local path that does not exist -- a
        cheap check for sources read later (e.g. a cv list, read when first used)."""
        for path in self.paths:
            if url_scheme(path) is None and not path.startswith("pipe:") \
                    and not os.path.exists(path):
                raise WenetDataError("no such file or directory", path, kind="missing_file")

    @property
    def streamed_by_default(self) -> bool:
        """True when ``lhotse_conf.mode: auto`` streams the source: a list of tars (WeNet
        shards; sampled by position instead once it has a shard index), or Shar given by
        URLs (``fields``: never indexed)."""
        return get_kind(self.type).lists_tars or self.fields is not None

    @classmethod
    def from_any(cls, obj: Union[SourceSpec, Mapping[str, Any], str, os.PathLike]) -> SourceSpec:
        """Build a spec from a spec, a yaml dict, or a bare path (type ``auto``)."""
        if isinstance(obj, SourceSpec):
            return obj
        if isinstance(obj, Mapping):
            unknown = set(obj) - {"path", "type", "weight", "tags", "name", "fields", "repeat",
                                  "transcripts", "columns"}
            if unknown:
                raise ValueError(f"source {dict(obj)!r}: unknown keys {sorted(unknown)}")
            if "path" not in obj and "fields" not in obj:
                raise ValueError(f"source {dict(obj)!r}: missing 'path'")
            return cls(**dict(obj))
        return cls(path=str(obj))


def parse_sources(sources: Any) -> List[SourceSpec]:
    """A list of :class:`SourceSpec` from a spec, a path, or a list of either (whether
    their data may run shell commands is the read policy's, not a source's)."""
    if isinstance(sources, (str, os.PathLike, SourceSpec, Mapping)):
        sources = [sources]
    specs = [SourceSpec.from_any(s) for s in sources]
    if not specs:
        raise ValueError("no data sources given")
    return specs
