"""Deterministic, cheaply resumable sampling for map-style loading (the sampler).

Lhotse 1.33 restores a sampler by replaying the epoch up to the saved batch
(``DynamicBucketingSampler._fast_forward``), reading every cut of the skipped part again
(and, for Shar, every audio member). Here the sampler's whole state at a batch boundary
is small and explicit: restoring costs what the bucket buffer costs, wherever it is:

* every source is a :class:`~wenet_lhotse.sources.positioned.PositionedReader`: a
  deterministic per-epoch order
  of cuts, each with an integer *position*, that can start at any position
  without parsing what comes before (a list index, or a line number in a
  ``.jsonl(.gz)`` manifest / Shar ``cuts.*.jsonl.gz`` whose earlier lines are
  skipped unparsed; Shar audio is not touched at all: it is attached to the
  cuts of emitted batches only, see :class:`~wenet_lhotse.sources.shar_audio.SharAudioAttacher`);
* :class:`~.mux.ResumableMux` reproduces ``CutSet.mux`` (same RNG draws, same order)
  with its state (RNG, next position per source, exhausted flags) exposed;
* :class:`ResumableBucketingSampler` is Lhotse's ``DynamicBucketingSampler``
  (same bucket selection, shuffling and batching code, reused from Lhotse's
  ``DynamicBucketer`` through :class:`~.bucketing.SteppedBucketer`, batches formed by a
  ``SamplingConstraint``, e.g. WeNet's ``batch_conf`` from :mod:`.constraints`) with the
  bucketer's state held in attributes.

A snapshot (bucket buffer changes since the previous one, merged batches, RNG and mux
states, ...) is kept for each of the last few emitted batches (DataLoader workers
prefetch); the buffer at an older batch is the current one with later changes undone.
:meth:`ResumableBucketingSampler.state_dict` takes the number of batches the training
loop actually consumed. Restoring reads no audio and no more than the last
``2 * buffer_size`` positions of each source (the files holding buffered cuts among
them); a buffered cut read before that carries its manifest line in the state
(cuts that waited in their bucket since long before), so the cost of a
restore does not grow with the corpus.

The Lhotse internals this module and :mod:`.bucketing` rely on
(``DynamicBucketer._select_bucket``, ``_is_ready``, ``_collect_cuts_in_buckets``,
``bucket.mutex``/``queue``, ``BucketSelectionState``, ``pick_at_random``,
``DurationBatcher``, ``CutSampler._log_diagnostics``/``allow_iter_to_reset_state``,
``attach_dataloading_info``) are private: ``pyproject.toml`` pins Lhotse to the tested minor
version and ``tests/test_lhotse_seam.py`` fails loudly when they change.
"""

from __future__ import annotations

import logging
import random
import warnings
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

import numpy as np
from lhotse import CutSet
from lhotse.cut import Cut
from lhotse.dataset.sampling.base import SamplingConstraint, attach_dataloading_info
from lhotse.dataset.sampling.dynamic_bucketing import (
    DynamicBucketingSampler,
)
from lhotse.lazy import Dillable

from wenet_lhotse.loader.bucketing import SteppedEpochs, undo_bucket_ops
from wenet_lhotse.loader.buffer_state import PositionedBucketer, pack_lines
from wenet_lhotse.loader.distributed import plan_last_two_rounds, plan_partition
from wenet_lhotse.loader.epochs import EpochAdvance
from wenet_lhotse.loader.mux import ResumableMux, tuplify
from wenet_lhotse.loader.state_check import check_sampler_state
from wenet_lhotse.sources.meta_cut import MetaCut
from wenet_lhotse.sources.positioned import LazyCut

logger = logging.getLogger(__name__)


class _MuxCuts(Dillable):
    """Lets the parent constructor see a lazy CutSet (it is never iterated through this)."""

    def __init__(self, mux: ResumableMux) -> None:
        self.mux = mux

    def __iter__(self):  # pragma: no cover - the sampler iterates the mux directly
        raise RuntimeError("iterate the ResumableBucketingSampler, not its input")


class ResumableBucketingSampler(EpochAdvance, SteppedEpochs, DynamicBucketingSampler):
    """``DynamicBucketingSampler`` over a :class:`ResumableMux`, for map-style loading.

    Differences from Lhotse's class, all deliberate:

    * batches come from a :class:`~wenet_lhotse.loader.bucketing.SteppedBucketer`
      (bucket remainders merged: WeNet's batch counts), formed by ``constraint`` (any
      Lhotse ``SamplingConstraint``; default Lhotse's ``TimeConstraint`` from
      ``max_duration``/``max_cuts``);
    * each ``iter()`` starts the next epoch (WeNet's ``train.py`` never calls
      ``set_epoch`` and keeps workers persistent); an explicit ``set_epoch(e)``
      before ``iter()`` still wins, and the first ``iter()`` uses epoch 0 (or
      the restored one);
    * ``state_dict(consumed)`` / ``load_state_dict`` restore from a snapshot of the
      bucket buffer (cost: re-reading the buffered cuts' metadata), not by replaying;
    * ``duration_bins`` are required (from metadata, by the builder); a shuffled epoch
      moves them a little (:func:`~.bins.epoch_bins`) and draws its own bucket sequence
      (Lhotse's restarts from one seed): batches vary also when the buffer holds all;
    * static batches with ``wenet_workers`` > 1: WeNet's steps per epoch with that many
      DataLoader workers (each of its workers ends with a partial batch; the tail of the
      epoch is split to match, :meth:`~.buffer_state.PositionedBucketer.plan_wenet_tail`);
    * under DDP no cut is ever duplicated (Lhotse copies cuts as ``<id>_dupN`` when
      the last round has fewer cuts than ranks): every rank iterates the same batches
      and takes every ``world_size``-th; a last round with fewer batches than ranks
      is split (largest batches halved), and when the input is exhausted with fewer
      cuts left than ranks, the last two rounds are re-planned together (see
      :func:`~wenet_lhotse.loader.distributed.plan_partition`). Equal step counts,
      every cut exactly once, batches only ever split (caps hold).
    """

    def __init__(self, mux: ResumableMux, *, duration_bins: List[float],
                 max_duration: Optional[float] = None, max_cuts: Optional[int] = None,
                 constraint: Optional[SamplingConstraint] = None,
                 shuffle: bool = False, drop_last: bool = False, buffer_size: int = 20000,
                 quadratic_duration: Optional[float] = None, world_size: Optional[int] = None,
                 rank: Optional[int] = None, seed: int = 0, sync_buckets: bool = True,
                 snapshot_depth: int = 64, wenet_workers: int = 1,
                 release_depth: int = 2) -> None:
        if drop_last:
            raise ValueError("ResumableBucketingSampler uses every cut: drop_last must be False")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # buffer-size heuristics; reported by the builder
            super().__init__(CutSet(_MuxCuts(mux)), max_duration=max_duration, max_cuts=max_cuts,
                             constraint=constraint, shuffle=shuffle, drop_last=False,
                             duration_bins=list(duration_bins), buffer_size=buffer_size,
                             quadratic_duration=quadratic_duration, world_size=world_size,
                             rank=rank, seed=seed, sync_buckets=sync_buckets)
        if not isinstance(seed, int):
            raise ValueError("ResumableBucketingSampler needs an integer seed (ranks must agree)")
        if constraint is not None and hasattr(constraint, "use_bins"):
            constraint.use_bins(self.duration_bins)
        self.mux = mux
        #: static batches: WeNet's step count with this many DataLoader workers per rank
        self.wenet_workers = wenet_workers
        self._bins = list(self.duration_bins)  # this epoch's (see SteppedEpochs._epoch_bins)
        self.snapshot_depth = snapshot_depth
        self._bucketer: Optional[PositionedBucketer] = None
        self._init_epochs(0)  # the rule of loader.epochs: each iter() the next epoch
        self._epoch_done = False
        self._emitted = 0
        self._snapshots: Deque[Tuple[int, Tuple]] = deque(maxlen=snapshot_depth + 1)
        self._emitted_ids: Deque[List[int]] = deque(maxlen=snapshot_depth + 1)
        #: rounds after which an emitted cut has been read (DataLoader's prefetch depth):
        #: then its reader is told (``release``: the window order's tar copies)
        self.release_depth = release_depth
        self._unreleased: Deque[List[Tuple[Any, Cut]]] = deque()

    # -- epochs

    def set_epoch(self, epoch: int) -> None:
        EpochAdvance.set_epoch(self, epoch)
        self.diagnostics.set_epoch(epoch)

    def _new_bucketer(self, sel_state: Optional[Dict] = None) -> PositionedBucketer:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            # Lhotse's buffer-size heuristic (a mean over the bins) is noise here.
            warnings.simplefilter("ignore")
            return self._stepped_bucketer(PositionedBucketer, self.mux, self._bins, sel_state)

    def __iter__(self) -> ResumableBucketingSampler:
        if not self._start_iter():
            return self  # a restored state: this iter() resumes it
        self.diagnostics.set_epoch(self.epoch)
        self._begin_epoch()
        self._bins = self._epoch_bins()
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
        self._unreleased.clear()
        self._snapshots.append((0, self._bucketer.snapshot()))
        self._emitted_ids.append([])

    # -- batches

    def _next_batch(self) -> List[Cut]:
        if self._bucketer is None:
            raise StopIteration
        return self._bucketer.draw()

    def _next_round(self) -> List[List[Cut]]:
        """``world_size`` batches (every rank computes the same), none duplicated."""
        ws, bucketer = self.world_size, self._bucketer
        if self.wenet_workers > 1:
            bucketer.plan_wenet_tail(ws, self.wenet_workers, self._emitted)
        batches: List[List[Cut]] = []
        for _ in range(ws):
            try:
                batches.append(self._next_batch())
            except StopIteration:
                break
        if not batches:
            raise StopIteration
        if len(batches) < ws:  # the last round: split batches so that every rank has one
            total = sum(len(b) for b in batches)
            if total < ws:
                raise ValueError(f"an epoch of {total} cuts cannot give each of {ws} ranks a "
                                 f"batch without duplicating cuts")
            return [list(b) for b in plan_partition([CutSet.from_cuts(b) for b in batches], ws)]
        if ws > 1 and bucketer.source_exhausted and 0 < bucketer.remaining() < ws:
            # The next round would be the last, with fewer cuts than ranks: plan both now.
            rest: List[List[Cut]] = []
            while True:
                try:
                    rest.append(bucketer.draw())
                except StopIteration:
                    break
            both = plan_last_two_rounds(batches + rest, ws)
            later = both[ws:]
            held = {id(c) for b in later for c in b}
            bucketer.emitted = [i for i in bucketer.emitted if i not in held]
            bucketer.merged.extendleft(reversed(later))
            batches = both[:ws]
        return batches

    def __next__(self) -> CutSet:
        self.allow_iter_to_reset_state()
        try:
            batches = self._next_round()
        except StopIteration:
            self._epoch_done = True
            raise
        self._release_later(batches)
        # Buffered cuts are metadata (MetaCut, or LazyCut after a restore): only this
        # rank's batch is built into Lhotse cuts.
        selected = CutSet.from_cuts(c.materialize() if isinstance(c, (LazyCut, MetaCut))
                                    else c for c in batches[self.rank])
        self._log_diagnostics(selected)
        for tfn in self._transforms:
            selected = tfn(selected)
        attach_dataloading_info(selected, rank=self.rank, world_size=self.world_size)
        self._emitted += 1
        if len(self._snapshots) == self._snapshots.maxlen:
            # The oldest snapshot leaves the window: forget where its emitted cuts were.
            for key in self._emitted_ids[0]:
                self._bucketer.loc.pop(key, None)
        self._snapshots.append((self._emitted, self._bucketer.snapshot()))
        self._emitted_ids.append(self._bucketer.emitted)
        self._bucketer.emitted = []
        return selected

    def _release_later(self, batches: List[List[Cut]]) -> None:
        """Tell each cut's reader, ``release_depth`` rounds after the round that emitted
        it, that it has been read (every rank's cuts: the counts are global). Only
        readers that keep tar copies are told (nothing is kept for the others)."""
        keepers = self._bucketer.keepers
        if not any(keepers):
            return
        loc = self._bucketer.loc
        told = []
        for c in (c for b in batches for c in b):
            where = loc.get(id(c))
            if where is not None and keepers[where[1]] is not None:
                told.append((keepers[where[1]], c))
        self._unreleased.append(told)
        while len(self._unreleased) > self.release_depth:
            for reader, cut in self._unreleased.popleft():
                reader.release(cut)

    # -- state

    def state_dict(self, consumed: Optional[int] = None) -> Dict[str, Any]:
        """The state after ``consumed`` batches of the current epoch were *consumed*
        (default: all batches emitted so far). Plain data (ints, lists): fits
        ``torch.save`` and JSON."""
        if consumed is None:
            consumed = self._emitted
        base = {"seed": self.seed, "world_size": self.world_size, "shuffle": self.shuffle,
                "version": 2}
        if self._bucketer is None or (self._epoch_done and consumed >= self._emitted):
            # Nothing started, or the epoch is over: resume at the start of the next one.
            epoch = self.epoch + 1 if self._bucketer is not None else self.epoch
            return {**base, "epoch": epoch, "consumed": 0, "snapshot": None}
        snaps = dict(self._snapshots)
        snap = snaps.get(consumed)
        if snap is None:
            raise ValueError(
                f"no sampler snapshot for batch {consumed} of epoch {self.epoch} (have "
                f"{[k for k, _ in self._snapshots]}); raise snapshot_depth above the "
                f"DataLoader's prefetch depth")
        _, merged, rng_state, sel_state, mux_state, shared, exhausted, read = snap
        buckets = [list(b.queue) for b in self._bucketer.buckets]
        undo_bucket_ops(buckets, self._bucketer.journal)
        for k in sorted((k for k in snaps if k > consumed), reverse=True):
            undo_bucket_ops(buckets, snaps[k][0])
        loc = self._bucketer.loc
        # A cut read long before (waiting in its bucket) carries its line in the state
        # (compressed): a restore reads back only the recent part of the stream (at 10M
        # cuts most of the buffer of slowly filling buckets was read long ago).
        recent = [p - 2 * self.buffer_size for p in mux_state["next_pos"]]
        kept: List[Any] = []

        def where(c: Any) -> List[Any]:
            _, stream, pos = loc[id(c)]
            item = [stream, pos, c.duration, int(c.sampling_rate), c.id]
            if pos < recent[stream]:
                raw = self.mux.streams[stream].reader.raw_for_state(c)
                if raw is not None:
                    item.append(len(kept))
                    kept.append(raw)
            return item

        readers = [s.reader.state() for s in self.mux.streams]
        return {**base, "epoch": self.epoch, "consumed": consumed, "snapshot": {
            "buckets": [[where(c) for c in b] for b in buckets],
            "merged": [[where(c) for c in b] for b in merged],
            "rng": rng_state, "sel": sel_state, "mux": mux_state, "constraint": shared,
            "exhausted": exhausted, "readers": readers, "lines": pack_lines(kept),
            "read": read}}

    def load_state_dict(self, sd: Dict[str, Any]) -> None:
        sd = dict(sd)
        if sd.get("version") != 2:
            raise ValueError(f"sampler state version {sd.get('version')} was written by an "
                             f"older wenet-lhotse; its batches cannot be reproduced")
        saved_ws = sd.get("world_size")
        if saved_ws != self.world_size:
            # Elastic: the state is the global stream's after `consumed` rounds of
            # `saved_ws` batches (the same on every rank); the rest goes on in rounds of
            # this world size, each batch drawn once: every cut once over both halves.
            logger.info("elastic resume: epoch %s after %s rounds of %s ranks goes on over "
                        "%d ranks", sd.get("epoch"), sd.get("consumed"), saved_ws,
                        self.world_size)
            snap = sd.get("snapshot")
            if snap is not None and snap.get("sel") is not None:
                # the saved round was complete: the next draw picks a new bucket
                sd["snapshot"] = {**snap, "sel": {**snap["sel"], "_bucket_idx": None,
                                                  "_usage_count": 0}}
        if sd.get("seed") != self.seed:
            raise ValueError(f"sampler seed mismatch: saved {sd.get('seed')}, now {self.seed}")
        kept = check_sampler_state(sd, len(self.mux.streams))  # one-line StateError
        self.shuffle = sd["shuffle"]
        snap = sd["snapshot"]
        # a state at the start of an epoch: the next iter() begins it; else it resumes
        self._restored_at(sd["epoch"], resume=snap is not None)
        self.diagnostics.set_epoch(self.epoch)
        if snap is None:
            self._bucketer = None
            return
        self._constraint_epoch()
        self._bins = self._epoch_bins()
        if self.constraint is not None and hasattr(self.constraint, "load_shared_state"):
            self.constraint.load_shared_state(snap.get("constraint"))
        self.rng = random.Random()
        self.rng.setstate(tuplify(snap["rng"]))
        self._bucketer = self._new_bucketer(snap["sel"])
        self._bucketer.source_exhausted = bool(snap.get("exhausted"))
        self._bucketer.read = int(snap.get("read", 0))
        for stream, rstate in zip(self.mux.streams, snap.get("readers") or []):
            stream.reader.load_state(rstate)
        wanted: Dict[int, set] = {}
        first_id: Dict[int, Any] = {}  # per stream: (position, id) of one buffered cut
        for b in list(snap["buckets"]) + list(snap.get("merged") or []):
            for item in b:
                if len(item) == 5:  # else its line is in the state
                    wanted.setdefault(item[0], set()).add(item[1])
                    first_id.setdefault(item[0], (item[1], item[4]))
        # The buffered cuts: what the bucketer needs comes from the state; their lines
        # come from the state (cuts read long ago) or are read back unparsed (the
        # recent ones: files holding none are skipped), parsed when their batch is emitted.
        self.mux.start(self.epoch, snap["mux"])
        raws = {s: self.mux.streams[s].reader.read_raw(ps) for s, ps in wanted.items()}
        missing = [(s, p) for s, ps in wanted.items() for p in ps if p not in raws[s]]
        if missing:
            raise ValueError(f"cannot restore the sampler: {len(missing)} buffered cuts not found "
                             f"again (first: source {missing[0][0]}, position {missing[0][1]}); "
                             f"did the data change since the checkpoint?")
        for s, (p, cut_id) in first_id.items():  # (issue 30) a state of other data
            found = self.mux.streams[s].reader.materialize(raws[s][p]).id
            if found != cut_id:
                raise ValueError(f"the state is not this data's: source {s} position {p} "
                                 f"holds cut {found!r}, the state buffered {cut_id!r}")

        def lazy(item: List[Any]) -> LazyCut:
            s, p, duration, rate, cut_id = item[:5]
            stream = self.mux.streams[s]
            raw = stream.reader.raw_from_state(kept[item[5]]) if len(item) > 5 else raws[s][p]
            cut = LazyCut(stream, duration, rate, cut_id, raw)
            self._bucketer.loc[id(cut)] = (cut, s, p)
            return cut

        for bucket, items in zip(self._bucketer.buckets, snap["buckets"]):
            for item in items:
                bucket.put(lazy(item))
        self._bucketer.merged.extend([lazy(i) for i in b] for b in snap.get("merged") or [])
        self._reset_snapshots()
        self._emitted = sd["consumed"]
        self._snapshots.clear()
        self._snapshots.append((self._emitted, self._bucketer.snapshot()))

