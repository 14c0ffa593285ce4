"""What map-style loading hands its DataLoader: the sampler (:class:`EpochTaggedSampler`
over a plan: shuffled buckets, or :class:`FixedBatches` for WeNet's list order and
cv/infer) and the dataset the workers run (:class:`LoaderDataset`: Shar audio attached,
``dataset[cuts]``, the batch returned as a :class:`~.streamed.WorkerBatch` with its
ledger counts)."""

from __future__ import annotations

from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import torch
from lhotse import CutSet

from wenet_lhotse.errors import WenetDataError, WorkerFailed, carry_skips
from wenet_lhotse.loader.epochs import EpochAdvance
from wenet_lhotse.loader.ledger import BatchCounts, batch_size_of
from wenet_lhotse.loader.streamed import WorkerBatch
from wenet_lhotse.loader.transport import BatchRing


class LoaderDataset(torch.utils.data.Dataset):
    """What the DataLoader workers run for map-style loading: takes ``(epoch, cuts)``
    from :class:`EpochTaggedSampler` (or plain ``cuts``), forwards a new epoch to
    ``dataset.set_epoch`` (persistent workers never see the main process's epoch
    otherwise; augmentation seeds depend on it), runs ``attach(cuts)`` (Shar audio
    for these cuts only), then ``dataset[cuts]``."""

    #: set by the loader: the shared-memory ring batches travel through (workers)
    ring: Optional[BatchRing] = None

    def __init__(self, dataset: Any, attach: Any = None) -> None:
        self.dataset = dataset
        self.attach = attach
        self._epoch: Optional[int] = None

    def __getitem__(self, item: Any) -> Any:
        try:
            if self.ring is None:
                out, given = self._batch(item)
                return WorkerBatch(-1, out, BatchCounts(batch_size_of(out, given)))
            with self.ring.reserve():  # padded straight into shared memory
                out, given = self._batch(item)
                counts = BatchCounts(batch_size_of(out, given))
                return WorkerBatch(-1, self.ring.pack(out), counts)
        except WenetDataError as err:
            if torch.utils.data.get_worker_info() is None:
                raise
            return WorkerFailed(err)  # raised as it is by the loader (one line)

    def _batch(self, item: Any) -> Tuple[Any, int]:
        """``(dataset[cuts], how many cuts it was given)``: a cut whose Shar audio is
        missing is a skip, not given (the ledger counts it once)."""
        if isinstance(item, tuple):
            epoch, cuts = item
            if epoch != self._epoch and hasattr(self.dataset, "set_epoch"):
                self.dataset.set_epoch(epoch)
            self._epoch = epoch
        else:
            cuts = item
        if self.attach is not None:
            cuts = self.attach(cuts)
        given = len(cuts) if hasattr(cuts, "__len__") else 0
        out = self.dataset[cuts]
        if self.attach is None:
            return out, given
        return carry_skips(out, self.attach.skip_report.take_new()), given


class EpochTaggedSampler(torch.utils.data.Sampler):
    """The one sampler of map-style loading: yields ``(epoch, batch)``, the batches of
    ``sampler``, the plan that decides them (:mod:`.map_core`) --

    * shuffled buckets: a :class:`~.sampler.ResumableBucketingSampler` (training), or a
      :class:`~.batch_mux.BatchMuxSampler` over one such sampler per source (mixing by
      batch);
    * the same batches every epoch, :class:`FixedBatches`: WeNet's list order
      (:mod:`.in_order`), or the whole cv/infer set planned once.

    Each is an iterable whose ``iter()`` starts its next epoch (the rule of
    :mod:`.epochs`) and whose ``epoch`` says which. :class:`LoaderDataset` forwards
    the epoch to the dataset's ``set_epoch`` (augmentation seeds, cv dither).
    """

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self._fresh: Optional[Iterator[CutSet]] = None  # an epoch not yet drawn from

    def __iter__(self) -> Iterator[Tuple[int, CutSet]]:
        # Start the epoch now (not at the first next()), so that a state_dict() taken
        # right after iter(loader) already refers to the new epoch. torch's DataLoader
        # iterator calls iter(sampler) twice when it starts its workers (in __init__ and
        # in _reset) and draws from the second only: that is the same epoch, not the next
        # (starting one would fill the sampler's buffer twice before the first batch).
        if self._fresh is None:
            self._fresh = iter(self.sampler)
        return self._tagged(self._fresh)

    def _tagged(self, it: Iterator[CutSet]) -> Iterator[Tuple[int, CutSet]]:
        self._fresh = None
        while True:  # not ``for``: iter(it) would start yet another epoch
            try:
                batch = next(it)
            except StopIteration:
                return
            yield self.sampler.epoch, batch

    def __len__(self) -> int:
        """Batches per epoch, for a plan that knows them (:class:`FixedBatches`);
        ``TypeError`` for shuffled buckets (as ``len()`` of Lhotse's samplers)."""
        return len(self.sampler)


class FixedBatches(EpochAdvance):
    """The same CutSet batches every epoch (a fixed plan for this rank): WeNet's list
    order, or a cv/infer set planned once. ``epoch`` counts the passes (cv dither draws
    new noise each pass, as WeNet's).

    :param batches: the batches, or a function that plans them: called at the first
        ``iter()`` or ``len()`` (a cv loader reads nothing before it is used; WeNet's
        reads its list when first iterated too).
    :param transforms: whose ``filtered`` counts grow while the plan is made
        (:attr:`plan_filtered`).
    """

    def __init__(self, batches: Union[Sequence[CutSet], Callable[[], Sequence[CutSet]]],
                 transforms: Sequence[Any] = ()) -> None:
        self._transforms = transforms
        self._plan = batches if callable(batches) else None
        self._batches: Optional[List[CutSet]] = None if callable(batches) else list(batches)
        #: cuts the filters removed when the plan was made (the ledger's, every pass)
        self.plan_filtered: Optional[int] = None
        self._init_epochs(0)

    @property
    def batches(self) -> List[CutSet]:
        if self._batches is None:
            before = sum(getattr(tf, "filtered", 0) for tf in self._transforms)
            self._batches = list(self._plan())
            self.plan_filtered = sum(getattr(tf, "filtered", 0)
                                     for tf in self._transforms) - before
            self._plan = None
        return self._batches

    def __iter__(self) -> Iterator[CutSet]:
        self._start_iter()
        return self._each()  # planned at the first batch drawn (or len())

    def _each(self) -> Iterator[CutSet]:
        yield from self.batches

    def __len__(self) -> int:
        return len(self.batches)
