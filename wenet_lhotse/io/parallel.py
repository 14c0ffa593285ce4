"""One bounded submit loop for process (or thread) pools, or any
``concurrent.futures.Executor`` (e.g. a Dask client's), over a streamed input.

Its process pool is the package's one pool, :class:`~wenet_lhotse.io.pool.ProcessPool`,
whose workers end with their parent (see :mod:`wenet_lhotse.io.pool`). When the loop is
left by an exception (a strict error, ``KeyboardInterrupt``, ``SystemExit`` from a
``SIGTERM`` handler such as the CLI's), running workers of our own pool are sent
``SIGTERM`` instead of being waited for: they remove their temporary files and exit.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ThreadPoolExecutor,
    wait,
)
from typing import Callable, Deque, Dict, Iterable, Iterator, Optional, Tuple, TypeVar, Union

from wenet_lhotse.io.pool import ProcessPool

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: Seconds between looks at the slots there are while waiting, when they may change.
POLL_S = 1.0


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
        pool: Executor = (ProcessPool(slots()) if executor == "process"
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
        while queue:  # the rest; a callable ``num_workers`` is asked while waiting (a
            # cluster's check may raise: its scheduler went away)
            if wait([queue[0][0]], timeout=poll).done:
                fut, done = queue.popleft()
                yield done, fut.result()
            else:
                slots()
        while pending:
            yield from _completed(pending, poll)
            if pending:
                slots()
        failed = False
    finally:
        for fut in [f for f, _ in queue] + list(pending):
            fut.cancel()
        if own:
            if failed and isinstance(pool, ProcessPool):
                pool.terminate()
            pool.shutdown(wait=True, cancel_futures=True)


def _completed(pending: Dict[Future, T], timeout: Optional[float]) -> Iterator[Tuple[T, R]]:
    """The items of ``pending`` that finish first (none if ``timeout`` seconds pass)."""
    finished, _ = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
    for fut in finished:
        yield pending.pop(fut), fut.result()
