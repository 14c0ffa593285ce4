"""Sources whose cuts have integer positions in a per-epoch deterministic order, so
that a resumable sampler can restart at any position without parsing what precedes it
(see :mod:`wenet_lhotse.loader.sampler`):

* :class:`ListReader`: cuts held in memory; a position is an index into the
  (shuffled) order;
* :class:`JsonlReader`: ``.jsonl(.gz)`` manifests and Shar ``cuts.*.jsonl.gz``; a
  position is a line number, and earlier lines are skipped unparsed. Shar audio is not
  touched here: each cut names its tar in ``custom["shar_tar"]`` and
  :class:`~.shar_audio.SharAudioAttacher` fetches it for emitted batches only.
"""

from __future__ import annotations

import random
import zlib
from bisect import bisect_left
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from lhotse.cut import Cut
from lhotse.lazy import Dillable
from lhotse.serialization import open_best
from lhotse.utils import compute_num_samples

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.access import open_regular
from wenet_lhotse.io.lines import bounded_lines
from wenet_lhotse.io.policy import PolicyHolder, ReadPolicy
from wenet_lhotse.sources.manifest import parse_manifest_line, parse_manifest_meta
from wenet_lhotse.sources.meta_cut import MetaCut
from wenet_lhotse.sources.shar_dir import shar_files
from wenet_lhotse.sources.state_lines import STATE_SOURCE, DuplicateIds, checked_state_line


class LazyCut:
    """A buffered cut restored from a checkpoint: only what the bucketer and the
    sampling constraint look at (``id``, ``duration``, ``sampling_rate``,
    ``num_samples``); the real cut is parsed when its batch is emitted, by its
    ``stream`` (a :class:`~wenet_lhotse.loader.mux.PositionedStream`: reader plus
    transform) from ``raw``
    (what the reader's ``read_raw`` / ``raw_from_state`` gave)."""

    __slots__ = ("id", "duration", "sampling_rate", "stream", "raw")

    def __init__(self, stream: Any, duration: float, sampling_rate: int,
                 cut_id: str, raw: Any) -> None:
        self.id = cut_id
        self.duration = duration
        self.sampling_rate = sampling_rate
        self.stream = stream
        self.raw = raw

    @property
    def num_samples(self) -> int:
        return compute_num_samples(self.duration, self.sampling_rate)

    def materialize(self) -> Cut:
        return self.stream.materialize(self.raw)


class PositionedReader(Dillable):
    """A source whose cuts have integer positions in a per-epoch deterministic order.

    Subclasses implement :meth:`iter_from`, yielding ``(position, cut)`` for
    positions ``>= start`` in increasing order, without parsing what precedes ``start``.
    """

    epoch: int = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def iter_from(self, start: int) -> Iterator[Tuple[int, Cut]]:  # pragma: no cover
        raise NotImplementedError

    def as_lazy_cuts(self) -> Iterator[Cut]:
        """The cuts of the current epoch, in order (for a ``CutSet``)."""
        return Tracked(self, 0)

    def read_raw(self, positions: set) -> Dict[int, Any]:
        """The items at ``positions`` in a cheap unparsed form (see :meth:`materialize`)."""
        last = max(positions)
        out = {}
        for pos, cut in self.iter_from(min(positions)):
            if pos in positions:
                out[pos] = cut
            if pos >= last:
                break
        return out

    def materialize(self, raw: Any) -> Cut:
        """The cut for an item returned by :meth:`read_raw`."""
        return raw

    #: Whether :meth:`taken` / :meth:`release` do anything: the sampler asks once per
    #: epoch and skips the per-cut calls for readers that say no (all but the window
    #: order's :class:`~.indexed_shards.IndexReader`, which keeps tar copies).
    keeps_copies: bool = False

    def taken(self, cut: Any, pos: int) -> None:
        """The sampler buffered ``cut`` (position ``pos``); see :meth:`release`. Called
        only when :attr:`keeps_copies` is true."""

    def release(self, cut: Any) -> None:
        """The sampler is done with ``cut``: emitted, and read by the DataLoader by now
        (the window order lets its tar's local copy go; others ignore it). Called only
        when :attr:`keeps_copies` is true."""

    def raw_for_state(self, cut: Any) -> Optional[Any]:
        """``cut``'s item as plain data (JSON-able) for a checkpoint, so that restoring
        need not read back to its position; ``None``: read it by position."""
        return None

    def raw_from_state(self, raw: Any) -> Any:
        """The item :meth:`raw_for_state` gave, as :meth:`read_raw` would return it."""
        return raw

    def state(self) -> Dict[str, Any]:
        """Facts worth keeping in a checkpoint to make restoring cheaper."""
        return {}

    def load_state(self, state: Dict[str, Any]) -> None:
        pass


def buffer_shuffle_order(n: int, buffer_size: Optional[int], rng: random.Random) -> List[int]:
    """A permutation of ``range(n)`` as a shuffle buffer of ``buffer_size`` items emits
    them (WeNet's ``list_shuffle_conf.shuffle_size``; torch's ``Shuffler`` algorithm:
    fill the buffer, then emit a random item and put the next one in its place; at the
    end the rest in random order). ``None`` or ``>= n``: a full permutation."""
    order = list(range(n))
    if buffer_size is None or buffer_size >= n:
        rng.shuffle(order)
        return order
    out: List[int] = []
    buf: List[int] = []
    for i in order:
        if len(buf) < max(buffer_size, 1):
            buf.append(i)
            continue
        j = rng.randrange(len(buf))
        out.append(buf[j])
        buf[j] = i
    rng.shuffle(buf)
    return out + buf


class ListReader(PositionedReader):
    """Cuts held in memory (e.g. a WeNet raw list, whose durations come from probing
    the audio headers once). With ``shuffle`` the order is a permutation seeded by
    ``seed + epoch`` (full, or as a shuffle buffer of ``buffer_size`` gives it); a
    position is an index into that order."""

    def __init__(self, cuts: Sequence[Cut], shuffle: bool = False, seed: int = 0,
                 buffer_size: Optional[int] = None) -> None:
        self.cuts = list(cuts)
        self.shuffle = shuffle
        self.seed = seed
        self.buffer_size = buffer_size
        self.epoch = 0

    def _order(self) -> List[int]:
        if not self.shuffle:
            return list(range(len(self.cuts)))
        return buffer_shuffle_order(len(self.cuts), self.buffer_size,
                                    random.Random(self.seed + self.epoch))

    def iter_from(self, start: int) -> Iterator[Tuple[int, Cut]]:
        order = self._order()
        for pos in range(start, len(order)):
            yield pos, self.cuts[order[pos]]

    def read_raw(self, positions: set) -> Dict[int, Any]:
        order = self._order()
        return {p: self.cuts[order[p]] for p in positions if p < len(order)}

    def materialize(self, raw: Any) -> Cut:
        return raw.materialize() if isinstance(raw, MetaCut) else raw

    def __len__(self) -> int:
        return len(self.cuts)


class JsonlReader(PolicyHolder, PositionedReader):
    """Lhotse cuts manifests (``.jsonl`` / ``.jsonl.gz``), read lazily.

    A position is a line number counted over the files in their per-epoch order
    (shuffled with ``seed + epoch`` when ``shuffle_files``). Lines before ``start``
    are read but not parsed; whole files before it are skipped using their line
    counts (counted once, on first need).

    :param shar_tars: for Shar, the ``recording.*.tar`` of each cuts file; each cut
        then gets ``custom["shar_tar"]`` so that :class:`SharAudioAttacher` can
        fetch its audio later.
    :param policy: ``strict``: a bad line (see :mod:`wenet_lhotse.sources.manifest`)
        or a file cut short raises :class:`WenetDataError` naming file and line; else
        it is recorded in the policy's ``skip_report`` (once per epoch) and skipped (a
        cut-short file ends there); whether ``command`` audio sources may run.
    :param light: yield plain cuts as :class:`~wenet_lhotse.sources.meta_cut.MetaCut`
        (Lhotse objects built when asked for: the training sampler materializes only
        the cuts of its rank's emitted batches).
    """

    def __init__(self, paths: Sequence[str], shuffle_files: bool = False, seed: int = 0,
                 shar_tars: Optional[Sequence[Optional[str]]] = None,
                 light: bool = False, *, policy: Optional[ReadPolicy] = None) -> None:
        self.light = light
        self.policy = (policy or ReadPolicy())
        self._reported: set = set()  # (epoch, file, line): a pass read again is not a new skip
        self.paths = [str(p) for p in paths]
        self.shuffle_files = shuffle_files
        self.seed = seed
        self.shar_tars = list(shar_tars) if shar_tars is not None else None
        self.epoch = 0
        self._line_counts: Dict[str, int] = {}

    def _skip(self, err: WenetDataError) -> None:
        key = (self.epoch, err.source, err.line)
        if self.policy.strict or key not in self._reported:
            self._reported.add(key)
            self.policy.handle(err)

    def _lines(self, path: str) -> Iterator[Tuple[int, Union[bytes, WenetDataError]]]:
        return _numbered_lines(path, self.policy.line_limit(), self.policy.strict)

    def _file_order(self) -> List[int]:
        order = list(range(len(self.paths)))
        if self.shuffle_files:
            random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def iter_from(self, start: int) -> Iterator[Tuple[int, Cut]]:
        parse = parse_manifest_meta if self.light else parse_manifest_line
        seen = DuplicateIds(start)  # a cut id met again in this pass is a bad line
        offset = 0
        for i in self._file_order():
            path = self.paths[i]
            n = self._line_counts.get(path)
            if n is not None and offset + n <= start:
                offset += n  # a whole file before ``start``: not even opened
                continue
            tar = self.shar_tars[i] if self.shar_tars is not None else None
            extra = {"shar_tar": tar} if tar is not None else None
            n = 0
            try:
                for lineno, line in self._lines(path):
                    n = lineno + 1
                    if isinstance(line, WenetDataError):  # over the line limit
                        if offset + lineno >= start:
                            self._skip(line)
                        continue
                    if offset + lineno < start or not line.strip():
                        seen.note_line(line)  # skipped lines are not decoded nor parsed
                        continue
                    try:
                        cut = parse(line, path, n, self.policy, extra_custom=extra)
                        seen.check(cut.id, path, n)
                    except (WenetDataError, UnicodeDecodeError) as err:
                        self._skip(err if isinstance(err, WenetDataError)
                                   else WenetDataError(f"not valid UTF-8: {err}", path,
                                                       line=n, kind="encoding"))
                        continue
                    yield offset + lineno, cut
            except WenetDataError as err:  # cut short or corrupt: the rest of it is lost
                if err.kind != "truncated":
                    raise
                self._skip(err)
            self._line_counts[path] = n
            offset += n

    def read_raw(self, positions: set) -> Dict[int, Any]:
        """The JSON lines (bytes, unparsed) at ``positions``; files holding none of them
        are skipped by their known line counts (a checkpoint carries them), reading stops
        after the last."""
        out: Dict[int, Any] = {}
        wanted = sorted(positions)
        last = wanted[-1]
        offset = 0
        for i in self._file_order():
            if offset > last:
                break
            path = self.paths[i]
            n = self._line_counts.get(path)
            if n is not None and _none_in(wanted, offset, offset + n):
                offset += n  # no buffered cut in this file (its length is known)
                continue
            tar = self.shar_tars[i] if self.shar_tars is not None else None
            n, complete = 0, True
            try:
                for lineno, line in self._lines(path):
                    n = lineno + 1
                    if offset + lineno in positions and not isinstance(line, WenetDataError):
                        out[offset + lineno] = (line, tar, path, lineno + 1)
                    if offset + lineno >= last:
                        complete = False
                        break
            except WenetDataError:  # reported when the file was first read (iter_from)
                pass
            if complete:
                self._line_counts[path] = n
            offset += n
        return out

    def raw_for_state(self, cut: Any) -> Optional[Any]:
        if isinstance(cut, MetaCut):
            line, extra = cut.line, cut.extra_custom
            tar = extra.get("shar_tar") if extra else None
        elif isinstance(cut, LazyCut):
            line, tar = cut.raw[:2]
        else:  # a cut built on reading (not a plain MonoCut line): read it back
            return None
        return [line.decode("utf-8") if isinstance(line, bytes) else line, tar]

    def raw_from_state(self, raw: Any) -> Any:
        return checked_state_line(raw, self.shar_tars)

    def materialize(self, raw: Any) -> Cut:
        # the checked path again: a line read back on restore may have changed since
        line, tar = raw[:2]
        source, lineno = raw[2:] if len(raw) == 4 else (STATE_SOURCE, None)
        return parse_manifest_line(line, source, lineno, self.policy,
                                   extra_custom={"shar_tar": tar} if tar is not None else None)

    def state(self) -> Dict[str, Any]:
        return {"line_counts": dict(self._line_counts)}

    def load_state(self, state: Dict[str, Any]) -> None:
        self._line_counts.update(state.get("line_counts") or {})


def _none_in(sorted_positions: List[int], lo: int, hi: int) -> bool:
    """No position in ``[lo, hi)``."""
    i = bisect_left(sorted_positions, lo)
    return i == len(sorted_positions) or sorted_positions[i] >= hi


def _numbered_lines(path: str, limit: Optional[int] = None, strict: bool = False,
                    ) -> Iterator[Tuple[int, Union[bytes, WenetDataError]]]:
    """``(0-based line number, line)`` of a manifest; a line longer than ``limit`` bytes
    (:func:`~wenet_lhotse.io.lines.max_line_bytes`) comes as its :class:`WenetDataError`
    (kind ``"too_long"``, never read whole) in its place, so that positions stay those of
    the file (``strict``: raised at once, the rest of the line not read); a file cut
    short or unreadable raises :class:`WenetDataError` naming it and the line (not a
    bare ``EOFError``)."""
    read = 0  # lines read whole
    long: List[WenetDataError] = []
    try:
        with _open_lines(path) as f:
            for read, line in bounded_lines(f, path, limit, None if strict else long.append):
                while long:
                    err = long.pop(0)
                    yield err.line - 1, err
                yield read - 1, line
            for err in long:  # the last line was too long
                read = err.line
                yield err.line - 1, err
    except (OSError, EOFError, zlib.error) as err:
        raise WenetDataError(f"unreadable after line {read}: {type(err).__name__}: {err}",
                             path, line=read + 1, kind="truncated") from None


def _open_lines(path: str):
    """A binary line iterator: skipping a line then costs no UTF-8 decoding."""
    if path.endswith(".gz") and Path(path).is_file():
        import gzip

        return gzip.open(path, "rb")
    if Path(path).is_file():
        return open(path, "rb")
    if Path(path).exists():  # a FIFO or device: refused before open() blocks
        return open_regular(path)
    return open_best(path, "rb")


def shar_reader(in_dir: str, shuffle_files: bool = False, seed: int = 0,
                light: bool = False, *, policy: Optional[ReadPolicy] = None) -> JsonlReader:
    """A :class:`JsonlReader` over a Shar directory's ``cuts.*.jsonl*`` (metadata only),
    read as ``policy`` says."""
    policy = (policy or ReadPolicy())
    files = shar_files(in_dir)
    cuts = {i: p for i, p in files.get("cuts", {}).items() if ".jsonl" in p}
    if not cuts:
        raise ValueError(f"{Path(in_dir)}: no Shar cuts.*.jsonl* files")
    recordings = {i: p for i, p in files.get("recording", {}).items() if ".tar" in p}
    return JsonlReader([cuts[i] for i in sorted(cuts)], shuffle_files=shuffle_files, seed=seed,
                       shar_tars=[recordings.get(i) for i in sorted(cuts)], light=light,
                       policy=policy)


class Tracked(Dillable):
    """Yields the reader's cuts from ``start`` and records the last position read.
    Lhotse's lazy filter/map pull one item at a time, so after a transformed cut
    comes out, ``pos`` is that cut's position."""

    def __init__(self, reader: PositionedReader, start: int) -> None:
        self.reader = reader
        self.start = start
        self.pos = start - 1

    def __iter__(self):
        for pos, cut in self.reader.iter_from(self.start):
            self.pos = pos
            yield cut
