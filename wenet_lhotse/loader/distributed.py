"""DDP helpers: world detection, equal step counts for streamed data, cv partitioning,
exact cv loss reduction, and a data-wait meter.

Guarantees (documented in ``docs/distributed.md``):

* map-style train data: every rank iterates the same batches and keeps every
  ``world_size``-th, so step counts are equal by construction; the last round is
  split so that every rank gets a batch (largest batches halved, as for cv), re-planned
  together with the round before when fewer cuts than ranks would be left, so no cut
  is used twice in an epoch (Lhotse's sampler copies cuts as ``<id>_dup<n>`` there).
* streamed train data (tar shards): each rank reads its own tars; after each
  batch the ranks all-reduce (MIN) a "has data" flag on a gloo group, so all
  ranks stop at the step where the first rank runs out. The other ranks' unread
  remainder of that epoch is dropped (shards are reshuffled each epoch, so a
  different remainder is dropped each time).
* cv: one batch plan for the whole cv set, cut into a multiple of ``world_size``
  batches (splitting the largest batches when needed), rank ``r`` takes batches
  ``r, r + W, ...``: equal steps, no duplicates, every cut exactly once.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist
from lhotse import CutSet

logger = logging.getLogger(__name__)


def world_info(world_size: Optional[int] = None, rank: Optional[int] = None) -> Tuple[int, int]:
    """``(world_size, rank)``: explicit values win, then an initialized
    ``torch.distributed``, then ``WORLD_SIZE``/``RANK`` (torchrun), else ``(1, 0)``."""
    if world_size is not None and rank is not None:
        return int(world_size), int(rank)
    if dist.is_available() and dist.is_initialized():
        ws, r = dist.get_world_size(), dist.get_rank()
    elif "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        ws, r = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    else:
        ws, r = 1, 0
    return (int(world_size) if world_size is not None else ws,
            int(rank) if rank is not None else r)


def gloo_group() -> Optional[Any]:
    """A gloo process group over all ranks for the tiny CPU collectives of the loader
    (the training group may be NCCL). Collective: every rank must call it.
    ``None`` when torch.distributed is not initialized or has one rank."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    if dist.get_backend() == "gloo":
        return dist.group.WORLD
    return dist.new_group(backend="gloo")


class EqualStepsIterator:
    """Wraps a per-rank batch iterator so that every rank yields the same number of
    batches: after each attempt to get a batch, ranks all-reduce MIN of a
    "has data" flag; when any rank is out, all stop. Optionally also stops after
    ``max_steps`` batches. An epoch that would end at 0 steps because some rank had
    nothing while others had batches is a ``RuntimeError`` on every rank, not a
    silent empty epoch."""

    def __init__(self, inner: Iterator, group: Optional[Any], max_steps: Optional[int] = None
                 ) -> None:
        self.inner = inner
        self.group = group
        self.max_steps = max_steps
        self.steps = 0
        self.done = False
        #: the batch this rank had in hand when another rank ran out (not trained: the
        #: loader counts it as left over)
        self.dropped: Any = None

    def __iter__(self) -> EqualStepsIterator:
        return self

    def __next__(self) -> Any:
        if self.done or (self.max_steps is not None and self.steps >= self.max_steps):
            self.done = True
            raise StopIteration
        try:
            batch, has = next(self.inner), 1
        except StopIteration:
            batch, has = None, 0
        if self.group is not None:
            # MIN of (has, -has): whether every rank has a batch, and whether any has.
            flag = torch.tensor([has, -has], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
            has, anyone = int(flag[0].item()), -int(flag[1].item())
            if not has and anyone and self.steps == 0:
                self.done = True
                raise RuntimeError(
                    "a rank had no batch at all this epoch while others had: every rank "
                    "would stop at 0 steps. Its data was all skipped or it got no shard "
                    "(see loader.skip_report on that rank; fewer tars than ranks x workers?)")
        if not has:
            self.done = True
            self.dropped = batch
            raise StopIteration
        self.steps += 1
        return batch


def plan_partition(batches: List[CutSet], world_size: int) -> List[CutSet]:
    """Make ``len(batches)`` a multiple of ``world_size`` by halving the largest
    batches (order kept), so that ``batches[rank::world_size]`` gives every rank the
    same number of steps with no cut duplicated. Raises when there are fewer cuts
    than ranks (some rank would have nothing to evaluate)."""
    batches = list(batches)
    if world_size <= 1:
        return batches
    total = sum(len(b) for b in batches)
    if total < world_size:
        raise ValueError(f"the cv set has {total} cuts, fewer than {world_size} ranks")
    while len(batches) % world_size:
        i = max(range(len(batches)), key=lambda j: len(batches[j]))
        cuts = list(batches[i])
        half = len(cuts) // 2
        batches[i:i + 1] = [CutSet.from_cuts(cuts[:half]), CutSet.from_cuts(cuts[half:])]
    return batches


def wenet_static_steps(cuts: int, world_size: int, workers: int, batch_size: int) -> int:
    """Steps per rank of WeNet's static batching over ``cuts`` utterances: its DataLoader
    splits the (shuffled) lines over ``world_size * workers`` instances, line ``i`` to
    instance ``i % (world_size * workers)``, and each instance batches its own share, so
    each worker ends with its own partial batch. Rank 0's count (the largest share)."""
    n = world_size * max(workers, 1)
    shares = [cuts // n + (1 if i < cuts % n else 0) for i in range(max(workers, 1))]
    return sum(-(-k // batch_size) for k in shares)


def plan_last_two_rounds(batches: List[List[Any]], world_size: int) -> List[List[Any]]:
    """The last two rounds of a map-style epoch when the last would have fewer cuts than
    ranks: ``2 * world_size`` batches from ``world_size <= len(batches) < 2 * world_size``
    batches, by halving the largest ones; when there are fewer than ``2 * world_size``
    cuts, one round of ``world_size`` batches instead (the extra cuts joined to the
    smallest batches, logged: only possible with batches of one or two cuts)."""
    total = sum(len(b) for b in batches)
    if total >= 2 * world_size:
        plan = plan_partition([CutSet.from_cuts(b) for b in batches], world_size)
        if len(plan) == 2 * world_size:
            return [list(b) for b in plan]
    logger.warning("the last %d cuts of the epoch are joined to larger batches so that no "
                   "rank repeats a cut (%d ranks)", total - sum(len(b) for b in
                                                              batches[:world_size]), world_size)
    out = [list(b) for b in batches[:world_size]]
    for cut in (c for b in batches[world_size:] for c in b):
        min(out, key=len).append(cut)
    return out


def reduce_cv_loss(loss_sum: Any, count: Any, group: Optional[Any] = None) -> Tuple[float, float]:
    """All-reduce a rank's cv loss sum and count (e.g. sum of per-utterance losses
    and number of utterances); returns ``(global_sum / global_count, global_count)``,
    equal to the single-process value when the cv set is partitioned without
    duplicates (see :func:`plan_partition`). Without torch.distributed, the local values.
    Uses float64 so the sum does not depend on the number of ranks beyond rounding."""
    t = torch.tensor([float(loss_sum), float(count)], dtype=torch.float64)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    s, n = float(t[0]), float(t[1])
    return (s / n if n else float("nan")), n


class DataWaitMeter:
    """Fraction of wall time the training loop waits for data.

    Wrap the loader (``for batch in meter.wrap(loader): ...``): the time spent inside
    ``next()`` is *wait*; everything between two ``next()`` calls is *work*.
    ``meter.fraction`` = wait / (wait + work); ``meter.summary()`` for logs.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock  # seconds
        self.wait = 0.0  # seconds
        self.total = 0.0  # seconds, from the first next() call to the last return
        self.batches = 0
        self._t0: Optional[float] = None

    def wrap(self, iterable) -> Iterator:
        it = iter(iterable)
        while True:
            t = self.clock()
            if self._t0 is None:
                self._t0 = t
            try:
                batch = next(it)
            except StopIteration:
                return
            now = self.clock()
            self.wait += now - t
            self.total = now - self._t0
            self.batches += 1
            yield batch

    @property
    def fraction(self) -> float:
        return self.wait / self.total if self.total > 0 else 0.0

    def summary(self) -> str:
        return (f"{self.batches} batches, waited {self.wait:.2f} s of {self.total:.2f} s "
                f"({100 * self.fraction:.1f}% data wait)")
