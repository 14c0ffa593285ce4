"""Whole remote tars fetched once into a local spool directory shared by the processes
of a node (DataLoader workers, DDP ranks): :class:`TarSpool`, used by the audio reader
of the window order (:mod:`wenet_lhotse.sources.window_order`).

A tar is fetched front to back in ranged requests of 8 MiB (through the retrying
readers of :mod:`~wenet_lhotse.io.remote` / :mod:`~wenet_lhotse.io.http_reader`,
which resume a cut connection where it stopped) into a temporary file, then renamed
into place; a claim file (``O_EXCL``, holding the fetcher's pid) makes the other
processes wait for that fetch instead of starting their own, and a claim left by a
dead process is taken over. Members are then read from the local copy with the same
header checks as any indexed read (:func:`~.member_reads.read_members`).

Memory per process: one 8 MiB piece in flight per fetching thread (two threads ahead).
Disk per node: the tars of the windows kept (two before the current one, the current
and the next: about ``4 x read_window_mb``); the caller evicts the older ones
(:meth:`TarSpool.evict`).
The directory is ``$WENET_LHOTSE_SPOOL``, default ``<tmp>/wenet-lhotse-spool-<uid>``;
the copies of the last windows stay there when training ends (remove it to reclaim).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, List, Optional, Sequence, Tuple

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.tempfiles import process_running

logger = logging.getLogger(__name__)

#: Bytes read from the network per piece while fetching a tar.
PIECE = 8 << 20
#: Seconds between looks at another process's fetch.
POLL = 0.02


def spool_dir() -> str:
    return os.environ.get("WENET_LHOTSE_SPOOL") or os.path.join(
        tempfile.gettempdir(), f"wenet-lhotse-spool-{os.getuid()}")


class TarSpool:
    """Remote tars as local files (see the module doc); thread-safe, one per process."""

    def __init__(self, policy: Optional[ReadPolicy] = None,
                 directory: Optional[str] = None) -> None:
        self.policy = policy if policy is not None else ReadPolicy()
        self.dir = directory or spool_dir()
        os.makedirs(self.dir, exist_ok=True)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._asked: set = set()  # urls handed to the pool (each fetched once)
        self.fetched = 0  # bytes this process fetched

    def path(self, url: str) -> str:
        return os.path.join(self.dir, hashlib.sha1(url.encode("utf-8")).hexdigest()[:24]
                            + ".tar")

    def local(self, url: str) -> Optional[str]:
        """The local copy of ``url`` when it is complete, else None."""
        p = self.path(url)
        return p if os.path.exists(p) else None

    def fetch(self, url: str, nbytes: int) -> str:
        """The local copy of ``url`` (``nbytes`` long), fetched now or by another
        process; raises :class:`WenetDataError` when the tar cannot be read."""
        final = self.path(url)
        claim = final + ".claim"
        while True:
            if os.path.exists(final):
                return final
            try:
                fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not _claim_alive(claim):
                    _remove(claim)  # its fetcher died: take it over
                    continue
                time.sleep(POLL)
                continue
            try:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                if not os.path.exists(final):
                    self._download(url, nbytes, final)
                return final
            finally:
                _remove(claim)

    def _download(self, url: str, nbytes: int, final: str) -> None:
        from wenet_lhotse.formats.member_reads import _ranged_reader

        tmp = f"{final}.{os.getpid()}.part"
        reader = _ranged_reader(url, 0, min(nbytes, PIECE), self.policy)  # 8 MiB requests
        try:
            with open(tmp, "wb") as f:
                left = nbytes
                while left > 0:
                    piece = reader.read(min(PIECE, left))
                    if not piece:
                        break
                    f.write(piece)
                    left -= len(piece)
                    self.fetched += len(piece)
            os.replace(tmp, final)  # short (a tar cut since indexing): member checks name it
        finally:
            reader.close()
            _remove(tmp)

    def prefetch(self, tars: Iterable[Sequence]) -> None:
        """Fetch ``[url, bytes]`` items in the background, in order (errors are left
        for the read that needs the tar to meet and report)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(2, thread_name_prefix="tar-spool")
        for url, nbytes in tars:
            if url not in self._asked and not os.path.exists(self.path(url)):
                self._asked.add(url)
                self._pool.submit(self._quiet_fetch, url, int(nbytes))

    def _quiet_fetch(self, url: str, nbytes: int) -> None:
        try:
            self.fetch(url, nbytes)
        except (WenetDataError, OSError) as err:
            self._asked.discard(url)  # a later cut asks again
            logger.debug("prefetch of %s failed: %s", url, err)

    def evict(self, urls: Iterable[str]) -> None:
        """Remove the local copies of ``urls`` (readers holding one open keep it)."""
        for url in urls:
            self._asked.discard(url)
            _remove(self.path(url))


def _claim_alive(claim: str) -> bool:
    try:
        with open(claim) as f:
            pid = int(f.read() or 0)
        if pid == 0:  # created, pid not written yet (or its writer died right then)
            return time.time() - os.path.getmtime(claim) < 60
    except (OSError, ValueError):
        return True  # being written: give it time
    return pid == os.getpid() or process_running(pid)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def window_tars(custom: dict) -> Tuple[Tuple[int, int], List[list], List[list]]:
    """``(window, its tars, the next window's tars)`` from an indexed cut's custom."""
    epoch, w = custom["shard_window"]
    return (int(epoch), int(w)), custom.get("shard_tars") or [], custom.get("shard_next") or []
