"""One bounded submit loop for process (or thread) pools, or any
``concurrent.futures.Executor`` (e.g. a Dask client's), over a streamed input."""

from __future__ import annotations

from collections import deque
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from typing import Callable, Deque, Dict, Iterable, Iterator, Tuple, TypeVar, Union

T = TypeVar("T")
R = TypeVar("R")


def map_bounded(fn: Callable[[T], R], items: Iterable[T], num_workers: int, *,
                executor: Union[str, Executor] = "process",
                ordered: bool = True) -> Iterator[Tuple[T, R]]:
    """``(item, fn(item))`` for each item, computed by ``num_workers`` processes
    (``executor="process"``) or threads (``"thread"``), or on a given ``Executor``
    with ``num_workers`` slots (left running); 0 or 1 without an Executor runs ``fn``
    in the calling thread. At most ``2 * num_workers`` items are in flight, so a
    streamed input is never loaded whole. ``fn`` and the items must pickle for
    processes. Results come in input order, or with ``ordered=False`` as they
    complete (a progress bar then follows the work). A failed item raises here;
    leaving the loop early cancels what was not started."""
    own = not isinstance(executor, Executor)
    if own and num_workers <= 1:
        for item in items:
            yield item, fn(item)
        return
    if own:
        pool_cls = ProcessPoolExecutor if executor == "process" else ThreadPoolExecutor
        pool: Executor = pool_cls(num_workers)
    else:
        pool = executor
    window = 2 * max(1, num_workers)
    queue: Deque[Tuple[Future, T]] = deque()
    pending: Dict[Future, T] = {}
    try:
        for item in items:
            fut = pool.submit(fn, item)
            if ordered:
                queue.append((fut, item))
                if len(queue) >= window:
                    fut, done = queue.popleft()
                    yield done, fut.result()
            else:
                pending[fut] = item
                while len(pending) >= window:
                    yield from _completed(pending)
        while queue:
            fut, done = queue.popleft()
            yield done, fut.result()
        while pending:
            yield from _completed(pending)
    finally:
        for fut in [f for f, _ in queue] + list(pending):
            fut.cancel()
        if own:
            pool.shutdown(wait=True, cancel_futures=True)


def _completed(pending: Dict[Future, T]) -> Iterator[Tuple[T, R]]:
    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
    for fut in finished:
        yield pending.pop(fut), fut.result()
