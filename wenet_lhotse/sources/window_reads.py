"""Where the audio reader reads a remote tar under the window order
(:mod:`.window_order`): :class:`WindowReads`, one per process.

Cuts are read from the tar's whole local copy (:class:`~wenet_lhotse.formats.tar_spool.
TarSpool`: fetched once per node, in 8 MiB requests); when a new window appears, its
tars and the next window's are fetched in the background, and the copies of older
windows are removed. The first batch a process reads (the start of training or of a
resume) does not wait for whole tars: its members are read by their exact ranges while
the copies are fetched. A cut of
an older window (one that waited long in its bucket: the carried pool) is read from a
copy still there, else from the tar itself by the member's exact byte range, never by
fetching its whole tar (or a 4 MiB block of it) again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Dict, List, Tuple

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.tar_spool import TarSpool, window_tars
from wenet_lhotse.io.policy import ReadPolicy

#: Windows whose tars are kept: the two before and the current (the next is fetched ahead;
#: disk per node: about 4 windows).
KEEP = 3


class WindowReads:
    """Picks the local copy or the tar's URL for each group of cuts (see module doc)."""

    def __init__(self, policy: ReadPolicy) -> None:
        self.spool = TarSpool(policy)
        self._windows: OrderedDict[Tuple[int, int], List[str]] = OrderedDict()
        self._lock = threading.Lock()
        self.started = False  # set by the reader once its first batch is read

    def _see(self, custom: Dict[str, Any]) -> Tuple[int, int]:
        window, tars, nxt = window_tars(custom)
        with self._lock:
            if window in self._windows or (self._windows and window < next(
                    reversed(self._windows))):
                return window
            self._windows[window] = [u for u, _ in tars] + [u for u, _ in nxt]
            old: List[str] = []
            while len(self._windows) > KEEP:
                old += self._windows.popitem(last=False)[1]
            keep = {u for urls in self._windows.values() for u in urls}
            self.spool.evict(u for u in old if u not in keep)
        self.spool.prefetch(tars + nxt)
        return window

    def source(self, url: str, cuts: List[Any]) -> str:
        """The path to read ``cuts`` (all of tar ``url``) from: a local copy or ``url``."""
        custom = cuts[0].custom
        if "shard_window" not in custom:  # restored from a checkpoint: as without windows
            return self.spool.local(url) or url
        window = self._see(custom)
        newest = next(reversed(self._windows)) if self._windows else window
        local = self.spool.local(url)
        if local is not None or window < newest:
            return local or url
        nbytes = next((int(b) for u, b in custom.get("shard_tars") or [] if u == url), None)
        if nbytes is None:
            return url
        if not self.started:  # the first batch of a start or resume: never wait
            self.spool.prefetch([[url, nbytes]])
            return url
        try:  # fetched ahead as a rule: a wait here is the network falling behind
            return self.spool.fetch(url, nbytes)
        except (WenetDataError, OSError):
            return url  # read by member: the errors are met (and named) there
