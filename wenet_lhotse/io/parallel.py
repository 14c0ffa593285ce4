"""One bounded submit loop for process (or thread) pools, or any
``concurrent.futures.Executor`` (e.g. a Dask client's), over a streamed input, with
pool workers that end with their parent.

A worker process of our own pool never outlives the process that started it: it asks
the kernel for ``SIGTERM`` when its parent dies (Linux ``PR_SET_PDEATHSIG``) and a
watchdog thread checks ``os.getppid()`` every second (any POSIX system). On
``SIGTERM`` a worker raises ``SystemExit`` in its job, so the job's ``finally``/
``except`` blocks remove its temporary files, and exits (forced after
:data:`GRACE_S` seconds). When the loop is left by an exception (a strict error,
``KeyboardInterrupt``, ``SystemExit`` from a ``SIGTERM`` handler such as the CLI's),
running workers of our own pool are sent ``SIGTERM`` instead of being waited for.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import threading
import time
from collections import deque
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from typing import Callable, Deque, Dict, Iterable, Iterator, Optional, Tuple, TypeVar, Union

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: Seconds between looks at the slots there are while waiting, when they may change.
POLL_S = 1.0
#: Seconds a worker whose parent died has to clean up before it is ended by force.
GRACE_S = 10.0
_PR_SET_PDEATHSIG = 1


_starting = True  # in a worker: still in worker_init


def _exit_on_sigterm(signum, frame) -> None:
    if _starting:  # nothing to clean up yet; SystemExit here would print a traceback
        os._exit(128 + signum)
    raise SystemExit(128 + signum)


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)  # clean up through the handler...
    time.sleep(GRACE_S)
    os._exit(128 + signal.SIGTERM)  # ...or go anyway (a job may have swallowed it)


def worker_init(parent: int) -> None:
    """Pool-worker initializer: end with ``parent`` (see the module doc)."""
    global _starting
    _starting = True
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the watchdog alone
        pass
    if os.getppid() != parent:  # died before we could ask
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True,
                     name="parent-watchdog").start()
    _starting = False


def _terminate_workers(pool: ProcessPoolExecutor) -> None:
    for proc in list(getattr(pool, "_processes", {}).values()):
        if proc.is_alive():
            try:
                proc.terminate()  # SIGTERM: the worker cleans up and exits
            except OSError:
                pass


def process_pool(num_workers: int) -> ProcessPoolExecutor:
    """A ``ProcessPoolExecutor`` whose workers end with this process."""
    return ProcessPoolExecutor(num_workers, initializer=worker_init, initargs=(os.getpid(),))


def map_bounded(fn: Callable[[T], R], items: Iterable[T],
                num_workers: Union[int, Callable[[], int]], *,
                executor: Union[str, Executor] = "process",
                ordered: bool = True) -> Iterator[Tuple[T, R]]:
    """``(item, fn(item))`` for each item, computed by ``num_workers`` processes
    (``executor="process"``) or threads (``"thread"``), or on a given ``Executor``
    with ``num_workers`` slots (left running); 0 or 1 without an Executor runs ``fn``
    in the calling thread. At most ``2 * num_workers`` items are in flight, so a
    streamed input is never loaded whole. ``num_workers`` may be a function (for an
    Executor whose workers come and go, e.g. a Dask cluster that grows): it is called
    again before each submission and at least every :data:`POLL_S` seconds while the
    loop waits, so the items in flight follow the slots there are now. ``fn`` and the
    items must pickle for processes. Results come in input order, or with
    ``ordered=False`` as they complete (a progress bar then follows the work). A failed
    item raises here; leaving the loop early cancels what was not started; leaving it by
    an exception also ends the running workers of our own process pool (they remove
    their temporary files)."""
    own = not isinstance(executor, Executor)
    slots: Callable[[], int] = (num_workers if callable(num_workers)
                                else (lambda: num_workers))  # type: ignore[assignment]
    poll = POLL_S if callable(num_workers) else None
    if own and slots() <= 1:
        for item in items:
            yield item, fn(item)
        return
    if own:
        pool: Executor = (process_pool(slots()) if executor == "process"
                          else ThreadPoolExecutor(slots()))
    else:
        pool = executor

    def full(in_flight: int) -> bool:
        return in_flight >= 2 * max(1, slots())

    queue: Deque[Tuple[Future, T]] = deque()
    pending: Dict[Future, T] = {}
    failed = True
    try:
        for item in items:
            fut = pool.submit(fn, item)
            if ordered:
                queue.append((fut, item))
                while queue and full(len(queue)):
                    if wait([queue[0][0]], timeout=poll).done:
                        fut, done = queue.popleft()
                        yield done, fut.result()
            else:
                pending[fut] = item
                while pending and full(len(pending)):
                    yield from _completed(pending, poll)
        while queue:
            fut, done = queue.popleft()
            yield done, fut.result()
        while pending:
            yield from _completed(pending, None)
        failed = False
    finally:
        for fut in [f for f, _ in queue] + list(pending):
            fut.cancel()
        if own:
            if failed and isinstance(pool, ProcessPoolExecutor):
                _terminate_workers(pool)
            pool.shutdown(wait=True, cancel_futures=True)


def _completed(pending: Dict[Future, T], timeout: Optional[float]) -> Iterator[Tuple[T, R]]:
    """The items of ``pending`` that finish first (none if ``timeout`` seconds pass)."""
    finished, _ = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
    for fut in finished:
        yield pending.pop(fut), fut.result()
