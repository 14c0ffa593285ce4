"""The window order of an indexed epoch (``lhotse_conf.read_window_mb``): exact, elastic,
and each tar read once, in one piece, per epoch.

The epoch's tars are taken in their usual order (WeNet's ``list_shuffle``: shuffled with
``seed + epoch``) and cut into *windows*: consecutive tars whose bytes add up to at
most the window budget (a tar larger than the budget is a window of its own). Within a
window its utterances are shuffled (``seed``, ``epoch``, window number); the windows
follow one another. A position is an utterance's place in this order, so restoring one
is arithmetic (which window, then its permutation): nothing is read, and every rank
and every world size computes the same global order, as with the plain index order.

The sampler's bucket buffer is held to about one window of utterances
(:func:`window_buffer_size`), so batches are drawn from the window being read plus the
cuts that wait in their buckets (the *carried pool*); the audio of a window's tars is
fetched whole, one window ahead (:mod:`~wenet_lhotse.formats.tar_spool`).

Where this differs from WeNet: WeNet's shard reader reads one tar at a time per worker
and shuffles a buffer of ``shuffle_size`` utterances; here the whole epoch is one order
(every utterance exactly once across ranks and workers) and the shuffle reaches across
the tars of a window. From Lhotse 1.33: its samplers read a CutSet in order; this is a
reader order, below the sampler.
"""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

#: The shuffle of a window: a seed of its own per (seed, epoch, window).
_MIX = 1_000_003


def windows_of(sizes: Sequence[int], budget: int) -> np.ndarray:
    """End unit (exclusive) of each window over units of ``sizes`` bytes, in order."""
    ends: List[int] = []
    total = 0
    for i, size in enumerate(sizes):
        if total and total + size > budget:
            ends.append(i)
            total = 0
        total += size
    if len(sizes):
        ends.append(len(sizes))
    return np.array(ends, np.int64)


def window_permutation(n: int, seed: int, epoch: int, window: int) -> List[int]:
    """The order of the ``n`` utterances of window ``window`` (a permutation)."""
    order = list(range(n))
    random.Random((seed * _MIX + epoch) * _MIX + window).shuffle(order)
    return order


def tar_bytes(rec: Dict[str, Any], offsets: np.ndarray, sizes: np.ndarray) -> int:
    """A tar's bytes: its recorded size, else the span of its indexed members."""
    if rec.get("size"):
        return int(rec["size"])
    if not rec["count"]:
        return 0
    last = rec["first"] + rec["count"] - 1
    return int(offsets[last] + sizes[last])


def window_buffer_size(indexes: Dict[int, Any], window_mb: Optional[float],
                       buffer_size: int) -> int:
    """The sampler's buffer under the window order: about the utterances of one window
    (utterances x window bytes / tar bytes over all indexed sources), at most
    ``buffer_size``; ``buffer_size`` itself without a window. When tars of the mean size
    fill a window only in part (3 of 18.6 MB in 64 MiB), the utterances of the whole
    tars that fit, if fewer: a buffer larger than the first window would take cuts of
    the second one before the first batch, whose copies it would then wait for too."""
    if not window_mb or not indexes:
        return buffer_size
    from wenet_lhotse.formats.shard_index import ShardIndex

    utts = nbytes = ntars = 0
    for parts in indexes.values():
        for path, tars in parts:
            ix = ShardIndex(path)
            for t in tars:
                rec = ix.tars[t]
                utts += rec["count"]
                nbytes += tar_bytes(rec, ix.cols["offset"], ix.cols["size"])
                ntars += 1
    if not nbytes:
        return buffer_size
    budget = window_mb * (1 << 20)
    size = utts * budget / nbytes
    whole = int(budget * ntars // nbytes)  # tars of the mean size in a window
    if whole >= 1:
        size = min(size, utts * whole / ntars)
    return max(1, min(buffer_size, int(size)))


class WindowPlan:
    """One epoch's windows over units (tars) already in the epoch's tar order:
    ``ends`` (end position of each window, utterances), ``unit_ends`` (end unit of each
    window); :meth:`rows` gives a window's ``(unit, row within unit)`` in order."""

    def __init__(self, counts: Sequence[int], sizes: Sequence[int], budget: int,
                 seed: int, epoch: int) -> None:
        self.unit_ends = windows_of(sizes, budget)
        cum = np.cumsum(np.asarray(counts, np.int64))
        self.ends = cum[self.unit_ends - 1] if len(self.unit_ends) else np.zeros(0, np.int64)
        self.counts = list(counts)
        self.seed, self.epoch = seed, epoch
        self._cached: Optional[Tuple[int, List[Tuple[int, int]]]] = None

    def window_at(self, pos: int) -> int:
        return int(np.searchsorted(self.ends, pos, side="right"))

    def begin(self, w: int) -> int:
        return int(self.ends[w - 1]) if w else 0

    def units(self, w: int) -> range:
        return range(int(self.unit_ends[w - 1]) if w else 0, int(self.unit_ends[w]))

    def rows(self, w: int) -> List[Tuple[int, int]]:
        """``(unit, row within the unit)`` of window ``w``'s utterances, in order."""
        if self._cached is None or self._cached[0] != w:
            flat = [(u, r) for u in self.units(w) for r in range(self.counts[u])]
            perm = window_permutation(len(flat), self.seed, self.epoch, w)
            self._cached = (w, [flat[i] for i in perm])
        return self._cached[1]
