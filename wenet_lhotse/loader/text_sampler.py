"""Token-limited batches of text items (:class:`TextBatchSampler`), planned per epoch.

A text source is held in memory (:mod:`wenet_lhotse.sources.text`), so an epoch is
planned in one go: the items are shuffled with ``seed + epoch``, then batched by Lhotse's
``DynamicBucketingSampler`` with a ``TokenConstraint`` (``max_tokens`` bounds the padded
size, ``batch size x longest item`` in tokens; pairs count the longer side, see
:class:`PairTokenConstraint`), buckets over token counts estimated once with Lhotse's
``estimate_duration_buckets``. Rounds of ``world_size`` batches are dealt to the ranks;
the last round is re-planned so that every rank gets a batch and no item is repeated
(:func:`~.distributed.plan_last_two_rounds`, as the speech sampler does).

State: ``{"epoch", "consumed", "world_size"}``. Restoring re-plans the epoch (cost: one
pass over the in-memory items, no IO) and skips the consumed batches: exact at any
position, on the same number of ranks. ``consumed`` counts this rank's batches of a plan
dealt by ``world_size``, so a state saved mid-epoch on another number of ranks is refused
in one line (:meth:`TextBatchSampler.check_state`; replaying it trained some lines never
and others twice); an epoch's start resumes on any number.
Same protocol as :class:`~.sampler.ResumableBucketingSampler`: each ``iter()`` starts the
next epoch unless ``set_epoch`` or ``load_state_dict`` came first.
"""

from __future__ import annotations

import bisect
import random
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from lhotse import CutSet
from lhotse.cut.text import TextPairExample
from lhotse.dataset.sampling.base import TokenConstraint
from lhotse.dataset.sampling.dynamic_bucketing import (
    DynamicBucketingSampler,
    estimate_duration_buckets,
)

from wenet_lhotse.loader.distributed import plan_last_two_rounds, plan_partition
from wenet_lhotse.loader.epochs import EpochAdvance
from wenet_lhotse.sources.state_lines import StateError


@dataclass
class PairTokenConstraint(TokenConstraint):
    """Lhotse's ``TokenConstraint`` made a hard cap, measuring a ``TextPairExample`` by its
    longer side (Lhotse's counts the source only; a padded target costs memory too).

    Lhotse's batcher adds an item, then closes the batch when one more item as long as
    the longest would exceed the budget -- keeping the item that made it exceed: the
    budget is soft. Here a batch closes when one more item as long as its bucket's upper
    edge (``edges``; past the last edge, ``longest``) would exceed it: no batch exceeds
    ``max_tokens`` (padded tokens: items x longest item).
    """

    edges: Optional[List[float]] = None
    longest: int = 0

    def measure_length(self, example: Any) -> float:
        if isinstance(example, TextPairExample):
            return max(example.source.num_tokens or 0, example.target.num_tokens or 0)
        return example.num_tokens

    def _cap(self, length: float) -> float:
        i = bisect.bisect_left(self.edges or [], length)
        return self.edges[i] if self.edges and i < len(self.edges) else max(self.longest,
                                                                           length)

    def close_to_exceeding(self) -> bool:
        if self.max_examples is not None and self.num_examples >= self.max_examples:
            return True
        if self.max_tokens is None:
            return False
        return (self.num_examples + 1) * self._cap(self.longest_seen) > self.max_tokens


def equal_rounds(batches: List[List[Any]], world_size: int) -> List[List[Any]]:
    """``batches`` re-planned at the end so that their number is a multiple of
    ``world_size`` (batches only split or joined, nothing repeated)."""
    r = len(batches) % world_size
    if world_size == 1 or r == 0:
        return batches
    if len(batches) < world_size:
        return [list(b) for b in plan_partition([CutSet.from_cuts(b) for b in batches],
                                                world_size)]
    cut = len(batches) - (world_size + r)
    return batches[:cut] + plan_last_two_rounds(batches[cut:], world_size)


class TextBatchSampler(EpochAdvance):
    """Batches of text items limited by tokens, this rank's share of each epoch.

    :param items: ``TextExample`` / ``TextPairExample`` s (tokenized).
    :param max_tokens: padded tokens per batch (``lhotse_conf.max_tokens_in_batch``).
    :param max_examples: optional cap on items per batch.
    :param num_buckets: token-length buckets (fewer when there are few items).
    :param shuffle: reshuffle every epoch (``seed + epoch``); else file order.
    """

    resumable = True

    def __init__(self, items: Sequence[Any], *, max_tokens: int,
                 max_examples: Optional[int] = None, num_buckets: int = 10,
                 shuffle: bool = True, world_size: int = 1, rank: int = 0,
                 seed: int = 0) -> None:
        if not items:
            raise ValueError("a text source without items (all filtered?)")
        self.items = list(items)
        self.max_tokens = int(max_tokens)
        longest = max(PairTokenConstraint().measure_length(i) for i in self.items)
        self.longest = int(longest)
        if longest > self.max_tokens:
            raise ValueError(f"max_tokens_in_batch {self.max_tokens} is below the longest text "
                             f"item ({longest} tokens): raise it or lower token_max_length")
        self.max_examples = max_examples
        self.shuffle, self.world_size, self.rank, self.seed = shuffle, world_size, rank, seed
        buckets = max(1, min(num_buckets, len(self.items) // 2))
        self.bins = (estimate_duration_buckets(self.items, buckets, constraint=self._constraint())
                     if buckets > 1 else [])
        #: what reading the source did (set by the builder: sources.text.TextReadStats)
        self.read_stats: Any = None
        self._init_epochs()
        self._plan: List[List[Any]] = []
        self._pos = 0
        self._done = False

    def _constraint(self) -> PairTokenConstraint:
        return PairTokenConstraint(max_tokens=self.max_tokens, max_examples=self.max_examples,
                                   edges=list(getattr(self, "bins", []) or []),
                                   longest=self.longest)

    def plan(self, epoch: int) -> List[List[Any]]:
        """Every batch of ``epoch`` (all ranks), in order."""
        items = list(self.items)
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(items)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an eager CutSet: it is in memory anyway
            # one bucket (a source of 1-3 items): one edge above every item, since Lhotse
            # would estimate edges itself for none and assert num_buckets > 1
            bins = self.bins or [self.longest + 1]
            sampler = DynamicBucketingSampler(
                CutSet(items), constraint=self._constraint(), duration_bins=bins,
                num_buckets=len(bins) + 1, shuffle=self.shuffle,
                seed=self.seed, buffer_size=max(len(items), 1), world_size=1, rank=0)
            sampler.set_epoch(epoch)
            batches = [list(b) for b in sampler]
        return equal_rounds(batches, self.world_size)

    def __iter__(self) -> TextBatchSampler:
        if not self._start_iter():  # a restored state: resume it
            return self
        self._plan = self.plan(self.epoch)[self.rank::self.world_size]
        self._pos = 0
        self._done = False
        return self

    def __next__(self) -> CutSet:
        if self._pos >= len(self._plan):
            self._done = True
            raise StopIteration
        batch = self._plan[self._pos]
        self._pos += 1
        return CutSet(batch)

    def __len__(self) -> int:
        """Batches of this rank in the current epoch."""
        return len(self._plan)

    def state_dict(self, consumed: Optional[int] = None) -> Dict[str, Any]:
        consumed = self._pos if consumed is None else consumed
        ws = self.world_size
        if self._done and consumed >= len(self._plan):  # the end was met: the next epoch
            return {"kind": "text", "epoch": self.epoch + 1, "consumed": 0, "world_size": ws}
        return {"kind": "text", "epoch": self.epoch, "consumed": consumed, "world_size": ws}

    def check_state(self, sd: Dict[str, Any]) -> None:
        """:class:`StateError` naming ``world_size`` for a state saved mid-epoch on another
        number of ranks (see the module doc); called before any sampler is restored."""
        saved = int(sd.get("world_size", self.world_size))
        if saved != self.world_size and int(sd.get("consumed", 0)) > 0:
            raise StateError("world_size", (
                f"saved mid-epoch on {saved} ranks, this run has {self.world_size}: a text "
                f"source resumes mid-epoch only on the same number of ranks (each rank's "
                f"text batches depend on it); resume from an epoch checkpoint"))

    def load_state_dict(self, sd: Dict[str, Any]) -> None:
        self.check_state(sd)
        self._restored_at(sd["epoch"])
        self._plan = self.plan(self.epoch)[self.rank::self.world_size]
        self._pos = int(sd["consumed"])
        self._done = False
