"""Whole remote tars fetched once into a local spool directory shared by the processes
of a node (DDP ranks, DataLoader workers): :class:`TarSpool`, used by the window order
(:mod:`wenet_lhotse.sources.window_keeper` decides what is fetched and kept, in the
sampling process; :mod:`wenet_lhotse.sources.window_reads` reads, in the workers).

Tars are fetched in the order asked (:meth:`TarSpool.prefetch`: the window being read
before the next one), several at once: each tar is cut into spans (2 for a tar of up to
2 x :data:`PIECE`, else one per piece, at most :data:`STREAMS`), each span read front to
back in ranged requests of up to :data:`PIECE` (object storage: one GET of exactly each
piece, :class:`~wenet_lhotse.io.remote.RangeGetReader`, no HEAD and no read-ahead copy;
HTTP: :mod:`~wenet_lhotse.io.http_reader`; both retry and resume a cut connection where
it stopped) into a temporary file at its offsets, then renamed into
place. At most :data:`STREAMS` spans are read at once per process, the earliest asked
first: a span of a later tar (of the next window) starts only when no span of an earlier
one is waiting, so the window being read keeps the lead, and the next window's tars
start as the current one's last spans run instead of after them (one tar at a time,
as before, left the connections idle between tars and was the slower reader with 2
DataLoader workers in ``bench/s3_window.py``). Tars asked ``first`` (the window a first
batch waits for) go alone: nothing else starts until they are read. A claim file
(``O_EXCL``, holding the fetcher's pid) makes the other processes wait for that fetch
instead of starting their own, and a claim left by a dead process is taken over.
Members are then read from the local copy with the same header checks as any indexed
read (:func:`~.member_reads.read_members`).

A copy lives while a process *holds* it (a file ``<copy>.hold.<pid>-<spool>``): the sampling
process of each rank holds the tars whose cuts it may still emit; the last
:meth:`TarSpool.release` (or one finding only dead holders) removes the copy. A reader
that finds no copy waits while a live hold says one is coming (:meth:`TarSpool.wait`),
else reads the member's own byte range: a tar is never fetched twice for a reader. A
copy whose window has passed is cut down to the members still waiting to be read
(:meth:`TarSpool.trim`: a sparse file, the members at their offsets).

Memory per process: at most :data:`STREAMS` pieces of up to 32 MiB in flight (128 MiB),
about twice that while a piece is copied out of fsspec's buffer; threads: up to
:data:`TARS` tars claimed at once (their spans waiting for a turn hold no buffer).
The directory is ``$WENET_LHOTSE_SPOOL``, default ``<tmp>/wenet-lhotse-spool-<uid>``.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import heapq
import itertools
import logging
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Sequence, Tuple

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.tempfiles import process_running

logger = logging.getLogger(__name__)

#: Bytes asked for per request while fetching a tar: large, because each request costs
#: a round trip (and on moto a read of the whole object), small enough to bound memory.
PIECE = 32 << 20
#: Spans read at once by a process, over all the tars it fetches (each holds one piece
#: in memory while it is read).
STREAMS = 4
#: Tars a process fetches at once at most (claimed, their spans waiting their turn).
TARS = 4
#: Bytes below which a tar is not split into spans.
MIN_SPAN = 1 << 20
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
        self._pool: Optional[ThreadPoolExecutor] = None  # fetches, up to TARS at once
        self._chores: Optional[ThreadPoolExecutor] = None  # trims (not behind fetches)
        self._count = threading.Lock()
        self._asked: set = set()  # urls handed to the pool (each fetched once)
        self._asks = itertools.count()  # the order tars are asked in (their spans' turns)
        self._turns = _Turns(STREAMS)
        self.fetched = 0  # bytes this process fetched

    def path(self, url: str) -> str:
        return os.path.join(self.dir, hashlib.sha1(url.encode("utf-8")).hexdigest()[:24]
                            + ".tar")

    def local(self, url: str) -> Optional[str]:
        """The local copy of ``url`` when it is complete, else None."""
        p = self.path(url)
        return p if os.path.exists(p) else None

    def fetch(self, url: str, nbytes: int, ask: Optional[int] = None) -> str:
        """The local copy of ``url`` (``nbytes`` long), fetched now or by another
        process; raises :class:`WenetDataError` when the tar cannot be read. ``ask``:
        its place in the order of fetches (:meth:`prefetch`; default: after those
        asked so far)."""
        ask = next(self._asks) if ask is None else ask
        final = self.path(url)
        claim = final + ".claim"
        try:
            while True:
                if os.path.exists(final):
                    return final
                try:
                    fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    if not _claim_alive(claim):
                        _remove(claim)  # its fetcher died: take it over
                        continue
                    # another process fetches it: later tars go on (not past a first
                    # window: it comes alone to the node)
                    self._turns.elsewhere(ask)
                    time.sleep(POLL)
                    continue
                try:
                    os.write(fd, str(os.getpid()).encode())
                    os.close(fd)
                    if not os.path.exists(final):
                        self._download(url, nbytes, final, ask)
                    return final
                finally:
                    _remove(claim)
        finally:
            self._turns.drop(ask)

    def _download(self, url: str, nbytes: int, final: str, ask: int) -> None:
        tmp = f"{final}.{os.getpid()}.part"
        step = -(-nbytes // max(1, spans_of(nbytes)))  # ceil(n / spans)
        spans = [(s, min(step, nbytes - s)) for s in range(0, nbytes, max(1, step))]
        try:
            with open(tmp, "wb") as f:
                f.truncate(nbytes)
            fd = os.open(tmp, os.O_WRONLY)
            keys = [(ask, i) for i in range(len(spans))]
            try:
                self._turns.begin(keys)
                if len(spans) <= 1:  # none: a tar with no indexed bytes, nothing to ask
                    got = [self._span(url, fd, *sp, key=k) for sp, k in zip(spans, keys)]
                else:
                    with ThreadPoolExecutor(len(spans), thread_name_prefix="tar-span") as p:
                        got = list(p.map(lambda a: self._span(url, fd, *a[0], key=a[1]),
                                         zip(spans, keys)))
            finally:
                self._turns.forget(keys)  # those not taken (an error before their turn)
                os.close(fd)
            for (start, n), k in zip(spans, got):
                if k < n:  # cut short (a tar cut since indexing): member checks name it
                    os.truncate(tmp, start + k)
                    break
            with self._locked():
                os.replace(tmp, final)
                if not self._holders(url):  # released while it came: nobody will read it
                    _remove(final)
        finally:
            _remove(tmp)

    def _span(self, url: str, fd: int, start: int, length: int, key: Tuple[int, int]) -> int:
        """Bytes ``[start, start + length)`` of ``url`` written at their offset in
        ``fd`` once the span's turn ``key`` comes; the bytes read (fewer when the
        object ends first)."""
        with self._turns.turn(key):
            return self._read_span(url, fd, start, length)

    def _read_span(self, url: str, fd: int, start: int, length: int) -> int:
        from wenet_lhotse.formats.member_reads import _ranged_reader

        # one request per piece (the span in equal pieces of at most PIECE: the last
        # ends at the span's end)
        piece_len = -(-length // -(-length // PIECE))
        reader = _ranged_reader(url, start, piece_len, self.policy)
        done = 0
        try:
            while done < length:
                piece = reader.read(min(piece_len, length - done))
                if not piece:
                    break
                os.pwrite(fd, piece, start + done)
                done += len(piece)
                with self._count:
                    self.fetched += len(piece)
        finally:
            reader.close()
        return done

    def prefetch(self, tars: Iterable[Sequence], first: bool = False) -> None:
        """Fetch ``[url, bytes]`` items in the background, several at once, the spans
        of those asked first (across calls) first (see the module doc), each once until
        it is released (errors are left for the read that needs the tar to meet and
        report). ``first``: these go alone, no later tar starting before they are read
        (the window a first batch waits for)."""
        for url, nbytes in tars:
            if url not in self._asked and not os.path.exists(self.path(url)):
                self._asked.add(url)
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(TARS, thread_name_prefix="tar-spool")
                ask = next(self._asks)
                self._turns.expect(ask, first)
                self._pool.submit(self._quiet_fetch, url, int(nbytes), ask)

    def in_background(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the spool's own thread for local work (not queued
        behind the fetches)."""
        if self._chores is None:
            self._chores = ThreadPoolExecutor(1, thread_name_prefix="tar-spool-trim")
        self._chores.submit(fn, *args)

    def _quiet_fetch(self, url: str, nbytes: int, ask: int) -> None:
        if url not in self._asked:  # released before its turn came
            self._turns.drop(ask)
            return
        try:
            self.fetch(url, nbytes, ask)
        except (WenetDataError, OSError) as err:
            # no copy will come: readers read the members' ranges and meet (and name) it
            self.release(url)
            logger.debug("prefetch of %s failed: %s", url, err)
        except Exception:  # a fault of ours: readers must not wait for a copy that won't come
            self.release(url)
            logger.warning("prefetch of %s failed; its members are read by range", url,
                           exc_info=True)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The spool's lock (holds and removals of all processes of the node)."""
        with open(os.path.join(self.dir, ".lock"), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _holders(self, url: str) -> list:
        """Hold files of ``url`` whose process is alive (dead ones are removed)."""
        alive = []
        for h in glob.glob(glob.escape(self.path(url)) + ".hold.*"):
            pid = h.rsplit(".", 1)[1].split("-")[0]
            if pid.isdigit() and process_running(int(pid)):
                alive.append(h)
            else:
                _remove(h)
        return alive

    def _hold_file(self, url: str) -> str:  # one per TarSpool (a process may have several)
        return f"{self.path(url)}.hold.{os.getpid()}-{id(self):x}"

    def hold(self, url: str) -> None:
        """This process needs ``url``'s copy (to fetch or read) until :meth:`release`."""
        with self._locked():
            with open(self._hold_file(url), "a"):
                pass

    def held(self, url: str) -> bool:
        """Does a live process hold ``url`` (so that its copy is or will be here)?"""
        return bool(self._holders(url))

    def release(self, url: str) -> None:
        """Drop this process's hold on ``url``; the copy goes with the last hold
        (readers holding it open keep it)."""
        self._asked.discard(url)
        with self._locked():
            _remove(self._hold_file(url))
            if not self._holders(url):
                _remove(self.path(url))

    def trim(self, url: str, ranges: Iterable[Tuple[int, int]]) -> Optional[int]:
        """Keep only ``(start, length)`` byte ranges of ``url``'s copy, at their offsets
        (a sparse file: the rest reads as zeros, which no member header check passes);
        the bytes kept, or None when there is no complete copy (yet)."""
        final = self.path(url)
        tmp = f"{final}.{os.getpid()}-{id(self):x}.trim"
        kept = 0
        try:
            with open(final, "rb") as src, open(tmp, "wb") as dst:
                for start, n in sorted(ranges):
                    src.seek(start)
                    dst.seek(start)
                    kept += dst.write(src.read(n))
                dst.truncate(os.fstat(src.fileno()).st_size)
            with self._locked():  # a reader with the whole copy open keeps it
                if not os.path.exists(self._hold_file(url)):  # let go meanwhile
                    return None
                os.replace(tmp, final)
        except FileNotFoundError:
            return None
        finally:
            _remove(tmp)
        return kept

    def wait(self, url: str) -> Optional[str]:
        """The copy of ``url`` once it is here, or None when no live process holds it
        (it will not come: read the members' own ranges)."""
        final = self.path(url)
        while True:
            if os.path.exists(final):
                return final
            if not self.held(url):
                return final if os.path.exists(final) else None
            time.sleep(POLL)


def spans_of(nbytes: int) -> int:
    """Spans a tar of ``nbytes`` is fetched in: 2 up to 2 pieces (one piece when under
    2 x :data:`MIN_SPAN`), else one per piece, at most :data:`STREAMS`."""
    return min(STREAMS, max(min(2, nbytes // MIN_SPAN), -(-nbytes // PIECE)))


class _Turns:
    """At most ``n`` spans read at once. Turns go in key order ``(ask, span)``: a span
    waits while a span with a smaller key waits, or while a tar asked earlier
    (:meth:`expect`) has neither begun its spans nor been dropped, so the tars asked
    first come first whichever thread gets to them first. Tars expected ``first`` (the
    window a first batch waits for) go alone: no span of a tar asked after them starts
    until theirs are read (here or, :meth:`elsewhere`, by another process)."""

    def __init__(self, n: int) -> None:
        self.free = n
        self.cv = threading.Condition()
        self.waiting: list = []  # heap of the keys of spans not yet read
        self.pending: set = set()  # asks expected, their spans not begun
        self.first: set = set()  # asks the others wait for, until read or dropped
        self.left: Dict[int, int] = {}  # ask -> its spans waiting or being read

    def expect(self, ask: int, first: bool = False) -> None:
        with self.cv:
            self.pending.add(ask)
            if first:
                self.first.add(ask)

    def _settle(self, ask: int) -> None:
        if ask not in self.pending and not self.left.get(ask):
            self.left.pop(ask, None)
            self.first.discard(ask)
        self.cv.notify_all()

    def elsewhere(self, ask: int) -> None:
        """``ask`` is being fetched by another process: not pending here (a first
        window's ask still holds the others back until :meth:`drop`)."""
        with self.cv:
            self.pending.discard(ask)
            self.cv.notify_all()

    def drop(self, ask: int) -> None:
        """``ask`` has no spans to read here (done, fetched elsewhere or failed)."""
        with self.cv:
            self.pending.discard(ask)
            self._settle(ask)

    def begin(self, keys: Sequence[Tuple[int, int]]) -> None:
        """The spans ``keys`` of one ask wait for their turns, all at once."""
        with self.cv:
            for k in keys:
                self.pending.discard(k[0])
                self.left[k[0]] = self.left.get(k[0], 0) + 1
                heapq.heappush(self.waiting, k)
            self.cv.notify_all()

    def forget(self, keys: Sequence[Tuple[int, int]]) -> None:
        """Spans ``keys`` that did not take their turn (an error came first)."""
        with self.cv:
            gone = [k for k in self.waiting if k in set(keys)]
            if gone:
                self.waiting = [k for k in self.waiting if k not in set(keys)]
                heapq.heapify(self.waiting)
                for k in gone:
                    self.left[k[0]] -= 1
                    self._settle(k[0])

    def _next(self, key: Tuple[int, int]) -> bool:
        return (self.free > 0 and bool(self.waiting) and self.waiting[0] == key
                and not any(a < key[0] for a in self.pending)
                # a first window holds back the asks after it (not those before it:
                # their jobs may hold the threads it needs)
                and (not self.first or key[0] <= max(self.first)))

    @contextmanager
    def turn(self, key: Tuple[int, int]) -> Iterator[None]:
        with self.cv:
            while not self._next(key):
                self.cv.wait()
            heapq.heappop(self.waiting)
            self.free -= 1
            self.cv.notify_all()
        try:
            yield
        finally:
            with self.cv:
                self.free += 1
                self.left[key[0]] -= 1
                self._settle(key[0])


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
