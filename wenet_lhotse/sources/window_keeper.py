"""Which remote tars of the window order (:mod:`.window_order`) are fetched and kept,
decided where the order is read: :class:`WindowKeeper`, one per
:class:`~.indexed_shards.IndexReader` in the sampling process (each rank's main
process; the DataLoader workers only read, :mod:`.window_reads`).

* When the reader enters window ``w``, the tars of ``w`` and ``w + 1`` are held and
  fetched whole in the background (:class:`~wenet_lhotse.formats.tar_spool.TarSpool`):
  the sampler's buffer is about one window of cuts, so the fetch runs about one window
  ahead of the batches that need it. The first window of an epoch (or of a resume),
  which the first batch waits for, is fetched alone; later ones overlap.
* Each cut the sampler buffers is held against its tar until the sampler releases it
  (:meth:`release`: its batch was emitted and, ``release_depth`` batches later, has
  been read by the DataLoader worker). The copy of a tar whose window the reader has
  left is removed when none of its cuts is held any more; until then its waiting cuts
  (the carried pool: cuts that wait in sparse buckets) are read from it, and no tar is
  fetched twice in an epoch.
* Budget: the copies of windows before the current one are kept up to
  :data:`CARRIED_WINDOWS` x the window's bytes. Above it, copies are first cut down to
  the members of their waiting cuts (:meth:`TarSpool.trim
  <wenet_lhotse.formats.tar_spool.TarSpool.trim>`, on the spool's threads), most bytes
  saved first; only then do the copies with the fewest waiting cuts go (those cuts are
  read by their own byte range). Disk per node: about ``(CARRIED_WINDOWS + 2) x
  read_window_mb`` (a tar larger than the window counts as its window).

Counts are of the global order (every rank's sampler reads all of it), so the ranks of
a node agree on what to keep; each holds the copies itself and the last one to let go
removes them. A new epoch lets go of the last one's copies except those its first
windows need again.
"""

from __future__ import annotations

import atexit
import os
from typing import Dict, Sequence

from wenet_lhotse.formats.tar_spool import TarSpool
from wenet_lhotse.io.policy import ReadPolicy

#: Windows' worth of bytes kept for cuts carried past their window (see the module doc).
CARRIED_WINDOWS = 2


class _Held:
    """One tar's copy: its window, bytes on disk, and the members of the held cuts."""

    __slots__ = ("window", "nbytes", "members", "trimmed")

    def __init__(self, window: int, nbytes: int) -> None:
        self.window, self.nbytes = window, nbytes
        self.members: Dict[int, int] = {}  # data offset -> size, of the cuts held
        self.trimmed = False


class WindowKeeper:
    """Holds, fetches, trims and lets go of window tars (see the module doc)."""

    def __init__(self, policy: ReadPolicy, window_bytes: int) -> None:
        self.spool = TarSpool(policy)
        self.budget = CARRIED_WINDOWS * window_bytes
        self.epoch = -1
        self.window = -1
        self.held: Dict[str, _Held] = {}  # url -> its copy (this epoch's windows)
        self._pid = os.getpid()
        atexit.register(self.close)  # the copies go with the training process

    def enter(self, epoch: int, window: int, tars: Sequence[Sequence], nxt: Sequence[Sequence]
              ) -> None:
        """The reader starts window ``window`` (tars ``[url, bytes]``; ``nxt``: the next
        window's)."""
        start = epoch != self.epoch  # a first batch waits for this window alone
        if epoch != self.epoch:
            keep = {u for u, _ in list(tars) + list(nxt)}
            for url in [u for u, h in self.held.items() if u not in keep or h.trimmed]:
                self._drop(url)
            for h in self.held.values():  # whole copies carry over; cuts held are per epoch
                h.members.clear()
            self.epoch = epoch
        self.window = window
        for w, items in ((window, tars), (window + 1, nxt)):
            for url, nbytes in items:
                if url not in self.held:
                    self.held[url] = _Held(w, int(nbytes))
                    self.spool.hold(url)
                else:
                    self.held[url].window = w
        for url in [u for u, h in self.held.items() if h.window < window and not h.members]:
            self._drop(url)
        older = [(u, h) for u, h in self.held.items() if h.window < window]
        carried = sum(h.nbytes for _, h in older)
        if carried > self.budget:  # cut copies down to their waiting members, most saved first
            need = [(h.nbytes - sum(n for n in h.members.values()) - 512 * len(h.members), u, h)
                    for u, h in older]
            for saved, url, h in sorted(need, key=lambda x: -x[0]):
                if carried <= self.budget or saved <= 0:
                    break
                ranges = [(o - 512, n + 512) for o, n in h.members.items()]
                full, h.nbytes, h.trimmed = h.nbytes, h.nbytes - saved, True
                carried -= saved
                self.spool.in_background(self._trim, url, h, ranges, full)
        for _, _, url in sorted((len(h.members), -h.window, u) for u, h in older):
            if carried <= self.budget:  # still over: the copies fewest cuts wait for go
                break
            if url in self.held:
                carried -= self.held[url].nbytes
                self._drop(url)
        self.spool.prefetch(tars, first=start)
        self.spool.prefetch(nxt)

    def _trim(self, url: str, h: _Held, ranges: list, full: int) -> None:
        if self.spool.trim(url, ranges) is None:  # not here yet: again at the next window
            h.nbytes = full

    def count(self, url: str, offset: int, size: int) -> None:
        """A cut of ``url`` (its member's data at ``offset``, ``size`` bytes) was
        buffered by the sampler."""
        h = self.held.get(url)
        if h is not None:
            h.members[offset] = size

    def release(self, epoch: int, url: str, offset: int) -> None:
        """The sampler is done with the cut of ``url`` at ``offset``, buffered in
        ``epoch``."""
        h = self.held.get(url)
        if h is None or epoch != self.epoch:
            return
        h.members.pop(offset, None)
        if not h.members and h.window < self.window:
            self._drop(url)

    def _drop(self, url: str) -> None:
        del self.held[url]
        self.spool.release(url)

    def close(self) -> None:
        """Let go of every copy (the reader is done with the data)."""
        if os.getpid() != self._pid:  # a forked copy holds nothing
            return
        for url in list(self.held):
            self._drop(url)
