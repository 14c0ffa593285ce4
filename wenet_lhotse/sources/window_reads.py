"""Where the audio reader (a DataLoader worker, or the training process without workers)
reads a remote tar under the window order (:mod:`.window_order`): :class:`WindowReads`,
one per process.

What is fetched and kept is decided by the sampling process
(:mod:`.window_keeper`); this side only reads:

* the tar's local copy when it is there
  (:class:`~wenet_lhotse.formats.tar_spool.TarSpool`);
* else, while a live process holds the tar (its copy is coming), the copy once it has
  come, except for the first batch that the loader's first batch comes from (the
  training process without workers, or DataLoader worker 0: the start of training or
  of a resume): its members are read by their own byte ranges, no wait for whole tars.
  The other workers' first batches wait for the copies like any later batch: their
  range reads would compete with the window's fetch for the same connection and
  server (on moto each range request costs the server a read of the whole object),
  and the batches after the first need the whole window anyway;
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
        from torch.utils.data import get_worker_info

        self.spool = TarSpool(policy)
        worker = get_worker_info()
        # set by the reader once its first batch is read; the loader's first batch is
        # read by worker 0 (or the training process): the others wait from the start
        self.started = worker is not None and worker.id != 0

    def source(self, url: str, cuts: List[Any]) -> str:
        """The path to read ``cuts`` (all of tar ``url``) from: a local copy or ``url``."""
        local = self.spool.local(url)
        if local is not None or not self.started:
            return local or url
        return self.spool.wait(url) or url
