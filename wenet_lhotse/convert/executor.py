"""Where conversion tasks run: inline, a local process pool, or a Dask cluster.

:func:`map_tasks` runs one function over a stream of jobs through the one bounded
submit loop (:func:`~wenet_lhotse.formats.parallel.map_bounded`):

* ``cluster=None``: a local process pool of ``num_jobs`` (the default; inline for 1);
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
"""

from __future__ import annotations

import logging
from concurrent.futures import Executor
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Optional, Tuple, TypeVar

from wenet_lhotse.formats.parallel import map_bounded

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
def open_cluster(address: str, timeout: float = 30.0) -> Iterator[Executor]:
    """The executor of a Dask client connected to the scheduler at ``address``."""
    client = _dask_client(address, timeout)
    logger.info("Dask cluster %s: %d workers, %d threads", address,
                len(client.nthreads()), sum(client.nthreads().values()))
    # pure=False: a task is never merged with another one that has equal arguments.
    executor = client.get_executor(pure=False)
    try:
        yield executor
    finally:
        executor.shutdown(wait=False)
        client.close()


def map_tasks(fn: Callable[[J], R], jobs: Iterable[J], *, num_jobs: int = 1,
              cluster: Optional[str] = None, ordered: bool = True,
              timeout: float = 30.0) -> Iterator[Tuple[J, R]]:
    """``(job, fn(job))`` for every job: on the Dask cluster at ``cluster``, else on
    ``num_jobs`` local processes (inline for 1). Bounded and ordered (or as
    completed) as :func:`~wenet_lhotse.formats.parallel.map_bounded`, which runs it."""
    if not cluster:
        yield from map_bounded(fn, jobs, num_jobs, ordered=ordered)
        return
    with open_cluster(cluster, timeout) as executor:
        yield from map_bounded(fn, jobs, cluster_slots(executor), executor=executor,
                               ordered=ordered)
