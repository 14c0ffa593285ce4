"""A manifest line's cut, built only when needed (:class:`MetaCut`).

A map-style training sampler looks at every cut of the corpus (and, under DDP, at the
cuts of every rank) but hands out only its own batches: for bucketing and for WeNet's
``filter_conf`` it needs a cut's id, start, duration (seconds), sampling rate and
transcripts -- never its ``Recording``/``AudioSource``/``SupervisionSegment`` objects.
Building those with Lhotse's ``deserialize_item`` is most of the cost of reading a
manifest line (and of holding one), so a :class:`MetaCut` keeps the (checked) line and
builds the real cut when its batch is emitted (:meth:`MetaCut.materialize`). Any other
attribute asked of it is the real cut's (built for the occasion), so code that does not
know about it still gets correct answers, only not the fast path.

Only plain ``MonoCut`` lines become a :class:`MetaCut`
(:func:`~wenet_lhotse.sources.manifest.parse_manifest_meta` decides); the checks a
line gets are the same either way.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from lhotse.cut import Cut
from lhotse.serialization import decode_json_line, deserialize_item
from lhotse.utils import compute_num_samples

from wenet_lhotse.errors import WenetDataError, reraise_worker_death


class MetaSupervision:
    """What the loader reads of a supervision before the cut is built: ``text``,
    ``speaker``, ``language`` (WeNet's filter reads ``text``)."""

    __slots__ = ("text", "speaker", "language")

    def __init__(self, text: Optional[str], speaker: Optional[str], language: Optional[str]
                 ) -> None:
        self.text = text
        self.speaker = speaker
        self.language = language


class MetaCut:
    """A plain ``MonoCut`` from its manifest line: ``id``, ``start``, ``duration``
    (seconds), ``sampling_rate`` (Hz), ``num_samples`` and ``supervisions`` (texts)
    without building Lhotse objects; :meth:`materialize` builds the cut (with
    ``extra_custom`` merged into its ``custom``: the reader's own keys, e.g.
    ``shar_tar``, win over the cut's, which win over :meth:`tagged` tags).

    It holds the line itself (bytes or str) and plain values, not the parsed JSON:
    a sampler buffers tens of thousands of these, and nested dicts and lists would
    each be one more object for Python's cyclic garbage collector to walk again and
    again (with them, collection was the largest cost in ``bench/scale.py``'s profile)."""

    __slots__ = ("id", "start", "duration", "sampling_rate", "_sups", "_line", "_extra",
                 "_tags", "_where")

    def __init__(self, obj: Mapping[str, Any], line: Any,
                 extra_custom: Optional[Mapping[str, Any]] = None,
                 where: Tuple[str, int] = ("", 0)) -> None:
        self.id = obj["id"]
        self.start = obj["start"]
        self.duration = obj["duration"]
        self.sampling_rate = obj["recording"]["sampling_rate"]
        self._sups = tuple((s.get("text"), s.get("speaker"), s.get("language"))
                           for s in obj.get("supervisions") or ())
        self._line = line
        self._extra = extra_custom  # shared by the cuts of one file: not copied
        self._tags: Optional[Dict[str, Any]] = None
        self._where = where  # (manifest, line number) for an error when it is built

    @property
    def num_samples(self) -> int:
        """Samples of the cut at its sampling rate (as ``MonoCut.num_samples``)."""
        return compute_num_samples(self.duration, self.sampling_rate)

    @property
    def line(self) -> Any:
        """The manifest line it was read from (bytes or str, as given)."""
        return self._line

    @property
    def extra_custom(self) -> Optional[Mapping[str, Any]]:
        """The reader's keys for ``custom`` (e.g. ``shar_tar``)."""
        return self._extra

    @property
    def supervisions(self) -> Tuple[MetaSupervision, ...]:
        return tuple(MetaSupervision(*s) for s in self._sups)

    def tagged(self, tags: Mapping[str, Any]) -> MetaCut:
        """A copy whose built cut gets ``tags`` in ``custom`` (existing keys win), as
        :class:`~wenet_lhotse.sources.open.TagCuts` does to a real cut. Of the same
        class (a subclass adds no slots: it changes how the cut is built)."""
        other = type(self).__new__(type(self))
        for name in MetaCut.__slots__:
            setattr(other, name, getattr(self, name))
        other._tags = {**(self._tags or {}), **tags}
        return other

    def materialize(self) -> Cut:
        """The real cut, built anew on each call: it is not kept (a reader may hold its
        MetaCuts for a whole run, and must not come to hold every built cut too)."""
        try:
            cut = deserialize_item(decode_json_line(self._line))
        except Exception as err:  # the line was checked: not expected, but named
            reraise_worker_death(err)
            raise WenetDataError(
                f"not a Lhotse cut: {type(err).__name__}: {err}".splitlines()[0],
                self._where[0], line=self._where[1], kind="json") from None
        if self._tags or self._extra:
            cut.custom = {**(self._tags or {}), **(cut.custom or {}), **(self._extra or {})}
        return cut

    def __getattr__(self, name: str) -> Any:
        # Only reached for what the slots do not hold: the real cut answers (built for
        # the occasion: slow, but right, for code that does not know MetaCuts).
        if name.startswith("__") or name in MetaCut.__slots__:
            raise AttributeError(name)
        return getattr(self.materialize(), name)

    def __repr__(self) -> str:
        return f"MetaCut(id={self.id!r}, duration={self.duration})"
