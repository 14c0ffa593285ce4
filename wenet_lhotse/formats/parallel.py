"""One bounded submit loop for process (or thread) pools over a streamed input."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Callable, Deque, Iterable, Iterator, Tuple, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_bounded(fn: Callable[[T], R], items: Iterable[T], num_workers: int, *,
                executor: str = "process") -> Iterator[Tuple[T, R]]:
    """``(item, fn(item))`` for each item, in input order, computed by ``num_workers``
    processes (``executor="process"``) or threads (``"thread"``); 0 or 1 runs ``fn``
    in the calling thread. At most ``2 * num_workers`` items are in flight, so a
    streamed input is never loaded whole. ``fn`` and the items must pickle for
    processes. Leaving the loop early cancels what was not started."""
    if num_workers <= 1:
        for item in items:
            yield item, fn(item)
        return
    pool_cls = ProcessPoolExecutor if executor == "process" else ThreadPoolExecutor
    pool = pool_cls(num_workers)
    queue: Deque[Tuple[Future, T]] = deque()
    try:
        for item in items:
            queue.append((pool.submit(fn, item), item))
            if len(queue) >= 2 * num_workers:
                fut, done = queue.popleft()
                yield done, fut.result()
        while queue:
            fut, done = queue.popleft()
            yield done, fut.result()
    finally:
        for fut, _ in queue:
            fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
