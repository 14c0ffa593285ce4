"""Where conversion tasks run: inline, a local process pool, or a Dask cluster.

:func:`map_tasks` runs one function over a stream of jobs through the one bounded
submit loop (:func:`~wenet_lhotse.io.parallel.map_bounded`):

* ``cluster=None``: a local pool of ``num_jobs`` processes, the package's one
  :class:`~wenet_lhotse.io.pool.ProcessPool` (the default; inline for 1);
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

A cluster's size is not fixed: jobs of ``SLURMCluster.scale(jobs=N)`` join while the
command runs, and workers leave. The tasks in flight follow the threads there are now
(:class:`LiveSlots`, about two per thread, asked of the scheduler at most once a second),
not those at connect time. A scheduler lost mid-job raises :class:`ClusterError` (one
line; the Dask client's own traceback logs are held back while the cluster is open).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import CancelledError, Executor
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Optional, Tuple, TypeVar

from wenet_lhotse.io.parallel import map_bounded

logger = logging.getLogger(__name__)

J = TypeVar("J")
R = TypeVar("R")


class ClusterError(RuntimeError):
    """The Dask scheduler cannot be reached or Dask is not installed (one line)."""


def _dask_client(address: str, timeout: float):
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError("--cluster needs Dask: pip install 'dask[distributed]' (or, "
                           "in the wenet-lhotse clone: pip install -e '.[cluster]')") from None
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as err:
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: "
                           f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
                           ) from None


def cluster_slots(executor: Executor, timeout: Optional[float] = None) -> int:
    """Threads across the cluster's workers now (1 when it has none yet); waits at most
    ``timeout`` seconds for the scheduler's answer."""
    client = getattr(executor, "_client", None)
    if client is None:
        return getattr(executor, "_max_workers", 1)
    return max(1, sum(client.nthreads(callback_timeout=timeout).values()))


class LiveSlots:
    """:func:`cluster_slots` as a function of time, asked of the scheduler at most every
    ``interval`` seconds: the submit loop calls it before each submission, so the tasks
    in flight follow workers that join after the command started (``SLURMCluster.scale``
    starts jobs that may wait in the queue) or leave. While the scheduler does not
    answer, the last count stands (the loop's own wait then reports the loss)."""

    def __init__(self, executor: Executor, interval: float = 1.0):
        self.executor, self.interval = executor, interval
        self.slots, self.changes = cluster_slots(executor), 0
        self._asked = time.monotonic()

    def __call__(self) -> int:
        now = time.monotonic()
        client = getattr(self.executor, "_client", None)
        if getattr(client, "status", "running") in ("closing", "closed"):
            # the client gave up reconnecting: the futures it held are released without a
            # word to the executor's futures, which would then wait forever
            raise CancelledError("the Dask client closed: its scheduler was lost")
        if now - self._asked >= self.interval and getattr(client, "status", "") == "running":
            self._asked = now
            try:
                slots = cluster_slots(self.executor, timeout=5 * self.interval)
            except Exception:  # the scheduler is gone: the tasks' futures will say so
                return self.slots
            if slots != self.slots:
                logger.info("Dask cluster: %d threads (was %d)", slots, self.slots)
                self.slots, self.changes = slots, self.changes + 1
        return self.slots


#: the loggers through which a lost scheduler reaches the terminal as tracebacks
_CLIENT_LOGGERS = ("distributed.client", "tornado.application")


class _QuietClient(logging.Filter):
    """Drops the Dask client's own error records (a lost scheduler logs an empty message
    with a traceback): the command reports that loss in one line itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            logger.debug("Dask client: %s", record.getMessage())
            return False
        return True


@contextmanager
def open_cluster(address: str, timeout: float = 30.0) -> Iterator[Executor]:
    """The executor of a Dask client connected to the scheduler at ``address``."""
    client = _dask_client(address, timeout)
    logger.info("Dask cluster %s: %d workers, %d threads", address,
                len(client.nthreads()), sum(client.nthreads().values()))
    # pure=False: a task is never merged with another one that has equal arguments.
    executor = client.get_executor(pure=False)
    quiet = _QuietClient()
    for name in _CLIENT_LOGGERS:
        logging.getLogger(name).addFilter(quiet)
    try:
        yield executor
    finally:
        try:
            executor.shutdown(wait=False)  # cancels the tasks still queued
        except Exception:
            # the client gave up on a lost scheduler (its tasks went with it): the cancel's
            # ClosedClientError must not replace the command's own one-line error
            if client.status not in ("closing", "closed"):
                raise
        client.close()
        for name in _CLIENT_LOGGERS:
            logging.getLogger(name).removeFilter(quiet)


def _scheduler_lost(executor: Executor, err: BaseException) -> bool:
    """Whether ``err``, raised while waiting for the cluster's tasks, means the scheduler
    went away (not that a task failed)."""
    if isinstance(err, CancelledError):  # we cancel nothing while the loop runs
        return True
    client = getattr(executor, "_client", None)
    return (isinstance(err, (OSError, TimeoutError))
            and getattr(client, "status", "running") != "running")


def map_tasks(fn: Callable[[J], R], jobs: Iterable[J], *, num_jobs: int = 1,
              cluster: Optional[str] = None, ordered: bool = True,
              timeout: float = 30.0) -> Iterator[Tuple[J, R]]:
    """``(job, fn(job))`` for every job: on the Dask cluster at ``cluster``, else on
    ``num_jobs`` local processes (inline for 1). Bounded and ordered (or as
    completed) as :func:`~wenet_lhotse.io.parallel.map_bounded`, which runs it.

    On a cluster the tasks in flight follow its threads (:class:`LiveSlots`: workers
    that join later get work); a scheduler lost mid-job raises :class:`ClusterError`
    (one line): the outputs already written stay, and a rerun of a Shar conversion
    writes only the shards still missing."""
    if not cluster:
        yield from map_bounded(fn, jobs, num_jobs, ordered=ordered)
        return
    with open_cluster(cluster, timeout) as executor, scheduler_loss(executor, cluster):
        yield from map_bounded(fn, jobs, LiveSlots(executor), executor=executor,
                               ordered=ordered)


@contextmanager
def scheduler_loss(executor: Executor, address: str) -> Iterator[None]:
    """Turns the errors of a scheduler lost while the block waits for its tasks into
    one :class:`ClusterError` line; a task's own errors pass unchanged."""
    try:
        yield
    except (CancelledError, OSError, TimeoutError) as err:
        if not _scheduler_lost(executor, err):
            raise
        raise ClusterError(
            f"lost the Dask scheduler at {address} mid-job ({type(err).__name__}); what "
            "was written is kept: rerun the same command to finish") from None
