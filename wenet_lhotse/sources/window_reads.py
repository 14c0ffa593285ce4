"""Where the audio reader (a DataLoader worker, or the training process without workers)
reads a remote tar under the window order (:mod:`.window_order`): :class:`WindowReads`,
one per process.

What is fetched and kept is decided by the sampling process
(:mod:`.window_keeper`); this side only reads:

* the tar's local copy when it is there
  (:class:`~wenet_lhotse.formats.tar_spool.TarSpool`);
* else, while a live process holds the tar (its copy is coming), the copy once it has
  come. The first batch too (the start of training or of a resume) waits for the
  first window's copies, which the keeper fetches before anything else: reading its
  members by their own byte ranges meanwhile (as this module did before) competed
  with that fetch for the same connections and server and did not bring the first
  batch sooner in ``bench/s3_window.py`` (on moto each range request also costs the
  server a read of the whole object), and every later batch needs the whole window
  anyway;
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

    def source(self, url: str, cuts: List[Any]) -> str:
        """The path to read ``cuts`` (all of tar ``url``) from: a local copy or ``url``."""
        return self.spool.local(url) or self.spool.wait(url) or url
