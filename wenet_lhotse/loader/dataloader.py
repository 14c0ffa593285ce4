"""The DataLoaders the builder returns: one per loading mode, each counting the batches
the training loop consumed so that its ``state_dict()`` says exactly what comes next.

* :class:`MapDataLoader` (``mode == "map"``): the sampler runs in this process over
  metadata (:class:`~.sampler.ResumableBucketingSampler` for train, a fixed plan for
  cv/infer); workers run :class:`LoaderDataset` (Shar audio attached, then
  ``dataset[cuts]``). State: ``{"mode": "map", "sampler": sampler.state_dict(consumed)}``.
* :class:`StreamedDataLoader` (``mode == "streamed"``): over a
  :class:`~.streamed.StreamedEpochDataset`; under DDP all ranks stop at the same step
  (:class:`~.distributed.EqualStepsIterator`). State: epoch, batches consumed in total
  and per DataLoader worker, the last worker, the worker count.

Both are :class:`LhotseDataLoader` s (``batch_size=None``) and gather every item
skipped in fault-tolerant mode, wherever it was skipped, into ``skip_report``. At the end
of each epoch both log the epoch ledger (:mod:`~.ledger`: trained + skipped + filtered +
left over = all utterances) and keep it as :meth:`LhotseDataLoader.epoch_ledger`.
"""

from __future__ import annotations

import logging
from itertools import chain
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch

from wenet_lhotse.errors import (
    SkipReport,
    SkipsOnly,
    WorkerFailed,
    take_skips,
)
from wenet_lhotse.loader.distributed import EqualStepsIterator, world_info
from wenet_lhotse.loader.ledger import BatchCounts, EpochLedger, ReadOnce, log_ledger
from wenet_lhotse.loader.progress import with_progress
from wenet_lhotse.loader.sampler import ResumableBucketingSampler
from wenet_lhotse.loader.state_check import StateError, check_loader_state
from wenet_lhotse.loader.streamed import (
    SKIP_TURN,
    LeftOver,
    StreamedEpochDataset,
    WorkerBatch,
)
from wenet_lhotse.loader.transport import BatchRing

logger = logging.getLogger(__name__)


class LhotseDataLoader(torch.utils.data.DataLoader):
    """A ``DataLoader`` (``batch_size=None``) that counts the batches the training loop
    consumed; :class:`MapDataLoader` and :class:`StreamedDataLoader` say what the count
    means for their ``state_dict()``."""

    mode = ""
    #: the split the builder made it for (``train``, ``cv``, ``infer``): in the ledger line
    split = "train"
    #: a progress line every N training batches (``lhotse_conf.progress_every``; :mod:`~.progress`)
    progress_every = 0

    def __init__(self, dataset: Any, *, skip_report: Optional[SkipReport] = None,
                 batch_transform: Optional[Callable[[Any], Any]] = None,
                 shared_ring: bool = True, split: str = "train",
                 local_transforms: Sequence[Any] = (), partitioned: bool = True,
                 world: Optional[Tuple[int, int]] = None,
                 read_once: Optional[ReadOnce] = None, **kw: Any) -> None:
        super().__init__(dataset, batch_size=None, **kw)
        #: batches from the workers travel through reused shared memory (see
        #: :mod:`~.transport`; persistent workers started with fork only)
        self.ring: Optional[BatchRing] = None
        if shared_ring and hasattr(dataset, "ring") and self._ring_possible():
            try:
                self.ring = BatchRing(self.num_workers, slots=(self.prefetch_factor or 2) + 2)
            except OSError as err:  # e.g. strict overcommit: the ordinary transport
                logger.warning("no shared-memory ring for batches (%s)", err)
            dataset.ring = self.ring
        self._pin: Tuple[bool, Optional[str]] = (False, None)
        #: applied to each batch in this (the training) process, e.g. features computed
        #: on the model's device (``lhotse_conf.features_on: device``)
        self.batch_transform = batch_transform
        #: every item skipped in fault-tolerant mode, wherever it was skipped (readers in
        #: this process, and readers, features and dataset in DataLoader workers)
        self.skip_report = skip_report if skip_report is not None else SkipReport()
        self.consumed = 0
        self.epoch = -1
        self._finished = False  # the current epoch's iterator is exhausted
        self._restored: Optional[Dict[str, Any]] = None
        self._reported = 0  # skip_report items already summarised at an epoch's end
        #: the current epoch's ledger; the finished ones (see epoch_ledger())
        self._ledger: Optional[EpochLedger] = None
        self.ledgers: List[EpochLedger] = []
        self._skips_at_start = 0
        self._batch_skips = 0  # skips that came with batches this epoch (worker-side)
        #: transforms whose ``filtered`` counts run in this process (map-style loading)
        self.local_transforms = local_transforms
        self._filtered_at_start = 0
        #: map-style: each rank takes its share of one plan (false: a cv set evaluated
        #: whole on every rank)
        self.partitioned = partitioned
        self.split = split
        #: ``(world_size, rank)`` the builder was given (default: torch.distributed's)
        self.world = world
        #: skips of metadata read once: counted again at the start of each later epoch
        self.read_once = read_once if read_once is not None else ReadOnce(self.skip_report)
        self._iterations = 0  # iter() calls: epochs started (or resumed)

    def _world(self) -> Tuple[int, int]:
        return self.world if self.world is not None else world_info()

    def _ring_possible(self) -> bool:
        if self.num_workers <= 0 or not self.persistent_workers:
            return False
        import multiprocessing

        ctx = self.multiprocessing_context
        method = ctx.get_start_method() if ctx is not None else (
            multiprocessing.get_start_method(allow_none=True)
            or multiprocessing.get_context().get_start_method())
        return method == "fork"

    def __iter__(self) -> Iterator[Any]:
        self._filtered_at_start = self._local_filtered()  # (before the sampler reads)
        # Skips are counted from here, before the sampler or the workers start reading
        # (a sampler fills its buffer at iter()); the first epoch also accounts for what
        # was skipped while the loader was built, a later one re-counts what was read once.
        if self._iterations:
            self.skip_report.extend(list(self.read_once))
            self._skips_at_start = len(self.skip_report) - len(self.read_once)
        else:
            self._skips_at_start = self._reported
        self._iterations += 1
        inner = super().__iter__()
        self._pin = (bool(getattr(inner, "_pin_memory", False)),
                     getattr(inner, "_pin_memory_device", None))
        self._finished = False
        restored, self._restored = self._restored, None
        self._start_epoch(restored)
        ws, rank = self._world()
        self._ledger = EpochLedger(self.epoch, rank, ws, self.mode, self.split)
        self._batch_skips = 0
        return with_progress(self, self._count(self._batches(inner)))

    def epoch_ledger(self) -> Optional[EpochLedger]:
        """The ledger of the last finished epoch on this rank (``None`` before one ends):
        trained + skipped + filtered + left over = all utterances (see :mod:`~.ledger`)."""
        return self.ledgers[-1] if self.ledgers else None

    def starts_at_a_later_epoch(self) -> None:
        """Before a first ``iter()`` that starts an epoch after 0 (a restore, the first
        pass's switch): the build's reads (bucket edges) are not that epoch's, which
        counts the read-once skips again as every later epoch does (``__iter__``)."""
        self._reported, self._iterations = len(self.skip_report), 1

    def _local_filtered(self) -> int:
        return sum(getattr(tf, "filtered", 0) for tf in self.local_transforms)

    def _finish_ledger(self) -> None:
        led = self._ledger
        if led is None:
            return
        self._ledger = None
        skipped = len(self.skip_report) - self._skips_at_start
        filtered = self._local_filtered() - self._filtered_at_start
        planned = getattr(getattr(self.sampler, "sampler", None), "plan_filtered", None)
        if planned is not None:  # a cv plan: filtered once, when planned; every pass
            filtered = planned
        if self.mode == "map" and led.rank != 0 and self.partitioned:
            # every rank reads every cut's metadata: its reader skips and filtered cuts
            # are rank 0's to report (the ranks' ledgers sum to the epoch)
            skipped, filtered = self._batch_skips, 0
        led.skipped += skipped
        led.filtered += filtered
        self.ledgers = self.ledgers[-7:] + [led]
        log_ledger(led)

    def _receive(self, item: Any) -> Tuple[Any, BatchCounts]:
        """A worker's item -> (batch in this process, its ledger counts); the skips it
        carries go to ``skip_report``."""
        counts = item.counts if isinstance(item, WorkerBatch) else BatchCounts()
        batch = self._unwrap(item)
        if self.ring is not None:
            batch = self.ring.unpack(batch, *self._pin)
        batch, skips = take_skips(batch)
        if skips:
            self._batch_skips += len(skips)
            self.skip_report.extend(skips)  # logged where skipped
        return batch, counts

    def _start_epoch(self, restored: Optional[Dict[str, Any]]) -> None:
        if restored is not None:
            self.consumed, self.epoch = restored["consumed"], restored["epoch"]
        else:
            self.consumed = 0
            self.epoch += 1

    def _batches(self, inner: Iterator[Any]) -> Iterator[Any]:
        return inner

    def _unwrap(self, item: Any) -> Any:
        return item.batch if isinstance(item, WorkerBatch) else item

    @property
    def bucketing_sampler(self) -> Optional[ResumableBucketingSampler]:
        """The map-style train sampler (``None`` for cv plans and streamed loading)."""
        s = self.sampler
        s = getattr(s, "sampler", s)
        # (issue 22) or any sampler with the same state protocol (loader.batch_mux)
        return s if isinstance(s, ResumableBucketingSampler) or getattr(
            s, "resumable", False) else None

    def _count(self, it: Iterator[Any]) -> Iterator[Any]:
        for item in it:
            failed = item.batch if isinstance(item, WorkerBatch) else item
            if isinstance(failed, WorkerFailed):
                raise failed.error
            self.consumed += 1
            batch, counts = self._receive(item)
            if self._ledger is not None:
                self._ledger.steps += 1
                self._ledger.trained += counts.trained
                self._ledger.filtered += counts.filtered
            if self.batch_transform is not None:
                batch = self.batch_transform(batch)
            yield batch
        self._drain()
        self._finished = True
        self._report_skips()
        self._finish_ledger()
        self._check_not_all_filtered()

    def _check_not_all_filtered(self) -> None:
        """Map mode raises when filter_conf leaves no cut (at planning); streamed loading
        learns it at the epoch's end: an epoch of 0 steps whose utterances were all
        filtered is the same one-line error, not a silent empty epoch."""
        led = self.ledgers[-1] if self.ledgers else None
        if (self.mode == "streamed" and led is not None and led.steps == 0
                and self.consumed == 0  # not an epoch resumed after its last step
                and led.trained == 0 and led.left_over == 0 and led.filtered > 0):
            raise ValueError(f"no cuts left in epoch {led.epoch} (after filter_conf): all "
                             f"{led.filtered} utterances read were filtered out (rank "
                             f"{led.rank}); check dataset_conf.filter_conf")

    def _drain(self) -> None:
        """Count what the epoch leaves over after the last step (streamed loading)."""

    def _report_skips(self) -> None:
        """At an epoch's end, one WARNING listing the items skipped since the last one
        (with list file and line, or tar and member), as WeNet's logs show them."""
        items = list(self.skip_report)
        new, self._reported = items[self._reported:], len(items)
        if new:
            logger.warning("epoch %d: %d item(s) skipped: %s", self.epoch, len(new),
                           "; ".join(str(i) for i in new))

    def _position(self, per_worker: Mapping[int, int], last_worker: int) -> Dict[str, Any]:
        """The position state: the start of the next epoch once this one is over."""
        ws = self._world()[0]
        if self._finished:
            return {"mode": self.mode, "epoch": self.epoch + 1, "consumed": 0, "per_worker": {},
                    "num_workers": self.num_workers, "world_size": ws}
        return {"mode": self.mode, "epoch": max(self.epoch, 0), "consumed": self.consumed,
                "per_worker": {str(k): v for k, v in per_worker.items()},
                "last_worker": last_worker, "num_workers": self.num_workers,
                "world_size": ws}

    def state_dict(self) -> Dict[str, Any]:  # pragma: no cover - see the subclasses
        raise NotImplementedError

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:  # pragma: no cover
        raise NotImplementedError


class MapDataLoader(LhotseDataLoader):
    """Map-style loading: batches are planned in this process from metadata."""

    mode = "map"

    def _start_epoch(self, restored: Optional[Dict[str, Any]]) -> None:
        super()._start_epoch(restored)
        if self.bucketing_sampler is not None:
            self.epoch = self.bucketing_sampler.epoch

    def state_dict(self) -> Dict[str, Any]:
        """Enough to continue with exactly the next batch: the sampler's snapshot at the
        number of batches consumed (train), else the position in the plan (cv/infer)."""
        if self.bucketing_sampler is not None:
            return {"mode": "map", "sampler": self.bucketing_sampler.state_dict(self.consumed)}
        return self._position({}, -1)

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`; call before the first ``iter()``."""
        if sd.get("mode") != "map":
            raise ValueError("state was saved by a streamed loader; this one is not")
        if self.bucketing_sampler is None:
            raise ValueError("state was saved by a map-style train loader; this one is not")
        check_loader_state(sd, "map")
        sampler = self.bucketing_sampler
        sampler.load_state_dict(sd["sampler"])
        self.consumed = int(sd["sampler"]["consumed"])
        self._finished = False
        self._restored = {"epoch": sampler.epoch, "consumed": self.consumed}
        if sampler.epoch > 0 and not self._iterations:
            self.starts_at_a_later_epoch()


def streamed_elastic_refusal(saved: int, now: int) -> str:
    """Why a streamed epoch does not resume on another number of ranks, and the fix."""
    return (f"saved mid-epoch on {saved} ranks, this run has {now}: streamed tar shards "
            f"resume only on the same number of ranks (each rank's tars depend on it); "
            f"index the shards (wenet-lhotse index LIST) for an elastic resume, or resume "
            f"from an epoch checkpoint")


class StreamedDataLoader(LhotseDataLoader):
    """Streamed loading over a :class:`~.streamed.StreamedEpochDataset`; with
    ``equal_steps_group`` (DDP) or ``max_steps`` every rank stops at the same step."""

    mode = "streamed"

    def __init__(self, dataset: StreamedEpochDataset, *, equal_steps_group: Any = None,
                 max_steps: Optional[int] = None, **kw: Any) -> None:
        super().__init__(dataset, **kw)
        self.equal_steps_group = equal_steps_group
        self.max_steps = max_steps
        self.per_worker: Dict[int, int] = {}  # batches consumed per worker id
        self.last_worker = -1  # the worker of the last consumed batch

    def __iter__(self) -> Iterator[Any]:
        self.dataset.prepare()  # before the workers start: they get a copy of the dataset
        return super().__iter__()

    def _start_epoch(self, restored: Optional[Dict[str, Any]]) -> None:
        super()._start_epoch(restored)
        if restored is not None:
            self.per_worker = dict(restored.get("per_worker", {}))
            self.last_worker = restored.get("last_worker", -1)
        else:
            self.per_worker, self.last_worker = {}, -1

    def _batches(self, inner: Iterator[Any]) -> Iterator[Any]:
        # drop the round-robin placeholders of a restored epoch
        it: Iterator[Any] = self._absorb(item for item in inner if item is not SKIP_TURN)
        self._rest: Optional[Iterator[Any]] = None
        self._equal: Optional[EqualStepsIterator] = None
        if self.equal_steps_group is not None or self.max_steps is not None:
            self._rest = it
            it = self._equal = EqualStepsIterator(it, self.equal_steps_group, self.max_steps)
        return it

    def _absorb(self, it: Iterator[Any]) -> Iterator[Any]:
        """Take the skips (and filtered counts) a worker forwards without a batch, and
        the left-over counts of a drained epoch; they are not steps."""
        for item in it:
            if isinstance(item, WorkerBatch) and isinstance(item.batch, (SkipsOnly, LeftOver)):
                if isinstance(item.batch, SkipsOnly):
                    self.skip_report.extend(item.batch.items)
                if self._ledger is not None:
                    self._ledger.filtered += item.counts.filtered
                    if isinstance(item.batch, LeftOver):
                        self._ledger.left_over += item.batch.cuts
                continue
            yield item

    def _drain(self) -> None:
        """Every rank stopped at the same step (or at ``steps_per_epoch``): read the
        rest of this rank's epoch without decoding it and count it as left over."""
        rest, self._rest = getattr(self, "_rest", None), None
        if rest is None:
            return
        self.dataset.count_only()  # (batches already in flight arrive decoded)
        held = self._equal.dropped if self._equal is not None else None
        for item in chain([held] if held is not None else [], rest):
            failed = item.batch if isinstance(item, WorkerBatch) else item
            if isinstance(failed, WorkerFailed):
                raise failed.error
            _, counts = self._receive(item)
            if self._ledger is not None:
                self._ledger.left_over += counts.trained
                self._ledger.filtered += counts.filtered

    def _unwrap(self, item: WorkerBatch) -> Any:
        wid, batch = item.worker, item.batch
        self.per_worker[wid] = self.per_worker.get(wid, 0) + 1
        self.last_worker = wid
        return batch

    def state_dict(self) -> Dict[str, Any]:
        """Where the training loop is: the next batch comes after replaying the sampler
        over metadata (no audio decoded, no features computed) up to it."""
        return self._position(self.per_worker, self.last_worker)

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`; call before the first ``iter()``. Needs the
        same ``num_workers`` (each worker's tars depend on the worker count)."""
        if sd.get("mode") == "map":
            raise ValueError("state was saved by a map-style train loader; this one is not")
        if sd.get("num_workers", self.num_workers) != self.num_workers:
            raise ValueError(f"state saved with num_workers={sd['num_workers']}; this loader "
                             f"has {self.num_workers}: streamed resume needs the same count")
        check_loader_state(sd, "streamed", self.num_workers)
        ws = self._world()[0]
        if int(sd.get("world_size", ws)) != ws and (sd.get("per_worker") or {}):
            raise StateError("world_size", streamed_elastic_refusal(int(sd["world_size"]), ws))
        per_worker = {int(k): int(v) for k, v in (sd.get("per_worker") or {}).items()}
        last = int(sd.get("last_worker", -1))
        offset = (last + 1) % max(self.num_workers, 1) if last >= 0 else 0
        self.dataset.resume(int(sd["epoch"]), per_worker, offset)
        self.epoch, self.consumed, self._finished = int(sd["epoch"]), int(sd["consumed"]), False
        # a state_dict() taken before iterating gives the same state back
        self.per_worker, self.last_worker = dict(per_worker), last
        self._restored = {"epoch": self.epoch, "consumed": self.consumed,
                          "per_worker": per_worker, "last_worker": last}
