"""The map-style sampler's bucket buffer as restorable state.

:class:`PositionedBucketer` is the :class:`~.bucketing.SteppedBucketer` of
:class:`~.sampler.ResumableBucketingSampler`: it remembers where each buffered cut came
from (stream, position) and journals the changes to the buckets between snapshots, so
that the buffer at any of the last few batches is the current one with the later
changes undone (:func:`~.bucketing.undo_bucket_ops`), never a copy per batch.
:func:`pack_lines` / :func:`unpack_lines` hold the manifest lines a state keeps for cuts
read long before.
"""

from __future__ import annotations

import base64
import json
import zlib
from math import ceil
from typing import Any, Dict, List, Optional, Tuple

from lhotse.cut import Cut
from lhotse.dataset.sampling.dynamic_bucketing import BucketSelectionState

from wenet_lhotse.loader.bucketing import SteppedBucketer
from wenet_lhotse.loader.constraints import StaticBatchConstraint
from wenet_lhotse.loader.distributed import wenet_static_steps
from wenet_lhotse.loader.mux import ResumableMux


class PositionedBucketer(SteppedBucketer):
    """:class:`~wenet_lhotse.loader.bucketing.SteppedBucketer` over a
    :class:`ResumableMux` that remembers where each buffered cut came from (stream,
    position), so that its state can be saved as positions."""

    def __init__(self, mux: ResumableMux, sel_state: BucketSelectionState, **kw) -> None:
        super().__init__(mux, sel_state, **kw)
        self.mux = mux
        # id(cut) -> (cut, stream index, position), for buffered and recently emitted cuts
        self.loc: Dict[int, Tuple[Cut, int, int]] = {}
        self.emitted: List[int] = []  # id() of cuts handed out since the last snapshot
        self.journal = []  # bucket changes since the last snapshot
        self.read = 0  # cuts read from the mux this epoch (restored from the state)
        #: per stream: its reader when it keeps tar copies (the window order), else None;
        #: the per-cut ``taken`` call is made only for those
        self.keepers = [s.reader if s.reader.keeps_copies else None for s in mux.streams]

    def _next_cut(self) -> Cut:
        cut = next(self.cuts_iter)
        stream, pos = last = self.mux.last
        self.loc[id(cut)] = (cut, *last)
        reader = self.keepers[stream]
        if reader is not None:
            reader.taken(cut, pos)  # (the window order's tar copies)
        self.read += 1
        return cut

    def plan_wenet_tail(self, world_size: int, workers: int, rounds: int) -> None:
        """Static batches, once the input is exhausted (``rounds`` of ``world_size``
        batches emitted): split what is left into as many batches as WeNet's loader with
        ``workers`` DataLoader workers per rank takes steps over the cuts read
        (:func:`~.distributed.wenet_static_steps`: each of its workers ends with a partial
        batch), halving the largest; nothing when it already makes that many."""
        if not self.source_exhausted or not isinstance(self.constraint, StaticBatchConstraint):
            return
        size = self.constraint.batch_size
        steps = wenet_static_steps(self.read, world_size, workers, size)
        batches = world_size * (steps - rounds)
        bucketed = self.bucketed()
        natural = len(self.merged) + ceil(bucketed / size)
        # the shortfall stays the same each round: split only near the end (few batches
        # held as merged, each copied into every snapshot). Called every round: the
        # cheap tests first.
        if (natural > world_size * (workers + 1) or natural >= batches
                or bucketed + sum(len(b) for b in self.merged) < batches):
            return
        rest = list(self.merged)
        self.merged.clear()
        while True:
            try:
                rest.append(self.draw())
            except StopIteration:
                break
        while len(rest) < batches:
            i = max(range(len(rest)), key=lambda j: len(rest[j]))
            rest[i:i + 1] = [rest[i][:len(rest[i]) // 2], rest[i][len(rest[i]) // 2:]]
        held = {id(c) for b in rest for c in b}  # drawn, not emitted: held as merged batches
        self.emitted = [i for i in self.emitted if i not in held]
        self.merged.extend(rest)

    def _emitted(self, batch: List[Cut]) -> None:
        self.emitted.extend(id(c) for c in batch)

    def snapshot(self) -> Tuple:
        """Cheap: the bucket changes since the last snapshot (the buckets as they were
        are rebuilt from the current ones by undoing the changes of later snapshots;
        copying the 20,000-cut buffer at every batch was a large part of the sampler's
        time), merged batches (references), RNG states, mux state, the constraint's
        shared record, whether the input is exhausted, cuts read."""
        shared = getattr(self.constraint, "shared_state", None)
        ops, self.journal = self.journal, []
        return (ops,
                tuple(tuple(b) for b in self.merged), self.rng.getstate(),
                self.sel_state.save(), self.mux.state(), shared() if shared else None,
                self.source_exhausted, self.read)


def pack_lines(values: List[Any]) -> str:
    """JSON-able values as one compressed string (base64 of zlib'd JSON): manifest lines
    compress well, and a state must stay plain data (``torch.save`` and JSON)."""
    return base64.b64encode(zlib.compress(json.dumps(values).encode("utf-8"), 1)).decode()


def unpack_lines(packed: Optional[str]) -> List[Any]:
    """What :func:`pack_lines` packed, decompressed with a bound (see
    :func:`~.state_check.unpack_bounded`)."""
    from wenet_lhotse.loader.state_check import unpack_bounded

    return unpack_bounded(packed)
