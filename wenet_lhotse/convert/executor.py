"""Where conversion tasks run: inline, a local process pool, or a Dask cluster; and
the one bounded submit loop every converter uses.

:func:`open_executor` gives a ``concurrent.futures.Executor`` (or None: run inline):

* ``cluster=None``: a local ``ProcessPoolExecutor(num_jobs)`` (the default);
* ``cluster="tcp://HOST:PORT"``: the executor of a Dask ``Client`` connected to a
  running scheduler (``client.get_executor()``, the interface Lhotse's own
  ``executor=`` arguments accept). The workers may be anywhere -- SLURM jobs through
  dask-jobqueue, Kubernetes pods -- as long as they run the same wenet-lhotse and
  see the same input and output paths (a shared filesystem or object storage).

Dask re-runs a task whose worker died on another worker, so tasks must be pure
(the same job gives the same output) and write their output atomically; the
converters' tasks are (one input shard or list chunk -> one output file set,
written under a temporary name and renamed). The client, not a task, writes any
final index or manifest, once.

:func:`bounded_map` submits jobs from a (possibly huge, lazily read) iterable
keeping at most ``window`` in flight, so memory stays bounded however big the
input is, and yields results in input order or as they complete.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from typing import Callable, Deque, Dict, Iterable, Iterator, Optional, Tuple, TypeVar

logger = logging.getLogger(__name__)

J = TypeVar("J")
R = TypeVar("R")


class ClusterError(RuntimeError):
    """The Dask scheduler cannot be reached or Dask is not installed (one line)."""


def _dask_client(address: str, timeout: float):
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError("--cluster needs Dask: pip install 'wenet-lhotse[cluster]'") from None
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as err:
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: "
                           f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
                           ) from None


def cluster_slots(executor: Executor) -> int:
    """Threads across the cluster's workers (1 when it has none yet)."""
    client = getattr(executor, "_client", None)
    if client is None:
        return getattr(executor, "_max_workers", 1)
    return max(1, sum(client.nthreads().values()))


@contextmanager
def open_executor(
    num_jobs: int = 1, cluster: Optional[str] = None, timeout: float = 30.0
) -> Iterator[Optional[Executor]]:
    """An executor for conversion tasks; None means run them inline.

    :param num_jobs: local worker processes (ignored with ``cluster``).
    :param cluster: a Dask scheduler address (``tcp://host:8786``).
    :param timeout: seconds to wait for the scheduler.
    """
    if cluster:
        client = _dask_client(cluster, timeout)
        logger.info("Dask cluster %s: %d workers, %d threads", cluster,
                    len(client.nthreads()), sum(client.nthreads().values()))
        # pure=False: a task is never merged with another one that has equal
        # arguments (a rerun after a failure must really run).
        executor = client.get_executor(pure=False)
        try:
            yield executor
        finally:
            executor.shutdown(wait=False)
            client.close()
    elif num_jobs > 1:
        with ProcessPoolExecutor(num_jobs) as pool:
            yield pool
    else:
        yield None


def bounded_map(
    fn: Callable[[J], R],
    jobs: Iterable[J],
    executor: Optional[Executor],
    window: Optional[int] = None,
    ordered: bool = True,
) -> Iterator[Tuple[J, R]]:
    """``(job, fn(job))`` for every job, computed on ``executor`` (inline when None).

    :param window: jobs in flight at most (default: twice the executor's slots).
    :param ordered: yield in the order of ``jobs``; else as tasks complete (a progress
        bar fed from here then moves with the work, not with the slowest task).
    A failed task raises here; the jobs not yet finished are cancelled.
    """
    if executor is None:
        for job in jobs:
            yield job, fn(job)
        return
    window = window or 2 * cluster_slots(executor)
    if ordered:
        queue: Deque[Tuple[Future, J]] = deque()
        try:
            for job in jobs:
                queue.append((executor.submit(fn, job), job))
                if len(queue) >= window:
                    fut, done_job = queue.popleft()
                    yield done_job, fut.result()
            while queue:
                fut, done_job = queue.popleft()
                yield done_job, fut.result()
        finally:
            for fut, _ in queue:
                fut.cancel()
        return
    pending: Dict[Future, J] = {}
    try:
        for job in jobs:
            pending[executor.submit(fn, job)] = job
            if len(pending) >= window:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    yield pending.pop(fut), fut.result()
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                yield pending.pop(fut), fut.result()
    finally:
        for fut in pending:
            fut.cancel()
