"""Every input kind, once: the registry of kinds (:mod:`.registry`, one module each in
:mod:`.kinds`), detect what a path is (:mod:`.detect`), the Shar directory
layout (:mod:`.shar_dir`), yaml source specs (:mod:`.spec`) and opening any of them as
a lazy ``CutSet``, with tags and weighted mixing (:mod:`.open`), and the positioned
readers the map-style loader samples from (:mod:`.positioned`, :mod:`.cycled`,
:mod:`.indexed_shards`; audio of emitted batches: :mod:`.shar_audio`)."""

from wenet_lhotse.sources.detect import (
    KINDS,
    detect_data_type,
    detect_input_kind,
    detect_source_type,
)
from wenet_lhotse.sources.kinds.base import InputKind
from wenet_lhotse.sources.open import (
    mux_sources,
    open_cuts,
    open_kind,
    open_source,
    read_shar,
    read_wenet_list,
    spec_shar_fields,
)
from wenet_lhotse.sources.registry import detect, get_kind, kinds
from wenet_lhotse.sources.shar_dir import shar_fields, shar_files, shar_shard_number, shard_paths
from wenet_lhotse.sources.spec import SOURCE_TYPES, SourceSpec, parse_sources
from wenet_lhotse.sources.tags import TagCuts

__all__ = [
    "InputKind",
    "KINDS",
    "SOURCE_TYPES",
    "SourceSpec",
    "TagCuts",
    "detect",
    "detect_data_type",
    "detect_input_kind",
    "detect_source_type",
    "get_kind",
    "kinds",
    "mux_sources",
    "open_cuts",
    "open_kind",
    "open_source",
    "parse_sources",
    "read_shar",
    "read_wenet_list",
    "shar_fields",
    "shar_files",
    "shar_shard_number",
    "shard_paths",
    "spec_shar_fields",
]
