"""Streamed loading: each DataLoader worker of each rank reads its own tars.

:class:`StreamedEpochDataset` is Lhotse's iterable mode, one epoch per ``iter()``:
every (rank, worker) opens its share of the tars of every source, shuffled for the
epoch, and runs its own :class:`~.bucketing.BucketingSampler` (Lhotse's
``DynamicBucketingSampler`` with merged bucket remainders, ``world_size=1``). What it
yields to the loader (:class:`~.dataloader.StreamedDataLoader`) is the protocol below:
a :class:`WorkerBatch` per batch, :data:`SKIP_TURN` from a worker whose turn a
restored epoch skips, and last a ``WorkerBatch(worker, SkipsOnly(items))`` when the
worker skipped or filtered items after its last batch (or had no batch): not a step.
Each ``WorkerBatch`` carries the epoch ledger's counts (:class:`~.ledger.BatchCounts`).
Once the loader sets :meth:`StreamedEpochDataset.count_only` (every rank stopped at the
same step), workers read on without decoding and yield ``WorkerBatch(worker,
LeftOver(cuts))``: the utterances the epoch leaves over are counted, not dropped unseen.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from itertools import chain, islice
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
)

import torch
from lhotse import CutSet
from lhotse.cut import Cut

from wenet_lhotse.errors import (
    SkipReport,
    SkipsOnly,
    WenetDataError,
    WorkerFailed,
    carry_skips,
)
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.loader.bins import WorkerEdges, log_edges
from wenet_lhotse.loader.bucketing import BucketingSampler, SteppedBucketer
from wenet_lhotse.loader.epochs import EpochAdvance
from wenet_lhotse.loader.ledger import BatchCounts, batch_size_of
from wenet_lhotse.sources import SourceSpec, mux_sources, open_source
from wenet_lhotse.sources.registry import get_kind

#: Yielded by a worker that has no batch for its round-robin turn (restored epochs).
SKIP_TURN = None

#: Cuts a worker reads before its first batch (then its buffer doubles per batch up to
#: ``buffer_size``): Lhotse's sampler reads the whole buffer (20,000 cuts, audio
#: included, when reading tars) before the first batch.
INITIAL_FILL = 200


class GrowingBucketer(SteppedBucketer):
    """A :class:`~.bucketing.SteppedBucketer` whose buffer starts small and grows: each
    draw first reads as many more cuts as the buffer held after the previous one
    (doubling, at most :data:`GROW_STEP` per draw) until it holds ``grow_to``; from then
    on it is the plain bucketer. While it grows and no bucket holds a batch, each draw
    takes one batch of the buffer's cuts sorted by length (WeNet's ``sort`` over the
    buffer) and leaves the rest for the next, larger buffer; deterministic, so a
    restored epoch replays the same batches."""

    grow_to = 0
    _pending = 0

    def draw(self) -> List[Cut]:
        if self._pending:
            self._collect_cuts_in_buckets(self._pending)
            self._pending = 0
        batch = super().draw()
        held = self.remaining()
        if held < self.grow_to and not self.source_exhausted:
            self._pending = min(self.grow_to - held, max(held, len(batch)), GROW_STEP)
        return batch

    def _merge_remainders(self) -> bool:
        if not super()._merge_remainders():
            return False
        if not self.source_exhausted and self.remaining() < self.grow_to:
            # Still growing: one batch from this window (length-sorted chunks of it, one
            # picked at random); the rest waits for the next, larger window -- the sooner
            # batches are formed from a large buffer, the less they are padded.
            chunks = list(self.merged)
            self.merged.clear()
            self.merged.append(chunks.pop(self.rng.randrange(len(chunks))))
            for chunk in chunks:
                for cut in chunk:
                    self._put(cut)
        return True


#: Most cuts a :class:`GrowingBucketer` reads ahead in one draw (~0.2-0.4 s of tar reading).
GROW_STEP = 1000


class WarmStartSampler(BucketingSampler):
    """:class:`~.bucketing.BucketingSampler` that starts batching after
    :data:`INITIAL_FILL` cuts (:class:`GrowingBucketer`) instead of a full buffer.

    :param edges: when given (a :class:`~.bins.WorkerEdges`), ``duration_bins`` are
        estimated at each ``iter()`` from the epoch's first ``edges.num_cuts`` cuts,
        peeked at and then handed to the bucketer (read once), as Lhotse's
        ``DynamicBucketingSampler`` does without ``duration_bins``.
    """

    bucketer_class = GrowingBucketer
    initial_fill = INITIAL_FILL

    def __init__(self, cuts: Any, *, edges: Optional[WorkerEdges] = None, **kw: Any) -> None:
        if edges is not None:
            kw["duration_bins"] = []  # placeholder: Lhotse would read cuts to estimate them
        super().__init__(cuts, **kw)
        self.edges = edges
        #: log the estimated edges (one worker does, once)
        self.log_edges = False

    def _source(self) -> Iterator[Cut]:
        cuts = super()._source()
        if self.edges is None:
            return cuts
        head = list(islice(cuts, self.edges.num_cuts))
        self.duration_bins = self.edges.edges(head, self.epoch)
        self.num_buckets = len(self.duration_bins) + 1
        if self.log_edges:
            log_edges(self.duration_bins, f" (worker 0, epoch {self.epoch}, estimated from "
                                          f"its first {len(head)} cuts)")
        return chain(head, cuts)

    def __iter__(self) -> WarmStartSampler:
        if self._just_restored_state:
            return self
        full = self.buffer_size
        self.buffer_size = max(1, min(full, self.initial_fill))
        try:
            super().__iter__()
        finally:
            self.buffer_size = full
        if self._bucketer is not None:
            self._bucketer.grow_to = full
            self._bucketer.buffer_size = full
        return self


class WorkerBatch(NamedTuple):
    """A batch and the DataLoader worker that made it (resume counts per worker), with
    the ledger's counts for it."""

    worker: int
    batch: Any
    counts: BatchCounts = BatchCounts()


class LeftOver(NamedTuple):
    """In place of a batch after :meth:`StreamedEpochDataset.count_only`: the number of
    utterances the sampler put in it (read, not decoded, not trained)."""

    cuts: int


class StreamedEpochDataset(EpochAdvance, torch.utils.data.IterableDataset):
    """Lhotse's iterable mode, one epoch per ``iter()``: opens the sources with this
    (rank, worker)'s share of the tars shuffled for the epoch, runs a
    :class:`~.bucketing.BucketingSampler` (``world_size=1``) over them and yields
    ``WorkerBatch(worker id, dataset[batch])``. The epoch counter lives in each worker's
    copy and follows the rule of :mod:`.epochs` (persistent workers each get exactly one
    ``iter()`` per epoch)."""

    #: set by the loader: the shared-memory ring batches travel through (see transport)
    ring: Any = None
    #: set by :class:`~.first_pass.FirstPassLoader`: the shard lists' readers write the
    #: index rows of each tar they read to its end (:mod:`~wenet_lhotse.formats.index_fragments`)
    recorder: Any = None

    def __init__(self, dataset: Any, specs: Sequence[SourceSpec], transforms: Sequence[Any],
                 sampler_kw: Dict[str, Any], seed: int, shuffle: bool, stop_early: bool,
                 rank: int, world_size: int, cycle: int = 1, *,
                 policy: Optional[ReadPolicy] = None) -> None:
        super().__init__()
        self.dataset = dataset
        self.specs = list(specs)
        self.transforms = list(transforms)
        self.sampler_kw = dict(sampler_kw)
        self.seed = seed
        self.shuffle = shuffle
        self.stop_early = stop_early
        self.rank, self.world_size = rank, world_size
        self.cycle = int(cycle)  # WeNet's dataset_conf.cycle: passes over the tars per epoch
        self.skip_report = SkipReport()  # this worker's reader skips, forwarded per batch
        #: how the sources are read (default: strict), skips into ``skip_report``
        self.policy = (policy or ReadPolicy()).replace(
            skip_report=self.skip_report)
        self.strict = self.policy.strict
        self._init_epochs(0)
        self._edges_logged = False
        #: run once before the first epoch (in the training process, before the workers
        #: start): returns more sampler arguments (see :meth:`prepare`)
        self._prepare: Optional[Callable[[], Dict[str, Any]]] = None
        # (epoch, {worker id: batches it already delivered in that epoch},
        #  the worker the restored epoch continues with)
        self._skip: Tuple[int, Dict[int, int], int] = (-1, {}, 0)
        #: shared with the workers (made in prepare(), before they start): 1 = count the
        #: rest of the epoch's cuts without decoding them
        self._count_only: Any = None
        self._filtered_sent = 0  # this worker's filtered count already forwarded

    def defer(self, prepare: Callable[[], Dict[str, Any]]) -> None:
        """Let :meth:`prepare` add the sampler arguments ``prepare()`` returns (work that
        reads data, e.g. a budget from the mean duration): done at the first ``iter()``
        of the loader, not when it is built (a cv loader reads nothing before it is used)."""
        self._prepare = prepare

    def prepare(self) -> None:
        """Run the deferred preparation, once (the loader calls it before each epoch),
        and clear the count-only flag of the previous epoch."""
        if self._count_only is None:
            self._count_only = multiprocessing.RawValue("b", 0)
        self._count_only.value = 0
        if self._prepare is not None:
            self.sampler_kw.update(self._prepare())
            self._prepare = None

    def count_only(self) -> None:
        """From now on (this epoch) workers count their remaining cuts without decoding
        them: the loader drains them into the ledger's ``left_over``."""
        if self._count_only is not None:
            self._count_only.value = 1

    def _filtered(self) -> int:
        """Cuts this process's filters removed since the last call."""
        total = sum(getattr(tf, "filtered", 0) for tf in self.transforms)
        delta, self._filtered_sent = total - self._filtered_sent, total
        return delta

    def resume(self, epoch: int, per_worker: Mapping[int, int], next_worker: int) -> None:
        """Continue ``epoch`` after the batches each worker already delivered in it
        (``per_worker``: worker id -> batches); ``next_worker`` is the worker whose batch
        comes next (the DataLoader asks its workers round-robin)."""
        self.set_epoch(epoch)
        self._skip = (epoch, dict(per_worker), next_worker)

    def cuts_for_epoch(self, epoch: int, worker: int = 0, num_workers: int = 1) -> CutSet:
        """This rank's and (logical) worker's share of the tars of every source; with
        ``cycle`` > 1, that many passes (tars reshuffled per pass), one after another."""
        if self.cycle == 1:
            return self._pass_cuts(epoch, worker, num_workers)
        out = self._pass_cuts(epoch * self.cycle, worker, num_workers)
        for p in range(1, self.cycle):
            out = out + self._pass_cuts(epoch * self.cycle + p, worker, num_workers)
        return out

    def _pass_cuts(self, epoch: int, worker: int, num_workers: int) -> CutSet:
        cutsets = []
        for spec, tf in zip(self.specs, self.transforms):
            kw = get_kind(spec.type).stream_kw(
                spec, rank=self.rank, world_size=self.world_size, worker=worker,
                num_workers=num_workers, shuffle=self.shuffle, seed=self.seed, epoch=epoch)
            if self.recorder is not None:
                kw["recorder"] = self.recorder
            cutsets.append(open_source(spec, policy=self.policy, shuffle_shards=self.shuffle,
                                       seed=self.seed, epoch=epoch, split_for_dataloading=True,
                                       transform=tf, **kw))
        return mux_sources(cutsets, [s.weight for s in self.specs], seed=self.seed + epoch,
                           stop_early=self.stop_early)

    def __iter__(self) -> Iterator[Any]:
        self._start_iter()
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(self.epoch)
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        skip_epoch, per_worker, offset = self._skip
        if skip_epoch != self.epoch:
            per_worker, offset = {}, 0
        sampler = WarmStartSampler(self.cuts_for_epoch(self.epoch, wid, nw), world_size=1,
                                   rank=0, seed=self.seed, shuffle=self.shuffle,
                                   **self.sampler_kw)
        sampler.set_epoch(self.epoch)
        if wid == 0 and self.rank == 0 and not self._edges_logged:
            sampler.log_edges = self._edges_logged = True
        skip = per_worker.get(wid, 0)
        self._filtered()  # the count starts with the epoch
        if wid < offset:
            # The DataLoader asks its workers round-robin from worker 0; a restored epoch
            # must go on with worker `offset` (the one after the last consumed batch's).
            # Workers before it hand in a placeholder the loader drops.
            yield SKIP_TURN
        try:
            yield from self._batches(sampler, wid, skip)
        except WenetDataError as err:  # raised as it is by the loader (one line)
            yield WorkerBatch(wid, WorkerFailed(err))
            return
        skipped, filtered = self.skip_report.take_new(), self._filtered()
        if skipped or filtered:  # after the last batch (or with no batch): still reported
            yield WorkerBatch(wid, SkipsOnly(skipped), BatchCounts(0, filtered))

    def _batches(self, sampler: WarmStartSampler, wid: int, skip: int) -> Iterator[Any]:
        for i, batch in enumerate(sampler):
            if i < skip:
                self._filtered()  # a restored epoch's ledger starts at the resume point
                continue  # sampled from metadata; no audio decoded, no features computed
            if self._count_only is not None and self._count_only.value:
                skipped = self.skip_report.take_new()
                yield WorkerBatch(wid, SkipsOnly(skipped) if skipped else LeftOver(len(batch)),
                                  BatchCounts(0, self._filtered()))
                if skipped:
                    yield WorkerBatch(wid, LeftOver(len(batch)))
                continue
            with self.ring.reserve() if self.ring is not None else contextlib.nullcontext():
                out = self.dataset[batch]  # padded straight into shared memory
                out = carry_skips(out, self.skip_report.take_new())
                counts = BatchCounts(batch_size_of(out, len(batch)), self._filtered())
                if self.ring is not None:
                    out = self.ring.pack(out)
            # The worker id travels with the batch: the loader counts batches per
            # worker, which makes resume exact even after some workers ran out of tars.
            yield WorkerBatch(wid, out, counts)
