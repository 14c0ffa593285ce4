"""Where the audio reader (a DataLoader worker, or the training process without workers)
reads a remote tar under the window order (:mod:`.window_order`): :class:`WindowReads`,
one per process.

What is fetched and kept is decided by the sampling process
(:mod:`.window_keeper`); this side only reads:

* the tar's local copy when it is there
  (:class:`~wenet_lhotse.formats.tar_spool.TarSpool`);
* else, while a live process holds the tar (its copy is coming), the copy once it has
  come, except for the first batch a process reads (the start of training or of a
  resume: its members are read by their own byte ranges, no wait for whole tars);
* else (a copy let go over the keeper's budget, or a cut restored from a checkpoint
  after its copy went) the members' own byte ranges, never the whole tar again.
"""

from __future__ import annotations

from typing import Any, List

from wenet_lhotse.formats.tar_spool import TarSpool
from wenet_lhotse.io.policy import ReadPolicy


class WindowReads:
    """Picks the local copy or the tar's URL for each group of cuts (see module doc)."""

    def __init__(self, policy: ReadPolicy) -> None:
        self.spool = TarSpool(policy)
        self.started = False  # set by the reader once its first batch is read

    def source(self, url: str, cuts: List[Any]) -> str:
        """The path to read ``cuts`` (all of tar ``url``) from: a local copy or ``url``."""
        local = self.spool.local(url)
        if local is not None or not self.started:
            return local or url
        return self.spool.wait(url) or url
