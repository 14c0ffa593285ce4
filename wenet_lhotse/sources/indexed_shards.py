"""WeNet tar shards sampled through their index (:mod:`wenet_lhotse.formats.shard_index`)
like map mode samples manifests: :class:`IndexReader` is a positioned reader over the
index's rows, :func:`open_shard_index` finds and checks a shard list's index.

Order of an epoch: the list's tars (shuffled with ``seed + epoch`` under WeNet's
``list_shuffle``), each tar's utterances in tar order -- WeNet's shard order, and the
locality that lets one read serve neighbouring members. A position is an utterance's
place in that order; restoring a position is arithmetic on per-tar counts (no reading).
The sampler's shuffle buffer then mixes tars as WeNet's sample shuffle does. With
``window_bytes`` (``lhotse_conf.read_window_mb``) the tars are cut into windows and
shuffled within each (:mod:`.window_order`); remote tars are then fetched whole and
kept while the sampler holds cuts of them (:mod:`.window_keeper`, told by
:meth:`IndexReader.taken` / :meth:`IndexReader.release`), and each cut the sampler
buffered carries ``custom["shard_window"]`` so that the audio reader reads it through
the spool (:mod:`.window_reads`).

Cuts are :class:`IndexedCut` (a :class:`~wenet_lhotse.sources.meta_cut.MetaCut`: id,
duration, rate, texts); the built cut has a placeholder recording and
``custom["shard_tar"/"shard_member"/"shard_offset"/"shard_size"]``, and
:class:`~.shar_audio.SharAudioAttacher` reads the audio of emitted batches only.

Checks (at start-up, every rank): a tar of the list missing from the index, or a
local tar whose size or ends changed since indexing, is one error line naming it
(strict) or one counted skip standing for its utterances (``fault_tolerant``); what
the indexer recorded as bad (unreadable members, a cut-short tar) raises (strict) or is
counted each epoch when the epoch reaches that tar.
"""

from __future__ import annotations

import logging
import os
import random
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from lhotse import AudioSource, Recording, SupervisionSegment
from lhotse.cut import Cut

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.shard_index import ShardIndex, index_path, tar_problem
from wenet_lhotse.formats.shard_list import read_shard_entries
from wenet_lhotse.formats.tar_index import decode_extra
from wenet_lhotse.io.policy import PolicyHolder, ReadPolicy
from wenet_lhotse.io.streams import is_local
from wenet_lhotse.sources.meta_cut import MetaCut
from wenet_lhotse.sources.positioned import PositionedReader
from wenet_lhotse.sources.registry import get_kind
from wenet_lhotse.sources.window_order import WindowPlan, tar_bytes

logger = logging.getLogger(__name__)



class IndexedCut(MetaCut):
    """One index row as the sampler sees it (see :class:`MetaCut`); ``materialize``
    builds the cut with a placeholder recording."""

    __slots__ = ("_reader", "_part", "_row")

    def __init__(self, reader: IndexReader, part: int, row: int) -> None:
        ix = reader.index(part)
        c = ix.cols
        n, rate = int(c["num_samples"][row]), int(c["rate"][row])
        self.id = ix.key(row)
        self.start = 0.0
        self.duration = n / rate
        self.sampling_rate = rate
        speaker, lang, _ = decode_extra(ix.extra(row))
        self._sups = ((ix.text(row), speaker, lang),)
        self._line = None
        self._extra = None
        self._tags: Optional[Dict[str, Any]] = None
        self._where = (ix.path, row)
        self._reader, self._part, self._row = reader, part, row

    def tagged(self, tags: Mapping[str, Any]) -> IndexedCut:
        other = IndexedCut.__new__(IndexedCut)
        for name in MetaCut.__slots__ + IndexedCut.__slots__:
            setattr(other, name, getattr(self, name))
        other._tags = {**(self._tags or {}), **tags}
        return other

    def materialize(self) -> Cut:
        return self._reader.build_cut(self._part, self._row, self._tags)


class IndexReader(PolicyHolder, PositionedReader):
    """The rows of one or more shard indexes (``parts``: ``(index path, usable tar
    numbers)``) in the epoch's order (see the module doc). ``light``: yield
    :class:`IndexedCut` (training); else built cuts. What the indexer recorded as bad
    is raised or skipped as ``policy`` says."""

    def __init__(self, parts: Sequence[Tuple[str, Sequence[int]]], shuffle: bool = False,
                 seed: int = 0, light: bool = True, *,
                 policy: Optional[ReadPolicy] = None,
                 window_bytes: Optional[int] = None) -> None:
        self.parts = [(str(p), list(t)) for p, t in parts]
        self.shuffle = shuffle
        self.seed = seed
        self.policy = (policy or ReadPolicy())
        self.light = light
        self.window_bytes = window_bytes
        self.epoch = 0
        self._indexes: Dict[int, ShardIndex] = {}
        self._order: Optional[Tuple[int, List[Tuple[int, int]], np.ndarray]] = None
        self._plan: Optional[WindowPlan] = None
        self._keeper: Any = None  # WindowKeeper (remote tars in the window order)
        self._reported: set = set()

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_indexes"], state["_order"], state["_plan"] = {}, None, None
        state["_keeper"] = None
        return state

    def index(self, part: int) -> ShardIndex:
        ix = self._indexes.get(part)
        if ix is None:
            ix = self._indexes[part] = ShardIndex(self.parts[part][0])
        return ix

    def _units(self) -> Tuple[List[Tuple[int, int]], np.ndarray]:
        """The epoch's (part, tar) order and the end position of each."""
        if self._order is None or self._order[0] != self.epoch:
            units = [(p, t) for p, (_, tars) in enumerate(self.parts) for t in tars]
            if self.shuffle:
                random.Random(self.seed + self.epoch).shuffle(units)
            counts = np.array([self.index(p).tars[t]["count"] for p, t in units], np.int64)
            self._order = (self.epoch, units, np.cumsum(counts))
            if self.window_bytes:
                sizes = [self._tar_bytes(p, t) for p, t in units]
                self._plan = WindowPlan(counts, sizes, self.window_bytes, self.seed, self.epoch)
        return self._order[1], self._order[2]

    def _tar_bytes(self, part: int, tar: int) -> int:
        ix = self.index(part)
        return tar_bytes(ix.tars[tar], ix.cols["offset"], ix.cols["size"])

    def _window_tars(self, w: int) -> List[List[Any]]:
        """``[url, bytes]`` of window ``w``'s tars (none past the last window)."""
        plan, units = self._plan, self._units()[0]
        if w >= len(plan.ends):
            return []
        return [[self.index(units[u][0]).tars[units[u][1]]["url"], self._tar_bytes(*units[u])]
                for u in plan.units(w)]

    def _window_keeper(self) -> Optional[Any]:
        """The :class:`~.window_keeper.WindowKeeper` of remote tars (None: all local)."""
        if self._keeper is None:  # False once found all local
            self._keeper = False
            if any(not is_local(self.index(p).tars[t]["url"])
                   for p, (_, tars) in enumerate(self.parts) for t in tars):
                from wenet_lhotse.sources.window_keeper import WindowKeeper

                self._keeper = WindowKeeper(self.policy, self.window_bytes)
        return self._keeper or None

    def _iter_windows(self, start: int) -> Iterator[Tuple[int, Cut]]:
        units, _ = self._units()
        plan = self._plan
        # from the first window ending at or after ``start``: empty windows there report
        for w in range(int(np.searchsorted(plan.ends, start, side="left")), len(plan.ends)):
            begin = plan.begin(w)
            if begin >= start:
                for u in plan.units(w):
                    self._report_bad(*units[u])
            rows = plan.rows(w)
            for pos in range(max(start, begin), int(plan.ends[w])):
                u, r = rows[pos - begin]
                part, tar = units[u]
                cut = IndexedCut(self, part, self.index(part).tars[tar]["first"] + r)
                yield pos, (cut if self.light else cut.materialize())

    def _url(self, cut: IndexedCut) -> str:
        ix = self.index(cut._part)
        return ix.tars[int(ix.cols["tar"][cut._row])]["url"]

    @property
    def keeps_copies(self) -> bool:  # type: ignore[override]
        """The window order (``window_bytes``) keeps remote tars' copies: it needs
        :meth:`taken` / :meth:`release`."""
        return bool(self.window_bytes)

    def taken(self, cut: Any, pos: int) -> None:
        """The sampler buffered ``cut`` (at ``pos``): under the window order its window's
        and the next window's remote tars are fetched and held, and the cut is marked to
        be read through the spool (:mod:`.window_keeper`, :mod:`.window_reads`)."""
        if not self.window_bytes or not isinstance(cut, IndexedCut):
            return
        self._units()
        keeper = self._window_keeper()
        if keeper is None:
            return
        w = self._plan.window_at(pos)
        if w != keeper.window or self.epoch != keeper.epoch:
            keeper.enter(self.epoch, w, self._window_tars(w), self._window_tars(w + 1))
        c = self.index(cut._part).cols
        keeper.count(self._url(cut), int(c["offset"][cut._row]), int(c["size"][cut._row]))
        cut._tags = {**(cut._tags or {}), "shard_window": [self.epoch, w]}

    def release(self, cut: Any) -> None:
        """The sampler is done with ``cut`` (emitted, and read by now): its tar's copy
        may go (:mod:`.window_keeper`)."""
        window = (getattr(cut, "_tags", None) or {}).get("shard_window")
        if self._keeper and isinstance(cut, IndexedCut) and window and window[1] >= 0:
            self._keeper.release(window[0], self._url(cut),
                                 int(self.index(cut._part).cols["offset"][cut._row]))

    def __len__(self) -> int:
        ends = self._units()[1]
        return int(ends[-1]) if len(ends) else 0

    def _report_bad(self, part: int, tar: int) -> None:
        key = (self.epoch, part, tar)
        if key in self._reported:
            return
        self._reported.add(key)
        rec = self.index(part).tars[tar]
        for message, kind, member in rec["bad"]:
            self.policy.handle(WenetDataError(message, rec["url"], member=member, kind=kind))

    def _item(self, part: int, row: int) -> Any:
        cut = IndexedCut(self, part, row)
        return cut if self.light else cut.materialize()

    def iter_from(self, start: int) -> Iterator[Tuple[int, Cut]]:
        units, ends = self._units()
        if self._plan is not None:
            yield from self._iter_windows(start)
            return
        k = int(np.searchsorted(ends, start, side="right"))
        for j in range(k, len(units)):
            part, tar = units[j]
            begin = int(ends[j - 1]) if j else 0
            if begin >= start:
                self._report_bad(part, tar)
            first = self.index(part).tars[tar]["first"]
            for pos in range(max(start, begin), int(ends[j])):
                yield pos, self._item(part, first + pos - begin)
        # tars with no utterance left at the very end still report what they lost
        for j in range(len(units)):
            if (int(ends[j - 1]) if j else 0) >= start and int(ends[j]) == (
                    int(ends[j - 1]) if j else 0):
                self._report_bad(*units[j])

    def _at(self, pos: int) -> Tuple[int, int]:
        units, ends = self._units()
        if self._plan is not None:
            w = self._plan.window_at(pos)
            u, r = self._plan.rows(w)[pos - self._plan.begin(w)]
            part, tar = units[u]
            return part, self.index(part).tars[tar]["first"] + r
        j = int(np.searchsorted(ends, pos, side="right"))
        part, tar = units[j]
        begin = int(ends[j - 1]) if j else 0
        return part, self.index(part).tars[tar]["first"] + pos - begin

    def read_raw(self, positions: set) -> Dict[int, Any]:
        n = len(self)
        # in order: the window order keeps one window's permutation at a time
        return {p: self._restored(IndexedCut(self, *self._at(p)))
                for p in sorted(positions) if p < n}

    def _restored(self, cut: IndexedCut) -> IndexedCut:
        """A buffered cut from a checkpoint: under the window order read through the
        spool (its copy if there), not counted (window -1)."""
        if self.window_bytes:
            cut._tags = {"shard_window": [self.epoch, -1]}
        return cut

    def materialize(self, raw: Any) -> Cut:
        return raw.materialize() if isinstance(raw, MetaCut) else raw

    def raw_for_state(self, cut: Any) -> Optional[Any]:
        return [cut._part, cut._row] if isinstance(cut, IndexedCut) else None

    def raw_from_state(self, raw: Any) -> Any:
        return self._restored(IndexedCut(self, int(raw[0]), int(raw[1])))

    def build_cut(self, part: int, row: int, tags: Optional[Mapping[str, Any]] = None) -> Cut:
        """Row ``row`` as a cut whose recording is a placeholder (see module doc)."""
        ix = self.index(part)
        c = ix.cols
        key = ix.key(row)
        n, rate, ch = int(c["num_samples"][row]), int(c["rate"][row]), int(c["channels"][row])
        rec = Recording(id=key, sources=[AudioSource(type="shar", channels=list(range(ch)),
                                                     source="")],
                        sampling_rate=rate, num_samples=n, duration=n / rate)
        cut = rec.to_cut()
        speaker, lang, custom = decode_extra(ix.extra(row))
        cut.supervisions = [SupervisionSegment(
            id=key, recording_id=key, start=0.0, duration=cut.duration, channel=cut.channel,
            text=ix.text(row), speaker=speaker, language=lang)]
        url = ix.tars[int(c["tar"][row])]["url"]
        cut.custom = {**(tags or {}), **(custom or {}), "shard_tar": url,
                      "shard_member": ix.member(row), "shard_offset": int(c["offset"][row]),
                      "shard_size": int(c["size"][row]), "shard_crc": int(c["crc"][row])}
        return cut


def index_off(setting: Any) -> bool:
    """Whether ``lhotse_conf.shard_index`` (``setting``) is ``false``: no index used."""
    return setting is False or str(setting).lower() == "false"


def index_dir(setting: Any) -> Optional[str]:
    """The directory ``lhotse_conf.shard_index`` keeps indexes in, or None: beside the
    list (``auto`` / ``true``)."""
    return None if setting is True or str(setting).lower() in ("auto", "true") \
        else str(setting)


def find_shard_index(list_path: str, setting: Any = "auto") -> Optional[str]:
    """The index file for shard list ``list_path`` under ``lhotse_conf.shard_index``
    (``auto``/``true``: beside the list; a directory: there; ``false``: none), or None
    when there is none. ``true`` and a directory require it (ValueError naming the
    command that makes it)."""
    if index_off(setting):
        return None
    cache = index_dir(setting)
    if cache is None and not is_local(str(list_path)):
        return None
    path = index_path(str(list_path), cache)
    if os.path.exists(path):
        return path
    if setting is not None and setting != "auto" and str(setting).lower() != "auto":
        where = f" --cache-dir {cache}" if cache else ""
        raise ValueError(f"lhotse_conf.shard_index: no index {path} for {list_path}; make "
                         f"it with: wenet-lhotse index{where} {list_path}")
    return None


def open_shard_index(list_paths: Sequence[str], setting: Any, *,
                     policy: Optional[ReadPolicy] = None
                     ) -> Optional[List[Tuple[str, List[int]]]]:
    """``parts`` for :class:`IndexReader` when every list has an index, else None;
    checks the tars (see the module doc), a stale or bad one raised or skipped as
    ``policy`` says."""
    policy = (policy or ReadPolicy())
    found = [find_shard_index(p, setting) for p in list_paths]
    if not found or any(f is None for f in found):
        return None
    parts = []
    for list_path, path in zip(list_paths, found):
        ix = ShardIndex(path)
        usable = []
        by_url: Dict[str, List[int]] = {}
        for t, rec in enumerate(ix.tars):  # a tar listed twice: its entries in order
            by_url.setdefault(rec["url"], []).append(t)
        for entry in read_shard_entries(list_path, policy=policy):
            left = by_url.get(entry.url)
            t = left.pop(0) if left else None
            rec = ix.tars[t] if t is not None else None
            why = ("listed but not in the index" if rec is None else tar_problem(rec))
            if why is not None:
                lost = f", its {rec['count']} utterances left out" if rec else ""
                policy.handle(WenetDataError(
                    f"{why}{lost}; rerun: wenet-lhotse index {list_path}" + entry.listed_at,
                    entry.url, kind="stale_index"))
                continue
            if policy.strict and rec["bad"]:
                message, kind, member = rec["bad"][0]
                raise WenetDataError(message, rec["url"], member=member, kind=kind)
            usable.append(t)
        parts.append((path, usable))
    return parts


_HINTED: set = set()  # shard lists told about ``wenet-lhotse index`` (once per process)


def shard_indexes(specs: Sequence[Any], lconf: Any, split: str = "train", *,
                  policy: Optional[ReadPolicy] = None) -> Dict[int, Any]:
    """``{source number: index parts}`` for the shard lists that have an index
    (:mod:`.indexed_shards`, ``lhotse_conf.shard_index``); one line, once, for a training
    shard list without one, naming the command that makes it. ``policy``: how the
    lists are read (default: ``lconf``'s)."""
    if policy is None:
        policy = lconf.read_policy()
    out: Dict[int, Any] = {}
    for i, spec in enumerate(specs):
        if not get_kind(spec.type).indexable or spec.fields is not None or not spec.paths:
            continue
        parts = open_shard_index(spec.paths, lconf.shard_index, policy=policy)
        if parts is not None:
            out[i] = parts
            logger.info("source %s: sampled through its shard index", spec.name)
        elif (split == "train" and lconf.shard_index is not False
              and tuple(spec.paths) not in _HINTED):  # by paths: names repeat (shards.list)
            _HINTED.add(tuple(spec.paths))
            if lconf.index_first_pass:
                logger.info("source %s: no shard index yet; the first epoch streams its tars "
                            "and writes it (lhotse_conf.index_first_pass)", spec.name)
                continue
            how = ("its tars are loaded into memory" if lconf.mode == "map"
                   else "its tars are streamed")
            logger.warning("source %s: no shard index, so %s; for exact per-epoch sampling "
                           "make one: wenet-lhotse index %s", spec.name, how,
                           " ".join(spec.paths))
    return out
