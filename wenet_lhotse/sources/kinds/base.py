"""What an input kind is: :class:`InputKind`, the hooks every consumer asks.

An input kind (a WeNet raw list, a shard list, a Lhotse manifest, ...) is one object,
defined in its own module under :mod:`wenet_lhotse.sources.kinds` and registered with
one line in :mod:`wenet_lhotse.sources.registry`. Consumers (opening, yaml sources, the
loader's map/streamed modes, the WeNet drop-in, the tools) ask the kind instead of
comparing its name to a string. A kind module is a thin adapter: the readers stay where
they are (``formats/``, ``sources/manifest.py``, ...); the kind says which one to use
and how.

Flags (class attributes, read by consumers):

* ``name`` / ``description``: the yaml ``type`` and one line for ``KINDS``;
* ``detected``: :func:`~wenet_lhotse.sources.registry.detect` may return it (text and
  Parquet sources are only ever named in the yaml);
* ``wenet``: one of WeNet's ``data_type`` values;
* ``lists_tars``: a list of tar files (WeNet shards): ``auto`` mode streams it unless it
  has a shard index, and the tools take it one tar at a time;
* ``streamable``: the streamed loader can read it (:meth:`stream_kw`);
* ``directory``: a directory / object-store prefix, not a file (:meth:`sniff_dir`);
* ``single_path``: a source of this kind takes exactly one path;
* ``takes_fields``: a source may give Lhotse Shar ``fields`` instead of ``path``;
* ``text_only``: sentences, no audio (the loader mixes such sources by batch);
* ``late_audio``: map-style reading yields cuts whose audio is fetched later, from
  their tars (the loader's ``SharAudioAttacher``);
* ``indexable``: a shard index (``wenet-lhotse index``) may describe it.

Hooks (methods; the defaults suit a file kind read through :meth:`open`):

* **detect** -- :meth:`sniff_magic` (a local file's first bytes: binary formats),
  :meth:`sniff` (a file's first non-empty line: :data:`SURE`, :data:`MAYBE` or
  :data:`NO`) and :meth:`sniff_dir` (a directory or prefix); registration order
  breaks ties (the first SURE wins, else the first MAYBE);
* **check** -- :meth:`check_spec`: a yaml source of this kind is valid (one-line
  ``ValueError``), and :meth:`resolve_spec` completes it (e.g. a remote Shar prefix
  becomes its ``fields``);
* **open** -- :meth:`open` (paths + :class:`~wenet_lhotse.io.policy.ReadPolicy` + shuffle
  / split arguments -> lazy ``CutSet``) and :meth:`open_source` (the same for a
  :class:`~wenet_lhotse.sources.spec.SourceSpec`); ``reader``: the format's own reader
  function for :func:`~wenet_lhotse.sources.open.read_wenet_list`;
* **stream** -- :meth:`stream_kw`: the keywords of :meth:`open_source` that give one
  (rank, DataLoader worker) its share of the tars in one epoch;
* **count / metadata** -- :meth:`metadata`: the source's cuts without audio, for bucket
  estimation and statistics;
* **work units** (for ``validate``, ``stats``, ``cmvn``, ``index``) -- inherited from
  :class:`~wenet_lhotse.sources.units.UnitReader`: :meth:`work_units` (how the input
  splits into tasks; default: slices of :meth:`open`'s cuts), :meth:`read_unit`,
  :meth:`audit_unit`, :meth:`cut_label`, :meth:`line_finder`, :meth:`prepare_index`,
  and the flags ``keys_repeat_across_units``, ``reads_in_caller``, ``stats_fatal``;
* **map-style reading** -- :meth:`map_reader`: the source as the loader's positioned
  reader, built from the :class:`PositionedReaders` the loader passes in (the loader is
  a layer above, so it hands its readers down rather than being imported).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Dict, List, Optional, Protocol, Sequence

from lhotse import CutSet

from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.kinds.sniff import NO, FirstLine
from wenet_lhotse.sources.tags import TagCuts
from wenet_lhotse.sources.units import UnitReader


class PositionedReaders(Protocol):
    """The map-style loader's readers (:mod:`wenet_lhotse.sources.positioned`), bound to one
    source's shuffling, seed and policy, as the loader hands them to :meth:`map_reader`."""

    policy: ReadPolicy
    light: bool  #: metadata-only cuts (the training sampler materializes what it emits)
    probe_cache: Any  #: ``lhotse_conf.probe_cache``

    def jsonl(self, paths: Sequence[str]) -> Any:
        """Cuts manifests read lazily by line number."""

    def shar(self, in_dir: str) -> Any:
        """A Shar directory's cuts (audio fetched later from its tars)."""

    def in_memory(self, cuts: List[Any]) -> Any:
        """Cuts held in memory."""


class InputKind(UnitReader):
    """One input kind (see the module doc for every flag and hook)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    detected: ClassVar[bool] = True
    wenet: ClassVar[bool] = False
    lists_tars: ClassVar[bool] = False
    streamable: ClassVar[bool] = False
    directory: ClassVar[bool] = False
    single_path: ClassVar[bool] = False
    takes_fields: ClassVar[bool] = False
    text_only: ClassVar[bool] = False
    late_audio: ClassVar[bool] = False
    indexable: ClassVar[bool] = False
    #: the format's own reader function, called with its own keywords
    reader: ClassVar[Optional[Callable[..., CutSet]]] = None
    #: why a path of this kind is not read as WeNet's ``--train_data`` list, and what to
    #: do instead (one line); None: it is read (as a Lhotse source)
    wenet_list_refusal: ClassVar[Optional[str]] = None
    #: why ``wenet-lhotse import -o CUTS`` / ``import --shar DIR`` does not take this kind
    #: and which command does (one line); None: it does (WeNet lists have their own path)
    import_cuts_refusal: ClassVar[Optional[str]] = None
    import_shar_refusal: ClassVar[Optional[str]] = None

    def __repr__(self) -> str:
        return f"<input kind {self.name!r}: {self.description}>"

    # -- detect ---------------------------------------------------------------------------
    def sniff(self, first: FirstLine) -> int:
        """:data:`SURE`/:data:`MAYBE`/:data:`NO`: is a file with this first line mine?"""
        return NO

    def sniff_dir(self, path: str) -> bool:
        """Is this directory (or object-store prefix) mine?"""
        return False

    def sniff_magic(self, head: bytes) -> bool:
        """Is a local file starting with these bytes (at most 16) mine? Asked before
        any line is read: a binary format is told by its magic, not read as text."""
        return False

    # -- check ----------------------------------------------------------------------------
    def check_spec(self, spec: Any) -> None:
        """ValueError (one line, naming the source) for a yaml source of this kind that
        cannot be read. The default refuses Parquet's ``columns``."""
        check_columns(spec)

    def resolve_spec(self, spec: Any) -> None:
        """Complete ``spec`` once its kind is known (default: nothing to do)."""

    # -- open -----------------------------------------------------------------------------
    def open(self, paths: Sequence[str], policy: ReadPolicy, *, wav_root: Any = None,
             with_audio: bool = True, shuffle_shards: bool = False, seed: int = 0,
             epoch: int = 0, split_for_dataloading: bool = False,
             fields: Optional[Dict[str, List[str]]] = None,
             shar_shards: Optional[Sequence[int]] = None, **split_kw: Any) -> CutSet:
        """``paths`` as one lazy CutSet (no audio decoded). ``with_audio=False``: only
        what statistics need; ``shuffle_shards``/``seed``/``epoch``: the tar order;
        ``split_for_dataloading``/``split_kw``/``shar_shards``: this reader's share."""
        raise ValueError(f"a {self.name} source cannot be opened as cuts")

    def open_source(self, spec: Any, policy: ReadPolicy, **kw: Any) -> CutSet:
        """A yaml source as a lazy CutSet (before its transform and tags); ``kw`` as
        :meth:`open` takes them."""
        return self.open(spec.paths, policy, fields=spec.fields, **kw)

    def open_tagged(self, spec: Any, policy: ReadPolicy, transform: Any = None,
                    **kw: Any) -> CutSet:
        """:meth:`open_source` with ``transform`` applied and the source's tags added."""
        cuts = self.open_source(spec, policy, **kw)
        if transform is not None:
            cuts = transform(cuts)
        return cuts.map(TagCuts(spec.tags)) if spec.tags else cuts

    # -- stream ---------------------------------------------------------------------------
    def stream_kw(self, spec: Any, *, rank: int, world_size: int, worker: int,
                  num_workers: int, shuffle: bool, seed: int, epoch: int) -> Dict[str, Any]:
        """Keywords for :meth:`open_source` that read this (rank, worker)'s share of the
        tars in ``epoch``."""
        raise ValueError(f"a {self.name} source cannot be streamed: use lhotse_conf.mode "
                         "'map'")

    # -- count / metadata -----------------------------------------------------------------
    def metadata(self, spec: Any, readers: PositionedReaders, transform: Any) -> CutSet:
        """The source's cuts for statistics and bucket estimation, ``transform`` applied
        (default: as opened; shard lists read their first tars)."""
        return self.open_tagged(spec, readers.policy, transform)

    # -- map-style reading ----------------------------------------------------------------
    def map_reader(self, spec: Any, readers: PositionedReaders) -> Any:
        """The source as a positioned reader (default: its cuts held in memory)."""
        return readers.in_memory(list(self.open_tagged(spec, readers.policy)))


def check_columns(spec: Any, allowed: frozenset = frozenset()) -> None:
    """A source's ``columns`` name only ``allowed`` columns (none: only a Parquet source
    has ``columns``, see :mod:`.parquet`)."""
    if spec.columns is not None and (not allowed or set(spec.columns) - allowed):
        raise ValueError(f"source {spec.path!r}: 'columns' names a parquet source's audio, "
                         f"text and id columns, got {spec.columns!r}")
