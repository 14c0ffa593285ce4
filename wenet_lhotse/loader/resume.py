"""Deterministic, cheaply resumable sampling for map-style loading.

Lhotse 1.33 restores a sampler by replaying the epoch up to the saved batch
(``DynamicBucketingSampler._fast_forward``), reading every cut of the skipped
part again (and, for Shar, every audio member). Here the sampler's whole state
at a batch boundary is small and explicit, so restoring costs what the bucket
buffer costs, whatever the position in the epoch:

* every source is a :class:`PositionedReader`: a deterministic per-epoch order
  of cuts, each with an integer *position*, that can start at any position
  without parsing what comes before (a list index, or a line number in a
  ``.jsonl(.gz)`` manifest / Shar ``cuts.*.jsonl.gz`` whose earlier lines are
  skipped unparsed; Shar audio is not touched at all: it is attached to the
  cuts of emitted batches only, see :class:`SharAudioAttacher`);
* :class:`ResumableMux` reproduces ``CutSet.mux`` (same RNG draws, same order)
  with its state (RNG, next position per source, exhausted flags) exposed;
* :class:`ResumableBucketingSampler` is Lhotse's ``DynamicBucketingSampler``
  (same bucket selection, shuffling and batching code, reused from Lhotse's
  ``DynamicBucketer``) with the bucketer's state held in attributes.

A snapshot (positions of the cuts in the bucket buffer, RNG states, the mux
state) is kept for each of the last few emitted batches, because DataLoader
workers prefetch: :meth:`ResumableBucketingSampler.state_dict` takes the number
of batches the training loop actually consumed. Restoring re-reads only the
buffered cuts (per source, from the lowest buffered position to the current
one) and never reads audio.
"""

from __future__ import annotations

import logging
import random
import tarfile
import threading
import warnings
from collections import deque
from pathlib import Path
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from lhotse import CutSet
from lhotse.cut import Cut
from lhotse.dataset.dataloading import resolve_seed
from lhotse.dataset.sampling.dynamic import DurationBatcher
from lhotse.dataset.sampling.dynamic_bucketing import (
    BucketSelectionState,
    DynamicBucketer,
    DynamicBucketingSampler,
    pick_at_random,
)
from lhotse.lazy import Dillable
from lhotse.serialization import decode_json_line, deserialize_item, open_best

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.sources.shar_dir import shar_files

logger = logging.getLogger(__name__)

Transform = Optional[Callable[[CutSet], CutSet]]


# ---------------------------------------------------------------------------- readers


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
        return _Tracked(self, 0)

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

    def state(self) -> Dict[str, Any]:
        """Facts worth keeping in a checkpoint to make restoring cheaper."""
        return {}

    def load_state(self, state: Dict[str, Any]) -> None:
        pass


class ListReader(PositionedReader):
    """Cuts held in memory (e.g. a WeNet raw list, whose durations come from probing
    the audio headers once). With ``shuffle`` the order is a full permutation seeded
    by ``seed + epoch``; a position is an index into that order."""

    def __init__(self, cuts: Sequence[Cut], shuffle: bool = False, seed: int = 0) -> None:
        self.cuts = list(cuts)
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0

    def _order(self) -> List[int]:
        order = list(range(len(self.cuts)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def iter_from(self, start: int) -> Iterator[Tuple[int, Cut]]:
        order = self._order()
        for pos in range(start, len(order)):
            yield pos, self.cuts[order[pos]]

    def read_raw(self, positions: set) -> Dict[int, Any]:
        order = self._order()
        return {p: self.cuts[order[p]] for p in positions if p < len(order)}

    def __len__(self) -> int:
        return len(self.cuts)


class JsonlReader(PositionedReader):
    """Lhotse cuts manifests (``.jsonl`` / ``.jsonl.gz``), read lazily.

    A position is a line number counted over the files in their per-epoch order
    (shuffled with ``seed + epoch`` when ``shuffle_files``). Lines before ``start``
    are read but not parsed; whole files before it are skipped using their line
    counts (counted once, on first need).

    :param shar_tars: for Shar, the ``recording.*.tar`` of each cuts file; each cut
        then gets ``custom["shar_tar"]`` so that :class:`SharAudioAttacher` can
        fetch its audio later.
    """

    def __init__(self, paths: Sequence[str], shuffle_files: bool = False, seed: int = 0,
                 shar_tars: Optional[Sequence[Optional[str]]] = None) -> None:
        self.paths = [str(p) for p in paths]
        self.shuffle_files = shuffle_files
        self.seed = seed
        self.shar_tars = list(shar_tars) if shar_tars is not None else None
        self.epoch = 0
        self._line_counts: Dict[str, int] = {}

    def _file_order(self) -> List[int]:
        order = list(range(len(self.paths)))
        if self.shuffle_files:
            random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def iter_from(self, start: int) -> Iterator[Tuple[int, Cut]]:
        offset = 0
        for i in self._file_order():
            path = self.paths[i]
            n = self._line_counts.get(path)
            if n is not None and offset + n <= start:
                offset += n  # a whole file before ``start``: not even opened
                continue
            tar = self.shar_tars[i] if self.shar_tars is not None else None
            n = 0
            with _open_lines(path) as f:
                for lineno, line in enumerate(f):
                    n = lineno + 1
                    if offset + lineno < start or not line.strip():
                        continue  # skipped lines are not decoded nor parsed
                    cut = deserialize_item(decode_json_line(line))
                    if tar is not None:
                        cut.custom = {**(cut.custom or {}), "shar_tar": tar}
                    yield offset + lineno, cut
            self._line_counts[path] = n
            offset += n

    def read_raw(self, positions: set) -> Dict[int, Any]:
        """The JSON lines (bytes, unparsed) at ``positions``; files before the first
        position are skipped by their known line counts, reading stops after the last."""
        out: Dict[int, Any] = {}
        start, last = min(positions), max(positions)
        offset = 0
        for i in self._file_order():
            if offset > last:
                break
            path = self.paths[i]
            n = self._line_counts.get(path)
            if n is not None and offset + n <= start:
                offset += n
                continue
            tar = self.shar_tars[i] if self.shar_tars is not None else None
            n, complete = 0, True
            with _open_lines(path) as f:
                for lineno, line in enumerate(f):
                    n = lineno + 1
                    if offset + lineno in positions:
                        out[offset + lineno] = (line, tar)
                    if offset + lineno >= last:
                        complete = False
                        break
            if complete:
                self._line_counts[path] = n
            offset += n
        return out

    def materialize(self, raw: Any) -> Cut:
        line, tar = raw
        cut = deserialize_item(decode_json_line(line))
        if tar is not None:
            cut.custom = {**(cut.custom or {}), "shar_tar": tar}
        return cut

    def state(self) -> Dict[str, Any]:
        return {"line_counts": dict(self._line_counts)}

    def load_state(self, state: Dict[str, Any]) -> None:
        self._line_counts.update(state.get("line_counts") or {})


def _open_lines(path: str):
    """A binary line iterator: skipping a line then costs no UTF-8 decoding."""
    if path.endswith(".gz") and Path(path).is_file():
        import gzip

        return gzip.open(path, "rb")
    if Path(path).is_file():
        return open(path, "rb")
    return open_best(path, "rb")


def shar_reader(in_dir: str, shuffle_files: bool = False, seed: int = 0) -> JsonlReader:
    """A :class:`JsonlReader` over a Shar directory's ``cuts.*.jsonl*`` (metadata only)."""
    files = shar_files(in_dir)
    cuts = {i: p for i, p in files.get("cuts", {}).items() if ".jsonl" in p}
    if not cuts:
        raise ValueError(f"{Path(in_dir)}: no Shar cuts.*.jsonl* files")
    recordings = {i: p for i, p in files.get("recording", {}).items() if ".tar" in p}
    return JsonlReader([cuts[i] for i in sorted(cuts)], shuffle_files=shuffle_files, seed=seed,
                       shar_tars=[recordings.get(i) for i in sorted(cuts)])


class _TarScan:
    """Offsets of a tar's data members, found by reading headers only (member data is
    seeked over), as far into the tar as needed so far. The file is open only during
    :meth:`find` (a worker may touch thousands of tars). Plain ustar headers of regular
    files (what Lhotse's Shar writer produces for ordinary cut ids) are decoded here
    directly; from the first other header on (PAX/GNU long names, other member types)
    :mod:`tarfile` reads the rest."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pos = 0  # offset of the next unread header
        self.done = False
        self.fallback = False
        self.index: Dict[str, Tuple[int, int, str]] = {}

    def _add(self, name: str, offset: int, size: int) -> None:
        base, dot, ext = name.rpartition(".")  # "<cut_id>.<ext>", as Path(name).stem
        if not dot or "/" in ext:
            base, ext = name, ""
        if ext not in ("json", "nometa", "nodata"):
            self.index[base] = (offset, size, name)

    def _fast_step(self, f) -> bool:
        """Decode one plain header; False when it is not one (or at the end)."""
        f.seek(self.pos)
        buf = f.read(512)
        if len(buf) < 512 or not buf.strip(b"\0"):
            self.done = True  # end of archive
            return False
        size_field = buf[124:136].split(b"\0", 1)[0].strip()
        if not (buf[156:157] in (b"0", b"\0") and buf[257:262] == b"ustar"
                and size_field.isdigit()):
            self.fallback = True
            return False
        name = buf[:100].split(b"\0", 1)[0]
        prefix = buf[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
        size = int(size_field, 8)
        self._add(name.decode("utf-8"), self.pos + 512, size)
        self.pos += 512 + (size + 511) // 512 * 512
        return True

    def find(self, key: str) -> Optional[Tuple[int, int, str]]:
        if key in self.index or self.done:
            return self.index.get(key)
        with open(self.path, "rb") as f:
            while not self.fallback and key not in self.index and self._fast_step(f):
                pass
            if self.fallback and not self.done and key not in self.index:
                f.seek(self.pos)
                tf = tarfile.open(fileobj=f, mode="r:")
                while key not in self.index:
                    m = tf.next()
                    if m is None:
                        self.done = True
                        break
                    self._add(m.name, m.offset_data, m.size)
                    self.pos = tf.offset
        return self.index.get(key)


class SharAudioAttacher:
    """Attach Shar audio to metadata cuts: ``custom["shar_tar"]`` names the tar; the
    member ``<cut_id>.<ext>`` is located from the tar headers (read incrementally, data
    seeked over, remembered per process) and read with one seek. Thread-safe; a copy
    sent to a DataLoader worker starts with an empty index."""

    def __init__(self) -> None:
        self._scans: Dict[str, _TarScan] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> Dict[str, Any]:
        return {}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__()

    def _locate(self, tar: str, cut_id: str) -> Tuple[int, int, str]:
        with self._lock:
            scan = self._scans.get(tar)
            if scan is None:
                scan = self._scans[tar] = _TarScan(tar)
            found = scan.find(cut_id)
        if found is None:
            raise WenetDataError(f"no audio member for cut {cut_id!r}", tar, member=cut_id,
                                 kind="missing_audio")
        return found

    def __call__(self, cuts: CutSet) -> CutSet:
        from lhotse.shar.utils import fill_shar_placeholder

        out = []
        for cut in cuts:
            tar = (cut.custom or {}).get("shar_tar")
            if tar is None or cut.recording is None or cut.recording.sources[0].type != "shar":
                out.append(cut)
                continue
            offset, size, name = self._locate(tar, cut.id)
            with open(tar, "rb") as f:
                f.seek(offset)
                data = f.read(size)
            fill_shar_placeholder(cut.recording, data=data, tarpath=name)
            out.append(cut)
        return CutSet.from_cuts(out)


# ---------------------------------------------------------------------------- mux


class _Tracked(Dillable):
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


class PositionedStream:
    """A reader plus the lazy transform applied to it (WeNet filters, tags)."""

    def __init__(self, reader: PositionedReader, transform: Transform = None) -> None:
        self.reader = reader
        self.transform = transform

    def materialize(self, raw: Any) -> Cut:
        """The reader's cut for ``raw``, through the transform (it passed it before)."""
        cut = self.reader.materialize(raw)
        if self.transform is None:
            return cut
        out = list(self.transform(CutSet.from_cuts([cut])))
        if len(out) != 1:
            raise ValueError(f"cut {cut.id} no longer passes the source's filters")
        return out[0]

    def open(self, start: int) -> Tuple[Iterator[Cut], _Tracked]:
        tracked = _Tracked(self.reader, start)
        cuts = CutSet(tracked)
        if self.transform is not None:
            cuts = self.transform(cuts)
        return iter(cuts), tracked


class _LazyCut:
    """A buffered cut restored from a checkpoint: only what the bucketer looks at
    (``id``, ``duration``); the real cut is parsed when its batch is emitted."""

    __slots__ = ("id", "duration", "stream", "raw")

    def __init__(self, stream: PositionedStream, pos: int, duration: float, raw: Any) -> None:
        self.id = f"restored-{id(stream)}-{pos}"
        self.duration = duration
        self.stream = stream
        self.raw = raw

    def materialize(self) -> Cut:
        return self.stream.materialize(self.raw)


class ResumableMux:
    """``CutSet.mux`` with explicit state: the same choices as Lhotse's
    ``LazyIteratorMultiplexer`` (``rng.choices`` among active sources, a source
    leaves when exhausted; the stream ends when all are exhausted, or at the
    first with ``stop_early``), with the RNG seeded by ``seed + epoch``.
    One stream is read straight through (no RNG)."""

    def __init__(self, streams: Sequence[PositionedStream],
                 weights: Optional[Sequence[float]] = None, seed: int = 0,
                 stop_early: bool = False) -> None:
        self.streams = list(streams)
        self.weights = list(weights) if weights is not None else [1.0] * len(self.streams)
        if len(self.weights) != len(self.streams):
            raise ValueError("one weight per source is needed")
        self.seed = seed
        self.stop_early = stop_early
        self.last: Tuple[int, int] = (-1, -1)

    def start(self, epoch: int, state: Optional[Dict[str, Any]] = None) -> None:
        for s in self.streams:
            s.reader.set_epoch(epoch)
        self.rng = random.Random(self.seed + epoch)
        if state is None:
            self.next_pos = [0] * len(self.streams)
            self.exhausted = [False] * len(self.streams)
        else:
            self.rng.setstate(_tuplify(state["rng"]))
            self.next_pos = list(state["next_pos"])
            self.exhausted = list(state["exhausted"])
        self._iters = []
        for s, p, ex in zip(self.streams, self.next_pos, self.exhausted):
            self._iters.append(None if ex else s.open(p))

    def state(self) -> Dict[str, Any]:
        return {"rng": self.rng.getstate(), "next_pos": list(self.next_pos),
                "exhausted": list(self.exhausted)}

    def __iter__(self) -> Iterator[Cut]:
        return self

    def __next__(self) -> Cut:
        n = len(self.streams)
        while (not any(self.exhausted)) if self.stop_early else (not all(self.exhausted)):
            if n == 1:
                idx = 0
            else:
                active = [(i, w) for i, (ex, w) in enumerate(zip(self.exhausted, self.weights))
                          if not ex]
                idxs, ws = zip(*active)
                idx = self.rng.choices(idxs, weights=ws, k=1)[0]
            it, tracked = self._iters[idx]
            try:
                cut = next(it)
            except StopIteration:
                self.exhausted[idx] = True
                self._iters[idx] = None
                continue
            self.next_pos[idx] = tracked.pos + 1
            self.last = (idx, tracked.pos)
            return cut
        raise StopIteration


def _tuplify(x):
    """RNG states come back from JSON/torch.save as lists; ``setstate`` needs tuples."""
    if isinstance(x, (list, tuple)):
        return tuple(_tuplify(v) for v in x)
    return x


class _MuxCuts(Dillable):
    """Lets the parent constructor see a lazy CutSet (it is never iterated through this)."""

    def __init__(self, mux: ResumableMux) -> None:
        self.mux = mux

    def __iter__(self):  # pragma: no cover - the sampler iterates the mux directly
        raise RuntimeError("iterate the ResumableBucketingSampler, not its input")


# ---------------------------------------------------------------------------- bucketer


class _ResumableBucketer(DynamicBucketer):
    """Lhotse's ``DynamicBucketer`` stepped one batch at a time with its state in
    attributes. Each step: select a bucket (Lhotse's code), draw a batch (Lhotse's
    ``pick_at_random`` + ``DurationBatcher``), remove it from the bucket and refill
    the buffer by as many cuts -- the same order of RNG draws and reads as Lhotse,
    only the refill happens before the batch is returned, not after."""

    def __init__(self, mux: ResumableMux, sel_state: BucketSelectionState, **kw) -> None:
        super().__init__(mux, **kw)
        self.mux = mux
        self.cuts_iter = mux
        self.sel_state = sel_state
        # id(cut) -> (cut, stream index, position), for buffered and recently emitted cuts
        self.loc: Dict[int, Tuple[Cut, int, int]] = {}
        self.emitted: List[int] = []  # id() of cuts handed out since the last snapshot

    def _collect_cuts_in_buckets(self, n_cuts: int) -> None:
        try:
            for _ in range(n_cuts):
                cut = next(self.cuts_iter)
                self.loc[id(cut)] = (cut, *self.mux.last)
                idx = self.constraint.select_bucket(buckets=self.duration_bins, example=cut)
                self.buckets[idx].put(cut)
        except StopIteration:
            pass

    def next_batch(self) -> CutSet:
        bucket = self._select_bucket(self.sel_state)  # raises StopIteration at the end
        used: List[int] = []
        if self.shuffle:
            candidates = pick_at_random(bucket, rng=self.rng, out_indexes_used=used)
        else:
            with bucket.mutex:
                candidates = list(bucket.queue)
        batcher = DurationBatcher(candidates, constraint=self.constraint.copy(),
                                  diagnostics=self.diagnostics)
        batch = next(iter(batcher))
        if used:
            used.sort(reverse=True)
            with bucket.mutex:
                q = bucket.queue
                for i in used:
                    del q[i]
        else:
            for _ in range(len(batch)):
                bucket.get()
        self.emitted.extend(id(c) for c in batch)
        self._collect_cuts_in_buckets(len(batch))
        if any(isinstance(c, _LazyCut) for c in batch):
            batch = CutSet.from_cuts(c.materialize() if isinstance(c, _LazyCut) else c
                                     for c in batch)
        return batch

    def snapshot(self) -> Tuple:
        """Cheap (references only): bucket contents, RNG states, mux state."""
        return (tuple(tuple(b.queue) for b in self.buckets), self.rng.getstate(),
                self.sel_state.save(), self.mux.state())


# ---------------------------------------------------------------------------- sampler


class ResumableBucketingSampler(DynamicBucketingSampler):
    """``DynamicBucketingSampler`` over a :class:`ResumableMux`, for map-style loading.

    Differences from Lhotse's class, all deliberate:

    * each ``iter()`` starts the next epoch (WeNet's ``train.py`` never calls
      ``set_epoch`` and keeps workers persistent); an explicit ``set_epoch(e)``
      before ``iter()`` still wins, and the first ``iter()`` uses epoch 0 (or
      the restored one);
    * ``state_dict(consumed)`` / ``load_state_dict`` restore from a snapshot of
      the bucket buffer (cost: re-reading the buffered cuts' metadata) instead
      of replaying the epoch;
    * ``duration_bins`` are required (computed from metadata by the builder).

    Rank-aware behaviour (every rank iterates the same cuts and keeps every
    ``world_size``-th batch; equal batch counts) is Lhotse's ``CutSampler.__next__``.
    """

    def __init__(self, mux: ResumableMux, *, duration_bins: List[float],
                 max_duration: Optional[float] = None, max_cuts: Optional[int] = None,
                 shuffle: bool = False, drop_last: bool = False, buffer_size: int = 20000,
                 quadratic_duration: Optional[float] = None, world_size: Optional[int] = None,
                 rank: Optional[int] = None, seed: int = 0, sync_buckets: bool = True,
                 snapshot_depth: int = 64) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # buffer-size heuristics; reported by the builder
            super().__init__(CutSet(_MuxCuts(mux)), max_duration=max_duration, max_cuts=max_cuts,
                             shuffle=shuffle, drop_last=drop_last,
                             duration_bins=list(duration_bins), buffer_size=buffer_size,
                             quadratic_duration=quadratic_duration, world_size=world_size,
                             rank=rank, seed=seed, sync_buckets=sync_buckets)
        if not isinstance(seed, int):
            raise ValueError("ResumableBucketingSampler needs an integer seed (ranks must agree)")
        self.mux = mux
        self.snapshot_depth = snapshot_depth
        self._bucketer: Optional[_ResumableBucketer] = None
        self._started = False
        self._explicit_epoch = False
        self._epoch_done = False
        self._emitted = 0
        self._snapshots: Deque[Tuple[int, Tuple]] = deque(maxlen=snapshot_depth + 1)
        self._emitted_ids: Deque[List[int]] = deque(maxlen=snapshot_depth + 1)

    # -- epochs

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self._explicit_epoch = True

    def _new_bucketer(self, sel_state: Optional[Dict] = None) -> _ResumableBucketer:
        bucket_rng = None
        if self.sync_buckets:
            seed = 1234
            info = torch.utils.data.get_worker_info()
            if info is not None:
                seed += info.id
            bucket_rng = random.Random(seed)
        state = BucketSelectionState(bucket_rng=bucket_rng, num_buckets=len(self.duration_bins) + 1,
                                     world_size=self.world_size)
        if sel_state is not None:
            state.restore({k: _tuplify(v) if k == "_bucket_rng" else v
                           for k, v in sel_state.items()})
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            # Lhotse's buffer-size heuristic (a mean over the bins) is noise here.
            warnings.simplefilter("ignore")
            return self._make_bucketer(state, bucket_rng)

    def _make_bucketer(self, state: BucketSelectionState, bucket_rng) -> _ResumableBucketer:
        return _ResumableBucketer(
            self.mux, state, duration_bins=self.duration_bins, world_size=self.world_size,
            max_duration=self.max_duration, max_cuts=self.max_cuts, drop_last=self.drop_last,
            buffer_size=self.buffer_size, quadratic_duration=self.quadratic_duration,
            shuffle=self.shuffle, rng=self.rng, bucket_rng=bucket_rng,
            diagnostics=self.diagnostics)

    def __iter__(self) -> ResumableBucketingSampler:
        if self._just_restored_state:
            return self
        if self._explicit_epoch:
            self._explicit_epoch = False
        elif self._started:
            super().set_epoch(self.epoch + 1)
        self._started = True
        self.rng = random.Random(resolve_seed(self.seed) + self.epoch)
        self.diagnostics.reset_current_epoch()
        self.mux.start(self.epoch)
        self._bucketer = self._new_bucketer()
        self._bucketer._collect_cuts_in_buckets(self.buffer_size)
        self._reset_snapshots()
        return self

    def _reset_snapshots(self) -> None:
        self._epoch_done = False
        self._emitted = 0
        self._snapshots.clear()
        self._emitted_ids.clear()
        self._snapshots.append((0, self._bucketer.snapshot()))
        self._emitted_ids.append([])

    def _next_batch(self) -> CutSet:
        if self._bucketer is None:
            raise StopIteration
        return self._bucketer.next_batch()

    def __next__(self) -> CutSet:
        try:
            batch = super().__next__()
        except StopIteration:
            self._epoch_done = True
            raise
        self._emitted += 1
        if len(self._snapshots) == self._snapshots.maxlen:
            # The oldest snapshot leaves the window: forget where its emitted cuts were.
            for key in self._emitted_ids[0]:
                self._bucketer.loc.pop(key, None)
        self._snapshots.append((self._emitted, self._bucketer.snapshot()))
        self._emitted_ids.append(self._bucketer.emitted)
        self._bucketer.emitted = []
        return batch

    # -- state

    def state_dict(self, consumed: Optional[int] = None) -> Dict[str, Any]:
        """The state after ``consumed`` batches of the current epoch were *consumed*
        (default: all batches emitted so far). Plain data (ints, lists): fits
        ``torch.save`` and JSON."""
        if consumed is None:
            consumed = self._emitted
        base = {"seed": self.seed, "world_size": self.world_size, "shuffle": self.shuffle,
                "version": 1}
        if self._bucketer is None or (self._epoch_done and consumed >= self._emitted):
            # Nothing started, or the epoch is over: resume at the start of the next one.
            epoch = self.epoch + 1 if self._bucketer is not None else self.epoch
            return {**base, "epoch": epoch, "consumed": 0, "snapshot": None}
        snap = dict(self._snapshots).get(consumed)
        if snap is None:
            raise ValueError(
                f"no sampler snapshot for batch {consumed} of epoch {self.epoch} (have "
                f"{[k for k, _ in self._snapshots]}); raise snapshot_depth above the "
                f"DataLoader's prefetch depth")
        buckets, rng_state, sel_state, mux_state = snap
        loc = self._bucketer.loc
        positions = [[[*loc[id(c)][1:], c.duration] for c in b] for b in buckets]
        readers = [s.reader.state() for s in self.mux.streams]
        return {**base, "epoch": self.epoch, "consumed": consumed, "snapshot": {
            "buckets": positions, "rng": rng_state, "sel": sel_state, "mux": mux_state,
            "readers": readers}}

    def load_state_dict(self, sd: Dict[str, Any]) -> None:
        sd = dict(sd)
        if sd.get("world_size") != self.world_size:
            raise ValueError(f"cannot restore a sampler saved with world_size="
                             f"{sd.get('world_size')} into world_size={self.world_size}: "
                             f"batches would differ")
        if sd.get("seed") != self.seed:
            raise ValueError(f"sampler seed mismatch: saved {sd.get('seed')}, now {self.seed}")
        self.shuffle = sd["shuffle"]
        self.epoch = sd["epoch"]
        self.diagnostics.set_epoch(self.epoch)
        self._started = True
        snap = sd["snapshot"]
        if snap is None:
            # Start of an epoch: the next iter() begins it.
            self._explicit_epoch = True
            self._just_restored_state = False
            self._bucketer = None
            return
        self.rng = random.Random()
        self.rng.setstate(_tuplify(snap["rng"]))
        self._bucketer = self._new_bucketer(snap["sel"])
        for stream, rstate in zip(self.mux.streams, snap.get("readers") or []):
            stream.reader.load_state(rstate)
        wanted: Dict[int, set] = {}
        for b in snap["buckets"]:
            for s, p, _ in b:
                wanted.setdefault(s, set()).add(p)
        # The buffered cuts: their durations come from the state; their metadata is fetched
        # unparsed (one pass over the lines up to the last buffered one) and parsed only
        # when their batch is emitted.
        self.mux.start(self.epoch, snap["mux"])
        raws = {s: self.mux.streams[s].reader.read_raw(ps) for s, ps in wanted.items()}
        missing = [(s, p) for s, ps in wanted.items() for p in ps if p not in raws[s]]
        if missing:
            raise ValueError(f"cannot restore the sampler: {len(missing)} buffered cuts not found "
                             f"again (first: source {missing[0][0]}, position {missing[0][1]}); "
                             f"did the data change since the checkpoint?")
        for bucket, items in zip(self._bucketer.buckets, snap["buckets"]):
            for s, p, duration in items:
                cut = _LazyCut(self.mux.streams[s], p, duration, raws[s][p])
                self._bucketer.loc[id(cut)] = (cut, s, p)
                bucket.put(cut)
        self._reset_snapshots()
        self._emitted = sd["consumed"]
        self._snapshots.clear()
        self._snapshots.append((self._emitted, self._bucketer.snapshot()))
        self._just_restored_state = True
