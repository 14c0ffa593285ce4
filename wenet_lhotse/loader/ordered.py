"""Batches of exactly ``batch_size`` utterances in the order of the input (decoding).

What WeNet's ``recognize.py`` builds with ``shuffle: false, sort: false`` and static
batches: consecutive lines in groups of ``batch_size`` (the last group may be smaller),
each padded and sorted longest first. Grouping is Lhotse's ``SimpleCutSampler``
(``max_cuts=batch_size``, no shuffling) over the lazily read sources; nothing is held in
memory beyond one batch.

With DataLoader workers, worker ``w`` of ``n`` builds batches ``w, w + n, ...``; the
DataLoader takes them round-robin, so the output keeps the input order. (WeNet splits
the *lines* across workers before batching, so its batches differ with the worker
count; the set of utterances and each utterance's features do not.)
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from lhotse import CutSet
from lhotse.dataset.sampling.simple import SimpleCutSampler

from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources import SourceSpec, open_source


class OrderedBatches(torch.utils.data.IterableDataset):
    """``dataset[cuts]`` for consecutive groups of ``batch_size`` cuts of ``specs``.

    :param specs: sources, read one after another in their own order.
    :param dataset: ``dataset[cuts] -> batch`` (e.g. our ``WenetAsrDataset``).
    :param batch_size: utterances per batch (WeNet's ``batch_conf.batch_size``).
    :param transform: ``CutSet -> CutSet`` applied to each source (WeNet's filters).
    :param policy: how the sources are read (default: strict -- raise on unreadable
        list lines / tars instead of skipping them).
    """

    def __init__(self, specs: Sequence[SourceSpec], dataset: Any, batch_size: int,
                 transform: Optional[Callable[[CutSet], CutSet]] = None,
                 *, policy: Optional[ReadPolicy] = None) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_conf.batch_size must be >= 1, got {batch_size}")
        self.specs = list(specs)
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.transform = transform
        self.policy = policy if policy is not None else ReadPolicy()

    def cuts(self) -> CutSet:
        """The sources' cuts, in order (lazy)."""
        cutsets = [open_source(s, policy=self.policy, transform=self.transform)
                   for s in self.specs]
        if len(cutsets) == 1:
            return cutsets[0]
        out = cutsets[0]
        for cs in cutsets[1:]:
            out = out + cs
        return out

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        sampler = SimpleCutSampler(self.cuts(), max_cuts=self.batch_size, shuffle=False,
                                   drop_last=False, world_size=1, rank=0)
        for i, batch in enumerate(sampler):
            if i % nw == wid:
                yield self.dataset[batch]

