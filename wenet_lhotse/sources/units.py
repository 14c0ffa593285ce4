"""Work units: how an input kind splits into tasks for the parallel tools, and how one
task reads its share.

``validate``, ``stats``, ``cmvn`` and ``index`` (:mod:`wenet_lhotse.convert`) run one
generic loop over the *work units* of an input through
:func:`~wenet_lhotse.convert.executor.map_tasks`; what a unit is, and how one is read,
is the input kind's business (:class:`UnitReader`, the hooks every kind has):

* :meth:`UnitReader.work_units` -- the units of ``path``, picklable
  :class:`WorkUnit` objects (a shard list: its tars; Shar: its shards; a raw list or
  cuts manifest: slices of the cuts its reader yields here, in the calling process,
  so that the reader's own checks -- duplicate keys, line numbers -- see the whole
  input). Problems met while splitting go to the :class:`~wenet_lhotse.io.policy.
  ReadPolicy` (strict: raised; else recorded).
* :meth:`UnitReader.read_unit` -- the cuts of one unit (in a worker), each as a
  :class:`UnitCut` that says where it is (file and line, or tar and member), with the
  audio readable (``audio=True``) or metadata only.
* :meth:`UnitReader.audit_unit` -- ``validate``'s extra checks of one unit (a Shar
  shard written while items were skipped), :meth:`UnitReader.cut_label` -- how an
  error names a cut, :meth:`UnitReader.line_finder` -- the line of a key when the
  reader does not say it, :meth:`UnitReader.prepare_index` -- what ``wenet-lhotse
  index`` writes for the kind.

Flags say what the generic loops must do for a kind: ``keys_repeat_across_units``
(its reader sees one unit at a time: ``validate`` checks keys across units),
``reads_in_caller`` (its units carry cuts already read: a metadata-only tool reads
them in the calling process), ``stats_fatal`` (problem kinds after which statistics
would cover an unknown part of the input); ``index`` writes a shard index for the kinds
that are ``indexable`` (:class:`~wenet_lhotse.sources.kinds.base.InputKind`).

The default :meth:`UnitReader.work_units` slices the kind's own lazy CutSet
(:meth:`UnitReader.open_cuts`), so a new kind that can open itself works with every
tool; a kind that cannot do something (a text-only source has no audio to validate)
says so by raising :class:`~wenet_lhotse.errors.WenetDataError` naming the kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, List, NamedTuple, Optional, Tuple

from lhotse.cut import Cut
from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.policy import ReadPolicy


@dataclass
class WorkUnit:
    """One task's share of an input (picklable): ``kind`` is the input kind's name (a
    worker asks the registry for its reader), ``label`` names the unit in messages (a
    tar URL, a Shar shard's tar, a list path) and ``payload`` is what the kind needs to
    read it (a tar entry, Shar fields, a list of :class:`UnitCut`)."""

    kind: str
    label: str
    payload: Any


class UnitCut(NamedTuple):
    """A cut read from a unit and where it is: ``source`` (file, tar or URL), ``member``
    (tar member or cut id in a tar, else None) and ``line`` (1-based, when known)."""

    cut: Cut
    source: str
    member: Optional[str] = None
    line: Optional[int] = None


#: Cuts per unit when a reader yields them in the calling process.
DEFAULT_UNIT_CUTS = 64

#: What ``index`` says of a kind read by line number already (a manifest, Shar).
MANIFEST_INDEX = ("its cuts manifests are the index already (map mode reads them by "
                  "line number); nothing to write")


def slices(items: Iterable[UnitCut], kind: str, label: str, size: int) -> Iterator[WorkUnit]:
    """``items`` cut into units of ``size`` cuts (the last one shorter)."""
    batch: List[UnitCut] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield WorkUnit(kind, f"{label} ({batch[0].cut.id}...)", batch)
            batch = []
    if batch:
        yield WorkUnit(kind, f"{label} ({batch[0].cut.id}...)", batch)


class UnitReader:
    """The tool-side hooks of an input kind, with the defaults of the module doc. A
    kind overrides what it does differently; ``name`` is the kind's name."""

    name: str = ""
    #: What a unit is, in messages ("tar", "shard", "list").
    unit_name: str = "unit"
    #: The kind's reader sees one unit at a time: ``validate`` checks keys across units.
    keys_repeat_across_units: bool = False
    #: Units carry cuts already read in the calling process.
    reads_in_caller: bool = True
    #: Problem kinds after which statistics would describe an unknown part of the input.
    stats_fatal: Tuple[str, ...] = ()
    #: What ``index`` says when the kind needs no index written.
    index_note: str = "nothing to index: map mode reads it as it is; nothing to write"

    def open_cuts(self, path: str, policy: ReadPolicy, *, audio: bool = True,
                  wav_root: Optional[Pathlike] = None) -> Iterable[Cut]:
        """The kind's cuts of ``path`` (lazily), what the default units slice: its
        ``open`` (:class:`~wenet_lhotse.sources.kinds.base.InputKind`). A kind without
        audio, asked for audio, or without cuts, raises a one-line
        :class:`~wenet_lhotse.errors.WenetDataError` naming the kind."""
        if audio and getattr(self, "text_only", False):
            raise WenetDataError(f"a {self.name} input has no audio to read (validate and "
                                 "cmvn need speech)", path, kind="format")
        try:
            return self.open([path], policy, wav_root=wav_root,  # type: ignore[attr-defined]
                             with_audio=audio)
        except (AttributeError, ValueError) as err:
            raise WenetDataError(f"the {self.name} input kind cannot be read by the data "
                                 f"tools: {err}", path, kind="format") from None

    def work_units(self, path: str, policy: ReadPolicy, *, audio: bool = True,
                   chunk_size: int = DEFAULT_UNIT_CUTS, wav_root: Optional[Pathlike] = None,
                   mapper: Optional[Callable] = None
                   ) -> Tuple[Iterator[WorkUnit], Optional[int]]:
        """``(units, their number or None when not known up front)`` of ``path``.

        :param audio: the units will be read with audio (False: metadata only).
        :param chunk_size: cuts per unit where the kind slices a stream of cuts.
        :param mapper: ``map_tasks``-like ``(fn, jobs) -> (job, result)`` a kind may
            use to read its input itself in parallel (a raw list's header probes)."""
        cuts = (UnitCut(c, path) for c in self.open_cuts(path, policy, audio=audio,
                                                          wav_root=wav_root))
        return slices(cuts, self.name, path, chunk_size), None

    def read_unit(self, unit: WorkUnit, policy: ReadPolicy, *, audio: bool = True
                  ) -> Iterator[UnitCut]:
        """The cuts of ``unit`` (runs in a worker); bad items go to ``policy``."""
        yield from unit.payload

    def audit_unit(self, unit: WorkUnit) -> List[WenetDataError]:
        """Problems of ``unit`` as a whole that ``validate`` reports (default: none)."""
        return []

    def cut_label(self, cut: Cut) -> str:
        """How a problem message names ``cut``."""
        return repr(cut.id)

    def line_finder(self, path: str) -> Callable[[str], Optional[int]]:
        """``key -> 1-based line`` in ``path`` for cuts whose unit did not say it."""
        return lambda key: None

    def prepare_index(self, path: str, cache_dir: Optional[str] = None) -> str:
        """Write what ``wenet-lhotse index`` writes for this kind (when not a shard
        index); returns a one-line account."""
        return f"{path}: {self.name} input: {self.index_note}"
