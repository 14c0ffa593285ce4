"""``CutSet.mux`` with explicit, restorable state.

:class:`ResumableMux` reproduces ``CutSet.mux`` (same RNG draws, same order) over
:class:`PositionedStream` s (a positioned reader plus its lazy transform) and exposes
its state: the RNG, the next position per source, the exhausted flags.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

from lhotse import CutSet
from lhotse.cut import Cut

from wenet_lhotse.sources.positioned import PositionedReader, Tracked

Transform = Optional[Callable[[CutSet], CutSet]]


class PositionedStream:
    """A reader plus the lazy transform applied to it (WeNet filters, tags)."""

    def __init__(self, reader: PositionedReader, transform: Transform = None) -> None:
        self.reader = reader
        self.transform = transform

    def materialize(self, raw: Any) -> Cut:
        """The reader's cut for ``raw``, through the transform (it passed it before)."""
        cut = self.reader.materialize(raw)
        if self.transform is None:
            return cut
        out = list(self.transform(CutSet.from_cuts([cut])))
        if len(out) != 1:
            raise ValueError(f"cut {cut.id} no longer passes the source's filters")
        return out[0]

    def open(self, start: int) -> Tuple[Iterator[Cut], Tracked]:
        tracked = Tracked(self.reader, start)
        cuts = CutSet(tracked)
        if self.transform is not None:
            cuts = self.transform(cuts)
        return iter(cuts), tracked


class ResumableMux:
    """``CutSet.mux`` with explicit state: the same choices as Lhotse's
    ``LazyIteratorMultiplexer`` (``rng.choices`` among active sources, a source
    leaves when exhausted; the stream ends when all are exhausted, or at the
    first with ``stop_early``), with the RNG seeded by ``seed + epoch``.
    One stream is read straight through (no RNG)."""

    def __init__(self, streams: Sequence[PositionedStream],
                 weights: Optional[Sequence[float]] = None, seed: int = 0,
                 stop_early: bool = False) -> None:
        self.streams = list(streams)
        self.weights = list(weights) if weights is not None else [1.0] * len(self.streams)
        if len(self.weights) != len(self.streams):
            raise ValueError("one weight per source is needed")
        self.seed = seed
        self.stop_early = stop_early
        self.last: Tuple[int, int] = (-1, -1)

    def start(self, epoch: int, state: Optional[Dict[str, Any]] = None) -> None:
        for s in self.streams:
            s.reader.set_epoch(epoch)
        self.rng = random.Random(self.seed + epoch)
        if state is None:
            self.next_pos = [0] * len(self.streams)
            self.exhausted = [False] * len(self.streams)
        else:
            self.rng.setstate(tuplify(state["rng"]))
            self.next_pos = list(state["next_pos"])
            self.exhausted = list(state["exhausted"])
        self._iters = []
        for s, p, ex in zip(self.streams, self.next_pos, self.exhausted):
            self._iters.append(None if ex else s.open(p))

    def state(self) -> Dict[str, Any]:
        return {"rng": self.rng.getstate(), "next_pos": list(self.next_pos),
                "exhausted": list(self.exhausted)}

    def __iter__(self) -> Iterator[Cut]:
        return self

    def __next__(self) -> Cut:
        n = len(self.streams)
        while (not any(self.exhausted)) if self.stop_early else (not all(self.exhausted)):
            if n == 1:
                idx = 0
            else:
                active = [(i, w) for i, (ex, w) in enumerate(zip(self.exhausted, self.weights))
                          if not ex]
                idxs, ws = zip(*active)
                idx = self.rng.choices(idxs, weights=ws, k=1)[0]
            it, tracked = self._iters[idx]
            try:
                cut = next(it)
            except StopIteration:
                self.exhausted[idx] = True
                self._iters[idx] = None
                continue
            self.next_pos[idx] = tracked.pos + 1
            self.last = (idx, tracked.pos)
            return cut
        raise StopIteration


def tuplify(x):
    """RNG states come back from JSON/torch.save as lists; ``setstate`` needs tuples."""
    if isinstance(x, (list, tuple)):
        return tuple(tuplify(v) for v in x)
    return x
