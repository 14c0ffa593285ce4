"""Lhotse's dynamic bucketing, stepped one batch at a time, without per-bucket remainders.

:class:`SteppedBucketer` is Lhotse 1.33's ``DynamicBucketer`` (its buckets, bucket
selection, ``pick_at_random`` shuffling, ``DurationBatcher`` and any
``SamplingConstraint``), with one change in what happens when *no bucket holds a full
batch*: Lhotse then emits a partial batch from some bucket, so an epoch ends with up to
one partial batch per bucket (30 buckets, static batches of 16: up to 30 extra, small
steps -- WeNet has one). Here the remainders of all buckets are merged instead: sorted
by the constraint's length, cut into batches the constraint accepts, and emitted in
random order (in groups of ``world_size`` consecutive batches, so the ranks of one step
get similar lengths), the one incomplete batch last. While the input is not exhausted
the incomplete batch goes back into its buckets to be completed by cuts still to come.
So with ``StaticBatchConstraint(B)`` an epoch of ``N`` cuts has exactly ``ceil(N / B)``
batches, all of ``B`` cuts but the last -- WeNet's count.

No batch exceeds its constraint, remainders included: merged remainders are cut by the
constraint's ``exceeded()`` (a 2D constraint holds a batch of several bins to the smallest
of their batch sizes), and a batch drawn from a bucket never keeps the cut that made it
exceed (Lhotse's ``DurationBatcher`` does, when a longer cut comes last: +10% over
``max_duration`` measured with ``TimeConstraint``); that cut goes back to its bucket.

:class:`BucketingSampler` is Lhotse's ``DynamicBucketingSampler`` over it, for one
process reading its own cuts (streamed training, cv plans). The map-style training
sampler (:class:`~wenet_lhotse.loader.sampler.ResumableBucketingSampler`) builds on
the same bucketer and the same epoch set-up (:class:`SteppedEpochs`).
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any, Deque, Dict, Iterator, List, Optional, Tuple

import torch
from lhotse import CutSet
from lhotse.cut import Cut
from lhotse.dataset.dataloading import resolve_seed
from lhotse.dataset.sampling.base import SamplingConstraint
from lhotse.dataset.sampling.dynamic import DurationBatcher, Filter
from lhotse.dataset.sampling.dynamic_bucketing import (
    BucketSelectionState,
    DynamicBucketer,
    DynamicBucketingSampler,
    pick_at_random,
)

from wenet_lhotse.loader.bins import epoch_bins
from wenet_lhotse.loader.mux import tuplify


def chunk_sorted(cuts: List[Cut], constraint: SamplingConstraint) -> List[List[Cut]]:
    """Cut ``cuts`` (in the given order) into consecutive batches, each as large as the
    constraint allows (``exceeded()`` false), e.g. ``ceil(len / B)`` for a static ``B``."""
    out: List[List[Cut]] = []
    cur: List[Cut] = []
    state = constraint.copy()
    state.reset()
    for cut in cuts:
        trial = state.copy()
        trial.add(cut)
        if cur and trial.exceeded():
            out.append(cur)
            cur = [cut]
            state = constraint.copy()
            state.reset()
            state.add(cut)
        else:
            cur.append(cut)
            state = trial
    if cur:
        out.append(cur)
    return out


class SteppedBucketer(DynamicBucketer):
    """``DynamicBucketer`` stepped by :meth:`draw`, bucket remainders merged (see the
    module docstring). ``drop_last`` is not supported (every cut is used).

    :param cuts: an iterator of cuts (consumed as the buffer is refilled).
    :param sel_state: Lhotse's bucket-selection state (synchronised across ranks).
    """

    def __init__(self, cuts: Iterator[Cut], sel_state: BucketSelectionState, **kw: Any) -> None:
        super().__init__(cuts, **kw)
        if self.drop_last:
            raise ValueError("SteppedBucketer uses every cut: drop_last must be False")
        self.cuts_iter = cuts
        self.sel_state = sel_state
        #: batches formed from merged remainders, emitted before any bucket is drawn from
        self.merged: Deque[List[Cut]] = deque()
        self.source_exhausted = False
        #: when a list: every change to the buckets is appended to it, so that a
        #: subclass can undo them (see :func:`undo_bucket_ops`)
        self.journal: Optional[List[Tuple]] = None

    # -- buffer

    def _put(self, cut: Cut) -> None:
        idx = self.constraint.select_bucket(buckets=self.duration_bins, example=cut)
        self.buckets[idx].put(cut)
        if self.journal is not None:
            self.journal.append(("put", idx))

    def _next_cut(self) -> Cut:
        return next(self.cuts_iter)

    def _collect_cuts_in_buckets(self, n_cuts: int) -> None:
        try:
            for _ in range(n_cuts):
                self._put(self._next_cut())
        except StopIteration:
            self.source_exhausted = True

    def remaining(self) -> int:
        """Cuts held (buckets and merged batches), not counting the unread input."""
        return self.bucketed() + sum(len(b) for b in self.merged)

    def bucketed(self) -> int:
        """Cuts in the buckets (their deques' lengths: only this thread touches them, and
        ``qsize()`` takes each bucket's lock)."""
        return sum(len(b.queue) for b in self.buckets)

    # -- batches

    def _is_ready(self, bucket: Any) -> bool:
        """Lhotse's test (the bucket holds enough for a batch), from the count alone
        for a constraint that counts cuts only (``close_after``: static batches)."""
        by_count = getattr(self.constraint, "close_after", None)
        if by_count is None:
            return super()._is_ready(bucket)
        return by_count(len(bucket.queue))

    def draw(self) -> List[Cut]:
        """The next batch (a list of cuts), then refill the buffer by as many cuts.
        Raises ``StopIteration`` when every cut has been drawn."""
        while True:
            if self.merged:
                batch = self.merged.popleft()
                break
            if any(self._is_ready(b) for b in self.buckets):
                batch = self._draw_from_bucket()
                break
            if self._merge_remainders():
                continue
            if self.source_exhausted:
                raise StopIteration
            # The buffer is too small to complete any batch: read more input.
            self._collect_cuts_in_buckets(max(self.buffer_size, 1))
        self._emitted(batch)
        self._collect_cuts_in_buckets(len(batch))
        return batch

    def _emitted(self, batch: List[Cut]) -> None:
        """Hook for subclasses: ``batch`` leaves the buffer."""

    def _draw_from_bucket(self) -> List[Cut]:
        """Lhotse's step: select a ready bucket, draw one batch with ``DurationBatcher``."""
        bucket = self._select_bucket(self.sel_state)
        used: List[int] = []
        if self.shuffle:
            candidates: Any = pick_at_random(bucket, rng=self.rng, out_indexes_used=used)
        else:
            with bucket.mutex:
                candidates = list(bucket.queue)
        batcher = DurationBatcher(candidates, constraint=self.constraint.copy(),
                                  diagnostics=self.diagnostics)
        batch = list(next(iter(batcher)))
        # (the batcher's constraint has measured exactly ``batch``: reset, then each cut)
        if len(batch) > 1 and batcher.constraint.exceeded():
            # Lhotse's DurationBatcher keeps the cut that made the batch exceed its
            # constraint (a longer cut drawn last): it goes back to its bucket instead.
            batch.pop()
            if used:
                used.pop()
        with bucket.mutex:
            q = bucket.queue
            if used:
                used.sort()
                removed = [(i, q[i]) for i in used]
                for i in reversed(used):
                    del q[i]
            else:
                removed = [(i, q.popleft()) for i in range(len(batch))]
        if self.journal is not None:
            idx = next(i for i, b in enumerate(self.buckets) if b is bucket)
            self.journal.append(("del", idx, removed))
        return batch

    def _merge_remainders(self) -> bool:
        """Merge the contents of every bucket into batches (see the module docstring).
        False when no batch could be formed."""
        cuts: List[Cut] = []
        if self.journal is not None:
            self.journal.append(("clear", [list(b.queue) for b in self.buckets]))
        for b in self.buckets:
            with b.mutex:
                cuts.extend(b.queue)
                b.queue.clear()
        if not cuts:
            return False
        # a constraint may order the remainders itself (2D: by batch size, then bin)
        measure = getattr(self.constraint, "merge_key", self.constraint.measure_length)
        cuts.sort(key=lambda c: (measure(c), c.id))
        chunks = chunk_sorted(cuts, self.constraint)
        last = chunks.pop()
        if not self.source_exhausted:
            for cut in last:  # may still be completed by input to come
                self._put(cut)
            last = None
        if self.shuffle and chunks:
            w = max(int(self.world_size or 1), 1)
            groups = [chunks[i:i + w] for i in range(0, len(chunks), w)]
            self.rng.shuffle(groups)
            chunks = [c for g in groups for c in g]
        self.merged.extend(chunks)
        if last is not None:
            self.merged.append(last)
        return bool(self.merged)


def undo_bucket_ops(queues: List[List[Cut]], ops: List[Tuple]) -> None:
    """Undo ``ops`` (a :attr:`SteppedBucketer.journal` segment, oldest first) on
    ``queues`` (copies of the bucket queues after them), newest first."""
    for op in reversed(ops):
        if op[0] == "put":
            queues[op[1]].pop()
        elif op[0] == "del":  # removed at these indexes, ascending: put back in that order
            q = queues[op[1]]
            for i, cut in op[2]:
                q.insert(i, cut)
        else:  # "clear"
            queues[:] = [list(q) for q in op[1]]


class SteppedEpochs:
    """The epoch set-up of a ``DynamicBucketingSampler`` over a :class:`SteppedBucketer`,
    one implementation for both samplers (:class:`BucketingSampler`, per reader, and
    :class:`~.sampler.ResumableBucketingSampler`, map-style): the epoch's RNG and
    diagnostics, the constraint told the epoch, the epoch's bucket edges and the bucket
    selection (the same on every rank, per DataLoader worker; unlike Lhotse's, a new
    sequence each epoch). Mixed into a ``DynamicBucketingSampler`` subclass."""

    epoch: int
    seed: Any
    shuffle: bool
    sync_buckets: bool
    world_size: int
    duration_bins: List[float]
    constraint: Any
    diagnostics: Any

    def _begin_epoch(self) -> None:
        """At the start of an epoch: its RNG (``seed + epoch``), fresh diagnostics, and
        the epoch for a constraint with ``set_epoch`` (ours: lengths after perturbation)."""
        self.rng = random.Random(resolve_seed(self.seed) + self.epoch)
        self.diagnostics.reset_current_epoch()
        self._constraint_epoch()

    def _constraint_epoch(self) -> None:
        if self.constraint is not None and hasattr(self.constraint, "set_epoch"):
            self.constraint.set_epoch(self.epoch)

    def _epoch_bins(self) -> List[float]:
        """This epoch's bucket edges, also given to a constraint with ``use_bins`` (ours
        bound batches by them): shuffled, the edges move each epoch so that batches vary
        (:func:`~.bins.epoch_bins`)."""
        bins = (epoch_bins(self.duration_bins, resolve_seed(self.seed), self.epoch)
                if self.shuffle else list(self.duration_bins))
        if self.constraint is not None and hasattr(self.constraint, "use_bins"):
            self.constraint.use_bins(bins)
        return bins

    def _stepped_bucketer(self, cls: Any, cuts: Any, bins: List[float],
                          saved_selection: Optional[Dict[str, Any]] = None) -> Any:
        """``cls`` (a :class:`SteppedBucketer`) over ``cuts`` with this sampler's settings,
        its bucket selection fresh for the epoch or restored from ``saved_selection``."""
        bucket_rng = None
        if self.sync_buckets:
            info = torch.utils.data.get_worker_info()
            bucket_rng = random.Random(1234 + 7919 * self.epoch
                                       + (info.id if info is not None else 0))
        state = BucketSelectionState(bucket_rng=bucket_rng,
                                     num_buckets=len(self.duration_bins) + 1,
                                     world_size=self.world_size)
        if saved_selection is not None:
            state.restore({k: tuplify(v) if k == "_bucket_rng" else v
                           for k, v in saved_selection.items()})
        return cls(cuts, state, duration_bins=bins, world_size=self.world_size,
                   max_duration=self.max_duration, max_cuts=self.max_cuts,
                   constraint=self.constraint, buffer_size=self.buffer_size,
                   quadratic_duration=self.quadratic_duration, shuffle=self.shuffle,
                   rng=self.rng, bucket_rng=bucket_rng, diagnostics=self.diagnostics)


class BucketingSampler(SteppedEpochs, DynamicBucketingSampler):
    """Lhotse's ``DynamicBucketingSampler`` (one ``CutSet``) over a
    :class:`SteppedBucketer`: same arguments (``constraint=`` included), every cut used
    once, bucket remainders merged. A constraint with ``set_epoch`` (ours) gets the
    sampler's epoch. Meant for one reader (``world_size=1``); ``state_dict`` is Lhotse's
    (unsupported with a constraint)."""

    #: the bucketer class (a subclass may change how the buffer fills)
    bucketer_class = SteppedBucketer

    def __init__(self, cuts: Any, **kw: Any) -> None:
        if kw.get("drop_last"):
            raise ValueError("BucketingSampler uses every cut: drop_last must be False")
        super().__init__(cuts, **kw)
        self._bucketer: Optional[SteppedBucketer] = None

    def __iter__(self) -> BucketingSampler:
        if self._just_restored_state:
            return self
        self._begin_epoch()
        source = self._source()  # may set duration_bins (see WarmStartSampler)
        cuts = iter(Filter(iterator=source, predicate=self._filter_fn,
                           diagnostics=self.diagnostics))
        self._bucketer = self._stepped_bucketer(self.bucketer_class, cuts, self._epoch_bins())
        self._bucketer._collect_cuts_in_buckets(self.buffer_size)
        return self

    def _source(self) -> Iterator[Cut]:
        """The epoch's cuts (called by ``iter()`` after the constraint's ``set_epoch``)."""
        return iter(self.cuts[0])

    def _next_batch(self) -> CutSet:
        if self._bucketer is None:
            raise StopIteration
        return CutSet.from_cuts(self._bucketer.draw())
