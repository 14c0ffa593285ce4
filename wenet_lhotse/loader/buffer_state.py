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
from typing import Any, Dict, List, Optional, Tuple

from lhotse.cut import Cut
from lhotse.dataset.sampling.dynamic_bucketing import BucketSelectionState

from wenet_lhotse.loader.bucketing import SteppedBucketer
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

    def _next_cut(self) -> Cut:
        cut = next(self.cuts_iter)
        self.loc[id(cut)] = (cut, *self.mux.last)
        return cut

    def _emitted(self, batch: List[Cut]) -> None:
        self.emitted.extend(id(c) for c in batch)

    def snapshot(self) -> Tuple:
        """Cheap: the bucket changes since the last snapshot (the buckets as they were
        are rebuilt from the current ones by undoing the changes of later snapshots;
        copying the 20,000-cut buffer at every batch was a large part of the sampler's
        time), merged batches (references), RNG states, mux state, the constraint's
        shared record, whether the input is exhausted."""
        shared = getattr(self.constraint, "shared_state", None)
        ops, self.journal = self.journal, []
        return (ops,
                tuple(tuple(b) for b in self.merged), self.rng.getstate(),
                self.sel_state.save(), self.mux.state(), shared() if shared else None,
                self.source_exhausted)


def pack_lines(values: List[Any]) -> str:
    """JSON-able values as one compressed string (base64 of zlib'd JSON): manifest lines
    compress well, and a state must stay plain data (``torch.save`` and JSON)."""
    return base64.b64encode(zlib.compress(json.dumps(values).encode("utf-8"), 1)).decode()


def unpack_lines(packed: Optional[str]) -> List[Any]:
    """What :func:`pack_lines` packed, decompressed with a bound (see
    :func:`~.state_check.unpack_bounded`)."""
    from wenet_lhotse.loader.state_check import unpack_bounded

    return unpack_bounded(packed)
